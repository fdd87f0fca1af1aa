r"""The test-error theory (docs/theory.md §14) against exact Monte Carlo on a grid.

For every activation f, signal (μ = 0, or w_K = w_Q = μ with ‖μ‖² = snr), ratio c and γ this runs
the Monte Carlo :func:`symattn.simulate` with ``error=('train', 'test')`` at n tokens (``draws``
independent draws, each tested on its own fresh sequence) and the theory
:func:`symattn.generalization_error` with the finite-p diagonal d_n (``n=n``), and compares them
cell by cell:

  gap = E^{MC} − E^{th},  rel = gap/E^{th},  pass ⇔ |gap| ≤ max(3 se, 3 % |E^{th}|).

Rows (one per cell, the train error alongside) are appended to a CSV as each configuration
finishes, so an interrupted run continues with ``resume=True``.

The grids of the a1 = 0 activations (docs/theory.md §14.10) were run with ``--activations he3 abs he2``
(docs/generalization_a1zero.csv) and, by a second simulator, ``--independent --activations he3 cos abs``
(docs/generalization_a1zero_independent.csv). Their test cells are in the accuracy atlas
(:func:`symattn.atlas.paper_test_cells`).

Usage::

    python -m symattn.verification.generalization --out docs/generalization_mc.csv
    python -m symattn.verification.generalization --n 1000 --draws 16 --activations tanh relu --out /tmp/g.csv
"""
from __future__ import annotations

import argparse
import csv
import time
import warnings
from pathlib import Path

import numpy as np

GAMMAS = (0.01, 0.1, 1.0, 10.0)
ACTIVATIONS = ("tanh", "relu", "erf", "cos")
CS = (0.5, 1.0, 2.0)
SNRS = (0.0, 1.0)
FIELDS = ("activation", "c", "snr", "gamma", "n", "draws", "error", "mc", "se", "theory", "rel", "passed", "seconds")


def _geometry(snr: float):
    from symattn.model import Geometry

    return Geometry() if snr == 0 else Geometry.aligned(snr)


def independent_mc(f: str, c: float, snr: float, n: int, draws: int, gammas=GAMMAS, seed: int = 0,
                   diagonal: str = "f") -> dict:
    r"""Train and test errors by a simulator independent of :func:`symattn.simulate`'s readout: per draw
    Φ = XK (:func:`symattn.montecarlo.kernel_matrix`), W = I + μμᵀ (aligned, μ = √snr e_1), the eigenvectors of
    ΦᵀΦ/n, β = ΦQŷ/√n, E_train = γ²ŷᵀQ²ŷ, E_test = ‖y′ − Φ′ᵀβ‖²/n on a fresh sequence; one generator
    ``default_rng(seed)`` draws the training and then the test sequence of each draw in turn.

    Returns
    -------
    dict
        ``train``, ``test``: arrays (draws, len(gammas)).

    Examples
    --------
    >>> r = independent_mc("cos", 0.5, 0.0, n=60, draws=2, gammas=(1.0,))
    >>> r["test"].shape, bool(np.all(r["test"] > 1))           # μ = 0: no readout beats predicting 0
    ((2, 1), True)
    """
    from symattn.montecarlo import kernel_matrix, sample_tokens

    p = int(round(c * n))
    rng = np.random.default_rng(seed)
    mu = W = None
    if snr > 0:
        mu = np.zeros(p)
        mu[0] = np.sqrt(snr)
        W = np.eye(p) + np.outer(mu, mu)
    out = {"train": np.zeros((draws, len(gammas))), "test": np.zeros((draws, len(gammas)))}
    for k in range(draws):
        X, y = sample_tokens(n, p, mu, rng)
        Phi = X @ kernel_matrix(f, X, W, diagonal)
        Xt, yt = sample_tokens(n, p, mu, rng)
        Pt = Xt @ kernel_matrix(f, Xt, W, diagonal)
        lam, V = np.linalg.eigh(Phi.T @ Phi / n)
        lam = np.maximum(lam, 0.0)
        yh = V.T @ y / np.sqrt(n)
        for j, g in enumerate(gammas):
            beta = Phi @ (V @ (yh / (lam + g))) / np.sqrt(n)
            out["train"][k, j] = g * g * float(yh @ (yh / (lam + g) ** 2))
            out["test"][k, j] = float(np.mean((yt - Pt.T @ beta) ** 2))
    return out


