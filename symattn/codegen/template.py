r"""@@DOCSTRING@@"""
# This file is the run-time template of ``symattn codegen``. The blocks between the
# "@@BEGIN name@@" / "@@END name@@" markers are stubs here; the generator replaces them with
# the constants of one activation and the kernels printed from the SymPy systems. Everything
# else is copied verbatim into each generated module, which must import nothing but numpy
# and the standard library.

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np

# @@BEGIN constants@@
ACTIVATION = "stub"          # the activation f (catalog name or SymPy expression in x)
EXPRESSION = "stub"          # f(x), uncentred
A0 = 0.0                     # E f(xi): subtracted (the model uses the centred f)
A1 = 0.0                     # a1 = E[xi f(xi)]
NU = 0.0                     # nu = E f_c(xi)^2
S2 = 0.0                     # s^2 = nu - a1^2
D = 0.0                      # diagonal constant d
DIAGONAL = "f"               # 'f' (d = lim f(sqrt p)/sqrt p) or 'zero' (d = 0)
RANK = 1                     # rank r of W_K^T W_Q - I
DPS = 30                     # digits of the Hermite constants before rounding to float64
SYMATTN_VERSION = "stub"
GENERATED = "stub"           # UTC date and time of generation
N_POWERS_1 = 3               # nu-moments int lam^i / Delta   dnu needed, i < N_POWERS_1
N_POWERS_2 = 3               # nu-moments int lam^i / Delta^2 dnu needed, i < N_POWERS_2
NEWTON_POWERS = (3, 3)       # the same, for the Newton step (integrands and Jacobian)
RESIDUAL_POWERS = (3, 0)     # the same, for the fixed-point map alone
# @@END constants@@

__all__ = ["memorization_error", "attention_error", "linear_error", "bulk_error", "aligned",
           "gram_matrix", "solve_bulk", "mp_nodes", "ConvergenceError", "main",
           "A0", "A1", "NU", "S2", "D", "ACTIVATION", "RANK"]

TOL = 1e-13                # Newton: max-norm relative residual of e = I(e)
QUAD_TOL = 1e-12           # quadrature: fixed-point residual with the interleaved (trapezoid) rule
NODES = 64                 # initial number of Marchenko-Pastur nodes (doubled where needed)
MAX_NODES = 1 << 15
NEWTON_MAX_ITER = 25
NONMONOTONE = 1e4          # a Newton step may raise the merit function at most this factor
FIXED_POINT_MAX_ITER = 20000
GEOMETRY_KEYS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")


class ConvergenceError(ArithmeticError):
    """The bulk fixed point did not converge, or converged to the wrong branch.

    Attributes: ``reason``, ``residuals`` (max-norm relative residual per failing point),
    ``iterations`` and ``point`` (dict with the c, gamma of the first failing point).
    """

    def __init__(self, reason, residuals=None, iterations=None, point=None):
        self.reason = reason
        self.residuals = residuals
        self.iterations = iterations
        self.point = point or {}
        parts = [reason]
        if iterations is not None:
            parts.append(f"after {iterations} iterations")
        if residuals is not None and np.size(residuals):
            parts.append(f"max residual {float(np.max(np.abs(residuals))):.3e}")
        if self.point:
            parts.append("at " + ", ".join(f"{k}={v}" for k, v in self.point.items()))
        super().__init__("; ".join(parts))


# @@BEGIN kernels@@
def _delta_parts(e1, e2, e3, rc, gamma):
    """(q0, p1, b0, b1) with beta = b0 + b1 lam and Delta = q0 + lam (p1 + beta^2)."""
    raise NotImplementedError


WOODBURY_BASIS = []  # the rows/columns of Gamma and C_hat that enter F


def _bulk_residual(n0, n1, n2, e1, e2, e3, rc, gamma):
    """I_i(e) = int g_i dmu_S, i = 1..3, from the nu-moments n1, n2: array (3, P)."""
    raise NotImplementedError


def _bulk_newton(n0, n1, n2, e1, e2, e3, rc, gamma):
    """I_i(e) and the Jacobian int dg_i/de_j (row-major): array (12, P)."""
    raise NotImplementedError


def _bulk_sensitivity(n0, n1, n2, e1, e2, e3, rc, gamma):
    """int dg_i/dgamma: array (3, P)."""
    raise NotImplementedError


def _traces(n0, n1, n2, e1, e2, e3, rc, gamma, ed1, ed2, ed3):
    """The nine traces T and their total gamma-derivatives: array (18, P)."""
    raise NotImplementedError


def _woodbury_parts(T, Td, G, rc):
    """Gamma, dGamma/dgamma, C_hat and I + Gamma C_hat from the traces T, Td (P, 9) and Gram G."""
    raise NotImplementedError


def _linear_error(rc, gamma, snr):
    """E_LR in closed form."""
    raise NotImplementedError
# @@END kernels@@


# ============================================================================ quadrature
_BINOMIAL = {}


