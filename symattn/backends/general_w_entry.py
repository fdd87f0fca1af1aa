r"""The public entry of the general-W theory (docs/theory.md §12): which kernel model, then the numbers.

``symattn.memorization_error(f, c, gamma, weights=W, mu=mu)`` lands in :func:`general_memorization_error`.
Its nonlinear part is modelled one of two ways (:func:`kernel_structure`):

- ``'free'``: the Gaussian-equivalent kernel of §12.1 — a linear part, an elliptic free noise and the
  exact diagonal — solved by :mod:`symattn.backends.general_w` (numpy or mpmath);
- ``'blocks'``: for a low-rank W (a single head W_K^{hᵀ}W_Q^h), the Hermite parts of degree 2 and 3
  live on the symmetric square and cube of the r-dimensional range of W and are kept as structured
  random-feature blocks (§12.8, :mod:`symattn.backends.general_w.hermite`).

``'auto'`` picks ``'blocks'`` exactly when W is of low rank, rank W <= min(:data:`BLOCK_MAX_RANK`, p/4)
(for single MiniLM heads, rank 32 at p = 384, the free noise was 4–11 % off at small γ; for rank p it is
within 1 %, §12.6). An explicit ``'blocks'`` also applies to a W of higher rank, up to full rank: then every
block is enumerated and the cubic one compressed into atoms (docs/theory.md §12.9: for the full-rank MiniLM W
at c = 1–2 it is closer to Monte Carlo than 'free'; 'auto' is unchanged).
"""

from __future__ import annotations

import numpy as np

from ..caching import memoize
from ..errors import ConvergenceError, ParameterError
from ..model import check_mu, check_weights, weight_rank
from .general_w import (MAX_BLOCK_RANK, MPMATH_MAX_P, arith, general_w_error, hermite_block_constants,
                        hermite_block_error)
from .strong_direction import bulk_signal_error

__all__ = ["BLOCK_MAX_RANK", "BLOCK_MAX_FRACTION", "STRUCTURES", "kernel_structure", "general_memorization_error",
           "general_readout"]

#: the kernel models of :func:`general_memorization_error`
STRUCTURES = ("auto", "blocks", "free")
#: ``structure='auto'`` keeps the structured Hermite blocks up to this rank of W (the cubic block has
#: C(r+2, 3) weights: 47,905 at r = 64)
BLOCK_MAX_RANK = MAX_BLOCK_RANK
#: ... and up to this fraction of p (a rank-p/4 random W was within 2 % with the free noise, §12.6)
BLOCK_MAX_FRACTION = 0.25


