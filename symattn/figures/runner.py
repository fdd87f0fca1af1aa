r"""What the figures compute: the sizes of a run, its Monte Carlo jobs, and the theory values.

:class:`Settings` holds every size of a reproduction (:data:`QUICK`, :data:`FULL`). Each figure
first *plans* its Monte Carlo runs on a :class:`Runner` (deduplicated by key, so figures share
runs), the runner simulates them all under one progress bar, and the figure then reads them
back with :func:`mc_at`. :func:`theory` evaluates the deterministic equivalent
(:func:`symattn.memorization_error`) for the lines, with the finite-p diagonal d_n at the
simulated n (docs/theory.md §1), and :func:`finite_p_theory` the finite-p corrected theory
(docs/theory.md §10) at strong-signal points.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..montecarlo import blas_threads
from .records import STRONG_SIGNAL_T

__all__ = ["Settings", "QUICK", "FULL", "PAPER", "PAPER_FIGURES", "Job", "Runner", "simulate_job", "simulate_draw", "synthetic_gammas", "mc_at", "theory",
           "finite_p_theory", "strength", "model_of", "CACHE_FORMAT", "job_description", "job_key", "cache_file",
           "store_cached", "load_cached"]


@dataclass(frozen=True)
class Settings:
    """Sizes of one reproduction run (:data:`QUICK`, :data:`FULL`, or your own via ``replace``).

    Examples
    --------
    >>> from dataclasses import replace
    >>> replace(QUICK, n=200, draws=3).n, FULL.n
    (200, 1500)
    """

    name: str = "quick"
    n: int = 400                     # tokens of the synthetic Monte Carlo (p = round(c n))
    draws: int = 5
    seed: int = 0
    curve_points: int = 25           # points of each theory line
    gamma_fixed: float = 0.1         # γ of the sweeps over c, ‖μ‖², θ
    # μ = 0 figure
    mu0_gammas: tuple = (0.01, 0.1, 1.0, 10.0)
    mu0_cs: tuple = (0.5, 1.0, 2.0)
    mu0_snrs: tuple = (1.0, 2.0, 4.0)
    # aligned figure
    aligned_c: float = 0.5
    aligned_snr: float = 1.0
    aligned_thetas: tuple = (0.0, 1.0, 2.0, 3.0)
    aligned_gammas: tuple = (0.01, 1.0, 10.0)
    heat_points: int = 21
    # a1 = 0 figure
    a1zero_cs: tuple = (0.5, 1.0, 2.0, 4.0)
    a1zero_snrs: tuple = (0.0, 1.0, 2.0, 4.0)
    # real weights
    real_c: float = 0.5
    real_draws: int = 4
    real_layers: tuple = (0, 1, 2, 3, 4, 5)
    real_ranks: tuple = (0, 1, 4)
    real_gammas: tuple = (0.01, 0.1, 1.0, 10.0)
    real_snr: float = 1.0
    real_scale: str = "unit"
    real_activation: str = "tanh"
    # real weights, general-W theory (fig_minilm_w): layers, heads (None = all heads of the layer), signals
    gw_layers: tuple = (2,)
    gw_heads: tuple = (None, 0)
    gw_mus: tuple = ("zero", "top")
    gw_gammas: tuple = (0.01, 0.1, 1.0)
    gw_draws: int = 8
    gw_curve_points: int = 0         # theory-line points beyond the simulated γ (0: lines through the points)
    # the real layer's test error against ridge regression (fig_minilm_test, docs/theory.md §14.9): layer, heads
    # (None = all heads), c values, γ values, activation, draws, theory-line points over c
    rt_layer: int = 2
    rt_heads: tuple = (None, 0)
    rt_cs: tuple = (0.5, 1.0, 2.0, 3.0)
    rt_gammas: tuple = (0.1, 1.0)
    rt_activation: str = "tanh"
    rt_draws: int = 4
    rt_curve_points: int = 7
    # the paper's Figure 1: ridge regression alone (E_LR), ‖μ‖² = ridge_snr unless swept
    ridge_draws: int = 3
    ridge_a: tuple = (128, 512)      # (n, p) of panel (a): E_LR over γ
    ridge_gammas: tuple = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
    ridge_snr: float = 1.0
    ridge_b_n: int = 512             # n of panel (b): E_LR over c = p/n at γ = ridge_gamma_small
    ridge_b_cs: tuple = (0.25, 0.5, 0.75, 0.9, 1.1, 1.5, 2.0)
    ridge_gamma_small: float = 1e-5
    ridge_c: tuple = (512, 128)      # (n, p) of panel (c): E_LR over ‖μ‖² at γ = ridge_gamma_small
    ridge_c_snrs: tuple = (0.0, 0.5, 1.0, 2.0, 4.0, 8.0)
    # train against test error (fig_generalization, docs/theory.md §14): activation, c values, signals, γ
    gen_activation: str = "tanh"
    gen_cs: tuple = (0.5, 1.0, 2.0)
    gen_snr: float = 1.0
    gen_gammas: tuple = (0.01, 0.1, 1.0, 10.0)
    gen_draws: int = 6
    # Monte Carlo backend
    backend: str = "numpy"
    device: str | None = None


QUICK = Settings()
FULL = Settings(name="full", n=1500, draws=8, curve_points=49, mu0_gammas=(1e-3, 0.01, 0.1, 1.0, 10.0, 100.0),
                mu0_cs=(0.25, 0.5, 1.0, 2.0, 4.0), mu0_snrs=(0.5, 1.0, 2.0, 4.0),
                aligned_thetas=(0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0), aligned_gammas=(1e-3, 0.01, 1.0, 10.0, 100.0),
                heat_points=41, a1zero_cs=(0.25, 0.5, 1.0, 2.0, 4.0), a1zero_snrs=(0.0, 0.5, 1.0, 2.0, 4.0),
                real_draws=8, real_ranks=(0, 1, 2, 4, 8), real_gammas=(1e-3, 0.01, 0.1, 1.0, 10.0),
                gw_layers=(0, 1, 2, 3, 4, 5), gw_heads=(None,) + tuple(range(12)), gw_gammas=(0.01, 0.1, 1.0, 10.0),
                gw_draws=16, gw_curve_points=9, ridge_draws=4, ridge_a=(256, 1024), ridge_b_n=2048,
                ridge_c=(1024, 256), gen_gammas=(1e-3, 0.01, 0.1, 1.0, 10.0, 100.0), gen_draws=16,
                rt_cs=(0.5, 0.75, 1.0, 1.5, 2.0, 3.0), rt_draws=16, rt_curve_points=13)
#: The paper's sizes: Figure 1 (ridge regression, ‖μ‖² = 1) at (a) p = 2048, n = 512, γ = 1e-4..1e2;
#: (b) n = 4096, γ = 1e-5, p swept; (c) p = 512, n = 2048, γ = 1e-5, ‖μ‖² swept; and the
#: attention figures at n = 2048 (``symattn reproduce --paper``, best with ``--scheduler``).
#: The figures of ``symattn reproduce --paper`` (the paper's own; the others with ``--only``).
PAPER_FIGURES = ("ridge", "mu0", "aligned", "a1zero")
PAPER = replace(FULL, name="paper", n=2048, draws=6, ridge_draws=6, ridge_a=(512, 2048), ridge_b_n=4096,
                ridge_c=(2048, 512), gw_layers=(0, 2, 5), gw_heads=(None, 0))


# ============================================================================ Monte Carlo jobs
@dataclass
class Job:
    """One :func:`symattn.simulate` call; its result gives every γ of ``gammas`` at once."""

    f: object
    n: int
    c: float
    gammas: tuple
    draws: int
    geometry: object = None
    diagonal: str = "f"
    W: object = None
    mu: object = None
    models: tuple = ("attention", "linear")
    result: object = None
    #: keywords of a layer variant passed on to :func:`symattn.simulate` (``residual``, ``heads``, ``readout``,
    #: ``kernel``, ``temperature``; docs/theory.md §13), None for the plain layer
    variant: dict | None = None
    #: which errors to simulate: ('train',), or with 'test' the readout on a fresh sequence (docs/theory.md §14)
    error: tuple = ("train",)


class Runner:
    """Collects the Monte Carlo jobs of all figures (deduplicated by key) and runs them under one
    progress bar (total = all draws).

    Examples
    --------
    >>> from dataclasses import replace
    >>> runner = Runner(replace(QUICK, n=40, draws=2), progress=False)
    >>> key = runner.synthetic("tanh", 1.0)
    >>> runner.synthetic("tanh", 1.0) == key, len(runner.jobs)      # the same run is planned once
    (True, 1)
    >>> runner.run()
    >>> mean, sem = mc_at(runner.result(key), "attention", 0.1)
    >>> 0 < mean < 1
    True
    """

    def __init__(self, settings: Settings, progress=None, cache_dir=None):
        self.settings = settings
        self.progress = progress
        self.jobs: dict = {}
        self.context: dict = {}  # data a figure's plan hands to its make (e.g. the loaded weights)
        self.cache_dir = None if cache_dir is None else Path(cache_dir)
        self.computed = 0  # jobs simulated by run()
        self.reused = 0    # jobs read back from the cache

    def add(self, key, job: Job):
        """Plan ``job`` under ``key`` unless a job with that key is planned already; returns ``key``."""
        if key not in self.jobs:
            self.jobs[key] = job
        return key

    def synthetic(self, f, c, geometry=None, diagonal="f", linear=False):
        """The standard synthetic job: n = settings.n, every γ the figures need. E_LR is simulated
        too when some caller asks for it (``linear=True``); the key does not depend on that."""
        from ..activations.activation import activation
        from ..model import as_geometry

        s = self.settings
        f = activation(f)
        geo = as_geometry(geometry)
        key = ("syn", f.name, float(c), geo.gram.tobytes(), geo.rank, diagonal)
        self.add(key, Job(f=f, n=s.n, c=float(c), gammas=synthetic_gammas(s), draws=s.draws,
                          geometry=geo, diagonal=diagonal, models=("attention",)))
        if linear:
            self.jobs[key].models = ("attention", "linear")
        return key

    def generalization(self, f, c, geometry=None):
        """A train-and-test job (docs/theory.md §14) of attention and linear regression at n = settings.n."""
        from ..activations.activation import activation
        from ..model import as_geometry

        s = self.settings
        f = activation(f)
        geo = as_geometry(geometry)
        key = ("gen", f.name, float(c), geo.gram.tobytes(), geo.rank)
        return self.add(key, Job(f=f, n=s.n, c=float(c), gammas=tuple(sorted(map(float, s.gen_gammas))),
                                 draws=s.gen_draws, geometry=geo, error=("train", "test")))

    def ridge(self, n, c, gammas, snr):
        """A linear-regression-only job (E_LR of the paper's Figure 1) at n, c and ‖μ‖² = ``snr``."""
        from ..model import Geometry

        gammas = tuple(sorted(map(float, gammas)))
        key = ("ridge", int(n), float(c), gammas, float(snr))
        return self.add(key, Job(f="tanh", n=int(n), c=float(c), gammas=gammas, draws=self.settings.ridge_draws,
                                 geometry=Geometry(snr=float(snr)), models=("linear",)))

    def load_cache(self) -> int:
        """Read back from ``cache_dir`` every planned job without a result that is cached there
        (counted in :attr:`reused`); returns how many jobs still have no result."""
        todo = [j for j in self.jobs.values() if j.result is None]
        if self.cache_dir is not None and todo:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            for job in todo:
                job.result = load_cached(self.cache_dir, job_key(job, self.settings))
            self.reused += sum(job.result is not None for job in todo)
        return sum(j.result is None for j in self.jobs.values())

    def run(self, echo=None, client=None):
        """Simulate every planned job that has no result yet (one BLAS thread at small n).

        First every job's memory is checked (:func:`symattn.montecarlo.check_memory`), before any
        work. With a ``cache_dir``, a job whose result is cached there (:func:`job_key`) is read
        back instead of simulated, and every job simulated is cached as soon as it is done: a run
        interrupted by Ctrl-C or ``kill`` loses at most the jobs in progress. Counts go to
        :attr:`computed` and :attr:`reused`.

        With a dask ``client`` (:func:`symattn.cluster.dask_client`) every draw of every job is
        one task (:func:`simulate_draw`, one BLAS thread), draw k seeded by
        :func:`symattn.montecarlo.draw_seed`, so the numbers are those of the serial run whatever
        the number of workers or the order in which draws finish.
        """
        from tqdm.auto import tqdm

        from ..model import dimension
        from ..montecarlo import check_memory

        s = self.settings
        todo = [j for j in self.jobs.values() if j.result is None]
        for job in todo:
            p = dimension(job.n, job.c)
            check_memory(job.n, p, "n" if p <= job.n else "c", job.n if p <= job.n else job.c, backend=s.backend,
                         device=s.device, models=job.models, W=job.W is not None, mu=job.mu is not None
                         or (job.geometry is not None and job.geometry.snr > 0), gammas=len(job.gammas))
        self.load_cache()
        todo = [j for j in todo if j.result is None]
        keys = {id(job): None if self.cache_dir is None else job_key(job, s) for job in todo}
        total = sum(j.draws for j in todo)
        show = self.progress
        if show is None:
            try:
                show = s.name != "quick" or sys.stderr.isatty()
            except (AttributeError, ValueError):
                show = False

        def finish(job, result):
            if self.cache_dir is not None and keys[id(job)] is not None:
                store_cached(self.cache_dir, keys[id(job)], result)
            job.result = result
            self.computed += 1

        with tqdm(total=total, desc=f"reproduce ({s.name}) Monte Carlo", unit="draw", file=sys.stderr,
                  disable=not show) as bar:
            if client is None:
                for job in todo:
                    with blas_threads(job.n, s.backend):
                        finish(job, simulate_job(job, s))
                    bar.update(job.draws)
            else:
                _run_on_dask(client, todo, s, finish, bar)

    def result(self, key):
        """The :class:`~symattn.montecarlo.SimulationResult` of the job ``key`` (after :meth:`run`)."""
        return self.jobs[key].result


def simulate_job(job: Job, s: Settings, draws=None, seed=None):
    """:func:`symattn.simulate` of ``job`` with the run's seed, backend and device (``draws`` and
    ``seed`` override the job's draws and ``s.seed``: one draw of :func:`simulate_draw`)."""
    from ..layer import simulate

    kw = dict(geometry=job.geometry) if job.W is None and job.mu is None else dict(weights=job.W, mu=job.mu)
    kw.update(job.variant or {})  # residual / heads / softmax (docs/theory.md §13)
    return simulate(job.f, n=job.n, c=job.c, gamma=job.gammas, draws=job.draws if draws is None else draws,
                    seed=s.seed if seed is None else seed, backend=s.backend, device=s.device,
                    diagonal=job.diagonal, progress=False, models=job.models, error=job.error, **kw)


def simulate_draw(job: Job, s: Settings, k: int):
    """Draw k of ``job`` alone, at one BLAS/OpenMP thread (a task of a dask worker): the k-th row
    of ``simulate_job(job, s)``, seeded by :func:`symattn.montecarlo.draw_seed`.

    Examples
    --------
    >>> import numpy as np
    >>> job = Job(f="tanh", n=40, c=1.0, gammas=(0.1, 1.0), draws=3)
    >>> whole = simulate_job(job, QUICK)
    >>> bool(np.array_equal(simulate_draw(job, QUICK, 2).attention[0], whole.attention[2]))
    True
    """
    from ..montecarlo import draw_seed
    from ..threads import limit_threads

    with limit_threads(1, torch=s.backend == "torch" or None):
        return simulate_job(job, s, draws=1, seed=draw_seed(s.seed, k))


def _run_on_dask(client, todo, s: Settings, finish, bar):
    """Every draw of every job of ``todo`` as one dask task; a job is finished (``finish(job,
    result)``: cached, counted) as soon as its last draw is back."""
    from dask.distributed import as_completed

    from ..montecarlo import combine_draws

    parts = {id(job): [None] * job.draws for job in todo}
    futures = {}
    for i, job in enumerate(todo):
        for k in range(job.draws):
            futures[client.submit(simulate_draw, job, s, k, key=f"symattn-reproduce-{i}-{k}-{id(job)}",
                                  pure=False)] = (job, k)
    try:
        for fut in as_completed(list(futures)):
            job, k = futures[fut]
            parts[id(job)][k] = fut.result()
            fut.release()
            bar.update(1)
            if all(r is not None for r in parts[id(job)]):
                finish(job, combine_draws(parts.pop(id(job))))
    except BaseException:
        client.cancel(list(futures))
        raise


# ============================================================================ the cache of finished jobs
#: Version of the cache files (a change makes every older cached job a miss).
CACHE_FORMAT = 1

_RESULT_ARRAYS = ("gamma", "attention", "linear", "attention_trace", "linear_trace", "attention_test", "linear_test")
_RESULT_META = ("n", "p", "c", "draws", "seed", "backend", "device", "dtype", "diagonal", "activation", "seconds")


def job_description(job: Job, s: Settings) -> dict | None:
    """Everything a job's result depends on (JSON-ready); None for an activation without an exact
    identity (a plain callable), which is never cached.

    The activation is identified by its SymPy expression (``srepr``: exact, including the folded
    α of the real-weights jobs), the weights by the SHA-256 of their bytes; the seed, backend,
    device, the symattn version and :data:`CACHE_FORMAT` are part of it.

    Examples
    --------
    >>> from dataclasses import replace
    >>> job = Job(f="tanh", n=40, c=1.0, gammas=(0.1,), draws=2)
    >>> d = job_description(job, QUICK)
    >>> d["activation"]["expr"], d["seed"], d["gammas"]
    ("tanh(Symbol('x', real=True))", 0, [0.1])
    >>> job_description(job, replace(QUICK, seed=1))["seed"]
    1
    """
    import sympy

    from .. import __version__
    from ..activations.activation import activation
    from ..model import as_geometry
    from ..provenance import array_digest

    f = activation(job.f)
    if getattr(f, "expr", None) is None:
        return None
    geo = None if job.W is not None or job.mu is not None else as_geometry(job.geometry)
    extra = {} if not job.variant else {"variant": {k: ([array_digest(h) for h in v] if k == "heads" else v)
                                                    for k, v in sorted(job.variant.items())}}
    if tuple(job.error) != ("train",):
        extra["error"] = list(job.error)
    return {**extra, "format": CACHE_FORMAT, "symattn": __version__,
            "activation": {"name": str(f.name), "expr": sympy.srepr(f.expr)},
            "n": int(job.n), "c": float(job.c), "gammas": [float(g) for g in job.gammas], "draws": int(job.draws),
            "geometry": None if geo is None else {"gram": geo.gram.tolist(), "rank": int(geo.rank)},
            "W": array_digest(job.W), "mu": array_digest(job.mu), "diagonal": job.diagonal, "models": list(job.models),
            "seed": int(s.seed), "backend": s.backend, "device": s.device, "dtype": "float64", "method": "auto"}


def job_key(job: Job, s: Settings) -> str | None:
    """The cache key of a job: the SHA-256 of its :func:`job_description` (None: not cacheable).

    Examples
    --------
    >>> a = job_key(Job(f="tanh", n=40, c=1.0, gammas=(0.1,), draws=2), QUICK)
    >>> a == job_key(Job(f="tanh", n=40, c=1.0, gammas=(0.1,), draws=2), QUICK), len(a)
    (True, 64)
    >>> a == job_key(Job(f="tanh", n=40, c=1.0, gammas=(0.1,), draws=3), QUICK)
    False
    """
    import json

    from ..caching import digest

    d = job_description(job, s)
    if d is None:
        return None
    return digest(json.dumps(d, sort_keys=True))


def cache_file(cache_dir, key: str) -> Path:
    """``<cache_dir>/mc-<key>.npz``."""
    return Path(cache_dir) / f"mc-{key}.npz"


def store_cached(cache_dir, key: str, result) -> Path:
    """Write a :class:`~symattn.montecarlo.SimulationResult` to the cache, atomically (its per-draw
    arrays bit for bit, its scalars and provenance as JSON)."""
    import json

    from ..files import atomic_path
    from ..formatting import jsonable

    arrays = {k: np.asarray(getattr(result, k)) for k in _RESULT_ARRAYS if getattr(result, k) is not None}
    meta = {k: getattr(result, k) for k in _RESULT_META}
    meta["provenance"] = result.provenance
    meta["key"] = key
    arrays["meta"] = np.array(json.dumps(jsonable(meta)))
    path = cache_file(cache_dir, key)
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, **arrays)
    return path


