"""The explicit formulas of symattn.systems.explicit (docs/theory.md §6.9).

References: the generic Woodbury output of the attention system in exact rational arithmetic
(symattn.systems.attention.woodbury_output), the float64 Woodbury step of the solver, and an
exact central difference of the explicit E_A itself for the chain rule through the steps.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symattn as sa
from symattn.backends import solver
from symattn.backends.context import FloatContext
from symattn.systems.attention import attention_system, woodbury_output


def _values(ex, seed=3):
    rng = np.random.default_rng(seed)
    return {s: sp.Rational(int(rng.integers(1, 97)), int(rng.integers(20, 60))) for s in ex.base}


@pytest.mark.parametrize("rank, seed", [(1, 3), pytest.param(2, 5, marks=pytest.mark.slow), (3, 7)])
def test_explicit_F_equals_the_woodbury_output_exactly(rank, seed):
    """Rank 1 and 2 (adjugates of at most 4×4) and rank 3 (the 6×6 inverse by Gauss–Jordan steps; the adjugate took 90 s),
    exact at rational values."""
    ex = sa.explicit_error(rank)
    vals = _values(ex, seed=seed)
    s = attention_system(rank)
    ref = woodbury_output(s.Gamma.xreplace(vals), s.C_hat.xreplace(vals))
    assert sp.simplify(ex.evaluate(ex.F, vals) - ref) == 0


def test_rank3_zero_pivot_is_refused_not_nan():
    """The first Gauss–Jordan pivot of rank 3 is 1 + a1·T_QK^(2)·𝔊_14, zero at 𝔊_14 = −1/(a1 T_QK^(2)) although the
    matrix is invertible there (woodbury_output is finite): evaluate refuses it with a ParameterError rather
    than returning NaN, also within 1e-13 of it in floats (where it returned a value 13 % off)."""
    ex = sa.explicit_error(3)
    vals = _values(ex, seed=7)
    by = {str(s): s for s in ex.base}
    g14, t2, a1 = by["G_{14}"], by["T_{QK}^{(2)}"], by["a_1"]
    vals[g14] = -1 / (vals[t2] * vals[a1])
    s = attention_system(3)
    assert sp.N(woodbury_output(s.Gamma.xreplace(vals), s.C_hat.xreplace(vals))).is_finite
    with pytest.raises(sa.ParameterError, match="pivot"):
        ex.evaluate(ex.F, vals)
    near = {k: sp.Float(float(v), 15) for k, v in vals.items()}
    near[g14] = sp.Float(float(vals[g14]) * (1 + 1e-13), 15)
    with pytest.raises(sa.ParameterError, match="pivot"):
        ex.evaluate(ex.F, near)


def test_explicit_E_A_matches_the_solver_woodbury_step():
    ctx = FloatContext()
    sol = solver.solve_bulk(ctx, 0.5, 0.7, 0.6, 0.3, 0.0)
    T, _, T_dot = solver.regular_traces(ctx, sol)
    geo = sa.Geometry(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)
    A = solver.kernel_coefficients(ctx, 0.6, geo.gram[None], 1)
    F, F_dot = solver.woodbury(ctx, T, T_dot, A, geo.gram[None], 1, np.sqrt([0.5]))
    ex = sa.explicit_error(1)
    vals = dict(zip(ex.traces, map(sp.Float, T[0])))
    vals.update(zip(ex.trace_dots, map(sp.Float, T_dot[0])))
    vals.update({ex.gram[i, j]: sp.Float(geo.gram[i, j]) for i in range(3) for j in range(i, 3)})
    vals.update({sa.systems.symbols.a1: sp.Float(0.6), sa.systems.symbols.c: sp.Float(0.5),
                 sa.systems.symbols.gamma: sp.Float(0.7)})
    assert abs(float(ex.evaluate(ex.F, vals)) - F[0]) < 1e-12 * abs(F[0])
    E = -0.7**2 * F_dot[0]
    assert abs(float(ex.evaluate(ex.E_A, vals)) - E) < 1e-11 * abs(E)


@pytest.mark.slow
def test_diff_through_the_steps_matches_an_exact_central_difference():
    ex = sa.explicit_error(1)
    vals = _values(ex, seed=7)
    for x in (ex.mu2, ex.mu_wk):
        d = ex.evaluate(ex.diff(ex.E_A, x), vals)
        h = sp.Rational(1, 10**15)
        up, down = (ex.evaluate(ex.E_A, {**vals, x: vals[x] + s * h}) for s in (1, -1))
        cd = (up - down) / (2 * h)
        assert d != 0
        assert abs(sp.N(d - cd, 30)) < sp.Float(1e-20) * abs(sp.N(d, 30))


def test_expression_is_a_plain_sympy_expression_on_which_sp_diff_works():
    ex = sa.explicit_error(1)
    vals = _values(ex, seed=11)
    Lam = ex.expression(ex.steps[0][0])       # Λ00 = ‖μ‖² + μᵀw_K μᵀw_Q
    assert sp.diff(Lam, ex.mu2) == 1 and sp.diff(Lam, ex.mu_wk) == ex.gram[0, 2]
    assert vals  # the base symbols are those of the Gram matrix, traces, a1, c, γ


def test_bad_rank_is_a_parameter_error():
    with pytest.raises(sa.ParameterError):
        sa.explicit_error(0)
