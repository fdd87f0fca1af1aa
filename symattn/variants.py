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
from .model import (MODELS, as_geometry, check_c, check_diagonal, check_gamma, check_heads, check_variant_flags,
                    kernel_constants)

__all__ = ["variant_error", "general_sum_error", "general_concat_error", "concat_structure"]

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
      the concatenation of distinct heads (any form) through the block pencil of
      :func:`general_concat_error` (numpy; μ by Woodbury, Gaussian-equivalent value; low-rank heads such as
      MiniLM's with each head's Hermite blocks, :func:`concat_structure`; §13.2).
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
    residual, readout, kernel, temperature = check_variant_flags(residual, readout, kernel, temperature)
    diagonal = check_diagonal(diagonal)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1).astype(float) for v in (c_arr, g_arr))
    ctx = context(backend, dps)
    hs = None
    if heads is not None:
        hs = list(check_heads(heads))
        p = hs[0].shape[0]
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
            out["linear"] = ctx.asarray(E).reshape(shape)
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
        n = int(n)
        _v.softmax_regime(n, tau, diagonal)
        geom = as_geometry(geometry)
        E = _v.softmax_error(ctx, cb, gb, n, tau, ctx.convert(geom.gram), geom.rank, point_info=info)
        return _checked(ctx, E, cb, gb, info)
    f = _activation(f)
    k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None, snr=snr,
                         dps=ctx.dps)
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
    if readout == "concat" and H > 1 and not identical:  # distinct heads: the block pencil (§13.2), numpy, μ = 0
        ctx.require_float64(ParameterError("backend", "mpmath", "'numpy' for the concatenation of distinct heads",
                                           hint="the block pencil of docs/theory.md §13.2 is float64 only"))
        E = general_concat_error(f, float(cb[0]), gb, hs, mu, diagonal, cb)
        return _checked(ctx, E, cb, gb, info)
    try:
        gram, rank = _v.head_geometry(hs[:1] if readout == "concat" else hs, mu)
    except ParameterError as err:
        ctx.require_float64(err)  # mpmath: the paper-form heads only (general heads: float64)
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
    E = ctx.asarray(E).reshape(-1)
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
    try:
        from .backends import general_w as gw

        needed = (gw.general_w_model, gw.model_error)
    except (ImportError, AttributeError):  # pragma: no cover - the general-W theory is not available
        raise ParameterError("heads", "general heads", "heads of the paper's form W_h = I + low rank",
                             hint="general heads need the general-W theory (docs/theory.md §12)") from None
    del needed
    if cs is not None and np.any(np.asarray(cs, dtype=float) != c):
        raise ParameterError("c", list(np.unique(cs)), "a single c for general heads")
    heads = [np.asarray(W, dtype=float) for W in heads]
    if _summed_blocks(heads, mu, diagonal):
        return _summed_block_error(_activation(f), c, gamma, heads, residual)
    return gw.model_error(general_sum_model(f, c, heads, mu, diagonal, residual)[0], gamma)["E"]


def _summed_blocks(heads, mu, diagonal) -> bool:
    """Whether the sum of the heads takes the Hermite blocks (low-rank heads, μ = 0, diagonal 'f')."""
    return len(heads) > 1 and (mu is None or not np.any(mu)) and diagonal == "f" and concat_structure(heads) == "blocks"


def general_sum_model(f, c, heads, mu=None, diagonal="f", residual: bool = False):
    r"""The model of Φ = X(δI + Σ_h K_h) for general heads (δ = 1 with ``residual``; :func:`general_sum_error`):
    ``(m, blocks, nodes)``, m the :class:`~symattn.backends.general_w.GeneralWModel` of the summed kernel, and for
    low-rank heads at μ = 0 (diagonal 'f') their Hermite blocks and token nodes (:func:`_summed_block_model`),
    else ``(m, None, None)``.

    Examples
    --------
    >>> import numpy as np
    >>> m, blk, nodes = general_sum_model("tanh", 0.5, [np.eye(12)], residual=True)
    >>> m0 = general_sum_model("tanh", 0.5, [np.eye(12)])[0]
    >>> m.p, blk is None, bool(np.allclose(m.kappa - m0.kappa, 1.0))   # the residual's identity on the diagonal
    (12, True, True)
    """
    import dataclasses

    from .backends import general_w as gw

    f = _activation(f)
    heads = [np.asarray(W, dtype=float) for W in heads]
    if _summed_blocks(heads, mu, diagonal):
        return _summed_block_model(f, c, heads, residual)
    ms = [gw.general_w_model(f, c, W, mu, diagonal=diagonal) for W in heads]
    m = ms[0] if len(heads) == 1 else _summed_model(gw, f, c, heads, ms, mu, diagonal)
    if residual:  # I + Σ_h K_h: the identity lands on the kernel's diagonal
        m = dataclasses.replace(m, kappa=np.asarray(m.kappa, dtype=float) + 1.0)
    return m, None, None