def _binomial_tables(J):
    """binom(i, l) (J, J) and the index arrays i - l (clipped at 0) and l."""
    if J not in _BINOMIAL:
        ii, ll = np.meshgrid(np.arange(J), np.arange(J), indexing="ij")
        binom = np.array([[math.comb(i, l) if l <= i else 0 for l in range(J)] for i in range(J)], dtype=float)
        _BINOMIAL[J] = (binom, np.maximum(ii - ll, 0), ll)
    return _BINOMIAL[J]


_TABLES = {}


def _node_table(m, offset, J):
    """u = 1 + cos(theta_k) (m,) and the table sin^2(theta_k) u_k^l (m, J), theta_k = (k + offset) pi/m."""
    key = (m, offset, J)
    if key not in _TABLES:
        theta = (np.arange(m) + offset) * (np.pi / m)   # offset 0.5: midpoint rule; 0: trapezoid rule
        u = 1 + np.cos(theta)                            # in [0, 2]
        _TABLES[key] = (u, np.sin(theta)[:, None] ** 2 * _powers(u, J))
    return _TABLES[key]


def _powers(x, J):
    """x^0..x^{J-1} as (len(x), J) (repeated products)."""
    out = np.ones(x.shape + (J,))
    for j in range(1, J):
        out[:, j] = out[:, j - 1] * x
    return out


class _Quadrature:
    r"""Quadrature for the Marchenko-Pastur law mu_S of S = Z^T Z/p (ratio n/p = 1/c).

    mu_S = (1 - c)_+ delta_0 + c sqrt((b - lam)(lam - a))/(2 pi lam) dlam on
    [a, b] = [(1 - c^{-1/2})^2, (1 + c^{-1/2})^2]. Its continuous part has a 1/lam factor that
    is sharply peaked near lam = a when c is close to (but not equal to) 1, so the integrals are
    taken against the smooth measure nu(dlam) = lam mu_S(dlam) = c sqrt((b - lam)(lam - a))/(2 pi) dlam
    (the atom drops out). With lam = a + h (1 + cos theta), h = (b - a)/2 = 2/sqrt(c),

      nu(dlam) = c h^2 sin^2(theta)/(2 pi) dtheta,

    an entire periodic density, so the midpoint rule theta_k = (k - 1/2) pi/m is spectrally
    accurate, at a rate set only by the poles of the integrand. The generated kernels recover
    the integrals against mu_S from these nu-moments (mu_S has mass 1; see ``_moment_forms`` of
    symattn.codegen):

      int lam^j Delta^-k dmu_S = int lam^(j-1) Delta^-k dnu   (j >= 1),
      int Delta^-1 dmu_S = (1 - int D1/Delta dnu)/q0,  Delta = q0 + lam D1(lam),   (j = 0)

    and similarly for Delta^-2. The nu-moments int lam^i Delta^-k dnu are
    sum_l binom(i, l) a^(i-l) h^l N_l, N_l = (c h^2/(2m)) sum_k sin^2(theta_k) (1 + cos theta_k)^l
    / Delta(lam_k)^k: non-negative terms only, and N is one matrix product with a table shared by
    all points (the nodes in theta do not depend on c).
    """

    def __init__(self, c, m, n_powers, offset=0.5):
        c = np.asarray(c, dtype=float).reshape(-1)
        rc = np.sqrt(c)
        self.m = m
        a = (1 - 1 / rc) ** 2
        h = 2 / rc
        J = max(int(n_powers), 3)                        # at least lam^0..lam^2 (see moments)
        u, self.table = _node_table(m, offset, J)
        self.lam = np.multiply.outer(h, u)
        self.lam += a[:, None]
        self.scale = c * h * h / (2 * m)
        self.atom = np.where(c < 1, 1 - c, 0.0)
        binom, iml, ll = _binomial_tables(J)
        self.binom = binom * _powers(a, J)[:, iml] * _powers(h, J)[:, ll] * self.scale[:, None, None]
        self._buffer = None
        # where the 1/lam peak of mu_S at the lower edge is resolved, integrate against mu_S directly
        self.direct = m * np.sqrt(2 * a / h) >= 40
        self.w_direct = None                             # mu_S weights on the nodes, 0 where not direct
        if self.direct.any():
            self.w_direct = np.divide(self.table[:, 0], self.lam)
            self.w_direct *= (self.scale * self.direct)[:, None]

    @property
    def size(self):
        return self.lam.shape[0]

    def take(self, idx):
        """The quadrature of a subset of the points (shares the node table)."""
        if idx.shape[0] == self.size:
            return self
        q = object.__new__(_Quadrature)
        q.m, q.table, q._buffer = self.m, self.table, None
        q.lam, q.scale, q.atom, q.binom = self.lam[idx], self.scale[idx], self.atom[idx], self.binom[idx]
        q.direct = self.direct[idx]
        q.w_direct = None if self.w_direct is None else self.w_direct[idx]
        return q

    @property
    def weights(self):
        """Weights w (P, m) of the continuous part of mu_S on the nodes lam: c h^2 sin^2/(2 m lam)."""
        return self.scale[:, None] * self.table[:, 0] / self.lam

    def moments(self, q0, p1, b0, b1, n1, n2):
        r"""(n0, nu1, nu2): n0[k-1] = int Delta^-k dmu_S (2, P), nu-moments int lam^i/Delta^k dnu (n_k, P).

        Delta(lam) = q0 + lam (p1 + (b0 + b1 lam)^2) per point (arrays (P,)), evaluated in place
        in one work array (no temporaries of the size of the node arrays). nu2 is None and
        n0[1] is not computed when n2 = 0.

        int Delta^-k dmu_S, whose density has the factor 1/lam, is computed in one of two ways:
        directly, (1 - c)_+/q0^k + sum_k w_k/Delta_k^k, where the peak of 1/lam near the lower
        edge a is resolved (m sqrt(2a/h) >= 40); otherwise from the nu-moments and the total mass
        1 of mu_S, since Delta = q0 + lam D1 with D1 = p1 + beta^2 = d11 + d12 lam + d22 lam^2:

          int Delta^-1 dmu_S = (1 - int D1/Delta dnu)/q0,
          int Delta^-2 dmu_S = (1 - int D1/Delta dnu - q0 int D1/Delta^2 dnu)/q0^2

        (which cancels digits when Delta(a) >> q0, i.e. small gamma far from c = 1: hence the choice).
        """
        lam = self.lam
        if self._buffer is None:
            self._buffer = np.empty_like(lam)
        t = np.multiply(lam, b1[:, None], out=self._buffer)
        t += b0[:, None]
        t *= t
        t += p1[:, None]
        t *= lam
        t += q0[:, None]
        np.reciprocal(t, out=t)                          # 1/Delta on the nodes
        d11, d12, d22 = p1 + b0 * b0, 2 * b0 * b1, b1 * b1
        n0 = np.empty((2, q0.shape[0]))
        k1 = max(n1, 3)
        nu1 = np.einsum("pil,pl->ip", self.binom[:, :k1, :k1], t @ self.table[:, :k1])
        D1_1 = d11 * nu1[0] + d12 * nu1[1] + d22 * nu1[2]
        inv0 = 1 / q0
        n0[0] = (1 - D1_1) * inv0
        wd = self.w_direct
        if wd is not None:
            n0[0] = np.where(self.direct, self.atom * inv0 + np.einsum("pm,pm->p", t, wd), n0[0])
        if not n2:
            return n0, nu1[:n1], None
        t *= t                                           # 1/Delta^2
        k2 = max(n2, 3)
        nu2 = np.einsum("pil,pl->ip", self.binom[:, :k2, :k2], t @ self.table[:, :k2])
        n0[1] = (1 - D1_1 - q0 * (d11 * nu2[0] + d12 * nu2[1] + d22 * nu2[2])) * (inv0 * inv0)
        if wd is not None:
            n0[1] = np.where(self.direct, self.atom * inv0 * inv0 + np.einsum("pm,pm->p", t, wd), n0[1])
        return n0, nu1[:n1], nu2[:n2]


