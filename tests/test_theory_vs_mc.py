r"""Theorem 1 (the attention system, docs/theory.md §6) against exact Monte Carlo.

Monte Carlo is the referee: ``symattn.simulate`` (f on the diagonal, balanced labels), against
``symattn.memorization_error(..., n=n)`` (the finite-p diagonal d_n). Per γ, with se the
standard error over draws:

  pass  ⇔  |MC − theory| ≤ max(k_se·se, k_rel·theory).

- Default suite (fast): n = 500, 12 draws, tanh and ReLU, geometries μ only / w_K = w_Q = μ /
  rank 2, c ∈ {0.5, 2}; tolerance max(3.5·se, 3 %) -- looser than the full grid's because
  the finite-n effects are larger at n = 500 and the se from few draws is itself noisy. With
  6 draws two cells failed by chance: tanh μ-only c = 0.5 γ = 10 (z = −4.1; a 40-draw rerun
  gives −0.8 %, z = −0.8) and tanh rank-2 c = 0.5 γ = 0.01 (six tightly clustered draws,
  z = −8.4; 60 draws give −2.1 %, z = −1.9), hence 12 draws (< 0.1 s CPU each).
Two-stage rule (both suites): a configuration with a failing cell is simulated again with more
draws from the same seed (the first draws are the original ones; 3× for the fast subset, 30 for
the full grid) and judged on all of them, because se from 6–12 draws is itself noisy.

- ``-m slow``: the full grid of issue 3 at n = 2000, 6 draws, tolerance max(3·se, 2 %):
  5 activations × 6 geometries × c ∈ {0.5, 1, 2} (``python -m symattn.cli.mc_grid`` runs the
  same configurations and writes docs/validation.md).

Known exceptions (docs/theory.md §9, docs/theory.md §10) are not hidden: a configuration labelled (a)
(a1 = 0 with a large signal × weight product) or (b) (finite-p signal strength t ≥ 0.1) that
fails is reported as xfail with its numbers; a failure anywhere else fails the test.
"""

from __future__ import annotations

import numpy as np
import pytest

import symattn as sa
from symattn.cli import mc_grid as grid_cli
from symattn.verification import mc_grid
from symattn.verification.mc_grid import ACTIVATIONS, CS, GEOMETRY_NAMES, run_config_confirmed

FAST = mc_grid.QUICK  # n=500, 12 draws, tol max(3.5 se, 3 %)


def _judge(cells):
    """The failing cells outside the known exceptions (to be asserted empty); xfails when only known
    exceptions fail."""
    lines = [f"{cl.activation} {cl.geometry} c={cl.c:g} γ={cl.gamma:g} ({cl.draws} draws"
             + (f"; with the first {cl.extra['stage1'].draws}: gap {cl.extra['stage1'].rel:+.2%}, "
                f"z={cl.extra['stage1'].z:+.1f}" if cl.extra.get("stage1") else "")
             + f"): MC {cl.mc_mean:.5g} ± {cl.mc_se:.2g} "
             f"vs theory {cl.theory:.5g} (gap {cl.rel:+.2%}, z={cl.z:+.1f}, tol {cl.tolerance:.3g}, t={cl.t:.3f}, "
             f"q={cl.q:.3f}, exception={cl.exception or '-'})" for cl in cells if not cl.passed]
    bad = [cl for cl in cells if not cl.passed and not cl.exception]
    if lines and not bad:
        pytest.xfail("known exception:\n" + "\n".join(lines))
    return bad, "theory vs Monte Carlo outside tolerance:\n" + "\n".join(lines)


@pytest.mark.parametrize("c", FAST["cs"])
@pytest.mark.parametrize("geometry", FAST["geometries"])
@pytest.mark.parametrize("f", FAST["activations"])
def test_theory_vs_mc_fast(f, geometry, c):
    cells = run_config_confirmed(f, geometry, c, n=FAST["n"], draws=FAST["draws"], confirm_draws=3 * FAST["draws"],
                                 tol_se=FAST["tol_se"], tol_rel=FAST["tol_rel"])
    assert len(cells) == len(mc_grid.GAMMAS)
    assert all(cl.draws in (FAST["draws"], 3 * FAST["draws"]) and cl.n == FAST["n"] for cl in cells)
    bad, report = _judge(cells)
    assert not bad, report


