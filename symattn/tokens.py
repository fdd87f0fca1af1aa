r"""The law of a token sequence with correlations in time (docs/theory.md §15).

Tokens :math:`x_t = y_t\mu + z_t`, t = 1..n, with :math:`E[z_t z_s^\top] = T_{ts} I_p`: the noise is
:math:`Z = G\,L^\top` (p×n) for G with iid N(0, 1) entries and :math:`T = LL^\top` the Cholesky factor
of a stationary correlation, a symmetric positive-definite Toeplitz matrix with :math:`T_{tt} = 1`,
:math:`T_{ts} = r_{|t-s|}`. Its spectral density (the symbol of the Toeplitz matrix) is

.. math::  s(\omega) = 1 + 2\sum_{k\ge1} r_k\cos k\omega,
           \qquad s_{AR(1)}(\omega) = \frac{1-\rho^2}{1 - 2\rho\cos\omega + \rho^2}\quad(r_k = \rho^k).

The labels are iid balanced ±1 (the paper's law), or a stationary ±1 Markov chain with persistence
:math:`q = P(y_{t+1} = y_t)`, whose autocorrelation is :math:`E[y_ty_{t+k}] = (2q-1)^k`: its spectral
density is the AR(1) one at :math:`\rho_y = 2q - 1`.
"""
from __future__ import annotations

import math
import os
from numbers import Real

import numpy as np

from .errors import ParameterError

__all__ = ["TokenLaw", "as_token_law", "ar1_density", "toeplitz_symbol"]

#: the most nodes of the theory's ω grid (:meth:`TokenLaw.grid`)
GRID_MAX = 1 << 22


def ar1_density(rho: float, omega):
    r"""The spectral density of the AR(1) correlation :math:`r_k = \rho^k`, |ρ| < 1:
    :math:`s(\omega) = (1-\rho^2)/(1 - 2\rho\cos\omega + \rho^2)`.

    Examples
    --------
    >>> float(ar1_density(0.5, 0.0)), float(ar1_density(0.5, np.pi))      # (1+ρ)/(1−ρ), (1−ρ)/(1+ρ)
    (3.0, 0.3333333333333333)
    """
    omega = np.asarray(omega, dtype=float)
    return (1 - rho * rho) / (1 - 2 * rho * np.cos(omega) + rho * rho)


