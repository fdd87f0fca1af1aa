r"""Compile SymPy expressions into functions of a context's arrays (``sympy.lambdify`` with CSE).

Before compiling, c is replaced by (√c)² with √c an argument, so that every compiled
integrand is a rational function: the same source then runs on float64 arrays and on
object arrays of mpmath numbers.

The call side is split from the SymPy side: :class:`ArrayFunction` and :class:`MatrixFunction`
only need numpy (the generated standalone solvers of :mod:`symattn.codegen` carry their source
and wrap their printed kernels in them); :class:`CompiledExprs` and :class:`CompiledMatrix` build
them from SymPy expressions with ``lambdify``.
"""

from __future__ import annotations

import numpy as np
import sympy as sp

from ..systems.printing import ProductPowerPrinter
from ..systems.symbols import c, rc


#: the library's NumPy printer (x**3 -> x*x*x), from :mod:`symattn.systems.printing`
_ProductPowerPrinter = ProductPowerPrinter


def _lambdify(args, exprs, modules, cse=False):
    printer = _ProductPowerPrinter({"fully_qualified_modules": False, "inline": True,
                                    "allow_unknown_functions": True}) if modules == "numpy" else None
    return sp.lambdify(args, exprs, modules=modules, cse=cse, printer=printer)


def rationalise(expr):
    """Substitute c = rc² (rc = √c > 0) so that √c becomes the symbol rc.

    Examples
    --------
    >>> from symattn.systems.symbols import c
    >>> rationalise(c + 1)
    sqrt_c**2 + 1
    """
    return sp.sympify(expr, strict=True).subs(c, rc**2)  # never a string


class ArrayFunction:
    """``fn(*values)``, a list of arrays, each broadcast to the common shape of the arguments.

    ``steps`` are functions evaluated first, in order; each gets the arguments and the results
    of the previous steps, and its result is appended to the arguments (the intermediates β, Δ
    of the bulk integrands). Needs numpy only.

    Examples
    --------
    >>> import numpy as np
    >>> f = ArrayFunction(lambda x, y: [x + y, 2.0])
    >>> [v.tolist() for v in f(np.array([1.0, 2.0]), 1.0)]
    [[2.0, 3.0], [2.0, 2.0]]
    """

    def __init__(self, fn, steps=()):
        self._fn = fn
        self._steps = list(steps)

    def __call__(self, *values):
        shape = np.broadcast_shapes(*(np.shape(v) for v in values))
        for step in self._steps:
            values = values + (step(*values),)
        out = self._fn(*values)
        return [np.broadcast_to(o, shape) if np.shape(o) != shape else o for o in out]


class MatrixFunction:
    """A matrix of functions: ``fn(*values)`` gives the entries ``entries`` [(i, j), ...] (zeros
    elsewhere); called with ``P`` and ``dtype``, it returns an array of shape (P, rows, cols).
    Needs numpy only.

    Examples
    --------
    >>> m = MatrixFunction(ArrayFunction(lambda x: [x, 2 * x]), (2, 2), [(0, 0), (1, 0)])
    >>> m(np.array([1.0, 3.0]), P=2)[1].tolist()
    [[3.0, 0.0], [6.0, 0.0]]
    """

    def __init__(self, fn, shape, entries):
        self.shape = tuple(shape)
        self.entries = list(entries)
        self._exprs = fn if self.entries else None

    def nonzero(self, *values):
        """The values of the entries :attr:`entries` (a list in their order; empty when there are none), without
        the dense (P, rows, cols) array."""
        return list(self._exprs(*values)) if self._exprs is not None else []

    def __call__(self, *values, P: int, dtype=float):
        out = np.zeros((P,) + self.shape, dtype=dtype)
        if dtype is object:
            out[...] = 0
        for (i, j), v in zip(self.entries, self.nonzero(*values)):
            out[:, i, j] = np.broadcast_to(v, (P,))
        return out


class CompiledExprs(ArrayFunction):
    """A list of expressions compiled into one function returning a list of broadcast arrays.

    ``intermediates`` is a sequence of (symbol, definition) pairs evaluated first, in order
    (each may use the arguments and the previous intermediates): the expressions stay written
    in β and Δ rather than expanded, which keeps derivatives small.

    Examples
    --------
    >>> import sympy as sp
    >>> x, b = sp.symbols("x b")
    >>> f = CompiledExprs([x * b, b + 1], (x,), "numpy", intermediates=[(b, 2 * x)])
    >>> [v.tolist() for v in f(np.array([1.0, 2.0]))]
    [[2.0, 8.0], [3.0, 5.0]]
    """

    def __init__(self, exprs, args, modules, intermediates=()):
        self.args = tuple(rc if a is c else a for a in args)
        steps = []
        known = self.args
        for sym, definition in intermediates:
            steps.append(_lambdify(known, rationalise(definition), modules))
            known = known + (sym,)
        self.exprs = [rationalise(e) for e in exprs]
        super().__init__(_lambdify(known, self.exprs, modules, cse=True), steps)


class CompiledMatrix(MatrixFunction):
    """A SymPy Matrix compiled entry-wise into a function returning arrays of shape (P, rows, cols).

    Examples
    --------
    >>> import sympy as sp
    >>> x = sp.Symbol("x")
    >>> CompiledMatrix(sp.Matrix([[x, 0], [0, x**2]]), (x,), "numpy")(np.array([3.0]), P=1).tolist()
    [[[3.0, 0.0], [0.0, 9.0]]]
    """

    def __init__(self, matrix: sp.Matrix, args, modules):
        entries = [(i, j) for i in range(matrix.rows) for j in range(matrix.cols) if matrix[i, j] != 0]
        fn = CompiledExprs([matrix[i, j] for i, j in entries], args, modules) if entries else None
        super().__init__(fn, matrix.shape, entries)
