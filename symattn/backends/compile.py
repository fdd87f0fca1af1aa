r"""Compile SymPy expressions into functions of a context's arrays (``sympy.lambdify`` with CSE).

Before compiling, c is replaced by (√c)² with √c an argument, so that every compiled
integrand is a rational function: the same source then runs on float64 arrays and on
object arrays of mpmath numbers.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

from ..systems.symbols import c, rc


def rationalise(expr):
    """Substitute c = rc² (rc = √c > 0) so that √c becomes the symbol rc."""
    return sp.sympify(expr).subs(c, rc**2)


class CompiledExprs:
    """A list of expressions compiled into one function returning a list of broadcast arrays."""

    def __init__(self, exprs, args, modules):
        self.exprs = [rationalise(e) for e in exprs]
        self.args = tuple(rc if a is c else a for a in args)
        self._fn = sp.lambdify(self.args, self.exprs, modules=modules, cse=True)

    def __call__(self, *values):
        out = self._fn(*values)
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        return [np.broadcast_to(o, shape) if np.shape(o) != shape else o for o in out]


class CompiledMatrix:
    """A SymPy Matrix compiled entry-wise into a function returning arrays of shape (P, rows, cols)."""

    def __init__(self, matrix: sp.Matrix, args, modules):
        self.shape = matrix.shape
        self.entries = [(i, j) for i in range(matrix.rows) for j in range(matrix.cols) if matrix[i, j] != 0]
        self._exprs = CompiledExprs([matrix[i, j] for i, j in self.entries], args, modules) if self.entries else None

    def __call__(self, *values, P: int, dtype=float):
        out = np.zeros((P,) + self.shape, dtype=dtype)
        if dtype is object:
            out[...] = 0
        if self._exprs is not None:
            for (i, j), v in zip(self.entries, self._exprs(*values)):
                out[:, i, j] = np.broadcast_to(v, (P,))
        return out


@lru_cache(maxsize=None)
def compiled(key: str, modules: str):
    """Cache of compiled pieces of the systems, by name and lambdify module."""
    from . import kernels

    return kernels.build(key, modules)
