r"""Theory of the layer's variants: residual, multi-head and softmax (docs/theory.md §13).

:func:`variant_error` is what :func:`symattn.memorization_error` calls when one of ``residual``,
``heads`` or ``kernel='softmax'`` is given. It validates the variant, refuses what the theory
does not cover (with a :class:`~symattn.errors.ParameterError` that says why), and evaluates the
formulas of :mod:`symattn.backends.variants` in the numpy or mpmath context. The Monte Carlo of
the same models is :func:`symattn.simulate` with the same keywords.
"""

from __future__ import annotations

import numpy as np

from .activations.activation import activation as _activation
from .backends import solver
from .backends import variants as _v
from .backends.context import context
from .errors import ConvergenceError, ParameterError
from .model import MODELS, as_geometry, check_c, check_diagonal, check_gamma, kernel_constants

__all__ = ["variant_error", "general_sum_error"]

KERNELS = ("entrywise", "softmax")
READOUTS = ("concat", "sum")


def _check_heads(heads, p_hint=None):
    if isinstance(heads, np.ndarray) and heads.ndim == 2:
        raise ParameterError("heads", f"array of shape {heads.shape}", "a list of p×p matrices (or an H×p×p array)")
    try:
        hs = [np.asarray(W, dtype=float) for W in heads]
    except (TypeError, ValueError):
        raise ParameterError("heads", heads, "a list of real p×p matrices") from None
    if not hs:
        raise ParameterError("heads", "[]", "a non-empty list of p×p matrices")
    p = hs[0].shape[0] if hs[0].ndim == 2 else -1
    for h, W in enumerate(hs):
        if W.ndim != 2 or W.shape != (p, p) or p < 1:
            raise ParameterError("heads", f"head {h} of shape {W.shape}", "square matrices of one shape (p, p)")
        if not np.all(np.isfinite(W)):
            raise ParameterError("heads", f"head {h} with NaN/inf", "finite entries")
    return hs, p


def variant_error(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention", backend: str = "numpy",
                  dps: int | None = None, n: int | None = None, diagonal: str = "f", residual: bool = False,
                  heads=None, readout: str = "concat", kernel: str = "entrywise", temperature=None, mu=None):
    r"""Deterministic equivalent E(γ) of the residual, multi-head or softmax layer (docs/theory.md §13).

    - ``residual=True`` (Φ = X(I + K)): E_A(γ; a1, s², d + 1) (§13.1), any geometry.
    - ``heads=[W_1..W_H]`` of the paper's form W_h = I + (rank <= 8), μ from ``mu`` (a (p,) array,
      p the size of the heads; n = round(p/c)): ``readout='sum'`` gives E_A(γ/H²; W̄), with
      ``residual`` E_A(γ/H²; d + 1/H, W̄); ``readout='concat'`` is covered for H = 1 and for
      identical heads, E_A(γ/H) (§13.2). Other heads (random, MiniLM) with ``readout='sum'``, with or
      without ``residual``, go through the summed general-W kernel (:func:`general_sum_error`, numpy
      only), one such head (or H identical ones) with ``'concat'`` through the general-W theory itself;
      the concatenation of distinct heads is refused (§13.2 gives the reason and the measured gaps).
    - ``kernel='softmax'``, ``temperature=τ`` (default 1), ``diagonal='zero'`` and ``n`` (γ is the
      ridge of the softmax layer itself): E_A(γ(n − 1)²/p; ĝ_τ) (§13.3), in the regime of
      :func:`symattn.backends.variants.softmax_regime` only.

    Parameters
    ----------
    f, c, gamma, geometry, model, backend, dps, n, diagonal
        As for :func:`symattn.memorization_error` (f is not used with the softmax kernel).
    residual, heads, readout, kernel, temperature
        The variant, as for :func:`symattn.simulate`.
    mu : (p,) array, optional
        The signal for ``heads`` (instead of ``geometry``).

    Returns
    -------
    numpy.ndarray or dict
        As :func:`symattn.memorization_error`; E_LR does not depend on the variant.

    Examples
    --------
    >>> import numpy as np
    >>> E = variant_error(lambda t: 0 * t, c=0.5, gamma=[0.1, 1.0], residual=True, model="both")   # f = 0: Φ = X
    >>> bool(np.allclose(E["attention"], E["linear"], rtol=1e-10))
    True
    """
    if model not in MODELS + ("both",):
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    if not isinstance(residual, (bool, np.bool_)):
        raise ParameterError("residual", residual, "True or False")
    if kernel not in KERNELS:
        raise ParameterError("kernel", kernel, "one of 'entrywise', 'softmax'")
    if readout not in READOUTS:
        raise ParameterError("readout", readout, "one of 'concat', 'sum'")
    if temperature is not None and kernel != "softmax":
        raise ParameterError("temperature", temperature, "None unless kernel='softmax'")
    diagonal = check_diagonal(diagonal)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1).astype(float) for v in (c_arr, g_arr))
    ctx = context(backend, dps)
    hs = None
    if heads is not None:
        hs, p = _check_heads(heads)
        if geometry is not None and not as_geometry(geometry).is_null:
            raise ParameterError("geometry", geometry, "None when heads= is given",
                                 hint="give the signal as mu= (a vector of the heads' size p)")
        if mu is not None:
            mu = np.asarray(mu, dtype=float)
            if mu.shape != (p,) or not np.all(np.isfinite(mu)):
                raise ParameterError("mu", mu.shape, f"a finite vector of shape ({p},) (the heads are {p}x{p})")
        snr = 0.0 if mu is None else float(mu @ mu)
    else:
        if mu is not None:
            raise ParameterError("mu", "a vector", "None unless heads= is given (use geometry=)")
        geom = as_geometry(geometry)
        snr = geom.snr
    out = {}
    with ctx:
        if model in ("linear", "both"):
            E = solver.linear_error(ctx, ctx.convert(cb), ctx.convert(gb), ctx.convert(snr))
            out["linear"] = np.asarray(E, dtype=object if ctx.name == "mpmath" else float).reshape(shape)
        if model in ("attention", "both"):
            out["attention"] = _attention(ctx, f, cb, gb, geometry, n, diagonal, residual, hs, readout, kernel,
                                          temperature, mu, snr).reshape(shape)
    return out if model == "both" else out[model]


