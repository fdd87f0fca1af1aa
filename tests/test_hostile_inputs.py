"""Inputs that cannot hang, and numbers outside the theory's range never silently returned (issue 38 §3–§5).

Every case of the issue is here, each able to fail on the code before the change:

- §3 wrong numbers: a large ‖w_K‖‖w_Q‖/√p at μ = 0 (erf: the theory says 0.087 / 0.309, a Monte Carlo at
  the same n = 250, 30 draws, gives 0.316 ± 0.007 / 0.525 ± 0.007) and the softmax with a strong signal
  give a FiniteSizeWarning, and the CLI's atlas column says ``finite-size``, not ``ok``; a curve that
  decreases in γ is NaN with a FailedPointsWarning (a MiniLM layer where the [real] extra is installed;
  an engine made to return such a curve everywhere);
- §4 hangs: ``exp(exp(exp(x)))`` and a FIFO as weights are refused, ``sin`` nested 99 deep and ``x**256``
  at kmax 200 answer, each within 10 s of CPU time (the wall clock of a shared machine is bounded by the
  subprocess timeout); a spec of 10⁶ draws is refused at once;
- §5 complex weights, ``SYMATTN_THREADS=abc`` and a recorded path outside the working folder are refused;
- a hypothesis fuzz test over random expressions, depths and exponents: every CLI run ends within its
  budget with an answer or a one-line error, never a traceback.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import resource
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import symattn as sa
from symattn import realweights as rw, timeouts
from symattn.cli import main
from symattn.errors import FailedPointsWarning, FiniteSizeWarning, ParameterError

HAVE_REAL = (importlib.util.find_spec("safetensors") is not None
             and importlib.util.find_spec(rw.MINILM_PACKAGE) is not None)


def _cli(*args, timeout=60, env=None, cwd=None):
    """Run the CLI; returns the result and the CPU seconds of the child (user + system): on a shared machine
    the wall clock measures the neighbours, the CPU time the work (``timeout`` bounds the wall clock)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run([sys.executable, "-m", "symattn.cli", *args], capture_output=True, text=True,
                       timeout=timeout, env=dict(os.environ, **(env or {})), cwd=cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _one_line_error(r):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [x for x in r.stderr.strip().splitlines() if x.startswith("symattn: error")]
    assert len(lines) == 1, r.stderr


# ----------------------------------------------------------------------------- §3 wrong numbers
def test_large_weights_at_mu_zero_warn():
    geo = sa.Geometry(wk2=100.0, wq2=100.0, wk_wq=100.0)
    with pytest.warns(FiniteSizeWarning, match="weight strength") as caught:
        sa.memorization_error("erf", 2.0, [0.01, 0.1], geometry=geo, n=250)
    # the case: ‖w_K‖‖w_Q‖/√p = 100/√500 = 4.47, far above the 0.15 threshold, and the message says so
    assert any("4.47" in str(w.message) for w in caught if issubclass(w.category, FiniteSizeWarning))
    geo = sa.Geometry(wk2=40.0, wq2=40.0, wk_wq=40.0)   # ‖w‖² = 40 already misses by 40 %
    with pytest.warns(FiniteSizeWarning, match="weight strength") as caught:
        sa.memorization_error("erf", 2.0, 0.1, geometry=geo, n=250)
    assert any("1.79" in str(w.message) for w in caught if issubclass(w.category, FiniteSizeWarning))


def test_small_weights_do_not_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        E = sa.memorization_error("erf", 1.0, 0.1, geometry=sa.Geometry(wk2=1.0, wq2=1.0, wk_wq=1.0), n=2000)
    # ‖w_K‖‖w_Q‖/√p = 1/√2000 = 0.022: inside the regime, so no FiniteSizeWarning and a value in (0, 1)
    assert not [w for w in caught if issubclass(w.category, FiniteSizeWarning)]
    assert 0 < float(np.ravel(E)[0]) < 1


def test_cli_never_says_ok_for_large_weights():
    r, _ = _cli("solve", "-a", "erf", "--c", "2", "--gamma", "0.01", "0.1", "--wk2", "100", "--wq2", "100",
                "--wk-wq", "100", "--n", "250")
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.splitlines() if line.strip().startswith(("0.01", "0.1"))]
    assert len(rows) == 2 and all(row[-1] == "finite-size" for row in rows), r.stdout
    assert "FiniteSizeWarning" in r.stderr


