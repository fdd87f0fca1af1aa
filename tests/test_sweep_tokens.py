"""Sweeps over the token law (docs/theory.md §15): ``ar1``, ``autocorr`` and ``markov`` as spec keys and axes,
stored through the zarr store with their provenance. Small sizes (n = 60-80)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("zarr")
pytest.importorskip("xarray")

import symattn as sa  # noqa: E402
from symattn.errors import ParameterError  # noqa: E402
from symattn.sweep import SweepSpec, load_spec  # noqa: E402
from symattn.temporal import attention_errors, linear_errors  # noqa: E402
from symattn.tokens import TokenLaw  # noqa: E402

SPEC = {"activation": "tanh", "c": 1.0, "gamma": [0.1, 1.0], "ar1": [0.0, 0.6], "markov": ["none", 0.9],
        "snr": 1.0, "aligned": True, "n": 60, "draws": 2, "seed": 5}
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokens") / "store"
    return d, sa.sweep(SPEC, store=d, scheduler="serial", progress=False)


def test_token_keys_are_axes_and_the_store_is_simulate_under_that_law(store):
    """Each stored draw is simulate(..., tokens=law) with the point's seed (an outside run), bit for bit."""
    d, summary = store
    assert summary["dims"] == ["ar1", "markov"] and summary["tasks"] == 8
    ds = sa.open_sweep(d)
    spec = load_spec(SPEC)
    for idx, pt in spec.points():
        law = spec.tokens(pt)
        ref = sa.simulate("tanh", n=60, c=1.0, gamma=spec.gamma, geometry=spec.geometry(pt), draws=2,
                          seed=np.random.SeedSequence(spec.entropy(pt)), progress=False, tokens=law)
        sel = {"ar1": pt["ar1"], "markov": str(pt["markov"])}
        np.testing.assert_array_equal(ds.E_attention.sel(sel).values, ref.attention)
        np.testing.assert_array_equal(ds.E_linear.sel(sel).values, ref.linear)


def test_store_holds_the_theory_under_the_law(store):
    """theory_linear is linear_errors and theory_attention attention_errors at the point's law and n."""
    d, _ = store
    ds = sa.open_sweep(d)
    for rho in (0.0, 0.6):
        for q in ("none", 0.9):
            law = TokenLaw(ar1=rho or None, markov=None if q == "none" else q)
            sel = {"ar1": rho, "markov": str(q)}
            np.testing.assert_allclose(ds.theory_linear.sel(sel).values,
                                       linear_errors(1.0, [0.1, 1.0], snr=1.0, tokens=law)["train"], rtol=1e-10)
            att = [attention_errors("tanh", 1.0, g, n=60, geometry=sa.Geometry.aligned(1.0), tokens=law)["train"]
                   for g in (0.1, 1.0)]
            np.testing.assert_allclose(ds.theory_attention.sel(sel).values, att, rtol=1e-8)
    # correlation changes the numbers (the law reached the draws), and the spec is the store's provenance
    a = ds.E_attention.sel(ar1=0.0, markov="none").values
    b = ds.E_attention.sel(ar1=0.6, markov="none").values
    assert not np.allclose(a, b)
    stored = json.loads(ds.attrs["symattn_sweep_spec"])
    assert stored["ar1"] == [0.0, 0.6] and stored["markov"] == ["none", 0.9]


def test_extension_by_a_new_rho_reuses_the_stored_tasks(store, tmp_path):
    d, _ = store
    import shutil

    e = tmp_path / "ext"
    shutil.copytree(d, e)
    res = sa.sweep(dict(SPEC, ar1=[0.0, 0.6, 0.3]), store=e, scheduler="serial", progress=False)
    assert (res["tasks"], res["reused"], res["computed"]) == (12, 8, 4) and res["extended"] == ["ar1"]