def _summed_block_model(f, c, heads, residual: bool = False, blocks=None, tokens=None, pairs=None):
    r"""The model of Σ_h K_h for low-rank heads at μ = 0 with each head's Hermite blocks (docs/theory.md §13.2): one
    kernel with linear part (1/c)YᵀW̃Y, W̃ = Σ_h b1_h W_h/b1_1, every head's blocks with their token scales in the one
    pencil (Σ_xx(i) −= Σ_b ρv_{b,i}² φ_b ĝ_{b,wu}, Σ_uw(i) −= Σ_b ρu_{b,i}² φ_b ĝ_{b,xx}), the remainders summed with
    the cross-head covariances of :class:`_ConcatModel` (σ² = Σ_hk R_hk, σ²τ = Σ_hk T_hk) and the diagonal
    Σ_h κ_h of each sampled token: (m, blocks, nodes) for
    :func:`~symattn.backends.general_w.hermite.block_model_error`."""
    import dataclasses

    from .backends import general_w as gw

    cm = _ConcatModel(f, c, heads, "f", structure="blocks", blocks=blocks, tokens=tokens, pairs=pairs)
    cb = cm.blocks
    a1 = float(cm.a[0])
    Wt = sum(a * W for a, W in zip(cm.a, heads)) / a1
    s2, s2tau = float(np.sum(cm.Rs)), float(np.sum(cm.Ts))
    m0 = gw.general_w_model(f, c, Wt, None)
    m = dataclasses.replace(m0, a1=a1, sigma2=max(s2, 0.0), tau=min(max(s2tau / s2, -1.0), 1.0) if s2 > 1e-300 else 0.0)
    kappa = np.sum(cm.kappa, axis=1) + (1.0 if residual else 0.0)
    blk = [] if cb is None else [(m2, ru, rv) for _, m2, ru, rv in cb.blocks]
    return m, blk, {"kappa": kappa, "w": cm.kw}


def _summed_block_error(f, c, gamma, heads, residual: bool = False, blocks=None, tokens=None, pairs=None):
    """E of :func:`_summed_block_model` by :func:`~symattn.backends.general_w.hermite.block_model_error`."""
    from .backends.general_w.hermite import block_model_error

    m, blk, nodes = _summed_block_model(f, c, heads, residual, blocks, tokens, pairs)
    return block_model_error(m, gamma, blk, nodes)


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


# ----------------------------------------------------------------------------- concatenated general heads (§13.2)
#: the largest memory (bytes) for the table of W_jᵀW_k of the concatenated heads; above it, 2H matrix products
#: per Dyson evaluation instead
GRAM_BYTES = 512 * 2**20


