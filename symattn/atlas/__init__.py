r"""The accuracy atlas: where the theory holds, measured against exact Monte Carlo, stored and drawn.

An atlas spec is a TOML file of *blocks*, each a sweep spec (:mod:`symattn.sweep.spec`: any layer, signal,
c, n, γ), with the top-level keys as the defaults of every block:

.. code-block:: toml

   draws = 16
   gamma = [1e-3, 1e-2, 0.1, 1, 10]

   [[block]]
   name = "paper"
   activation = ["tanh", "relu"]
   c = [0.5, 1, 2]
   n = [250, 1000]            # the n-law of the paper's model

   [[block]]
   name = "minilm-all"
   weights = ["minilm:1", "minilm:4"]
   mu = ["zero", "top"]
   snr = 2.0
   c = [0.75, 1, 2]
   tile = [1, 2]              # the n-law of real weights: W ⊗ I_T at fixed c

Each block is one sweep store ``DIR/<name>`` (resumable and extensible like any sweep). :func:`cells`
turns the stores into the atlas table (:data:`symattn.accuracy.COLUMNS`), one row per cell (point × γ):
the theory, the Monte Carlo mean and its standard error, the relative gap (MC − theory)/theory (:data:`symattn.accuracy.GAP`), the z-score (MC − theory)/se,
whether the cell is within max(3 se, 3 %), the engine, the features :func:`symattn.accuracy.assess`
measures distances in, and ``call`` (JSON: the layer's :meth:`~symattn.Layer.to_dict`, c, n and the signal),
from which ``symattn verify --atlas`` recomputes the theory. The n-law is read from the rows that differ only in ``n`` (or ``tile``).
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import numpy as np

from ..accuracy import COLUMNS, within_tolerance
from ..errors import ParameterError

__all__ = ["DEFAULT_SPEC", "QUICK_SPEC", "load_atlas_spec", "run_atlas", "refresh_theory", "refresh_table", "cells",
           "write_table", "grid_cells", "merge_cells", "paper_test_cells", "real_test_cells", "REAL_TEST_GRIDS",
           "n_law", "summary_table"]

HERE = Path(__file__).resolve().parent
#: the default atlas (the real-layer grid and the synthetic models) and its small version for CI
DEFAULT_SPEC = HERE / "default.toml"
QUICK_SPEC = HERE / "quick.toml"
#: the test-error grids of real layers in the shipped atlas (:func:`real_test_cells`): block, CSV under docs/
#: (benchmarks/test_error_minilm.py: the acceptance grid and the held-out cases, docs/theory.md §14.9)
REAL_TEST_GRIDS = (("minilm-test", "test_error_minilm.csv"), ("minilm-test-heldout", "test_error_heldout.csv"))


def load_atlas_spec(spec=None) -> list:
    """The blocks of an atlas spec: a list of ``(name, SweepSpec)``.

    Parameters
    ----------
    spec : str, pathlib.Path, dict or None
        A TOML file, or the parsed table (None: :data:`DEFAULT_SPEC`).

    Examples
    --------
    >>> [name for name, _ in load_atlas_spec(QUICK_SPEC)][:1]
    ['paper']
    """
    import tomllib

    from ..sweep.spec import SweepSpec

    if spec is None:
        spec = DEFAULT_SPEC
    if not isinstance(spec, dict):
        path = Path(spec)
        try:
            spec = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise ParameterError("spec", str(path), "a readable atlas spec (TOML)", hint=str(exc)) from None
        except tomllib.TOMLDecodeError as exc:
            raise ParameterError("spec", str(path), "a valid TOML file", hint=str(exc)) from None
    blocks = spec.get("block")
    if not isinstance(blocks, list) or not blocks:
        raise ParameterError("block", blocks, "one or more [[block]] tables (each a sweep spec with a name)")
    defaults = {k: v for k, v in spec.items() if k != "block"}
    out, names = [], set()
    for i, block in enumerate(blocks):
        if not isinstance(block, dict) or not isinstance(block.get("name"), str) or not block["name"].strip():
            raise ParameterError("block", i, "a table with a name = \"...\" (a folder name)")
        name = block["name"]
        if name in names or "/" in name or name.startswith("."):
            raise ParameterError("name", name, "distinct block names usable as folder names")
        names.add(name)
        out.append((name, SweepSpec.from_dict({**defaults, **{k: v for k, v in block.items() if k != "name"}})))
    return out


def run_atlas(spec=None, store="atlas", *, scheduler=None, workers=None, quick: bool = False, progress=None,
              threads=None) -> dict:
    r"""Run (or resume, or extend) every block of an atlas spec, then write its table ``DIR/atlas.csv``.

    Each block is :func:`symattn.sweep` into ``DIR/<name>``: exact Monte Carlo E_A(γ) = γ²ŷᵀ(M + γ)^{-2}ŷ
    (docs/theory.md §2) next to :meth:`symattn.Layer.theory` at the same n.

    Parameters
    ----------
    spec : str, pathlib.Path, dict or None
        The atlas spec (None: :data:`DEFAULT_SPEC`, or :data:`QUICK_SPEC` with ``quick``).
    store : str or pathlib.Path
        The atlas folder.
    scheduler, workers, progress, threads
        As :func:`symattn.sweep`.
    quick : bool
        The small atlas of :data:`QUICK_SPEC` (when ``spec`` is None).

    Returns
    -------
    dict
        ``blocks`` (per block: tasks, computed, reused, seconds, engines), ``cells``, ``within``
        (the fraction within tolerance), ``table`` (the CSV path), ``seconds``.
    """
    from ..sweep import sweep

    t0 = time.perf_counter()
    blocks = load_atlas_spec(QUICK_SPEC if spec is None and quick else spec)
    store = Path(store)
    store.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, s in blocks:
        res = sweep(s, store / name, scheduler=scheduler, workers=workers, progress=progress, threads=threads)
        out[name] = {k: res[k] for k in ("tasks", "computed", "reused", "seconds", "engine", "workers")}
    rows = cells(store, [name for name, _ in blocks])
    table = write_table(rows, store / "atlas.csv")
    summary = {"blocks": out, "cells": len(rows), "within": float(np.mean([r["within"] for r in rows])) if rows else None,
               "table": str(table), "seconds": time.perf_counter() - t0}
    (store / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return summary


def refresh_theory(store, *, scheduler=None, workers=None) -> dict:
    """Recompute the theory of every block of a finished atlas with the current code, keeping its Monte Carlo,
    and write the table again: the atlas then measures the current theory (``symattn verify --atlas`` passes).

    The Monte Carlo of a cell does not depend on the theory, so after a change of the theory this is a new
    measurement of it, not an edit of the old one.

    Returns
    -------
    dict
        ``blocks`` (per block: the cells whose theory moved by more than 1e-8 relative, and the largest move),
        ``cells``, ``within``, ``table``, ``seconds``.
    """
    import contextlib

    import zarr

    from ..cluster import dask_client
    from ..sweep.engine import theory_arrays
    from ..sweep.spec import SweepSpec

    t0 = time.perf_counter()
    store = Path(store)
    names = sorted(p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith("."))
    out = {}
    with contextlib.ExitStack() as stack:
        client = None if scheduler == "serial" else stack.enter_context(dask_client(scheduler, workers))
        for name in names:
            g = zarr.open_group(str(store / name), mode="r+")
            spec = SweepSpec.from_dict(json.loads(g.attrs["symattn_sweep_spec"]))
            new = theory_arrays(spec, client=client)
            old = np.asarray(g["theory_attention"][...], dtype=float)
            moved = np.abs(new["theory_attention"] - old) > 1e-8 * np.abs(old)
            moved |= np.isfinite(new["theory_attention"]) != np.isfinite(old)
            for key in ("theory_attention", "theory_linear"):
                g[key][...] = new[key]
            finite = np.isfinite(old) & np.isfinite(new["theory_attention"])
            rel = np.abs(new["theory_attention"] - old)[finite] / np.abs(old[finite])
            out[name] = {"moved": int(moved.sum()), "largest": float(rel.max()) if rel.size else 0.0}
    rows = cells(store, names)
    table = write_table(rows, store / "atlas.csv")
    summary_path = store / "summary.json"
    summary = json.loads(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else {}
    summary.update(cells=len(rows), within=float(np.mean([r["within"] for r in rows])) if rows else None,
                   table=str(table), theory_refreshed={"blocks": out, "seconds": time.perf_counter() - t0})
    summary_path.write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return {"blocks": out, "cells": len(rows), "within": summary["within"], "table": str(table),
            "seconds": time.perf_counter() - t0}


def _theory_task(task):
    """One call of :func:`refresh_table` (a process-pool task): the call's key, its γ, and E or the skip reason."""
    from ..errors import RealWeightsUnavailable
    from ..verification.atlas import theory_of_call

    key, gammas = task
    try:
        return key, theory_of_call(json.loads(key[1]), gammas), None
    except RealWeightsUnavailable as exc:
        return key, None, str(exc)


