r"""Limiting case a1 = 0 (docs/theory.md §6 "structural consequences", §7).

- d = 0 (cos − e^{-1/2}): β ≡ −s²e3 forces e3 = 0, so β ≡ 0, every T_QK vanishes and the Woodbury
  output collapses to F = T_Q^{(0)}: E_A does not depend on ‖μ‖² or on the weights at all.
- c → ∞ with a1 = d = 0: S → I and ΦᵀΦ/n → s²G², so E_A tends to the floor
  γ² ∫ ρ_sc(x) dx/(νx² + γ)² (ρ_sc the semicircle on [−2, 2]).
- d ≠ 0 (|t| − √(2/π), d = 1): C[a0, b1] = 1 (the μ(K0ŷ)ᵀ term) keeps a coupling to ‖μ‖², so the
  signal helps (E_A decreases with ‖μ‖²) while the weights still drop out.
"""

from __future__ import annotations

import mpmath
import numpy as np

from ..checks import Outcome, register
from ._common import NULL, aligned, attention_points, gram, max_rel, mc_outcome, symbolic_zero

GROUP = "a1-zero"
GEOMS = {
    "null": NULL,
    "mu-only(4)": gram(snr=4.0),
    "aligned(4)": aligned(4.0),
    "asymmetric": gram(snr=1.0, wk2=4.0, wq2=1.0, mu_wk=2.0, mu_wq=0.5, wk_wq=1.0),
}
C0, G0 = 1.0, 0.1


def _woodbury_at_a1_zero(d_value):
    """F = Γ00 − eᵀĈ(I+ΓĈ)^{-1}e at a1 = 0 (and T_QK ≡ 0 when d = 0), for a symbolic Gram matrix."""
    import sympy as sp

    from symattn.systems import attention_system, woodbury_output
    from symattn.systems.attention import TRACE_SYMBOLS
    from symattn.systems.symbols import a1

    sys_ = attention_system(1)
    sub = {a1: 0}
    if d_value == 0:
        sub.update({T: 0 for T in TRACE_SYMBOLS if "QK}" in str(T) and "KQK" not in str(T)})
    F = woodbury_output(sys_.Gamma.subs(sub), sys_.C_hat.subs(sub))
    return sp.simplify(F), sys_


@register("a1-zero/d0/F=T_Q0-for-any-geometry", GROUP, "symbolic")
def d0_symbolic(profile):
    """a1=d=0: e3=0 solves the e3-equation, hence β≡0, T_QK≡0 and F = T_Q^(0) for every Gram matrix 𝔊."""
    from symattn.systems import bulk_system
    from symattn.systems.attention import TRACE_SYMBOLS
    from symattn.systems.bulk import BETA, expand_intermediates
    from symattn.systems.symbols import a1, d, e3

    g3 = expand_intermediates(bulk_system().integrands[2]).subs({a1: 0, d: 0})
    beta0 = BETA.subs({a1: 0, d: 0, e3: 0})
    F, sys_ = _woodbury_at_a1_zero(0)
    gram_syms = set(sys_.gram.free_symbols)
    out = symbolic_zero([g3.subs(e3, 0), beta0, F - TRACE_SYMBOLS[0]],
                        "e3-integrand(e3=0) = 0, β = 0, F − T_Q^(0) = 0")
    if F.free_symbols & gram_syms:
        out.passed = False
    return out


@register("a1-zero/d0/geometry-independence-mpmath", GROUP, "mpmath")
def d0_mpmath(profile):
    """cos (a1=0, d=0): E_A at c=1, γ=0.1 is the same for four geometries (mpmath, dps)."""
    grams = np.stack(list(GEOMS.values()))
    E, _ = attention_points("cos", np.full(len(grams), C0), G0, grams, backend="mpmath", dps=profile.dps)
    spread = max_rel(E[1:], [E[0]] * (len(E) - 1))
    return Outcome(spread, 0.0, 1e-25, "abs", f"max relative spread over {list(GEOMS)}; E_A = {mpmath.nstr(E[0], 12)}")


@register("a1-zero/d0/geometry-independence-float64", GROUP, "float64")
def d0_float(profile):
    """cos: float64 E_A over the four geometries agrees with the mpmath value to 1e-10 and with itself to 1e-12."""
    grams = np.stack(list(GEOMS.values()))
    E, _ = attention_points("cos", np.full(len(grams), C0), G0, grams)
    Emp, _ = attention_points("cos", np.full(len(grams), C0), G0, grams, backend="mpmath", dps=profile.dps)
    spread = float(np.max(np.abs(E - E[0])) / E[0])
    err = max_rel(E, Emp)
    return Outcome(err, 0.0, 1e-10, "abs", f"max relative difference to mpmath; spread between geometries {spread:.2e}",
                   passed=(err <= 1e-10 and spread <= 1e-12))


