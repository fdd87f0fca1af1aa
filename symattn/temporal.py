r"""Ridge regression on tokens correlated in time: the deterministic equivalent of docs/theory.md §15.

The tokens are :math:`X = \mu y^\top + Z` (p×n, p/n → c) with :math:`Z = GT^{1/2}`: the n samples are
correlated by the Toeplitz correlation T, the p features are iid (a separable covariance
:math:`I_p \otimes T`). With :math:`\hat y = y/\sqrt n` and :math:`Q = (X^\top X/n + \gamma)^{-1}`, the
training error is :math:`E_{train} = \gamma^2\hat y^\top Q^2\hat y` and, the fresh test token having the
iid marginal law :math:`x' = y'\mu + z'`, :math:`z' \sim \mathcal N(0, I_p)`, the test error is
:math:`E_{test} = 1 - 2\beta^\top\mu + \|\beta\|^2 + (\beta^\top\mu)^2`: T enters it only through β.

The deterministic equivalent of the resolvent of :math:`Z^\top Z/n = \frac1n\sum_{k\le p} a_ka_k^\top`,
:math:`a_k \sim \mathcal N(0, T)` iid, is :math:`\bar Q = (cT/(1+\delta) + \gamma)^{-1}` with the scalar fixed
point :math:`\delta = \frac1n\mathrm{tr}\,T\bar Q` (Silverstein & Bai 1995; Couillet & Liao 2022, ch. 2; the
"correlated samples" form of Atanasov, Zavatone-Veth & Pehlevan 2024). As n → ∞ the traces become
integrals over the spectral density s(ω) of T, and a quadratic form in the labels an integral against
theirs, :math:`s_y(\omega)`:

.. math::  \delta = \langle s/h\rangle,\quad \alpha = \hat y^\top\bar Q\hat y = \langle s_y/h\rangle,\quad
           h(\omega) = \frac{c\,s(\omega)}{1+\delta} + \gamma,\quad
           \langle g\rangle = \frac1{2\pi}\int_0^{2\pi} g(\omega)\,d\omega.

The signal is a rank-one update: :math:`X^\top X/n = A_0 + bb^\top`, :math:`b = \|\mu\|\hat y + T^{1/2}g/\sqrt n`
(g = Gᵀμ/‖μ‖ ~ N(0, I_n), independent of :math:`A_0`), and Sherman–Morrison gives, with
:math:`D = \|\mu\|^2\alpha + \delta`, :math:`\alpha_2 = -d\alpha/d\gamma`, :math:`\delta_2 = -d\delta/d\gamma`:

.. math::  F = \hat y^\top Q\hat y = \frac{\alpha(1+\delta)}{1+D},\qquad \beta^\top\mu = \frac{\|\mu\|^2\alpha}{1+D},

           E_{train} = \gamma^2\Big[\alpha_2 - \frac{2\|\mu\|^2\alpha\alpha_2}{1+D}
                       + \frac{\|\mu\|^2\alpha^2(\|\mu\|^2\alpha_2 + \delta_2)}{(1+D)^2}\Big],
           \qquad \|\beta\|^2 = F - E_{train}/\gamma.
"""
from __future__ import annotations

import numpy as np

from .errors import ConvergenceError
from .model import check_c, check_gamma, check_nonnegative
from .tokens import as_token_law, toeplitz_symbol

__all__ = ["linear_errors", "kernel_band", "attention_errors", "attention_test_errors"]


def _delta(c, gamma, s):
    """The root δ of δ = ⟨s/(cs/(1+δ) + γ)⟩ (increasing right side; bracket [0, ⟨s⟩/γ])."""
    from scipy.optimize import brentq

    def phi(d):
        return d - np.mean(s / (c * s / (1 + d) + gamma))

    hi = np.mean(s) / gamma
    try:
        return brentq(phi, 0.0, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)
    except (ValueError, RuntimeError) as exc:  # pragma: no cover - phi(0) < 0 < phi(hi) always
        raise ConvergenceError(f"the fixed point δ of the correlated-token resolvent: {exc}",
                               point={"c": c, "gamma": gamma}) from None


