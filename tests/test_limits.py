"""sa.limits (symattn/limits.py, docs/theory.md §7.6): each leading term against the full solution.

Every test evaluates the full theory (sa.memorization_error, or the attention backend at given
kernel constants for a1 → 0) at two values t1, t2 of the small parameter and checks that the
error of the leading term shrinks at the rate the limit claims: err(t1)/err(t2) ≈ (t1/t2)^q for a
remainder O(t^q). The symbolic coefficients are checked against hand formulas or an independent
quadrature (mpmath), never against numbers the code printed.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import sympy as sp

import symattn as sa
from symattn.systems.symbols import c, gamma, m2

ALIGNED = sa.Geometry.aligned(snr=1.0)


def _E(f, cv, gv, geometry=None, model="attention", **kw):
    return float(np.asarray(sa.memorization_error(f, cv, gv, geometry=geometry, model=model, **kw)).reshape(-1)[0])


def _rate(err1, err2, t1, t2):
    """The measured order q of err ∝ t^q between t1 and t2."""
    return float(np.log(abs(err1) / abs(err2)) / np.log(t1 / t2))


# ----------------------------------------------------------------------------- γ → 0, c < 1
def test_gamma_zero_value_c_below_one():
    """E(γ) − E(0) = O(γ²) for c < 1: E_LR, E_A at μ = 0 (1 − c) and with a signal (the ridgeless value)."""
    for geometry in (None, ALIGNED):
        lim = sa.limits("tanh", c=0.5, geometry=geometry, which="gamma->0")
        A, L = lim.attention["gamma->0"], lim.linear["gamma->0"]
        assert sp.simplify(L.coefficient - (1 - c) / (1 + m2)) == 0            # docs/theory.md §3
        if geometry is None:
            assert A.coefficient == 1 - c and A.value == 0.5
        # the ridgeless value is memorization_error(..., gamma=0)
        assert abs(_E("tanh", 0.5, 0.0, geometry) - float(A.value)) < 1e-12
        for term, model in ((A, "attention"), (L, "linear")):
            g1, g2 = 1e-4, 1e-5
            e1, e2 = (_E("tanh", 0.5, g, geometry, model) - float(term.value) for g in (g1, g2))
            q = _rate(e1, e2, g1, g2)
            assert abs(q - 2) < 0.05, (model, geometry, e1, e2, q)


def test_gamma_zero_value_mpmath():
    """30 digits: E_A(γ) − (1 − c) at γ = 1e-8, 1e-9 (tanh, c = 0.5, μ = 0) shrinks like γ²."""
    lim = sa.limits("tanh", c=0.5, which="gamma->0", backend="mpmath", dps=30)
    k = lim.attention["gamma->0"].value
    E = sa.memorization_error("tanh", 0.5, [1e-8, 1e-9], backend="mpmath", dps=30)
    with mpmath.workdps(30):
        errs = [E[0] - k, E[1] - k]
        q = float(mpmath.log(errs[0] / errs[1]) / mpmath.log(10))
    assert abs(q - 2) < 0.01 and abs(errs[1]) < 1e-14, (errs, q)


def test_ridgeless_refused_at_c_at_least_one():
    with pytest.raises(sa.ParameterError) as err:
        sa.memorization_error("tanh", 2.0, 0.0)
    assert err.value.name == "gamma" and "c < 1" in str(err.value)
    with pytest.raises(sa.ParameterError):
        sa.memorization_error("tanh", [0.5, 1.0], 0.0, model="linear")


# ----------------------------------------------------------------------------- γ → 0, c > 1
def test_gamma_zero_sqrt_law_c_above_one():
    """c > 1: E_A/√γ − k = O(γ) with k from the reduced (P, C) system (μ = 0), and E_LR/γ² − k = O(γ)."""
    lim = sa.limits("tanh", c=2.0, which="gamma->0")
    A, L = lim.attention["gamma->0"], lim.linear["gamma->0"]
    assert A.method == "reduced system" and A.form.has(sp.sqrt(gamma))
    g1, g2 = 1e-5, 1e-6
    e = [_E("tanh", 2.0, g) / np.sqrt(g) - A.value for g in (g1, g2)]
    assert abs(_rate(e[0], e[1], g1, g2) - 1) < 0.05, e
    g1, g2 = 1e-3, 1e-4
    e = [_E("tanh", 2.0, g, model="linear") / g**2 - L.value for g in (g1, g2)]
    assert abs(_rate(e[0], e[1], g1, g2) - 1) < 0.05, e
    # docs/theory.md §7.3: the γ² coefficient of E_LR
    assert sp.simplify(L.coefficient - c * (c**2 + m2) / ((c - 1) ** 3 * (c + m2) ** 2)) == 0


def test_sqrt_law_closed_form_and_mpmath():
    """a1 = d = 0 (cos): the reduced system has P = 1, C = 0 and k = √(c/((c − 1)s²))/2 (∫dμ_S/λ = c/(c − 1));
    the 30-digit reduced system agrees with float64; a signal changes k (extrapolated) at the same rate."""
    act = sa.activation("cos")
    s2v = act.nu - act.a1**2
    k_hand = 0.5 * np.sqrt(2.0 / (1.0 * s2v))
    k = sa.limits("cos", c=2.0, which="gamma->0").attention["gamma->0"].value
    assert abs(k - k_hand) < 1e-12 * k_hand
    k30 = sa.limits("tanh", c=2.0, which="gamma->0", backend="mpmath", dps=30).attention["gamma->0"].value
    k64 = sa.limits("tanh", c=2.0, which="gamma->0").attention["gamma->0"].value
    assert abs(float(k30) - k64) < 1e-13
    sig = sa.limits("tanh", c=2.0, geometry=ALIGNED, which="gamma->0").attention["gamma->0"]
    assert sig.method == "extrapolated" and abs(sig.value - k64) > 0.1
    g1, g2 = 1e-5, 1e-6
    e = [_E("tanh", 2.0, g, ALIGNED) / np.sqrt(g) - sig.value for g in (g1, g2)]
    assert abs(_rate(e[0], e[1], g1, g2) - 1) < 0.05, e


def test_gamma_zero_gap_regime():
    """ReLU (d = 1) at c = 2: the reduced system has no root P > 0, M has a gap at 0 and E_A = kγ² + O(γ³)."""
    A = sa.limits("relu", c=2.0, which="gamma->0").attention["gamma->0"]
    assert A.form == sp.Symbol("k") * gamma**2
    g1, g2 = 1e-4, 1e-5
    e = [_E("relu", 2.0, g) / g**2 - A.value for g in (g1, g2)]
    assert abs(_rate(e[0], e[1], g1, g2) - 1) < 0.1, e


# ----------------------------------------------------------------------------- γ → ∞
def test_gamma_infinity_kappa():
    """γ(1 − E)/2 − κ = O(1/γ) for E_A (tanh, c = 0.5, w_K = w_Q = μ, ‖μ‖² = 1) and E_LR (κ = c + ‖μ‖²)."""
    lim = sa.limits("tanh", c=0.5, geometry=ALIGNED, which="gamma->oo")
    A, L = lim.attention["gamma->oo"], lim.linear["gamma->oo"]
    assert sp.simplify(L.coefficient - (c + m2)) == 0 and L.value == 1.5
    for term, model in ((A, "attention"), (L, "linear")):
        g1, g2 = 1e3, 1e4
        e = [g * (1 - _E("tanh", 0.5, g, ALIGNED, model)) / 2 - term.value for g in (g1, g2)]
        assert abs(_rate(e[0], e[1], g1, g2) + 1) < 0.05, (model, e)
        # the leading term 1 − 2κ/γ itself: its remainder is O(γ^{-2})
        r = [_E("tanh", 0.5, g, ALIGNED, model) - float(term.leading(g)) for g in (g1, g2)]
        assert abs(_rate(r[0], r[1], g1, g2) + 2) < 0.1, (model, r)


# ----------------------------------------------------------------------------- c → 0
def test_c_zero():
    """c → 0 at γ = 1: E_LR − k = O(c); E_A = 1 − c + O(c²) at μ = 0; E_A − k = O(c) with a signal."""
    lim0 = sa.limits("tanh", c=0.5, gamma=1.0, which="c->0")
    L, A0 = lim0.linear["c->0"], lim0.attention["c->0"]
    F0 = (1 + gamma) / (gamma * (1 + gamma + m2))                       # docs/theory.md §7.5
    assert sp.simplify(L.coefficient - (-(gamma**2) * sp.diff(F0, gamma))) == 0
    c1, c2 = 1e-2, 1e-3
    e = [_E("tanh", cv, 1.0, model="linear") - L.value for cv in (c1, c2)]
    assert abs(_rate(e[0], e[1], c1, c2) - 1) < 0.05, e
    for cv in (c1, c2):                                                  # O(c²) or smaller
        assert abs(_E("tanh", cv, 1.0) - float(A0.leading(cv))) < cv**2
    As = sa.limits("tanh", c=0.5, gamma=1.0, geometry=ALIGNED, which="c->0").attention["c->0"]
    e = [_E("tanh", cv, 1.0, ALIGNED) - As.value for cv in (c1, c2)]
    assert abs(_rate(e[0], e[1], c1, c2) - 1) < 0.05, e


# ----------------------------------------------------------------------------- c → ∞
def test_c_infinity():
    """c → ∞ at γ = 0.1: E_A − √(γ/(γ + 4ν)) = O(1/c) (tanh, d = 0), c²E_A − γ²/d⁴ = O(1/c) (ReLU),
    c²E_LR − γ² = O(1/c); the floor equals γ²∫ρ_sc/(νx² + γ)² by mpmath quadrature."""
    A = sa.limits("tanh", c=0.5, gamma=0.1, which="c->oo").attention["c->oo"]
    nu = sa.activation("tanh").nu
    with mpmath.workdps(30):
        quad = mpmath.mpf("0.01") * mpmath.quad(
            lambda x: mpmath.sqrt(4 - x**2) / (2 * mpmath.pi) / (nu * x**2 + mpmath.mpf("0.1")) ** 2, [-2, 0, 2])
    assert abs(A.value - float(quad)) < 1e-14
    c1, c2 = 1e3, 1e4
    e = [_E("tanh", cv, 0.1) - A.value for cv in (c1, c2)]
    assert abs(_rate(e[0], e[1], c1, c2) + 1) < 0.05, e
    R = sa.limits("relu", c=0.5, gamma=0.1, which="c->oo")
    Ar, L = R.attention["c->oo"], R.linear["c->oo"]
    assert abs(Ar.value - 0.01 / sa.activation("relu").d ** 4) < 1e-15 and L.coefficient == gamma**2
    c1, c2 = 1e2, 1e3
    for term, model in ((Ar, "attention"), (L, "linear")):
        e = [cv**2 * _E("relu", cv, 0.1, model=model) - term.value for cv in (c1, c2)]
        assert abs(_rate(e[0], e[1], c1, c2) + 1) < 0.06, (model, e)


# ----------------------------------------------------------------------------- μ → 0
def test_mu_zero():
    """μ → θμ with w fixed: E(θ) − E(0) = O(θ²) for E_A (the bulk error) and E_LR."""
    lim = sa.limits("tanh", c=0.5, gamma=0.1, which="mu->0")

    def geom(t):
        return sa.Geometry(snr=t * t, wk2=1.0, wq2=1.0, mu_wk=t, mu_wq=t, wk_wq=1.0)

    for model in ("attention", "linear"):
        term = getattr(lim, model)["mu->0"]
        t1, t2 = 0.02, 0.01
        e = [_E("tanh", 0.5, 0.1, geom(t), model) - term.value for t in (t1, t2)]
        assert abs(_rate(e[0], e[1], t1, t2) - 2) < 0.05, (model, e)
    assert abs(lim.linear["mu->0"].value - float(lim.linear["mu->0"].coefficient.subs({c: 0.5, gamma: 0.1}))) < 1e-12


# ----------------------------------------------------------------------------- a1 → 0
@pytest.mark.parametrize("f, q", [("tanh", 2), ("relu", 1)])
def test_a1_zero(f, q):
    """a1 → 0 at fixed s², d, 𝔊 (c = 0.5, γ = 1, aligned): E_A(a1) − E_A(0) = O(a1²) for d = 0, O(a1) for d ≠ 0.

    With a signal the next term sets in late (at a1 = 0.04/0.02 the ReLU rate is still 0.76), hence a1 = 2e-3, 1e-3."""
    from symattn.backends import closed_runtime as closed_form
    from symattn.backends.context import FloatContext

    term = sa.limits(f, c=0.5, gamma=1.0, geometry=ALIGNED, which="a1->0").attention["a1->0"]
    k = sa.kernel_constants(sa.activation(f))
    assert term.remainder == (sp.O(sp.Symbol("a_1", real=True) ** q))

    def E_at(a1v):
        return float(closed_form.attention_points(FloatContext(), 0.5, 1.0, a1v, k.s2, k.d, ALIGNED.gram, 1)["E"][0])

    t1, t2 = 2e-3, 1e-3
    e = [E_at(t) - term.value for t in (t1, t2)]
    assert abs(_rate(e[0], e[1], t1, t2) - q) < 0.05, e
    if q == 2:  # d = 0: at a1 = 0 the geometry drops out (docs/theory.md §6.8)
        assert abs(term.value - sa.limits(f, c=0.5, gamma=1.0, which="a1->0").attention["a1->0"].value) < 1e-13


def test_result_object():
    """sa.limits is callable also once the module symattn.limits is imported; the result indexes by limit."""
    import symattn.limits as mod

    lim = sa.limits("tanh", c=0.5, which=("c->oo",))
    assert set(lim["c->oo"]) == {"attention", "linear"} and callable(mod) and set(lim.attention) == {"c->oo"}
    assert lim.linear["c->oo"].expr == gamma**2 / c**2
    with pytest.raises(sa.ParameterError):
        sa.limits("tanh", which="gamma->1")


def test_sqrt_law_with_a_small_noise_variance():
    """sigmoid (s² = 7e-4) at c = 3: the reduced system's 1/X has poles near the support, so its quadrature
    needs more than 512 nodes (with 512, k was 1e-3 off). k against the full solution E_A(γ)/√γ at γ = 1e-12,
    whose distance to k is O(γ) (6e-9 at γ = 1e-10, 6e-11 at 1e-12)."""
    k = sa.limits("sigmoid", c=3.0, which="gamma->0").attention["gamma->0"].value
    g = 1e-12
    np.testing.assert_allclose(float(sa.memorization_error("sigmoid", 3.0, g)) / np.sqrt(g), k, rtol=1e-9)


def test_gamma_zero_at_c_one_is_refused_when_asked():
    """At c = 1 there is no γ → 0 expansion of either form: asked by name it is a ParameterError naming c
    (it used to return an empty result); with every limit asked for, it is left out."""
    with pytest.raises(sa.ParameterError, match="invalid c="):
        sa.limits("tanh", c=1.0, which="gamma->0")
    assert "gamma->0" not in sa.limits("tanh", c=1.0, which=None).attention


# ----------------------------------------------------------------------------- the limits' own points (issue 35)
def test_limits_succeed_where_their_own_smallest_points_fail():
    """Issue 35: this call raised ConvergenceError at an internal γ = 8.6e-9 (the √γ extrapolation's smallest
    point). The points move up; the value is the √γ coefficient of the full theory, checked here at a γ the
    solver handles: E/√γ at γ = 8.6e-8 and 8.6e-7 (O(γ) apart) against k."""
    import warnings

    f, geo = "x*exp(-0.35*x**2)", sa.Geometry(snr=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lim = sa.limits(f, c=2, gamma=1, geometry=geo, which=("gamma->0",))
    assert not [w for w in caught if issubclass(w.category, sa.AccuracyWarning)]
    term = lim.attention["gamma->0"]
    assert term.form.has(sp.sqrt(gamma))
    t0 = 1e-4 * (1 - 1 / np.sqrt(2)) ** 2
    r1, r2 = (_E(f, 2.0, t, geometry=geo) / np.sqrt(t) for t in (t0 * 1e-2, t0 * 1e-1))
    # E/√γ = k + k1 γ + …: the Richardson step of the two points, and the points themselves within O(γ)
    assert abs(float(term.value) - (10 * r1 - r2) / 9) <= 1e-7 and abs(float(term.value) - r1) <= 1e-5


def test_limits_warn_nothing_at_their_own_points():
    """Issue 35: every sa.limits call raised about six AccuracyWarnings about c = 1e-6, γ = 8.6e-9 … ."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sa.limits("tanh", c=2.0, gamma=0.5, geometry=ALIGNED)
        sa.limits("relu", c=0.5, gamma=0.5, geometry=sa.Geometry(snr=2.0))
    assert not [str(w.message) for w in caught if issubclass(w.category, sa.AccuracyWarning)]
    # the user's own points still carry the assessment
    with pytest.warns(sa.AccuracyWarning):
        sa.memorization_error("tanh", 30.0, 0.5)


