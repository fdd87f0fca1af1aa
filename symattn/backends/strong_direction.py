r"""The strong direction on W's own bulk: the conditional kernel of §10.3 on the general-W pencil (docs/theory.md §12.10).

Why. With μ along a direction that W scores strongly (μ = top eigenvector of (W + Wᵀ)/2), the
kernel's dependence on each token's projection u_i = μ̂ᵀx_i is not small: conditional mean F(δ),
pair-dependent slope F'(δ), δ_ij = b u_i u_j/√p, b = μ̂ᵀWμ̂ (§10.3, §12.3). The rule of §12.3 measures
that effect on an identity-bulk surrogate Ŵ and adds it to the Gaussian-equivalent value of W; on the
real layer the effect is 2–4 times larger (measured by kernel-level Monte Carlo, §12.10). Here it is computed on
W's own bulk.

The model (k = 1, cross terms P⊥Wμ̂ dropped off the diagonal). X = μ̂uᵀ + Z⊥, Z⊥ = P⊥Z, and with
W⊥ = P⊥WP⊥ written in an orthonormal basis of μ̂⊥ (W', (p−1)×(p−1)) and X̃ = Z'/√p:

  K = 𝕄/p + K0,  K0 = 𝔻∘(X̃ᵀW'X̃) + diag(κ(ω)) + Σ∘N/√p,
  𝕄 = √p F(δ), 𝔻 = F'(δ), Σ² = V(δ) − ω⊥F'(δ)²,  F, F', V at ξ ~ N(0, ω⊥), ω⊥ = ‖W'‖_F²/p,

N elliptic with the latent covariance profile C(ω, ω') of the pair (N_ij, N_ji) (the Hermite parts k ≥ 2
of f(δ + r) at corr(r_ij, r_ji) = ρ⊥ = tr W'²/‖W'‖_F²), and κ the conditional diagonal (a latent of its
own: x_iᵀWx_i = b u² + z'ᵀW'z' + u·(cross), Gaussian in z', integrated on ``diag_nodes`` Gauss–Hermite
nodes) less 𝕄(ω, ω)/p and the slope's diagonal mean 𝔻(ω, ω)·tr W'/p.

The bulk: the 3×3 latent pencil of §10.3 with S = X̃ᵀX̃ and K0 linearised in X̃ (a Gaussian matrix,
not a free Poisson element, since W' sits between its two factors). With 𝔻 = Σ_r σ_r ψ_r ⊗ χ_r
(:func:`symattn.backends.finite_p` weighted SVD, truncated at ``rank``) the p-side unknowns are
s = X̃v3, t_r = X̃D_χr v1, h_r = X̃D_ψr v2 (J = 1 + 2R blocks of size p − 1), with W' t_r and W'ᵀ h_r,
and the operator-valued Dyson equation closes on the n-blocks 𝒢(ω) (3×3 per latent node) and the
J×J normalised traces of the p-block inverse (:func:`solve_bulk_pencil`). The signal enters by the
latent Woodbury of §10.3 (:func:`symattn.backends.finite_p.latent_resolvent`), unchanged.

Pieces: :func:`bulk_kernels` (set-up per (f, W, μ, p)), :func:`solve_bulk_pencil`,
:func:`bulk_signal_error` (E_A = −γ²F'(γ), F' by a central difference of two warm-started solves).
"""

from __future__ import annotations

import math

import numpy as np

from ..activations.activation import activation
from ..activations.shifted import ShiftedGaussian
from ..errors import ConvergenceError, ParameterError
from ..gauss import gauss_hermite

from .context import FloatContext
from .general_w import general_w_error
from .closed_runtime import inverse3
from .finite_p import weighted_svd, latent_quadrature, latent_resolvent
from .fixedpoint import Anderson, GrowthRestart, fixed_point

__all__ = ["bulk_kernels", "solve_bulk_pencil", "cross_term_shift", "bulk_signal_error", "MAX_RANK", "DIAG_NODES"]

