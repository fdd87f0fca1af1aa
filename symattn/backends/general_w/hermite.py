r"""Structured Hermite blocks (cubic and quadratic) for the general-W theory of a low-rank W
(docs/theory.md §12.8; the default of ``memorization_error(weights=W)`` for rank W <= min(64, p/4),
chosen by :func:`symattn.backends.general_w_entry.kernel_structure`): the block Dyson equation, its solve
and E_A(γ). The kernel model and its constants are in :mod:`.block_constants`.

**Dyson equation.** A block K_b = (n/√p) D_u Aᵀ M B D_v (A, B: D×n, N(0, 1/n); M = diag(m)) adds four
D-space unknowns to the pencil of §12.2; their L0 is diagonal in α, so the D-blocks invert per
multi-index in closed form and the block's only effect on the n-blocks is

  Σ_xx(i) −= ρv_i² φ_b ĝ_wu,  Σ_uw(i) −= ρu_i² φ_b ĝ_xx,
  φ_b = (1/c) Σ_α m_α² / (1 + (n²/p) ĝ_xx ĝ_wu m_α²),  ĝ_xx = ⟨ρv² G_xx⟩, ĝ_wu = ⟨ρu² G_wu⟩,

i.e. a noise whose variance depends on the resolvent (it tends to the free noise Σm²/c when every
m_α → 0). Without the block and with the Gaussian-equivalent constants this is exactly the solver of
:mod:`symattn.backends.general_w`.

**Solver.** The state (g, and ĝ_xx, ĝ_wu per block) is solved per γ by an Anderson iteration from the
γ → ∞ start, then Newton; F′ by implicit differentiation (one fixed point per γ). For rank W ≤ p/2 the
p-traces are taken in the 2r-dimensional range of W (:class:`~.hoperator.LowRankTraces`, one 2r×2r inverse per
evaluation instead of two p×p ones); the Jacobian's node part is in closed form (dG = −G dL G, one
product over the tokens), its scalar part by complex steps; the token draws are cached per W and μ.

**Signal.** The blocks are independent of y: F comes from the Woodbury step of docs/theory.md §12.3 with
the n-forms of this fixed point; ``signal='latent'`` adds the strong-direction correction of §12.3.

Status: the block Dyson equation is derived; the kernel model (Gaussian blocks with token scales) is a conjecture
checked by Monte Carlo; its constants are derived by quadrature (rest_tau approximated; docs/theory.md §12.8).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ...caching import Memo
from ...errors import ParameterError
from ..fixedpoint import Anderson, Newton, StallRestart, fixed_point
from . import block_constants
from .block_constants import (MAX_BLOCK_RANK, BlockAtoms, block_present, block_total, f_values,
                              hermite_block_constants, index_pairs, index_triples)
from .hoperator import LowRankTraces, low_rank_traces
from .linalg import array_key
from .pencil import U_, W_, X_, general_w_model, p_traces, resolvent_F, sigma_nn, sigma_pp
from .physical import physical_points
from .strong import strong_direction_correction

__all__ = ["hermite_block_error"]

#: token nodes already drawn: (content of W, μ, U, V, ŝ; seed, tokens, scaled blocks) → (q, scales)
TOKEN_NODES = Memo("general_w.token_nodes", 8)
#: the relative residual below which Newton's method replaces the Anderson iteration of the fixed point
NEWTON_SWITCH = 1e-2
#: complex step of the Jacobians and of the implicit derivative
STEP = 1e-20


def _esym(x, k):
    """Elementary symmetric polynomials e_0 … e_k of the columns of x (one per row), by the recursion
    e_j ← e_j + x_a e_{j−1} over the columns a (no cancellation for x ≥ 0)."""
    e = [np.ones(x.shape[0])] + [np.zeros(x.shape[0]) for _ in range(k)]
    for a in range(x.shape[1]):
        xa = x[:, a]
        for j in range(k, 0, -1):
            e[j] += xa * e[j - 1]
    return e


def _scale3(u, s2):
    r"""ρ² = Σ_{|α|=3} ŝ^{2α} Ĥ_α(u)² / Σ_{|α|=3} ŝ^{2α} (rows of u: tokens) in O(r) per token: with x_a = ŝ_a²u_a²,
    y_a = ŝ_a⁴ He2(u_a)²/2, t_a = ŝ_a⁶ He3(u_a)²/6 the three kinds of multi-index give
    e₃(x) + Σ_{d≠s} y_d x_s + Σ_a t_a (the same as the feature sum of :func:`_features`, D = C(r+2, 3) terms)."""
    uu = u * u
    x = s2 * uu
    y = (s2 * s2 / 2) * (uu - 1) ** 2
    t = (s2 ** 3 / 6) * (uu * u - 3 * u) ** 2
    num = _esym(x, 3)[3] + y.sum(1) * x.sum(1) - (y * x).sum(1) + t.sum(1)
    if s2.size <= block_constants.MAX_BLOCK_RANK:   # the switch of block_constants (enumerated weights)
        return num / np.sum(np.prod(s2[index_triples(s2.size)], axis=1))
    # Σ_{a<=b<=c} ŝ_a²ŝ_b²ŝ_c² = h3(ŝ²), the complete homogeneous polynomial (P1³ + 3P1P2 + 2P3)/6, P_k = Σŝ^{2k}
    P1, P2, P3 = (float(np.sum(s2 ** k)) for k in (1, 2, 3))
    return num / ((P1 ** 3 + 3 * P1 * P2 + 2 * P3) / 6)


def _scale2(u, s2):
    r"""ρ² = Σ_{|α|=2} ŝ^{2α} Ĥ_α(u)² / Σ_{|α|=2} ŝ^{2α} = (e₂(ŝ²u²) + Σ_a ŝ_a⁴ He2(u_a)²/2) / Σ_{a≤b} ŝ_a²ŝ_b²."""
    uu = u * u
    num = _esym(s2 * uu, 2)[2] + ((s2 * s2 / 2) * (uu - 1) ** 2).sum(1)
    return num / np.sum(np.prod(s2[index_pairs(s2.size)], axis=1))


def _token_nodes(f, W, k, b1, tokens, seed, mu):
    """Latent token nodes: κ_i = f(q_i)/√p − b1 tr W/p (exact q_i = x_iᵀWx_i/√p, x_i = z_i + y_iμ,
    y_i = ±1) and the scales ρu², ρv² of the T33 and T22 blocks (from the bulk part z_i; closed forms
    :func:`_scale3`, :func:`_scale2`). The draws (q and the scales) are cached per content of
    (W, μ, U, V, ŝ) and (seed, tokens); κ is evaluated per call."""
    p = W.shape[0]
    scaled = tuple(name for name, mw in (("33", k.m33), ("22", k.m22)) if block_present(mw))
    content = tuple(None if a is None else array_key(a) for a in (W, mu, k.U, k.V, k.shat))

    def draw():
        rng = np.random.default_rng(seed + 1)
        Z = rng.standard_normal((tokens, p))
        X = Z + rng.choice([-1.0, 1.0], tokens)[:, None] * mu[None, :]
        q = np.sum((X @ W) * X, axis=1) / math.sqrt(p)
        sc = {}
        if scaled:
            s2 = k.shat * k.shat
            zu, zv = Z @ k.U, Z @ k.V
            for name in scaled:
                fn = _scale3 if name == "33" else _scale2
                sc[name] = (fn(zu, s2), fn(zv, s2))
        return q, sc

    q, sc = TOKEN_NODES.get((content, seed, tokens, scaled), draw)
    kappa = f_values(f, q) / math.sqrt(p) - b1 * float(np.trace(W)) / p
    one = np.ones(tokens)
    return kappa, {name: sc.get(name, (one, one)) for name in ("33", "22")}, np.full(tokens, 1.0 / tokens)


def _node_inputs(m, state, Hop, blocks, dP=None):
    """The scalars through which the state enters the token nodes: y = (Σ_nn row-major (9), then per block
    t_b = φ_b ĝ_wu, u_b = φ_b ĝ_xx), and the p-trace operator used (module docstring; ``Hop`` as in
    :func:`dyson_map`). ``state`` of shape (ns,) or (ns, B); ``dP`` added to the p-traces (:func:`~.pencil.p_traces`)."""
    g = state[:9].reshape((3, 3) + state.shape[1:])
    S = sigma_pp(m, g)
    P, Hop = p_traces(m, S, Hop, dP=dP)
    Snn = sigma_nn(m, P, g)
    y = [Snn[i, j] for i in range(3) for j in range(3)]
    for j, (m2, ru, rv) in enumerate(blocks):
        gxx, gwu = state[9 + 2 * j], state[10 + 2 * j]
        phi = _block_phi(m2, (m.n * m.n / m.p) * gxx * gwu) / m.c
        y += [phi * gwu, phi * gxx]
    return np.array(y), Hop


def _block_phi(m2, x):
    """Σ_α m_α²/(1 + x m_α²) at x (a number or an array of points). Complex steps about one real point
    (|Im x|, the spread of Re x ≤ 1e-12·|x|) are taken as φ(x0) + φ'(x0)(x − x0), φ' = −Σ m⁴/(1 + x0 m²)²
    (exact to O(η²); one sum over the D weights instead of one per point)."""
    x = np.asarray(x)
    x0 = float(np.real(x.flat[0]))
    if isinstance(m2, BlockAtoms):      # Σ_b w_b v_b/(1 + x v_b), φ' = −Σ_b w_b v_b²/(1 + x v_b)²
        v, w = m2.v, m2.w
        if np.ndim(x) == 0 and not np.iscomplexobj(x):
            return np.sum(w * v / (1 + x0 * v))
        if np.max(np.abs(x - x0)) <= 1e-12 * max(abs(x0), 1e-300):
            q = v / (1 + x0 * v)
            return np.sum(w * q) - np.sum(w * q * q) * (x - x0)
        return np.sum(w * v / (1 + x[..., None] * v), axis=-1)
    if np.ndim(x) == 0 and not np.iscomplexobj(x):
        return np.sum(m2 / (1 + x0 * m2))
    if np.max(np.abs(x - x0)) <= 1e-12 * max(abs(x0), 1e-300):
        q = m2 / (1 + x0 * m2)
        return np.sum(q) - np.sum(q * q) * (x - x0)
    return np.sum(m2 / (1 + x[..., None] * m2), axis=-1)


def _node_means(y, z, blocks, nodes, full: bool = False):
    """Φ from the node inputs y (:func:`_node_inputs`): the token means of G_i = L_i^{-1}, L_i = L0(κ_i) − Σ_nn
    + Σ_b (ρv_i² t_b E_xx + ρu_i² u_b E_uw). The L_i differ only in their (x, x), (x, w), (u, x), (u, w)
    entries and are inverted together by the adjugate (holomorphic: complex steps too). With ``full``
    also G (3, 3, tokens) (y real, one point)."""
    kappa, kw = nodes["kappa"], nodes["w"]
    col = lambda x: np.asarray(x)[..., None]    # a scalar per point → broadcast over the nodes (last axis)
    a, f_ = z - col(y[0]), -col(y[5])
    for j, (m2, ru, rv) in enumerate(blocks):
        a = a + rv * col(y[9 + 2 * j])
        f_ = f_ + ru * col(y[10 + 2 * j])
    b, c, e = -col(y[1]), kappa - col(y[2]), 1 - col(y[4])
    d, gg, h, k = -kappa - col(y[3]), -col(y[6]), -col(y[7]), 1 - col(y[8])
    # adjugate of [[a, b, c], [d, e, f], [gg, h, k]] (rows x, u, w)
    adj = [[e * k - f_ * h, c * h - b * k, b * f_ - c * e],
           [f_ * gg - d * k, a * k - c * gg, c * d - a * f_],
           [d * h - e * gg, b * gg - a * h, a * e - b * d]]
    det = a * adj[0][0] + b * adj[1][0] + c * adj[2][0]
    wd = kw / det
    if det.ndim == 1:
        # one point: the 9 + 2·blocks means as one product (9, tokens) × (tokens, 1 + 2·blocks)
        A = np.array(np.broadcast_arrays(*[adj[i][j] for i in range(3) for j in range(3)]))
        Pm = A @ np.array([wd] + [wd * sc for (_, ru, rv) in blocks for sc in (rv, ru)]).T
        out = list(Pm[:, 0])
        for j in range(len(blocks)):
            out += [Pm[3 * X_ + X_, 1 + 2 * j], Pm[3 * W_ + U_, 2 + 2 * j]]
    else:
        out = [np.sum(wd * adj[i][j], axis=-1) for i in range(3) for j in range(3)]
        for (m2, ru, rv) in blocks:
            out += [np.sum(wd * rv * adj[X_][X_], axis=-1), np.sum(wd * ru * adj[W_][U_], axis=-1)]
    if not full:
        return np.array(out)
    inv = 1 / det
    return np.array(out), np.array([[adj[i][j] * inv for j in range(3)] for i in range(3)])


def dyson_map(m, state, z, blocks, nodes, Hop=None, dP=None):
    """One evaluation of the fixed-point map: state = (g 3×3, and per block ĝ_xx, ĝ_wu) → (new state, the
    p-trace operator used). ``state`` of shape (ns,) or (ns, B) (B points at once, with the low-rank traces).
    ``Hop``: the low-rank traces, or an H operator linearised at another point (complex steps); None: a new
    p×p-route H operator at this (real) point. ``dP``: added to the p-traces."""
    y, Hop = _node_inputs(m, state, Hop, blocks, dP)
    return _node_means(y, z, blocks, nodes), Hop


def signal_F(m, state, z, blocks, nodes, Hop=None, dP=None, dforms=None, probes=None):
    """F = ŷᵀ[L_full^{-1}]_xx ŷ at the fixed point: ⟨G_xx⟩, corrected for μ ≠ 0 by the Woodbury step of
    docs/theory.md §12.3 (:func:`~symattn.backends.general_w.resolvent_F`) with the n-forms of this fixed
    point (the blocks are independent of y and add no rank-one piece). Holomorphic in (state, z).
    ``dP``, ``dforms``, ``probes``: as :func:`~symattn.backends.general_w.resolvent_F`."""
    Gbar = dyson_map(m, state, z, blocks, nodes, Hop, dP)[0][:9].reshape(3, 3)
    return resolvent_F(m, state[:9].reshape(3, 3), z, Gbar=Gbar, dforms=dforms, probes=probes)


def _jacobians(m, state, z, blocks, nodes, Hop):
    """Φ(state), ∂Φ/∂state (ns×ns) and ∂Φ/∂z at real (state, z), and the p-trace operator.

    Φ = N(y(s), z) (:func:`_node_means` ∘ :func:`_node_inputs`). The node part in closed form: with
    dG_i = −G_i dL_i G_i, an output o = Σ_i ω_oi G_i[j_o, k_o] (ω = the token weights, times ρv² or ρu² for
    the block outputs) and an input n entering L_i as ν_ni E_{p_n q_n} (Σ_nn: ν = −1; t_b: ρv², (x, x);
    u_b: ρu², (u, w)) give ∂o/∂y_n = −Σ_i ω_oi ν_ni G_i[j_o, p_n] G_i[q_n, k_o]: one (tokens × ~20)ᵀ(tokens × ~20)
    product; ∂Φ/∂z = −∂Φ/∂Σ_xx. The scalar part ∂y/∂s by complex steps (η = :data:`STEP`; all columns at
    once with the low-rank traces, exact; otherwise through the H operator linearised at this point)."""
    y, Hop = _node_inputs(m, state, Hop, blocks)
    out, G = _node_means(y, z, blocks, nodes, full=True)
    w = nodes["w"]
    # left groups (j, ω) and right groups (q, ν); outputs o → (left group, k), inputs n → (p, right group)
    left = [(j, w) for j in range(3)]
    right = [(q, -1.0) for q in range(3)]
    o_grp, o_k = [0, 0, 0, 1, 1, 1, 2, 2, 2], [0, 1, 2] * 3
    n_grp, n_p = [0, 1, 2] * 3, [0, 0, 0, 1, 1, 1, 2, 2, 2]   # Σ_nn[p, q] → right group q
    for (m2, ru, rv) in blocks:
        left += [(X_, w * rv), (W_, w * ru)]
        o_grp += [len(left) - 2, len(left) - 1]
        o_k += [X_, U_]
        right += [(X_, rv), (W_, ru)]
        n_grp += [len(right) - 2, len(right) - 1]
        n_p += [X_, U_]
    A = np.concatenate([G[j] * om for j, om in left])         # (groups·3, tokens): rows ω G[j, p]
    B = np.concatenate([G[q] * nu for q, nu in right])       # (groups·3, tokens): rows ν G[q, k]
    Q = (A @ B.T).reshape(len(left), 3, len(right), 3)
    o_grp, o_k = np.array(o_grp)[:, None], np.array(o_k)[:, None]
    dN = -Q[o_grp, np.array(n_p)[None, :], np.array(n_grp)[None, :], o_k]    # ∂Φ_o/∂y_n
    ns = state.size
    steps = state[:, None] + 1j * STEP * np.eye(ns)
    if isinstance(Hop, LowRankTraces):
        dy = _node_inputs(m, steps, Hop, blocks)[0].imag / STEP
    else:
        dy = np.stack([_node_inputs(m, steps[:, j], Hop, blocks)[0].imag for j in range(ns)], 1) / STEP
    return out, dN @ dy, -dN[:, 0], Hop


def _jacobian(m, state, z, blocks, nodes, Hop):
    """∂Φ/∂state at real (state, z) (:func:`_jacobians`)."""
    return _jacobians(m, state, z, blocks, nodes, Hop)[1]


def _residual(new, state) -> float:
    scale = np.maximum(np.abs(new), 1e-6 * np.max(np.abs(new)))
    return float(np.max(np.abs(new - state) / scale))


def _solve(m, z, blocks, nodes, traces=None, tol=1e-12, maxiter=400, newton: bool = True, state0=None,
           depth=None, restart=None):
    """The fixed point state = Φ(state) at real z = γ from the γ → ∞ start (or from ``state0``, a warm start
    of the γ-continuation): an Anderson-accelerated damped
    iteration (it stays on the physical branch), then, below the relative residual :data:`NEWTON_SWITCH`,
    Newton's method with the Jacobian of :func:`_jacobians` (a step that raises the residual is halved).
    Returns (state, p-trace operator at the state, evaluations, (∂Φ/∂state, ∂Φ/∂z) at the last iterate
    when Newton computed them there, else None). Runs on :func:`~symattn.backends.fixedpoint.fixed_point`:
    ``depth`` the Anderson depth (default 5), ``restart`` the evaluations without a new best residual before a
    :class:`~symattn.backends.fixedpoint.StallRestart` (default None: no restarts)."""
    nb = len(blocks)
    state = np.concatenate([np.diag([1.0 / z, 1.0, 1.0]).ravel(), np.tile([1.0 / z, 1.0], nb)])
    if state0 is not None:
        state = np.array(state0, dtype=float)
    ns = state.size

    def evaluate(state, st):
        # at a fresh Newton point the Jacobians come with the map (the next Newton step uses them)
        if st.action == "newton":
            new, J, Jz, Hop = _jacobians(m, state, z, blocks, nodes, traces)
            return new, (Hop, J, Jz)
        new, Hop = dyson_map(m, state, z, blocks, nodes, traces)
        return new, (Hop, None, None)

    def newton_step(state, new, aux):
        Hop, J, Jz = aux
        r = new - state
        if J is None:
            new, J, Jz, Hop = _jacobians(m, state, z, blocks, nodes, Hop)
        try:
            step = np.linalg.solve(np.eye(ns) - J, r)
        except np.linalg.LinAlgError:
            step = r / 2
        return step, new, (Hop, J, Jz)

    strategies = [Anderson(depth=5 if depth is None else depth, check_finite=True)]
    if newton:
        strategies.append(Newton(newton_step, below=NEWTON_SWITCH, floor=100 * tol, halve="no-decrease",
                                 rearm=False, max_halvings=30, halve_nonfinite=True))
    out = fixed_point(evaluate, state, strategies, tol=tol, residual=_residual, maxiter=maxiter,
                      restart=None if restart is None else StallRestart(restart),
                      name="the cubic-block Dyson iteration", point={"gamma": float(z)})
    Hop, J, Jz = out.aux
    if out.residual >= tol:
        return out.x, Hop, out.iterations, None      # Newton stalled at the rounding floor: the last point
    return out.x, Hop, out.iterations, (None if J is None else (J, Jz))


def _point_implicit(m, z, blocks, nodes, traces, solved=None, extra=None):
    """(F, F') at γ = z: F′ by implicit differentiation of the fixed point s* = Φ(s*, z),
    ds/dz = (I − ∂Φ/∂s)^{-1} ∂Φ/∂z (:func:`_jacobians`), then one complex step of F along (ds/dz, 1)
    (the n-forms Φ(s*)[:9] move by ds/dz[:9], as Φ(s*) = s*). The Jacobians are those of the last Newton
    iterate s_k when the solver has them (s* = Φ(s_k), |s* − s_k| below 1e-12 relative), else taken at s*.
    ``solved``: the output of :func:`_solve` at z when the caller has it; ``extra(z, s*, J, Hop)``: a third
    value returned with (F, F′)."""
    st, Hop, _, jac = _solve(m, z, blocks, nodes, traces) if solved is None else solved
    if jac is None:
        st, J, Jz, Hop = _jacobians(m, st, z, blocks, nodes, Hop)
    else:
        J, Jz = jac
    ds = np.linalg.solve(np.eye(st.size) - J, Jz)
    h = STEP * z
    Gbar = (st[:9] + 1j * h * ds[:9]).reshape(3, 3)
    Fc = resolvent_F(m, (st[:9] + 1j * h * ds[:9]).reshape(3, 3), complex(z, h), Gbar=Gbar)
    if extra is not None:
        return float(np.real(Fc)), float(np.imag(Fc)) / h, extra(z, st, J, Hop)
    return float(np.real(Fc)), float(np.imag(Fc)) / h


def physical_implicit(m, gam, blocks, nodes, traces, extra=None):
    """(F, F') at the points γ with the physical checks and γ-continuation of
    :func:`~symattn.backends.general_w.physical_points` (a point that passes them is :func:`_point_implicit`'s;
    with ``extra``, (F, F', extra) as :func:`_point_implicit`)."""

    def solve(z, start):
        out = _solve(m, z, blocks, nodes, traces, state0=None if start is None else start[0])
        F = signal_F(m, out[0], z, blocks, nodes, traces)
        return out, float(np.real(F)), out[2]

    def evaluate(z, solved):
        out = _point_implicit(m, z, blocks, nodes, traces, solved=solved, extra=extra)
        return -z * z * out[1], out[0], out

    return physical_points(gam, solve, evaluate, name="Hermite-block")[0]


def hermite_block_error(f, c, gamma, W, mu=None, signal: str = "latent", blocks=("33", "31", "22"),
                          token_scales: bool = True,
                          constants=None, tokens: int = 4000, pairs=None, seed: int = 0,
                          rel_step: float = 1e-4, derivative: str = "implicit", max_rank: int = MAX_BLOCK_RANK) -> dict:
    r"""E_A(γ) = −γ² F'(γ) for the kernel model with the structured Hermite blocks (module docstring).

    F(γ) = ⟨G_xx⟩ of the Dyson fixed point s* = Φ(s*, γ) (Anderson, then Newton; to 1e-12); F' by
    implicit differentiation, ds/dγ = (I − ∂Φ/∂s)^{-1} ∂Φ/∂γ with the Jacobians by complex steps
    (η = 1e-20), then F' = ∂F/∂s·ds/dγ + ∂F/∂γ by one complex step (``derivative='implicit'``), or by a
    central difference in γ with relative step ``rel_step`` (three fixed points, ``'central'``).
    For rank W ≤ p/2 the p-traces are taken in the 2r-dimensional range of W (:class:`~.hoperator.LowRankTraces`,
    O(r³) per evaluation), otherwise by the p×p route of :mod:`symattn.backends.general_w`.

    Parameters
    ----------
    f : Activation
    c : float
        p/n.
    gamma : array_like
        γ > 0.
    W : numpy.ndarray
        p×p.
    mu : array_like, optional
        The signal: F by the Woodbury step of docs/theory.md §12.3 on this fixed point.
    signal : {'latent', 'linear'}
        'latent' (default) adds :func:`~symattn.backends.general_w.strong_direction_correction`
        when μ ≠ 0, as general_w_error does; 'linear' does not.
    blocks : tuple of {'33', '31', '22'}
        The structured blocks kept (T33, P31 + P13, T22 when f has an even part); the others are
        folded into the free noise (their variance Σm² added to the remainder).
    token_scales : bool
        Per-token scales ρu², ρv² of the T33 and T22 blocks (latent variables of the token, 4000
        sampled tokens, which also carry the exact diagonal q_i); otherwise the Gauss–Hermite
        diagonal nodes of :mod:`symattn.backends.general_w`.
    constants : HermiteBlockConstants, optional
        Precomputed :func:`hermite_block_constants`.
    tokens, pairs, seed : the sampled latent token nodes (``tokens``, ``seed``); ``pairs`` given: the constants by
        Monte Carlo over that many latent pairs (:func:`~.block_constants.hermite_block_constants`), else by quadrature.
    rel_step : float
        The relative step of ``derivative='central'``.
    derivative : {'implicit', 'central'}
        With 'implicit' every point passes the physical checks of
        :func:`~symattn.backends.general_w.physical_points` (γ-continuation where the cold start fails them).
    max_rank : int
        Without ``constants``: the largest rank whose cubic and quadratic blocks are enumerated
        (:func:`hermite_block_constants`; W.shape[0] for a full-rank W, docs/theory.md §12.9).

    Returns
    -------
    dict
        'E', 'F' (arrays), 'constants'; with the strong-direction correction also 'E_linear' and
        'correction'.

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 8)) @ rng.standard_normal((8, 40))
    >>> out = hermite_block_error(activation("tanh"), 0.5, [1.0], W, pairs=20000, tokens=200)
    >>> bool(0 < out["E"][0] < 1)
    True
    """
    if signal not in ("latent", "linear"):
        raise ParameterError("signal", signal, "'latent' or 'linear'")
    if derivative not in ("implicit", "central"):
        raise ParameterError("derivative", derivative, "'implicit' or 'central'")
    for b in blocks:
        if b not in ("33", "31", "22"):
            raise ParameterError("blocks", b, "a subset of ('33', '31', '22')")
    W = np.asarray(W, dtype=float)
    m, blk, nodes, k = block_model(f, c, W, mu, blocks, token_scales, constants, tokens, pairs, seed, max_rank)
    gam = np.atleast_1d(np.asarray(gamma, dtype=float))
    traces = low_rank_traces(W)
    E, F = [], []
    implicit = physical_implicit(m, gam, blk, nodes, traces) if derivative == "implicit" else None
    for i, g0 in enumerate(gam):
        if derivative == "implicit":
            F0, dF = implicit[i]
        else:
            Fs = []
            for z in (g0 * (1 - rel_step), g0, g0 * (1 + rel_step)):
                st = _solve(m, z, blk, nodes, traces)[0]
                Fs.append(signal_F(m, st, z, blk, nodes, traces))
            F0, dF = Fs[1], (Fs[2] - Fs[0]) / (2 * rel_step * g0)
        F.append(F0)
        E.append(-g0 * g0 * dF)
    out = {"E": np.array(E), "F": np.array(F), "constants": k}
    if signal == "latent" and np.any(m.mu):
        dE = strong_direction_correction(f, m.c, gam, W, m.mu)
        out["E_linear"], out["correction"] = out["E"], dE
        out["E"] = out["E"] + dE
    return out


def block_model(f, c, W, mu=None, blocks=("33", "31", "22"), token_scales: bool = True, constants=None,
                tokens: int = 4000, pairs=None, seed: int = 0, max_rank: int = MAX_BLOCK_RANK):
    r"""The model of :func:`hermite_block_error` (its parameters): (m, blocks, nodes, constants), m the
    :class:`~.pencil.GeneralWModel` of the remainder (a1 = b1, σ² = s_r²/c plus the blocks not kept), blocks
    [(squared weights, ρu², ρv²), …], the token nodes {'kappa', 'w'}.

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 8)) @ rng.standard_normal((8, 40)) / 40
    >>> m, blk, nodes, k = block_model(activation("tanh"), 0.5, W, pairs=20000, tokens=200)
    >>> m.n, len(blk) >= 1, nodes["w"].size
    (80, True, 200)
    """
    W = np.asarray(W, dtype=float)
    k = constants if constants is not None else hermite_block_constants(f, W, pairs=pairs, seed=seed, max_rank=max_rank)
    m0 = general_w_model(f, c, W, mu, signal="linear")
    rest = k.rest_var
    blk = []
    if token_scales and (("33" in blocks and k.m33 is not None) or ("22" in blocks and k.m22 is not None)):
        kappa, sc, w = _token_nodes(f, W, k, k.b1, tokens, seed, m0.mu)
    else:
        # the Gauss–Hermite diagonal nodes of general_w, with the slope b1
        kappa = m0.kappa + (m0.a1 - k.b1) * float(np.trace(W)) / W.shape[0]
        w = m0.kw
        sc = {}
    one = np.ones(w.size)
    for name, mw in (("33", k.m33), ("31", k.m31), ("22", k.m22)):
        if mw is None or mw.size == 0:
            continue
        if name in blocks:
            ru, rv = sc.get(name, (one, one))
            blk.append((mw if isinstance(mw, BlockAtoms) else mw * mw, ru, rv))
        else:
            rest += block_total(mw)
    tau = k.rest_tau * k.rest_var / rest
    m = replace(m0, a1=k.b1, sigma2=rest / m0.c, tau=tau)
    nodes = {"kappa": kappa, "w": w}
    return m, blk, nodes, k


def block_phi(m2, x):
    r"""φ(x) = Σ_α m_α²/(1 + x m_α²) of a block's squared weights (an array or :class:`BlockAtoms`) at x:
    the resolvent-dependent variance of a Gaussian block (module docstring; complex steps as :func:`_block_phi`).

    Examples
    --------
    >>> float(block_phi(np.array([1.0, 3.0]), 0.0)), float(block_phi(np.array([1.0]), 1.0))
    (4.0, 0.5)
    """
    return _block_phi(m2, x)


def token_scales(k, Z):
    r"""The per-token scales (ρu², ρv²) of the T33 and T22 blocks of the constants ``k`` for the tokens Z (rows,
    the bulk part z_i): ρu_i² = Σ_α m_α²Ĥ_α(Uᵀz_i)²/Σ_α m_α² and ρv_i² with V (closed forms :func:`_scale3`,
    :func:`_scale2`); a dict {'33': (ρu², ρv²), '22': …} over the blocks that ``k`` enumerates.

    Examples
    --------
    >>> from symattn import activation
    >>> W = np.diag([1.0, 1.0, 0.0, 0.0]) * np.sqrt(2.0)
    >>> k = hermite_block_constants(activation("tanh"), W, pairs=2000)
    >>> ru, rv = token_scales(k, np.random.default_rng(0).standard_normal((20000, 4)))["33"]
    >>> bool(abs(ru.mean() - 1) < 0.05), sorted(token_scales(k, np.zeros((1, 4))))
    (True, ['33'])
    """
    s2 = k.shat * k.shat
    zu, zv = Z @ k.U, Z @ k.V
    out = {}
    for name, mw in (("33", k.m33), ("22", k.m22)):
        if block_present(mw):
            fn = _scale3 if name == "33" else _scale2
            out[name] = (fn(zu, s2), fn(zv, s2))
    return out


def block_model_error(m, gamma, blocks, nodes) -> np.ndarray:
    r"""E_A(γ) = −γ²F'(γ) of a kernel model ``m`` (a :class:`~.pencil.GeneralWModel`, its a1, σ², τ those of the
    remainder) with the given blocks [(squared weights, ρu², ρv²), …] and token nodes {'kappa', 'w'}: the solver of
    :func:`hermite_block_error` (physical checks and γ-continuation included) for a model built elsewhere, e.g.
    the sum of several heads, whose blocks are the union of the heads' blocks (docs/theory.md §13.2).

    Examples
    --------
    >>> from symattn import activation
    >>> from .pencil import general_w_model
    >>> W = np.diag([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]) * 2.0
    >>> m = general_w_model(activation("tanh"), 0.5, W)
    >>> E = block_model_error(m, [1.0], [(np.full(4, 0.01), np.ones(3), np.ones(3))],
    ...                       {"kappa": np.zeros(3), "w": np.full(3, 1 / 3)})
    >>> bool(0 < E[0] < 1)
    True
    """
    gam = np.atleast_1d(np.asarray(gamma, dtype=float))
    out = physical_implicit(m, gam, list(blocks), nodes, low_rank_traces(m.W))
    return np.array([-g * g * dF for g, (_, dF) in zip(gam, out)])
