"""The general-W theory (symattn/backends/general_w/, docs/theory.md §12).

Default suite: the reduction to Theorem 1 (an independent derivation: the nine-traces Woodbury of
§6 against the Woodbury on the pencil), the W = I bulk with a finite-p diagonal, the implicit
derivative against finite differences of F, τ against a closed form, the API/CLI contract, and
small-n Monte Carlo of random ensembles with a standard-error tolerance. Slow (``-m slow``): the
n = 1000 random ensembles within max(3 se, 2 %) and the MiniLM acceptance within max(3 se, 3 %).
"""

import json

import numpy as np
import pytest

import symattn as sa
from symattn.backends import general_w as gw
from symattn.backends.general_w import hoperator, linalg, pencil
from symattn.backends import general_w_entry as ge
from symattn.errors import ParameterError, RealWeightsUnavailable

GAMMAS = [0.01, 0.1, 1.0, 10.0]


def _spiked(p, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((3, p)) / np.sqrt(p)
    mu = 1.2 * v[0]
    wk = 0.8 * v[1] + 0.5 * v[0]
    wq = 0.7 * v[2] - 0.6 * v[0]
    return mu, wk, wq


@pytest.mark.parametrize("f", ["tanh", "relu", "gelu"])
@pytest.mark.parametrize("c", [0.5, 2.0])
def test_reduction_to_theorem1(f, c):
    """W = I + w_K w_Qᵀ, μ ≠ 0: the p → ∞ form of the general-W theory (constants of N(0, 1),
    d = lim f(√p)/√p, normalised traces of I; W and μ exact in the Woodbury step) equals Theorem 1."""
    p = 60
    mu, wk, wq = _spiked(p)
    W = np.eye(p) + np.outer(wk, wq)
    E = gw.general_w_error(sa.activation(f), c, GAMMAS, W, mu, limit=True)["E"]
    ref = sa.memorization_error(f, c, GAMMAS, sa.Geometry.from_vectors(mu, wk[None], wq[None]))
    np.testing.assert_allclose(E, ref, rtol=1e-10, atol=0)


def test_identity_bulk_with_finite_p_diagonal():
    """W = I, μ = 0 at finite p: the general-W theory (random diagonal f(q)/√p) against the §5 bulk
    with d_n (for tanh the diagonal's law hardly matters: both agree to 1e-6)."""
    for c in (0.5, 2.0):
        p = 200
        E = gw.general_w_error(sa.activation("tanh"), c, GAMMAS, np.eye(p))["E"]
        ref = sa.memorization_error("tanh", c, GAMMAS, n=round(p / c))
        np.testing.assert_allclose(E, ref, rtol=1e-6)


def test_derivative_against_finite_differences():
    """E = −γ²F' by implicit differentiation and complex steps against a central difference of F."""
    rng = np.random.default_rng(1)
    p = 80
    W = rng.standard_normal((p, p)) / np.sqrt(p)
    mu = 0.9 * rng.standard_normal(p) / np.sqrt(p) * 2
    f = sa.activation("tanh")
    for g in (0.05, 2.0):
        h = 1e-5 * g
        E = gw.general_w_error(f, 0.5, [g], W, mu, signal="linear")["E"][0]
        Fp = gw.general_w_error(f, 0.5, [g - h, g + h], W, mu, signal="linear")["F"]
        assert E == pytest.approx(-g * g * (Fp[1] - Fp[0]) / (2 * h), rel=1e-6)


def test_tau_of_he2_is_rho_squared():
    """f = x² − 1 has only a 2nd Hermite coefficient, so τ = ρ² exactly, and a1' = 0."""
    rng = np.random.default_rng(2)
    p = 50
    A = rng.standard_normal((p, p))
    W = A + 0.7 * A.T
    k = gw.general_w_constants(sa.activation("x**2"), W)
    rho = np.sum(W * W.T) / np.sum(W * W)
    assert k.rho == pytest.approx(rho, rel=1e-12)
    assert k.tau == pytest.approx(rho**2, rel=1e-9)
    assert abs(k.a1) < 1e-9


def test_api_contract_and_bad_input():
    rng = np.random.default_rng(3)
    p = 40
    W = rng.standard_normal((p, p)) / np.sqrt(p)
    mu = rng.standard_normal(p) / np.sqrt(p)
    E = sa.memorization_error("tanh", 0.5, [0.1, 1.0], weights=W, mu=mu)
    np.testing.assert_array_equal(E, gw.general_w_error(sa.activation("tanh"), 0.5, [0.1, 1.0], W, mu)["E"])
    both = sa.memorization_error("tanh", 0.5, [0.1, 1.0], weights=W, mu=mu, model="both")
    np.testing.assert_allclose(both["linear"], sa.memorization_error("tanh", 0.5, [0.1, 1.0], model="linear",
                                                                      geometry=sa.Geometry(snr=float(mu @ mu))))
    for kwargs, name in ((dict(weights=W[:, :5]), "weights"), (dict(weights=W, mu=mu[:5]), "mu"),
                         (dict(weights=W * np.nan), "weights"), (dict(mu=mu), "weights"),
                         (dict(weights=W, geometry=sa.Geometry(snr=1.0)), "geometry"),
                         (dict(weights=W, backend="torch"), "backend"),
                         (dict(weights=np.eye(gw.MPMATH_MAX_P + 1), backend="mpmath"), "backend"),
                         (dict(weights=W, n=7), "n")):
        with pytest.raises(ParameterError) as err:
            sa.memorization_error("tanh", 0.5, 1.0, **kwargs)
        assert err.value.name == name


def test_simulate_is_the_same_model():
    """sa.simulate(W=, mu=) computes K = f(XᵀWX/√p)/√p with X = μyᵀ + Z: one draw by hand."""
    from symattn.montecarlo import draw_errors, sample_tokens

    rng = np.random.default_rng(4)
    n, p = 40, 20
    W = rng.standard_normal((p, p)) / np.sqrt(p)
    mu = rng.standard_normal(p) / np.sqrt(p)
    X, y = sample_tokens(n, p, mu, np.random.default_rng(9))
    f = sa.activation("tanh")
    K = f.numpy(X.T @ W @ X / np.sqrt(p)) / np.sqrt(p)
    M = K.T @ X.T @ X @ K / n
    g = 0.3
    r = np.linalg.solve(M + g * np.eye(n), y / np.sqrt(n))
    E_hand = g * g * float(r @ r)
    assert draw_errors(f, X, y, [g], W=W)["attention"][0] == pytest.approx(E_hand, rel=1e-9)


def _ensembles(p, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((p, p))
    out = {"ginibre": A / np.sqrt(p), "wigner": (A + A.T) / np.sqrt(2 * p)}
    B = rng.standard_normal((p, p // 2))
    Wi = B @ B.T
    out["wishart"] = Wi / np.sqrt(np.sum(Wi * Wi) / p)
    C, D = rng.standard_normal((p, p // 4)), rng.standard_normal((p // 4, p))
    R = C @ D
    out["rank-p/4"] = R / np.sqrt(np.sum(R * R) / p)
    return out


@pytest.mark.parametrize("name", ["ginibre", "wigner", "wishart", "rank-p/4"])
def test_random_ensembles_small_n(name):
    """n = 200, c = 0.5, μ = 0, 12 draws: within 4 se + 3 % (the 3 % allows the finite-n bias)."""
    n, c = 200, 0.5
    W = _ensembles(round(c * n), 3)[name]
    E = sa.memorization_error("tanh", c, GAMMAS, weights=W)
    r = sa.simulate("tanh", n=n, c=c, gamma=GAMMAS, W=W, draws=12, seed=5, models=("attention",), progress=False)
    assert np.all(np.abs(E - r.attention_mean) <= 4 * r.attention_sem + 0.03 * r.attention_mean), (
        E, r.attention_mean, r.attention_sem)


def test_cli_weights(tmp_path, capsys):
    from symattn.cli import main

    W = np.eye(20) + 0.1 * np.ones((20, 20))
    path = tmp_path / "w.npy"
    np.save(path, W)
    mu_path = tmp_path / "mu.npy"
    np.save(mu_path, np.full(20, 0.2))
    assert main(["solve", "-a", "tanh", "--c", "0.5", "--gamma", "0.1", "1", "--weights", str(path),
                 "--mu", str(mu_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ref = sa.memorization_error("tanh", 0.5, [0.1, 1.0], weights=W, mu=np.full(20, 0.2))
    np.testing.assert_allclose(data["E_attention"], ref, rtol=1e-12)
    assert data["p"] == 20 and data["n"] == 40 and data["rank"] == 20 and data["structure"] == "free"
    # a rank-3 W at p = 20 takes the Hermite blocks (rank <= p/4); --structure free forces the free noise
    rng = np.random.default_rng(2)
    low = rng.standard_normal((20, 3)) @ rng.standard_normal((3, 20))
    np.save(tmp_path / "low.npy", low)
    for structure in ("auto", "free"):
        assert main(["solve", "-a", "tanh", "--c", "0.5", "--gamma", "1", "--weights", str(tmp_path / "low.npy"),
                     "--structure", structure, "--model", "attention", "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["rank"] == 3 and data["structure"] == {"auto": "blocks", "free": "free"}[structure]
        ref = sa.memorization_error("tanh", 0.5, [1.0], weights=low, structure=structure)
        np.testing.assert_allclose(data["E_attention"], ref, rtol=1e-12)
    assert main(["solve", "-a", "tanh", "--c", "0.5", "--gamma", "1", "--weights", str(tmp_path / "low.npy")]) == 0
    assert "kernel model: structured Hermite blocks" in capsys.readouterr().out
    for argv in (["--weights", str(tmp_path / "missing.npy")], ["--weights", "minilm:x"], ["--structure", "blocks"],
                 ["--weights", str(path), "--structure", "cubic"],
                 ["--weights", str(path), "--mu", "nope"], ["--weights", str(path), "--wk2", "1"],
                 ["--mu", "top"], ["--weights", str(path), "--mu", str(mu_path), "--snr", "2"]):
        try:
            code = main(["solve", "-a", "tanh", "--c", "0.5", "--gamma", "1"] + argv)
        except SystemExit as exc:
            code = exc.code
        assert code == 2, argv
        assert "Traceback" not in capsys.readouterr().err


def _minilm():
    from symattn import realweights as rw

    try:
        return rw, rw.load_minilm()
    except RealWeightsUnavailable as exc:
        pytest.skip(str(exc))


def test_layer_weight_heads():
    rw, wts = _minilm()
    heads = [rw.layer_weight(wts, 1, head=h) for h in range(12)]
    for Wh in heads:
        assert np.sum(Wh * Wh) / 384 == pytest.approx(1.0)
        assert np.linalg.matrix_rank(Wh) <= rw.MINILM_HEAD_DIM
    raw = wts.key[1].T @ wts.query[1]
    parts = sum(wts.key[1][32 * h:32 * (h + 1)].T @ wts.query[1][32 * h:32 * (h + 1)] for h in range(12))
    np.testing.assert_allclose(parts, raw, atol=1e-12)
    with pytest.raises(ParameterError):
        rw.layer_weight(wts, 1, head=12)


# ---------------------------------------------------------------------------------------------- slow
ENSEMBLE_CASES = [(name, c, mu) for c in (0.5, 2.0) for name in ("ginibre", "wigner", "wishart", "rank-p/4")
                  for mu in (("zero", "top") if c < 1 else ("zero",))]


@pytest.mark.slow
@pytest.mark.parametrize("name,c,mu", ENSEMBLE_CASES)
def test_random_ensembles_n1000(name, c, mu):
    """n = 1000, tanh, 16 draws: within max(3 se, 2 %) (docs/theory.md §12.6); μ = top: √1 × the top
    eigenvector of (W + Wᵀ)/2 (c = 2, p = 2000, is μ = 0 only: 4000² dense inverses are slow)."""
    from symattn.realweights import signal_direction

    n = 1000
    W = _ensembles(round(c * n), 11)[name]
    m = None if mu == "zero" else signal_direction(W, 1.0)
    E = sa.memorization_error("tanh", c, GAMMAS, weights=W, mu=m)
    r = sa.simulate("tanh", n=n, c=c, gamma=GAMMAS, W=W, mu=m, draws=16, seed=7, models=("attention",),
                    progress=False)
    tol = np.maximum(3 * r.attention_sem, 0.02 * r.attention_mean)
    assert np.all(np.abs(E - r.attention_mean) <= tol), (E, r.attention_mean, r.attention_sem)


MINILM_CASES = [(L, h, m) for L in (0, 2, 5) for h in (None, 0) for m in ("zero", "top")]


@pytest.mark.slow
@pytest.mark.parametrize("layer,head,mu", MINILM_CASES)
def test_minilm_acceptance(layer, head, mu):
    """MiniLM, tanh, c = 0.5 (n = 768), 16 draws: within max(3 se, 3 %) of the exact real-W Monte Carlo."""
    rw, wts = _minilm()
    W = rw.layer_weight(wts, layer, head=head)
    m = None if mu == "zero" else rw.signal_direction(W, 1.0)
    E = sa.memorization_error("tanh", 0.5, GAMMAS, weights=W, mu=m)
    r = sa.simulate("tanh", n=768, c=0.5, gamma=GAMMAS, W=W, mu=m, draws=16, seed=7, models=("attention",),
                    progress=False)
    tol = np.maximum(3 * r.attention_sem, 0.03 * r.attention_mean)
    assert np.all(np.abs(E - r.attention_mean) <= tol), (E, r.attention_mean, r.attention_sem)


HELD_OUT = [(1, 5, "top", 1.0, "tanh", 0.5), (3, None, "zero", 0.0, "erf", 1.0), (4, None, "top", 2.0, "gelu", 0.5),
            (3, 7, "zero", 0.0, "tanh", 2.0), (1, None, "top", 1.0, "relu", 1.0), (5, 0, "zero", 0.0, "gelu", 0.5),
            (2, 0, "zero", 0.0, "relu", 0.5)]


@pytest.mark.slow
@pytest.mark.parametrize("layer,head,mu,snr,f,c", HELD_OUT)
def test_minilm_held_out(layer, head, mu, snr, f, c):
    """Held-out MiniLM settings (other layers, heads, activations, c, snr), 16 draws, max(3 se, 3 %)."""
    rw, wts = _minilm()
    W = rw.layer_weight(wts, layer, head=head)
    m = None if mu == "zero" else rw.signal_direction(W, snr)
    n = round(W.shape[0] / c)
    E = sa.memorization_error(f, c, GAMMAS, weights=W, mu=m)
    r = sa.simulate(f, n=n, c=c, gamma=GAMMAS, W=W, mu=m, draws=16, seed=7, models=("attention",), progress=False)
    tol = np.maximum(3 * r.attention_sem, 0.03 * r.attention_mean)
    assert np.all(np.abs(E - r.attention_mean) <= tol), (E, r.attention_mean, r.attention_sem)


def test_latent_rule_reduces_to_finite_p():
    """For W = I + (b − 1)μ̂μ̂ᵀ (the surrogate of the strong-direction rule itself), signal='latent' is the
    finite-p conditional-kernel theory of docs/theory.md §10.3 (a different code path), and for another
    W it is the Gaussian-equivalent value plus the surrogate's correction."""
    p = 40
    mu = np.zeros(p)
    mu[3] = 1.3
    e = mu / np.linalg.norm(mu)
    b = 3.5
    W = np.eye(p) + (b - 1) * np.outer(e, e)
    E = sa.memorization_error("tanh", 0.5, [0.3], weights=W, mu=mu)
    s = np.sqrt(b - 1)
    ref = sa.memorization_error("tanh", 0.5, [0.3], sa.Geometry.from_vectors(mu, s * e, s * e), n=2 * p,
                                correction="finite-p")
    np.testing.assert_allclose(E, ref, rtol=1e-10)
    lin = gw.general_w_error(sa.activation("tanh"), 0.5, [0.3], W, mu, signal="linear")["E"]
    assert np.all(np.abs(E - lin) > 1e-4)   # the correction is not zero at t = b‖μ‖²/√p ≈ 0.93
    assert np.all(E < lin)                  # and it lowers E (conditional mean and slope, §10.1)


def test_symmetric_fast_path_equals_dense():
    """Symmetric W: the eigen-decomposed 2×2-block traces (one eigh) against the dense 2p×2p inverse (a
    1e-13 asymmetry forces the dense path)."""
    rng = np.random.default_rng(8)
    p = 30
    A = rng.standard_normal((p, p))
    W = (A + A.T) / np.sqrt(2 * p) + 0.3 * np.eye(p)
    mu = rng.standard_normal(p) / np.sqrt(p)
    W2 = W.copy()
    W2[0, 1] += 1e-13
    f = sa.activation("tanh")
    E1 = gw.general_w_error(f, 0.5, [0.05, 2.0], W, mu, signal="linear")["E"]
    E2 = gw.general_w_error(f, 0.5, [0.05, 2.0], W2, mu, signal="linear")["E"]
    np.testing.assert_allclose(E1, E2, rtol=1e-10)


def test_symbolic_pencil_inverts_to_Q():
    """The SymPy pencil with concrete matrices: its (x, x) inverse block is (γ + KᵀYᵀYK)^{-1}, and its
    self-energies equal the numeric backend's at random traces."""
    import sympy as sp

    from symattn.systems.general_w import general_w_pencil

    p, n = 3, 4
    P = general_w_pencil(p, n)
    rng = np.random.default_rng(6)
    Wn, Yn, Nn = rng.standard_normal((p, p)), rng.standard_normal((p, n)), rng.standard_normal((n, n))
    Dn = np.diag(rng.standard_normal(n))
    vals = {"a1": 0.7, "c": 0.5, "sigma": 0.4, "gamma": 0.9, "tau": 0.3}
    subs = {P.W: sp.Matrix(Wn), P.Y: sp.Matrix(Yn), P.D: sp.Matrix(Dn), P.Nt: sp.Matrix(Nn)}
    subs.update({P.symbols[k]: v for k, v in vals.items()})
    L = np.array(P.L.subs(subs).as_explicit().evalf(), dtype=float)
    K = vals["a1"] / vals["c"] * Yn.T @ Wn @ Yn + Dn + vals["sigma"] * Nn
    Q = np.linalg.inv(vals["gamma"] * np.eye(n) + K.T @ Yn.T @ Yn @ K)
    np.testing.assert_allclose(np.linalg.inv(L)[:n, :n], Q, rtol=1e-9, atol=1e-12)
    assert "W^{T}" in P.latex()
    # the self-energies against symattn.backends.general_w
    g = rng.standard_normal((3, 3))
    m = gw.general_w_model(sa.activation("tanh"), vals["c"], np.eye(4))
    m.a1, m.sigma2, m.tau = vals["a1"], vals["sigma"] ** 2, vals["tau"]
    S = pencil.sigma_pp(m, g)
    gs = {P.g[i, j]: g[i, j] for i in range(3) for j in range(3)}
    for k, v in P.sigma_pp.items():
        assert float(v.subs(subs).subs(gs)) == pytest.approx(S[k], rel=1e-12)
    Pn, _ = pencil.p_traces(m, S)
    T = {P.T[0, 0]: Pn["lt"], P.T[0, 1]: Pn["lh"], P.T[1, 0]: Pn["gt"], P.T[1, 1]: Pn["gh"]}
    Snn = pencil.sigma_nn(m, Pn, g)
    idx = {"x": 0, "u": 1, "w": 2}
    for k, v in P.sigma_nn.items():
        assert float(v.subs(subs).subs(gs).subs(T)) == pytest.approx(Snn[idx[k[0]], idx[k[1]]], rel=1e-10)


@pytest.mark.parametrize("kind", ["ginibre", "rank-deficient"])
def test_pp_route_equals_2p_inverse(kind, monkeypatch):
    """The p×p route (Schur complements N = DA − κWᵀW, N' = AD − κWWᵀ, docs/theory.md §12.2) against the
    dense 2p×2p inverse of B2: the traces T_ab, their Jacobian, H v at a complex-stepped C, and E itself."""
    rng = np.random.default_rng(12)
    p = 40
    if kind == "ginibre":
        W = rng.standard_normal((p, p)) / np.sqrt(p)
    else:  # rank 6, non-symmetric
        W = rng.standard_normal((p, 6)) @ rng.standard_normal((6, p)) / np.sqrt(6 * p)
    C = np.array([[0.3, -0.8], [0.45, 0.2]])
    monkeypatch.setattr(hoperator, "DENSE_ROUTE", "2p")
    ref = hoperator.HOperator(W, C)
    monkeypatch.setattr(hoperator, "DENSE_ROUTE", "pp")
    new = hoperator.HOperator(W, C)
    assert ref.H is not None and new.Ni is not None   # the two routes were taken
    np.testing.assert_allclose(new.T0, ref.T0, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(new.J, ref.J, rtol=1e-10, atol=1e-12)
    v = rng.standard_normal(2 * p) + 1j * rng.standard_normal(2 * p)
    Cs = C + 1e-3j * rng.standard_normal((2, 2))
    np.testing.assert_allclose(new.apply(Cs, v), ref.apply(Cs, v), rtol=1e-10, atol=1e-12)
    mu = rng.standard_normal(p) / np.sqrt(p)
    f = sa.activation("tanh")
    E_new = gw.general_w_error(f, 0.5, [0.05, 2.0], W, mu, signal="linear")["E"]
    monkeypatch.setattr(hoperator, "DENSE_ROUTE", "2p")
    E_ref = gw.general_w_error(f, 0.5, [0.05, 2.0], W, mu, signal="linear")["E"]
    np.testing.assert_allclose(E_new, E_ref, rtol=1e-10)


def test_one_and_two_inverse_pp_routes_agree(monkeypatch):
    """The one-inverse p×p route (det B2 = det N: the traces and their Jacobian from N^{-1} alone, docs/theory.md
    §12.5) and the two-inverse route (N and N') against the dense 2p×2p inverse: T0, J and E to 1e-10."""
    rng = np.random.default_rng(13)
    p = 40
    W = rng.standard_normal((p, p)) / np.sqrt(p)
    C = np.array([[0.25, -0.9], [0.5, 0.15]])
    one = hoperator.HOperator(W, C)
    monkeypatch.setattr(hoperator, "PP_ONE_INVERSE", False)
    two = hoperator.HOperator(W, C)
    monkeypatch.setattr(hoperator, "DENSE_ROUTE", "2p")
    ref = hoperator.HOperator(W, C)
    assert one._one and not two._one and two.Npi is not None and ref.H is not None
    for h in (one, two):
        np.testing.assert_allclose(h.T0, ref.T0, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(h.J, ref.J, rtol=1e-10, atol=1e-12)
    mu = rng.standard_normal(p) / np.sqrt(p)
    f = sa.activation("tanh")
    E = {}
    for route, one_inverse in (("2p", True), ("pp", False), ("pp", True)):
        monkeypatch.setattr(hoperator, "DENSE_ROUTE", route)
        monkeypatch.setattr(hoperator, "PP_ONE_INVERSE", one_inverse)
        E[route, one_inverse] = gw.general_w_error(f, 0.5, [0.05, 2.0], W, mu, signal="linear")["E"]
    np.testing.assert_allclose(E["pp", True], E["2p", True], rtol=1e-10)
    np.testing.assert_allclose(E["pp", False], E["2p", True], rtol=1e-10)


def test_anderson_restart_converges_where_the_history_cycles(monkeypatch):
    """A small-γ point whose Anderson history cycles (Ginibre W × 1.5, p = 120, tanh, c = 2, γ = 0.01): with the
    restart from the best point it converges, to the value of another trajectory (float64 traces after the first
    evaluation)."""
    rng = np.random.default_rng(1)
    p = 120
    W = rng.standard_normal((p, p)) / np.sqrt(p) * 1.5
    mu = rng.standard_normal(p) / np.sqrt(p) * 1.5
    f = sa.activation("tanh")
    E = gw.general_w_error(f, 2.0, [0.01], W, mu, signal="linear")["E"]
    monkeypatch.setattr(pencil, "SINGLE_ABOVE", np.inf)
    E64 = gw.general_w_error(f, 2.0, [0.01], W, mu, signal="linear")["E"]
    np.testing.assert_allclose(E, E64, rtol=1e-10)



def test_anderson_restart_breaks_a_cycle_that_restarts_into_itself():
    """Two summed random heads at p = 30 (the sample of `symattn verify`'s variant property), tanh, c = 0.5,
    γ = 1e-3: restarted from its best point with an empty history, Anderson ran into the same 4-cycle (residual
    3–11) until maxiter. With longer plain damped steps after each restart it converges, to the fixed point
    that a warm start from the solution at γ = 3e-3 reaches."""
    from symattn import variants
    from symattn.verification.cases.variants import PROPERTY_SEED, _variant_samples

    heads = next(kw["heads"] for label, kw in _variant_samples(np.random.default_rng(PROPERTY_SEED + 2))
                 if label == "2 random heads sum")
    f = sa.activation("tanh")
    ms = [gw.general_w_model(f, 0.5, W, None) for W in heads]
    m = variants._summed_model(gw, f, 0.5, heads, ms, None, "f")
    cold = gw.solve_pencil(m, 1e-3)
    warm = gw.solve_pencil(m, 1e-3, g0=gw.solve_pencil(m, 3e-3).g)
    np.testing.assert_allclose(cold.g, warm.g, rtol=1e-9, atol=1e-12)
    E = sa.memorization_error("tanh", 0.5, [1e-3, 3e-3], heads=heads, readout="sum")
    assert 0 < E[0] < E[1] < 1

def test_mpmath_backend_agrees_with_float64():
    """The same formulas in the mpmath arithmetic (30 digits) against float64, non-symmetric W, at μ = 0 and
    μ ≠ 0 (the Gaussian-equivalent value, signal='linear'): to 1e-10 relative; both solve to their own
    tolerance (1e-13 and 1e-27), so the difference is the float64 rounding of the same discretised theory."""
    rng = np.random.default_rng(5)
    p = 8
    W = rng.standard_normal((p, p)) / np.sqrt(p)
    mu = rng.standard_normal(p) / np.sqrt(p)
    for m, g in ((None, 0.05), (mu, 1.0)):
        Ef = ge.general_memorization_error("tanh", 0.5, [g], W, m, signal="linear")
        Em = ge.general_memorization_error("tanh", 0.5, [g], W, m, backend="mpmath", dps=30, signal="linear")
        assert Em.dtype == object and type(Em[0]).__name__ == "mpf"
        np.testing.assert_allclose(Ef, np.asarray(Em, dtype=float), rtol=1e-10, atol=0)
    with pytest.raises(ParameterError, match="backend"):
        ge.general_memorization_error("tanh", 0.5, [1.0], np.eye(gw.MPMATH_MAX_P + 1), backend="mpmath")


def test_weights_changed_in_place_are_not_served_from_the_cache():
    """The W caches are keyed on W's content: editing the same array between calls changes the answer."""
    rng = np.random.default_rng(5)
    p = 24
    W = rng.standard_normal((p, p)) / np.sqrt(p)
    f = sa.activation("tanh")
    first = sa.memorization_error(f, 0.5, [0.1], weights=W)
    W *= 2.0
    again = sa.memorization_error(f, 0.5, [0.1], weights=W)
    fresh = sa.memorization_error(f, 0.5, [0.1], weights=W.copy())
    assert abs(float(again[0]) - float(fresh[0])) <= 1e-12 * abs(float(fresh[0]))
    assert abs(float(again[0]) - float(first[0])) > 1e-6


def test_kernel_structure_chooses_the_blocks_for_low_rank_W_only():
    """'auto': the Hermite blocks of §12.8 for rank W <= min(64, p/4), or a full-rank W of effective rank
    ‖W‖_F⁴/‖WᵀW‖_F² <= p/4 (§12.9), on the numpy backend, else the free noise; an explicit 'blocks' where
    they do not apply, or an unknown structure, is a ParameterError naming it."""
    from symattn.backends.general_w_entry import kernel_structure

    rng = np.random.default_rng(3)
    low = rng.standard_normal((100, 8)) @ rng.standard_normal((8, 100))
    mid = rng.standard_normal((100, 30)) @ rng.standard_normal((30, 100))     # rank 30 > p/4, r_eff ≈ 23 < p/4
    flat = rng.standard_normal((100, 60)) @ rng.standard_normal((60, 100))    # rank 60 > p/4, r_eff ≈ 39 > p/4
    ginibre = rng.standard_normal((100, 100))                                 # full rank, r_eff ≈ p/2
    spread = low + 0.05 * ginibre                                             # full rank, r_eff ≈ 8
    r_eff = [float(np.trace(W.T @ W) ** 2 / np.sum((W.T @ W) ** 2)) for W in (mid, flat, ginibre, spread)]
    assert r_eff[0] < 25 < r_eff[1] and r_eff[2] > 25 > r_eff[3]
    assert kernel_structure(low) == kernel_structure(mid) == kernel_structure(spread) == "blocks"
    assert kernel_structure(flat) == kernel_structure(ginibre) == kernel_structure(np.eye(100)) == "free"
    assert kernel_structure(low, backend="mpmath") == kernel_structure(low, diagonal="zero") == "free"
    assert kernel_structure(low, "free") == "free" and kernel_structure(mid, "blocks") == "blocks"
    for kw, name in (({"structure": "blocks", "backend": "mpmath"}, "backend"),
                     ({"structure": "blocks", "signal": "conditional"}, "signal"), ({"structure": "cubic"}, "structure")):
        with pytest.raises(ParameterError) as info:
            kernel_structure(low, **kw)
        assert info.value.name == name


def test_memorization_error_routes_a_low_rank_W_to_the_blocks():
    """memorization_error(weights=W) of a rank-6 W is the Hermite-block theory; structure='free' the §12 one;
    structure= without weights= is refused."""
    from symattn.backends.general_w import hermite_block_error

    rng = np.random.default_rng(4)
    p = 80
    W = rng.standard_normal((p, 6)) @ rng.standard_normal((6, p))
    W /= np.sqrt(np.sum(W * W) / p)
    f = sa.activation("tanh")
    E = sa.memorization_error(f, 0.5, [0.1, 1.0], weights=W)
    np.testing.assert_allclose(E, hermite_block_error(f, 0.5, [0.1, 1.0], W)["E"], rtol=1e-12)
    free = sa.memorization_error(f, 0.5, [0.1, 1.0], weights=W, structure="free")
    np.testing.assert_allclose(free, gw.general_w_error(f, 0.5, [0.1, 1.0], W)["E"], rtol=1e-12)
    assert np.all(np.abs(E - free) > 1e-4)
    with pytest.raises(ParameterError) as info:
        sa.memorization_error(f, 0.5, 0.1, structure="blocks")
    assert info.value.name == "structure"


# --- Issue 27: physical checks and γ-continuation (docs/theory.md §12.9) ---------------------------------------

def _cold_start_E(m, gamma):
    """E at γ by the solver as it was before the physical checks: every γ from the γ → ∞ start, no check."""
    with linalg.model_arith(m) as ar:
        sol = gw.solve_pencil(m, float(gamma))
        eta = ar.step
        J = pencil.pencil_jacobian(m, sol.g, gamma, sol.Hop, eta)
        zc = complex(gamma, eta * gamma)
        dz = gw.pencil_map(m, sol.g, zc, sol.Hop)[0].imag.ravel() / (eta * gamma)
        dg = np.linalg.solve(np.eye(9) - J, dz)
        Hm = None if m.W_traces is m.W else hoperator.HOperator(m.W, pencil.coefficient_matrix(pencil.sigma_pp(m, sol.g))[1].real)
        Fc = gw.resolvent_F(m, sol.g + 1j * eta * gamma * dg.reshape(3, 3), zc, sol.Hop, Hm)
        return float(-gamma * gamma * Fc.imag / (eta * gamma))


@pytest.mark.parametrize("f, mu_on", [("tanh", False), ("relu", True)])
def test_points_that_pass_the_checks_are_the_cold_start_values(f, mu_on):
    """Where the cold start converges to a physical value, model_error returns it bit for bit (the checks and the
    cross-check fixed points at 2γ do not change it): against the unchecked cold-start loop."""
    rng = np.random.default_rng(3)
    p = 40
    W = rng.standard_normal((p, p)) / np.sqrt(p) + 0.5 * np.eye(p)
    mu = rng.standard_normal(p) / np.sqrt(p) if mu_on else None
    m = gw.general_w_model(sa.activation(f), 1.5, W, mu, signal="linear")
    g = [0.003, 0.03, 1.0]
    out = gw.model_error(m, g)
    assert out["continued"] == []
    assert [float(x) for x in out["E"]] == [_cold_start_E(m, x) for x in g]


def _toy(wrong_below):
    """A toy fixed point with F = ∫dν/(λ + γ) for ν = (δ_0.5 + δ_2)/2; the cold start below ``wrong_below`` lands
    on a 'branch' with F ten times too small (as the surrogate solve of Finding 13 did), a warm start never."""
    F = lambda g: 0.5 / (0.5 + g) + 0.5 / (2 + g)
    E = lambda g: g * g * (0.5 / (0.5 + g) ** 2 + 0.5 / (2 + g) ** 2)
    calls = []

    def solve(g, start):
        calls.append((g, start is None))
        wrong = start is None and g < wrong_below
        return ("wrong" if wrong else "right"), (F(g) / 10 if wrong else F(g)), 1

    def evaluate(g, st):
        e = E(g) / 10 if st == "wrong" else E(g)
        f = F(g) / 10 if st == "wrong" else F(g)
        return e, f, e

    return solve, evaluate, E, calls


def test_a_wrong_cold_branch_is_replaced_by_the_continued_value():
    """A cold-start value that passes the point checks but has F increasing in γ (against the cross-check at 2γ)
    is solved by continuation: the exact E of the toy, with the ladder warm-started."""
    solve, evaluate, E, calls = _toy(wrong_below=0.005)
    vals, info = gw.physical_points([0.001, 1.0], solve, evaluate)
    np.testing.assert_allclose(vals, [E(0.001), E(1.0)], rtol=1e-14)
    assert info["continued"] == [0.001] and "F must decrease" in info["reasons"][0.001]
    assert sum(1 for _, cold in calls if not cold) >= 8 * 3    # 8 steps per decade from γ = 1


def test_a_point_that_stays_unphysical_raises():
    """A fixed point that is negative at every start raises ConvergenceError (never a value outside [0, 1])."""
    def solve(g, start):
        return None, (-1.0 if g < 0.01 else 1 / (1 + g)), 1

    def evaluate(g, st):
        F = -1.0 if g < 0.01 else 1 / (1 + g)
        return g * F, F, g * F

    with pytest.raises(sa.ConvergenceError, match="continuation"):
        gw.physical_points([0.001], solve, evaluate)


@pytest.mark.slow
def test_minilm_point_that_failed_now_agrees_with_monte_carlo():
    """MiniLM L5, GELU, μ = 0, c = 3 (n = 128), γ = 1e-3: the cold start converges to the sign-flipped branch
    E ≈ −0.048 (docs/theory.md §12.9); with the checks E is in [0, 1] and within 15 % of exact Monte Carlo
    (trace estimator, 16 draws, seed 11; measured −12 % (0.0480 vs 0.0547 ± 0.0009), the free model's own bias at γ = 1e-3, §12.9), and at
    γ = 1e-2 the value is the cold-start one."""
    rw, wts = _minilm()
    W = rw.layer_weight(wts, 5)
    f = sa.activation("gelu")
    m = gw.general_w_model(f, 3.0, W, None, signal="linear")
    assert _cold_start_E(m, 1e-3) < 0
    E = sa.memorization_error("gelu", 3.0, [1e-3, 1e-2], weights=W)
    assert 0 < E[0] < E[1] < 1
    assert float(E[1]) == _cold_start_E(m, 1e-2)
    r = sa.simulate("gelu", n=128, c=3.0, gamma=[1e-3], weights=W, draws=16, seed=11, progress=False,
                    trace_estimator=True, models=("attention",))
    mc = float(np.mean(r.attention_trace[:, 0]))
    assert abs(E[0] - mc) <= 0.15 * mc, (E, mc)
