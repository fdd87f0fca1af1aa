r"""The generalisation (test) error of the ridge readout: theory of docs/theory.md §14.

The readout is fitted on one sequence, β = (ΦΦᵀ/n + γ)^{-1}Φy/n, and tested on a fresh sequence
(X′, y′) of the same law (same μ and W): E_test(γ) = E (1/n)‖y′ − Φ′ᵀβ‖². Since (X′, y′) is
independent of β,

    E_test = 1 − 2 βᵀm + βᵀ C β,   m = E[Φ′y′]/n,   C = E[Φ′Φ′ᵀ]/n,

exactly. The test moments m, C are population quantities (:func:`population_moments`); the readout
enters only through ‖β‖² = F − E_train/γ and its overlaps βᵀv with v ∈ (μ, w_K, w_Q)
(:func:`readout_overlaps`), both from the training theory's Woodbury step.
"""
from __future__ import annotations

import warnings
from functools import lru_cache

import numpy as np

from .errors import ParameterError

# ----------------------------------------------------------------------------- span(μ, w_K, w_Q)
def span_product(A, B, gram):
    r"""The product of two operators αI + VAVᵀ and βI + VBVᵀ on R^p, V = [μ, w_K, w_Q] with VᵀV = 𝔊:
    (αβ, αB + βA + A𝔊B) (docs/theory.md §14.2; also used by :mod:`symattn.temporal`, §15.6).

    Parameters
    ----------
    A, B : tuple
        ``(scalar, k×k matrix)`` pairs.
    gram : numpy.ndarray
        𝔊, k×k.

    Returns
    -------
    tuple
        ``(scalar, k×k matrix)`` of the product.

    Examples
    --------
    >>> g = np.array([[2.0]])                       # V = μ, ‖μ‖² = 2: Σ = I + μμᵀ is (1, [[1]])
    >>> a, M = span_product((1.0, np.eye(1)), (1.0, np.eye(1)), g)
    >>> a, M.tolist()                               # Σ² = I + (2 + ‖μ‖²) μμᵀ
    (1.0, [[4.0]])
    """
    (a, Am), (b, Bm) = A, B
    return a * b, a * Bm + b * Am + Am @ gram @ Bm


def population_moments(a1, s2, d, c, gram, rank: int, model: str = "attention"):
    r"""The test moments m = E[Φ′y′]/n and C = E[Φ′Φ′ᵀ]/n in the span of V = [μ, w_K^(1..r), w_Q^(1..r)].

    For the linearised kernel K = a1(XᵀWX/p − I) + sN/√p + dI (docs/theory.md §4) each feature
    column is φ_j = a1 S_{−j}Wx_j + d x_j + sX_{−j}n_j/√p (S_{−j} = Σ_{i≠j}x_ix_iᵀ/p, independent of
    x_j), so with Σ = E[xxᵀ] = I + μμᵀ, E[S] = Σ/c and E[SAS] = ΣAΣ/c² + (tr AΣ/p)Σ/c
    (tr AΣ/p → 1 for A = WΣWᵀ, W = I + low rank):

    .. math::

        m = \frac{a_1}{c}\Sigma W\mu + d\,\mu,\qquad
        C = \frac{a_1^2}{c^2}\Sigma W\Sigma W^\top\Sigma + \Big(\frac{a_1^2}{c} + d^2 + \frac{s^2}{c}\Big)\Sigma
            + \frac{a_1d}{c}\big(\Sigma W\Sigma + \Sigma W^\top\Sigma\big).

    Linear regression (Φ = X): m = μ, C = Σ.

    Parameters
    ----------
    a1, s2, d : float
        The kernel constants a1, s² = ν − a1² and the diagonal d (or d_n).
    c : float
        p/n.
    gram : numpy.ndarray
        𝔊, the (1+2r)×(1+2r) Gram matrix of (μ, w_K, w_Q).
    rank : int
        r.
    model : {'attention', 'linear'}

    Returns
    -------
    tuple
        ``(m_coef, C_scalar, C_matrix)``: m = V m_coef and C = C_scalar I + V C_matrix Vᵀ.

    Examples
    --------
    >>> m, Cs, Cm = population_moments(0.6, 0.03, 0.0, 0.5, np.zeros((3, 3)), 1)
    >>> round(Cs, 6)          # μ = w = 0: C = (a1²/c² + a1²/c + s²/c) I
    2.22
    """
    k = gram.shape[0]
    zero = np.zeros((k, k), dtype=gram.dtype)
    e0 = np.zeros(k, dtype=gram.dtype)
    e0[0] = 1
    sig = (1, zero.copy())
    sig[1][0, 0] = 1
    if model == "linear":
        return e0, 1, sig[1]
    P = zero.copy()
    for j in range(rank):
        P[1 + j, 1 + rank + j] = 1
    W, WT = (1, P), (1, P.T.copy())

    def mul(*ops):
        out = ops[0]
        for o in ops[1:]:
            out = span_product(out, o, gram)
        return out

    SW = mul(sig, W)
    m = (a1 / c) * (SW[0] * e0 + SW[1] @ gram @ e0) + d * e0
    big = mul(sig, W, sig, WT, sig)
    SWS, SWTS = mul(SW, sig), mul(sig, WT, sig)
    iso = a1 * a1 / c + d * d + s2 / c
    Cs = (a1 * a1 / (c * c)) * big[0] + iso * sig[0] + (a1 * d / c) * (SWS[0] + SWTS[0])
    Cm = (a1 * a1 / (c * c)) * big[1] + iso * sig[1] + (a1 * d / c) * (SWS[1] + SWTS[1])
    return m, Cs, Cm


