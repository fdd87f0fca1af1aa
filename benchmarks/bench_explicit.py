"""Speed of the compiled explicit formula (``ExplicitError.compile``) against step-by-step evaluation.

    python benchmarks/bench_explicit.py [--points 10000] [--repeat 5] [--step-points 10000] [--threads 1]

At ``--points`` solved points (tanh, c in [0.3, 3] and gamma in [1e-2, 10] on a geometric grid, one rank-one
geometry), with the traces, their gamma-derivatives and the Gram entries of the solution
(``TheoryResult.traces``, ...), it evaluates E_A and dE_A/d(mu^T w_K) of the explicit formula
(docs/theory.md §6.9) three ways, in the same run, best of ``--repeat`` (the step-by-step ways once):

- ``compiled``: ``ex.compile("numpy", (E_A, dE))``, one CSE'd straight-line function of numpy arrays, all
  points in one call;
- ``steps, numpy``: every step of the program lambdified on its own (SymPy's numpy printer, no CSE) and
  evaluated in order on the arrays (a vectorised step-by-step evaluation);
- ``steps, SymPy``: ``ex.evaluate(target, values)`` (the step-by-step evaluation of ExplicitError: xreplace step
  by step with SymPy Floats), point by point on ``--step-points`` points (default all), its time scaled to
  ``--points``.

It prints the time of each, the ratios (the acceptance of issue 29: compiled >= 10x faster than the step-by-step
evaluation) and the largest relative difference between the compiled and step-by-step values. The BLAS
threads are limited by threadpoolctl (``--threads``, default 1). Ratios measured in one run are comparable
across machines; the absolute numbers are not.
"""

from __future__ import annotations

import argparse
import time
import timeit

import numpy as np
import sympy as sp
from threadpoolctl import threadpool_limits


def _best_of(fn, repeat):
    """The best wall time of ``repeat`` calls (timeit)."""
    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--points", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--step-points", type=int, default=None, help="points for the SymPy step-by-step evaluation "
                    "(default: all; fewer are timed and scaled)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import symattn as sa
    from symattn.systems.attention import TRACES

    with threadpool_limits(limits=args.threads):
        n = int(round(np.sqrt(args.points)))
        c = np.geomspace(0.3, 3.0, n)[:, None]
        g = np.geomspace(1e-2, 10.0, args.points // n)[None, :]
        geo = sa.Geometry(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)
        r = sa.solve("tanh", c, g, geometry=geo)
        P = r.c.size
        ex = sa.explicit_error(1)
        dE = ex.diff(ex.E_A, ex.mu_wk)
        targets = (ex.E_A, dE)
        vals = {s: r.traces[name].reshape(-1) for s, (name, _, _) in zip(ex.traces, TRACES)}
        vals.update({s: r.trace_dots[name].reshape(-1) for s, (name, _, _) in zip(ex.trace_dots, TRACES)})
        vals.update({ex.gram[i, j]: np.full(P, geo.gram[i, j]) for i in range(3) for j in range(i, 3)})
        vals.update({sa.systems.symbols.a1: np.full(P, r.constants.a1), sa.systems.symbols.c: r.c.reshape(-1),
                     sa.systems.symbols.gamma: r.gamma.reshape(-1)})
        t = time.perf_counter()
        fn = ex.compile("numpy", targets)
        t_compile = time.perf_counter() - t
        argv_ = [vals[s] for s in fn.args]
        out = fn(*argv_)
        t_fast = _best_of(lambda: fn(*argv_), args.repeat)

        # step by step, numpy: one lambdified function per step, evaluated in order
        steps = ex.needed(targets)
        t = time.perf_counter()
        funcs = [(s, tuple(sorted(e.free_symbols, key=str)), None) for s, e in steps]
        funcs = [(s, fa, sp.lambdify(fa, e, "numpy")) for (s, fa, _), (_, e) in zip(funcs, steps)]
        t_lambdify = time.perf_counter() - t

        def stepwise():
            env = dict(vals)
            for s, fa, f in funcs:
                env[s] = f(*[env[a] for a in fa])
            return [env[x] for x in targets]

        ref_np = stepwise()
        t_steps_np = _best_of(stepwise, args.repeat)

        # step by step, SymPy: ExplicitError.evaluate, point by point
        K = P if args.step_points is None else min(P, args.step_points)
        idx = np.linspace(0, P - 1, K).astype(int)
        t = time.perf_counter()
        ref_sp = np.array([[float(ex.evaluate(x, {s: sp.Float(v[i]) for s, v in vals.items()})) for x in targets]
                           for i in idx])
        t_steps_sp = (time.perf_counter() - t) * P / K

    diff_np = max(float(np.max(np.abs(o - q) / np.abs(q))) for o, q in zip(out, ref_np))
    diff_sp = max(float(np.max(np.abs(o[idx] - ref_sp[:, k]) / np.abs(ref_sp[:, k]))) for k, o in enumerate(out))
    diff_E = float(np.max(np.abs(out[0] - r.E.reshape(-1)) / np.abs(r.E.reshape(-1))))
    print(f"points: {P} (tanh, c in [0.3, 3] x gamma in [1e-2, 10]); targets E_A and dE_A/d(mu^T w_K); "
          f"{len(steps)} steps; BLAS threads {args.threads}")
    print(f"compile (CSE, print, lambdify): {t_compile:.2f} s (once, cached)")
    print(f"compiled:          {t_fast * 1e3:10.2f} ms")
    print(f"steps, numpy:      {t_steps_np * 1e3:10.2f} ms   ratio {t_steps_np / t_fast:8.1f}x   "
          f"(lambdify of the steps {t_lambdify:.1f} s)")
    print(f"steps, SymPy:      {t_steps_sp * 1e3:10.0f} ms   ratio {t_steps_sp / t_fast:8.0f}x   "
          f"({K} points timed{'' if K == P else ', scaled'})")
    print(f"largest relative difference: compiled vs steps (numpy) {diff_np:.1e}, vs steps (SymPy) {diff_sp:.1e}, "
          f"E_A vs the solver's {diff_E:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
