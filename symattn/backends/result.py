r"""One result type for every engine of the backends (in the style of scipy's ``OptimizeResult``).

An :class:`EngineResult` is a dict with attribute access and a readable repr. Every engine of the method
registry (:mod:`symattn.backends.registry`) returns one, with the declared fields :data:`FIELDS`:

- ``values``: what the engine evaluates at each point, E(γ) = −γ² F'(γ) for the theory engines
  (docs/theory.md §6), or the fixed point x* = Φ(x*) for the fixed-point driver;
- ``derivative``: F'(γ) where the engine solves for F and its γ-derivative (E = −γ² F'), else None;
- ``residuals``: the relative residual of the engine's equations at each point (or the largest), or None;
- ``iterations``: the iterations the engine spent (all points together), None where it does not count them;
- ``precision``: the estimated relative error of each value, or None where the engine gives none;
- ``method``: the registered name of the method that ran (for the fixed-point driver, its final strategy);
- ``fallbacks``: per point, the method that solved it instead of ``method`` (e.g. ``'quadrature'`` where the
  closed form does not apply, docs/theory.md §5.8), None where ``method`` itself did; or None for an engine
  that has no fallback.

Engine-specific extras (F, the bulk solution, the model, ...) are further keys.

``result.values`` is the field, not the dict's method: the view of a result's values is ``dict.values(result)``
(an attribute named like a dict method would otherwise never reach the field).
"""

from __future__ import annotations

__all__ = ["EngineResult", "FIELDS"]

#: the fields every :class:`EngineResult` carries, in the order of its repr
FIELDS = ("values", "derivative", "residuals", "iterations", "precision", "method", "fallbacks")


class EngineResult(dict):
    r"""The outcome of one engine run: a dict of :data:`FIELDS` plus extras, read as attributes or keys.

    Parameters
    ----------
    values : array_like
        E(γ) at each point (or the engine's solution, e.g. a fixed point).
    method : str
        The registered name of the method that ran.
    derivative, residuals, precision, fallbacks : optional
        As in :data:`FIELDS` (None where the engine has none).
    iterations : int or None
        Iterations spent (None: not counted).
    **extras
        Engine-specific fields.

    Examples
    --------
    >>> r = EngineResult([0.25, 0.5], "closed", iterations=7, F=[1.0, 2.0])
    >>> r.values, r["iterations"], r.F, r.derivative
    ([0.25, 0.5], 7, [1.0, 2.0], None)
    >>> r.extras(), len(dict.values(r))
    ({'F': [1.0, 2.0]}, 8)
    >>> print(EngineResult(1.0, "residual"))
        values: 1.0
    derivative: None
     residuals: None
    iterations: 0
     precision: None
        method: 'residual'
     fallbacks: None
    """

    def __init__(self, values, method: str, *, derivative=None, residuals=None, iterations: int = 0,
                 precision=None, fallbacks=None, **extras):
        super().__init__(values=values, derivative=derivative, residuals=residuals, iterations=iterations,
                         precision=precision, method=method, fallbacks=fallbacks, **extras)

    @property
    def values(self):
        """The field ``values`` (the dict's own view: ``dict.values(result)``)."""
        return self["values"]

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError as err:
            raise AttributeError(name) from err

    __setattr__ = dict.__setitem__
    __delattr__ = dict.__delitem__

    def __dir__(self):
        return list(self.keys()) + list(super().__dir__())

    def extras(self) -> dict:
        """The engine-specific fields: every key that is not one of :data:`FIELDS`."""
        return {k: v for k, v in self.items() if k not in FIELDS}

    def __repr__(self):
        if not self:
            return f"{type(self).__name__}()"
        order = [k for k in FIELDS if k in self] + [k for k in self if k not in FIELDS]
        width = max(map(len, order))
        return "\n".join(f"{k:>{width}}: {self[k]!r}" for k in order)
