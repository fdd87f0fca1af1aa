"""The fixed-point driver (symattn.backends.fixedpoint) on simple maps, and the four Dyson loops on it."""

import numpy as np
import pytest

import symattn as sa
from symattn.backends import finite_p as fp
from symattn.backends import fixedpoint as fpm
from symattn.backends import general_w as gw
from symattn.backends.general_w import hermite as hb
from symattn.backends.context import FloatContext
from symattn.errors import ConvergenceError


def absres(fx, x):
    return float(np.max(np.abs(fx - x)))


def test_contraction_converges():
    out = fpm.fixed_point(lambda x, s: (np.cos(x), None), np.array([1.0]), [fpm.Anderson(depth=3)],
                          tol=1e-14, residual=absres)
    assert out.converged and out.restarts == 0 and out.strategy == "anderson"
    assert abs(out.x[0] - np.cos(out.x[0])) < 1e-13
    assert out.history[-1] == out.residual < 1e-14
    # plain damped steps converge too, more slowly
    slow = fpm.fixed_point(lambda x, s: (np.cos(x), None), np.array([1.0]), [fpm.Damped(0.5)],
                           tol=1e-14, residual=absres)
    assert slow.iterations > out.iterations
    assert slow.x[0] == pytest.approx(out.x[0], abs=1e-13)


def test_newton_escalation():
    newton = fpm.Newton(lambda x, fx, aux: ((fx - x) / (1 + np.sin(x)), fx, aux), below=1e-1)
    out = fpm.fixed_point(lambda x, s: (np.cos(x), None), np.array([1.0]), [fpm.Anderson(), newton],
                          tol=1e-14, residual=absres)
    assert out.strategy == "newton" and out.iterations < 10


def cycle(x, state):
    """x ↦ −x: the undamped iteration is a 2-cycle around the fixed point 0."""
    return -x, None


def test_two_cycle_restarts_and_converges():
    out = fpm.fixed_point(cycle, np.array([1.0]), [fpm.Damped(damping=1.0)], tol=1e-14, residual=absres,
                          restart=fpm.StallRestart(stall=2), maxiter=50)
    assert out.restarts == 1
    assert out.x[0] == 0.0 and out.converged


def test_two_cycle_without_restart_raises_with_diagnostics():
    with pytest.raises(ConvergenceError) as info:
        fpm.fixed_point(cycle, np.array([1.0]), [fpm.Damped(damping=1.0)], tol=1e-14, residual=absres,
                        maxiter=30, name="the 2-cycle")
    e = info.value
    assert e.iterations == 30 and e.restarts == 0
    assert e.history == [2.0] * 20 and e.residuals == [2.0]
    assert "the 2-cycle did not converge" in str(e)


def test_growth_restart_clears_history():
    pol = fpm.GrowthRestart(factor=1.0)
    assert [pol(None, r) for r in (1.0, 0.5, 0.7, 0.6, 0.4)] == [None, None, "clear", "clear", None]
    assert pol.restarts == 2


def spy(monkeypatch, module):
    """Record the FixedPointResult of every fixed_point call of a module (observation only)."""
    seen = []
    orig = fpm.fixed_point

    def wrapped(*a, **k):
        out = orig(*a, **k)
        seen.append(out)
        return out
    monkeypatch.setattr(module, "fixed_point", wrapped)
    return seen


def test_general_w_restart(monkeypatch):
    """The summed-heads sample whose Anderson history cycles at γ = 1e-3 restarts (StallRestart) and converges
    to the warm-started fixed point."""
    from symattn import variants
    from symattn.verification.cases.variants import PROPERTY_SEED, _variant_samples

    heads = next(kw["heads"] for label, kw in _variant_samples(np.random.default_rng(PROPERTY_SEED + 2))
                 if label == "2 random heads sum")
    f = sa.activation("tanh")
    m = variants._summed_model(gw, f, 0.5, heads, [gw.general_w_model(f, 0.5, W, None) for W in heads], None, "f")
    seen = spy(monkeypatch, gw.pencil)
    cold = gw.solve_pencil(m, 1e-3)
    assert seen[-1].restarts >= 1 and seen[-1].converged
    warm = gw.solve_pencil(m, 1e-3, g0=gw.solve_pencil(m, 3e-3).g)
    np.testing.assert_allclose(cold.g, warm.g, rtol=1e-9, atol=1e-12)
    # a stall of 2 evaluations restarts every time the damped step from the best point does not improve: no
    # convergence, and the error says how many restarts it made
    rng = np.random.default_rng(0)
    m2 = gw.general_w_model(f, 0.5, rng.standard_normal((40, 40)) / np.sqrt(40))
    with pytest.raises(ConvergenceError) as info:
        gw.solve_pencil(m2, 1e-3, restart=2, maxiter=200)
    assert info.value.restarts > 10


