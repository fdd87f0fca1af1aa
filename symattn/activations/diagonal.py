r"""The diagonal constants of an activation: d and the finite-p d_n (docs/theory.md §1.3).

The diagonal entries of the kernel are f(‖x_i‖²_W/√p)/√p, with f the centred activation. Their
limit and their finite-p mean are

.. math::

    d = \lim_{p\to\infty} f(\sqrt p)/\sqrt p, \qquad
    d_n = \mathbb E f(\lVert x\rVert^2/\sqrt p)/\sqrt p,\quad \lVert x\rVert^2 \sim χ^2_p(m_2).

- :func:`symbolic_diagonal` -- d by ``sympy.limit`` of f(x)/x on the analytic piece right of the
  last kink, within ``LIMIT_SECONDS`` (:mod:`symattn.timeouts`);
- :func:`numeric_diagonal` -- d from (f(x) − a0)/x at x = 10⁶, 10⁹, 10¹² (convergence, growth, or
  neither);
- :func:`finite_p_diagonal` -- d_n by composite Gauss–Legendre quadrature in r = ‖x‖
  (:func:`symattn.gauss.composite_gauss_legendre`), refined until two rules agree.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import sympy as sp
from mpmath import mp

from ..errors import QuadratureWarning
from ..gauss import composite_gauss_legendre
from ..timeouts import FAILED, LIMIT_SECONDS, TIMEOUT, time_limited
from .analysis import pieces, too_large_for_sympy
from .catalog import X
from .expression import clear_sympy_cache

__all__ = ["symbolic_diagonal", "numeric_diagonal", "finite_p_diagonal"]


def symbolic_diagonal(expr, exact_kinks=None):
    r"""d = lim_{x→∞} f(x)/x by ``sympy.limit``, or None if SymPy gives no usable answer.

    Parameters
    ----------
    expr : sympy expression in X
        The uncentred f (the constant a0 does not change the limit).
    exact_kinks : list or None
        Its exact kinks; when given, the limit is taken of the analytic piece to the right of
        the last one (:func:`~symattn.activations.analysis.pieces`).

    Returns
    -------
    (float, sympy number or None) or None
        ``(d, exact d)``; ``(±inf, ±oo)`` for a superlinear f; ``(nan, None)`` if the limit
        does not exist (an AccumBounds, e.g. x·sin x); None if ``sympy.limit`` failed, ran past
        ``LIMIT_SECONDS`` or returned something that is not a real number, or if ``expr`` is too large
        for it (:func:`~symattn.activations.analysis.too_large_for_sympy`).

    Examples
    --------
    >>> symbolic_diagonal(sp.Max(X, 0), [sp.Integer(0)])
    (1.0, 1)
    >>> symbolic_diagonal(X**3 - 3 * X)
    (inf, oo)
    """
    if too_large_for_sympy(expr):
        return None
    e = expr
    if exact_kinks:
        try:
            e = pieces(e, exact_kinks)[-1][2]
        except Exception:
            e = expr
    r = time_limited(lambda: sp.limit(e / X, X, sp.oo), LIMIT_SECONDS)
    if r is TIMEOUT:
        clear_sympy_cache()
    if r is not TIMEOUT and r is not FAILED and isinstance(r, sp.Basic):
        if r == sp.oo:
            return math.inf, r
        if r == -sp.oo:
            return -math.inf, r
        if isinstance(r, sp.AccumBounds) or r is sp.nan:
            return math.nan, None
        if r.is_number and r.is_real and not r.has(sp.Limit):
            return float(r), r
    return None


def numeric_diagonal(f_mp, a0: float) -> float:
    """d = lim (f(x) − a0)/x, estimated from x = 1e6, 1e9, 1e12 at 30 digits.

    Parameters
    ----------
    f_mp : callable
        The uncentred f on mpmath numbers, returning an mpf (it may raise on overflow).
    a0 : float
        E f(ξ).

    Returns
    -------
    float
        g(10¹²) (0.0 below 1e-9, else to 10 significant digits) if g(x) = (f(x) − a0)/x agrees
        at 10⁹ and 10¹² within 1e-6; ±inf if f overflows or |g| grows with one sign; nan otherwise.

    Examples
    --------
    >>> numeric_diagonal(lambda t: max(t, 0), 0.39894228)
    1.0
    >>> numeric_diagonal(lambda t: t * t, 1.0)
    inf
    """
    g = []
    with mp.workdps(30), np.errstate(all="ignore"):
        for xv in (1e6, 1e9, 1e12):
            try:
                v = f_mp(mp.mpf(xv))
            except (OverflowError, ValueError, ZeroDivisionError, ArithmeticError):
                v = mp.inf
            if not mp.isfinite(v):
                return math.inf
            g.append(float((v - a0) / xv))
    if abs(g[2] - g[1]) <= 1e-6 * max(1.0, abs(g[2])):
        return 0.0 if abs(g[2]) < 1e-9 else float(f"{g[2]:.10g}")
    if abs(g[2]) > abs(g[1]) > abs(g[0]) and np.sign(g[2]) == np.sign(g[1]):
        return math.copysign(math.inf, g[2])
    return math.nan


def finite_p_diagonal(f_np, a0: float, kinks, p: int, snr: float) -> float:
    r"""d_n = E f_c(‖x‖²/√p)/√p with ‖x‖² ~ χ²_p(snr), f_c = f − a0, by quadrature.

    In r = ‖x‖ (u = r²) the density 2r·pdf_{χ²}(r²) is smooth even for p = 1, and r is
    1-Lipschitz in the Gaussian vector, so P(|r − r0| > t) ≤ 2e^{−t²/2} with r0 = √(p + snr):
    the panels [r0 − 40, r0 + 40] (cut at 0, and at r = √(k√p) for every kink k > 0) lose
    nothing. The 24- and 48-point Gauss–Legendre rules are compared panel by panel and the
    panels that disagree by more than 1e-13 (relative) are halved, up to 8 times.

    Parameters
    ----------
    f_np : callable
        The uncentred f on float64 arrays.
    a0 : float
        E f(ξ).
    kinks : sequence of float
        The kinks of f.
    p : int
        Dimension, p ≥ 1.
    snr : float
        Non-centrality m_2 = ‖μ‖² ≥ 0 (scipy.stats.chi2 for 0, ncx2 otherwise).

    Returns
    -------
    float
        d_n (a :class:`~symattn.errors.QuadratureWarning` if 1e-13 was not reached).

    Examples
    --------
    >>> p = 100   # ReLU: d_n = (p + snr)/p − 1/√(2πp) exactly
    >>> a0 = 1 / math.sqrt(2 * math.pi)
    >>> round(finite_p_diagonal(lambda t: np.maximum(t, 0.0), a0, [0.0], p, 0.0), 12)
    0.96010577196
    >>> round(1 - 1 / math.sqrt(2 * math.pi * p), 12)
    0.96010577196
    """
    from scipy import stats

    dist = stats.chi2(p) if snr == 0 else stats.ncx2(p, snr)
    sqp = math.sqrt(p)
    r0 = math.sqrt(p + snr)
    offs = [-40, -20, -12, -8, -6, -4, -3, -2, -1, 0, 1, 2, 3, 4, 6, 8, 12, 20, 40]
    pts = {max(0.0, r0 + o) for o in offs}
    pts |= {math.sqrt(k * sqp) for k in kinks if k > 0}
    edges = np.array(sorted(pts))

    def rule(edges, n):
        r, w = composite_gauss_legendre(edges, n, flat=False)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            dens = 2 * r * dist.pdf(r * r)
            vals = (np.asarray(f_np(r * r / sqp), dtype=float) - a0) * dens
        vals = np.where(dens == 0, 0.0, vals)
        return np.sum(w * vals, axis=1)

    for _ in range(8):
        coarse, fine = rule(edges, 24), rule(edges, 48)
        bad = np.abs(fine - coarse) > 1e-13 * max(1.0, float(np.sum(np.abs(fine))))
        if not bad.any():
            break
        mids = (edges[:-1] + edges[1:])[bad] / 2
        edges = np.sort(np.concatenate([edges, mids]))
    else:
        warnings.warn(f"d_n quadrature for p={p}, snr={snr} did not reach 1e-13 "
                      f"(panel disagreement {float(np.max(np.abs(fine - coarse))):.2e})",
                      QuadratureWarning, stacklevel=3)
    return float(np.sum(fine)) / sqp
