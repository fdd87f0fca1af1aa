r"""A safe expression language for activation and φ strings (docs/theory.md §1.2, §5).

:func:`parse_expression` reads a string with Python's :mod:`ast` parser (which only parses: it
runs nothing) and builds the SymPy expression node by node from a whitelist. No part of the
string ever reaches ``eval``, ``exec``, ``sympify`` or ``parse_expr``. :func:`as_expression`
does the same for a value that may also be a number or a SymPy object (the ``phi`` of
``bulk_trace``).

The language
------------
::

    expr    := number | name | expr op expr | ("+" | "-") expr | "(" expr ")"
             | function "(" expr ["," expr ...] ")"
             | "Piecewise(" "(" expr "," cond ")" ["," "(" expr "," cond ")" ...] ")"
    op      := "+" | "-" | "*" | "/" | "**" | "^"          (``^`` is a power, as ``**``)
    cond    := expr ("<" | "<=" | ">" | ">=") expr [...]   (chained: a < x < b)
             | "True" | "False" | cond "&" cond | cond "|" cond | "~" cond | "(" cond ")"
    number  := an int or decimal literal (0.1 is the exact 1/10, 1e-3 is 1/1000)
    name    := one of the allowed symbols (``x`` for an activation, ``lam`` for φ) or a
               constant of :data:`CONSTANTS` (pi, E)
    function:= a key of :data:`FUNCTIONS` (or of the ``functions`` argument)

Everything else is refused with an :class:`~symattn.errors.ExpressionError` (a
``ParameterError`` and an ``ActivationError``) whose message names the parameter and the
refused token or construct: attribute access, subscripts, lambdas, comprehensions, list, tuple,
set and dict displays, string and f-string literals, keyword and starred arguments, names and
functions outside the lists, ``//``, ``%``, ``@``, shifts, comparisons and ``& | ~`` outside a
Piecewise condition, ``and``/``or``/``not``, conditional expressions, ``:=``, imaginary literals,
comments (``#``), line breaks, backslashes and non-ASCII characters; ``nan``, ``oo``, ``inf``,
``zoo`` and any sub-expression that evaluates to one of them (``1/0``, ``log(0)``, ``0/0``) are
refused as "not finite".

Bounds (module constants)
-------------------------
- :data:`MAX_LENGTH` characters and :data:`MAX_NODES` syntax nodes, nesting depth :data:`MAX_DEPTH`;
- a literal has at most :data:`MAX_LITERAL_DIGITS` significant digits and is 0 or of magnitude
  in [10^-MAX_LITERAL_ORDER, 10^MAX_LITERAL_ORDER];
- a numeric exponent has absolute value at most :data:`MAX_EXPONENT` (so ``9**9**9``, whose
  exponent is 9**9 = 387420489, is refused before anything is computed), and no power of the
  result has a larger numeric exponent (``(x**200)**2``, ``x**200*x**200``);
- every exact rational built has numerator and denominator below 2**MAX_NUMBER_BITS (about the
  float64 range); a power of a number is refused *before* it is computed when its size would
  exceed this;
- every constant sub-expression (no symbol) is real, of magnitude at most :data:`MAX_MAGNITUDE`
  (``exp(10**30)``, ``sqrt(-1)``, ``log(-2)`` are refused);
- a whole parse is limited to ``EXPRESSION_SECONDS`` (:mod:`symattn.timeouts`) of wall clock.
"""

from __future__ import annotations

import ast
import re

import sympy as sp

from ..errors import ExpressionError
from ..timeouts import EXPRESSION_SECONDS, TIMEOUT, time_limited

__all__ = ["FUNCTIONS", "CONSTANTS", "NON_FINITE_NAMES", "MAX_LENGTH", "MAX_NODES", "MAX_DEPTH",
           "MAX_ARGS", "MAX_LITERAL_DIGITS", "MAX_LITERAL_ORDER", "MAX_EXPONENT", "MAX_NUMBER_BITS",
           "MAX_MAGNITUDE", "parse_expression", "as_expression", "non_finite_atoms", "clear_sympy_cache"]

