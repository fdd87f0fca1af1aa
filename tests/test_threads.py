"""symattn.threads: the BLAS/OpenMP thread choice of the Monte Carlo (no timings here: benchmarks/)."""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from symattn import threads


def _blas():
    return max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")


def test_small_matrices_use_one_thread_and_env_overrides(monkeypatch):
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    assert threads.choose_threads(threads.SMALL_N - 1) == 1
    assert 1 <= threads.choose_threads(10**4) <= threads.available_cores()
    monkeypatch.setenv(threads.THREADS_ENV, "3")
    assert threads.choose_threads(10) == 3


def test_busy_cores_counts_runnable_processes(monkeypatch):
    import builtins
    import io

    real_open = builtins.open

    def fake(path, *a, **k):
        if path == "/proc/loadavg":
            return io.StringIO("0.5 0.4 0.3 4/300 12345\n")
        return real_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", fake)
    assert threads.busy_cores(samples=3, interval=0) == 3  # 4 runnable, the reader among them
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    assert threads.choose_threads(10**4) == 1  # 3 busy on <= 3 cores: never more threads than idle cores


def test_limit_threads_sets_and_restores_blas_and_torch():
    import importlib

    import torch

    importlib.import_module("scipy.linalg")  # loads the BLAS that threadpoolctl sees

    before, torch_before = _blas(), torch.get_num_threads()
    with threads.limit_threads(1, torch=True):
        assert _blas() == 1 and torch.get_num_threads() == 1
        np.linalg.eigh(np.eye(3))
    assert _blas() == before and torch.get_num_threads() == torch_before


def test_auto_threads_keeps_a_setting_of_the_caller(monkeypatch):
    monkeypatch.delenv(threads.THREADS_ENV, raising=False)
    with threadpool_limits(limits=1):
        with threads.auto_threads(10**4) as t:
            assert t == 1 and _blas() == 1
