r"""Reproduce the paper's figures: theory lines against Monte Carlo points (``symattn reproduce``).

Every figure shows the deterministic equivalents (solid lines, :func:`symattn.memorization_error`)
and exact finite-n Monte Carlo (markers with ±1 standard-error bars, :func:`symattn.simulate`),
and is written as PNG and PDF next to a CSV of its data. The theory uses the finite-p diagonal
d_n at the simulated n (MATH.md §1), so lines and points describe the same finite system.

Figures (file stem ``fig_<name>``):

- ``mu0`` -- μ = 0: E_A for tanh and ReLU against E_LR, as functions of γ (c = 1) and of c
  (γ = 0.1); the third panel keeps W = I (w_K = w_Q = 0) and varies ‖μ‖² (c = 1, γ = 0.1).
  (MATH.md §8, claim 1.)
- ``aligned`` -- w_K = w_Q = θμ/‖μ‖ (c = 0.5, ‖μ‖² = 1, tanh): E_A against E_LR over θ and γ, and
  the theory map of E_A/E_LR over (θ, γ) with the contours E_A = E_LR (the gap reverses, E_A <
  E_LR, at larger γ) and E_A = 1.01 E_LR (the gap is closed to below 1 % at smaller γ). (Claim 2.)
- ``a1zero`` -- a1 = 0 against a1 ≠ 0: cos and He3 against tanh, as functions of c
  (μ = 0, γ = 0.1) and of ‖μ‖² (c = 1, W = I, γ = 0.1). He3 is superlinear, so its kernel
  diagonal is zeroed (``diagonal='zero'``) in both theory and Monte Carlo. (Claim 3.)
- ``minilm``, ``minilm_rank`` -- real pretrained weights (all-MiniLM-L6-v2), see
  :mod:`symattn.realweights`; needs the ``[real]`` extra, else skipped with a message.

CSV columns (one file per figure): ``figure, panel, kind`` (``curve``: a theory line, no Monte
Carlo; ``point``: a Monte Carlo point with the theory at the same x; ``diagnostic``: other data of
the figure), ``curve, model, activation, diagonal, x_name, x, theory, mc_mean, mc_sem, mc_model``
(``theory model``: the simulated system is the one the theory describes; ``real weights``: the
Monte Carlo uses the real W, the theory its fitted structure), ``n, p, draws, c, gamma, snr,
theta, t, strong_signal``. ``t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p`` is the finite-p signal
strength of MATH-FINITE-P.md; ``strong_signal = |t| > 0.15`` (:data:`STRONG_SIGNAL_T`), the
regime where the asymptotic theory is known to be off at realistic p (attention points only);
``theory_finite_p``: at strong-signal points, the finite-p corrected theory
(``correction="finite-p"``, docs/finite_p.md), against which those points are checked.
"""

from __future__ import annotations

import csv
import math
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

__all__ = [
    "Settings",
    "QUICK",
    "FULL",
    "FIGURES",
    "STRONG_SIGNAL_T",
    "CSV_COLUMNS",
    "run",
    "agreement",
    "add_parser",
]

#: Points with t = (‖μ‖² + Σ μᵀw_K μᵀw_Q)/√p above this are flagged ``strong_signal``
#: (MATH-FINITE-P.md: the asymptotic theory is off there at realistic p).
STRONG_SIGNAL_T = 0.15

#: Tolerance of the agreement summary: |MC − theory| <= max(3 se, 3 % of theory).
TOL_SE = 3.0
TOL_REL = 0.03

CSV_COLUMNS = ["figure", "panel", "kind", "curve", "model", "activation", "diagonal", "x_name", "x",
               "theory", "mc_mean", "mc_sem", "mc_model", "n", "p", "draws", "c", "gamma", "snr",
               "theta", "t", "strong_signal", "theory_finite_p"]

#: Resolution of the PNG files (the PDF files are vector graphics).
PNG_DPI = 120

THEORY_MODEL = "theory model"
REAL_WEIGHTS = "real weights"