@pytest.fixture(scope="module")
def hermite_args():
    calls = []
    orig = hb._solve
    rng = np.random.default_rng(0)
    rng.standard_normal((40, 40))
    W = rng.standard_normal((40, 8)) @ rng.standard_normal((8, 40))

    def rec(*a, **k):
        calls.append(a)
        return orig(*a, **k)
    mp = pytest.MonkeyPatch()
    mp.setattr(hb, "_solve", rec)
    try:
        hb.hermite_block_error(sa.activation("tanh"), 0.5, [1.0], W, pairs=20000, tokens=200)
    finally:
        mp.undo()
    return calls[0]


def test_hermite_blocks_restart(monkeypatch, hermite_args):
    """γ = 1e-3 of a rank-8 W: without restarts the Anderson iteration does not converge in 400 evaluations;
    with a StallRestart (an argument) it does, to the fixed point the γ-continuation reaches."""
    m, _, blocks, nodes, traces = hermite_args[:5]
    with pytest.raises(ConvergenceError):
        hb._solve(m, 1e-3, blocks, nodes, traces)
    seen = spy(monkeypatch, hb)
    st = hb._solve(m, 1e-3, blocks, nodes, traces, restart=4)[0]
    assert seen[-1].restarts >= 1 and seen[-1].residual < 1e-12
    # the reference: another path, warm-started from γ = 1e-2 (restarts allowed: plain Anderson from there
    # converges or stalls depending on the BLAS rounding)
    warm = hb._solve(m, 1e-3, blocks, nodes, traces, restart=4,
                     state0=hb._solve(m, 1e-2, blocks, nodes, traces)[0])[0]
    np.testing.assert_allclose(st, warm, rtol=1e-9)


def test_concat_restart(monkeypatch):
    from symattn import variants as va

    rng = np.random.default_rng(0)
    heads = [rng.standard_normal((40, 40)) / np.sqrt(40) for _ in range(2)]
    cm = va._ConcatModel(sa.activation("tanh"), 0.5, heads, "f")
    seen = spy(monkeypatch, fpm)           # _concat_solve imports fixed_point at call time
    g, it, res = va._concat_solve(cm, 1e-2)
    assert seen[-1].restarts == 0
    g6, it6, res6 = va._concat_solve(cm, 1e-2, restart=6)
    assert seen[-1].restarts >= 1 and res6 < 1e-12
    np.testing.assert_allclose(g6, g, rtol=1e-10)
    with pytest.raises(ConvergenceError) as info:
        va._concat_solve(cm, 1e-2, restart=3)
    assert info.value.restarts > 0 and len(info.value.history) == 20


def test_finite_p_restart(monkeypatch):
    """The growth restart of the latent Dyson iteration clears the Anderson history; its factor is an argument."""
    one = np.ones((1, 1))
    args = (FloatContext(), 0.7, 1e-3, 0.02, np.array([1.0]), (np.array([0.6]), one, one), np.full((1, 1), 0.15))
    seen = spy(monkeypatch, fp)
    ref = fp.solve_pencil(*args)
    n_default = seen[-1].restarts
    sol = fp.solve_pencil(*args, restart=2.0)
    assert n_default >= 1 and 1 <= seen[-1].restarts != n_default
    np.testing.assert_allclose(sol.G, ref.G, rtol=1e-10)
    with pytest.raises(ConvergenceError):
        fp.solve_pencil(*args, restart=2.0, max_iter=10)
