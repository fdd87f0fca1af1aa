r"""The ``symattn reproduce`` driver: every figure of the paper, theory lines against Monte Carlo points.

:data:`FIGURES` maps a figure name to its ``(plan, make)`` pair (one module per figure:
:mod:`~symattn.figures.mu0`, :mod:`~symattn.figures.aligned`, :mod:`~symattn.figures.a1zero`,
:mod:`~symattn.figures.minilm`, :mod:`~symattn.figures.minilm_w`); :func:`run` plans all, runs the
Monte Carlo once, makes the figures and returns a summary with the agreement of theory and Monte
Carlo. The command line
(``symattn reproduce``) is :mod:`symattn.cli.reproduce`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..errors import RealWeightsUnavailable
from ..montecarlo import blas_threads
from .a1zero import make_a1zero, plan_a1zero
from .aligned import make_aligned, plan_aligned
from .generalization import make_generalization, plan_generalization
from .minilm import make_minilm, plan_minilm
from .minilm_test import make_minilm_test, plan_minilm_test
from .minilm_w import make_minilm_w, plan_minilm_w
from .mu0 import make_mu0, plan_mu0
from .ridge import make_ridge, plan_ridge
from .records import STRONG_SIGNAL_T, agreement, write_provenance
from .runner import FULL, QUICK, Runner, Settings
from .variants import (make_heads, make_minilm_heads, make_residual, make_softmax, plan_heads, plan_minilm_heads,
                       plan_residual, plan_softmax)

__all__ = ["FIGURES", "run"]


#: name -> (plan(settings, runner), make(settings, runner, out) -> FigureResult or list of them)
FIGURES: dict[str, tuple[Callable, Callable]] = {
    "ridge": (plan_ridge, make_ridge),
    "mu0": (plan_mu0, make_mu0),
    "aligned": (plan_aligned, make_aligned),
    "a1zero": (plan_a1zero, make_a1zero),
    "minilm": (plan_minilm, make_minilm),
    "minilm_w": (plan_minilm_w, make_minilm_w),
    # the layer's variants (docs/theory.md §13): symattn.figures.variants
    "heads": (plan_heads, make_heads),
    "residual": (plan_residual, make_residual),
    "softmax": (plan_softmax, make_softmax),
    "minilm_heads": (plan_minilm_heads, make_minilm_heads),
    # beyond memorisation: the test error of the readout (docs/theory.md §14)
    "generalization": (plan_generalization, make_generalization),
    "minilm_test": (plan_minilm_test, make_minilm_test),
}


def run(out="symattn-figures", quick: bool = True, settings: Settings | None = None, figures=None,
        progress=None, echo: Callable[[str], object] | None = print, cache: bool = True, store=None,
        scheduler=None, workers=None) -> dict:
    """Make the figures ``figures`` (default all of :data:`FIGURES`) into ``out``; returns a summary.

    Each figure plans its Monte Carlo runs on one :class:`~symattn.figures.runner.Runner`, the
    runner simulates them all, then each figure draws its theory lines and points and writes
    ``fig_<name>.png``, ``.pdf`` and ``.csv``.

    Parameters
    ----------
    out : str or pathlib.Path
        Output folder.
    quick : bool
        :data:`QUICK` sizes (n = 400, 5 draws) if True, :data:`FULL` (n = 1500, 8 draws) if False.
    settings : Settings, optional
        Overrides ``quick``.
    figures : iterable of str, optional
        A subset of :data:`FIGURES` (default all).
    progress : bool, optional
        Progress bar of the Monte Carlo (default: for the full run or on a terminal).
    echo : callable or None
        Where the report lines go (None: silent).
    cache : bool
        Keep every finished Monte Carlo run in ``out/.cache`` (one ``mc-<key>.npz`` per run,
        written atomically) and read back those already there, so that a rerun after Ctrl-C or
        ``kill`` recomputes nothing that was finished; the numbers are the same bit for bit
        (same seeds). False: simulate everything and write no cache.
    store : str or pathlib.Path, optional
        The cache folder instead of ``out/.cache``: a persistent store of finished runs that
        several output folders (and reruns after ``kill -9``) share. Implies ``cache``.
    scheduler : None, 'local' or str
        Where the Monte Carlo runs: None in this process (unless ``workers`` is given); 'local'
        an embedded dask ``LocalCluster``; else the address of a running dask scheduler
        (``tcp://HOST:PORT``). On a cluster every draw is a task (one BLAS thread), seeded by its
        index, so the numbers do not depend on the workers (:meth:`Runner.run`).
    workers : int, optional
        Worker processes of the embedded cluster (default one per core); with an address, wait
        for this many workers.

    Returns
    -------
    dict
        ``{"settings", "out", "figures", "skipped", "monte_carlo", "seconds", "monte_carlo_seconds"}``;
        per figure the files written (PNG, PDF, CSV and the CSV's ``.provenance.json``), the
        :func:`~symattn.figures.records.agreement` of theory and Monte Carlo, a note and the seconds.
        ``monte_carlo``: ``{"runs", "computed", "reused", "cache", "engine"}`` (runs simulated now, runs
        read back from the cache, the cache folder or None, and 'serial', 'local-cluster' or 'scheduler'). A figure whose inputs are not installed
        (the real weights without the ``[real]`` extra) is skipped with its reason in
        ``summary["skipped"]``. Every file is written atomically (a temporary name, then a rename).

    Examples
    --------
    >>> import tempfile
    >>> from dataclasses import replace
    >>> tiny = replace(QUICK, n=40, draws=2, curve_points=3, mu0_gammas=(0.1,), mu0_cs=(1.0,), mu0_snrs=(1.0,))
    >>> summary = run(tempfile.mkdtemp(), settings=tiny, figures=["mu0"], echo=None, progress=False)
    >>> sorted(summary["figures"]["mu0"]["files"])[0].endswith("fig_mu0.csv")
    True
    """
    from ..errors import ParameterError

    say = echo if echo is not None else (lambda *_: None)
    s = settings if settings is not None else (QUICK if quick else FULL)
    names = list(FIGURES) if figures is None else list(figures)
    for nm in names:
        if nm not in FIGURES:
            raise ParameterError("figures", nm, "a subset of " + ", ".join(FIGURES))
    out = Path(out)
    if workers is not None:
        from ..validation import check_int

        workers = check_int("workers", workers, 1, 4096)
    if scheduler is not None and not isinstance(scheduler, str):
        raise ParameterError("scheduler", scheduler, "None, 'local' or a scheduler address tcp://HOST:PORT")
    cache_dir = Path(store) if store is not None else (out / ".cache" if cache else None)
    with blas_threads(s.n, "numpy"):  # small sizes: one BLAS thread for the CPU work (fits, SVDs, MC)
        return _run(s, names, out, progress, say, cache_dir, scheduler, workers)


def _run(s: Settings, names, out: Path, progress, say, cache_dir, scheduler=None, workers=None) -> dict:
    import contextlib

    from ..files import remove_stale_parts

    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    for folder in (out, cache_dir):  # what a killed run (SIGKILL: no clean-up) left half written
        if folder is not None:
            remove_stale_parts(folder)
    runner = Runner(s, progress=progress, cache_dir=cache_dir)
    planned, skipped = [], {}
    for nm in names:
        try:
            FIGURES[nm][0](s, runner)
            planned.append(nm)
        except RealWeightsUnavailable as exc:
            skipped[nm] = str(exc)
            say(f"skipped {nm}: {exc}")
    draws = sum(j.draws for j in runner.jobs.values())
    say(f"reproduce ({s.name}): {len(runner.jobs)} Monte Carlo runs, {draws} draws -> {out}")
    engine = "serial" if scheduler is None and workers is None else ("local-cluster" if scheduler in (None, "local")
                                                                     else "scheduler")
    with contextlib.ExitStack() as stack:
        client = None
        if engine != "serial" and runner.load_cache():  # a cluster only when some run is not in the store
            from ..cluster import dask_client

            client = stack.enter_context(dask_client(None if scheduler in (None, "local") else scheduler, workers))
        runner.run(client=client)
    t_mc = time.perf_counter() - t0
    mc = {"runs": len(runner.jobs), "computed": runner.computed, "reused": runner.reused,
          "cache": None if cache_dir is None else str(cache_dir), "engine": engine}
    if cache_dir is not None:
        say(f"Monte Carlo: {runner.computed} runs computed, {runner.reused} reused from {cache_dir}")
    summary = {"settings": s.name, "out": str(out), "figures": {}, "skipped": skipped, "monte_carlo": mc}
    for nm in planned:
        t1 = time.perf_counter()
        results = FIGURES[nm][1](s, runner, out)
        for res in results if isinstance(results, list) else [results]:
            for f in [f for f in res.files if str(f).endswith(".csv")]:
                res.files.append(str(write_provenance(f, _csv_provenance(s, res.name, mc))))
            agr = agreement(res.records.rows)
            summary["figures"][res.name] = {"files": res.files, "agreement": agr, "note": res.note}
            say(f"  {res.name}: {', '.join(Path(f).name for f in res.files)}")
            unchecked = agr["excluded_strong"] - agr["strong_checked"]
            if agr["checked"] == 0 and agr["real_weights"] and not agr["excluded_strong"]:
                say(f"    {agr['real_weights']} real-weight points: compared with their own theory in the note below"
                    if res.note else f"    {agr['real_weights']} real-weight points (no theory of the same system)")
            else:
                say(f"    theory vs MC: {agr['agree']}/{agr['checked']} points within max(3 se, 3%) "
                    f"(max |gap| {100 * agr['max_rel_gap']:.1f}%)"
                    + (f"; strong signal (|t| > {STRONG_SIGNAL_T}): {agr['strong_agree']}/{agr['strong_checked']} "
                       f"within the finite-p corrected theory" if agr["strong_checked"] else "")
                    + (f"; {unchecked} strong-signal points not checked (no corrected theory)" if unchecked else "")
                    + (f"; {agr['real_weights']} real-weight points not checked" if agr["real_weights"] else ""))
            if res.note:
                say("    " + res.note)
        summary["figures"].setdefault(nm, {}).setdefault("seconds", 0.0)
        summary["figures"][nm]["seconds"] = time.perf_counter() - t1
    summary["seconds"] = time.perf_counter() - t0
    summary["monte_carlo_seconds"] = t_mc
    say(f"done in {summary['seconds']:.1f} s")
    return summary


def _csv_provenance(s: Settings, figure: str, mc: dict) -> dict:
    """The provenance object of a figure's CSV: the figure, every setting, the seed and backend."""
    from dataclasses import asdict

    from ..provenance import provenance

    return provenance({"figure": figure, "settings": asdict(s), "monte_carlo": mc}, seed=s.seed, backend=s.backend,
                      dtype="float64")
