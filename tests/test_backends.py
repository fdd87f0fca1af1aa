"""Numeric layer: compiled expressions, Marchenko-Pastur quadrature, contexts, Proposition 1.

References are independent of symattn's own machinery: sympy evaluation, the closed-form
moments of the Marchenko-Pastur law, scipy.integrate.quad, and mpmath written out by hand.
"""

import mpmath
import numpy as np
import pytest
import sympy as sp

import symattn as sa
from symattn.backends.compile import CompiledExprs
from symattn.backends.context import FloatContext, MPContext, context
from symattn.backends.quadrature import integrate_many, mp_nodes
from symattn.errors import ParameterError

x, y = sp.symbols("x y", positive=True)


def mp_reference(g, c):
    """∫ g dμ_S by tanh-sinh quadrature (mpmath.quad, 30 digits) on the Marchenko-Pastur density."""
    with mpmath.workdps(30):
        c = mpmath.mpf(c)
        a, b = (1 - 1 / mpmath.sqrt(c)) ** 2, (1 + 1 / mpmath.sqrt(c)) ** 2
        dens = lambda t: c * mpmath.sqrt((b - t) * (t - a)) / (2 * mpmath.pi * t)  # noqa: E731
        val = mpmath.quad(lambda t: g(t) * dens(t), [a, (a + b) / 2, b])
        return float(val + max(0, 1 - c) * g(mpmath.mpf(0)))


@pytest.mark.parametrize("expr", [
    x**3 / y**2, y / x**3, (x + y) ** -2 * x, 1 / (x**2 * y**3) + x**4, (x - y) ** 5 / (x * y) ** 2,
])
def test_compiled_powers_match_sympy(expr):
    fn = CompiledExprs([expr], (x, y), "numpy")
    xv, yv = np.array([0.3, 1.7, 2.5]), np.array([1.1, 0.4, 3.0])
    got = fn(xv, yv)[0]
    want = [float(expr.subs({x: a, y: b})) for a, b in zip(xv, yv)]
    np.testing.assert_allclose(got, want, rtol=1e-14)


@pytest.mark.parametrize("c", [0.3, 0.99, 1.0, 1.01, 2.0, 7.0])
def test_mp_quadrature_moments(c):
    """Moments of MP with ratio y = 1/c: 1, 1, 1 + y, 1 + 3y + y² (Narayana polynomials)."""
    ctx = FloatContext()
    lam, w = mp_nodes(ctx, np.array([c]), 64)
    yv = 1 / c
    got = integrate_many([lam**0, lam, lam**2, lam**3], w)[0]
    np.testing.assert_allclose(got, [1, 1, 1 + yv, 1 + 3 * yv + yv**2], rtol=1e-13)


@pytest.mark.parametrize("c", [0.5, 0.999, 1.0, 3.0])
def test_mp_quadrature_rational_integrand(c):
    g = lambda t: 1.0 / (0.05 + t) ** 2  # noqa: E731
    ctx = FloatContext()
    lam, w = mp_nodes(ctx, np.array([c]), 1024)
    assert integrate_many([g(lam)], w)[0, 0] == pytest.approx(mp_reference(g, c), rel=1e-9)


def test_mp_context_quadrature_high_precision():
    with MPContext(40) as ctx:
        lam, w = mp_nodes(ctx, np.array([ctx.convert(0.5)]), 200)
        m2 = integrate_many([lam**2], w)[0, 0]
        assert abs(m2 - 3) < mpmath.mpf(10) ** -35  # 1 + 1/c at c = 1/2


def test_mp_context_solve_matches_mpmath():
    with MPContext(30) as ctx:
        A = ctx.convert(np.array([[[4.0, 1.0], [2.0, 3.0]]]))
        b = ctx.convert(np.array([[1.0, 2.0]]))
        got = ctx.solve(A, b)[0]
        want = mpmath.lu_solve(mpmath.matrix([[4, 1], [2, 3]]), mpmath.matrix([1, 2]))
        assert all(abs(got[i] - want[i]) < mpmath.mpf(10) ** -28 for i in range(2))


def test_context_rejects_unknown_backend_and_low_dps():
    with pytest.raises(ParameterError, match="backend"):
        context("fortran")
    with pytest.raises(ParameterError, match="dps"):
        context("mpmath", 10)


def _lr_reference_mpmath(c, g, m2):
    """E_LR written out by hand in mpmath (MATH §3) with mpmath.diff for F'."""
    def F(gam):
        b = 1 - c + gam
        mt = (-b + mpmath.sqrt(b * b + 4 * c * gam)) / (2 * c * gam)
        m = c * mt + (1 - c) / gam
        return m / (1 + gam * m2 * m * mt)
    return -(g**2) * mpmath.diff(F, g)


@pytest.mark.parametrize("c,g,m2", [(0.5, 0.1, 1.0), (2.0, 0.01, 4.0), (1.0, 3.0, 0.0)])
def test_linear_mpmath_backend_to_40_digits(c, g, m2):
    got = sa.memorization_error("tanh", c=c, gamma=g, geometry=sa.Geometry(snr=m2), model="linear",
                                backend="mpmath", dps=50)
    with mpmath.workdps(60):
        want = _lr_reference_mpmath(mpmath.mpf(c), mpmath.mpf(g), mpmath.mpf(m2))
    assert abs(got[()] - want) < mpmath.mpf(10) ** -40
    fl = sa.memorization_error("tanh", c=c, gamma=g, geometry=sa.Geometry(snr=m2), model="linear")
    assert float(fl) == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("c", [0.5, 1.0, 2.0])
def test_proposition1_linear_f_is_exact(c):
    """f(t) = t: s = 0, K0 = S, so (1/n) tr φ(S)Q0 = ∫ φ/(γ + cλ³) and (1/n) tr K0Q0K0 = ∫ λ²/(γ + cλ³)."""
    gamma = 0.2
    q = sa.bulk_trace("linear", c=c, gamma=gamma, phi="lam + 1", kind="Q")
    kqk = sa.bulk_trace("linear", c=c, gamma=gamma, phi=1, kind="KQK")
    assert float(q) == pytest.approx(mp_reference(lambda t: (t + 1) / (gamma + c * t**3), c), rel=1e-9)
    assert float(kqk) == pytest.approx(mp_reference(lambda t: t**2 / (gamma + c * t**3), c), rel=1e-9)


def test_proposition1_rejects_non_polynomial():
    with pytest.raises(ParameterError, match="phi"):
        sa.bulk_trace("tanh", c=1, gamma=1, phi="exp(lam)")
    with pytest.raises(ParameterError, match="kind"):
        sa.bulk_trace("tanh", c=1, gamma=1, kind="QQ")
