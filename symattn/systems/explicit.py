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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import sympy as sp

from .attention import TRACE_SYMBOLS
from .symbols import a1, c, gamma, gram_symbols

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
        cache = self.__dict__.setdefault("_diff_cache", {})
        if (target, x) in cache:
            return cache[(target, x)]
        tangent = {}
        new = []
        for s, expr in self.steps:
            free = expr.free_symbols
            d = sp.diff(expr, x) + sum((sp.diff(expr, t) * tangent[t] for t in free if t in tangent), sp.Integer(0))
            if d != 0:
                ds = sp.Symbol(f"d{s.name}_d{x.name}", real=True)
                tangent[s] = ds
                new.append((ds, d))
            if s == target:
                break
        self.steps.extend(new)
        out = tangent.get(target, sp.Integer(0))
        cache[(target, x)] = out
        return out

    def expression(self, target):
        """``target`` with every step substituted: one expression in the base symbols (large)."""
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
def explicit_error(rank: int = 1) -> ExplicitError:
    r"""F and E_A for rank-r weights as explicit scalar formulas (docs/theory.md §6.9).

    With Γ = Γ_Y ⊕ Γ_V (docs/theory.md §6.5) and the couplings of Ĉ (§6.4),

      R1 = Γ_qq − Γ_qW J_W (I + Γ_WW J_W)^{-1} Γ_Wq,        (W: α(w_K^{(k)}), β(w_Q^{(k)}); J_W = √c a1 [[0, I], [I, 0]])
      R_V = R1 − R1_{·o} J_o (I + R1_{oo} J_o)^{-1} R1_{o·},  (o: μ, β(ν_K); J_o = (a1/√c) [[0, 1], [1, 0]])
      K = Ĉ_YY − D R_V D,  D = diag(1, 1, a1),
      F = [(I + Γ_Y K)^{-1} Γ_Y]_00,          E_A = −γ² Σ_j (∂F/∂T_j) Ṫ_j,

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
