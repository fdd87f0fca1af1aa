r"""The latent law of one kernel entry of a low-rank (or full-rank) W, for the Hermite-block constants
(docs/theory.md §12.8, §12.9): deterministic rules instead of sampling latent pairs.

Token i carries (u_i, v_i) ∈ R^r × R^r, jointly Gaussian, Cov(u) = Cov(v) = I, Cov(u_i, v_i) = O = UᵀV
(W = U S Vᵀ); the entry is x_ij = Σ_a ŝ_a u_ia v_ja (ŝ = S/√(pω), Σŝ² = 1). Given the row latent u = u_i,
x_ij is Gaussian in v_j with variance

  s(u) = Σ_a ŝ_a² u_a²,

so every single-entry expectation is an expectation over the law of s (a weighted χ², cumulants
κ_m = 2^{m−1}(m−1)! P_m, P_m = Σ_a ŝ_a^{2m}) of a one-dimensional Gaussian integral, and those that are
linear in t(u) = Σ_a ŝ_a⁴ u_a² (the conditional covariance of x with y3 = Σ ŝ_c³ u_c v_c, and of x² with
Σ ŝ_a² v_a²) are integrals against the tilted measure E[t; s ∈ ds], whose moments follow from
E[t e^{λs}] = E[e^{λs}]·Σ_a ŝ_a⁴/(1 − 2λŝ_a²). :func:`variance_rule` is the N-point Gauss rule of s from
its exact moments (the moments and recurrence in mpmath, Golub–Welsch in float64) with the weights of the tilted measure at the same nodes
(exact for polynomials of degree < N in s against the tilt).

The transposed entry x_ji = Σ ŝ_a u_ja v_ia couples the two tokens through O; :func:`pair_traces` gives the
trace identities of the chaos regressors across the transpose (Mehler's formula per token) and the mean and
covariance of the conditional covariance (q1, q2, q3) of (x_ij, x_ji) given token i.
"""

from __future__ import annotations


import mpmath
import numpy as np

from ...caching import Memo
from .linalg import array_key

__all__ = ["RULE_NODES", "variance_rule", "pair_traces"]

#: nodes of the Gauss rule of the conditional variance s (:func:`variance_rule`)
RULE_NODES = 24
#: digits of the moment arithmetic of :func:`variance_rule` (the Hankel matrix of 2N moments)
RULE_DPS = 120
#: rules already built (content of ŝ and c, nodes → (s, w, ν))
RULES = Memo("general_w.variance_rules", 16)
#: the rules of s alone (content of ŝ, nodes → the Gauss rule of z and its orthonormal polynomials)
BASE_RULES = Memo("general_w.variance_base_rules", 16)


def _power_sums(shat, m):
    """P_k = Σ ŝ^{2k}, k = 0 … m, in mpmath."""
    s2 = [mpmath.mpf(float(x)) ** 2 for x in shat]
    out, cur = [], [mpmath.mpf(1)] * len(s2)
    for _ in range(m + 1):
        out.append(mpmath.fsum(cur))
        cur = [c * x for c, x in zip(cur, s2)]
    return out


def variance_rule(shat, tilt=None, nodes: int | None = None):
    r"""The Gauss rule of s = Σ_a ŝ_a² u_a² (u ~ N(0, I_r)) and the weights of the tilt t = Σ_a c_a u_a².

    E[h(s)] ≈ Σ_k w_k h(s_k) and E[t·h(s)] ≈ Σ_k ν_k h(s_k): both exact for polynomials h of degree
    < 2N and < N respectively. Moments from the cumulants κ_m = 2^{m−1}(m−1)! P_m of the standardised
    variable z = (s − P_1)/√(2P_2), the tilted ones from E[u_a² e^{λs}] = E[e^{λs}]/(1 − 2λŝ_a²), i.e.
    E[t e^{λs}] = E[e^{λs}] Σ_k (2λ)^k C_k, C_k = Σ_a c_a ŝ_a^{2k}; the recurrence from the Cholesky factor of
    the Hankel matrix and ν_k = w_k Σ_{j<N} π_j(z_k) E[t π_j(z)] (π_j orthonormal), at :data:`RULE_DPS` digits;
    cached by the content of ŝ and c (the rule of s by ŝ alone).

    Parameters
    ----------
    shat : numpy.ndarray
        ŝ (Σŝ² = 1 for a normalised W).
    tilt : numpy.ndarray, optional
        c (default ŝ⁴: t = Σ ŝ_a⁴ u_a², the conditional covariance of x and y3 = Σ ŝ_c³ u_c v_c given u).
    nodes : int, optional
        N (default :data:`RULE_NODES`).

    Returns
    -------
    (s, w, nu) : numpy.ndarray
        Nodes, weights (Σw = 1) and tilted weights (Σν = Σ c_a).

    Examples
    --------
    The law of s for ŝ = (1/√2, 1/√2) is χ²_2/2, an exponential of mean 1:

    >>> s, w, nu = variance_rule(np.full(2, 2 ** -0.5), nodes=12)
    >>> round(float(w @ s ** 2), 12), round(float(nu.sum()), 12)
    (2.0, 0.5)
    """
    shat = np.asarray(shat, dtype=float)
    c = shat**4 if tilt is None else np.asarray(tilt, dtype=float)
    N = int(RULE_NODES if nodes is None else nodes)
    rule = RULES.get((array_key(shat), array_key(c), N), lambda: _variance_rule(shat, c, N))
    return tuple(a.copy() for a in rule)


