"""Shared helpers of the limiting-case checks: batched theory evaluations and tolerances."""

from __future__ import annotations

import math

import mpmath
import numpy as np

from symattn.caching import Memo

from ..checks import Outcome

#: geometries used across the checks (Gram matrices of μ, w_K, w_Q)
NULL = np.zeros((3, 3))


def gram(snr=0.0, wk2=0.0, wq2=0.0, mu_wk=0.0, mu_wq=0.0, wk_wq=0.0) -> np.ndarray:
    from symattn import Geometry

    return Geometry(snr=snr, wk2=wk2, wq2=wq2, mu_wk=mu_wk, mu_wq=mu_wq, wk_wq=wk_wq).gram


def aligned(snr) -> np.ndarray:
    from symattn import Geometry

    return Geometry.aligned(snr).gram


def _ctx(backend, dps):
    from symattn.backends.context import context

    return context(backend, dps if backend == "mpmath" else None)


#: results shared by the checks of one process (several checks evaluate the same points)
POINTS = Memo("verification.points", 256)


def attention_points(f, c, gamma, grams=None, backend="numpy", dps=30, n=None, snr=None, diagonal="f"):
    r"""E_A, F at P points (c_i, γ_i, 𝔊_i) through the package's solver (one batched call).

    ``c``, ``gamma``: arrays of P values (broadcast); ``grams``: (3,3) or (P,3,3); ``n``: use the
    finite-p diagonal d_n (computed at ``snr`` = ‖μ‖², default the first Gram's [0,0]).
    Returns (E, F) as float arrays (numpy) or object arrays of mpf (mpmath); cached per process.
    """
    c, gamma = np.broadcast_arrays(np.atleast_1d(np.asarray(c, float)), np.atleast_1d(np.asarray(gamma, float)))
    P = c.size
    grams = np.broadcast_to(NULL if grams is None else np.asarray(grams, float), (P, 3, 3))
    key = ("attention", str(f), c, gamma, grams, backend, dps if backend == "mpmath" else None, n, snr, diagonal)
    return POINTS.get(key, lambda: _attention_points(f, c, gamma, grams, backend, dps, n, snr, diagonal))


def _attention_points(f, c, gamma, grams, backend, dps, n, snr, diagonal):
    import symattn as sa
    from symattn.backends import solver

    f = sa.activation(f)
    ctx = _ctx(backend, dps)
    with ctx:
        k = sa.kernel_constants(f, diagonal=diagonal, n=n, c=c if n is not None else None,
                                snr=float(grams[0, 0, 0] if snr is None else snr),
                                dps=ctx.dps)
        d = k.d
        d = ctx.convert(np.asarray(d, dtype=float)) if isinstance(d, np.ndarray) else d
        E, F, _ = solver.attention_error(ctx, ctx.convert(c), ctx.convert(gamma), k.a1, k.s2, d,
                                         ctx.convert(grams), 1)
    return np.asarray(E), np.asarray(F)


def bulk_points(f, c, gamma, backend="numpy", dps=30, diagonal="f"):
    """E_bulk and e (the bulk solution, (P, 3)) at P points (μ = 0, w = 0 system alone); cached per process."""
    c, gamma = np.broadcast_arrays(np.atleast_1d(np.asarray(c, float)), np.atleast_1d(np.asarray(gamma, float)))
    key = ("bulk", str(f), c, gamma, backend, dps if backend == "mpmath" else None, diagonal)
    return POINTS.get(key, lambda: _bulk_points(f, c, gamma, backend, dps, diagonal))


def _bulk_points(f, c, gamma, backend, dps, diagonal):
    import symattn as sa

    r = sa.solve(f, c, gamma, backend=backend, dps=dps if backend == "mpmath" else None, diagonal=diagonal)
    return np.asarray(r.attention), r.bulk


def linear_points(c, gamma, snr=0.0, backend="numpy", dps=30):
    """E_LR at P points (closed form, docs/theory.md §3)."""
    import symattn as sa

    return np.asarray(sa.memorization_error("linear", c, gamma, geometry=sa.Geometry(snr=snr), model="linear",
                                            backend=backend, dps=dps if backend == "mpmath" else None)).ravel()


def max_rel(a, b) -> float:
    """max_i |a_i − b_i|/|b_i| (mpmath-aware)."""
    out = 0.0
    with mpmath.workdps(80):  # mpf inputs keep their own precision; do not round them to 15 digits
        for x, y in zip(np.ravel(a), np.ravel(b)):
            x, y = mpmath.mpf(x), mpmath.mpf(y)
            out = max(out, float(abs(x - y) / abs(y)) if y != 0 else float(abs(x - y)))
    return out


def symbolic_zero(diffs, detail="") -> Outcome:
    """Outcome of a symbolic identity check: every expression in ``diffs`` must simplify to 0.

    value = the number of expressions that did not simplify to 0 (reference 0, tolerance 0).
    """
    import sympy as sp

    bad = [d for d in diffs if sp.simplify(d) != 0]
    return Outcome(len(bad), 0, 0, "abs", detail + (f"; non-zero: {[str(b)[:80] for b in bad]}" if bad else ""),
                   passed=not bad)


def mc_outcome(r, i, k_se, extra="") -> Outcome:
    """Outcome of an MC-vs-theory comparison at γ index ``i`` (tolerance k·se)."""
    mc, th, se = float(r["mc"][i]), float(r["theory"][i]), float(r["se"][i])
    z = (mc - th) / se if se > 0 else math.inf
    return Outcome(mc, th, k_se * se, "abs",
                   f"n={r['n']}, p={r['p']}, draws={r['draws']}, se={se:.3g}, "
                   f"z={z:+.2f}, k={k_se:g}" + (f"; {extra}" if extra else "")
                   + ("; warning: " + "; ".join(r["warnings"]) if r.get("warnings") else ""))