def test_softmax_with_strong_signal_warns():
    with pytest.warns(FiniteSizeWarning) as caught:
        sa.memorization_error("tanh", 0.5, [0.01, 0.1, 1], geometry=sa.Geometry.aligned(20), n=300,
                              kernel="softmax", temperature=5, diagonal="zero")
    assert [w for w in caught if issubclass(w.category, FiniteSizeWarning)]   # the softmax engine warns too


def test_unphysical_points():
    from symattn.layer import unphysical_points

    assert unphysical_points([0.1, 1.0, 10.0], [0.1, 0.5, 0.9]) == {}
    assert set(unphysical_points([1e6, 1e8], [0.98938, 0.97823])) == {0, 1}       # decreasing
    assert set(unphysical_points([1.0], [1.2])) == {0}                               # outside [0, 1]
    # E = γ²/(1 + γ)² (ν = δ_1) passes; with one value spoilt, that point alone is dropped
    g = np.array([0.1, 1.0, 10.0, 100.0])
    E = g**2 / (1 + g) ** 2
    assert unphysical_points(g, E) == {}
    E[1] = 0.9
    assert set(unphysical_points(g, E)) == {1}
    # E/γ² increasing: E(0.1) < (0.1/1)² E(1)
    assert set(unphysical_points([0.1, 1.0], [0.001, 0.5])) == {0, 1}
    # the γ → ∞ asymptote: γ(1 − E) must not decrease (5 -> 6 may, 5 -> 1 may not)
    assert set(unphysical_points([10.0, 100.0], [0.5, 0.94])) == set()
    assert set(unphysical_points([10.0, 100.0], [0.5, 0.99])) == {0, 1}


def test_every_engine_passes_the_physical_checks(monkeypatch):
    from symattn import layer as L

    eng = L.THEORY_ENGINES["softmax"]
    fake = L.Engine(**{**{k: getattr(eng, k) for k in eng.__dataclass_fields__},
                       "run": lambda layer, c, gamma, **kw: np.array([0.5, 0.4])})
    monkeypatch.setitem(L.THEORY_ENGINES, "softmax", fake)
    layer = sa.Layer("tanh", kernel="softmax", temperature=1.0)
    with pytest.warns(FailedPointsWarning, match="decreases in gamma"):
        r = layer.theory(0.5, [1.0, 10.0], n=200, errors="nan")
    assert np.isnan(r.attention).all()
    with pytest.raises(sa.ConvergenceError, match="decreases in gamma"):
        layer.theory(0.5, [1.0, 10.0], n=200)


@pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra (MiniLM weights)")
def test_minilm_sin_decreasing_curve_is_nan():
    """The free-noise kernel (structure='free') returns E decreasing in γ at γ = 10⁶, 10⁸ here (0.9894 then
    0.9782): both points fail the physical checks and are NaN. The default engine (Hermite blocks, issue 34)
    is increasing there, so the same call passes the checks."""
    layer = sa.Layer("sin", weights="minilm:1")
    mu = layer.signal("top", snr=10)
    with pytest.warns(FailedPointsWarning, match="decreases in gamma"):
        r = layer.theory(0.01427, [1e6, 1e8], mu=mu, errors="nan", structure="free")
    assert np.isnan(np.asarray(r.attention, dtype=float)).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FailedPointsWarning)
        warnings.simplefilter("ignore", sa.AccuracyWarning)
        e = np.asarray(layer.theory(0.01427, [1e6, 1e8], mu=mu, errors="nan").attention, dtype=float)
    assert np.all(np.isfinite(e)) and e[0] < e[1] < 1


# ----------------------------------------------------------------------------- §4 hangs
def test_triple_exponential_refused_fast():
    t0 = time.monotonic()
    with pytest.raises(sa.ActivationError):
        sa.activation("exp(exp(exp(x)))")
    assert time.monotonic() - t0 < 10
    r, dt = _cli("solve", "-a", "exp(exp(exp(x)))", "--c", "1", "--gamma", "1")
    _one_line_error(r)
    assert dt < 10


def test_nested_power_towers_refused_fast():
    for expr in ("tanh(2**(2**(2**x)))", "exp(-exp(exp(x)))", "sinh(cosh(exp(x)))"):
        t0 = time.monotonic()
        try:
            sa.activation(expr)
        except sa.ActivationError:
            pass
        assert time.monotonic() - t0 < 10, expr


def test_sin_99_deep_answers_within_10s():
    r, dt = _cli("hermite", "sin(" * 99 + "x" + ")" * 99, "--kmax", "3", timeout=120)
    assert r.returncode == 0, r.stderr
    assert dt < 10, dt


