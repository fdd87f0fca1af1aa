r"""From what the user gives to a canonical expression in x (docs/theory.md §1.2).

:func:`parse_spec` is the one entry: a catalog name, an expression string, a SymPy expression
(or one-variable ``Lambda``) or a Python callable becomes a :class:`ParsedSpec`, whose ``expr``
is a SymPy expression in the real symbol :data:`~symattn.activations.catalog.X` only (None for
a callable). All parsing of strings happens in this module.

Strings are read by the safe expression language of :mod:`.expression` (a whitelist over Python's
``ast``: nothing of the string is ever evaluated), with ``^`` as power and decimal literals as
exact rationals (0.1 -> 1/10); besides the functions of
:data:`~symattn.activations.expression.FUNCTIONS`, the helpers ``relu``, ``sigmoid``,
``softplus`` and ``Phi`` (the normal distribution function) may be called. A refused string
raises :class:`~symattn.errors.ExpressionError` (a ParameterError and an ActivationError) naming
the parameter 'activation' and the refused token.
"""

from __future__ import annotations

import re
from typing import Callable, NamedTuple

import sympy as sp

from ..errors import ActivationError
from .catalog import CATALOG, X, catalog_name, unknown_name_error
from .expression import FUNCTIONS, NON_FINITE_NAMES, non_finite_atoms, parse_expression

__all__ = ["ParsedSpec", "parse_spec", "ACTIVATION_FUNCTIONS"]

# Helpers allowed inside expression strings, besides expression.FUNCTIONS.
_y = sp.Symbol("y", real=True)
#: the functions an activation string may call: name -> (callable, least, most arguments)
ACTIVATION_FUNCTIONS = {
    **FUNCTIONS,
    "relu": (sp.Lambda(_y, sp.Max(_y, 0)), 1, 1),
    "sigmoid": (sp.Lambda(_y, 1 / (1 + sp.exp(-_y))), 1, 1),
    "softplus": (sp.Lambda(_y, sp.log(1 + sp.exp(_y))), 1, 1),
    "Phi": (sp.Lambda(_y, (1 + sp.erf(_y / sp.sqrt(2))) / 2), 1, 1),
}


class ParsedSpec(NamedTuple):
    """A parsed activation spec: its name, expression, kind and (for a callable) the function."""

    name: str
    expr: sp.Expr | None
    kind: str               # 'catalog', 'expression' or 'callable'
    func: Callable | None


def parse_spec(spec) -> ParsedSpec:
    """Turn an activation spec into a name and a canonical SymPy expression in x.

    Parameters
    ----------
    spec : str, sympy.Basic or callable
        A catalog name or alias (case-insensitive), an expression string in ``x``, a SymPy
        expression (any symbol named ``x`` is identified with the real
        :data:`~symattn.activations.catalog.X`) or one-variable ``Lambda``, or a callable.

    Returns
    -------
    ParsedSpec
        ``(name, expr, kind, func)``: for a catalog name ``(name, CATALOG[name], 'catalog',
        None)``; for a string ``(stripped string, expr, 'expression', None)``; for a SymPy
        object ``(str(expr), expr, 'expression', None)``; for a callable ``(its __name__, None,
        'callable', spec)``.

    Raises
    ------
    ActivationError
        An empty string, an unknown name (with close matches), a symbol other than x, a
        non-finite expression (nan, oo, zoo), a constant, or an object of another type. A string
        outside the expression language (it does not parse, an unknown function or name, a
        refused construct, a bound exceeded) raises its subclass ExpressionError, which is also
        a ParameterError of the parameter 'activation'.

    Examples
    --------
    >>> parse_spec("Swish")[:3]
    ('silu', x/(1 + exp(-x)), 'catalog')
    >>> parse_spec("x^2 + 0.5*x").expr
    x**2 + x/2
    >>> parse_spec(abs).kind
    'callable'
    """
    if isinstance(spec, str):
        nm, expr, kind = _parse_string(spec)
        return ParsedSpec(nm, _canonical_expr(expr, spec), kind, None)
    if isinstance(spec, sp.Basic):
        if isinstance(spec, sp.Lambda):
            if len(spec.variables) != 1:
                raise ActivationError(f"a Lambda activation takes one variable, got {spec}")
            spec = spec.expr.xreplace({spec.variables[0]: X})
        if not isinstance(spec, sp.Expr):
            raise ActivationError(f"the SymPy object {spec!r} is not an expression in x")
        expr = _canonical_expr(spec, str(spec))
        return ParsedSpec(str(expr), expr, "expression", None)
    if callable(spec):
        return ParsedSpec(getattr(spec, "__name__", None) or type(spec).__name__, None, "callable", spec)
    raise ActivationError(
        f"cannot build an activation from {spec!r} (type {type(spec).__name__}): give a "
        "catalog name, an expression string in x, a sympy expression or a callable")


def _parse_string(spec: str):
    """(name, expression, kind) of a catalog name or an expression string (not yet canonical)."""
    s = spec.strip()
    if not s:
        raise ActivationError("empty activation string: give a catalog name or an expression in x")
    name = catalog_name(s)
    if name is not None:
        return name, CATALOG[name], "catalog"
    if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", s) and s != "x" and s not in NON_FINITE_NAMES:
        raise unknown_name_error(s)
    expr = parse_expression(s, {"x": X}, parameter="activation", functions=ACTIVATION_FUNCTIONS)
    return s, expr, "expression"


def _canonical_expr(expr, label: str):
    """Replace any Symbol named 'x' by the real X; refuse other free symbols, non-finite values and constants."""
    unknown = sorted({type(a).__name__ for a in expr.atoms(sp.core.function.AppliedUndef)})
    if unknown:
        raise ActivationError(f"unknown function(s) {', '.join(unknown)} in the activation {label}: "
                              "use SymPy functions (tanh, erf, exp, Max, Abs, ...) or a catalog name")
    syms = expr.free_symbols
    bad = sorted(str(s) for s in syms if s.name != "x")
    if bad:
        raise ActivationError(
            f"the activation {label!r} must be an expression in the single variable x; "
            f"it also contains {', '.join(bad)}")
    expr = expr.xreplace({s: X for s in syms if s.name == "x" and s != X})
    bad = non_finite_atoms(expr)
    if bad:
        raise ActivationError(f"the activation {label!r} is not finite: it contains {', '.join(bad)}")
    if not expr.has(X):
        raise ActivationError(f"the activation {label!r} is constant: its centred form f - E f(xi) is 0")
    return expr
