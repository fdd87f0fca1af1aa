"""The strong direction on W's own bulk (docs/theory.md §12.10, symattn/backends/strong_direction.py).

Reductions that can fail (W = Ŵ: the finite-p theory of §10.3; f linear and μ → 0: the general-W
Gaussian-equivalent theory, up to O(1/p)), the p-side elimination against a dense inverse, R = 1 vs
full R, and one small exact Monte Carlo comparison.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import symattn as sa
from symattn.activations.activation import activation
from symattn.backends.context import context
from symattn.backends.finite_p import finite_p_error
from symattn.backends.general_w import general_w_error
from symattn.backends.general_w_entry import general_memorization_error
from symattn.backends.strong_direction import _p_traces, bulk_kernels, bulk_signal_error
from symattn.errors import ParameterError
from symattn.model import Geometry
from symattn.realweights import signal_direction


def _surrogate(p, b, m2):
    """Ŵ = I + (b − 1)μ̂μ̂ᵀ, μ = √m2 e_0 and the §10 geometry of the same kernel (w_K = √|b−1| μ̂)."""
    e = np.zeros(p)
    e[0] = 1.0
    s = math.sqrt(abs(b - 1.0))
    sg = 1.0 if b >= 1.0 else -1.0
    r = math.sqrt(m2) * s
    gram = np.array([[m2, r, sg * r], [r, s * s, sg * s * s], [sg * r, sg * s * s, s * s]])
    return np.eye(p) + (b - 1.0) * np.outer(e, e), math.sqrt(m2) * e, Geometry.from_gram(gram, rank=1)


@pytest.mark.parametrize("f,b", [("tanh", 3.0), ("relu", 0.5)])
def test_identity_bulk_is_the_finite_p_theory(f, b):
    """W = Ŵ (identity bulk + spike): the bulk pencil with a Gaussian X̃ is the free-Poisson pencil of §10.3,
    so the two theories (different linearisations, different code) agree to the central difference's error."""
    p, c = 24, 0.5
    W, mu, geom = _surrogate(p, b, 2.0)
    gs = [0.01, 0.1, 1.0]
    ref = finite_p_error(context("numpy"), f, [c] * 3, gs, geom, int(round(p / c)), diagonal="zero", latent_nodes=8)
    E = bulk_signal_error(f, c, gs, W, mu, diagonal="zero", rank=64, nq=8, diag_nodes=1)
    np.testing.assert_allclose(E, np.asarray(ref, dtype=float), rtol=2e-7)


@pytest.mark.parametrize("R", [1, 2])
def test_p_traces_eliminate_block_zero_exactly(R):
    """The Schur elimination of the s-block (and, for R = 1, the p×p route of §12.2) against the dense inverse
    of the full J·q × J·q matrix."""
    rng = np.random.default_rng(1)
    q1 = 7
    J = 1 + 2 * R
    Wp = rng.standard_normal((q1, q1)) / 3
    mats = [np.eye(q1), Wp, Wp.T, Wp.T @ Wp]
    mtype = [0] + [1] * R + [2] * R
    sigma = 0.3 * rng.standard_normal((J, J))
    big = -np.eye(J * q1)
    for i in range(J):
        for k in range(J):
            big[i * q1:(i + 1) * q1, k * q1:(k + 1) * q1] -= sigma[i, k] * mats[mtype[k]]
    inv = np.linalg.inv(big)
    p = q1 + 1
    ref = np.array([[np.trace(mats[mtype[k]] @ inv[k * q1:(k + 1) * q1, i * q1:(i + 1) * q1]) / p
                     for i in range(J)] for k in range(J)])
    np.testing.assert_allclose(_p_traces(sigma, mats, mtype, q1, p), ref, rtol=1e-12, atol=1e-14)


