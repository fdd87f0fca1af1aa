r"""The library's SymPy code printers: NumPy and mpmath source from SymPy expressions and
:mod:`sympy.codegen.ast` blocks.

- :class:`ProductPowerPrinter`: SymPy's NumPy printer with small integer powers written as
  products (x**3 -> x*x*x), which numpy evaluates many times faster than ``power`` and which stays
  exact on object arrays of mpmath numbers (the printer of :mod:`symattn.backends.compile`);
- :class:`KernelPrinter`: the same with ``np.`` prefixes and floats as ``repr(float)`` (the kernels of a
  generated solver, :mod:`symattn.codegen.printing`, and the compiled explicit formulas of
  :meth:`symattn.systems.explicit.ExplicitError.compile`);
- :class:`MPKernelPrinter`: the mpmath variant: rationals as ``_mpq(p, q)`` (mpmath numbers at the
  working precision), √ as ``_msqrt``.

They print SymPy objects only (text; no numerics), so they live with the systems, below every
layer that prints code.
"""

from __future__ import annotations

import keyword
import re

import sympy as sp
from sympy.printing.latex import LatexPrinter
from sympy.printing.numpy import NumPyPrinter
from sympy.printing.precedence import PRECEDENCE

__all__ = ["ProductPowerPrinter", "KernelPrinter", "MPKernelPrinter", "NAMES", "identifier", "ReadableLatexPrinter",
           "gram_latex_names", "step_latex_name", "mp_density_latex"]


class ProductPowerPrinter(NumPyPrinter):
    """NumPy printer writing small integer powers as products (x**3 -> x*x*x, x**-2 -> 1/(x*x)).

    numpy's ``power`` with a float exponent is many times slower than multiplication; the
    same source also stays exact for mpmath object arrays.

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> ProductPowerPrinter().doprint(x**3 + 1 / x**2)
    '(x*x*x) + (1/(x*x))'
    """

    def _print_Pow(self, expr, rational=False):
        base, exp = expr.as_base_exp()
        if exp.is_Integer and 1 <= abs(int(exp)) <= 6:
            b = self.parenthesize(base, PRECEDENCE["Mul"] + 1)
            prod = "*".join([b] * abs(int(exp)))
            return f"({prod})" if exp > 0 else f"(1/({prod}))"
        return super()._print_Pow(expr, rational=rational)


class KernelPrinter(ProductPowerPrinter):
    """The library's NumPy printer with ``np.`` prefixes and floats as ``repr(float)``.

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> KernelPrinter().doprint(sp.sqrt(x) + sp.Float(0.1) * x**2)
    'np.sqrt(x) + 0.1*(x*x)'
    """

    def __init__(self):
        super().__init__({"fully_qualified_modules": True, "inline": True, "allow_unknown_functions": False})

    def _module_format(self, fqn, register=True):
        if fqn.startswith("numpy."):
            return "np." + fqn[len("numpy."):]
        return NumPyPrinter._module_format(self, fqn, register)

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Infinity(self, expr):
        return "np.inf"

    def _print_NegativeInfinity(self, expr):
        return "-np.inf"

    def _print_Assignment(self, expr):
        # NumPyPrinter inherits ArrayPrinter._print_Assignment (for array expressions), which
        # drops the denominators of ordinary quotients: print ``lhs = rhs`` plainly
        return f"{self._print(expr.lhs)} = {self._print(expr.rhs)}"

    def _print_Comment(self, expr):
        return f"# {expr.text}"


class MPKernelPrinter(KernelPrinter):
    """The kernel printer for the mpmath variant: rationals as ``_mpq(p, q)`` (mpmath numbers at the
    working precision, not float64 quotients), √ as ``_msqrt`` (elementwise mpmath.sqrt).

    Examples
    --------
    >>> x = sp.Symbol("x")
    >>> MPKernelPrinter().doprint(sp.Rational(1, 3) * sp.sqrt(x))
    '(_mpq(1, 3))*_msqrt(x)'
    """

    def _print_Rational(self, expr):
        return f"_mpq({expr.p}, {expr.q})"

    def _print_Half(self, expr):
        return "_mpq(1, 2)"

    def _print_Float(self, expr):
        return f"_mpq({str(expr)!r})"

    def _print_Pow(self, expr, rational=False):
        if expr.exp == sp.S.Half:
            return f"_msqrt({self._print(expr.base)})"
        if expr.exp == -sp.S.Half:
            return f"(1/_msqrt({self._print(expr.base)}))"
        return super()._print_Pow(expr, rational=rational)

    #: numpy functions that act exactly on object arrays of mpmath numbers (comparisons, selection)
    EXACT = frozenset({"numpy.select", "numpy.where", "numpy.greater", "numpy.greater_equal", "numpy.less",
                       "numpy.less_equal", "numpy.equal", "numpy.not_equal", "numpy.logical_and",
                       "numpy.logical_or", "numpy.logical_not", "numpy.nan", "numpy.inf"})

    def _module_format(self, fqn, register=True):
        if fqn == "numpy.sqrt":
            return "_msqrt"
        if fqn in self.EXACT:
            return super()._module_format(fqn, register)
        raise ValueError(f"the mpmath kernels cannot print {fqn}")


