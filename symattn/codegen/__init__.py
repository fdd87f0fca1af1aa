r"""Generated standalone solvers: one small module per activation (``symattn codegen``), in closed form.

:func:`generate_solver` writes, for one activation, a self-contained Python module that needs
numpy and scipy only (the mpmath variant, ``backend='mpmath'``, also mpmath) and computes what
:func:`symattn.solve` computes, the same way: the closed form where it applies (docs/theory.md §5.8),
the quadrature solver elsewhere, point by point (``errors='raise'`` or ``'nan'`` where neither
solves a point). It is assembled from

- the closed-form runtime :mod:`symattn.backends.closed_runtime` and the public functions and command line of
  :mod:`.standalone`, copied verbatim at the level of the AST (:mod:`.carry`), with copies of
  what they import: the arithmetic context (:class:`~symattn.backends.context.FloatContext`, or
  ``MPContext``), the quadrature solver, the Woodbury step and the coefficients 𝒜 = a1 Λ of
  :mod:`symattn.backends.solver`,
  the finite-p diagonal d_n of :mod:`symattn.activations.diagonal`, ConvergenceError;
- the activation's constants a0, a1, ν, s² = ν − a1², d (mpmath at ``dps`` digits; float64
  literals, or decimal strings of ``dps`` digits for the mpmath variant), its kinks, and f itself
  printed for numpy/scipy (for d_n);
- its closed kernels (:mod:`.closed_kernels`): every integrand of the bulk and attention
  systems reduced by exact polynomial division to coefficients on the basis of Marchenko–Pastur
  moments and Stieltjes transforms at the roots of Δ, printed with ``sympy.codegen.ast``
  (:func:`.printing.print_definition`), in the table ``CLOSED``; and the kernels of the quadrature
  solver, of the Woodbury step and of E_LR in the table ``KERNELS``.

The kernels take a1, s², d as arguments (so d may be the finite-p d_n of each point), and only the
family the activation needs is printed (Δ cubic, or linear when a1 = 0). tests/test_codegen.py
measures the agreement with :func:`symattn.solve`.
"""

from __future__ import annotations

import ast
import datetime as _dt
import shlex
from functools import lru_cache
from pathlib import Path

__all__ = ["generate_solver", "write_solver", "folded_constants", "command_line"]

#: the names a generated module defines itself (its own values replace the library's)
MODULE_CONSTANTS = ("ACTIVATION", "EXPRESSION", "A0", "A1", "NU", "S2", "D", "KINKS", "SUPERLINEAR", "DIAGONAL",
                    "RANK", "DPS", "ARITHMETIC", "CONTEXT", "SYMATTN_VERSION", "GENERATED", "_f_raw")
#: the arithmetic of each backend of a generated module
BACKENDS = {"numpy": "float64", "mpmath": "mpmath"}


class _Spec:
    """The numeric constants and symbols of one generation."""

    def __init__(self, f, dps: int, diagonal: str, rank: int):
        import mpmath
        import sympy as sp

        from ..model import kernel_constants
        from ..systems.symbols import a1, d, s2

        self.f, self.dps, self.diagonal, self.rank = f, dps, diagonal, rank
        self.kinks, self.superlinear = tuple(float(x) for x in f.kinks), bool(f.superlinear)
        k = kernel_constants(f, diagonal=diagonal, dps=dps)  # validates diagonal against f
        with mpmath.workdps(dps):
            consts = f.constants(dps)
            # quadrature noise below the working accuracy (e.g. a1 ~ 1e-41 for an even f) is an
            # exact zero: then the kernels lose those terms, as they do symbolically
            tol = mpmath.mpf(10) ** (2 - dps) * max(1, mpmath.sqrt(abs(consts["nu"])) + abs(consts["a0"]))
            self.a0, self.a1, self.s2, self.d = (mpmath.chop(mpmath.mpf(v), tol)
                                                 for v in (consts["a0"], k.a1, k.s2, k.d))
            self.nu = self.s2 + self.a1**2
        # D digits folded in: sympy Floats at that precision (constant products are folded at
        # dps digits, and printed rounded to float64)
        self.values = {a1: sp.Float(self.a1, dps), s2: sp.Float(self.s2, dps), d: sp.Float(self.d, dps)}
        for sym, v in list(self.values.items()):
            if v == 0:
                self.values[sym] = sp.Integer(0)


