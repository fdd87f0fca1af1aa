r"""Gaussian quadrature rules, in one place (base layer: numpy and mpmath only).

- :func:`composite_gauss_legendre`: the m-point Gauss–Legendre rule on each panel [e_k, e_{k+1}],

  ∫_{e_0}^{e_K} g(x) dx ≈ Σ_k Σ_i (e_{k+1} − e_k)/2 · w_i · g((e_k + e_{k+1})/2 + (e_{k+1} − e_k)/2 · x_i),

  used for one-dimensional expectations with kinks at panel edges (the finite-p diagonal d_n,
  the shifted-Gaussian moments of docs/theory.md §10.2, the latent diagonal of §10.3).
- :func:`gauss_hermite`: probabilists' Gauss–Hermite nodes and weights normalised to sum 1,
  E g(ξ) ≈ Σ_i w_i g(x_i), ξ ~ N(0, 1), in float64 or at ``dps`` digits (Golub–Welsch).

The Marchenko–Pastur rule of the bulk system lives in :mod:`symattn.backends.quadrature`,
since it is written against an arithmetic context.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=32)
def _legendre(m: int):
    return np.polynomial.legendre.leggauss(m)


def composite_gauss_legendre(edges, m: int = 16, flat: bool = True):
    """Nodes and weights of the m-point Gauss–Legendre rule on every panel of ``edges``.

    Parameters
    ----------
    edges : array_like, shape (K + 1,)
        Increasing panel edges.
    m : int
        Nodes per panel.
    flat : bool
        Return 1-D arrays of K·m nodes (default), or arrays of shape (K, m), one row per panel.

    Returns
    -------
    x, w : numpy.ndarray
        Σ w g(x) approximates ∫ g over [edges[0], edges[-1]].

    Examples
    --------
    >>> x, w = composite_gauss_legendre([0.0, 1.0, 2.0], m=4)
    >>> round(float(np.sum(w * x**3)), 12)
    4.0
    """
    e = np.asarray(edges, dtype=float)
    xg, wg = _legendre(int(m))
    a, b = e[:-1, None], e[1:, None]
    x = (a + b) / 2 + (b - a) / 2 * xg
    w = (b - a) / 2 * wg * np.ones_like(x)
    return (x.ravel(), w.ravel()) if flat else (x, w)


def gauss_hermite(nq: int, dps: int | None = None):
    """Probabilists' Gauss–Hermite rule: E g(ξ) ≈ Σ w_i g(x_i), ξ ~ N(0, 1), Σ w_i = 1.

    Parameters
    ----------
    nq : int
        Number of nodes.
    dps : int or None
        None for float64 arrays; otherwise object arrays of mpmath numbers at ``dps`` digits
        (Golub–Welsch on the Jacobi matrix of He_k, computed with 10 guard digits).

    Returns
    -------
    x, w : numpy.ndarray
        Nodes in increasing order and weights.

    Examples
    --------
    >>> x, w = gauss_hermite(5)
    >>> round(float(np.sum(w * x**4)), 12)   # E ξ⁴ = 3
    3.0
    """
    if dps is None:
        x, w = np.polynomial.hermite_e.hermegauss(nq)
        return x, w / w.sum()
    from mpmath import mp

    with mp.workdps(dps + 10):
        J = mp.matrix(nq, nq)
        for i in range(nq - 1):
            J[i, i + 1] = J[i + 1, i] = mp.sqrt(i + 1)
        E, Q = mp.eigsy(J)
        x = [E[i] for i in range(nq)]
        w = [Q[0, i] ** 2 for i in range(nq)]
        order = sorted(range(nq), key=lambda i: x[i])
        tot = mp.fsum(w)
    with mp.workdps(dps):
        return (np.array([+x[i] for i in order], dtype=object), np.array([w[i] / tot for i in order], dtype=object))
