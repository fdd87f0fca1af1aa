r"""How accurate the theory is where it is asked: the measured accuracy atlas, shipped as data.

``symattn atlas`` (:mod:`symattn.atlas`) measures the theory against exact Monte Carlo over a grid of
layers and settings and writes a compact table, one row per cell (point × γ); the table of the default
atlas is installed with the package (``symattn/data/atlas.csv``). :func:`assess` places a query among the
measured cells of the same theory engine, in the parameter space

.. math::  d^2 = \Big(\frac{Δ\log_{10} c}{0.25}\Big)^2 + \Big(\frac{Δ\log_{10} γ}{1}\Big)^2
           + \Big(\frac{Δ\log(1 + ‖μ‖^2)}{0.5}\Big)^2 + \Big(\frac{Δa}{0.5}\Big)^2
           + \Big(\frac{Δ\log_{10}(r_\mathrm{eff}/p)}{0.5}\Big)^2 + \Big(\frac{Δ\log_{10} n}{0.3}\Big)^2
           + 0.5^2\,[f ≠ f'],

with a the alignment of μ with the weights' top direction and r_eff = ‖W‖_F⁴/‖WᵀW‖_F² the effective
rank of W (:meth:`symattn.Layer.features`), n the tokens (a value asked without n is compared with the
cells at the largest n the engine was measured at). A cell is *within tolerance* when
|theory − MC| <= max(3 se, 3 % of theory). The query is

- *unvalidated* when its nearest measured cell is farther than :data:`VALIDATED` (or its engine has
  no cell);
- *flagged* when any cell within :data:`RADIUS` (or the nearest one) is outside the tolerance: its
  gap is then the largest such gap, so a value near a measured miss is never returned silently.

:class:`~symattn.errors.AccuracyWarning` is issued for unvalidated and flagged points
(:meth:`symattn.Layer.theory`). Nothing here runs the theory: it reads the table.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["ATLAS_PATH", "Accuracy", "assess", "load_atlas", "within_tolerance", "TOL_SE", "TOL_REL", "RADIUS",
           "VALIDATED", "COLUMNS"]

#: the atlas of the default spec, installed with the package
ATLAS_PATH = Path(__file__).with_name("data") / "atlas.csv"
#: the agreement rule: |MC − theory| <= max(TOL_SE se, TOL_REL |theory|)
TOL_SE, TOL_REL = 3.0, 0.03
#: cells within this distance of a query are its neighbourhood
RADIUS = 1.0
#: a query whose nearest cell is farther than this is unvalidated
VALIDATED = 1.5
#: the scales of the distance (module docstring)
SCALES = {"log_c": 0.25, "log_gamma": 1.0, "log_snr": 0.5, "align": 0.5, "log_reff": 0.5}
ACTIVATION_MISMATCH = 0.5
#: the scale of Δlog10 n in the distance (a factor 2 in n is 1.0)
N_SCALE = 0.3
#: the columns of the atlas table
COLUMNS = ("block", "engine", "layer", "activation", "c", "gamma", "n", "p", "tile", "mu", "snr", "align",
           "log_reff", "theory", "mc", "se", "draws", "gap", "z", "within", "call")


def within_tolerance(theory, mc, se) -> bool:
    """|theory − MC| <= max(3 se, 3 % of |theory|) (the atlas' and the gallery's rule).

    Examples
    --------
    >>> within_tolerance(0.50, 0.51, 0.001), within_tolerance(0.50, 0.53, 0.001)
    (True, False)
    """
    return bool(abs(theory - mc) <= max(TOL_SE * se, TOL_REL * abs(theory)))


@lru_cache(maxsize=4)
def load_atlas(path=None) -> tuple:
    """The rows of an atlas table (default: the shipped one, :data:`ATLAS_PATH`), typed; () when absent.

    Examples
    --------
    >>> rows = load_atlas()
    >>> all(r["engine"] for r in rows)
    True
    """
    path = ATLAS_PATH if path is None else Path(path)
    if not path.is_file():
        return ()
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            row = dict(r)
            for k in ("c", "gamma", "snr", "align", "log_reff", "theory", "mc", "se", "gap", "z"):
                row[k] = float(r[k]) if r.get(k) not in (None, "") else float("nan")
            for k in ("n", "p", "tile", "draws"):
                row[k] = int(float(r[k])) if r.get(k) not in (None, "") else 0
            row["within"] = str(r.get("within")).lower() == "true"
            out.append(row)
    return tuple(out)


@dataclass
class Accuracy:
    r"""The measured accuracy of the theory at each point of a result (:func:`assess`).

    Attributes
    ----------
    gap : numpy.ndarray
        (theory − MC)/MC of the nearest cell, or of the worst failing cell of the neighbourhood when
        ``flagged``; NaN where ``validated`` is False and no cell exists.
    se : numpy.ndarray
        The relative standard error se/MC of that cell.
    distance : numpy.ndarray
        The distance to the nearest cell (module docstring).
    validated : numpy.ndarray of bool
        The nearest cell is within :data:`VALIDATED`.
    flagged : numpy.ndarray of bool
        A cell of the neighbourhood (or the nearest) is outside the tolerance.
    index : numpy.ndarray of int
        The row of ``table`` each point's gap comes from (−1: none).
    table : tuple of dict
        The atlas cells the points were compared with (those of their engine).
    query : numpy.ndarray
        The points (c, γ), shape ``(P, 2)``.
    """

    gap: np.ndarray
    se: np.ndarray
    distance: np.ndarray
    validated: np.ndarray
    flagged: np.ndarray
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    table: tuple = ()
    query: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))

    @property
    def cells(self) -> list:
        """The cell each point's gap comes from (its block, layer, activation, c, γ, n, engine, μ, snr), with
        the point asked (``query_c``, ``query_gamma``)."""
        return [self.cell(i) for i in range(np.asarray(self.index).size)]

    def cell(self, i: int) -> dict:
        """The cell point i's gap comes from, with the point asked (one entry of :attr:`cells`)."""
        k = np.asarray(self.index).flat[i]
        cell = {} if k < 0 else {key: self.table[k].get(key) for key in _CELL_KEYS}
        return dict(cell, query_c=float(self.query[i, 0]), query_gamma=float(self.query[i, 1]))

    @property
    def ok(self) -> np.ndarray:
        """Validated and not flagged: the theory is within tolerance here, as far as measured."""
        return self.validated & ~self.flagged

    def flag(self, i: int) -> str:
        """One word for point i: 'ok', 'miss' (a measured gap beyond tolerance nearby) or 'unvalidated'."""
        if not self.validated.flat[i]:
            return "unvalidated"
        return "miss" if self.flagged.flat[i] else "ok"

    def to_dict(self) -> dict:
        """JSON-ready: the arrays as lists (NaN as None) and the cells."""
        def plain(a):
            return [None if isinstance(v, float) and not math.isfinite(v) else v for v in np.asarray(a).ravel().tolist()]

        return {"gap": plain(self.gap), "se": plain(self.se), "distance": plain(self.distance),
                "validated": plain(self.validated), "flagged": plain(self.flagged),
                "flag": [self.flag(i) for i in range(self.gap.size)], "cells": self.cells}

    def message(self) -> str | None:
        """The text of the AccuracyWarning (None when every point is validated and not flagged)."""
        bad = np.flatnonzero(~self.ok)
        if not bad.size:
            return None
        parts = []
        for i in bad[:5]:
            cell = self.cell(i)
            where = f"c={cell.get('query_c'):g}, gamma={cell.get('query_gamma'):g}"
            if self.flag(i) == "unvalidated":
                d = self.distance.flat[i]
                parts.append(f"{where}: unvalidated (nearest atlas cell at distance "
                             f"{'inf' if not math.isfinite(d) else f'{d:.2g}'})")
            else:
                parts.append(f"{where}: the atlas measured a gap of {100 * self.gap.flat[i]:+.1f} % "
                             f"(se {100 * self.se.flat[i]:.1f} %) at {cell.get('layer')}, {cell.get('activation')}, "
                             f"c={cell.get('c'):g}, gamma={cell.get('gamma'):g}, n={cell.get('n')}")
        more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        return (f"{len(bad)} of {self.gap.size} theory value(s) are not validated within max(3 se, 3 %) of exact "
                "Monte Carlo by the accuracy atlas (docs/accuracy.md): " + "; ".join(parts) + more)


