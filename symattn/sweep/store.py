r"""The persistent result store of a sweep: one zarr group, readable with xarray alone.

Layout (a zarr group written by :meth:`xarray.Dataset.to_zarr`, metadata consolidated):

- ``E_attention``, ``E_linear``: dims ``(*spec.dims, "draw", "gamma")``, float64, NaN until the
  task (point, draw) has run; chunked one task per chunk, so that every task writes its own
  chunk files and nothing else;
- ``theory_attention``, ``theory_linear``: dims ``(*spec.dims, "gamma")``, the deterministic
  equivalent (:func:`symattn.solve` with the point's n; NaN where it failed), written when the
  store is created;
- coordinates: one per grid dimension, ``draw`` (0..draws-1) and ``gamma``; the unswept keys
  are scalar coordinates;
- attributes: ``symattn_sweep_spec`` (the canonical spec as JSON), ``symattn_sweep_fingerprint``
  (its sha256) and ``symattn_sweep_provenance``.

The store is created whole in a temporary folder and renamed into place; after that only
chunks are written, each atomically (zarr's local store writes a temporary file and renames it).
A task is *done* when the chunks of both models exist, pass their checksum and hold finite values
at every γ; a ``kill -9`` can lose at most the tasks whose chunks were being written, and those are
simply computed again.

Nothing mixed, nothing silently wrong:

- *one writer*: a sweep holds an advisory lock (``fcntl.flock`` on ``.<store>.lock`` beside the
  store) from its first look at the store to its last write; a second sweep waits up to
  :data:`LOCK_WAIT_SECONDS`, then refuses with a one-line message. Each write first checks that the
  folder is still the one opened and still holds the same spec (its fingerprint);
- *checksums*: every chunk of ``E_attention`` and ``E_linear`` ends with a CRC-32C (zarr v3's
  ``crc32c`` codec); a chunk that fails it is *corrupted*: its task is computed again and counted
  in the sweep's ``corrupted``. A value is never taken from a missing chunk (whatever the metadata's
  ``fill_value`` says);
- *rebuildable root*: the root attributes are also written to ``symattn_root.json``; a root
  ``zarr.json`` that cannot be read is rebuilt from it and from the arrays' own metadata.

Reading it without symattn::

    import xarray as xr
    ds = xr.open_zarr("DIR")                       # E_attention, E_linear, theory_*
    mean = ds.E_attention.mean("draw")
    se = ds.E_attention.std("draw", ddof=1) / ds.sizes["draw"] ** 0.5
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..errors import ParameterError

__all__ = ["create_store", "check_store", "check_layers", "extend_store", "old_index", "done_mask", "task_status",
           "write_task", "open_store", "store_lock", "terminate_cleanly", "rebuild_root", "remove_stale_temporaries", "VARIABLES", "THEORY",
           "POINT_VARIABLES", "LOCK_WAIT_SECONDS"]

VARIABLES = ("E_attention", "E_linear")
THEORY = ("theory_attention", "theory_linear")
_SPEC_ATTR = "symattn_sweep_spec"
_FP_ATTR = "symattn_sweep_fingerprint"
#: the copy of the root attributes, from which a damaged root ``zarr.json`` is rebuilt
ROOT_RECORD = "symattn_root.json"
#: how long a sweep waits for another sweep's lock on the same store before it refuses
LOCK_WAIT_SECONDS = 10.0


def _need():
    import importlib

    try:
        for name in ("xarray", "zarr"):
            importlib.import_module(name)
    except ImportError as exc:
        raise ParameterError("store", "(zarr/xarray missing)", "an installed [dask] extra",
                             hint=f"pip install 'symattn[dask]' ({exc})") from None


def _lock_path(path: Path) -> Path:
    return path.parent / f".{path.name}.lock"


@contextlib.contextmanager
def store_lock(path, wait: float = LOCK_WAIT_SECONDS):
    """Hold the advisory lock of the store ``path`` (``fcntl.flock`` of ``.<name>.lock`` beside it).

    The lock file lies beside the store, so that it survives the store's replacement by an extension;
    the kernel releases the lock when its process dies (``kill -9`` included).

    Raises
    ------
    ParameterError
        ``store``, when another process holds the lock after ``wait`` seconds (its pid is named).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()) / "store"
    >>> with store_lock(d):
    ...     with store_lock(d, wait=0):
    ...         pass
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid store=...: allowed a store that no other sweep is writing...
    """
    import fcntl

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(_lock_path(path), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as exc:
        raise ParameterError("store", str(path), "a folder that can be created and written to",
                             hint=exc.strerror or str(exc)) from None
    try:
        deadline = time.monotonic() + max(0.0, float(wait))
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                    raise ParameterError("store", str(path), "a store that no other sweep is writing",
                                         hint=f"process {owner} is running a sweep on it (waited {wait:g} s): "
                                              "run again when it has finished, or use another --store") from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)   # releases the lock


@contextlib.contextmanager
def terminate_cleanly():
    """In the main thread, turn SIGTERM into KeyboardInterrupt for the block, so that the clean-ups of
    ``finally`` and ``except BaseException`` run (temporary ``.part`` folders are removed) instead of the
    process dying on the spot; elsewhere (a worker thread cannot set handlers) nothing changes.

    Examples
    --------
    >>> import os
    >>> try:
    ...     with terminate_cleanly():
    ...         os.kill(os.getpid(), signal.SIGTERM)
    ...         time.sleep(5)
    ... except KeyboardInterrupt as exc:
    ...     print(exc)
    terminated (SIGTERM)
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _term(signum, frame):
        raise KeyboardInterrupt("terminated (SIGTERM)")

    old = signal.signal(signal.SIGTERM, _term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def remove_stale_temporaries(path: Path) -> None:
    """Delete the temporary folders ``.<name>.<pid>-….part`` of writers of this store that are gone.

    Examples
    --------
    >>> import pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> (d / ".st.999999999-ab.part").mkdir()        # no such process
    >>> remove_stale_temporaries(d / "st"); list(d.iterdir())
    []
    """
    from ..files import PART_RE, alive

    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return
    for entry in entries:
        m = PART_RE.match(entry.name)
        if m and entry.name.startswith(f".{path.name}.") and entry.is_dir() and not alive(int(m.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


#: per-point variables written with the theory (:func:`symattn.sweep.engine.theory_arrays`)
POINT_VARIABLES = ("t", "strong_signal", "engine", "layer", "layer_digest")
#: the parameters a point used (:meth:`SweepSpec.used`), stored as coordinates when not a grid dimension
USED = ("n", "snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq", "mu_norm2")


def _dataset(spec, theory: dict):
    import xarray as xr

    dims = tuple(spec.dims)
    shape = spec.shape + (spec.draws, len(spec.gamma))
    coords = {d: np.asarray(v) for d, v in spec.coords().items()}
    coords["draw"] = np.arange(spec.draws)
    coords["gamma"] = np.asarray(spec.gamma, dtype=float)
    used = {k: np.full(spec.shape, np.nan) for k in USED}
    for idx, pt in spec.points():
        for k, v in spec.used(pt).items():
            used[k][idx] = v
    for k in ("activation", "diagonal", "readout", "residual", "kernel"):   # fixed keys as given
        if k not in dims:
            coords[k] = np.asarray(spec.values[k])
    for k in USED:   # the values actually used: a scalar where the same everywhere, else one per point
        if k in dims:
            continue
        v = used[k]
        same = v.size and (np.all(v == v.flat[0]) or np.all(np.isnan(v)))
        coords[k] = np.asarray(v.flat[0]) if same else (dims, v)
        if k == "n" and same:
            coords[k] = np.asarray(int(v.flat[0]))
    data = {v: (dims + ("draw", "gamma"), np.full(shape, np.nan)) for v in VARIABLES}
    for name in THEORY:
        data[name] = (dims + ("gamma",), np.asarray(theory[name], dtype=float).reshape(spec.shape + (len(spec.gamma),)))
    for name in POINT_VARIABLES:
        arr = np.asarray(theory[name])
        data[name] = (dims, arr.astype(str) if arr.dtype == object else arr)
    ds = xr.Dataset(data, coords=coords)
    ds.attrs[_SPEC_ATTR] = json.dumps(spec.canonical(), sort_keys=True)
    ds.attrs[_FP_ATTR] = spec.fingerprint
    return ds


def _read_attrs(path: Path):
    import zarr

    with contextlib.suppress(Exception):
        g = zarr.open_group(str(path), mode="r")
        return dict(g.attrs)
    return None


def check_store(path, spec):
    """What ``path`` holds for ``spec``: None (no store yet), ``"same"`` (the store of this spec), or the
    canonical spec of a store that this spec extends (:meth:`SweepSpec.extension_of`).

    Raises
    ------
    ParameterError
        ``store`` when the folder holds something else, or the store of a spec that this one does not
        extend (the key is named): results of two specs are never mixed.
    """
    _need()
    path = Path(path)
    if not path.exists():
        return None
    if not path.is_dir():
        raise ParameterError("store", str(path), "a folder (this path is an existing file)")
    if not any(path.iterdir()):
        return None
    attrs = _read_attrs(path)
    if (not attrs or _FP_ATTR not in attrs) and rebuild_root(path):
        attrs = _read_attrs(path)
    if not attrs or _FP_ATTR not in attrs:
        raise ParameterError("store", str(path), "an empty folder or the store of a symattn sweep",
                             hint="this folder holds something else; pick a new --store")
    if attrs[_FP_ATTR] == spec.fingerprint:
        return "same"
    old = json.loads(attrs.get(_SPEC_ATTR, "{}"))
    try:
        spec.extension_of(old)
    except ParameterError as err:
        raise ParameterError("store", str(path), "the store of the same spec, or of one this spec extends (results "
                             "of two specs are never mixed)",
                             hint=f"this store was made by a spec that differs in {err.name} "
                                  f"({old.get(err.name)!r} there, {err.value!r} here: allowed {err.allowed}); use a "
                                  "new --store for the new spec") from None
    return old


def rebuild_root(path) -> bool:
    """Rebuild the root ``zarr.json`` of the store ``path`` from its record ``symattn_root.json`` and the
    arrays' own metadata; True when it was rebuilt. A root that reads well is left alone.

    Examples
    --------
    >>> import tempfile, symattn as sa
    >>> d = tempfile.mkdtemp() + "/store"
    >>> _ = sa.sweep({"c": [1.0], "gamma": [1.0], "n": 40, "draws": 1}, store=d, scheduler="serial")
    >>> with open(d + "/zarr.json", "r+") as f:
    ...     _ = f.truncate(100)
    >>> rebuild_root(d), sa.open_sweep(d).E_attention.shape
    (True, (1, 1, 1))
    """
    import zarr

    path = Path(path)
    attrs = _read_attrs(path)
    record = path / ROOT_RECORD
    if (attrs and _FP_ATTR in attrs) or not record.is_file():
        return False
    try:
        saved = json.loads(record.read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(saved, dict) or _FP_ATTR not in saved:
        return False
    from ..files import write_text

    write_text(path / "zarr.json", json.dumps({"zarr_format": 3, "node_type": "group", "attributes": saved}))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # zarr's note that consolidated metadata is not in the v3 spec
        zarr.consolidate_metadata(str(path))
    return True


def check_layers(path, spec) -> None:
    """Refuse to resume a store whose points' layers changed content (a weights file rewritten in place):
    the stored ``layer_digest`` of every point must be the digest of the layer the spec names now.

    Raises
    ------
    ParameterError
        ``store``, naming the first point whose layer differs.
    """
    g = _group(path)
    if "layer_digest" not in g:   # a store of the first format (no layers but the paper's)
        return
    stored = np.asarray(g["layer_digest"][...])
    for idx, pt in spec.points():
        now = spec.layer(pt).digest
        if str(stored[idx]) != now:
            raise ParameterError("store", str(path), "a store whose layers are the ones the spec names now",
                                 hint="the layer" + "".join(f" at {d} = {pt[d]}" for d in spec.dims)
                                      + f" ({spec.layer(pt)!r}) has changed content since it was stored (a weights "
                                        "file rewritten?): use a new --store")


def old_index(old_spec, new_spec):
    """Where each point and γ of ``new_spec`` sits in the store of ``old_spec``.

    Returns
    -------
    (callable, list)
        ``index(point)``: the old grid index of a new point, or None when the old grid lacks it; and
        the old index of each new γ (None where new).
    """
    from .spec import value_key

    pos = {d: {value_key(v): i for i, v in enumerate(old_spec.values[d])} for d in old_spec.dims}
    fixed = {k: value_key(v) for k, v in old_spec.values.items() if k not in old_spec.dims}

    def index(point):
        out = []
        for k, v in point.items():
            if k in pos:
                i = pos[k].get(value_key(v))
                if i is None:
                    return None
                out.append((old_spec.dims.index(k), i))
            elif k in fixed and fixed[k] != value_key(v):
                return None
        return tuple(i for _, i in sorted(out))

    g_old = {float(g): i for i, g in enumerate(old_spec.gamma)}
    return index, [g_old.get(float(g)) for g in new_spec.gamma]


def extend_store(path, old_canonical: dict, spec, theory: dict, provenance: dict | None = None) -> int:
    """Rebuild the store at ``path`` for ``spec``, which extends the spec that made it, keeping every
    stored task whose point, draw and γ values the new grid still holds; returns how many were kept.

    The new store is written whole beside the old one and swapped in (the old one is removed last)."""
    from .spec import SweepSpec

    old_spec = SweepSpec.from_dict(old_canonical)
    old_ds = open_store(path)
    index, g_idx = old_index(old_spec, spec)
    path = Path(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".part", dir=path.parent)) / "new"
    kept = 0
    try:
        create_store(tmp, spec, theory, provenance)
        if all(g is not None for g in g_idx):
            g = _group(tmp)
            arrays = {v: g[v] for v in VARIABLES}
            done = np.asarray(old_ds["done"].values)
            for idx, pt in spec.points():
                o = index(pt)
                if o is None:
                    continue
                for k in range(min(spec.draws, old_spec.draws)):
                    if not done[o + (k,)]:
                        continue
                    for v in VARIABLES:
                        arrays[v][tuple(idx) + (k, slice(None))] = np.asarray(old_ds[v].values[o + (k,)])[g_idx]
                    kept += 1
        backup = tmp.parent / "old"
        os.rename(path, backup)
        os.rename(tmp, path)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)
    return kept


def create_store(path, spec, theory: dict, provenance: dict | None = None) -> Path:
    """Create the empty store of ``spec`` at ``path`` (a missing or empty folder), atomically.

    ``theory`` maps :data:`THEORY` names to arrays of shape ``spec.shape + (len(gamma),)``.
    """
    _need()
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".part", dir=parent))
    except OSError as exc:
        raise ParameterError("store", str(path), "a folder that can be created and written to",
                             hint=exc.strerror or str(exc)) from None
    try:
        ds = _dataset(spec, theory)
        if provenance is not None:
            from ..formatting import jsonable

            ds.attrs["symattn_sweep_provenance"] = json.dumps(jsonable(provenance), sort_keys=True)
        G = len(spec.gamma)
        from zarr.codecs import Crc32cCodec, ZstdCodec

        enc = {v: {"chunks": (1,) * (len(spec.dims) + 1) + (G,), "fill_value": np.nan,
                   "compressors": [ZstdCodec(), Crc32cCodec()]} for v in VARIABLES}
        import warnings

        with contextlib.suppress(ImportError):   # the results start empty: only their metadata is written
            import dask.array as da

            for v in VARIABLES:
                ds[v] = (ds[v].dims, da.full(ds[v].shape, np.nan, chunks=ds[v].shape))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # zarr's notes on string dtypes of the coordinates
            ds.to_zarr(str(tmp), mode="w", encoding=enc, consolidated=True, compute=False)
        (tmp / ROOT_RECORD).write_text(json.dumps(dict(ds.attrs), sort_keys=True))
        if path.exists():
            path.rmdir()  # an empty folder (check_store said so)
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def _group(path):
    import zarr

    return zarr.open_group(str(path), mode="r+")


