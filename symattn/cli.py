r"""The ``symattn`` command line.

Usage: ``symattn COMMAND [options]``; ``symattn COMMAND --help`` explains each command.

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

    # verification/cli.py
    from symattn.cli import add_command, add_json_flag

    def add_parser(subparsers):
        p = add_command(subparsers, "verify",
                        help="run the scientific checks",
                        description="Runs ... (what it computes, with the formula).",
                        examples=["symattn verify --quick", "symattn verify --json"])
        p.add_argument("--quick", action="store_true", help="...")
        add_json_flag(p)
        p.set_defaults(func=run)      # run(args) -> int exit code (None means 0)
        return p

plus one registration line in :data:`COMMANDS` below (``"verify": "verification.cli:add_parser"``).
Keep module-level imports of such a module light (import sympy, torch, ... inside ``run``):
every registered module is imported whenever the parser is built. Third-party packages can
also register commands through the ``symattn.commands`` entry-point group (value
``module:add_parser``) without touching this file.

Inside ``run`` raise :class:`~symattn.errors.SymattnError` subclasses for bad input; ``main``
turns them into ``symattn: error: <message>`` and exit code 2 (3 for ConvergenceError).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import sys
import textwrap
import warnings
from typing import Callable, Iterable, Sequence

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_CONVERGENCE = 3
EXIT_INTERRUPTED = 130

#: Registered subcommands: name -> "module:function". The function is ``add_parser(subparsers)``;
#: it creates the subparser (use :func:`add_command`) and sets ``func=run`` as default.
#: Order here is the order in ``symattn --help``.
COMMANDS: dict[str, str] = {
    "hermite": "symattn.cli:add_hermite_parser",
    "solve": "symattn.cli:add_solve_parser",
    "simulate": "symattn.cli:add_simulate_parser",
    "demo": "symattn.cli:add_demo_parser",
    "reproduce": "symattn.reproduce:add_parser",
    "codegen": "symattn.codegen:add_parser",
    "verify": "verification.cli:add_parser",
}

#: Entry-point group through which other distributions may add commands.
ENTRY_POINT_GROUP = "symattn.commands"

# ============================================================================ parser plumbing
class UsageError(Exception):
    """An argparse error (unknown option, bad number, invalid choice): exit code 2."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors become a one-line message instead of usage + exit."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see '{self.prog} --help')")


def add_command(subparsers, name: str, *, help: str, description: str,
                examples: Sequence[str] = (), notes: str = "") -> Parser:
    """Create the subparser of one command with a description paragraph and an examples epilog.

    ``description`` is re-wrapped to 88 columns (blank lines separate paragraphs);
    ``examples`` are shell lines shown under ``examples:``; ``notes`` is added after them.
    """
    paras = [textwrap.fill(" ".join(p.split()), 88) for p in textwrap.dedent(description).strip().split("\n\n")]
    epilog = ""
    if examples:
        epilog = "examples:\n" + "\n".join("  " + e for e in examples)
    if notes:
        epilog += ("\n\n" if epilog else "") + "\n\n".join(
            textwrap.fill(" ".join(p.split()), 88) for p in textwrap.dedent(notes).strip().split("\n\n"))
    return subparsers.add_parser(name, help=help, description="\n\n".join(paras), epilog=epilog)


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
    from . import __version__

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


# ============================================================================ shared options
GEOMETRY_FLAGS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")


def add_geometry_args(parser: argparse.ArgumentParser) -> None:
    """The geometry flags shared by every command: the Gram matrix of (mu, w_K, w_Q)."""
    g = parser.add_argument_group(
        "geometry", "Gram matrix of (mu, w_K, w_Q); W_K^T W_Q = I + w_K w_Q^T. Unset entries are 0.")
    g.add_argument("--snr", type=float, default=None, metavar="M2", help="||mu||^2 (default 0)")
    g.add_argument("--wk2", type=float, default=None, metavar="V", help="||w_K||^2 (default 0)")
    g.add_argument("--wq2", type=float, default=None, metavar="V", help="||w_Q||^2 (default 0)")
    g.add_argument("--mu-wk", dest="mu_wk", type=float, default=None, metavar="V", help="mu^T w_K (default 0)")
    g.add_argument("--mu-wq", dest="mu_wq", type=float, default=None, metavar="V", help="mu^T w_Q (default 0)")
    g.add_argument("--wk-wq", dest="wk_wq", type=float, default=None, metavar="V", help="w_K^T w_Q (default 0)")
    g.add_argument("--aligned", action="store_true",
                   help="w_K = w_Q = mu: all six entries equal --snr (cannot be combined with the others)")