#: what a cell says of itself in :attr:`Accuracy.cells`
_CELL_KEYS = ("block", "layer", "activation", "c", "gamma", "n", "engine", "mu", "snr")
#: points compared with the cells at once (a chunk × cells distance matrix)
CHUNK = 256


def _features(c, gamma, snr, align, log_reff) -> np.ndarray:
    """The scaled coordinates of points (arrays broadcast together), shape ``(..., 5)``."""
    return np.stack(np.broadcast_arrays(np.log10(c) / SCALES["log_c"], np.log10(gamma) / SCALES["log_gamma"],
                                        np.log1p(np.maximum(snr, 0.0)) / SCALES["log_snr"], align / SCALES["align"],
                                        log_reff / SCALES["log_reff"]), axis=-1)


def _candidates(rows, engine: str, asymptotic: bool) -> tuple:
    """The cells of ``engine`` (at its largest n when ``asymptotic``) and their arrays: (cells, features,
    activations, log10 n, within, gap, se/mc)."""
    cand = [r for r in rows if r["engine"] == engine and math.isfinite(r["gap"])]
    if asymptotic and cand:   # the asymptotic question: the most asymptotic cells
        top = max(r["n"] for r in cand)
        cand = [r for r in cand if r["n"] == top]
    col = {k: np.array([r[k] for r in cand], dtype=float) for k in ("c", "gamma", "snr", "align", "log_reff",
                                                                      "gap", "se", "mc")}
    F = _features(col["c"], col["gamma"], col["snr"], col["align"], col["log_reff"]).reshape(len(cand), 5)
    rel_se = np.divide(col["se"], np.abs(col["mc"]), out=np.full(len(cand), np.nan), where=col["mc"] != 0)
    return (tuple(cand), F, np.array([r["activation"] for r in cand], dtype=object),
            np.log10(np.maximum([r["n"] for r in cand], 1)) if cand else np.zeros(0),
            np.array([r["within"] for r in cand], dtype=bool), col["gap"], rel_se)


