r"""How accurate the theory is where it is asked: the measured accuracy atlas, shipped as data.

``symattn atlas`` (:mod:`symattn.atlas`) measures the theory against exact Monte Carlo over a grid of
layers and settings and writes a compact table, one row per cell (point × γ); the table of the default
atlas is installed with the package (``symattn/data/atlas.csv``). :func:`assess` places a query among the
measured cells of the same theory engine **and the same activation** (or a declared family,
:data:`FAMILIES`, each with its reason: a cell of another activation says nothing of this one; GELU on
MiniLM layer 2 borrowed +17 % to +46 % from erf and tanh cells where its own cells measure −19 % to +3 %),
in the parameter space

.. math::

   d^2 = \Big(\frac{Δ\log_{10} c}{0.25}\Big)^2 + \Big(\frac{Δ\log_{10} γ}{1}\Big)^2
         + \Big(\frac{Δ\log(1 + ‖μ‖^2)}{0.5}\Big)^2 + \Big(\frac{Δa}{0.5}\Big)^2
         + \Big(\frac{Δ\log_{10}(r_\mathrm{eff}/p)}{0.5}\Big)^2
         + \Big(\frac{Δ\log(1 + ‖w_K‖^2)}{0.5}\Big)^2 + \Big(\frac{Δ\log(1 + ‖w_Q‖^2)}{0.5}\Big)^2
         + \Big(\frac{Δ\log_{10} n}{0.3}\Big)^2,

with a the alignment of μ with the weights' top direction, r_eff = ‖W‖_F⁴/‖WᵀW‖_F² the effective
rank of W, ‖w_K‖², ‖w_Q‖² the strengths of the paper's low-rank weights (summed over their rank; 0 for a
layer with weights W, whose scale is in W itself) (:meth:`symattn.Layer.features`), n the tokens (a value
asked without n is compared with the cells at the largest n the engine was measured at). Every coordinate
the theory depends on is counted: a point at ‖w_K‖² = ‖w_Q‖² = 100 is far from every measured cell
(issue 38). A cell measures the training error or, in its ``error`` column, the test error (docs/theory.md
§14); a query is compared with the cells of its own error only. Cells whose ``call`` has ``"n": null``
measured the asymptotic theory: where an engine has such cells they answer the question asked without n, and
the others the question asked at their n. A cell is *within tolerance* when |theory − MC| <= max(3 se, 3 % of theory). The query is

- *unvalidated* ("not measured") when its activation has no cell of its engine, or the nearest such cell
  is farther than :data:`VALIDATED`;
- *flagged* when any cell within :data:`RADIUS` (or the nearest one) is outside the tolerance: its
  gap is then the largest such gap, so a value near a measured miss is never returned silently.

Gaps are signed **(MC − theory)/theory** everywhere (the atlas table and its figures, the warnings,
docs/accuracy.md and docs/theory.md, the validation tables): +10 % means exact Monte Carlo is 10 % above the
theory (the theory is low), and z = (MC − theory)/se.

:class:`~symattn.errors.AccuracyWarning` is issued for unvalidated and flagged points
(:meth:`symattn.Layer.theory`), about the points the user asked for: the solves a function makes at
points of its own (the limits' extrapolations, :func:`symattn.limits`) run inside :func:`internal`, which
skips the assessment. Nothing here runs the theory: it reads the table.
"""

from __future__ import annotations

import contextlib
import contextvars
import csv
import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

__all__ = ["ATLAS_PATH", "TOKENS_ATLAS_PATH", "token_coordinates", "Accuracy", "assess", "load_atlas",
           "within_tolerance", "TOL_SE", "TOL_REL", "RADIUS", "VALIDATED", "COLUMNS", "ERRORS", "FAMILIES", "GAP",
           "internal", "is_internal"]

