r"""The closed form of the systems: every integral over μ_S without quadrature (docs/theory.md §5.8).

Every integrand of the bulk and attention systems (docs/theory.md §5, §6) and every derivative of
one is rational in λ, with denominator a power of

  Δ(λ) = D0 + D1 λ + λ β(λ)²,   β(λ) = b1 λ + b0,

(e-form: D0 = w = γ + s²e2, D1 = w s²e1; regular form: D0 = w, D1 = s²P), a cubic in λ (a linear
polynomial when a1 = 0, since b1 = √c a1). Reducing the numerator modulo Δ (exact polynomial
division in SymPy, so that identities such as Δ − λβ² = D0 + D1λ are used exactly),

  g(λ) = q(λ) + r1(λ)/Δ + r2(λ)/Δ²,   deg r1, r2 < deg Δ,

and ∫ g dμ_S = Σ_l q_l M_l + Σ_j r1_j I_{1,j} + Σ_j r2_j I_{2,j}, with the Marchenko–Pastur moments
M_l (:func:`mp_moment`) and the basis integrals I_{k,j} = ∫ λ^j/Δ^k dμ_S. By partial fractions at
the roots z_i of Δ,

  1/Δ = Σ_i 1/(Δ'(z_i)(λ − z_i)),   1/Δ² = Σ_i [1/(Δ'(z_i)²(λ − z_i)²) − Δ''(z_i)/(Δ'(z_i)³(λ − z_i))],

the I_{k,j} are sums of the Stieltjes transform m(z) = ∫ dμ_S(λ)/(λ − z) and of m'(z) at the roots
(:func:`stieltjes_mp`, :func:`stieltjes_derivative`).

**Branch rule.** m(z) is the root of  z m² + (cz + 1 − c) m + c = 0  with

  m(z) = (−(cz + 1 − c) + √D)/(2z),   √D := c √(z − a) √(z − b)   (principal square roots),

a = (1 − c^{-1/2})², b = (1 + c^{-1/2})²: the product of the two principal roots is analytic off
[a, b] (both factors change sign across z < a), ~ cz at infinity (so m ~ −1/z), and takes the
value −|1 − c| at z = 0, which gives m ~ −(1 − c)/z for c < 1 (the atom) and m(0) = c/(c − 1) for
c > 1. The code evaluates the transform of the continuous part of μ_S,

  m_c(z) = m(z) + (1 − c)_+/z = (|1 − c| − cz + √D)/(2z) = 2c·min(1, c)/(|1 − c| − cz − √D),

taking whichever of the two forms has no cancellation, and adds the atom (1 − c)_+ g(0)
explicitly (written in m, the atom would cancel between the roots at small γ).
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .symbols import c, lam

#: the symbols the reduced integrands are written in: β = b1 λ + b0, Δ = D0 + D1 λ + λβ²
b0, b1, D0, D1 = sp.symbols("b_0 b_1 D_0 D_1", real=True)
#: the explicit Δ of the reduction (docs/theory.md §5.8)
DELTA_POLY = D0 + D1 * lam + lam * (b1 * lam + b0) ** 2
z = sp.Symbol("z")


def stieltjes_mp(zv=z, cv=c):
    r"""m(z) = ∫ dμ_S(λ)/(λ − z) by the branch rule of the module docstring (SymPy expression).

    Examples
    --------
    >>> import sympy as sp
    >>> from symattn.systems.symbols import c
    >>> m = stieltjes_mp(sp.Integer(-1), sp.Integer(2))   # c = 2: real and positive at z = −1
    >>> bool(0 < float(m) < 1)
    True
    """
    a = (1 - 1 / sp.sqrt(cv)) ** 2
    b = (1 + 1 / sp.sqrt(cv)) ** 2
    root = cv * sp.sqrt(zv - a) * sp.sqrt(zv - b)
    return (-(cv * zv + 1 - cv) + root) / (2 * zv)


def stieltjes_derivative(m, zv=z, cv=c):
    r"""m'(z) = −m(m + c)/√D (implicit differentiation of z m² + (cz + 1 − c)m + c = 0, 2zm + cz + 1 − c = √D)."""
    return -m * (m + cv) / (2 * zv * m + cv * zv + 1 - cv)


