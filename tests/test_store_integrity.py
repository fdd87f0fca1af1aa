"""The sweep store cannot be mixed or silently corrupted (issue 38 §1, §2).

- two real sweeps (subprocesses of ``symattn sweep --scheduler serial``) on one store: the original and an
  extension started while it runs. The second one waits for the first one's lock and refuses with a
  one-line message (exit 2) or runs after it; after a rerun the store equals, value for value, a serial run
  of the extension in a fresh store. Once in the default suite, five times in the slow suite;
- one flipped bit in any chunk of either model is detected on the next run, its task computed again and
  reported; a deleted chunk is never read as the metadata's fill value; a truncated root ``zarr.json``
  is rebuilt;
- a SIGTERM during the creation of a store leaves no temporary ``.part`` folder.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import symattn as sa
from symattn.errors import ParameterError

pytest.importorskip("zarr")
pytest.importorskip("xarray")

A = 'activation = "erf"\nc = [0.5, 1.0]\ngamma = [0.1, 1.0]\nn = 150\ndraws = 12\n'
B = A.replace("c = [0.5, 1.0]", "c = [0.25, 0.5, 1.0]")
SMALL = {"c": [0.5, 1.0], "gamma": [0.1, 1.0], "n": 40, "draws": 3}


def _cli(args, **kw):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "symattn.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, **kw)


def _values(store):
    ds = sa.open_sweep(store)
    return {v: np.asarray(ds[v].values) for v in ("E_attention", "E_linear")}


def _concurrent(tmp: Path, reference: dict) -> str:
    (tmp / "A.toml").write_text(A)
    (tmp / "B.toml").write_text(B)
    store = tmp / "ce"
    a = _cli(["sweep", str(tmp / "A.toml"), "--store", str(store), "--scheduler", "serial", "--no-progress"])
    deadline = time.monotonic() + 120
    while not list(glob.glob(str(store / "E_attention" / "c" / "*" / "*" / "*"))):   # A is writing tasks
        assert a.poll() is None, a.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    b = _cli(["sweep", str(tmp / "B.toml"), "--store", str(store), "--scheduler", "serial", "--no-progress"])
    out_b, err_b = b.communicate(timeout=300)
    out_a, err_a = a.communicate(timeout=300)
    assert a.returncode == 0, err_a
    if b.returncode == 2:   # refused while A held the store: one line, no traceback
        assert "Traceback" not in err_b and len(err_b.strip().splitlines()) == 1, err_b
        assert "another --store" in err_b
        outcome = "refused"
    else:
        assert b.returncode == 0, err_b
        outcome = "waited"
    again = subprocess.run([sys.executable, "-m", "symattn.cli", "sweep", str(tmp / "B.toml"), "--store", str(store),
                            "--scheduler", "serial", "--no-progress", "--json"], capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr
    summary = json.loads(again.stdout)
    assert summary["computed"] == (0 if outcome == "waited" else 12)   # A's 24 tasks kept, c = 0.25 added
    got = _values(store)
    for v in got:
        np.testing.assert_array_equal(got[v], reference[v])   # bit-identical to a serial run of B
    return outcome


@pytest.fixture(scope="module")
def serial_b(tmp_path_factory):
    d = tmp_path_factory.mktemp("serial")
    sa.sweep(B, store=d / "store", scheduler="serial", progress=False)
    return _values(d / "store")


def test_two_sweeps_on_one_store_never_mix(tmp_path, serial_b):
    assert _concurrent(tmp_path, serial_b) in ("waited", "refused")   # and the store equals a serial run of B


@pytest.mark.slow
@pytest.mark.parametrize("repeat", range(5))
def test_two_sweeps_on_one_store_never_mix_repeated(tmp_path, serial_b, repeat):
    assert _concurrent(tmp_path, serial_b) in ("waited", "refused")


def test_busy_store_refused_with_one_line(tmp_path):
    from symattn.sweep.store import store_lock

    with store_lock(tmp_path / "st"):
        with pytest.raises(ParameterError, match="no other sweep is writing"):
            with store_lock(tmp_path / "st", wait=0.2):
                pass
    with store_lock(tmp_path / "st", wait=0):   # released
        pass


def test_writer_refuses_a_replaced_store(tmp_path):
    from symattn.sweep.spec import load_spec
    from symattn.sweep.store import Writer

    sa.sweep(SMALL, store=tmp_path / "st", scheduler="serial", progress=False)
    w = Writer(tmp_path / "st", load_spec(SMALL).fingerprint)
    os.rename(tmp_path / "st", tmp_path / "old")
    sa.sweep(dict(SMALL, c=[0.25, 0.5, 1.0]), store=tmp_path / "st", scheduler="serial", progress=False)
    with pytest.raises(ParameterError, match="replaced or changed"):
        w.write((0, 0), {"E_attention": [1.0, 1.0], "E_linear": [1.0, 1.0]})


@pytest.mark.parametrize("variable", ["E_attention", "E_linear"])
@pytest.mark.parametrize("which", [0, 3, 5])
def test_flipped_bit_detected_and_recomputed(tmp_path, variable, which):
    store = tmp_path / "st"
    sa.sweep(SMALL, store=store, scheduler="serial", progress=False)
    ref = _values(store)
    chunk = sorted(glob.glob(str(store / variable / "c" / "*" / "*" / "*")))[which]
    data = bytearray(Path(chunk).read_bytes())
    data[(which * 7) % len(data)] ^= 1 << (which % 8)
    Path(chunk).write_bytes(bytes(data))
    with pytest.raises(ParameterError, match="corrupted"):
        sa.open_sweep(store)   # never a wrong value
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = sa.sweep(SMALL, store=store, scheduler="serial", progress=False)
    assert (s["computed"], s["corrupted"]) == (1, 1)
    assert any("checksum" in str(w.message) for w in caught)
    got = _values(store)
    for v in got:
        np.testing.assert_array_equal(got[v], ref[v])


def test_missing_chunk_never_read_as_fill_value(tmp_path):
    store = tmp_path / "st"
    sa.sweep(SMALL, store=store, scheduler="serial", progress=False)
    ref = _values(store)
    for name in (store / "zarr.json", store / "E_attention" / "zarr.json", store / "E_linear" / "zarr.json"):
        meta = name.read_text()
        assert '"fill_value": "NaN"' in meta
        name.write_text(meta.replace('"fill_value": "NaN"', '"fill_value": 0.5'))
    os.remove(sorted(glob.glob(str(store / "E_attention" / "c" / "*" / "*" / "*")))[1])
    ds = sa.open_sweep(store)
    assert not bool(ds.done.values[0, 1]) and np.isnan(ds.E_attention.values[0, 1]).all()
    s = sa.sweep(SMALL, store=store, scheduler="serial", progress=False)
    assert s["computed"] == 1
    np.testing.assert_array_equal(_values(store)["E_attention"], ref["E_attention"])


def test_truncated_root_is_rebuilt(tmp_path):
    store = tmp_path / "st"
    sa.sweep(SMALL, store=store, scheduler="serial", progress=False)
    ref = _values(store)
    root = store / "zarr.json"
    root.write_bytes(root.read_bytes()[:100])
    s = sa.sweep(SMALL, store=store, scheduler="serial", progress=False)
    assert s["rebuilt_root"] and s["computed"] == 0 and s["reused"] == 6
    got = _values(store)
    for v in got:
        np.testing.assert_array_equal(got[v], ref[v])


def test_sigterm_leaves_no_part_folder(tmp_path):
    spec = tmp_path / "big.toml"
    spec.write_text('c = [0.5, 1.0, 2.0]\ngamma = [0.1, 1.0]\nn = 100\ndraws = 2\nactivation = "erf"\n')
    p = _cli(["sweep", str(spec), "--store", str(tmp_path / "st"), "--scheduler", "serial", "--no-progress"])
    deadline = time.monotonic() + 60
    while not any(".part" in x.name or x.name == "st" for x in tmp_path.iterdir()):   # being created, or made
        assert p.poll() is None, p.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "Traceback" not in err, err
    assert not [x.name for x in tmp_path.iterdir() if ".part" in x.name]