def mp_nodes(c, m):
    r"""Nodes lam and weights w, each (P, m + 1), of int g dmu_S ~ sum_k w_k g(lam_k).

    Node 0 is lam = 0 with the atom (1 - c)_+; nodes 1..m are the midpoint rule in theta with
    the weights c h^2 sin^2(theta_k)/(2 m lam_k) (see :class:`_Quadrature`): spectrally accurate
    for smooth g, slowly for c close to 1 (the solver integrates against lam mu_S instead).
    """
    q = _Quadrature(np.atleast_1d(c), m, 1)
    zero = np.zeros((q.lam.shape[0], 1))
    return np.concatenate([zero, q.lam], axis=1), np.concatenate([q.atom[:, None], q.weights], axis=1)


# ============================================================================ bulk system
def _fixed_point_map(q, e, rc, gamma, jacobian=True):
    r"""I(e) (P, 3), with ``jacobian`` int dg/de dmu_S (P, 3, 3) (else None), and a bound on Delta (P,).

    Delta = q0 + lam (p1 + beta^2) >= q0 on lam >= 0 when p1 >= 0, so the bound is q0 there;
    elsewhere it is the minimum over the nodes (and q0 if there is an atom).
    """
    e1, e2, e3 = e[:, 0], e[:, 1], e[:, 2]
    q0, p1, b0, b1 = _delta_parts(e1, e2, e3, rc, gamma)
    dmin = q0.copy()
    odd = ~((q0 > 0) & (p1 >= 0))
    if odd.any():
        lam = q.lam[odd]
        beta = b0[odd, None] + b1[odd, None] * lam
        delta = q0[odd, None] + lam * (p1[odd, None] + beta * beta)
        dmin[odd] = np.minimum(np.min(delta, axis=1), np.where(q.atom[odd] > 0, q0[odd], np.inf))
    if not jacobian:
        n0, n1, n2 = q.moments(q0, p1, b0, b1, *RESIDUAL_POWERS)
        return _bulk_residual(n0, n1, n2, e1, e2, e3, rc, gamma).T, None, dmin
    n0, n1, n2 = q.moments(q0, p1, b0, b1, *NEWTON_POWERS)
    out = _bulk_newton(n0, n1, n2, e1, e2, e3, rc, gamma)
    return out[:3].T, out[3:12].T.reshape(-1, 3, 3), dmin