#: the atlas of the default spec, installed with the package
ATLAS_PATH = Path(__file__).with_name("data") / "atlas.csv"
#: the token block of the atlas (docs/theory.md §15; :mod:`symattn.atlas.tokens`): the cells of the engines
#: ``temporal`` (attention under a token law) and ``temporal/linear``, ``temporal/linear-test`` (ridge on X)
TOKENS_ATLAS_PATH = Path(__file__).with_name("data") / "atlas_tokens.csv"
#: under a token law the distance adds (Δr₁/0.15)² + (Δρ_y/0.3)²: r₁ the noise's lag-1 correlation, ρ_y = 2q − 1
TOKEN_SCALES = {"r1": 0.15, "rho_y": 0.3}
#: the agreement rule: |MC − theory| <= max(TOL_SE se, TOL_REL |theory|)
TOL_SE, TOL_REL = 3.0, 0.03
#: cells within this distance of a query are its neighbourhood
RADIUS = 1.0
#: a query whose nearest cell is farther than this is unvalidated
VALIDATED = 1.5
#: the scales of the distance (module docstring)
SCALES = {"log_c": 0.25, "log_gamma": 1.0, "log_snr": 0.5, "align": 0.5, "log_reff": 0.5, "log_wk": 0.5,
          "log_wq": 0.5}
#: the sign convention of every gap: exact Monte Carlo relative to the theory (docs/theory.md, "Gap")
GAP = "(MC − theory)/theory"
#: activation → (the activation whose cells it may use, the reason). None declared: the kernel constants
#: (a1, s², d) of two activations can agree while their finite-n Monte Carlo does not, so no activation
#: borrows another's cells (aliases are resolved before: 'swish' is 'silu').
FAMILIES: dict = {}
#: the scale of Δlog10 n in the distance (a factor 2 in n is 1.0)
N_SCALE = 0.3
#: the columns of the atlas table
COLUMNS = ("block", "engine", "layer", "activation", "c", "gamma", "n", "p", "tile", "mu", "snr", "align",
           "log_reff", "theory", "mc", "se", "draws", "gap", "z", "within", "call", "error")
#: the errors a cell measures: the training (memorisation) error, or the test error (docs/theory.md §14)
ERRORS = ("train", "test")


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
            row["error"] = r.get("error") or "train"   # a table from before the test-error cells
            row["asymptotic"] = _asymptotic(r.get("call"))
            row["wk2"], row["wq2"] = _weight_strengths(r.get("call"))
            row["r1"], row["rho_y"] = _token_call(r.get("call"))
            out.append(row)
    return tuple(out)


def _asymptotic(call) -> bool:
    """True when the cell's theory is the asymptotic one (its ``call`` has ``"n": null``): it answers the
    question asked without n, the other cells the question asked at their n."""
    try:
        return "n" in (json.loads(call) if call else {}) and json.loads(call)["n"] is None
    except (TypeError, ValueError):
        return False


def _weight_strengths(call) -> tuple:
    """(‖w_K‖², ‖w_Q‖²) of an atlas row, from the geometry of its ``call`` (0 for a layer with weights)."""
    try:
        geo = (json.loads(call) if call else {}).get("geometry") or {}
    except (TypeError, ValueError):
        geo = {}
    return float(geo.get("wk2") or 0.0), float(geo.get("wq2") or 0.0)


def token_coordinates(tokens) -> tuple:
    """(r₁, ρ_y) of a token law given as data (:meth:`symattn.tokens.TokenLaw.as_dict`: ``ar1``, ``autocorr``,
    ``markov``): the noise's lag-1 correlation and 2q − 1 of Markov labels; (0, 0) for None (iid).

    Examples
    --------
    >>> token_coordinates({"ar1": 0.5, "markov": 0.9})
    (0.5, 0.8)
    >>> token_coordinates({"autocorr": [0.3, 0.1]}), token_coordinates(None)
    ((0.3, 0.0), (0.0, 0.0))
    """
    tokens = tokens or {}
    auto = tokens.get("autocorr") or [0.0]
    r1 = tokens.get("ar1") or auto[0]
    q = tokens.get("markov")
    return float(r1), 0.0 if q is None else round(2 * float(q) - 1, 12)


def _token_call(call) -> tuple:
    """(r₁, ρ_y) of an atlas row, from the ``tokens`` of its ``call`` (0, 0 for iid tokens)."""
    try:
        tokens = (json.loads(call) if call else {}).get("tokens")
    except (TypeError, ValueError):
        tokens = None
    return token_coordinates(tokens) if tokens else (0.0, 0.0)


_INTERNAL = contextvars.ContextVar("symattn_accuracy_internal", default=False)