def _symmetric_case(p, seed=0):
    """A W whose top direction e of W_s is an eigenvector of W and Wᵀ (so the dropped cross terms P⊥Wμ̂ are 0)."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((p, p)) / math.sqrt(p)
    Ws = (A + A.T) / 2
    e = np.linalg.eigh(Ws)[1][:, -1]
    P = np.eye(p) - np.outer(e, e)
    B = rng.standard_normal((p, p)) / math.sqrt(p)
    W = Ws + 0.3 * P @ (B - B.T) @ P
    return W / math.sqrt(np.sum(W * W) / p), e


def test_linear_f_matches_the_gaussian_equivalent_theory_up_to_1_over_p():
    """f(x) = x: 𝔻 ≡ 1, Σ = 0 and 𝕄 = b u u'/√p, the same kernel as §12.1–12.3 solves exactly. The two
    deterministic equivalents (the direction μ̂ out of the bulk here, in it there) differ at O(1/p): the
    difference halves (within 35 %) when p doubles."""
    gs = [0.01, 0.1, 1.0]
    gaps = []
    for p in (32, 64):
        W, e = _symmetric_case(p)
        mu = math.sqrt(2.0) * e
        E = bulk_signal_error("linear", 0.5, gs, W, mu, diagonal="zero")
        Eg = general_w_error(activation("linear"), 0.5, gs, W, mu, signal="linear", diagonal="zero")["E"]
        gaps.append(np.abs(E - Eg) / Eg)
    assert np.all(gaps[1] < 0.04)
    ratio = gaps[0] / gaps[1]
    assert np.all((ratio > 1.3) & (ratio < 2.7)), ratio


def test_vanishing_signal_approaches_the_mu_zero_theory():
    """μ → 0: the only difference from the general-W theory at μ = 0 is that one direction of the bulk is
    carried as a latent: O(1/p), halving (within 35 %) when p doubles."""
    gs = [0.01, 1.0]
    gaps = []
    for p in (32, 64):
        W, e = _symmetric_case(p, seed=2)
        E = bulk_signal_error("tanh", 0.5, gs, W, 1e-4 * e)
        Eg = general_w_error(activation("tanh"), 0.5, gs, W, None, signal="linear")["E"]
        gaps.append(np.abs(E - Eg) / Eg)
    assert np.all(gaps[1] < 0.03)
    ratio = gaps[0] / gaps[1]
    assert np.all((ratio > 1.3) & (ratio < 2.7)), ratio


def _real_like(p, seed=3):
    """A spread-out bulk (Ginibre) plus a strong symmetric direction, unit-scaled; μ = √2·top of W_s."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(p)
    v /= np.linalg.norm(v)
    W = rng.standard_normal((p, p)) / math.sqrt(p) + 3.0 * np.outer(v, v)
    W = W / math.sqrt(np.sum(W * W) / p)
    return W, signal_direction(W, snr=2.0)


def test_separable_slope_converges_in_rank():
    """R = 1 (one mean slope per latent row) against the full separable slope: the terms fall fast (σ_2/σ_1 ≈ 0.1),
    so R = 2 and R = 3 agree far better than R = 1 and R = 2 (here, at p = 48 and t ≈ 0.8, R = 1 is 10 % high)."""
    W, mu = _real_like(48)
    gs = [0.01, 0.1]
    E1, E2, E3 = (bulk_signal_error("tanh", 1.0, gs, W, mu, rank=r) for r in (1, 2, 3))
    assert np.all(np.abs(E3 - E2) < 0.2 * np.abs(E2 - E1))
    assert np.all(np.abs(E3 - E2) / E3 < 0.01)


@pytest.mark.parametrize("direction", ["top", "random"])
def test_small_p_monte_carlo(direction):
    """p = 64, c = 1, a Ginibre bulk with a strong direction. μ along it (t = b‖μ‖²/√p ≈ 0.7): within
    max(3 se, 3 %) of exact Monte Carlo (200 draws), where the surrogate rule of §12.3 is +20 % off at γ = 0.01.
    A random μ: the dropped cross terms P⊥Wμ̂ carry the signal there; with their Gaussian-equivalent effect
    added back (:func:`cross_term_shift`) the value is within the same tolerance."""
    p, c = 64, 1.0
    W, mu = _real_like(p)
    if direction == "random":
        v = np.random.default_rng(8).standard_normal(p)
        mu = math.sqrt(2.0) * v / np.linalg.norm(v)
    gs = [0.01, 0.1, 1.0]
    A = sa.simulate("tanh", n=p, c=c, gamma=gs, weights=W, mu=mu, draws=200, seed=1, models=("attention",)).attention
    mc, se = A.mean(0), A.std(0, ddof=1) / math.sqrt(len(A))
    E = bulk_signal_error("tanh", c, gs, W, mu)
    assert np.all(np.abs(E - mc) <= np.maximum(3 * se, 0.03 * mc)), (E, mc, se)
    # the physical branch (docs/theory.md §12.9): E in (0, 1), increasing, E/γ² decreasing
    assert np.all((E > 0) & (E < 1)) and np.all(np.diff(E) > 0) and np.all(np.diff(E / np.square(gs)) < 0)


def test_bad_input():
    W = np.eye(10)
    with pytest.raises(ParameterError, match="mu"):
        bulk_kernels("tanh", W, np.zeros(10))
    with pytest.raises(ParameterError, match="mu"):
        bulk_kernels("tanh", W, np.ones(9))
    with pytest.raises(ParameterError, match="diagonal"):
        bulk_kernels("tanh", W, np.ones(10), diagonal="one")
    with pytest.raises(ParameterError, match="gamma"):
        bulk_signal_error("tanh", 0.5, [0.0], W, np.ones(10))


def test_entry_switch():
    """signal='bulk' routes μ ≠ 0 to this theory and μ = 0 to the plain Gaussian-equivalent value."""
    W, mu = _real_like(32)
    gs = [0.1]
    np.testing.assert_allclose(general_memorization_error("tanh", 0.5, gs, W, mu, signal="bulk", structure="free"),
                               bulk_signal_error("tanh", 0.5, gs, W, mu), rtol=1e-12)
    np.testing.assert_allclose(general_memorization_error("tanh", 0.5, gs, W, None, signal="bulk", structure="free"),
                               general_memorization_error("tanh", 0.5, gs, W, None, signal="linear",
                                                          structure="free"), rtol=1e-12)
