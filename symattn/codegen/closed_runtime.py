r"""The closed-form runtime of a generated solver: no quadrature (docs/theory.md §5.8).

:func:`symattn.codegen.generate_solver` copies this module's source verbatim into a generated
module, with the closed kernels printed for one activation in place of the table ``CLOSED``
(:mod:`.closed_kernels`, lambdified here inside the library so that the examples run) and with
copies of what it imports (the arithmetic context, the Woodbury step of
:mod:`symattn.backends.solver`, ConvergenceError). It is written against a context
(:class:`~symattn.backends.context.FloatContext`, or ``MPContext`` for the mpmath variant).

- **Basis.** ∫ g dμ_S = (1 − c)_+ g(0) + Σ q_l M^c_l + Σ r1_k I_{1,k} + Σ r2_k I_{2,k}, with the
  moments M^c of the continuous part of μ_S (Narayana polynomials in 1/c, M^c_0 = min(1, c)) and
  I_{k,j} = ∫ λ^j/Δ^k dμ_c from the roots z_i of Δ: for cubic Δ = L3 ∏(λ − z_i) the second divided
  difference h_j[z1, z2, z3]/L3 of h_j(z) = ∫ λ^j/(λ − z) dμ_c, written in the Stieltjes transform
  m_c without cancellation (``_divided_basis`` of :mod:`symattn.backends.closed`), for linear Δ = L1 (λ − z)
  simply m_c(z)/L1; then
  I_{2,j} = −∂I_{1,j}/∂D0 by dual numbers. m_c(z) by the branch rule of docs/theory.md §5.8. The
  roots are the eigenvalues of the companion matrix, polished by Newton's method in the working
  arithmetic (float64: numpy's long double for the basis).
- **Bulk.** Newton on e = I(e) in closed form from (1/γ, 0, 0) with backtracking; where it fails,
  Newton continued in γ from a larger γ (:func:`_continuation`); for a1 = d = 0 the reduced
  monotone equation uγ − s²∫dμ_S/(1 + uλ) = 0, u = s²e1 (docs/theory.md §5.6; here in closed form,
  by bisection), then a Newton polish.
- **Traces** T, the centred traces U and Ṫ in the regular unknowns (P, e2, e3) by implicit
  differentiation, in the (e1, e2, e3) form where P < :data:`REGULAR_MIN_P` (as the library,
  docs/theory.md §5.7), then the Woodbury step (docs/theory.md §6.6).

A point where a root of Δ meets the support of μ_S, or where the bulk does not converge on the
branch (e1 > 0, 0 ≤ e2 ≤ 1, Δ > 0 on the support), raises ConvergenceError; so does an E that
is not finite or lies outside [0, 1] by more than :data:`UNIT_SLACK` (values within it are clipped).
"""

from __future__ import annotations

import math
import sys

import numpy as np

from ..backends.closed import _divided_basis, _Dual
from ..backends.context import FloatContext
from ..backends.solver import kernel_coefficients, woodbury
from ..errors import ConvergenceError
from .closed_kernels import CLOSED

#: a root of Δ closer than this fraction of b − a to the support [a, b]: the closed form does not apply
SUPPORT_DISTANCE = 1e-9
#: below this P = (γ + s² e2) e1 the traces are taken in the (e1, e2, e3) form
REGULAR_MIN_P = 1e-2
CLOSED_NEWTON_MAX_ITER = 40
#: Newton ending at a relative residual within this factor of the context's tolerance has converged
STALL_FACTOR = 100
CLOSED_CONTINUATION_STEPS = 200
#: E values this far outside [0, 1] are rounding (clipped); further out the point fails
UNIT_SLACK = 1e-12


def _complex_ops(ctx):
    """(to complex, sqrt, real part, |.| as float) of the context's complex numbers."""
    if ctx.name == "mpmath":
        mpmath = sys.modules["mpmath"]   # loaded by the mpmath context (no import: the float64 variant never needs it)
        tocx = np.frompyfunc(lambda x: mpmath.mpc(x), 1, 1)
        return (tocx, np.frompyfunc(mpmath.sqrt, 1, 1), np.frompyfunc(mpmath.re, 1, 1),
                lambda x: np.asarray(np.frompyfunc(lambda v: float(abs(v)), 1, 1)(x), dtype=float))
    return (lambda x: np.asarray(x, dtype=np.clongdouble), np.sqrt, np.real,
            lambda x: np.asarray(np.abs(x), dtype=float))