def _attention(ctx, f, cb, gb, geometry, n, diagonal, residual, hs, readout, kernel, temperature, mu, snr):
    info = {"residual": bool(residual), "kernel": kernel, "readout": readout,
            "heads": None if hs is None else len(hs)}
    if kernel == "softmax":
        if residual or hs is not None:
            raise ParameterError("kernel", kernel, "'entrywise' with residual=True or heads=",
                                 hint="the softmax theory (docs/theory.md §13.3) covers the single-head layer "
                                      "without residual; simulate the others with sa.simulate")
        if n is None:
            raise ParameterError("n", n, "the number of tokens (an int >= 2) for the softmax theory",
                                 hint="the softmax layer's scale is sqrt(p)/(n - 1) (docs/theory.md §13.3)")
        tau = 1.0 if temperature is None else temperature
        try:
            tau = float(tau)
        except (TypeError, ValueError):
            raise ParameterError("temperature", temperature, "a real number 0 < temperature < inf") from None
        if not (np.isfinite(tau) and tau > 0):
            raise ParameterError("temperature", temperature, "a real number 0 < temperature < inf")
        n = int(n)
        _v.softmax_regime(n, tau, diagonal)
        geom = as_geometry(geometry)
        E = _v.softmax_error(ctx, cb, gb, n, tau, ctx.convert(geom.gram), geom.rank, point_info=info)
        return _checked(ctx, E, cb, gb, info)
    f = _activation(f)
    k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None, snr=snr,
                         dps=ctx.dps if ctx.name == "mpmath" else None)
    if hs is None:
        geom = as_geometry(geometry)
        E, _, _ = _v.residual_error(ctx, ctx.convert(cb), ctx.convert(gb), k.a1, k.s2, k.d,
                                    ctx.convert(geom.gram), geom.rank, point_info=info)
        return _checked(ctx, E, cb, gb, info)
    H = len(hs)
    if residual and readout == "concat" and H > 1:
        raise ParameterError("readout", readout, "'sum' with residual=True and more than one head",
                             hint="the residual X is p×n; the concatenation is Hp×n")
    identical = all(np.array_equal(W, hs[0]) for W in hs[1:])
    if readout == "concat" and H > 1 and not identical:
        raise ParameterError(
            "readout", readout, "'sum' (or identical heads) for the multi-head theory",
            hint="the concatenation of distinct heads needs a block pencil with one block per head "
                 "(docs/theory.md §13.2), which is not implemented; simulate it with "
                 "sa.simulate(heads=..., readout='concat')")
    try:
        gram, rank = _v.head_geometry(hs[:1] if readout == "concat" else hs, mu)
    except ParameterError:
        if ctx.name != "numpy":
            raise
        if readout == "concat":  # one general head, or H identical ones (M = H M_1): the general-W theory at γ/H
            E = general_sum_error(f, float(cb[0]), gb / H, hs[:1], mu, diagonal, cb, residual=residual)
        else:
            E = general_sum_error(f, float(cb[0]), gb, hs, mu, diagonal, cb, residual=residual)
        return _checked(ctx, E, cb, gb, info)
    if readout == "concat":  # H identical heads: M = H M_1
        scale, dshift = H, (1.0 if residual else 0.0)
    else:  # Φ = X(δI + Σ K_h) = H X(δI/H + K̄)
        scale, dshift = H * H, (1.0 / H if residual else 0.0)
    g = ctx.convert(gb) / scale
    E, _, _ = solver.attention_error(ctx, ctx.convert(cb), g, k.a1, k.s2, k.d + dshift, ctx.convert(gram), rank,
                                     point_info=info)
    return _checked(ctx, E, cb, gb, info)