def _variance_rule(shat, c, N):
    """:func:`variance_rule`, computed."""
    base = _base_rule(shat, N)
    with mpmath.workdps(RULE_DPS):
        sig, mu, Pc = base["sig"], base["mu"], base["Pc"]
        # E[t z^m] = m! Σ_k [λ^k] T(λ/σ) · E[z^{m−k}]/(m−k)!,  T(λ) = Σ_k (2λ)^k C_k  (e^{−λ mean/σ} is in E[z^·])
        s2 = [mpmath.mpf(float(x)) ** 2 for x in shat]
        cur = [mpmath.mpf(float(x)) for x in c]
        Ck = []
        for _ in range(N):
            Ck.append(mpmath.fsum(cur))
            cur = [a * b for a, b in zip(cur, s2)]
        tmom = [mpmath.factorial(m) * mpmath.fsum(2**k * Ck[k] / sig**k * mu[m - k] / mpmath.factorial(m - k)
                                                  for k in range(m + 1)) for m in range(N)]
        # E[t π_j(z)] from the monomial coefficients of the orthonormal polynomials
        ct = np.array([float(mpmath.fsum(a * b for a, b in zip(Pc[j], tmom))) for j in range(N)])
    nu = base["w"] * (ct @ base["piz"])
    return base["s"], base["w"], nu


def _base_rule(shat, N):
    """The Gauss rule of z = (s − P_1)/σ (σ² = 2P_2) from its 2N moments: the recurrence coefficients from the
    Cholesky factor of the Hankel matrix (at :data:`RULE_DPS` digits), nodes and weights from the Jacobi matrix
    (float64), the monomial coefficients of the orthonormal polynomials π_j (j < N) and π_j at the nodes."""
    return BASE_RULES.get((array_key(shat), N), lambda: _base_rule_of(shat, N))


def _base_rule_of(shat, N):
    """:func:`_base_rule`, computed."""
    from scipy.linalg import eigh_tridiagonal

    with mpmath.workdps(RULE_DPS):
        P = _power_sums(shat, 2 * N + 2)
        mean, sig = P[1], mpmath.sqrt(2 * P[2])
        # moments of z from its cumulants (κ1 = 0, κ_m = 2^{m−1}(m−1)! P_m/σ^m)
        kap = [mpmath.mpf(0), mpmath.mpf(0)] + [2 ** (m - 1) * mpmath.factorial(m - 1) * P[m] / sig**m
                                                for m in range(2, 2 * N + 1)]
        mu = [mpmath.mpf(1)]
        for n in range(1, 2 * N + 1):
            mu.append(mpmath.fsum(mpmath.binomial(n - 1, k - 1) * kap[k] * mu[n - k] for k in range(1, n + 1)))
        H = mpmath.matrix(N + 1, N + 1)
        for i in range(N + 1):
            for j in range(N + 1):
                H[i, j] = mu[i + j]
        R = mpmath.cholesky(H).T        # H = RᵀR, R upper
        alpha = [R[k, k + 1] / R[k, k] - (R[k - 1, k] / R[k - 1, k - 1] if k else 0) for k in range(N)]
        beta = [R[k + 1, k + 1] / R[k, k] for k in range(N)]
        # π_0 = 1, β_j π_{j+1} = (z − α_j) π_j − β_{j−1} π_{j−1}: monomial coefficients
        Pc = [[mpmath.mpf(1)] + [mpmath.mpf(0)] * (N - 1)]
        prev = [mpmath.mpf(0)] * N
        for j in range(N - 1):
            cur = Pc[-1]
            nxt = [((cur[m - 1] if m else 0) - alpha[j] * cur[m] - (beta[j - 1] * prev[m] if j else 0)) / beta[j]
                   for m in range(N)]
            prev = cur
            Pc.append(nxt)
        a_f, b_f = np.array([float(x) for x in alpha]), np.array([float(x) for x in beta[:N - 1]])
    z, E = eigh_tridiagonal(a_f, b_f)
    piz = np.empty((N, N))                 # π_j(z_k), by the recurrence in float64
    piz[0] = 1.0
    for j in range(N - 1):
        piz[j + 1] = ((z - a_f[j]) * piz[j] - (b_f[j - 1] * piz[j - 1] if j else 0.0)) / b_f[j]
    return {"sig": sig, "mu": mu, "Pc": Pc, "s": float(mean) + float(sig) * z, "w": E[0] ** 2, "piz": piz}


