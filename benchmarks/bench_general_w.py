"""Speed of the general-W theory (docs/theory.md §12) at p = 384, in one run.

Prints, with the BLAS threads set by threadpoolctl (``--threads``, default 1):
- γ-points per second of :func:`symattn.memorization_error` with ``weights=W`` (numpy), for a
  MiniLM layer when the real-weights extra is installed, else a Ginibre W, with μ = 0 and μ = top
  (the latter with the strong-direction correction), and for the symmetric part of W (eigen path);
- the time of one dense 2p×2p inverse (the cost of one Dyson evaluation before the p×p route of
  docs/theory.md §12.2, which takes two p×p inverses instead) and the evaluations per γ;
- the ratio of one theory γ-point to one exact Monte Carlo draw at the same size (n = 768, c = 0.5): at μ = 0
  (W's set-up made by a warm-up call), at μ = top including the set-up of that μ (the first call), and at
  μ = top with it cached (a second call, the strong-direction correction recomputed);
- for a single head (MiniLM layer 2 head 0, rank 32, else a rank-32 Gaussian product), the structured
  Hermite-block path of docs/theory.md §12.8 that ``memorization_error`` takes for it: the set-up (the
  constants by quadrature over the latent law, the 4000 token nodes, one SVD; cached per activation and W) and the
  γ-points per second with the set-up cached, μ = 0 and μ = top, and the ratio of one γ-point to one
  Monte Carlo draw of the same head.

- for the full-rank W with ``structure='blocks'`` (docs/theory.md §12.9; ``--blocks-only`` runs only this): the
  set-up of a new (f, W) (the block constants by quadrature over the latent law, the atoms, the token nodes:
  every cache cleared) and the cost of one γ-point against one exact Monte Carlo draw at the same n, at c = 0.5
  (n = 768) and c = 1 (n = 384), μ = 0, with the ratios.

Target (issue): at least 2 γ-points/s, and one theory point cheaper than one Monte Carlo draw; issue 34: a new
(f, W) in at most 5 s of set-up, and one block γ-point no dearer than one draw at c = 0.5 and c = 1.

Run:  python benchmarks/bench_general_w.py [--threads 1] [--draws 4] [--head-only | --blocks-only]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import symattn as sa
from symattn.backends import general_w as gw
from symattn.backends.general_w import strong


def weights(p=384):
    try:
        from symattn import realweights as rw

        return rw.layer_weight(rw.load_minilm(), 2), "MiniLM layer 2 (all heads, unit scale)"
    except sa.RealWeightsUnavailable:
        rng = np.random.default_rng(0)
        return rng.standard_normal((p, p)) / np.sqrt(p), "Ginibre G/sqrt(p)"


def head_weights(p=384, r=32):
    try:
        from symattn import realweights as rw

        return rw.layer_weight(rw.load_minilm(), 2, "unit", head=0), "MiniLM layer 2 head 0 (rank 32, unit scale)"
    except sa.RealWeightsUnavailable:
        rng = np.random.default_rng(2)
        W = rng.standard_normal((p, r)) @ rng.standard_normal((r, p))
        return W / np.sqrt(np.sum(W * W) / p), f"Gaussian product of rank {r}, unit scale"


def single_head(gammas, draws, repeats=3):
    """The Hermite-block path of one head: set-up, γ-points/s (set-up cached) and the ratio to one draw."""
    from symattn.backends.general_w_entry import kernel_structure
    from symattn.realweights import signal_direction

    W, name = head_weights()
    p = W.shape[0]
    print(f"single head: {name}, p = {p}; kernel model: {kernel_structure(W)} (docs/theory.md §12.8)")
    # warm-up of the one-time imports on a rank-2 W at p = 16 (every p = 384 set-up is timed below)
    rng = np.random.default_rng(3)
    small = rng.standard_normal((16, 2)) @ rng.standard_normal((2, 16)) / 4
    sa.memorization_error("tanh", 0.5, [1.0], weights=small, mu=np.ones(16) / 4)
    per_point = []
    for label, mu in (("mu = 0", None), ("mu = top, ||mu||^2 = 1", signal_direction(W, 1.0))):
        t = time.perf_counter()
        sa.memorization_error("tanh", 0.5, gammas, weights=W, mu=mu)   # computes and caches the set-up
        t_first = time.perf_counter() - t
        times = []
        for _ in range(repeats):
            strong.CORRECTIONS.clear()   # the strong-direction correction is recomputed, not looked up
            t = time.perf_counter()
            sa.memorization_error("tanh", 0.5, gammas, weights=W, mu=mu)
            times.append(time.perf_counter() - t)
        dt = min(times)
        per_point.append(dt / len(gammas))
        extra = " (incl. the strong-direction correction)" if mu is not None else ""
        print(f"  blocks, {label}: {len(gammas) / dt:.2f} gamma-points/s with the set-up cached{extra} "
              f"(best of {repeats}); set-up {t_first - dt:.2f} s (first call {t_first:.2f} s)")
    t = time.perf_counter()
    sa.simulate("tanh", n=round(p / 0.5), c=0.5, gamma=gammas, weights=W, draws=draws, seed=0,
                models=("attention",), progress=False)
    t_draw = (time.perf_counter() - t) / draws
    print(f"  Monte Carlo of the head: {t_draw:.3f} s per draw (n = {round(p / 0.5)})")
    print(f"  ratio one block-theory gamma-point / one Monte Carlo draw: {per_point[0] / t_draw:.2f} (mu = 0), "
          f"{per_point[1] / t_draw:.2f} (mu = top)")


def full_rank_blocks(gammas, draws, fname="tanh"):
    """structure='blocks' on the full-rank W: set-up of a new (f, W), then per γ-point against one draw (c = 0.5, 1)."""
    from symattn.backends.general_w import block_constants, hermite, latent

    W, name = weights()
    p = W.shape[0]
    f = sa.activation(fname)
    with warnings.catch_warnings():   # the warm-up's accuracy flag is not the benchmark's
        warnings.simplefilter("ignore")
        sa.memorization_error(fname, 0.5, [1.0], weights=np.eye(16) + 0.1, structure="blocks")   # imports, compile
    for cache in (block_constants.CONSTANTS, latent.RULES, latent.BASE_RULES, hermite.TOKEN_NODES):
        cache.clear()
    t = time.perf_counter()
    k = gw.hermite_block_constants(f, W, max_rank=p)
    t_const = time.perf_counter() - t
    t = time.perf_counter()
    gw.hermite_block_error(f, 0.5, [1.0], W, constants=k)       # + token nodes and the first fixed point
    t_first = time.perf_counter() - t
    print(f"full-rank blocks: {name}, p = {p}, {fname}; set-up of a new (f, W): constants {t_const:.2f} s "
          f"(quadrature), first call {t_first:.2f} s (token nodes, one gamma-point)")
    for c in (0.5, 1.0):
        n = round(p / c)
        t = time.perf_counter()
        gw.hermite_block_error(f, c, gammas, W, constants=k)
        per_point = (time.perf_counter() - t) / len(gammas)
        t = time.perf_counter()
        sa.simulate(fname, n=n, c=c, gamma=gammas, weights=W, draws=draws, seed=0, models=("attention",),
                    progress=False)
        t_draw = (time.perf_counter() - t) / draws
        print(f"  c = {c:g} (n = {n}): {per_point:.3f} s per gamma-point, one Monte Carlo draw {t_draw:.3f} s; "
              f"ratio {per_point / t_draw:.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--draws", type=int, default=4)
    ap.add_argument("--head-only", action="store_true", help="only the single-head (Hermite-block) lines")
    ap.add_argument("--blocks-only", action="store_true", help="only the full-rank Hermite-block lines")
    args = ap.parse_args(argv)
    gammas = [0.01, 0.1, 1.0, 10.0]
    only = full_rank_blocks if args.blocks_only else single_head if args.head_only else None
    if only is not None:
        with threadpool_limits(limits=args.threads):
            libs = ", ".join(f"{i['internal_api']}={i['num_threads']}" for i in threadpool_info())
            print(f"BLAS threads (threadpoolctl): {libs}; tanh, gamma = {gammas}")
            only(gammas, args.draws)
        return
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
                # again with the set-up of this μ cached (the surrogate's finite-p latent kernels, the model), the
                # correction itself recomputed: the cost of a further γ-point
                strong.CORRECTIONS.clear()
                t = time.perf_counter()
                gw.general_w_error(sa.activation("tanh"), 0.5, gammas, W, mu)
                dt2 = time.perf_counter() - t
                per_point.append(dt2 / len(gammas))
                strong.CORRECTIONS.clear()
                t = time.perf_counter()
                gw.strong_direction_correction(sa.activation("tanh"), 0.5, gammas, W, mu)
                print(f"  with the set-up of this mu cached: {len(gammas) / dt2:.2f} gamma-points/s, of which the "
                      f"strong-direction correction {time.perf_counter() - t:.2f} s for {len(gammas)} gamma")
        # a symmetric W takes the eigen path (one eigh, then O(p^2) per evaluation; docs/theory.md §12.5)
        Ws = (W + W.T) / 2
        Ws = Ws / np.sqrt(np.sum(Ws * Ws) / p)
        t = time.perf_counter()
        gw.general_w_error(sa.activation("tanh"), 0.5, gammas, Ws, None)
        dt = time.perf_counter() - t
        print(f"theory, symmetric (W + W^T)/2 (eigen path), mu = 0: {len(gammas) / dt:.2f} gamma-points/s")
        t = time.perf_counter()
        sa.simulate("tanh", n=round(p / 0.5), c=0.5, gamma=gammas, weights=W, draws=args.draws, seed=0,
                    models=("attention",), progress=False)
        t_draw = (time.perf_counter() - t) / args.draws
        print(f"Monte Carlo: {t_draw:.3f} s per draw (n = {round(p / 0.5)}, all 4 gamma from one eigh)")
        print(f"ratio one theory gamma-point / one Monte Carlo draw: {per_point[0] / t_draw:.2f} (mu = 0), "
              f"{per_point[1] / t_draw:.2f} (mu = top, incl. its set-up), {per_point[2] / t_draw:.2f} (mu = top, "
              "set-up cached)")
        single_head(gammas, args.draws)
        full_rank_blocks(gammas, args.draws)


if __name__ == "__main__":
    main()
