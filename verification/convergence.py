r"""Convergence study: the theory–Monte Carlo gap against n (``symattn verify --convergence``).

For each setting and each n ∈ {250, 500, 1000, 2000, 4000} (p = round(c·n)):

- Monte Carlo (:func:`symattn.simulate`, f on the diagonal, ``draws(n)`` draws, seed 0): the mean
  of the estimator and its standard error se = std(ddof=1)/√draws;
- theory (:func:`symattn.memorization_error`) at the same n with the finite-p diagonal d_n;
- gap = MC − theory, |gap|, relative gap, z = gap/se; for the settings with a signal also the gap
  to the finite-p corrected theory (``correction='finite-p'``) when the package provides it and it
  returns within :data:`FINITE_P_SECONDS` (NaN otherwise; ``--no-finite-p`` skips it).

The slope of log|gap| against log n is fitted by weighted least squares (numpy.polyfit with
weights |gap|/se, the inverse standard deviation of log|gap| by the delta method), with its
standard error from the fit covariance; the slope of log se is fitted alongside (−1/2 expected
for the ŷ-estimator). A gap that is pure noise decays like se, i.e. with slope ≈ −1/2; a bias
of order 1/n or t² = (‖μ‖² + μᵀw_K μᵀw_Q)²/p shows as slope ≈ −1 once it dominates the noise.

Settings (:data:`SETTINGS`): a bulk case with the low-variance trace estimator (which resolves
the O(1/n) bias), a moderate-signal case, and a strong-signal case whose strength
t = (‖μ‖² + μᵀw_K·μᵀw_Q)/√p is 1.39 at n = 250 and 0.35 at n = 4000 (docs/theory.md §10).

Output: ``convergence.csv`` (one row per setting and n, rows of other settings kept, so settings
can be run one at a time) and ``convergence.png`` (|gap| and se against n, log-log, with the
fitted slopes written on the figure).
"""

from __future__ import annotations

import csv
import math
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from symattn.timeouts import FINITE_P_SECONDS, TIMEOUT, time_limited

NS = (250, 500, 1000, 2000, 4000)
FIELDS = ("setting", "n", "p", "draws", "strength_t", "mc", "se", "theory", "gap", "abs_gap", "rel_gap", "z",
          "theory_finite_p", "gap_finite_p", "seconds")


@dataclass(frozen=True)
class Setting:
    """One convergence setting: activation, c, γ, geometry (Gram via ``Geometry`` kwargs) and estimator."""

    name: str
    f: str
    c: float
    gamma: float
    geometry: dict
    estimator: str  # 'E' (ŷ-estimator) or 'trace' ((γ²/n) tr (M+γ)^{-2}, μ = 0 only)
    label: str
    base_draws: int = 16  # draws at n = 1000; draws(n) = base·1000/n, clipped to [2, 64]

    def geometry_obj(self):
        import symattn as sa

        g = dict(self.geometry)
        if g.pop("aligned", None) is not None:
            return sa.Geometry.aligned(g["snr"])
        return sa.Geometry(**g)

    def draws(self, n: int, scale: float = 1.0) -> int:
        return int(min(64, max(2, round(scale * self.base_draws * 1000 / n))))


SETTINGS = {
    "bulk-tanh": Setting("bulk-tanh", "tanh", 1.0, 0.1, {}, "trace",
                         "tanh, c=1, γ=0.1, μ=0 (trace estimator)", base_draws=24),
    "signal-tanh": Setting("signal-tanh", "tanh", 0.5, 0.1, {"aligned": True, "snr": 1.0}, "E",
                           "tanh, c=0.5, γ=0.1, w_K=w_Q=μ, ‖μ‖²=1"),
    "strong-tanh": Setting("strong-tanh", "tanh", 0.3, 0.03, {"aligned": True, "snr": 3.0}, "E",
                           "tanh, c=0.3, γ=0.03, w_K=w_Q=μ, ‖μ‖²=3 (strong: t=12/√p)"),
}


def _with_time_limit(fn, seconds):
    """fn() or NaN after ``seconds`` (:func:`symattn.timeouts.time_limited`)."""
    out = time_limited(fn, seconds, reraise=True)
    return float("nan") if out is TIMEOUT else out