def kernel_structure(W, structure: str = "auto", backend: str = "numpy", diagonal: str = "f",
                     signal: str = "latent") -> str:
    r"""The kernel model used for W: ``'blocks'`` (structured Hermite blocks) or ``'free'`` (elliptic noise).

    'auto' gives 'blocks' when r = rank W (:func:`symattn.model.weight_rank`) satisfies r <= :data:`BLOCK_MAX_RANK` and
    r <= p/4 (:data:`BLOCK_MAX_FRACTION`), or when W is full rank but its spectrum is concentrated, with effective
    rank r_eff = ‖W‖_F⁴/‖WᵀW‖_F² <= p/4 (a real attention layer: the full-rank Hermite blocks of docs/theory.md
    §12.9, measured closer to Monte Carlo there), the backend is
    numpy, the diagonal is f(x_iᵀWx_i/√p) and the signal rule is 'latent' or 'linear' (what the block
    solver implements), else 'free'. An explicit 'blocks' outside those raises ParameterError.

    Parameters
    ----------
    W : array_like
        p×p.
    structure : {'auto', 'blocks', 'free'}
    backend, diagonal, signal : as :func:`general_memorization_error`

    Returns
    -------
    str

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> head = rng.standard_normal((100, 8)) @ rng.standard_normal((8, 100))     # rank 8
    >>> kernel_structure(head), kernel_structure(np.eye(100)), kernel_structure(head, backend="mpmath")
    ('blocks', 'free', 'free')
    >>> ginibre = rng.standard_normal((100, 100))                                  # r_eff = p/2: free noise
    >>> kernel_structure(ginibre), kernel_structure(head + 0.05 * ginibre)          # r_eff ≈ 8: blocks
    ('free', 'blocks')
    """
    if structure not in STRUCTURES:
        raise ParameterError("structure", structure, "one of " + ", ".join(repr(s) for s in STRUCTURES))
    if structure == "free":
        return "free"
    applies = backend == "numpy" and diagonal == "f" and signal in ("latent", "linear")
    if structure == "blocks":
        if not applies:
            name, value = (("backend", backend) if backend != "numpy" else ("diagonal", diagonal)
                           if diagonal != "f" else ("signal", signal))
            raise ParameterError(name, value, {"backend": "'numpy'", "diagonal": "'f'",
                                               "signal": "'latent' or 'linear'"}[name]
                                 + " with structure='blocks' (or structure='free')")
        return "blocks"
    if not applies:
        return "free"
    W = np.asarray(W, dtype=float)
    rank, r_eff = _rank(W)
    p = W.shape[0]
    low_rank = 0 < rank <= min(BLOCK_MAX_RANK, BLOCK_MAX_FRACTION * p)
    return "blocks" if low_rank or 0 < r_eff <= BLOCK_MAX_FRACTION * p else "free"


@memoize("general_w_entry.ranks", 16)   # one SVD per W, not one per call
def _rank(W) -> tuple:
    """(rank W, effective rank ‖W‖_F⁴/‖WᵀW‖_F²), one SVD per W."""
    M = W.T @ W
    m2 = float(np.sum(M * M))
    return weight_rank(W), float(np.trace(M)) ** 2 / m2 if m2 > 0 else 0.0


def _attention(kind, f, c, gammas, W, mu, signal, diagonal, ar):
    """E_A at one c for the γ's, with the chosen kernel model."""
    if signal == "bulk":    # opt-in: the strong direction on W's own bulk (docs/theory.md §12.10)
        if np.any(mu):
            return bulk_signal_error(f, c, gammas, W, mu, diagonal=diagonal)
        signal = "linear"
    if kind == "free":
        return general_w_error(f, c, gammas, W, mu, signal=signal, diagonal=diagonal, ctx=ar)["E"]
    return hermite_block_error(f, c, gammas, W, mu, signal=signal, constants=_block_constants(f, W))["E"]


def _block_constants(f, W):
    """The Hermite-block constants of (f, W) (cached by content in ``block_constants``): above MAX_BLOCK_RANK (a
    full-rank W of small effective rank, or an explicit structure='blocks') every block is enumerated, the cubic
    one compressed into atoms (docs/theory.md §12.9)."""
    full = _rank(W)[0] > MAX_BLOCK_RANK
    return hermite_block_constants(f, W, max_rank=W.shape[0] if full else MAX_BLOCK_RANK)


