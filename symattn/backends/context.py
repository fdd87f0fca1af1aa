r"""Arithmetic contexts: one formula, several arithmetics (after mpmath's ``ctx_fp``/``ctx_mp``).

The solvers in :mod:`symattn.backends.solver` and :mod:`symattn.backends.finite_p` are written
once against a context. A context supplies numbers and the few operations that differ between
float64 numpy arrays and arbitrary-precision mpmath numbers held in numpy object arrays:

- what a formula would otherwise ask of the backend: ``dtype``, ``eps`` (unit roundoff), ``digits``
  (a number in both), ``dps`` (the digits asked of exact constants; None at float64), ``ladder`` (the
  digits to escalate to), ``escalates``, ``richardson_powers``/``richardson_tol``, ``require_float64``;
- numbers: ``convert``, ``scalar``, ``asarray``, ``complex``, ``to_complex``, ``zeros``, ``pi``,
  ``arange_half``, ``to_float``, ``abs_float``;
- functions over points: ``pointwise`` (one vectorised call, or one call per point), ``matvec``;
- element-wise functions: ``sqrt``, ``exp``, ``cos``, ``sin``, ``real``, ``imag``, ``isfinite``,
  and the reduction ``max_abs`` (a float);
- small dense linear algebra, batched over leading axes: ``solve``, ``inv``, ``svd``;
- the tolerances of each solver at this precision, and the lambdify module for compiled expressions.

Element-wise arithmetic (+, −, ×, /, integer powers, sums, matmul) is numpy's in both.
:class:`FloatContext` and :class:`MPContext` have one surface: every operation of one exists in
the other, with the same arguments and meaning (tests/test_backends.py checks them side by side).
:class:`FloatContext` uses numpy only, so its source can be copied into standalone solvers.
"""

from __future__ import annotations

import mpmath
import numpy as np


