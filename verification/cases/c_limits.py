r"""Limiting cases c → 0 and c → ∞ of E_LR and E_A.

- E_LR, c → 0: XᵀX/n restricted to span(ŷ, b̂), b = Zᵀμ/√n (‖b‖² → ‖μ‖², b in the range of the
  rank-p part ZᵀZ/n ≈ projection) is [[‖μ‖², ‖μ‖], [‖μ‖, 1]], so F_LR → (1+γ)/(γ(1+γ+‖μ‖²)); for
  μ = 0, 1 − E_LR ≈ c(1 + 2γ)/(1 + γ)².
- E_LR, c → ∞: all eigenvalues grow like c, c² E_LR → γ².
- E_A, c → 0 (μ = 0): rank M = p, the range of M has mass ≈ c of ŷ and eigenvalues → ∞, so
  E_A = 1 − c + o(c).
- E_A, c → ∞ (μ = 0, d = 0): λ = 1 + x/√c, μ_S → semicircle, K0√c → a1W + sG (free semicircles),
  so M → ν G² and E_A → γ²∫ρ_sc/(νx² + γ)² for every f with d = 0 (not only a1 = 0).
- E_A, c → ∞ with d ≠ 0 (ReLU): M ≈ c d² S, so c² E_A → γ²/d⁴.
"""

from __future__ import annotations

import mpmath
import numpy as np

from ..checks import Outcome, register
from ._common import attention_points, max_rel, mc_outcome, symbolic_zero

GROUP = "c-limits"


@register("c-limits/linear-c->0/symbolic", GROUP, "symbolic")
def lin_c0_symbolic(profile):
    """Series of the linear system at c→0: E_LR(0) = −γ²d/dγ[(1+γ)/(γ(1+γ+‖μ‖²))]; μ=0: 1−E_LR ≈ c(1+2γ)/(1+γ)²."""
    import sympy as sp

    from symattn.systems.symbols import gamma, m2

    from ..symbolic import h, linear_series

    E = linear_series("c->0", order=1)["E"]
    F0 = (1 + gamma) / (gamma * (1 + gamma + m2))
    return symbolic_zero([E.coeff(h, 0) - (-(gamma**2) * sp.diff(F0, gamma)),
                          E.coeff(h, 1).subs(m2, 0) + (1 + 2 * gamma) / (1 + gamma) ** 2],
                         "limit and first-order coefficient")


@register("c-limits/linear-c->oo/symbolic", GROUP, "symbolic")
def lin_cinf_symbolic(profile):
    """Series of the linear system at c→∞ (h = 1/c): E_LR = γ²h² + O(h³), i.e. c²E_LR → γ²."""
    from symattn.systems.symbols import gamma

    from ..symbolic import h, linear_series

    E = linear_series("c->oo", order=2)["E"]
    return symbolic_zero([E.coeff(h, 0), E.coeff(h, 1), E.coeff(h, 2) - gamma**2], f"E_LR = {E} + O(h³)")


@register("c-limits/linear-c->0/monte-carlo", GROUP, "monte-carlo")
def lin_c0_mc(profile):
    """MC E_LR at c=0.05 (‖μ‖²=1, γ=1) against the theory; the c→0 limit is reported."""
    import symattn as sa

    from ..numerics import mc_theory_gap

    r = mc_theory_gap("tanh", profile.n, 0.05, [1.0], geometry=sa.Geometry(snr=1.0), draws=profile.draws,
                      seed=profile.seed, model="linear", k_se=profile.k_se)
    return mc_outcome(r, 0, profile.k_se, f"c→0 limit: {_lin_c0_limit(1.0, 1.0):.5f}")


def _lin_c0_limit(g, snr):
    """−γ² d/dγ (1+γ)/(γ(1+γ+m2)) = γ²·[(1+γ)(1+2γ+m2) − γ(1+γ+m2)]/(γ(1+γ+m2))²."""
    num = (1 + g) * (1 + 2 * g + snr) - g * (1 + g + snr)
    return g * g * num / (g * (1 + g + snr)) ** 2