# ----------------------------------------------------------------------------- finite n
#: the Gauss–Legendre panels of the two finite-n expectations (r = ‖x‖/√p and t ~ N(0, 1))
_R_OFFSETS = (-40, -20, -12, -8, -6, -4, -3, -2, -1, 0, 1, 2, 3, 4, 6, 8, 12, 20, 40)
_T_EDGES = np.linspace(-14.0, 14.0, 57)


def _t_moments(act, r):
    """(E f(rt)², E t²f(rt)², E t f(rt)) for t ~ N(0, 1), each a (len(r),) array: composite Gauss–Legendre
    in t on [−14, 14], split at the kinks of f (t = k/r), 16 nodes a panel; f is the centred activation."""
    kinks = np.array([k for k in act.kinks], dtype=float)
    cuts = np.clip(kinks[None, :] / r[:, None], -14.0, 14.0)
    edges = np.sort(np.concatenate([np.broadcast_to(_T_EDGES, (r.size, _T_EDGES.size)), cuts], axis=1), axis=1)
    xg, wg = np.polynomial.legendre.leggauss(16)
    a, b = edges[:, :-1, None], edges[:, 1:, None]
    t = ((a + b) / 2 + (b - a) / 2 * xg).reshape(r.size, -1)
    w = ((b - a) / 2 * wg).reshape(r.size, -1) * np.exp(-t * t / 2) / np.sqrt(2 * np.pi)
    with np.errstate(over="ignore", invalid="ignore"):
        ft = np.asarray(act.numpy(r[:, None] * t), dtype=float)
    return np.sum(w * ft * ft, axis=1), np.sum(w * t * t * ft * ft, axis=1), np.sum(w * t * ft, axis=1)


@lru_cache(maxsize=256)
def finite_n_scale(f, p: int, n: int, diagonal: str = "f") -> float:
    r"""The exact isotropic test moment C_s = E‖φ′_j‖²/p of n tokens in p dimensions, μ = 0, W = I
    (docs/theory.md §14.10).

    Column j of Φ′ = X′K′ is φ_j = Σ_{i≠j} x_i f(ξ_ij)/√p + d_j x_j, ξ_ij = x_iᵀx_j/√p, d_j = f(‖x_j‖²/√p)/√p
    (0 with ``diagonal='zero'``), f centred. Given x_j, with r = ‖x_j‖/√p and t ~ N(0, 1) the coordinate
    of x_i along x_j, the x_i (i ≠ j) are independent, so exactly

    .. math::

        p\,C_s = \mathbb E_r\Big[\frac{n-1}{p}\big((p-1)A(r) + B(r)\big) + \frac{(n-1)(n-2)}{p}h(r)^2
                 + 2(n-1)\,d(r)\,r\,h(r) + p\,d(r)^2r^2\Big],

    A = E f(rt)², B = E t²f(rt)², h = E t f(rt), r² ~ χ²_p/p. Its limit is the linearised
    C_s = (a1/c + d)² + ν/c of :func:`population_moments` (c = p/n); the difference is O(1/n), and it is what
    a kernel with a1 = 0 misses at finite n (He3: +17/p relative).

    Parameters
    ----------
    f : str or Activation
    p, n : int
        Dimension and tokens.
    diagonal : {'f', 'zero'}

    Returns
    -------
    float

    Examples
    --------
    He3 with its diagonal zeroed: A = 15u³ − 18u² + 9u, B = 105u³ − 90u² + 27u, h² = 9u(u − 1)² in u = r²,
    with E u = 1, E u² = 1 + 2/p, E u³ = (1 + 2/p)(1 + 4/p):

    >>> p, n = 100, 50
    >>> Eu = [1.0, 1 + 2 / p, (1 + 2 / p) * (1 + 4 / p)]
    >>> A, B, h2 = (15 * Eu[2] - 18 * Eu[1] + 9), (105 * Eu[2] - 90 * Eu[1] + 27), 9 * (Eu[2] - 2 * Eu[1] + 1)
    >>> closed = ((n - 1) * ((p - 1) * A + B) + (n - 1) * (n - 2) * h2) / p**2
    >>> abs(finite_n_scale("he3", p, n, "zero") / closed - 1) < 1e-12
    True
    """
    from scipy import stats

    from .activations.activation import Activation, activation

    act = f if isinstance(f, Activation) else activation(f)
    sqp = np.sqrt(p)
    edges = np.array(sorted({max(0.0, sqp + o) for o in _R_OFFSETS}))
    xg, wg = np.polynomial.legendre.leggauss(32)
    a, b = edges[:-1, None], edges[1:, None]
    R = ((a + b) / 2 + (b - a) / 2 * xg).ravel()
    wR = ((b - a) / 2 * wg).ravel() * 2 * R * stats.chi2(p).pdf(R * R)
    keep = wR > 1e-300
    R, wR = R[keep], wR[keep]
    r = R / sqp
    A, B, h = _t_moments(act, r)
    if diagonal == "zero":
        d = np.zeros_like(r)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            d = (np.asarray(act.numpy(sqp * r * r), dtype=float)) / sqp
    val = ((n - 1) / p**2 * ((p - 1) * A + B) + (n - 1) * (n - 2) / p**2 * h * h + 2 * (n - 1) / p * d * r * h
           + d * d * r * r)
    return float(np.sum(wR * val) / np.sum(wR))