def geometry_from_args(args):
    """Build the :class:`~symattn.model.Geometry` that the geometry flags describe."""
    from .errors import ParameterError
    from .model import Geometry

    vals = {k: getattr(args, k, None) for k in GEOMETRY_FLAGS}
    if getattr(args, "aligned", False):
        extra = [k for k in GEOMETRY_FLAGS[1:] if vals[k] is not None]
        if extra:
            raise ParameterError("aligned", True, "without --" + "/--".join(k.replace("_", "-") for k in extra),
                                 hint="--aligned sets w_K = w_Q = mu from --snr alone")
        return Geometry.aligned(0.0 if vals["snr"] is None else vals["snr"])
    return Geometry(**{k: (0.0 if v is None else v) for k, v in vals.items()})


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object instead of a table (non-finite numbers -> null)")


def add_activation_arg(parser: argparse.ArgumentParser, positional: bool = False, default: str = "tanh") -> None:
    h = ("activation: a catalog name (tanh, erf, relu, he3, ...) or a SymPy expression in x, "
         "e.g. 'x*erf(x)'")
    if positional:
        parser.add_argument("activation", metavar="ACT", help=h)
    else:
        parser.add_argument("--activation", "-a", default=default, metavar="ACT", help=h + f" (default {default})")


def add_gamma_arg(parser: argparse.ArgumentParser, required: bool = True) -> None:
    parser.add_argument("--gamma", "-g", type=float, nargs="+", required=required, metavar="G",
                        help="ridge values gamma > 0 (one or more)")


def add_diagonal_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--diagonal", choices=("f", "zero"), default="f",
                        help="diagonal of the kernel: f applied (d = lim f(sqrt p)/sqrt p) or zeroed "
                             "(d = 0; required for superlinear f such as he3). Default f")


# ============================================================================ output helpers
def jsonable(obj):
    """Convert numpy/mpmath scalars and arrays to plain Python; non-finite floats -> None."""
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if np is not None:
        if isinstance(obj, np.ndarray):
            return jsonable(obj.tolist())
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, np.integer):
            return int(obj)
    try:
        x = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    return x if math.isfinite(x) else None


def dump_json(obj) -> str:
    """Strict JSON (no NaN/Infinity tokens) of ``obj`` after :func:`jsonable`."""
    return json.dumps(jsonable(obj), allow_nan=False)


def fmt(x, digits: int = 6) -> str:
    """A number for a table: general format, 'inf'/'nan' kept readable, None as '-'."""
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}g}"