@register("c-limits/attention-c->0/float64", GROUP, "float64")
def att_c0_float(profile):
    """(1 − E_A)/c → 1 as c → 0 (μ=0): tanh, relu, cos at c=1e-4, γ=1, float64 (tolerance 1e-3)."""
    worst, vals = 0.0, []
    for f in ("tanh", "relu", "cos"):
        E, _ = attention_points(f, 1e-4, 1.0)
        v = float((1 - E[0]) / 1e-4)
        vals.append(round(v, 6))
        worst = max(worst, abs(v - 1))
    return Outcome(worst, 0.0, 1e-3, "abs", f"(1−E_A)/c = {vals}")


@register("c-limits/attention-c->0/mpmath", GROUP, "mpmath", quick=False)
def att_c0_mp(profile):
    """(1 − E_A)/c at c=1e-6 (tanh, γ=1, mpmath) equals 1 to 1e-5."""
    E, _ = attention_points("tanh", 1e-6, 1.0, backend="mpmath", dps=profile.dps)
    v = (1 - E[0]) / mpmath.mpf("1e-6")
    return Outcome(float(v), 1.0, 1e-5, "abs", "tanh, c=1e-6, γ=1")


@register("c-limits/attention-c->0/monte-carlo", GROUP, "monte-carlo")
def att_c0_mc(profile):
    """MC E_A at c=0.05 (tanh, μ=0, γ=1) against the theory (d_n)."""
    from ..numerics import mc_theory_gap

    r = mc_theory_gap("tanh", profile.n, 0.05, [1.0], draws=profile.draws, seed=profile.seed, k_se=profile.k_se)
    return mc_outcome(r, 0, profile.k_se, "c=0.05; c→0: E_A ≈ 1 − c = 0.95")


@register("c-limits/attention-c->oo/reduced-system", GROUP, "symbolic")
def att_cinf_symbolic(profile):
    """λ=1+x/√c, c→∞ (d=0): μ_S → semicircle; e3=0 is consistent (g3 odd in x at e3=0); g1, g2 even."""
    import sympy as sp

    from symattn.systems.symbols import e3

    from ..symbolic import large_c_reduction, x_sc

    red = large_c_reduction()
    g1, g2, g3 = (g.subs(e3, 0) for g in red["g"])
    return symbolic_zero([red["density"] - sp.sqrt(4 - x_sc**2) / (2 * sp.pi),
                          g3 + g3.subs(x_sc, -x_sc), g1 - g1.subs(x_sc, -x_sc), g2 - g2.subs(x_sc, -x_sc)],
                         "reduced: e1=∫(1+s²e1)/D, e2=∫(γ+s²e2)/D dρ_sc, D=(γ+s²e2)(1+s²e1)+a1²x²")


def _reduced_floor(f, gamma, dps):
    r"""E_∞ from the reduced c→∞ system (e3 = 0) solved with mpmath: e1 = (1+s²e1)J, e2 = (γ+s²e2)J,
    J = ∫ρ_sc(x)dx/((γ+s²e2)(1+s²e1) + a1²x²); E = −γ² de1/dγ by numerical differentiation."""
    import symattn as sa

    from ..numerics import semicircle_integral

    k = sa.activation(f).constants(dps)
    a1, s2 = k["a1"], k["s2"]

    def e1_of(g):
        def eqs(x1, x2):
            J = semicircle_integral(lambda x: 1 / ((g + s2 * x2) * (1 + s2 * x1) + a1 * a1 * x * x))
            return [x1 - (1 + s2 * x1) * J, x2 - (g + s2 * x2) * J]

        return mpmath.findroot(eqs, (1 / g, mpmath.mpf("0.5")))[0]

    g = mpmath.mpf(gamma)
    return -g * g * mpmath.diff(e1_of, g), k["nu"]


@register("c-limits/attention-c->oo/mpmath-free-convolution", GROUP, "mpmath", quick=False)
def att_cinf_mp(profile):
    """tanh (a1≠0, d=0), γ=0.1: the reduced c→∞ system gives the semicircle floor with ν = a1² + s² (mpmath)."""
    from ..numerics import semicircle_floor

    with mpmath.workdps(20):
        E, nu = _reduced_floor("tanh", "0.1", 20)
        ref = semicircle_floor(nu, mpmath.mpf("0.1"))
        err = max_rel([E], [ref])
    return Outcome(err, 0.0, 1e-10, "abs", f"E_∞(tanh, γ=0.1) = {mpmath.nstr(ref, 12)}")