class _ConcatModel:
    """What the block pencil of the concatenated heads needs (docs/theory.md §13.2), float64.

    Fields: H, p, n, c; ``Ws`` (H, p, p); ``GT`` (H, H, p, p) with GT[j, k] = W_jᵀW_k; ``a`` (a1' per head);
    ``Rs``, ``Ts`` (H×H): σ_hσ_h'R_hh' and σ_hσ_h'T_hh' (diagonals σ_h² and σ_h²τ_h); the diagonal latent as
    nodes ``kappa`` (M, H) with weights ``kw`` (M,); ``blocks`` the heads' Hermite blocks
    (:class:`~symattn.backends.concat_blocks.ConcatBlocks`, ``structure='blocks'``) or None (free noise).
    """

    def __init__(self, f, c, heads, diagonal, mu=None, structure: str = "free", blocks=None, tokens=None,
                 pairs=None):
        from .backends import general_w as gw
        from .gauss import gauss_hermite

        H, p = len(heads), heads[0].shape[0]
        ms = [gw.general_w_model(f, c, W, None, diagonal=diagonal) for W in heads]
        self.H, self.p, self.n, self.c = H, p, ms[0].n, float(c)
        self.mu = None if mu is None or not np.any(mu) else np.asarray(mu, dtype=float)
        self.Ws = np.array(heads, dtype=float)
        self.Ws2 = self.Ws.reshape(H, p * p)
        self.GT2 = None   # GT[j, k] = W_jᵀW_k (H²p² numbers), unless that exceeds GRAM_BYTES: then 2H products
        if H * H * p * p * 8 <= GRAM_BYTES:
            self.GT2 = np.matmul(np.transpose(self.Ws, (0, 2, 1))[:, None], self.Ws[None]).reshape(H * H, p * p)
        self.a = np.array([m.a1 for m in ms])
        self.c_11 = np.array([m.c_11 for m in ms])
        om = np.array([m.constants.omega for m in ms])
        Rs, Ts = np.diag([m.sigma2 for m in ms]), np.diag([m.sigma2 * m.tau for m in ms])
        for h in range(H):
            for k in range(h + 1, H):
                den = p * np.sqrt(om[h] * om[k])
                r_same = float(np.sum(heads[h] * heads[k])) / den   # corr(ξ^h_ij, ξ^k_ij)
                r_swap = float(np.sum(heads[h] * heads[k].T)) / den  # corr(ξ^h_ij, ξ^k_ji)
                r_same, r_swap = (1.0 if abs(1 - r) < 1e-12 else r for r in (r_same, r_swap))
                lin = self.a[h] * self.a[k] * np.sqrt(om[h] * om[k])
                Rs[h, k] = Rs[k, h] = (_pair_cov(f, om[h], om[k], r_same, nodes=96) - lin * r_same) / c
                Ts[h, k] = Ts[k, h] = (_pair_cov(f, om[h], om[k], r_swap, nodes=96) - lin * r_swap) / c
        self.Rs, self.Ts = Rs, Ts
        self.blocks = None
        if structure == "blocks":   # each head's Hermite blocks with token scales (docs/theory.md §13.2)
            self._use_blocks(f, heads, diagonal, blocks, tokens, pairs)
            return
        # the diagonal latent q_h = x_iᵀW_hx_i/√p, jointly Gaussian over the heads:
        # mean tr W_h/√p, Cov(q_h, q_k) = 2 tr(W_s,h W_s,k)/p; κ_h = f(q_h)/√p − a1_h tr W_h/p
        base = np.array([-m.a1 * float(np.trace(W)) / p for m, W in zip(ms, heads)])
        if diagonal == "zero":
            self.kappa, self.kw = base[None, :], np.array([1.0])
            return
        Wsym = (self.Ws + np.transpose(self.Ws, (0, 2, 1))) / 2
        Cq = 2 * np.einsum("hab,kab->hk", Wsym, Wsym) / p
        mean = np.array([float(np.trace(W)) for W in heads]) / np.sqrt(p)
        if self.mu is not None:   # x_i = μy_i + z_i: mean + μᵀW_hμ/√p, Cov + 4 (W_s,hμ)ᵀ(W_s,kμ)/p
            Wm = Wsym @ self.mu
            Cq = Cq + 4 * (Wm @ Wm.T) / p
            mean = mean + np.array([float(self.mu @ W @ self.mu) for W in heads]) / np.sqrt(p)
        lam, V = np.linalg.eigh(Cq)
        keep = lam > 1e-12 * max(float(lam[-1]), 1e-300)
        x, w = gauss_hermite(gw.DIAGONAL_NODES)
        # anchored (cut-HDMR) rule along the principal axes: exact for functions additive in the principal
        # coordinates, and Gauss–Hermite itself when the q_h are perfectly correlated (rank 1, e.g. identical heads)
        axes = [np.sqrt(lam[i]) * V[:, i] for i in np.nonzero(keep)[0]]
        qs = [mean[None, :] + x[:, None] * ax[None, :] for ax in axes]
        ws = [w] * len(axes)
        if len(axes) != 1:
            qs.append(mean[None, :])
            ws.append(np.array([1.0 - len(axes)]))
        q = np.vstack(qs)
        with np.errstate(over="ignore"):
            fq = np.asarray(f.numpy(q), dtype=float)
        if not np.all(np.isfinite(fq)):
            raise ParameterError("diagonal", diagonal, "'zero' for this activation (f(xᵀWx/√p) overflows)")
        self.kappa = fq / np.sqrt(p) + base[None, :]
        self.kw = np.concatenate(ws)

    def _use_blocks(self, f, heads, diagonal, blocks, tokens, pairs):
        """Replace the free noise by the per-head blocks (:mod:`symattn.backends.concat_blocks`): the slopes b1_h,
        the remainders (cross-head correlation coefficients those of the free model) and the joint token latent."""
        from .backends import concat_blocks as cbm

        cb = cbm.concat_blocks(f, heads, self.mu, cbm.BLOCK_KINDS if blocks is None else blocks, diagonal,
                               cbm.CONCAT_TOKENS if tokens is None else tokens, pairs=pairs)
        sd = np.sqrt(np.diag(self.Rs))
        sd = np.where(sd > 0, sd, 1.0)
        new = np.sqrt(cb.rest / self.c)
        self.Rs = self.Rs / np.outer(sd, sd) * np.outer(new, new)
        self.Ts = self.Ts / np.outer(sd, sd) * np.outer(new, new)
        np.fill_diagonal(self.Ts, cb.rest_tau * cb.rest / self.c)
        self.a = cb.b1
        self.kappa, self.kw = cb.kappa, cb.kw
        self.blocks = cb if cb.blocks else None


