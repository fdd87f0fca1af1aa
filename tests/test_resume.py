"""Interrupting ``reproduce`` (symattn.figures.run) leaves no partial file, and a rerun reuses its cache.

A small reproduction (the ``mu0`` figure at n = 200: six Monte Carlo runs, then PNG, PDF and CSV,
about 10 s) is started in a subprocess and interrupted at seeded random moments by SIGINT (Ctrl-C)
or SIGKILL (``kill -9``, which runs no clean-up at all). After every interruption:

- each figure file present is whole (PNG: signature and IEND chunk; PDF: ``%PDF`` and ``%%EOF``;
  CSV: byte-identical to that of an uninterrupted run), and every cache file loads;
- after SIGINT the run has removed its own temporary files; after SIGKILL only hidden
  ``.<name>.<pid>-….part…`` files of the dead process may be left (never under a final name), and
  the next run removes them (:func:`symattn.files.remove_stale_parts`).

The final rerun must report the finished Monte Carlo runs as reused (at least those cached before
it, and at least one: one interruption waits for the first cache file), simulate only the rest,
and write CSVs byte-identical to those of the uninterrupted run made without a cache.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from symattn.files import PART_RE

SCRIPT = """
import json, sys
from dataclasses import replace
from symattn import figures as rp
tiny = replace(rp.QUICK, name="resume-test", n=200, draws=3, curve_points=3, mu0_gammas=(0.1, 1.0), mu0_cs=(0.5,),
               mu0_snrs=(1.0,))
summary = rp.run(out=sys.argv[1], settings=tiny, figures=["mu0"], progress=False, echo=None,
                 cache=sys.argv[2] == "cache")
print(json.dumps(summary["monte_carlo"]))
"""
STEMS = ("fig_mu0.png", "fig_mu0.pdf", "fig_mu0.csv", "fig_mu0.csv.provenance.json")


def _start(out: Path, cache: bool = True) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), "cache" if cache else "none"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))   # even when run in the background


def _finish(proc: subprocess.Popen, timeout: float = 240) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _png_whole(data: bytes) -> bool:
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data[-12:-4] == b"\x00\x00\x00\x00IEND"


def _pdf_whole(data: bytes) -> bool:
    return data.startswith(b"%PDF-") and data.rstrip().endswith(b"%%EOF")


def _check_whole(out: Path, reference: Path) -> None:
    """Every final-named file in ``out`` is complete; CSVs equal the reference byte for byte."""
    for f in out.iterdir():
        if PART_RE.match(f.name) or f.is_dir():
            continue
        data = f.read_bytes()
        if f.suffix == ".png":
            assert _png_whole(data), f
        elif f.suffix == ".pdf":
            assert _pdf_whole(data), f
        elif f.suffix == ".csv":
            assert data == (reference / f.name).read_bytes(), f
        elif f.name.endswith(".provenance.json"):
            assert json.loads(data)["parameters"]["figure"] == "mu0"
    cache = out / ".cache"
    if cache.is_dir():
        for f in cache.iterdir():
            if not PART_RE.match(f.name):
                with np.load(f, allow_pickle=False) as z:  # a whole npz: every member reads back
                    assert {"meta", "gamma"} <= set(z.files) and all(z[k] is not None for k in z.files), f


def _parts(out: Path) -> list:
    if not out.exists():
        return []
    found = [f for f in out.iterdir() if PART_RE.match(f.name)]
    if (out / ".cache").is_dir():
        found += [f for f in (out / ".cache").iterdir() if PART_RE.match(f.name)]
    return found


def _writer(part: Path) -> int:
    """The process id in the name of a temporary file of symattn.files.atomic_path."""
    return int(PART_RE.match(part.name).group(1))


def _cached(out: Path) -> int:
    cache = out / ".cache"
    return len([f for f in cache.iterdir() if not PART_RE.match(f.name)]) if cache.is_dir() else 0


def test_interrupted_reproduce_leaves_whole_files_and_resumes(tmp_path):
    reference = tmp_path / "reference"
    t0 = time.perf_counter()
    ref = _finish(_start(reference, cache=False))
    wall = time.perf_counter() - t0
    assert ref == {"runs": 6, "computed": 6, "reused": 0, "cache": None, "engine": "serial"}
    assert not (reference / ".cache").exists()
    for name in STEMS:
        assert (reference / name).is_file(), name

    out = tmp_path / "interrupted"
    rng = random.Random(20240612)
    # (signal, moment): "cache" = just after this attempt's first Monte Carlo run reached the cache,
    # "write" = while a figure is being written (its temporary file exists), "any" = a random time;
    # each moment gets a seeded random extra delay
    plan = [(signal.SIGINT, "cache"), (signal.SIGKILL, "write"), (signal.SIGINT, "write"), (signal.SIGKILL, "any")]
    hits, killed = [], set()
    for sig, moment in plan:
        cached_before = _cached(out) if out.exists() else 0
        proc = _start(out)
        deadline = time.perf_counter() + 2 * wall
        if moment == "cache":
            while _cached(out) <= cached_before and proc.poll() is None and time.perf_counter() < deadline:
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.05))
        elif moment == "write":
            while not [f for f in _parts(out) if _writer(f) == proc.pid] \
                    and proc.poll() is None and time.perf_counter() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.3))
        else:
            time.sleep(rng.uniform(0.1, 1.0) * wall)
        alive = proc.poll() is None
        if alive:
            proc.send_signal(sig)
        proc.communicate(timeout=120)
        hits.append((sig, moment, alive, _cached(out)))
        if len(hits) == 1:  # the runs the first Ctrl-C kept: no later attempt may simulate them again
            first = {f.name: f.stat().st_mtime_ns for f in (out / ".cache").iterdir() if not PART_RE.match(f.name)}
        _check_whole(out, reference)
        if sig == signal.SIGKILL:
            killed.add(proc.pid)
        # Ctrl-C: the run removes its own temporary files. Left over: only the hidden temporary
        # files of killed runs (if this one was stopped before sweeping them), never a final name
        for f in _parts(out):
            assert _writer(f) in killed, (hits, f)
    # the targeted interruptions really interrupted: in the Monte Carlo, and twice while writing a figure
    assert [h[2] for h in hits[:3]] == [True, True, True], hits
    assert 1 <= hits[0][3] < 6, hits  # Ctrl-C in the Monte Carlo kept the runs finished before it
    assert _cached(out) >= 1

    cached = _cached(out)
    final = _finish(_start(out))
    assert final["runs"] == 6 and final["computed"] + final["reused"] == 6, final
    assert final["reused"] >= max(cached, 1), (final, cached)
    assert final["computed"] == 6 - cached, (final, cached)  # nothing finished is simulated again
    assert not _parts(out), _parts(out)
    _check_whole(out, reference)
    for name in STEMS:
        assert (out / name).is_file(), name
    assert (out / "fig_mu0.csv").read_bytes() == (reference / "fig_mu0.csv").read_bytes()
    # and once more: everything is reused, nothing simulated
    assert _finish(_start(out))["computed"] == 0
    assert {name: (out / ".cache" / name).stat().st_mtime_ns for name in first} == first
