r"""Figure ``ridge``: the paper's Figure 1, ridge regression alone (E_LR, docs/theory.md §3).

Three panels of the linear-regression training error E_LR(γ) = (γ²/n) yᵀ(XᵀX/n + γ)^{-2} y
against its closed-form deterministic equivalent, with Monte Carlo points: (a) over γ at the
panel's (n, p) and ‖μ‖² = ``ridge_snr``; (b) over c = p/n at n = ``ridge_b_n`` and the small
γ = ``ridge_gamma_small`` (where E_LR → (1 − c)/(1 + ‖μ‖²) for c < 1 and → 0 for c > 1); (c) over
‖μ‖² at the panel's (n, p) and the same small γ. At ``--paper`` scale these are the paper's
sizes: p = 2048, n = 512; n = 4096; p = 512, n = 2048.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .records import FigureResult, Records
from .runner import Runner, Settings, mc_at, theory
from .style import COLORS, draw, finish_axes, new_figure, save

__all__ = ["plan_ridge", "make_ridge"]


def _tex(x: float) -> str:
    """``1e-05`` as ``10^{-5}`` (a power of ten), else ``%g``."""
    e = np.log10(x)
    return f"10^{{{int(round(e))}}}" if abs(e - round(e)) < 1e-12 else f"{x:g}"


def _panels(s: Settings):
    """(panel, n, [(c, snr, gammas)], x_name, xs) of the three panels."""
    na, pa = s.ridge_a
    nc, pc = s.ridge_c
    g = s.ridge_gamma_small
    return [
        ("a", na, [(pa / na, s.ridge_snr, s.ridge_gammas)], "gamma", np.asarray(s.ridge_gammas, dtype=float)),
        ("b", s.ridge_b_n, [(c, s.ridge_snr, (g,)) for c in s.ridge_b_cs], "c", np.asarray(s.ridge_b_cs, dtype=float)),
        ("c", nc, [(pc / nc, m2, (g,)) for m2 in s.ridge_c_snrs], "snr", np.asarray(s.ridge_c_snrs, dtype=float)),
    ]


def plan_ridge(s: Settings, runner: Runner):
    """Plan the E_LR-only Monte Carlo jobs of the three panels."""
    for _, n, jobs, _, _ in _panels(s):
        for c, snr, gammas in jobs:
            runner.ridge(n, c, gammas, snr)


def make_ridge(s: Settings, runner: Runner, out: Path) -> FigureResult:
    """Draw the three panels and write ``fig_ridge`` (PNG, PDF, CSV)."""
    from ..model import Geometry, dimension

    rec = Records("ridge")
    fig, axes = new_figure(3, width=4.3, height=3.6)
    titles = {"a": r"(a) over $\gamma$", "b": r"(b) over $c=p/n$", "c": r"(c) over $\|\mu\|^2$"}
    for ax, (panel, n, jobs, x_name, xs) in zip(axes, _panels(s)):
        mc, thp, ps = [], [], []
        for c, snr, gammas in jobs:
            res = runner.result(runner.ridge(n, c, gammas, snr))
            mc += [mc_at(res, "linear", g) for g in gammas]
            thp += [float(v) for v in np.atleast_1d(theory("tanh", c, np.asarray(gammas), Geometry(snr=snr),
                                                           model="linear"))]
            ps += [dimension(n, c)] * len(gammas)
        c0, snr0, _ = jobs[0]
        if x_name == "gamma":
            grid = np.logspace(np.log10(xs.min()) - 0.25, np.log10(xs.max()) + 0.25, s.curve_points)
            th = theory("tanh", c0, grid, Geometry(snr=snr0), model="linear")
            title = titles[panel] + rf", $n={n}$, $p={ps[0]}$, $\|\mu\|^2={snr0:g}$"
        elif x_name == "c":
            grid = np.linspace(xs.min(), xs.max(), 4 * s.curve_points + 1)
            th = theory("tanh", grid, s.ridge_gamma_small, Geometry(snr=snr0), model="linear")
            title = titles[panel] + rf", $n={n}$, $\gamma={_tex(s.ridge_gamma_small)}$"
        else:
            grid = np.linspace(xs.min(), xs.max(), s.curve_points)
            th = np.array([theory("tanh", c0, s.ridge_gamma_small, Geometry(snr=m2), model="linear") for m2 in grid],
                          dtype=float)
            title = titles[panel] + rf", $n={n}$, $p={ps[0]}$, $\gamma={_tex(s.ridge_gamma_small)}$"
        rec.curve(panel, "E_LR", x_name, grid, th, model="linear", activation="linear", n=n)
        for k, (x, t_, (m, se)) in enumerate(zip(xs, thp, mc)):
            c, snr, gammas = jobs[0] if x_name == "gamma" else jobs[k]
            gamma = float(x) if x_name == "gamma" else s.ridge_gamma_small
            rec.point(panel, "E_LR", x_name, x, t_, m, se, model="linear", activation="linear", n=n, p=ps[k],
                      draws=s.ridge_draws, c=float(c), gamma=gamma, snr=float(snr))
        draw(ax, grid, th, xs, mc, COLORS["linear"], "D", x_name == "gamma")
        if x_name != "snr":  # E_LR spans decades as γ → 0 (c > 1): a log axis shows them
            ax.set_yscale("log")
        finish_axes(ax, {"gamma": r"ridge $\gamma$", "c": r"$c = p/n$", "snr": r"signal $\|\mu\|^2$"}[x_name], title)
    fig.suptitle(r"ridge regression $E_{LR}$ (the paper's Figure 1): theory lines, Monte Carlo markers "
                 rf"($\pm1$ s.e., {s.ridge_draws} draws, seed {s.seed})", fontsize="small")
    return FigureResult("ridge", rec, save(fig, rec, out, "fig_ridge"))