@lru_cache(maxsize=32)
def _spec(act, dps, diagonal, rank):
    return _Spec(act, dps, diagonal, rank)


def _check(f, dps, diagonal, rank, backend="numpy"):
    from ..activations.activation import activation
    from ..errors import ParameterError
    from ..model import check_diagonal, check_dps, check_int

    if backend not in BACKENDS:
        raise ParameterError("backend", backend, "'numpy' (float64) or 'mpmath'")
    dps = check_dps(dps)
    check_diagonal(diagonal)
    rank = check_int("rank", rank, 1, 8)
    act = activation(f)
    if act.expr is None:
        raise ParameterError("activation", act.name, "a catalog name or a SymPy expression in x (not a callable)")
    return act, dps, diagonal, rank


def folded_constants(f, dps: int = 30, diagonal: str = "f") -> dict:
    r"""The constants a generated solver for ``f`` folds in, as mpmath numbers at ``dps`` digits.

    a0 = E f(ξ), a1 = E[ξ f(ξ)], ν = E (f(ξ) − a0)², s² = ν − a1², d (docs/theory.md §1.2, §1.3),
    with values below the working accuracy set to exact zeros.

    Parameters
    ----------
    f : activation spec (catalog name or SymPy expression in x)
    dps : int
        mpmath digits, 15 <= dps <= 1000.
    diagonal : 'f' or 'zero'

    Returns
    -------
    dict
        Keys 'a0', 'a1', 'nu', 's2', 'd'.

    Examples
    --------
    >>> k = folded_constants("x*exp(-x**2/2)")
    >>> float(k["a1"]) == 2 ** -1.5, float(k["d"])
    (True, 0.0)
    """
    act, dps, diagonal, _ = _check(f, dps, diagonal, 1)
    spec = _spec(act, dps, diagonal, 1)
    return {"a0": spec.a0, "a1": spec.a1, "nu": spec.nu, "s2": spec.s2, "d": spec.d}


def command_line(name: str, dps: int = 30, diagonal: str = "f", rank: int = 1, output: str = "solver.py",
                 backend: str = "numpy") -> str:
    """The ``symattn codegen`` command that generates a module (recorded in its provenance).

    Examples
    --------
    >>> command_line("x*exp(-x**2/2)", diagonal="zero", output="my solver.py")
    "symattn codegen 'x*exp(-x**2/2)' -o 'my solver.py' --diagonal zero"
    """
    parts = ["symattn", "codegen", shlex.quote(name), "-o", shlex.quote(output)]
    if dps != 30:
        parts += ["--dps", str(dps)]
    if diagonal != "f":
        parts += ["--diagonal", diagonal]
    if rank != 1:
        parts += ["--rank", str(rank)]
    if backend != "numpy":
        parts += ["--backend", backend]
    return " ".join(parts)


