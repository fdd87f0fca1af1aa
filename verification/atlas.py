r"""``symattn verify --atlas``: the shipped accuracy atlas against the current code's theory.

Every cell of the atlas table (``symattn/data/atlas.csv``, :mod:`symattn.accuracy`) records the theory
value that was compared with Monte Carlo, and the call that produced it (``call``: the layer, c, n and the
signal). This check recomputes each call with :meth:`symattn.Layer.theory` (at one BLAS thread, as the atlas'
tasks ran) and compares: a change of the
theory that moves a value by more than :data:`RTOL` (relative) means the atlas measures a different
theory, and it must be measured again (``symattn atlas``).
"""

from __future__ import annotations

import json
import time
import warnings

import numpy as np

__all__ = ["RTOL", "check_atlas", "theory_of_call"]

#: the largest relative change of a theory value that leaves the atlas valid
RTOL = 1e-8


def theory_of_call(call: dict, gammas) -> np.ndarray:
    """The current theory E_A(γ) of one atlas call (the ``call`` column, parsed), at the given γ.

    The call is replayed through :meth:`symattn.Layer.theory` at one BLAS thread (the atlas' tasks ran so:
    the solvers near γ = 1e-3 converge or not with the rounding of the thread count), with the layer of
    :meth:`symattn.Layer.from_dict`, the call's c and n, and its signal (a geometry for the paper's model,
    ``Layer.signal(mu, snr)`` for real weights). Failed points are NaN; warnings are silenced (the atlas is
    what the warnings read).

    Raises
    ------
    RealWeightsUnavailable
        When the call's weights are not installed.

    Examples
    --------
    >>> call = {"layer": {"activation": "tanh"}, "c": 0.5, "n": 250, "mu": "zero", "snr": 0.0,
    ...         "geometry": {"snr": 0.0}, "correction": None}
    >>> E = theory_of_call(call, [0.1, 1.0])
    >>> bool(0 < E[0] < E[1] < 1)
    True
    """
    from symattn.layer import Layer
    from symattn.model import Geometry
    from symattn.threads import limit_threads

    layer = Layer.from_dict(call["layer"])
    kw = {"n": call["n"]}
    if layer.p is None:
        kw["geometry"] = Geometry(**call["geometry"])
    else:
        mu = call["mu"]
        kw["mu"] = layer.signal(mu, call["snr"] if mu == "top" or mu.startswith("random:") else None)
    if call.get("correction"):
        kw["correction"] = call["correction"]
    with limit_threads(1), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(layer.theory(call["c"], list(gammas), model="attention", errors="nan", **kw).E,
                          dtype=float)


def check_atlas(path=None, limit: int | None = None) -> dict:
    """Recompute the theory of every atlas cell and compare it with the stored value.

    Parameters
    ----------
    path : str or pathlib.Path, optional
        An atlas table (default: the shipped one).
    limit : int, optional
        Check at most this many calls (points; each with all of its γ), spread over the table.

    Returns
    -------
    dict
        ``cells`` (compared), ``calls``, ``skipped`` (calls whose weights are not installed, with the
        reason), ``max_rel_diff``, ``worst`` (that cell), ``moved`` (every cell beyond RTOL: where, the stored
        and the current value), ``passed`` (max_rel_diff <= RTOL and cells > 0), ``seconds``.

    Examples
    --------
    >>> r = check_atlas(limit=2)
    >>> r["passed"], r["max_rel_diff"] <= RTOL
    (True, True)
    """
    from symattn.accuracy import load_atlas
    from symattn.errors import RealWeightsUnavailable

    t0 = time.perf_counter()
    rows = load_atlas(path)
    calls = {}
    for r in rows:   # one call per block and point (two blocks may hold the same point)
        calls.setdefault((r["block"], r["call"]), []).append(r)
    keys = list(calls)
    if limit is not None and len(keys) > limit:
        keys = [keys[i] for i in np.linspace(0, len(keys) - 1, limit).round().astype(int)]
    worst, max_diff, cells, skipped, moved = None, 0.0, 0, [], []
    for key in keys:
        call, rs = json.loads(key[1]), calls[key]
        try:
            E = theory_of_call(call, [r["gamma"] for r in rs])
        except RealWeightsUnavailable as exc:
            skipped.append({"call": call, "reason": str(exc)})
            continue
        for r, e in zip(rs, E):
            d = abs(e - r["theory"]) / abs(r["theory"]) if np.isfinite(e) else np.inf
            cells += 1
            where = {k: r[k] for k in ("block", "layer", "activation", "c", "gamma", "mu")}
            if d > RTOL:
                moved.append(dict(where, stored=r["theory"], now=float(e)))
            if d > max_diff or worst is None:
                max_diff, worst = max(d, max_diff), where
    return {"cells": cells, "calls": len(keys), "skipped": skipped, "max_rel_diff": float(max_diff), "worst": worst,
            "moved": moved, "passed": bool(cells > 0 and max_diff <= RTOL), "seconds": time.perf_counter() - t0}