#: longest accepted string, in characters
MAX_LENGTH = 2000
#: most syntax (expression) nodes of a string
MAX_NODES = 500
#: deepest nesting of syntax nodes
MAX_DEPTH = 100
#: most arguments of one call (Max, Min, Piecewise)
MAX_ARGS = 32
#: most significant digits of a numeric literal
MAX_LITERAL_DIGITS = 30
#: a nonzero literal lies in [10**-MAX_LITERAL_ORDER, 10**MAX_LITERAL_ORDER]
MAX_LITERAL_ORDER = 30
#: largest absolute value of a numeric exponent
MAX_EXPONENT = 256
#: numerators and denominators of the exact numbers built stay below 2**MAX_NUMBER_BITS
MAX_NUMBER_BITS = 1024
#: largest magnitude of a constant sub-expression (about the float64 maximum)
MAX_MAGNITUDE = sp.Float("1e308")

#: the functions a string may call: name -> (SymPy function, least and most arguments).
FUNCTIONS: dict = {
    "exp": (sp.exp, 1, 1), "log": (sp.log, 1, 2), "ln": (sp.log, 1, 1),
    "sqrt": (sp.sqrt, 1, 1), "cbrt": (sp.cbrt, 1, 1),
    "sin": (sp.sin, 1, 1), "cos": (sp.cos, 1, 1), "tan": (sp.tan, 1, 1),
    "cot": (sp.cot, 1, 1), "sec": (sp.sec, 1, 1), "csc": (sp.csc, 1, 1),
    "asin": (sp.asin, 1, 1), "acos": (sp.acos, 1, 1), "atan": (sp.atan, 1, 1),
    "acot": (sp.acot, 1, 1), "atan2": (sp.atan2, 2, 2),
    "sinh": (sp.sinh, 1, 1), "cosh": (sp.cosh, 1, 1), "tanh": (sp.tanh, 1, 1),
    "coth": (sp.coth, 1, 1), "sech": (sp.sech, 1, 1), "csch": (sp.csch, 1, 1),
    "asinh": (sp.asinh, 1, 1), "acosh": (sp.acosh, 1, 1), "atanh": (sp.atanh, 1, 1),
    "erf": (sp.erf, 1, 1), "erfc": (sp.erfc, 1, 1), "erfi": (sp.erfi, 1, 1),
    "Abs": (sp.Abs, 1, 1), "abs": (sp.Abs, 1, 1), "sign": (sp.sign, 1, 1),
    "Heaviside": (sp.Heaviside, 1, 2), "floor": (sp.floor, 1, 1), "ceiling": (sp.ceiling, 1, 1),
    "Max": (sp.Max, 1, MAX_ARGS), "Min": (sp.Min, 1, MAX_ARGS),
    "max": (sp.Max, 1, MAX_ARGS), "min": (sp.Min, 1, MAX_ARGS),
    "Piecewise": (sp.Piecewise, 1, MAX_ARGS),
}

#: the named constants a string may use.
CONSTANTS: dict = {"pi": sp.pi, "E": sp.E}