def generate_solver(f, dps: int = 30, diagonal: str = "f", rank: int = 1, generated: str | None = None,
                    command: str | None = None, module: str = "solver", backend: str = "numpy") -> str:
    r"""The source of a standalone closed-form solver module specialised to the activation ``f``.

    The module computes E_A(γ) = −γ² F'(γ) (docs/theory.md §6) and E_LR (docs/theory.md §3) in
    closed form (docs/theory.md §5.8), as :func:`symattn.solve` does: any rank r, both diagonals,
    the finite-p diagonal d_n (``n=``), the a1 = d = 0 reduction (docs/theory.md §5.6), float64 or
    mpmath; every E it returns is in [0, 1], or it raises ConvergenceError.

    Parameters
    ----------
    f : activation spec (catalog name, SymPy expression string in x, sympy expr or Activation)
        Callables are refused (the module needs f's expression).
    dps : int
        Digits of the Hermite constants a1, s² = ν − a1², d (mpmath), 15 <= dps <= 1000: rounded to
        float64 (backend 'numpy'), or written as decimal strings and the largest digits the mpmath
        variant accepts.
    diagonal : 'f' or 'zero'
        d = lim f(√p)/√p (refused for superlinear f) or d = 0.
    rank : int
        Rank r of the weights W_K^T W_Q − I (Γ is (6+4r)×(6+4r)).
    generated : str, optional
        The date stamp written into the provenance (default: now, UTC).
    command : str, optional
        The command line recorded in the provenance.
    module : str
        The module name used in the usage examples of the docstring.
    backend : 'numpy' or 'mpmath'
        float64 (imports numpy and scipy), or mpmath at up to ``dps`` digits (also mpmath; results
        as mpmath numbers, decimal strings on the command line).

    Returns
    -------
    str
        Python source that imports only numpy, scipy (and mpmath) and the standard library.

    Examples
    --------
    >>> src = generate_solver("tanh", generated="2001-02-03 04:05 UTC")
    >>> namespace = {}
    >>> exec(compile(src, "tanh_solver.py", "exec"), namespace)
    >>> E = namespace["attention_error"](0.5, 1.0)
    >>> import symattn
    >>> bool(abs(E / symattn.memorization_error("tanh", 0.5, 1.0) - 1) < 1e-12)
    True
    """
    from .. import __version__

    act, dps, diagonal, rank = _check(f, dps, diagonal, rank, backend)
    return _generate(act, dps, diagonal, rank, __version__,
                     generated or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                     command or command_line(act.name, dps, diagonal, rank, backend=backend),
                     module if str(module).isidentifier() else "solver", BACKENDS[backend])


def write_solver(f, path, **kwargs) -> Path:
    """Write :func:`generate_solver` (same keywords) to ``path``, atomically
    (:func:`symattn.files.write_text`: an interrupted write leaves no truncated module); returns the path.

    Examples
    --------
    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     path = write_solver("tanh", os.path.join(tmp, "tanh_solver.py"), module="tanh_solver")
    ...     "import tanh_solver" in path.read_text()
    True
    """
    from ..files import write_text

    return write_text(Path(path), generate_solver(f, **kwargs))


# ============================================================================ assembly
@lru_cache(maxsize=None)
def _runtime(arithmetic: str):
    """The carried library source (the same for every activation and rank)."""
    from ..backends import compile as compile_
    from ..backends.context import MPContext
    from ..backends import closed_runtime
    from . import standalone
    from .carry import carry

    objects = [("ArrayFunction", compile_.ArrayFunction), ("MatrixFunction", compile_.MatrixFunction)]
    if arithmetic == "mpmath":
        objects.append(("MPContext", MPContext))
    from .carry import ALLOWED_IMPORTS

    allowed = ALLOWED_IMPORTS | ({"mpmath"} if arithmetic == "mpmath" else set())
    # the runtime with its quadrature fallback (symattn.backends.solver), as the library's solve runs it
    return carry([(closed_runtime, ("solution_quantities",)), (standalone, ())], objects=objects,
                 defined=MODULE_CONSTANTS + ("KERNELS", "CLOSED"), allowed=allowed)


@lru_cache(maxsize=None)
def _closed_source(linear: bool, mp: bool) -> str:
    """The printed closed kernels of one family (Δ cubic, or linear: a1 = 0) and the table CLOSED."""
    from .closed_kernels import KEYS, closed_definition
    from .printing import print_definition

    form = "linear" if linear else "cubic"
    sources, table = [], []
    for key in KEYS:
        k = closed_definition(key, linear)
        name = "_closed_" + key.replace("-", "_")
        sources.append(print_definition(name, k.args, k.intermediates, k.coefficients, {},
                                        f"closed kernel {key} (Delta {form}): coefficients on the basis", mp))
        atom = "None"
        if k.atom:
            sources.append(print_definition(name + "_atom", k.args, k.intermediates, k.atom, {},
                                            f"closed kernel {key}: the integrands at lam = 0 (the atom)", mp))
            atom = name + "_atom"
        table.append(f'    ({key!r}, {linear}): ClosedKernel({name}, {list(k.layout)!r}, {k.items}, {k.moments}, {k.n}, '
                     f'{atom}, {k.atom_items!r}),')
    modules = "mpmath" if mp else "numpy"
    return ("\n\n".join(s.rstrip() + "\n" for s in sources)
            + "\n\n# the closed kernels the runtime reads, CLOSED[ctx.lambdify_modules][(key, linear)]\n"
            + f"CLOSED = {{{modules!r}: {{\n" + "\n".join(table) + "\n}}\n")


