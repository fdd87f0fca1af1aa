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
(``resolvent-kernels``). :func:`symattn.backends.closed.closed_definition` gives the SymPy side (shared with the library's
closed form); :data:`CLOSED` compiles
it with lambdify for the library's copy of the runtime (:mod:`.closed_runtime`), and
:func:`symattn.codegen.printing.print_definition` prints it for a generated module.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..backends.closed import ClosedDefinition, closed_definition
from ..backends.closed import _items as closed_items

#: the closed kernels a generated solver carries
KEYS = ("newton", "sensitivity", "tangent", "regular-kernels", "resolvent-kernels")

class ClosedTerms:
    """One closed kernel: ``fn(*args)`` gives the coefficients at the places ``layout`` [(item, slot)]
    (slots: ``moments`` moments, then n of I_{1,k}, then n of I_{2,k}); ``atom(*args)`` the values
    g_i(0) of the items ``atom_items``.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> t = ClosedTerms(lambda x: [2 * x], [(0, 0)], 1, 1, 1)
    >>> float(t.integrate(FloatContext(), (np.ones((1, 3)), np.zeros(1)), (np.ones(1),), 1)[0, 0])
    2.0
    """

    def __init__(self, fn, layout, items, moments, n, atom=None, atom_items=()):
        self.fn, self.layout, self.items, self.moments, self.n = fn, list(layout), items, moments, n
        self.atom, self.atom_items = atom, tuple(atom_items)

    def integrate(self, ctx, basis, args, P, continuous=False):
        """∫ g_i dμ_S (P, items) from the basis (cont (P, slots), atom (P,)); ``continuous``: without the atom."""
        cont, atom = basis
        dtype = object if ctx.name == "mpmath" else float
        C = np.zeros((P, self.items, cont.shape[1]), dtype=dtype)
        if dtype is object:
            C[...] = 0
        for (i, s), v in zip(self.layout, self.fn(*args)):
            C[:, i, s] = np.broadcast_to(v, (P,))
        if dtype is object:
            vals = (C * cont[:, None, :]).sum(axis=-1)
        else:   # summed in the basis' extended precision, then rounded: the terms may cancel
            vals = np.einsum("pis,ps->pi", C.astype(cont.dtype), cont).astype(float)
        if not continuous and self.atom is not None:
            for i, v in zip(self.atom_items, self.atom(*args)):
                vals[:, i] = vals[:, i] + atom * np.broadcast_to(v, (P,))
        return vals


class _ClosedTable:
    """``CLOSED[modules][(key, linear)]``: the closed kernels lambdified (compiled on first use)."""

    def __init__(self, modules):
        self.modules = modules

    def __getitem__(self, item):
        return _compiled(item[0], item[1], self.modules)


@lru_cache(maxsize=None)
def _compiled(key, linear, modules):
    from ..backends.compile import CompiledExprs

    k = closed_definition(key, linear)
    fn = CompiledExprs(list(k.coefficients), k.args, modules, intermediates=k.intermediates)
    atom = CompiledExprs(list(k.atom), k.args, modules, intermediates=k.intermediates) if k.atom else None
    return ClosedTerms(fn, k.layout, k.items, k.moments, k.n, atom, k.atom_items)


#: the table the closed runtime reads inside the library (a generated module prints its own)
CLOSED = {modules: _ClosedTable(modules) for modules in ("numpy", "mpmath")}

__all__ = ["KEYS", "ClosedTerms", "ClosedDefinition", "closed_items", "closed_definition", "CLOSED"]
