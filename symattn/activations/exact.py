r"""Exact Hermite coefficients of an activation expression, piece by piece (docs/theory.md §1.2).

For f with analytic pieces f_j on (k_j, k_{j+1}) (:func:`~symattn.activations.analysis.pieces`),

.. math::  a_k = \frac{1}{\sqrt{k!}} \sum_j \int_{k_j}^{k_{j+1}} f_j(x)\,\mathrm{He}_k(x)\,φ(x)\,dx ,

each integral in closed form by Gaussian calculus
(:func:`~symattn.activations.hermite.exact_gaussian_expectation`), else by ``sympy.integrate``
within a deadline, except where no closed form is expected (:func:`closed_form_unlikely`).
"""

from __future__ import annotations

import time

import sympy as sp

from ..timeouts import FAILED, TIMEOUT, time_limited
from .analysis import too_large_for_sympy
from .catalog import X
from .expression import clear_sympy_cache
from .hermite import exact_gaussian_expectation

__all__ = ["exact_hermite_coefficient", "closed_form_unlikely"]

# Functions for which a closed form of E[f He_k] is not expected: no sympy.integrate attempt.
_NO_CLOSED_FORM = (sp.tanh, sp.coth, sp.sech, sp.csch, sp.log, sp.atan, sp.acot, sp.asinh,
                   sp.acosh, sp.atanh, sp.tan, sp.cot, sp.sec, sp.csc, sp.LambertW, sp.erfi)


def closed_form_unlikely(expr) -> bool:
    """Whether ``sympy.integrate`` of f·He_k·φ is not worth trying for f = ``expr``.

    Parameters
    ----------
    expr : sympy expression in X

    Returns
    -------
    bool
        True if ``expr`` contains tanh, log, atan, the other inverse or reciprocal trigonometric
        and hyperbolic functions, LambertW or erfi, or x inside a denominator that is not x
        itself (rational functions of exp(x) such as sigmoid and silu, or of |x| as softsign), or if
        it is too large for SymPy (:func:`~symattn.activations.analysis.too_large_for_sympy`).

    Examples
    --------
    >>> closed_form_unlikely(1 / (1 + sp.exp(-X))), closed_form_unlikely(X * sp.erf(X))
    (True, False)
    """
    if expr.has(*_NO_CLOSED_FORM) or too_large_for_sympy(expr):
        return True
    for node in sp.preorder_traversal(expr):
        if node.is_Pow and node.exp.is_negative and node.base.has(X) and not node.base.is_Symbol:
            return True
    return False


def exact_hermite_coefficient(expr, k: int, pieces, deadline: float):
    r"""a_k = E[f(ξ) He_k(ξ)]/√(k!) as an exact SymPy number, or None.

    Parameters
    ----------
    expr : sympy expression in X
        The (uncentred) f; for k ≥ 1 centring does not change a_k.
    k : int
        The order, k ≥ 1.
    pieces : list of (lo, hi, piece)
        The analytic pieces of ``expr`` (:func:`~symattn.activations.analysis.pieces`).
    deadline : float
        ``time.monotonic()`` value after which the closed form and ``sympy.integrate`` are abandoned (None).

    Returns
    -------
    sympy number or None
        Σ_j ∫ piece_j He_k φ over (lo_j, hi_j), divided by √(k!), factored; None if some piece
        has no closed form in time.

    Examples
    --------
    >>> import time
    >>> from symattn.activations.analysis import pieces
    >>> f = sp.Max(X, 0)
    >>> exact_hermite_coefficient(f, 2, pieces(f, [sp.Integer(0)]), time.monotonic() + 2.0)
    1/(2*sqrt(pi))
    """
    He = sp.hermite_prob(k, X)
    total = sp.Integer(0)
    for lo, hi, piece in pieces:
        v = exact_gaussian_expectation(piece * He, X, lo, hi, simplify=False, deadline=deadline)
        if v is None:
            total = None
            break
        total += v
    if total is None:
        if closed_form_unlikely(expr):
            return None
        phi = sp.exp(-X**2 / 2) / sp.sqrt(2 * sp.pi)

        def _integrate():
            acc = sp.Integer(0)
            for lo, hi, piece in pieces:
                r = sp.integrate(piece * He * phi, (X, lo, hi))
                if r.has(sp.Integral) or not r.is_finite:
                    raise ValueError("no closed form")
                acc += r
            return acc

        total = time_limited(_integrate, deadline - time.monotonic())
        if total is TIMEOUT:
            clear_sympy_cache()
        if total is TIMEOUT or total is FAILED:
            return None
    return sp.factor_terms(sp.expand(total / sp.sqrt(sp.factorial(k))))
