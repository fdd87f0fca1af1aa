r"""The derivations of docs/theory.md §13 (residual, multi-head, softmax), step by step, each checked.

``python -m derivations.variants`` runs every step and prints what it checked; the exit status
is 1 when a step fails. The steps derive in SymPy (or verify on exact draws) what the package
uses, rather than restating it:

1. Residual: I + K has the linearised form of K with d → d + 1 (SymPy), and the package's
   residual system is the attention system under that substitution.
2. Residual with f(t) = t: K = S = XᵀX/p exactly, so M = (I + S)ᵀ XᵀX (I + S)/n has the eigenvalues
   q(λ) = cλ(1 + λ)² of S's (SymPy, on the spectral decomposition), the integrand of
   :func:`symattn.systems.variants.polynomial_integrand`.
3. Heads of the paper's form: Σ_h (I + w_K^h w_Q^hᵀ) = H (I + Σ_h (w_K^h/√H)(w_Q^h/√H)ᵀ) (SymPy
   matrix symbols), and identical heads: concat M = H M_1, sum M = H² M_1 (exact draws).
4. Softmax, exact rewriting: K = D^{-1}((11ᵀ − I)/(n − 1) + εK̂), D = I + diag(εK̂1), with symbolic
   entries for n = 3 (SymPy), and on a draw.
5. Softmax, first order: ‖K − 11ᵀ/n − εK̂P‖/‖εK̂P‖ shrinks with n (measured on draws).
6. Softmax constants: a1 = 1/τ, ν = e^{1/τ²} − 1 by SymPy integration against the Gaussian
   density (against the moment-generating-function form of the package).
7. Concatenated distinct heads (§13.2): the block pencil in x; u_h = K_hx, w_h = YᵀYu_h; t = Yx, v_h = Yu_h,
   h_h = Yw_h, g_h = W_hᵀh_h, l_h = W_ht has (x, x) block (γ + Σ_h K_hᵀYᵀYK_h)^{-1} (concrete matrices), and
   eliminating g, l, v and h_h = ρ̃_h − φ̃_h s + Ψ̃_h t leaves the 2p×2p system of (t, s), s = Σ_h (a_h/c)W_hᵀh_h,
   whose solution equals that of the dense (4H+1)p p-block (random scalar self-energies of the Dyson form).
"""

from __future__ import annotations

import sys

import numpy as np
import sympy as sp


def step_residual():
    from symattn.systems import attention_system
    from symattn.systems.symbols import a1, d
    from symattn.systems.variants import residual_system

    A, I, noise = sp.symbols("A I N")  # stand-ins for XᵀWX/p, the identity and the noise part
    K = a1 * A + (d - a1) * I + noise
    ok = sp.simplify((I + K) - K.subs(d, d + 1)) == 0
    a, r = attention_system(), residual_system()
    ok &= all(sp.simplify(er.rhs - ea.rhs.subs(d, d + 1)) == 0 for ea, er in zip(a.equations, r.equations))
    return ok, "I + K = K|_{d -> d+1}; residual_system = attention_system.subs(d, d + 1)"


def step_polynomial():
    from symattn.systems.symbols import c, gamma, lam
    from symattn.systems.variants import polynomial_integrand

    # on an eigenvector of S = XᵀX/p with eigenvalue λ: XᵀX/n = cS, Φ = X(I + S), M = (I + S) cS (I + S)
    q = (1 + lam) * c * lam * (1 + lam)
    ok = sp.simplify(gamma**2 / (q + gamma) ** 2 - polynomial_integrand(1, 1)) == 0
    rng = np.random.default_rng(0)
    p, n = 7, 12
    X = rng.standard_normal((p, n))
    S = X.T @ X / p
    M = (np.eye(n) + S) @ (X.T @ X) @ (np.eye(n) + S) / n
    ls = np.linalg.eigvalsh(S)
    ok &= bool(np.allclose(np.sort(np.linalg.eigvalsh(M)), np.sort(p / n * ls * (1 + ls) ** 2), atol=1e-9))
    return ok, "M = (I+S) cS (I+S): eigenvalues cλ(1+λ)², symbolically and on a draw"