def _scaled(e, I):
    return (e - I) / np.maximum(1.0, np.abs(e))


def _admissible(e, dmin, strict=True):
    """The branch at z = -gamma: e1 > 0, Delta > 0 on the support and (``strict``) 0 <= e2 <= 1."""
    ok = np.isfinite(e).all(axis=-1) & (e[:, 0] > 0) & (dmin > 0)
    if strict:
        ok &= (e[:, 1] > -1e-9) & (e[:, 1] < 1 + 1e-9)
    return ok


def _newton_step(JI, r):
    """Solve (I - JI) s = r for a batch of 3x3 systems (Cramer's rule: a Newton step only)."""
    A = np.eye(3)[None] - JI
    c00 = A[:, 1, 1] * A[:, 2, 2] - A[:, 1, 2] * A[:, 2, 1]
    c01 = A[:, 1, 2] * A[:, 2, 0] - A[:, 1, 0] * A[:, 2, 2]
    c02 = A[:, 1, 0] * A[:, 2, 1] - A[:, 1, 1] * A[:, 2, 0]
    det = A[:, 0, 0] * c00 + A[:, 0, 1] * c01 + A[:, 0, 2] * c02
    inv = np.empty_like(A)
    inv[:, 0, 0], inv[:, 1, 0], inv[:, 2, 0] = c00, c01, c02
    inv[:, 0, 1] = A[:, 0, 2] * A[:, 2, 1] - A[:, 0, 1] * A[:, 2, 2]
    inv[:, 1, 1] = A[:, 0, 0] * A[:, 2, 2] - A[:, 0, 2] * A[:, 2, 0]
    inv[:, 2, 1] = A[:, 0, 1] * A[:, 2, 0] - A[:, 0, 0] * A[:, 2, 1]
    inv[:, 0, 2] = A[:, 0, 1] * A[:, 1, 2] - A[:, 0, 2] * A[:, 1, 1]
    inv[:, 1, 2] = A[:, 0, 2] * A[:, 1, 0] - A[:, 0, 0] * A[:, 1, 2]
    inv[:, 2, 2] = A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]
    return np.einsum("pij,pj->pi", inv, r) / det[:, None]


def _newton(q, e, rc, gamma, tol=TOL):
    r"""Vectorised Newton with backtracking on e = I(e) (call inside np.errstate(all='ignore')).

    A step is taken at the first t in 1, 1/2, 1/4, ... whose iterate has e1 > 0 and Delta > 0 and
    whose merit ||(e - I)/max(1, |e|)||^2 is below NONMONOTONE times the current one (Newton may
    climb the merit function on its way). While most points are active all of them are evaluated
    (a converged point takes a zero step), which avoids copying the node arrays. Returns
    (e, residual, converged, iterations, Delta bound).
    """
    P = e.shape[0]
    I, JI, dmin = _fixed_point_map(q, e, rc, gamma)
    r = _scaled(e, I)
    res, merit = np.max(np.abs(r), axis=-1), np.sum(r * r, axis=-1)
    it = 0
    active = res > tol
    while it < NEWTON_MAX_ITER:
        idx = np.flatnonzero(active)
        if not idx.size:
            break
        it += 1
        if 2 * idx.size >= P:                            # all points, zero step where converged
            pending, pstep = np.arange(P), np.zeros((P, 3))
            pstep[idx] = _newton_step(JI[idx], e[idx] - I[idx])
        else:
            pending, pstep = idx, _newton_step(JI[idx], e[idx] - I[idx])
        t = 1.0
        for _ in range(40):
            sub = q.take(pending)
            trial = e[pending] - t * pstep
            ok = np.isfinite(trial).all(axis=-1) & (trial[:, 0] > 0)
            safe = np.where(ok[:, None], trial, e[pending])
            I_t, JI_t, d_t = _fixed_point_map(sub, safe, rc[pending], gamma[pending])
            r_t = _scaled(safe, I_t)
            res_t, merit_t = np.max(np.abs(r_t), axis=-1), np.sum(r_t * r_t, axis=-1)
            better = ok & (d_t > 0) & ((merit_t < NONMONOTONE * merit[pending]) | (res_t <= tol))
            if better.all():
                e[pending], I[pending], JI[pending] = trial, I_t, JI_t
                res[pending], merit[pending], dmin[pending] = res_t, merit_t, d_t
                pending = pending[:0]
                break
            took = pending[better]
            e[took], I[took], JI[took] = trial[better], I_t[better], JI_t[better]
            res[took], merit[took], dmin[took] = res_t[better], merit_t[better], d_t[better]
            pending, pstep = pending[~better], pstep[~better]
            if not pending.size:
                break
            t *= 0.5
        active = res > tol
        active[pending] = False  # no acceptable step: left to the fallback
    return e, res, res <= tol, it, dmin


