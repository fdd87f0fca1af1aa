r"""Build the linear, bulk and attention systems step by step in SymPy and write docs/derivation.md.

``python -m derivations.build`` regenerates ``docs/derivation.md``; ``--check`` only compares
(exit 1 when the file is out of date or a derived object differs from :mod:`symattn.systems`).

Every step derives an object from the linearised model with SymPy -- not by copying the
formulas of docs/theory.md -- and compares it with the object the package solves:

1. Hermite linearisation: Stein's identity E f'(ξ) = E ξf(ξ) = a1, the split
   f = a0 + a1 ξ + r with E r = E ξ r = 0 and E r² = ν − a1² = s², Parseval ν = Σ a_k², and the
   diagonal constant d = lim f(√p)/√p (symbolic limits) against :mod:`symattn.activations`.
2. The low-rank part: XᵀWX − ZᵀZ expanded with matrix symbols (X = μyᵀ + Z, W = I + w_K w_Qᵀ)
   and read off as E Λ Eᵀ, E = [y, Zᵀμ, Zᵀw_K, Zᵀw_Q] -- against ``attention_system(1).Lambda``.
3. The coupling matrix C: Δ = XK − ZK0 = μ(K0y)ᵀ + ZL + μyᵀL, L = (a1/p)EΛEᵀ, written in the
   O(1) bases (b: ŷ, K0ŷ, Zᵀv/√p; a: μ, Zŷ/√p, ZZᵀv/p) with the exact scale factors of each
   product and the n → ∞ limit of the vanishing ones -- against ``.C``.
4. Γ = UᵀH0^{-1}U: every entry is a word in Z, Zᵀ, K0, Q0 between basis vectors; ZᵀZ = pS,
   ŷᵀBŷ → (1/n)tr B, vᵀZBZᵀv' → (vᵀv')(1/p)tr(ZBZᵀ), cross terms → 0, and the normalised
   traces are matched (cyclically, up to transposition) to T_Q^{(j)}, T_QK^{(j)}, T_KQK^{(j)} and
   the Marchenko–Pastur moments -- against ``.Gamma``.
5. The Woodbury output: the pencil perturbation [[0, Δᵀ],[Δ, 0]]/√n = UĈUᵀ with
   Ĉ = [[0, Cᵀ],[C, 0]], and ŷᵀ(H0 + UĈUᵀ)^{-1}ŷ = Γ00 − eᵀĈ(I + ΓĈ)^{-1}e -- checked exactly
   on rational matrices, and ``.C_hat`` against the block form.
6. The bulk system: the per-eigenvalue 2×2 matrix Dyson equation of the linear pencil of
   c K0 S K0, K0 = A(S) + tG; its inverse gives the three self-consistent equations and the
   kernels q, k, r -- against ``bulk_system().integrands`` and ``RESOLVENT_KERNELS``.
7. The linear system: Marchenko–Pastur's self-consistent equation for m̃, the companion
   transform m, and the rank-2 Woodbury for XᵀX/n = ZᵀZ/n + UCUᵀ -- against ``linear_system()``.
"""

from __future__ import annotations

import argparse
import itertools
import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import sympy as sp

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "derivation.md"


@dataclass
class Step:
    """One derivation step: a title, prose, display equations (LaTeX) and the comparisons made."""

    title: str
    text: str
    equations: list = field(default_factory=list)   # (label, latex)
    checks: list = field(default_factory=list)      # (statement, passed)

    def eq(self, label, expr):
        self.equations.append((label, expr if isinstance(expr, str) else sp.latex(expr)))

    def check(self, statement, passed):
        self.checks.append((statement, bool(passed)))

    @property
    def passed(self):
        return all(ok for _, ok in self.checks)


def _zero(expr) -> bool:
    return sp.simplify(sp.expand(expr)) == 0


def _matrix_equal(A, B) -> bool:
    A, B = sp.Matrix(A), sp.Matrix(B)
    return A.shape == B.shape and all(_zero(a - b) for a, b in zip(A, B))


# ============================================================================ 1. Hermite linearisation
@lru_cache(maxsize=None)
def _gauss_moment(k: int) -> sp.Expr:
    x = sp.Symbol("x", real=True)
    return sp.integrate(x**k * sp.exp(-(x**2) / 2), (x, -sp.oo, sp.oo)) / sp.sqrt(2 * sp.pi)


def _gauss_E(poly, x) -> sp.Expr:
    P = sp.Poly(sp.expand(poly), x)
    return sp.expand(sum(coef * _gauss_moment(m[0]) for m, coef in zip(P.monoms(), P.coeffs())))


