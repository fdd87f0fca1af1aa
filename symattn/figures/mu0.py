r"""Figure ``mu0`` (claim 1 of docs/theory.md §8): with μ = 0, attention does not beat linear regression.

Three panels of E_A for tanh and ReLU against E_LR, theory lines with Monte Carlo points: (a) over
γ at c = 1; (b) over c at γ = γ_fixed; (c) with W = I (w_K = w_Q = 0) over ‖μ‖² at c = 1,
γ = γ_fixed, where strong-signal points (|t| > 0.15) carry the finite-p corrected theory
(docs/theory.md §10).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .records import FigureResult, Records
from .runner import Runner, Settings, finite_p_theory, mc_at, model_of, strength, theory
from .style import ACTIVATION_COLORS as COLORS
from .style import ACTIVATION_MARKERS as MARKERS
from .style import (STRONG_NOTE, add_legend, curve_grid, curve_label, draw, finish_axes, log_ticks, mc_note, new_figure,
                    save)


MU0_ACTS = ("tanh", "relu", "linear")


def plan_mu0(s: Settings, runner: Runner):
    for act in ("tanh", "relu"):  # E_LR is read from the tanh runs
        for c in set(s.mu0_cs) | {1.0}:
            runner.synthetic(act, c, linear=act == "tanh")
        for snr in s.mu0_snrs:
            runner.synthetic(act, 1.0, {"snr": snr}, linear=act == "tanh")




def make_mu0(s: Settings, runner: Runner, out: Path) -> FigureResult:
    from ..model import Geometry, dimension

    rec = Records("mu0")
    g0 = s.gamma_fixed
    fig, axes = new_figure(3, width=4.3, height=3.6)
    p = dimension(s.n, 1.0)

    # (a) against γ, c = 1, μ = 0
    ax, entries = axes[0], []
    grid = curve_grid(s.mu0_gammas, s.curve_points)
    gam = np.asarray(s.mu0_gammas, dtype=float)
    for act in MU0_ACTS:
        model, f = model_of(act)
        th, thp = theory(f, 1.0, grid, n=s.n, model=model), theory(f, 1.0, gam, n=s.n, model=model)
        res = runner.result(runner.synthetic(f, 1.0))
        mc = [mc_at(res, model, g) for g in gam]
        name = curve_label(act)
        rec.curve("a", name, "gamma", grid, th, model=model, activation=act, c=1.0, snr=0.0, n=s.n)
        for g, t_, (m, se) in zip(gam, thp, mc):
            rec.point("a", name, "gamma", g, t_, m, se, model=model, activation=act, n=s.n, p=p, draws=s.draws,
                      t=strength(None, p), c=1.0, gamma=float(g), snr=0.0)
        entries.append((draw(ax, grid, th, gam, mc, COLORS[act], MARKERS[act], True), name))
    finish_axes(ax, r"ridge $\gamma$", r"(a) $\mu=0$, $c=1$")
    add_legend(ax, entries, loc="upper left")

    # (b) against c, γ = gamma_fixed, μ = 0
    ax = axes[1]
    grid = curve_grid(s.mu0_cs, s.curve_points, pad=0.15)
    cs = np.asarray(s.mu0_cs, dtype=float)
    for act in MU0_ACTS:
        model, f = model_of(act)
        th, thp = theory(f, grid, g0, n=s.n, model=model), theory(f, cs, g0, n=s.n, model=model)
        mc = [mc_at(runner.result(runner.synthetic(f, c)), model, g0) for c in cs]
        name = curve_label(act)
        rec.curve("b", name, "c", grid, th, model=model, activation=act, gamma=g0, snr=0.0, n=s.n)
        for c, t_, (m, se) in zip(cs, thp, mc):
            pc = dimension(s.n, c)
            rec.point("b", name, "c", c, t_, m, se, model=model, activation=act, n=s.n, p=pc, draws=s.draws,
                      t=strength(None, pc), c=float(c), gamma=g0, snr=0.0)
        draw(ax, grid, th, cs, mc, COLORS[act], MARKERS[act], True)
    finish_axes(ax, r"$c = p/n$", rf"(b) $\mu=0$, $\gamma={g0:g}$")
    log_ticks(ax, cs)

    # (c) against ‖μ‖², W = I, c = 1, γ = gamma_fixed
    ax = axes[2]
    snrs = np.asarray((0.0,) + tuple(s.mu0_snrs), dtype=float)
    grid = np.linspace(0.0, snrs.max(), s.curve_points)
    for act in MU0_ACTS:
        model, f = model_of(act)
        th = np.array([theory(f, 1.0, g0, Geometry(snr=m2), n=s.n, model=model) for m2 in grid], dtype=float)
        thp = np.array([theory(f, 1.0, g0, Geometry(snr=m2), n=s.n, model=model) for m2 in snrs], dtype=float)
        mc = [mc_at(runner.result(runner.synthetic(f, 1.0, {"snr": m2} if m2 else None)), model, g0) for m2 in snrs]
        name = curve_label(act)
        rec.curve("c", name, "snr", grid, th, model=model, activation=act, c=1.0, gamma=g0, n=s.n)
        strong, cor = [], []
        for m2, t_, (m, se) in zip(snrs, thp, mc):
            tt = strength(Geometry(snr=m2), p)
            row = rec.point("c", name, "snr", m2, t_, m, se, model=model, activation=act, n=s.n, p=p,
                            draws=s.draws, t=tt, c=1.0, gamma=g0, snr=float(m2),
                            theory_finite_p=finite_p_theory(f, 1.0, g0, Geometry(snr=m2), s.n, tt, model=model))
            strong.append(bool(row["strong_signal"]))
            cor.append(row["theory_finite_p"])
        draw(ax, grid, th, snrs, mc, COLORS[act], MARKERS[act], False, strong=strong, corrected=cor)
    finish_axes(ax, r"signal $\|\mu\|^2$ (with $W=I$)", rf"(c) $W=I$, $c=1$, $\gamma={g0:g}$")
    fig.suptitle(r"$\mu = 0$: attention $E_A$ (tanh, ReLU) vs linear regression $E_{LR}$" + "\n" + mc_note(s)
                 + "; " + STRONG_NOTE, fontsize="small")
    return FigureResult("mu0", rec, save(fig, rec, out, "fig_mu0"))
