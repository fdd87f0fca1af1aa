"""Seconds per Monte Carlo draw of ``symattn.simulate`` against a bare numpy ``eigh``.

    python benchmarks/bench_montecarlo.py [--n 1000 2000] [--draws 2] [--repeat 2]
    python benchmarks/bench_montecarlo.py --ratio [--n 1000 2000 4000] [--repeat 3]

``--ratio`` (issue 14): one attention draw with the package defaults (threads chosen by
:mod:`symattn.threads`, method 'auto') against the best bare numpy pipeline (kernel, Φ = XK,
ΦᵀΦ, eigh at one thread and at all cores, the faster), idle and with two numpy neighbours at
their default threads; then the throughput of two single-threaded worker processes against one.

For each n (c = 1, tanh, attention + linear, geometry w_K = w_Q = μ with ‖μ‖² = 1) it prints
the seconds per draw of

- numpy, method 'auto' (the Householder-tridiagonal route, the default),
- numpy, method 'eigh' (one full eigendecomposition per model),
- torch on the CPU (float64, torch.linalg.eigh), when torch is installed, one draw at a time
  and in batches of 4 (``simulate(..., batch=4)``),
- torch on CUDA (batched by default), float64 and float32, when available,

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
    from symattn.layer import simulate

    f = _tanh()
    geo = sa.Geometry.aligned(1.0)
    try:
        import torch
    except ImportError:
        torch = None
    configs = [("numpy auto", dict(backend="numpy")), ("numpy eigh", dict(backend="numpy", method="eigh"))]
    if torch is not None:
        configs.append(("torch cpu", dict(backend="torch", device="cpu")))
        configs.append(("torch cpu b4", dict(backend="torch", device="cpu", batch=4)))
        if torch.cuda.is_available():
            configs.append(("torch cuda", dict(backend="torch", device="cuda")))
            configs.append(("cuda f32", dict(backend="torch", device="cuda", dtype="float32")))

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


# ----------------------------------------------------------------------------- defaults vs bare pipeline
# python benchmarks/bench_montecarlo.py --ratio [--n 1000 2000 4000] [--repeat 3]
#
# One attention draw (tanh, c = 1, mu = 0, four gamma) with the package defaults against the best
# bare numpy pipeline in the same run: X, K = f(XᵀX/√p)/√p, Φ = XK, ΦᵀΦ/n, np.linalg.eigh and
# the errors, timed at one BLAS thread and at all cores (threadpoolctl), the faster taken.
# Idle, then with two other numpy processes at their default threads (each a loop of 1500×1500
# matmuls). Then the throughput of 2 worker processes against 1 (one thread each), draws at n = 1000.

_HOG = "import numpy as np\nA = np.random.default_rng(0).standard_normal((1500, 1500))\nwhile True:\n    A = A @ A; A /= np.abs(A).max()\n"


def _bare_draw(n, rng_seed=0):
    p = n
    rng = np.random.default_rng(rng_seed)
    y = rng.permutation(np.r_[np.ones(n - n // 2), -np.ones(n // 2)])
    X = rng.standard_normal((p, n))
    K = np.tanh(X.T @ X / np.sqrt(p)) / np.sqrt(p)
    Phi = X @ K
    M = Phi.T @ Phi / n
    lam, V = np.linalg.eigh(M)
    w = (V.T @ y) ** 2 / n
    g = np.array([1e-2, 1e-1, 1.0, 10.0])[:, None]
    return ((g / (np.clip(lam, 0, None)[None, :] + g)) ** 2) @ w


def _ratio_rows(ns, repeat, label):
    from threadpoolctl import threadpool_limits

    import symattn as sa
    from symattn.layer import simulate
    from symattn.threads import available_cores, choose_threads

    f = sa.activation("tanh")
    cores = available_cores()
    rows = []
    for n in ns:
        bare = {}
        for t in sorted({1, cores}):
            with threadpool_limits(limits=t):
                bare[t] = _best(lambda: _bare_draw(n), repeat)
        pkg = {}
        for method in ("auto", "eigh", "tridiagonal"):
            pkg[method] = _best(lambda: simulate(f, n=n, c=1.0, gamma=[1e-2, 1e-1, 1.0, 10.0], draws=1, seed=0,  # noqa: B023
                                                 progress=False, models=("attention",), method=method), repeat)
        best_bare = min(bare.values())
        chosen = choose_threads(n)
        print(f"{label:<6} {n:>6} bare 1 thr {bare[1]:7.3f}  bare {cores} thr {bare[cores]:7.3f}  "
              f"package auto {pkg['auto']:7.3f} (threads now {chosen})  eigh {pkg['eigh']:7.3f}  "
              f"tridiagonal {pkg['tridiagonal']:7.3f}  ratio auto/best bare {pkg['auto'] / best_bare:5.2f}", flush=True)
        rows.append((label, n, pkg["auto"] / best_bare))
    return rows


def _workers_throughput(n=1000, draws=8):
    import subprocess
    import sys

    code = (f"import time, symattn as sa\nfrom symattn.threads import limit_threads\n"
            f"f = sa.activation('tanh'); sa.simulate(f, n=64, c=1.0, gamma=[1.0], draws=1, progress=False)\n"
            f"t = time.perf_counter()\nwith limit_threads(1):\n"
            f"    sa.simulate(f, n={n}, c=1.0, gamma=[1e-2, 1.0], draws={draws}, seed=0, progress=False,"
            f" models=('attention',))\nprint(time.perf_counter() - t)\n")

    def run(k):
        t0 = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(k)]
        inner = [float(p.communicate()[0]) for p in procs]
        return k * draws / max(inner), time.perf_counter() - t0

    one, _ = run(1)
    two, _ = run(2)
    print(f"workers throughput at n = {n} ({draws} draws each, one thread each): 1 worker {one:.2f} draws/s, "
          f"2 workers {two:.2f} draws/s, ratio {two / one:.2f}", flush=True)
    return two / one


def ratio_main(ns, repeat):
    import subprocess
    import sys

    print(f"cores={os.cpu_count()}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    rows = _ratio_rows(ns, repeat, "idle")
    hogs = [subprocess.Popen([sys.executable, "-c", _HOG], env={k: v for k, v in os.environ.items()
                                                                   if not k.endswith("_NUM_THREADS")})
            for _ in range(2)]
    try:
        time.sleep(2.0)
        rows += _ratio_rows(ns, repeat, "loaded")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    _workers_throughput()
    return rows


if __name__ == "__main__":
    import sys

    if "--ratio" in sys.argv:
        ap = argparse.ArgumentParser()
        ap.add_argument("--ratio", action="store_true")
        ap.add_argument("--n", type=int, nargs="+", default=[1000, 2000, 4000])
        ap.add_argument("--repeat", type=int, default=3)
        a = ap.parse_args()
        ratio_main(a.n, a.repeat)
    else:
        main()
