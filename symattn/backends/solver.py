r"""Solvers for the deterministic-equivalent systems, written once against an arithmetic context.

Bulk fixed point (MATH §5): e = I(e), I_i(e) = ∫ g_i(λ; e) dμ_S, solved by Newton with the
SymPy-derived Jacobian J = I − ∫ ∂g/∂e dμ_S (vectorised over points, with backtracking), and a
damped fixed point e ← ½ e + ½ I(e) as fallback. The quadrature node count is doubled until the
fixed-point residual evaluated on twice the nodes is below the context's tolerance.

Implicit differentiation: de/dγ = J^{-1} ∫ ∂g/∂γ dμ_S, then Ṫ = ∫ ∂T/∂γ + (∫ ∂T/∂e) ė, and for
F = Γ00 − eᵀu, u = Ĉ(I + ΓĈ)^{-1}e (so that dB = −B dΓ B with B = Ĉ(I + ΓĈ)^{-1}):

  F'(γ) = Γ̇00 − 2 ėᵀu + uᵀ Γ̇ u,   E_A = −γ² F'(γ).

Branch check at z = −γ: e1 > 0, 0 ≤ e2 ≤ 1, Δ(λ) > 0 on every node; otherwise ConvergenceError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConvergenceError
from .compile import compiled
from .kernels import gram_values
from .quadrature import integrate, mp_nodes

NEWTON_MAX_ITER = 100
FIXED_POINT_MAX_ITER = 20000


@dataclass
class BulkSolution:
    """Solution of the bulk system at P points (arrays of shape (P,))."""

    e: np.ndarray            # (P, 3): e1, e2, e3
    lam: np.ndarray          # (P, M) quadrature nodes
    w: np.ndarray            # (P, M) weights
    params: tuple            # (rc, gamma, a1, s2, d) each (P, 1)
    iterations: int
    residual: np.ndarray     # (P,) max-norm relative residual

    def integrand_args(self):
        rc, g, a1, s2, d = self.params
        e = self.e
        return (self.lam, e[:, 0:1], e[:, 1:2], e[:, 2:3], rc, g, a1, s2, d)


def _broadcast_points(ctx, *arrays):
    arrays = [ctx.convert(a) for a in arrays]
    shape = np.broadcast_shapes(*(np.shape(a) for a in arrays))
    return shape, [np.broadcast_to(a, shape).reshape(-1) for a in arrays]


def _fixed_point_map(ctx, newton_fn, lam, w, e, params, jacobian=True):
    rc, g, a1, s2, d = params
    vals = newton_fn(lam, e[:, 0:1], e[:, 1:2], e[:, 2:3], rc, g, a1, s2, d)
    P = e.shape[0]
    I = np.stack([integrate(v, w) for v in vals[:3]], axis=-1)
    if not jacobian:
        return I, None
    JI = np.stack([integrate(v, w) for v in vals[3:12]], axis=-1).reshape(P, 3, 3)
    return I, JI


def _relative_residual(ctx, e, I):
    scale = np.maximum(1.0, np.abs(ctx.to_float(e)))
    return np.max(np.abs(ctx.to_float(e - I)) / scale, axis=-1)


def _delta_min(ctx, lam, e, params):
    rc, g, a1, s2, d = params
    beta = rc * (a1 * (lam - 1) + d) - s2 * e[:, 2:3]
    delta = (g + s2 * e[:, 1:2]) * (1 + s2 * e[:, 0:1] * lam) + lam * beta**2
    return np.min(ctx.to_float(delta), axis=-1)


def _admissible(ctx, lam, e, params):
    ef = ctx.to_float(e)
    ok = np.all(np.isfinite(ef), axis=-1) & (ef[:, 0] > 0) & (ef[:, 1] > -1e-9) & (ef[:, 1] < 1 + 1e-9)
    with np.errstate(invalid="ignore"):
        ok &= _delta_min(ctx, lam, e, params) > 0
    return ok


def _newton(ctx, fn, lam, w, e, params, tol):
    """Vectorised damped Newton; returns (e, residual, converged mask, iterations)."""
    P = e.shape[0]
    eye = ctx.convert(np.eye(3))
    I, JI = _fixed_point_map(ctx, fn, lam, w, e, params)
    res = _relative_residual(ctx, e, I)
    it = 0
    active = res > tol
    while np.any(active) and it < NEWTON_MAX_ITER:
        it += 1
        idx = np.nonzero(active)[0]
        sub = tuple(p[idx] for p in params)
        J = eye[None] - JI[idx]
        step = ctx.solve(J, e[idx] - I[idx])
        t = 1.0
        accepted = np.zeros(idx.size, dtype=bool)
        e_new = e[idx].copy()
        for _ in range(30):
            trial = e[idx] - t * step
            ok = _admissible(ctx, lam[idx], trial, sub)
            I_t, _ = _fixed_point_map(ctx, fn, lam[idx], w[idx], np.where(ok[:, None], trial, e[idx]), sub, jacobian=False)
            r_t = _relative_residual(ctx, np.where(ok[:, None], trial, e[idx]), I_t)
            better = ok & ~accepted & ((r_t < res[idx]) | (r_t <= tol))
            e_new[better] = trial[better]
            accepted |= better
            if accepted.all():
                break
            t *= 0.5
        if not accepted.any():
            break
        e[idx] = e_new
        stalled = idx[~accepted]
        I_new, JI_new = _fixed_point_map(ctx, fn, lam[idx], w[idx], e[idx], sub)
        I[idx], JI[idx] = I_new, JI_new
        res[idx] = _relative_residual(ctx, e[idx], I_new)
        active = res > tol
        active[stalled] = False
    return e, res, res <= tol, it


def _fixed_point(ctx, fn, lam, w, e, params, tol):
    """Damped iteration e ← ½e + ½I(e) (MATH §5), the fallback for points where Newton fails."""
    for it in range(1, FIXED_POINT_MAX_ITER + 1):
        I, _ = _fixed_point_map(ctx, fn, lam, w, e, params, jacobian=False)
        res = _relative_residual(ctx, e, I)
        if np.all(res <= tol):
            return e, res, it
        e = (e + I) / 2
    return e, res, it


def _initial_guess(ctx, gamma):
    P = gamma.shape[0]
    e = ctx.convert(np.zeros((P, 3)))
    e[:, 0] = 1 / gamma.reshape(-1)
    return e


def solve_bulk(ctx, c, gamma, a1, s2, d, point_info=None) -> BulkSolution:
    """Solve the bulk system at the points (c, γ, a1, s², d) (broadcast 1-D arrays)."""
    fn = compiled("bulk-newton", ctx.lambdify_modules)
    c, gamma, a1, s2, d = (ctx.convert(np.asarray(v, dtype=object if ctx.name == "mpmath" else float)).reshape(-1)
                           if np.ndim(v) else v for v in (c, gamma, a1, s2, d))
    P = np.broadcast_shapes(np.shape(c), np.shape(gamma), np.shape(a1), np.shape(s2), np.shape(d))[0]
    c, gamma, a1, s2, d = (np.broadcast_to(ctx.convert(v), (P,)).copy() for v in (c, gamma, a1, s2, d))
    params = tuple(v.reshape(P, 1) for v in (ctx.sqrt(c), gamma, a1, s2, d))
    e = _initial_guess(ctx, gamma)
    m = ctx.nodes
    total_it = 0
    todo = np.arange(P)
    lam_all, w_all = [None] * P, [None] * P
    res_all = np.zeros(P)
    while todo.size:
        sub = tuple(p[todo] for p in params)
        lam, w = mp_nodes(ctx, c[todo], m)
        e_sub, res, conv, it = _newton(ctx, fn, lam, w, e[todo].copy(), sub, ctx.tol)
        total_it += it
        bad = ~conv | ~_admissible(ctx, lam, e_sub, sub)
        if np.any(bad):  # fallback: damped fixed point from the standard start
            b = np.nonzero(bad)[0]
            sb = tuple(p[b] for p in sub)
            e_fp, res_fp, it_fp = _fixed_point(ctx, fn, lam[b], w[b], _initial_guess(ctx, gamma[todo][b]), sb, ctx.tol)
            total_it += it_fp
            e_sub[b], res[b] = e_fp, res_fp
        e[todo] = e_sub
        # quadrature check: the residual on twice the nodes
        lam2, w2 = mp_nodes(ctx, c[todo], 2 * m)
        I2, _ = _fixed_point_map(ctx, fn, lam2, w2, e_sub, sub, jacobian=False)
        qres = _relative_residual(ctx, e_sub, I2)
        fine = qres <= ctx.quad_tol
        for k, j in enumerate(todo):
            if fine[k]:
                lam_all[j], w_all[j], res_all[j] = lam[k], w[k], float(max(res[k], 0.0))
        todo = todo[~fine]
        m *= 2
        if todo.size and m > ctx.max_nodes:
            raise ConvergenceError(
                "quadrature did not converge (integrand too sharply peaked)",
                residuals=qres[~fine], iterations=total_it,
                point=_describe(point_info, todo, c, gamma))
    M = max(len(x) for x in lam_all)
    lam_out = np.stack([_pad(ctx, x, M) for x in lam_all])
    w_out = np.stack([_pad(ctx, x, M) for x in w_all])
    sol = BulkSolution(e=e, lam=lam_out, w=w_out, params=params, iterations=total_it, residual=res_all)
    _check_branch(ctx, sol, point_info, c, gamma)
    return sol


def _pad(ctx, x, M):
    if len(x) == M:
        return x
    pad = ctx.convert(np.zeros(M - len(x)))
    return np.concatenate([x, pad])  # zero-weight nodes at λ = 0 contribute nothing


def _describe(info, idx, c, gamma):
    k = int(idx[0])
    out = {"c": float(c[k]), "gamma": float(gamma[k])}
    if info:
        out.update(info)
    if len(idx) > 1:
        out["points_failing"] = int(len(idx))
    return out


def _check_branch(ctx, sol, info, c, gamma):
    ef = ctx.to_float(sol.e)
    bad_conv = sol.residual > float(ctx.tol) * 10
    if np.any(bad_conv):
        idx = np.nonzero(bad_conv)[0]
        raise ConvergenceError("no convergence of the bulk fixed point", residuals=sol.residual[idx],
                               iterations=sol.iterations, point=_describe(info, idx, c, gamma))
    problems = []
    if np.any(ef[:, 0] <= 0):
        problems.append(("e1 <= 0", ef[:, 0] <= 0))
    if np.any((ef[:, 1] < -1e-9) | (ef[:, 1] > 1 + 1e-9)):
        problems.append(("e2 outside [0, 1]", (ef[:, 1] < -1e-9) | (ef[:, 1] > 1 + 1e-9)))
    live = ctx.to_float(sol.w) != 0
    rc, g, a1, s2, d = sol.params
    beta = rc * (a1 * (sol.lam - 1) + d) - s2 * sol.e[:, 2:3]
    delta = ctx.to_float((g + s2 * sol.e[:, 1:2]) * (1 + s2 * sol.e[:, 0:1] * sol.lam) + sol.lam * beta**2)
    neg = np.any((delta <= 0) & live, axis=-1)
    if np.any(neg):
        problems.append(("Delta <= 0 on the support", neg))
    if problems:
        what, mask = problems[0]
        idx = np.nonzero(mask)[0]
        raise ConvergenceError(f"wrong branch: {what}", residuals=sol.residual[idx], iterations=sol.iterations,
                               point=dict(_describe(info, idx, c, gamma), e=ef[idx[0]].tolist()))


def bulk_derivative(ctx, sol: BulkSolution):
    """de/dγ by implicit differentiation of e = I(e; γ): (I − ∫∂g/∂e) ė = ∫∂g/∂γ."""
    fn = compiled("bulk-newton", ctx.lambdify_modules)
    sens = compiled("bulk-sensitivity", ctx.lambdify_modules)
    _, JI = _fixed_point_map(ctx, fn, sol.lam, sol.w, sol.e, sol.params)
    dI = np.stack([integrate(v, sol.w) for v in sens(*sol.integrand_args())], axis=-1)
    eye = ctx.convert(np.eye(3))
    return ctx.solve(eye[None] - JI, dI)


def traces(ctx, sol: BulkSolution, e_dot=None):
    """The nine traces T (P, 9) and, with ė, their γ-derivatives Ṫ (P, 9)."""
    vals = compiled("traces", ctx.lambdify_modules)(*sol.integrand_args())
    P = sol.e.shape[0]
    T = np.stack([integrate(v, sol.w) for v in vals[:9]], axis=-1)
    if e_dot is None:
        return T, None
    dT_de = np.stack([integrate(v, sol.w) for v in vals[9:36]], axis=-1).reshape(P, 9, 3)
    dT_dg = np.stack([integrate(v, sol.w) for v in vals[36:45]], axis=-1)
    T_dot = dT_dg + np.einsum("pij,pj->pi", dT_de, e_dot)
    return T, T_dot


def woodbury(ctx, T, T_dot, a1, gram, rank: int, c):
    """F = Γ00 − eᵀu and F' = Γ̇00 − 2ėᵀu + uᵀΓ̇u with u = Ĉ(I + ΓĈ)^{-1}e (arrays of shape (P,))."""
    mods = ctx.lambdify_modules
    P = T.shape[0]
    dtype = object if ctx.name == "mpmath" else float
    gv = gram_values(gram)
    cc = ctx.sqrt(ctx.convert(c))
    Gam = compiled(f"gamma-r{rank}", mods)(*[T[:, i] for i in range(9)], *gv, cc, P=P, dtype=dtype)
    Gdot = compiled(f"gamma-dot-r{rank}", mods)(*[T_dot[:, i] for i in range(9)], *gv, cc, P=P, dtype=dtype)
    Ch = compiled(f"c-hat-r{rank}", mods)(a1, *gv, cc, P=P, dtype=dtype)
    K = Gam.shape[-1]
    M = ctx.convert(np.eye(K))[None] + Gam @ Ch
    e = Gam[:, :, 0]
    e_dot = Gdot[:, :, 0]
    u = np.einsum("pij,pj->pi", Ch, ctx.solve(M, e))
    F = Gam[:, 0, 0] - (e * u).sum(axis=-1)
    F_dot = Gdot[:, 0, 0] - 2 * (e_dot * u).sum(axis=-1) + np.einsum("pi,pij,pj->p", u, Gdot, u)
    return F, F_dot


