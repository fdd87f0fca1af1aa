"""Caches under one rule (issue 39, item 4; :mod:`symattn.caching`).

- every cache is a :class:`~symattn.caching.Memo`, declared once, and the registry lists exactly these;
- no module keeps a module-level dict (or thread-local) that it fills as a cache;
- the helper keys by content, evicts the least recently used entry and clears from the registry;
- one digest: :func:`~symattn.provenance.array_digest`, :attr:`symattn.Layer.digest` and the cache keys use
  :func:`symattn.caching.digest`, the sha256 of the bytes.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json

import numpy as np
import pytest

from test_private_imports import ROOT, package_modules

import symattn as sa
from symattn import caching

#: every cache of symattn: name → what it keeps (the test fails when one is added or removed without this list)
EXPECTED = {
    "activations.instances": "Activation objects built from a string or SymPy expression",
    "activations.shifted_moments": "F, F', V of the shifted Gaussian, per (f, s, σ, dps)",
    "finite_p.latent_kernels": "the latent kernels of the finite-p theory and their separable expansion",
    "general_w.array_keys": "the content keys of the arrays of one general-W evaluation, by identity",
    "general_w.block_constants": "the Hermite-block constants per (f, W, ...)",
    "general_w.eigen": "eigendecompositions of symmetric W",
    "general_w.gauss_hermite_mp": "Gauss–Hermite rules at dps digits",
    "general_w.grams": "(W, Wᵀ, WᵀW, WWᵀ) per W and dtype",
    "general_w.low_rank_traces": "the low-rank trace operators of W",
    "general_w.strong_corrections": "strong-direction corrections ΔE",
    "general_w.token_nodes": "the token draws of the Hermite-block diagonal",
    "general_w.variance_base_rules": "Gauss rules of the conditional variance s",
    "general_w.variance_rules": "the same with the tilt weights",
    "general_w.workspace": "scratch p×p buffers per (p, dtype, thread)",
    "general_w_entry.ranks": "(rank, effective rank) of W",
    "verification.finite_p_measured": "the finite-p checks' Monte Carlo runs in this process",
    "verification.points": "theory points shared by the limiting-case checks in this process",
}

#: module-level dicts that are registries, not caches: (module, name) → why
REGISTRIES = {
    ("symattn.caching", "_REGISTRY"): "the registry of the caches",
    ("symattn.verification.checks", "REGISTRY"): "the checks, registered by decorator at import",
}


def _import_all():
    for name in package_modules():
        if not name.endswith("__main__"):
            importlib.import_module(name)


def test_the_registry_lists_every_cache():
    _import_all()
    names = {n for n in caching.registry() if not n.startswith(("doc.", "test."))}
    assert names == set(EXPECTED), (sorted(names - set(EXPECTED)), sorted(set(EXPECTED) - names))


def _filled_module_dicts(path, module):
    """Module-level names bound to an empty dict (``{}``, ``dict()``, ``OrderedDict()``, ``defaultdict(...)``) or a
    ``threading.local()`` that some function fills or empties (item assignment, ``clear``, ``setdefault``,
    ``pop``, ``update``, an attribute set on a thread-local)."""
    tree = ast.parse(path.read_text())
    empty = set()
    for node in tree.body:
        targets, value = ([node.target], node.value) if isinstance(node, ast.AnnAssign) else (
            (node.targets, node.value) if isinstance(node, ast.Assign) else ([], None))
        if value is None:
            continue
        is_empty = (isinstance(value, ast.Dict) and not value.keys) or (
            isinstance(value, ast.Call) and isinstance(value.func, (ast.Name, ast.Attribute))
            and (value.func.id if isinstance(value.func, ast.Name) else value.func.attr)
            in ("dict", "OrderedDict", "defaultdict", "local") and not value.args[1:])
        empty |= {t.id for t in targets if isinstance(t, ast.Name) and is_empty}
    filled = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id in empty:
                filled.add(node.value.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in empty and (
                    node.attr in ("clear", "setdefault", "pop", "popitem", "update") or isinstance(node.ctx, ast.Store)):
                filled.add(node.value.id)
    return {(module, n) for n in filled}


def test_no_module_level_dict_caches():
    found = set()
    for module, path in package_modules().items():
        found |= _filled_module_dicts(path, module)
    assert found == set(REGISTRIES), sorted(found - set(REGISTRIES))


def test_the_dict_check_can_fail(tmp_path):
    f = tmp_path / "probe.py"
    f.write_text("import threading\n_C: dict = {}\n_T = threading.local()\nKEEP = {}\n"
                 "def g(k):\n    if len(_C) > 8:\n        _C.clear()\n    _C[k] = 1\n    _T.cache = {}\n    return KEEP.get(k)\n")
    assert _filled_module_dicts(f, "probe") == {("probe", "_C"), ("probe", "_T")}


def test_memo_keys_by_content_and_evicts_the_least_recently_used():
    memo = caching.Memo("test.lru", 2)
    calls = []

    def get(a):
        return memo.get((a,), lambda: calls.append(a.sum()) or float(a.sum()))

    a, b, c = np.zeros(3), np.ones(3), np.full(3, 2.0)
    get(a), get(b), get(a.copy())          # a equal copy is a hit
    assert len(calls) == 2
    get(c)                                  # evicts b, the least recently used
    get(a)
    assert len(calls) == 3
    get(b)
    assert len(calls) == 4
    a2 = a.copy()
    a2[0] = 1.0                             # changed content: a new key
    get(a2)
    assert len(calls) == 5 and memo.info().currsize == 2
    caching.clear_all()
    assert memo.info().currsize == 0


def test_memo_drops_the_arguments_of_an_entry():
    """An entry keeps its value, not the arrays it was computed from."""
    import gc
    import weakref

    memo = caching.Memo("test.refs", 4)

    class Big(np.ndarray):
        pass

    def fill(x):   # the closure of make holds x for as long as make lives
        return memo.get((x,), lambda: float(x.sum()))

    a = np.arange(4.0).view(Big)
    ref = weakref.ref(a)
    assert fill(a) == 6.0
    del a
    gc.collect()
    assert ref() is None
    memo.clear()


def test_one_digest():
    """array_digest, Layer.digest and the cache keys are caching.digest: the sha256 of the bytes, computed here
    with hashlib directly."""
    from symattn.provenance import array_digest

    W = np.random.default_rng(0).standard_normal((5, 5))
    sha = hashlib.sha256(W.tobytes()).hexdigest()
    assert caching.digest(W) == sha and array_digest(W)["sha256"] == sha
    assert caching.content_key(W) == (("array", (5, 5), "<f8", sha),)
    layer = sa.Layer("tanh", weights=W)
    blob = {"activation": "tanh", "readout": layer.readout, "residual": layer.residual, "kernel": layer.kernel,
            "temperature": layer.temperature, "diagonal": layer.diagonal, "weights": array_digest(W), "heads": None}
    assert layer.digest == hashlib.sha256(json.dumps(blob, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def test_no_other_hash_of_content():
    """hashlib is called in symattn.caching only (sweep.spec derives seeds from sha256 bytes: not a digest)."""
    bad = []
    for module, path in package_modules().items():
        if module in ("symattn.caching", "symattn.sweep.spec"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "hashlib":
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: hashlib.{node.attr}")
    assert not bad, bad


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("clear", [False, True])
def test_values_do_not_depend_on_the_caches(clear):
    """A general-W value computed from cold caches equals the cached one (the caches change speed, not values)."""
    W = np.random.default_rng(1).standard_normal((24, 24)) / np.sqrt(24)
    first = sa.memorization_error("tanh", 0.5, [0.1, 1.0], weights=W, mu=np.full(24, 0.2))
    if clear:
        caching.clear_all()
    again = sa.memorization_error("tanh", 0.5, [0.1, 1.0], weights=W, mu=np.full(24, 0.2))
    np.testing.assert_array_equal(first, again)