def mp_moment_values(rc, L):
    r"""M^c_0..M^c_{L−1} of the continuous part of μ_S at √c = ``rc`` (P,): M^c_0 = min(1, c),
    M_k = Σ_{j=1}^k N(k, j) c^{1−j} (Narayana numbers N(k, j) = C(k, j) C(k, j − 1)/k).

    Examples
    --------
    >>> mp_moment_values(np.sqrt([2.0]), 3).tolist()   # min(1, c), 1, 1 + 1/c
    [[1.0, 1.0, 1.5]]
    """
    c_ = rc * rc
    cinv = 1 / c_
    out = [np.where(np.asarray(c_ < 1, dtype=bool), c_, 0 * c_ + 1)]
    for k in range(1, L):
        v = 0 * cinv
        for j in range(k, 0, -1):
            v = v * cinv + (math.comb(k, j) * math.comb(k, j - 1) // k)
        out.append(v)
    return np.stack(out, axis=-1)


def stieltjes_continuous(ctx, z, rc):
    r"""m_c(z) = ∫ dμ_c(λ)/(λ − z) and m_c'(z) by the branch rule (docs/theory.md §5.8): with
    √D = c√(z − a)√(z − b) (principal roots), m_c = (|1 − c| − cz + √D)/(2z) = 2c·min(1, c)/(|1 − c| − cz − √D),
    whichever has no cancellation; m_c' = −m_c(m_c + c)/√D. ``z`` complex (P, n), ``rc`` (P, 1).

    Examples
    --------
    >>> m, _ = stieltjes_continuous(FloatContext(), np.array([[-1.0 + 0j]]), np.ones((1, 1)))
    >>> round(float(m.real[0, 0]), 10)                  # c = 1: m(-1) = (sqrt(5) - 1)/2
    0.6180339887
    """
    _, sqrt, _, absf = _complex_ops(ctx)
    c_ = rc * rc
    a, b = (1 - 1 / rc) ** 2, (1 + 1 / rc) ** 2
    s = c_ * sqrt(z - a) * sqrt(z - b)
    below = np.asarray(c_ < 1, dtype=bool)
    U = np.where(below, 1 - c_, c_ - 1)
    cm = np.where(below, c_, 0 * c_ + 1)
    X = U - c_ * z
    plus, minus = X + s, X - s
    with np.errstate(all="ignore"):
        m = np.where(absf(plus) >= absf(minus), plus / (2 * z), 2 * c_ * cm / minus)
        return m, -m * (m + c_) / s


def _roots(ctx, L3, L2, L1, L0):
    """The roots (P, 3) of L3 λ³ + L2 λ² + L1 λ + L0: companion eigenvalues, polished by Newton."""
    tocx = _complex_ops(ctx)[0]
    f = [np.asarray(ctx.to_float(v), dtype=float) for v in (L3, L2, L1, L0)]
    P = f[0].shape[0]
    comp = np.zeros((P, 3, 3))
    with np.errstate(all="ignore"):
        comp[:, 0, 0], comp[:, 0, 1], comp[:, 0, 2] = -f[1] / f[0], -f[2] / f[0], -f[3] / f[0]
    comp[:, 1, 0] = comp[:, 2, 1] = 1
    good = np.all(np.isfinite(comp), axis=(1, 2))
    zf = np.full((P, 3), np.nan + 0j)
    if good.any():
        zf[good] = np.linalg.eigvals(comp[good])
    z = tocx(zf)
    L3, L2, L1, L0 = (v[:, None] for v in (L3, L2, L1, L0))
    steps = 2 if ctx.name != "mpmath" else 2 + int(np.ceil(np.log2(max(ctx.dps, 16) / 15.0)))
    with np.errstate(all="ignore"):
        for _ in range(steps):
            z = z - (((L3 * z + L2) * z + L1) * z + L0) / ((3 * L3 * z + 2 * L2) * z + L1)
    return z


def basis(ctx, rc, b0, b1, D0, D1, moments, linear):
    r"""The basis over the continuous part of μ_S at P points, Δ = D0 + D1λ + λ(b1λ + b0)²
    (docs/theory.md §5.8): ``cont`` (P, moments + 2n) = (M^c_l, I_{1,k}, I_{2,k}), the atom
    (1 − c)_+ (P,) and ``ok`` (P,): no root of Δ meets the support, all finite.

    Examples
    --------
    >>> one = np.ones(1)
    >>> (cont, atom), ok = basis(FloatContext(), one, 0 * one, 0 * one, one, one, 1, True)  # Δ = 1 + λ, c = 1
    >>> bool(ok[0]), round(float(cont[0, 1]), 10)        # ∫ dμ_S/(1 + λ) = m(-1) at c = 1
    (True, 0.6180339887)
    """
    tocx, _, re, absf = _complex_ops(ctx)
    P = rc.shape[0]
    n = 1 if linear else 3
    mp = ctx.name == "mpmath"
    if not mp:  # float64: the basis in extended precision, rounded at the end
        rc, b0, b1, D0, D1 = (np.asarray(v, dtype=np.longdouble) for v in (rc, b0, b1, D0, D1))
    L3, L2, L1 = b1 * b1, 2 * b0 * b1, D1 + b0 * b0
    c_ = rc * rc
    below = np.asarray(ctx.to_float(c_), dtype=float) < 1
    with np.errstate(all="ignore"):
        if linear:
            z = tocx(-D0 / L1)[:, None]
            m, md = stieltjes_continuous(ctx, z, rc[:, None])
            I1 = [re(m[:, 0]) / L1]
            I2 = [re(md[:, 0]) / (L1 * L1)]
        else:
            z = _roots(ctx, L3, L2, L1, D0)
            m, md = stieltjes_continuous(ctx, z, rc[:, None])
            # ∂z_i/∂D0 = −1/Δ'(z_i), Δ'(z_i) = L3 ∏_{k≠i}(z_i − z_k): exact for the roots as computed (Horner's
            # rule at two roots √γ apart loses the cancellation Σ ∂z_i/∂D0 = 0; docs/theory.md §5.8)
            dz = -1 / (L3[:, None] * (z - np.roll(z, 1, axis=1)) * (z - np.roll(z, 2, axis=1)))
            order = np.argsort(absf(z), axis=1)
            zs, ms, ds = (np.take_along_axis(v, order, axis=1) for v in (z, m, md * dz))
            dzs = np.take_along_axis(dz, order, axis=1)
            U = np.where(below, 1 - c_, c_ - 1)
            K = np.where(below, 0 * c_ + 1, c_)
            h = _divided_basis([_Dual(ms[:, i], ds[:, i]) for i in range(3)],
                              [_Dual(zs[:, i], dzs[:, i]) for i in range(3)], c_, U, K)
            I1 = [re(x.v) / L3 for x in h]
            I2 = [re(-x.d) / L3 for x in h]
    cont = np.empty((P, moments + 2 * n), dtype=object if mp else np.longdouble)
    cont[:, :moments] = mp_moment_values(rc, moments)
    for j in range(n):
        cont[:, moments + j], cont[:, moments + n + j] = I1[j], I2[j]
    atom = np.where(below, 1 - c_, 0 * c_)
    a = np.asarray(ctx.to_float((1 - 1 / rc) ** 2), dtype=float)[:, None]
    b = np.asarray(ctx.to_float((1 + 1 / rc) ** 2), dtype=float)[:, None]
    zr = np.asarray(ctx.to_float(re(z)), dtype=float)
    zi = np.asarray(np.frompyfunc(lambda v: float(v.imag), 1, 1)(z), dtype=float) if mp else np.asarray(
        np.imag(z), dtype=float)
    dist = np.hypot(np.maximum(np.maximum(a - zr, zr - b), 0), zi)
    ok = np.all(np.isfinite(zr) & np.isfinite(zi) & (dist > SUPPORT_DISTANCE * (b - a)), axis=1)
    ok &= np.all(np.isfinite(np.asarray(ctx.to_float(cont), dtype=float)), axis=1)
    lm = 1 + 1 / c_   # Δ((a + b)/2) > 0 and Δ(0) = D0 > 0: the branch
    mid = D0 + D1 * lm + lm * (b1 * lm + b0) ** 2
    ok &= (np.asarray(ctx.to_float(mid), dtype=float) > 0) & (np.asarray(ctx.to_float(D0), dtype=float) > 0)
    if not mp:   # the basis stays in extended precision (ClosedTerms.integrate rounds the sums)
        atom = atom.astype(float)
    return (cont, atom), ok


class Points:
    """The parameters at P points as (P,) arrays in the context's arithmetic."""

    def __init__(self, ctx, c, gamma, a1, s2, d):
        self.c, self.gamma = ctx.convert(c), ctx.convert(gamma)
        P = self.c.shape[0]
        self.a1, self.s2, self.d = (np.broadcast_to(ctx.convert(v), (P,)).copy() for v in (a1, s2, d))
        self.rc = ctx.sqrt(self.c)
        self.P = P

    def take(self, idx):
        out = object.__new__(Points)
        for k in ("c", "gamma", "a1", "s2", "d", "rc"):
            setattr(out, k, getattr(self, k)[idx])
        out.P = len(idx)
        return out


def _e_basis(ctx, p, e, moments, linear):
    b1 = p.rc * p.a1
    b0 = p.rc * (p.d - p.a1) - p.s2 * e[:, 2]
    w = p.gamma + p.s2 * e[:, 1]
    return basis(ctx, p.rc, b0, b1, w, w * p.s2 * e[:, 0], moments, linear)


def _eargs(p, e):
    return (e[:, 0], e[:, 1], e[:, 2], p.rc, p.gamma, p.a1, p.s2, p.d)


def _bulk_map(ctx, p, e, linear):
    """I(e) (P, 3), ∫∂g/∂e (P, 3, 3), the relative residual (P,) and the admissibility mask."""
    kern = CLOSED[ctx.lambdify_modules][("newton", linear)]
    B, ok = _e_basis(ctx, p, e, kern.moments, linear)
    vals = kern.integrate(ctx, B, _eargs(p, e), p.P)
    I, J = vals[:, :3], vals[:, 3:12].reshape(-1, 3, 3)
    ef = np.asarray(ctx.to_float(e), dtype=float)
    with np.errstate(all="ignore"):   # in the working arithmetic, then rounded
        diff = np.asarray(ctx.to_float(np.abs(e - I)), dtype=float)
        scale = np.asarray(ctx.to_float(np.abs(e) + np.abs(I)), dtype=float)
        res = np.max(np.where(diff == 0, 0.0, diff / scale), axis=1)
    ok &= (ef[:, 0] > 0) & np.isfinite(res)
    return I, J, np.where(ok, res, np.inf), ok


def _newton(ctx, p, e, linear):
    """Newton on e = I(e) with backtracking at the points ``p`` from ``e``; returns (e, residual, converged)."""
    eye = ctx.convert(np.eye(3))[None]
    tol = float(ctx.tol)
    I, J, res, ok = _bulk_map(ctx, p, e, linear)
    active = np.nonzero(ok & (res > tol * 1e-3))[0]
    dead, done = ~ok, np.zeros(len(res), dtype=bool)
    for _ in range(CLOSED_NEWTON_MAX_ITER):
        if not active.size:
            break
        with np.errstate(all="ignore"):
            try:
                step = ctx.solve(eye - J[active], e[active] - I[active])
            except (np.linalg.LinAlgError, ZeroDivisionError):
                dead[active] = True
                break
        t, pending, pstep = 1.0, active, step
        for k in range(30):
            trial = e[pending] - ctx.convert(t) * pstep
            I_t, J_t, r_t, ok_t = _bulk_map(ctx, p.take(pending), trial, linear)
            near = res[pending] <= tol
            better = ok_t & np.where(near, r_t < 0.5 * res[pending], (r_t < 1e4 * res[pending]) | (r_t <= tol))
            took = pending[better]
            e[took], I[took], J[took], res[took] = trial[better], I_t[better], J_t[better], r_t[better]
            pending, pstep = pending[~better], pstep[~better]
            if not pending.size:
                break
            converged = res[pending] <= tol   # converged: a step that does not halve the residual ends it
            done[pending[converged]] = True
            pending, pstep = pending[~converged], pstep[~converged]
            if not pending.size:
                break
            t *= 0.5
        dead[pending] = True   # no acceptable step
        active = np.nonzero(~dead & ~done & (res > tol * 1e-3))[0]
    ef = np.asarray(ctx.to_float(e), dtype=float)
    # a point that ends within STALL_FACTOR of the tolerance is converged: the residual is relative
    # to |e| + |I(e)|, which the rounding of cancelling terms of I bounds from below (large gamma)
    ok = res <= STALL_FACTOR * tol
    return e, res, ok & (ef[:, 1] > -1e-9) & (ef[:, 1] < 1 + 1e-9) & np.isfinite(res)


def _start(ctx, gamma):
    e = ctx.convert(np.zeros((gamma.shape[0], 3)))
    e[:, 0] = 1 / gamma
    return e


def _continuation(ctx, p, linear):
    r"""Newton continued in γ, point by point: solved at γ_0 = max(10γ, a1² + s² + d²) first (10γ_0
    until Newton converges), then at γ_k = γ_{k−1}/r (r = 4, taken smaller after a failed step)
    from the previous solution, down to the point's γ. Returns (e, residual, converged)."""
    e = ctx.convert(np.full((p.P, 3), np.nan))
    res = np.full(p.P, np.inf)
    conv = np.zeros(p.P, dtype=bool)
    for i in range(p.P):
        q = p.take(np.array([i]))
        target = float(ctx.to_float(q.gamma[0]))
        scale = float(ctx.to_float(q.a1[0] ** 2 + q.s2[0] + q.d[0] ** 2))
        g = max(10 * target, scale)
        for _ in range(8):
            q.gamma = ctx.convert(np.array([g]))
            ei, ri, ci = _newton(ctx, q, _start(ctx, q.gamma), linear)
            if ci[0]:
                break
            g *= 10
        if not ci[0]:
            continue
        ratio = 4.0
        for _ in range(CLOSED_CONTINUATION_STEPS):
            if g <= target:
                break
            gn = max(g / ratio, target)
            q.gamma = ctx.convert(np.array([gn]))
            en, rn, cn = _newton(ctx, q, ei.copy(), linear)
            if cn[0]:
                g, ei, ri = gn, en, rn
            else:
                ratio = math.sqrt(ratio)
                if ratio < 1.01:
                    break
        if g <= target:
            e[i], res[i], conv[i] = ei[0], ri[0], True
    return e, res, conv


def _reduced(ctx, p):
    r"""a1 = d = 0 (docs/theory.md §5.6): e3 = 0 and u = s²e1 solves h(u) = uγ − s²K(u) = 0,
    K(u) = ∫ dμ_S/(1 + uλ) = (1 − c)_+ + m_c(−1/u)/u, increasing h; bisection in log u on
    (0, s²/γ] in float64, then e = (u/s², (1 − K(u))/u, 0), to be polished by Newton."""
    fctx = FloatContext()
    g = np.asarray(ctx.to_float(p.gamma), dtype=float)
    s2 = np.asarray(ctx.to_float(p.s2), dtype=float)
    rc = np.asarray(ctx.to_float(p.rc), dtype=float)
    atom = np.maximum(1 - rc * rc, 0.0)

    def K(u):
        m, _ = stieltjes_continuous(fctx, (-1 / u + 0j)[:, None], rc[:, None])
        return atom + np.real(m[:, 0]) / u

    lo, hi = np.log(s2 / g) - 80.0, np.log(s2 / g)
    for _ in range(120):   # in log u, down to adjacent float64 numbers
        mid = (lo + hi) / 2
        u = np.exp(mid)
        neg = u * g - s2 * K(u) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
    lo, hi = np.exp(lo), np.exp(hi)
    for _ in range(80):    # then in u itself, to the last bit
        mid = (lo + hi) / 2
        if np.all((mid == lo) | (mid == hi)):
            break
        neg = mid * g - s2 * K(mid) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
    u = (lo + hi) / 2
    e = np.zeros((p.P, 3))
    e[:, 0] = u / s2
    e[:, 1] = (1 - K(u)) / u
    return ctx.convert(e)


def solve_bulk_closed(ctx, p, linear, info=None):
    """The bulk solution e (P, 3) in closed form: Newton from (1/γ, 0, 0), the reduced equation
    for a1 = d = 0, Newton continued in γ where Newton fails; ConvergenceError for a point that
    does not converge on the branch (or whose roots of Δ meet the support).

    Examples
    --------
    >>> ctx = FloatContext()
    >>> p = Points(ctx, np.array([0.5]), np.array([1.0]), 0.6, 0.03, 0.0)
    >>> bool(0 < solve_bulk_closed(ctx, p, False)[0, 0] < 1)
    True
    """
    zero = (np.asarray(ctx.to_float(p.a1), dtype=float) == 0) & (np.asarray(ctx.to_float(p.d), dtype=float) == 0)
    zero &= np.asarray(ctx.to_float(p.s2), dtype=float) > 0
    e = _start(ctx, p.gamma)
    res, conv = np.full(p.P, np.inf), np.zeros(p.P, dtype=bool)
    if zero.any():
        iz = np.nonzero(zero)[0]
        q = p.take(iz)
        e[iz] = _reduced(ctx, q)
        _, _, res[iz], ok = _bulk_map(ctx, q, e[iz], linear)
        # solved to the tolerance by the reduced equation: no Newton step (at small gamma, c > 1 its
        # Jacobian is ill-conditioned and a step that lowers the residual can raise the error)
        conv[iz] = ok & (res[iz] <= float(ctx.tol))
    todo = np.nonzero(~conv)[0]
    if todo.size:
        e[todo], res[todo], conv[todo] = _newton(ctx, p.take(todo), e[todo], linear)
    bad = np.nonzero(~conv)[0]
    if bad.size:
        e_c, r_c, c_c = _continuation(ctx, p.take(bad), linear)
        e[bad[c_c]], res[bad[c_c]], conv[bad[c_c]] = e_c[c_c], r_c[c_c], True
    if not conv.all():
        i = int(np.nonzero(~conv)[0][0])
        point = {"c": float(ctx.to_float(p.c[i])), "gamma": float(ctx.to_float(p.gamma[i])), **(info or {})}
        raise ConvergenceError("the closed form does not apply here (no convergence on the branch, or a root of "
                               "Delta on the support of the Marchenko-Pastur law); symattn solve falls back to "
                               "quadrature", residuals=[float(res[i])], point=point)
    return e


def closed_traces(ctx, p, e, linear):
    """T (P, 9), the centred traces U (P, 3) and Ṫ (P, 9) at the bulk solution, in closed form."""
    eye = ctx.convert(np.eye(3))[None]
    mods = ctx.lambdify_modules
    tang, kern = CLOSED[mods][("tangent", linear)], CLOSED[mods][("regular-kernels", linear)]
    w = p.gamma + p.s2 * e[:, 1]
    Pv = w * e[:, 0]
    L = max(tang.moments, kern.moments)
    (cont, atom), _ = basis(ctx, p.rc, p.rc * (p.d - p.a1) - p.s2 * e[:, 2], p.rc * p.a1, w, p.s2 * Pv, L, linear)
    n = kern.n

    def sub(k):
        return cont[:, list(range(k.moments)) + list(range(L, L + 2 * n))], atom

    rargs = (Pv, e[:, 1], e[:, 2], p.rc, p.gamma, p.a1, p.s2, p.d)
    tv = tang.integrate(ctx, sub(tang), rargs, p.P)
    x_dot = ctx.solve(eye - tv[:, :9].reshape(-1, 3, 3), tv[:, 9:12])
    kargs = rargs + (x_dot[:, 0], x_dot[:, 1], x_dot[:, 2])
    kv = kern.integrate(ctx, sub(kern), kargs, p.P)
    kvc = kern.integrate(ctx, sub(kern), kargs, p.P, continuous=True)
    T, T_dot = kv[:, :9].copy(), kv[:, 11:20].copy()
    small = np.nonzero(np.asarray(ctx.to_float(Pv), dtype=float) < REGULAR_MIN_P)[0]
    if small.size:  # e1 bounded: the (e1, e2, e3) form
        q, es = p.take(small), e[small]
        newton = CLOSED[mods][("newton", linear)]
        sens = CLOSED[mods][("sensitivity", linear)]
        ek = CLOSED[mods][("resolvent-kernels", linear)]
        L2 = max(newton.moments, sens.moments, ek.moments)
        (ce, ae), _ = _e_basis(ctx, q, es, L2, linear)

        def sub2(k):
            return ce[:, list(range(k.moments)) + list(range(L2, L2 + 2 * n))], ae

        eargs = _eargs(q, es)
        nv = newton.integrate(ctx, sub2(newton), eargs, q.P)
        sv = sens.integrate(ctx, sub2(sens), eargs, q.P)
        e_dot = ctx.solve(eye - nv[:, 3:12].reshape(-1, 3, 3), sv)
        ev = ek.integrate(ctx, sub2(ek), eargs + (e_dot[:, 0], e_dot[:, 1], e_dot[:, 2]), q.P)
        T[small], T_dot[small] = ev[:, :9], ev[:, 9:]
    c_ = p.rc * p.rc
    above = np.where(np.asarray(ctx.to_float(c_), dtype=float) > 1, c_ - 1, 0 * c_)
    U = np.empty((p.P, 3), dtype=T.dtype)
    U[:, 0] = kvc[:, 9] - above / c_
    U[:, 1] = -e[:, 1] / c_
    U[:, 2] = kv[:, 10]
    return T, U, T_dot


def attention_closed(ctx, c, gamma, a1, s2, d, gram, rank, points=None, info=None):
    r"""E_A = −γ² F'(γ) (docs/theory.md §6) and F at P points (c, γ) in closed form, for Gram
    matrices ``gram`` (Q, 1 + 2r, 1 + 2r); ``points`` (Q,) the bulk point of each (default: Q = P).
    d may be a (P,) array (the finite-p diagonal d_n). Every E is finite and in [0, 1], or
    ConvergenceError.

    Examples
    --------
    >>> E, F = attention_closed(FloatContext(), [0.5, 2.0], [1.0, 1.0], 0.6, 0.03, 0.0, np.eye(3)[None], 1)
    >>> E.shape, bool(np.all((0 < E) & (E < 1)))
    ((2,), True)
    """
    c = np.atleast_1d(np.asarray(c, dtype=float))
    gamma = np.atleast_1d(np.asarray(gamma, dtype=float))
    p = Points(ctx, c, gamma, a1, s2, d)
    linear = float(ctx.to_float(p.a1[0])) == 0
    e = solve_bulk_closed(ctx, p, linear, info)
    with np.errstate(all="ignore"):
        T, U, T_dot = closed_traces(ctx, p, e, linear)
    if points is None:
        points = np.arange(p.P)
    gram = ctx.convert(np.asarray(gram, dtype=float))
    gram = np.broadcast_to(gram, (len(points),) + gram.shape[-2:])
    a1p, rcp, gp = p.a1[points], p.rc[points], p.gamma[points]
    A = kernel_coefficients(ctx, a1p, gram, rank)
    with np.errstate(all="ignore"):
        F, F_dot = woodbury(ctx, T[points], T_dot[points], A, gram, rank, rcp, a1=a1p, centred=U[points])
    E = -(gp * gp) * F_dot
    Ef = np.asarray(ctx.to_float(E), dtype=float)
    bad = ~(np.isfinite(Ef) & (Ef >= -UNIT_SLACK) & (Ef <= 1 + UNIT_SLACK))
    if bad.any():
        i = int(np.nonzero(bad)[0][0])
        j = int(points[i])
        raise ConvergenceError(f"impossible value E={Ef[i]!r} (not in [0, 1])", point={
            "c": float(c[j]), "gamma": float(gamma[j]), **(info or {})})
    out = np.where(Ef < 0, 0 * E, np.where(Ef > 1, 0 * E + 1, E))
    return out, F

