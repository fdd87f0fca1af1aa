r"""The attention system (Theorem 1; docs/theory.md §6 and the rank-r preface).

Built on the bulk system. With the nine trace limits at the bulk solution

  T_Q^{(j)} = ∫ λ^j q dμ_S,  T_QK^{(j)} = ∫ λ^j k dμ_S,  T_KQK^{(j)} = ∫ λ^j r dμ_S,

the low-rank part X^TWX − ZᵀZ = EΛEᵀ, E = [y, Zᵀμ, Zᵀw_K^{(1..r)}, Zᵀw_Q^{(1..r)}], enters
through a Woodbury identity on the linear pencil. With the coupling matrix C (rows a_i,
columns b_j), Ĉ = [[0, Cᵀ], [C, 0]], the Gram matrix Γ = UᵀH0^{-1}U of the basis
(b0..b_{2+2r}, a0..a_{2+2r}) and e = Γ[:, b0],

  F(γ) = Γ[b0, b0] − eᵀ Ĉ (I + Γ Ĉ)^{-1} e,       E_A(γ) = −γ² F'(γ).

For rank one (r = 1) this is the 10×10 system of docs/theory.md §6.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .base import SymbolicSystem
from .bulk import INTERMEDIATES, RESOLVENT_KERNELS, bulk_system
from .symbols import KERNEL, a1, c, gamma, gram_symbols, lam

#: the nine traces (name, kernel, power of λ), in a fixed order
TRACES = (
    ("T_Q0", "Q", 0), ("T_Q1", "Q", 1),
    ("T_QK0", "QK", 0), ("T_QK1", "QK", 1), ("T_QK2", "QK", 2),
    ("T_KQK0", "KQK", 0), ("T_KQK1", "KQK", 1), ("T_KQK2", "KQK", 2), ("T_KQK3", "KQK", 3),
)


def _trace_symbol(name: str) -> sp.Symbol:
    kind, j = name[2:-1], name[-1]
    return sp.Symbol(f"T_{{{kind}}}^{{({j})}}", real=True)


TRACE_SYMBOLS = tuple(_trace_symbol(name) for name, _, _ in TRACES)
TRACE_INTEGRANDS = tuple(lam**j * RESOLVENT_KERNELS[kind] for _, kind, j in TRACES)


def weight_lambda(G: sp.Matrix, rank: int) -> sp.Matrix:
    r"""Λ with XᵀWX − ZᵀZ = E Λ Eᵀ, indices 0 ↔ y, 1 ↔ Zᵀμ, 1+k ↔ Zᵀw_K^{(k)}, 1+r+k ↔ Zᵀw_Q^{(k)}.

    Λ00 = ‖μ‖² + Σ_k κ_K^{(k)} κ_Q^{(k)},  Λ01 = Λ10 = 1,  Λ[0, Q_k] = κ_K^{(k)},
    Λ[K_k, 0] = κ_Q^{(k)},  Λ[K_k, Q_k] = 1  (κ_K = μᵀw_K, κ_Q = μᵀw_Q read off 𝔊).
    """
    size = 2 + 2 * rank
    L = sp.zeros(size, size)
    kK = [G[0, 1 + k] for k in range(rank)]
    kQ = [G[0, 1 + rank + k] for k in range(rank)]
    L[0, 0] = G[0, 0] + sum(a * b for a, b in zip(kK, kQ))
    L[0, 1] = L[1, 0] = 1
    for k in range(rank):
        iK, iQ = 2 + k, 2 + rank + k
        L[0, iQ] = kK[k]
        L[iK, 0] = kQ[k]
        L[iK, iQ] = 1
    return L


def coupling_matrix(A: sp.Matrix) -> sp.Matrix:
    r"""C (rows a0..a_{N-1}, columns b0..b_{N-1}, N = 3 + 2r) with Δ/√n = Σ C_ij a_i b_jᵀ.

    ``A`` is the coefficient matrix of the low-rank kernel part L = (1/p) E A Eᵀ; in the
    linearised model (docs/theory.md §4, §6) A = a1 Λ. Then
    C[a0, b1] = 1;  C[a0, b0] += A00/c;  C[a0, b_{σ(j)}] += A0j/√c (j ≥ 1);
    C[a_{i+1}, b_{σ(j)}] += ω_ij A_ij,  σ(0) = 0, σ(j) = j + 1,
    ω00 = 1/√c, ω0j = ωi0 = 1, ωij = √c (i, j ≥ 1).
    """
    m = A.shape[0]
    N = m + 1
    C = sp.zeros(N, N)

    def sigma(j):
        return 0 if j == 0 else j + 1

    def omega(i, j):
        if i == 0 and j == 0:
            return 1 / sp.sqrt(c)
        if i == 0 or j == 0:
            return sp.Integer(1)
        return sp.sqrt(c)

    C[0, 1] += 1
    C[0, 0] += A[0, 0] / c
    for j in range(1, m):
        C[0, sigma(j)] += A[0, j] / sp.sqrt(c)
    for i in range(m):
        for j in range(m):
            C[i + 1, sigma(j)] += omega(i, j) * A[i, j]
    return C


def coefficient_symbols(m: int) -> sp.Matrix:
    """A generic m×m coefficient matrix 𝒜_ij (symbols) for the low-rank kernel part (1/p) E 𝒜 Eᵀ."""
    return sp.Matrix(m, m, lambda i, j: sp.Symbol(f"A_{{{i}{j}}}", real=True))


def gram_gamma(G: sp.Matrix) -> sp.Matrix:
    r"""Γ = UᵀH0^{-1}U in the order (b0, b1, b2.., a0, a1, a2..), docs/theory.md §6, in the nine traces."""
    TQ0, TQ1, TQK0, TQK1, TQK2, TKQK0, TKQK1, TKQK2, TKQK3 = TRACE_SYMBOLS
    k = G.shape[0]  # number of vectors μ, w_K.., w_Q..
    N = 2 + k
    Gnn, Gpp, Gnp = sp.zeros(N, N), sp.zeros(N, N), sp.zeros(N, N)
    Gnn[0, 0] = TQ0
    Gnn[0, 1] = Gnn[1, 0] = TQK0
    Gnn[1, 1] = TKQK0
    Gpp[0, 0] = G[0, 0] * (TKQK1 - 1)
    Gpp[1, 1] = c * TKQK2 - 1
    Gnp[0, 1] = sp.sqrt(c) * TQK1
    Gnp[1, 1] = sp.sqrt(c) * TKQK1
    for i in range(k):
        Gpp[0, 2 + i] = Gpp[2 + i, 0] = G[0, i] * (TKQK2 - 1 / c)
        Gnp[2 + i, 0] = G[i, 0] * TQK1 / sp.sqrt(c)
        for j in range(k):
            Gnn[2 + i, 2 + j] = G[i, j] * TQ1 / c
            Gpp[2 + i, 2 + j] = G[i, j] * (TKQK3 - (1 + 1 / c) / c)
            Gnp[2 + i, 2 + j] = G[i, j] * TQK2 / sp.sqrt(c)
    return sp.BlockMatrix([[Gnn, Gnp], [Gnp.T, Gpp]]).as_explicit()


@lru_cache(maxsize=None)
def attention_system(rank: int = 1) -> SymbolicSystem:
    r"""The attention system for rank-r weights: bulk unknowns, the nine traces, Λ, C, Γ and F.

    Attributes added to the SymbolicSystem: ``bulk``, ``traces`` (symbol → integrand),
    ``gram`` (𝔊 symbols), ``Lambda``, ``C``, ``C_hat``, ``Gamma``, and ``C_hat_generic``: Ĉ for a
    generic coefficient matrix 𝒜 in place of a1 Λ (``coefficients``), which is what the numeric
    backends compile, so that corrected kernels (e.g. finite-p) can supply their own 𝒜.
    The system is that of docs/theory.md §6.

    Parameters
    ----------
    rank : int
        The rank r of the weights W = I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ} (docs/theory.md §6.7).

    Returns
    -------
    SymbolicSystem
        The bulk unknowns (e1, e2, e3) and the attention output.

    Examples
    --------
    >>> a = attention_system()
    >>> a.unknowns, len(a.traces), a.C.shape
    ((e_1, e_2, e_3), 9, (5, 5))
    >>> attention_system(rank=2).C.shape
    (7, 7)
    """
    bulk = bulk_system()
    G = gram_symbols(rank)
    L = weight_lambda(G, rank)
    C = coupling_matrix(a1 * L)
    N = C.shape[0]
    C_hat = sp.BlockMatrix([[sp.zeros(N, N), C.T], [C, sp.zeros(N, N)]]).as_explicit()
    Gamma = gram_gamma(G)
    Gam, Ch = sp.MatrixSymbol("Gamma", 2 * N, 2 * N), sp.MatrixSymbol("Chat", 2 * N, 2 * N)
    ev, u0 = sp.MatrixSymbol("e", 2 * N, 1), sp.MatrixSymbol("u_0", 2 * N, 1)
    # shown unevaluated (u0 = first unit vector, e = Γ u0); evaluated numerically by the backends
    F_shown = u0.T * Gam * u0 - ev.T * Ch * (sp.Identity(2 * N) + Gam * Ch).inverse() * ev
    from .marchenko_pastur import mp_integral

    system = SymbolicSystem(
        name=f"attention (rank {rank})",
        unknowns=bulk.unknowns,
        parameters=(c, gamma) + KERNEL + tuple(sorted(G.free_symbols, key=str)),
        equations=list(bulk.equations) + [sp.Eq(T, mp_integral(g, INTERMEDIATES)) for T, g in zip(TRACE_SYMBOLS, TRACE_INTEGRANDS)],
        definitions=dict(bulk.definitions),
        output=F_shown,
        notes="F = Gamma[b0,b0] - e^T Chat (I + Gamma Chat)^{-1} e with e = Gamma[:, b0]; "
              "Gamma, Chat are available as .Gamma and .C_hat",
    )
    system.bulk = bulk
    system.rank = rank
    system.traces = dict(zip(TRACE_SYMBOLS, TRACE_INTEGRANDS))
    system.gram = G
    system.Lambda = L
    system.C = C
    system.C_hat = C_hat
    A = coefficient_symbols(L.shape[0])
    Cg = coupling_matrix(A)
    system.coefficients = A
    system.C_hat_generic = sp.BlockMatrix([[sp.zeros(N, N), Cg.T], [Cg, sp.zeros(N, N)]]).as_explicit()
    system.Gamma = Gamma
    return system


def woodbury_output(Gamma: sp.Matrix, C_hat: sp.Matrix) -> sp.Expr:
    r"""F = Γ00 − eᵀ Ĉ (I + ΓĈ)^{-1} e as an explicit SymPy expression (small or substituted systems only)."""
    e = Gamma[:, 0]
    M = sp.eye(Gamma.shape[0]) + Gamma * C_hat
    return Gamma[0, 0] - (e.T * C_hat * M.LUsolve(e))[0, 0]