def step_hermite() -> Step:
    import symattn as sa

    st = Step("Hermite linearisation of the kernel (docs/theory.md §4)", (
        "Off the diagonal the kernel argument is ξ_ij + ε_ij with ξ_ij = z_iᵀz_j/√p ~ N(0,1) and "
        "ε_ij = (x_iᵀWx_j − z_iᵀz_j)/√p = O(p^{-1/2}). Taylor's formula gives f(ξ + ε) = f(ξ) + f'(ξ)ε + O(ε²), "
        "and the slope averages to E f'(ξ) = a1 (Stein's identity). The part of f orthogonal to 1 and ξ, "
        "r = f − a0 − a1ξ, has variance ν − a1² = s² and acts as an independent GOE matrix. The diagonal "
        "f(‖x_i‖²/√p)/√p tends to d = lim f(√p)/√p. Below, the identities are derived for a generic "
        "polynomial f of degree 6 (symbolic coefficients) and d for the catalog activations."))
    x = sp.Symbol("x", real=True)
    cs = sp.symbols("f0:7", real=True)
    f = sum(ck * x**k for k, ck in enumerate(cs))
    a0 = _gauss_E(f, x)
    a1 = _gauss_E(x * f, x)
    stein = _gauss_E(sp.diff(f, x), x) - a1
    r = f - a0 - a1 * x
    nu = _gauss_E((f - a0) ** 2, x)
    he = [sp.hermite_prob(k, x) for k in range(7)]
    ak = [_gauss_E(f * he[k], x) / sp.sqrt(sp.factorial(k)) for k in range(7)]
    st.eq("Stein", r"\mathbb E f'(\xi) - \mathbb E[\xi f(\xi)] = " + sp.latex(sp.simplify(stein)))
    st.eq("a_1", r"a_1 = \mathbb E[\xi f(\xi)] = " + sp.latex(a1))
    st.eq("s^2", r"\mathbb E r^2 = \nu - a_1^2,\quad r = f - a_0 - a_1\xi,\quad \mathbb E r = \mathbb E[\xi r] = 0")
    st.eq("Parseval", r"\nu = \mathbb E (f-a_0)^2 = \sum_{k\ge1} a_k^2,\qquad a_k = \mathbb E[f\,\mathrm{He}_k]/\sqrt{k!}")
    st.check("Stein: E f'(ξ) = E ξ f(ξ) for a generic degree-6 polynomial", _zero(stein))
    st.check("E r = 0 and E ξ r = 0", _zero(_gauss_E(r, x)) and _zero(_gauss_E(x * r, x)))
    st.check("E r² = ν − a1² (= s²)", _zero(_gauss_E(r**2, x) - (nu - a1**2)))
    st.check("Parseval ν = Σ_{k=1..6} a_k²", _zero(nu - sum(a**2 for a in ak[1:])))
    from symattn.activations import X

    p = sp.Symbol("p", positive=True)
    rows = []
    ok = True
    for name in ("tanh", "erf", "cos", "relu", "abs", "linear"):
        act = sa.activation(name)
        # the centring constant a0 drops out of the limit (a0/√p → 0)
        d_sym = sp.limit(act.expr.subs(X, sp.sqrt(p)) / sp.sqrt(p), p, sp.oo)
        rows.append(rf"\text{{{name}}}: d = {sp.latex(d_sym)}")
        ok &= abs(float(d_sym) - float(act.d)) < 1e-12
    st.eq("d", r",\quad ".join(rows))
    st.check("d = lim f(√p)/√p (sympy.limit) equals Activation.d for tanh, erf, cos, relu, abs, linear", ok)
    st.eq("K_lin", r"K_X \simeq K_{\rm lin} = a_1\Big(\frac{X^\top W X}{p} - I_n\Big) + s\,\frac{N}{\sqrt p} + d\,I_n,"
                   r"\qquad s^2 = \nu - a_1^2")
    return st


# ============================================================================ 2. Λ
def _matrix_symbols():
    n, p = sp.symbols("n p", positive=True, integer=True)
    mu = sp.MatrixSymbol("mu", p, 1)
    y = sp.MatrixSymbol("y", n, 1)
    Z = sp.MatrixSymbol("Z", p, n)
    wK = sp.MatrixSymbol("w_K", p, 1)
    wQ = sp.MatrixSymbol("w_Q", p, 1)
    return n, p, mu, y, Z, wK, wQ


