"""Tests of the exact finite-n Monte Carlo (symattn/montecarlo.py, docs/theory.md §2)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import numpy as np
import pytest

import symattn as sa
from symattn.errors import ParameterError
from symattn.model import Geometry, dimension
from symattn.montecarlo import (
    SimulationResult,
    draw_errors,
    draw_generators,
    kernel_matrix,
    sample_tokens,
    simulate,
)


# ----------------------------------------------------------------------------- activations
class _Act:
    """Duck-typed stand-in for symattn.activations.Activation (centred f)."""

    def __init__(self, name, fn, superlinear=False):
        self.name = name
        self._fn = fn
        self.superlinear = superlinear

    def numpy(self, t):
        return self._fn(t)

    def torch(self, t):
        return self._fn(t)


IDENTITY = _Act("identity", lambda t: t)           # f(t) = t is centred (a0 = 0)
HE3 = _Act("he3", lambda t: t**3 - 3 * t, superlinear=True)


def _tanh():
    """sa.activation("tanh") (the centred catalog tanh of symattn.activations)."""
    if importlib.util.find_spec("symattn.activations") is not None:
        return sa.activation("tanh")
    return _Act("tanh", lambda t: t.tanh() if hasattr(t, "tanh") else np.tanh(t))


TANH = _tanh()
G1 = Geometry(snr=1.0, wk2=0.5, wq2=2.0, mu_wk=0.3, mu_wq=-0.4, wk_wq=0.2)


def _direct(K, X, y, gamma):
    """E = γ² ‖(ΦᵀΦ/n + γI)^{-1} ŷ‖² with Φ = XK, ŷ = y/√n (np.linalg.solve)."""
    n = y.size
    Phi = X @ K
    yh = y / math.sqrt(n)
    return np.array([g**2 * np.sum(np.linalg.solve(Phi.T @ Phi / n + g * np.eye(n), yh) ** 2) for g in gamma])


def _closed_form_linear(c, gamma):
    """E_LR for μ = 0 (docs/theory.md §3): F = m, E = −γ² F'(γ), F' by a central difference (h = 1e-5 γ)."""

    def m(g):
        mt = (-(1 - c + g) + np.sqrt((1 - c + g) ** 2 + 4 * c * g)) / (2 * c * g)
        return c * mt + (1 - c) / g

    gamma = np.asarray(gamma, dtype=float)
    h = 1e-5 * gamma
    return -(gamma**2) * (m(gamma + h) - m(gamma - h)) / (2 * h)


# ----------------------------------------------------------------------------- reproducibility
def test_same_seed_identical_different_seed_different():
    kw = dict(n=80, c=0.5, gamma=[0.01, 0.1, 1.0], geometry=G1, draws=3, progress=False)
    a = simulate(TANH, seed=7, **kw)
    b = simulate(TANH, seed=7, **kw)
    c = simulate(TANH, seed=8, **kw)
    assert np.array_equal(a.attention, b.attention) and np.array_equal(a.linear, b.linear)
    assert a.to_dict() == b.to_dict()
    assert not np.array_equal(a.attention, c.attention)
    assert not np.array_equal(a.linear, c.linear)


def test_draw_k_does_not_depend_on_number_of_draws():
    kw = dict(n=60, c=1.0, gamma=[0.1, 1.0], seed=3, progress=False)
    a = simulate(TANH, draws=2, **kw)
    b = simulate(TANH, draws=4, **kw)
    assert np.array_equal(a.attention, b.attention[:2])
    assert np.array_equal(a.linear, b.linear[:2])


def test_seed_none_records_entropy_that_reproduces():
    a = simulate(TANH, n=40, c=1.0, gamma=[0.1], draws=2, seed=None, progress=False)
    b = simulate(TANH, n=40, c=1.0, gamma=[0.1], draws=2, seed=a.seed, progress=False)
    assert np.array_equal(a.attention, b.attention)


def test_sample_tokens_balanced_and_formula():
    n, p = 51, 20
    mu = np.linspace(-1, 1, p)
    X, y = sample_tokens(n, p, mu, np.random.default_rng(0))
    assert X.shape == (p, n) and sorted(set(y)) == [-1.0, 1.0]
    assert (y == 1).sum() == n - n // 2 and (y == -1).sum() == n // 2
    rng = np.random.default_rng(0)
    rng.permutation(n)  # y is drawn first, Z second
    Z = rng.standard_normal((p, n))
    np.testing.assert_array_equal(X, np.outer(mu, y) + Z)


# ----------------------------------------------------------------------------- exactness
def test_linear_f_kernel_is_gram_over_p():
    n, c = 50, 0.8
    p = dimension(n, c)
    X, _ = sample_tokens(n, p, G1.vectors(p)[0], np.random.default_rng(1))
    W = G1.weight_matrix(p)
    K = kernel_matrix(IDENTITY, X, W)
    np.testing.assert_allclose(K, X.T @ W @ X / p, rtol=0, atol=1e-12)
    K0 = kernel_matrix(IDENTITY, X)  # W = None means I_p
    np.testing.assert_allclose(K0, X.T @ X / p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("c", [0.7, 1.6])  # the ΦᵀΦ route (p <= 4n/3) and the KᵀGK route
@pytest.mark.parametrize("f", [IDENTITY, TANH], ids=["identity", "tanh"])
def test_attention_matches_direct_solve(f, c):
    n, seed, gamma = 60, 11, np.array([1e-2, 0.1, 1.0, 10.0])
    p = dimension(n, c)
    res = simulate(f, n=n, c=c, gamma=gamma, geometry=G1, draws=1, seed=seed, progress=False)
    X, y = sample_tokens(n, p, G1.vectors(p)[0], draw_generators(seed, 1)[0])
    K = kernel_matrix(f, X, G1.weight_matrix(p))
    np.testing.assert_allclose(res.attention[0], _direct(K, X, y, gamma), rtol=1e-10, atol=0)


def test_linear_regression_matches_direct_ridge():
    n, c, seed, gamma = 70, 0.6, 5, np.array([1e-3, 1e-2, 0.1, 1.0, 10.0])
    p = dimension(n, c)
    res = simulate(TANH, n=n, c=c, gamma=gamma, geometry=G1, draws=1, seed=seed, progress=False)
    X, y = sample_tokens(n, p, G1.vectors(p)[0], draw_generators(seed, 1)[0])
    yh = y / math.sqrt(n)
    direct = [g**2 * np.sum(np.linalg.solve(X.T @ X / n + g * np.eye(n), yh) ** 2) for g in gamma]
    np.testing.assert_allclose(res.linear[0], direct, rtol=1e-10, atol=0)


def test_eigh_and_tridiagonal_methods_agree():
    kw = dict(n=90, c=1.0, gamma=[1e-3, 1e-2, 0.1, 1.0, 10.0], geometry=G1, draws=2, seed=2,
              progress=False, trace_estimator=True)
    a = simulate(TANH, method="eigh", **kw)
    b = simulate(TANH, method="tridiagonal", **kw)
    for k in ("attention", "linear", "attention_trace", "linear_trace"):
        np.testing.assert_allclose(getattr(a, k), getattr(b, k), rtol=1e-9, atol=0)


def test_float32_close_to_float64():
    kw = dict(n=80, c=1.0, gamma=[0.1, 1.0, 10.0], geometry=G1, draws=1, seed=6, progress=False)
    a = simulate(TANH, **kw)
    b = simulate(TANH, dtype="float32", **kw)
    np.testing.assert_allclose(b.attention, a.attention, rtol=1e-3)
    np.testing.assert_allclose(b.linear, a.linear, rtol=1e-3)


def test_explicit_W_and_mu_equal_geometry():
    rank2 = Geometry.from_gram(np.diag([1.0, 0.5, 0.3, 0.4, 0.2]) + 0.05, rank=2)
    n, c = 50, 0.8
    p = dimension(n, c)
    mu = rank2.vectors(p)[0]
    a = simulate(TANH, n=n, c=c, gamma=[0.1, 1.0], geometry=rank2, draws=2, seed=4, progress=False)
    b = simulate(TANH, n=n, c=c, gamma=[0.1, 1.0], W=rank2.weight_matrix(p), mu=mu, draws=2, seed=4,
                 progress=False)
    np.testing.assert_allclose(a.attention, b.attention, rtol=1e-10)
    np.testing.assert_array_equal(a.linear, b.linear)


def test_diagonal_zero_and_superlinear():
    n, p = 30, 20
    X, _ = sample_tokens(n, p, None, np.random.default_rng(0))
    K = kernel_matrix(TANH, X, diagonal="zero")
    assert np.all(np.diag(K) == 0)
    Kf = kernel_matrix(TANH, X, diagonal="f")
    np.testing.assert_allclose(np.diag(Kf), np.tanh(np.sum(X * X, axis=0) / math.sqrt(p)) / math.sqrt(p))
    np.testing.assert_array_equal(K - np.diag(np.diag(K)), Kf - np.diag(np.diag(Kf)))
    with pytest.raises(ParameterError, match="diagonal='zero'"):
        simulate(HE3, n=40, c=1.0, gamma=[0.1], draws=1, progress=False)
    with pytest.raises(ParameterError, match="diagonal"):
        kernel_matrix(HE3, X)
    res = simulate(HE3, n=40, c=1.0, gamma=[0.1], draws=1, diagonal="zero", progress=False)
    assert np.all(np.isfinite(res.attention))


def test_callable_and_draw_errors():
    n, c, seed = 40, 1.0, 9
    a = simulate(np.tanh, n=n, c=c, gamma=[0.1, 1.0], draws=1, seed=seed, progress=False,
                 models=("attention",))
    b = simulate(_Act("tanh", np.tanh), n=n, c=c, gamma=[0.1, 1.0], draws=1, seed=seed, progress=False,
                 models="attention")
    np.testing.assert_array_equal(a.attention, b.attention)
    assert a.linear is None and a.to_dict()["E_linear"] is None
    X, y = sample_tokens(n, dimension(n, c), None, draw_generators(seed, 1)[0])
    np.testing.assert_allclose(draw_errors(np.tanh, X, y, [0.1, 1.0])["attention"], a.attention[0], rtol=1e-12)


@pytest.mark.skipif(importlib.util.find_spec("symattn.activations") is None,
                    reason="symattn.activations not written yet")
def test_activation_by_name():
    a = simulate("tanh", n=40, c=1.0, gamma=[0.1], draws=1, seed=1, progress=False)
    b = simulate(sa.activation("tanh"), n=40, c=1.0, gamma=[0.1], draws=1, seed=1, progress=False)
    np.testing.assert_array_equal(a.attention, b.attention)


# ----------------------------------------------------------------------------- result object
def test_to_dict_contract_and_sem():
    res = simulate(TANH, n=40, c=0.5, gamma=[0.01, 0.1], draws=3, seed=0, progress=False)
    assert isinstance(res, SimulationResult)
    d = res.to_dict()
    assert list(d) == ["gamma", "n", "p", "draws", "E_attention", "E_linear"]
    assert d["gamma"] == [0.01, 0.1] and d["n"] == 40 and d["p"] == 20 and d["draws"] == 3
    for k in ("E_attention", "E_linear"):
        assert list(d[k]) == ["mean", "sem"] and all(isinstance(v, float) for v in d[k]["mean"] + d[k]["sem"])
    np.testing.assert_allclose(d["E_attention"]["sem"], res.attention.std(axis=0, ddof=1) / math.sqrt(3))
    np.testing.assert_allclose(res.mean["linear"], res.linear.mean(axis=0))
    json.dumps(d)
    one = simulate(TANH, n=40, c=0.5, gamma=[0.1], draws=1, seed=0, progress=False, trace_estimator=True)
    assert math.isnan(one.to_dict()["E_attention"]["sem"][0])
    assert set(one.to_dict()) == {"gamma", "n", "p", "draws", "E_attention", "E_linear",
                                  "E_attention_trace", "E_linear_trace"}


def test_progress_bar_forced(capsys):
    simulate(TANH, n=30, c=1.0, gamma=[0.1], draws=2, progress=True)
    assert "draw" in capsys.readouterr().err


# ----------------------------------------------------------------------------- statistics
def test_linear_regression_vs_closed_form_fast():
    # n = 400: E_LR per draw fluctuates by O(n^{-1/2}); the mean over draws is checked against
    # the limit within 3 se plus 2% (the O(1/n) finite-n bias; docs/theory.md §3 quotes <= 1.5% at n = 2000,
    # and at n = 400 the bias is a few times larger). The trace estimator has the same mean as
    # E_LR here (μ = 0 and ZᵀZ is orthogonally invariant) and a far smaller variance; it is held
    # to 2% (measured: <= 0.02% at c = 0.5 and 0.9% at c = 2, γ = 0.01, where the smallest
    # eigenvalues of XᵀX/n dominate).
    gamma = np.array([0.01, 0.1, 1.0, 10.0])
    for c in (0.5, 2.0):
        res = simulate(TANH, n=400, c=c, gamma=gamma, draws=24, seed=1, progress=False,
                       models="linear", trace_estimator=True)
        theory = _closed_form_linear(c, gamma)
        gap = np.abs(res.linear_mean - theory)
        assert np.all(gap <= 3 * res.linear_sem + 0.02 * theory), (c, res.linear_mean, theory)
        np.testing.assert_allclose(res.linear_trace_mean, theory, rtol=2e-2)


@pytest.mark.slow
def test_linear_regression_vs_closed_form_n2000():
    gamma = np.array([0.01, 0.1, 1.0, 10.0])
    for c in (0.5, 1.0, 2.0):
        res = simulate(TANH, n=2000, c=c, gamma=gamma, draws=6, seed=2, progress=False,
                       models="linear", trace_estimator=True)
        theory = _closed_form_linear(c, gamma)
        allow = 0.005 if c != 1.0 else 0.03  # c = 1: the hard edge of MP at γ = 0.01 (docs/theory.md §3)
        assert np.all(np.abs(res.linear_mean - theory) <= 3 * res.linear_sem + allow * theory)
        np.testing.assert_allclose(res.linear_trace_mean, theory, rtol=allow)


def test_closed_form_reproduces_math_table():
    # docs/theory.md §3: c = 2, m2 = 0 theory 1.8863e-4 / 1.2272e-2 / 0.20711 / 0.72157
    np.testing.assert_allclose(_closed_form_linear(2.0, [0.01, 0.1, 1.0, 10.0]),
                               [1.8863e-4, 1.2272e-2, 0.20711, 0.72157], rtol=2e-4)


# ----------------------------------------------------------------------------- torch
def test_torch_cpu_matches_numpy():
    pytest.importorskip("torch")
    kw = dict(n=200, c=1.0, gamma=[0.01, 0.1, 1.0], geometry=G1, draws=8, progress=False)
    a = simulate(TANH, seed=0, backend="numpy", **kw)
    t = simulate(TANH, seed=0, backend="torch", device="cpu", **kw)
    # the same per-draw streams (tokens are sampled by numpy): equal up to rounding
    np.testing.assert_allclose(t.attention, a.attention, rtol=1e-8)
    np.testing.assert_allclose(t.linear, a.linear, rtol=1e-8)
    # and statistical agreement between independent streams
    u = simulate(TANH, seed=1, backend="torch", device="cpu", **kw)
    for m in ("attention", "linear"):
        se = np.hypot(getattr(a, m + "_sem"), getattr(u, m + "_sem"))
        assert np.all(np.abs(getattr(a, m + "_mean") - getattr(u, m + "_mean")) <= 4 * se)
    assert t.backend == "torch" and t.device == "cpu"


@pytest.mark.gpu
def test_torch_cuda_matches_numpy():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    kw = dict(n=300, c=1.0, gamma=[0.01, 0.1, 1.0], geometry=G1, draws=2, seed=0, progress=False,
              trace_estimator=True)
    a = simulate(TANH, backend="numpy", **kw)
    g = simulate(TANH, backend="torch", device="cuda", **kw)
    assert g.device.startswith("cuda")
    for m in ("attention", "linear", "attention_trace", "linear_trace"):
        np.testing.assert_allclose(getattr(g, m), getattr(a, m), rtol=1e-7)


def test_torch_missing_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(ParameterError, match=r"pip install 'symattn\[gpu\]'"):
        simulate(TANH, n=20, c=1.0, gamma=[0.1], draws=1, backend="torch", progress=False)


def test_cuda_unavailable_is_parameter_error():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available")
    with pytest.raises(ParameterError, match="device"):
        simulate(TANH, n=20, c=1.0, gamma=[0.1], draws=1, backend="torch", device="cuda", progress=False)


# ----------------------------------------------------------------------------- invalid inputs
@pytest.mark.parametrize("kwargs, name", [
    (dict(n=1), "n"),
    (dict(n=10.5), "n"),
    (dict(draws=0), "draws"),
    (dict(gamma=[0.1, float("nan")]), "gamma"),
    (dict(gamma=[-1.0]), "gamma"),
    (dict(c=0.0), "c"),
    (dict(backend="foo"), "backend"),
    (dict(diagonal="none"), "diagonal"),
    (dict(W=np.eye(7)), "W"),
    (dict(W=np.full((10, 10), np.nan)), "W"),
    (dict(mu=np.ones(3)), "mu"),
    (dict(W=np.eye(10), geometry=G1), "geometry"),
    (dict(models=("softmax",)), "models"),
    (dict(seed=-1), "seed"),
    (dict(method="qr"), "method"),
    (dict(dtype="float16"), "dtype"),
    (dict(device="cuda"), "device"),  # with the numpy backend
])
def test_invalid_inputs(kwargs, name):
    base = dict(n=20, c=0.5, gamma=[0.1], draws=1, progress=False)
    base.update(kwargs)
    with pytest.raises(ParameterError) as err:
        simulate(TANH, **base)
    assert err.value.name == name
