r"""Limiting case γ → 0 (docs/theory.md §3, §7).

- E_LR → (1 − c)/(1 + ‖μ‖²) for c < 1; E_LR = O(γ²) for c > 1 (series of the linear system).
- E_A → 1 − c for μ = 0, c < 1: with e1 ≈ A/γ, e2 ≈ Bγ the bulk equations reduce, on the atom
  λ = 0 (mass 1 − c) and on λ > 0, to A = (1−c)/(1+s²B) + s²AB/(1+s²B), i.e. A = 1 − c = lim E_A.
- E_A → 0 like √γ for c > 1: with γ = ε², e1 ≈ A/ε, e2 ≈ Bε both equations reduce to
  1 = s² ∫ dμ_S/(s⁴P + β0²) (P = AB), and E_A = −γ² e1' ≈ (A/2)√γ.
"""

from __future__ import annotations

import mpmath
import numpy as np

from ..checks import Outcome, register
from ._common import attention_points, bulk_points, linear_points, symbolic_zero

GROUP = "gamma-small"


@register("gamma-small/linear/limit", GROUP, "symbolic")
def linear_symbolic(profile):
    """Series of the linear system at γ→0: E_LR(0) = (1−c)/(1+‖μ‖²) for c<1; E_LR = O(γ²) for c>1."""
    import sympy as sp

    from symattn.systems.symbols import c, m2

    from ..symbolic import h, linear_series

    lo = linear_series("gamma->0,c<1", order=1)["E"]
    hi = linear_series("gamma->0,c>1", order=1)["E"]
    hi_lead = [sp.simplify(hi.coeff(h, k)) for k in (0, 1)]
    return symbolic_zero([lo.coeff(h, 0) - (1 - c) / (1 + m2)] + hi_lead,
                         f"c>1: E_LR = {sp.factor(hi.coeff(h, 2))}·γ² + O(γ³)")


@register("gamma-small/linear/mpmath", GROUP, "mpmath")
def linear_mp(profile):
    """E_LR at γ=1e-12 (mpmath) equals (1−c)/(1+‖μ‖²) = 0.25 (c=0.5, ‖μ‖²=1) to 1e-10."""
    E = linear_points(0.5, 1e-12, snr=1.0, backend="mpmath", dps=profile.dps)[0]
    return Outcome(float(E), 0.25, 1e-10, "abs", "c=0.5, ‖μ‖²=1, γ=1e-12")


@register("gamma-small/linear/float64", GROUP, "float64")
def linear_float(profile):
    """E_LR at γ=1e-8 (float64) equals (1−c)/(1+‖μ‖²) for (c, ‖μ‖²) ∈ {(.5,1), (.25,4)} to 1e-7."""
    E1 = linear_points(0.5, 1e-8, snr=1.0)[0]
    E2 = linear_points(0.25, 1e-8, snr=4.0)[0]
    err = max(abs(E1 - 0.25), abs(E2 - 0.75 / 5))
    return Outcome(err, 0.0, 1e-7, "abs", f"E_LR = {E1:.10f} (ref 0.25), {E2:.10f} (ref 0.15)")


@register("gamma-small/linear/monte-carlo", GROUP, "monte-carlo")
def linear_mc(profile):
    """MC E_LR at γ=1e-6 (c=0.5, ‖μ‖²=1) against the limit (1−c)/(1+‖μ‖²)."""
    import symattn as sa

    res = sa.simulate("tanh", profile.n, 0.5, [1e-6], geometry=sa.Geometry(snr=1.0), draws=profile.draws,
                      seed=profile.seed, models=("linear",), progress=False)
    mc, se = float(res.linear_mean[0]), float(res.linear_sem[0])
    return Outcome(mc, 0.25, profile.k_se * se, "abs",
                   f"n={profile.n}, p={res.p}, draws={profile.draws}, se={se:.3g}, z={(mc - 0.25) / se:+.2f}, k={profile.k_se:g}")