def load_cached(cache_dir, key: str | None):
    """The cached :class:`~symattn.montecarlo.SimulationResult` of ``key``, or None (absent,
    unreadable, or written for another key)."""
    import json

    from ..montecarlo import SimulationResult

    if key is None:
        return None
    path = cache_file(cache_dir, key)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            arrays = {k: np.array(z[k]) for k in _RESULT_ARRAYS if k in z.files}
    except Exception:  # a damaged or foreign file: simulate again (and overwrite it)
        return None
    if meta.get("key") != key:
        return None
    kw = {k: meta[k] for k in _RESULT_META}
    kw["seconds"] = float("nan") if kw["seconds"] is None else kw["seconds"]
    return SimulationResult(**arrays, **kw, provenance=meta.get("provenance"))


def synthetic_gammas(s: Settings) -> tuple:
    """Every γ that a synthetic job must simulate: those of the μ = 0 and aligned figures and γ_fixed."""
    return tuple(sorted(set(map(float, s.mu0_gammas + s.aligned_gammas + (s.gamma_fixed,)))))


def mc_at(result, model: str, gamma: float):
    """(mean, sem) of ``model`` at ``gamma`` from a SimulationResult (KeyError if γ was not simulated)."""
    i = int(np.argmin(np.abs(np.log(result.gamma) - math.log(gamma))))
    if not math.isclose(float(result.gamma[i]), gamma, rel_tol=1e-9):
        raise KeyError(f"gamma={gamma} was not simulated")
    mean = getattr(result, f"{model}_mean")[i]
    sem = getattr(result, f"{model}_sem")[i]
    return float(mean), float(sem)


