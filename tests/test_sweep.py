"""symattn.sweep: the spec contract, the zarr store (resume, kill -9, no mixing) and the engines.

Small sizes only (n = 60-300, a few points): the default suite runs on 2 cores.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("zarr")
pytest.importorskip("xarray")
pytest.importorskip("distributed")

import symattn as sa  # noqa: E402
from symattn.errors import ParameterError  # noqa: E402
from symattn.sweep import SweepSpec, load_spec  # noqa: E402

SPEC = """
activation = ["tanh", "erf"]
c = [0.5, 1.0]
gamma = [0.1, 1.0]
snr = [0.0, 1.0]
aligned = true
n = 60
draws = 3
seed = 7
"""
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")


def _cli(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "symattn.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def serial_store(tmp_path_factory):
    d = tmp_path_factory.mktemp("serial") / "store"
    summary = sa.sweep(SPEC, store=d, scheduler="serial", progress=False)
    return d, summary


# ----------------------------------------------------------------------------- the spec contract
@pytest.mark.parametrize("data, key", [
    ({"bogus": 1}, "bogus"),
    ({"c": 0}, "c"),
    ({"c": [0.5, -1.0]}, "c"),
    ({"c": [0.5, 0.5]}, "c"),
    ({"gamma": []}, "gamma"),
    ({"gamma": 0.0}, "gamma"),
    ({"n": 1}, "n"),
    ({"n": 60.5}, "n"),
    ({"draws": [1, 2]}, "draws"),
    ({"draws": 0}, "draws"),
    ({"seed": -1}, "seed"),
    ({"snr": -0.1}, "snr"),
    ({"snr": True}, "snr"),
    ({"aligned": 1}, "aligned"),
    ({"aligned": True, "wk2": 1.0}, "wk2"),
    ({"diagonal": "x"}, "diagonal"),
    ({"backend": "jax"}, "backend"),
    ({"activation": "nosuchact"}, "activation"),
    ({"activation": 3}, "activation"),
    ({"c": {"a": 1}}, "c"),
])
def test_spec_rejects_bad_values_naming_the_key(data, key):
    with pytest.raises(ParameterError) as exc:
        SweepSpec.from_dict(data)
    assert exc.value.name == key
    assert "allowed" in str(exc.value)


def test_spec_rejects_a_geometry_that_is_not_a_gram_matrix():
    with pytest.raises(ParameterError) as exc:  # |mu_wk| > ||mu|| ||w_K||: not PSD
        SweepSpec.from_dict({"snr": 1.0, "wk2": 1.0, "mu_wk": 2.0, "n": 60})
    assert exc.value.name == "geometry"


def test_spec_toml_file_and_errors(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text(SPEC)
    s = load_spec(f)
    assert s.dims == ("activation", "c", "snr") and s.shape == (2, 2, 2) and len(s.tasks()) == 24
    f.write_text("c = [0.5,")
    with pytest.raises(ParameterError) as exc:
        load_spec(f)
    assert exc.value.name == "spec"
    with pytest.raises(ParameterError) as exc:
        load_spec(tmp_path / "missing.toml")
    assert exc.value.name == "spec"


def test_task_seed_depends_on_the_point_and_seed_only():
    a = SweepSpec.from_dict({"c": [0.5, 1.0], "n": 60, "seed": 3})
    b = SweepSpec.from_dict({"c": [1.0], "n": 60, "seed": 3, "gamma": [2.0]})
    (_, pa), (_, pb) = a.points()[1], b.points()[0]
    assert a.entropy(pa) == b.entropy(pb)  # same point, other grid and other gamma: same draws
    assert a.entropy(a.points()[0][1]) != a.entropy(pa)
    c = SweepSpec.from_dict({"c": [1.0], "n": 60, "seed": 4})
    assert c.entropy(c.points()[0][1]) != a.entropy(pa)


# ----------------------------------------------------------------------------- results
def test_serial_store_matches_simulate_directly(serial_store):
    """Each point's draws are exactly simulate(..., draws=D, seed=SeedSequence(entropy)) (an outside run)."""
    d, summary = serial_store
    assert (summary["tasks"], summary["computed"], summary["reused"]) == (24, 24, 0)
    ds = sa.open_sweep(d)
    spec = load_spec(SPEC)
    idx, pt = spec.points()[5]
    ref = sa.simulate(pt["activation"], n=60, c=pt["c"], gamma=spec.gamma, geometry=spec.geometry(pt), draws=3,
                      seed=np.random.SeedSequence(spec.entropy(pt)), progress=False)
    sel = dict(zip(spec.dims, (spec.values[k][i] for k, i in zip(spec.dims, idx))))
    np.testing.assert_array_equal(ds.E_attention.sel(sel).values, ref.attention)
    np.testing.assert_array_equal(ds.E_linear.sel(sel).values, ref.linear)
    np.testing.assert_allclose(ds.E_attention_mean.sel(sel).values, ref.attention_mean, rtol=1e-14)
    np.testing.assert_allclose(ds.E_attention_se.sel(sel).values, ref.attention_sem, rtol=1e-12)
    with pytest.warns(sa.FiniteSizeWarning):  # t = 0.37 at n = 60: stored all the same (theory_arrays)
        th = sa.solve(pt["activation"], c=pt["c"], gamma=spec.gamma, geometry=spec.geometry(pt), model="both", n=60)
    np.testing.assert_allclose(ds.theory_attention.sel(sel).values, th.attention, rtol=1e-12)
    np.testing.assert_allclose(ds.theory_linear.sel(sel).values, th.linear, rtol=1e-12)


