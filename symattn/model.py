r"""The linearised attention model: parameters, their validation, and the kernel constants.

This is the second layer of symattn (docs/theory.md §1, §4). It knows the parameters of the
model -- c = p/n, the ridge γ, the geometry of (μ, w_K, w_Q), the diagonal mode -- and
turns an :class:`~symattn.activations.Activation` into the three constants of the
linearised kernel

.. math::  K_X \simeq a_1\,(X^\top W X/p - I_n) + s\,N/\sqrt{p} + d\, I_n,
           \qquad s^2 = \nu - a_1^2 .

Every check raises :class:`~symattn.errors.ParameterError` naming the parameter and
its allowed range.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .errors import ParameterError
from .validation import known_keywords
from .validation import as_float_array, check_dps, check_int, check_nonnegative, check_positive

__all__ = [
    "DIAGONAL_MODES", "Geometry", "KernelConstants", "as_geometry", "kernel_constants", "dimension",
    "check_c", "check_gamma", "check_diagonal", "check_dps", "check_int", "check_positive", "check_nonnegative",
    "check_n", "check_dimension", "check_weights", "check_mu", "weight_rank", "RANK_TOL", "N_MAX",
    "GEOMETRY_KEYS", "KERNELS", "READOUTS", "check_heads", "check_variant_flags",
]

DIAGONAL_MODES = ("f", "zero")
#: the models whose training error is computed: ridge on the attention features Φ = X K_X, or on X
MODELS = ("attention", "linear")
#: above this |t| (:func:`signal_strength`) the asymptotic attention theory is biased by more than a
#: few per cent at finite p, and the finite-p corrected theory should be used (docs/theory.md §10.1)
STRONG_SIGNAL_T = 0.15


# ----------------------------------------------------------------------------- validation
def check_c(c) -> np.ndarray:
    """c = p/n must satisfy 0 < c <= 1e4."""
    return check_positive("c", c, upper=1e4)


def check_gamma(gamma) -> np.ndarray:
    """The ridge γ must satisfy 0 < γ <= 1e12."""
    return check_positive("gamma", gamma, upper=1e12)


def check_diagonal(diagonal: str) -> str:
    if diagonal not in DIAGONAL_MODES:
        raise ParameterError("diagonal", diagonal, "one of " + ", ".join(repr(m) for m in DIAGONAL_MODES))
    return diagonal


def dimension(n: int, c: float) -> int:
    """The dimension p = round(c·n) used for n tokens at ratio c (at least 1)."""
    return max(1, int(round(float(c) * n)))


#: the largest token count n that the finite-n quantities (d_n, t, Monte Carlo) accept: beyond it
#: the finite-p corrections are below float64 resolution and the asymptotic theory (n = None) applies
N_MAX = 10**9


def check_n(n) -> int:
    """The token count n: an integer 2 <= n <= :data:`N_MAX` (ParameterError otherwise)."""
    return check_int("n", n, 2, N_MAX)


def check_dimension(n, c, geometry=None) -> int:
    """p = round(c n) after checking that it can hold the geometry; the error names n, not p.

    Parameters
    ----------
    n : int
        Tokens (:func:`check_n`).
    c : float
        p/n.
    geometry : Geometry, dict or None
        The Gram matrix of (μ, w_K, w_Q); p must be at least its rank.

    Returns
    -------
    int
        p = round(c n).

    Examples
    --------
    >>> check_dimension(10, 0.5, Geometry(snr=1.0, wk2=1.0))
    5
    >>> check_dimension(2, 0.5, Geometry(snr=1.0, wk2=1.0))
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid n=2: allowed n >= 3 at c=0.5 (p = round(c n) must be at least 2, the rank of the Gram matrix of the geometry)
    """
    n = check_n(n)
    c = float(check_c(c))
    geo = as_geometry(geometry)
    eig = np.linalg.eigvalsh(geo.gram)
    rank = int(np.sum(eig > 1e-14 * eig.size * max(1.0, float(np.max(np.abs(eig))))))
    p = dimension(n, c)
    if p < rank:
        n_min = next(m for m in range(n, n + int(rank / c) + 3) if dimension(m, c) >= rank)
        raise ParameterError("n", n, f"n >= {n_min} at c={c:g} (p = round(c n) must be at least {rank}, "
                             "the rank of the Gram matrix of the geometry)")
    return p


# ----------------------------------------------------------------------------- geometry
class Geometry:
    r"""Gram matrix 𝔊 of the vectors (μ, w_K^{(1..r)}, w_Q^{(1..r)}), docs/theory.md §1 and preface.

    The model only sees these inner products. For rank one (the paper's setting)::

        Geometry(snr=‖μ‖², wk2=‖w_K‖², wq2=‖w_Q‖², mu_wk=μᵀw_K, mu_wq=μᵀw_Q, wk_wq=w_Kᵀw_Q)

    so that W_K^T W_Q = I_p + w_K w_Q^T. Rank-r weights come from :meth:`from_vectors`
    or :meth:`from_gram`, with the order (μ, w_K^{(1)}, ..., w_K^{(r)}, w_Q^{(1)}, ..., w_Q^{(r)}).

    Parameters
    ----------
    snr : float
        ‖μ‖² ≥ 0, the signal-to-noise ratio.
    wk2, wq2 : float
        ‖w_K‖² ≥ 0 and ‖w_Q‖² ≥ 0.
    mu_wk, mu_wq, wk_wq : float
        The inner products μᵀw_K, μᵀw_Q and w_Kᵀw_Q. Every entry left unset is 0; the Gram
        matrix must be positive semi-definite.

    Examples
    --------
    >>> g = Geometry(snr=1.0, wk2=1.0, mu_wk=0.5)
    >>> g.gram.tolist()
    [[1.0, 0.5, 0.0], [0.5, 1.0, 0.0], [0.0, 0.0, 0.0]]
    >>> Geometry.aligned(snr=2.0).gram.tolist()[0]     # w_K = w_Q = μ
    [2.0, 2.0, 2.0]
    """

    @known_keywords
    def __init__(self, snr: float = 0.0, wk2: float = 0.0, wq2: float = 0.0,
                 mu_wk: float = 0.0, mu_wq: float = 0.0, wk_wq: float = 0.0):
        vals = {"snr": snr, "wk2": wk2, "wq2": wq2, "mu_wk": mu_wk, "mu_wq": mu_wq, "wk_wq": wk_wq}
        for name, v in vals.items():
            arr = as_float_array(name, v)
            if arr.ndim != 0:
                raise ParameterError(name, v, "a single real number")
        for name in ("snr", "wk2", "wq2"):
            check_nonnegative(name, vals[name])
        g = np.array([[snr, mu_wk, mu_wq], [mu_wk, wk2, wk_wq], [mu_wq, wk_wq, wq2]], dtype=float)
        self._set_gram(g, 1)

    # -- constructors
    @classmethod
    def from_gram(cls, gram, rank: int | None = None) -> "Geometry":
        """Geometry from a (1+2r)×(1+2r) Gram matrix ordered (μ, w_K^{(1..r)}, w_Q^{(1..r)})."""
        g = as_float_array("gram", gram)
        if g.ndim != 2 or g.shape[0] != g.shape[1] or g.shape[0] % 2 != 1 or g.shape[0] < 1:
            raise ParameterError("gram", getattr(g, "shape", g), "a square (1+2r)x(1+2r) matrix, r >= 0")
        r = (g.shape[0] - 1) // 2 if rank is None else check_int("rank", rank, 0)
        if g.shape[0] != 1 + 2 * r:
            raise ParameterError("rank", rank, f"(gram size - 1)/2 = {(g.shape[0] - 1) / 2:g}")
        self = cls.__new__(cls)
        self._set_gram(g, r)
        return self

    @classmethod
    def from_vectors(cls, mu, wk=None, wq=None) -> "Geometry":
        """Geometry of explicit vectors: μ of shape (p,), w_K and w_Q of shape (p,) or (r, p)."""
        mu = as_float_array("mu", mu)
        if mu.ndim != 1:
            raise ParameterError("mu", mu.shape, "a vector of shape (p,)")
        p = mu.shape[0]
        ws = []
        for name, w in (("wk", wk), ("wq", wq)):
            w = np.zeros((1, p)) if w is None else np.atleast_2d(as_float_array(name, w))
            if w.shape[-1] != p:
                raise ParameterError(name, w.shape, f"shape (p,) or (r, p) with p = {p} (the length of mu)")
            ws.append(w)
        if ws[0].shape[0] != ws[1].shape[0]:
            raise ParameterError("wq", ws[1].shape, f"the same rank r = {ws[0].shape[0]} as wk")
        V = np.vstack([mu[None, :], ws[0], ws[1]])
        return cls.from_gram(V @ V.T, rank=ws[0].shape[0])

    @classmethod
    def aligned(cls, snr: float, theta: float | None = None) -> "Geometry":
        """w_K = w_Q = θ μ/‖μ‖ (θ = ‖μ‖ by default, i.e. w_K = w_Q = μ)."""
        snr = check_nonnegative("snr", snr)
        if theta is None:  # w = μ: every entry of the Gram matrix is ‖μ‖²
            return cls(snr=snr, wk2=snr, wq2=snr, mu_wk=snr, mu_wq=snr, wk_wq=snr)
        theta = float(theta)
        k = theta * math.sqrt(snr)  # μᵀw
        return cls(snr=snr, wk2=theta**2, wq2=theta**2, mu_wk=k, mu_wq=k, wk_wq=theta**2)

    def _set_gram(self, g: np.ndarray, r: int) -> None:
        if not np.allclose(g, g.T, rtol=1e-10, atol=1e-12):
            raise ParameterError("geometry", g.tolist(), "a symmetric Gram matrix")
        g = 0.5 * (g + g.T)
        eig = np.linalg.eigvalsh(g)
        scale = max(1.0, float(np.max(np.abs(eig))))
        if eig[0] < -1e-10 * scale:
            raise ParameterError(
                "geometry", g.tolist(),
                "a positive semi-definite Gram matrix of (mu, w_K, w_Q)",
                hint=f"its smallest eigenvalue is {eig[0]:.4g} < 0 (e.g. |mu_wk| must be <= sqrt(snr*wk2))",
            )
        self.gram = g
        self.rank = r

    # -- derived quantities
    @property
    def snr(self) -> float:
        """‖μ‖² (written m2 in docs/theory.md)."""
        return float(self.gram[0, 0])

    @property
    def kappa_K(self) -> np.ndarray:
        """μᵀw_K^{(k)}, k = 1..r."""
        return self.gram[0, 1:1 + self.rank]

    @property
    def kappa_Q(self) -> np.ndarray:
        """μᵀw_Q^{(k)}, k = 1..r."""
        return self.gram[0, 1 + self.rank:]

    @property
    def signal_weight(self) -> float:
        """Λ00 = ‖μ‖² + Σ_k μᵀw_K^{(k)}·μᵀw_Q^{(k)} (the yyᵀ coefficient of XᵀWX − ZᵀZ)."""
        return self.snr + float(np.dot(self.kappa_K, self.kappa_Q))

    def strength(self, p) -> float:
        """t = (‖μ‖² + Σ μᵀw_K μᵀw_Q)/√p: the finite-p signal strength (docs/theory.md §10.1)."""
        return self.signal_weight / np.sqrt(p)

    def weight_strength(self, p) -> float:
        """Σ_k ‖w_K^{(k)}‖ ‖w_Q^{(k)}‖/√p: the size of the low-rank weights' part of the kernel argument, the
        second strong direction besides t (docs/theory.md §10.1)."""
        G, r = self.gram, self.rank
        return float(sum(np.sqrt(max(G[1 + k, 1 + k], 0.0) * max(G[1 + r + k, 1 + r + k], 0.0))
                         for k in range(r))) / np.sqrt(p)

    @property
    def is_null(self) -> bool:
        """True when μ = 0 and every weight vanishes (the bulk case)."""
        return bool(np.all(self.gram == 0))

    def vectors(self, p: int):
        """Explicit vectors (μ, w_K, w_Q) in R^p, shapes (p,), (r, p), (r, p), with this Gram matrix."""
        k = self.gram.shape[0]
        p = check_int("p", p, 1)
        eig, vec = np.linalg.eigh(self.gram)
        # eigenvalues at rounding level are exact zeros (e.g. the aligned geometry has rank 1):
        # their square roots (~1e-8) would otherwise make w_K = mu only to 1e-8
        scale = max(1.0, float(np.max(np.abs(eig))))
        eig = np.where(eig > 1e-14 * k * scale, eig, 0.0)
        coords = vec * np.sqrt(eig)  # rows: coordinates of each vector
        V = np.zeros((k, p))
        if p >= k:
            V[:, :k] = coords
        else:  # only the rank of the Gram matrix (its non-zero eigenvalues) needs room
            keep = eig > 0
            if p < int(keep.sum()):
                raise ParameterError("p", p, f"p >= {int(keep.sum())} (the rank of the Gram matrix) to embed "
                                     "the geometry", hint="p = round(c n): increase n or c")
            V[:, :int(keep.sum())] = coords[:, keep]
        r = self.rank
        return V[0], V[1:1 + r], V[1 + r:]

    def weight_matrix(self, p: int) -> np.ndarray:
        """W = W_K^T W_Q = I_p + Σ_k w_K^{(k)} w_Q^{(k)T}."""
        _, wk, wq = self.vectors(p)
        return np.eye(p) + wk.T @ wq

    def as_dict(self) -> dict:
        if self.rank == 1:
            g = self.gram
            return {"snr": float(g[0, 0]), "wk2": float(g[1, 1]), "wq2": float(g[2, 2]),
                    "mu_wk": float(g[0, 1]), "mu_wq": float(g[0, 2]), "wk_wq": float(g[1, 2])}
        return {"gram": self.gram.tolist(), "rank": self.rank}

    def __repr__(self) -> str:
        items = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Geometry({items})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Geometry) and self.rank == other.rank and np.array_equal(self.gram, other.gram)


#: singular values of W below RANK_TOL·σ_1 count as zero (:func:`weight_rank`)
RANK_TOL = 1e-10


def weight_rank(W, singular_values=None) -> int:
    """The rank of W: #{σ_k > RANK_TOL·σ_1} (0 for W = 0).

    Parameters
    ----------
    W : array_like
        p×p.
    singular_values : array_like, optional
        σ_1 >= σ_2 >= ... when already computed (W is then not decomposed again).

    Returns
    -------
    int

    Examples
    --------
    >>> weight_rank(np.outer([1.0, 2.0, 3.0], [1.0, 0.0, 1.0])), weight_rank(np.eye(3))
    (1, 3)
    """
    s = np.linalg.svd(np.asarray(W, dtype=float), compute_uv=False) if singular_values is None else \
        np.asarray(singular_values, dtype=float)
    return int(np.sum(s > RANK_TOL * s[0])) if s.size and s[0] > 0 else 0


def check_weights(W) -> np.ndarray:
    """W as a finite real square float64 array (ParameterError naming ``weights`` otherwise).

    Parameters
    ----------
    W : array_like
        The p×p attention matrix.

    Returns
    -------
    numpy.ndarray
        W, float64, shape (p, p), p >= 2.

    Examples
    --------
    >>> check_weights(np.eye(3)).shape
    (3, 3)
    """
    if np.iscomplexobj(W):   # never solved on its real part
        raise ParameterError("weights", "a complex matrix", "a real square p×p matrix")
    try:
        W = np.array(W, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError("weights", W, "a real square p×p matrix") from None
    if W.ndim != 2 or W.shape[0] != W.shape[1] or W.shape[0] < 2:
        raise ParameterError("weights", getattr(W, "shape", W), "a real square p×p matrix with p >= 2")
    if not np.all(np.isfinite(W)):
        raise ParameterError("weights", "matrix with NaN/inf", "finite entries")
    if not np.any(W):
        raise ParameterError("weights", "the zero matrix", "a nonzero matrix (‖W‖_F > 0)")
    return W


#: the layer's kernels: K = f(XᵀWX/√p)/√p entrywise, or the row softmax (docs/theory.md §13.3)
KERNELS = ("entrywise", "softmax")
#: how several heads reach the readout: Φ = [XK_1; …; XK_H] (concat) or X Σ_h K_h (sum) (docs/theory.md §13.2)
READOUTS = ("concat", "sum")


def check_variant_flags(residual=False, readout: str = "concat", kernel: str = "entrywise", temperature=None) -> tuple:
    """The layer's variant flags checked, and the one rule between them: a temperature only with the softmax
    (the combinations with weights and heads are :data:`symattn.layer.RULES`).

    Returns
    -------
    (bool, str, str, float or None)
        residual, readout (one of :data:`READOUTS`), kernel (one of :data:`KERNELS`) and the temperature
        τ > 0 as a float (None when not given).

    Examples
    --------
    >>> check_variant_flags(True, "sum", "softmax", 2)
    (True, 'sum', 'softmax', 2.0)
    >>> check_variant_flags(kernel="softmax", temperature=-1)
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid temperature=-1: allowed a real number 0 < temperature < inf
    """
    if not isinstance(residual, (bool, np.bool_)):
        raise ParameterError("residual", residual, "True or False")
    if kernel not in KERNELS:
        raise ParameterError("kernel", kernel, "one of " + ", ".join(repr(k) for k in KERNELS))
    if readout not in READOUTS:
        raise ParameterError("readout", readout, "one of " + ", ".join(repr(r) for r in READOUTS))
    if temperature is not None:
        try:
            tau = float(temperature)
        except (TypeError, ValueError):
            raise ParameterError("temperature", temperature, "a real number 0 < temperature < inf") from None
        if not (math.isfinite(tau) and tau > 0):
            raise ParameterError("temperature", temperature, "a real number 0 < temperature < inf")
        if kernel != "softmax":
            raise ParameterError("temperature", tau, "None unless kernel='softmax'",
                                 hint=f"the keys in conflict: temperature={tau!r}, kernel={kernel!r}")
        temperature = tau
    return bool(residual), readout, kernel, temperature


def check_heads(heads) -> tuple:
    """The heads W_1..W_H as a tuple of finite, real, read-only float64 p×p arrays of one shape.

    Parameters
    ----------
    heads : sequence of array_like
        A list of p×p matrices (or an H×p×p array).

    Returns
    -------
    tuple of numpy.ndarray

    Raises
    ------
    ParameterError
        ``heads``: an empty list, a 2-d array, heads of different shapes, non-finite entries.

    Examples
    --------
    >>> [W.shape for W in check_heads([np.eye(2), np.ones((2, 2))])]
    [(2, 2), (2, 2)]
    """
    if isinstance(heads, np.ndarray) and heads.ndim == 2:
        raise ParameterError("heads", f"array of shape {heads.shape}", "a list of p×p matrices (or an H×p×p array)")
    try:
        hs = [np.array(W, dtype=float) for W in heads]
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
        W.setflags(write=False)
    return tuple(hs)


def check_mu(mu, p: int) -> np.ndarray:
    """μ as a finite float64 vector of length p (None: zero); a ParameterError names ``mu``.

    Parameters
    ----------
    mu : array_like or None
    p : int

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> check_mu(None, 3).tolist()
    [0.0, 0.0, 0.0]
    """
    if mu is None:
        return np.zeros(p)
    if np.iscomplexobj(mu):
        raise ParameterError("mu", "a complex vector", f"a real vector of length p = {p}")
    try:
        mu = np.array(mu, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError("mu", mu, f"a real vector of length p = {p}") from None
    if mu.shape != (p,):
        raise ParameterError("mu", mu.shape, f"a real vector of shape ({p},) (p of the weights)")
    if not np.all(np.isfinite(mu)):
        raise ParameterError("mu", "vector with NaN/inf", "finite entries")
    return mu


@known_keywords
def signal_strength(geometry, n: int, c) -> np.ndarray:
    r"""The finite-p signal strength t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p, p = round(c n).

    It is the scale of the signal part of the kernel argument; the asymptotic theory needs
    ``|t|`` small, and ``|t|`` > :data:`STRONG_SIGNAL_T` calls for the finite-p correction (docs/theory.md §10.1).

    Parameters
    ----------
    geometry : Geometry or dict or None
        The Gram matrix of (μ, w_K, w_Q).
    n : int
        Token count (>= 2).
    c : float or array_like
        p/n, one or several values.

    Returns
    -------
    numpy.ndarray
        t for each c (0-d for scalar c).

    Examples
    --------
    >>> float(signal_strength(Geometry.aligned(snr=1.0), n=1000, c=1.0))   # (1 + 1)/√1000
    0.06324555320336758
    """
    return _per_c(geometry, n, c, "strength")


def _per_c(geometry, n, c, method: str) -> np.ndarray:
    """``Geometry.<method>(p)`` for p = round(c n), for each c (0-d for scalar c)."""
    geom = as_geometry(geometry)
    n = check_n(n)
    cs = np.atleast_1d(check_c(c))
    out = np.array([getattr(geom, method)(dimension(n, ci)) for ci in cs.ravel()]).reshape(cs.shape)
    return out if np.ndim(c) else out.reshape(())


def weight_strength(geometry, n: int, c) -> np.ndarray:
    r"""The strength of the low-rank weights, s_w = Σ_k ‖w_K^{(k)}‖ ‖w_Q^{(k)}‖/√p, p = round(c n).

    The rank-one part (xᵀw_K)(w_Qᵀx')/√p of the kernel argument has this scale whatever μ is; the theory
    linearises the kernel around it, so s_w > :data:`STRONG_SIGNAL_T` is outside the regime it covers,
    as |t| is (docs/theory.md §10.1): erf at c = 2, ‖w‖² = 100, n = 250 (s_w = 4.5) gives 0.087 where the
    Monte Carlo gives 0.32 (issue 38).

    Examples
    --------
    >>> float(weight_strength(Geometry(wk2=100.0, wq2=100.0, wk_wq=100.0), n=250, c=2.0))   # 100/√500
    4.47213595499958
    """
    return _per_c(geometry, n, c, "weight_strength")


#: the keys of a geometry dict (:func:`as_geometry`): the keywords of :class:`Geometry`, or a Gram matrix
GEOMETRY_KEYS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")
GRAM_KEYS = ("gram", "rank")


def as_geometry(geometry) -> Geometry:
    """The :class:`Geometry` that ``geometry`` describes.

    Parameters
    ----------
    geometry : None, Geometry or dict
        None (μ = w = 0); a Geometry; a dict of the keywords of :class:`Geometry` (``snr``,
        ``wk2``, ``wq2``, ``mu_wk``, ``mu_wq``, ``wk_wq``), or ``{"gram": G, "rank": r}``
        (:meth:`Geometry.from_gram`, the form :meth:`Geometry.as_dict` gives for rank r > 1).

    Returns
    -------
    Geometry

    Raises
    ------
    ParameterError
        For another type, an unknown key (the message names it and lists the allowed ones) or a
        mix of the two dict forms.

    Examples
    --------
    >>> as_geometry({"snr": 1.0}).snr
    1.0
    >>> as_geometry({"snrr": 1})
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid geometry key='snrr': allowed one of snr, wk2, wq2, mu_wk, mu_wq, wk_wq (or gram, rank)
    """
    if geometry is None:
        return Geometry()
    if isinstance(geometry, Geometry):
        return geometry
    if isinstance(geometry, dict):
        allowed = "one of " + ", ".join(GEOMETRY_KEYS) + " (or " + ", ".join(GRAM_KEYS) + ")"
        for key in geometry:
            if key not in GEOMETRY_KEYS + GRAM_KEYS:
                raise ParameterError("geometry key", key, allowed)
        if "gram" in geometry:
            mixed = [k for k in geometry if k in GEOMETRY_KEYS]
            if mixed:
                raise ParameterError("geometry key", mixed[0], "not together with 'gram' (give either the "
                                     "Gram matrix or its rank-one entries)")
            return Geometry.from_gram(geometry["gram"], rank=geometry.get("rank"))
        if "rank" in geometry:
            raise ParameterError("geometry key", "rank", "only together with 'gram'")
        return Geometry(**geometry)
    raise ParameterError("geometry", geometry, "a symattn.Geometry, a dict of its keywords, or None")


# ----------------------------------------------------------------------------- linearised kernel
@dataclass(frozen=True)
class KernelConstants:
    r"""Constants of the linearised kernel K_lin = a1(XᵀWX/p − I) + s N/√p + d I (docs/theory.md §4).

    ``d`` may be an array (one value per c when the finite-p diagonal d_n is used).
    With ``dps`` set, ``a1``, ``s2``, ``d`` are mpmath numbers at that precision.

    Parameters
    ----------
    a1 : float or mpf
        a1 = E[ξ f(ξ)], the linear Hermite coefficient (docs/theory.md §1.2).
    s2 : float or mpf
        s² = ν − a1², the weight of the noise part of the kernel.
    d : float, mpf or numpy.ndarray
        The diagonal constant d (or d_n, docs/theory.md §1.3).

    Examples
    --------
    >>> k = KernelConstants(a1=0.5, s2=0.25, d=1.0)
    >>> k.nu                                           # ν = s² + a1²
    0.5
    """

    a1: object
    s2: object
    d: object

    @property
    def nu(self):
        return self.s2 + self.a1**2


@known_keywords
def kernel_constants(f, diagonal: str = "f", n: int | None = None, c=None, snr: float = 0.0,
                     dps: int | None = None) -> KernelConstants:
    r"""The constants (a1, s² = ν − a1², d) that the deterministic equivalents need.

    - ``diagonal='f'``: d = d∞ = lim f(√p)/√p, or, when ``n`` is given, the finite-p value
      d_n = E f(‖x‖²/√p)/√p with ‖x‖² ~ χ²_p(‖μ‖²) and p = round(c·n) (docs/theory.md §1).
    - ``diagonal='zero'``: d = 0.

    A superlinear f (d = ∞, e.g. He3 or exp) with ``diagonal='f'`` raises ParameterError.

    Parameters
    ----------
    f : Activation
        The activation (:func:`symattn.activation` builds one from a name or an expression).
    diagonal : {'f', 'zero'}
        The kernel's diagonal is f (giving d) or zero (d = 0).
    n : int, optional
        The number of tokens: use the finite-p diagonal d_n (needs ``c``).
    c : float or array_like, optional
        The ratio p/n, for d_n.
    snr : float
        ‖μ‖², the non-centrality of ‖x‖² in d_n.
    dps : int, optional
        Return mpmath numbers at this many decimal digits.

    Returns
    -------
    KernelConstants
        a1, s2 and d (``nu`` = s2 + a1²).

    Examples
    --------
    ReLU − 1/√(2π): a1 = 1/2, ν = 1/2 − 1/(2π), d = 1 (docs/theory.md §1.2):

    >>> import math
    >>> from symattn import activation
    >>> k = kernel_constants(activation("relu"))
    >>> round(k.a1, 12), round(k.s2 - (0.25 - 1 / (2 * math.pi)), 12), k.d
    (0.5, 0.0, 1.0)
    >>> kernel_constants(activation("relu"), diagonal="zero").d
    0.0
    """
    check_diagonal(diagonal)
    if dps is not None:
        a1, s2 = (f.constants(dps)[k] for k in ("a1", "s2"))
    else:
        a1, s2 = f.a1, f.nu - f.a1**2
    if diagonal == "zero":
        d = 0.0
    elif f.d is None or not math.isfinite(float(f.d)):
        raise ParameterError(
            "diagonal", diagonal,
            "'zero' for a superlinear activation",
            hint=f"{f.name} grows faster than linearly, so f(‖x‖²/√p)/√p diverges (d = ∞): "
                 "zero the diagonal with diagonal='zero' (CLI: --diagonal zero)",
        )
    elif n is not None:
        n = check_n(n)
        if c is None:
            raise ParameterError("c", c, "a value of c = p/n when the finite-p diagonal (n) is requested")
        cs = np.atleast_1d(check_c(c))
        ds = np.array([f.d_n(dimension(n, ci), snr=snr) for ci in cs.ravel()]).reshape(cs.shape)
        d = ds if np.ndim(c) else float(ds.ravel()[0])
    else:
        d = float(f.d)
    if dps is not None and not isinstance(d, np.ndarray):
        import mpmath
        with mpmath.workdps(dps):
            d = mpmath.mpf(d) if not isinstance(d, mpmath.mpf) else d
    return KernelConstants(a1=a1, s2=s2, d=d)


#: what ``error=`` takes: the training (memorisation) error, the test (generalisation) error
ERROR_CHOICES = ("train", "test")


def check_error(error, multiple: bool = False):
    """``error`` checked: 'train' or 'test' (or, with ``multiple``, a tuple of them; 'both' is both).

    Examples
    --------
    >>> check_error("test"), check_error(("train", "test"), multiple=True), check_error("both", multiple=True)
    ('test', ('train', 'test'), ('train', 'test'))
    """
    if multiple:
        try:
            items = ERROR_CHOICES if error == "both" else (error,) if isinstance(error, str) else tuple(error)
        except TypeError:   # not a string and not iterable
            items = ()
        if not items or any(e not in ERROR_CHOICES for e in items):
            raise ParameterError("error", error, "'train', 'test', 'both' or a tuple of 'train' and 'test'")
        return tuple(e for e in ERROR_CHOICES if e in items)
    if error not in ERROR_CHOICES:
        raise ParameterError("error", error, "'train' (the memorisation error) or 'test' (the generalisation error)")
    return error