#: readable Python names of symbols whose SymPy names are not identifiers (others are sanitised)
NAMES = {"lambda": "lam", "sqrt_c": "rc", "m_2": "snr", "s^2": "s2", "a_1": "a1", "e_1": "e1", "e_2": "e2",
         "e_3": "e3"}


def identifier(name: str) -> str:
    """A Python identifier for a SymPy symbol name ('T_{QK}^{(1)}' -> 'T_QK1', 'lambda' -> 'lam').

    Examples
    --------
    >>> identifier("T_{QK}^{(1)}"), identifier("lambda"), identifier("G_{0,2}")
    ('T_QK1', 'lam', 'G_02')
    """
    out = NAMES.get(name) or re.sub(r"[^0-9A-Za-z_]+", "", name)
    if not out.isidentifier() or keyword.iskeyword(out):
        out = "_" + out
    return out


# ============================================================================ readable LaTeX
#: the LaTeX of the step names of :func:`symattn.systems.explicit.explicit_error` (prefix → symbol): the
#: blocks of Γ (docs/theory.md §6.9) and the matrices the program inverts
_STEP_PREFIXES = {"Lambda": r"\Lambda", "Gqq": r"\Gamma^{qq}", "GqW": r"\Gamma^{qW}", "GWW": r"\Gamma^{WW}",
                  "MW": r"M^{W}", "Mo": r"M^{o}", "MY": r"M^{Y}", "RV": r"R^{V}", "R1": r"R^{(1)}", "K": r"K",
                  "F": r"F", "E_A": r"E_A", "out": r"\mathrm{out}"}
_MATRIX_OF = {"W": r"M^{W}", "o": r"M^{o}", "Y": r"M^{Y}"}


def gram_latex_names(rank: int) -> dict:
    r"""LaTeX of the Gram symbols 𝔊_kl of (μ, w_K^{(1..r)}, w_Q^{(1..r)}) in the paper's notation:
    ‖μ‖², μᵀw_K, w_Kᵀw_Q, ‖w_Q‖² (with a superscript (k) for rank > 1).

    Examples
    --------
    >>> from symattn.systems.symbols import gram_symbols
    >>> names = gram_latex_names(1)
    >>> [names[s] for s in gram_symbols(1)[0, :]]
    ['\\|\\mu\\|^{2}', '(\\mu^{\\top} w_K)', '(\\mu^{\\top} w_Q)']
    """
    from .symbols import gram_symbols

    def vec(i):
        if i == 0:
            return r"\mu"
        k, kind = (i - 1) % rank, "K" if i <= rank else "Q"
        return f"w_{kind}" + (f"^{{({k + 1})}}" if rank > 1 else "")

    G = gram_symbols(rank)
    out = {}
    for i in range(G.shape[0]):
        for j in range(i, G.shape[0]):
            out[G[i, j]] = rf"\|{vec(i)}\|^{{2}}" if i == j else rf"({vec(i)}^{{\top}} {vec(j)})"
    return out


