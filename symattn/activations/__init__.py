"""Layer 1: activations and their Hermite expansions (docs/theory.md §1).

One job per module (each imports only the base layer and the modules above it in this list):

- :mod:`.catalog` -- the variable x, the named activations, their descriptions and aliases;
- :mod:`.parsing` -- a name, string, SymPy expression or callable to a canonical expression in x;
- :mod:`.analysis` -- kinks, singular points, analytic pieces, real roots of an expression;
- :mod:`.evaluation` -- numpy, torch (hand-written translator) and mpmath functions of f;
- :mod:`.hermite` -- Gaussian expectations and normalised Hermite coefficients, exact and at any precision;
- :mod:`.exact` -- exact Hermite coefficients of an expression, piece by piece;
- :mod:`.diagonal` -- the diagonal constant d and the finite-p diagonal d_n;
- :mod:`.activation` -- the :class:`Activation` object and the :func:`activation` factory;
- :mod:`.shifted` -- shifted-Gaussian moments F(s) = E f(ξ + s).

The name ``activation`` of this package is the factory function; the module of that name is
``symattn.activations.activation`` in ``sys.modules``.
"""

from .activation import Activation, activation
from .catalog import CATALOG, CATALOG_DESCRIPTIONS, LEAKY_RELU_SLOPE, X

__all__ = ["Activation", "activation", "CATALOG", "CATALOG_DESCRIPTIONS", "LEAKY_RELU_SLOPE", "X"]