def test_a_limit_that_fails_names_the_users_inputs_not_its_own_points(monkeypatch):
    """When every rung of the ladder fails, the ConvergenceError names the call (activation, c, γ, geometry)
    and the limit, and no internal γ."""
    from symattn import layer
    from symattn.errors import ConvergenceError

    real = layer.memorization_error

    def failing(f, c, gamma, **kw):
        if np.all(np.asarray(gamma, dtype=float) < 1e-2):
            raise ConvergenceError("no convergence of the bulk fixed point", point={"c": c, "gamma": 1.234567e-9})
        return real(f, c, gamma, **kw)

    monkeypatch.setattr(layer, "memorization_error", failing)
    with pytest.raises(ConvergenceError) as info:
        sa.limits("tanh", c=2.0, gamma=0.75, geometry=ALIGNED, which=("gamma->0",))
    text = str(info.value)
    assert "sa.limits('tanh', c=2, gamma=0.75" in text and "'gamma->0'" in text and "1.23" not in text
    assert info.value.point == {"c": 2.0, "gamma": 0.75, "limit": "gamma->0"}


def test_linear_activation_closed_form_is_public():
    """Issue 35: f(t) = t has a closed form (docs/theory.md §7.1); limits.linear_activation returns it. At μ = 0 it
    is γ²∫dμ_S/(γ + cλ³)² (scipy quad on the Marchenko–Pastur density, outside symattn), and with a signal it
    equals the full theory of the linear activation (the Woodbury system) to 1e-10."""
    from scipy.integrate import quad

    lin = sa.limits.linear_activation   # sa.limits is the callable module: its closed forms are public
    for cv, g in [(0.5, 0.1), (2.0, 1.0), (1.0, 0.01)]:
        a, b = (1 - 1 / np.sqrt(cv)) ** 2, (1 + 1 / np.sqrt(cv)) ** 2
        dens = lambda t: cv * np.sqrt(max((b - t) * (t - a), 0.0)) / (2 * np.pi * t)   # noqa: E731
        ref, _ = quad(lambda t: dens(t) / (g + cv * t**3) ** 2, a, b, epsabs=0, epsrel=1e-12, limit=400)
        ref = g**2 * (ref + max(1 - cv, 0.0) / g**2)
        assert abs(float(lin(cv, g)["E"]) - ref) <= 1e-8 * ref, (cv, g)
        for m2 in (1.0, 4.0):
            E = _E("linear", cv, g, geometry=sa.Geometry(snr=m2))
            assert abs(float(lin(cv, g, snr=m2)["E"]) - E) <= 1e-10 * E, (cv, g, m2)