def step_latex_name(name: str) -> str | None:
    r"""The LaTeX of a step name of the explicit program (``Gqq_01`` → Γ^{qq}_{01}, ``invY_02`` → (M^Y)^{-1}_{02},
    ``dot_F`` → Ḟ, ``dE_A_dG_01`` → ∂E_A/∂𝔊_01), or None for a name that is not one.

    Examples
    --------
    >>> step_latex_name("Gqq_01"), step_latex_name("invY_02"), step_latex_name("detW")
    ('\\Gamma^{qq}_{01}', '(M^{Y})^{-1}_{02}', '\\det M^{W}')
    """
    m = re.fullmatch(r"dot_(.+)", name)
    if m:
        inner = step_latex_name(m.group(1))
        return None if inner is None else rf"\dot{{{inner}}}"
    m = re.fullmatch(r"det(W|o|Y)", name)
    if m:
        return rf"\det {_MATRIX_OF[m.group(1)]}"
    m = re.fullmatch(r"inv(W|o|Y)_(\d+)", name)
    if m:
        return rf"({_MATRIX_OF[m.group(1)]})^{{-1}}_{{{m.group(2)}}}"
    m = re.fullmatch(r"([A-Za-z]+\d?|E_A)(?:_(\d+))?", name)
    if m and m.group(1) in _STEP_PREFIXES:
        return _STEP_PREFIXES[m.group(1)] + (f"_{{{m.group(2)}}}" if m.group(2) else "")
    return None


class ReadableLatexPrinter(LatexPrinter):
    r"""LaTeX for people: Gram entries in the paper's notation (‖μ‖², μᵀw_K, …), the explicit program's steps
    in one scheme (Γ^{qq}_{01}, (M^Y)^{-1}_{02}, Ṫ), and every integral against the Marchenko–Pastur law
    written ∫ g dμ_S(λ), the density ρ_c named once (:func:`mp_density_latex`) instead of written out in each.

    Examples
    --------
    >>> from symattn.systems.marchenko_pastur import density, edge_minus, edge_plus
    >>> from symattn.systems.symbols import lam
    >>> ReadableLatexPrinter(rank=1).doprint(sp.Integral(lam * density, (lam, edge_minus, edge_plus)))
    '\\int \\lambda \\, \\rho_c(\\lambda)\\, d\\lambda'
    """

    def __init__(self, rank: int = 1, settings=None):
        names = dict((settings or {}).get("symbol_names", {}))
        names.update(gram_latex_names(rank))
        super().__init__(dict(settings or {}, symbol_names=names))

    def _print_Symbol(self, expr, style="plain"):
        if expr in self._settings["symbol_names"]:
            return self._settings["symbol_names"][expr]
        step = step_latex_name(expr.name)
        if step is not None:
            return step
        m = re.fullmatch(r"d(.+)_d(.+)", expr.name)   # a derivative step d<target>_d<base>
        if m:
            top = step_latex_name(m.group(1))
            named = {str(k): v for k, v in self._settings["symbol_names"].items()}
            base = named.get(m.group(2)) or self._print(sp.Symbol(m.group(2)))
            if top is not None:
                return rf"\frac{{\partial {top}}}{{\partial {base}}}"
        return super()._print_Symbol(expr, style)

    def _print_Pow(self, expr):
        from .marchenko_pastur import edge_minus, edge_plus

        if expr == edge_minus or expr == edge_plus:   # the edges of the law, named by mp_density_latex
            return r"\lambda_-" if expr == edge_minus else r"\lambda_+"
        return super()._print_Pow(expr)

    def _print_Integral(self, expr):
        from .marchenko_pastur import density, edge_minus, edge_plus
        from .symbols import lam

        if len(expr.limits) == 1 and tuple(expr.limits[0]) == (lam, edge_minus, edge_plus):
            g = expr.function / density   # the density's factors cancel (same bases)
            if not g.has(sp.sqrt((edge_plus - lam) * (lam - edge_minus))):
                return rf"\int {self._print(g)} \, \rho_c(\lambda)\, d\lambda"
        return super()._print_Integral(expr)


def mp_density_latex() -> str:
    r"""The one line that names the Marchenko–Pastur density ρ_c of the readable LaTeX (docs/theory.md §1.4).

    Examples
    --------
    >>> mp_density_latex().startswith(r"\rho_c(\lambda)")
    True
    """
    return (r"\rho_c(\lambda) &= \frac{c\sqrt{(\lambda_+ - \lambda)(\lambda - \lambda_-)}}{2\pi\lambda}"
            r"\ \text{on } [\lambda_-, \lambda_+],\quad \lambda_\pm = \Big(1 \pm \frac{1}{\sqrt c}\Big)^2"
            r"\quad \text{(the integrals run over } [\lambda_-, \lambda_+]\text{; the atom } (1 - c)_+ "
            r"\text{ at } 0 \text{ is written apart)}")
