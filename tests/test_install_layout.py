"""The specified top level (issue 39, item 7): verification/ sits at the repository root and is installed as
symattn.verification (setuptools ``package-dir`` in pyproject.toml); nothing named ``verification`` is installed
at the top level; a regular and an editable install both import it and run ``symattn verify``.

Each install goes into a fresh virtual environment under a temporary folder, created with
``--system-site-packages`` and given this interpreter's site-packages as plain path entries (so it has the
dependencies, the build backend included; a plain entry does not run that environment's ``.pth`` files, so
an editable symattn installed there stays out), and installed with ``pip install --no-deps
--no-build-isolation``: no network.
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: a fast check of the verify table (float64 against the partial-fraction reference)
QUICK_CHECK = "linear-f/signal/float64-vs-partial-fractions"


def _venv(folder: Path) -> Path:
    """A virtual environment in ``folder`` that sees this interpreter's packages; its python."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(folder)],
                   check=True, capture_output=True, timeout=120)
    python = folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    (Path(purelib) / "_parent_environment.pth").write_text("\n".join(sorted(ours)) + "\n")
    return python


def _install(kind: str, folder: Path) -> tuple[Path, float]:
    import time

    python = _venv(folder)
    if kind == "editable":
        args = ["-e", str(ROOT)]
    else:   # from a clean copy: an in-tree build would leave build/ in the checkout, whose stale files a later
        import shutil   # wheel would take along

        src = folder / "src"
        for name in ("symattn", "verification"):
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md"):
            shutil.copy(ROOT / name, src / name)
        args = [str(src)]
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", *args],
                          capture_output=True, text=True, timeout=600, cwd=folder)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return python, time.perf_counter() - start


@pytest.fixture(scope="module", params=["regular", "editable"])
def installed(request, tmp_path_factory):
    """(kind, python of a fresh environment with symattn installed that way)."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("the installs build without isolation: they need setuptools in this environment")
    from importlib.metadata import version

    if tuple(int(x) for x in version("pip").split(".")[:2]) < (22, 3):
        pytest.skip("pip install --python needs pip >= 22.3")
    folder = tmp_path_factory.mktemp(f"venv-{request.param}")
    python, seconds = _install(request.param, folder)
    print(f"pip install ({request.param}): {seconds:.1f} s")
    return request.param, python, folder


def _clean_env() -> dict:
    """This environment without PYTHONPATH and PYTHONHOME: the installed environment alone decides what imports."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(python, code, cwd):
    """``code`` in the installed environment, outside the checkout, without this test's PYTHONPATH."""
    env = _clean_env()
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


LAYOUT = """
import importlib.util, json, sys
import symattn, symattn.verification, symattn.verification.cases._common as common
from symattn.verification import all_checks
print(json.dumps({"symattn": symattn.__file__, "verification": symattn.verification.__file__,
                  "cases": common.__file__, "checks": len(all_checks()),
                  "top_level": importlib.util.find_spec("verification") is not None}))
"""


def test_symattn_verification_is_installed_from_the_top_level_folder(installed):
    kind, python, folder = installed
    got = json.loads(_run(python, LAYOUT, folder))
    assert not got["top_level"], "an importable top-level 'verification'"
    assert got["checks"] > 50
    if kind == "editable":   # the checkout's own files
        assert Path(got["symattn"]) == ROOT / "symattn" / "__init__.py"
        assert Path(got["verification"]) == ROOT / "verification" / "__init__.py"
        assert Path(got["cases"]) == ROOT / "verification" / "cases" / "_common.py"
    else:                    # copies inside the environment: symattn/verification, nothing at its top level
        pkg = Path(got["symattn"]).parent
        assert folder in pkg.parents and Path(got["verification"]) == pkg / "verification" / "__init__.py"
        assert Path(got["cases"]) == pkg / "verification" / "cases" / "_common.py"
        assert not (pkg.parent / "verification").exists()
        assert (pkg / "data" / "atlas.csv").is_file()