def _present(path: Path, v: str, shape: tuple):
    """Which tasks of the variable ``v`` have a chunk file (boolean, ``shape``), or None when the chunk
    names are not zarr v3's default ``c/i/j/…`` (a store of another layout: no check)."""
    try:
        meta = json.loads((path / v / "zarr.json").read_text())
    except (OSError, ValueError):
        return None
    enc = meta.get("chunk_key_encoding") or {}
    if enc.get("name") != "default" or (enc.get("configuration") or {}).get("separator", "/") != "/":
        return None
    out = np.zeros(shape, dtype=bool)
    root = path / v / "c"
    for dirpath, _, files in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        for f in files:
            parts = rel + (f,)
            if len(parts) == len(shape) + 1 and all(x.isdigit() for x in parts):
                idx = tuple(int(x) for x in parts[:-1])
                if all(i < n for i, n in zip(idx, shape)):
                    out[idx] = True
    return out


def task_status(path, spec) -> tuple:
    """``(done, corrupted)``, boolean arrays of shape ``spec.shape + (draws,)``: *done* -- the task's chunks
    exist, pass their checksums and hold finite values for both models; *corrupted* -- a chunk exists but
    cannot be decoded (a failed CRC-32C, a truncated file). Both kinds not done are computed again.

    Examples
    --------
    >>> import symattn as sa
    >>> from symattn.sweep import SweepSpec
    >>> d = tempfile.mkdtemp() + "/store"
    >>> spec = {"c": [1.0], "gamma": [1.0], "n": 40, "draws": 2}
    >>> _ = sa.sweep(spec, store=d, scheduler="serial")
    >>> done, corrupted = task_status(d, SweepSpec.from_dict(spec))
    >>> done.tolist(), corrupted.tolist()
    ([[True, True]], [[False, False]])
    """
    path = Path(path)
    g = _group(path)
    shape = spec.shape + (spec.draws,)
    done = np.ones(shape, dtype=bool)
    corrupted = np.zeros(shape, dtype=bool)
    for v in VARIABLES:
        arr = g[v]
        present = _present(path, v, shape)
        if present is not None:
            done &= present   # a missing chunk is never read as its fill value
            if not present.any():
                continue
        try:
            done &= np.isfinite(np.asarray(arr[...])).all(axis=-1)
        except Exception:  # a chunk that cannot be decoded: read task by task
            for idx in np.ndindex(*shape):
                if present is not None and not present[idx]:
                    continue
                try:
                    ok = bool(np.isfinite(np.asarray(arr[idx + (slice(None),)])).all())
                except Exception:
                    ok = False  # computed again and rewritten whole
                    corrupted[idx] = True
                done[idx] &= ok
    return done, corrupted