@dataclass(frozen=True)
class Settings:
    """Sizes of one reproduction run (:data:`QUICK`, :data:`FULL`, or your own via ``replace``)."""

    name: str = "quick"
    n: int = 400                     # tokens of the synthetic Monte Carlo (p = round(c n))
    draws: int = 5
    seed: int = 0
    curve_points: int = 25           # points of each theory line
    gamma_fixed: float = 0.1         # γ of the sweeps over c, ‖μ‖², θ
    # μ = 0 figure
    mu0_gammas: tuple = (0.01, 0.1, 1.0, 10.0)
    mu0_cs: tuple = (0.5, 1.0, 2.0)
    mu0_snrs: tuple = (1.0, 2.0, 4.0)
    # aligned figure
    aligned_c: float = 0.5
    aligned_snr: float = 1.0
    aligned_thetas: tuple = (0.0, 1.0, 2.0, 3.0)
    aligned_gammas: tuple = (0.01, 1.0, 10.0)
    heat_points: int = 21
    # a1 = 0 figure
    a1zero_cs: tuple = (0.5, 1.0, 2.0, 4.0)
    a1zero_snrs: tuple = (0.0, 1.0, 2.0, 4.0)
    # real weights
    real_c: float = 0.5
    real_draws: int = 4
    real_layers: tuple = (0, 1, 2, 3, 4, 5)
    real_ranks: tuple = (0, 1, 4)
    real_gammas: tuple = (0.01, 0.1, 1.0, 10.0)
    real_snr: float = 1.0
    real_scale: str = "unit"
    real_activation: str = "tanh"
    # Monte Carlo backend
    backend: str = "numpy"
    device: str | None = None


QUICK = Settings()
FULL = Settings(name="full", n=1500, draws=8, curve_points=49, mu0_gammas=(1e-3, 0.01, 0.1, 1.0, 10.0, 100.0),
                mu0_cs=(0.25, 0.5, 1.0, 2.0, 4.0), mu0_snrs=(0.5, 1.0, 2.0, 4.0),
                aligned_thetas=(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0), aligned_gammas=(1e-3, 0.01, 1.0, 10.0, 100.0),
                heat_points=41, a1zero_cs=(0.25, 0.5, 1.0, 2.0, 4.0), a1zero_snrs=(0.0, 0.5, 1.0, 2.0, 4.0),
                real_draws=8, real_ranks=(0, 1, 2, 4, 8), real_gammas=(1e-3, 0.01, 0.1, 1.0, 10.0))


# ============================================================================ Monte Carlo jobs
@dataclass
class Job:
    """One :func:`symattn.simulate` call; its result gives every γ of ``gammas`` at once."""

    f: object
    n: int
    c: float
    gammas: tuple
    draws: int
    geometry: object = None
    diagonal: str = "f"
    W: object = None
    mu: object = None
    models: tuple = ("attention", "linear")
    result: object = None


class Runner:
    """Collects the Monte Carlo jobs of all figures (deduplicated by key) and runs them under one
    progress bar (total = all draws)."""

    def __init__(self, settings: Settings, progress=None):
        self.settings = settings
        self.progress = progress
        self.jobs: dict = {}
        self.context: dict = {}  # data a figure's plan hands to its make (e.g. the loaded weights)

    def add(self, key, job: Job):
        if key not in self.jobs:
            self.jobs[key] = job
        return key

    def synthetic(self, f, c, geometry=None, diagonal="f", linear=False):
        """The standard synthetic job: n = settings.n, every γ the figures need. E_LR is simulated
        too when some caller asks for it (``linear=True``); the key does not depend on that."""
        from .activations import activation
        from .model import as_geometry

        s = self.settings
        f = activation(f)
        geo = as_geometry(geometry)
        key = ("syn", f.name, float(c), geo.gram.tobytes(), geo.rank, diagonal)
        self.add(key, Job(f=f, n=s.n, c=float(c), gammas=synthetic_gammas(s), draws=s.draws,
                          geometry=geo, diagonal=diagonal, models=("attention",)))
        if linear:
            self.jobs[key].models = ("attention", "linear")
        return key

    def run(self, echo=None):
        from tqdm.auto import tqdm

        from .montecarlo import simulate

        s = self.settings
        todo = [j for j in self.jobs.values() if j.result is None]
        total = sum(j.draws for j in todo)
        show = self.progress
        if show is None:
            try:
                show = s.name == "full" or sys.stderr.isatty()
            except (AttributeError, ValueError):
                show = False
        with tqdm(total=total, desc=f"reproduce ({s.name}) Monte Carlo", unit="draw", file=sys.stderr,
                  disable=not show) as bar:
            for job in todo:
                kw = dict(geometry=job.geometry) if job.W is None and job.mu is None else dict(W=job.W, mu=job.mu)
                with _blas_threads(job.n, s.backend):
                    job.result = simulate(job.f, n=job.n, c=job.c, gamma=job.gammas, draws=job.draws,
                                          seed=s.seed, backend=s.backend, device=s.device, diagonal=job.diagonal,
                                          progress=False, models=job.models, **kw)
                bar.update(job.draws)

    def result(self, key):
        return self.jobs[key].result


