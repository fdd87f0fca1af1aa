"""The :class:`symattn.Layer` front (symattn/layer.py): one description for the theory, the Monte Carlo,
sweeps and the CLI.

The recorded grid (tests/data/front_grid.json, written by tests/data/record_front_grid.py with the code
*before* the front existed) is the regression reference of every engine: the front must give the same
numbers to 1e-12 relative. The other tests compare the two forms of each call (``Layer(...).theory`` and
``sa.memorization_error``, ``Layer(...).simulate`` and ``sa.simulate``) bit for bit.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import symattn as sa
from symattn.errors import ParameterError

DATA = Path(__file__).parent / "data"
sys.path.insert(0, str(DATA))
import record_front_grid as grid  # noqa: E402

RECORDED = json.loads((DATA / "front_grid.json").read_text())


@pytest.mark.parametrize("name", sorted(grid.CASES))
def test_recorded_theory_grid_is_unchanged(name):
    bad = grid.mismatches(grid.theory_value(name), RECORDED["theory"][name], 1e-12)
    assert not bad, bad


@pytest.mark.parametrize("name", sorted(grid.MC_CASES))
def test_recorded_monte_carlo_grid_is_unchanged(name):
    new = grid.mc_value(name)
    assert set(new) == set(RECORDED["montecarlo"][name])
    for k, v in RECORDED["montecarlo"][name].items():
        np.testing.assert_allclose(new[k], v, rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------- one front, every engine
#: the engine each recorded case must reach (the registry is covered when every engine appears)
ENGINE_OF = {"paper": "paper", "paper_quadrature": "paper", "paper_mpmath": "paper", "paper_ridgeless": "paper",
             "finite_p": "paper", "general_w": "general-w", "general_w_c2": "general-w",
             "hermite_blocks": "hermite-blocks", "weights_residual": "sum", "concat": "concat",
             "concat_identical": "sum", "sum": "sum", "sum_residual": "sum", "residual": "residual",
             "paper_heads_sum": "sum", "softmax": "softmax"}
LAYER_KEYS = ("weights", "heads", "readout", "residual", "kernel", "temperature", "diagonal")


def test_every_engine_of_the_registry_is_recorded():
    assert set(ENGINE_OF) == set(grid.CASES)
    from symattn.layer import THEORY_ENGINES

    assert set(ENGINE_OF.values()) == set(THEORY_ENGINES)


@pytest.mark.parametrize("name", sorted(grid.CASES))
def test_layer_theory_is_memorization_error_bit_for_bit(name):
    case = grid.CASES[name]
    kw = grid.kwargs(case)
    layer = sa.Layer(case["f"], **{k: kw.pop(k) for k in LAYER_KEYS if k in kw})
    assert layer.engine() == ENGINE_OF[name]
    gamma = case.get("gamma", grid.GAMMA)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = layer.theory(case["c"], gamma, **kw)
        ref = sa.memorization_error(case["f"], case["c"], gamma, **grid.kwargs(case))
    assert isinstance(r, sa.TheoryResult) and r.parameters["engine"] == ENGINE_OF[name]
    got = r.E
    for key in (ref if isinstance(ref, dict) else [None]):
        a, b = (got[key], ref[key]) if key else (got, ref)
        assert np.array_equal(np.asarray(a), np.asarray(b)), (name, key)


@pytest.mark.parametrize("name", sorted(grid.MC_CASES))
def test_layer_simulate_is_simulate_bit_for_bit(name):
    case = grid.MC_CASES[name]
    kw = grid.kwargs(case)
    if "W" in kw:
        kw["weights"] = kw.pop("W")
    layer = sa.Layer(case["f"], **{k: kw.pop(k) for k in LAYER_KEYS if k in kw})
    a = layer.simulate(case["n"], case["c"], grid.GAMMA, draws=2, seed=5, progress=False, **kw)
    kw2 = grid.kwargs(case)
    if "W" in kw2:
        kw2["weights"] = kw2.pop("W")
    b = sa.simulate(case["f"], n=case["n"], c=case["c"], gamma=grid.GAMMA, draws=2, seed=5, progress=False, **kw2)
    assert np.array_equal(a.attention, b.attention) and np.array_equal(a.linear, b.linear)
    assert a.provenance["parameters"]["layer_digest"] == layer.digest


def test_simulate_takes_weights_and_W_is_deprecated():
    W = grid.weights(30, 1, None)
    a = sa.simulate("tanh", n=60, c=0.5, gamma=[0.1, 1.0], weights=W, draws=2, seed=1, progress=False)
    with pytest.warns(DeprecationWarning, match="weights="):
        b = sa.simulate("tanh", n=60, c=0.5, gamma=[0.1, 1.0], W=W, draws=2, seed=1, progress=False)
    assert np.array_equal(a.attention, b.attention)
    with pytest.raises(ParameterError) as err:
        sa.simulate("tanh", n=60, c=0.5, gamma=[1.0], W=W, weights=W, draws=1)
    assert err.value.name == "W"


def test_minilm_reference_equals_the_loaded_matrix():
    """Layer("tanh", weights="minilm:2") is the theory and the Monte Carlo of the matrix realweights loads."""
    from symattn import realweights as rw
    from symattn.errors import RealWeightsUnavailable

    try:
        W = rw.layer_weight(rw.load_minilm(), 2)
    except RealWeightsUnavailable:
        pytest.skip("the [real] extra is not installed")
    mu = rw.signal_direction(W, 2.0)
    layer = sa.Layer("tanh", weights="minilm:2")
    assert np.array_equal(layer.weights, W) and layer.to_dict()["weights"] == "minilm:2"
    assert np.array_equal(layer.signal("top", 2.0), mu)
    r = layer.theory(0.5, [0.1, 1.0], mu=mu)
    assert np.array_equal(r.E, sa.memorization_error("tanh", 0.5, [0.1, 1.0], weights=W, mu=mu))
    a = layer.simulate(n=768, c=0.5, gamma=[0.1, 1.0], mu=mu, draws=1, seed=3, progress=False)
    b = sa.simulate("tanh", n=768, c=0.5, gamma=[0.1, 1.0], weights=W, mu=mu, draws=1, seed=3, progress=False)
    assert np.array_equal(a.attention, b.attention)
    head = sa.Layer("tanh", heads="minilm:2:3")
    assert len(head.heads) == 1 and np.array_equal(head.heads[0], rw.layer_weight(rw.load_minilm(), 2, head=3))


# ----------------------------------------------------------------------------- the description
def _toml(d: dict) -> str:
    """A flat TOML document of a layer dict (strings, bools, numbers, tables of strings)."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} = {value(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(value(x) for x in v) + "]"
        return repr(v)
    return "\n".join(f"{k} = {value(v)}" for k, v in d.items()) + "\n"