def _checked(ctx, E, cb, gb, info):
    """Every E finite and in [0, 1] (within 1e-12), else a ConvergenceError naming the point."""
    E = np.asarray(E, dtype=object if ctx.name == "mpmath" else float).reshape(-1)
    for i in range(E.size):
        v = float(ctx.to_float(E[i]))
        if not (np.isfinite(v) and -1e-12 <= v <= 1 + 1e-12):
            raise ConvergenceError(f"impossible value E={v!r} of the variant theory",
                                   point=dict(info, c=float(cb[i]), gamma=float(gb[i])))
    return E


def _pair_cov(f, om1, om2, r, nodes: int = 64):
    """Cov(f(ξ1), f(ξ2)) for centred Gaussians of variances om1, om2 and correlation r (tensor Gauss–Hermite)."""
    from .gauss import gauss_hermite

    x, w = gauss_hermite(nodes)
    r = min(max(float(r), -1.0), 1.0)
    f1 = np.asarray(f.numpy(np.sqrt(om1) * x), dtype=float)
    x2 = np.sqrt(om2) * (r * x[:, None] + np.sqrt(max(1 - r * r, 0.0)) * x[None, :])
    f2 = np.asarray(f.numpy(x2), dtype=float)
    return float(np.einsum("i,j,i,ij->", w, w, f1, f2)) - float(w @ f1) * float(w @ (f2 @ w))


