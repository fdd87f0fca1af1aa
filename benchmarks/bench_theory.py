"""Speed of the deterministic equivalents (ratios measured in one run; machines are noisy).

Prints:
- E_LR throughput (closed form, vectorised over c, γ, snr);
- E_A throughput, vectorised over a (c, γ) grid, for an aligned geometry;
- closed form (docs/theory.md §5.8) against quadrature (``method='quadrature'``): on the (c, γ) grid,
  on a γ sweep (``--sweep-points`` γ in [1e-6, 1e3] for one activation, c and geometry; quadrature on at most
  ``--sweep-quadrature`` of them) and in mpmath (30 digits), both figures of issue 39 in one run: the sweep in
  γ-points per second of wall time and per CPU second (the latter is what a loaded machine leaves comparable);
- the same for a "straightforward" solver: a damped fixed point on 4000 midpoint nodes with a
  central finite difference for F' (docs/theory.md §5/§6 as first implemented), on a few points;
- the cost ratio of one theory point to one Monte Carlo draw at n = 2000.

Run:  python benchmarks/bench_theory.py [--points 1000] [--sweep-points 10000] [--threads 1] [--skip-mc]
      python benchmarks/bench_theory.py --threads 1 --sweep-points 100000 --skip-mc     (issue 39's measure)
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import symattn as sa
from symattn import accuracy
from symattn.backends import solver
from symattn.backends.context import FloatContext
from symattn.backends.quadrature import mp_nodes


def timed(fn, repeat=3, clock=time.perf_counter):
    best = np.inf
    for _ in range(repeat):
        t = clock()
        out = fn()
        best = min(best, clock() - t)
    return best, out


def timed_both(fn, repeat=3):
    """The best wall time and the best CPU time (time.process_time) of ``repeat`` runs, and the last result."""
    wall = cpu = np.inf
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = min(wall, time.perf_counter() - t), min(cpu, time.process_time() - c)
    return wall, cpu, out


def straightforward_E(f, c, gamma, geometry, nodes=4000):
    """Damped fixed point e ← ½e + ½I(e) on `nodes` MP nodes, then F' by a central difference."""
    ctx = FloatContext()
    k = sa.kernel_constants(f, snr=geometry.snr)

    def F(g):
        P = 1
        params = tuple(np.full((P, 1), v, dtype=float) for v in (np.sqrt(c), g, k.a1, k.s2, k.d))
        lam, w = mp_nodes(ctx, np.array([c]), nodes)
        e, _, _ = solver.damped_fixed_point(ctx, lam, w, solver.initial_guess(ctx, np.array([g])), params, 1e-13)
        sol = solver.BulkSolution(e=e, params=params, groups=[(np.arange(P), lam, w)], iterations=0,
                                  residual=np.zeros(P))
        T, T_dot = solver.traces(ctx, sol, np.zeros((P, 3)))
        A = solver.kernel_coefficients(ctx, np.array([k.a1]), geometry.gram[None], geometry.rank)
        val, _ = solver.woodbury(ctx, T, T_dot, A, geometry.gram[None], geometry.rank, np.array([np.sqrt(c)]))
        return val[0]

    h = 1e-4 * gamma
    return -(gamma**2) * (F(gamma + h) - F(gamma - h)) / (2 * h)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=1000)
    ap.add_argument("--skip-mc", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (threadpoolctl)")
    ap.add_argument("--mp-points", type=int, default=6, help="points of the mpmath comparison")
    ap.add_argument("--sweep-points", type=int, default=10000, help="γ values of the sweep comparison")
    ap.add_argument("--sweep-quadrature", type=int, default=10000,
                    help="at most this many of the sweep's γ (evenly spaced) are solved by quadrature too")
    args = ap.parse_args(argv)
    with accuracy.internal():   # the bench's own theory points: no accuracy assessment, no AccuracyWarning
        bench(args)


def bench(args):
    """The measures of the module docstring, for the parsed command line ``args``."""
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    f = sa.activation("tanh")
    g = sa.Geometry.aligned(1.0)
    side = int(round(np.sqrt(args.points)))
    cs = np.linspace(0.3, 3.0, side)[:, None]
    gams = np.logspace(-2, 1, args.points // side)
    npts = cs.size * gams.size

    sa.memorization_error(f, c=cs, gamma=gams, geometry=g, model="both")  # compile once
    t_lr, _ = timed(lambda: sa.memorization_error(f, c=cs, gamma=gams, geometry=g, model="linear"))
    t_a, E = timed(lambda: sa.memorization_error(f, c=cs, gamma=gams, geometry=g))
    print(f"E_LR  closed form : {npts / t_lr:12.0f} points/s ({npts} points)")
    print(f"E_A   Newton      : {npts / t_a:12.0f} points/s ({npts} points, tanh, w_K = w_Q = mu)")

    # closed form (docs/theory.md §5.8) against the quadrature solver, in one run
    with threadpool_limits(limits=args.threads):
        t_q, Eq = timed(lambda: sa.solve(f, c=cs, gamma=gams, geometry=g, method="quadrature").E)
        t_c, rc = timed(lambda: sa.solve(f, c=cs, gamma=gams, geometry=g))
    print(f"E_A   closed form : {npts / t_c:12.0f} points/s ({rc.closed.mean():.0%} closed; BLAS threads {args.threads})")
    print(f"E_A   quadrature  : {npts / t_q:12.0f} points/s;  closed/quadrature speed ratio {t_q / t_c:6.1f}x;"
          f"  max rel. difference {np.max(np.abs(rc.E - Eq) / Eq):.1e}")
    # a user's sweep: one activation, c and geometry, a vector of γ (issue 15's measure of points/s)
    gs = np.logspace(-6, 3, args.sweep_points)
    sub = np.unique(np.linspace(0, gs.size - 1, min(gs.size, args.sweep_quadrature)).astype(int))
    with threadpool_limits(limits=args.threads):
        sa.solve(f, c=0.5, gamma=gs[:64], geometry=g)  # compile once
        t_sc, cpu_sc, rs = timed_both(lambda: sa.solve(f, c=0.5, gamma=gs, geometry=g), repeat=2)
        t_sq, qs = timed(lambda: sa.solve(f, c=0.5, gamma=gs[sub], geometry=g, method="quadrature"), repeat=1)
        threads = {d["internal_api"]: d["num_threads"] for d in threadpool_info()}
    print(f"E_A   γ sweep ({gs.size} γ in [1e-6, 1e3], tanh, c = 0.5, aligned; threads {threads}):")
    print(f"        closed form {gs.size / t_sc:10.0f} γ-points/s ({gs.size / cpu_sc:.0f} per CPU second;"
          f" {rs.closed.mean():.1%} closed), quadrature {sub.size / t_sq:8.0f} γ-points/s ({sub.size} of them),"
          f" ratio {(t_sq / sub.size) / (t_sc / gs.size):6.1f}x; max rel. difference"
          f" {np.max(np.abs(rs.E[sub] - qs.E) / qs.E):.1e}")
    gm = np.logspace(-3, 1, args.mp_points)
    with threadpool_limits(limits=args.threads):
        sa.solve(f, c=0.5, gamma=gm[:1], geometry=g, backend="mpmath", dps=30)  # compile once
        t_mq, _ = timed(lambda: sa.solve(f, c=0.5, gamma=gm, geometry=g, backend="mpmath", dps=30,
                                         method="quadrature"), repeat=1)
        t_mc, cpu_mc, _ = timed_both(lambda: sa.solve(f, c=0.5, gamma=gm, geometry=g, backend="mpmath", dps=30),
                                     repeat=3)
    import mpmath.libmp

    print(f"E_A   mpmath 30 digits: closed {gm.size / t_mc:6.1f} points/s ({gm.size / cpu_mc:.1f} per CPU second),"
          f" quadrature {gm.size / t_mq:6.2f} points/s,"
          f" ratio {t_mq / t_mc:5.1f}x ({gm.size} points, c = 0.5; mpmath integer backend: {mpmath.libmp.BACKEND})")

    few = [(0.5, 0.01), (1.0, 0.1), (2.0, 1.0)]
    t0 = time.perf_counter()
    ref = [straightforward_E(f, c, gm, g) for c, gm in few]
    t_sf = (time.perf_counter() - t0) / len(few)
    ours = [float(sa.memorization_error(f, c=c, gamma=gm, geometry=g)) for c, gm in few]
    print(f"E_A   damped FP   : {1 / t_sf:12.1f} points/s (4000 nodes, finite-difference F')")
    print(f"  speed-up of the Newton path over the straightforward one: {t_sf * npts / t_a:8.0f}x")
    print(f"  max |difference| on {len(few)} points: {max(abs(a - b) for a, b in zip(ref, ours)):.2e}")

    if not args.skip_mc:
        t0 = time.perf_counter()
        sa.simulate(f, n=2000, c=1.0, gamma=[0.1], geometry=g, draws=1, seed=0, progress=False)
        t_mc = time.perf_counter() - t0
        print(f"Monte Carlo draw n=2000: {t_mc:.2f} s = cost of {t_mc * npts / t_a:.0f} theory points")
    print("load average at the end (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