def test_layer_round_trips_through_json_and_toml(tmp_path, monkeypatch):
    import tomllib

    monkeypatch.chdir(tmp_path)   # a recorded file reference is read inside the working folder only

    W = grid.weights(20, 3, None)
    np.save(tmp_path / "W.npy", W)
    np.save(tmp_path / "H.npy", np.stack([W, W.T]))
    layers = [sa.Layer("x*erf(x)", residual=True, diagonal="zero"),
              sa.Layer(None, kernel="softmax", temperature=2.5, diagonal="zero"),
              sa.Layer("gelu", weights=str(tmp_path / "W.npy")),
              sa.Layer("relu", heads=str(tmp_path / "H.npy"), readout="sum", residual=True)]
    for layer in layers:
        d = layer.to_dict()
        assert sa.Layer.from_dict(json.loads(json.dumps(d))) == layer
        assert sa.Layer.from_dict(tomllib.loads(_toml(d))) == layer
    assert layers[2].digest == sa.Layer("gelu", weights=W).digest     # content, not the path
    assert layers[2].digest != sa.Layer("gelu", weights=W, diagonal="zero").digest
    assert layers[2].digest != sa.Layer("tanh", weights=W).digest
    with pytest.raises(ParameterError) as err:   # an array in memory is recorded, not rebuilt
        sa.Layer.from_dict(sa.Layer("tanh", weights=W).to_dict())
    assert err.value.name == "weights"
    np.save(tmp_path / "W.npy", 2 * W)     # the file changed: its sha256 no longer matches
    with pytest.raises(ParameterError, match="changed"):
        sa.Layer.from_dict(layers[2].to_dict())