@lru_cache(maxsize=None)
def mp_moment(k: int) -> sp.Expr:
    r"""M_k = ∫ λ^k dμ_S = Σ_{j=1}^{k} N(k, j) c^{1−j}, N the Narayana numbers (M_0 = 1).

    Examples
    --------
    >>> mp_moment(3)
    1 + 3/c + c**(-2)
    """
    if k == 0:
        return sp.Integer(1)
    return sum(sp.binomial(k, j) * sp.binomial(k, j - 1) / k * c ** (1 - j) for j in range(1, k + 1))


def reduce_integrand(expr, beta_sym, Delta_sym, moment: int = 0, linear: bool = False):
    r"""λ^moment·expr as (q, r1, r2): SymPy Polys in λ with expr = q + r1/Δ + r2/Δ² (Δ = :data:`DELTA_POLY`).

    ``expr`` is written in λ, the symbols ``beta_sym`` (= b1 λ + b0) and ``Delta_sym`` (which may
    appear to the powers −1, −2 only) and λ-free symbols. With ``linear`` (a1 = 0), b1 = 0 and Δ
    is linear in λ. The division is exact (SymPy), so identities of Δ are used symbolically.

    Examples
    --------
    >>> import sympy as sp
    >>> from symattn.systems.symbols import lam
    >>> be, De = sp.symbols("beta Delta")
    >>> q, r1, r2 = reduce_integrand(1 - lam * be**2 / De, be, De)   # = (D0 + D1 λ)/Δ
    >>> q.is_zero, sp.factor(r1.as_expr()), r2.is_zero
    (True, D_0 + D_1*lambda, True)
    """
    t = sp.Symbol("t_inv_Delta")
    Dx = DELTA_POLY.subs(b1, 0) if linear else DELTA_POLY
    e = (sp.sympify(expr) * lam**moment).subs(beta_sym, (0 if linear else b1) * lam + b0).subs(Delta_sym, 1 / t)
    p = sp.Poly(e, t, lam)   # polynomial arithmetic over the field of the other symbols: no expand
    K = max([m[0] for m in p.monoms()] + [0])
    if K > 2 or any(m[0] < 0 for m in p.monoms()):
        raise ValueError("integrand must be a polynomial in 1/Delta of degree at most 2")
    dom = p.domain.unify(sp.Poly(Dx, lam).domain)
    Dp = sp.Poly(Dx, lam, domain=dom)
    powers = [sp.Poly(1, lam, domain=dom), Dp, Dp * Dp]
    N = sp.Poly(0, lam, domain=dom)
    for m, cf in p.terms():   # N = Δ^K · expr, a polynomial in λ
        N += sp.Poly.from_dict({(m[1],): cf}, lam, domain=dom) * powers[K - m[0]]
    rem, q = [], N
    for _ in range(K):
        q, r = sp.div(q, Dp)
        rem.append(r)
    zero = sp.Poly(0, lam, domain=dom)
    rem += [zero] * (2 - K)
    # N/Δ^K: the first remainder goes with 1/Δ^K, the second with 1/Δ^{K−1}
    r_of = {2: rem[0], 1: rem[1]} if K == 2 else {1: rem[0]} if K == 1 else {}
    return q, r_of.get(1, zero), r_of.get(2, zero)


def closed_integral(q, r1, r2, I1, I2):
    r"""∫ (q + r1/Δ + r2/Δ²) dμ_S = Σ q_l M_l + Σ_j r1_j I1[j] + Σ_j r2_j I2[j] (SymPy; I1, I2 the basis)."""
    out = sum((cf * mp_moment(m[0]) for m, cf in zip(q.monoms(), q.coeffs())), sp.Integer(0))
    for r, I in ((r1, I1), (r2, I2)):
        out += sum((cf * I[m[0]] for m, cf in zip(r.monoms(), r.coeffs())), sp.Integer(0))
    return out


