"""Hostile and bad input, through the command line and the Python API (issue 12).

Every command-line case must end with exit code 2 (bad input) or 3 (no convergence), exactly one
line on stderr (``symattn: error: ...``) that names the offending parameter, and no traceback.
Every API case must raise a :class:`~symattn.errors.SymattnError` naming the parameter.

The injection payloads are activation (and φ) strings that Python's ``eval`` -- and so SymPy's
``sympify``/``parse_expr`` -- would execute: each runs with a temporary folder as the working
directory and checks that the sentinel file the payload tries to create does not appear. The
ones that would compute 9**9**9 run in a subprocess with a time limit, so that a hang fails the
test instead of stalling the suite.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import symattn as sa
from symattn.cli import main
from symattn.errors import ActivationError, ParameterError, SymattnError

SENTINEL = "SENTINEL"
REPO = Path(__file__).resolve().parents[1]


def _console_script() -> list[str]:
    exe = Path(sys.executable).parent / ("symattn.exe" if os.name == "nt" else "symattn")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "symattn.cli"]


def check_one_line_error(code, out, err, needles, codes=(2, 3)):
    """The contract of a refused input: exit 2 or 3, one stderr line naming the parameter, no traceback."""
    assert code in codes, f"exit {code}; stderr: {err!r}"
    assert "Traceback" not in err, err
    assert err.startswith("symattn: error: "), err
    assert err.count("\n") == 1 and err.endswith("\n"), f"not one line: {err!r}"
    needles = (needles,) if isinstance(needles, str) else needles
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    if code == 2:
        assert out == "", out
    return err


def run_cli(capsys, argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# ============================================================================ command line
SOLVE = ["solve", "--c", "0.5", "--gamma", "1"]
SIM = ["simulate", "--n", "20", "--c", "1", "--gamma", "1", "--draws", "1"]

#: (id, argv, substrings of the message: the parameter and, where it matters, the allowed range).
#: "{tmp}" is replaced by a fresh temporary folder, "{file}" by an existing file in it.
CLI_CASES = [
    # -- every numeric flag reads negative and exponent forms; the validator refuses them with the range
    ("wk2-negative-exponent", SOLVE + ["--wk2", "-1e-12"], ["invalid wk2=-1e-12", ">= 0"]),
    ("snr-negative-exponent-upper", SOLVE + ["--snr", "-1E+3"], ["invalid snr=-1000", ">= 0"]),
    ("snr-minus-inf", SOLVE + ["--snr", "-inf"], ["invalid snr=-inf", "finite"]),
    ("mu-wk-overflows-to-minus-inf", SOLVE + ["--mu-wk", "-1e400"], ["invalid mu_wk=-inf"]),
    ("wq2-nan", SOLVE + ["--wq2", "NaN"], ["invalid wq2="]),
    ("c-negative-exponent", ["solve", "--c", "-1e-3", "--gamma", "1"], ["invalid c=-0.001", "0 < c <= 10000"]),
    ("c-overflows-to-inf", ["solve", "--c", "1e400", "--gamma", "1"], ["invalid c=inf"]),
    ("c-second-value-bad", ["solve", "--c", "0.5", "-2", "--gamma", "1"], ["invalid c=-2.0"]),
    ("gamma-second-negative-exponent", ["solve", "--c", "1", "--gamma", "1", "-2.5e-3"], ["invalid gamma="]),
    ("gamma-underflows-to-zero", ["solve", "--c", "1", "--gamma", "1e-400"], ["invalid gamma=", "0 < gamma"]),
    ("gamma-too-large", ["solve", "--c", "1", "--gamma", "1e13"], ["invalid gamma=", "1e+12"]),
    ("simulate-c-negative", ["simulate", "--n", "20", "--c", "-0.5", "--gamma", "1"], ["invalid c=-0.5"]),
    ("c-hex", ["solve", "--c", "0x10", "--gamma", "1"], ["argument --c", "0x10"]),
    ("gamma-empty-string", ["solve", "--c", "1", "--gamma", ""], ["argument --gamma"]),
    ("c-comma-decimal", ["solve", "--c", "1,5", "--gamma", "1"], ["argument --c", "1,5"]),
    ("dps-negative", SOLVE + ["--dps", "-15"], ["invalid dps=-15", "15 <= dps <= 1000"]),
    # -- every int flag: a sane range, checked before anything is allocated
    ("solve-n-huge", SOLVE + ["--n", "99999999999999999999999"], ["invalid n=99999999999999999999999", "n <="]),
    ("solve-n-negative", SOLVE + ["--n", "-2"], ["invalid n=-2", "2 <= n"]),
    ("simulate-n-exponent-huge", ["simulate", "--n", "1e30", "--c", "1", "--gamma", "1"], ["invalid n=", "n <="]),
    ("simulate-n-5000-digits", ["simulate", "--n", "9" * 5000, "--c", "1", "--gamma", "1"], ["invalid n=", "n <="]),
    ("simulate-draws-huge", SIM[:-1] + ["1e12"], ["invalid draws=", "draws <="]),
    ("simulate-seed-2-64", SIM + ["--seed", str(2**64)], ["invalid seed=", "seed <="]),
    ("simulate-n-fraction", ["simulate", "--n", "2.5", "--c", "1", "--gamma", "1"], ["argument --n", "integer"]),
    ("hermite-kmax-huge", ["hermite", "tanh", "--kmax", "1e9"], ["invalid kmax=", "kmax <= 200"]),
    ("hermite-dps-huge", ["hermite", "tanh", "--dps", "1e6"], ["invalid dps=", "dps <= 1000"]),
    ("codegen-rank-huge", ["codegen", "tanh", "--rank", "99"], ["invalid rank=99", "rank <= 8"]),
    ("codegen-dps-small", ["codegen", "tanh", "--dps", "3"], ["invalid dps=3"]),
    ("verify-n-huge", ["verify", "--n", "1e9"], ["invalid n=", "n <="]),
    ("verify-draws-one", ["verify", "--draws", "1"], ["invalid draws=1"]),
    ("convergence-ns-zero", ["verify", "--convergence", "--ns", "0"], ["invalid ns=0", "<= ns <="]),
    ("convergence-ns-negative", ["verify", "--convergence", "--ns", "250", "-5"], ["invalid ns=-5"]),
    ("reproduce-seed-huge", ["reproduce", "--quick", "--seed", "1e40", "--only", "mu0"], ["invalid seed="]),
    # -- a repeated single-valued option is an error (a repeated list option is merged: test_cli)
    ("model-given-twice", SOLVE + ["--model", "linear", "--model", "attention"], ["--model", "more than once"]),
    ("simulate-n-given-twice", ["simulate", "--n", "10", "--n", "20", "--c", "1", "--gamma", "1"],
     ["--n", "more than once"]),
    ("activation-given-twice-two-spellings", SOLVE + ["-a", "tanh", "--activation", "relu"],
     ["--activation", "more than once"]),
    ("hermite-dps-given-twice", ["hermite", "tanh", "--dps", "20", "--dps", "30"], ["--dps", "more than once"]),
    ("diagonal-given-twice", SOLVE + ["--diagonal", "f", "--diagonal", "zero"], ["--diagonal", "more than once"]),
    # -- flags that contradict each other
    ("finite-p-with-linear", SOLVE + ["--n", "100", "--finite-p", "--model", "linear"], ["finite-p", "linear"]),
    ("finite-p-without-n", SOLVE + ["--finite-p"], ["invalid n=None"]),
    ("aligned-with-mu-wq", SOLVE + ["--aligned", "--snr", "1", "--mu-wq", "1"], ["invalid aligned=", "mu-wq"]),
    ("reproduce-device-with-numpy", ["reproduce", "--quick", "--device", "cuda", "--only", "mu0"],
     ["invalid device="]),
    # -- geometry
    ("geometry-barely-not-psd", SOLVE + ["--snr", "1", "--wk2", "1", "--mu-wk", "1.001"], ["invalid geometry="]),
    ("wk-wq-nan", SOLVE + ["--wk-wq", "nan"], ["invalid wk_wq="]),
    # -- activations that are not injections
    ("activation-empty", ["solve", "-a", "", "--c", "1", "--gamma", "1"], ["activation"]),
    ("activation-blank", ["hermite", "   "], ["activation"]),
    ("activation-dangling-operator", ["hermite", "x +"], ["activation"]),
    ("activation-second-symbol", ["hermite", "x+y"], ["activation", "y"]),
    ("activation-nan-constant", ["hermite", "x + nan"], ["activation"]),
    ("simulate-exp-diagonal-f", ["simulate", "-a", "exp", "--n", "20", "--c", "1", "--gamma", "1"],
     ["invalid diagonal="]),
    ("simulate-x200-overflows", ["simulate", "-a", "x**200", "--diagonal", "zero", "--n", "50", "--c", "1",
                                 "--gamma", "1"], ["x**200"]),
    # -- output paths, refused before any work
    ("demo-out-proc", ["demo", "--out", "/proc/x"], ["invalid out='/proc/x'"]),
    ("demo-out-existing-file", ["demo", "--out", "{file}"], ["invalid out=", "existing file"]),
    ("demo-out-nul-byte", ["demo", "--out", "{tmp}/a\0b"], ["invalid out="]),
    ("reproduce-out-proc", ["reproduce", "--quick", "--out", "/proc/x"], ["invalid out='/proc/x'"]),
    ("reproduce-out-existing-file", ["reproduce", "--quick", "--only", "mu0", "--out", "{file}"],
     ["invalid out=", "existing file"]),
    ("convergence-out-proc", ["verify", "--convergence", "--ns", "250", "--out", "/proc/x"], ["invalid out="]),
    ("codegen-output-in-proc", ["codegen", "tanh", "-o", "/proc/x/solver.py"], ["invalid output="]),
    ("codegen-output-is-a-folder", ["codegen", "tanh", "-o", "{tmp}"], ["invalid output="]),
    # -- the convergence study's own numbers and its CSV
    ("draws-scale-negative", ["verify", "--convergence", "--draws-scale", "-1", "--ns", "250", "--out", "{tmp}"],
     ["invalid draws-scale=-1", "0 < draws-scale"]),
    ("draws-scale-zero", ["verify", "--convergence", "--draws-scale", "0", "--ns", "250", "--out", "{tmp}"],
     ["invalid draws-scale=0"]),
    ("k-se-zero", ["verify", "--k-se", "0"], ["invalid k-se=0"]),
    ("verify-only-matches-nothing", ["verify", "--only", "no-such-check-xyz"], ["invalid only="]),
    ("convergence-unknown-setting", ["verify", "--convergence", "--settings", "nope", "--out", "{tmp}"],
     ["invalid settings="]),
    ("replot-csv-bad-number", ["verify", "--convergence", "--replot", "--out", "{csv:bad-number}"],
     ["invalid csv=", "line 2", "'n'"]),
    ("replot-csv-binary", ["verify", "--convergence", "--replot", "--out", "{csv:binary}"], ["invalid csv="]),
    ("replot-csv-wrong-columns", ["verify", "--convergence", "--replot", "--out", "{csv:columns}"],
     ["invalid csv=", "expected columns"]),
    ("replot-no-csv", ["verify", "--convergence", "--replot", "--out", "{tmp}"], ["invalid out="]),
    # -- usage
    ("unexpected-positional", SOLVE + ["--model", "linear", "extra"], ["unrecognized arguments: extra"]),
    ("unknown-top-level-option", ["--nonsense", "hermite", "tanh"], ["--nonsense"]),
    ("model-choice-case", SOLVE + ["--model", "Linear"], ["argument --model", "Linear"]),
]

_CSV = {
    "bad-number": "setting,n,p,draws\nbulk-tanh,abc,3,2\n",
    "binary": b"\x00\xff\xfe\x00 not a csv",
    "columns": "foo,bar\n1,2\n",
}


def _materialize(argv, tmp_path: Path) -> list[str]:
    out = []
    for a in argv:
        if a == "{file}":
            f = tmp_path / "a_file.txt"
            f.write_text("x")
            a = str(f)
        elif a.startswith("{csv:"):
            d = tmp_path / a[5:-1]
            d.mkdir()
            content = _CSV[a[5:-1]]
            (d / "convergence.csv").write_bytes(content if isinstance(content, bytes) else content.encode())
            a = str(d)
        out.append(a.replace("{tmp}", str(tmp_path)))
    return out


@pytest.mark.parametrize("argv,needles", [(a, n) for _, a, n in CLI_CASES], ids=[i for i, _, _ in CLI_CASES])
def test_cli_bad_input(capsys, tmp_path, argv, needles):
    t0 = time.perf_counter()
    code, out, err = run_cli(capsys, _materialize(argv, tmp_path))
    check_one_line_error(code, out, err, needles)
    assert time.perf_counter() - t0 < 60  # refused, not computed


def test_cli_refuses_output_folders_at_once(capsys):
    """`reproduce --quick --out /proc/x` used to fail only after 20 s of Monte Carlo."""
    for argv in (["reproduce", "--quick", "--out", "/proc/x"], ["demo", "--out", "/proc/x"]):
        t0 = time.perf_counter()
        code, out, err = run_cli(capsys, argv)
        check_one_line_error(code, out, err, "invalid out=")
        assert time.perf_counter() - t0 < 5


def test_reproduce_minilm_by_name_without_the_extra(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "safetensors", None)  # `import safetensors` raises ImportError
    code, out, err = run_cli(capsys, ["reproduce", "--quick", "--only", "minilm", "--out", tmp_path / "o"])
    check_one_line_error(code, out, err, ["invalid only='minilm'", "pip install 'symattn[real]'"], codes=(2,))
    assert not (tmp_path / "o").exists()  # refused before the output folder was even made


def test_distinct_cli_cases():
    assert len({i for i, _, _ in CLI_CASES}) == len(CLI_CASES)
    assert len({tuple(a) for _, a, _ in CLI_CASES}) == len(CLI_CASES)


def test_console_script_subprocess_bad_input(tmp_path):
    """The installed command, not only main(): one line, exit 2, nothing on stdout."""
    for argv, needle in ((SOLVE + ["--wk2", "-1e-12"], "invalid wk2="),
                         (["solve", "--c", "0.5", "--gamma", "1", "--n", "99999999999999999999999"], "invalid n=")):
        proc = subprocess.run(_console_script() + argv, capture_output=True, text=True, timeout=120, cwd=tmp_path)
        line = check_one_line_error(proc.returncode, proc.stdout, proc.stderr, needle, codes=(2,))
        assert proc.returncode == 2 and needle in line, line


# ============================================================================ exit 3: one line
def test_exit_3_is_one_line_with_the_warnings_folded_in(capsys, monkeypatch):
    """RuntimeWarnings of a failing solve go into the one-line message, not before it."""
    import symattn.theory as theory
    from symattn.errors import ConvergenceError

    def failing(*args, **kwargs):
        with np.errstate(all="warn"):
            np.exp(np.array([1e5]))  # RuntimeWarning: overflow
            np.sqrt(np.array([-1.0]))  # RuntimeWarning: invalid value
        raise ConvergenceError("no convergence", residuals=[0.1], iterations=200, point={"c": 0.5, "gamma": 1.0})

    monkeypatch.setattr(theory, "solve", failing)
    code, out, err = run_cli(capsys, SOLVE)
    check_one_line_error(code, out, err, ["no convergence", "200 iterations", "gamma=1", "overflow", "invalid value"],
                         codes=(3,))
    assert "RuntimeWarning" in err


# ============================================================================ Ctrl-C
def test_ctrl_c_at_any_moment_is_interrupted_130(tmp_path):
    """SIGINT at random moments, from the first imports to the computation: 'interrupted', 130.

    A signal that lands before the interpreter has started to run symattn's code (before Python
    installs its own handler, or inside the ``site`` import of the interpreter) is outside
    symattn's reach; those runs are counted but not judged. At least half must land in symattn.
    """
    if os.name == "nt":
        pytest.skip("SIGINT to a child process is POSIX")
    rng = random.Random(12)
    delays = sorted([rng.uniform(0.0, 0.25) for _ in range(8)] + [rng.uniform(0.25, 2.0) for _ in range(4)])
    argv = _console_script() + ["simulate", "--n", "300", "--c", "1", "--gamma", "1", "--draws", "100000",
                                "--no-progress"]  # runs for minutes: every signal lands before the end
    judged = 0
    for delay in delays:
        # SIGINT at its default in the child: a shell that runs this suite in the background ignores
        # it, the child would inherit that, and Python then installs no KeyboardInterrupt handler
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        frames = re.findall(r'File "([^"]+)"', err)
        if proc.returncode == -signal.SIGINT and not err or "init_import_site" in err or (
                "KeyboardInterrupt" in err and frames and not any(f.endswith(".py") and "symattn" in Path(f).parts[:-1] for f in frames)):
            continue  # before symattn's first line ran (only the console-script wrapper's frame, no symattn module)
        judged += 1
        assert (proc.returncode, err) == (130, "symattn: error: interrupted\n"), (delay, proc.returncode, err)
    assert judged >= len(delays) // 2


def test_interrupt_that_python_would_ignore_still_ends_the_run():
    """A Ctrl-C can land where Python prints "Exception ignored in" and carries on (a weakref callback of the
    import machinery: seen once in CI, the run then went on for minutes). The command line still ends with
    'interrupted' and 130."""
    script = ("import sys, weakref\n"
              "sys.argv = ['symattn', 'simulate']\n"
              "import symattn.cli\n"
              "class A: pass\n"
              "a = A()\n"
              "def cb(ref): raise KeyboardInterrupt\n"
              "r = weakref.ref(a, cb)\n"
              "del a\n"
              "print('still running')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout, proc.stderr) == (130, "", "symattn: error: interrupted\n")


# ============================================================================ injection payloads
#: strings that eval (so sympify and parse_expr) would execute; `x` is the variable
PAYLOADS = [
    "x+0*__import__('os').system('touch SENTINEL')",
    "().__class__.__bases__[0].__subclasses__()",
    "lambda: 1",
    "x.__class__",
    '"".join',
    "exec('1')",
    "exec(\"open('SENTINEL', 'w')\")",
    "x + 0*len(open('SENTINEL', 'w').name)",
    "getattr(x, '__class__')",
    "[x for x in (1, 2)][0]",
]
#: payloads whose evaluation would not end (must be refused quickly, so they run in a subprocess)
SLOW_PAYLOADS = ["9**9**9", "x + 0*9**9**9", "x**(9**9**9)"]


def _phi(payload: str) -> str:
    """The same payload in the variable of φ (``lam``)."""
    import re

    return re.sub(r"\bx\b", "lam", payload)


CLI_ENTRY = {
    "hermite": lambda a: ["hermite", a, "--kmax", "2", "--no-exact"],
    "solve": lambda a: ["solve", "-a", a, "--c", "0.5", "--gamma", "1"],
    "simulate": lambda a: ["simulate", "-a", a, "--n", "20", "--c", "1", "--gamma", "1", "--draws", "1"],
    "codegen": lambda a: ["codegen", a, "-o", "-"],
}
#: the API entry points, as calls (in process) and as source lines (in a subprocess)
API_ENTRY = {
    "activation": (lambda a: sa.activation(a), "sa.activation({a!r})"),
    "memorization_error": (lambda a: sa.memorization_error(a, 0.5, 1.0), "sa.memorization_error({a!r}, 0.5, 1.0)"),
    "bulk_trace": (lambda a: sa.bulk_trace("tanh", 0.5, 1.0, phi=_phi(a)),
                   "sa.bulk_trace('tanh', 0.5, 1.0, phi={phi!r})"),
}


@pytest.mark.parametrize("entry", list(CLI_ENTRY))
@pytest.mark.parametrize("payload", PAYLOADS)
def test_injection_cli(capsys, monkeypatch, tmp_path, entry, payload):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, CLI_ENTRY[entry](payload))
    assert not (tmp_path / SENTINEL).exists(), "the payload was executed"
    check_one_line_error(code, out, err, ["activation"], codes=(2,))


@pytest.mark.parametrize("entry", list(API_ENTRY))
@pytest.mark.parametrize("payload", PAYLOADS)
def test_injection_api(monkeypatch, tmp_path, entry, payload):
    monkeypatch.chdir(tmp_path)
    with pytest.raises((ParameterError, ActivationError)) as info:
        API_ENTRY[entry][0](payload)
    assert not (tmp_path / SENTINEL).exists(), "the payload was executed"
    assert "\n" not in str(info.value)


_SLOW_RUNNER = textwrap.dedent("""\
    import sys
    import symattn as sa
    from symattn.errors import ActivationError, ParameterError
    try:
        {call}
    except (ParameterError, ActivationError) as exc:
        print("refused:", exc)
        sys.exit(2)
    print("accepted")
    """)


#: (payload, entry): the first slow payload through every entry point, the others through two
#: (each case is a subprocess of a second or two)
SLOW_CASES = ([(SLOW_PAYLOADS[1], e) for e in list(CLI_ENTRY) + list(API_ENTRY)]
              + [(p, e) for p in (SLOW_PAYLOADS[0], SLOW_PAYLOADS[2]) for e in ("hermite", "activation")])


@pytest.mark.parametrize("payload,entry", SLOW_CASES)
def test_injection_that_would_hang_is_refused_quickly(tmp_path, entry, payload):
    if entry in CLI_ENTRY:
        cmd = _console_script() + CLI_ENTRY[entry](payload)
    else:
        call = API_ENTRY[entry][1].format(a=payload, phi=_phi(payload))
        cmd = [sys.executable, "-c", _SLOW_RUNNER.format(call=call)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=tmp_path)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{payload!r} through {entry} was not refused within 20 s")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert time.perf_counter() - t0 < 20
    if entry in CLI_ENTRY:
        check_one_line_error(proc.returncode, proc.stdout, proc.stderr, ["activation"], codes=(2,))
    else:
        assert proc.stdout.startswith("refused:") and "Traceback" not in proc.stderr


def test_long_expression_is_refused_quickly(capsys, monkeypatch, tmp_path):
    """A 200 kB activation string: refused (or handled) in bounded time with one line, never a traceback."""
    monkeypatch.chdir(tmp_path)
    payload = "(" * 50000 + "x" + ")" * 50000
    t0 = time.perf_counter()
    code, out, err = run_cli(capsys, ["hermite", payload, "--kmax", "1", "--no-exact"])
    check_one_line_error(code, out, err, ["activation"], codes=(2,))
    assert time.perf_counter() - t0 < 30


# ============================================================================ Python API
def _geometry_rank2():
    return sa.Geometry(snr=1.0, wk2=1.0)


#: (id, callable, substrings of the message)
API_CASES = [
    ("gamma-true", lambda: sa.memorization_error("tanh", 0.5, True), ["invalid gamma=True", "bool"]),
    ("c-true", lambda: sa.memorization_error("tanh", True, 1.0), ["invalid c=True"]),
    ("gamma-string", lambda: sa.memorization_error("tanh", 0.5, "1"), ["invalid gamma='1'"]),
    ("gamma-list-with-none", lambda: sa.memorization_error("tanh", 0.5, [0.1, None]), ["invalid gamma="]),
    ("c-bool-array", lambda: sa.memorization_error("tanh", np.array([True]), 1.0), ["invalid c="]),
    ("gamma-list-with-bool", lambda: sa.solve("tanh", 0.5, [1.0, False]), ["invalid gamma="]),
    ("c-empty", lambda: sa.memorization_error("tanh", [], 1.0), ["invalid c="]),
    ("gamma-too-large", lambda: sa.memorization_error("tanh", 0.5, 1e13), ["invalid gamma="]),
    ("geometry-unknown-key", lambda: sa.memorization_error("tanh", 0.5, 1.0, geometry={"snrr": 1}),
     ["snrr", "snr, wk2, wq2, mu_wk, mu_wq, wk_wq"]),
    ("geometry-non-string-key", lambda: sa.memorization_error("tanh", 0.5, 1.0, geometry={1: 2}),
     ["geometry key", "snr"]),
    ("geometry-string-value", lambda: sa.memorization_error("tanh", 0.5, 1.0, geometry={"snr": "1"}),
     ["invalid snr="]),
    ("geometry-a-list", lambda: sa.memorization_error("tanh", 0.5, 1.0, geometry=[1, 2]), ["invalid geometry="]),
    ("geometry-gram-even", lambda: sa.memorization_error("tanh", 0.5, 1.0, geometry={"gram": [[1, 0], [0, 1]]}),
     ["invalid gram="]),
    ("geometry-gram-and-snr", lambda: sa.memorization_error("tanh", 0.5, 1.0, geometry={"gram": [[1.0]], "snr": 1}),
     ["geometry key", "gram"]),
    ("geometry-snr-true", lambda: sa.Geometry(snr=True), ["invalid snr=True"]),
    ("geometry-snr-nan", lambda: sa.Geometry(snr=float("nan")), ["invalid snr="]),
    ("aligned-snr-negative", lambda: sa.Geometry.aligned(-1.0), ["invalid snr=-1"]),
    ("gram-not-symmetric", lambda: sa.Geometry.from_gram([[1.0, 0, 0], [0.5, 1, 0], [0, 0, 1]]),
     ["invalid geometry="]),
    ("simulate-n-2-blames-n", lambda: sa.simulate("tanh", n=2, c=0.5, gamma=1.0, geometry=_geometry_rank2(),
                                                   draws=1, progress=False), ["invalid n=2", "n >= 3"]),
    ("simulate-n-true", lambda: sa.simulate("tanh", n=True, c=0.5, gamma=1.0, progress=False), ["invalid n=True"]),
    ("simulate-n-huge", lambda: sa.simulate("tanh", n=10**30, c=0.5, gamma=1.0, progress=False), ["invalid n="]),
    ("simulate-draws-fraction", lambda: sa.simulate("tanh", n=20, c=0.5, gamma=1.0, draws=0.5, progress=False),
     ["invalid draws="]),
    ("simulate-seed-negative", lambda: sa.simulate("tanh", n=20, c=0.5, gamma=1.0, seed=-1, progress=False),
     ["invalid seed=-1"]),
    ("simulate-c-two-values", lambda: sa.simulate("tanh", n=20, c=[0.5, 1.0], gamma=1.0, progress=False),
     ["invalid c="]),
    ("theory-n-huge", lambda: sa.memorization_error("tanh", 0.5, 1.0, n=10**30), ["invalid n="]),
    ("theory-dps-true", lambda: sa.memorization_error("tanh", 0.5, 1.0, backend="mpmath", dps=True),
     ["invalid dps=True"]),
    ("theory-model-case", lambda: sa.memorization_error("tanh", 0.5, 1.0, model="Linear"), ["invalid model="]),
    ("theory-diagonal-zero-int", lambda: sa.memorization_error("tanh", 0.5, 1.0, diagonal=0), ["invalid diagonal="]),
    ("theory-backend-torch", lambda: sa.memorization_error("tanh", 0.5, 1.0, backend="torch"), ["backend"]),
    ("theory-correction-typo", lambda: sa.memorization_error("tanh", 0.5, 1.0, n=100, correction="finite_p"),
     ["correction"]),
    ("bulk-trace-kind", lambda: sa.bulk_trace("tanh", 0.5, 1.0, kind="X"), ["invalid kind="]),
    ("bulk-trace-phi-not-polynomial", lambda: sa.bulk_trace("tanh", 0.5, 1.0, phi="1/lam"), ["phi"]),
    ("signal-strength-n-1", lambda: sa.signal_strength(sa.Geometry(), n=1, c=1.0), ["invalid n=1"]),
]


@pytest.mark.parametrize("call,needles", [(c, n) for _, c, n in API_CASES], ids=[i for i, _, _ in API_CASES])
def test_api_bad_input(call, needles):
    with pytest.raises(SymattnError) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"


def test_enough_distinct_cases():
    """At least 60 distinct hostile or bad inputs (issue 12)."""
    cases = ({("cli", tuple(a)) for _, a, _ in CLI_CASES} | {("api", i) for i, _, _ in API_CASES}
             | {(e, p) for e in list(CLI_ENTRY) + list(API_ENTRY) for p in PAYLOADS} | {(e, p) for p, e in SLOW_CASES})
    assert len(cases) >= 60, len(cases)


# ============================================================================ JSON stays strict
def test_bad_input_never_prints_partial_json(capsys):
    """A refused --json command prints nothing on stdout (no half object to parse)."""
    code, out, err = run_cli(capsys, SOLVE + ["--wk2", "-1e-12", "--json"])
    check_one_line_error(code, out, err, "invalid wk2=", codes=(2,))
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)