def step_heads():
    p, H = 4, 3
    wk = [sp.MatrixSymbol(f"k{h}", p, 1) for h in range(H)]
    wq = [sp.MatrixSymbol(f"q{h}", p, 1) for h in range(H)]
    I = sp.Identity(p)
    lhs = sum((I + wk[h] * wq[h].T for h in range(H)), sp.ZeroMatrix(p, p))
    rhs = H * (I + sum(((wk[h] / sp.sqrt(H)) * (wq[h] / sp.sqrt(H)).T for h in range(H)), sp.ZeroMatrix(p, p)))
    ok = sp.simplify((lhs - rhs).as_explicit()) == sp.zeros(p, p)
    from symattn.montecarlo import draw_errors, sample_tokens

    X, y = sample_tokens(20, 8, None, np.random.default_rng(1))
    W = np.eye(8) + 0.3 * np.random.default_rng(2).standard_normal((8, 8))
    g = np.array([0.05, 0.5, 5.0])
    ok &= bool(np.allclose(draw_errors("tanh", X, y, g, heads=[W] * H)["attention"],
                           draw_errors("tanh", X, y, g / H, W=W)["attention"], rtol=1e-9))
    ok &= bool(np.allclose(draw_errors("tanh", X, y, g, heads=[W] * H, readout="sum")["attention"],
                           draw_errors("tanh", X, y, g / H**2, W=W)["attention"], rtol=1e-9))
    return ok, "Σ_h W_h = H W̄ (matrix symbols); identical heads: concat γ/H, sum γ/H² (exact draws)"


def step_softmax_exact():
    n = 3
    tau, p = sp.symbols("tau p", positive=True)
    a = sp.Matrix(n, n, lambda i, j: sp.Symbol(f"a{i}{j}", real=True))
    e = a.applyfunc(lambda t: sp.exp(t / tau))
    K = sp.Matrix(n, n, lambda i, j: 0 if i == j else e[i, j] / sum(e[i, l] for l in range(n) if l != i))
    shift = sp.exp(-1 / (2 * tau**2))
    Khat = sp.Matrix(n, n, lambda i, j: 0 if i == j else (e[i, j] * shift - 1) / sp.sqrt(p))
    eps = sp.sqrt(p) / (n - 1)
    one = sp.ones(n, 1)
    D = sp.eye(n) + sp.diag(*(eps * Khat * one))
    rhs = D.inv() * ((one * one.T - sp.eye(n)) / (n - 1) + eps * Khat)
    ok = all(sp.simplify(x) == 0 for x in (K - rhs))
    return ok, "softmax K = D^{-1}((11ᵀ − I)/(n − 1) + εK̂), D = I + diag(εK̂1): n = 3, symbolic entries"


def step_softmax_first_order():
    from scipy.special import softmax

    out, tau, c = [], 1.0, 0.5
    for n in (200, 800, 3200):
        p = round(c * n)
        rng = np.random.default_rng(n)
        X = rng.standard_normal((p, n))
        A = X.T @ X / np.sqrt(p)
        B = A / tau
        np.fill_diagonal(B, -np.inf)
        K = softmax(B, axis=1)
        Kh = (np.exp(A / tau - 1 / (2 * tau**2)) - 1) / np.sqrt(p)
        np.fill_diagonal(Kh, 0.0)
        eps = np.sqrt(p) / (n - 1)
        P = np.eye(n) - np.ones((n, n)) / n
        lead = eps * Kh @ P
        R = K - np.ones((n, n)) / n - lead
        out.append(np.linalg.norm(R, 2) / np.linalg.norm(lead, 2))
    ok = out[0] > out[1] > out[2]
    return ok, "‖R‖/‖εK̂P‖ at n = 200, 800, 3200 (τ = 1, c = 0.5): " + ", ".join(f"{v:.3g}" for v in out)


def step_softmax_constants():
    from symattn.systems.variants import softmax_kernel_constants, tau

    x = sp.Symbol("x", real=True)
    g = sp.exp(x / tau - 1 / (2 * tau**2)) - 1
    phi = sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)
    a1 = sp.simplify(sp.integrate(x * g * phi, (x, -sp.oo, sp.oo)))
    nu = sp.simplify(sp.integrate(g**2 * phi, (x, -sp.oo, sp.oo)))
    k = softmax_kernel_constants()
    ok = sp.simplify(a1 - k["a1"]) == 0 and sp.simplify(nu - k["nu"]) == 0
    return ok, f"a1 = {a1}, nu = {nu} by Gaussian integration"


