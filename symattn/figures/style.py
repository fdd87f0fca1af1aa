r"""How the figures look: colours, markers, theory lines against Monte Carlo points, and saving.

Figures are built on matplotlib's object API with the Agg canvas (no ``pyplot``, no
display, no global backend switch), so they work on headless machines and inside tests::

    from symattn.figures.style import new_figure, plot_theory_vs_mc, style_error_axes, save_figure

    fig, (ax,) = new_figure(1)
    plot_theory_vs_mc(ax, gamma_fine, E_theory, mc_mean, mc_sem, label="E_LR, c=0.5",
                      mc_gamma=gamma_mc)
    style_error_axes(ax, title="c = 0.5")
    save_figure(fig, "symattn-out/figure.png")

The second half holds what the paper's figures (:mod:`symattn.figures.mu0`, ``aligned``,
``a1zero``, ``minilm``) share: the colour and marker of each activation, a theory line with its
Monte Carlo points (:func:`draw`), legends, axes, labels, and :func:`save` (PNG, PDF and CSV).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

import numpy as np

from .records import STRONG_SIGNAL_T

__all__ = ["new_figure", "plot_theory_vs_mc", "style_error_axes", "save_figure", "COLORS", "PNG_DPI",
           "ACTIVATION_COLORS", "ACTIVATION_MARKERS", "STRONG_NOTE", "save", "curve_grid", "draw", "add_legend",
           "finish_axes", "log_ticks", "mc_note", "curve_label"]

#: Colours used for the models (colour-blind friendly, matplotlib "tab" palette).
COLORS = {"attention": "tab:red", "linear": "tab:blue", "bulk": "tab:green", "other": "tab:purple"}


def new_figure(ncols: int = 1, nrows: int = 1, width: float = 4.2, height: float = 3.4, **subplot_kw):
    """A figure with an Agg canvas and ``nrows × ncols`` axes (no pyplot, no global backend).

    The figure is ``(width·ncols) × (height·nrows)`` inches with a constrained layout.

    Parameters
    ----------
    ncols, nrows : int
        Panels per row and rows.
    width, height : float
        Size of one panel, in inches.
    **subplot_kw
        Passed to ``Figure.subplots`` for every axes.

    Returns
    -------
    (matplotlib.figure.Figure, list of Axes)
        The figure and its axes, row by row.

    Examples
    --------
    >>> fig, axes = new_figure(3, 2, width=2.0, height=1.5)
    >>> len(axes), [float(v) for v in fig.get_size_inches()]
    (6, [6.0, 3.0])
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

    Returns
    -------
    (Line2D or None, ErrorbarContainer or None)
        The theory line and the Monte Carlo points, None for what was not drawn.

    Examples
    --------
    >>> import numpy as np
    >>> fig, (ax,) = new_figure()
    >>> g = np.geomspace(0.01, 10, 20)
    >>> line, bars = plot_theory_vs_mc(ax, g, 1 - 1 / (1 + g), [0.1, 0.5], [0.01, 0.02], label="E",
    ...                                mc_gamma=[0.1, 1.0])
    >>> line.get_label(), ax.get_xscale()
    ('E theory', 'log')
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
    """Axis labels, grid and legend for an error-vs-γ panel.

    Parameters
    ----------
    ax : matplotlib Axes
    title : str or None
        The panel's title.
    ylabel : str
        The y label (x is the ridge γ).
    legend : bool
        Draw the legend when the axes have labelled artists.

    Returns
    -------
    None

    Examples
    --------
    >>> fig, (ax,) = new_figure()
    >>> style_error_axes(ax, title="c = 0.5")
    >>> ax.get_title(), ax.get_xlabel().startswith("ridge")
    ('c = 0.5', True)
    """
    ax.set_xlabel(r"ridge $\gamma$")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, which="major", alpha=0.3)
    if legend and ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", frameon=False)


def save_figure(fig, path, dpi: int = 150, formats: Sequence[str] | None = None) -> Path:
    """Save ``fig`` to ``path`` (parent folders are created); with ``formats`` (e.g. ('png', 'pdf'))
    save once per format with that suffix.

    Each file is written to a temporary name with an explicit format and renamed
    (:func:`symattn.files.atomic_path`): an interrupted save leaves no truncated PNG or PDF.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    path : str or Path
        The file; its suffix gives the format unless ``formats`` is given.
    dpi : int
        Resolution of raster formats.
    formats : sequence of str or None
        Save once per format, with that suffix.

    Returns
    -------
    Path
        The first file written.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> fig, (ax,) = new_figure()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     first = save_figure(fig, pathlib.Path(d) / "sub" / "fig.png", formats=("png", "pdf"))
    ...     first.name, sorted(p.name for p in first.parent.iterdir())
    ('fig.png', ['fig.pdf', 'fig.png'])
    """
    from ..files import atomic_path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    paths = [path] if not formats else [path.with_suffix("." + f.lstrip(".")) for f in formats]
    for pth in paths:
        with atomic_path(pth) as tmp:
            fig.savefig(tmp, dpi=dpi, format=pth.suffix.lstrip(".").lower() or "png")
    return paths[0]


