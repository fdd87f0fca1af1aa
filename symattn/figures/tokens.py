r"""Figure ``tokens``: the errors against the time correlation ρ of AR(1) tokens (docs/theory.md §15).

A grid of panels, one column per (activation, c, signal) of :data:`COLUMNS` (tanh at c = 1 and ReLU at
c = 0.5, each with μ = 0 and with the aligned signal w_K = w_Q = μ, ‖μ‖² = 1) and one row per γ of
:data:`GAMMAS` (:func:`gammas`: two in the quick run). In each panel, against ρ:

- attention's training error: theory line (:func:`symattn.temporal.attention_errors` at the Monte Carlo's n,
  docs/theory.md §15.5) over Monte Carlo points;
- ridge regression on X, training and test error: theory lines (:func:`symattn.temporal.linear_errors`,
  §15.2) over Monte Carlo points;
- attention's test error: theory line (:meth:`symattn.Layer.theory` with ``error='test'``, that is
  :func:`symattn.temporal.attention_test_errors`, §15.6) over Monte Carlo points; where the theory refuses or fails
  a point, its Monte Carlo stands alone (kind ``mc_only``), joined by a thin dotted line.

The Monte Carlo (``tokens=``, every draw tested on a fresh sequence of the same law) runs in :func:`make_tokens`
at ρ ∈ :data:`RHOS`, n = ``s.n`` and ``s.draws`` draws (quick: n = 400, 5 draws, a few seconds a column), seed
``s.seed``; the theory lines run over :func:`rho_grid` (three ρ in the quick run: the Monte Carlo's own, so that
the quick run stays under a minute; ten in the full run).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from .records import FigureResult, Records
from .style import COLORS, draw, finish_axes, new_figure, save

__all__ = ["plan_tokens", "make_tokens", "rho_grid", "gammas", "theory", "COLUMNS", "GAMMAS", "RHOS"]

#: (activation, c, ‖μ‖² of the aligned signal) per column
COLUMNS = (("tanh", 1.0, 0.0), ("tanh", 1.0, 1.0), ("relu", 0.5, 0.0), ("relu", 0.5, 1.0))
#: the ridges, one per row (the quick run: the first two)
GAMMAS = (0.01, 1.0, 10.0)
#: the Monte Carlo's correlations
RHOS = (0.0, 0.5, 0.9)
#: (model, error, label, colour, marker, line style)
CURVES = (("attention", "train", "attention, train", COLORS["attention"], "o", "--"),
          ("attention", "test", "attention, test", COLORS["attention"], "o", "-"),
          ("linear", "train", "linear, train", COLORS["linear"], "D", "--"),
          ("linear", "test", "linear, test", COLORS["linear"], "D", "-"))


def rho_grid(s) -> np.ndarray:
    """The ρ of the theory lines: :data:`RHOS` in the quick run, 0, 0.1, …, 0.9 otherwise.

    Examples
    --------
    >>> from symattn.figures.runner import QUICK, FULL
    >>> rho_grid(QUICK).tolist(), rho_grid(FULL).size
    ([0.0, 0.5, 0.9], 10)
    """
    return np.asarray(RHOS if s.name == "quick" else np.round(np.arange(10) / 10, 2), dtype=float)


def gammas(s) -> tuple:
    """The ridges of the rows: :data:`GAMMAS`, the first two in the quick run.

    Examples
    --------
    >>> from symattn.figures.runner import QUICK, FULL
    >>> gammas(QUICK), gammas(FULL)
    ((0.01, 1.0), (0.01, 1.0, 10.0))
    """
    return GAMMAS[:2] if s.name == "quick" else GAMMAS


def plan_tokens(s, runner):
    """Nothing to plan on the shared runner: the Monte Carlo under a token law runs in :func:`make_tokens`."""


def theory(f, c, gamma, n, snr, rho, model, error) -> float:
    r"""One theory value under AR(1) ρ (attention at finite n: §15.5 train, §15.6 test; ridge regression, §15.2);
    NaN where the theory refuses the point or fails.

    Examples
    --------
    >>> round(theory("tanh", 1.0, 1.0, 400, 0.0, 0.0, "linear", "test"), 4)     # ρ = 0: §14.4's closed form
    1.1708
    """
    from ..accuracy import internal
    from ..errors import ConvergenceError, ParameterError
    from ..layer import Layer
    from ..model import Geometry

    law = {"ar1": rho} if rho > 0 else None
    if model == "linear":   # §15.2 (at ρ = 0 the paper's closed forms, to 1e-12)
        from ..temporal import linear_errors

        return float(linear_errors(c, gamma, snr=snr, tokens=law)[error])
    try:
        with warnings.catch_warnings(), internal():   # the figure shows the Monte Carlo itself
            warnings.simplefilter("ignore")
            r = Layer(f).theory(c, gamma, geometry=Geometry.aligned(snr), n=n, model=model, error=error, tokens=law)
    except (ParameterError, ConvergenceError):
        return float("nan")
    return float(np.asarray(r.E, dtype=float))


def _simulate(f, c, snr, rho, s):
    from ..layer import simulate
    from ..model import Geometry

    return simulate(f, n=s.n, c=c, gamma=list(gammas(s)), geometry=Geometry.aligned(snr), draws=s.draws,
                    seed=s.seed, tokens={"ar1": rho} if rho > 0 else None, error="both", progress=False)


def make_tokens(s, runner, out: Path) -> FigureResult:
    """Simulate, draw the panels and write ``fig_tokens`` (PNG, PDF, CSV)."""
    from ..model import Geometry, dimension
    from .runner import strength

    rec = Records("tokens")
    grid = rho_grid(s)
    rhos = np.asarray(RHOS, dtype=float)
    rows = gammas(s)
    fig, axes = new_figure(len(COLUMNS), len(rows), width=3.4, height=2.9)
    axes = np.asarray(axes).reshape(len(rows), len(COLUMNS))
    for j, (f, c, snr) in enumerate(COLUMNS):
        sims = [_simulate(f, c, snr, rho, s) for rho in rhos]
        p = dimension(s.n, c)
        for i, g in enumerate(rows):
            ax, panel = axes[i, j], f"{'abcd'[j]}{i + 1}"
            entries = []
            for model, error, label, color, marker, style in CURVES:
                key = model + ("_test" if error == "test" else "")
                mc = [(float(getattr(r, key + "_mean")[i]), float(getattr(r, key + "_sem")[i])) for r in sims]
                th = np.array([theory(f, c, g, s.n, snr, rho, model, error) for rho in grid])
                thp = th[np.searchsorted(grid, rhos)] if set(rhos) <= set(grid) else np.array(
                    [theory(f, c, g, s.n, snr, rho, model, error) for rho in rhos])
                meta = dict(model=model, error=error, activation=f, c=c, gamma=g, snr=snr, n=s.n)
                if np.isfinite(th).all():
                    rec.curve(panel, label, "rho", grid, th, **meta)
                for rho, t_, (m, se) in zip(rhos, thp, mc):
                    if np.isfinite(t_):
                        rec.point(panel, label, "rho", rho, t_, m, se, p=p, draws=s.draws, rho=float(rho),
                                  t=strength(Geometry.aligned(snr), p), **meta)
                    else:   # no theory to compare with: a Monte Carlo row of its own kind (not in the agreement)
                        rec.rows.append(dict(figure="tokens", panel=panel, kind="mc_only", curve=label, x_name="rho",
                                             x=float(rho), mc_mean=m, mc_sem=se, p=p, draws=s.draws, **meta))
                if np.isfinite(th).all():
                    handle = draw(ax, grid, th, rhos, mc, color, marker, False, linestyle=style)
                else:   # no theory (attention's test error under T): the points, joined thinly
                    handle = draw(ax, rhos, [m for m, _ in mc], rhos, mc, color, marker, False, linestyle=":")
                entries.append((handle, label + ("" if np.isfinite(th).all() else " (MC only)")))
            ax.set_yscale("log")
            sig = r"$\mu=0$" if snr == 0 else "aligned"
            finish_axes(ax, r"AR(1) correlation $\rho$", f"({panel}) {f}, $c={c:g}$, {sig}, $\\gamma={g:g}$",
                        ylabel=r"MSE: train $E$, test $E_{test}$")
            ax.title.set_fontsize("small")
            if i == 0 and j == 0:   # one legend for all panels, below them
                from matplotlib.legend_handler import HandlerTuple

                handles, labels = zip(*entries)
                fig.legend(list(handles), list(labels), loc="outside lower center", ncol=len(entries), frameon=False,
                           fontsize="small", handler_map={tuple: HandlerTuple(ndivide=None)})
    fig.suptitle("time-correlated tokens: train (dashed) and test (solid) error against the AR(1) correlation ρ, "
                 "attention (red) and ridge regression on X (blue); aligned: $w_K=w_Q=\\mu$, $\\|\\mu\\|^2=1$\n"
                 f"lines: theory (docs/theory.md §15.2, §15.5, §15.6; attention at n = {s.n}); markers: exact Monte Carlo "
                 f"n = {s.n}, {s.draws} draws, each tested on a fresh sequence of the same law, ±1 s.e.",
                 fontsize="small")
    alone = sum(r["kind"] == "mc_only" for r in rec.rows)
    note = (f"{alone} Monte Carlo points without a theory to compare with (attention's test error under "
            "correlated tokens)") if alone else ""
    return FigureResult("tokens", rec, save(fig, rec, out, "fig_tokens"), note=note)
