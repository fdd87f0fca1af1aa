r"""The kernels of a generated solver, printed from the SymPy definitions with ``sympy.codegen.ast``.

Each kernel of :func:`symattn.backends.kernels.kernel_definition` becomes a
:class:`~sympy.codegen.ast.FunctionDefinition`: the intermediates (β, Δ) as
:class:`~sympy.codegen.ast.Assignment`, the outputs after common-subexpression elimination
(:meth:`sympy.codegen.ast.CodeBlock.cse`), and a :class:`~sympy.codegen.ast.Return` of the list of
outputs. It is printed by :class:`KernelPrinter`, the NumPy printer of the library's
``lambdify`` (:class:`symattn.backends.compile._ProductPowerPrinter`: x**3 -> x*x*x) with ``np.``
prefixes and floats written with 17 significant digits. The constants of the activation
(a1, s², d) are folded in first, as SymPy Floats at ``dps`` digits, so constant sub-expressions
are folded at that precision and only then rounded to float64.

A printed kernel takes the arguments of the library's compiled kernel, in the same order (so the
runtime calls both alike); the folded constants' arguments are accepted and not used. It is
wrapped like the library's: :class:`~symattn.backends.compile.ArrayFunction` (broadcasting) or
:class:`~symattn.backends.compile.MatrixFunction` (entries into a (P, rows, cols) array).
"""

from __future__ import annotations

import keyword
import re

import sympy as sp
from sympy.codegen.ast import Assignment, CodeBlock, Comment, FunctionDefinition, Return, Variable, none
from sympy.printing.numpy import NumPyPrinter

from ..backends.compile import _ProductPowerPrinter, rationalise
from ..backends.kernels import kernel_definition
from ..systems.symbols import c, rc

#: readable Python names of symbols whose SymPy names are not identifiers (others are sanitised)
NAMES = {"lambda": "lam", "sqrt_c": "rc", "m_2": "snr", "s^2": "s2", "a_1": "a1", "e_1": "e1", "e_2": "e2",
         "e_3": "e3"}

#: what each kernel computes (the comment above its printed function)
DESCRIPTIONS = {
    "bulk-residual": "the integrands g_1, g_2, g_3 of e_i = int g_i dmu_S (docs/theory.md §5.2)",
    "bulk-newton": "g_1..g_3 and the Jacobian dg_i/de_j (row-major), through beta and Delta",
    "bulk-sensitivity": "dg_i/dgamma at fixed e (implicit differentiation)",
    "delta": "Delta(lam) (the branch check: Delta > 0 on the support)",
    "resolvent-kernels": "q, k, r (docs/theory.md §5.3) and their total gamma-derivatives "
                         "d/dgamma + sum_j edot_j d/de_j",
    "linear": "E_LR = -gamma^2 F_LR'(gamma) in closed form (docs/theory.md §3)",
    "regular-tangent": "dg_i/dx_j (row-major) and dg_i/dgamma of the regular form, x = (P, e2, e3), "
                       "P = (gamma + s2 e2) e1",
    "regular-kernels": "q, k, r, the centred-trace integrands and the gamma-derivatives of q, k, r "
                       "given xdot (regular form)",
    "gamma": "the entries of Gamma = U^T H0^-1 U from the traces T (centred T_KQK) and the Gram matrix "
             "(docs/theory.md §6.5)",
    "gamma-dot": "the entries of dGamma/dgamma = sum_T dGamma/dT Tdot",
    "c-hat": "the entries of C_hat = [[0, C^T], [C, 0]] from the coefficients A = a1 Lambda (docs/theory.md §6.4)",
    "lambda": "the entries of Lambda(G) (docs/theory.md §6.2)",
}


class KernelPrinter(_ProductPowerPrinter):
    """The library's NumPy printer with ``np.`` prefixes and floats as ``repr(float)``."""

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


def function_name(key: str) -> str:
    """The name of the printed kernel ``key`` ('bulk-newton' -> '_kernel_bulk_newton')."""
    return "_kernel_" + key.replace("-", "_")