@lru_cache(maxsize=None)
def _kernels_source(rank: int, mp: bool) -> str:
    """The printed kernels of the quadrature solver, of E_LR and of the Woodbury step (rank r), and the table
    KERNELS."""
    from ..backends.kernels import kernel_keys
    from .printing import print_kernel

    sources, table = [], []
    for key in kernel_keys(rank):
        src, wrapper = print_kernel(key, {}, mp)
        sources.append(src)
        table.append(f'    "{key}": {wrapper},')
    modules = "mpmath" if mp else "numpy"
    return ("\n\n".join(s.rstrip() + "\n" for s in sources)
            + "\n\n# the table the quadrature solver and the Woodbury step read, KERNELS[ctx.lambdify_modules][key]\n"
            + f"KERNELS = {{{modules!r}: {{\n" + "\n".join(table) + "\n}}\n")


def _f_source(act, spec) -> tuple:
    """The uncentred f printed for numpy/scipy (for d_n) and the imports it needs."""
    import sympy as sp
    from sympy.printing.numpy import SciPyPrinter

    from ..activations.catalog import X

    if spec.diagonal == "zero" or spec.superlinear:
        return ("def _f_raw(t):\n    \"\"\"f is not needed: the diagonal is zero or d = inf.\"\"\"\n"
                "    raise ValueError(\"no finite-p diagonal for this solver\")\n"), []
    pr = SciPyPrinter({"fully_qualified_modules": True, "allow_unknown_functions": False})
    body = pr.doprint(act.expr.xreplace({X: sp.Symbol("t", real=True)}))
    imports = []
    for mod in sorted(pr.module_imports):
        if mod == "numpy":
            continue
        imports.append(f"import {mod}")
    body = body.replace("numpy.", "np.")
    src = (f'def _f_raw(t):\n    """f(t) = {act.expr} on float64 arrays (uncentred; for the finite-p diagonal d_n)."""\n'
           f"    t = np.asarray(t, dtype=float)\n    return {body} + 0 * t\n")
    return src, imports


def _constants(act, spec, diagonal, rank, dps, version, generated, arithmetic):
    import mpmath

    def flt(x):
        if arithmetic == "mpmath":
            return repr(mpmath.nstr(x, dps + 5, min_fixed=-1, max_fixed=1)) if mpmath.isfinite(x) else repr(str(x))
        v = float(x)
        return repr(v) if v == v and abs(v) != float("inf") else f"float({str(v)!r})"

    kind = "decimal string" if arithmetic == "mpmath" else "float64"
    return "\n".join([
        f"ACTIVATION = {act.name!r}  # the activation (catalog name or SymPy expression in x)",
        f"EXPRESSION = {str(act.expr)!r}  # f(x), uncentred",
        f"A0 = {flt(spec.a0)}  # E f(xi), xi ~ N(0, 1): subtracted (the model uses f - a0); {kind}",
        f"A1 = {flt(spec.a1)}  # a1 = E[xi f(xi)]",
        f"NU = {flt(spec.nu)}  # nu = E (f(xi) - a0)^2",
        f"S2 = {flt(spec.s2)}  # s^2 = nu - a1^2",
        f"D = {flt(spec.d)}  # diagonal constant d",
        f"KINKS = {spec.kinks!r}  # where f is not analytic (panel edges of the d_n quadrature)",
        f"SUPERLINEAR = {spec.superlinear!r}  # f grows faster than linearly (d = inf)",
        f"DIAGONAL = {diagonal!r}  # 'f': d = lim f(sqrt p)/sqrt p (or d_n with n=); 'zero': d = 0",
        f"RANK = {rank}  # rank r of W_K^T W_Q - I",
        f"DPS = {dps}  # mpmath digits of the constants" + (" (the most this solver accepts)"
                                                          if arithmetic == "mpmath" else " before rounding to float64"),
        f"ARITHMETIC = {arithmetic!r}",
        f"SYMATTN_VERSION = {version!r}",
        f"GENERATED = {generated!r}",
    ]) + "\n"