def _replay(tasks, workers=None, progress=None) -> dict:
    """The theory of atlas calls: ``[(key, gammas)]`` with key = (block, call JSON) -> {key: (E or None, reason)}."""
    import os
    import sys
    from concurrent.futures import ProcessPoolExecutor

    from tqdm.auto import tqdm

    workers = max(1, int(workers or os.cpu_count() or 1))
    show = sys.stderr.isatty() if progress is None else bool(progress)
    results = {}
    with tqdm(total=len(tasks), desc="refresh", unit="call", file=sys.stderr, disable=not show) as bar:
        if workers == 1:
            it = map(_theory_task, tasks)
        else:
            pool = ProcessPoolExecutor(max_workers=workers)
            it = pool.map(_theory_task, tasks, chunksize=1)
        for key, E, reason in it:
            results[key] = (E, reason)
            bar.update()
        if workers > 1:
            pool.shutdown()
    return results


def refresh_table(table=None, out=None, *, workers=None, progress=None) -> dict:
    """Recompute the theory of every cell of an atlas *table* with the current code, keeping its Monte Carlo.

    The table is enough: each row's ``call`` replays the theory (:func:`symattn.verification.atlas.theory_of_call`),
    and its ``mc``, ``se`` and ``draws`` are kept, so the gap (MC − theory)/theory, the z-score and the tolerance
    max(3 se, 3 %) are measured again for the new theory (use it when the finished sweep stores are not at
    hand; :func:`refresh_theory` does the same on the stores). A cell whose new theory fails is left out and
    counted in ``failed``.

    Parameters
    ----------
    table : str or pathlib.Path, optional
        The atlas table (default: the shipped one, :data:`symattn.accuracy.ATLAS_PATH`).
    out : str or pathlib.Path, optional
        Where the refreshed table goes (default: over ``table``).
    workers : int, optional
        Worker processes (default: one per core; 1 runs in this process).
    progress : bool, optional
        A tqdm bar on stderr (default: when stderr is a terminal).

    Returns
    -------
    dict
        ``blocks`` (per block: ``cells``, ``moved`` beyond 1e-8 relative, ``largest`` relative move, and the
        fractions ``within_before`` (of the table's cells) and ``within_after`` (of the refreshed ones)), ``cells``, ``failed``, ``skipped`` (calls whose weights are absent, with
        the reason; their rows are kept unchanged), ``within``, ``table``, ``seconds``.
    """
    from ..accuracy import ATLAS_PATH, load_atlas

    t0 = time.perf_counter()
    table = Path(ATLAS_PATH if table is None else table)
    rows = [dict(r) for r in load_atlas.__wrapped__(table)]
    if not rows:
        raise ParameterError("table", str(table), "an atlas table with rows (symattn atlas writes one)")
    calls = {}
    for r in rows:
        calls.setdefault((r["block"], r["call"]), []).append(r)
    tasks = [(key, [r["gamma"] for r in rs]) for key, rs in calls.items()]
    results = _replay(tasks, workers, progress)
    blocks, kept, failed, skipped = {}, [], 0, []
    for key, rs in calls.items():
        E, reason = results[key]
        b = blocks.setdefault(key[0], {"rows": 0, "cells": 0, "moved": 0, "largest": 0.0, "within_before": 0,
                                       "within_after": 0})
        if E is None:
            skipped.append({"block": key[0], "reason": reason})
        for j, r in enumerate(rs):
            b["rows"] += 1
            b["within_before"] += bool(r["within"])
            if E is not None:
                e = float(f"{float(E[j]):.10g}")   # as the table stores it, so gap and z agree with its columns
                if not np.isfinite(e):
                    failed += 1
                    continue
                rel = abs(e - r["theory"]) / abs(r["theory"])
                b["moved"] += rel > 1e-8
                b["largest"] = max(b["largest"], rel)
                mc, se = r["mc"], r["se"]
                r.update(theory=e, gap=(mc - e) / e, z=(mc - e) / se if se > 0 else 0.0,
                         within=within_tolerance(e, mc, se))
            b["cells"] += 1
            b["within_after"] += bool(r["within"])
            kept.append(r)
    for b in blocks.values():
        b["within_before"] /= max(1, b.pop("rows"))
        b["within_after"] /= max(1, b["cells"])
    path = write_table(kept, table if out is None else out)
    return {"blocks": blocks, "cells": len(kept), "failed": failed, "skipped": skipped,
            "within": float(np.mean([r["within"] for r in kept])) if kept else None, "table": str(path),
            "seconds": time.perf_counter() - t0}


