r"""The test-error theory (docs/theory.md §14) against exact Monte Carlo on a grid.

For every activation f, signal (μ = 0, or w_K = w_Q = μ with ‖μ‖² = snr), ratio c and γ this runs
the Monte Carlo :func:`symattn.simulate` with ``error=('train', 'test')`` at n tokens (``draws``
independent draws, each tested on its own fresh sequence) and the theory
:func:`symattn.generalization_error` with the finite-p diagonal d_n (``n=n``), and compares them
cell by cell:

  gap = E^{MC} − E^{th},  rel = gap/E^{th},  pass ⇔ |gap| ≤ max(3 se, 3 % |E^{th}|).

Rows (one per cell, the train error alongside) are appended to a CSV as each configuration
finishes, so an interrupted run continues with ``resume=True``.

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


def grid_rows(f: str, c: float, snr: float, n: int, draws: int, gammas=GAMMAS, seed: int = 0,
              k_se: float = 3.0, k_rel: float = 0.03, geometry=None) -> list:
    r"""The cells of one configuration (f, c, snr): train and test, Monte Carlo against theory.

    ``geometry`` (a :class:`~symattn.Geometry`) replaces the aligned geometry of ``snr``.

    Examples
    --------
    >>> rows = grid_rows("tanh", 0.5, 1.0, n=80, draws=2, gammas=(1.0,))
    >>> sorted({r["error"] for r in rows}), rows[0]["n"]
    (['test', 'train'], 80)
    """
    from symattn.layer import Layer

    layer = Layer(f)
    geo = _geometry(snr) if geometry is None else geometry
    t0 = time.perf_counter()
    mc = layer.simulate(n=n, c=c, gamma=list(gammas), geometry=geo, draws=draws, seed=seed, models=("attention",),
                        progress=False, error=("train", "test"))
    seconds = time.perf_counter() - t0
    rows = []
    for error, values, sems in (("train", mc.attention_mean, mc.attention_sem),
                                ("test", mc.attention_test_mean, mc.attention_test_sem)):
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
             resume: bool = True, progress: bool = True) -> list:
    """Every configuration of the grid, appended to the CSV ``out`` (skipping those already there with
    ``resume``); returns all rows of the file."""
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
                    rows = grid_rows(f, c, snr, n, draws, gammas)
                    w.writerows(rows)
                    fh.flush()
                    if progress:
                        worst = max((r for r in rows if r["error"] == "test"), key=lambda r: abs(r["rel"]))
                        print(f"{f} c={c} snr={snr}: test within {sum(r['passed'] for r in rows if r['error'] == 'test')}"
                              f"/{len(gammas)}, worst {worst['rel']:+.1%} at γ={worst['gamma']:g}, "
                              f"{rows[0]['seconds']:.0f} s", flush=True)
    with out.open() as fh:
        return list(csv.DictReader(fh))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="The test-error theory (docs/theory.md §14) against exact Monte Carlo.")
    ap.add_argument("--out", required=True, help="CSV file (appended to; --fresh to start over)")
    ap.add_argument("--activations", nargs="+", default=list(ACTIVATIONS))
    ap.add_argument("--c", nargs="+", type=float, default=list(CS))
    ap.add_argument("--snr", nargs="+", type=float, default=list(SNRS))
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--draws", type=int, default=16)
    ap.add_argument("--fresh", action="store_true")
    a = ap.parse_args(argv)
    run_grid(a.out, a.activations, a.c, a.snr, a.n, a.draws, resume=not a.fresh)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
