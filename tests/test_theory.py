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


# ----------------------------------------------------------------------------- the quantities at the solution
GEO = sa.Geometry(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)


def test_traces_at_the_solution_equal_bulk_trace_and_their_gamma_derivatives_a_finite_difference():
    """TheoryResult.traces (closed form at the solution, docs/theory.md §6.3) against bulk_trace (the quadrature
    solver, φ = λ^j) and trace_dots against a Richardson difference of those traces in γ; the identities
    e3 = √c T_QK^(1), e2 = 1 − c T_KQK^(2) with the solver's bulk unknowns, and the centred traces."""
    from symattn.systems.attention import TRACES

    c, g = 0.5, np.array([0.1, 1.0])
    r = solve("tanh", c, g, geometry=GEO)
    h = 2.0**-10 * g

    def trace(kind, j, gv):
        return sa.bulk_trace("tanh", c, gv, phi=f"lam**{j}", kind=kind)

    for name, kind, j in TRACES:
        np.testing.assert_allclose(r.traces[name], trace(kind, j, g), rtol=1e-11)
        d1 = (trace(kind, j, g + h) - trace(kind, j, g - h)) / (2 * h)
        d2 = (trace(kind, j, g + h / 2) - trace(kind, j, g - h / 2)) / h
        np.testing.assert_allclose(r.trace_dots[name], (4 * d2 - d1) / 3, rtol=1e-8, err_msg=name)
    np.testing.assert_allclose(np.sqrt(c) * r.traces["T_QK1"], r.bulk[:, 2], rtol=1e-13)
    np.testing.assert_allclose(1 - c * r.traces["T_KQK2"], r.bulk[:, 1], rtol=1e-12)
    U = r.centred_traces
    np.testing.assert_allclose(U["U_KQK1"], r.traces["T_KQK1"] - 1, rtol=1e-12)
    np.testing.assert_allclose(U["U_KQK3"], r.traces["T_KQK3"] - (1 + 1 / c) / c, rtol=1e-11)


def test_gram_quantities_at_the_solution_are_those_of_the_symbolic_system():
    """Γ, Γ̇, Ĉ (docs/theory.md §6.4–§6.6) against the SymPy matrices of attention_system() with the traces and
    𝔊 substituted, and the Woodbury output F = [(I + ΓĈ)^{-1}Γ]_00, E = −γ²F' from them against the solver's."""
    import sympy as sp

    from symattn.systems.attention import TRACE_SYMBOLS, TRACES
    from symattn.systems.symbols import a1, c as c_sym

    r = solve("relu", 2.0, 0.3, geometry=GEO)
    s = sa.attention_system()
    vals = {T: r.traces[name][()] for T, (name, _, _) in zip(TRACE_SYMBOLS, TRACES)}
    vals.update({s.gram[i, j]: GEO.gram[i, j] for i in range(3) for j in range(3)})
    vals.update({c_sym: 2.0, a1: r.constants.a1})
    Gam = np.array(s.Gamma.xreplace(vals).evalf(), dtype=float)
    Ch = np.array(s.C_hat.xreplace(vals).evalf(), dtype=float)
    np.testing.assert_allclose(r.Gamma, Gam, rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(r.C_hat, Ch, rtol=1e-13, atol=1e-15)
    dots = {T: r.trace_dots[name][()] for T, (name, _, _) in zip(TRACE_SYMBOLS, TRACES)}
    Gd = np.array(sum((sp.diff(s.Gamma, T) * v for T, v in dots.items()), sp.zeros(*s.Gamma.shape))
                  .xreplace(vals).evalf(), dtype=float)
    np.testing.assert_allclose(r.Gamma_dot, Gd, rtol=1e-11, atol=1e-12)
    N = Gam.shape[0]
    F = np.linalg.solve(np.eye(N) + Gam @ Ch, Gam)[0, 0]
    assert abs(F - r.F) < 1e-12 * abs(F)
    v = np.linalg.solve(np.eye(N) + Ch @ Gam, np.eye(N)[0])
    assert abs(-0.3**2 * v @ Gd @ v - r.E) < 1e-12
    np.testing.assert_array_equal(r.gram, GEO.gram)


def test_mpmath_traces_and_results_without_traces():
    import mpmath

    r = solve("tanh", 0.5, 0.5, geometry=GEO, backend="mpmath", dps=30)
    T = r.traces["T_QK1"]
    assert T.dtype == object and isinstance(T[()], mpmath.mpf)
    with mpmath.workdps(30):
        assert abs(mpmath.sqrt(mpmath.mpf(0.5)) * T[()] - r.bulk[2]) < mpmath.mpf(10) ** -28
    for res in (solve("tanh", 0.5, 0.5, model="linear"),
                solve("tanh", 0.3, 0.3, geometry=sa.Geometry(snr=1.0), n=500, correction="finite-p")):
        with pytest.raises(sa.ParameterError, match="traces"):
            res.traces
