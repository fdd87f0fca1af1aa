r"""The a1 = d = 0 bulk in closed form: the reduced equation of docs/theory.md §5.6 without quadrature.

At a1 = d = 0 (cos, he2, he3 or he4 with the diagonal zeroed) β = −s²e3 forces e3 = 0, Δ = w(1 + uλ) with
u = s²e1 and w = γ + s²e2, and the bulk system is one increasing equation in u,

  h(u) = u (γ + s² ∫ λ/(1 + uλ) dμ_S) − s² = 0.

Its integral is a Stieltjes transform at z = −1/u < 0 (docs/theory.md §5.8): with the continuous part of
μ_S, m_c(z) = ∫ dμ_cont/(λ − z), and the atom (1 − c)_+ at λ = 0 (which gives λ/(1 + uλ) = 0),

  ∫ λ/(1 + uλ) dμ_S = h1(z)/u,   h1 = ∫ λ/(λ − z) dμ_cont = K m_c/(m_c + c)   (K = max(1, c)),
  1 − h1 = (1 − c)_+ + m_c/u,

so that h(u) = uγ − s²[(1 − c)_+ + m_c(−1/u)/u], a difference of two positive terms only at the root.
For real z < 0 the branch rule of :mod:`symattn.systems.closed` is real and free of cancellation:

  m_c(z) = 2c·min(1, c) / (|1 − c| − cz + c√((a − z)(b − z))),   a, b = (1 ∓ c^{-1/2})²,

  m_c'(z) = m_c(m_c + c)/(c√((a − z)(b − z))).

The root is bracketed by u ∈ [s²/(γ + s²), s²/γ] (0 ≤ e2 ≤ M_1 = 1); it is found by bisection in
log u (geometric means; sure in any arithmetic) and polished by Newton's method on h (kept inside the
bracket). Then e = (u/s², h1/u, 0). This replaces the quadrature solver's
:func:`symattn.backends.solver._reduced_a1_d_zero` for the closed form (docs/theory.md §5.8): the points
where Newton on the full system from (1/γ, 0, 0) fails (small γ, c ≥ 0.5, where e2 ~ √γ).
"""

from __future__ import annotations

import numpy as np

from .solver import relative_residual

#: bisection in log u until the bracket's relative width is below this; Newton from there
BISECT_WIDTH = 1e-4
NEWTON_STEPS = 60


def stieltjes_negative(ctx, c, z):
    r"""m_c(z) and m_c'(z) for real z < 0 (arrays in the context's arithmetic), by the real branch rule
    of the module docstring (no complex numbers, no cancellation).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> m, md = stieltjes_negative(FloatContext(), np.array([2.0]), np.array([-1e8]))
    >>> bool(abs(m[0] * 1e8 - 1) < 1e-7), bool(md[0] > 0)     # m_c ~ −1/z, mass 1 for c > 1
    (True, True)
    """
    rc = ctx.sqrt(c)
    a = (1 - 1 / rc) ** 2
    b = (1 + 1 / rc) ** 2
    below = np.asarray(ctx.to_float(c), dtype=float) < 1
    U = np.where(below, 1 - c, c - 1)
    cm = np.where(below, c, 0 * c + 1)
    root = c * ctx.sqrt((a - z) * (b - z))
    m = 2 * c * cm / (U - c * z + root)
    return m, m * (m + c) / root