def _fixed_point(q, e, rc, gamma):
    """Damped iteration e <- (e + I(e))/2 (MATH §5): the fallback where Newton fails.

    Returns (e, residual, iterations, Delta bound); only unconverged points are iterated.
    """
    res = np.full(e.shape[0], np.inf)
    dmin = np.zeros(e.shape[0])
    active = np.arange(e.shape[0])
    it = 0
    while active.size and it < FIXED_POINT_MAX_ITER:
        it += 1
        I, _, dmin[active] = _fixed_point_map(q.take(active), e[active], rc[active], gamma[active], jacobian=False)
        res[active] = np.max(np.abs(_scaled(e[active], I)), axis=-1)
        e[active] = (e[active] + I) / 2
        active = active[~(res[active] <= TOL)]
    return e, res, it, dmin


def _initial_guess(gamma):
    e = np.zeros((gamma.shape[0], 3))
    e[:, 0] = 1 / gamma
    return e


class BulkSolution:
    """The bulk unknowns e = (e1, e2, e3) (P, 3) at the points (c, gamma), with the node groups."""

    def __init__(self, c, gamma, e, groups, iterations, residual):
        self.c, self.gamma, self.e = c, gamma, e
        # [(indices, _Quadrature, None or (rows of the quadrature used, the points of all its rows))]
        self.groups = groups
        self.iterations = iterations
        self.residual = residual


def _point(c, gamma, idx):
    k = int(idx[0])
    out = {"c": float(c[k]), "gamma": float(gamma[k]), "activation": ACTIVATION}
    if len(idx) > 1:
        out["points_failing"] = int(len(idx))
    return out


def solve_bulk(c, gamma):
    r"""Solve the bulk system e = I(e) at the points (c, gamma) (1-D arrays of equal length).

    Newton from e = (1/gamma, 0, 0) on m = NODES midpoint nodes; points where it fails restart
    from there with the damped fixed point; points whose fixed-point residual with the trapezoid
    rule on the m interleaved nodes exceeds QUAD_TOL are solved again (warm start) on 2m nodes,
    up to MAX_NODES. Raises ConvergenceError if a point does not
    converge or leaves the branch e1 > 0, 0 <= e2 <= 1, Delta > 0.
    """
    c = np.asarray(c, dtype=float).reshape(-1)
    gamma = np.asarray(gamma, dtype=float).reshape(-1)
    P = c.shape[0]
    rc = np.sqrt(c)
    e = _initial_guess(gamma)
    m, total_it = NODES, 0
    todo = np.arange(P)
    groups, res_all, ok_all = [], np.zeros(P), np.ones(P, dtype=bool)
    J = max(N_POWERS_1, N_POWERS_2, 1)
    q = _Quadrature(c, m, J)
    with np.errstate(all="ignore"):
        while todo.size:
            rt, gt = rc[todo], gamma[todo]
            e_sub, res, conv, it, dmin = _newton(q, e[todo].copy(), rt, gt)
            total_it += it
            ok = _admissible(e_sub, dmin)
            bad = np.flatnonzero(~conv | ~ok)
            if bad.size:
                e_sub[bad], res[bad], it_fp, d_fp = _fixed_point(q.take(bad), _initial_guess(gt[bad]), rt[bad],
                                                                  gt[bad])
                ok[bad] = _admissible(e_sub[bad], d_fp)
                total_it += it_fp
            e[todo] = e_sub
            # quadrature check: the trapezoid rule on the m interleaved nodes theta = k pi/m. For these
            # periodic analytic integrands its error and the midpoint rule's are of equal size and
            # opposite sign, so this residual is about twice the quadrature error of the m-node
            # solution (a check on 2m midpoint nodes sees about the error itself, at twice the cost).
            I2, _, _ = _fixed_point_map(_Quadrature(c[todo], m, max(RESIDUAL_POWERS), offset=0.0), e_sub, rt, gt,
                                        jacobian=False)
            res2 = np.max(np.abs(_scaled(e_sub, I2)), axis=-1)
            fine = (res2 <= QUAD_TOL) | ~(res <= TOL * 10)  # unconverged points fail below, not here
            if fine.any():
                idx = np.flatnonzero(fine)
                if 2 * idx.size >= q.size:               # keep the nodes of every point, use some
                    groups.append((todo[idx], q, (idx, todo)))
                else:
                    groups.append((todo[idx], q.take(idx), None))
                res_all[todo[idx]] = res[idx]
                ok_all[todo[idx]] = ok[idx]
            if not fine.all() and 2 * m > MAX_NODES:
                raise ConvergenceError("quadrature did not converge (integrand too sharply peaked)",
                                       residuals=res2[~fine], iterations=total_it,
                                       point=_point(c, gamma, todo[~fine]))
            todo, m = todo[~fine], 2 * m
            if todo.size:
                q = _Quadrature(c[todo], m, J)
    bad = ~(res_all <= TOL * 10)
    if bad.any():
        idx = np.flatnonzero(bad)
        raise ConvergenceError("no convergence of the bulk fixed point", residuals=res_all[idx],
                               iterations=total_it, point=_point(c, gamma, idx))
    if not ok_all.all():
        idx = np.flatnonzero(~ok_all)
        point = _point(c, gamma, idx)
        point["e"] = e[idx[0]].tolist()
        raise ConvergenceError("wrong branch: need e1 > 0, 0 <= e2 <= 1 and Delta > 0 on the support",
                               residuals=res_all[idx], iterations=total_it, point=point)
    return BulkSolution(c, gamma, e, groups, total_it, res_all)


