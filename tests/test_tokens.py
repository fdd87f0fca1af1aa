"""Time-correlated tokens: symattn.tokens, symattn.temporal and the Monte Carlo under a TokenLaw (docs/theory.md §15).

References that are not the code under test:
- the AR(1) correlation ρ^|t−s| and its spectral density as the series 1 + 2Σρ^k cos kω;
- the empirical covariance of many sampled noise rows (Z = G Lᵀ has rows ~ N(0, T)) and the
  empirical persistence of a long Markov label chain;
- the paper's LR theory at T = I (symattn.theory.solve, symattn.generalization.solve_test: §3, §14.4);
- E_train = −γ² dF/dγ by finite differences of F (the formula for E_train is derived separately);
- the finite-n trace (1/n) tr T_n Q̄ from the eigenvalues of T_n (Szegő: the same limit);
- exact Monte Carlo at a stated n, draws and a tolerance max(3 se, 3 %).
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import symattn as sa
from symattn.errors import ParameterError
from symattn.montecarlo import exact_monte_carlo, sample_tokens
from symattn.temporal import linear_errors
from symattn.tokens import TokenLaw

GAMMAS = (0.01, 0.1, 1.0, 10.0)


# ----------------------------------------------------------------------------- the law
@pytest.mark.parametrize("rho", [-0.1, 1.0, 1.5, float("nan"), True, "0.5"])
def test_ar1_out_of_range_is_refused_by_name(rho):
    with pytest.raises(ParameterError) as e:
        TokenLaw(ar1=rho)
    assert e.value.name == "ar1" and "0 <= ar1 < 1" in str(e.value)


@pytest.mark.parametrize("r", [[0.9], [0.5, 0.5], [1.2, 0.5, 0.1], [[0.1]], [float("inf")], ["a"]])
def test_non_positive_definite_autocorrelation_is_refused(r):
    with pytest.raises(ParameterError) as e:
        TokenLaw(autocorr=r)
    assert e.value.name == "autocorr"


def test_refused_autocorrelation_really_has_an_indefinite_toeplitz():
    """[0.5, 0.5]: s(ω) = 1 + cos ω + cos 2ω dips to −1/8, so some T_n is indefinite."""
    from scipy.linalg import toeplitz

    lags = np.zeros(40)
    lags[:3] = [1.0, 0.5, 0.5]
    assert np.linalg.eigvalsh(toeplitz(lags)).min() < 0


@pytest.mark.parametrize("q", [0.0, 1.0, -0.2, 2.0])
def test_markov_out_of_range_is_refused(q):
    with pytest.raises(ParameterError) as e:
        TokenLaw(markov=q)
    assert e.value.name == "markov"


def test_ar1_and_autocorr_together_are_refused():
    with pytest.raises(ParameterError, match="autocorr"):
        TokenLaw(ar1=0.5, autocorr=[0.2])


def test_autocorr_from_npy_file(tmp_path):
    path = tmp_path / "r.npy"
    np.save(path, np.array([0.5, 0.2, -0.1]))
    law = TokenLaw(autocorr=str(path))
    assert law.autocorr.tolist() == [0.5, 0.2, -0.1] and law.source == str(path)
    assert np.allclose(law.correlation(5)[0], [1, 0.5, 0.2, -0.1, 0])
    with pytest.raises(ParameterError, match="autocorr"):
        TokenLaw(autocorr=str(tmp_path / "missing.npy"))
    np.save(path, np.array([0.95]))
    with pytest.raises(ParameterError, match="autocorr"):
        TokenLaw(autocorr=path)


def test_ar1_correlation_and_density():
    law = TokenLaw(ar1=0.7)
    t = np.arange(6)
    assert np.allclose(law.correlation(6), 0.7 ** np.abs(t[:, None] - t[None, :]), rtol=0, atol=1e-15)
    w = np.linspace(0, np.pi, 7)
    series = 1 + 2 * sum(0.7 ** k * np.cos(k * w) for k in range(1, 200))
    assert np.allclose(law.density(w), series, rtol=1e-12)
    _, s, sy = law.grid()
    assert abs(s.mean() - 1) < 1e-13 and np.all(sy == 1)       # r_0 = 1: ⟨s⟩ = 1


def test_markov_labels_have_the_stated_persistence():
    law = TokenLaw(markov=0.8)
    y = law.labels(200_000, np.random.default_rng(0))
    assert set(np.unique(y)) == {-1.0, 1.0}
    stay = np.mean(y[1:] == y[:-1])
    assert abs(stay - 0.8) < 4 * np.sqrt(0.8 * 0.2 / y.size)
    assert abs(y.mean()) < 0.02      # stationary: mean 0 (sd of the mean √(q/(1−q)/n) ≈ 0.0045)


def test_correlated_noise_has_covariance_T():
    law = TokenLaw(autocorr=[0.6, 0.3, 0.1])
    n, p = 6, 40_000
    X, _ = sample_tokens(n, p, rng=np.random.default_rng(1), tokens=law)
    emp = X.T @ X / p
    assert np.max(np.abs(emp - law.correlation(n))) < 5 / np.sqrt(p)


def test_identity_law_draws_the_paper_numbers_bit_for_bit():
    kw = dict(n=60, c=0.5, gamma=[0.1, 1.0], draws=2, seed=3, geometry=sa.Geometry(snr=1.0), error="both")
    a = exact_monte_carlo("tanh", **kw)
    b = exact_monte_carlo("tanh", tokens=TokenLaw(ar1=0.0), **kw)
    for key in ("attention", "linear", "attention_test", "linear_test"):
        assert np.array_equal(getattr(a, key), getattr(b, key))
    assert "tokens" not in b.provenance["parameters"]
    c = exact_monte_carlo("tanh", tokens={"ar1": 0.5}, **kw)
    assert not np.array_equal(a.linear, c.linear) and c.provenance["parameters"]["tokens"]["ar1"] == 0.5


@pytest.mark.parametrize("variant", [
    dict(residual=True), dict(heads=[np.eye(20), np.diag(np.linspace(0.5, 1.5, 20))], readout="sum"),
    dict(f=None, kernel="softmax", temperature=1.0, diagonal="zero"), dict(weights=np.diag(np.linspace(0.5, 1.5, 20))),
])
def test_every_layer_is_simulated_under_tokens(variant):
    kw = dict(n=40, c=0.5, gamma=[0.1, 1.0], draws=2, seed=5, error="both", **{k: v for k, v in variant.items() if k != "f"})
    f = variant.get("f", "tanh")
    iid = exact_monte_carlo(f, **kw)
    same = exact_monte_carlo(f, tokens={"ar1": 0.0}, **kw)
    ar = exact_monte_carlo(f, tokens={"ar1": 0.7, "markov": 0.8}, **kw)
    assert np.array_equal(iid.attention_test, same.attention_test) and np.array_equal(iid.attention, same.attention)
    assert np.isfinite(ar.attention_test).all() and not np.allclose(ar.attention, iid.attention)


def test_torch_backend_sees_the_same_correlated_draws():
    pytest.importorskip("torch")
    kw = dict(n=50, c=0.5, gamma=[0.1, 1.0], draws=2, seed=4, tokens=TokenLaw(ar1=0.6, markov=0.8), error="both")
    a = exact_monte_carlo("tanh", **kw)
    b = exact_monte_carlo("tanh", backend="torch", device="cpu", **kw)
    for key in ("attention", "linear", "attention_test", "linear_test"):
        assert np.allclose(getattr(a, key), getattr(b, key), rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------------------------- the LR theory
@pytest.mark.parametrize("m2", [0.0, 1.0])
def test_rho_zero_reproduces_the_paper_lr_values(m2):
    c, g = np.meshgrid([0.5, 1.0, 2.0], GAMMAS, indexing="ij")
    geo = sa.Geometry(snr=m2)
    for law in (None, TokenLaw(ar1=0.0), TokenLaw(markov=0.8)):   # T = I: Markov labels change nothing
        r = linear_errors(c, g, m2, law)
        train = sa.memorization_error("tanh", c=c, gamma=g, geometry=geo, model="linear")
        test = sa.generalization_error("tanh", c=c, gamma=g, geometry=geo, model="linear")
        assert np.max(np.abs(r["train"] - train)) < 1e-12
        assert np.max(np.abs(r["test"] - test)) < 1e-12


@pytest.mark.parametrize("law", [TokenLaw(ar1=0.8), TokenLaw(autocorr=[0.5, 0.2, -0.1], markov=0.9)])
def test_training_error_is_minus_gamma_squared_dF(law):
    c, g, h = 1.3, 0.4, 1e-5
    Fp = (linear_errors(c, g + h, 1.0, law)["F"] - linear_errors(c, g - h, 1.0, law)["F"]) / (2 * h)
    E = linear_errors(c, g, 1.0, law)["train"]
    assert abs(E + g * g * Fp) < 1e-8


def test_delta_matches_the_finite_n_trace():
    """δ from the spectral density against (1/n) tr T_n (cT_n/(1+δ) + γ)^{-1}: apart by O(1/n) (halves from n = 400 to 800)."""
    law, c, g = TokenLaw(ar1=0.8), 0.7, 0.05
    d = float(linear_errors(c, g, 0.0, law)["delta"])
    gaps = []
    for n in (400, 800):
        tau = np.linalg.eigvalsh(law.correlation(n))
        gaps.append(abs(np.mean(tau / (c * tau / (1 + d) + g)) - d) / d)
    assert gaps[0] < 2e-3 and 1.8 < gaps[0] / gaps[1] < 2.2


def test_cancellation_at_tiny_ridge_warns():
    from symattn.errors import PrecisionWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = linear_errors(0.5, 1e-4, 1.0, TokenLaw(ar1=0.5))        # resolved: no warning
    assert 0 < float(ok["train"]) < 1
    with pytest.warns(PrecisionWarning) as caught:
        linear_errors(0.5, [1e-4, 1e-10], 1.0, TokenLaw(ar1=0.5))
    assert any(issubclass(w.category, PrecisionWarning) for w in caught)


def test_grid_is_converged():
    law = TokenLaw(ar1=0.8, markov=0.9)
    a = linear_errors([0.5, 2.0], [0.01, 1.0], 1.0, law)
    b = linear_errors([0.5, 2.0], [0.01, 1.0], 1.0, law, grid=1 << 14)
    for k in ("train", "test"):
        assert np.max(np.abs(a[k] / b[k] - 1)) < 1e-12


def test_too_peaked_spectrum_is_refused_by_the_theory_only():
    with pytest.raises(ParameterError) as e:
        linear_errors(1.0, 0.1, 0.0, TokenLaw(ar1=0.999999))
    assert e.value.name == "ar1"
    with pytest.raises(ParameterError) as e:
        linear_errors(1.0, 0.1, 0.0, TokenLaw(ar1=0.5, markov=0.9999999))
    assert e.value.name == "markov"
    r = exact_monte_carlo("tanh", n=30, c=0.5, gamma=[1.0], draws=1, models=("linear",), tokens={"ar1": 0.999999})
    assert np.isfinite(r.linear).all()


def _check_against_mc(law, c, m2, n, draws, seed):
    mc = exact_monte_carlo("tanh", n=n, c=c, gamma=GAMMAS, draws=draws, seed=seed, geometry=sa.Geometry(snr=m2),
                           models=("linear",), error="both", tokens=law)
    th = linear_errors(c, np.array(GAMMAS), m2, law)
    bad = []
    for name, key in (("train", "linear"), ("test", "linear_test")):
        a = getattr(mc, key)
        mean, se = a.mean(0), a.std(0, ddof=1) / np.sqrt(draws)
        tol = np.maximum(3 * se, 0.03 * np.abs(mean))
        for j in np.flatnonzero(np.abs(th[name] - mean) > tol):
            bad.append((str(law), c, m2, name, GAMMAS[j], float(th[name][j]), float(mean[j]), float(se[j])))
    return bad


@pytest.mark.parametrize("law,c,m2", [
    (TokenLaw(ar1=0.5), 0.5, 0.0), (TokenLaw(ar1=0.8), 2.0, 1.0),
    (TokenLaw(autocorr=[0.5, 0.2, -0.1], markov=0.9), 1.0, 1.0),      # held out: not AR(1), Markov labels
    (TokenLaw(ar1=0.3, markov=0.2), 0.5, 1.0),                        # anti-persistent labels
])
def test_lr_theory_matches_monte_carlo(law, c, m2):
    """n = 300, 12 draws, every γ, training and test error within max(3 se, 3 %)."""
    assert not _check_against_mc(law, c, m2, n=300, draws=12, seed=11)


@pytest.mark.slow
def test_lr_theory_acceptance_grid():
    """The acceptance grid: AR(1) ρ ∈ {0.2, 0.5, 0.8}, c ∈ {0.5, 1, 2}, ‖μ‖² ∈ {0, 1}, 4 γ, n = 1000, 16 draws."""
    bad = []
    for rho in (0.2, 0.5, 0.8):
        for c in (0.5, 1.0, 2.0):
            for m2 in (0.0, 1.0):
                bad += _check_against_mc(TokenLaw(ar1=rho), c, m2, n=1000, draws=16, seed=100)
    assert not bad, bad


# ----------------------------------------------------------------------------- the front
def test_front_linear_under_tokens_and_refusals_for_attention():
    law = TokenLaw(ar1=0.5)
    geo = sa.Geometry(snr=1.0)
    E = sa.memorization_error(c=1.0, gamma=[0.1, 1.0], geometry=geo, model="linear", tokens=law)
    assert np.allclose(E, linear_errors(1.0, [0.1, 1.0], 1.0, law)["train"], rtol=0, atol=0)
    Et = sa.generalization_error(c=1.0, gamma=[0.1, 1.0], geometry=geo, model="linear", tokens={"ar1": 0.5})
    assert np.allclose(Et, linear_errors(1.0, [0.1, 1.0], 1.0, law)["test"], rtol=0, atol=0)
    for model in ("attention", "both"):
        with pytest.raises(ParameterError) as e:          # attention under T is at finite p: n is needed
            sa.memorization_error(c=1.0, gamma=0.1, model=model, tokens=law)
        assert e.value.name == "n"
        with pytest.raises(ParameterError, match="W = I \\+ low rank only") as e:
            sa.Layer("tanh", residual=True).theory(1.0, 0.1, n=100, model=model, tokens=law)
        assert e.value.name == "tokens"
        with pytest.raises(ParameterError) as e:          # the test error too (docs/theory.md §15.6)
            sa.generalization_error(c=1.0, gamma=0.1, model=model, tokens=law)
        assert e.value.name == "n"
    with pytest.raises(ParameterError) as e:
        sa.memorization_error(c=1.0, gamma=0.1, model="linear", tokens=law, backend="mpmath")
    assert e.value.name == "backend"
    r = sa.Layer("tanh").simulate(n=40, c=0.5, gamma=[1.0], draws=1, tokens=law)
    assert r.provenance["parameters"]["tokens"]["ar1"] == 0.5


# ----------------------------------------------------------------------------- the command line
def _cli(capsys, *argv):
    from symattn.cli import main

    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_solve_linear_under_tokens(capsys, tmp_path):
    import json

    code, out, err = _cli(capsys, "solve", "--c", 0.5, 2, "--gamma", 0.1, 1, "--snr", 1, "--model", "linear",
                          "--error", "both", "--ar1", 0.5, "--markov", 0.9, "--json")
    assert code == 0, err
    data = json.loads(out)
    law = TokenLaw(ar1=0.5, markov=0.9)
    for key, name in (("E_linear", "train"), ("E_linear_test", "test")):
        ref = linear_errors(np.array([[0.5], [2.0]]), np.array([[0.1, 1.0]]), 1.0, law)[name]
        assert np.allclose(data[key], ref, rtol=1e-14)
    assert data["provenance"]["parameters"]["tokens"]["markov"] == 0.9
    path = tmp_path / "r.npy"
    np.save(path, np.array([0.5, 0.2]))
    code, out, err = _cli(capsys, "solve", "--c", 1, "--gamma", 0.1, "--model", "linear", "--autocorr", path)
    assert code == 0 and "tokens: TokenLaw(autocorr=" in out, err


@pytest.mark.parametrize("argv,name", [
    (["solve", "--c", 0.5, "--gamma", 0.1, "--model", "both", "--error", "both", "--ar1", 0.5, "--json"], "n"),
    (["solve", "--c", 0.5, "--gamma", 0.1, "--n", 100, "--model", "both", "--error", "both", "--ar1", -0.1], "ar1"),
    (["solve", "--c", 0.5, "--gamma", 0.1, "--model", "linear", "--ar1", 1.0], "ar1"),
    (["solve", "--c", 0.5, "--gamma", 0.1, "--model", "linear", "--markov", 0], "markov"),
    (["solve", "--c", 0.5, "--gamma", 0.1, "--model", "linear", "--ar1", 0.5, "--residual"], "tokens"),
    (["simulate", "--n", 40, "--c", 0.5, "--gamma", 0.1, "--ar1", -0.2], "ar1"),
])
def test_cli_bad_token_law_is_one_line_exit_2(capsys, argv, name):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and f"invalid {name}=" in err and "Traceback" not in err


@pytest.mark.parametrize("command", ["simulate", "solve"])
def test_cli_non_positive_definite_autocorr_file(capsys, tmp_path, command):
    path = tmp_path / "bad.npy"
    np.save(path, np.array([0.9]))
    code, out, err = _cli(capsys, command, "--n", 40, "--c", 0.5, "--gamma", 0.1, "--autocorr", path,
                          "--model", "both", "--error", "both", "--json")
    assert code == 2 and err.count("\n") == 1 and "invalid autocorr=" in err


def test_cli_both_models_both_errors_under_tokens(capsys, tmp_path):
    """solve and simulate with --model both --error both --json under --ar1, and --autocorr with --markov:
    solve's attention values are those of symattn.temporal (train §15.5, test §15.6)."""
    import json
    import warnings

    from symattn.errors import AccuracyWarning
    from symattn.temporal import attention_test_errors

    path = tmp_path / "r.npy"
    np.save(path, np.array([0.5, 0.2, -0.1]))
    for law_args, law in (((("--ar1", 0.5),), TokenLaw(ar1=0.5)),
                          ((("--autocorr", path), ("--markov", 0.8)), TokenLaw(autocorr=[0.5, 0.2, -0.1], markov=0.8))):
        flags = [x for pair in law_args for x in pair]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            code, out, err = _cli(capsys, "solve", "--c", 1, "--gamma", 0.1, 1, "--n", 300, "--model", "both",
                                  "--error", "both", *flags, "--json")
        assert code == 0, err
        data = json.loads(out)
        for j, g in enumerate((0.1, 1.0)):
            r = attention_test_errors("tanh", 1.0, g, n=300, tokens=law)
            assert data["E_attention_test"][j] == pytest.approx(r["test"], rel=1e-12)
            assert data["E_attention"][j] == pytest.approx(r["train"], rel=1e-12)
        assert len(data["E_linear_test"]) == 2
        code, out, err = _cli(capsys, "simulate", "--n", 60, "--c", 1, "--gamma", 0.1, 1, "--model", "both",
                              "--error", "both", "--draws", 2, *flags, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert all(len(data[k]["mean"]) == 2 for k in ("E_attention", "E_linear", "E_attention_test", "E_linear_test"))
    code, out, err = _cli(capsys, "simulate", "--n", 60, "--c", 1, "--gamma", 1, "--model", "linear", "--ar1", 0.5,
                          "--draws", 1, "--json")
    assert code == 0 and json.loads(out)["E_attention"] is None, err


def test_cli_simulate_under_tokens(capsys):
    import json

    code, out, err = _cli(capsys, "simulate", "--n", 60, "--c", 0.5, "--gamma", 0.1, 1, "--ar1", 0.5, "--markov", 0.8,
                          "--draws", 2, "--error", "both", "--json")
    assert code == 0, err
    data = json.loads(out)
    ref = exact_monte_carlo("tanh", n=60, c=0.5, gamma=[0.1, 1.0], draws=2, seed=0, error="both",
                            tokens=TokenLaw(ar1=0.5, markov=0.8))
    assert np.allclose(data["E_linear_test"]["mean"], ref.linear_test.mean(0), rtol=1e-12)
    assert np.allclose(data["E_attention"]["mean"], ref.attention.mean(0), rtol=1e-12)
    assert data["provenance"]["parameters"]["tokens"]["ar1"] == 0.5


# ----------------------------------------------------------------------------- attention's kernel band
@pytest.mark.parametrize("f", ["relu", "tanh", "sin"])
def test_kernel_band_matches_the_mean_kernel(f):
    """β_k against the lag-k mean of the exact kernel (n = p = 400, ρ = 0.9, 3 draws; n − k entries per lag)."""
    from symattn.montecarlo import kernel_matrix
    from symattn.temporal import kernel_band

    n = p = 400
    law = TokenLaw(ar1=0.9)
    chol = law.cholesky(n)
    beta = kernel_band(f, p, law, lags=6)
    for seed in range(3):
        X, _ = sample_tokens(n, p, rng=np.random.default_rng(seed), tokens=law, chol=chol)
        K = kernel_matrix(f, X, diagonal="zero")
        lag = np.array([np.diagonal(K, k)[: n - 6] for k in range(1, 7)])
        se = lag.std(axis=1) / np.sqrt(n / 20)      # neighbouring entries of one diagonal are correlated
        assert np.all(np.abs(lag.mean(axis=1) - beta) < 5 * se + 1e-3 * np.abs(beta)), (f, lag.mean(1), beta)