def step_concat_pencil():
    rng = np.random.default_rng(11)
    p, n, H, c, gamma = 5, 7, 3, 5 / 7, 0.3
    Y = rng.standard_normal((p, n)) / np.sqrt(n)
    Ws = [rng.standard_normal((p, p)) for _ in range(H)]
    a, sig = rng.uniform(0.5, 1.5, H), rng.uniform(0.2, 1.0, H)
    Ds = [np.diag(rng.standard_normal(n)) for _ in range(H)]
    Ns = [rng.standard_normal((n, n)) / np.sqrt(n) for _ in range(H)]
    names = ["x"] + [f"u{h}" for h in range(H)] + [f"w{h}" for h in range(H)] + ["t"] + [
        f"{k}{h}" for k in "vhgl" for h in range(H)]
    size = {b: (n if b[0] in "xuw" else p) for b in names}
    off = dict(zip(names, np.cumsum([0] + [size[b] for b in names])[:-1]))
    L = np.eye(sum(size.values()))

    def put(r, col, A):
        L[off[r]:off[r] + size[r], off[col]:off[col] + size[col]] += A

    put("x", "x", (gamma - 1) * np.eye(n))
    put("t", "x", -Y)
    for h in range(H):   # the rows of docs/theory.md §13.2
        put("x", f"g{h}", a[h] / c * Y.T)
        put("x", f"w{h}", Ds[h] + sig[h] * Ns[h].T)
        put(f"u{h}", f"l{h}", -a[h] / c * Y.T)
        put(f"u{h}", "x", -(Ds[h] + sig[h] * Ns[h]))
        put(f"w{h}", f"v{h}", -Y.T)
        put(f"v{h}", f"u{h}", -Y)
        put(f"h{h}", f"w{h}", -Y)
        put(f"g{h}", f"h{h}", -Ws[h].T)
        put(f"l{h}", "t", -Ws[h])
    Ks = [a[h] / c * Y.T @ Ws[h] @ Y + Ds[h] + sig[h] * Ns[h] for h in range(H)]
    Q = np.linalg.inv(gamma * np.eye(n) + sum(K.T @ Y.T @ Y @ K for K in Ks))
    ok = bool(np.allclose(np.linalg.inv(L)[:n, :n], Q, rtol=1e-10, atol=1e-12))
    # the p-part: rows t, v_j, h_j: z_r + φ_r s − Ψ_r t − Σ_k χ_rk v_k = ρ_r, Ψ_r = Σ_k (a_k/c) ψ_rk W_k,
    # s = Σ_k (a_k/c) W_kᵀh_k; rows g_k, l_k: g_k = W_kᵀh_k, l_k = W_k t. Dense solve against the (t, s) system.
    phi, psi, chi = rng.standard_normal(2 * H + 1), rng.standard_normal((2 * H + 1, H)), 0.3 * rng.standard_normal(
        (2 * H + 1, H))
    ac = a / c
    Np = 4 * H + 1
    Lp = np.eye(Np * p)
    blk = lambda i, j: (slice(i * p, (i + 1) * p), slice(j * p, (j + 1) * p))  # noqa: E731
    for r in range(2 * H + 1):   # p-row r (t, v_1.., h_1..) ↔ n-partner r (x, u_1.., w_1..)
        for k in range(H):
            Lp[blk(r, 1 + 2 * H + k)] += phi[r] * ac[k] * np.eye(p)       # −S[r, g_k] = φ_r a_k/c
            Lp[blk(r, 1 + 3 * H + k)] -= ac[k] * psi[r, k] * np.eye(p)    # −S[r, l_k]
            Lp[blk(r, 1 + k)] -= chi[r, k] * np.eye(p)                    # −S[r, v_k]
    for k in range(H):
        Lp[blk(1 + 2 * H + k, 1 + H + k)] = -Ws[k].T
        Lp[blk(1 + 3 * H + k, 0)] = -Ws[k]
    rho = rng.standard_normal((2 * H + 1, p))
    z = np.linalg.solve(Lp, np.concatenate([rho.ravel(), np.zeros(2 * H * p)])).reshape(Np, p)
    iu, rows = slice(1, 1 + H), np.r_[0, np.arange(1 + H, 1 + 2 * H)]
    E = np.linalg.inv(np.eye(H) - chi[iu])
    chiE = chi[rows] @ E
    phit, psit = phi[rows] + chiE @ phi[iu], psi[rows] + chiE @ psi[iu]
    rhot = rho[rows] + chiE @ rho[iu]
    Psi = [sum(ac[k] * psit[r, k] * Ws[k] for k in range(H)) for r in range(H + 1)]
    P = sum(ac[j] * Ws[j].T @ Psi[1 + j] for j in range(H))
    Qm = sum(ac[j] * phit[1 + j] * Ws[j].T for j in range(H))
    Bts = np.block([[np.eye(p) - Psi[0], phit[0] * np.eye(p)], [-P, np.eye(p) + Qm]])
    ts = np.linalg.solve(Bts, np.concatenate([rhot[0], sum(ac[j] * Ws[j].T @ rhot[1 + j] for j in range(H))]))
    ok &= bool(np.allclose(ts[:p], z[0], rtol=1e-10, atol=1e-12))
    ok &= bool(np.allclose(ts[p:], sum(ac[k] * Ws[k].T @ z[1 + H + k] for k in range(H)), rtol=1e-10, atol=1e-12))
    return ok, "concat block pencil: (x, x) block = (γ + M)^{-1}; its p-part reduces to the 2p×2p (t, s) system"


STEPS = (step_residual, step_polynomial, step_heads, step_softmax_exact, step_softmax_first_order,
         step_softmax_constants, step_concat_pencil)


def main(argv=None) -> int:
    failed = 0
    for step in STEPS:
        ok, what = step()
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {step.__name__}: {what}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
