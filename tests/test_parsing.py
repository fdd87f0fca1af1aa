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
