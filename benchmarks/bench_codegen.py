"""Speed of a generated standalone solver (``symattn codegen``, closed form) against ``symattn.solve``.

    python benchmarks/bench_codegen.py [--activation tanh] [--nc 40] [--ngamma 25] [--repeat 5] [--mp-points 6]

On one (c, gamma) grid (default 40 x 25 = 1000 points, c in [0.25, 4], gamma in [1e-2, 10],
geometric spacing) with the aligned geometry w_K = w_Q = mu, ||mu||^2 = 1, it times in the
same run, interleaved, best of ``--repeat``:

- the library: ``symattn.solve(f, c, gamma, geometry, model='attention')`` (closed form where it
  applies, quadrature elsewhere, precision estimate and escalation);
- the generated module's ``attention_error`` (written to a temporary directory and imported):
  the closed-form runtime of symattn.backends.closed_runtime with the kernels printed for f
  (docs/theory.md §5.8).

It prints both throughputs in points per second (wall clock, and CPU time of this process,
which is less sensitive to other load on the machine), their ratio, and the largest relative
difference between the two results (the acceptance of issue 15: <= 1e-12). With
``--mp-points K`` (default 6; 0 to skip) it does the same for the mpmath variant at 30 digits
against ``symattn.solve(backend='mpmath', dps=30)`` on K points (c, gamma) of the grid's diagonal
(one timing each), with the largest relative difference (<= 1e-25 expected).
Ratios measured in one run are comparable across machines; the absolute numbers are not.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time

import numpy as np


def best_of(fn, repeat, clock):
    best = float("inf")
    for _ in range(repeat):
        t = clock()
        fn()
        best = min(best, clock() - t)
    return best


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--activation", default="tanh")
    ap.add_argument("--nc", type=int, default=40, help="number of c values (default 40)")
    ap.add_argument("--ngamma", type=int, default=25, help="number of gamma values (default 25)")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many timings (default 5)")
    ap.add_argument("--mp-points", type=int, default=6, help="points for the mpmath comparison (default 6; 0: skip)")
    args = ap.parse_args(argv)

    import mpmath

    import symattn as sa
    from symattn.codegen import write_solver

    f = sa.activation(args.activation)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = write_solver(f, os.path.join(tmp, "bench_solver.py"), module="bench_solver")
        t_gen = time.perf_counter() - t0
        gen = _load(path, "bench_solver")
        lines = path.read_text().count("\n")
        gen_mp = None
        if args.mp_points > 0:
            gen_mp = _load(write_solver(f, os.path.join(tmp, "bench_mp.py"), dps=30, backend="mpmath"), "bench_mp")

    c = np.geomspace(0.25, 4.0, args.nc)[:, None]
    gamma = np.geomspace(1e-2, 10.0, args.ngamma)[None, :]
    points = args.nc * args.ngamma
    geometry = sa.Geometry.aligned(1.0)
    kw = gen.aligned(1.0)

    def library():
        return sa.solve(f, c, gamma, geometry=geometry, model="attention").E

    def generated():
        return gen.attention_error(c, gamma, **kw)

    ref, mine = library(), generated()  # warm-up (compiles the library's kernels) and accuracy
    diff = float(np.max(np.abs(mine / ref - 1)))

    results = {}
    for name, clock in (("wall", time.perf_counter), ("cpu", time.process_time)):
        t_lib, t_gen_run = float("inf"), float("inf")
        for _ in range(args.repeat):  # interleaved, so that both see the same load
            t_lib = min(t_lib, best_of(library, 1, clock))
            t_gen_run = min(t_gen_run, best_of(generated, 1, clock))
        results[name] = (points / t_lib, points / t_gen_run)

    print(f"activation {f.name}; grid {args.nc} c x {args.ngamma} gamma = {points} points; "
          f"aligned geometry, snr = 1; best of {args.repeat}")
    print(f"generated module: {lines} lines, written in {t_gen:.1f} s (SymPy reduction, CSE and printing)")
    print(f"max relative difference generated vs symattn.solve: {diff:.2e}  (should be <= 1e-12)")
    print(f"{'clock':6s} {'solve pts/s':>12s} {'generated pts/s':>16s} {'ratio':>7s}")
    for name, (p_lib, p_gen) in results.items():
        print(f"{name:6s} {p_lib:12.0f} {p_gen:16.0f} {p_gen / p_lib:7.2f}")
    wall_lib, wall_gen = results["wall"]
    line = f"RATIOS generated/solve float64 {wall_gen / wall_lib:.2f} ({wall_gen:.0f} vs {wall_lib:.0f} points/s)"
    if gen_mp is not None:
        k = min(args.mp_points, args.nc, args.ngamma)
        ci = np.geomspace(0.25, 4.0, k)
        gi = np.geomspace(1e-2, 10.0, k)
        t0 = time.perf_counter()
        ref_mp = sa.solve(f, ci, gi, geometry=geometry, backend="mpmath", dps=30).E
        t_lib_mp = time.perf_counter() - t0
        t0 = time.perf_counter()
        mine_mp = gen_mp.attention_error(ci, gi, dps=30, **kw)
        t_gen_mp = time.perf_counter() - t0
        with mpmath.workdps(60):
            diff_mp = max(float(abs(mpmath.mpf(a) / mpmath.mpf(b) - 1)) for a, b in zip(mine_mp, ref_mp))
        print(f"mpmath, 30 digits, {k} points: solve {k / t_lib_mp:.2f} pts/s, generated {k / t_gen_mp:.2f} pts/s "
              f"(ratio {t_lib_mp / t_gen_mp:.2f}); max relative difference {diff_mp:.1e} (should be <= 1e-25)")
        line += f"; mpmath-30 {t_lib_mp / t_gen_mp:.2f} ({k / t_gen_mp:.2f} vs {k / t_lib_mp:.2f} points/s)"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