def done_mask(path, spec) -> np.ndarray:
    """Boolean array of shape ``spec.shape + (draws,)``: which tasks are stored (:func:`task_status`)."""
    return task_status(path, spec)[0]


def _root_fingerprint(path: Path):
    try:
        return json.loads((path / "zarr.json").read_text())["attributes"][_FP_ATTR]
    except (OSError, ValueError, KeyError, TypeError):
        return None


class Writer:
    """Writes finished tasks into an open store (one chunk per variable and task).

    Before each write it checks that ``path`` is still the folder it opened (same inode) and, when
    ``fingerprint`` is given, that the store still holds that spec: a store replaced or changed by
    another process is never written by old indices."""

    def __init__(self, path, fingerprint: str | None = None):
        self._path = Path(path)
        self._inode = os.stat(self._path).st_ino
        self._fp = fingerprint
        g = _group(path)
        self._arrays = {v: g[v] for v in VARIABLES}

    def _check(self) -> None:
        try:
            same = os.stat(self._path).st_ino == self._inode
        except OSError:
            same = False
        if not same or (self._fp is not None and _root_fingerprint(self._path) != self._fp):
            raise ParameterError("store", str(self._path), "the store this sweep opened",
                                 hint="another process replaced or changed it while this sweep ran; nothing "
                                      "more was written: run the sweep again")

    def write(self, index: tuple, values: dict) -> None:
        self._check()
        for v in VARIABLES:
            self._arrays[v][tuple(index) + (slice(None),)] = np.asarray(values[v], dtype=float)


