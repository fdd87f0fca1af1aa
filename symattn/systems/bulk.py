r"""The bulk system (μ = 0, w = 0): the paper's Proposition 1 (docs/theory.md §5).

Φᵀ Φ/n = c K0 S K0 with K0 = a1(S − I) + d I + s N/√p. For λ ≥ 0 define

  β(λ) = √c (a1(λ − 1) + d) − s² e3,
  Δ(λ) = (γ + s² e2)(1 + s² e1 λ) + λ β(λ)²,

and solve for the three real unknowns

  e1 = ∫ (1 + s² e1 λ)/Δ dμ_S,   e2 = ∫ λ(γ + s² e2)/Δ dμ_S,   e3 = ∫ λ β/Δ dμ_S.

e1 = lim (1/n) tr Q0 = F_bulk(γ), e2 = lim (1/n) tr(S − c S K0 Q0 K0 S) ∈ [0, 1],
e3 = lim √c (1/n) tr(S Q0 K0). Deterministic equivalents (for (1/n) tr φ(S)·):

  Q0 ↔ q(S),  Q0 K0 ↔ k(S),  K0 Q0 K0 ↔ r(S),  with
  q = (1 + s² e1 λ)/Δ,  k = β/(√c Δ),  r = (s² e1 (γ + s² e2) + β²)/(c Δ).
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .base import SymbolicSystem
from .marchenko_pastur import mp_integral
from .symbols import KERNEL, a1, c, d, e1, e2, e3, gamma, lam, s2

#: β(λ) and Δ(λ) as symbols; every integrand is written in them, with the definitions below
beta = sp.Symbol("beta", real=True)
Delta = sp.Symbol("Delta", positive=True)

BETA = sp.sqrt(c) * (a1 * (lam - 1) + d) - s2 * e3
DELTA = (gamma + s2 * e2) * (1 + s2 * e1 * lam) + lam * beta**2
INTERMEDIATES = ((beta, BETA), (Delta, DELTA))  # in order: Δ is written in β

#: the three deterministic-equivalent kernels q, k, r of Q0, Q0K0, K0Q0K0 (as functions of λ)
RESOLVENT_KERNELS = {
    "Q": (1 + s2 * e1 * lam) / Delta,
    "QK": beta / (sp.sqrt(c) * Delta),
    "KQK": (s2 * e1 * (gamma + s2 * e2) + beta**2) / (c * Delta),
}


#: the regular form (docs/theory.md §5.2 in the unknowns P = (γ + s² e2) e1, e2, e3): with
#: w = γ + s² e2, Δ = w + λ(s² P + β²) is the same Δ, and every integrand is O(1) as γ → 0
#: (for c < 1, e1 ~ (1 − c)/γ and e2 ~ γ, while P, e2/γ stay finite; for c > 1, e1 ~ 1/√γ,
#: w ~ √γ). Derivatives along the solution in (P, e2, e3) have no 1/γ cancellation, which
#: those in (e1, e2, e3) have: in dΔ/dγ the terms (1 + s² ė2)(1 + s² e1 λ) and w s² ė1 λ are
#: each O(1/γ) and cancel to O(1).
P_unknown = sp.Symbol("P", real=True)
w_sum = sp.Symbol("w", positive=True)
REGULAR_UNKNOWNS = (P_unknown, e2, e3)
REGULAR_INTERMEDIATES = ((w_sum, gamma + s2 * e2), (beta, BETA), (Delta, w_sum + lam * (s2 * P_unknown + beta**2)))
#: P = ∫ (1 − λβ²/Δ) dμ_S (i.e. w·e1 = ∫ (w + s² λ P)/Δ), e2 = ∫ λ w/Δ, e3 = ∫ λ β/Δ, written for
#: their derivatives (the tangent): the atom at λ = 0 contributes exactly (1 − c)_+ to P and
#: nothing to the derivatives
REGULAR_INTEGRANDS = (1 - lam * beta**2 / Delta, lam * w_sum / Delta, lam * beta / Delta)
#: q, k, r in the regular form (q = 1/Δ + s² λ P/(wΔ), r = (s² P + β²)/(cΔ)): sums of one-signed
#: terms (the form (1 − λβ²/Δ)/w of q would cancel where λβ² ≫ w, i.e. c > 1 at small γ)
REGULAR_KERNELS = {
    "Q": 1 / Delta + s2 * lam * P_unknown / (w_sum * Delta),
    "QK": beta / (sp.sqrt(c) * Delta),
    "KQK": (s2 * P_unknown + beta**2) / (c * Delta),
}
#: the centred traces the Gram matrix Γ needs (docs/theory.md §6.5), without cancellation:
#: since cλr − 1 = −w/Δ,
#:   T_KQK^(1) − 1 = −[(c − 1)_+ + ∫_cont w/Δ dμ_S]/c   (∫_cont: the continuous part of μ_S),
#:   T_KQK^(2) − 1/c = −e2/c,   T_KQK^(3) − (1 + 1/c)/c = −(w/c) ∫ λ²/Δ dμ_S;
#: the integrands of the two integrals:
CENTRED_INTEGRANDS = (-w_sum / (c * Delta), -w_sum * lam**2 / (c * Delta))


def regular_total_derivative(expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
    """d expr/dx through w, β and Δ of the regular form (keeps them as symbols)."""
    inner = {}
    for sym, definition in REGULAR_INTERMEDIATES:
        inner[sym] = sp.diff(definition, x) + sum((sp.diff(definition, s) * ds for s, ds in inner.items()),
                                                  sp.Integer(0))
    return sp.diff(expr, x) + sum((sp.diff(expr, s) * ds for s, ds in inner.items()), sp.Integer(0))


def expand_intermediates(expr: sp.Expr) -> sp.Expr:
    """Replace the symbols β, Δ by their definitions (in terms of λ, e, c, γ, a1, s², d)."""
    for sym, value in reversed(INTERMEDIATES):
        expr = expr.subs(sym, value)
    return expr


def total_derivative(expr: sp.Expr, x: sp.Symbol) -> sp.Expr:
    """d expr/dx through β and Δ: ∂/∂x + ∂/∂β·dβ/dx + ∂/∂Δ·dΔ/dx (keeps β, Δ as symbols)."""
    dbeta = sp.diff(BETA, x)
    dDelta = sp.diff(DELTA, x) + sp.diff(DELTA, beta) * dbeta
    return sp.diff(expr, x) + sp.diff(expr, beta) * dbeta + sp.diff(expr, Delta) * dDelta


@lru_cache(maxsize=None)
def bulk_system(f=None, diagonal: str = "f") -> SymbolicSystem:
    """The bulk fixed point as a SymbolicSystem; ``integrands`` are the g_i with e_i = ∫ g_i dμ_S.

    The three equations of docs/theory.md §5.2, integrals over the Marchenko–Pastur law μ_S.

    Parameters
    ----------
    f : activation spec, optional
        The activation whose constants a1, s², d replace the symbols (exact where they have closed
        forms: :func:`symattn.systems.constants.activation_constants`); None keeps the symbols.
    diagonal : {'f', 'zero'}
        With ``f``: d = lim f(√p)/√p, or d = 0.

    Returns
    -------
    SymbolicSystem
        Unknowns (e1, e2, e3), parameters (c, γ) and the kernel constants, three equations.

    Examples
    --------
    >>> b = bulk_system()
    >>> b.unknowns, len(b.equations)
    ((e_1, e_2, e_3), 3)
    >>> bulk_system("x").definitions[beta]                # f(x) = x: a1 = 1, s² = 0, d = 1
    sqrt(c)*lambda
    """
    if f is not None:
        from .constants import substitute_constants

        return substitute_constants(bulk_system(), f, diagonal)
    integrands = (
        (1 + s2 * e1 * lam) / Delta,
        lam * (gamma + s2 * e2) / Delta,
        lam * beta / Delta,
    )
    system = SymbolicSystem(
        name="bulk",
        unknowns=(e1, e2, e3),
        parameters=(c, gamma) + KERNEL,
        equations=[sp.Eq(e, mp_integral(g, INTERMEDIATES)) for e, g in zip((e1, e2, e3), integrands)],
        definitions={beta: BETA, Delta: DELTA},
        output=e1,
        notes="integrals over the Marchenko-Pastur law mu_S of S = Z^T Z/p (ratio 1/c, atom (1-c)_+ at 0)",
    )
    system.integrands = integrands  # in the symbols β, Δ (see expand_intermediates)
    return system


def proposition1_integrand(kind: str, phi: sp.Expr) -> sp.Expr:
    r"""Integrand φ(λ)·{q, k, r}(λ) of the limits of (1/n)tr(φ(S)Q0), (1/n)tr(φ(S)Q0K0), (1/n)tr(φ(S)K0Q0K0).

    ``kind`` is 'Q', 'QK' or 'KQK'; ``phi`` a SymPy expression in ``lam`` (a polynomial).
    """
    return sp.sympify(phi, strict=True) * RESOLVENT_KERNELS[kind]  # never a string
