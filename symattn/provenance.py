"""Provenance of a result (base layer): what produced it, so that it can be reproduced.

:func:`provenance` returns the object that every JSON result and CSV of symattn carries: the
symattn version, the parameters, the seed, backend and dtype, the versions of numpy, scipy,
sympy, mpmath (and torch when it is loaded), a UTC timestamp, and the git revision when symattn
runs from a git checkout.
"""

from __future__ import annotations

import datetime as _dt
import platform
import subprocess
import sys
from functools import lru_cache
from importlib import metadata
from pathlib import Path

__all__ = ["provenance", "git_revision", "array_digest", "provenance_path", "write_provenance"]

_DEPENDENCIES = ("numpy", "scipy", "sympy", "mpmath")


@lru_cache(maxsize=1)
def git_revision() -> str | None:
    """The git commit of the checkout symattn runs from (with ``-dirty`` for local changes), or None.

    Examples
    --------
    >>> rev = git_revision()
    >>> rev is None or len(rev) >= 7
    True
    """
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return rev + ("-dirty" if dirty else "") if rev else None


def array_digest(a) -> dict | None:
    """``{"shape", "sha256"}`` of an array given explicitly (a weight matrix W, a signal μ): its
    :func:`symattn.caching.digest` as float64 bytes in C order; None for None. Records which array was used
    without storing it.

    Examples
    --------
    >>> array_digest([[1.0, 0.0], [0.0, 1.0]])["shape"], array_digest(None)
    ([2, 2], None)
    """
    if a is None:
        return None
    import numpy as np

    from .caching import digest

    a = np.ascontiguousarray(a, dtype=np.float64)
    return {"shape": list(a.shape), "sha256": digest(a)}


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def provenance(parameters: dict | None = None, *, seed=None, backend: str | None = None,
               dtype: str | None = None) -> dict:
    """The provenance object of a result.

    Parameters
    ----------
    parameters : dict
        Every parameter the result depends on (JSON-ready values).
    seed : int or None
        The random seed (Monte Carlo), or None for deterministic results.
    backend, dtype : str or None
        The numeric backend ('numpy', 'mpmath', 'torch') and its dtype.

    Returns
    -------
    dict
        ``{"symattn", "parameters", "seed", "backend", "dtype", "versions", "python", "platform",
        "timestamp", "git_revision"}``.

    Examples
    --------
    >>> p = provenance({"c": 0.5}, seed=0, backend="numpy", dtype="float64")
    >>> sorted(p["versions"]) == ["mpmath", "numpy", "scipy", "sympy", "torch"]
    True
    >>> p["parameters"], p["seed"]
    ({'c': 0.5}, 0)
    """
    from . import __version__

    versions = {name: _version(name) for name in _DEPENDENCIES}
    versions["torch"] = _version("torch") if "torch" in sys.modules else None
    return {
        "symattn": __version__,
        "parameters": dict(parameters or {}),
        "seed": seed,
        "backend": backend,
        "dtype": dtype,
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "git_revision": git_revision(),
    }


def provenance_path(path) -> Path:
    """The provenance file of a data file: ``<name>.provenance.json`` beside it (``fig_mu0.csv`` ->
    ``fig_mu0.csv.provenance.json``), so that the CSV itself stays a plain table.

    Examples
    --------
    >>> provenance_path("out/fig_mu0.csv").name
    'fig_mu0.csv.provenance.json'
    """
    path = Path(path)
    return path.with_name(path.name + ".provenance.json")


def write_provenance(path, obj: dict) -> Path:
    """Write ``obj``, the provenance object (:func:`provenance`) of the data file ``path``, to
    :func:`provenance_path` (atomically, indented JSON); returns its path.

    Examples
    --------
    >>> import json, tempfile
    >>> f = write_provenance(Path(tempfile.mkdtemp()) / "fig_demo.csv", {"seed": 0})
    >>> json.loads(f.read_text())
    {'seed': 0}
    """
    import json

    from .files import write_text
    from .formatting import jsonable

    return write_text(provenance_path(path), json.dumps(jsonable(obj), indent=1, allow_nan=False) + "\n")
