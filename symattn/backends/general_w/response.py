r"""The linear response of the general-W pencil (docs/theory.md §12.2) and of the Hermite-block pencil (§12.8)
to a p-space shift, and with it the readout's first and second moments (docs/theory.md §14.9).

**The shift.** Q(t) = (γ + KᵀYᵀ(I − tA)YK)^{-1} for a p×p matrix A. Since β = YKQŷ (the v-block of the
pencil's solution with ŷ in the x-row), dF/dt = ŷᵀQKᵀYᵀAYKQŷ = βᵀAβ at t = 0. In the pencil the shift is
v = (I − tA)Yu: one deterministic p-block, so only the nine p-traces P_jk = tr_p 𝒢[j, k] (j ∈ {l, g, v}, k ∈
{t, v, h}) and the p-p forms μᵀ𝒢[j, k]μ of the Woodbury step move, at fixed self-energies by

    ∂P_jk/∂t = −tr_p(𝒢[j, v] A 𝒢[v, k]),    ∂(μᵀ𝒢[j, k]μ)/∂t = −μᵀ𝒢[j, v] A 𝒢[v, k]μ.

**The implicit function theorem** on the converged fixed point s* = Φ(s*; P) gives ds = (I − J)^{-1}∂Φ/∂P·dP,
so dF/dt = Σ_jk c_jk ∂P_jk/∂t + Σ_jk d_jk ∂(μᵀ𝒢[j, k]μ)/∂t with nine scalars c_jk = ∂F/∂s·(I − J)^{-1}∂Φ/∂P_jk
+ ∂F/∂P_jk and nine d_jk = ∂F/∂(μᵀ𝒢[j, k]μ) (complex steps, η = 1e-20: one linear solve with the solver's
own I − J per trace, not finite differences). Both are linear in A, so they define one p×p matrix

    𝓑 = −(1/p) Σ_k 𝒢[v, k](Σ_j c_jk 𝒢[j, v]) − Σ_jk d_jk (𝒢[v, k]μ)(𝒢[j, v]ᵀμ)ᵀ,   βᵀAβ ≃ tr(A𝓑),

the deterministic equivalent of ββᵀ (four p×p block responses per γ; every A at the cost of a trace).
The mean β̄ (βᵀv ≃ β̄ᵀv) is the Woodbury term of :func:`~.pencil.resolvent_F` with v in the v-row.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import hermite
from .hoperator import HOperator
from .linalg import model_arith
from .pencil import p_response, coefficient_matrix, general_w_model, pencil_map, resolvent_F, sigma_pp
from .physical import model_error

__all__ = ["ReadoutMoments", "readout_moments", "model_readout", "general_w_readout", "block_readout",
           "hermite_block_readout", "TRACE_KEYS"]

#: the p-traces P_jk of :func:`~.pencil.p_traces` that the shift moves (j ∈ {l, g, v}, k ∈ {t, v, h})
TRACE_KEYS = tuple(j + k for j in "lgv" for k in "tvh")
#: complex step of the response
STEP = 1e-20


@dataclass
class ReadoutMoments:
    """The readout's moments at one γ: F, the mean β̄ (p), the second moment 𝓑 ≃ E[ββᵀ] as its bulk part
    ``B_bulk`` (on ``W_bulk``: W itself, or the 2×2 identity that stands for the p → ∞ traces of W = I +
    low rank, ``limit=True``) plus the signal part ``B_mu`` on ``W`` (zero when the bulk is on W itself:
    then ``B_bulk`` is all of 𝓑). βᵀAβ ≃ tr(A(W_bulk) B_bulk) + tr(A(W) B_mu) (:meth:`quad`)."""

    F: float
    beta: np.ndarray
    B_bulk: np.ndarray
    W_bulk: np.ndarray
    B_mu: np.ndarray
    W: np.ndarray = None

    def quad(self, A):
        """βᵀAβ for A = ``A(W)`` (a callable of the weight matrix, e.g. ``lambda W: W @ W.T``).

        Examples
        --------
        >>> r = ReadoutMoments(1.0, np.zeros(2), np.eye(2) / 2, np.eye(2), np.zeros((2, 2)))
        >>> float(r.quad(lambda W: W))
        1.0
        """
        bulk = float(np.sum(A(self.W_bulk).T * self.B_bulk))
        return bulk + float(np.sum(A(self.W).T * self.B_mu)) if np.any(self.B_mu) else bulk


def readout_moments(m, z, state, J, phi, Fn, H=None) -> ReadoutMoments:
    r"""The readout moments (β̄, 𝓑) at a converged fixed point (module docstring).

    Parameters
    ----------
    m : GeneralWModel
    z : float
        γ.
    state : numpy.ndarray
        The fixed point s* (flat; its first nine entries the 3×3 n-traces g).
    J : numpy.ndarray
        ∂Φ/∂s at s*.
    phi : callable
        ``phi(s, dP)``: the Dyson map with the p-traces shifted by dP (flat, holomorphic).
    Fn : callable
        ``Fn(s, dP, dforms, probes)``: F by the Woodbury step (:func:`~.pencil.resolvent_F`).
    H : operator, optional
        The p×p operator H = B2^{-1} on ``m.W_traces`` at s* (default: a new :class:`~.hoperator.HOperator`).

    Returns
    -------
    ReadoutMoments

    Examples
    --------
    >>> from symattn import activation
    >>> W = np.eye(20) + np.outer(np.ones(20), np.ones(20)) / 20
    >>> r = general_w_readout(activation("tanh"), 0.5, [1.0], W)["moments"][0]
    >>> bool(abs(r.quad(lambda W: np.eye(W.shape[0])) - r.B_bulk.trace()) < 1e-12)
    True
    """
    ar = model_arith(m)
    state = np.asarray(state, dtype=float)
    g = state[:9].reshape(3, 3)
    S = sigma_pp(m, g)
    C = ar.real(coefficient_matrix(S)[1])
    I_J = np.eye(state.size) - J
    c = {}
    for key in TRACE_KEYS:
        dP = {key: 1j * STEP}
        v = np.linalg.solve(I_J, np.imag(np.asarray(phi(state, dP))).ravel() / STEP)
        c[key] = float(np.imag(Fn(state + 1j * STEP * v, dP, None, None))) / STEP
    has_mu = bool(np.any(m.mu))
    d = {}
    if has_mu:
        for key in TRACE_KEYS:
            d[key] = float(np.imag(Fn(state, None, {(key[0], key[1]): 1j * STEP}, None))) / STEP
    p = m.p
    F, beta = Fn(state, None, None, np.eye(p))

    def blocks(mm, Hm):
        eye = np.eye(mm.W.shape[0])
        out = {k: p_response(mm, S, Hm, {k: eye}) for k in "tvh"}
        return {k: out[k]["v"] for k in "tvh"}, {j: out["v"][j] for j in "lgv"}

    mt = m if m.W_traces is m.W else replace(m, W=m.W_traces, p=m.W_traces.shape[0], mu=np.zeros(m.W_traces.shape[0]))
    Ht = H if H is not None else HOperator(mt.W, C, ar=ar)
    Gvk, Gjv = blocks(mt, Ht)
    pt = mt.W.shape[0]
    B_bulk = -sum(Gvk[k] @ sum(c[j + k] * Gjv[j] for j in "lgv") for k in "tvh") / pt
    B_mu = np.zeros((p, p))
    if has_mu:
        if mt is not m:
            Gvk, Gjv = blocks(m, HOperator(m.W, C, ar=ar))
        a = {k: Gvk[k] @ m.mu for k in "tvh"}
        b = {j: m.mu @ Gjv[j] for j in "lgv"}
        B_mu = -sum(d[j + k] * np.outer(a[k], b[j]) for j in "lgv" for k in "tvh")
    if mt is m:
        B_bulk, B_mu = B_bulk + B_mu, np.zeros((p, p))
    return ReadoutMoments(F=float(np.real(F)), beta=np.real(np.asarray(beta, dtype=complex)), B_bulk=B_bulk,
                          W_bulk=mt.W, B_mu=B_mu, W=m.W)


def _pencil_calls(m, z, Hop):
    """(phi, Fn) of the free-noise pencil (:mod:`.pencil`) at γ = z."""
    def phi(s, dP):
        return pencil_map(m, s.reshape(3, 3), z, Hop, dP=dP)[0]

    def Fn(s, dP, dforms, probes):
        return resolvent_F(m, s.reshape(3, 3), z, Hop, None, dP=dP, dforms=dforms, probes=probes)

    return phi, Fn


def model_readout(m, gamma) -> dict:
    r"""E_A(γ) and the readout moments (β̄, 𝓑) of a free-noise :class:`~.pencil.GeneralWModel` ``m`` (one W, or the
    summed heads of docs/theory.md §13.2): :func:`~.physical.model_error` with :func:`readout_moments` at each
    accepted fixed point (docs/theory.md §14.9).

    Returns
    -------
    dict
        'E', 'F' (arrays), 'moments' (a list of :class:`ReadoutMoments`), 'model'.

    Examples
    --------
    >>> from symattn import activation
    >>> out = model_readout(general_w_model(activation("tanh"), 0.5, np.eye(16)), [0.1, 1.0])
    >>> [bool(abs(r.quad(lambda W: np.eye(16)) - (F - E / g)) < 1e-12)     # tr 𝓑 = ‖β‖² = F − E/γ
    ...  for r, F, E, g in zip(out["moments"], out["F"], out["E"], [0.1, 1.0])]
    [True, True]
    """
    def extra(z, g, J, Hop):
        phi, Fn = _pencil_calls(m, z, Hop)
        return readout_moments(m, float(z), np.asarray(g, dtype=float).ravel(), J, phi, Fn)

    out = model_error(m, gamma, extra=extra)
    return {"E": np.asarray(out["E"], dtype=float), "F": np.asarray(out["F"], dtype=float),
            "moments": out["extra"], "model": m}


def general_w_readout(f, c, gamma, W, mu=None, diagonal: str = "f", limit: bool = False) -> dict:
    r"""E_A(γ) and the readout moments (β̄, 𝓑) of the free-noise general-W theory of one W (docs/theory.md
    §12.1–12.3, §14.9; the Gaussian-equivalent value, ``signal='linear'``): :func:`model_readout` of
    :func:`~.pencil.general_w_model`.

    Parameters
    ----------
    f : Activation
    c : float
    gamma : array_like
    W : numpy.ndarray
    mu : array_like, optional
    diagonal : {'f', 'zero'}
    limit : bool
        The p → ∞ form for W = I + finite rank (docs/theory.md §12.4).

    Returns
    -------
    dict
        As :func:`model_readout`.

    Examples
    --------
    >>> from symattn import activation
    >>> out = general_w_readout(activation("tanh"), 0.5, [1.0], np.eye(16), mu=np.ones(16) / 4)
    >>> bool(out["moments"][0].beta @ np.ones(16) > 0)       # the readout leans towards the signal
    True
    """
    return model_readout(general_w_model(f, c, W, mu, signal="linear", diagonal=diagonal, limit=limit), gamma)


def block_readout(m, gamma, blocks, nodes) -> dict:
    r"""E_A(γ) and the readout moments (β̄, 𝓑) of a Hermite-block model (the remainder's
    :class:`~.pencil.GeneralWModel` ``m``, the blocks [(squared weights, ρu², ρv²), …] and the token nodes
    {'kappa', 'w'}: :func:`~.hermite.block_model`, or the summed heads of docs/theory.md §13.2), by the solver of
    :func:`~.hermite.hermite_block_error` with :func:`readout_moments` at each accepted point (``signal='linear'``).

    Returns
    -------
    dict
        'E', 'F' (arrays), 'moments' (a list of :class:`ReadoutMoments`), 'model', 'blocks', 'nodes'.

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 6)) @ rng.standard_normal((6, 40)) / 40
    >>> m, blk, nodes, _ = hermite.block_model(activation("tanh"), 0.5, W, pairs=20000, tokens=200)
    >>> out = block_readout(m, [1.0], blk, nodes)
    >>> r = out["moments"][0]
    >>> bool(abs(r.quad(lambda W: np.eye(40)) - (out["F"][0] - out["E"][0])) < 1e-8)
    True
    """
    traces = hermite.low_rank_traces(m.W)
    blocks = list(blocks)

    def extra(z, st, J, Hop):
        def phi(s, dP):
            return hermite.dyson_map(m, s, z, blocks, nodes, Hop, dP)[0]

        def Fn(s, dP, dforms, probes):
            return hermite.signal_F(m, s, z, blocks, nodes, Hop, dP=dP, dforms=dforms, probes=probes)

        return readout_moments(m, float(z), st, J, phi, Fn, H=traces)

    gam = np.atleast_1d(np.asarray(gamma, dtype=float))
    vals = hermite.physical_implicit(m, gam, blocks, nodes, traces, extra=extra)
    return {"E": np.array([-z * z * v[1] for z, v in zip(gam, vals)]), "F": np.array([v[0] for v in vals]),
            "moments": [v[2] for v in vals], "model": m, "blocks": blocks, "nodes": nodes}


def hermite_block_readout(f, c, gamma, W, mu=None, **kw) -> dict:
    r"""E_A(γ) and the readout moments (β̄, 𝓑) of the Hermite-block theory of one W (docs/theory.md §12.8, §14.9),
    ``signal='linear'``: :func:`block_readout` of :func:`~.hermite.block_model` (keywords as there).

    Returns
    -------
    dict
        As :func:`block_readout`, and 'constants'.

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 6)) @ rng.standard_normal((6, 40)) / 40
    >>> out = hermite_block_readout(activation("tanh"), 0.5, [0.1, 1.0], W, pairs=20000, tokens=200)
    >>> bool(np.all(np.diff(out["E"]) > 0))
    True
    """
    m, blk, nodes, k = hermite.block_model(f, c, np.asarray(W, dtype=float), mu, **kw)
    return dict(block_readout(m, gamma, blk, nodes), constants=k)
