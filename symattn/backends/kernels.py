r"""The compiled pieces of each system, derived from the SymPy objects by differentiation.

- ``bulk-residual``: the integrands g_i of e_i = ∫ g_i dμ_S (docs/theory.md §5.2);
  ``bulk-newton``: the same and their Jacobian ∂g_i/∂e_j (row-major);
- ``bulk-sensitivity``: ∂g_i/∂γ (for implicit differentiation, de/dγ = (I − ∫∂g/∂e)^{-1} ∫∂g/∂γ);
- ``delta``: Δ(λ) (for the branch check);
- ``resolvent-kernels``: q, k, r (docs/theory.md §5.3) and their total γ-derivatives given ė
  (chain rule); the nine traces are their λ-moments (:data:`TRACE_MOMENTS`);
- ``gamma-r{r}``, ``gamma-dot-r{r}``, ``c-hat-r{r}``: Γ(T, 𝔊, c), Γ̇ = Σ_T ∂Γ/∂T · Ṫ,
  Ĉ(𝒜, c) for a coefficient matrix 𝒜 (= a1 Λ), ``lambda-r{r}``: Λ(𝔊) (docs/theory.md §6);
- ``linear``: E_LR(c, γ, m2) in closed form (docs/theory.md §3);
- ``regular-tangent``, ``regular-kernels``: the same system in the regular unknowns
  (P = (γ + s² e2) e1, e2, e3; :data:`symattn.systems.bulk.REGULAR_INTEGRANDS`): its tangent
  (∂g̃/∂x, ∂g̃/∂γ), and q, k, r, the centred-trace integrands and q̇, k̇, ṙ given ẋ, from which
  the traces and their γ-derivatives are computed without the 1/γ cancellation of the
  (e1, e2, e3) form; ``gamma-r{r}`` takes the centred traces T_KQK^(j) − m_{j−1}/c (j = 1, 2, 3).

:func:`kernel_definition` gives the SymPy side of each (expressions, arguments, intermediates);
:func:`compiled` lambdifies it; :data:`KERNELS` is the table the solver runtime reads,
``KERNELS[modules][key]``. A generated standalone solver prints the same definitions instead
(:mod:`symattn.codegen`) and defines its own ``KERNELS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import sympy as sp

from ..systems import attention_system, bulk_system, linear_system
from ..systems.attention import TRACE_SYMBOLS, TRACES
from ..systems.bulk import (CENTRED_INTEGRANDS, INTERMEDIATES, REGULAR_INTEGRANDS, REGULAR_INTERMEDIATES,
                            REGULAR_KERNELS, REGULAR_UNKNOWNS, RESOLVENT_KERNELS, Delta, P_unknown,
                            regular_total_derivative, total_derivative)
from ..systems.symbols import a1, c, d, e1, e2, e3, gamma, lam, m2, s2
from .compile import CompiledExprs, CompiledMatrix

UNKNOWNS = (e1, e2, e3)
KERNEL_ORDER = ("Q", "QK", "KQK")
INTEGRAND_ARGS = (lam, e1, e2, e3, c, gamma, a1, s2, d)
#: the arguments of the regular-form integrands (docs/theory.md §5.2 in P = (γ + s² e2) e1, e2, e3)
REGULAR_ARGS = (lam, P_unknown, e2, e3, c, gamma, a1, s2, d)
#: the centred traces T_KQK^(1) − 1, T_KQK^(2) − 1/c, T_KQK^(3) − (1 + 1/c)/c, in which Γ is compiled
CENTRED_SYMBOLS = tuple(sp.Symbol(f"U_{{KQK}}^{{({j})}}", real=True) for j in (1, 2, 3))
E_DOTS = tuple(sp.Symbol(f"edot_{i}") for i in (1, 2, 3))
TRACE_DOTS = tuple(sp.Symbol(f"Tdot_{i}") for i in range(len(TRACE_SYMBOLS)))
#: the nine traces as (index of the kernel q, k, r in ``resolvent-kernels``, power j of λ)
TRACE_MOMENTS = tuple((KERNEL_ORDER.index(kind), j) for _, kind, j in TRACES)
#: the keys of the kernels that do not depend on the rank
BULK_KEYS = ("bulk-residual", "bulk-newton", "bulk-sensitivity", "delta", "resolvent-kernels", "linear",
             "regular-tangent", "regular-kernels")
#: the rank-r keys, ``key.format(r=rank)``
RANK_KEYS = ("gamma-r{r}", "gamma-dot-r{r}", "c-hat-r{r}", "lambda-r{r}")


@dataclass(frozen=True)
class KernelDefinition:
    """The SymPy side of one kernel.

    ``exprs`` (a list of expressions in ``args`` and the ``intermediates``' symbols) or
    ``matrix`` (a SymPy Matrix in ``args``); ``intermediates``: (symbol, definition) pairs
    evaluated first, in order.
    """

    args: tuple
    exprs: tuple = ()
    matrix: sp.Matrix | None = None
    intermediates: tuple = ()


def kernel_keys(rank: int):
    """Every kernel key a rank-``rank`` attention solver reads.

    Examples
    --------
    >>> kernel_keys(1)[-1]
    'lambda-r1'
    """
    return BULK_KEYS + tuple(k.format(r=rank) for k in RANK_KEYS)


@lru_cache(maxsize=None)
def kernel_definition(key: str) -> KernelDefinition:
    """The expressions, arguments and intermediates of the kernel ``key`` (see the module docstring).

    Examples
    --------
    >>> len(kernel_definition("bulk-newton").exprs)   # g_1..g_3 and the nine ∂g_i/∂e_j
    12
    """
    g = bulk_system().integrands
    integrand = {"args": INTEGRAND_ARGS, "intermediates": INTERMEDIATES}
    if key == "bulk-residual":
        return KernelDefinition(exprs=tuple(g), **integrand)
    if key == "bulk-newton":
        return KernelDefinition(exprs=tuple(g) + tuple(total_derivative(gi, ej) for gi in g for ej in UNKNOWNS),
                                **integrand)
    if key == "bulk-sensitivity":
        return KernelDefinition(exprs=tuple(total_derivative(gi, gamma) for gi in g), **integrand)
    if key == "delta":
        return KernelDefinition(exprs=(Delta,), **integrand)
    if key == "resolvent-kernels":  # q, k, r and their γ-derivatives along the solution, ∂/∂γ + Σ_j ė_j ∂/∂e_j
        K = [RESOLVENT_KERNELS[kind] for kind in KERNEL_ORDER]
        K_dot = [total_derivative(t, gamma) + sum(total_derivative(t, ej) * ed for ej, ed in zip(UNKNOWNS, E_DOTS))
                 for t in K]
        return KernelDefinition(args=INTEGRAND_ARGS + E_DOTS, exprs=tuple(K + K_dot), intermediates=INTERMEDIATES)
    regular = {"args": REGULAR_ARGS, "intermediates": REGULAR_INTERMEDIATES}
    if key == "regular-tangent":  # ∂g̃_i/∂x_j (row-major) and ∂g̃_i/∂γ of the regular form, x = (P, e2, e3)
        return KernelDefinition(exprs=tuple(regular_total_derivative(gi, xj) for gi in REGULAR_INTEGRANDS
                                            for xj in REGULAR_UNKNOWNS)
                                + tuple(regular_total_derivative(gi, gamma) for gi in REGULAR_INTEGRANDS), **regular)
    if key == "regular-kernels":  # q, k, r, the two centred integrands, and q, k, r's γ-derivatives given ẋ
        K = [REGULAR_KERNELS[kind] for kind in KERNEL_ORDER]
        K_dot = [regular_total_derivative(t, gamma)
                 + sum(regular_total_derivative(t, xj) * xd for xj, xd in zip(REGULAR_UNKNOWNS, E_DOTS)) for t in K]
        return KernelDefinition(args=REGULAR_ARGS + E_DOTS, exprs=tuple(K) + CENTRED_INTEGRANDS + tuple(K_dot),
                                intermediates=REGULAR_INTERMEDIATES)
    if key == "linear":
        return KernelDefinition(args=(c, gamma, m2), exprs=(linear_system().closed_form["E"],))
    kind, rank = key.rsplit("-r", 1)
    system = attention_system(int(rank))
    gram = _gram_args(system)
    if kind == "gamma":  # Γ in the six plain traces and the three centred ones: no constant cancels numerically
        T1, T2, T3 = TRACE_SYMBOLS[6:]
        U1, U2, U3 = CENTRED_SYMBOLS
        centred = system.Gamma.subs({T1: 1 + U1, T2: 1 / c + U2, T3: (1 + 1 / c) / c + U3}).applyfunc(sp.expand)
        return KernelDefinition(args=TRACE_SYMBOLS[:6] + CENTRED_SYMBOLS + gram + (c,), matrix=centred)
    if kind == "gamma-dot":
        dot = sum((system.Gamma.diff(T) * Td for T, Td in zip(TRACE_SYMBOLS, TRACE_DOTS)), sp.zeros(*system.Gamma.shape))
        return KernelDefinition(args=TRACE_DOTS + gram + (c,), matrix=dot)
    if kind == "c-hat":
        return KernelDefinition(args=tuple(system.coefficients) + (c,), matrix=system.C_hat_generic)
    if kind == "lambda":
        return KernelDefinition(args=gram, matrix=system.Lambda)
    raise KeyError(key)


def build(key: str, modules: str):
    """Compile the kernel ``key`` with the lambdify module ``modules`` ('numpy' or 'mpmath')."""
    k = kernel_definition(key)
    if k.matrix is not None:
        return CompiledMatrix(k.matrix, k.args, modules)
    return CompiledExprs(list(k.exprs), k.args, modules, intermediates=k.intermediates)


@lru_cache(maxsize=None)
def compiled(key: str, modules: str):
    """Cache of compiled pieces of the systems, by name and lambdify module.

    Examples
    --------
    >>> import numpy as np
    >>> E = compiled("linear", "numpy")(np.sqrt(0.5), 1.0, 0.0)[0]   # E_LR(c = 0.5, γ = 1, m2 = 0)
    >>> bool(0 < E < 1)
    True
    """
    return build(key, modules)


class KernelTable:
    """The compiled kernels of one lambdify module, ``table[key]`` (compiled on first use)."""

    def __init__(self, modules: str):
        self.modules = modules

    def __getitem__(self, key: str):
        return compiled(key, self.modules)


#: the kernels the solver runtime reads, ``KERNELS[ctx.lambdify_modules][key]``
KERNELS = {modules: KernelTable(modules) for modules in ("numpy", "mpmath")}


def _gram_args(system):
    G = system.gram
    return tuple(G[i, j] for i in range(G.rows) for j in range(i, G.cols))


def gram_values(gram):
    """Upper-triangle entries of Gram arrays (P, k, k), in the order of the compiled arguments."""
    k = gram.shape[-1]
    return [gram[:, i, j] for i in range(k) for j in range(i, k)]
