"""Sweeps at scale: a TOML spec, tasks (point, draw) on dask.distributed, a resumable zarr store.

- :func:`sweep` runs (or resumes) a sweep and returns its summary;
- :func:`open_sweep` reads the results as an :class:`xarray.Dataset`;
- :func:`load_spec` / :class:`SweepSpec` validate the spec (:mod:`symattn.sweep.spec`).

Needs the ``[dask]`` extra (dask.distributed, xarray, zarr). docs/tutorials/sweeps.md shows it at work.

``symattn.sweep`` is both this package and the function :func:`sweep` (``sa.sweep(spec, store=...)``):
once the package has been imported, Python binds the name ``symattn.sweep`` to the package, so the
package itself is callable and calling it runs :func:`sweep`.
"""

from __future__ import annotations

import sys
import types

from .engine import agreement, open_sweep, run_task, sweep, theory_arrays
from .spec import SweepSpec, load_spec

__all__ = ["sweep", "open_sweep", "load_spec", "SweepSpec", "run_task", "theory_arrays", "agreement"]


class _CallablePackage(types.ModuleType):
    """The package ``symattn.sweep``, callable as the function :func:`sweep`."""

    def __call__(self, *args, **kwargs):
        return sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