def format_table(headers: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> str:
    """A plain aligned text table; numbers right-aligned, text left-aligned (``align`` per column: l/r)."""
    rows = [[c if isinstance(c, str) else fmt(c) for c in row] for row in rows]
    cols = len(headers)
    widths = [max([len(headers[i])] + [len(r[i]) for r in rows]) for i in range(cols)]
    if align is None:
        align = "".join("l" if i == 0 else "r" for i in range(cols))

    def line(cells):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def _geometry_line(geometry) -> str:
    return "geometry: " + ", ".join(f"{k}={fmt(v)}" for k, v in geometry.as_dict().items())


# ============================================================================ hermite
def add_hermite_parser(subparsers):
    p = add_command(
        subparsers, "hermite",
        help="Hermite expansion of an activation (a_k, a1, nu, d)",
        description="""
            Expands the centred activation in normalised probabilists' Hermite polynomials,
            f(xi) - a0 = sum_{k>=1} a_k He_k(xi)/sqrt(k!), with a_k = E[f(xi) He_k(xi)]/sqrt(k!)
            and xi ~ N(0,1), so that a0 = E f(xi), a1 = E[xi f(xi)] and nu = E[(f(xi)-a0)^2]
            = sum_k a_k^2. Also prints the diagonal constant d = lim_{p->inf} f(sqrt p)/sqrt p of
            the kernel (0 for bounded f, 1 for relu/|x|, inf for superlinear f such as he3).
            Coefficients a_0..a_K are computed with mpmath at D significant digits (values below
            10^-D max(1, |a_k|) are shown as 0); where SymPy can integrate them exactly the exact
            value is shown as well.

            JSON: {"activation", "a0", "a1", "nu", "d", "coefficients": [str], "exact": [str|null]};
            coefficients are decimal strings with D significant digits; a non-finite d (superlinear
            f) is written as null.""",
        examples=["symattn hermite tanh", "symattn hermite relu --kmax 8 --dps 50",
                  "symattn hermite 'x*erf(x)' --json"],
    )
    add_activation_arg(p, positional=True)
    p.add_argument("--kmax", type=int, default=6, metavar="K", help="highest degree K (default 6)")
    p.add_argument("--dps", type=int, default=30, metavar="D",
                   help="decimal digits of the coefficients, 15 <= D <= 1000 (default 30)")
    p.add_argument("--no-exact", action="store_true",
                   help="skip the exact SymPy coefficients (faster); 'exact' is then all null")
    add_json_flag(p)
    p.set_defaults(func=run_hermite)
    return p


def hermite_data(act: str, kmax: int = 6, dps: int = 30, exact: bool = True) -> dict:
    """The ``symattn hermite --json`` object."""
    import mpmath

    from .activations import activation
    from .model import check_dps, check_int

    kmax = check_int("kmax", kmax, 0, 200)
    dps = check_dps(dps)
    f = activation(act)
    coeffs = f.hermite_coefficients(kmax=kmax, dps=dps)
    # digits beyond the working precision are quadrature noise (e.g. 3e-44 for a zero of relu)
    with mpmath.workdps(dps):
        tol = mpmath.mpf(10) ** (-dps) * max([mpmath.mpf(1)] + [abs(c) for c in coeffs])
        coeffs = [mpmath.chop(c, tol) for c in coeffs]
    ex = f.exact_coefficients(kmax) if exact else None
    ex = [None] * len(coeffs) if ex is None else list(ex)
    ex += [None] * (len(coeffs) - len(ex))
    return {
        "activation": f.name,
        "a0": _float(f.a0),
        "a1": _float(f.a1),
        "nu": _float(f.nu),
        "d": _float(f.d),
        "coefficients": [mpmath.nstr(c, dps) for c in coeffs],
        "exact": [None if e is None else str(e) for e in ex[:len(coeffs)]],
    }


def _float(x):
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def run_hermite(args) -> int:
    data = hermite_data(args.activation, args.kmax, args.dps, exact=not args.no_exact)
    if args.json:
        print(dump_json(data))
        return EXIT_OK
    print(f"activation: {data['activation']}")
    print(f"a0 = {fmt(data['a0'], 12)}   a1 = {fmt(data['a1'], 12)}   nu = {fmt(data['nu'], 12)}   "
          f"d = {'inf' if data['d'] is None else fmt(data['d'], 12)}")
    print("f(xi) - a0 = sum_k a_k He_k(xi)/sqrt(k!)")
    rows = [[str(k), c, "-" if e is None else e] for k, (c, e) in enumerate(zip(data["coefficients"], data["exact"]))]
    print(format_table(["k", "a_k", "exact"], rows, align="rll"))
    return EXIT_OK


# ============================================================================ solve
def add_solve_parser(subparsers):
    p = add_command(
        subparsers, "solve",
        help="deterministic-equivalent memorization errors E_attention, E_linear",
        description="""
            Solves the deterministic equivalents (n, p -> inf with p/n = c) of the training
            mean-squared error of the ridge readout, E(gamma) = gamma^2 yhat^T Q(gamma)^2 yhat
            = -gamma^2 F'(gamma), F = lim yhat^T (Phi^T Phi/n + gamma I)^{-1} yhat, yhat = y/sqrt n.
            linear: Phi = X, closed form F_LR = m/(1 + gamma ||mu||^2 m mt) with mt the
            Marchenko-Pastur Stieltjes transform at -gamma and m = c mt + (1-c)/gamma (MATH.md 3).
            attention: Phi = X K, K = f(X^T W X/sqrt p)/sqrt p, through the linearised kernel
            a1 (X^T W X/p - I) + sqrt(nu - a1^2) N/sqrt p + d I: a 3-unknown bulk fixed point over
            the Marchenko-Pastur law plus a low-rank Woodbury correction (MATH.md 5-6).

            Finite size: the attention theory is asymptotic. At n tokens its bias is governed by
            the signal strength t = (||mu||^2 + mu^T w_K mu^T w_Q)/sqrt(p), p = round(c n), which --n
            prints: for t > 0.15 the asymptotic E_attention is too large (exact simulation lies about
            30% below it at t = 0.7 for tanh).
            --finite-p (with --n) solves the finite-p corrected theory instead: the kernel is
            expanded around the exact latent part of its argument (all orders in t and in the
            signal/weight projections) with a pair-dependent slope; see docs/finite_p.md.

            JSON: {"gamma", "E_attention", "E_linear", "a1", "nu", "d"}; E_* are lists aligned with
            gamma, and the key of a model not requested (--model linear or attention) is omitted.
            d is the diagonal constant used (d_n with --n, 0 with --diagonal zero, null if infinite).
            With --n the object also has "t"; with --finite-p, "correction": "finite-p".""",
        examples=[
            "symattn solve --activation tanh --c 0.5 --gamma 0.01 0.1 1 10",
            "symattn solve -a relu --c 1 --gamma 0.1 --aligned --snr 1 --json",
            "symattn solve -a he3 --diagonal zero --c 2 --gamma 0.1 1 --model attention",
            "symattn solve -a tanh --c 1 --gamma 0.01 --n 1000       # finite-p diagonal d_n",
            "symattn solve -a tanh --c 0.3 --gamma 0.03 --aligned --snr 3 --n 1000 --finite-p",
            "symattn solve -a erf --c 0.5 --gamma 1 --backend mpmath --dps 40 --model linear",
        ],
        notes="Exit code 3 when the solver does not converge (the message gives the residual).",
    )
    add_activation_arg(p)
    p.add_argument("--c", type=float, required=True, metavar="C", help="c = p/n, 0 < C <= 10000")
    add_gamma_arg(p)
    add_geometry_args(p)
    p.add_argument("--model", choices=("attention", "linear", "both"), default="both",
                   help="which error(s) to compute (default both)")
    p.add_argument("--backend", choices=("numpy", "mpmath"), default="numpy",
                   help="numpy (fast, double precision) or mpmath (at --dps digits). Default numpy")
    p.add_argument("--dps", type=int, default=30, metavar="D",
                   help="mpmath digits for --backend mpmath, 15 <= D <= 1000 (default 30)")
    p.add_argument("--n", type=int, default=None, metavar="N",
                   help="use the finite-p diagonal d_n at n tokens (p = round(c n)) instead of d; "
                        "prints the signal strength t and warns when t > 0.15")
    p.add_argument("--finite-p", dest="finite_p", action="store_true",
                   help="finite-p corrected attention theory (needs --n; matters when t > 0.15)")
    add_diagonal_arg(p)
    add_json_flag(p)
    p.set_defaults(func=run_solve)
    return p


def solve_data(act: str, c: float, gamma, geometry=None, model: str = "both", backend: str = "numpy",
               dps: int = 30, n: int | None = None, diagonal: str = "f", correction: str | None = None) -> dict:
    """The ``symattn solve --json`` object."""
    import numpy as np

    from .activations import activation
    from .errors import ParameterError
    from .model import as_geometry, check_c, check_diagonal, check_dps, check_gamma, check_int, kernel_constants

    if model not in ("attention", "linear", "both"):
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    if backend not in ("numpy", "mpmath"):
        raise ParameterError("backend", backend, "one of 'numpy', 'mpmath'")
    c = float(check_c(c))
    gamma = check_gamma(gamma)
    dps = check_dps(dps)
    if n is not None:
        n = check_int("n", n, 2)
    check_diagonal(diagonal)
    geometry = as_geometry(geometry)
    f = activation(act)
    if model == "linear":
        d = 0.0 if diagonal == "zero" else _float(f.d)
    else:  # validates the diagonal mode against f (superlinear f needs diagonal='zero')
        d = _float(kernel_constants(f, diagonal=diagonal, n=n, c=c, snr=geometry.snr).d)
    from . import finite_p

    finite_p.check_correction(correction, n)
    from .solve import memorization_error  # after validation: bad input never needs the solvers

    with warnings.catch_warnings():  # the CLI prints t and its own warning (run_solve)
        warnings.simplefilter("ignore", finite_p.FiniteSizeWarning)
        res = memorization_error(f, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps,
                                 n=n, diagonal=diagonal, correction=correction)
    if model == "both":
        errs = {"E_attention": res["attention"], "E_linear": res["linear"]}
    else:
        errs = {f"E_{model}": res}
    out = {"gamma": gamma.ravel().tolist()}
    out.update({k: np.asarray(v, dtype=float).ravel().tolist() for k, v in errs.items()})
    out.update({"a1": _float(f.a1), "nu": _float(f.nu), "d": d})
    if n is not None:
        out["t"] = float(finite_p.signal_strength(geometry, n, c))
    if correction is not None:
        out["correction"] = correction
    return out


def run_solve(args) -> int:
    geometry = geometry_from_args(args)
    data = solve_data(args.activation, args.c, args.gamma, geometry, args.model, args.backend, args.dps,
                      args.n, args.diagonal, "finite-p" if args.finite_p else None)
    if "t" in data and data["t"] > 0.15 and not args.finite_p and args.model != "linear":
        print(f"symattn: warning: signal strength t = {data['t']:.3g} > 0.15: the asymptotic E_attention is "
              "biased upwards at this size; add --finite-p for the finite-p corrected theory", file=sys.stderr)
    if args.json:
        print(dump_json(data))
        return EXIT_OK
    print(f"activation {args.activation}: a1 = {fmt(data['a1'])}, nu = {fmt(data['nu'])}, "
          f"d = {'inf' if data['d'] is None else fmt(data['d'])};  c = {fmt(args.c)}"
          + (f", n = {args.n}" if args.n else ""))
    print(_geometry_line(geometry))
    if "t" in data:
        print(f"signal strength t = {fmt(data['t'])}; attention theory: "
              + ("finite-p corrected" if args.finite_p else "asymptotic"))
    keys = [k for k in ("E_attention", "E_linear") if k in data]
    rows = [[fmt(g)] + [fmt(data[k][i], 8) for k in keys] for i, g in enumerate(data["gamma"])]
    print(format_table(["gamma"] + keys, rows, align="r" * (1 + len(keys))))
    return EXIT_OK


# ============================================================================ simulate
def add_simulate_parser(subparsers):
    p = add_command(
        subparsers, "simulate",
        help="exact finite-n Monte Carlo of E_attention and E_linear",
        description="""
            Exact Monte Carlo of the finite-n model (MATH.md 2). Each draw samples X = mu y^T + Z
            (p x n, p = round(c n), Z i.i.d. N(0,1), balanced labels y in {+-1}^n), builds the
            kernel K = f(X^T W X/sqrt p)/sqrt p with W = I + w_K w_Q^T, and from one eigh of
            M = K^T X^T X K/n = sum_k lambda_k v_k v_k^T gets every ridge at once:
            E_A(gamma) = (gamma^2/n) sum_k (v_k^T y)^2/(lambda_k + gamma)^2; E_LR the same with
            M = X^T X/n. Reports the mean and standard error over the draws; runs are reproducible
            by --seed. Progress is shown on stderr for long runs.

            JSON: {"gamma", "n", "p", "draws", "E_attention": {"mean", "sem"},
            "E_linear": {"mean", "sem"}}.""",
        examples=[
            "symattn simulate --activation tanh --n 500 --c 1 --gamma 0.01 0.1 1",
            "symattn simulate -a relu --n 1000 --c 0.5 --gamma 0.1 1 --aligned --snr 1 --draws 8 --json",
            "symattn simulate -a he3 --diagonal zero --n 800 --c 2 --gamma 1",
            "symattn simulate -a tanh --n 4000 --c 1 --gamma 0.1 --backend torch --device cuda",
        ],
    )
    add_activation_arg(p)
    p.add_argument("--n", type=int, required=True, metavar="N", help="number of tokens n >= 2")
    p.add_argument("--c", type=float, required=True, metavar="C", help="c = p/n, 0 < C <= 10000")
    add_gamma_arg(p)
    add_geometry_args(p)
    p.add_argument("--draws", type=int, default=4, metavar="D", help="independent draws (default 4)")
    p.add_argument("--seed", type=int, default=0, metavar="S", help="random seed (default 0)")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy",
                   help="numpy (CPU) or torch (CPU or CUDA; needs the [gpu] extra). Default numpy")
    p.add_argument("--device", default=None, metavar="DEV",
                   help="torch device: cpu or cuda (default: cuda if available, else cpu)")
    add_diagonal_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json_flag(p)
    p.set_defaults(func=run_simulate)
    return p