def _point(c, gamma, m2, s, sy):
    d = _delta(c, gamma, s)
    h = c * s / (1 + d) + gamma
    # δ' = −⟨s/h²⟩ / (1 − c/(1+δ)² ⟨s²/h²⟩);  h' = 1 − c s δ'/(1+δ)²
    dd = -np.mean(s / h ** 2) / (1 - c / (1 + d) ** 2 * np.mean(s * s / h ** 2))
    hp = 1 - c * s * dd / (1 + d) ** 2
    alpha, alpha2, delta2 = np.mean(sy / h), np.mean(sy * hp / h ** 2), -dd
    D = m2 * alpha + d
    E = gamma ** 2 * (alpha2 - 2 * m2 * alpha * alpha2 / (1 + D) + m2 * alpha ** 2 * (m2 * alpha2 + delta2) / (1 + D) ** 2)
    F = alpha * (1 + d) / (1 + D)
    o = m2 * alpha / (1 + D)
    test = 1 - 2 * o + (F - E / gamma) + o * o
    return E, test, F, o, d


def linear_errors(c=0.5, gamma=1.0, snr=0.0, tokens=None, grid=None) -> dict:
    r"""Training and test error of ridge regression on X (the paper's baseline) under a token law (docs/theory.md §15).

    The deterministic equivalent of the module docstring, evaluated on the trapezoid grid of
    :meth:`symattn.tokens.TokenLaw.grid`; with T = I and iid labels it is the paper's LR closed form.

    Parameters
    ----------
    c, gamma : array_like
        p/n > 0 and the ridge γ > 0, broadcast together.
    snr : float
        ‖μ‖² ≥ 0.
    tokens : TokenLaw, dict or None
        The law of the sequence (None: iid tokens and labels).
    grid : int, optional
        The number of ω nodes (default: :meth:`~symattn.tokens.TokenLaw.grid`'s choice).

    Returns
    -------
    dict
        ``train``, ``test`` (E_train, E_test), ``F`` (ŷᵀQŷ), ``overlap`` (βᵀμ) and ``delta`` (δ),
        arrays of the broadcast shape.

    Warns
    -----
    PrecisionWarning
        Where ‖β‖² = F − E_train/γ cancels (c·γ → 0 at c < 1) and leaves E_test an estimated relative
        error above 1e-8 (float64 only; no mpmath escalation here).

    Examples
    --------
    >>> from symattn import memorization_error
    >>> r = linear_errors(c=0.5, gamma=1.0)
    >>> bool(abs(r["train"] - memorization_error(c=0.5, gamma=1.0, model="linear")) < 1e-12)   # T = I: §3
    True
    >>> from symattn.tokens import TokenLaw
    >>> a = linear_errors(c=1.0, gamma=0.1, snr=1.0)["test"]
    >>> b = linear_errors(c=1.0, gamma=0.1, snr=1.0, tokens=TokenLaw(ar1=0.8))["test"]
    >>> bool(b < a)                       # with a signal, correlation lowers the test error
    True
    """
    c = check_c(c)
    gamma = check_gamma(gamma)
    m2 = float(check_nonnegative("snr", snr))
    law = as_token_law(tokens)
    _, s, sy = law.grid(grid)
    cb, gb = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
    out = {k: np.empty(cb.shape) for k in ("train", "test", "F", "overlap", "delta")}
    for idx in np.ndindex(cb.shape):
        vals = _point(float(cb[idx]), float(gb[idx]), m2, s, sy)
        for k, v in zip(("train", "test", "F", "overlap", "delta"), vals):
            out[k][idx] = v
    # ‖β‖² = F − E/γ cancels at small cγ for c < 1 (F ≈ (1 − c)/γ): the relative error it leaves in E_test
    est = 64 * np.finfo(float).eps * (np.abs(out["F"]) + out["train"] / gb) / np.abs(out["test"])
    if np.any(est > 1e-8):
        import warnings

        from .errors import PrecisionWarning

        bad = [{"c": float(cb[i]), "gamma": float(gb[i]), "estimate": float(est[i])} for i in zip(*np.nonzero(est > 1e-8))]
        warnings.warn(PrecisionWarning(f"{len(bad)} test-error value(s) with an estimated relative error above 1e-08 "
                                       "(‖β‖² = F − E/γ cancels at small c·γ)", bad), stacklevel=2)
    return out


