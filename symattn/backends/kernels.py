r"""The compiled pieces of each system, derived from the SymPy objects by differentiation.

- ``bulk-newton``: the integrands g_i of e_i = ∫ g_i dμ_S and their Jacobian ∂g_i/∂e_j.
- ``bulk-sensitivity``: ∂g_i/∂γ (for implicit differentiation, de/dγ = (I − ∫∂g/∂e)^{-1} ∫∂g/∂γ).
- ``traces``: the nine trace integrands, their ∂/∂e_j and ∂/∂γ.
- ``gamma-r{r}``, ``gamma-dot-r{r}``, ``c-hat-r{r}``: Γ(T, 𝔊, c), Γ̇ = Σ_T ∂Γ/∂T · Ṫ, Ĉ(a1, 𝔊, c).
- ``linear``: E_LR(c, γ, m2) in closed form.
"""

from __future__ import annotations

import sympy as sp

from ..systems import attention_system, bulk_system, linear_system
from ..systems.attention import TRACE_INTEGRANDS, TRACE_SYMBOLS
from ..systems.symbols import a1, c, d, e1, e2, e3, gamma, lam, m2, s2
from .compile import CompiledExprs, CompiledMatrix

UNKNOWNS = (e1, e2, e3)
INTEGRAND_ARGS = (lam, e1, e2, e3, c, gamma, a1, s2, d)
TRACE_DOTS = tuple(sp.Symbol(f"Tdot_{i}") for i in range(len(TRACE_SYMBOLS)))


def build(key: str, modules: str):
    if key == "bulk-newton":
        g = bulk_system().integrands
        jac = [sp.diff(gi, ej) for gi in g for ej in UNKNOWNS]
        return CompiledExprs(list(g) + jac, INTEGRAND_ARGS, modules)
    if key == "bulk-sensitivity":
        return CompiledExprs([sp.diff(gi, gamma) for gi in bulk_system().integrands], INTEGRAND_ARGS, modules)
    if key == "traces":
        T = list(TRACE_INTEGRANDS)
        dT_de = [sp.diff(t, ej) for t in T for ej in UNKNOWNS]
        dT_dg = [sp.diff(t, gamma) for t in T]
        return CompiledExprs(T + dT_de + dT_dg, INTEGRAND_ARGS, modules)
    if key == "linear":
        return CompiledExprs([linear_system().closed_form["E"]], (c, gamma, m2), modules)
    kind, rank = key.rsplit("-r", 1)
    system = attention_system(int(rank))
    gram = _gram_args(system)
    if kind == "gamma":
        return CompiledMatrix(system.Gamma, TRACE_SYMBOLS + gram + (c,), modules)
    if kind == "gamma-dot":
        dot = sum((system.Gamma.diff(T) * Td for T, Td in zip(TRACE_SYMBOLS, TRACE_DOTS)), sp.zeros(*system.Gamma.shape))
        return CompiledMatrix(dot, TRACE_DOTS + gram + (c,), modules)
    if kind == "c-hat":
        return CompiledMatrix(system.C_hat, (a1,) + gram + (c,), modules)
    raise KeyError(key)


def _gram_args(system):
    G = system.gram
    return tuple(G[i, j] for i in range(G.rows) for j in range(i, G.cols))


def gram_values(gram):
    """Upper-triangle entries of Gram arrays (P, k, k), in the order of the compiled arguments."""
    k = gram.shape[-1]
    return [gram[:, i, j] for i in range(k) for j in range(i, k)]
