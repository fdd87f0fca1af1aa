r"""The solver runtime: the bulk and attention systems solved at vectors of points, written once
against an arithmetic context and a table of compiled kernels.

This module needs numpy, a context (:mod:`symattn.backends.context`: float64 or mpmath) and the
table ``KERNELS[ctx.lambdify_modules][key]`` of compiled kernels (:mod:`symattn.backends.kernels`:
lambdified SymPy). A generated standalone solver (:mod:`symattn.codegen`) carries this module's
source verbatim, with its relative imports replaced by copies of what they import and by its own
table of printed kernels: there is one copy of the runtime.

Bulk fixed point (docs/theory.md §5): e = I(e), I_i(e) = ∫ g_i(λ; e) dμ_S, solved by Newton with
the SymPy-derived Jacobian J = I − ∫ ∂g/∂e dμ_S (vectorised over points, with backtracking); where
Newton fails, a1 = d = 0 points are solved by the reduced monotone equation in s²e1 (bisection,
then a Newton polish; docs/theory.md §5.6), and the rest by the damped fixed point
e ← ½ e + ½ I(e). The quadrature node count is doubled until the fixed-point residual evaluated
on twice the nodes is below the context's tolerance (docs/theory.md §5.4, §5.5).

Implicit differentiation: de/dγ = J^{-1} ∫ ∂g/∂γ dμ_S, then Ṫ = ∫ ∂T/∂γ + (∫ ∂T/∂e) ė, and for
F = Γ00 − eᵀu, u = Ĉ(I + ΓĈ)^{-1}e (so that dB = −B dΓ B with B = Ĉ(I + ΓĈ)^{-1}; docs/theory.md §6.6):

  F'(γ) = Γ̇00 − 2 ėᵀu + uᵀ Γ̇ u,   E_A = −γ² F'(γ).

Branch check at z = −γ: e1 > 0, 0 ≤ e2 ≤ 1, Δ(λ) > 0 on every node; otherwise ConvergenceError.
"""

from __future__ import annotations

import numpy as np

from ..errors import ConvergenceError
from .kernels import KERNELS, TRACE_MOMENTS, gram_values
from .quadrature import integrate_many, mp_nodes as _mp_nodes

NEWTON_MAX_ITER = 25
NONMONOTONE = 1e4          # a Newton step may raise the merit function at most this factor
FIXED_POINT_MAX_ITER = 20000


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
    """

    def __init__(self, e, params, groups, iterations, residual):
        self.e, self.params, self.groups = e, params, groups
        self.iterations, self.residual = iterations, residual

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
    """I(e) = ∫ g(λ; e) dμ_S (P, 3) and, with ``jacobian``, ∫ ∂g/∂e dμ_S (P, 3, 3)."""
    key = "bulk-newton" if jacobian else "bulk-residual"
    vals = _kernel(ctx, key)(*_args(lam, e, params))
    I = integrate_many(vals[:3], w)
    if not jacobian:
        return I, None
    return I, integrate_many(vals[3:12], w).reshape(-1, 3, 3)


def _relative_residual(ctx, e, I):
    scale = np.maximum(1.0, np.abs(ctx.to_float(e)))
    return np.max(np.abs(ctx.to_float(e - I)) / scale, axis=-1)


def _merit(ctx, e, I):
    """Newton's merit function ‖(e − I)/max(1, |e|)‖₂² (the Newton step is a descent direction for it)."""
    scale = np.maximum(1.0, np.abs(ctx.to_float(e)))
    return np.sum((ctx.to_float(e - I) / scale) ** 2, axis=-1)


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


def _newton(ctx, lam, w, e, params, tol):
    """Vectorised Newton with backtracking; returns (e, residual, converged mask, iterations)."""
    eye = ctx.convert(np.eye(3))
    I, JI = _fixed_point_map(ctx, lam, w, e, params)
    res = _relative_residual(ctx, e, I)
    merit = _merit(ctx, e, I)
    it = 0
    active = res > tol
    while np.any(active) and it < NEWTON_MAX_ITER:
        it += 1
        idx = np.nonzero(active)[0]
        step = ctx.solve(eye[None] - JI[idx], e[idx] - I[idx])
        t = 1.0
        pending = idx
        pstep = step
        for _ in range(40):
            sub = tuple(p[pending] for p in params)
            trial = e[pending] - t * pstep
            ok = _admissible(ctx, lam[pending], w[pending], trial, sub, strict=False)
            safe = np.where(ok[:, None], trial, e[pending])
            I_t, JI_t = _fixed_point_map(ctx, lam[pending], w[pending], safe, sub)
            r_t = _relative_residual(ctx, safe, I_t)
            # non-monotone acceptance: Newton may climb the merit function for a few steps on its way
            better = ok & ((_merit(ctx, safe, I_t) < NONMONOTONE * merit[pending]) | (r_t <= tol))
            took = pending[better]
            e[took], I[took], JI[took], res[took] = trial[better], I_t[better], JI_t[better], r_t[better]
            merit[took] = _merit(ctx, trial[better], I_t[better])
            pending, pstep = pending[~better], pstep[~better]
            if not pending.size:
                break
            t *= 0.5
        active = res > tol
        active[pending] = False  # no descent: leave to the fallback
    return e, res, res <= tol, it