def grid_rows(f: str, c: float, snr: float, n: int, draws: int, gammas=GAMMAS, seed: int = 0,
              k_se: float = 3.0, k_rel: float = 0.03, geometry=None, independent: bool = False) -> list:
    r"""The cells of one configuration (f, c, snr): train and test, Monte Carlo against theory.

    ``geometry`` (a :class:`~symattn.Geometry`) replaces the aligned geometry of ``snr``. A superlinear f
    (He3, exp) is run with its diagonal zeroed (``diagonal='zero'``), in the Monte Carlo and in the theory.

    Examples
    --------
    >>> rows = grid_rows("tanh", 0.5, 1.0, n=80, draws=2, gammas=(1.0,))
    >>> sorted({r["error"] for r in rows}), rows[0]["n"]
    (['test', 'train'], 80)
    """
    from symattn.activations.activation import activation
    from symattn.layer import Layer

    layer = Layer(f, diagonal="zero" if activation(f).superlinear else "f")   # He3 and the like: K_ii = 0
    geo = _geometry(snr) if geometry is None else geometry
    t0 = time.perf_counter()
    if independent:   # the aligned geometry of snr only
        if geometry is not None:
            raise ValueError("independent=True simulates μ = 0 or the aligned geometry of snr only")
        raw = independent_mc(f, c, snr, n, draws, gammas, seed, layer.diagonal)
        stats = {e: (raw[e].mean(axis=0), raw[e].std(axis=0, ddof=1) / np.sqrt(draws)) for e in raw}
    else:
        mc = layer.simulate(n=n, c=c, gamma=list(gammas), geometry=geo, draws=draws, seed=seed, models=("attention",),
                            progress=False, error=("train", "test"))
        stats = {"train": (mc.attention_mean, mc.attention_sem), "test": (mc.attention_test_mean, mc.attention_test_sem)}
    seconds = time.perf_counter() - t0
    rows = []
    for error, (values, sems) in stats.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the atlas' accuracy warnings are of the train error
            th = np.asarray(layer.theory(c, list(gammas), geometry=geo, n=n, error=error).E, dtype=float)
        for g, m, s, t in zip(gammas, values, sems, th):
            gap = float(m - t)
            rows.append({"activation": f, "c": c, "snr": snr, "gamma": g, "n": n, "draws": draws, "error": error,
                         "mc": float(m), "se": float(s), "theory": float(t), "rel": gap / float(t),
                         "passed": abs(gap) <= max(k_se * float(s), k_rel * abs(float(t))),
                         "seconds": round(seconds, 2)})
    return rows


def run_grid(out, activations=ACTIVATIONS, cs=CS, snrs=SNRS, n: int = 1000, draws: int = 16, gammas=GAMMAS,
             resume: bool = True, progress: bool = True, independent: bool = False) -> list:
    """Every configuration of the grid, appended to the CSV ``out`` (skipping those already there with
    ``resume``); returns all rows of the file. With ``independent``, the Monte Carlo is :func:`independent_mc`
    at seed 1000 + ⌊10c⌋ + ⌊snr⌋ (docs/generalization_a1zero_independent.csv)."""
    out = Path(out)
    done = set()
    if resume and out.exists():
        with out.open() as fh:
            done = {(r["activation"], float(r["c"]), float(r["snr"])) for r in csv.DictReader(fh)}
    new = not out.exists() or not resume
    with out.open("w" if new else "a", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        if new:
            w.writeheader()
        for f in activations:
            for c in cs:
                for snr in snrs:
                    if (f, float(c), float(snr)) in done:
                        continue
                    seed = 1000 + int(10 * c) + int(snr) if independent else 0
                    rows = grid_rows(f, c, snr, n, draws, gammas, seed=seed, independent=independent)
                    w.writerows(rows)
                    fh.flush()
                    if progress:
                        worst = max((r for r in rows if r["error"] == "test"), key=lambda r: abs(r["rel"]))
                        print(f"{f} c={c} snr={snr}: test within {sum(r['passed'] for r in rows if r['error'] == 'test')}"
                              f"/{len(gammas)}, worst {worst['rel']:+.1%} at γ={worst['gamma']:g}, "
                              f"{rows[0]['seconds']:.0f} s", flush=True)
    with out.open() as fh:
        return list(csv.DictReader(fh))


#: the geometries of the held-out cases of docs/generalization_heldout.csv (its ``case`` column; docs/theory.md §14.6)
HELDOUT = {
    4: lambda snr: {"snr": snr},                                                     # signal only, w = 0
    5: lambda snr: {"snr": snr, "wk2": 1.0, "wq2": 1.0, "wk_wq": 1.0},                # w ⊥ μ
    6: lambda snr: {"snr": snr, "wk2": 1.5, "wq2": 0.8, "mu_wk": 0.7, "mu_wq": -0.3, "wk_wq": 0.2},   # a generic Gram
}
#: the grids whose test cells the atlas holds (:func:`symattn.atlas.paper_test_cells`): (block, CSV under docs/)
ATLAS_GRIDS = (("paper-test", "generalization_mc.csv"), ("paper-test-heldout", "generalization_heldout.csv"),
               ("paper-test-a1zero", "generalization_a1zero.csv"),
               ("paper-test-a1zero-independent", "generalization_a1zero_independent.csv"))


def grid_geometry(row):
    """The geometry of a grid row: a held-out case's (:data:`HELDOUT`), else μ = 0 at snr 0 and aligned otherwise.

    Examples
    --------
    >>> grid_geometry({"snr": "2.0", "case": "4"}).gram[1:, 1:].tolist()   # signal only: no weights
    [[0.0, 0.0], [0.0, 0.0]]
    """
    from symattn.model import Geometry

    snr, case = float(row["snr"]), row.get("case")
    if case not in (None, "") and int(case) in HELDOUT:
        return Geometry(**HELDOUT[int(case)](snr))
    return _geometry(snr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The test-error theory (docs/theory.md §14) against exact Monte Carlo.")
    ap.add_argument("--out", required=True, help="CSV file (appended to; --fresh to start over)")
    ap.add_argument("--activations", nargs="+", default=list(ACTIVATIONS))
    ap.add_argument("--c", nargs="+", type=float, default=list(CS))
    ap.add_argument("--snr", nargs="+", type=float, default=list(SNRS))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--independent", action="store_true",
                    help="the Monte Carlo of independent_mc (a simulator apart from symattn.simulate's readout)")
    a = ap.parse_args(argv)
    run_grid(a.out, a.activations, a.c, a.snr, a.n, a.draws, resume=not a.fresh, independent=a.independent)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
