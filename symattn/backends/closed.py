r"""The closed-form solver (docs/theory.md §5.8), under its historical name.

The closed form is split as the quadrature solver is (:mod:`symattn.backends.solver`, numerics;
:mod:`symattn.backends.kernels`, the SymPy table):

- :mod:`symattn.backends.closed_runtime`: the numerics (numpy only; mpmath only through the
  arithmetic context), which a generated standalone solver carries verbatim;
- :mod:`symattn.backends.closed_table`: the integrands reduced to coefficients on the basis in
  SymPy, compiled, and the table ``CLOSED`` the runtime reads.

This module re-exports their public names, so that ``symattn.backends.closed.attention_points`` and the
rest stay importable; the library itself imports the two modules (patch those, not this one).
"""

from __future__ import annotations

from .closed_runtime import (SUPPORT_DISTANCE, CLOSED_ACCEPT, FAST_ACCEPT, GUARD_DIGITS, NEWTON_MAX_ITER,  # noqa: F401
    DRAWS, moment_coefficients, mp_moments, stieltjes_continuous, Basis, basis, integrate, Points, newton_map,
    CONTINUATION_MIN, CONTINUATION_STRIDE, CONTINUATION_MAX_GAP, FAST_SWITCH, CONTINUATION_DIRECT, solve_bulk_closed,
    closed_traces, attention_closed, METHODS, DEFAULT, isolated, attention_points, solution_quantities)
from .closed_table import (CLOSED, ClosedKernel, E_ARGS, R_ARGS, E_INTERMEDIATES, R_INTERMEDIATES,  # noqa: F401
    closed_items, reduced, ClosedDefinition, closed_definition, closed_kernel)