@pytest.mark.slow
@pytest.mark.parametrize("c", CS)
@pytest.mark.parametrize("geometry", GEOMETRY_NAMES)
@pytest.mark.parametrize("f", ACTIVATIONS)
def test_theory_vs_mc_full_grid(f, geometry, c):
    """Issue 3: n = 2000, 6 draws (30 from the same seed when a cell fails), f on the diagonal,
    theory with d_n, tolerance max(3 se, 2 %)."""
    cells = run_config_confirmed(f, geometry, c, n=2000, draws=6, confirm_draws=30, tol_se=3.0, tol_rel=0.02)
    assert len(cells) == len(mc_grid.GAMMAS)
    bad, report = _judge(cells)
    assert not bad, report


# ----------------------------------------------------------------------------- the grid tool itself
def test_cell_verdict_and_exception_labels():
    base = dict(activation="tanh", geometry="mu", c=1.0, gamma=0.1, n=100, p=100, draws=6, seed=0,
                theory_dinf=0.5, d_n=0.1, a1=0.6, t=0.01, q=0.0, tol_se=3.0, tol_rel=0.02)
    ok = mc_grid.Cell(mc_mean=0.505, mc_se=0.002, theory=0.5, **base)     # 1 % < 2 %
    assert ok.passed and abs(ok.z - 2.5) < 1e-12 and abs(ok.rel - 0.01) < 1e-12
    noisy = mc_grid.Cell(mc_mean=0.52, mc_se=0.01, theory=0.5, **base)   # 4 % but 2 se
    assert noisy.passed
    bad = mc_grid.Cell(mc_mean=0.52, mc_se=0.001, theory=0.5, **base)    # 4 %, 20 se
    assert not bad.passed and bad.exception == ""
    strong = mc_grid.Cell(mc_mean=0.52, mc_se=0.001, theory=0.5, **dict(base, t=0.2))
    assert strong.exception == "b"
    cos = mc_grid.Cell(mc_mean=0.52, mc_se=0.001, theory=0.5, **dict(base, a1=0.0, q=0.5))
    assert cos.exception == "a"


def test_indicators_match_definitions():
    """t = (‖μ‖² + Σ κ_Kκ_Q)/√p and q = √2|a2|(‖μ‖²+Σκ_Kκ_Q)‖w_K‖‖w_Q‖/(c√p) (docs/theory.md §9)."""
    f = sa.activation("cos")
    a2 = float(f.hermite_coefficients(kmax=2, dps=20)[2])
    g = sa.Geometry.aligned(4.0)  # ‖μ‖² = 4, w_K = w_Q = μ: Λ00 = 4 + 16 = 20, ‖w‖² = 4
    t, q = mc_grid.indicators(f, g, 1.0, 1000)
    assert abs(t - 20 / np.sqrt(1000)) < 1e-12
    assert abs(q - np.sqrt(2) * abs(a2) * 20 * 4 / np.sqrt(1000)) < 1e-12
    assert mc_grid.indicators(sa.activation("tanh"), sa.Geometry(), 1.0, 1000) == (0.0, 0.0)


def test_geometries_are_as_documented():
    geo = {k: g for k, (_, g) in mc_grid.geometries().items()}
    assert geo["mu0"].is_null
    assert geo["aligned"] == sa.Geometry.aligned(1.0)
    assert geo["rank2"].rank == 2 and abs(geo["rank2"].signal_weight - 2.25) < 1e-12
    assert geo["perp"].gram[0, 1] == geo["perp"].gram[0, 2] == 0.0
    # perp is exactly the μ-only theory; asym is not symmetric (w_K ≠ w_Q)
    np.testing.assert_allclose(sa.memorization_error("tanh", c=1.0, gamma=[0.1, 1.0], geometry=geo["perp"]),
                               sa.memorization_error("tanh", c=1.0, gamma=[0.1, 1.0], geometry=geo["mu"]),
                               rtol=1e-12)
    assert geo["asym"].gram[1, 1] != geo["asym"].gram[2, 2]


