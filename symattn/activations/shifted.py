r"""Shifted-Gaussian moments of an activation (docs/theory.md §10.2).

For the centred activation f (f − a0) and ξ ~ N(0, σ²),

  F(s) = E f(ξ + s),   F'(s) = E f'(ξ + s) = E[ξ f(ξ + s)]/σ²   (Stein),   V(s) = Var f(ξ + s).

They are the conditional mean, slope and variance of the kernel entry f(ξ^⊥ + δ) given its
latent argument δ in the finite-p corrected theory (docs/theory.md §10.3), where σ² = θ = (p − k)/p.

- :func:`shifted_moments` -- (F, F', V)(s) at one shift, in mpmath at ``dps`` digits
  (tanh-sinh quadrature, :func:`symattn.activations.hermite.gaussian_moments`);
- :class:`ShiftedGaussian` -- Chebyshev interpolants of (F, F', V) on [−R, R], in float64
  (values by composite Gauss–Legendre, :func:`symattn.gauss.composite_gauss_legendre`) or mpmath;
- :func:`finite_p_coefficients` -- the pair-class values F(±t), F'(±t), V(±t) combined into
  F_odd, ā, b, ν̄, s̄² (§10.2, the leading order in the latent fluctuation).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from ..caching import Memo
from ..errors import ParameterError
from ..gauss import composite_gauss_legendre
from ..validation import check_dps
from .activation import activation
from .hermite import gaussian_moments

__all__ = ["shifted_moments", "ShiftedGaussian", "FinitePCoefficients", "finite_p_coefficients"]

#: shifted moments already computed: (f, s, σ, dps) → {F, F1, V}
MOMENTS = Memo("activations.shifted_moments", 4096)


def shifted_moments(f, s, dps: int = 20, variance=1) -> dict:
    r"""F(s) = E f(ξ+s), F'(s) = E[ξ f(ξ+s)]/σ², V(s) = Var f(ξ+s), ξ ~ N(0, σ²), in mpmath.

    docs/theory.md §10.2. With ξ = σx, x ~ N(0, 1), the three are Gaussian integrals of
    x ↦ f(σx + s), computed by tanh-sinh quadrature against φ at ``dps`` digits (10 guard digits),
    split at the kinks of f mapped to (kink − s)/σ. Values are cached per (f, s, σ, dps).

    Parameters
    ----------
    f : activation spec
        Anything :func:`symattn.activation` accepts; it is centred (a0 subtracted) here.
    s : real
        The shift.
    dps : int
        Decimal digits of the result.
    variance : real
        σ² > 0.

    Returns
    -------
    dict
        ``{"F": F(s), "F1": F'(s), "V": V(s)}``, mpmath numbers at ``dps`` digits.

    Examples
    --------
    >>> from mpmath import mp
    >>> m = shifted_moments("erf", 0.7, 20)      # F = erf(s/√3) for f = erf
    >>> with mp.workdps(25):
    ...     bool(abs(m["F"] - mp.erf(mp.mpf(0.7) / mp.sqrt(3))) < 1e-18)
    True
    """
    from mpmath import mp

    f = activation(f)
    with mp.workdps(dps + 10):
        s = mp.mpf(s)
        sd = mp.sqrt(mp.mpf(variance))
        key = (f, mp.nstr(s, dps + 5), mp.nstr(sd, dps + 5), dps)

        def compute():
            a0 = f.constants(dps)["a0"]
            bps = [(mp.mpf(k) - s) / sd for k in f.kinks]
            cutoff = 30.0 if f.float_only else None
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                m = gaussian_moments(lambda u: f._mp_eval(sd * u + s), 1, dps, breakpoints=bps, cutoff=cutoff)
            return {"F": m["h"][0] - a0, "F1": m["h"][1] / sd, "V": m["f2"] - m["h"][0] ** 2}

        moments = MOMENTS.get(key, compute)
    with mp.workdps(dps):
        return {k: +v for k, v in moments.items()}


def _shifted_values_numpy(f, s, variance=1.0) -> np.ndarray:
    r"""(F, F', V)(s) at float shifts s, ξ ~ N(0, σ²), by composite Gauss–Legendre in x = ξ + s.

    docs/theory.md §10.2. With φ_σ the N(0, σ²) density, F(s) = ∫ f(x) φ_σ(x − s) dx,
    F'(s) = ∫ f(x) (x − s)/σ² φ_σ(x − s) dx and V(s) = ∫ f² φ_σ(x − s) dx − F(s)², each by the
    16-point Gauss–Legendre rule on panels of width ≈ 1/4 over [min s − 12σ, max s + 12σ], with
    the kinks of f added as panel edges (:func:`symattn.gauss.composite_gauss_legendre`).

    Parameters
    ----------
    f : Activation
        The (centred) activation object (``f.numpy`` and ``f.kinks`` are used).
    s : numpy.ndarray, shape (m,)
        Shifts.
    variance : float
        σ².

    Returns
    -------
    numpy.ndarray, shape (m, 3)
        Columns F, F', V.

    Examples
    --------
    >>> from symattn import activation
    >>> v = _shifted_values_numpy(activation("linear"), np.array([0.5]))   # f(x) = x: F = s, F' = 1, V = 1
    >>> np.round(v, 12).tolist()
    [[0.5, 1.0, 1.0]]
    """
    sd = math.sqrt(variance)
    lo, hi = float(s.min()) - 12.0 * sd, float(s.max()) + 12.0 * sd
    edges = np.union1d(np.linspace(lo, hi, int(math.ceil((hi - lo) / 0.25)) + 1),
                       [k for k in f.kinks if lo < k < hi])
    x, w = composite_gauss_legendre(edges, 16)
    with np.errstate(all="ignore"):
        fx = np.asarray(f.numpy(x), dtype=float)
    fx = np.where(np.isfinite(fx), fx, 0.0)
    out = np.empty((len(s), 3))
    # shifts in blocks of 32 (in sorted order), each against the nodes within 12σ of the block only: the
    # Gaussian weight beyond is below e^{-72}, far under the float64 rounding of the sums
    order = np.argsort(s)
    for i0 in range(0, len(s), 32):
        idx = order[i0:i0 + 32]
        ss = s[idx]
        k0, k1 = np.searchsorted(x, [float(ss[0]) - 12.0 * sd, float(ss[-1]) + 12.0 * sd])
        xs, fs = x[k0:k1], fx[k0:k1]
        z = (xs[None, :] - ss[:, None]) / sd
        ph = w[None, k0:k1] * np.exp(-z * z / 2) / (sd * math.sqrt(2 * math.pi))
        F = ph @ fs
        out[idx, 0] = F
        out[idx, 1] = (ph * z) @ fs / sd
        out[idx, 2] = ph @ (fs * fs) - F * F
    return out


class ShiftedGaussian:
    r"""F(s), F'(s), V(s) of the centred f on [−R, R] as Chebyshev interpolants (any s in range).

    docs/theory.md §10.2. F(s) = ∫ f(x) φ_σ(x − s) dx is entire in s for every activation (Gaussian
    smoothing), so the interpolant Σ_j c_j T_j(s/R), with c_j = (2 − δ_j0)/N Σ_k v(s_k) cos(jθ_k) at
    the N Chebyshev nodes s_k = R cos θ_k, θ_k = (k + ½)π/N, converges spectrally. N starts at 32
    and is doubled until the four trailing coefficients fall below ``tol``·max|c| (at most 1024).
    Node values: float64 (``dps=None``) by :func:`_shifted_values_numpy`; otherwise
    :func:`shifted_moments` at ``dps`` digits (and the coefficients with 5 guard digits).

    Parameters
    ----------
    f : activation spec
    R : float
        Half-width of the interval.
    dps : int or None
        None for float64, else mpmath digits.
    tol : float, optional
        Relative tail tolerance (default 1e-14 in float64, 10^{−dps} in mpmath).
    variance : real
        σ² of ξ.

    Attributes
    ----------
    coef : numpy.ndarray, shape (degree, 3)
        Chebyshev coefficients of F, F', V.
    degree : int
        N.

    Examples
    --------
    >>> sg = ShiftedGaussian("tanh", 2.0)
    >>> F, F1, V = sg(np.array([0.0, 1.0]))
    >>> round(float(F[0]), 12), round(float(F1[0]), 6), sg.degree     # F(0) = 0, F'(0) = a1 of tanh
    (0.0, 0.605706, 32)
    """

    def __init__(self, f, R: float, dps: int | None = None, tol: float | None = None, variance: float = 1.0):
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

    def _coefficients(self, N):
        if self.dps is None:  # float64: the cosine transform as one matrix product
            th = (np.arange(N) + 0.5) * np.pi / N
            vals = _shifted_values_numpy(self.f, self.R * np.cos(th), float(self.variance))
            j = np.arange(N)
            Cm = np.cos(np.outer(j, th)) * (2.0 / N)
            Cm[0] /= 2
            return Cm @ vals
        from mpmath import mp

        with mp.workdps(self.dps + 5):  # mpmath: exact sums (fsum) with guard digits
            th = [(k + mp.mpf(0.5)) * mp.pi / N for k in range(N)]
            vals = np.empty((N, 3), dtype=object)
            for i, x in enumerate(th):
                m = shifted_moments(self.f, self.R * mp.cos(x), self.dps, self.variance)
                vals[i] = (m["F"], m["F1"], m["V"])
            coef = np.empty((N, 3), dtype=object)
            for j in range(N):
                w = [mp.cos(j * x) for x in th]
                for q in range(3):
                    coef[j, q] = (2 if j else 1) * mp.fsum(wi * v for wi, v in zip(w, vals[:, q])) / N
        return coef

    def __call__(self, s):
        """(F(s), F'(s), V(s)) for s (array; |s| ≤ R), in float or mpmath as constructed."""
        s = np.asarray(s, dtype=self.coef.dtype)
        x = s / self.R
        # Clenshaw, vectorised over s and the three functions
        b1 = b2 = 0 * x[..., None]
        for cj in self.coef[:0:-1]:
            b1, b2 = 2 * x[..., None] * b1 - b2 + cj, b1
        out = x[..., None] * b1 - b2 + self.coef[0]
        return out[..., 0], out[..., 1], out[..., 2]


@dataclass(frozen=True)
class FinitePCoefficients:
    r"""The leading-order (pair-class) finite-p coefficients at signal strength t (docs/theory.md §10.2).

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
    r"""F_odd(t), ā(t), b(t), ν̄(t), s̄²(t) of the centred activation f (docs/theory.md §10.2).

    With F, F', V of :func:`shifted_moments` (σ² = 1):

      F_odd/even = (F(t) ∓ F(−t))/2,  ā = (F'(t) + F'(−t))/2,  b = (F'(t) − F'(−t))/2,
      ν̄ = (V(t) + V(−t))/2,  s̄² = ν̄ − ā².

    These are the values of 𝕄/√p, 𝔻 and Σ² of the corrected theory on the pair classes
    y_i y_j = ±1 with the latent fluctuation set to 0 (at θ = 1): its leading order.

    Parameters
    ----------
    f : activation spec
    t : real
        The signal strength (:func:`symattn.model.signal_strength`).
    dps : int or None
        None: floats (computed at 20 digits); otherwise mpmath numbers at ``dps`` digits.

    Returns
    -------
    FinitePCoefficients

    Examples
    --------
    >>> co = finite_p_coefficients("tanh", 0.6928203230275507)     # tanh, c = 0.3, ‖μ‖² = 3, w = μ, n = 1000
    >>> round(co.F_odd, 4), round(co.a_bar, 4), round(co.nu_bar, 4), co.b == 0.0
    (0.4004, 0.5247, 0.315, True)
    """
    from mpmath import mp

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