def _fixed_point(ctx, lam, w, e, params, tol):
    """Damped iteration e ← ½e + ½I(e) (docs/theory.md §5.5), the fallback for points where Newton fails.

    Near a1 = 0 at small γ the Jacobian is nearly singular and Newton's basin is tiny; this
    iteration still converges (linearly). Returns (e, residual, iterations).
    """
    res = np.full(e.shape[0], np.inf)
    active = np.arange(e.shape[0])
    it = 0
    while active.size and it < FIXED_POINT_MAX_ITER:
        it += 1
        sub = tuple(p[active] for p in params)
        I, _ = _fixed_point_map(ctx, lam[active], w[active], e[active], sub, jacobian=False)
        res[active] = _relative_residual(ctx, e[active], I)
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


def _initial_guess(ctx, gamma):
    e = ctx.convert(np.zeros((gamma.shape[0], 3)))
    e[:, 0] = 1 / gamma.reshape(-1)
    return e


def _points(ctx, *values):
    """Broadcast scalars/arrays to 1-D arrays of P points in the context's arithmetic."""
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
    P, (c, gamma, a1, s2, d) = _points(ctx, c, gamma, a1, s2, d)
    params = tuple(v.reshape(P, 1) for v in (ctx.sqrt(c), gamma, a1, s2, d))
    e = _initial_guess(ctx, gamma)
    m, total_it = ctx.nodes, 0
    todo = np.arange(P)
    groups, res_all = [], np.zeros(P)
    while todo.size:
        sub = tuple(p[todo] for p in params)
        lam, w = _mp_nodes(ctx, c[todo], m)
        e_sub, res, conv, it = _newton(ctx, lam, w, e[todo].copy(), sub, ctx.tol)
        total_it += it
        bad = np.nonzero(~conv | ~_admissible(ctx, lam, w, e_sub, sub))[0]
        tiny = float(ctx.tol) * 1e-3  # a1, d this small (quadrature zeros) change e by less than the tolerance
        exact = bad[(np.abs(ctx.to_float(sub[2][bad, 0])) <= tiny) & (np.abs(ctx.to_float(sub[4][bad, 0])) <= tiny)]
        if exact.size:  # a1 = d = 0: the reduced one-dimensional equation, then a Newton polish
            sb = tuple(p[exact] for p in sub)
            e_r, r_r, conv_r, it_r = _newton(ctx, lam[exact], w[exact], _reduced_a1_d_zero(ctx, lam[exact], w[exact], sb),
                                             sb, ctx.tol)
            total_it += it_r
            conv_r &= _admissible(ctx, lam[exact], w[exact], e_r, sb)
            e_sub[exact[conv_r]], res[exact[conv_r]] = e_r[conv_r], r_r[conv_r]
            bad = np.setdiff1d(bad, exact[conv_r])
        if bad.size:  # fallback: the damped fixed point of docs/theory.md §5.5 (slow but sure)
            sb = tuple(p[bad] for p in sub)
            e_sub[bad], res[bad], it_fp = _fixed_point(ctx, lam[bad], w[bad], _initial_guess(ctx, gamma[todo][bad]),
                                                        sb, ctx.tol)
            total_it += it_fp
            stuck = bad[res[bad] > ctx.tol]
            if stuck.size:
                raise ConvergenceError("no convergence of the bulk fixed point (Newton and the damped fixed point)",
                                       residuals=ctx.to_float(res[stuck]), iterations=total_it,
                                       point=_describe(point_info, todo[stuck], c, gamma))
        e[todo] = e_sub
        lam2, w2 = _mp_nodes(ctx, c[todo], 2 * m)
        I2, _ = _fixed_point_map(ctx, lam2, w2, e_sub, sub, jacobian=False)
        fine = _relative_residual(ctx, e_sub, I2) <= ctx.quad_tol
        if fine.any():
            groups.append((todo[fine], lam[fine], w[fine]))
            res_all[todo[fine]] = ctx.to_float(res[fine])
        if not fine.all() and 2 * m > ctx.max_nodes:
            raise ConvergenceError("quadrature did not converge (integrand too sharply peaked)",
                                   residuals=_relative_residual(ctx, e_sub, I2)[~fine], iterations=total_it,
                                   point=_describe(point_info, todo[~fine], c, gamma))
        todo, m = todo[~fine], 2 * m
    sol = BulkSolution(e=e, params=params, groups=groups, iterations=total_it, residual=res_all)
    _check_branch(ctx, sol, point_info, c, gamma)
    return sol