@pytest.mark.parametrize("kw,name,others", [
    (dict(weights=np.eye(4), heads=[np.eye(4)]), "heads", "weights"),
    (dict(temperature=2.0), "temperature", "kernel"),
    (dict(readout="sum"), "readout", "heads"),
    (dict(heads=[np.eye(4), 2 * np.eye(4)], residual=True), "readout", "residual"),
    (dict(activation=None), "activation", "kernel"),
    (dict(kernel="other"), "kernel", None),
    (dict(weights="minilm:x"), "weights", None),
    (dict(heads=np.eye(3)), "heads", None),
])
def test_bad_combinations_name_the_keys(kw, name, others):
    kw = dict({"activation": "tanh"}, **kw)
    with pytest.raises(ParameterError) as err:
        sa.Layer(kw.pop("activation"), **kw)
    assert err.value.name == name
    if others:
        assert others in str(err.value)


def test_layer_is_immutable_and_its_arrays_read_only():
    layer = sa.Layer("tanh", weights=np.eye(5))
    with pytest.raises(AttributeError):
        layer.residual = True
    with pytest.raises(ValueError):
        layer.weights[0, 0] = 2.0


def test_theory_refuses_what_an_engine_does_not_take():
    W = grid.weights(30, 1, None)
    with pytest.raises(ParameterError) as err:
        sa.Layer("tanh", weights=W).theory(0.5, 1.0, correction="finite-p", n=60)
    assert err.value.name == "correction"
    with pytest.raises(ParameterError) as err:
        sa.Layer("tanh", heads=[W, W.T], readout="sum").theory(0.5, 1.0, geometry=sa.Geometry(snr=1.0))
    assert err.value.name == "geometry"
    with pytest.raises(ParameterError) as err:
        sa.Layer(None, weights=W, kernel="softmax", diagonal="zero").theory(0.5, 1.0, n=60)
    assert err.value.name == "kernel"


# ----------------------------------------------------------------------------- sweeps of any layer
def _weights_files(tmp_path):
    """A full-rank W (general-W engine) and a rank-4 one (Hermite blocks), p = 24."""
    np.save(tmp_path / "full.npy", grid.weights(24, 1, None))
    np.save(tmp_path / "low.npy", grid.weights(24, 2, 4))
    return str(tmp_path / "full.npy"), str(tmp_path / "low.npy")