def test_store_reads_with_xarray_alone(serial_store):
    import xarray as xr

    d, _ = serial_store
    ds = xr.open_zarr(str(d))
    assert set(ds.E_attention.dims) == {"activation", "c", "snr", "draw", "gamma"}
    ref = sa.open_sweep(d)
    np.testing.assert_array_equal(ds.E_linear.values, ref.E_linear.values)
    se = ds.E_attention.std("draw", ddof=1) / ds.sizes["draw"] ** 0.5
    np.testing.assert_allclose(se.values, ref.E_attention_se.values, rtol=1e-12)


def test_rerun_reuses_everything_and_other_spec_is_refused(serial_store, tmp_path):
    d, _ = serial_store
    again = sa.sweep(SPEC, store=d, scheduler="serial", progress=False)
    assert (again["computed"], again["reused"]) == (0, 24)
    before = sa.open_sweep(d)
    with pytest.raises(ParameterError) as exc:
        sa.sweep(SPEC.replace("seed = 7", "seed = 8"), store=d, scheduler="serial", progress=False)
    assert exc.value.name == "store" and "seed" in str(exc.value)
    assert sa.open_sweep(d).identical(before)  # untouched
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ParameterError) as exc:
        sa.sweep(SPEC, store=other, scheduler="serial", progress=False)
    assert exc.value.name == "store"


def test_real_cluster_and_embedded_cluster_equal_serial(serial_store, tmp_path):
    """dask scheduler + two dask workers on loopback, then the embedded LocalCluster: the same numbers."""
    d, _ = serial_store
    ref = sa.open_sweep(d)
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = []
    try:
        procs.append(subprocess.Popen([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port",
                                       str(port), "--no-dashboard"], env=ENV, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, cwd=tmp_path))
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "dask", "worker", address, "--nthreads", "1",
                                           "--no-nanny", "--host", "127.0.0.1", "--no-dashboard"], env=ENV,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path))
        out = sa.sweep(SPEC, store=tmp_path / "cluster", scheduler=address, workers=2, progress=False)
        assert (out["tasks"], out["computed"], out["reused"], out["workers"]) == (24, 24, 0, 2)
        assert out["engine"] == "scheduler" and "provenance" in out
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    cluster = sa.open_sweep(tmp_path / "cluster")
    embedded = sa.sweep(SPEC, store=tmp_path / "embedded", workers=2, progress=False)
    assert embedded["engine"] == "local-cluster" and embedded["computed"] == 24
    for ds in (cluster, sa.open_sweep(tmp_path / "embedded")):
        for v in ("E_attention", "E_linear", "theory_attention", "theory_linear"):
            np.testing.assert_array_equal(ds[v].values, ref[v].values)
        assert ds.attrs["symattn_sweep_fingerprint"] == ref.attrs["symattn_sweep_fingerprint"]


KILL_SPEC = """
c = [0.5, 1.0]
gamma = [0.01, 1.0]
n = 200
draws = 8
seed = 1
"""


