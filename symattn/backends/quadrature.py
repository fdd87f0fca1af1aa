r"""Quadrature for integrals against the Marchenko–Pastur law μ_S (docs/theory.md §1, §5).

With λ = (a+b)/2 + (b−a)/2·cos θ, the density c√((b−λ)(λ−a))/(2πλ) dλ becomes
c((b−a)/2)² sin²θ/(2πλ) dθ, a smooth periodic integrand in θ (also at c = 1, where a = 0).
The midpoint rule in θ with m nodes is therefore spectrally accurate:

  ∫ g dμ_S ≈ (1 − c)_+ g(0) + Σ_{k=1}^{m} w_k g(λ_k),
  θ_k = (k − ½)π/m,  w_k = c((b−a)/2)² sin²θ_k/(2πλ_k) · π/m.

Node 0 sits at λ = 0. It carries the atom, plus a correction that makes the rule exact for
constants: since ∫ g dμ_S = ∫ (g(λ) − g(0))/λ · λρ(λ) dλ + g(0)·min(1, c), and the first
integrand is smooth even when the lower edge a is tiny (c close to 1, where 1/λ is sharply
peaked near a), the weight of λ = 0 is

  w_0 = (1 − c)_+ + (min(1, c) − Σ_{k≥1} w_k),

which keeps the convergence spectral uniformly in c. Once the rule has converged for
constants, the correction min(1, c) − Σ w_k is rounding noise (a few m·eps); it is then set to
zero rather than placed at λ = 0, where an integrand can be enormous (1/γ for c > 1 at small γ,
outside the support) and would turn the noise into an error of eps/γ; a node of weight 0 is
moved onto the first interior node.

Near c = 1 the lower edge a is tiny and, at small γ, the integrands peak within λ ≲ γ^{1/2}
of it, i.e. in θ within the square root of that of θ = π: the midpoint rule would need
m ≫ γ^{-1/4}-ish nodes. There (a < 0.05) the rule is taken in t with θ = t + sin t, a periodic
analytic map of [0, π] onto itself with dθ/dt = 1 + cos t = 2 sin²(τ/2) (τ = π − t), whose
double zero at the edge clusters the nodes like τ³/6; λ and the weights are written in
s = π − θ = τ − sin τ (by its series for τ < 1) and λ = (1 − q)² + 4q sin²(s/2), q = c^{-1/2},
without cancellation. The rule stays spectral (the composite integrand is periodic and
analytic), and the near-singularity's distance from the real axis grows from √w to ~w^{1/6}.
"""

from __future__ import annotations

import numpy as np


def mp_nodes(ctx, c, m: int, parts: bool = False, cluster_edge: float = 0.05):
    """Nodes and weights, each of shape (P, m + 1), for the points c of shape (P,).

    Where the lower edge a = (1 − c^{-1/2})² is below ``cluster_edge`` (c close to 1), the nodes
    are clustered at the edge (θ = t + sin t, see the module docstring).

    With ``parts``, also the part of the weight of λ = 0 that belongs to the continuous part of
    μ_S (the constant-exactness correction, (P, 1)): the weights of the continuous part alone
    are the weights with node 0 replaced by it (no subtraction of the atom).
    """
    c = ctx.convert(c).reshape(-1, 1)
    rc = ctx.sqrt(c)
    a = (1 - 1 / rc) ** 2
    b = (1 + 1 / rc) ** 2
    # τ = π − t on the midpoints; s = π − θ is the angle from the lower edge, λ = (1 − q)² + 4q sin²(s/2)
    # with q = c^{-1/2} (λ = |1 + q e^{iθ}|², written without cancellation near the edge)
    tau = ctx.arange_half(m)[None, :][:, ::-1] * (ctx.pi / m) + 0 * c
    # near c = 1 (lower edge a → 0) the integrands peak within λ ≲ γ of the edge: θ = t + sin t
    # (s = τ − sin τ) clusters the nodes there (dθ/dt = 2 sin²(τ/2) has a double zero at the edge)
    # and keeps the rule periodic, hence spectral
    cluster = (ctx.to_float(a) < cluster_edge)[:, 0]
    s_edge = tau.copy()
    jac = ctx.convert(np.ones(tau.shape))
    if cluster.any():
        s_edge[cluster] = _tau_minus_sin(ctx, tau[cluster])
        jac[cluster] = 2 * ctx.sin(tau[cluster] / 2) ** 2
    q = 1 / rc
    lam = (1 - q) ** 2 + 4 * q * ctx.sin(s_edge / 2) ** 2
    w = c * ((b - a) / 2) ** 2 * ctx.sin(s_edge) ** 2 / (2 * ctx.pi * lam) * jac * (ctx.pi / m)
    below = ctx.to_float(c) < 1
    atom = np.where(below, 1 - c, 0 * c)
    continuous_mass = np.where(below, c, 0 * c + 1)
    correction = continuous_mass - w.sum(axis=1, keepdims=True)
    eps = np.finfo(float).eps if getattr(ctx, "dps", None) is None else 10.0 ** -ctx.dps
    noise = np.abs(ctx.to_float(correction)) <= 4 * m * eps * ctx.to_float(continuous_mass)
    correction = np.where(noise, 0 * c, correction)
    w0 = atom + correction
    # a node of weight 0 sits on the first interior node rather than at λ = 0, which is then outside
    # the support (c > 1) and where an integrand may be infinite (0·∞ would poison the sums)
    lam0 = np.where(ctx.to_float(w0) == 0, lam[:, 0:1], 0 * c)
    nodes, weights = np.concatenate([lam0, lam], axis=1), np.concatenate([w0, w], axis=1)
    return (nodes, weights, correction) if parts else (nodes, weights)


def _tau_minus_sin(ctx, tau):
    """τ − sin τ without cancellation: its Taylor series τ³/3! − τ⁵/5! + ... where τ < 1."""
    out = tau - ctx.sin(tau)
    small = ctx.to_float(tau) < 1
    if small.any():
        x = tau[small]
        term, total = x**3 / 6, 0 * x
        eps = np.finfo(float).eps if getattr(ctx, "dps", None) is None else 10.0 ** -ctx.dps
        for k in range(1, 400):
            total = total + term
            if np.all(np.abs(ctx.to_float(term)) <= eps * np.abs(ctx.to_float(total))):
                break
            term = -term * x**2 / ((2 * k + 2) * (2 * k + 3))
        out[small] = total
    return out


def integrate_many(values, weights):
    """Σ_k w_k g_j(λ_k) for a list of integrand arrays g_j of shape (P, M): returns (P, J)."""
    if weights.dtype == object:
        return np.stack([(v * weights).sum(axis=-1) for v in values], axis=-1)
    return np.stack([np.einsum("pm,pm->p", v, weights) for v in values], axis=-1)