def toeplitz_symbol(r, N: int, r0: float = 1.0) -> np.ndarray:
    r"""The symbol :math:`r_0 + 2\sum_{k=1}^{L} r_k\cos k\omega_j` of a symmetric Toeplitz sequence on the grid
    :math:`\omega_j = 2\pi j/N` (one FFT; lags beyond (N − 1)/2 are dropped).

    Examples
    --------
    >>> toeplitz_symbol([0.25], 4).round(12).tolist()           # 1 + ½ cos ω at ω = 0, π/2, π, 3π/2
    [1.5, 1.0, 0.5, 1.0]
    """
    r = np.asarray(r, dtype=float)
    a = np.zeros(N)
    L = min(r.size, (N - 1) // 2)
    a[0] = r0
    a[1:L + 1] = r[:L]
    if L:
        a[N - L:] = r[:L][::-1]
    return np.fft.fft(a).real


def _real(name, value, allowed, lo, hi, lo_open=False):
    if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(float(value)):
        raise ParameterError(name, value, allowed)
    v = float(value)
    if not ((lo < v) if lo_open else (lo <= v)) or not v < hi:
        raise ParameterError(name, value, allowed)
    return v


def _load_autocorr(path) -> np.ndarray:
    try:
        a = np.load(os.fspath(path), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ParameterError("autocorr", str(path), "a .npy file holding the autocorrelation r_1..r_L (1-d, real)",
                             hint=f"cannot read it: {exc}") from None
    return a


class TokenLaw:
    r"""The law of the token sequence: the time correlation T of the noise and the law of the labels.

    Give at most one of ``ar1`` and ``autocorr`` (neither: T = I, the paper's iid tokens).

    Parameters
    ----------
    ar1 : float, optional
        ρ ∈ [0, 1): :math:`T_{ts} = \rho^{|t-s|}`.
    autocorr : sequence of float, or str / path to a ``.npy`` file, optional
        The autocorrelation :math:`r_1, \dots, r_L` (:math:`r_0 = 1`, :math:`r_k = 0` for k > L); it must
        make every :math:`T_n` positive definite: :math:`s(\omega) = 1 + 2\sum_k r_k\cos k\omega > 0`.
    markov : float, optional
        The persistence q ∈ (0, 1) of ±1 Markov labels, :math:`P(y_{t+1} = y_t) = q`, y_1 uniform;
        None: iid balanced labels (a permutation of n/2 entries +1 and −1, as the paper).

    Examples
    --------
    >>> law = TokenLaw(ar1=0.5)
    >>> law.correlation(3).tolist()
    [[1.0, 0.5, 0.25], [0.5, 1.0, 0.5], [0.25, 0.5, 1.0]]
    >>> round(float(law.density(0.0)), 12)             # (1 + ρ)/(1 − ρ)
    3.0
    >>> TokenLaw(autocorr=[0.9])                      # s(π) = 1 − 1.8 < 0
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid autocorr=[0.9]: allowed an autocorrelation r_1..r_L (finite reals) whose spectral density 1 + 2 Σ_k r_k cos kω is > 0 (a positive-definite Toeplitz correlation at every n). its minimum is -0.8
    >>> TokenLaw(ar1=1.0)
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid ar1=1.0: allowed 0 <= ar1 < 1 (the AR(1) correlation rho)
    """

    def __init__(self, ar1=None, autocorr=None, markov=None):
        if ar1 is not None and autocorr is not None:
            raise ParameterError("autocorr", "given", "None when ar1 is given", hint="give either ar1 or autocorr")
        self.ar1 = None if ar1 is None else _real("ar1", ar1, "0 <= ar1 < 1 (the AR(1) correlation rho)", 0.0, 1.0)
        self.markov = None if markov is None else _real(
            "markov", markov, "0 < markov < 1 (the persistence q = P(y_t+1 = y_t) of the labels)", 0.0, 1.0,
            lo_open=True)
        self.source = None
        if autocorr is None:
            self.autocorr = None
            return
        if isinstance(autocorr, (str, os.PathLike)):
            self.source = os.fspath(autocorr)
            autocorr = _load_autocorr(autocorr)
        allowed = ("an autocorrelation r_1..r_L (finite reals) whose spectral density 1 + 2 Σ_k r_k cos kω is > 0 "
                   "(a positive-definite Toeplitz correlation at every n)")
        try:
            r = np.asarray(autocorr, dtype=float)
        except (TypeError, ValueError):
            raise ParameterError("autocorr", autocorr, allowed) from None
        shown = self.source if self.source is not None else (r.tolist() if r.size <= 8 else f"<{r.size} lags>")
        if r.ndim != 1 or not np.all(np.isfinite(r)):
            raise ParameterError("autocorr", shown, allowed, hint="a 1-d array of finite numbers")
        r = np.trim_zeros(r, "b")
        self.autocorr = r
        lo = float(self._grid_density(max(64, 16 * (r.size + 1))).min()) if r.size else 1.0
        if not lo > 1e-12:
            raise ParameterError("autocorr", shown, allowed, hint=f"its minimum is {lo:.3g}")
        if r.size == 0:
            self.autocorr = None

    # ----------------------------------------------------------------------------- the correlation T
    @property
    def iid_tokens(self) -> bool:
        """True when T = I (ρ = 0 or no autocorrelation)."""
        return not self.ar1 and self.autocorr is None

    @property
    def is_iid(self) -> bool:
        """True when the law is the paper's: T = I and iid balanced labels."""
        return self.iid_tokens and self.markov is None

    def lags(self, n: int) -> np.ndarray:
        """:math:`r_0 = 1, r_1, \\dots, r_{n-1}`: the first column of :math:`T_n`.

        Examples
        --------
        >>> TokenLaw(autocorr=[0.5, 0.25]).lags(5).tolist()
        [1.0, 0.5, 0.25, 0.0, 0.0]
        """
        r = np.zeros(n)
        r[0] = 1.0
        if self.ar1:
            r[1:] = self.ar1 ** np.arange(1, n)
        elif self.autocorr is not None:
            L = min(n - 1, self.autocorr.size)
            r[1:L + 1] = self.autocorr[:L]
        return r

    def correlation(self, n: int) -> np.ndarray:
        """The n×n Toeplitz correlation :math:`T_{ts} = r_{|t-s|}`."""
        from scipy.linalg import toeplitz

        return toeplitz(self.lags(n))

    def cholesky(self, n: int) -> np.ndarray:
        """The lower Cholesky factor L of :math:`T_n = LL^\\top` (None when T = I).

        Examples
        --------
        >>> L = TokenLaw(ar1=0.3).cholesky(4)
        >>> bool(np.allclose(L @ L.T, TokenLaw(ar1=0.3).correlation(4)))
        True
        """
        if self.iid_tokens:
            return None
        return np.linalg.cholesky(self.correlation(n))

    def _grid_density(self, N: int) -> np.ndarray:
        return toeplitz_symbol(self.autocorr, N)

    def density(self, omega):
        r"""The spectral density :math:`s(\omega) = 1 + 2\sum_k r_k\cos k\omega` of T (closed form for AR(1)).

        Examples
        --------
        >>> TokenLaw(autocorr=[0.25]).density([0.0, np.pi]).tolist()
        [1.5, 0.5]
        """
        omega = np.asarray(omega, dtype=float)
        if self.ar1:
            return ar1_density(self.ar1, omega)
        s = np.ones_like(omega)
        if self.autocorr is not None:
            k = np.arange(1, self.autocorr.size + 1)
            s = s + 2 * np.cos(np.multiply.outer(omega, k)) @ self.autocorr
        return s

    def label_density(self, omega):
        r"""The spectral density of the labels: 1 (iid), or the AR(1) density at :math:`\rho_y = 2q - 1`.

        Examples
        --------
        >>> float(TokenLaw(markov=0.75).label_density(0.0))      # ρ_y = ½: (1 + ½)/(1 − ½)
        3.0
        """
        omega = np.asarray(omega, dtype=float)
        if self.markov is None:
            return np.ones_like(omega)
        return ar1_density(2 * self.markov - 1, omega)

    def grid(self, N: int | None = None):
        r"""The uniform grid :math:`\omega_j = 2\pi j/N` and :math:`(s(\omega_j), s_y(\omega_j))`: the trapezoid
        rule :math:`\frac1{2\pi}\int_0^{2\pi} g \approx \frac1N\sum_j g(\omega_j)`, exponentially accurate for
        the smooth periodic integrands of the theory (N = None: enough points for the decay of r_k and of
        the labels' correlation (2q − 1)^k to 1e-17; at most :data:`GRID_MAX`, else ParameterError).

        Examples
        --------
        >>> omega, s, sy = TokenLaw(ar1=0.5, markov=0.75).grid()
        >>> omega.size, round(float(s.mean()), 12), round(float(sy.mean()), 12)     # ⟨s⟩ = r_0 = 1
        (256, 1.0, 1.0)
        """
        if N is None:
            decay = max([abs(x) for x in (self.ar1 or 0.0, 2 * self.markov - 1 if self.markov is not None else 0.0)])
            N = 256 if decay == 0 else int(math.ceil(40.0 / -math.log(decay)))
            if self.autocorr is not None:
                N = max(N, 4 * (self.autocorr.size + 1))
            N = 1 << max(8, (max(N, 256) - 1).bit_length())
            if N > GRID_MAX:
                name, value = ("ar1", self.ar1) if (self.ar1 or 0.0) >= abs(2 * (self.markov or 0.5) - 1) else (
                    "markov", self.markov)
                raise ParameterError(name, value, f"a correlation that decays within {GRID_MAX} lags for the theory "
                                                  "(rho <= 0.99999, 1e-5 <= markov <= 0.99999)",
                                     hint="the spectral density is too peaked for the trapezoid grid; the Monte Carlo "
                                          "takes it")
        omega = 2 * np.pi * np.arange(N) / N
        return omega, self.density(omega), self.label_density(omega)

    # ----------------------------------------------------------------------------- sampling
    def labels(self, n: int, rng) -> np.ndarray:
        """One draw of the labels y ∈ {±1}^n with ``rng``: iid balanced, ``rng.permutation`` of n − ⌊n/2⌋
        entries +1 and ⌊n/2⌋ entries −1 (the paper's draw, unchanged), or the Markov chain: y_1 = ±1 by
        one ``rng.random()``, then y_{t+1} = −y_t when the t-th of ``rng.random(n − 1)`` is below 1 − q.

        Examples
        --------
        >>> y = TokenLaw(markov=0.9).labels(10_000, np.random.default_rng(0))
        >>> round(float(np.mean(y[1:] == y[:-1])), 2)        # the persistence q
        0.9
        """
        if self.markov is None:
            y = np.ones(n)
            y[: n // 2] = -1.0
            return rng.permutation(y)
        first = 1.0 if rng.random() < 0.5 else -1.0
        flips = rng.random(n - 1) < 1.0 - self.markov
        signs = np.concatenate([[first], np.where(flips, -1.0, 1.0)])
        return np.cumprod(signs)

    def noise(self, p: int, n: int, rng, chol=None) -> np.ndarray:
        """Z = G Lᵀ (p×n) from G = ``rng.standard_normal((p, n))``; G itself when T = I (the same numbers as the
        iid draw). ``chol``: L, when the caller keeps it (:meth:`cholesky`).

        Examples
        --------
        >>> Z = TokenLaw(ar1=0.9).noise(20_000, 3, np.random.default_rng(0))
        >>> (Z.T @ Z / 20_000).round(1).tolist()              # ≈ T
        [[1.0, 0.9, 0.8], [0.9, 1.0, 0.9], [0.8, 0.9, 1.0]]
        """
        G = rng.standard_normal((p, n))
        if self.iid_tokens:
            return G
        L = self.cholesky(n) if chol is None else chol
        return G @ L.T

    # ----------------------------------------------------------------------------- records
    def as_dict(self) -> dict:
        """The law as plain data (``ar1``, ``autocorr`` (a list), ``source`` (the file), ``markov``).

        Examples
        --------
        >>> law = TokenLaw(autocorr=[0.4], markov=0.8)
        >>> law.as_dict(), as_token_law(law.as_dict()) == law
        ({'ar1': None, 'autocorr': [0.4], 'source': None, 'markov': 0.8}, True)
        """
        return {"ar1": self.ar1, "autocorr": None if self.autocorr is None else self.autocorr.tolist(),
                "source": self.source, "markov": self.markov}

    def __eq__(self, other):
        return isinstance(other, TokenLaw) and self.as_dict() == other.as_dict()

    def __hash__(self):
        return hash(repr(self))

    def __repr__(self):
        parts = []
        if self.ar1 is not None:
            parts.append(f"ar1={self.ar1!r}")
        if self.autocorr is not None:
            parts.append(f"autocorr={self.source!r}" if self.source else f"autocorr={self.autocorr.tolist()!r}")
        if self.markov is not None:
            parts.append(f"markov={self.markov!r}")
        return "TokenLaw(" + ", ".join(parts) + ")"


def as_token_law(tokens) -> TokenLaw:
    """A :class:`TokenLaw` from None (iid tokens and labels), a TokenLaw, or a dict of its keywords.

    Examples
    --------
    >>> as_token_law(None).is_iid, as_token_law({"ar1": 0.5}).ar1
    (True, 0.5)
    """
    if tokens is None:
        return TokenLaw()
    if isinstance(tokens, TokenLaw):
        return tokens
    if isinstance(tokens, dict):
        unknown = set(tokens) - {"ar1", "autocorr", "markov", "source"}
        if unknown:
            raise ParameterError("tokens", sorted(unknown)[0], "keys among 'ar1', 'autocorr', 'markov'")
        return TokenLaw(**{k: v for k, v in tokens.items() if k != "source"})
    raise ParameterError("tokens", tokens, "None, a TokenLaw or a dict with keys among 'ar1', 'autocorr', 'markov'")
