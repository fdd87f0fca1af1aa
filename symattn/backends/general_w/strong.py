r"""The strong-direction (latent) correction of the general-W theory (docs/theory.md §12.3): the surrogate rule
ΔE = E_fp(Ŵ) − E_GE(Ŵ), Ŵ = I + (b − 1)μ̂μ̂ᵀ, b = μ̂ᵀWμ̂.

The kernel's dependence on each token's projection u_i = μ̂ᵀx_i (conditional mean F(δ) and pair-dependent slope
F'(δ), δ_ij = b u_i u_j/√p) is what the Gaussian-equivalent kernel misses (measured by kernel-level Monte Carlo).
It is added as the finite-p conditional-kernel theory (docs/theory.md §10.3, :mod:`symattn.backends.finite_p`,
latent dimension 1) minus the Gaussian-equivalent value for the same surrogate. A shortcut checked by Monte
Carlo, exact for W = Ŵ.
"""

from __future__ import annotations

import math

import numpy as np

from ...caching import Memo
from ...model import check_mu, check_weights
from .linalg import arith, seed_rank_one_eig
from .pencil import general_w_model
from .physical import model_error

__all__ = ["strong_direction_correction"]


def strong_direction_correction(f, c, gamma, W, mu, diagonal: str = "f", ctx=None):
    r"""The strong-direction (latent) correction of the general-W theory (docs/theory.md §12.3).

    Rule: condition on the one direction μ̂ = μ/‖μ‖. With b = μ̂ᵀWμ̂ the surrogate weight is
    Ŵ = I + (b − 1)μ̂μ̂ᵀ, i.e. w_K = √|b − 1| μ̂, w_Q = sign(b − 1)√|b − 1| μ̂ (same μ, latent
    dimension k = 1), and

      ΔE(γ) = E_fp(Ŵ, μ; n) − E_GE(Ŵ, μ),

    the finite-p conditional-kernel theory (docs/theory.md §10.3: conditional mean F(δ),
    pair-dependent slope F'(δ), variance profile, conditional diagonal) minus the
    Gaussian-equivalent theory of this module for the same surrogate. The general-W theory with
    ``signal='latent'`` is E_GE(W, μ) + ΔE, so that for W = Ŵ it is exactly the finite-p theory.

    Parameters
    ----------
    f : Activation
    c : float
        p/n; n = round(p/c).
    gamma : array_like
        γ > 0.
    W : numpy.ndarray
        p×p.
    mu : numpy.ndarray
        The signal (nonzero).
    diagonal : {'f', 'zero'}
    ctx : FloatContext or MPContext, optional
        The arithmetic of both theories (default float64).

    Returns
    -------
    numpy.ndarray
        ΔE at each γ.

    Examples
    --------
    >>> from symattn import activation
    >>> p = 40
    >>> mu = np.zeros(p); mu[0] = 1.0
    >>> dE = strong_direction_correction(activation("tanh"), 0.5, [1.0], 3.0 * np.eye(p), mu)
    >>> dE.shape
    (1,)
    """
    ar = arith(ctx)
    W = check_weights(W)
    p = W.shape[0]
    mu = check_mu(mu, p)
    gammas = np.atleast_1d(np.asarray(gamma, dtype=float))
    m2 = float(mu @ mu)
    e = mu / math.sqrt(m2)
    b = float(e @ W @ e)
    # the correction depends on W only through b: cached on (f, c, γ, μ, b, diagonal)
    return CORRECTIONS.get((f, float(c), gammas, mu, b, diagonal, ar.dps),
                           lambda: _correction(f, c, gammas, W, mu, b, e, m2, diagonal, ar)).copy()


def _correction(f, c, gammas, W, mu, b, e, m2, diagonal, ar):
    """:func:`strong_direction_correction`, computed."""
    from ...model import Geometry
    from ..finite_p import finite_p_error

    p = W.shape[0]
    s = math.sqrt(abs(b - 1.0))
    sg = 1.0 if b >= 1.0 else -1.0
    r = math.sqrt(m2) * s
    gram = np.array([[m2, r, sg * r], [r, s * s, sg * s * s], [sg * r, sg * s * s, s * s]])
    geom = Geometry.from_gram(gram, rank=1)
    n = max(2, int(round(p / float(c))))
    E_fp = ar.convert(finite_p_error(ar, f, np.full(gammas.shape, float(c)), gammas, geom, n, diagonal=diagonal))
    W_hat = np.eye(p) + (b - 1.0) * np.outer(e, e)
    if ar.dps is None:
        seed_rank_one_eig(W_hat, e, b)
    E_ge = model_error(general_w_model(f, c, W_hat, mu, signal="linear", diagonal=diagonal, ctx=ar), gammas)["E"]
    return E_fp - E_ge


#: strong-direction corrections already computed: (f, c, γ, μ, b, diagonal, precision) → ΔE
CORRECTIONS = Memo("general_w.strong_corrections", 32)

