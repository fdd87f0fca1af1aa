r"""The general-W pencil and its Dyson equation as SymPy objects (docs/theory.md §12.2).

W is a :class:`sympy.MatrixSymbol` (p×p), Y = X/√n a p×n MatrixSymbol, D and Ñ n×n; the pencil
L (8×8 blocks: n-unknowns x, u, w and p-unknowns t, v, h, g, l) is a :class:`sympy.BlockMatrix`
whose (x, x) block of the inverse is Q = (γ + KᵀYᵀYK)^{-1} with K = (a1/c)YᵀWY + D + σÑ.
The Dyson equation is written in the scalar unknowns g_jk = tr_n G_jk (3×3) and the four traces
T1..T4 of H = B2^{-1}, B2 = [[I − αW, −βWᵀ], [−γ'W, I − δWᵀ]], which stay symbolic
(``Trace`` of MatrixSymbol expressions). Everything prints and exports to LaTeX
(:func:`general_w_pencil`, :meth:`GeneralWPencil.latex`); the numerics are
:mod:`symattn.backends.general_w`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

__all__ = ["GeneralWPencil", "general_w_pencil"]

N_BLOCKS = ("x", "u", "w")
P_BLOCKS = ("t", "v", "h", "g", "l")


@dataclass
class GeneralWPencil:
    """The symbolic objects of docs/theory.md §12.2.

    Attributes
    ----------
    W, Y, D, Nt : sympy.MatrixSymbol
        W (p×p), Y (p×n), the diagonal D and the elliptic noise Ñ (n×n).
    K : sympy.MatrixExpr
        (a1/c)YᵀWY + D + σÑ.
    L : sympy.BlockMatrix
        The 8×8-block pencil (rows/columns x, u, w, t, v, h, g, l).
    B2 : sympy.BlockMatrix
        The 2p×2p W-block after eliminating g, l, v.
    sigma_pp, sigma_nn : dict
        The self-energies: Σ_pp in the n-traces g_jk, Σ_nn in the p-traces P_jk and g_jk.
    g, T : sympy.Matrix
        The 3×3 n-traces and the 2×2 traces T_ab = tr_p(𝒲_a H_ab).
    symbols : dict
        a1, c, sigma2, tau, gamma, kappa, alpha, beta, gammap, delta, e.
    """

    W: sp.MatrixSymbol
    Y: sp.MatrixSymbol
    D: sp.MatrixSymbol
    Nt: sp.MatrixSymbol
    K: sp.MatrixExpr
    L: sp.BlockMatrix
    B2: sp.BlockMatrix
    sigma_pp: dict
    sigma_nn: dict
    g: sp.Matrix
    T: sp.Matrix
    symbols: dict

    def latex(self) -> str:
        """LaTeX of K, the pencil L, B2 and the self-energies (one ``align``-ready string per line)."""
        lines = [r"K = " + sp.latex(self.K), r"L = " + sp.latex(self.L), r"B_2 = " + sp.latex(self.B2)]
        lines += [rf"\Sigma_{{{k}}} = " + sp.latex(v) for k, v in self.sigma_pp.items()]
        lines += [rf"\Sigma^{{nn}}_{{{k}}} = " + sp.latex(v) for k, v in self.sigma_nn.items()]
        return "\n".join(lines)


def general_w_pencil(p=None, n=None) -> GeneralWPencil:
    r"""Build the symbolic pencil of docs/theory.md §12.2 with W a p×p :class:`~sympy.MatrixSymbol`.

    Parameters
    ----------
    p, n : int or sympy.Symbol, optional
        Dimensions (default the symbols p, n).

    Returns
    -------
    GeneralWPencil

    Examples
    --------
    >>> P = general_w_pencil()
    >>> P.W.shape == (P.symbols["p"], P.symbols["p"]), P.L.blockshape
    (True, (8, 8))
    >>> print(P.K)
    sigma*Nt + (a1/c)*Y.T*W*Y + D
    >>> "W^{T}" in P.latex()
    True
    """
    ps, ns = sp.symbols("p n", positive=True, integer=True)
    p = ps if p is None else p
    n = ns if n is None else n
    a1, c, sigma, tau, gamma = sp.symbols("a1 c sigma tau gamma", positive=True)
    W = sp.MatrixSymbol("W", p, p)
    Y = sp.MatrixSymbol("Y", p, n)
    D = sp.MatrixSymbol("D", n, n)
    Nt = sp.MatrixSymbol("Nt", n, n)
    In, Ip = sp.Identity(n), sp.Identity(p)
    Znn, Zpp, Znp, Zpn = sp.ZeroMatrix(n, n), sp.ZeroMatrix(p, p), sp.ZeroMatrix(n, p), sp.ZeroMatrix(p, n)
    a = a1 / c
    K = a * Y.T * W * Y + D + sigma * Nt
    order = N_BLOCKS + P_BLOCKS
    kind = {b: ("n" if b in N_BLOCKS else "p") for b in order}
    ent = {}
    # rows (equations) of the pencil; columns are the unknowns
    ent[("x", "x")] = gamma * In
    ent[("x", "g")] = a * Y.T
    ent[("x", "w")] = D + sigma * Nt.T
    ent[("u", "u")] = In
    ent[("u", "l")] = -a * Y.T
    ent[("u", "x")] = -D - sigma * Nt
    ent[("w", "w")] = In
    ent[("w", "v")] = -Y.T
    ent[("t", "t")] = Ip
    ent[("t", "x")] = -Y
    ent[("v", "v")] = Ip
    ent[("v", "u")] = -Y
    ent[("h", "h")] = Ip
    ent[("h", "w")] = -Y
    ent[("g", "g")] = Ip
    ent[("g", "h")] = -W.T
    ent[("l", "l")] = Ip
    ent[("l", "t")] = -W
    zero = {("n", "n"): Znn, ("p", "p"): Zpp, ("n", "p"): Znp, ("p", "n"): Zpn}
    L = sp.BlockMatrix([[ent.get((r, col), zero[(kind[r], kind[col])]) for col in order] for r in order])
    g = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"g_{N_BLOCKS[i]}{N_BLOCKS[j]}"))
    gi = {(N_BLOCKS[i], N_BLOCKS[j]): g[i, j] for i in range(3) for j in range(3)}
    S = {"tg": -a * gi["x", "x"], "tl": a * gi["x", "u"], "tv": gi["x", "w"],
         "vg": -a * gi["u", "x"], "vl": a * gi["u", "u"], "vv": gi["u", "w"],
         "hg": -a * gi["w", "x"], "hl": a * gi["w", "u"], "hv": gi["w", "w"]}
    e = 1 / (1 - S["vv"])
    alpha = S["tl"] + e * S["tv"] * S["vl"]
    beta = S["tg"] + e * S["tv"] * S["vg"]
    gammap = S["hl"] + e * S["hv"] * S["vl"]
    delta = S["hg"] + e * S["hv"] * S["vg"]
    al, be, ga, de = sp.symbols("alpha beta gamma' delta")
    B2 = sp.BlockMatrix([[Ip - al * W, -be * W.T], [-ga * W, Ip - de * W.T]])
    T = sp.Matrix(2, 2, lambda i, j: sp.Symbol(f"T_{'th'[i]}{'th'[j]}"))
    P = {"lt": T[0, 0], "lh": T[0, 1], "gt": T[1, 0], "gh": T[1, 1],
         "lv": e * (S["tv"] * T[0, 0] + S["hv"] * T[0, 1]), "gv": e * (S["tv"] * T[1, 0] + S["hv"] * T[1, 1])}
    for k in "tvh":
        P["v" + k] = e * (S["vg"] * P["g" + k] + S["vl"] * P["l" + k]) + (e if k == "v" else 0)
    s2 = sigma**2 / 1
    Snn = {"xx": -a1 * P["gt"] - s2 * gi["w", "u"], "xu": -a1 * P["gv"], "xw": -a1 * P["gh"] + s2 * tau * gi["w", "x"],
           "ux": a1 * P["lt"] + s2 * tau * gi["x", "u"], "uu": a1 * P["lv"], "uw": a1 * P["lh"] - s2 * gi["x", "x"],
           "wx": c * P["vt"], "wu": c * P["vv"], "wh": c * P["vh"]}
    Snn["ww"] = Snn.pop("wh")
    symbols = {"p": ps, "n": ns, "a1": a1, "c": c, "sigma": sigma, "tau": tau, "gamma": gamma,
               "alpha": alpha, "beta": beta, "gammap": gammap, "delta": delta, "e": e}
    return GeneralWPencil(W=W, Y=Y, D=D, Nt=Nt, K=K, L=L, B2=B2, sigma_pp=S, sigma_nn=Snn, g=g, T=T,
                          symbols=symbols)