@contextlib.contextmanager
def internal():
    """Solves inside this block are a function's own points, not the user's: no accuracy assessment
    (:meth:`symattn.Layer.theory` leaves ``accuracy`` None and warns nothing).

    Examples
    --------
    >>> with internal():
    ...     is_internal()
    True
    >>> is_internal()
    False
    """
    token = _INTERNAL.set(True)
    try:
        yield
    finally:
        _INTERNAL.reset(token)


def is_internal() -> bool:
    """True inside :func:`internal`."""
    return _INTERNAL.get()


@dataclass(repr=False)
class Accuracy:
    r"""The measured accuracy of the theory at each point of a result (:func:`assess`).

    Attributes
    ----------
    gap : numpy.ndarray
        (MC − theory)/theory (:data:`GAP`: + means Monte Carlo is above the theory) of the nearest cell, or
        of the worst failing cell of the neighbourhood when ``flagged``; NaN where no cell exists.
    se : numpy.ndarray
        The relative standard error se/theory of that cell.
    distance : numpy.ndarray
        The distance to the nearest cell (module docstring).
    validated : numpy.ndarray of bool
        The nearest cell is within :data:`VALIDATED`.
    flagged : numpy.ndarray of bool
        A cell of the neighbourhood (or the nearest) is outside the tolerance.
    index : numpy.ndarray of int
        The row of ``table`` each point's gap comes from (−1: none).
    table : tuple of dict
        The atlas cells the points were compared with (those of their engine and activation).
    query : numpy.ndarray
        The points (c, γ), shape ``(P, 2)``.
    activation, engine : str or None
        What was asked (the activation after :data:`FAMILIES`).
    error : {'train', 'test'}
        The error whose cells were compared (:data:`ERRORS`).
    """

    gap: np.ndarray
    se: np.ndarray
    distance: np.ndarray
    validated: np.ndarray
    flagged: np.ndarray
    index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    table: tuple = ()
    query: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    activation: str | None = None
    engine: str | None = None
    error: str = "train"

    def __repr__(self) -> str:
        """A few lines: the counts of each flag and the largest measured gap (never the table)."""
        flags = [self.flag(i) for i in range(np.asarray(self.gap).size)]
        counts = ", ".join(f"{flags.count(w)} {w}" for w in ("ok", "miss", "unvalidated"))
        worst = ""
        g = np.where(np.asarray(self.validated), np.abs(np.asarray(self.gap, dtype=float)), np.nan)
        if np.isfinite(g).any():
            i = int(np.nanargmax(g))
            worst = f"; largest measured gap {GAP} = {100 * self.gap.flat[i]:+.1f} % ({self._where(i)})"
        return (f"Accuracy({self.activation!r}, engine={self.engine!r}, error={self.error!r}, {len(flags)} point(s): {counts}{worst}; "
                f"{len(self.table)} atlas cell(s) compared)")

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

    def _where(self, i: int) -> str:
        cell = self.cell(i)
        law = "".join(f", {k}={cell[k]:g}" for k in ("r1", "rho_y") if cell.get(k))   # a token block's cell
        k = np.asarray(self.index).flat[i]
        asym = " (the asymptotic theory)" if k >= 0 and self.table[k].get("asymptotic") else ""
        return (f"{cell.get('activation')}, {cell.get('layer')}, c={cell.get('c'):g}, gamma={cell.get('gamma'):g}, "
                f"n={cell.get('n')}{law}{asym}")

    def message(self) -> str | None:
        """The text of the AccuracyWarning (None when every point is validated and not flagged): per point, the
        measured gap (:data:`GAP`, signed) with the activation, layer, c, γ and n of the cell it comes from, or
        "not measured" when no cell of this activation is near enough."""
        bad = np.flatnonzero(~self.ok)
        if not bad.size:
            return None
        parts = []
        for i in bad[:5]:
            cell = self.cell(i)
            where = f"c={cell.get('query_c'):g}, gamma={cell.get('query_gamma'):g}"
            if self.flag(i) == "unvalidated":
                d = self.distance.flat[i]
                if math.isfinite(d):
                    near = f"the nearest cell, {self._where(i)}, is at distance {d:.3g} > {VALIDATED:g}"
                elif not self.table:
                    near = (f"the atlas has no {'test-error ' if self.error == 'test' else ''}cell of "
                            f"{self.activation!r} with the {self.engine!r} engine")
                else:
                    near = "the ridgeless value gamma = 0 was not measured"
                parts.append(f"{where}: unvalidated, not measured ({near})")
                continue
            g = self.gap.flat[i]
            parts.append(f"{where}: the atlas measured {GAP} = {100 * g:+.1f} % (Monte Carlo "
                         f"{'above' if g > 0 else 'below'} the theory; se {100 * self.se.flat[i]:.1f} %) "
                         f"at {self._where(i)}")
        more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
        what = "test-error " if self.error == "test" else ""
        return (f"{len(bad)} of {self.gap.size} {what}theory value(s) are not validated within max(3 se, 3 %) of exact "
                "Monte Carlo by the accuracy atlas (docs/accuracy.md): " + "; ".join(parts) + more)