def finite_n_shift(f, a1, nu, d, c, n: int, diagonal: str = "f") -> float:
    r"""δC_s = C_s(n) − [(a1/c + d)² + ν/c]: the O(1/n) part of the isotropic test moment that the
    linearisation drops (:func:`finite_n_scale` at p = round(c·n), μ = 0, W = I; docs/theory.md §14.10).

    Parameters
    ----------
    f : str or Activation
    a1, nu, d : float
        The kernel constants a1, ν and the diagonal the linearised C_s is written with (d_n at ‖μ‖² = 0, or 0
        for ``diagonal='zero'``).
    c : float
        p/n (p = round(c·n)).
    n : int
        Tokens.
    diagonal : {'f', 'zero'}

    Returns
    -------
    float

    Examples
    --------
    >>> s = finite_n_shift("he3", 0.0, 6.0, 0.0, 1.0, 1000, "zero")
    >>> 0.015 < s / 6.0 < 0.02             # He3: about +17/p relative
    True
    """
    p = max(1, int(round(float(c) * n)))
    cf = p / n
    return finite_n_scale(f, p, int(n), diagonal) - ((a1 / cf + d) ** 2 + nu / cf)


# ----------------------------------------------------------------------------- the readout β
def readout_overlaps(result):
    r"""βᵀv for v = μ, w_K^(1..r), w_Q^(1..r) at a solved point of the attention theory (docs/theory.md §14.3).

    β = (Φ/√n)Qŷ is the p-block of H^{-1}[ŷ; 0], so βᵀv = [0; v]ᵀH^{-1}[ŷ; 0]. Woodbury on
    H = H0 + UĈUᵀ (§6.6) with v added to the p-basis at zero coupling gives
    βᵀv = R_v · w, w = (I + ĈΓ)^{-1}e_{b0} (the solver's own vector, F = (Γw)_0), where R_v, the
    Gram row of v against the basis, is that of a0 = μ with 𝔊_{0l} replaced by 𝔊_{vl}:

    .. math::

        R_v[b_{2+l}] = \mathfrak G_{vl}T_{QK}^{(1)}/\sqrt c,\quad R_v[a_0] = \mathfrak G_{v0}(T_{KQK}^{(1)} - 1),\quad
        R_v[a_{2+l}] = \mathfrak G_{vl}(T_{KQK}^{(2)} - 1/c),

    and 0 against b0, b1, a1 (they carry ŷ, independent of Z and N).

    Parameters
    ----------
    result : symattn.theory.TheoryResult
        A result of the asymptotic attention theory (model 'attention' or 'both').

    Returns
    -------
    numpy.ndarray
        Shape ``result.shape + (1 + 2r,)``, in the result's numbers.

    Examples
    --------
    >>> from symattn import Geometry
    >>> from symattn.theory import solve
    >>> r = solve("tanh", c=0.5, gamma=1.0, geometry=Geometry.aligned(1.0))
    >>> o = readout_overlaps(r)
    >>> bool(np.allclose(o, o[..., :1]))          # w_K = w_Q = μ: the three overlaps agree
    True
    """
    G, Gam, Ch = result.gram, result.Gamma, result.C_hat
    rank = (G.shape[0] - 1) // 2
    N = 3 + 2 * rank
    ctx = _context(result)
    P = int(np.prod(result.shape, dtype=int))
    Gam = np.asarray(Gam).reshape(P, 2 * N, 2 * N)
    Ch = np.asarray(Ch).reshape(P, 2 * N, 2 * N)
    T = np.asarray(result.traces["T_QK1"]).reshape(P)
    U1 = np.asarray(result.centred_traces["U_KQK1"]).reshape(P)
    U2 = np.asarray(result.centred_traces["U_KQK2"]).reshape(P)
    with ctx:
        out = _overlap_rows(ctx, G, Gam, Ch, T, U1, U2, np.broadcast_to(result.c, result.shape).reshape(P), N)
    return out.reshape(result.shape + (G.shape[0],))


def _overlap_rows(ctx, G, Gam, Ch, T, U1, U2, c, N):
    P = Gam.shape[0]
    gram = ctx.convert(G)
    out = np.full((P, G.shape[0]), np.nan, dtype=Gam.dtype)
    ok = np.array([bool(np.all(ctx.isfinite(Gam[i]))) and bool(np.all(ctx.isfinite(Ch[i]))) for i in range(P)])
    if ok.any():
        eye = ctx.convert(np.eye(2 * N))
        e0 = eye[0]
        A = eye[None] + Ch[ok] @ Gam[ok]
        w = ctx.solve(A, np.broadcast_to(e0, (int(ok.sum()), 2 * N)))
        sqc = ctx.sqrt(ctx.convert(c)[ok])
        wb, wa0, wa = w[:, 2:N], w[:, N], w[:, N + 2:]
        out[ok] = ((T[ok] / sqc)[:, None] * (wb @ gram.T) + U2[ok][:, None] * (wa @ gram.T)
                   + (U1[ok] * wa0)[:, None] * gram[:, 0][None, :])
    return out


def _context(result):
    from .backends.context import context

    return context(result.parameters["backend"], result.parameters["dps"])


def error_from_readout(E_train, F, gamma, overlaps, moments):
    r"""E_test = 1 − 2 oᵀm + C_s‖β‖² + oᵀC_m o with ‖β‖² = F − E_train/γ (docs/theory.md §14.1).

    ‖β‖² = ŷᵀQ(ΦᵀΦ/n)Qŷ = ŷᵀQŷ − γŷᵀQ²ŷ; o = Vᵀβ are the overlaps and (m, C_s, C_m) the test
    moments of :func:`population_moments` (m = V m_coef, C = C_s I + V C_m Vᵀ).

    Parameters
    ----------
    E_train, F, gamma : array_like
        The training error, F(γ) and γ, broadcast together.
    overlaps : array_like
        o, shape ``broadcast + (1 + 2r,)``.
    moments : tuple
        ``(m_coef, C_scalar, C_matrix)``, or a sequence of them per point (then shape ``(P, ...)``).

    Returns
    -------
    tuple
        ``(E_test, norm2)``: the test error and ‖β‖².

    Examples
    --------
    >>> m = population_moments(0.0, 0.0, 0.0, 1.0, np.eye(3), 1, model="linear")
    >>> E, b2 = error_from_readout(0.5, 1.0, 1.0, np.array([0.2, 0.0, 0.0]), m)
    >>> round(float(b2), 12), round(float(E), 12)     # 1 − 2·0.2 + 0.5 + 0.2²
    (0.5, 1.14)
    """
    m, Cs, Cm = moments
    norm2 = F - E_train / gamma
    o = np.asarray(overlaps)
    lin = (o * np.asarray(m)).sum(axis=-1)
    quad = (o * np.einsum("...ij,...j->...i", np.asarray(Cm), o)).sum(axis=-1)
    return 1 - 2 * lin + np.asarray(Cs) * norm2 + quad, norm2