#: default largest number of separable slope terms R on the p-side (J = 1 + 2R blocks of size p − 1; R = 3 moved
#: MiniLM values by 0.1 % at 3 times the cost of R = 2)
MAX_RANK = 2
#: relative singular-value cut of the slope's separable expansion (below it a term is dropped)
RANK_TOL = 1e-3
#: Gauss–Hermite nodes of the diagonal latent (the Gaussian part z'ᵀW'z' of x_iᵀWx_i)
DIAG_NODES = 8
#: Hermite degree of the elliptic covariance profile
HERMITE_DEGREE = 24
#: the p-side inverse is taken in float32 while the Dyson residual is above this (the values do not change)
LOW_PRECISION_RESIDUAL = 1e-4
#: relative step of the central difference for F'(γ)
DIFF_STEP = 2e-4


def _complement(mu_hat):
    """Orthonormal basis (p × (p − 1)) of μ̂⊥: the last p − 1 columns of a Householder reflection."""
    p = len(mu_hat)
    e = np.zeros(p)
    e[0] = 1.0
    s = 1.0 if mu_hat[0] >= 0 else -1.0
    v = mu_hat + s * e
    H = np.eye(p) - 2.0 * np.outer(v, v) / (v @ v)
    return H[:, 1:]


def _elliptic_ratio(f, delta, omega, rho, degree=HERMITE_DEGREE):
    r"""Σ_{k≥2} c_k(δ)² ρ^k / Σ_{k≥2} c_k(δ)², c_k(δ) = E[f(δ + √ω ξ) He_k(ξ)]/√k! (1 where the sum is 0)."""
    x, wq = gauss_hermite(2 * degree + 40)
    x, wq = np.asarray(x, dtype=float), np.asarray(wq, dtype=float)
    vals = np.asarray(f.numpy(delta.reshape(-1)[:, None] + math.sqrt(omega) * x[None, :]), dtype=float)
    he = np.zeros((degree + 1, len(x)))
    he[0] = 1.0
    he[1] = x
    for k in range(1, degree):     # orthonormal recursion h_{k+1} = (x h_k − √k h_{k−1})/√(k+1)
        he[k + 1] = (x * he[k] - math.sqrt(k) * he[k - 1]) / math.sqrt(k + 1)
    ck2 = ((vals * wq[None, :]) @ he[2:].T) ** 2
    num = ck2 @ (rho ** np.arange(2, degree + 1))
    den = ck2.sum(axis=1)
    out = np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0)
    return out.reshape(delta.shape)


