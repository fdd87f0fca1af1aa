r"""Deterministic equivalents of the layer's variants: residual, multi-head, softmax (docs/theory.md §13).

Every formula is written once against a numeric context ``ctx`` (float64 or mpmath) and reduces
to the single-head attention system of docs/theory.md §6 (:func:`symattn.backends.solver.attention_error`):

- **residual** Φ = X(I + K): in the linearisation of docs/theory.md §4 the kernel enters only
  through a1, s² and its diagonal value d, and I + K is the kernel with diagonal d + 1, so
  E_res(γ) = E_A(γ; a1, s², d + 1) (:func:`residual_error`);
- **multi-head, sum readout** with heads of the paper's form W_h = I + Σ_k w_K^{(h,k)} w_Q^{(h,k)ᵀ}:
  the heads share their noise part to leading order, so Σ_h K_h is H times the kernel of
  W̄ = I + Σ_{h,k} (w_K^{(h,k)}/√H)(w_Q^{(h,k)}/√H)ᵀ and E_sum(γ) = E_A(γ/H²; W̄)
  (:func:`head_geometry`, :func:`sum_heads_error`); concatenated *identical* heads give
  E_concat(γ) = E_A(γ/H) exactly;
- **softmax** K_ij = exp(a_ij/τ)/Σ_{l≠i} exp(a_il/τ), a = XᵀWX/√p: the row sums concentrate and
  K = 11ᵀ/n + ε(K̂ P − I/√p) + o(ε), ε = √p/(n − 1), P = I − 11ᵀ/n, K̂ the entrywise kernel of
  ĝ(t) = exp(t/τ − 1/(2τ²)) − 1 (a1 = 1/τ, s² = e^{1/τ²} − 1 − 1/τ²; the self-exclusion −I/(n − 1)
  gives the diagonal d_n = −1/√p, 0 in the limit), so E_soft(γ) → E_A(γ/ε²; ĝ, d_n)
  (:func:`softmax_constants`, :func:`softmax_error`).

:func:`polynomial_error` is the outside reference for linear f: Φ = X(αI + βXᵀX/p) at μ = 0 is a
polynomial of XᵀX, so E is an integral against the Marchenko–Pastur law.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ParameterError
from . import solver
from .quadrature import mp_nodes

__all__ = ["residual_error", "polynomial_error", "head_geometry", "sum_heads_error", "softmax_constants",
           "softmax_scale", "softmax_regime", "softmax_error", "HEAD_RANK_MAX", "SOFTMAX_ROW_CV_MAX"]

#: the largest rank of W_h − I that a head of the paper's form may have (:func:`head_geometry`)
HEAD_RANK_MAX = 8
#: the softmax reduction is refused when the relative spread of a row sum, √((e^{1/τ²} − 1)/(n − 1)),
#: exceeds this (:func:`softmax_regime`; docs/theory.md §13.3)
SOFTMAX_ROW_CV_MAX = 0.06


def residual_error(ctx, c, gamma, a1, s2, d, gram, rank: int, point_info=None):
    r"""E of the residual layer Φ = X(I + K_X): the attention system with diagonal d + 1.

    .. math::  E_{\mathrm{res}}(\gamma) = E_A(\gamma;\ a_1, s^2, d + 1, \mathfrak G)

    (docs/theory.md §13.1). With f = 0 (a1 = s² = d = 0) this is E_LR; with f(t) = t it is
    :func:`polynomial_error` with α = β = 1 at μ = 0.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c, gamma, a1, s2, d : scalars or arrays, broadcast to P points
    gram : array (1 + 2r, 1 + 2r)
        The Gram matrix of (μ, w_K, w_Q).
    rank : int
    point_info : dict, optional

    Returns
    -------
    E, F : arrays (P,)
    sol : BulkSolution

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> E, F, sol = residual_error(FloatContext(), 0.5, [1.0], 0.0, 0.0, 0.0, np.zeros((3, 3)), 1)
    >>> from symattn.backends.solver import linear_error
    >>> bool(abs(E[0] - linear_error(FloatContext(), 0.5, 1.0, 0.0)) < 1e-10)     # f = 0: linear regression
    True
    """
    return solver.attention_error(ctx, c, gamma, a1, s2, d + 1, gram, rank, point_info=point_info)


def polynomial_error(ctx, c, gamma, alpha, beta, m: int = 2000):
    r"""E(γ) at μ = 0 for Φ = X(αI + βXᵀX/p): an integral against the Marchenko–Pastur law.

    With λ the eigenvalues of S = XᵀX/p (law μ_S of docs/theory.md §1.4, ratio 1/c), M = ΦᵀΦ/n
    has the eigenvalues q(λ) = cλ(α + βλ)² on the same eigenvectors and y is free of them, so

    .. math::  E(\gamma) = \int \frac{\gamma^2}{(q(\lambda) + \gamma)^2}\,d\mu_S(\lambda).

    The residual layer with f(t) = t is α = β = 1; the plain layer with f(t) = t is α = 0, β = 1.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c, gamma : scalars or arrays of the same length P
    alpha, beta : numbers
    m : int
        Quadrature nodes (:func:`symattn.backends.quadrature.mp_nodes`).

    Returns
    -------
    array (P,)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> from symattn.backends.solver import linear_error
    >>> ctx = FloatContext()
    >>> bool(abs(polynomial_error(ctx, 0.5, 0.3, 1.0, 0.0)[0] - linear_error(ctx, 0.5, 0.3, 0.0)) < 1e-9)
    True
    """
    c = np.atleast_1d(np.asarray(c, dtype=ctx.dtype))
    gamma = np.atleast_1d(np.asarray(gamma, dtype=c.dtype))
    c, gamma = np.broadcast_arrays(c, gamma)
    lam, w = mp_nodes(ctx, c.reshape(-1), m)
    cc = ctx.convert(c.reshape(-1, 1))
    g = ctx.convert(gamma.reshape(-1, 1))
    q = cc * lam * (alpha + beta * lam) ** 2
    return ((g / (q + g)) ** 2 * w).sum(axis=1)


def head_geometry(heads, mu=None, tol: float = 1e-9):
    r"""The Gram matrix of the sum readout's equivalent single head, for heads W_h = I + low rank.

    Each W_h − I = U_h diag(σ_h) V_hᵀ (SVD, singular values below ``tol``·max(1, ‖W_h‖) dropped)
    gives w_K^{(h,k)} = √σ_k u_k, w_Q^{(h,k)} = √σ_k v_k; the equivalent head is
    W̄ = (1/H)Σ_h W_h = I + Σ_{h,k} (w_K^{(h,k)}/√H)(w_Q^{(h,k)}/√H)ᵀ (docs/theory.md §13.2).

    Parameters
    ----------
    heads : sequence of (p, p) arrays
    mu : (p,) array or None
    tol : float

    Returns
    -------
    gram : (1 + 2r, 1 + 2r) array, ordered (μ, w_K^{(1..r)}, w_Q^{(1..r)}) as :class:`symattn.model.Geometry`
    rank : int
        r = Σ_h rank(W_h − I) (at least 1: a zero column pair when every head is I).

    Raises
    ------
    ParameterError
        When some W_h − I has rank above :data:`HEAD_RANK_MAX` (not of the paper's form).

    Examples
    --------
    >>> p = 6; e = np.eye(p)
    >>> gram, r = head_geometry([e + np.outer(e[0], e[1]), e], mu=e[0])
    >>> r, gram.shape, float(gram[0, 1] * gram[0, 0])       # μᵀw_K/√2 with w_K = e0
    (1, (3, 3), 0.7071067811865476)
    """
    heads = [np.asarray(W, dtype=float) for W in heads]
    p = heads[0].shape[0]
    H = len(heads)
    wk, wq = [], []
    for h, W in enumerate(heads):
        D = W - np.eye(p)
        U, s, Vt = np.linalg.svd(D)
        keep = s > tol * max(1.0, float(s[0]) if s.size else 0.0)
        r = int(keep.sum())
        if r > HEAD_RANK_MAX:
            raise ParameterError(
                "heads", f"head {h} with rank(W_h - I) = {r}",
                f"heads of the paper's form W_h = I + (rank <= {HEAD_RANK_MAX}) for the multi-head theory",
                hint="general heads (e.g. random rank-p/H or MiniLM heads) need the general-W theory of "
                     "docs/theory.md §13.2, which is not implemented; simulate them with sa.simulate(heads=...)")
        for k in range(r):
            wk.append(math.sqrt(s[k] / H) * U[:, k])
            wq.append(math.sqrt(s[k] / H) * Vt[k])
    if not wk:
        wk, wq = [np.zeros(p)], [np.zeros(p)]
    mu = np.zeros(p) if mu is None else np.asarray(mu, dtype=float)
    V = np.vstack([mu[None, :], np.array(wk), np.array(wq)])
    return V @ V.T, len(wk)


def sum_heads_error(ctx, c, gamma, a1, s2, d, heads, mu=None, point_info=None):
    r"""E of the sum readout Φ = X Σ_h K_h for heads of the paper's form: E_A(γ/H²; W̄).

    Σ_h K_h = H K̄ + o(1), K̄ the kernel of W̄ (:func:`head_geometry`), so M_sum = H² M̄ and
    E_sum(γ) = E_A(γ/H²; a1, s², d, W̄) (docs/theory.md §13.2).

    Parameters
    ----------
    ctx, c, gamma, a1, s2, d : as for :func:`residual_error`
    heads : sequence of (p, p) arrays
    mu : (p,) array or None

    Returns
    -------
    E, F : arrays (P,), F(γ) = F̄(γ/H²)/... (F of the summed features)
    sol : BulkSolution

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> E2, _, _ = sum_heads_error(ctx, 0.5, [0.4], 1.0, 0.5, 0.0, [np.eye(4)] * 2)
    >>> E1, _, _ = solver.attention_error(ctx, 0.5, [0.1], 1.0, 0.5, 0.0, np.zeros((3, 3)), 1)
    >>> bool(abs(E2[0] - E1[0]) < 1e-12)
    True
    """
    gram, rank = head_geometry(heads, mu)
    H = len(heads)
    g = np.asarray(gamma, dtype=ctx.dtype) / (H * H)
    E, F, sol = solver.attention_error(ctx, c, g, a1, s2, d, ctx.convert(gram), rank, point_info=point_info)
    return E, F / (H * H), sol


def softmax_constants(ctx, tau):
    r"""(a1, s², d) of ĝ(t) = exp(t/τ − 1/(2τ²)) − 1, the centred, normalised exp kernel.

    a1 = E[ξ ĝ(ξ)] = 1/τ, ν = E ĝ(ξ)² = e^{1/τ²} − 1, s² = ν − a1², d = 0: the limit of the
    diagonal (the softmax excludes i from row i); :func:`softmax_error` uses its finite-n value
    d_n = −1/√p (docs/theory.md §13.3).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> a1, s2, d = softmax_constants(FloatContext(), 1.0)
    >>> float(a1), round(float(s2), 12), d
    (1.0, 0.718281828459, 0)
    """
    tau = ctx.convert(tau)
    a1 = 1 / tau
    return a1, ctx.exp(1 / (tau * tau)) - 1 - a1 * a1, 0


def softmax_scale(n: int, p: int) -> float:
    r"""ε² = p/(n − 1)²: the scale of the softmax layer's ridge, γ = ε² γ̂ (docs/theory.md §13.3).

    Examples
    --------
    >>> softmax_scale(101, 50)
    0.005
    """
    return p / (n - 1) ** 2


def softmax_regime(n: int, tau: float, diagonal: str) -> float:
    r"""Refuse a softmax layer outside the regime of the reduction; return the row-sum spread.

    The reduction K = 11ᵀ/n + εK̂P + o(ε) needs (docs/theory.md §13.3):

    - the diagonal excluded (``diagonal='zero'``): with it, x_iᵀWx_i/(τ√p) ≈ √p/τ makes
      K_ii = 1 − O(n e^{1/(2τ²)−√p/τ}), K → I and E → E_LR;
    - concentrated row sums: their relative spread √((e^{1/τ²} − 1)/(n − 1)) at most
      :data:`SOFTMAX_ROW_CV_MAX` = 0.06, i.e. n ≥ 1 + (e^{1/τ²} − 1)/0.0036 (τ = 1: n ≥ 479; τ = 0.7:
      n ≥ 1862; τ = 0.5: n ≥ 14900). The threshold is empirical (docs/theory.md §13.3): at n = 1000,
      τ = 0.7 (spread 0.082) missed the Monte Carlo by up to 24 % at c = 2, τ = 1 (0.041) met it.

    Returns
    -------
    float
        The row-sum spread.

    Examples
    --------
    >>> round(softmax_regime(1000, 1.0, "zero"), 4)
    0.0415
    >>> softmax_regime(1000, 0.3, "zero")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid temperature=0.3...
    """
    if diagonal != "zero":
        raise ParameterError(
            "diagonal", diagonal, "'zero' for the softmax theory (the softmax over l != i)",
            hint="with the diagonal in the softmax, x_i'Wx_i/(tau sqrt p) ~ sqrt(p)/tau dominates every row: "
                 "K -> I and E_A -> E_LR (docs/theory.md §13.3); simulate it with sa.simulate(kernel='softmax')")
    cv = math.sqrt(math.expm1(1.0 / (tau * tau)) / (n - 1)) if 1.0 / (tau * tau) < 700 else math.inf
    if not cv <= SOFTMAX_ROW_CV_MAX:
        tmin = 1.0 / math.sqrt(math.log1p(SOFTMAX_ROW_CV_MAX**2 * (n - 1)))
        raise ParameterError(
            "temperature", tau, f"temperature >= {tmin:.4g} at n = {n} (the softmax row sums concentrate)",
            hint=f"the relative spread of a row sum, sqrt((e^(1/tau^2) - 1)/(n - 1)) = {cv:.3g}, exceeds "
                 f"{SOFTMAX_ROW_CV_MAX:g}: the reduction to the entrywise exp kernel (docs/theory.md §13.3) "
                 "does not hold; increase n or the temperature")
    return cv


def softmax_error(ctx, c, gamma, n: int, tau, gram, rank: int, point_info=None):
    r"""E of the softmax layer at the ridge γ: E_A(γ/ε²; ĝ_τ, d_n = −1/√p), ε² = p/(n − 1)².

    (docs/theory.md §13.3; :func:`softmax_constants`, :func:`softmax_scale`.) The rows' self-exclusion
    K = D⁻¹((11ᵀ − I)/(n − 1) + εK̂) puts −I/(n − 1) = ε·(−I/√p) on the diagonal: the finite-n
    diagonal d_n = −1/√p of the entrywise kernel K̂ (d = 0 in the limit). At large τ, where K̂ is
    small, leaving it out (d = 0) misses the Monte Carlo by up to −8 % at n = 1000 (c = 2, τ = 3,
    γ̂ = 0.01); with it the gap is 0.3 %. The regime (:func:`softmax_regime`) is checked by the caller.

    Parameters
    ----------
    ctx, c, gamma : as for :func:`residual_error` (γ the ridge of the softmax layer itself)
    n : int
        Tokens; p = round(c n).
    tau : float
        The temperature.
    gram, rank : the geometry of (μ, w_K, w_Q).

    Returns
    -------
    E : array (P,)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> E = softmax_error(FloatContext(), 0.5, [5e-4], 1000, 1.0, np.zeros((3, 3)), 1)
    >>> bool(0.5 < E[0] < 1)
    True
    """
    c = np.atleast_1d(np.asarray(c, dtype=float))
    gamma = np.atleast_1d(np.asarray(gamma, dtype=ctx.dtype))
    c, gamma = np.broadcast_arrays(c, gamma)
    ps = [int(round(ci * n)) for ci in c.reshape(-1)]
    scale = np.array([softmax_scale(n, p) for p in ps])
    a1, s2, _ = softmax_constants(ctx, tau)
    d_n = np.array([-1 / ctx.sqrt(ctx.convert(p)) for p in ps], dtype=ctx.dtype)
    g = gamma.reshape(-1) / (scale if ctx.dps is None else np.array([ctx.convert(v) for v in scale], dtype=object))
    E, _, _ = solver.attention_error(ctx, ctx.convert(c.reshape(-1)), g, a1, s2, d_n, gram, rank,
                                     point_info=point_info)
    return E
