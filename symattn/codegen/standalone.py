r"""The public functions and the command line of a generated standalone solver.

:func:`symattn.codegen.generate_solver` writes a module that carries, verbatim, the closed-form
runtime :mod:`symattn.backends.closed_runtime` (docs/theory.md §5.8: the closed form of
:func:`symattn.solve`, with its per-point quadrature fallback), with copies
of what it imports (the arithmetic context, the quadrature solver and the Woodbury step of :mod:`symattn.backends.solver`,
the finite-p diagonal d_n of :mod:`symattn.activations.diagonal`, ConvergenceError), the closed
kernels printed for one activation, and then this module's source: the functions below, written
against the runtime and the activation's constants.

Here, inside the library, the relative imports bind the runtime and the library's lambdified
kernels, and the constants are those of f(t) = t (a1 = ν = 1, s² = d = 0), so that this module
is itself a working solver for that activation and its examples run; a generated module drops
those lines and defines its own constants and kernels (tests/test_codegen.py runs the examples
there too). ``ARITHMETIC`` is 'float64' or 'mpmath' (the mpmath variant: ``dps`` digits, results
as mpmath numbers, decimal strings on the command line).
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from ..activations.diagonal import finite_p_diagonal
from ..backends.context import FloatContext
from ..backends.kernels import KERNELS
from ..errors import ConvergenceError
from ..backends.closed_runtime import GUARD_DIGITS, attention_points, isolated   # GUARD_DIGITS: the runtime's own

ACTIVATION, EXPRESSION = "linear", "x"  # f(t) = t here; a generated module defines its own constants
A0, A1, NU, S2, D = 0.0, 1.0, 1.0, 0.0, 0.0
KINKS, SUPERLINEAR = (), False
DIAGONAL, RANK, DPS, ARITHMETIC = "f", 1, 30, "float64"
CONTEXT = FloatContext
SYMATTN_VERSION = GENERATED = ""
N_MAX = 10**9
#: E values this far outside [0, 1] are rounding (clipped); further out the point fails
UNIT_SLACK = 1e-12
#: what a point that no method solves gives: 'raise' (ConvergenceError) or 'nan'
ERRORS = ("raise", "nan")


def _f_raw(t):
    """The uncentred f on float64 arrays (for the finite-p diagonal d_n)."""
    return np.asarray(t, dtype=float)


__all__ = ["memorization_error", "attention_error", "linear_error", "bulk_error", "aligned", "diagonal_constant",
           "gram_matrix", "ConvergenceError", "main", "A0", "A1", "NU", "S2", "D", "ACTIVATION", "RANK",
           "ARITHMETIC", "DPS"]

GEOMETRY_KEYS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")


def _check_positive(name, value, upper):
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"invalid {name}={value!r}: allowed real numbers 0 < {name} <= {upper:g}") from None
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0) or np.any(arr > upper):
        shown = value if arr.ndim == 0 else (arr.item() if arr.size == 1 else arr.tolist())
        raise ValueError(f"invalid {name}={shown!r}: allowed real numbers 0 < {name} <= {upper:g}")
    return arr


def gram_matrix(snr=0.0, wk2=0.0, wq2=0.0, mu_wk=0.0, mu_wq=0.0, wk_wq=0.0):
    r"""The Gram matrix of (mu, w_K, w_Q), shape (..., 3, 3), broadcast over the six entries.

    Parameters
    ----------
    snr, wk2, wq2, mu_wk, mu_wq, wk_wq : float or array
        snr = ||mu||^2, wk2 = ||w_K||^2, wq2 = ||w_Q||^2, mu_wk = mu^T w_K, mu_wq = mu^T w_Q,
        wk_wq = w_K^T w_Q; W_K^T W_Q = I + w_K w_Q^T.

    Returns
    -------
    array (..., 3, 3)
        [[snr, mu_wk, mu_wq], [mu_wk, wk2, wk_wq], [mu_wq, wk_wq, wq2]].

    Examples
    --------
    >>> gram_matrix(snr=2.0, mu_wk=0.5)[0].tolist()
    [2.0, 0.5, 0.0]
    """
    vals = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (snr, wk2, wq2, mu_wk, mu_wq, wk_wq)))
    s, k2, q2, mk, mq, kq = vals
    return np.stack([np.stack([s, mk, mq], -1), np.stack([mk, k2, kq], -1), np.stack([mq, kq, q2], -1)], -2)


def aligned(snr, theta=None):
    """Geometry keywords of w_K = w_Q = theta mu/||mu|| (theta = ||mu|| by default: w_K = w_Q = mu).

    Parameters
    ----------
    snr : float
        ||mu||^2 >= 0.
    theta : float, optional
        ||w_K|| = ||w_Q|| (default ||mu||).

    Returns
    -------
    dict
        snr, wk2 = wq2 = wk_wq = theta^2, mu_wk = mu_wq = theta ||mu||.

    Examples
    --------
    >>> aligned(4.0, theta=1.0)["mu_wk"]
    2.0
    """
    snr = float(snr)
    if not (math.isfinite(snr) and snr >= 0):
        raise ValueError(f"invalid snr={snr!r}: allowed snr >= 0")
    m = math.sqrt(snr)
    theta = m if theta is None else float(theta)
    k = theta * m
    return {"snr": snr, "wk2": theta**2, "wq2": theta**2, "mu_wk": k, "mu_wq": k, "wk_wq": theta**2}


def _check_gram(G):
    k = 1 + 2 * RANK
    if G.shape[-2:] != (k, k):
        raise ValueError(f"invalid gram of shape {G.shape}: allowed (..., {k}, {k}) for rank {RANK}")
    if not np.all(np.isfinite(G)) or not np.allclose(G, np.swapaxes(G, -1, -2), rtol=1e-10, atol=1e-12):
        raise ValueError("invalid geometry: allowed a finite symmetric Gram matrix of (mu, w_K, w_Q)")
    G = 0.5 * (G + np.swapaxes(G, -1, -2))
    eig = np.linalg.eigvalsh(G.reshape(-1, k, k))
    scale = np.maximum(1.0, np.max(np.abs(eig), axis=-1))
    if np.any(eig[:, 0] < -1e-10 * scale):
        raise ValueError("invalid geometry: allowed a positive semi-definite Gram matrix of (mu, w_K, w_Q) "
                         f"(smallest eigenvalue {float(np.min(eig[:, 0])):.4g}; e.g. |mu_wk| <= sqrt(snr*wk2))")
    return G


def _geometry(gram, named):
    unknown = set(named) - set(GEOMETRY_KEYS)
    if unknown:
        raise TypeError(f"unknown geometry keyword(s) {sorted(unknown)}; allowed {GEOMETRY_KEYS} or gram=")
    if gram is not None:
        if named:
            raise TypeError("give either gram= or the geometry keywords, not both")
        return _check_gram(np.asarray(gram, dtype=float))
    if RANK != 1:
        if named:
            raise TypeError(f"this solver has rank {RANK}: give the Gram matrix as gram=")
        k = 1 + 2 * RANK
        return np.zeros((k, k))
    return _check_gram(gram_matrix(**named))


def _context(dps):
    """The arithmetic: float64, or mpmath at ``dps`` (default DPS) digits plus guard digits."""
    if ARITHMETIC == "float64":
        if dps is not None:
            raise ValueError(f"invalid dps={dps!r}: allowed None (this solver is float64; generate one with "
                             "--backend mpmath for more digits)")
        return CONTEXT()
    dps = DPS if dps is None else dps
    if isinstance(dps, bool) or not isinstance(dps, (int, np.integer)) or not 15 <= dps <= DPS:
        raise ValueError(f"invalid dps={dps!r}: allowed integers 15 <= dps <= {DPS} (the digits of the "
                         "constants; regenerate with a larger --dps for more)")
    return CONTEXT(int(dps) + GUARD_DIGITS)


def _number(ctx, text):
    """A constant (a decimal string or a float) in the context's arithmetic."""
    return ctx.convert(float(text)) if ARITHMETIC == "float64" else ctx.convert(np.array([text]))[0]