def test_the_editable_finder_maps_symattn_verification(installed):
    """setuptools' own editable finder maps symattn.verification to verification/ (what symattn's source-tree
    entry on sys.meta_path would otherwise do)."""
    kind, python, folder = installed
    if kind != "editable":
        pytest.skip("the editable install only")
    code = ("import sys, importlib.util\n"
            "finders = [f for f in sys.meta_path if 'editable' in getattr(f, '__module__', '')]\n"
            "spec = finders[0].find_spec('symattn.verification') if finders else None\n"
            "print(spec.origin if spec else 'none')")
    assert Path(_run(python, code, folder).strip()) == ROOT / "verification" / "__init__.py"


def test_verify_runs_from_the_install(installed):
    """``symattn verify --quick --only <one check>`` and ``python -m symattn.verification --list``."""
    kind, python, folder = installed
    script = python.parent / ("symattn.exe" if os.name == "nt" else "symattn")
    env = _clean_env()
    proc = subprocess.run([str(script), "verify", "--quick", "--json", "--only", QUICK_CHECK], capture_output=True,
                          text=True, timeout=600, cwd=folder, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["name"] for r in json.loads(proc.stdout)["checks"]] == [QUICK_CHECK]
    proc = subprocess.run([str(python), "-m", "symattn.verification", "--list"], capture_output=True, text=True,
                          timeout=300, cwd=folder, env=env)
    assert proc.returncode == 0 and QUICK_CHECK in proc.stdout, proc.stderr[-3000:]


@pytest.mark.slow
def test_verify_quick_passes_from_the_install(installed):
    """The whole ``symattn verify --quick`` (about 100 s on 2 busy cores) from each install."""
    kind, python, folder = installed
    script = python.parent / ("symattn.exe" if os.name == "nt" else "symattn")
    env = _clean_env()
    proc = subprocess.run([str(script), "verify", "--quick"], capture_output=True, text=True, timeout=900,
                          cwd=folder, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_the_package_list_matches_the_folders():
    """pyproject's explicit package list is every package folder of symattn/ (namespace folders included, as the
    discovery it replaces found them) plus verification/ and its subpackages as symattn.verification."""
    from setuptools import find_namespace_packages, find_packages

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = set(find_namespace_packages(where=str(ROOT), include=["symattn*"]))
    found |= {"symattn.verification"} | {"symattn.verification." + p for p in find_packages(str(ROOT / "verification"))}
    found = {p for p in found if "__pycache__" not in p}
    assert set(cfg["packages"]) == found, (sorted(found - set(cfg["packages"])), sorted(set(cfg["packages"]) - found))
    assert cfg["package-dir"] == {"symattn.verification": "verification"}
    assert not (ROOT / "symattn" / "verification").exists()


def test_only_cli_and_atlas_import_symattn_verification():
    """import-linter reads verification/ as its own package, so the imports of symattn.verification from symattn are
    checked here: only the layers above it (cli, atlas) may."""
    import ast

    from test_private_imports import _resolve, package_modules

    bad = []
    for module, f in package_modules().items():
        if module.split(".")[1:2] in (["cli"], ["atlas"], ["verification"]):
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, f.name == "__init__.py", node.level, node.module)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            bad += [f"{module}: {n}" for n in names if n == "symattn.verification" or n.startswith("symattn.verification.")]
    assert not bad, bad


def test_a_checkout_without_install_finds_verification(tmp_path):
    """The repository root on PYTHONPATH (no install): symattn.verification is the checkout's verification/, also
    when symattn/verification is left with the __pycache__ of the layout before the move."""
    import shutil

    for name in ("symattn", "verification"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "symattn" / "verification" / "__pycache__").mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    code = "import symattn.verification as v, symattn.verification.registry as r; print(v.__file__); print(r.__file__)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [Path(x) for x in proc.stdout.split()] == [tmp_path / "verification" / "__init__.py",
                                                      tmp_path / "verification" / "registry.py"]