def cells(store, names=None) -> list:
    """The atlas table of the block stores ``store/<name>``: one dict per cell, keys :data:`COLUMNS`.

    Cells whose Monte Carlo or theory is missing (not run yet, or a failed theory point) are left out.
    """
    from ..sweep import open_sweep
    from ..sweep.spec import SweepSpec

    store = Path(store)
    if names is None:
        names = sorted(p.name for p in store.iterdir() if p.is_dir() and not p.name.startswith("."))
    rows = []
    for name in names:
        ds = open_sweep(store / name)
        spec = SweepSpec.from_dict(json.loads(ds.attrs["symattn_sweep_spec"]))
        gam = spec.gamma
        for idx, pt in spec.points():
            layer = spec.layer(pt)
            if layer.p is None:
                feats = layer.features(geometry=spec.geometry(pt))
            else:
                feats = layer.features(mu=spec.signal(pt))
            n = spec.n_of(pt)
            sel = tuple(idx)
            law = spec.tokens(pt)   # a block under a token law: its cells are the 'temporal' engine's (§15.5)
            call = {"layer": layer.to_dict(), "c": float(pt["c"]), "n": int(n), "mu": pt["mu"], "snr": float(pt["snr"]),
                    "geometry": spec.geometry(pt).as_dict() if layer.p is None else None,
                    "correction": None if spec.values["correction"] == "none" else spec.values["correction"]}
            if law is not None:
                call["tokens"] = law.as_dict()
            call = json.dumps(call, sort_keys=True)
            th = np.asarray(ds["theory_attention"].values[sel], dtype=float)
            mc = np.asarray(ds["E_attention_mean"].values[sel], dtype=float)
            se = np.asarray(ds["E_attention_se"].values[sel], dtype=float)
            draws = int(ds["draws_done"].values[sel])
            for j, g in enumerate(gam):
                if not (np.isfinite(th[j]) and np.isfinite(mc[j]) and np.isfinite(se[j]) and mc[j] > 0):
                    continue
                rows.append({
                    "block": name, "layer": layer.label,
                    "engine": "temporal" if law is not None else str(ds["engine"].values[sel]) + (
                        "" if spec.values["correction"] == "none" else "/" + spec.values["correction"]),
                    "activation": layer.activation_name or "none", "c": float(pt["c"]), "gamma": float(g),
                    "n": int(n), "p": int(layer.p or round(float(pt["c"]) * n)), "tile": int(pt.get("tile", 1)),
                    "mu": pt["mu"] if layer.p is not None else ("zero" if feats["snr"] == 0 else "geometry"),
                    "snr": feats["snr"], "align": feats["align"], "log_reff": feats["log_reff"],
                    "theory": float(th[j]), "mc": float(mc[j]), "se": float(se[j]), "draws": draws,
                    "gap": float((mc[j] - th[j]) / th[j]), "z": float((mc[j] - th[j]) / se[j]) if se[j] > 0 else 0.0,
                    "within": within_tolerance(th[j], mc[j], se[j]), "call": call, "error": "train"})
    return rows


