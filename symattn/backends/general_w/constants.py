r"""The kernel constants of the Gaussian-equivalent kernel for a general W (docs/theory.md §12.1).

With ω = ‖W‖_F²/p (the variance of the off-diagonal argument ξ_ij = z_iᵀWz_j/√p) and ρ = tr W²/‖W‖_F²
(the correlation of ξ_ij and ξ_ji),

  √p K_ij ≈ a0' + a1'·x_iᵀWx_j/√p + s·N_ij  (i ≠ j),   √p K_ii = f(x_iᵀWx_i/√p),

a0' = E f(ξ), a1' = E f'(ξ) = E[ξ f(ξ)]/ω, s² = Var f(ξ) − a1'²ω (ξ ~ N(0, ω)), and N an elliptic noise matrix,
unit variance, corr(N_ij, N_ji) = τ with s²τ = Cov(f(ξ), f(ξ')) − a1'²ρω ((ξ, ξ') centred Gaussian, variances ω,
correlation ρ). The diagonal is a latent variable: its law is that of f(q)/√p,
q = x_iᵀWx_i/√p ≈ N((tr W + μᵀWμ)/√p, (2‖W_s‖_F² + 4‖W_sμ‖²)/p), W_s = (W + Wᵀ)/2, integrated by
Gauss–Hermite nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model import check_mu, check_weights
from .linalg import arith

__all__ = ["DIAGONAL_NODES", "CONSTANT_NODES", "GeneralWConstants", "general_w_constants"]

#: Gauss–Hermite nodes of the diagonal latent q
DIAGONAL_NODES = 16
#: nodes of the (bivariate) quadrature of the kernel constants
CONSTANT_NODES = 96


@dataclass
class GeneralWConstants:
    """The kernel constants of the Gaussian-equivalent kernel for a given W (module docstring).

    Attributes: omega = ‖W‖_F²/p, rho = tr W²/‖W‖_F², a0, a1, s2, tau, t = μᵀWμ/√p, F_odd
    (the conditional y yᵀ coefficient E[f(ξ+t) − f(ξ−t)]/2), the diagonal nodes ``q`` and
    weights ``qw``, the mean and variance of q.
    """

    omega: float
    rho: float
    a0: float
    a1: float
    s2: float
    tau: float
    t: float
    F_odd: float
    q: np.ndarray
    qw: np.ndarray
    q_mean: float
    q_var: float
def general_w_constants(f, W, mu=None, ctx=None) -> GeneralWConstants:
    r"""a0', a1', s², τ, t, F_odd(t) and the diagonal law of the Gaussian-equivalent kernel.

    a1' = E[ξ f(ξ)]/ω, s² = Var f(ξ) − a1'²ω with ξ ~ N(0, ω), ω = ‖W‖_F²/p;
    s²τ = Cov(f(ξ), f(ξ')) − a1'²ρω with corr(ξ, ξ') = ρ = tr W²/‖W‖_F² (tensor Gauss–Hermite).

    Parameters
    ----------
    f : Activation
        The (centred) activation.
    W : numpy.ndarray
        p×p.
    mu : numpy.ndarray or None
        The signal.
    ctx : FloatContext or MPContext, optional
        The arithmetic (default float64); with an mpmath context every field is an mpmath number.

    Returns
    -------
    GeneralWConstants

    Examples
    --------
    >>> from symattn import activation
    >>> k = general_w_constants(activation("tanh"), np.eye(50))
    >>> round(k.rho, 12), round(k.tau, 8), abs(k.a1 - activation("tanh").a1) < 1e-10
    (1.0, 1.0, True)
    """
    ar = arith(ctx)
    W = check_weights(W)
    p = W.shape[0]
    mu = check_mu(mu, p)
    with ar:
        W, mu = ar.convert(W), ar.convert(mu)
        fro2 = ar.scalar(np.sum(W * W))
        omega = fro2 / p
        rho = ar.scalar(np.sum(W * W.T)) / fro2
        x, w = ar.gauss_hermite(CONSTANT_NODES)
        so = ar.sqrt(omega)
        fx = ar.f(f, so * x)
        a0 = ar.scalar(w @ fx)
        a1 = ar.scalar(w @ (x * fx)) / so
        nu = ar.scalar(w @ fx**2) - a0**2
        s2 = max(nu - a1 * a1 * omega, 0 * nu)
        # Cov(f(ξ), f(ξ')): ξ = √ω x1, ξ' = √ω (ρ x1 + √(1−ρ²) x2)
        r = min(max(rho, -1), 1)
        x2 = so * (r * x[:, None] + ar.sqrt(max(1 - r * r, 0 * r)) * x[None, :])
        cov = ar.scalar((w * fx) @ ar.f(f, x2) @ w) - a0**2
        tau = (cov - a1 * a1 * rho * omega) / s2 if s2 > 1e-300 else 0 * s2
        tau = min(max(tau, -1), 1)
        sp = ar.sqrt(ar.scalar(p))
        muWmu = ar.scalar(mu @ W @ mu)
        t = muWmu / sp
        F_odd = ar.scalar(w @ (ar.f(f, so * x + t) - ar.f(f, so * x - t))) / 2
        Ws = (W + W.T) / 2
        q_mean = (ar.scalar(np.sum(np.diagonal(W))) + muWmu) / sp
        q_var = (2 * ar.scalar(np.sum(Ws * Ws)) + 4 * ar.scalar(np.sum((Ws @ mu) ** 2))) / p
        xq, wq = ar.gauss_hermite(DIAGONAL_NODES)
        q = q_mean + ar.sqrt(q_var) * xq
        sc = ar.scalar
        return GeneralWConstants(omega=sc(omega), rho=sc(rho), a0=sc(a0), a1=sc(a1), s2=sc(s2), tau=sc(tau), t=sc(t),
                                 F_odd=sc(F_odd), q=q, qw=wq, q_mean=sc(q_mean), q_var=sc(q_var))