def _read_off(D, vectors, y, Z, inner):
    """Λ (len(vectors)+1 square) with D = E Λ Eᵀ, E = [y, Zᵀv for v in vectors]; ``inner`` maps (u, v) → scalar."""
    m = len(vectors) + 1
    L = sp.zeros(m, m)
    index = {v: i + 1 for i, v in enumerate(vectors)}
    for term in sp.Add.make_args(sp.expand(D)):
        coeff, mats = term.as_coeff_mmul()
        args = list(mats.args) if isinstance(mats, sp.MatMul) else [mats]
        if args[0] == y:
            i, rest = 0, args[1:]
        elif args[0] == Z.T:
            i, rest = index[args[1]], args[2:]
        else:
            raise ValueError(f"unexpected left factor in {term}")
        if rest[-1] == y.T:
            j, mid = 0, rest[:-1]
        elif rest[-1] == Z:
            j, mid = index[rest[-2].T], rest[:-2]
        else:
            raise ValueError(f"unexpected right factor in {term}")
        if len(mid) % 2:
            raise ValueError(f"cannot pair the scalar factors of {term}")
        scal = coeff
        for u, v in zip(mid[0::2], mid[1::2]):
            scal *= inner(u.T, v)
        L[i, j] += scal
    return L


def step_lambda() -> tuple[Step, sp.Matrix]:
    from symattn.systems import attention_system

    st = Step("The low-rank part Λ (docs/theory.md §6)", (
        "With X = μyᵀ + Z and W = I_p + w_K w_Qᵀ, the difference XᵀWX − ZᵀZ is expanded with matrix "
        "symbols and every term is read off as E_i Λ_ij E_jᵀ with E = [y, Zᵀμ, Zᵀw_K, Zᵀw_Q] "
        "(left factor y or Zᵀv, right factor yᵀ or vᵀZ, scalar products in between)."))
    n, p, mu, y, Z, wK, wQ = _matrix_symbols()
    X = mu * y.T + Z
    W = sp.Identity(p) + wK * wQ.T
    D = (X.T * W * X - Z.T * Z).expand()
    G = attention_system(1).gram
    vecs = [mu, wK, wQ]
    pos = {mu: 0, wK: 1, wQ: 2}

    def inner(u, v):
        return G[pos[u], pos[v]]

    L = _read_off(D, vecs, y, Z, inner)
    st.eq(r"X^\top W X - Z^\top Z", D)
    st.eq(r"\Lambda", L)
    st.check("Λ read off the expansion equals attention_system(1).Lambda", _matrix_equal(L, attention_system(1).Lambda))
    return st, L


# ============================================================================ 3. C
def step_coupling(L) -> tuple[Step, sp.Matrix]:
    from symattn.systems import attention_system
    from symattn.systems.symbols import a1, c

    st = Step("The coupling matrix C from the scaling of each product (docs/theory.md §6)", (
        "With K = K0 + L, L = (a1/p) E Λ Eᵀ: Δ = XK − ZK0 = μ(K0y)ᵀ + ZL + μyᵀL (K0 symmetric). The O(1) "
        "bases are b0 = ŷ = y/√n, b1 = K0ŷ, b_{j+1} = Zᵀv_j/√p (n-space) and a0 = μ, a1 = Zŷ/√p, "
        "a_{i+1} = ZZᵀv_i/p (p-space), v = (μ, w_K, w_Q). The exact scale factors are E_0 = √n b0, "
        "E_j = √p b_{j+1}, ZE_0 = √(np) a1, ZE_i = p a_{i+1}, yᵀE_0 = n, and yᵀE_i = yᵀZᵀv_i = √n ζ_i "
        "with ζ_i = O(1) (Zy ~ N(0, n I)). Each product's coefficient in Δ/√n = Σ C_ij a_i b_jᵀ is "
        "computed with p = cn and its n → ∞ limit taken."))
    n, ζ = sp.Symbol("n", positive=True), sp.Symbol("zeta", real=True)
    p = c * n
    m = L.shape[0]
    E_scale = [sp.sqrt(n)] + [sp.sqrt(p)] * (m - 1)            # E_j = scale · b_{σ(j)}
    ZE_scale = [sp.sqrt(n * p)] + [p] * (m - 1)                # Z E_i = scale · a_{i+1}
    yE = [n] + [sp.sqrt(n) * ζ] * (m - 1)                      # yᵀ E_i
    sigma = [0] + [j + 1 for j in range(1, m)]
    C = sp.zeros(m + 1, m + 1)
    C[0, 1] += 1                                                # μ (K0 y)ᵀ/√n = a0 b1ᵀ
    dropped = []
    for i in range(m):
        for j in range(m):
            if L[i, j] == 0:
                continue
            # Z L/√n: (a1/(p√n)) Λ_ij (Z E_i) E_jᵀ
            C[i + 1, sigma[j]] += sp.limit(a1 / (p * sp.sqrt(n)) * L[i, j] * ZE_scale[i] * E_scale[j], n, sp.oo)
            # μ yᵀ L/√n: (a1/(p√n)) Λ_ij (yᵀE_i) μ E_jᵀ
            coef = a1 / (p * sp.sqrt(n)) * L[i, j] * yE[i] * E_scale[j]
            lim = sp.limit(coef, n, sp.oo)
            if lim == 0:
                dropped.append(sp.simplify(coef))
            C[0, sigma[j]] += lim
    C = C.applyfunc(sp.simplify)
    st.eq("C", C)
    if dropped:
        st.eq(r"\text{dropped } (n\to\infty)", r",\ ".join(sp.latex(x) for x in dropped))
    st.check("C derived from the scalings equals attention_system(1).C", _matrix_equal(C, attention_system(1).C))
    return st, C


