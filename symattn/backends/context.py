r"""Arithmetic contexts: one formula, several arithmetics (after mpmath's ``ctx_fp``/``ctx_mp``).

The solvers in :mod:`symattn.backends.solver` are written once against a context. A
context supplies numbers and the few operations that differ between float64 numpy arrays
and arbitrary-precision mpmath numbers held in numpy object arrays: conversion, sqrt/cos/sin,
batched linear solves, the tolerance, and the lambdify module for compiled expressions.
Element-wise arithmetic (+, −, ×, /, integer powers, sums, matmul) is numpy's in both.
"""

from __future__ import annotations

import mpmath
import numpy as np


class FloatContext:
    """float64 numpy arithmetic, vectorised over a leading axis of parameter points."""

    name = "numpy"
    lambdify_modules = "numpy"
    tol = 1e-13          # Newton: relative residual
    quad_tol = 1e-12     # quadrature: relative change when the node count doubles
    nodes = 64           # initial Marchenko-Pastur quadrature nodes (doubled where needed)
    max_nodes = 1 << 15

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def convert(self, x):
        return np.asarray(x, dtype=float)

    def sqrt(self, x):
        return np.sqrt(x)

    def cos(self, x):
        return np.cos(x)

    def sin(self, x):
        return np.sin(x)

    @property
    def pi(self):
        return np.pi

    def arange_half(self, m: int):
        """(k + 1/2), k = 0..m−1."""
        return np.arange(m) + 0.5

    def solve(self, A, b):
        """Batched solve of A x = b, A: (..., k, k), b: (..., k)."""
        return np.linalg.solve(A, b[..., None])[..., 0]

    def to_float(self, x):
        return np.asarray(x, dtype=float)

    def isfinite(self, x):
        return np.isfinite(np.asarray(x, dtype=float))


class MPContext(FloatContext):
    """mpmath arithmetic at ``dps`` digits in numpy object arrays (no vectorisation speed-up)."""

    name = "mpmath"
    lambdify_modules = "mpmath"

    def __init__(self, dps: int = 30):
        self.dps = int(dps)
        self.tol = mpmath.mpf(10) ** (-(self.dps - 3))
        self.quad_tol = mpmath.mpf(10) ** (-(self.dps - 4))
        self.nodes = 64 + 12 * self.dps
        self.max_nodes = 1 << 14
        self._saved = []

    def __enter__(self):
        self._saved.append(mpmath.mp.dps)
        mpmath.mp.dps = self.dps
        return self

    def __exit__(self, *exc):
        mpmath.mp.dps = self._saved.pop()
        return False

    _mpf = staticmethod(np.frompyfunc(lambda v: mpmath.mpf(v) if not isinstance(v, mpmath.mpf) else +v, 1, 1))
    _sqrt = staticmethod(np.frompyfunc(mpmath.sqrt, 1, 1))
    _cos = staticmethod(np.frompyfunc(mpmath.cos, 1, 1))
    _sin = staticmethod(np.frompyfunc(mpmath.sin, 1, 1))

    def convert(self, x):
        arr = np.asarray(x, dtype=object)
        return np.asarray(self._mpf(arr), dtype=object) if arr.ndim else mpmath.mpf(arr.item())

    def sqrt(self, x):
        return self._sqrt(x)

    def cos(self, x):
        return self._cos(x)

    def sin(self, x):
        return self._sin(x)

    @property
    def pi(self):
        return +mpmath.pi

    def arange_half(self, m: int):
        return self.convert(np.arange(m)) + mpmath.mpf(0.5)

    def solve(self, A, b):
        A = np.asarray(A, dtype=object)
        b = np.asarray(b, dtype=object)
        out = np.empty(b.shape, dtype=object)
        for idx in np.ndindex(b.shape[:-1]):
            Am, bm = mpmath.matrix(A[idx].tolist()), mpmath.matrix(b[idx].tolist())
            try:
                x = mpmath.lu_solve(Am, bm)
            except ZeroDivisionError:  # mpmath refuses ill-conditioned pivots; numpy would proceed
                x = mpmath.qr_solve(Am, bm)[0]
            out[idx] = [x[i] for i in range(b.shape[-1])]
        return out


def context(backend: str = "numpy", dps: int | None = None):
    """The arithmetic context of a backend name: 'numpy' (float64) or 'mpmath' (``dps`` digits)."""
    from ..errors import ParameterError
    from ..validation import check_dps

    if backend == "numpy":
        return FloatContext()
    if backend == "mpmath":
        return MPContext(check_dps(30 if dps is None else dps))
    raise ParameterError("backend", backend, "'numpy' or 'mpmath'")
