"""The symbolic systems (SymPy): printing, LaTeX, substitution, differentiation, limits.

References are SymPy's own algebra (simplify, diff, limit) applied to the closed forms, and the
numeric backends as an independent evaluation of the same formulas.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import symattn as sa
from symattn.systems import symbols as S
from symattn.systems.bulk import Delta, beta, expand_intermediates
from symattn.systems.linear import stieltjes_mp

c, gamma, m2 = S.c, S.gamma, S.m2


@pytest.fixture(scope="module")
def systems():
    return {"linear": sa.linear_system(), "bulk": sa.bulk_system(), "attention": sa.attention_system(1)}


# ----------------------------------------------------------------------------- printing
@pytest.mark.parametrize("name", ["linear", "bulk", "attention"])
def test_systems_print_and_latex_show_unknowns(systems, name):
    system = systems[name]
    text = str(system)
    assert text.startswith(f"{name}")
    assert text == system.pretty()
    latex = system.latex()
    assert latex.startswith("\\begin{aligned}") and latex.rstrip().endswith("\\end{aligned}")
    assert "E(\\gamma) &= -\\gamma^2 F'(\\gamma)" in latex
    for u in system.unknowns:
        assert sp.latex(u) in latex, (name, u)
        assert sp.sstr(u) in text, (name, u)
    # every equation is a sympy Eq whose unknown-dependence is visible
    free = set().union(*(eq.free_symbols for eq in system.equations))
    assert set(system.unknowns) <= free | set(system.definitions)


def test_attention_system_rank2_sizes():
    A = sa.attention_system(2)
    assert A.rank == 2
    assert A.gram.shape == (5, 5)
    assert A.Gamma.shape == (6 + 4 * 2, 6 + 4 * 2)   # Γ is (6+4r)×(6+4r) (docs/theory.md §6.7)
    assert A.Lambda.shape == (2 + 2 * 2, 2 + 2 * 2)  # basis y, Zᵀμ, Zᵀw_K^(1..r), Zᵀw_Q^(1..r)


def test_attention_gamma_is_symmetric():
    """Γ = Uᵀ H0^{-1} U is symmetric (docs/theory.md §6)."""
    for r in (1, 2):
        G = sa.attention_system(r).Gamma
        assert (G - G.T).applyfunc(sp.expand) == sp.zeros(*G.shape)


def test_rank1_lambda_matches_math():
    """Λ (4×4) of docs/theory.md §6: Λ00 = m2 + κ_Kκ_Q, Λ01 = Λ10 = 1, Λ03 = κ_K, Λ20 = κ_Q, Λ23 = 1, others 0."""
    A = sa.attention_system(1)
    G = A.gram
    snr, kK, kQ = G[0, 0], G[0, 1], G[0, 2]
    expected = sp.Matrix([[snr + kK * kQ, 1, 0, kK],
                          [1, 0, 0, 0],
                          [kQ, 0, 0, 1],
                          [0, 0, 0, 0]])
    assert (A.Lambda - expected).applyfunc(sp.expand) == sp.zeros(4, 4)


# ----------------------------------------------------------------------------- substitution
def _expanded_rhs(system, eq):
    """Right-hand side with β and Δ replaced by the system's (possibly substituted) definitions."""
    rhs = eq.rhs
    for sym in (Delta, beta):
        rhs = rhs.subs(sym, system.definitions[sym])
    return rhs


def test_bulk_subs_s2_zero_decouples(systems):
    """s² = 0 (f linear in the bulk): Δ = γ + λβ², β = √c(a1(λ−1)+d): every right-hand side is
    explicit (free of e1, e2, e3), while for s² ≠ 0 the system is genuinely coupled."""
    bulk = systems["bulk"]
    sub = bulk.subs(S.s2, 0)
    assert sub.definitions[Delta] == gamma + S.lam * beta**2
    for eq in sub.equations:
        assert not (_expanded_rhs(sub, eq).free_symbols & {S.e1, S.e2, S.e3}), eq
    coupled = [_expanded_rhs(bulk, eq).free_symbols & {S.e1, S.e2, S.e3} for eq in bulk.equations]
    assert all(coupled)


