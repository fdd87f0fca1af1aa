"""The SymPy system of ridge regression on AR(1) tokens (symattn.systems.temporal, docs/theory.md §15.2): its
closed-form spectral integrals against quadrature, the trapezoid rule of symattn.temporal, and §3 at ρ = 0."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy as sp

from symattn.systems.linear import linear_system
from symattn.systems.symbols import c, gamma, m2
from symattn.systems.temporal import ar1_linear_system, delta, rho
from symattn.temporal import linear_errors
from symattn.tokens import ar1_density


def test_the_closed_form_integral_is_the_integral():
    """⟨s/(a s + γ)⟩ over ω (scipy quad of the AR(1) density) = 1/√((a + γ/κ)(a + γκ))."""
    from scipy.integrate import quad

    for a, g, r in ((0.7, 0.1, 0.5), (2.0, 3.0, 0.9), (0.3, 0.01, 0.2)):
        num = quad(lambda w: ar1_density(r, w) / (a * ar1_density(r, w) + g), 0, 2 * np.pi, limit=200)[0] / (2 * np.pi)
        k = (1 + r) / (1 - r)
        assert math.isclose(num, 1 / math.sqrt((a + g / k) * (a + g * k)), rel_tol=1e-10)


def test_closed_form_equals_the_trapezoid_rule():
    s = ar1_linear_system()
    for r, cv, g, m in itertools.product((0.2, 0.5, 0.9), (0.5, 1.0, 2.0), (0.01, 0.1, 1.0, 10.0), (0.0, 1.0)):
        a = s.evaluate(cv, g, m, r)
        b = linear_errors(cv, g, snr=m, tokens={"ar1": r})
        for k in ("train", "test", "F", "overlap", "delta"):
            assert a[k] == pytest.approx(float(b[k]), rel=1e-9, abs=1e-14), (r, cv, g, m, k)


def test_rho_zero_is_the_papers_closed_form():
    """At ρ = 0 the system is §3's: the fixed point is Marchenko–Pastur's and E_train the closed form of
    symattn.systems.linear (a separate derivation)."""
    s = ar1_linear_system()
    lin = linear_system().closed_form["E"]
    for cv, g, m in itertools.product((0.5, 2.0), (0.01, 1.0), (0.0, 1.0)):
        ref = float(lin.subs({c: cv, gamma: g, m2: m}).doit())
        assert s.evaluate(cv, g, m, 0.0)["train"] == pytest.approx(ref, rel=1e-11)


def test_the_system_prints_and_its_derivative_is_implicit():
    s = ar1_linear_system()
    assert s.equations[0].free_symbols == {c, gamma, rho, delta}
    assert s.closed_form["E_test"].free_symbols == {c, gamma, m2, rho, delta}
    assert r"\rho" in s.latex() and "delta" in s.pretty()
    # E = −γ² dF/dγ: against a central difference of F along the solved δ(γ)
    cv, g, m, r = 1.0, 0.3, 1.0, 0.6
    h = 1e-5 * g
    F = [s.evaluate(cv, g + j * h, m, r)["F"] for j in (-1, 1)]
    assert s.evaluate(cv, g, m, r)["train"] == pytest.approx(-g * g * (F[1] - F[0]) / (2 * h), rel=1e-7)
    assert sp.simplify(s.equations[0].lhs.subs(rho, 0) ** 2 - delta**2 * (c / (1 + delta) + gamma) ** 2) == 0