def kernel_band(f, p: int, tokens=None, lags: int = 64, nodes: int = 96) -> np.ndarray:
    r"""The mean of the attention kernel at each lag under a token law, μ = 0, W = I (docs/theory.md §15.4).

    Tokens at lag k have :math:`x_t^\top x_s/\sqrt p = \sqrt p\,r_k + \sqrt{1 + r_k^2}\,g + O(p^{-1/2})`, g ~ N(0, 1)
    (a sum of p products of pairs with correlation r_k), so the kernel has the deterministic Toeplitz band

    .. math::  \beta_k = E\,K_{t,t+k} = \frac1{\sqrt p}\,E f\big(\sqrt p\,r_k + \sqrt{1+r_k^2}\,g\big),\qquad k \ge 1,

    by Gauss–Hermite quadrature (f centred as everywhere; the rule's value at r_k = 0, which should be
    E f(g) = 0, is subtracted, so that iid lags give exactly 0 also for f with a kink). Near lags
    (√p r_k ≫ 1) see f at large arguments, as the
    diagonal does (§1.3); with iid tokens β_k = 0. Its operator norm is ≈ max_ω |2 Σ_k β_k cos kω|.

    Parameters
    ----------
    f : str or Activation
        The activation (a catalog name or SymPy string, resolved by :func:`symattn.activation`).
    p : int
        The dimension.
    tokens : TokenLaw, dict or None
        The law (its r_k; the labels do not enter at μ = 0).
    lags : int
        The number of lags k = 1..lags returned.
    nodes : int
        Gauss–Hermite nodes.

    Returns
    -------
    numpy.ndarray
        β_1..β_lags.

    Examples
    --------
    >>> b = kernel_band("relu", 1000, {"ar1": 0.9}, lags=3)
    >>> b.round(3).tolist()            # ReLU at √p r_k ≫ 1: β_k ≈ r_k − a0/√p = 0.9^k − 0.399/31.6
    [0.887, 0.797, 0.716]
    >>> bool(np.abs(kernel_band("tanh", 1000, None, lags=5)).max() < 1e-15)     # iid tokens: no band
    True
    """
    from .activations.activation import activation

    act = f if hasattr(f, "numpy") else activation(f)
    r = as_token_law(tokens).lags(lags + 1)[1:]
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / w.sum()
    sp = np.sqrt(p)
    args = sp * r[:, None] + np.sqrt(1 + r * r)[:, None] * x[None, :]
    # minus the rule's value at r = 0 (E f(g) = 0 for centred f; the rule misses it by ~1e-6 at a kink)
    return (act.numpy(args) @ w - act.numpy(x) @ w) / sp


# ============================================================================ attention (docs/theory.md §15.5)
# The pencil of docs/theory.md §12.2 at W = I: unknowns x, u, w (n-blocks) and t, v, h, g, l (p-blocks),
# Q = (γ + KᵀYᵀYK)⁻¹ its (x, x) block, K = A + (a1/c)YᵀWY + σÑ. Its random slots (row, column, coefficient):
_NX, _NU, _NW = 0, 1, 2
_PT, _PV, _PH, _PG, _PL = 0, 1, 2, 3, 4
_Y_SLOTS = ((_PT, _NX, -1.0), (_PV, _NU, -1.0), (_PH, _NW, -1.0))          # Y: p-row, n-column


def _slots(a1, c, sigma):
    yt = ((_NX, _PG, a1 / c), (_NU, _PL, -a1 / c), (_NW, _PV, -1.0))         # Yᵀ: n-row, p-column
    noise = ((_NX, _NW, sigma), (_NU, _NX, -sigma))                          # Ñ (symmetric): n-row, n-column
    return yt, noise


def _pairing(first, second, shape):
    """M[a, b, k, l] = Σ α β over slot pairs (a, k, α) ∈ first, (l, b, β) ∈ second,
    so that the self-energy is Σ_ab = Σ_kl M[a, b, k, l] E[R G_kl R']."""
    M = np.zeros(shape)
    for a, k, al in first:
        for l, b, be in second:
            M[a, b, k, l] += al * be
    return M