def _state0(m, z):
    """The γ → ∞ start: g = diag(1/z, 1, …, 1), and (ĝ_xx, ĝ_wu) = (1/z, 1) per block (a flat state with blocks)."""
    N = 2 * m.H + 1
    g = np.eye(N, dtype=np.result_type(z, float))
    g[0, 0] = 1.0 / z
    if m.blocks is None:
        return g
    return np.concatenate([g.ravel(), np.tile(np.array([1.0 / z, 1.0]), len(m.blocks.blocks))])


def _split(m, state):
    """(g, block state) of a state: g itself without blocks, the flat (g, ĝ…) with them."""
    if m.blocks is None:
        return state, None
    N = 2 * m.H + 1
    return state[:N * N].reshape(N, N), state[N * N:]


def _lin(v, A):
    """v @ A for a real matrix A and a real or complex vector (or matrix) v, without casting A to complex."""
    if np.iscomplexobj(v):
        return np.real(v) @ A + 1j * (np.imag(v) @ A)
    return v @ A


def _concat_map(m, g, z, parts: bool = False):
    r"""One evaluation of the block pencil's Dyson map g ↦ E_κ[(L0(κ) − Σ_nn(g))^{-1}] (docs/theory.md §13.2).

    g is the (2H+1)×(2H+1) matrix of n-traces, ordered (x, u_1..u_H, w_1..w_H); holomorphic in g and z (complex
    steps). The p-space part is the 2p×2p matrix 𝔅 of (t, s), s = Σ_k (a_k/c) W_kᵀh_k. With blocks the state is
    flat: g, then (ĝ_xx, ĝ_wu) per block (:func:`_split`), and each token's pencil carries the blocks'
    self-energies (:func:`symattn.backends.concat_blocks.add_blocks`).
    """
    g, ex = _split(m, g)
    H, p, c = m.H, m.p, m.c
    ac = m.a / c
    iu, iw = slice(1, 1 + H), slice(1 + H, 1 + 2 * H)
    rows = np.r_[0, np.arange(1 + H, 1 + 2 * H)]          # n-partners of the p-rows t, h_1..h_H
    phi, psi, chi = g[:, 0], g[:, iu], g[:, iw]
    Ev = np.linalg.inv(np.eye(H) - chi[iu])               # the v-elimination (I − χ_vv)^{-1}
    chiE = chi[rows] @ Ev
    phit = phi[rows] + chiE @ phi[iu]
    psit = psi[rows] + chiE @ psi[iu]
    Psi_t = _lin(ac * psit[0], m.Ws2).reshape(p, p)
    coef = (ac[:, None] * ac[None, :]) * psit[1:]
    if m.GT2 is not None:
        P = _lin(coef.reshape(-1), m.GT2).reshape(p, p)
    else:
        P = sum(m.Ws[j].T @ _lin(coef[j], m.Ws2).reshape(p, p) for j in range(H))
    Q = _lin(ac * phit[1:], m.Ws2).reshape(p, p).T
    dtype = np.result_type(g, z, m.Ws)
    B = np.empty((2 * p, 2 * p), dtype=dtype)
    I = np.eye(p)
    B[:p, :p] = I - Psi_t
    B[:p, p:] = phit[0] * I
    B[p:, :p] = -P
    B[p:, p:] = I + Q
    Gi = np.linalg.inv(B)
    Gtt, Gts, Gst, Gss = Gi[:p, :p], Gi[:p, p:], Gi[p:, :p], Gi[p:, p:]
    tau1 = np.trace(Gst) / p
    tau2 = _lin(Gtt.T.reshape(-1), m.Ws2.T) / p                       # tr_p(W_k 𝔊_tt)
    tau3 = _lin(Gss.reshape(-1), m.Ws2.T) / p                         # tr_p(𝔊_ss W_jᵀ)
    if m.GT2 is not None:
        tau4 = _lin(Gts.T.reshape(-1), m.GT2.T).reshape(H, H).T / p   # [k, j] = tr_p(W_k 𝔊_ts W_jᵀ)
    else:
        tau4 = _lin(np.matmul(m.Ws, Gts).reshape(H, -1), m.Ws2.T) / p   # Σ_ab (W_k𝔊_ts)_ab (W_j)_ab
    N = 2 * H + 1
    TS = np.empty(N, dtype=dtype)
    TW = np.empty((H, N), dtype=dtype)
    TS[0], TW[:, 0] = tau1, tau2                                        # source in t
    sc = ac[:, None] * chiE[1:]                                         # source in v_m: σ_s = Σ_j sc[j, m] W_jᵀ
    TS[iu] = chiE[0] * tau1 + tau3 @ sc
    TW[:, iu] = tau2[:, None] * chiE[0][None, :] + tau4 @ sc
    TS[iw] = ac * tau3                                                  # source in h_m: σ_s = (a_m/c) W_mᵀ
    TW[:, iw] = tau4 * ac[None, :]
    src = np.zeros((H, N), dtype=dtype)
    src[:, iu] = np.eye(H)
    TV = Ev @ (src - np.outer(phi[iu], TS) + (psi[iu] * ac[None, :]) @ TW)   # tr_p v_k
    S = np.empty((N, N), dtype=dtype)
    S[0] = -c * TS
    S[iu] = m.a[:, None] * TW
    S[iw] = c * TV
    # the elliptic noises: E[ÑAÑ'ᵀ] = R tr_n A, E[ÑAÑ'] = T tr_n A
    S[iu, 0] += m.Ts @ g[0, iu]
    S[iu, iw] -= m.Rs * g[0, 0]
    S[0, 0] -= np.sum(m.Rs * g[iw, iu])
    S[0, iw] += m.Ts.T @ g[iw, 0]
    M = m.kw.size
    L0 = np.zeros((M, N, N), dtype=dtype)
    L0[:, 0, 0] = z
    L0[:, 0, iw] = m.kappa
    L0[:, iu, 0] = -m.kappa
    L0[:, iu, iu] = np.eye(H)
    L0[:, iw, iw] = np.eye(H)
    L = L0 - S[None]
    if ex is not None:
        from .backends.concat_blocks import add_blocks, block_means

        dtype = np.result_type(dtype, ex)
        L = L.astype(dtype, copy=False)
        add_blocks(L, m.blocks, ex, m.n, p, c)
    Gm = np.linalg.inv(L)
    gn = np.einsum("m,mij->ij", m.kw, Gm)
    out = gn if ex is None else np.concatenate([gn.ravel(), block_means(m.blocks, Gm)])
    if parts:
        return out, dict(Ev=Ev, chiE=chiE, phit=phit, psit=psit, Gi=Gi, phi=phi, psi=psi, gn=gn)
    return out


