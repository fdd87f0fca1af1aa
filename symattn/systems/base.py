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
        r"""The system as LaTeX for reading: one aligned line per definition, equation and output.

        One naming scheme, the paper's (docs/theory.md §1, §6): the Gram entries are ‖μ‖², μᵀw_K, w_Kᵀw_Q, …
        (:func:`symattn.systems.printing.gram_latex_names`), every integral against the Marchenko–Pastur law
        is ∫ g ρ_c(λ) dλ with ρ_c and its edges λ± written out once, on the last line, and the constants of an activation
        substituted by :func:`~symattn.systems.constants.substitute_constants` stay named (a_1, s², d), their
        values listed once on the first line.

        Examples
        --------
        >>> from symattn.systems import bulk_system
        >>> text = bulk_system().latex()
        >>> text.count(r"\rho_c(\lambda) &=") == 1 and text.count("\\sqrt{(\\lambda_+") == 1
        True
        """
        from .printing import ReadableLatexPrinter, mp_density_latex

        source = getattr(self, "symbolic", None) or self
        gram = getattr(source, "gram", None)
        printer = ReadableLatexPrinter(rank=(gram.shape[0] - 1) // 2 if gram is not None else 1)
        show = printer.doprint
        lines = []
        constants = getattr(self, "constants", None)
        if constants:
            lines.append(r"&\text{constants: } " + r",\ ".join(f"{show(k)} = {show(v)}" for k, v in constants.items()))
        lines += [rf"{show(k)} &= {show(v)}" for k, v in source.definitions.items()]
        lines += [rf"{show(eq.lhs)} &= {show(eq.rhs)}" for eq in source.equations]
        if source.output is not None:
            lines.append(rf"F(\gamma) &= {show(source.output)}")
            lines.append(r"E(\gamma) &= -\gamma^2 F'(\gamma)")
        if any(r"\rho_c(\lambda)" in line or r"\lambda_+" in line or r"\lambda_-" in line for line in lines):
            lines.append(mp_density_latex())
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
