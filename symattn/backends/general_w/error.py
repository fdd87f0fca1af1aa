r"""E_A(γ) of the free-noise general-W theory (docs/theory.md §12): the Gaussian-equivalent kernel of §12.1 solved
by the pencil of §12.2 (:func:`~.physical.model_error`), plus, with ``signal='latent'`` and μ ≠ 0, the
strong-direction correction of §12.3 (:func:`~.strong.strong_direction_correction`).
"""

from __future__ import annotations

import numpy as np

from .pencil import general_w_model
from .physical import model_error
from .strong import strong_direction_correction

__all__ = ["general_w_error"]


def general_w_error(f, c, gamma, W, mu=None, signal: str = "latent", diagonal: str = "f",
                    limit: bool = False, ctx=None) -> dict:
    r"""E_A(γ) = −γ² F'(γ) of the general-W theory at the points γ (one c).

    F'(γ) by implicit differentiation of the Dyson fixed point g* = Φ(g*, γ):
    dg/dγ = (I − ∂Φ/∂g)^{-1} ∂Φ/∂γ, the Jacobians by complex steps (η = 1e-20), then
    F' = ∂F/∂g·dg/dγ + ∂F/∂γ, one more complex step along (dg/dγ, 1).

    Parameters
    ----------
    f : Activation
    c : float
        p/n; n = round(p/c).
    gamma : array_like
        γ > 0 values.
    W : array_like
        p×p.
    mu : array_like, optional
    signal : {'latent', 'linear', 'conditional'}
        'latent' (default): E = E_GE + :func:`strong_direction_correction` when μ ≠ 0
        (docs/theory.md §12.3); 'linear': the Gaussian-equivalent E_GE alone.
    diagonal : {'f', 'zero'}
    limit : bool
        The p → ∞ form for W = I + finite rank (:func:`general_w_model`; no correction).
    ctx : FloatContext or MPContext, optional
        The arithmetic (default float64; :func:`general_w_model`).

    Returns
    -------
    dict
        'E' and 'F' (arrays; F is that of the Gaussian-equivalent part), 'iterations' (total),
        'residual' (max), 'model' (GeneralWModel); with the correction also 'E_linear' (E_GE)
        and 'correction' (ΔE).

    Examples
    --------
    >>> from symattn import activation
    >>> out = general_w_error(activation("tanh"), 0.5, [0.1, 1.0], np.eye(20))
    >>> bool(np.all((out["E"] > 0) & (out["E"] < 1)))
    True
    """
    m = general_w_model(f, c, W, mu, signal=signal, diagonal=diagonal, limit=limit, ctx=ctx)
    out = dict(model_error(m, gamma), model=m)
    if signal == "latent" and not limit and np.any(m.mu):
        dE = strong_direction_correction(f, float(c), gamma, W, mu, diagonal=diagonal, ctx=ctx)
        out["E_linear"] = out["E"]
        out["E"] = out["E"] + dE
        out["correction"] = dE
    return out

