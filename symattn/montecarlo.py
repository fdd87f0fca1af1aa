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

from .errors import ParameterError, SymattnError
from .model import MODELS, as_geometry, check_c, check_diagonal, check_gamma, check_int, dimension

BACKENDS = ("numpy", "torch")
DTYPES = ("float64", "float32")
METHODS = ("auto", "eigh", "tridiagonal")

__all__ = [
    "simulate",
    "SimulationResult",
    "kernel_matrix",
    "sample_tokens",
    "draw_errors",
    "spectral_errors",
    "draw_generators",
    "METHODS",
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
    name = "numpy"
    device = "cpu"

    def __init__(self, dtype: str = "float64"):
        self.dtype = np.dtype(dtype)

    def asarray(self, a):
        return np.asarray(a, dtype=self.dtype)

    def apply(self, act, t):
        return act.numpy(t)

    def zero_diagonal(self, K):
        np.fill_diagonal(K, 0.0)
        return K

    def all_finite(self, a) -> bool:
        return bool(np.isfinite(a).all())

    def spectral(self, M, y, gamma, trace, method):
        if method == "eigh":
            lam, V = np.linalg.eigh(M)  # reads the lower triangle only
            return spectral_errors(lam, V.T @ y, gamma, y.size)
        return _tridiagonal_errors(M, y, gamma)


class _TorchOps:
    name = "torch"

    def __init__(self, device, dtype: str = "float64"):
        import torch

        self.torch = torch
        self.device = device
        self.dtype = getattr(torch, dtype)

    def asarray(self, a):
        return self.torch.as_tensor(np.ascontiguousarray(a)).to(device=self.device, dtype=self.dtype)

    def apply(self, act, t):
        if hasattr(act, "torch") and callable(getattr(act, "torch")):
            return act.torch(t)
        # numpy-only activation: round-trip through the host (slow on CUDA, but correct)
        return self.asarray(act.numpy(t.detach().cpu().numpy()))

    def zero_diagonal(self, K):
        K.fill_diagonal_(0.0)
        return K

    def all_finite(self, a) -> bool:
        return bool(self.torch.isfinite(a).all().item())

    def spectral(self, M, y, gamma, trace, method):
        lam, V = self.torch.linalg.eigh(M)  # reads the lower triangle only
        proj = V.T @ self.asarray(y)
        del V
        return spectral_errors(self.to_numpy(lam), self.to_numpy(proj), gamma, y.size)

    def to_numpy(self, a):
        return a.detach().to("cpu", dtype=self.torch.float64).numpy()


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


def sample_tokens(n: int, p: int, mu=None, rng=None):
    r"""One draw of the tokens: returns ``(X, y)`` with :math:`X = \mu y^\top + Z` (p×n).

    - y: ``rng.permutation`` of n − ⌊n/2⌋ entries +1 and ⌊n/2⌋ entries −1 (balanced; one
      extra +1 when n is odd), drawn first;
    - Z: ``rng.standard_normal((p, n))``, i.e. :math:`z_i \sim \mathcal N(0, I_p)`, drawn second;
    - mu: a vector of shape (p,), or None for μ = 0.
    """
    rng = np.random.default_rng(rng)
    y = np.ones(n)
    y[: n // 2] = -1.0
    y = rng.permutation(y)
    X = rng.standard_normal((p, n))
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
                method: str = "auto"):
    """E_A and/or E_LR of one given draw (X, y) for every γ (numpy, float64).

    Returns a dict with keys among ``attention``, ``linear`` (and ``attention_trace``,
    ``linear_trace`` when ``trace_estimator``), each an array shaped like ``gamma``.
    See the module docstring for the formulas.
    """
    act = _resolve_activation(f)
    check_diagonal(diagonal)
    _check_superlinear(act, diagonal)
    models = _check_models(models)
    gamma = np.atleast_1d(check_gamma(gamma)).ravel()
    X = np.asarray(X, dtype=float)
    p = X.shape[0]
    if W is not None:
        W = _check_W(W, p)
    method = _check_method(method, "numpy")
    return _draw(_NumpyOps(), act, X, np.asarray(y, dtype=float), gamma, None, None, W,
                 diagonal, models, trace_estimator, method)


# ----------------------------------------------------------------------------- one draw
def _check_W(W, p: int) -> np.ndarray:
    try:
        W = np.asarray(W, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError("W", W, f"a real {p}x{p} matrix") from None
    if W.shape != (p, p):
        raise ParameterError("W", W.shape, f"shape (p, p) = ({p}, {p}) with p = round(c*n)")
    if not np.all(np.isfinite(W)):
        raise ParameterError("W", "matrix with NaN/inf", "finite entries")
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
        raise SymattnError(
            f"the kernel f(XᵀWX/√p)/√p of {_act_name(act)} has non-finite entries"
            + (" (its diagonal may overflow: try diagonal='zero')" if diagonal == "f" else "")
        )
    return K


def _draw(ops, act, X, y, gamma, wk, wq, W, diagonal, models, trace, method="auto"):
    """One draw on the backend of ``ops``: X (p×n), y (n,) numpy; wk, wq (r, p) or None; W p×p or None."""
    p, n = X.shape
    Xd = ops.asarray(X)
    G = Xd.T @ Xd  # XᵀX (n×n), shared by the kernel, the linear model and (p > 4n/3) M
    spectra = []
    if "attention" in models:
        if W is not None:
            A = Xd.T @ (ops.asarray(W) @ Xd)
        elif wk is not None and wk.shape[0] > 0 and np.any(wk) and np.any(wq):
            # XᵀWX = XᵀX + (Xᵀw_K)(w_QᵀX) for W = I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ}
            A = G + (Xd.T @ ops.asarray(wk.T)) @ (ops.asarray(wq) @ Xd)
        else:
            A = G.clone() if ops.name == "torch" else G.copy()
        K = _kernel(ops, act, A, p, diagonal)
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
        E, T = ops.spectral(M, y, gamma, trace, method)
        del M
        out[name] = E
        if trace:
            out[name + "_trace"] = T
    return out


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
    lam = np.clip(eigh_tridiagonal(d, e, eigvals_only=True, check_finite=False), 0.0, None)
    gamma = np.asarray(gamma, dtype=float)
    E = np.empty(gamma.size)
    b = np.zeros((n, 1))
    for j, g in enumerate(gamma):
        b[:] = 0.0
        b[0, 0] = 1.0
        _, _, x, info = lapack.dptsv(d + g, e, b)
        if info != 0:  # T + γ not numerically positive definite (γ below rounding): use eigenvectors
            lamv, S = eigh_tridiagonal(d, e, check_finite=False)
            return spectral_errors(lamv, ynorm * S[0], gamma, n)[0], _trace_errors(lam, gamma, n)
        E[j] = g * g * float(x[:, 0] @ x[:, 0])
    return E * (ynorm * ynorm / n), _trace_errors(lam, gamma, n)


def _symv(F, u):
    """F u for a symmetric F stored in its lower triangle (Fortran order)."""
    from scipy.linalg import blas

    return blas.dsymv(1.0, F, u, lower=1)


def _trace_errors(lam, gamma, n):
    g = np.asarray(gamma, dtype=float)[:, None]
    return ((g / (lam[None, :] + g)) ** 2).sum(axis=1) / n


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
    seconds: float = field(default=float("nan"), compare=False)

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

    def _present(self):
        names = ("attention", "linear", "attention_trace", "linear_trace")
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
        estimator, ``E_attention_trace`` and ``E_linear_trace`` are added.
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
        return d


# ----------------------------------------------------------------------------- simulate
def _show_progress(progress, draws):
    if progress is None:
        try:
            return draws > 1 and sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False
    return bool(progress)


def simulate(f, n: int = 1024, c: float = 0.5, gamma=(1e-2, 1e-1), geometry=None, draws: int = 8,
             seed=0, backend: str = "numpy", device=None, diagonal: str = "f", W=None, mu=None,
             progress=None, models=MODELS, trace_estimator: bool = False,
             dtype: str = "float64", method: str = "auto") -> SimulationResult:
    r"""Exact Monte Carlo of E_A (attention) and E_LR (linear regression) at finite n.

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
    W, mu : explicit p×p weight matrix W and/or signal μ of shape (p,); mutually exclusive with
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
    """
    import time

    n = check_int("n", n, 2)
    draws = check_int("draws", draws, 1)
    c_arr = check_c(c)
    if c_arr.ndim != 0:
        raise ParameterError("c", c, "a single real number 0 < c <= 1e4")
    c = float(c_arr)
    gamma = np.atleast_1d(check_gamma(gamma))
    if gamma.ndim != 1:
        raise ParameterError("gamma", gamma.tolist(), "a number or a 1-d list of numbers")
    diagonal = check_diagonal(diagonal)
    models = _check_models(models)
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        seed = check_int("seed", seed, 0)
    ops = _make_ops(backend, device, dtype)
    method = _check_method(method, ops.name)
    act = _resolve_activation(f)
    if "attention" in models:
        _check_superlinear(act, diagonal)

    p = dimension(n, c)
    geo = as_geometry(geometry)
    wk = wq = None
    if W is not None or mu is not None:
        if not geo.is_null:
            raise ParameterError("geometry", geo, "None (or null) when W or mu is given explicitly",
                                 hint="give either geometry= or the explicit W=/mu=, not both")
        if W is not None:
            W = _check_W(W, p)
        if mu is not None:
            try:
                mu = np.asarray(mu, dtype=float)
            except (TypeError, ValueError):
                raise ParameterError("mu", mu, f"a real vector of shape ({p},)") from None
            if mu.shape != (p,):
                raise ParameterError("mu", mu.shape, f"shape (p,) = ({p},) with p = round(c*n)")
            if not np.all(np.isfinite(mu)):
                raise ParameterError("mu", "vector with NaN/inf", "finite entries")
    else:
        mu, wk, wq = geo.vectors(p)

    ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
    rngs = draw_generators(ss, draws)
    keys = list(models) + ([m + "_trace" for m in models] if trace_estimator else [])
    per_draw = {k: np.empty((draws, gamma.size)) for k in keys}

    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    with tqdm(total=draws, desc=f"simulate n={n}", unit="draw", file=sys.stderr,
              disable=not _show_progress(progress, draws), leave=False) as bar:
        for k, rng in enumerate(rngs):
            X, y = sample_tokens(n, p, mu, rng)
            res = _draw(ops, act, X, y, gamma, wk, wq, W, diagonal, models, trace_estimator, method)
            for key in keys:
                per_draw[key][k] = res[key]
            bar.update(1)
    seconds = time.perf_counter() - t0

    dev = str(ops.device)
    return SimulationResult(
        gamma=gamma, n=n, p=p, c=c, draws=draws, seed=ss.entropy, backend=ops.name, device=dev,
        dtype=dtype, diagonal=diagonal, activation=_act_name(act),
        attention=per_draw.get("attention"), linear=per_draw.get("linear"),
        attention_trace=per_draw.get("attention_trace"), linear_trace=per_draw.get("linear_trace"),
        seconds=seconds,
    )


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