#: what a cell says of itself in :attr:`Accuracy.cells`
_CELL_KEYS = ("block", "layer", "activation", "c", "gamma", "n", "engine", "mu", "snr", "r1", "rho_y", "error")
#: points compared with the cells at once (a chunk × cells distance matrix)
CHUNK = 256


def _features(c, gamma, snr, align, log_reff, wk2, wq2) -> np.ndarray:
    """The scaled coordinates of points (arrays broadcast together), shape ``(..., 7)``."""
    return np.stack(np.broadcast_arrays(np.log10(c) / SCALES["log_c"], np.log10(gamma) / SCALES["log_gamma"],
                                        np.log1p(np.maximum(snr, 0.0)) / SCALES["log_snr"], align / SCALES["align"],
                                        log_reff / SCALES["log_reff"], np.log1p(np.maximum(wk2, 0.0)) / SCALES["log_wk"],
                                        np.log1p(np.maximum(wq2, 0.0)) / SCALES["log_wq"]), axis=-1)


def _candidates(rows, engine: str, activation, asymptotic: bool, error: str = "train") -> tuple:
    """The cells of ``engine``, ``activation`` and ``error`` (at their largest n when ``asymptotic``) and their
    arrays: (cells, features, log10 n, within, gap, se/mc). Cells of the asymptotic theory (call n = null)
    answer the asymptotic question only, when there are any; the others the question at a given n."""
    cand = [r for r in rows if r["engine"] == engine and r["activation"] == activation and math.isfinite(r["gap"])
            and r.get("error", "train") == error]
    if any(r.get("asymptotic") for r in cand):
        cand = [r for r in cand if bool(r.get("asymptotic")) == asymptotic]
    if asymptotic and cand:   # the asymptotic question: the most asymptotic cells
        top = max(r["n"] for r in cand)
        cand = [r for r in cand if r["n"] == top]
    col = {k: np.array([r.get(k, 0.0) for r in cand], dtype=float)
           for k in ("c", "gamma", "snr", "align", "log_reff", "wk2", "wq2", "gap", "se", "theory", "r1", "rho_y")}
    F = _features(col["c"], col["gamma"], col["snr"], col["align"], col["log_reff"], col["wk2"],
                  col["wq2"]).reshape(len(cand), 7)
    rel_se = np.divide(col["se"], np.abs(col["theory"]), out=np.full(len(cand), np.nan), where=col["theory"] != 0)
    T = np.stack([col["r1"] / TOKEN_SCALES["r1"], col["rho_y"] / TOKEN_SCALES["rho_y"]], axis=-1).reshape(len(cand), 2)
    return (tuple(cand), F, np.log10(np.maximum([r["n"] for r in cand], 1)) if cand else np.zeros(0),
            np.array([r["within"] for r in cand], dtype=bool), col["gap"], rel_se, T)


@lru_cache(maxsize=64)
def _shipped_candidates(engine: str, activation, asymptotic: bool, error: str = "train") -> tuple:
    rows = load_atlas()
    if engine.startswith("temporal"):   # the token block, and any token cells of the main table
        rows = load_atlas(TOKENS_ATLAS_PATH) + rows
    return _candidates(rows, engine, activation, asymptotic, error)