def general_sum_error(f, c, gamma, heads, mu=None, diagonal="f", cs=None, residual: bool = False):
    r"""E of the sum readout Φ = X Σ_h K_h for general heads, by the general-W pencil (docs/theory.md §13.2).

    Each head's Gaussian-equivalent kernel (docs/theory.md §12) is (a1_h/c)YᵀW_hY + D_h + σ_hÑ_h; their sum is
    one such kernel with

    - linear part (a1/c)YᵀW̃Y, W̃ = Σ_h a1_h W_h / a1 (a1 = a1 of head 1);
    - noise variance σ² = Σ_h σ_h² + Σ_{h≠h'} [Cov f(ξ^h_ij), f(ξ^{h'}_ij) − a1_h a1_h' Cov(ξ^h_ij, ξ^{h'}_ij)]/c;
    - elliptic correlation τ from the same sums with (ξ^h_ij, ξ^{h'}_ji);
    - diagonal: the sum of the heads' mean diagonals (mean field: the diagonal latent of each head is replaced by
      its mean, exact when it concentrates; for random heads it is O(1/√p)); one head is the general-W
      model itself;
    - the rank-one mean terms c_11 added.

    This is the general-W theory of ``symattn.backends.general_w`` (issue 13) evaluated on the summed kernel;
    numpy only. *Derived*, checked by Monte Carlo at μ = 0 only.

    Parameters
    ----------
    f : Activation or spec
    c : float
        p/n (n = round(p/c)).
    gamma : array_like
    heads : list of (p, p) arrays
    mu : (p,) array or None
    diagonal : {'f', 'zero'}
    cs : array_like, optional
        The c of every point: must all equal ``c``.
    residual : bool
        Φ = X(I + Σ_h K_h): the diagonal latent κ of the summed kernel shifted by 1 (docs/theory.md §13.1).

    Returns
    -------
    numpy.ndarray
        E(γ).

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> heads = [rng.standard_normal((20, 20)) / np.sqrt(20) for _ in range(2)]
    >>> E = general_sum_error("tanh", 0.5, [1.0], heads)
    >>> bool(0 < E[0] < 1)
    True
    """
    import dataclasses

    try:
        from .backends import general_w as gw

        needed = (gw.general_w_model, gw.model_error)
    except (ImportError, AttributeError):  # pragma: no cover - the general-W theory is not available
        raise ParameterError("heads", "general heads", "heads of the paper's form W_h = I + low rank",
                             hint="general heads need the general-W theory (docs/theory.md §12)") from None
    del needed
    if cs is not None and np.any(np.asarray(cs, dtype=float) != c):
        raise ParameterError("c", list(np.unique(cs)), "a single c for general heads")
    f = _activation(f)
    ms = [gw.general_w_model(f, c, W, mu, diagonal=diagonal) for W in heads]
    m = ms[0] if len(heads) == 1 else _summed_model(gw, f, c, heads, ms, mu, diagonal)
    if residual:  # I + Σ_h K_h: the identity lands on the kernel's diagonal
        m = dataclasses.replace(m, kappa=np.asarray(m.kappa, dtype=float) + 1.0)
    return gw.model_error(m, gamma)["E"]


def _summed_model(gw, f, c, heads, ms, mu, diagonal):
    """The GeneralWModel of Σ_h K_h (H >= 2): summed linear part, noise and diagonal (see general_sum_error)."""
    import dataclasses

    p = heads[0].shape[0]
    a1 = ms[0].a1
    if a1 == 0:
        raise ParameterError("f", f.name, "an activation with a1 != 0 for general summed heads")
    Wt = sum(m.a1 * W for m, W in zip(ms, heads)) / a1
    s2 = sum(m.sigma2 for m in ms)
    s2tau = sum(m.sigma2 * m.tau for m in ms)
    om = [m.constants.omega for m in ms]
    for h in range(len(heads)):
        for k in range(len(heads)):
            if h == k:
                continue
            den = p * np.sqrt(om[h] * om[k])
            r_same = float(np.sum(heads[h] * heads[k])) / den      # corr(ξ^h_ij, ξ^k_ij) = tr(W_hᵀW_k)/(p√(ω_hω_k))
            r_swap = float(np.sum(heads[h] * heads[k].T)) / den    # corr(ξ^h_ij, ξ^k_ji) = tr(W_h W_k)/(p√(ω_hω_k))
            lin = ms[h].a1 * ms[k].a1 * np.sqrt(om[h] * om[k])
            s2 += (_pair_cov(f, om[h], om[k], r_same) - lin * r_same) / c
            s2tau += (_pair_cov(f, om[h], om[k], r_swap) - lin * r_swap) / c
    tau = min(max(s2tau / s2, -1.0), 1.0) if s2 > 1e-300 else 0.0
    kappa = sum(float(m.kappa @ m.kw) for m in ms)
    m0 = gw.general_w_model(f, c, Wt, mu, diagonal=diagonal)
    return dataclasses.replace(m0, a1=a1, sigma2=max(s2, 0.0), tau=tau, kappa=np.array([kappa]), kw=np.array([1.0]),
                               c_11=sum(mm.c_11 for mm in ms), c_yy=0.0, W=Wt, W_traces=Wt)