def bulk_kernels(f, W, mu, diagonal: str = "f", nq: int = 24, diag_nodes: int = DIAG_NODES) -> dict:
    r"""The latent kernels on W's own bulk and the p-side matrix W' (set-up of docs/theory.md §12.10).

    With μ̂ = μ/‖μ‖, b = μ̂ᵀWμ̂, W' = V⊥ᵀWV⊥ (V⊥ an orthonormal basis of μ̂⊥), ω⊥ = ‖W'‖_F²/p,
    ρ⊥ = tr W'²/‖W'‖_F², latent nodes ω = (y, g, η): u = y‖μ‖ + g on the §10.3 quadrature, η the
    diagonal's Gaussian latent. On them

      𝕄 = √p F(δ), 𝔻 = F'(δ), Σ² = V(δ) − ω⊥F'(δ)², C = Σ²·Σ_{k≥2}c_k²ρ⊥^k/Σ_{k≥2}c_k²,  δ = b u u'/√p,

    (F, F', V of f(· + √ω⊥ ξ)), and the diagonal κ(ω) = d(ω) − 𝕄(ω, ω)/p − 𝔻(ω, ω) tr W'/p with
    d = f(q)/√p, q = (b u² + tr W' + η √(2‖W'_s‖_F² + u²‖P⊥(W + Wᵀ)μ̂‖²))/√p (d = 0 with ``diagonal='zero'``).

    Parameters
    ----------
    f : activation spec
    W : array_like, p×p
    mu : array_like, shape (p,), nonzero
    diagonal : {'f', 'zero'}
    nq : int
        Gauss–Hermite nodes of the latent g.
    diag_nodes : int
        Gauss–Hermite nodes of η (1: the diagonal at its conditional mean over η, 16 nodes).

    Returns
    -------
    dict
        ``y, U, w, M, S2, C, kappa`` on the Q = 2·nq·neta nodes ((y, g) major, η minor; ``U`` the coordinate
        u as a Q×1 array), ``D`` = 𝔻 and ``w_lat`` on the 2·nq nodes of (y, g), and ``Wp, p, omega, rho, b, neta``.

    Raises
    ------
    ParameterError
        μ = 0, or shapes that do not match.

    Examples
    --------
    >>> import numpy as np
    >>> kern = bulk_kernels("tanh", np.eye(20), np.r_[1.0, np.zeros(19)], nq=4, diag_nodes=2)
    >>> kern["M"].shape, round(kern["omega"], 12), round(kern["rho"], 12)
    ((16, 16), 0.95, 1.0)
    """
    f = activation(f)
    W = np.asarray(W, dtype=float)
    mu = np.asarray(mu, dtype=float).reshape(-1)
    p = W.shape[0]
    if W.shape != (p, p) or mu.shape != (p,):
        raise ParameterError("mu", f"shape {mu.shape}", f"a vector of length p = {p} for W of shape {W.shape}")
    if diagonal not in ("f", "zero"):
        raise ParameterError("diagonal", diagonal, "'f' or 'zero'")
    m = float(np.linalg.norm(mu))
    if not m > 0:
        raise ParameterError("mu", "0", "a nonzero signal (the strong direction is μ/‖μ‖)")
    mh = mu / m
    b = float(mh @ W @ mh)
    V = _complement(mh)
    Wp = V.T @ W @ V
    fro2 = float(np.sum(Wp * Wp))
    omega = fro2 / p
    rho = float(np.sum(Wp * Wp.T)) / fro2
    ctx = FloatContext()
    y, g, w = latent_quadrature(ctx, 1, nq)
    u = y * m + g[:, 0]
    sp = math.sqrt(p)
    delta = b * np.outer(u, u) / sp
    shifts = ShiftedGaussian(f, float(np.max(np.abs(delta))) * 1.0001 + 1e-3, variance=omega)
    F, F1, Vv = shifts(delta)
    S2 = np.maximum(Vv - omega * F1 * F1, 0.0)
    C = S2 * _elliptic_ratio(f, delta, omega, rho)
    trp = float(np.trace(Wp))
    # the diagonal latent: x_iᵀWx_i = b u² + z'ᵀW'z' + u z'ᵀV⊥ᵀ(W + Wᵀ)μ̂
    Ws = (Wp + Wp.T) / 2
    cross = V.T @ ((W + W.T) @ mh)
    var0, var1 = 2.0 * float(np.sum(Ws * Ws)), float(cross @ cross)
    ne = int(diag_nodes)
    xe, we = gauss_hermite(16 if ne == 1 else ne)
    xe, we = np.asarray(xe, dtype=float), np.asarray(we, dtype=float)
    q = (b * u[:, None] ** 2 + trp + xe[None, :] * np.sqrt(var0 + var1 * u[:, None] ** 2)) / sp
    d = np.asarray(f.numpy(q), dtype=float) / sp if diagonal == "f" else np.zeros_like(q)
    if ne == 1:
        d, we = (d @ we)[:, None], np.ones(1)
    kappa = d - (np.diagonal(sp * F) / p)[:, None] - (np.diagonal(F1) * trp / p)[:, None]

    def kron(A):
        return np.kron(A, np.ones((ne, ne)))

    return {"y": np.repeat(y, ne), "U": np.repeat(u, ne)[:, None], "w": np.kron(w, we), "M": kron(sp * F),
            "D": F1, "w_lat": w, "S2": kron(S2), "C": kron(C), "kappa": kappa.reshape(-1), "Wp": Wp, "p": p,
            "omega": omega, "rho": rho, "b": b, "neta": ne}


