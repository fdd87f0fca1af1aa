r"""Checks of the finite-p correction (issue 7; symattn/finite_p.py, docs/finite_p.md).

Registered with :func:`verification.registry.register` (group ``finite-p``) and runnable on
their own with :func:`finite_p_checks`:

- reductions of the corrected system (float64): μ = w = 0 (it is then the asymptotic bulk with
  d_n, to solver precision); f(x) = x (the kernel is exactly linear: equal to the asymptotic
  theory with the exact diagonal d = 1 up to O(k/p)); t → 0 (n = 10⁵); the mild setting of the
  acceptance (tanh, c = 1, ‖μ‖² = 1, w = μ, n = 1000: t = 0.063) within 0.5 %;
- the pencil's block inverse (symbolic) and the Gaussian coefficients against closed forms
  (erf, cos; mpmath); mpmath against float64 on a small latent quadrature;
- Monte Carlo on the three strong-signal settings of MATH-FINITE-P.md at two sizes n and 2n
  (tanh c = 0.3, ‖μ‖² = 3, w_K = w_Q = μ; erf c = 1, ‖μ‖² = 2, w_K = 2μ, w_Q = μ; cos c = 1,
  ‖μ‖² = 4, w = μ): every cell within max(3 se, 3 %) of the corrected theory, and the corrected
  gap a small fraction of the asymptotic one at both sizes ("the gap shrinks faster in p").
  Quick profile: n = 300, 600; full profile: n = 1000, 2000 (draws from the profile).
"""

from __future__ import annotations

import numpy as np

from .registry import FULL, QUICK, Outcome, register, run_checks

GROUP = "finite-p"

#: the three strong-signal settings of MATH-FINITE-P.md: f, c, Gram keywords, γ values
SETTINGS = {
    "tanh": ("tanh", 0.3, dict(snr=3, wk2=3, wq2=3, mu_wk=3, mu_wq=3, wk_wq=3), (0.03, 0.3, 3.0)),
    "erf": ("erf", 1.0, dict(snr=2, wk2=8, wq2=2, mu_wk=4, mu_wq=2, wk_wq=4), (0.03, 0.3, 3.0)),
    "cos": ("cos", 1.0, dict(snr=4, wk2=4, wq2=4, mu_wk=4, mu_wq=4, wk_wq=4), (0.01, 0.1, 1.0)),
}
#: acceptance of a Monte Carlo cell: |MC − theory| ≤ max(K_SE·se, REL·theory)
K_SE, REL = 3.0, 0.03
#: the corrected gap must be at most this fraction of the asymptotic gap (summed over γ)
GAP_RATIO = 0.5


def sizes(profile) -> tuple:
    """(n, 2n) with n = 300 for the quick profile and profile.n otherwise."""
    n = 300 if profile.n < 1000 else profile.n
    return n, 2 * n


_MC: dict = {}


def measure(name: str, n: int, draws: int, seed: int = 0) -> dict:
    """Monte Carlo (exact f, f on the diagonal) and both theories at one size; cached per process."""
    key = (name, n, draws, seed)
    if key not in _MC:
        import warnings

        import symattn as sa

        f, c, gk, gam = SETTINGS[name]
        geom = sa.Geometry(**gk)
        res = sa.simulate(f, n=n, c=c, gamma=list(gam), geometry=geom, draws=draws, seed=seed,
                          models=("attention",), progress=False)
        mc = res.attention.mean(axis=0)
        se = res.attention.std(axis=0, ddof=1) / np.sqrt(draws)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = np.asarray(sa.memorization_error(f, c, list(gam), geometry=geom, n=n), float)
        cor = np.asarray(sa.memorization_error(f, c, list(gam), geometry=geom, n=n, correction="finite-p"), float)
        _MC[key] = dict(gamma=np.array(gam), mc=mc, se=se, old=old, cor=cor, p=res.p,
                        t=float(geom.strength(res.p)))
    return _MC[key]


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
                      f"theory at n and 2n (MATH-FINITE-P.md setting)")
    shrinks.__doc__ = (f"{name}: the corrected gap is at most {GAP_RATIO:g} of the asymptotic gap at n and 2n")
    register(f"finite-p/{name}/corrected-vs-monte-carlo", GROUP, "monte-carlo", quick=True)(within)
    register(f"finite-p/{name}/gap-shrinks", GROUP, "monte-carlo", quick=True)(shrinks)


for _name in SETTINGS:
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
    for gk, c in ((SETTINGS["tanh"][2], 0.3), (SETTINGS["erf"][2], 1.0)):
        g = sa.Geometry(**gk)
        E1 = sa.memorization_error("linear", c, [0.03, 0.3, 3.0], geometry=g, n=1000, correction="finite-p")
        E0 = sa.memorization_error("linear", c, [0.03, 0.3, 3.0], geometry=g)
        worst = max(worst, _rel(E1, E0))
    return Outcome(worst, 0.0, 3e-3, "abs", "tanh and erf geometries at n = 1000 (p = 300, 1000)")


@register("finite-p/reduces/t->0", GROUP, "float64")
def t_to_zero(profile):
    """t → 0: corrected → asymptotic (tanh, c = 0.3, ‖μ‖² = 3, w = μ at n = 10⁵: t = 0.069)."""
    import warnings

    import symattn as sa

    g = sa.Geometry(**SETTINGS["tanh"][2])
    E1 = sa.memorization_error("tanh", 0.3, [0.03, 3.0], geometry=g, n=100000, correction="finite-p")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        E0 = sa.memorization_error("tanh", 0.3, [0.03, 3.0], geometry=g, n=100000)
    return Outcome(_rel(E1, E0), 0.0, 5e-3, "abs", f"corrected {np.round(E1, 5)}, asymptotic {np.round(E0, 5)}")


@register("finite-p/mild-setting-agrees", GROUP, "float64")
def mild(profile):
    """Mild setting (tanh, c = 1, ‖μ‖² = 1, w = μ, n = 1000, t = 0.063): corrected and asymptotic within 0.5 %."""
    import symattn as sa

    g = sa.Geometry.aligned(1.0)
    gam = [0.01, 0.1, 1.0, 10.0]
    E1 = sa.memorization_error("tanh", 1.0, gam, geometry=g, n=1000, correction="finite-p")
    E0 = sa.memorization_error("tanh", 1.0, gam, geometry=g, n=1000)
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

    from symattn.finite_p import shifted_moments

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
    from symattn.finite_p import finite_p_error

    g = sa.Geometry.aligned(1.0)
    En = finite_p_error("tanh", [0.5], [0.1], g, 200, context("numpy"), latent_nodes=4)
    ctx = context("mpmath", 20)
    with ctx:
        Em = finite_p_error("tanh", [0.5], [0.1], g, 200, ctx, latent_nodes=4)
    return Outcome(abs(float(Em[0]) - float(En[0])), 0.0, 1e-10, "abs", f"E = {float(Em[0]):.15f}")


def finite_p_checks(quick: bool) -> list:
    """Run every ``finite-p`` check (profile QUICK or FULL); returns the list of CheckResult."""
    return run_checks(quick=quick, only="finite-p", profile=QUICK if quick else FULL)
