"""Symbolic layer: the deterministic-equivalent systems as SymPy objects (docs/theory.md §3, §5, §6)."""

from .attention import TRACES, woodbury_output
from .attention import attention_system as _integral_attention_system
from .base import SymbolicSystem
from .constants import activation_constants, substitute_constants
from .bulk import bulk_system, proposition1_integrand
from .linear import linear_system
from .temporal import ar1_linear_system

__all__ = [
    "SymbolicSystem",
    "linear_system",
    "ar1_linear_system",
    "bulk_system",
    "attention_system",
    "proposition1_integrand",
    "woodbury_output",
    "TRACES",
    "activation_constants",
    "substitute_constants",
]


def attention_system(rank: int = 1, form: str = "integral", f=None, diagonal: str = "f") -> SymbolicSystem:
    r"""The attention system of docs/theory.md §6: ``form='integral'`` (the integrals over μ_S,
    :func:`symattn.systems.attention.attention_system`) or ``form='closed'`` (no integrals:
    :func:`symattn.systems.closed.closed_attention_system`, docs/theory.md §5.8).

    Both hold the same unknowns (e1, e2, e3), the nine traces, the coupling Ĉ and the Woodbury
    output F = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e, E_A = −γ² F'(γ); the closed form writes every trace
    ∫ λ^j R(λ) dμ_S as polynomial moments plus the MP Stieltjes transform at the roots of Δ.

    Parameters
    ----------
    rank : int
        Number r of weight pairs (w_K, w_Q); the Gram matrix is (2r + 1) × (2r + 1) (§6.7).
    form : {'integral', 'closed'}
        Integrals over μ_S, or their closed form.
    f : activation spec, optional
        The activation whose constants a1, s², d replace the symbols (exact where its Gaussian integrals
        have closed forms, 30-digit Floats otherwise: :func:`symattn.systems.constants.activation_constants`);
        None keeps the symbols.
    diagonal : {'f', 'zero'}
        With ``f``: d = lim f(√p)/√p, or d = 0.

    Returns
    -------
    SymbolicSystem
        The equations, traces, Ĉ, Γ and the output as SymPy objects.

    Examples
    --------
    >>> attention_system().C.shape, attention_system(form="closed").name
    ((5, 5), 'attention (rank 1, closed form)')
    >>> from symattn.systems.symbols import KERNEL
    >>> s = attention_system(f="relu")                   # a1 = 1/2, s² = 1/4 − 1/(2π), d = 1, exact
    >>> s.free_symbols & set(KERNEL), s.C[0, 2]
    (set(), 1/(2*sqrt(c)))
    """
    if form == "closed":
        from .closed import closed_attention_system

        system = closed_attention_system(rank)
    elif form != "integral":
        from ..errors import ParameterError

        raise ParameterError("form", form, "'integral' or 'closed'")
    else:
        system = _integral_attention_system(rank)
    return substitute_constants(system, f, diagonal)