def _separable(kern, rank):
    """σ, ψ, χ of 𝔻 on the (y, g) nodes (weighted SVD, at most ``rank`` terms), repeated over η."""
    ctx = FloatContext()
    sig, psi, chi = weighted_svd(ctx, kern["D"], kern["w_lat"], RANK_TOL if rank is None else ctx.svd_tol)
    R = min(len(sig), MAX_RANK if rank is None else int(rank))
    ne = kern["neta"]
    return sig[:R], np.repeat(psi[:, :R], ne, axis=0), np.repeat(chi[:, :R], ne, axis=0)


def _p_traces_one(sp, Wp, M, dtype):
    r"""p·t for R = 1 by the p×p route of docs/theory.md §12.2 and §12.5.

    𝔅 = −[[I + aW', bW'ᵀ], [cW', I + dW'ᵀ]] ((a, b; c, d) = σ'), N = I + aW' + dW'ᵀ + (ad − bc)W'ᵀW' and
    s_X = tr(N^{-1}X): tr(W'𝔅^{-1}_tt) = −(s_W + d s_M), tr(W'𝔅^{-1}_th) = b s_M, tr(W'ᵀ𝔅^{-1}_ht) = c s_M,
    tr(W'ᵀ𝔅^{-1}_hh) = −(s_Wᵀ + a s_M), M = W'ᵀW' (tr N'^{-1}W'W'ᵀ = s_M and tr N'^{-1}W'ᵀ = s_Wᵀ, §12.5).
    """
    (a, b), (c, d) = sp
    N = np.eye(Wp.shape[0]) + a * Wp + d * Wp.T + (a * d - b * c) * M
    Ni = np.linalg.inv(N.astype(dtype)).astype(np.float64)
    sW, sWt, sM = float(np.sum(Ni.T * Wp)), float(np.sum(Ni * Wp)), float(np.sum(Ni.T * M))
    return np.array([[-(sW + d * sM), b * sM], [c * sM, -(sWt + a * sM)]])


def _p_traces(sigma, mats, mtype, q1, p, dtype=np.float64):
    r"""T_kI = tr(M_k 𝔄^{-1}[k, I])/p for 𝔄 = −I − Σ σ_Ik E_Ik ⊗ M_k, with block 0 (M_0 = I) eliminated.

    With a = −1 − σ_00 and σ'_Ik = σ_Ik − σ_I0σ_0k/(1 + σ_00) (I, k ≥ 1), 𝔅 = −I − Σ σ'_Ik E_Ik ⊗ M_k and
    t_kI = tr(M_k 𝔅^{-1}[k, I])/p: T_kI = t_kI, T_k0 = Σ_I t_kI σ_I0/a, T_0I = Σ_k σ_0k t_kI/a,
    T_00 = (p − 1)/(p a) + Σ_kI σ_0k t_kI σ_I0/a² (the Schur complement on block 0). The inverse of 𝔅 in
    ``dtype`` (float32 while the Dyson residual is above :data:`LOW_PRECISION_RESIDUAL`).
    """
    J = sigma.shape[0]
    a = -1.0 - sigma[0, 0]
    sp = sigma[1:, 1:] - np.outer(sigma[1:, 0], sigma[0, 1:]) / (1.0 + sigma[0, 0])
    Jr = J - 1
    if Jr == 2:     # R = 1: 𝔅 = −[[I + aW', bW'ᵀ], [cW', I + dW'ᵀ]], the B₂ of §12.2: one (p−1)-square inverse
        t = _p_traces_one(sp, mats[1], mats[3], dtype) / p
    else:
        big = -np.eye(Jr * q1, dtype=dtype)
        for I in range(Jr):
            for k in range(Jr):
                big[I * q1:(I + 1) * q1, k * q1:(k + 1) * q1] -= (sp[I, k] * mats[mtype[k + 1]]).astype(dtype)
        inv = np.linalg.inv(big).astype(np.float64)
        t = np.empty((Jr, Jr))
        for k in range(Jr):
            Mk = mats[mtype[k + 1]]
            for I in range(Jr):
                t[k, I] = float(np.sum(Mk.T * inv[k * q1:(k + 1) * q1, I * q1:(I + 1) * q1])) / p
    T = np.empty((J, J))
    T[1:, 1:] = t
    T[1:, 0] = t @ sigma[1:, 0] / a
    T[0, 1:] = sigma[0, 1:] @ t / a
    T[0, 0] = q1 / (p * a) + sigma[0, 1:] @ t @ sigma[1:, 0] / a ** 2
    return T