@register("gamma-small/attention-c<1/A=1-c", GROUP, "symbolic")
def att_symbolic(profile):
    """Ansatz e1=A/γ, e2=Bγ in the bulk system (c<1): L1/L2 is λ-free and A = lim E_A = 1 − c."""
    from symattn.systems.symbols import c

    from ..symbolic import small_gamma_reduction

    red = small_gamma_reduction()
    out = symbolic_zero([red["A"] - (1 - c)], f"orders {red['orders']}, ratio L1/L2 = {red['ratio']}")
    if red["ratio_depends_on_lambda"]:
        out.passed = False
    return out


@register("gamma-small/attention-c<1/mpmath", GROUP, "mpmath")
def att_mp(profile):
    """E_A(tanh, c=0.5, μ=0) at γ=1e-10 (mpmath) equals 1 − c to 1e-8."""
    E, _ = attention_points("tanh", 0.5, 1e-10, backend="mpmath", dps=profile.dps)
    return Outcome(float(E[0]), 0.5, 1e-8, "abs", "tanh, c=0.5, γ=1e-10")


@register("gamma-small/attention-c<1/float64", GROUP, "float64")
def att_float(profile):
    """E_A at γ=1e-8 (float64, μ=0) equals 1 − c for tanh, relu, cos at c ∈ {0.25, 0.5, 0.75}, 1e-6."""
    cs = np.array([0.25, 0.5, 0.75])
    err = 0.0
    for f in ("tanh", "relu", "cos"):
        E, _ = attention_points(f, cs, 1e-8)
        err = max(err, float(np.max(np.abs(E - (1 - cs)))))
    return Outcome(err, 0.0, 1e-6, "abs", "max |E_A − (1−c)|")


@register("gamma-small/attention-c<1/monte-carlo", GROUP, "monte-carlo")
def att_mc(profile):
    """MC E_A at γ=1e-6 (tanh, c=0.5, μ=0) against 1 − p/n (rank(M) = p: E → ‖P_null ŷ‖², mean (n−p)/n)."""
    import symattn as sa

    res = sa.simulate("tanh", profile.n, 0.5, [1e-6], draws=profile.draws, seed=profile.seed,
                      models=("attention",), progress=False)
    mc, se = float(res.attention_mean[0]), float(res.attention_sem[0])
    ref = 1 - res.p / profile.n
    return Outcome(mc, ref, profile.k_se * se, "abs",
                   f"n={profile.n}, p={res.p}, draws={profile.draws}, se={se:.3g}, z={(mc - ref) / se:+.2f}, k={profile.k_se:g}")


@register("gamma-small/sqrt-rate-c>1/reduced-system", GROUP, "symbolic")
def sqrt_symbolic(profile):
    """Ansatz γ=ε², e1=A/ε, e2=Bε (c>1): both first equations reduce to the same 1 = s²∫dμ_S/(s⁴AB + β0²)."""
    from ..symbolic import sqrt_gamma_reduction

    red = sqrt_gamma_reduction()
    ok = red["same_equation"] and red["orders"] == (-1, 1, 0)
    return Outcome(0 if ok else 1, 0, 0, "abs",
                   f"orders (e1, e2, e3) = {red['orders']}; per-unit equation: 1 = ∫ {red['per_unit_1']} dμ_S",
                   passed=ok)


def _reduced_solution(f, c, dps, start=(1, 0)):
    r"""Solve 1 = s²∫dμ_S/(s⁴P + β0²), C = ∫ β0/(s⁴P + β0²) dμ_S, β0 = √c(a1(λ−1)+d) − s²C (mpmath)."""
    import symattn as sa

    from ..numerics import mp_law_integral

    k = sa.activation(f).constants(dps)
    a1, s2, d = k["a1"], k["s2"], k["d"]
    c = mpmath.mpf(c)

    def eqs(P, C):
        def D(t):
            b0 = mpmath.sqrt(c) * (a1 * (t - 1) + d) - s2 * C
            return s2 * s2 * P + b0 * b0, b0

        r1 = s2 * mp_law_integral(lambda t: 1 / D(t)[0], c) - 1
        r2 = mp_law_integral(lambda t: D(t)[1] / D(t)[0], c) - C
        return [r1, r2]

    return mpmath.findroot(eqs, tuple(mpmath.mpf(v) for v in start))