#: Below this n the Monte Carlo runs with one BLAS thread (see :func:`_blas_threads`).
SINGLE_THREAD_N = 2000


def _blas_threads(n: int, backend: str):
    """One BLAS thread for the matrices of this command (n <= SINGLE_THREAD_N, numpy backend).

    At n of a few hundred a multithreaded OpenBLAS gains nothing, and on a shared machine its
    spinning threads made one draw 20-50x slower (measured: 0.04 s single-threaded against
    1.5-4.7 s of CPU per draw at n = 384 under a load of 9 on 2 cores); at n = 1500 one thread
    costs at most the factor of the idle cores. Uses ``threadpoolctl`` when it is installed;
    otherwise nothing changes.
    """
    import contextlib

    if backend != "numpy" or n > SINGLE_THREAD_N:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def synthetic_gammas(s: Settings) -> tuple:
    return tuple(sorted(set(map(float, s.mu0_gammas + s.aligned_gammas + (s.gamma_fixed,)))))


def mc_at(result, model: str, gamma: float):
    """(mean, sem) of ``model`` at ``gamma`` from a SimulationResult."""
    i = int(np.argmin(np.abs(np.log(result.gamma) - math.log(gamma))))
    if not math.isclose(float(result.gamma[i]), gamma, rel_tol=1e-9):
        raise KeyError(f"gamma={gamma} was not simulated")
    mean = getattr(result, f"{model}_mean")[i]
    sem = getattr(result, f"{model}_sem")[i]
    return float(mean), float(sem)


# ============================================================================ theory
def theory(f, c, gamma, geometry=None, n=None, diagonal="f", model="attention", correction=None) -> np.ndarray:
    """:func:`symattn.memorization_error` as a float array; points where the solver does not
    converge are NaN (reported, not fatal)."""
    import warnings

    from .errors import ConvergenceError
    from .solve import memorization_error

    try:
        with warnings.catch_warnings():  # strong signals are flagged in the CSV (t), not warned about
            warnings.filterwarnings("ignore", message=".*finite-p signal strength.*")
            return np.asarray(memorization_error(f, c, gamma, geometry=geometry, model=model, n=n,
                                                 diagonal=diagonal, correction=correction), dtype=float)
    except ConvergenceError:
        if np.ndim(c) == 0 and np.ndim(gamma) == 0:
            return np.asarray(np.nan)
        # retry point by point so that one bad point does not lose the whole line
        cc, gg = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
        out = np.empty(cc.shape)
        for idx in np.ndindex(cc.shape):
            out[idx] = theory(f, float(cc[idx]), float(gg[idx]), geometry, n, diagonal, model, correction)
        return out


def finite_p_theory(f, c, gamma, geometry, n, t, diagonal="f", model="attention"):
    """The finite-p corrected E_A at a strong-signal attention point (|t| > STRONG_SIGNAL_T), else None."""
    if model != "attention" or t is None or abs(t) <= STRONG_SIGNAL_T:
        return None
    return float(theory(f, c, gamma, geometry, n=n, diagonal=diagonal, correction="finite-p"))


def strength(geometry, p: int) -> float:
    """t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p (MATH-FINITE-P.md)."""
    from .model import as_geometry

    return float(as_geometry(geometry).strength(p))


# ============================================================================ records
class Records:
    """Rows of one figure's CSV."""

    def __init__(self, figure: str):
        self.figure = figure
        self.rows: list[dict] = []

    def curve(self, panel, curve, x_name, xs, values, **meta):
        for x, v in zip(np.ravel(xs), np.ravel(values)):
            self.rows.append(dict(figure=self.figure, panel=panel, kind="curve", curve=curve, x_name=x_name,
                                  x=float(x), theory=float(v), **meta))

    def point(self, panel, curve, x_name, x, th, mean, sem, *, model, n, p, draws, t=None,
              mc_model=THEORY_MODEL, theory_finite_p=None, **meta):
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
        for x, v in zip(np.ravel(xs), np.ravel(values)):
            self.rows.append(dict(figure=self.figure, panel=panel, kind="diagnostic", curve=curve,
                                  x_name=x_name, x=float(x), theory=float(v), **meta))

    def points(self):
        return [r for r in self.rows if r["kind"] == "point"]


