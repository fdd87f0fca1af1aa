r"""The Marchenko–Pastur law μ_S of S = ZᵀZ/p (n×n, ratio n/p = 1/c), docs/theory.md §1.

  ρ(λ) = c √((b−λ)(λ−a)) / (2πλ)  on [a, b] = [(1 − c^{-1/2})², (1 + c^{-1/2})²],
  plus an atom of mass (1 − c)_+ at λ = 0.

Integrals ∫ g dμ_S are represented symbolically by :func:`mp_integral`; the numeric
backends evaluate them with the quadrature in :mod:`symattn.backends.quadrature`.
"""

from __future__ import annotations

import sympy as sp

from .symbols import c, lam

edge_minus = (1 - 1 / sp.sqrt(c)) ** 2
edge_plus = (1 + 1 / sp.sqrt(c)) ** 2
density = c * sp.sqrt((edge_plus - lam) * (lam - edge_minus)) / (2 * sp.pi * lam)
atom = sp.Max(0, 1 - c)


def mp_integral(g: sp.Expr, intermediates=()) -> sp.Expr:
    r"""The symbolic ∫ g(λ) dμ_S(λ) = ∫_a^b g ρ dλ + (1−c)_+ g(0) (unevaluated).

    ``intermediates`` are ordered pairs (symbol, definition) of λ-dependent quantities that
    g is written in (β(λ), Δ(λ) of the bulk); they are expanded before setting λ = 0 in the
    atom term, so that g(0) contains no hidden λ.
    """
    g0 = g
    for sym, value in reversed(tuple(intermediates)):
        g0 = g0.subs(sym, value)
    return sp.Integral(g * density, (lam, edge_minus, edge_plus)) + atom * sp.simplify(g0.subs(lam, 0))
