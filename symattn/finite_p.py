r"""Opt-in finite-p correction of the attention theory for strong signals (docs/finite_p.md).

Why. The asymptotic system (MATH.md §6) linearises the off-diagonal kernel argument
ξ_ij + h_ij/√p around h = 0. At realistic sizes the signal part is not small: its pair-class
mean is t·y_i y_j with

  t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p                     (:func:`signal_strength`),

and the asymptotic theory then overestimates E_A by up to a third (tanh, c = 0.3,
‖μ‖² = 3, w_K = w_Q = μ, p = 300: t = 0.69, −30 %).

The corrected theory (one system, no variants). Let Ṽ be an orthonormal basis of
span(μ, w_K, w_Q) (dimension k ≤ 1 + 2r). Token i carries the latent ω_i = (y_i, g̃_i),
g̃_i = Ṽᵀz_i ~ N(0, I_k), u_i = y_i m + g̃_i (m = Ṽᵀμ), and the rest of the noise
Z^⊥ = (I − ṼṼᵀ)Z is independent of the latents. Exactly,

  x_iᵀWx_j/√p = ξ^⊥_ij + δ(ω_i, ω_j),   δ(ω, ω') = uᵀBu'/√p,   B = I_k + Σ_k ŵ_K ŵ_Qᵀ,

with ξ^⊥ = Z^⊥ᵀZ^⊥/√p. Conditionally on the latents, f(ξ^⊥ + δ) is expanded in Hermite
polynomials of ξ^⊥ (F(s) = E f(ξ + s), F'(s) = E[ξ f(ξ+s)], V(s) = Var f(ξ+s)):

  √p K ≈ 𝕄(ω_i, ω_j) + 𝔻(ω_i, ω_j) ξ^⊥_ij + Σ(ω_i, ω_j) N_ij,
  𝕄 = F(δ), 𝔻 = F'(δ) (the pair-dependent slope), Σ² = V(δ) − F'(δ)²,

with the diagonal d_n as before. Every order in the latent argument is kept. The bulk
K0 = 𝔻∘(S^⊥ − I) + Σ∘N/√p + d·I, S^⊥ = Z^⊥ᵀZ^⊥/p, is solved by an operator-valued
(latent-diagonal) matrix Dyson equation for the linear pencil
L = [[γ, √c K0ᵀ, 0], [√c K0, 0, I], [0, I, S^⊥]] (:func:`solve_pencil`); the low-rank part
(1/√p)𝕄 and the data spike ṼUᵀ enter by a Woodbury identity in latent directions
(:func:`latent_resolvent`). For μ = w = 0 it is the MATH.md §5 bulk with d_n exactly; for
f(x) = x it is the MATH.md §6 system up to O(k/p) (the split S = S^⊥ + G̃G̃ᵀ/p is kept exactly,
S^⊥ having free cumulants θc^{1−n}, θ = (p − k)/p); for t → 0 it tends to the asymptotic theory.
Its leading order in the latent fluctuation is the "V1" correction of MATH-FINITE-P.md
(coefficients F_odd(t), ā(t), ν̄(t): :func:`finite_p_coefficients`).

Use it through :func:`symattn.memorization_error` with ``n=N, correction="finite-p"`` or
``symattn solve --n N --finite-p``. With ``n`` given and no correction, t > :data:`T_WARN`
issues a :class:`FiniteSizeWarning`.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from .errors import ConvergenceError, ParameterError

__all__ = [
    "T_WARN",
    "CORRECTIONS",
    "LATENT_NODES",
    "FiniteSizeWarning",
    "FinitePCoefficients",
    "signal_strength",
    "finite_p_coefficients",
    "shifted_moments",
    "latent_geometry",
    "latent_quadrature",
    "ShiftedGaussian",
    "latent_kernels",
    "latent_diagonal",
    "solve_pencil",
    "latent_resolvent",
    "finite_p_error",
    "check_correction",
    "warn_if_strong",
]

#: above this signal strength t the asymptotic theory is biased by more than a few per cent
T_WARN = 0.15
#: accepted values of the ``correction`` argument
CORRECTIONS = (None, "finite-p")
#: relative truncation of the separable expansion of the pair-dependent slope 𝔻 (float64)
SEPARABLE_TOL = 1e-10
#: Gauss–Hermite nodes per latent dimension (k = 1, 2, 3): 2·nq^k latent quadrature points
LATENT_NODES = {0: 1, 1: 24, 2: 12, 3: 7}


class FiniteSizeWarning(UserWarning):
    """The finite-p signal strength t is large: the asymptotic theory overestimates E_A."""


def check_correction(correction, n) -> str | None:
    """Validate ``correction`` (None or 'finite-p'); the finite-p correction needs ``n``."""
    if correction not in CORRECTIONS:
        raise ParameterError("correction", correction, "None or 'finite-p'")
    if correction == "finite-p" and n is None:
        raise ParameterError("n", n, "the token count n (an integer >= 2) when correction='finite-p'",
                             hint="The correction depends on the dimension p = round(c n)")
    return correction


def signal_strength(geometry, n: int, c) -> np.ndarray:
    r"""t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p with p = round(c n), for each c (array like c)."""
    from .model import as_geometry, check_c, check_int, dimension

    geom = as_geometry(geometry)
    n = check_int("n", n, 2)
    cs = np.atleast_1d(check_c(c))
    ts = np.array([geom.strength(dimension(n, ci)) for ci in cs.ravel()]).reshape(cs.shape)
    return ts if np.ndim(c) else ts.reshape(())


def warn_if_strong(geometry, n, c, stacklevel: int = 3) -> float:
    """Issue a :class:`FiniteSizeWarning` when max t > T_WARN; returns max t."""
    t = float(np.max(signal_strength(geometry, n, c)))
    if t > T_WARN:
        warnings.warn(
            f"finite-p signal strength t = {t:.3g} > {T_WARN}: the asymptotic theory overestimates E_A "
            f"at this size (by up to ~30% at t ~ 0.7); use correction='finite-p' "
            f"(CLI: --finite-p) for the finite-p corrected theory",
            FiniteSizeWarning, stacklevel=stacklevel)
    return t


# ============================================================================ Gaussian shifts of f
_MOMENT_CACHE: dict = {}


def shifted_moments(f, s, dps: int = 20, variance=1) -> dict:
    r"""F(s) = E f(σξ+s), F'(s) = E f'(σξ+s) = E[ξ f(σξ+s)]/σ, V(s) = Var f(σξ+s), σ² = ``variance``.

    For the centred f, in mpmath at ``dps`` digits: Gaussian quadrature (tanh-sinh against φ,
    :func:`symattn.hermite.gaussian_moments`) of x ↦ f(σx + s), split at the kinks of f mapped
    to (kink − s)/σ.
    """
    from mpmath import mp

    from .activations import activation
    from .hermite import gaussian_moments

    f = activation(f)
    with mp.workdps(dps + 10):
        s = mp.mpf(s)
        sd = mp.sqrt(mp.mpf(variance))
        key = (f, mp.nstr(s, dps + 5), mp.nstr(sd, dps + 5), dps)
        if key not in _MOMENT_CACHE:
            a0 = f.constants(dps)["a0"]
            bps = [(mp.mpf(k) - s) / sd for k in f.kinks]
            cutoff = 30.0 if f.float_only else None
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = gaussian_moments(lambda u: f._mp_eval(sd * u + s), 1, dps, breakpoints=bps, cutoff=cutoff)
            _MOMENT_CACHE[key] = {"F": m["h"][0] - a0, "F1": m["h"][1] / sd, "V": m["f2"] - m["h"][0] ** 2}
    with mp.workdps(dps):
        return {k: +v for k, v in _MOMENT_CACHE[key].items()}


@dataclass(frozen=True)
class FinitePCoefficients:
    r"""The leading-order (pair-class) finite-p coefficients at signal strength t.

    ``F_plus`` = F(t), ``F_minus`` = F(−t), ``F_odd`` = (F(t) − F(−t))/2 (coefficient of y yᵀ),
    ``F_even`` = (F(t) + F(−t))/2, ``a_bar`` = ā = (F'(t) + F'(−t))/2 (common slope), ``b`` =
    (F'(t) − F'(−t))/2 (twisted slope), ``nu_bar`` = ν̄ = (V(t) + V(−t))/2, ``s2_bar`` = ν̄ − ā².
    Floats, or mpmath numbers when computed with ``dps``.
    """

    t: object
    F_plus: object
    F_minus: object
    F_odd: object
    F_even: object
    a_bar: object
    b: object
    nu_bar: object
    s2_bar: object


def finite_p_coefficients(f, t, dps: int | None = None) -> FinitePCoefficients:
    r"""F_odd(t), ā(t), b(t), ν̄(t), s̄²(t) of the centred activation f (Gaussian quadrature).

    These are the values of 𝕄, 𝔻 and Σ² of the corrected theory on the pair classes
    y_i y_j = ±1 with the latent fluctuation g̃ set to 0 (MATH-FINITE-P.md "V1"), reported by
    ``symattn solve --finite-p``. ``dps=None`` returns floats (computed at 20 digits).
    """
    from mpmath import mp

    from .model import check_dps

    work = 20 if dps is None else check_dps(dps)
    try:
        tv = float(t)
    except (TypeError, ValueError):
        raise ParameterError("t", t, "a real number") from None
    if not math.isfinite(tv):
        raise ParameterError("t", t, "a finite real number")
    with mp.workdps(work):
        tm = mp.mpf(t)
        plus, minus = shifted_moments(f, tm, work), shifted_moments(f, -tm, work)
        vals = dict(
            t=tm, F_plus=plus["F"], F_minus=minus["F"],
            F_odd=(plus["F"] - minus["F"]) / 2, F_even=(plus["F"] + minus["F"]) / 2,
            a_bar=(plus["F1"] + minus["F1"]) / 2, b=(plus["F1"] - minus["F1"]) / 2,
            nu_bar=(plus["V"] + minus["V"]) / 2,
        )
        vals["s2_bar"] = vals["nu_bar"] - vals["a_bar"] ** 2
    if dps is None:
        vals = {k: float(v) for k, v in vals.items()}
    return FinitePCoefficients(**vals)


class ShiftedGaussian:
    r"""F(s), F'(s), V(s) of the centred f on [−R, R] as Chebyshev interpolants (any s in range).

    F(s) = ∫ f(x) φ(x − s) dx is entire in s for every activation (Gaussian smoothing), so a
    Chebyshev interpolant converges spectrally; its degree is doubled until the trailing
    coefficients fall below ``tol``·max. Values at the Chebyshev nodes: numpy (``dps=None``)
    -- composite 16-point Gauss–Legendre in x on panels of width 1/4 split at the kinks of f,
    over [s − 12, s + 12]; mpmath -- :func:`shifted_moments` at ``dps`` digits.
    """

    def __init__(self, f, R: float, dps: int | None = None, tol: float | None = None, variance: float = 1.0):
        from .activations import activation

        self.f = activation(f)
        self.variance = variance
        self.R = float(R)
        self.dps = dps
        self.tol = (1e-14 if dps is None else 10.0 ** (-dps)) if tol is None else tol
        N = 32
        while True:
            coef = self._coefficients(N)
            scale = max(float(max(abs(c) for c in coef[:, k])) for k in range(3)) or 1.0
            tail = max(float(abs(c)) for c in coef[-4:].ravel())
            if tail <= self.tol * scale or N >= 1024:
                break
            N *= 2
        self.coef = coef
        self.degree = N

    def _values(self, s):
        if self.dps is None:
            return _shifted_values_numpy(self.f, np.asarray(s, dtype=float), float(self.variance))
        out = np.empty((len(s), 3), dtype=object)
        for i, si in enumerate(s):
            m = shifted_moments(self.f, si, self.dps, self.variance)
            out[i] = (m["F"], m["F1"], m["V"])
        return out

    def _coefficients(self, N):
        if self.dps is None:
            th = (np.arange(N) + 0.5) * np.pi / N
            vals = self._values(self.R * np.cos(th))
            j = np.arange(N)
            Cm = np.cos(np.outer(j, th)) * (2.0 / N)
            Cm[0] /= 2
            return Cm @ vals
        from mpmath import mp

        with mp.workdps(self.dps + 5):
            th = [(k + mp.mpf(0.5)) * mp.pi / N for k in range(N)]
            vals = self._values([self.R * mp.cos(x) for x in th])
            coef = np.empty((N, 3), dtype=object)
            for j in range(N):
                w = [mp.cos(j * x) for x in th]
                for q in range(3):
                    coef[j, q] = (2 if j else 1) * mp.fsum(wi * v for wi, v in zip(w, vals[:, q])) / N
        return coef

    def __call__(self, s):
        """(F(s), F'(s), V(s)) for s (array; |s| ≤ R), in float or mpmath as constructed."""
        s = np.asarray(s, dtype=float if self.dps is None else object)
        x = s / self.R
        # Clenshaw, vectorised over s and the three functions
        b1 = b2 = 0 * x[..., None]
        for cj in self.coef[:0:-1]:
            b1, b2 = 2 * x[..., None] * b1 - b2 + cj, b1
        out = x[..., None] * b1 - b2 + self.coef[0]
        return out[..., 0], out[..., 1], out[..., 2]


def _shifted_values_numpy(f, s, variance=1.0):
    """(F, F', V)(s) for float s, ξ ~ N(0, variance), by composite Gauss–Legendre in x (split at kinks)."""
    sd = math.sqrt(variance)
    lo, hi = float(s.min()) - 12.0 * sd, float(s.max()) + 12.0 * sd
    edges = np.union1d(np.linspace(lo, hi, int(math.ceil((hi - lo) / 0.25)) + 1),
                       [k for k in f.kinks if lo < k < hi])
    xg, wg = np.polynomial.legendre.leggauss(16)
    a, b = edges[:-1, None], edges[1:, None]
    x = ((a + b) / 2 + (b - a) / 2 * xg).ravel()
    w = ((b - a) / 2 * wg).ravel()
    with np.errstate(all="ignore"):
        fx = np.asarray(f.numpy(x), dtype=float)
    fx = np.where(np.isfinite(fx), fx, 0.0)
    out = np.empty((len(s), 3))
    for i0 in range(0, len(s), 256):
        ss = s[i0:i0 + 256]
        z = (x[None, :] - ss[:, None]) / sd
        ph = w[None, :] * np.exp(-z * z / 2) / (sd * math.sqrt(2 * math.pi))
        F = ph @ fx
        out[i0:i0 + 256, 0] = F
        out[i0:i0 + 256, 1] = (ph * z) @ fx / sd
        out[i0:i0 + 256, 2] = ph @ (fx * fx) - F * F
    return out


# ============================================================================ latent structure
def latent_geometry(geometry):
    r"""(m, B, k): coordinates m = Ṽᵀμ of μ in an orthonormal basis Ṽ of span(μ, w_K, w_Q),
    and B = Ṽᵀ W Ṽ = I_k + Σ_j ŵ_K^{(j)} ŵ_Q^{(j)ᵀ} (k = dimension of the span)."""
    from .model import as_geometry

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


def _gauss_hermite(nq: int, dps: int | None):
    """Probabilists' Gauss–Hermite nodes and weights (weights sum to 1)."""
    if dps is None:
        x, w = np.polynomial.hermite_e.hermegauss(nq)
        return x, w / w.sum()
    from mpmath import mp

    with mp.workdps(dps + 10):  # Golub–Welsch on the Jacobi matrix of He_k
        J = mp.matrix(nq, nq)
        for i in range(nq - 1):
            J[i, i + 1] = J[i + 1, i] = mp.sqrt(i + 1)
        E, Q = mp.eigsy(J)
        x = [E[i] for i in range(nq)]
        w = [Q[0, i] ** 2 for i in range(nq)]
        order = sorted(range(nq), key=lambda i: x[i])
        tot = mp.fsum(w)
    with mp.workdps(dps):
        return (np.array([+x[i] for i in order], dtype=object), np.array([w[i] / tot for i in order], dtype=object))


def latent_quadrature(k: int, nq: int, dps: int | None = None):
    r"""Nodes of the latent law ω = (y, g̃): y = ±1 (mass ½ each) × tensor Gauss–Hermite in g̃ ∈ R^k.

    Returns (y (Q,), g (Q, k), w (Q,)), Q = 2·nq^k, weights summing to 1.
    """
    obj = dps is not None
    if k == 0:
        g = np.zeros((1, 0), dtype=object if obj else float)
        wg = np.ones(1, dtype=object if obj else float)
    else:
        x, w1 = _gauss_hermite(nq, dps)
        idx = np.indices((nq,) * k).reshape(k, -1).T
        g = x[idx]
        wg = np.prod(w1[idx], axis=1) if not obj else np.array([_prod(w1[i]) for i in idx], dtype=object)
    one = g.dtype.type(1) if not obj else 1
    y = np.concatenate([np.full(len(g), one), np.full(len(g), -one)])
    if obj:
        y = np.array([1 if v > 0 else -1 for v in y], dtype=object)
    G = np.concatenate([g, g], 0)
    W = np.concatenate([wg, wg]) / 2
    return y, G, W


def _prod(seq):
    out = 1
    for v in seq:
        out = out * v
    return out


def latent_kernels(f, geometry, p: int, dps: int | None = None, nq: int | None = None) -> dict:
    r"""The latent quadrature and the kernels 𝕄 = √p F(δ), 𝔻 = F'(δ), Σ² = V(δ) − F'(δ)² on it.

    δ(ω, ω') = uᵀBu'/√p with u = y m + g̃ (:func:`latent_geometry`). Returns a dict with
    ``y, U, w`` (labels, latent coordinates u, weights at the Q nodes), ``M, D, S2`` (Q×Q),
    ``k``, ``nq`` and ``Dself`` = F'(δ(ω, ω)) (the diagonal of 𝔻∘S that the −I removes).
    """
    from .activations import activation

    f = activation(f)
    m, B, k = latent_geometry(geometry)
    if k > max(LATENT_NODES):
        raise ParameterError("geometry", f"span(mu, w_K, w_Q) of dimension {k}",
                             f"a latent dimension k <= {max(LATENT_NODES)} for correction='finite-p' "
                             "(mu and one pair w_K, w_Q; or collinear vectors)",
                             hint=f"the latent quadrature has 2*nq^k nodes; k = {k} is out of reach")
    nq = LATENT_NODES[k] if nq is None else int(nq)
    y, g, w = latent_quadrature(k, nq, dps)
    if dps is None:
        U = y[:, None] * m[None, :] + g
        delta = (U @ B @ U.T) / math.sqrt(p)
        R = float(np.max(np.abs(delta))) * 1.0001 + 1e-3
        theta = (p - k) / p
        shifts = ShiftedGaussian(f, R, variance=theta)
        F, F1, V = shifts(delta)
        rp = math.sqrt(p)
    else:
        from mpmath import mp

        with mp.workdps(dps):
            mo = np.array([mp.mpf(float(v)) for v in m], dtype=object)
            Bo = np.array([[mp.mpf(float(v)) for v in row] for row in B], dtype=object).reshape(B.shape)
            U = y[:, None] * mo[None, :] + g
            rp = mp.sqrt(p)
            delta = (U @ Bo @ U.T) / rp if k else np.zeros((len(y), len(y)), dtype=object) * mp.mpf(0)
            R = float(max(abs(v) for v in delta.ravel())) * 1.0001 + 1e-3
            theta = mp.mpf(p - k) / p
            shifts = ShiftedGaussian(f, R, dps=dps, variance=theta)
            F, F1, V = shifts(delta)
    S2 = V - theta * F1 * F1
    S2 = np.where(S2 > 0, S2, 0 * S2)
    return {"y": y, "U": U, "w": w, "M": rp * F, "D": F1, "S2": S2, "Dself": np.diagonal(F1).copy(),
            "k": k, "nq": nq, "delta": delta, "theta": theta, "chebyshev_degree": shifts.degree}


def latent_diagonal(f, kern: dict, p: int, geometry) -> np.ndarray:
    r"""The conditional diagonal d(ω) = E[f(x_iᵀWx_i/√p) | ω_i = ω]/√p at the latent nodes (float64).

    x_iᵀWx_i = ‖z_i^⊥‖² + uᵀBu with ‖z_i^⊥‖² ~ χ²_{p−k} independent of ω: one-dimensional
    quadrature in r = ‖z^⊥‖ (composite Gauss–Legendre against 2r·pdf_χ²(r²), as for d_n).
    Unlike d_n (MATH.md §1) it contains the W-part uᵀBu of the diagonal: in the corrected theory
    no other term carries it (the latent kernel 𝕄 is evaluated off the diagonal).
    """
    from scipy import stats

    from .activations import activation

    f = activation(f)
    m, B, k = latent_geometry(geometry)
    U = np.asarray(kern["U"], dtype=float)
    a = np.einsum("qi,ij,qj->q", U, B, U) if k else np.zeros(len(U))
    dof = max(p - k, 1)
    r0 = math.sqrt(dof)
    edges = np.linspace(max(0.0, r0 - 12.0), r0 + 12.0, 97)
    xg, wg = np.polynomial.legendre.leggauss(16)
    lo, hi = edges[:-1, None], edges[1:, None]
    r = ((lo + hi) / 2 + (hi - lo) / 2 * xg).ravel()
    wr = ((hi - lo) / 2 * wg).ravel() * 2 * r * stats.chi2(dof).pdf(r * r)
    wr = wr / wr.sum()
    sq = math.sqrt(p)
    with np.errstate(all="ignore"):
        vals = np.asarray(f.numpy((r[None, :] ** 2 + a[:, None]) / sq), dtype=float)
    return (vals @ wr) / sq


# ============================================================================ linear algebra helpers
def _inv3(A):
    """Batched inverse of 3×3 matrices (adjugate / determinant); numeric or object arrays."""
    a, b, c = A[..., 0, 0], A[..., 0, 1], A[..., 0, 2]
    d, e, f = A[..., 1, 0], A[..., 1, 1], A[..., 1, 2]
    g, h, i = A[..., 2, 0], A[..., 2, 1], A[..., 2, 2]
    C00, C01, C02 = e * i - f * h, -(d * i - f * g), d * h - e * g
    det = a * C00 + b * C01 + c * C02
    out = np.empty_like(A)
    out[..., 0, 0], out[..., 1, 0], out[..., 2, 0] = C00 / det, C01 / det, C02 / det
    out[..., 0, 1] = -(b * i - c * h) / det
    out[..., 1, 1] = (a * i - c * g) / det
    out[..., 2, 1] = -(a * h - b * g) / det
    out[..., 0, 2] = (b * f - c * e) / det
    out[..., 1, 2] = -(a * f - c * d) / det
    out[..., 2, 2] = (a * e - b * d) / det
    return out


def _solve(A, B):
    """Solve A X = B (A square; B vector or matrix); numpy for numeric dtypes, Gauss–Jordan for objects."""
    if A.dtype != object:
        return np.linalg.solve(A, B)
    vec = B.ndim == 1
    M = np.concatenate([A, B[:, None] if vec else B], axis=1).astype(object)
    n = A.shape[0]
    for col in range(n):
        piv = max(range(col, n), key=lambda r: abs(M[r, col]))
        if piv != col:
            M[[col, piv]] = M[[piv, col]]
        M[col] = M[col] / M[col, col]
        others = [r for r in range(n) if r != col]
        M[others] = M[others] - np.outer(M[others, col], M[col])
    X = M[:, n:]
    return X[:, 0] if vec else X


def _weighted_svd(K, w, tol):
    r"""K(ω, ω') ≈ Σ_r σ_r ψ_r(ω) χ_r(ω') with E[ψ_r ψ_s] = E[χ_r χ_s] = δ_rs under the weights w.

    Singular values below ``tol``·σ_1 are dropped.
    """
    if K.dtype != object:
        sw = np.sqrt(w.astype(float))
        U, s, Vt = np.linalg.svd(sw[:, None] * K * sw[None, :])
        R = int(np.sum(s > tol * s[0])) if s.size and s[0] > 0 else 0
        return s[:R], U[:, :R] / sw[:, None], Vt[:R].T / sw[:, None]
    from mpmath import mp

    sw = np.array([mp.sqrt(v) for v in w], dtype=object)
    A = mp.matrix((sw[:, None] * K * sw[None, :]).tolist())
    U, S, V = mp.svd_r(A)
    s = np.array([S[i] for i in range(len(S))], dtype=object)
    R = sum(1 for v in s if s[0] > 0 and v > tol * s[0])
    Uo = np.array(U.tolist(), dtype=object)[:, :R]
    Vo = np.array(V.tolist(), dtype=object)[:R].T
    return s[:R], Uo / sw[:, None], Vo / sw[:, None]


# ============================================================================ the bulk: latent matrix Dyson equation
@dataclass
class PencilSolution:
    """E over S^⊥ and N of L^{-1}, conditional on the latent (Q, 3, 3), and the iteration record."""

    G: np.ndarray
    iterations: int
    residual: float


def solve_pencil(c, z, d, w, separable, S2, Dself=None, tol=1e-12, max_iter=20000, G0=None,
                 damping=0.5, theta=1) -> PencilSolution:
    r"""Solve the latent-diagonal matrix Dyson equation of the pencil

      L = [[z, √c K0ᵀ, 0], [√c K0, 0, I], [0, I, S]],  K0 = 𝔻∘(S − I) + Σ∘N/√p + d I,

    with S = Z^⊥ᵀZ^⊥/p (free Poisson, free cumulants κ_n = θ c^{1−n}, θ = (p − k)/p) and N (GOE) free from each
    other and from the latent-diagonal algebra 𝒟. With 𝔻 = Σ_r σ_r ψ_r ⊗ χ_r (``separable``
    = (σ, ψ, χ)), the S-terms of L are Σ_j P_j S P'_j with P_j, P'_j ∈ M_3(𝒟), and

      𝒢(ω) = (L0(ω) + R_S(−𝒢)(ω) + R_N(−𝒢)(ω))^{-1},
      R_S(b) = θ Σ_{jj'} P_j [(I − τ(b)/c)^{-1}]_{jj'} P'_{j'},  τ(b)_{jj'} = E_ω[P'_j b P_{j'}],
      R_N(b) = E_12 E'[Σ(ω',ω)Σ(ω,ω') b_21(ω')] + … (variance profile of Σ∘N),

    L0(ω) = [[z, √c(d − θ𝔻(ω,ω)), 0], [√c(d − θ𝔻(ω,ω)), 0, 1], [0, 1, 0]] (``d`` may depend on ω). Blocks of
    𝒢 = E_𝒟[L^{-1}]: 𝒢11 = Q0, 𝒢12 = √c Q0K0ᵀS, 𝒢13 = −√c Q0K0ᵀ, 𝒢22 = −S + cSK0Q0K0ᵀS,
    𝒢32 = I − cK0Q0K0ᵀS, 𝒢33 = cK0Q0K0ᵀ, Q0 = (z + cK0ᵀSK0)^{-1}. Solved by the damped
    iteration 𝒢 ← (1 − ϑ)𝒢 + ϑ·RHS(𝒢) from L0^{-1}; ``z`` may be complex (complex-step γ-derivative).
    """
    sig, psi, chi = separable
    Q = len(w)
    R = len(sig)
    J = 2 * R + 1
    obj = np.asarray(w).dtype == object
    dt = object if obj else complex
    rc = c ** 0.5 if not obj else _mpsqrt(c)
    fs = np.zeros((Q, J), dtype=dt)
    g = np.zeros((Q, J), dtype=dt)
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
        Dself = (psi * chi) @ sig if R else np.zeros(Q)
    kd = rc * (d - theta * Dself)
    L0 = np.zeros((Q, 3, 3), dtype=dt)
    L0[:, 0, 0] = z
    L0[:, 0, 1] = L0[:, 1, 0] = kd
    L0[:, 1, 2] = L0[:, 2, 1] = 1
    Sg = np.sqrt(S2) if not obj else np.vectorize(_mpsqrt, otypes=[object])(S2)
    W1, W2, W3 = S2.T * w[None, :], S2 * w[None, :], (Sg * Sg.T) * w[None, :]
    eyeJ = np.eye(J, dtype=int)

    # the S-terms grouped by their block indices: columns j with a_j = α, rows j with b_j = β
    rows_a = [np.flatnonzero(a_idx == v) for v in range(3)]
    rows_b = [np.flatnonzero(b_idx == v) for v in range(3)]
    gw = g * w[:, None]

    def rhs(G):
        b = -G
        # τ_jk = E_ω[g_j b_{b_j a_k} f_k], computed block by block (b_j, a_k)
        tau = np.zeros((J, J), dtype=dt)
        for be, jb in enumerate(rows_b):
            for al, ja in enumerate(rows_a):
                if jb.size and ja.size:
                    tau[np.ix_(jb, ja)] = gw[:, jb].T @ (b[:, be, al][:, None] * fs[:, ja])
        mt = theta * _solve(eyeJ - tau / c, eyeJ.astype(dt))
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
        return _inv3(L0 + RS + RN)

    G = _inv3(L0) if G0 is None else G0.copy()
    imag_scale = abs(complex(z).imag) if not obj else abs(_mpimag(z))
    res = float("inf")
    for it in range(1, max_iter + 1):
        Gn = rhs(G)
        diff = Gn - G
        scale = max(1.0, _max_abs(_re(G)))
        res = _max_abs(_re(diff)) / scale
        if imag_scale:
            res = max(res, _max_abs(_im(diff)) / (imag_scale * max(1.0, _max_abs(_im(G)) / imag_scale)))
        G = G + damping * diff
        if res <= tol:
            break
    else:
        raise ConvergenceError("no convergence of the latent Dyson equation (finite-p correction)",
                               residuals=[res], iterations=max_iter)
    if not (np.all(np.isfinite(_re(G[:, 0, 0]).astype(float)))):
        raise ConvergenceError("the latent Dyson equation diverged (finite-p correction)",
                               residuals=[res], iterations=it)
    return PencilSolution(G=G, iterations=it, residual=res)


def _mpsqrt(x):
    from mpmath import mp

    return mp.sqrt(x)


def _mpimag(z):
    from mpmath import mp

    return mp.im(z)


def _re(a):
    if a.dtype == object:
        from mpmath import mp

        return np.vectorize(mp.re, otypes=[object])(a)
    return a.real


def _im(a):
    if a.dtype == object:
        from mpmath import mp

        return np.vectorize(mp.im, otypes=[object])(a)
    return a.imag


def _max_abs(a):
    return float(np.max(np.abs(a.astype(float)))) if a.size else 0.0


# ============================================================================ the low rank: latent Woodbury
def _orthonormal(X, w, tol):
    """Weighted modified Gram–Schmidt keeping column order (dependent columns are dropped)."""
    out = []
    for j in range(X.shape[1]):
        v = X[:, j].copy()
        n0 = _sqrtv(v @ (w * v))
        for _ in range(2):
            for q in out:
                v = v - (q @ (w * v)) * q
        nv = _sqrtv(v @ (w * v))
        if float(nv) > tol * max(1.0, float(n0)):
            out.append(v / nv)
    return np.column_stack(out)


def _sqrtv(x):
    return math.sqrt(x) if isinstance(x, (float, int, np.floating, np.integer)) else _mpsqrt(x)


def _latent_basis(kern: dict, tol: float):
    r"""The orthonormal latent basis φ (φ_0 = y; spanning y, the u_l and the singular functions of 𝕄),
    𝒜 = E[𝕄 φ_a φ_b'], ρ_al = E[u_l φ_a] and the directions a with ρ_a ≠ 0; independent of c and z,
    so computed once per kernel (cached in ``kern``)."""
    key = ("basis", tol)
    if key not in kern:
        y, U, w, M = kern["y"], kern["U"], kern["w"], kern["M"]
        k = U.shape[1]
        obj = w.dtype == object
        s, Lf, Rf = _weighted_svd(M, w, tol) if M.size else (np.zeros(0), np.zeros((len(w), 0)), np.zeros((len(w), 0)))
        X = np.column_stack([y[:, None], U, Lf, Rf]) if k or len(s) else y[:, None]
        phi = _orthonormal(X, w, 1e-9 if not obj else tol)
        Wphi = w[:, None] * phi
        rho = Wphi.T @ U if k else np.zeros((phi.shape[1], 0), dtype=phi.dtype)
        ua = [i for i in range(phi.shape[1]) if k and any(float(abs(v)) > 1e-12 for v in rho[i])]
        kern[key] = (phi, Wphi.T @ M @ Wphi, rho, ua)
    return kern[key]


def latent_resolvent(c, kern: dict, G: np.ndarray, tol: float = 1e-12):
    r"""F = lim ŷᵀ(ΦᵀΦ/n + z)^{-1}ŷ from the pencil solution and the latent low-rank part.

    Φ = XK, X = ṼUᵀ + Z^⊥, K = K0 + (1/√p)𝕄. With an orthonormal latent basis φ_a (first
    φ_0 = y, spanning y, the coordinates u_l and the singular functions of 𝕄),
    𝒜_ab = E[𝕄(ω,ω') φ_a(ω) φ_b(ω')], ρ_al = E[u_l φ_a], h_a = φ_a/√n:

      Δ/√n = Σ_ab 𝒜_ab/√c · α_a h_bᵀ + Σ_l Σ_ab ρ_al 𝒜_ab/c · Ṽe_l h_bᵀ + Σ_l Σ_a ρ_al Ṽe_l (K0ᵀh_a)ᵀ,

    α_a = Z^⊥h_a/√p. Gram entries are latent averages of the pencil blocks, e.g.
    Γ[h_a, h_b] = E[φ_a φ_b 𝒢11], Γ[α_a, α_b] = E[φ_a φ_b 𝒢22], Γ[Ṽe_l, Ṽe_l'] = −δ_ll', and
    F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e, e = Γ[:, ŷ] (MATH.md §6 with latent directions).
    """
    U, w = kern["U"], kern["w"]
    k = U.shape[1]
    obj = w.dtype == object
    rc = _mpsqrt(c) if obj else math.sqrt(c)
    phi, a, rho, ua = _latent_basis(kern, tol)
    A = phi.shape[1]
    Wphi = w[:, None] * phi
    nA, nU = A, len(ua)
    Nn, Np = nA + nU, nA + k
    dt = G.dtype

    def avg(fv):
        return Wphi.T @ (fv[:, None] * phi)

    c_ = c
    blk_Q, blk_QK = G[:, 0, 0], -G[:, 0, 2] / rc
    blk_KQK, blk_QKS = G[:, 2, 2] / c_, G[:, 0, 1] / rc
    blk_KQKS, blk_pp = (1 - G[:, 2, 1]) / c_, G[:, 1, 1]
    Gnn = np.zeros((Nn, Nn), dtype=dt)
    Gnp = np.zeros((Nn, Np), dtype=dt)
    Gpp = np.zeros((Np, Np), dtype=dt)
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
    C = np.zeros((Np, Nn), dtype=dt)
    C[:nA, :nA] = a / rc
    if k:
        C[nA:, :nA] = rho.T @ a / c_
        for j, i in enumerate(ua):
            C[nA:, nA + j] = rho[i]
    Z1, Z2 = np.zeros((Nn, Nn), dtype=dt), np.zeros((Np, Np), dtype=dt)
    Ch = np.block([[Z1, C.T], [C, Z2]])
    e = Gam[:, 0]
    eye = np.eye(Nn + Np, dtype=int).astype(dt)
    u = Ch @ _solve(eye + Gam @ Ch, e)
    return Gam[0, 0] - e @ u


# ============================================================================ public evaluation
_KERNEL_CACHE: dict = {}


def _kernels_cached(f, geom, p, dps, nq=None):
    key = (f, geom.gram.tobytes(), geom.rank, int(p), dps, nq)
    if key not in _KERNEL_CACHE:
        if len(_KERNEL_CACHE) > 32:
            _KERNEL_CACHE.clear()
        kern = latent_kernels(f, geom, int(p), dps=dps, nq=nq)
        tol = SEPARABLE_TOL if dps is None else 10.0 ** (-dps)
        kern["separable"] = _weighted_svd(kern["D"], kern["w"], tol)
        _KERNEL_CACHE[key] = kern
    return _KERNEL_CACHE[key]


def finite_p_error(f, c, gamma, geometry, n: int, ctx, diagonal: str = "f", point_info=None,
                   latent_nodes: int | None = None):
    r"""E_A(γ) = −γ² F'(γ) of the finite-p corrected theory at the points (c, γ) (1-d arrays).

    For each point, p = round(c n); the latent kernels 𝕄, 𝔻, Σ² (computed at the context's
    precision) and d = d_n (0 with ``diagonal='zero'``) enter :func:`solve_pencil` at the
    complex point z = γ + iη and :func:`latent_resolvent`; F'(γ) = Im F(γ + iη)/η
    (complex-step derivative: no cancellation; η = 10^{-20}γ in float64, 10^{-(dps+5)}γ in mpmath).
    ``latent_nodes``: Gauss–Hermite nodes per latent dimension (default :data:`LATENT_NODES`).
    Returns the array of E_A (float, or mpf objects in the mpmath context).
    """
    from .activations import activation
    from .model import as_geometry, dimension, kernel_constants

    f = activation(f)
    geom = as_geometry(geometry)
    cb = np.asarray(c, dtype=float).reshape(-1)
    gb = np.asarray(gamma, dtype=float).reshape(-1)
    obj = ctx.name == "mpmath"
    dps = ctx.dps if obj else None
    kernel_constants(f, diagonal=diagonal, n=n, c=cb, snr=geom.snr, dps=dps)  # validates f and diagonal
    out = []
    warm = {}
    for i, (ci, gi) in enumerate(zip(cb, gb)):
        p = dimension(n, ci)
        kern = _kernels_cached(f, geom, p, dps, latent_nodes)
        # the diagonal: d(ω) (0 for diagonal="zero") minus what (1/√p)F(δ) = 𝕄/p puts there
        dkey = ("diag", diagonal)
        if dkey not in kern:
            dlat = latent_diagonal(f, kern, p, geom) if diagonal == "f" else np.zeros(len(kern["w"]))
            Mself = np.diagonal(kern["M"]).copy()
            if obj:
                from mpmath import mp

                kern[dkey] = np.array([mp.mpf(float(v)) for v in dlat], dtype=object) - Mself / p
            else:
                kern[dkey] = dlat - Mself / p
        dq = kern[dkey]
        if obj:
            from mpmath import mp

            cm, gm = mp.mpf(ci), mp.mpf(gi)
            eta = gm * mp.mpf(10) ** (-(dps + 5))
            z = mp.mpc(gm, eta)
            tol = 10.0 ** (-(dps - 3))
        else:
            cm, gm = float(ci), float(gi)
            eta = gm * 1e-20
            z = complex(gm, eta)
            tol = 1e-12
        try:
            sol = solve_pencil(cm, z, dq, kern["w"], kern["separable"], kern["S2"], Dself=kern["Dself"],
                               tol=tol, G0=warm.get(p), theta=kern["theta"])
        except ConvergenceError as exc:
            raise ConvergenceError(exc.reason, exc.residuals, exc.iterations,
                                   point=dict(point_info or {}, c=float(ci), gamma=float(gi), n=n, p=p)) from None
        warm[p] = sol.G
        F = latent_resolvent(cm, kern, sol.G, tol=1e-12 if not obj else 10.0 ** (-dps))
        dF = (mp.im(F) if obj else F.imag) / eta
        out.append(-(gm ** 2) * dF)
    return np.array(out, dtype=object if obj else float)