def general_readout(f, c, gamma, W, mu=None, structure: str = "auto", diagonal: str = "f") -> dict:
    r"""The training theory of one W at one c with the readout's moments (docs/theory.md §14.9): the
    Gaussian-equivalent value (``signal='linear'``) of the kernel model that ``structure`` selects
    (:func:`kernel_structure`), with the mean β̄ and second moment 𝓑 ≃ E[ββᵀ] of the readout at each γ
    (:mod:`symattn.backends.general_w.response`).

    Returns
    -------
    dict
        'E', 'F', 'moments' (:class:`~symattn.backends.general_w.response.ReadoutMoments` per γ), 'model'
        (the :class:`~symattn.backends.general_w.GeneralWModel` of the pencil), 'structure', 'blocks' (the
        structured blocks [(squared weights, ρu², ρv²), …]; none for the free noise) and 'nodes' (the diagonal's
        latent nodes {'kappa', 'w'}).

    Examples
    --------
    >>> import numpy as np
    >>> from symattn import activation
    >>> out = general_readout(activation("tanh"), 0.5, [1.0], np.eye(20))
    >>> out["structure"], len(out["moments"]), out["blocks"]
    ('free', 1, [])
    """
    from .general_w.response import general_w_readout, hermite_block_readout

    W = check_weights(W)
    mu = check_mu(mu, W.shape[0])
    kind = kernel_structure(W, structure, diagonal=diagonal, signal="linear")
    if kind == "free":
        out = general_w_readout(f, c, gamma, W, mu, diagonal=diagonal)
        m = out["model"]
        return dict(out, structure=kind, blocks=[], nodes={"kappa": m.kappa, "w": m.kw})
    return dict(hermite_block_readout(f, c, gamma, W, mu, constants=_block_constants(f, W)), structure=kind)