def _derivatives(sol):
    r"""de/dgamma by implicit differentiation, and the nine traces T with their derivatives.

    (I - int dg/de) edot = int dg/dgamma;  Tdot = int dT/dgamma + (int dT/de) edot.
    Returns edot (P, 3), T (P, 9), Tdot (P, 9).
    """
    order = np.concatenate([idx for idx, _, _ in sol.groups])
    n0 = np.empty((2, order.size))
    n1 = np.empty((N_POWERS_1, order.size))
    n2 = np.empty((N_POWERS_2, order.size))
    start = 0
    with np.errstate(all="ignore"):
        for idx, q, subset in sol.groups:  # the nu-moments of each node group, then every kernel once
            # a quadrature may also hold points solved later on more nodes: computed, not used
            points = idx if subset is None else subset[1]
            e, rc, g = sol.e[points], np.sqrt(sol.c[points]), sol.gamma[points]
            q0, p1, b0, b1 = _delta_parts(e[:, 0], e[:, 1], e[:, 2], rc, g)
            moments = q.moments(q0, p1, b0, b1, N_POWERS_1, N_POWERS_2)
            stop = start + idx.size
            for arr, mom in zip((n0, n1, n2), moments):
                arr[:, start:stop] = mom if subset is None else mom[:, subset[0]]
            start = stop
    e, rc, g = sol.e[order], np.sqrt(sol.c[order]), sol.gamma[order]
    e1, e2, e3 = e[:, 0], e[:, 1], e[:, 2]
    JI = _bulk_newton(n0, n1, n2, e1, e2, e3, rc, g)[3:12].T.reshape(-1, 3, 3)
    dI = _bulk_sensitivity(n0, n1, n2, e1, e2, e3, rc, g).T
    ed = np.linalg.solve(np.eye(3)[None] - JI, dI[..., None])[..., 0]
    tr = _traces(n0, n1, n2, e1, e2, e3, rc, g, ed[:, 0], ed[:, 1], ed[:, 2])
    P = sol.e.shape[0]
    e_dot, T, T_dot = np.empty((P, 3)), np.empty((P, 9)), np.empty((P, 9))
    e_dot[order], T[order], T_dot[order] = ed, tr[:9].T, tr[9:].T
    return e_dot, T, T_dot


# ============================================================================ public API
def _check_positive(name, value, upper):
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"invalid {name}={value!r}: allowed real numbers 0 < {name} <= {upper:g}") from None
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > upper):
        shown = value if arr.ndim == 0 else (arr.item() if arr.size == 1 else arr.tolist())
        raise ValueError(f"invalid {name}={shown!r}: allowed real numbers 0 < {name} <= {upper:g}")
    return arr


def gram_matrix(snr=0.0, wk2=0.0, wq2=0.0, mu_wk=0.0, mu_wq=0.0, wk_wq=0.0):
    r"""The Gram matrix of (mu, w_K, w_Q), shape (..., 3, 3), broadcast over the six entries.

    snr = ||mu||^2, wk2 = ||w_K||^2, wq2 = ||w_Q||^2, mu_wk = mu^T w_K, mu_wq = mu^T w_Q,
    wk_wq = w_K^T w_Q; W_K^T W_Q = I + w_K w_Q^T.
    """
    vals = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (snr, wk2, wq2, mu_wk, mu_wq, wk_wq)))
    s, k2, q2, mk, mq, kq = vals
    return np.stack([np.stack([s, mk, mq], -1), np.stack([mk, k2, kq], -1), np.stack([mq, kq, q2], -1)], -2)


def aligned(snr, theta=None):
    """Geometry keywords of w_K = w_Q = theta mu/||mu|| (theta = ||mu|| by default: w_K = w_Q = mu)."""
    snr = float(snr)
    if not (math.isfinite(snr) and snr >= 0):
        raise ValueError(f"invalid snr={snr!r}: allowed snr >= 0")
    m = math.sqrt(snr)
    theta = m if theta is None else float(theta)
    k = theta * m
    return {"snr": snr, "wk2": theta**2, "wq2": theta**2, "mu_wk": k, "mu_wq": k, "wk_wq": theta**2}


def _check_gram(G):
    k = 1 + 2 * RANK
    if G.shape[-2:] != (k, k):
        raise ValueError(f"invalid gram of shape {G.shape}: allowed (..., {k}, {k}) for rank {RANK}")
    if not np.all(np.isfinite(G)) or not np.allclose(G, np.swapaxes(G, -1, -2), rtol=1e-10, atol=1e-12):
        raise ValueError("invalid geometry: allowed a finite symmetric Gram matrix of (mu, w_K, w_Q)")
    G = 0.5 * (G + np.swapaxes(G, -1, -2))
    eig = np.linalg.eigvalsh(G.reshape(-1, k, k))
    scale = np.maximum(1.0, np.max(np.abs(eig), axis=-1))
    if np.any(eig[:, 0] < -1e-10 * scale):
        raise ValueError("invalid geometry: allowed a positive semi-definite Gram matrix of (mu, w_K, w_Q) "
                         f"(smallest eigenvalue {float(np.min(eig[:, 0])):.4g}; e.g. |mu_wk| <= sqrt(snr*wk2))")
    return G


