"""The architecture contract of docs/architecture.md, checked on the source tree.

- the layer order and the absence of import cycles (import-linter contracts in pyproject.toml);
- the repository contains every document its files cite;
- the distribution installs no top-level import name but ``symattn``;
- tests do not import ``derivations`` (a repository tool, not installed).
"""

import ast
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tracked_files():
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file but the venv
        return [p for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts and ".git" not in p.parts]
    return [ROOT / f for f in out if (ROOT / f).is_file()]


def _lint(root: Path) -> subprocess.CompletedProcess:
    """import-linter on the package under ``root`` (a fresh process, no cache), with pyproject's contracts."""
    import os
    import sys

    code = ("import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_import_layers_and_no_cycles():
    """import-linter: each layer imports only the layers below it; no cycle between siblings."""
    pytest.importorskip("importlinter")
    proc = _lint(ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "4 kept, 0 broken" in proc.stdout


def _copy_package(tmp_path):
    """symattn/, the top-level verification/ (symattn.verification) and pyproject.toml, into tmp_path."""
    import shutil

    for folder in ("symattn", "verification"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")


@pytest.mark.parametrize("module, upward", [("symattn/model.py", "from .cli import main"),
                                            ("symattn/systems/bulk.py", "from ..backends import solver"),
                                            ("symattn/backends/solver.py", "from .. import theory"),
                                            ("verification/checks.py", "from symattn.cli import main")])
def test_layer_contract_fails_on_an_upward_import(tmp_path, module, upward):
    """The contract can fail: a copy of the package with one upward import breaks it."""
    pytest.importorskip("importlinter")

    _copy_package(tmp_path)
    with open(tmp_path / module, "a") as fh:
        fh.write(f"\n\ndef _upward():\n    {upward}\n")
    proc = _lint(tmp_path)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout, proc.stdout[-2000:]


def test_cycle_contract_fails_on_a_cycle(tmp_path):
    """A cycle between two sibling modules of one layer (theory <-> montecarlo) breaks the second contract."""
    pytest.importorskip("importlinter")

    _copy_package(tmp_path)
    for mod, other in (("theory.py", "montecarlo"), ("montecarlo.py", "theory")):
        with open(tmp_path / "symattn" / mod, "a") as fh:
            fh.write(f"\n\ndef _cycle():\n    from . import {other}\n")
    proc = _lint(tmp_path)
    assert proc.returncode != 0 and "No cycles are allowed" in proc.stdout, proc.stdout[-2000:]


#: a document reference: a path under docs/, or an upper-case top-level name such as README.md
CITATION = re.compile(r"(?<![\w/.-])(docs/(?:[\w-]+/)*[\w.-]+\.md|[A-Z][A-Z_-]+\.md)\b")
#: the working notes that stayed outside the repository, by their stems (spelled in pieces, so that
#: this test does not itself cite them): the maths, its finite-p part, the design, the general-W notes
_OUTSIDE = ("MATH", "MATH" + "-FINITE-P", "DES" + "IGN", "NOTES" + "-GENERAL-W")
MISSING_DOCS = re.compile(r"\b(" + "|".join(re.escape(s) + r"(?:\.md)?" if "-" in s else re.escape(s) + r"\.md"
                                              for s in _OUTSIDE) + r")\b|\bMATH (§|Table|preface)")


def test_every_cited_document_is_in_the_repository():
    """No file cites a document that a clone lacks (docs/theory.md replaces the shared notes)."""
    bad = []
    for f in _tracked_files():
        if f.suffix not in {".py", ".md", ".toml", ".txt", ".cfg", ".rst"} and f.name != "run":
            continue
        if f == Path(__file__).resolve():  # this file names the forbidden documents
            continue
        text = f.read_text(errors="ignore")
        for m in MISSING_DOCS.finditer(text):
            bad.append(f"{f.relative_to(ROOT)}: cites {m.group(0)!r}")
        for m in CITATION.finditer(text):
            ref = m.group(1)
            if not ((ROOT / ref).exists() or (f.parent / ref).exists() or (ROOT / "docs" / ref).exists()):
                bad.append(f"{f.relative_to(ROOT)}: cites missing {ref}")
    assert not bad, "\n".join(sorted(set(bad))[:40])


def test_only_symattn_is_installed():
    """The packages pyproject.toml installs are symattn and its subpackages only: symattn.verification comes from
    the top-level verification/ (package-dir); tests/test_install_layout.py checks the list against the folders."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {p.split(".")[0] for p in cfg["packages"]} == {"symattn"}, cfg["packages"]
    assert "symattn.verification" in cfg["packages"] and cfg["package-dir"] == {"symattn.verification": "verification"}


def test_tests_do_not_import_derivations():
    bad = []
    for f in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{f.name}: {n}" for n in names if n.split(".")[0] == "derivations"]
    assert not bad, bad


def test_every_cited_theory_section_exists():
    """Each ``docs/theory.md §n`` (or §n.m) cited anywhere is a heading of docs/theory.md."""
    headings = set(re.findall(r"^#{2,3} §(\d+(?:\.\d+)?)", (ROOT / "docs" / "theory.md").read_text(), re.M))
    assert {"1", "5", "6", "10", "10.3"} <= headings
    bad = []
    for f in _tracked_files():
        if f.suffix not in {".py", ".md"}:
            continue
        for m in re.finditer(r"theory\.md §(\d+(?:\.\d+)?)", f.read_text(errors="ignore")):
            if m.group(1).rstrip(".") not in headings:
                bad.append(f"{f.relative_to(ROOT)}: §{m.group(1)}")
    assert not bad, sorted(set(bad))