def write_task(path, index, values) -> None:
    """Write one task's ``{"E_attention": array, "E_linear": array}`` (each over γ) at ``index``."""
    Writer(path).write(index, values)


def open_store(path):
    """The stored :class:`xarray.Dataset` (loaded into memory) with the Monte Carlo mean and standard error.

    Adds ``done`` (dims ``(*dims, "draw")``), ``draws_done`` and, for each model,
    ``<E>_mean`` = mean over the stored draws and ``<E>_se`` = std(ddof=1)/√(draws stored)
    (NaN with fewer than two draws).
    """
    _need()
    import xarray as xr

    path = Path(path)
    if not path.is_dir():
        raise ParameterError("store", str(path), "the folder of a sweep store")
    try:
        ds = xr.open_zarr(str(path), consolidated=True).load()
    except Exception as exc:
        if rebuild_root(path):
            return open_store(path)
        hint = str(exc)
        if "checksum" in hint:
            hint = f"a chunk is corrupted ({hint}): run the sweep again, which computes its task again"
        raise ParameterError("store", str(path), "the folder of a sweep store", hint=hint) from None
    if _FP_ATTR not in ds.attrs:
        raise ParameterError("store", str(path), "the folder of a sweep store (no symattn sweep attributes)")
    for v in VARIABLES:   # a value is never taken from a missing chunk, whatever fill_value says
        present = _present(path, v, ds[v].shape[:-1])
        if present is not None:
            ds[v] = ds[v].where(xr.DataArray(present, dims=ds[v].dims[:-1]))
    done = np.isfinite(ds[VARIABLES[0]]).all("gamma")
    for v in VARIABLES[1:]:
        done = done & np.isfinite(ds[v]).all("gamma")
    ds["done"] = done
    count = done.sum("draw")
    ds["draws_done"] = count
    for v in VARIABLES:
        x = ds[v].where(done)
        ds[v + "_mean"] = x.mean("draw")
        ds[v + "_se"] = (x.std("draw", ddof=1) / np.sqrt(count)).where(count >= 2)
    return ds