def _section(title):
    return f"# {'=' * 76}\n# {title}\n# {'=' * 76}\n"


MP_HELPERS = '''def _mpq(p, q=1):
    """p/q as an mpmath number at the working precision (p an integer or a decimal string)."""
    return mpmath.mpf(p) / q


_msqrt = np.frompyfunc(mpmath.sqrt, 1, 1)   # elementwise mpmath square root (object arrays and scalars)
'''


def _generate(act, dps, diagonal, rank, version, generated, command, module="solver", arithmetic="float64") -> str:
    from .docstring import module_docstring

    spec = _spec(act, dps, diagonal, rank)
    mp = arithmetic == "mpmath"
    carried = _runtime(arithmetic)
    doc = module_docstring(spec, version, generated, command, module, arithmetic).replace('"""', "'''")
    if doc.endswith("\\"):
        doc += " "
    f_src, f_imports = _f_source(act, spec)
    imports = list(carried.imports) + [i for i in f_imports if i not in carried.imports]
    if mp and "import mpmath" not in imports:
        imports.append("import mpmath")
    stdlib = sorted(i for i in imports if i.split()[1].split(".")[0] not in ("numpy", "scipy", "mpmath"))
    third = [i for i in imports if i not in stdlib]
    parts = [f'r"""{doc}"""\n\nfrom __future__ import annotations\n\n' + "\n".join(stdlib) + "\n\n" + "\n".join(third),
             _section(f"the activation {act.name}") + _constants(act, spec, diagonal, rank, dps, version, generated,
                                                                 arithmetic) + "\n\n" + f_src]
    objects = "\n\n\n".join(f"# from {origin}\n{src.rstrip()}" for origin, src in carried.objects)
    objects += f"\n\n\nCONTEXT = {'MPContext' if mp else 'FloatContext'}  # the arithmetic of this solver\n"
    parts.append(_section("copied verbatim from symattn: what the runtime imports") + objects)
    linear = spec.a1 == 0
    body = (MP_HELPERS + "\n\n" if mp else "") + _kernels_source(rank, mp) + "\n\n" + _closed_source(linear, mp)
    if mp:   # the mpmath closed form starts from the float64 one and estimates its error in float64: both tables
        import re

        f64 = re.sub(r"\b_(closed|kernel)_", r"_f64_\1_", _kernels_source(rank, False) + "\n\n" + _closed_source(linear, False))
        f64 = f64.replace("KERNELS = {", "_KERNELS_F64 = {").replace("CLOSED = {", "_CLOSED_F64 = {")
        body = (f64 + "\n\n" + body + "\n\n# the float64 kernels too (the start and the error estimate of the mpmath closed form)\n"
                "KERNELS.update(_KERNELS_F64)\nCLOSED.update(_CLOSED_F64)\n")
    kernels = "# ---- generated: kernels ----\n" + body + "# ---- end of kernels ----\n"
    for i, (name, text) in enumerate(carried.bodies):
        parts.append(_section(f"copied verbatim from {name}") + text)
        if i == 0:   # after the runtime (the tables hold its ClosedKernel), before the command line
            parts.append(kernels)
    text = "\n\n\n".join(p.strip("\n") for p in parts) + "\n"
    _check_module(text)
    return text


def _check_module(text):
    """The assembled module parses and defines no top-level name twice."""
    seen = set()
    for node in ast.parse(text).body:
        names = set()
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names = {node.name}
        elif isinstance(node, ast.Assign):
            names = {t.id for t in node.targets if isinstance(t, ast.Name)}
        if names & seen:
            raise AssertionError(f"generated module defines {sorted(names & seen)} twice")
        seen |= names