def solve_bulk_pencil(kern, c, z, rank=None, tol=1e-12, G0=None, maxiter=400):
    r"""The n-blocks 𝒢(ω) (Q × 3 × 3) of the §10.3 pencil with the bulk linearised on W' (docs/theory.md §12.10).

    Self-energies of the Gaussian X̃ (entries of variance 1/p, (p − 1)×n): with the X̃-slots
    (p-row I, n-col j_I, right factor a_I(ω)) = (s, 3, 1), (t_r, 1, χ_r), (h_r, 2, ψ_r) and the
    X̃ᵀ-slots (n-row j_k, p-col k, left factor b_k(ω)) = (3, s, 1), (2, W't_r, √cσ_rψ_r), (1, W'ᵀh_r, √cσ_rχ_r),

      σ_Ik = E_ω[a_I 𝒢_{j_I j_k} b_k]/c,  𝔄 = −I − Σ_{Ik} σ_Ik E_Ik ⊗ M_k  (M_k = I, W', W'ᵀ),
      T_kI = tr(M_k 𝔄^{-1}[k, I])/p,  Σ_nn(ω)_{j_k j_I} += b_k(ω) a_I(ω) T_kI,

    and the noise term of §10.3 with Σ² on the diagonal blocks and the elliptic profile C off them;
    𝒢(ω) = (L0(ω) − Σ_nn(ω) − Σ_N(ω))^{-1}, L0 = [[z, √cκ, 0], [√cκ, 0, 1], [0, 1, 0]]. Anderson-accelerated
    iteration (as :func:`symattn.backends.finite_p.solve_pencil`) to relative change ``tol``.

    Parameters
    ----------
    kern : dict
        From :func:`bulk_kernels`.
    c : float
        p/n.
    z : float
        γ.
    rank : int, optional
        Separable terms R (default: those above :data:`RANK_TOL`·σ_1, at most :data:`MAX_RANK`).
    tol : float
    G0 : array, optional
        Warm start.
    maxiter : int

    Returns
    -------
    tuple
        (𝒢 of shape (Q, 3, 3), iterations).

    Raises
    ------
    ConvergenceError
        No convergence, or a non-finite iterate.

    Examples
    --------
    >>> import numpy as np
    >>> kern = bulk_kernels("tanh", np.eye(12), np.r_[1.0, np.zeros(11)], nq=4, diag_nodes=1)
    >>> G, it = solve_bulk_pencil(kern, 0.5, 0.1, rank=1)
    >>> G.shape, bool(G[:, 0, 0].min() > 0)
    ((8, 3, 3), True)
    """
    sig, psi, chi = _separable(kern, rank)
    R = len(sig)
    w, Wp, p = kern["w"], kern["Wp"], kern["p"]
    q1 = Wp.shape[0]
    Q = len(w)
    J = 1 + 2 * R
    rc = math.sqrt(c)
    ones = np.ones(Q)
    a = np.column_stack([ones] + [chi[:, r] for r in range(R)] + [psi[:, r] for r in range(R)])
    jI = np.array([2] + [0] * R + [1] * R)
    bk = np.column_stack([ones] + [rc * sig[r] * psi[:, r] for r in range(R)]
                         + [rc * sig[r] * chi[:, r] for r in range(R)])
    jk = np.array([2] + [1] * R + [0] * R)
    mtype = [0] + [1] * R + [2] * R          # M_k: I, W', W'ᵀ
    mats = [np.eye(q1), Wp, Wp.T, Wp.T @ Wp]      # the last: W'ᵀW' for the R = 1 route
    kd = rc * kern["kappa"]
    L0 = np.zeros((Q, 3, 3))
    L0[:, 0, 0] = z
    L0[:, 0, 1] = L0[:, 1, 0] = kd
    L0[:, 1, 2] = L0[:, 2, 1] = 1
    S2, Cm = kern["S2"], kern["C"]
    W1, W2, W3 = S2.T * w[None, :], S2 * w[None, :], Cm * w[None, :]
    wa = w[:, None] * a

    def rhs(G, state):
        sigma = np.empty((J, J))
        for I in range(J):
            sigma[I] = (wa[:, I] @ (G[:, jI[I], :][:, jk] * bk)) / c
        low = state is not None and state.residual > LOW_PRECISION_RESIDUAL
        T = _p_traces(sigma, mats, mtype, q1, p, np.float32 if low else np.float64)
        Snn = np.zeros((Q, 3, 3))
        for k in range(J):
            for I in range(J):
                Snn[:, jk[k], jI[I]] += bk[:, k] * a[:, I] * T[k, I]
        Snn[:, 0, 0] += W1 @ G[:, 1, 1]
        Snn[:, 1, 1] += W2 @ G[:, 0, 0]
        Snn[:, 0, 1] += W3 @ G[:, 1, 0]
        Snn[:, 1, 0] += W3 @ G[:, 0, 1]
        return inverse3(L0 - Snn), None

    def size(Gn, G):
        return float(np.max(np.abs(Gn - G))) / max(1.0, float(np.max(np.abs(G))))

    G = inverse3(L0) if G0 is None else G0.copy()
    out = fixed_point(rhs, G, [Anderson(depth=6, mixing=1.0, damping=0.5, solver="ridge", ridge=1e-13)],
                      tol=tol, residual=size, maxiter=maxiter, inclusive=True, restart=GrowthRestart(10.0),
                      name="the bulk-pencil Dyson equation (strong direction on W's bulk)")
    if not np.all(np.isfinite(out.x)):
        raise ConvergenceError("the bulk-pencil Dyson equation diverged", residuals=[out.residual],
                               iterations=out.iterations)
    return out.x, out.iterations