def _concat_F(m, g, z):
    r"""F = ŷᵀ[L_full^{-1}]_xx ŷ of the block pencil at the n-traces g, with the signal by Woodbury (§13.2).

    Y → Y + μŷᵀ in every Y-slot is 5H + 1 rank-one terms: −μŷᵀ at (t, x), (v_h, u_h), (h_h, w_h) and
    (a_h/c)ŷμᵀ, −(a_h/c)ŷμᵀ, −ŷμᵀ at (x, g_h), (u_h, l_h), (w_h, v_h). Their quadratic forms are ŷᵀ𝒢_nnŷ = the
    n-traces, μᵀ𝒢_ppμ exactly (2H + 1 solves with 𝔅) and 0 across n and p. The êêᵀ mean terms decouple (ŷ ⊥ ê).
    """
    _, P = _concat_map(m, g, z, parts=True)
    gn = P["gn"]
    mu = m.mu
    if mu is None:
        return gn[0, 0]
    H, p, c = m.H, m.p, m.c
    ac = m.a / c
    Ev, chiE, phit, psit, Gi, phi, psi = (P[k] for k in ("Ev", "chiE", "phit", "psit", "Gi", "phi", "psi"))
    iu = slice(1, 1 + H)
    Wmu, WTmu = m.Ws @ mu, np.einsum("kba,b->ka", m.Ws, mu)      # W_k μ, W_kᵀμ
    N = 2 * H + 1
    # sources μ in the p-blocks t, v_1..v_H, h_1..h_H (index as their n-partners x, u, w)
    rho_t = np.zeros(N, dtype=Gi.dtype)      # coefficient of μ in ρ̃_t
    rho_h = np.zeros((H, N), dtype=Gi.dtype)  # coefficient of μ in ρ̃_{h_j}
    rho_t[0] = 1.0
    rho_t[iu] = chiE[0]
    rho_h[:, iu] = chiE[1:]
    rho_h[:, 1 + H:] = np.eye(H)
    rhs_s = np.einsum("jb,j,ja->ab", rho_h, ac, WTmu)   # σ_s = Σ_j (a_j/c) W_jᵀ ρ̃_{h_j}
    ts = Gi @ np.vstack([np.outer(mu, rho_t), rhs_s])
    t, sv = ts[:p], ts[p:]                               # (p, N): the responses t, s to each source
    Wt = np.einsum("kab,bn->kan", m.Ws, t)               # W_k t
    Psi_h = np.einsum("jk,kan->jan", ac[None, :] * psit[1:], Wt)       # Ψ̃_{h_j} t
    hresp = rho_h[:, None, :] * mu[None, :, None] - phit[1:, None, None] * sv[None] + Psi_h
    form_g = np.einsum("ja,jan->jn", Wmu, hresp)         # μᵀ g_j = (W_jμ)ᵀ h_j
    form_l = np.einsum("a,kan->kn", mu, Wt)              # μᵀ l_k = μᵀW_k t
    src_v = np.zeros((H, N), dtype=Gi.dtype)
    src_v[:, iu] = np.eye(H)
    mu_s = mu @ sv
    mu_Psiv = (psi[iu] * ac[None, :]) @ form_l           # μᵀ Ψ_{v_m} t
    form_v = Ev @ (src_v * (mu @ mu) - np.outer(phi[iu], mu_s) + mu_Psiv)   # μᵀ v_k
    # pieces (row block, col block, coef); blocks: ('n', i) n-block i, ('p', kind, h) p-block
    pieces = [(("p", "s", 0), ("n", 0), -1.0)]
    pieces += [(("p", "s", 1 + h), ("n", 1 + h), -1.0) for h in range(H)]
    pieces += [(("p", "s", 1 + H + h), ("n", 1 + H + h), -1.0) for h in range(H)]
    pieces += [(("n", 0), ("p", "g", h), ac[h]) for h in range(H)]
    pieces += [(("n", 1 + h), ("p", "l", h), -ac[h]) for h in range(H)]
    pieces += [(("n", 1 + H + h), ("p", "v", h), -1.0) for h in range(H)]
    table = {"g": form_g, "l": form_l, "v": form_v}

    def form(left, right):
        """(vector at block left)ᵀ 𝒢 (vector at block right): ŷ in n-blocks, μ in p-blocks."""
        if left[0] != right[0]:
            return 0.0
        if left[0] == "n":
            return gn[left[1], right[1]]
        return table[left[1]][left[2], right[2]]   # left ∈ {g, l, v} rows, right a source t/v/h

    R = len(pieces)
    cap = np.eye(R, dtype=Gi.dtype)
    for i, (_, cb, _) in enumerate(pieces):
        for j, (rb, _, coef) in enumerate(pieces):
            cap[i, j] += coef * form(cb, rb)
    left = np.array([coef * form(("n", 0), rb) for (rb, _, coef) in pieces])
    right = np.array([form(cb, ("n", 0)) for (_, cb, _) in pieces])
    return gn[0, 0] - left @ np.linalg.solve(cap, right)


