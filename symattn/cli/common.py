r"""What every ``symattn`` command shares: the parser class, exit codes, options, output.

A command module (:mod:`symattn.cli.solve`, ...) builds its subparser with :func:`add_command`,
adds the shared options (:func:`add_activation_arg`, :func:`add_gamma_arg`,
:func:`add_geometry_args`, :func:`add_diagonal_arg`, :func:`add_dps_arg`,
:func:`add_monte_carlo_args`, :func:`add_progress_flag`) and ends with :func:`finish_command`
(``--json`` and the function that runs it). Output goes through :func:`print_json` (strict JSON,
:func:`symattn.formatting.dump_json`) or the tables of :func:`~symattn.formatting.format_table`.
Module-level imports stay light: every command module is imported whenever the parser is built.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import textwrap
from typing import Callable, Sequence

from ..errors import UsageError
from ..formatting import dump_json, finite_or_none, fmt, format_table, jsonable

__all__ = [
    "EXIT_OK", "EXIT_FAILURE", "EXIT_USAGE", "EXIT_CONVERGENCE", "EXIT_INTERRUPTED",
    "Parser", "UsageError", "add_command", "finish_command",
    "GEOMETRY_FLAGS", "add_geometry_args", "geometry_from_args", "geometry_line",
    "add_json_flag", "add_activation_arg", "add_gamma_arg", "add_diagonal_arg", "add_dps_arg",
    "add_monte_carlo_args", "add_progress_flag", "integer", "number", "SEED_MAX", "output_folder",
    "with_provenance", "print_json", "jsonable", "dump_json", "fmt", "format_table", "finite_or_none",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CONVERGENCE = 3
EXIT_INTERRUPTED = 130

#: the old private name of :func:`symattn.formatting.finite_or_none` (float, or None if not finite)
_float = finite_or_none


# ============================================================================ parser plumbing
#: what argparse must read as a value, not as an option, even though it starts with '-': a number
#: (also 1e-12 and -inf forms, which argparse's own matcher misses) or an expression ('-x*tanh(x)')
_VALUE_LIKE = re.compile(r"^-(\d|\.\d|inf$|infinity$|nan$)|^-.*[()*+/^,\s]", re.IGNORECASE)


def _short(text, limit: int = 40) -> str:
    """``repr(text)``, cut to about ``limit`` characters (for messages about hostile input)."""
    r = repr(text)
    return r if len(r) <= limit else r[:limit - 5] + "...'"


class _StoreOnce(argparse.Action):
    """The default ``store`` action, made strict: a single-valued option given twice is an error
    (argparse would keep the last value silently); a list option (``nargs='+'``) given twice
    merges the values in order (``--gamma 1 --gamma 2`` is ``--gamma 1 2``)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault("_given_options", {})
        if self.dest in given and self.option_strings:
            if self.nargs in ("+", "*") or isinstance(self.nargs, int) and self.nargs > 1:
                values = list(getattr(namespace, self.dest)) + list(values)
            else:
                raise argparse.ArgumentError(self, f"given more than once ({given[self.dest]} and {option_string} "
                                                   f"{_short(values)}); give it once")
        given[self.dest] = f"{option_string} {_short(values)}"
        setattr(namespace, self.dest, values)


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors become a one-line message instead of usage + exit.

    Besides, negative numbers in any form (``--wk2 -1e-12``, ``--snr -inf``) are read as values
    and reach the validators; a single-valued option given twice is an error and a repeated list
    option is merged (:class:`_StoreOnce`).

    Examples
    --------
    >>> p = Parser(prog="symattn x")
    >>> _ = p.add_argument("--n", type=int)
    >>> try:
    ...     p.parse_args(["--n", "two"])
    ... except UsageError as exc:
    ...     print(exc)
    argument --n: invalid int value: 'two' (see 'symattn x --help')
    >>> _ = p.add_argument("--g", type=float, nargs="+")
    >>> p.parse_args(["--g", "-1e-12", "--g", "2"]).g
    [-1e-12, 2.0]
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _VALUE_LIKE
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)

    def error(self, message: str):  # noqa: D401 - argparse API
        message = " ".join(str(message).split())  # one line
        raise UsageError(f"{message} (see '{self.prog} --help')")

    def parse_known_args(self, args=None, namespace=None):
        """argparse's, but an unknown flag is named first, with the nearest known one (difflib): argparse
        itself reports a missing required flag before it (``--gama 0.1`` said "required: --gamma")."""
        commands = any(isinstance(a, argparse._SubParsersAction) for a in self._actions)
        if args is not None and not self._defaults.get("_accepts_extra_args"):
            for token in args:
                if token == "--" or (commands and not str(token).startswith("-")):
                    break   # a command's own flags are its parser's
                name = str(token).split("=", 1)[0]
                if not name.startswith("-") or name == "-" or self._negative_number_matcher.match(name):
                    continue
                known = list(self._option_string_actions)
                if name in known or (name.startswith("--") and self.allow_abbrev and
                                     any(o.startswith(name) for o in known)) or \
                        (not name.startswith("--") and name[:2] in known):
                    continue
                near = difflib.get_close_matches(name, [o for o in known if o.startswith("--")], n=1, cutoff=0.6)
                self.error(f"unknown flag {name}" + (f": did you mean {near[0]}?" if near else ""))
        return super().parse_known_args(args, namespace)


