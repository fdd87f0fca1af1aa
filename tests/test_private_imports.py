"""No module of symattn uses another module's private names (issue 39, item 5).

A name that two modules share is public in the lower one, with a docstring. This test reads the
AST of every module of the package (``symattn/`` and the top-level ``verification/``, installed as
``symattn.verification``) and fails on

- ``from X import _name`` where X is another symattn module (relative imports resolved), and
- ``X._name`` where X is bound to another symattn module (``import symattn.x as X``,
  ``from symattn import x``, ``from . import x``), along a chain of submodules as well.

Dunder names (``__version__``) are not private. A private *module* (``cases/_common.py``) may be
imported by the modules of its own package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

def package_modules() -> dict[str, Path]:
    """Module name → file, for every module of the installed package ``symattn`` in this checkout."""
    out = {}
    for top, name in ((ROOT / "symattn", "symattn"), (ROOT / "verification", "symattn.verification")):
        for f in sorted(top.rglob("*.py")):
            parts = list(f.relative_to(top).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name] + parts)] = f
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute module of ``from <level dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def violations(module: str, path: Path, modules: dict) -> list[str]:
    """The private names ``module`` takes from other symattn modules, as 'file:line: what'."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    bound = {}      # local name → the symattn module it is bound to
    bad = []

    def other(mod):
        return mod in modules and mod != module

    def own_private_module(mod):
        """A private module of the importer's own package (``from . import _common``)."""
        parent = module if is_package else module.rpartition(".")[0]
        return mod.rpartition(".")[0] == parent

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in modules:
                    bound[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            src = _resolve(module, is_package, node.level, node.module)
            if not src.startswith("symattn"):
                continue
            for a in node.names:
                sub = f"{src}.{a.name}"
                if sub in modules:   # a submodule
                    bound[a.asname or a.name] = sub
                    if _private(a.name) and not own_private_module(sub):
                        bad.append(f"{rel}:{node.lineno}: from {src} import {a.name} (a private module)")
                elif _private(a.name) and other(src):
                    bad.append(f"{rel}:{node.lineno}: from {src} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, cur = [], node.value
            while isinstance(cur, ast.Attribute):
                chain.append(cur.attr)
                cur = cur.value
            if isinstance(cur, ast.Name) and cur.id in bound:
                mod = ".".join([bound[cur.id]] + chain[::-1])
                if other(mod):
                    bad.append(f"{rel}:{node.lineno}: {mod}.{node.attr}")
    return bad


def all_violations() -> list[str]:
    modules = package_modules()
    out = []
    for name, path in modules.items():
        out += violations(name, path, modules)
    return out


def test_no_private_names_across_modules():
    bad = all_violations()
    assert not bad, f"{len(bad)} private names used across modules:\n" + "\n".join(bad)


@pytest.mark.parametrize("source, expected", [
    ("from .solver import _points\n", "from symattn.backends.solver import _points"),
    ("from symattn.backends import solver\nsolver._points(1)\n", "symattn.backends.solver._points"),
    ("import symattn as sa\nsa.backends.solver._points\n", "symattn.backends.solver._points"),
    ("from .. import validation as v\nv._as_float_array\n", "symattn.validation._as_float_array"),
])
def test_the_check_can_fail(tmp_path, source, expected):
    """A module that takes a private name from another one is reported (and its own names are not)."""
    modules = package_modules()
    f = tmp_path / "probe.py"
    f.write_text(source + "def _own():\n    pass\n_own()\n")
    bad = violations("symattn.backends.probe", f, {**modules, "symattn.backends.probe": f})
    assert len(bad) == 1 and bad[0].endswith(expected), bad