def _concat_solve(m, z, tol=1e-13, maxiter=500, newton_below=0.0, depth=None, restart=None, start=None):
    """The Dyson fixed point g = Φ(g): Anderson-accelerated damped iteration from diag(1/z, 1, …, 1), then, at real
    z, Newton–GMRES (Jacobian-vector products by complex steps) once the relative residual is below
    ``newton_below`` (0: never). A complex z (the spectral density is Im g_xx(−λ − iε)/π) uses the iteration only;
    near the support's edge it converges slowly from this start (continue from a nearby solution instead).
    Runs on :func:`~symattn.backends.fixedpoint.fixed_point`: ``depth`` the Anderson depth (default 5),
    ``restart`` the evaluations without a new best residual before a
    :class:`~symattn.backends.fixedpoint.StallRestart` (default None: no restarts); ``start`` a warm start (the
    γ-continuation) instead of the γ → ∞ one."""
    from scipy.sparse.linalg import LinearOperator, gmres

    from .backends.fixedpoint import Anderson, Newton, StallRestart, fixed_point

    g = _state0(m, z) if start is None else np.array(start)
    shape = g.shape
    if np.iscomplexobj(z):
        newton_below = 0.0
    eta = 1e-20

    def residual(gn, g):
        scale = np.maximum(np.abs(gn), 1e-6 * max(float(np.max(np.abs(gn))), 1e-300))
        return float(np.max(np.abs(gn - g) / scale))

    def newton_step(g, gn, aux):
        r = (gn - g).ravel()

        def mv(v, g=g):
            return v - np.imag(_concat_map(m, g + 1j * eta * v.reshape(shape), z)).ravel() / eta
        A = LinearOperator((r.size, r.size), matvec=mv, dtype=float)
        step, info = gmres(A, r, rtol=1e-12, atol=0.0, restart=min(r.size, 60), maxiter=20)
        if not np.all(np.isfinite(step)):
            return None
        return step.reshape(shape), gn, aux

    # Anderson (depth 5) from diag(1/z, 1, …, 1); Newton–GMRES at each iterate whose residual is below
    # ``newton_below`` (not sticky: a non-finite GMRES step falls back to the Anderson step); a residual that
    # stops decreasing below 1e-10 (the rounding floor of the p×p traces) returns the best point
    strategies = [Anderson(depth=5 if depth is None else depth, check_finite=True),
                  Newton(newton_step, below=newton_below, halve="never", sticky=False)]
    out = fixed_point(lambda g, st: (_concat_map(m, g, z), None), g, strategies, tol=tol, residual=residual,
                      maxiter=maxiter, floor=1e-10, restart=None if restart is None else StallRestart(restart),
                      name="the concat block-pencil Dyson iteration",
                      point={"gamma": complex(z) if np.iscomplexobj(z) else float(z)})
    return out.x, out.iterations, out.residual


