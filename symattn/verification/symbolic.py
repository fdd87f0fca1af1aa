r"""Symbolic asymptotics of the systems themselves (SymPy), used by the limiting-case checks.

Everything here starts from the objects of :mod:`symattn.systems` -- the linear system's
quadratic for m̃ and its output F_LR, the bulk integrands g_i (in β, Δ), the nine trace
kernels, Γ and Ĉ of the attention system -- and expands them in a small parameter:

- :func:`mp_moment`: ∫ λ^k dμ_S derived from the Marchenko–Pastur density by the substitution
  λ = (a+b)/2 + (b−a)/2·cos θ (so that ρ(λ)dλ = c((b−a)/2)² sin²θ/(2πλ) dθ);
- :class:`Laurent`: truncated Laurent series with SymPy coefficients (exact arithmetic on
  +, ×, integer powers and inverses), used to expand rational integrands;
- :func:`linear_series`: m̃, F_LR and E_LR = −γ² F_LR' as series in 1/γ, γ, c or 1/c, from the
  quadratic c γ m̃² + (1 − c + γ) m̃ − 1 = 0 by undetermined coefficients;
- :func:`bulk_large_gamma`, :func:`kappa_bulk`, :func:`kappa_attention`: the 1/γ expansion of the
  bulk fixed point and of F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e, giving
  E = 1 − 2κ/γ + O(γ^{-2}) with κ = lim ŷᵀMŷ;
- :func:`small_gamma_reduction` (c < 1, e1 ≈ A/γ, e2 ≈ Bγ ⇒ A = 1 − c = lim E_A) and
  :func:`sqrt_gamma_reduction` (c > 1, e1 ≈ Aγ^{-1/2}, e2 ≈ Bγ^{1/2} ⇒ E_A ≈ (A/2)√γ);
- :func:`large_c_reduction`: λ = 1 + x/√c, c → ∞: μ_S → semicircle and the reduced bulk system.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from symattn.systems import attention_system, bulk_system, linear_system
from symattn.systems.attention import TRACE_INTEGRANDS, TRACE_SYMBOLS
from symattn.systems.bulk import BETA, DELTA, Delta, beta
from symattn.systems.linear import m_tilde
from symattn.systems.symbols import c, d, e1, e2, e3, gamma, lam

h = sp.Symbol("h", positive=True)        # the small parameter of each expansion
theta = sp.Symbol("theta", real=True)
x_sc = sp.Symbol("x", real=True)         # semicircle variable (c → ∞)


# ============================================================================ moments of μ_S
@lru_cache(maxsize=None)
def _sin2_cos_integral(j: int) -> sp.Expr:
    return sp.integrate(sp.sin(theta) ** 2 * sp.cos(theta) ** j, (theta, 0, sp.pi))


@lru_cache(maxsize=None)
def mp_moment(k: int) -> sp.Expr:
    r"""∫ λ^k dμ_S (k ≥ 0) from the density: with α = 1 + 1/c, β = 2/√c (λ = α + β cos θ),

    ∫ λ^k dμ_S = (c β²/(2π)) ∫_0^π sin²θ (α + β cos θ)^{k−1} dθ  (k ≥ 1; the atom adds 0^k),
    and 1 for k = 0 (total mass).
    """
    if k == 0:
        return sp.Integer(1)
    al, be = 1 + 1 / c, 2 / sp.sqrt(c)
    tot = sum(sp.binomial(k - 1, j) * al ** (k - 1 - j) * be**j * _sin2_cos_integral(j) for j in range(k))
    return sp.expand(c * be**2 / (2 * sp.pi) * tot)


def integrate_law(poly: sp.Expr) -> sp.Expr:
    r"""∫ poly(λ) dμ_S for a polynomial in λ (by the moments of :func:`mp_moment`)."""
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
    env[Delta] = to_series(DELTA.subs(beta, beta), env, N)
    return env


# ============================================================================ the linear system
def _quadratic():
    eq = linear_system().equations[0]
    return sp.expand(eq.lhs - eq.rhs)  # c γ m̃² + (1 − c + γ) m̃ − 1


@lru_cache(maxsize=None)
def linear_series(param: str, order: int = 3) -> dict:
    r"""Series of m̃, F_LR and E_LR in a small parameter h, from the linear system.

    ``param``: 'gamma->oo' (γ = 1/h), 'gamma->0,c<1' / 'gamma->0,c>1' (γ = h), 'c->0' (c = h),
    'c->oo' (c = 1/h). m̃ = h^v Σ u_k h^k is found by undetermined coefficients in the quadratic
    (the leading root chosen positive, i.e. the Stieltjes branch at z = −γ < 0); then
    F = m/(1 + γ m2 m m̃), m = c m̃ + (1−c)/γ, is expanded as a Laurent series and
    E = −γ² ∂F/∂γ (for γ = 1/h: E = dF/dh; for γ = h: E = −h² dF/dh; for c-series term by term).
    Returns {'m_tilde', 'F', 'E'} as SymPy expressions in h (truncated) and 'E_series' (Laurent).
    """
    P = _quadratic()
    if param == "gamma->oo":
        sub, v = {gamma: 1 / h}, 1
    elif param == "gamma->0,c<1":
        sub, v = {gamma: h}, 0
    elif param == "gamma->0,c>1":
        sub, v = {gamma: h}, -1
    elif param == "c->0":
        sub, v = {c: h}, 0
    elif param == "c->oo":
        sub, v = {c: 1 / h}, 0
    else:
        raise ValueError(param)
    N = order + 2
    u = sp.symbols(f"u0:{N}")
    ansatz = h**v * sum(u[k] * h**k for k in range(N))
    expr = sp.expand(P.subs(sub).subs(m_tilde, ansatz))
    num = sp.expand(sp.numer(sp.together(expr)))
    poly = sp.Poly(num, h)
    low = min(m[0] for m in poly.monoms())
    sol = {}
    for k in range(N):
        cond = sp.expand(poly.coeff_monomial(h ** (low + k)).subs(sol))
        roots = sp.solve(cond, u[k])
        if k == 0:
            roots = [r for r in roots if r != 0] or roots
            positive = [r for r in roots if sp.simplify(r).is_positive is not False]
            roots = positive or roots
        sol[u[k]] = sp.simplify(roots[0])
    R = RationalLaurent
    mt = R(v, [sol[u[k]] for k in range(N)])
    env = {m_tilde: mt}
    one = [1] + [0] * (N - 1)
    if param.startswith("gamma"):
        env[gamma] = R(-1, one) if param == "gamma->oo" else R(1, one)
    else:
        env[c] = R(1, one) if param == "c->0" else R(-1, one)
    lin = linear_system()
    (m_sym, m_def), = lin.definitions.items()
    env[m_sym] = to_series(m_def, env, N, R)
    F = to_series(lin.output, env, N, R)
    Fexpr = F.truncate(F.v + order + 1).as_expr()
    if param == "gamma->oo":
        E = sp.expand(sp.diff(Fexpr, h))
    elif param.startswith("gamma->0"):
        E = sp.expand(-(h**2) * sp.diff(Fexpr, h))
    else:
        E = sp.expand(-(gamma**2) * sp.diff(Fexpr, gamma))
    return {"m_tilde": mt.as_expr(), "F": Fexpr, "E": E}


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
    E1 = Laurent(1, list(xs))
    E2 = Laurent(0, list(ys))
    E3 = Laurent(1, list(zs))
    env = with_intermediates({e1: E1, e2: E2, e3: E3, gamma: Laurent(-1, [1] + [0] * N)}, N + 1)
    series = [to_series(g, env, N + 1) for g in bulk_system().integrands]
    sol = {}
    for k in range(0, order + 1):
        unknown = ([xs[k - 1]] if k >= 1 else []) + [ys[k]] + ([zs[k - 1]] if k >= 1 else [])
        cond = [sp.expand(E.coeff(k).subs(sol) - integrate_law(S.coeff(k).subs(sol)))
                for E, S in zip((E1, E2, E3), series)]
        r = sp.solve(cond, unknown, dict=True)
        if len(r) != 1:
            raise RuntimeError(f"order {k}: expected one solution, got {r}")
        sol.update({key: sp.expand(val) for key, val in r[0].items()})
    out = {}
    for sym, ser in ((e1, E1), (e2, E2), (e3, E3)):
        out[sym] = sp.expand(ser.truncate(order + 1).as_expr().subs(sol))
    return out


@lru_cache(maxsize=None)
def kappa_bulk() -> sp.Expr:
    r"""κ_bulk with e1 = F_bulk = h − κ h² + O(h³), i.e. E_A = 1 − 2κ/γ + O(γ^{-2}) (μ = 0)."""
    return sp.factor(-bulk_large_gamma(2)[e1].coeff(h, 2))


@lru_cache(maxsize=None)
def kappa_attention(rank: int = 1) -> sp.Expr:
    r"""κ_A(c, a1, s², d, 𝔊) with F = h − κ h² + O(h³) for the attention system (E = 1 − 2κ/γ + …).

    The nine traces are expanded to O(h²) at the bulk series; Γ is affine in the traces, so
    Γ = Γ0 + hΓ1 + h²Γ2 with Γ0 = Γ|_{T=0}. Since e = Γ[:, b0] = O(h),
    F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e = hΓ1[b0,b0] + h²(Γ2[b0,b0] − e1ᵀĈ(I + Γ0Ĉ)^{-1}e1) + O(h³).
    """
    sys_ = attention_system(rank)
    bulk = bulk_large_gamma(2)
    N = 3
    env = {sym: Laurent(0, [bulk[sym].coeff(h, k) for k in range(N)]) for sym in (e1, e2, e3)}
    env[gamma] = Laurent(-1, [1, 0, 0])
    env = with_intermediates(env, N)
    Tk = {}
    for T, g in zip(TRACE_SYMBOLS, TRACE_INTEGRANDS):
        ser = to_series(g, env, N)
        if ser.v < 1 and ser.coeff(0) != 0:
            raise RuntimeError(f"trace {T} has an O(1) term")
        Tk[T] = [integrate_law(ser.coeff(k)) for k in (1, 2)]
    Gam = sys_.Gamma
    zero = {T: 0 for T in TRACE_SYMBOLS}
    G0 = Gam.subs(zero)
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
    """κ_LR with E_LR = 1 − 2κ/γ + O(γ^{-2}), from the 1/γ series of the linear system."""
    E = linear_series("gamma->oo", order=2)["E"]
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
    envp = with_intermediates({k: v for k, v in env0.items()}, 2)
    envp = {k: (Laurent(v.v, [x.subs(lam, lp) for x in v.coeffs])) for k, v in envp.items()}
    v1, L1 = _leading(g1.subs(lam, lp), envp)
    v2, L2 = _leading(g2.subs(lam, lp), envp)
    env_atom = {k: Laurent(v.v, [x.subs(lam, 0) for x in v.coeffs]) for k, v in env.items()}
    va, atom1 = _leading(g1.subs(lam, 0), env_atom)
    ratio = sp.simplify(L1 / L2)
    sol = sp.solve(sp.Eq(A, (1 - c) * atom1 + ratio * B), A)
    return {"orders": (v1, v2, va), "L1": L1, "L2": L2, "atom": atom1, "ratio": ratio,
            "ratio_depends_on_lambda": ratio.has(lp), "A": sp.simplify(sol[0]) if sol else None}


@lru_cache(maxsize=None)
def sqrt_gamma_reduction() -> dict:
    r"""Leading order of the bulk system as γ → 0 for c > 1 (γ = ε², e1 = A/ε, e2 = Bε, e3 = C).

    With no atom (c > 1): ε g1 → s²A/D, g2/ε → s²B/D, g3 → λβ0/(λD)·λ, D(λ) = s⁴AB + β0², β0 = β at
    e3 = C. Both first equations reduce to 1 = s² ∫ dμ_S/D (only P = AB is fixed at this order),
    and E_A = −γ² de1/dγ = (A/2)√γ. Returns {'L1','L2','L3','same_equation', 'D'}.
    """
    A, B, C = sp.symbols("A B C", positive=True)
    lp = sp.Symbol("lambda_p", positive=True)
    env = {e1: Laurent(-1, [A, 0]), e2: Laurent(1, [B, 0]), e3: Laurent(0, [C, 0]), gamma: Laurent(2, [1, 0])}
    env = with_intermediates(env, 2)
    env = {k: Laurent(v.v, [x.subs(lam, lp) for x in v.coeffs]) for k, v in env.items()}
    g1, g2, g3 = (g.subs(lam, lp) for g in bulk_system().integrands)
    v1, L1 = _leading(g1, env)
    v2, L2 = _leading(g2, env)
    v3, L3 = _leading(g3, env)
    P = sp.Symbol("P", positive=True)
    eq1 = sp.simplify((L1 / A).subs(B, P / A))
    eq2 = sp.simplify((L2 / B).subs(B, P / A))
    return {"orders": (v1, v2, v3), "L1": L1, "L2": L2, "L3": L3, "per_unit_1": eq1, "per_unit_2": eq2,
            "same_equation": sp.simplify(eq1 - eq2) == 0, "P": P, "C": C}


# ============================================================================ c → ∞
@lru_cache(maxsize=None)
def large_c_reduction() -> dict:
    r"""λ = 1 + x/√c, c → ∞ (u = 1/√c → 0) in the bulk system with d = 0.

    Returns the limit density (semicircle √(4−x²)/(2π) expected) and the limits of the three
    integrands: g1 → (1 + s²e1)/D, g2 → (γ + s²e2)/D, g3 → β/D, D = (γ + s²e2)(1 + s²e1) + β²,
    β = a1 x − s² e3.
    """
    from symattn.systems.marchenko_pastur import density

    u = sp.Symbol("u", positive=True)
    dens = sp.limit(sp.simplify((density.subs(lam, 1 + x_sc * u) * u).subs(c, 1 / u**2)), u, 0)
    lims = []
    for g in bulk_system().integrands:
        expr = g.subs(Delta, DELTA).subs(beta, BETA).subs({d: 0, lam: 1 + x_sc * u}).subs(c, 1 / u**2)
        lims.append(sp.simplify(sp.limit(expr, u, 0)))
    return {"density": sp.simplify(dens), "g": lims}
