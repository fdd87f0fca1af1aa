r"""The kernels of a generated solver, printed from the SymPy definitions with ``sympy.codegen.ast``.

Each kernel of :func:`symattn.backends.kernels.kernel_definition` becomes a
:class:`~sympy.codegen.ast.FunctionDefinition`: the intermediates (β, Δ) as
:class:`~sympy.codegen.ast.Assignment`, the outputs after common-subexpression elimination
(:meth:`sympy.codegen.ast.CodeBlock.cse`), and a :class:`~sympy.codegen.ast.Return` of the list of
outputs. It is printed by :class:`KernelPrinter`, the NumPy printer of the library's
``lambdify`` (:class:`symattn.systems.printing.ProductPowerPrinter`: x**3 -> x*x*x) with ``np.``
prefixes and floats written with 17 significant digits. The constants of the activation
(a1, s², d) are folded in first, as SymPy Floats at ``dps`` digits, so constant sub-expressions
are folded at that precision and only then rounded to float64.

A printed kernel takes the arguments of the library's compiled kernel, in the same order (so the
runtime calls both alike); the folded constants' arguments are accepted and not used. It is
wrapped like the library's: :class:`~symattn.backends.compile.ArrayFunction` (broadcasting) or
:class:`~symattn.backends.compile.MatrixFunction` (entries into a (P, rows, cols) array).
"""

from __future__ import annotations

import re

import sympy as sp
from sympy.codegen.ast import Assignment, CodeBlock, Comment, FunctionDefinition, Return, Variable, none

from ..backends.compile import rationalise
from ..backends.kernels import kernel_definition
# the printers live with the systems (pure SymPy), so that every layer that prints code can use them
from ..systems.printing import NAMES, KernelPrinter, MPKernelPrinter, identifier
from ..systems.symbols import c, rc

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


__all__ = ["KernelPrinter", "MPKernelPrinter", "NAMES", "identifier", "function_name", "print_kernel",
           "print_definition"]
