"""derivations/ (a repository tool, not installed): the systems built step by step in SymPy are the
ones symattn solves, and docs/derivation.md is the builder's current output.

The builder is run as a script, ``python -m derivations.build``, from the repository root (tests do
not import ``derivations``). Its own controls (a wrong W, a wrong trace word) show that its
comparisons can fail.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
