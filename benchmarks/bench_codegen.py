"""Speed of a generated standalone solver (``symattn codegen``) against the library's numpy backend.

    python benchmarks/bench_codegen.py [--activation tanh] [--nc 40] [--ngamma 25] [--repeat 5]

On one (c, gamma) grid (default 40 x 25 = 1000 points, c in [0.25, 4], gamma in [1e-2, 10],
geometric spacing) with the aligned geometry w_K = w_Q = mu, ||mu||^2 = 1, it times in the
same run, interleaved, best of ``--repeat``:

- the library: ``symattn.memorization_error(f, c, gamma, geometry, model='attention')``
  (the solver runtime with the lambdified SymPy kernels);
- the generated module's ``attention_error`` (written to a temporary directory and imported):
  the same runtime, carried verbatim, with the kernels printed for f and a1, s^2, d folded in.

Since issue 11 both run one solver runtime, so the ratio generated / library throughput is
about 1 (the printed kernels save the arithmetic of the folded constants and of the terms they
zero; the generated module also solves the bulk once per (c, gamma) whatever the geometry).
It prints both throughputs in points per second (wall clock, and CPU time of this process,
which is less sensitive to other load on the machine), their ratio, the library's throughput
against 5000 points per second (the target of issue 5), and the largest relative difference
between the two results (the acceptance of issue 11: <= 1e-12).
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--activation", default="tanh")
    ap.add_argument("--nc", type=int, default=40, help="number of c values (default 40)")
    ap.add_argument("--ngamma", type=int, default=25, help="number of gamma values (default 25)")
    ap.add_argument("--repeat", type=int, default=5, help="best of this many timings (default 5)")
    args = ap.parse_args(argv)

    import symattn as sa
    from symattn.codegen import write_solver

    f = sa.activation(args.activation)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_solver(f, os.path.join(tmp, "bench_solver.py"), module="bench_solver")
        t_gen = time.perf_counter() - t0
        spec = importlib.util.spec_from_file_location("bench_solver", path)
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)

    c = np.geomspace(0.25, 4.0, args.nc)[:, None]
    gamma = np.geomspace(1e-2, 10.0, args.ngamma)[None, :]
    points = args.nc * args.ngamma
    geometry = sa.Geometry.aligned(1.0)
    kw = gen.aligned(1.0)

    def generic():
        return sa.memorization_error(f, c, gamma, geometry=geometry, model="attention")

    def generated():
        return gen.attention_error(c, gamma, **kw)

    ref, mine = generic(), generated()  # warm-up (compiles the generic kernels) and accuracy
    diff = float(np.max(np.abs(mine / ref - 1)))

    results = {}
    for name, clock in (("wall", time.perf_counter), ("cpu", time.process_time)):
        t_generic, t_generated = float("inf"), float("inf")
        for _ in range(args.repeat):  # interleaved, so that both see the same load
            t_generic = min(t_generic, best_of(generic, 1, clock))
            t_generated = min(t_generated, best_of(generated, 1, clock))
        results[name] = (points / t_generic, points / t_generated)

    print(f"activation {f.name}; grid {args.nc} c x {args.ngamma} gamma = {points} points; "
          f"aligned geometry, snr = 1; best of {args.repeat}")
    print(f"generated module: written in {t_gen:.1f} s (SymPy CSE and printing, once per activation)")
    print(f"max relative difference generated vs library: {diff:.2e}  (should be <= 1e-12)")
    print(f"{'clock':6s} {'library pts/s':>14s} {'generated pts/s':>16s} {'ratio (~1)':>11s} "
          f"{'library/5000 (>=1)':>19s}")
    for name, (p_generic, p_generated) in results.items():
        print(f"{name:6s} {p_generic:14.0f} {p_generated:16.0f} {p_generated / p_generic:11.2f} "
              f"{p_generic / 5000:19.2f}")
    wall_generic, wall_generated = results["wall"]
    print(f"RATIOS generated/library {wall_generated / wall_generic:.2f} (one runtime: about 1); "
          f"library {wall_generic:.0f} points/s = {wall_generic / 5000:.2f} x 5000 (target >= 1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
