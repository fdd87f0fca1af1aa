r"""Linear ridge regression on X itself: the closed-form deterministic equivalent (MATH.md §3).

XᵀX/n = ZᵀZ/n + U C Uᵀ with U = [y, Zᵀμ]/√n, C = [[m2, 1], [1, 0]]; Woodbury gives

  m̃(γ): positive root of  cγ m̃² + (1 − c + γ) m̃ − 1 = 0   (MP Stieltjes transform of ZZᵀ/n at −γ),
  m(γ) = c m̃ + (1 − c)/γ                                    (companion transform),
  F_LR(γ) = m / (1 + γ m2 m m̃),      E_LR(γ) = −γ² F_LR'(γ)  (differentiated symbolically).
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


@lru_cache(maxsize=None)
def linear_system() -> SymbolicSystem:
    """The linear-regression system (Proposition 2 of the paper), with F_LR and E_LR in closed form."""
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
    system.closed_form = {"m_tilde": mt, "m": m, "F": F, "E": -(gamma**2) * sp.diff(F, gamma)}
    return system
