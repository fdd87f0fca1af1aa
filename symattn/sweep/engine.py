r"""The sweep engine: tasks (point, draw) run serially or on dask.distributed, each stored as it finishes.

A task is one (point, draw), a point being one value of every swept key except γ: every γ of a
draw comes from one eigendecomposition (or tridiagonalisation) of the draw's M, so splitting γ
into tasks would repeat the O(n³) work for nothing. A task's seed is derived from the spec's
seed and the point's parameters (:meth:`SweepSpec.entropy`), so the stored numbers do not depend
on the engine, on the number of workers or on the order in which tasks finish -- at fixed BLAS
threads, which the engine sets itself:

- on a cluster (embedded ``LocalCluster`` or ``--scheduler``) every task runs with one BLAS /
  OpenMP thread (threadpoolctl, and ``torch.set_num_threads(1)`` for the torch backend): the
  tasks already fill the cores, more threads would only oversubscribe them;
- serially, :func:`symattn.threads.auto_threads` decides (one thread below n = 800, else the
  idle cores: all of them for one large draw on an idle machine, one on a busy one). Stores made
  serially at n >= 800 with more than one thread may differ from cluster ones in the last bits.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
import time
import warnings

import numpy as np

from ..cluster import dask_client
from ..errors import ParameterError
from ..validation import known_keywords
from .spec import SweepSpec, load_spec
from .store import (THEORY, Writer, remove_stale_temporaries, check_layers, check_store, create_store, done_mask,
                    extend_store, old_index, open_store, rebuild_root, store_lock, task_status, terminate_cleanly)

__all__ = ["sweep", "open_sweep", "run_task", "point_theory", "theory_arrays", "agreement"]


# ----------------------------------------------------------------------------- threads
def task_threads(threads, n: int, backend: str):
    """BLAS/OpenMP threads of one task: ``threads`` exactly (numpy's BLAS and torch), or None for the
    choice of :func:`symattn.threads.auto_threads` (made inside :func:`symattn.simulate`)."""
    from ..threads import limit_threads

    if threads is None:
        return contextlib.nullcontext()
    return limit_threads(int(threads), torch=backend == "torch" or None)


# ----------------------------------------------------------------------------- one task
def run_task(task: dict, threads=None):
    r"""Run one task (point, draw): draw k of ``Layer.simulate(..., seed=SeedSequence(entropy))``.

    Parameters
    ----------
    task : dict
        ``index``, ``point`` (every swept key), ``draw`` k, ``entropy`` (what :meth:`SweepSpec.tasks`
        gives), ``gamma``, ``aligned`` and ``backend``.
    threads : int or None
        BLAS/OpenMP threads (None: :func:`symattn.threads.auto_threads`).

    Returns
    -------
    tuple
        ``(index, {"E_attention": array, "E_linear": array}, seconds)``.

    Examples
    --------
    >>> from symattn.sweep import SweepSpec
    >>> s = SweepSpec.from_dict({"n": 40, "draws": 1, "gamma": [1.0]})
    >>> t = dict(s.tasks()[0], gamma=s.gamma, aligned=False, backend="numpy")
    >>> idx, vals, _ = run_task(t, threads=1)
    >>> idx, sorted(vals), 0 < float(vals["E_attention"][0]) < 1
    ((0,), ['E_attention', 'E_linear'], True)
    """
    from ..montecarlo import draw_seed

    t0 = time.perf_counter()
    spec = SweepSpec(values={"aligned": bool(task.get("aligned"))}, dims=())
    pt = task["point"]
    layer = spec.layer(pt)
    seed = draw_seed(task["entropy"], task["draw"])
    backend = task.get("backend", "numpy")
    n = spec.n_of(pt)
    with task_threads(threads, n, backend):
        res = layer.simulate(n, float(pt["c"]), task["gamma"], mu=spec.signal(pt), geometry=spec.geometry(pt),
                             draws=1, seed=seed, backend=backend, progress=False, tokens=spec.tokens(pt))
    return (tuple(task["index"]), {"E_attention": res.attention[0], "E_linear": res.linear[0]},
            time.perf_counter() - t0)


# ----------------------------------------------------------------------------- theory
def point_theory(spec: SweepSpec, point: dict, threads=None) -> tuple:
    """The theory of one point: ``(E_attention, E_linear, warnings)``, E over the spec's γ
    (:meth:`symattn.Layer.theory`, model 'both', errors 'nan', the point's n and the spec's correction);
    ``warnings``: the messages of its FiniteSizeWarnings. A task of the cluster, like :func:`run_task`."""
    from ..errors import FiniteSizeWarning

    layer = spec.layer(point)
    n = spec.n_of(point)
    kw = dict(geometry=spec.geometry(point)) if layer.p is None else dict(mu=spec.signal(point))
    if spec.values["correction"] != "none":
        kw["correction"] = spec.values["correction"]
    law = spec.tokens(point)
    if law is not None:
        return _token_theory(layer, point, spec.gamma, n, law, kw) + ([],)
    with task_threads(threads, n, "numpy"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = layer.theory(float(point["c"]), np.asarray(spec.gamma, dtype=float), n=n, model="both", errors="nan",
                         **kw)
    said = [str(w.message) for w in caught if issubclass(w.category, FiniteSizeWarning)]
    return np.asarray(r.attention, dtype=float), np.asarray(r.linear, dtype=float), said


def _token_theory(layer, point, gamma, n, law, kw) -> tuple:
    """(E_attention, E_linear) of a point under a token law (docs/theory.md §15): ridge regression on X always
    (:func:`symattn.temporal.linear_errors`); attention (§15.5) for the paper's layer, per γ, NaN where its solve
    fails or where it is not derived (a layer with weights, heads, residual or softmax)."""
    from ..errors import ConvergenceError

    g = np.asarray(gamma, dtype=float)
    c = float(point["c"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the AccuracyWarning is the atlas' business, not the store's
        lin = np.asarray(layer.theory(c, g, n=n, model="linear", tokens=law, **kw).linear, dtype=float)
        att = np.full(g.shape, np.nan)
        if layer.engine() == "paper":
            for j, gj in enumerate(g):
                with contextlib.suppress(ConvergenceError):
                    att[j] = float(layer.theory(c, gj, n=n, model="attention", tokens=law, **kw).attention)
    return att, lin


def theory_arrays(spec: SweepSpec, known=None, client=None) -> dict:
    """The deterministic equivalents of every point, and what each point used.

    :func:`point_theory` of every point (on the cluster of ``client`` when given, one task a point),
    shape ``spec.shape + (len(gamma),)``: ``theory_attention``, ``theory_linear``; per point (shape
    ``spec.shape``): ``t`` (the finite-p signal strength of the paper's geometry, NaN for a layer with
    weights), ``strong_signal`` (``|t| > 0.15`` with the asymptotic theory: it is biased there,
    docs/theory.md §10.1; the :class:`~symattn.errors.FiniteSizeWarning` is issued once per message),
    ``engine``, ``layer`` (the layer's :meth:`~symattn.Layer.to_dict` as JSON) and ``layer_digest``.

    ``known``: ``{"index": function(point) -> old grid index or None, "gamma": old γ index per γ, "ds":
    the old dataset}``; the theory of a point found there with every γ is copied, not solved again.
    """
    from ..model import STRONG_SIGNAL_T, signal_strength

    G = len(spec.gamma)
    out = {name: np.full(spec.shape + (G,), np.nan) for name in THEORY}
    out.update(t=np.full(spec.shape, np.nan), strong_signal=np.zeros(spec.shape, dtype=bool),
               engine=np.full(spec.shape, "", dtype=object), layer=np.full(spec.shape, "", dtype=object),
               layer_digest=np.full(spec.shape, "", dtype=object))
    correction = None if spec.values["correction"] == "none" else spec.values["correction"]
    todo = []
    for idx, pt in spec.points():
        layer = spec.layer(pt)
        old = None if known is None else known["index"](pt)
        if old is not None and all(g is not None for g in known["gamma"]):
            for name in THEORY:
                out[name][idx] = np.asarray(known["ds"][name].values[old])[list(known["gamma"])]
        else:
            todo.append((idx, pt))
        if layer.p is None:
            t = float(signal_strength(spec.geometry(pt), spec.n_of(pt), float(pt["c"])))
            out["t"][idx] = t
            out["strong_signal"][idx] = abs(t) > STRONG_SIGNAL_T and correction is None
        out["engine"][idx] = layer.engine()
        out["layer"][idx] = json.dumps(layer.to_dict(), sort_keys=True)
        out["layer_digest"][idx] = layer.digest
    if client is None:
        results = [point_theory(spec, pt) for _, pt in todo]
    else:   # one task a point, one BLAS thread each; the results in the order of todo
        futures = [client.submit(point_theory, spec, pt, 1, pure=False) for _, pt in todo]
        results = client.gather(futures)
    said = []
    for (idx, _), (att, lin, msgs) in zip(todo, results):
        out["theory_attention"][idx], out["theory_linear"][idx] = att, lin
        said += [m for m in msgs if m not in said]
    from ..errors import FiniteSizeWarning

    for m in said:   # the finite-size warning is the user's to judge: once per message
        warnings.warn(FiniteSizeWarning(m), stacklevel=3)
    return out


def agreement(ds) -> dict:
    """Theory vs Monte Carlo over the stored cells: per model ``cells``, ``max_abs_z``, ``within_3se``
    (fraction of cells with |mean − theory| <= 3 se) and ``max_rel_gap`` = max |mean − theory|/theory."""
    out = {}
    for model in ("attention", "linear"):
        m, s, t = (np.asarray(ds[k], dtype=float) for k in (f"E_{model}_mean", f"E_{model}_se", f"theory_{model}"))
        ok = np.isfinite(m) & np.isfinite(s) & np.isfinite(t) & (s > 0)
        if not ok.any():
            out[model] = {"cells": 0, "max_abs_z": None, "within_3se": None, "max_rel_gap": None}
            continue
        z = np.abs(m[ok] - t[ok]) / s[ok]
        rel = np.abs(m[ok] - t[ok]) / np.abs(t[ok])
        out[model] = {"cells": int(ok.sum()), "max_abs_z": float(z.max()), "within_3se": float((z <= 3).mean()),
                      "max_rel_gap": float(rel.max())}
    return out


# ----------------------------------------------------------------------------- engines
def _show(progress, total):
    if progress is None:
        try:
            return total > 1 and sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False
    return bool(progress)


def _serial(tasks, writer, bar, threads):
    for t in tasks:
        idx, vals, _ = run_task(t, threads)
        writer.write(idx, vals)
        bar.update(1)
    return 1


def _dask(client, tasks, writer, bar, key_prefix):
    from dask.distributed import as_completed

    nworkers = len(client.scheduler_info().get("workers", {}))
    futures = [client.submit(run_task, t, 1, key=f"{key_prefix}-{'-'.join(map(str, t['index']))}", pure=False)
               for t in tasks]
    try:
        for fut in as_completed(futures):
            idx, vals, _ = fut.result()
            writer.write(idx, vals)
            bar.update(1)
            fut.release()
    except BaseException:
        client.cancel(futures)
        raise
    return nworkers


@known_keywords
def sweep(spec, store, *, scheduler=None, workers=None, progress=None, threads=None) -> dict:
    r"""Run (or resume) a sweep: every missing task (point, draw) of ``spec``, stored in ``store`` as it finishes.

    One sweep writes a store at a time: a second one waits for the first one's lock (a few seconds), then
    refuses (:func:`~symattn.sweep.store.store_lock`); results of two specs are never mixed.

    Each task is one exact Monte Carlo draw (:func:`symattn.simulate`, docs/theory.md §2) of
    E_A(γ) = γ² ŷᵀ(M+γ)^{-2}ŷ and E_LR(γ) for every γ of the spec; the deterministic
    equivalents (:func:`symattn.solve`) are stored with them. Tasks already in the store are
    reused, never recomputed -- also when the spec extends the one that made the store (more draws,
    supersets of swept lists: :meth:`SweepSpec.extension_of`); a store of any other spec is refused.

    Parameters
    ----------
    spec : str, pathlib.Path, dict or SweepSpec
        The spec (:func:`symattn.sweep.load_spec`): a TOML file, TOML text or a dict.
    store : str or pathlib.Path
        The store folder (zarr; created when missing or empty).
    scheduler : None, 'serial' or str
        None: an embedded ``LocalCluster`` with ``workers`` single-threaded worker processes
        (default: one per core); 'serial': in this process, no dask; else the address of a
        running dask scheduler (``tcp://HOST:PORT``), whose workers must import symattn.
    workers : int or None
        Embedded cluster: its number of workers. External scheduler: wait for this many workers.
    progress : None, bool
        A tqdm bar with ETA on stderr (None: when stderr is a terminal).
    threads : int or None
        BLAS threads of a serial task (None: :func:`symattn.threads.auto_threads`); cluster
        tasks always use one.

    Returns
    -------
    dict
        ``tasks``, ``computed``, ``reused`` (tasks kept from the store), ``corrupted`` (stored tasks whose
        chunks failed their checksum, computed again), ``rebuilt_root`` (the root metadata was rebuilt,
        :func:`~symattn.sweep.store.rebuild_root`), ``store``, ``points`` (grid
        points × γ), ``grid_points``, ``draws``, ``gamma``, ``engine``, ``workers``, ``extended`` (the keys
        in which the spec extended the stored one), ``strong_signal`` (grid points with |t| > 0.15 and
        the asymptotic theory), ``seconds``, ``agreement``
        (:func:`agreement`) and ``provenance``.

    Examples
    --------
    >>> import tempfile, symattn as sa
    >>> d = tempfile.mkdtemp() + "/store"
    >>> s = sa.sweep({"c": [0.5, 1.0], "gamma": [1.0], "n": 40, "draws": 2}, store=d, scheduler="serial")
    >>> s["tasks"], s["computed"], s["reused"]
    (4, 4, 0)
    >>> sa.sweep({"c": [0.5, 1.0], "gamma": [1.0], "n": 40, "draws": 2}, store=d, scheduler="serial")["reused"]
    4
    """
    from tqdm.auto import tqdm

    from ..provenance import provenance

    spec = load_spec(spec)
    if workers is not None:
        from ..validation import check_int

        workers = check_int("workers", workers, 1, 4096)
    if threads is not None:
        from ..validation import check_int

        threads = check_int("threads", threads, 1, 4096)
    if scheduler is not None and not isinstance(scheduler, str):
        raise ParameterError("scheduler", scheduler, "None, 'serial' or a scheduler address tcp://HOST:PORT")
    prov = provenance(spec.canonical(), seed=int(spec.values["seed"]), backend=spec.values["backend"],
                      dtype="float64")
    t0 = time.perf_counter()
    from pathlib import Path

    engine = "serial" if scheduler == "serial" else ("local-cluster" if scheduler is None else "scheduler")
    extra = {"gamma": spec.gamma, "aligned": bool(spec.values["aligned"]), "backend": spec.values["backend"]}
    extended, nworkers, corrupted = [], 0, 0
    with contextlib.ExitStack() as stack:
        # one writer at a time (the lock), its temporaries removed on SIGTERM and after a kill -9
        stack.enter_context(terminate_cleanly())
        stack.enter_context(store_lock(store))
        remove_stale_temporaries(Path(store))
        rebuilt = Path(store).is_dir() and rebuild_root(store)
        status = check_store(store, spec)
        all_tasks = spec.tasks()
        if status == "same":
            check_layers(store, spec)
            done, bad = task_status(store, spec)
            corrupted = int(bad.sum())
        else:
            done = np.zeros(spec.shape + (spec.draws,), dtype=bool)
        # a cluster first (a wrong address fails before any work), only when there is work to do
        need = status != "same" or not done.all()
        client = stack.enter_context(dask_client(scheduler, workers)) if need and engine != "serial" else None
        if isinstance(status, dict):  # a store of a spec that this one extends: keep what it holds
            from .spec import SweepSpec

            extended = spec.extension_of(status)
            old_spec = SweepSpec.from_dict(status)
            check_layers(store, old_spec)   # the stored tasks are of the layers the old points name now
            index, g_idx = old_index(old_spec, spec)
            known = {"index": index, "gamma": g_idx, "ds": open_store(store)}
            extend_store(store, status, spec, theory_arrays(spec, known, client), provenance=prov)
        elif status is None:
            create_store(store, spec, theory_arrays(spec, client=client), provenance=prov)
        if status != "same":
            done = done_mask(store, spec)
        missing = [dict(t, **extra) for t in all_tasks if not done[t["index"]]]
        if corrupted:
            warnings.warn(f"{corrupted} stored task(s) of {store} failed their checksum: computed again",
                          RuntimeWarning, stacklevel=2)
        writer = Writer(store, spec.fingerprint)
        with tqdm(total=len(missing), desc="sweep", unit="task", file=sys.stderr, leave=False,
                  disable=not _show(progress, len(missing))) as bar:
            if missing:
                if client is None:
                    nworkers = _serial(missing, writer, bar, threads)
                else:
                    nworkers = _dask(client, missing, writer, bar, "symattn-sweep-" + spec.fingerprint[:16])
    ds = open_store(store)
    return {"tasks": len(all_tasks), "computed": len(missing), "reused": len(all_tasks) - len(missing),
            "store": str(store), "points": int(math.prod(spec.shape)) * len(spec.gamma),
            "grid_points": int(math.prod(spec.shape)), "draws": spec.draws, "gamma": spec.gamma,
            "dims": list(spec.dims), "engine": engine, "workers": nworkers, "extended": extended,
            "corrupted": corrupted, "rebuilt_root": bool(rebuilt),
            "strong_signal": int(np.sum(ds["strong_signal"].values)) if "strong_signal" in ds else None,
            "seconds": time.perf_counter() - t0, "agreement": agreement(ds), "provenance": prov}


@known_keywords
def open_sweep(store):
    """The results of a sweep as an :class:`xarray.Dataset` (loaded into memory).

    One dimension per swept key, ``draw`` and ``gamma``. Variables: ``E_attention`` and
    ``E_linear`` per draw (NaN where not computed yet), ``E_attention_mean``/``_se`` and
    ``E_linear_mean``/``_se`` (mean over the stored draws and std(ddof=1)/√draws),
    ``theory_attention``/``theory_linear`` (:func:`symattn.solve`), ``done`` and ``draws_done``.
    The store itself is a zarr group: ``xarray.open_zarr(store)`` reads it without symattn.

    Parameters
    ----------
    store : str or pathlib.Path
        The store folder of :func:`sweep`.

    Returns
    -------
    xarray.Dataset
        The stored results with the mean and standard error over draws added.

    Raises
    ------
    ParameterError
        ``store`` when the folder is not the store of a sweep.

    Examples
    --------
    >>> import tempfile, symattn as sa
    >>> d = tempfile.mkdtemp() + "/store"
    >>> _ = sa.sweep({"c": [0.5, 1.0], "gamma": [0.1, 1.0], "n": 40, "draws": 2}, store=d, scheduler="serial")
    >>> ds = sa.open_sweep(d)
    >>> dict(ds.E_attention.sizes), bool(ds.done.all())
    ({'c': 2, 'draw': 2, 'gamma': 2}, True)
    """
    return open_store(store)
