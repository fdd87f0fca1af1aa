"""The test-error cells of real MiniLM layers in the shipped atlas (issue 36; symattn.atlas.real_test_cells).

The cells are the saved Monte Carlo of benchmarks/test_error_minilm.py (docs/test_error_minilm.csv, the acceptance
grid, 8 draws at n = 384/c, and docs/test_error_heldout.csv, the held-out cases) beside the current theory
(docs/theory.md §14.9). The tests without the [real] extra read the shipped rows; those with it ask
``Layer.theory(error="test")`` and replay the cells' calls.
"""

from __future__ import annotations

import csv
import importlib.util
import warnings
from pathlib import Path

import pytest

import symattn as sa
from symattn.accuracy import assess, load_atlas, within_tolerance
from symattn.atlas import REAL_TEST_GRIDS
from symattn.realweights import MINILM_PACKAGE

DOCS = Path(__file__).resolve().parents[1] / "docs"
HAVE_REAL = (importlib.util.find_spec("safetensors") is not None
             and importlib.util.find_spec(MINILM_PACKAGE) is not None)
needs_real = pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra (MiniLM weights)")

#: a measured miss: MiniLM layer 3, head 5, GELU, c = 1 (n = 384), μ = 0, γ = 0.01 (Monte Carlo 26 % below)
MISS = dict(layer="minilm:3:5", activation="gelu", c=1.0, gamma=0.01, mu="zero")
#: a measured-good cell of the same head: μ = top with snr 1, γ = 1
GOOD = dict(layer="minilm:3:5", activation="gelu", c=1.0, gamma=1.0, mu="top")


def _grid(name):
    with open(DOCS / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _shipped(block=None, **where):
    blocks = {b for b, _ in REAL_TEST_GRIDS} if block is None else {block}
    return [r for r in load_atlas() if r["block"] in blocks and all(r[k] == v for k, v in where.items())]


def _caught(fn):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = fn()
    return out, [x for x in w if issubclass(x.category, sa.AccuracyWarning)]


def test_shipped_real_test_cells_are_the_saved_monte_carlo():
    """Every row of both grids is a test-error cell of its block, with the grid's Monte Carlo (mean, se, n,
    draws) unchanged, the engine of the real-layer training cells (hermite-blocks: the kernel's block structure,
    as the grids' ``structure`` column says) and μ = top cells aligned with the top direction (align 1)."""
    for block, name in REAL_TEST_GRIDS:
        grid, cells = _grid(name), _shipped(block)
        assert len(cells) == len(grid), block
        for g, r in zip(grid, cells):
            assert (r["layer"], r["activation"], r["c"], r["gamma"], r["mu"], r["error"]) == (
                g["weights"], g["f"], float(g["c"]), float(g["gamma"]), g["mu"], "test")
            assert r["n"] == int(g["n"]) and r["draws"] == int(g["draws"]) and r["p"] == 384
            assert r["mc"] == pytest.approx(float(g["test_mc"]), rel=1e-9)
            assert r["se"] == pytest.approx(float(g["test_se"]), rel=1e-9)
            assert r["engine"] == "hermite-blocks" and g["structure"] == "blocks"
            assert r["within"] == within_tolerance(r["theory"], r["mc"], r["se"])
            # the theory replayed by the current code is the grid's, up to the solver's tolerance
            assert r["theory"] == pytest.approx(float(g["test_theory"]), rel=1e-3)
            if g["mu"] == "zero":
                assert r["snr"] == 0 and r["align"] == 0
            elif g["mu"] == "top":
                assert r["snr"] == pytest.approx(float(g.get("snr") or 1.0)) and r["align"] == pytest.approx(1.0)


def test_assess_warns_at_a_measured_real_layer_test_miss_and_not_at_a_good_cell():
    """assess on the shipped rows with the features of two cells (no weights needed): the miss is flagged with
    its own gap (the grid's Monte Carlo against its theory), the good cell is validated and silent, and the
    training error at the miss reads training cells only."""
    [miss] = _shipped("minilm-test", **MISS)
    grid = [g for g in _grid("test_error_minilm.csv") if (g["weights"], g["f"], float(g["c"]), float(g["gamma"]),
                                                          g["mu"]) == tuple(MISS.values())]
    assert not miss["within"] and miss["gap"] < -0.2
    assert miss["gap"] == pytest.approx(float(grid[0]["gap"]), abs=1e-3)
    feats = {k: miss[k] for k in ("snr", "align", "log_reff")}
    a = assess(miss["engine"], "gelu", [1.0], [0.01], n=384, error="test", **feats)
    assert a.flag(0) == "miss" and a.gap[0] == miss["gap"] and "test-error" in a.message()
    assert {k: a.cells[0][k] for k in MISS} == MISS
    [good] = _shipped("minilm-test", **GOOD)
    assert good["within"]
    feats = {k: good[k] for k in ("snr", "align", "log_reff")}
    a = assess(good["engine"], "gelu", [1.0], [1.0], n=384, error="test", **feats)
    assert a.ok.all() and a.message() is None and a.cells[0]["block"].startswith("minilm-test")
    train = assess(miss["engine"], "gelu", [1.0], [0.01], n=384, **{k: miss[k] for k in ("snr", "align", "log_reff")})
    assert all(c["error"] == "train" for c in train.cells)


@needs_real
def test_layer_theory_warns_at_the_real_layer_test_miss_and_is_silent_at_a_good_cell():
    """The issue's case: Layer("gelu", weights="minilm:3:5").theory(1.0, 0.01, error="test") warns with the
    measured −26 %; the same head at μ = top (snr 1), γ = 1 is measured good and silent; so is
    generalization_error with weights= at that point."""
    layer = sa.Layer("gelu", weights="minilm:3:5")
    r, w = _caught(lambda: layer.theory(1.0, 0.01, error="test"))
    assert r.accuracy.flag(0) == "miss" and r.accuracy.error == "test" and w
    assert "minilm:3:5" in str(w[0].message) and "-26" in str(w[0].message)
    mu = layer.signal("top", 1.0)
    r, w = _caught(lambda: layer.theory(1.0, [1.0], mu=mu, error="test"))
    assert r.accuracy.ok.all() and not w
    _, w = _caught(lambda: sa.generalization_error("gelu", 1.0, [1.0], weights="minilm:3:5", mu=mu))
    assert not w


@needs_real
def test_verify_atlas_replays_the_real_test_cells(tmp_path):
    """symattn verify --atlas (check_atlas) on a table of a few real-layer test cells of each block: every call
    replays to the stored theory within RTOL, none skipped."""
    from symattn.atlas import write_table
    from symattn.verification.atlas import RTOL, check_atlas

    rows = []
    for block, _ in REAL_TEST_GRIDS:
        cells = _shipped(block)
        calls = list(dict.fromkeys(r["call"] for r in cells))[:2]
        rows += [r for r in cells if r["call"] in calls]
    table = write_table(rows, tmp_path / "atlas.csv")
    res = check_atlas(table)
    assert res["cells"] == len(rows) >= 8 and not res["skipped"]
    assert res["passed"] and res["max_rel_diff"] <= RTOL, res
