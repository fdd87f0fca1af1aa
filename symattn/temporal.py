r"""Ridge regression on tokens correlated in time: the deterministic equivalent of docs/theory.md §15.

The tokens are :math:`X = \mu y^\top + Z` (p×n, p/n → c) with :math:`Z = GT^{1/2}`: the n samples are
correlated by the Toeplitz correlation T, the p features are iid (a separable covariance
:math:`I_p \otimes T`). With :math:`\hat y = y/\sqrt n` and :math:`Q = (X^\top X/n + \gamma)^{-1}`, the
training error is :math:`E_{train} = \gamma^2\hat y^\top Q^2\hat y` and, the fresh test token having the
iid marginal law :math:`x' = y'\mu + z'`, :math:`z' \sim \mathcal N(0, I_p)`, the test error is
:math:`E_{test} = 1 - 2\beta^\top\mu + \|\beta\|^2 + (\beta^\top\mu)^2`: T enters it only through β.

The deterministic equivalent of the resolvent of :math:`Z^\top Z/n = \frac1n\sum_{k\le p} a_ka_k^\top`,
:math:`a_k \sim \mathcal N(0, T)` iid, is :math:`\bar Q = (cT/(1+\delta) + \gamma)^{-1}` with the scalar fixed
point :math:`\delta = \frac1n\mathrm{tr}\,T\bar Q` (Silverstein & Bai 1995; Couillet & Liao 2022, ch. 2; the
"correlated samples" form of Atanasov, Zavatone-Veth & Pehlevan 2024). As n → ∞ the traces become
integrals over the spectral density s(ω) of T, and a quadratic form in the labels an integral against
theirs, :math:`s_y(\omega)`:

.. math::  \delta = \langle s/h\rangle,\quad \alpha = \hat y^\top\bar Q\hat y = \langle s_y/h\rangle,\quad
           h(\omega) = \frac{c\,s(\omega)}{1+\delta} + \gamma,\quad
           \langle g\rangle = \frac1{2\pi}\int_0^{2\pi} g(\omega)\,d\omega.

The signal is a rank-one update: :math:`X^\top X/n = A_0 + bb^\top`, :math:`b = \|\mu\|\hat y + T^{1/2}g/\sqrt n`
(g = Gᵀμ/‖μ‖ ~ N(0, I_n), independent of :math:`A_0`), and Sherman–Morrison gives, with
:math:`D = \|\mu\|^2\alpha + \delta`, :math:`\alpha_2 = -d\alpha/d\gamma`, :math:`\delta_2 = -d\delta/d\gamma`:

.. math::  F = \hat y^\top Q\hat y = \frac{\alpha(1+\delta)}{1+D},\qquad \beta^\top\mu = \frac{\|\mu\|^2\alpha}{1+D},

           E_{train} = \gamma^2\Big[\alpha_2 - \frac{2\|\mu\|^2\alpha\alpha_2}{1+D}
                       + \frac{\|\mu\|^2\alpha^2(\|\mu\|^2\alpha_2 + \delta_2)}{(1+D)^2}\Big],
           \qquad \|\beta\|^2 = F - E_{train}/\gamma.
"""
from __future__ import annotations

import numpy as np

from .errors import ConvergenceError
from .model import check_c, check_gamma, check_nonnegative
from .tokens import as_token_law

__all__ = ["linear_errors", "kernel_band"]


