r"""``symattn solve``: the deterministic-equivalent memorization errors E_attention and E_linear."""

from __future__ import annotations

import sys
import warnings

from ..formatting import finite_or_none
from ..model import STRONG_SIGNAL_T
from .common import (EXIT_OK, add_activation_arg, add_command, add_diagonal_arg, add_dps_arg, add_gamma_arg,
                     add_geometry_args, finish_command, fmt, format_table, geometry_from_args, geometry_line,
                     print_json)

HELP = "deterministic-equivalent memorization errors E_attention, E_linear"
DESCRIPTION = """
    Solves the deterministic equivalents (n, p -> inf with p/n = c) of the training
    mean-squared error of the ridge readout, E(gamma) = gamma^2 yhat^T Q(gamma)^2 yhat
    = -gamma^2 F'(gamma), F = lim yhat^T (Phi^T Phi/n + gamma I)^{-1} yhat, yhat = y/sqrt n.
    linear: Phi = X, closed form F_LR = m/(1 + gamma ||mu||^2 m mt) with mt the
    Marchenko-Pastur Stieltjes transform at -gamma and m = c mt + (1-c)/gamma (docs/theory.md §3).
    attention: Phi = X K, K = f(X^T W X/sqrt p)/sqrt p, through the linearised kernel
    a1 (X^T W X/p - I) + sqrt(nu - a1^2) N/sqrt p + d I: a 3-unknown bulk fixed point over
    the Marchenko-Pastur law plus a low-rank Woodbury correction (docs/theory.md §5-6).

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
    With --n the object also has "t"; with --finite-p, "correction": "finite-p"."""
EXAMPLES = [
    "symattn solve --activation tanh --c 0.5 --gamma 0.01 0.1 1 10",
    "symattn solve -a relu --c 1 --gamma 0.1 --aligned --snr 1 --json",
    "symattn solve -a he3 --diagonal zero --c 2 --gamma 0.1 1 --model attention",
    "symattn solve -a tanh --c 1 --gamma 0.01 --n 1000       # finite-p diagonal d_n",
    "symattn solve -a tanh --c 0.3 --gamma 0.03 --aligned --snr 3 --n 1000 --finite-p",
    "symattn solve -a erf --c 0.5 --gamma 1 --backend mpmath --dps 40 --model linear",
]
NOTES = "Exit code 3 when the solver does not converge (the message gives the residual)."


def add_parser(subparsers):
    p = add_command(subparsers, "solve", help=HELP, description=DESCRIPTION, examples=EXAMPLES, notes=NOTES)
    add_activation_arg(p)
    p.add_argument("--c", type=float, required=True, metavar="C", help="c = p/n, 0 < C <= 10000")
    add_gamma_arg(p)
    add_geometry_args(p)
    p.add_argument("--model", choices=("attention", "linear", "both"), default="both",
                   help="which error(s) to compute (default both)")
    p.add_argument("--backend", choices=("numpy", "mpmath"), default="numpy",
                   help="numpy (fast, double precision) or mpmath (at --dps digits). Default numpy")
    add_dps_arg(p, "mpmath digits for --backend mpmath")
    p.add_argument("--n", type=int, default=None, metavar="N",
                   help="use the finite-p diagonal d_n at n tokens (p = round(c n)) instead of d; "
                        "prints the signal strength t and warns when t > 0.15")
    p.add_argument("--finite-p", dest="finite_p", action="store_true",
                   help="finite-p corrected attention theory (needs --n; matters when t > 0.15)")
    add_diagonal_arg(p)
    return finish_command(p, run)


