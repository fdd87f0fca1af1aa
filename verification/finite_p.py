r"""Checks of the finite-p correction (docs/theory.md §10; :mod:`symattn.backends.finite_p`).

Registered with :func:`symattn.verification.registry.register` (group ``finite-p``) and runnable on
their own with :func:`finite_p_checks`:

- reductions of the corrected system (float64): μ = w = 0 (it is then the asymptotic bulk with
  d_n, to solver precision); f(x) = x (the kernel is exactly linear: equal to the asymptotic
  theory with the exact diagonal d = 1 up to O(k/p)); t → 0 (n = 10⁵); the mild setting of the
  acceptance (tanh, c = 1, ‖μ‖² = 1, w = μ, n = 1000: t = 0.063) within 0.5 %;
- the pencil's block inverse (symbolic) and the Gaussian coefficients against closed forms
  (erf, cos; mpmath); mpmath against float64 on a small latent quadrature;
- Monte Carlo on the three strong-signal settings :data:`MC_SETTINGS` at two sizes n and 2n
  (tanh c = 0.3, ‖μ‖² = 3, w_K = w_Q = μ; erf c = 1, ‖μ‖² = 2, w_K = 2μ, w_Q = μ; cos c = 1,
  ‖μ‖² = 4, w = μ): every cell within max(3 se, 3 %) of the corrected theory, and the corrected
  gap a small fraction of the asymptotic one at both sizes ("the gap shrinks faster in p").
  Quick profile: n = 300, 600; full profile: n = 1000, 2000 (draws from the profile).

:data:`SETTINGS` is the one table of the finite-p settings (also used by ``derivations/finite_p.py``
and tests/test_finite_p.py); :func:`constant_slope_traces` is the constant-slope check of the pencil.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from symattn.caching import memoize

from .registry import FULL, QUICK, Outcome, register, run_checks

GROUP = "finite-p"


@dataclass(frozen=True)
class Setting:
    """One finite-p setting: activation ``f``, c = p/n, the :class:`~symattn.model.Geometry` keywords
    ``gram``, the ridges ``gammas`` and a one-line ``description``."""

    f: str
    c: float
    gram: dict
    gammas: tuple
    description: str

    def geometry(self):
        """The :class:`~symattn.model.Geometry` of ``gram``."""
        from symattn.model import Geometry

        return Geometry(**self.gram)


#: the finite-p settings of docs/theory.md §10 and §11.6 (the order is that of docs/finite_p.md's tables)
SETTINGS = {
    "tanh": Setting("tanh", 0.3, dict(snr=3, wk2=3, wq2=3, mu_wk=3, mu_wq=3, wk_wq=3), (0.03, 0.3, 3.0),
                    "tanh, c=0.3, ‖μ‖²=3, w_K=w_Q=μ"),
    "erf": Setting("erf", 1.0, dict(snr=2, wk2=8, wq2=2, mu_wk=4, mu_wq=2, wk_wq=4), (0.03, 0.3, 3.0),
                   "erf, c=1, ‖μ‖²=2, w_K=2μ, w_Q=μ"),
    "cos": Setting("cos", 1.0, dict(snr=4, wk2=4, wq2=4, mu_wk=4, mu_wq=4, wk_wq=4), (0.01, 0.1, 1.0),
                   "cos, c=1, ‖μ‖²=4, w_K=w_Q=μ"),
    "mild": Setting("tanh", 1.0, dict(snr=1, wk2=1, wq2=1, mu_wk=1, mu_wq=1, wk_wq=1), (0.01, 0.1, 1.0, 10.0),
                    "tanh, c=1, ‖μ‖²=1, w_K=w_Q=μ (mild)"),
    # non-collinear (latent dimension k = 3): w_K = μ + 1.5e₁ (tanh) or μ + 2e₁ (erf), w_Q = μ + e₂, e₁ ⟂ e₂ ⟂ μ
    "tanh-noncollinear": Setting("tanh", 0.5, dict(snr=2, wk2=4.25, wq2=3, mu_wk=2, mu_wq=2, wk_wq=2),
                                 (0.03, 0.3, 3.0), "tanh, c=0.5, ‖μ‖²=2, w_K=μ+1.5e₁, w_Q=μ+e₂ (k=3)"),
    "erf-noncollinear": Setting("erf", 1.0, dict(snr=2, wk2=6, wq2=3, mu_wk=2, mu_wq=2, wk_wq=2),
                                (0.03, 0.3, 3.0), "erf, c=1, ‖μ‖²=2, w_K=μ+2e₁, w_Q=μ+e₂ (k=3)"),
}
#: the strong-signal settings that ``symattn verify`` checks against Monte Carlo
MC_SETTINGS = ("tanh", "erf", "cos")
#: acceptance of a Monte Carlo cell: |MC − theory| ≤ max(K_SE·se, REL·theory)
K_SE, REL = 3.0, 0.03
#: the corrected gap must be at most this fraction of the asymptotic gap (summed over γ)
GAP_RATIO = 0.5


def constant_slope_traces(c=0.7, g=0.1, a1=0.6, s2=0.15, d=0.02):
    r"""The pencil's Dyson equation with a constant slope against the bulk solver (docs/theory.md §10.3, §5–6).

    With 𝔻 ≡ a1 and Σ² ≡ s² on one latent node, the blocks of 𝒢 (:func:`symattn.backends.finite_p.solve_pencil`)
    give the six bulk traces T_Q⁽⁰⁾ = 𝒢11, T_QK⁽⁰⁾ = −𝒢13/√c, T_KQK⁽⁰⁾ = 𝒢33/c, T_QK⁽¹⁾ = 𝒢12/√c,
    T_KQK⁽¹⁾ = (1 − 𝒢32)/c and T_KQK⁽²⁾ = (𝒢22 + 1)/c, which the bulk solver computes from its
    three-unknown system (:func:`symattn.backends.solver.traces`).

    Parameters
    ----------
    c, g, a1, s2, d : float
        p/n, γ, the slope, the noise variance and the diagonal.

    Returns
    -------
    pencil, bulk : list of float
        The six traces from the pencil and from the bulk solver.

    Examples
    --------
    >>> pencil, bulk = constant_slope_traces()
    >>> bool(max(abs(a - b) / abs(b) for a, b in zip(pencil, bulk)) < 1e-9)
    True
    """
    from symattn.backends import solver
    from symattn.backends.context import context
    from symattn.backends.finite_p import solve_pencil

    ctx = context("numpy")
    with ctx:
        sol = solver.solve_bulk(ctx, np.array([c]), np.array([g]), a1, s2, d)
        T, _ = solver.traces(ctx, sol, solver.bulk_derivative(ctx, sol))
    one = np.ones((1, 1))
    G = solve_pencil(ctx, c, g, d, np.array([1.0]), (np.array([a1]), one, one), np.full((1, 1), s2)).G[0].real
    pencil = [G[0, 0], -G[0, 2] / math.sqrt(c), G[2, 2] / c, G[0, 1] / math.sqrt(c), (1 - G[2, 1]) / c,
              (G[1, 1] + 1) / c]
    return pencil, [T[0][0], T[0][2], T[0][5], T[0][3], T[0][6], T[0][7]]


def sizes(profile) -> tuple:
    """(n, 2n) with n = 300 for the quick profile and profile.n otherwise."""
    n = 300 if profile.n < 1000 else profile.n
    return n, 2 * n


@memoize("verification.finite_p_measured", 64)
def measure(name: str, n: int, draws: int, seed: int = 0) -> dict:
    """Monte Carlo (exact f, f on the diagonal) and both theories at one size; cached per process."""
    import warnings

    import symattn as sa

    st = SETTINGS[name]
    f, c, gam, geom = st.f, st.c, st.gammas, st.geometry()
    res = sa.simulate(f, n=n, c=c, gamma=list(gam), geometry=geom, draws=draws, seed=seed,
                      models=("attention",), progress=False)
    mc = res.attention.mean(axis=0)
    se = res.attention.std(axis=0, ddof=1) / np.sqrt(draws)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        old = np.asarray(sa.memorization_error(f, c, list(gam), geometry=geom, n=n), float)
    cor = np.asarray(sa.memorization_error(f, c, list(gam), geometry=geom, n=n, correction="finite-p"), float)
    return dict(gamma=np.array(gam), mc=mc, se=se, old=old, cor=cor, p=res.p, t=float(geom.strength(res.p)))


def _describe(name, n, m) -> str:
    cells = ", ".join(f"γ={g:g}: MC {v:.4f}±{s:.4f} old {o:.4f} ({(v - o) / o:+.1%}) cor {q:.4f} ({(v - q) / q:+.1%})"
                      for g, v, s, o, q in zip(m["gamma"], m["mc"], m["se"], m["old"], m["cor"]))
    return f"{name} n={n} p={m['p']} t={m['t']:.3f}: {cells}"


def _make_mc_checks(name):
    def within(profile):
        worst, parts = 0.0, []
        for n in sizes(profile):
            m = measure(name, n, profile.draws, profile.seed)
            tol = np.maximum(K_SE * m["se"], REL * m["cor"])
            worst = max(worst, float(np.max(np.abs(m["mc"] - m["cor"]) / tol)))
            parts.append(_describe(name, n, m))
        return Outcome(worst, 1.0, 0.0, "le",
                       f"max over cells of |MC − corrected|/max({K_SE:g}se, {REL:.0%}); draws={profile.draws}; "
                       + "; ".join(parts))

    def shrinks(profile):
        ratios, parts = [], []
        for n in sizes(profile):
            m = measure(name, n, profile.draws, profile.seed)
            r = float(np.sum(np.abs(m["mc"] - m["cor"])) / np.sum(np.abs(m["mc"] - m["old"])))
            ratios.append(r)
            parts.append(f"n={n}: Σ|gap_cor|/Σ|gap_old| = {r:.3f}")
        return Outcome(max(ratios), GAP_RATIO, 0.0, "le", "; ".join(parts))

    within.__doc__ = (f"{name}: exact Monte Carlo within max({K_SE:g} se, {REL:.0%}) of the finite-p corrected "
                      f"theory at n and 2n (docs/theory.md §11.6 setting)")
    shrinks.__doc__ = (f"{name}: the corrected gap is at most {GAP_RATIO:g} of the asymptotic gap at n and 2n")
    register(f"finite-p/{name}/corrected-vs-monte-carlo", GROUP, "monte-carlo", quick=True)(within)
    register(f"finite-p/{name}/gap-shrinks", GROUP, "monte-carlo", quick=True)(shrinks)


for _name in MC_SETTINGS:
    _make_mc_checks(_name)


def _rel(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(np.max(np.abs(a - b) / np.abs(b)))


@register("finite-p/reduces/mu=w=0", GROUP, "float64")
def mu_zero(profile):
    """μ = w = 0: the corrected system is the asymptotic bulk with the finite-p diagonal d_n."""
    import symattn as sa

    worst = 0.0
    for f in ("tanh", "relu"):
        for c in (0.5, 2.0):
            E1 = sa.memorization_error(f, c, [0.01, 1.0], n=500, correction="finite-p")
            E0 = sa.memorization_error(f, c, [0.01, 1.0], n=500)
            worst = max(worst, _rel(E1, E0))
    return Outcome(worst, 0.0, 1e-8, "abs", "tanh, relu; c = 0.5, 2; γ = 0.01, 1; n = 500")


@register("finite-p/reduces/linear-f", GROUP, "float64")
def linear_f(profile):
    """f(x) = x (exactly linear kernel): corrected = asymptotic with d = 1, up to O(k/p) (k ≤ 3)."""
    import symattn as sa

    worst = 0.0
    for st in (SETTINGS["tanh"], SETTINGS["erf"]):
        g, c = st.geometry(), st.c
        E1 = sa.memorization_error("linear", c, [0.03, 0.3, 3.0], geometry=g, n=1000, correction="finite-p")
        E0 = sa.memorization_error("linear", c, [0.03, 0.3, 3.0], geometry=g)
        worst = max(worst, _rel(E1, E0))
    return Outcome(worst, 0.0, 3e-3, "abs", "tanh and erf geometries at n = 1000 (p = 300, 1000)")


@register("finite-p/reduces/t->0", GROUP, "float64")
def t_to_zero(profile):
    """t → 0: corrected → asymptotic (tanh, c = 0.3, ‖μ‖² = 3, w = μ at n = 10⁵: t = 0.069)."""
    import warnings

    import symattn as sa

    g = SETTINGS["tanh"].geometry()
    E1 = sa.memorization_error("tanh", 0.3, [0.03, 3.0], geometry=g, n=100000, correction="finite-p")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        E0 = sa.memorization_error("tanh", 0.3, [0.03, 3.0], geometry=g, n=100000)
    return Outcome(_rel(E1, E0), 0.0, 5e-3, "abs", f"corrected {np.round(E1, 5)}, asymptotic {np.round(E0, 5)}")


@register("finite-p/mild-setting-agrees", GROUP, "float64")
def mild(profile):
    """Mild setting (tanh, c = 1, ‖μ‖² = 1, w = μ, n = 1000, t = 0.063): corrected and asymptotic within 0.5 %."""
    import symattn as sa

    st = SETTINGS["mild"]
    g, gam = st.geometry(), list(st.gammas)
    E1 = sa.memorization_error(st.f, st.c, gam, geometry=g, n=1000, correction="finite-p")
    E0 = sa.memorization_error(st.f, st.c, gam, geometry=g, n=1000)
    return Outcome(_rel(E1, E0), 0.0, 5e-3, "abs", f"corrected {np.round(E1, 5)}, asymptotic {np.round(E0, 5)}")


@register("finite-p/pencil-inverse", GROUP, "symbolic")
def pencil_inverse(profile):
    """The blocks of the inverse of the 3×3 pencil are Q0, √cQ0K0ᵀS, −√cQ0K0ᵀ, −S + cSK0Q0K0ᵀS, …"""
    from symattn.systems.finite_p import check_pencil

    ok = check_pencil()
    return Outcome(0.0 if ok else 1.0, 0.0, 0.0, "abs", "SymPy inverse of the pencil vs the block formulas", passed=ok)


@register("finite-p/coefficients/closed-forms", GROUP, "mpmath")
def closed_forms(profile):
    """F, F', V of erf and cos by Gaussian quadrature (dps digits) against their closed forms."""
    import mpmath as mp

    from symattn.activations.shifted import shifted_moments

    dps = profile.dps
    worst = mp.mpf(0)
    with mp.workdps(dps + 10):
        for s in (mp.mpf("0.7"), mp.mpf("-1.3")):
            e = shifted_moments("erf", s, dps)
            ref = {"F": mp.erf(s / mp.sqrt(3)), "F1": 2 / mp.sqrt(3 * mp.pi) * mp.exp(-s**2 / 3)}
            for k, v in ref.items():
                worst = max(worst, abs(e[k] - v))
            q = shifted_moments("cos", s, dps)
            h = mp.exp(-mp.mpf(1) / 2)
            ref = {"F": h * (mp.cos(s) - 1), "F1": -h * mp.sin(s),
                   "V": (1 + mp.exp(-2) * mp.cos(2 * s)) / 2 - mp.exp(-1) * mp.cos(s) ** 2}
            for k, v in ref.items():
                worst = max(worst, abs(q[k] - v))
    return Outcome(float(worst), 0.0, float(mp.mpf(10) ** (5 - dps)), "abs", f"dps = {dps}, s = 0.7, −1.3")


@register("finite-p/mpmath-vs-float64", GROUP, "mpmath", quick=False)
def mp_vs_float(profile):
    """The corrected system in mpmath (dps 20) and float64 agree on a small latent quadrature (4 nodes)."""
    import symattn as sa
    from symattn.backends.context import context
    from symattn.backends.finite_p import finite_p_error

    g = sa.Geometry.aligned(1.0)
    En = finite_p_error(context("numpy"), "tanh", [0.5], [0.1], g, 200, latent_nodes=4)
    ctx = context("mpmath", 20)
    with ctx:
        Em = finite_p_error(ctx, "tanh", [0.5], [0.1], g, 200, latent_nodes=4)
    return Outcome(abs(float(Em[0]) - float(En[0])), 0.0, 1e-10, "abs", f"E = {float(Em[0]):.15f}")


def finite_p_checks(quick: bool) -> list:
    """Run every ``finite-p`` check (profile QUICK or FULL); returns the list of CheckResult."""
    return run_checks(quick=quick, only="finite-p", profile=QUICK if quick else FULL)