def reduced_bulk(ctx, c, gamma, s2, rel=None, bound=False):
    r"""e = (e1, e2, 0) (P, 3) at a1 = d = 0 from the reduced equation h(u) = 0 in closed form, and the
    relative residual of h (P,) (docs/theory.md §5.6, §5.8). ``c``, ``gamma``, ``s2``: (P,) arrays.
    With ``bound``, also an error bound of e (P, 3) as floats: e moved by the error of u that the
    rounding of h causes, δu = u_r·(uγ + s²(1 − h1))/h'(u), plus 4u_r|e| (u_r the unit roundoff).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> e, res = reduced_bulk(ctx, np.array([2.0]), np.array([1e-8]), np.array([1.0]))
    >>> bool(abs(e[0, 0] - 1 / (1e-8 + e[0, 1])) < 1e-12 * e[0, 0]), float(e[0, 2])   # e1 = 1/(γ + s²e2)
    (True, 0.0)
    """
    rel = float(ctx.tol) * 1e-3 if rel is None else rel
    above = np.where(np.asarray(ctx.to_float(c), dtype=float) < 1, 1 - c, 0 * c)
    K = np.where(np.asarray(ctx.to_float(c), dtype=float) < 1, 0 * c + 1, c)

    def h_and_slope(u):
        m, md = stieltjes_negative(ctx, c, -1 / u)
        pos = s2 * (above + m / u)                   # s²(1 − h1), h1 = ∫ λ/(λ + 1/u) dμ_cont
        # h'(u) = γ + s²(m − m'/u)/u²  (from d/du m_c(−1/u) = m_c'/u²)
        return u * gamma - pos, u * gamma + pos, gamma + s2 * (m - md / u) / u**2

    lo, hi = s2 / (gamma + s2), s2 / gamma
    for _ in range(200):   # log-bisection: the bracket spans up to ~1/γ
        mid = ctx.sqrt(lo * hi)
        h, _, _ = h_and_slope(mid)
        neg = np.asarray(ctx.to_float(h), dtype=float) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
        if np.all(np.asarray(ctx.to_float((hi - lo) / hi), dtype=float) <= BISECT_WIDTH):
            break
    u = ctx.sqrt(lo * hi)
    for _ in range(NEWTON_STEPS):
        h, scale, dh = h_and_slope(u)
        hf = np.asarray(ctx.to_float(h), dtype=float)
        lo, hi = np.where(hf < 0, u, lo), np.where(hf < 0, hi, u)
        un = u - h / dh
        inside = np.asarray((un >= lo) & (un <= hi), dtype=bool)   # in the working arithmetic (un = u: converged)
        un = np.where(inside, un, (lo + hi) / 2)   # safeguarded: stays in the bracket
        step = np.abs(np.asarray(ctx.to_float((un - u) / u), dtype=float))
        u = un
        if np.all(step <= rel):
            break
    h, scale, dh = h_and_slope(u)
    res = np.abs(np.asarray(ctx.to_float(h / scale), dtype=float))

    def unknowns(u):
        m, _ = stieltjes_negative(ctx, c, -1 / u)
        e = np.empty((u.shape[0], 3), dtype=ctx.dtype)
        e[:, 0], e[:, 1], e[:, 2] = u / s2, K * m / (m + c) / u, 0 * u
        return e

    e = unknowns(u)
    if not bound:
        return e, res
    # the error of e: h is known to u·(its positive terms) (or its residual), so u to that over |h'(u)|
    unit = ctx.eps / 2 if ctx.dps is None else ctx.eps   # the unit roundoff
    du = np.maximum(unit, res) * np.asarray(ctx.to_float(scale / dh), dtype=float)
    du = np.where(np.isfinite(du), np.abs(du), np.inf)
    ef = np.asarray(ctx.to_float(e), dtype=float)
    moved = np.asarray(ctx.to_float(unknowns(u + ctx.convert(du))), dtype=float)
    de = np.abs(moved - ef) + 4 * unit * np.abs(ef)
    return e, res, de