def _bulk(a1, s2, c, gamma, aw, s, noise_w, noise_s, z0=None):
    r"""The Dyson fixed point of the pencil per frequency (docs/theory.md §15.5): returns the n-blocks
    G_nn(ω) (N, 3, 3), the p-blocks P (5, 5) of the deterministic equivalent and the unknowns z (a warm
    start ``z0`` for a nearby γ skips the damped iteration)."""
    from scipy.optimize import root

    yt, nz = _slots(a1, c, np.sqrt(s2 / c))
    MY = _pairing(yt, _Y_SLOTS, (3, 3, 5, 5))
    MN = _pairing(nz, nz, (3, 3, 3, 3))
    MP = _pairing(_Y_SLOTS, yt, (5, 5, 3, 3))
    N, K = s.size, len(noise_w)
    L0n = np.zeros((N, 3, 3))
    L0n[:, _NX, _NX] = gamma
    L0n[:, _NX, _NW] = aw
    L0n[:, _NU, _NX] = -aw
    L0n[:, _NU, _NU] = L0n[:, _NW, _NW] = 1.0
    L0p = np.eye(5)
    L0p[_PG, _PH] = L0p[_PL, _PT] = -1.0
    weighted = noise_w[:, None] * noise_s

    def step(z):
        P, gk = z[:25].reshape(5, 5), z[25:].reshape(K, 3, 3)
        # E[Yᵀ P Y] = c tr_p(P)·T, E[Ñ_k M Ñ_k] = T∘k tr_n(T∘k M), E[Y M Yᵀ] = tr_n(TM)·I_p
        Sn = (c * s[:, None, None] * np.einsum("abkl,kl->ab", MY, P)
              + np.einsum("abkl,jkl,jw->wab", MN, gk, weighted))
        Gn = np.linalg.inv(L0n - Sn)
        Pn = np.linalg.inv(L0p - np.einsum("abkl,kl->ab", MP, np.einsum("w,wab->ab", s, Gn) / N))
        return np.concatenate([Pn.ravel(), (np.einsum("jw,wab->jab", noise_s, Gn) / N).ravel()]), Gn, Pn

    z = np.concatenate([np.linalg.inv(L0p).ravel(), np.tile(np.linalg.inv(L0n).mean(0).ravel(), K)])
    # a damped iteration from the γ → ∞ branch (skipped with a warm start), then Powell's hybrid method
    for _ in range(0 if z0 is not None else 20000):
        zn = step(z)[0]
        done = np.max(np.abs(zn - z)) < 1e-6 * max(1.0, np.max(np.abs(z)))
        z = 0.5 * (z + zn)
        if done:
            break
    sol = root(lambda v: step(v)[0] - v, z if z0 is None else z0, method="hybr", options={"xtol": 1e-15})
    zn, Gn, P = step(sol.x)
    res = float(np.max(np.abs(zn - sol.x)) / max(1.0, np.max(np.abs(zn))))
    if not np.isfinite(res) or res > 1e-11:
        raise ConvergenceError("the Dyson fixed point of attention under correlated tokens did not converge",
                               point={"c": c, "gamma": gamma, "residual": res})
    return Gn, P, sol.x