def _chunks(store: Path):
    """The stored chunk files and their (inode, mtime); a file of a write in flight (zarr's ``*.partial``, renamed
    into place as this runs) is not a stored chunk."""
    out = {}
    for v in ("E_attention", "E_linear"):
        for p in (store / v / "c").rglob("*"):
            if p.suffix == ".partial":
                continue
            try:
                st = p.stat()
            except FileNotFoundError:   # renamed or removed between the listing and the stat
                continue
            if p.is_file():
                out[p] = (st.st_ino, st.st_mtime_ns)
    return out


def test_kill_9_then_resume_equals_uninterrupted(tmp_path):
    spec_file = tmp_path / "kill.toml"
    spec_file.write_text(KILL_SPEC)
    store = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "symattn.cli", "sweep", str(spec_file), "--store", str(store),
                             "--scheduler", "serial", "--no-progress"], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            if (store / "E_linear" / "c").is_dir() and len(_chunks(store)) >= 8:  # >= 4 tasks stored (2 files each)
                os.kill(proc.pid, signal.SIGKILL)
                break
            if proc.poll() is not None:
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None and time.monotonic() >= deadline:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep ended before it could be killed part-way"
    stored = _chunks(store)
    complete = [tuple(int(i) for i in ix) for ix in np.argwhere(sa.open_sweep(store).done.values)]  # (c, draw)
    assert 4 <= len(complete) < 16
    out = sa.sweep(spec_file, store=store, scheduler="serial", progress=False)
    assert (out["tasks"], out["reused"], out["computed"]) == (16, len(complete), 16 - len(complete))
    after = _chunks(store)
    for i, k in complete:  # nothing stored is recomputed: a reused task's chunk files are untouched
        for v in ("E_attention", "E_linear"):
            f = store / v / "c" / str(i) / str(k) / "0"
            assert f in stored and after[f] == stored[f], f
    reference = tmp_path / "uninterrupted"
    sa.sweep(KILL_SPEC, store=reference, scheduler="serial", progress=False)
    a, b = sa.open_sweep(store), sa.open_sweep(reference)
    assert bool(a.done.all())
    for v in ("E_attention", "E_linear", "theory_attention", "theory_linear"):
        np.testing.assert_array_equal(a[v].values, b[v].values)


def test_cli_json_summary(serial_store, tmp_path):
    d, _ = serial_store
    f = tmp_path / "s.toml"
    f.write_text(SPEC)
    r = _cli("sweep", str(f), "--store", str(d), "--scheduler", "serial", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["tasks"], out["computed"], out["reused"], out["store"]) == (24, 0, 24, str(d))
    assert out["provenance"]["seed"] == 7 and set(out["agreement"]) == {"attention", "linear"}


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    f = tmp_path / "s.toml"
    f.write_text("c = [0.5, 2e5]\nn = 60\n")
    r = _cli("sweep", str(f), "--store", str(tmp_path / "st"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "c=" in r.stderr and "Traceback" not in r.stderr
    r = _cli("sweep", str(tmp_path / "missing.toml"), "--store", str(tmp_path / "st"))
    assert r.returncode == 2 and "spec" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "st").exists()


def test_sa_sweep_is_callable_whatever_the_import_order(tmp_path):
    import symattn.sweep as pkg

    s = pkg({"n": 40, "draws": 1, "gamma": [1.0]}, store=tmp_path / "a", scheduler="serial", progress=False)
    assert s["computed"] == 1
    assert sa.sweep({"n": 40, "draws": 1, "gamma": [1.0]}, store=tmp_path / "a", scheduler="serial",
                    progress=False)["reused"] == 1


def test_a_chunk_cut_short_is_computed_again(tmp_path):
    spec = {"n": 40, "draws": 2, "gamma": [0.1, 1.0], "seed": 5}
    store = tmp_path / "s"
    sa.sweep(spec, store=store, scheduler="serial", progress=False)
    ref = sa.open_sweep(store)
    chunk = store / "E_attention" / "c" / "1" / "0"  # draw 1 (no swept dims: indices draw/gamma-chunk)
    assert chunk.is_file()
    chunk.write_bytes(chunk.read_bytes()[:5])  # what a write killed half-way would leave without an atomic rename
    again = sa.sweep(spec, store=store, scheduler="serial", progress=False)
    assert (again["computed"], again["reused"]) == (1, 1)
    np.testing.assert_array_equal(sa.open_sweep(store).E_attention.values, ref.E_attention.values)
