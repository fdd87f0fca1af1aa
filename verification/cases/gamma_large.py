r"""Limiting case γ → ∞: E → 1, with the 1/γ coefficient derived symbolically.

E(γ) = γ² ŷᵀ(M + γ)^{-2}ŷ = 1 − 2 ŷᵀMŷ/γ + O(γ^{-2}), so the 1/γ coefficient is −2κ with
κ = lim ŷᵀMŷ. The checks derive κ from the systems by series in h = 1/γ (:mod:`symattn.verification.symbolic`):

- linear regression: κ_LR = c + ‖μ‖² (hand value: ‖Xŷ‖²/n = ‖μ‖² + 2μᵀZŷ/√n + ‖Zŷ‖²/n → ‖μ‖² + c);
- bulk (μ = 0): κ = s² + a1²(1 + 1/c) + 2a1 d + c d² (hand value: (1/n) tr M = c ∫ λ A(λ)² dμ_S + s² ∫ λ dμ_S,
  A(λ) = a1(λ − 1) + d, using E[G S G] = (1/n) tr S · I);
- attention with signal: κ_A(c, a1, s², d, 𝔊) from the Woodbury output; checked against the
  numerical solution at γ = 1e6, 1e7 and against Monte Carlo of ŷᵀMŷ = ‖XKŷ‖²/n.
"""

from __future__ import annotations

import mpmath
import numpy as np

from ..checks import Outcome, register
from ._common import aligned, attention_points, max_rel, symbolic_zero

GROUP = "gamma-large"
C_SIG, SNR = 0.5, 1.0  # tanh, w_K = w_Q = μ, ‖μ‖² = 1


@register("gamma-large/linear/kappa=c+snr", GROUP, "symbolic")
def linear_symbolic(profile):
    """1/γ series of the linear system: E_LR = 1 − 2(c + ‖μ‖²)/γ + O(γ^{-2}) (hand value of lim ŷᵀXᵀXŷ/n)."""
    from symattn.systems.symbols import c, m2

    from ..symbolic import h, linear_series

    E = linear_series("gamma->oo", order=1)["E"]
    return symbolic_zero([E.coeff(h, 0) - 1, E.coeff(h, 1) + 2 * (c + m2)], f"E_LR = {E} + O(h²), h = 1/γ")


@register("gamma-large/bulk/kappa=trace-of-M", GROUP, "symbolic")
def bulk_symbolic(profile):
    """1/γ series of the bulk fixed point: κ = c∫λ(a1(λ−1)+d)²dμ_S + s²∫λdμ_S (= lim (1/n) tr M)."""
    from symattn.systems.symbols import a1, c, d, lam, s2

    from ..symbolic import integrate_law, kappa_bulk

    hand = c * integrate_law(lam * (a1 * (lam - 1) + d) ** 2) + s2 * integrate_law(lam)
    k = kappa_bulk()
    return symbolic_zero([k - hand], f"κ_bulk = {k}")


@register("gamma-large/attention/kappa-reduces-to-bulk", GROUP, "symbolic")
def attention_symbolic(profile):
    """κ_A from the Woodbury output (1/γ series): F = h − κh² with F1 = 1; κ_A(𝔊=0) = κ_bulk; κ_A(a1=d=0) = s²."""
    from symattn.systems import attention_system
    from symattn.systems.symbols import a1, d, s2

    from ..symbolic import kappa_attention, kappa_bulk

    kA = kappa_attention(1)
    G = attention_system(1).gram
    zero = {g: 0 for g in G.free_symbols}
    return symbolic_zero([kA.subs(zero) - kappa_bulk(), kA.subs({a1: 0, d: 0}) - s2],
                         f"κ_A has {len(kA.free_symbols)} symbols")


def _kappa_value(f, c, grm, n=None, dps=None):
    """κ_A at the activation's constants (d_n when n is given) and the Gram matrix ``grm``."""
    import symattn as sa
    from symattn.systems import attention_system
    from symattn.systems.symbols import a1, c as c_, d, s2

    from ..symbolic import kappa_attention

    act = sa.activation(f)
    k = sa.kernel_constants(act, n=n, c=c if n is not None else None, snr=float(grm[0, 0]), dps=dps)
    G = attention_system(1).gram
    vals = {a1: k.a1, s2: k.s2, d: k.d, c_: c}
    vals.update({G[i, j]: float(grm[i, j]) for i in range(3) for j in range(3)})
    expr = kappa_attention(1).subs({key: (v if dps is None else v) for key, v in vals.items()})
    return expr


