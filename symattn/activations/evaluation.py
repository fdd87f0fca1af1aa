r"""Numeric evaluators of an activation f: numpy, torch and mpmath callables (docs/theory.md §1.1).

The kernel of docs/theory.md §1.1 applies f entrywise to arrays (numpy, for the theory's
quadratures and the Monte Carlo) and to tensors (torch, for the GPU Monte Carlo). This module
turns a SymPy expression in :data:`~symattn.activations.catalog.X` (or a user's callable) into
those functions of the *uncentred* f; :class:`~symattn.activations.activation.Activation`
subtracts a0.

- :func:`numpy_function` -- ``sympy.lambdify`` to scipy/numpy, except for the catalog entries
  whose lambdified form overflows (sigmoid, softplus, silu use ``expit`` / ``logaddexp``);
- :func:`numpy_from_callable` -- a callable wrapped to act elementwise on float64 arrays;
- :func:`torch_function` / :func:`torch_compile` -- a hand-written translation of the expression
  tree to torch operations (tanh, erf, exp, log, powers, Max/Min, Abs, sign, Heaviside,
  Piecewise with relational conditions), with torch overrides for a few catalog entries;
- :func:`mpmath_function` -- ``sympy.lambdify`` to mpmath, for the quadratures at any precision.

torch is imported only when a torch function is asked for.
"""

from __future__ import annotations

import operator
from functools import reduce

import numpy as np
import sympy as sp
from mpmath import mp

from .catalog import X

__all__ = ["numpy_function", "numpy_from_callable", "torch_function", "torch_compile", "mpmath_function"]


def numpy_function(expr, catalog_name: str | None = None):
    """A vectorised float64 evaluator of the uncentred f = ``expr``.

    Parameters
    ----------
    expr : sympy expression in X
    catalog_name : str or None
        For a catalog activation, its name: sigmoid, softplus and silu then use the
        overflow-free forms expit(t), logaddexp(0, t), t·expit(t).

    Returns
    -------
    callable
        ``t -> f(t)`` on numpy arrays.

    Examples
    --------
    >>> f = numpy_function(sp.log(1 + sp.exp(X)), "softplus")
    >>> f(np.array([0.0, 1000.0])).tolist() == [np.log(2.0), 1000.0]
    True
    """
    override = _numpy_overrides(catalog_name) if catalog_name is not None else None
    if override is not None:
        return override
    return sp.lambdify(X, expr, ["scipy", "numpy"])


def numpy_from_callable(f):
    """``f`` as an elementwise float64 function: as is if it maps arrays to arrays of the same
    shape, otherwise ``numpy.vectorize`` of ``float(f(float(t)))``.

    Parameters
    ----------
    f : callable
        A function of one real variable.

    Returns
    -------
    callable
        ``t -> f(t)`` on numpy arrays, as float64.

    Examples
    --------
    >>> import math
    >>> numpy_from_callable(math.tanh)(np.array([0.0, 1.0])).round(6).tolist()
    [0.0, 0.761594]
    """
    try:
        probe = np.array([0.25, -0.5, 1.5])
        r = np.asarray(f(probe), dtype=float)
        if r.shape == probe.shape:
            return lambda t: np.asarray(f(t), dtype=float)
    except Exception:
        pass
    return np.vectorize(lambda v: float(f(float(v))), otypes=[float])


def mpmath_function(expr):
    """``sympy.lambdify`` of the uncentred f = ``expr`` to mpmath (at the working precision), bounded:
    e^a, sinh a, cosh a and b^a with an argument beyond :data:`MP_EXP_LIMIT` (|a log b| for b^a) raise
    OverflowError instead of computing a number of astronomically many digits (``exp(exp(exp(x)))``).

    Parameters
    ----------
    expr : sympy expression in X

    Returns
    -------
    callable
        ``t -> f(t)`` on mpmath numbers.

    Examples
    --------
    >>> from mpmath import mp
    >>> with mp.workdps(30):
    ...     print(mpmath_function(sp.erf(X))(mp.mpf(1)))
    0.842700792949714869341220635083
    >>> mpmath_function(sp.exp(sp.exp(sp.exp(X))))(mp.mpf(40))
    Traceback (most recent call last):
    ...
    OverflowError: exp of an argument of size 2.3539e+17 exceeds e^1e+06
    """
    guarded = expr.replace(lambda e: e.is_Pow and e.exp.has(X), lambda e: _GPOW(e.base, e.exp))
    return sp.lambdify(X, guarded, [_MP_GUARDS, "mpmath"])


