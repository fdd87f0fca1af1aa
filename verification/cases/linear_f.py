r"""Limiting case f(t) = t (a1 = ν = 1, s = 0, d = 1; docs/theory.md §7).

- μ = 0: K = XᵀX/p = S exactly, so ΦᵀΦ/n = c S³ and the attention system must collapse to the
  exact law of c S³: e1 = ∫ dμ_S/(γ + cλ³), E_A = γ² ∫ dμ_S/(γ + cλ³)².
- μ ≠ 0, w = 0: ΦᵀΦ/n = (XᵀX/n)³/c², evaluated independently by partial fractions and by a
  contour integral of the linear-regression Stieltjes transform (:mod:`symattn.verification.references`).
"""

from __future__ import annotations

import mpmath

from ..checks import Outcome, register
from ._common import attention_points, gram, max_rel, mc_outcome, symbolic_zero

GROUP = "linear-f"
MU0_POINTS = ((0.5, 0.01), (1.0, 0.1), (2.0, 1.0))          # (c, γ)
SIGNAL_POINTS = ((0.5, 1.0, 0.01), (1.0, 4.0, 0.1), (2.0, 1.0, 1.0))  # (c, ‖μ‖², γ)
LINEAR = {"a1": 1, "s2": 0, "d": 1}


def _subs():
    from symattn.systems.symbols import a1, d, s2

    return {a1: 1, s2: 0, d: 1}


@register("linear-f/mu0/system=law-of-cS^3", GROUP, "symbolic")
def mu0_symbolic(profile):
    """The bulk integrands at a1=1, s²=0, d=1 are 1/(γ+cλ³), γλ/(γ+cλ³), √cλ²/(γ+cλ³): e1 is the law of cS³."""
    import sympy as sp

    from symattn.systems import bulk_system
    from symattn.systems.bulk import expand_intermediates
    from symattn.systems.symbols import c, e1, e2, e3, gamma, lam

    g1, g2, g3 = (sp.simplify(expand_intermediates(g).subs(_subs())) for g in bulk_system().integrands)
    law = 1 / (gamma + c * lam**3)
    diffs = [g1 - law, g2 - gamma * lam * law, g3 - sp.sqrt(c) * lam**2 * law]
    free = (g1.free_symbols | g2.free_symbols | g3.free_symbols) & {e1, e2, e3}
    out = symbolic_zero(diffs, "e1 = ∫dμ_S/(γ+cλ³) explicitly (no unknowns left)")
    if free:
        out.passed, out.value = False, out.value + len(free)
    return out


def _mu0_reference(c, g, dps):
    with mpmath.workdps(dps + 10):
        c, g = mpmath.mpf(c), mpmath.mpf(g)
        from ..numerics import mp_law_integral

        return g**2 * mp_law_integral(lambda t: 1 / (g + c * t**3) ** 2, c)


@register("linear-f/mu0/mpmath-vs-quadrature", GROUP, "mpmath")
def mu0_mpmath(profile):
    """E_A (mpmath backend, dps) = γ²∫dμ_S/(γ+cλ³)² (mpmath tanh-sinh quadrature of the MP density)."""
    cs, gs = zip(*MU0_POINTS)
    E, _ = attention_points("linear", cs, gs, backend="mpmath", dps=profile.dps)
    ref = [_mu0_reference(c, g, profile.dps) for c, g in MU0_POINTS]
    err = max_rel(E, ref)
    return Outcome(err, 0.0, 1e-20, "abs", f"max relative difference over (c, γ) = {MU0_POINTS}, dps={profile.dps}")


@register("linear-f/mu0/float64-vs-quadrature", GROUP, "float64")
def mu0_float(profile):
    """E_A (numpy float64) = γ²∫dμ_S/(γ+cλ³)² to 1e-10 relative."""
    cs, gs = zip(*MU0_POINTS)
    E, _ = attention_points("linear", cs, gs)
    ref = [_mu0_reference(c, g, 30) for c, g in MU0_POINTS]
    return Outcome(max_rel(E, ref), 0.0, 1e-10, "abs", f"max relative difference over (c, γ) = {MU0_POINTS}")


@register("linear-f/mu0/monte-carlo", GROUP, "monte-carlo")
def mu0_mc(profile):
    """Exact MC of f(t)=t (c=1, γ=0.1, μ=0) against the theory with d_n."""
    from ..numerics import mc_theory_gap

    r = mc_theory_gap("linear", profile.n, 1.0, [0.1], draws=profile.draws, seed=profile.seed, k_se=profile.k_se)
    return mc_outcome(r, 0, profile.k_se, "c=1, γ=0.1")