def pair_traces(shat, O) -> dict:
    r"""Trace identities of the transposed entry (x_ij, x_ji) for ŝ and O = UᵀV.

    With M = ŜOŜO, D = Ŝ², K = tr(DODOᵀ) and Q = ODOᵀDO (Mehler's formula per token: E[H_α(u_i)H_β(v_i)] is O
    on the degree-n Hermite tensors, E[H_α(v_j)H_β(u_j)] is Oᵀ):

    - E[x_ij x_ji] = tr M (= ρ = tr W²/‖W‖_F²);
    - E[T33_ij T33_ji] = (tr M)³ + 3 tr M tr M² + 2 tr M³;
    - E[(P31 + P13)_ij (P31 + P13)_ji] = 18 (2K tr M + 4 tr(ŜQŜO));
    - E[T22_ij T22_ji] = (tr M)² + tr M²,  E[(P20 + P02)_ij (P20 + P02)_ji] = 4K;

    (each reduces to E[X²] of :func:`~.block_constants.hermite_block_constants` for O = I), and the mean
    (1, 1, tr M) and covariance 2 tr(A_kΣA_lΣ) of the conditional covariance q = (q1, q2, q3) of
    (x_ij, x_ji) given token i: q1 = uᵀDu, q2 = vᵀDv, q3 = uᵀŜOᵀŜv, w = (u, v) ~ N(0, Σ), Σ = [[I, O], [Oᵀ, I]].

    Examples
    --------
    >>> t = pair_traces(np.full(4, 0.5), np.eye(4))
    >>> round(t["xi"], 12), round(t["t33"], 12), t["q_cov"].shape
    (1.0, 1.875, (3, 3))
    """
    shat = np.asarray(shat, dtype=float)
    O = np.asarray(O, dtype=float)
    D = shat * shat
    SO = shat[:, None] * O                       # ŜO
    M = SO @ SO                                  # ŜOŜO
    M2 = M @ M
    t1, t2, t3 = float(np.trace(M)), float(np.trace(M2)), float(np.sum(M2 * M.T))
    DO = D[:, None] * O
    K = float(np.sum(D[:, None] * O * O * D[None, :]))   # Σ_ab D_a O_ab² D_b
    Q = O @ (D[:, None] * O.T) @ DO              # O D Oᵀ D O
    tq = float(np.sum((shat[:, None] * Q * shat[None, :]) * O.T))   # tr(ŜQŜO)
    # covariance of q: Cov(wᵀAw, wᵀBw) = 2 tr(AΣBΣ) with the block forms of A1, A2, A3 and Σ
    S_ = shat[:, None] * O.T * shat[None, :]     # ŜOᵀŜ
    r = shat.size
    Z = np.zeros((r, r))
    I = np.eye(r)
    Sig = np.block([[I, O], [O.T, I]])
    A = [np.block([[np.diag(D), Z], [Z, Z]]), np.block([[Z, Z], [Z, np.diag(D)]]),
         0.5 * np.block([[Z, S_], [S_.T, Z]])]
    AS = [a @ Sig for a in A]
    cov = np.array([[2 * float(np.sum(AS[k] * AS[l].T)) for l in range(3)] for k in range(3)])
    return {"1": 1.0, "xi": t1, "t33": t1**3 + 3 * t1 * t2 + 2 * t3, "t31": 18 * (2 * K * t1 + 4 * tq),
            "t22": t1**2 + t2, "t20": 4 * K, "q_mean": np.array([float(D.sum()), float(D.sum()), t1]), "q_cov": cov}
