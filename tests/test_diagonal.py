"""Tests of symattn.activations.diagonal: the diagonal constant d and the finite-p d_n (docs/theory.md §1.3).

Reference values come from closed forms (ReLU), an independent mpmath quadrature over the χ²
density, or a direct simulation of ‖yμ + z‖², never from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from mpmath import mp

import symattn as sa
from symattn.errors import ParameterError


@pytest.mark.parametrize("name,d", [
    ("tanh", 0.0), ("erf", 0.0), ("cos", 0.0), ("sigmoid", 0.0), ("softsign", 0.0),
    ("relu", 1.0), ("abs", 1.0), ("linear", 1.0), ("gelu", 1.0), ("silu", 1.0),
    ("softplus", 1.0), ("leaky_relu", 1.0), ("elu", 1.0),
    ("he3", math.inf), ("exp", math.inf), ("he2", math.inf),
])
def test_diagonal_constant(name, d):
    f = sa.activation(name)
    assert f.d == d
    assert f.superlinear == math.isinf(d)
    cd = f.constants(20)["d"]
    assert (mp.isinf(cd) and math.isinf(d)) or float(cd) == d


def test_diagonal_constant_expressions_and_callables():
    assert sa.activation("2*x + tanh(x)").d == 2.0
    assert sa.activation("Max(x, 0) - Max(-x, 0)/2").d == 1.0
    assert sa.activation("-x**2").d == -math.inf and sa.activation("-x**2").superlinear
    assert math.isnan(sa.activation("x*sin(x)").d)  # f(√p)/√p = sin √p has no limit
    # numeric fallback (no expression)
    assert sa.activation(lambda t: np.maximum(t, 0.0)).d == 1.0
    assert sa.activation(lambda t: np.tanh(t)).d == 0.0
    assert sa.activation(lambda t: np.exp(t)).d == math.inf
    assert sa.activation(mp.tanh).d == 0.0


@pytest.mark.parametrize("p,snr", [(1, 0.0), (7, 0.0), (100, 0.0), (1000, 0.0), (1000, 4.0), (50, 2.5)])
def test_d_n_relu_closed_form(p, snr):
    """ReLU: u = ‖x‖² ≥ 0, so d_n = E[u/√p − 1/√(2π)]/√p = (p + snr)/p − 1/√(2πp) exactly."""
    ref = (p + snr) / p - 1 / math.sqrt(2 * math.pi * p)
    assert sa.activation("relu").d_n(p, snr=snr) == pytest.approx(ref, rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("p", [3, 50, 400])
def test_d_n_tanh_independent_quadrature(p):
    """d_n against mpmath.quad over the χ²_p density of u = ‖x‖² (snr = 0)."""
    with mp.workdps(25):
        k = mp.mpf(p) / 2
        lognorm = -k * mp.log(2) - mp.loggamma(k)

        def integrand(u):
            return mp.tanh(u / mp.sqrt(p)) * mp.exp(lognorm + (k - 1) * mp.log(u) - u / 2)

        mean, sd = p, mp.sqrt(2 * p)
        pts = [0] + [max(0, mean + j * sd) for j in (-8, -3, 0, 3, 8)] + [mp.inf]
        pts = sorted(set(pts))
        ref = mp.quad(integrand, pts) / mp.sqrt(p)
    assert sa.activation("tanh").d_n(p) == pytest.approx(float(ref), rel=1e-10)


def test_d_n_tanh_monte_carlo_with_signal():
    """Non-central case: d_n(p, snr) against a direct simulation of ‖yμ + z‖², within 5 s.e."""
    p, snr, n = 64, 3.0, 200_000
    rng = np.random.default_rng(12345)
    mu = np.zeros(p)
    mu[0] = math.sqrt(snr)
    z = rng.standard_normal((n, p))
    y = rng.choice([-1.0, 1.0], size=n)
    u = np.sum((z + y[:, None] * mu) ** 2, axis=1)
    samples = np.tanh(u / math.sqrt(p)) / math.sqrt(p)
    mc, se = samples.mean(), samples.std(ddof=1) / math.sqrt(n)
    dn = sa.activation("tanh").d_n(p, snr=snr)
    assert abs(dn - mc) < 5 * se + 1e-12
    # and the O(1/√p) size stated in docs/theory.md §1.3
    assert dn * math.sqrt(p) == pytest.approx(1.0, abs=1e-3)


def test_d_n_tanh_is_one_over_sqrt_p_and_cos_nu():
    f = sa.activation("tanh")
    assert f.d_n(10_000) * 100 == pytest.approx(1.0, abs=1e-10)
    assert f.d_n(10_000) == f.d_n(10_000)  # cached, deterministic


def test_d_n_superlinear_and_validation():
    assert sa.activation("he3").d_n(100) == math.inf
    f = sa.activation("tanh")
    with pytest.raises(ParameterError):
        f.d_n(0)
    with pytest.raises(ParameterError):
        f.d_n(10, snr=-1.0)