# ============================================================================ 4. Γ
TRANSPOSE = {"Z": "Zt", "Zt": "Z", "K": "K", "Q": "Q", "S": "S", "yh": "yhT", "yhT": "yh"}


def _tr(tok):
    if tok.startswith("v"):
        return tok[:-1] if tok.endswith("T") else tok + "T"
    return TRANSPOSE[tok]


def _row(vec):
    coef, toks = vec
    return coef, [_tr(t) for t in reversed(toks)]


def _canonical_trace(word, T, moments):
    """(1/n) tr(word) for a word in S, K, Q: rotate/transpose to S^j Q, S^j QK, S^j KQK or S^j."""
    cands = []
    for w in (list(word), [_tr(t) for t in reversed(word)]):
        for r in range(max(1, len(w))):
            cands.append("".join(w[r:] + w[:r]))
    for s in cands:
        for pat, kind in ((r"^(S*)Q$", "Q"), (r"^(S*)QK$", "QK"), (r"^(S*)KQK$", "KQK")):
            mt = re.match(pat, s)
            if mt:
                return T[(kind, len(mt.group(1)))]
        if re.fullmatch(r"S*", s):
            return moments(len(s))
    raise ValueError(f"no canonical trace for {''.join(word)}")


def _reduce_word(coef, word, n, p, G, T, moments):
    word = list(word)
    changed = True
    while changed:  # ZᵀZ = pS
        changed = False
        for i in range(len(word) - 1):
            if word[i] == "Zt" and word[i + 1] == "Z":
                word[i:i + 2] = ["S"]
                coef *= p
                changed = True
                break
    left, right = word[0], word[-1]
    if left == "yhT" and right == "yh":
        inner = word[1:-1]
        if any(t in ("Z", "Zt") for t in inner):
            raise ValueError(f"unreduced word {word}")
        return coef * _canonical_trace(inner, T, moments)          # ŷᵀBŷ → (1/n) tr B
    if left.startswith("v") and right.startswith("v"):
        k, l = int(left[1:-1]), int(right[1:])
        if len(word) == 2:
            return coef * G[k, l]                                    # vᵀv' = 𝔊_kl
        if word[1] != "Z" or word[-2] != "Zt":
            raise ValueError(f"unexpected word {word}")
        inner = word[2:-2]
        # vᵀ Z B Zᵀ v' → 𝔊_kl (1/p) tr(Z B Zᵀ) = 𝔊_kl (1/p) tr(B ZᵀZ) = 𝔊_kl n (1/n) tr(B S)
        return coef * G[k, l] * n * _canonical_trace(inner + ["S"], T, moments)
    return sp.Integer(0)                                             # y independent of (Z, N): cross terms vanish


def derive_gamma(rank: int = 1):
    """Γ = UᵀH0^{-1}U for the basis (b0, b1, b2.., a0, a1, a2..) from the word rules (returns Γ, n-free)."""
    from symattn.systems import attention_system
    from symattn.systems.attention import TRACE_SYMBOLS, TRACES
    from symattn.systems.symbols import c

    from symattn.verification.symbolic import mp_moment

    n = sp.Symbol("n", positive=True)
    p = c * n
    G = attention_system(rank).gram
    k = G.shape[0]
    T = {(kind, j): sym for (name, kind, j), sym in zip(TRACES, TRACE_SYMBOLS)}
    # vectors as (coefficient, tokens of the column vector, left to right); space 'n' or 'p'
    b = [(1, ["yh"]), (1, ["K", "yh"])] + [(1 / sp.sqrt(p), ["Zt", f"v{i}"]) for i in range(k)]
    a = [(1, ["v0"]), (1 / sp.sqrt(p), ["Z", "yh"])] + [(1 / p, ["Z", "Zt", f"v{i}"]) for i in range(k)]
    basis = [("n", v) for v in b] + [("p", v) for v in a]
    blocks = {
        ("n", "n"): [(1, ["Q"])],
        ("n", "p"): [(1 / sp.sqrt(n), ["Q", "K", "Zt"])],
        ("p", "n"): [(1 / sp.sqrt(n), ["Z", "K", "Q"])],
        ("p", "p"): [(-1, []), (1 / n, ["Z", "K", "Q", "K", "Zt"])],
    }
    N = len(basis)
    Gam = sp.zeros(N, N)
    for (i, (si, u)), (j, (sj, w)) in itertools.product(enumerate(basis), repeat=2):
        cu, ru = _row(u)
        cw, tw = w
        val = 0
        for cb, tb in blocks[(si, sj)]:
            val += _reduce_word(cu * cb * cw, ru + tb + tw, n, p, G, T, mp_moment)
        Gam[i, j] = sp.simplify(val)
    return Gam, n


