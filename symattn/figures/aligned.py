r"""Figure ``aligned`` (claim 2 of docs/theory.md §8): weights aligned with the signal.

w_K = w_Q = θμ/‖μ‖ (c = 0.5, ‖μ‖² = 1, tanh): E_A against E_LR (a) over θ, one colour per γ,
and (b) over γ, one colour per θ; (c) the theory map of E_A/E_LR over (θ, γ) with the contours
E_A = E_LR (the gap reverses, E_A < E_LR, at larger γ) and E_A = 1.01 E_LR (the gap is closed to
below 1 % at smaller γ), and the Monte Carlo sign of E_A − E_LR at the simulated points.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .records import FigureResult, Records, STRONG_SIGNAL_T
from .runner import Runner, Settings, finite_p_theory, mc_at, strength, theory
from .style import add_legend, curve_grid, draw, finish_axes, mc_note, new_figure, save


def plan_aligned(s: Settings, runner: Runner):
    from ..model import Geometry

    for th in s.aligned_thetas:
        runner.synthetic("tanh", s.aligned_c, Geometry.aligned(s.aligned_snr, th), linear=True)


def make_aligned(s: Settings, runner: Runner, out: Path) -> FigureResult:
    import matplotlib
    import matplotlib.colors as mcolors
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MultipleLocator

    from ..model import Geometry, dimension

    rec = Records("aligned")
    c, m2 = s.aligned_c, s.aligned_snr
    p = dimension(s.n, c)
    thetas = np.asarray(s.aligned_thetas, dtype=float)
    gam = np.asarray(s.aligned_gammas, dtype=float)
    fig, axes = new_figure(3, width=4.4, height=3.8)
    cmap = matplotlib.colormaps["viridis"]
    meta = dict(c=c, snr=m2, activation="tanh")
    lin_geo = Geometry(snr=m2)

    def geo(t):
        return Geometry.aligned(m2, float(t))

    def res_of(t):
        return runner.result(runner.synthetic("tanh", c, geo(t)))

    strong_t = {float(t): abs(strength(geo(t), p)) > STRONG_SIGNAL_T for t in thetas}

    # (a) against θ, one colour per γ; E_LR does not depend on θ (dashed)
    ax, entries = axes[0], []
    tgrid = np.linspace(0.0, thetas.max() + 0.5, s.curve_points)
    for k, g in enumerate(gam):
        col = cmap(k / max(1, len(gam) - 1) * 0.85)
        th = np.array([theory("tanh", c, g, geo(t), n=s.n) for t in tgrid], dtype=float)
        thp = np.array([theory("tanh", c, g, geo(t), n=s.n) for t in thetas], dtype=float)
        lr = float(theory("tanh", c, g, lin_geo, model="linear"))
        mc = [mc_at(res_of(t), "attention", g) for t in thetas]
        mcl = [mc_at(res_of(t), "linear", g) for t in thetas]
        name, lname = rf"$E_A$, $\gamma={g:g}$", rf"$E_{{LR}}$, $\gamma={g:g}$"
        rec.curve("a", name, "theta", tgrid, th, model="attention", gamma=float(g), n=s.n, **meta)
        rec.curve("a", lname, "theta", [0.0, tgrid[-1]], [lr, lr], model="linear", gamma=float(g), **meta)
        cor = []
        for t, t_, (mm, se), (ml, sl) in zip(thetas, thp, mc, mcl):
            tt = strength(geo(t), p)
            cor.append(rec.point("a", name, "theta", t, t_, mm, se, model="attention", n=s.n, p=p, draws=s.draws,
                      t=tt, gamma=float(g), theta=float(t),
                      theory_finite_p=finite_p_theory("tanh", c, g, geo(t), s.n, tt), **meta)["theory_finite_p"])
            rec.point("a", lname, "theta", t, lr, ml, sl, model="linear", n=s.n, p=p, draws=s.draws,
                      gamma=float(g), theta=float(t), **meta)
        entries.append((draw(ax, tgrid, th, thetas, mc, col, "o", False, strong=[strong_t[float(t)] for t in thetas],
                              corrected=cor), rf"$\gamma={g:g}$"))
        ax.plot(tgrid, np.full_like(tgrid, lr), ls="--", color=col, lw=1)
        ax.errorbar(thetas, [m for m, _ in mcl], yerr=[e for _, e in mcl], fmt="D", ms=3, color=col, alpha=0.6,
                    capsize=2)
    entries.append(((Line2D([], [], color="0.3", ls="--"), Line2D([], [], color="0.3", marker="D", ms=3, ls="")),
                    r"$E_{LR}$ (no $\theta$ dependence)"))
    finish_axes(ax, r"weight norm $\theta$  ($w_K=w_Q=\theta\mu/\|\mu\|$)", r"(a) $E_A$ over $\theta$")
    add_legend(ax, entries, loc="center right", bbox_to_anchor=(1.0, 0.68))

    # (b) against γ, one colour per θ
    ax, entries = axes[1], []
    ggrid = curve_grid(gam, s.curve_points)
    lr = theory("tanh", c, ggrid, lin_geo, model="linear")
    lrp = theory("tanh", c, gam, lin_geo, model="linear")
    rec.curve("b", r"$E_{LR}$", "gamma", ggrid, lr, model="linear", **meta)
    ml = [mc_at(res_of(thetas[0]), "linear", g) for g in gam]
    for g, t_, (m, se) in zip(gam, lrp, ml):
        rec.point("b", r"$E_{LR}$", "gamma", g, t_, m, se, model="linear", n=s.n, p=p, draws=s.draws,
                  gamma=float(g), theta=float(thetas[0]), **meta)
    entries.append((draw(ax, ggrid, lr, gam, ml, "black", "D", True, linestyle="--"), r"$E_{LR}$"))
    for k, t in enumerate(thetas):
        col = cmap(k / max(1, len(thetas) - 1) * 0.85)
        th, thp = theory("tanh", c, ggrid, geo(t), n=s.n), theory("tanh", c, gam, geo(t), n=s.n)
        mc = [mc_at(res_of(t), "attention", g) for g in gam]
        name = rf"$E_A$, $\theta={t:g}$"
        rec.curve("b", name, "gamma", ggrid, th, model="attention", theta=float(t), n=s.n, **meta)
        cor = []
        for g, t_, (m, se) in zip(gam, thp, mc):
            tt = strength(geo(t), p)
            cor.append(rec.point("b", name, "gamma", g, t_, m, se, model="attention", n=s.n, p=p, draws=s.draws,
                      t=tt, gamma=float(g), theta=float(t),
                      theory_finite_p=finite_p_theory("tanh", c, g, geo(t), s.n, tt), **meta)["theory_finite_p"])
        entries.append((draw(ax, ggrid, th, gam, mc, col, "o", True, strong=[strong_t[float(t)]] * len(gam),
                              corrected=cor), name))
    finish_axes(ax, r"ridge $\gamma$", r"(b) $E_A$ over $\gamma$")
    add_legend(ax, entries, loc="upper left")

    # (c) theory map of E_A/E_LR over (θ, γ)
    ax = axes[2]
    hg = np.logspace(math.log10(gam.min()) - 1.5, math.log10(gam.max()) + 1.0, s.heat_points)
    ht = np.linspace(0.0, thetas.max() + 0.5, s.heat_points)
    lrh = theory("tanh", c, hg, lin_geo, model="linear")
    ratio = np.array([theory("tanh", c, hg, geo(t), n=s.n) / lrh for t in ht])  # (θ, γ)
    for t, row in zip(ht, ratio):
        rec.diagnostic("c", "E_A/E_LR theory", "gamma", hg, row, theta=float(t), **meta)
    lim = float(np.nanmax(np.abs(np.log2(ratio))))
    mesh = ax.pcolormesh(hg, ht, np.log2(ratio), cmap="RdBu_r", norm=mcolors.TwoSlopeNorm(0.0, -lim, lim),
                         shading="gouraud", rasterized=True)
    cb = fig.colorbar(mesh, ax=ax, pad=0.02, ticks=MultipleLocator(0.5), format="%g")
    cb.ax.set_title(r"$\log_2\frac{E_A}{E_{LR}}$", fontsize="small")
    ax.contour(hg, ht, ratio, levels=[1.0], colors="black", linewidths=1.5)
    ax.contour(hg, ht, ratio, levels=[1.01], colors="black", linewidths=1.0, linestyles="--")
    ax.set_xscale("log")
    ax.text(hg[1], ht[-1] * 0.95, "gap < 1%\n(left of dashed)", fontsize="x-small", va="top")
    ax.text(hg[-2], ht[-1] * 0.95, r"$E_A<E_{LR}$" + "\n(right of solid)", fontsize="x-small", va="top",
            ha="right", color="white")
    for t in thetas:  # Monte Carlo: filled where MC E_A < MC E_LR
        for g in gam:
            a, _ = mc_at(res_of(t), "attention", g)
            lin, _ = mc_at(res_of(t), "linear", g)
            ax.plot(g, t, marker="o", ms=6, color="black", markerfacecolor="black" if a < lin else "white")
    handles = [Line2D([], [], color="black", lw=1.5, label=r"$E_A=E_{LR}$: reverses to the right"),
               Line2D([], [], color="black", lw=1.0, ls="--", label=r"$E_A=1.01E_{LR}$: gap $<1\%$ to the left"),
               Line2D([], [], marker="o", ls="", color="black", label=r"MC $E_A<E_{LR}$"),
               Line2D([], [], marker="o", ls="", color="black", markerfacecolor="white", label=r"MC $E_A\geq E_{LR}$")]
    ax.legend(handles=handles, fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2,
              frameon=False)
    ax.set_xlabel(r"ridge $\gamma$")
    ax.set_ylabel(r"weight norm $\theta$")
    ax.set_title(r"(c) where the gap closes and reverses")
    strong_from = min([t for t in thetas if strong_t[float(t)]] or [math.inf])
    fig.suptitle(rf"Aligned weights $w_K=w_Q=\theta\mu/\|\mu\|$, tanh, $c={c:g}$, $\|\mu\|^2={m2:g}$: "
                 r"$E_A$ vs $E_{LR}$" + "\n" + mc_note(s)
                 + rf"; shaded: strong signal $t=\|\mu\|^2(1+\theta^2)/\sqrt{{p}}>{STRONG_SIGNAL_T}$ "
                 + rf"($\theta\geq{strong_from:g}$ at $p={p}$), $\times$: finite-p corrected theory", fontsize="small")
    return FigureResult("aligned", rec, save(fig, rec, out, "fig_aligned"))
