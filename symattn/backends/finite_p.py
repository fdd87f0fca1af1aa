r"""The finite-p corrected attention theory, numerically (docs/theory.md §10), written once against a context.

Why (§10.1). The asymptotic system linearises the off-diagonal kernel argument around h = 0;
at realistic sizes its signal part is not small: its pair-class mean is t·y_i y_j,
t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p (:func:`symattn.model.signal_strength`).

The corrected theory (§10.3). Let Ṽ be an orthonormal basis of span(μ, w_K, w_Q) (dimension
k ≤ 1 + 2r). Token i carries the latent ω_i = (y_i, g̃_i), u_i = y_i m + g̃_i (m = Ṽᵀμ), and
exactly x_iᵀWx_j/√p = ξ^⊥_ij + δ(ω_i, ω_j), δ(ω, ω') = uᵀBu'/√p, B = I_k + Σ_j ŵ_K ŵ_Qᵀ.
Conditionally on the latents, with the shifted-Gaussian moments F, F', V of §10.2
(:mod:`symattn.activations.shifted`, ξ ~ N(0, θ), θ = (p − k)/p):

  √p K ≈ 𝕄(ω_i, ω_j)/√p + 𝔻(ω_i, ω_j) ξ^⊥_ij + Σ(ω_i, ω_j) N_ij,  𝕄 = √p F(δ), 𝔻 = F'(δ), Σ² = V(δ) − θF'(δ)²,

plus the exact conditional diagonal d(ω). The pieces, in the order they are computed:

- :func:`latent_geometry`, :func:`latent_quadrature` -- m, B, k and the latent nodes (y = ±1 ×
  tensor Gauss–Hermite, :func:`symattn.gauss.gauss_hermite`);
- :func:`latent_kernels` -- 𝕄, 𝔻, Σ² on the nodes; :func:`latent_diagonal` -- d(ω);
- :func:`solve_pencil` -- the latent-diagonal matrix Dyson equation of the 3×3 pencil (the bulk);
- :func:`latent_resolvent` -- the Woodbury step in latent directions, giving F(z);
- :func:`finite_p_error` -- E_A = −γ² F'(γ) by a complex step.

Every function takes the arithmetic context (:mod:`symattn.backends.context`) and is the same
code in float64 and in mpmath; the context supplies the precision-dependent tolerances
(``pencil_tol``, ``svd_tol``, ``basis_tol``, ``drop_tol``, ``step``).

:func:`check_correction` validates the ``correction`` argument of
:func:`symattn.memorization_error`, and :func:`warn_if_strong` issues the
:class:`~symattn.errors.FiniteSizeWarning` of the asymptotic theory when t > :data:`symattn.model.STRONG_SIGNAL_T`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..activations.activation import activation
from ..activations.shifted import ShiftedGaussian
from ..caching import Memo
from ..errors import ConvergenceError, FiniteSizeWarning, ParameterError
from ..gauss import composite_gauss_legendre, gauss_hermite
from ..model import STRONG_SIGNAL_T, as_geometry, dimension, kernel_constants, signal_strength, weight_strength

from .closed_runtime import inverse3
from .fixedpoint import Anderson, GrowthRestart, fixed_point

__all__ = [
    "weighted_svd",
    "CORRECTIONS",
    "LATENT_NODES",
    "check_correction",
    "warn_if_strong",
    "latent_geometry",
    "latent_quadrature",
    "latent_kernels",
    "latent_diagonal",
    "PencilSolution",
    "solve_pencil",
    "latent_resolvent",
    "finite_p_error",
]

#: accepted values of the ``correction`` argument
CORRECTIONS = (None, "finite-p")
#: Gauss–Hermite nodes per latent dimension (k = 0..3): 2·nq^k latent quadrature points
LATENT_NODES = {0: 1, 1: 24, 2: 12, 3: 7}


# ============================================================================ the correction argument and the warning
def check_correction(correction, n) -> str | None:
    """Validate ``correction`` of :func:`symattn.memorization_error`: None or 'finite-p' (which needs ``n``).

    Parameters
    ----------
    correction : None or str
    n : int or None
        The token count; p = round(c n) (docs/theory.md §10.1).

    Returns
    -------
    None or str
        ``correction``, unchanged.

    Examples
    --------
    >>> check_correction("finite-p", 1000)
    'finite-p'
    >>> check_correction("finite_p", 1000)
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid correction='finite_p': allowed None or 'finite-p'
    """
    if correction not in CORRECTIONS:
        raise ParameterError("correction", correction, "None or 'finite-p'")
    if correction == "finite-p" and n is None:
        raise ParameterError("n", n, "the token count n (an integer >= 2) when correction='finite-p'",
                             hint="The correction depends on the dimension p = round(c n)")
    return correction


def warn_if_strong(geometry, n, c, stacklevel: int = 3, correction=None) -> float:
    """Issue a :class:`~symattn.errors.FiniteSizeWarning` when a strong direction is large (docs/theory.md §10.1):
    max |t| > STRONG_SIGNAL_T without the finite-p correction, or the weights' strength
    s_w = Σ_k ‖w_K^{(k)}‖ ‖w_Q^{(k)}‖/√p > STRONG_SIGNAL_T (:func:`symattn.model.weight_strength`), without the
    correction or with it where s_w > |t| (the correction is verified where the signal dominates, w along μ).

    t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p, p = round(c n) (:func:`symattn.model.signal_strength`).

    Parameters
    ----------
    geometry : Geometry
    n : int
    c : float or array
    stacklevel : int
        Passed to :func:`warnings.warn`.

    Returns
    -------
    float
        The t of largest |t| over ``c``.

    Examples
    --------
    >>> import warnings
    >>> from symattn.model import Geometry
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     t = warn_if_strong(Geometry.aligned(3.0), 1000, 0.3)
    >>> round(t, 4), w[0].category.__name__
    (0.6928, 'FiniteSizeWarning')
    """
    ts = np.atleast_1d(signal_strength(geometry, n, c))
    t = float(ts.flat[np.argmax(np.abs(ts))])
    sws = np.atleast_1d(weight_strength(geometry, n, c))
    # the correction covers a signal-dominated strength (|t| >= s_w: w along μ, docs/theory.md §10.4), not the rest
    uncovered = sws if correction is None else np.where(np.abs(np.broadcast_to(ts, sws.shape)) >= sws, 0.0, sws)
    sw = float(np.max(uncovered))
    if sw > STRONG_SIGNAL_T:
        warnings.warn(
            f"weight strength ||w_K|| ||w_Q||/sqrt(p) = {sw:.3g} > {STRONG_SIGNAL_T}: outside the regime the theory "
            "covers (it linearises the kernel around the low-rank weights' part); E_attention can be far off "
            "(erf at 4.5: 0.09 for a Monte Carlo 0.32); check with symattn simulate",
            FiniteSizeWarning, stacklevel=stacklevel)
    if abs(t) > STRONG_SIGNAL_T and correction is None:
        warnings.warn(
            f"finite-p signal strength t = {t:.3g} (|t| > {STRONG_SIGNAL_T}): the asymptotic theory overestimates E_A "
            f"at this size (by up to ~30% at t ~ 0.7); use correction='finite-p' "
            f"(CLI: --finite-p) for the finite-p corrected theory",
            FiniteSizeWarning, stacklevel=stacklevel)
    return t


# ============================================================================ latent structure
def latent_geometry(geometry):
    r"""Coordinates of the signal and the weights in an orthonormal basis Ṽ of span(μ, w_K, w_Q).

    docs/theory.md §10.3: m = Ṽᵀμ and B = ṼᵀWṼ = I_k + Σ_j ŵ_K^{(j)} ŵ_Q^{(j)ᵀ} (ŵ = Ṽᵀw),
    from the eigendecomposition of the Gram matrix of (μ, w_K, w_Q) (eigenvalues below 10^{-12}·max
    dropped); k is the dimension of the span. float64.

    Parameters
    ----------
    geometry : Geometry or None

    Returns
    -------
    m : numpy.ndarray, shape (k,)
    B : numpy.ndarray, shape (k, k)
    k : int

    Examples
    --------
    >>> from symattn.model import Geometry
    >>> m, B, k = latent_geometry(Geometry.aligned(3.0))      # w_K = w_Q = μ, ‖μ‖² = 3
    >>> k, round(float(m[0] ** 2), 12), round(float(B[0, 0]), 12)
    (1, 3.0, 4.0)
    """
    geom = as_geometry(geometry)
    G, r = geom.gram, geom.rank
    eig, vec = np.linalg.eigh(G)
    keep = eig > 1e-12 * max(1.0, float(eig.max()))
    coords = vec[:, keep] * np.sqrt(eig[keep])
    k = coords.shape[1]
    m = coords[0]
    wk, wq = coords[1:1 + r], coords[1 + r:1 + 2 * r]
    B = np.eye(k) + wk.T @ wq
    return m, B, k


def latent_quadrature(ctx, k: int, nq: int):
    r"""Nodes of the latent law ω = (y, g̃): y = ±1 (mass ½ each) × tensor Gauss–Hermite in g̃ ∈ R^k.

    docs/theory.md §10.3: E_ω φ(ω) ≈ Σ_q w_q φ(y_q, g_q), with the probabilists' Gauss–Hermite rule
    of :func:`symattn.gauss.gauss_hermite` in each of the k coordinates.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    k : int
        Latent dimension (0 for μ = w = 0: one node per label).
    nq : int
        Gauss–Hermite nodes per dimension.

    Returns
    -------
    y : array, shape (Q,)
    g : array, shape (Q, k)
    w : array, shape (Q,)
        Q = 2·nq^k nodes, weights summing to 1, in the context's numbers.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> y, g, w = latent_quadrature(FloatContext(), 1, 5)
    >>> y.shape, g.shape, round(float(w.sum()), 14), round(float(w @ g[:, 0] ** 2), 14)
    ((10,), (10, 1), 1.0, 1.0)
    """
    if k == 0:
        g, wg = ctx.convert(np.zeros((1, 0))), ctx.convert(np.ones(1))
    else:
        x, w1 = gauss_hermite(nq, ctx.dps)
        idx = np.indices((nq,) * k).reshape(k, -1).T
        g, wg = x[idx], np.prod(w1[idx], axis=1)
    y = ctx.convert(np.repeat([1.0, -1.0], len(g)))
    return y, np.concatenate([g, g], 0), np.concatenate([wg, wg]) / 2


def latent_kernels(ctx, f, geometry, p: int, nq: int | None = None) -> dict:
    r"""The latent quadrature and the kernels 𝕄 = √p F(δ), 𝔻 = F'(δ), Σ² = V(δ) − θF'(δ)² on it.

    docs/theory.md §10.3. δ(ω, ω') = uᵀBu'/√p with u = y m + g̃ (:func:`latent_geometry`), and
    F, F', V the shifted-Gaussian moments of ξ ~ N(0, θ), θ = (p − k)/p, as Chebyshev interpolants
    (:class:`symattn.activations.shifted.ShiftedGaussian`) at the context's precision; Σ² is clipped at 0.

    Parameters
    ----------
    ctx : FloatContext or MPContext
    f : activation spec
    geometry : Geometry
    p : int
        The dimension.
    nq : int, optional
        Gauss–Hermite nodes per latent dimension (default :data:`LATENT_NODES`).

    Returns
    -------
    dict
        ``y, U, w`` (labels, latent coordinates u, weights at the Q nodes), ``M, D, S2`` (Q×Q),
        ``Dself`` = F'(δ(ω, ω)) (the diagonal of 𝔻∘S that the −θ𝔻(ω, ω) removes), ``k``, ``nq``,
        ``delta``, ``theta`` and ``chebyshev_degree``.

    Raises
    ------
    ParameterError
        When k > 3 (the quadrature would have 2·nq^k nodes).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> from symattn.model import Geometry
    >>> kern = latent_kernels(FloatContext(), "tanh", Geometry.aligned(1.0), 200, nq=4)
    >>> kern["M"].shape, kern["k"], round(float(kern["theta"]), 6)
    ((8, 8), 1, 0.995)
    """
    f = activation(f)
    m, B, k = latent_geometry(geometry)
    if k > max(LATENT_NODES):
        raise ParameterError("geometry", f"span(mu, w_K, w_Q) of dimension {k}",
                             f"a latent dimension k <= {max(LATENT_NODES)} for correction='finite-p' "
                             "(mu and one pair w_K, w_Q; or collinear vectors)",
                             hint=f"the latent quadrature has 2*nq^k nodes; k = {k} is out of reach")
    nq = LATENT_NODES[k] if nq is None else int(nq)
    with ctx:
        y, g, w = latent_quadrature(ctx, k, nq)
        U = y[:, None] * ctx.convert(m)[None, :] + g
        rp = ctx.sqrt(ctx.convert(p))
        delta = (U @ ctx.convert(B) @ U.T) / rp
        R = ctx.max_abs(delta) * 1.0001 + 1e-3
        theta = ctx.convert(p - k) / p
        shifts = ShiftedGaussian(f, R, dps=ctx.dps, variance=theta)
        F, F1, V = shifts(delta)
        S2 = V - theta * F1 * F1
        S2 = np.where(S2 > 0, S2, 0 * S2)
    return {"y": y, "U": U, "w": w, "M": rp * F, "D": F1, "S2": S2, "Dself": np.diagonal(F1).copy(),
            "k": k, "nq": nq, "delta": delta, "theta": theta, "chebyshev_degree": shifts.degree}


def latent_diagonal(f, kern: dict, p: int, geometry) -> np.ndarray:
    r"""The conditional diagonal d(ω) = E[f(x_iᵀWx_i/√p) | ω_i = ω]/√p at the latent nodes (float64).

    docs/theory.md §10.3: x_iᵀWx_i = r² + uᵀBu with r² = ‖z_i^⊥‖² ~ χ²_{p−k} independent of ω, so

      d(ω) = (1/√p) ∫ f((r² + uᵀBu)/√p) 2r·pdf_{χ²_{p−k}}(r²) dr,

    by the composite 16-point Gauss–Legendre rule on 96 panels of [max(0, r0 − 12), r0 + 12],
    r0 = √(p − k) (:func:`symattn.gauss.composite_gauss_legendre`), weights renormalised to 1.
    Unlike d_n it contains the W-part uᵀBu (no other term of the corrected theory carries it).

    Parameters
    ----------
    f : activation spec
    kern : dict
        From :func:`latent_kernels` (``U`` is used).
    p : int
    geometry : Geometry

    Returns
    -------
    numpy.ndarray, shape (Q,)

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> from symattn.model import Geometry
    >>> kern = latent_kernels(FloatContext(), "linear", Geometry(), 100)    # μ = w = 0, f(x) = x: d = E r²/p = 1
    >>> np.round(latent_diagonal("linear", kern, 100, Geometry()), 10).tolist()
    [1.0, 1.0]
    """
    from scipy import stats

    f = activation(f)
    m, B, k = latent_geometry(geometry)
    U = np.asarray(kern["U"], dtype=float)
    a = np.einsum("qi,ij,qj->q", U, B, U) if k else np.zeros(len(U))
    dof = max(p - k, 1)
    r0 = math.sqrt(dof)
    r, wr = composite_gauss_legendre(np.linspace(max(0.0, r0 - 12.0), r0 + 12.0, 97), 16)
    wr = wr * 2 * r * stats.chi2(dof).pdf(r * r)
    wr = wr / wr.sum()
    sq = math.sqrt(p)
    with np.errstate(all="ignore"):
        vals = np.asarray(f.numpy((r[None, :] ** 2 + a[:, None]) / sq), dtype=float)
    return (vals @ wr) / sq


# ============================================================================ linear algebra helpers
def weighted_svd(ctx, K, w, tol):
    r"""K(ω, ω') ≈ Σ_r σ_r ψ_r(ω) χ_r(ω') with E[ψ_r ψ_s] = E[χ_r χ_s] = δ_rs under the weights w.

    The SVD of diag(√w) K diag(√w); singular values below ``tol``·σ_1 are dropped.

    Parameters
    ----------
    ctx : Context
        The arithmetic (:func:`symattn.backends.context.context`).
    K : numpy.ndarray, shape (Q, Q)
        The kernel on the latent nodes.
    w : numpy.ndarray, shape (Q,)
        The nodes' weights.
    tol : float
        The relative cut of the singular values.

    Returns
    -------
    (σ, ψ, χ)
        The kept singular values and the weighted singular functions on the nodes (columns).

    Examples
    --------
    >>> from symattn.backends.context import context
    >>> x, w = np.array([-1.0, 0.0, 1.0]), np.array([0.25, 0.5, 0.25])
    >>> s, psi, chi = weighted_svd(context("numpy"), np.outer(x, x) + 1.0, w, 1e-12)
    >>> len(s), bool(np.allclose((psi * s) @ chi.T, np.outer(x, x) + 1.0))
    (2, True)
    """
    sw = ctx.sqrt(w)
    U, s, Vt = ctx.svd(sw[:, None] * K * sw[None, :])
    R = int(np.sum(s > tol * s[0])) if s.size and s[0] > 0 else 0
    return s[:R], U[:, :R] / sw[:, None], Vt[:R].T / sw[:, None]


def _orthonormal(ctx, X, w, tol):
    """Weighted modified Gram–Schmidt keeping column order (columns of relative norm ≤ ``tol`` are dropped)."""
    out = []
    for j in range(X.shape[1]):
        v = X[:, j].copy()
        n0 = ctx.sqrt(v @ (w * v))
        for _ in range(2):
            for q in out:
                v = v - (q @ (w * v)) * q
        nv = ctx.sqrt(v @ (w * v))
        if float(nv) > tol * max(1.0, float(n0)):
            out.append(v / nv)
    return np.column_stack(out)


# ============================================================================ the bulk: latent matrix Dyson equation
@dataclass
class PencilSolution:
    """E over S^⊥ and N of L^{-1}, conditional on the latent (Q, 3, 3), and the iteration record."""

    G: np.ndarray
    iterations: int
    residual: float


#: Anderson depth of the latent Dyson iteration (:func:`solve_pencil`)
ANDERSON_DEPTH = 6
#: a residual above this multiple of the best one so far clears the Anderson history
ANDERSON_RESTART = 10.0
#: Tikhonov weight of the Anderson least squares, relative to the largest diagonal entry
ANDERSON_RIDGE = 1e-13
#: the mixing ϑ_A of the Anderson step (the plain steps, with no history, use ``damping``)
ANDERSON_MIXING = 1.0


def solve_pencil(ctx, c, z, d, w, separable, S2, Dself=None, tol=None, max_iter=20000, G0=None,
                 damping=0.5, theta=1, depth=None, restart=None) -> PencilSolution:
    r"""Solve the latent-diagonal matrix Dyson equation of the pencil (docs/theory.md §10.3).

      L = [[z, √c K0ᵀ, 0], [√c K0, 0, I], [0, I, S]],  K0 = 𝔻∘S + diag(d − θ𝔻(ω, ω)) + Σ∘N/√p,

    with S = Z^⊥ᵀZ^⊥/p (free Poisson, free cumulants κ_n = θ c^{1−n}, θ = (p − k)/p) and N (GOE) free from each
    other and from the latent-diagonal algebra 𝒟. With 𝔻 = Σ_r σ_r ψ_r ⊗ χ_r (``separable``
    = (σ, ψ, χ)), the S-terms of L are Σ_j P_j S P'_j with P_j, P'_j ∈ M_3(𝒟), and

      𝒢(ω) = (L0(ω) + R_S(−𝒢)(ω) + R_N(−𝒢)(ω))^{-1},
      R_S(b) = θ Σ_{jj'} P_j [(I − τ(b)/c)^{-1}]_{jj'} P'_{j'},  τ(b)_{jj'} = E_ω[P'_j b P_{j'}],
      R_N(b)_11(ω) = E'[Σ²(ω', ω) b_22(ω')], R_N(b)_22(ω) = E'[Σ²(ω, ω') b_11(ω')],
      R_N(b)_12(ω) = E'[Σ(ω, ω')Σ(ω', ω) b_21(ω')] (and _21 with b_12),

    L0(ω) = [[z, √c(d − θ𝔻(ω,ω)), 0], [√c(d − θ𝔻(ω,ω)), 0, 1], [0, 1, 0]] (``d`` may depend on ω). Blocks of
    𝒢 = E_𝒟[L^{-1}]: 𝒢11 = Q0, 𝒢12 = √c Q0K0ᵀS, 𝒢13 = −√c Q0K0ᵀ, 𝒢22 = −S + cSK0Q0K0ᵀS,
    𝒢32 = I − cK0Q0K0ᵀS, 𝒢33 = cK0Q0K0ᵀ, Q0 = (z + cK0ᵀSK0)^{-1}. Solved by the damped
    iteration 𝒢 ← (1 − ϑ)𝒢 + ϑ·RHS(𝒢) from L0^{-1}, Anderson-accelerated (depth :data:`ANDERSON_DEPTH`; real
    least squares on the real part and the scaled imaginary part), until the relative change RHS(𝒢) − 𝒢 is
    below ``tol``; ``z`` may be complex (complex-step γ-derivative).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c : real
        p/n.
    z : complex
        Spectral parameter (γ, or γ + iη).
    d : array, shape (Q,), or scalar
        The diagonal d(ω) (less what 𝕄/p puts there).
    w : array, shape (Q,)
        Latent weights.
    separable : tuple
        (σ (R,), ψ (Q, R), χ (Q, R)) of 𝔻.
    S2 : array, shape (Q, Q)
        Σ².
    Dself : array, shape (Q,), optional
        𝔻(ω, ω) (default: from ``separable``).
    tol : float, optional
        Relative change at which to stop (default ``ctx.pencil_tol``).
    max_iter : int
    G0 : array, shape (Q, 3, 3), optional
        Starting point (default L0^{-1}).
    damping : float
        ϑ.
    theta : real
        θ.
    depth : int, optional
        Anderson depth (default :data:`ANDERSON_DEPTH`).
    restart : float, optional
        The history is cleared when the residual exceeds this multiple of the best one (default
        :data:`ANDERSON_RESTART`; a :class:`~symattn.backends.fixedpoint.GrowthRestart` of
        :func:`~symattn.backends.fixedpoint.fixed_point`).

    Returns
    -------
    PencilSolution

    Raises
    ------
    ConvergenceError
        No convergence within ``max_iter`` iterations, or a non-finite solution.

    Examples
    --------
    Constant slope a1 and noise s² on one latent node: 𝒢11 is the bulk trace (1/n) tr Q0 of docs/theory.md §5.

    >>> from symattn.backends.context import FloatContext
    >>> one = np.ones((1, 1))
    >>> sol = solve_pencil(FloatContext(), 0.7, 0.1, 0.02, np.array([1.0]), (np.array([0.6]), one, one),
    ...                    np.full((1, 1), 0.15))
    >>> sol.G.shape, sol.residual <= 1e-12
    ((1, 3, 3), True)
    """
    sig, psi, chi = separable
    tol = ctx.pencil_tol if tol is None else tol
    Q = len(w)
    R = len(sig)
    J = 2 * R + 1
    rc = ctx.sqrt(c)
    fs = ctx.zeros((Q, J), complex=True)
    g = ctx.zeros((Q, J), complex=True)
    a_idx = np.zeros(J, int)
    b_idx = np.zeros(J, int)
    for r in range(R):
        fs[:, 2 * r] = rc * sig[r] * chi[:, r]
        g[:, 2 * r] = psi[:, r]
        a_idx[2 * r], b_idx[2 * r] = 0, 1
        fs[:, 2 * r + 1] = rc * sig[r] * psi[:, r]
        g[:, 2 * r + 1] = chi[:, r]
        a_idx[2 * r + 1], b_idx[2 * r + 1] = 1, 0
    fs[:, -1] = 1
    g[:, -1] = 1
    a_idx[-1] = b_idx[-1] = 2
    if Dself is None:
        Dself = (psi * chi) @ sig if R else ctx.zeros(Q)
    kd = rc * (d - theta * Dself)
    L0 = ctx.zeros((Q, 3, 3), complex=True)
    L0[:, 0, 0] = z
    L0[:, 0, 1] = L0[:, 1, 0] = kd
    L0[:, 1, 2] = L0[:, 2, 1] = 1
    Sg = ctx.sqrt(S2)
    W1, W2, W3 = S2.T * w[None, :], S2 * w[None, :], (Sg * Sg.T) * w[None, :]
    eyeJ = np.eye(J, dtype=int)

    # the S-terms grouped by their block indices: columns j with a_j = α, rows j with b_j = β
    rows_a = [np.flatnonzero(a_idx == v) for v in range(3)]
    rows_b = [np.flatnonzero(b_idx == v) for v in range(3)]
    gw = g * w[:, None]

    tau_blocks = [(be, al, np.ix_(jb, ja), gw[:, jb].T, fs[:, ja]) for be, jb in enumerate(rows_b)
                  for al, ja in enumerate(rows_a) if jb.size and ja.size]

    def rhs(G):
        b = -G
        # τ_jk = E_ω[g_j b_{b_j a_k} f_k], computed block by block (b_j, a_k)
        tau = ctx.zeros((J, J), complex=True)
        for be, al, ix, gwT, fa in tau_blocks:
            tau[ix] = gwT @ (b[:, be, al][:, None] * fa)
        mt = theta * ctx.inv(eyeJ - tau / c)
        RS = np.zeros_like(b)
        for al, ja in enumerate(rows_a):
            H = fs[:, ja] @ mt[ja, :]
            for be, jb in enumerate(rows_b):
                RS[:, al, be] = (H[:, jb] * g[:, jb]).sum(axis=1)
        RN = np.zeros_like(b)
        RN[:, 0, 0] = W1 @ b[:, 1, 1]
        RN[:, 1, 1] = W2 @ b[:, 0, 0]
        RN[:, 0, 1] = W3 @ b[:, 1, 0]
        RN[:, 1, 0] = W3 @ b[:, 0, 1]
        return inverse3(L0 + RS + RN)

    G = inverse3(L0) if G0 is None else G0.copy()
    imag_scale = abs(ctx.imag(z))

    def size(diff, G):
        scale = max(1.0, ctx.max_abs(ctx.real(G)))
        r = ctx.max_abs(ctx.real(diff)) / scale
        if imag_scale:
            r = max(r, ctx.max_abs(ctx.imag(diff)) / (imag_scale * max(1.0, ctx.max_abs(ctx.imag(G)) / imag_scale)))
        return r

    # Anderson-accelerated damped iteration (depth ANDERSON_DEPTH): G ← G + ϑ_A r − Uα, r = RHS(G) − G, with the
    # consecutive differences ΔG, Δr of the last iterates, U = ΔG + ϑ_A Δr, and α the real least-squares
    # coefficients (float64 in every context) of Δr against r in the real vector (Re r, Im r/s), s the scale of
    # Im G: the imaginary part (the complex-step derivative) is weighed as the real part is, and only the fixed
    # point G = RHS(G) is used, not a derivative of the iteration. The first step, and the first after a residual
    # above ANDERSON_RESTART × the best one so far (which clears the history), is the plain damped step ϑr.
    def stacked(v, s):
        """(Re v, Im v/s) in float64: the coefficients α only steer the iteration, the residual test decides."""
        re = np.asarray(ctx.to_float(ctx.real(v)), dtype=float)
        if not imag_scale:
            return re
        return np.concatenate([re, np.asarray(ctx.to_float(ctx.imag(v) / s), dtype=float)])

    def project(v, g_flat):
        return stacked(v, max(imag_scale, ctx.max_abs(ctx.imag(g_flat))))

    strategies = [Anderson(depth=ANDERSON_DEPTH if depth is None else depth, mixing=ANDERSON_MIXING, damping=damping,
                           solver="ridge", ridge=ANDERSON_RIDGE, project=project)]
    out = fixed_point(lambda G, st: (rhs(G), None), G, strategies, tol=tol, residual=lambda Gn, G: size(Gn - G, G),
                      maxiter=max_iter, inclusive=True, finite=lambda v: True,
                      restart=GrowthRestart(ANDERSON_RESTART if restart is None else restart),
                      name="the latent Dyson equation (finite-p correction)")
    G, it, res = out.x, out.iterations, out.residual
    if not np.all(ctx.isfinite(ctx.real(G[:, 0, 0]))):
        raise ConvergenceError("the latent Dyson equation diverged (finite-p correction)",
                               residuals=[res], iterations=it)
    return PencilSolution(G=G, iterations=it, residual=res)


# ============================================================================ the low rank: latent Woodbury
def _latent_basis(ctx, kern: dict):
    r"""The orthonormal latent basis φ (φ_0 = y; spanning y, the u_l and the singular functions of 𝕄),
    𝒜 = E[𝕄 φ_a φ_b'], ρ_al = E[u_l φ_a] and the directions a with ρ_a ≠ 0; independent of c and z,
    so computed once per kernel (cached in ``kern``)."""
    if "basis" not in kern:
        y, U, w, M = kern["y"], kern["U"], kern["w"], kern["M"]
        s, Lf, Rf = weighted_svd(ctx, M, w, ctx.basis_tol)
        phi = _orthonormal(ctx, np.column_stack([y[:, None], U, Lf, Rf]), w, ctx.drop_tol)
        Wphi = w[:, None] * phi
        rho = Wphi.T @ U
        ua = [i for i in range(phi.shape[1]) if any(float(abs(v)) > 1e-12 for v in rho[i])]
        kern["basis"] = (phi, Wphi.T @ M @ Wphi, rho, ua)
    return kern["basis"]


def latent_resolvent(ctx, c, kern: dict, G: np.ndarray):
    r"""F = lim ŷᵀ(ΦᵀΦ/n + z)^{-1}ŷ from the pencil solution and the latent low-rank part (docs/theory.md §10.3).

    Φ = XK, X = ṼUᵀ + Z^⊥, K = K0 + (1/p)𝕄. With an orthonormal latent basis φ_a (first
    φ_0 = y, spanning y, the coordinates u_l and the singular functions of 𝕄),
    𝒜_ab = E[𝕄(ω,ω') φ_a(ω) φ_b(ω')], ρ_al = E[u_l φ_a], h_a = φ_a/√n:

      Δ/√n = Σ_ab 𝒜_ab/√c · α_a h_bᵀ + Σ_l Σ_ab ρ_al 𝒜_ab/c · Ṽe_l h_bᵀ + Σ_l Σ_a ρ_al Ṽe_l (K0ᵀh_a)ᵀ,

    α_a = Z^⊥h_a/√p. Gram entries are latent averages of the pencil blocks, e.g.
    Γ[h_a, h_b] = E[φ_a φ_b 𝒢11], Γ[α_a, α_b] = E[φ_a φ_b 𝒢22], Γ[Ṽe_l, Ṽe_l'] = −δ_ll', and
    F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e, e = Γ[:, ŷ] (as in docs/theory.md §6.6).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    c : real
    kern : dict
        From :func:`latent_kernels` (the latent basis is cached in it).
    G : array, shape (Q, 3, 3)
        :attr:`PencilSolution.G` at this c and z.

    Returns
    -------
    complex
        F(z) in the context's numbers.

    Examples
    --------
    μ = w = 0 (k = 0): the bulk alone (𝕄 = √p F(0) is constant).

    >>> from symattn.backends.context import FloatContext
    >>> from symattn.model import Geometry
    >>> ctx = FloatContext()
    >>> kern = latent_kernels(ctx, "tanh", Geometry(), 250)
    >>> sep = weighted_svd(ctx, kern["D"], kern["w"], ctx.svd_tol)
    >>> sol = solve_pencil(ctx, 0.5, 1.0, 0.0, kern["w"], sep, kern["S2"], Dself=kern["Dself"], theta=kern["theta"])
    >>> F = latent_resolvent(ctx, 0.5, kern, sol.G)
    >>> bool(0 < F.real < 1)
    True
    """
    U, w = kern["U"], kern["w"]
    k = U.shape[1]
    rc = ctx.sqrt(c)
    phi, a, rho, ua = _latent_basis(ctx, kern)
    A = phi.shape[1]
    Wphi = w[:, None] * phi
    nA, nU = A, len(ua)
    Nn, Np = nA + nU, nA + k

    def avg(fv):
        return Wphi.T @ (fv[:, None] * phi)

    blk_Q, blk_QK = G[:, 0, 0], -G[:, 0, 2] / rc
    blk_KQK, blk_QKS = G[:, 2, 2] / c, G[:, 0, 1] / rc
    blk_KQKS, blk_pp = (1 - G[:, 2, 1]) / c, G[:, 1, 1]
    Gnn = ctx.zeros((Nn, Nn), complex=True)
    Gnp = ctx.zeros((Nn, Np), complex=True)
    Gpp = ctx.zeros((Np, Np), complex=True)
    MQK = avg(blk_QK)
    Gnn[:nA, :nA] = avg(blk_Q)
    Gnn[:nA, nA:] = MQK[:, ua]
    Gnn[nA:, :nA] = MQK[:, ua].T
    Gnn[nA:, nA:] = avg(blk_KQK)[np.ix_(ua, ua)]
    Gnp[:nA, :nA] = rc * avg(blk_QKS)
    Gnp[nA:, :nA] = rc * avg(blk_KQKS)[ua, :]
    Gpp[:nA, :nA] = avg(blk_pp)
    for l in range(k):
        Gpp[nA + l, nA + l] = -1
    Gam = np.block([[Gnn, Gnp], [Gnp.T, Gpp]])
    C = ctx.zeros((Np, Nn), complex=True)
    C[:nA, :nA] = a / rc
    if k:
        C[nA:, :nA] = rho.T @ a / c
        for j, i in enumerate(ua):
            C[nA:, nA + j] = rho[i]
    Ch = np.block([[ctx.zeros((Nn, Nn), complex=True), C.T], [C, ctx.zeros((Np, Np), complex=True)]])
    e = Gam[:, 0]
    u = Ch @ ctx.solve(np.eye(Nn + Np, dtype=int) + Gam @ Ch, e)
    return Gam[0, 0] - e @ u


# ============================================================================ public evaluation
#: the latent kernels already built: (f, Gram, rank, p, precision, nq) → :func:`latent_kernels` plus 'separable'
LATENT_KERNELS = Memo("finite_p.latent_kernels", 32)


def _kernels_cached(ctx, f, geom, p, nq=None):
    """:func:`latent_kernels` with the separable expansion of 𝔻, cached per (f, geometry, p, precision, nq)."""
    def build():
        kern = latent_kernels(ctx, f, geom, int(p), nq=nq)
        kern["separable"] = weighted_svd(ctx, kern["D"], kern["w"], ctx.svd_tol)
        return kern

    return LATENT_KERNELS.get((f, geom.gram, geom.rank, int(p), ctx.dps, nq), build)


def _diagonal(ctx, f, kern, p, geom, diagonal):
    """d(ω) − 𝕄(ω, ω)/p at the latent nodes (d = 0 with ``diagonal='zero'``), cached in ``kern``."""
    key = ("diag", diagonal)
    if key not in kern:
        dlat = latent_diagonal(f, kern, p, geom) if diagonal == "f" else np.zeros(len(kern["w"]))
        kern[key] = ctx.convert(dlat) - np.diagonal(kern["M"]).copy() / p
    return kern[key]


def finite_p_error(ctx, f, c, gamma, geometry, n: int, diagonal: str = "f", point_info=None,
                   latent_nodes: int | None = None):
    r"""E_A(γ) = −γ² F'(γ) of the finite-p corrected theory at the points (c, γ) (docs/theory.md §10.3).

    For each point, p = round(c n); the latent kernels 𝕄, 𝔻, Σ² (:func:`latent_kernels`, at the
    context's precision) and the diagonal d(ω) − 𝕄(ω, ω)/p (:func:`latent_diagonal`; d = 0 with
    ``diagonal='zero'``) enter :func:`solve_pencil` at the complex point z = γ + iη and
    :func:`latent_resolvent`. The derivative is a complex step (no cancellation):

      F'(γ) = Im F(γ + iη)/η,  η = ``ctx.step``·γ (10^{-20}γ in float64, 10^{-(dps+5)}γ in mpmath).

    Parameters
    ----------
    ctx : FloatContext or MPContext
    f : activation spec
    c, gamma : array_like
        The points (1-d, of equal length).
    geometry : Geometry
    n : int
        Token count.
    diagonal : {'f', 'zero'}
    point_info : dict, optional
        Added to the ``point`` of a :class:`~symattn.errors.ConvergenceError`.
    latent_nodes : int, optional
        Gauss–Hermite nodes per latent dimension (default :data:`LATENT_NODES`).

    Returns
    -------
    numpy.ndarray
        E_A at each point (float, or mpf objects in the mpmath context).

    Examples
    --------
    >>> from symattn.backends.context import context
    >>> from symattn.model import Geometry
    >>> E = finite_p_error(context("numpy"), "tanh", [0.5], [0.1], Geometry.aligned(1.0), 200, latent_nodes=4)
    >>> round(float(E[0]), 6)
    0.317708
    """
    f = activation(f)
    geom = as_geometry(geometry)
    cb = np.asarray(c, dtype=float).reshape(-1)
    gb = np.asarray(gamma, dtype=float).reshape(-1)
    kernel_constants(f, diagonal=diagonal, n=n, c=cb, snr=geom.snr, dps=ctx.dps)  # validates f and diagonal
    out = []
    warm = {}
    with ctx:
        for ci, gi in zip(cb, gb):
            p = dimension(n, ci)
            kern = _kernels_cached(ctx, f, geom, p, latent_nodes)
            dq = _diagonal(ctx, f, kern, p, geom, diagonal)
            cm, gm = ctx.convert(ci), ctx.convert(gi)
            eta = gm * ctx.step
            # warm start from the solved point of this p nearest in log γ (the previous one along a monotone
            # list): a far one (a list back from γ = 10 to 1e-3) led the pencil onto a wrong branch
            solved = warm.setdefault(p, [])
            G0 = min(solved, key=lambda t: abs(t[0] - math.log(gi)))[1] if solved else None
            try:
                sol = solve_pencil(ctx, cm, ctx.complex(gm, eta), dq, kern["w"], kern["separable"], kern["S2"],
                                   Dself=kern["Dself"], G0=G0, theta=kern["theta"])
            except ConvergenceError as exc:
                raise ConvergenceError(exc.reason, exc.residuals, exc.iterations,
                                       point=dict(point_info or {}, c=float(ci), gamma=float(gi), n=n, p=p)) from None
            solved.append((math.log(gi), sol.G))
            dF = ctx.imag(latent_resolvent(ctx, cm, kern, sol.G)) / eta
            out.append(-(gm ** 2) * dF)
        return ctx.convert(out)
