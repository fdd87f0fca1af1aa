r"""``symattn solve``: the deterministic-equivalent memorization errors E_attention and E_linear."""

from __future__ import annotations

import warnings

from ..formatting import decimal, finite_or_none
from ..model import N_MAX, STRONG_SIGNAL_T
from .common import (EXIT_OK, add_activation_arg, add_command, add_diagonal_arg, add_dps_arg, add_gamma_arg,
                     add_geometry_args, add_variant_args, add_weights_args, finish_command, fmt, format_table,
                     geometry_from_args, geometry_line, integer, number, print_json, variant_parameters,
                     with_provenance)

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
    prints: for |t| > 0.15 (t > 0.15 or t < -0.15) the asymptotic E_attention is off (exact
    simulation lies about 30% below it at t = 0.7 for tanh).
    --finite-p (with --n) solves the finite-p corrected theory instead: the kernel is
    expanded around the exact latent part of its argument (all orders in t and in the
    signal/weight projections) with a pair-dependent slope; see docs/finite_p.md.

    Several c: --c 0.5 1 2 solves every (c, gamma) point; a point whose solver fails is
    reported (null in JSON, 'failed' in the table) while the others are kept, and the exit code
    is then 3.

    Test error (--error test|both): the readout fitted on one sequence is tested on a fresh one
    of the same law, E_test = 1 - 2 beta^T m + beta^T C beta with the test moments m = E[Phi' y']/n,
    C = E[Phi' Phi'^T]/n (docs/theory.md §14). It is >= 0 and exceeds 1 when the readout does worse
    than predicting 0 (always, without signal). Keys E_attention_test, E_linear_test.

    JSON: {"gamma", "E_attention", "E_linear", "a1", "nu", "d", "provenance"}; E_* are lists
    aligned with gamma (with --backend mpmath, decimal strings of --dps significant digits), and the key of a model not requested (--model linear or attention) is
    omitted. d is the diagonal constant used (d_n with --n, 0 with --diagonal zero, null if
    infinite). With --n the object also has "t"; with --finite-p, "correction": "finite-p".
    With several c it also has "c", E_* are lists of rows (one per c, each aligned with gamma),
    and "t" (and "d" with --n) are lists aligned with c. When a point failed, "failed" lists
    {"c", "gamma", "model", "error"}. "accuracy" gives, per point of E_attention, the accuracy
    atlas' measurement nearby (docs/accuracy.md): {"flag": ok|miss|unvalidated, "gap", "se",
    "distance"}; the table shows the flag in the column atlas. "accuracy_test" is the same for
    E_attention_test (the atlas' test-error cells). "provenance" records the symattn
    and library versions, the parameters, the backend and a timestamp.

    Variants (docs/theory.md §13; E_linear stays the plain ridge on X): --residual, --heads with
    --readout concat|sum, --kernel softmax --temperature TAU (with --diagonal zero and --n; gamma
    is the softmax layer's own ridge). With --weights, only --residual (the residual layer of that
    one head). What the theory does not cover is refused with the reason.

    Time-correlated tokens (docs/theory.md §15): --ar1 RHO or --autocorr FILE.npy (r_1..r_L) correlate
    the tokens in time, --markov Q makes the labels a +-1 Markov chain. The theory under them is that
    of linear regression, and attention's training and test errors at finite p for the paper's layer
    (needs --n; docs/theory.md §15.5, §15.6)."""
EXAMPLES = [
    "symattn solve --activation tanh --c 0.5 --gamma 0.01 0.1 1 10",
    "symattn solve -a relu --c 1 --gamma 0.1 --aligned --snr 1 --json",
    "symattn solve -a he3 --diagonal zero --c 2 --gamma 0.1 1 --model attention",
    "symattn solve -a tanh --c 1 --gamma 0.01 --n 1000       # finite-p diagonal d_n",
    "symattn solve -a tanh --c 0.3 --gamma 0.03 --aligned --snr 3 --n 1000 --finite-p",
    "symattn solve -a erf --c 0.5 --gamma 1 --backend mpmath --dps 40 --model linear",
    "symattn solve -a tanh --c 0.5 1 2 --gamma 0.1 1 --snr 1 --json   # several c",
    "symattn solve -a tanh --c 0.5 --gamma 0.01 1 --weights minilm:2 --mu top --snr 1   # real W",
    "symattn solve -a tanh --c 0.5 2 --gamma 0.1 1 --aligned --snr 1 --residual",
    "symattn solve -a tanh --c 0.5 --gamma 0.1 1 --heads minilm:2 --readout sum",
    "symattn solve --c 0.5 --gamma 1e-3 --kernel softmax --temperature 2 --diagonal zero --n 1000",
    "symattn solve -a tanh --c 0.5 1 2 --gamma 0.01 0.1 1 --aligned --snr 1 --error both   # train and test",
    "symattn solve --c 0.5 1 --gamma 0.1 1 --snr 1 --model linear --error both --ar1 0.5 --markov 0.9",
]
NOTES = """Exit code 3 when the solver does not converge at some point: the other points are still
    printed, and the one-line message names the failed points and the reason (residual, iterations)."""


def add_parser(subparsers):
    p = add_command(subparsers, "solve", help=HELP, description=DESCRIPTION, examples=EXAMPLES, notes=NOTES)
    add_activation_arg(p)
    p.add_argument("--c", type=number, nargs="+", required=True, metavar="C",
                   help="c = p/n, 0 < C <= 10000 (one or more; each is solved at every gamma)")
    add_gamma_arg(p, zero=True)
    add_geometry_args(p)
    p.add_argument("--model", choices=("attention", "linear", "both"), default="both",
                   help="which model(s) to solve (default both)")
    p.add_argument("--error", choices=("train", "test", "both"), default="train",
                   help="train: the memorisation error (default); test: the generalisation error of the readout "
                        "on a fresh sequence, E_test = E(1/n)||y' - Phi'^T beta||^2 (docs/theory.md §14; the "
                        "paper's model, --weights, --heads with --readout sum, one W's --residual; gamma > 0); both: "
                        "the two, columns E_*_test beside E_*")
    p.add_argument("--backend", choices=("numpy", "mpmath"), default="numpy",
                   help="numpy (fast, double precision) or mpmath (at --dps digits). Default numpy")
    add_dps_arg(p, "mpmath digits for --backend mpmath")
    p.add_argument("--n", type=integer("n", 2, N_MAX), default=None, metavar="N",
                   help="use the finite-p diagonal d_n at n tokens (p = round(c n)) instead of d; "
                        f"2 <= N <= {N_MAX:.0e}; prints the signal strength t and warns when |t| > 0.15")
    p.add_argument("--finite-p", dest="finite_p", action="store_true",
                   help="finite-p corrected attention theory (needs --n; matters when |t| > 0.15; "
                        "not with --model linear)")
    add_diagonal_arg(p)
    add_weights_args(p)
    p.add_argument("--structure", default="auto", choices=("auto", "blocks", "free"),
                   help="with --weights: the model of the kernel's nonlinear part: free elliptic noise "
                        "(docs/theory.md §12.1), structured Hermite blocks of a low-rank W (§12.8: a single "
                        "head), or auto (default: blocks when rank W <= min(64, p/4))")
    add_variant_args(p)
    from .tokens import add_tokens_args

    add_tokens_args(p)
    return finish_command(p, run)


def _solve_row(f, c: float, gamma, model: str, keep_going: bool, error: str = "train", **kwargs):
    """E of one model at one c and every γ, as floats, and the failed points as ``(γ, reason)``.

    With ``keep_going`` a point that fails is NaN (:func:`symattn.solve` with ``errors="nan"``)
    and the others are kept; otherwise the first failure raises ConvergenceError.
    """
    import numpy as np

    from ..errors import ConvergenceError, FailedPointsWarning
    from ..layer import Layer, memorization_error

    gamma = np.asarray(gamma, dtype=float).reshape(-1)
    zero = gamma == 0
    exact = kwargs.get("backend") == "mpmath"   # mpmath values stay mpf: printed with their digits
    row = np.full(gamma.shape, np.nan, dtype=object if exact else float)
    failed = []
    if zero.any():  # γ = 0: the ridgeless value (docs/theory.md §7.6); c >= 1 raises ParameterError naming gamma
        try:
            E0 = memorization_error(f, c, 0.0, model=model, error=error, **kwargs)
            row[zero] = np.asarray(E0, dtype=object).item() if exact else float(E0)
        except ConvergenceError as exc:
            if not keep_going:
                raise
            failed.append((0.0, str(exc)))
    accuracy = [None] * gamma.size
    if (~zero).any():
        layer = Layer(f, diagonal=kwargs.pop("diagonal", "f"))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FailedPointsWarning)  # the caller reports every failed point itself
            res = layer.theory(c, gamma[~zero], model=model, errors="nan" if keep_going else "raise", error=error,
                               **kwargs)
        E = np.asarray(res.E, dtype=object).reshape(-1)
        row[~zero] = E if exact else E.astype(float)
        failed += [(float(p["gamma"]), str(p.get("reason") or "no convergence")) for p in (res.failures or [])]
        if res.accuracy is not None:   # the measured accuracy of the atlas at each point (docs/accuracy.md)
            acc = res.accuracy
            for j, i in enumerate(np.nonzero(~zero)[0]):
                accuracy[i] = {"flag": acc.flag(j), "gap": finite_or_none(acc.gap.flat[j]),
                               "se": finite_or_none(acc.se.flat[j]), "distance": finite_or_none(acc.distance.flat[j])}
    return row, failed, accuracy


def solve_data(act: str, c, gamma, geometry=None, model: str = "both", backend: str = "numpy",
               dps: int = 30, n: int | None = None, diagonal: str = "f", correction: str | None = None,
               errors: str = "raise", error: str = "train", tokens=None) -> dict:
    """The ``symattn solve --json`` object (without its provenance): E_attention and/or E_linear.

    E(γ) = −γ² F'(γ) of the deterministic equivalents (docs/theory.md §3, §5-6), one value per γ
    (and per c), with the Hermite constants a1, ν and the diagonal constant d that were used.

    Parameters
    ----------
    act : str or Activation
        A catalog name or a SymPy expression in x.
    c : float or sequence of float
        p/n; one value, or several (every (c, γ) point is solved).
    gamma : float or sequence of float
        Ridge values 0 < γ <= 1e12, or γ = 0 for the ridgeless value (the γ → 0 limit, only where every
        c < 1; :func:`symattn.memorization_error`, docs/theory.md §7.6).
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
        The finite-p corrected attention theory (needs ``n``, not with model 'linear'; docs/theory.md §10).
    errors : {"raise", "nan"}
        "raise": a point whose solver fails raises ConvergenceError. "nan": it is NaN (null in
        JSON), the other points are kept, and ``"failed"`` lists the failed points.
    error : {"train", "test", "both"}
        The training error (keys ``E_attention``, ``E_linear``), the test error on a fresh sequence
        (keys ``E_attention_test``, ``E_linear_test``; docs/theory.md §14), or both.
    tokens : TokenLaw, dict or None
        Time-correlated tokens and/or Markov labels (docs/theory.md §15; attention needs ``n``).

    Returns
    -------
    dict
        ``{"gamma", "E_attention", "E_linear", "a1", "nu", "d"}`` (the key of a model not asked for
        is omitted), plus ``"t"`` with ``n`` and ``"correction"`` with ``correction``. With several c
        also ``"c"``; E_* are then rows, one per c, and ``"t"`` (and ``"d"`` with ``n``) lists
        aligned with c. With ``errors="nan"`` and a failure, ``"failed"``: ``[{"c", "gamma",
        "model", "error"}]``.

    Examples
    --------
    >>> data = solve_data("tanh", 1.0, [0.1, 1.0], model="linear")
    >>> sorted(data), [round(e, 6) for e in data["E_linear"]]
    (['E_linear', 'a1', 'd', 'gamma', 'nu'], [0.156174, 0.447214])
    >>> rows = solve_data("tanh", [0.5, 2.0], 1.0, model="linear")
    >>> rows["c"], [[round(e, 6) for e in r] for r in rows["E_linear"]]
    ([0.5, 2.0], [[0.674437], [0.207107]])
    >>> [round(e, 6) for e in solve_data("tanh", 0.5, 1.0, model="linear", error="test")["E_linear_test"]]
    [1.106339]
    """
    import numpy as np

    from ..activations.activation import activation
    from ..errors import FiniteSizeWarning, ParameterError
    from ..model import (as_geometry, check_c, check_diagonal, check_dps, check_gamma, check_n, kernel_constants,
                         signal_strength, weight_strength)

    if model not in ("attention", "linear", "both"):
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    if backend not in ("numpy", "mpmath"):
        raise ParameterError("backend", backend, "one of 'numpy', 'mpmath'")
    if errors not in ("raise", "nan"):
        raise ParameterError("errors", errors, "one of 'raise', 'nan'")
    from ..model import check_error

    errs = check_error(error, multiple=True)
    if "test" in errs and correction is not None:
        raise ParameterError("error", error, "'train' with the finite-p correction (--finite-p)",
                             hint="the test-error theory (docs/theory.md §14) is the asymptotic one")
    items = list(np.asarray(c, dtype=object).ravel()) if isinstance(c, (list, tuple, np.ndarray)) else [c]
    several = len(items) > 1
    cs = np.array([float(check_c(ci)) for ci in items])  # one at a time: the message shows the bad value
    if cs.size == 0:
        raise ParameterError("c", c, "at least one value")
    gamma = np.atleast_1d(np.asarray(gamma, dtype=object)).ravel()
    zero = np.array([isinstance(g, (int, float)) and not isinstance(g, bool) and g == 0 for g in gamma], dtype=bool)
    # γ = 0 is the ridgeless value (c < 1 only, :func:`symattn.memorization_error`); the others 0 < γ <= 1e12
    gamma = np.array([0.0 if z else float(check_gamma(g)) for g, z in zip(gamma, zero)], dtype=float)
    if zero.any() and "test" in errs:
        from ..generalization import check_test_gamma

        check_test_gamma(0.0)   # raises: the test error has no ridgeless value
    if zero.any() and cs.max() >= 1:
        raise ParameterError("gamma", 0.0, "0 < gamma <= 1e12; gamma = 0 (the ridgeless limit) only where c < 1",
                             hint=f"c={cs.max():g} >= 1, where the training error tends to 0 as gamma -> 0")
    dps = check_dps(dps)
    if n is not None:
        n = check_n(n)
    check_diagonal(diagonal)
    geometry = as_geometry(geometry)
    from ..backends import finite_p

    finite_p.check_correction(correction, n)
    if correction is not None and model == "linear":
        raise ParameterError("correction", correction, "only with model 'attention' or 'both' (CLI: --finite-p "
                             "needs --model attention or both)", hint="the finite-p correction is of the attention "
                             "theory; E_linear does not depend on n")
    f = activation(act)
    if model == "linear":
        ds = [0.0 if diagonal == "zero" else finite_or_none(f.d)] * cs.size
    else:  # validates the diagonal mode against f (superlinear f needs diagonal='zero')
        k = kernel_constants(f, diagonal=diagonal, n=n, c=cs, snr=geometry.snr)
        ds = [finite_or_none(d) for d in np.broadcast_to(np.asarray(k.d, dtype=float), cs.shape)]
    models = ["attention", "linear"] if model == "both" else [model]
    kwargs = dict(geometry=geometry, backend=backend, dps=dps, n=n, diagonal=diagonal)
    if tokens is not None:
        kwargs["tokens"] = tokens
    rows = {}
    failed, accuracy, accuracy_test = [], [], []
    with warnings.catch_warnings():  # the CLI prints t and its own warning (run)
        warnings.simplefilter("ignore", FiniteSizeWarning)
        for ci in cs:
            for m in models:
                for err in errs:
                    key = m if err == "train" else m + "_test"
                    row, bad, acc = _solve_row(f, float(ci), gamma, m, errors == "nan", error=err,
                                               **kwargs, correction=correction if m == "attention" else None)
                    rows.setdefault(key, []).append([decimal(v, dps) for v in row] if backend == "mpmath"
                                                    else row.tolist())
                    if key == "attention":
                        accuracy.append(acc)
                    elif key == "attention_test":   # the atlas' test-error cells (docs/accuracy.md)
                        accuracy_test.append(acc)
                    failed += [{"c": float(ci), "gamma": g, "model": key, "error": msg} for g, msg in bad]
    out = {"c": cs.tolist()} if several else {}
    out["gamma"] = gamma.tolist()
    for m in ("attention", "linear", "attention_test", "linear_test"):
        if m in rows:
            out[f"E_{m}"] = rows[m] if several else rows[m][0]
    out.update({"a1": finite_or_none(f.a1), "nu": finite_or_none(f.nu),
                "d": ds if several and n is not None else ds[0]})
    if n is not None:
        ts = [float(t) for t in np.atleast_1d(signal_strength(geometry, n, cs))]
        out["t"] = ts if several else ts[0]
        sws = [float(s) for s in np.atleast_1d(weight_strength(geometry, n, cs))]
        out["weight_strength"] = sws if several else sws[0]
    if accuracy:
        out["accuracy"] = accuracy if several else accuracy[0]
    if accuracy_test:
        out["accuracy_test"] = accuracy_test if several else accuracy_test[0]
    if correction is not None:
        out["correction"] = correction
    if failed:
        out["failed"] = failed
    return out


def _failure_message(failed: list, total: int) -> str:
    """One line: how many points failed, which ones, and the first reason."""
    where = ", ".join(f"{p['model']} at c={p['c']:g}, gamma={p['gamma']:g}" for p in failed[:4])
    more = f" and {len(failed) - 4} more" if len(failed) > 4 else ""
    reason = failed[0]["error"]
    reason = reason[len("no convergence"):].lstrip(":; ") if reason.lower().startswith("no convergence") else reason
    return f"no convergence at {len(failed)} of {total} points ({where}{more}): {reason}"


def run(args) -> int:
    from ..errors import ConvergenceError, FiniteSizeWarning, ParameterError

    from .general_w import layer_from_args

    from .tokens import tokens_from_args

    layer = layer_from_args(args)
    law = tokens_from_args(args)
    if law is not None and (variant_parameters(args) or layer.weights is not None):
        raise ParameterError("tokens", law, "unset with --weights, --heads, --residual or --kernel",
                             hint="the theory under time-correlated tokens (docs/theory.md §15) is linear regression's; "
                                  "simulate the layer: symattn simulate ... --ar1 RHO")
    if law is not None and args.model != "linear" and args.n is None:
        raise ParameterError("n", None, "the number of tokens --n N with --ar1, --autocorr or --markov and --model "
                                        "attention or both",
                             hint="the attention theory under correlated tokens is at finite p = round(c n) "
                                  "(docs/theory.md §15.5)")
    if variant_parameters(args):
        return _run_variant(args, layer)
    if layer.weights is not None:
        from .general_w import run_weights

        return run_weights(args, layer)
    if getattr(args, "mu", None) is not None:
        raise ParameterError("mu", args.mu, "unset without --weights (use --snr and the geometry flags)")
    if getattr(args, "structure", "auto") != "auto":
        raise ParameterError("structure", args.structure, "auto unless --weights is given")
    geometry = geometry_from_args(args)
    correction = "finite-p" if args.finite_p else None
    data = solve_data(args.activation, args.c, args.gamma, geometry, args.model, args.backend, args.dps,
                      args.n, args.diagonal, correction, errors="nan", error=args.error, tokens=law)
    several = "c" in data
    ts = (data["t"] if several else [data["t"]]) if "t" in data else []
    t_max = max(ts, key=abs) if ts else 0.0
    sws = data.get("weight_strength", [])
    sws = sws if isinstance(sws, list) else [sws]
    # with --finite-p the signal-dominated points (|t| >= s_w, w along mu) are covered by the correction
    sw_max = max([sw for sw, t in zip(sws, ts) if not (args.finite_p and abs(t) >= sw)], default=0.0)
    said = []   # one warning line for every strong direction
    if abs(t_max) > STRONG_SIGNAL_T and not args.finite_p and args.model != "linear":
        said.append(f"signal strength t = {t_max:.3g} {'>' if t_max > 0 else '<'} {'' if t_max > 0 else '-'}"
                    f"{STRONG_SIGNAL_T:g} (|t| > {STRONG_SIGNAL_T:g}): the asymptotic E_attention is biased at this "
                    "size; add --finite-p for the finite-p corrected theory")
    if sw_max > STRONG_SIGNAL_T and args.model != "linear":
        said.append(f"weight strength ||w_K|| ||w_Q||/sqrt(p) = {sw_max:.3g} > {STRONG_SIGNAL_T:g}: outside the "
                    "regime the theory covers; E_attention can be far off (check with symattn simulate)")
    if said:
        warnings.warn(FiniteSizeWarning("; and ".join(said)))
    failed = data.get("failed", [])
    if args.json:
        from .tokens import tokens_parameters

        print_json(with_provenance(data, {**_parameters(args, geometry), **tokens_parameters(law)}, backend=args.backend,
                                   dtype="float64" if args.backend == "numpy" else f"mpf ({args.dps} digits)"))
    else:
        if law is not None:
            print(f"tokens: {law!r} (docs/theory.md §15)")
        _print_table(args, data, geometry, several)
    if failed:
        models = (2 if args.model == "both" else 1) * (2 if args.error == "both" else 1)
        raise ConvergenceError(_failure_message(failed, len(data["gamma"]) * len(args.c) * models))
    return EXIT_OK


def _parameters(args, geometry) -> dict:
    return {"command": "solve", "activation": args.activation, "c": list(args.c), "gamma": list(args.gamma),
            "geometry": geometry.as_dict(), "model": args.model, "backend": args.backend, "dps": args.dps,
            "n": args.n, "diagonal": args.diagonal, "correction": "finite-p" if args.finite_p else None,
            "error": args.error}


def _print_table(args, data, geometry, several: bool) -> None:
    d = data["d"]
    d_text = ("d_n per c (column d)" if isinstance(d, list) else "inf" if d is None else fmt(d))
    print(f"activation {args.activation}: a1 = {fmt(data['a1'])}, nu = {fmt(data['nu'])}, "
          f"d = {d_text};  c = {', '.join(fmt(c) for c in args.c)}"
          + (f", n = {args.n}" if args.n else ""))
    print(geometry_line(geometry))
    theory = "finite-p corrected" if args.finite_p else "asymptotic"
    if getattr(args, "ar1", None) is not None or getattr(args, "autocorr", None) is not None:
        theory = "finite p, tokens correlated in time (docs/theory.md §15.5)"
    if "t" in data and not several:
        print(f"signal strength t = {fmt(data['t'])}; attention theory: {theory}")
    elif "t" in data:
        print(f"signal strength t per c (column t); attention theory: {theory}")
    keys = [k for k in ("E_attention", "E_linear", "E_attention_test", "E_linear_test") if k in data]

    def cell(v):
        return "failed" if v is None or v != v else fmt(v, 8)

    acc = data.get("accuracy")

    def strong(i):   # a strong direction is large at the i-th c (the FiniteSizeWarning's short form)
        t = data["t"][i] if several else data["t"]
        sw = data["weight_strength"][i] if several else data["weight_strength"]
        if args.finite_p:   # the correction covers |t| and a signal-dominated s_w
            return sw > max(STRONG_SIGNAL_T, abs(t))
        return max(sw, abs(t)) > STRONG_SIGNAL_T

    def atlas(a, i=0):   # the accuracy atlas' flag of the point (docs/accuracy.md); never 'ok' where it is strong
        if "t" in data and strong(i):
            return "finite-size"
        if a is None:
            return "-"
        return a["flag"] if a["flag"] != "miss" or a["gap"] is None else f"miss {100 * a['gap']:+.0f}%"

    # say which error the atlas column is of when a test column stands beside it (the test error's alone: its own)
    atlas_col = [] if acc is None else ["atlas (train)" if "E_attention_test" in keys else "atlas"]
    if acc is None and data.get("accuracy_test") is not None:
        acc, atlas_col = data["accuracy_test"], ["atlas (test)"]
    if not several:
        rows = [[fmt(g)] + [cell(data[k][i]) for k in keys] + ([atlas(acc[i])] if acc is not None else [])
                for i, g in enumerate(data["gamma"])]
        print(format_table(["gamma"] + keys + atlas_col, rows, align="r" * (1 + len(keys)) + "l" * len(atlas_col)))
        return
    extra = (["d"] if isinstance(d, list) else []) + (["t"] if "t" in data else [])
    rows = []
    for i, c in enumerate(data["c"]):
        per_c = ([fmt(d[i])] if isinstance(d, list) else []) + ([fmt(data["t"][i])] if "t" in data else [])
        rows += [[fmt(c), fmt(g)] + per_c + [cell(data[k][i][j]) for k in keys]
                 + ([atlas(acc[i][j], i)] if acc is not None else []) for j, g in enumerate(data["gamma"])]
    print(format_table(["c", "gamma"] + extra + keys + atlas_col, rows,
                       align="r" * (2 + len(extra) + len(keys)) + "l" * len(atlas_col)))


def _run_variant(args, layer) -> int:
    """``symattn solve`` with the variant flags: E_attention of the variant layer
    (:meth:`symattn.Layer.theory`, docs/theory.md §13) and E_linear, per c, as a table or JSON."""
    import numpy as np

    from ..errors import ParameterError

    from .general_w import signal_from_args

    variant = variant_parameters(args)
    if args.finite_p:
        raise ParameterError("finite_p", True, "unset with the variant flags (no finite-p theory of the variants)")
    if args.structure != "auto":
        raise ParameterError("structure", args.structure, "auto with the variant flags")
    square = layer.p is not None   # the signal is mu (--mu), the size p is W's
    if square:
        from .general_w import refuse_geometry_flags

        refuse_geometry_flags(args, "--weights or --heads")
        if args.n is not None:
            raise ParameterError("n", args.n, "unset with --weights or --heads (n = round(p/c), p the size of W)")
        if args.snr is not None and args.mu is None:
            raise ParameterError("snr", args.snr, "unset with --weights or --heads unless --mu top is given")
        if args.backend != "numpy":
            raise ParameterError("backend", args.backend, "numpy with --weights or --heads")
    if layer.weights is not None and set(variant) != {"residual"}:
        raise ParameterError("weights", args.weights, "unset with --heads, --readout, --kernel or --temperature "
                             "(give several heads as --heads)")
    mu, geometry_used, _ = signal_from_args(args, layer)
    kw = dict(backend=args.backend, dps=args.dps, n=args.n)
    kw.update(mu=mu) if square else kw.update(geometry=geometry_used)
    geometry = geometry_from_args(args)
    out = {"c": list(args.c), "gamma": list(args.gamma)}
    from ..layer import Layer
    from ..model import Geometry

    # E_linear: ridge on X, which sees the signal only through ||mu||^2
    plain = Layer(args.activation, diagonal=args.diagonal)
    linear_kw = dict(backend=args.backend, dps=args.dps,
                     geometry=kw["geometry"] if not square else
                     Geometry(snr=float(np.dot(mu, mu))) if mu is not None else None)
    for err in ("train", "test"):   # the test error: docs/theory.md §14.9 (summed heads, one W's residual)
        if args.error not in (err, "both"):
            continue
        for m in ("attention", "linear"):
            if args.model in (m, "both"):
                rows = [[decimal(v, args.dps) if args.backend == "mpmath" else float(v) for v in np.asarray(
                            (layer.theory(ci, args.gamma, model=m, error=err, **kw) if m == "attention" else
                             plain.theory(ci, args.gamma, model=m, error=err, **linear_kw)).E, dtype=object).reshape(-1)]
                        for ci in args.c]
                out[f"E_{m}" + ("_test" if err == "test" else "")] = rows if len(args.c) > 1 else rows[0]
    shown = {**variant_parameters(args), **({"weights": args.weights} if args.weights is not None else {})}
    params = {**_parameters(args, geometry), "weights": args.weights, "mu": args.mu,
              **{k: getattr(args, k) for k in ("residual", "heads", "readout", "kernel", "temperature")}}
    if args.json:
        return print_json(with_provenance(out, params, backend=args.backend,
                                          dtype="float64" if args.backend == "numpy" else f"mpf ({args.dps} digits)"))
    print("variant: " + ", ".join(f"{k} = {v}" for k, v in shown.items()))
    if not square:
        print(geometry_line(geometry))
    for i, ci in enumerate(args.c):
        cols = [m for m in ("attention", "linear", "attention_test", "linear_test") if f"E_{m}" in out]
        rows = [[fmt(g)] + [fmt((out[f"E_{m}"][i] if len(args.c) > 1 else out[f"E_{m}"])[j], 6) for m in cols]
                for j, g in enumerate(args.gamma)]
        print(f"c = {fmt(ci)}")
        print(format_table(["gamma"] + [f"E_{m}" for m in cols], rows, align="r" * (len(cols) + 1)))
    return EXIT_OK