def step_gamma() -> Step:
    from symattn.systems import attention_system

    st = Step("The Gram matrix Γ = UᵀH0^{-1}U from the trace limits (docs/theory.md §6)", (
        "H0^{-1} has the blocks Q0, Q0K0Zᵀ/√n, ZK0Q0/√n and −I + ZK0Q0K0Zᵀ/n. Each entry of Γ is a word "
        "between two basis vectors. The rules: ZᵀZ = pS; ŷᵀBŷ → (1/n)tr B (y independent of Z, N); "
        "vᵀZBZᵀv' → (vᵀv')(1/p)tr(ZBZᵀ) (rotation invariance Z → OZ); mixed ŷ/v words → 0. The "
        "normalised traces (1/n)tr(·) of words in S, K0, Q0 are matched, up to cyclic rotation and "
        "transposition, to T_Q^{(j)} = (1/n)tr S^jQ0, T_QK^{(j)} = (1/n)tr S^jQ0K0, T_KQK^{(j)} = "
        "(1/n)tr S^jK0Q0K0 and to the Marchenko–Pastur moments (1/n)tr S^j; finally p = cn."))
    Gam, n = derive_gamma(1)
    st.eq(r"\Gamma", Gam)
    st.check("Γ does not depend on n", not Gam.has(n))
    st.check("Γ derived from the word rules equals attention_system(1).Gamma", _matrix_equal(Gam, attention_system(1).Gamma))
    return st


# ============================================================================ 5. Woodbury
def step_woodbury(C) -> Step:
    import random

    from symattn.systems import attention_system, woodbury_output

    st = Step("Woodbury on the linear pencil (docs/theory.md §6)", (
        "With H = [[γI_n, Φᵀ/√n], [Φ/√n, −I_p]], ŷᵀQŷ = [ŷ;0]ᵀH^{-1}[ŷ;0]. Φ = Φ0 + Δ makes "
        "H = H0 + [[0, Δᵀ],[Δ, 0]]/√n, and Δ/√n = A C Bᵀ (A = [a_i], B = [b_j]) gives the perturbation "
        "UĈUᵀ with U = diag(B, A) and Ĉ = [[0, Cᵀ],[C, 0]]. Woodbury with u0 = first column of U:"))
    nn, pp, r = sp.symbols("n p r", positive=True, integer=True)
    A = sp.MatrixSymbol("A", pp, r)
    B = sp.MatrixSymbol("B", nn, r)
    Cm = sp.MatrixSymbol("C", r, r)
    U = sp.BlockMatrix([[B, sp.ZeroMatrix(nn, r)], [sp.ZeroMatrix(pp, r), A]])
    Ch = sp.BlockMatrix([[sp.ZeroMatrix(r, r), Cm.T], [Cm, sp.ZeroMatrix(r, r)]])
    prod = sp.block_collapse(U * Ch * U.T)
    target = sp.BlockMatrix([[sp.ZeroMatrix(nn, nn), B * Cm.T * A.T], [A * Cm * B.T, sp.ZeroMatrix(pp, pp)]])
    blocks_ok = all((prod.blocks[i, j] - target.blocks[i, j]).doit().is_ZeroMatrix
                    or prod.blocks[i, j] == target.blocks[i, j] for i in range(2) for j in range(2))
    st.eq(r"U\hat C U^\top", prod)
    st.check("U Ĉ Uᵀ = [[0, BCᵀAᵀ], [ACBᵀ, 0]] (block algebra)", blocks_ok)
    sys_ = attention_system(1)
    Nc = C.shape[0]
    st.check("attention_system(1).C_hat = [[0, Cᵀ], [C, 0]] with the derived C",
             _matrix_equal(sys_.C_hat, sp.BlockMatrix([[sp.zeros(Nc, Nc), C.T], [C, sp.zeros(Nc, Nc)]]).as_explicit()))
    # the identity on exact rational matrices (dimension 7, rank-4 perturbation)
    rng = random.Random(1)
    d, k = 7, 4
    M = sp.Matrix(d, d, lambda i, j: sp.Rational(rng.randint(-5, 5), rng.randint(1, 4)))
    H0 = M * M.T + 3 * sp.eye(d)
    Uq = sp.Matrix(d, k, lambda i, j: sp.Rational(rng.randint(-4, 4), rng.randint(1, 3)))
    Cq = sp.Matrix(2, 2, lambda i, j: sp.Rational(rng.randint(-3, 3), rng.randint(1, 3)))
    Chq = sp.BlockMatrix([[sp.zeros(2, 2), Cq.T], [Cq, sp.zeros(2, 2)]]).as_explicit()
    lhs = (Uq[:, 0].T * (H0 + Uq * Chq * Uq.T).inv() * Uq[:, 0])[0, 0]
    Gq = Uq.T * H0.inv() * Uq
    rhs = woodbury_output(Gq, Chq)
    st.eq("F", r"F(\gamma) = \Gamma_{b_0b_0} - e^\top \hat C\,(I + \Gamma\hat C)^{-1} e,\qquad e = \Gamma_{:,b_0},"
               r"\qquad E_A(\gamma) = -\gamma^2 F'(\gamma)")
    st.check("u0ᵀ(H0 + UĈUᵀ)^{-1}u0 = woodbury_output(UᵀH0^{-1}U, Ĉ) exactly (rational 7×7, rank 4)", lhs == rhs)
    return st