def _delta(c, gamma, s):
    """The root δ of δ = ⟨s/(cs/(1+δ) + γ)⟩ (increasing right side; bracket [0, ⟨s⟩/γ])."""
    from scipy.optimize import brentq

    def phi(d):
        return d - np.mean(s / (c * s / (1 + d) + gamma))

    hi = np.mean(s) / gamma
    try:
        return brentq(phi, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    except (ValueError, RuntimeError) as exc:  # pragma: no cover - phi(0) < 0 < phi(hi) always
        raise ConvergenceError(f"the fixed point δ of the correlated-token resolvent: {exc}",
                               point={"c": c, "gamma": gamma}) from None


def _point(c, gamma, m2, s, sy):
    d = _delta(c, gamma, s)
    h = c * s / (1 + d) + gamma
    # δ' = −⟨s/h²⟩ / (1 − c/(1+δ)² ⟨s²/h²⟩);  h' = 1 − c s δ'/(1+δ)²
    dd = -np.mean(s / h ** 2) / (1 - c / (1 + d) ** 2 * np.mean(s * s / h ** 2))
    hp = 1 - c * s * dd / (1 + d) ** 2
    alpha, alpha2, delta2 = np.mean(sy / h), np.mean(sy * hp / h ** 2), -dd
    D = m2 * alpha + d
    E = gamma ** 2 * (alpha2 - 2 * m2 * alpha * alpha2 / (1 + D) + m2 * alpha ** 2 * (m2 * alpha2 + delta2) / (1 + D) ** 2)
    F = alpha * (1 + d) / (1 + D)
    o = m2 * alpha / (1 + D)
    test = 1 - 2 * o + (F - E / gamma) + o * o
    return E, test, F, o, d


def linear_errors(c=0.5, gamma=1.0, snr=0.0, tokens=None, grid=None) -> dict:
    r"""Training and test error of ridge regression on X (the paper's baseline) under a token law (docs/theory.md §15).

    The deterministic equivalent of the module docstring, evaluated on the trapezoid grid of
    :meth:`symattn.tokens.TokenLaw.grid`; with T = I and iid labels it is the paper's LR closed form.

    Parameters
    ----------
    c, gamma : array_like
        p/n > 0 and the ridge γ > 0, broadcast together.
    snr : float
        ‖μ‖² ≥ 0.
    tokens : TokenLaw, dict or None
        The law of the sequence (None: iid tokens and labels).
    grid : int, optional
        The number of ω nodes (default: :meth:`~symattn.tokens.TokenLaw.grid`'s choice).

    Returns
    -------
    dict
        ``train``, ``test`` (E_train, E_test), ``F`` (ŷᵀQŷ), ``overlap`` (βᵀμ) and ``delta`` (δ),
        arrays of the broadcast shape.

    Warns
    -----
    PrecisionWarning
        Where ‖β‖² = F − E_train/γ cancels (c·γ → 0 at c < 1) and leaves E_test an estimated relative
        error above 1e-8 (float64 only; no mpmath escalation here).

    Examples
    --------
    >>> from symattn import memorization_error
    >>> r = linear_errors(c=0.5, gamma=1.0)
    >>> bool(abs(r["train"] - memorization_error(c=0.5, gamma=1.0, model="linear")) < 1e-12)   # T = I: §3
    True
    >>> from symattn.tokens import TokenLaw
    >>> a = linear_errors(c=1.0, gamma=0.1, snr=1.0)["test"]
    >>> b = linear_errors(c=1.0, gamma=0.1, snr=1.0, tokens=TokenLaw(ar1=0.8))["test"]
    >>> bool(b < a)                       # with a signal, correlation lowers the test error
    True
    """
    c = check_c(c)
    gamma = check_gamma(gamma)
    m2 = float(check_nonnegative("snr", snr))
    law = as_token_law(tokens)
    _, s, sy = law.grid(grid)
    cb, gb = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
    out = {k: np.empty(cb.shape) for k in ("train", "test", "F", "overlap", "delta")}
    for idx in np.ndindex(cb.shape):
        vals = _point(float(cb[idx]), float(gb[idx]), m2, s, sy)
        for k, v in zip(("train", "test", "F", "overlap", "delta"), vals):
            out[k][idx] = v
    # ‖β‖² = F − E/γ cancels at small cγ for c < 1 (F ≈ (1 − c)/γ): the relative error it leaves in E_test
    est = 64 * np.finfo(float).eps * (np.abs(out["F"]) + out["train"] / gb) / np.abs(out["test"])
    if np.any(est > 1e-8):
        import warnings

        from .errors import PrecisionWarning

        bad = [{"c": float(cb[i]), "gamma": float(gb[i]), "estimate": float(est[i])} for i in zip(*np.nonzero(est > 1e-8))]
        warnings.warn(PrecisionWarning(f"{len(bad)} test-error value(s) with an estimated relative error above 1e-08 "
                                       "(‖β‖² = F − E/γ cancels at small c·γ)", bad), stacklevel=2)
    return out


def kernel_band(f, p: int, tokens=None, lags: int = 64, nodes: int = 96) -> np.ndarray:
    r"""The mean of the attention kernel at each lag under a token law, μ = 0, W = I (docs/theory.md §15.4).

    Tokens at lag k have :math:`x_t^\top x_s/\sqrt p = \sqrt p\,r_k + \sqrt{1 + r_k^2}\,g + O(p^{-1/2})`, g ~ N(0, 1)
    (a sum of p products of pairs with correlation r_k), so the kernel has the deterministic Toeplitz band

    .. math::  \beta_k = E\,K_{t,t+k} = \frac1{\sqrt p}\,E f\big(\sqrt p\,r_k + \sqrt{1+r_k^2}\,g\big),\qquad k \ge 1,

    by Gauss–Hermite quadrature (f centred as everywhere). Near lags (√p r_k ≫ 1) see f at large arguments, as the
    diagonal does (§1.3); with iid tokens β_k = 0. Its operator norm is ≈ max_ω |2 Σ_k β_k cos kω|.

    Parameters
    ----------
    f : str or Activation
        The activation (a catalog name or SymPy string, resolved by :func:`symattn.activation`).
    p : int
        The dimension.
    tokens : TokenLaw, dict or None
        The law (its r_k; the labels do not enter at μ = 0).
    lags : int
        The number of lags k = 1..lags returned.
    nodes : int
        Gauss–Hermite nodes.

    Returns
    -------
    numpy.ndarray
        β_1..β_lags.

    Examples
    --------
    >>> b = kernel_band("relu", 1000, {"ar1": 0.9}, lags=3)
    >>> b.round(3).tolist()            # ReLU at √p r_k ≫ 1: β_k ≈ r_k − a0/√p = 0.9^k − 0.399/31.6
    [0.887, 0.797, 0.716]
    >>> bool(np.abs(kernel_band("tanh", 1000, None, lags=5)).max() < 1e-15)     # iid tokens: no band
    True
    """
    from .activations.activation import activation

    act = f if hasattr(f, "numpy") else activation(f)
    r = as_token_law(tokens).lags(lags + 1)[1:]
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    sp = np.sqrt(p)
    args = sp * r[:, None] + np.sqrt(1 + r * r)[:, None] * x[None, :]
    return (act.numpy(args) @ w) / sp