def test_grid_script_writes_report_and_csv(tmp_path):
    """A tiny run of ``python -m symattn.cli.mc_grid`` (n = 60, 2 draws): report, CSV, resume."""
    out = tmp_path / "v.md"
    out.write_text("# Validation\n\nhand-written intro\n\n" + mc_grid.MARK_BEGIN + "\nold\n" + mc_grid.MARK_END
                   + "\n\nhand-written tail\n")
    argv = ["--n", "60", "--draws", "2", "--activations", "tanh", "--geometries", "mu", "--c", "1",
            "--out", str(out)]
    rc = grid_cli.main(argv)
    assert rc in (0, 1)
    text = out.read_text()
    assert "hand-written intro" in text and "hand-written tail" in text and "\nold\n" not in text
    assert "| tanh | mu | 1 |" in text and "**Summary.**" in text
    rows = mc_grid._read_csv(out.with_suffix(".csv"))
    assert len(rows) == len(mc_grid.GAMMAS)
    assert {r["activation"] for r in rows} == {"tanh"} and all(int(r["n"]) == 60 for r in rows)
    # resume reads the CSV back instead of simulating again: the report is unchanged
    assert grid_cli.main(argv + ["--report-only"]) == rc
    assert out.read_text().split("**Summary.**")[1] == text.split("**Summary.**")[1]
    assert len(mc_grid._read_csv(out.with_suffix(".csv"))) == len(mc_grid.GAMMAS)


def test_grid_confirmation_stage(tmp_path):
    """With a zero tolerance every cell fails, so every configuration is re-measured with more
    draws from the same seed: the first draws are identical, the CSV holds both stages."""
    out = tmp_path / "v.md"
    argv = ["--n", "40", "--draws", "2", "--confirm-draws", "3", "--activations", "tanh", "--geometries", "mu0",
            "--c", "1", "--tol-se", "0", "--tol-rel", "0", "--out", str(out)]
    assert grid_cli.main(argv) == 1
    rows = mc_grid._read_csv(out.with_suffix(".csv"))
    assert sorted({int(r["draws"]) for r in rows}) == [2, 3]
    text = out.read_text()
    assert "Re-measured configurations" in text and "†3" in text
    # draw k does not depend on the number of draws: the 3-draw run extends the 2-draw one
    r2 = sa.simulate("tanh", n=40, c=1.0, gamma=[0.1], draws=2,
                     seed=int(rows[0]["seed"]), models=("attention",), progress=False)
    r3 = sa.simulate("tanh", n=40, c=1.0, gamma=[0.1], draws=3,
                     seed=int(rows[0]["seed"]), models=("attention",), progress=False)
    np.testing.assert_array_equal(r2.attention, r3.attention[:2])


# ----------------------------------------------------------------------------- Proposition 1 traces
@pytest.mark.parametrize("f,c", [("tanh", 1.0), ("relu", 0.5)])
def test_proposition1_traces_against_mc(f, c):
    r"""Bulk (μ = 0) traces (1/n)tr φ(S)Q0, (1/n)tr φ(S)Q0K, (1/n)tr φ(S)KQ0K of the exact kernel K
    (f on the diagonal) at n = 400, 3 draws, against ``sa.bulk_trace(..., n=400)``.

    Traces self-average (small se); tolerance max(4·se, 1 %) covers the O(1/n) bias.
    """
    if not hasattr(sa, "bulk_trace"):
        pytest.skip("sa.bulk_trace not available")
    from symattn.model import dimension
    from symattn.montecarlo import draw_generators, kernel_matrix, sample_tokens

    n, draws, gamma = 400, 3, 0.1
    p = dimension(n, c)
    act = sa.activation(f)
    specs = [("Q", "1", 0), ("Q", "lam", 1), ("QK", "1", 0), ("QK", "lam", 1), ("QK", "lam**2", 2),
             ("KQK", "1", 0), ("KQK", "lam**2", 2), ("KQK", "lam**3", 3)]
    vals = np.empty((draws, len(specs)))
    for k, rng in enumerate(draw_generators(11, draws)):
        Z, _ = sample_tokens(n, p, None, rng)
        K = kernel_matrix(act, Z)
        S = Z.T @ Z / p
        Q = np.linalg.inv(c * K.T @ S @ K + gamma * np.eye(n))  # ΦᵀΦ/n = K ZᵀZ K/n = c K S K
        Sj = [np.eye(n), S, S @ S, S @ S @ S]
        mats = {"Q": Q, "QK": Q @ K, "KQK": K.T @ Q @ K}
        for j, (kind, _, power) in enumerate(specs):
            vals[k, j] = np.trace(Sj[power] @ mats[kind]) / n
    mean = vals.mean(0)
    se = vals.std(0, ddof=1) / np.sqrt(draws)
    for j, (kind, phi, _) in enumerate(specs):
        th = float(sa.bulk_trace(act, c=c, gamma=gamma, phi=phi, kind=kind, n=n))
        tol = max(4 * se[j], 0.01 * abs(th))
        assert abs(mean[j] - th) <= tol, (kind, phi, mean[j], se[j], th)