@lru_cache(maxsize=64)
def _shipped_candidates(engine: str, asymptotic: bool) -> tuple:
    return _candidates(load_atlas(), engine, asymptotic)


def assess(engine: str, activation: str | None, c, gamma, snr: float = 0.0, align: float = 0.0,
           log_reff: float = 0.0, n=None, rows=None) -> Accuracy:
    r"""The measured accuracy at the points (c, γ) of a layer whose theory engine is ``engine``.

    Parameters
    ----------
    engine : str
        :meth:`symattn.Layer.engine`.
    activation : str or None
        The activation's name (:attr:`symattn.Layer.activation_name`).
    c, gamma : array_like
        The points (broadcast together).
    snr, align, log_reff : float
        ‖μ‖², the alignment of μ with the weights' top direction, log10(r_eff/p)
        (:meth:`symattn.Layer.features`).
    n : int, array_like or None
        The tokens the value is for: cells at another n are farther by Δlog10 n/:data:`N_SCALE`. None (the
        asymptotic question) compares with the cells at the largest n measured for the engine.
    rows : sequence of dict, optional
        An atlas table (default: the shipped one, :func:`load_atlas`).

    Returns
    -------
    Accuracy

    Examples
    --------
    >>> cells = [dict(engine="paper", activation="tanh", c=0.5, gamma=0.1, snr=0.0, align=0.0, log_reff=0.0,
    ...               theory=0.50, mc=0.49, se=0.002, gap=0.02, within=True, layer="W = I", n=600)]
    >>> a = assess("paper", "tanh", [0.5, 20.0], 0.1, rows=cells)
    >>> a.validated.tolist(), a.flagged.tolist(), [round(g, 3) for g in a.gap.tolist()]
    ([True, False], [False, False], [0.02, 0.02])
    """
    cand, F, acts, logn, within, gaps, rel_se = (_shipped_candidates(engine, n is None) if rows is None else
                                                 _candidates(rows, engine, n is None))
    cb, gb = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
    shape = cb.shape
    cb, gb = cb.ravel(), gb.ravel()
    P = cb.size
    nb = None if n is None else np.broadcast_to(np.asarray(n, dtype=float), shape).ravel()
    out = Accuracy(gap=np.full(P, np.nan), se=np.full(P, np.nan), distance=np.full(P, np.inf),
                   validated=np.zeros(P, dtype=bool), flagged=np.zeros(P, dtype=bool),
                   index=np.full(P, -1, dtype=int), table=cand, query=np.stack([cb, gb], axis=1))
    ok = np.nonzero((cb > 0) & (gb > 0))[0]   # γ = 0 (the ridgeless limit) was never measured
    if len(cand) and ok.size:
        mism2 = np.where(acts == activation, 0.0, ACTIVATION_MISMATCH**2)
        for start in range(0, ok.size, CHUNK):
            idx = ok[start:start + CHUNK]
            Q = _features(cb[idx], gb[idx], snr, align, log_reff)
            d2 = np.sum((Q[:, None, :] - F[None, :, :]) ** 2, axis=-1) + mism2[None, :]
            if nb is not None:
                d2 += ((logn[None, :] - np.log10(nb[idx])[:, None]) / N_SCALE) ** 2
            d = np.sqrt(d2)
            j = np.argmin(d, axis=1)
            near = d <= RADIUS
            near[np.arange(idx.size), j] = True   # the nearest cell always counts
            failing = near & ~within[None, :]
            flagged = failing.any(axis=1)
            worst = np.argmax(np.where(failing, np.abs(gaps)[None, :], -1.0), axis=1)
            k = np.where(flagged, worst, j)
            out.distance[idx] = d[np.arange(idx.size), j]
            out.validated[idx] = out.distance[idx] <= VALIDATED
            out.flagged[idx] = flagged
            out.gap[idx], out.se[idx], out.index[idx] = gaps[k], rel_se[k], k
    for name in ("gap", "se", "distance", "validated", "flagged"):
        setattr(out, name, getattr(out, name).reshape(shape))
    return out