#: the largest seed accepted (numpy and torch both take any seed below 2**63)
SEED_MAX = 2**63 - 1


def integer(name: str, minimum: int, maximum: int) -> Callable[[str], int]:
    """An argparse ``type`` for an integer flag: ``minimum <= value <= maximum``, checked at parse time.

    Forms like ``1e3`` and ``1_000`` are accepted when they are integers; a value out of range is
    refused before anything is allocated, with a message naming ``name`` and the range.

    Examples
    --------
    >>> p = Parser(prog="symattn x")
    >>> _ = p.add_argument("--n", type=integer("n", 2, 1000))
    >>> p.parse_args(["--n", "1e3"]).n
    1000
    >>> try:
    ...     p.parse_args(["--n", "99999999999999999999999"])
    ... except UsageError as exc:
    ...     print(exc)
    argument --n: invalid n=99999999999999999999999: allowed an integer with 2 <= n <= 1000 (see 'symattn x --help')
    """
    allowed = f"an integer with {minimum} <= {name} <= {maximum}"

    def parse(text: str) -> int:
        text = str(text).strip()
        try:
            value = int(text, 10)
        except ValueError:
            try:
                x = float(text)
            except ValueError:
                x = math.nan
            if not (math.isfinite(x) and x.is_integer()):
                raise argparse.ArgumentTypeError(f"invalid {name}={_short(text)}: allowed {allowed}") from None
            value = int(x)
        if not minimum <= value <= maximum:
            shown = str(value) if len(str(value)) <= 40 else _short(text)
            raise argparse.ArgumentTypeError(f"invalid {name}={shown}: allowed {allowed}")
        return value

    parse.__name__ = "integer"
    return parse


def number(text: str) -> float:
    """An argparse ``type`` for a real flag: ``float(text)``; the range is the validators' job.

    Examples
    --------
    >>> number("-1e-12"), number("inf")
    (-1e-12, inf)
    """
    try:
        return float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {_short(text)}") from None


def output_folder(path, name: str = "out"):
    """Create and probe the output folder ``path`` before any work (:func:`symattn.files.check_output_dir`).

    Raises ParameterError naming ``name`` for a file, an unwritable or impossible path.
    """
    from ..errors import ParameterError
    from ..files import check_output_dir

    try:
        return check_output_dir(path, name)
    except (ValueError, TypeError) as exc:  # e.g. an embedded NUL byte (ParameterError is a ValueError too)
        if isinstance(exc, ParameterError):
            raise
        raise ParameterError(name, str(path), "a folder that can be created and written to", hint=str(exc)) from None


def with_provenance(data: dict, parameters: dict, *, seed=None, backend: str | None = None,
                    dtype: str | None = None) -> dict:
    """``data`` with a ``"provenance"`` key (:func:`symattn.provenance.provenance`) added last.

    Every JSON object that the command line prints carries one; the other keys are left as they are.
    """
    from ..provenance import provenance

    out = dict(data)
    out["provenance"] = provenance(jsonable(parameters), seed=seed, backend=backend, dtype=dtype)
    return out


def _paragraphs(text: str) -> str:
    """``text`` re-wrapped to 88 columns, paragraphs (separated by blank lines) kept."""
    return "\n\n".join(textwrap.fill(" ".join(p.split()), 88) for p in textwrap.dedent(text).strip().split("\n\n"))


def add_command(subparsers, name: str, *, help: str, description: str,
                examples: Sequence[str] = (), notes: str = "") -> Parser:
    """Create the subparser of one command with a description paragraph and an examples epilog.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        What ``add_parser(subparsers)`` of a command module receives.
    name : str
        The command (``symattn NAME``).
    help : str
        One line for ``symattn --help``.
    description : str
        Re-wrapped to 88 columns (blank lines separate paragraphs).
    examples : sequence of str
        Shell lines shown under ``examples:``.
    notes : str
        Paragraphs added after the examples.

    Returns
    -------
    Parser
        The subparser.

    Examples
    --------
    >>> sub = Parser(prog="symattn").add_subparsers(parser_class=Parser)
    >>> p = add_command(sub, "hello", help="say hello", description="Says hello.", examples=["symattn hello"])
    >>> print(p.epilog)
    examples:
      symattn hello
    """
    epilog = ""
    if examples:
        epilog = "examples:\n" + "\n".join("  " + e for e in examples)
    if notes:
        epilog += ("\n\n" if epilog else "") + _paragraphs(notes)
    return subparsers.add_parser(name, help=help, description=_paragraphs(description), epilog=epilog)