# ============================================================================ the paper's figures
#: Resolution of the PNG files (the PDF files are vector graphics).
PNG_DPI = 120

#: Colour and marker of each curve of the paper's figures (an activation, or ``linear`` for E_LR).
ACTIVATION_COLORS = {"tanh": "tab:red", "relu": "tab:orange", "linear": "tab:blue", "cos": "tab:green",
                     "he3": "tab:purple"}
ACTIVATION_MARKERS = {"tanh": "o", "relu": "s", "linear": "D", "cos": "^", "he3": "v"}
STRONG_NOTE = rf"shaded markers: strong signal $|t|>{STRONG_SIGNAL_T}$, with the finite-p corrected theory ($\times$)"


def save(fig, records, out: Path, stem: str) -> list:
    """Write ``fig`` as ``out/stem.png`` (:data:`PNG_DPI`) and ``out/stem.pdf``, and the records as
    ``out/stem.csv`` (the CSV columns of :class:`symattn.figures.Records`).

    Parameters
    ----------
    fig : matplotlib.figure.Figure
    records : symattn.figures.Records
        The figure's data.
    out : Path
        The output folder.
    stem : str
        The file name without suffix.

    Returns
    -------
    list of str
        The PNG, PDF and CSV paths.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from symattn.figures import Records
    >>> rec = Records("demo")
    >>> rec.curve("a", "E", "gamma", [0.1, 1.0], [0.2, 0.4], model="linear")
    >>> fig, (ax,) = new_figure()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     [pathlib.Path(f).name for f in save(fig, rec, pathlib.Path(d), "fig_demo")]
    ['fig_demo.png', 'fig_demo.pdf', 'fig_demo.csv']
    """
    from .records import write_csv

    files = [str(save_figure(fig, out / f"{stem}.png", dpi=PNG_DPI)), str(save_figure(fig, out / f"{stem}.pdf"))]
    files.append(str(write_csv(out / f"{stem}.csv", records.rows)))
    return files


def curve_grid(values, points, pad=0.25):
    """``points`` log-spaced x values from min(values)·10^-pad to max(values)·10^pad (a theory line).

    Parameters
    ----------
    values : array-like of float > 0
        The x values of the Monte Carlo points.
    points : int
        Number of grid points.
    pad : float
        Decades added on each side.

    Returns
    -------
    numpy.ndarray
        The grid, increasing.

    Examples
    --------
    >>> [round(float(v), 6) for v in curve_grid([0.1, 10.0], 3, pad=0.0)]
    [0.1, 1.0, 10.0]
    """
    v = np.asarray(values, dtype=float)
    return np.logspace(math.log10(v.min()) - pad, math.log10(v.max()) + pad, points)


def draw(ax, xs, th, px, mc, color, marker, logx, strong=None, linestyle="-", corrected=None):
    """Theory line and MC points (list of (mean, se)); points with ``strong`` True get a shaded face,
    and the finite-p corrected theory at them (``corrected``: values or None per point) a cross.

    Parameters
    ----------
    ax : matplotlib Axes
    xs, th : array-like
        The theory line: x values and theory.
    px, mc : sequences
        The Monte Carlo x values and their ``(mean, se)`` pairs.
    color, marker : str
        Colour and marker of the curve.
    logx : bool
        Log-scale x.
    strong : sequence of bool or None
        The strong-signal points (|t| > 0.15, docs/theory.md §10), drawn shaded.
    linestyle : str
        Of the theory line.
    corrected : sequence of float or None, or None
        The finite-p corrected theory at each point (None where not computed), drawn as crosses.

    Returns
    -------
    (Line2D, ErrorbarContainer)
        The legend handle of the curve (for :func:`add_legend`).

    Examples
    --------
    >>> fig, (ax,) = new_figure()
    >>> handle = draw(ax, [0.1, 1, 10], [0.3, 0.4, 0.6], [0.1, 10], [(0.31, 0.01), (0.55, 0.02)], "tab:red", "o",
    ...               True, strong=[False, True], corrected=[None, 0.56])
    >>> add_legend(ax, [(handle, "tanh")])
    >>> [t.get_text() for t in ax.get_legend().get_texts()]
    ['tanh']
    """
    mean = np.array([m for m, _ in mc], dtype=float)
    sem = np.array([e for _, e in mc], dtype=float)
    line, bars = plot_theory_vs_mc(ax, xs, th, mean, sem, label=None, mc_gamma=np.asarray(px, float), color=color,
                                   marker=marker, logx=logx, linestyle=linestyle)
    if strong is not None and np.any(strong):
        sel = np.asarray(strong, dtype=bool)
        ax.plot(np.asarray(px, float)[sel], mean[sel], ls="", marker=marker, ms=5, color=color, alpha=0.45)
    if corrected is not None and any(v is not None for v in corrected):
        pts = [(x, v) for x, v in zip(np.asarray(px, float), corrected) if v is not None]
        ax.plot(*zip(*pts), ls="", marker="x", ms=6, mew=1.5, color=color)
    return (line, bars)


