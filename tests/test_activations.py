"""Tests of symattn.activations / symattn.activations.hermite (layer 1; docs/theory.md §1.2).

Reference values come from closed forms written out here (or from an independent mpmath /
scipy / Monte Carlo computation inside the test), never from the code under test.

Closed forms used (ξ ~ N(0,1), a_k = E[f(ξ) He_k(ξ)]/√k!):
- ReLU: a0 = 1/√(2π), a1 = 1/2, a2 = 1/(2√π), a3 = 0, a4 = −1/√(48π).
- exp: E[e^ξ He_k(ξ)] = e^{1/2} (generating function E e^{tξ} = e^{t²/2}), so a_k = e^{1/2}/√k!.
- sin/cos: from e^{iξ}: E[e^{iξ} He_k] = i^k e^{−1/2}, so sin has a_k = (−1)^((k−1)/2) e^{−1/2}/√k!
  for odd k, cos has a_k = (−1)^(k/2) e^{−1/2}/√k! for even k (a0 = e^{−1/2}).
- erf: Stein's lemma a_k√k! = E erf^{(k)}(ξ) with erf^{(k)} = (2/√π)(−1)^{k−1}H_{k−1}e^{−x²}, and
  Σ_n E[H_n(ξ)e^{−ξ²}] t^n/n! = E e^{2ξt−t²−ξ²} = e^{−t²/3}/√3, so for k = 2m+1:
  a_k = 2 (2m)! (−1/3)^m / (m! √(3π) √k!), and a_k = 0 for even k.
"""

from __future__ import annotations

import math
import pickle
import time
import warnings

import numpy as np
import pytest
import sympy as sp
from mpmath import mp

import symattn as sa
from symattn.errors import ParameterError
from symattn.activations.hermite import QuadratureWarning

DPS = 30
TOL25 = mp.mpf(10) ** -25


def close25(a, b):
    with mp.workdps(40):
        return abs(mp.mpf(a) - mp.mpf(b)) < TOL25


def sym_to_mp(e):
    return mp.mpf(sp.N(e, 45))


# ----------------------------------------------------------------------------- ReLU
def test_relu_coefficients_25_digits():
    f = sa.activation("relu")
    h = f.hermite_coefficients(kmax=4, dps=DPS)
    c = f.constants(DPS)
    with mp.workdps(40):
        ref = {
            "a0": 1 / mp.sqrt(2 * mp.pi),
            1: mp.mpf(1) / 2,
            2: 1 / (2 * mp.sqrt(mp.pi)),
            3: mp.zero,
            4: -1 / mp.sqrt(48 * mp.pi),
        }
    assert h[0] == 0  # centred f
    assert close25(c["a0"], ref["a0"])
    for k in (1, 2, 3, 4):
        assert close25(h[k], ref[k]), (k, h[k], ref[k])
    assert close25(c["a1"], ref[1])
    with mp.workdps(40):
        assert close25(c["nu"], mp.mpf(1) / 2 - 1 / (2 * mp.pi))  # ν = 1/2 − 1/(2π) (docs/theory.md §1.2)
    assert abs(f.a0 - 1 / math.sqrt(2 * math.pi)) < 1e-15
    assert f.a1 == pytest.approx(0.5, abs=1e-15)


def test_relu_exact_coefficients():
    ex = sa.activation("relu").exact_coefficients(kmax=4)
    assert ex[0] == 0
    assert sp.simplify(ex[1] - sp.Rational(1, 2)) == 0
    assert sp.simplify(ex[2] - 1 / (2 * sp.sqrt(sp.pi))) == 0
    assert ex[3] == 0
    assert sp.simplify(ex[4] + 1 / sp.sqrt(48 * sp.pi)) == 0


# ----------------------------------------------------------------------------- closed forms
def _exp_ref(k):
    return mp.exp(mp.mpf(1) / 2) / mp.sqrt(mp.factorial(k))