@register("gamma-small/sqrt-rate-c>1/mpmath", GROUP, "mpmath")
def sqrt_mp(profile):
    """tanh, c=2: the solver's e1·e2 and e3 at γ=1e-7 match (P, C) of the reduced system (mpmath findroot), and E_A = e1·γ/2.

    E_A ≈ (A/2)√γ with A = e1√γ, i.e. E_A/(e1γ/2) → 1; the corrections are O(√γ) ≈ 3e-4, tolerance 3e-3.
    """
    g = 1e-7
    E, e = bulk_points("tanh", 2.0, g)
    prod = float(e[0, 0] * e[0, 1])
    with mpmath.workdps(15):
        sol = _reduced_solution("tanh", 2.0, 15, start=(prod, e[0, 2]))
    P, C = float(sol[0]), float(sol[1])
    ratio = float(E[0] / (e[0, 0] * g / 2))
    err = max(abs(prod - P) / P, abs(e[0, 2] - C) / abs(C), abs(ratio - 1))
    return Outcome(err, 0.0, 3e-3, "abs",
                   f"P = {P:.8g} vs e1·e2 = {prod:.8g}; C = {C:.8g} vs e3 = {e[0, 2]:.8g}; E_A/(e1γ/2) = {ratio:.6f}")


@register("gamma-small/sqrt-rate-c>1/float64-slope", GROUP, "float64")
def sqrt_float(profile):
    """d log E_A/d log γ → 1/2 (c>1, μ=0): local slope between γ=1e-7 and 1e-6 for tanh (c=2) and erf (c=1.5)."""
    slopes = []
    for f, c in (("tanh", 2.0), ("erf", 1.5)):
        E = np.concatenate([bulk_points(f, c, g)[0] for g in (1e-7, 1e-6)])  # μ=0: E_A = E_bulk
        slopes.append(float(np.log(E[1] / E[0]) / np.log(10)))
    worst = max(abs(s - 0.5) for s in slopes)
    return Outcome(worst, 0.0, 0.01, "abs", f"max |slope − 1/2|; slopes {[round(s, 6) for s in slopes]}")


@register("gamma-small/sqrt-rate-c>1/monte-carlo", GROUP, "monte-carlo")
def sqrt_mc(profile):
    """tanh, c=2, μ=0: MC local slope d log E/d log γ between γ=1e-3 and 1e-2 against the theory's slope (d_n)."""
    import symattn as sa

    g = np.array([1e-3, 1e-2])
    res = sa.simulate("tanh", profile.n, 2.0, g, draws=profile.draws, seed=profile.seed, models=("attention",),
                      progress=False)
    slopes = np.log(res.attention[:, 1] / res.attention[:, 0]) / np.log(10)
    mc, se = float(slopes.mean()), float(slopes.std(ddof=1) / np.sqrt(slopes.size))
    E = np.asarray(sa.memorization_error("tanh", 2.0, g, n=profile.n), float)
    th = float(np.log(E[1] / E[0]) / np.log(10))
    E0 = np.asarray(sa.memorization_error("tanh", 2.0, [1e-7, 1e-6]), float)
    return Outcome(mc, th, profile.k_se * se, "abs",
                   f"n={profile.n}, p={res.p}, draws={profile.draws}, se={se:.3g}, z={(mc - th) / se:+.2f}, k={profile.k_se:g}; "
                   f"theory slope between γ=1e-7 and 1e-6: {np.log(E0[1] / E0[0]) / np.log(10):.4f}")
