r"""``symattn codegen``: write a standalone closed-form solver module (numpy and scipy, or mpmath) for one activation."""

from __future__ import annotations

import shlex
from pathlib import Path

from ..formatting import finite_or_none
from .common import (EXIT_OK, add_activation_arg, add_command, add_diagonal_arg, finish_command, integer, print_json,
                     with_provenance)

HELP = "write a standalone closed-form solver module (numpy/scipy, or mpmath) for one activation"
DESCRIPTION = """
    Writes a self-contained Python module that solves the deterministic equivalents of
    E_attention and E_linear for one activation ACT (a catalog name or a SymPy expression in
    x), as 'symattn solve' does: any rank r (--rank), both diagonals (--diagonal) and the
    finite-p diagonal d_n (the module's --n N / n=N), the a1 = d = 0 reduction, float64 or
    mpmath (--backend mpmath: up to --dps digits, results as decimal strings). It needs only
    numpy and scipy at run time (the mpmath variant also mpmath; no sympy, no symattn).

    Everything is in closed form (docs/theory.md §5.8), with no quadrature: every integrand of
    the bulk and attention systems is reduced by exact polynomial division to coefficients on
    the Marchenko-Pastur moments and Stieltjes transforms at the roots of Delta, and these
    coefficients are printed from SymPy (sympy.codegen.ast, common-subexpression elimination).
    The run-time part is symattn's closed-form runtime copied verbatim (Newton with
    backtracking, continuation in gamma, the reduced a1 = d = 0 equation, implicit
    differentiation, the Woodbury step). A point where the closed form does not apply (a root
    of Delta on the support; 'symattn solve' then uses quadrature), or whose E would leave
    [0, 1], raises ConvergenceError (exit code 3). Its docstring carries the equations in
    LaTeX and the provenance (activation, symattn version, date).

    The module is a command line (python solver.py --c C [C ...] --gamma G [G ...]
    [geometry] [--n N] [--model attention|linear|both] [--json], printing the keys of
    'symattn solve --json') and a library (memorization_error, attention_error,
    linear_error, aligned, diagonal_constant). --dps D sets the digits of the Hermite
    constants (mpmath): rounded to float64, or, with --backend mpmath, the most digits the
    module computes with.

    JSON (with -o FILE): {"activation", "output", "lines", "dps", "diagonal", "rank", "backend",
    "a0", "a1", "nu", "d"}; with -o - (standard output): {"activation", "output": null, "source"}."""
EXAMPLES = [
    "# worked example: a Gaussian-windowed activation, from expression to numbers",
    "symattn hermite 'x*exp(-x**2/2)'                 # a1, nu, d",
    "symattn codegen 'x*exp(-x**2/2)' -o gauss_solver.py",
    "python gauss_solver.py --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json",
    "python -c 'import gauss_solver as s; print(s.memorization_error(0.5, [0.1, 1], "
    "model=\"both\", **s.aligned(1.0)))'",
    "symattn solve -a 'x*exp(-x**2/2)' --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json   # same numbers",
    "# more",
    "symattn codegen tanh -o tanh_solver.py --dps 50",
    "symattn codegen he3 --diagonal zero -o he3_solver.py",
    "symattn codegen tanh --backend mpmath --dps 40 -o tanh_mp.py   # python tanh_mp.py --c 1 --gamma 0.1 --dps 40",
    "python gauss_solver.py --c 0.5 --gamma 0.1 --n 2000 --aligned --snr 1   # finite-p diagonal d_n",
    "symattn codegen 'atan(x)' | less              # print the module",
]
NOTES = """The finite-p corrected theory (symattn solve --correction finite-p) is not generated.
    See docs/new_activation.md ("Studying a new activation") and docs/tutorials/symbolic.md."""


def add_parser(subparsers):
    p = add_command(subparsers, "codegen", help=HELP, description=DESCRIPTION, examples=EXAMPLES, notes=NOTES)
    add_activation_arg(p, positional=True)
    p.add_argument("-o", "--output", default="-", metavar="FILE",
                   help="where to write the module ('-' for standard output, the default)")
    p.add_argument("--dps", type=integer("dps", 15, 1000), default=30, metavar="D",
                   help="digits of the Hermite constants before rounding to float64, 15 <= D <= 1000 "
                        "(default 30)")
    add_diagonal_arg(p)
    p.add_argument("--backend", choices=("numpy", "mpmath"), default="numpy",
                   help="numpy: float64 (imports numpy and scipy); mpmath: up to --dps digits, decimal-string "
                        "results (also imports mpmath)")
    p.add_argument("--rank", type=integer("rank", 1, 8), default=1, metavar="R",
                   help="rank r of W_K^T W_Q - I, 1 <= R <= 8 (default 1; r > 1 takes the geometry as --gram)")
    return finish_command(p, run)


def run(args) -> int:
    from ..activations.activation import activation
    from ..codegen import command_line, folded_constants, generate_solver
    from ..errors import ParameterError

    if args.output != "-":
        try:
            parent = Path(args.output).expanduser().resolve().parent
            bad = not parent.is_dir() or Path(args.output).is_dir()
        except (OSError, ValueError, RuntimeError):  # a NUL byte, a symlink loop, ...
            bad = True
        if bad:
            raise ParameterError("output", args.output, "a file in an existing directory, or '-'")
    f = activation(args.activation)
    module = Path(args.output).stem if args.output != "-" else "solver"
    src = generate_solver(f, dps=args.dps, diagonal=args.diagonal, rank=args.rank, module=module, backend=args.backend,
                          command=command_line(args.activation, args.dps, args.diagonal, args.rank, args.output,
                                               args.backend))
    if args.output == "-":
        if args.json:
            return print_json(with_provenance({"activation": f.name, "output": None, "source": src}, _params(args)))
        print(src, end="")
        return EXIT_OK
    path = Path(args.output)
    try:
        from ..files import write_text

        write_text(path, src)  # atomically: an interrupted write leaves no truncated module
    except OSError as exc:
        raise ParameterError("output", args.output, "a writable file path", hint=str(exc)) from None
    k = folded_constants(f, args.dps, args.diagonal)
    info = {"activation": f.name, "output": str(path), "lines": src.count("\n"), "dps": args.dps,
            "diagonal": args.diagonal, "rank": args.rank, "backend": args.backend,
            **{key: finite_or_none(k[key]) for key in ("a0", "a1", "nu", "d")}}
    if args.json:
        return print_json(with_provenance(info, _params(args)))
    print(f"wrote {path} ({info['lines']} lines): standalone solver for {f.name} "
          f"(a1 = {info['a1']:.6g}, nu = {info['nu']:.6g}, d = {info['d']:.6g})")
    print(f"try: python {shlex.quote(str(path))} --c 0.5 --gamma 0.1 1 --json")
    return EXIT_OK


def _params(args) -> dict:
    return {"command": "codegen", "activation": args.activation, "output": args.output, "dps": args.dps,
            "diagonal": args.diagonal, "rank": args.rank, "backend": args.backend}
