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
    """E_LR written out by hand in mpmath (docs/theory.md §3) with mpmath.diff for F'."""
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


# ----------------------------------------------------------------------------- the contexts: one surface
def _public(cls):
    return {n for n in dir(cls) if not n.startswith("_")}


def test_contexts_have_one_surface():
    """Every operation and attribute of one context exists in the other; MPContext overrides every
    numpy-only operation, and FloatContext uses numpy only (its source is copied into standalone solvers)."""
    import inspect

    assert _public(FloatContext()) == _public(MPContext(20))
    generic = {"to_float", "isfinite", "asarray", "ladder"}  # written for float and object arrays alike
    methods = {n for n in _public(FloatContext) if callable(getattr(FloatContext, n))}
    assert {"solve", "inv", "svd", "sqrt", "exp", "real", "imag", "complex", "zeros", "max_abs"} <= methods
    missing = sorted(n for n in methods - generic if n not in MPContext.__dict__)
    assert not missing, missing
    assert "mpmath" not in inspect.getsource(FloatContext)


def test_contexts_answer_what_formulas_used_to_ask_of_the_backend():
    """dtype, eps, digits, scalar, pointwise, matvec, the digits ladder and the float64-only guard: the same
    values in both arithmetics (to the float64 roundoff), so no formula tests which context it has."""
    fl, mp_ = FloatContext(), MPContext(40)
    assert (fl.dtype, mp_.dtype) == (float, object)
    assert fl.eps == np.finfo(float).eps and mp_.eps == 1e-40
    assert (fl.digits, mp_.digits, fl.dps, mp_.dps) == (16, 40, None, 40)
    assert fl.ladder((30, 60)) == [30, 60] and mp_.ladder((30, 60)) == [60] and MPContext(70).ladder((30, 60)) == [140]
    assert isinstance(fl.scalar(0.25), float) and isinstance(mp_.scalar(0.25), mpmath.mpf)
    rng = np.random.default_rng(7)
    B, x = rng.normal(size=(3, 4, 2)), rng.normal(size=(3, 2))
    with mp_:
        np.testing.assert_allclose(fl.matvec(B, x), (B @ x[..., None])[..., 0], rtol=1e-14)
        np.testing.assert_allclose(mp_.matvec(mp_.convert(B), mp_.convert(x)).astype(float), fl.matvec(B, x),
                                   rtol=1e-14)
        c = np.array([0.5, 2.0])
        got = mp_.pointwise(lambda ci, gi: mpmath.sqrt(ci) + gi, mp_.convert(c), mp_.convert(c))
        np.testing.assert_allclose(got.astype(float), fl.pointwise(lambda ci, gi: np.sqrt(ci) + gi, c, c), rtol=1e-15)
    fl.require_float64(ValueError("not raised at float64"))
    with pytest.raises(ValueError, match="mpmath"):
        mp_.require_float64(ValueError("mpmath refused"))


def _mp_complex(ctx, z):
    return ctx.convert(np.real(z)) + ctx.convert(np.imag(z)) * mpmath.mpc(0, 1)


def _as_complex(a):
    return np.vectorize(complex, otypes=[complex])(a)


def test_contexts_agree_on_every_operation():
    rng = np.random.default_rng(3)
    fl = FloatContext()
    x = rng.uniform(0.1, 2.0, size=(2, 3))
    A = rng.normal(size=(2, 3, 3)) + 1j * rng.normal(size=(2, 3, 3)) + 3 * np.eye(3)
    b = rng.normal(size=(2, 3)) + 1j * rng.normal(size=(2, 3))
    K = rng.normal(size=(4, 4))
    with MPContext(30) as mp_:
        xm, Am, bm = mp_.convert(x), _mp_complex(mp_, A), _mp_complex(mp_, b)
        for op in ("sqrt", "exp", "cos", "sin"):
            np.testing.assert_allclose(mp_.to_float(getattr(mp_, op)(xm)), getattr(fl, op)(x), rtol=1e-14)
        np.testing.assert_allclose(mp_.to_float(mp_.real(Am)), fl.real(A), rtol=1e-15)
        np.testing.assert_allclose(mp_.to_float(mp_.imag(Am)), fl.imag(A), rtol=1e-15)
        assert complex(mp_.complex(mp_.convert(0.5), mp_.convert(2.0))) == fl.complex(0.5, 2.0) == 0.5 + 2j
        zf, zm = fl.zeros((2, 3), complex=True), mp_.zeros((2, 3), complex=True)
        assert zf.shape == zm.shape and zf.dtype == np.complex128 and all(isinstance(v, mpmath.mpf) for v in zm.flat)
        assert mp_.max_abs(Am) == pytest.approx(fl.max_abs(A), rel=1e-15) and fl.max_abs(np.zeros(0)) == 0.0
        assert isinstance(mp_.max_abs(Am), float) and isinstance(fl.max_abs(A), float)
        np.testing.assert_allclose(_as_complex(mp_.inv(Am)), fl.inv(A), rtol=1e-13)
        np.testing.assert_allclose(_as_complex(mp_.solve(Am, bm)), fl.solve(A, b), rtol=1e-13)
        Uf, sf, Vf = fl.svd(K)
        Um, sm, Vm = mp_.svd(mp_.convert(K))
        np.testing.assert_allclose(mp_.to_float(sm), sf, rtol=1e-13)
        for U, s, V in ((Uf, sf, Vf), (mp_.to_float(Um), mp_.to_float(sm), mp_.to_float(Vm))):
            np.testing.assert_allclose((U * s) @ V, K, atol=1e-13)
        assert mp_.isfinite(xm).all() and fl.isfinite(x).all()


def test_mp_context_inverse_and_step_at_working_precision():
    with MPContext(40) as ctx:
        A = ctx.convert(np.array([[4.0, 1.0], [2.0, 3.0]]))
        inv = ctx.inv(A)
        assert all(abs(v - w) < mpmath.mpf(10) ** -38 for v, w in zip((A @ inv).flat, [1, 0, 0, 1]))
        assert ctx.step == mpmath.mpf(10) ** -45 and ctx.step.context.prec == mpmath.mp.prec
    assert FloatContext.step == 1e-20 and FloatContext.dps is None