def _geometry(gram, named):
    unknown = set(named) - set(GEOMETRY_KEYS)
    if unknown:
        raise TypeError(f"unknown geometry keyword(s) {sorted(unknown)}; allowed {GEOMETRY_KEYS} or gram=")
    if gram is not None:
        if named:
            raise TypeError("give either gram= or the geometry keywords, not both")
        return _check_gram(np.asarray(gram, dtype=float))
    if RANK != 1:
        if named:
            raise TypeError(f"this solver has rank {RANK}: give the Gram matrix as gram=")
        k = 1 + 2 * RANK
        return np.zeros((k, k))
    return _check_gram(gram_matrix(**named))


def attention_error(c, gamma, gram=None, **geometry):
    r"""E_A(gamma) = -gamma^2 F'(gamma) of nonlinear attention, broadcast over c, gamma and the geometry.

    c = p/n (0 < c <= 1e4), gamma > 0 the ridge; the geometry is given by the keywords snr, wk2,
    wq2, mu_wk, mu_wq, wk_wq (arrays allowed; rank 1) or by ``gram`` (..., 1+2r, 1+2r) ordered
    (mu, w_K^(1..r), w_Q^(1..r)). The bulk system depends on (c, gamma) only and is solved on
    their broadcast grid, whatever the geometry's shape; then F = Gamma00 - e^T u with
    u = C_hat (I + Gamma C_hat)^{-1} e, e = Gamma[:, 0], and F' = Gammadot00 - 2 edot^T u
    + u^T Gammadot u. Returns a float array of the broadcast shape.
    """
    E, _ = _attention(c, gamma, gram, geometry)
    return E


def _attention(c, gamma, gram, geometry):
    c = _check_positive("c", c, 1e4)
    gamma = _check_positive("gamma", gamma, 1e12)
    G = _geometry(gram, geometry)
    k = G.shape[-1]
    grid = np.broadcast_shapes(c.shape, gamma.shape)      # the bulk depends on (c, gamma) only
    shape = np.broadcast_shapes(grid, G.shape[:-2])
    sol = solve_bulk(np.broadcast_to(c, grid).reshape(-1), np.broadcast_to(gamma, grid).reshape(-1))
    _, T, T_dot = _derivatives(sol)
    T, T_dot = (np.broadcast_to(v.reshape(grid + (9,)), shape + (9,)).reshape(-1, 9) for v in (T, T_dot))
    cb = np.broadcast_to(c, shape).reshape(-1)
    gb = np.broadcast_to(gamma, shape).reshape(-1)
    Gb = np.broadcast_to(G, shape + (k, k)).reshape(-1, k, k)
    rc = np.sqrt(cb)
    Gam, Gdot, Ch, M = _woodbury_parts(T, T_dot, Gb, rc)
    e, e_dot = Gam[:, :, 0], Gdot[:, :, 0]
    x = np.linalg.solve(M, e[..., None])[..., 0]
    u = np.einsum("pij,pj->pi", Ch, x)
    F = Gam[:, 0, 0] - np.einsum("pi,pi->p", e, u)
    F_dot = Gdot[:, 0, 0] - 2 * np.einsum("pi,pi->p", e_dot, u) + np.einsum("pi,pij,pj->p", u, Gdot, u)
    return (-(gb**2) * F_dot).reshape(shape), F.reshape(shape)


def bulk_error(c, gamma):
    r"""E_bulk(gamma) = -gamma^2 de1/dgamma of the bulk system alone (mu = 0, w = 0), broadcast over c, gamma."""
    c = _check_positive("c", c, 1e4)
    gamma = _check_positive("gamma", gamma, 1e12)
    shape = np.broadcast_shapes(c.shape, gamma.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c, gamma))
    e_dot, _, _ = _derivatives(solve_bulk(cb, gb))
    return (-(gb**2) * e_dot[:, 0]).reshape(shape)


def linear_error(c, gamma, snr=0.0):
    r"""E_LR(gamma) of ridge regression on X itself (closed form), broadcast over c, gamma, snr = ||mu||^2."""
    c = _check_positive("c", c, 1e4)
    gamma = _check_positive("gamma", gamma, 1e12)
    snr = np.asarray(snr, dtype=float)
    if not np.all(np.isfinite(snr)) or np.any(snr < 0):
        raise ValueError(f"invalid snr={snr.tolist()!r}: allowed snr >= 0")
    c, gamma, snr = np.broadcast_arrays(c, gamma, snr)
    with np.errstate(all="ignore"):
        out = _linear_error(np.sqrt(c), gamma, snr)
    return np.asarray(np.broadcast_to(out, c.shape), dtype=float).copy()