def general_concat_error(f, c, gamma, heads, mu=None, diagonal="f", cs=None, structure: str = "auto", blocks=None,
                         tokens=None, pairs=None):
    r"""E of the concatenation Φ = [XK_1; …; XK_H] of distinct general heads, by the block pencil (§13.2).

    M = Σ_h K_hᵀYᵀYK_h with each K_h the Gaussian-equivalent kernel of docs/theory.md §12,
    (a1_h/c)YᵀW_hY + D_h + σ_hÑ_h, the noises cross-correlated: E[Ñ_hAÑ_kᵀ] = R_hk tr_n A,
    E[Ñ_hAÑ_k] = T_hk tr_n A, with

    - σ_hσ_kR_hk = [Cov(f(ξ^h_ij), f(ξ^k_ij)) − a1_h a1_k tr(W_hᵀW_k)/p]/c,
    - σ_hσ_kT_hk = [Cov(f(ξ^h_ij), f(ξ^k_ji)) − a1_h a1_k tr(W_hW_k)/p]/c.

    The pencil in x; u_h = K_hx, w_h = YᵀYu_h; t = Yx, v_h, h_h, g_h = W_hᵀh_h, l_h = W_ht has the first row
    γx + Σ_h K_hᵀw_h = b; its Dyson equation closes on the (2H+1)×(2H+1) matrix g of n-traces (averaged over the
    joint diagonal latent of the heads) and on the 2p×2p matrix 𝔅 of (t, s), s = Σ_h (a1_h/c)W_hᵀh_h:

    𝔅 = [[I − Σ_k (a1_k/c) ψ̃_tk W_k, φ̃_t I], [−Σ_jk (a1_j a1_k/c²) ψ̃_jk W_jᵀW_k, I + Σ_j (a1_j/c) φ̃_j W_jᵀ]]

    (φ̃, ψ̃ from g, docs/theory.md §13.2). F = ŷᵀ[L^{-1}]_xxŷ: g_xx at the fixed point, corrected for μ ≠ 0 by
    Woodbury on the 5H + 1 rank-one shifts Y → Y + μŷᵀ of the pencil (as docs/theory.md §12.3, the
    Gaussian-equivalent value: no strong-direction correction); E = −γ²F'(γ) by implicit differentiation
    (complex steps, GMRES). Numpy only.

    With ``structure='blocks'`` (the default for low-rank heads, :func:`concat_structure`) each head's nonlinear
    part is its structured Hermite blocks with token scales plus a remainder (docs/theory.md §12.8), in place of
    the free noise: per block b of head h, Σ_xx(i) −= ρv_{b,i}² φ_b ĝ_{b,wu} and Σ_{u_h w_h}(i) −= ρu_{b,i}² φ_b ĝ_{b,xx}
    (:mod:`symattn.backends.concat_blocks`), the slopes the exact-law b1_h, the diagonal latent the heads' exact
    q_h on sampled tokens. Every point passes the physical checks of a deterministic equivalent (0 < γF <= 1,
    (γF)² <= E <= γF, F decreasing and E, γF increasing in γ, E/γ² not increasing, also against one more point
    at γ/2 below γ = 0.1), with γ-continuation where the cold start fails them, or raises ConvergenceError.

    Parameters
    ----------
    f : Activation or spec
    c : float
        p/n (n = round(p/c)).
    gamma : array_like
        γ > 0.
    heads : list of (p, p) arrays
    mu : (p,) array or None
        The signal (x_i = μy_i + z_i).
    diagonal : {'f', 'zero'}
    cs : array_like, optional
        The c of every point: must all equal ``c``.
    structure : {'auto', 'blocks', 'free'}
        The kernel model of the heads (:func:`concat_structure`).
    blocks : tuple of {'33', '31', '22'}, optional
        With 'blocks': the blocks kept (default all); the others join the remainder noise.
    tokens, pairs : int, optional
        With 'blocks': the sampled tokens of the latent (default 4000) and the latent pairs of the constants.

    Returns
    -------
    numpy.ndarray
        E(γ).

    Raises
    ------
    ConvergenceError
        When a point does not converge or fails a physical check even after γ-continuation.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> heads = [rng.standard_normal((20, 20)) / np.sqrt(20) for _ in range(2)]
    >>> E = general_concat_error("tanh", 0.5, [1.0], heads)
    >>> bool(0 < E[0] < 1)
    True
    """
    if cs is not None and np.any(np.asarray(cs, dtype=float) != c):
        raise ParameterError("c", list(np.unique(cs)), "a single c for general heads")
    if diagonal not in ("f", "zero"):
        raise ParameterError("diagonal", diagonal, "'f' or 'zero'")
    f = _activation(f)
    heads = [np.asarray(W, dtype=float) for W in heads]
    structure = concat_structure(heads, structure)
    m = _ConcatModel(f, c, heads, diagonal, mu, structure=structure, blocks=blocks, tokens=tokens, pairs=pairs)
    gammas = np.atleast_1d(np.asarray(gamma, dtype=float)).reshape(-1)
    return np.array(_concat_points(m, gammas), dtype=float)


