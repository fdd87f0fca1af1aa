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

**Solver.** The state (g, and ĝ_xx, ĝ_wu per block) is solved per γ by an Anderson iteration from the
γ → ∞ start, then Newton; F′ by implicit differentiation (one fixed point per γ). For rank W ≤ p/2 the
p-traces are taken in the 2r-dimensional range of W (:class:`_LowRankTraces`, one 2r×2r inverse per
evaluation instead of two p×p ones); the Jacobian's node part is in closed form (dG = −G dL G, one
product over the tokens), its scalar part by complex steps; the token draws are cached per W and μ.

**Signal.** The blocks are independent of y: F comes from the Woodbury step of docs/theory.md §12.3 with
the n-forms of this fixed point; ``signal='latent'`` adds the strong-direction correction of §12.3.

Status: the block Dyson equation is derived; the kernel model (Gaussian blocks with token scales,
constants by Monte Carlo over latent pairs) is a conjecture checked by Monte Carlo (docs/theory.md §12.8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..errors import ParameterError
from ..model import weight_rank
from ..gauss import gauss_hermite
from .fixedpoint import Anderson, Newton, StallRestart, fixed_point
from .general_w import (X_, U_, W_, _digest, _p_traces, _sigma_nn, _sigma_pp, general_w_model, physical_points,
                        resolvent_F, strong_direction_correction)

__all__ = ["HermiteBlockConstants", "BlockAtoms", "compress_weights", "hermite_block_constants", "hermite_block_error"]

#: a multi-index sum over the cubic block is enumerated only up to this rank (above, the block is free noise)
MAX_BLOCK_RANK = 64
#: latent pairs per chunk of the Monte Carlo of the constants
CHUNK = 20_000
#: above MAX_BLOCK_RANK the cubic block's C(r+2, 3) squared weights are kept as this many log-spaced atoms
ATOM_BINS = 3000


@dataclass
class BlockAtoms:
    r"""The squared weights m_α² of a large block, compressed: per log-bin of m², one atom of value
    v = Σm⁴/Σm² and multiplicity w = (Σm²)²/Σm⁴, so that Σ w v = Σ m² and Σ w v² = Σ m⁴ in every bin
    (docs/theory.md §12.9). The block enters the Dyson equation only through φ(x) = Σ_α m_α²/(1 + x m_α²),
    which the atoms reproduce to second order in each bin's spread.

    Attributes
    ----------
    v, w : numpy.ndarray
        Atom values (of m²) and multiplicities.
    size : int
        The number of multi-indices D compressed.

    Examples
    --------
    >>> a = compress_weights(np.array([1.0, 1.0, 4.0]), bins=2)
    >>> a.size, float(np.sum(a.w * a.v)), float(np.sum(a.w * a.v ** 2))
    (3, 6.0, 18.0)
    """

    v: np.ndarray
    w: np.ndarray
    size: int

    def total(self) -> float:
        """Σ_α m_α² (the block's variance)."""
        return float(np.sum(self.w * self.v))


def compress_weights(m2, bins: int = ATOM_BINS) -> BlockAtoms:
    """:class:`BlockAtoms` of the squared weights ``m2`` (an array), keeping Σm² and Σm⁴ per log-bin.

    Examples
    --------
    >>> compress_weights(np.full(10, 0.5)).size
    10
    """
    m2 = np.asarray(m2, dtype=float).ravel()
    pos = m2[m2 > 0]
    if pos.size == 0:
        return BlockAtoms(v=np.zeros(1), w=np.zeros(1), size=m2.size)
    lo, hi = math.log(pos.min()), math.log(pos.max())
    idx = np.minimum(((np.log(pos) - lo) / max(hi - lo, 1e-300) * bins).astype(int), bins - 1)
    s1, s2 = np.bincount(idx, pos, bins), np.bincount(idx, pos * pos, bins)
    k = s1 > 0
    return BlockAtoms(v=s2[k] / s1[k], w=s1[k] ** 2 / s2[k], size=m2.size)


def _cubic_atoms(shat, coef, bins: int = ATOM_BINS) -> BlockAtoms:
    """:class:`BlockAtoms` of m_α² = coef·ŝ_a²ŝ_b²ŝ_c² over a <= b <= c, streamed over a (the C(r+2, 3) multi-indices
    are never held at once: 9.5 M at r = 384)."""
    s2 = shat * shat
    r = s2.size
    lo, hi = 3 * math.log(float(s2.min())), 3 * math.log(float(s2.max()))
    span = max(hi - lo, 1e-300)
    S1, S2 = np.zeros(bins), np.zeros(bins)
    for a in range(r):
        b, c = np.triu_indices(r - a)
        t = s2[a] * s2[b + a] * s2[c + a]
        idx = np.clip(((np.log(t) - lo) / span * bins).astype(int), 0, bins - 1)
        S1 += np.bincount(idx, t, bins)
        S2 += np.bincount(idx, t * t, bins)
    k = S1 > 0
    return BlockAtoms(v=coef * S2[k] / S1[k], w=S1[k] ** 2 / S2[k], size=r * (r + 1) * (r + 2) // 6)


def _block_total(mw) -> float:
    """Σ m_α² of a block (weights m_α, or :class:`BlockAtoms` of m²)."""
    return mw.total() if isinstance(mw, BlockAtoms) else float(np.sum(mw * mw))


def _block_present(mw) -> bool:
    return mw is not None and (mw.total() > 0 if isinstance(mw, BlockAtoms) else bool(np.any(mw)))


@dataclass
class HermiteBlockConstants:
    """Projections of f(ξ_ij) under the exact law (module docstring) and the block weights.

    Attributes
    ----------
    b0, b1, b3, b31, b2, b20 : float
        Coefficients of 1, ξ, T33, P31 + P13, T22, P20 + P02 (the last two 0 for an odd f).
    rest_var, rest_tau : float
        Variance s_r² and transpose correlation τ_r of the remainder.
    m33, m31, m22 : numpy.ndarray, BlockAtoms or None
        Block weights m_α (None when a block is not enumerated, rank > max_rank, or f is odd); for
        MAX_BLOCK_RANK < rank <= max_rank the cubic block's squared weights as :class:`BlockAtoms`.
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
    """w_c(u) = Σ_a ŝ_a² H_aac(u) = u_c (A(u) − 2ŝ_c²), A(u) = Σ_a ŝ_a²(u_a² − 1) (tokens × r)."""
    A = (u * u) @ s2 - np.sum(s2)
    return u * (A[:, None] - 2 * s2)


def _chaos_parts(u, v, shat):
    """x, T33 = P33/√6, P31 + P13, T22 = P22/√2 and P20 + P02 for pairs (rows of u and v).

    With A(u) = Σ_a ŝ_a²(u_a² − 1) and y3 = Σ_c ŝ_c³ u_c v_c (w_c(u) = u_c(A(u) − 2ŝ_c²)):
    P31 + P13 = 3(A(u) + A(v))x − 12 y3, P11 = 6 y3, P20 + P02 = A(u) + A(v): O(r) per pair."""
    s2 = shat * shat
    xy = (u * v) @ np.stack([shat, s2 * shat], 1)
    x, y3 = xy[:, 0], xy[:, 1]
    p20 = (u * u) @ s2 + (v * v) @ s2 - 2 * np.sum(s2)
    p31 = 3 * p20 * x - 12 * y3
    p33 = x * x * x - 3 * x - p31 - 6 * y3
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
        otherwise T33 is folded into the remainder noise (m33 = None). Above :data:`MAX_BLOCK_RANK` (up to
        max_rank = p, a full-rank W) they are streamed into :class:`BlockAtoms` (:data:`ATOM_BINS` atoms).

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
    if not blocks:
        m33 = None
    elif r <= MAX_BLOCK_RANK:
        m33 = b3 * math.sqrt(6) * np.prod(shat[_triples(r)], axis=1)
    else:   # C(r+2, 3) weights: compressed (docs/theory.md §12.9)
        m33 = _cubic_atoms(shat, 6 * b3 * b3)
    m22 = b2 * math.sqrt(2) * np.prod(shat[_pairs(r)], axis=1) if blocks and even else None
    s4 = float(np.sum(shat**4))
    sig_w = np.sqrt(2 * s4 + 4 * shat**4)     # E w_c(u)² = 2 Σ_a ŝ_a⁴ + 4 ŝ_c⁴
    m31 = np.concatenate([3 * b31 * shat * sig_w] * 2)
    return HermiteBlockConstants(b0=b0, b1=b1, b3=b3, b31=b31, rest_var=rv, rest_tau=min(max(rt, -1.0), 1.0),
                               m33=m33, m31=m31, rank=r, shat=shat, omega=omega, U=U, V=V,
                               b2=b2, b20=b20, m22=m22)


#: token nodes already drawn: (digest of W, μ, U, V, ŝ; seed, tokens, scaled blocks) → (q, scales); a few entries
_NODE_CACHE: dict = {}
#: low-rank trace operators of W already built (digest of W → _LowRankTraces or None); a few entries
_TRACE_CACHE: dict = {}
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
    if s2.size <= MAX_BLOCK_RANK:
        return num / np.sum(np.prod(s2[_triples(s2.size)], axis=1))
    # Σ_{a<=b<=c} ŝ_a²ŝ_b²ŝ_c² = h3(ŝ²), the complete homogeneous polynomial (P1³ + 3P1P2 + 2P3)/6, P_k = Σŝ^{2k}
    P1, P2, P3 = (float(np.sum(s2 ** k)) for k in (1, 2, 3))
    return num / ((P1 ** 3 + 3 * P1 * P2 + 2 * P3) / 6)


def _scale2(u, s2):
    r"""ρ² = Σ_{|α|=2} ŝ^{2α} Ĥ_α(u)² / Σ_{|α|=2} ŝ^{2α} = (e₂(ŝ²u²) + Σ_a ŝ_a⁴ He2(u_a)²/2) / Σ_{a≤b} ŝ_a²ŝ_b²."""
    uu = u * u
    num = _esym(s2 * uu, 2)[2] + ((s2 * s2 / 2) * (uu - 1) ** 2).sum(1)
    return num / np.sum(np.prod(s2[_pairs(s2.size)], axis=1))


def _token_nodes(f, W, k, b1, tokens, seed, mu):
    """Latent token nodes: κ_i = f(q_i)/√p − b1 tr W/p (exact q_i = x_iᵀWx_i/√p, x_i = z_i + y_iμ,
    y_i = ±1) and the scales ρu², ρv² of the T33 and T22 blocks (from the bulk part z_i; closed forms
    :func:`_scale3`, :func:`_scale2`). The draws (q and the scales) are cached per content of
    (W, μ, U, V, ŝ) and (seed, tokens); κ is evaluated per call."""
    p = W.shape[0]
    scaled = tuple(name for name, mw in (("33", k.m33), ("22", k.m22)) if _block_present(mw))
    content = tuple(None if a is None else _digest(a) for a in (W, mu, k.U, k.V, k.shat))
    key = (content, seed, tokens, scaled)
    if key not in _NODE_CACHE:
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
        if len(_NODE_CACHE) > 8:
            _NODE_CACHE.clear()
        _NODE_CACHE[key] = (q, sc)
    q, sc = _NODE_CACHE[key]
    kappa = _fnum(f, q) / math.sqrt(p) - b1 * float(np.trace(W)) / p
    one = np.ones(tokens)
    return kappa, {name: sc.get(name, (one, one)) for name in ("33", "22")}, np.full(tokens, 1.0 / tokens)


class _LowRankTraces:
    r"""The p-traces T_ab(C) = tr_p(𝒲_a H_ab)/p of docs/theory.md §12.2 (𝒲_t = W, 𝒲_h = Wᵀ,
    H = B2(C)^{-1}, C = [[α, β], [γ', δ]]) for W = U S Vᵀ of rank r ≤ p/2, at any C (complex steps about a
    real point through its exact derivative ∂T/∂C there, :attr:`J`), by Woodbury in the 2r-dimensional
    range of W:

      B2 = I − L R,  L = [[αU, βV], [γ'U, δV]],  R = diag(S Vᵀ, S Uᵀ),  H = I + L K R,
      K = (I_2r − R L)^{-1},  R L = [[α S Oᵀ, β S], [γ' S, δ S O]]  (O = UᵀV),

    so tr(𝒲_a H_ab) = δ_ab tr W + tr(K R_b 𝒲_a L_a), with 𝒲_t L_t = U S[αOᵀ, βI], 𝒲_h L_h = V S[γ'I, δO],
    R_t U = [S Oᵀ; 0], R_h U = [0; S], R_t V = [S; 0], R_h V = [0; S O]: one 2r×2r inverse and eight
    Frobenius products per evaluation (O(r³)) instead of two p×p inverses (O(p³)). The duck type of
    :class:`symattn.backends.general_w._HOperator` that :func:`~symattn.backends.general_w._p_traces` uses."""

    def __init__(self, W, U, S, V):
        p, r = W.shape[0], S.size
        O = U.T @ V
        Sd = np.diag(S)
        self.p, self.r, self.trW = p, r, float(np.trace(W))
        self.SOt, self.SO, self.Sd = Sd @ O.T, Sd @ O, Sd
        S2, SOtS, SOS = Sd @ Sd, Sd @ O.T @ Sd, Sd @ O @ Sd
        # T_ab·p − δ_ab tr W = Σ_k coef_k ⟨K_blk_k, M_k⟩ (⟨A, B⟩ = Σ A∘B); the 8 matrices M_k per (block of K, C entry):
        # tt: α⟨K11, (SOᵀSOᵀ)ᵀ⟩ + β⟨K21, (SOᵀS)ᵀ⟩;  th: α⟨K12, (S²Oᵀ)ᵀ⟩ + β⟨K22, S²⟩
        # ht: γ'⟨K11, S²⟩ + δ⟨K21, (S²O)ᵀ⟩;       hh: γ'⟨K12, (SOS)ᵀ⟩ + δ⟨K22, (SOSO)ᵀ⟩
        Z = np.zeros((r, r))
        blk = lambda i, M: np.block([[M if i == 0 else Z, M if i == 1 else Z], [M if i == 2 else Z, M if i == 3 else Z]])
        mats = [blk(0, (SOtS @ O.T).T), blk(2, SOtS.T), blk(1, (S2 @ O.T).T), blk(3, S2),
                blk(0, S2), blk(2, (S2 @ O).T), blk(1, SOS.T), blk(3, (SOS @ O).T)]
        self.M = np.stack([mm.ravel() for mm in mats], 1)   # (4r², 8)
        self.I = np.eye(2 * r)
        self.U, self.V, self.S = U, V, S
        # dRL/dC_kl: (columns of K, matrix, rows of K) of the one nonzero block of each derivative
        self.blocks = [(slice(None, r), Sd @ O.T, slice(None, r)), (slice(None, r), Sd, slice(r, None)),
                       (slice(r, None), Sd, slice(None, r)), (slice(r, None), Sd @ O, slice(r, None))]
        self._C0 = None    # the last real point: C0, K0 = (I − R L(C0))^{-1}, v0 = ⟨K0, M_k⟩, ∂T/∂C there (lazy)
        self._K0 = self._v0 = self._J = None

    def _T(self, C, v, diag=True):
        """T from C (2×2[×batch]) and the Frobenius products v (…×8); tr W on the diagonal when ``diag``."""
        al, be, ga, de = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
        t = self.trW if diag else 0.0
        return np.array([[t + al * v[..., 0] + be * v[..., 1], al * v[..., 2] + be * v[..., 3]],
                         [ga * v[..., 4] + de * v[..., 5], t + ga * v[..., 6] + de * v[..., 7]]]) / self.p

    def _exact(self, C):
        al, be, ga, de = (np.asarray(x)[..., None, None] for x in (C[0, 0], C[0, 1], C[1, 0], C[1, 1]))
        RL = np.block([[al * self.SOt, be * self.Sd], [ga * self.Sd, de * self.SO]])
        K = np.linalg.inv(self.I - RL)
        return K, K.reshape(K.shape[:-2] + (-1,)) @ self.M

    @property
    def J(self):
        """∂T_ab/∂C_kl at the last real point (2×2×2×2): dK = K0 dRL K0, dT = T(dC, v0) + T(C0, ⟨dK, M⟩)."""
        if self._J is None:
            K0, J = self._K0, np.empty((2, 2, 2, 2))
            for idx, (rows, blk, cols) in enumerate(self.blocks):
                k, l = divmod(idx, 2)
                dC = np.zeros((2, 2))
                dC[k, l] = 1.0
                dv = (K0[:, rows] @ blk @ K0[cols, :]).ravel() @ self.M
                J[:, :, k, l] = self._T(dC, self._v0, diag=False) + self._T(self._C0, dv, diag=False)
            self._J = J
        return self._J

    def _set(self, C0):
        self._K0, self._v0 = self._exact(C0)
        self._C0, self._J = np.array(C0, dtype=float), None

    def traces(self, C):
        """T(C) for C of shape (2, 2) or (2, 2, B), real or complex. A complex C whose real parts are one point
        C0 (to 1e-12) and whose imaginary part is a complex step (|Im C| ≤ 1e-12·max(1, |C0|)) is evaluated
        as T(C0) + J·(C − C0) (exact to O(|Im C|²)), the inverse at C0 computed once and kept."""
        C = np.asarray(C)
        if np.iscomplexobj(C):
            C0 = C.real if C.ndim == 2 else C.real[:, :, 0]
            big = max(1.0, float(np.max(np.abs(C0))))
            near = C.ndim == 2 or np.allclose(C.real, C0[:, :, None], rtol=1e-12, atol=1e-12 * big)
            if near and np.max(np.abs(C.imag)) <= 1e-12 * big:
                if self._C0 is None or not np.allclose(C0, self._C0, rtol=1e-13, atol=1e-13 * big):
                    self._set(C0)
                T0, dC = self._T(self._C0, self._v0), C - (self._C0 if C.ndim == 2 else self._C0[:, :, None])
                return (T0 if C.ndim == 2 else T0[:, :, None]) + np.tensordot(self.J, dC, axes=([2, 3], [0, 1]))
        elif C.ndim == 2:
            if self._C0 is None or not np.array_equal(C, self._C0):
                self._set(C)
            return self._T(C, self._v0)
        return self._T(C, self._exact(C)[1])

    def apply(self, C, v):
        """H(C) v = v + L K R v (exact at any C, complex too; v of shape (2p,) or (2p, k)): the interface of
        :meth:`symattn.backends.general_w._HOperator.apply` (which linearises in C − C0)."""
        C = np.asarray(C)
        p = self.p
        vt, vh = v[:p], v[p:]
        Rv = np.concatenate([(self.V.T @ vt) * (self.S if v.ndim == 1 else self.S[:, None]),
                             (self.U.T @ vh) * (self.S if v.ndim == 1 else self.S[:, None])])
        y = self._exact(C)[0] @ Rv if C.dtype.kind == "c" or not np.array_equal(C, self._C0) else self._K0 @ Rv
        r = self.r
        al, be, ga, de = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
        Uy, Vy = self.U @ y[:r], self.V @ y[r:]
        return np.concatenate([vt + al * Uy + be * Vy, vh + ga * Uy + de * Vy])


def _low_rank_traces(W):
    """A :class:`_LowRankTraces` of W when 0 < rank W ≤ p/2 (one SVD per content of W, cached), else None."""
    key = _digest(W)
    if key not in _TRACE_CACHE:
        U, S, Vt = np.linalg.svd(W)
        r = weight_rank(W, S)
        if len(_TRACE_CACHE) > 8:
            _TRACE_CACHE.clear()
        _TRACE_CACHE[key] = _LowRankTraces(W, U[:, :r], S[:r], Vt[:r].T) if 0 < 2 * r <= W.shape[0] else None
    return _TRACE_CACHE[key]


def _node_inputs(m, state, Hop, blocks):
    """The scalars through which the state enters the token nodes: y = (Σ_nn row-major (9), then per block
    t_b = φ_b ĝ_wu, u_b = φ_b ĝ_xx), and the p-trace operator used (module docstring; ``Hop`` as in
    :func:`_dyson_map`). ``state`` of shape (ns,) or (ns, B)."""
    g = state[:9].reshape((3, 3) + state.shape[1:])
    S = _sigma_pp(m, g)
    P, Hop = _p_traces(m, S, Hop)
    Snn = _sigma_nn(m, P, g)
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


def _dyson_map(m, state, z, blocks, nodes, Hop=None):
    """One evaluation of the fixed-point map: state = (g 3×3, and per block ĝ_xx, ĝ_wu) → (new state, the
    p-trace operator used). ``state`` of shape (ns,) or (ns, B) (B points at once, with the low-rank traces).
    ``Hop``: the low-rank traces, or an H operator linearised at another point (complex steps); None: a new
    p×p-route H operator at this (real) point."""
    y, Hop = _node_inputs(m, state, Hop, blocks)
    return _node_means(y, z, blocks, nodes), Hop


def _signal_F(m, state, z, blocks, nodes, Hop=None):
    """F = ŷᵀ[L_full^{-1}]_xx ŷ at the fixed point: ⟨G_xx⟩, corrected for μ ≠ 0 by the Woodbury step of
    docs/theory.md §12.3 (:func:`~symattn.backends.general_w.resolvent_F`) with the n-forms of this fixed
    point (the blocks are independent of y and add no rank-one piece). Holomorphic in (state, z)."""
    Gbar = _dyson_map(m, state, z, blocks, nodes, Hop)[0][:9].reshape(3, 3)
    return resolvent_F(m, state[:9].reshape(3, 3), z, Gbar=Gbar)


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
    if isinstance(Hop, _LowRankTraces):
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
        new, Hop = _dyson_map(m, state, z, blocks, nodes, traces)
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


def _point_implicit(m, z, blocks, nodes, traces, solved=None):
    """(F, F') at γ = z: F′ by implicit differentiation of the fixed point s* = Φ(s*, z),
    ds/dz = (I − ∂Φ/∂s)^{-1} ∂Φ/∂z (:func:`_jacobians`), then one complex step of F along (ds/dz, 1)
    (the n-forms Φ(s*)[:9] move by ds/dz[:9], as Φ(s*) = s*). The Jacobians are those of the last Newton
    iterate s_k when the solver has them (s* = Φ(s_k), |s* − s_k| below 1e-12 relative), else taken at s*.
    ``solved``: the output of :func:`_solve` at z when the caller has it."""
    st, Hop, _, jac = _solve(m, z, blocks, nodes, traces) if solved is None else solved
    if jac is None:
        st, J, Jz, Hop = _jacobians(m, st, z, blocks, nodes, Hop)
    else:
        J, Jz = jac
    ds = np.linalg.solve(np.eye(st.size) - J, Jz)
    h = STEP * z
    Gbar = (st[:9] + 1j * h * ds[:9]).reshape(3, 3)
    Fc = resolvent_F(m, (st[:9] + 1j * h * ds[:9]).reshape(3, 3), complex(z, h), Gbar=Gbar)
    return float(np.real(Fc)), float(np.imag(Fc)) / h


def _physical_implicit(m, gam, blocks, nodes, traces):
    """(F, F') at the points γ with the physical checks and γ-continuation of
    :func:`~symattn.backends.general_w.physical_points` (a point that passes them is :func:`_point_implicit`'s)."""

    def solve(z, start):
        out = _solve(m, z, blocks, nodes, traces, state0=None if start is None else start[0])
        F = _signal_F(m, out[0], z, blocks, nodes, traces)
        return out, float(np.real(F)), out[2]

    def evaluate(z, solved):
        F0, dF = _point_implicit(m, z, blocks, nodes, traces, solved=solved)
        return -z * z * dF, F0, (F0, dF)

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
    For rank W ≤ p/2 the p-traces are taken in the 2r-dimensional range of W (:class:`_LowRankTraces`,
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
    tokens, pairs, seed : Monte Carlo sizes of the latent nodes and of the constants.
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
            rest += _block_total(mw)
    tau = k.rest_tau * k.rest_var / rest
    m = replace(m0, a1=k.b1, sigma2=rest / m0.c, tau=tau)
    nodes = {"kappa": kappa, "w": w}
    gam = np.atleast_1d(np.asarray(gamma, dtype=float))
    traces = _low_rank_traces(W)
    E, F = [], []
    implicit = _physical_implicit(m, gam, blk, nodes, traces) if derivative == "implicit" else None
    for i, g0 in enumerate(gam):
        if derivative == "implicit":
            F0, dF = implicit[i]
        else:
            Fs = []
            for z in (g0 * (1 - rel_step), g0, g0 * (1 + rel_step)):
                st = _solve(m, z, blk, nodes, traces)[0]
                Fs.append(_signal_F(m, st, z, blk, nodes, traces))
            F0, dF = Fs[1], (Fs[2] - Fs[0]) / (2 * rel_step * g0)
        F.append(F0)
        E.append(-g0 * g0 * dF)
    out = {"E": np.array(E), "F": np.array(F), "constants": k}
    if signal == "latent" and np.any(m.mu):
        dE = strong_direction_correction(f, m.c, gam, W, m.mu)
        out["E_linear"], out["correction"] = out["E"], dE
        out["E"] = out["E"] + dE
    return out