def solve_data(act: str, c: float, gamma, geometry=None, model: str = "both", backend: str = "numpy",
               dps: int = 30, n: int | None = None, diagonal: str = "f", correction: str | None = None) -> dict:
    """The ``symattn solve --json`` object: E_attention and/or E_linear of :func:`symattn.memorization_error`.

    E(γ) = −γ² F'(γ) of the deterministic equivalents (docs/theory.md §3, §5-6), one value per γ,
    with the Hermite constants a1, ν and the diagonal constant d that were used.

    Parameters
    ----------
    act : str or Activation
        A catalog name or a SymPy expression in x.
    c : float
        p/n.
    gamma : float or sequence of float
        Ridge values γ > 0.
    geometry : Geometry or dict, optional
        The Gram matrix of (μ, w_K, w_Q) (default μ = w = 0).
    model : {"both", "attention", "linear"}
    backend : {"numpy", "mpmath"}
    dps : int
        mpmath digits for ``backend="mpmath"``.
    n : int, optional
        Tokens: the finite-p diagonal d_n at p = round(c n), and the signal strength t.
    diagonal : {"f", "zero"}
    correction : {None, "finite-p"}
        The finite-p corrected attention theory (needs ``n``; docs/theory.md §10).

    Returns
    -------
    dict
        ``{"gamma", "E_attention", "E_linear", "a1", "nu", "d"}`` (the key of a model not asked for
        is omitted), plus ``"t"`` with ``n`` and ``"correction"`` with ``correction``.

    Examples
    --------
    >>> data = solve_data("tanh", 1.0, [0.1, 1.0], model="linear")
    >>> sorted(data), [round(e, 6) for e in data["E_linear"]]
    (['E_linear', 'a1', 'd', 'gamma', 'nu'], [0.156174, 0.447214])
    """
    import numpy as np

    from ..activations.activation import activation
    from ..errors import FiniteSizeWarning, ParameterError
    from ..model import (as_geometry, check_c, check_diagonal, check_dps, check_gamma, check_int, kernel_constants,
                         signal_strength)

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
        d = 0.0 if diagonal == "zero" else finite_or_none(f.d)
    else:  # validates the diagonal mode against f (superlinear f needs diagonal='zero')
        d = finite_or_none(kernel_constants(f, diagonal=diagonal, n=n, c=c, snr=geometry.snr).d)
    from ..backends import finite_p

    finite_p.check_correction(correction, n)
    from ..theory import memorization_error  # after validation: bad input never needs the solvers

    with warnings.catch_warnings():  # the CLI prints t and its own warning (run)
        warnings.simplefilter("ignore", FiniteSizeWarning)
        res = memorization_error(f, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps,
                                 n=n, diagonal=diagonal, correction=correction)
    if model == "both":
        errs = {"E_attention": res["attention"], "E_linear": res["linear"]}
    else:
        errs = {f"E_{model}": res}
    out = {"gamma": gamma.ravel().tolist()}
    out.update({k: np.asarray(v, dtype=float).ravel().tolist() for k, v in errs.items()})
    out.update({"a1": finite_or_none(f.a1), "nu": finite_or_none(f.nu), "d": d})
    if n is not None:
        out["t"] = float(signal_strength(geometry, n, c))
    if correction is not None:
        out["correction"] = correction
    return out


def run(args) -> int:
    geometry = geometry_from_args(args)
    data = solve_data(args.activation, args.c, args.gamma, geometry, args.model, args.backend, args.dps,
                      args.n, args.diagonal, "finite-p" if args.finite_p else None)
    if "t" in data and data["t"] > STRONG_SIGNAL_T and not args.finite_p and args.model != "linear":
        print(f"symattn: warning: signal strength t = {data['t']:.3g} > {STRONG_SIGNAL_T:g}: the asymptotic "
              "E_attention is biased upwards at this size; add --finite-p for the finite-p corrected theory",
              file=sys.stderr)
    if args.json:
        return print_json(data)
    print(f"activation {args.activation}: a1 = {fmt(data['a1'])}, nu = {fmt(data['nu'])}, "
          f"d = {'inf' if data['d'] is None else fmt(data['d'])};  c = {fmt(args.c)}"
          + (f", n = {args.n}" if args.n else ""))
    print(geometry_line(geometry))
    if "t" in data:
        print(f"signal strength t = {fmt(data['t'])}; attention theory: "
              + ("finite-p corrected" if args.finite_p else "asymptotic"))
    keys = [k for k in ("E_attention", "E_linear") if k in data]
    rows = [[fmt(g)] + [fmt(data[k][i], 8) for k in keys] for i, g in enumerate(data["gamma"])]
    print(format_table(["gamma"] + keys, rows, align="r" * (1 + len(keys))))
    return EXIT_OK