def test_sweep_of_weights_and_residual_extends_to_more_draws(tmp_path):
    """weights × residual at draws = 2, then draws = 4 on the same store: the stored tasks are reused and
    the store equals a fresh draws = 4 run (Monte Carlo and theory)."""
    pytest.importorskip("zarr")
    full, low = _weights_files(tmp_path)
    spec = {"weights": [full, low], "residual": [False, True], "c": 2.0, "gamma": [0.1, 1.0], "draws": 2,
            "mu": ["zero", "random:3"], "snr": 1.0}
    first = sa.sweep(spec, store=tmp_path / "s", scheduler="serial")
    assert (first["tasks"], first["computed"], first["reused"]) == (16, 16, 0)
    again = sa.sweep(dict(spec, draws=4), store=tmp_path / "s", scheduler="serial")
    assert again["reused"] == first["tasks"] and again["computed"] == 16 and again["extended"] == ["draws"]
    fresh = sa.sweep(dict(spec, draws=4), store=tmp_path / "fresh", scheduler="serial")
    assert fresh["reused"] == 0
    a, b = sa.open_sweep(tmp_path / "s"), sa.open_sweep(tmp_path / "fresh")
    for v in ("E_attention", "E_linear", "theory_attention", "theory_linear"):
        assert np.array_equal(a[v].values, b[v].values, equal_nan=True), v
    assert list(a["engine"].values[:, 0, 0]) == ["general-w", "hermite-blocks"]
    # every stored theory value is the front's, at the point's n = round(p/c) = 12
    layer = sa.Layer("tanh", weights=low, residual=True)
    mu = layer.signal("random:3", 1.0)
    ref = layer.theory(2.0, [0.1, 1.0], mu=mu, n=12).E
    np.testing.assert_array_equal(a["theory_attention"].sel(weights=low, residual=True, mu="random:3").values, ref)
    assert float(a["n"]) == 12 and float(a["mu_norm2"].sel(weights=low, residual=True, mu="random:3")) == \
        pytest.approx(1.0)
    assert float(a["mu_norm2"].sel(weights=low, residual=True, mu="zero")) == 0.0
    # a superset of a swept list is an extension too; a changed fixed value is refused, naming it
    more = sa.sweep(dict(spec, draws=4, residual=[False, True], c=[2.0, 1.0]), store=tmp_path / "s",
                    scheduler="serial")
    assert more["reused"] == again["tasks"] == 32 and more["computed"] == 32 and more["extended"] == ["c"]
    with pytest.raises(ParameterError, match="activation"):
        sa.sweep(dict(spec, draws=4, c=[2.0, 1.0], activation="relu"), store=tmp_path / "s", scheduler="serial")
    with pytest.raises(ParameterError, match="draws"):
        sa.sweep(dict(spec, draws=1, c=[2.0, 1.0]), store=tmp_path / "s", scheduler="serial")


def test_sweep_store_holds_the_gram_entries_used(tmp_path):
    """xarray alone (no symattn) reads the true Gram entries of an aligned sweep, and the strong-signal flag."""
    xr = pytest.importorskip("xarray")
    spec = {"aligned": True, "snr": [0.0, 1.0, 3.0], "c": 0.5, "n": 100, "gamma": [0.1, 1.0], "draws": 2}
    with pytest.warns(sa.FiniteSizeWarning):
        summary = sa.sweep(spec, store=tmp_path / "s", scheduler="serial")
    ds = xr.open_zarr(tmp_path / "s")
    for k in ("mu_wk", "mu_wq", "wk2", "wq2", "wk_wq", "mu_norm2"):
        np.testing.assert_array_equal(ds[k].values, [0.0, 1.0, 3.0])
    s = np.array([0.0, 1.0, 3.0])
    t = (s + s**2) / np.sqrt(50)     # t = (‖μ‖² + μᵀw_K μᵀw_Q)/√p with w_K = w_Q = μ
    np.testing.assert_allclose(ds["t"].values, t, rtol=1e-12)
    assert list(ds["strong_signal"].values) == list(t > 0.15) and summary["strong_signal"] == int(np.sum(t > 0.15))
    corrected = sa.sweep(dict(spec, correction="finite-p"), store=tmp_path / "fp", scheduler="serial")
    fp = sa.open_sweep(tmp_path / "fp")
    ref = sa.memorization_error("tanh", 0.5, [0.1, 1.0], geometry=sa.Geometry.aligned(3.0), n=100,
                                correction="finite-p")
    np.testing.assert_array_equal(fp["theory_attention"].sel(snr=3.0).values, ref)
    assert not fp["strong_signal"].values.any() and corrected["strong_signal"] == 0
    with pytest.raises(ParameterError) as err:
        sa.sweep(dict(spec, correction="finite-p", residual=True), store=tmp_path / "bad", scheduler="serial")
    assert err.value.name == "correction"