def _describe(info, idx, c, gamma):
    k = int(idx[0])
    out = {"c": float(c[k]), "gamma": float(gamma[k])}
    out.update(info or {})
    if len(idx) > 1:
        out["points_failing"] = int(len(idx))
    return out


def _check_branch(ctx, sol, info, c, gamma):
    """Raise ConvergenceError unless every point converged on the branch e1 > 0, 0 ≤ e2 ≤ 1, Δ > 0."""
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
    dtype = object if ctx.name == "mpmath" else float
    L = _kernel(ctx, f"lambda-r{rank}")(*gram_values(gram), P=P, dtype=dtype)
    return np.asarray(a1).reshape(-1, 1, 1) * L


def woodbury(ctx, T, T_dot, A, gram, rank: int, rc):
    """F and F'(γ) from the traces by the Woodbury identity (docs/theory.md §6.6).

    F = Γ00 − eᵀu and F' = Γ̇00 − 2ėᵀu + uᵀΓ̇u with u = Ĉ(I + ΓĈ)^{-1}e, e = Γ[:, 0].

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

    Returns
    -------
    F, F_dot : arrays (P,)

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
    dtype = object if ctx.name == "mpmath" else float
    gv = gram_values(gram)
    Gam = _kernel(ctx, f"gamma-r{rank}")(*T.T, *gv, rc, P=P, dtype=dtype)
    Gdot = _kernel(ctx, f"gamma-dot-r{rank}")(*T_dot.T, *gv, rc, P=P, dtype=dtype)
    m = A.shape[-1]
    Ch = _kernel(ctx, f"c-hat-r{rank}")(*[A[:, i, j] for i in range(m) for j in range(m)], rc, P=P, dtype=dtype)
    M = ctx.convert(np.eye(Gam.shape[-1]))[None] + Gam @ Ch
    e, e_dot = Gam[:, :, 0], Gdot[:, :, 0]
    u = np.einsum("pij,pj->pi", Ch, ctx.solve(M, e))
    F = Gam[:, 0, 0] - (e * u).sum(axis=-1)
    F_dot = Gdot[:, 0, 0] - 2 * (e_dot * u).sum(axis=-1) + np.einsum("pi,pij,pj->p", u, Gdot, u)
    return F, F_dot


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
    T, T_dot = traces(ctx, sol, bulk_derivative(ctx, sol))
    rc, g, a1v = (p[:, 0] for p in sol.params[:3])
    if points is not None:
        T, T_dot, rc, g, a1v = (v[points] for v in (T, T_dot, rc, g, a1v))
    P = T.shape[0]
    gram = np.broadcast_to(ctx.convert(gram), (P,) + np.shape(gram)[-2:])
    A = kernel_coefficients(ctx, a1v, gram, rank) if coefficients is None else np.broadcast_to(
        coefficients, (P,) + np.shape(coefficients)[-2:])
    F, F_dot = woodbury(ctx, T, T_dot, A, gram, rank, rc)
    return -(g**2) * F_dot, F


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
    """E_bulk(γ) = −γ² de1/dγ for the bulk system alone (μ = 0, w = 0; docs/theory.md §5).

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
    return -(g**2) * bulk_derivative(ctx, sol)[:, 0], sol.e[:, 0], sol


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
    P, (c, gamma, snr) = _points(ctx, c, gamma, snr)
    fn = _kernel(ctx, "linear")
    if ctx.name == "numpy":
        return fn(np.sqrt(c), gamma, snr)[0]
    return np.array([fn(ctx.sqrt(c[i:i + 1])[0], gamma[i], snr[i])[0] for i in range(P)], dtype=object)