@register("c-limits/attention-c->oo/float64-floor", GROUP, "float64")
def att_cinf_float(profile):
    """tanh and erf (d=0, μ=0), γ ∈ {0.01, 1}: E_A at c=1e3, 1e4 (Richardson in 1/c) → γ²∫ρ_sc/(νx²+γ)², 1e-6."""
    import symattn as sa

    from ..numerics import semicircle_floor

    worst, parts = 0.0, []
    for f in ("tanh", "erf"):
        for g in (0.01, 1.0):
            E = np.asarray(sa.memorization_error(f, [1e3, 1e4], g), float)
            rich = E[1] + (E[1] - E[0]) / 9
            ref = float(semicircle_floor(sa.activation(f).nu, g))
            worst = max(worst, abs(rich - ref))
            parts.append(f"{f},γ={g}: {rich:.7f}/{ref:.7f}")
    return Outcome(worst, 0.0, 1e-6, "abs", "max |extrapolated − floor|; " + "; ".join(parts))


@register("c-limits/attention-c->oo/relu-c^2E->gamma^2/d^4", GROUP, "mpmath")
def att_cinf_relu(profile):
    """ReLU (d=1), μ=0, γ=0.01: c²E_A at c=1e4, 1e5 (mpmath, profile dps, Richardson in 1/c) → γ²/d⁴, relative 1e-6.

    E_A ≈ 1e-14 here; it is computed from O(1) quantities, so dps 20 keeps only ~6 digits (dps 30: ~16).
    """
    import symattn as sa

    g = 0.01
    cs = np.array([1e4, 1e5])
    E, _ = attention_points("relu", cs, g, backend="mpmath", dps=profile.dps)
    with mpmath.workdps(profile.dps):
        v = [mpmath.mpf(ci) ** 2 * Ei for ci, Ei in zip(cs, E)]
        rich = v[1] + (v[1] - v[0]) / 9
    ref = g * g / sa.activation("relu").d ** 4
    return Outcome(abs(float(rich) - ref) / ref, 0.0, 1e-6, "abs",
                   f"c²E_A = {mpmath.nstr(v[0], 10)} (c=1e4), {mpmath.nstr(v[1], 10)} (c=1e5); limit γ²/d⁴ = {ref:g}")


@register("c-limits/attention-large-c/float64-accuracy", GROUP, "float64")
def att_large_c_float(profile):
    """ReLU, γ=0.01: float64 E_A (≈1e-8..1e-10) agrees with mpmath at c ∈ {1e2, 1e3} to 1e-4 relative.

    (float64 degrades further out: 2e-3 at c=1e4 and 27% at c=1e5, where E_A ≈ 1e-14; see docs/verification.md.)
    """
    cs = np.array([1e2, 1e3])
    Ef, _ = attention_points("relu", cs, 0.01)
    Em, _ = attention_points("relu", cs, 0.01, backend="mpmath", dps=20)
    return Outcome(max_rel(Ef, Em), 0.0, 1e-4, "abs", f"E_A(float64) = {Ef.tolist()}")


@register("c-limits/attention-c->oo/monte-carlo", GROUP, "monte-carlo")
def att_cinf_mc(profile):
    """tanh at c=16, γ=0.1 (n=profile.n/2): MC against the theory (d_n); the c→∞ floor is reported."""
    import symattn as sa

    from ..numerics import mc_theory_gap, semicircle_floor

    n = max(100, profile.n // 2)
    r = mc_theory_gap("tanh", n, 16.0, [0.1], draws=profile.draws, seed=profile.seed, k_se=profile.k_se)
    floor = float(semicircle_floor(sa.activation("tanh").nu, 0.1))
    return mc_outcome(r, 0, profile.k_se, f"c=16; floor (c→∞) = {floor:.5f}")