def test_specs_without_token_keys_keep_their_identity():
    """The token keys enter the canonical spec and a point's seed only where they differ from their defaults."""
    plain = SweepSpec.from_dict({"c": [0.5, 1.0], "n": 60})
    assert not {"ar1", "autocorr", "markov"} & set(plain.canonical())
    same = SweepSpec.from_dict({"c": [0.5, 1.0], "n": 60, "ar1": 0.0, "markov": "none"})
    assert same.fingerprint == plain.fingerprint
    assert [same.entropy(p) for _, p in same.points()] == [plain.entropy(p) for _, p in plain.points()]
    other = SweepSpec.from_dict({"c": [0.5, 1.0], "n": 60, "ar1": 0.5})
    assert other.entropy(other.points()[0][1]) != plain.entropy(plain.points()[0][1])


def test_autocorrelation_file_axis(tmp_path):
    f = tmp_path / "r.npy"
    np.save(f, np.array([0.5, 0.2, -0.1]))
    s = SweepSpec.from_dict({"autocorr": ["none", str(f)], "n": 60})
    assert s.dims == ("autocorr",)
    assert s.tokens(s.points()[0]) is None
    assert s.tokens(s.points()[1]) == TokenLaw(autocorr=str(f))


@pytest.mark.parametrize("data, key", [
    ({"ar1": 1.0}, "ar1"),
    ({"ar1": [0.0, -0.1]}, "ar1"),
    ({"ar1": "none"}, "ar1"),
    ({"markov": 0.0}, "markov"),
    ({"markov": [0.5, 1.0]}, "markov"),
    ({"autocorr": "r.txt"}, "autocorr"),
    ({"ar1": 0.5, "correction": "finite-p"}, "correction"),
])
def test_bad_token_values_are_refused_naming_the_key(data, key):
    with pytest.raises(ParameterError) as exc:
        SweepSpec.from_dict(dict(data, n=60))
    assert exc.value.name == key and "allowed" in str(exc.value)


def test_ar1_with_an_autocorrelation_is_refused(tmp_path):
    f = tmp_path / "r.npy"
    np.save(f, np.array([0.3]))
    with pytest.raises(ParameterError) as exc:
        SweepSpec.from_dict({"ar1": 0.5, "autocorr": str(f), "n": 60})
    assert exc.value.name == "autocorr"
    np.save(f, np.array([0.9]))            # not positive definite
    with pytest.raises(ParameterError) as exc:
        SweepSpec.from_dict({"autocorr": str(f), "n": 60})
    assert exc.value.name == "autocorr"


def test_layer_with_weights_under_a_law_stores_lr_theory_and_nan_attention(tmp_path):
    """The attention theory under T is of the paper's model only (§15.5): NaN for a layer with weights, whose
    Monte Carlo and LR theory are stored all the same."""
    w = tmp_path / "w.npy"
    np.save(w, np.random.default_rng(0).standard_normal((30, 30)) / np.sqrt(30))
    spec = {"weights": str(w), "c": 0.5, "ar1": 0.5, "gamma": [1.0], "draws": 1}
    sa.sweep(spec, store=tmp_path / "st", scheduler="serial", progress=False)
    ds = sa.open_sweep(tmp_path / "st")
    assert np.isnan(ds.theory_attention.values).all()
    np.testing.assert_allclose(ds.theory_linear.values.ravel(),
                               linear_errors(0.5, 1.0, tokens=TokenLaw(ar1=0.5))["train"], rtol=1e-12)
    assert np.isfinite(ds.E_attention.values).all()


def test_cli_sweep_with_token_keys(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text('ar1 = [0.0, 0.5]\nmarkov = 0.8\nc = 1.0\nn = 40\ndraws = 1\ngamma = [1.0]\n')
    r = subprocess.run([sys.executable, "-m", "symattn.cli", "sweep", str(f), "--store", str(tmp_path / "st"),
                        "--scheduler", "serial", "--json"], capture_output=True, text=True, timeout=240, env=ENV)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["dims"] == ["ar1"] and out["tasks"] == 2
    f.write_text("ar1 = [0.0, 1.5]\nn = 40\n")
    r = subprocess.run([sys.executable, "-m", "symattn.cli", "sweep", str(f), "--store", str(tmp_path / "st2")],
                       capture_output=True, text=True, timeout=240, env=ENV)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "ar1" in r.stderr and "Traceback" not in r.stderr