def diagonal_constant(c, n=None, snr=0.0):
    r"""The diagonal constant: D, or with ``n`` tokens the finite-p d_n = E f_c(||x||^2/sqrt p)/sqrt p,
    ||x||^2 ~ chi^2_p(snr), p = round(c n) (docs/theory.md §1.3; DIAGONAL 'zero': 0).

    Parameters
    ----------
    c : float or array
    n : int, optional
    snr : float
        ||mu||^2.

    Returns
    -------
    float array of the shape of c

    Examples
    --------
    >>> round(float(diagonal_constant(0.5, n=2000, snr=10.0)[()]), 9)   # f(t) = t: d_n = (p + snr)/p
    1.01
    """
    c = np.asarray(c, dtype=float)
    if n is None or DIAGONAL == "zero":
        return np.full(c.shape, 0.0 if DIAGONAL == "zero" else float(D))
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 2 <= n <= N_MAX:
        raise ValueError(f"invalid n={n!r}: allowed integers 2 <= n <= {N_MAX}")
    if SUPERLINEAR:
        raise ValueError(f"invalid n={n!r}: {ACTIVATION} is superlinear (d_n = inf); generate with --diagonal zero")
    out = [finite_p_diagonal(_f_raw, float(A0), KINKS, max(1, int(round(float(ci) * n))), float(snr)) for ci in c.ravel()]
    return np.array(out, dtype=float).reshape(c.shape)