def grid_cells(path, block: str, *, geometries=None, asymptotic: bool = False, workers=None) -> list:
    r"""Atlas cells of the test error from a grid of the paper's model (the CSV of
    :mod:`symattn.verification.generalization`: activation, c, snr, gamma, n, draws, error, mc, se[, case]).

    Each test row becomes a cell with ``error='test'`` whose theory is that of the current code
    (:func:`symattn.verification.atlas.theory_of_call` replays its ``call``), so ``symattn verify --atlas`` checks
    it like any other. With ``asymptotic`` the call has ``"n": null``: the cell measures the asymptotic theory
    against the same Monte Carlo, and answers the question asked without n (:func:`symattn.accuracy.assess`).

    Parameters
    ----------
    path : str or pathlib.Path
        The grid CSV.
    block : str
        The block name of the cells.
    geometries : callable, optional
        ``row -> Geometry`` (the row as read, strings); default: μ = 0 at snr 0, else aligned at ‖μ‖² = snr.
    asymptotic : bool
        Cells of the asymptotic theory.
    workers : int, optional
        As :func:`refresh_table` (1: in this process).

    Returns
    -------
    list of dict
        Rows with the keys :data:`symattn.accuracy.COLUMNS`.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "grid.csv").write_text("activation,c,snr,gamma,n,draws,error,mc,se\n"
    ...                                      "tanh,0.5,0.0,1.0,1000,16,test,1.12,0.005\n")
    >>> rows = grid_cells(folder / "grid.csv", "mine", workers=1)
    >>> [(r["block"], r["error"], r["within"]) for r in rows]      # the theory at n = 1000 is 1.1205
    [('mine', 'test', True)]
    """
    from ..activations.activation import activation
    from ..layer import Layer
    from ..model import Geometry

    def geometry(row):
        snr = float(row["snr"])
        return Geometry() if snr == 0 else Geometry.aligned(snr)

    geometry = geometries or geometry
    with open(path, newline="", encoding="utf-8") as fh:
        src = [r for r in csv.DictReader(fh) if r["error"] == "test"]
    groups = {}
    for r in src:
        f = r["activation"]
        layer = Layer(f, diagonal="zero" if activation(f).superlinear else "f")
        geo = geometry(r)
        call = json.dumps({"layer": layer.to_dict(), "c": float(r["c"]), "n": None if asymptotic else int(r["n"]),
                           "mu": "zero" if geo.gram[0, 0] == 0 else "geometry", "snr": float(geo.gram[0, 0]),
                           "geometry": geo.as_dict(), "correction": None, "error": "test"}, sort_keys=True)
        groups.setdefault(call, (layer, geo, []))[2].append(r)
    theory = _replay([((block, call), [float(r["gamma"]) for r in rs]) for call, (_, _, rs) in groups.items()], workers)
    rows = []
    for call, (layer, geo, rs) in groups.items():
        E, _ = theory[(block, call)]
        if E is None:   # weights not installed (a real layer's call)
            continue
        feats = layer.features(geometry=geo)
        rows += _test_rows(block, "paper", layer, "zero" if feats["snr"] == 0 else "geometry", feats, call, rs, E,
                           "mc", "se")
    return rows


