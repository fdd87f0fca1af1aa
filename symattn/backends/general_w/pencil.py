r"""The general-W pencil and its Dyson equation (docs/theory.md §12.2, §12.3): the model at one c, the
self-energies, the Dyson map on the 3×3 n-traces g, its solve, and F by the Woodbury step for the signal.

With Y = X/√n, K = (a1/c)YᵀWY + D + σÑ (σ = s/√c, Ñ = N/√n), Q = (γ + KᵀYᵀYK)^{-1} is the (x, x) block of the
inverse of the 8-block linear pencil in the unknowns x, u, w (n-space) and t, v, h, g, l (p-space):

  γx + (a1/c)Yᵀg + Dw + σÑᵀw = b,   u − (a1/c)Yᵀl − Dx − σÑx = 0,   w − Yᵀv = 0,
  t − Yx = 0,   v − Yu = 0,   h − Yw = 0,   g − Wᵀh = 0,   l − Wt = 0.

Its random part is linear in Y, Yᵀ and Ñ, whose covariance maps return multiples of the identity, so the
operator-valued Dyson equation G = (L0 − η(G))^{-1} closes on the 3×3 matrix g of normalised traces of the
n-blocks; W enters through the traces of B2^{-1} (:mod:`.hoperator`).

**Signal** (§12.3). Y = Y_Z + μŷᵀ is a rank-one deterministic shift of every Y-slot of the pencil; Woodbury on
the pencil, with the quadratic forms ŷᵀ𝒢_nn ŷ = tr_n, μᵀ𝒢_pp μ (exact p×p solves with μ) and zero n–p cross
forms, gives F (:func:`resolvent_F`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import ParameterError
from ...model import check_mu, check_weights
from ..fixedpoint import Anderson, Newton, StallRestart, fixed_point
from .constants import GeneralWConstants, general_w_constants
from .hoperator import HOperator
from .linalg import FloatArith, arith, forget_digests, model_arith, rmul

__all__ = ["SIGNAL_RULES", "MPMATH_MAX_P", "X_", "U_", "W_", "GeneralWModel", "general_w_model", "sigma_pp",
           "coefficient_matrix", "p_traces", "sigma_nn", "pencil_map", "PencilSolution", "pencil_jacobian",
           "solve_pencil", "resolvent_F"]

#: how the signal enters the kernel: 'latent' (Gaussian-equivalent plus the strong-direction correction
#: of docs/theory.md §12.3, the default), 'linear' (Gaussian-equivalent only), 'conditional' (F_odd(t) for y yᵀ)
SIGNAL_RULES = ("latent", "linear", "conditional")
#: the largest p of the mpmath backend (O(p³) Python-level operations per Dyson evaluation)
MPMATH_MAX_P = 100


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
    ar = arith(ctx)
    forget_digests()   # a new evaluation: W may have changed in place since the last one
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


# index of the n-blocks (x, u, w)
X_, U_, W_ = 0, 1, 2


def sigma_pp(m, g):
    """Σ_pp entries (dict) from the n-traces g (3×3): η restricted to the p-blocks.

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(6))
    >>> S = sigma_pp(m, np.eye(3))
    >>> sorted(S) == sorted(['tg', 'tl', 'tv', 'vg', 'vl', 'vv', 'hg', 'hl', 'hv'])
    True
    """
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


def coefficient_matrix(S):
    """(e, C) from the self-energies Σ_pp (:func:`sigma_pp`): e = 1/(1 − Σ_vv) and C = [[α, β], [γ', δ]] of
    B2 = [[I − αW, −βWᵀ], [−γ'W, I − δWᵀ]] after eliminating v (α = Σ_tl + eΣ_tvΣ_vl, β = Σ_tg + eΣ_tvΣ_vg,
    γ' = Σ_hl + eΣ_hvΣ_vl, δ = Σ_hg + eΣ_hvΣ_vg).

    Examples
    --------
    >>> S = dict(tg=1.0, tl=2.0, tv=0.0, vg=0.0, vl=0.0, vv=0.5, hg=3.0, hl=4.0, hv=0.0)
    >>> e, C = coefficient_matrix(S)
    >>> e, C.tolist()
    (2.0, [[2.0, 1.0], [4.0, 3.0]])
    """
    e, alpha, beta, gam, delta = _coefficients(S)
    return e, np.array([[alpha, beta], [gam, delta]])


def p_traces(m, S, Hop=None, single: bool = False, dP=None):
    """tr_p of the p-blocks G_pp[j, k], j ∈ {g, l, v}, k ∈ {t, v, h} (dict keyed 'jk'), and the
    H operator (a new one at real S, in float32 when ``single``, or ``Hop`` linearised when given).
    ``dP`` (dict keyed 'jk'): added to the traces (the linear response of docs/theory.md §14.9 steps them).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(6))
    >>> P, H = p_traces(m, sigma_pp(m, np.eye(3)))
    >>> len(P), H.T0.shape
    (9, (2, 2))
    """
    e, C = coefficient_matrix(S)
    if Hop is None:
        ar = model_arith(m)
        Hop = HOperator(m.W_traces, ar.real(C), single=single, ar=ar)
    T = Hop.traces(C)
    T1, T2, T3, T4 = T[0, 0], T[0, 1], T[1, 0], T[1, 1]
    P = {"lt": T1, "lh": T2, "gt": T3, "gh": T4,
         "lv": e * (S["tv"] * T1 + S["hv"] * T2), "gv": e * (S["tv"] * T3 + S["hv"] * T4)}
    for k in "tvh":
        P["v" + k] = e * (S["vg"] * P["g" + k] + S["vl"] * P["l" + k]) + (e if k == "v" else 0.0)
    if dP:
        P = {k: P[k] + dP.get(k, 0.0) for k in P}
    return P, Hop


def sigma_nn(m, P, g):
    """Σ_nn (3×3) from the p-traces P and the n-traces g (the Y-part and the elliptic N-part).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(6))
    >>> g = np.eye(3); P, _ = p_traces(m, sigma_pp(m, g))
    >>> sigma_nn(m, P, g).shape
    (3, 3)
    """
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
    return model_arith(m).inv(L0 - Snn[None])


def pencil_map(m, g, z, Hop=None, single: bool = False, dP=None):
    """One evaluation of the Dyson map g ↦ E_κ[(L0(κ) − η(G))^{-1}]_nn (holomorphic in g and z).

    Parameters
    ----------
    m : GeneralWModel
    g : numpy.ndarray
        3×3 n-traces (x, u, w).
    z : float or complex
        γ.
    Hop : HOperator, optional
        The p×p part linearised at another point (complex steps), instead of a new inverse.
    single : bool
        Compute a new inverse in float32 (the far-from-converged phase of :func:`solve_pencil`).
    dP : dict, optional
        Added to the p-traces (:func:`p_traces`).

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
    S = sigma_pp(m, g)
    P, Hop = p_traces(m, S, Hop, single=single, dP=dP)
    Snn = sigma_nn(m, P, g)
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
    """The traces of an H operator linearised with its float32 Jacobian (:meth:`HOperator.J_low`)."""

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


def pencil_jacobian(m, g, z, Hop, eta=None, low: bool = False):
    """∂Φ/∂g (9×9) at real (g, z) by complex steps (η = the arithmetic's ``step``: 1e-20 in float64)
    through the linearised H operator (with ``low``, through its low-precision Jacobian: for Newton
    steps only).

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(6))
    >>> sol = solve_pencil(m, 1.0)
    >>> pencil_jacobian(m, sol.g, 1.0, sol.Hop).shape
    (9, 9)
    """
    ar = model_arith(m)
    eta = ar.step if eta is None else eta
    if isinstance(ar, FloatArith) and np.asarray(g).dtype != object:
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
    ar = model_arith(m)
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
        J = pencil_jacobian(m, g, z, Hop, low=True)
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


def p_response(m, S, H, src):
    """G_pp applied to a p-space source: src = dict block → vector (blocks t, v, h, g, l), each of
    shape (p,) or (p, k) for k sources at once; returns the 5 response vectors (dict)."""
    p = m.p
    e, C = coefficient_matrix(S)
    alpha, beta, gam, delta = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
    zero = np.zeros_like(next(iter(src.values())))
    r = {k: src.get(k, zero) for k in "tvhgl"}
    rt = r["t"] + e * S["tv"] * r["v"] + beta * r["g"] + alpha * r["l"]
    rh = r["h"] + e * S["hv"] * r["v"] + delta * r["g"] + gam * r["l"]
    th = H.apply(C, np.concatenate([rt, rh]))
    t, h = th[:p], th[p:]
    gg = rmul(m.W.T, h) + r["g"]
    ll = rmul(m.W, t) + r["l"]
    v = e * (r["v"] + S["vg"] * gg + S["vl"] * ll)
    return {"t": t, "v": v, "h": h, "g": gg, "l": ll}


def resolvent_F(m, g, z, Hop=None, Hop_mu=None, Gbar=None, dP=None, dforms=None, probes=None):
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
        blocks than §12.2's, e.g. :mod:`symattn.backends.general_w.hermite`); default: this pencil's.
    dP : dict, optional
        Added to the p-traces of this pencil's n-forms (:func:`p_traces`; not with ``Gbar``).
    dforms : dict, optional
        Added to the p-p quadratic forms μᵀ𝒢[j, k]μ, keyed (j, k), j ∈ {g, l, v}, k ∈ {t, v, h}
        (the linear response of docs/theory.md §14.9 steps them).
    probes : numpy.ndarray, optional
        p×k vectors v: also return the readout overlaps βᵀv (β = (Φ/√n)Qŷ is the v-block of the pencil's
        solution with ŷ in the x-row; 𝒢[v, x] = 0, so only the Woodbury term, with vᵀ𝒢[v, ·] on the left).

    Returns
    -------
    float or complex, or (F, βᵀv) with ``probes``

    Examples
    --------
    >>> from symattn import activation
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(10))
    >>> sol = solve_pencil(m, 1.0)
    >>> bool(0 < resolvent_F(m, sol.g, 1.0) < 1)
    True
    """
    if Gbar is None:
        Gbar, parts = pencil_map(m, g, z, Hop, dP=dP)   # E_κ G_nn: the n-n quadratic forms of ŷ, ê
        S, H = parts["S"], parts["H"]
    else:
        S, H = sigma_pp(m, g), None
    F0 = Gbar[X_, X_]
    mu = m.mu
    has_mu = bool(np.any(mu))
    if not has_mu and m.c_yy == 0 and m.c_11 == 0:
        return F0 if probes is None else (F0, np.zeros(np.shape(probes)[1:]))
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
        H = p_traces(m, S)[1]
    if m.W_traces is not m.W and has_mu:
        ar = model_arith(m)
        H = Hop_mu if Hop_mu is not None else HOperator(m.W, ar.real(coefficient_matrix(S)[1]), ar=ar)
    # responses of G_pp to μ-sources in each p-block (5 blocks × 5 outputs)
    resp = {}
    if has_mu:
        # the five sources μ in block b (column j of each source matrix), solved together
        src = {b: np.outer(mu, np.arange(5) == j) for j, b in enumerate("tvhgl")}
        out = p_response(m, S, H, src)
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
        extra = 0.0 if dforms is None else dforms.get((left_blk[1], right_blk[1]), 0.0)
        return mu @ resp[right_blk[1]][left_blk[1]] + extra

    R = len(pieces)
    # Δ = Σ_r A_r B_rᵀ with A_r = (row block, row kind) · coef, B_r = (col block, col kind)
    cap = np.array([[coef * form(cb, ck, rb, rk) for (rb, rk, _, _, coef) in pieces]
                    for (_, _, cb, ck, _) in pieces]) + np.eye(R)
    left = np.array([coef * form("nx", "y", rb, rk) for (rb, rk, _, _, coef) in pieces])
    right = np.array([form(cb, ck, "nx", "y") for (_, _, cb, ck, _) in pieces])
    sol = model_arith(m).solve(cap, right)
    if probes is None:
        return F0 - left @ sol
    # βᵀv = vᵀ𝒢_full[v, x]ŷ: 𝒢[v, x] = 0 (n-p cross), so only the Woodbury term, with vᵀ𝒢[v, ·] on the left
    zero = np.zeros(np.shape(probes)[1:])
    lv = [coef * (probes.T @ resp[rb[1]]["v"]) if rb[0] == "p" else zero for (rb, _, _, _, coef) in pieces]
    return F0 - left @ sol, -np.tensordot(sol, np.array(lv), axes=(0, 0))