@register("gamma-large/attention/mpmath-vs-kappa", GROUP, "mpmath")
def attention_mp(profile):
    """γ(1−E_A)/2 at γ=1e8, 1e9 (mpmath, Richardson) equals the symbolic κ_A (tanh, c=0.5, w_K=w_Q=μ, ‖μ‖²=1)."""
    import sympy as sp

    g = np.array([1e8, 1e9])
    E, _ = attention_points("tanh", np.full(2, C_SIG), g, aligned(SNR), backend="mpmath", dps=profile.dps)
    with mpmath.workdps(profile.dps):
        v = [mpmath.mpf(gi) * (1 - Ei) / 2 for gi, Ei in zip(g, E)]
        meas = (10 * v[1] - v[0]) / 9
        kap = mpmath.mpf(str(sp.N(_kappa_value("tanh", C_SIG, aligned(SNR), dps=profile.dps), profile.dps)))
    return Outcome(max_rel([meas], [kap]), 0.0, 1e-12, "abs",
                   f"κ_A = {mpmath.nstr(kap, 15)}; Richardson of γ(1−E)/2 = {mpmath.nstr(meas, 15)}")


@register("gamma-large/attention/float64-E->1", GROUP, "float64")
def attention_float(profile):
    """float64: E_A → 1 and γ(1−E_A)/2 at γ=1e5, 1e6 (Richardson) equals κ_A to 1e-5 relative."""
    import symattn as sa

    g = np.array([1e5, 1e6])
    E = np.asarray(sa.memorization_error("tanh", C_SIG, g, geometry=sa.Geometry.aligned(SNR)), float)
    v = g * (1 - E) / 2
    meas = (10 * v[1] - v[0]) / 9
    kap = float(_kappa_value("tanh", C_SIG, aligned(SNR)))
    return Outcome(abs(meas - kap) / kap, 0.0, 1e-5, "abs",
                   f"κ_A = {kap:.8f}; Richardson {meas:.8f}; 1 − E_A(1e6) = {1 - E[1]:.3e}")


@register("gamma-large/attention/monte-carlo-kappa", GROUP, "monte-carlo")
def attention_mc(profile):
    """MC of ŷᵀMŷ = ‖XKŷ‖²/n (tanh, c=0.5, w_K=w_Q=μ, ‖μ‖²=1) against κ_A with the finite-p diagonal d_n."""
    import symattn as sa

    from ..numerics import mc_quadratic_form

    vals, p = mc_quadratic_form("tanh", profile.n, C_SIG, sa.Geometry.aligned(SNR), draws=profile.draws,
                                seed=profile.seed)
    mc, se = float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(vals.size))
    kap = float(_kappa_value("tanh", C_SIG, aligned(SNR), n=profile.n))
    return Outcome(mc, kap, profile.k_se * se, "abs",
                   f"n={profile.n}, p={p}, draws={profile.draws}, se={se:.3g}, z={(mc - kap) / se:+.2f}, k={profile.k_se:g}")


@register("gamma-large/linear/monte-carlo-kappa", GROUP, "monte-carlo")
def linear_mc(profile):
    """MC of ŷᵀXᵀXŷ/n = ‖Xŷ‖²/n (c=0.5, ‖μ‖²=1) against κ_LR = ‖μ‖² + p/n."""
    import symattn as sa

    from ..numerics import mc_quadratic_form

    vals, p = mc_quadratic_form("tanh", profile.n, C_SIG, sa.Geometry(snr=SNR), draws=profile.draws,
                                seed=profile.seed, model="linear")
    mc, se = float(vals.mean()), float(vals.std(ddof=1) / np.sqrt(vals.size))
    ref = SNR + p / profile.n
    return Outcome(mc, ref, profile.k_se * se, "abs",
                   f"n={profile.n}, p={p}, draws={profile.draws}, se={se:.3g}, z={(mc - ref) / se:+.2f}, k={profile.k_se:g}")