# ============================================================================ 6. bulk (Dyson)
def step_bulk() -> Step:
    from symattn.systems import bulk_system
    from symattn.systems.bulk import RESOLVENT_KERNELS, expand_intermediates
    from symattn.systems.symbols import a1, c, d, e1, e2, e3, gamma, lam, s2

    st = Step("The bulk system from the matrix Dyson equation (docs/theory.md §5)", (
        "For μ = 0, w = 0: ΦᵀΦ/n = c K0 S K0 with K0 = A(S) + tG, A(λ) = a1(λ−1) + d, G = N/√n "
        "(semicircle), t² = s²/c. The pencil H = [[γ, √c(A + tG)S^{1/2}], [√c S^{1/2}(A + tG), −1]] has "
        "Q0 as its (1,1) block. Conditioning on S (eigenvalues λ) and averaging the Gaussian G with "
        "E[G X G] = (tr X/n) I, the Dyson equation 𝒢 = (H_det − Σ(𝒢))^{-1} has the self-energy "
        "Σ = s²[[ω2, ω3 λ^{1/2}], [ω3 λ^{1/2}, ω1 λ]] with ω1 = (1/n)tr 𝒢11, ω2 = (1/n)tr S𝒢22, "
        "ω3 = (1/n)tr S^{1/2}𝒢21, so 𝒢 is a 2×2 matrix per eigenvalue. With e1 = ω1, e2 = −ω2, "
        "e3 = ω3 its inverse gives the bulk equations and the kernels of Q0, Q0K0 (from 𝒢21 = "
        "√c λ^{1/2} K0Q0) and K0Q0K0 (from 𝒢22 = −1 + cλ K0Q0K0)."))
    from symattn.systems.bulk import BETA, DELTA, Delta, beta

    w1, w2, w3 = sp.symbols("omega1 omega2 omega3", real=True)
    rl = sp.sqrt(lam)
    A = a1 * (lam - 1) + d
    Hdet = sp.Matrix([[gamma, sp.sqrt(c) * A * rl], [sp.sqrt(c) * A * rl, -1]])
    Sigma = s2 * sp.Matrix([[w2, w3 * rl], [w3 * rl, w1 * lam]])
    M = Hdet - Sigma
    sub = {w1: e1, w2: -e2, w3: e3}
    det = sp.expand(M.det().subs(sub))
    adj = M.adjugate().subs(sub)
    Gm = (adj / det).applyfunc(sp.simplify)
    st.eq(r"H_{\rm det}(\lambda) - \Sigma", M)
    st.eq(r"\mathcal G(\lambda)", r"(H_{\rm det} - \Sigma)^{-1} = \frac{1}{\det}\," + sp.latex(adj)
          + r",\qquad \omega_1 = e_1,\ \omega_2 = -e_2,\ \omega_3 = e_3")
    Delta_full = DELTA.subs(beta, BETA)
    st.check("−det(H_det − Σ) = Δ(λ) = (γ + s²e2)(1 + s²e1λ) + λβ², β = √c(a1(λ−1)+d) − s²e3",
             _zero(det + Delta_full))
    st.check("the off-diagonal entry of H_det − Σ is √λ β(λ)", _zero(M[0, 1].subs(sub) - rl * BETA))
    st.eq(r"\Delta", sp.Eq(Delta, DELTA))
    # e1 = ω1 = ∫𝒢11, e2 = −ω2 = −∫λ𝒢22, e3 = ω3 = ∫√λ𝒢21
    eqs = [Gm[0, 0], -lam * Gm[1, 1], rl * Gm[1, 0]]
    compact = [sp.simplify((-adj[0, 0]) / Delta), sp.simplify(lam * adj[1, 1] / Delta),
               sp.simplify((-rl * adj[1, 0]).subs(rl * BETA, rl * beta)) / Delta]
    for k, expr in enumerate(compact, 1):
        st.eq(f"e_{k}", rf"e_{k} = \int {sp.latex(expr.subs(BETA, beta))}\, d\mu_S(\lambda)")
    sys_ = bulk_system()
    targets = [expand_intermediates(g) for g in sys_.integrands]
    st.check("the three Dyson equations equal bulk_system().integrands (β, Δ expanded)",
             all(_zero(l - t) for l, t in zip(eqs, targets)))
    st.check("and, written in β and Δ, they are literally bulk_system().integrands",
             all(_zero(cpt.subs(BETA, beta) - g) for cpt, g in zip(compact, sys_.integrands)))
    q = Gm[0, 0]
    k = Gm[1, 0] / (sp.sqrt(c) * rl)
    r = (Gm[1, 1] + 1) / (c * lam)
    kern = {name: expand_intermediates(v) for name, v in RESOLVENT_KERNELS.items()}
    st.check("Q0 ↔ 𝒢11 = q, K0Q0 ↔ 𝒢21/(√cλ^{1/2}) = k, K0Q0K0 ↔ (𝒢22 + 1)/(cλ) = r (RESOLVENT_KERNELS)",
             _zero(q - kern["Q"]) and _zero(k - kern["QK"]) and _zero(r - kern["KQK"]))
    return st


