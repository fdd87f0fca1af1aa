r"""The ``symattn`` command line: the command registry and :func:`main`.

Usage: ``symattn COMMAND [options]``; ``symattn COMMAND --help`` explains each command.
This package is the only place that parses arguments; no library module imports it.

Modules
-------
common : the parser class, exit codes, shared options and output helpers (at the bottom).
hermite, solve, simulate, demo, reproduce, codegen, verify : one module per command, each with
    ``add_parser(subparsers)`` and ``run(args)``.
__main__ : ``python -m symattn.cli``. Entry points (``__main__`` modules, the console script
    ``symattn = "symattn.cli:main"``) are command lines too: they may import this package.

Exit codes
----------
0  success
1  the command ran but reports a failure (e.g. ``verify``: some check failed)
2  bad input: an invalid parameter, activation or option (one line on stderr, no traceback)
3  a deterministic-equivalent solver did not converge (ConvergenceError)
130 interrupted (Ctrl-C)

Adding a subcommand
-------------------
A subcommand lives in its own module and is one function::

    # symattn/cli/verify.py
    from .common import add_command, add_json_flag, finish_command

    def add_parser(subparsers):
        p = add_command(subparsers, "verify",
                        help="run the scientific checks",
                        description="Runs ... (what it computes, with the formula).",
                        examples=["symattn verify --quick", "symattn verify --json"])
        p.add_argument("--quick", action="store_true", help="...")
        return finish_command(p, run)   # adds --json and func=run; run(args) -> exit code (None means 0)

plus one registration line in :data:`COMMANDS` below (``"verify": "symattn.cli.verify:add_parser"``).
Keep module-level imports of such a module light (import sympy, torch, ... inside ``run``):
every registered module is imported whenever the parser is built. Third-party packages can
also register commands through the ``symattn.commands`` entry-point group (value
``module:add_parser``) without touching this file; they import the helpers from
``symattn.cli`` (re-exported from :mod:`symattn.cli.common`).

Inside ``run`` raise :class:`~symattn.errors.SymattnError` subclasses for bad input; ``main``
turns them into ``symattn: error: <message>`` and exit code 2 (3 for ConvergenceError).
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from typing import Callable, Sequence

from .common import (EXIT_CONVERGENCE, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, GEOMETRY_FLAGS, Parser,
                     UsageError, add_activation_arg, add_command, add_diagonal_arg, add_dps_arg, add_gamma_arg,
                     add_geometry_args, add_json_flag, add_monte_carlo_args, add_progress_flag, dump_json,
                     finish_command, fmt, format_table, geometry_from_args, jsonable, print_json)
from .hermite import hermite_data
from .simulate import simulate_data
from .solve import solve_data

__all__ = [
    "main", "build_parser", "COMMANDS", "ENTRY_POINT_GROUP",
    "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_CONVERGENCE", "EXIT_INTERRUPTED",
    "Parser", "UsageError", "add_command", "finish_command", "GEOMETRY_FLAGS", "add_geometry_args",
    "geometry_from_args", "add_json_flag", "add_activation_arg", "add_gamma_arg", "add_diagonal_arg", "add_dps_arg",
    "add_monte_carlo_args", "add_progress_flag", "print_json", "jsonable", "dump_json", "fmt", "format_table",
    "hermite_data", "solve_data", "simulate_data",
]

#: Registered subcommands: name -> "module:function". The function is ``add_parser(subparsers)``;
#: it creates the subparser (use :func:`add_command`) and sets ``func=run`` as default.
#: Order here is the order in ``symattn --help``.
COMMANDS: dict[str, str] = {
    "hermite": "symattn.cli.hermite:add_parser",
    "solve": "symattn.cli.solve:add_parser",
    "simulate": "symattn.cli.simulate:add_parser",
    "demo": "symattn.cli.demo:add_parser",
    "reproduce": "symattn.cli.reproduce:add_parser",
    "codegen": "symattn.cli.codegen:add_parser",
    "verify": "symattn.cli.verify:add_parser",
}

#: Entry-point group through which other distributions may add commands.
ENTRY_POINT_GROUP = "symattn.commands"


def _load(spec: str) -> Callable:
    module, _, func = spec.partition(":")
    return getattr(importlib.import_module(module), func or "add_parser")


def _entry_point_specs() -> dict[str, str]:
    try:
        from importlib.metadata import entry_points
        eps = entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # pragma: no cover - broken metadata
        return {}
    return {ep.name: ep.value for ep in eps}


def _add_unavailable(subparsers, name: str, spec: str, exc: BaseException) -> None:
    """A command whose module failed to import: it stays listed and explains why when run."""
    reason = f"{type(exc).__name__}: {exc}"

    def run(args):
        raise UsageError(f"command '{name}' is unavailable: {spec} failed to import ({reason})")

    p = subparsers.add_parser(name, help=f"(unavailable: {spec} failed to import)", add_help=False)
    p.set_defaults(func=run, _accepts_extra_args=True)


def build_parser() -> Parser:
    from .. import __version__

    parser = Parser(
        prog="symattn",
        description=textwrap.dedent("""\
            symattn: the random-matrix theory of nonlinear attention (Liao et al., arXiv 2506.18656).

            For n tokens X = mu y^T + Z in R^{p x n} (p = c n), the attention features
            Phi = X f(X^T W X/sqrt p)/sqrt p are fitted to the labels y by ridge regression;
            E(gamma) is the training mean-squared error at ridge gamma. symattn computes
            E_attention and E_linear (the same readout on X itself) from the deterministic
            equivalents (solve) and by exact Monte Carlo (simulate)."""),
        epilog=textwrap.dedent("""\
            examples:
              symattn hermite tanh
              symattn solve --activation tanh --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1
              symattn simulate --activation relu --n 500 --c 1 --gamma 0.1 1 --json
              symattn demo --out symattn-out

            exit codes: 0 ok; 1 a check failed; 2 bad input; 3 solver did not converge."""),
    )
    parser.add_argument("--version", action="version", version=f"symattn {__version__}")
    parser.add_argument("--traceback", action="store_true",
                        help="show the full Python traceback of errors (for debugging)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    specs = dict(COMMANDS)
    for name, spec in _entry_point_specs().items():
        specs.setdefault(name, spec)
    for name, spec in specs.items():
        try:
            add = _load(spec)
        except Exception as exc:  # a broken extension must not take the whole CLI down
            _add_unavailable(subparsers, name, spec, exc)
            continue
        add(subparsers)
    return parser


def _error(msg: str) -> None:
    msg = " ".join(str(msg).split())  # one line
    print(f"symattn: error: {msg}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    from ..errors import ConvergenceError, SymattnError

    argv = list(sys.argv[1:] if argv is None else argv)
    show_tb = "--traceback" in argv
    try:
        parser = build_parser()
        try:
            args, extra = parser.parse_known_args(argv)
            if extra and not getattr(args, "_accepts_extra_args", False):
                parser.error("unrecognized arguments: " + " ".join(extra))
        except SystemExit as exc:  # --help / --version
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_USAGE)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        code = args.func(args)
        return EXIT_OK if code is None else int(code)
    except UsageError as exc:
        if show_tb:
            raise
        _error(exc)
        return EXIT_USAGE
    except ConvergenceError as exc:
        if show_tb:
            raise
        msg = str(exc)
        _error(msg if msg.lower().startswith(("no convergence", "wrong branch")) else f"no convergence: {msg}")
        return EXIT_CONVERGENCE
    except SymattnError as exc:
        if show_tb:
            raise
        _error(exc)
        return EXIT_USAGE
    except NotImplementedError as exc:
        if show_tb:
            raise
        _error(f"not implemented yet: {exc}" if str(exc) else "not implemented yet")
        return EXIT_USAGE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # e.g. `symattn hermite tanh | head -1`: stop quietly
        import os

        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout not a real file
            pass
        return EXIT_OK