def linear_overlaps(ctx, c, gamma, gram, F):
    r"""βᵀv of ridge regression on X, v = μ, w_K, w_Q (docs/theory.md §14.3).

    With XᵀX/n = ZᵀZ/n + U C Uᵀ, U = [ŷ, Zᵀμ/√n], C = [[m2, 1], [1, 0]] (§3), Woodbury gives
    βᵀμ = m2 γ m̃ F_LR, m̃ = [−(1−c+γ) + √((1−c+γ)² + 4cγ)]/(2cγ); by the invariance of Z on the
    complement of μ, βᵀw = (μᵀw/m2) βᵀμ.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> o = linear_overlaps(FloatContext(), 1.0, 0.5, np.ones((3, 3)), 0.5)
    >>> o.round(6).tolist()      # c = 1, γ = ½: m̃ = (−½ + √(¼ + 2))/1 = 1, βᵀμ = 1·½·1·½
    [0.25, 0.25, 0.25]
    """
    c, gamma, F = ctx.convert(c), ctx.convert(gamma), ctx.convert(F)
    G = ctx.convert(gram)
    m2 = G[0, 0]
    if m2 == 0:
        return np.zeros(np.shape(F) + (G.shape[0],), dtype=np.asarray(F).dtype) * F[..., None]
    b = 1 - c + gamma
    root = ctx.sqrt(b * b + 4 * c * gamma)
    # the two forms of the same root, each free of cancellation on its side of b = 0
    mt = np.where(np.asarray(ctx.to_float(b)) > 0, 2 / (b + root), (root - b) / (2 * c * gamma))
    o0 = m2 * gamma * mt * F
    return o0[..., None] * (G[0] / m2)


def best_linear_error(ctx, m, Cs, Cm, gram):
    r"""1 − mᵀC⁻¹m, the test error of the best readout β* = C⁻¹m: no β has a lower E_test (docs/theory.md §14.1).

    With m = V m_V and C = C_s I + V C_V Vᵀ, C⁻¹V b = V(C_s I + C_V𝔊)⁻¹b, so
    mᵀC⁻¹m = m_Vᵀ𝔊(C_s I + C_V𝔊)⁻¹m_V.

    Parameters
    ----------
    ctx : context
        The arithmetic (:func:`symattn.backends.context.context`).
    m, Cs, Cm : array_like
        The test moments of :func:`population_moments`, stacked per point: shapes (P, k), (P,), (P, k, k).
    gram : array_like
        𝔊 = VᵀV, k×k.

    Returns
    -------
    numpy.ndarray
        Shape (P,).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> m, Cs, Cm = population_moments(0, 0, 0, 1, 2.0 * np.ones((3, 3)), 1, model="linear")
    >>> E = best_linear_error(FloatContext(), m[None], np.array([Cs]), Cm[None], 2.0 * np.ones((3, 3)))
    >>> round(float(E[0]), 12)           # linear regression, ‖μ‖² = 2: σ² = 1/(1 + 2)
    0.333333333333
    """
    gram = ctx.convert(gram)
    k = gram.shape[0]
    A = np.asarray(Cs)[:, None, None] * ctx.convert(np.eye(k))[None] + np.asarray(Cm) @ gram
    x = ctx.solve(A, np.asarray(m))
    return 1 - np.einsum("pi,ij,pj->p", np.asarray(m), gram, x)


def _cancellation(ctx, E, F, gamma, Cs, E_test, rel):
    """The estimated relative error of E_test from ‖β‖² = F − E/γ: two numbers of size F ≈ (1 − c)/γ
    at c < 1, γ → 0, known to a relative ``rel`` (the training theory's estimate, at least 64 ulps)."""
    floor = 64 * ctx.eps
    rel = np.full(len(E), floor) if rel is None else np.maximum(np.nan_to_num(rel, nan=np.inf), floor)
    size = np.abs(ctx.to_float(F)) + np.abs(ctx.to_float(E / gamma))
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.abs(ctx.to_float(Cs)) * rel * size / np.abs(ctx.to_float(E_test))
    return np.where(np.isfinite(est), est, np.inf)


def _escalate(ctx, vals, est, cf, g, name, rerun):
    """Points whose float64 E_test is above the precision target are solved again in mpmath, at each
    level of the digits ladder in turn (as :func:`symattn.theory.solve` does for E_A); ``vals`` and
    ``est`` are updated in place."""
    from .theory import ESCALATION_DPS, PRECISION_TARGET

    if not ctx.escalates:
        return
    for dps in ctx.ladder(ESCALATION_DPS):
        idx = np.flatnonzero(est > PRECISION_TARGET)
        if not idx.size:
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the coarser level's warnings: the checks below speak for the point
            hi = solve_test(c=cf[idx], gamma=np.asarray(ctx.to_float(g[idx]), dtype=float), model=name,
                            backend="mpmath", dps=dps, errors="nan", **rerun)
        got = np.asarray(getattr(hi, name), dtype=float).reshape(-1)
        vals["E_test"][idx] = got
        for key in ("E_train", "norm2"):
            vals[key][idx] = np.asarray(hi.readout[name][key], dtype=float).reshape(-1)
        vals["overlaps"][idx] = np.asarray(hi.readout[name]["overlaps"], dtype=float).reshape(len(idx), -1)
        est[idx] = np.where(np.isfinite(got), 64.0 * 10.0 ** -dps, np.inf)


