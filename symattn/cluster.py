r"""Where Monte Carlo tasks run: an embedded dask ``LocalCluster`` or a running dask scheduler.

The one place that opens a :class:`dask.distributed.Client` (the optional ``[dask]`` extra), for
the sweep engine (:mod:`symattn.sweep`) and for ``symattn reproduce --scheduler``
(:mod:`symattn.figures`). Workers are single-threaded processes: a task sets one BLAS thread
itself, so the cores are filled by tasks, never oversubscribed by threads.
"""

from __future__ import annotations

import contextlib
import os

from .errors import ParameterError

__all__ = ["dask_client"]


@contextlib.contextmanager
def dask_client(scheduler=None, workers=None, name: str = "scheduler"):
    """A dask ``Client``: of an embedded ``LocalCluster`` (``scheduler`` None) or of the running
    scheduler at the address ``scheduler`` (``tcp://HOST:PORT``, e.g. one started by
    ``dask scheduler`` / ``dask worker``, dask-jobqueue or Kubernetes).

    Parameters
    ----------
    scheduler : str or None
        The scheduler's address, or None for an embedded cluster on loopback.
    workers : int or None
        Embedded cluster: its worker processes (default one per core, one thread each).
        External scheduler: wait (up to 120 s) until this many workers have joined.
    name : str
        The parameter named in the errors (``scheduler``).

    Yields
    ------
    dask.distributed.Client

    Raises
    ------
    ParameterError
        dask.distributed is not installed, or no scheduler answers at the address (within 30 s).

    Examples
    --------
    >>> from symattn.cluster import dask_client
    >>> with dask_client(workers=1) as client:     # an embedded cluster of one worker process
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError as exc:
        raise ParameterError(name, scheduler, "no scheduler (dask.distributed is not installed)",
                             hint=f"pip install 'symattn[dask]' ({exc})") from None
    import logging

    with contextlib.ExitStack() as stack:
        if scheduler is None:
            nw = workers or os.cpu_count() or 1
            cluster = stack.enter_context(LocalCluster(n_workers=nw, threads_per_worker=1, processes=True,
                                                       dashboard_address=None, silence_logs=logging.ERROR))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(scheduler, timeout=30))
            except (OSError, TimeoutError, ValueError) as exc:
                raise ParameterError(name, scheduler, "the address of a running dask scheduler "
                                     "(tcp://HOST:PORT)", hint=str(exc)) from None
            if workers:
                client.wait_for_workers(workers, timeout=120)
        yield client
