"""The numbers the documentation quotes, computed at build time (issue 16).

The gallery (``docs/gallery.md``) quotes agreement counts, gaps and tables. None of them is typed
by hand: each is a MyST substitution ``{{ key }}`` whose value this module computes when Sphinx
reads ``docs/conf.py`` (``myst_substitutions = docnumbers.substitutions()``), from

- the CSV files that ``symattn reproduce --quick --out docs/figures`` wrote next to the PNGs of
  the gallery (so the numbers and the figures come from the same run), and
- the code itself (the theory values, the constants of the model and the activations).

A key that a page uses and this module does not define is a warning, so the ``-W`` build fails
on it. ``tests/test_docs.py`` recomputes every value independently: the theory numbers by calling
the library, the Monte Carlo numbers from the CSVs, checked against the theory within the
tolerance the gallery states. Regenerate the data with::

    symattn reproduce --quick --out docs/figures

Nothing here evaluates a string: the values are computed by named Python functions.
"""

from __future__ import annotations

import csv
from functools import lru_cache
from pathlib import Path

FIGURES = Path(__file__).resolve().parents[1] / "figures"
THEORY_MODEL = "theory model"
REAL_WEIGHTS = "real weights"
TOL_SE, TOL_REL = 3.0, 0.03  # the gallery's agreement rule: |MC - theory| <= max(3 se, 3 % theory)
TOL_RULE = f"max({TOL_SE:g} se, {100 * TOL_REL:g} % of theory)"

_FLOAT = {"x", "theory", "mc_mean", "mc_sem", "c", "gamma", "snr", "theta", "t", "theory_finite_p",
          "alpha", "spike_max", "unexplained"}
_INT = {"n", "p", "draws", "layer", "rank"}


def _value(key: str, text: str):
    if text == "":
        return None
    if key in _FLOAT:
        return float(text)
    if key in _INT:
        return int(float(text))
    if key == "strong_signal":
        return text.lower() == "true"
    return text


@lru_cache(maxsize=None)
def rows(figure: str) -> tuple[dict, ...]:
    """The rows of ``docs/figures/fig_<figure>.csv``, typed (floats, ints, booleans; '' -> None)."""
    with open(FIGURES / f"fig_{figure}.csv", newline="", encoding="utf-8") as fh:
        return tuple({k: _value(k, v) for k, v in r.items()} for r in csv.DictReader(fh))


def points(figure: str, **where) -> list[dict]:
    """The Monte Carlo rows (``kind == 'point'``) of a figure matching every ``column=value``."""
    return [r for r in rows(figure) if r["kind"] == "point" and all(r.get(k) == v for k, v in where.items())]


def rel_gap(r: dict, theory: str = "theory") -> float:
    """(MC − theory)/theory of one point."""
    return (r["mc_mean"] - r[theory]) / r[theory]


def agrees(r: dict, theory: str = "theory") -> bool:
    """The gallery's rule: |MC − theory| <= max(3 se, 3 % of theory)."""
    return abs(r["mc_mean"] - r[theory]) <= max(TOL_SE * r["mc_sem"], TOL_REL * abs(r[theory]))


# -- formatting ------------------------------------------------------------------------------------
def pct(x: float, digits: int = 0, sign: bool = False) -> str:
    """0.0412 -> '4 %' (with ``sign``: '+4 %', and '−' for negatives)."""
    s = f"{abs(100 * x):.{digits}f}"
    if x < 0 and float(s) != 0:
        s = "−" + s
    elif sign:
        s = "+" + s
    return f"{s} %"


def pct_range(values, digits: int = 0) -> str:
    """The range of |values| in percent: '4–7 %' (or '5 %' when both ends round alike)."""
    lo, hi = (f"{100 * v:.{digits}f}" for v in (min(map(abs, values)), max(map(abs, values))))
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def num(x: float, digits: int = 3) -> str:
    """A number with ``digits`` decimals, '−' for negatives."""
    s = f"{x:.{digits}f}"
    return s.replace("-", "−")


def num_range(values, digits: int = 2) -> str:
    lo, hi = num(min(values), digits), num(max(values), digits)
    return lo if lo == hi else f"{lo}–{hi}"


def count(ok: int, total: int) -> str:
    return f"{ok}/{total}"