# ============================================================================ 7. linear system
def step_linear() -> Step:
    from symattn.systems import linear_system
    from symattn.systems.linear import m_companion, m_tilde
    from symattn.systems.symbols import c, gamma, m2

    st = Step("The linear-regression system (docs/theory.md §3)", (
        "XᵀX − ZᵀZ is read off as U C Uᵀ with U = [y, Zᵀμ] (same expansion as step 2 with W = I). "
        "Marchenko–Pastur's self-consistent equation for m̃ = lim (1/p)tr(ZZᵀ/n + γ)^{-1} is "
        "m̃ = 1/(γ + 1/(1 + c m̃)); the companion m = lim (1/n)tr(ZᵀZ/n + γ)^{-1} follows from "
        "tr(ZᵀZ/n + γ)^{-1} − tr(ZZᵀ/n + γ)^{-1} = (n − p)/γ. With ŷᵀQ0ŷ → m, ŷᵀQ0Zᵀμ/√n → 0 and "
        "μᵀZQ0Zᵀμ/n = μᵀ[I − γ(ZZᵀ/n + γ)^{-1}]μ → m2(1 − γm̃), the rank-2 Woodbury identity gives F_LR."))
    n, p, mu, y, Z, wK, wQ = _matrix_symbols()
    X = mu * y.T + Z
    D = (X.T * X - Z.T * Z).expand()
    Cl = _read_off(D, [mu], y, Z, lambda u, v: m2)
    st.eq(r"X^\top X - Z^\top Z", D)
    st.eq("C", Cl)
    st.check("C = [[m2, 1], [1, 0]]", _matrix_equal(Cl, sp.Matrix([[m2, 1], [1, 0]])))
    mt, m = m_tilde, m_companion
    quad = sp.numer(sp.together(mt - 1 / (gamma + 1 / (1 + c * mt))))
    sys_ = linear_system()
    eq0 = sys_.equations[0]
    st.eq(r"\tilde m", sp.Eq(mt, 1 / (gamma + 1 / (1 + c * mt))))
    st.check("MP self-consistency ⇔ the system's quadratic c γ m̃² + (1−c+γ) m̃ − 1 = 0",
             _zero(sp.expand(-quad) - sp.expand(eq0.lhs - eq0.rhs)) or _zero(sp.expand(quad) - sp.expand(eq0.lhs - eq0.rhs)))
    comp = sp.solve(sp.Eq(m - c * mt, (1 - c) / gamma), m)[0]
    st.check("companion m = c m̃ + (1−c)/γ equals the system's definition", _zero(comp - sys_.definitions[m]))
    D2 = sp.diag(m, m2 * (1 - gamma * mt))            # lim U'ᵀQ0U' with U' = U/√n
    u = sp.Matrix([[m, 0]])                            # lim ŷᵀQ0U'
    F = m - (u * (Cl.inv() + D2).inv() * u.T)[0, 0]
    F = sp.simplify(F)
    st.eq(r"F_{LR}", sp.Eq(sp.Symbol("F_{LR}"), F))
    st.check("rank-2 Woodbury F = m/(1 + γ m2 m m̃) equals linear_system().output", _zero(F - sys_.output))
    return st


