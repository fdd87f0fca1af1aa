r"""Generated standalone solvers: one small numpy-only module per activation (``symattn codegen``).

:func:`generate_solver` writes, for one activation, a self-contained Python module that needs
numpy only and computes what :func:`symattn.memorization_error` computes with the numpy
backend. There is one solver runtime: the module is assembled from

- the library's own source, copied verbatim at the level of the AST (:mod:`.carry`): the solver
  runtime :mod:`symattn.backends.solver` (Newton with backtracking, the damped fixed point, the
  a1 = d = 0 reduced path, quadrature doubling, the branch check, implicit differentiation and
  the Woodbury step), with copies of what it imports (the float64 context
  :class:`~symattn.backends.context.FloatContext`, the Marchenko–Pastur rule of
  :mod:`symattn.backends.quadrature`, the kernel wrappers of :mod:`symattn.backends.compile`,
  ConvergenceError), and the public functions and command line of :mod:`.standalone`;
- the activation's constants a0, a1, ν, s² = ν − a1², d (mpmath at ``dps`` digits, written as
  float64 literals);
- its kernels: each kernel of :func:`symattn.backends.kernels.kernel_definition` (the same SymPy
  expressions the library lambdifies) printed with ``sympy.codegen.ast`` and the library's NumPy
  printer, with a1, s², d folded in (:mod:`.printing`), in a table ``KERNELS`` that takes the
  place of the library's.

So the generated numbers differ from the library's only by the float64 rounding of the folded
constants (docs/theory.md §5, §6; tests/test_codegen.py measures the agreement).
"""

from __future__ import annotations

import ast
import datetime as _dt
import shlex
from functools import lru_cache
from pathlib import Path

__all__ = ["generate_solver", "write_solver", "folded_constants", "command_line"]

#: the names a generated module defines itself (its own values replace the library's)
MODULE_CONSTANTS = ("ACTIVATION", "EXPRESSION", "A0", "A1", "NU", "S2", "D", "DIAGONAL", "RANK", "DPS",
                    "SYMATTN_VERSION", "GENERATED")
#: the runtime's entry points that the public functions of :mod:`.standalone` replace
REPLACED_ENTRY_POINTS = ("attention_error", "bulk_error", "linear_error")


class _Spec:
    """The numeric constants and symbols of one generation."""

    def __init__(self, f, dps: int, diagonal: str, rank: int):
        import mpmath
        import sympy as sp

        from ..model import kernel_constants
        from ..systems.symbols import a1, d, s2

        self.f, self.dps, self.diagonal, self.rank = f, dps, diagonal, rank
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


def _check(f, dps, diagonal, rank):
    from ..activations.activation import activation
    from ..errors import ParameterError
    from ..model import check_diagonal, check_dps, check_int

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


def command_line(name: str, dps: int = 30, diagonal: str = "f", rank: int = 1, output: str = "solver.py") -> str:
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
    return " ".join(parts)


