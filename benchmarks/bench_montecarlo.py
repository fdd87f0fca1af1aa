"""Seconds per Monte Carlo draw of ``symattn.simulate`` against a bare numpy ``eigh``.

    python benchmarks/bench_montecarlo.py [--n 1000 2000] [--draws 2] [--repeat 2]

For each n (c = 1, tanh, attention + linear, geometry w_K = w_Q = μ with ‖μ‖² = 1) it prints
the seconds per draw of

- numpy, method 'auto' (the Householder-tridiagonal route, the default),
- numpy, method 'eigh' (one full eigendecomposition per model),
- torch on the CPU (float64, torch.linalg.eigh), when torch is installed,
- torch on CUDA, when available,

and each one's ratio to ``numpy.linalg.eigh`` of an n×n symmetric matrix timed in the same run
(best of ``--repeat``). One draw computes two spectral problems (attention and linear), so the
'eigh' method costs a bit over 2 bare eighs. The ratios, not the seconds, are comparable across
machines; BLAS thread counts (OPENBLAS_NUM_THREADS, torch.get_num_threads) are printed.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def _tanh():
    try:
        import symattn as sa

        return sa.activation("tanh")
    except (ImportError, AttributeError):  # activations layer not installed: the plain callable
        return np.tanh


def _best(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000])
    ap.add_argument("--draws", type=int, default=2, help="draws per timed simulate call (default 2)")
    ap.add_argument("--repeat", type=int, default=2, help="best of this many timings (default 2)")
    args = ap.parse_args(argv)

    import symattn as sa
    from symattn.montecarlo import simulate

    f = _tanh()
    geo = sa.Geometry.aligned(1.0)
    try:
        import torch
    except ImportError:
        torch = None
    configs = [("numpy auto", dict(backend="numpy")), ("numpy eigh", dict(backend="numpy", method="eigh"))]
    if torch is not None:
        configs.append(("torch cpu", dict(backend="torch", device="cpu")))
        if torch.cuda.is_available():
            configs.append(("torch cuda", dict(backend="torch", device="cuda")))

    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, "
          f"cpus={os.cpu_count()}, torch threads={torch.get_num_threads() if torch else 'n/a'}, "
          f"activation={getattr(f, 'name', f)}")
    print(f"{'n':>6} {'config':<12} {'s/draw':>9} {'bare eigh s':>12} {'ratio':>7}")
    for n in args.n:
        rng = np.random.default_rng(0)
        A = rng.standard_normal((n, n))
        S = (A + A.T) / 2
        t_eigh = _best(lambda: np.linalg.eigh(S), args.repeat)
        for label, kw in configs:
            run = lambda: simulate(f, n=n, c=1.0, gamma=[1e-2, 1e-1, 1.0, 10.0], geometry=geo,  # noqa: E731
                                   draws=args.draws, seed=0, progress=False, **kw)
            if kw.get("device") == "cuda":
                simulate(f, n=64, c=1.0, gamma=[0.1], draws=1, progress=False, **kw)  # CUDA warm-up
            t = _best(run, args.repeat) / args.draws
            print(f"{n:>6} {label:<12} {t:>9.3f} {t_eigh:>12.3f} {t / t_eigh:>7.2f}", flush=True)


if __name__ == "__main__":
    main()
