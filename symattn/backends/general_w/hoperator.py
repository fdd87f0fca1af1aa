r"""The p-trace operators of the general-W pencil (docs/theory.md §12.2, §12.5): H = B2(C)^{-1} with its
normalised traces T_ab = tr_p(𝒲_a H_ab)/p (𝒲_t = W, 𝒲_h = Wᵀ) and their Jacobian in C = (α, β, γ', δ).

B2 = [[I − αW, −βWᵀ], [−γ'W, I − δWᵀ]] is what is left of the pencil's p-blocks after eliminating g, l and v.
:class:`HOperator` evaluates it for any W (one ``eigh`` for a symmetric W; otherwise the p×p Schur complements
N = DA − κWᵀW, N' = AD − κWWᵀ, κ = βγ', D = I − δWᵀ, A = I − αW, or the 2p×2p inverse); :class:`LowRankTraces`
for W of rank r <= p/2 by Woodbury in the 2r-dimensional range of W.
"""

from __future__ import annotations

import numpy as np

from ...caching import Memo
from ...model import weight_rank
from .linalg import (FLOAT, array_key, cast, grams, identity_minus, lapack_inv_rcond, rmul, symmetric_eig,
                     workspace)

__all__ = ["DENSE_ROUTE", "PP_ONE_INVERSE", "HOperator", "LowRankTraces", "low_rank_traces"]

def _B2(W, alpha, beta, gam, delta):
    I = np.eye(W.shape[0], dtype=W.dtype)
    return np.block([[I - alpha * W, -beta * W.T], [-gam * W, I - delta * W.T]])


#: how a dense (non-symmetric) W is evaluated: 'pp' (two p×p inverses of the Schur complements N, N',
#: docs/theory.md §12.2) or '2p' (one 2p×2p inverse of B2; the reference the tests compare with)
DENSE_ROUTE = "pp"
#: the p×p route is kept when its probe residual ‖B2 H v − v‖/‖v‖ is below PP_CHECK_TOL·tol (1e-10 in float64),
#: or PP_CHECK_LOW in the low precision (used only while the relative residual is above SINGLE_ABOVE = 1e-3, so
#: an error below 1e-3 is harmless there); otherwise the high precision, then the 2p×2p inverse, is taken
PP_CHECK_TOL, PP_CHECK_LOW = 1e3, 1e-3
#: the p×p route inverts N alone when its estimated condition allows (:meth:`HOperator._pp1`, docs/theory.md
#: §12.5); False: always both Schur complements N and N' (:meth:`HOperator._pp`)
PP_ONE_INVERSE = True
#: J[a, b, k, l] = G[2a + k, 2l + b] (G the 4×4 Gram of the products 𝒲_a H_ak under tr(·,·))
_A, _B, _K, _L = np.indices((2, 2, 2, 2))
_J_ROWS, _J_COLS = 2 * _A + _K, 2 * _L + _B