def run_point(s: Setting, n: int, draws: int, seed: int = 0, finite_p: bool = True) -> dict:
    """One row: MC and theory of setting ``s`` at n tokens (and the finite-p corrected theory, if asked)."""
    import symattn as sa

    geo = s.geometry_obj()
    t0 = time.perf_counter()
    res = sa.simulate(s.f, n=n, c=s.c, gamma=[s.gamma], geometry=geo, draws=draws, seed=seed,
                      models=("attention",), trace_estimator=(s.estimator == "trace"), progress=False)
    per = (res.attention_trace if s.estimator == "trace" else res.attention)[:, 0]
    mc, se = float(per.mean()), float(per.std(ddof=1) / math.sqrt(draws))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        th = float(np.asarray(sa.memorization_error(s.f, s.c, s.gamma, geometry=geo, n=n)).ravel()[0])
        th_fp = float("nan")
        if finite_p and geo.signal_weight > 0:
            def corrected():
                return float(np.asarray(sa.memorization_error(s.f, s.c, s.gamma, geometry=geo, n=n,
                                                              correction="finite-p")).ravel()[0])
            try:
                th_fp = _with_time_limit(corrected, FINITE_P_SECONDS)
            except Exception:  # the correction is optional (and may not apply to this setting)
                th_fp = float("nan")
    gap = mc - th
    return {"setting": s.name, "n": n, "p": res.p, "draws": draws, "strength_t": float(geo.strength(res.p)),
            "mc": mc, "se": se, "theory": th, "gap": gap, "abs_gap": abs(gap), "rel_gap": gap / th,
            "z": gap / se if se > 0 else float("nan"), "theory_finite_p": th_fp, "gap_finite_p": mc - th_fp,
            "seconds": time.perf_counter() - t0}


def fit_slope(n, y, se=None) -> tuple[float, float]:
    r"""Slope (and its standard error) of log y against log n by weighted least squares.

    Weights: y/se (1/σ of log y by the delta method) when ``se`` is given, else equal.
    """
    n, y = np.asarray(n, float), np.asarray(y, float)
    keep = (y > 0) & np.isfinite(y)
    n, y = n[keep], y[keep]
    w = None if se is None else np.clip(y / np.asarray(se, float)[keep], 1e-3, 1e6)
    if n.size < 2:
        return float("nan"), float("nan")
    if n.size < 4:
        coef = np.polyfit(np.log(n), np.log(y), 1, w=w)
        return float(coef[0]), float("nan")
    coef, cov = np.polyfit(np.log(n), np.log(y), 1, w=w, cov="unscaled" if w is not None else True)
    return float(coef[0]), float(math.sqrt(cov[0, 0]))


def read_csv(path: Path) -> list[dict]:
    """The rows of a convergence.csv ([] when there is none); a malformed file is a ParameterError
    naming the file, the line and the column, not a traceback."""
    if not Path(path).exists():
        return []
    try:
        with open(path, newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (csv.Error, UnicodeDecodeError) as exc:
        from symattn.errors import ParameterError

        raise ParameterError("csv", str(path), "a convergence.csv written by symattn verify --convergence",
                             hint=f"it cannot be read ({exc})") from None
    out = []
    for line, r in enumerate(rows, 2):
        d = dict(r)
        key = None
        try:
            for key in FIELDS:
                if key == "setting":
                    if not d.get(key):
                        raise ValueError("empty")
                    continue
                d[key] = float(d[key]) if d.get(key) not in (None, "") else float("nan")
            for key in ("n", "p", "draws"):
                d[key] = int(d[key])
        except (KeyError, ValueError, TypeError, OverflowError):
            from symattn.errors import ParameterError

            raise ParameterError("csv", str(path), "a convergence.csv written by symattn verify --convergence",
                                 hint=f"line {line}, column {key!r}: {d.get(key)!r} is not a valid value "
                                      f"(expected columns: {', '.join(FIELDS)})") from None
        out.append(d)
    return out


def write_csv(path: Path, rows: list[dict], provenance: dict | None = None) -> None:
    """Write the rows (sorted by setting and n) atomically (:func:`symattn.files.atomic_path`); with
    ``provenance``, its object goes to ``<path>.provenance.json`` beside it."""
    from symattn.files import atomic_path
    from symattn.provenance import write_provenance

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if provenance is not None:
        write_provenance(path, provenance)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=FIELDS)
        w.writeheader()
        for r in sorted(rows, key=lambda r: (r["setting"], r["n"])):
            w.writerow({k: (f"{r[k]:.10g}" if isinstance(r[k], float) else r[k]) for k in FIELDS})


def summarize(rows: list[dict]) -> dict:
    """Per setting: fitted slopes of |gap| (weighted), of se, and of |gap to the finite-p theory|."""
    out = {}
    for name in dict.fromkeys(r["setting"] for r in rows):
        rs = sorted((r for r in rows if r["setting"] == name), key=lambda r: r["n"])
        n = [r["n"] for r in rs]
        out[name] = {
            "n": n,
            "gap_slope": fit_slope(n, [r["abs_gap"] for r in rs], [r["se"] for r in rs]),
            "se_slope": fit_slope(n, [r["se"] for r in rs]),
            "gap_fp_slope": fit_slope(n, [abs(r["gap_finite_p"]) for r in rs], [r["se"] for r in rs]),
            "tail_slope": fit_slope(n[-2:], [r["abs_gap"] for r in rs[-2:]]) if len(rs) >= 2 else (float("nan"),) * 2,
            "max_abs_z": max(abs(r["z"]) for r in rs),
        }
    return out


