r"""The library's SymPy code printers: NumPy and mpmath source from SymPy expressions and
:mod:`sympy.codegen.ast` blocks.

- :class:`ProductPowerPrinter`: SymPy's NumPy printer with small integer powers written as
  products (x**3 -> x*x*x), which numpy evaluates many times faster than ``power`` and which stays
  exact on object arrays of mpmath numbers (the printer of :mod:`symattn.backends.compile`);
- :class:`KernelPrinter`: the same with ``np.`` prefixes and floats as ``repr(float)`` (the kernels of a
  generated solver, :mod:`symattn.codegen.printing`, and the compiled explicit formulas of
  :meth:`symattn.systems.explicit.ExplicitError.compile`);
- :class:`MPKernelPrinter`: the mpmath variant: rationals as ``_mpq(p, q)`` (mpmath numbers at the
  working precision), √ as ``_msqrt``.

They print SymPy objects only (text; no numerics), so they live with the systems, below every
layer that prints code.
"""

from __future__ import annotations

import keyword
import re

import sympy as sp
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import PRECEDENCE

__all__ = ["ProductPowerPrinter", "KernelPrinter", "MPKernelPrinter", "NAMES", "identifier"]


class ProductPowerPrinter(NumPyPrinter):
    """NumPy printer writing small integer powers as products (x**3 -> x*x*x, x**-2 -> 1/(x*x)).

    numpy's ``power`` with a float exponent is many times slower than multiplication; the
    same source also stays exact for mpmath object arrays.

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> ProductPowerPrinter().doprint(x**3 + 1 / x**2)
    '(x*x*x) + (1/(x*x))'
    """

    def _print_Pow(self, expr, rational=False):
        base, exp = expr.as_base_exp()
        if exp.is_Integer and 1 <= abs(int(exp)) <= 6:
            b = self.parenthesize(base, PRECEDENCE["Mul"] + 1)
            prod = "*".join([b] * abs(int(exp)))
            return f"({prod})" if exp > 0 else f"(1/({prod}))"
        return super()._print_Pow(expr, rational=rational)


class KernelPrinter(ProductPowerPrinter):
    """The library's NumPy printer with ``np.`` prefixes and floats as ``repr(float)``.

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> KernelPrinter().doprint(sp.sqrt(x) + sp.Float(0.1) * x**2)
    'np.sqrt(x) + 0.1*(x*x)'
    """

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "inline": True, "allow_unknown_functions": False})

    def _module_format(self, fqn, register=True):
        if fqn.startswith("numpy."):
            return "np." + fqn[len("numpy."):]
        return NumPyPrinter._module_format(self, fqn, register)

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Infinity(self, expr):
        return "np.inf"

    def _print_NegativeInfinity(self, expr):
        return "-np.inf"

    def _print_Assignment(self, expr):
        # NumPyPrinter inherits ArrayPrinter._print_Assignment (for array expressions), which
        # drops the denominators of ordinary quotients: print ``lhs = rhs`` plainly
        return f"{self._print(expr.lhs)} = {self._print(expr.rhs)}"

    def _print_Comment(self, expr):
        return f"# {expr.text}"


class MPKernelPrinter(KernelPrinter):
    """The kernel printer for the mpmath variant: rationals as ``_mpq(p, q)`` (mpmath numbers at the
    working precision, not float64 quotients), √ as ``_msqrt`` (elementwise mpmath.sqrt).

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> MPKernelPrinter().doprint(sp.Rational(1, 3) * sp.sqrt(x))
    '(_mpq(1, 3))*_msqrt(x)'
    """

    def _print_Rational(self, expr):
        return f"_mpq({expr.p}, {expr.q})"

    def _print_Half(self, expr):
        return "_mpq(1, 2)"

    def _print_Float(self, expr):
        return f"_mpq({str(expr)!r})"

    def _print_Pow(self, expr, rational=False):
        if expr.exp == sp.S.Half:
            return f"_msqrt({self._print(expr.base)})"
        if expr.exp == -sp.S.Half:
            return f"(1/_msqrt({self._print(expr.base)}))"
        return super()._print_Pow(expr, rational=rational)

    #: numpy functions that act exactly on object arrays of mpmath numbers (comparisons, selection)
    EXACT = frozenset({"numpy.select", "numpy.where", "numpy.greater", "numpy.greater_equal", "numpy.less",
                       "numpy.less_equal", "numpy.equal", "numpy.not_equal", "numpy.logical_and",
                       "numpy.logical_or", "numpy.logical_not", "numpy.nan", "numpy.inf"})

    def _module_format(self, fqn, register=True):
        if fqn == "numpy.sqrt":
            return "_msqrt"
        if fqn in self.EXACT:
            return super()._module_format(fqn, register)
        raise ValueError(f"the mpmath kernels cannot print {fqn}")


#: readable Python names of symbols whose SymPy names are not identifiers (others are sanitised)
NAMES = {"lambda": "lam", "sqrt_c": "rc", "m_2": "snr", "s^2": "s2", "a_1": "a1", "e_1": "e1", "e_2": "e2",
         "e_3": "e3"}


def identifier(name: str) -> str:
    """A Python identifier for a SymPy symbol name ('T_{QK}^{(1)}' -> 'T_QK1', 'lambda' -> 'lam').

    Examples
    --------
    >>> identifier("T_{QK}^{(1)}"), identifier("lambda"), identifier("G_{0,2}")
    ('T_QK1', 'lam', 'G_02')
    """
    out = NAMES.get(name) or re.sub(r"[^0-9A-Za-z_]+", "", name)
    if not out.isidentifier() or keyword.iskeyword(out):
        out = "_" + out
    return out