#: the largest argument a of e^a (and of sinh, cosh, b^a) that :func:`mpmath_function` evaluates: e^(10^6)
#: is about 10^434294; beyond it ``e^(e^(e^x))`` would need astronomically many digits, so the evaluation
#: stops with OverflowError instead of running for ever
MP_EXP_LIMIT = 10**6
_GPOW = sp.Function("symattn_guarded_pow")


def _overflow(name, a):
    raise OverflowError(f"{name} of an argument of size {mp.nstr(a, 5)} exceeds e^{MP_EXP_LIMIT:.0e}")


def _gexp(a):
    r = mp.re(a)
    if r > MP_EXP_LIMIT:
        _overflow("exp", r)
    return mp.zero if r < -MP_EXP_LIMIT else mp.exp(a)


def _gsinh(a):
    if abs(mp.re(a)) > MP_EXP_LIMIT:
        _overflow("sinh", a)
    return mp.sinh(a)


def _gcosh(a):
    if abs(mp.re(a)) > MP_EXP_LIMIT:
        _overflow("cosh", a)
    return mp.cosh(a)


def _gpow(b, e):
    if b != 0 and abs(mp.re(e) * mp.log(abs(b))) > MP_EXP_LIMIT:
        _overflow("power", mp.re(e) * mp.log(abs(b)))
    return mp.power(b, e)


_MP_GUARDS = {"exp": _gexp, "sinh": _gsinh, "cosh": _gcosh, "symattn_guarded_pow": _gpow}


def torch_function(expr, catalog_name: str | None = None):
    """A torch evaluator of the uncentred f = ``expr``, or None if it has no torch translation.

    Parameters
    ----------
    expr : sympy expression in X
    catalog_name : str or None
        For a catalog activation, its name: sigmoid, softplus, silu and relu then use
        torch.sigmoid, logaddexp(t, 0), t·sigmoid(t), clamp(t, min=0).

    Returns
    -------
    callable or None
        ``t -> f(t)`` on tensors (same device and dtype), from :func:`torch_compile`; None if a
        function of ``expr`` has no translation.

    Examples
    --------
    >>> import importlib.util
    >>> if importlib.util.find_spec("torch"):
    ...     import torch
    ...     print(torch_function(sp.Max(X, 0) + sp.tanh(X))(torch.tensor([-1.0, 0.0])).tolist())
    ... else:
    ...     print([-0.7615941762924194, 0.0])
    [-0.7615941762924194, 0.0]
    """
    if catalog_name is not None:
        o = _torch_overrides(catalog_name)
        if o is not None:
            return o
    try:
        return torch_compile(expr)
    except (KeyError, TypeError, ValueError):
        return None