def simulate_data(act: str, n: int, c: float, gamma, geometry=None, draws: int = 4, seed: int = 0,
                  backend: str = "numpy", device: str | None = None, diagonal: str = "f",
                  progress=None) -> dict:
    """The ``symattn simulate --json`` object."""
    from .activations import activation
    from .model import as_geometry
    from .montecarlo import simulate

    f = activation(act)
    res = simulate(f, n=n, c=c, gamma=gamma, geometry=as_geometry(geometry), draws=draws, seed=seed,
                   backend=backend, device=device, diagonal=diagonal, progress=progress)
    return res.to_dict()


def run_simulate(args) -> int:
    geometry = geometry_from_args(args)
    data = simulate_data(args.activation, args.n, args.c, args.gamma, geometry, args.draws, args.seed,
                         args.backend, args.device, args.diagonal,
                         progress=False if args.no_progress else None)
    if args.json:
        print(dump_json(data))
        return EXIT_OK
    print(f"activation {args.activation}: n = {data['n']}, p = {data['p']}, draws = {data['draws']}, "
          f"seed = {args.seed}, backend = {args.backend}")
    print(_geometry_line(geometry))
    rows = []
    for i, g in enumerate(data["gamma"]):
        row = [fmt(g)]
        for k in ("E_attention", "E_linear"):
            row += [fmt(data[k]["mean"][i], 6), fmt(data[k]["sem"][i], 2)]
        rows.append(row)
    print(format_table(["gamma", "E_attention", "sem", "E_linear", "sem"], rows, align="rrrrr"))
    return EXIT_OK


