r"""Plotting helpers: theory curves against Monte Carlo points.

Figures are built on matplotlib's object API with the Agg canvas (no ``pyplot``, no
display, no global backend switch), so they work on headless machines and inside tests::

    from symattn.plotting import new_figure, plot_theory_vs_mc, style_error_axes, save_figure

    fig, (ax,) = new_figure(1)
    plot_theory_vs_mc(ax, gamma_fine, E_theory, mc_mean, mc_sem, label="E_LR, c=0.5",
                      mc_gamma=gamma_mc)
    style_error_axes(ax, title="c = 0.5")
    save_figure(fig, "symattn-out/figure.png")
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["new_figure", "plot_theory_vs_mc", "style_error_axes", "save_figure", "COLORS"]

#: Colours used for the models (colour-blind friendly, matplotlib "tab" palette).
COLORS = {"attention": "tab:red", "linear": "tab:blue", "bulk": "tab:green", "other": "tab:purple"}


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.4, **subplot_kw):
    """A figure with an Agg canvas and ``nrows × ncols`` axes; returns ``(fig, axes_flat_list)``.

    ``width``/``height`` are per panel, in inches.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False, subplot_kw=subplot_kw or None)
    return fig, list(np.asarray(axes).ravel())


def plot_theory_vs_mc(ax, gamma, theory=None, mc_mean=None, mc_sem=None, label: str | None = None, *,
                      mc_gamma=None, color=None, marker: str = "o", linestyle: str = "-",
                      logx: bool = True, logy: bool = False):
    """Draw a theory curve ``theory(gamma)`` and Monte Carlo points with error bars on ``ax``.

    Parameters
    ----------
    gamma, theory : the theory curve (``theory`` may be None to draw only points).
    mc_mean, mc_sem : Monte Carlo means and standard errors (either may be None); they are at
        ``mc_gamma`` when given, else at ``gamma``. Error bars are ±1 standard error; NaN
        standard errors (one draw) are drawn without bars.
    label : legend label; the curve gets ``"<label> theory"`` and the points ``"<label> MC"``.
    color : one colour for both (default: the axes' next colour).
    logx, logy : log scales (γ is log-scaled by default).

    Returns ``(line, errorbar_container)`` (either may be None).
    """
    line = bars = None
    gamma = np.asarray(gamma, dtype=float)
    if theory is not None:
        theory = np.asarray(theory, dtype=float)
        if theory.shape != gamma.shape:
            raise ValueError(f"theory has shape {theory.shape}, gamma {gamma.shape}")
        order = np.argsort(gamma)
        (line,) = ax.plot(gamma[order], theory[order], linestyle=linestyle, color=color,
                          label=None if label is None else f"{label} theory")
        color = line.get_color()
    if mc_mean is not None:
        xg = gamma if mc_gamma is None else np.asarray(mc_gamma, dtype=float)
        mean = np.asarray(mc_mean, dtype=float)
        if mean.shape != xg.shape:
            raise ValueError(f"mc_mean has shape {mean.shape}, its gamma {xg.shape}")
        sem = None
        if mc_sem is not None:
            sem = np.asarray(mc_sem, dtype=float)
            sem = np.where(np.isfinite(sem), sem, 0.0)
        bars = ax.errorbar(xg, mean, yerr=sem, fmt=marker, color=color, markersize=5, capsize=3,
                           markerfacecolor="white" if theory is not None else color,
                           label=None if label is None else f"{label} MC")
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    return line, bars


def style_error_axes(ax, title: str | None = None, ylabel: str = r"training MSE $E(\gamma)$",
                     legend: bool = True) -> None:
    """Axis labels, grid and legend for an error-vs-γ panel."""
    ax.set_xlabel(r"ridge $\gamma$")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", frameon=False)


def save_figure(fig, path, dpi: int = 150, formats: Sequence[str] | None = None) -> Path:
    """Save ``fig`` to ``path`` (parent folders are created); with ``formats`` (e.g. ('png', 'pdf'))
    save once per format with that suffix. Returns the path of the first file written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    paths = [path] if not formats else [path.with_suffix("." + f.lstrip(".")) for f in formats]
    for pth in paths:
        fig.savefig(pth, dpi=dpi)
    return paths[0]