def _test_rows(block, engine, layer, mu, feats, call, rs, E, mc_key, se_key) -> list:
    """The test-error cells of one replayed call: the grid rows ``rs`` (strings, with c, gamma, n, draws and
    the Monte Carlo in ``mc_key``, ``se_key``) beside the theory E; cells whose theory is not finite and positive
    are left out."""
    rows = []
    for r, e in zip(rs, E):
        # as the table stores them, so that gap and z agree with its columns
        mc, se, e, n = (float(f"{float(v):.10g}") for v in (r[mc_key], r[se_key], e, r["n"]))
        n = int(n)
        if not (np.isfinite(e) and e > 0):
            continue
        rows.append({"block": block, "engine": engine, "layer": layer.label, "activation": layer.activation_name,
                     "c": float(r["c"]), "gamma": float(r["gamma"]), "n": n,
                     "p": int(layer.p or round(float(r["c"]) * n)), "tile": 1, "mu": mu, "snr": feats["snr"],
                     "align": feats["align"], "log_reff": feats["log_reff"], "theory": e, "mc": mc, "se": se,
                     "draws": int(r["draws"]), "gap": (mc - e) / e, "z": (mc - e) / se if se > 0 else 0.0,
                     "within": within_tolerance(e, mc, se), "call": call, "error": "test"})
    return rows