def test_bulk_equations_have_no_free_lambda_after_expansion(systems):
    """The atom term (1−c)_+ g(0) is evaluated with β, Δ expanded at λ = 0 (no hidden λ)."""
    for eq in systems["bulk"].equations + systems["attention"].equations:
        assert S.lam not in expand_intermediates(eq.rhs).free_symbols
    e1_atom = [t for t in systems["bulk"].equations[0].rhs.args if not isinstance(t, sp.Integral)]
    assert sp.simplify(sum(e1_atom) - sp.Max(0, 1 - c) / (S.gamma + S.s2 * S.e2)) == 0


def test_linear_subs_numbers(systems):
    lin = systems["linear"].subs({c: sp.Rational(1, 2), m2: 1})
    assert lin.equations[0].free_symbols == {S.gamma, sa.linear_system().unknowns[0]}
    assert c not in lin.output.free_symbols and m2 not in lin.output.free_symbols


# ----------------------------------------------------------------------------- linear closed form
def test_linear_positive_root_solves_quadratic(systems):
    """Both pieces of the cancellation-free m̃ satisfy cγm̃² + (1−c+γ)m̃ − 1 = 0 identically."""
    mt = stieltjes_mp()
    b = 1 - c + gamma
    assert len(mt.args) == 2
    for expr, _cond in mt.args:
        assert sp.simplify(c * gamma * expr**2 + b * expr - 1) == 0
    # the equation held by the system is the same quadratic in its unknown
    lin = systems["linear"]
    u = lin.unknowns[0]
    assert sp.expand(lin.equations[0].lhs - lin.equations[0].rhs - (c * gamma * u**2 + b * u - 1)) == 0
    # and the root is the positive one (the other root is negative: product of roots = −1/(cγ) < 0)
    f = sp.lambdify((c, gamma), mt, "mpmath")
    rng = np.random.default_rng(3)
    for cv, gv in zip(np.exp(rng.uniform(-3, 3, 20)), np.exp(rng.uniform(-6, 4, 20))):
        v = f(cv, gv)
        assert v > 0
        assert abs(cv * gv * v**2 + (1 - cv + gv) * v - 1) < 1e-12 * max(1, cv * gv * v**2)


def test_diff_of_linear_closed_form_matches_numeric_backend(systems):
    """E = −γ² dF/dγ by sympy.diff of F_LR equals memorization_error(model='linear')."""
    F = systems["linear"].closed_form["F"]
    E = sp.lambdify((c, gamma, m2), -gamma**2 * sp.diff(F, gamma), "mpmath")
    for cv in (0.5, 1.0, 2.0):
        for mv in (0.0, 1.0, 4.0):
            num = sa.memorization_error("tanh", c=cv, gamma=[0.01, 0.1, 1.0, 10.0], geometry=sa.Geometry(snr=mv),
                                        model="linear")
            ref = [float(E(cv, g, mv)) for g in (0.01, 0.1, 1.0, 10.0)]
            np.testing.assert_allclose(num, ref, rtol=1e-11)


def test_linear_closed_form_agrees_with_companion_definition(systems):
    """The system's output m/(1 + γ m2 m m̃), with m from its definition, is the closed form F."""
    lin = systems["linear"]
    u = lin.unknowns[0]
    (msym, mdef), = lin.definitions.items()
    F_sys = lin.output.subs(msym, mdef).subs(u, stieltjes_mp())
    diff = F_sys - lin.closed_form["F"]
    for cv, gv, mv in [(0.5, 0.1, 1.0), (2.0, 3.0, 4.0), (1.0, 0.01, 0.0)]:
        assert abs(float(diff.subs({c: cv, gamma: gv, m2: mv}))) < 1e-13