def attention_error(c, gamma, gram=None, n=None, dps=None, errors="raise", **geometry):
    r"""E_A(gamma) = -gamma^2 F'(gamma) of nonlinear attention, broadcast over c, gamma and the geometry.

    c = p/n (0 < c <= 1e4), gamma > 0 the ridge; the geometry is given by the keywords snr, wk2,
    wq2, mu_wk, mu_wq, wk_wq (arrays allowed; rank 1) or by ``gram`` (..., 1+2r, 1+2r) ordered
    (mu, w_K^(1..r), w_Q^(1..r)). The bulk system depends on (c, gamma) only and is solved in
    closed form (docs/theory.md §5.8) once per point of their broadcast grid, whatever the
    geometry's shape; then the Woodbury step (docs/theory.md §6.6). Where the closed form does not
    apply, the point is solved by quadrature, as symattn.solve does.

    Parameters
    ----------
    c, gamma : float or array
    gram : array (..., 1+2r, 1+2r), optional
    n : int, optional
        Tokens: the finite-p diagonal d_n at p = round(c n) instead of D (one geometry only).
    dps : int, optional
        The mpmath variant: digits (default DPS); the float64 variant takes None.
    errors : 'raise' or 'nan'
        A point that no method solves: ConvergenceError, or NaN there (the other points are kept).
    **geometry : float or array
        snr, wk2, wq2, mu_wk, mu_wq, wk_wq (rank 1).

    Returns
    -------
    array of the broadcast shape of c, gamma and the geometry (float64, or mpmath numbers)

    Examples
    --------
    >>> attention_error([0.5, 2.0], 1.0, snr=[[0.0], [1.0]]).shape
    (2, 2)
    """
    G = _geometry(gram, geometry)
    c = _check_positive("c", c, 1e4)
    gamma = _check_positive("gamma", gamma, 1e12)
    ctx = _context(dps)
    grid = np.broadcast_shapes(c.shape, gamma.shape)
    cb, gb = (np.broadcast_to(v, grid).reshape(-1) for v in (c, gamma))
    shape = np.broadcast_shapes(grid, G.shape[:-2])
    k = G.shape[-1]
    points = np.broadcast_to(np.arange(cb.size).reshape(grid), shape).reshape(-1)
    grams = np.broadcast_to(G, shape + (k, k)).reshape(-1, k, k)
    info = {"activation": ACTIVATION, "diagonal": DIAGONAL}
    with ctx:
        if n is not None:
            if G.ndim != 2:
                raise ValueError("invalid geometry: with n= give one geometry (d_n depends on ||mu||^2)")
            d = ctx.convert(diagonal_constant(cb, n, float(G[0, 0])))
        else:
            d = _number(ctx, D)
        E = _closed(ctx, cb, gb, _number(ctx, A1), _number(ctx, S2), d, grams, points, info, errors)
        if ARITHMETIC == "mpmath":
            E = np.array([+v for v in E], dtype=object)
    return E.reshape(shape)