def _renaming(symbols):
    names = {}
    for s in symbols:
        new = sp.Symbol(identifier(s.name))
        if new in names.values() or re.fullmatch(r"x\d+", new.name):
            raise AssertionError(f"symbol name {s.name!r} clashes after renaming to {new.name!r}")
        names[s] = new
    return names


class MPKernelPrinter(KernelPrinter):
    """The kernel printer for the mpmath variant: rationals as ``_mpq(p, q)`` (mpmath numbers at the
    working precision, not float64 quotients), √ as ``_msqrt`` (elementwise mpmath.sqrt)."""

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


def print_definition(name: str, args, intermediates, exprs, values: dict, comment: str, mp: bool = False) -> str:
    r"""The source of a function ``name(*args)`` returning the list ``exprs`` (after the
    ``intermediates``, with CSE), the constants ``values`` folded in; ``mp``: printed for mpmath.

    Examples
    --------
    >>> x, y = sp.symbols("x y")
    >>> print(print_definition("_f", (x,), ((y, x + 1),), (y**2 / 3,), {}, "a test", mp=True).strip())
    # a test
    def _f(x):
        y = x + 1
        out0 = (_mpq(1, 3))*(y*y)
        return (out0,)
    """
    args = tuple(rc if a is c else a for a in args)
    steps = [(sym, rationalise(defn).xreplace(values)) for sym, defn in intermediates]
    exprs = [rationalise(e).xreplace(values) for e in exprs]
    names = _renaming(args + tuple(sym for sym, _ in steps))
    needed = set().union(*(sp.sympify(e, strict=True).free_symbols for e in exprs)) if exprs else set()
    used = []
    for sym, defn in reversed(steps):
        if sym in needed:
            used.insert(0, (sym, defn))
            needed |= defn.free_symbols
    outs = [sp.Symbol(f"out{i}") for i in range(len(exprs))]
    block = CodeBlock(*[Assignment(names[s], d.xreplace(names)) for s, d in used],
                      *[Assignment(o, sp.sympify(e, strict=True).xreplace(names)) for o, e in zip(outs, exprs)])
    if len(block.args) > 1:
        block = block.cse(symbols=sp.numbered_symbols("x"), order="none")
    body = CodeBlock(Comment(comment), *block.args, Return(sp.Tuple(*outs)))
    fn = FunctionDefinition(none, name, [Variable(names[a]) for a in args], body)
    src = (MPKernelPrinter() if mp else KernelPrinter()).doprint(fn)
    lines = src.splitlines()
    return "\n".join([lines[1].strip()] + [lines[0]] + lines[2:]) + "\n"


def print_kernel(key: str, values: dict, mp: bool = False):
    r"""The source of the kernel ``key`` with the constants ``values`` folded in, and its wrapper
    (:func:`print_definition`; ``mp``: printed for the mpmath variant).

    Returns ``(source, wrapper)``: the function definition, and the expression (in the names
    ``ArrayFunction``, ``MatrixFunction``) that makes it a kernel of the runtime's table.

    Examples
    --------
    >>> src, wrapper = print_kernel("delta", {})
    >>> print(src.splitlines()[1])
    def _kernel_delta(lam, e1, e2, e3, rc, gamma, a1, s2, d):
    >>> wrapper
    'ArrayFunction(_kernel_delta)'
    """
    k = kernel_definition(key)
    if k.matrix is not None:
        M = k.matrix
        entries = [(i, j) for i in range(M.rows) for j in range(M.cols) if M[i, j] != 0]
        exprs = [M[i, j] for i, j in entries]
    else:
        exprs = list(k.exprs)
    kind = key if k.matrix is None else key.rsplit("-r", 1)[0]
    name = function_name(key)
    src = print_definition(name, k.args, k.intermediates, exprs, values, f"{key}: {DESCRIPTIONS[kind]}", mp)
    if k.matrix is None:
        return src, f"ArrayFunction({name})"
    return src, f"MatrixFunction(ArrayFunction({name}), {tuple(k.matrix.shape)!r}, {tuple(entries)!r})"


__all__ = ["KernelPrinter", "MPKernelPrinter", "identifier", "function_name", "print_kernel", "print_definition"]
