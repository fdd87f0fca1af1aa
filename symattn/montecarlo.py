r"""Exact finite-n Monte Carlo of the memorisation error (docs/theory.md §1–§2).

One draw of the model:

- tokens :math:`x_i = y_i\mu + z_i \in \mathbb R^p`, :math:`i = 1..n`, with balanced labels
  :math:`y \in \{\pm1\}^n` (shuffled) and :math:`z_i \sim \mathcal N(0, I_p)`, i.e.
  :math:`X = \mu y^\top + Z` (p×n), p = round(c·n);
- weights :math:`W = I_p + \sum_k w_K^{(k)} w_Q^{(k)\top}` (or any p×p matrix);
- kernel :math:`K = f(X^\top W X/\sqrt p)/\sqrt p`, f (centred) applied entrywise, on the
  diagonal too (``diagonal='f'``) or with the diagonal set to 0 (``diagonal='zero'``);
- features :math:`\Phi = X K` (p×n), so :math:`M = \Phi^\top\Phi/n = K^\top X^\top X K/n` (n×n);
- with :math:`M = \sum_k \lambda_k v_k v_k^\top` (one ``eigh`` per draw), the ridge training
  error for every γ at once is

  .. math::  E_A(\gamma) = \gamma^2\,\hat y^\top (M + \gamma I)^{-2}\hat y
             = \frac{\gamma^2}{n}\sum_k \frac{(v_k^\top y)^2}{(\lambda_k + \gamma)^2},
             \qquad \hat y = y/\sqrt n .

- :math:`E_{LR}` is the same formula with :math:`M = X^\top X/n`.
- The optional trace estimator :math:`(\gamma^2/n)\,\mathrm{tr}(M+\gamma)^{-2}
  = (\gamma^2/n)\sum_k (\lambda_k+\gamma)^{-2}` has the same limit when y is
  asymptotically free of M (μ = 0) and a much smaller variance.

Randomness. ``numpy.random.SeedSequence(seed).spawn(draws)`` gives one child per draw and
draw k uses ``numpy.random.default_rng(child_k)`` through :func:`sample_tokens`, so draw k is
the same whatever the number of draws. The torch backend generates the tokens exactly the
same way on the CPU and moves them to the device: for a given seed the numpy and torch
backends see identical draws and agree to rounding.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import numpy as np

from .errors import ConvergenceError, ParameterError, SymattnError
from .model import (MODELS, as_geometry, check_c, check_diagonal, check_dimension, check_error, check_gamma,
                    check_heads, check_int, check_mu, check_variant_flags)

BACKENDS = ("numpy", "torch")
DTYPES = ("float64", "float32")
METHODS = ("auto", "eigh", "tridiagonal")

__all__ = [
    "exact_monte_carlo",
    "SimulationResult",
    "kernel_matrix",
    "sample_tokens",
    "draw_errors",
    "spectral_errors",
    "draw_generators",
    "draw_seed",
    "combine_draws",
    "METHODS",
    "Variant",
    "check_variant",
]


# ----------------------------------------------------------------------------- activation adapter
class _CallableActivation:
    """A plain callable used as the kernel function exactly as given (no centring)."""

    superlinear = False

    def __init__(self, fn):
        self._fn = fn
        self.name = getattr(fn, "__name__", repr(fn))

    def numpy(self, t):
        return np.asarray(self._fn(t), dtype=t.dtype)

    def torch(self, t):
        out = self._fn(t)
        import torch

        if isinstance(out, torch.Tensor):
            return out
        return torch.as_tensor(np.asarray(out), dtype=t.dtype, device=t.device)


def _resolve_activation(f):
    """An object with ``.numpy`` (an :class:`~symattn.activations.Activation` or duck-typed),
    a catalog name / SymPy string (resolved by :func:`symattn.activations.activation`), or a
    plain callable (applied as given; pass ``sa.activation(fn)`` to have it centred)."""
    if hasattr(f, "numpy") and callable(getattr(f, "numpy")):
        return f
    if isinstance(f, str):
        from .activations.activation import activation

        return activation(f)
    try:
        import sympy

        if isinstance(f, sympy.Basic):
            from .activations.activation import activation

            return activation(f)
    except ImportError:  # pragma: no cover - sympy is a hard dependency
        pass
    if callable(f):
        return _CallableActivation(f)
    raise ParameterError("f", f, "an Activation, a catalog name or SymPy string in x, or a callable")


def _act_name(act) -> str:
    return str(getattr(act, "name", type(act).__name__))


def _check_superlinear(act, diagonal: str) -> None:
    if diagonal == "f" and bool(getattr(act, "superlinear", False)):
        raise ParameterError(
            "diagonal", diagonal, "'zero' for a superlinear activation",
            hint=f"{_act_name(act)} grows faster than linearly, so its diagonal f(‖x‖²/√p)/√p diverges "
                 "with p: pass diagonal='zero' (CLI: --diagonal zero)",
        )


# ----------------------------------------------------------------------------- array backends
class _NumpyOps:
    backend = "numpy"
    device = "cpu"
    batched = False  # draws one at a time (torch stacks a batch of draws)

    def __init__(self, dtype: str = "float64"):
        self.dtype = np.dtype(dtype)
        self.dtype_name = str(dtype)

    def asarray(self, a):
        return np.asarray(a, dtype=self.dtype)

    def copy(self, a):
        return a.copy()

    def eye(self, n, like):
        return np.eye(n)

    def apply(self, act, t):
        return act.numpy(t)

    def zero_diagonal(self, K):
        np.fill_diagonal(K, 0.0)
        return K

    def softmax_rows(self, A, exclude_diagonal):
        """Row softmax of A in place (the diagonal excluded: K_ii = 0, rows over l != i)."""
        if exclude_diagonal:
            np.fill_diagonal(A, -np.inf)
        A -= A.max(axis=1, keepdims=True)
        np.exp(A, out=A)
        A /= A.sum(axis=1, keepdims=True)
        return A

    def all_finite(self, a) -> bool:
        return bool(np.isfinite(a).all())

    def lam_max_lower(self, M) -> float:
        return _lam_max_lower(M, np.ones(M.shape[0], dtype=M.dtype))

    def qr(self, A):
        return np.linalg.qr(A)  # reduced: Q (n×p), R (p×p)

    def to_numpy(self, a):
        return np.asarray(a, dtype=np.float64)

    def eigh(self, M):
        return np.linalg.eigh(M)

    def vstack(self, arrays):
        return np.vstack(arrays)

    def spectral(self, M, y, gamma, trace, method):
        """(E, T, λ_min, λ_max) of M: the errors for every γ and the extreme eigenvalues."""
        if method == "eigh":
            lam, V = np.linalg.eigh(M)  # reads the lower triangle only
            return (*spectral_errors(lam, V.T @ y, gamma, y.size), float(lam[0]), float(lam[-1]))
        return _tridiagonal_errors(M, y, gamma)


class _TorchOps:
    backend = "torch"
    batched = True

    def __init__(self, device, dtype: str = "float64"):
        import torch

        self.torch = torch
        self.device = device
        self.dtype = getattr(torch, dtype)
        self.dtype_name = str(dtype)

    def asarray(self, a):
        a = np.ascontiguousarray(a)
        if not a.flags.writeable:   # a layer's read-only weights: torch wants a writable buffer
            a = a.copy()
        return self.torch.as_tensor(a).to(device=self.device, dtype=self.dtype)

    def copy(self, a):
        return a.clone()

    def eye(self, n, like):
        return self.torch.eye(n, dtype=like.dtype, device=like.device)

    def apply(self, act, t):
        if hasattr(act, "torch") and callable(getattr(act, "torch")):
            return act.torch(t)
        # numpy-only activation: round-trip through the host (slow on CUDA, but correct)
        return self.asarray(act.numpy(t.detach().cpu().numpy()))

    def zero_diagonal(self, K):
        K.diagonal(dim1=-2, dim2=-1).zero_()  # one matrix or a batch of them
        return K

    def softmax_rows(self, A, exclude_diagonal):
        if exclude_diagonal:
            A.fill_diagonal_(-float("inf"))
        return self.torch.softmax(A, dim=1)

    def all_finite(self, a) -> bool:
        return bool(self.torch.isfinite(a).all().item())

    def lam_max_lower(self, M) -> float:
        return _lam_max_lower(M, self.torch.ones(M.shape[0], dtype=M.dtype, device=M.device))

    def qr(self, A):
        return self.torch.linalg.qr(A)  # reduced: Q (n×p), R (p×p)

    def eigh(self, M):
        return self.torch.linalg.eigh(M)

    def vstack(self, arrays):
        return self.torch.cat(list(arrays), dim=0)

    def spectral(self, M, y, gamma, trace, method):
        lam, V = self.torch.linalg.eigh(M)  # reads the lower triangle only
        proj = V.T @ self.asarray(y)
        del V
        lam = self.to_numpy(lam)
        return (*spectral_errors(lam, self.to_numpy(proj), gamma, y.size), float(lam[0]), float(lam[-1]))

    def to_numpy(self, a):
        return a.detach().to("cpu", dtype=self.torch.float64).numpy()


def _lam_max_lower(M, v, iters: int = 12) -> float:
    """A lower bound of λ_max of a PSD M (numpy or torch): its largest diagonal entry, or the Rayleigh
    quotient of ``iters`` power iterations from ``v`` (O(n²) each, against O(n³) for ``eigh``)."""
    best = float(M.diagonal().max())
    for _ in range(iters):
        w = M @ v
        ww = float(w @ w)
        if not (ww > 0 and math.isfinite(ww)):
            break
        best = max(best, float(v @ w) / float(v @ v))
        v = w / math.sqrt(ww)
    return best


def _make_ops(backend, device, dtype):
    if backend not in BACKENDS:
        raise ParameterError("backend", backend, "one of " + ", ".join(repr(b) for b in BACKENDS))
    if dtype not in DTYPES:
        raise ParameterError("dtype", dtype, "one of " + ", ".join(repr(d) for d in DTYPES))
    if backend == "numpy":
        if device is not None and str(device) != "cpu":
            raise ParameterError("device", device, "None or 'cpu' with backend='numpy'",
                                 hint="use backend='torch' for a GPU")
        return _NumpyOps(dtype)
    try:
        import torch
    except ImportError:
        raise ParameterError("backend", backend, "'numpy' (torch is not installed)",
                             hint="install the GPU extra: pip install 'symattn[gpu]'") from None
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError("device", device, "'cpu', 'cuda' or 'cuda:N'") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ParameterError("device", device, "'cpu' (CUDA is not available on this machine)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ParameterError("device", device, f"a CUDA index < {torch.cuda.device_count()}")
    elif dev.type != "cpu":
        raise ParameterError("device", device, "'cpu', 'cuda' or 'cuda:N'")
    return _TorchOps(dev, dtype)


# ----------------------------------------------------------------------------- public helpers
def draw_generators(seed, draws: int) -> list:
    """The per-draw generators: ``default_rng(SeedSequence(seed).spawn(draws)[k])``, k < draws.

    Draw k's generator does not depend on ``draws``.
    """
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    return [np.random.default_rng(child) for child in ss.spawn(draws)]


def sample_tokens(n: int, p: int, mu=None, rng=None, tokens=None, chol=None):
    r"""One draw of the tokens: returns ``(X, y)`` with :math:`X = \mu y^\top + Z` (p×n).

    - y: ``rng.permutation`` of n − ⌊n/2⌋ entries +1 and ⌊n/2⌋ entries −1 (balanced; one
      extra +1 when n is odd), drawn first;
    - Z: ``rng.standard_normal((p, n))``, i.e. :math:`z_i \sim \mathcal N(0, I_p)`, drawn second;
    - mu: a vector of shape (p,), or None for μ = 0;
    - tokens: a :class:`~symattn.tokens.TokenLaw` (docs/theory.md §15): y from its label law and
      Z = G Lᵀ, G the draw above and L the Cholesky factor of T (``chol``, when the caller keeps it).
      T = I with iid labels draws exactly the numbers above.

    Examples
    --------
    >>> from symattn.tokens import TokenLaw
    >>> X0, y0 = sample_tokens(6, 3, rng=1)
    >>> X1, y1 = sample_tokens(6, 3, rng=1, tokens=TokenLaw(ar1=0.0))
    >>> bool((X0 == X1).all() and (y0 == y1).all())
    True
    """
    rng = np.random.default_rng(rng)
    if tokens is None:
        y = np.ones(n)
        y[: n // 2] = -1.0
        y = rng.permutation(y)
        X = rng.standard_normal((p, n))
    else:
        y = tokens.labels(n, rng)
        X = tokens.noise(p, n, rng, chol)
    if mu is not None:
        mu = np.asarray(mu, dtype=float)
        if mu.shape != (p,):
            raise ParameterError("mu", mu.shape, f"a vector of shape (p,) = ({p},)")
        if np.any(mu):
            X += np.outer(mu, y)
    return X, y


def kernel_matrix(f, X, W=None, diagonal: str = "f"):
    r"""The attention kernel :math:`K = f(X^\top W X/\sqrt p)/\sqrt p` (n×n), f entrywise.

    ``X`` is p×n (numpy array); ``W`` is a p×p matrix, or None for :math:`W = I_p`;
    ``diagonal='f'`` keeps :math:`K_{ii} = f(x_i^\top W x_i/\sqrt p)/\sqrt p`, ``'zero'`` sets it to 0.
    f is an Activation (its centred ``.numpy`` is used), a catalog name, or a callable (as given).
    """
    act = _resolve_activation(f)
    check_diagonal(diagonal)
    _check_superlinear(act, diagonal)
    X = np.asarray(X, dtype=float)
    p = X.shape[0]
    if W is None:
        A = X.T @ X
    else:
        W = _check_W(W, p)
        A = X.T @ (W @ X)
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite entries are refused by _kernel
        return _kernel(_NumpyOps(), act, A, p, diagonal)


def spectral_errors(lam, proj, gamma, n: int):
    r"""E(γ) = (γ²/n) Σ_k (v_kᵀy)²/(λ_k+γ)² and the trace version (γ²/n) Σ_k 1/(λ_k+γ)².

    ``lam`` are the eigenvalues λ_k (negative rounding errors are clipped to 0), ``proj`` the
    projections v_kᵀy, ``gamma`` a 1-d array. Returns two arrays shaped like ``gamma``.
    """
    lam = np.clip(np.asarray(lam, dtype=float), 0.0, None)
    w = np.asarray(proj, dtype=float) ** 2 / n
    g = np.asarray(gamma, dtype=float)[:, None]
    r = (g / (lam[None, :] + g)) ** 2
    return r @ w, r.sum(axis=1) / n


def draw_errors(f, X, y, gamma, W=None, diagonal: str = "f", models=MODELS, trace_estimator: bool = False,
                method: str = "auto", residual: bool = False, heads=None, readout: str = "concat",
                kernel: str = "entrywise", temperature=None):
    """E_A and/or E_LR of one given draw (X, y) for every γ (numpy, float64).

    Returns a dict with keys among ``attention``, ``linear`` (and ``attention_trace``,
    ``linear_trace`` when ``trace_estimator``), each an array shaped like ``gamma``.
    See the module docstring for the formulas; ``residual``, ``heads``, ``readout``, ``kernel``
    and ``temperature`` select the variant as in :func:`simulate` (docs/theory.md §13).
    """
    if f is None and kernel == "softmax":
        act = _CallableActivation(np.exp)
    else:
        act = _resolve_activation(f)
    check_diagonal(diagonal)
    if kernel != "softmax":
        _check_superlinear(act, diagonal)
    models = _check_models(models)
    gamma = np.atleast_1d(check_gamma(gamma)).ravel()
    X = np.asarray(X, dtype=float)
    p = X.shape[0]
    if W is not None:
        W = _check_W(W, p, "W")
    method = _check_method(method, "numpy")
    variant = check_variant(p, residual, heads, readout, kernel, temperature)
    if variant.heads is not None and W is not None:
        raise ParameterError("W", "a matrix", "None when heads= is given", hint="give either W= or heads=")
    return _draw(_NumpyOps(), act, X, np.asarray(y, dtype=float), gamma, None, None, W,
                 diagonal, models, trace_estimator, method, variant)


# ----------------------------------------------------------------------------- resolution and resources
#: Relative rounding error of E(γ) that one draw may carry, per dtype: smaller γ are refused
#: (:func:`smallest_resolvable_gamma`). Far below the statistical error of any practical run.
RESOLUTION_TOL = {"float64": 1e-6, "float32": 1e-3}

#: Environment variable that overrides the memory available to the Monte Carlo (bytes, or with a
#: K/M/G/T suffix), e.g. ``SYMATTN_MEMORY_LIMIT=8G``; used instead of /proc/meminfo and cgroups.
MEMORY_ENV = "SYMATTN_MEMORY_LIMIT"


def rounding_level(n: int, lam_max: float, dtype: str = "float64") -> float:
    r"""δ = eps·n^{1/4}·λ_max: how well one draw knows the eigenvalues of its n×n matrix M.

    Forming M (a Gram product) and decomposing it (``eigh`` or the tridiagonal route) are backward
    stable: the computed spectrum is that of M + ΔM with ‖ΔM‖ = O(eps)·‖M‖. Measured on
    M = XᵀX/n and ΦᵀΦ/n (tanh), n = 100–1600, float64 and float32: the eigenvalues that are 0
    exactly (rank M = p < n) come out at most 2.3·eps·λ_max, growing like n^{0.15}; the factor
    n^{1/4} (3.2 at n = 100, 6.3 at n = 1600) bounds them with a margin of about 3.

    Parameters
    ----------
    n : int
        Size of M (tokens).
    lam_max : float
        Its largest eigenvalue (‖M‖).
    dtype : {'float64', 'float32'}
        The precision M was formed in.

    Returns
    -------
    float
        δ.

    Examples
    --------
    >>> rounding_level(16, 1.0) == 2 * 2.0**-52
    True
    """
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return eps * float(n) ** 0.25 * float(lam_max)


def smallest_resolvable_gamma(n: int, lam_max: float, lam_min: float = 0.0, dtype: str = "float64") -> float:
    r"""The smallest γ at which one draw's E(γ) has a relative rounding error <= :data:`RESOLUTION_TOL`.

    With the computed spectrum exact for M + ΔM, ‖ΔM‖ <= δ (:func:`rounding_level`), and
    A = M + γI >= (λ_min + γ) I, the derivative of E(γ) = γ² ŷᵀA^{-2}ŷ along ΔM is
    −2γ² (A^{-1}ŷ)ᵀΔM(A^{-2}ŷ), of size <= 2δ‖A^{-1}‖·E, so (to first order)

    .. math::  |\Delta E|/E \le 2\delta/(\lambda_{\min} + \gamma),

    the same for the trace estimator. When p < n, λ_min = 0 exactly (rank M <= p): the n − p
    rounding-noise eigenvalues of size ~eps·λ_max weigh (γ/(λ+γ))² instead of 1, and E drops
    from ≈ 1 − c to 0 as γ falls below them (docs/theory.md §2, §7.3). The result is

    .. math::  \gamma_{\min} = \max\bigl(2\delta/\mathrm{tol} - \max(\lambda_{\min} - \delta, 0),\;
               \sqrt{\mathrm{tiny}}\,\lambda_{\max}\bigr),

    the second term keeping (γ/(λ+γ))² above the float64 underflow.

    Parameters
    ----------
    n : int
        Size of M.
    lam_max, lam_min : float
        Its largest and smallest eigenvalue (λ_min = 0 for a rank-deficient M).
    dtype : {'float64', 'float32'}
        The precision of the draw.

    Returns
    -------
    float
        γ_min.

    Examples
    --------
    >>> f"{smallest_resolvable_gamma(400, 2.9):.2g}"     # E_LR at n = 400, c = 0.5 (λ_max ≈ 2.9)
    '5.8e-09'
    >>> smallest_resolvable_gamma(400, 2.9, lam_min=0.1) < 1e-150     # M well conditioned (c > 1)
    True
    """
    delta = rounding_level(n, lam_max, dtype)
    g = 2.0 * delta / RESOLUTION_TOL[str(dtype)] - max(float(lam_min) - delta, 0.0)
    return max(g, math.sqrt(float(np.finfo(np.float64).tiny)) * float(lam_max))


def draw_memory(n: int, p: int, dtype: str = "float64", backend: str = "numpy", device=None, models=MODELS,
                W: bool = False, mu: bool = False, gammas: int = 1, trace_estimator: bool = False,
                method: str = "auto") -> dict:
    r"""Bytes one Monte Carlo draw allocates at its peak: ``{"host": bytes, "device": bytes}``.

    With b the itemsize of the n×n work (8 with numpy, whose activations compute in float64
    whatever ``dtype``; the itemsize of ``dtype`` with torch), following :func:`_draw`:

    - the tokens X (p×n, float64, sampled on the CPU) and, with a signal μ, the outer product μyᵀ
      added to them while sampling: 8pn (+8pn);
    - X in ``dtype`` on the compute device (a copy unless numpy float64); XᵀWX with an explicit W:
      one p×n product more, and W itself (p×p);
    - Φ = XK (p×n) when p <= 4n/3 (else M = Kᵀ(GK)/n);
    - k·b·n² for the n×n matrices alive at once (XᵀX, K, the attention and linear M, and the copy,
      eigenvectors and work space of ``eigh``): k = 8 with ``eigh`` (numpy's ``method='eigh'``, and
      torch), k = 5 with numpy's tridiagonal route (the default);
    - the γ-by-eigenvalue table: 16·n·len(γ) per estimator.

    Measured peak RSS over the baseline (numpy, one draw, two γ; estimate in brackets): n = 2000,
    c = 0.5: 250 MiB with ``eigh`` (275), 159 MiB tridiagonal (183); n = 2000, c = 2, μ ≠ 0:
    282 MiB (305); n = 3000, c = 1: 568 MiB (687); n = 500, c = 20, μ ≠ 0: 76 MiB (76).

    Parameters
    ----------
    n, p : int
        Tokens and dimension.
    dtype, backend, device, method : str
        As for :func:`simulate`; ``device`` a CUDA device puts the work in ``"device"``.
    models : tuple of str
        The simulated models.
    W, mu : bool
        Whether an explicit W (p×p) is given, whether μ ≠ 0.
    gammas : int
        Number of γ.
    trace_estimator : bool
        Whether the trace estimator is recorded as well.

    Returns
    -------
    dict
        ``{"host": int, "device": int}`` (Python ints: no overflow at any n).

    Examples
    --------
    >>> m = draw_memory(1000, 500)
    >>> m["host"] == 8 * 500 * 1000 + 8 * (5 * 1000**2 + 500 * 1000) + 16 * 1000, m["device"]
    (True, 0)
    """
    n, p, gammas = int(n), int(p), int(gammas)
    b_in = int(np.dtype(dtype).itemsize)
    b = 8 if backend == "numpy" else b_in
    k = 5 if backend == "numpy" and method != "eigh" else 8
    attention = "attention" in models
    sampling = 8 * p * n * (2 if mu else 1)
    work = 0 if (backend == "numpy" and b_in == 8) else b_in * p * n
    work += b * (k * n * n + (p * n if attention and 3 * p <= 4 * n else 0))
    if W and attention:
        work += b * (p * p + p * n)
    work += 16 * n * gammas * (2 if trace_estimator else 1)
    if backend == "torch" and device is not None and str(device).startswith("cuda"):
        return {"host": sampling + 16 * n * gammas, "device": work}
    return {"host": max(sampling, 8 * p * n + work), "device": 0}


def _parse_bytes(text: str) -> int:
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}.get(t[-1:], 1)
    if scale != 1:
        t = t[:-1]
    value = float(t)
    if not math.isfinite(value) or value < 0:
        raise ValueError(text)
    return int(value * scale)


def available_memory(device=None) -> int | None:
    """Bytes available for a new allocation (None when unknown).

    The host: ``$SYMATTN_MEMORY_LIMIT`` (:data:`MEMORY_ENV`) when set; else the smallest of
    ``MemAvailable`` in /proc/meminfo, the cgroup limit minus its usage (v2 ``memory.max``,
    v1 ``memory.limit_in_bytes``) and, without /proc, ``os.sysconf`` free pages. A CUDA
    ``device``: ``torch.cuda.mem_get_info`` (free bytes).

    Examples
    --------
    >>> avail = available_memory()
    >>> avail is None or avail > 0
    True
    """
    import os

    if device is not None and str(device).startswith("cuda"):
        try:
            import torch

            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except Exception:  # pragma: no cover - no CUDA runtime
            return None
    env = os.environ.get(MEMORY_ENV)
    if env:
        try:
            return _parse_bytes(env)
        except ValueError:
            raise ParameterError(MEMORY_ENV, env, "a number of bytes, optionally with a K/M/G/T suffix") from None
    found = []
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except OSError:
        pass
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit) as fh:
                lim = fh.read().strip()
            with open(usage) as fh:
                used = int(fh.read().strip())
        except (OSError, ValueError):
            continue
        if lim.isdigit() and int(lim) < 2**60:
            found.append(max(int(lim) - used, 0))
        break
    if not found:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            return None
    return min(found)


def _gib(b: int) -> str:
    return f"{b / 2**30:.3g} GiB"


def check_memory(n: int, p: int, name: str = "n", value=None, **kwargs) -> dict:
    """Refuse a Monte Carlo draw that does not fit in memory, before anything is allocated.

    Compares :func:`draw_memory` (keywords ``dtype, backend, device, models, W, mu, gammas,
    trace_estimator``) with :func:`available_memory` of the host and, for CUDA, the device.

    Parameters
    ----------
    n, p : int
        Tokens and dimension of the draw.
    name, value : str, object
        The parameter blamed in the error (``"n"``, or ``"c"`` when p makes the draw large).

    Returns
    -------
    dict
        The estimate of :func:`draw_memory`.

    Raises
    ------
    ParameterError
        Naming n, p, the bytes needed and the bytes available.

    Examples
    --------
    >>> check_memory(100, 50)["host"] > 0
    True
    >>> check_memory(10**9, 5 * 10**8)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid n=1000000000: allowed a Monte Carlo draw that fits in memory...
    """
    need = draw_memory(n, p, **kwargs)
    where = (("host", None), ("device", kwargs.get("device")))
    for kind, dev in where:
        if need[kind] <= 0:
            continue
        avail = available_memory(dev if kind == "device" else None)
        if avail is not None and need[kind] > avail:
            what = "memory" if kind == "host" else f"memory of {dev}"
            raise ParameterError(
                name, n if value is None else value, "a Monte Carlo draw that fits in memory",
                hint=f"one draw at n={n}, p={p} ({kwargs.get('dtype', 'float64')}) needs about {need[kind]} bytes "
                     f"({_gib(need[kind])}) of {what}, {avail} bytes ({_gib(avail)}) are available"
                     + (f" (override with {MEMORY_ENV})" if kind == "host" else ""))
    return need


# ----------------------------------------------------------------------------- one draw
def _check_W(W, p: int, name: str = "weights") -> np.ndarray:
    try:
        W = np.asarray(W, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(name, W, f"a real {p}x{p} matrix") from None
    if W.shape != (p, p):
        raise ParameterError(name, W.shape, f"shape (p, p) = ({p}, {p}) with p = round(c*n)")
    if not np.all(np.isfinite(W)):
        raise ParameterError(name, "matrix with NaN/inf", "finite entries")
    return W


def _check_method(method, backend) -> str:
    allowed = METHODS if backend == "numpy" else ("auto", "eigh")
    if method not in allowed:
        raise ParameterError("method", method, "one of " + ", ".join(repr(m) for m in allowed)
                             + f" with backend={backend!r}")
    return method


def _check_models(models) -> tuple:
    if isinstance(models, str):
        models = (models,)
    models = tuple(models)
    if not models or any(m not in MODELS for m in models):
        raise ParameterError("models", models, "a non-empty subset of ('attention', 'linear')")
    return tuple(m for m in MODELS if m in models)


@dataclass(frozen=True)
class Variant:
    r"""The attention layer's variant (docs/theory.md §13): residual, heads, readout, kernel.

    - ``residual``: Φ = X(I + K) instead of XK;
    - ``heads``: a tuple of p×p matrices W_1..W_H (None: the single head of W / geometry);
      ``readout='concat'``: Φ = [XK_1; …; XK_H] (Hp×n), so ΦᵀΦ = Σ_h K_hᵀXᵀXK_h;
      ``readout='sum'``: Φ = X Σ_h K_h;
    - ``kernel='softmax'``: K_ij = exp(a_ij/τ)/Σ_l exp(a_il/τ), a = XᵀWX/√p, τ = ``temperature``,
      the sum over l ≠ i (K_ii = 0) with ``diagonal='zero'``; no 1/√p (rows sum to one).
    """

    residual: bool = False
    heads: tuple | None = None
    readout: str = "concat"
    kernel: str = "entrywise"
    temperature: float = 1.0

    @property
    def is_default(self) -> bool:
        return not self.residual and self.heads is None and self.kernel == "entrywise"

    def as_dict(self) -> dict:
        from .provenance import array_digest

        return {"residual": bool(self.residual), "readout": self.readout, "kernel": self.kernel,
                "temperature": float(self.temperature),
                "heads": None if self.heads is None else [array_digest(W) for W in self.heads]}


def check_variant(p: int, residual=False, heads=None, readout="concat", kernel="entrywise",
                  temperature=None) -> Variant:
    """Validate the variant parameters of :func:`simulate` (ParameterError naming the bad one).

    Parameters
    ----------
    p : int
        The dimension (each head is p×p).
    residual, heads, readout, kernel, temperature
        As for :func:`simulate`.

    Returns
    -------
    Variant

    Examples
    --------
    >>> check_variant(3, residual=True).residual
    True
    >>> check_variant(3, kernel="softmax", temperature=0)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid temperature=0...
    """
    residual, readout, kernel, temperature = check_variant_flags(residual, readout, kernel, temperature)
    if temperature is None:
        temperature = 1.0
    if heads is not None:
        hs = check_heads(heads)
        if hs[0].shape != (p, p):
            raise ParameterError("heads", f"heads of shape {hs[0].shape}", f"{p}x{p} matrices (p = round(c*n))")
        heads = hs
        if residual and readout == "concat" and len(hs) > 1:
            raise ParameterError("readout", readout, "'sum' with residual=True and more than one head",
                                 hint="the residual X is p×n; the concatenation is Hp×n")
    return Variant(bool(residual), heads, readout, kernel, temperature)


def _variant_kernel(ops, act, A, p, diagonal, variant):
    """K of one head from A = XᵀW_hX (consumed): entrywise (:func:`_kernel`) or row softmax."""
    if variant.kernel == "entrywise":
        return _kernel(ops, act, A, p, diagonal)
    A /= math.sqrt(p) * variant.temperature
    K = ops.softmax_rows(A, diagonal == "zero")
    if not ops.all_finite(K):
        raise ParameterError("temperature", variant.temperature, "a temperature whose softmax is finite",
                             hint=f"the row softmax has non-finite entries at p = {p}")
    return K


def _weight_form(ops, W, wk, wq):
    """W as a draw uses it: the matrix, ``("lowrank", w_Kᵀ, w_Q)`` for W = I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ},
    or None for W = I (on the backend of ``ops``)."""
    if W is not None:
        return ops.asarray(W)
    if wk is not None and wk.shape[0] > 0 and np.any(wk) and np.any(wq):
        return ("lowrank", ops.asarray(wk.T), ops.asarray(wq))
    return None


def _xwx(ops, Xd, Xt, G, Wm):
    """A = XᵀWX, a new array (the kernel consumes it), from X (``Xd``), Xᵀ (``Xt``; one draw or a
    batch), G = XᵀX and W in the form of :func:`_weight_form`: XᵀWX = XᵀX + (Xᵀw_K)(w_QᵀX) for low rank."""
    if Wm is None:
        return ops.copy(G)
    if isinstance(Wm, tuple):
        return G + (Xt @ Wm[1]) @ (Wm[2] @ Xd)
    return Xt @ (Wm @ Xd)


def _head_kernels(ops, act, Xd, G, p, diagonal, W, wk, wq, variant):
    """The kernels K_h of the heads (one for a single W), on the backend of ``ops``."""
    mats = ([ops.asarray(Wh) for Wh in variant.heads] if variant.heads is not None
            else [_weight_form(ops, W, wk, wq)])
    for Wm in mats:
        yield _variant_kernel(ops, act, _xwx(ops, Xd, Xd.T, G, Wm), p, diagonal, variant)


def _variant_M(ops, act, Xd, G, p, n, diagonal, W, wk, wq, variant):
    """M = ΦᵀΦ/n of the variant (:class:`Variant`; docs/theory.md §13) on the backend of ``ops``."""
    if variant.readout == "concat" and variant.heads is not None and len(variant.heads) > 1:
        M = None
        for K in _head_kernels(ops, act, Xd, G, p, diagonal, W, wk, wq, variant):
            Phi = Xd @ K
            term = Phi.T @ Phi
            del Phi
            M = term if M is None else M + term
        return M / n
    Phi = _features(ops, act, Xd, G, p, n, diagonal, W, wk, wq, variant)
    M = Phi.T @ Phi
    return M / n


def _features(ops, act, Xd, G, p, n, diagonal, W, wk, wq, variant):
    """Φ of the layer: XK (p×n), X(I + K) with the residual, X Σ_h K_h summed, [XK_1; …; XK_H] (Hp×n)
    concatenated."""
    kernels = _head_kernels(ops, act, Xd, G, p, diagonal, W, wk, wq, variant)
    if variant.readout == "concat" and variant.heads is not None and len(variant.heads) > 1:
        return ops.vstack([Xd @ K for K in kernels])
    K = None
    for Kh in kernels:
        K = Kh if K is None else K + Kh
    if variant.residual:
        K = K + ops.eye(n, like=K)
    return Xd @ K


def _test_errors(ops, act, X, y, Xt, yt, gamma, wk, wq, W, diagonal, models, variant):
    r"""The test errors of one draw: the readouts fitted on (X, y), tested on the fresh sequence (Xt, yt).

    β(γ) = (ΦΦᵀ/n + γ)^{-1}Φy/n for every γ from one ``eigh`` of the smaller Gram matrix (ΦΦᵀ/n, or
    ΦᵀΦ/n with β = (Φ/√n)V(λ + γ)^{-1}Vᵀŷ), and E_test(γ) = (1/n)‖y′ − Φ′ᵀβ(γ)‖² (docs/theory.md §14)."""
    p, n = X.shape
    out = {}
    for name in models:
        feats = []
        for Xs in (X, Xt):
            Xd = ops.asarray(Xs)
            if name == "linear":
                feats.append(Xd)
                continue
            G = Xd.T @ Xd
            feats.append(_features(ops, act, Xd, G, p, n, diagonal, W, wk, wq, variant))
            del G
        Phi, Phit = feats
        yd, ytd = ops.asarray(y), ops.asarray(yt)
        if Phi.shape[0] <= n:
            lam, U = ops.eigh(Phi @ Phi.T / n)
            b = U.T @ (Phi @ yd) / n
            A = Phit.T @ U
        else:
            lam, V = ops.eigh(Phi.T @ Phi / n)
            b = V.T @ yd / math.sqrt(n)
            A = (Phit.T @ Phi) @ V / math.sqrt(n)
        del Phi, Phit, feats
        lam = ops.to_numpy(lam)
        coef = ops.asarray(ops.to_numpy(b)[:, None] / (np.maximum(lam, 0.0)[:, None] + gamma[None, :]))
        R = ytd[:, None] - A @ coef
        E = ops.to_numpy((R * R).sum(0)) / n
        if not np.all(np.isfinite(E)):
            raise ConvergenceError(f"the test error of the {name} model is not finite on this draw",
                                   point={"n": n, "p": p, "model": name})
        out[name + "_test"] = E
    return out


def _kernel(ops, act, A, p, diagonal):
    """K = f(A/√p)/√p from A = XᵀWX (A is consumed)."""
    sp = math.sqrt(p)
    A /= sp
    K = ops.apply(act, A)
    del A
    K /= sp
    if diagonal == "zero":
        K = ops.zero_diagonal(K)
    if not ops.all_finite(K):
        raise ParameterError(
            "f", _act_name(act), f"an activation whose kernel f(XᵀWX/√p)/√p is finite in {ops.dtype_name}",
            hint=f"f overflows on this draw (p = {p}): the kernel has non-finite entries"
                 + (" (its diagonal may overflow: try diagonal='zero')" if diagonal == "f" else ""))
    return K


def _draw(ops, act, X, y, gamma, wk, wq, W, diagonal, models, trace, method="auto", variant=None):
    """One draw on the backend of ``ops``: X (p×n), y (n,) numpy; wk, wq (r, p) or None; W p×p or None.

    Overflow is not warned about: the kernel, M and the errors are checked for finiteness and
    resolution instead (:func:`_check_spectrum`), with an error that says what failed."""
    with np.errstate(over="ignore", invalid="ignore"):
        return _draw_unchecked(ops, act, X, y, gamma, wk, wq, W, diagonal, models, trace, method, variant)


def _draw_unchecked(ops, act, X, y, gamma, wk, wq, W, diagonal, models, trace, method, variant=None):
    p, n = X.shape
    if tuple(models) == ("linear",) and 3 * p <= 2 * n:
        return _linear_thin(ops, X, y, gamma, trace, method)
    Xd = ops.asarray(X)
    G = Xd.T @ Xd  # XᵀX (n×n), shared by the kernel, the linear model and (p > 4n/3) M
    spectra = []
    if "attention" in models and variant is not None and not variant.is_default:
        spectra.append(("attention", _variant_M(ops, act, Xd, G, p, n, diagonal, W, wk, wq, variant)))
    elif "attention" in models:
        K = _kernel(ops, act, _xwx(ops, Xd, Xd.T, G, _weight_form(ops, W, wk, wq)), p, diagonal)
        if 3 * p <= 4 * n:
            Phi = Xd @ K  # Φ = XK: 2pn² flops, then ΦᵀΦ (symmetric product) pn²
            M = Phi.T @ Phi
            del Phi
        else:
            M = K.T @ (G @ K)  # 4n³ flops: cheaper when p > 4n/3
        del K
        M /= n
        spectra.append(("attention", M))
    if "linear" in models:
        spectra.append(("linear", G / n))
    del G, Xd
    out = {}
    while spectra:
        name, M = spectra.pop(0)
        _check_spectrum(ops, act, name, n, p, gamma, M=M)
        try:
            E, T, lam_min, lam_max = ops.spectral(M, y, gamma, trace, method)
        except np.linalg.LinAlgError as exc:
            raise ConvergenceError(f"the eigensolver failed on M of the {name} model: {exc}",
                                   point={"n": n, "p": p, "model": name}) from None
        del M
        _check_spectrum(ops, act, name, n, p, gamma, lam=(lam_min, lam_max), E=E)
        out[name] = E
        if trace:
            out[name + "_trace"] = T
    return out


def _linear_thin(ops, X, y, gamma, trace, method):
    r"""E_LR of one draw with p < n from the p×p problem: O(np²) instead of O(n³).

    With the reduced QR Xᵀ = QR (Q n×p), XᵀX/n = Q B Qᵀ, B = RRᵀ/n, so with u = Qᵀy and the part
    r = y − Qu of y in the null space of XᵀX,
    (γ²/n) yᵀ(XᵀX/n + γ)^{-2} y = (γ²/n) uᵀ(B + γ)^{-2} u + ‖r‖²/n, and
    (γ²/n) tr(XᵀX/n + γ)^{-2} = (γ²/n) tr(B + γ)^{-2} + (n − p)/n. The spectral problem of B is
    solved as that of any M (:meth:`spectral`, which normalises by the length p of u: rescaled by p/n).
    """
    p, n = X.shape
    Q, R = ops.qr(ops.asarray(X).T)
    B = R @ R.T
    B /= n
    yd = ops.asarray(y)
    u = Q.T @ yd
    r2 = float(((yd - Q @ u) ** 2).sum())
    del Q, R, yd
    _check_spectrum(ops, None, "linear", n, p, gamma, M=B)
    u = ops.to_numpy(u)
    try:
        E, T, lam_min, lam_max = ops.spectral(B, u, gamma, trace, method)
    except np.linalg.LinAlgError as exc:
        raise ConvergenceError(f"the eigensolver failed on M of the linear model: {exc}",
                               point={"n": n, "p": p, "model": "linear"}) from None
    E = np.asarray(E) * (p / n) + r2 / n
    _check_spectrum(ops, None, "linear", n, p, gamma, lam=(lam_min, lam_max), E=E)
    out = {"linear": E}
    if trace:
        out["linear_trace"] = np.asarray(T) * (p / n) + (n - p) / n
    return out


def _draws_batched(ops, act, Xs, ys, gamma, wk, wq, W, diagonal, models, trace):
    """The draws (X_b, y_b) of one batch on torch: the n×n products and ``torch.linalg.eigh`` on a
    (batch, n, n) stack, one kernel launch per step instead of one per draw (the paper model, an
    explicit W or low-rank weights; the eigenvector route). Each draw is checked as in :func:`_draw`.
    Returns one result dict per draw, as :func:`_draw` does."""
    with np.errstate(over="ignore", invalid="ignore"):
        p, n = Xs[0].shape
        Xd = ops.asarray(np.stack(Xs))  # (B, p, n)
        Xt = Xd.transpose(-1, -2)
        G = Xt @ Xd
        spectra = []
        if "attention" in models:
            K = _kernel(ops, act, _xwx(ops, Xd, Xt, G, _weight_form(ops, W, wk, wq)), p, diagonal)
            Phi = Xd @ K
            del K
            M = Phi.transpose(-1, -2) @ Phi
            del Phi
            spectra.append(("attention", M / n))
            del M
        if "linear" in models:
            spectra.append(("linear", G / n))
        del G, Xd, Xt
        Y = ops.asarray(np.stack(ys))
        outs = [{} for _ in Xs]
        for name, M in spectra:
            for b in range(len(Xs)):
                _check_spectrum(ops, act, name, n, p, gamma, M=M[b])
            lam, V = ops.torch.linalg.eigh(M)
            del M
            proj = ops.to_numpy((V.transpose(-1, -2) @ Y.unsqueeze(-1)).squeeze(-1))
            del V
            lam = ops.to_numpy(lam)
            for b in range(len(Xs)):
                E, T = spectral_errors(lam[b], proj[b], gamma, n)
                _check_spectrum(ops, act, name, n, p, gamma, lam=(float(lam[b, 0]), float(lam[b, -1])), E=E)
                outs[b][name] = E
                if trace:
                    outs[b][name + "_trace"] = T
        return outs


def _batch_size(batch, ops, n: int, p: int, draws: int, models) -> int:
    """Draws per batched call of the torch backend: ``batch`` if given (checked), else up to 8 on
    CUDA within a quarter of the device's free memory, and 1 on the CPU (where a batch gains
    nothing over the multithreaded BLAS of one draw)."""
    if batch is not None:
        return min(int(batch), draws)
    if not str(ops.device).startswith("cuda"):
        return 1
    per_draw = draw_memory(n, p, dtype=ops.dtype_name, backend="torch", device=str(ops.device), models=models)["device"]
    free = available_memory(str(ops.device))
    return max(1, min(8, draws, int(free // (4 * per_draw)) if per_draw and free else 1))


def _check_spectrum(ops, act, name, n, p, gamma, M=None, lam=None, E=None):
    """Refuse what one draw cannot resolve (:func:`smallest_resolvable_gamma`).

    Before the eigendecomposition (``M`` given): M must be finite, and when p < n (rank M <= p,
    so λ_min = 0 exactly) the largest diagonal entry, a lower bound of λ_max, already gives a
    lower bound of the smallest resolvable γ. After it (``lam`` = (λ_min, λ_max)): the bound of
    this draw's spectrum; the errors ``E`` must be finite.
    """
    what = "M = ΦᵀΦ/n (Φ = XK)" if name == "attention" else "M = XᵀX/n"
    if M is not None:
        if not ops.all_finite(M):
            if name == "attention":
                raise ParameterError("f", _act_name(act), f"an activation whose {what} is finite in {ops.dtype_name}",
                                     hint=f"the kernel is finite but {what} overflows at n = {n}, p = {p}")
            raise ParameterError("geometry", "(‖μ‖² too large)", f"a signal whose {what} is finite in "
                                 f"{ops.dtype_name}", hint=f"{what} overflows at n = {n}, p = {p}")
        if p >= n:
            return
        lam_min, lam_max = 0.0, ops.lam_max_lower(M)  # M is PSD: a Rayleigh quotient is <= λ_max
    else:
        lam_min, lam_max = lam
        if p < n:
            lam_min = 0.0  # rank M <= p < n: its smallest eigenvalue is 0 exactly
    if not math.isfinite(lam_max):
        raise ConvergenceError(f"the eigensolver returned non-finite eigenvalues of {what}",
                               point={"n": n, "p": p, "model": name})
    g_min = smallest_resolvable_gamma(n, lam_max, lam_min, ops.dtype_name)
    bad = gamma[gamma < g_min]
    if bad.size:
        tol = RESOLUTION_TOL[ops.dtype_name]
        delta = rounding_level(n, lam_max, ops.dtype_name)
        value = float(bad[0]) if bad.size == 1 else [float(g) for g in bad]
        raise ParameterError(
            "gamma", value, f"gamma >= {g_min:.3g} for the {name} model at n={n}, p={p}, {ops.dtype_name}",
            hint=f"{what} of this draw has λ_max {'>= ' if M is not None else '= '}{lam_max:.4g} and λ_min = "
                 f"{lam_min:.3g}{' (rank <= p < n)' if p < n else ''}; its eigenvalues are known to "
                 f"±eps·n^(1/4)·λ_max = {delta:.2g}, so E(γ) below γ = {g_min:.3g} is not resolved to "
                 f"{tol:g} relative (docs/theory.md §2; the limit γ → 0 is in sa.memorization_error)")
    if E is not None and not np.all(np.isfinite(E)):
        raise ConvergenceError(f"the Monte Carlo errors of the {name} model are not finite",
                               point={"n": n, "p": p, "model": name})


def _tridiagonal_errors(M, y, gamma):
    r"""E(γ) = γ² ŷᵀ(M+γ)^{-2}ŷ and (γ²/n) tr(M+γ)^{-2} without eigenvectors (numpy, float64).

    A Householder reflection H maps y to ±‖y‖e1; the Householder tridiagonalisation
    HMH = QTQᵀ (LAPACK ``dsytrd``, lower) keeps e1 fixed (Qe1 = e1), so
    ŷᵀ(M+γ)^{-2}ŷ = (‖y‖²/n)·‖(T+γ)^{-1}e1‖², one O(n) tridiagonal solve per γ, and
    tr(M+γ)^{-2} = Σ_k (λ_k(T)+γ)^{-2} from the eigenvalues of T (O(n²)). This is the same
    quantity as the ``eigh`` formula (same backward stability) at about 1/3 of its cost.
    ``M`` (n×n, symmetric; only its lower triangle is read) is overwritten.
    """
    from scipy.linalg import blas, eigh_tridiagonal, lapack

    n = y.size
    M = np.asarray(M, dtype=np.float64)
    F = M.T if M.flags.c_contiguous else np.asfortranarray(M)  # symmetric: Mᵀ is M in Fortran order
    ynorm = float(np.linalg.norm(y))
    u = np.array(y, dtype=np.float64)
    u[0] += math.copysign(ynorm, u[0])
    u /= np.linalg.norm(u)
    Mu = _symv(F, u)
    w = Mu - float(u @ Mu) * u  # HMH = M - 2(u wᵀ + w uᵀ) with H = I - 2uuᵀ
    F = blas.dsyr2(-2.0, u, w, lower=1, a=F, overwrite_a=1)
    lwork = int(lapack.dsytrd_lwork(n, lower=1)[0])
    _, d, e, _, info = lapack.dsytrd(F, lower=1, lwork=max(lwork, 1), overwrite_a=1)
    if info != 0:  # pragma: no cover - LAPACK argument error
        raise SymattnError(f"dsytrd failed with info={info}")
    del F
    lam_raw = eigh_tridiagonal(d, e, eigvals_only=True, check_finite=False)  # ascending
    lam = np.clip(lam_raw, 0.0, None)
    gamma = np.asarray(gamma, dtype=float)
    E = np.empty(gamma.size)
    b = np.zeros((n, 1))
    for j, g in enumerate(gamma):
        b[:] = 0.0
        b[0, 0] = 1.0
        _, _, x, info = lapack.dptsv(d + g, e, b)
        if info != 0:  # T + γ not numerically positive definite (γ below rounding): use eigenvectors
            lamv, S = eigh_tridiagonal(d, e, check_finite=False)
            return (spectral_errors(lamv, ynorm * S[0], gamma, n)[0], _trace_errors(lam, gamma, n),
                    float(lamv[0]), float(lamv[-1]))
        E[j] = g * g * float(x[:, 0] @ x[:, 0])
    return E * (ynorm * ynorm / n), _trace_errors(lam, gamma, n), float(lam_raw[0]), float(lam_raw[-1])


def _symv(F, u):
    """F u for a symmetric F stored in its lower triangle (Fortran order)."""
    from scipy.linalg import blas

    return blas.dsymv(1.0, F, u, lower=1)


def _trace_errors(lam, gamma, n):
    g = np.asarray(gamma, dtype=float)[:, None]
    return ((g / (lam[None, :] + g)) ** 2).sum(axis=1) / n


def draw_seed(seed: int, k: int) -> np.random.SeedSequence:
    """The seed of draw k alone: ``simulate(..., draws=1, seed=draw_seed(seed, k))`` is draw k of
    ``simulate(..., draws=D, seed=seed)`` (D > k), whose draws use ``SeedSequence(seed).spawn(D)``.

    A SeedSequence that has already spawned k children spawns child k next, so one draw can run
    anywhere (a dask worker) and give the same numbers as in the serial run.

    Examples
    --------
    >>> a = exact_monte_carlo("tanh", n=40, c=1.0, gamma=[0.1], draws=3, seed=5, progress=False)
    >>> b = exact_monte_carlo("tanh", n=40, c=1.0, gamma=[0.1], draws=1, seed=draw_seed(5, 2), progress=False)
    >>> bool(b.attention[0, 0] == a.attention[2, 0])
    True
    """
    return np.random.SeedSequence(seed, n_children_spawned=int(k))


def combine_draws(parts) -> "SimulationResult":
    """One :class:`SimulationResult` from the single-draw results of :func:`draw_seed` (in draw order).

    The per-draw arrays are stacked, ``draws`` is their number and ``seconds`` the sum; sizes,
    seed, backend and activation must agree (else ``ParameterError``). With the draws of
    ``draw_seed(seed, 0..D-1)`` the result equals ``simulate(..., draws=D, seed=seed)``.

    Examples
    --------
    >>> parts = [exact_monte_carlo("tanh", n=40, c=1.0, gamma=[0.1], draws=1, seed=draw_seed(5, k), progress=False)
    ...          for k in range(3)]
    >>> whole = exact_monte_carlo("tanh", n=40, c=1.0, gamma=[0.1], draws=3, seed=5, progress=False)
    >>> both = combine_draws(parts)
    >>> both.draws, bool(np.array_equal(both.attention, whole.attention) and np.array_equal(both.linear, whole.linear))
    (3, True)
    """
    parts = list(parts)
    if not parts:
        raise ParameterError("parts", parts, "at least one SimulationResult")
    first = parts[0]
    same = ("n", "p", "c", "seed", "backend", "device", "dtype", "diagonal", "activation")
    for r in parts[1:]:
        bad = [k for k in same if getattr(r, k) != getattr(first, k)] + (
            [] if np.array_equal(r.gamma, first.gamma) else ["gamma"])
        if bad:
            raise ParameterError("parts", bad, "results of the same run (same sizes, seed, backend, gamma)")

    def stack(name):
        arrays = [getattr(r, name) for r in parts]
        return None if any(a is None for a in arrays) else np.concatenate(arrays, axis=0)

    draws = sum(r.draws for r in parts)
    prov = dict(first.provenance or {})
    if "parameters" in prov and isinstance(prov["parameters"], dict):
        prov["parameters"] = dict(prov["parameters"], draws=draws)
    return SimulationResult(
        gamma=first.gamma, n=first.n, p=first.p, c=first.c, draws=draws, seed=first.seed, backend=first.backend,
        device=first.device, dtype=first.dtype, diagonal=first.diagonal, activation=first.activation,
        attention=stack("attention"), linear=stack("linear"), attention_trace=stack("attention_trace"),
        linear_trace=stack("linear_trace"), attention_test=stack("attention_test"), linear_test=stack("linear_test"),
        seconds=float(sum(r.seconds for r in parts)),
        provenance=prov or None)


# ----------------------------------------------------------------------------- result
def _mean_sem(a):
    if a is None:
        return None, None
    mean = a.mean(axis=0)
    if a.shape[0] < 2:
        sem = np.full(a.shape[1], np.nan)
    else:
        sem = a.std(axis=0, ddof=1) / math.sqrt(a.shape[0])
    return mean, sem


@dataclass
class SimulationResult:
    """Per-draw memorisation errors of one :func:`simulate` run.

    ``attention``/``linear`` (and the ``*_trace`` arrays when the trace estimator was
    requested) have shape (draws, len(gamma)), or are None when that model was not simulated.
    ``sem`` is the standard error std(ddof=1)/√draws; it is NaN when draws = 1.
    ``seed`` is the entropy of the root SeedSequence (the given seed, or the fresh entropy
    drawn when seed=None), so ``simulate(..., seed=result.seed)`` reproduces the run.
    The estimator is the exact finite-n Monte Carlo of docs/theory.md §2.

    Attributes
    ----------
    gamma : numpy.ndarray
        The ridge values.
    n, p, c, draws : int, int, float, int
        Tokens, dimension p = round(c n), the ratio c and the number of draws.
    seed : int
        The root entropy (reproduces the run).
    backend, device, dtype : str
        Where and in which precision the run was computed.
    diagonal, activation : str
        The kernel diagonal ('f' or 'zero') and the activation's name.
    attention, linear : numpy.ndarray or None
        Per-draw E_A and E_LR, shape (draws, len(gamma)).
    attention_trace, linear_trace : numpy.ndarray or None
        The same errors from the trace estimator, when requested.
    attention_test, linear_test : numpy.ndarray or None
        With ``error`` including 'test': per-draw test errors E_test = (1/n)‖y′ − Φ′ᵀβ‖² of the
        readout fitted on the draw, tested on a fresh sequence (docs/theory.md §14).
    seconds : float
        Wall-clock time of the run.

    Examples
    --------
    >>> r = exact_monte_carlo("relu", n=100, c=1.0, gamma=[0.1, 1.0], draws=4, seed=0)
    >>> r.attention.shape, r.attention_mean.shape, bool((r.attention_sem > 0).all())
    ((4, 2), (2,), True)
    >>> d = r.to_dict()
    >>> d["E_attention"]["mean"] == r.attention_mean.tolist()
    True
    """

    gamma: np.ndarray
    n: int
    p: int
    c: float
    draws: int
    seed: int
    backend: str
    device: str
    dtype: str
    diagonal: str
    activation: str
    attention: np.ndarray | None = None
    linear: np.ndarray | None = None
    attention_trace: np.ndarray | None = None
    linear_trace: np.ndarray | None = None
    attention_test: np.ndarray | None = None
    linear_test: np.ndarray | None = None
    seconds: float = field(default=float("nan"), compare=False)
    provenance: dict | None = field(default=None, compare=False, repr=False)

    # -- summaries
    @property
    def attention_mean(self):
        return _mean_sem(self.attention)[0]

    @property
    def attention_sem(self):
        return _mean_sem(self.attention)[1]

    @property
    def linear_mean(self):
        return _mean_sem(self.linear)[0]

    @property
    def linear_sem(self):
        return _mean_sem(self.linear)[1]

    @property
    def attention_trace_mean(self):
        return _mean_sem(self.attention_trace)[0]

    @property
    def attention_trace_sem(self):
        return _mean_sem(self.attention_trace)[1]

    @property
    def linear_trace_mean(self):
        return _mean_sem(self.linear_trace)[0]

    @property
    def linear_trace_sem(self):
        return _mean_sem(self.linear_trace)[1]

    @property
    def attention_test_mean(self):
        return _mean_sem(self.attention_test)[0]

    @property
    def attention_test_sem(self):
        return _mean_sem(self.attention_test)[1]

    @property
    def linear_test_mean(self):
        return _mean_sem(self.linear_test)[0]

    @property
    def linear_test_sem(self):
        return _mean_sem(self.linear_test)[1]

    def _present(self):
        names = ("attention", "linear", "attention_trace", "linear_trace", "attention_test", "linear_test")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}

    @property
    def mean(self) -> dict:
        """{model: mean over draws} for every simulated model (and trace estimator)."""
        return {k: _mean_sem(v)[0] for k, v in self._present().items()}

    @property
    def sem(self) -> dict:
        """{model: standard error of the mean} (NaN when draws = 1)."""
        return {k: _mean_sem(v)[1] for k, v in self._present().items()}

    def to_dict(self) -> dict:
        """The ``symattn simulate --json`` object (docs/architecture.md).

        ``{"gamma", "n", "p", "draws", "E_attention": {"mean", "sem"}, "E_linear": {"mean", "sem"}}``;
        a model that was not simulated is ``null``; sem is NaN when draws = 1. With the trace
        estimator, ``E_attention_trace`` and ``E_linear_trace`` are added; with the test error,
        ``E_attention_test`` and ``E_linear_test``. The last key,
        ``provenance``, is :func:`symattn.provenance.provenance` of the run: every parameter
        (activation, n, p, c, γ, geometry or a digest of W and μ, diagonal, draws, models,
        method, trace estimator, device), the seed, backend and dtype, the versions and the time.
        """

        def block(a):
            if a is None:
                return None
            m, s = _mean_sem(a)
            return {"mean": [float(v) for v in m], "sem": [float(v) for v in s]}

        d = {
            "gamma": [float(g) for g in self.gamma],
            "n": int(self.n),
            "p": int(self.p),
            "draws": int(self.draws),
            "E_attention": block(self.attention),
            "E_linear": block(self.linear),
        }
        if self.attention_trace is not None or self.linear_trace is not None:
            d["E_attention_trace"] = block(self.attention_trace)
            d["E_linear_trace"] = block(self.linear_trace)
        if self.attention_test is not None or self.linear_test is not None:
            d["E_attention_test"] = block(self.attention_test)
            d["E_linear_test"] = block(self.linear_test)
        d["provenance"] = self.provenance if self.provenance is not None else _provenance(self, {})
        return d


def _provenance(res: SimulationResult, parameters: dict) -> dict:
    """The provenance object of a run (:func:`symattn.provenance.provenance`)."""
    from .provenance import provenance

    base = {"activation": res.activation, "n": int(res.n), "p": int(res.p), "c": float(res.c),
            "gamma": [float(g) for g in res.gamma], "diagonal": res.diagonal, "draws": int(res.draws),
            "device": res.device}
    base.update(parameters)
    return provenance(base, seed=int(res.seed) if res.seed is not None else None, backend=res.backend,
                      dtype=res.dtype)


# ----------------------------------------------------------------------------- simulate
def _show_progress(progress, draws):
    if progress is None:
        try:
            return draws > 1 and sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False
    return bool(progress)


def exact_monte_carlo(f, n: int = 1024, c: float = 0.5, gamma=(1e-2, 1e-1), geometry=None, draws: int = 8,
             seed=0, backend: str = "numpy", device=None, diagonal: str = "f", weights=None, mu=None,
             progress=None, models=MODELS, trace_estimator: bool = False,
             dtype: str = "float64", method: str = "auto", residual: bool = False, heads=None,
             readout: str = "concat", kernel: str = "entrywise", temperature=None, batch=None,
             error="train", tokens=None) -> SimulationResult:
    r"""Exact Monte Carlo of E_A (attention) and E_LR (linear regression) at finite n: the engine of
    :meth:`symattn.Layer.simulate` and :func:`symattn.simulate`.

    Per draw (docs/theory.md §2): X = μyᵀ + Z (p×n, p = round(c·n)), K = f(XᵀWX/√p)/√p,
    M = KᵀXᵀXK/n, one ``eigh`` M = Σ λ_k v_k v_kᵀ, and for every γ at once
    E_A(γ) = (γ²/n) Σ_k (v_kᵀy)²/(λ_k+γ)²; E_LR the same with M = XᵀX/n.

    Parameters
    ----------
    f : Activation, str, sympy expression or callable
        Activations (and names, resolved by :func:`symattn.activation`) are centred; a plain
        callable is applied exactly as given (wrap it in ``sa.activation(fn)`` to centre it).
    n, c : tokens n >= 2 and ratio c = p/n (p = round(c n)).
    gamma : ridge values γ > 0 (all obtained from the same eigendecomposition).
    geometry : Geometry, dict or None
        Gram matrix of (μ, w_K, w_Q) (rank r allowed), embedded by ``Geometry.vectors(p)``.
    weights, mu : explicit p×p weight matrix W and/or signal μ of shape (p,); mutually exclusive with
        a non-null ``geometry``. A missing one defaults to I_p (W) or 0 (mu).
    draws, seed : independent draws >= 1; the root seed (int, or None for fresh entropy,
        recorded in the result). Draw k uses ``SeedSequence(seed).spawn(draws)[k]``.
    backend, device, dtype : 'numpy' (CPU) or 'torch' with device 'cpu'/'cuda' (default cuda when
        available); 'float64' (default) or 'float32'. Tokens are always sampled by numpy on the
        CPU, so both backends see the same draws.
    diagonal : 'f' (f on the diagonal too) or 'zero' (diagonal of K set to 0; required for
        superlinear f).
    progress : None (a tqdm bar when draws > 1 and stderr is a terminal), True or False.
    models : subset of ('attention', 'linear').
    trace_estimator : also record (γ²/n) tr(M+γ)^{-2} (low variance; same limit when μ = 0).
    method : how ŷᵀ(M+γ)^{-2}ŷ is obtained from M. 'eigh': the eigendecomposition above (torch
        always uses it). 'tridiagonal' (numpy's 'auto'): Householder tridiagonalisation with y
        mapped to e1, then one O(n) tridiagonal solve per γ -- the same number, about 3× cheaper.
    residual : bool
        Φ = X(I + K) instead of XK (docs/theory.md §13); with several heads it needs readout='sum'.
    heads, readout : a list of p×p matrices W_1..W_H (mutually exclusive with ``weights`` and with
        weight vectors in ``geometry``; μ may still come from ``geometry`` or ``mu``), each head
        K_h = f(XᵀW_hX/√p)/√p; ``readout='concat'`` gives Φ = [XK_1; …; XK_H] (Hp×n),
        ``'sum'`` gives Φ = X Σ_h K_h.
    kernel, temperature : 'entrywise' (the kernel above) or 'softmax': the row softmax
        K_ij = exp(a_ij/τ)/Σ_l exp(a_il/τ), a = XᵀWX/√p, τ = ``temperature`` (default 1), no 1/√p
        (rows sum to one); with diagonal='zero' the sums run over l ≠ i and K_ii = 0. f is not used
        (pass None).
    batch : int or None
        torch only: draws computed together, as one (batch, n, n) stack of products and one
        batched ``torch.linalg.eigh`` (the numbers equal those of one draw at a time, to rounding).
        Default: up to 8 on CUDA within a quarter of the free device memory, 1 on the CPU.
        float32 on CUDA (``dtype='float32'``): E within 1e-3 relative of float64 where γ is
        resolvable (smaller γ are refused), checked by the test suite on the device.
    error : 'train', 'test', 'both' or a tuple of them
        'train': the memorisation errors above (``attention``, ``linear``). 'test': per draw one
        more, fresh sequence (X′, y′) of the same law (same μ, W; drawn from the draw's generator
        after the training tokens, so the training draws are unchanged) and
        E_test(γ) = (1/n)‖y′ − Φ′ᵀβ(γ)‖², β(γ) = (ΦΦᵀ/n + γ)^{-1}Φy/n (``attention_test``,
        ``linear_test``; docs/theory.md §14); one more ``eigh`` per draw and model.
    tokens : TokenLaw, dict or None
        The law of the sequence (docs/theory.md §15): tokens correlated in time, Z = G Lᵀ with
        T = LLᵀ (one Cholesky factor per run), and iid or Markov labels; the test sequence has the
        same law. None (or T = I with iid labels): the paper's draws, bit for bit.

    Returns
    -------
    SimulationResult
        The per-draw errors ``attention``, ``linear`` (shape (draws, len(gamma))), their means
        and standard errors (``attention_mean``, ``attention_sem``, ...), the seed and the sizes.

    Examples
    --------
    >>> r = exact_monte_carlo("tanh", n=200, c=0.5, gamma=[0.1, 1.0], draws=3, seed=0)
    >>> r.attention.shape, r.attention_mean.round(2).tolist()
    ((3, 2), [0.63, 0.76])
    >>> r = exact_monte_carlo("tanh", n=40, c=0.5, gamma=[0.1], draws=2, residual=True)
    >>> r.attention.shape
    (2, 1)
    >>> r = exact_monte_carlo(None, n=40, gamma=[1e-3], draws=1, kernel="softmax", temperature=1.0, diagonal="zero")
    >>> 0 < float(r.attention[0, 0]) < 1
    True
    """
    import time

    W = weights
    n = check_int("n", n, 2)
    draws = check_int("draws", draws, 1)
    if batch is not None:
        batch = check_int("batch", batch, 1)
    c_arr = check_c(c)
    if c_arr.ndim != 0:
        raise ParameterError("c", c, "a single real number 0 < c <= 1e4")
    c = float(c_arr)
    gamma = np.atleast_1d(check_gamma(gamma))
    if gamma.ndim != 1:
        raise ParameterError("gamma", gamma.tolist(), "a number or a 1-d list of numbers")
    diagonal = check_diagonal(diagonal)
    models = _check_models(models)
    errs = check_error(error, multiple=True)
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        seed = check_int("seed", seed, 0)
    ops = _make_ops(backend, device, dtype)
    method = _check_method(method, ops.backend)
    if f is None and kernel == "softmax":
        act = _CallableActivation(np.exp)
        act.name = "softmax"
    else:
        act = _resolve_activation(f)
    if "attention" in models and kernel != "softmax":
        _check_superlinear(act, diagonal)

    p = check_dimension(n, c, geometry if W is None and mu is None else None)  # blames n, not p
    geo = as_geometry(geometry)
    variant = check_variant(p, residual, heads, readout, kernel, temperature)
    if variant.heads is not None:
        if W is not None:
            raise ParameterError("weights", "a matrix", "None when heads= is given",
                                 hint="give either weights= or heads=")
        if geo.rank > 0 and np.any(geo.gram[1:, 1:]):
            raise ParameterError("geometry", geo, "a geometry without weight vectors when heads= is given",
                                 hint="the heads carry the weights; give μ by geometry=Geometry(snr=...) or mu=")
    check_memory(n, p, "c" if p > n else "n", c if p > n else n, dtype=dtype, backend=ops.backend, device=ops.device,
                 models=models, W=W is not None or heads is not None, mu=mu is not None or geo.snr > 0,
                 gammas=gamma.size, trace_estimator=trace_estimator, method=method)
    wk = wq = None
    explicit = W is not None or mu is not None
    if explicit:
        if not geo.is_null:
            raise ParameterError("geometry", geo, "None (or null) when weights or mu is given explicitly",
                                 hint="give either geometry= or the explicit weights=/mu=, not both")
        if W is not None:
            W = _check_W(W, p)
        if mu is not None:
            mu = check_mu(mu, p)
    else:
        mu, wk, wq = geo.vectors(p)
        if variant.heads is not None:
            wk = wq = None

    from .tokens import as_token_law

    law = as_token_law(tokens)
    law, chol = (None, None) if law.is_iid else (law, law.cholesky(n))
    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    rngs = draw_generators(ss, draws)
    keys = ((list(models) + ([m + "_trace" for m in models] if trace_estimator else [])) if "train" in errs else [])
    keys += [m + "_test" for m in models] if "test" in errs else []
    per_draw = {k: np.empty((draws, gamma.size)) for k in keys}

    from tqdm.auto import tqdm

    from .threads import auto_threads

    t0 = time.perf_counter()
    # BLAS/OpenMP threads: the idle cores, or what the caller set (symattn.threads.auto_threads)
    with auto_threads(max(n, p)), tqdm(total=draws, desc=f"simulate n={n}", unit="draw", file=sys.stderr,
                                       disable=not _show_progress(progress, draws), leave=False) as bar:
        size = (1 if not variant.is_default or not ops.batched or "test" in errs
                else _batch_size(batch, ops, n, p, draws, models))
        for k0 in range(0, draws, size):
            drawn = [sample_tokens(n, p, mu, rng, law, chol) for rng in rngs[k0:k0 + size]]
            if size == 1:
                res = _draw(ops, act, *drawn[0], gamma, wk, wq, W, diagonal, models, trace_estimator, method,
                            variant) if "train" in errs else {}
                if "test" in errs:
                    with np.errstate(over="ignore", invalid="ignore"):
                        res.update(_test_errors(ops, act, *drawn[0], *sample_tokens(n, p, mu, rngs[k0], law, chol),
                                                gamma, wk, wq, W, diagonal, models, variant))
                results = [res]
            else:
                results = _draws_batched(ops, act, [t[0] for t in drawn], [t[1] for t in drawn], gamma, wk, wq,
                                         W, diagonal, models, trace_estimator)
            for k, res in enumerate(results, start=k0):
                for key in keys:
                    per_draw[key][k] = res[key]
            del drawn, results  # before the next draws allocate their own
            bar.update(size if k0 + size <= draws else draws - k0)
    seconds = time.perf_counter() - t0

    dev = str(ops.device)
    result = SimulationResult(
        gamma=gamma, n=n, p=p, c=c, draws=draws, seed=ss.entropy, backend=ops.backend, device=dev,
        dtype=dtype, diagonal=diagonal, activation=_act_name(act),
        attention=per_draw.get("attention"), linear=per_draw.get("linear"),
        attention_trace=per_draw.get("attention_trace"), linear_trace=per_draw.get("linear_trace"),
        attention_test=per_draw.get("attention_test"), linear_test=per_draw.get("linear_test"), seconds=seconds,
    )
    from .provenance import array_digest as _digest

    expr = getattr(act, "expr", None)
    result.provenance = _provenance(result, {
        "activation_expression": None if expr is None else str(expr),
        "geometry": None if explicit else geo.as_dict(),
        "W": _digest(W) if explicit else None, "mu": _digest(mu) if explicit else None,
        "models": list(models), "method": method, "trace_estimator": bool(trace_estimator), "error": list(errs),
        **({} if law is None else {"tokens": law.as_dict()}),
        **({} if variant.is_default else {"variant": variant.as_dict()})})
    return result


# ----------------------------------------------------------------------------- BLAS threads
#: Up to this n (or matrix size p) the numpy Monte Carlo runs with one BLAS thread (:func:`blas_threads`).
SINGLE_THREAD_N = 2000


def blas_threads(n: int, backend: str = "numpy"):
    """The BLAS thread setting for matrices of size ``n``: one thread when n <= SINGLE_THREAD_N on numpy.

    At n of a few hundred a multithreaded OpenBLAS gains nothing, and on a shared machine its
    spinning threads made one draw 20-50x slower (measured: 0.04 s single-threaded against
    1.5-4.7 s of CPU per draw at n = 384 under a load of 9 on 2 cores); at n = 1500 one thread
    costs at most the factor of the idle cores. Uses ``threadpoolctl`` when it is installed;
    otherwise nothing changes. The numbers computed do not depend on it.

    Parameters
    ----------
    n : int
        Size of the matrices (tokens n, or p of a p×p SVD).
    backend : str
        ``"numpy"``: limited when n <= :data:`SINGLE_THREAD_N`; any other backend (torch): unchanged.

    Returns
    -------
    contextlib.AbstractContextManager
        ``threadpool_limits(limits=1, user_api="blas")``, or a context that does nothing.

    Examples
    --------
    >>> import numpy as np
    >>> with blas_threads(400, "numpy"):
    ...     float(np.trace(np.eye(3) @ np.eye(3)))
    3.0
    """
    import contextlib

    if backend != "numpy" or n > SINGLE_THREAD_N:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    import importlib

    importlib.import_module("scipy.linalg")  # threadpoolctl limits only the BLAS libraries already loaded

    return threadpool_limits(limits=1, user_api="blas")