def _closed(ctx, c, gamma, a1, s2, d, grams, points, info, errors="raise"):
    r"""E_A at the points ``points`` (Q,) of the grid (c, gamma) (P,) for the Gram matrices ``grams`` (Q, k, k), as
    symattn.solve computes it (``attention_points``, docs/theory.md §5.8): the closed form where it applies, the
    quadrature solver elsewhere (the mpmath variant at the digits asked for: the closed form adds its own guard
    digits). A point that neither solves, or whose E leaves [0, 1] by more than UNIT_SLACK (values within it are
    clipped), raises ConvergenceError (``errors='raise'``) or is NaN (``errors='nan'``), isolated from the other
    points (``isolated``)."""
    if errors not in ERRORS:
        raise ValueError(f"invalid errors={errors!r}: allowed 'raise' or 'nan'")
    work = ctx if ARITHMETIC == "float64" else CONTEXT(ctx.dps - GUARD_DIGITS)

    def run(idx):
        q = points[idx]
        with work:
            out = attention_points(work, c[q], gamma[q], a1, s2, d[q] if np.ndim(d) else d, grams[idx], RANK,
                                   point_info=info)
        E = out["E"]
        Ef = np.asarray(ctx.to_float(E), dtype=float)
        bad = ~(np.isfinite(Ef) & (Ef >= -UNIT_SLACK) & (Ef <= 1 + UNIT_SLACK))
        if bad.any():
            i = int(np.nonzero(bad)[0][0])
            raise ConvergenceError(f"impossible value E={Ef[i]!r} (not in [0, 1])", point={
                "c": float(c[q[i]]), "gamma": float(gamma[q[i]]), **info})
        return {"E": np.where(Ef < 0, 0 * E, np.where(Ef > 1, 0 * E + 1, E))}

    E = isolated(run, len(points), errors, {}).get("E")
    return np.full(len(points), np.nan) if E is None else E


def bulk_error(c, gamma, dps=None, errors="raise"):
    r"""E_bulk(gamma) = -gamma^2 de1/dgamma of the bulk system alone (mu = 0, w = 0), broadcast over c, gamma.

    Parameters
    ----------
    c, gamma : float or array
    dps : int, optional (mpmath variant)
    errors : 'raise' or 'nan'
        As for :func:`attention_error`.

    Returns
    -------
    array of the broadcast shape of c and gamma (E_A at zero geometry)

    Examples
    --------
    >>> bool(abs(bulk_error(0.5, 1.0) / attention_error(0.5, 1.0) - 1) < 1e-12)
    True
    """
    k = 1 + 2 * RANK
    return attention_error(c, gamma, gram=np.zeros((k, k)), dps=dps, errors=errors)


def linear_error(c, gamma, snr=0.0, dps=None):
    r"""E_LR(gamma) of ridge regression on X itself (closed form, docs/theory.md §3), broadcast.

    Parameters
    ----------
    c, gamma : float or array
    snr : float or array
        ||mu||^2.
    dps : int, optional (mpmath variant)

    Returns
    -------
    array of the broadcast shape

    Examples
    --------
    >>> round(float(linear_error(1.0, 1.0)), 6)
    0.447214
    """
    c = _check_positive("c", c, 1e4)
    gamma = _check_positive("gamma", gamma, 1e12)
    snr = np.asarray(snr, dtype=float)
    if not np.all(np.isfinite(snr)) or np.any(snr < 0):
        raise ValueError(f"invalid snr={snr.tolist()!r}: allowed snr >= 0")
    c, gamma, snr = np.broadcast_arrays(c, gamma, snr)
    ctx = _context(dps)
    with ctx, np.errstate(all="ignore"):
        args = [ctx.convert(v.reshape(-1)) for v in (c, gamma, snr)]
        out = KERNELS[ctx.lambdify_modules]["linear"](ctx.sqrt(args[0]), args[1], args[2])[0]
        out = np.broadcast_to(out, (c.size,))
        if ARITHMETIC == "mpmath":
            return np.array([+v for v in out], dtype=object).reshape(c.shape)
    return np.asarray(out, dtype=float).reshape(c.shape).copy()


