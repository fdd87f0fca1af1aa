r"""The closed-form solver (docs/theory.md §5.8), under its historical name.

The closed form is split as the quadrature solver is (:mod:`symattn.backends.solver`, numerics;
:mod:`symattn.backends.kernels`, the SymPy table):

- :mod:`symattn.backends.closed_runtime`: the numerics (numpy only; mpmath only through the
  arithmetic context), which a generated standalone solver carries verbatim;
- :mod:`symattn.backends.closed_table`: the integrands reduced to coefficients on the basis in
  SymPy, compiled, and the table ``CLOSED`` the runtime reads.

This module re-exports both, so that ``symattn.backends.closed.attention_points`` and the rest
stay importable; the library itself imports the two modules (patch those, not this one).
"""

from __future__ import annotations

from .closed_runtime import (SUPPORT_DISTANCE, CLOSED_ACCEPT, FAST_ACCEPT, GUARD_DIGITS, NEWTON_MAX_ITER,
    DRAWS, _unit, _guarded, _moment_coefficients, mp_moments, stieltjes_continuous, _cubic_float, _roots,
    Basis, _Dual, _divided_basis, basis, _delta_mid_positive, integrate, _Points, _intermediates_e, _basis_e,
    _eargs, _newton_map, _residual, CONTINUATION_MIN, CONTINUATION_STRIDE, CONTINUATION_MAX_GAP, FAST_SWITCH,
    CONTINUATION_DIRECT, _start, _newton, solve_bulk_closed, _solve_from, closed_traces, _perturbed,
    _sub_basis, _floats, _amp, attention_closed, _precision, _change_of_E, METHODS, DEFAULT,
    attention_points, solution_quantities)  # noqa: F401
from .closed_table import (CLOSED, ClosedKernel, E_ARGS, R_ARGS, E_INTERMEDIATES, R_INTERMEDIATES, _items,
    reduced, ClosedDefinition, closed_definition, closed_kernel, _ClosedTable)  # noqa: F401
