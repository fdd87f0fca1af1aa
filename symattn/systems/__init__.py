"""Symbolic layer: the deterministic-equivalent systems as SymPy objects (docs/theory.md §3, §5, §6)."""

from .attention import TRACES, attention_system, woodbury_output
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