#: names refused as "not finite" (rather than as unknown names)
NON_FINITE_NAMES = {"nan", "NaN", "oo", "inf", "Inf", "infinity", "Infinity", "zoo"}
_NON_FINITE = {sp.nan: "nan (undefined, e.g. 0/0)", sp.oo: "oo (infinite)",
               sp.zoo: "zoo (complex infinity, e.g. a division by zero)",
               -sp.oo: "-oo (infinite)"}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_REFUSED_BINOPS = {ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<",
                   ast.RShift: ">>", ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^"}
_RELATIONS = {ast.Lt: sp.Lt, ast.LtE: sp.Le, ast.Gt: sp.Gt, ast.GtE: sp.Ge}
_CONSTRUCTS = {  # node type -> how a refusal names it
    ast.Attribute: "attribute access", ast.Subscript: "subscript", ast.Lambda: "lambda",
    ast.ListComp: "comprehension", ast.SetComp: "comprehension", ast.DictComp: "comprehension",
    ast.GeneratorExp: "comprehension", ast.List: "list", ast.Tuple: "tuple", ast.Set: "set",
    ast.Dict: "dict", ast.JoinedStr: "f-string", ast.FormattedValue: "f-string",
    ast.NamedExpr: "assignment expression ':='", ast.IfExp: "conditional expression (if/else)",
    ast.BoolOp: "boolean operator (and/or)", ast.Compare: "comparison", ast.Starred: "starred argument",
    ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Slice: "slice",
}
_FLOAT = re.compile(r"(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?")
_BAD_CHAR = re.compile(r"[^\x20-\x7e\t]|[#\\]")


def parse_expression(text: str, symbols: dict, parameter: str = "activation",
                     functions: dict | None = None) -> sp.Expr:
    r"""The SymPy expression of ``text`` in the safe expression language of this module.

    Parameters
    ----------
    text : str
        The string, e.g. ``"x*erf(x)"`` or ``"lam**2 + 1"``; ``^`` is read as ``**`` and a
        decimal literal as the exact rational it writes.
    symbols : dict
        The allowed variable names, ``{name: sympy.Symbol}`` (``{"x": X}`` for an activation).
    parameter : str
        The parameter named in error messages ('activation', 'phi').
    functions : dict, optional
        ``{name: (callable, least, most arguments)}``; default :data:`FUNCTIONS`.

    Returns
    -------
    sympy.Expr
        The expression, finite (no nan, ±oo, zoo), within the bounds of the module docstring.

    Raises
    ------
    ExpressionError
        ``text`` is not a string of the language, or breaks a bound; the message names
        ``parameter`` and the refused token or construct.

    Examples
    --------
    >>> x = sp.Symbol("x", real=True)
    >>> parse_expression("x^2 + 0.5*x", {"x": x})
    x**2 + x/2
    >>> parse_expression("max(x, 0) - erf(x)/sqrt(2)", {"x": x})
    -sqrt(2)*erf(x)/2 + Max(0, x)
    >>> parse_expression("__import__('os').system('true')", {"x": x})
    Traceback (most recent call last):
    ...
    symattn.errors.ExpressionError: invalid activation="__import__('os').system('true')": attribute access '__import__('os').system' is not allowed
    >>> parse_expression("9**9**9", {"x": x})
    Traceback (most recent call last):
    ...
    symattn.errors.ExpressionError: invalid activation='9**9**9': the exponent 387420489 of '9**9**9' exceeds 256 in absolute value
    """
    builder = _Builder(text, symbols, parameter, FUNCTIONS if functions is None else functions)
    try:
        out = time_limited(builder.run, EXPRESSION_SECONDS, reraise=True)
    except (RecursionError, MemoryError):
        builder.refuse("it is nested too deeply or too large to build")
    if out is TIMEOUT:
        clear_sympy_cache()
        builder.refuse(f"building it took longer than {EXPRESSION_SECONDS:g} s "
                       "(a constant too large or too close to a discontinuity to evaluate)")
    return out


def clear_sympy_cache() -> None:
    """Empty SymPy's caches: after a computation interrupted by a time limit (:mod:`symattn.timeouts`), an
    entry it left half made can make later, unrelated constructions run for ever (``exp(0.5)`` was seen to).

    Examples
    --------
    >>> clear_sympy_cache(); sp.exp(sp.Rational(1, 2))
    exp(1/2)
    """
    from sympy.core.cache import clear_cache

    clear_cache()


def as_expression(value, symbols: dict, parameter: str, functions: dict | None = None) -> sp.Expr:
    """A finite SymPy expression from a string (:func:`parse_expression`), a number or a SymPy object.

    Parameters
    ----------
    value : str, int, float or sympy.Expr
        A string is parsed by :func:`parse_expression`; a number or a SymPy expression is taken
        as it is (``sympify(..., strict=True)``: never a string).
    symbols, parameter, functions
        As for :func:`parse_expression`.

    Returns
    -------
    sympy.Expr
        The expression, finite.

    Raises
    ------
    ExpressionError
        ``value`` is of another type (a bool included), not an expression, or not finite.

    Examples
    --------
    >>> lam = sp.Symbol("lam")
    >>> as_expression("lam**2 + 1", {"lam": lam}, "phi"), as_expression(2, {"lam": lam}, "phi")
    (lam**2 + 1, 2)
    """
    if isinstance(value, str):
        return parse_expression(value, symbols, parameter, functions)
    shown = _shorten(str(value))
    if isinstance(value, bool) or not isinstance(value, (int, float, sp.Basic)):
        raise ExpressionError(parameter, shown, f"a string or a SymPy expression is needed, "
                              f"not {type(value).__name__}")
    expr = sp.sympify(value, strict=True)
    if not isinstance(expr, sp.Expr):
        raise ExpressionError(parameter, shown, f"{type(expr).__name__} is not an expression")
    bad = non_finite_atoms(expr)
    if bad:
        raise ExpressionError(parameter, shown, f"it is not finite: it contains {', '.join(bad)}")
    return expr


def non_finite_atoms(expr) -> list:
    """The non-finite numbers in ``expr``, each with what it means (empty if there are none).

    Parameters
    ----------
    expr : sympy.Basic

    Returns
    -------
    list of str
        One description for each of nan, oo, -oo, zoo that occurs in ``expr``.

    Examples
    --------
    >>> non_finite_atoms(sp.Symbol("x") + sp.nan), non_finite_atoms(sp.Integer(1) / 0)
    (['nan (undefined, e.g. 0/0)'], ['zoo (complex infinity, e.g. a division by zero)'])
    """
    return [desc for atom, desc in _NON_FINITE.items() if expr.has(atom)]


def _shorten(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _bits(q) -> int:
    """Bits of the larger of the numerator and denominator of a Rational."""
    return max(int(q.p).bit_length(), int(q.q).bit_length())


def _max_bits(expr) -> int:
    return max((_bits(q) for q in expr.atoms(sp.Rational)), default=0)


class _Builder:
    """One parse: the string, its names and the recursive construction from the syntax tree."""

    def __init__(self, text, symbols, parameter, functions):
        self.text = text
        self.symbols = dict(symbols)
        self.parameter = parameter
        self.functions = functions
        self.src = ""

    # ------------------------------------------------------------------ errors
    def refuse(self, problem: str):
        raise ExpressionError(self.parameter, _shorten(self.text) if isinstance(self.text, str)
                              else self.text, problem)

    def segment(self, node) -> str:
        seg = ast.get_source_segment(self.src, node) or type(node).__name__
        return _shorten(seg)

    def allowed_names(self) -> str:
        return ", ".join(sorted(self.symbols)) + " (constants " + ", ".join(CONSTANTS) + ")"

    # ------------------------------------------------------------------ entry
    def run(self) -> sp.Expr:
        text = self.text
        if not isinstance(text, str):
            self.refuse(f"a string is needed, not {type(text).__name__}")
        if len(text) > MAX_LENGTH:
            self.refuse(f"it is {len(text)} characters long, over the limit of {MAX_LENGTH}")
        bad = _BAD_CHAR.search(text)
        if bad:
            ch = bad.group()
            what = {"#": "a comment '#'", "\\": "a backslash", "\n": "a line break",
                    "\r": "a line break"}.get(ch, f"the character {ch!r}")
            self.refuse(f"{what} is not allowed")
        self.src = text.strip().replace("^", "**")
        if not self.src:
            self.refuse("the string is empty")
        try:
            tree = ast.parse(self.src, mode="eval")
        except SyntaxError as exc:
            self.refuse(f"it does not parse: {exc.msg}")
        except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, too deep for the parser
            self.refuse(f"it does not parse: {type(exc).__name__}")
        n = sum(isinstance(node, ast.expr) for node in ast.walk(tree))
        if n > MAX_NODES:
            self.refuse(f"it has {n} syntax nodes, over the limit of {MAX_NODES}")
        expr = self.expr(tree.body, 0)
        if not isinstance(expr, sp.Expr):
            self.refuse(f"it is a {type(expr).__name__}, not an expression")
        return expr

    # ------------------------------------------------------------------ expressions
    def expr(self, node, depth: int) -> sp.Expr:
        if depth > MAX_DEPTH:
            self.refuse(f"it is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, ast.Constant):
            out = self.literal(node)
        elif isinstance(node, ast.Name):
            out = self.name(node)
        elif isinstance(node, ast.UnaryOp):
            out = self.unary(node, depth)
        elif isinstance(node, ast.BinOp):
            out = self.binary(node, depth)
        elif isinstance(node, ast.Call):
            out = self.call(node, depth)
        else:
            what = _CONSTRUCTS.get(type(node), type(node).__name__)
            hint = " (comparisons only as Piecewise conditions)" if isinstance(node, ast.Compare) else ""
            self.refuse(f"{what} '{self.segment(node)}' is not allowed{hint}")
        return self.check(out, node)

    def literal(self, node):
        v = node.value
        if isinstance(v, bool) or v is None or v is Ellipsis:
            self.refuse(f"the literal {v!r} is not allowed here")
        if isinstance(v, (str, bytes)):
            self.refuse(f"the string literal {self.segment(node)} is not allowed")
        if isinstance(v, complex):
            self.refuse(f"the imaginary literal {self.segment(node)} is not allowed (an {self.parameter} is real)")
        if isinstance(v, int):
            if abs(v) > 10**MAX_LITERAL_ORDER:
                self.refuse(f"the literal {self.segment(node)} exceeds 1e{MAX_LITERAL_ORDER}")
            return sp.Integer(v)
        # a float: its exact decimal value from the text
        seg = (ast.get_source_segment(self.src, node) or "").replace("_", "")
        m = _FLOAT.fullmatch(seg)
        if not m or not (m.group(1) or m.group(2)):
            self.refuse(f"the literal {seg!r} is not a decimal number")
        digits = (m.group(1) or "") + (m.group(2) or "")
        exp10 = int(m.group(3) or 0) - len(m.group(2) or "")
        sig = digits.lstrip("0")
        if not sig:
            return sp.Integer(0)
        stripped = sig.rstrip("0")
        exp10 += len(sig) - len(stripped)
        order = len(stripped) + exp10 - 1
        if len(stripped) > MAX_LITERAL_DIGITS:
            self.refuse(f"the literal {seg} has more than {MAX_LITERAL_DIGITS} significant digits")
        if abs(order) > MAX_LITERAL_ORDER:
            self.refuse(f"the literal {seg} is outside 1e-{MAX_LITERAL_ORDER} <= |v| <= 1e{MAX_LITERAL_ORDER}")
        num = int(stripped)
        return sp.Integer(num) * sp.Integer(10)**exp10 if exp10 >= 0 else sp.Rational(num, 10**-exp10)

    def name(self, node):
        nm = node.id
        if nm in self.symbols:
            return self.symbols[nm]
        if nm in CONSTANTS:
            return CONSTANTS[nm]
        if nm in NON_FINITE_NAMES:
            self.refuse(f"{nm!r} is not finite: an {self.parameter} must be finite")
        if nm in self.functions:
            self.refuse(f"the function {nm!r} must be called, e.g. {nm}({next(iter(self.symbols), 'x')})")
        self.refuse(f"unknown name {nm!r}: the allowed names are {self.allowed_names()}")

    def unary(self, node, depth):
        if isinstance(node.op, (ast.UAdd, ast.USub)):
            v = self.expr(node.operand, depth + 1)
            return self.evaluate(lambda: -v if isinstance(node.op, ast.USub) else v, node)
        op = "not" if isinstance(node.op, ast.Not) else "~"
        self.refuse(f"the operator {op!r} in '{self.segment(node)}' is not allowed")

    def binary(self, node, depth):
        op = type(node.op)
        if op not in _BINOPS:
            sym = _REFUSED_BINOPS.get(op, op.__name__)
            self.refuse(f"the operator {sym!r} in '{self.segment(node)}' is not allowed")
        a = self.expr(node.left, depth + 1)
        b = self.expr(node.right, depth + 1)
        if op is ast.Pow:
            return self.power(a, b, node)
        fn = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
              ast.Div: lambda: a / b}[op]
        return self.evaluate(fn, node)

    def power(self, base, expo, node):
        """base**expo after the exponent and size bounds (checked before computing)."""
        if not expo.free_symbols:
            if expo.is_Rational:
                size = abs(expo)
            else:
                v = self.evaluate(lambda: expo.evalf(15), node)
                size = abs(v) if v.is_Number else None
            if size is None or not size.is_finite:
                self.refuse(f"the exponent {expo} of '{self.segment(node)}' is not a finite number")
            if size > MAX_EXPONENT:
                self.refuse(f"the exponent {expo} of '{self.segment(node)}' exceeds {MAX_EXPONENT} "
                            "in absolute value")
            if expo.is_Rational:
                if not base.free_symbols:
                    cbits = _max_bits(base)
                elif base.is_Mul:
                    cbits = max((_max_bits(f) for f in base.args if not f.free_symbols), default=0)
                else:
                    cbits = 0
                if cbits * abs(int(expo.p)) > MAX_NUMBER_BITS:
                    self.refuse(f"'{self.segment(node)}' would build a number of about "
                                f"{cbits * abs(int(expo.p))} bits, over {MAX_NUMBER_BITS}")
        return self.evaluate(lambda: base**expo, node)

    def call(self, node, depth):
        if not isinstance(node.func, ast.Name):
            what = _CONSTRUCTS.get(type(node.func), "calling")
            self.refuse(f"{what} '{self.segment(node.func)}' is not allowed")
        nm = node.func.id
        if nm not in self.functions:
            if nm in self.symbols or nm in CONSTANTS:
                self.refuse(f"{nm!r} is not a function")
            self.refuse(f"unknown function {nm!r}: the allowed functions are "
                        + ", ".join(sorted(self.functions)))
        if node.keywords:
            kw = node.keywords[0]
            self.refuse(f"the keyword argument '{self.segment(kw)}' of {nm} is not allowed"
                        if kw.arg else f"the argument '**{self.segment(kw.value)}' of {nm} is not allowed")
        for a in node.args:
            if isinstance(a, ast.Starred):
                self.refuse(f"the starred argument '{self.segment(a)}' of {nm} is not allowed")
        fn, least, most = self.functions[nm]
        if not least <= len(node.args) <= most:
            want = str(least) if least == most else f"{least} to {most}"
            self.refuse(f"{nm} takes {want} argument(s), got {len(node.args)}")
        if fn is sp.Piecewise:
            pairs = [self.piece(a, depth + 1) for a in node.args]
            return self.evaluate(lambda: sp.Piecewise(*pairs), node)
        args = [self.expr(a, depth + 1) for a in node.args]
        if fn in (sp.sqrt, sp.cbrt):  # a fractional power: the size bound of power()
            return self.power(args[0], sp.Rational(1, 2 if fn is sp.sqrt else 3), node)
        return self.evaluate(lambda: fn(*args), node)

    # ------------------------------------------------------------------ Piecewise conditions
    def piece(self, node, depth):
        if not (isinstance(node, ast.Tuple) and len(node.elts) == 2):
            self.refuse(f"Piecewise takes (expression, condition) pairs, not '{self.segment(node)}'")
        return self.expr(node.elts[0], depth + 1), self.condition(node.elts[1], depth + 1)

    def condition(self, node, depth):
        if depth > MAX_DEPTH:
            self.refuse(f"it is nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            return sp.true if node.value else sp.false
        if isinstance(node, ast.Compare):
            terms = [self.expr(node.left, depth + 1)] + [self.expr(c, depth + 1) for c in node.comparators]
            rels = []
            for op, lhs, rhs in zip(node.ops, terms[:-1], terms[1:]):
                if type(op) not in _RELATIONS:
                    self.refuse(f"the comparison '{self.segment(node)}' is not allowed: use <, <=, >, >=")
                rels.append(self.evaluate(lambda: _RELATIONS[type(op)](lhs, rhs), node))
            return self.evaluate(lambda: sp.And(*rels), node)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.BitAnd, ast.BitOr)):
            a, b = self.condition(node.left, depth + 1), self.condition(node.right, depth + 1)
            return self.evaluate(lambda: (sp.And if isinstance(node.op, ast.BitAnd) else sp.Or)(a, b), node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            a = self.condition(node.operand, depth + 1)
            return self.evaluate(lambda: sp.Not(a), node)
        self.refuse(f"the Piecewise condition '{self.segment(node)}' is not allowed: use a comparison "
                    "(<, <=, >, >=), True, False, or & | ~ of conditions")

    # ------------------------------------------------------------------ evaluation and bounds
    def evaluate(self, fn, node):
        """``fn()`` (a SymPy construction); any exception becomes a refusal naming the node."""
        try:
            return fn()
        except ExpressionError:
            raise
        except (RecursionError, MemoryError):
            raise
        except Exception as exc:
            self.refuse(f"'{self.segment(node)}' cannot be evaluated ({type(exc).__name__}: {exc})")

    def check(self, out, node):
        """The bounds of the module docstring on the result of one node."""
        if not isinstance(out, sp.Expr):
            self.refuse(f"'{self.segment(node)}' is a {type(out).__name__}, not an expression")
        bad = non_finite_atoms(out)
        if bad:
            self.refuse(f"'{self.segment(node)}' is not finite: it gives {', '.join(bad)}")
        if out.is_Rational:
            if _bits(out) > MAX_NUMBER_BITS:
                self.refuse(f"'{self.segment(node)}' is a number of more than {MAX_NUMBER_BITS} bits")
            return out
        if _max_bits(out) > MAX_NUMBER_BITS:
            self.refuse(f"'{self.segment(node)}' holds a number of more than {MAX_NUMBER_BITS} bits")
        for p in out.atoms(sp.Pow):
            if p.exp.is_Rational and abs(p.exp) > MAX_EXPONENT:
                self.refuse(f"'{self.segment(node)}' gives the power {_shorten(str(p))} whose exponent "
                            f"exceeds {MAX_EXPONENT} in absolute value")
        if not out.free_symbols:
            re_, im_ = self.evaluate(lambda: out.evalf(8, chop=True).as_real_imag(), node)
            if im_.is_Number and im_ != 0:
                self.refuse(f"the constant '{self.segment(node)}' is not real (it is {out})")
            if re_.is_Number and (re_ is sp.nan or abs(re_) > MAX_MAGNITUDE):
                self.refuse(f"the constant '{self.segment(node)}' is too large (over {MAX_MAGNITUDE:.0e})")
        return out