def attention_error(ctx, c, gamma, a1, s2, d, gram, rank: int, point_info=None):
    """E_A(γ) = −γ² F'(γ) for the attention system at P points; also returns F and the bulk solution."""
    sol = solve_bulk(ctx, c, gamma, a1, s2, d, point_info)
    e_dot = bulk_derivative(ctx, sol)
    T, T_dot = traces(ctx, sol, e_dot)
    P = sol.e.shape[0]
    gram = np.broadcast_to(ctx.convert(gram), (P,) + np.shape(gram)[-2:])
    a1v = sol.params[2][:, 0]
    F, F_dot = woodbury(ctx, T, T_dot, a1v, gram, rank, sol.params[0][:, 0] ** 2)
    g = sol.params[1][:, 0]
    return -(g**2) * F_dot, F, sol


def bulk_error(ctx, c, gamma, a1, s2, d, point_info=None):
    """E_bulk(γ) = −γ² de1/dγ for the bulk system alone (μ = 0, w = 0)."""
    sol = solve_bulk(ctx, c, gamma, a1, s2, d, point_info)
    e_dot = bulk_derivative(ctx, sol)
    g = sol.params[1][:, 0]
    return -(g**2) * e_dot[:, 0], sol.e[:, 0], sol


def linear_error(ctx, c, gamma, snr):
    """E_LR(γ) from the closed form of MATH §3 (lambdified; mpmath evaluated point by point)."""
    fn = compiled("linear", ctx.lambdify_modules)
    if ctx.name == "numpy":
        return fn(np.sqrt(c), gamma, snr)[0]
    shape = np.broadcast_shapes(np.shape(c), np.shape(gamma), np.shape(snr))
    cc, gg, ss = (np.broadcast_to(ctx.convert(v), shape) for v in (c, gamma, snr))
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        out[idx] = fn(ctx.sqrt(ctx.convert(cc[idx])) if False else _mp_sqrt(cc[idx]), gg[idx], ss[idx])[0]
    return out


def _mp_sqrt(x):
    import mpmath

    return mpmath.sqrt(x)