def basis_integrals(roots, cv=c):
    r"""I_{1,j} and I_{2,j} (j = 0, 1, 2) as SymPy expressions in the roots ``roots`` of Δ (cubic case).

    With h_0 = m(z), h_j = z h_{j−1} + M_{j−1} (h_j = ∫ λ^j/(λ − z) dμ_S) and Δ = b1²∏(λ − z_i):
    I_{1,j} = Σ_i h_j(z_i)/Δ'(z_i), I_{2,j} = Σ_i [h_j'(z_i)/Δ'(z_i)² − Δ''(z_i) h_j(z_i)/Δ'(z_i)³].
    """
    I1, I2 = [0, 0, 0], [0, 0, 0]
    for zi in roots:
        dD = sp.diff(DELTA_POLY, lam).subs(lam, zi)
        ddD = sp.diff(DELTA_POLY, lam, 2).subs(lam, zi)
        m = stieltjes_mp(zi, cv)
        md = stieltjes_derivative(m, zi, cv)
        h, hd = [m], [md]
        for j in (1, 2):
            h.append(zi * h[-1] + mp_moment(j - 1))
            hd.append(h[-2] + zi * hd[-1])
        for j in range(3):
            I1[j] += h[j] / dD
            I2[j] += hd[j] / dD**2 - ddD * h[j] / dD**3
    return I1, I2


#: the three roots of Δ (symbols; defined by Δ(z_i) = 0)
ROOTS = sp.symbols("z_1 z_2 z_3")


@lru_cache(maxsize=None)
def closed_attention_system(rank: int = 1):
    r"""The attention system in closed form: the bulk equations and the nine traces as algebraic
    expressions in the roots z_i of Δ and the Stieltjes transform m(z_i) (docs/theory.md §5.8).

    The integral form (:func:`symattn.systems.attention_system`) with every ∫ · dμ_S replaced by
    Σ q_l M_l + Σ r1_j I_{1,j} + Σ r2_j I_{2,j} over μ_S itself, the atom inside m
    (:func:`reduce_integrand`, :func:`basis_integrals`; the numeric backend splits the atom off,
    docs/theory.md §5.8). The output F, Γ, Ĉ are those of the integral form.

    Examples
    --------
    >>> s = closed_attention_system()
    >>> s.name, len(s.equations), s.roots
    ('attention (rank 1, closed form)', 12, (z_1, z_2, z_3))
    >>> sorted(str(x) for x in s.equations[0].rhs.free_symbols)[:4]
    ['D_1', 'b_0', 'b_1', 'c']
    """
    from .attention import TRACE_SYMBOLS, attention_system
    from .base import SymbolicSystem
    from .bulk import Delta, beta
    from .symbols import a1, d, e1, e2, e3, gamma, s2

    integral = attention_system(rank)
    I1, I2 = basis_integrals(ROOTS)
    eqs = []
    integrands = list(integral.bulk.integrands) + [integral.traces[T] for T in TRACE_SYMBOLS]
    lhs = list(integral.bulk.unknowns) + list(TRACE_SYMBOLS)
    for x, g in zip(lhs, integrands):
        q, r1, r2 = reduce_integrand(g, beta, Delta)
        eqs.append(sp.Eq(x, closed_integral(q, r1, r2, I1, I2)))
    system = SymbolicSystem(
        name=f"attention (rank {rank}, closed form)",
        unknowns=integral.unknowns,
        parameters=integral.parameters,
        equations=eqs,
        definitions={b1: sp.sqrt(c) * a1, b0: sp.sqrt(c) * (d - a1) - s2 * e3, D0: gamma + s2 * e2,
                     D1: (gamma + s2 * e2) * s2 * e1},
        output=integral.output,
        notes="z_1..z_3: the roots of Delta(lambda) = D0 + D1 lambda + lambda (b1 lambda + b0)^2; "
              "m(z) by the branch rule of docs/theory.md §5.8; F as in the integral form",
    )
    system.roots = ROOTS
    system.delta = DELTA_POLY
    system.integral = integral
    return system
