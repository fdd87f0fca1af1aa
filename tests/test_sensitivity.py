"""symattn.sensitivity (docs/theory.md §6.9) against 40-digit central differences of sa.solve.

The reference is an independent method: the closed-form mpmath solver (docs/theory.md §5.8) at
40 digits, differenced with a binary step h = 2^-40 about the exact Gram entry (truncation error
O(h²) ~ 1e-24); the sensitivity uses the quadrature solver's traces and the explicit formula.
"""

from __future__ import annotations

import mpmath
import pytest

import symattn as sa
from symattn.sensitivity import GRAM_NAMES

BASE = dict(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)
H = 2.0**-40


def _central_difference(f, c, gamma, wrt):
    E = [sa.solve(f, c, gamma, sa.Geometry(**dict(BASE, **{wrt: BASE[wrt] + s * H})), backend="mpmath",
                  dps=40).attention[()] for s in (1, -1)]
    with mpmath.workdps(40):
        return (E[0] - E[1]) / (2 * mpmath.mpf(H))


CASES = [("tanh", 0.5, "snr"), pytest.param("tanh", 0.5, "mu_wk", marks=pytest.mark.slow),
         pytest.param("relu", 2.0, "snr", marks=pytest.mark.slow),
         pytest.param("relu", 2.0, "mu_wk", marks=pytest.mark.slow),
         pytest.param("erf", 3.0, "mu_wq", marks=pytest.mark.slow)]


@pytest.mark.parametrize("f, c, wrt", CASES)
def test_sensitivity_matches_a_40_digit_central_difference(f, c, wrt):
    cd = _central_difference(f, c, 0.5, wrt)
    geo = sa.Geometry(**BASE)
    d40 = sa.sensitivity(f, c, 0.5, geo, wrt=wrt, backend="mpmath", dps=40)[()]
    d64 = float(sa.sensitivity(f, c, 0.5, geo, wrt=wrt))
    with mpmath.workdps(40):
        assert abs(d40 - cd) < mpmath.mpf(10) ** -20
    assert abs(d64 - float(cd)) < 1e-8 * abs(float(cd))
    assert cd != 0


def test_sensitivity_broadcasts_and_rejects_unknown_parameters():
    d = sa.sensitivity("tanh", [0.5, 2.0], 1.0, sa.Geometry.aligned(snr=1.0), wrt="snr")
    assert d.shape == (2,) and (d < 0).all()
    with pytest.raises(sa.ParameterError, match="wrt"):
        sa.sensitivity("tanh", 0.5, 1.0, None, wrt="nu")


def _gamma_central_difference(f, c, gamma, geometry):
    """dE/dγ by a 40-digit central difference of sa.solve (closed form, mpmath), step 2^-40 (O(h²) ~ 1e-24)."""
    E = [sa.solve(f, c, gamma + s * H, geometry, backend="mpmath", dps=40).attention[()] for s in (1, -1)]
    with mpmath.workdps(40):
        return (E[0] - E[1]) / (2 * mpmath.mpf(H))


GAMMA_CASES = [("tanh", 0.5, 0.5, "base"), ("relu", 2.0, 0.5, "base"), ("erf", 3.0, 0.1, "none"),
               ("tanh", 2.0, 0.1, "aligned")]


@pytest.mark.slow
@pytest.mark.parametrize("f, c, gamma, geo", GAMMA_CASES)
def test_gamma_sensitivity_matches_a_40_digit_central_difference(f, c, gamma, geo):
    """wrt='gamma' (second-order implicit derivatives of the bulk system, docs/theory.md §6.9) against a 40-digit
    central difference of the closed-form solver (a different method): 1e-20 at 40 digits, 1e-8 in float64."""
    geometry = {"base": sa.Geometry(**BASE), "none": None, "aligned": sa.Geometry.aligned(snr=2.0)}[geo]
    cd = _gamma_central_difference(f, c, gamma, geometry)
    d40 = sa.sensitivity(f, c, gamma, geometry, wrt="gamma", backend="mpmath", dps=40)[()]
    d64 = float(sa.sensitivity(f, c, gamma, geometry, wrt="gamma"))
    with mpmath.workdps(40):
        assert abs(d40 - cd) < mpmath.mpf(10) ** -20 * abs(cd)
    assert abs(d64 - float(cd)) < 1e-8 * abs(float(cd))
    assert cd != 0