def _table(header: list[str], body: list[list[str]]) -> str:
    esc = [[cell.replace("|", r"\|") for cell in row] for row in [header, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in esc[1:]]
    return "\n".join(lines)


# -- the synthetic figures -------------------------------------------------------------------------
def agreement(figure: str) -> tuple[int, int, float]:
    """(agree, checked, max |rel gap|) over the theory-model points outside the strong-signal regime."""
    pts = [r for r in points(figure, mc_model=THEORY_MODEL) if not r.get("strong_signal")]
    return sum(map(agrees, pts)), len(pts), max(abs(rel_gap(r)) for r in pts)


def strong_points(*figures: str) -> list[dict]:
    return [r for f in figures for r in points(f, mc_model=THEORY_MODEL) if r.get("strong_signal")]


def _describe(r: dict) -> str:
    """'E_LR at γ = 0.01 (panel a): −12.8 %, 1.2 se'."""
    what = "E_LR" if r["model"] == "linear" else f"E_A {r['activation']}"
    x = {"gamma": "γ", "c": "c", "snr": "‖μ‖²", "theta": "θ"}[r["x_name"]]
    return (f"{what} at {x} = {r['x']:g} (panel {r['panel']}): {pct(rel_gap(r), 1, sign=True)}, "
            f"{abs(r['mc_mean'] - r['theory']) / r['mc_sem']:.1f} se")


def largest_gaps(figure: str, k: int = 2) -> str:
    pts = [r for r in points(figure, mc_model=THEORY_MODEL) if not r.get("strong_signal")]
    pts.sort(key=lambda r: -abs(rel_gap(r)))
    return "; ".join(_describe(r) for r in pts[:k])


def outliers(figure: str) -> str:
    pts = [r for r in points(figure, mc_model=THEORY_MODEL) if not r.get("strong_signal") and not agrees(r)]
    return "; ".join(_describe(r) for r in pts) or "none"


def aligned_theta(theta: float) -> list[dict]:
    """The strong-signal attention points of fig_aligned at weight norm θ (panels a and b)."""
    out = []
    for r in points("aligned", mc_model=THEORY_MODEL, model="attention"):
        th = r["x"] if r["x_name"] == "theta" else r["theta"]
        if th == theta:
            out.append(r)
    return out


FINITE_P_THETAS = (2.0, 3.0)


def finite_p_rows() -> list[dict]:
    """Panel (a) of fig_aligned at θ = 2, 3: the points with the finite-p corrected theory."""
    return sorted((r for r in points("aligned", panel="a", model="attention", mc_model=THEORY_MODEL)
                   if r["x"] in FINITE_P_THETAS), key=lambda r: (r["x"], r["gamma"]))


def finite_p_table() -> str:
    body = []
    for r in finite_p_rows():
        body.append([f"{r['x']:g}", f"{r['t']:.2f}", f"{r['gamma']:g}", num(r["theory"]), num(r["theory_finite_p"]),
                     f"{num(r['mc_mean'])} ± {num(r['mc_sem'])}", pct(rel_gap(r), 0, sign=True),
                     pct(rel_gap(r, "theory_finite_p"), 0, sign=True)])
    return _table(["θ", "t", "γ", "theory (asymptotic)", "theory (finite-p)", "MC ± se",
                   "gap to asymptotic", "gap to finite-p"], body)


# -- the real weights ------------------------------------------------------------------------------
MINILM_GAMMA = 0.1


def minilm_point(layer: int, curve: str, mc_model: str, gamma: float = MINILM_GAMMA) -> dict:
    (r,) = [r for r in points("minilm", layer=layer, curve=curve, mc_model=mc_model) if r["gamma"] == gamma]
    return r


def minilm_layers() -> list[int]:
    return sorted({r["layer"] for r in points("minilm")})


def minilm_ranks() -> list[int]:
    return sorted({r["rank"] for r in points("minilm") if r["rank"] is not None})


def minilm_table() -> str:
    ranks = minilm_ranks()
    top = max(ranks)
    body = []
    for layer in minilm_layers():
        fit = minilm_point(layer, f"r={top}", THEORY_MODEL)
        real = minilm_point(layer, f"r={top}", REAL_WEIGHTS)
        theories = " / ".join(num(minilm_point(layer, f"r={k}", THEORY_MODEL)["theory"]) for k in ranks)
        body.append([str(layer), num(fit["alpha"]), f"{fit['spike_max']:.2g}", pct(fit["unexplained"]),
                     num(real["mc_mean"]), theories, f"{num(fit['mc_mean'])} ({pct(rel_gap(fit), 0, sign=True)})"])
    r_list = " / ".join(str(k) for k in ranks)
    return _table(["layer", "α", "σ₁/(|α|√p)", f"unexplained ‖W−αI−L_{top}‖²/‖W‖²", "MC, real W",
                   f"theory r = {r_list}", f"MC, fitted W′_{top} (gap to r = {top} theory)"], body)


def minilm_gaps(mc_model: str, rank: int, gamma: float = MINILM_GAMMA) -> list[float]:
    """(MC − theory of the rank-``rank`` fit)/theory per layer, for the real or the fitted W."""
    return [rel_gap(minilm_point(layer, f"r={rank}", mc_model, gamma)) for layer in minilm_layers()]


# -- the general-W theory on the real weights --------------------------------------------------------
#: the measured table of docs/gallery.md §4 (``python -m derivations.general_w --measure-table`` writes it,
#: ``--refresh-table`` recomputes its theory column; its Monte Carlo has more draws than the quick figure)
MINILM_W_TABLE = FIGURES.parent / "minilm_w_mc.csv"


@lru_cache(maxsize=None)
def minilm_w_rows() -> tuple[dict, ...]:
    """The rows of ``docs/minilm_w_mc.csv`` (layer, head, mu, gamma, mc_mean, mc_sem, theory, ...), typed."""
    with open(MINILM_W_TABLE, newline="", encoding="utf-8") as fh:
        out = []
        for r in csv.DictReader(fh):
            r = dict(r)
            for k in ("snr", "c", "gamma", "mc_mean", "mc_sem", "theory", "theory_linear"):
                r[k] = float(r[k])
            for k in ("layer", "n", "p", "draws", "seed"):
                r[k] = int(r[k])
            out.append(r)
        return tuple(out)


def _head(h: str) -> str:
    return "all" if h in ("all", "None") else f"h{int(h.lstrip('h'))}"


def minilm_w_table() -> str:
    """One row per (layer, head, μ): MC ± se / theory (gap) at every γ; ✗ marks a cell outside the rule."""
    rows = minilm_w_rows()
    gammas = sorted({r["gamma"] for r in rows})
    keys = list(dict.fromkeys((r["layer"], r["head"], r["mu"]) for r in rows))
    body = []
    for key in keys:
        cells = []
        for g in gammas:
            (r,) = [r for r in rows if (r["layer"], r["head"], r["mu"]) == key and r["gamma"] == g]
            mark = "" if agrees(r) else " ✗"
            cells.append(f"{num(r['mc_mean'])} ± {num(r['mc_sem'])} / {num(r['theory'])} "
                         f"({pct(rel_gap(r), 1, sign=True)}{mark})")
        layer, head, mu = key
        body.append([str(layer), _head(head), "0" if mu == "zero" else "top", *cells])
    return _table(["layer", "head", "μ", *(f"γ = {g:g}: MC ± se / theory (gap)" for g in gammas)], body)


def minilm_w_gaps(head_all: bool, mu: str, theory: str = "theory") -> list[float]:
    """(MC − theory)/theory over the table's rows of all heads (or single heads) and one signal; ``theory_linear``:
    against the Gaussian-equivalent part alone (without the strong-direction correction)."""
    return [rel_gap(r, theory) for r in minilm_w_rows() if (r["head"] == "all") == head_all and r["mu"] == mu]


def minilm_w_outliers() -> str:
    bad = [r for r in minilm_w_rows() if not agrees(r)]
    return "; ".join(f"layer {r['layer']} {_head(r['head'])} μ = {'0' if r['mu'] == 'zero' else 'top'} "
                     f"γ = {r['gamma']:g}: {pct(rel_gap(r), 1, sign=True)} "
                     f"({abs(r['mc_mean'] - r['theory']) / r['mc_sem']:.1f} se)" for r in bad) or "none"


def minilm_w_quick() -> dict[str, str]:
    """The numbers of the quick figure fig_minilm_w (general-W theory and W = I against the real-W MC)."""
    out = {}
    pts = points("minilm_w")
    out["minilm_w_quick_agree"] = count(sum(map(agrees, pts)), len(pts))
    out["minilm_w_quick_max_gap"] = pct(max(abs(rel_gap(r)) for r in pts), 1)
    out["minilm_w_quick_draws"] = str(pts[0]["draws"])
    out["minilm_w_quick_layers"] = ", ".join(sorted({str(r["layer"]) for r in pts}))
    eye = {(r["mu"], r["x"]): r["theory"] for r in rows("minilm_w")
           if r["kind"] == "curve" and str(r["curve"]).startswith("W=I")}
    eye_gaps = [(r["mc_mean"] - eye[(r["mu"], r["gamma"])]) / eye[(r["mu"], r["gamma"])] for r in pts
                if (r["mu"], r["gamma"]) in eye]
    out["minilm_w_eye_gap"] = pct_range(eye_gaps)
    return out


# -- all of them -----------------------------------------------------------------------------------
# -- the accuracy atlas (docs/accuracy.md): the shipped table and the summary of its run -----------
def atlas_substitutions() -> dict[str, str]:
    """The numbers of docs/accuracy.md, from the shipped atlas table (symattn/data/atlas.csv) and the
    summary of the run that measured it (docs/figures/atlas_summary.json)."""
    import json

    from symattn.accuracy import load_atlas
    from symattn.atlas import n_law, summary_table

    rows = load_atlas()
    run = json.loads((FIGURES / "atlas_summary.json").read_text(encoding="utf-8"))
    test = [r for r in rows if r["error"] == "test"]   # the test-error cells (docs/theory.md §14.10), not of the run
    train = [r for r in rows if r["error"] == "train"]
    out = {"atlas_cells": str(len(train)), "atlas_within": count(sum(r["within"] for r in train), len(train)),
           "atlas_test_cells": str(len(test)), "atlas_test_within": count(sum(r["within"] for r in test), len(test)),
           "atlas_minutes": f"{run['seconds'] / 60:.0f}", "atlas_workers": str(run.get("workers", "?")),
           "atlas_blocks": str(len(run["blocks"]))}
    for key, block in (("atlas_real_test", "minilm-test"), ("atlas_real_heldout", "minilm-test-heldout")):
        cells = [r for r in test if r["block"] == block]   # real layers' test cells (symattn.atlas.real_test_cells)
        out[key + "_cells"], out[key + "_within"] = str(len(cells)), count(sum(r["within"] for r in cells), len(cells))
    body = [[s["block"], s["engine"], str(s["cells"]), count(s["within"], s["cells"]),
             pct(s["max_gap"], 1, sign=True), s["at"]] for s in summary_table(rows)]
    out["atlas_table"] = _table(["block", "engine", "cells", "within tolerance", "largest gap", "at"], body)
    laws = n_law(rows)
    body = [[r["layer"], r["activation"], f"{r['c']:g}", f"{r['gamma']:g}", r["mu"],
             " → ".join(str(n) for n in r["n"]), " → ".join(pct(g, 1, sign=True) for g in r["gap"])]
            for r in laws if r["gamma"] in (0.01, 0.1)]
    out["atlas_nlaw_table"] = _table(["layer", "f", "c", "γ", "μ", "n", "gap"], body) if body else "(none measured)"
    return out


def substitutions() -> dict[str, str]:
    """Every ``{{ key }}`` the pages may use, with its value (Markdown)."""
    import symattn as sa
    from symattn.model import STRONG_SIGNAL_T

    out: dict[str, str] = {"strong_t": f"{STRONG_SIGNAL_T:g}",
                           "tol_rule": f"max({TOL_SE:g} se, {100 * TOL_REL:g} % of theory)"}
    synthetic = ("mu0", "aligned", "a1zero")
    first = points("mu0")[0]
    out["quick_n"], out["quick_draws"] = str(first["n"]), str(first["draws"])
    out["quick_p_mu0"] = str(first["p"])
    for fig in synthetic:
        ok, total, gap = agreement(fig)
        out[f"{fig}_agree"] = count(ok, total)
        out[f"{fig}_max_gap"] = pct(gap)
        out[f"{fig}_largest_gaps"] = largest_gaps(fig)
        out[f"{fig}_outliers"] = outliers(fig)
    strong = [r for r in strong_points(*synthetic) if r["theory_finite_p"] is not None]
    out["finite_p_agree"] = count(sum(agrees(r, "theory_finite_p") for r in strong), len(strong))
    # fig_mu0 (c): W = I, the strong points are at the largest ||mu||^2
    mu0_strong = strong_points("mu0")
    out["mu0_strong_snr"] = ", ".join(sorted({f"{r['x']:g}" for r in mu0_strong}))
    out["mu0_strong_t"] = num_range([r["t"] for r in mu0_strong], 2)
    # fig_aligned
    al = points("aligned")[0]
    out["aligned_p"] = str(al["p"])
    for theta in FINITE_P_THETAS:
        pts = aligned_theta(theta)
        key = f"{theta:g}"
        out[f"aligned_gap_theta{key}"] = pct_range([rel_gap(r) for r in pts])
        out[f"aligned_t_theta{key}"] = num_range([r["t"] for r in pts], 2)
        out[f"aligned_fp_gap_theta{key}"] = pct_range([rel_gap(r, "theory_finite_p") for r in pts])
        out[f"aligned_mc_below_theta{key}"] = "yes" if all(r["mc_mean"] < r["theory"] for r in pts) else "no"
    out["finite_p_table"] = finite_p_table()
    # fig_a1zero
    he3 = [r for r in points("a1zero", activation="he3", mc_model=THEORY_MODEL) if not r.get("strong_signal")]
    out["he3_gap"] = pct_range([rel_gap(r) for r in he3])
    out["he3_above"] = "above" if all(r["mc_mean"] > r["theory"] for r in he3) else "around"
    strong_a1 = strong_points("a1zero")
    out["a1zero_strong_gap"] = pct_range([rel_gap(r) for r in strong_a1])
    out["a1zero_strong_t"] = num_range([r["t"] for r in strong_a1], 2)
    out["tanh_a1"] = num(float(sa.activation("tanh").a1), 2)
    # fig_minilm
    ranks, top = minilm_ranks(), max(minilm_ranks())
    real = points("minilm", mc_model=REAL_WEIGHTS)
    out["minilm_draws"] = str(real[0]["draws"])
    out["minilm_n"], out["minilm_p"] = str(real[0]["n"]), str(real[0]["p"])
    out["minilm_gamma"] = f"{MINILM_GAMMA:g}"
    out["minilm_table"] = minilm_table()
    out["minilm_fit_r0_gap"] = pct_range(minilm_gaps(THEORY_MODEL, 0))
    out[f"minilm_fit_r{top}_gap"] = pct_range(minilm_gaps(THEORY_MODEL, top))
    for k in ranks:
        out[f"minilm_real_r{k}_gap"] = pct_range(minilm_gaps(REAL_WEIGHTS, k))
    out["minilm_real_all_gap"] = pct_range([g for k in ranks for g in minilm_gaps(REAL_WEIGHTS, k)])
    out["minilm_real_below"] = "below" if all(g < 0 for k in ranks for g in minilm_gaps(REAL_WEIGHTS, k)) else "around"
    top_pts = [minilm_point(layer, f"r={top}", THEORY_MODEL) for layer in minilm_layers()]
    out["minilm_unexplained"] = pct_range([r["unexplained"] for r in top_pts])
    out["minilm_spike"] = num_range([r["spike_max"] for r in top_pts], 1)
    out["minilm_t_top"] = num_range([abs(r["t"]) for r in top_pts], 1)
    out["minilm_alpha"] = num_range([abs(r["alpha"]) for r in top_pts], 2)
    out["minilm_top_rank"] = str(top)
    from symattn import realweights as rw

    out["minilm_layers"], out["minilm_hidden"] = str(rw.MINILM_LAYERS), str(rw.MINILM_HIDDEN)
    out["minilm_head_dim"] = str(rw.MINILM_HEAD_DIM)
    out["minilm_heads"] = str(rw.MINILM_HIDDEN // rw.MINILM_HEAD_DIM)
    small = [minilm_point(layer, f"r={top}", REAL_WEIGHTS, 0.01)["mc_mean"] for layer in minilm_layers()]
    big = [minilm_point(layer, f"r={top}", REAL_WEIGHTS, 10.0)["mc_mean"] for layer in minilm_layers()]
    out["minilm_real_small_gamma"] = num_range(small, 2)
    out["minilm_real_large_gamma"] = num_range(big, 2)
    lr_small = minilm_point(0, "E_LR", THEORY_MODEL, 0.01)
    lr_big = minilm_point(0, "E_LR", THEORY_MODEL, 10.0)
    out["minilm_lr_small_gamma"], out["minilm_lr_large_gamma"] = num(lr_small["theory"], 2), num(lr_big["theory"], 2)
    # fig_minilm_w and the measured table
    t0 = minilm_w_rows()[0]
    out["minilm_w_table"] = minilm_w_table()
    out["minilm_w_draws"], out["minilm_w_seed"] = str(t0["draws"]), str(t0["seed"])
    out["minilm_w_n"], out["minilm_w_p"], out["minilm_w_c"] = str(t0["n"]), str(t0["p"]), f"{t0['c']:g}"
    out["minilm_w_agree"] = count(sum(map(agrees, minilm_w_rows())), len(minilm_w_rows()))
    out["minilm_w_outliers"] = minilm_w_outliers()
    for head_all, hk in ((True, "all"), (False, "head")):
        for mu in ("zero", "top"):
            for th, suffix in (("theory", ""), ("theory_linear", "_linear")):
                gaps = minilm_w_gaps(head_all, mu, th)
                out[f"minilm_w_{hk}_{mu}{suffix}_gap"] = (f"{pct(min(gaps), 1, sign=True)} to "
                                                          f"{pct(max(gaps), 1, sign=True)}")
    lin_ok = sum(agrees(r, "theory_linear") for r in minilm_w_rows())
    out["minilm_w_linear_agree"] = count(lin_ok, len(minilm_w_rows()))
    out.update(minilm_w_quick())
    # the paper's Figure 1 and the layer variants (docs/gallery.md §0, §5)
    for fig in ("ridge", "heads", "residual", "softmax", "generalization", "tokens"):
        ok, total, gap = agreement(fig)
        out[f"{fig}_agree"] = count(ok, total)
        out[f"{fig}_max_gap"] = pct(gap)
    out["paper_wall"] = paper_wall()
    out.update(atlas_substitutions())
    out.update(minilm_test_numbers())
    return out


def minilm_test_numbers() -> dict[str, str]:
    """fig_minilm_test (docs/gallery.md §7): its points within the rule, and each point outside it."""
    pts = points("minilm_test")
    miss = [r for r in pts if not agrees(r)]
    text = "; ".join(f"{r['head']} μ = {r['mu']}, {'attention' if r['model'] == 'attention' else 'ridge'}, "
                     f"c = {r['c']:g}, γ = {r['gamma']:g}: {pct(rel_gap(r), sign=True)}" for r in miss)
    return {"minilm_test_agree": count(len(pts) - len(miss), len(pts)), "minilm_test_misses": text or "none"}


def paper_wall() -> str:
    """The wall time of the recorded ``symattn reproduce --paper`` run (``docs/paper_run.json``, made
    from its ``--json`` summary), with its engine, the number of Monte Carlo runs and draws, and
    its agreement of theory and Monte Carlo."""
    import json

    path = FIGURES.parent / "paper_run.json"
    if not path.is_file():
        return "not recorded"
    run = json.loads(path.read_text(encoding="utf-8"))
    mc = run["monte_carlo"]
    agr = run["agreement"]
    ok = sum(a["agree"] for a in agr.values())
    total = sum(a["checked"] for a in agr.values())
    return (f"{run['seconds'] / 60:.0f} min ({mc['engine']}, {run['workers']} workers; {mc['runs']} Monte Carlo runs, "
            f"{run['draws']} draws; {run['conditions']}); theory against Monte Carlo {ok}/{total} points within "
            f"{TOL_RULE}")


if __name__ == "__main__":  # python docs/_ext/docnumbers.py: print them
    for key, value in substitutions().items():
        print(f"{key}: {value}")