@register("linear-f/signal/traces=moments-of-cS^3", GROUP, "symbolic")
def signal_symbolic(profile):
    """At s=0 the nine traces collapse to ∫λ^k/(γ+cλ³)dμ_S: T_QK^(j)=T_Q^(j+1)-integrand, T_KQK^(j)=T_Q^(j+2)."""
    from symattn.systems.attention import TRACES, TRACE_INTEGRANDS
    from symattn.systems.bulk import expand_intermediates
    from symattn.systems.symbols import c, gamma, lam

    law = 1 / (gamma + c * lam**3)
    shift = {"Q": 0, "QK": 1, "KQK": 2}
    diffs = [expand_intermediates(g).subs(_subs()) - lam ** (j + shift[kind]) * law
             for (name, kind, j), g in zip(TRACES, TRACE_INTEGRANDS)]
    return symbolic_zero(diffs, "all nine trace integrands are λ^k/(γ+cλ³), k = 0..5")


@register("linear-f/signal/mpmath-vs-partial-fractions", GROUP, "mpmath")
def signal_mpmath(profile):
    """E_A (mpmath, μ≠0, w=0) = −γ² d/dγ c²Σ_k s(r_k)/(3r_k²), r_k³ = −c²γ, s the LR Stieltjes transform."""
    from ..references import linear_f_E

    cs, ms, gs = zip(*SIGNAL_POINTS)
    E = [attention_points("linear", c, g, gram(snr=m), backend="mpmath", dps=profile.dps)[0][0]
         for c, m, g in SIGNAL_POINTS]
    with mpmath.workdps(profile.dps + 10):
        ref = [linear_f_E(c, m, g) for c, m, g in SIGNAL_POINTS]
    return Outcome(max_rel(E, ref), 0.0, 1e-20, "abs",
                   f"max relative difference over (c, ‖μ‖², γ) = {SIGNAL_POINTS}, dps={profile.dps}")


@register("linear-f/signal/float64-vs-partial-fractions", GROUP, "float64")
def signal_float(profile):
    """E_A (numpy float64, μ≠0, w=0) against the partial-fraction reference, 1e-10 relative."""
    from ..references import linear_f_E

    E = [attention_points("linear", c, g, gram(snr=m))[0][0] for c, m, g in SIGNAL_POINTS]
    with mpmath.workdps(40):
        ref = [linear_f_E(c, m, g) for c, m, g in SIGNAL_POINTS]
    return Outcome(max_rel(E, ref), 0.0, 1e-10, "abs", f"max relative difference over (c, ‖μ‖², γ) = {SIGNAL_POINTS}")


@register("linear-f/signal/contour-integral", GROUP, "contour")
def signal_contour(profile):
    """E_A (mpmath) = −(1/2πi)∮γ²(z³/c²+γ)^{-2} s(z) dz around the support of ν_y (incl. the BBP outlier).

    --quick: one point at dps 20 (tolerance 1e-14); full: the three points at the profile's dps (1e-20).
    """
    from ..references import linear_f_E_contour

    quick = profile.name == "quick"
    pts, dps, tol = (SIGNAL_POINTS[1:2], 20, 1e-14) if quick else (SIGNAL_POINTS, profile.dps, 1e-20)
    E = [attention_points("linear", c, g, gram(snr=m), backend="mpmath", dps=dps)[0][0] for c, m, g in pts]
    with mpmath.workdps(dps):
        ref = [linear_f_E_contour(c, m, g) for c, m, g in pts]
    return Outcome(max_rel(E, ref), 0.0, tol, "abs", f"max relative difference over (c, ‖μ‖², γ) = {pts}, dps={dps}")


@register("linear-f/signal/monte-carlo", GROUP, "monte-carlo")
def signal_mc(profile):
    """Exact MC of f(t)=t with ‖μ‖²=1, w=0 (c=0.5, γ=0.1) against the theory with d_n."""
    import symattn as sa

    from ..numerics import mc_theory_gap

    r = mc_theory_gap("linear", profile.n, 0.5, [0.1], geometry=sa.Geometry(snr=1.0), draws=profile.draws,
                      seed=profile.seed, k_se=profile.k_se)
    return mc_outcome(r, 0, profile.k_se, "c=0.5, ‖μ‖²=1, γ=0.1")
