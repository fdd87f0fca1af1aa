r"""The leading terms of E_A and E_LR in the limits of the theory (docs/theory.md §7, §7.6).

:func:`limits` returns one :class:`LimitsResult`: for each limit a :class:`Limit` with the
leading term as a SymPy expression (``form``, with its coefficient ``k``), the coefficient as a
SymPy expression of (c, γ, a1, s², d, 𝔊) where the theory gives one (``coefficient``), its
number at the given parameters (``value``), and the size of the remainder (``remainder``):

========== ============================= ==============================================
limit       E_LR                          E_A
========== ============================= ==============================================
γ → 0       c<1: (1−c)/(1+‖μ‖²);          c<1: the ridgeless value (1 − c at μ = 0);
            c>1: k γ²                     c>1: k √γ
γ → ∞       1 − 2κ/γ, κ = c + ‖μ‖²        1 − 2κ_A/γ (κ_A from the Woodbury output)
c → 0       −γ² d/dγ (1+γ)/(γ(1+γ+‖μ‖²))  μ = 0: 1 − c; with a signal its limit
c → ∞       γ²/c²                         d = 0: √(γ/(γ + 4ν)); d ≠ 0: γ²/(d⁴c²)
μ → 0       the closed form at ‖μ‖² = 0   the bulk error −γ² e1'(γ)
a1 → 0      —                             the theory at a1 = 0 (s², d, 𝔊 fixed)
========== ============================= ==============================================

The symbolic engine underneath expands the systems of :mod:`symattn.systems` themselves:

- :class:`Laurent`, :func:`to_series`: truncated Laurent series with SymPy coefficients;
- :func:`linear_series`: m̃, F_LR and E_LR as series in 1/γ, γ, c or 1/c (undetermined coefficients
  in c γ m̃² + (1 − c + γ) m̃ − 1 = 0);
- :func:`bulk_large_gamma`, :func:`kappa_bulk`, :func:`kappa_attention`, :func:`kappa_linear`: the
  1/γ expansion of the bulk fixed point and of F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e, E = 1 − 2κ/γ + O(γ^{-2});
- :func:`small_gamma_reduction` (c < 1: e1 ≈ A/γ, e2 ≈ Bγ ⇒ A = 1 − c) and
  :func:`sqrt_gamma_reduction` (c > 1: γ = ε², e1 ≈ A/ε, e2 ≈ Bε), with :func:`sqrt_gamma_coefficient`
  the next order that fixes A: E_A ≈ (A/2)√γ, A² = P ∫ dμ_S/(λ(s²P + β0²));
- :func:`large_c_reduction`: λ = 1 + x/√c, c → ∞: μ_S → semicircle, and :func:`semicircle_floor`,
  its closed form √(γ/(γ + 4ν)).

The numbers that no closed form gives (the ridgeless E_A with a signal, the √γ coefficient and
the c → 0 value with a signal) are Richardson extrapolations of the full theory
(:func:`symattn.theory.richardson`), with the expansion the limit claims; ``method`` says which.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from functools import lru_cache

import mpmath
import numpy as np
import sympy as sp

from .errors import ConvergenceError, ParameterError
from .validation import known_keywords
from .model import as_geometry, check_c, check_gamma, kernel_constants
from .systems import attention_system, bulk_system, linear_system
from .systems.attention import TRACE_INTEGRANDS, TRACE_SYMBOLS
from .systems.bulk import BETA, DELTA, Delta, beta
from .systems.closed import mp_moment
from .systems.linear import m_tilde
from .systems.symbols import a1, c, d, e1, e2, e3, gamma, lam, m2, s2

__all__ = ["limits", "LimitsResult", "Limit", "linear_activation", "linear_bulk_error", "kappa_linear", "kappa_bulk",
           "kappa_attention", "semicircle_floor", "sqrt_gamma_coefficient"]

h = sp.Symbol("h", positive=True)        # the small parameter of each expansion
x_sc = sp.Symbol("x", real=True)         # semicircle variable (c → ∞)
nu = sp.Symbol("nu", positive=True)      # ν = a1² + s²
k = sp.Symbol("k")                       # the coefficient of a leading term
theta = sp.Symbol("theta", real=True)    # the scale of μ (μ → θμ, θ → 0)
_C, _GAMMA = c, gamma


def integrate_law(poly: sp.Expr) -> sp.Expr:
    r"""∫ poly(λ) dμ_S for a polynomial in λ, by the moments M_k (:func:`symattn.systems.closed.mp_moment`)."""
    P = sp.Poly(sp.expand(poly), lam)
    return sp.expand(sum(coef * mp_moment(mon[0]) for mon, coef in zip(P.monoms(), P.coeffs())))


# ============================================================================ truncated Laurent series
class Laurent:
    r"""Σ_{k=0}^{N−1} coeffs[k]·h^{v+k} + O(h^{v+N}) with SymPy coefficients (relative precision N)."""

    __slots__ = ("v", "coeffs")
    norm = staticmethod(sp.expand)  # normal form of the coefficients (RationalLaurent: sp.cancel)

    def __init__(self, v: int, coeffs):
        coeffs = [self.norm(x) for x in coeffs]
        while coeffs and coeffs[0] == 0:
            coeffs.pop(0)
            v += 1
        self.v, self.coeffs = v, coeffs

    @property
    def N(self):
        return len(self.coeffs)

    @property
    def top(self):
        """Exponent of the first unknown term."""
        return self.v + self.N

    @classmethod
    def const(cls, x, N):
        return cls(0, [x] + [0] * (N - 1))

    def coeff(self, k: int) -> sp.Expr:
        """Coefficient of h^k (k < top)."""
        if k >= self.top:
            raise ValueError(f"coefficient h^{k} not known (series known to h^{self.top - 1})")
        i = k - self.v
        return self.coeffs[i] if i >= 0 else sp.Integer(0)

    def __add__(self, o):
        if not o.coeffs:
            return self.__class__(min(self.v, o.v), []) if o.v < self.v else self
        if not self.coeffs:
            return o if self.v > o.v else self.__class__(self.v, [])
        v, top = min(self.v, o.v), min(self.top, o.top)
        return self.__class__(v, [self.coeff(k) + o.coeff(k) for k in range(v, top)])

    def __neg__(self):
        return self.__class__(self.v, [-x for x in self.coeffs])

    def __mul__(self, o):
        N = min(self.N, o.N)
        a, b = self.coeffs, o.coeffs
        return self.__class__(self.v + o.v, [sum(a[j] * b[k - j] for j in range(k + 1)) for k in range(N)])

    def inverse(self):
        if not self.coeffs:
            raise ZeroDivisionError("series with no known non-zero coefficient")
        a = self.coeffs
        q = [1 / a[0]]
        for k in range(1, len(a)):
            q.append(self.norm(-sum(a[j] * q[k - j] for j in range(1, k + 1)) / a[0]))
        return self.__class__(-self.v, q)

    def __pow__(self, n: int):
        if n < 0:
            return self.inverse() ** (-n)
        out = self.__class__.const(1, self.N)
        for _ in range(n):
            out = out * self
        return out

    def truncate(self, top: int):
        return self.__class__(self.v, self.coeffs[: max(0, top - self.v)])

    def as_expr(self, var=h):
        return sum(x * var ** (self.v + k) for k, x in enumerate(self.coeffs))


class RationalLaurent(Laurent):
    """Laurent series whose coefficients are kept as cancelled rational functions."""

    __slots__ = ()
    norm = staticmethod(sp.cancel)


def to_series(expr, env: dict, N: int, kind=Laurent) -> Laurent:
    r"""The Laurent series of ``expr`` in h, with ``env`` mapping symbols to :class:`Laurent` series.

    Symbols not in ``env`` are constants; only +, ×, integer powers of series are allowed.
    """
    expr = sp.sympify(expr, strict=True)  # never a string
    if expr in env:
        return env[expr]
    if not (expr.free_symbols & set(env)):
        return kind.const(expr, N)
    if expr.is_Add:
        out = kind.const(0, N)
        for t in expr.args:
            out = out + to_series(t, env, N, kind)
        return out
    if expr.is_Mul:
        out = kind.const(1, N)
        for t in expr.args:
            out = out * to_series(t, env, N, kind)
        return out
    if expr.is_Pow and expr.exp.is_Integer:
        return to_series(expr.base, env, N, kind) ** int(expr.exp)
    raise NotImplementedError(f"cannot expand {expr} as a Laurent series")


def with_intermediates(env: dict, N: int) -> dict:
    """Add β and Δ (the bulk intermediates, docs/theory.md §5) to ``env`` from their definitions."""
    env = dict(env)
    env[beta] = to_series(BETA, env, N)
    env[Delta] = to_series(DELTA, env, N)
    return env


# ============================================================================ the linear system
def _quadratic():
    eq = linear_system().equations[0]
    return sp.expand(eq.lhs - eq.rhs)  # c γ m̃² + (1 − c + γ) m̃ − 1


#: the series of :func:`linear_series`: the substitution and the leading power of m̃
LINEAR_SERIES = {"gamma->oo": ({gamma: 1 / h}, 1), "gamma->0,c<1": ({gamma: h}, 0),
                 "gamma->0,c>1": ({gamma: h}, -1), "c->0": ({c: h}, 0), "c->oo": ({c: 1 / h}, 0)}


@lru_cache(maxsize=None)
def linear_series(param: str, order: int = 3) -> dict:
    r"""Series of m̃, F_LR and E_LR in a small parameter h, from the linear system (docs/theory.md §3).

    ``param``: 'gamma->oo' (γ = 1/h), 'gamma->0,c<1' / 'gamma->0,c>1' (γ = h), 'c->0' (c = h),
    'c->oo' (c = 1/h). m̃ = h^v Σ u_k h^k is found by undetermined coefficients in the quadratic
    (the leading root chosen positive, i.e. the Stieltjes branch at z = −γ < 0; the later ones
    solve linear equations); then F = m/(1 + γ m2 m m̃), m = c m̃ + (1−c)/γ, is expanded as a
    Laurent series and E = −γ² ∂F/∂γ (for γ = 1/h: E = dF/dh; for γ = h: E = −h² dF/dh; for the
    c-series term by term). Returns {'m_tilde', 'F', 'E'} as SymPy expressions in h (truncated).
    """
    if param not in LINEAR_SERIES:
        raise ParameterError("param", param, "one of " + ", ".join(map(repr, LINEAR_SERIES)))
    sub, v = LINEAR_SERIES[param]
    N = order + 2
    u = sp.symbols(f"u0:{N}")
    ansatz = h**v * sum(u[k] * h**k for k in range(N))
    expr = sp.expand(_quadratic().subs(sub).subs(m_tilde, ansatz))
    poly = sp.Poly(sp.expand(sp.numer(sp.together(expr))), h)
    low = min(m[0] for m in poly.monoms())
    sol = {}
    for j in range(N):
        cond = sp.expand(poly.coeff_monomial(h ** (low + j)).subs(sol))
        if j == 0:
            roots = [r for r in sp.solve(cond, u[0]) if r != 0] or [sp.Integer(0)]
            positive = [r for r in roots if sp.simplify(r).is_positive is not False]
            sol[u[0]] = sp.simplify((positive or roots)[0])
        else:  # linear in u_j
            lin = sp.Poly(cond, u[j])
            if lin.degree() != 1:
                raise RuntimeError(f"order {j}: not linear in the coefficient ({lin})")
            sol[u[j]] = sp.factor(-lin.coeff_monomial(1) / lin.coeff_monomial(u[j]))
    R = RationalLaurent
    mt = R(v, [sol[u[j]] for j in range(N)])
    env = {m_tilde: mt}
    one = [1] + [0] * (N - 1)
    if param.startswith("gamma"):
        env[gamma] = R(-1, one) if param == "gamma->oo" else R(1, one)
    else:
        env[c] = R(1, one) if param == "c->0" else R(-1, one)
    lin_sys = linear_system()
    (m_sym, m_def), = lin_sys.definitions.items()
    env[m_sym] = to_series(m_def, env, N, R)
    F = to_series(lin_sys.output, env, N, R)
    Fexpr = F.truncate(F.v + order + 1).as_expr()
    if param == "gamma->oo":
        E = sp.expand(sp.diff(Fexpr, h))
    elif param.startswith("gamma->0"):
        E = sp.expand(-(h**2) * sp.diff(Fexpr, h))
    else:
        E = sp.expand(-(gamma**2) * sp.diff(Fexpr, gamma))
    return {"m_tilde": mt.as_expr(), "F": Fexpr, "E": E}


def linear_bulk_error() -> sp.Expr:
    r"""E_LR at μ = 0 in closed form, a SymPy expression of (c, γ) (docs/theory.md §3).

    .. math::

       E_{LR} = -\gamma^2 \frac{d}{d\gamma}\Big[c\tilde m + \frac{1 - c}{\gamma}\Big],\qquad
       \tilde m = \frac{\sqrt{(1 - c + \gamma)^2 + 4c\gamma} - (1 - c + \gamma)}{2c\gamma}.

    Returns
    -------
    sympy.Expr
        E_LR(c, γ) at ‖μ‖² = 0.

    Examples
    --------
    >>> import symattn as sa
    >>> from symattn.systems.symbols import c, gamma
    >>> E = float(linear_bulk_error().subs({c: 0.5, gamma: 1.0}))
    >>> bool(abs(E - float(sa.memorization_error("tanh", 0.5, 1.0, model="linear"))) < 1e-12)
    True
    """
    b = 1 - c + gamma
    mt = (sp.sqrt(b**2 + 4 * c * gamma) - b) / (2 * c * gamma)
    return sp.simplify(-(gamma**2) * sp.diff(c * mt + (1 - c) / gamma, gamma))


def linear_activation(c, gamma, snr=0.0, dps: int = 30) -> dict:
    r"""The closed form of E_A for the linear activation f(t) = t with w_K = w_Q = 0 (docs/theory.md §7.1).

    Then ΦᵀΦ/n = (XᵀX/n)³/c² exactly, so by partial fractions over the three roots z_k of z³ = −c²γ,

    .. math::

       F = c^2\sum_{k=0}^{2}\frac{F_{LR}(-z_k)}{3z_k^2},\qquad E_A = -\gamma^2\,\frac{\partial F}{\partial \gamma},

    with F_LR(γ′) = m/(1 + γ′‖μ‖² m m̃), m = c m̃ + (1 − c)/γ′ and m̃ the root of
    cγ′m̃² + (1 − c + γ′)m̃ − 1 = 0 that is a Stieltjes transform at z = −γ′ (docs/theory.md §3), continued
    to complex γ′. At μ = 0 this is the law of cS³: E_A = γ²∫dμ_S/(γ + cλ³)².

    Parameters
    ----------
    c, gamma : float
        p/n > 0 and the ridge γ > 0.
    snr : float
        ‖μ‖² >= 0.
    dps : int
        Decimal digits of the mpmath evaluation (the derivative in γ is taken at dps + 15 digits).

    Returns
    -------
    dict
        ``E`` and ``F`` as mpmath numbers.

    Raises
    ------
    ParameterError
        c, γ or snr outside their ranges (c > 0, γ > 0, snr >= 0).

    Examples
    --------
    >>> r = linear_activation(0.5, 1.0, snr=1.0)
    >>> import symattn as sa
    >>> E = sa.memorization_error("linear", 0.5, 1.0, geometry=sa.Geometry(snr=1.0))
    >>> bool(abs(r["E"] - float(E)) < 1e-10)
    True
    """
    cv, gv = float(check_c(c)), float(check_gamma(gamma))
    if gv <= 0:
        raise ParameterError("gamma", gamma, "gamma > 0 (the closed form is of E at a positive ridge)")
    if isinstance(snr, bool) or not np.isfinite(float(snr)) or float(snr) < 0:
        raise ParameterError("snr", snr, "a real number snr >= 0")

    def F_at(g):
        cm, m2 = mpmath.mpf(cv), mpmath.mpf(float(snr))
        total = mpmath.mpc(0)
        r = mpmath.cbrt(cm * cm * g)
        for j in range(3):
            z = r * mpmath.expjpi(mpmath.mpf(2 * j + 1) / 3)
            gp = -z
            b = 1 - cm + gp
            disc = mpmath.sqrt(b * b + 4 * cm * gp)
            roots = [(-b + disc) / (2 * cm * gp), (-b - disc) / (2 * cm * gp)]
            # the Stieltjes branch at −γ′: Im m̃ has the sign of Im(−γ′); on the real axis, the positive root
            if abs(mpmath.im(gp)) > mpmath.mpf(10) ** (-mpmath.mp.dps // 2) * abs(gp):
                mt = max(roots, key=lambda x: mpmath.im(x) * mpmath.im(-gp))
            else:
                mt = max(roots, key=lambda x: mpmath.re(x))
            m = cm * mt + (1 - cm) / gp
            total += m / (1 + gp * m2 * m * mt) / (3 * z * z)
        return mpmath.re(cm * cm * total)

    with mpmath.workdps(dps + 15):
        g = mpmath.mpf(gv)
        F = F_at(g)
        E = -g * g * mpmath.diff(F_at, g)
    with mpmath.workdps(dps):
        return {"E": +E, "F": +F}


# ============================================================================ the bulk system, γ → ∞
@lru_cache(maxsize=None)
def bulk_large_gamma(order: int = 2) -> dict:
    r"""The bulk fixed point as series in h = 1/γ: e1 = Σ_{k≥1} x_k h^k, e2 = Σ_{k≥0} y_k h^k, e3 = Σ_{k≥1} z_k h^k.

    The integrands g_i of the bulk system are expanded (β, Δ through their definitions), each
    coefficient (a polynomial in λ) integrated against μ_S by its moments, and the equations
    e_i = ∫ g_i dμ_S matched order by order. Returns {e1: expr, e2: expr, e3: expr} (in h).
    """
    N = order + 1
    xs = sp.symbols(f"x1:{N + 1}")
    ys = sp.symbols(f"y0:{N + 1}")
    zs = sp.symbols(f"z1:{N + 1}")
    E1, E2, E3 = Laurent(1, list(xs)), Laurent(0, list(ys)), Laurent(1, list(zs))
    env = with_intermediates({e1: E1, e2: E2, e3: E3, gamma: Laurent(-1, [1] + [0] * N)}, N + 1)
    series = [to_series(g, env, N + 1) for g in bulk_system().integrands]
    sol = {}
    for j in range(0, order + 1):
        unknown = ([xs[j - 1]] if j >= 1 else []) + [ys[j]] + ([zs[j - 1]] if j >= 1 else [])
        cond = [sp.expand(E.coeff(j).subs(sol) - integrate_law(S.coeff(j).subs(sol)))
                for E, S in zip((E1, E2, E3), series)]
        r = sp.solve(cond, unknown, dict=True)
        if len(r) != 1:
            raise RuntimeError(f"order {j}: expected one solution, got {r}")
        sol.update({key: sp.expand(val) for key, val in r[0].items()})
    return {sym: sp.expand(ser.truncate(order + 1).as_expr().subs(sol)) for sym, ser in ((e1, E1), (e2, E2), (e3, E3))}


@lru_cache(maxsize=None)
def kappa_bulk() -> sp.Expr:
    r"""κ_bulk with e1 = F_bulk = h − κ h² + O(h³), i.e. E_A = 1 − 2κ/γ + O(γ^{-2}) at μ = 0 (docs/theory.md §7.4).

    .. math::

       \kappa_{\rm bulk} = s^2 + a_1^2\Big(1 + \frac1c\Big) + 2a_1d + cd^2.

    Returns
    -------
    sympy.Expr
        κ_bulk in (a1, s², d, c), from the 1/γ series of the bulk system.

    Examples
    --------
    >>> from symattn.systems.symbols import a1, c, d, s2
    >>> sp.expand(kappa_bulk() - (s2 + a1**2 * (1 + 1 / c) + 2 * a1 * d + c * d**2))
    0
    """
    return sp.factor(-bulk_large_gamma(2)[e1].coeff(h, 2))


@lru_cache(maxsize=None)
def kappa_attention(rank: int = 1) -> sp.Expr:
    r"""κ_A(c, a1, s², d, 𝔊) with F = h − κ h² + O(h³) for the attention system (E = 1 − 2κ/γ + …;
    docs/theory.md §7.4), a SymPy expression in the Gram entries of (μ, w_K, w_Q) of rank ``rank``.

    The nine traces are expanded to O(h²) at the bulk series; Γ is affine in the traces, so
    Γ = Γ0 + hΓ1 + h²Γ2 with Γ0 = Γ|_{T=0}. Since e = Γ[:, b0] = O(h),
    F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e = hΓ1[b0,b0] + h²(Γ2[b0,b0] − e1ᵀĈ(I + Γ0Ĉ)^{-1}e1) + O(h³).

    Parameters
    ----------
    rank : int
        The number r >= 1 of weight pairs (w_K, w_Q).

    Returns
    -------
    sympy.Expr
        κ_A in (a1, s², d, c) and the Gram symbols 𝔊_kl of (μ, w_K, w_Q).

    Examples
    --------
    >>> from symattn.systems.symbols import gram_symbols
    >>> G = gram_symbols(1)
    >>> at0 = kappa_attention(1).subs({g: 0 for g in G})          # μ = w = 0: the bulk κ
    >>> sp.simplify(at0 - kappa_bulk())
    0
    """
    sys_ = attention_system(rank)
    bulk = bulk_large_gamma(2)
    N = 3
    env = {sym: Laurent(0, [bulk[sym].coeff(h, j) for j in range(N)]) for sym in (e1, e2, e3)}
    env[gamma] = Laurent(-1, [1, 0, 0])
    env = with_intermediates(env, N)
    Tk = {}
    for T, g in zip(TRACE_SYMBOLS, TRACE_INTEGRANDS):
        ser = to_series(g, env, N)
        if ser.v < 1 and ser.coeff(0) != 0:
            raise RuntimeError(f"trace {T} has an O(1) term")
        Tk[T] = [integrate_law(ser.coeff(j)) for j in (1, 2)]
    Gam = sys_.Gamma
    G0 = Gam.subs({T: 0 for T in TRACE_SYMBOLS})
    G1 = sum((Gam.diff(T) * Tk[T][0] for T in TRACE_SYMBOLS), sp.zeros(*Gam.shape))
    G2 = sum((Gam.diff(T) * Tk[T][1] for T in TRACE_SYMBOLS), sp.zeros(*Gam.shape))
    if any(sp.expand(x) != 0 for x in G0[:, 0]):
        raise RuntimeError("e = Γ[:, b0] has an O(1) part")
    if sp.simplify(G1[0, 0] - 1) != 0:
        raise RuntimeError(f"F = h + ... expected, got Γ1[b0,b0] = {G1[0, 0]}")
    Ch = sys_.C_hat
    ev = G1[:, 0]
    A0 = sp.eye(Gam.shape[0]) + G0 * Ch
    F2 = G2[0, 0] - (ev.T * Ch * A0.LUsolve(ev))[0, 0]
    return sp.factor(sp.expand(-F2))


@lru_cache(maxsize=None)
def kappa_linear() -> sp.Expr:
    r"""κ_LR with E_LR = 1 − 2κ/γ + O(γ^{-2}), from the 1/γ series of the linear system (docs/theory.md §7.4).

    .. math::

       \kappa_{LR} = c + \|\mu\|^2.

    Returns
    -------
    sympy.Expr
        κ_LR in (c, ‖μ‖²).

    Examples
    --------
    >>> kappa_linear()
    c + m_2
    """
    E = linear_series("gamma->oo", order=1)["E"]
    return sp.factor(-E.coeff(h, 1) / 2)


# ============================================================================ γ → 0
def _leading(expr, env, N=2):
    ser = to_series(expr, env, N)
    return ser.v, sp.factor(ser.coeff(ser.v)) if ser.coeffs else sp.Integer(0)


@lru_cache(maxsize=None)
def small_gamma_reduction() -> dict:
    r"""Leading order of the bulk system as γ → 0 for c < 1 (ansatz e1 = A/γ, e2 = Bγ, e3 = C).

    On λ > 0, γ g1 → L1(λ), g2/γ → L2(λ); at the atom λ = 0 (mass 1 − c), γ g1 → 1/(1 + s²B) and
    g2/γ → 0. The two equations are A = (1−c)/(1+s²B) + ∫_{λ>0} L1 and B = ∫_{λ>0} L2. If
    L1/L2 = r does not depend on λ, then A = (1−c)/(1+s²B) + r B. Returns the pieces and the
    solution A (the limit of E_A = −γ² e1' = A).
    """
    A, B, C = sp.symbols("A B C", positive=True)
    lp = sp.Symbol("lambda_p", positive=True)
    env0 = {e1: Laurent(-1, [A, 0]), e2: Laurent(1, [B, 0]), e3: Laurent(0, [C, 0]), gamma: Laurent(1, [1, 0])}
    g1, g2, _ = bulk_system().integrands
    env = with_intermediates(env0, 2)
    # λ > 0: replace λ by a positive symbol so that the leading coefficients are non-zero
    envp = {key: Laurent(v.v, [x.subs(lam, lp) for x in v.coeffs]) for key, v in env.items()}
    v1, L1 = _leading(g1.subs(lam, lp), envp)
    v2, L2 = _leading(g2.subs(lam, lp), envp)
    env_atom = {key: Laurent(v.v, [x.subs(lam, 0) for x in v.coeffs]) for key, v in env.items()}
    va, atom1 = _leading(g1.subs(lam, 0), env_atom)
    ratio = sp.simplify(L1 / L2)
    sol = sp.solve(sp.Eq(A, (1 - c) * atom1 + ratio * B), A)
    return {"orders": (v1, v2, va), "L1": L1, "L2": L2, "atom": atom1, "ratio": ratio,
            "ratio_depends_on_lambda": ratio.has(lp), "A": sp.simplify(sol[0]) if sol else None}


@lru_cache(maxsize=None)
def sqrt_gamma_reduction() -> dict:
    r"""Leading order of the bulk system as γ → 0 for c > 1 (γ = ε², e1 = A/ε, e2 = Bε, e3 = C).

    With no atom (c > 1): ε g1 → s²A/D, g2/ε → s²B/D, g3 → β0/D, D(λ) = s⁴AB + β0², β0 = β at
    e3 = C. Both first equations reduce to 1 = s² ∫ dμ_S/D (only the product AB is fixed at this
    order; :func:`sqrt_gamma_coefficient` takes the next one). Returns {'L1','L2','L3','same_equation', …}.
    """
    A, B, C = sp.symbols("A B C", positive=True)
    lp = sp.Symbol("lambda_p", positive=True)
    env = {e1: Laurent(-1, [A, 0]), e2: Laurent(1, [B, 0]), e3: Laurent(0, [C, 0]), gamma: Laurent(2, [1, 0])}
    env = with_intermediates(env, 2)
    env = {key: Laurent(v.v, [x.subs(lam, lp) for x in v.coeffs]) for key, v in env.items()}
    g1, g2, g3 = (g.subs(lam, lp) for g in bulk_system().integrands)
    v1, L1 = _leading(g1, env)
    v2, L2 = _leading(g2, env)
    v3, L3 = _leading(g3, env)
    P = sp.Symbol("P", positive=True)
    eq1 = sp.simplify((L1 / A).subs(B, P / A))
    eq2 = sp.simplify((L2 / B).subs(B, P / A))
    return {"orders": (v1, v2, v3), "L1": L1, "L2": L2, "L3": L3, "per_unit_1": eq1, "per_unit_2": eq2,
            "same_equation": sp.simplify(eq1 - eq2) == 0, "P": P, "C": C}


#: the unknowns of the reduced c > 1 system: P = lim (γ + s²e2)e1, C = lim e3
P_red, C_red = sp.symbols("P C", real=True)
#: β0(λ) = √c(a1(λ − 1) + d) − s²C and X(λ) = s²P + β0² (Δ = w + λX, w = γ + s²e2 → 0)
BETA0 = BETA.subs(e3, C_red)
X_RED = s2 * P_red + BETA0**2


def sqrt_gamma_coefficient() -> dict:
    r"""The √γ law for c > 1 at μ = 0: E_A = k√γ + O(γ^{3/2}), k = A/2, A² = P ∫ dμ_S/(λ X).

    In the regular unknowns of docs/theory.md §5.7 (P = w e1, w = γ + s²e2, e3), Δ = w + λX with
    X = s²P + β0². To first order in w (no atom: ∫ dμ_S/λ = c/(c − 1) is finite),
    P = ∫(1 − λβ²/Δ) = s²P J + w K1 and w − γ = s²w J − s²w² L, with J = ∫ dμ_S/X,
    K1 = ∫ β0²/(λX²) dμ_S, L = ∫ dμ_S/(λX²). Eliminating s²J − 1 = −wK1/P gives
    w² (K1/P + s²L) = γ, i.e. e1 = P/w = A/√γ with A² = PK1 + s²P²L = P ∫ dμ_S/(λX), and
    E_A = −γ² e1' = (A/2)√γ. (P, C) solve the reduced equations 1 = s² ∫ dμ_S/X and
    C = ∫ β0/X dμ_S. Returns the SymPy pieces: {'k', 'equations', 'integrands'}, the integrals
    written as ``sp.Integral`` over μ_S (c > 1: no atom; docs/theory.md §7.6).

    .. math::

       E_A = k\sqrt \gamma  + O(\gamma^{3/2}),\qquad k = \frac12\sqrt{P\int\frac{d\mu_S(\lambda)}{\lambda\,(s^2P + \beta_0^2)}}.

    Returns
    -------
    dict
        ``k`` (the coefficient, with the integrals as ``sympy.Integral`` over μ_S), ``equations`` (the reduced
        system of (P, C)) and ``integrands`` (of J, C and A²).

    Examples
    --------
    >>> sorted(sqrt_gamma_coefficient())
    ['equations', 'integrands', 'k']
    """
    from .systems.marchenko_pastur import density, edge_minus, edge_plus

    def law(g):
        return sp.Integral(g * density, (lam, edge_minus, edge_plus))

    kcoef = sp.sqrt(P_red * law(1 / (lam * X_RED))) / 2
    eqs = [sp.Eq(s2 * law(1 / X_RED), 1), sp.Eq(law(BETA0 / X_RED), C_red)]
    return {"k": kcoef, "equations": eqs, "integrands": (1 / X_RED, BETA0 / X_RED, 1 / (lam * X_RED))}


#: nodes of the first midpoint rule of the √γ law (float64), doubled until the coefficient settles, up to the last
SQRT_GAMMA_NODES = (512, 2**16)


def _law_nodes(cv, dps, m=None):
    r"""Nodes and weights of ∫ g dμ_S for c > 1: λ = α + β cos θ, dμ_S = c β² sin²θ/(2πλ) dθ, the midpoint
    rule in θ with ``m`` nodes (spectral: the integrand is even and smooth in θ, and the error falls like
    e^{−2mδ}, δ the distance in θ of the nearest complex pole, which is small when s² is: the poles of 1/X
    are at λ0 ± i√(s²P)/(√c a1)); float64 (``dps`` None) or mpmath."""
    if dps is None:
        m = m or SQRT_GAMMA_NODES[0]
        t = (np.arange(m) + 0.5) * np.pi / m
        al, be = 1 + 1 / cv, 2 / np.sqrt(cv)
        lv = al + be * np.cos(t)
        return lv, cv * be**2 * np.sin(t) ** 2 / (2 * np.pi * lv) * (np.pi / m)
    m = m or 64 + 12 * dps
    cv = mpmath.mpf(cv)
    al, be = 1 + 1 / cv, 2 / mpmath.sqrt(cv)
    t = [(j + mpmath.mpf(1) / 2) * mpmath.pi / m for j in range(m)]
    lv = np.array([al + be * mpmath.cos(x) for x in t], dtype=object)
    w = np.array([cv * be**2 * mpmath.sin(x) ** 2 / (2 * mpmath.pi * y) * (mpmath.pi / m) for x, y in zip(t, lv)],
                 dtype=object)
    return lv, w


def _sqrt_gamma_value(a1v, s2v, dv, cv, dps=None):
    """k of :func:`sqrt_gamma_coefficient` at numbers, or None when the reduced system has no root P > 0.

    Newton in (P, C) on 1 = s²∫dμ_S/X, C = ∫β0/X dμ_S (analytic Jacobian, P kept positive); float64
    (``dps`` None) or mpmath at ``dps`` digits. None means P → 0: ``M`` has a gap at 0 (E_A = O(γ²)).
    The midpoint rule of :func:`_law_nodes` doubles its nodes until k changes by less than 10⁻¹³
    (float64) or 10^{−dps} relative; ConvergenceError when it has not settled past 2¹⁶ (2¹⁴) nodes (for
    sigmoid, s² = 7e-4, 512 nodes gave k 1e-3 off at c = 3; 2048 nodes are exact).
    """
    m0, top = (SQRT_GAMMA_NODES[0], SQRT_GAMMA_NODES[1]) if dps is None else (64 + 12 * dps, 2**14)
    tol = 1e-13 if dps is None else mpmath.mpf(10) ** (-dps)
    with mpmath.workdps((dps or 15) + 5):
        k, m = _sqrt_gamma_newton(a1v, s2v, dv, cv, dps, m0), m0
        while m < top:
            m *= 2
            k2 = _sqrt_gamma_newton(a1v, s2v, dv, cv, dps, m)
            if k is None or k2 is None:
                if k is None and k2 is None:
                    return None
            elif abs(k2 - k) <= tol * abs(k2):
                return k2
            k = k2
    raise ConvergenceError(f"the √γ coefficient did not settle with {m} quadrature nodes", iterations=m)


def _sqrt_gamma_newton(a1v, s2v, dv, cv, dps, m=None):
    lv, w = _law_nodes(cv, dps, m)
    one = mpmath.mpf(1) if dps is not None else 1.0
    a1v, s2v, dv = (one * v for v in (a1v, s2v, dv))
    b = (one * cv) ** 0.5 * (a1v * (lv - 1) + dv) if dps is None else mpmath.sqrt(cv) * (a1v * (lv - 1) + dv)
    P, C = one, 0 * one
    tol = 1e-14 if dps is None else mpmath.mpf(10) ** (-dps)
    for _ in range(200):
        b0 = b - s2v * C
        X = s2v * P + b0 * b0
        r1 = s2v * np.sum(w / X) - 1
        r2 = np.sum(w * b0 / X) - C
        X2 = X * X
        J = [[-s2v * s2v * np.sum(w / X2), 2 * s2v * s2v * np.sum(w * b0 / X2)],
             [-s2v * np.sum(w * b0 / X2), np.sum(w * (2 * s2v * b0 * b0 - s2v * X) / X2) - 1]]
        det = J[0][0] * J[1][1] - J[0][1] * J[1][0]
        dP = (r1 * J[1][1] - r2 * J[0][1]) / det
        dC = (J[0][0] * r2 - J[1][0] * r1) / det
        step = one
        while P - step * dP <= 0:
            step /= 2
            if step < 1e-12:
                return None  # P → 0: no root P > 0
        P, C = P - step * dP, C - step * dC
        if abs(dP) <= tol * abs(P) and abs(dC) <= tol * max(one, abs(C)):
            break
    else:
        return None
    b0 = b - s2v * C
    A2 = P * np.sum(w / (lv * (s2v * P + b0 * b0)))
    return (A2**0.5 if dps is None else mpmath.sqrt(A2)) / 2


# ============================================================================ c → ∞
@lru_cache(maxsize=None)
def large_c_reduction() -> dict:
    r"""λ = 1 + x/√c, c → ∞ (u = 1/√c → 0) in the bulk system with d = 0.

    Returns the limit density (semicircle √(4−x²)/(2π) expected) and the limits of the three
    integrands: g1 → (1 + s²e1)/D, g2 → (γ + s²e2)/D, g3 → β/D, D = (γ + s²e2)(1 + s²e1) + β²,
    β = a1 x − s² e3.
    """
    from .systems.marchenko_pastur import density

    u = sp.Symbol("u", positive=True)
    dens = sp.limit(sp.simplify((density.subs(lam, 1 + x_sc * u) * u).subs(c, 1 / u**2)), u, 0)
    lims = []
    for g in bulk_system().integrands:
        expr = g.subs(Delta, DELTA).subs(beta, BETA).subs({d: 0, lam: 1 + x_sc * u}).subs(c, 1 / u**2)
        lims.append(sp.simplify(sp.limit(expr, u, 0)))
    return {"density": sp.simplify(dens), "g": lims}


def semicircle_floor() -> sp.Expr:
    r"""E_∞ = γ² ∫ ρ_sc(x) dx/(νx² + γ)² = √(γ/(γ + 4ν)), the c → ∞ limit of E_A for d = 0.

    With g(z) = (z − √(z² − 4))/2, ∫ ρ_sc/(x² + a²) = (g(−ia) − g(ia))/(2ia) = (√(a² + 4) − a)/(2a);
    its derivative in a² = γ/ν gives ∫ ρ_sc/(x² + a²)² = 1/(a³√(a² + 4)), and E_∞ = γ²/ν² times it
    (docs/theory.md §7.5):

    .. math::

       E_\infty  = \gamma^2\int\frac{\rho_{sc}(x)\,dx}{(\nu x^2 + \gamma)^2} = \sqrt{\frac{\gamma}{\gamma  + 4\nu}}.

    Returns
    -------
    sympy.Expr
        E_∞ in (γ, ν), ν = a1² + s².

    Examples
    --------
    >>> semicircle_floor()
    sqrt(gamma)/sqrt(gamma + 4*nu)
    """
    return sp.sqrt(gamma / (gamma + 4 * nu))


# ============================================================================ the public result
@dataclass(frozen=True)
class Limit:
    r"""One leading term: E = ``form`` + ``remainder`` as ``variable`` → ``point`` (docs/theory.md §7.6).

    Attributes
    ----------
    name : str
        'gamma->0', 'gamma->oo', 'c->0', 'c->oo', 'mu->0' or 'a1->0'.
    model : str
        'attention' (E_A) or 'linear' (E_LR).
    variable : sympy.Symbol
        The parameter that tends to its limit: γ, c, θ (μ → θμ) or a1.
    point : sympy.Expr
        0 or ``sympy.oo``.
    form : sympy.Expr
        The leading term in ``variable`` and the coefficient symbol ``k`` (e.g. ``k*sqrt(gamma)``,
        ``1 - 2*k/gamma``).
    coefficient : sympy.Expr or None
        k as a SymPy expression of c, γ, a1, s², d, ‖μ‖² and the Gram symbols, where the theory
        gives one in closed form (or as the integrals of a reduced system); None otherwise.
    value : float or mpmath.mpf
        k at the parameters of :func:`limits`.
    remainder : sympy.Expr
        The order of what the leading term leaves out, a ``sympy.O``.
    method : str
        How ``value`` was obtained: 'closed form', 'reduced system' (a reduced system solved
        numerically), 'theory' (the full theory at the limit's parameters) or 'extrapolated'
        (Richardson extrapolation of the full theory with the expansion the limit claims).
    note : str
        Where the term holds, in words.

    Examples
    --------
    >>> lim = limits("tanh", c=0.5, gamma=1.0, which="gamma->oo")
    >>> term = lim.linear["gamma->oo"]
    >>> term.form, term.coefficient, term.value
    (1 - 2*k/gamma, c + m_2, 0.5)
    >>> float(term.leading(100.0))                       # 1 − 2κ/γ at γ = 100
    0.99
    """

    name: str
    model: str
    variable: sp.Symbol
    point: sp.Expr
    form: sp.Expr
    coefficient: sp.Expr | None
    value: object
    remainder: sp.Expr
    method: str
    note: str = ""

    @property
    def expr(self) -> sp.Expr:
        """The leading term with its coefficient: ``form`` with k = ``coefficient`` (or the value)."""
        return self.form.subs(k, self.coefficient if self.coefficient is not None else sp.Float(float(self.value)))

    def leading(self, t):
        """The number of the leading term at ``variable`` = t (with k = ``value``)."""
        fn = sp.lambdify((self.variable, k), self.form, "mpmath")
        return fn(t, self.value)


@dataclass
class LimitsResult:
    r"""The leading terms of E_A and E_LR in every limit of :func:`limits`, at one parameter set.

    Attributes
    ----------
    attention, linear : dict
        Limit name → :class:`Limit` of E_A (docs/theory.md §6) and of E_LR (§3). 'gamma->0' is the
        value (c < 1) or the rate (c > 1; absent at c = 1).
    parameters : dict
        The activation, its constants a1, s², d, ν, c, γ, the Gram matrix, backend and dps.

    Examples
    --------
    >>> lim = limits("tanh", c=2.0, gamma=0.1, which=("gamma->0", "c->oo"))
    >>> sorted(lim.attention), lim.attention["gamma->0"].form
    (['c->oo', 'gamma->0'], sqrt(gamma)*k)
    >>> sorted(lim["c->oo"])
    ['attention', 'linear']
    """

    attention: dict = field(default_factory=dict)
    linear: dict = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)

    def __getitem__(self, key):
        """``result["gamma->oo"]`` is {'attention': Limit, 'linear': Limit} (the models that have it)."""
        out = {m: getattr(self, m)[key] for m in ("attention", "linear") if key in getattr(self, m)}
        if not out:
            raise KeyError(key)
        return out

    def table(self) -> list:
        """Rows (model, name, form with k, value, remainder, method) for printing."""
        return [(m, t.name, str(t.form), float(t.value) if t.value is not None else None, str(t.remainder), t.method)
                for m in ("attention", "linear") for t in getattr(self, m).values()]


#: the smallest parameter of the extrapolations (γ for the √γ law, c for c → 0) and the ratio between points
EXTRAPOLATION_START = {"sqrt-gamma": 1e-4, "c->0": 1e-3}
#: how many times an extrapolation's points move up by a factor 10 when one fails or the estimate does not settle
LADDER_RUNGS = 3


def _ladder(value_at, t0, powers, extrapolate, ratio=10.0, rungs=LADDER_RUNGS):
    r"""The Richardson extrapolation to t → 0 of ``value_at(t)`` at t_j = t0·ratio^{s−j}, j = 0..len(powers).

    The points are the limit's own, not the user's: the smallest are the hardest for the solver (near the
    hard edge at γ → 0, or c → 0). When one fails (ConvergenceError) or the estimate does not settle, the
    ladder moves up one rung (s = 1, …, ``rungs``), reusing the points it has; the points are solved from
    the largest down, so at most one failing point is tried per rung. ConvergenceError when no rung works.
    """
    known, failed, last = {}, set(), None
    J = len(powers)
    for rung in range(rungs + 1):
        keys = [rung - j for j in range(J + 1)]   # t = t0·ratio^key, largest first
        if failed & set(keys):
            continue
        try:
            for key in keys:
                if key not in known:
                    try:
                        known[key] = value_at(t0 * ratio**key)
                    except ConvergenceError:
                        failed.add(key)
                        raise
            return extrapolate([known[key] for key in keys])
        except ConvergenceError as exc:
            last = exc
    raise last


def _num(ctx, v):
    return ctx.scalar(v)


def _subs_value(expr, values, ctx):
    """A SymPy expression at numbers: float, or mpmath at the context's digits."""
    return ctx.scalar(str(sp.N(expr.subs(values), ctx.digits + 5)))


#: the limits of :func:`limits`, in order
LIMITS = ("gamma->0", "gamma->oo", "c->0", "c->oo", "mu->0", "a1->0")


@known_keywords
def limits(f="tanh", c=0.5, gamma=1.0, geometry=None, diagonal: str = "f", backend: str = "numpy",
           dps: int | None = None, which=None) -> LimitsResult:
    r"""The leading terms of E_A and E_LR in the limits γ → 0, γ → ∞, c → 0, c → ∞, μ → 0 and a1 → 0.

    Each term is a SymPy expression and a number (docs/theory.md §7, §7.6):

    - γ → 0, c < 1: E → k, the ridgeless value: k_LR = (1 − c)/(1 + ‖μ‖²), k_A = 1 − c at
      μ = w = 0 (rank Φ = p), else :func:`symattn.memorization_error` at γ = 0; remainder O(γ²).
    - γ → 0, c > 1: E_A ≈ k√γ, k = A/2, A² = P ∫ dμ_S/(λ(s²P + β0²)) with (P, C) the reduced
      system (μ = 0; with a signal the extrapolation of E_A/√γ); E_LR ≈ kγ²,
      k = c(c² + ‖μ‖²)/((c − 1)³(c + ‖μ‖²)²). Remainders O(γ^{3/2}) and O(γ³).
    - γ → ∞: E = 1 − 2κ/γ + O(γ^{-2}), κ_LR = c + ‖μ‖², κ_A from the 1/γ series of the Woodbury output.
    - c → 0 (γ fixed): E_LR → −γ² d/dγ[(1 + γ)/(γ(1 + γ + ‖μ‖²))]; E_A = 1 − c + O(c²) at μ = 0,
      and E_A → k + O(c) with a signal (extrapolated).
    - c → ∞ (γ fixed): E_LR ≈ γ²/c²; E_A → √(γ/(γ + 4ν)) + O(1/c) for d = 0 (the free convolution
      of the semicircles a1W and sG), E_A ≈ γ²/(d⁴c²) for d ≠ 0.
    - μ → 0 (μ → θμ, w fixed): E → E(μ = 0) + O(θ²) (E is even in μ); E_A(μ = 0) is the bulk
      error −γ² e1'(γ) for every w (docs/theory.md §6.8).
    - a1 → 0 (s², d, 𝔊 fixed; E_A only): E_A → E_A(a1 = 0) + O(a1²) for d = 0 (E is even in a1:
      K → −K), + O(a1) otherwise.

    Parameters
    ----------
    f : str, sympy expression, callable or Activation
        The activation (its constants a1, s², d; docs/theory.md §1.2).
    c : float
        p/n: the ratio of the γ-limits (and the c of μ → 0, a1 → 0).
    gamma : float
        The ridge of the c-limits, μ → 0 and a1 → 0.
    geometry : Geometry, dict or None
        The Gram matrix of (μ, w_K, w_Q); None means μ = w = 0.
    diagonal : {'f', 'zero'}
        The kernel's diagonal is f (giving d) or zero (d = 0).
    backend : {'numpy', 'mpmath'}
        The numbers in float64, or as mpmath numbers at ``dps`` digits (default 30).
    dps : int, optional
        Digits of the mpmath backend.
    which : sequence of str, optional
        The limits to compute (names of :data:`LIMITS`); default all.

    Returns
    -------
    LimitsResult
        ``.attention`` and ``.linear``: limit name → :class:`Limit`.

    Raises
    ------
    ParameterError
        c, γ, the geometry or a name of ``which`` outside its range ('gamma->0' asked at c = 1); a
        :class:`~symattn.errors.KeywordError` for an unknown keyword, with the nearest.
    ConvergenceError
        A limit that could not be computed although its own points (the extrapolations' γ or c) were moved
        up :data:`LADDER_RUNGS` times where the solver failed; the message names your inputs and the limit.

    Examples
    --------
    >>> import symattn as sa
    >>> lim = sa.limits("tanh", c=0.5, gamma=1.0, which=("gamma->0", "c->oo"))
    >>> lim.attention["gamma->0"].value, lim.linear["gamma->0"].coefficient
    (0.5, -(c - 1)/(m_2 + 1))
    >>> lim.linear["c->oo"].form, lim.linear["c->oo"].coefficient
    (k/c**2, gamma**2)
    >>> lim.attention["c->oo"].coefficient, round(float(lim.attention["c->oo"].value), 6)   # tanh: d = 0
    (sqrt(gamma)/sqrt(gamma + 4*nu), 0.622914)
    """
    from . import accuracy, layer, theory
    from .activations.activation import activation as _activation
    from .backends.context import context

    cv = float(check_c(c))
    gv = float(check_gamma(gamma))
    asked = which is not None   # a limit asked for by name that does not exist here is an error; all: skipped
    which = LIMITS if which is None else ((which,) if isinstance(which, str) else tuple(which))
    for name in which:
        if name not in LIMITS:
            raise ParameterError("which", name, "names of " + ", ".join(LIMITS))
    c, gamma = _C, _GAMMA  # from here on the SymPy symbols
    geom = as_geometry(geometry)
    act = _activation(f)
    ctx = context(backend, dps)
    kc = kernel_constants(act, diagonal=diagonal, dps=ctx.dps)
    G = attention_system(geom.rank).gram
    vals = {a1: kc.a1, s2: kc.s2, d: kc.d, c: cv, gamma: gv, m2: geom.snr, nu: kc.s2 + kc.a1**2}
    vals.update({G[i, j]: float(geom.gram[i, j]) for i in range(G.shape[0]) for j in range(G.shape[0])})
    solve_kw = dict(geometry=geom, diagonal=diagonal, backend=backend, dps=dps)
    out = LimitsResult(parameters={"activation": act.name, "a1": kc.a1, "s2": kc.s2, "d": kc.d, "nu": kc.s2 + kc.a1**2,
                                   "c": cv, "gamma": gv, "geometry": geom.gram.tolist(), "diagonal": diagonal,
                                   "backend": backend, "dps": ctx.dps})

    def add(model, name, variable, point, form, coef, value, remainder, method, note=""):
        getattr(out, model)[name] = Limit(name, model, variable, point, form, coef, value, remainder, method, note)

    solved = {}   # the theory at the limits' own points, each solved once (two laws may share them)

    def E_of(model, cs, gs, **kw):
        key = (model, repr(cs), repr(gs), repr(sorted(kw.items())))
        if key not in solved:
            solved[key] = np.asarray(layer.memorization_error(act, cs, gs, model=model,
                                                              **dict(solve_kw, **kw))).reshape(-1)
        return solved[key]

    def extrapolate(values, ratio, powers, what):
        est, err = theory.richardson(values, ratio, powers)
        tol = max(1e-8, ctx.richardson_tol)  # 1e-8 at float64, 10^{8−dps} in mpmath
        if float(err) > tol * max(1.0, abs(float(est))):
            raise ConvergenceError(f"the {what} extrapolation did not converge (error estimate {float(err):.2g})",
                                   point={"c": cv, "gamma": gv})
        return est[()] if np.ndim(est) == 0 and isinstance(est, np.ndarray) else est

    stage = None   # the limit being computed: a failure names it with the user's inputs
    try:
        with ctx, accuracy.internal():   # the limits' own points: no AccuracyWarning about them
            # -- γ → 0
            stage = "gamma->0"
            if "gamma->0" in which and cv < 1:
                lin = linear_series("gamma->0,c<1", order=1)["E"]
                coef = sp.factor(lin.coeff(h, 0))
                add("linear", "gamma->0", gamma, sp.Integer(0), k, coef, _subs_value(coef, vals, ctx), sp.O(gamma**2),
                    "closed form", "c < 1: the ridgeless value")
                if geom.is_null:
                    A = small_gamma_reduction()["A"]
                    add("attention", "gamma->0", gamma, sp.Integer(0), k, A, _subs_value(A, vals, ctx), sp.O(gamma**2),
                        "closed form", "c < 1, μ = w = 0: rank Φ = p")
                else:   # the ridgeless value of memorization_error(..., gamma=0), its points moved up if they fail
                    powers = ctx.richardson_powers
                    val = _ladder(lambda g: E_of("attention", cv, g)[0], theory.RIDGELESS_GAMMA * (1 - np.sqrt(cv)) ** 2,
                                  powers, lambda v: extrapolate(v, 10, powers, "γ → 0"))
                    add("attention", "gamma->0", gamma, sp.Integer(0), k, None, val, sp.O(gamma**2), "extrapolated",
                        "c < 1: the ridgeless value memorization_error(..., gamma=0)")
            elif "gamma->0" in which and cv > 1:
                lin = linear_series("gamma->0,c>1", order=2)["E"]
                coef = sp.factor(lin.coeff(h, 2))
                add("linear", "gamma->0", gamma, sp.Integer(0), k * gamma**2, coef, _subs_value(coef, vals, ctx),
                    sp.O(gamma**3), "closed form", "c > 1: E_LR = O(γ²)")
                red = sqrt_gamma_coefficient()
                unsettled = False
                try:  # the √γ law needs a root P > 0 of the reduced system (an O(1) density of M at 0)
                    kv = _sqrt_gamma_value(kc.a1, kc.s2, kc.d, cv, ctx.dps) if float(kc.s2) > 0 else None
                except ConvergenceError:   # the reduced system's quadrature did not settle: extrapolate k√γ instead
                    kv, unsettled = None, True
                if kv is None and not unsettled:  # no root: M has a spectral gap at 0 and E_A = kγ² + O(γ³)
                    power, form, rem, coef, note = 2, k * gamma**2, sp.O(gamma**3), None, "c > 1, a gap at 0: E_A = O(γ²)"
                else:
                    power, form, rem, coef = sp.Rational(1, 2), k * sp.sqrt(gamma), sp.O(gamma ** sp.Rational(3, 2)), red["k"]
                    note = "c > 1: the √γ law of the reduced system"
                if geom.is_null and kv is not None:
                    add("attention", "gamma->0", gamma, sp.Integer(0), form, coef, ctx.scalar(kv),
                        rem, "reduced system", note + ", μ = 0")
                else:   # E_A/γ^power extrapolated; when it does not settle, the other law (the reduced system's
                    # verdict comes from a Newton solve that can miss its root: abs at c = 1.19 has k√γ, k = 0.8997)
                    t0 = EXTRAPOLATION_START["sqrt-gamma"] * (1 - 1 / np.sqrt(cv)) ** 2
                    powers = tuple(range(1, len(ctx.richardson_powers) + 1))
                    laws = [(power, form, rem, note)]
                    laws.append((sp.Rational(1, 2), k * sp.sqrt(gamma), sp.O(gamma ** sp.Rational(3, 2)),
                                 "c > 1: the √γ law") if power == 2 else
                                (2, k * gamma**2, sp.O(gamma**3), "c > 1, a gap at 0: E_A = O(γ²)"))
                    for i, (pw, fm, rm, nt) in enumerate(laws):
                        try:
                            val = _ladder(lambda g: E_of("attention", cv, g)[0] / ctx.scalar(g) ** float(pw), t0, powers,
                                          lambda v: extrapolate(v, 10, powers, "γ → 0"))
                        except ConvergenceError:
                            if i == len(laws) - 1:
                                raise
                            continue
                        add("attention", "gamma->0", gamma, sp.Integer(0), fm, coef if pw == power else None, val, rm,
                            "extrapolated", nt + f": E_A/γ^{pw} extrapolated")
                        break
            elif "gamma->0" in which and asked:
                raise ParameterError("c", cv, "c < 1 or c > 1 for the limit 'gamma->0'",
                                     hint="at c = 1 neither the value E(0) (c < 1) nor the √γ law (c > 1) holds: the "
                                          "Marchenko–Pastur edge touches 0; that expansion is not derived")
            # -- γ → ∞, c → 0, c → ∞, μ → 0, a1 → 0
            stage = "gamma->oo"
            if "gamma->oo" in which:
                _large_gamma(add, vals, ctx, geom, gamma)
            stage = "c->0"
            if "c->0" in which:
                _small_c(add, vals, ctx, geom, c, cv, gv, E_of, extrapolate)
            stage = "c->oo"
            if "c->oo" in which:
                _large_c(add, vals, ctx, kc, c, gamma)
            stage = "mu->0"
            if "mu->0" in which:
                add("linear", "mu->0", theta, sp.Integer(0), k, linear_bulk_error(),
                    E_of("linear", cv, gv, geometry=None)[0], sp.O(theta**2), "closed form", "μ → θμ: E is even in θ")
                add("attention", "mu->0", theta, sp.Integer(0), k, -(gamma**2) * sp.diff(sp.Function("e_1")(gamma), gamma),
                    E_of("attention", cv, gv, geometry=None)[0], sp.O(theta**2), "theory",
                    "μ → θμ, w fixed: the bulk error (w drops out at μ = 0)")
            stage = "a1->0"
            if "a1->0" in which:
                va = _attention_at(ctx, 0 * kc.a1, kc.s2, kc.d, cv, gv, geom)
                add("attention", "a1->0", a1, sp.Integer(0), k, None, va, sp.O(a1**2) if float(kc.d) == 0 else sp.O(a1),
                    "theory", "s², d, 𝔊 fixed; d = 0: E_A does not depend on 𝔊 (docs/theory.md §6.8)")
    except ConvergenceError as exc:   # named by what the user asked, not by the limit's own points
        geo = "" if geom.is_null else f", geometry={geom.as_dict()}"
        raise ConvergenceError(f"sa.limits({act.name!r}, c={cv:g}, gamma={gv:g}{geo}, diagonal={diagonal!r}): the "
                               f"limit {stage!r} could not be computed, though its own points were moved up "
                               f"{LADDER_RUNGS} times (the solver's last failure: {exc.reason})",
                               point={"c": cv, "gamma": gv, "limit": stage}) from exc
    return out


def _large_gamma(add, vals, ctx, geom, gamma):
    """γ → ∞: E = 1 − 2κ/γ + O(γ^{-2}) for both models."""
    kl = kappa_linear()
    add("linear", "gamma->oo", gamma, sp.oo, 1 - 2 * k / gamma, kl, _subs_value(kl, vals, ctx),
        sp.O(gamma**-2, (gamma, sp.oo)), "closed form", "κ_LR = lim ŷᵀXᵀXŷ/n")
    ka = kappa_attention(geom.rank)
    add("attention", "gamma->oo", gamma, sp.oo, 1 - 2 * k / gamma, ka, _subs_value(ka, vals, ctx),
        sp.O(gamma**-2, (gamma, sp.oo)), "closed form", "κ_A = lim ŷᵀMŷ (the 1/γ series of the Woodbury output)")


def _small_c(add, vals, ctx, geom, c, cv, gv, E_of, extrapolate):
    """c → 0 at fixed γ."""
    lin = linear_series("c->0", order=1)["E"]
    coef = sp.factor(lin.coeff(h, 0))
    add("linear", "c->0", c, sp.Integer(0), k, coef, _subs_value(coef, vals, ctx), sp.O(c), "closed form",
        "F_LR → (1 + γ)/(γ(1 + γ + ‖μ‖²))")
    if geom.is_null:
        add("attention", "c->0", c, sp.Integer(0), k - c, sp.Integer(1), _num(ctx, 1), sp.O(c**2), "closed form",
            "μ = 0: rank M = p, E_A = 1 − c + o(c)")
    else:
        powers = tuple(range(1, len(ctx.richardson_powers) + 1))
        val = _ladder(lambda ci: E_of("attention", ci, gv)[0], EXTRAPOLATION_START["c->0"], powers,
                      lambda v: extrapolate(v, 10, powers, "c → 0"))
        add("attention", "c->0", c, sp.Integer(0), k, None, val, sp.O(c), "extrapolated",
            "with a signal: E_A(c) extrapolated to c = 0")


def _large_c(add, vals, ctx, kc, c, gamma):
    """c → ∞ at fixed γ."""
    lin = linear_series("c->oo", order=2)["E"]
    coef = sp.factor(lin.coeff(h, 2))
    add("linear", "c->oo", c, sp.oo, k / c**2, coef, _subs_value(coef, vals, ctx), sp.O(c**-3, (c, sp.oo)),
        "closed form", "all eigenvalues of XᵀX/n grow like c")
    if float(kc.d) == 0:
        fl = semicircle_floor()
        add("attention", "c->oo", c, sp.oo, k, fl, _subs_value(fl, vals, ctx), sp.O(1 / c, (c, sp.oo)),
            "closed form", "d = 0: M → νG², the free convolution of a1W and sG")
    else:
        coef = gamma**2 / d**4
        add("attention", "c->oo", c, sp.oo, k / c**2, coef, _subs_value(coef, vals, ctx), sp.O(c**-3, (c, sp.oo)),
            "closed form", "d ≠ 0: M ≈ c d² S")


def _attention_at(ctx, a1v, s2v, dv, cv, gv, geom):
    """E_A of the asymptotic theory at given kernel constants (a1, s², d), one point (c, γ)."""
    from .backends import closed_runtime as closed_form

    got = closed_form.attention_points(ctx, ctx.convert(np.array([cv])), ctx.convert(np.array([gv])), a1v, s2v, dv,
                                       ctx.convert(geom.gram), geom.rank, point_info={"limit": "a1->0"})
    E = got["E"][0]
    if not (0 <= float(E) <= 1):
        raise ConvergenceError(f"E_A = {E} at a1 = {a1v} is outside [0, 1]", point={"c": cv, "gamma": gv})
    return E


class _CallableModule(types.ModuleType):
    """The module ``symattn.limits``, callable as the function :func:`limits` (``sa.limits(...)``)."""

    def __call__(self, *args, **kwargs):
        return limits(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
