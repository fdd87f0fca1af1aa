"""What every symbolic system has in common: named equations that print and export to LaTeX."""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp


@dataclass
class SymbolicSystem:
    """A deterministic-equivalent system held as SymPy objects.

    Attributes
    ----------
    name : str
    unknowns : tuple of Symbol
    parameters : tuple of Symbol
    equations : list of sympy.Eq  -- the defining equations (printable, substitutable)
    definitions : dict Symbol -> Expr -- named intermediate quantities (β, Δ, m, ...)
    output : Expr -- F(γ) = lim ŷᵀQ(γ)ŷ (in terms of unknowns/definitions)
    """

    name: str
    unknowns: tuple
    parameters: tuple
    equations: list
    definitions: dict = field(default_factory=dict)
    output: sp.Expr | None = None
    notes: str = ""

    @property
    def free_symbols(self) -> set:
        """The symbols of the equations, the definitions and the output (SymPy's ``free_symbols``: an
        integration variable is bound, not free).

        Examples
        --------
        >>> from symattn.systems import bulk_system
        >>> sorted(map(str, bulk_system().free_symbols))
        ['Delta', 'a_1', 'beta', 'c', 'd', 'e_1', 'e_2', 'e_3', 'gamma', 'lambda', 's^2']
        """
        out = set()
        for eq in self.equations:
            out |= eq.free_symbols
        for k, v in self.definitions.items():
            out |= sp.sympify(k).free_symbols | sp.sympify(v).free_symbols
        if self.output is not None:
            out |= self.output.free_symbols
        return out

    def latex(self) -> str:
        """The system as LaTeX: one aligned line per definition, equation and output."""
        lines = [rf"{sp.latex(k)} &= {sp.latex(v)}" for k, v in self.definitions.items()]
        lines += [rf"{sp.latex(eq.lhs)} &= {sp.latex(eq.rhs)}" for eq in self.equations]
        if self.output is not None:
            lines.append(rf"F(\gamma) &= {sp.latex(self.output)}")
            lines.append(r"E(\gamma) &= -\gamma^2 F'(\gamma)")
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def pretty(self) -> str:
        parts = [f"{self.name} system"]
        if self.notes:
            parts.append(self.notes)
        parts += [f"  {sp.sstr(k)} = {sp.sstr(v)}" for k, v in self.definitions.items()]
        parts += [f"  {sp.sstr(eq.lhs)} = {sp.sstr(eq.rhs)}" for eq in self.equations]
        if self.output is not None:
            parts.append(f"  F(gamma) = {sp.sstr(self.output)}")
            parts.append("  E(gamma) = -gamma**2 * dF/dgamma")
        return "\n".join(parts)

    __str__ = pretty

    def subs(self, *args, **kwargs) -> "SymbolicSystem":
        """A copy with ``expr.subs(*args)`` applied to every equation, definition and the output."""
        return SymbolicSystem(
            name=self.name,
            unknowns=self.unknowns,
            parameters=self.parameters,
            equations=[eq.subs(*args, **kwargs) for eq in self.equations],
            definitions={k: v.subs(*args, **kwargs) for k, v in self.definitions.items()},
            output=None if self.output is None else self.output.subs(*args, **kwargs),
            notes=self.notes,
        )
