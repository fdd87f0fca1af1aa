r"""The residual, multi-head and softmax systems as SymPy objects (docs/theory.md §13).

Each variant is the attention system of docs/theory.md §6 (:func:`~symattn.systems.attention_system`)
under a substitution of its parameters, held symbolically so that it prints and exports to LaTeX:

- residual Φ = X(I + K): d → d + 1;
- H summed heads of the paper's form: γ → γ/H² (and d → d + 1/H with a residual), the Gram
  matrix that of W̄ = (1/H) Σ_h W_h; H identical concatenated heads: γ → γ/H;
- softmax at temperature τ: a1 → 1/τ, s² → e^{1/τ²} − 1 − 1/τ², d → 0 and γ → γ(n − 1)²/p, the
  constants of ĝ(t) = exp(t/τ − 1/(2τ²)) − 1 obtained symbolically from E e^{aξ} = e^{a²/2}
  (:func:`softmax_kernel_constants`).
"""

from __future__ import annotations

import sympy as sp

from .attention import attention_system
from .base import SymbolicSystem
from .symbols import a1, c, d, gamma, lam, s2

__all__ = ["tau", "n_tokens", "heads_H", "residual_system", "heads_system", "softmax_kernel_constants",
           "softmax_system", "polynomial_integrand"]

#: the softmax temperature τ, the number of tokens n and the number of heads H
tau = sp.Symbol("tau", positive=True)
n_tokens = sp.Symbol("n", positive=True)
heads_H = sp.Symbol("H", positive=True, integer=True)


def _renamed(system: SymbolicSystem, name: str, notes: str) -> SymbolicSystem:
    system.name = name
    system.notes = notes + ("; " + system.notes if system.notes else "")
    return system


def residual_system(rank: int = 1, f=None, diagonal: str = "f") -> SymbolicSystem:
    r"""The residual layer Φ = X(I + K): the attention system with d → d + 1 (docs/theory.md §13.1);
    with an activation ``f``, its constants a1, s², d substituted (as :func:`symattn.systems.attention_system`).

    Examples
    --------
    >>> from symattn.systems.symbols import d
    >>> r = residual_system()
    >>> r.name, any(eq.has(d + 1) for eq in r.equations)
    ('residual attention (rank 1)', True)
    """
    s = attention_system(rank).subs(d, d + 1)
    return _with_activation(_renamed(s, f"residual attention (rank {rank})", "Phi = X(I + K): d -> d + 1"),
                            f, diagonal)


def heads_system(rank: int = 1, readout: str = "sum", residual: bool = False, f=None,
                 diagonal: str = "f") -> SymbolicSystem:
    r"""H heads of the paper's form (docs/theory.md §13.2): ``'sum'``: γ → γ/H² (d → d + 1/H with a
    residual), the Gram matrix of W̄ = (1/H)Σ_h W_h; ``'concat'`` of identical heads: γ → γ/H; with an
    activation ``f``, its constants a1, s², d substituted (as :func:`symattn.systems.attention_system`).

    Examples
    --------
    >>> heads_system(readout="concat").name
    'multi-head concat of identical heads (rank 1)'
    """
    if readout == "sum":
        sub = {gamma: gamma / heads_H**2}
        if residual:
            sub[d] = d + 1 / heads_H
        return _with_activation(_renamed(attention_system(rank).subs(sub), f"multi-head sum (rank {rank})",
                                         "Phi = X sum_h K_h = H X Kbar: gamma -> gamma/H^2"
                                         + (", d -> d + 1/H" if residual else "")), f, diagonal)
    return _with_activation(_renamed(attention_system(rank).subs(gamma, gamma / heads_H),
                                     f"multi-head concat of identical heads (rank {rank})",
                                     "M = H M_1: gamma -> gamma/H"), f, diagonal)


def _with_activation(system: SymbolicSystem, f, diagonal: str) -> SymbolicSystem:
    from .constants import substitute_constants

    return substitute_constants(system, f, diagonal)


def softmax_kernel_constants() -> dict:
    r"""a1, ν, s², d of ĝ(t) = exp(t/τ − 1/(2τ²)) − 1 from the Gaussian moment-generating function.

    a1 = E[ξĝ(ξ)] = 1/τ, ν = E[ĝ(ξ)²] = e^{1/τ²} − 1, s² = ν − a1², d = 0 (docs/theory.md §13.3).

    Examples
    --------
    >>> k = softmax_kernel_constants()
    >>> k["a1"], k["nu"]
    (1/tau, exp(tau**(-2)) - 1)
    """
    # Gaussian moments from the moment-generating function E e^{aξ} = e^{a²/2} (exact, no integration)
    a = sp.Symbol("a", real=True)
    mgf = sp.exp(a**2 / 2)
    shift = sp.exp(-1 / (2 * tau**2))
    mean = sp.simplify(mgf.subs(a, 1 / tau) * shift - 1)
    k1 = sp.simplify(sp.diff(mgf, a).subs(a, 1 / tau) * shift)
    nu = sp.simplify(mgf.subs(a, 2 / tau) * shift**2 - 2 * mgf.subs(a, 1 / tau) * shift + 1)
    assert mean == 0  # ĝ is centred
    return {"a1": k1, "nu": nu, "s2": sp.simplify(nu - k1**2), "d": sp.Integer(0)}


def softmax_system(rank: int = 1) -> SymbolicSystem:
    r"""The softmax layer's limit (docs/theory.md §13.3): the attention system with the constants of
    :func:`softmax_kernel_constants` and the ridge γ → γ(n − 1)²/p, p = cn.

    Examples
    --------
    >>> s = softmax_system()
    >>> any(eq.has(tau) for eq in s.equations)
    True
    """
    k = softmax_kernel_constants()
    sub = {a1: k["a1"], s2: k["s2"], d: k["d"], gamma: gamma * (n_tokens - 1) ** 2 / (c * n_tokens)}
    return _renamed(attention_system(rank).subs(sub), f"softmax (rank {rank})",
                    "K = 11'/n + sqrt(p)/(n-1) Khat P: gamma -> gamma (n-1)^2/p, ghat = exp(t/tau - 1/(2 tau^2)) - 1")


def polynomial_integrand(alpha, beta) -> sp.Expr:
    r"""γ²/(q(λ) + γ)², q(λ) = cλ(α + βλ)²: E of Φ = X(αI + βXᵀX/p) at μ = 0 is its integral
    against μ_S (docs/theory.md §13.1).

    Examples
    --------
    >>> polynomial_integrand(1, 1)
    gamma**2/(c*lambda*(lambda + 1)**2 + gamma)**2
    """
    return gamma**2 / (c * lam * (alpha + beta * lam) ** 2 + gamma) ** 2