# ============================================================================ demo
def add_demo_parser(subparsers):
    p = add_command(
        subparsers, "demo",
        help="short tour: Hermite expansion, theory vs Monte Carlo table, a figure",
        description="""
            A one-minute tour of symattn: the Hermite expansion of tanh (a_k, a1, nu, d), the
            linear-regression error E_LR(gamma) from the deterministic equivalent next to a small
            exact Monte Carlo (n = 500) with standard errors for c in {0.5, 1}, the same for
            attention E_A (with the finite-p diagonal d_n), and a figure DIR/demo_linear.png of theory
            curves vs Monte Carlo points.""",
        examples=["symattn demo", "symattn demo --out /tmp/demo --json"],
    )
    p.add_argument("--out", default="symattn-out", metavar="DIR",
                   help="directory for the figure (default symattn-out)")
    add_json_flag(p)
    p.set_defaults(func=run_demo)
    return p


def run_demo(args) -> int:
    from .demo import run

    summary = run(out=args.out, echo=None if args.json else print)
    if args.json:
        print(dump_json(summary))
    return EXIT_OK


# ============================================================================ main
def _error(msg: str) -> None:
    msg = " ".join(str(msg).split())  # one line
    print(f"symattn: error: {msg}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (see the module docstring)."""
    from .errors import ConvergenceError, SymattnError

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


if __name__ == "__main__":  # python -m symattn.cli
    sys.exit(main())