class FloatContext:
    """float64 numpy arithmetic, vectorised over a leading axis of parameter points."""

    name = "numpy"       # for provenance and messages only: no formula tests it
    lambdify_modules = "numpy"
    dtype = float        # the numpy dtype of this arithmetic's arrays (object at arbitrary precision)
    eps = float(np.finfo(float).eps)   # unit roundoff (machine epsilon) of the arithmetic
    digits = 16          # decimal digits of the arithmetic, a number in every context
    dps = None           # digits requested of exact constants (kernel_constants' dps); None: float64
    tol = 1e-13          # Newton: relative residual
    quad_tol = 1e-12     # quadrature: relative change when the node count doubles
    nodes = 64           # initial Marchenko-Pastur quadrature nodes (doubled where needed)
    max_nodes = 1 << 15
    # the finite-p numerics (symattn.backends.finite_p, docs/theory.md §10.3)
    pencil_tol = 1e-12   # latent Dyson iteration: relative change of the iterate
    svd_tol = 1e-10      # separable expansion of the slope 𝔻: relative singular-value cut
    basis_tol = 1e-12    # latent basis: relative singular-value cut of 𝕄
    drop_tol = 1e-9      # latent basis: relative norm below which Gram–Schmidt drops a vector
    step = 1e-20         # complex-step derivative: η/γ
    # the ridgeless limit γ → 0 (symattn.theory.memorization_error): Richardson powers and error bound
    richardson_powers = (2, 3, 4)
    richardson_tol = 1e-9
    escalates = True     # points float64 cannot resolve are solved again at more digits (the ladder)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def convert(self, x):
        """Numbers of this arithmetic (float64 arrays)."""
        return np.asarray(x, dtype=float)

    def scalar(self, x):
        """One number of this arithmetic (a Python float here, an mpf at ``dps`` digits)."""
        return float(x)

    def asarray(self, x):
        """An array of this context's dtype holding x as it is (no conversion of the entries)."""
        return np.asarray(x, dtype=self.dtype)

    def require_float64(self, error: Exception):
        """Raise ``error`` unless this is float64 arithmetic (for the engines that exist in float64 only)."""

    def matvec(self, B, x):
        """The batched product B x, B: (P, m, k), x: (P, k) → (P, m)."""
        return np.einsum("pkl,pl->pk", B, x)

    def pointwise(self, fn, *arrays):
        """fn applied to the points (the entries of equal-length 1-d arrays): one vectorised call
        here, one call per point at arbitrary precision (whose functions take numbers, not arrays)."""
        return np.asarray(fn(*arrays), dtype=float)

    def ladder(self, levels):
        """The escalation digits above this arithmetic: the levels > ``digits``, or twice the
        working digits when none is left (float64 has nowhere to go without a level)."""
        above = [d for d in levels if d > self.digits]
        return above or ([] if self.dps is None else [2 * self.digits])

    def complex(self, re, im):
        """The complex number re + i·im."""
        return complex(re, im)

    def zeros(self, shape, complex: bool = False):
        """An array of zeros (complex ones with ``complex=True``)."""
        return np.zeros(shape, dtype=np.complex128 if complex else float)

    def sqrt(self, x):
        return np.sqrt(x)

    def exp(self, x):
        return np.exp(x)

    def cos(self, x):
        return np.cos(x)

    def sin(self, x):
        return np.sin(x)

    def real(self, x):
        return np.real(x)

    def imag(self, x):
        return np.imag(x)

    @property
    def pi(self):
        return np.pi

    def arange_half(self, m: int):
        """(k + 1/2), k = 0..m−1."""
        return np.arange(m) + 0.5

    def solve(self, A, b):
        """Batched solve of A x = b, A: (..., k, k), b: (..., k)."""
        return np.linalg.solve(A, b[..., None])[..., 0]

    def inv(self, A):
        """Batched inverse of A: (..., k, k)."""
        return np.linalg.inv(A)

    def svd(self, A):
        """Batched singular value decomposition A = U diag(s) Vt of real A: (..., m, m); returns (U, s, Vt)."""
        return np.linalg.svd(A)

    def max_abs(self, x) -> float:
        """max |x| over all entries, as a float (0.0 for an empty array)."""
        x = np.asarray(x)
        return float(np.max(np.abs(x))) if x.size else 0.0

    def to_float(self, x):
        return np.asarray(x, dtype=float)

    def isfinite(self, x):
        return np.isfinite(np.asarray(x, dtype=float))

    # -- complex arithmetic (the closed form)
    def to_complex(self, x, extended: bool = True):
        """x as complex numbers of this arithmetic: numpy's clongdouble (``extended``) or complex128
        (the arbitrary-precision context: its complex numbers, whatever ``extended``); ``sqrt``, ``real``
        and ``imag`` take them."""
        return np.asarray(x, dtype=np.clongdouble if extended else np.complex128)

    def abs_float(self, x):
        """|x| of real or complex numbers as a numpy float array (float64: in x's own precision)."""
        return np.abs(x)


