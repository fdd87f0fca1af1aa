r"""The attention theory for a general fixed p×p weight matrix W (docs/theory.md §12), numerically.

Model: X = μyᵀ + Z (p×n, z_ij ~ N(0, 1)), K = f(XᵀWX/√p)/√p exactly (no rescaling), Φ = XK,
E_A(γ) = γ² ŷᵀ(ΦᵀΦ/n + γ)^{-2}ŷ = −γ² F'(γ), F(γ) = ŷᵀ(ΦᵀΦ/n + γ)^{-1}ŷ.

**Gaussian-equivalent kernel** (§12.1). With ω = ‖W‖_F²/p (the variance of the off-diagonal
argument ξ_ij = z_iᵀWz_j/√p) and ρ = tr W²/‖W‖_F² (the correlation of ξ_ij and ξ_ji),

  √p K_ij ≈ a0' + a1'·x_iᵀWx_j/√p + s·N_ij  (i ≠ j),   √p K_ii = f(x_iᵀWx_i/√p),

a0' = E f(ξ), a1' = E f'(ξ) = E[ξ f(ξ)]/ω, s² = Var f(ξ) − a1'²ω (ξ ~ N(0, ω)), and N an
elliptic noise matrix, unit variance, corr(N_ij, N_ji) = τ with s²τ = Cov(f(ξ), f(ξ')) − a1'²ρω
((ξ, ξ') centred Gaussian, variances ω, correlation ρ). The diagonal is a latent variable: its
law is that of f(q)/√p, q = x_iᵀWx_i/√p ≈ N((tr W + μᵀWμ)/√p, (2‖W_s‖_F² + 4‖W_sμ‖²)/p),
W_s = (W + Wᵀ)/2, integrated by Gauss–Hermite nodes.

**Pencil** (§12.2). With Y = X/√n, K = (a1/c)YᵀWY + D + σÑ (σ = s/√c, Ñ = N/√n), Q = (γ + KᵀYᵀYK)^{-1}
is the (x, x) block of the inverse of the 8-block linear pencil in the unknowns
x, u, w (n-space) and t, v, h, g, l (p-space):

  γx + (a1/c)Yᵀg + Dw + σÑᵀw = b,   u − (a1/c)Yᵀl − Dx − σÑx = 0,   w − Yᵀv = 0,
  t − Yx = 0,   v − Yu = 0,   h − Yw = 0,   g − Wᵀh = 0,   l − Wt = 0.

Its random part is linear in Y, Yᵀ and Ñ, whose covariance maps return multiples of the
identity (E[YAYᵀ] = tr_n A·I_p, E[YᵀBY] = c·tr_p B·I_n, E[ÑAÑᵀ] = tr_n A, E[ÑAÑ] = τ tr_n A), so the
operator-valued Dyson equation G = (L0 − η(G))^{-1} closes on the 3×3 matrix g of normalised
traces of the n-blocks; W enters through the 2p×2p block matrix
B2 = [[I − αW, −βWᵀ], [−γ'W, I − δWᵀ]] (after eliminating g, l and v), whose traces
tr_p(W H_tt), tr_p(W H_th), tr_p(Wᵀ H_ht), tr_p(Wᵀ H_hh) (H = B2^{-1}) are computed by dense
linear algebra at every iteration.

**Signal** (§12.3). Y = Y_Z + μŷᵀ is a rank-one deterministic shift of every Y-slot of the
pencil; Woodbury on the pencil, with the quadratic forms ŷᵀ𝒢_nn ŷ = tr_n, μᵀ𝒢_pp μ (exact
p×p solves with μ) and zero n–p cross forms, gives F. The directions y, Zᵀμ, ZᵀWμ, ZᵀWᵀμ of the
issue all come out of this one shift.

**Strong direction** (§12.3, ``signal='latent'``, the default when μ ≠ 0). The kernel's dependence
on each token's projection u_i = μ̂ᵀx_i (conditional mean F(δ) and pair-dependent slope F'(δ),
δ_ij = b u_i u_j/√p, b = μ̂ᵀWμ̂) is what the Gaussian-equivalent kernel misses (measured by
kernel-level Monte Carlo). It is added as ΔE = E_fp(Ŵ) − E_GE(Ŵ), Ŵ = I + (b − 1)μ̂μ̂ᵀ: the
finite-p conditional-kernel theory (docs/theory.md §10.3, :mod:`symattn.backends.finite_p`, latent
dimension 1) minus this module's value for the same surrogate (:func:`strong_direction_correction`).
A shortcut checked by Monte Carlo, exact for W = Ŵ. ``signal='linear'`` is the Gaussian-equivalent
value alone; ``signal='conditional'`` (rejected, kept for the record) only replaces the y yᵀ
coefficient a1'·t (t = μᵀWμ/√p) by F_odd(t) of §10.2.

**Symmetric W** (§12.5): one ``eigh``, then B2 splits into p independent 2×2 blocks, so each Dyson
evaluation is O(p) (traces) or O(p²) (solves with μ). Otherwise each evaluation is one dense
2p×2p inverse, in float32 during the Anderson phase (relative residual above 1e-3).

**Derivative.** F is solved at real γ (everything real), then F'(γ) by implicit
differentiation of the fixed point, with the Jacobian by complex steps
(:func:`general_w_error`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..errors import ConvergenceError, ParameterError
from ..gauss import gauss_hermite
from ..model import check_mu, check_weights

__all__ = [
    "SIGNAL_RULES",
    "GeneralWConstants",
    "general_w_constants",
    "GeneralWModel",
    "general_w_model",
    "pencil_map",
    "solve_pencil",
    "PencilSolution",
    "general_memorization_error",
    "resolvent_F",
    "general_w_error",
    "strong_direction_correction",
    "model_error",
]

#: how the signal enters the kernel: 'latent' (Gaussian-equivalent plus the strong-direction correction
#: of docs/theory.md §12.3, the default), 'linear' (Gaussian-equivalent only), 'conditional' (F_odd(t) for y yᵀ)
SIGNAL_RULES = ("latent", "linear", "conditional")
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


def _fnum(f, x):
    return np.asarray(f.numpy(x), dtype=float)


def general_w_constants(f, W, mu=None) -> GeneralWConstants:
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
    W = check_weights(W)
    p = W.shape[0]
    mu = check_mu(mu, p)
    fro2 = float(np.sum(W * W))
    omega = fro2 / p
    rho = float(np.sum(W * W.T)) / fro2
    x, w = gauss_hermite(CONSTANT_NODES)
    so = math.sqrt(omega)
    fx = _fnum(f, so * x)
    a0 = float(w @ fx)
    a1 = float(w @ (x * fx)) / so
    nu = float(w @ fx**2) - a0**2
    s2 = max(nu - a1 * a1 * omega, 0.0)
    # Cov(f(ξ), f(ξ')): ξ = √ω x1, ξ' = √ω (ρ x1 + √(1−ρ²) x2)
    r = min(max(rho, -1.0), 1.0)
    x2 = so * (r * x[:, None] + math.sqrt(max(1 - r * r, 0.0)) * x[None, :])
    cov = float(np.einsum("i,j,i,ij->", w, w, fx, _fnum(f, x2))) - a0**2
    tau = (cov - a1 * a1 * rho * omega) / s2 if s2 > 1e-300 else 0.0
    tau = min(max(tau, -1.0), 1.0)
    t = float(mu @ W @ mu) / math.sqrt(p)
    F_odd = 0.5 * float(w @ (_fnum(f, so * x + t) - _fnum(f, so * x - t)))
    Ws = (W + W.T) / 2
    q_mean = (float(np.trace(W)) + float(mu @ W @ mu)) / math.sqrt(p)
    q_var = (2 * float(np.sum(Ws * Ws)) + 4 * float(np.sum((Ws @ mu) ** 2))) / p
    xq, wq = gauss_hermite(DIAGONAL_NODES)
    q = q_mean + math.sqrt(q_var) * xq
    return GeneralWConstants(omega=omega, rho=rho, a0=a0, a1=a1, s2=s2, tau=tau, t=t, F_odd=F_odd,
                             q=q, qw=wq, q_mean=q_mean, q_var=q_var)


@dataclass
class GeneralWModel:
    """Everything the pencil needs at one c: W, μ, the constants and the diagonal latent κ.

    kappa : values κ_m = f(q_m)/√p − a1'·tr W/p of the diagonal (the Dyson equation already puts
    a1'·tr W/p on the diagonal through (a1/c)YᵀWY), with weights ``kw``.
    c_yy : the extra coefficient of ŷŷᵀ in K (0 for signal='linear').
    c_11 : the coefficient of êêᵀ (ê = 1/√n) in K from the mean a0' of the off-diagonal entries.
    """

    W: np.ndarray
    mu: np.ndarray
    c: float
    n: int
    p: int
    a1: float
    sigma2: float
    tau: float
    kappa: np.ndarray
    kw: np.ndarray
    c_yy: float
    c_11: float
    constants: GeneralWConstants
    W_traces: np.ndarray = None   # the matrix whose normalised traces enter the Dyson equation


def general_w_model(f, c, W, mu=None, signal: str = "latent", diagonal: str = "f",
                    limit: bool = False) -> GeneralWModel:
    """Assemble the :class:`GeneralWModel` (float64) for the activation f, c = p/n, W and μ.

    Parameters
    ----------
    f : Activation
    c : float
        p/n; n = round(p/c).
    W : numpy.ndarray
    mu : numpy.ndarray or None
    signal : {'latent', 'linear', 'conditional'}
        The signal rule (module docstring); 'latent' builds the same model as 'linear' (its
        correction is added by :func:`general_w_error`).
    diagonal : {'f', 'zero'}
        The kernel's diagonal: f(q)/√p, or 0.
    limit : bool
        The p → ∞ limit for W = I + finite rank (the setting of Theorem 1, docs/theory.md §12.4):
        the constants of N(0, 1) (a1, s² of f, τ = 1), the deterministic diagonal d = lim f(√p)/√p,
        and the normalised traces of I; W and μ then enter only through the Woodbury step.

    Returns
    -------
    GeneralWModel

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(20))
    >>> m.n, m.p
    (40, 20)
    """
    if signal not in SIGNAL_RULES:
        raise ParameterError("signal", signal, "one of " + ", ".join(repr(s) for s in SIGNAL_RULES))
    if diagonal not in ("f", "zero"):
        raise ParameterError("diagonal", diagonal, "'f' or 'zero'")
    W = check_weights(W)
    p = W.shape[0]
    mu = check_mu(mu, p)
    c = float(c)
    n = max(2, int(round(p / c)))
    k = general_w_constants(f, W, mu)
    sp = math.sqrt(p)
    base = -k.a1 * float(np.trace(W)) / p
    if diagonal == "f":
        with np.errstate(over="ignore"):
            fq = _fnum(f, k.q)
        if not np.all(np.isfinite(fq)):
            raise ParameterError("diagonal", diagonal, "'zero' for this activation (f(xᵀWx/√p) overflows)")
        kappa = fq / sp + base
        kw = k.qw
    else:
        kappa, kw = np.array([base]), np.array([1.0])
    c_yy = (k.F_odd - k.a1 * k.t) * n / sp if signal == "conditional" else 0.0
    c_11 = k.a0 * n / sp
    if limit:
        d = 0.0 if diagonal == "zero" else float(f.d)
        if not math.isfinite(d):
            raise ParameterError("diagonal", diagonal, "'zero' for a superlinear activation")
        return GeneralWModel(W=W, mu=mu, c=c, n=n, p=p, a1=float(f.a1), sigma2=float(f.nu - f.a1**2) / c, tau=1.0,
                             kappa=np.array([d - float(f.a1)]), kw=np.array([1.0]), c_yy=0.0, c_11=0.0,
                             constants=k, W_traces=np.eye(2))
    return GeneralWModel(W=W, mu=mu, c=c, n=n, p=p, a1=k.a1, sigma2=k.s2 / c, tau=k.tau, kappa=kappa,
                         kw=kw, c_yy=c_yy, c_11=c_11, constants=k, W_traces=W)


# index of the n-blocks (x, u, w) and p-blocks (t, v, h, g, l)
X_, U_, W_ = 0, 1, 2
T_, V_, H_, G_, L_ = 0, 1, 2, 3, 4


def _sigma_pp(m, g):
    """Σ_pp entries (dict) from the n-traces g (3×3): η restricted to the p-blocks."""
    a = m.a1 / m.c
    return {"tg": -a * g[X_, X_], "tl": a * g[X_, U_], "tv": g[X_, W_],
            "vg": -a * g[U_, X_], "vl": a * g[U_, U_], "vv": g[U_, W_],
            "hg": -a * g[W_, X_], "hl": a * g[W_, U_], "hv": g[W_, W_]}


def _coefficients(S):
    e = 1.0 / (1.0 - S["vv"])
    alpha = S["tl"] + e * S["tv"] * S["vl"]
    beta = S["tg"] + e * S["tv"] * S["vg"]
    gam = S["hl"] + e * S["hv"] * S["vl"]
    delta = S["hg"] + e * S["hv"] * S["vg"]
    return e, alpha, beta, gam, delta


def _B2(W, alpha, beta, gam, delta):
    p = W.shape[0]
    dtype = np.result_type(W, alpha, beta, gam, delta)
    B = np.empty((2 * p, 2 * p), dtype=dtype)
    I = np.eye(p)
    B[:p, :p] = I - alpha * W
    B[:p, p:] = -beta * W.T
    B[p:, :p] = -gam * W
    B[p:, p:] = I - delta * W.T
    return B


#: eigendecompositions of symmetric W already seen (id → (W, λ, E)); a few entries only
_EIG_CACHE: dict = {}


def _symmetric_eig(W):
    """(λ, E) with W = E diag(λ) Eᵀ when W is exactly symmetric, else None (cached per array)."""
    hit = _EIG_CACHE.get(id(W))
    if hit is not None and hit[0] is W:
        return hit[1], hit[2]
    if not np.array_equal(W, W.T):
        return None
    lam, E = np.linalg.eigh(W)
    if len(_EIG_CACHE) > 8:
        _EIG_CACHE.clear()
    _EIG_CACHE[id(W)] = (W, lam, E)
    return lam, E


class _HOperator:
    """H = B2(C)^{-1} (C = (α, β, γ', δ)) at real C0, with its traces T_ab = tr_p(𝒲_a H_ab)
    (𝒲_t = W, 𝒲_h = Wᵀ) and their Jacobian ∂T_ab/∂C_kl = tr_p(𝒲_a H_ak 𝒲_l H_lb), so that a
    complex step C = C0 + iεΔC is evaluated exactly to O(ε²) without a complex inverse:
    T(C) = T0 + J·ΔC and H(C)v = H0 v + H0 (ΔC ⊗ 𝒲)(H0 v).

    For a symmetric W = E diag(λ) Eᵀ (one cached ``eigh``) B2 splits into p independent 2×2 blocks
    [[1 − αλ, −βλ], [−γ'λ, 1 − δλ]]: every trace is a mean over λ and H v costs two products
    with E (docs/theory.md §12.5). Otherwise H is one dense 2p×2p inverse."""

    def __init__(self, W, C0, single: bool = False):
        p = W.shape[0]
        self.W, self.p = W, p
        self.C0 = np.array(C0, dtype=float)  # [[α, β], [γ', δ]]
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        self._J = None
        eig = _symmetric_eig(W)
        self.eig = eig
        if eig is not None:
            lam, _ = eig
            det = (1 - al * lam) * (1 - de * lam) - be * ga * lam * lam
            # h[a][b](λ): the (a, b) entry of the inverse 2×2 block at λ
            self.h = [[(1 - de * lam) / det, be * lam / det], [ga * lam / det, (1 - al * lam) / det]]
            self.H = None
            self.T0 = np.array([[np.mean(lam * self.h[a][b]) for b in range(2)] for a in range(2)])
            return
        if single:
            # float32 traces (rounding ~1e-6): only for the Anderson phase far from the fixed point
            W = W.astype(np.float32)
            H = np.linalg.inv(_B2(W, *(np.float32(v) for v in (al, be, ga, de))))
        else:
            H = np.linalg.inv(_B2(W, al, be, ga, de))
        self.H = H
        W_T = W.T
        self.T0 = np.array([[np.sum(W_T * H[:p, :p]), np.sum(W_T * H[:p, p:])],
                            [np.sum(W * H[p:, :p]), np.sum(W * H[p:, p:])]], dtype=float) / p

    @property
    def J(self):
        if self._J is None:
            J = np.empty((2, 2, 2, 2))
            if self.eig is not None:
                lam, h = self.eig[0], self.h
                for a in range(2):
                    for b in range(2):
                        for k in range(2):
                            for l in range(2):
                                J[a, b, k, l] = np.mean(lam * h[a][k] * lam * h[l][b])
                self._J = J
                return J
            p, H, W = self.p, self.H, self.W
            blk = lambda a, b: H[a * p:(a + 1) * p, b * p:(b + 1) * p]
            Wl = (W, W.T)
            P = [[Wl[a] @ blk(a, k) for k in range(2)] for a in range(2)]  # 𝒲_a H_ak
            for a in range(2):
                for b in range(2):
                    for k in range(2):
                        for l in range(2):
                            J[a, b, k, l] = np.sum(P[a][k] * P[l][b].T) / p
            self._J = J
        return self._J

    def traces(self, C):
        dC = np.asarray(C) - self.C0
        if not np.any(dC):
            return self.T0
        return self.T0 + np.einsum("abkl,kl->ab", self.J, dC)

    def _solve(self, v):
        """H0 v (v of length 2p, real or complex)."""
        if self.eig is None:
            return self.H @ v
        p, (_, E), h = self.p, self.eig, self.h
        a, b = E.T @ v[:p], E.T @ v[p:]
        return np.concatenate([E @ (h[0][0] * a + h[0][1] * b), E @ (h[1][0] * a + h[1][1] * b)])

    def apply(self, C, v):
        p = self.p
        x = self._solve(v)
        dC = np.asarray(C) - self.C0
        if not np.any(dC):
            return x
        Wx = np.concatenate([self.W @ x[:p], self.W.T @ x[p:]])
        y = np.concatenate([dC[0, 0] * Wx[:p] + dC[0, 1] * Wx[p:], dC[1, 0] * Wx[:p] + dC[1, 1] * Wx[p:]])
        return x + self._solve(y)


def _C(S):
    e, alpha, beta, gam, delta = _coefficients(S)
    return e, np.array([[alpha, beta], [gam, delta]])


def _p_traces(m, S, Hop=None, single: bool = False):
    """tr_p of the p-blocks G_pp[j, k], j ∈ {g, l, v}, k ∈ {t, v, h} (dict keyed 'jk'), and the
    H operator (a new one at real S, in float32 when ``single``, or ``Hop`` linearised when given)."""
    e, C = _C(S)
    if Hop is None:
        Hop = _HOperator(m.W_traces, np.real(C), single=single)
    T = Hop.traces(C)
    T1, T2, T3, T4 = T[0, 0], T[0, 1], T[1, 0], T[1, 1]
    P = {"lt": T1, "lh": T2, "gt": T3, "gh": T4,
         "lv": e * (S["tv"] * T1 + S["hv"] * T2), "gv": e * (S["tv"] * T3 + S["hv"] * T4)}
    for k in "tvh":
        P["v" + k] = e * (S["vg"] * P["g" + k] + S["vl"] * P["l" + k]) + (e if k == "v" else 0.0)
    return P, Hop


def _sigma_nn(m, P, g):
    """Σ_nn (3×3) from the p-traces P and the n-traces g (the Y-part and the elliptic N-part)."""
    a1, c, s2, tau = m.a1, m.c, m.sigma2, m.tau
    dtype = np.result_type(P["lt"], g)
    S = np.zeros((3, 3), dtype=dtype)
    S[X_, X_] = -a1 * P["gt"] - s2 * g[W_, U_]
    S[X_, U_] = -a1 * P["gv"]
    S[X_, W_] = -a1 * P["gh"] + s2 * tau * g[W_, X_]
    S[U_, X_] = a1 * P["lt"] + s2 * tau * g[X_, U_]
    S[U_, U_] = a1 * P["lv"]
    S[U_, W_] = a1 * P["lh"] - s2 * g[X_, X_]
    S[W_, X_] = c * P["vt"]
    S[W_, U_] = c * P["vv"]
    S[W_, W_] = c * P["vh"]
    return S


def _G_nn(m, z, Snn):
    """The n-blocks G_nn(κ_m) = (L0_nn(κ_m) − Σ_nn)^{-1} at every diagonal node (shape (M, 3, 3))."""
    M = m.kappa.size
    dtype = np.result_type(z, Snn)
    L0 = np.zeros((M, 3, 3), dtype=dtype)
    L0[:, X_, X_] = z
    L0[:, X_, W_] = m.kappa
    L0[:, U_, X_] = -m.kappa
    L0[:, U_, U_] = 1.0
    L0[:, W_, W_] = 1.0
    return np.linalg.inv(L0 - Snn[None])


def pencil_map(m, g, z, Hop=None, single: bool = False):
    """One evaluation of the Dyson map g ↦ E_κ[(L0(κ) − η(G))^{-1}]_nn (holomorphic in g and z).

    Parameters
    ----------
    m : GeneralWModel
    g : numpy.ndarray
        3×3 n-traces (x, u, w).
    z : float or complex
        γ.
    Hop : _HOperator, optional
        The p×p part linearised at another point (complex steps), instead of a new inverse.
    single : bool
        Compute a new inverse in float32 (the far-from-converged phase of :func:`solve_pencil`).

    Returns
    -------
    (g_new, parts) : numpy.ndarray, dict
        The new 3×3 traces and the intermediate Σ_pp, P, H, Σ_nn, G_nn(κ).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(10))
    >>> g, parts = pencil_map(m, np.diag([1.0, 1.0, 1.0]), 1.0)
    >>> g.shape
    (3, 3)
    """
    S = _sigma_pp(m, g)
    P, Hop = _p_traces(m, S, Hop, single=single)
    Snn = _sigma_nn(m, P, g)
    Gn = _G_nn(m, z, Snn)
    g_new = np.einsum("m,mij->ij", m.kw, Gn)
    return g_new, {"S": S, "P": P, "H": Hop, "Snn": Snn, "Gn": Gn}


@dataclass
class PencilSolution:
    """The fixed point g (3×3 n-traces), the dense evaluations spent, the residual, the H operator."""

    g: np.ndarray
    iterations: int
    residual: float
    Hop: object = None


#: fixed-point controls
PENCIL_TOL = 1e-13
#: a Newton iterate that stalls below this relative residual is returned (rounding floor of the p×p traces)
PENCIL_FLOOR = 1e-10
#: the relative residual below which Newton replaces the Anderson iteration
NEWTON_SWITCH = 1e-1
#: above this relative residual the Anderson phase evaluates the p×p traces in float32
SINGLE_ABOVE = 1e-3
#: Anderson depth
ANDERSON_DEPTH = 5


def _residual(gn, g) -> float:
    """Entrywise relative change, each entry on the scale max(|g_k|, 1e-6·max|g|)."""
    scale = np.maximum(np.abs(gn), 1e-6 * max(float(np.max(np.abs(gn))), 1e-300))
    return float(np.max(np.abs(gn - g) / scale))


def _jacobian(m, g, z, Hop, eta: float = 1e-20):
    """∂Φ/∂g (9×9) at real (g, z) by complex steps through the linearised H operator."""
    J = np.empty((9, 9))
    for k in range(9):
        d = np.zeros(9, dtype=complex)
        d[k] = 1j * eta
        J[:, k] = np.imag(pencil_map(m, g + d.reshape(3, 3), z, Hop)[0]).ravel() / eta
    return J


def solve_pencil(m, z, g0=None, tol: float = PENCIL_TOL, maxiter: int = 300, newton: bool = False) -> PencilSolution:
    """Solve the Dyson fixed point g = Φ(g) (Φ = :func:`pencil_map`) at real z = γ > 0.

    An Anderson-accelerated damped iteration from the γ → ∞ start until the relative residual
    is below :data:`NEWTON_SWITCH`, then Newton's method on g − Φ(g), with the Jacobian ∂Φ/∂g by
    complex steps through the linearised p×p part (one dense 2p×2p inverse per step). Raises
    :class:`~symattn.errors.ConvergenceError` with the residual when it does not converge.

    Parameters
    ----------
    m : GeneralWModel
    z : float
        γ > 0.
    g0 : numpy.ndarray, optional
        Starting point (default the γ → ∞ limit: diag(1/γ, 1, 1)).
    tol : float
        Relative residual.
    maxiter : int
    newton : bool
        Start with Newton (for a warm start ``g0`` close to the solution).

    Returns
    -------
    PencilSolution
        g, the number of dense evaluations, the residual, and the H operator at g (``Hop``).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(10))
    >>> sol = solve_pencil(m, 1.0)
    >>> sol.residual < 1e-12
    True
    """
    g = np.diag([1.0 / z, 1.0, 1.0]) if g0 is None else np.array(g0, dtype=float)
    res_prev = np.inf
    res = np.inf
    g_prev = g_prev_n = Hop_prev = None  # the last Newton iterate (set before they are read)
    X, R = [], []
    for it in range(1, maxiter + 1):
        # far from the fixed point (Anderson phase) the traces are evaluated in float32
        gn, parts = pencil_map(m, g, z, single=not newton and not res < SINGLE_ABOVE)
        Hop = parts["H"]
        r = (gn - g).ravel()
        res = _residual(gn, g) if np.all(np.isfinite(gn)) else np.inf
        if res < tol:
            return PencilSolution(g=gn, iterations=it, residual=res, Hop=Hop)
        if not np.isfinite(res):
            break
        if not newton:
            # Anderson-accelerated damped iteration from the γ → ∞ start: it stays on the
            # physical branch; Newton takes over once the residual is small
            newton = res < NEWTON_SWITCH
            if not newton:
                X.append(g.ravel().copy())
                R.append(r)
                if len(X) > ANDERSON_DEPTH + 1:
                    X.pop(0)
                    R.pop(0)
                new = g.ravel() + 0.5 * r
                if len(X) >= 2:
                    dR = np.diff(np.array(R), axis=0).T
                    dX = np.diff(np.array(X), axis=0).T
                    coef = np.linalg.lstsq(dR, r, rcond=None)[0]
                    cand = g.ravel() + r - (dX + dR) @ coef
                    if np.all(np.isfinite(cand)):
                        new = cand
                g = new.reshape(3, 3)
                continue
        if res >= res_prev and res_prev < PENCIL_FLOOR:
            # Newton stalls at the rounding floor of the dense traces: the previous point is converged
            return PencilSolution(g=g_prev_n, iterations=it, residual=res_prev, Hop=Hop_prev)
        if res > res_prev and it > 1:
            # Newton overshot: back to a damped step from the previous point
            g = g_prev + 0.5 * (g - g_prev)
            res_prev = np.inf
            continue
        J = _jacobian(m, g, z, Hop)
        try:
            step = np.linalg.solve(np.eye(9) - J, r)
        except np.linalg.LinAlgError:
            step = 0.5 * r
        if not np.all(np.isfinite(step)):
            step = 0.5 * r
        g_prev, res_prev, g_prev_n, Hop_prev = g, res, gn, Hop
        g = g + step.reshape(3, 3)
    raise ConvergenceError(f"the general-W Dyson iteration did not converge (residual {res:.3g})",
                           residuals=[res], iterations=maxiter, point={"gamma": float(np.real(z))})


def _p_response(m, S, H, src):
    """G_pp applied to a p-space source: src = dict block → vector (blocks t, v, h, g, l);
    returns the 5 response vectors (dict)."""
    p = m.p
    e, C = _C(S)
    alpha, beta, gam, delta = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
    zero = np.zeros(p)
    r = {k: src.get(k, zero) for k in "tvhgl"}
    rt = r["t"] + e * S["tv"] * r["v"] + beta * r["g"] + alpha * r["l"]
    rh = r["h"] + e * S["hv"] * r["v"] + delta * r["g"] + gam * r["l"]
    th = H.apply(C, np.concatenate([rt, rh]))
    t, h = th[:p], th[p:]
    gg = m.W.T @ h + r["g"]
    ll = m.W @ t + r["l"]
    v = e * (r["v"] + S["vg"] * gg + S["vl"] * ll)
    return {"t": t, "v": v, "h": h, "g": gg, "l": ll}


def resolvent_F(m, g, z, Hop=None, Hop_mu=None):
    """F(z) = ŷᵀ[L_full^{-1}]_xx ŷ at the n-traces g: the bulk value, corrected by Woodbury for
    the signal (Y → Y + μŷᵀ in every Y-slot, the ŷŷᵀ and êêᵀ kernel terms).

    Parameters
    ----------
    m : GeneralWModel
    g : numpy.ndarray
        3×3 n-traces at the fixed point (or a complex-stepped perturbation of them).
    z : float or complex

    Returns
    -------
    float or complex

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(10))
    >>> sol = solve_pencil(m, 1.0)
    >>> bool(0 < resolvent_F(m, sol.g, 1.0) < 1)
    True
    """
    gn, parts = pencil_map(m, g, z, Hop)
    Gbar = gn  # E_κ G_nn: the n-n quadratic forms of ŷ, ê
    F0 = Gbar[X_, X_]
    mu = m.mu
    has_mu = bool(np.any(mu))
    if not has_mu and m.c_yy == 0 and m.c_11 == 0:
        return F0
    a = m.a1 / m.c
    # rank-one pieces of Δ: (row block, row vector kind, col block, col vector kind, coef);
    # kinds: 'y' (ŷ, n-space), 'e' (ê, n-space), 'm' (μ, p-space)
    pieces = []
    if has_mu:
        # Y-slots (p-row, n-col): (t,x) −1, (v,u) −1, (h,w) −1 → −μŷᵀ
        pieces += [("pt", "m", "nx", "y", -1.0), ("pv", "m", "nu", "y", -1.0), ("ph", "m", "nw", "y", -1.0)]
        # Yᵀ-slots (n-row, p-col): (x,g) a, (u,l) −a, (w,v) −1 → coef·ŷμᵀ
        pieces += [("nx", "y", "pg", "m", a), ("nu", "y", "pl", "m", -a), ("nw", "y", "pv", "m", -1.0)]
    for kind, coef in (("y", m.c_yy), ("e", m.c_11)):
        if coef != 0:
            # K += coef·vvᵀ: row u gets −coef (u − Kx), row x gets +coef at w (Kᵀw)
            pieces += [("nu", kind, "nx", kind, -coef), ("nx", kind, "nw", kind, coef)]
    nb = {"nx": X_, "nu": U_, "nw": W_}
    S, H = parts["S"], parts["H"]
    if m.W_traces is not m.W and has_mu:
        H = Hop_mu if Hop_mu is not None else _HOperator(m.W, np.real(_C(S)[1]))
    # responses of G_pp to μ-sources in each p-block (5 blocks × 5 outputs)
    resp = {}
    if has_mu:
        for b in "tvhgl":
            resp[b] = _p_response(m, S, H, {b: mu})

    def form(left_blk, left_kind, right_blk, right_kind):
        """(left vector at left block)ᵀ 𝒢 (right vector at right block)."""
        if left_blk[0] != right_blk[0]:
            return 0.0
        if left_blk[0] == "n":
            if left_kind != right_kind:
                return 0.0   # ŷ ⟂ ê (balanced labels); ŷ independent of the latent κ
            return Gbar[nb[left_blk], nb[right_blk]]
        return mu @ resp[right_blk[1]][left_blk[1]]

    R = len(pieces)
    # Δ = Σ_r A_r B_rᵀ with A_r = (row block, row kind) · coef, B_r = (col block, col kind)
    cap = np.empty((R, R), dtype=np.result_type(Gbar, z, *(v for r in resp.values() for v in r.values())))
    for i, (_, _, cb, ck, _) in enumerate(pieces):
        for j, (rb, rk, _, _, coef) in enumerate(pieces):
            cap[i, j] = coef * form(cb, ck, rb, rk)
    cap += np.eye(R)
    left = np.array([coef * form("nx", "y", rb, rk) for (rb, rk, _, _, coef) in pieces])
    right = np.array([form(cb, ck, "nx", "y") for (_, _, cb, ck, _) in pieces])
    return F0 - left @ np.linalg.solve(cap, right)


def general_w_error(f, c, gamma, W, mu=None, signal: str = "latent", diagonal: str = "f",
                    limit: bool = False) -> dict:
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
    m = general_w_model(f, c, W, mu, signal=signal, diagonal=diagonal, limit=limit)
    out = dict(model_error(m, gamma), model=m)
    if signal == "latent" and not limit and np.any(m.mu):
        dE = strong_direction_correction(f, m.c, gamma, m.W, m.mu, diagonal=diagonal)
        out["E_linear"] = out["E"]
        out["E"] = out["E"] + dE
        out["correction"] = dE
    return out


def strong_direction_correction(f, c, gamma, W, mu, diagonal: str = "f"):
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
    from ..model import Geometry
    from .context import context
    from .finite_p import finite_p_error

    W = check_weights(W)
    p = W.shape[0]
    mu = check_mu(mu, p)
    gammas = np.atleast_1d(np.asarray(gamma, dtype=float))
    m2 = float(mu @ mu)
    e = mu / math.sqrt(m2)
    b = float(e @ W @ e)
    s = math.sqrt(abs(b - 1.0))
    sg = 1.0 if b >= 1.0 else -1.0
    r = math.sqrt(m2) * s
    gram = np.array([[m2, r, sg * r], [r, s * s, sg * s * s], [sg * r, sg * s * s, s * s]])
    geom = Geometry.from_gram(gram, rank=1)
    n = max(2, int(round(p / float(c))))
    E_fp = np.asarray(finite_p_error(context("numpy"), f, np.full(gammas.shape, float(c)), gammas, geom, n,
                                     diagonal=diagonal), dtype=float)
    W_hat = np.eye(p) + (b - 1.0) * np.outer(e, e)
    E_ge = general_w_error(f, c, gammas, W_hat, mu, signal="linear", diagonal=diagonal)["E"]
    return E_fp - E_ge


def model_error(m, gamma) -> dict:
    r"""E_A(γ) = −γ² F'(γ) of a :class:`GeneralWModel` (or any model with its fields) at the points γ.

    The Dyson fixed point g* = Φ(g*, γ) is solved at each γ from the γ → ∞ start, then
    dg/dγ = (I − ∂Φ/∂g)^{-1} ∂Φ/∂γ and F' = ∂F/∂g·dg/dγ + ∂F/∂γ by complex steps (η = 1e-20).
    :func:`general_w_error` builds the model of one W; the multi-head sum (:mod:`symattn.variants`)
    builds the model of the summed kernel.

    Parameters
    ----------
    m : GeneralWModel
    gamma : array_like
        γ > 0 values.

    Returns
    -------
    dict
        'E' and 'F' (arrays), 'iterations' (total), 'residual' (max).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(20))
    >>> bool(np.all(model_error(m, [1.0])["E"] > 0))
    True
    """
    gammas = np.atleast_1d(np.asarray(gamma, dtype=float))
    E, Fv = np.empty(gammas.shape), np.empty(gammas.shape)
    its, res = 0, 0.0
    eta = 1e-20
    for i in range(gammas.size):
        # every γ from the γ → ∞ start diag(1/γ, 1, 1): a Newton warm start from another γ can land
        # on a non-physical branch of the fixed point (seen at tanh, c = 0.5, γ = 0.01) and saves little
        gm = float(gammas[i])
        sol = solve_pencil(m, gm)
        its += sol.iterations
        res = max(res, sol.residual)
        gs, Hop = sol.g, sol.Hop
        J = _jacobian(m, gs, gm, Hop, eta)
        dz = np.imag(pencil_map(m, gs.astype(complex), gm + 1j * eta * gm, Hop)[0]).ravel() / (eta * gm)
        dg = np.linalg.solve(np.eye(9) - J, dz)
        Hop_mu = None if m.W_traces is m.W else _HOperator(m.W, np.real(_C(_sigma_pp(m, gs))[1]))
        Fc = resolvent_F(m, gs + 1j * eta * gm * dg.reshape(3, 3), gm + 1j * eta * gm, Hop, Hop_mu)
        Fv[i] = float(np.real(Fc))
        E[i] = -gm * gm * float(np.imag(Fc)) / (eta * gm)
    return {"E": E, "F": Fv, "iterations": its, "residual": res}


def general_memorization_error(f, c, gamma, weights, mu=None, model: str = "attention", backend: str = "numpy",
                               n: int | None = None, diagonal: str = "f", errors: str = "raise",
                               signal: str = "latent"):
    r"""The public entry of the general-W theory: ``symattn.memorization_error(f, c, gamma, weights=W, mu=mu)``.

    The kernel is exactly K = f(XᵀWX/√p)/√p with the given W (no rescaling), X = μyᵀ + Z,
    p = W.shape[0] and n = round(p/c) (docs/theory.md §12). E_LR (``model='linear'``) does not
    depend on W: it is the closed form of docs/theory.md §3 at ‖μ‖².

    Parameters
    ----------
    f : activation spec
    c : float or array_like
        p/n (broadcast against ``gamma``).
    gamma : float or array_like
        γ > 0.
    weights : array_like
        W, p×p.
    mu : array_like, optional
        μ of length p (default 0).
    model : {'attention', 'linear', 'both'}
    backend : {'numpy'}
        Only float64.
    n : int, optional
        Must equal round(p/c) when given.
    diagonal : {'f', 'zero'}
    errors : {'raise', 'nan'}
    signal : {'latent', 'linear', 'conditional'}
        The signal rule (module docstring); 'latent', the default, adds the strong-direction
        correction of docs/theory.md §12.3 when μ ≠ 0.

    Returns
    -------
    numpy.ndarray or dict
        As :func:`symattn.memorization_error`.

    Examples
    --------
    >>> E = general_memorization_error("tanh", 0.5, [0.1, 1.0], np.eye(30))
    >>> E.shape, bool(np.all((E > 0) & (E < 1)))
    ((2,), True)
    """
    import warnings

    from ..activations.activation import activation as _activation
    from ..errors import FailedPointsWarning
    from ..model import check_c, check_gamma

    if backend != "numpy":
        raise ParameterError("backend", backend, "'numpy' with weights= (the general-W theory is float64 only)")
    if model not in ("attention", "linear", "both"):
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    if errors not in ("raise", "nan"):
        raise ParameterError("errors", errors, "'raise' or 'nan'")
    W = check_weights(weights)
    p = W.shape[0]
    mu = check_mu(mu, p)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1).astype(float) for v in (c_arr, g_arr))
    for ci in np.unique(cb):
        nn = int(round(p / ci))
        if nn < 2:
            raise ParameterError("c", float(ci), f"a ratio with n = round(p/c) >= 2 (p = {p})")
        if n is not None and int(n) != nn:
            raise ParameterError("n", n, f"None or round(p/c) = {nn} (p = {p} is fixed by the weights)")
    out = {}
    if model in ("attention", "both"):
        fa = _activation(f)
        E = np.full(cb.shape, np.nan)
        failed = []
        for ci in np.unique(cb):
            idx = np.nonzero(cb == ci)[0]
            try:
                E[idx] = general_w_error(fa, ci, gb[idx], W, mu, signal=signal, diagonal=diagonal)["E"]
            except ConvergenceError as err:
                if errors == "raise" or len(idx) == 1:
                    if errors == "raise":
                        raise
                    failed.append((float(ci), float(gb[idx[0]]), err.reason))
                    continue
                for j in idx:
                    try:
                        E[j] = general_w_error(fa, ci, [gb[j]], W, mu, signal=signal, diagonal=diagonal)["E"][0]
                    except ConvergenceError as err2:
                        failed.append((float(ci), float(gb[j]), err2.reason))
        bad = ~np.isfinite(E) | (E < -1e-12) | (E > 1 + 1e-12)
        for j in np.nonzero(bad & np.isfinite(E))[0]:
            failed.append((float(cb[j]), float(gb[j]), f"impossible value E={E[j]!r} (outside [0, 1])"))
            E[j] = np.nan
        if failed and errors == "raise":
            ci, gi, reason = failed[0]
            raise ConvergenceError(reason, point={"c": ci, "gamma": gi, "model": "attention"})
        if failed:
            warnings.warn(FailedPointsWarning(f"{len(failed)} point(s) failed and are NaN: " + "; ".join(
                f"c={a:g}, gamma={b:g}: {r}" for a, b, r in failed[:10]), failed), stacklevel=3)
        out["attention"] = np.clip(E, 0.0, 1.0).reshape(shape)
    if model in ("linear", "both"):
        from ..backends.context import context
        from ..backends.solver import linear_error

        ctx = context("numpy")
        with ctx:
            El = linear_error(ctx, cb, gb, float(mu @ mu))
        out["linear"] = np.asarray(El, dtype=float).reshape(shape)
    return out if model == "both" else out[model]
