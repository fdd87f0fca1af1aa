"""BLAS/OpenMP threads chosen deliberately (base layer): as many as there are idle cores, never more.

A multithreaded BLAS (OpenBLAS, MKL) or torch's OpenMP pool starts one thread per core; on a
machine where other processes already use the cores those threads spin and wait for each other,
and one Monte Carlo draw becomes many times slower (measured at n = 1500 on 2 cores with three
heavy neighbours: 10.8 s at the default threads, 0.66 s at one). :func:`choose_threads` counts
the cores this process may use (``os.sched_getaffinity``) and the other runnable tasks of the
machine right now (``/proc/loadavg``, field 4), and :func:`limit_threads` applies the result to
numpy's BLAS (threadpoolctl) and to torch for the duration of a block.

``$SYMATTN_THREADS`` (an integer) overrides the choice, e.g. ``SYMATTN_THREADS=1`` inside a
batch job that already runs one process per core.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

__all__ = ["env_threads", "available_cores", "busy_cores", "choose_threads", "limit_threads", "auto_threads", "THREADS_ENV", "SMALL_N"]

#: environment variable that fixes the number of threads
THREADS_ENV = "SYMATTN_THREADS"
#: below this matrix size one thread is used: more gain nothing and only contend (measured at n = 384-800)
SMALL_N = 800


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity; ``os.cpu_count()`` where unknown).

    Examples
    --------
    >>> available_cores() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def busy_cores(samples: int = 5, interval: float = 0.002) -> int:
    """Other runnable tasks on the machine now: the median over ``samples`` readings of the runnable
    count of ``/proc/loadavg`` (field 4, which counts the reading thread itself), minus one; 0 where
    it cannot be read.

    Examples
    --------
    >>> busy_cores() >= 0
    True
    """
    counts = []
    for i in range(max(1, samples)):
        try:
            with open("/proc/loadavg") as fh:
                counts.append(int(fh.read().split()[3].split("/")[0]))
        except (OSError, ValueError, IndexError):
            return 0
        if i + 1 < samples:
            time.sleep(interval)
    counts.sort()
    return max(0, counts[len(counts) // 2] - 1)


def env_threads() -> int | None:
    """``$SYMATTN_THREADS`` as an integer 1..4096, or None when unset or empty.

    Raises
    ------
    ParameterError
        ``SYMATTN_THREADS``, when it is set to anything else (it is never ignored silently).

    Examples
    --------
    >>> os.environ[THREADS_ENV] = "abc"
    >>> env_threads()
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid SYMATTN_THREADS='abc': allowed an integer 1 <= threads <= 4096, or unset
    >>> del os.environ[THREADS_ENV]
    >>> env_threads() is None
    True
    """
    env = os.environ.get(THREADS_ENV, "").strip()
    if not env:
        return None
    try:
        value = int(env)
    except ValueError:
        value = None
    if value is None or not 1 <= value <= 4096:
        from .errors import ParameterError

        raise ParameterError(THREADS_ENV, env, "an integer 1 <= threads <= 4096, or unset")
    return value


def choose_threads(n: int) -> int:
    """Threads for one computation on n×n matrices: ``$SYMATTN_THREADS`` if set; else 1 when
    n < :data:`SMALL_N`; else the idle cores, ``available_cores() - busy_cores()``, at least 1.

    Parameters
    ----------
    n : int
        The matrix size.

    Returns
    -------
    int
        The number of threads, >= 1.

    Examples
    --------
    >>> choose_threads(100)
    1
    >>> 1 <= choose_threads(4000) <= available_cores()
    True
    """
    env = env_threads()
    if env is not None:
        return env
    if n < SMALL_N:
        return 1
    cores = available_cores()
    return max(1, min(cores, cores - busy_cores()))


@contextlib.contextmanager
def limit_threads(threads: int, torch: bool | None = None):
    """Run the block with ``threads`` BLAS/OpenMP threads (threadpoolctl) and, when torch is loaded
    (or ``torch`` is True), ``torch.set_num_threads(threads)``; the previous settings are restored.

    Parameters
    ----------
    threads : int
        Threads, >= 1.
    torch : bool or None
        Also set torch's intra-op threads (None: when torch is already imported).

    Examples
    --------
    >>> import numpy as np
    >>> with limit_threads(1):
    ...     float(np.trace(np.eye(3) @ np.eye(3)))
    3.0
    """
    threads = max(1, int(threads))
    import importlib

    importlib.import_module("scipy.linalg")  # threadpoolctl limits only the BLAS libraries already loaded
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a hard dependency
        limits = contextlib.nullcontext()
    else:
        limits = threadpool_limits(limits=threads)
    prev = None
    if torch or (torch is None and "torch" in sys.modules):
        with contextlib.suppress(ImportError):
            import torch as _torch

            prev = _torch.get_num_threads()
            if prev != threads:
                _torch.set_num_threads(threads)
    try:
        with limits:
            yield threads
    finally:
        if prev is not None and prev != threads:
            import torch as _torch

            _torch.set_num_threads(prev)


def _blas_threads_now() -> int | None:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:  # pragma: no cover
        return None
    counts = [int(i.get("num_threads", 0)) for i in threadpool_info() if i.get("user_api") == "blas"]
    return max(counts) if counts else None


def auto_threads(n: int):
    """The thread setting of one Monte Carlo run on n×n matrices (what :func:`symattn.simulate` uses).

    ``$SYMATTN_THREADS`` when set; else, when the caller already lowered the BLAS threads below the
    available cores (``threadpoolctl.threadpool_limits``, ``OPENBLAS_NUM_THREADS``, a dask worker),
    that setting is kept; else :func:`limit_threads` of :func:`choose_threads` (n).

    Parameters
    ----------
    n : int
        The matrix size.

    Returns
    -------
    contextlib.AbstractContextManager

    Examples
    --------
    >>> import numpy as np
    >>> with auto_threads(100):
    ...     float(np.trace(np.eye(2)))
    2.0
    """
    if env_threads() is not None:
        return limit_threads(choose_threads(n))
    import importlib

    importlib.import_module("scipy.linalg")
    now = _blas_threads_now()
    if now is not None and now < available_cores():
        return contextlib.nullcontext(now)
    return limit_threads(choose_threads(n))
