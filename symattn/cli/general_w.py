r"""``symattn solve --weights``: the general-W theory (docs/theory.md §12) from the command line.

``--weights FILE.npy`` (a p×p array, read with ``allow_pickle=False``) or ``minilm:LAYER[:HEAD]``
(all-MiniLM-L6-v2, W_KᵀW_Q of the layer or of one head, scaled to ‖W‖_F²/p = 1,
:func:`symattn.realweights.layer_weight`); ``--mu zero|top|FILE.npy`` with ``top`` = √snr times
the top eigenvector of (W + Wᵀ)/2 (``--snr``, default 1).
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError

__all__ = ["layer_from_args", "signal_from_args", "weights_data", "run_weights"]


def _describe(spec: str, key: str) -> str:
    if spec.startswith("minilm:"):
        parts = spec.split(":")[1:]
        if key == "heads" and len(parts) == 1:
            return f"MiniLM layer {parts[0]}, all heads (each unit-scaled)"
        return f"MiniLM layer {parts[0]}" + ("" if len(parts) == 1 else f" head {parts[1]}") + " (unit scale)"
    return spec


def layer_from_args(args):
    """The :class:`symattn.Layer` of the layer flags, the same for ``solve`` and ``simulate``:
    ``--activation``, ``--weights``, ``--heads``, ``--readout``, ``--residual``, ``--kernel``,
    ``--temperature`` and ``--diagonal`` (the sweep spec has the same keys).

    Examples
    --------
    >>> import argparse
    >>> a = argparse.Namespace(activation="tanh", weights=None, heads=None, readout="concat", residual=True,
    ...                        kernel="entrywise", temperature=None, diagonal="f")
    >>> layer_from_args(a).engine()
    'residual'
    """
    from ..layer import Layer

    return Layer(args.activation, weights=getattr(args, "weights", None), heads=args.heads, readout=args.readout,
                 residual=args.residual, kernel=args.kernel, temperature=args.temperature, diagonal=args.diagonal)


def signal_from_args(args, layer) -> tuple:
    """The signal of the flags for ``layer``: ``(mu, geometry, text)``. With weights or heads, μ of
    ``--mu zero|top|random:SEED|FILE.npy`` scaled by ``--snr`` (:meth:`symattn.Layer.signal`) and no
    geometry flag but ``--snr``; otherwise the geometry of the geometry flags and no ``--mu``."""
    from .common import geometry_from_args, geometry_line

    if layer.p is not None:
        refuse_geometry_flags(args, "--weights or --heads")
        spec = getattr(args, "mu", None) or "zero"
        mu = layer.signal(spec, args.snr)
        if mu is None:
            return None, None, "mu = 0"
        how = {"top": "top eigenvector of (W+W^T)/2"}.get(spec, spec)
        return mu, None, f"mu = {how}, ||mu||^2 = {float(mu @ mu):g}"
    if getattr(args, "mu", None) is not None:
        raise ParameterError("mu", args.mu, "unset without --weights or --heads (use --snr and the geometry flags)")
    geometry = geometry_from_args(args)
    return None, geometry, geometry_line(geometry)


def weights_data(act, c, gamma, W, mu=None, model: str = "both", diagonal: str = "f", n=None,
                 structure: str = "auto", error: str = "train") -> dict:
    """The ``symattn solve --weights --json`` object (without provenance).

    Parameters
    ----------
    act : activation spec
    c : float or list of float
    gamma : list of float
    W : numpy.ndarray
    mu : numpy.ndarray or None
    model : {'both', 'attention', 'linear'}
    diagonal : {'f', 'zero'}
    n : int or None
        Must equal round(p/c) when given.
    structure : {'auto', 'blocks', 'free'}
        The kernel model (:func:`symattn.backends.general_w_entry.kernel_structure`).
    error : {'train', 'test', 'both'}
        The training error (keys E_attention, E_linear), the test error (E_attention_test, E_linear_test;
        docs/theory.md §14.9), or both.

    Returns
    -------
    dict
        ``{"gamma", "E_attention", "E_linear", "p", "n", "omega", "rho", "tau", "t", "structure", "rank"}``;
        with several c, ``"c"`` and E_* as rows (one per c), ``"n"`` a list; ``structure`` is the kernel
        model used ('blocks' or 'free').

    Examples
    --------
    >>> d = weights_data("tanh", 0.5, [1.0], np.eye(20), model="attention", structure="free")
    >>> d["p"], d["n"], round(d["rho"], 6), d["structure"]
    (20, 40, 1.0, 'free')
    """
    from ..activations.activation import activation
    from ..backends.general_w import general_w_constants
    from ..backends.general_w_entry import kernel_structure
    from ..model import check_c, check_gamma, check_mu, check_weights, weight_rank
    from ..formatting import finite_or_none
    from ..layer import Layer

    W = check_weights(W)
    mu = check_mu(mu, W.shape[0])
    items = list(c) if isinstance(c, (list, tuple, np.ndarray)) else [c]
    cs = [float(check_c(ci)) for ci in items]
    gamma = np.atleast_1d(check_gamma(gamma)).astype(float).ravel()
    f = activation(act)
    k = general_w_constants(f, W, mu)
    p = W.shape[0]
    models = ["attention", "linear"] if model == "both" else [model]
    errs = ["train", "test"] if error == "both" else [error]
    keys = [m + ("" if e == "train" else "_test") for e in errs for m in models]
    rows = {m: [] for m in keys}
    ns = []
    layer = Layer(f, weights=W, diagonal=diagonal)
    accuracy = []
    for ci in cs:
        if "test" in errs:
            rt = layer.theory(ci, gamma, mu=mu, n=n, model=model, structure=structure, error="test")
            Et = rt.E if model == "both" else {model: rt.E}
            for m in models:
                rows[m + "_test"].append(np.asarray(Et[m], dtype=float).tolist())
        ns.append(int(round(p / ci)))
        if "train" not in errs:
            continue
        r = layer.theory(ci, gamma, mu=mu, n=n, model=model, structure=structure)
        E = r.E if model == "both" else {model: r.E}
        for m in models:
            rows[m].append(np.asarray(E[m], dtype=float).tolist())
        if r.accuracy is not None:   # the accuracy atlas' measurement nearby (docs/accuracy.md)
            a = r.accuracy
            accuracy.append([{"flag": a.flag(j), "gap": finite_or_none(a.gap.flat[j]),
                              "se": finite_or_none(a.se.flat[j]), "distance": finite_or_none(a.distance.flat[j])}
                             for j in range(a.gap.size)])
    several = len(cs) > 1
    out = {"c": cs} if several else {}
    out["gamma"] = gamma.tolist()
    for m in keys:
        out[f"E_{m}"] = rows[m] if several else rows[m][0]
    if accuracy:
        out["accuracy"] = accuracy if several else accuracy[0]
    out.update({"p": p, "n": ns if several else ns[0], "omega": k.omega, "rho": k.rho, "tau": k.tau,
                "a1": k.a1, "s2": k.s2, "t": k.t, "rank": weight_rank(W),
                "structure": kernel_structure(W, structure, diagonal=diagonal) if model != "linear" else None})
    return out


def refuse_geometry_flags(args, where: str) -> None:
    """A ParameterError for any geometry flag but --snr (and --aligned): with ``where`` (--weights, --heads)
    the signal is a vector, --mu (scaled by --snr)."""
    others = [flag for flag in ("wk2", "wq2", "mu_wk", "mu_wq", "wk_wq") if getattr(args, flag, None) is not None]
    if others or getattr(args, "aligned", False):
        bad = others[0] if others else "aligned"
        raise ParameterError(bad.replace("_", "-"), getattr(args, bad, True),
                             f"unset with {where} (give mu with --mu and --snr)")


def run_weights(args, layer) -> int:
    """``symattn solve --weights ...``: the table or JSON of the general-W theory of ``layer``
    (:func:`layer_from_args`)."""
    from .common import EXIT_OK, fmt, format_table, print_json, with_provenance

    refuse_geometry_flags(args, "--weights")
    if getattr(args, "finite_p", False):
        raise ParameterError("finite-p", True, "unset with --weights (the general-W theory keeps W exactly)")
    if args.backend != "numpy":
        raise ParameterError("backend", args.backend, "numpy with --weights")
    wtext = _describe(args.weights, "weights")
    mu, _, mtext = signal_from_args(args, layer)
    mtext = mtext.removeprefix("mu = ")
    data = weights_data(layer.activation, list(args.c), args.gamma, layer.weights, mu, args.model, args.diagonal,
                        args.n, getattr(args, "structure", "auto"), error=getattr(args, "error", "train"))
    if args.json:
        params = {"command": "solve", "activation": args.activation, "c": list(args.c), "gamma": list(args.gamma),
                  "weights": args.weights, "mu": args.mu or "zero", "snr": args.snr, "model": args.model,
                  "diagonal": args.diagonal, "n": args.n, "structure": getattr(args, "structure", "auto"),
                  "error": getattr(args, "error", "train")}
        print_json(with_provenance(data, params, backend="numpy", dtype="float64"))
        return EXIT_OK
    print(f"activation {args.activation}; W = {wtext}: p = {data['p']}, ||W||_F^2/p = {fmt(data['omega'])}, "
          f"rho = tr W^2/||W||_F^2 = {fmt(data['rho'])}, tau = {fmt(data['tau'])}")
    model_text = {"blocks": "structured Hermite blocks (docs/theory.md §12.8)",
                  "free": "free elliptic noise (docs/theory.md §12.1)", None: "not used"}[data["structure"]]
    print(f"mu = {mtext}; t = mu^T W mu/sqrt(p) = {fmt(data['t'])}; general-W theory (docs/theory.md §12); "
          f"rank W = {data['rank']}, kernel model: {model_text}")
    keys = [k for k in ("E_attention", "E_linear", "E_attention_test", "E_linear_test") if k in data]
    if "c" not in data:
        rows = [[fmt(g)] + [fmt(data[k][i], 8) for k in keys] for i, g in enumerate(data["gamma"])]
        print(format_table(["gamma"] + keys, rows, align="r" * (1 + len(keys))))
    else:
        rows = [[fmt(c), fmt(g)] + [fmt(data[k][j][i], 8) for k in keys]
                for j, c in enumerate(data["c"]) for i, g in enumerate(data["gamma"])]
        print(format_table(["c", "gamma"] + keys, rows, align="r" * (2 + len(keys))))
    return EXIT_OK
