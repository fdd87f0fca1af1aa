r"""The public functions and the command line of a generated standalone solver.

:func:`symattn.codegen.generate_solver` writes a module that carries, verbatim, the solver
runtime of :mod:`symattn.backends.solver` (with copies of what it imports: the float64
context, the Marchenko–Pastur rule, the kernel wrappers and ConvergenceError), the kernels
printed from the SymPy systems for one activation, and then this module's source: the
functions below, written against the runtime and the activation's constants.

Here, inside the library, the relative imports bind the runtime and the library's lambdified
kernels, and the constants are those of f(t) = t (a1 = ν = 1, s² = d = 0), so that this module
is itself a working solver for that activation and its examples run; a generated module drops
those lines and defines its own constants and kernels (tests/test_codegen.py runs the examples
there too).
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

from ..backends.context import FloatContext
from ..backends.kernels import KERNELS
from ..backends.quadrature import mp_nodes as _mp_nodes
from ..backends.solver import attention_at, bulk_derivative, solve_bulk
from ..errors import ConvergenceError

ACTIVATION, EXPRESSION = "linear", "x"  # f(t) = t here; a generated module defines its own constants
A0, A1, NU, S2, D = 0.0, 1.0, 1.0, 0.0, 0.0
DIAGONAL, RANK, DPS = "f", 1, 30
SYMATTN_VERSION = GENERATED = ""

__all__ = ["memorization_error", "attention_error", "linear_error", "bulk_error", "aligned",
           "gram_matrix", "mp_nodes", "solve_bulk", "FloatContext", "ConvergenceError", "main",
           "A0", "A1", "NU", "S2", "D", "ACTIVATION", "RANK"]

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


def _bulk(c, gamma):
    """The bulk solution on the broadcast (c, gamma) grid, flattened: (grid shape, BulkSolution)."""
    c = _check_positive("c", c, 1e4)
    gamma = _check_positive("gamma", gamma, 1e12)
    grid = np.broadcast_shapes(c.shape, gamma.shape)
    cb, gb = (np.broadcast_to(v, grid).reshape(-1) for v in (c, gamma))
    return grid, solve_bulk(FloatContext(), cb, gb, A1, S2, D, {"activation": ACTIVATION, "diagonal": DIAGONAL})


def attention_error(c, gamma, gram=None, **geometry):
    r"""E_A(gamma) = -gamma^2 F'(gamma) of nonlinear attention, broadcast over c, gamma and the geometry.

    c = p/n (0 < c <= 1e4), gamma > 0 the ridge; the geometry is given by the keywords snr, wk2,
    wq2, mu_wk, mu_wq, wk_wq (arrays allowed; rank 1) or by ``gram`` (..., 1+2r, 1+2r) ordered
    (mu, w_K^(1..r), w_Q^(1..r)). The bulk system depends on (c, gamma) only and is solved on
    their broadcast grid, whatever the geometry's shape; then F = Gamma00 - e^T u with
    u = C_hat (I + Gamma C_hat)^{-1} e, e = Gamma[:, 0], and F' = Gammadot00 - 2 edot^T u
    + u^T Gammadot u.

    Parameters
    ----------
    c, gamma : float or array
    gram : array (..., 1+2r, 1+2r), optional
    **geometry : float or array
        snr, wk2, wq2, mu_wk, mu_wq, wk_wq (rank 1).

    Returns
    -------
    float array of the broadcast shape of c, gamma and the geometry

    Examples
    --------
    >>> attention_error([0.5, 2.0], 1.0, snr=[[0.0], [1.0]]).shape
    (2, 2)
    """
    G = _geometry(gram, geometry)
    grid, sol = _bulk(c, gamma)
    shape = np.broadcast_shapes(grid, G.shape[:-2])
    k = G.shape[-1]
    points = np.broadcast_to(np.arange(sol.e.shape[0]).reshape(grid), shape).reshape(-1)
    E, _ = attention_at(FloatContext(), sol, np.broadcast_to(G, shape + (k, k)).reshape(-1, k, k), RANK,
                        points=points)
    return E.reshape(shape)


def bulk_error(c, gamma):
    r"""E_bulk(gamma) = -gamma^2 de1/dgamma of the bulk system alone (mu = 0, w = 0), broadcast over c, gamma.

    Parameters
    ----------
    c, gamma : float or array

    Returns
    -------
    float array of the broadcast shape of c and gamma (E_A at zero geometry)

    Examples
    --------
    >>> bool(abs(bulk_error(0.5, 1.0) / attention_error(0.5, 1.0) - 1) < 1e-12)
    True
    """
    grid, sol = _bulk(c, gamma)
    g = sol.params[1][:, 0]
    return (-(g**2) * bulk_derivative(FloatContext(), sol)[:, 0]).reshape(grid)


def linear_error(c, gamma, snr=0.0):
    r"""E_LR(gamma) of ridge regression on X itself (closed form, docs/theory.md §3), broadcast.

    Parameters
    ----------
    c, gamma : float or array
    snr : float or array
        ||mu||^2.

    Returns
    -------
    float array of the broadcast shape

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
    with np.errstate(all="ignore"):
        out = KERNELS["numpy"]["linear"](np.sqrt(c), gamma, snr)[0]
    return np.asarray(np.broadcast_to(out, c.shape), dtype=float).copy()


