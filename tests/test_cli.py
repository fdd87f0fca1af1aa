"""Tests of the command line (symattn.cli), the demo and the plotting helpers.

Commands run in-process through ``main([...])`` (fast); one test runs the installed console
script in a subprocess.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import symattn
from symattn import cli
from symattn.cli import solve as cli_solve
from symattn.cli import main
from symattn.errors import ConvergenceError

HERMITE_KEYS = {"activation", "a0", "a1", "nu", "d", "coefficients", "exact", "provenance"}
SOLVE_KEYS = {"gamma", "E_attention", "E_linear", "a1", "nu", "d", "provenance", "accuracy"}
SIMULATE_KEYS = {"gamma", "n", "p", "draws", "E_attention", "E_linear", "provenance"}
PROVENANCE_KEYS = {"symattn", "parameters", "seed", "backend", "dtype", "versions", "python", "platform",
                   "timestamp", "git_revision"}

TANH_A1 = 0.6057055  # docs/theory.md §1.2
TANH_NU = 0.3942945


def _no_nonfinite(token):
    raise AssertionError(f"non-standard JSON constant {token!r} in output")


def run(capsys, *argv):
    """Run the CLI in-process; returns (exit code, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *argv, provenance: bool = True):
    """Run with --json; checks the exit code and (for symattn's own commands) the provenance object."""
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    data = json.loads(out, parse_constant=_no_nonfinite)
    if provenance:
        prov = data["provenance"]
        assert set(prov) == PROVENANCE_KEYS, prov
        assert prov["symattn"] == symattn.__version__ and prov["parameters"].get("command") == argv[0]
        assert {"numpy", "scipy", "sympy", "mpmath"} <= set(prov["versions"]) and prov["timestamp"]
    return data


def e_lr_closed_form(c, g, m2):
    """E_LR(γ) of docs/theory.md §3 with the analytic derivative (independent of symattn.theory)."""
    mt = (-(1 - c + g) + math.sqrt((1 - c + g) ** 2 + 4 * c * g)) / (2 * c * g)
    m = c * mt + (1 - c) / g
    mtp = -(c * mt**2 + mt) / (2 * c * g * mt + 1 - c + g)
    mp = c * mtp - (1 - c) / g**2
    D = 1 + g * m2 * m * mt
    Fp = (mp * D - m * m2 * (m * mt + g * mp * mt + g * m * mtp)) / D**2
    return -(g**2) * Fp


def _attention_available() -> bool:
    try:
        from symattn.layer import memorization_error

        memorization_error("tanh", 0.5, [1.0], model="attention")
        return True
    except NotImplementedError:
        return False


