r"""Structured Hermite blocks (cubic and quadratic) for the general-W theory of a low-rank W
(docs/theory.md §12.8; the default of ``memorization_error(weights=W)`` for rank W <= min(64, p/4),
chosen by :func:`symattn.backends.general_w_entry.kernel_structure`).

For a low-rank W = U S Vᵀ (rank r), the off-diagonal argument is ξ_ij = u_iᵀ S v_j/√p with
u_i = Uᵀz_i, v_i = Vᵀz_i ∈ R^r, and x = ξ/√ω = Σ_a ŝ_a u_ia v_ja (ŝ = S/√(pω), Σŝ² = 1). The cubic
Hermite polynomial splits exactly into Wiener chaoses of (u_i, v_j) (i ≠ j, independent):

  He3(x) = P33 + P31 + P13 + P11,
  P31 = 3 Σ_c ŝ_c w_c(u) v_c,  P13 = 3 Σ_c ŝ_c u_c w_c(v),  w_c(u) = Σ_a ŝ_a² H_aac(u),  P11 = 6 Σ_a ŝ_a³ u_a v_a,
  P33/√6 = Σ_{|α|=3} m_α Ĥ_α(u) Ĥ_α(v),  m_α = √6 ŝ^α  (D = C(r+2, 3) multi-indices).

Likewise He2(x) = P22 + P20 + P02, P22/√2 = Σ_{|α|=2} √2 ŝ^α Ĥ_α(u)Ĥ_α(v) (C(r+1, 2) indices),
P20 = Σ_a ŝ_a²(v_a² − 1), P02 the same in u (a row and a column pattern: rank one each).

**Kernel model** (the one that kernel-level Monte Carlo found to be close to the exact kernel):

  √p K_ij = b0 + b1 ξ_ij + b3·T33_ij + b31·(P31 + P13)_ij [+ b2·T22_ij + b20·(P20 + P02)_ij] + s_r N_ij,
  √p K_ii = f(x_iᵀWx_i/√p),

the bracket only when f has an even part (a2 ≠ 0; the rank-one P20 + P02 terms are fitted but then
dropped: at μ = 0 a rank-one term with a vector independent of y does not change F, as the mean b0),
with the coefficients the L² projections of f(ξ_ij) on (1, ξ, T33 = P33/√6, P31 + P13, …) under the exact
law of (u_i, v_j) (:func:`hermite_block_constants`, Monte Carlo over latent pairs with a fixed seed),
s_r², τ_r the variance and transpose correlation of the remainder. The two structured parts are
replaced by products of independent Gaussian feature matrices, ρ^u_i ρ^v_j Σ_α m_α A_αi B_αj, with the
per-token scales ρ^u_i² = Σ_α m_α² Ĥ_α(u_i)²/Σ_α m_α² (and ρ^v; for T33 and T22, not for the rank-2r
P31 + P13 block) kept as latent variables of the token
(they carry the non-Gaussianity of the Hermite features: with them Gaussian features give the same
E_A as the real ones, by kernel-level Monte Carlo).

**Dyson equation.** A block K_b = (n/√p) D_u Aᵀ M B D_v (A, B: D×n, N(0, 1/n); M = diag(m)) adds four
D-space unknowns to the pencil of §12.2; their L0 is diagonal in α, so the D-blocks invert per
multi-index in closed form and the block's only effect on the n-blocks is

  Σ_xx(i) −= ρv_i² φ_b ĝ_wu,  Σ_uw(i) −= ρu_i² φ_b ĝ_xx,
  φ_b = (1/c) Σ_α m_α² / (1 + (n²/p) ĝ_xx ĝ_wu m_α²),  ĝ_xx = ⟨ρv² G_xx⟩, ĝ_wu = ⟨ρu² G_wu⟩,

i.e. a noise whose variance depends on the resolvent (it tends to the free noise Σm²/c when every
m_α → 0). Without the block and with the Gaussian-equivalent constants this is exactly the solver of
:mod:`symattn.backends.general_w`.

**Signal.** The blocks are independent of y: F comes from the Woodbury step of docs/theory.md §12.3 with
the n-forms of this fixed point; ``signal='latent'`` adds the strong-direction correction of §12.3.

Status: the block Dyson equation is derived; the kernel model (Gaussian blocks with token scales,
constants by Monte Carlo over latent pairs) is a conjecture checked by Monte Carlo (docs/theory.md §12.8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..errors import ConvergenceError, ParameterError
from ..model import weight_rank
from ..gauss import gauss_hermite
from .general_w import (X_, U_, W_, _p_traces, _sigma_nn, _sigma_pp, general_w_model, resolvent_F,
                        strong_direction_correction)

__all__ = ["HermiteBlockConstants", "hermite_block_constants", "hermite_block_error"]

#: a multi-index sum over the cubic block is enumerated only up to this rank (above, the block is free noise)
MAX_BLOCK_RANK = 64
#: latent pairs per chunk of the Monte Carlo of the constants
CHUNK = 20_000


@dataclass
class HermiteBlockConstants:
    """Projections of f(ξ_ij) under the exact law (module docstring) and the block weights.

    Attributes
    ----------
    b0, b1, b3, b31, b2, b20 : float
        Coefficients of 1, ξ, T33, P31 + P13, T22, P20 + P02 (the last two 0 for an odd f).
    rest_var, rest_tau : float
        Variance s_r² and transpose correlation τ_r of the remainder.
    m33, m31, m22 : numpy.ndarray or None
        Block weights m_α (None when a block is not enumerated, rank > MAX_BLOCK_RANK, or f is odd).
    rank, shat, omega, U, V
        r, ŝ = S/√(pω), ω = ‖W‖_F²/p and the singular vectors of W.

    Examples
    --------
    >>> from symattn import activation
    >>> W = np.diag([1.0, 1.0, 0.0, 0.0]) * np.sqrt(2.0)
    >>> k = hermite_block_constants(activation("tanh"), W, pairs=20000)
    >>> k.rank, k.m33.size, k.m22 is None
    (2, 4, True)
    """

    b0: float
    b1: float
    b3: float
    b31: float
    rest_var: float
    rest_tau: float
    m33: np.ndarray
    m31: np.ndarray
    rank: int
    shat: np.ndarray
    omega: float
    U: np.ndarray
    V: np.ndarray
    b2: float = 0.0
    b20: float = 0.0
    m22: np.ndarray = None


def _fnum(f, x):
    return np.asarray(f.numpy(x), dtype=float)


def _svd(W):
    p = W.shape[0]
    U, S, Vt = np.linalg.svd(W)
    r = weight_rank(W, S)
    omega = float(np.sum(W * W)) / p
    return U[:, :r], S[:r] / math.sqrt(p * omega), Vt[:r].T, omega


def _triples(r):
    a, b, c = np.meshgrid(np.arange(r), np.arange(r), np.arange(r), indexing="ij")
    keep = (a <= b) & (b <= c)
    return np.stack([a[keep], b[keep], c[keep]], 1)


def _features(u, idx):
    """Normalised degree-3 Hermite features Ĥ_α(u) (rows of u: tokens; idx: sorted triples)."""
    a, b, c = idx.T
    out = np.empty((u.shape[0], len(idx)))
    h2 = (u * u - 1) / math.sqrt(2)
    h3 = (u**3 - 3 * u) / math.sqrt(6)
    dis = (a != b) & (b != c)
    ab = (a == b) & (b != c)
    bc = (a != b) & (b == c)
    aaa = (a == b) & (b == c)
    out[:, dis] = u[:, a[dis]] * u[:, b[dis]] * u[:, c[dis]]
    out[:, ab] = h2[:, a[ab]] * u[:, c[ab]]
    out[:, bc] = u[:, a[bc]] * h2[:, b[bc]]
    out[:, aaa] = h3[:, a[aaa]]
    return out


def _w31(u, s2):
    """w_c(u) = Σ_a ŝ_a² H_aac(u) (tokens × r)."""
    A = (u * u - 1) @ s2
    return A[:, None] * u - s2 * (u * u - 1) * u + s2 * (u**3 - 3 * u)


def _chaos_parts(u, v, shat):
    """x, T33 = P33/√6, P31 + P13, T22 = P22/√2 and P20 + P02 for pairs (rows of u and v)."""
    s2 = shat * shat
    x = (u * v) @ shat
    p31 = 3 * np.sum(_w31(u, s2) * shat * v, 1) + 3 * np.sum(u * shat * _w31(v, s2), 1)
    p11 = 6 * (u * v) @ shat**3
    p33 = x**3 - 3 * x - p31 - p11
    p20 = (v * v - 1) @ s2 + (u * u - 1) @ s2
    p22 = x * x - 1 - p20
    return x, p33 / math.sqrt(6), p31, p22 / math.sqrt(2), p20


def _pairs(r):
    a, b = np.meshgrid(np.arange(r), np.arange(r), indexing="ij")
    keep = a <= b
    return np.stack([a[keep], b[keep]], 1)


def _features2(u, idx):
    """Normalised degree-2 Hermite features Ĥ_α(u) (idx: sorted pairs)."""
    a, b = idx.T
    out = u[:, a] * u[:, b]
    d = a == b
    out[:, d] = (u[:, a[d]] ** 2 - 1) / math.sqrt(2)
    return out


def hermite_block_constants(f, W, pairs=None, seed: int = 0, max_rank: int = MAX_BLOCK_RANK) -> HermiteBlockConstants:
    r"""Coefficients of f(ξ) on (1, ξ, T33, P31 + P13[, T22, P20 + P02]) and the remainder, by Monte Carlo
    over latent pairs.

    Token i has (u_i, v_i) jointly Gaussian, Cov(u) = Cov(v) = I_r, Cov(u_i, v_i) = O = UᵀV; for a pair
    (i, j) the entries ξ_ij = √ω Σ_a ŝ_a u_ia v_ja and ξ_ji are formed. The regressors lie in distinct
    chaoses, so b_j = E[f X_j]/E[X_j²] with the exact E[X_j²] (E ξ² = ω, E T33² = 1 + 3p₂ + 2p₃,
    E (P31 + P13)² = 18 Σ_c ŝ_c²(2p₂ + 4ŝ_c⁴), E T22² = 1 + p₂, E (P20 + P02)² = 4p₂, p_k = Σŝ^{2k}) and
    E[f X_j] sampled; rest_var = E f² − Σ_j b_j² E[X_j²], rest_tau the (i, j)/(j, i) correlation of the
    remainder.

    Parameters
    ----------
    f : Activation
    W : numpy.ndarray
        p×p.
    pairs : int, optional
        Monte Carlo pairs (the standard error of the constants is about 1/√pairs relative); default
        500 000 for rank ≤ max_rank, 50 000 above (where the pairs cost O(r) each and no block is enumerated).
    seed : int
    max_rank : int
        The cubic block's weights are enumerated (C(r+2, 3) of them) only for rank ≤ max_rank;
        otherwise T33 is folded into the remainder noise (m33 = None).

    Returns
    -------
    HermiteBlockConstants

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 8)) @ rng.standard_normal((8, 40))
    >>> k = hermite_block_constants(activation("tanh"), W, pairs=20000)
    >>> k.rank, k.m33.size
    (8, 120)
    """
    W = np.asarray(W, dtype=float)
    U, shat, V, omega = _svd(W)
    r = shat.size
    if pairs is None:
        pairs = 500_000 if r <= max_rank else 50_000
    O = U.T @ V
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(np.eye(r) - O.T @ O + 1e-12 * np.eye(r))

    def tokens(k):
        u = rng.standard_normal((k, r))
        return u, u @ O + rng.standard_normal((k, r)) @ L.T

    so = math.sqrt(omega)
    blocks = r <= max_rank
    xg, wg = gauss_hermite(64)
    even = abs(float(wg @ (_fnum(f, so * xg) * (xg * xg - 1)))) > 1e-9   # a2 ≠ 0: the degree-2 parts too
    names = ["1", "xi"] + (["t33"] if blocks else []) + ["t31"] + ((["t22"] if blocks else []) + ["t20"] if even else [])
    k = len(names)
    # moments over pairs: E[X Xᵀ], E[X f], E[f²] (both orientations pooled), E[X X'ᵀ], E[X f'], E[f f']
    XX = np.zeros((k, k)); Xf = np.zeros(k); ff = 0.0
    XXt = np.zeros((k, k)); Xft = np.zeros(k); fft = 0.0
    done = 0
    while done < pairs:
        kk = min(CHUNK, pairs - done)
        ui, vi = tokens(kk)
        uj, vj = tokens(kk)
        cols = []
        fs = []
        for (a, b_) in ((ui, vj), (uj, vi)):      # entries (i, j) and (j, i)
            x, t33, t31, t22, t20 = _chaos_parts(a, b_, shat)
            d = {"1": np.ones_like(x), "xi": so * x, "t33": t33, "t31": t31, "t22": t22, "t20": t20}
            cols.append(np.stack([d[nm] for nm in names], 1))
            fs.append(_fnum(f, so * x))
        A1, A2 = cols
        f1, f2 = fs
        XX += A1.T @ A1 + A2.T @ A2
        Xf += A1.T @ f1 + A2.T @ f2
        ff += float(f1 @ f1 + f2 @ f2)
        XXt += A1.T @ A2 + A2.T @ A1
        Xft += A1.T @ f2 + A2.T @ f1
        fft += 2 * float(f1 @ f2)
        done += kk
    N = 2 * pairs
    XX, Xf, ff, XXt, Xft, fft = XX / N, Xf / N, ff / N, XXt / N, Xft / N, fft / N
    # the regressors lie in distinct Wiener chaoses of (u_i, v_j): their Gram matrix is diagonal and
    # known exactly (p_k = Σ ŝ^{2k}); only the projections E[f X_j] are sampled (the sampled Gram of
    # the degree-6 regressors is heavy-tailed and would add most of the Monte Carlo error)
    p2, p3 = float(np.sum(shat**4)), float(np.sum(shat**6))
    s4c = 2 * p2 + 4 * shat**4                      # E w_c(u)²
    gram = {"1": 1.0, "xi": omega, "t33": 1 + 3 * p2 + 2 * p3, "t31": 18 * float(np.sum(shat**2 * s4c)),
            "t22": 1 + p2, "t20": 4 * p2}
    G = np.array([gram[nm] for nm in names])
    b = Xf / G
    rv = ff - float(np.sum(b * b * G))
    rt = (fft - 2 * b @ Xft + b @ XXt @ b) / rv
    bd = dict(zip(names, (float(v) for v in b)))
    b0, b1, b31 = bd["1"], bd["xi"], bd["t31"]
    b3, b2, b20 = bd.get("t33", 0.0), bd.get("t22", 0.0), bd.get("t20", 0.0)
    m33 = b3 * math.sqrt(6) * np.prod(shat[_triples(r)], axis=1) if blocks else None
    m22 = b2 * math.sqrt(2) * np.prod(shat[_pairs(r)], axis=1) if blocks and even else None
    s4 = float(np.sum(shat**4))
    sig_w = np.sqrt(2 * s4 + 4 * shat**4)     # E w_c(u)² = 2 Σ_a ŝ_a⁴ + 4 ŝ_c⁴
    m31 = np.concatenate([3 * b31 * shat * sig_w] * 2)
    return HermiteBlockConstants(b0=b0, b1=b1, b3=b3, b31=b31, rest_var=rv, rest_tau=min(max(rt, -1.0), 1.0),
                               m33=m33, m31=m31, rank=r, shat=shat, omega=omega, U=U, V=V,
                               b2=b2, b20=b20, m22=m22)


def _token_nodes(f, W, k, b1, tokens, seed, scales, mu):
    """Latent token nodes: κ_i = f(q_i)/√p − b1 tr W/p (exact q_i = x_iᵀWx_i/√p, x_i = z_i + y_iμ,
    y_i = ±1) and the scales ρu², ρv² of the T33 and T22 blocks (from the bulk part z_i)."""
    p = W.shape[0]
    rng = np.random.default_rng(seed + 1)
    Z = rng.standard_normal((tokens, p))
    X = Z + rng.choice([-1.0, 1.0], tokens)[:, None] * mu[None, :]
    q = np.einsum("ip,pq,iq->i", X, W, X) / math.sqrt(p)
    kappa = _fnum(f, q) / math.sqrt(p) - b1 * float(np.trace(W)) / p
    sc = {}
    for name, mw, feat, idx in (("33", k.m33, _features, _triples), ("22", k.m22, _features2, _pairs)):
        if scales and mw is not None and np.any(mw):
            m2 = mw * mw
            ii = idx(k.rank)
            # in chunks of tokens: the feature matrix is tokens × D
            step = max(1, int(2e7 // max(len(ii), 1)))
            ru, rv = np.empty(tokens), np.empty(tokens)
            for s0 in range(0, tokens, step):
                zs = Z[s0:s0 + step]
                ru[s0:s0 + step] = (feat(zs @ k.U, ii) ** 2) @ m2 / m2.sum()
                rv[s0:s0 + step] = (feat(zs @ k.V, ii) ** 2) @ m2 / m2.sum()
            sc[name] = (ru, rv)
        else:
            sc[name] = (np.ones(tokens), np.ones(tokens))
    return kappa, sc, np.full(tokens, 1.0 / tokens)


def _block_phi(m2, c, n, p, gxx, gwu):
    return np.sum(m2 / (1 + (n * n / p) * gxx * gwu * m2)) / c


def _dyson_map(m, state, z, blocks, nodes):
    """One evaluation: state = (g 3×3, and per block ĝ_xx, ĝ_wu) → new state, and G_xx mean."""
    g = state[:9].reshape(3, 3)
    S = _sigma_pp(m, g)
    P, _ = _p_traces(m, S)
    Snn = _sigma_nn(m, P, g)
    kappa, kw = nodes["kappa"], nodes["w"]
    M = kappa.size
    L = np.zeros((M, 3, 3))
    L[:, X_, X_] = z
    L[:, X_, W_] = kappa
    L[:, U_, X_] = -kappa
    L[:, U_, U_] = 1.0
    L[:, W_, W_] = 1.0
    L = L - Snn[None]
    for j, (m2, ru, rv) in enumerate(blocks):
        gxx, gwu = state[9 + 2 * j], state[10 + 2 * j]
        phi = _block_phi(m2, m.c, m.n, m.p, gxx, gwu)
        L[:, X_, X_] += rv * phi * gwu
        L[:, U_, W_] += ru * phi * gxx
    G = np.linalg.inv(L)
    out = [np.einsum("m,mij->ij", kw, G).ravel()]
    for (m2, ru, rv) in blocks:
        out.append([kw @ (rv * G[:, X_, X_]), kw @ (ru * G[:, W_, U_])])
    return np.concatenate([np.ravel(o) for o in out])


def _signal_F(m, state, z, blocks, nodes):
    """F = ŷᵀ[L_full^{-1}]_xx ŷ at the fixed point: ⟨G_xx⟩, corrected for μ ≠ 0 by the Woodbury step of
    docs/theory.md §12.3 (:func:`~symattn.backends.general_w.resolvent_F`) with the n-forms of this fixed
    point (the blocks are independent of y and add no rank-one piece)."""
    Gbar = _dyson_map(m, state, z, blocks, nodes)[:9].reshape(3, 3)
    return resolvent_F(m, state[:9].reshape(3, 3), z, Gbar=Gbar)


def _solve(m, z, blocks, nodes, tol=1e-12, maxiter=400):
    nb = len(blocks)
    state = np.concatenate([np.diag([1.0 / z, 1.0, 1.0]).ravel(), np.tile([1.0 / z, 1.0], nb)])
    X, R = [], []
    res = np.inf
    for it in range(maxiter):
        new = _dyson_map(m, state, z, blocks, nodes)
        r = new - state
        scale = np.maximum(np.abs(new), 1e-6 * np.max(np.abs(new)))
        res = float(np.max(np.abs(r) / scale))
        if res < tol:
            return new, it
        X.append(state.copy())
        R.append(r)
        if len(X) > 6:
            X.pop(0)
            R.pop(0)
        cand = state + 0.5 * r
        if len(X) >= 2:
            dR = np.diff(np.array(R), axis=0).T
            dX = np.diff(np.array(X), axis=0).T
            coef = np.linalg.lstsq(dR, r, rcond=None)[0]
            c2 = state + r - (dX + dR) @ coef
            if np.all(np.isfinite(c2)):
                cand = c2
        state = cand
    raise ConvergenceError(f"the cubic-block Dyson iteration did not converge (residual {res:.3g})",
                           residuals=[res], iterations=maxiter, point={"gamma": float(z)})


def hermite_block_error(f, c, gamma, W, mu=None, signal: str = "latent", blocks=("33", "31", "22"),
                          token_scales: bool = True,
                          constants=None, tokens: int = 4000, pairs=None, seed: int = 0,
                          rel_step: float = 1e-4) -> dict:
    r"""E_A(γ) = −γ² F'(γ) for the kernel model with the structured Hermite blocks (module docstring).

    F(γ) = ⟨G_xx⟩ of the Dyson fixed point; F' by a central difference in γ (relative step
    ``rel_step``, fixed point to 1e-12).

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
    tokens, pairs, seed : Monte Carlo sizes of the latent nodes and of the constants.

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
    for b in blocks:
        if b not in ("33", "31", "22"):
            raise ParameterError("blocks", b, "a subset of ('33', '31', '22')")
    W = np.asarray(W, dtype=float)
    k = constants if constants is not None else hermite_block_constants(f, W, pairs=pairs, seed=seed)
    m0 = general_w_model(f, c, W, mu, signal="linear")
    rest = k.rest_var
    blk = []
    if token_scales and (("33" in blocks and k.m33 is not None) or ("22" in blocks and k.m22 is not None)):
        kappa, sc, w = _token_nodes(f, W, k, k.b1, tokens, seed, True, m0.mu)
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
            blk.append((mw * mw, ru, rv))
        else:
            rest += float(np.sum(mw * mw))
    tau = k.rest_tau * k.rest_var / rest
    m = replace(m0, a1=k.b1, sigma2=rest / m0.c, tau=tau)
    nodes = {"kappa": kappa, "w": w}
    gam = np.atleast_1d(np.asarray(gamma, dtype=float))
    E, F = [], []
    for g0 in gam:
        Fs = []
        for z in (g0 * (1 - rel_step), g0, g0 * (1 + rel_step)):
            st, _ = _solve(m, z, blk, nodes)
            Fs.append(_signal_F(m, st, z, blk, nodes))
        F.append(Fs[1])
        E.append(-g0 * g0 * (Fs[2] - Fs[0]) / (2 * rel_step * g0))
    out = {"E": np.array(E), "F": np.array(F), "constants": k}
    if signal == "latent" and np.any(m.mu):
        dE = strong_direction_correction(f, m.c, gam, W, m.mu)
        out["E_linear"], out["correction"] = out["E"], dE
        out["E"] = out["E"] + dE
    return out
