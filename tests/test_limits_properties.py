r"""Property tests (hypothesis) of ``sa.limits`` over random activations, geometries, c and γ (issue 35).

The domain: catalog activations (the superlinear ones with ``diagonal="zero"``) and user expressions with a
random coefficient, (μ, w_K, w_Q) any three vectors of norm up to 1.5 (their Gram matrix), c ∈ [0.1, 5],
γ ∈ [1e-4, 1e3] (log-uniform). Each example checks:

- ``sa.limits`` at the point raises nothing and warns no AccuracyWarning (its own points are internal);
- E_A ∈ (0, 1] and non-decreasing in γ at γ/10, γ, 10γ;
- the limits of docs/theory.md §7 against the full theory at a point near the limit (not against the
  numbers the limit returns for the same points): γ → ∞ (1 − E = 2κ/γ to 2 %, at γ = 10⁴(1 + κ)); γ → 0
  (c < 1: E(γ) → k; c > 1: E/γ^q → k, q the law the limit names); c → 0 of E_LR (closed form) and μ → θμ
  (E even in θ: the bulk value to O(θ²)).

Examples are few and derandomised (CI runs the same ones): the whole module stays under 60 s.
"""

from __future__ import annotations

import warnings

import numpy as np
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import symattn as sa
from symattn.activations.catalog import CATALOG
from symattn.systems.symbols import gamma as gamma_symbol

LIMITS_PROPS = settings(max_examples=8, deadline=None, derandomize=True, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TEMPLATES = ("x*exp(-{a}*x**2)", "tanh({a}*x)", "sin(x) + {a}*x", "erf({a}*x) + x/4", "x/(1 + {a}*x**2)",
             "cos({a}*x)", "log(1 + exp({a}*x))")


def log_uniform(lo, hi):
    return st.floats(np.log(lo), np.log(hi)).map(lambda v: float(np.exp(v)))


@st.composite
def activations(draw):
    """(activation, diagonal): a catalog name or a user expression."""
    if draw(st.booleans()):
        name = draw(st.sampled_from(sorted(CATALOG)))
        return name, "zero" if sa.activation(name).superlinear else "f"
    a = draw(st.floats(0.1, 2.0)).__round__(3)
    return draw(st.sampled_from(TEMPLATES)).format(a=a), "f"


@st.composite
def geometries(draw):
    coords = st.floats(-1.0, 1.0)
    V = np.array([[draw(coords) for _ in range(3)] for _ in range(3)]) * 1.5 / np.sqrt(3)
    G = V @ V.T
    return sa.Geometry(snr=G[0, 0], wk2=G[1, 1], wq2=G[2, 2], mu_wk=G[0, 1], mu_wq=G[0, 2], wk_wq=G[1, 2])


def _E(f, c, g, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sa.AccuracyWarning)   # the user's own points may be unvalidated
        return np.asarray(sa.memorization_error(f, c, g, **kw), dtype=float).reshape(-1)


@LIMITS_PROPS
@given(act=activations(), geo=geometries(), c=log_uniform(0.1, 5.0), gamma=log_uniform(1e-4, 1e3))
def test_limits_hold_on_random_inputs(act, geo, c, gamma):
    f, diagonal = act
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lim = sa.limits(f, c=c, gamma=gamma, geometry=geo, diagonal=diagonal)
    assert not [w for w in caught if issubclass(w.category, sa.AccuracyWarning)], [str(w.message) for w in caught]
    kw = dict(geometry=geo, diagonal=diagonal)
    E = _E(f, c, [gamma / 10, gamma, 10 * gamma], **kw)
    assert np.all((E > 0) & (E <= 1)), E
    assert np.all(np.diff(E) >= -1e-12 * E[1:]), E

    A = lim.attention
    # γ → ∞: 1 − E = 2κ_A/Γ (1 + O(1/Γ))
    kappa = float(A["gamma->oo"].value)
    assert kappa > 0
    big = 1e4 * (1 + kappa)
    one_minus = 1 - _E(f, c, big, **kw)[0]
    assert abs(one_minus - 2 * kappa / big) <= 0.02 * 2 * kappa / big, (one_minus, kappa, big)
    # γ → 0
    if "gamma->0" in A:
        term = A["gamma->0"]
        edge = (1 - np.sqrt(c)) ** 2 if c < 1 else (1 - 1 / np.sqrt(c)) ** 2
        t = 1e-3 * edge
        Et = _E(f, c, t, **kw)[0]
        if c < 1:
            assert abs(Et - float(term.value)) <= 1e-3, (Et, term)
        else:
            q = 0.5 if term.form.has(sp.sqrt(gamma_symbol)) else 2.0
            assert abs(Et / t**q - float(term.value)) <= 0.05 * abs(float(term.value)), (Et / t**q, term)
    # c → 0 of E_LR: −γ² d/dγ (1 + γ)/(γ(1 + γ + ‖μ‖²)) = ((1 + γ)² + ‖μ‖²)/(1 + γ + ‖μ‖²)², by hand
    m = geo.snr
    closed = ((1 + gamma) ** 2 + m) / (1 + gamma + m) ** 2
    assert abs(float(lim.linear["c->0"].value) - closed) <= 1e-9 * closed
    assert abs(_E(f, 1e-5, gamma, model="linear", **kw)[0] - closed) <= 1e-3
    # μ → θμ: E(θμ) → the bulk value, O(θ²)
    theta = 1e-3
    g = geo.as_dict()
    small = sa.Geometry(snr=g["snr"] * theta**2, wk2=g["wk2"], wq2=g["wq2"], mu_wk=g["mu_wk"] * theta,
                        mu_wq=g["mu_wq"] * theta, wk_wq=g["wk_wq"])
    assert abs(_E(f, c, gamma, geometry=small, diagonal=diagonal)[0] - float(A["mu->0"].value)) <= 1e-4
