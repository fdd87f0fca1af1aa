"""Tests of the verification layer: registry semantics, references, series engine, CLI, convergence."""

from __future__ import annotations

import json
import math

import mpmath
import numpy as np
import pytest

from symattn.cli import main
from symattn.verification import registry
from symattn.verification.registry import Outcome, all_checks, register, select


# ----------------------------------------------------------------------------- registry
@pytest.mark.parametrize("out,expected", [
    (Outcome(1.0, 1.05, 0.1), True), (Outcome(1.0, 1.2, 0.1), False),
    (Outcome(0.5, 0.0, 0.0, "ge"), True), (Outcome(-0.1, 0.0, 0.0, "ge"), False),
    (Outcome(-0.1, 0.0, 0.0, "le"), True), (Outcome(0.1, 0.0, 0.0, "le"), False),
    (Outcome(float("nan"), 0.0, 1.0), False), (Outcome(5.0, 0.0, 0.0, passed=True), True),
])
def test_outcome_relations(out, expected):
    assert out.decide() is expected


def test_crashing_check_fails_with_reason():
    chk = registry.Check("t/crash", "t", "float64", lambda p: 1 / 0)
    res = chk(registry.QUICK)
    assert not res.passed and "ZeroDivisionError" in res.detail and math.isnan(res.value)
    d = res.to_dict()
    assert set(d) >= {"name", "method", "value", "reference", "tolerance", "passed"}
    assert d["value"] is None  # NaN -> null in JSON


def test_registry_covers_every_limiting_case_three_ways():
    checks = all_checks()
    names = [c.name for c in checks]
    assert len(names) == len(set(names))
    quick = select(checks, quick=True)
    assert len(quick) >= 15
    groups = {}
    for c in quick:
        groups.setdefault(c.group, set()).add(c.method)
    cases = {"linear-f", "a1-zero", "mu-zero", "gamma-large", "gamma-small", "c-limits"}
    assert cases <= set(groups)
    for g in cases:
        methods = groups[g]
        assert "symbolic" in methods and "monte-carlo" in methods, g
        assert methods & {"mpmath", "contour"} and "float64" in methods, g


def test_select_filters():
    checks = all_checks()
    sel = select(checks, only="gamma-small/linear", method="symbolic")
    assert [c.name for c in sel] == ["gamma-small/linear/limit"]
    assert all(c.group == "mu-zero" for c in select(checks, only="mu-zero"))


# ----------------------------------------------------------------------------- independent references
def test_stieltjes_branch_and_real_axis():
    """s(−γ) equals the linear system's F_LR(γ); Im s(z) has the sign of Im z (Stieltjes branch)."""
    from symattn.verification.references import stieltjes_linear
    from symattn.systems import linear_system
    from symattn.systems.symbols import c, gamma, m2

    F = linear_system().closed_form["F"]
    for cv, snr, g in ((0.5, 1.0, 0.3), (2.0, 4.0, 0.05)):
        ref = float(F.subs({c: cv, gamma: g, m2: snr}))
        assert abs(float(stieltjes_linear(-g, cv, snr)) - ref) < 1e-12
        for z in (mpmath.mpc(1.0, 0.2), mpmath.mpc(0.3, -0.05), mpmath.mpc(-0.5, 1e-3)):
            s = stieltjes_linear(z, cv, snr)
            assert mpmath.sign(mpmath.im(s)) == mpmath.sign(mpmath.im(z))


def test_partial_fractions_match_linear_f_theory():
    """f(t)=t with a signal: the partial-fraction reference equals the package's E_A (float64) to 1e-10."""
    import symattn as sa
    from symattn.verification.references import linear_f_E

    E = float(sa.memorization_error("linear", 0.7, 0.2, geometry=sa.Geometry(snr=2.0)))
    with mpmath.workdps(30):
        ref = float(linear_f_E(0.7, 2.0, 0.2))
    assert abs(E - ref) / ref < 1e-10
    # control: the reference does depend on the signal
    with mpmath.workdps(30):
        assert abs(float(linear_f_E(0.7, 0.0, 0.2)) - ref) > 1e-3


def test_mp_moments_against_quadrature():
    """Symbolic ∫λ^k dμ_S (θ-substitution) equals mpmath quadrature of the MP density, c ∈ {0.5, 2}."""
    from symattn.systems.symbols import c
    from symattn.verification.numerics import mp_law_integral
    from symattn.verification.symbolic import mp_moment

    for cv in (0.5, 2.0):
        for k in range(5):
            num = mp_law_integral(lambda t: t**k, cv)
            assert abs(float(mp_moment(k).subs(c, cv)) - float(num)) < 1e-12


