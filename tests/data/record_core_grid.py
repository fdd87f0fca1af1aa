"""Record the numerical core's values on every engine and backend (tests/data/core_grid.json).

Run once with the code *before* a change of ``symattn/backends`` (``python tests/data/record_core_grid.py``);
tests/test_core_grid.py then checks every value to 1e-12 relative (float64) and 1e-25 (mpmath).
It adds to the front's grid (record_front_grid.py, the public wrappers at float64 and one mpmath case)
what the numerical core owns: the closed form at 30 and 60 digits and every rank, the quadrature
ladder, the a1 = d = 0 reduction, finite p, general W and the variants in mpmath, the sensitivities,
the limits, and a generated standalone solver.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

import symattn as sa

sys.path.insert(0, str(Path(__file__).parent))
from record_front_grid import mu_of, plain, weights  # noqa: E402

P = 24
GAMMA = [1e-3, 0.1, 10.0]
ALIGNED = {"snr": 1.5, "wk2": 1.5, "wq2": 1.5, "mu_wk": 1.5, "mu_wq": 1.5, "wk_wq": 1.5}
#: a rank-2 geometry: the Gram matrix of (μ, w_K¹, w_K², w_Q¹, w_Q²), positive definite
RANK2 = {"gram": [[1.0, 0.5, 0.2, 0.4, 0.1], [0.5, 1.0, 0.2, 0.3, 0.0], [0.2, 0.2, 0.6, 0.1, 0.2],
                  [0.4, 0.3, 0.1, 1.0, 0.1], [0.1, 0.0, 0.2, 0.1, 0.8]], "rank": 2}

#: name -> a call of the public API (values only); every backend-dependent path of the core
CASES = {
    "closed_numpy": lambda: {str(c): sa.memorization_error("gelu", c, GAMMA, geometry=ALIGNED, model="both")
                             for c in (0.3, 1.0, 2.5)},
    "closed_mp30": lambda: sa.memorization_error("tanh", 1.0, GAMMA, geometry=ALIGNED, backend="mpmath", dps=30),
    "closed_mp60": lambda: sa.memorization_error("erf", 2.5, [0.1, 10.0], backend="mpmath", dps=60),
    "closed_rank2": lambda: sa.memorization_error("tanh", 0.7, GAMMA, geometry=RANK2),
    "closed_rank2_mp": lambda: sa.memorization_error("tanh", 0.7, [0.1], geometry=RANK2, backend="mpmath", dps=30),
    "reduced_a1_zero": lambda: {str(c): sa.memorization_error("x**2 - 1", c, GAMMA, diagonal="zero")
                                        for c in (0.5, 2.0)},
    "reduced_a1_zero_mp": lambda: sa.memorization_error("x**2 - 1", 2.0, [0.1], diagonal="zero", backend="mpmath",
                                                        dps=30),
    "quadrature": lambda: {str(c): sa.memorization_error("relu", c, GAMMA, n=400, model="both") for c in (0.5, 1.5)},
    "zero_diagonal": lambda: sa.memorization_error("x**3 - 3*x", 1.0, GAMMA, diagonal="zero"),
    "ridgeless": lambda: sa.memorization_error("tanh", [0.3, 0.8], [0.0], model="both"),
    "ridgeless_mp": lambda: sa.memorization_error("tanh", 0.5, [0.0], backend="mpmath", dps=30),
    "finite_p": lambda: sa.memorization_error("tanh", 0.3, [0.01, 1.0], geometry=ALIGNED, n=600,
                                              correction="finite-p"),
    "general_w": lambda: {str(c): sa.memorization_error("tanh", c, GAMMA, weights=weights(P, 21), mu=mu_of(P, 1.0, 22))
                          for c in (0.5, 2.0)},
    "general_w_mp": lambda: sa.memorization_error("tanh", 1.0, [0.1], weights=weights(P, 21), backend="mpmath",
                                                  dps=30),
    "hermite_blocks_mp": lambda: sa.memorization_error("tanh", 1.0, [0.1], weights=weights(P, 23, 2),
                                                       backend="mpmath", dps=30),
    "sum_mp": lambda: sa.memorization_error("tanh", 0.5, [0.1], heads=[np.eye(P)] * 2, readout="sum",
                                            backend="mpmath", dps=30),
    "residual_mp": lambda: sa.memorization_error("tanh", 0.5, [0.1], residual=True, backend="mpmath", dps=30),
    "softmax_mp": lambda: sa.memorization_error(None, 2.0, [0.1], kernel="softmax", temperature=2.0, n=500,
                                                diagonal="zero", backend="mpmath", dps=30),
    "sensitivity": lambda: sa.sensitivity("tanh", 1.0, [0.01, 1.0], geometry=ALIGNED, wrt="snr"),
    "sensitivity_gamma_mp": lambda: sa.sensitivity("tanh", 1.0, [1.0], wrt="gamma", backend="mpmath", dps=30),
    "limits": lambda: {m: {k: float(v.value) for k, v in getattr(r, m).items() if v.value is not None}
                       for r in [sa.limits("tanh", 0.5, 1.0, geometry=ALIGNED)] for m in ("attention", "linear")},
    "generated_solver": lambda: _generated("gelu", [0.3, 2.5], GAMMA),
}


def _generated(f, cs, gammas):
    from symattn.codegen import generate_solver

    ns = {}
    exec(compile(generate_solver(f, generated="2000-01-01 00:00 UTC"), "solver.py", "exec"), ns)
    return [float(ns["attention_error"](c, g)) for c in cs for g in gammas]


def value(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CASES[name]()


if __name__ == "__main__":
    out = {name: plain(value(name)) for name in CASES}
    path = Path(__file__).with_name("core_grid.json")
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {path} ({len(CASES)} cases)", file=sys.stderr)
