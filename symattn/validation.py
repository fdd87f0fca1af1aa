"""Generic parameter checks shared by every layer (each raises ParameterError naming the parameter)."""

from __future__ import annotations

import functools
import inspect
import math
from numbers import Integral, Real

import numpy as np

from .errors import KeywordError, ParameterError


def known_keywords(func):
    """Decorate a front function so that an unknown keyword raises :class:`~symattn.errors.KeywordError`
    (did-you-mean, the function's keywords) instead of Python's bare TypeError. The signature is kept.

    Examples
    --------
    >>> @known_keywords
    ... def f(c=0.5, gamma=1.0):
    ...     return c * gamma
    >>> f(gamma=2.0)
    1.0
    >>> try:
    ...     f(gama=2.0)
    ... except KeywordError as e:
    ...     print(e.suggestions)
    ['gamma']
    """
    params = inspect.signature(func).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return func
    names = tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")
    accepted = frozenset(names) | {"self"}
    label = func.__qualname__.replace(".__init__", "")

    @functools.wraps(func)
    def checked(*args, **kwargs):
        for key in kwargs:
            if key not in accepted:
                raise KeywordError(label, key, kwargs[key], names)
        return func(*args, **kwargs)

    return checked


def _not_a_number(value) -> bool:
    """True when ``value`` is (or contains) None, a bool or a string: none of them is a number here.

    ``np.asarray(True, dtype=float)`` is 1.0 and ``np.asarray("1", dtype=float)`` is 1.0, so
    both would otherwise pass for numbers (``gamma=True`` must be refused, not read as γ = 1).
    """
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        return True
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "bUSV":
            return True
        return value.dtype.kind == "O" and any(_not_a_number(v) for v in value.flat)
    if isinstance(value, (list, tuple)):
        return any(_not_a_number(v) for v in value)
    return False


def as_float_array(name: str, value) -> np.ndarray:
    """``value`` as a float array of finite real numbers (at least one), or ParameterError naming ``name``.

    Examples
    --------
    >>> as_float_array("c", [0.5, 2]).tolist()
    [0.5, 2.0]
    >>> as_float_array("c", float("nan"))
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid c=nan: allowed finite real numbers (no NaN or inf)
    """
    if _not_a_number(value):
        raise ParameterError(name, value, "a real number or an array of real numbers (not None, a bool or a string)")
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(name, value, "a real number or an array of real numbers") from None
    if arr.size == 0:
        raise ParameterError(name, value, "at least one value")
    if not np.all(np.isfinite(arr)):
        raise ParameterError(name, value, "finite real numbers (no NaN or inf)")
    return arr


def check_positive(name: str, value, upper: float | None = None) -> np.ndarray:
    """Return ``value`` as a float array after checking 0 < value (< upper)."""
    arr = as_float_array(name, value)
    allowed = f"0 < {name}" + (f" <= {upper:g}" if upper is not None else " < inf")
    if np.any(arr <= 0) or (upper is not None and np.any(arr > upper)):
        raise ParameterError(name, value if arr.ndim == 0 else arr.tolist(), allowed)
    return arr


def check_nonnegative(name: str, value) -> float:
    arr = as_float_array(name, value)
    if arr.ndim != 0 or arr < 0:
        raise ParameterError(name, value, f"a single real number {name} >= 0")
    return float(arr)


def check_int(name: str, value, minimum: int, maximum: int | None = None) -> int:
    """Return ``value`` as an int after checking minimum <= value (<= maximum)."""
    if isinstance(value, bool) or not isinstance(value, (Integral, Real)) or (
        isinstance(value, Real) and not (math.isfinite(float(value)) and float(value).is_integer())
    ):
        raise ParameterError(name, value, f"an integer >= {minimum}")
    ivalue = int(value)
    if ivalue < minimum or (maximum is not None and ivalue > maximum):
        rng = f"{minimum} <= {name}" + (f" <= {maximum}" if maximum is not None else "")
        raise ParameterError(name, value, f"an integer with {rng}")
    return ivalue




def check_dps(dps) -> int:
    """mpmath working precision: an integer 15 <= dps <= 1000."""
    return check_int("dps", dps, 15, 1000)
