"""Symbolic layer: the deterministic-equivalent systems as SymPy objects (docs/theory.md §3, §5, §6)."""

from .attention import TRACES, woodbury_output
from .attention import attention_system as _integral_attention_system
from .base import SymbolicSystem
from .bulk import bulk_system, proposition1_integrand
from .linear import linear_system

__all__ = [
    "SymbolicSystem",
    "linear_system",
    "bulk_system",
    "attention_system",
    "proposition1_integrand",
    "woodbury_output",
    "TRACES",
]


def attention_system(rank: int = 1, form: str = "integral") -> SymbolicSystem:
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

    Returns
    -------
    SymbolicSystem
        The equations, traces, Ĉ, Γ and the output as SymPy objects.

    Examples
    --------
    >>> attention_system().C.shape, attention_system(form="closed").name
    ((5, 5), 'attention (rank 1, closed form)')
    """
    if form == "closed":
        from .closed import closed_attention_system

        return closed_attention_system(rank)
    if form != "integral":
        from ..errors import ParameterError

        raise ParameterError("form", form, "'integral' or 'closed'")
    return _integral_attention_system(rank)
