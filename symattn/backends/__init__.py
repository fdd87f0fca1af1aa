"""Numeric layer: contexts (float64 / mpmath), MP quadrature, compiled systems and solvers."""

from .context import FloatContext, MPContext, context

__all__ = ["FloatContext", "MPContext", "context"]
