"""Tests of symattn.activations.parsing and .catalog: specs, names and their errors (docs/theory.md §1.2)."""

from __future__ import annotations

import pytest
import sympy as sp

import symattn as sa
from symattn.errors import ActivationError


def test_unknown_name_lists_close_matches_and_catalog():
    with pytest.raises(ActivationError) as e:
        sa.activation("tanhh")
    msg = str(e.value)
    assert "'tanh'" in msg and "relu" in msg and "softplus" in msg


@pytest.mark.parametrize("spec,fragment", [
    ("x**", "x**"),
    ("tanh(x", "tanh(x"),
    ("tanh(t)", "t"),
    ("x + y", "y"),
    ("1/x", "not finite"),
    ("log(x)", "not finite and real"),
    ("exp(x**2)", "infinite"),
    ("exp(x**2/4)", "infinite"),
    ("3", "constant"),
    ("", "empty"),
])
def test_bad_specs(spec, fragment):
    with pytest.raises(ActivationError, match=None) as e:
        sa.activation(spec)
    assert fragment in str(e.value)


def test_bad_sympy_and_object_specs():
    y = sp.Symbol("y")
    with pytest.raises(ActivationError, match="y"):
        sa.activation(sp.sin(y))
    with pytest.raises(ActivationError):
        sa.activation(42)
    with pytest.raises(ActivationError):
        sa.activation(lambda t: float("nan"))


def test_unknown_function_in_expression_is_an_activation_error():
    with pytest.raises(ActivationError, match="unknown function"):
        sa.activation("foo(x) + 1")


@pytest.mark.parametrize("spec", ["x + nan", "x + oo", "zoo", "nan*x", "x/0", "1/(x - x)", "x*oo"])
def test_non_finite_specs_are_not_finite_not_constant(spec):
    with pytest.raises(ActivationError) as e:
        sa.activation(spec)
    assert "not finite" in str(e.value) and "constant" not in str(e.value), str(e.value)


def test_string_refusals_are_parameter_errors_naming_activation():
    from symattn.errors import ExpressionError, ParameterError

    for spec, token in [("x**", "x**"), ("foo(x)", "foo"), ("x.real", "x.real"), ("x + 0*9**9**9", "387420489")]:
        with pytest.raises(ParameterError) as e:
            sa.activation(spec)
        assert isinstance(e.value, ExpressionError) and e.value.name == "activation"
        assert token in str(e.value)


def test_catalog_and_expression_specs_keep_their_names_and_expressions():
    from symattn.activations.parsing import parse_spec

    X = sa.activations.X
    assert parse_spec(" Swish ")[:3] == ("silu", X / (1 + sp.exp(-X)), "catalog")
    assert parse_spec("  x*erf(x) ")[:3] == ("x*erf(x)", X * sp.erf(X), "expression")
    assert parse_spec(sp.Symbol("x") ** 2).expr == X**2  # a plain Symbol('x') becomes the real X