def _sin_ref(k):
    if k % 2 == 0:
        return mp.zero
    return (-1) ** ((k - 1) // 2) * mp.exp(-mp.mpf(1) / 2) / mp.sqrt(mp.factorial(k))


def _cos_ref(k):
    if k % 2 == 1 or k == 0:
        return mp.zero
    return (-1) ** (k // 2) * mp.exp(-mp.mpf(1) / 2) / mp.sqrt(mp.factorial(k))


def _erf_ref(k):
    if k % 2 == 0:
        return mp.zero
    m = (k - 1) // 2
    return (2 * mp.factorial(2 * m) * (-mp.mpf(1) / 3) ** m
            / (mp.factorial(m) * mp.sqrt(3 * mp.pi) * mp.sqrt(mp.factorial(k))))


@pytest.mark.parametrize("name,ref,a0", [
    ("exp", _exp_ref, lambda: mp.exp(mp.mpf(1) / 2)),
    ("sin", _sin_ref, lambda: mp.zero),
    ("cos", _cos_ref, lambda: mp.exp(-mp.mpf(1) / 2)),
    ("erf", _erf_ref, lambda: mp.zero),
])
def test_closed_form_coefficients(name, ref, a0):
    f = sa.activation(name)
    h = f.hermite_coefficients(kmax=8, dps=DPS)
    ex = f.exact_coefficients(kmax=8)
    with mp.workdps(45):
        refs = [ref(k) for k in range(9)]
        assert close25(f.constants(DPS)["a0"], a0())
    for k in range(1, 9):
        assert close25(h[k], refs[k]), (name, k, h[k], refs[k])
        assert ex[k] is not None, (name, k)
        with mp.workdps(45):
            assert abs(sym_to_mp(ex[k]) - refs[k]) < mp.mpf(10) ** -40, (name, k, ex[k])


def test_erf_a1():
    f = sa.activation("erf")
    with mp.workdps(40):
        assert close25(f.constants(DPS)["a1"], 2 / mp.sqrt(3 * mp.pi))
    assert f.a1 == pytest.approx(0.65147, abs=1e-5)  # docs/theory.md §1.2 table
    assert f.nu == pytest.approx(0.46456, abs=1e-5)


def test_tanh_a1_identity():
    """a1 = E tanh'(ξ) = 1 − E tanh²(ξ), with E tanh² from an independent mpmath.quad."""
    f = sa.activation("tanh")
    with mp.workdps(45):
        e_t2 = mp.quad(lambda t: mp.tanh(t) ** 2 * mp.exp(-t * t / 2), [-mp.inf, 0, mp.inf]) / mp.sqrt(2 * mp.pi)
        assert close25(f.hermite_coefficients(kmax=1, dps=DPS)[1], 1 - e_t2)
        assert close25(f.constants(DPS)["nu"], e_t2)  # a0 = 0 for odd f
    assert f.a1 == pytest.approx(0.60571, abs=1e-5)  # docs/theory.md §1.2 table
    assert f.nu == pytest.approx(0.39429, abs=1e-5)


def test_parseval_polynomial_exact():
    """Σ a_k² = ν exactly for a polynomial (ν from sympy.integrate of the moments)."""
    f = sa.activation("x**3 + 2*x**2 - x")
    x = sp.Symbol("x", real=True)
    g = x**3 + 2 * x**2 - x
    phi = sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)
    mean = sp.integrate(g * phi, (x, -sp.oo, sp.oo))
    nu = sp.integrate((g - mean) ** 2 * phi, (x, -sp.oo, sp.oo))
    ex = f.exact_coefficients(kmax=6)
    assert all(e is not None for e in ex)
    assert sp.simplify(sum(e**2 for e in ex) - nu) == 0
    assert ex[4] == 0 and ex[5] == 0 and ex[6] == 0
    h = f.hermite_coefficients(kmax=6, dps=DPS)
    with mp.workdps(40):
        assert close25(sum(v * v for v in h), sym_to_mp(nu))
        assert close25(f.constants(DPS)["a0"], sym_to_mp(mean))
    assert f.nu == pytest.approx(float(nu), rel=1e-14)


@pytest.mark.parametrize("name,rel", [("tanh", 1e-4), ("relu", 2e-3), ("sigmoid", 1e-8)])
def test_parseval_converges(name, rel):
    """Σ_{k≤20} a_k² approaches ν from below (docs/theory.md §1.2 convention ν = Σ a_k²)."""
    f = sa.activation(name)
    h = f.hermite_coefficients(kmax=20, dps=20)
    partial = float(sum(v * v for v in h))
    assert partial <= f.nu * (1 + 1e-12)
    assert partial == pytest.approx(f.nu, rel=rel)


# ----------------------------------------------------------------------------- Gauss–Hermite
@pytest.mark.parametrize("name", ["tanh", "erf", "gelu", "sin", "sigmoid"])
def test_gauss_hermite_matches_mpmath_for_smooth_f(name):
    f = sa.activation(name)
    gh = f.gauss_hermite_coefficients(kmax=8, nodes=200)
    h = f.hermite_coefficients(kmax=8, dps=20)
    assert isinstance(gh, np.ndarray) and gh.shape == (9,)
    assert np.max(np.abs(gh - np.array([float(v) for v in h]))) < 1e-12


def test_relu_quadrature_beats_fixed_gauss_hermite():
    """docs/theory.md §1.2: 200-node Gauss–Hermite on ReLU gives ν = 0.34019 instead of 1/2 − 1/(2π)."""
    f = sa.activation("relu")
    exact_a2 = 1 / (2 * math.sqrt(math.pi))
    gh = f.gauss_hermite_coefficients(kmax=4, nodes=200)
    h = f.hermite_coefficients(kmax=4, dps=DPS)
    err_gh = abs(gh[2] - exact_a2)
    assert err_gh > 1e-5
    with mp.workdps(40):
        assert abs(h[2] - 1 / (2 * mp.sqrt(mp.pi))) < TOL25
    # the ν of the note in docs/theory.md §1.2, from the same 200-node rule applied by hand
    x, w = np.polynomial.hermite_e.hermegauss(200)
    w = w / math.sqrt(2 * math.pi)
    fx = np.maximum(x, 0.0)
    nu_gh = w @ (fx - w @ fx) ** 2
    assert nu_gh == pytest.approx(0.34019, abs=1e-5)
    assert abs(f.nu - (0.5 - 1 / (2 * math.pi))) < 1e-15 < abs(nu_gh - f.nu)


# ----------------------------------------------------------------------------- exact coefficients
def test_exact_gelu_matches_quadrature():
    """Two independent methods (closed-form Gaussian calculus vs tanh-sinh) agree."""
    f = sa.activation("gelu")
    ex = f.exact_coefficients(kmax=6)
    h = f.hermite_coefficients(kmax=6, dps=DPS)
    assert all(e is not None for e in ex)
    with mp.workdps(40):
        for k in range(7):
            assert abs(sym_to_mp(ex[k]) - h[k]) < TOL25
    # GELU a1 = E[Φ(ξ) + ξφ(ξ)] = 1/2 exactly
    assert ex[1] == sp.Rational(1, 2)


def test_exact_none_for_non_integrable_and_fast():
    t = time.perf_counter()
    for name in ("tanh", "sigmoid", "softplus", "silu", "softsign"):
        ex = sa.activation(name).exact_coefficients(kmax=4)
        assert ex[0] == 0 and all(e is None for e in ex[1:]), name
    assert time.perf_counter() - t < 2.0


def test_exact_coefficients_callable_is_none():
    f = sa.activation(lambda t: np.tanh(t))
    assert f.exact_coefficients(3) == [0, None, None, None]


def test_model_uses_activation_duck_typed():
    from symattn.model import kernel_constants

    f = sa.activation("relu")
    kc = kernel_constants(f, n=1000, c=1.0)
    assert kc.a1 == pytest.approx(0.5) and kc.d == pytest.approx(1 - 1 / math.sqrt(2 * math.pi * 1000))
    with mp.workdps(40):
        assert close25(f.constants(30)["s2"], mp.mpf(1) / 4 - 1 / (2 * mp.pi))


# ----------------------------------------------------------------------------- specs and interface
def test_spec_kinds_and_identity():
    f = sa.activation("tanh")
    assert sa.activation(f) is f
    assert sa.activation("tanh") is f  # cached
    assert f.name == "tanh" and f.expr == sa.CATALOG["tanh"] and f.kind == "catalog"
    g = sa.activation("x*erf(x)")
    assert g.name == "x*erf(x)" and g.kind == "expression"
    x = sp.Symbol("x")  # no assumptions: still accepted and identified with the real x
    h = sa.activation(sp.tanh(x))
    assert h.kind == "expression" and h == f and h.a1 == f.a1
    c = sa.activation(lambda t: np.tanh(t))
    assert c.expr is None and c.name == "<lambda>" and c.kind == "callable"
    assert "tanh" in repr(f)
    assert sa.activation("relu").kinks == (0.0,)
    assert sa.activation("swish").name == "silu"


def test_construction_is_cheap():
    t = time.perf_counter()
    f = sa.Activation("tanh")
    assert time.perf_counter() - t < 0.5
    t = time.perf_counter()
    f.a1, f.nu  # noqa: B018  (lazy constants)
    assert time.perf_counter() - t < 2.0


def test_mpmath_callable_full_precision_float_callable_warns():
    f_mp = sa.activation(mp.tanh)
    assert not f_mp.float_only
    ref = sa.activation("tanh").hermite_coefficients(kmax=3, dps=DPS)
    got = f_mp.hermite_coefficients(kmax=3, dps=DPS)
    assert all(close25(a, b) for a, b in zip(got, ref))
    f_np = sa.activation(lambda t: np.tanh(t))
    assert f_np.float_only
    with pytest.warns(QuadratureWarning, match="float64"):
        got = f_np.hermite_coefficients(kmax=3, dps=DPS)
    assert abs(float(got[1]) - float(ref[1])) < 1e-13


def test_pickle_roundtrip():
    for spec in ("relu", "x*erf(x)"):
        f = sa.activation(spec)
        g = pickle.loads(pickle.dumps(f))
        assert g == f and g.name == f.name and g.a1 == f.a1


def test_catalog_constants_match_math_table():
    """The docs/theory.md §1.2 table: cos − e^{-1/2}: a1 = 0, a2 = −0.42888, ν = 0.19979; He3: ν = 6; |t|: ν = 1 − 2/π."""
    cos = sa.activation("cos")
    assert abs(cos.a1) < 1e-15 and cos.nu == pytest.approx(0.19979, abs=1e-5)
    assert float(cos.hermite_coefficients(2, 20)[2]) == pytest.approx(-0.42888, abs=1e-5)
    assert sa.activation("he3").nu == pytest.approx(6.0, rel=1e-14)
    assert sa.activation("abs").nu == pytest.approx(1 - 2 / math.pi, rel=1e-14)
    assert sa.activation("abs").s2 == pytest.approx(1 - 2 / math.pi, rel=1e-14)
    lr = sa.activation("leaky_relu")  # max(x, x/10): a1 = (1 + 1/10)/2
    assert lr.a1 == pytest.approx(0.55, abs=1e-15)


# ----------------------------------------------------------------------------- errors
@pytest.mark.parametrize("call,name", [
    (lambda f: f.hermite_coefficients(kmax=-1), "kmax"),
    (lambda f: f.hermite_coefficients(kmax=2.5), "kmax"),
    (lambda f: f.hermite_coefficients(kmax=3, dps=10), "dps"),
    (lambda f: f.constants(dps=14), "dps"),
    (lambda f: f.exact_coefficients(kmax=-2), "kmax"),
    (lambda f: f.gauss_hermite_coefficients(kmax=-1), "kmax"),
    (lambda f: f.gauss_hermite_coefficients(nodes=0), "nodes"),
])
def test_parameter_errors(call, name):
    with pytest.raises(ParameterError) as e:
        call(sa.activation("tanh"))
    assert e.value.name == name and "allowed" in str(e.value)


def test_no_warnings_on_normal_use():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = sa.activation("softplus")
        coeffs = f.hermite_coefficients(kmax=8, dps=50)
        dn = f.d_n(200, snr=1.0)
    assert not caught, [str(w.message) for w in caught]
    assert len(coeffs) == 9 and np.isfinite(float(dn))
