r"""Compile SymPy expressions into functions of a context's arrays (``sympy.lambdify`` with CSE).

Before compiling, c is replaced by (√c)² with √c an argument, so that every compiled
integrand is a rational function: the same source then runs on float64 arrays and on
object arrays of mpmath numbers.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import PRECEDENCE

from ..systems.symbols import c, rc


class _ProductPowerPrinter(NumPyPrinter):
    """NumPy printer writing small integer powers as products (x**3 -> x*x*x, x**-2 -> 1/(x*x)).

    numpy's ``power`` with a float exponent is many times slower than multiplication; the
    same source also stays exact for mpmath object arrays.
    """

    def _print_Pow(self, expr, rational=False):
        base, exp = expr.as_base_exp()
        if exp.is_Integer and 1 <= abs(int(exp)) <= 6:
            b = self.parenthesize(base, PRECEDENCE["Mul"] + 1)
            prod = "*".join([b] * abs(int(exp)))
            return f"({prod})" if exp > 0 else f"(1/({prod}))"
        return super()._print_Pow(expr, rational=rational)


def _lambdify(args, exprs, modules, cse=False):
    printer = _ProductPowerPrinter({"fully_qualified_modules": False, "inline": True,
                                    "allow_unknown_functions": True}) if modules == "numpy" else None
    return sp.lambdify(args, exprs, modules=modules, cse=cse, printer=printer)


def rationalise(expr):
    """Substitute c = rc² (rc = √c > 0) so that √c becomes the symbol rc."""
    return sp.sympify(expr).subs(c, rc**2)


class CompiledExprs:
    """A list of expressions compiled into one function returning a list of broadcast arrays.

    ``intermediates`` is a sequence of (symbol, definition) pairs evaluated first, in order
    (each may use the arguments and the previous intermediates): the expressions stay written
    in β and Δ rather than expanded, which keeps derivatives small.
    """

    def __init__(self, exprs, args, modules, intermediates=()):
        self.args = tuple(rc if a is c else a for a in args)
        self._steps = []
        known = self.args
        for sym, definition in intermediates:
            self._steps.append(_lambdify(known, rationalise(definition), modules))
            known = known + (sym,)
        self.exprs = [rationalise(e) for e in exprs]
        self._fn = _lambdify(known, self.exprs, modules, cse=True)

    def __call__(self, *values):
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        for step in self._steps:
            values = values + (step(*values),)
        out = self._fn(*values)
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