@register("a1-zero/d0/monte-carlo", GROUP, "monte-carlo")
def d0_mc(profile):
    """cos with ‖μ‖²=1, w_K=w_Q=μ (c=1, γ=0.1): MC against the geometry-free theory."""
    import symattn as sa

    from ..numerics import mc_theory_gap

    r = mc_theory_gap("cos", profile.n, C0, [G0], geometry=sa.Geometry.aligned(1.0), draws=profile.draws,
                      seed=profile.seed, k_se=profile.k_se)
    E_null = float(attention_points("cos", C0, G0, n=profile.n)[0][0])
    return mc_outcome(r, 0, profile.k_se, f"theory with μ=w=0 would be {E_null:.6g} (identical)")


def _floor_closed_form():
    r"""From the c → ∞ reduced system with a1 = 0: e3 = 0, e1 = 1/(γ + s²e2), e2 = 1/(1 + s²e1)."""
    import sympy as sp

    from symattn.systems.symbols import e1, e2, gamma, s2

    from ..symbolic import large_c_reduction

    from symattn.systems.symbols import a1, e3

    red = large_c_reduction()
    g1, g2, g3 = (sp.simplify(g.subs({a1: 0, e3: 0})) for g in red["g"])
    # the integrands no longer depend on x: ∫ · dρ_sc = the integrand itself
    sols = sp.solve([sp.Eq(e1, g1), sp.Eq(e2, g2)], [e1, e2], dict=True)
    pos = [s for s in sols if s[e1].subs({gamma: 1, s2: 1}).is_positive]
    return red, (g1, g2, g3), pos[0][e1]


@register("a1-zero/floor/c->oo-system-is-semicircle", GROUP, "symbolic")
def floor_symbolic(profile):
    """λ=1+x/√c, c→∞: μ_S → semicircle √(4−x²)/(2π); at a1=0 the reduced system is e1(γ + s²/(1+s²e1)) = 1."""
    import sympy as sp

    from symattn.systems.symbols import gamma, s2

    from ..symbolic import x_sc

    red, (g1, g2, g3), e1_sol = _floor_closed_form()
    diffs = [red["density"] - sp.sqrt(4 - x_sc**2) / (2 * sp.pi), g3,
             sp.simplify(e1_sol * (gamma + s2 / (1 + s2 * e1_sol)) - 1)]
    out = symbolic_zero(diffs, f"e1_∞ = {sp.sstr(e1_sol)}; g1, g2 free of x: {not (g1.has(x_sc) or g2.has(x_sc))}")
    if g1.has(x_sc) or g2.has(x_sc):
        out.passed = False
    return out


@register("a1-zero/floor/closed-form-vs-semicircle-mpmath", GROUP, "mpmath")
def floor_mpmath(profile):
    """E_∞ = −γ² de1_∞/dγ from the reduced system equals γ²∫ρ_sc/(νx²+γ)² (mpmath quadrature), cos, γ=0.01."""
    import sympy as sp

    import symattn as sa
    from symattn.systems.symbols import gamma, s2

    from ..numerics import semicircle_floor

    _, _, e1_sol = _floor_closed_form()
    E_expr = sp.simplify(-(gamma**2) * sp.diff(e1_sol, gamma))
    nu = sa.activation("cos").constants(profile.dps)["nu"]
    E_fn = sp.lambdify((s2, gamma), E_expr, "mpmath")
    with mpmath.workdps(profile.dps + 10):
        closed = E_fn(nu, mpmath.mpf("0.01"))
        ref = semicircle_floor(nu, mpmath.mpf("0.01"))
        err = max_rel([closed], [ref])
    return Outcome(err, 0.0, 1e-25, "abs", f"E_∞(cos, γ=0.01) = {mpmath.nstr(ref, 15)} (docs/theory.md §7: 0.1112)")


@register("a1-zero/floor/float64-large-c", GROUP, "float64")
def floor_float(profile):
    """cos, γ=0.01: E_A(c) at c=1e3, 1e4 (Richardson in 1/c) tends to the semicircle floor, 1e-6 absolute."""
    import symattn as sa

    from ..numerics import semicircle_floor

    E = np.asarray(sa.memorization_error("cos", [1e3, 1e4], 0.01), float)
    rich = E[1] + (E[1] - E[0]) / 9
    ref = float(semicircle_floor(sa.activation("cos").nu, 0.01))
    return Outcome(rich, ref, 1e-6, "abs", f"E_A(c=1e3) = {E[0]:.8f}, E_A(c=1e4) = {E[1]:.8f}")