def _check_test(ctx, E_test, floor, est, unsolved):
    """Reasons, point by point, why an E_test is not a result: not finite, negative, below the best
    readout's error 1 − mᵀC⁻¹m, or not resolved within the precision limit. Points whose training
    theory already failed (``unsolved``) are NaN with that failure's reason."""
    from .theory import PRECISION_LIMIT

    v = np.asarray(ctx.to_float(E_test), dtype=float)
    lo = np.asarray(ctx.to_float(floor), dtype=float)
    reasons = {}
    for i in np.flatnonzero(~unsolved):
        slack = 1e-12 + (est[i] if np.isfinite(est[i]) else 0.0) * abs(v[i])
        if not np.isfinite(v[i]) or v[i] < 0:
            reasons[i] = f"impossible value E_test={v[i]!r} (not a finite mean square)"
        elif v[i] < lo[i] - slack:
            reasons[i] = (f"impossible value E_test={v[i]:.6g}, below the best readout's 1 − mᵀC⁻¹m = {lo[i]:.6g} "
                          "(docs/theory.md §14.1)")
        elif not est[i] <= PRECISION_LIMIT:
            reasons[i] = (f"precision: estimated relative error {est[i]:.2g} of E_test={v[i]:.6g} "
                          "(‖β‖² = F − E/γ cancels at small c·γ), even with mpmath")
    return reasons


def check_test_gamma(gamma):
    """The ridge of the test-error theory: 0 < γ <= 1e12 (no ridgeless value), as a float array.

    Examples
    --------
    >>> check_test_gamma([0.1, 1.0]).tolist()
    [0.1, 1.0]
    >>> check_test_gamma(0.0)
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid gamma=0.0: allowed 0 < gamma <= 1e+12 for the test error. the test-error theory is solved at gamma > 0 only; its gamma -> 0 limit is finite only for c < 1, or c > 1 with a kernel diagonal d != 0 (docs/theory.md §14.5): take a small gamma
    """
    from .model import check_gamma

    try:
        return check_gamma(gamma)
    except ParameterError as exc:
        ridgeless = ("the test-error theory is solved at gamma > 0 only; its gamma -> 0 limit is finite only for "
                     "c < 1, or c > 1 with a kernel diagonal d != 0 (docs/theory.md §14.5): take a small gamma")
        raise ParameterError("gamma", exc.value, exc.allowed + " for the test error",
                             hint=ridgeless if exc.allowed.startswith("0 <") else "") from None


def _kernel_d(constants, P):
    """d (or d_n) per point, flat (P,)."""
    d = np.asarray(constants.d, dtype=object if not isinstance(constants.d, (float, int, np.ndarray))
                   else None)
    return np.broadcast_to(d.reshape(-1) if d.ndim else d, (P,))


def _finite_n_shifts(f, k, cf, n: int, diagonal: str) -> list:
    """:func:`finite_n_shift` at each point's c (float; computed once per distinct c)."""
    from .activations.activation import Activation, activation

    act = f if isinstance(f, Activation) else activation(f)
    a1, nu = float(k.a1), float(k.s2) + float(k.a1) ** 2
    out = {}
    for c in np.unique(cf):
        p = max(1, int(round(float(c) * n)))
        d = 0.0 if diagonal == "zero" else act.d_n(p)
        out[float(c)] = finite_n_shift(act, a1, nu, d, float(c), n, diagonal)
    return [out[float(c)] for c in cf]