def generate_solver(f, dps: int = 30, diagonal: str = "f", rank: int = 1, generated: str | None = None,
                    command: str | None = None, module: str = "solver") -> str:
    r"""The source of a standalone solver module specialised to the activation ``f``.

    The module computes E_A(γ) = −γ² F'(γ) (docs/theory.md §6) and E_LR (docs/theory.md §3) with
    the library's solver runtime and ``f``'s printed kernels, like
    :func:`symattn.memorization_error` with ``backend='numpy'``.

    Parameters
    ----------
    f : activation spec (catalog name, SymPy expression string in x, sympy expr or Activation)
        Callables are refused (the module needs f's Hermite constants only, but its provenance
        needs an expression).
    dps : int
        Digits of the Hermite constants a1, s² = ν − a1², d (mpmath) before they are rounded to
        float64; 15 <= dps <= 1000. Run-time arithmetic is always float64.
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

    Returns
    -------
    str
        Python source that imports only numpy and the standard library.

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

    act, dps, diagonal, rank = _check(f, dps, diagonal, rank)
    return _generate(act, dps, diagonal, rank, __version__,
                     generated or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                     command or command_line(act.name, dps, diagonal, rank),
                     module if str(module).isidentifier() else "solver")


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
def _runtime():
    """The carried library source (the same for every activation and rank)."""
    from ..backends import compile as compile_, solver
    from . import standalone
    from .carry import carry

    return carry([(solver, REPLACED_ENTRY_POINTS), (standalone, ())],
                 objects=[("ArrayFunction", compile_.ArrayFunction), ("MatrixFunction", compile_.MatrixFunction)],
                 defined=MODULE_CONSTANTS + ("KERNELS",))


@lru_cache(maxsize=32)
def _kernels_source(act, dps, diagonal, rank):
    """The printed kernels of one activation and rank, and the table KERNELS."""
    from ..backends.kernels import kernel_keys
    from .printing import print_kernel

    spec = _spec(act, dps, diagonal, rank)
    sources, table = [], []
    for key in kernel_keys(rank):
        src, wrapper = print_kernel(key, spec.values)
        sources.append(src)
        table.append(f'    "{key}": {wrapper},')
    text = "\n\n\n".join(s.rstrip() for s in sources) + "\n"
    text += ("\n\n# the table the runtime reads, KERNELS[ctx.lambdify_modules][key]: these kernels take the place\n"
             "# of the library's lambdified ones (symattn.backends.kernels.KERNELS)\n"
             'KERNELS = {"numpy": {\n' + "\n".join(table) + "\n}}\n")
    return text


def _constants(act, spec, diagonal, rank, dps, version, generated):
    def flt(x):
        v = float(x)
        return repr(v) if v == v and abs(v) != float("inf") else f"float({str(v)!r})"

    return "\n".join([
        f"ACTIVATION = {act.name!r}  # the activation (catalog name or SymPy expression in x)",
        f"EXPRESSION = {str(act.expr)!r}  # f(x), uncentred",
        f"A0 = {flt(spec.a0)}  # E f(xi), xi ~ N(0, 1): subtracted (the model uses f - a0)",
        f"A1 = {flt(spec.a1)}  # a1 = E[xi f(xi)]",
        f"NU = {flt(spec.nu)}  # nu = E (f(xi) - a0)^2",
        f"S2 = {flt(spec.s2)}  # s^2 = nu - a1^2",
        f"D = {flt(spec.d)}  # diagonal constant d",
        f"DIAGONAL = {diagonal!r}  # 'f': d = lim f(sqrt p)/sqrt p; 'zero': d = 0",
        f"RANK = {rank}  # rank r of W_K^T W_Q - I",
        f"DPS = {dps}  # mpmath digits of the Hermite constants before rounding to float64",
        f"SYMATTN_VERSION = {version!r}",
        f"GENERATED = {generated!r}",
    ]) + "\n"


def _section(title):
    return f"# {'=' * 76}\n# {title}\n# {'=' * 76}\n"


def _generate(act, dps, diagonal, rank, version, generated, command, module="solver") -> str:
    from .docstring import module_docstring

    spec = _spec(act, dps, diagonal, rank)
    carried = _runtime()
    doc = module_docstring(spec, version, generated, command, module).replace('"""', "'''")
    if doc.endswith("\\"):
        doc += " "
    stdlib = sorted(i for i in carried.imports if i.split()[1].split(".")[0] not in ("numpy", "scipy"))
    third = [i for i in carried.imports if i not in stdlib]
    parts = [f'r"""{doc}"""\n\nfrom __future__ import annotations\n\n' + "\n".join(stdlib) + "\n\n" + "\n".join(third),
             _section(f"the activation {act.name}") + _constants(act, spec, diagonal, rank, dps, version, generated)]
    objects = "\n\n\n".join(f"# from {origin}\n{src.rstrip()}" for origin, src in carried.objects)
    parts.append(_section("copied verbatim from symattn: what the solver runtime imports") + objects)
    parts.append("# ---- generated: kernels ----\n" + _kernels_source(act, dps, diagonal, rank)
                 + "# ---- end of kernels ----\n")
    for name, body in carried.bodies:
        parts.append(_section(f"copied verbatim from {name}") + body)
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