def add_legend(ax, entries, **kw):
    """Legend with one entry per (line, bars) pair: '── o  label'.

    Parameters
    ----------
    ax : matplotlib Axes
    entries : list of (handle, str)
        Handles as :func:`draw` returns them, with their labels.
    **kw
        Passed to ``ax.legend`` (default: x-small font, no frame).

    Returns
    -------
    None

    Examples
    --------
    >>> fig, (ax,) = new_figure()
    >>> (line,) = ax.plot([1, 2], [1, 2])
    >>> add_legend(ax, [((line,), "a line")])
    >>> ax.get_legend().get_texts()[0].get_text()
    'a line'
    """
    from matplotlib.legend_handler import HandlerTuple

    if entries:
        handles, labels = zip(*entries)
        kw.setdefault("fontsize", "x-small")
        kw.setdefault("frameon", False)
        ax.legend(list(handles), list(labels), handler_map={tuple: HandlerTuple(ndivide=None)}, **kw)


def finish_axes(ax, xlabel, title, ylabel=r"training MSE $E$"):
    """Labels, title and grid of a panel (no legend).

    Parameters
    ----------
    ax : matplotlib Axes
    xlabel, title, ylabel : str

    Returns
    -------
    None

    Examples
    --------
    >>> fig, (ax,) = new_figure()
    >>> finish_axes(ax, "$c$", "(b) against c")
    >>> ax.get_xlabel(), ax.get_legend() is None
    ('$c$', True)
    """
    style_error_axes(ax, title=title, ylabel=ylabel, legend=False)
    ax.set_xlabel(xlabel)


def log_ticks(ax, values):
    """Label a log x axis at the given values in plain numbers (no minor labels).

    Parameters
    ----------
    ax : matplotlib Axes
    values : sequence of float
        The tick positions.

    Returns
    -------
    None

    Examples
    --------
    >>> fig, (ax,) = new_figure()
    >>> ax.set_xscale("log")
    >>> log_ticks(ax, [0.25, 1, 4])
    >>> [float(v) for v in ax.get_xticks()]
    [0.25, 1.0, 4.0]
    """
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ax.xaxis.set_major_locator(FixedLocator(list(values)))
    ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def mc_note(s, n=None, draws=None) -> str:
    """The subtitle that says what the lines and markers are (n and draws of the Settings ``s``).

    Parameters
    ----------
    s : symattn.figures.Settings
        The run's settings (``s.n``, ``s.draws``).
    n, draws : int or None
        Override the settings' values.

    Returns
    -------
    str

    Examples
    --------
    >>> from symattn.figures import QUICK
    >>> mc_note(QUICK, n=768, draws=4)
    'lines: theory (finite-p diagonal $d_n$); markers: Monte Carlo n=768, 4 draws, ±1 s.e.'
    """
    return (f"lines: theory (finite-p diagonal $d_n$); markers: Monte Carlo n={n or s.n}, {draws or s.draws} draws, "
            "±1 s.e.")


def curve_label(act, diag="f", a1=None):
    r"""The legend label of a curve: ``$E_{LR}$`` or ``$E_A$ act`` (+ diagonal, + a1).

    Parameters
    ----------
    act : str
        The activation's name, or ``'linear'`` for E_LR.
    diag : str
        ``'zero'`` adds "(diagonal zeroed)".
    a1 : float or None
        Adds the linear Hermite coefficient.

    Returns
    -------
    str

    Examples
    --------
    >>> curve_label("linear"), curve_label("he3", "zero", 0.0)
    ('$E_{LR}$', '$E_A$ he3 (diagonal zeroed), $a_1=0$')
    """
    if act == "linear":
        return r"$E_{LR}$"
    lab = rf"$E_A$ {act}"
    if diag == "zero":
        lab += " (diagonal zeroed)"
    if a1 is not None:
        lab += rf", $a_1={0.0 if abs(a1) < 1e-12 else a1:.2g}$"
    return lab