def plot(rows: list[dict], path: Path) -> None:
    """log-log |gap| (markers, ±se bars) and se (dashed) against n per setting, slopes in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summ = summarize(rows)
    fig, ax = plt.subplots(figsize=(8, 7.2))
    for k, (name, st) in enumerate(summ.items()):
        rs = sorted((r for r in rows if r["setting"] == name), key=lambda r: r["n"])
        color = f"C{k}"
        n = np.array([r["n"] for r in rs], float)
        g = np.array([r["abs_gap"] for r in rs])
        se = np.array([r["se"] for r in rs])
        sl, sle = st["gap_slope"]
        label = SETTINGS[name].label if name in SETTINGS else name
        ax.errorbar(n, g, yerr=se, fmt="o-", color=color, capsize=3,
                    label=f"{label}: |gap| slope {sl:+.2f} ± {sle:.2f} (last segment {st['tail_slope'][0]:+.2f}); "
                          f"se slope {st['se_slope'][0]:+.2f}")
        ax.plot(n, se, "--", color=color, alpha=0.6)
        fp = np.array([abs(r["gap_finite_p"]) for r in rs])
        if np.any(np.isfinite(fp)):
            ax.plot(n, fp, "s:", color=color, alpha=0.8, mfc="none",
                    label=f"  same, vs finite-p corrected theory (slope {st['gap_fp_slope'][0]:+.2f})")
        ok = g > 0
        if ok.sum() >= 2:
            coef = np.polyfit(np.log(n[ok]), np.log(g[ok]), 1, w=np.clip(g[ok] / se[ok], 1e-3, 1e6))
            ax.plot(n, np.exp(np.polyval(coef, np.log(n))), "-", color=color, lw=0.8, alpha=0.5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("n (tokens); p = round(c·n)")
    ax.set_ylabel("|E_MC − E_theory(d_n)|   (dashed: standard error)")
    ax.set_title("Theory–Monte Carlo gap against n (weighted log-log slopes)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=1, frameon=False)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    from symattn.files import atomic_path

    try:
        with atomic_path(path) as tmp:  # no truncated PNG when interrupted
            fig.savefig(tmp, dpi=130, format=path.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)


def replot(out_dir) -> dict:
    """Redraw convergence.png from the rows of convergence.csv in ``out_dir`` (no simulation)."""
    out_dir = Path(out_dir)
    rows = read_csv(out_dir / "convergence.csv")
    if not rows:
        from symattn.errors import ParameterError

        raise ParameterError("out", str(out_dir), "a folder with a convergence.csv (run --convergence first)")
    plot(rows, out_dir / "convergence.png")
    return {"csv": out_dir / "convergence.csv", "png": out_dir / "convergence.png", "rows": rows,
            "summary": summarize(rows)}


#: the token counts the study accepts (p = round(c n) must hold the geometry; n = 10^5 is already huge)
N_RANGE = (50, 100_000)


def check_arguments(settings=None, ns=NS, draws_scale: float = 1.0, seed: int = 0):
    """Validate the arguments of :func:`run` before any simulation: ParameterError naming the first bad one.

    Returns ``(names, ns, draws_scale, seed)``: the setting names, the token counts as ints, the
    scale (0 < s <= 1000) and the seed (an integer >= 0).
    """
    from symattn.errors import ParameterError
    from symattn.validation import check_int, check_positive

    names = list(settings or SETTINGS)
    unknown = [s for s in names if s not in SETTINGS]
    if unknown:
        raise ParameterError("settings", unknown, "names among " + ", ".join(SETTINGS))
    if isinstance(ns, (str, bytes)) or not hasattr(ns, "__iter__") or not list(ns):
        raise ParameterError("ns", ns, "one or more token counts")
    ns = tuple(check_int("ns", n, *N_RANGE) for n in ns)
    draws_scale = float(check_positive("draws-scale", draws_scale, upper=1000))
    return names, ns, draws_scale, check_int("seed", seed, 0)


def run(out_dir, settings=None, ns=NS, draws_scale: float = 1.0, seed: int = 0, progress=None,
        finite_p: bool = True) -> dict:
    """Run the study for ``settings`` (names; default all), merge with existing rows, write CSV + PNG.

    Returns {"csv": path, "png": path, "rows": rows, "summary": summarize(rows)}.
    """
    from symattn.montecarlo import blas_threads

    names, ns, draws_scale, seed = check_arguments(settings, ns, draws_scale, seed)
    out_dir = Path(out_dir)
    csv_path, png_path = out_dir / "convergence.csv", out_dir / "convergence.png"
    rows = [r for r in read_csv(csv_path) if not (r["setting"] in names and r["n"] in ns)]
    from symattn.provenance import provenance

    prov = provenance({"study": "convergence", "settings": names, "ns": list(ns), "draws_scale": draws_scale,
                       "finite_p": bool(finite_p), "rows_kept_from_earlier_runs": len(rows)},
                      seed=seed, backend="numpy", dtype="float64")
    with blas_threads(0):  # small matrices on shared cores: one BLAS thread
        for name in names:
            s = SETTINGS[name]
            for n in ns:
                row = run_point(s, n, s.draws(n, draws_scale), seed=seed, finite_p=finite_p)
                rows.append(row)
                write_csv(csv_path, rows, provenance=prov)
                if progress is not None:
                    progress(row)
    plot(rows, png_path)
    return {"csv": csv_path, "png": png_path, "rows": rows, "summary": summarize(rows)}
