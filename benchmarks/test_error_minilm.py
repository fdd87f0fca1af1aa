"""The test error of real MiniLM layers, theory (docs/theory.md §14.9) against exact Monte Carlo (issue 36).

    python benchmarks/test_error_minilm.py mc      # the Monte Carlo, once: docs/test_error_minilm_mc.csv
    python benchmarks/test_error_minilm.py theory  # the theory beside the saved Monte Carlo: docs/test_error_minilm.csv
    python benchmarks/test_error_minilm.py heldout mc|theory   # the held-out cases: docs/test_error_heldout*.csv

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
#: held-out cases, chosen before they were run (other layers, heads, activations, c and snr; seed 37):
#: (weights, f, c, mu, snr); the structure is the default of each W
HELDOUT = [("minilm:1:5", "erf", 0.75, "top", 1.0), ("minilm:4", "gelu", 1.5, "top", 2.0),
           ("minilm:3:7", "tanh", 2.0, "zero", None), ("minilm:1", "relu", 1.0, "top", 1.0),
           ("minilm:0", "erf", 0.5, "zero", None), ("minilm:4:2", "gelu", 1.0, "zero", None),
           ("minilm:5:11", "relu", 0.5, "top", 2.0), ("minilm:3", "tanh", 0.75, "random:3", 1.0)]
HELDOUT_SEED = 37


def settings():
    for w in LAYERS:
        for f in ACTS:
            for c in CS:
                for mu in MUS:
                    yield w, f, c, mu, None if mu == "zero" else 1.0


def run_mc(cases=None, path=MC_CSV, seed=SEED):
    cases = list(settings()) if cases is None else cases
    MC_CSV_ = path
    done = set()
    if MC_CSV_.exists():
        with open(MC_CSV_) as fh:
            done = {(r["weights"], r["f"], float(r["c"]), r["mu"]) for r in csv.DictReader(fh)}
    new = not MC_CSV_.exists()
    with open(MC_CSV_, "a", newline="") as fh:
        w_ = csv.writer(fh)
        if new:
            w_.writerow(["weights", "f", "c", "mu", "n", "gamma", "test_mc", "test_se", "train_mc", "train_se",
                         "lr_test_mc", "lr_test_se", "draws", "seed", "seconds", "snr"])
        for w, f, c, mu, snr in cases:
            if (w, f, c, mu) in done:
                continue
            layer = sa.Layer(f, weights=w)
            m = layer.signal(mu, snr=snr)
            n = int(round(layer.p / c))
            t = time.time()
            r = sa.simulate(f, n=n, c=c, gamma=list(GAMMAS), weights=w, mu=m, draws=DRAWS, seed=seed,
                            error=("train", "test"))
            sec = time.time() - t
            T, E, L = r.attention_test, r.attention, r.linear_test
            se = lambda a: a.std(0, ddof=1) / np.sqrt(a.shape[0])
            for i, g in enumerate(GAMMAS):
                w_.writerow([w, f, c, mu, n, g, T[:, i].mean(), se(T)[i], E[:, i].mean(), se(E)[i],
                             L[:, i].mean(), se(L)[i], DRAWS, seed, round(sec, 2), "" if snr is None else snr])
            fh.flush()
            print(w, f, c, mu, f"{sec:.1f}s", flush=True)


def run_theory(path=MC_CSV, out_path=OUT_CSV):
    from symattn.generalization import general_w_test_error

    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    groups = {}
    for r in rows:
        groups.setdefault((r["weights"], r["f"], float(r["c"]), r["mu"]), []).append(r)
    out = []
    for (w, f, c, mu), rs in groups.items():
        layer = sa.Layer(f, weights=w)
        snr = rs[0].get("snr", "")
        m = layer.signal(mu, snr=None if mu == "zero" else float(snr) if snr not in ("", None) else 1.0)
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
    with open(out_path, "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(out[0]))
        wr.writeheader()
        wr.writerows(out)
    ok = sum(o["within"] for o in out)
    print(f"{ok}/{len(out)} cells within max(3 se, 3 %)")


if __name__ == "__main__":
    if sys.argv[1] == "heldout":
        mc, out = DOCS / "test_error_heldout_mc.csv", DOCS / "test_error_heldout.csv"
        run_mc(HELDOUT, mc, HELDOUT_SEED) if sys.argv[2] == "mc" else run_theory(mc, out)
    else:
        {"mc": run_mc, "theory": run_theory}[sys.argv[1]]()