def memorization_error(c, gamma, model="attention", gram=None, **geometry):
    r"""E(gamma) for model 'attention' (E_A), 'linear' (E_LR) or 'both' ({'attention': .., 'linear': ..}).

    Parameters
    ----------
    c, gamma, gram, **geometry
        As for :func:`attention_error`; 'linear' uses snr = ||mu||^2 (gram[..., 0, 0]).
    model : 'attention', 'linear' or 'both'

    Returns
    -------
    float array, or a dict of two for model='both'

    Examples
    --------
    >>> sorted(memorization_error(0.5, 1.0, model="both", **aligned(1.0)))
    ['attention', 'linear']
    """
    if model not in ("attention", "linear", "both"):
        raise ValueError(f"invalid model={model!r}: allowed 'attention', 'linear' or 'both'")
    out = {}
    if model in ("attention", "both"):
        out["attention"] = attention_error(c, gamma, gram=gram, **geometry)
    if model in ("linear", "both"):
        G = _geometry(gram, geometry)
        out["linear"] = linear_error(c, gamma, G[..., 0, 0])
    return out if model == "both" else out[model]


def mp_nodes(c, m):
    r"""Nodes lam and weights w, each (P, m + 1), of int g dmu_S ~ sum_k w_k g(lam_k) (float64).

    The Marchenko-Pastur rule of the solver (midpoint rule in theta, node 0 at lam = 0 with the
    atom (1 - c)_+ and the correction that makes the rule exact for constants).

    Parameters
    ----------
    c : float or array (P,)
    m : int
        Nodes of the midpoint rule.

    Returns
    -------
    lam, w : arrays (P, m + 1)

    Examples
    --------
    >>> lam, w = mp_nodes(2.0, 64)
    >>> round(float((w * lam**2).sum()), 12)     # int lam^2 dmu_S = 1 + 1/c
    1.5
    """
    return _mp_nodes(FloatContext(), np.atleast_1d(np.asarray(c, dtype=float)).reshape(-1), int(m))


# ============================================================================ command line
def _parser():
    import argparse

    p = argparse.ArgumentParser(
        description=f"Deterministic-equivalent memorisation errors E_attention and E_linear for the activation "
                    f"{ACTIVATION} (a1 = {A1:.6g}, nu = {NU:.6g}, d = {D:.6g}); generated by symattn "
                    f"{SYMATTN_VERSION} on {GENERATED}. Needs only numpy.",
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


def _jsonable(values):
    return [None if not math.isfinite(v) else v for v in np.asarray(values, dtype=float).ravel().tolist()]


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
        res = memorization_error(c[:, None], gamma[None, :], model=args.model, gram=gram, **geometry)
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
            data[key] = _jsonable(vals[0]) if c.size == 1 else [_jsonable(row) for row in vals]
    data.update({"a1": A1, "nu": NU, "d": D if math.isfinite(D) else None})
    if args.json:
        print(json.dumps(data, allow_nan=False))
        return 0
    print(f"activation {ACTIVATION}: a1 = {A1:.6g}, nu = {NU:.6g}, d = {D:.6g}")
    keys = [k for k in ("E_attention", "E_linear") if k in errs]
    print("  ".join(f"{h:>14}" for h in ["c", "gamma"] + keys))
    for i, cv in enumerate(c):
        for j, gv in enumerate(gamma):
            print("  ".join(f"{v:>14.8g}" for v in [cv, gv] + [float(errs[k][i, j]) for k in keys]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