class HOperator:
    """H = B2(C)^{-1} (C = (α, β, γ', δ)) at real C0, with its traces T_ab = tr_p(𝒲_a H_ab)
    (𝒲_t = W, 𝒲_h = Wᵀ) and their Jacobian ∂T_ab/∂C_kl = tr_p(𝒲_a H_ak 𝒲_l H_lb), so that a
    complex step C = C0 + iεΔC is evaluated exactly to O(ε²) without a complex inverse:
    T(C) = T0 + J·ΔC and H(C)v = H0 v + H0 (ΔC ⊗ 𝒲)(H0 v).

    For a symmetric W = E diag(λ) Eᵀ (one cached ``eigh``) B2 splits into p independent 2×2 blocks
    [[1 − αλ, −βλ], [−γ'λ, 1 − δλ]]: every trace is a mean over λ and H v costs two products
    with E (docs/theory.md §12.5).

    Otherwise (route 'pp', docs/theory.md §12.2) with κ = βγ', D = I − δWᵀ, A = I − αW and the
    Schur complements N = DA − κWᵀW, N' = AD − κWWᵀ (D commutes with Wᵀ, A with W):

      H_tt = N^{-1}D,  H_th = βN^{-1}Wᵀ,  H_ht = γ'N'^{-1}W,  H_hh = N'^{-1}A,

    so T0 costs two p×p inverses and O(p²) sums against the cached WᵀW, WWᵀ, and the Jacobian four
    p×p products (instead of one 2p×2p inverse and four 2p-block products). Since det B2 = det N, N^{-1}
    alone gives T0 and the Jacobian (three products; :meth:`_pp1`, the default when N is well conditioned,
    :data:`PP_ONE_INVERSE`); N'^{-1} is then formed only for a solve. Route '2p' (:data:`DENSE_ROUTE`) is the
    2p×2p inverse itself; it is also the fallback when N or N' is singular."""

    def __init__(self, W, C0, single: bool = False, ar=FLOAT):
        p = W.shape[0]
        self.W, self.p, self.ar = W, p, ar
        self.C0 = ar.convert(C0)  # [[α, β], [γ', δ]], real
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        self._J = self._J_low = None
        self.H = self.Ni = None
        self._one = False   # True on the one-inverse p×p route (:meth:`_pp1`)
        eig = symmetric_eig(W, ar)
        self.eig = eig
        if eig is not None:
            lam, _ = eig
            det = (1 - al * lam) * (1 - de * lam) - be * ga * lam * lam
            # h[a][b](λ): the (a, b) entry of the inverse 2×2 block at λ
            self.h = [[(1 - de * lam) / det, be * lam / det], [ga * lam / det, (1 - al * lam) / det]]
            self.T0 = ar.convert(np.array([[np.sum(lam * self.h[a][b]) / p for b in range(2)] for a in range(2)]))
            return
        # the low precision (float32 in float64 arithmetic, rounding ~1e-6): only far from the fixed point
        dtype = ar.low if single else ar.high
        # the p×p route: one inverse (N) when its condition allows, else both Schur complements with the probe;
        # a failed low-precision attempt retries in the high precision (cheaper than the 2p×2p inverse)
        low = dtype is not ar.high
        if DENSE_ROUTE == "pp" and (self._pp1(dtype) or (low and self._pp1(ar.high)) or self._pp(dtype)
                                    or (low and self._pp(ar.high))):
            return
        Wd = grams(W, dtype)[0]
        H = ar.inv_p(_B2(Wd, *(cast(v, dtype) for v in (al, be, ga, de))))
        self.H = H
        W_T = Wd.T
        self.T0 = ar.convert(np.array([[np.sum(W_T * H[:p, :p]), np.sum(W_T * H[:p, p:])],
                                       [np.sum(Wd * H[p:, :p]), np.sum(Wd * H[p:, p:])]], dtype=object)) / p

    def _pp1(self, dtype) -> bool:
        """The p×p route with one inverse (docs/theory.md §12.5): det B2 = det N(α, δ, q), q = αδ − βγ', so every
        trace is a derivative of log det N and needs N^{-1} only:

          p T = [[s_W − δ s_M, β s_M], [γ' s_M, s_T − α s_M]],  s_X = tr(N^{-1} X),  X ∈ {W, Wᵀ, M = WᵀW}

        (in particular tr(N'^{-1}WWᵀ) = tr(N^{-1}WᵀW) and tr(N'^{-1}Wᵀ) = tr(N^{-1}Wᵀ)). Kept when the estimated
        condition number of N times the rounding is below the probe threshold of :meth:`_pp`; float arrays
        only (the mpmath arithmetic takes :meth:`_pp`). N'^{-1} is formed only if :meth:`_solve` needs it."""
        if not PP_ONE_INVERSE:
            return False
        p, ar = self.p, self.ar
        Wd, Wt, WtW, WWt = grams(self.W, dtype)
        if Wd.dtype == object:
            return False
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        a_, b_, g_, d_ = (cast(v, dtype) for v in (al, be, ga, de))
        q = a_ * d_ - b_ * g_
        N = np.multiply(WtW, q)
        N += identity_minus(p, Wd, Wt, a_, d_)
        try:
            Ni = lapack_inv_rcond(N, PP_CHECK_LOW if dtype is not None and dtype is ar.low else PP_CHECK_TOL * ar.tol)
        except (np.linalg.LinAlgError, ZeroDivisionError):
            return False
        if Ni is None:
            return False
        sW, sT, sM = ar.dot(Ni, Wt), ar.dot(Ni, Wd), ar.dot(Ni, WtW)
        T0 = ar.convert(np.array([[sW - de * sM, be * sM], [ga * sM, sT - al * sM]], dtype=object)) / p
        if not np.all(ar.isfinite(T0)):
            return False
        self.Ni, self.Npi, self.T0, self._sM, self._one = Ni, None, T0, sM, True
        return True

    def _jac_1(self, dtype):
        """J on the one-inverse route: with A_X = N^{-1}X and G_XY = tr(A_X A_Y) (X, Y ∈ {W, Wᵀ, M}),
        ∂s_X/∂α = G_WX, ∂s_X/∂δ = G_TX, ∂s_X/∂q = −G_MX, then the chain rule through q = αδ − βγ' and the
        prefactors of :meth:`_pp1` (three p×p products instead of four)."""
        p = self.p
        al, be, ga, de = (float(v) for v in (self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]))
        Wd, Wt, WtW = grams(self.W, dtype)[:3]
        Ni = cast(self.Ni, dtype)
        ws = workspace(p, Wd.dtype)
        P, PT = ws["P"], ws["PT"]
        np.matmul(Ni, Wd, out=P[0])
        np.matmul(Ni, Wt, out=P[1])
        np.matmul(Ni, WtW, out=P[2])
        for i in range(3):
            PT[i] = P[i].T
        G = np.asarray(P[:3].reshape(3, -1) @ PT[:3].reshape(3, -1).T, dtype=float)   # G[X, Y], X, Y = W, T, M
        G = (G + G.T) / 2
        sM = float(self._sM)
        # D[c, X] = ∂s_X/∂C_c for C_c = α, β, γ', δ (q = αδ − βγ')
        D = np.array([G[0] - de * G[2], ga * G[2], be * G[2], G[1] - al * G[2]])
        J = np.empty((2, 2, 4))
        J[0, 0] = D[:, 0] - de * D[:, 2]
        J[0, 1] = be * D[:, 2]
        J[1, 0] = ga * D[:, 2]
        J[1, 1] = D[:, 1] - al * D[:, 2]
        J[0, 0, 3] -= sM
        J[0, 1, 1] += sM
        J[1, 0, 2] += sM
        J[1, 1, 0] -= sM
        return self.ar.convert(J.reshape(2, 2, 2, 2) / p)

    def _inv_Np(self):
        """N'^{-1} = (I − αW − δWᵀ + qWWᵀ)^{-1} in the precision of N^{-1} (for :meth:`_solve` on the one-inverse
        route)."""
        p = self.p
        dtype = self.Ni.dtype
        Wd, Wt, _, WWt = grams(self.W, None if dtype == self.W.dtype else dtype)
        al, be, ga, de = (cast(v, dtype.type) for v in (self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]))
        Np = np.multiply(WWt, al * de - be * ga) - al * Wd - de * Wt
        Np.flat[::p + 1] += 1
        return self.ar.inv_p(Np)

    def _pp(self, dtype) -> bool:
        """The p×p route: N^{-1}, N'^{-1} and T0; False (nothing set) when N or N' is singular."""
        p, ar = self.p, self.ar
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        Wd, Wt, WtW, WWt = grams(self.W, dtype)
        a_, b_, g_, d_ = (cast(v, dtype) for v in (al, be, ga, de))
        q = a_ * d_ - b_ * g_
        if Wd.dtype == object:
            base = -a_ * Wd - d_ * Wt
            idx = np.arange(p)
            base[idx, idx] += 1
            N, Np = base + q * WtW, base + q * WWt
        else:
            # I − αW − δWᵀ in a reused buffer, then N, N' (inverted in place: no further p×p temporaries)
            base = identity_minus(p, Wd, Wt, a_, d_)
            N = np.multiply(WtW, q)
            N += base
            Np = np.multiply(WWt, q)
            Np += base
        try:
            Ni = ar.inv_p(N)
            Npi = ar.inv_p(Np)
        except (np.linalg.LinAlgError, ZeroDivisionError):
            return False
        # tr(N^{-1}W) = Σ (N^{-1})_ij (Wᵀ)_ij etc. (WᵀW, WWᵀ symmetric), as dot products
        sW, sWtW = ar.dot(Ni, Wt), ar.dot(Ni, WtW)
        sWt, sWWt = ar.dot(Npi, Wd), ar.dot(Npi, WWt)
        T0 = ar.convert(np.array([[sW - de * sWtW, be * sWtW], [ga * sWWt, sWt - al * sWWt]], dtype=object)) / p
        if not np.all(ar.isfinite(T0)):
            return False
        # a posteriori check with one probe v: ‖B2 (H v) − v‖/‖v‖ grows like cond(D) or cond(A) times the
        # rounding (N = D·S, N' = A·S' are ill-conditioned near 1/δ or 1/α in the spectrum of W, B2 need not be);
        # computed in the inverses' own precision (H v as in :meth:`_solve`)
        if Wd.dtype != object:
            ws = workspace(p, Wd.dtype)
            if "probe" not in ws:
                ws["probe"] = np.cos(np.arange(2 * p) + 0.5).astype(Wd.dtype)
            v = ws["probe"]
        else:
            v = ar.convert(np.cos(np.arange(2 * p) + 0.5))
        vt, vh = v[:p], v[p:]
        V = np.stack([vt, vh], 1)
        WV, WtV = Wd @ V, Wt @ V
        xt = Ni @ (vt - d_ * WtV[:, 0] + b_ * WtV[:, 1])
        xh = Npi @ (g_ * WV[:, 0] + vh - a_ * WV[:, 1])
        Wxt, Wtxh = Wd @ xt, Wt @ xh
        Bx = np.concatenate([xt - a_ * Wxt - b_ * Wtxh, xh - g_ * Wxt - d_ * Wtxh])
        err = float(np.sqrt(ar.to_float(np.sum((Bx - v) ** 2)) / ar.to_float(np.sum(v * v))))
        if not err < (PP_CHECK_LOW if dtype is not None and dtype is ar.low else PP_CHECK_TOL * ar.tol):
            return False
        self.Ni, self.Npi, self.T0 = Ni, Npi, T0
        return True

    def J_low(self):
        """The Jacobian J from float32 products (relative rounding ~1e-6) on the p×p route, else J:
        enough for a Newton step, never for the derivative."""
        if self.Ni is None or self._J is not None or self.ar.low is self.ar.high:
            return self.J
        if self._J_low is None:
            self._J_low = self._jac_1(self.ar.low) if self._one else self._jac_pp(self.ar.low)
        return self._J_low

    def _jac_pp(self, dtype):
        """J on the p×p route from the products 𝒲_a H_ak in ``dtype``."""
        p = self.p
        al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
        Wd, Wt = grams(self.W, dtype)[:2]
        Ni, Npi = cast(self.Ni, dtype), cast(self.Npi, dtype)
        a_, b_, g_, d_ = (cast(v, dtype) for v in (al, be, ga, de))
        # 𝒲_a H_ak: W H_tt = W N^{-1} D, W H_th = β W N^{-1} Wᵀ, Wᵀ H_ht = γ' Wᵀ N'^{-1} W, Wᵀ H_hh = Wᵀ N'^{-1} A,
        # index 2a + k, from X1 = W N^{-1}, X2 = X1 Wᵀ, Y1 = Wᵀ N'^{-1}, Y2 = Y1 W
        if Wd.dtype == object:
            X1 = Wd @ Ni
            X2 = X1 @ Wt
            Y1 = Wt @ Npi
            Y2 = Y1 @ Wd
            P = np.stack([X1 - d_ * X2, b_ * X2, g_ * Y2, Y1 - a_ * Y2])
            PT = np.ascontiguousarray(P.transpose(0, 2, 1))
        else:
            # in reused buffers: the 4 products and their transposes, no p×p temporaries
            ws = workspace(p, Wd.dtype)
            P, PT, tmp = ws["P"], ws["PT"], ws["tmp"]
            np.matmul(Wd, Ni, out=P[0])
            np.matmul(P[0], Wt, out=P[1])
            np.matmul(Wt, Npi, out=P[3])
            np.matmul(P[3], Wd, out=P[2])
            np.multiply(P[1], d_, out=tmp)
            P[0] -= tmp
            np.multiply(P[2], a_, out=tmp)
            P[3] -= tmp
            P[1] *= b_
            P[2] *= g_
            for i in range(4):
                PT[i] = P[i].T
        # tr(P_i P_j) = vec(P_i)·vec(P_jᵀ): one 4×4 Gram product
        G = self.ar.convert(P.reshape(4, -1) @ PT.reshape(4, -1).T) / p
        return G[_J_ROWS, _J_COLS]

    @property
    def J(self):
        if self._J is None:
            if self.Ni is not None:
                self._J = self._jac_1(np.float64) if self._one else self._jac_pp(np.float64)
                return self._J
            p, idx = self.p, [(a, b, k, l) for a in range(2) for b in range(2) for k in range(2) for l in range(2)]
            if self.eig is not None:
                lam, h = self.eig[0], self.h
                vals = [np.sum(lam * h[a][k] * lam * h[l][b]) / p for a, b, k, l in idx]
            else:
                W, H = self.W, self.H
                blk = lambda a, b: H[a * p:(a + 1) * p, b * p:(b + 1) * p]
                Wl = (W, W.T)
                P = [[Wl[a] @ blk(a, k) for k in range(2)] for a in range(2)]  # 𝒲_a H_ak
                vals = [np.sum(P[a][k] * P[l][b].T) / p for a, b, k, l in idx]
            self._J = self.ar.convert(np.array(vals, dtype=object)).reshape(2, 2, 2, 2)
        return self._J

    def traces(self, C):
        dC = np.asarray(C) - self.C0
        if not np.any(dC):
            return self.T0
        return self.T0 + np.tensordot(self.J, dC, axes=([2, 3], [0, 1]))

    def _solve(self, v):
        """H0 v (v of shape (2p,) or (2p, k), real or complex)."""
        p = self.p
        if np.iscomplexobj(v):   # complex128: the interleaved real and imaginary columns on the real inverse
            v2 = np.ascontiguousarray(v.reshape(2 * p, -1), dtype=np.complex128)
            x = np.ascontiguousarray(self._solve(v2.view(np.float64)))
            return x.view(np.complex128).reshape(v.shape)
        if self.Ni is not None:
            if self.Npi is None:
                self.Npi = self._inv_Np()
            al, be, ga, de = self.C0[0, 0], self.C0[0, 1], self.C0[1, 0], self.C0[1, 1]
            Wd, Wt = grams(self.W, None)[:2]
            vt, vh = v[:p], v[p:]
            # W and Wᵀ applied to [v_t, v_h] at once (one pass over each matrix)
            k = v.shape[1] if v.ndim == 2 else 1
            V = np.concatenate([vt, vh], axis=1) if v.ndim == 2 else np.stack([vt, vh], 1)
            WV, WtV = Wd @ V, Wt @ V
            Wvt, Wvh, Wtvt, Wtvh = WV[:, :k], WV[:, k:], WtV[:, :k], WtV[:, k:]
            if v.ndim == 1:
                Wvt, Wvh, Wtvt, Wtvh = Wvt[:, 0], Wvh[:, 0], Wtvt[:, 0], Wtvh[:, 0]
            return np.concatenate([self.Ni @ (vt - de * Wtvt + be * Wtvh), self.Npi @ (ga * Wvt + vh - al * Wvh)])
        if self.eig is None:
            return self.H @ v
        (_, E), h = self.eig, self.h
        if v.ndim == 2:
            h = [[x[:, None] for x in row] for row in h]
        # Eᵀ and E applied to both halves at once (one product each)
        k = v.shape[1] if v.ndim == 2 else 1
        ab = E.T @ (np.concatenate([v[:p], v[p:]], axis=1) if v.ndim == 2 else np.stack([v[:p], v[p:]], 1))
        a, b = (ab[:, :k], ab[:, k:]) if v.ndim == 2 else (ab[:, 0], ab[:, 1])
        tt, hh = h[0][0] * a + h[0][1] * b, h[1][0] * a + h[1][1] * b
        out = E @ (np.concatenate([tt, hh], axis=1) if v.ndim == 2 else np.stack([tt, hh], 1))
        return np.concatenate([out[:, :k], out[:, k:]]) if v.ndim == 2 else np.concatenate([out[:, 0], out[:, 1]])

    def apply(self, C, v):
        p = self.p
        x = self._solve(v)
        dC = np.asarray(C) - self.C0
        if not np.any(dC):
            return x
        Wx = np.concatenate([rmul(self.W, x[:p]), rmul(self.W.T, x[p:])])
        y = np.concatenate([dC[0, 0] * Wx[:p] + dC[0, 1] * Wx[p:], dC[1, 0] * Wx[:p] + dC[1, 1] * Wx[p:]])
        return x + self._solve(y)

