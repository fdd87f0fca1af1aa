"""Record the values of every theory engine and of the Monte Carlo on a small grid (tests/data/front_grid.json).

Run once with the code *before* a change of the front (``python tests/data/record_front_grid.py``);
tests/test_layer.py then checks that the front reproduces every recorded value to 1e-12 relative.
The grid calls the public wrappers ``sa.memorization_error`` and ``sa.simulate`` only, so it
records what users got, whatever engine answered.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

import symattn as sa


def heads_of(p, H, r, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((p, r)) @ rng.standard_normal((r, p)) / np.sqrt(p * r) for _ in range(H)]


def weights(p, seed, rank=None):
    rng = np.random.default_rng(seed)
    if rank is None:
        return rng.standard_normal((p, p)) / np.sqrt(p)
    return rng.standard_normal((p, rank)) @ rng.standard_normal((rank, p)) / np.sqrt(p * rank)


def mu_of(p, snr, seed):
    v = np.random.default_rng(seed).standard_normal(p)
    return np.sqrt(snr) * v / np.linalg.norm(v)


P = 40
GAMMA = [0.05, 0.5, 5.0]
#: name -> (keyword arguments of sa.memorization_error besides f, c, gamma; the inputs are rebuilt by CASES)
CASES = {
    "paper": dict(f="tanh", c=0.5, kw=dict(geometry={"snr": 1.0, "wk2": 1.0, "wq2": 1.0, "mu_wk": 1.0,
                                                      "mu_wq": 1.0, "wk_wq": 1.0}, model="both")),
    "paper_quadrature": dict(f="erf", c=1.5, kw=dict(model="both", n=300)),
    "paper_mpmath": dict(f="tanh", c=0.7, kw=dict(backend="mpmath", dps=30, model="attention")),
    "paper_ridgeless": dict(f="tanh", c=0.5, gamma=[0.0, 0.1], kw=dict(model="both")),
    "finite_p": dict(f="tanh", c=0.3, gamma=[0.03, 0.3], kw=dict(geometry={"snr": 3.0, "wk2": 3.0, "wq2": 3.0,
                                                                            "mu_wk": 3.0, "mu_wq": 3.0, "wk_wq": 3.0},
                                                                  n=1000, correction="finite-p")),
    "general_w": dict(f="tanh", c=0.5, kw=dict(weights=("W", P, 1, None), mu=("mu", P, 1.0, 2), model="both")),
    "general_w_c2": dict(f="relu", c=2.0, kw=dict(weights=("W", P, 3, None))),
    "hermite_blocks": dict(f="tanh", c=1.0, kw=dict(weights=("W", P, 4, 4), mu=("mu", P, 0.5, 5))),
    "weights_residual": dict(f="tanh", c=0.5, kw=dict(weights=("W", P, 6, None), residual=True)),
    "concat": dict(f="tanh", c=0.5, kw=dict(heads=("H", P, 3, 4, 7), readout="concat")),
    "concat_identical": dict(f="tanh", c=0.5, kw=dict(heads=("Hsame", P, 2, 4, 8), readout="concat")),
    "sum": dict(f="gelu", c=1.0, kw=dict(heads=("H", P, 3, 4, 9), readout="sum", mu=("mu", P, 1.0, 10))),
    "sum_residual": dict(f="tanh", c=0.5, kw=dict(heads=("H", P, 2, 4, 11), readout="sum", residual=True)),
    "residual": dict(f="tanh", c=0.5, kw=dict(residual=True, geometry={"snr": 1.0, "wk2": 1.0, "wq2": 1.0,
                                                                          "mu_wk": 1.0, "mu_wq": 1.0, "wk_wq": 1.0},
                                               model="both")),
    "paper_heads_sum": dict(f="tanh", c=0.5, kw=dict(heads=("Ieye", P, 3), readout="sum")),
    "softmax": dict(f="tanh", c=2.0, kw=dict(kernel="softmax", temperature=3.0, n=500, diagonal="zero")),
}
#: the Monte Carlo cases: keyword arguments of sa.simulate
MC_CASES = {
    "plain": dict(f="tanh", n=60, c=0.5, kw=dict(geometry={"snr": 1.0, "wk2": 1.0, "wq2": 1.0, "mu_wk": 1.0,
                                                            "mu_wq": 1.0, "wk_wq": 1.0})),
    "weights": dict(f="tanh", n=80, c=0.5, kw=dict(W=("W", P, 1, None), mu=("mu", P, 1.0, 2))),
    "heads_concat": dict(f="tanh", n=80, c=0.5, kw=dict(heads=("H", P, 3, 4, 7))),
    "heads_sum_residual": dict(f="tanh", n=80, c=0.5, kw=dict(heads=("H", P, 2, 4, 11), readout="sum",
                                                              residual=True)),
    "softmax": dict(f=None, n=80, c=0.5, kw=dict(kernel="softmax", temperature=2.0, diagonal="zero")),
    "trace": dict(f="relu", n=60, c=1.5, kw=dict(trace_estimator=True, residual=True)),
}


def build(v):
    if not isinstance(v, tuple):
        return v
    kind = v[0]
    if kind == "W":
        return weights(v[1], v[2], v[3])
    if kind == "mu":
        return mu_of(v[1], v[2], v[3])
    if kind == "H":
        return heads_of(*v[1:])
    if kind == "Hsame":
        return heads_of(v[1], 1, v[3], v[4]) * v[2]
    if kind == "Ieye":
        return [np.eye(v[1])] * v[2]
    raise AssertionError(v)


def kwargs(case):
    return {k: build(v) for k, v in case["kw"].items()}


def plain(v):
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    arr = np.asarray(v)
    if arr.dtype == object:
        import mpmath

        return [mpmath.nstr(x, 40) for x in arr.reshape(-1)]
    return [float(x) for x in arr.reshape(-1)]


def theory_value(name):
    case = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sa.memorization_error(case["f"], case["c"], case.get("gamma", GAMMA), **kwargs(case))


def mc_value(name):
    case = MC_CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = sa.simulate(case["f"], n=case["n"], c=case["c"], gamma=GAMMA, draws=2, seed=5, progress=False,
                        **kwargs(case))
    return {k: getattr(r, k).tolist() for k in ("attention", "linear", "attention_trace", "linear_trace")
            if getattr(r, k) is not None}


def _flat(v):
    if isinstance(v, dict):
        return {k: _flat(x) for k, x in v.items()}
    arr = np.asarray(v)
    if arr.dtype == object:
        return [float(x) if not isinstance(x, str) else x for x in arr.reshape(-1)]
    return arr.reshape(-1).astype(float).tolist()


def mismatches(new, old, rtol) -> list:
    """Where the values ``new`` differ from the recorded ``old`` (relative ``rtol``; recorded 40-digit mpmath
    strings to 1e-25): a list of descriptions, empty when every value is reproduced."""
    if isinstance(old, dict):
        if set(new) != set(old):
            return [f"models {sorted(new)} != {sorted(old)}"]
        return [f"{k}: {m}" for k in old for m in mismatches(new[k], old[k], rtol)]
    if old and isinstance(old[0], str):  # mpmath: 40-digit strings
        import mpmath

        vals = np.asarray(new, dtype=object).reshape(-1)
        if len(vals) != len(old):
            return [f"{len(vals)} values, {len(old)} recorded"]
        with mpmath.workdps(40):
            return [f"[{i}] {a} != {b}" for i, (a, b) in enumerate(zip(vals, old))
                    if not abs(mpmath.mpf(a) - mpmath.mpf(b)) <= mpmath.mpf(10) ** -25 * abs(mpmath.mpf(b))]
    vals = np.asarray(_flat(new), dtype=float)
    ref = np.asarray(old, dtype=float)
    if vals.shape != ref.shape:
        return [f"shape {vals.shape} != recorded {ref.shape}"]
    return [f"[{i}] {a!r} != {b!r}" for i, (a, b) in enumerate(zip(vals, ref)) if not abs(a - b) <= rtol * abs(b)]


if __name__ == "__main__":
    out = {"theory": {name: plain(theory_value(name)) for name in CASES},
           "montecarlo": {name: mc_value(name) for name in MC_CASES}}
    path = Path(__file__).with_name("front_grid.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path} ({len(CASES)} theory cases, {len(MC_CASES)} Monte Carlo cases)", file=sys.stderr)
