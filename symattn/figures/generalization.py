r"""Figure ``generalization``: training against test error, attention against linear regression (docs/theory.md §14).

Four panels, theory lines (:func:`symattn.generalization_error`, :func:`symattn.memorization_error`,
finite-p diagonal d_n) with exact Monte Carlo points (each draw tested on its own fresh sequence):

- (a) μ = 0, c = ``gen_cs[0]``: E_train and E_test over γ, attention (``gen_activation``) and ridge
  regression on X. Without signal E_test = 1 + C‖β‖² > 1: both readouts do worse than predicting 0
  and attention (larger ‖β‖²) does worse than linear regression;
- (b) w_K = w_Q = μ, ‖μ‖² = ``gen_snr``, the same c;
- (c) the same signal at c = ``gen_cs[-1]`` (p > n: over-parametrised);
- (d) E_test over c at the smallest γ, with the signal: the interpolation peak at c = 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .records import FigureResult, Records
from .runner import Runner, Settings, mc_at, strength
from .style import COLORS, add_legend, draw, finish_axes, log_ticks, new_figure, save

__all__ = ["plan_generalization", "make_generalization"]

#: (model key of the result, error, label, colour, marker, line style)
CURVES = (("attention", "train", "attention, train", COLORS["attention"], "o", "--"),
          ("attention", "test", "attention, test", COLORS["attention"], "o", "-"),
          ("linear", "train", "linear, train", COLORS["linear"], "D", "--"),
          ("linear", "test", "linear, test", COLORS["linear"], "D", "-"))


def _geometries(s: Settings):
    from ..model import Geometry

    return Geometry(), Geometry.aligned(s.gen_snr)


def plan_generalization(s: Settings, runner: Runner):
    """Plan the train-and-test jobs: μ = 0 at the first c, the signal at every c."""
    none, signal = _geometries(s)
    runner.generalization(s.gen_activation, s.gen_cs[0], none)
    for c in s.gen_cs:
        runner.generalization(s.gen_activation, c, signal)


def _theory(f, c, gamma, geometry, n, model, error):
    """E (train or test) of one model as a float array; NaN where a point fails."""
    import warnings

    from ..layer import Layer

    with warnings.catch_warnings():   # the atlas' accuracy note is of the train error: the figure shows MC itself
        warnings.simplefilter("ignore")
        r = Layer(f).theory(c, gamma, geometry=geometry, n=n, model=model, error=error, errors="nan")
    return np.asarray(r.E, dtype=float)


def make_generalization(s: Settings, runner: Runner, out: Path) -> FigureResult:
    """Draw the four panels and write ``fig_generalization`` (PNG, PDF, CSV)."""
    from ..model import dimension

    rec = Records("generalization")
    f, n = s.gen_activation, s.n
    none, signal = _geometries(s)
    gam = np.asarray(sorted(s.gen_gammas), dtype=float)
    grid = np.logspace(np.log10(gam.min()) - 0.25, np.log10(gam.max()) + 0.25, s.curve_points)
    fig, axes = new_figure(4, width=4.0, height=3.6)
    panels = (("a", s.gen_cs[0], none, r"(a) $\mu=0$"), ("b", s.gen_cs[0], signal, r"(b) $w_K=w_Q=\mu$"),
              ("c", s.gen_cs[-1], signal, r"(c) $w_K=w_Q=\mu$"))
    for ax, (panel, c, geo, title) in zip(axes, panels):
        res = runner.result(runner.generalization(f, c, geo))
        p = dimension(n, c)
        entries = []
        for model, error, label, color, marker, style in CURVES:
            th = _theory(f, c, grid, geo, n, model, error)
            thp = _theory(f, c, gam, geo, n, model, error)
            key = model if error == "train" else model + "_test"
            mc = [mc_at(res, key, g) for g in gam]
            rec.curve(panel, label, "gamma", grid, th, model=model, error=error, activation=f, c=float(c),
                      snr=float(geo.snr), n=n)
            for g, t_, (m, se) in zip(gam, thp, mc):
                rec.point(panel, label, "gamma", g, t_, m, se, model=model, error=error, activation=f, n=n, p=p,
                          draws=s.gen_draws, t=strength(geo, p), c=float(c), gamma=float(g), snr=float(geo.snr))
            entries.append((draw(ax, grid, th, gam, mc, color, marker, True, linestyle=style), label))
        ax.set_yscale("log")
        finish_axes(ax, r"ridge $\gamma$", title + rf", $c={c:g}$", ylabel=r"MSE: train $E$, test $E_{test}$")
        if panel == "a":
            add_legend(ax, entries, loc="upper right", fontsize="x-small")

    # (d) E_test over c at the smallest γ, with the signal: the interpolation peak at c = 1
    ax, g0 = axes[3], float(gam.min())
    cs = np.asarray(s.gen_cs, dtype=float)
    cgrid = np.geomspace(min(cs.min(), 0.25), max(cs.max(), 4.0), 4 * s.curve_points + 1)
    for model, error, label, color, marker, style in CURVES:
        if error == "train":
            continue
        th = _theory(f, cgrid, g0, signal, n, model, error)
        thp = _theory(f, cs, g0, signal, n, model, error)
        mc = [mc_at(runner.result(runner.generalization(f, c, signal)), model + "_test", g0) for c in cs]
        rec.curve("d", label, "c", cgrid, th, model=model, error=error, activation=f, gamma=g0, snr=float(signal.snr),
                  n=n)
        for c, t_, (m, se) in zip(cs, thp, mc):
            pc = dimension(n, c)
            rec.point("d", label, "c", c, t_, m, se, model=model, error=error, activation=f, n=n, p=pc,
                      draws=s.gen_draws, t=strength(signal, pc), c=float(c), gamma=g0, snr=float(signal.snr))
        draw(ax, cgrid, th, cs, mc, color, marker, True, linestyle=style)
    ax.set_yscale("log")
    ax.axvline(1.0, color="0.6", lw=0.8, ls=":")
    finish_axes(ax, r"$c=p/n$", rf"(d) test error, $w_K=w_Q=\mu$, $\gamma={g0:g}$",
                ylabel=r"test MSE $E_{test}$")
    log_ticks(ax, np.asarray(sorted(set(cs) | {0.25, 4.0})))
    fig.suptitle(rf"train (dashed) against test (solid) error, {f} attention (red) and ridge regression (blue), "
                 rf"$\|\mu\|^2={s.gen_snr:g}$ in (b)-(d)" + "\n"
                 + f"lines: theory (finite-p diagonal $d_n$); markers: Monte Carlo n={n}, {s.gen_draws} draws, each "
                 "tested on a fresh sequence, ±1 s.e.", fontsize="small")
    return FigureResult("generalization", rec, save(fig, rec, out, "fig_generalization"))
