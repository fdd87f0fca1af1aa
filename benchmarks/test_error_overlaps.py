"""The readout's overlaps measured on simulated draws against the linear response (docs/theory.md §14.9), and the
split of the test-error gap into the readout's part and the test moments' part (issue 36).

    python benchmarks/test_error_overlaps.py    # docs/test_error_overlaps.csv

Per draw: β fitted on X = μyᵀ + Z (n = 384/c), its ‖β‖², βᵀμ, βᵀWWᵀβ, βᵀ(W + Wᵀ)β/2; the test error on a fresh
sequence; and E_test(β_MC) = 1 − 2β_MCᵀm + β_MCᵀCβ_MC with the theory's m, C. Then
MC − theory = [MC − E_test(β_MC)] (the test moments m, C) + [E_test(β_MC) − theory] (the readout's moments).
"""
import csv
from pathlib import Path

import numpy as np

import symattn as sa
from symattn.generalization import general_w_test_error
from symattn.montecarlo import kernel_matrix

SETTINGS = [("minilm:2", "tanh", 0.5, "top"), ("minilm:5", "tanh", 0.5, "top"), ("minilm:2", "relu", 1.0, "top"),
            ("minilm:0:0", "gelu", 1.0, "top"), ("minilm:3:5", "relu", 1.0, "zero"), ("minilm:0:0", "tanh", 1.0, "zero")]
GAMMAS = (0.01, 0.1, 1.0, 10.0)
DRAWS, SEED = 8, 37
OUT = Path(__file__).resolve().parent.parent / "docs" / "test_error_overlaps.csv"


def features(f, X, W):
    return X @ kernel_matrix(f, X, W) / np.sqrt(1.0)


def draw(rng, mu, p, n):
    y = rng.permutation(np.repeat([1.0, -1.0], n // 2 + 1)[:n])
    return mu[:, None] * y[None, :] + rng.standard_normal((p, n)), y


def main():
    rows = []
    for w, f, c, mus in SETTINGS:
        layer = sa.Layer(f, weights=w)
        W, p = layer.weights, layer.p
        mu = layer.signal(mus, snr=None if mus == "zero" else 1.0)
        mu = np.zeros(p) if mu is None else mu
        n = int(round(p / c))
        th = general_w_test_error(layer.activation, c, list(GAMMAS), W, mu)
        mv, C = th["m"], th["C"]
        Ws = (W + W.T) / 2
        rng = np.random.default_rng(SEED)
        meas = []
        for _ in range(DRAWS):
            X, y = draw(rng, mu, p, n)
            Phi = features(layer.activation, X, W)
            lam, V = np.linalg.eigh(Phi @ Phi.T / n)
            b0 = V.T @ (Phi @ y / n)
            Xt, yt = draw(rng, mu, p, n)
            Pt = features(layer.activation, Xt, W)
            row = []
            for g in GAMMAS:
                beta = V @ (b0 / (lam + g))
                et = float(np.mean((yt - Pt.T @ beta) ** 2))
                row.append([beta @ beta, beta @ mu, beta @ W @ W.T @ beta, beta @ Ws @ beta, et,
                            1 - 2 * beta @ mv + beta @ C @ beta])
            meas.append(row)
        meas = np.array(meas)   # draws × gamma × 6
        mean, se = meas.mean(0), meas.std(0, ddof=1) / np.sqrt(DRAWS)
        for i, g in enumerate(GAMMAS):
            r = th["readout"][i]
            theory = [r.quad(lambda _: np.eye(p)), r.beta @ mu, r.quad(lambda W_: W_ @ W_.T), r.quad(lambda W_: (W_ + W_.T) / 2),
                      th["E_test"][i], th["E_test"][i]]
            names = ["norm2", "beta_mu", "bWWtb", "bWsb", "E_test", "E_test_of_mc_beta"]
            rec = {"weights": w, "f": f, "c": c, "mu": mus, "gamma": g}
            for k, nm in enumerate(names):
                rec[nm + "_mc"], rec[nm + "_se"], rec[nm + "_theory"] = mean[i, k], se[i, k], theory[k]
            rows.append(rec)
            print(w, f, c, mus, g, " ".join(f"{nm}: {mean[i, k]:.4g}±{se[i, k]:.2g} / {theory[k]:.4g}"
                                               for k, nm in enumerate(names[:5])),
                  f"| E_test(β_MC) {mean[i, 5]:.4g}", flush=True)
    with open(OUT, "w", newline="") as fh:
        wr = csv.DictWriter(fh, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)


if __name__ == "__main__":
    main()