def _branch_E(cv, mv):
    """E_LR from the b = 1 − c + γ ≥ 0 piece of m̃ (the piece valid for γ ≥ c − 1)."""
    mt = stieltjes_mp().args[0][0].subs(c, cv)
    m = cv * mt + (1 - cv) / gamma
    F = m / (1 + gamma * mv * m * mt)
    return -gamma**2 * sp.diff(F, gamma)


def test_linear_limit_gamma_to_infinity_is_one():
    """sympy.limit of E_LR as γ → ∞ (written γ = 1/t, t → 0+) is exactly 1 (c = 1/2, m2 = 1)."""
    t = sp.Symbol("t", positive=True)
    E = _branch_E(sp.Rational(1, 2), 1)
    assert sp.limit(E.subs(gamma, 1 / t), t, 0, "+") == 1


def test_linear_limit_gamma_to_zero_below_one():
    """c < 1: E_LR → (1 − c)/(1 + m2) as γ → 0: exactly by sympy.limit, and numerically at γ = 1e-9."""
    for cv, mv in [(sp.Rational(1, 2), 1), (sp.Rational(1, 2), 4), (sp.Rational(1, 4), 0)]:
        assert sp.limit(_branch_E(cv, mv), gamma, 0, "+") == (1 - cv) / (1 + mv)
        num = sa.memorization_error("tanh", c=float(cv), gamma=1e-9, geometry=sa.Geometry(snr=float(mv)),
                                    model="linear")
        assert abs(float(num) - float((1 - cv) / (1 + mv))) < 1e-6


def test_linear_gamma_to_zero_above_one_is_quadratic():
    """c > 1: E_LR ~ γ² (docs/theory.md §3): E/γ² tends to a finite positive constant."""
    E = sa.memorization_error("tanh", c=2.0, gamma=[1e-4, 1e-5], geometry=sa.Geometry(snr=1.0), model="linear")
    ratio = E / np.array([1e-4, 1e-5]) ** 2
    assert ratio[1] > 0 and abs(ratio[0] / ratio[1] - 1) < 1e-3


# ----------------------------------------------------------------------------- bulk: implicit derivative
def test_bulk_total_derivative_matches_sympy_after_expansion():
    """total_derivative (through β, Δ) equals the plain derivative of the expanded integrand."""
    from symattn.systems.bulk import total_derivative

    for g in sa.bulk_system().integrands:
        for x in (S.e1, S.e2, S.e3, gamma):
            lhs = expand_intermediates(total_derivative(g, x))
            rhs = sp.diff(expand_intermediates(g), x)
            vals = {S.lam: 0.7, S.e1: 1.3, S.e2: 0.4, S.e3: -0.2, c: 1.5, gamma: 0.3, S.a1: 0.6, S.s2: 0.05,
                    S.d: 0.1}
            assert abs(float((lhs - rhs).subs(vals))) < 1e-13


# ----------------------------------------------------------------------------- an activation's constants
def test_attention_system_for_tanh_holds_no_activation_constant():
    """attention_system(f=...) substitutes a1, s², d everywhere (equations, definitions, output, C, Γ, the trace
    integrands), for both forms; tanh has no closed-form a1, s², so they are 30-digit Floats, which agree with
    the activation's own tanh-sinh constants at 30 digits (a different code path: Activation.constants)."""
    import mpmath

    kernel = set(S.KERNEL)
    ref = sa.activation("tanh").constants(40)
    for form in ("integral", "closed"):
        s = sa.attention_system(f="tanh", form=form)
        assert not s.free_symbols & kernel, form
        assert not (set(s.parameters) & kernel)
    s = sa.attention_system(f="tanh")
    assert not set().union(*(sp.sympify(v).free_symbols for v in s.traces.values())) & kernel
    assert not s.C.free_symbols & kernel and not s.bulk.free_symbols & kernel
    with mpmath.workdps(40):
        assert abs(mpmath.mpf(str(s.constants[S.a1])) - ref["a1"]) < mpmath.mpf(10) ** -28
        assert abs(mpmath.mpf(str(s.constants[S.s2])) - ref["s2"]) < mpmath.mpf(10) ** -28
    assert s.constants[S.d] == 0
    assert sa.attention_system() is sa.attention_system(f=None)       # no activation: the symbols are kept


