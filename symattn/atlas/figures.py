r"""Heat maps of the accuracy atlas: the gap (MC − theory)/theory over c × γ, one panel per layer family and signal.

Each figure is one block of the atlas; its panels are (activation, μ); the colour of a cell is the
relative gap (MC − theory)/theory on a symmetric scale (blue: Monte Carlo above the theory, i.e. the theory
is low; red: the theory is high), a cross marks a
cell outside max(3 se, 3 %), and an empty cell was not measured (or its theory failed). Several layers of
a block at the same (c, γ) are shown by their worst |gap|.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

__all__ = ["atlas_figures", "write_summary"]

#: the colour scale of the gap: ± this fraction
GAP_SCALE = 0.3


def _rows(source):
    from ..accuracy import load_atlas

    source = Path(source)
    return list(load_atlas(source / "atlas.csv" if source.is_dir() else source))


def atlas_figures(source, out) -> list:
    """Draw one PNG per block of the atlas table (``source``: an atlas folder or its ``atlas.csv``) into ``out``.

    Returns the paths written (``atlas_<block>.png``), and writes ``atlas_summary.csv`` (:func:`write_summary`).

    Examples
    --------
    >>> import tempfile
    >>> from symattn.accuracy import ATLAS_PATH
    >>> paths = atlas_figures(ATLAS_PATH, tempfile.mkdtemp())
    >>> all(p.suffix == ".png" for p in paths)
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    rows = _rows(source)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for block in sorted({r["block"] for r in rows}):
        rs = [r for r in rows if r["block"] == block]
        panels = sorted({(r["activation"], r["mu"]) for r in rs})
        cs = sorted({r["c"] for r in rs})
        gs = sorted({r["gamma"] for r in rs})
        ncol = min(len(panels), 5)
        nrow = -(-len(panels) // ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(2.4 * ncol + 1.2, 2.2 * nrow + 1.0), squeeze=False,
                                 layout="constrained")
        norm = TwoSlopeNorm(vmin=-GAP_SCALE, vcenter=0.0, vmax=GAP_SCALE)
        image = None
        for ax, (act, mu) in zip(axes.flat, panels):
            grid = np.full((len(gs), len(cs)), np.nan)
            bad = np.zeros_like(grid, dtype=bool)
            for r in rs:
                if (r["activation"], r["mu"]) != (act, mu):
                    continue
                i, j = gs.index(r["gamma"]), cs.index(r["c"])
                if not np.isfinite(grid[i, j]) or abs(r["gap"]) > abs(grid[i, j]):
                    grid[i, j] = r["gap"]
                bad[i, j] |= not r["within"]
            image = ax.imshow(grid, origin="lower", cmap="RdBu", norm=norm, aspect="auto")
            for i, j in zip(*np.nonzero(bad)):
                ax.plot(j, i, marker="x", color="k", markersize=7, mew=1.5)
            ax.set_xticks(range(len(cs)), [f"{c:g}" for c in cs], fontsize=7)
            ax.set_yticks(range(len(gs)), [f"{g:g}" for g in gs], fontsize=7)
            ax.set_title(f"{act}, μ = {mu}", fontsize=8)
            ax.set_xlabel("c = p/n", fontsize=7)
            ax.set_ylabel("γ", fontsize=7)
        for ax in list(axes.flat)[len(panels):]:
            ax.axis("off")
        layers = sorted({r["layer"] for r in rs})
        shown = ", ".join(layers[:4]) + (f" (+{len(layers) - 4} more)" if len(layers) > 4 else "")
        fig.suptitle(f"atlas block '{block}': (MC − theory)/theory, × = outside max(3 se, 3 %)\n{shown}", fontsize=9)
        fig.colorbar(image, ax=axes, shrink=0.8, label="(MC − theory)/theory")
        path = out / f"atlas_{block}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    write_summary(rows, out / "atlas_summary.csv")
    return paths


def write_summary(rows, path) -> Path:
    """The per-block, per-engine summary (:func:`symattn.atlas.summary_table`) as CSV, for the docs page."""
    from . import summary_table

    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["block", "engine", "cells", "within tolerance", "largest gap", "at"])
        for s in summary_table(rows):
            w.writerow([s["block"], s["engine"], s["cells"], f"{100 * s['within'] / s['cells']:.1f} %",
                        f"{100 * s['max_gap']:+.1f} %", s["at"]])
    return path
