r"""The ``symattn`` command line: the command registry and :func:`main`.

Usage: ``symattn COMMAND [options]``; ``symattn COMMAND --help`` explains each command.
This package is the only place that parses arguments; no library module imports it.

Modules
-------
common : the parser class, exit codes, shared options and output helpers (at the bottom).
hermite, solve, simulate, demo, reproduce, codegen, verify, sweep : one module per command, each with
    ``add_parser(subparsers)`` and ``run(args)``.
__main__ : ``python -m symattn.cli``. Entry points (``__main__`` modules, the console script
    ``symattn = "symattn.cli:main"``) are command lines too: they may import this package.

Exit codes
----------
0  success
1  the command ran but reports a failure (e.g. ``verify``: some check failed)
2  bad input: an invalid parameter, activation or option, a Monte Carlo that does not fit in
   memory, a file that cannot be written (one line on stderr, no traceback)
3  a deterministic-equivalent solver did not converge (ConvergenceError), at some point at least;
   the numeric warnings raised on the way are folded into its one-line message
130 interrupted (Ctrl-C), at any moment from the first import of this package on

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

import _signal as signal  # the C module: built in and already loaded, so the guard below waits for no import
import os
import sys


# ============================================================================ Ctrl-C, from the first import
def _cli_process() -> bool:
    """True when this interpreter runs the command line itself: the ``symattn`` console script,
    ``python -m symattn.cli`` or ``python -m symattn.verification`` (not a program that imports it)."""
    if sys.argv and os.path.basename(sys.argv[0]) in ("symattn", "symattn.exe", "symattn-script.py"):
        return True
    orig = list(getattr(sys, "orig_argv", ()))
    for i, a in enumerate(orig[1:], 1):
        if a.startswith("-m"):
            module = a[2:] or (orig[i + 1] if i + 1 < len(orig) else "")
            return module in ("symattn.cli", "symattn.verification")
    return False


def _ignore_interrupts() -> None:
    """From now on Ctrl-C is ignored: the process is reporting an interrupt, or exiting."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except (ValueError, OSError):  # pragma: no cover - not the main thread
        pass


#: set once a Ctrl-C has arrived in the command-line process
_INTERRUPTED = False


def _defer_interrupt(signum, frame) -> None:
    """SIGINT during the imports before :func:`main`: remembered, acted on when main starts
    (raising inside an import can leave a C extension half-loaded and turn into an ImportError)."""
    global _INTERRUPTED
    _INTERRUPTED = True


def _raise_interrupt(signum, frame) -> None:
    """SIGINT while a command runs: remembered (so that any error it provokes is reported as the
    interrupt it is) and raised as KeyboardInterrupt."""
    global _INTERRUPTED
    _INTERRUPTED = True
    raise KeyboardInterrupt


def _install_interrupt_hook() -> None:
    """Ctrl-C from here on gives ``symattn: error: interrupted`` and exit 130, never a traceback:
    deferred during the imports, then raised inside :func:`main`; a KeyboardInterrupt that still
    escapes main is caught by ``sys.excepthook``, and one that lands where Python would ignore it (a weakref
    callback or ``__del__``: "Exception ignored in") by ``sys.unraisablehook``."""
    previous, previous_unraisable = sys.excepthook, sys.unraisablehook

    def report_and_exit():
        _ignore_interrupts()
        try:
            sys.stderr.write("symattn: error: interrupted\n")
            sys.stderr.flush()
        finally:
            os._exit(130)

    def hook(tp, value, tb):
        if tp is not None and (issubclass(tp, KeyboardInterrupt) or _INTERRUPTED):
            report_and_exit()
        previous(tp, value, tb)

    def unraisable(info):
        # the KeyboardInterrupt of _raise_interrupt can land where Python only prints "Exception ignored in"
        # and carries on (a weakref callback of the import machinery, a __del__): it must still end the run
        if info.exc_type is not None and issubclass(info.exc_type, KeyboardInterrupt):
            report_and_exit()
        previous_unraisable(info)

    sys.excepthook = hook
    sys.unraisablehook = unraisable
    try:
        signal.signal(signal.SIGINT, _defer_interrupt)
    except (ValueError, OSError):  # pragma: no cover - not the main thread
        pass


#: this interpreter is the command line (then Ctrl-C is handled from here on, before the heavy imports)
_CLI_PROCESS = _cli_process()
if _CLI_PROCESS:
    _install_interrupt_hook()

import importlib  # noqa: E402 - after the interrupt hook on purpose
import textwrap  # noqa: E402
import warnings  # noqa: E402
from typing import Callable, Sequence  # noqa: E402

from .common import (EXIT_CONVERGENCE, EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, GEOMETRY_FLAGS, Parser,
                     UsageError, add_activation_arg, add_command, add_diagonal_arg, add_dps_arg, add_gamma_arg,
                     add_geometry_args, add_json_flag, add_monte_carlo_args, add_progress_flag, dump_json,
                     finish_command, fmt, format_table, geometry_from_args, integer, jsonable, number, output_folder,
                     print_json, with_provenance)
from .hermite import hermite_data
from .simulate import simulate_data
from .solve import solve_data