def real_test_cells(path, block: str, *, workers=None) -> list:
    r"""Atlas cells of the test error of layers with real weights, from a grid CSV of
    ``benchmarks/test_error_minilm.py`` (weights, f, c, mu, n, gamma, test_mc, test_se, draws[, snr]).

    Each row becomes a cell with ``error='test'`` in the format of the atlas' real-layer training cells: the
    engine of :meth:`symattn.Layer.engine`, the layer's label, its features :meth:`symattn.Layer.features` at
    the signal μ = ``Layer.signal(mu, snr)`` (snr 1 where the row gives none, μ = 0 for ``mu = 'zero'``), and a
    ``call`` at the Monte Carlo's n that :func:`symattn.verification.atlas.theory_of_call` replays. The theory is
    that of the current code (the replay), not the CSV's column, so ``symattn verify --atlas`` checks it like any
    other cell; :meth:`symattn.Layer.theory` with ``error='test'`` asks :func:`symattn.accuracy.assess` with the
    same features and n = p/c, so it finds these cells.

    Parameters
    ----------
    path : str or pathlib.Path
        The grid CSV (``weights`` a ``minilm:L[:H]`` reference or a ``.npy`` file).
    block : str
        The block name of the cells.
    workers : int, optional
        As :func:`refresh_table` (1: in this process).

    Returns
    -------
    list of dict
        Rows with the keys :data:`symattn.accuracy.COLUMNS`; the rows of weights that are not installed (the
        ``[real]`` extra) are left out.

    Examples
    --------
    >>> import contextlib, pathlib, tempfile, numpy as np
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> np.save(folder / "W.npy", np.eye(16) + np.ones((16, 16)) / 16)
    >>> _ = (folder / "grid.csv").write_text("weights,f,c,mu,n,gamma,test_mc,test_se,draws\n"
    ...                                      "W.npy,tanh,0.5,zero,32,1.0,1.5,0.01,8\n")
    >>> with contextlib.chdir(folder):    # a recorded .npy reference is read inside the working folder
    ...     [row] = real_test_cells("grid.csv", "mine", workers=1)
    >>> row["engine"], row["error"], row["p"], round(row["theory"], 4)
    ('general-w', 'test', 16, 1.1628)
    """
    from ..errors import RealWeightsUnavailable
    from ..layer import Layer

    with open(path, newline="", encoding="utf-8") as fh:
        src = list(csv.DictReader(fh))
    groups, layers = {}, {}
    for r in src:
        try:
            layer = layers.get((r["f"], r["weights"])) or Layer(r["f"], weights=r["weights"])
        except RealWeightsUnavailable:
            continue
        layers[r["f"], r["weights"]] = layer
        mu, snr = r["mu"], r.get("snr") or ""
        snr = 0.0 if mu == "zero" else float(snr) if snr else 1.0
        call = json.dumps({"layer": layer.to_dict(), "c": float(r["c"]), "n": int(r["n"]), "mu": mu, "snr": snr,
                           "geometry": None, "correction": None, "error": "test"}, sort_keys=True)
        groups.setdefault(call, (layer, mu, snr, []))[3].append(r)
    theory = _replay([((block, call), [float(r["gamma"]) for r in g[3]]) for call, g in groups.items()], workers)
    rows = []
    for call, (layer, mu, snr, rs) in groups.items():
        E, _ = theory[(block, call)]
        if E is None:   # weights not installed
            continue
        feats = layer.features(mu=layer.signal(mu, snr if mu != "zero" else None))
        rows += _test_rows(block, layer.engine(), layer, mu, feats, call, rs, E, "test_mc", "test_se")
    return rows


def paper_test_cells(docs="docs", workers=None) -> list:
    """The test-error cells of the paper's model in the shipped atlas: the grids of
    :data:`symattn.verification.generalization.ATLAS_GRIDS` (CSVs under ``docs``), each twice, with the theory at
    the Monte Carlo's n (block as named) and the asymptotic theory (block + '-asymptotic') (:func:`grid_cells`).

    ``merge_cells(paper_test_cells(), "symattn/data/atlas.csv")`` writes them into the shipped table (about two
    minutes on two cores).

    Examples
    --------
    >>> from symattn.verification.generalization import ATLAS_GRIDS
    >>> ATLAS_GRIDS[0]
    ('paper-test', 'generalization_mc.csv')
    """
    from ..verification.generalization import ATLAS_GRIDS, grid_geometry

    rows = []
    for block, name in ATLAS_GRIDS:
        for asymptotic in (False, True):
            rows += grid_cells(Path(docs) / name, block + ("-asymptotic" if asymptotic else ""),
                               geometries=grid_geometry, asymptotic=asymptotic, workers=workers)
    return rows