def cross_term_shift(f, c, gamma, W, mu, diagonal: str = "f"):
    r"""The effect of the cross terms P⊥Wμ̂, P⊥Wᵀμ̂ in the Gaussian-equivalent theory: E_GE(W) − E_GE(W_nc).

    docs/theory.md §12.10: W_nc = P⊥WP⊥ + b μ̂μ̂ᵀ is W with the cross terms removed (the model of
    :func:`solve_bulk_pencil`); both values by :func:`symattn.backends.general_w.general_w_error` with
    ``signal='linear'``. Exactly 0 when μ̂ is an eigenvector of W and Wᵀ.

    Parameters
    ----------
    f : activation spec
    c : float
    gamma : array_like
    W : array_like, p×p
    mu : array_like, shape (p,), nonzero
    diagonal : {'f', 'zero'}

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> import numpy as np
    >>> W = np.diag(np.linspace(0.5, 1.5, 20)); mu = np.r_[1.0, np.zeros(19)]   # μ̂ an eigenvector: no cross terms
    >>> cross_term_shift("tanh", 0.5, [0.1], W, mu).tolist()
    [0.0]
    """
    f = activation(f)
    W = np.asarray(W, dtype=float)
    mu = np.asarray(mu, dtype=float)
    mh = mu / np.linalg.norm(mu)
    P = np.eye(W.shape[0]) - np.outer(mh, mh)
    W_nc = P @ W @ P + float(mh @ W @ mh) * np.outer(mh, mh)
    if np.array_equal(W_nc, W) or np.max(np.abs(W_nc - W)) <= 1e-14 * np.max(np.abs(W)):
        return np.zeros(len(np.atleast_1d(gamma)))
    g = np.atleast_1d(np.asarray(gamma, dtype=float))
    return (general_w_error(f, c, g, W, mu, signal="linear", diagonal=diagonal)["E"]
            - general_w_error(f, c, g, W_nc, mu, signal="linear", diagonal=diagonal)["E"])