def memorization_error(c, gamma, model="attention", gram=None, n=None, dps=None, errors="raise", **geometry):
    r"""E(gamma) for model 'attention' (E_A), 'linear' (E_LR) or 'both' ({'attention': .., 'linear': ..}).

    Parameters
    ----------
    c, gamma, gram, n, dps, errors, **geometry
        As for :func:`attention_error`; 'linear' uses snr = ||mu||^2 (gram[..., 0, 0]).
    model : 'attention', 'linear' or 'both'

    Returns
    -------
    array, or a dict of two for model='both'

    Examples
    --------
    >>> sorted(memorization_error(0.5, 1.0, model="both", **aligned(1.0)))
    ['attention', 'linear']
    """
    if model not in ("attention", "linear", "both"):
        raise ValueError(f"invalid model={model!r}: allowed 'attention', 'linear' or 'both'")
    out = {}
    if model in ("attention", "both"):
        out["attention"] = attention_error(c, gamma, gram=gram, n=n, dps=dps, errors=errors, **geometry)
    if model in ("linear", "both"):
        G = _geometry(gram, geometry)
        out["linear"] = linear_error(c, gamma, G[..., 0, 0], dps=dps)
    return out if model == "both" else out[model]


# ============================================================================ command line
def _parser():
    import argparse

    p = argparse.ArgumentParser(
        description=f"Deterministic-equivalent memorisation errors E_attention and E_linear for the activation "
                    f"{ACTIVATION} (a1 = {float(A1):.6g}, nu = {float(NU):.6g}, d = {float(D):.6g}), in closed "
                    f"form ({ARITHMETIC}); generated by symattn {SYMATTN_VERSION} on {GENERATED}. Needs only "
                    + ("numpy and scipy." if ARITHMETIC == "float64" else "numpy, scipy and mpmath."),
        epilog="example: python %(prog)s --c 0.5 --gamma 0.01 0.1 1 --aligned --snr 1 --json\n"
               "exit codes: 0 ok; 2 bad input; 3 no convergence.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--c", type=float, nargs="+", required=True, metavar="C", help="c = p/n (one or more)")
    p.add_argument("--gamma", "-g", type=float, nargs="+", required=True, metavar="G", help="ridge gamma > 0")
    g = p.add_argument_group("geometry", "Gram matrix of (mu, w_K, w_Q); unset entries are 0")
    for name, h in (("snr", "||mu||^2"), ("wk2", "||w_K||^2"), ("wq2", "||w_Q||^2"), ("mu-wk", "mu^T w_K"),
                    ("mu-wq", "mu^T w_Q"), ("wk-wq", "w_K^T w_Q")):
        g.add_argument("--" + name, type=float, default=None, metavar="V", help=h)
    g.add_argument("--aligned", action="store_true", help="w_K = w_Q = mu (all six entries equal --snr)")
    g.add_argument("--gram", default=None, metavar="JSON",
                   help=f"the full (1+2r)x(1+2r) Gram matrix as a JSON list of lists (rank r = {RANK})")
    p.add_argument("--model", choices=("attention", "linear", "both"), default="both",
                   help="which error(s) to compute (default both)")
    p.add_argument("--n", type=int, default=None, metavar="N",
                   help="tokens: the finite-p diagonal d_n at p = round(c N) instead of d (as symattn solve --n)")
    if ARITHMETIC == "mpmath":
        p.add_argument("--dps", type=int, default=DPS, metavar="D",
                       help=f"decimal digits, 15 <= D <= {DPS} (default {DPS}); results are printed as decimal strings")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    return p