@pytest.mark.slow
def test_gamma_sensitivity_is_minus_gamma_squared_f_second_derivative():
    """The outside check of issue 15: E = −γ²F'(γ), so dE/dγ = 2E/γ − γ²F''(γ); F'' by a 40-digit central
    second difference of F (sa.solve's F, closed form), step 2^-30 (O(h²) ~ 1e-18 of F'')."""
    geometry, h = sa.Geometry(**BASE), mpmath.mpf(2) ** -30
    with mpmath.workdps(40):
        g = mpmath.mpf("0.25")
        F = [sa.solve("tanh", 0.5, g + s * h, geometry, backend="mpmath", dps=40).F[()] for s in (1, 0, -1)]
        E = sa.solve("tanh", 0.5, g, geometry, backend="mpmath", dps=40).attention[()]
        F2 = (F[0] - 2 * F[1] + F[2]) / h**2
        ref = 2 * E / g - g**2 * F2
        d40 = sa.sensitivity("tanh", 0.5, g, geometry, wrt="gamma", backend="mpmath", dps=40)[()]
        assert abs(d40 - ref) < mpmath.mpf(10) ** -15 * abs(ref)
    assert set(GRAM_NAMES) >= {"snr", "mu_wk"}


def _c_difference(f, c, gamma, geometry, backend, dps=None):
    """dE/dc of the quadrature solver (a different method from the closed form that the sensitivity differences),
    Richardson on central differences with the float-exact binary steps 2^-12 and 2^-13: O(h⁴) ~ 1e-15."""
    def E(x):
        return sa.solve(f, x, gamma, geometry, backend=backend, dps=dps, method="quadrature").attention[()]

    with mpmath.workdps(dps or 30):
        d = [(E(c + h) - E(c - h)) / (2 * mpmath.mpf(h)) for h in (2.0**-12, 2.0**-13)]
        return (4 * d[1] - d[0]) / 3


@pytest.mark.parametrize("f, c, gamma, geo", [("tanh", 0.5, 0.5, "aligned"), ("relu", 2.0, 0.1, "base")])
def test_c_sensitivity_matches_the_quadrature_solver(f, c, gamma, geo):
    """wrt='c': the closed form differenced at 42 digits against the float64 quadrature solver differenced with
    Richardson steps (rounding ~1e-16/h ~ 1e-12): 1e-8 relative."""
    geometry = {"base": sa.Geometry(**BASE), "aligned": sa.Geometry.aligned(snr=1.0)}[geo]
    ref = float(_c_difference(f, c, gamma, geometry, "numpy"))
    d64 = float(sa.sensitivity(f, c, gamma, geometry, wrt="c"))
    assert abs(d64 - ref) < 1e-8 * abs(ref) and ref != 0


@pytest.mark.slow
def test_c_sensitivity_at_40_digits_matches_the_mpmath_quadrature_solver():
    """wrt='c' at 40 digits against a 30-digit quadrature central difference (Richardson, O(h⁴) ~ 1e-15 of dE/dc
    with h = 2^-12; its rounding 1e-30/h): 1e-13 relative."""
    geometry = sa.Geometry(**BASE)
    ref = _c_difference("tanh", 0.5, 0.5, geometry, "mpmath", dps=30)
    d40 = sa.sensitivity("tanh", 0.5, 0.5, geometry, wrt="c", backend="mpmath", dps=40)[()]
    with mpmath.workdps(40):
        assert abs(d40 - ref) < mpmath.mpf(10) ** -13 * abs(ref)
