r"""Quadrature for integrals against the Marchenko–Pastur law μ_S (MATH.md §1, §5).

With λ = (a+b)/2 + (b−a)/2·cos θ, the density c√((b−λ)(λ−a))/(2πλ) dλ becomes
c((b−a)/2)² sin²θ/(2πλ) dθ, a smooth periodic integrand in θ (also at c = 1, where a = 0).
The midpoint rule in θ with m nodes is therefore spectrally accurate:

  ∫ g dμ_S ≈ (1 − c)_+ g(0) + Σ_{k=1}^{m} w_k g(λ_k),
  θ_k = (k − ½)π/m,  w_k = c((b−a)/2)² sin²θ_k/(2πλ_k) · π/m.

Node 0 carries the atom at λ = 0 (weight 0 when c ≥ 1).
"""

from __future__ import annotations

import numpy as np


def mp_nodes(ctx, c, m: int):
    """Nodes and weights, each of shape (P, m + 1), for the points c of shape (P,)."""
    c = ctx.convert(c).reshape(-1, 1)
    rc = ctx.sqrt(c)
    a = (1 - 1 / rc) ** 2
    b = (1 + 1 / rc) ** 2
    theta = ctx.arange_half(m) * (ctx.pi / m)
    cos_t, sin_t = ctx.cos(theta), ctx.sin(theta)
    lam = (a + b) / 2 + (b - a) / 2 * cos_t[None, :]
    w = c * ((b - a) / 2) ** 2 * sin_t[None, :] ** 2 / (2 * ctx.pi * lam) * (ctx.pi / m)
    atom = np.where(ctx.to_float(c) < 1, 1 - c, 0 * c)
    zero = 0 * c
    return np.concatenate([zero, lam], axis=1), np.concatenate([atom, w], axis=1)


def integrate_many(values, weights):
    """Σ_k w_k g_j(λ_k) for a list of integrand arrays g_j of shape (P, M): returns (P, J)."""
    if weights.dtype == object:
        return np.stack([(v * weights).sum(axis=-1) for v in values], axis=-1)
    return np.stack([np.einsum("pm,pm->p", v, weights) for v in values], axis=-1)
