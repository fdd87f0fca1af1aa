"""E_LR: the deterministic equivalent (docs/theory.md §3) against this package's exact Monte Carlo.

Tolerance: |MC − theory| ≤ 3·se (se = standard error over the draws) plus a stated bias
allowance for the finite-n effects docs/theory.md §3 documents (the hard edge of the MP law at c = 1).
"""

import numpy as np
import pytest

import symattn as sa

GAMMAS = np.array([0.01, 0.1, 1.0, 10.0])


def _check(n, draws, c, snr, gammas, bias, seed):
    g = sa.Geometry(snr=snr)
    th = sa.memorization_error("tanh", c=c, gamma=gammas, geometry=g, model="linear")
    mc = sa.simulate("tanh", n=n, c=c, gamma=gammas, geometry=g, draws=draws, seed=seed, progress=False,
                     models=("linear",))
    gap = np.abs(mc.linear_mean - th)
    assert np.all(gap <= 3 * mc.linear_sem + bias * th), (c, snr, mc.linear_mean, mc.linear_sem, th)


@pytest.mark.parametrize("c", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("snr", [0.0, 1.0, 4.0])
def test_linear_theory_vs_mc_n500(c, snr):
    """n = 500, 4 draws, γ ∈ {0.1, 1, 10}: within 3 se + 10%.

    The allowance is the O(1/n) finite-n bias, largest where E_LR is small (c = 2, snr = 4, γ = 0.1:
    +8% at n = 500, +1.2% at n = 2000 in docs/theory.md §11.1); the n = 2000 test below has none.
    """
    _check(500, 4, c, snr, GAMMAS[1:], 0.10, seed=11)


@pytest.mark.slow
@pytest.mark.parametrize("c", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("snr", [0.0, 1.0, 4.0])
def test_linear_theory_vs_mc_n2000(c, snr):
    """n = 2000, 6 draws, γ ∈ {0.01, 0.1, 1, 10}: within 3 se (+8% at c = 1, γ = 0.01: the hard edge)."""
    g = sa.Geometry(snr=snr)
    th = sa.memorization_error("tanh", c=c, gamma=GAMMAS, geometry=g, model="linear")
    mc = sa.simulate("tanh", n=2000, c=c, gamma=GAMMAS, geometry=g, draws=6, seed=5, progress=False,
                     models=("linear",))
    bias = np.where((c == 1.0) & (GAMMAS == 0.01), 0.08, 0.0)
    assert np.all(np.abs(mc.linear_mean - th) <= 3 * mc.linear_sem + bias * th), (mc.linear_mean, mc.linear_sem, th)


@pytest.mark.parametrize("c", [0.25, 0.5, 0.9])
@pytest.mark.parametrize("snr", [0.0, 1.0, 4.0])
def test_linear_limits(c, snr):
    """γ → ∞: E_LR → 1; γ → 0 (c < 1): E_LR → (1 − c)/(1 + snr) (docs/theory.md §3)."""
    g = sa.Geometry(snr=snr)
    big = sa.memorization_error("tanh", c=c, gamma=1e9, geometry=g, model="linear")
    small = sa.memorization_error("tanh", c=c, gamma=1e-9, geometry=g, model="linear")
    assert float(big) == pytest.approx(1.0, abs=1e-6)
    assert float(small) == pytest.approx((1 - c) / (1 + snr), rel=1e-6)


def test_linear_vectorised_over_c_gamma_snr_grid():
    c = np.array([[0.5], [2.0]])
    E = sa.memorization_error("tanh", c=c, gamma=GAMMAS, geometry=sa.Geometry(snr=1.0), model="linear")
    assert E.shape == (2, 4)
    for i, ci in enumerate(c[:, 0]):
        np.testing.assert_allclose(E[i], sa.memorization_error("tanh", c=ci, gamma=GAMMAS,
                                                               geometry=sa.Geometry(snr=1.0), model="linear"))