def merge_cells(cells, table=None, out=None) -> dict:
    """Put cells into an atlas table: every row of their blocks is replaced by them, the other rows are kept.

    ``cells`` is a list of rows (:func:`grid_cells`) or a CSV with the columns :data:`symattn.accuracy.COLUMNS`
    (the test error of real layers, say, measured elsewhere: a row without ``error`` is of the training error).

    Returns
    -------
    dict
        ``blocks`` (per block: cells, within), ``cells`` (of the table), ``table`` (the path written).

    Examples
    --------
    >>> import pathlib, tempfile
    >>> table = pathlib.Path(tempfile.mkdtemp()) / "atlas.csv"
    >>> cell = dict(block="mine", engine="paper", layer="W = I", activation="tanh", c=0.5, gamma=1.0, n=1000, p=500,
    ...             tile=1, mu="zero", snr=0.0, align=0.0, log_reff=0.0, theory=1.12, mc=1.13, se=0.005, draws=16,
    ...             gap=0.01 / 1.12, z=2.0, within=True, call="{}", error="test")
    >>> merge_cells([cell], table)["blocks"]
    {'mine': {'cells': 1, 'within': 1}}
    """
    from ..accuracy import ATLAS_PATH, load_atlas

    table = Path(ATLAS_PATH if table is None else table)
    if not isinstance(cells, (list, tuple)):
        cells = [dict(r) for r in load_atlas.__wrapped__(cells)]
    if not cells:
        raise ParameterError("cells", "[]", "one or more atlas cells")
    missing = sorted(set(COLUMNS) - {"error"} - set(cells[0]))
    if missing:
        raise ParameterError("cells", ", ".join(missing), "rows with the atlas columns (symattn.accuracy.COLUMNS)")
    blocks = {r["block"] for r in cells}
    kept = [dict(r) for r in load_atlas.__wrapped__(table) if r["block"] not in blocks]
    new = [dict(r, error=r.get("error") or "train") for r in cells]
    path = write_table(kept + new, table if out is None else out)
    summary = {}
    for r in new:
        b = summary.setdefault(r["block"], {"cells": 0, "within": 0})
        b["cells"] += 1
        b["within"] += bool(r["within"])
    return {"blocks": summary, "cells": len(kept) + len(new), "table": str(path)}


def write_table(rows, path) -> Path:
    """Write the atlas table as CSV (the columns :data:`symattn.accuracy.COLUMNS`; numbers to 10 digits)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{r[k]:.10g}" if isinstance(r[k], float) else r[k]) for k in COLUMNS})
    return path


def n_law(rows) -> list:
    """The gap of each cell at every n it was measured at: rows that differ only in ``n`` (and ``tile``, ``p``).

    Returns a list of dicts with the cell's keys, ``n`` (list) and ``gap`` (list), for cells with two or more n.

    Examples
    --------
    >>> r = dict(block="b", engine="paper", layer="W = I", activation="tanh", c=1.0, gamma=0.1, mu="zero",
    ...          snr=0.0, theory=0.5, se=0.001, within=True)
    >>> n_law([dict(r, n=250, mc=0.48, gap=0.04), dict(r, n=1000, mc=0.495, gap=0.01)])[0]["gap"]
    [0.04, 0.01]
    """
    groups = {}
    for r in rows:
        key = tuple(r[k] for k in ("block", "engine", "layer", "activation", "c", "gamma", "mu", "snr")
                    if k != "layer") + (r["layer"].split("⊗")[0],)
        groups.setdefault(key, []).append(r)
    out = []
    for key, rs in groups.items():
        if len({r["n"] for r in rs}) < 2:
            continue
        rs = sorted(rs, key=lambda r: r["n"])
        first = rs[0]
        out.append({**{k: first[k] for k in ("block", "engine", "activation", "c", "gamma", "mu", "snr")},
                    "layer": first["layer"].split("⊗")[0], "n": [r["n"] for r in rs], "gap": [r["gap"] for r in rs]})
    return out


def summary_table(rows) -> list:
    """Per block and engine: cells, the fraction within tolerance, the largest |gap| and where it is."""
    out = {}
    for r in rows:
        key = (r["block"], r["engine"])
        s = out.setdefault(key, {"block": r["block"], "engine": r["engine"], "cells": 0, "within": 0,
                                 "max_gap": 0.0, "at": ""})
        s["cells"] += 1
        s["within"] += bool(r["within"])
        if abs(r["gap"]) > abs(s["max_gap"]):
            s["max_gap"] = r["gap"]
            s["at"] = f"{r['layer']}, {r['activation']}, c={r['c']:g}, γ={r['gamma']:g}, μ={r['mu']}"
    return list(out.values())