def concat_structure(heads, structure: str = "auto") -> str:
    r"""The kernel model of the concatenated heads: ``'blocks'`` (each head's Hermite blocks, docs/theory.md §13.2)
    or ``'free'`` (cross-correlated free noise). ``'auto'`` gives ``'blocks'`` when every head is what the
    single-head theory treats with blocks (rank <= 64 and <= p/4,
    :func:`symattn.backends.general_w_entry.kernel_structure`), else ``'free'``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> low = [rng.standard_normal((100, 8)) @ rng.standard_normal((8, 100)) for _ in range(2)]
    >>> concat_structure(low), concat_structure([np.eye(100), low[0]]), concat_structure(low, "free")
    ('blocks', 'free', 'free')
    """
    from .backends.general_w_entry import kernel_structure

    if structure not in ("auto", "blocks", "free"):
        raise ParameterError("structure", structure, "one of 'auto', 'blocks', 'free'")
    if structure != "auto":
        return structure
    return "blocks" if all(kernel_structure(W) == "blocks" for W in heads) else "free"


def _concat_points(m, gammas):
    """E at the points γ, each through the physical checks and γ-continuation of
    :func:`~symattn.backends.general_w.physical_points`; below γ = 0.1 a point without a requested neighbour in
    [γ/2, γ) is checked against one more point at γ/2, so that E/γ² = −F' is seen not to increase (it is
    ∫dν/(λ + γ)², decreasing in γ for any spectral measure ν): a point that fails raises ConvergenceError."""
    from scipy.sparse.linalg import LinearOperator, gmres

    from .backends.general_w import physical_points
    from .backends.general_w.physical import VERIFY_BELOW

    eta = 1e-20

    def solve(gm, start):
        gs, it, _ = _concat_solve(m, gm, start=start)
        return gs, float(np.real(_concat_F(m, gs, gm))), it

    def evaluate(gm, gs):
        shape = gs.shape

        def mv(v):
            return v - np.imag(_concat_map(m, gs + 1j * eta * v.reshape(shape), gm)).ravel() / eta
        dz = np.imag(_concat_map(m, gs.astype(complex), gm + 1j * eta)).ravel() / eta
        A = LinearOperator((gs.size, gs.size), matvec=mv, dtype=float)
        dg, info = gmres(A, dz, rtol=1e-12, atol=0.0, restart=min(gs.size, 80), maxiter=50)
        if info != 0 or not np.all(np.isfinite(dg)):
            raise ConvergenceError("the derivative of the concat block pencil did not converge",
                                   point={"gamma": float(gm)})
        Fc = _concat_F(m, gs + 1j * eta * dg.reshape(shape), gm + 1j * eta)   # F' along (dg/dγ, 1)
        E = -gm * gm * float(np.imag(Fc)) / eta
        return E, float(np.real(Fc)), E

    gammas = np.atleast_1d(np.asarray(gammas, dtype=float))
    extra = [g / 2 for g in gammas if g < VERIFY_BELOW and not np.any((gammas >= g / 2) & (gammas < g))]
    vals, _ = physical_points(np.concatenate([gammas, extra]), solve, evaluate, name="the concat block pencil")
    return vals[:gammas.size]