def test_simulate_cli_takes_several_c(capsys):
    from symattn.cli import main

    code = main(["simulate", "-a", "tanh", "--n", "40", "--c", "0.5", "2", "--gamma", "0.1", "1", "--draws", "2",
                 "--seed", "3", "--json", "--no-progress"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["c"] == [0.5, 2.0] and len(data["runs"]) == 2
    for c, run in zip((0.5, 2.0), data["runs"]):
        ref = sa.simulate("tanh", n=40, c=c, gamma=[0.1, 1.0], draws=2, seed=3, progress=False)
        np.testing.assert_array_equal(run["E_attention"]["mean"], ref.attention_mean)
        assert run["p"] == round(c * 40)


def test_simulate_cli_with_weights_and_mu(capsys, tmp_path):
    from symattn.cli import main

    W = grid.weights(20, 4, None)
    np.save(tmp_path / "W.npy", W)
    code = main(["simulate", "-a", "tanh", "--c", "0.5", "--gamma", "0.1", "--weights", str(tmp_path / "W.npy"),
                 "--mu", "random:2", "--snr", "2", "--draws", "2", "--json", "--no-progress"])
    data = json.loads(capsys.readouterr().out)
    layer = sa.Layer("tanh", weights=W)
    ref = layer.simulate(40, 0.5, [0.1], mu=layer.signal("random:2", 2.0), draws=2, seed=0, progress=False)
    assert code == 0 and data["n"] == 40
    np.testing.assert_array_equal(data["E_attention"]["mean"], ref.attention_mean)
    assert main(["simulate", "-a", "tanh", "--c", "0.5", "--gamma", "0.1", "--weights", str(tmp_path / "W.npy"),
                 "--n", "30"]) == 2
    assert "round(c n) = 20" in capsys.readouterr().err


def test_errors_nan_isolates_the_failed_points_of_every_engine(monkeypatch):
    """errors='nan' on an engine that fails its points together (the variants): the failing point is NaN, the
    others are the values of their own solves, with one FailedPointsWarning naming the point."""
    import symattn.variants as variants
    from symattn.errors import ConvergenceError, FailedPointsWarning

    real = variants.variant_error

    def failing(f, c, gamma, **kw):
        if np.any(np.isclose(np.atleast_1d(gamma), 0.5)):
            raise ConvergenceError("no convergence (a test)", point={"gamma": 0.5})
        return real(f, c, gamma, **kw)

    monkeypatch.setattr(variants, "variant_error", failing)
    layer = sa.Layer("tanh", residual=True)
    with pytest.raises(ConvergenceError):
        layer.theory(0.5, [0.1, 0.5, 1.0])
    with pytest.warns(FailedPointsWarning, match="gamma=0.5"):
        r = layer.theory(0.5, [0.1, 0.5, 1.0], errors="nan")
    E = np.asarray(r.E, dtype=float)
    assert np.isnan(E[1]) and np.array_equal(E[[0, 2]], np.asarray(real("tanh", 0.5, [0.1, 1.0], residual=True)))


def test_sweep_refuses_a_rewritten_weights_file(tmp_path):
    """A weights file rewritten in place is another layer: resuming or extending its store is refused, never
    mixed (the stored layer digests are compared with the layers the spec names now)."""
    pytest.importorskip("zarr")
    f = tmp_path / "W.npy"
    np.save(f, grid.weights(20, 1, None))
    spec = {"weights": str(f), "c": 1.0, "gamma": [1.0], "draws": 1}
    sa.sweep(spec, store=tmp_path / "s", scheduler="serial")
    assert sa.sweep(spec, store=tmp_path / "s", scheduler="serial")["reused"] == 1   # unchanged file: reused
    np.save(f, grid.weights(20, 2, None))
    for again in (spec, dict(spec, draws=2)):
        with pytest.raises(ParameterError, match="changed content"):
            sa.sweep(again, store=tmp_path / "s", scheduler="serial")