def _woodbury_F(a1, s2, c, gamma, aw, s, sy, gram, rank, noise_w, noise_s, z0=None, overlaps=False):
    r"""F = ŷᵀQŷ with the signal μŷᵀ in every Y-slot and W − I = Σ_k w_K w_Qᵀ by Woodbury (§15.5, as §12.3);
    returns F and the Dyson unknowns (a warm start for a nearby γ), and with ``overlaps`` also
    o = Vᵀβ, V = [μ, w_K, w_Q] (docs/theory.md §15.6): β = YKQŷ is the v-block of the pencil's solution,
    so βᵀe = [0; e in v]ᵀ H⁻¹ [ŷ in x; 0], by the same Woodbury step."""
    Gn, P, z = _bulk(a1, s2, c, gamma, aw, s, noise_w, noise_s, z0)
    yt, _ = _slots(a1, c, 0.0)
    Gy = np.einsum("w,wab->ab", sy, Gn) / sy.size          # ŷᵀ G_nn ŷ → ⟨s_y G_nn⟩
    # rank-one terms coef·(side, block, vector)(side, block, vector)ᵀ; vectors index the Gram (0 = μ)
    terms = [(al, ("p", R, 0), ("n", C, None)) for R, C, al in _Y_SLOTS]
    terms += [(al, ("n", R, None), ("p", C, 0)) for R, C, al in yt]
    for k in range(rank):                                  # Wᵀ = I + w_Q w_Kᵀ in (g, h), W in (l, t)
        terms += [(-1.0, ("p", _PG, 1 + rank + k), ("p", _PH, 1 + k)),
                  (-1.0, ("p", _PL, 1 + k), ("p", _PT, 1 + rank + k))]

    def qf(a, b):            # the deterministic equivalent of aᵀ G b (0 across n and p: odd in Y)
        if a[0] != b[0]:
            return 0.0
        return Gy[a[1], b[1]] if a[0] == "n" else P[a[1], b[1]] * gram[a[2], b[2]]

    y = ("n", _NX, None)
    VGU = np.array([[qf(ti[2], tj[1]) * tj[0] for tj in terms] for ti in terms])
    yGU = np.array([qf(y, tj[1]) * tj[0] for tj in terms])
    VGy = np.array([qf(ti[2], y) for ti in terms])
    sol = np.linalg.solve(np.eye(len(terms)) + VGU, VGy)
    F = Gy[_NX, _NX] - yGU @ sol
    if not overlaps:
        return F, z
    # βᵀe: qf(e, ŷ) = 0 (across p and n), so only the Woodbury correction remains
    o = np.array([-np.array([qf(("p", _PV, e), tj[1]) * tj[0] for tj in terms]) @ sol for e in range(gram.shape[0])])
    return F, z, o


def _attention_inputs(act, c, n, geometry, law, kmax, grid, diagonal):
    from .model import dimension, kernel_constants

    k = kernel_constants(act, diagonal=diagonal, n=n, c=c, snr=geometry.snr)
    omega, s, sy = law.grid(grid)
    N = s.size
    L = (N - 1) // 2
    r = law.lags(L + 1)[1:]
    beta = kernel_band(act, dimension(n, c), law, lags=L)
    # A = B − a1 T: the band's mean minus the mean of a1 XᵀX/p (the diagonal d_n − a1, as §4's dI − a1 I)
    aw = toeplitz_symbol(beta - k.a1 * r, N, r0=float(k.d) - k.a1)
    ak = np.array([float(x) for x in act.hermite_coefficients(kmax=kmax, dps=20)])
    wk = ak[2:] ** 2 / k.s2 if k.s2 > 0 else np.zeros(kmax - 1)
    noise_w = np.append(wk, max(0.0, 1.0 - wk.sum()))       # orders 2..kmax, the rest white
    noise_s = np.array([toeplitz_symbol(r ** j, N) for j in range(2, kmax + 1)] + [np.ones(N)])
    return k, s, sy, aw, noise_w, noise_s