class MPContext(FloatContext):
    """mpmath arithmetic at ``dps`` digits in numpy object arrays (no vectorisation speed-up)."""

    name = "mpmath"
    lambdify_modules = "mpmath"

    dtype = object

    def __init__(self, dps: int = 30):
        self.dps = self.digits = int(dps)
        self.eps = 10.0 ** (-self.dps)
        self.tol = mpmath.mpf(10) ** (-(self.dps - 3))
        self.quad_tol = mpmath.mpf(10) ** (-(self.dps - 4))
        self.nodes = 64 + 12 * self.dps
        self.max_nodes = 1 << 14
        self.pencil_tol = 10.0 ** (-(self.dps - 3))
        self.svd_tol = self.basis_tol = self.drop_tol = 10.0 ** (-self.dps)
        self.richardson_powers = (2, 3, 4, 5, 6, 7)
        self.richardson_tol = 10.0 ** (8 - self.dps)
        self.escalates = False
        self._saved = []

    @property
    def step(self):
        """η/γ = 10^{−(dps+5)}, at the working precision."""
        return mpmath.mpf(10) ** (-(self.dps + 5))

    def __enter__(self):
        self._saved.append(mpmath.mp.dps)
        mpmath.mp.dps = self.dps
        return self

    def __exit__(self, *exc):
        mpmath.mp.dps = self._saved.pop()
        return False

    _mpf = staticmethod(np.frompyfunc(lambda v: mpmath.mpf(v) if not isinstance(v, mpmath.mpf) else +v, 1, 1))
    _sqrt = staticmethod(np.frompyfunc(mpmath.sqrt, 1, 1))
    _exp = staticmethod(np.frompyfunc(mpmath.exp, 1, 1))
    _cos = staticmethod(np.frompyfunc(mpmath.cos, 1, 1))
    _sin = staticmethod(np.frompyfunc(mpmath.sin, 1, 1))
    _re = staticmethod(np.frompyfunc(mpmath.re, 1, 1))
    _im = staticmethod(np.frompyfunc(mpmath.im, 1, 1))

    def convert(self, x):
        arr = np.asarray(x, dtype=object)
        return np.asarray(self._mpf(arr), dtype=object) if arr.ndim else mpmath.mpf(arr.item())

    def scalar(self, x):
        return x if isinstance(x, mpmath.mpf) else mpmath.mpf(x)

    def require_float64(self, error: Exception):
        raise error

    def matvec(self, B, x):
        return (B * x[:, None, :]).sum(axis=-1)

    def pointwise(self, fn, *arrays):
        return np.array([fn(*(a[i] for a in arrays)) for i in range(len(arrays[0]))], dtype=object)

    def complex(self, re, im):
        return mpmath.mpc(re, im)

    def zeros(self, shape, complex: bool = False):
        return self.convert(np.zeros(shape))

    def sqrt(self, x):
        return self._sqrt(x)

    def exp(self, x):
        return self._exp(x)

    def cos(self, x):
        return self._cos(x)

    def sin(self, x):
        return self._sin(x)

    def real(self, x):
        return self._re(x)

    def imag(self, x):
        return self._im(x)

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

    def inv(self, A):
        A = np.asarray(A, dtype=object)
        out = np.empty(A.shape, dtype=object)
        for idx in np.ndindex(A.shape[:-2]):
            Ai = mpmath.inverse(mpmath.matrix(A[idx].tolist()))  # LU with 20 guard bits
            out[idx] = [[+Ai[i, j] for j in range(A.shape[-1])] for i in range(A.shape[-2])]
        return out

    def svd(self, A):
        A = np.asarray(A, dtype=object)
        m = A.shape[-1]
        U, s, Vt = (np.empty(A.shape, dtype=object), np.empty(A.shape[:-1], dtype=object),
                    np.empty(A.shape, dtype=object))
        for idx in np.ndindex(A.shape[:-2]):
            Ui, Si, Vi = mpmath.svd_r(mpmath.matrix(A[idx].tolist()))
            U[idx] = Ui.tolist()
            s[idx] = [Si[i] for i in range(m)]
            Vt[idx] = Vi.tolist()
        return U, s, Vt

    def max_abs(self, x) -> float:
        x = np.asarray(x, dtype=object)
        return float(np.max(np.abs(x).astype(float))) if x.size else 0.0

    # -- complex arithmetic (the closed form)
    _mpc = staticmethod(np.frompyfunc(lambda x: mpmath.mpc(x), 1, 1))

    def to_complex(self, x, extended: bool = True):
        return self._mpc(x)

    def abs_float(self, x):
        return np.abs(x).astype(float)


def context(backend: str = "numpy", dps: int | None = None):
    """The arithmetic context of a backend name: 'numpy' (float64) or 'mpmath' (``dps`` digits)."""
    from ..errors import ParameterError
    from ..validation import check_dps

    if backend == "numpy":
        return FloatContext()
    if backend == "mpmath":
        return MPContext(check_dps(30 if dps is None else dps))
    raise ParameterError("backend", backend, "'numpy' or 'mpmath'")