def write_csv(path: Path, rows: list[dict]) -> Path:
    extra = sorted({k for r in rows for k in r} - set(CSV_COLUMNS))
    cols = CSV_COLUMNS + extra
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols)
        w.writeheader()
        for r in rows:
            w.writerow({k: _csv_value(r.get(k)) for k in cols})
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
    r"""Theory against Monte Carlo on the ``point`` rows whose simulation is the theory's model:
    a point agrees when |mc_mean − theory| <= max(tol_se·mc_sem, tol_rel·|theory|). Strong-signal
    points are not checked against the asymptotic theory; those with a ``theory_finite_p`` are
    checked against it instead (counted in ``strong_checked``/``strong_agree``).

    Returns ``{"checked", "agree", "excluded_strong", "strong_checked", "strong_agree",
    "real_weights", "max_rel_gap", "worst"}`` (``max_rel_gap``/``worst``: over the asymptotic checks).
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


@dataclass
class FigureResult:
    name: str
    records: Records
    files: list = field(default_factory=list)
    note: str = ""


def save(fig, records: Records, out: Path, stem: str) -> list:
    from .plotting import save_figure

    files = [str(save_figure(fig, out / f"{stem}.png", dpi=PNG_DPI)), str(save_figure(fig, out / f"{stem}.pdf"))]
    files.append(str(write_csv(out / f"{stem}.csv", records.rows)))
    return files


# ============================================================================ plotting helpers
COLORS = {"tanh": "tab:red", "relu": "tab:orange", "linear": "tab:blue", "cos": "tab:green",
          "he3": "tab:purple"}
MARKERS = {"tanh": "o", "relu": "s", "linear": "D", "cos": "^", "he3": "v"}
STRONG_NOTE = rf"shaded markers: strong signal $|t|>{STRONG_SIGNAL_T}$, with the finite-p corrected theory ($\times$)"


def _curve_grid(values, points, pad=0.25):
    v = np.asarray(values, dtype=float)
    return np.logspace(math.log10(v.min()) - pad, math.log10(v.max()) + pad, points)


def _draw(ax, xs, th, px, mc, color, marker, logx, strong=None, linestyle="-", corrected=None):
    """Theory line and MC points (list of (mean, se)); points with ``strong`` True get a shaded face,
    and the finite-p corrected theory at them (``corrected``: values or None per point) a cross.
    Returns the legend handle (line, bars)."""
    from .plotting import plot_theory_vs_mc

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


def _legend(ax, entries, **kw):
    """Legend with one entry per (line, bars) pair: '── o  label'."""
    from matplotlib.legend_handler import HandlerTuple

    if entries:
        handles, labels = zip(*entries)
        kw.setdefault("fontsize", "x-small")
        kw.setdefault("frameon", False)
        ax.legend(list(handles), list(labels), handler_map={tuple: HandlerTuple(ndivide=None)}, **kw)


def _finish_axes(ax, xlabel, title, ylabel=r"training MSE $E$"):
    from .plotting import style_error_axes

    style_error_axes(ax, title=title, ylabel=ylabel, legend=False)
    ax.set_xlabel(xlabel)


def _log_ticks(ax, values):
    """Label a log axis at the given values in plain numbers (no minor labels)."""
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    ax.xaxis.set_major_locator(FixedLocator(list(values)))
    ax.xaxis.set_major_formatter(lambda v, _pos: f"{v:g}")
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())


def _mc_note(s: Settings, n=None, draws=None) -> str:
    return (f"lines: theory (finite-p diagonal $d_n$); markers: Monte Carlo n={n or s.n}, {draws or s.draws} draws, "
            "±1 s.e.")


def _label(act, diag="f", a1=None):
    if act == "linear":
        return r"$E_{LR}$"
    lab = rf"$E_A$ {act}"
    if diag == "zero":
        lab += " (diagonal zeroed)"
    if a1 is not None:
        lab += rf", $a_1={0.0 if abs(a1) < 1e-12 else a1:.2g}$"
    return lab


# ============================================================================ figure: μ = 0
MU0_ACTS = ("tanh", "relu", "linear")


def plan_mu0(s: Settings, runner: Runner):
    for act in ("tanh", "relu"):  # E_LR is read from the tanh runs
        for c in set(s.mu0_cs) | {1.0}:
            runner.synthetic(act, c, linear=act == "tanh")
        for snr in s.mu0_snrs:
            runner.synthetic(act, 1.0, {"snr": snr}, linear=act == "tanh")


def _model_of(act):
    return ("linear", "tanh") if act == "linear" else ("attention", act)


def make_mu0(s: Settings, runner: Runner, out: Path) -> FigureResult:
    from .model import Geometry, dimension
    from .plotting import new_figure

    rec = Records("mu0")
    g0 = s.gamma_fixed
    fig, axes = new_figure(3, width=4.3, height=3.6)
    p = dimension(s.n, 1.0)

    # (a) against γ, c = 1, μ = 0
    ax, entries = axes[0], []
    grid = _curve_grid(s.mu0_gammas, s.curve_points)
    gam = np.asarray(s.mu0_gammas, dtype=float)
    for act in MU0_ACTS:
        model, f = _model_of(act)
        th, thp = theory(f, 1.0, grid, n=s.n, model=model), theory(f, 1.0, gam, n=s.n, model=model)
        res = runner.result(runner.synthetic(f, 1.0))
        mc = [mc_at(res, model, g) for g in gam]
        name = _label(act)
        rec.curve("a", name, "gamma", grid, th, model=model, activation=act, c=1.0, snr=0.0, n=s.n)
        for g, t_, (m, se) in zip(gam, thp, mc):
            rec.point("a", name, "gamma", g, t_, m, se, model=model, activation=act, n=s.n, p=p, draws=s.draws,
                      t=strength(None, p), c=1.0, gamma=float(g), snr=0.0)
        entries.append((_draw(ax, grid, th, gam, mc, COLORS[act], MARKERS[act], True), name))
    _finish_axes(ax, r"ridge $\gamma$", r"(a) $\mu=0$, $c=1$")
    _legend(ax, entries, loc="upper left")

    # (b) against c, γ = gamma_fixed, μ = 0
    ax = axes[1]
    grid = _curve_grid(s.mu0_cs, s.curve_points, pad=0.15)
    cs = np.asarray(s.mu0_cs, dtype=float)
    for act in MU0_ACTS:
        model, f = _model_of(act)
        th, thp = theory(f, grid, g0, n=s.n, model=model), theory(f, cs, g0, n=s.n, model=model)
        mc = [mc_at(runner.result(runner.synthetic(f, c)), model, g0) for c in cs]
        name = _label(act)
        rec.curve("b", name, "c", grid, th, model=model, activation=act, gamma=g0, snr=0.0, n=s.n)
        for c, t_, (m, se) in zip(cs, thp, mc):
            pc = dimension(s.n, c)
            rec.point("b", name, "c", c, t_, m, se, model=model, activation=act, n=s.n, p=pc, draws=s.draws,
                      t=strength(None, pc), c=float(c), gamma=g0, snr=0.0)
        _draw(ax, grid, th, cs, mc, COLORS[act], MARKERS[act], True)
    _finish_axes(ax, r"$c = p/n$", rf"(b) $\mu=0$, $\gamma={g0:g}$")
    _log_ticks(ax, cs)

    # (c) against ‖μ‖², W = I, c = 1, γ = gamma_fixed
    ax = axes[2]
    snrs = np.asarray((0.0,) + tuple(s.mu0_snrs), dtype=float)
    grid = np.linspace(0.0, snrs.max(), s.curve_points)
    for act in MU0_ACTS:
        model, f = _model_of(act)
        th = np.array([theory(f, 1.0, g0, Geometry(snr=m2), n=s.n, model=model) for m2 in grid], dtype=float)
        thp = np.array([theory(f, 1.0, g0, Geometry(snr=m2), n=s.n, model=model) for m2 in snrs], dtype=float)
        mc = [mc_at(runner.result(runner.synthetic(f, 1.0, {"snr": m2} if m2 else None)), model, g0) for m2 in snrs]
        name = _label(act)
        rec.curve("c", name, "snr", grid, th, model=model, activation=act, c=1.0, gamma=g0, n=s.n)
        strong, cor = [], []
        for m2, t_, (m, se) in zip(snrs, thp, mc):
            tt = strength(Geometry(snr=m2), p)
            row = rec.point("c", name, "snr", m2, t_, m, se, model=model, activation=act, n=s.n, p=p,
                            draws=s.draws, t=tt, c=1.0, gamma=g0, snr=float(m2),
                            theory_finite_p=finite_p_theory(f, 1.0, g0, Geometry(snr=m2), s.n, tt, model=model))
            strong.append(bool(row["strong_signal"]))
            cor.append(row["theory_finite_p"])
        _draw(ax, grid, th, snrs, mc, COLORS[act], MARKERS[act], False, strong=strong, corrected=cor)
    _finish_axes(ax, r"signal $\|\mu\|^2$ (with $W=I$)", rf"(c) $W=I$, $c=1$, $\gamma={g0:g}$")
    fig.suptitle(r"$\mu = 0$: attention $E_A$ (tanh, ReLU) vs linear regression $E_{LR}$" + "\n" + _mc_note(s)
                 + "; " + STRONG_NOTE, fontsize="small")
    return FigureResult("mu0", rec, save(fig, rec, out, "fig_mu0"))


# ============================================================================ figure: aligned
def plan_aligned(s: Settings, runner: Runner):
    from .model import Geometry

    for th in s.aligned_thetas:
        runner.synthetic("tanh", s.aligned_c, Geometry.aligned(s.aligned_snr, th), linear=True)


def make_aligned(s: Settings, runner: Runner, out: Path) -> FigureResult:
    import matplotlib
    import matplotlib.colors as mcolors
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MultipleLocator

    from .model import Geometry, dimension
    from .plotting import new_figure

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
        entries.append((_draw(ax, tgrid, th, thetas, mc, col, "o", False, strong=[strong_t[float(t)] for t in thetas],
                              corrected=cor), rf"$\gamma={g:g}$"))
        ax.plot(tgrid, np.full_like(tgrid, lr), ls="--", color=col, lw=1)
        ax.errorbar(thetas, [m for m, _ in mcl], yerr=[e for _, e in mcl], fmt="D", ms=3, color=col, alpha=0.6,
                    capsize=2)
    entries.append(((Line2D([], [], color="0.3", ls="--"), Line2D([], [], color="0.3", marker="D", ms=3, ls="")),
                    r"$E_{LR}$ (no $\theta$ dependence)"))
    _finish_axes(ax, r"weight norm $\theta$  ($w_K=w_Q=\theta\mu/\|\mu\|$)", r"(a) $E_A$ over $\theta$")
    _legend(ax, entries, loc="center right", bbox_to_anchor=(1.0, 0.68))

    # (b) against γ, one colour per θ
    ax, entries = axes[1], []
    ggrid = _curve_grid(gam, s.curve_points)
    lr = theory("tanh", c, ggrid, lin_geo, model="linear")
    lrp = theory("tanh", c, gam, lin_geo, model="linear")
    rec.curve("b", r"$E_{LR}$", "gamma", ggrid, lr, model="linear", **meta)
    ml = [mc_at(res_of(thetas[0]), "linear", g) for g in gam]
    for g, t_, (m, se) in zip(gam, lrp, ml):
        rec.point("b", r"$E_{LR}$", "gamma", g, t_, m, se, model="linear", n=s.n, p=p, draws=s.draws,
                  gamma=float(g), theta=float(thetas[0]), **meta)
    entries.append((_draw(ax, ggrid, lr, gam, ml, "black", "D", True, linestyle="--"), r"$E_{LR}$"))
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
        entries.append((_draw(ax, ggrid, th, gam, mc, col, "o", True, strong=[strong_t[float(t)]] * len(gam),
                              corrected=cor), name))
    _finish_axes(ax, r"ridge $\gamma$", r"(b) $E_A$ over $\gamma$")
    _legend(ax, entries, loc="upper left")

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
                 r"$E_A$ vs $E_{LR}$" + "\n" + _mc_note(s)
                 + rf"; shaded: strong signal $t=\|\mu\|^2(1+\theta^2)/\sqrt{{p}}>{STRONG_SIGNAL_T}$ "
                 + rf"($\theta\geq{strong_from:g}$ at $p={p}$), $\times$: finite-p corrected theory", fontsize="small")
    return FigureResult("aligned", rec, save(fig, rec, out, "fig_aligned"))


# ============================================================================ figure: a1 = 0
A1ZERO_ACTS = (("cos", "f"), ("he3", "zero"), ("tanh", "f"), ("linear", "f"))


def plan_a1zero(s: Settings, runner: Runner):
    for act, diag in A1ZERO_ACTS[:3]:  # E_LR is read from the tanh runs
        for c in s.a1zero_cs:
            runner.synthetic(act, c, None, diagonal=diag, linear=act == "tanh")
        for m2 in s.a1zero_snrs:
            runner.synthetic(act, 1.0, {"snr": m2} if m2 else None, diagonal=diag, linear=act == "tanh")


def make_a1zero(s: Settings, runner: Runner, out: Path) -> FigureResult:
    from .activations import activation
    from .model import Geometry, dimension
    from .plotting import new_figure

    rec = Records("a1zero")
    g0 = s.gamma_fixed
    fig, axes = new_figure(2, width=4.8, height=3.8)
    cs = np.asarray(s.a1zero_cs, dtype=float)
    snrs = np.asarray(s.a1zero_snrs, dtype=float)
    cgrid = _curve_grid(cs, s.curve_points, pad=0.15)
    sgrid = np.linspace(0.0, snrs.max(), s.curve_points)
    entries = []
    p = dimension(s.n, 1.0)
    for act, diag in A1ZERO_ACTS:
        model, f = _model_of(act)
        a1 = None if act == "linear" else float(activation(f).a1)
        name = _label(act, diag)
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
        entries.append((_draw(axes[0], cgrid, th, cs, mc, COLORS[act], MARKERS[act], True), _label(act, diag, a1)))
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
        _draw(axes[1], sgrid, th, snrs, mc, COLORS[act], MARKERS[act], False, strong=strong, corrected=cor)
    _finish_axes(axes[0], r"$c = p/n$", rf"(a) $\mu=0$, $\gamma={g0:g}$")
    _log_ticks(axes[0], cs)
    _legend(axes[0], entries, loc="upper right")
    _finish_axes(axes[1], r"signal $\|\mu\|^2$", rf"(b) $c=1$, $W=I$, $\gamma={g0:g}$")
    fig.suptitle(r"$a_1=0$ (cos, He$_3$) vs $a_1\neq0$ (tanh); He$_3$ is superlinear: its kernel diagonal is "
                 r"zeroed in theory and MC" + "\n" + _mc_note(s) + "; " + STRONG_NOTE, fontsize="small")
    return FigureResult("a1zero", rec, save(fig, rec, out, "fig_a1zero"))


# ============================================================================ registry and driver
def _plan_minilm(s, runner):
    from .realweights import plan_minilm

    return plan_minilm(s, runner)


def _make_minilm(s, runner, out):
    from .realweights import make_minilm

    return make_minilm(s, runner, out)


#: name -> (plan(settings, runner), make(settings, runner, out) -> FigureResult or list of them)
FIGURES: dict[str, tuple[Callable, Callable]] = {
    "mu0": (plan_mu0, make_mu0),
    "aligned": (plan_aligned, make_aligned),
    "a1zero": (plan_a1zero, make_a1zero),
    "minilm": (_plan_minilm, _make_minilm),
}


def run(out="symattn-figures", quick: bool = True, settings: Settings | None = None, figures=None,
        progress=None, echo: Callable[[str], object] | None = print) -> dict:
    """Make the figures ``figures`` (default all of :data:`FIGURES`) into ``out``; returns a summary.

    ``settings`` overrides ``quick`` (:data:`QUICK` / :data:`FULL`). A figure whose inputs are not
    installed (the real weights without the ``[real]`` extra) is skipped with its reason in
    ``summary["skipped"]``. The summary also holds, per figure, the files written and the
    :func:`agreement` of theory and Monte Carlo.
    """
    from .errors import ParameterError

    say = echo if echo is not None else (lambda *_: None)
    s = settings if settings is not None else (QUICK if quick else FULL)
    names = list(FIGURES) if figures is None else list(figures)
    for nm in names:
        if nm not in FIGURES:
            raise ParameterError("figures", nm, "a subset of " + ", ".join(FIGURES))
    out = Path(out)
    with _blas_threads(s.n, "numpy"):  # small sizes: one BLAS thread for the CPU work (fits, SVDs, MC)
        return _run(s, names, out, progress, say)


def _run(s: Settings, names, out: Path, progress, say) -> dict:
    from .realweights import RealWeightsUnavailable

    t0 = time.perf_counter()
    runner = Runner(s, progress=progress)
    planned, skipped = [], {}
    for nm in names:
        try:
            FIGURES[nm][0](s, runner)
            planned.append(nm)
        except RealWeightsUnavailable as exc:
            skipped[nm] = str(exc)
            say(f"skipped {nm}: {exc}")
    draws = sum(j.draws for j in runner.jobs.values())
    say(f"reproduce ({s.name}): {len(runner.jobs)} Monte Carlo runs, {draws} draws -> {out}")
    runner.run()
    t_mc = time.perf_counter() - t0
    summary = {"settings": s.name, "out": str(out), "figures": {}, "skipped": skipped}
    for nm in planned:
        t1 = time.perf_counter()
        results = FIGURES[nm][1](s, runner, out)
        for res in results if isinstance(results, list) else [results]:
            agr = agreement(res.records.rows)
            summary["figures"][res.name] = {"files": res.files, "agreement": agr, "note": res.note}
            say(f"  {res.name}: {', '.join(Path(f).name for f in res.files)}")
            unchecked = agr["excluded_strong"] - agr["strong_checked"]
            say(f"    theory vs MC: {agr['agree']}/{agr['checked']} points within max(3 se, 3%) "
                f"(max |gap| {100 * agr['max_rel_gap']:.1f}%)"
                + (f"; strong signal (|t| > {STRONG_SIGNAL_T}): {agr['strong_agree']}/{agr['strong_checked']} "
                   f"within the finite-p corrected theory" if agr["strong_checked"] else "")
                + (f"; {unchecked} strong-signal points not checked (no corrected theory)" if unchecked else "")
                + (f"; {agr['real_weights']} real-weight points not checked" if agr["real_weights"] else ""))
            if res.note:
                say("    " + res.note)
        summary["figures"].setdefault(nm, {}).setdefault("seconds", 0.0)
        summary["figures"][nm]["seconds"] = time.perf_counter() - t1
    summary["seconds"] = time.perf_counter() - t0
    summary["monte_carlo_seconds"] = t_mc
    say(f"done in {summary['seconds']:.1f} s")
    return summary


# ============================================================================ command line
def add_parser(subparsers):
    from .cli import add_command, add_json_flag

    p = add_command(
        subparsers, "reproduce",
        help="the paper's figures: theory lines vs Monte Carlo points (PNG, PDF, CSV)",
        description="""
            Writes the paper's three kinds of figure, each with deterministic-equivalent theory
            lines (finite-p diagonal d_n at the simulated n) and exact Monte Carlo points with
            +-1 standard-error bars, as PNG and PDF plus a CSV of the data:
            fig_mu0 (mu = 0: E_A for tanh and ReLU vs E_LR over gamma, c and, with W = I, ||mu||^2),
            fig_aligned (w_K = w_Q = theta mu/||mu||: E_A vs E_LR over theta and gamma, with the
            theory map of E_A/E_LR marking where the gap closes and where it reverses),
            fig_a1zero (cos and He3 (diagonal zeroed) vs tanh over c and ||mu||^2), and, with the
            [real] extra installed, fig_minilm and fig_minilm_rank (pretrained all-MiniLM-L6-v2
            attention weights W = W_K^T W_Q per layer against the theory of their fit
            alpha I + rank r, alpha folded into f as f(alpha .)).

            CSV columns: figure, panel, kind (curve|point|diagnostic), curve, model, activation,
            diagonal, x_name, x, theory, mc_mean, mc_sem, mc_model, n, p, draws, c, gamma, snr,
            theta, t, strong_signal, where t = (||mu||^2 + mu^T w_K mu^T w_Q)/sqrt(p) and
            strong_signal = |t| > 0.15 (the regime of MATH-FINITE-P.md where the asymptotic
            theory is off at realistic p). Each figure's summary line counts the Monte Carlo
            points within max(3 se, 3%) of the theory outside that regime.""",
        examples=["symattn reproduce --quick --out figures", "symattn reproduce --out figures-full",
                  "symattn reproduce --quick --only minilm --out /tmp/minilm",
                  "symattn reproduce --backend torch --device cuda --out figures-full"],
        notes="""--quick (n = 400, 5 draws) takes about 60 s of CPU time, under 3 minutes on 2 cores.
            The full run (n = 1500, 8 draws, gamma down to 1e-3, real weights with ranks up to 8)
            takes roughly 15-30 minutes on 2 CPU cores and shows a progress bar. Without the [real]
            extra the real-weights figures are skipped with a message (exit code 0). See
            docs/gallery.md.""",
    )
    p.add_argument("--quick", action="store_true", help="small sizes (n = 400, 5 draws): under 3 minutes")
    p.add_argument("--out", default="symattn-figures", metavar="DIR", help="output folder (default symattn-figures)")
    p.add_argument("--only", nargs="+", choices=list(FIGURES), metavar="FIG",
                   help="make only these figures: " + ", ".join(FIGURES))
    p.add_argument("--seed", type=int, default=0, metavar="S", help="Monte Carlo seed (default 0)")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy", help="Monte Carlo backend")
    p.add_argument("--device", default=None, metavar="DEV", help="torch device (cpu, cuda)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(p)
    p.set_defaults(func=_run_cli)
    return p


def _run_cli(args) -> int:
    from .cli import dump_json
    from .model import check_int

    from .errors import ParameterError

    if args.device is not None and args.backend == "numpy":
        raise ParameterError("device", args.device, "no --device with --backend numpy",
                             hint="use --backend torch --device cuda for a GPU")
    s = QUICK if args.quick else FULL
    s = replace(s, seed=check_int("seed", args.seed, 0), backend=args.backend, device=args.device)
    summary = run(out=args.out, settings=s, figures=args.only, progress=False if args.no_progress else None,
                  echo=None if args.json else print)
    if args.json:
        print(dump_json(summary))
    return 0