@register("a1-zero/floor/monte-carlo", GROUP, "monte-carlo")
def floor_mc(profile):
    """cos at c=16, γ=0.01 (n=profile.n/2): MC against the theory, which is within 3% of the c→∞ floor."""
    import symattn as sa

    from ..numerics import mc_theory_gap, semicircle_floor

    n = max(100, profile.n // 2)
    r = mc_theory_gap("cos", n, 16.0, [0.01], draws=profile.draws, seed=profile.seed, k_se=profile.k_se)
    floor = float(semicircle_floor(sa.activation("cos").nu, 0.01))
    return mc_outcome(r, 0, profile.k_se, f"c=16; floor (c→∞) = {floor:.5f}")


@register("a1-zero/abs/weights-drop-out-signal-stays", GROUP, "symbolic")
def abs_symbolic(profile):
    """a1=0, d≠0: F depends on 𝔊 only through ‖μ‖² = 𝔊00 (w_K, w_Q drop out, the signal stays)."""
    F, sys_ = _woodbury_at_a1_zero(None)
    G = sys_.gram
    w_syms = {G[i, j] for i in range(3) for j in range(i, 3) if (i, j) != (0, 0)}
    has_w = F.free_symbols & w_syms
    has_mu = G[0, 0] in F.free_symbols
    return Outcome(len(has_w), 0, 0, "abs", f"F depends on 𝔊00: {has_mu}; on w-entries: {sorted(map(str, has_w))}",
                   passed=(not has_w) and has_mu)


@register("a1-zero/abs/signal-helps-mpmath", GROUP, "mpmath")
def abs_mpmath(profile):
    """|t| (a1=0, d=1), c=1, γ=0.01: E_A(‖μ‖²=4) − E_A(0) < 0, and w_K=w_Q=μ changes nothing (mpmath)."""
    grams = np.stack([NULL, gram(snr=4.0), aligned(4.0)])
    E, _ = attention_points("abs", np.full(3, C0), 0.01, grams, backend="mpmath", dps=profile.dps)
    w_effect = max_rel([E[2]], [E[1]])
    diff = float(E[1] - E[0])
    return Outcome(diff, 0.0, 0.0, "le",
                   f"E(0) = {mpmath.nstr(E[0], 10)}, E(‖μ‖²=4) = {mpmath.nstr(E[1], 10)}; relative effect of w=μ: {w_effect:.1e}",
                   passed=(diff < 0 and w_effect < 1e-25))


@register("a1-zero/abs/float64-vs-mpmath", GROUP, "float64")
def abs_float(profile):
    """|t|, c=1, γ=0.01, ‖μ‖² ∈ {0, 4}, w ∈ {0, μ}: float64 agrees with mpmath to 1e-10."""
    grams = np.stack([NULL, gram(snr=4.0), aligned(4.0)])
    Ef, _ = attention_points("abs", np.full(3, C0), 0.01, grams)
    Em, _ = attention_points("abs", np.full(3, C0), 0.01, grams, backend="mpmath", dps=profile.dps)
    return Outcome(max_rel(Ef, Em), 0.0, 1e-10, "abs", "max relative difference")


@register("a1-zero/abs/monte-carlo-paired", GROUP, "monte-carlo")
def abs_mc(profile):
    """|t|, c=1, γ=0.01: paired MC (same draws) of E_A(‖μ‖²=4) − E_A(0) against the theory difference (d_n)."""
    import symattn as sa

    from ..numerics import mc_theory_gap

    r4 = mc_theory_gap("abs", profile.n, C0, [0.01], geometry=sa.Geometry(snr=4.0), draws=profile.draws,
                       seed=profile.seed)
    r0 = mc_theory_gap("abs", profile.n, C0, [0.01], draws=profile.draws, seed=profile.seed)
    diff = r4["per_draw"][:, 0] - r0["per_draw"][:, 0]
    se = float(diff.std(ddof=1) / np.sqrt(diff.size))
    th = float(r4["theory"][0] - r0["theory"][0])
    mc = float(diff.mean())
    return Outcome(mc, th, profile.k_se * se, "abs",
                   f"n={profile.n}, draws={profile.draws}, se={se:.3g}, z={(mc - th) / se:+.2f}, k={profile.k_se:g}; "
                   f"MC difference is {mc / se:+.1f} se from 0; E_A(‖μ‖²=4): MC {r4['mc'][0]:.4f} vs th {r4['theory'][0]:.4f}")
