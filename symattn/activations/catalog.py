r"""The named activations: the variable x, the catalog, its descriptions and aliases (docs/theory.md §1.2).

Every activation expression of :mod:`symattn.activations` is a SymPy expression in the one real
symbol :data:`X`. The catalog maps a name to the *uncentred* f; the model uses f − E f(ξ),
ξ ~ N(0, 1) (docs/theory.md §1.2). Names are looked up case-insensitively, with the aliases
:data:`ALIASES` (identity, id, swish, logistic), by :func:`catalog_name`; an unknown name gives an
:class:`~symattn.errors.ActivationError` with close matches (:func:`unknown_name_error`).

This module knows only names: turning strings into expressions is :mod:`.parsing`.
"""

from __future__ import annotations

import difflib

import sympy as sp

from ..errors import ActivationError

__all__ = ["X", "LEAKY_RELU_SLOPE", "CATALOG", "CATALOG_DESCRIPTIONS", "ALIASES",
           "catalog_name", "unknown_name_error"]

#: The variable of every activation expression (real).
X = sp.Symbol("x", real=True)

#: Slope of leaky_relu for x < 0 (f(x) = max(x, x/10)).
LEAKY_RELU_SLOPE = sp.Rational(1, 10)

_x = X
#: name -> SymPy expression in :data:`X` of the *uncentred* activation.
CATALOG: dict = {
    "tanh": sp.tanh(_x),
    "erf": sp.erf(_x),
    "relu": sp.Max(_x, 0),
    "leaky_relu": sp.Max(_x, LEAKY_RELU_SLOPE * _x),
    "elu": sp.Piecewise((_x, _x > 0), (sp.exp(_x) - 1, True)),
    "gelu": _x * (1 + sp.erf(_x / sp.sqrt(2))) / 2,
    "silu": _x / (1 + sp.exp(-_x)),
    "sigmoid": 1 / (1 + sp.exp(-_x)),
    "softplus": sp.log(1 + sp.exp(_x)),
    "softsign": _x / (1 + sp.Abs(_x)),
    "sin": sp.sin(_x),
    "cos": sp.cos(_x),
    "abs": sp.Abs(_x),
    "linear": _x,
    "exp": sp.exp(_x),
    "he2": _x**2 - 1,
    "he3": _x**3 - 3 * _x,
    "he4": _x**4 - 6 * _x**2 + 3,
}

#: name -> one-line description.
CATALOG_DESCRIPTIONS: dict = {
    "tanh": "hyperbolic tangent",
    "erf": "error function erf(x)",
    "relu": "max(x, 0)",
    "leaky_relu": "max(x, x/10): slope 1/10 for x < 0 (LEAKY_RELU_SLOPE)",
    "elu": "x for x > 0, exp(x) - 1 for x <= 0 (alpha = 1)",
    "gelu": "exact GELU x*Phi(x) = x*(1 + erf(x/sqrt(2)))/2",
    "silu": "x*sigmoid(x) (swish)",
    "sigmoid": "logistic 1/(1 + exp(-x))",
    "softplus": "log(1 + exp(x))",
    "softsign": "x/(1 + |x|)",
    "sin": "sine",
    "cos": "cosine",
    "abs": "|x|",
    "linear": "identity x",
    "exp": "exponential (superlinear: d = inf)",
    "he2": "Hermite polynomial He2 = x^2 - 1 (superlinear)",
    "he3": "Hermite polynomial He3 = x^3 - 3x (superlinear)",
    "he4": "Hermite polynomial He4 = x^4 - 6x^2 + 3 (superlinear)",
}

#: alias -> catalog name.
ALIASES: dict = {"identity": "linear", "id": "linear", "swish": "silu", "logistic": "sigmoid"}


def catalog_name(spec: str) -> str | None:
    """The catalog name that ``spec`` denotes, or None.

    Parameters
    ----------
    spec : str
        A candidate name; surrounding blanks and letter case are ignored, and an alias of
        :data:`ALIASES` resolves to its catalog name.

    Returns
    -------
    str or None
        ``name`` with ``CATALOG[name]`` the uncentred f, or None if ``spec`` names nothing.

    Examples
    --------
    >>> catalog_name(" Swish "), catalog_name("relu"), catalog_name("x*erf(x)")
    ('silu', 'relu', None)
    """
    key = spec.strip().lower()
    if key in CATALOG:
        return key
    return ALIASES.get(key)


def unknown_name_error(name: str) -> ActivationError:
    """The error for a name that is neither in the catalog nor an alias, with close matches.

    Parameters
    ----------
    name : str
        The name that was given.

    Returns
    -------
    ActivationError
        Its message lists up to three close names (difflib ratio ≥ 0.5), the catalog, and how
        to give an expression instead.

    Examples
    --------
    >>> "Did you mean 'tanh'?" in str(unknown_name_error("tanhh"))
    True
    """
    names = sorted(CATALOG) + sorted(ALIASES)
    close = difflib.get_close_matches(name.lower(), names, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ActivationError(
        f"unknown activation {name!r}.{hint} Catalog: {', '.join(sorted(CATALOG))}. "
        "Or give a SymPy expression in x, e.g. 'x*erf(x)' or 'atan(x)'.")