def solve_test(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention", backend: str = "numpy",
               dps: int | None = None, n: int | None = None, diagonal: str = "f", errors: str = "raise",
               method: str | None = None):
    r"""The deterministic-equivalent test (generalisation) error E_test(γ) of the paper's model (docs/theory.md §14).

    E_test = 1 − 2βᵀm + βᵀCβ (exact, β independent of the test sequence), with the test moments m, C of
    :func:`population_moments`, ‖β‖² = F − E_train/γ and the overlaps Vᵀβ of :func:`readout_overlaps`
    (attention) or :func:`linear_overlaps` (linear regression), all from :func:`symattn.theory.solve`.

    Parameters
    ----------
    f, c, gamma, geometry, model, backend, dps, n, diagonal, errors, method
        As :func:`symattn.theory.solve` (γ > 0; no finite-p correction: it has no traces). With ``n``, the
        isotropic test moment C_s carries its exact O(1/n) part (:func:`finite_n_shift`, docs/theory.md §14.10).

    Returns
    -------
    TheoryResult
        ``attention``/``linear`` hold E_test, ``error`` is 'test', and ``readout[model]`` holds
        ``E_train``, ``norm2`` (‖β‖²) and ``overlaps`` (βᵀμ, βᵀw_K, βᵀw_Q).

    Raises
    ------
    ConvergenceError
        When a point's E_test is not finite, negative, below the best readout's 1 − mᵀC⁻¹m
        (:func:`best_linear_error`), or not resolved to 1e-3 relative even in mpmath (``errors='raise'``;
        with ``errors='nan'`` the point is NaN, listed in ``failures``, with a FailedPointsWarning).

    Warns
    -----
    PrecisionWarning
        For values returned with an estimated relative error above 1e-8. Float64 points where
        ‖β‖² = F − E_train/γ cancels (c·γ → 0 at c < 1) are first solved again in mpmath at 30, then 60 digits.

    Examples
    --------
    >>> from symattn import Geometry
    >>> r = solve_test("tanh", c=0.5, gamma=[0.1, 1.0], model="both")
    >>> bool(np.all(r.attention > r.linear) and np.all(r.linear > 1))   # μ = 0: E_test = 1 + C‖β‖² > 1
    True
    >>> r = solve_test("tanh", c=0.5, gamma=1.0, geometry=Geometry.aligned(2.0), model="both")
    >>> bool(r.attention < 1 and r.linear < 1)                          # a signal: both beat the zero predictor
    True
    """
    from .errors import ConvergenceError, FailedPointsWarning, PrecisionWarning
    from .model import as_geometry
    from .theory import PRECISION_TARGET, TheoryResult, solve

    check_test_gamma(gamma)
    r = solve(f, c=c, gamma=gamma, geometry=geometry, model=model, backend=backend, dps=dps, n=n,
              diagonal=diagonal, errors=errors, method=method)
    geo = as_geometry(geometry)
    ctx = _context(r)
    shape, P = r.shape, int(np.prod(r.shape, dtype=int))
    cf = np.broadcast_to(r.c, shape).reshape(P).astype(float)
    g = ctx.convert(np.broadcast_to(r.gamma, shape).reshape(P))
    rerun = dict(f=f, geometry=geometry, n=n, diagonal=diagonal, method=method)
    failures, imprecise, out, readout, estimates = [], [], {}, {}, {}
    with ctx:   # mpmath numbers at the result's digits
        for name in ("attention", "linear") if model == "both" else (model,):
            E = ctx.convert(np.asarray(getattr(r, name)).reshape(P))
            F = ctx.convert(np.asarray(getattr(r, "F_" + name)).reshape(P))
            if name == "attention":
                o = readout_overlaps(r).reshape(P, -1)
                k = r.constants
                d = _kernel_d(k, P)
                moments = [population_moments(k.a1, k.s2, d[i], ctx.scalar(cf[i]), ctx.convert(geo.gram), geo.rank)
                           for i in range(P)]
                if n is not None:   # the O(1/n) part of C_s that the linearisation drops (§14.10)
                    moments = [(mo[0], mo[1] + ctx.scalar(shift), mo[2])
                               for mo, shift in zip(moments, _finite_n_shifts(f, k, cf, n, diagonal))]
                rel = None if r.precision is None else np.asarray(r.precision, dtype=float).reshape(P)
            else:
                o = linear_overlaps(ctx, cf, g, geo.gram, F).reshape(P, -1)
                moments = [population_moments(0, 0, 0, 1, ctx.convert(geo.gram), geo.rank, model="linear")] * P
                rel = None
            m = np.stack([mo[0] for mo in moments])
            Cs = np.array([mo[1] for mo in moments], dtype=o.dtype)
            Cm = np.stack([mo[2] for mo in moments])
            Et, norm2 = error_from_readout(E, F, g, o, (m, Cs, Cm))
            est = _cancellation(ctx, E, F, g, Cs, Et, rel)
            floor = best_linear_error(ctx, m, Cs, Cm, geo.gram)
            vals = {"E_test": Et, "E_train": E, "norm2": norm2, "overlaps": o}
            _escalate(ctx, vals, est, cf, g, name, rerun)
            Et = vals["E_test"]
            reasons = _check_test(ctx, Et, floor, est, ~np.asarray(ctx.isfinite(E)))
            for i, why in reasons.items():
                failures.append({"c": float(cf[i]), "gamma": float(g[i]), "model": name, "reason": why})
                Et[i] = np.nan
            imprecise += [{"c": float(cf[i]), "gamma": float(g[i]), "model": name, "estimate": float(est[i])}
                          for i in np.flatnonzero(est > PRECISION_TARGET) if i not in reasons]
            out[name], estimates[name] = Et.reshape(shape), est.reshape(shape)
            readout[name] = {"E_train": vals["E_train"].reshape(shape), "norm2": vals["norm2"].reshape(shape),
                             "overlaps": vals["overlaps"].reshape(shape + (o.shape[-1],))}
    if failures and errors == "raise":
        point = {k: v for k, v in failures[0].items() if k != "reason"}
        raise ConvergenceError(f"the test error of the {point['model']} model: {failures[0]['reason']}", point=point)
    if failures:
        r.failures.extend(failures)
        warnings.warn(FailedPointsWarning(f"{len(failures)} test-error point(s) failed and are NaN", r.failures),
                      stacklevel=2)
    if imprecise:
        warnings.warn(PrecisionWarning(f"{len(imprecise)} test-error value(s) with an estimated relative error above "
                                       f"{PRECISION_TARGET:g}", imprecise), stacklevel=2)
    return TheoryResult(c=r.c, gamma=r.gamma, model=model, attention=out.get("attention"), linear=out.get("linear"),
                        F_attention=r.F_attention, F_linear=r.F_linear, bulk=r.bulk, residuals=r.residuals,
                        iterations=r.iterations, precision=estimates.get("attention"), closed=r.closed,
                        failures=r.failures, parameters={**r.parameters, "error": "test"}, constants=r.constants,
                        error="test",
                        readout=readout)