def attention_errors(f="tanh", c=0.5, gamma=1.0, n=1000, geometry=None, tokens=None, kmax: int = 8,
                     grid=None, diagonal: str = "f") -> dict:
    r"""Attention's training error E_A of the paper's model (W = I + low rank) under a token law, at finite p
    (docs/theory.md §15.5).

    The kernel is replaced by :math:`K = B + a_1(X^\top WX/p - T) + \sigma\tilde N`: B the deterministic
    Toeplitz band of :func:`kernel_band` (diagonal d_n), the linear part with the iid slope a1, and a noise
    whose order-k Hermite part is correlated across entries as :math:`(T_{ab}T_{ss'})^k`, so that
    :math:`E[\tilde NM\tilde N] = \sum_{k\ge2}(a_k^2/s^2)\,T^{\circ k}\operatorname{tr}_n(T^{\circ k}M)` (orders above
    ``kmax`` taken white). The pencil of §12.2 (W = I) has a Dyson equation whose n-blocks are Toeplitz,
    hence Fourier-diagonal: one 3×3 inverse per frequency ω, a 5×5 one on the p side, coupled by the traces
    :math:`\langle s\,G\rangle`, :math:`\langle s_k G\rangle` and :math:`c\operatorname{tr}_pP`. The signal
    (μŷᵀ in every Y-slot) and W − I enter by Woodbury, ŷᵀ G ŷ → ⟨s_y G⟩.
    E_A = −γ²F'(γ), F' by a four-point central difference (relative step 1e-3; about 1e-9 relative).

    With iid tokens (T = I) the value is that of :func:`symattn.memorization_error` (Theorem 1 with d_n).

    Parameters
    ----------
    f : str or Activation
        The activation.
    c, gamma : float
        p/n > 0 and the ridge γ > 0.
    n : int
        The number of tokens (p = round(c·n)): the band and d_n depend on p.
    geometry : Geometry, dict or None
        The Gram matrix of (μ, w_K, w_Q) (rank r allowed); None: μ = 0, W = I.
    tokens : TokenLaw, dict or None
        The law of the sequence.
    kmax : int
        The highest Hermite order whose noise is coloured.
    grid : int, optional
        The ω grid (default :meth:`~symattn.tokens.TokenLaw.grid`).
    diagonal : {'f', 'zero'}
        The kernel's diagonal: f (d_n) or zeroed (d = 0), as :func:`symattn.model.kernel_constants`.

    Returns
    -------
    dict
        ``train`` (E_A) and ``F`` (ŷᵀQŷ).

    Examples
    --------
    >>> from symattn import memorization_error
    >>> r = attention_errors("tanh", c=1.0, gamma=1.0, n=500)       # T = I: the generic pencil is Theorem 1
    >>> bool(abs(r["train"] / memorization_error("tanh", 1.0, 1.0, n=500) - 1) < 1e-8)
    True
    >>> round(attention_errors("relu", c=1.0, gamma=0.1, n=500, tokens={"ar1": 0.8})["train"], 3)   # MC: 0.62
    0.618
    """
    E, F0, _, _ = _training_point(f, c, gamma, n, geometry, tokens, kmax, grid, diagonal)
    return {"train": E, "F": F0}


def _training_point(f, c, gamma, n, geometry, tokens, kmax, grid, diagonal, overlaps=False):
    """E_A = −γ²F'(γ) (four-point central difference, warm starts), F, the overlaps Vᵀβ (with ``overlaps``)
    and the checked inputs (activation, law, c, gamma, geometry, constants, s, s_y, a(ω), noise weights and
    symbols)."""
    from .activations.activation import activation
    from .model import as_geometry, check_int, check_n

    act = f if hasattr(f, "numpy") else activation(f)
    c = float(check_c(c))
    gamma = float(check_gamma(gamma))
    n = check_n(n)
    kmax = check_int("kmax", kmax, 2)
    geo = as_geometry(geometry)
    law = as_token_law(tokens)
    k, s, sy, aw, noise_w, noise_s = _attention_inputs(act, c, n, geo, law, kmax, grid, diagonal)

    def F(g, z0=None, o=False):
        return _woodbury_F(k.a1, k.s2, c, g, aw, s, sy, geo.gram, geo.rank, noise_w, noise_s, z0, o)

    F0, z, *o = F(gamma, o=overlaps)
    h = 1e-3 * gamma
    Fm2, Fm1, Fp1, Fp2 = (F(gamma + j * h, z)[0] for j in (-2, -1, 1, 2))
    dF = (8 * (Fp1 - Fm1) - (Fp2 - Fm2)) / (12 * h)
    inputs = (act, law, c, gamma, geo, k, s, sy, aw, noise_w, noise_s)
    return float(-gamma * gamma * dF), float(F0), (o[0] if o else None), inputs


# ============================================================================ the test error (docs/theory.md §15.6)
def _spectra(a1, s, sy, aw, noise_w, noise_s) -> dict:
    r"""The symbol averages the test moments need: b = a + a1·s is the band's symbol (diagonal d_n),
    s_N = Σ_k w_k s_k the noise's; ⟨g⟩ (against T, via s) and ⟨g⟩_y (against the labels, via s_y)."""
    b = aw + a1 * s
    sN = noise_w @ noise_s
    out = {}
    for name, g in (("b2", b * b), ("b", b), ("s", s), ("N", sN)):
        out[name] = float(np.mean(g * s))
        out[name + "_y"] = float(np.mean(g * sy))
    return out