def bulk_signal_error(f, c, gamma, W, mu, diagonal: str = "f", rank=None, nq: int = 24,
                      diag_nodes: int = DIAG_NODES, kern=None, cross: bool = True):
    r"""E_A(γ) = −γ²F'(γ) of the conditional kernel on W's own bulk (docs/theory.md §12.10).

    F(γ) = :func:`symattn.backends.finite_p.latent_resolvent` on the n-blocks of
    :func:`solve_bulk_pencil` (the latent Woodbury of §10.3 with the Gram entries from the bulk
    pencil), F'(γ) ≈ [F(γ(1 + h)) − F(γ(1 − h))]/(2γh), h = :data:`DIFF_STEP`, both solves warm-started
    from the one at γ. n = round(p/c). With ``cross`` (default) the cross terms P⊥Wμ̂ that the bulk model
    drops are added back as their Gaussian-equivalent effect, :func:`cross_term_shift` (conjectural; 0 for μ̂ an
    eigenvector of W and Wᵀ, < 0.4 % for μ along MiniLM's top direction, and the whole signal for a random μ).

    Parameters
    ----------
    f : activation spec
    c : float
    gamma : float or array_like
    W : array_like, p×p
    mu : array_like, shape (p,), nonzero
    diagonal : {'f', 'zero'}
    rank : int, optional
        Separable slope terms R (default: automatic, at most :data:`MAX_RANK`).
    nq, diag_nodes : int
        As :func:`bulk_kernels`.
    kern : dict, optional
        A cached :func:`bulk_kernels` result for these (f, W, μ, diagonal).
    cross : bool
        Add :func:`cross_term_shift`.

    Returns
    -------
    numpy.ndarray
        E_A at each γ.

    Examples
    --------
    >>> import numpy as np
    >>> E = bulk_signal_error("tanh", 0.5, [0.1, 1.0], np.eye(16), np.r_[1.0, np.zeros(15)], nq=6, diag_nodes=1)
    >>> bool(0 < E[0] < E[1] < 1)
    True
    """
    if kern is None:
        kern = bulk_kernels(f, W, mu, diagonal=diagonal, nq=nq, diag_nodes=diag_nodes)
    ctx = FloatContext()
    out = []
    G_prev = None
    for gm in np.atleast_1d(np.asarray(gamma, dtype=float)):
        if not gm > 0:
            raise ParameterError("gamma", float(gm), "gamma > 0")
        G, _ = solve_bulk_pencil(kern, c, gm, rank=rank, G0=G_prev)
        G_prev = G
        h = DIFF_STEP * gm
        Fp = []
        for zz in (gm + h, gm - h):
            Gz, _ = solve_bulk_pencil(kern, c, zz, rank=rank, G0=G)
            Fp.append(float(np.real(latent_resolvent(ctx, c, kern, Gz))))
        out.append(-gm * gm * (Fp[0] - Fp[1]) / (2 * h))
    E = np.array(out)
    if cross:
        E = E + cross_term_shift(f, c, gamma, W, mu, diagonal=diagonal)
    return E