def memorization_error(c, gamma, model="attention", gram=None, **geometry):
    r"""E(gamma) for model 'attention' (E_A), 'linear' (E_LR) or 'both' ({'attention': .., 'linear': ..}).

    Same arguments as :func:`attention_error`; 'linear' uses snr = ||mu||^2 (gram[..., 0, 0]).
    """
    if model not in ("attention", "linear", "both"):
        raise ValueError(f"invalid model={model!r}: allowed 'attention', 'linear' or 'both'")
    out = {}
    if model in ("attention", "both"):
        out["attention"] = attention_error(c, gamma, gram=gram, **geometry)
    if model in ("linear", "both"):
        G = _geometry(gram, geometry)
        out["linear"] = linear_error(c, gamma, G[..., 0, 0])
    return out if model == "both" else out[model]


# ============================================================================ command line
def _parser():
    p = argparse.ArgumentParser(
        description=f"Deterministic-equivalent memorisation errors E_attention and E_linear for the activation "
                    f"{ACTIVATION} (a1 = {A1:.6g}, nu = {NU:.6g}, d = {D:.6g}); generated by symattn "
                    f"{SYMATTN_VERSION} on {GENERATED}. Needs only numpy.",
        epilog="example: python %(prog)s --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json\n"
               "exit codes: 0 ok; 2 bad input; 3 no convergence.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--c", type=float, nargs="+", required=True, metavar="C", help="c = p/n (one or more)")
    p.add_argument("--gamma", "-g", type=float, nargs="+", required=True, metavar="G", help="ridge gamma > 0")
    g = p.add_argument_group("geometry", "Gram matrix of (mu, w_K, w_Q); unset entries are 0")
    for name, h in (("snr", "||mu||^2"), ("wk2", "||w_K||^2"), ("wq2", "||w_Q||^2"), ("mu-wk", "mu^T w_K"),
                    ("mu-wq", "mu^T w_Q"), ("wk-wq", "w_K^T w_Q")):
        g.add_argument("--" + name, type=float, default=None, metavar="V", help=h)
    g.add_argument("--aligned", action="store_true", help="w_K = w_Q = mu (all six entries equal --snr)")
    g.add_argument("--gram", default=None, metavar="JSON",
                   help=f"the full (1+2r)x(1+2r) Gram matrix as a JSON list of lists (rank r = {RANK})")
    p.add_argument("--model", choices=("attention", "linear", "both"), default="both",
                   help="which error(s) to compute (default both)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


def _cli_geometry(args):
    named = {k: getattr(args, k) for k in GEOMETRY_KEYS}
    if args.gram is not None:
        if args.aligned or any(v is not None for v in named.values()):
            raise ValueError("invalid --gram: allowed without --aligned and the other geometry flags")
        try:
            return {"gram": json.loads(args.gram)}
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid --gram: not JSON ({exc})") from None
    if args.aligned:
        extra = [k for k in GEOMETRY_KEYS[1:] if named[k] is not None]
        if extra:
            raise ValueError("invalid --aligned: allowed without --" + "/--".join(k.replace("_", "-") for k in extra))
        return aligned(0.0 if named["snr"] is None else named["snr"])
    if RANK != 1 and any(v is not None for v in named.values()):
        raise ValueError(f"invalid geometry flags: this solver has rank {RANK}, use --gram")
    return {k: (0.0 if v is None else v) for k, v in named.items()} if RANK == 1 else {}


def _jsonable(values):
    return [None if not math.isfinite(v) else v for v in np.asarray(values, dtype=float).ravel().tolist()]


def main(argv=None):
    """Command line: print E_attention and E_linear (table or JSON); returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        geometry = _cli_geometry(args)
        gram = geometry.pop("gram", None)
        c = _check_positive("c", args.c, 1e4)
        gamma = _check_positive("gamma", args.gamma, 1e12)
        res = memorization_error(c[:, None], gamma[None, :], model="both" if args.model == "both" else args.model,
                                 gram=gram, **geometry)
    except ConvergenceError as exc:
        print(f"{parser.prog}: error: no convergence: {exc}", file=sys.stderr)
        return 3
    except (ValueError, TypeError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    res = res if isinstance(res, dict) else {args.model: res}
    errs = {f"E_{k}": v for k, v in res.items()}
    data = {"gamma": gamma.tolist()}
    if c.size > 1:
        data["c"] = c.tolist()
    for key in ("E_attention", "E_linear"):
        if key in errs:
            vals = errs[key]
            data[key] = _jsonable(vals[0]) if c.size == 1 else [_jsonable(row) for row in vals]
    data.update({"a1": A1, "nu": NU, "d": D if math.isfinite(D) else None})
    if args.json:
        print(json.dumps(data, allow_nan=False))
        return 0
    print(f"activation {ACTIVATION}: a1 = {A1:.6g}, nu = {NU:.6g}, d = {D:.6g}")
    keys = [k for k in ("E_attention", "E_linear") if k in errs]
    print("  ".join(f"{h:>14}" for h in ["c", "gamma"] + keys))
    for i, cv in enumerate(c):
        for j, gv in enumerate(gamma):
            print("  ".join(f"{v:>14.8g}" for v in [cv, gv] + [float(errs[k][i, j]) for k in keys]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
