r"""The constants of the structured Hermite blocks (docs/theory.md §12.8, §12.9): the projections of f(ξ) on the
Wiener chaoses of a low-rank (or full-rank) W and the block weights, compressed into atoms for a large rank.

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
law of (u_i, v_j) (:func:`hermite_block_constants`, by quadrature over the latent law, :mod:`.latent`),
s_r², τ_r the variance and transpose correlation of the remainder. The two structured parts are
replaced by products of independent Gaussian feature matrices, ρ^u_i ρ^v_j Σ_α m_α A_αi B_αj, with the
per-token scales ρ^u_i² = Σ_α m_α² Ĥ_α(u_i)²/Σ_α m_α² (and ρ^v; for T33 and T22, not for the rank-2r
P31 + P13 block) kept as latent variables of the token
(they carry the non-Gaussianity of the Hermite features: with them Gaussian features give the same
E_A as the real ones, by kernel-level Monte Carlo).

Status: the kernel model (Gaussian blocks with token scales) is a conjecture checked by Monte Carlo; the constants
are derived (rest_tau approximated; docs/theory.md §12.8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...caching import Memo
from ...errors import ParameterError
from ...gauss import gauss_hermite
from ...model import weight_rank
from .constants import CONSTANT_NODES
from .latent import pair_traces, variance_rule
from .linalg import array_key

__all__ = ["MAX_BLOCK_RANK", "BlockAtoms", "compress_weights", "block_total", "block_present", "HermiteBlockConstants",
           "f_values", "index_triples", "index_pairs", "hermite_block_constants"]

#: a multi-index sum over the cubic block is enumerated only up to this rank (above, the block is free noise)
MAX_BLOCK_RANK = 64
#: latent pairs per chunk of the Monte Carlo of the constants
CHUNK = 20_000
#: constants already computed (f, content of W, max_rank, method, pairs, seed → HermiteBlockConstants); one per
#: head of a few layers
CONSTANTS = Memo("general_w.block_constants", 64)
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


def block_total(mw) -> float:
    """Σ m_α² of a block (weights m_α, or :class:`BlockAtoms` of m²).

    Examples
    --------
    >>> block_total(np.array([1.0, 2.0])), block_total(compress_weights(np.array([1.0, 4.0])))
    (5.0, 5.0)
    """
    return mw.total() if isinstance(mw, BlockAtoms) else float(np.sum(mw * mw))


def block_present(mw) -> bool:
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


def f_values(f, x):
    return np.asarray(f.numpy(x), dtype=float)


def _svd(W):
    p = W.shape[0]
    U, S, Vt = np.linalg.svd(W)
    r = weight_rank(W, S)
    omega = float(np.sum(W * W)) / p
    return U[:, :r], S[:r] / math.sqrt(p * omega), Vt[:r].T, omega


def index_triples(r):
    a, b, c = np.meshgrid(np.arange(r), np.arange(r), np.arange(r), indexing="ij")
    keep = (a <= b) & (b <= c)
    return np.stack([a[keep], b[keep], c[keep]], 1)


def _features(u, idx):
    """Normalised degree-3 Hermite features Ĥ_α(u) (rows of u: tokens; idx: sorted triples).

    Examples
    --------
    >>> from symattn import activation
    >>> f_values(activation("x**2"), np.array([0.0, 2.0])).tolist()
    [-1.0, 3.0]
    """
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


def index_pairs(r):
    a, b = np.meshgrid(np.arange(r), np.arange(r), indexing="ij")
    keep = a <= b
    return np.stack([a[keep], b[keep]], 1)


def _features2(u, idx):
    """Normalised degree-2 Hermite features Ĥ_α(u) (idx: sorted pairs).

    Examples
    --------
    >>> index_pairs(2).tolist()
    [[0, 0], [0, 1], [1, 1]]
    """
    a, b = idx.T
    out = u[:, a] * u[:, b]
    d = a == b
    out[:, d] = (u[:, a[d]] ** 2 - 1) / math.sqrt(2)
    return out


def _mc_moments(f, O, shat, omega, names, pairs, seed):
    """E[X f], E f², E[X X'ᵀ], E[X f'], E[f f'] (X the regressors ``names``, ' the transposed entry) by Monte Carlo over
    ``pairs`` latent pairs (both orientations pooled; fixed ``seed``)."""
    r = shat.size
    so = math.sqrt(omega)
    rng = np.random.default_rng(seed)
    L = np.linalg.cholesky(np.eye(r) - O.T @ O + 1e-12 * np.eye(r))

    def tokens(k):
        u = rng.standard_normal((k, r))
        return u, u @ O + rng.standard_normal((k, r)) @ L.T

    k = len(names)
    # moments over pairs: E[X f], E[f²] (both orientations pooled), E[X X'ᵀ], E[X f'], E[f f']
    Xf = np.zeros(k); ff = 0.0
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
            fs.append(f_values(f, so * x))
        A1, A2 = cols
        f1, f2 = fs
        Xf += A1.T @ f1 + A2.T @ f2
        ff += float(f1 @ f1 + f2 @ f2)
        XXt += A1.T @ A2 + A2.T @ A1
        Xft += A1.T @ f2 + A2.T @ f1
        fft += 2 * float(f1 @ f2)
        done += kk
    N = 2 * pairs
    return Xf / N, ff / N, XXt / N, Xft / N, fft / N


def _quadrature_moments(f, O, shat, omega, names):
    """E[X f] (X the regressors ``names``), E f², E[f_ij ξ_ji] and E[f_ij f_ji] by the rules of :mod:`.latent` (see
    :func:`hermite_block_constants`)."""
    so = math.sqrt(omega)
    s, w, nu = variance_rule(shat)
    xg, wg = gauss_hermite(CONSTANT_NODES)
    F = f_values(f, so * np.sqrt(s)[:, None] * xg[None, :])          # f(√(ωs_k) g_l)
    m0, m1, m2, m3 = (F @ (wg * xg**k) for k in range(4))
    rs = np.sqrt(s)
    Ef, Ex, Ex2, Ex3 = w @ m0, w @ (rs * m1), w @ (s * m2), w @ (s * rs * m3)
    Ey3 = nu @ (m1 / rs)
    Ep20 = w @ ((s - 1) * m0) + nu @ ((m2 - m0) / s)
    Ep20x = w @ ((s - 1) * rs * m1) + nu @ ((m3 - m1) / rs)
    Ep31 = 3 * Ep20x - 12 * Ey3
    proj = {"1": Ef, "xi": so * Ex, "t33": (Ex3 - 3 * Ex - Ep31 - 6 * Ey3) / math.sqrt(6), "t31": Ep31,
            "t22": (Ex2 - Ef - Ep20) / math.sqrt(2), "t20": Ep20}
    ff = float(w @ ((F * F) @ wg))
    # E[f_ij x_ji] = E[q3 m1(q1)/√q1], E[q3 | u_i] = uᵀŜOᵀŜOᵀu: the tilt c_a = ŝ_a (OᵀŜOᵀ)_aa
    _, _, nu_t = variance_rule(shat, tilt=shat * np.einsum("ba,b,ab->a", O, shat, O))
    fxt = so * float(nu_t @ (m1 / rs))
    tr = pair_traces(shat, O)
    fft = _second_order(lambda q: _pair_mean(f, so, q), tr["q_mean"], tr["q_cov"])
    return np.array([proj[nm] for nm in names]), ff, fxt, fft


#: Gauss–Hermite nodes per axis of the bivariate integrals of :func:`_pair_mean`
PAIR_NODES = 120
#: the step (relative to the mean of q) of the second differences of :func:`_second_order`
PAIR_STEP = 0.2


def _pair_mean(f, so, q):
    """G(q) = E[f(√ω X) f(√ω Y)], (X, Y) centred Gaussian with variances q1, q2 and covariance q3 (the
    correlation clipped to [−1, 1]); tensor Gauss–Hermite."""
    x, w = gauss_hermite(PAIR_NODES)
    q1, q2, q3 = (float(v) for v in q)
    c = min(max(q3 / math.sqrt(q1 * q2), -1.0), 1.0)
    X = math.sqrt(q1) * x[:, None] + 0 * x[None, :]
    Y = math.sqrt(q2) * (c * x[:, None] + math.sqrt(1 - c * c) * x[None, :])
    return float(w @ (f_values(f, so * X) * f_values(f, so * Y)) @ w)


def _second_order(G, mean, cov, step=PAIR_STEP):
    """E G(q) ≈ G(q̄) + ½ Σ_kl ∂_k∂_l G(q̄) Cov(q_k, q_l), the second derivatives by central differences of step
    ``step``·max|q̄|."""
    h = step * max(1.0, float(np.max(np.abs(mean))))
    n = len(mean)
    E = np.eye(n) * h
    g0 = G(mean)
    out = g0
    for k in range(n):
        for l in range(k, n):
            if k == l:
                d2 = (G(mean + E[k]) - 2 * g0 + G(mean - E[k])) / (h * h)
            else:
                d2 = (G(mean + E[k] + E[l]) - G(mean + E[k] - E[l]) - G(mean - E[k] + E[l])
                      + G(mean - E[k] - E[l])) / (4 * h * h)
            out += (0.5 if k == l else 1.0) * d2 * cov[k, l]
    return float(out)


def hermite_block_constants(f, W, pairs=None, seed: int = 0, max_rank: int = MAX_BLOCK_RANK,
                            method: str | None = None) -> HermiteBlockConstants:
    r"""Coefficients of f(ξ) on (1, ξ, T33, P31 + P13[, T22, P20 + P02]) and the remainder, by deterministic
    quadrature over the latent law (default) or by Monte Carlo over latent pairs.

    Token i has (u_i, v_i) jointly Gaussian, Cov(u) = Cov(v) = I_r, Cov(u_i, v_i) = O = UᵀV; for a pair
    (i, j) the entries ξ_ij = √ω Σ_a ŝ_a u_ia v_ja and ξ_ji are formed. The regressors lie in distinct
    chaoses, so b_j = E[f X_j]/E[X_j²] with the exact E[X_j²] (E ξ² = ω, E T33² = 1 + 3p₂ + 2p₃,
    E (P31 + P13)² = 18 Σ_c ŝ_c²(2p₂ + 4ŝ_c⁴), E T22² = 1 + p₂, E (P20 + P02)² = 4p₂, p_k = Σŝ^{2k}) and
    E[f X_j]; rest_var = E f² − Σ_j b_j² E[X_j²], rest_tau the (i, j)/(j, i) correlation of the remainder.

    ``method='quadrature'`` (docs/theory.md §12.8): given the row latent u, x = ξ/√ω is N(0, s(u)), s = Σŝ_a²u_a²,
    and with m_k(s) = E[g^k f(√(ωs) g)] (Gauss–Hermite, :data:`~.constants.CONSTANT_NODES` nodes) and
    t = Σŝ_a⁴u_a² (the conditional covariances E[y3 | x, u] = (t/s)x, E[Σŝ_a²v_a² − 1 | x, u] = (t/s)(x²/s − 1)):

      E f = E m0,  E[f x^k] = E[s^{k/2} m_k],  E[f y3] = E[t m1/√s],
      E[f p20] = E[(s − 1) m0] + E[t (m2 − m0)/s],  E[f p20 x] = E[(s − 1)√s m1] + E[t (m3 − m1)/√s],
      E f² = E[E_g f(√(ωs) g)²],

    the outer expectations by the Gauss rule of s and its t-tilt (:func:`~.latent.variance_rule`): exact up to
    the rule's polynomial degree. The transposed moment E[R_ij R_ji] is E[f_ij f_ji] − Σ_j b_j² E[X_j,ij X_j,ji]
    with the exact transposed regressor moments (:func:`~.latent.pair_traces`), E[f_ij ξ_ji] = √ω E[q3 m1(q1)/√q1]
    exactly (a tilt of the rule of s), and E[f_ij f_ji] to second order in the fluctuation of the conditional
    covariance q of (x_ij, x_ji) given token i (a bivariate Gauss–Hermite G(q), E G ≈ G(q̄) + ½ ∂²G·Cov q; the
    cumulant series is asymptotic: its third-order term makes it worse at rank <= 8); the other cross moments
    E[f_ij X_ji] are taken as b_j E[X_ij X_ji]. rest_tau is therefore an approximation (off by up to about 0.1
    from Monte Carlo at rank 3–8, within its noise at rank 32 and full rank); E_A moves by about 10⁻⁴ per 0.05
    of rest_tau at the MiniLM W. Deterministic; cached by the content of (f, W).

    Parameters
    ----------
    f : Activation
    W : numpy.ndarray
        p×p.
    pairs : int, optional
        ``method='montecarlo'`` only: Monte Carlo pairs (the standard error of the constants is about 1/√pairs relative); default
        500 000 for rank ≤ max_rank, 50 000 above (where the pairs cost O(r) each and no block is enumerated).
    seed : int
        ``method='montecarlo'`` only.
    max_rank : int
        The cubic block's weights are enumerated (C(r+2, 3) of them) only for rank ≤ max_rank;
        otherwise T33 is folded into the remainder noise (m33 = None). Above :data:`MAX_BLOCK_RANK` (up to
        max_rank = p, a full-rank W) they are streamed into :class:`BlockAtoms` (:data:`ATOM_BINS` atoms).
    method : {'quadrature', 'montecarlo'}, optional
        Deterministic quadrature, or the Monte Carlo over latent pairs (the reference); default 'montecarlo'
        when ``pairs`` is given, else 'quadrature'.

    Returns
    -------
    HermiteBlockConstants

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((40, 8)) @ rng.standard_normal((8, 40))
    >>> k = hermite_block_constants(activation("tanh"), W)
    >>> k.rank, k.m33.size
    (8, 120)
    """
    method = method or ("quadrature" if pairs is None else "montecarlo")
    if method not in ("quadrature", "montecarlo"):
        raise ParameterError("method", method, "'quadrature' or 'montecarlo'")
    W = np.asarray(W, dtype=float)
    return CONSTANTS.get((f, array_key(W), int(max_rank), method, pairs, seed),
                         lambda: _block_constants(f, W, int(max_rank), method, pairs, seed))


def _block_constants(f, W, max_rank, method, pairs, seed):
    """:func:`hermite_block_constants`, computed."""
    U, shat, V, omega = _svd(W)
    r = shat.size
    O = U.T @ V
    so = math.sqrt(omega)
    blocks = r <= max_rank
    xg, wg = gauss_hermite(64)
    even = abs(float(wg @ (f_values(f, so * xg) * (xg * xg - 1)))) > 1e-9   # a2 ≠ 0: the degree-2 parts too
    names = ["1", "xi"] + (["t33"] if blocks else []) + ["t31"] + ((["t22"] if blocks else []) + ["t20"] if even else [])
    if method == "montecarlo":
        if pairs is None:
            pairs = 500_000 if r <= max_rank else 50_000
        Xf, ff, XXt, Xft, fft = _mc_moments(f, O, shat, omega, names, pairs, seed)
    else:
        Xf, ff, fxt, fft = _quadrature_moments(f, O, shat, omega, names)
        tr = pair_traces(shat, O)
        XXt = np.diag([tr[nm] * (omega if nm == "xi" else 1.0) for nm in names])
        Xft = None
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
    # E[R_ij R_ji]; by quadrature E[f_ij ξ_ji] exactly, E[f_ij X_j,ji] = b_j E[X_j,ij X_j,ji] for the others (the
    # part of f in X_j's chaos taken as b_j X_j)
    if Xft is None:
        Xft = XXt @ b
        Xft[names.index("xi")] = fxt
    rt = (fft - 2 * b @ Xft + b @ XXt @ b) / rv if rv > 1e-12 * max(ff, 1e-300) else 0.0
    bd = dict(zip(names, (float(v) for v in b)))
    b0, b1, b31 = bd["1"], bd["xi"], bd["t31"]
    b3, b2, b20 = bd.get("t33", 0.0), bd.get("t22", 0.0), bd.get("t20", 0.0)
    if not blocks:
        m33 = None
    elif r <= MAX_BLOCK_RANK:
        m33 = b3 * math.sqrt(6) * np.prod(shat[index_triples(r)], axis=1)
    else:   # C(r+2, 3) weights: compressed (docs/theory.md §12.9)
        m33 = _cubic_atoms(shat, 6 * b3 * b3)
    m22 = b2 * math.sqrt(2) * np.prod(shat[index_pairs(r)], axis=1) if blocks and even else None
    s4 = float(np.sum(shat**4))
    sig_w = np.sqrt(2 * s4 + 4 * shat**4)     # E w_c(u)² = 2 Σ_a ŝ_a⁴ + 4 ŝ_c⁴
    m31 = np.concatenate([3 * b31 * shat * sig_w] * 2)
    out = HermiteBlockConstants(b0=b0, b1=b1, b3=b3, b31=b31, rest_var=rv, rest_tau=min(max(rt, -1.0), 1.0),
                                m33=m33, m31=m31, rank=r, shat=shat, omega=omega, U=U, V=V,
                                b2=b2, b20=b20, m22=m22)
    return out