# ----------------------------------------------------------------------------- a general W (docs/theory.md §14.9)
def general_w_test_moments(W, mu, c, a1, var_f, a0, d_mean, d_sq):
    r"""The test moments m = E[Φ′y′]/n and C = E[Φ′Φ′ᵀ]/n for a general p×p W (docs/theory.md §14.9), dense.

    Column j of Φ′ is φ_j = Σ_{i≠j} x_i f(x_iᵀWx_j/√p)/√p + x_j f(q_j)/√p. Averaging over the other tokens
    (the slope a1 = E f′ of the off-diagonal argument, its variance var_f = Var f, its mean a0, and the
    diagonal's moments d̄ = E f(q)/√p, d₂ = E f(q)²/p), with Σ = I + μμᵀ and balanced labels:

    .. math::

        m = \frac{a_1}c\Sigma W\mu + \bar d\mu,\qquad
        C = \frac{a_1^2}{c^2}\Sigma W\Sigma W^\top\Sigma + \Big(\frac{\mathrm{var}_f}c + d_2\Big)\Sigma
            + \frac{a_0^2}c I + \frac{a_1\bar d}c\big(\Sigma W\Sigma + \Sigma W^\top\Sigma\big).

    For W = I + low rank (var_f = ν, d̄² = d₂ = d², a0 = 0) this is :func:`population_moments`.

    Parameters
    ----------
    W : numpy.ndarray
        p×p.
    mu : numpy.ndarray
        The signal (length p).
    c : float
        p/n.
    a1, var_f, a0, d_mean, d_sq : float
        The constants above.

    Returns
    -------
    (m, C) : numpy.ndarray
        The p-vector m and the p×p matrix C.

    Examples
    --------
    >>> m, C = general_w_test_moments(np.eye(3), np.zeros(3), 0.5, 0.6, 0.39, 0.0, 0.0, 0.0)
    >>> bool(np.allclose(C, (0.36 / 0.25 + 0.39 / 0.5) * np.eye(3)))   # a1²/c² + ν/c
    True
    """
    p = W.shape[0]
    S = np.eye(p) + np.outer(mu, mu)
    SW, SWt = S @ W, S @ W.T
    m = (a1 / c) * (SW @ mu) + d_mean * mu
    C = ((a1 / c) ** 2 * (SW @ S @ SW.T) + (var_f / c + d_sq) * S + (a0 * a0 / c) * np.eye(p)
         + (a1 * d_mean / c) * (SW @ S + SWt @ S))
    return m, C


def general_w_test_error(f, c, gamma, W, mu=None, structure: str = "auto", diagonal: str = "f") -> dict:
    r"""The deterministic-equivalent test error of a layer with a general W at one c (docs/theory.md §14.9).

    E_test = 1 − 2β̄ᵀm + tr(C𝓑), the moments (m, C) of :func:`general_w_test_moments` at the kernel model's own
    constants and the readout's mean β̄ and second moment 𝓑 ≃ E[ββᵀ] from the linear response of the training
    pencil (:func:`symattn.backends.general_w_entry.general_readout`: the free-noise pencil of §12.2 or the
    Hermite blocks of §12.8, ``signal='linear'``).

    Parameters
    ----------
    f : Activation
    c : float
    gamma : array_like
        γ > 0.
    W : numpy.ndarray
    mu : array_like, optional
    structure : {'auto', 'blocks', 'free'}
    diagonal : {'f', 'zero'}

    Returns
    -------
    dict
        'E_test', 'E_train', 'norm2' (‖β‖² = tr 𝓑), 'overlap' (β̄ᵀμ), 'structure', the test moments 'm' and 'C',
        'readout' (the :class:`~symattn.backends.general_w.response.ReadoutMoments` per γ).

    Examples
    --------
    >>> from symattn import activation
    >>> out = general_w_test_error(activation("tanh"), 0.5, [0.1, 10.0], np.eye(24))
    >>> bool(np.all(out["E_test"] > 1))      # μ = 0: E_test = 1 + βᵀCβ
    True
    """
    from .backends.general_w_entry import general_readout

    out = general_readout(f, c, gamma, W, mu, structure=structure, diagonal=diagonal)
    return dict(readout_test_error(out), structure=out["structure"])


def readout_test_error(out) -> dict:
    r"""E_test = 1 − 2β̄ᵀm + tr(C𝓑) (docs/theory.md §14.9) from a training-theory solve with the readout's moments
    (:func:`symattn.backends.general_w.response.model_readout` or ``block_readout``): the test moments of
    :func:`general_w_test_moments` at the model's constants — W the model's (effective) W, a1 its slope,
    var_f = σ²c + Σ_blocks Σm² + a1² tr(WΣWᵀΣ)/p, a0 from its êêᵀ coefficient c_11 = a0 n/√p, and the diagonal's
    moments over its latent nodes, f(q)/√p = κ + a1 tr W/p (+1 for the residual, whose identity sits on the diagonal).

    Parameters
    ----------
    out : dict
        'model', 'moments', and optionally 'blocks' [(squared weights, ρu², ρv²), …] and 'nodes' {'kappa', 'w'}.

    Returns
    -------
    dict
        'E_test', 'E_train', 'norm2' (tr 𝓑), 'overlap' (β̄ᵀμ), the test moments 'm' and 'C', 'readout' (the moments).

    Examples
    --------
    >>> from symattn import activation
    >>> from symattn.backends.general_w.response import general_w_readout
    >>> out = readout_test_error(general_w_readout(activation("tanh"), 0.5, [1.0], np.eye(16)))
    >>> bool(out["E_test"][0] > 1), out["C"].shape
    (True, (16, 16))
    """
    from .backends.general_w.hermite import block_phi

    m = out["model"]
    p, W = m.p, np.asarray(m.W, dtype=float)
    mu = np.asarray(m.mu, dtype=float)
    S = np.eye(p) + np.outer(mu, mu)
    omega_s = float(np.sum((W @ S) * (S @ W))) / p        # tr(WΣWᵀΣ)/p: the variance of x_iᵀWx_j/√p
    a1 = float(m.a1)
    var_blocks = sum(float(np.real(block_phi(b[0], 0.0))) for b in out.get("blocks", []))
    var_f = float(m.sigma2 * m.c) + var_blocks + a1 * a1 * omega_s
    a0 = float(m.c_11) * np.sqrt(p) / m.n
    nodes = out.get("nodes") or {"kappa": m.kappa, "w": m.kw}
    diag = np.asarray(nodes["kappa"], dtype=float) + a1 * float(np.trace(W)) / p   # f(q)/√p at the nodes
    w = np.asarray(nodes["w"], dtype=float)
    d_mean, d_sq = float(w @ diag), float(w @ diag ** 2)
    mv, C = general_w_test_moments(W, mu, float(m.c), a1, var_f, a0, d_mean, d_sq)
    E_test = np.array([1 - 2 * r.beta @ mv + np.sum(C.T * r.B_bulk) for r in out["moments"]])
    return {"E_test": E_test, "E_train": out["E"], "norm2": np.array([np.trace(r.B_bulk) for r in out["moments"]]),
            "overlap": np.array([r.beta @ mu for r in out["moments"]]), "m": mv, "C": C, "readout": out["moments"]}


