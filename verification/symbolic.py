r"""Symbolic asymptotics of the systems, used by the limiting-case checks.

The series engine and the reductions are public in :mod:`symattn.limits` (``sa.limits``); the
checks use them from there. What stays here is the independent derivation of the moments:

- :func:`mp_moment`: ∫ λ^k dμ_S derived from the Marchenko–Pastur density by the substitution
  λ = (a+b)/2 + (b−a)/2·cos θ (so that ρ(λ)dλ = c((b−a)/2)² sin²θ/(2πλ) dθ), a check of the
  Narayana form :func:`symattn.systems.closed.mp_moment` that :mod:`symattn.limits` integrates with.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from symattn.limits import (  # the public engine, re-exported for the checks
    Laurent, RationalLaurent, bulk_large_gamma, h, integrate_law, kappa_attention, kappa_bulk, kappa_linear,
    large_c_reduction, linear_series, small_gamma_reduction, sqrt_gamma_coefficient, sqrt_gamma_reduction,
    to_series, with_intermediates, x_sc)
from symattn.systems.symbols import c

__all__ = ["Laurent", "RationalLaurent", "bulk_large_gamma", "h", "integrate_law", "kappa_attention", "kappa_bulk",
           "kappa_linear", "large_c_reduction", "linear_series", "mp_moment", "small_gamma_reduction",
           "sqrt_gamma_coefficient", "sqrt_gamma_reduction", "to_series", "with_intermediates", "x_sc"]

theta = sp.Symbol("theta", real=True)


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
