"""Tests of symattn.activations.evaluation: numpy and torch functions of f against SymPy (docs/theory.md §1.1)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symattn as sa

POINTS = [-7.5, -3.0, -1.0, -0.25, 0.0, 0.3, 1.0, 2.5, 6.0]


@pytest.mark.parametrize("name", sorted(sa.CATALOG))
def test_numpy_agrees_with_sympy(name):
    f = sa.activation(name)
    x = sp.Symbol("x", real=True)
    expr = sa.CATALOG[name].subs(sa.activations.X, x)
    ref = np.array([float(sp.N(expr.subs(x, sp.Rational(str(t))), 30)) for t in POINTS]) - f.a0
    got = f.numpy(np.array(POINTS))
    assert got.dtype == np.float64 and got.shape == (len(POINTS),)
    assert np.allclose(got, ref, rtol=1e-13, atol=1e-13)
    assert np.allclose(f(np.array(POINTS).reshape(3, 3)), ref.reshape(3, 3), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("spec", sorted(sa.CATALOG) + [
    "x*erf(x)", "atan(x)", "sign(x)*x**2", "Heaviside(x)*x", "Piecewise((x, x > 1), (x**2, True))",
    "min(x, 1) + max(x, -1)", "sqrt(1 + x**2)",
])
def test_torch_agrees_with_numpy(spec):
    torch = pytest.importorskip("torch")
    f = sa.activation(spec)
    t = torch.linspace(-6, 6, 49, dtype=torch.float64)
    out = f.torch(t)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float64 and out.device == t.device
    assert np.allclose(out.numpy(), f.numpy(t.numpy()), rtol=1e-12, atol=1e-12)
    out32 = f.torch(t.to(torch.float32))
    assert out32.dtype == torch.float32
    assert f._torch_raw is not None  # a real torch translation, not the numpy fallback


def test_torch_callable_and_fallback():
    torch = pytest.importorskip("torch")
    f = sa.activation(lambda v: np.tanh(np.asarray(v, dtype=float)))  # numpy-only: fallback
    t = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float32)
    out = f.torch(t)
    assert out.dtype == torch.float32
    assert np.allclose(out.numpy(), np.tanh(t.numpy()), atol=1e-6)
