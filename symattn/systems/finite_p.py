r"""The finite-p corrected attention system, held symbolically (docs/theory.md §10.3).

Latent reduction (exact for Gaussian Z). Let Ṽ be an orthonormal basis of span(μ, w_K, w_Q)
(dimension k), g̃_i = Ṽᵀz_i ~ N(0, I_k), u_i = y_i m + g̃_i (m = Ṽᵀμ) and Z^⊥ = (I − ṼṼᵀ)Z.
Then X = ṼUᵀ + Z^⊥ and

  x_iᵀWx_j/√p = ξ^⊥_ij + δ(ω_i, ω_j),  δ(ω, ω') = uᵀBu'/√p,  B = I_k + Σ_j ŵ_K^{(j)} ŵ_Q^{(j)ᵀ},

with ξ^⊥ = Z^⊥ᵀZ^⊥/√p independent of the latents ω = (y, g̃). Conditional Hermite expansion
in ξ^⊥ (F(s) = E f(ξ+s), F'(s) = E[ξ f(ξ+s)], V(s) = Var f(ξ+s)):

  K = (1/√p)𝕄 + 𝔻∘(S^⊥ − I) + Σ∘N/√p + diag(d(ω)) (off-diagonal parts only),
  𝕄 = √p F(δ), 𝔻 = F'(δ), Σ² = V(δ) − F'(δ)², d(ω) = E[f(‖x‖²_W/√p) | ω]/√p.

Bulk: the 3×3 linear pencil L = [[z, √c K0ᵀ, 0], [√c K0, 0, I], [0, I, S]] with
K0 = 𝔻∘(S − I) + Σ∘N/√p + diag(d − 𝕄(ω,ω)/p) has Schur complement Q0 = (z + c K0ᵀ S K0)^{-1};
its latent-conditional expectation solves the operator-valued Dyson equation
𝒢 = (L0 + R_S(−𝒢) + R_N(−𝒢))^{-1} with the free-Poisson R-transform ρ_S(x) = (1 − x/c)^{-1}
(:func:`free_poisson_r_transform`). Low rank: a Woodbury identity in latent directions.

This module gives the symbolic objects (:func:`finite_p_system`) and, for reference, the
pair-class coefficients of the leading order (F_odd, ā, b, ν̄: ``COEFFICIENT_DEFINITIONS``).
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .attention import attention_system
from .base import SymbolicSystem
from .symbols import c, gamma

#: p (the dimension), t = Λ00/√p, and the Gaussian integration variable
p = sp.Symbol("p", positive=True)
t = sp.Symbol("t", real=True)
x = sp.Symbol("x", real=True)
#: the centred activation and the Gaussian density
f = sp.Function("f")
phi = sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)
#: shift argument
s = sp.Symbol("s", real=True)
#: pair-class (leading-order) coefficients
F_odd = sp.Symbol(r"\mathbb{F}_{odd}", real=True)
a_bar = sp.Symbol(r"\bar{a}", real=True)
b_tw = sp.Symbol("b", real=True)
nu_bar = sp.Symbol(r"\bar{\nu}", nonnegative=True)
s2_bar = sp.Symbol(r"\bar{s}^2", nonnegative=True)
#: the pencil's spectral parameter (z = γ on the real axis, γ + iη for the complex-step derivative)
z = sp.Symbol("z")


def gaussian_mean(expr) -> sp.Integral:
    """E[expr(ξ)] for ξ ~ N(0, 1), as the unevaluated integral ∫ expr(x) φ(x) dx."""
    return sp.Integral(expr * phi, (x, -sp.oo, sp.oo))


def shifted_mean(arg) -> sp.Integral:
    """F(s) = E f(ξ + s)."""
    return gaussian_mean(f(x + arg))


def shifted_slope(arg) -> sp.Integral:
    """F'(s) = E f'(ξ + s) = E[ξ f(ξ + s)] (Gaussian integration by parts)."""
    return gaussian_mean(x * f(x + arg))


def shifted_variance(arg) -> sp.Expr:
    """V(s) = Var f(ξ + s) = E f(ξ + s)² − F(s)²."""
    return gaussian_mean(f(x + arg) ** 2) - shifted_mean(arg) ** 2


#: the leading-order (g̃ = 0) pair-class coefficients as Gaussian integrals of the centred f
COEFFICIENT_DEFINITIONS = {
    F_odd: (shifted_mean(t) - shifted_mean(-t)) / 2,
    a_bar: (shifted_slope(t) + shifted_slope(-t)) / 2,
    b_tw: (shifted_slope(t) - shifted_slope(-t)) / 2,
    nu_bar: (shifted_variance(t) + shifted_variance(-t)) / 2,
    s2_bar: nu_bar - a_bar**2,
}


def latent_symbols(k: int):
    """Symbols of one latent pair: y, y', g̃ (k), g̃' (k), m (k), B (k×k)."""
    y, yp = sp.symbols("y y'", real=True)
    g = sp.Matrix(sp.symbols(f"g_1:{k + 1}", real=True)) if k else sp.zeros(0, 1)
    gp = sp.Matrix(sp.symbols(f"g'_1:{k + 1}", real=True)) if k else sp.zeros(0, 1)
    m = sp.Matrix(sp.symbols(f"m_1:{k + 1}", real=True)) if k else sp.zeros(0, 1)
    B = sp.Matrix(k, k, lambda i, j: sp.Symbol(f"B_{{{i + 1}{j + 1}}}", real=True))
    return y, yp, g, gp, m, B


def latent_argument(k: int) -> sp.Expr:
    """δ(ω, ω') = uᵀBu'/√p with u = y m + g̃ (a polynomial in the latent symbols)."""
    y, yp, g, gp, m, B = latent_symbols(k)
    if k == 0:
        return sp.Integer(0)
    u, up = y * m + g, yp * m + gp
    return (u.T * B * up)[0, 0] / sp.sqrt(p)


def free_poisson_r_transform(xv=None):
    """R-transform of S = ZᵀZ/p (free Poisson, τ(S) = 1, free cumulants κ_n = c^{1−n}): 1/(1 − x/c)."""
    xv = sp.Symbol("x") if xv is None else xv
    return 1 / (1 - xv / c)


def pencil():
    r"""The 3×3 linear pencil and the blocks of its inverse, with scalar (commuting) stand-ins.

    Returns (L, blocks): L = [[z, √c K0ᵀ, 0], [√c K0, 0, 1], [0, 1, S]] in the symbols K0, K0ᵀ, S,
    and a dict block → expression of the inverse that the solver reads:
    𝒢11 = Q0, 𝒢12 = √c Q0K0ᵀS, 𝒢13 = −√c Q0K0ᵀ, 𝒢22 = −S + cSK0Q0K0ᵀS, 𝒢32 = 1 − cK0Q0K0ᵀS,
    𝒢33 = cK0Q0K0ᵀ, Q0 = (z + cK0ᵀSK0)^{-1}. (In the matrix case the same formulas hold with
    the orders written; :func:`check_pencil` verifies them.)
    """
    K0, K0T, S = sp.symbols("K_0 K_0^T S")
    L = sp.Matrix([[z, sp.sqrt(c) * K0T, 0], [sp.sqrt(c) * K0, 0, 1], [0, 1, S]])
    Q0 = 1 / (z + c * K0T * S * K0)
    blocks = {
        (0, 0): Q0,
        (0, 1): sp.sqrt(c) * Q0 * K0T * S,
        (0, 2): -sp.sqrt(c) * Q0 * K0T,
        (1, 1): -S + c * S * K0 * Q0 * K0T * S,
        (2, 1): 1 - c * K0 * Q0 * K0T * S,
        (2, 2): c * K0 * Q0 * K0T,
    }
    return L, blocks


def check_pencil() -> bool:
    """True when the block formulas of :func:`pencil` equal the inverse of L (scalar stand-ins)."""
    L, blocks = pencil()
    inv = L.inv()
    return all(sp.simplify(inv[i, j] - v) == 0 for (i, j), v in blocks.items())


def woodbury_structure():
    r"""Ĉ couplings and Γ entries of the latent Woodbury step, as a readable dict of strings.

    Basis: n-space h_a = φ_a/√n (orthonormal latent functions, φ_0 = y) and K0ᵀh_a (a in the
    support of u); p-space α_a = Z^⊥h_a/√p and Ṽe_l (l ≤ k).
    """
    return {
        "C[alpha_a, h_b]": "A_ab/sqrt(c),  A_ab = E[M(w,w') phi_a(w) phi_b(w')]",
        "C[V e_l, h_b]": "sum_a rho_al A_ab / c,  rho_al = E[u_l phi_a]",
        "C[V e_l, K0^T h_a]": "rho_al",
        "Gamma[h_a, h_b]": "E[phi_a phi_b G11]",
        "Gamma[h_a, K0^T h_b]": "E[phi_a phi_b (-G13/sqrt(c))]",
        "Gamma[K0^T h_a, K0^T h_b]": "E[phi_a phi_b G33/c]",
        "Gamma[h_a, alpha_b]": "E[phi_a phi_b G12]",
        "Gamma[K0^T h_a, alpha_b]": "E[phi_a phi_b (1 - G32)]/sqrt(c)",
        "Gamma[alpha_a, alpha_b]": "E[phi_a phi_b G22]",
        "Gamma[V e_l, V e_l']": "-delta_ll'",
        "F": "Gamma[y,y] - e^T Chat (I + Gamma Chat)^{-1} e,  e = Gamma[:, y]",
    }


@lru_cache(maxsize=None)
def finite_p_system(rank: int = 1) -> SymbolicSystem:
    r"""The finite-p corrected system for rank-r weights (latent dimension k ≤ 1 + 2r).

    Equations: the kernel definitions 𝕄, 𝔻, Σ² on the latent argument δ, the Dyson equation
    of the pencil, and the Woodbury output. Attributes: ``attention`` (the asymptotic system it
    reduces to), ``latent_argument`` (δ for k = 1 + 2r), ``pencil``, ``pencil_blocks``,
    ``r_transform``, ``woodbury``, ``coefficient_definitions`` (leading order).
    """
    base = attention_system(rank)
    k = 1 + 2 * rank
    delta = latent_argument(k)
    Msym, Dsym, S2sym = sp.symbols(r"\mathbb{M} \mathbb{D} \Sigma^2")
    G = sp.MatrixSymbol(r"\mathcal{G}", 3, 3)
    L0 = sp.MatrixSymbol("L_0", 3, 3)
    RS = sp.MatrixSymbol(r"R_S(-\mathcal{G})", 3, 3)
    RN = sp.MatrixSymbol(r"R_N(-\mathcal{G})", 3, 3)
    L, blocks = pencil()
    equations = [
        sp.Eq(Msym, sp.sqrt(p) * shifted_mean(s)),
        sp.Eq(Dsym, shifted_slope(s)),
        sp.Eq(S2sym, shifted_variance(s) - shifted_slope(s) ** 2),
        sp.Eq(G, (L0 + RS + RN).inverse()),
    ]
    definitions = {s: delta, t: base.Lambda[0, 0] / sp.sqrt(p)}
    system = SymbolicSystem(
        name=f"attention, finite-p corrected (rank {rank})",
        unknowns=(G,),
        parameters=(c, gamma, p) + tuple(sorted(base.gram.free_symbols, key=str)),
        equations=equations,
        definitions=definitions,
        output=base.output,
        notes="latent conditional-Hermite expansion: K = M/sqrt(p) + D o (S - I) + Sigma o N/sqrt(p) + diag(d); "
              "Dyson equation of the pencil over the latent-diagonal algebra, R_S(b) = sum P_j [(1 - tau(b)/c)^-1]_jj' P'_j'; "
              "Woodbury in latent directions (see woodbury_structure())",
    )
    system.attention = base
    system.rank = rank
    system.latent_argument = delta
    system.pencil = L
    system.pencil_blocks = blocks
    system.r_transform = free_poisson_r_transform()
    system.woodbury = woodbury_structure()
    system.coefficient_definitions = dict(COEFFICIENT_DEFINITIONS)
    return system
