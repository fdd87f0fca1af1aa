r"""Plain output of numbers: strict JSON and aligned text tables (base layer).

Every layer that reports results uses these: :mod:`symattn.figures.demo` prints its tables with
:func:`format_table`, and the command line (:mod:`symattn.cli`) writes every ``--json`` object
with :func:`dump_json`. They know nothing of the model, so they sit at the bottom with
:mod:`symattn.errors` and :mod:`symattn.validation`.
"""

from __future__ import annotations

import json
import math
from typing import Iterable, Sequence

__all__ = ["finite_or_none", "jsonable", "dump_json", "fmt", "format_table"]


def finite_or_none(x):
    """``float(x)`` when it is finite, else None (None stays None).

    Parameters
    ----------
    x : number, mpmath.mpf, numpy scalar or None

    Returns
    -------
    float or None
        float(x) if x is finite; None for None, ±inf and NaN (JSON's null).

    Examples
    --------
    >>> finite_or_none(0.5), finite_or_none(float("inf")), finite_or_none(None)
    (0.5, None, None)
    """
    if x is None:
        return None
    v = float(x)
    return v if math.isfinite(v) else None


def decimal(x, digits: int):
    """An mpmath number as a decimal string of ``digits`` significant digits (JSON keeps every digit);
    a float for other numbers; None for None, ±inf and NaN.

    Parameters
    ----------
    x : mpmath.mpf, number or None
    digits : int
        Significant digits of the string (the ``dps`` of the computation).

    Returns
    -------
    str, float or None

    Examples
    --------
    >>> import mpmath
    >>> with mpmath.workdps(40):
    ...     decimal(mpmath.mpf(1) / 3, 40)
    '0.3333333333333333333333333333333333333333'
    >>> decimal(0.25, 40), decimal(float("nan"), 40)
    (0.25, None)
    """
    import mpmath

    if isinstance(x, (mpmath.mpf, mpmath.mpc)):
        if not mpmath.isfinite(x):
            return None
        return mpmath.nstr(x, digits)
    return finite_or_none(x)


def jsonable(obj):
    """Convert numpy/mpmath scalars and arrays to plain Python; non-finite floats become None.

    Dicts (keys as str), lists and tuples are converted recursively; bool, str, int and None are
    kept; numpy arrays become lists; anything else is ``float(obj)`` when that works (None if
    not finite), else ``str(obj)``.

    Parameters
    ----------
    obj : object
        A result made of dicts, lists, numbers and arrays.

    Returns
    -------
    object
        The same structure with only JSON types in it.

    Examples
    --------
    >>> import numpy as np
    >>> jsonable({"a": np.float64(1.5), "b": np.array([1.0, np.nan]), 3: np.int64(2)})
    {'a': 1.5, 'b': [1.0, None], '3': 2}
    """
    try:
        import numpy as np
    except ImportError:  # pragma: no cover
        np = None
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, int):
        return obj
    if np is not None:
        if isinstance(obj, np.ndarray):
            return jsonable(obj.tolist())
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, np.integer):
            return int(obj)
    try:
        x = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    return x if math.isfinite(x) else None


def dump_json(obj) -> str:
    """Strict JSON (no NaN/Infinity tokens) of ``obj`` after :func:`jsonable`.

    Parameters
    ----------
    obj : object
        Anything :func:`jsonable` accepts.

    Returns
    -------
    str
        One line of JSON; non-finite numbers are written as null.

    Examples
    --------
    >>> dump_json({"E": [0.25, float("nan")]})
    '{"E": [0.25, null]}'
    """
    return json.dumps(jsonable(obj), allow_nan=False)


def fmt(x, digits: int = 6) -> str:
    """A number for a table: general format with ``digits`` significant digits.

    Parameters
    ----------
    x : number, str or None
        Strings are returned as they are, None as ``"-"``.
    digits : int
        Significant digits (``f"{x:.{digits}g}"``).

    Returns
    -------
    str
        The formatted number; 'inf', '-inf' and 'nan' are kept readable.

    Examples
    --------
    >>> fmt(1 / 3), fmt(2.0, 3), fmt(float("-inf")), fmt(None)
    ('0.333333', '2', '-inf', '-')
    """
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    try:
        v = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.{digits}g}"


def format_table(headers: Sequence[str], rows: Iterable[Sequence], align: str | None = None) -> str:
    """A plain aligned text table: a header line, a rule of dashes, one line per row.

    Parameters
    ----------
    headers : sequence of str
        Column titles.
    rows : iterable of sequences
        Cells; non-strings are formatted with :func:`fmt`.
    align : str, optional
        One letter per column, ``l`` (left) or ``r`` (right); default: the first column left,
        the others right.

    Returns
    -------
    str
        The table; columns are separated by two spaces, trailing blanks removed.

    Examples
    --------
    >>> print(format_table(["k", "a_k"], [["1", 0.5], ["3", -0.125]]))
    k     a_k
    -  ------
    1     0.5
    3  -0.125
    """
    rows = [[c if isinstance(c, str) else fmt(c) for c in row] for row in rows]
    cols = len(headers)
    widths = [max([len(headers[i])] + [len(r[i]) for r in rows]) for i in range(cols)]
    if align is None:
        align = "".join("l" if i == 0 else "r" for i in range(cols))

    def line(cells):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(cells, widths, align)).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)
