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
from symattn.layer import simulate
from symattn.montecarlo import (
    SimulationResult,
    draw_errors,
    draw_generators,
    kernel_matrix,
    sample_tokens,
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
    da, db = a.to_dict(), b.to_dict()
    da["provenance"].pop("timestamp"), db["provenance"].pop("timestamp")  # the only key that may differ
    assert da == db
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
    assert list(d) == ["gamma", "n", "p", "draws", "E_attention", "E_linear", "provenance"]
    assert d["gamma"] == [0.01, 0.1] and d["n"] == 40 and d["p"] == 20 and d["draws"] == 3
    for k in ("E_attention", "E_linear"):
        assert list(d[k]) == ["mean", "sem"] and all(isinstance(v, float) for v in d[k]["mean"] + d[k]["sem"])
    np.testing.assert_allclose(d["E_attention"]["sem"], res.attention.std(axis=0, ddof=1) / math.sqrt(3))
    np.testing.assert_allclose(res.mean["linear"], res.linear.mean(axis=0))
    json.dumps(d)
    one = simulate(TANH, n=40, c=0.5, gamma=[0.1], draws=1, seed=0, progress=False, trace_estimator=True)
    assert math.isnan(one.to_dict()["E_attention"]["sem"][0])
    assert set(one.to_dict()) == {"gamma", "n", "p", "draws", "E_attention", "E_linear",
                                  "E_attention_trace", "E_linear_trace", "provenance"}


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


# ----------------------------------------------------------------------------- provenance
def test_to_dict_provenance():
    geo = Geometry(snr=1.0, wk2=0.5)
    res = simulate(TANH, n=40, c=0.5, gamma=[0.1, 1.0], geometry=geo, draws=2, seed=5, progress=False,
                   diagonal="zero", models="attention", method="eigh")
    prov = res.to_dict()["provenance"]
    assert (prov["seed"], prov["backend"], prov["dtype"]) == (5, "numpy", "float64")
    assert prov["symattn"] == sa.__version__ and prov["versions"]["numpy"] == np.__version__
    assert prov["timestamp"] and set(prov["versions"]) >= {"numpy", "scipy", "sympy", "mpmath", "torch"}
    par = prov["parameters"]
    assert (par["activation"], par["n"], par["p"], par["c"], par["gamma"]) == ("tanh", 40, 20, 0.5, [0.1, 1.0])
    assert (par["diagonal"], par["draws"], par["models"], par["method"]) == ("zero", 2, ["attention"], "eigh")
    assert par["geometry"] == geo.as_dict() and par["W"] is None and par["mu"] is None
    json.dumps(prov)
    # explicit W and mu are recorded by a digest of their bytes
    W = np.eye(20) * 1.5
    res = simulate(TANH, n=40, c=0.5, gamma=[0.1], W=W, draws=1, progress=False)
    par = res.to_dict()["provenance"]["parameters"]
    assert par["geometry"] is None and par["mu"] is None and par["W"]["shape"] == [20, 20]
    import hashlib

    assert par["W"]["sha256"] == hashlib.sha256(W.tobytes()).hexdigest()


# ----------------------------------------------------------------------------- resolution at tiny γ
def _exact_errors(Phi, y, gamma):
    """E(γ) = γ²‖(ΦᵀΦ/n + γ)^{-1}ŷ‖² from the SVD of Φ/√n (p×n), without ever forming ΦᵀΦ: the
    eigenvalues σ_k² carry an absolute error ~eps·σ_max·σ_k (not eps·σ_max²) and the null space of
    Φ (dimension n − p) is handled exactly, as the residual of ŷ after its projection on the
    right singular vectors."""
    n = y.size
    _, s, Vt = np.linalg.svd(Phi / math.sqrt(n), full_matrices=False)
    yh = y / math.sqrt(n)
    proj = Vt @ yh
    null = yh - Vt.T @ proj
    lam = s**2
    return np.array([float(np.sum(proj**2 * (g / (lam + g)) ** 2) + null @ null) for g in gamma]), float(null @ null)


def _gamma_min_from(err) -> float:
    import re

    return float(re.search(r"gamma >= ([0-9.e+-]+)", str(err)).group(1))


def test_tiny_gamma_refused_with_smallest_resolvable_value():
    """`simulate --n 400 --c 0.5 --gamma 1e-14 1e-16` gave 0.42 and 0.0035 where E >= 1 - c: refused now."""
    for model in ("linear", "attention"):
        with pytest.raises(ParameterError) as err:
            simulate(TANH, n=400, c=0.5, gamma=[1e-14, 1e-16, 0.1], draws=1, progress=False, models=model)
        assert err.value.name == "gamma" and err.value.value == [1e-14, 1e-16]
        assert "n=400, p=200, float64" in str(err.value)
        g_min = _gamma_min_from(err.value)
        assert 1e-10 < g_min < 1e-6
        simulate(TANH, n=400, c=0.5, gamma=[2 * g_min], draws=1, progress=False, models=model)  # accepted
    # float32 resolves far less
    with pytest.raises(ParameterError, match="float32") as err:
        simulate(TANH, n=400, c=0.5, gamma=[1e-4], draws=1, progress=False, dtype="float32")
    assert _gamma_min_from(err.value) > 1e-3


def test_refusal_is_needed_and_bound_holds():
    """Below the bound the plain spectral formula is measurably wrong (against the exact SVD route);
    at and above it, every draw's E agrees with the exact value to RESOLUTION_TOL = 1e-6."""
    from symattn.montecarlo import RESOLUTION_TOL, smallest_resolvable_gamma, spectral_errors

    n, p = 400, 200
    for seed in range(3):
        X, y = sample_tokens(n, p, None, np.random.default_rng(seed))
        for Phi in (X, X @ kernel_matrix(TANH, X)):
            M = Phi.T @ Phi / n
            lam, V = np.linalg.eigh(M)
            g_min = smallest_resolvable_gamma(n, lam[-1], 0.0)
            gam = np.array([1e-14, g_min, 10 * g_min, 1e-3])
            exact, _ = _exact_errors(Phi, y, gam)
            plain = spectral_errors(lam, V.T @ y, gam, n)[0]
            assert abs(plain[0] / exact[0] - 1) > 1e-3  # γ = 1e-14: the rounding noise dominates
            assert np.all(np.abs(plain[1:] / exact[1:] - 1) <= RESOLUTION_TOL["float64"])
            model = "linear" if Phi is X else "attention"
            got = draw_errors(TANH, X, y, gam[1:] * 1.01, models=model)[model]
            np.testing.assert_allclose(got, _exact_errors(Phi, y, gam[1:] * 1.01)[0], rtol=1e-6, atol=0)


@pytest.mark.parametrize("model", ["linear", "attention"])
def test_small_gamma_limit_is_one_minus_c(model):
    """c < 1, μ = 0: rank M = p, so E(γ → 0) = ‖P_null ŷ‖², whose mean is exactly (n − p)/n: for E_LR
    the null space of X is uniform; for E_A with an odd f (tanh), K(XD) = D K(X) D for every sign
    matrix D, so E[P_null] commutes with all D and all permutations, i.e. it is (n − p)/n · I
    (docs/theory.md §7.3: E → 1 − c). Checked at the smallest resolvable γ (× 2), per draw against
    the exact SVD value and on average against 1 − p/n."""
    n, c, draws, seed = 400, 0.5, 16, 3
    p = dimension(n, c)
    with pytest.raises(ParameterError) as err:
        simulate(TANH, n=n, c=c, gamma=[1e-13], draws=draws, seed=seed, progress=False, models=model)
    g = 2 * _gamma_min_from(err.value)
    res = simulate(TANH, n=n, c=c, gamma=[g], draws=draws, seed=seed, progress=False, models=model)
    E = getattr(res, model)[:, 0]
    nulls = []
    for k, rng in enumerate(draw_generators(seed, draws)):
        X, y = sample_tokens(n, p, None, rng)
        Phi = X if model == "linear" else X @ kernel_matrix(TANH, X)
        exact, null = _exact_errors(Phi, y, [g])
        assert E[k] == pytest.approx(exact[0], rel=1e-6)
        assert exact[0] - null < 1e-4  # γ is already in the limit: E(γ) − E(0) = O(γ)
        nulls.append(null)
    se = float(np.std(E, ddof=1) / math.sqrt(draws))
    assert abs(E.mean() - (1 - p / n)) <= 3 * se, (E.mean(), se)
    assert np.all(E > 0.3)  # was 0.0035 at γ = 1e-16


def test_well_conditioned_m_resolves_tiny_gamma():
    """c = 2: λ_min(XᵀX/n) ≈ (√c − 1)² > 0, so E_LR(γ) = γ² ŷᵀM^{-2}ŷ + O(γ³) is resolved at γ = 1e-12."""
    n, c, seed = 100, 2.0, 4
    res = simulate(TANH, n=n, c=c, gamma=[1e-12], draws=1, seed=seed, progress=False, models="linear")
    X, y = sample_tokens(n, dimension(n, c), None, draw_generators(seed, 1)[0])
    z = np.linalg.solve(X.T @ X / n, y / math.sqrt(n))
    assert res.linear[0, 0] == pytest.approx(1e-24 * float(z @ z), rel=1e-6)


@pytest.mark.filterwarnings("ignore::symattn.errors.QuadratureWarning")  # the Hermite constants of x**20
def test_overflowing_activation_is_an_error_naming_f():
    """x**200 (diagonal zeroed) overflows in M = ΦᵀΦ/n: numpy and torch both refuse (torch gave null)."""
    f = sa.activation("x**200")
    g20 = sa.activation("x**20")
    backends = ["numpy"] + (["torch"] if importlib.util.find_spec("torch") else [])
    for backend in backends:
        kw = dict(device="cpu") if backend == "torch" else {}
        with pytest.raises(ParameterError) as err:
            simulate(f, n=100, c=0.5, gamma=[1.0], draws=1, diagonal="zero", progress=False, backend=backend, **kw)
        assert err.value.name == "f" and "overflows" in str(err.value)
    # x**20 stays finite, but its M has λ_max ~ 1e22: γ = 1 is far below its rounding noise
    with pytest.raises(ParameterError) as err:
        simulate(g20, n=100, c=0.5, gamma=[1.0], draws=1, diagonal="zero", progress=False)
    assert err.value.name == "gamma" and _gamma_min_from(err.value) > 1e6


# ----------------------------------------------------------------------------- memory
def test_memory_refused_before_allocation(monkeypatch):
    import time
    import tracemalloc

    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ParameterError) as err:
        simulate(TANH, n=10**9, c=0.5, gamma=[1.0], draws=1, progress=False)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - t0 < 5 and peak < 50 * 2**20
    msg = str(err.value)
    assert err.value.name == "n" and "n=1000000000" in msg and "p=500000000" in msg
    assert "bytes" in msg and "available" in msg
    # a huge p is blamed on c; the limit can be set by the environment
    monkeypatch.setenv("SYMATTN_MEMORY_LIMIT", "1G")
    with pytest.raises(ParameterError) as err:
        simulate(TANH, n=400, c=1e4, gamma=[1.0], draws=1, progress=False)
    assert err.value.name == "c" and "p=4000000" in str(err.value) and f"{2**30} bytes" in str(err.value)
    monkeypatch.setenv("SYMATTN_MEMORY_LIMIT", "lots")
    with pytest.raises(ParameterError, match="SYMATTN_MEMORY_LIMIT"):
        simulate(TANH, n=40, c=0.5, gamma=[1.0], draws=1, progress=False)


