r"""The SymPy side of the closed form (docs/theory.md §5.8): integrands reduced to coefficients on the basis.

Every integral is ∫ g dμ_S = Σ_l q_l M_l + Σ_j r1_j I_{1,j} + Σ_j r2_j I_{2,j}
(:func:`symattn.systems.closed.reduce_integrand`: exact division of the numerator by Δ in SymPy).
A *closed kernel* is the list of the nonzero coefficients of a family of integrands with their
places on the basis (:class:`ClosedDefinition`), compiled by lambdify into a :class:`ClosedKernel`
(:func:`closed_kernel`) and read by the numerics of :mod:`symattn.backends.closed_runtime` through
the table :data:`CLOSED` (``CLOSED[ctx.lambdify_modules][(key, linear)]``), as
:mod:`symattn.backends.solver` reads :data:`symattn.backends.kernels.KERNELS`. A generated
standalone solver (:mod:`symattn.codegen`) prints its own ``CLOSED`` from the same definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp

from ..systems.bulk import Delta, beta, P_unknown, w_sum
from ..systems.closed import D0, D1, b0, b1, reduce_integrand
from ..systems.symbols import a1, c, d, e1, e2, e3, gamma, lam, s2
from .compile import CompiledExprs
from .kernels import E_DOTS, TRACE_MOMENTS, kernel_definition

E_ARGS = (e1, e2, e3, c, gamma, a1, s2, d)
R_ARGS = (P_unknown, e2, e3, c, gamma, a1, s2, d)
E_INTERMEDIATES = ((b1, sp.sqrt(c) * a1), (b0, sp.sqrt(c) * (d - a1) - s2 * e3), (D0, gamma + s2 * e2),
                   (D1, (gamma + s2 * e2) * s2 * e1))
R_INTERMEDIATES = ((w_sum, gamma + s2 * e2), (b1, sp.sqrt(c) * a1), (b0, sp.sqrt(c) * (d - a1) - s2 * e3),
                   (D0, w_sum), (D1, s2 * P_unknown))


class ClosedKernel:
    """Integrands reduced to coefficients on the basis (moments M_l, I_{1,j}, I_{2,j}).

    ``fn(*args)`` gives the nonzero coefficients; ``layout`` their (item, slot) places; slots are
    0..L for the moments, then ``L + 1 + j`` for I_{1,j} and ``L + 1 + n + j`` for I_{2,j}
    (n = deg Δ = 3, or 1 where a1 = 0). ``atom_fn`` gives g_i(0) of the items ``atom_items`` (those without a
    power of λ). A plain class (no dataclass): a generated module, loaded from its file, carries it.
    """

    def __init__(self, fn, layout, items: int, moments: int, n: int, atom_fn=None, atom_items=()):
        self.fn, self.layout, self.items, self.moments, self.n = fn, layout, items, moments, n   # moments: L + 1
        self.atom_fn, self.atom_items = atom_fn, atom_items

    @property
    def slots(self):
        return self.moments + 2 * self.n

    @property
    def plan(self):
        """The layout sorted by item, for :func:`integrate`: (the order of the coefficients, their
        slots in that order, and the runs (item, first, end) of each item's coefficients)."""
        if getattr(self, "_plan", None) is None:
            items = np.array([i for i, _ in self.layout], dtype=int)
            order = np.argsort(items, kind="stable")
            slots = np.array([s for _, s in self.layout], dtype=int)[order]
            present, starts = np.unique(items[order], return_index=True)
            ends = np.r_[starts[1:], len(order)]
            self._plan = (order, slots, [(int(i), int(a), int(b)) for i, a, b in zip(present, starts, ends)])
        return self._plan

    def coefficients(self, *args, P: int, dtype=float):
        C = np.zeros((P, self.items, self.slots), dtype=dtype)
        if dtype is object:
            C[...] = 0
        if self.layout:
            for (i, s), v in zip(self.layout, self.fn(*args)):
                C[:, i, s] = np.broadcast_to(v, (P,))
        return C


def closed_items(key: str):
    """The (expression, power of λ) items of the closed kernel ``key`` and its arguments/intermediates: what
    :func:`reduced` divides by Δ here and :mod:`symattn.codegen.closed_kernels` prints for a generated solver.

    Examples
    --------
    >>> items, args, intermediates = closed_items("newton")
    >>> len(items)                      # g_1..g_3 and the nine ∂g_i/∂e_j, no power of λ
    12
    """
    if key == "newton":
        return [(x, 0) for x in kernel_definition("bulk-newton").exprs], E_ARGS, E_INTERMEDIATES
    if key == "sensitivity":
        return [(x, 0) for x in kernel_definition("bulk-sensitivity").exprs], E_ARGS, E_INTERMEDIATES
    if key == "tangent":
        return [(x, 0) for x in kernel_definition("regular-tangent").exprs], R_ARGS, R_INTERMEDIATES
    if key == "regular-kernels":  # T (9), the two centred integrands, Ṫ (9)
        ex = kernel_definition("regular-kernels").exprs
        items = [(ex[i], j) for i, j in TRACE_MOMENTS] + [(ex[3], 0), (ex[4], 0)]
        items += [(ex[5 + i], j) for i, j in TRACE_MOMENTS]
        return items, R_ARGS + E_DOTS, R_INTERMEDIATES
    if key == "resolvent-kernels":  # T (9), Ṫ (9) in the (e1, e2, e3) form
        ex = kernel_definition("resolvent-kernels").exprs
        items = [(ex[i], j) for i, j in TRACE_MOMENTS] + [(ex[3 + i], j) for i, j in TRACE_MOMENTS]
        return items, E_ARGS + E_DOTS, E_INTERMEDIATES
    if key == "bulk":  # the three bulk integrands
        from ..systems import bulk_system

        return [(g, 0) for g in bulk_system().integrands], E_ARGS, E_INTERMEDIATES
    raise KeyError(key)


@lru_cache(maxsize=None)
def reduced(key: str, linear: bool):
    """The reduced items of ``key``: a list of (q, r1, r2) Polys (:func:`reduce_integrand`)."""
    items, _, _ = closed_items(key)
    return [reduce_integrand(x, beta, Delta, j, linear=linear) for x, j in items]


@dataclass(frozen=True)
class ClosedDefinition:
    """The SymPy side of one closed kernel: ``coefficients`` (expressions in ``args`` and the
    ``intermediates``) at the places ``layout`` [(item, slot)] -- slots 0..L−1 the moments M^c_l,
    L + k the I_{1,k}, L + n + k the I_{2,k} (n = deg Δ) -- and the atom values ``atom`` g_i(0) of
    the items ``atom_items``. Compiled here (:func:`closed_kernel`) and printed into generated
    solvers (:mod:`symattn.codegen`)."""

    args: tuple
    intermediates: tuple
    coefficients: tuple
    layout: tuple
    items: int
    moments: int
    n: int
    atom: tuple
    atom_items: tuple


@lru_cache(maxsize=None)
def closed_definition(key: str, linear: bool) -> ClosedDefinition:
    """The closed kernel ``key`` reduced to coefficients on the basis (``linear``: the a1 = 0 form,
    Δ linear in λ), from :func:`reduced`.

    Examples
    --------
    >>> k = closed_definition("newton", True)
    >>> k.items, k.n, len(k.coefficients) == len(k.layout)
    (12, 1, True)
    """
    items, args, inter = closed_items(key)
    red = reduced(key, linear)
    n = 1 if linear else 3
    L = max([q.degree() for q, _, _ in red] + [0]) + 1
    layout, coefficients = [], []
    for i, (q, r1, r2) in enumerate(red):
        for poly, base in ((q, 0), (r1, L), (r2, L + n)):
            for mon, cf in zip(poly.monoms(), poly.coeffs()):
                if cf != 0:
                    layout.append((i, base + mon[0]))
                    coefficients.append(sp.sympify(cf))
    # g_i(0) for the atom, from the integrand itself: β(0) = b0, Δ(0) = D0
    at0 = [(i, sp.sympify(x).subs({beta: b0, Delta: D0}).subs(lam, 0)) for i, (x, j) in enumerate(items) if j == 0]
    at0 = [(i, x) for i, x in at0 if x != 0]
    return ClosedDefinition(args=args, intermediates=inter, coefficients=tuple(coefficients), layout=tuple(layout),
                            items=len(items), moments=L, n=n, atom=tuple(x for _, x in at0),
                            atom_items=tuple(i for i, _ in at0))


@lru_cache(maxsize=None)
def closed_kernel(key: str, linear: bool, modules: str) -> ClosedKernel:
    """The compiled :class:`ClosedKernel` of ``key`` ('newton', 'sensitivity', 'tangent',
    'regular-kernels', 'resolvent-kernels', 'bulk'); ``linear``: the a1 = 0 variant.

    Examples
    --------
    >>> k = closed_kernel("bulk", False, "numpy")
    >>> k.items, k.n
    (3, 3)
    """
    k = closed_definition(key, linear)
    fn = CompiledExprs(list(k.coefficients), k.args, modules, intermediates=k.intermediates) if k.coefficients else None
    atom_fn = CompiledExprs(list(k.atom), k.args, modules, intermediates=k.intermediates) if k.atom else None
    return ClosedKernel(fn=fn, layout=list(k.layout), items=k.items, moments=k.moments, n=k.n, atom_fn=atom_fn,
                        atom_items=k.atom_items)



class _ClosedTable:
    """``CLOSED[modules][(key, linear)]``: the compiled closed kernels (:func:`closed_kernel`, on first use)."""

    def __init__(self, modules):
        self.modules = modules

    def __getitem__(self, item):
        key, linear = item
        return closed_kernel(key, linear, self.modules)


#: the table the closed-form runtime reads, ``CLOSED[ctx.lambdify_modules][(key, linear)]`` (a generated
#: module prints its own)
CLOSED = {modules: _ClosedTable(modules) for modules in ("numpy", "mpmath")}
