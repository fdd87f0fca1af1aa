r"""Limits of the residual, multi-head and softmax theories (docs/theory.md §13).

- residual with f = 0: Φ = X, so E_res = E_LR (with and without a signal);
- residual with f(t) = t: K = XᵀX/p exactly, Φ = X(I + S) and E = γ²∫dμ_S/(γ + cλ(1 + λ)²)²
  (an independent mpmath tanh-sinh quadrature of the Marchenko–Pastur density);
- one head (heads=[W]) equals the single-head theory of W's geometry; H identical heads, summed
  or concatenated, rescale γ by H² or H;
- the symbolic residual system is the attention system with d → d + 1;
- the residual and softmax theories against exact Monte Carlo.
"""

from __future__ import annotations

import mpmath
import numpy as np

from ..checks import Outcome, register
from ._common import max_rel

GROUP = "variants"
POINTS = ((0.5, 0.01), (1.0, 0.1), (2.0, 1.0), (0.5, 10.0))  # (c, γ)


@register("variants/residual-f0/equals-linear-regression", GROUP, "float64")
def residual_f0(profile):
    """The residual layer with f = 0 is linear regression: E_res = E_LR to 1e-10 (μ = 0 and ‖μ‖² = 1)."""
    import symattn as sa

    err = 0.0
    cs, gs = (np.array(v) for v in zip(*POINTS))
    for geo in (None, sa.Geometry.aligned(snr=1.0)):
        E = sa.memorization_error(lambda t: 0 * t, cs, gs, geometry=geo, residual=True, model="both")
        err = max(err, max_rel(E["attention"], E["linear"]))
    return Outcome(err, 0.0, 1e-10, "abs", f"max relative difference over (c, γ) = {POINTS}, μ = 0 and aligned")


def _poly_reference(c, g, dps):
    from ..numerics import mp_law_integral

    with mpmath.workdps(dps + 10):
        c, g = mpmath.mpf(c), mpmath.mpf(g)
        return g**2 * mp_law_integral(lambda t: 1 / (g + c * t * (1 + t) ** 2) ** 2, c)


@register("variants/residual-linear-f/polynomial-kernel", GROUP, "float64")
def residual_linear(profile):
    """Residual with f(t) = t: E = γ²∫dμ_S/(γ + cλ(1+λ)²)² (mpmath quadrature) to 1e-9 relative."""
    import symattn as sa

    cs, gs = (np.array(v) for v in zip(*POINTS))
    E = sa.memorization_error("x", cs, gs, residual=True)
    ref = [_poly_reference(c, g, 30) for c, g in POINTS]
    return Outcome(max_rel(E, ref), 0.0, 1e-9, "abs", f"max relative difference over (c, γ) = {POINTS}")


@register("variants/heads/one-head-equals-single-head", GROUP, "float64")
def one_head(profile):
    """heads=[I + w_K w_Qᵀ] equals the single-head theory of (w_K, w_Q); H identical heads rescale γ."""
    import symattn as sa

    p = 40
    rng = np.random.default_rng(0)
    wk, wq = rng.standard_normal(p) / np.sqrt(p), rng.standard_normal(p) / np.sqrt(p)
    geo = sa.Geometry.from_vectors(np.zeros(p), wk, wq)
    g = np.array([0.01, 0.1, 1.0, 10.0])
    W = np.eye(p) + np.outer(wk, wq)
    single = sa.memorization_error("tanh", 0.5, g, geometry=geo)
    err = max_rel(sa.memorization_error("tanh", 0.5, g, heads=[W]), single)
    err = max(err, max_rel(sa.memorization_error("tanh", 0.5, g, heads=[W] * 3, readout="sum"),
                           sa.memorization_error("tanh", 0.5, g / 9, geometry=geo)))
    err = max(err, max_rel(sa.memorization_error("tanh", 0.5, g, heads=[W] * 3),
                           sa.memorization_error("tanh", 0.5, g / 3, geometry=geo)))
    return Outcome(err, 0.0, 1e-10, "abs", "H = 1, and 3 identical heads (sum: γ/9, concat: γ/3)")


@register("variants/residual/system=d-shift", GROUP, "symbolic")
def residual_symbolic(profile):
    """The symbolic residual system is the attention system with d → d + 1, equation by equation."""
    import sympy as sp

    from symattn.systems import attention_system
    from symattn.systems.symbols import d
    from symattn.systems.variants import residual_system

    a, r = attention_system(), residual_system()
    diffs = [sp.simplify(er.rhs - ea.rhs.subs(d, d + 1)) for ea, er in zip(a.equations, r.equations)]
    bad = sum(1 for x in diffs if x != 0)
    return Outcome(bad, 0, 0, "abs", f"{len(diffs)} equations", passed=bad == 0)


def _mc_z(mc, th):
    m, se = mc.attention_mean, mc.attention_sem
    return float(np.max(np.abs(m - th) / se)), (m - th) / th


@register("variants/residual/monte-carlo", GROUP, "monte-carlo")
def residual_mc(profile):
    """Exact MC of the residual layer (tanh, c = 0.5, aligned ‖μ‖² = 1) against the theory with d_n."""
    import symattn as sa

    g = [0.1, 1.0]
    geo = sa.Geometry.aligned(snr=1.0)
    mc = sa.simulate("tanh", n=profile.n, c=0.5, gamma=g, geometry=geo, draws=profile.draws, seed=profile.seed,
                     residual=True, models=("attention",), progress=False)
    th = sa.memorization_error("tanh", 0.5, g, geometry=geo, n=profile.n, residual=True)
    z, gap = _mc_z(mc, th)
    return Outcome(z, 0.0, profile.k_se, "abs", f"max |z| over γ = {g}; gaps {np.round(gap * 100, 2).tolist()} %")


@register("variants/softmax/monte-carlo", GROUP, "monte-carlo")
def softmax_mc(profile):
    """Exact MC of the softmax layer (τ = 1.5, c = 0.5, diagonal excluded) against its reduction."""
    import symattn as sa
    from symattn.backends.variants import softmax_scale

    n, c, tau = profile.n, 0.5, 1.5
    g = np.array([0.1, 1.0]) * softmax_scale(n, round(c * n))
    mc = sa.simulate(None, n=n, c=c, gamma=g, draws=profile.draws, seed=profile.seed, kernel="softmax",
                     temperature=tau, diagonal="zero", progress=False)
    th = sa.memorization_error(None, c, g, n=n, kernel="softmax", temperature=tau, diagonal="zero")
    z, gap = _mc_z(mc, th)
    return Outcome(z, 0.0, profile.k_se, "abs", f"max |z| over γ̂ = (0.1, 1); gaps {np.round(gap * 100, 2).tolist()} %")