def model_of(act: str):
    """(model, activation) of a curve name: ``"linear"`` is E_LR (simulated with the tanh runs)."""
    return ("linear", "tanh") if act == "linear" else ("attention", act)


# ============================================================================ theory
def theory(f, c, gamma, geometry=None, n=None, diagonal="f", model="attention", correction=None) -> np.ndarray:
    """:func:`symattn.memorization_error` as a float array; points where the solver does not
    converge are NaN (reported, not fatal).

    Examples
    --------
    >>> round(float(theory("tanh", 1.0, 0.1, model="linear")), 6)
    0.156174
    """
    import warnings

    from ..accuracy import internal
    from ..errors import ConvergenceError
    from ..layer import memorization_error

    try:
        # strong signals are flagged in the CSV (t), not warned about; the figure sets its theory beside its own
        # Monte Carlo, so the atlas' assessment of its points is not asked for (accuracy.internal)
        with warnings.catch_warnings(), internal():
            warnings.filterwarnings("ignore", message=".*finite-p signal strength.*")
            warnings.filterwarnings("ignore", message=".*weight strength.*")   # the figure's MC points show it
            return np.asarray(memorization_error(f, c, gamma, geometry=geometry, model=model, n=n,
                                                 diagonal=diagonal, correction=correction), dtype=float)
    except ConvergenceError:
        if np.ndim(c) == 0 and np.ndim(gamma) == 0:
            return np.asarray(np.nan)
        # retry point by point so that one bad point does not lose the whole line
        cc, gg = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
        out = np.empty(cc.shape)
        for idx in np.ndindex(cc.shape):
            out[idx] = theory(f, float(cc[idx]), float(gg[idx]), geometry, n, diagonal, model, correction)
        return out


def finite_p_theory(f, c, gamma, geometry, n, t, diagonal="f", model="attention"):
    """The finite-p corrected E_A at a strong-signal attention point (|t| > STRONG_SIGNAL_T), else None."""
    if model != "attention" or t is None or abs(t) <= STRONG_SIGNAL_T:
        return None
    return float(theory(f, c, gamma, geometry, n=n, diagonal=diagonal, correction="finite-p"))


def strength(geometry, p: int) -> float:
    """t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p (docs/theory.md §10.1).

    Examples
    --------
    >>> strength({"snr": 2.0}, 400)
    0.1
    """
    from ..model import as_geometry

    return float(as_geometry(geometry).strength(p))
