r"""The bulk system (μ = 0, w = 0): the paper's Proposition 1 (MATH.md §5).

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

beta = sp.Function("beta")(lam)
Delta = sp.Function("Delta")(lam)

BETA = sp.sqrt(c) * (a1 * (lam - 1) + d) - s2 * e3
DELTA = (gamma + s2 * e2) * (1 + s2 * e1 * lam) + lam * BETA**2

#: the three deterministic-equivalent kernels q, k, r of Q0, Q0K0, K0Q0K0 (as functions of λ)
RESOLVENT_KERNELS = {
    "Q": (1 + s2 * e1 * lam) / DELTA,
    "QK": BETA / (sp.sqrt(c) * DELTA),
    "KQK": (s2 * e1 * (gamma + s2 * e2) + BETA**2) / (c * DELTA),
}


@lru_cache(maxsize=None)
def bulk_system() -> SymbolicSystem:
    """The bulk fixed point as a SymbolicSystem; ``integrands`` are the g_i with e_i = ∫ g_i dμ_S."""
    integrands = (
        (1 + s2 * e1 * lam) / DELTA,
        lam * (gamma + s2 * e2) / DELTA,
        lam * BETA / DELTA,
    )
    shown = [g.subs({BETA: beta}).subs({DELTA: Delta}) for g in integrands]
    system = SymbolicSystem(
        name="bulk",
        unknowns=(e1, e2, e3),
        parameters=(c, gamma) + KERNEL,
        equations=[sp.Eq(e, mp_integral(g)) for e, g in zip((e1, e2, e3), shown)],
        definitions={beta: BETA, Delta: DELTA.subs(BETA, beta)},
        output=e1,
        notes="integrals over the Marchenko-Pastur law mu_S of S = Z^T Z/p (ratio 1/c, atom (1-c)_+ at 0)",
    )
    system.integrands = integrands
    return system


def proposition1_integrand(kind: str, phi: sp.Expr) -> sp.Expr:
    r"""Integrand φ(λ)·{q, k, r}(λ) of the limits of (1/n)tr(φ(S)Q0), (1/n)tr(φ(S)Q0K0), (1/n)tr(φ(S)K0Q0K0).

    ``kind`` is 'Q', 'QK' or 'KQK'; ``phi`` a SymPy expression in ``lam`` (a polynomial).
    """
    return sp.sympify(phi) * RESOLVENT_KERNELS[kind]