def general_sum_test_error(f, c, gamma, heads, mu=None, diagonal: str = "f", residual: bool = False) -> dict:
    r"""The test error of Φ = X(δI + Σ_h K_h) for general heads at one c (δ = 1 with ``residual``; the sum readout of
    docs/theory.md §13.2, the residual of §13.1): the summed kernel's model (:func:`symattn.variants.general_sum_model`:
    W̃ = Σ_h a1_h W_h/a1, the cross-head covariances in σ², the residual's identity on the diagonal), its readout's
    moments by the linear response (§14.9) and :func:`readout_test_error`.

    Returns
    -------
    dict
        As :func:`readout_test_error`.

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> heads = [rng.standard_normal((20, 20)) / np.sqrt(20) for _ in range(2)]
    >>> out = general_sum_test_error(activation("tanh"), 0.5, [1.0], heads)
    >>> bool(out["E_test"][0] > 1)           # μ = 0: worse than the zero predictor
    True
    """
    from .backends.general_w.response import block_readout, model_readout
    from .variants import general_sum_model

    m, blk, nodes = general_sum_model(f, c, heads, mu, diagonal, residual)
    out = model_readout(m, gamma) if blk is None else block_readout(m, gamma, blk, nodes)
    return readout_test_error(out)


def general_test_error(f, c, gamma, weights=None, mu=None, model: str = "attention", n: int | None = None,
                       diagonal: str = "f", errors: str = "raise", structure: str = "auto", heads=None,
                       residual: bool = False):
    r"""The test error of a layer with one weight matrix W, or of summed general heads (with or without the
    residual) (docs/theory.md §14.9): the engine of ``Layer(f, weights=W).theory(c, gamma, mu=mu, error='test')``
    and of the 'sum' engine.

    Attention by :func:`general_w_test_error` (one W) or :func:`general_sum_test_error` (``heads``, or one W with
    ``residual``) per c (n = round(p/c)); linear regression by the closed form of docs/theory.md §14.4 at ‖μ‖² (it
    does not see W).

    Parameters
    ----------
    f : Activation
    c, gamma : float or array_like
        Broadcast together; γ > 0.
    weights : numpy.ndarray, optional
        W, p×p.
    mu : array_like, optional
    model : {'attention', 'linear', 'both'}
    n : int, optional
        Must equal round(p/c) when given.
    diagonal : {'f', 'zero'}
    errors : {'raise', 'nan'}
        A c whose solve fails raises ConvergenceError, or its points become NaN with a FailedPointsWarning.
    structure : {'auto', 'blocks', 'free'}
        The kernel model of one W (the summed heads choose theirs as the training theory does).
    heads : list of numpy.ndarray, optional
        Summed heads W_1..W_H (instead of ``weights``).
    residual : bool
        Φ = X(I + K).

    Returns
    -------
    numpy.ndarray or dict
        E_test of shape broadcast(c, gamma), or ``{"attention": ..., "linear": ...}`` for model='both'.

    Examples
    --------
    >>> from symattn import activation
    >>> E = general_test_error(activation("tanh"), 0.5, [0.1, 1.0], np.eye(24), model="both")
    >>> bool(np.all(E["attention"] > 1) and np.all(E["linear"] > 1))
    True
    """
    from .errors import ConvergenceError, FailedPointsWarning
    from .model import Geometry, check_c, check_gamma, check_mu, check_weights

    check_test_gamma(gamma)
    hs = None if heads is None and not residual else [check_weights(W) for W in (heads if heads is not None else [weights])]
    W = check_weights(weights if heads is None else heads[0])
    p = W.shape[0]
    mu = check_mu(mu, p)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1).astype(float) for v in (c_arr, g_arr))
    for ci in np.unique(cb):
        if n is not None and int(n) != int(round(p / ci)):
            raise ParameterError("n", n, f"None or round(p/c) = {int(round(p / ci))} (p = {p} is fixed by the weights)")
    out = {}
    if model in ("attention", "both"):
        E = np.full(cb.shape, np.nan)
        failed = []
        for ci in np.unique(cb):
            idx = np.nonzero(cb == ci)[0]
            try:
                E[idx] = (general_w_test_error(f, ci, gb[idx], W, mu, structure=structure, diagonal=diagonal) if hs is None
                          else general_sum_test_error(f, ci, gb[idx], hs, mu, diagonal, residual))["E_test"]
            except ConvergenceError as err:
                if errors == "raise":
                    raise
                failed += [(float(ci), float(gb[j]), err.reason) for j in idx]
        if failed:
            warnings.warn(FailedPointsWarning(f"{len(failed)} test-error point(s) failed and are NaN", failed),
                          stacklevel=3)
        out["attention"] = E.reshape(shape)
    if model in ("linear", "both"):
        r = solve_test(f, c=cb, gamma=gb, geometry=Geometry(snr=float(mu @ mu)), model="linear")
        out["linear"] = np.asarray(r.linear, dtype=float).reshape(shape)
    return out if model == "both" else out[model]