# ============================================================================ assembly
def build() -> list[Step]:
    """Run every step (derive and compare); returns the steps."""
    steps = [step_hermite()]
    st, L = step_lambda()
    steps.append(st)
    st, C = step_coupling(L)
    steps.append(st)
    steps.append(step_gamma())
    steps.append(step_woodbury(C))
    steps.append(step_bulk())
    steps.append(step_linear())
    steps.append(step_controls())
    return steps


def step_controls() -> Step:
    """The comparisons above can fail: deliberately wrong inputs must not match the package."""
    from symattn.systems import attention_system
    from symattn.systems.attention import TRACES, TRACE_SYMBOLS

    st = Step("Controls: the comparisons can fail",
              "Each comparison of this file is an equality test that a wrong derivation fails. Two controls: "
              "a different weight matrix W = I + 2 w_K w_Qᵀ gives a Λ that differs from the system's, and the "
              "trace-word rules map rotated and transposed words onto the nine traces and refuse an unknown word.")
    n, p, mu, y, Z, wK, wQ = _matrix_symbols()
    X = mu * y.T + Z
    D = (X.T * (sp.Identity(p) + 2 * wK * wQ.T) * X - Z.T * Z).expand()
    G = attention_system(1).gram
    pos = {mu: 0, wK: 1, wQ: 2}
    L = _read_off(D, [mu, wK, wQ], y, Z, lambda u, v: G[pos[u], pos[v]])
    st.check("Λ of W = I + 2 w_K w_Qᵀ differs from the system's Λ (of W = I + w_K w_Qᵀ)",
             not _matrix_equal(L, attention_system(1).Lambda))
    T = {(kind, j): sym for (name, kind, j), sym in zip(TRACES, TRACE_SYMBOLS)}
    st.check("(1/n) tr(K Q S) is T_QK^(1) (transpose and rotation)",
             _canonical_trace(["K", "Q", "S"], T, lambda k: None) == T[("QK", 1)])
    st.check("(1/n) tr(S K Q K S) is T_KQK^(2)",
             _canonical_trace(["S", "K", "Q", "K", "S"], T, lambda k: None) == T[("KQK", 2)])
    try:
        _canonical_trace(["Q", "Q"], T, lambda k: None)
        refused = False
    except ValueError:
        refused = True
    st.check("an unknown trace word (Q Q) is refused", refused)
    return st


HEADER = """# Derivation of the systems (generated)

This file is generated by `python -m derivations.build` from the linearised model; do not edit it
by hand. Each step derives an object with SymPy and compares it with the object that
`symattn.systems` solves (the checks listed under each step). `tests/test_derivations.py`
re-runs the builder (`python -m derivations.build --check`) and fails when a comparison fails or this file is out of date.

Notation as in docs/theory.md §1: X = μyᵀ + Z (p×n), p = cn, ŷ = y/√n, W = I + w_K w_Qᵀ, S = ZᵀZ/p,
𝔊 the Gram matrix of (μ, w_K, w_Q) (symbols G_kl), a1, s² = ν − a1², d the kernel constants.
"""


def render(steps) -> str:
    out = [HEADER]
    for k, st in enumerate(steps, 1):
        out.append(f"\n## {k}. {st.title}\n")
        out.append(st.text + "\n")
        for label, tex in st.equations:
            out.append(f"\n$$\n{tex}\n$$\n")
        out.append("\nChecks:\n")
        for stmt, ok in st.checks:
            out.append(f"- [{'x' if ok else ' '}] {stmt}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m derivations.build", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the file is out of date")
    ap.add_argument("--out", default=str(DOC), help=f"output file (default {DOC})")
    args = ap.parse_args(argv)
    steps = build()
    text = render(steps)
    failed = [(st.title, s) for st in steps for s, ok in st.checks if not ok]
    for title, s in failed:
        print(f"FAILED [{title}] {s}", file=sys.stderr)
    path = Path(args.out)
    if args.check:
        current = path.read_text() if path.exists() else ""
        if current != text:
            print(f"{path} is out of date: run python -m derivations.build", file=sys.stderr)
            return 1
        return 1 if failed else 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    n = sum(len(st.checks) for st in steps)
    print(f"wrote {path}: {len(steps)} steps, {n - len(failed)}/{n} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