def finish_command(parser: argparse.ArgumentParser, run: Callable, json: bool = True) -> argparse.ArgumentParser:
    """The last lines of every ``add_parser``: the ``--json`` flag (if ``json``) and ``func=run``.

    ``run(args)`` returns the exit code (None means 0). Returns ``parser``.
    """
    if json:
        add_json_flag(parser)
    parser.set_defaults(func=run)
    return parser


def print_json(data) -> int:
    """Print ``data`` as one line of strict JSON (:func:`symattn.formatting.dump_json`); returns EXIT_OK.

    Examples
    --------
    >>> print_json({"E": float("inf")})
    {"E": null}
    0
    """
    print(dump_json(data))
    return EXIT_OK


# ============================================================================ shared options
GEOMETRY_FLAGS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")


def add_geometry_args(parser: argparse.ArgumentParser) -> None:
    """The geometry flags shared by every command: the Gram matrix of (mu, w_K, w_Q)."""
    g = parser.add_argument_group(
        "geometry", "Gram matrix of (mu, w_K, w_Q); W_K^T W_Q = I + w_K w_Q^T. Unset entries are 0.")
    g.add_argument("--snr", type=number, default=None, metavar="M2", help="||mu||^2 (default 0)")
    g.add_argument("--wk2", type=number, default=None, metavar="V", help="||w_K||^2 (default 0)")
    g.add_argument("--wq2", type=number, default=None, metavar="V", help="||w_Q||^2 (default 0)")
    g.add_argument("--mu-wk", dest="mu_wk", type=number, default=None, metavar="V", help="mu^T w_K (default 0)")
    g.add_argument("--mu-wq", dest="mu_wq", type=number, default=None, metavar="V", help="mu^T w_Q (default 0)")
    g.add_argument("--wk-wq", dest="wk_wq", type=number, default=None, metavar="V", help="w_K^T w_Q (default 0)")
    g.add_argument("--aligned", action="store_true",
                   help="w_K = w_Q = mu: all six entries equal --snr (cannot be combined with the others)")


def geometry_from_args(args):
    """Build the :class:`~symattn.model.Geometry` that the geometry flags describe.

    Examples
    --------
    >>> import argparse
    >>> geometry_from_args(argparse.Namespace(snr=2.0, aligned=True)).as_dict()["wk_wq"]
    2.0
    """
    from ..errors import ParameterError
    from ..model import Geometry

    vals = {k: getattr(args, k, None) for k in GEOMETRY_FLAGS}
    if getattr(args, "aligned", False):
        extra = [k for k in GEOMETRY_FLAGS[1:] if vals[k] is not None]
        if extra:
            raise ParameterError("aligned", True, "without --" + "/--".join(k.replace("_", "-") for k in extra),
                                 hint="--aligned sets w_K = w_Q = mu from --snr alone")
        return Geometry.aligned(0.0 if vals["snr"] is None else vals["snr"])
    return Geometry(**{k: (0.0 if v is None else v) for k, v in vals.items()})


