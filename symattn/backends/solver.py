r"""The solver runtime: the bulk and attention systems solved at vectors of points, written once
against an arithmetic context and a table of compiled kernels.

This module needs numpy, a context (:mod:`symattn.backends.context`: float64 or mpmath) and the
table ``KERNELS[ctx.lambdify_modules][key]`` of compiled kernels (:mod:`symattn.backends.kernels`:
lambdified SymPy). A generated standalone solver (:mod:`symattn.codegen`) carries this module's
source verbatim, with its relative imports replaced by copies of what they import and by its own
table of printed kernels: there is one copy of the runtime.

Bulk fixed point (docs/theory.md §5): e = I(e), I_i(e) = ∫ g_i(λ; e) dμ_S, solved by Newton with
the SymPy-derived Jacobian J = I − ∫ ∂g/∂e dμ_S (vectorised over points, with backtracking); the
residual of each equation is relative to ∫ |g_i| dμ_S. Where Newton fails, a1 = d = 0 points are
solved by the reduced monotone equation in s²e1 (bisection, then a Newton polish; docs/theory.md
§5.6), small-γ points by Newton continued in γ from a larger γ, and the rest by the damped fixed
point e ← ½ e + ½ I(e). The quadrature node count is doubled until the fixed-point residual
evaluated on twice the nodes is below the context's tolerance (docs/theory.md §5.4, §5.5).

Traces and their γ-derivatives (:func:`regular_traces`): by implicit differentiation in the
regular unknowns x = (P, e2, e3), P = (γ + s² e2) e1, (I − ∫∂g̃/∂x) ẋ = ∫∂g̃/∂γ, then
Ṫ = ∫ (∂/∂γ + ẋ·∂/∂x)(λ^j K) dμ_S, with the centred traces T_KQK^(j) − m_{j−1}/c as integrals of
their own: no O(1/γ) or O(1/c) terms cancel (where P ≪ 1, e1 bounded, the (e1, e2, e3) form is the
cancellation-free one and is used instead). Woodbury (docs/theory.md §6.6), with
v = (I + ĈΓ)^{-1} e_0 (exact rational arithmetic where I + ĈΓ is ill-conditioned):

  F = (Γ v)_0,   F'(γ) = vᵀ Γ̇ v,   E_A = −γ² F'(γ)

(= Γ̇00 − 2 ėᵀu + uᵀ Γ̇ u with u = e_0 − v, without the cancellation). :func:`precision_estimate`
estimates the relative error of E_A by perturbing every intermediate.

Branch check at z = −γ: e1 > 0, 0 ≤ e2 ≤ 1, Δ(λ) > 0 on every node; otherwise ConvergenceError.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ConvergenceError
from .kernels import KERNELS, TRACE_MOMENTS, gram_values
from .quadrature import integrate_many, mp_nodes as _mp_nodes

QUADRATURE_NEWTON_MAX_ITER = 25
NONMONOTONE = 1e4          # a Newton step may raise the merit function at most this factor
FIXED_POINT_MAX_ITER = 20000
CONTINUATION_START = 1e-2  # continuation in γ starts at this multiple of a1² + s² + d²
CONTINUATION_MAX_STEPS = 200
REGULAR_MIN_P = 1e-2      # regular_traces: below this P = (γ + s² e2) e1 the (e1, e2, e3) form is used
QUADRATURE_ACCEPT = 1e3   # at the node budget, a residual on twice the nodes up to this × quad_tol is accepted
PRECISION_DRAWS = 2       # perturbation draws of precision_estimate
WOODBURY_COND = 1e-6       # float64 Woodbury solves with cond·eps above this are done in exact arithmetic
#: float64: array passes over many points (the Woodbury step, the closed form's integrals) run in blocks of this
#: many points, so that their temporaries stay in cache (a (P, N, N) array of 10^5 points is 80 MB)
BLOCK = 2048


class BulkSolution:
    """Solution of the bulk system at P points.

    Attributes
    ----------
    e : array (P, 3)
        e1, e2, e3.
    params : tuple
        (√c, γ, a1, s², d), each (P, 1).
    groups : list
        For each quadrature size used, ``(indices, lam, w)``: the point indices and their nodes
        and weights (P_g, M_g); points whose integrands are sharper got more nodes.
    iterations : int
    residual : array (P,)
        Max-norm relative residual.
    quadrature : array (P,)
        The relative residual of the solution on twice its nodes (the quadrature's error estimate).
    corrections : list
        For each group, the part (P_g, 1) of the weight of λ = 0 that belongs to the continuous
        part of μ_S (:func:`symattn.backends.quadrature.mp_nodes` with ``parts``).
    """

    def __init__(self, e, params, groups, iterations, residual, quadrature=None, corrections=None):
        self.e, self.params, self.groups = e, params, groups
        self.iterations, self.residual = iterations, residual
        self.quadrature = np.zeros(np.shape(residual)) if quadrature is None else quadrature
        if corrections is None:  # recovered from the weights: w_0 minus the atom (1 − c)_+
            corrections = []
            for idx, _, w in groups:
                c = params[0][idx] ** 2
                corrections.append(w[:, 0:1] - np.where(np.asarray(c, dtype=float) < 1, 1 - c, 0 * c))
        self.corrections = corrections

    def continuous_weights(self, k: int):
        """The weights of group ``k`` for the continuous part of μ_S alone (the atom removed)."""
        w = self.groups[k][2].copy()
        w[:, 0:1] = self.corrections[k]
        return w

    def integrate(self, ctx, key: str, extra=None, moments=None):
        """∫ g_j dμ_S for the compiled integrand list ``key`` at the solution: array (P, J).

        ``extra``: per-point arrays (P, k) passed as k further arguments (e.g. ė).
        ``moments``: list of (output index, power j): return ∫ λ^j g_i dμ_S for each pair instead.
        """
        return self.integrate_with(ctx, _kernel(ctx, key), extra, moments)

    def integrate_with(self, ctx, fn, extra=None, moments=None):
        """As :meth:`integrate`, for a compiled integrand list ``fn`` (e.g. a CompiledExprs)."""
        parts = []
        for idx, lam, w in self.groups:
            sub = tuple(p[idx] for p in self.params)
            more = () if extra is None else tuple(extra[idx][:, j:j + 1] for j in range(extra.shape[1]))
            vals = fn(*_args(lam, self.e[idx], sub), *more)
            if moments is not None:
                vals = [vals[i] * lam**j if j else vals[i] for i, j in moments]
            parts.append((idx, integrate_many(vals, w)))
        J = parts[0][1].shape[1]
        out = np.empty((self.e.shape[0], J), dtype=parts[0][1].dtype)
        for idx, vals in parts:
            out[idx] = vals
        return out


def _kernel(ctx, key: str):
    """The compiled kernel ``key`` in the context's arithmetic, from the table ``KERNELS``."""
    return KERNELS[ctx.lambdify_modules][key]


def _args(lam, e, params):
    rc, g, a1, s2, d = params
    return (lam, e[:, 0:1], e[:, 1:2], e[:, 2:3], rc, g, a1, s2, d)


def _fixed_point_map(ctx, lam, w, e, params, jacobian=True):
    """I(e) = ∫ g(λ; e) dμ_S (P, 3), its scale ∫ |g| dμ_S (P, 3) and, with ``jacobian``,
    ∫ ∂g/∂e dμ_S (P, 3, 3) (else None). The scale is what the residual is measured against
    (:func:`relative_residual`)."""
    key = "bulk-newton" if jacobian else "bulk-residual"
    vals = _kernel(ctx, key)(*_args(lam, e, params))
    I = integrate_many(vals[:3], w)
    A = integrate_many([np.abs(v) for v in vals[:3]], np.abs(w))
    if not jacobian:
        return I, A, None
    return I, A, integrate_many(vals[3:12], w).reshape(-1, 3, 3)


def _residual_scale(ctx, e, A):
    """max(|e_i|, ∫ |g_i| dμ_S): each equation's residual is relative to the size of its own integral.

    A fixed absolute floor (max(1, |e|)) would accept e2 = 0 where e2 ~ γ/s² is tiny (a1 = d = 0
    at small γ/s²; docs/theory.md §5.6), a point that is not a root.
    """
    return np.maximum(np.maximum(np.abs(ctx.to_float(e)), ctx.to_float(A)), np.finfo(float).tiny)


def relative_residual(ctx, e, I, A):
    """max_i |e_i − I_i| / max(|e_i|, ∫ |g_i| dμ_S) per point: the residual of e = I(e) (P, 3) that the quadrature
    solver and the closed form both converge on (``A`` = ∫ |g_i| dμ_S, (P, 3)).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> e = np.array([[2.0, 0.5, 0.25]])
    >>> relative_residual(FloatContext(), e, e * (1 + 2.0**-20), np.abs(e)).tolist() == [2.0**-20]
    True
    """
    return np.max(np.abs(ctx.to_float(e - I)) / _residual_scale(ctx, e, A), axis=-1)


def _merit(ctx, e, I, A):
    """Newton's merit function ‖(e − I)/scale‖₂² with the scale of :func:`_residual_scale`."""
    return np.sum((ctx.to_float(e - I) / _residual_scale(ctx, e, A)) ** 2, axis=-1)


def _delta(ctx, lam, e, params):
    return ctx.to_float(_kernel(ctx, "delta")(*_args(lam, e, params))[0])


def _admissible(ctx, lam, w, e, params, strict=True):
    """e1 > 0, 0 ≤ e2 ≤ 1 and Δ(λ) > 0 on every node of positive weight (the branch at z = −γ).

    With ``strict=False`` (Newton's iterates) e2 may leave [0, 1]: the solution can sit at e2 → 0,
    and only Δ > 0 is needed for the integrals to make sense.
    """
    ef = ctx.to_float(e)
    ok = np.all(np.isfinite(ef), axis=-1) & (ef[:, 0] > 0)
    if strict:
        ok &= (ef[:, 1] > -1e-9) & (ef[:, 1] < 1 + 1e-9)
    with np.errstate(invalid="ignore", divide="ignore"):
        live = ctx.to_float(w) != 0
        ok &= np.all((_delta(ctx, lam, e, params) > 0) | ~live, axis=-1)
    return ok


def _solve_rows(ctx, A, b):
    """ctx.solve of the stacked systems A x = b; a singular one gets a NaN step (its point then fails
    Newton's line search and is reported as not converged) instead of stopping every point."""
    try:
        return ctx.solve(A, b)
    except (np.linalg.LinAlgError, ValueError, ZeroDivisionError):   # numpy; mpmath's lu/qr_solve
        out = np.empty_like(np.asarray(b))
        for i in range(len(b)):
            try:
                out[i] = ctx.solve(A[i:i + 1], b[i:i + 1])[0]
            except (np.linalg.LinAlgError, ValueError, ZeroDivisionError):
                with np.errstate(invalid="ignore"):
                    out[i] = ctx.convert(np.full(np.shape(b)[1:], np.nan))
        return out


def _quadrature_newton(ctx, lam, w, e, params, tol):
    """Vectorised Newton with backtracking; returns (e, residual, converged mask, iterations)."""
    eye = ctx.convert(np.eye(3))
    I, A, JI = _fixed_point_map(ctx, lam, w, e, params)
    res = relative_residual(ctx, e, I, A)
    merit = _merit(ctx, e, I, A)
    it = 0
    active = res > tol
    while np.any(active) and it < QUADRATURE_NEWTON_MAX_ITER:
        it += 1
        idx = np.nonzero(active)[0]
        step = _solve_rows(ctx, eye[None] - JI[idx], e[idx] - I[idx])
        t = 1.0
        pending = idx
        pstep = step
        for _ in range(40):
            sub = tuple(p[pending] for p in params)
            trial = e[pending] - t * pstep
            ok = _admissible(ctx, lam[pending], w[pending], trial, sub, strict=False)
            safe = np.where(ok[:, None], trial, e[pending])
            I_t, A_t, JI_t = _fixed_point_map(ctx, lam[pending], w[pending], safe, sub)
            r_t = relative_residual(ctx, safe, I_t, A_t)
            m_t = _merit(ctx, safe, I_t, A_t)
            # non-monotone acceptance: Newton may climb the merit function for a few steps on its way
            better = ok & ((m_t < NONMONOTONE * merit[pending]) | (r_t <= tol))
            took = pending[better]
            e[took], I[took], JI[took], res[took] = trial[better], I_t[better], JI_t[better], r_t[better]
            merit[took] = m_t[better]
            pending, pstep = pending[~better], pstep[~better]
            if not pending.size:
                break
            t *= 0.5
        active = res > tol
        active[pending] = False  # no descent: leave to the fallback
    return e, res, res <= tol, it


def _continuation(ctx, lam, w, params, tol, start=CONTINUATION_START, max_steps=CONTINUATION_MAX_STEPS):
    r"""Newton continued in γ down from γ_0 = max(γ, start·(a1² + s² + d²)) to each point's γ.

    Where Newton from (1/γ, 0, 0) fails at small γ (c > 1: e1 ~ 1/√γ, e2 ~ √γ, docs/theory.md §7.3,
    far from the start), it is solved at γ_0 first, then at γ_k = γ_{k−1}/r (r = 10, taken
    smaller after a failed step) from a start extrapolated log-linearly in γ (e1, e2 > 0 follow
    power laws in γ, e3 is extrapolated linearly in log γ), down to the point's γ.
    Returns (e, residual, converged mask, Newton iterations).
    """
    rc, gamma, a1, s2, d = params
    P = gamma.shape[0]
    target = ctx.to_float(gamma[:, 0])
    scale = ctx.to_float(a1[:, 0]) ** 2 + ctx.to_float(s2[:, 0]) + ctx.to_float(d[:, 0]) ** 2
    g_now = np.maximum(target, start * scale)
    e = initial_guess(ctx, ctx.convert(g_now))
    sub = (rc, ctx.convert(g_now.reshape(-1, 1)), a1, s2, d)
    e, res, ok, total = _quadrature_newton(ctx, lam, w, e, sub, tol)
    ok &= _admissible(ctx, lam, w, e, sub, strict=False)
    prev_g, prev_e = g_now.copy(), e.copy()
    ratio = np.full(P, 10.0)
    for _ in range(max_steps):
        active = np.nonzero(ok & (g_now > target))[0]
        if not active.size:
            break
        gn = np.maximum(g_now[active] / ratio[active], target[active])
        guess = e[active].copy()
        seen = prev_g[active] > g_now[active]          # two solutions known: extrapolate
        with np.errstate(all="ignore"):
            step = np.log(gn / g_now[active]) / np.log(g_now[active] / prev_g[active])
        for j, i in enumerate(active):
            if not seen[j]:
                continue
            for k in (0, 1):
                a, b = ctx.to_float(prev_e[i, k]), ctx.to_float(e[i, k])
                if a > 0 and b > 0:
                    guess[j, k] = e[i, k] * ctx.convert((b / a) ** step[j])
            guess[j, 2] = e[i, 2] + (e[i, 2] - prev_e[i, 2]) * ctx.convert(step[j])
        sb = (rc[active], ctx.convert(gn.reshape(-1, 1)), a1[active], s2[active], d[active])
        e_n, r_n, conv, it = _quadrature_newton(ctx, lam[active], w[active], guess, sb, tol)
        total += it
        conv &= _admissible(ctx, lam[active], w[active], e_n, sb, strict=False)
        took, failed = active[conv], active[~conv]
        prev_g[took], prev_e[took] = g_now[took], e[took]
        g_now[took], e[took], res[took] = gn[conv], e_n[conv], r_n[conv]
        ratio[failed] = np.sqrt(ratio[failed])
        ok[failed[ratio[failed] < 1.01]] = False
    ok &= g_now <= target
    return e, res, ok, total


def damped_fixed_point(ctx, lam, w, e, params, tol):
    """Damped iteration e ← ½e + ½I(e) (docs/theory.md §5.5), the fallback for points where Newton fails.

    Near a1 = 0 at small γ the Jacobian is nearly singular and Newton's basin is tiny; this
    iteration still converges (linearly). ``lam``, ``w``: the quadrature nodes and weights (P, m);
    ``params``: (√c, γ, a1, s², d), each (P, 1). Returns (e, residual, iterations).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> from symattn.backends.quadrature import mp_nodes
    >>> ctx = FloatContext()
    >>> lam, w = mp_nodes(ctx, np.array([0.5]), 200)
    >>> params = tuple(np.full((1, 1), v) for v in (np.sqrt(0.5), 1.0, 0.6, 0.03, 0.0))
    >>> e, res, its = damped_fixed_point(ctx, lam, w, initial_guess(ctx, np.array([1.0])), params, 1e-12)
    >>> bool(res[0] <= 1e-12 and e[0, 0] > 0)
    True
    """
    res = np.full(e.shape[0], np.inf)
    active = np.arange(e.shape[0])
    it = 0
    while active.size and it < FIXED_POINT_MAX_ITER:
        it += 1
        sub = tuple(p[active] for p in params)
        I, A, _ = _fixed_point_map(ctx, lam[active], w[active], e[active], sub, jacobian=False)
        res[active] = relative_residual(ctx, e[active], I, A)
        e[active] = (e[active] + I) / 2
        active = active[res[active] > tol]
    return e, res, it


def _reduced_a1_d_zero(ctx, lam, w, params, max_iter=400):
    r"""The bulk at a1 = d = 0 (cos, he3 with the diagonal zeroed, ...): there β = −s²e3, so e3 = 0,
    Δ = (γ + s²e2)(1 + s²e1λ), and the system reduces to e1 = 1/(γ + s²e2), e2 = ∫λ/(1 + s²e1λ) dμ_S,
    i.e. to one equation in u = s²e1,

      h(u) = u (γ + s² m(u)) − s² = 0,   m(u) = ∫ λ/(1 + uλ) dμ_S,

    with h increasing (u·m(u) = ∫uλ/(1+uλ) increases), h(0) = −s² < 0 < h(s²/γ). Bisection on
    [0, s²/γ] is sure in any arithmetic; it replaces Newton where its basin is tiny (small γ, where
    e2 ~ √γ and e1 ~ 1/(s²√γ)). Returns e (B, 3)."""
    _, gamma, _, s2, _ = params
    lo, hi = 0 * gamma, s2 / gamma
    rel = float(ctx.tol) * 1e-3
    for _ in range(max_iter):
        mid = (lo + hi) / 2
        h = mid * (gamma + s2 * integrate_many([lam / (1 + mid * lam)], w)) - s2
        neg = ctx.to_float(h) < 0
        lo, hi = np.where(neg, mid, lo), np.where(neg, hi, mid)
        if np.all(ctx.to_float(hi - lo) <= rel * ctx.to_float(hi)):
            break
    u = (lo + hi) / 2
    e = ctx.convert(np.zeros((gamma.shape[0], 3)))
    e[:, 0:1] = u / s2
    e[:, 1:2] = integrate_many([lam / (1 + u * lam)], w)
    return e


def initial_guess(ctx, gamma):
    """The start e = (1/γ, 0, 0) (P, 3) of the bulk Newton iterations at the ridges ``gamma`` (P,), shared with the
    closed form: the solution of e = I(e) as γ → ∞ (docs/theory.md §5.5).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> initial_guess(FloatContext(), np.array([0.5, 2.0])).tolist()
    [[2.0, 0.0, 0.0], [0.5, 0.0, 0.0]]
    """
    e = ctx.convert(np.zeros((gamma.shape[0], 3)))
    e[:, 0] = 1 / gamma.reshape(-1)
    return e


def point_arrays(ctx, *values):
    """Broadcast scalars/arrays to 1-D arrays of P points in the context's arithmetic: (P, [arrays]).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> P, (c, g) = point_arrays(FloatContext(), 0.5, [1.0, 2.0])
    >>> P, c.tolist(), g.tolist()
    (2, [0.5, 0.5], [1.0, 2.0])
    """
    P = int(np.prod(np.broadcast_shapes(*(np.shape(v) for v in values)) or (1,)))
    return P, [np.broadcast_to(ctx.convert(v), np.broadcast_shapes(*(np.shape(x) for x in values)))
               .reshape(P).copy() for v in values]


def solve_bulk(ctx, c, gamma, a1, s2, d, point_info=None) -> BulkSolution:
    """Solve the bulk system e = I(e) at the points (c, γ, a1, s², d) (docs/theory.md §5.5).

    Newton from e = (1/γ, 0, 0) on m Marchenko–Pastur nodes; points that fail are solved by the
    reduced equation if a1 = d = 0, else by the damped fixed point; then points whose residual on
    2m nodes exceeds ``ctx.quad_tol`` are re-solved (warm start) with 2m nodes, until
    ``ctx.max_nodes``.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c, gamma, a1, s2, d : scalars or arrays, broadcast to P points
    point_info : dict, optional
        Added to the ``point`` of a ConvergenceError.

    Returns
    -------
    BulkSolution
        e = (e1, e2, e3) (P, 3) with e1 = ∫ (1 + s²e1λ)/Δ dμ_S, e2 = ∫ λ(γ + s²e2)/Δ dμ_S,
        e3 = ∫ λβ/Δ dμ_S.

    Raises
    ------
    ConvergenceError
        No convergence, quadrature budget exhausted, or a solution off the branch.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> sol = solve_bulk(FloatContext(), 2.0, 1e-8, 0.0, 1.0, 0.0)   # a1 = d = 0 at γ = 1e-8
    >>> sol.e.shape, bool(sol.residual[0] < 1e-12)
    ((1, 3), True)
    """
    P, (c, gamma, a1, s2, d) = point_arrays(ctx, c, gamma, a1, s2, d)
    params = tuple(v.reshape(P, 1) for v in (ctx.sqrt(c), gamma, a1, s2, d))
    e = initial_guess(ctx, gamma)
    m, total_it = ctx.nodes, 0
    todo = np.arange(P)
    groups, corrections, res_all, quad_all = [], [], np.zeros(P), np.zeros(P)
    while todo.size:
        sub = tuple(p[todo] for p in params)
        lam, w, corr = _mp_nodes(ctx, c[todo], m, parts=True)
        e_sub, res, conv, it = _quadrature_newton(ctx, lam, w, e[todo].copy(), sub, ctx.tol)
        total_it += it
        bad = np.nonzero(~conv | ~_admissible(ctx, lam, w, e_sub, sub))[0]
        # a1, d this small relative to the kernel's size √(a1² + s² + d²) (quadrature zeros) change e
        # by less than the tolerance
        a1f, s2f, df = (np.abs(ctx.to_float(sub[i][bad, 0])) for i in (2, 3, 4))
        tiny = float(ctx.tol) * 1e-3 * np.sqrt(a1f**2 + s2f + df**2)
        exact = bad[(a1f <= tiny) & (df <= tiny)]
        if exact.size:  # a1 = d = 0: the reduced one-dimensional equation, then a Newton polish
            sb = tuple(p[exact] for p in sub)
            e_r, r_r, conv_r, it_r = _quadrature_newton(ctx, lam[exact], w[exact], _reduced_a1_d_zero(ctx, lam[exact], w[exact], sb),
                                             sb, ctx.tol)
            total_it += it_r
            conv_r &= _admissible(ctx, lam[exact], w[exact], e_r, sb)
            e_sub[exact[conv_r]], res[exact[conv_r]] = e_r[conv_r], r_r[conv_r]
            bad = np.setdiff1d(bad, exact[conv_r])
        small = bad[ctx.to_float(gamma[todo][bad]) < CONTINUATION_START * (
            ctx.to_float(a1[todo][bad]) ** 2 + ctx.to_float(s2[todo][bad]) + ctx.to_float(d[todo][bad]) ** 2)]
        if small.size:  # small γ: Newton continued in γ from a larger γ
            sb = tuple(p[small] for p in sub)
            e_c, r_c, conv_c, it_c = _continuation(ctx, lam[small], w[small], sb, ctx.tol)
            total_it += it_c
            conv_c &= _admissible(ctx, lam[small], w[small], e_c, sb)
            e_sub[small[conv_c]], res[small[conv_c]] = e_c[conv_c], r_c[conv_c]
            bad = np.setdiff1d(bad, small[conv_c])
        if bad.size:  # fallback: the damped fixed point of docs/theory.md §5.5 (slow but sure)
            sb = tuple(p[bad] for p in sub)
            e_sub[bad], res[bad], it_fp = damped_fixed_point(ctx, lam[bad], w[bad], initial_guess(ctx, gamma[todo][bad]),
                                                        sb, ctx.tol)
            total_it += it_fp
            stuck = bad[res[bad] > ctx.tol]
            if stuck.size:
                raise ConvergenceError("no convergence of the bulk fixed point (Newton and the damped fixed point)",
                                       residuals=ctx.to_float(res[stuck]), iterations=total_it,
                                       point=_describe(point_info, todo[stuck], c, gamma))
        e[todo] = e_sub
        lam2, w2 = _mp_nodes(ctx, c[todo], 2 * m)
        I2, A2, _ = _fixed_point_map(ctx, lam2, w2, e_sub, sub, jacobian=False)
        res2 = relative_residual(ctx, e_sub, I2, A2)
        fine = res2 <= ctx.quad_tol
        if 2 * m > ctx.max_nodes:  # the budget is spent: accept near misses (the precision estimate sees res2)
            fine = res2 <= QUADRATURE_ACCEPT * float(ctx.quad_tol)
        if fine.any():
            groups.append((todo[fine], lam[fine], w[fine]))
            corrections.append(corr[fine])
            res_all[todo[fine]] = ctx.to_float(res[fine])
            quad_all[todo[fine]] = res2[fine]
        if not fine.all() and 2 * m > ctx.max_nodes:
            raise ConvergenceError("quadrature did not converge (integrand too sharply peaked)",
                                   residuals=res2[~fine], iterations=total_it,
                                   point=_describe(point_info, todo[~fine], c, gamma))
        todo, m = todo[~fine], 2 * m
    sol = BulkSolution(e=e, params=params, groups=groups, iterations=total_it, residual=res_all, quadrature=quad_all,
                       corrections=corrections)
    check_branch(ctx, sol, point_info, c, gamma)
    return sol


def _describe(info, idx, c, gamma):
    k = int(idx[0])
    out = {"c": float(c[k]), "gamma": float(gamma[k])}
    out.update(info or {})
    if len(idx) > 1:
        out["points_failing"] = int(len(idx))
    return out


def check_branch(ctx, sol, info, c, gamma):
    """Raise ConvergenceError unless every point of the bulk solution ``sol`` converged on the branch e1 > 0,
    0 ≤ e2 ≤ 1, Δ > 0 (``info``: the description of the points, for the error; ``c``, ``gamma``: (P,)).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, [0.1, 1.0], 0.6, 0.03, 0.0)
    >>> check_branch(ctx, sol, {}, np.array([0.5, 0.5]), np.array([0.1, 1.0])) is None
    True
    """
    bad = sol.residual > float(ctx.tol) * 10
    if np.any(bad):
        idx = np.nonzero(bad)[0]
        raise ConvergenceError("no convergence of the bulk fixed point", residuals=sol.residual[idx],
                               iterations=sol.iterations, point=_describe(info, idx, c, gamma))
    wrong = np.zeros(sol.e.shape[0], dtype=bool)
    for idx, lam, w in sol.groups:
        wrong[idx] = ~_admissible(ctx, lam, w, sol.e[idx], tuple(p[idx] for p in sol.params))
    if np.any(wrong):
        idx = np.nonzero(wrong)[0]
        raise ConvergenceError("wrong branch: need e1 > 0, 0 <= e2 <= 1 and Delta > 0 on the support",
                               residuals=sol.residual[idx], iterations=sol.iterations,
                               point=dict(_describe(info, idx, c, gamma), e=ctx.to_float(sol.e[idx[0]]).tolist()))


def bulk_derivative(ctx, sol: BulkSolution):
    """de/dγ by implicit differentiation of e = I(e; γ).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    sol : BulkSolution
        The solution at P points (:func:`solve_bulk`).

    Returns
    -------
    array (P, 3)
        ė solving (I − ∫∂g/∂e dμ_S) ė = ∫∂g/∂γ dμ_S.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, 1.0, 1.0, 0.0, 0.0)   # f(t) = t: e1 = ∫ dμ_S/(γ + cλ³)
    >>> bool(bulk_derivative(ctx, sol)[0, 0] < 0)          # F = e1 decreases with γ
    True
    """
    JI = sol.integrate(ctx, "bulk-newton")[:, 3:12].reshape(-1, 3, 3)
    dI = sol.integrate(ctx, "bulk-sensitivity")
    return ctx.solve(ctx.convert(np.eye(3))[None] - JI, dI)


def traces(ctx, sol: BulkSolution, e_dot):
    """The nine traces T and their γ-derivatives Ṫ = ∂T/∂γ + (∂T/∂e) ė (docs/theory.md §6.3).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    sol : BulkSolution
    e_dot : array (P, 3)
        ė = de/dγ (:func:`bulk_derivative`).

    Returns
    -------
    T, T_dot : arrays (P, 9)
        T = ∫ λ^j {q, k, r}(λ) dμ_S in the order of ``symattn.systems.attention.TRACES``.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, 1.0, 1.0, 0.0, 0.0)
    >>> T, T_dot = traces(ctx, sol, bulk_derivative(ctx, sol))
    >>> bool(abs(T[0, 0] - sol.e[0, 0]) < 1e-12)           # T_Q^(0) = ∫ q dμ_S = e1
    True
    """
    moments = list(TRACE_MOMENTS)
    moments += [(3 + i, j) for i, j in moments]
    vals = sol.integrate(ctx, "resolvent-kernels", extra=e_dot, moments=moments)
    return vals[:, :9], vals[:, 9:]


def regular_traces(ctx, sol: BulkSolution, bump=None):
    r"""The nine traces T, the three centred traces U and Ṫ from the regular form of the bulk system.

    In the unknowns x = (P, e2, e3), P = (γ + s² e2) e1 (:data:`symattn.systems.bulk.REGULAR_INTEGRANDS`),
    ẋ solves (I − ∫∂g̃/∂x dμ_S) ẋ = ∫∂g̃/∂γ dμ_S, and T, Ṫ are the λ-moments of q, k, r and of
    their γ-derivatives (docs/theory.md §6.3) in that form. The centred traces (docs/theory.md §6.5)

      U1 = T_KQK^(1) − 1 = −[(c − 1)_+ + ∫_cont w/Δ dμ_S]/c,   U2 = T_KQK^(2) − 1/c = −e2/c,
      U3 = T_KQK^(3) − (1 + 1/c)/c = −(w/c) ∫ λ²/Δ dμ_S      (w = γ + s² e2)

    are integrals of one-signed integrands. The same values as :func:`traces`, without its loss of
    precision at small γ, where (e1, e2) ~ (1/γ, γ) for c < 1 and every derivative in the
    (e1, e2, e3) form is a difference of O(1/γ) terms, and at small c (U ≪ T). Where P is small
    (P < :data:`REGULAR_MIN_P`: e1 stays bounded while w → 0, e.g. c > 1 with d ≠ 0 at small γ)
    it is the other way round, ė1 = (Ṗ − e1 ẇ)/w cancels, and T, Ṫ are taken in the (e1, e2, e3)
    form (the centred traces still from their integrals).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    sol : BulkSolution
    bump : callable, optional
        Applied to ẋ before it is used (:func:`precision_estimate` perturbs it).

    Returns
    -------
    T, U, T_dot : arrays (P, 9), (P, 3), (P, 9)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, 1.0, 0.6, 0.03, 0.1)
    >>> T, U, T_dot = regular_traces(ctx, sol)
    >>> T0, T_dot0 = traces(ctx, sol, bulk_derivative(ctx, sol))
    >>> bool(np.allclose(T, T0, rtol=1e-12) and np.allclose(T_dot, T_dot0, rtol=1e-10))
    True
    >>> bool(abs(U[0, 1] + sol.e[0, 1] / 0.5) < 1e-15)     # U2 = −e2/c
    True
    """
    P = sol.e.shape[0]
    dtype = ctx.dtype
    T, U, T_dot = (np.empty((P, k), dtype=dtype) for k in (9, 3, 9))
    eye = ctx.convert(np.eye(3))[None]
    for k, (idx, lam, w) in enumerate(sol.groups):
        rc, g, a1, s2, d = (p[idx] for p in sol.params)
        e = sol.e[idx]
        P_ = (g + s2 * e[:, 1:2]) * e[:, 0:1]
        args = (lam, P_, e[:, 1:2], e[:, 2:3], rc, g, a1, s2, d)
        tangent = _kernel(ctx, "regular-tangent")(*args)
        J = integrate_many(tangent[:9], w).reshape(-1, 3, 3)
        x_dot = ctx.solve(eye - J, integrate_many(tangent[9:], w))
        if bump is not None:
            x_dot = bump(x_dot)
        vals = _kernel(ctx, "regular-kernels")(*args, x_dot[:, 0:1], x_dot[:, 1:2], x_dot[:, 2:3])
        K, centred, K_dot = vals[:3], vals[3:5], vals[5:8]
        T[idx] = integrate_many([K[i] * lam**j if j else K[i] for i, j in TRACE_MOMENTS], w)
        T_dot[idx] = integrate_many([K_dot[i] * lam**j if j else K_dot[i] for i, j in TRACE_MOMENTS], w)
        small = np.nonzero(ctx.to_float(P_[:, 0]) < REGULAR_MIN_P)[0]
        if small.size:  # e1 bounded (P ≪ 1): the (e1, e2, e3) form is the cancellation-free one
            sub = tuple(v[small] for v in (rc, g, a1, s2, d))
            e_args = _args(lam[small], e[small], sub)
            JI = integrate_many(_kernel(ctx, "bulk-newton")(*e_args)[3:12], w[small]).reshape(-1, 3, 3)
            e_dot = ctx.solve(eye - JI, integrate_many(_kernel(ctx, "bulk-sensitivity")(*e_args), w[small]))
            if bump is not None:
                e_dot = bump(e_dot)
            more = (e_dot[:, 0:1], e_dot[:, 1:2], e_dot[:, 2:3])
            kern = _kernel(ctx, "resolvent-kernels")(*e_args, *more)
            T[idx[small]] = integrate_many([kern[i] * lam[small]**j if j else kern[i] for i, j in TRACE_MOMENTS],
                                           w[small])
            T_dot[idx[small]] = integrate_many([kern[3 + i] * lam[small]**j if j else kern[3 + i]
                                                for i, j in TRACE_MOMENTS], w[small])
        c = rc[:, 0] ** 2
        above = np.where(ctx.to_float(c) > 1, c - 1, 0 * c)
        U[idx, 0] = integrate_many([centred[0]], sol.continuous_weights(k))[:, 0] - above / c
        U[idx, 1] = -e[:, 1] / c
        U[idx, 2] = integrate_many([centred[1]], w)[:, 0]
    return T, U, T_dot


def kernel_coefficients(ctx, a1, gram, rank: int):
    """𝒜 = a1 Λ(𝔊), the coefficients of the low-rank kernel part (1/p) E 𝒜 Eᵀ (docs/theory.md §6.2).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    a1 : array (P,) or scalar
    gram : array (P, 1 + 2r, 1 + 2r)
        Gram matrices 𝔊 of (μ, w_K, w_Q).
    rank : int
        r.

    Returns
    -------
    array (P, 2 + 2r, 2 + 2r)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> float(kernel_coefficients(FloatContext(), 2.0, np.eye(3)[None], 1)[0, 0, 1])   # a1 Λ01 = a1
    2.0
    """
    P = gram.shape[0]
    dtype = ctx.dtype
    L = _kernel(ctx, f"lambda-r{rank}")(*gram_values(gram), P=P, dtype=dtype)
    return np.asarray(a1).reshape(-1, 1, 1) * L


class WoodburyResult(tuple):
    """What :func:`woodbury` returns: the pair (F, F_dot), which unpacks as such, with the equilibrated
    condition numbers κ_s of I + ĈΓ as ``kappa`` (P,) (0 where the exact rational step solved the point, NaN
    where the exact points were given; 0 for mpmath).

    Examples
    --------
    >>> r = WoodburyResult(np.ones(1), np.zeros(1), np.full(1, 3.0))
    >>> F, F_dot = r
    >>> r.F.tolist(), r.F_dot.tolist(), r.kappa.tolist()
    ([1.0], [0.0], [3.0])
    """

    def __new__(cls, F, F_dot, kappa):
        self = super().__new__(cls, (F, F_dot))
        self.kappa = kappa
        return self

    @property
    def F(self):
        return self[0]

    @property
    def F_dot(self):
        return self[1]


def woodbury(ctx, T, T_dot, A, gram, rank: int, rc, a1=None, centred=None, *, exact=None, store=None,
             rational: bool = True) -> WoodburyResult:
    r"""F and F'(γ) from the traces by the Woodbury identity (docs/theory.md §6.6): the one Woodbury step of
    the quadrature solver, the closed form (:mod:`symattn.backends.closed_runtime`) and generated solvers.

    With v = (I + ĈΓ)^{-1} e_0 (e_0 the first unit vector, Γ and Ĉ symmetric),

      F = [(I + ΓĈ)^{-1} Γ]_00 = (Γ v)_0,   F' = vᵀ Γ̇ v,

    which is Γ̇00 − 2ėᵀu + uᵀΓ̇u with u = e_0 − v = Ĉ(I + ΓĈ)^{-1}e, e = Γ[:, 0], written without
    the subtraction (dR = L dΓ Lᵀ for R = (I + ΓĈ)^{-1}Γ, L = (I + ΓĈ)^{-1}): the expanded form
    cancels catastrophically where F is small (a strong signal). −Γ̇ is a Gram matrix, so
    E = −γ² vᵀΓ̇v ≥ 0 term by term.

    float64: v from the inverse of the equilibrated matrix R(I + ĈΓ)S (R, S diagonal powers of two: every
    row, then every column, of 1-norm in [1/2, 1)), in blocks of :data:`BLOCK` points. At small γ, Γ ~ 1/γ
    makes I + ĈΓ badly scaled but not ill-conditioned: the equilibrated condition number κ_s (1-norm)
    stays ~10². Points with κ_s·eps at least :data:`WOODBURY_COND` (a strong signal: κ_s ~ snr²) are
    redone in exact rational arithmetic from the float64 traces, a1, 𝔊 and √c: E is well-conditioned in
    the traces even there, but not in independently rounded entries of Γ and Ĉ. mpmath: Gaussian
    elimination with partial pivoting at the working precision.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    T, T_dot : arrays (P, 9)
        The traces and their γ-derivatives (:func:`traces`).
    A : array (P, m, m)
        The coefficient matrix 𝒜 of the low-rank kernel part (a1 Λ: :func:`kernel_coefficients`).
    gram : array (P, 1 + 2r, 1 + 2r)
    rank : int
    rc : array (P,)
        √c.
    a1 : array (P,), optional
        With ``A = a1 Λ(𝔊)``: the exact step rebuilds 𝒜 from a1 and 𝔊 (their rounded product
        loses the structure that a strong signal depends on).
    centred : array (P, 3), optional
        The centred traces U of :func:`regular_traces`, which Γ is written in; default from T
        (T_KQK^(1) − 1, T_KQK^(2) − 1/c, T_KQK^(3) − (1 + 1/c)/c, with their cancellation).
    exact : array (P,) bool, optional
        float64: the points for the exact step, given (no condition number is computed then: the perturbed
        evaluations of the closed form's error estimate follow the unperturbed one).
    store : dict, optional
        float64: receives ``v`` (P, N) and the adjoint ``z`` = Ĉᵀ(I + ĈΓ)^{-T}Γ̇v (P, N) (NaN where no inverse
        was computed), for the first-order changes of E (:func:`symattn.backends.closed_runtime.attention_closed`).
    rational : bool
        False: no exact rational step; every κ_s is returned (the error estimate of the mpmath closed form
        needs the float64 solve and κ_s only).

    Returns
    -------
    WoodburyResult
        (F, F_dot), arrays (P,), with ``kappa``.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, 1.0, 1.0, 0.0, 0.0)
    >>> T, T_dot = traces(ctx, sol, bulk_derivative(ctx, sol))
    >>> G = np.zeros((1, 3, 3))
    >>> F, F_dot = woodbury(ctx, T, T_dot, kernel_coefficients(ctx, 1.0, G, 1), G, 1, np.sqrt([0.5]))
    >>> bool(abs(F[0] - sol.e[0, 0]) < 1e-12)              # 𝔊 = 0: F = e1
    True
    """
    P = T.shape[0]
    dtype = ctx.dtype
    if centred is None:
        c = rc**2
        centred = np.stack([T[:, 6] - 1, T[:, 7] - 1 / c, T[:, 8] - (1 + 1 / c) / c], axis=-1)
    Tc = np.concatenate([T[:, :6], centred], axis=1)
    if dtype is not float:
        F, F_dot = ctx.zeros(P), ctx.zeros(P)
        Gam, Gdot, Ch = coupling_matrices(KERNELS[ctx.lambdify_modules], Tc, T_dot, A, gram, rank, rc, P, dtype)
        N = Gam.shape[-1]
        M = ctx.convert(np.eye(N))[None] + Ch @ Gam
        e0 = [ctx.convert(1.0)] + [ctx.convert(0.0)] * (N - 1)
        rows = [_gauss_solve(Mi.tolist(), e0) for Mi in M]   # None: singular
        v = np.array([x if x is not None else [ctx.convert(np.nan)] * N for x in rows], dtype=object).reshape(P, N)
        F[:] = (Gam[:, 0, :] * v).sum(axis=-1)
        F_dot[:] = np.einsum("pi,pij,pj->p", v, Gdot, v)
        return WoodburyResult(F, F_dot, np.zeros(P))
    rcv = np.broadcast_to(np.asarray(rc), (P,))
    kappa = np.full(P, np.inf if exact is None else np.nan)
    F, F_dot = np.full(P, np.nan), np.full(P, np.nan)
    N = 6 + 4 * rank
    if store is not None:
        store["v"], store["z"] = np.full((P, N), np.nan), np.full((P, N), np.nan)
    with np.errstate(all="ignore"):
        for lo in range(0, P, BLOCK):   # blocks of points: the (block, N, N) arrays stay in cache
            at = slice(lo, min(P, lo + BLOCK))
            n = at.stop - lo
            Gam, Gdot, Ch = coupling_matrices(KERNELS["numpy"], Tc[at], T_dot[at], A[at], gram[at], rank, rcv[at],
                                              n, float)
            M = Ch @ Gam
            M[:, range(N), range(N)] += 1
            good = np.all(np.isfinite(np.einsum("pij->pi", M)), axis=1)
            if exact is not None:
                good &= ~exact[at]
            gsel = slice(None) if good.all() else good   # a view in the common case (M is not used again)
            Mg = M[gsel]
            # row scales, then column scales: powers of two (exact), 1-norms in [1/2, 1) (einsum: numpy's
            # reductions over a short last axis are slow)
            r = np.ldexp(1.0, -np.frexp(np.einsum("pij->pi", np.abs(Mg)))[1])
            Mg *= r[:, :, None]
            aM = np.abs(Mg)
            sc = np.ldexp(1.0, -np.frexp(np.einsum("pij->pj", aM))[1])
            Mg *= sc[:, None, :]
            aM *= sc[:, None, :]
            colsum = np.einsum("pij->pj", aM)
            sing = ~np.all(np.isfinite(colsum), axis=1)
            if sing.any():
                Mg[sing] = np.eye(N)
            if exact is None:   # the inverse, for κ_s in the 1-norm
                try:
                    Minv = np.linalg.inv(Mg)
                except np.linalg.LinAlgError:   # a singular one among them: one by one
                    Minv = np.full(Mg.shape, np.nan)
                    for i in range(len(Mg)):
                        try:
                            Minv[i] = np.linalg.inv(Mg[i])
                        except np.linalg.LinAlgError:
                            sing[i] = True
                y = Minv[:, :, 0] * r[:, :1]
                k = np.max(colsum, axis=1) * np.max(np.einsum("pij->pj", np.abs(Minv)), axis=1)
                k[sing] = np.inf
                kappa[lo:at.stop][gsel] = np.where(np.isfinite(k), k, np.inf)
            else:
                rhs = np.zeros(Mg.shape[:2])
                rhs[:, 0] = r[:, 0]
                try:
                    y = np.linalg.solve(Mg, rhs[:, :, None])[:, :, 0]
                except np.linalg.LinAlgError:
                    y = np.full(rhs.shape, np.nan)
                y[sing] = np.nan
            v = sc * y                                  # S (RMS)^{-1} R e_0
            Gd = Gdot[gsel]
            if store is not None:
                store["v"][lo:at.stop][gsel] = v
                if exact is None:   # the adjoint z = Ĉᵀ M⁻ᵀ Γ̇v, M⁻¹ = S (RMS)^{-1} R
                    y = r * np.einsum("pji,pj->pi", Minv, sc * np.einsum("pij,pj->pi", Gd, v))
                    store["z"][lo:at.stop][gsel] = np.einsum("pji,pj->pi", Ch[gsel], y)
            F_dot[lo:at.stop][gsel] = np.einsum("pi,pij,pj->p", v, Gd, v)
            F[lo:at.stop][gsel] = np.einsum("pi,pi->p", Gam[gsel, 0, :], v)
    if exact is None:
        exact = ~(kappa * np.finfo(float).eps < WOODBURY_COND)
    if rational:
        for i in np.nonzero(exact)[0]:
            sel = slice(i, i + 1)
            a1_i = None if a1 is None else np.asarray(a1, dtype=float).reshape(-1)[i]
            F[i], F_dot[i] = _rational_step(Tc[sel], T_dot[sel], A[sel], gram[sel], rank, rcv[sel], a1_i)
            kappa[i] = 0.0
    return WoodburyResult(F, F_dot, kappa)


def coupling_matrices(table, T, T_dot, A, gram, rank, rc, P, dtype):
    """Γ, Γ̇ and Ĉ (P, N, N), N = 6 + 4r, of the Woodbury step (:func:`woodbury`) from the traces (``T``: the
    six plain and three centred ones), 𝒜, 𝔊 and √c (docs/theory.md §6.4, §6.5), with the kernels of
    ``table`` (``KERNELS[modules]``; the float64 ones also run on arrays of :class:`Rational` numbers).

    Examples
    --------
    >>> from symattn.backends.kernels import KERNELS
    >>> G = np.eye(3)[None]
    >>> A = np.eye(4)[None]
    >>> Gam, Gdot, Ch = coupling_matrices(KERNELS["numpy"], np.ones((1, 9)), np.ones((1, 9)), A, G, 1, np.ones(1), 1,
    ...                                   float)
    >>> Gam.shape, bool(np.allclose(Ch[0], Ch[0].T))          # Ĉ = [[0, Cᵀ], [C, 0]] is symmetric
    ((1, 10, 10), True)
    """
    gv = gram_values(gram)
    m = A.shape[-1]
    Gam = _dense(table[f"gamma-r{rank}"], (*T.T, *gv, rc), P, dtype)
    Gdot = _dense(table[f"gamma-dot-r{rank}"], (*T_dot.T, *gv, rc), P, dtype)
    Ch = _dense(table[f"c-hat-r{rank}"], [A[:, i, j] for i in range(m) for j in range(m)] + [rc], P, dtype)
    return Gam, Gdot, Ch


def _dense(kernel, values, P, dtype):
    """The (P, rows, cols) array of a matrix kernel at ``values``; float64: its nonzero entries written as one
    (P, entries) block into the flattened matrices (one pass, not one strided write per entry)."""
    if dtype is not float:
        return kernel(*values, P=P, dtype=dtype)
    rows, cols = kernel.shape
    out = np.zeros((P, rows * cols))
    if kernel.entries:
        flat = [i * cols + j for i, j in kernel.entries]
        out[:, flat] = np.stack([v if np.shape(v) == (P,) else np.broadcast_to(v, (P,)) for v in kernel.nonzero(*values)],
                                axis=1)
    return out.reshape(P, rows, cols)


class Rational:
    """An exact rational number n/d on Python integers (the exact Woodbury step; the standard
    library's ``fractions`` is not among the imports a generated solver may use).

    Examples
    --------
    >>> x = Rational.of(0.1) * 3 - Rational.of(0.3)
    >>> float(x) == 0.1 * 3 - 0.3, float(x)          # exact: no rounding of the product and difference
    (False, 2.7755575615628914e-17)
    """

    __slots__ = ("n", "d")

    def __init__(self, n: int, d: int = 1):
        if d < 0:
            n, d = -n, -d
        g = math.gcd(n, d)
        self.n, self.d = (n // g, d // g) if g > 1 else (n, d)

    @classmethod
    def of(cls, x):
        """The exact value of an int, a float or a Rational."""
        if isinstance(x, Rational):
            return x
        if isinstance(x, (int, np.integer)):
            return cls(int(x))
        return cls(*float(x).as_integer_ratio())

    def __add__(self, o):
        if not isinstance(o, _SCALARS):
            return NotImplemented
        o = Rational.of(o)
        return Rational(self.n * o.d + o.n * self.d, self.d * o.d)

    __radd__ = __add__

    def __sub__(self, o):
        if not isinstance(o, _SCALARS):
            return NotImplemented
        o = Rational.of(o)
        return Rational(self.n * o.d - o.n * self.d, self.d * o.d)

    def __rsub__(self, o):
        if not isinstance(o, _SCALARS):
            return NotImplemented
        return Rational.of(o) - self

    def __mul__(self, o):
        if not isinstance(o, _SCALARS):
            return NotImplemented
        o = Rational.of(o)
        return Rational(self.n * o.n, self.d * o.d)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if not isinstance(o, _SCALARS):
            return NotImplemented
        o = Rational.of(o)
        if o.n == 0:
            raise ZeroDivisionError("Rational division by zero")
        return Rational(self.n * o.d, self.d * o.n)

    def __rtruediv__(self, o):
        if not isinstance(o, _SCALARS):
            return NotImplemented
        return Rational.of(o) / self

    def __neg__(self):
        return Rational(-self.n, self.d)

    def __abs__(self):
        return Rational(abs(self.n), self.d)

    def __bool__(self):
        return self.n != 0

    def __lt__(self, o):
        o = Rational.of(o)
        return self.n * o.d < o.n * self.d

    def __gt__(self, o):
        return Rational.of(o) < self

    def __eq__(self, o):
        o = Rational.of(o)
        return self.n == o.n and self.d == o.d

    __hash__ = None

    def __float__(self):
        return self.n / self.d

    def __repr__(self):
        return f"Rational({self.n}, {self.d})"


_SCALARS = (Rational, int, float, np.integer, np.floating)


def _rational_step(T, T_dot, A, gram, rank, rc, a1=None):
    """F = (Γv)_0 and F' = vᵀΓ̇v, v = (I + ĈΓ)^{-1}e_0, for one point in exact rational arithmetic
    (the float64 kernels evaluated on :class:`Rational` numbers, Gaussian elimination on them) from the float64
    traces (six plain, three centred), 𝒜 (or a1 and 𝔊: 𝒜 = a1 Λ(𝔊)) and √c; NaN where the system
    is singular or not finite."""
    values = [T, T_dot, gram, rc] + ([A] if a1 is None else [np.asarray(a1)])
    if not all(np.all(np.isfinite(np.asarray(v, dtype=float))) for v in values):
        return np.nan, np.nan
    fr = np.frompyfunc(Rational.of, 1, 1)
    T, T_dot, gram, rc = (fr(np.asarray(v, dtype=float)) for v in (T, T_dot, gram, rc))
    table = KERNELS["numpy"]
    if a1 is not None:
        A = Rational.of(float(a1)) * table[f"lambda-r{rank}"](*gram_values(gram), P=1, dtype=object)
    else:
        A = fr(np.asarray(A, dtype=float))
    Gam, Gdot, Ch = (X[0].tolist() for X in coupling_matrices(table, T, T_dot, A, gram, rank, rc, 1, object))
    N = len(Gam)
    M = [[int(i == j) + sum((Ch[i][k] * Gam[k][j] for k in range(N) if Ch[i][k] and Gam[k][j]), Rational(0))
          for j in range(N)] for i in range(N)]
    v = _gauss_solve(M, [Rational(int(i == 0)) for i in range(N)])
    if v is None:
        return np.nan, np.nan
    F = sum(Gam[0][j] * v[j] for j in range(N))
    F_dot = sum(v[i] * Gdot[i][j] * v[j] for i in range(N) for j in range(N) if v[i] and v[j])
    return float(F), float(F_dot)


def _gauss_solve(M, b):
    """x with M x = b by Gaussian elimination with partial pivoting on Python numbers (lists):
    exact on :class:`Rational` numbers; on mpmath numbers it has no scale-dependent singularity threshold
    (mpmath's own solvers refuse matrices whose entries span more than the working precision).
    None when M is singular."""
    N = len(b)
    rows = [list(r) + [bi] for r, bi in zip(M, b)]
    for k in range(N):
        p = max(range(k, N), key=lambda i: abs(rows[i][k]))
        if not rows[p][k]:
            return None
        rows[k], rows[p] = rows[p], rows[k]
        for i in range(k + 1, N):
            if rows[i][k]:
                f = rows[i][k] / rows[k][k]
                rows[i] = [x - f * y for x, y in zip(rows[i], rows[k])]
    x = [0 * b[0]] * N
    for i in reversed(range(N)):
        x[i] = (rows[i][N] - sum((rows[i][j] * x[j] for j in range(i + 1, N)), 0 * b[0])) / rows[i][i]
    return x


def attention_at(ctx, sol: BulkSolution, gram, rank: int, coefficients=None, points=None):
    """E_A(γ) = −γ² F'(γ) and F at the bulk solution ``sol`` (docs/theory.md §6).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    sol : BulkSolution
        The bulk solution at P points (:func:`solve_bulk`).
    gram : array (1 + 2r, 1 + 2r) or (Q, 1 + 2r, 1 + 2r)
        Gram matrices 𝔊 of (μ, w_K, w_Q), broadcast against the points.
    rank : int
    coefficients : array (Q, m, m), optional
        𝒜 replacing a1 Λ(𝔊) in the Woodbury step.
    points : int array (Q,), optional
        For each output point, the index of its bulk point (default: the P bulk points, in
        order): one bulk solution serves several geometries.

    Returns
    -------
    E, F : arrays (Q,)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, 1.0, 1.0, 0.0, 0.0)
    >>> G = np.stack([np.zeros((3, 3)), np.ones((3, 3))])   # two geometries, one bulk point
    >>> E, F = attention_at(ctx, sol, G, 1, points=np.array([0, 0]))
    >>> E.shape, bool(E[1] != E[0])
    ((2,), True)
    """
    T, U, T_dot = regular_traces(ctx, sol)
    return _attention_from_traces(ctx, sol, T, U, T_dot, gram, rank, coefficients, points)


def _attention_from_traces(ctx, sol, T, U, T_dot, gram, rank, coefficients=None, points=None):
    """E_A = −γ² F' and F from the traces at the bulk points of ``sol`` (:func:`attention_at`)."""
    rc, g, a1v = (p[:, 0] for p in sol.params[:3])
    if points is not None:
        T, U, T_dot, rc, g, a1v = (v[points] for v in (T, U, T_dot, rc, g, a1v))
    P = T.shape[0]
    gram = np.broadcast_to(ctx.convert(gram), (P,) + np.shape(gram)[-2:])
    A = kernel_coefficients(ctx, a1v, gram, rank) if coefficients is None else np.broadcast_to(
        coefficients, (P,) + np.shape(coefficients)[-2:])
    F, F_dot = woodbury(ctx, T, T_dot, A, gram, rank, rc, a1=a1v if coefficients is None else None, centred=U)
    return -(g**2) * F_dot, F


def precision_estimate(ctx, sol: BulkSolution, gram, rank: int, E, coefficients=None, points=None,
                       draws: int = PRECISION_DRAWS):
    r"""Estimated relative error of E_A from :func:`attention_at`, by perturbation analysis.

    Every intermediate of the evaluation (the bulk solution e, the quadrature weights, ẋ, the
    traces T, U and Ṫ of :func:`regular_traces`) is multiplied by 1 + δr with independent r ~ U(−1, 1) and δ = 2⁸ u (u the
    unit roundoff of the arithmetic: 2^{-52}, or 10^{-dps}), and E is evaluated again. The
    amplification κ = max |ΔE|/(|E| δ) over ``draws`` draws measures how rounding errors of
    relative size u in those quantities (or cancellation inside their evaluation, which a
    perturbed input exposes) propagate into E; the estimate is

      κ · max(16 u, bulk residual, quadrature residual)

    (the quadrature residual is the solution's residual on twice its nodes). The Woodbury step
    itself is exact where it is ill-conditioned (:func:`woodbury`), so it adds nothing.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    sol : BulkSolution
    gram, rank, coefficients, points
        As for :func:`attention_at`.
    E : array (Q,)
        E_A from :func:`attention_at` with the same arguments.
    draws : int

    Returns
    -------
    array (Q,)
        Estimated relative error of each E (float64; inf where E is 0 or not finite and a
        perturbation changes it).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> sol = solve_bulk(ctx, 0.5, [1e-2, 1.0], 0.6, 0.03, 0.0)
    >>> E, _ = attention_at(ctx, sol, np.eye(3), 1)
    >>> bool(np.all(precision_estimate(ctx, sol, np.eye(3), 1, E) < 1e-10))
    True
    """
    u = np.finfo(float).eps / 2 if getattr(ctx, "dps", None) is None else 10.0 ** -ctx.dps
    delta = u * 2.0**8
    rng = np.random.default_rng(12345)
    E0 = np.asarray(ctx.to_float(E), dtype=float)
    kappa = np.zeros(E0.shape)

    def bump(x):
        if x is None:
            return None
        return x * (1 + ctx.convert(delta) * ctx.convert(rng.uniform(-1, 1, np.shape(x))))

    for _ in range(draws):
        factors = [1 + ctx.convert(delta) * ctx.convert(rng.uniform(-1, 1, np.shape(w))) for _, _, w in sol.groups]
        groups = [(idx, lam, w * f) for (idx, lam, w), f in zip(sol.groups, factors)]
        corrections = [corr * f[:, 0:1] for corr, f in zip(sol.corrections, factors)]
        pert = BulkSolution(bump(sol.e), sol.params, groups, sol.iterations, sol.residual, sol.quadrature,
                            corrections)
        with np.errstate(all="ignore"):
            T, U, T_dot = regular_traces(ctx, pert, bump=bump)
            Ep, _ = _attention_from_traces(ctx, pert, bump(T), bump(U), bump(T_dot), gram, rank, coefficients, points)
            dE = np.abs(np.asarray(ctx.to_float(Ep - E), dtype=float))
            k = np.where(dE == 0, 0.0, dE / (np.abs(E0) * delta))
        kappa = np.maximum(kappa, np.where(np.isnan(k), np.inf, k))
    floor = np.maximum(16 * u, np.maximum(np.asarray(sol.residual, float), np.asarray(sol.quadrature, float)))
    if points is not None:
        floor = floor[points]
    return kappa * floor


def attention_error(ctx, c, gamma, a1, s2, d, gram, rank: int, point_info=None, coefficients=None):
    """E_A(γ) = −γ² F'(γ) at P points (docs/theory.md §6).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c, gamma, a1, s2, d : scalars or arrays, broadcast to P points
        c = p/n, the ridge γ and the kernel constants a1, s² = ν − a1², d.
    gram : array (1 + 2r, 1 + 2r) or (P, 1 + 2r, 1 + 2r)
    rank : int
    point_info : dict, optional
        Added to the ``point`` of a ConvergenceError.
    coefficients : array (P, m, m), optional
        𝒜 replacing a1 Λ(𝔊) in the Woodbury step.

    Returns
    -------
    E, F : arrays (P,)
    sol : BulkSolution

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> E, F, sol = attention_error(FloatContext(), 0.5, [0.1, 1.0], 1.0, 0.0, 0.0, np.zeros((3, 3)), 1)
    >>> E.shape, bool(E[0] < E[1])
    ((2,), True)
    """
    sol = solve_bulk(ctx, c, gamma, a1, s2, d, point_info)
    E, F = attention_at(ctx, sol, gram, rank, coefficients)
    return E, F, sol


def bulk_error(ctx, c, gamma, a1, s2, d, point_info=None):
    """E_bulk(γ) = −γ² de1/dγ for the bulk system alone (μ = 0, w = 0; docs/theory.md §5), with
    de1/dγ = Ṫ_Q^(0) from :func:`regular_traces`.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c, gamma, a1, s2, d : scalars or arrays, broadcast to P points
    point_info : dict, optional

    Returns
    -------
    E : array (P,)
    e1 : array (P,)
    sol : BulkSolution

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> E, e1, _ = bulk_error(FloatContext(), 0.5, 1.0, 1.0, 0.0, 0.0)
    >>> bool(0 < E[0] < 1)
    True
    """
    sol = solve_bulk(ctx, c, gamma, a1, s2, d, point_info)
    g = sol.params[1][:, 0]
    return -(g**2) * regular_traces(ctx, sol)[2][:, 0], sol.e[:, 0], sol  # de1/dγ = Ṫ_Q^(0)


def linear_error(ctx, c, gamma, snr):
    """E_LR(γ) from the closed form of docs/theory.md §3, on P points (mpmath point by point).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c, gamma, snr : scalars or arrays, broadcast to P points
        snr = ‖μ‖².

    Returns
    -------
    array (P,)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> E = linear_error(FloatContext(), 2.0, [1e-9, 1e9], 0.0)   # c > 1: E_LR → 0 as γ → 0, → 1 as γ → ∞
    >>> bool(E[0] < 1e-15), bool(abs(E[1] - 1) < 1e-8)
    (True, True)
    """
    _, (c, gamma, snr) = point_arrays(ctx, c, gamma, snr)
    fn = _kernel(ctx, "linear")
    return ctx.pointwise(lambda ci, gi, si: fn(ctx.sqrt(ci), gi, si)[0], c, gamma, snr)