def test_available_memory_reads_the_system(monkeypatch):
    from symattn.montecarlo import available_memory

    monkeypatch.delenv("SYMATTN_MEMORY_LIMIT", raising=False)
    avail = available_memory()
    with open("/proc/meminfo") as fh:
        meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in fh}
    assert 0 < avail <= meminfo["MemTotal"]
    monkeypatch.setenv("SYMATTN_MEMORY_LIMIT", "1.5M")
    assert available_memory() == int(1.5 * 2**20)


def test_memory_estimate_bounds_the_measured_peak():
    """draw_memory against the peak RSS of a fresh process running one draw (n = 1500, c = 1, eigh;
    measured 142.5 MiB against an estimate of 171.7 MiB)."""
    import subprocess

    # VmHWM, not ru_maxrss: Linux carries ru_maxrss over from the forking parent (pytest) across exec
    code = ("from symattn.layer import simulate\nfrom symattn.montecarlo import draw_memory\n"
            "def status(key):\n"
            "    return int(open('/proc/self/status').read().split(key + ':')[1].split()[0]) * 1024\n"
            "simulate('tanh', n=20, c=1.0, gamma=[1.0], draws=1, progress=False)\n"
            "base = status('VmRSS')\n"
            "simulate('tanh', n=1500, c=1.0, gamma=[0.1, 1.0], draws=1, progress=False, method='eigh')\n"
            "peak = status('VmHWM')\n"
            "print(peak - base, draw_memory(1500, 1500, gammas=2, method='eigh')['host'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    used, estimate = map(int, out.stdout.split())
    assert used <= estimate <= 2 * used, (used, estimate)


@pytest.mark.parametrize("c, snr", [(0.25, 0.0), (0.5, 2.0)])
def test_linear_alone_p_below_n_uses_the_thin_problem_exactly(c, snr):
    """E_LR alone at p < n comes from the p×p problem of the reduced QR of Xᵀ (plus the null space of
    XᵀX): the same numbers as the n×n problem of the joint run, to rounding, and the trace too."""
    kw = dict(n=300, c=c, gamma=[1e-5, 1e-2, 1.0, 100.0], geometry={"snr": snr}, draws=2, seed=3, progress=False,
              trace_estimator=True)
    alone = simulate(TANH, models=("linear",), **kw)
    joint = simulate(TANH, models=("attention", "linear"), **kw)
    assert alone.attention is None
    np.testing.assert_allclose(alone.linear, joint.linear, rtol=1e-9)
    np.testing.assert_allclose(alone.linear_trace, joint.linear_trace, rtol=1e-9)
    # the ridgeless limit of one draw: E → ‖r‖²/n = (n − p)/n · (share of y outside the row space of X)
    assert np.all(alone.linear[:, 0] < 1.0) and np.all(alone.linear[:, 0] > 0.0)


@pytest.mark.parametrize("kw", [dict(geometry=G1), dict(W="random", diagonal="zero")])
def test_torch_batched_draws_equal_one_at_a_time(kw):
    """A batch of draws (one (B, n, n) stack, one batched eigh) gives each draw's numbers to rounding."""
    pytest.importorskip("torch")
    kw = dict(kw)
    if kw.get("W") == "random":
        kw["W"] = np.random.default_rng(0).standard_normal((90, 90)) / np.sqrt(90)
    common = dict(n=60, c=1.5, gamma=[1e-2, 1.0], draws=5, seed=2, progress=False, backend="torch", device="cpu",
                  trace_estimator=True, **kw)
    one = simulate(TANH, **common)
    batched = simulate(TANH, batch=3, **common)  # batches of 3 and 2
    for name in ("attention", "linear", "attention_trace", "linear_trace"):
        np.testing.assert_allclose(getattr(batched, name), getattr(one, name), rtol=1e-10)
    with pytest.raises(ParameterError, match="batch"):
        simulate(TANH, batch=0, **common)


@pytest.mark.gpu
def test_cuda_float32_within_the_stated_accuracy():
    """float32 on CUDA, batched: E within 1e-3 relative of float64 (the accuracy simulate states)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    kw = dict(n=1000, c=1.0, gamma=[0.01, 0.1, 1.0, 10.0], geometry=G1, draws=4, seed=0, progress=False,
              backend="torch", device="cuda")
    a = simulate(TANH, dtype="float64", batch=1, **kw)
    b = simulate(TANH, dtype="float32", **kw)
    np.testing.assert_allclose(b.attention, a.attention, rtol=1e-3)
    np.testing.assert_allclose(b.linear, a.linear, rtol=1e-3)
