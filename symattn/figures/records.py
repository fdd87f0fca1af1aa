r"""The data behind every figure: CSV rows, the CSV file, and the theory-vs-Monte-Carlo agreement.

A figure records three kinds of row (column ``kind``): ``curve`` (a theory line, no Monte Carlo),
``point`` (a Monte Carlo point with the theory at the same x) and ``diagnostic`` (other data of
the figure). ``mc_model`` says what was simulated: :data:`THEORY_MODEL` (the system the theory
describes) or :data:`REAL_WEIGHTS` (the real W; the theory uses its fitted structure).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..model import STRONG_SIGNAL_T
from ..provenance import provenance_path, write_provenance

__all__ = ["STRONG_SIGNAL_T", "TOL_SE", "TOL_REL", "CSV_COLUMNS", "THEORY_MODEL", "REAL_WEIGHTS", "Records",
           "FigureResult", "write_csv", "write_provenance", "provenance_path", "agreement"]

#: Tolerance of the agreement summary: |MC − theory| <= max(3 se, 3 % of theory).
TOL_SE = 3.0
TOL_REL = 0.03

CSV_COLUMNS = ["figure", "panel", "kind", "curve", "model", "activation", "diagonal", "x_name", "x",
               "theory", "mc_mean", "mc_sem", "mc_model", "n", "p", "draws", "c", "gamma", "snr",
               "theta", "t", "strong_signal", "theory_finite_p"]

THEORY_MODEL = "theory model"
REAL_WEIGHTS = "real weights"


class Records:
    """Rows of one figure's CSV (dicts keyed by :data:`CSV_COLUMNS` plus any extra columns).

    Examples
    --------
    >>> rec = Records("demo")
    >>> row = rec.point("a", "E_A", "gamma", 0.1, 0.30, 0.31, 0.005, model="attention", n=400, p=400,
    ...                 draws=5, t=0.3)
    >>> row["strong_signal"], len(rec.points())     # |t| = 0.3 > 0.15
    (True, 1)
    """

    def __init__(self, figure: str):
        self.figure = figure
        self.rows: list[dict] = []

    def curve(self, panel, curve, x_name, xs, values, **meta):
        """Add one ``curve`` row per (x, theory value)."""
        for x, v in zip(np.ravel(xs), np.ravel(values)):
            self.rows.append(dict(figure=self.figure, panel=panel, kind="curve", curve=curve, x_name=x_name,
                                  x=float(x), theory=float(v), **meta))

    def point(self, panel, curve, x_name, x, th, mean, sem, *, model, n, p, draws, t=None,
              mc_model=THEORY_MODEL, theory_finite_p=None, **meta):
        """Add a ``point`` row; an attention point with |t| > STRONG_SIGNAL_T is flagged ``strong_signal``.

        Returns the row (a dict).
        """
        strong = None
        if model == "attention" and t is not None:
            strong = bool(abs(t) > STRONG_SIGNAL_T)
        row = dict(figure=self.figure, panel=panel, kind="point", curve=curve, model=model, x_name=x_name,
                   x=float(x), theory=float(th), mc_mean=float(mean), mc_sem=float(sem), mc_model=mc_model,
                   n=int(n), p=int(p), draws=int(draws), t=None if t is None else float(t),
                   strong_signal=strong, theory_finite_p=theory_finite_p, **meta)
        self.rows.append(row)
        return row

    def diagnostic(self, panel, curve, x_name, xs, values, **meta):
        """Add one ``diagnostic`` row per (x, value) (the value goes to the ``theory`` column)."""
        for x, v in zip(np.ravel(xs), np.ravel(values)):
            self.rows.append(dict(figure=self.figure, panel=panel, kind="diagnostic", curve=curve,
                                  x_name=x_name, x=float(x), theory=float(v), **meta))

    def points(self):
        """The ``point`` rows."""
        return [r for r in self.rows if r["kind"] == "point"]


@dataclass
class FigureResult:
    """One written figure: its name, its :class:`Records` and the files (PNG, PDF, CSV); ``note``: a remark."""

    name: str
    records: Records
    files: list = field(default_factory=list)
    note: str = ""


def write_csv(path: Path, rows: list[dict], provenance: dict | None = None) -> Path:
    """Write ``rows`` to ``path`` with the columns :data:`CSV_COLUMNS` then the extra ones (sorted).

    Missing values and non-finite floats are empty cells; booleans are ``true``/``false``. The
    file is written atomically (:func:`symattn.files.atomic_path`); with ``provenance``, its
    provenance object goes to ``<path>.provenance.json`` (:func:`write_provenance`).

    Parameters
    ----------
    path : pathlib.Path
        The CSV file (its folder is created).
    rows : list of dict
        The rows (:attr:`Records.rows`).
    provenance : dict, optional
        :func:`symattn.provenance.provenance` of the data.

    Returns
    -------
    pathlib.Path
        ``path``.

    Examples
    --------
    >>> import tempfile
    >>> rec = Records("demo")
    >>> rec.curve("a", "E_LR", "gamma", [0.1, 1.0], [0.2, float("nan")])
    >>> f = write_csv(Path(tempfile.mkdtemp()) / "fig_demo.csv", rec.rows)
    >>> f.read_text().splitlines()[2].split(",")[9]     # the theory column of the NaN point
    ''
    """
    from ..files import atomic_path

    extra = sorted({k for r in rows for k in r} - set(CSV_COLUMNS))
    cols = CSV_COLUMNS + extra
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k)) for k in cols})
    if provenance is not None:
        write_provenance(path, provenance)
    return path


def _csv_value(v):
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (float, np.floating)):
        return "" if not math.isfinite(float(v)) else repr(float(v))
    return v


def agreement(rows, tol_se: float = TOL_SE, tol_rel: float = TOL_REL) -> dict:
    r"""Theory against Monte Carlo on the ``point`` rows whose simulation is the theory's model.

    A point agrees when |mc_mean − theory| <= max(tol_se·mc_sem, tol_rel·|theory|). Strong-signal
    points are not checked against the asymptotic theory; those with a ``theory_finite_p`` are
    checked against it instead (counted in ``strong_checked``/``strong_agree``).

    Parameters
    ----------
    rows : iterable of dict
        CSV rows (:attr:`Records.rows`); rows of other kinds are ignored.
    tol_se, tol_rel : float
        The tolerance in standard errors and relative to the theory.

    Returns
    -------
    dict
        ``{"checked", "agree", "excluded_strong", "strong_checked", "strong_agree", "real_weights",
        "max_rel_gap", "worst"}`` (``max_rel_gap``/``worst``: over the asymptotic checks).

    Examples
    --------
    >>> rows = [dict(kind="point", mc_model=THEORY_MODEL, strong_signal=False, theory=1.0, mc_mean=1.02,
    ...              mc_sem=0.01)]
    >>> a = agreement(rows)
    >>> a["checked"], a["agree"], round(a["max_rel_gap"], 3)
    (1, 1, 0.02)
    """
    checked = agree = strong = strong_checked = strong_agree = real = 0
    worst, max_gap = None, 0.0

    def judge(th, m, se):
        if not (th is not None and math.isfinite(th) and math.isfinite(m)):
            return None
        se = se if math.isfinite(se) else 0.0
        return abs(m - th) <= max(tol_se * se, tol_rel * abs(th)), (abs(m - th) / abs(th) if th else math.inf)

    for r in rows:
        if r.get("kind") != "point":
            continue
        if r.get("mc_model") != THEORY_MODEL:
            real += 1
            continue
        if r.get("strong_signal"):
            strong += 1
            verdict = judge(r.get("theory_finite_p"), r["mc_mean"], r["mc_sem"])
            if verdict is not None:
                strong_checked += 1
                strong_agree += verdict[0]
            continue
        verdict = judge(r["theory"], r["mc_mean"], r["mc_sem"])
        if verdict is None:
            continue
        checked += 1
        agree += verdict[0]
        if verdict[1] > max_gap:
            max_gap, worst = verdict[1], r
    return {"checked": checked, "agree": agree, "excluded_strong": strong, "strong_checked": strong_checked,
            "strong_agree": strong_agree, "real_weights": real, "max_rel_gap": max_gap,
            "worst": None if worst is None else {k: worst.get(k) for k in ("figure", "panel", "curve", "x_name", "x",
                                                                              "theory", "mc_mean", "mc_sem")}}