def test_laurent_series_arithmetic():
    import sympy as sp

    from symattn.verification.symbolic import Laurent, h, to_series

    x = sp.Symbol("x")
    env = {x: Laurent(-1, [1, 2, 0, 0])}           # x = 1/h + 2
    s = to_series(1 / (x * (1 + x)), env, 4)         # 1/(x + x²) with x = (1 + 2h)/h
    exact = sp.series((1 / (x * (1 + x))).subs(x, 1 / h + 2), h, 0, 5).removeO()
    assert sp.simplify(s.truncate(5).as_expr() - exact) == 0


def test_semicircle_floor_known_value():
    """docs/theory.md §7: the cos floor at γ = 0.01 is 0.1112."""
    from symattn.verification.numerics import semicircle_floor
    import symattn as sa

    assert abs(float(semicircle_floor(sa.activation("cos").nu, 0.01)) - 0.1112) < 1e-4


# ----------------------------------------------------------------------------- running checks
def test_symbolic_checks_of_two_cases_pass():
    res = registry.run_checks(quick=True, only="gamma-large/linear,mu-zero/general=bulk/symbolic", method="symbolic")
    assert len(res) == 2 and all(r.passed for r in res), [r.detail for r in res]


def test_cli_verify_json(capsys):
    rc = main(["verify", "--quick", "--json", "--only", "gamma-small/linear"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["passed"] and out["total"] == len(out["checks"]) == 4
    for c in out["checks"]:
        assert set(c) >= {"name", "method", "value", "reference", "tolerance", "passed"}
    assert {c["method"] for c in out["checks"]} == {"symbolic", "mpmath", "float64", "monte-carlo"}


def test_cli_verify_table_and_list(capsys):
    assert main(["verify", "--list", "--quick"]) == 0
    listing = capsys.readouterr().out
    assert "linear-f/signal/contour-integral" in listing
    rc = main(["verify", "--quick", "--only", "gamma-large/bulk"])
    out = capsys.readouterr().out
    assert rc == 0 and "check" in out and "tolerance" in out and "1/1 checks passed" in out


def test_cli_exit_code_on_failure(capsys):
    name = "zz-test/always-fails"

    @register(name, "zz-test", "float64")
    def _fail(profile):
        return Outcome(1.0, 0.0, 0.1)

    try:
        rc = main(["verify", "--quick", "--json", "--only", name])
        out = json.loads(capsys.readouterr().out)
        assert rc == 1 and not out["passed"] and out["failed"] == 1
    finally:
        registry.REGISTRY.pop(name)


def test_cli_bad_input(capsys):
    assert main(["verify", "--draws", "1"]) == 2
    assert "draws" in capsys.readouterr().err
    assert main(["verify", "--convergence", "--settings", "nope", "--out", "/tmp/x"]) == 2


@pytest.mark.slow
def test_quick_verify_passes_in_under_two_minutes(capsys):
    import time

    t0 = time.perf_counter()
    rc = main(["verify", "--quick", "--json"])
    secs = time.perf_counter() - t0
    out = json.loads(capsys.readouterr().out)
    failed = [c for c in out["checks"] if not c["passed"]]
    assert rc == 0 and not failed, failed
    assert out["total"] >= 15
    print(f"quick verify: {out['total']} checks in {secs:.0f} s")


# ----------------------------------------------------------------------------- convergence study
def test_fit_slope_recovers_power_law():
    from symattn.verification.convergence import fit_slope

    n = np.array([250, 500, 1000, 2000, 4000])
    y = 3.0 * n**-0.5
    s, se = fit_slope(n, y, se=0.1 * y)
    assert abs(s + 0.5) < 1e-10 and se < 0.1


def test_convergence_run_writes_csv_and_png(tmp_path):
    from symattn.verification import convergence

    res = convergence.run(tmp_path, settings=["signal-tanh"], ns=(100, 200), draws_scale=0.05, finite_p=False)
    rows = convergence.read_csv(res["csv"])
    assert [r["n"] for r in rows] == [100, 200] and all(r["draws"] >= 2 for r in rows)
    assert res["png"].stat().st_size > 1000
    # rows of other settings are kept when one setting is re-run
    convergence.run(tmp_path, settings=["bulk-tanh"], ns=(100,), draws_scale=0.05, finite_p=False)
    assert {r["setting"] for r in convergence.read_csv(res["csv"])} == {"signal-tanh", "bulk-tanh"}
