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


# ----------------------------------------------------------------------------- evaluation at a solution
def _random_geometry(rng):
    """A random rank-one geometry: the Gram matrix of three random vectors (μ, w_K, w_Q) in R^4."""
    v = rng.normal(size=(3, 4)) / 2
    G = v @ v.T
    return sa.Geometry(snr=G[0, 0], wk2=G[1, 1], wq2=G[2, 2], mu_wk=G[0, 1], mu_wq=G[0, 2], wk_wq=G[1, 2])


GEOMETRIES = [_random_geometry(np.random.default_rng(seed)) for seed in range(5)]


@pytest.mark.parametrize("f", ["tanh", "relu", "erf"])
def test_evaluate_at_a_solution_equals_the_solved_E_A(f):
    """E_A of the explicit formula (block elimination, §6.9) at the traces of the solution equals the solver's E_A,
    a different route (the Woodbury solve of the 10×10 system, §6.6), at 5 random geometries: to 1e-12 in float64
    and 1e-25 with mpmath at 30 digits."""
    import mpmath

    ex = sa.explicit_error(1)
    for g in GEOMETRIES:
        r = sa.solve(f, 0.5, 0.5, geometry=g)
        assert abs(float(ex.evaluate_at(r)) - float(r.E)) < 1e-12
        rm = sa.solve(f, 0.5, 0.5, geometry=g, backend="mpmath", dps=30)
        E = ex.evaluate_at(rm)
        assert E.dtype == object and isinstance(E[()], mpmath.mpf)
        assert abs(E[()] - rm.E[()]) < mpmath.mpf(10) ** -25


def test_evaluate_at_an_array_of_points_and_F():
    r = sa.solve("tanh", [[0.3], [2.0]], [0.01, 0.1, 1.0], geometry=GEOMETRIES[1])
    ex = sa.explicit_error(1)
    E, F = ex.evaluate_at(r), ex.evaluate_at(r, ex.F)
    assert E.shape == r.shape == (2, 3)
    assert np.abs(E - r.E).max() < 1e-11 and np.abs(F - r.F).max() < 1e-11 * np.abs(r.F).max()


def _richardson(fn, x, h):
    """dfn/dx by Richardson extrapolation of the central differences at h and h/2 (error O(h⁴))."""
    d1 = (fn(x + h) - fn(x - h)) / (2 * h)
    d2 = (fn(x + h / 2) - fn(x - h / 2)) / h
    return (4 * d2 - d1) / 3


@pytest.mark.parametrize("f, c, wrt", [("tanh", 0.5, "mu_wk"), ("relu", 2.0, "snr")])
def test_a_derivative_evaluated_at_a_solution_equals_sensitivity_and_a_finite_difference(f, c, wrt):
    """∂E_A/∂θ through the steps (ex.diff), evaluated at the solution, against sa.sensitivity (quadrature traces,
    its own compiled program; 1e-10) and against a Richardson finite difference of the solver (1e-8)."""
    ex = sa.explicit_error(1)
    sym = {"mu_wk": ex.mu_wk, "snr": ex.mu2}[wrt]
    base = dict(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)
    r = sa.solve(f, c, 0.5, geometry=sa.Geometry(**base))
    d = float(ex.evaluate_at(r, ex.diff(ex.E_A, sym)))
    assert abs(d - float(sa.sensitivity(f, c, 0.5, sa.Geometry(**base), wrt=wrt))) < 1e-10 * abs(d)

    def E(x):
        return float(sa.solve(f, c, 0.5, geometry=sa.Geometry(**dict(base, **{wrt: x}))).E)

    assert abs(d - _richardson(E, base[wrt], 2.0**-7)) < 1e-8 * abs(d)


def test_evaluate_at_refuses_what_it_cannot_evaluate():
    ex = sa.explicit_error(1)
    r = sa.solve("tanh", 0.5, 0.5, geometry=GEOMETRIES[0])
    with pytest.raises(sa.ParameterError, match="expr"):
        ex.evaluate_at(r, "E_A")                                  # a string is never parsed
    with pytest.raises(sa.ParameterError, match="unknown symbols"):
        ex.evaluate_at(r, sp.Symbol("x") * ex.E_A)
    with pytest.raises(sa.ParameterError, match="traces"):
        ex.evaluate_at(sa.solve("tanh", 0.5, 0.5, geometry=GEOMETRIES[0], model="linear"))
    e = np.eye(5) / 2
    g2 = sa.Geometry.from_vectors(e[0], [e[1], e[2]], [e[3], e[4]])    # rank two
    with pytest.raises(sa.ParameterError, match="rank"):
        ex.evaluate_at(sa.solve("tanh", 0.5, 0.5, geometry=g2))