def _cli_geometry(args):
    named = {k: getattr(args, k) for k in GEOMETRY_KEYS}
    if args.gram is not None:
        if args.aligned or any(v is not None for v in named.values()):
            raise ValueError("invalid --gram: allowed without --aligned and the other geometry flags")
        try:
            return {"gram": json.loads(args.gram)}
        except json.JSONDecodeError as exc:
            raise ValueError(f"invalid --gram: not JSON ({exc})") from None
    if args.aligned:
        extra = [k for k in GEOMETRY_KEYS[1:] if named[k] is not None]
        if extra:
            raise ValueError("invalid --aligned: allowed without --" + "/--".join(k.replace("_", "-") for k in extra))
        return aligned(0.0 if named["snr"] is None else named["snr"])
    if RANK != 1 and any(v is not None for v in named.values()):
        raise ValueError(f"invalid geometry flags: this solver has rank {RANK}, use --gram")
    return {k: (0.0 if v is None else v) for k, v in named.items()} if RANK == 1 else {}


def _jsonable(values, digits=None):
    """Floats (None where not finite), or, for mpmath numbers, decimal strings of ``digits`` digits."""
    flat = np.asarray(values).ravel()
    if ARITHMETIC == "mpmath" and flat.dtype == object:
        mpmath = sys.modules["mpmath"]   # loaded by the mpmath context
        return [mpmath.nstr(v, digits) for v in flat]
    return [None if not math.isfinite(v) else v for v in np.asarray(flat, dtype=float).tolist()]


def main(argv=None):
    """Command line: print E_attention and E_linear (table or JSON); returns the exit code.

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default sys.argv[1:]); ``--help`` lists them.

    Returns
    -------
    int
        0 ok, 2 bad input, 3 no convergence.

    Examples
    --------
    >>> main(["--c", "1", "--gamma", "1", "--model", "linear", "--json"])  # doctest: +ELLIPSIS
    {"gamma": [1.0], "E_linear": [0.447213...], "a1": ...}
    0
    """
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        geometry = _cli_geometry(args)
        gram = geometry.pop("gram", None)
        c = _check_positive("c", args.c, 1e4)
        gamma = _check_positive("gamma", args.gamma, 1e12)
        dps = getattr(args, "dps", None)
        res = memorization_error(c[:, None], gamma[None, :], model=args.model, gram=gram, n=args.n, dps=dps,
                                 **geometry)
    except ConvergenceError as exc:
        print(f"{parser.prog}: error: no convergence: {exc}", file=sys.stderr)
        return 3
    except (ValueError, TypeError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    res = res if isinstance(res, dict) else {args.model: res}
    errs = {f"E_{k}": v for k, v in res.items()}
    data = {"gamma": gamma.tolist()}
    if c.size > 1:
        data["c"] = c.tolist()
    for key in ("E_attention", "E_linear"):
        if key in errs:
            vals = errs[key]
            data[key] = _jsonable(vals[0], dps) if c.size == 1 else [_jsonable(row, dps) for row in vals]
    data.update({"a1": float(A1), "nu": float(NU), "d": float(D) if math.isfinite(float(D)) else None})
    if args.json:
        print(json.dumps(data, allow_nan=False))
        return 0
    print(f"activation {ACTIVATION}: a1 = {float(A1):.6g}, nu = {float(NU):.6g}, d = {float(D):.6g}")
    keys = [k for k in ("E_attention", "E_linear") if k in errs]
    print("  ".join(f"{h:>14}" for h in ["c", "gamma"] + keys))
    for i, cv in enumerate(c):
        for j, gv in enumerate(gamma):
            vals = [_jsonable(errs[k][i, j], dps)[0] for k in keys]
            print("  ".join([f"{cv:>14.8g}", f"{gv:>14.8g}"] + [f"{v:>14.8g}" if isinstance(v, float) else str(v)
                                                               for v in vals]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
