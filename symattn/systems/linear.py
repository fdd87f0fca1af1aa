r"""Linear ridge regression on X itself: the closed-form deterministic equivalent (docs/theory.md §3).

XᵀX/n = ZᵀZ/n + U C Uᵀ with U = [y, Zᵀμ]/√n, C = [[m2, 1], [1, 0]]; Woodbury gives

  m̃(γ): positive root of  cγ m̃² + (1 − c + γ) m̃ − 1 = 0   (MP Stieltjes transform of ZZᵀ/n at −γ),
  m(γ) = c m̃ + (1 − c)/γ                                    (companion transform),
  F_LR(γ) = m / (1 + γ m2 m m̃),      E_LR(γ) = −γ² F_LR'(γ).

E_LR is held in a cancellation-free form (docs/theory.md §3). With A = γm and v = cγm̃, the roots
of A² + (c − 1 + γ)A − γ = 0 and v² + (1 − c + γ)v − cγ = 0, implicit differentiation gives
−γ²m' = (A² + γA)/√Δ₁ and v' = (c − v)/√Δ₂ (Δ₁, Δ₂ their discriminants), with
c − v = 2c/(c + 1 + γ + √Δ₂) the small root of u² − (c + 1 + γ)u + c = 0, so that

  E_LR = [ (A² + γA)/√Δ₁ + m2 A² v'/c ] / D²,   D = 1 + m2 A B/c,   B = v/γ = c m̃,

a sum of positive terms: no digits are lost at small γ for c > 1 (E_LR ~ γ²) or at c → 1, where
−γ² F' written directly cancels catastrophically. Each root is taken in its own stable form
for either sign of its linear coefficient.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .base import SymbolicSystem
from .symbols import c, gamma, m2

m_tilde = sp.Symbol("mtilde", positive=True)
m_companion = sp.Symbol("m", positive=True)


def stieltjes_mp() -> sp.Expr:
    r"""The correct (positive) root m̃(γ) of cγ m̃² + (1−c+γ) m̃ − 1 = 0.

    Written in the cancellation-free form for each sign of b = 1 − c + γ:
    m̃ = 2/(b + √(b² + 4cγ)) for b ≥ 0 and (√(b² + 4cγ) − b)/(2cγ) for b < 0.
    """
    b = 1 - c + gamma
    root = sp.sqrt(b**2 + 4 * c * gamma)
    return sp.Piecewise((2 / (b + root), b >= 0), ((root - b) / (2 * c * gamma), True))


def _stable_root(b, q, scale):
    """The positive root x of x² + b x − q = 0 (q > 0), as ``scale``·x computed without cancellation:
    2q/(b + √(b² + 4q)) for b ≥ 0 and (√(b² + 4q) − b)/2 for b < 0, each divided by ``scale``."""
    root = sp.sqrt(b**2 + 4 * q)
    return sp.Piecewise((2 * q / (scale * (b + root)), b >= 0), ((root - b) / (2 * scale), True)), root


def stable_error() -> sp.Expr:
    r"""E_LR(γ) = −γ² F_LR'(γ) in the cancellation-free form of the module docstring (docs/theory.md §3)."""
    # (c − 1) is formed before γ is added: (c + γ) − 1 would lose the digits of a small γ near c = 1
    b1 = sp.UnevaluatedExpr(c - 1) + gamma
    b2 = sp.UnevaluatedExpr(1 - c) + gamma
    A, root1 = _stable_root(b1, gamma, 1)          # A = γ m
    v, root2 = _stable_root(b2, c * gamma, 1)      # v = c γ m̃
    B, _ = _stable_root(b2, c * gamma, gamma)      # B = v/γ = c m̃
    # u = c − v is the smaller root of u² − (c + 1 + γ)u + c = 0, whose discriminant is Δ₂ again
    c_minus_v = 2 * c / (c + 1 + gamma + root2)
    v_dot = c_minus_v / root2
    D = 1 + m2 * A * B / c
    return ((A**2 + gamma * A) / root1 + m2 * A**2 * v_dot / c) / D**2


@lru_cache(maxsize=None)
def linear_system() -> SymbolicSystem:
    """The linear-regression system (Proposition 2 of the paper), with F_LR and E_LR in closed form.

    m̃ is the positive root of c γ m̃² + (1 − c + γ) m̃ − 1 = 0 (the Marchenko–Pastur Stieltjes
    transform at −γ), m = c m̃ + (1 − c)/γ and F_LR = m/(1 + γ ‖μ‖² m m̃) (docs/theory.md §3).

    Returns
    -------
    SymbolicSystem
        One unknown (m̃), parameters (c, γ, ‖μ‖²), with ``closed_form`` holding m̃, m, F and E.

    Examples
    --------
    >>> s = linear_system()
    >>> s.name, s.unknowns, s.parameters
    ('linear', (mtilde,), (c, gamma, m_2))
    """
    mt = stieltjes_mp()
    m = c * mt + (1 - c) / gamma
    F = m / (1 + gamma * m2 * m * mt)
    system = SymbolicSystem(
        name="linear",
        unknowns=(m_tilde,),
        parameters=(c, gamma, m2),
        equations=[sp.Eq(c * gamma * m_tilde**2 + (1 - c + gamma) * m_tilde - 1, 0)],
        definitions={m_companion: c * m_tilde + (1 - c) / gamma},
        output=m_companion / (1 + gamma * m2 * m_companion * m_tilde),
        notes="m~ is the positive root of the quadratic; E_LR = -gamma^2 F_LR'",
    )
    system.closed_form = {"m_tilde": mt, "m": m, "F": F, "E": stable_error(),
                          "E_direct": -(gamma**2) * sp.diff(F, gamma)}
    return system
