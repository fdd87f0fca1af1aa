r"""Where an activation expression is not analytic, and its analytic pieces (docs/theory.md §1.2).

The quadratures of docs/theory.md §1.2 split the real line at the kinks of f, and the closed
forms integrate f piece by piece. For a SymPy expression f in :data:`~symattn.activations.catalog.X`:

- :func:`real_roots` -- the real zeros of g(x), exactly;
- :func:`find_kinks` -- the points where f is not analytic (zeros of the arguments of Abs, sign,
  Heaviside; of the pairwise differences in Max/Min; the boundaries of Piecewise conditions);
- :func:`special_points` -- the points where f may be singular (zeros of denominators and of
  log arguments), at which the construction checks that f is finite;
- :func:`select_piece` and :func:`pieces` -- the analytic expression that equals f near a point,
  and the list ``[(lo, hi, piece)]`` covering ℝ between consecutive kinks.
"""

from __future__ import annotations

import math
from itertools import combinations

import numpy as np
import sympy as sp

from ..timeouts import SOLVESET_SECONDS, TIMEOUT, time_limited
from .catalog import X

__all__ = ["real_roots", "find_kinks", "special_points", "select_piece", "pieces", "symbolic_size", "too_large_for_sympy",
           "SYMBOLIC_NODES", "SYMBOLIC_DEPTH"]

#: the largest expression given to open-ended SymPy work (``limit``, ``integrate``): tree nodes and nesting
#: depth of functions; beyond it the numeric paths answer (their own bounds apply), in bounded time
SYMBOLIC_NODES = 200
SYMBOLIC_DEPTH = 8


def symbolic_size(expr) -> tuple:
    """(tree nodes, nesting depth of function applications) of a SymPy expression.

    Examples
    --------
    >>> symbolic_size(sp.sin(sp.sin(X)) + X**2)
    (7, 2)
    """
    def depth(e):
        inner = max((depth(a) for a in e.args), default=0)
        return inner + (1 if isinstance(e, sp.Function) else 0)

    return sum(1 for _ in sp.preorder_traversal(expr)), depth(expr)


def too_large_for_sympy(expr) -> bool:
    """Whether ``expr`` exceeds :data:`SYMBOLIC_NODES` nodes or :data:`SYMBOLIC_DEPTH` nested functions.

    Examples
    --------
    >>> deep = X
    >>> for _ in range(9):
    ...     deep = sp.sin(deep)
    >>> too_large_for_sympy(sp.tanh(X)), too_large_for_sympy(deep)
    (False, True)
    """
    nodes, depth = symbolic_size(expr)
    return nodes > SYMBOLIC_NODES or depth > SYMBOLIC_DEPTH


def real_roots(g):
    """Real zeros of g(x) as exact SymPy numbers, or None if they cannot be listed.

    Parameters
    ----------
    g : sympy expression in X
        A polynomial with numeric coefficients is solved by ``sympy.real_roots``; anything else
        by ``sympy.solveset`` over ℝ within ``SOLVESET_SECONDS`` (:mod:`symattn.timeouts`).

    Returns
    -------
    list or None
        The distinct real roots ({x ∈ ℝ : g(x) = 0}); ``[]`` if g does not depend on x or has no
        real zero; None if the zero set is not a finite set of real numbers or was not found in
        time.

    Examples
    --------
    >>> real_roots(X**2 - 2)
    [-sqrt(2), sqrt(2)]
    >>> real_roots(X - X / 10)
    [0]
    """
    g = sp.sympify(g, strict=True)  # never a string
    if not g.has(X):
        return []
    try:
        poly = sp.Poly(g, X)
        if all(c.is_number for c in poly.all_coeffs()):
            return list(dict.fromkeys(sp.real_roots(poly)))
    except (sp.PolynomialError, sp.GeneratorsNeeded, NotImplementedError):
        pass
    sol = time_limited(lambda: sp.solveset(g, X, sp.S.Reals), SOLVESET_SECONDS)
    if sol is TIMEOUT:
        from .expression import clear_sympy_cache

        clear_sympy_cache()
    if isinstance(sol, sp.FiniteSet) and all(r.is_real for r in sol):
        return list(sol)
    if sol is sp.S.EmptySet:
        return []
    return None