def general_memorization_error(f, c, gamma, weights, mu=None, model: str = "attention", backend: str = "numpy",
                               n: int | None = None, diagonal: str = "f", errors: str = "raise",
                               signal: str = "latent", dps: int | None = None, structure: str = "auto"):
    r"""The public entry of the general-W theory: ``symattn.memorization_error(f, c, gamma, weights=W, mu=mu)``.

    The kernel is exactly K = f(XᵀWX/√p)/√p with the given W (no rescaling), X = μyᵀ + Z,
    p = W.shape[0] and n = round(p/c) (docs/theory.md §12). E_LR (``model='linear'``) does not
    depend on W: it is the closed form of docs/theory.md §3 at ‖μ‖².

    Parameters
    ----------
    f : activation spec
    c : float or array_like
        p/n (broadcast against ``gamma``).
    gamma : float or array_like
        γ > 0.
    weights : array_like
        W, p×p.
    mu : array_like, optional
        μ of length p (default 0).
    model : {'attention', 'linear', 'both'}
    backend : {'numpy', 'mpmath'}
        float64, or mpmath at ``dps`` digits (p <= :data:`MPMATH_MAX_P`; the same formulas written
        once against the arithmetic context; at 30 digits about 10 s per γ at p = 30 and 50 s at p = 60, and
        with signal='latent' and μ ≠ 0 the finite-p correction at dps digits takes far longer).
    n : int, optional
        Must equal round(p/c) when given.
    diagonal : {'f', 'zero'}
    errors : {'raise', 'nan'}
    signal : {'latent', 'linear', 'conditional', 'bulk'}
        The signal rule (module docstring); 'latent', the default, adds the strong-direction
        correction of docs/theory.md §12.3 when μ ≠ 0; 'bulk' (opt-in, numpy, free structure) replaces the
        Gaussian-equivalent value and that correction, when μ ≠ 0, by the conditional kernel on W's own bulk
        (§12.10, :func:`symattn.backends.strong_direction.bulk_signal_error`; 'linear' at μ = 0).
    dps : int, optional
        Digits of the mpmath backend (default 30).
    structure : {'auto', 'blocks', 'free'}
        The model of the kernel's nonlinear part (:func:`kernel_structure`): 'free', the elliptic
        noise of docs/theory.md §12.1; 'blocks', the structured Hermite blocks of §12.8
        (:func:`symattn.backends.general_w.hermite.hermite_block_error`; numpy, diagonal 'f', signal
        'latent' or 'linear'); 'auto' (default), 'blocks' when rank W <= :data:`BLOCK_MAX_RANK` and
        the blocks apply, else 'free'.

    Returns
    -------
    numpy.ndarray or dict
        As :func:`symattn.memorization_error` (float64, or mpmath numbers in object arrays).

    Examples
    --------
    >>> import numpy as np
    >>> E = general_memorization_error("tanh", 0.5, [0.1, 1.0], np.eye(30))
    >>> E.shape, bool(np.all((E > 0) & (E < 1)))
    ((2,), True)
    """
    import warnings

    from ..activations.activation import activation as _activation
    from ..errors import FailedPointsWarning
    from ..model import check_c, check_gamma

    from .context import context

    if backend not in ("numpy", "mpmath"):
        raise ParameterError("backend", backend, "'numpy' or 'mpmath'")
    if model not in ("attention", "linear", "both"):
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    if errors not in ("raise", "nan"):
        raise ParameterError("errors", errors, "'raise' or 'nan'")
    W = check_weights(weights)
    p = W.shape[0]
    mu = check_mu(mu, p)
    if backend == "mpmath" and p > MPMATH_MAX_P:
        raise ParameterError("backend", backend, f"'numpy' for p > {MPMATH_MAX_P} (here p = {p}): the mpmath "
                             "arithmetic costs O(p³) Python operations per Dyson evaluation")
    if signal == "bulk" and backend != "numpy":
        raise ParameterError("backend", backend, "'numpy' with signal='bulk' (the bulk pencil is float64 only)")
    ctx = context(backend, dps)
    ar = arith(ctx)
    kind = kernel_structure(W, structure, backend=backend, diagonal=diagonal, signal=signal)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1).astype(float) for v in (c_arr, g_arr))
    for ci in np.unique(cb):
        nn = int(round(p / ci))
        if nn < 2:
            raise ParameterError("c", float(ci), f"a ratio with n = round(p/c) >= 2 (p = {p})")
        if n is not None and int(n) != nn:
            raise ParameterError("n", n, f"None or round(p/c) = {nn} (p = {p} is fixed by the weights)")
    out = {}
    if model in ("attention", "both"):
        fa = _activation(f)
        E = ar.convert(np.full(cb.shape, np.nan))
        failed = []
        for ci in np.unique(cb):
            idx = np.nonzero(cb == ci)[0]
            try:
                E[idx] = _attention(kind, fa, ci, gb[idx], W, mu, signal, diagonal, ar)
            except ConvergenceError as err:
                if errors == "raise" or len(idx) == 1:
                    if errors == "raise":
                        raise
                    failed.append((float(ci), float(gb[idx[0]]), err.reason))
                    continue
                for j in idx:
                    try:
                        E[j] = _attention(kind, fa, ci, [gb[j]], W, mu, signal, diagonal, ar)[0]
                    except ConvergenceError as err2:
                        failed.append((float(ci), float(gb[j]), err2.reason))
        Ef = np.asarray(E, dtype=float)
        bad = ~np.isfinite(Ef) | (Ef < -1e-12) | (Ef > 1 + 1e-12)
        for j in np.nonzero(bad & np.isfinite(Ef))[0]:
            failed.append((float(cb[j]), float(gb[j]), f"impossible value E={Ef[j]!r} (outside [0, 1])"))
            E[j] = ar.convert(np.nan)
        if failed and errors == "raise":
            ci, gi, reason = failed[0]
            raise ConvergenceError(reason, point={"c": ci, "gamma": gi, "model": "attention"})
        if failed:
            warnings.warn(FailedPointsWarning(f"{len(failed)} point(s) failed and are NaN: " + "; ".join(
                f"c={a:g}, gamma={b:g}: {r}" for a, b, r in failed[:10]), failed), stacklevel=3)
        clip = np.frompyfunc(lambda x: min(max(x, 0), 1), 1, 1)   # NaN stays NaN
        out["attention"] = ar.convert(clip(np.asarray(E, dtype=object))).reshape(shape)
    if model in ("linear", "both"):
        from ..backends.solver import linear_error

        with ctx:
            El = linear_error(ctx, cb, gb, ctx.convert(mu) @ ctx.convert(mu))
        out["linear"] = ar.convert(El).reshape(shape)
    return out if model == "both" else out[model]
