"""Speed of the general-W theory (docs/theory.md §12) at p = 384, in one run.

Prints, with the BLAS threads set by threadpoolctl (``--threads``, default 1):
- γ-points per second of :func:`symattn.memorization_error` with ``weights=W`` (numpy), for a
  MiniLM layer when the real-weights extra is installed, else a Ginibre W, with μ = 0 and μ = top
  (the latter with the strong-direction correction), and for the symmetric part of W (eigen path);
- the time of one dense 2p×2p inverse (the cost of one Dyson evaluation before the p×p route of
  docs/theory.md §12.2, which takes two p×p inverses instead) and the evaluations per γ;
- the ratio of one theory γ-point to one exact Monte Carlo draw at the same size (n = 768, c = 0.5).

Target (issue): at least 2 γ-points/s, and one theory point cheaper than one Monte Carlo draw.

Run:  python benchmarks/bench_general_w.py [--threads 1] [--draws 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import symattn as sa
from symattn.backends import general_w as gw


def weights(p=384):
    try:
        from symattn import realweights as rw

        return rw.layer_weight(rw.load_minilm(), 2), "MiniLM layer 2 (all heads, unit scale)"
    except sa.RealWeightsUnavailable:
        rng = np.random.default_rng(0)
        return rng.standard_normal((p, p)) / np.sqrt(p), "Ginibre G/sqrt(p)"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--draws", type=int, default=4)
    args = ap.parse_args(argv)
    gammas = [0.01, 0.1, 1.0, 10.0]
    W, name = weights()
    p = W.shape[0]
    from symattn.realweights import signal_direction

    with threadpool_limits(limits=args.threads):
        libs = ", ".join(f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info())
        print(f"BLAS threads (threadpoolctl): {libs}")
        print(f"W: {name}, p = {p}; c = 0.5 (n = {round(p / 0.5)}), tanh, gamma = {gammas}")
        t = time.perf_counter()
        for _ in range(3):
            np.linalg.inv(np.eye(2 * p) + 0.1 * np.vstack([np.hstack([W, W.T]), np.hstack([W, W.T])]))
        t_inv = (time.perf_counter() - t) / 3
        print(f"one dense {2 * p}x{2 * p} inverse: {t_inv * 1e3:.1f} ms")
        # warm-up: activation constants and the one-time imports (scipy.linalg, scipy.stats of the finite-p
        # diagonal: about 2 s), by a μ ≠ 0 call at p = 16; every p = 384 set-up is still timed below
        sa.memorization_error("tanh", 0.5, [1.0], weights=W)
        rng = np.random.default_rng(1)
        sa.memorization_error("tanh", 0.5, [1.0], weights=rng.standard_normal((16, 16)) / 4, mu=np.ones(16) / 4)
        per_point = []
        for label, mu in (("mu = 0", None), ("mu = top, ||mu||^2 = 1", signal_direction(W, 1.0))):
            t = time.perf_counter()
            out = gw.general_w_error(sa.activation("tanh"), 0.5, gammas, W, mu)
            dt = time.perf_counter() - t
            per_point.append(dt / len(gammas))
            extra = " (incl. the strong-direction correction)" if mu is not None else ""
            print(f"theory, {label}: {len(gammas) / dt:.2f} gamma-points/s{extra} "
                  f"({out['iterations'] / len(gammas):.1f} Dyson evaluations per gamma)")
            if mu is not None:
                gw._CORRECTION_CACHE.clear()   # the finite-p latent kernels stay cached: the per-call cost
                t = time.perf_counter()
                gw.strong_direction_correction(sa.activation("tanh"), 0.5, gammas, W, mu)
                print(f"  of which the strong-direction correction, set-up cached: {time.perf_counter() - t:.2f} s "
                      f"for {len(gammas)} gamma")
        # a symmetric W takes the eigen path (one eigh, then O(p^2) per evaluation; docs/theory.md §12.5)
        Ws = (W + W.T) / 2
        Ws = Ws / np.sqrt(np.sum(Ws * Ws) / p)
        t = time.perf_counter()
        gw.general_w_error(sa.activation("tanh"), 0.5, gammas, Ws, None)
        dt = time.perf_counter() - t
        print(f"theory, symmetric (W + W^T)/2 (eigen path), mu = 0: {len(gammas) / dt:.2f} gamma-points/s")
        t = time.perf_counter()
        sa.simulate("tanh", n=round(p / 0.5), c=0.5, gamma=gammas, W=W, draws=args.draws, seed=0,
                    models=("attention",), progress=False)
        t_draw = (time.perf_counter() - t) / args.draws
        t_point = float(np.mean(per_point))
        print(f"Monte Carlo: {t_draw:.3f} s per draw (n = {round(p / 0.5)}, all 4 gamma from one eigh)")
        print(f"ratio one theory gamma-point / one Monte Carlo draw: {t_point / t_draw:.2f}")


if __name__ == "__main__":
    main()
