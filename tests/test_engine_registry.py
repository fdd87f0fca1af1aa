"""The method registry of the backends (symattn/backends/registry.py) and its one result type (EngineResult).

Every registered method runs on its declared small case and returns an EngineResult with the declared fields;
where it declares F'(γ), that derivative matches a central difference of its own F (an independent check of
E = −γ² F'); the registry lists every engine function of symattn/backends; the layer's engines and
symattn.solve pick their engine and method from the registries (no name branches), and a combination no
engine covers raises ParameterError naming the engine.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

import symattn as sa
from symattn.backends import registry
from symattn.backends.fixedpoint import FixedPointResult
from symattn.backends.result import FIELDS, EngineResult
from symattn.errors import ParameterError
from symattn.layer import THEORY_ENGINES

BACKENDS = Path(sa.__file__).parent / "backends"

#: public functions of symattn/backends named like an engine that are stages of a registered engine, not engines
STAGES = {
    "attention_error": "the quadrature stage of closed_runtime.attention_points (method 'quadrature')",
    "model_error": "general_w_error's stage: E of an assembled general-W model",
    "block_model_error": "hermite_block_error's stage: E of an assembled block model",
    "physical_points": "the physical checks and γ-ladder of the general-W stages",
    "general_memorization_error": "the front of the 'general-w' and 'hermite-blocks' layer engines",
}


def _engine_functions() -> set:
    """Public module-level functions of symattn/backends named ``*_error`` or ``*_points``."""
    found = set()
    for path in BACKENDS.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and \
                    node.name.endswith(("_error", "_points")):
                found.add(node.name)
    return found


def _adapted() -> set:
    """The names the registry's adapters import from the engines' modules."""
    tree = ast.parse((BACKENDS / "registry.py").read_text())
    return {a.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1
            for a in node.names}


@pytest.mark.parametrize("name", registry.methods())
def test_every_method_returns_an_engine_result_with_the_declared_fields(name):
    m = registry.get(name)
    assert m.example is not None, f"{name} declares no small case"
    ctx, c, gamma, inputs = m.example()
    r = registry.call(name, ctx, c, gamma, **inputs)
    assert isinstance(r, EngineResult) and set(FIELDS) <= set(r) and r.method == name
    E = np.asarray(r.values, dtype=float)
    P = np.broadcast(np.asarray(c), np.asarray(gamma)).size
    assert E.shape == (P,) and np.all((E > 0) & (E < 1)), E          # a ridge training error with ±1 labels
    assert (r.derivative is not None) == m.derivative
    assert (r.precision is not None) == m.precision
    if r.residuals is not None:
        assert np.all(np.asarray(r.residuals, dtype=float) < 1e-6)
    if r.fallbacks is not None:
        assert len(r.fallbacks) == P and all(f is None or f in registry.methods() for f in r.fallbacks)


@pytest.mark.parametrize("name", [n for n in registry.methods() if registry.get(n).derivative])
def test_declared_derivative_is_the_slope_of_F(name):
    """F'(γ) of the result against the central difference (F(γ(1 + h)) − F(γ(1 − h)))/(2γh) of the method's own F."""
    m = registry.get(name)
    ctx, c, gamma, inputs = m.example()
    g = np.asarray(gamma, dtype=float)
    h = 1e-4
    r = registry.call(name, ctx, c, g, **inputs)
    up, down = (registry.call(name, ctx, c, g * (1 + s * h), **inputs).F for s in (1, -1))
    slope = (np.asarray(up, dtype=float) - np.asarray(down, dtype=float)) / (2 * g * h)
    np.testing.assert_allclose(np.asarray(r.derivative, dtype=float), slope, rtol=1e-6)


def test_methods_lists_every_engine_of_the_backends():
    engines = _engine_functions()
    assert len(engines) >= 10                                  # the scan finds the engines at all
    assert set(STAGES) <= engines, set(STAGES) - engines       # every excluded name still exists
    missing = engines - set(STAGES) - _adapted()
    assert not missing, f"engines of symattn/backends without a registered method: {sorted(missing)}"


def test_registry_lookups_and_their_errors():
    with pytest.raises(ParameterError) as err:
        registry.get("newton")
    assert err.value.name == "method" and "'closed'" in str(err.value)
    with pytest.raises(ValueError, match="registered already"):
        registry.register("closed", registry.get("closed").run, summary="again")
    with pytest.raises(TypeError, match="needs the inputs"):
        registry.call("linear", None, [0.5], [1.0])
    assert registry.methods(engine="paper", model="attention", correction="finite-p") == ("finite-p",)
    with pytest.raises(ParameterError) as err:
        registry.METHODS.require("finite-p", error="test")
    assert err.value.name == "error" and "'finite-p' method" in str(err.value)


def test_engine_result_is_a_dict_with_attributes():
    r = EngineResult(np.array([0.5]), "closed", iterations=3, F=np.array([1.0]))
    assert r.values is r["values"] and r.F is r["F"] and len(dict.values(r)) == len(FIELDS) + 1
    r.extra = 1
    assert r["extra"] == 1 and "extra" in r.extras() and "method" not in r.extras()
    with pytest.raises(AttributeError):
        r.missing
    for back in (pickle.loads(pickle.dumps(r)), copy.deepcopy(r)):
        assert type(back) is EngineResult and back.method == "closed" and back.values[0] == 0.5
    assert repr(r).splitlines()[0].strip() == "values: array([0.5])"


def test_fixed_point_result_is_an_engine_result():
    r = FixedPointResult(x=np.ones(2), residual=1e-15, iterations=4, restarts=0, strategy="anderson")
    assert isinstance(r, EngineResult) and r.x is r.values and r.residual == r.residuals
    assert r.strategy == r.method == "anderson" and r.converged and r.history == []


def test_every_layer_engine_is_served_by_registered_methods():
    for m in registry.methods():
        engine = registry.get(m).engine
        assert engine is None or engine in THEORY_ENGINES, (m, engine)
    for name, eng in THEORY_ENGINES.items():
        assert name == eng.name and set(eng.methods) <= set(registry.methods())
    assert THEORY_ENGINES["paper"].methods == ("closed", "quadrature", "finite-p", "linear")


FORMS = ("plain", "residual", "weights", "weights+residual", "heads:sum", "heads:concat")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kernel", ("entrywise", "softmax"))
def test_each_layer_has_one_engine_or_a_parameter_error(form, kernel):
    """Every (form, kernel, structure) selects exactly one engine, or raises ParameterError naming the engines
    closest to it (never two engines, never a bare lookup error)."""
    for structure in ("free", "blocks"):
        try:
            eng = THEORY_ENGINES.first(form=form, kernel=kernel, structure=structure)
        except ParameterError as err:
            assert kernel == "softmax" and form not in ("plain", "residual"), err
            assert err.name == "kernel" and "engine" in str(err)
            continue
        assert form in eng.covers["form"] and kernel in eng.covers["kernel"]


def test_unsupported_combinations_name_the_engine():
    W = np.eye(6)
    with pytest.raises(ParameterError) as err:
        sa.Layer(None, weights=W, kernel="softmax", diagonal="zero").engine()
    assert err.value.name == "kernel" and "'general-w'" in str(err.value)
    with pytest.raises(ParameterError) as err:
        sa.Layer("tanh", residual=True).theory(0.5, 1.0, error="test")
    assert err.value.name == "error" and "'residual' engine" in str(err.value)
    with pytest.raises(ParameterError) as err:
        sa.Layer("tanh").theory(0.5, 1.0, error="test", correction="finite-p", n=200)
    assert err.value.name == "error" and "'finite-p' method" in str(err.value)
    with pytest.raises(ParameterError) as err:
        sa.solve("tanh", 0.5, 1.0, method="newton")
    assert err.value.name == "method" and err.value.allowed == "'closed' or 'quadrature'"


def test_solve_runs_the_registered_method(monkeypatch):
    """symattn.solve dispatches through the registry: a method replaced there is the one that runs."""
    seen = []
    for name in ("closed", "quadrature"):
        m = registry.get(name)

        def spy(ctx, c, gamma, _run=m.run, _name=name, **kw):
            seen.append(_name)
            return _run(ctx, c, gamma, **kw)
        monkeypatch.setitem(registry.METHODS, name, dataclasses.replace(m, run=spy))
    a = sa.solve("tanh", 0.5, [0.1, 1.0])
    b = sa.solve("tanh", 0.5, [0.1, 1.0], method="quadrature")
    assert seen == ["closed", "quadrature"]
    np.testing.assert_allclose(np.asarray(a.E, float), np.asarray(b.E, float), rtol=1e-8)


def test_closed_form_fallbacks_are_the_quadrature_points():
    """f = x·exp(−x²/4) at c = 2 on γ ∈ [5.6e-4, 3.2e-3] (the points of issue 39 where the closed form does not
    apply): the closed method's fallbacks name 'quadrature' exactly where solve reports the point not closed, and
    there its values are the quadrature method's."""
    from symattn.backends.context import FloatContext
    from symattn.model import kernel_constants

    f = sa.activation("x*exp(-x**2/4)")
    k = kernel_constants(f)
    g = np.logspace(np.log10(5.6e-4), np.log10(3.2e-3), 13)
    case = dict(a1=k.a1, s2=k.s2, d=k.d, gram=np.zeros((3, 3)), rank=1)
    r = registry.call("closed", FloatContext(), np.full(g.size, 2.0), g, **case)
    fell = np.array([x == "quadrature" for x in r.fallbacks])
    assert fell.any() and not fell.all()
    assert all(x in (None, "quadrature") for x in r.fallbacks)
    np.testing.assert_array_equal(fell, ~sa.solve(f, 2.0, g).closed)
    q = registry.call("quadrature", FloatContext(), np.full(fell.sum(), 2.0), g[fell], **case)
    assert q.fallbacks is None
    np.testing.assert_allclose(r.values[fell], q.values, rtol=1e-12)
