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
linear algebra at every iteration: with κ = βγ', D = I − δWᵀ, A = I − αW and the p×p Schur complements
N = DA − κWᵀW, N' = AD − κWWᵀ (D commutes with Wᵀ, A with W), H_tt = N^{-1}D, H_th = βN^{-1}Wᵀ,
H_ht = γ'N'^{-1}W, H_hh = N'^{-1}A, so each evaluation is two p×p inverses (not one 2p×2p); and since
det B2 = det N(α, δ, q), q = αδ − βγ', the four traces are derivatives of log det N, so one inverse (of N)
gives them and their Jacobian (docs/theory.md §12.5).

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
evaluation is O(p) (traces) or O(p²) (solves with μ). Otherwise each evaluation is one p×p inverse of N
(LAPACK getrf + gecon + getri; the two inverses of N and N' with a probe check when N's estimated condition
is too large), in float32 during the Anderson phase (relative residual above 1e-3), and the Newton steps use
a float32 Jacobian of the traces (three p×p products; the derivative's is float64).

**Arithmetic.** The solver is written once against an arithmetic context (:class:`_FloatArith`,
:class:`_MPArith`: :mod:`symattn.backends.context` plus a p×p inverse, dot, eigh, least squares, the
activation and its Gauss–Hermite rule); ``backend='mpmath'`` evaluates the same formulas at ``dps``
digits (p <= :data:`MPMATH_MAX_P`).

**Derivative.** F is solved at real γ (everything real), then F'(γ) by implicit
differentiation of the fixed point, with the Jacobian by complex steps
(:func:`general_w_error`).
"""

from __future__ import annotations

import hashlib
import math
import threading
from dataclasses import dataclass

import numpy as np

import mpmath

from ..errors import ConvergenceError, ParameterError
from ..gauss import gauss_hermite
from ..model import check_mu, check_weights
from .context import FloatContext, MPContext
from .fixedpoint import Anderson, Newton, StallRestart, fixed_point

__all__ = [
    "SIGNAL_RULES",
    "GeneralWConstants",
    "general_w_constants",
    "GeneralWModel",
    "general_w_model",
    "pencil_map",
    "solve_pencil",
    "PencilSolution",
    "resolvent_F",
    "general_w_error",
    "strong_direction_correction",
    "model_error",
    "physical_points",
]

#: how the signal enters the kernel: 'latent' (Gaussian-equivalent plus the strong-direction correction
#: of docs/theory.md §12.3, the default), 'linear' (Gaussian-equivalent only), 'conditional' (F_odd(t) for y yᵀ)
SIGNAL_RULES = ("latent", "linear", "conditional")
#: the largest p of the mpmath backend (O(p³) Python-level operations per Dyson evaluation)
MPMATH_MAX_P = 100
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


class _FloatArith(FloatContext):
    """float64 arithmetic of this module: :class:`~symattn.backends.context.FloatContext` plus the few
    operations the general-W solver needs beyond it (fast p×p inverse, dot, eigh, least squares, the
    activation and its quadrature nodes, and ``low``, the precision of the far-from-converged phase)."""

    low, high = np.float32, np.float64

    def scalar(self, x):
        return float(x)

    def inv_p(self, A):
        return _inv(A)

    def dot(self, A, B):
        """Σ_ij A_ij B_ij (C-ordered arrays of equal shape)."""
        return float(np.vdot(A, B))

    def eigh(self, W):
        return np.linalg.eigh(W)

    def lstsq(self, A, b):
        return np.linalg.lstsq(A, b, rcond=None)[0]

    def f(self, f, x):
        """The centred activation at the points x."""
        return np.asarray(f.numpy(x), dtype=float)

    def f_constants(self, f):
        """(a1, ν, d) of f for ξ ~ N(0, 1)."""
        return float(f.a1), float(f.nu), float(f.d)

    def gauss_hermite(self, nq):
        return gauss_hermite(nq)


class _MPArith(MPContext):
    """The same operations as :class:`_FloatArith` at ``dps`` digits (mpmath numbers in object arrays)."""

    low = high = None

    def scalar(self, x):
        return mpmath.mpf(x) if not isinstance(x, (mpmath.mpf, mpmath.mpc)) else +x

    def inv_p(self, A):
        return self.inv(A)

    def dot(self, A, B):
        return mpmath.fsum(np.ravel(A * B))

    def eigh(self, W):
        lam, E = mpmath.eigsy(mpmath.matrix(np.asarray(W, dtype=object).tolist()))
        p = W.shape[0]
        return (np.array([lam[i] for i in range(p)], dtype=object),
                np.array([[E[i, j] for j in range(p)] for i in range(p)], dtype=object))

    def lstsq(self, A, b):
        x = mpmath.qr_solve(mpmath.matrix(np.asarray(A, dtype=object).tolist()), mpmath.matrix(list(b)))[0]
        return np.array([x[i] for i in range(A.shape[1])], dtype=object)

    def f(self, f, x):
        a0 = f.constants(self.dps)["a0"]
        return np.asarray(np.frompyfunc(lambda t: f._mp_eval(t) - a0, 1, 1)(np.asarray(x, dtype=object)),
                          dtype=object)

    def f_constants(self, f):
        k = f.constants(self.dps)
        return k["a1"], k["nu"], k["d"]

    def gauss_hermite(self, nq):
        return _gauss_hermite_mp(nq, self.dps)


#: probabilists' Gauss–Hermite rules at dps digits already computed ((nq, dps) → (x, w))
_GH_MP: dict = {}


def _gauss_hermite_mp(nq: int, dps: int):
    """The nq-point probabilists' Gauss–Hermite rule (weights summing to 1) at ``dps`` digits: the float64
    nodes refined by Newton's method on He_nq (three-term recurrence, 10 guard digits), w_i ∝ 1/He_{nq−1}(x_i)²
    (O(nq²) operations instead of the O(nq³) eigenvalue problem of :func:`symattn.gauss.gauss_hermite`)."""
    key = (int(nq), int(dps))
    if key not in _GH_MP:
        x0, _ = gauss_hermite(nq)
        with mpmath.workdps(dps + 10):
            def he(x):
                a, b = mpmath.mpf(1), x          # He_0, He_1
                for k in range(1, nq):
                    a, b = b, x * b - k * a      # He_{k+1} = x He_k − k He_{k−1}
                return b, a                      # He_nq(x), He_{nq−1}(x)
            xs, ws = [], []
            for xi in x0:
                x = mpmath.mpf(float(xi))
                for _ in range(60):
                    hn, hm = he(x)
                    dx = hn / (nq * hm)          # He_nq' = nq He_{nq−1}
                    x -= dx
                    if abs(dx) <= mpmath.mpf(10) ** (-(dps + 8)) * max(1, abs(x)):
                        break
                xs.append(x)
                ws.append(1 / he(x)[1] ** 2)
            tot = mpmath.fsum(ws)
        with mpmath.workdps(dps):
            _GH_MP[key] = (np.array([+v for v in xs], dtype=object), np.array([+(v / tot) for v in ws], dtype=object))
    x, w = _GH_MP[key]
    return x.copy(), w.copy()


_FLOAT = _FloatArith()


def _arith(ctx=None):
    """The arithmetic of a context (None: float64): :class:`_FloatArith` or :class:`_MPArith`."""
    if ctx is None:
        return _FLOAT
    if isinstance(ctx, (_FloatArith, _MPArith)):
        return ctx
    return _MPArith(ctx.dps) if ctx.dps is not None else _FLOAT


def _ar(m):
    """The arithmetic of a model (float64 unless it was built with ``ctx``)."""
    return getattr(m, "arith", None) or _FLOAT


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
    ar = _arith(ctx)
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


@dataclass
class GeneralWModel:
    """Everything the pencil needs at one c: W, μ, the constants and the diagonal latent κ.

    kappa : values κ_m = f(q_m)/√p − a1'·tr W/p of the diagonal (the Dyson equation already puts
    a1'·tr W/p on the diagonal through (a1/c)YᵀWY), with weights ``kw``.
    c_yy : the extra coefficient of ŷŷᵀ in K (0 for signal='linear').
    c_11 : the coefficient of êêᵀ (ê = 1/√n) in K from the mean a0' of the off-diagonal entries.
    arith : the arithmetic of every number in the model (None: float64; see :func:`general_w_model`).
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
    arith: object = None


def general_w_model(f, c, W, mu=None, signal: str = "latent", diagonal: str = "f",
                    limit: bool = False, ctx=None) -> GeneralWModel:
    """Assemble the :class:`GeneralWModel` for the activation f, c = p/n, W and μ.

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
    ctx : FloatContext or MPContext, optional
        The arithmetic (default float64; :func:`symattn.backends.context.context`). The solver is
        written once against it: an mpmath context evaluates the same formulas at its digits.

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
    ar = _arith(ctx)
    _DIGESTS.clear()   # a new evaluation: W may have changed in place since the last one
    W = check_weights(W)
    p = W.shape[0]
    mu = check_mu(mu, p)
    c = float(c)
    n = max(2, int(round(p / c)))
    k = general_w_constants(f, W, mu, ctx=ar)
    with ar:
        W, mu, cc = ar.convert(W), ar.convert(mu), ar.scalar(c)
        sp = ar.sqrt(ar.scalar(p))
        base = -k.a1 * ar.scalar(np.sum(np.diagonal(W))) / p
        if diagonal == "f":
            with np.errstate(over="ignore"):
                fq = ar.f(f, k.q)
            if not np.all(ar.isfinite(fq)):
                raise ParameterError("diagonal", diagonal, "'zero' for this activation (f(xᵀWx/√p) overflows)")
            kappa = fq / sp + base
            kw = k.qw
        else:
            kappa, kw = ar.convert(np.array([base])), ar.convert(np.array([1.0]))
        c_yy = (k.F_odd - k.a1 * k.t) * n / sp if signal == "conditional" else 0 * sp
        c_11 = k.a0 * n / sp
        if limit:
            a1, nu, d = ar.f_constants(f)
            d = 0 * a1 if diagonal == "zero" else d
            if not math.isfinite(float(d)):
                raise ParameterError("diagonal", diagonal, "'zero' for a superlinear activation")
            return GeneralWModel(W=W, mu=mu, c=cc, n=n, p=p, a1=a1, sigma2=(nu - a1**2) / cc, tau=ar.scalar(1),
                                 kappa=ar.convert(np.array([d - a1], dtype=object)), kw=ar.convert(np.array([1.0])),
                                 c_yy=0 * a1, c_11=0 * a1, constants=k, W_traces=ar.convert(np.eye(2)), arith=ar)
        return GeneralWModel(W=W, mu=mu, c=cc, n=n, p=p, a1=k.a1, sigma2=k.s2 / cc, tau=k.tau, kappa=kappa,
                             kw=kw, c_yy=ar.scalar(c_yy), c_11=ar.scalar(c_11), constants=k, W_traces=W, arith=ar)


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
    I = np.eye(W.shape[0], dtype=W.dtype)
    return np.block([[I - alpha * W, -beta * W.T], [-gam * W, I - delta * W.T]])


#: eigendecompositions of symmetric W already seen (content digest, dps → (λ, E) or None); a few entries only
_EIG_CACHE: dict = {}
#: Gram matrices of non-symmetric W already seen (content digest → {dtype: (W, Wᵀ, WᵀW, WWᵀ)}); a few entries
_GRAM_CACHE: dict = {}


#: digests already taken since the last :func:`general_w_model` (id → (W, digest)): one hash per array and call
_DIGESTS: dict = {}


def _digest(W) -> tuple:
    """A key for W's content (shape, dtype, BLAKE2 of the entries): a W changed in place is a new key.

    Hashing a 384×384 W costs about 3 ms, so the digest of an array is remembered until the next
    :func:`general_w_model` (where every evaluation starts), which forgets them all."""
    hit = _DIGESTS.get(id(W))
    if hit is not None and hit[0] is W:
        return hit[1]
    a = np.ascontiguousarray(W)
    data = "|".join(map(str, a.ravel())).encode() if a.dtype == object else a.tobytes()
    d = a.shape, a.dtype.str, hashlib.blake2b(data, digest_size=16).hexdigest()
    _DIGESTS[id(W)] = (W, d)
    return d


#: how a dense (non-symmetric) W is evaluated: 'pp' (two p×p inverses of the Schur complements N, N',
#: docs/theory.md §12.2) or '2p' (one 2p×2p inverse of B2; the reference the tests compare with)
DENSE_ROUTE = "pp"
#: the p×p route is kept when its probe residual ‖B2 H v − v‖/‖v‖ is below PP_CHECK_TOL·tol (1e-10 in float64),
#: or PP_CHECK_LOW in the low precision (used only while the relative residual is above SINGLE_ABOVE = 1e-3, so
#: an error below 1e-3 is harmless there); otherwise the high precision, then the 2p×2p inverse, is taken
PP_CHECK_TOL, PP_CHECK_LOW = 1e3, 1e-3
#: the p×p route inverts N alone when its estimated condition allows (:meth:`_HOperator._pp1`, docs/theory.md
#: §12.5); False: always both Schur complements N and N' (:meth:`_HOperator._pp`)
PP_ONE_INVERSE = True
#: J[a, b, k, l] = G[2a + k, 2l + b] (G the 4×4 Gram of the products 𝒲_a H_ak under tr(·,·))
_A, _B, _K, _L = np.indices((2, 2, 2, 2))
_J_ROWS, _J_COLS = 2 * _A + _K, 2 * _L + _B


def _cast(x, dtype):
    """x in ``dtype`` (None: unchanged)."""
    if dtype is None:
        return x
    return x.astype(dtype, copy=False) if isinstance(x, np.ndarray) else dtype(x)


def _rmul(A, x):
    """A @ x for a real float A and x real or complex128 (p,) or (p, k): a complex x is multiplied as its
    interleaved real and imaginary columns (one real product, no complex copy of A); object arrays as they are."""
    if A.dtype == object or not np.iscomplexobj(x) or x.dtype != np.complex128:
        return A @ x
    x2 = np.ascontiguousarray(x.reshape(x.shape[0], -1))
    return (A @ x2.view(np.float64)).view(np.complex128).reshape((A.shape[0],) + x.shape[1:])


#: per-thread scratch buffers of the p×p route ((p, dtype) → dict of arrays), see :func:`_workspace`
_WORKSPACE = threading.local()


def _workspace(p: int, dtype) -> dict:
    """Scratch arrays for one p and float dtype, reused by every evaluation of this thread: 'base', 'tmp'
    (p×p) and 'P', 'PT' (4×p×p). Fresh p×p temporaries in float64 (1.2 MB at p = 384) are returned to the
    system by the allocator and page-faulted back on every evaluation, which costs as much as the BLAS work."""
    key = (int(p), np.dtype(dtype).str)
    cache = getattr(_WORKSPACE, "cache", None)
    if cache is None:
        cache = _WORKSPACE.cache = {}
    ws = cache.get(key)
    if ws is None:
        if len(cache) > 4:
            cache.clear()
        ws = cache[key] = {"base": np.empty((p, p), dtype), "tmp": np.empty((p, p), dtype),
                           "P": np.empty((4, p, p), dtype), "PT": np.empty((4, p, p), dtype)}
    return ws


def _symmetric_eig(W, ar=_FLOAT):
    """(λ, E) with W = E diag(λ) Eᵀ when W is exactly symmetric, else None (cached per array)."""
    key = (_digest(W), ar.dps)
    if key in _EIG_CACHE:
        return _EIG_CACHE[key]
    eig = ar.eigh(W) if np.array_equal(W, W.T) else None   # None: not symmetric (cached too)
    if len(_EIG_CACHE) > 8:
        _EIG_CACHE.clear()
    _EIG_CACHE[key] = eig
    return eig


def _inv(A):
    """A^{-1} by LAPACK getrf + getri (in A's precision; numpy's inv is a slower gesv, and slower still in
    float32); raises numpy.linalg.LinAlgError when A is exactly singular."""
    from scipy.linalg import lapack

    # a C-ordered A is the Fortran-ordered Aᵀ: invert that without a copy, (Aᵀ)^{-1} = (A^{-1})ᵀ
    At = A.T
    getrf, getri, getri_lwork = lapack.get_lapack_funcs(("getrf", "getri", "getri_lwork"), (At,))
    lu, piv, info = getrf(At, overwrite_a=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getrf info {info})")
    lwork, _ = getri_lwork(A.shape[0])
    out, info = getri(lu, piv, lwork=int(lwork), overwrite_lu=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getri info {info})")
    return out.T


def _inv_rcond(A, max_err):
    """A^{-1} by LAPACK getrf + gecon + getri for A C-ordered real float (overwritten), or None when the
    estimated error eps·cond_∞(A) (gecon's reciprocal condition estimate, from the LU factors) is not below
    ``max_err`` (then getri is not run). Raises numpy.linalg.LinAlgError when A is exactly singular."""
    from scipy.linalg import lapack

    At = A.T   # Fortran-ordered Aᵀ, factorised in place; ‖Aᵀ‖_1 = ‖A‖_∞
    anorm = float(np.max(np.sum(np.abs(A), axis=1)))
    getrf, gecon, getri, getri_lwork = lapack.get_lapack_funcs(("getrf", "gecon", "getri", "getri_lwork"), (At,))
    lu, piv, info = getrf(At, overwrite_a=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getrf info {info})")
    rcond, info = gecon(lu, anorm, norm="1")
    if not float(np.finfo(A.dtype).eps) < max_err * float(rcond):
        return None
    lwork, _ = getri_lwork(A.shape[0])
    out, info = getri(lu, piv, lwork=int(lwork), overwrite_lu=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getri info {info})")
    return out.T


def _grams(W, dtype=None):
    """(W, Wᵀ, WᵀW, WWᵀ) in ``dtype`` (None: W's own), C-contiguous (cached per array and dtype)."""
    d = _digest(W)
    if d not in _GRAM_CACHE:
        if len(_GRAM_CACHE) > 8:
            _GRAM_CACHE.clear()
        _GRAM_CACHE[d] = {}
    per = _GRAM_CACHE[d]
    key = None if dtype is None else np.dtype(dtype).str
    if key not in per:
        if dtype is None or np.dtype(dtype) == W.dtype:
            per[key] = (W, np.ascontiguousarray(W.T), W.T @ W, W @ W.T)
        else:
            per[key] = tuple(np.ascontiguousarray(a, dtype=dtype) for a in _grams(W, None))
    return per[key]


def _identity_minus(p, Wd, Wt, a_, d_):
    """I − αW − δWᵀ (float arrays) in the reused buffer ``base`` of :func:`_workspace`."""
    ws = _workspace(p, Wd.dtype)
    base, tmp = ws["base"], ws["tmp"]
    np.multiply(Wd, -a_, out=base)
    np.multiply(Wt, d_, out=tmp)
    np.subtract(base, tmp, out=base)
    base.flat[::p + 1] += 1
    return base


class _HOperator:
    """H = B2(C)^{-1} (C = (α, β, γ', δ)) at real C0, with its traces T_ab = tr_p(𝒲_a H_ab)
    (𝒲_t = W, 𝒲_h = Wᵀ) and their Jacobian ∂T_ab/∂C_kl = tr_p(𝒲_a H_ak 𝒲_l H_lb), so that a
    complex step C = C0 + iεΔC is evaluated exactly to O(ε²) without a complex inverse:
    T(C) = T0 + J·ΔC and H(C)v = H0 v + H0 (ΔC ⊗ 𝒲)(H0 v).

    For a symmetric W = E diag(λ) Eᵀ (one cached ``eigh``) B2 splits into p independent 2×2 blocks
    [[1 − αλ, −βλ], [−γ'λ, 1 − δλ]]: every trace is a mean over λ and H v costs two products
    with E (docs/theory.md §12.5).

    Otherwise (route 'pp', docs/theory.md §12.2) with κ = βγ', D = I − δWᵀ, A = I − αW and the
    Schur complements N = DA − κWᵀW, N' = AD − κWWᵀ (D commutes with Wᵀ, A with W):

      H_tt = N^{-1}D,  H_th = βN^{-1}Wᵀ,  H_ht = γ'N'^{-1}W,  H_hh = N'^{-1}A,

    so T0 costs two p×p inverses and O(p²) sums against the cached WᵀW, WWᵀ, and the Jacobian four
    p×p products (instead of one 2p×2p inverse and four 2p-block products). Since det B2 = det N, N^{-1}
    alone gives T0 and the Jacobian (three products; :meth:`_pp1`, the default when N is well conditioned,
    :data:`PP_ONE_INVERSE`); N'^{-1} is then formed only for a solve. Route '2p' (:data:`DENSE_ROUTE`) is the
    2p×2p inverse itself; it is also the fallback when N or N' is singular."""

    def __init__(self, W, C0, single: bool = False, ar=_FLOAT):
        p = W.shape[0]
        self.W, self.p, self.ar = W, p, ar
        self.C0 = ar.convert(C0)  # [[α, β], [γ', δ]], real
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        self._J = self._J_low = None
        self.H = self.Ni = None
        self._one = False   # True on the one-inverse p×p route (:meth:`_pp1`)
        eig = _symmetric_eig(W, ar)
        self.eig = eig
        if eig is not None:
            lam, _ = eig
            det = (1 - al * lam) * (1 - de * lam) - be * ga * lam * lam
            # h[a][b](λ): the (a, b) entry of the inverse 2×2 block at λ
            self.h = [[(1 - de * lam) / det, be * lam / det], [ga * lam / det, (1 - al * lam) / det]]
            self.T0 = ar.convert(np.array([[np.sum(lam * self.h[a][b]) / p for b in range(2)] for a in range(2)]))
            return
        # the low precision (float32 in float64 arithmetic, rounding ~1e-6): only far from the fixed point
        dtype = ar.low if single else ar.high
        # the p×p route: one inverse (N) when its condition allows, else both Schur complements with the probe;
        # a failed low-precision attempt retries in the high precision (cheaper than the 2p×2p inverse)
        low = dtype is not ar.high
        if DENSE_ROUTE == "pp" and (self._pp1(dtype) or (low and self._pp1(ar.high)) or self._pp(dtype)
                                    or (low and self._pp(ar.high))):
            return
        Wd = _grams(W, dtype)[0]
        H = ar.inv_p(_B2(Wd, *(_cast(v, dtype) for v in (al, be, ga, de))))
        self.H = H
        W_T = Wd.T
        self.T0 = ar.convert(np.array([[np.sum(W_T * H[:p, :p]), np.sum(W_T * H[:p, p:])],
                                       [np.sum(Wd * H[p:, :p]), np.sum(Wd * H[p:, p:])]], dtype=object)) / p

    def _pp1(self, dtype) -> bool:
        """The p×p route with one inverse (docs/theory.md §12.5): det B2 = det N(α, δ, q), q = αδ − βγ', so every
        trace is a derivative of log det N and needs N^{-1} only:

          p T = [[s_W − δ s_M, β s_M], [γ' s_M, s_T − α s_M]],  s_X = tr(N^{-1} X),  X ∈ {W, Wᵀ, M = WᵀW}

        (in particular tr(N'^{-1}WWᵀ) = tr(N^{-1}WᵀW) and tr(N'^{-1}Wᵀ) = tr(N^{-1}Wᵀ)). Kept when the estimated
        condition number of N times the rounding is below the probe threshold of :meth:`_pp`; float arrays
        only (the mpmath arithmetic takes :meth:`_pp`). N'^{-1} is formed only if :meth:`_solve` needs it."""
        if not PP_ONE_INVERSE:
            return False
        p, ar = self.p, self.ar
        Wd, Wt, WtW, WWt = _grams(self.W, dtype)
        if Wd.dtype == object:
            return False
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        a_, b_, g_, d_ = (_cast(v, dtype) for v in (al, be, ga, de))
        q = a_ * d_ - b_ * g_
        N = np.multiply(WtW, q)
        N += _identity_minus(p, Wd, Wt, a_, d_)
        try:
            Ni = _inv_rcond(N, PP_CHECK_LOW if dtype is not None and dtype is ar.low else PP_CHECK_TOL * ar.tol)
        except (np.linalg.LinAlgError, ZeroDivisionError):
            return False
        if Ni is None:
            return False
        sW, sT, sM = ar.dot(Ni, Wt), ar.dot(Ni, Wd), ar.dot(Ni, WtW)
        T0 = ar.convert(np.array([[sW - de * sM, be * sM], [ga * sM, sT - al * sM]], dtype=object)) / p
        if not np.all(ar.isfinite(T0)):
            return False
        self.Ni, self.Npi, self.T0, self._sM, self._one = Ni, None, T0, sM, True
        return True

    def _jac_1(self, dtype):
        """J on the one-inverse route: with A_X = N^{-1}X and G_XY = tr(A_X A_Y) (X, Y ∈ {W, Wᵀ, M}),
        ∂s_X/∂α = G_WX, ∂s_X/∂δ = G_TX, ∂s_X/∂q = −G_MX, then the chain rule through q = αδ − βγ' and the
        prefactors of :meth:`_pp1` (three p×p products instead of four)."""
        p = self.p
        al, be, ga, de = (float(v) for v in (self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]))
        Wd, Wt, WtW = _grams(self.W, dtype)[:3]
        Ni = _cast(self.Ni, dtype)
        ws = _workspace(p, Wd.dtype)
        P, PT = ws["P"], ws["PT"]
        np.matmul(Ni, Wd, out=P[0])
        np.matmul(Ni, Wt, out=P[1])
        np.matmul(Ni, WtW, out=P[2])
        for i in range(3):
            PT[i] = P[i].T
        G = np.asarray(P[:3].reshape(3, -1) @ PT[:3].reshape(3, -1).T, dtype=float)   # G[X, Y], X, Y = W, T, M
        G = (G + G.T) / 2
        sM = float(self._sM)
        # D[c, X] = ∂s_X/∂C_c for C_c = α, β, γ', δ (q = αδ − βγ')
        D = np.array([G[0] - de * G[2], ga * G[2], be * G[2], G[1] - al * G[2]])
        J = np.empty((2, 2, 4))
        J[0, 0] = D[:, 0] - de * D[:, 2]
        J[0, 1] = be * D[:, 2]
        J[1, 0] = ga * D[:, 2]
        J[1, 1] = D[:, 1] - al * D[:, 2]
        J[0, 0, 3] -= sM
        J[0, 1, 1] += sM
        J[1, 0, 2] += sM
        J[1, 1, 0] -= sM
        return self.ar.convert(J.reshape(2, 2, 2, 2) / p)

    def _inv_Np(self):
        """N'^{-1} = (I − αW − δWᵀ + qWWᵀ)^{-1} in the precision of N^{-1} (for :meth:`_solve` on the one-inverse
        route)."""
        p = self.p
        dtype = self.Ni.dtype
        Wd, Wt, _, WWt = _grams(self.W, None if dtype == self.W.dtype else dtype)
        al, be, ga, de = (_cast(v, dtype.type) for v in (self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]))
        Np = np.multiply(WWt, al * de - be * ga) - al * Wd - de * Wt
        Np.flat[::p + 1] += 1
        return self.ar.inv_p(Np)

    def _pp(self, dtype) -> bool:
        """The p×p route: N^{-1}, N'^{-1} and T0; False (nothing set) when N or N' is singular."""
        p, ar = self.p, self.ar
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        Wd, Wt, WtW, WWt = _grams(self.W, dtype)
        a_, b_, g_, d_ = (_cast(v, dtype) for v in (al, be, ga, de))
        q = a_ * d_ - b_ * g_
        if Wd.dtype == object:
            base = -a_ * Wd - d_ * Wt
            idx = np.arange(p)
            base[idx, idx] += 1
            N, Np = base + q * WtW, base + q * WWt
        else:
            # I − αW − δWᵀ in a reused buffer, then N, N' (inverted in place: no further p×p temporaries)
            base = _identity_minus(p, Wd, Wt, a_, d_)
            N = np.multiply(WtW, q)
            N += base
            Np = np.multiply(WWt, q)
            Np += base
        try:
            Ni = ar.inv_p(N)
            Npi = ar.inv_p(Np)
        except (np.linalg.LinAlgError, ZeroDivisionError):
            return False
        # tr(N^{-1}W) = Σ (N^{-1})_ij (Wᵀ)_ij etc. (WᵀW, WWᵀ symmetric), as dot products
        sW, sWtW = ar.dot(Ni, Wt), ar.dot(Ni, WtW)
        sWt, sWWt = ar.dot(Npi, Wd), ar.dot(Npi, WWt)
        T0 = ar.convert(np.array([[sW - de * sWtW, be * sWtW], [ga * sWWt, sWt - al * sWWt]], dtype=object)) / p
        if not np.all(ar.isfinite(T0)):
            return False
        # a posteriori check with one probe v: ‖B2 (H v) − v‖/‖v‖ grows like cond(D) or cond(A) times the
        # rounding (N = D·S, N' = A·S' are ill-conditioned near 1/δ or 1/α in the spectrum of W, B2 need not be);
        # computed in the inverses' own precision (H v as in :meth:`_solve`)
        if Wd.dtype != object:
            ws = _workspace(p, Wd.dtype)
            if "probe" not in ws:
                ws["probe"] = np.cos(np.arange(2 * p) + 0.5).astype(Wd.dtype)
            v = ws["probe"]
        else:
            v = ar.convert(np.cos(np.arange(2 * p) + 0.5))
        vt, vh = v[:p], v[p:]
        V = np.stack([vt, vh], 1)
        WV, WtV = Wd @ V, Wt @ V
        xt = Ni @ (vt - d_ * WtV[:, 0] + b_ * WtV[:, 1])
        xh = Npi @ (g_ * WV[:, 0] + vh - a_ * WV[:, 1])
        Wxt, Wtxh = Wd @ xt, Wt @ xh
        Bx = np.concatenate([xt - a_ * Wxt - b_ * Wtxh, xh - g_ * Wxt - d_ * Wtxh])
        err = float(np.sqrt(ar.to_float(np.sum((Bx - v) ** 2)) / ar.to_float(np.sum(v * v))))
        if not err < (PP_CHECK_LOW if dtype is not None and dtype is ar.low else PP_CHECK_TOL * ar.tol):
            return False
        self.Ni, self.Npi, self.T0 = Ni, Npi, T0
        return True

    def J_low(self):
        """The Jacobian J from float32 products (relative rounding ~1e-6) on the p×p route, else J:
        enough for a Newton step, never for the derivative."""
        if self.Ni is None or self._J is not None or self.ar.low is self.ar.high:
            return self.J
        if self._J_low is None:
            self._J_low = self._jac_1(self.ar.low) if self._one else self._jac_pp(self.ar.low)
        return self._J_low

    def _jac_pp(self, dtype):
        """J on the p×p route from the products 𝒲_a H_ak in ``dtype``."""
        p = self.p
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        Wd, Wt = _grams(self.W, dtype)[:2]
        Ni, Npi = _cast(self.Ni, dtype), _cast(self.Npi, dtype)
        a_, b_, g_, d_ = (_cast(v, dtype) for v in (al, be, ga, de))
        # 𝒲_a H_ak: W H_tt = W N^{-1} D, W H_th = β W N^{-1} Wᵀ, Wᵀ H_ht = γ' Wᵀ N'^{-1} W, Wᵀ H_hh = Wᵀ N'^{-1} A,
        # index 2a + k, from X1 = W N^{-1}, X2 = X1 Wᵀ, Y1 = Wᵀ N'^{-1}, Y2 = Y1 W
        if Wd.dtype == object:
            X1 = Wd @ Ni
            X2 = X1 @ Wt
            Y1 = Wt @ Npi
            Y2 = Y1 @ Wd
            P = np.stack([X1 - d_ * X2, b_ * X2, g_ * Y2, Y1 - a_ * Y2])
            PT = np.ascontiguousarray(P.transpose(0, 2, 1))
        else:
            # in reused buffers: the 4 products and their transposes, no p×p temporaries
            ws = _workspace(p, Wd.dtype)
            P, PT, tmp = ws["P"], ws["PT"], ws["tmp"]
            np.matmul(Wd, Ni, out=P[0])
            np.matmul(P[0], Wt, out=P[1])
            np.matmul(Wt, Npi, out=P[3])
            np.matmul(P[3], Wd, out=P[2])
            np.multiply(P[1], d_, out=tmp)
            P[0] -= tmp
            np.multiply(P[2], a_, out=tmp)
            P[3] -= tmp
            P[1] *= b_
            P[2] *= g_
            for i in range(4):
                PT[i] = P[i].T
        # tr(P_i P_j) = vec(P_i)·vec(P_jᵀ): one 4×4 Gram product
        G = self.ar.convert(P.reshape(4, -1) @ PT.reshape(4, -1).T) / p
        return G[_J_ROWS, _J_COLS]

    @property
    def J(self):
        if self._J is None:
            if self.Ni is not None:
                self._J = self._jac_1(np.float64) if self._one else self._jac_pp(np.float64)
                return self._J
            p, idx = self.p, [(a, b, k, l) for a in range(2) for b in range(2) for k in range(2) for l in range(2)]
            if self.eig is not None:
                lam, h = self.eig[0], self.h
                vals = [np.sum(lam * h[a][k] * lam * h[l][b]) / p for a, b, k, l in idx]
            else:
                W, H = self.W, self.H
                blk = lambda a, b: H[a * p:(a + 1) * p, b * p:(b + 1) * p]
                Wl = (W, W.T)
                P = [[Wl[a] @ blk(a, k) for k in range(2)] for a in range(2)]  # 𝒲_a H_ak
                vals = [np.sum(P[a][k] * P[l][b].T) / p for a, b, k, l in idx]
            self._J = self.ar.convert(np.array(vals, dtype=object)).reshape(2, 2, 2, 2)
        return self._J

    def traces(self, C):
        dC = np.asarray(C) - self.C0
        if not np.any(dC):
            return self.T0
        return self.T0 + np.tensordot(self.J, dC, axes=([2, 3], [0, 1]))

    def _solve(self, v):
        """H0 v (v of shape (2p,) or (2p, k), real or complex)."""
        p = self.p
        if np.iscomplexobj(v):   # complex128: the interleaved real and imaginary columns on the real inverse
            v2 = np.ascontiguousarray(v.reshape(2 * p, -1), dtype=np.complex128)
            x = np.ascontiguousarray(self._solve(v2.view(np.float64)))
            return x.view(np.complex128).reshape(v.shape)
        if self.Ni is not None:
            if self.Npi is None:
                self.Npi = self._inv_Np()
            al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
            Wd, Wt = _grams(self.W, None)[:2]
            vt, vh = v[:p], v[p:]
            # W and Wᵀ applied to [v_t, v_h] at once (one pass over each matrix)
            k = v.shape[1] if v.ndim == 2 else 1
            V = np.concatenate([vt, vh], axis=1) if v.ndim == 2 else np.stack([vt, vh], 1)
            WV, WtV = Wd @ V, Wt @ V
            Wvt, Wvh, Wtvt, Wtvh = WV[:, :k], WV[:, k:], WtV[:, :k], WtV[:, k:]
            if v.ndim == 1:
                Wvt, Wvh, Wtvt, Wtvh = Wvt[:, 0], Wvh[:, 0], Wtvt[:, 0], Wtvh[:, 0]
            return np.concatenate([self.Ni @ (vt - de * Wtvt + be * Wtvh), self.Npi @ (ga * Wvt + vh - al * Wvh)])
        if self.eig is None:
            return self.H @ v
        (_, E), h = self.eig, self.h
        if v.ndim == 2:
            h = [[x[:, None] for x in row] for row in h]
        # Eᵀ and E applied to both halves at once (one product each)
        k = v.shape[1] if v.ndim == 2 else 1
        ab = E.T @ (np.concatenate([v[:p], v[p:]], axis=1) if v.ndim == 2 else np.stack([v[:p], v[p:]], 1))
        a, b = (ab[:, :k], ab[:, k:]) if v.ndim == 2 else (ab[:, 0], ab[:, 1])
        tt, hh = h[0][0] * a + h[0][1] * b, h[1][0] * a + h[1][1] * b
        out = E @ (np.concatenate([tt, hh], axis=1) if v.ndim == 2 else np.stack([tt, hh], 1))
        return np.concatenate([out[:, :k], out[:, k:]]) if v.ndim == 2 else np.concatenate([out[:, 0], out[:, 1]])

    def apply(self, C, v):
        p = self.p
        x = self._solve(v)
        dC = np.asarray(C) - self.C0
        if not np.any(dC):
            return x
        Wx = np.concatenate([_rmul(self.W, x[:p]), _rmul(self.W.T, x[p:])])
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
        ar = _ar(m)
        Hop = _HOperator(m.W_traces, ar.real(C), single=single, ar=ar)
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
    # rows x, u, w; columns x, u, w
    S = [[-a1 * P["gt"] - s2 * g[W_, U_], -a1 * P["gv"], -a1 * P["gh"] + s2 * tau * g[W_, X_]],
         [a1 * P["lt"] + s2 * tau * g[X_, U_], a1 * P["lv"], a1 * P["lh"] - s2 * g[X_, X_]],
         [c * P["vt"], c * P["vv"], c * P["vh"]]]
    return np.array(S, dtype=np.asarray(g).dtype if np.asarray(g).dtype == object else None)


def _G_nn(m, z, Snn):
    """The n-blocks G_nn(κ_m) = (L0_nn(κ_m) − Σ_nn)^{-1} at every diagonal node (shape (M, 3, 3))."""
    M = m.kappa.size
    L0 = np.zeros((M, 3, 3)) + 0 * (Snn[None] + z)   # zeros of the type of Snn and z
    L0[:, X_, X_] = z
    L0[:, X_, W_] = m.kappa
    L0[:, U_, X_] = -m.kappa
    L0[:, U_, U_] = 1
    L0[:, W_, W_] = 1
    return _ar(m).inv(L0 - Snn[None])


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
    g_new = np.tensordot(m.kw, Gn, axes=1)
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
#: evaluations without a new best residual after which the Anderson history is dropped (restart from the best point)
ANDERSON_RESTART = 8


def _residual(gn, g) -> float:
    """Entrywise relative change, each entry on the scale max(|g_k|, 1e-6·max|g|) (a float)."""
    a = np.asarray(np.abs(gn), dtype=float)
    scale = np.maximum(a, 1e-6 * max(float(np.max(a)), 1e-300))
    return float(np.max(np.asarray(np.abs(gn - g), dtype=float) / scale))


class _LowJ:
    """The traces of an H operator linearised with its float32 Jacobian (:meth:`_HOperator.J_low`)."""

    def __init__(self, Hop):
        self.Hop = Hop

    def traces(self, C):
        dC = np.asarray(C) - self.Hop.C0
        return self.Hop.T0 + np.tensordot(self.Hop.J_low(), dC, axes=([2, 3], [0, 1]))


def _steps_map(m, g, z, Hop, Jt, eta):
    """Im Φ(g + iη E_k)/η for the nine unit steps E_k at once (float arithmetic): :func:`pencil_map` with the
    p×p traces linearised at Hop (T = T0 + Jt·(C − C0)), vectorised over the leading axis of the steps."""
    gb = np.asarray(g)[None] + (1j * eta) * np.eye(9).reshape(9, 3, 3)
    a = m.a1 / m.c
    x = lambda i, j: gb[:, i, j]
    S = {"tg": -a * x(X_, X_), "tl": a * x(X_, U_), "tv": x(X_, W_),
         "vg": -a * x(U_, X_), "vl": a * x(U_, U_), "vv": x(U_, W_),
         "hg": -a * x(W_, X_), "hl": a * x(W_, U_), "hv": x(W_, W_)}
    e, alpha, beta, gam, delta = _coefficients(S)
    dC = np.stack([np.stack([alpha, beta], -1), np.stack([gam, delta], -1)], -2) - Hop.C0    # (9, 2, 2)
    T = Hop.T0 + np.einsum("abkl,skl->sab", Jt, dC)
    T1, T2, T3, T4 = T[:, 0, 0], T[:, 0, 1], T[:, 1, 0], T[:, 1, 1]
    P = {"lt": T1, "lh": T2, "gt": T3, "gh": T4,
         "lv": e * (S["tv"] * T1 + S["hv"] * T2), "gv": e * (S["tv"] * T3 + S["hv"] * T4)}
    for k in "tvh":
        P["v" + k] = e * (S["vg"] * P["g" + k] + S["vl"] * P["l" + k]) + (e if k == "v" else 0.0)
    a1, c, s2, tau = m.a1, m.c, m.sigma2, m.tau
    Snn = np.stack([np.stack([-a1 * P["gt"] - s2 * x(W_, U_), -a1 * P["gv"], -a1 * P["gh"] + s2 * tau * x(W_, X_)], -1),
                    np.stack([a1 * P["lt"] + s2 * tau * x(X_, U_), a1 * P["lv"], a1 * P["lh"] - s2 * x(X_, X_)], -1),
                    np.stack([c * P["vt"], c * P["vv"], c * P["vh"]], -1)], -2)      # (9, 3, 3)
    M = m.kappa.size
    L0 = np.zeros((M, 3, 3), dtype=complex)
    L0[:, X_, X_] = z
    L0[:, X_, W_] = m.kappa
    L0[:, U_, X_] = -m.kappa
    L0[:, U_, U_] = 1
    L0[:, W_, W_] = 1
    Gn = np.linalg.inv(L0[None] - Snn[:, None])                                             # (9, M, 3, 3)
    out = np.tensordot(Gn, m.kw, axes=([1], [0]))                                            # (9, 3, 3)
    return (out.imag / eta).reshape(9, 9).T


def _jacobian(m, g, z, Hop, eta=None, low: bool = False):
    """∂Φ/∂g (9×9) at real (g, z) by complex steps (η = the arithmetic's ``step``: 1e-20 in float64)
    through the linearised H operator (with ``low``, through its low-precision Jacobian: for Newton
    steps only)."""
    ar = _ar(m)
    eta = ar.step if eta is None else eta
    if isinstance(ar, _FloatArith) and np.asarray(g).dtype != object:
        # the nine complex steps as one batch (the same formulas as pencil_map, vectorised over the steps)
        Jt = Hop.J_low() if low else Hop.J
        return _steps_map(m, g, z, Hop, Jt, eta)
    if low:
        Hop = _LowJ(Hop)
    cols = []
    for k in range(9):
        d = ar.zeros(9, complex=True)
        d[k] = ar.complex(0, eta)
        cols.append(ar.imag(pencil_map(m, g + d.reshape(3, 3), z, Hop)[0]).ravel() / eta)
    return np.array(cols).T


def solve_pencil(m, z, g0=None, tol=None, maxiter: int = 300, newton: bool = False, depth: int | None = None,
                 restart: int | None = None) -> PencilSolution:
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
    tol : float, optional
        Relative residual (default the arithmetic's ``tol``: :data:`PENCIL_TOL` in float64,
        10^{-(dps−3)} in mpmath); Newton stalling below 1000·tol counts as converged.
    maxiter : int
    newton : bool
        Start with Newton (for a warm start ``g0`` close to the solution).
    depth : int, optional
        Anderson depth (default :data:`ANDERSON_DEPTH`).
    restart : int, optional
        Evaluations without a new best residual before a restart (default :data:`ANDERSON_RESTART`; 0: none),
        on :func:`~symattn.backends.fixedpoint.fixed_point` with a
        :class:`~symattn.backends.fixedpoint.StallRestart`.

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
    ar = _ar(m)
    tol = ar.tol if tol is None else tol
    floor = tol * (PENCIL_FLOOR / PENCIL_TOL)
    g = ar.convert(np.diag([1 / z, 1, 1]) if g0 is None else np.asarray(g0))
    depth = ANDERSON_DEPTH if depth is None else depth
    restart = ANDERSON_RESTART if restart is None else restart

    def evaluate(g, state):
        # far from the fixed point (Anderson phase) the traces are evaluated in float32
        gn, parts = pencil_map(m, g, z, single=not newton and state.strategy != "newton"
                                                and not state.residual < SINGLE_ABOVE)
        return gn, parts["H"]

    def newton_step(g, gn, Hop):
        r = (gn - g).ravel()
        J = _jacobian(m, g, z, Hop, low=True)
        try:
            step = ar.solve(np.eye(9) - J, r)
        except (np.linalg.LinAlgError, ZeroDivisionError):
            step = r / 2
        if not np.all(ar.isfinite(step)):
            step = r / 2
        return step.reshape(3, 3), gn, Hop

    # Anderson-accelerated damped iteration from the γ → ∞ start: it stays on the physical branch; Newton takes
    # over once the residual is below NEWTON_SWITCH. No progress for ANDERSON_RESTART evaluations (the history can
    # cycle at small γ) restarts the damped iteration from the best point with an empty history, the plain damped
    # steps running for longer after each restart (from the same point, the same history cycles again).
    strategies = [Anderson(depth=depth, solver=ar.lstsq, check_finite=True),
                  Newton(newton_step, below=np.inf if newton else NEWTON_SWITCH, floor=floor, halve="increase")]
    out = fixed_point(evaluate, g, strategies, tol=tol, residual=_residual, maxiter=maxiter,
                      restart=StallRestart(restart) if restart else None,
                      finite=lambda v: bool(np.all(ar.isfinite(v))), name="the general-W Dyson iteration",
                      point={"gamma": float(ar.real(z))})
    return PencilSolution(g=out.x, iterations=out.iterations, residual=out.residual, Hop=out.aux)


def _p_response(m, S, H, src):
    """G_pp applied to a p-space source: src = dict block → vector (blocks t, v, h, g, l), each of
    shape (p,) or (p, k) for k sources at once; returns the 5 response vectors (dict)."""
    p = m.p
    e, C = _C(S)
    alpha, beta, gam, delta = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
    zero = np.zeros_like(next(iter(src.values())))
    r = {k: src.get(k, zero) for k in "tvhgl"}
    rt = r["t"] + e * S["tv"] * r["v"] + beta * r["g"] + alpha * r["l"]
    rh = r["h"] + e * S["hv"] * r["v"] + delta * r["g"] + gam * r["l"]
    th = H.apply(C, np.concatenate([rt, rh]))
    t, h = th[:p], th[p:]
    gg = _rmul(m.W.T, h) + r["g"]
    ll = _rmul(m.W, t) + r["l"]
    v = e * (r["v"] + S["vg"] * gg + S["vl"] * ll)
    return {"t": t, "v": v, "h": h, "g": gg, "l": ll}


def resolvent_F(m, g, z, Hop=None, Hop_mu=None, Gbar=None):
    """F(z) = ŷᵀ[L_full^{-1}]_xx ŷ at the n-traces g: the bulk value, corrected by Woodbury for
    the signal (Y → Y + μŷᵀ in every Y-slot, the ŷŷᵀ and êêᵀ kernel terms).

    Parameters
    ----------
    m : GeneralWModel
    g : numpy.ndarray
        3×3 n-traces at the fixed point (or a complex-stepped perturbation of them).
    z : float or complex
    Gbar : numpy.ndarray, optional
        The 3×3 n-n quadratic forms of ŷ when the caller's fixed point has them (a pencil with more
        blocks than §12.2's, e.g. :mod:`symattn.backends.hermite_blocks`); default: this pencil's.

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
    if Gbar is None:
        Gbar, parts = pencil_map(m, g, z, Hop)   # E_κ G_nn: the n-n quadratic forms of ŷ, ê
        S, H = parts["S"], parts["H"]
    else:
        S, H = _sigma_pp(m, g), None
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
    if H is None and has_mu:
        H = _p_traces(m, S)[1]
    if m.W_traces is not m.W and has_mu:
        ar = _ar(m)
        H = Hop_mu if Hop_mu is not None else _HOperator(m.W, ar.real(_C(S)[1]), ar=ar)
    # responses of G_pp to μ-sources in each p-block (5 blocks × 5 outputs)
    resp = {}
    if has_mu:
        # the five sources μ in block b (column j of each source matrix), solved together
        src = {b: np.outer(mu, np.arange(5) == j) for j, b in enumerate("tvhgl")}
        out = _p_response(m, S, H, src)
        for j, b in enumerate("tvhgl"):
            resp[b] = {k: out[k][:, j] for k in out}

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
    cap = np.array([[coef * form(cb, ck, rb, rk) for (rb, rk, _, _, coef) in pieces]
                    for (_, _, cb, ck, _) in pieces]) + np.eye(R)
    left = np.array([coef * form("nx", "y", rb, rk) for (rb, rk, _, _, coef) in pieces])
    right = np.array([form(cb, ck, "nx", "y") for (_, _, cb, ck, _) in pieces])
    return F0 - left @ _ar(m).solve(cap, right)


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
    from ..model import Geometry
    from .finite_p import finite_p_error

    ar = _arith(ctx)
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
    # the correction depends on W only through b: cached on (f, c, γ, μ, b, diagonal)
    key = (f, float(c), gammas.tobytes(), mu.tobytes(), b, diagonal, ar.dps)
    hit = _CORRECTION_CACHE.get(key)
    if hit is not None:
        return hit.copy()
    gram = np.array([[m2, r, sg * r], [r, s * s, sg * s * s], [sg * r, sg * s * s, s * s]])
    geom = Geometry.from_gram(gram, rank=1)
    n = max(2, int(round(p / float(c))))
    E_fp = ar.convert(finite_p_error(ar, f, np.full(gammas.shape, float(c)), gammas, geom, n, diagonal=diagonal))
    W_hat = np.eye(p) + (b - 1.0) * np.outer(e, e)
    if ar.dps is None:
        _seed_rank_one_eig(W_hat, e, b)
    E_ge = general_w_error(f, c, gammas, W_hat, mu, signal="linear", diagonal=diagonal, ctx=ar)["E"]
    if len(_CORRECTION_CACHE) > 32:
        _CORRECTION_CACHE.clear()
    _CORRECTION_CACHE[key] = E_fp - E_ge
    return E_fp - E_ge


def _seed_rank_one_eig(W_hat, e, b):
    """Put the eigendecomposition of W_hat = I + (b − 1)êêᵀ (‖ê‖ = 1) into the eigen cache without an ``eigh``:
    λ = (b, 1, …, 1) with the Householder reflector E = I − 2vvᵀ/vᵀv, v = ê + sign(ê_1)e_1, whose first column is
    ∓ê (E is symmetric and orthogonal, so W_hat = E diag(λ) Eᵀ); the other columns span ê^⊥, where W_hat is I."""
    key = (_digest(W_hat), None)
    if key in _EIG_CACHE:
        return
    v = np.array(e, dtype=float)
    v[0] += 1.0 if v[0] >= 0 else -1.0
    E = np.eye(v.size) - (2.0 / float(v @ v)) * np.outer(v, v)
    lam = np.ones(v.size)
    lam[0] = b
    if len(_EIG_CACHE) > 8:
        _EIG_CACHE.clear()
    _EIG_CACHE[key] = (lam, E)


#: strong-direction corrections already computed (see :func:`strong_direction_correction`)
_CORRECTION_CACHE: dict = {}


def model_error(m, gamma) -> dict:
    r"""E_A(γ) = −γ² F'(γ) of a :class:`GeneralWModel` (or any model with its fields) at the points γ.

    The Dyson fixed point g* = Φ(g*, γ) is solved at each γ from the γ → ∞ start, then
    dg/dγ = (I − ∂Φ/∂g)^{-1} ∂Φ/∂γ and F' = ∂F/∂g·dg/dγ + ∂F/∂γ by complex steps (η = 1e-20).
    Each point is checked as a deterministic equivalent must be (:func:`physical_points`: 0 < γF <= 1,
    (γF)² <= E <= γF, F decreasing, γF and E increasing in γ, cross-checked below γ = 0.1); a point that fails
    (or does not converge) is solved by γ-continuation with warm starts, and one that still fails raises
    :class:`~symattn.errors.ConvergenceError` (docs/theory.md §12.9). A point that passes is the cold-start
    value, unchanged.
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
        'E' and 'F' (arrays), 'iterations' (total), 'residual' (max), 'continued' (the γ solved by
        continuation).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(20))
    >>> bool(np.all(model_error(m, [1.0])["E"] > 0))
    True
    """
    gammas = np.atleast_1d(np.asarray(gamma, dtype=float))
    ar = _ar(m)
    res = [0.0]
    with ar:
        eta = ar.step

        def solve(gi, start):
            # the cold start is the γ → ∞ point diag(1/γ, 1, 1); a warm start (continuation only) runs the same
            # Anderson phase from the previous ladder point (a Newton-only warm start can land on a non-physical branch)
            gm = ar.scalar(gi)
            sol = solve_pencil(m, gm, g0=None if start is None else start[0])
            res[0] = max(res[0], float(sol.residual))
            Hm = None if m.W_traces is m.W else _HOperator(m.W, ar.real(_C(_sigma_pp(m, sol.g))[1]), ar=ar)
            F = resolvent_F(m, sol.g, gm, sol.Hop, Hm)
            return (sol.g, sol.Hop, Hm), float(ar.real(F)), sol.iterations

        def evaluate(gi, state):
            gs, Hop, Hm = state
            gm = ar.scalar(gi)
            J = _jacobian(m, gs, gm, Hop, eta)
            zc = ar.complex(gm, eta * gm)
            dz = ar.imag(pencil_map(m, gs, zc, Hop)[0]).ravel() / (eta * gm)
            dg = ar.solve(np.eye(9) - J, dz)
            Fc = resolvent_F(m, gs + ar.complex(0, eta * gm) * dg.reshape(3, 3), zc, Hop, Hm)
            E = -gm * gm * ar.imag(Fc) / (eta * gm)
            return float(E), float(ar.real(Fc)), (E, ar.real(Fc))

        vals, info = physical_points(gammas.ravel(), solve, evaluate, verify=ar.dps is None)
        E, Fv = (ar.convert(np.array([v[k] for v in vals], dtype=object)).reshape(gammas.shape) for k in (0, 1))
    return {"E": E, "F": Fv, "iterations": info["evaluations"], "residual": res[0], "continued": info["continued"]}


# ---------------------------------------------------------------------------------------------------------------
# Physical checks and γ-continuation (docs/theory.md §12.9)
# ---------------------------------------------------------------------------------------------------------------

#: below this γ a cold-start point is cross-checked against a second point at a larger γ (a requested one within
#: :data:`VERIFY_RATIO`, else one more fixed point at 2γ): the sign-flipped and small-F branches were all seen at γ <= 1e-2
VERIFY_BELOW = 0.1
#: a requested γ' <= VERIFY_RATIO·γ serves as the cross-check of the point at γ
VERIFY_RATIO = 10.0
#: γ steps per decade of the continuation ladder (docs/theory.md §12.9: 8 per decade removed every failure seen)
LADDER_PER_DECADE = 8
#: halvings (in log γ) of a continuation step that fails before giving up
LADDER_BISECT = 6
#: relative slack of the physical inequalities (the fixed point is solved to 1e-13)
PHYSICAL_RTOL = 1e-6


def _physical_reason(gamma, E, F):
    """Why (E, F) at γ cannot be a deterministic equivalent (None when it can). F(γ) = ∫dν/(λ + γ) and
    E(γ) = ∫γ²dν/(λ + γ)² for a probability measure ν on [0, ∞) (‖ŷ‖ = 1), so 0 < γF <= 1 and (γF)² <= E <= γF."""
    tol = PHYSICAL_RTOL
    if F is not None:
        gF = gamma * F
        if not math.isfinite(gF):
            return f"F = {F!r} is not finite"
        if not 0 < gF <= 1 + tol:
            return f"gamma*F = {gF:.6g} outside (0, 1]"
    if E is None:
        return None
    if not math.isfinite(E):
        return f"E = {E!r} is not finite"
    if not -1e-12 <= E <= 1 + 1e-12:
        return f"E = {E:.6g} outside [0, 1]"
    if F is not None and not (gF * gF * (1 - tol) - 1e-12 <= E <= gF * (1 + tol) + 1e-12):
        return f"E = {E:.6g} outside [(gamma*F)^2, gamma*F] = [{gF * gF:.6g}, {gF:.6g}]"
    return None


def _order_reason(g1, E1, F1, g2, E2, F2):
    """Why the points γ1 < γ2 cannot both be on the physical branch (None when they can): F decreasing, γF
    increasing, E non-decreasing and E(γ1) >= (γ1/γ2)² E(γ2) (each E term only when both are known)."""
    tol = PHYSICAL_RTOL
    if F1 < F2 * (1 - tol):
        return f"F({g1:g}) = {F1:.6g} < F({g2:g}) = {F2:.6g} (F must decrease in gamma)"
    if g1 * F1 > g2 * F2 * (1 + tol):
        return f"gamma*F({g1:g}) = {g1 * F1:.6g} > gamma*F({g2:g}) = {g2 * F2:.6g} (gamma*F must increase)"
    if E1 is not None and E2 is not None:
        if E1 > E2 * (1 + tol) + 1e-12:
            return f"E({g1:g}) = {E1:.6g} > E({g2:g}) = {E2:.6g} (E must not decrease in gamma)"
        if E1 < (g1 / g2) ** 2 * E2 * (1 - tol) - 1e-12:
            return f"E({g1:g}) = {E1:.6g} < (gamma1/gamma2)^2 E({g2:g}) (E falls faster than gamma^2)"
    return None


def physical_points(gammas, solve, evaluate, *, verify: bool = True, name: str = "general-W"):
    r"""E and F at the points γ with the physical checks and, where the cold start fails them, γ-continuation.

    Every γ is first solved from the γ → ∞ start (``solve(γ, None)``), as before; the value is kept unchanged
    when it passes the checks of a deterministic equivalent (F(γ) = ∫dν/(λ + γ), E = −γ²F', ν a probability
    measure on [0, ∞)):

    - at the point: E, F finite, 0 < γF <= 1, (γF)² <= E <= γF;
    - against every accepted point at a larger γ': F decreasing, γF increasing, E non-decreasing, and
      E(γ) >= (γ/γ')² E(γ');
    - with ``verify``, below :data:`VERIFY_BELOW` at least one such larger point within a factor
      :data:`VERIFY_RATIO` (a requested one, or one more cold fixed point at 2γ).

    A point that raises or fails a check is solved by continuation: from the nearest accepted larger γ (or a
    cold start at max(1, 10γ)) down a geometric ladder of at least :data:`LADDER_PER_DECADE` steps per decade,
    each fixed point warm-started from the previous one (``solve(γ, state)``), each step checked against the
    previous one (a failing step is halved up to :data:`LADDER_BISECT` times). When the cold value passed the
    point checks and agrees with the continued one to 1e-10 it is returned (the same number as without the
    checks). A point that still fails raises :class:`~symattn.errors.ConvergenceError` with the reasons.

    Parameters
    ----------
    gammas : array_like of float
        γ > 0 (any order, repeats allowed).
    solve : callable
        ``solve(γ, start) -> (state, F, info)``: the fixed point at γ from ``start`` (None: the cold start),
        F there (a float) and the number of evaluations; raises ConvergenceError when it does not converge.
    evaluate : callable
        ``evaluate(γ, state) -> (E, F, value)``: E (float) by the implicit derivative, F, and the value to
        return for the point (any object, e.g. mpmath numbers).
    verify : bool
        Cross-check points below :data:`VERIFY_BELOW` (one more fixed point when no requested γ is near).
    name : str
        The solver's name in the error messages.

    Returns
    -------
    values : list
        ``value`` of each γ, in the order given.
    info : dict
        'evaluations' (summed info), 'continued' (the γ solved by continuation), 'reasons' (why, per γ).

    Examples
    --------
    A toy "fixed point" whose F is the Stieltjes transform of ν = δ_1 (F = 1/(1 + γ), E = γ²/(1 + γ)²):

    >>> solve = lambda g, start: (None, 1 / (1 + g), 1)
    >>> evaluate = lambda g, st: (g * g / (1 + g) ** 2, 1 / (1 + g), g * g / (1 + g) ** 2)
    >>> values, info = physical_points([0.01, 1.0], solve, evaluate)
    >>> [round(v, 6) for v in values], info["continued"]
    ([9.8e-05, 0.25], [])
    """
    gl = [float(g) for g in np.atleast_1d(np.asarray(gammas, dtype=float))]
    accepted = {}          # γ -> (E or None, F, state)
    results = {}           # γ -> value
    reasons = {}
    continued = []
    count = [0]

    def cold(g):
        st, F, k = solve(g, None)
        count[0] += k
        return st, F

    def check_against(g, E, F, pts):
        for g2, (E2, F2, _) in pts.items():
            if g2 > g:
                why = _order_reason(g, E, F, g2, E2, F2)
            elif g2 < g:
                why = _order_reason(g2, E2, F2, g, E, F)
            else:
                continue
            if why:
                return why
        return None

    for g in sorted(set(gl), reverse=True):
        why, cold_value, cold_E = None, None, None
        try:
            st, _ = cold(g)
            E, F, value = evaluate(g, st)
            why = _physical_reason(g, E, F)
            if why is None:
                cold_value, cold_E = value, E
                why = check_against(g, E, F, accepted)
            if why is None and verify and g < VERIFY_BELOW and not any(g < g2 <= VERIFY_RATIO * g for g2 in accepted):
                gr = 2.0 * g
                str_, Fr = cold(gr)
                why = _physical_reason(gr, None, Fr) or _order_reason(g, E, F, gr, None, Fr)
                if why is None:
                    why = check_against(gr, None, Fr, accepted)
                    if why is None:
                        accepted[gr] = (None, Fr, str_)
                else:
                    why = "the cross-check at 2*gamma: " + why
        except (ConvergenceError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError, ValueError) as err:
            why = getattr(err, "reason", None) or str(err)
        if why is None:
            accepted[g] = (E, F, st)
            results[g] = value
            continue
        # γ-continuation from the nearest accepted larger γ (or a cold start at max(1, 10γ))
        reasons[g] = why
        continued.append(g)
        above = [g2 for g2 in accepted if g2 > g]
        if above:
            g0 = min(above)
            _, F0, st0 = accepted[g0]
        else:
            g0 = max(1.0, 10.0 * g)
            try:
                st0, F0 = cold(g0)
            except ConvergenceError as err:
                raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}) and the continuation's "
                                       f"start at gamma = {g0:g} did not converge: {err.reason}",
                                       point={"gamma": g}) from None
            bad = _physical_reason(g0, None, F0)
            if bad:
                raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}) and the continuation's "
                                       f"start at gamma = {g0:g} is not physical: {bad}", point={"gamma": g})
        steps = max(1, int(math.ceil(math.log10(g0 / g) * LADDER_PER_DECADE - 1e-9)))
        ladder = list(np.geomspace(g0, g, steps + 1)[1:])
        ladder[-1] = g
        gp, Fp, stp = g0, F0, st0
        while ladder:
            gk = float(ladder[0])
            bad = None
            try:
                stk, Fk, k = solve(gk, stp)
                count[0] += k
                bad = _physical_reason(gk, None, Fk) or _order_reason(gk, None, Fk, gp, None, Fp)
            except (ConvergenceError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError, ValueError) as err:
                bad = getattr(err, "reason", None) or str(err)
            if bad is None:
                gp, Fp, stp = gk, Fk, stk
                ladder.pop(0)
                continue
            if math.log(gp / gk) < math.log(10.0) / LADDER_PER_DECADE / 2 ** LADDER_BISECT:
                raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}); the gamma-continuation "
                                       f"from {g0:g} stopped at gamma = {gp:g}: the step to {gk:g} failed ({bad})",
                                       point={"gamma": g})
            ladder.insert(0, math.sqrt(gp * gk))
        E, F, value = evaluate(g, stp)
        bad = _physical_reason(g, E, F) or check_against(g, E, F, accepted)
        if bad:
            raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}) and the continued fixed "
                                   f"point is not physical either ({bad})", point={"gamma": g})
        if cold_value is not None and abs(cold_E - E) <= 1e-10 * max(abs(E), 1e-300):
            value = cold_value
        accepted[g] = (E, F, stp)
        results[g] = value
    return [results[g] for g in gl], {"evaluations": count[0], "continued": sorted(continued), "reasons": reasons}
