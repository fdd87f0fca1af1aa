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
from .validation import _as_float_array, check_dps, check_int, check_nonnegative, check_positive

__all__ = [
    "DIAGONAL_MODES", "Geometry", "KernelConstants", "as_geometry", "kernel_constants", "dimension",
    "check_c", "check_gamma", "check_diagonal", "check_dps", "check_int", "check_positive", "check_nonnegative",
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


# ----------------------------------------------------------------------------- geometry
class Geometry:
    r"""Gram matrix 𝔊 of the vectors (μ, w_K^{(1..r)}, w_Q^{(1..r)}), docs/theory.md §1 and preface.

    The model only sees these inner products. For rank one (the paper's setting)::

        Geometry(snr=‖μ‖², wk2=‖w_K‖², wq2=‖w_Q‖², mu_wk=μᵀw_K, mu_wq=μᵀw_Q, wk_wq=w_Kᵀw_Q)

    so that W_K^T W_Q = I_p + w_K w_Q^T. Rank-r weights come from :meth:`from_vectors`
    or :meth:`from_gram`, with the order (μ, w_K^{(1)}, ..., w_K^{(r)}, w_Q^{(1)}, ..., w_Q^{(r)}).
    """

    def __init__(self, snr: float = 0.0, wk2: float = 0.0, wq2: float = 0.0,
                 mu_wk: float = 0.0, mu_wq: float = 0.0, wk_wq: float = 0.0):
        vals = {"snr": snr, "wk2": wk2, "wq2": wq2, "mu_wk": mu_wk, "mu_wq": mu_wq, "wk_wq": wk_wq}
        for name, v in vals.items():
            arr = _as_float_array(name, v)
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
        g = _as_float_array("gram", gram)
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
        mu = _as_float_array("mu", mu)
        if mu.ndim != 1:
            raise ParameterError("mu", mu.shape, "a vector of shape (p,)")
        p = mu.shape[0]
        ws = []
        for name, w in (("wk", wk), ("wq", wq)):
            w = np.zeros((1, p)) if w is None else np.atleast_2d(_as_float_array(name, w))
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

    @property
    def is_null(self) -> bool:
        """True when μ = 0 and every weight vanishes (the bulk case)."""
        return bool(np.all(self.gram == 0))

    def vectors(self, p: int):
        """Explicit vectors (μ, w_K, w_Q) in R^p, shapes (p,), (r, p), (r, p), with this Gram matrix."""
        k = self.gram.shape[0]
        if p < k:
            raise ParameterError("p", p, f"p >= {k} to embed the geometry")
        eig, vec = np.linalg.eigh(self.gram)
        # eigenvalues at rounding level are exact zeros (e.g. the aligned geometry has rank 1):
        # their square roots (~1e-8) would otherwise make w_K = mu only to 1e-8
        scale = max(1.0, float(np.max(np.abs(eig))))
        eig = np.where(eig > 1e-14 * k * scale, eig, 0.0)
        coords = vec * np.sqrt(eig)  # rows: coordinates of each vector
        V = np.zeros((k, p))
        V[:, :k] = coords
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


def signal_strength(geometry, n: int, c) -> np.ndarray:
    r"""The finite-p signal strength t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p, p = round(c n).

    It is the scale of the signal part of the kernel argument; the asymptotic theory needs
    |t| small, and |t| > :data:`STRONG_SIGNAL_T` calls for the finite-p correction (docs/theory.md §10.1).

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
    geom = as_geometry(geometry)
    n = check_int("n", n, 2)
    cs = np.atleast_1d(check_c(c))
    ts = np.array([geom.strength(dimension(n, ci)) for ci in cs.ravel()]).reshape(cs.shape)
    return ts if np.ndim(c) else ts.reshape(())


def as_geometry(geometry) -> Geometry:
    """Accept None (μ = w = 0), a Geometry, or a dict of Geometry keywords."""
    if geometry is None:
        return Geometry()
    if isinstance(geometry, Geometry):
        return geometry
    if isinstance(geometry, dict):
        return Geometry(**geometry)
    raise ParameterError("geometry", geometry, "a symattn.Geometry, a dict of its keywords, or None")


# ----------------------------------------------------------------------------- linearised kernel
@dataclass(frozen=True)
class KernelConstants:
    r"""Constants of the linearised kernel K_lin = a1(XᵀWX/p − I) + s N/√p + d I (docs/theory.md §4).

    ``d`` may be an array (one value per c when the finite-p diagonal d_n is used).
    With ``dps`` set, ``a1``, ``s2``, ``d`` are mpmath numbers at that precision.
    """

    a1: object
    s2: object
    d: object

    @property
    def nu(self):
        return self.s2 + self.a1**2


def kernel_constants(f, diagonal: str = "f", n: int | None = None, c=None, snr: float = 0.0,
                     dps: int | None = None) -> KernelConstants:
    r"""The constants (a1, s² = ν − a1², d) that the deterministic equivalents need.

    - ``diagonal='f'``: d = d∞ = lim f(√p)/√p, or, when ``n`` is given, the finite-p value
      d_n = E f(‖x‖²/√p)/√p with ‖x‖² ~ χ²_p(‖μ‖²) and p = round(c·n) (docs/theory.md §1).
    - ``diagonal='zero'``: d = 0.

    A superlinear f (d = ∞, e.g. He3 or exp) with ``diagonal='f'`` raises ParameterError.
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
        n = check_int("n", n, 2)
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
