r"""``symattn solve --weights``: the general-W theory (docs/theory.md §12) from the command line.

``--weights FILE.npy`` (a p×p array, read with ``allow_pickle=False``) or ``minilm:LAYER[:HEAD]``
(all-MiniLM-L6-v2, W_KᵀW_Q of the layer or of one head, scaled to ‖W‖_F²/p = 1,
:func:`symattn.realweights.layer_weight`); ``--mu zero|top|FILE.npy`` with ``top`` = √snr times
the top eigenvector of (W + Wᵀ)/2 (``--snr``, default 1).
"""

from __future__ import annotations

import numpy as np

from ..errors import ParameterError

__all__ = ["load_weights", "load_mu", "weights_data", "run_weights"]


def _read_npy(flag: str, spec: str, what: str) -> np.ndarray:
    """The array in the .npy file ``spec`` of ``--flag`` (no pickles); a ParameterError saying what it must hold."""
    try:
        return np.load(spec, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ParameterError(flag, spec, f"a readable .npy file holding {what} ({exc})") from None


def load_weights(spec: str) -> tuple:
    """The matrix named by ``--weights`` and a description: ``FILE.npy`` or ``minilm:LAYER[:HEAD]``.

    Parameters
    ----------
    spec : str

    Returns
    -------
    (numpy.ndarray, str)

    Examples
    --------
    >>> load_weights("minilm:9")
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid layer=9: allowed an integer 0 <= layer <= 5
    """
    from ..model import check_weights

    if not isinstance(spec, str) or not spec:
        raise ParameterError("weights", spec, "FILE.npy or minilm:LAYER[:HEAD]")
    if spec.startswith("minilm:"):
        from .. import realweights as rw

        parts = spec.split(":")[1:]
        if len(parts) not in (1, 2) or not all(x.strip().isdigit() for x in parts):
            raise ParameterError("weights", spec, "minilm:LAYER or minilm:LAYER:HEAD with integers LAYER, HEAD")
        layer = int(parts[0])
        head = int(parts[1]) if len(parts) == 2 else None
        if not 0 <= layer < rw.MINILM_LAYERS:
            raise ParameterError("layer", layer, f"an integer 0 <= layer <= {rw.MINILM_LAYERS - 1}")
        W = rw.layer_weight(rw.load_minilm(), layer, head=head)
        return W, f"MiniLM layer {layer}" + ("" if head is None else f" head {head}") + " (unit scale)"
    if not spec.endswith(".npy"):
        raise ParameterError("weights", spec, "a .npy file or minilm:LAYER[:HEAD]")
    return check_weights(_read_npy("weights", spec, "a p×p array")), spec


def load_heads(spec: str) -> tuple:
    """The heads named by ``--heads`` and a description: ``minilm:LAYER`` (the layer's 12 heads
    W_K^{hᵀ}W_Q^h, each unit-scaled, ‖W_h‖_F²/p = 1) or ``FILE.npy`` (an H×p×p array).

    Parameters
    ----------
    spec : str

    Returns
    -------
    (list of numpy.ndarray, str)

    Examples
    --------
    >>> load_heads("minilm:2:3")
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid heads='minilm:2:3': allowed minilm:LAYER (all 12 heads of a layer) or FILE.npy
    """
    from ..model import check_weights

    if not isinstance(spec, str) or not spec:
        raise ParameterError("heads", spec, "minilm:LAYER or FILE.npy")
    if spec.startswith("minilm:"):
        from .. import realweights as rw

        layer = spec.split(":", 1)[1]
        if not layer.strip().isdigit():
            raise ParameterError("heads", spec, "minilm:LAYER (all 12 heads of a layer) or FILE.npy")
        if not 0 <= int(layer) < rw.MINILM_LAYERS:
            raise ParameterError("layer", int(layer), f"an integer 0 <= layer <= {rw.MINILM_LAYERS - 1}")
        w = rw.load_minilm()
        heads = w.query[int(layer)].shape[0] // rw.MINILM_HEAD_DIM
        return ([rw.layer_weight(w, int(layer), head=h) for h in range(heads)],
                f"MiniLM layer {layer}, {heads} heads (each unit-scaled)")
    if not spec.endswith(".npy"):
        raise ParameterError("heads", spec, "minilm:LAYER or a .npy file holding an H x p x p array")
    A = _read_npy("heads", spec, "an H x p x p array")
    if A.ndim != 3 or A.shape[0] < 1:
        raise ParameterError("heads", spec, f"an H x p x p array (this file holds shape {A.shape})")
    return [check_weights(W) for W in A], f"{spec} ({A.shape[0]} heads)"


def variant_from_args(args) -> dict:
    """The keyword arguments of the variant flags for :func:`symattn.simulate` and
    :func:`symattn.memorization_error` (empty for the plain layer)."""
    from .common import variant_parameters

    out = variant_parameters(args)
    if "heads" in out:
        out["heads"] = load_heads(out["heads"])[0]
    return out


def load_mu(spec, W, snr=None) -> tuple:
    """μ named by ``--mu``: 'zero', 'top' (√snr·top eigenvector of (W + Wᵀ)/2, snr default 1) or FILE.npy.

    Parameters
    ----------
    spec : str or None
    W : numpy.ndarray
    snr : float or None

    Returns
    -------
    (numpy.ndarray or None, str)

    Examples
    --------
    >>> mu, text = load_mu("top", np.diag([3.0, 1.0]), snr=4.0)
    >>> mu.tolist(), text
    ([2.0, 0.0], 'top eigenvector of (W+W^T)/2, ||mu||^2 = 4')
    """
    from ..model import check_mu
    from ..realweights import signal_direction

    if spec in (None, "zero"):
        if snr is not None and snr != 0:
            raise ParameterError("snr", snr, "0 or unset with --mu zero (--snr scales --mu top)")
        return None, "0"
    if spec == "top":
        s = 1.0 if snr is None else float(snr)
        return signal_direction(W, s), f"top eigenvector of (W+W^T)/2, ||mu||^2 = {s:g}"
    if isinstance(spec, str) and spec.endswith(".npy"):
        if snr is not None:
            raise ParameterError("snr", snr, "unset with --mu FILE.npy (the file gives mu exactly)")
        mu = check_mu(_read_npy("mu", spec, "a vector"), W.shape[0])
        return mu, f"{spec} (||mu||^2 = {float(mu @ mu):g})"
    raise ParameterError("mu", spec, "zero, top or FILE.npy")


def weights_data(act, c, gamma, W, mu=None, model: str = "both", diagonal: str = "f", n=None,
                 structure: str = "auto") -> dict:
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
    from ..theory import memorization_error

    W = check_weights(W)
    mu = check_mu(mu, W.shape[0])
    items = list(c) if isinstance(c, (list, tuple, np.ndarray)) else [c]
    cs = [float(check_c(ci)) for ci in items]
    gamma = np.atleast_1d(check_gamma(gamma)).astype(float).ravel()
    f = activation(act)
    k = general_w_constants(f, W, mu)
    p = W.shape[0]
    models = ["attention", "linear"] if model == "both" else [model]
    rows = {m: [] for m in models}
    ns = []
    for ci in cs:
        E = memorization_error(f, ci, gamma, model=model, n=n, diagonal=diagonal, weights=W, mu=mu,
                               structure=structure)
        E = E if model == "both" else {model: E}
        for m in models:
            rows[m].append(np.asarray(E[m], dtype=float).tolist())
        ns.append(int(round(p / ci)))
    several = len(cs) > 1
    out = {"c": cs} if several else {}
    out["gamma"] = gamma.tolist()
    for m in models:
        out[f"E_{m}"] = rows[m] if several else rows[m][0]
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


def run_weights(args) -> int:
    """``symattn solve --weights ...``: the table or JSON of the general-W theory."""
    from .common import EXIT_OK, fmt, format_table, print_json, with_provenance

    refuse_geometry_flags(args, "--weights")
    if getattr(args, "finite_p", False):
        raise ParameterError("finite-p", True, "unset with --weights (the general-W theory keeps W exactly)")
    if args.backend != "numpy":
        raise ParameterError("backend", args.backend, "numpy with --weights")
    W, wtext = load_weights(args.weights)
    mu, mtext = load_mu(args.mu, W, args.snr)
    data = weights_data(args.activation, list(args.c), args.gamma, W, mu, args.model, args.diagonal, args.n,
                        getattr(args, "structure", "auto"))
    if args.json:
        params = {"command": "solve", "activation": args.activation, "c": list(args.c), "gamma": list(args.gamma),
                  "weights": args.weights, "mu": args.mu or "zero", "snr": args.snr, "model": args.model,
                  "diagonal": args.diagonal, "n": args.n, "structure": getattr(args, "structure", "auto")}
        print_json(with_provenance(data, params, backend="numpy", dtype="float64"))
        return EXIT_OK
    print(f"activation {args.activation}; W = {wtext}: p = {data['p']}, ||W||_F^2/p = {fmt(data['omega'])}, "
          f"rho = tr W^2/||W||_F^2 = {fmt(data['rho'])}, tau = {fmt(data['tau'])}")
    model_text = {"blocks": "structured Hermite blocks (docs/theory.md §12.8)",
                  "free": "free elliptic noise (docs/theory.md §12.1)", None: "not used"}[data["structure"]]
    print(f"mu = {mtext}; t = mu^T W mu/sqrt(p) = {fmt(data['t'])}; general-W theory (docs/theory.md §12); "
          f"rank W = {data['rank']}, kernel model: {model_text}")
    keys = [k for k in ("E_attention", "E_linear") if k in data]
    if "c" not in data:
        rows = [[fmt(g)] + [fmt(data[k][i], 8) for k in keys] for i, g in enumerate(data["gamma"])]
        print(format_table(["gamma"] + keys, rows, align="r" * (1 + len(keys))))
    else:
        rows = [[fmt(c), fmt(g)] + [fmt(data[k][j][i], 8) for k in keys]
                for j, c in enumerate(data["c"]) for i, g in enumerate(data["gamma"])]
        print(format_table(["c", "gamma"] + keys, rows, align="r" * (2 + len(keys))))
    return EXIT_OK
