r"""The SymPy symbols shared by every system, named as in docs/theory.md.

- ``c`` = p/n, ``gamma`` = γ (the ridge; z = −γ), ``lam`` = λ (eigenvalue of S = ZᵀZ/p);
- ``a1``, ``s2`` = s² = ν − a1², ``d``: the constants of the linearised kernel (docs/theory.md §4);
- ``m2`` = ‖μ‖² (the signal-to-noise ratio ``snr``);
- ``e1, e2, e3``: the bulk unknowns (docs/theory.md §5);
- ``rc`` = √c, used only when compiling (so that compiled integrands are rational).
"""

from __future__ import annotations

import sympy as sp

c = sp.Symbol("c", positive=True)
gamma = sp.Symbol("gamma", positive=True)
lam = sp.Symbol("lambda", nonnegative=True)
a1 = sp.Symbol("a_1", real=True)
s2 = sp.Symbol("s^2", nonnegative=True)
d = sp.Symbol("d", real=True)
m2 = sp.Symbol("m_2", nonnegative=True)
e1, e2, e3 = sp.symbols("e_1 e_2 e_3", real=True)
rc = sp.Symbol("sqrt_c", positive=True)

KERNEL = (a1, s2, d)


def gram_symbols(rank: int) -> sp.Matrix:
    r"""Symmetric Gram matrix 𝔊 of (μ, w_K^{(1..r)}, w_Q^{(1..r)}) as symbols 𝔊_{kl} (k ≤ l)."""
    k = 1 + 2 * rank
    G = sp.zeros(k, k)
    for i in range(k):
        for j in range(i, k):
            G[i, j] = G[j, i] = sp.Symbol(f"G_{{{i}{j}}}" if k <= 10 else f"G_{{{i},{j}}}", real=True)
    return G