def assess(engine: str, activation: str | None, c, gamma, snr: float = 0.0, align: float = 0.0,
           log_reff: float = 0.0, n=None, rows=None, wk2: float = 0.0, wq2: float = 0.0, tokens=None,
           error: str = "train") -> Accuracy:
    r"""The measured accuracy at the points (c, γ) of a layer whose theory engine is ``engine``.

    Parameters
    ----------
    engine : str
        :meth:`symattn.Layer.engine`.
    activation : str or None
        The activation's name (:attr:`symattn.Layer.activation_name`): only its cells are compared (or
        those of its family, :data:`FAMILIES`); none measured: every point is unvalidated, "not measured".
    c, gamma : array_like
        The points (broadcast together).
    snr, align, log_reff : float
        ‖μ‖², the alignment of μ with the weights' top direction, log10(r_eff/p)
        (:meth:`symattn.Layer.features`).
    wk2, wq2 : float
        ‖w_K‖², ‖w_Q‖² of the paper's low-rank weights (:meth:`symattn.Layer.features`).
    n : int, array_like or None
        The tokens the value is for: cells at another n are farther by Δlog10 n/:data:`N_SCALE`. None (the
        asymptotic question) compares with the cells at the largest n measured for the engine.
    rows : sequence of dict, optional
        An atlas table (default: the shipped one, :func:`load_atlas`; for the engines ``temporal*`` with the
        token block :data:`TOKENS_ATLAS_PATH`).
    tokens : dict or None
        The token law as data (docs/theory.md §15; :meth:`symattn.tokens.TokenLaw.as_dict`): its (r₁, ρ_y)
        (:func:`token_coordinates`) add (Δr₁/0.15)² + (Δρ_y/0.3)² to the distance (cells without a law sit
        at (0, 0)).
    error : {'train', 'test'}
        The error the value is of: only the cells measuring it are compared (a table's rows without an
        ``error`` are of the training error).

    Returns
    -------
    Accuracy

    Examples
    --------
    >>> cells = [dict(engine="paper", activation="tanh", c=0.5, gamma=0.1, snr=0.0, align=0.0, log_reff=0.0,
    ...               theory=0.50, mc=0.51, se=0.002, gap=0.02, within=True, layer="W = I", n=600)]
    >>> a = assess("paper", "tanh", [0.5, 20.0], 0.1, rows=cells)
    >>> a.validated.tolist(), a.flagged.tolist(), [round(g, 3) for g in a.gap.tolist()]
    ([True, False], [False, False], [0.02, 0.02])
    >>> assess("paper", "gelu", 0.5, 0.1, rows=cells).flag(0)   # no GELU cell: not measured
    'unvalidated'
    >>> assess("paper", "tanh", 0.5, 0.1, rows=cells, error="test").flag(0)   # a training cell says nothing of it
    'unvalidated'
    """
    activation = FAMILIES.get(activation, (activation, ""))[0]
    if error not in ERRORS:
        from .errors import ParameterError

        raise ParameterError("error", error, "'train' or 'test'")
    cand, F, logn, within, gaps, rel_se, T = (_shipped_candidates(engine, activation, n is None, error)
                                              if rows is None else _candidates(rows, engine, activation, n is None,
                                                                               error))
    cb, gb = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
    shape = cb.shape
    cb, gb = cb.ravel(), gb.ravel()
    P = cb.size
    nb = None if n is None else np.broadcast_to(np.asarray(n, dtype=float), shape).ravel()
    out = Accuracy(gap=np.full(P, np.nan), se=np.full(P, np.nan), distance=np.full(P, np.inf),
                   validated=np.zeros(P, dtype=bool), flagged=np.zeros(P, dtype=bool),
                   index=np.full(P, -1, dtype=int), table=cand, query=np.stack([cb, gb], axis=1),
                   activation=activation, engine=engine, error=error)
    ok = np.nonzero((cb > 0) & (gb > 0))[0]   # γ = 0 (the ridgeless limit) was never measured
    tq = np.array(token_coordinates(tokens)) / [TOKEN_SCALES["r1"], TOKEN_SCALES["rho_y"]]
    if len(cand) and ok.size:
        for start in range(0, ok.size, CHUNK):
            idx = ok[start:start + CHUNK]
            Q = _features(cb[idx], gb[idx], snr, align, log_reff, wk2, wq2)
            d2 = np.sum((Q[:, None, :] - F[None, :, :]) ** 2, axis=-1)
            d2 += np.sum((tq[None, None, :] - T[None, :, :]) ** 2, axis=-1)
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
