r"""Explicit scalar formulas for F and E_A (docs/theory.md §6.9), by hand-structured block elimination.

The Woodbury output F = [(I + ΓĈ)^{-1}Γ]_{b0 b0} (docs/theory.md §6.6) is written without any
generic matrix inverse, using the sparsity of Ĉ and the block structure of Γ:

- Γ is block diagonal, Γ = Γ_Y ⊕ Γ_V: the "label" block Y = (b0, b1, a1) (3×3, in the traces)
  and the "vector" block V (the vectors Zᵀv_k/√p, ZZᵀv_k/p and μ, with Gram entries 𝔊_kl times
  one of six trace combinations);
- Ĉ couples Y to V only through three V-vectors: u_b0 = (a1Λ00/c) μ + a1 α(ν_Q), u_b1 = μ and
  u_a1 = a1 β(ν_K) (ν_K = μ + Σ_k κ_K^{(k)} w_Q^{(k)}, ν_Q = μ + Σ_k κ_Q^{(k)} w_K^{(k)}), and
  inside V through the pairs (α(w_K^{(k)}), β(w_Q^{(k)})) (weight √c a1) and (μ, β(ν_K)) (a1/√c).

Three Schur complements then give F: the W-coupling (a 2r×2r inverse), the μ–β(ν_K) coupling
(2×2) and the Y block (3×3), each an adjugate over a determinant of scalars. The formulas are a
*straight-line program*: a list of (symbol, explicit expression) steps, each small, in the nine
traces, c, a1 and the Gram entries. E_A = −γ² F'(γ) = −γ² Σ_j ∂F/∂T_j Ṫ_j is one forward
(tangent) pass over the steps. Fully expanded, F is too large to be useful (rank one: about
7·10⁵ operations nested, and a derivative of it takes minutes); the step form keeps every
derivative small. :meth:`ExplicitError.diff` differentiates through the steps, and
:meth:`ExplicitError.expression` substitutes them (for sp.diff on a small system, or printing).

The program is data: :meth:`ExplicitError.program` gives the steps that targets need as a
:class:`sympy.codegen.ast.CodeBlock` of assignments (topologically ordered, common subexpressions
eliminated), :meth:`ExplicitError.compile` prints it with the library's printers
(:mod:`symattn.systems.printing`) into one numpy or mpmath function (:class:`CompiledProgram`),
:meth:`ExplicitError.evaluate_at` evaluates any expression built from the steps at a solved point
(:class:`symattn.theory.TheoryResult`), and :meth:`ExplicitError.latex` prints the steps as aligned
equations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import sympy as sp
from sympy.codegen.ast import Assignment, CodeBlock

from ..validation import known_keywords
from .attention import TRACE_SYMBOLS, TRACES
from .printing import KernelPrinter, MPKernelPrinter, ReadableLatexPrinter, identifier
from .symbols import a1, c, gamma, gram_symbols, rc

#: the backends of :meth:`ExplicitError.compile`
BACKENDS = ("numpy", "mpmath")
#: :meth:`ExplicitError.expression` warns above this many operations (its :meth:`~ExplicitError.size`)
EXPRESSION_WARN = 10**5

#: the γ-derivatives Ṫ_j of the nine traces, in the order of TRACE_SYMBOLS
TRACE_DOT_SYMBOLS = tuple(sp.Symbol(r"\dot{" + str(T) + "}", real=True) for T in TRACE_SYMBOLS)


@dataclass
class ExplicitError:
    r"""F and E_A as explicit scalar formulas (a straight-line program; docs/theory.md §6.9).

    Attributes
    ----------
    rank : int
    traces, trace_dots : tuple of Symbol
        T_j and Ṫ_j = dT_j/dγ (order of :data:`symattn.systems.attention.TRACES`).
    gram : sympy.Matrix
        The Gram symbols 𝔊_kl of (μ, w_K^{(1..r)}, w_Q^{(1..r)}) (``mu2`` = 𝔊_00, ``mu_wk`` = 𝔊_01).
    steps : list of (Symbol, Expr)
        The intermediates, in order; each expression uses the base symbols and earlier steps.
    F, E_A : Symbol
        The step symbols holding F and E_A = −γ² Σ_j ∂F/∂T_j Ṫ_j.
    pivots : dict
        Rank ≥ 3: step symbol of each Gauss–Jordan reciprocal 1/a_kk → (a_kk, the entries of its row);
        :meth:`evaluate` refuses values at which a pivot is below 1e-8 of its row (no pivoting is possible
        in a formula).

    Examples
    --------
    >>> ex = explicit_error(1)
    >>> ex.steps[0]                                    # Λ00 = ‖μ‖² + μᵀw_K μᵀw_Q
    (Lambda_00, G_{00} + G_{01}*G_{02})
    >>> len(ex.traces), ex.E_A in dict(ex.steps)
    (9, True)
    """

    rank: int
    traces: tuple
    trace_dots: tuple
    gram: sp.Matrix
    steps: list = field(default_factory=list)
    F: sp.Symbol | None = None
    E_A: sp.Symbol | None = None
    pivots: dict = field(default_factory=dict)

    @property
    def mu2(self):
        """The symbol of ‖μ‖² (𝔊_00)."""
        return self.gram[0, 0]

    @property
    def mu_wk(self):
        """The symbol of μᵀw_K^{(1)} (𝔊_01)."""
        return self.gram[0, 1]

    @property
    def base(self) -> tuple:
        """The inputs: traces, their γ-derivatives, the Gram entries, a1, c, γ."""
        return self.traces + self.trace_dots + tuple(sorted(self.gram.free_symbols, key=str)) + (a1, c, gamma)

    def diff(self, target, x):
        r"""d target/dx through the steps (forward chain rule), as a new step symbol.

        ``target`` is a step symbol (e.g. ``self.E_A``) and ``x`` a base symbol; the derivative
        steps are appended to :attr:`steps` (and cached).

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> lam00 = ex.steps[0][0]                      # Λ00 = ‖μ‖² + μᵀw_K μᵀw_Q
        >>> d = ex.diff(lam00, ex.mu_wk)
        >>> dict(ex.steps)[d]
        G_{02}
        """
        return self.diff_along(target, {x: sp.Integer(1)}, x.name)

    def diff_along(self, target, direction: dict, label: str):
        r"""The derivative of ``target`` in the direction ``direction`` (base symbol → its rate, a number or an
        expression), Σ_b ∂target/∂b · direction[b] through the steps (forward chain rule), as a new step symbol;
        the steps appended are named ``d<step>_d<label>``. Cached per (target, direction, label) on this system.

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> lam00 = ex.steps[0][0]                      # Λ00 = ‖μ‖² + μᵀw_K μᵀw_Q
        >>> d = ex.diff_along(lam00, {ex.mu_wk: 2}, "twice_mu_wk")
        >>> dict(ex.steps)[d]
        2*G_{02}
        """
        key = (target, tuple(direction.items()), label)
        cache = self.__dict__.setdefault("_diff_cache", {})
        if key in cache:
            return cache[key]
        tangent = {}
        new = []
        for s, expr in self.steps:
            free = expr.free_symbols
            d = sum((sp.diff(expr, b) * v for b, v in direction.items() if b in free), sp.Integer(0))
            d += sum((sp.diff(expr, t) * tangent[t] for t in free if t in tangent), sp.Integer(0))
            if d != 0:
                ds = sp.Symbol(f"d{s.name}_d{label}", real=True)
                tangent[s] = ds
                new.append((ds, d))
            if s == target:
                break
        self.steps.extend(new)
        out = tangent.get(target, sp.Integer(0))
        cache[key] = out
        return out

    def size(self, target) -> int:
        """The number of operations (SymPy's ``count_ops``) of :meth:`expression` (``target``) without building
        it: each step costs its own operations plus, per occurrence, those of the steps it uses (an upper
        bound: SymPy merges repeated factors, Λ·Λ = Λ², as it builds).

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> lam00 = ex.steps[0][0]
        >>> ex.size(lam00) == sp.count_ops(ex.expression(lam00))
        True
        >>> ex.size(ex.E_A) > 10**6                          # E_A written out: millions of operations
        True
        """
        steps = dict(self.steps)
        sizes = {}
        for s, e in self.steps:
            used = [t for t in e.free_symbols if t in sizes]
            sizes[s] = sp.count_ops(e) + sum(e.count(t) * sizes[t] for t in used)
        expr = sp.sympify(target)
        return int(sp.count_ops(expr) + sum(expr.count(t) * sizes[t] for t in expr.free_symbols if t in steps))

    def expression(self, target):
        """``target`` with every step substituted: one expression in the base symbols.

        What it costs: the steps share their intermediates, the expression does not, so its size grows with
        every level of the program. At rank 1, Λ00 is 2 operations, F about 1.3·10⁶ and E_A about 1.6·10⁷
        (SymPy's ``count_ops``); building E_A took 166 s. :meth:`size` says the size beforehand, and
        above :data:`EXPRESSION_WARN` operations an :class:`~symattn.errors.ExpressionSizeWarning` names it.
        The compact forms of the same formula come first: :meth:`program` (the steps with common
        subexpressions eliminated, a SymPy ``CodeBlock``), :meth:`latex` (``cse=True``), :meth:`compile`
        (a function of arrays) and :meth:`diff` (derivatives through the steps).

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> ex.expression(ex.steps[0][0])
        G_{00} + G_{01}*G_{02}
        """
        size = self.size(target)
        if size > EXPRESSION_WARN:
            import warnings

            from ..errors import ExpressionSizeWarning

            warnings.warn(ExpressionSizeWarning(
                f"expression({target}) writes out about {size:.2g} operations (minutes to build, and as large to "
                "print or evaluate); the compact forms: program() (common subexpressions), latex(cse=True), "
                "compile(), diff()"), stacklevel=2)
        expr = target
        for s, e in reversed(self.steps):
            if expr.has(s):
                expr = expr.xreplace({s: e})
        return expr

    def evaluate(self, target, values: dict):
        """``target`` at numeric (or exact) ``values`` of the base symbols, step by step."""
        env = dict(values)
        for s, e in self.steps:
            if s in self.pivots:
                a, row = (sp.sympify(x).xreplace(env) for x in (self.pivots[s][0], self.pivots[s][1]))
                small = (a == 0) if a.is_Rational else (a.is_number and all(v.is_number for v in row)
                                                         and abs(a) <= 1e-8 * max(abs(v) for v in row))
                if small:   # exact rationals: only a zero pivot; numbers: one below 1e-8 of its row
                    from ..errors import ParameterError

                    raise ParameterError("values", f"pivot {s} = 1/{sp.N(a, 3)}", "values at which every pivot of the "
                                         "rank >= 3 Gauss-Jordan inverse is at least 1e-8 of its row",
                                         hint="the explicit formula cannot pivot; use symattn.solve at these values")
            env[s] = e.xreplace(env)
            if s == target:
                return env[s]
        return sp.sympify(target).xreplace(env)


    # ------------------------------------------------------------------ the program as data
    def _targets(self, targets):
        """``targets`` as a tuple of SymPy expressions (default (E_A,)); a string is refused, never parsed."""
        from ..errors import ParameterError

        if targets is None:
            return (self.E_A,)
        if isinstance(targets, (sp.Basic, int, float)) and not isinstance(targets, bool):
            targets = (targets,)
        out = []
        known = set(self.base) | {s for s, _ in self.steps}
        for t in targets:
            if isinstance(t, str) or not isinstance(t, (sp.Basic, int, float)):
                raise ParameterError("expr", t, "a SymPy expression in the steps and base symbols of the explicit "
                                     "formula (a step symbol such as ex.E_A or ex.diff(...); strings are not parsed)")
            t = sp.sympify(t, strict=True)
            if not isinstance(t, sp.Expr):
                raise ParameterError("expr", t, "a scalar SymPy expression")
            extra = t.free_symbols - known
            if extra:
                raise ParameterError("expr", t, "an expression in the steps and base symbols of the explicit formula",
                                     hint=f"unknown symbols {sorted(map(str, extra))}")
            out.append(t)
        return tuple(out)

    def needed(self, targets=None) -> list:
        """The steps (symbol, expression) that ``targets`` use, directly or through other steps, in order.

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> ex.needed(ex.steps[0][0])
        [(Lambda_00, G_{00} + G_{01}*G_{02})]
        """
        steps = dict(self.steps)
        need, todo = set(), [s for t in self._targets(targets) for s in t.free_symbols]
        while todo:
            s = todo.pop()
            if s in steps and s not in need:
                need.add(s)
                todo.extend(steps[s].free_symbols)
        return [(s, e) for s, e in self.steps if s in need]

    def program(self, targets=None, cse: bool = True) -> CodeBlock:
        r"""The straight-line program of ``targets`` as a :class:`sympy.codegen.ast.CodeBlock`.

        One :class:`~sympy.codegen.ast.Assignment` per step that the targets need (:meth:`needed`), then
        ``out_k = target_k``; with ``cse``, common subexpressions eliminated across all of them
        (:meth:`sympy.codegen.ast.CodeBlock.cse`, new symbols ``x0, x1, ...``), the block topologically
        ordered. The expressions are those of :attr:`steps` (c, not √c).

        Parameters
        ----------
        targets : Expr or sequence of Expr, optional
            Step symbols (``ex.E_A``, ``ex.diff(ex.E_A, ex.mu_wk)``) or any expressions in the steps and
            base symbols; default E_A.
        cse : bool

        Returns
        -------
        sympy.codegen.ast.CodeBlock

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> block = ex.program(ex.steps[0][0] ** 2, cse=False)
        >>> block.left_hand_sides
        (Lambda_00, out_0)
        >>> print(block.args[1])
        Assignment(out_0, Lambda_00**2)
        """
        return self._block(self._targets(targets), cse, rational=False)

    def _block(self, targets, cse, rational):

        conv = (lambda e: e.subs(c, rc**2)) if rational else (lambda e: e)
        outs = [sp.Symbol(f"out_{k}", real=True) for k in range(len(targets))]
        body = [Assignment(s, conv(e)) for s, e in self.needed(targets)]
        body += [Assignment(o, conv(t)) for o, t in zip(outs, targets)]
        if rational:
            body.insert(0, Assignment(rc, sp.sqrt(c)))
        block = CodeBlock(*body)
        if cse and len(block.args) > 1:
            block = block.cse(symbols=sp.numbered_symbols("x"), order="none")
        return block

    def compile(self, backend: str = "numpy", targets=None, args=None) -> "CompiledProgram":
        r"""The program of ``targets`` as one function of the base symbols, for numpy or mpmath.

        The steps that the targets need (:meth:`needed`), with c = (√c)² so that every step is a rational
        function and √c = ``sqrt(c)`` the first assignment, common subexpressions eliminated
        (:meth:`program`), printed by the library's printers (:class:`~symattn.systems.printing.KernelPrinter`,
        :class:`~symattn.systems.printing.MPKernelPrinter`: rationals as mpmath numbers at the working
        precision) into a function by :func:`sympy.lambdify`. Pure arithmetic: it runs on float64 arrays
        (numpy) or on mpmath numbers and object arrays of them (mpmath, at ``mpmath.mp.dps``), elementwise,
        so one call evaluates every point. Cached per (backend, targets, args).

        Parameters
        ----------
        backend : {'numpy', 'mpmath'}
        targets : Expr or sequence of Expr, optional
            As in :meth:`program`; default E_A.
        args : sequence of Symbol, optional
            The arguments, in order; default :attr:`base` (traces, their γ-derivatives, the Gram entries,
            a1, c, γ) followed by any other free symbol of the targets, sorted by name.

        Returns
        -------
        CompiledProgram
            ``fn(*values)``: the targets' values (a tuple when ``targets`` is a sequence).

        Examples
        --------
        >>> import sympy as sp
        >>> ex = explicit_error(1)
        >>> fn = ex.compile("numpy", ex.F)
        >>> vals = {s: sp.Rational(k + 2, 7) for k, s in enumerate(ex.base)}
        >>> bool(abs(fn(*[float(vals[s]) for s in fn.args]) - float(ex.evaluate(ex.F, vals))) < 1e-13)
        True
        """
        from ..errors import ParameterError

        if backend not in BACKENDS:
            raise ParameterError("backend", backend, "'numpy' or 'mpmath'")
        single = targets is None or isinstance(targets, (sp.Basic, int, float))
        tgs = self._targets(targets)
        steps = {s for s, _ in self.steps}
        if args is None:
            free = set().union(*(e.free_symbols for _, e in self.needed(tgs)), *(t.free_symbols for t in tgs))
            args = self.base + tuple(sorted(free - set(self.base) - steps, key=str))
        args = tuple(args)
        key = (backend, tgs, args, single)
        cache = self.__dict__.setdefault("_compiled", {})
        if key not in cache:
            cache[key] = CompiledProgram(self._block(tgs, True, rational=True), args, tgs, backend, single)
        return cache[key]

    def latex(self, targets=None, cse: bool = False) -> str:
        r"""The steps that ``targets`` need (default E_A) as LaTeX aligned equations, one step a line.

        One naming scheme, the paper's: the Gram entries as ‖μ‖², μᵀw_K, w_Kᵀw_Q, … and the steps as
        Γ^{qq}_{01}, (M^Y)^{-1}_{02}, Ṫ (:class:`symattn.systems.printing.ReadableLatexPrinter`).

        Examples
        --------
        >>> ex = explicit_error(1)
        >>> print(ex.latex(ex.steps[0][0]))
        \begin{aligned}
        \Lambda_{00} &= \|\mu\|^{2} + (\mu^{\top} w_K) (\mu^{\top} w_Q)
        \end{aligned}
        """
        tgs = self._targets(targets)
        if cse:
            block = self.program(tgs, cse=True)
            pairs = [(a.lhs, a.rhs) for a in block.args]
        else:
            pairs = self.needed(tgs) + [(sp.Symbol(f"out_{k}"), t) for k, t in enumerate(tgs) if not (
                t.is_Symbol and t in dict(self.steps))]
        show = ReadableLatexPrinter(rank=self.rank).doprint
        lines = [rf"{show(s)} &= {show(e)}" for s, e in pairs]
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def evaluate_at(self, result, expr=None):
        r"""E_A, or any expression ``expr`` built from the steps, at the solved points of ``result``.

        The base symbols take the values of the solution (:class:`symattn.theory.TheoryResult`): the traces
        T_j and their γ-derivatives Ṫ_j (``result.traces``, ``result.trace_dots``, docs/theory.md §6.3), the
        Gram entries of its geometry (``result.gram``), the a1 the solver used (``result.constants``), c and γ;
        ``expr`` is evaluated by the compiled program (:meth:`compile`), in float64 or, for an mpmath result,
        in mpmath at its ``dps``. A derivative ``ex.diff(ex.E_A, ex.mu_wk)`` evaluated so is dE_A/d(μᵀw_K):
        the traces do not depend on the geometry (docs/theory.md §6.9).

        Parameters
        ----------
        result : TheoryResult
            Of :func:`symattn.solve` with the attention model, no correction, a geometry of rank
            :attr:`rank`.
        expr : Expr, optional
            A step symbol or an expression in the steps and base symbols; default E_A. Never a string.

        Returns
        -------
        numpy.ndarray
            Shaped ``result.shape`` (float64, or mpmath numbers in an object array).

        Raises
        ------
        ParameterError
            For a result without traces, a geometry of another rank, an ``expr`` that is not an expression in
            the program's symbols, or (rank ≥ 3) values at which a Gauss–Jordan pivot vanishes.

        Examples
        --------
        >>> import symattn as sa
        >>> g = sa.Geometry(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)
        >>> r = sa.solve("tanh", 0.5, [0.1, 0.5], geometry=g)
        >>> ex = explicit_error(1)
        >>> bool(abs(ex.evaluate_at(r) - r.E).max() < 1e-12)
        True
        """
        import numpy as np

        from ..errors import ParameterError

        if expr is not None and not isinstance(expr, (sp.Basic, int, float)) or isinstance(expr, sp.MatrixBase):
            raise ParameterError("expr", type(expr).__name__, "one SymPy expression (evaluate several one by one, "
                                 "or compile them together with ex.compile)")
        tg = self._targets(expr)[0]
        if "geometry" not in result.parameters or getattr(result, "bulk", None) is None:
            raise ParameterError("result", f"engine {result.parameters.get('engine', 'paper')!r}",
                                 "a result of the paper model's asymptotic attention theory (sa.solve, or "
                                 "Layer(f).theory with gamma > 0): only it has traces")
        gram = result.gram
        if gram.shape != tuple(self.gram.shape):
            raise ParameterError("result", f"a geometry of rank {(gram.shape[0] - 1) // 2}",
                                 f"a result for rank-{self.rank} weights (explicit_error({self.rank}))")
        T, T_dot = result.traces, result.trace_dots    # ParameterError where the result has no traces
        mp = result.parameters.get("backend") == "mpmath"
        shape = result.shape
        values = {s: T[name] for s, (name, _, _) in zip(self.traces, TRACES)}
        values.update({s: T_dot[name] for s, (name, _, _) in zip(self.trace_dots, TRACES)})
        values.update({self.gram[i, j]: gram[i, j] for i in range(gram.shape[0]) for j in range(i, gram.shape[0])})
        values.update({a1: result.constants.a1, c: result.c, gamma: result.gamma})
        pivots = [s for s, _ in self.needed(tg) if s in self.pivots]
        checks = [x for s in pivots for x in (self.pivots[s][0],) + tuple(self.pivots[s][1])]
        fn = self.compile(result.parameters["backend"], (tg, *checks))
        if mp:
            import mpmath

            conv = np.frompyfunc(mpmath.mpf, 1, 1)
            with mpmath.workdps(result.parameters["dps"]):
                vals = [np.asarray(conv(np.asarray(values[s])), dtype=object) for s in fn.args]
                out = fn(*vals)
        else:
            with np.errstate(all="ignore"):
                out = fn(*[np.asarray(values[s], dtype=float) for s in fn.args])
        at = 1
        for s in pivots:
            k = 1 + len(self.pivots[s][1])
            a, row = out[at], out[at + 1:at + k]
            at += k
            small = np.abs(np.asarray(a, dtype=float)) <= 1e-8 * np.max(np.abs(np.asarray(
                np.broadcast_arrays(*row), dtype=float)), axis=0)
            if np.any(small):
                raise ParameterError("result", f"pivot {s} = 1/{float(np.asarray(a, dtype=float).flat[0]):.3g}",
                                     "values at which every pivot of the rank >= 3 Gauss-Jordan inverse is at least "
                                     "1e-8 of its row", hint="the explicit formula cannot pivot; use the solver's E")
        return np.array(np.broadcast_to(np.asarray(out[0], dtype=object if mp else float), shape))


class CompiledProgram:
    r"""A compiled explicit program (:meth:`ExplicitError.compile`): ``fn(*values)`` in the order of :attr:`args`.

    Attributes
    ----------
    args : tuple of Symbol
        The arguments, in order.
    targets : tuple of Expr
        What it returns, in order (one value when compiled for a single target).
    backend : str
        'numpy' or 'mpmath'.
    block : sympy.codegen.ast.CodeBlock
        The program it was printed from (√c first, c = (√c)² in every step, CSE'd).
    source : str
        The printed Python source.

    Examples
    --------
    >>> ex = explicit_error(1)
    >>> fn = ex.compile("mpmath", ex.steps[0][0])          # Λ00 = ‖μ‖² + μᵀw_K μᵀw_Q
    >>> import mpmath
    >>> with mpmath.workdps(30):
    ...     print(fn(*[mpmath.mpf(1) / 3 for s in fn.args]))
    0.444444444444444444444444444444
    """

    def __init__(self, block, args, targets, backend, single):
        self.block, self.args, self.targets, self.backend = block, tuple(args), tuple(targets), backend
        self._single = single
        symbols = set(self.args) | set(block.left_hand_sides)
        names, used = {}, set()
        for s in sorted(symbols, key=lambda s: (s not in self.args, str(s))):
            name = identifier(s.name)
            while name in used:
                name += "_"
            used.add(name)
            names[s] = sp.Symbol(name)
        renamed = [(names[a.lhs], a.rhs.xreplace(names)) for a in block.args]
        outs = [sp.Symbol(f"out_{k}", real=True) for k in range(len(self.targets))]
        ret = tuple(names[o] for o in outs)
        printer, namespace = (KernelPrinter(), _numpy_namespace()) if backend == "numpy" else (
            MPKernelPrinter(), _mpmath_namespace())
        self._fn = sp.lambdify([names[a] for a in self.args], ret, modules=[namespace], printer=printer,
                               cse=lambda exprs: (renamed, exprs), docstring_limit=0)
        import inspect

        self.source = inspect.getsource(self._fn)

    def __call__(self, *values):
        if len(values) != len(self.args):
            from ..errors import ParameterError

            raise ParameterError("values", len(values), f"{len(self.args)} values, in the order of .args")
        out = self._fn(*values)
        return out[0] if self._single else out

    def __repr__(self):
        return f"CompiledProgram({self.backend}, {len(self.args)} args -> {list(self.targets)})"


def _numpy_namespace() -> dict:
    import numpy

    return {"np": numpy}


def _mpmath_namespace() -> dict:
    """``_mpq``, ``_msqrt`` of :class:`~symattn.systems.printing.MPKernelPrinter`: mpmath numbers at the working
    precision, elementwise on object arrays."""
    import mpmath
    import numpy

    sqrt = numpy.frompyfunc(mpmath.sqrt, 1, 1)

    def _msqrt(x):
        return sqrt(x) if isinstance(x, numpy.ndarray) else mpmath.sqrt(x)

    def _mpq(p, q=1):
        return mpmath.mpf(p) / q

    return {"_mpq": _mpq, "_msqrt": _msqrt, "np": numpy}


class _Program:
    """Collects the steps; every nonzero intermediate becomes a named symbol."""

    def __init__(self):
        self.steps = []
        self.pivots = {}

    def let(self, name, expr):
        expr = sp.sympify(expr)
        if expr.is_Number or expr.is_Symbol:
            return expr
        s = sp.Symbol(name, real=True)
        self.steps.append((s, expr))
        return s

    def matrix(self, name, M):
        return sp.Matrix(M.rows, M.cols, lambda i, j: self.let(f"{name}_{i}{j}", M[i, j]))

    def symmetric(self, name, M):
        out = sp.zeros(M.rows, M.cols)
        for i in range(M.rows):
            for j in range(i, M.cols):
                out[i, j] = out[j, i] = self.let(f"{name}_{i}{j}", M[i, j])
        return out

    def inverse(self, name, M):
        """M^{-1}: adj(M)/det(M) up to 4×4; above, Gauss–Jordan elimination with every updated entry a
        step (the adjugate of a 6×6 matrix of symbols took 90 s at rank 3, and its tangent pass more).
        Elimination takes the pivots in order (a formula cannot pivot): a pivot can vanish at values where
        M is invertible (e.g. a Gram entry 𝔊_14 = −1/(a1·T)), so each is recorded in ``pivots`` and
        checked by :meth:`ExplicitError.evaluate`."""
        if M.rows <= 4:
            det = self.let(f"det{name}", M.det(method="berkowitz"))
            adj = M.adjugate(method="berkowitz")
            return sp.Matrix(M.rows, M.cols, lambda i, j: self.let(f"inv{name}_{i}{j}", adj[i, j] / det))
        n = M.rows
        A = M.row_join(sp.eye(n))
        for k in range(n):
            piv = self.let(f"piv{name}_{k}", 1 / A[k, k])
            if isinstance(piv, sp.Symbol):
                self.pivots[piv] = (A[k, k], tuple(A[k, :n]))
            A[k, :] = sp.Matrix(1, 2 * n, lambda _, j: self.let(f"gj{name}_{k}_{k}{j}", A[k, j] * piv))
            for i in range(n):
                if i != k and A[i, k] != 0:
                    f = A[i, k]
                    A[i, :] = sp.Matrix(1, 2 * n, lambda _, j: self.let(f"gj{name}_{k}_{i}{j}", A[i, j] - f * A[k, j]))
        return A[:, n:]


@lru_cache(maxsize=None)
@known_keywords
def explicit_error(rank: int = 1) -> ExplicitError:
    r"""F and E_A for rank-r weights as explicit scalar formulas (docs/theory.md §6.9).

    With Γ = Γ_Y ⊕ Γ_V (docs/theory.md §6.5) and the couplings of Ĉ (§6.4),

    .. math::

       R_1 &= \Gamma_{qq} - \Gamma_{qW} J_W (I + \Gamma_{WW} J_W)^{-1} \Gamma_{Wq},
             \qquad J_W = \sqrt{c}\, a_1 \begin{pmatrix} 0 & I \\ I & 0 \end{pmatrix}
             \quad (W:\ \alpha(w_K^{(k)}),\ \beta(w_Q^{(k)})), \\
       R_V &= R_1 - R_{1,\cdot o} J_o (I + R_{1,oo} J_o)^{-1} R_{1,o\cdot},
             \qquad J_o = \frac{a_1}{\sqrt{c}} \begin{pmatrix} 0 & 1 \\ 1 & 0 \end{pmatrix}
             \quad (o:\ \mu,\ \beta(\nu_K)), \\
       K &= \hat C_{YY} - D R_V D, \qquad D = \mathrm{diag}(1, 1, a_1), \\
       F &= \big[(I + \Gamma_Y K)^{-1} \Gamma_Y\big]_{00}, \qquad
             E_A = -\gamma^2 \sum_j \frac{\partial F}{\partial T_j} \dot T_j,

    on the query vectors q = (u_b0, μ, β(ν_K)), every inverse an adjugate over a determinant.

    Parameters
    ----------
    rank : int
        r ≥ 1, the number of weight pairs (w_K, w_Q) (docs/theory.md §6.7).

    Returns
    -------
    ExplicitError
        The steps, the symbols ``F`` and ``E_A``, the traces, their derivatives and the Gram symbols.

    Examples
    --------
    >>> ex = explicit_error(1)
    >>> ex.F, ex.E_A, ex.mu2, ex.mu_wk
    (F, E_A, G_{00}, G_{01})
    >>> import sympy as sp
    >>> vals = {s: sp.Rational(k + 2, 7) for k, s in enumerate(ex.base)}
    >>> from symattn.systems.attention import attention_system, woodbury_output
    >>> s = attention_system(1)
    >>> sp.simplify(ex.evaluate(ex.F, vals) - woodbury_output(s.Gamma.xreplace(vals), s.C_hat.xreplace(vals)))
    0
    """
    from ..errors import ParameterError

    if not isinstance(rank, int) or rank < 1:
        raise ParameterError("rank", rank, "an integer >= 1")
    TQ0, TQ1, TQK0, TQK1, TQK2, TKQK0, TKQK1, TKQK2, TKQK3 = TRACE_SYMBOLS
    G = gram_symbols(rank)
    rcs = sp.sqrt(c)
    k = 1 + 2 * rank
    K = [1 + i for i in range(rank)]
    Q = [1 + rank + i for i in range(rank)]
    kK, kQ = [G[0, i] for i in K], [G[0, i] for i in Q]
    prog = _Program()
    L00 = prog.let("Lambda_00", G[0, 0] + sum(x * y for x, y in zip(kK, kQ)))
    # the six trace combinations of Γ_V (docs/theory.md §6.5): β–β, β–α, α–α, μ–μ, μ–α, β–μ
    t = {"bb": TQ1 / c, "ba": TQK2 / rcs, "aa": TKQK3 - (1 + 1 / c) / c, "oo": TKQK1 - 1,
         "oa": TKQK2 - 1 / c, "bo": TQK1 / rcs}

    def vec(beta=None, alpha=None, o=0):  # a V-vector: β(x) + α(y) + z μ
        zero = [0] * k
        return sp.Matrix(beta or zero), sp.Matrix(alpha or zero), sp.sympify(o)

    def gram(u, v):
        (xb, xa, xo), (yb, ya, yo) = u, v
        g0 = G[0, :]
        return ((xb.T * G * yb)[0] * t["bb"] + ((xb.T * G * ya)[0] + (xa.T * G * yb)[0]) * t["ba"]
                + (xa.T * G * ya)[0] * t["aa"] + xo * yo * G[0, 0] * t["oo"]
                + (xo * (g0 * ya)[0] + yo * (g0 * xa)[0]) * t["oa"] + (xo * (g0 * yb)[0] + yo * (g0 * xb)[0]) * t["bo"])

    def unit(i):
        return [1 if j == i else 0 for j in range(k)]

    nuK, nuQ = unit(0), unit(0)
    for i in range(rank):
        nuK[Q[i]], nuQ[K[i]] = kK[i], kQ[i]
    q = [vec(alpha=[a1 * v for v in nuQ], o=a1 * L00 / c), vec(o=1), vec(beta=nuK)]
    PW = [vec(alpha=unit(i)) for i in K] + [vec(beta=unit(i)) for i in Q]
    JW = sp.zeros(2 * rank)
    for i in range(rank):
        JW[i, rank + i] = JW[rank + i, i] = rcs * a1
    Gqq = prog.symmetric("Gqq", sp.Matrix(3, 3, lambda i, j: gram(q[i], q[j])))
    GqW = prog.matrix("GqW", sp.Matrix(3, 2 * rank, lambda i, j: gram(q[i], PW[j])))
    GWW = prog.symmetric("GWW", sp.Matrix(2 * rank, 2 * rank, lambda i, j: gram(PW[i], PW[j])))
    MW = prog.matrix("MW", sp.eye(2 * rank) + GWW * JW)
    R1 = prog.symmetric("R1", Gqq - GqW * JW * prog.inverse("W", MW) * GqW.T)
    Jo = sp.Matrix([[0, a1 / rcs], [a1 / rcs, 0]])
    Mo = prog.matrix("Mo", sp.eye(2) + R1[1:3, 1:3] * Jo)
    RV = prog.symmetric("RV", R1 - R1[:, 1:3] * Jo * prog.inverse("o", Mo) * R1[1:3, :])
    D = sp.diag(1, 1, a1)
    CYY = sp.zeros(3)
    CYY[0, 2] = CYY[2, 0] = a1 * L00 / rcs
    Keff = prog.symmetric("K", CYY - D * RV * D)
    GY = sp.Matrix([[TQ0, TQK0, rcs * TQK1], [TQK0, TKQK0, rcs * TKQK1], [rcs * TQK1, rcs * TKQK1, c * TKQK2 - 1]])
    MY = prog.matrix("MY", sp.eye(3) + GY * Keff)
    inv = prog.inverse("Y", MY)
    F = sp.Symbol("F", real=True)
    prog.steps.append((F, (inv * GY)[0, 0]))
    ex = ExplicitError(rank=rank, traces=tuple(TRACE_SYMBOLS), trace_dots=TRACE_DOT_SYMBOLS, gram=G,
                       steps=prog.steps, F=F, pivots=prog.pivots)
    # F'(γ) = Σ_j ∂F/∂T_j Ṫ_j: one tangent pass along Ṫ
    tangent = {}
    dots = dict(zip(TRACE_SYMBOLS, TRACE_DOT_SYMBOLS))
    for s, expr in list(ex.steps):
        free = expr.free_symbols
        d = sum((sp.diff(expr, u) * (dots[u] if u in dots else tangent[u]) for u in free
                 if u in dots or u in tangent), sp.Integer(0))
        if d != 0:
            tangent[s] = sp.Symbol(f"dot_{s.name}", real=True)
            ex.steps.append((tangent[s], d))
    ex.E_A = sp.Symbol("E_A", real=True)
    ex.steps.append((ex.E_A, -gamma**2 * tangent[F]))
    return ex