def find_kinks(expr):
    """The points where ``expr`` is not analytic, exactly, and whether the list is complete.

    Parameters
    ----------
    expr : sympy expression in X
        Sources of kinks: Abs, sign, Heaviside (zeros of the argument), Max/Min (zeros of the
        pairwise differences of the arguments), Piecewise (zeros of lhs − rhs of every relation
        in the conditions), each found by :func:`real_roots`.

    Returns
    -------
    kinks : list
        The distinct real kinks, sorted (two kinks within 1e-12 count as one).
    complete : bool
        False if some candidate's zeros could not be listed, or ``expr`` contains floor, ceiling
        or frac (infinitely many kinks).

    Examples
    --------
    >>> find_kinks(sp.Max(X, X / 10) + sp.Abs(X - 1))
    ([0, 1], True)
    >>> find_kinks(sp.floor(X))
    ([], False)
    """
    cands, complete = [], True
    for node in sp.preorder_traversal(expr):
        if isinstance(node, (sp.Abs, sp.sign, sp.Heaviside)):
            cands.append(node.args[0])
        elif isinstance(node, (sp.Max, sp.Min)):
            cands.extend(a - b for a, b in combinations(node.args, 2))
        elif isinstance(node, sp.Piecewise):
            for _, cond in node.args:
                if isinstance(cond, sp.logic.boolalg.Boolean):
                    for rel in cond.atoms(sp.core.relational.Relational):
                        cands.append(rel.lhs - rel.rhs)
        elif isinstance(node, (sp.floor, sp.ceiling, sp.frac)):
            complete = False
    roots = []
    for g in cands:
        r = real_roots(g)
        if r is None:
            complete = False
            continue
        roots.extend(r)
    uniq = {}
    for r in roots:
        uniq.setdefault(round(float(r), 12), r)
    return [uniq[k] for k in sorted(uniq)], complete


def special_points(expr) -> list:
    """Points where ``expr`` may be singular: the real zeros of denominators and of log arguments.

    Parameters
    ----------
    expr : sympy expression in X

    Returns
    -------
    list of float
        The real zeros of every base b(x) of a negative power b(x)^{-k} and of every argument of
        ``log``, where :func:`real_roots` can list them (repetitions kept).

    Examples
    --------
    >>> special_points(1 / (X - 2) + sp.log(X**2))
    [2.0, 0.0]
    """
    pts = []
    for node in sp.preorder_traversal(expr):
        arg = None
        if node.is_Pow and node.exp.is_negative and node.base.has(X):
            arg = node.base
        elif isinstance(node, sp.log) and node.args[0].has(X):
            arg = node.args[0]
        if arg is not None:
            r = real_roots(arg)
            if r:
                pts.extend(float(v) for v in r)
    return pts


def select_piece(expr, t):
    """The analytic expression that coincides with ``expr`` near the point ``t`` (not a kink).

    Parameters
    ----------
    expr : sympy expression in X
    t : sympy number
        A point that is not a kink of ``expr``.

    Returns
    -------
    sympy expression
        ``expr`` with every Piecewise replaced by its branch that holds at t, Abs(a) by ±a,
        Max/Min by the argument that is largest/smallest at t, Heaviside and sign by their
        constant value at t.

    Raises
    ------
    ValueError
        No branch of a Piecewise holds at t.

    Examples
    --------
    >>> select_piece(sp.Max(X, 0) + sp.Abs(X - 1), sp.Integer(3))
    2*x - 1
    >>> select_piece(sp.Max(X, 0) + sp.Abs(X - 1), sp.Integer(-3))
    1 - x
    """
    if expr.is_Atom or not expr.has(X):
        return expr

    def val(e):
        return float(e.subs(X, t))

    if isinstance(expr, sp.Piecewise):
        for e, cond in expr.args:
            c = cond.subs(X, t) if isinstance(cond, sp.logic.boolalg.Boolean) else cond
            if c == sp.true or c is True:
                return select_piece(e, t)
        raise ValueError("no Piecewise branch holds")
    if isinstance(expr, sp.Abs):
        a = select_piece(expr.args[0], t)
        return a if val(a) >= 0 else -a
    if isinstance(expr, (sp.Max, sp.Min)):
        args = [select_piece(a, t) for a in expr.args]
        vals = [val(a) for a in args]
        i = int(np.argmax(vals) if isinstance(expr, sp.Max) else np.argmin(vals))
        return args[i]
    if isinstance(expr, sp.Heaviside):
        return sp.Integer(1) if val(expr.args[0]) > 0 else sp.Integer(0)
    if isinstance(expr, sp.sign):
        return sp.Integer(1) if val(expr.args[0]) > 0 else sp.Integer(-1)
    return expr.func(*[select_piece(a, t) for a in expr.args])


def pieces(expr, kinks) -> list:
    """The analytic pieces of ``expr`` between consecutive kinks, covering the real line.

    Parameters
    ----------
    expr : sympy expression in X
    kinks : sequence of sympy numbers
        The exact kinks, sorted (as from :func:`find_kinks`).

    Returns
    -------
    list of (lo, hi, piece)
        With bounds −∞ = k_0 < k_1 < … < k_K < k_{K+1} = +∞, ``piece`` is
        :func:`select_piece` at a rational point inside (k_j, k_{j+1}), so that
        f = piece on that interval.

    Examples
    --------
    >>> pieces(sp.Max(X, 0), [sp.Integer(0)])
    [(-oo, 0, 0), (0, oo, x)]
    """
    bounds = [-sp.oo] + list(kinks) + [sp.oo]
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        if lo == -sp.oo and hi == sp.oo:
            t = sp.Integer(0)
        elif lo == -sp.oo:
            t = sp.nsimplify(math.floor(float(hi)) - 1)
        elif hi == sp.oo:
            t = sp.nsimplify(math.ceil(float(lo)) + 1)
        else:
            t = sp.Rational(sp.nsimplify((float(lo) + float(hi)) / 2, rational=True))
        out.append((lo, hi, select_piece(expr, t)))
    return out