def _test_moments(a1, s2, c, gram, rank, sp):
    r"""m = V m_V and C = C_s I + V C_V Vᵀ of the test sequence under T (docs/theory.md §15.6), with
    D_g = ⟨g s⟩I + ⟨g s_y⟩μμᵀ:  m = (a1/c)ΣWμ + ⟨b s_y⟩μ,
    C = (a1²/c²)ΣWΣWᵀΣ + D_{b²} + (a1²/c)D_s + (s²/c)D_N + (a1/c)(D_bWᵀΣ + ΣWD_b)."""
    from .generalization import span_product

    k = gram.shape[0]
    E00 = np.zeros((k, k))
    E00[0, 0] = 1.0
    P = np.zeros((k, k))
    for j in range(rank):
        P[1 + j, 1 + rank + j] = 1.0
    sig, W, WT = (1.0, E00), (1.0, P), (1.0, P.T.copy())

    def D(g):
        return sp[g], sp[g + "_y"] * E00

    def mul(*ops):
        out = ops[0]
        for o in ops[1:]:
            out = span_product(out, o, gram)
        return out

    def add(*terms):
        return sum(w * t[0] for w, t in terms), sum(w * t[1] for w, t in terms)

    e0 = np.eye(k)[0]
    SW = mul(sig, W)
    m = (a1 / c) * (SW[0] * e0 + SW[1] @ gram @ e0) + sp["b_y"] * e0
    Cs, Cm = add((a1 * a1 / (c * c), mul(sig, W, sig, WT, sig)), (1.0, D("b2")), (a1 * a1 / c, D("s")),
                 (s2 / c, D("N")), (a1 / c, mul(D("b"), WT, sig)), (a1 / c, mul(sig, W, D("b"))))
    return m, Cs, Cm


def _slope_correction(act, p, c, a1, r, s):
    r"""The near-lag slope's correction to C_s (docs/theory.md §15.6): with the local slope
    λ_k = E f'(√p r_k + √(1 + r_k²) g) (Stein: E[f(·)g]/σ, the rule's value at r = 0 subtracted, so that
    δ_k = λ_k − a1 vanishes where r_k = 0) in place of a1 at lag k,

    .. math::  \Delta C_s = \frac{2a_1}p\sum_{k\ne0}\delta_k\Big(\langle s^2\rangle + r_k(s^2)_k + \frac{1+2r_k^2}c\Big)
               + \frac1p\sum_{k,k'\ne0}\delta_k\delta_{k'}\big(r_{k-k'}^2 + r_kr_{k'}r_{k-k'}\big),

    (s²)_k the Fourier coefficients of s², r the lags 0..2L of the law (L = len(r)//2), s its symbol."""
    L = (len(r) - 1) // 2
    rk = r[1:L + 1]
    x, w = np.polynomial.hermite_e.hermegauss(96)
    w = w / w.sum()
    sig = np.sqrt(1 + rk * rk)
    args = np.sqrt(p) * rk[:, None] + sig[:, None] * x[None, :]
    d = (act.numpy(args) * x[None, :]) @ w / sig - (act.numpy(x) * x) @ w
    N = s.size
    omega = 2 * np.pi * np.arange(N) / N
    s2k = np.cos(np.outer(np.arange(1, L + 1), omega)) @ (s * s) / N
    first = (4 * a1 / p) * np.sum(d * (np.mean(s * s) + rk * s2k + (1 + 2 * rk * rk) / c))
    dd = np.r_[d[::-1], d]
    ks = np.r_[-np.arange(L, 0, -1), np.arange(1, L + 1)]
    rr = np.r_[rk[::-1], rk]
    rd = r[np.abs(ks[:, None] - ks[None, :])]
    return float(first + dd @ ((rd * rd + np.outer(rr, rr) * rd) @ dd) / p)


