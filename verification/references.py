r"""Independent references for f(t) = t with a signal (docs/theory.md §7): partial fractions and a contour integral.

For f(t) = t (a1 = ν = 1, s = 0, d = 1) and w = 0, K = XᵀX/p exactly, so
Φ = XK and ΦᵀΦ/n = (XᵀX/n)³/c². With A = XᵀX/n and ν_y the ŷ-weighted spectral measure of A,
whose Stieltjes transform s(z) = ∫ dν_y(x)/(x − z) is the linear-regression formula continued
to complex z (F_LR at γ = −z, docs/theory.md §3),

  F_A(γ) = ∫ dν_y(x) g(x),   g(x) = 1/(x³/c² + γ) = c²/(x³ + c²γ),
  E_A(γ) = γ² ∫ dν_y(x) g(x)².

Two evaluations that share nothing with the attention system:

- partial fractions over the roots r_k = (c²γ)^{1/3} e^{iπ(2k+1)/3} of x³ = −c²γ:
  F_A = c² Σ_k s(r_k)/(3 r_k²); E_A = −γ² dF_A/dγ by mpmath numerical differentiation;
- the contour integral ∫ h dν_y = −(1/2πi) ∮ h(z) s(z) dz around a rectangle that encloses the
  support of ν_y (atom at 0, MP bulk, BBP outlier) but none of the poles r_k of h = γ² g².
"""

from __future__ import annotations

import mpmath


def stieltjes_linear(z, c, snr):
    r"""s(z) = ŷᵀ(XᵀX/n − z)^{-1}ŷ in the limit: F_LR(γ = −z) with the Stieltjes branch.

    m̃ is the root of cγm̃² + (1−c+γ)m̃ − 1 = 0 (γ = −z) with Im m̃ of the sign of Im z (real z < 0:
    the positive root); m = c m̃ + (1−c)/γ; s = m/(1 + γ m2 m m̃).
    """
    z = mpmath.mpmathify(z)
    c, snr = mpmath.mpf(c), mpmath.mpf(snr)
    g = -z
    b = 1 - c + g
    disc = mpmath.sqrt(b * b + 4 * c * g)
    roots = [(-b + disc) / (2 * c * g), (-b - disc) / (2 * c * g)]
    if mpmath.im(z) == 0:
        if mpmath.re(z) >= 0:
            raise ValueError("z on the positive real axis (the support)")
        mt = max(roots, key=lambda r: mpmath.re(r))
    else:
        sign = 1 if mpmath.im(z) > 0 else -1
        mt = max(roots, key=lambda r: sign * mpmath.im(r))
    m = c * mt + (1 - c) / g
    return m / (1 + g * snr * m * mt)


def linear_f_F(c, snr, gamma):
    r"""F_A(γ) = c² Σ_k s(r_k)/(3 r_k²) (partial fractions), real part (the imaginary part cancels)."""
    c, gamma = mpmath.mpf(c), mpmath.mpf(gamma)
    q = c * c * gamma
    roots = [mpmath.cbrt(q) * mpmath.expjpi(mpmath.mpf(2 * k + 1) / 3) for k in range(3)]
    total = sum(stieltjes_linear(r, c, snr) / (3 * r * r) for r in roots)
    return mpmath.re(c * c * total)


def linear_f_E(c, snr, gamma):
    """E_A(γ) = −γ² F_A'(γ) by mpmath numerical differentiation of :func:`linear_f_F`."""
    gamma = mpmath.mpf(gamma)
    return -gamma**2 * mpmath.diff(lambda g: linear_f_F(c, snr, g), gamma)


def _support_top(c, snr):
    c, snr = mpmath.mpf(c), mpmath.mpf(snr)
    top = (1 + mpmath.sqrt(c)) ** 2
    if snr > 0:
        top = max(top, (1 + snr) * (snr + c) / snr)  # BBP outlier of the rank-one spike (bounded above)
    return top


def linear_f_E_contour(c, snr, gamma):
    r"""E_A(γ) = −(1/2πi) ∮ γ² g(z)² s(z) dz (counterclockwise rectangle around the support of ν_y).

    The rectangle runs from x_lo = −q^{1/3}/2 (between the real pole −q^{1/3} and the atom at 0)
    to x_hi = 2·(top of the support) + 1, at heights ±q^{1/3}(√3/2)/2 (below the complex poles
    q^{1/3}e^{±iπ/3}); q = c²γ.
    """
    c, snr, gamma = mpmath.mpf(c), mpmath.mpf(snr), mpmath.mpf(gamma)
    q = c * c * gamma
    r = mpmath.cbrt(q)
    x_lo, x_hi = -r / 2, 2 * _support_top(c, snr) + 1
    ht = r * mpmath.sqrt(3) / 4

    def hfun(z):
        return gamma**2 / (z**3 / (c * c) + gamma) ** 2 * stieltjes_linear(z, c, snr)

    corners = [mpmath.mpc(x_lo, -ht), mpmath.mpc(x_hi, -ht), mpmath.mpc(x_hi, ht), mpmath.mpc(x_lo, ht)]
    total = 0
    for k in range(4):
        z0, z1 = corners[k], corners[(k + 1) % 4]
        # split long sides where the integrand varies fast (near the support)
        n_split = 24 if k in (0, 2) else 4
        pts = [z0 + (z1 - z0) * mpmath.mpf(j) / n_split for j in range(n_split + 1)]
        total += mpmath.quad(hfun, pts)
    return mpmath.re(-total / (2j * mpmath.pi))