def rescue_a1_d_zero(ctx, p, idx, e, res, conv, de, full_map):
    r"""The closed form's bulk at the points ``idx`` of the a1 = 0 group: where Newton did not converge
    (``conv`` False) and d = 0 (to the quadrature solver's tolerance), the reduced equation in closed
    form (:func:`reduced_bulk`). Returns (e, res, conv, de) with those points replaced where the full
    system's relative residual at the reduced solution is within ``ctx.tol``; ``de`` is the error bound
    of the reduced equation (:func:`reduced_bulk` with ``bound``). The bound of
    :func:`symattn.backends.closed_runtime.solve_bulk_closed`, |(I − ∫∂g/∂e)^{-1}|·u·max(|e|, ∫|g|), is not used:
    at small γ the full Jacobian is nearly singular (c = 20, γ = 1e-6: a bound of 3e-12 relative on e1
    where e1 is right to 1e-16 against 40 digits), and that would send the point back to quadrature.
    ``p``: the :class:`symattn.backends.closed_runtime.Points` of the call; ``full_map(e, points)``: the closed
    form's map of the full system at those points, (I(e), ∫|g|, ∫∂g/∂e, admissible)
    (:func:`symattn.backends.closed_runtime.newton_map`, passed in: this module does not import the runtime).

    Examples
    --------
    >>> import numpy as np
    >>> from symattn.backends import closed_runtime as closed
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> p = closed.Points(ctx, 2.0, [1e-8], 0.0, 6.0, 0.0)        # he3 (zero diagonal) at γ = 1e-8
    >>> kern = closed.CLOSED["numpy"][("newton", True)]
    >>> full = lambda e, at: closed.newton_map(ctx, p, e, at, kern)
    >>> e, res, conv, de = rescue_a1_d_zero(ctx, p, np.arange(1), np.zeros((1, 3)), np.full(1, np.inf),
    ...                                     np.zeros(1, dtype=bool), np.zeros((1, 3)), full)
    >>> bool(conv[0]), bool(res[0] < 1e-14)
    (True, True)
    """
    a1f, s2f, df = (np.abs(np.asarray(ctx.to_float(v[idx]), dtype=float)) for v in (p.a1, p.s2, p.d))
    tiny = float(ctx.tol) * 1e-3 * np.sqrt(a1f**2 + s2f + df**2)
    todo = np.nonzero(~conv & (a1f == 0) & (df <= tiny) & (s2f > 0))[0]
    if not todo.size:
        return e, res, conv, de
    sub = idx[todo]
    with np.errstate(all="ignore"):
        er, _, d_new = reduced_bulk(ctx, p.c[sub], p.gamma[sub], p.s2[sub], bound=True)
        I, A, _, ok = full_map(er, sub)
        r = np.where(ok, relative_residual(ctx, er, I, A), np.inf)
        ef = np.asarray(ctx.to_float(er), dtype=float)
    good = ok & (r <= float(ctx.tol)) & (ef[:, 0] > 0) & (ef[:, 1] >= 0) & (ef[:, 1] <= 1) \
        & np.all(np.isfinite(d_new), axis=1)
    at = todo[good]
    e, res, conv, de = e.copy(), np.array(res, copy=True), conv.copy(), de.copy()
    e[at], res[at], conv[at], de[at] = er[good], r[good], True, d_new[good]
    return e, res, conv, de


def snap_a1(ctx, p, a1f, tol=None):
    r"""Set a1 to 0 in ``p`` (a :class:`symattn.backends.closed_runtime.Points`) where it is zero to the
    quadrature solver's rule, |a1| <= 1e-3·tol·√(a1² + s² + d²) (``tol``: the caller's tolerance, default
    ``ctx.tol``; he3 with the diagonal zeroed has a1 ~ 1e-32 in float64, ~1e-51 at 40 digits, from its
    Hermite integral): those points take the a1 = 0 form (Δ linear in λ) and, where d = 0 too,
    :func:`rescue_a1_d_zero`. Returns the float a1 (P,) after the change."""
    s2f, df = (np.asarray(ctx.to_float(v), dtype=float) for v in (p.s2, p.d))
    tol = float(ctx.tol) if tol is None else tol
    tiny = tol * 1e-3 * np.sqrt(a1f**2 + np.abs(s2f) + df**2)
    zero = (np.abs(a1f) <= tiny) & (a1f != 0)
    if zero.any():
        p.a1 = p.a1.copy()
        p.a1[zero] = 0 * p.a1[zero]
        a1f = np.where(zero, 0.0, a1f)
    return a1f