# ============================================================================ help and structure
def test_top_level_help_lists_commands(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in ("hermite", "solve", "simulate", "demo"):
        assert name in out
    assert "examples:" in out and "exit codes" in out


def test_no_command_prints_help_and_exits_2(capsys):
    code, out, err = run(capsys)
    assert code == 2 and "usage:" in err and out == ""


def test_version(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0 and out.startswith("symattn ")


@pytest.mark.parametrize("command,words", [
    ("hermite", ["He_k", "a1", "nu", "examples:", "null"]),
    ("solve", ["gamma^2", "F_LR", "examples:", "--aligned", "--diagonal", "omitted"]),
    ("simulate", ["eigh", "E_A(gamma)", "examples:", "--seed", "--backend"]),
    ("demo", ["demo_linear.png", "examples:"]),
])
def test_subcommand_help_teaches(capsys, command, words):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    for w in words:
        assert w in out, f"{w!r} missing from '{command} --help'"


# ============================================================================ hermite
def test_hermite_json_contract(capsys):
    data = run_json(capsys, "hermite", "tanh", "--kmax", 6, "--dps", 20)
    assert set(data) == HERMITE_KEYS
    assert data["activation"] == "tanh"
    assert len(data["coefficients"]) == 7 and len(data["exact"]) == 7
    assert all(isinstance(s, str) for s in data["coefficients"])
    assert all(e is None or isinstance(e, str) for e in data["exact"])
    a = [float(s) for s in data["coefficients"]]
    assert abs(a[0]) < 1e-15  # centred
    assert a[1] == pytest.approx(TANH_A1, rel=1e-6)
    assert a[2] == pytest.approx(0.0, abs=1e-15) and a[4] == pytest.approx(0.0, abs=1e-15)  # tanh is odd
    assert data["a1"] == pytest.approx(TANH_A1, rel=1e-6)
    assert data["nu"] == pytest.approx(TANH_NU, rel=1e-6)
    assert sum(x * x for x in a) <= data["nu"] * (1 + 1e-12)
    assert data["a0"] == pytest.approx(0.0, abs=1e-15)
    assert data["d"] == 0.0
    # D significant digits
    digits = data["coefficients"][1].lstrip("-0.").replace(".", "").split("e")[0]
    assert 15 <= len(digits) <= 20


def test_hermite_superlinear_d_is_null(capsys):
    data = run_json(capsys, "hermite", "he3", "--kmax", 4)
    assert data["d"] is None  # d = inf written as null
    a = [float(s) for s in data["coefficients"]]
    assert a[3] == pytest.approx(math.sqrt(6))
    assert data["nu"] == pytest.approx(6.0)


def test_hermite_expression_and_table(capsys):
    code, out, err = run(capsys, "hermite", "x*erf(x)", "--kmax", 3, "--no-exact")
    assert code == 0, err
    assert "a1 =" in out and "nu =" in out and "a_k" in out
    assert len([ln for ln in out.splitlines() if ln.strip()[:1].isdigit()]) == 4


# ============================================================================ solve
def test_solve_linear_json_contract_and_values(capsys):
    gammas = [0.01, 0.1, 1.0, 10.0]
    data = run_json(capsys, "solve", "--activation", "tanh", "--c", 0.5, "--gamma", *gammas,
                    "--snr", 1, "--model", "linear")
    assert set(data) == {"gamma", "E_linear", "a1", "nu", "d", "provenance"}  # the model not requested is omitted
    assert data["gamma"] == gammas
    assert len(data["E_linear"]) == 4
    expected = [e_lr_closed_form(0.5, g, 1.0) for g in gammas]
    np.testing.assert_allclose(data["E_linear"], expected, rtol=1e-6)
    assert data["a1"] == pytest.approx(TANH_A1, rel=1e-6)
    assert data["nu"] == pytest.approx(TANH_NU, rel=1e-6)
    assert data["d"] == 0.0


def test_solve_linear_superlinear_is_fine(capsys):
    """The linear model does not use f: he3 needs no --diagonal zero there; d=inf -> null."""
    data = run_json(capsys, "solve", "-a", "he3", "--c", 2, "--gamma", 1, "--model", "linear")
    assert data["d"] is None
    assert data["E_linear"][0] == pytest.approx(e_lr_closed_form(2.0, 1.0, 0.0), rel=1e-6)


def test_solve_aligned_equals_explicit_geometry(capsys):
    common = ["solve", "--c", 1, "--gamma", 0.1, 1, "--model", "linear"]
    a = run_json(capsys, *common, "--aligned", "--snr", 2)
    b = run_json(capsys, *common, "--snr", 2, "--wk2", 2, "--wq2", 2, "--mu-wk", 2, "--mu-wq", 2, "--wk-wq", 2)
    assert a == b


def test_solve_table(capsys):
    code, out, err = run(capsys, "solve", "--c", 0.5, "--gamma", 0.1, 1, "--model", "linear", "--snr", 1)
    assert code == 0, err
    assert "E_linear" in out and "gamma" in out and "snr=1" in out
    assert len(out.strip().splitlines()) == 2 + 2 + 2  # header lines, table header + rule, 2 rows


def test_solve_both_json_contract(capsys):
    if not _attention_available():
        pytest.skip("attention theory not implemented yet")
    data = run_json(capsys, "solve", "--activation", "tanh", "--c", 0.5, "--gamma", 0.1, 1, "--aligned", "--snr", 1)
    assert set(data) == SOLVE_KEYS
    assert len(data["E_attention"]) == len(data["E_linear"]) == 2
    assert all(0 < e < 1 for e in data["E_attention"])
    att = run_json(capsys, "solve", "--c", 0.5, "--gamma", 0.1, 1, "--aligned", "--snr", 1, "--model", "attention")
    assert set(att) == SOLVE_KEYS - {"E_linear"}
    assert [a["flag"] for a in att["accuracy"]] and all(a["flag"] in ("ok", "miss", "unvalidated")
                                                        for a in att["accuracy"])
    np.testing.assert_allclose(att["E_attention"], data["E_attention"], rtol=1e-10)
    # --n uses the finite-p diagonal d_n (about 1/sqrt(p) for tanh)
    dn = run_json(capsys, "solve", "--c", 1, "--gamma", 1, "--n", 400, "--model", "attention")
    assert 0.0 < dn["d"] < 0.2


def test_solve_several_c_rows_match_the_closed_form(capsys):
    cs, gammas = [0.5, 2.0, 4.0], [0.1, 1.0]
    data = run_json(capsys, "solve", "--c", *cs, "--gamma", *gammas, "--snr", 1, "--model", "linear")
    assert data["c"] == cs and data["gamma"] == gammas and "failed" not in data
    assert np.shape(data["E_linear"]) == (3, 2)
    for i, c in enumerate(cs):
        np.testing.assert_allclose(data["E_linear"][i], [e_lr_closed_form(c, g, 1.0) for g in gammas], rtol=1e-6)
    assert data["provenance"]["parameters"]["c"] == cs


def test_solve_several_c_equals_one_c_at_a_time(capsys):
    argv = ["--gamma", 0.1, 1, "--aligned", "--snr", 1, "--n", 400]
    both = run_json(capsys, "solve", "--c", 0.5, 1, *argv)
    for i, c in enumerate((0.5, 1.0)):
        one = run_json(capsys, "solve", "--c", c, *argv)
        for key in ("E_attention", "E_linear"):
            np.testing.assert_allclose(both[key][i], one[key], rtol=1e-12)
        assert both["d"][i] == one["d"] and both["t"][i] == one["t"]
        assert one["t"] == pytest.approx(2.0 / math.sqrt(round(c * 400)), rel=1e-12)  # (snr + snr^2)/sqrt(p)


def test_strong_signal_warning_for_negative_t(capsys):
    """|t| > 0.15, not t > 0.15: t = (1 + 3*(-3))/sqrt(200) = -0.566 warns too (issue 12, finding 8)."""
    code, out, err = run(capsys, "solve", "--c", 0.5, "--gamma", 0.1, "--snr", 1, "--wk2", 9, "--wq2", 9,
                         "--mu-wk", 3, "--mu-wq", -3, "--wk-wq", -9, "--n", 400)
    assert code == 0, err
    # one line for the finite-size warning (the atlas may add its own AccuracyWarning line: docs/accuracy.md)
    lines = [line for line in err.splitlines() if "FiniteSizeWarning" in line]
    assert len(lines) == 1 and f"t = {-8 / math.sqrt(200):.3g} < -0.15" in lines[0] and "--finite-p" in lines[0]
    assert all(line.startswith("symattn: warning: ") for line in err.splitlines())


def test_repeated_list_options_are_merged(capsys):
    a = run_json(capsys, "solve", "--c", 0.5, "--c", 2, "--gamma", 0.1, "--gamma", 1, "--model", "linear")
    b = run_json(capsys, "solve", "--c", 0.5, 2, "--gamma", 0.1, 1, "--model", "linear")
    assert a["c"] == [0.5, 2.0] and a["gamma"] == [0.1, 1.0]
    assert a["E_linear"] == b["E_linear"]


def _failing_at(monkeypatch, c_bad, g_bad):
    """theory.solve as it is, except that E_attention at (c_bad, g_bad) fails."""
    import symattn.theory as theory

    real = theory.solve

    def solve(f, c, gamma, model="attention", errors="raise", **kwargs):
        res = real(f, c, gamma, model=model, errors=errors, **kwargs)
        g = np.atleast_1d(res.gamma)
        hit = (model == "attention") & np.isclose(np.atleast_1d(res.c), c_bad) & np.isclose(g, g_bad)
        if hit.any():
            if errors == "raise":
                raise ConvergenceError("no convergence", residuals=[1e-2], iterations=300,
                                       point={"c": c_bad, "gamma": g_bad})
            res.attention = np.where(hit, np.nan, res.attention)
            res.failures = [{"c": c_bad, "gamma": g_bad, "model": "attention", "reason": "no convergence"}]
        return res

    monkeypatch.setattr(theory, "solve", solve)


def test_one_failed_point_keeps_the_others_and_exits_3(capsys, monkeypatch):
    argv = ["solve", "--c", 0.5, 2, "--gamma", 0.01, 0.1, 1, 10, "--snr", 1]
    ref = run_json(capsys, *argv)
    _failing_at(monkeypatch, 2.0, 0.1)
    code, out, err = run(capsys, *argv, "--json")
    assert code == 3
    assert err.startswith("symattn: error: no convergence at 1 of 16 points (attention at c=2, gamma=0.1)")
    assert err.count("\n") == 1 and "Traceback" not in err
    data = json.loads(out, parse_constant=_no_nonfinite)
    assert data["E_attention"][1][1] is None
    assert data["failed"] == [{"c": 2.0, "gamma": 0.1, "model": "attention", "error": "no convergence"}]
    kept = [(i, j) for i in range(2) for j in range(4) if (i, j) != (1, 1)]
    for i, j in kept:
        assert data["E_attention"][i][j] == ref["E_attention"][i][j]
    assert data["E_linear"] == ref["E_linear"]
    code, out, err = run(capsys, *argv)  # the table marks the point
    assert code == 3 and sum("failed" in ln for ln in out.splitlines()) == 1 and err.count("\n") == 1


def test_one_failed_point_single_c(capsys, monkeypatch):
    _failing_at(monkeypatch, 0.5, 1.0)
    code, out, err = run(capsys, "solve", "--c", 0.5, "--gamma", 0.1, 1, "--json")
    assert code == 3 and err.count("\n") == 1
    data = json.loads(out, parse_constant=_no_nonfinite)
    assert data["E_attention"][1] is None and data["E_attention"][0] is not None and "c" not in data


def test_solve_attention_not_implemented_is_exit_2(capsys, monkeypatch):
    def fake(*args, **kwargs):
        raise NotImplementedError("the attention system")

    monkeypatch.setattr(cli_solve, "solve_data", fake)
    code, out, err = run(capsys, "solve", "--c", 1, "--gamma", 1)
    assert code == 2 and out == ""
    assert err.strip() == "symattn: error: not implemented yet: the attention system"


def test_convergence_error_is_exit_3(capsys, monkeypatch):
    def fake(*args, **kwargs):
        raise ConvergenceError("no convergence", residuals=[1e-3], iterations=500, point={"c": 1.0, "gamma": 1e-6})

    monkeypatch.setattr(cli_solve, "solve_data", fake)
    code, out, err = run(capsys, "solve", "--c", 1, "--gamma", 1e-6)
    assert code == 3 and out == ""
    assert err.startswith("symattn: error: no convergence") and err.count("\n") == 1
    assert "500 iterations" in err and "Traceback" not in err


def test_traceback_flag_reraises(capsys, monkeypatch):
    def fake(*args, **kwargs):
        raise ConvergenceError("no convergence")

    monkeypatch.setattr(cli_solve, "solve_data", fake)
    with pytest.raises(ConvergenceError):
        main(["--traceback", "solve", "--c", "1", "--gamma", "1"])


def test_unexpected_exceptions_are_not_hidden(monkeypatch):
    def fake(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli_solve, "solve_data", fake)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["solve", "--c", "1", "--gamma", "1"])


# ============================================================================ simulate
def test_simulate_json_contract(capsys):
    argv = ["simulate", "--activation", "tanh", "--n", 60, "--c", 0.5, "--gamma", 0.1, 1, 10,
            "--aligned", "--snr", 1, "--draws", 3, "--seed", 7]
    data = run_json(capsys, *argv)
    assert set(data) == SIMULATE_KEYS
    assert (data["n"], data["p"], data["draws"]) == (60, 30, 3)
    assert data["gamma"] == [0.1, 1.0, 10.0]
    for key in ("E_attention", "E_linear"):
        assert set(data[key]) == {"mean", "sem"}
        assert len(data[key]["mean"]) == len(data[key]["sem"]) == 3
        assert all(0 < m < 1 for m in data[key]["mean"])
        assert all(s >= 0 for s in data[key]["sem"])
        assert data[key]["mean"] == sorted(data[key]["mean"])  # E increases with gamma
    again = run_json(capsys, *argv)
    for d in (again, data):
        d["provenance"].pop("timestamp")  # the only field that may differ between two runs
    assert again == data  # reproducible by seed


def test_simulate_one_draw_sem_is_null(capsys):
    data = run_json(capsys, "simulate", "--n", 20, "--c", 1, "--gamma", 1, "--draws", 1)
    assert data["E_linear"]["sem"] == [None]  # NaN written as null


def test_simulate_table(capsys):
    code, out, err = run(capsys, "simulate", "-a", "relu", "--n", 40, "--c", 1, "--gamma", 0.1, 1, "--draws", 2)
    assert code == 0, err
    assert "E_attention" in out and "sem" in out and "p = 40" in out


def test_simulate_torch_cpu_matches_numpy(capsys):
    pytest.importorskip("torch")
    argv = ["simulate", "--n", 40, "--c", 0.5, "--gamma", 0.1, 1, "--draws", 2, "--snr", 1]
    a = run_json(capsys, *argv)
    b = run_json(capsys, *argv, "--backend", "torch", "--device", "cpu")
    for key in ("E_attention", "E_linear"):
        np.testing.assert_allclose(b[key]["mean"], a[key]["mean"], rtol=1e-9)


# ============================================================================ bad input
def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


SOLVE = ["solve", "--c", "0.5", "--gamma", "1"]
SIM = ["simulate", "--n", "20", "--c", "1", "--gamma", "1", "--draws", "1"]

BAD_INPUTS = [
    # (id, argv, substring that names the parameter)
    ("c-negative", ["solve", "--c", "-1", "--gamma", "1"], "invalid c=-1.0: allowed 0 < c <= 10000"),
    ("c-zero", ["solve", "--c", "0", "--gamma", "1"], "invalid c="),
    ("c-too-large", ["solve", "--c", "20000", "--gamma", "1"], "invalid c="),
    ("c-nan", ["simulate", "--n", "20", "--c", "nan", "--gamma", "1"], "invalid c="),
    ("c-not-a-number", ["solve", "--c", "abc", "--gamma", "1"], "argument --c"),
    ("c-missing", ["solve", "--gamma", "1"], "--c"),
    ("gamma-zero", ["solve", "--c", "1", "--gamma", "0"], "invalid gamma="),
    ("gamma-negative", ["solve", "--c", "1", "--gamma", "0.1", "-1"], "invalid gamma="),
    ("gamma-nan", ["solve", "--c", "1", "--gamma", "nan"], "invalid gamma="),
    ("gamma-inf", ["simulate", "--n", "20", "--c", "1", "--gamma", "inf"], "invalid gamma="),
    ("geometry-not-psd", SOLVE + ["--snr", "1", "--wk2", "1", "--mu-wk", "5"], "invalid geometry="),
    ("snr-negative", SOLVE + ["--snr", "-1"], "invalid snr="),
    ("wk2-nan", SOLVE + ["--wk2", "nan"], "invalid wk2="),
    ("aligned-plus-weights", SOLVE + ["--aligned", "--snr", "1", "--wk2", "2"], "invalid aligned="),
    ("activation-unknown", ["solve", "--activation", "nosuchact", "--c", "1", "--gamma", "1"], "nosuchact"),
    ("activation-malformed", ["hermite", "x**"], "x**"),
    ("activation-other-symbol", ["solve", "--activation", "y+1", "--c", "1", "--gamma", "1"], "y"),
    ("hermite-unknown", ["hermite", "softplusss"], "softplusss"),
    ("kmax-negative", ["hermite", "tanh", "--kmax", "-1"], "invalid kmax="),
    ("hermite-dps-small", ["hermite", "tanh", "--dps", "5"], "invalid dps="),
    ("solve-dps-small", SOLVE + ["--dps", "10"], "invalid dps="),
    ("model-unknown", SOLVE + ["--model", "transformer"], "argument --model"),
    ("solve-backend-unknown", SOLVE + ["--backend", "torch"], "argument --backend"),
    ("solve-n-small", SOLVE + ["--n", "1"], "invalid n="),
    ("diagonal-unknown", SOLVE + ["--diagonal", "one"], "argument --diagonal"),
    ("solve-superlinear-diagonal-f", ["solve", "-a", "he3", "--c", "1", "--gamma", "1"], "invalid diagonal="),
    ("simulate-superlinear-diagonal-f", ["simulate", "-a", "he3", "--n", "20", "--c", "1", "--gamma", "1"],
     "invalid diagonal="),
    ("n-too-small", ["simulate", "--n", "1", "--c", "1", "--gamma", "1"], "invalid n="),
    ("n-not-integer", ["simulate", "--n", "2.5", "--c", "1", "--gamma", "1"], "argument --n"),
    ("draws-zero", SIM[:-1] + ["0"], "invalid draws="),
    ("seed-negative", SIM + ["--seed", "-3"], "invalid seed="),
    ("simulate-backend-unknown", SIM + ["--backend", "jax"], "argument --backend"),
    ("device-with-numpy", SIM + ["--device", "cuda"], "invalid device="),
    ("device-unknown", SIM + ["--backend", "torch", "--device", "tpu"], "invalid device="),
    ("residual-concat-of-heads", SOLVE + ["--heads", "HEADS2", "--residual"], "invalid readout="),
    ("softmax-negative-temperature", SOLVE + ["--kernel", "softmax", "--temperature", "-1", "--n", "100",
                                              "--diagonal", "zero"], "invalid temperature="),
    ("softmax-small-temperature", SOLVE + ["--kernel", "softmax", "--temperature", "0.5", "--n", "100",
                                           "--diagonal", "zero"], "invalid temperature="),
    ("heads-not-npy", SOLVE + ["--heads", "heads.txt"], "invalid heads="),
    ("heads-wrong-n", SIM + ["--heads", "HEADS2"], "invalid n="),
    ("weights-with-softmax", SOLVE + ["--weights", "W.npy", "--kernel", "softmax"], "invalid weights="),
    ("variant-finite-p", SOLVE + ["--residual", "--finite-p", "--n", "100"], "invalid finite_p="),
    ("heads-with-aligned", SOLVE + ["--heads", "HEADS2", "--readout", "sum", "--aligned", "--snr", "1"],
     "invalid aligned="),
    ("heads-with-n", SOLVE + ["--heads", "HEADS2", "--readout", "sum", "--n", "100"], "invalid n="),
    ("variant-mu-without-weights", SOLVE + ["--residual", "--mu", "top"], "invalid mu="),
    ("weights-residual-mpmath", SOLVE + ["--weights", "W.npy", "--residual", "--backend", "mpmath"],
     "invalid backend="),
    ("unknown-command", ["frobnicate"], "invalid choice"),
    ("unknown-option", SOLVE + ["--frobnicate"], "--frobnicate"),
]


@pytest.mark.parametrize("argv,needle", [(a, n) for _, a, n in BAD_INPUTS], ids=[i for i, _, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line(capsys, tmp_path, argv, needle):
    if "--backend" in argv and "torch" in argv and argv[0] == "simulate":
        pytest.importorskip("torch")
    if "HEADS2" in argv or "W.npy" in argv:   # two random 10×10 heads, one 10×10 W
        rng = np.random.default_rng(0)
        np.save(tmp_path / "heads.npy", rng.standard_normal((2, 10, 10)) / np.sqrt(10))
        np.save(tmp_path / "W.npy", rng.standard_normal((10, 10)) / np.sqrt(10))
        argv = [str(tmp_path / "heads.npy") if a == "HEADS2" else str(tmp_path / "W.npy") if a == "W.npy" else a
                for a in argv]
    code, out, err = run(capsys, *argv)
    assert code == 2, err
    assert out == ""
    assert err.startswith("symattn: error: ")
    assert err.count("\n") == 1, err  # one line
    assert "Traceback" not in err
    assert needle in err, err


def test_at_least_15_bad_input_cases():
    assert len({n for _, _, n in BAD_INPUTS}) >= 15


def test_cuda_without_cuda_is_exit_2(capsys):
    pytest.importorskip("torch")
    if _cuda_available():
        pytest.skip("CUDA is available here")
    code, out, err = run(capsys, *SIM, "--backend", "torch", "--device", "cuda")
    assert code == 2 and out == ""
    assert err.startswith("symattn: error: invalid device=") and "CUDA" in err


def _console_script() -> list[str]:
    exe = Path(sys.executable).parent / ("symattn.exe" if os.name == "nt" else "symattn")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "symattn.cli"]


def test_console_script_bad_input_subprocess():
    for argv, needle in ((["solve", "--c", "-1", "--gamma", "1"], "invalid c=-1.0"),
                         (["hermite", "x**"], "x**")):
        proc = subprocess.run(_console_script() + argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        assert proc.stderr.startswith("symattn: error: ") and needle in proc.stderr
        assert proc.stdout == ""


def test_python_dash_m_runs(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "symattn.cli", "hermite", "--help"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "examples:" in proc.stdout


# ============================================================================ extension registry
def test_registering_a_new_command(capsys, monkeypatch):
    mod = types.ModuleType("symattn_test_ext")

    def run_hello(args):
        print(cli.dump_json({"hello": args.name, "geometry": cli.geometry_from_args(args).as_dict()})
              if args.json else f"hello {args.name}")
        return 0

    def add_parser(subparsers):
        p = cli.add_command(subparsers, "hello", help="say hello", description="Says hello.",
                            examples=["symattn hello world"])
        p.add_argument("name")
        cli.add_geometry_args(p)
        cli.add_json_flag(p)
        p.set_defaults(func=run_hello)
        return p

    mod.add_parser = add_parser
    monkeypatch.setitem(sys.modules, "symattn_test_ext", mod)
    monkeypatch.setitem(cli.COMMANDS, "hello", "symattn_test_ext:add_parser")
    assert run(capsys, "hello", "world") == (0, "hello world\n", "")
    data = run_json(capsys, "hello", "you", "--aligned", "--snr", "1", provenance=False)  # an extension's own JSON
    assert data["hello"] == "you" and data["geometry"]["wk_wq"] == 1.0
    code, out, _ = run(capsys, "hello", "--help")
    assert code == 0 and "examples:" in out


def test_broken_extension_does_not_break_the_cli(capsys, monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "broken", "symattn_no_such_module_xyz:add_parser")
    code, out, _ = run(capsys, "--help")
    assert code == 0 and "broken" in out
    code, out, err = run(capsys, "broken", "--quick")
    assert code == 2 and "unavailable" in err and "Traceback" not in err
    code, _, err = run(capsys, "hermite", "tanh", "--kmax", "1", "--dps", "15")
    assert code == 0, err


# ============================================================================ output helpers
def test_dump_json_is_strict():
    s = cli.dump_json({"a": np.float64("inf"), "b": [np.nan, 1.5, np.int64(3)], "c": np.array([1.0, -np.inf]),
                       "d": np.bool_(True)})
    assert json.loads(s, parse_constant=_no_nonfinite) == {"a": None, "b": [None, 1.5, 3], "c": [1.0, None], "d": True}


def test_format_table_aligns():
    t = cli.format_table(["k", "value"], [["1", 0.5], ["10", 1e-9]])
    lines = t.splitlines()
    assert len(lines) == 4 and len({len(ln) for ln in lines}) == 1


# ============================================================================ demo and plotting
@pytest.mark.filterwarnings("ignore::symattn.errors.FiniteSizeWarning")  # n = 40-60: t > 0.15 by design
def test_demo_small_run_writes_figure(tmp_path):
    from symattn.figures.demo import FIGURE_NAME, run as run_demo

    lines = []
    summary = run_demo(out=tmp_path, echo=lines.append, n=60, draws=2, cs=(0.5, 1.0), gammas=(0.1, 1.0),
                       curve_points=7)
    fig = tmp_path / FIGURE_NAME
    assert summary["figure"] == str(fig)
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(summary["rows"]) == 4
    for r in summary["rows"]:
        assert r["E_linear_theory"] == pytest.approx(e_lr_closed_form(r["c"], r["gamma"], 1.0), rel=1e-6)
        assert 0 < r["E_linear_mc"] < 1 and r["E_linear_sem"] >= 0
    text = "\n".join(lines)
    assert "Hermite" in text and "E_LR theory" in text and "+-" in text
    json.loads(cli.dump_json(summary), parse_constant=_no_nonfinite)


@pytest.mark.filterwarnings("ignore::symattn.errors.FiniteSizeWarning")  # n = 40-60: t > 0.15 by design
def test_demo_command_plumbing(capsys, monkeypatch, tmp_path):
    import symattn.figures.demo as demo

    real = demo.run
    monkeypatch.setattr(demo, "run", lambda out, echo: real(out=out, echo=echo, n=40, draws=2, cs=(1.0,),
                                                            gammas=(1.0,), curve_points=5))
    data = run_json(capsys, "demo", "--out", tmp_path / "d")
    assert Path(data["figure"]).exists() and data["n"] == 40
    code, out, err = run(capsys, "demo", "--out", tmp_path / "e")
    assert code == 0, err
    assert "figure written" in out


@pytest.mark.slow
def test_full_demo_runs(tmp_path, capsys):
    code, out, err = run(capsys, "demo", "--out", tmp_path)
    assert code == 0, err
    assert (tmp_path / "demo_linear.png").exists()


def test_plot_theory_vs_mc(tmp_path):
    from symattn.figures.style import new_figure, plot_theory_vs_mc, save_figure, style_error_axes

    fig, axes = new_figure(2)
    g = np.logspace(-2, 1, 9)
    line, bars = plot_theory_vs_mc(axes[0], g, g / (1 + g), [0.1, 0.5], [0.01, np.nan], label="x",
                                   mc_gamma=[0.1, 1.0])
    assert line is not None and bars is not None and axes[0].get_xscale() == "log"
    assert plot_theory_vs_mc(axes[1], g, None, g / 2, None)[0] is None
    style_error_axes(axes[0], title="t")
    with pytest.raises(ValueError):
        plot_theory_vs_mc(axes[1], g, g[:-1])
    with pytest.raises(ValueError):
        plot_theory_vs_mc(axes[1], g, g, [1.0, 2.0])
    path = save_figure(fig, tmp_path / "sub" / "f.png", formats=("png", "pdf"))
    assert path.exists() and (tmp_path / "sub" / "f.pdf").exists()


def test_solve_gamma_zero_is_the_ridgeless_value(capsys):
    """--gamma 0 prints the ridgeless value (c < 1): E_LR(0) = (1 − c)/(1 + ‖μ‖²) and, at μ = w = 0,
    E_A(0) = 1 − c (rank Φ = p; docs/theory.md §7.6); with a signal, the same as sa.memorization_error(γ=0)
    and, as a limit, within 1e-6 of the theory at γ = 1e-7."""
    data = run_json(capsys, "solve", "-a", "tanh", "--c", 0.5, "--gamma", 0, 1e-7)
    assert data["gamma"] == [0.0, 1e-7]
    assert abs(data["E_linear"][0] - 0.5) < 1e-15 and abs(data["E_attention"][0] - 0.5) < 1e-15
    data = run_json(capsys, "solve", "-a", "tanh", "--c", 0.3, "--gamma", 0, 1e-7, "--aligned", "--snr", 1)
    assert abs(data["E_linear"][0] - 0.7 / 2) < 1e-15
    assert data["E_attention"][0] == symattn.memorization_error("tanh", 0.3, 0.0, symattn.Geometry.aligned(snr=1.0))
    assert abs(data["E_attention"][0] - data["E_attention"][1]) < 1e-6
    code, out, err = run(capsys, "solve", "-a", "tanh", "--c", 0.5, "--gamma", 0)
    assert code == 0 and "0.5" in out


@pytest.mark.parametrize("cs", [["2"], ["0.5", "1"]])
def test_solve_gamma_zero_at_c_at_least_one_is_exit_2(capsys, cs):
    code, out, err = run(capsys, "solve", "-a", "tanh", "--c", *cs, "--gamma", 0, 0.1)
    assert code == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("symattn: error: invalid gamma=0.0: allowed 0 < gamma <= 1e12") and "c < 1" in err


def test_solve_negative_gamma_is_still_refused(capsys):
    code, out, err = run(capsys, "solve", "-a", "tanh", "--c", 0.5, "--gamma", -1)
    assert code == 2 and "gamma" in err and "0 < gamma <= 1e+12" in err


def test_variant_flags_give_the_library_values(capsys, tmp_path):
    """solve/simulate with --residual, --heads FILE.npy --readout sum and --kernel softmax: the numbers of
    sa.memorization_error / sa.simulate with the same variant, and the variant in the provenance."""
    pytest.importorskip("symattn.backends.general_w")
    rng = np.random.default_rng(3)
    heads = rng.standard_normal((2, 20, 20)) / np.sqrt(20)
    np.save(tmp_path / "heads.npy", heads)
    g = [0.1, 1.0]
    data = run_json(capsys, "solve", "-a", "tanh", "--c", "0.5", "--gamma", *g, "--heads", tmp_path / "heads.npy",
                    "--readout", "sum", "--residual")
    ref = symattn.memorization_error("tanh", 0.5, g, heads=list(heads), readout="sum", residual=True)
    np.testing.assert_allclose(data["E_attention"], ref, rtol=1e-12)
    np.testing.assert_allclose(data["E_linear"], symattn.memorization_error("tanh", 0.5, g, model="linear"), rtol=1e-12)
    assert data["provenance"]["parameters"]["readout"] == "sum" and data["provenance"]["parameters"]["residual"]
    soft = run_json(capsys, "solve", "--c", "0.5", "--gamma", 1e-3, "--kernel", "softmax", "--temperature", 2,
                    "--diagonal", "zero", "--n", 1000, "--model", "attention")
    assert "E_linear" not in soft
    np.testing.assert_allclose(soft["E_attention"], symattn.memorization_error(
        None, 0.5, [1e-3], kernel="softmax", temperature=2.0, n=1000, diagonal="zero"), rtol=1e-12)
    sim = run_json(capsys, "simulate", "-a", "tanh", "--n", 40, "--c", 0.5, "--gamma", *g, "--heads",
                   tmp_path / "heads.npy", "--draws", 2, "--seed", 4, "--no-progress")
    mc = symattn.simulate("tanh", n=40, c=0.5, gamma=g, heads=list(heads), draws=2, seed=4, progress=False)
    np.testing.assert_allclose(sim["E_attention"]["mean"], mc.attention_mean, rtol=1e-12)
    assert sim["provenance"]["parameters"]["heads"] == str(tmp_path / "heads.npy")
    code, out, _ = run(capsys, "solve", "-a", "tanh", "--c", "0.5", "--gamma", 0.1, "--residual")
    assert code == 0 and "variant: residual = True" in out
    # the heads' signal: --mu top is sqrt(snr) times the top eigenvector of the first head's symmetric part
    top = np.linalg.eigh((heads[0] + heads[0].T) / 2)[1][:, -1]
    sig = run_json(capsys, "solve", "-a", "tanh", "--c", "0.5", "--gamma", *g, "--heads", tmp_path / "heads.npy",
                   "--readout", "sum", "--mu", "top", "--snr", 2)
    for sign in (1, -1):   # the eigenvector's sign is a convention; E depends on it only through W's asymmetry
        ref = symattn.memorization_error("tanh", 0.5, g, heads=list(heads), readout="sum", mu=sign * np.sqrt(2) * top)
        if np.allclose(sig["E_attention"], ref, rtol=1e-10):
            break
    np.testing.assert_allclose(sig["E_attention"], ref, rtol=1e-10)
    np.testing.assert_allclose(sig["E_linear"], symattn.memorization_error(
        "tanh", 0.5, g, geometry=symattn.Geometry(snr=2.0), model="linear"), rtol=1e-10)


def test_solve_mpmath_json_keeps_the_digits(capsys):
    """--backend mpmath --dps 40 --json: E_* are decimal strings of 40 significant digits, the library's
    40-digit values (not floats)."""
    import mpmath

    data = run_json(capsys, "solve", "-a", "tanh", "--c", 0.5, "--gamma", 0.1, 1, "--backend", "mpmath",
                    "--dps", 40, "--model", "both")
    with mpmath.workdps(40):
        for m in ("attention", "linear"):
            ref = symattn.memorization_error("tanh", 0.5, [0.1, 1.0], model=m, backend="mpmath", dps=40)
            for s, r in zip(data[f"E_{m}"], ref):
                assert isinstance(s, str) and len(s.lstrip("0.").rstrip("0")) >= 38, s
                assert abs(mpmath.mpf(s) - r) <= mpmath.mpf(10) ** -38 * abs(r)