__all__ = [
    "main", "build_parser", "COMMANDS", "ENTRY_POINT_GROUP",
    "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_CONVERGENCE", "EXIT_INTERRUPTED",
    "Parser", "UsageError", "add_command", "finish_command", "GEOMETRY_FLAGS", "add_geometry_args",
    "geometry_from_args", "add_json_flag", "add_activation_arg", "add_gamma_arg", "add_diagonal_arg", "add_dps_arg",
    "add_monte_carlo_args", "add_progress_flag", "integer", "number", "output_folder", "with_provenance",
    "print_json", "jsonable", "dump_json", "fmt", "format_table",
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
    "sweep": "symattn.cli.sweep:add_parser",
    "atlas": "symattn.cli.atlas:add_parser",
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


def _distinct(caught) -> list[tuple[str, str, int]]:
    """(category, one-line message, count) of the recorded warnings, in order of first appearance."""
    seen: dict[tuple[str, str], int] = {}
    for w in caught:
        key = (w.category.__name__, " ".join(str(w.message).split()))
        seen[key] = seen.get(key, 0) + 1
    return [(cat, msg, k) for (cat, msg), k in seen.items()]


def _warnings_note(caught, limit: int = 3) -> str:
    """The recorded warnings as one clause of an error line (empty when there were none)."""
    items = _distinct(caught)
    if not items:
        return ""
    total = sum(k for *_, k in items)
    numeric = all(issubclass(w.category, RuntimeWarning) for w in caught)
    shown = "; ".join(f"{cat}: {msg}" + (f" (x{k})" if k > 1 else "") for cat, msg, k in items[:limit])
    more = f"; and {len(items) - limit} more" if len(items) > limit else ""
    return f" [{total} {'numeric ' if numeric else ''}warning{'s' if total > 1 else ''} while computing: {shown}{more}]"


def _replay(caught, limit: int = 10) -> None:
    """Print the warnings recorded during a command that succeeded: one line each, duplicates merged."""
    items = _distinct(caught)
    for cat, msg, k in items[:limit]:
        print(f"symattn: warning: {msg} ({cat}{f', x{k}' if k > 1 else ''})", file=sys.stderr)
    if len(items) > limit:
        print(f"symattn: warning: ... and {len(items) - limit} more distinct warnings", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring).

    Ctrl-C at any moment gives ``symattn: error: interrupted`` and 130. The warnings raised while
    a command runs are recorded: after success they are printed one line each; on a solver failure
    (exit 3) they are folded into its one-line message instead of preceding it.
    """
    try:
        if _CLI_PROCESS:
            signal.signal(signal.SIGINT, _raise_interrupt)
            if _INTERRUPTED:  # Ctrl-C during the imports
                raise KeyboardInterrupt
        return _main(argv)
    except KeyboardInterrupt:
        return _interrupted()
    except Exception:
        if _INTERRUPTED:  # an error that the interrupt provoked (e.g. inside an import)
            return _interrupted()
        raise
    finally:
        if _CLI_PROCESS:  # nothing on the way out (interpreter shutdown) may be interrupted any more
            _ignore_interrupts()


def _interrupted() -> int:
    if _CLI_PROCESS:
        _ignore_interrupts()
    _error("interrupted")
    return EXIT_INTERRUPTED


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    show_tb = "--traceback" in argv
    caught: list = []
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
        with warnings.catch_warnings(record=True) as caught:
            code = args.func(args)
        _replay(caught)
        return EXIT_OK if code is None else int(code)
    except Exception as exc:
        if _INTERRUPTED:
            raise KeyboardInterrupt from None
        code = _exit_code(exc, caught, show_tb)
        if code is None:  # a bug: its traceback is shown, after the warnings that preceded it
            _replay(caught)
            raise
        return code


def _exit_code(exc: Exception, caught, show_tb: bool) -> int | None:
    """Print the one-line message of a handled error and return its exit code; None for a bug.

    With ``--traceback`` a handled error is re-raised (after its warnings are printed).
    """
    from ..errors import ConvergenceError, SymattnError

    if isinstance(exc, BrokenPipeError):  # e.g. `symattn hermite tanh | head -1`: stop quietly
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout not a real file
            pass
        return EXIT_OK
    if isinstance(exc, ConvergenceError):
        code, msg = EXIT_CONVERGENCE, str(exc)
        msg = msg if msg.lower().startswith(("no convergence", "wrong branch")) else f"no convergence: {msg}"
        if isinstance(getattr(exc, "diagnostics", None), dict):
            exc.diagnostics.setdefault("warnings", [f"{c}: {m}" for c, m, _ in _distinct(caught)])
        msg += _warnings_note(caught)
    elif isinstance(exc, (UsageError, SymattnError)):
        code, msg = EXIT_USAGE, str(exc)
    elif isinstance(exc, NotImplementedError):
        code, msg = EXIT_USAGE, f"not implemented yet: {exc}" if str(exc) else "not implemented yet"
    elif isinstance(exc, MemoryError):
        code, msg = EXIT_USAGE, f"not enough memory{': ' + str(exc) if str(exc) else ''}; reduce n, c or --draws"
    elif isinstance(exc, OSError):  # a file that cannot be read or written (disk full, permissions, ...)
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        code, msg = EXIT_USAGE, f"{where}{exc.strerror or exc}"
    else:
        return None
    if show_tb:
        _replay(caught)
        raise exc
    _error(msg)
    return code
