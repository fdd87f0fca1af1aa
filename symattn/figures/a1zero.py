r"""Figure ``a1zero`` (claim 3 of docs/theory.md §8): a1 = 0 against a1 ≠ 0.

cos and He3 (a1 = 0) against tanh, as functions of c (μ = 0, γ = γ_fixed) and of ‖μ‖² (c = 1,
W = I). He3 is superlinear, so its kernel diagonal is zeroed (``diagonal='zero'``) in both
theory and Monte Carlo.
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


A1ZERO_ACTS = (("cos", "f"), ("he3", "zero"), ("tanh", "f"), ("linear", "f"))


def plan_a1zero(s: Settings, runner: Runner):
    for act, diag in A1ZERO_ACTS[:3]:  # E_LR is read from the tanh runs
        for c in s.a1zero_cs:
            runner.synthetic(act, c, None, diagonal=diag, linear=act == "tanh")
        for m2 in s.a1zero_snrs:
            runner.synthetic(act, 1.0, {"snr": m2} if m2 else None, diagonal=diag, linear=act == "tanh")


def make_a1zero(s: Settings, runner: Runner, out: Path) -> FigureResult:
    from ..activations.activation import activation
    from ..model import Geometry, dimension

    rec = Records("a1zero")
    g0 = s.gamma_fixed
    fig, axes = new_figure(2, width=4.8, height=3.8)
    cs = np.asarray(s.a1zero_cs, dtype=float)
    snrs = np.asarray(s.a1zero_snrs, dtype=float)
    cgrid = curve_grid(cs, s.curve_points, pad=0.15)
    sgrid = np.linspace(0.0, snrs.max(), s.curve_points)
    entries = []
    p = dimension(s.n, 1.0)
    for act, diag in A1ZERO_ACTS:
        model, f = model_of(act)
        a1 = None if act == "linear" else float(activation(f).a1)
        name = curve_label(act, diag)
        meta = dict(model=model, activation=act, diagonal=diag)
        # (a) against c, μ = 0
        th = theory(f, cgrid, g0, None, n=s.n, diagonal=diag, model=model)
        thp = theory(f, cs, g0, None, n=s.n, diagonal=diag, model=model)
        mc = [mc_at(runner.result(runner.synthetic(f, c, None, diagonal=diag)), model, g0) for c in cs]
        rec.curve("a", name, "c", cgrid, th, gamma=g0, snr=0.0, n=s.n, **meta)
        for c, t_, (m, se) in zip(cs, thp, mc):
            pc = dimension(s.n, c)
            rec.point("a", name, "c", c, t_, m, se, n=s.n, p=pc, draws=s.draws, t=strength(None, pc), c=float(c),
                      gamma=g0, snr=0.0, **meta)
        entries.append((draw(axes[0], cgrid, th, cs, mc, COLORS[act], MARKERS[act], True), curve_label(act, diag, a1)))
        # (b) against ‖μ‖², c = 1, W = I
        th = np.array([theory(f, 1.0, g0, Geometry(snr=m2), n=s.n, diagonal=diag, model=model) for m2 in sgrid])
        thp = np.array([theory(f, 1.0, g0, Geometry(snr=m2), n=s.n, diagonal=diag, model=model) for m2 in snrs])
        mc = [mc_at(runner.result(runner.synthetic(f, 1.0, {"snr": m2} if m2 else None, diagonal=diag)), model, g0)
              for m2 in snrs]
        rec.curve("b", name, "snr", sgrid, th, c=1.0, gamma=g0, n=s.n, **meta)
        strong, cor = [], []
        for m2, t_, (m, se) in zip(snrs, thp, mc):
            tt = strength(Geometry(snr=m2), p)
            row = rec.point("b", name, "snr", m2, t_, m, se, n=s.n, p=p, draws=s.draws, t=tt, c=1.0, gamma=g0,
                            snr=float(m2), theory_finite_p=finite_p_theory(f, 1.0, g0, Geometry(snr=m2), s.n, tt,
                                                                           diag, model), **meta)
            strong.append(bool(row["strong_signal"]))
            cor.append(row["theory_finite_p"])
        draw(axes[1], sgrid, th, snrs, mc, COLORS[act], MARKERS[act], False, strong=strong, corrected=cor)
    finish_axes(axes[0], r"$c = p/n$", rf"(a) $\mu=0$, $\gamma={g0:g}$")
    log_ticks(axes[0], cs)
    add_legend(axes[0], entries, loc="upper right")
    finish_axes(axes[1], r"signal $\|\mu\|^2$", rf"(b) $c=1$, $W=I$, $\gamma={g0:g}$")
    fig.suptitle(r"$a_1=0$ (cos, He$_3$) vs $a_1\neq0$ (tanh); He$_3$ is superlinear: its kernel diagonal is "
                 r"zeroed in theory and MC" + "\n" + mc_note(s) + "; " + STRONG_NOTE, fontsize="small")
    return FigureResult("a1zero", rec, save(fig, rec, out, "fig_a1zero"))