def geometry_line(geometry) -> str:
    """``geometry: snr=..., wk2=..., ...``: the line that the text output prints for a Geometry."""
    return "geometry: " + ", ".join(f"{k}={fmt(v)}" for k, v in geometry.as_dict().items())


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    """``--json``: one JSON object instead of a table."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of a table (non-finite numbers -> null)")


def add_activation_arg(parser: argparse.ArgumentParser, positional: bool = False, default: str = "tanh") -> None:
    """The activation: positional ``ACT`` or ``--activation/-a ACT`` (default ``default``)."""
    h = ("activation: a catalog name (tanh, erf, relu, he3, ...) or a SymPy expression in x, "
         "e.g. 'x*erf(x)'")
    if positional:
        parser.add_argument("activation", metavar="ACT", help=h)
    else:
        parser.add_argument("--activation", "-a", default=default, metavar="ACT", help=h + f" (default {default})")


def add_gamma_arg(parser: argparse.ArgumentParser, required: bool = True, zero: bool = False) -> None:
    """``--gamma/-g G [G ...]``: the ridge values (``zero``: 0 is allowed, the ridgeless value where c < 1)."""
    allowed = "0 <= gamma <= 1e12 (0: the ridgeless limit of the training error, c < 1 only)" if zero else "0 < gamma <= 1e12"
    parser.add_argument("--gamma", "-g", type=number, nargs="+", required=required, metavar="G",
                        help=f"ridge values {allowed} (one or more; a repeated --gamma adds values)")


def add_diagonal_arg(parser: argparse.ArgumentParser) -> None:
    """``--diagonal f|zero``: the kernel diagonal (f applied, or zeroed)."""
    parser.add_argument("--diagonal", choices=("f", "zero"), default="f",
                        help="diagonal of the kernel: f applied (d = lim f(sqrt p)/sqrt p) or zeroed "
                             "(d = 0; required for superlinear f such as he3). Default f")


#: the variant flags' values for the plain layer
VARIANT_DEFAULTS = {"residual": False, "heads": None, "readout": "concat", "kernel": "entrywise", "temperature": None}


def add_variant_args(parser: argparse.ArgumentParser) -> None:
    """The layer's variant (docs/theory.md §13): ``--residual``, ``--heads``, ``--readout``, ``--kernel``,
    ``--temperature``; read back by :func:`symattn.cli.general_w.layer_from_args`."""
    g = parser.add_argument_group("layer variant (docs/theory.md §13)")
    g.add_argument("--residual", action="store_true",
                   help="the residual connection Phi = X(I + K) (one head, or several with --readout sum)")
    g.add_argument("--heads", default=None, metavar="minilm:LAYER|FILE.npy",
                   help="several heads K_h = f(X^T W_h X/sqrt p)/sqrt p: the 12 heads W_K^h^T W_Q^h of a MiniLM "
                        "layer (0-5, each unit-scaled; p = 384, so n = round(384/c)) or an H x p x p array in a "
                        ".npy file")
    g.add_argument("--readout", choices=("concat", "sum"), default=VARIANT_DEFAULTS["readout"],
                   help="with --heads: the readout sees [X K_1; ...; X K_H] (concat, default) or X sum_h K_h (sum)")
    g.add_argument("--kernel", choices=("entrywise", "softmax"), default=VARIANT_DEFAULTS["kernel"],
                   help="entrywise f (default) or the row softmax exp(a_ij/tau)/sum_l exp(a_il/tau) over l != i "
                        "(needs --diagonal zero; the activation is not used; solve needs --n)")
    g.add_argument("--temperature", type=number, default=None, metavar="TAU",
                   help="softmax temperature tau > 0 (default 1); with solve, inside the regime of "
                        "docs/theory.md §13.3 only (small tau needs large n)")


def add_weights_args(parser: argparse.ArgumentParser) -> None:
    """``--weights`` (one exact p×p W) and ``--mu`` (its signal), read back by
    :func:`symattn.cli.general_w.layer_from_args` and :func:`symattn.cli.general_w.signal_from_args`."""
    parser.add_argument("--weights", default=None, metavar="FILE.npy|minilm:LAYER[:HEAD]",
                        help="the kernel f(X^T W X/sqrt p)/sqrt p of this exact p x p W: a .npy file, or "
                             "all-MiniLM-L6-v2's W_K^T W_Q of a layer (0-5) or one head (0-11), unit-scaled; "
                             "n = round(p/c); only --snr of the geometry flags (with --mu)")
    parser.add_argument("--mu", default=None, metavar="zero|top|random:SEED|FILE.npy",
                        help="with --weights or --heads: mu = 0 (default), sqrt(snr) x the top eigenvector of "
                             "(W+W^T)/2 (top; --snr, default 1), sqrt(snr) x a random unit vector (random:SEED), "
                             "or a length-p vector from a .npy file")


def variant_parameters(args) -> dict:
    """The variant flags that differ from the plain layer, as given (the heads by their spec)."""
    return {k: getattr(args, k) for k, default in VARIANT_DEFAULTS.items() if getattr(args, k) != default}



def add_dps_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """``--dps D``: mpmath digits, 15 <= D <= 1000, default 30; ``what`` starts the help text."""
    parser.add_argument("--dps", type=integer("dps", 15, 1000), default=30, metavar="D",
                        help=f"{what}, 15 <= D <= 1000 (default 30)")


def add_monte_carlo_args(parser: argparse.ArgumentParser, *, seed_help: str, backend_help: str,
                         device_help: str) -> None:
    """``--seed S``, ``--backend numpy|torch`` and ``--device DEV`` of the Monte Carlo commands."""
    parser.add_argument("--seed", type=integer("seed", 0, SEED_MAX), default=0, metavar="S", help=seed_help)
    parser.add_argument("--backend", choices=("numpy", "torch"), default="numpy", help=backend_help)
    parser.add_argument("--device", default=None, metavar="DEV", help=device_help)


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    """``--no-progress``: no progress bar."""
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
