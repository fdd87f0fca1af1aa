"""Tests of symattn.theory: the TheoryResult returned by ``solve`` (docs/theory.md §3, §5, §6).

The checks use identities outside the code under test: E = −γ² F'(γ) against a central
difference of the returned F, F_bulk = e1 when μ = w = 0 (docs/theory.md §5), and the bulk
residuals against the fixed-point equations themselves.
"""

import json

import numpy as np
import pytest

import symattn as sa
from symattn.theory import TheoryResult, solve


@pytest.mark.parametrize("model", ["attention", "linear"])
@pytest.mark.parametrize("geometry", [None, sa.Geometry.aligned(snr=1.0)])
def test_E_is_minus_gamma_squared_F_prime(model, geometry):
    """E(γ) = −γ² F'(γ): the returned E against a central difference of the returned F (h = 1e-4 γ)."""
    g = np.array([0.03, 0.3, 3.0])
    h = 1e-4 * g
    r = solve("tanh", 0.7, g, geometry=geometry, model=model)
    Fp = solve("tanh", 0.7, g + h, geometry=geometry, model=model).F
    Fm = solve("tanh", 0.7, g - h, geometry=geometry, model=model).F
    E_fd = -(g**2) * (Fp - Fm) / (2 * h)
    np.testing.assert_allclose(r.E, E_fd, rtol=1e-6)


def test_wrapper_returns_exactly_E():
    g = [0.01, 0.1, 1.0]
    geo = sa.Geometry(snr=1.0, wk2=2.0, wq2=2.0, mu_wk=1.0, mu_wq=0.5, wk_wq=0.3)
    r = solve("relu", [[0.5], [2.0]], g, geometry=geo, model="both")
    E = sa.memorization_error("relu", [[0.5], [2.0]], g, geometry=geo, model="both")
    assert r.shape == (2, 3)
    assert np.array_equal(r.E["attention"], E["attention"]) and np.array_equal(r.E["linear"], E["linear"])


def test_bulk_solution_and_diagnostics():
    """μ = w = 0: F_A = e1 (docs/theory.md §5); 0 ≤ e2 ≤ 1 < ... ; residuals tiny; iterations counted."""
    r = solve("erf", 1.5, [0.01, 0.1, 1.0, 10.0])
    assert r.bulk.shape == (4, 3)
    np.testing.assert_allclose(r.F, r.bulk[:, 0], rtol=1e-13)
    assert np.all(r.bulk[:, 0] > 0) and np.all((r.bulk[:, 1] >= 0) & (r.bulk[:, 1] <= 1))
    assert np.all(r.residuals < 1e-12) and r.iterations > 0
    assert r.parameters["activation"] == "erf" and r.parameters["backend"] == "numpy"
    assert abs(r.parameters["nu"] - (r.parameters["s2"] + r.parameters["a1"] ** 2)) < 1e-15


def test_to_dict_is_json_and_keeps_mpmath_digits():
    r = solve("tanh", 0.5, [0.1, 1.0], backend="mpmath", dps=25, model="both")
    d = json.loads(json.dumps(r.to_dict()))
    assert d["model"] == "both" and d["parameters"]["dps"] == 25
    digits = d["E_attention"][0].replace("0.", "", 1).lstrip("0")
    assert len(digits) >= 20                                   # decimal strings keep the precision
    f64 = solve("tanh", 0.5, [0.1, 1.0], model="both")
    np.testing.assert_allclose([float(v) for v in d["E_attention"]], f64.attention, rtol=1e-12)
    np.testing.assert_allclose([float(v) for v in d["F_linear"]], f64.F_linear, rtol=1e-12)


def test_finite_p_result_has_E_only():
    r = solve("tanh", 0.3, [0.03], geometry=sa.Geometry.aligned(snr=3.0), n=1000, correction="finite-p")
    assert isinstance(r, TheoryResult) and r.F_attention is None and r.bulk is None
    assert 0 < float(r.E[0]) < 1 and r.parameters["correction"] == "finite-p"