def torch_compile(expr):
    """Translate ``expr`` into a function tensor -> tensor built from torch operations.

    Parameters
    ----------
    expr : sympy expression in X
        Made of numbers, X, Add, Mul, Pow, Max/Min, Heaviside (value 1/2 at 0), Piecewise with
        relational, And/Or/Not conditions, and tanh, sinh, cosh, sin, cos, tan, exp, log, erf,
        erfc, atan, asinh, Abs, sign.

    Returns
    -------
    callable
        ``t -> f(t)``; a constant expression gives a Python float.

    Raises
    ------
    KeyError
        A node without a translation (or a non-real constant).

    Examples
    --------
    >>> import importlib.util
    >>> if importlib.util.find_spec("torch"):
    ...     import torch
    ...     print(torch_compile(sp.Piecewise((X, X > 1), (X**2, True)))(torch.tensor([0.5, 2.0])).tolist())
    ... else:
    ...     print([0.25, 2.0])
    [0.25, 2.0]
    """
    import torch

    funcs = {
        sp.tanh: torch.tanh, sp.sinh: torch.sinh, sp.cosh: torch.cosh,
        sp.sin: torch.sin, sp.cos: torch.cos, sp.tan: torch.tan,
        sp.exp: torch.exp, sp.log: torch.log, sp.erf: torch.special.erf,
        sp.erfc: torch.special.erfc, sp.atan: torch.atan, sp.asinh: torch.asinh,
        sp.Abs: torch.abs, sp.sign: torch.sign,
    }

    def tensorlike(v, t):
        return v if isinstance(v, torch.Tensor) else torch.full_like(t, float(v))

    def build(e):
        if e == X:
            return lambda t: t
        if not e.has(X):
            c = complex(e)
            if c.imag != 0:
                raise KeyError(e)
            c = c.real
            return lambda t: c
        if e.is_Add:
            fs = [build(a) for a in e.args]
            return lambda t: reduce(lambda u, v: u + v, (f(t) for f in fs))
        if e.is_Mul:
            fs = [build(a) for a in e.args]
            return lambda t: reduce(lambda u, v: u * v, (f(t) for f in fs))
        if e.is_Pow:
            b = build(e.base)
            if not e.exp.has(X):
                if e.exp == sp.Rational(1, 2):
                    return lambda t: torch.sqrt(tensorlike(b(t), t))
                p = int(e.exp) if e.exp.is_Integer else float(e.exp)
                return lambda t: tensorlike(b(t), t) ** p
            q = build(e.exp)
            return lambda t: torch.pow(tensorlike(b(t), t), tensorlike(q(t), t))
        if isinstance(e, (sp.Max, sp.Min)):
            op = torch.maximum if isinstance(e, sp.Max) else torch.minimum
            fs = [build(a) for a in e.args]
            return lambda t: reduce(lambda u, v: op(tensorlike(u, t), tensorlike(v, t)), (f(t) for f in fs))
        if isinstance(e, sp.Heaviside):
            a = build(e.args[0])
            return lambda t: torch.heaviside(tensorlike(a(t), t), torch.full_like(t, 0.5))
        if isinstance(e, sp.Piecewise):
            branches = [(build(v), buildc(c)) for v, c in e.args]

            def pw(t):
                out = None
                for v, c in reversed(branches):
                    vt = tensorlike(v(t), t)
                    out = vt if out is None else torch.where(c(t), vt, out)
                return out
            return pw
        if type(e) in funcs:
            g = funcs[type(e)]
            a = build(e.args[0])
            return lambda t: g(tensorlike(a(t), t))
        raise KeyError(e)

    def buildc(c):
        if c == sp.true or c is True:
            return lambda t: torch.ones_like(t, dtype=torch.bool)
        ops = {sp.StrictGreaterThan: operator.gt, sp.GreaterThan: operator.ge,
               sp.StrictLessThan: operator.lt, sp.LessThan: operator.le,
               sp.Equality: operator.eq, sp.Unequality: operator.ne}
        if type(c) in ops:
            lhs, rhs, op = build(c.lhs), build(c.rhs), ops[type(c)]
            return lambda t: op(tensorlike(lhs(t), t), tensorlike(rhs(t), t))
        if isinstance(c, sp.And):
            cs = [buildc(a) for a in c.args]
            return lambda t: reduce(torch.logical_and, (f(t) for f in cs))
        if isinstance(c, sp.Or):
            cs = [buildc(a) for a in c.args]
            return lambda t: reduce(torch.logical_or, (f(t) for f in cs))
        if isinstance(c, sp.Not):
            f = buildc(c.args[0])
            return lambda t: torch.logical_not(f(t))
        raise KeyError(c)

    return build(expr)


def _torch_overrides(name):
    import torch

    table = {
        "sigmoid": torch.sigmoid,
        "softplus": lambda t: torch.logaddexp(t, torch.zeros_like(t)),
        "silu": lambda t: t * torch.sigmoid(t),
        "relu": lambda t: torch.clamp(t, min=0),
    }
    return table.get(name)


def _numpy_overrides(name):
    from scipy.special import expit

    table = {
        "sigmoid": expit,
        "softplus": lambda t: np.logaddexp(0.0, t),
        "silu": lambda t: t * expit(t),
    }
    return table.get(name)