def attention_test_errors(f="tanh", c=0.5, gamma=1.0, n=1000, geometry=None, tokens=None, kmax: int = 8,
                          grid=None, diagonal: str = "f") -> dict:
    r"""Attention's test error of the paper's model (W = I + low rank) under a token law, at finite p
    (docs/theory.md §15.6), with its training error and the pieces it is made of.

    The readout β is fitted on one sequence and tested on a fresh one of the same law:
    :math:`E_{test} = 1 - 2\beta^\top m + \beta^\top C\beta` exactly (§14.1), with the test moments of the
    kernel model of §15.5 on the test sequence (the band B, symbol b(ω), enters C), Σ = I + μμᵀ and
    :math:`D_g = \langle g\,s\rangle I + \langle g\,s_y\rangle\mu\mu^\top`:

    .. math::  m = \frac{a_1}c\Sigma W\mu + \langle b\,s_y\rangle\mu,\qquad
               C = \frac{a_1^2}{c^2}\Sigma W\Sigma W^\top\Sigma + D_{b^2} + \frac{a_1^2}cD_s + \frac{s^2}cD_{s_N}
                   + \frac{a_1}c\big(D_bW^\top\Sigma + \Sigma WD_b\big),

    (s_N the noise's symbol Σ_k w_k s_k; C_s gets the near-lag slope's finite-p correction, §15.6),
    and β's overlaps from the training pencil of
    :func:`attention_errors`: ‖β‖² = F − E_train/γ and Vᵀβ by its Woodbury step. With T = I, b ≡ d and
    every D_g = gΣ: the iid moments of :func:`symattn.generalization.population_moments`.

    Parameters
    ----------
    f, c, gamma, n, geometry, tokens, kmax, grid, diagonal
        As :func:`attention_errors`.

    Returns
    -------
    dict
        ``test`` (E_test), ``train`` (E_A), ``F``, ``norm2`` (‖β‖²), ``overlaps`` (Vᵀβ: βᵀμ, βᵀw_K, βᵀw_Q),
        ``moments`` ((m_V, C_s, C_V): m = V m_V, C = C_s I + V C_V Vᵀ), ``slope`` (the correction in C_s) and
        ``spectra`` (the symbol averages
        ⟨b²s⟩, ⟨b²s_y⟩, ⟨bs⟩, ⟨bs_y⟩, ⟨s²⟩, ⟨ss_y⟩, ⟨s_Ns⟩, ⟨s_Ns_y⟩ under the keys b2, b2_y, b, b_y, s, s_y,
        N, N_y).

    Examples
    --------
    >>> from symattn import Geometry, generalization_error
    >>> r = attention_test_errors("tanh", c=1.0, gamma=1.0, n=500, geometry=Geometry.aligned(1.0))
    >>> ref = generalization_error("tanh", 1.0, 1.0, n=500, geometry=Geometry.aligned(1.0))
    >>> bool(abs(r["test"] / ref - 1) < 1e-3)   # T = I: §14's iid value, less its O(1/n) term (§14.10; 3e-4 here)
    True
    >>> a = attention_test_errors("relu", c=0.5, gamma=0.01, n=500)["test"]
    >>> b = attention_test_errors("relu", c=0.5, gamma=0.01, n=500, tokens={"ar1": 0.9})["test"]
    >>> bool(b > 20 * a)                                # the band explodes it near interpolation
    True
    """
    from .generalization import error_from_readout

    from .model import dimension

    E, F0, o, (act, law, c, gamma, geo, k, s, sy, aw, noise_w, noise_s) = _training_point(
        f, c, gamma, n, geometry, tokens, kmax, grid, diagonal, overlaps=True)
    sp = _spectra(k.a1, s, sy, aw, noise_w, noise_s)
    mV, Cs, CV = _test_moments(k.a1, k.s2, c, geo.gram, geo.rank, sp)
    slope = 0.0 if law.iid_tokens else _slope_correction(act, dimension(n, c), c, k.a1, law.lags(s.size), s)
    moments = (mV, Cs + slope, CV)
    Et, norm2 = error_from_readout(E, F0, gamma, o, moments)
    return {"test": float(Et), "train": E, "F": F0, "norm2": float(norm2), "overlaps": o,
            "moments": moments, "spectra": sp, "slope": slope}
