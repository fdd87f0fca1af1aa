r"""The closed-form kernels of a generated solver: integrands reduced to coefficients on the basis
of docs/theory.md §5.8 (SymPy side, at generation time).

Every integrand g of the bulk and attention systems is rational in λ with denominator a power of
Δ = D0 + D1 λ + λ(b1 λ + b0)²; :func:`symattn.systems.closed.reduce_integrand` writes λ^j g = q + r1/Δ + r2/Δ² by exact polynomial division, so that

  ∫ λ^j g dμ_S = (1 − c)_+ (λ^j g)(0) + Σ_l q_l M^c_l + Σ_k r1_k I_{1,k} + Σ_k r2_k I_{2,k}.

A *closed kernel* is the list of the nonzero coefficients q_l, r1_k, r2_k of a family of
integrands (expressions in the unknowns and the parameters), with their places ``layout`` =
[(item, slot)], and the values g_i(0) of the items without a power of λ (the atom). The
families are those of the solver (:data:`KEYS`): the bulk map and its Jacobian (``newton``),
∂g/∂γ (``sensitivity``), the tangent of the regular form (``tangent``), the traces, centred
traces and their γ-derivatives in the regular form (``regular-kernels``) and in the e-form
(``resolvent-kernels``). :func:`symattn.backends.closed_table.closed_definition` gives the SymPy
side, shared with the library's closed form (which compiles it with lambdify:
:data:`symattn.backends.closed_table.CLOSED`); :func:`symattn.codegen.printing.print_definition`
prints it for a generated module, as a table ``CLOSED`` of
:class:`~symattn.backends.closed_table.ClosedKernel` read by the carried runtime
:mod:`symattn.backends.closed_runtime`.
"""

from __future__ import annotations

from ..backends.closed_table import ClosedDefinition, ClosedKernel, closed_definition
from ..backends.closed_table import closed_items

#: the closed kernels a generated solver carries
KEYS = ("newton", "sensitivity", "tangent", "regular-kernels", "resolvent-kernels")

__all__ = ["KEYS", "ClosedKernel", "ClosedDefinition", "closed_items", "closed_definition"]