@pytest.mark.parametrize("name, a1, s2, d", [
    ("relu", sp.Rational(1, 2), sp.Rational(1, 4) - 1 / (2 * sp.pi), 1),
    ("abs", 0, 1 - 2 / sp.pi, 1),
    ("sin", sp.exp(-sp.Rational(1, 2)), (1 - sp.exp(-2)) / 2 - sp.exp(-1), 0),
])
def test_exact_activations_substitute_closed_forms(name, a1, s2, d):
    """Exact where the activation is exact: the closed forms of docs/theory.md §1.2 (ReLU: a1 = 1/2, ν = 1/2 − 1/(2π);
    |x|: a1 = 0, ν = 1 − 2/π; sin: a1 = e^{-1/2}, ν = (1 − e^{-2})/2), checked against the 40-digit quadrature."""
    import mpmath

    s = sa.bulk_system(name)
    k = s.constants
    assert sp.simplify(k[S.a1] - a1) == 0 and sp.simplify(k[S.s2] - s2) == 0 and k[S.d] == d
    assert all(not v.has(sp.Float) for v in k.values())
    ref = sa.activation(name).constants(40)
    with mpmath.workdps(40):
        assert abs(mpmath.mpf(sp.N(k[S.s2], 45)) - ref["s2"]) < mpmath.mpf(10) ** -35
    assert sp.simplify(s.definitions[beta] - (sp.sqrt(c) * (a1 * (S.lam - 1) + d) - s2 * S.e3)) == 0
    assert not sa.attention_system(f=name).free_symbols & set(S.KERNEL)


def test_variant_builders_take_an_activation_and_the_diagonal():
    from symattn.systems.variants import heads_system, residual_system

    b = residual_system(f="relu").definitions[beta]                           # d + 1 = 2 for ReLU
    assert sp.simplify(b - (sp.sqrt(c) * (S.lam - 1 + 4) / 2 - (sp.pi - 2) / (4 * sp.pi) * S.e3)) == 0
    assert not heads_system(f="tanh").free_symbols & set(S.KERNEL)
    assert sa.attention_system(f="relu", diagonal="zero").constants[S.d] == 0
    with pytest.raises(sa.ParameterError, match="diagonal"):
        sa.attention_system(f="he3")                                        # superlinear: d = oo
    assert sa.attention_system(f="he3", diagonal="zero").constants[S.s2] == 6


@pytest.mark.parametrize("f", ["x*exp(-0.35*x**2)", "relu", "gelu", "sin"])
@pytest.mark.parametrize("form", ["integral", "closed"])
def test_latex_lists_named_constants_once_and_the_density_once(f, form):
    """Issue 35: the LaTeX printed s² as (−8/27 + √2/4) at every occurrence and wrote the Marchenko–Pastur
    density out in every integral. The constants keep their names, their values listed once on the first
    line; ρ_c is written out once, on the last."""
    from symattn.systems import activation_constants
    from symattn.systems.symbols import KERNEL

    system = sa.attention_system(1, form=form, f=f)
    tex = system.latex()
    lines = tex.splitlines()
    values = activation_constants(f)
    assert "constants" in lines[1]
    for sym in KERNEL:
        value = sp.latex(values[sym])
        assert f"{sp.latex(sym)} = {value}" in lines[1]
        if not values[sym].is_Rational:   # ½ occurs anyway; a value like −1000/4913 + 5√15/72 only once
            assert tex.count(value) == 1, (sym, value)
    assert "\\sqrt{(\\lambda_+ - \\lambda)(\\lambda - \\lambda_-)}" in tex   # (the closed form: its edges λ±)
    assert tex.count("\\sqrt{(\\lambda_+") == 1 and "\\left(1 - \\frac{1}{\\sqrt{c}}\\right)^{2}" not in tex
    assert "G_{" not in tex
