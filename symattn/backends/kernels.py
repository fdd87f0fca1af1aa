r"""The compiled pieces of each system, derived from the SymPy objects by differentiation.

- ``bulk-newton``: the integrands g_i of e_i = ∫ g_i dμ_S and their Jacobian ∂g_i/∂e_j.
- ``bulk-sensitivity``: ∂g_i/∂γ (for implicit differentiation, de/dγ = (I − ∫∂g/∂e)^{-1} ∫∂g/∂γ).
- ``resolvent-kernels``: q, k, r (MATH §5) and their total γ-derivatives given ė (chain rule);
  the nine traces are their λ-moments.
- ``gamma-r{r}``, ``gamma-dot-r{r}``, ``c-hat-r{r}``: Γ(T, 𝔊, c), Γ̇ = Σ_T ∂Γ/∂T · Ṫ,
  Ĉ(𝒜, c) for a coefficient matrix 𝒜 (= a1 Λ), ``lambda-r{r}``: Λ(𝔊).
- ``linear``: E_LR(c, γ, m2) in closed form.
"""

from __future__ import annotations

import sympy as sp

from ..systems import attention_system, bulk_system, linear_system
from ..systems.attention import TRACE_SYMBOLS
from ..systems.bulk import INTERMEDIATES, RESOLVENT_KERNELS, Delta, total_derivative
from ..systems.symbols import a1, c, d, e1, e2, e3, gamma, lam, m2, s2
from .compile import CompiledExprs, CompiledMatrix

UNKNOWNS = (e1, e2, e3)
KERNEL_ORDER = ("Q", "QK", "KQK")
INTEGRAND_ARGS = (lam, e1, e2, e3, c, gamma, a1, s2, d)
E_DOTS = tuple(sp.Symbol(f"edot_{i}") for i in (1, 2, 3))
TRACE_DOTS = tuple(sp.Symbol(f"Tdot_{i}") for i in range(len(TRACE_SYMBOLS)))


def _integrands(exprs, modules):
    return CompiledExprs(exprs, INTEGRAND_ARGS, modules, intermediates=INTERMEDIATES)


def build(key: str, modules: str):
    g = bulk_system().integrands
    if key == "bulk-residual":
        return _integrands(list(g), modules)
    if key == "bulk-newton":
        return _integrands(list(g) + [total_derivative(gi, ej) for gi in g for ej in UNKNOWNS], modules)
    if key == "bulk-sensitivity":
        return _integrands([total_derivative(gi, gamma) for gi in g], modules)
    if key == "delta":
        return _integrands([Delta], modules)
    if key == "resolvent-kernels":  # q, k, r and their γ-derivatives along the solution, ∂/∂γ + Σ_j ė_j ∂/∂e_j
        K = [RESOLVENT_KERNELS[kind] for kind in KERNEL_ORDER]
        K_dot = [total_derivative(t, gamma) + sum(total_derivative(t, ej) * ed for ej, ed in zip(UNKNOWNS, E_DOTS))
                 for t in K]
        return CompiledExprs(K + K_dot, INTEGRAND_ARGS + E_DOTS, modules, intermediates=INTERMEDIATES)
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
        A = system.coefficients
        return CompiledMatrix(system.C_hat_generic, tuple(A) + (c,), modules)
    if kind == "lambda":
        return CompiledMatrix(system.Lambda, gram, modules)
    raise KeyError(key)


def _gram_args(system):
    G = system.gram
    return tuple(G[i, j] for i in range(G.rows) for j in range(i, G.cols))


def gram_values(gram):
    """Upper-triangle entries of Gram arrays (P, k, k), in the order of the compiled arguments."""
    k = gram.shape[-1]
    return [gram[:, i, j] for i in range(k) for j in range(i, k)]