class LowRankTraces:
    r"""The p-traces T_ab(C) = tr_p(𝒲_a H_ab)/p of docs/theory.md §12.2 (𝒲_t = W, 𝒲_h = Wᵀ,
    H = B2(C)^{-1}, C = [[α, β], [γ', δ]]) for W = U S Vᵀ of rank r ≤ p/2, at any C (complex steps about a
    real point through its exact derivative ∂T/∂C there, :attr:`J`), by Woodbury in the 2r-dimensional
    range of W:

      B2 = I − L R,  L = [[αU, βV], [γ'U, δV]],  R = diag(S Vᵀ, S Uᵀ),  H = I + L K R,
      K = (I_2r − R L)^{-1},  R L = [[α S Oᵀ, β S], [γ' S, δ S O]]  (O = UᵀV),

    so tr(𝒲_a H_ab) = δ_ab tr W + tr(K R_b 𝒲_a L_a), with 𝒲_t L_t = U S[αOᵀ, βI], 𝒲_h L_h = V S[γ'I, δO],
    R_t U = [S Oᵀ; 0], R_h U = [0; S], R_t V = [S; 0], R_h V = [0; S O]: one 2r×2r inverse and eight
    Frobenius products per evaluation (O(r³)) instead of two p×p inverses (O(p³)). The duck type of
    :class:`HOperator` that :func:`~.pencil.p_traces` uses."""

    def __init__(self, W, U, S, V):
        p, r = W.shape[0], S.size
        O = U.T @ V
        Sd = np.diag(S)
        self.p, self.r, self.trW = p, r, float(np.trace(W))
        self.SOt, self.SO, self.Sd = Sd @ O.T, Sd @ O, Sd
        S2, SOtS, SOS = Sd @ Sd, Sd @ O.T @ Sd, Sd @ O @ Sd
        # T_ab·p − δ_ab tr W = Σ_k coef_k ⟨K_blk_k, M_k⟩ (⟨A, B⟩ = Σ A∘B); the 8 matrices M_k per (block of K, C entry):
        # tt: α⟨K11, (SOᵀSOᵀ)ᵀ⟩ + β⟨K21, (SOᵀS)ᵀ⟩;  th: α⟨K12, (S²Oᵀ)ᵀ⟩ + β⟨K22, S²⟩
        # ht: γ'⟨K11, S²⟩ + δ⟨K21, (S²O)ᵀ⟩;       hh: γ'⟨K12, (SOS)ᵀ⟩ + δ⟨K22, (SOSO)ᵀ⟩
        Z = np.zeros((r, r))
        blk = lambda i, M: np.block([[M if i == 0 else Z, M if i == 1 else Z], [M if i == 2 else Z, M if i == 3 else Z]])
        mats = [blk(0, (SOtS @ O.T).T), blk(2, SOtS.T), blk(1, (S2 @ O.T).T), blk(3, S2),
                blk(0, S2), blk(2, (S2 @ O).T), blk(1, SOS.T), blk(3, (SOS @ O).T)]
        self.M = np.stack([mm.ravel() for mm in mats], 1)   # (4r², 8)
        self.I = np.eye(2 * r)
        self.U, self.V, self.S = U, V, S
        # dRL/dC_kl: (columns of K, matrix, rows of K) of the one nonzero block of each derivative
        self.blocks = [(slice(None, r), Sd @ O.T, slice(None, r)), (slice(None, r), Sd, slice(r, None)),
                       (slice(r, None), Sd, slice(None, r)), (slice(r, None), Sd @ O, slice(r, None))]
        self._C0 = None    # the last real point: C0, K0 = (I − R L(C0))^{-1}, v0 = ⟨K0, M_k⟩, ∂T/∂C there (lazy)
        self._K0 = self._v0 = self._J = None

    def _T(self, C, v, diag=True):
        """T from C (2×2[×batch]) and the Frobenius products v (…×8); tr W on the diagonal when ``diag``."""
        al, be, ga, de = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
        t = self.trW if diag else 0.0
        return np.array([[t + al * v[..., 0] + be * v[..., 1], al * v[..., 2] + be * v[..., 3]],
                         [ga * v[..., 4] + de * v[..., 5], t + ga * v[..., 6] + de * v[..., 7]]]) / self.p

    def _exact(self, C):
        al, be, ga, de = (np.asarray(x)[..., None, None] for x in (C[0, 0], C[0, 1], C[1, 0], C[1, 1]))
        RL = np.block([[al * self.SOt, be * self.Sd], [ga * self.Sd, de * self.SO]])
        K = np.linalg.inv(self.I - RL)
        return K, K.reshape(K.shape[:-2] + (-1,)) @ self.M

    @property
    def J(self):
        """∂T_ab/∂C_kl at the last real point (2×2×2×2): dK = K0 dRL K0, dT = T(dC, v0) + T(C0, ⟨dK, M⟩)."""
        if self._J is None:
            K0, J = self._K0, np.empty((2, 2, 2, 2))
            for idx, (rows, blk, cols) in enumerate(self.blocks):
                k, l = divmod(idx, 2)
                dC = np.zeros((2, 2))
                dC[k, l] = 1.0
                dv = (K0[:, rows] @ blk @ K0[cols, :]).ravel() @ self.M
                J[:, :, k, l] = self._T(dC, self._v0, diag=False) + self._T(self._C0, dv, diag=False)
            self._J = J
        return self._J

    def _set(self, C0):
        self._K0, self._v0 = self._exact(C0)
        self._C0, self._J = np.array(C0, dtype=float), None

    def traces(self, C):
        """T(C) for C of shape (2, 2) or (2, 2, B), real or complex. A complex C whose real parts are one point
        C0 (to 1e-12) and whose imaginary part is a complex step (|Im C| ≤ 1e-12·max(1, |C0|)) is evaluated
        as T(C0) + J·(C − C0) (exact to O(|Im C|²)), the inverse at C0 computed once and kept."""
        C = np.asarray(C)
        if np.iscomplexobj(C):
            C0 = C.real if C.ndim == 2 else C.real[:, :, 0]
            big = max(1.0, float(np.max(np.abs(C0))))
            near = C.ndim == 2 or np.allclose(C.real, C0[:, :, None], rtol=1e-12, atol=1e-12 * big)
            if near and np.max(np.abs(C.imag)) <= 1e-12 * big:
                if self._C0 is None or not np.allclose(C0, self._C0, rtol=1e-13, atol=1e-13 * big):
                    self._set(C0)
                T0, dC = self._T(self._C0, self._v0), C - (self._C0 if C.ndim == 2 else self._C0[:, :, None])
                return (T0 if C.ndim == 2 else T0[:, :, None]) + np.tensordot(self.J, dC, axes=([2, 3], [0, 1]))
        elif C.ndim == 2:
            if self._C0 is None or not np.array_equal(C, self._C0):
                self._set(C)
            return self._T(C, self._v0)
        return self._T(C, self._exact(C)[1])

    def apply(self, C, v):
        """H(C) v = v + L K R v (exact at any C, complex too; v of shape (2p,) or (2p, k)): the interface of
        :meth:`HOperator.apply` (which linearises in C − C0)."""
        C = np.asarray(C)
        p = self.p
        vt, vh = v[:p], v[p:]
        Rv = np.concatenate([(self.V.T @ vt) * (self.S if v.ndim == 1 else self.S[:, None]),
                             (self.U.T @ vh) * (self.S if v.ndim == 1 else self.S[:, None])])
        y = self._exact(C)[0] @ Rv if C.dtype.kind == "c" or not np.array_equal(C, self._C0) else self._K0 @ Rv
        r = self.r
        al, be, ga, de = C[0, 0], C[0, 1], C[1, 0], C[1, 1]
        Uy, Vy = self.U @ y[:r], self.V @ y[r:]
        return np.concatenate([vt + al * Uy + be * Vy, vh + ga * Uy + de * Vy])


#: low-rank trace operators of W already built (content of W → LowRankTraces or None)
LOW_RANK_TRACES = Memo("general_w.low_rank_traces", 8)


def low_rank_traces(W):
    """A :class:`LowRankTraces` of W when 0 < rank W ≤ p/2 (one SVD per content of W, cached), else None.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> W = rng.standard_normal((20, 3)) @ rng.standard_normal((3, 20))
    >>> low_rank_traces(W).r, low_rank_traces(np.eye(20)) is None
    (3, True)
    """
    def build():
        U, S, Vt = np.linalg.svd(W)
        r = weight_rank(W, S)
        return LowRankTraces(W, U[:, :r], S[:r], Vt[:r].T) if 0 < 2 * r <= W.shape[0] else None

    return LOW_RANK_TRACES.get((array_key(W),), build)