# ----------------------------------------------------------------------------- the program as data
def test_program_is_a_topologically_ordered_cse_code_block():
    from sympy.codegen.ast import Assignment, CodeBlock

    ex = sa.explicit_error(1)
    plain, block = ex.program(cse=False), ex.program()
    assert isinstance(block, CodeBlock) and all(isinstance(a, Assignment) for a in block.args)
    defined = set(ex.base)
    for a in block.args:                                          # every symbol is defined before it is used
        assert a.rhs.free_symbols <= defined, a.lhs
        defined.add(a.lhs)
    assert block.left_hand_sides[-1] == sp.Symbol("out_0", real=True)
    assert sp.count_ops([a.rhs for a in block.args]) < sp.count_ops([a.rhs for a in plain.args])
    assert len(plain.args) == len(ex.needed()) + 1 < len(ex.steps)  # E_A only: the steps it needs


def test_compiled_numpy_and_mpmath_equal_the_exact_steps():
    """The printed program (numpy, and mpmath at 50 digits) against exact rational evaluation of the steps."""
    import mpmath

    ex = sa.explicit_error(1)
    dE = ex.diff(ex.E_A, ex.mu_wk)
    vals = _values(ex, seed=13)
    exact = [ex.evaluate(t, vals) for t in (ex.E_A, dE)]
    fn = ex.compile("numpy", (ex.E_A, dE))
    got = fn(*[float(vals[s]) for s in fn.args])
    for g, e in zip(got, exact):   # random values, no solution: E_A ~ -3e3 from cancelling steps (cond ~ 1e4)
        assert abs(g - float(e)) < 1e-9 * abs(float(e))
    fm = ex.compile("mpmath", (ex.E_A, dE))
    with mpmath.workdps(50):
        got = fm(*[mpmath.mpf(vals[s].p) / vals[s].q for s in fm.args])
        for g, e in zip(got, exact):
            assert abs(g - mpmath.mpf(sp.N(e, 60))) < mpmath.mpf(10) ** -45 * abs(g)
    import re

    assert "_msqrt(c)" in fm.source and not re.search(r"\d\.\d|np\.", fm.source)   # no float literal: exact at any dps
    assert ex.compile("numpy", (ex.E_A, dE)) is fn                # cached
    with pytest.raises(sa.ParameterError, match="backend"):
        ex.compile("torch")


def test_latex_prints_the_steps_as_aligned_equations():
    ex = sa.explicit_error(1)
    tex = ex.latex()
    lines = tex.splitlines()
    assert lines[0] == r"\begin{aligned}" and lines[-1] == r"\end{aligned}"
    assert len(lines) == len(ex.needed()) + 2
    assert lines[1] == r"\Lambda_{00} &= \|\mu\|^{2} + (\mu^{\top} w_K) (\mu^{\top} w_Q) \\"
    assert "E_A &= " in tex


def test_latex_uses_one_naming_scheme():
    """Issue 35: the LaTeX mixed `Gqq_{00}`, `dot_{invY 02}` and `\\dot{T}`, and wrote the Gram entries as
    `G_{01}`. One scheme, the paper's: ‖μ‖², μᵀw_K, Γ^{qq}_{00}, (M^Y)^{-1}_{02}, Ṫ; nothing in snake case."""
    import re

    for rank in (1, 2):
        ex = sa.explicit_error(rank)
        ex.diff(ex.E_A, ex.mu_wk)
        tex = ex.latex() + ex.latex(cse=True) + ex.latex(list(dict(ex.steps))[-1])
        assert not re.search(r"G_\{\d", tex) and "Gqq" not in tex and "dot_" not in tex and "inv" not in tex
        assert not re.search(r"[A-Za-z]{2,}_\{", tex.replace("\\Lambda_{", "").replace("\\Gamma", ""))
        assert r"\|\mu\|^{2}" in tex and r"(\mu^{\top} w_K" in tex and r"\Gamma^{qq}_{00}" in tex
        assert r"\dot{\Gamma^{qq}_{00}}" in tex and r"\frac{\partial E_A}{\partial" in tex


def test_expression_says_what_it_costs_before_building_it():
    """Issue 35: ex.expression(ex.E_A) took 166 s and returned millions of operations without a word. size()
    tells the count beforehand (equal to count_ops of the built expression where that is cheap), and
    expression() warns above EXPRESSION_WARN, naming the compact forms, before it builds anything."""
    import warnings

    from symattn.errors import ExpressionSizeWarning
    from symattn.systems.explicit import EXPRESSION_WARN

    ex = sa.explicit_error(1)
    for s, _ in ex.steps[:40]:   # an upper bound: SymPy merges repeated factors (Λ·Λ = Λ²) as it builds
        built = sp.count_ops(ex.expression(s))
        assert built <= ex.size(s), (s, built, ex.size(s))
    assert ex.size(ex.steps[0][0]) == sp.count_ops(ex.expression(ex.steps[0][0]))
    assert ex.size(ex.E_A) > 100 * EXPRESSION_WARN
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExpressionSizeWarning)   # raised before the expression is built
        with pytest.raises(ExpressionSizeWarning, match="program\\(\\)"):
            ex.expression(ex.E_A)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ExpressionSizeWarning)
        ex.expression(ex.steps[0][0])                             # small: no warning
