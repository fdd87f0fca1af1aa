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


# ----------------------------------------------------------------------------- properties over random samples
#: seeded samples of the property checks (the same points every run; ``symattn verify`` is reproducible)
PROPERTY_SEED = 20260
PROPERTY_GAMMAS = np.logspace(-3, 2, 8)


def _random_general_w(rng, p):
    """One of three random ensembles of a general p×p W: Ginibre, Wigner, or rank p/2 (‖W‖_F²/p ≈ 1)."""
    kind = int(rng.integers(3))
    G = rng.standard_normal((p, p))
    if kind == 0:
        return G / np.sqrt(p)
    if kind == 1:
        return (G + G.T) / np.sqrt(2 * p)
    q = p // 2
    return rng.standard_normal((q, p)).T @ rng.standard_normal((q, p)) / np.sqrt(q * p)


@register("variants/properties/one-random-head-equals-general-w", GROUP, "float64")
def one_random_head(profile):
    """heads=[W] (sum and concat) equals the general-W theory of W (docs/theory.md §12), for random W."""
    import symattn as sa

    rng = np.random.default_rng(PROPERTY_SEED)
    g = np.array([0.01, 0.3, 3.0])
    err, kinds = 0.0, []
    for _ in range(3):
        p = int(rng.integers(24, 48))
        c = float(np.exp(rng.uniform(np.log(0.4), np.log(2.0))))
        W = _random_general_w(rng, p)
        ref = sa.memorization_error("tanh", c, g, weights=W)
        for ro in ("sum", "concat"):
            err = max(err, max_rel(sa.memorization_error("tanh", c, g, heads=[W], readout=ro), ref))
        kinds.append(f"p={p}, c={c:.3g}")
    return Outcome(err, 0.0, 1e-10, "abs", "3 random W (Ginibre / Wigner / rank p/2): " + "; ".join(kinds))


@register("variants/properties/residual-f0-is-lr-any-c-gamma", GROUP, "float64")
def residual_f0_any(profile):
    """Residual with f = 0 equals E_LR at 24 random (c, γ, ‖μ‖², θ) (log-uniform c ∈ [0.1, 8], γ ∈ [1e-3, 1e2])."""
    import symattn as sa

    rng = np.random.default_rng(PROPERTY_SEED + 1)
    m = 24
    cs = np.exp(rng.uniform(np.log(0.1), np.log(8.0), m))
    gs = np.exp(rng.uniform(np.log(1e-3), np.log(1e2), m))
    err = 0.0
    for snr, theta in ((0.0, 0.0), (float(rng.uniform(0.2, 3.0)), float(rng.uniform(0.0, 2.0)))):
        geo = sa.Geometry.aligned(snr, theta) if snr else None
        E = sa.memorization_error(lambda t: 0 * t, cs, gs, geometry=geo, residual=True, model="both")
        err = max(err, max_rel(E["attention"], E["linear"]))
    return Outcome(err, 0.0, 1e-10, "abs", f"{m} random (c, γ), μ = 0 and a random aligned geometry")


def _variant_samples(rng):
    """Random variants of the layer: (label, keywords of memorization_error) for the property checks."""
    import symattn as sa

    out = []
    for _ in range(6):
        f = str(rng.choice(["tanh", "erf", "relu", "sin", "sigmoid"]))
        c = float(np.exp(rng.uniform(np.log(0.2), np.log(4.0))))
        snr, theta = float(rng.uniform(0, 2)), float(rng.uniform(0, 2))
        geo = sa.Geometry.aligned(snr, theta) if snr > 0.3 else None
        out.append((f"residual {f} c={c:.3g}", dict(f=f, c=c, geometry=geo, residual=True)))
    p = 30
    for _ in range(3):
        H = int(rng.integers(2, 5))
        e = np.eye(p)
        heads = [e + np.outer(v, v) for v in rng.standard_normal((H, p)) / np.sqrt(p)]
        c = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0))))
        res = bool(rng.integers(2))
        out.append((f"{H} paper heads sum{' + residual' if res else ''} c={c:.3g}",
                    dict(f="tanh", c=c, heads=heads, readout="sum", residual=res)))
    for _ in range(2):
        H = int(rng.integers(2, 4))
        heads = [_random_general_w(rng, p) for _ in range(H)]
        out.append((f"{H} random heads sum", dict(f="tanh", c=0.5, heads=heads, readout="sum")))
    for _ in range(3):
        tau = float(rng.uniform(1.0, 3.0))
        c = float(np.exp(rng.uniform(np.log(0.3), np.log(3.0))))
        out.append((f"softmax tau={tau:.3g} c={c:.3g}", dict(f=None, c=c, kernel="softmax", temperature=tau,
                                                           n=1000, diagonal="zero", scale=True)))
    return out


@register("variants/properties/E-in-unit-interval-and-monotone-in-gamma", GROUP, "float64")
def unit_interval_monotone(profile):
    """0 <= E <= 1 and E non-decreasing in γ on 8 values in [1e-3, 1e2], at 14 random variants.

    E = Σ_k w_k(γ/(λ_k + γ))², Σ_k w_k = 1, in every finite model: each term lies in [0, 1] and increases in γ.
    """
    import symattn as sa
    from symattn.backends.variants import softmax_scale

    rng = np.random.default_rng(PROPERTY_SEED + 2)
    bad, worst = [], 0.0
    samples = _variant_samples(rng)
    for label, kw in samples:
        kw = dict(kw)
        g = PROPERTY_GAMMAS * (softmax_scale(1000, round(kw["c"] * 1000)) if kw.pop("scale", False) else 1.0)
        E = np.asarray(sa.memorization_error(gamma=g, **kw), dtype=float)
        drop = float(np.max(np.r_[0.0, -np.diff(E)]))
        out = float(max(0.0, -E.min(), E.max() - 1.0))
        worst = max(worst, drop, out)
        if drop > 1e-12 or out > 1e-12:
            bad.append(label)
    return Outcome(len(bad), 0, 0, "abs", f"{len(samples)} random variants; largest violation {worst:.2g}"
                   + (f"; failing: {', '.join(bad)}" if bad else ""))