def test_x256_kmax_200_answers_within_10s():
    r, dt = _cli("hermite", "x**256", "--kmax", "200", timeout=120)
    assert r.returncode == 0, r.stderr
    assert dt < 10, dt


def test_fifo_weights_refused(tmp_path):
    fifo = tmp_path / "w.npy"
    os.mkfifo(fifo)
    r, dt = _cli("solve", "-a", "erf", "--c", "1", "--gamma", "1", "--weights", str(fifo), timeout=30)
    _one_line_error(r)
    assert "FIFO" in r.stderr and dt < 10
    with pytest.raises(ParameterError, match="regular file"):
        sa.Layer("erf", weights=str(fifo))


def test_huge_sweep_refused_at_once(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text("c = 0.5\ngamma = [1.0]\nn = 40\ndraws = 1000000\n")
    r, dt = _cli("sweep", str(spec), "--store", str(tmp_path / "st"), "--scheduler", "serial")
    _one_line_error(r)
    assert "tasks" in r.stderr and dt < 10
    assert not (tmp_path / "st").exists()


# ----------------------------------------------------------------------------- §5 smaller
def test_complex_weights_refused(tmp_path):
    W = np.eye(4) + 0.5j
    np.save(tmp_path / "c.npy", W)
    with pytest.raises(ParameterError, match="real"):
        sa.Layer("erf", weights=str(tmp_path / "c.npy"))
    with pytest.raises(ParameterError, match="real"):
        sa.Layer("erf", weights=W)
    r, _ = _cli("solve", "-a", "erf", "--c", "1", "--gamma", "1", "--weights", str(tmp_path / "c.npy"))
    _one_line_error(r)


def test_bad_threads_variable_is_an_error():
    r, _ = _cli("simulate", "-a", "erf", "--c", "1", "--gamma", "1", "--n", "50", "--draws", "1",
                env={"SYMATTN_THREADS": "abc"})
    _one_line_error(r)
    assert "SYMATTN_THREADS" in r.stderr


def test_recorded_path_outside_working_folder_refused(tmp_path, monkeypatch):
    inside = tmp_path / "work"
    inside.mkdir()
    outside = tmp_path / "w.npy"
    np.save(outside, np.eye(3) + 0.1)
    monkeypatch.chdir(inside)
    with pytest.raises(ParameterError, match="inside"):
        sa.Layer.from_dict({"weights": {"path": "/etc/passwd", "sha256": "0" * 64}})
    ref = sa.Layer("erf", weights=str(outside)).to_dict()
    with pytest.raises(ParameterError, match="inside"):
        sa.Layer.from_dict(ref)
    assert sa.Layer.from_dict(ref, outside_paths=True).p == 3     # explicit: read
    np.save(inside / "w.npy", np.eye(3) + 0.1)
    assert sa.Layer.from_dict(sa.Layer("erf", weights="w.npy").to_dict()).p == 3   # inside: read


# ----------------------------------------------------------------------------- fuzz
_LEAVES = st.sampled_from(["x", "2*x", "x/3", "1", "0.5"])
_UNARY = st.sampled_from(["sin", "cos", "exp", "tanh", "erf", "sinh", "cosh", "abs", "atan", "log"])


@st.composite
def _expressions(draw):
    expr = draw(_LEAVES)
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            expr = f"{draw(_UNARY)}({expr})"
        elif kind == 1:
            expr = f"({expr})**{draw(st.integers(-3, 300))}"
        elif kind == 2:
            expr = f"({expr}) {draw(st.sampled_from(['+', '*', '-', '/']))} {draw(_LEAVES)}"
        else:
            expr = f"{draw(st.sampled_from(['2', 'exp(1)', 'x']))}**({expr})"
    return expr


#: the longest a hermite run may take: validation, quadrature and exact path within their budgets
#: (symattn.timeouts), plus the diagonal's limit
FUZZ_BUDGET = (timeouts.VALIDATION_SECONDS + timeouts.QUADRATURE_SECONDS + timeouts.EXACT_COEFFICIENTS_SECONDS
               + timeouts.LIMIT_SECONDS + 5.0)


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(expr=_expressions(), kmax=st.integers(0, 200))
def test_fuzz_hermite_never_hangs_nor_tracebacks(expr, kmax):
    """In process (the CLI's main): an unexpected exception would propagate and fail the test."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["hermite", expr, "--kmax", str(kmax), "--dps", "15"])
    assert time.monotonic() - t0 < FUZZ_BUDGET, expr
    assert code in (0, 2), (expr, code, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert len([x for x in err.getvalue().splitlines() if x.startswith("symattn: error")]) == 1
