r"""The closed-form solver: the bulk and attention systems with no quadrature (docs/theory.md §5.8).

The numerics (numpy only; mpmath only through the arithmetic context). The SymPy side -- the
integrands reduced to coefficients on the basis, compiled -- is :mod:`symattn.backends.closed_table`,
read through its table ``CLOSED`` (as :mod:`symattn.backends.solver` reads ``KERNELS``); a generated
standalone solver (:mod:`symattn.codegen`) carries this module verbatim with its own printed ``CLOSED``.

Every integral is ∫ g dμ_S = Σ_l q_l M_l + Σ_j r1_j I_{1,j} + Σ_j r2_j I_{2,j}
(:func:`symattn.systems.closed.reduce_integrand`: exact division of the numerator by Δ in SymPy),
with the basis integrals I_{k,j} = ∫ λ^j/Δ^k dμ_S from partial fractions at the roots of Δ and the
Marchenko–Pastur Stieltjes transform of the continuous part, m_c(z), by the branch rule of
:mod:`symattn.systems.closed`; the atom (1 − c)_+ at λ = 0 is added explicitly.

The roots of Δ (a cubic; linear where a1 = 0) come from Cardano's formula in float64 (the
eigenvalues of the companion matrix where that is not accurate to 1e-8), polished by Newton's
method in the working arithmetic. Each value comes with a magnitude
Σ|terms| (the same sums with every term replaced by its modulus): magnitude/|value| is the
amplification of rounding errors (cancellation between the partial fractions, e.g. for small
a1 ≠ 0, where two roots are large). A point is solved here when

- Newton on e = I(e) converges from its start (:func:`_start`: (1/γ, 0, 0), continuation in γ, or
  the float64 solution for mpmath) on the branch (e1 > 0, 0 ≤ e2 ≤ 1, Δ > 0 on the support: no root
  of Δ on [a, b] and Δ((a+b)/2) > 0);
- no root of Δ meets the support (distance below :data:`SUPPORT_DISTANCE`·(b − a));
- the estimated relative error of E_A (amplification × rounding, and a perturbation of the traces
  through the Woodbury step, to first order in float64: :func:`_change_of_E`) is at most
  :data:`CLOSED_ACCEPT` (float64) or 10^{6−dps} (mpmath).

Every other point is left to the quadrature solver (:mod:`symattn.backends.solver`), which has the
continuation in γ, the reduced a1 = d = 0 equation and the damped fixed point; the result's
``closed`` field (``TheoryResult.closed``) says which one solved each point. The Woodbury step is
:func:`symattn.backends.solver.woodbury` (equilibrated; exact rational only where that is ill-conditioned). With
mpmath the closed form runs with :data:`GUARD_DIGITS` more digits than asked for. In float64 it runs
first with the basis in complex128 and keeps the points whose estimated error is at most
:data:`FAST_ACCEPT`; the others run again with the basis in extended precision (numpy's longdouble),
from the complex128 solution.
"""

from __future__ import annotations

import math

import numpy as np

from .closed_reduced import rescue_a1_d_zero, snap_a1
from .closed_table import CLOSED, ClosedKernel
from .context import FloatContext
from .kernels import KERNELS, gram_values
from ..errors import ConvergenceError
from .solver import (BLOCK, REGULAR_MIN_P, WOODBURY_COND, initial_guess, point_arrays, relative_residual,
                     coupling_matrices, kernel_coefficients, precision_estimate, regular_traces, solve_bulk, woodbury)
# the quadrature fallback under its own name (a generated solver defines its own attention_error)
from .solver import attention_error as quadrature_error

#: a root of Δ closer than this fraction of b − a to the support [a, b] sends the point to quadrature
SUPPORT_DISTANCE = 1e-9
#: the largest estimated relative error of E_A accepted from the float64 closed form
CLOSED_ACCEPT = 1e-11
#: float64: the closed form runs first with the basis in complex128 and keeps the points whose estimated
#: relative error is at most this; the others run again with the basis in extended precision
FAST_ACCEPT = 1e-12
#: extra digits of the mpmath closed form
GUARD_DIGITS = 12
NEWTON_MAX_ITER = 40
#: random draws of the perturbation estimates of the closed form's error (:func:`attention_closed`)
DRAWS = 2


def _unit(ctx):
    """The unit roundoff of the context's arithmetic as a float (float64: eps/2; mpmath: 10^−dps)."""
    return ctx.eps / 2 if ctx.dps is None else ctx.eps


def _guarded(ctx):
    """The context the closed form works in: ``ctx`` (float64), or its arithmetic with
    :data:`GUARD_DIGITS` more digits."""
    return ctx if ctx.dps is None else type(ctx)(ctx.dps + GUARD_DIGITS)


# ============================================================================ the basis
def moment_coefficients(k: int):
    """The integer coefficients of M_k as a polynomial in 1/c, highest power first: the Narayana numbers
    N(k, j) = C(k, j) C(k, j − 1)/k, j = k..1 (M_k = Σ_j N(k, j) c^{1−j}; M_0 = 1).

    Examples
    --------
    >>> moment_coefficients(3)          # M_3 = 1/c² + 3/c + 1
    (1, 3, 1)
    """
    if k == 0:
        return (1,)
    return tuple(math.comb(k, j) * math.comb(k, j - 1) // k for j in range(k, 0, -1))


def mp_moments(ctx, rc, L: int):
    """M_0..M_{L−1} of μ_S at the points √c = ``rc`` (P,): array (P, L)."""
    cinv = 1 / rc**2
    out = []
    for k in range(L):
        v = 0 * cinv
        for cf in moment_coefficients(k):
            v = v * cinv + cf
        out.append(v)
    return np.stack(out, axis=-1)


def stieltjes_continuous(ctx, zc, rc):
    r"""m_c(z) = ∫ dμ_cont(λ)/(λ − z) and m_c'(z) by the branch rule (docs/theory.md §5.8).

    ``zc`` complex (P, n), ``rc`` = √c (P, 1). Returns (m_c, m_c', √D).
    """
    c_ = rc**2
    a = (1 - 1 / rc) ** 2
    b = (1 + 1 / rc) ** 2
    s = c_ * ctx.sqrt(zc - a) * ctx.sqrt(zc - b)
    u = np.where(np.asarray(c_ < 1, dtype=bool), 1 - c_, c_ - 1)
    cm = np.where(np.asarray(c_ < 1, dtype=bool), c_, 0 * c_ + 1)
    X = u - c_ * zc
    plus, minus = X + s, X - s
    direct = ctx.abs_float(plus) >= ctx.abs_float(minus)
    with np.errstate(all="ignore"):
        m = np.where(direct, plus / (2 * zc), 2 * c_ * cm / minus)
        md = -m * (m + c_) / s
    return m, md, s


def _cubic_float(A, B, C):
    """The roots (P, 3) of λ³ − Aλ² − Bλ − C (float64, real coefficients) by Cardano's formula (the real
    root from the cube root without cancellation, or the trigonometric form for three real roots), and
    the mask of the points where each root's relative residual |p(z)|/Σ|terms| is at most 1e-8 (the
    Newton steps of :func:`_roots` then finish them)."""
    a, b, c_ = -A, -B, -C                      # λ³ + aλ² + bλ + c
    s = a / 3
    p = b - a * s                              # t³ + pt + q, λ = t − a/3
    q = (2 * s * s - b) * s + c_
    Q, R = p / 3, -q / 2
    D = Q * Q * Q + R * R
    z = np.empty(A.shape + (3,), dtype=complex)
    one = D > 0
    sq = np.sqrt(np.where(one, D, 0.0))
    S = np.cbrt(R + np.where(R >= 0, sq, -sq))  # |R ± √D| without cancellation
    T = np.where(S != 0, -Q / np.where(S != 0, S, 1.0), 0.0)
    re, im = -(S + T) / 2, np.sqrt(3) / 2 * (S - T)
    r = np.sqrt(np.maximum(-Q, 0.0))
    th = np.arccos(np.clip(np.where(one | (r == 0), 0.0, R / np.where(r == 0, 1.0, r * r * r)), -1, 1)) / 3
    for k in range(3):
        trig = 2 * r * np.cos(th - 2 * np.pi * k / 3)
        z[:, k] = np.where(one, (S + T) if k == 0 else re + (1j if k == 1 else -1j) * im, trig) - s
    with np.errstate(all="ignore"):
        val = ((z + a[:, None]) * z + b[:, None]) * z + c_[:, None]
        az = np.abs(z)
        size = ((az + np.abs(a)[:, None]) * az + np.abs(b)[:, None]) * az + np.abs(c_)[:, None]
        fine = np.all(np.abs(val) <= 1e-8 * size, axis=1) & np.all(np.isfinite(z), axis=1)
    return z, fine


def _roots(ctx, L3, L2, L1, L0, linear, extended=True):
    """The roots (P, n) of L3 λ³ + L2 λ² + L1 λ + L0 (or L1 λ + L0), in the context's complex numbers."""
    if linear:
        zl = ctx.to_complex(-L0 / L1, extended)
        return zl[:, None] if L0.ndim == 1 else zl
    f = [np.asarray(ctx.to_float(v), dtype=float) for v in (L3, L2, L1, L0)]
    P = f[0].shape[0]
    comp = np.zeros((P, 3, 3))
    with np.errstate(all="ignore"):
        comp[:, 0, 0], comp[:, 0, 1], comp[:, 0, 2] = -f[1] / f[0], -f[2] / f[0], -f[3] / f[0]
    comp[:, 1, 0] = comp[:, 2, 1] = 1
    good = np.all(np.isfinite(comp), axis=(1, 2))
    zf = np.full((P, 3), np.nan + 0j)
    with np.errstate(all="ignore"):
        zf[good], fine = _cubic_float(comp[good, 0, 0], comp[good, 0, 1], comp[good, 0, 2])
    hard = np.nonzero(good)[0][~fine]   # Cardano not accurate: the eigenvalues of the companion matrix
    if hard.size:
        zf[hard] = np.linalg.eigvals(comp[hard])
    zc = ctx.to_complex(zf, extended)
    L3, L2, L1, L0 = (v[:, None] for v in (L3, L2, L1, L0))
    steps = 2 if ctx.dps is None else 2 + int(np.ceil(np.log2(max(ctx.dps, 16) / 15.0)))
    with np.errstate(all="ignore"):
        for _ in range(steps):
            p = ((L3 * zc + L2) * zc + L1) * zc + L0
            dp = (3 * L3 * zc + 2 * L2) * zc + L1
            zc = zc - p / dp
    return zc


class Basis:
    """The basis integrals over the continuous part of μ_S at P points, ``cont`` (P, slots), their
    magnitudes ``mag``, the atom (1 − c)_+ (P,), and ``ok`` (no root of Δ meets the support; finite),
    and the roots of Δ (P, n)."""

    def __init__(self, cont, mag, atom, ok, roots):
        self.cont, self.mag, self.atom, self.ok, self.roots = cont, mag, atom, ok, roots


class _Dual:
    """value + ε·derivative (ε² = 0) on arrays: the D0-derivative of the basis, I_{2,j} = −∂I_{1,j}/∂D0."""

    __slots__ = ("v", "d")
    __array_ufunc__ = None   # numpy arrays defer to the reflected operations

    def __init__(self, v, d):
        self.v, self.d = v, d

    # a plain operand (no derivative) takes the short forms: no products with a zero derivative
    def __add__(self, o):
        if isinstance(o, _Dual):
            return _Dual(self.v + o.v, self.d + o.d)
        return _Dual(self.v + o, self.d)

    __radd__ = __add__

    def __sub__(self, o):
        if isinstance(o, _Dual):
            return _Dual(self.v - o.v, self.d - o.d)
        return _Dual(self.v - o, self.d)

    def __rsub__(self, o):
        return _Dual(o - self.v, -self.d)

    def __neg__(self):
        return _Dual(-self.v, -self.d)

    def __mul__(self, o):
        if isinstance(o, _Dual):
            return _Dual(self.v * o.v, self.d * o.v + self.v * o.d)
        return _Dual(self.v * o, self.d * o)

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, _Dual):
            q = self.v / o.v
            return _Dual(q, (self.d - q * o.d) / o.v)
        return _Dual(self.v / o, self.d / o)

    def __rtruediv__(self, o):
        q = o / self.v
        return _Dual(q, -(q * self.d) / self.v)


def _divided_basis(m, z, c_, U, K):
    r"""h_j[z1, z2, z3] (j = 0, 1, 2), h_j(z) = ∫ λ^j/(λ − z) dμ_c, without cancellation between the roots.

    From z m² + (cz − U) m + c·min(1, c) = 0 (U = |1 − c|, K = max(1, c)):

    - m[z_i, z_k] = −m_i(m_i + c)/(z_k(m_i + m_k + c) − U),
      m[z1, z2, z3] = m1(m1 + c)(m1 + m3 + c + z2 m[z2, z3])/(D12 D13), D_ik = z_k(m_i + m_k + c) − U;
    - h_j = φ_j(m): h_0 = m, h_1 = K m/(m + c), h_2 = 1 + KU/(m + c) − cK²/(m + c)² (the quadratic
      eliminates z, and the cancellation of z h_{j−1} + M_{j−1} at large |z| with it);
    - (φ∘m)[z1, z2, z3] = φ[m1, m3]·m[z1, z2, z3] + φ[m1, m2, m3]·m[z1, z2]·m[z2, z3].

    All arguments are :class:`_Dual`.
    """
    m1, m2, m3 = m
    z1, z2, z3 = z
    D23 = z3 * (m2 + m3 + c_) - U
    m23 = -(m2 * (m2 + c_)) / D23
    D12 = z2 * (m1 + m2 + c_) - U
    D13 = z3 * (m1 + m3 + c_) - U
    m12 = -(m1 * (m1 + c_)) / D12
    m123 = m1 * (m1 + c_) * (m1 + m3 + c_ + z2 * m23) / (D12 * D13)
    A1, A2, A3 = m1 + c_, m2 + c_, m3 + c_
    h1 = K * c_ * (A2 * m123 - m12 * m23) / (A1 * A2 * A3)
    # φ_2 = 1 + KU ψ1 − cK² ψ2 with ψ1 = 1/A, ψ2 = 1/A²
    p1_13 = -1 / (A1 * A3)
    p1_123 = 1 / (A1 * A2 * A3)
    A13 = A1 * A3
    p2_13 = -(A1 + A3) / (A13 * A13)
    A123 = A1 * A2 * A3
    p2_123 = (A1 * A2 + A1 * A3 + A2 * A3) / (A123 * A123)
    f13 = K * U * p1_13 - c_ * K * K * p2_13
    f123 = K * U * p1_123 - c_ * K * K * p2_123
    h2 = f13 * m123 + f123 * m12 * m23
    return [m123, h1, h2]


def basis(ctx, rc, b0v, b1v, D0v, D1v, moments: int, linear: bool, extended: bool = True,
          orderings: int | None = None) -> Basis:
    r"""M_l (l < ``moments``), I_{1,j}, I_{2,j} (j < deg Δ) at Δ = D0 + D1λ + λ(b1λ + b0)² (docs/theory.md §5.8).

    Cubic Δ = L3 ∏(λ − z_i): I^c_{1,j} = h_j[z1, z2, z3]/L3, the second divided difference of
    h_j(z) = ∫ λ^j/(λ − z) dμ_c at the roots (written in m_c without cancellation:
    :func:`_divided_basis`; the same as the partial fractions Σ_i h_j(z_i)/Δ'(z_i), which cancel
    where the roots are close together relative to their distance from the support). Linear
    Δ = L1(λ − z): I^c_{1,0} = m_c(z)/L1. Then I^c_{2,j} = −∂I^c_{1,j}/∂D0 (dual numbers, with
    ∂z_i/∂D0 = −1/Δ'(z_i)), and the atom: I_{k,0} = I^c_{k,0} + (1 − c)_+/D0^k. The magnitude is
    |value| plus the change between two orderings of the roots, divided by the unit roundoff.
    All arguments (P,). ``extended=False``: float64 in complex128 rather than numpy's longdouble
    (Newton's iterates before the last steps; mpmath ignores it). ``orderings``: 1 (no ordering term
    in the magnitudes) or 2; None: 2 where ``extended`` or mpmath, else 1.

    Examples
    --------
    >>> import numpy as np
    >>> from symattn.backends.context import FloatContext
    >>> one = np.ones(1)
    >>> B = basis(FloatContext(), one, 0 * one, one, one, 0 * one, 2, False)   # Δ = 1 + λ³ at c = 1
    >>> B.cont.shape, bool(0 < B.cont[0, 2] < 1)                                # ∫ dμ_S/(1 + λ³)
    ((1, 8), True)
    """
    P = rc.shape[0]
    if ctx.dtype is float and P > BLOCK:   # blocks of points: the temporaries of the divided differences stay in cache
        parts = [basis(ctx, *(v[lo:lo + BLOCK] for v in (rc, b0v, b1v, D0v, D1v)), moments, linear, extended, orderings)
                 for lo in range(0, P, BLOCK)]
        return Basis(*(np.concatenate([getattr(B, k) for B in parts]) for k in ("cont", "mag", "atom", "ok", "roots")))
    n = 1 if linear else 3
    if ctx.dtype is float and extended:  # float64: the basis in extended precision (numpy's longdouble), rounded at the end
        rc, b0v, b1v, D0v, D1v = (np.asarray(v, dtype=np.longdouble) for v in (rc, b0v, b1v, D0v, D1v))
    L3, L2, L1, L0 = b1v**2, 2 * b0v * b1v, D1v + b0v**2, D0v
    zc = _roots(ctx, L3, L2, L1, L0, linear, extended)
    rcc = rc[:, None]
    c_ = rcc**2
    below = np.asarray(ctx.to_float(c_), dtype=float) < 1
    with np.errstate(all="ignore"):
        m, md, s = stieltjes_continuous(ctx, zc, rcc)
        if linear:
            dD = L1[:, None] + 0 * zc
        else:
            # Δ'(z_i) = L3 ∏_{k≠i}(z_i − z_k), not Horner: where two roots are close (c = 20, d ≠ 0,
            # small γ) Horner's Δ'(z̃_i) at the rounded roots is off by 1e-13 relative and I_{2,j} by 1e-10;
            # the product is the exact derivative for the roots as computed (backward stable)
            dD = L3[:, None] * (zc - np.roll(zc, 1, axis=1)) * (zc - np.roll(zc, 2, axis=1))
        dz = -1 / dD
        Uc = np.where(below, 1 - c_, c_ - 1)[:, 0]
        Kc = np.where(below, 0 * c_ + 1, c_)[:, 0]
        cc = c_[:, 0]
        if linear:
            mu = _Dual(m[:, 0], md[:, 0] * dz[:, 0])
            hs = [[mu / L1]]
        else:
            order = np.argsort(np.asarray(ctx.to_float(ctx.abs_float(zc)), dtype=float), axis=1)
            take = lambda A, o: np.take_along_axis(A, o, axis=1)  # noqa: E731
            hs = []
            # the second ordering only for the magnitudes (extended: the values that are kept)
            nord = (2 if extended or ctx.dtype is object else 1) if orderings is None else orderings
            for perm in ((0, 1, 2), (1, 0, 2))[:nord]:
                o = order[:, list(perm)]
                zs, ms, ds, dzs = take(zc, o), take(m, o), take(md * dz, o), take(dz, o)
                zd = [_Dual(zs[:, i], dzs[:, i]) for i in range(3)]
                md_ = [_Dual(ms[:, i], ds[:, i]) for i in range(3)]
                hs.append([h / L3 for h in _divided_basis(md_, zd, cc, Uc, Kc)])
        I1 = [ctx.real(h.v) for h in hs[0]]
        I2 = [ctx.real(-h.d) for h in hs[0]]
        if len(hs) > 1:
            err1 = [ctx.abs_float(a.v - b.v) for a, b in zip(hs[0], hs[1])]
            err2 = [ctx.abs_float(a.d - b.d) for a, b in zip(hs[0], hs[1])]
        else:
            err1 = [0 * ctx.abs_float(h.v) for h in hs[0]]
            err2 = [0 * ctx.abs_float(h.d) for h in hs[0]]
        imag = np.maximum.reduce([ctx.abs_float(ctx.imag(h.v)) for h in hs[0]] + [ctx.abs_float(ctx.imag(h.d)) for h in hs[0]])
    u = _unit(ctx)
    Mcont = mp_moments(ctx, rc, max(moments, 3))
    Mcont[:, 0] = np.where(below[:, 0], c_[:, 0], 0 * c_[:, 0] + 1)
    dtype = ctx.dtype if ctx.dtype is object else (np.longdouble if extended else float)
    cont = np.empty((P, moments + 2 * n), dtype=dtype)
    cont[:, :moments] = Mcont[:, :moments]
    for j in range(n):
        cont[:, moments + j] = I1[j]
        cont[:, moments + n + j] = I2[j]
    atom = np.where(below[:, 0], 1 - rc**2, 0 * rc)
    mag = np.abs(np.asarray(ctx.to_float(cont), dtype=float))
    for j in range(n):
        mag[:, moments + j] += (np.asarray(err1[j], dtype=float) + np.asarray(imag, dtype=float)) / u
        mag[:, moments + n + j] += (np.asarray(err2[j], dtype=float) + np.asarray(imag, dtype=float)) / u
    # a root of Δ on (or at rounding distance from) the support [a, b]
    a = np.asarray(ctx.to_float((1 - 1 / rc) ** 2), dtype=float)[:, None]
    b = np.asarray(ctx.to_float((1 + 1 / rc) ** 2), dtype=float)[:, None]
    zr = np.asarray(ctx.to_float(ctx.real(zc)), dtype=float)
    zi = np.asarray(ctx.to_float(ctx.imag(zc)), dtype=float)
    dist = np.hypot(np.maximum(np.maximum(a - zr, zr - b), 0), zi)
    ok = np.all(np.isfinite(zr) & np.isfinite(zi) & (dist > SUPPORT_DISTANCE * (b - a)), axis=1)
    ok &= np.all(np.isfinite(mag), axis=1)
    if ctx.dtype is float:
        cont, atom = cont.astype(float), atom.astype(float)
    return Basis(cont=cont, mag=mag, atom=atom, ok=ok, roots=zc)


def _delta_mid_positive(ctx, rc, b0v, b1v, D0v, D1v):
    """Δ((a + b)/2) > 0 and Δ(0) = D0 > 0."""
    lm = 1 + 1 / rc**2
    val = D0v + D1v * lm + lm * (b1v * lm + b0v) ** 2
    return (np.asarray(ctx.to_float(val), dtype=float) > 0) & (np.asarray(ctx.to_float(D0v), dtype=float) > 0)


def integrate(ctx, kernel: ClosedKernel, B: Basis, args, P, continuous=False, both=False, magnitudes=True):
    """∫ g_i dμ_S (or over the continuous part alone) for the items of ``kernel`` (P, items), and
    their magnitudes Σ|coefficient·basis| + (1 − c)_+|g_i(0)| (P, items). The atom's g_i(0) is
    evaluated from the integrand itself (its partial fractions would cancel at λ = 0). ``both``: the
    values and magnitudes with the atom, then those of the continuous part (one evaluation).
    ``magnitudes=False`` (float64): the magnitudes are not computed (zeros)."""
    dtype = ctx.dtype
    if dtype is object:   # mpmath: only the nonzero coefficients (each product is a Python-level operation)
        vals = ctx.convert(np.zeros((P, kernel.items)))
        mags = np.zeros((P, kernel.items))
        if kernel.layout:
            for (i, s_), v in zip(kernel.layout, kernel.fn(*args)):
                v = np.broadcast_to(v, (P,))
                vals[:, i] = vals[:, i] + v * B.cont[:, s_]
                mags[:, i] += np.abs(np.asarray(ctx.to_float(v), dtype=float)) * B.mag[:, s_]
    elif not (kernel.layout and P):
        vals, mags = np.zeros((P, kernel.items)), np.zeros((P, kernel.items))
    else:   # the nonzero coefficients (nnz, block) times their basis integrals, summed per item
        order, slots, runs = kernel.plan
        add = np.add.reduce   # np.sum without its Python wrapper (many short calls)
        vt, mt = np.zeros((kernel.items, P)), np.zeros((kernel.items, P))
        contT = np.ascontiguousarray(B.cont.T)
        magT = np.ascontiguousarray(B.mag.T) if magnitudes else None
        for lo in range(0, P, BLOCK):   # blocks of points: the (nnz, block) temporaries stay in cache
            at = slice(lo, min(P, lo + BLOCK))
            out = kernel.fn(*(x[at] if np.ndim(x) else x for x in args))
            V = np.empty((len(order), at.stop - lo))
            for r_, k in enumerate(order):   # a printed kernel: constants as scalars
                V[r_] = out[k]
            W = V * contT[slots, at]
            if magnitudes:
                np.abs(V, out=V)
                V *= magT[slots, at]
            for i, a_, b_ in runs:   # contiguous runs of rows (np.add.reduceat is slow along axis 0)
                add(W[a_:b_], axis=0, out=vt[i, at])
                if magnitudes:
                    add(V[a_:b_], axis=0, out=mt[i, at])
        vals, mags = vt.T, mt.T
    cont = (vals, mags)
    if not continuous and kernel.atom_fn is not None and np.any(np.asarray(ctx.to_float(B.atom), dtype=float) != 0):
        vals, mags = vals.copy(order="K"), mags.copy(order="K")   # the atom's items only (the others gain (1 − c)_+·0)
        for i, v in zip(kernel.atom_items, kernel.atom_fn(*args)):
            term = B.atom * np.broadcast_to(v, (P,))
            vals[:, i] = vals[:, i] + term
            if magnitudes or dtype is object:
                mags[:, i] += np.abs(np.asarray(ctx.to_float(term), dtype=float))
    return (vals, mags) + cont if both else (vals, mags)


# ============================================================================ the solver
class Points:
    """The parameters c, γ, a1, s², d of the closed form at P points, (P,) arrays in the context's arithmetic
    (``P``, and ``rc`` = √c); :func:`symattn.backends.closed_reduced.snap_a1` may set a1 to 0 in place.

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> p = Points(FloatContext(), 0.25, [1.0, 2.0], 0.6, 0.03, 0.0)
    >>> p.P, p.rc.tolist()
    (2, [0.5, 0.5])
    """

    def __init__(self, ctx, c, gamma, a1v, s2v, dv):
        self.P, (self.c, self.gamma, self.a1, self.s2, self.d) = point_arrays(ctx, c, gamma, a1v, s2v, dv)
        self.rc = ctx.sqrt(self.c)


def _intermediates_e(p, e, idx):
    rc, g, a, s, dd = p.rc[idx], p.gamma[idx], p.a1[idx], p.s2[idx], p.d[idx]
    b1v = rc * a
    b0v = rc * (dd - a) - s * e[:, 2]
    w = g + s * e[:, 1]
    return b0v, b1v, w, w * s * e[:, 0]


def _basis_e(ctx, p, e, idx, kern, extended=True):
    b0v, b1v, D0v, D1v = _intermediates_e(p, e, idx)
    B = basis(ctx, p.rc[idx], b0v, b1v, D0v, D1v, kern.moments, kern.n == 1, extended=extended)
    B.ok &= _delta_mid_positive(ctx, p.rc[idx], b0v, b1v, D0v, D1v)
    return B


def _eargs(p, e, idx):
    return (e[:, 0], e[:, 1], e[:, 2], p.rc[idx], p.gamma[idx], p.a1[idx], p.s2[idx], p.d[idx])


def newton_map(ctx, p, e, idx, kern, extended=True):
    """The bulk map in closed form at e (P, 3) for the points ``idx`` of ``p`` (:class:`Points`) with the closed
    kernel ``kern`` (``CLOSED[modules][("newton", linear)]``): I(e) (P, 3), its magnitude (P, 3), ∫∂g/∂e
    (P, 3, 3) and the admissibility mask (docs/theory.md §5.8).

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> p = Points(ctx, 0.5, [1.0], 0.6, 0.03, 0.0)
    >>> I, mag, J, ok = newton_map(ctx, p, np.array([[1.0, 0.0, 0.0]]), np.arange(1), CLOSED["numpy"][("newton", False)])
    >>> I.shape, J.shape, ok.tolist()
    ((1, 3), (1, 3, 3), [True])
    """
    B = _basis_e(ctx, p, e, idx, kern, extended)
    vals, mags = integrate(ctx, kern, B, _eargs(p, e, idx), len(idx))
    ef = np.asarray(ctx.to_float(e), dtype=float)
    ok = B.ok & (ef[:, 0] > 0) & np.all(np.isfinite(np.asarray(ctx.to_float(vals), dtype=float)), axis=1)
    return vals[:, :3], mags[:, :3], vals[:, 3:12].reshape(-1, 3, 3), ok


def inverse3(M):
    """The inverses of the 3×3 matrices ``M`` (..., 3, 3) as adjugate/determinant, in the arithmetic of its entries
    (float64, complex, or mpmath numbers in an object array): a few array passes, no batched LAPACK call, whose
    per-matrix overhead dominates at 3×3. A singular matrix gives inf/NaN entries (float) or raises (mpmath).

    Examples
    --------
    >>> M = np.array([[[2.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 4.0]]])
    >>> bool(np.allclose(inverse3(M)[0] @ M[0], np.eye(3)))
    True
    """
    a, b, c, d, e, f, g, h, i = (M[..., k, l] for k in range(3) for l in range(3))
    C = np.empty_like(M)
    C[..., 0, 0], C[..., 0, 1], C[..., 0, 2] = e * i - f * h, c * h - b * i, b * f - c * e
    C[..., 1, 0], C[..., 1, 1], C[..., 1, 2] = f * g - d * i, a * i - c * g, c * d - a * f
    C[..., 2, 0], C[..., 2, 1], C[..., 2, 2] = d * h - e * g, b * g - a * h, a * e - b * d
    return C / (a * C[..., 0, 0] + b * C[..., 1, 0] + c * C[..., 2, 0])[..., None, None]


def _residual(ctx, e, I, A):
    return relative_residual(ctx, e, I, A)


#: continuation in γ: a group of at least this many points with one (c, a1, s², d) first solves
#: every CONTINUATION_STRIDE-th point in γ order, and the others start from the interpolation
CONTINUATION_MIN = 16
CONTINUATION_STRIDE = 8
#: ... and interpolates only between converged coarse points at most this far apart in ln γ (farther:
#: the interpolation is no better than (1/γ, 0, 0), and Newton from it can wander for many steps)
CONTINUATION_MAX_GAP = 2.5
#: float64: Newton's iterates use the complex128 basis until the residual is below this
FAST_SWITCH = 1e-12
#: a coarse set of fewer points than this starts from (1/γ, 0, 0) rather than from a coarser level
#: (each level costs a few Newton evaluations of fixed overhead, and the small ones are all overhead)
CONTINUATION_DIRECT = 256


def _start(ctx, p: Points, idx, linear: bool):
    r"""Newton's starting points at ``idx``: (1/γ, 0, 0) (as the quadrature solver), or better:

    - mpmath: the float64 closed-form solution, where it converges (error ~1e-13: two or three
      Newton steps to 40 digits);
    - float64, a group of at least :data:`CONTINUATION_MIN` points with the same (c, a1, s², d):
      continuation -- every :data:`CONTINUATION_STRIDE`-th point in γ is solved first (by this
      function again, so the levels nest), and each point between two converged ones starts from
      the interpolation of (log e1, e2, e3) in log γ.
    """
    e = initial_guess(ctx, p.gamma[idx])
    if ctx.dtype is object:
        fctx = FloatContext()
        pf = Points(fctx, *(np.asarray(ctx.to_float(x), dtype=float) for x in (p.c, p.gamma, p.a1, p.s2, p.d)))
        with np.errstate(all="ignore"):
            ef, _, conv, _, _ = solve_bulk_closed(fctx, pf, idx, linear, extended=False)
        e[conv] = ctx.convert(ef[conv])
        return e
    if len(idx) < CONTINUATION_MIN:
        return e
    key = np.stack([np.asarray(x[idx], dtype=float) for x in (p.c, p.a1, p.s2, p.d)], axis=1)
    if np.all(key == key[0]):   # one (c, a1, s², d): a γ sweep
        group = np.zeros(len(idx), dtype=int)
    else:
        _, group = np.unique(key, axis=0, return_inverse=True)
        group = group.reshape(-1)
    lg = np.log(np.asarray(p.gamma[idx], dtype=float))
    order = np.lexsort((lg, group))
    sections = np.split(order, np.nonzero(np.diff(group[order]))[0] + 1)
    coarse = [sec[np.r_[0:len(sec):CONTINUATION_STRIDE, len(sec) - 1]] for sec in sections
              if len(sec) >= CONTINUATION_MIN]
    if not coarse:
        return e
    sub = np.unique(np.concatenate(coarse))
    direct = None if sub.size >= CONTINUATION_DIRECT else initial_guess(ctx, p.gamma[idx[sub]])
    ec, _, conv, _, _ = solve_bulk_closed(ctx, p, idx[sub], linear, extended=False, start=direct)   # starts only
    got = np.full((len(idx), 3), np.nan)
    got[sub[conv]] = ec[conv]
    for sec in sections:
        if len(sec) < CONTINUATION_MIN:
            continue
        at = sec[np.isfinite(got[sec, 0])]
        cs = sec[np.r_[0:len(sec):CONTINUATION_STRIDE, len(sec) - 1]]
        # between two coarse points that both converged
        pos = np.searchsorted(lg[cs], lg[sec], side="right")
        left, right = cs[np.clip(pos - 1, 0, len(cs) - 1)], cs[np.clip(pos, 0, len(cs) - 1)]
        inside = np.isfinite(got[left, 0]) & np.isfinite(got[right, 0]) & (lg[right] - lg[left] <= CONTINUATION_MAX_GAP)
        if at.size < 2 or not inside.any():
            continue
        fine = sec[inside]
        x, xs = lg[fine], lg[at]
        e[fine, 0] = np.exp(np.interp(x, xs, np.log(got[at, 0])))
        e[fine, 1] = np.interp(x, xs, got[at, 1])
        e[fine, 2] = np.interp(x, xs, got[at, 2])
    e[sub[conv]] = ec[conv]
    return e


def _newton(ctx, p, e, idx, kern, extended, target, tol, polish=False):
    """Damped Newton on e = I(e) from ``e`` until the relative residual is at most ``target``, or stalls
    below ``tol``; returns (e, I, A, ∫∂g/∂e, residual, dead mask, iterations). ``polish``: from a solution
    of lower precision (residual below ``tol``), one full step, kept if it does not raise the residual
    above ``tol``, and no more."""
    eye = ctx.convert(np.eye(3))[None]
    e = e.copy()
    I, A, JI, ok = newton_map(ctx, p, e, idx, kern, extended)
    with np.errstate(all="ignore"):
        res = np.where(ok, _residual(ctx, e, I, A), np.inf)
    active = np.nonzero(ok & (res > target))[0]
    dead = ~ok
    done = np.zeros(len(res), dtype=bool)
    iterations = 0
    for _ in range(NEWTON_MAX_ITER):
        if not active.size:
            break
        iterations += 1
        with np.errstate(all="ignore"):
            rhs = e[active] - I[active]
            if ctx.dtype is float:   # 3×3: the explicit inverse (Newton corrects the step's rounding)
                step = np.einsum("pij,pj->pi", inverse3(eye - JI[active]), rhs)
            else:
                step = ctx.solve(eye - JI[active], rhs)
        t = 1.0
        pending, pstep = active, step
        for _ in range(30):
            trial = e[pending] - ctx.convert(t) * pstep
            I_t, A_t, JI_t, ok_t = newton_map(ctx, p, trial, idx[pending], kern, extended)
            with np.errstate(all="ignore"):
                r_t = np.where(ok_t, _residual(ctx, trial, I_t, A_t), np.inf)
            near = res[pending] <= tol   # converged: only full steps that improve (else rounding level)
            halved = (r_t <= tol) if polish else (r_t < 0.5 * res[pending])
            better = ok_t & np.where(near, halved, (r_t < 1e4 * res[pending]) | (r_t <= tol))
            if polish:
                done[pending[near]] = True
            took = pending[better]
            e[took], I[took], A[took], JI[took] = trial[better], I_t[better], A_t[better], JI_t[better]
            res[took] = r_t[better]
            done[pending[~better & near]] = True
            keep = ~better & ~near
            pending, pstep = pending[keep], pstep[keep]
            if not pending.size:
                break
            t *= 0.5
        dead[pending] = True
        active = np.nonzero(~dead & ~done & (res > target))[0]
    return e, I, A, JI, res, dead, iterations


def solve_bulk_closed(ctx, p: Points, idx, linear: bool, extended: bool = True, start=None):
    """Newton on e = I(e) in closed form at the points ``idx`` (one a1 = 0 group), from :func:`_start`,
    and from (1/γ, 0, 0) again where that start did not converge (float64: complex128 iterates until the
    residual is below :data:`FAST_SWITCH`, then extended precision, from the start again where
    complex128 failed; ``extended=False``: complex128 throughout); ``start`` (P, 3), optional: the start
    instead of :func:`_start` (rows of NaN: (1/γ, 0, 0)); returns (e, residual, converged mask, error bound
    of e (P, 3), Newton iterations)."""
    default = initial_guess(ctx, p.gamma[idx])
    if start is None:
        start = _start(ctx, p, idx, linear)
    else:
        miss = ~np.isfinite(np.asarray(ctx.to_float(start), dtype=float)[:, 0])
        start = start.copy()
        start[miss] = default[miss]
    e, res, conv, de, its = _solve_from(ctx, p, idx, linear, start, extended)
    moved = np.any(np.asarray(ctx.to_float(start), dtype=float) != np.asarray(ctx.to_float(default), dtype=float),
                   axis=1)
    retry = np.nonzero(~conv & moved)[0]   # a warm start that led astray
    if retry.size:
        e2, res2, conv2, de2, its2 = _solve_from(ctx, p, idx[retry], linear, default[retry], extended)
        e[retry], res[retry], conv[retry], de[retry] = e2, res2, conv2, de2
        its += its2
    return e, res, conv, de, its


def _solve_from(ctx, p: Points, idx, linear: bool, e, extended: bool = True):
    """:func:`solve_bulk_closed` from the start ``e``."""
    kern = CLOSED[ctx.lambdify_modules][("newton", linear)]
    iterations = 0
    extended = extended or ctx.dtype is object
    if ctx.dtype is float and extended:
        e0 = e
        e, _, _, _, _, dead, iterations = _newton(ctx, p, e, idx, kern, False, FAST_SWITCH, FAST_SWITCH)
        e[dead] = e0[dead]   # complex128 lost its way (e.g. e1 ~ 1/γ ~ 1e6): again in extended precision
    # aim past the tolerance (the error of e is the residual times the condition of I − ∫∂g/∂e)
    e, I, A, JI, res, dead, its = _newton(ctx, p, e, idx, kern, extended, float(ctx.tol) * 1e-3, float(ctx.tol),
                                          polish=ctx.dtype is float and extended)
    iterations += its
    ef = np.asarray(ctx.to_float(e), dtype=float)
    conv = (res <= float(ctx.tol)) & (ef[:, 1] > -1e-9) & (ef[:, 1] < 1 + 1e-9) & ~dead
    # the error of e that the error of the map I (u·magnitude) causes: |(I − ∫∂g/∂e)^{-1}| u·A
    u = _unit(ctx)
    with np.errstate(all="ignore"):
        Jf = np.eye(3)[None] - np.asarray(ctx.to_float(JI), dtype=float)
        ok = np.all(np.isfinite(Jf), axis=(1, 2))
        de = np.full(ef.shape, np.inf)
        if ok.any():
            Jinv = np.full(Jf.shape, np.nan)
            with np.errstate(all="ignore"):   # singular: not finite, and the point is not converged
                Jinv[ok] = inverse3(Jf[ok])
            scale = np.maximum(np.asarray(ctx.to_float(A[ok]), dtype=float), np.abs(ef[ok]))
            err = scale * np.maximum(u, np.asarray(res[ok], dtype=float)[:, None])
            de[ok] = np.einsum("pij,pj->pi", np.abs(Jinv[ok]), err)
    conv &= np.all(np.isfinite(de), axis=1)
    return e, res, conv, de, iterations


def closed_traces(ctx, p: Points, e, idx, linear: bool, bump=None, noise=None, extended: bool = True,
                  magnitudes=None):
    r"""T (P, 9), U (P, 3), Ṫ (P, 9) in closed form (the same as
    :func:`symattn.backends.solver.regular_traces`, without quadrature), the amplification of
    rounding in them (P,) and the mask of points whose roots stay off the support.

    ``noise``: a random generator; every basis integral is then perturbed by its error estimate
    u·magnitude (:func:`attention_closed` measures the effect on E_A). ``extended=False``: the float64
    basis in complex128 (both orderings of the roots in the magnitudes), not numpy's longdouble.

    ``magnitudes`` (dict), optional: without ``noise``, receives the basis magnitudes ``"B"`` (P, slots);
    with ``noise`` (float64), the magnitudes of the unperturbed points (rows matching ``idx``) that set the
    perturbation, so that the perturbed basis needs neither the second ordering of the roots nor
    magnitudes of its own (and the amplification returned is then 0)."""
    mods = ctx.lambdify_modules
    n = len(idx)
    eye = ctx.convert(np.eye(3))[None]
    rc, g, a, s, dd = (v[idx] for v in (p.rc, p.gamma, p.a1, p.s2, p.d))
    w = g + s * e[:, 1]
    Pv = w * e[:, 0]
    b0v, b1v = rc * (dd - a) - s * e[:, 2], rc * a
    rargs = (Pv, e[:, 1], e[:, 2], rc, g, a, s, dd)
    tang = CLOSED[mods][("tangent", linear)]
    kern = CLOSED[mods][("regular-kernels", linear)]
    L = max(tang.moments, kern.moments)
    quick = noise is not None and magnitudes is not None and ctx.dtype is float   # perturbed, from given magnitudes
    B = basis(ctx, rc, b0v, b1v, w, s * Pv, L, linear, extended=extended, orderings=1 if quick else 2)
    if quick:
        B.mag = magnitudes["B"]
    elif magnitudes is not None:
        magnitudes["B"] = B.mag
    B = _perturbed(ctx, B, noise)
    Bt = _sub_basis(B, L, tang.moments, tang.n)
    Bk = _sub_basis(B, L, kern.moments, kern.n)
    tv, tm = integrate(ctx, tang, Bt, rargs, n, magnitudes=not quick)
    J = tv[:, :9].reshape(-1, 3, 3)
    x_dot = ctx.solve(eye - J, tv[:, 9:12])
    if bump is not None:
        x_dot = bump(x_dot)
    kargs = rargs + (x_dot[:, 0], x_dot[:, 1], x_dot[:, 2])
    kv, km, kvc, kmc = integrate(ctx, kern, Bk, kargs, n, both=True, magnitudes=not quick)
    T, T_dot = kv[:, :9].copy(), kv[:, 11:20].copy()
    amp = np.zeros(n) if quick else np.maximum(_amp(ctx, kv, km), _amp(ctx, tv, tm))
    small = np.nonzero(np.asarray(ctx.to_float(Pv), dtype=float) < REGULAR_MIN_P)[0]
    if small.size:  # e1 bounded: the (e1, e2, e3) form (as in regular_traces)
        sub = idx[small]
        es = e[small]
        newton = CLOSED[mods][("newton", linear)]
        sens = CLOSED[mods][("sensitivity", linear)]
        ek = CLOSED[mods][("resolvent-kernels", linear)]
        L2 = max(newton.moments, sens.moments, ek.moments)
        b0s, b1s, D0s, D1s = _intermediates_e(p, es, sub)
        Be = _perturbed(ctx, basis(ctx, rc[small], b0s, b1s, D0s, D1s, L2, linear, extended=extended, orderings=2),
                        noise)
        eargs = _eargs(p, es, sub)
        nv, nm = integrate(ctx, newton, _sub_basis(Be, L2, newton.moments, newton.n), eargs, small.size)
        sv, sm = integrate(ctx, sens, _sub_basis(Be, L2, sens.moments, sens.n), eargs, small.size)
        e_dot = ctx.solve(eye - nv[:, 3:12].reshape(-1, 3, 3), sv)
        if bump is not None:
            e_dot = bump(e_dot)
        ev, em = integrate(ctx, ek, _sub_basis(Be, L2, ek.moments, ek.n),
                           eargs + (e_dot[:, 0], e_dot[:, 1], e_dot[:, 2]), small.size)
        T[small], T_dot[small] = ev[:, :9], ev[:, 9:]
        amp[small] = np.maximum(amp[small], np.maximum(_amp(ctx, ev, em), _amp(ctx, nv, nm)))
        B.ok[small] &= Be.ok
    c_ = rc**2
    above = np.where(np.asarray(ctx.to_float(c_), dtype=float) > 1, c_ - 1, 0 * c_)
    U = np.empty((n, 3), dtype=T.dtype)
    U[:, 0] = kvc[:, 9] - above / c_
    U[:, 1] = -e[:, 1] / c_
    U[:, 2] = kv[:, 10]
    if not quick:
        amp = np.maximum(amp, _amp(ctx, kvc[:, 9:10], kmc[:, 9:10]))
    return T, U, T_dot, amp, B.ok


def _perturbed(ctx, B: Basis, noise):
    """``B`` with each basis integral moved by r·u·magnitude, r ~ U(−1, 1) (``noise`` a generator; None: ``B``)."""
    if noise is None:
        return B
    u = _unit(ctx)
    r = noise.uniform(-1, 1, B.mag.shape) * u * B.mag
    return Basis(cont=B.cont + ctx.convert(r), mag=B.mag, atom=B.atom, ok=B.ok, roots=B.roots)


def _sub_basis(B: Basis, L: int, moments: int, n: int) -> Basis:
    """The basis restricted to the first ``moments`` moments (``B`` has L)."""
    keep = list(range(moments)) + list(range(L, L + 2 * n))
    return Basis(cont=B.cont[:, keep], mag=B.mag[:, keep], atom=B.atom, ok=B.ok, roots=B.roots)


def _floats(ctx, *xs):
    """The arrays ``xs`` as float64 arrays."""
    return tuple(np.asarray(ctx.to_float(x), dtype=float) for x in xs)


def _amp(ctx, vals, mags):
    """max over items of magnitude/|value| (1 where both vanish)."""
    v = np.abs(np.asarray(ctx.to_float(vals), dtype=float))
    with np.errstate(all="ignore"):
        r = np.where(mags == 0, 1.0, mags / v)
    r = np.where(np.isnan(r), np.inf, r)
    return np.max(r, axis=1) if r.ndim == 2 else r


def attention_closed(ctx, c, gamma, a1v, s2v, dv, gram, rank: int, coefficients=None):
    r"""E_A = −γ² F'(γ) and F at P points in closed form (docs/theory.md §5.8, §6).

    Returns a dict of (P,) arrays: ``E``, ``F``, ``e`` (P, 3), ``residual``, ``precision`` (the
    estimated relative error of E_A) and ``ok`` (solved here; the other points are NaN and are for
    the quadrature solver: :func:`attention_points`).

    Examples
    --------
    >>> import numpy as np
    >>> from symattn.backends.context import FloatContext
    >>> out = attention_closed(FloatContext(), 0.5, [0.1, 1.0], 0.6, 0.03, 0.0, np.eye(3), 1)
    >>> bool(out["ok"].all()), bool(out["E"][0] < out["E"][1])
    (True, True)
    """
    work = _guarded(ctx)
    with work:
        p = Points(work, c, gamma, a1v, s2v, dv)
        P = p.P
        dtype = ctx.dtype
        E = np.full(P, np.nan, dtype=dtype)
        F = np.full(P, np.nan, dtype=dtype)
        e_all = np.full((P, 3), np.nan, dtype=dtype)
        res_all = np.full(P, np.inf)
        prec = np.full(P, np.inf)
        ok_all = np.zeros(P, dtype=bool)
        iterations = 0
        a1f = snap_a1(work, p, np.asarray(work.to_float(p.a1), dtype=float), float(ctx.tol))   # he3: a1 ~ 1e-32 is 0
        gram_w = work.convert(gram)
        for linear in (False, True):
            idx = np.nonzero((a1f == 0) == linear)[0]
            if not idx.size:
                continue
            todo, warm = idx, None
            # float64: complex128 first; the points it does not solve to FAST_ACCEPT again in extended precision
            for extended in ((False, True) if work.dps is None else (True,)):
                idx = todo
                if not idx.size:
                    break
                with np.errstate(all="ignore"):
                    e, res, conv, de, its = solve_bulk_closed(work, p, idx, linear, extended=extended,
                                                              start=None if warm is None else warm[idx])
                iterations += its
                # Newton's complex128 solutions (not the rescued ones below) start the second pass
                warm = np.full((P, 3), np.nan)
                warm[idx[conv]] = np.asarray(work.to_float(e[conv]), dtype=float)
                if linear:   # a1 = d = 0 where Newton failed: the reduced equation in closed form (closed_reduced.py)
                    kern0 = CLOSED[work.lambdify_modules][("newton", True)]
                    e, res, conv, de = rescue_a1_d_zero(work, p, idx, e, res, conv, de,
                                                        lambda e_, at: newton_map(work, p, e_, at, kern0))
                if not conv.any():
                    continue
                idx, e, res, de = idx[conv], e[conv], res[conv], de[conv]
                with np.errstate(all="ignore"):
                    mg = {}
                    T, U, T_dot, amp, okb = closed_traces(work, p, e, idx, linear, extended=extended, magnitudes=mg)
                    if np.ndim(gram_w) == 3 and np.shape(gram_w)[0] == P:   # one Gram matrix per point
                        gq = gram_w[idx]
                    else:
                        gq = np.broadcast_to(gram_w, (len(idx),) + np.shape(gram_w)[-2:])
                    A = kernel_coefficients(work, p.a1[idx], gq, rank) if coefficients is None else coefficients[idx]
                    args = (A, gq, rank, p.rc[idx])
                    kw = dict(a1=p.a1[idx] if coefficients is None else None)
                    store = {}
                    Fv, Fd = wb = woodbury(work, T, T_dot, *args, centred=U, store=store, **kw)
                    kappa = wb.kappa
                    if work.dps is None:
                        kw["exact"] = store["exact"] = kappa == 0
                    else:   # the first-order changes of E (_change_of_E) need only the float64 solve, and κ_s
                        kw["exact"] = None
                        Tf, Tdf, Af, gf, rcf, Uf = _floats(work, T, T_dot, A, gq, p.rc[idx], U)
                        a1_ = None if kw["a1"] is None else _floats(work, kw["a1"])[0]
                        kappa = woodbury(FloatContext(), Tf, Tdf, Af, gf, rank, rcf, a1=a1_, centred=Uf,
                                         store=store, rational=False).kappa
                        # where float64 is too ill-conditioned, the perturbed mpmath solves themselves
                        store["exact"] = ~(kappa * np.finfo(float).eps < WOODBURY_COND)
                    Ev = -(p.gamma[idx] ** 2) * Fd
                    est = _precision(work, T, U, T_dot, args, kw, Ev, p.gamma[idx], res, store=store)
                    # the Woodbury solve's own rounding, κ_s times the unit of its arithmetic (mpmath: where the
                    # float64 κ_s is not finite, the perturbed mpmath solves of _change_of_E measure it)
                    est = np.maximum(est, kappa * np.finfo(float).eps if work.dps is None else
                                     np.where(np.isfinite(kappa), kappa, 0.0) * 10.0 ** -work.dps)
                    rng = np.random.default_rng(2024)
                    E0 = np.abs(np.asarray(work.to_float(Ev), dtype=float))
                    # the basis integrals and e moved by their error estimates, DRAWS draws in one batch
                    rep = np.tile(np.arange(len(idx)), DRAWS)
                    ep = e[rep] + work.convert(np.tile(de, (DRAWS, 1)) * rng.uniform(-1, 1, (len(rep), 3)))
                    Tp, Up, Tdp, _, _ = closed_traces(work, p, ep, idx[rep], linear, noise=rng, extended=extended,
                                                   magnitudes={"B": mg["B"][rep]})
                    dE = np.abs(_change_of_E(work, Tp, Up, Tdp, (Tp - T[rep], Up - U[rep], Tdp - T_dot[rep]), args, kw,
                                             Ev, p.gamma[idx], rep, store))
                    dE = np.max(dE.reshape(DRAWS, -1), axis=0)
                    est = np.maximum(est, np.where(dE == 0, 0.0, 2 * dE / E0))
                good = okb & np.isfinite(est)
                limit = 10.0 ** (6 - ctx.dps) if ctx.dps is not None else CLOSED_ACCEPT if extended else FAST_ACCEPT
                good &= est <= limit
                sel = idx[good]
                E[sel], F[sel], e_all[sel] = Ev[good], Fv[good], e[good]
                res_all[sel], prec[sel], ok_all[sel] = np.asarray(res[good], float), est[good], True
                todo = todo[~ok_all[todo]]
    if ctx.dtype is object:   # back to the result's digits (NaN stays a float)
        with ctx:
            conv = np.frompyfunc(lambda v: v if isinstance(v, float) else ctx.scalar(v), 1, 1)
            E, F, e_all = (np.asarray(conv(x), dtype=object) for x in (E, F, e_all))
    return {"E": E, "F": F, "e": e_all, "residual": res_all, "precision": prec, "ok": ok_all,
            "iterations": iterations}


def _precision(ctx, T, U, T_dot, args, kw, E, g, res, draws: int = 2, store=None):
    """κ·max(16u, residual), κ from perturbing T, U, Ṫ by relative δ = 2⁸u (as
    :func:`symattn.backends.solver.precision_estimate`); ``store``: the unperturbed Woodbury solve
    (:func:`~symattn.backends.solver.woodbury`), from which :func:`_change_of_E` takes the change of E_A to first order
    rather than solving the perturbed systems."""
    u = _unit(ctx)
    delta = u * 2.0**8
    rng = np.random.default_rng(12345)
    E0 = np.abs(np.asarray(ctx.to_float(E), dtype=float))
    kappa = np.zeros(E0.shape)

    def bump(x):
        return x * (1 + ctx.convert(delta) * ctx.convert(rng.uniform(-1, 1, np.shape(x))))

    P = len(E0)
    rep = np.tile(np.arange(P), draws)   # the draws in one batch
    with np.errstate(all="ignore"):
        Tr, Tdr, Ur = T[rep], T_dot[rep], U[rep]
        Tp, Tdp, Up = bump(Tr), bump(Tdr), bump(Ur)
        dE = np.abs(_change_of_E(ctx, Tp, Up, Tdp, (Tp - Tr, Up - Ur, Tdp - Tdr), args, kw, E, g, rep, store))
        k = np.where(dE == 0, 0.0, dE / (E0[rep] * delta))
    k = np.where(np.isnan(k), np.inf, k)
    kappa = np.maximum(kappa, np.max(k.reshape(draws, P), axis=0))
    floor = np.maximum(16 * u, np.asarray(res, dtype=float))
    return np.maximum(kappa, 1.0) * floor


def _change_of_E(ctx, Tp, Up, Tdp, change, args, kw, E, g, rep, store=None):
    r"""E_A at the perturbed traces ``Tp``, ``Up``, ``Tdp`` (rows ``rep`` of the unperturbed points)
    minus E_A there (``E``), as floats.

    With ``store`` (the unperturbed solve of :func:`~symattn.backends.solver.woodbury` in float64; for mpmath, of the
    traces rounded to float64, the first-order terms being needed to a few digits only): to first order in the
    perturbations ``change`` = (ΔT, ΔU, ΔṪ). Γ is affine in the traces, so ΔΓ = Γ̇(ΔT, ΔU) and
    ΔΓ̇ = Γ̇(ΔṪ) (the nonzero entries of the ``gamma-dot`` kernel, no cancellation); Δv = −M⁻¹ĈΔΓv and,
    Γ̇ symmetric, ΔE = −γ²(2(Γ̇v)·Δv + v·ΔΓ̇v) = −γ²(v·ΔΓ̇v − 2z·ΔΓv) with the adjoint z = ĈᵀM⁻ᵀΓ̇v
    (computed once, kept in ``store``). The perturbations are 2⁸u relative or below, so the terms of
    second order are below rounding; no new solve and no product ĈΓ. Points without a stored inverse
    (the exact rational step of :func:`~symattn.backends.solver.woodbury`): the perturbed solve itself.
    """
    n = len(rep)
    A, gram, rank, rc = args
    dE = np.full(n, np.nan)
    full = np.ones(n, dtype=bool)
    if store is not None and "z" in store:
        Pn = store["v"].shape[0]
        ok = np.all(np.isfinite(store["v"]), axis=1) & np.all(np.isfinite(store["z"]), axis=1)
        if "exact" in store:   # solved by the exact step: the stored float64 solve is not the value
            ok &= ~store["exact"]
        full = ~ok[rep]
        dT, dU, dTd, rcf = _floats(ctx, *change, rc)   # first order: float64 is exact enough (mpmath too)
        kdot = KERNELS["numpy"][f"gamma-dot-r{rank}"]
        entries = kdot.entries
        g2 = np.asarray(g, dtype=float) ** 2
        # the rows of ``rep`` in blocks of the stored points in order (the draws): no gathered copies of
        # the (P, N, N) arrays
        blocks = ([slice(k * Pn, (k + 1) * Pn) for k in range(n // Pn)]
                  if Pn and n % Pn == 0 and np.array_equal(rep, np.tile(np.arange(Pn), n // Pn)) else [rep])
        for bl in blocks:
            at = slice(None) if isinstance(bl, slice) else bl   # the stored points of these rows
            v, z = store["v"][at], store["z"][at]
            gv = gram_values(_floats(ctx, gram[at])[0])
            vT = np.ascontiguousarray(v.T)
            N = len(vT)
            dGv, vdGdv = np.zeros((N, len(v))), np.zeros(len(v))
            if entries:   # ΔΓv and v·ΔΓ̇v from the nonzero entries of Γ̇ (no dense (P, N, N) matrices)
                vals_T = kdot.nonzero(*np.concatenate([dT[bl, :6], dU[bl]], axis=1).T, *gv, rcf[at])
                vals_Td = kdot.nonzero(*dTd[bl].T, *gv, rcf[at])
                for (i, j), x, xd in zip(entries, vals_T, vals_Td):
                    dGv[i] += x * vT[j]
                    vdGdv += xd * (vT[i] * vT[j])
            dE[bl] = -g2[at] * (vdGdv - 2 * np.einsum("ip,pi->p", dGv, z))
    if full.any():
        sub = np.nonzero(full)[0]
        r_ = rep[sub]
        argsp = (A[r_], gram[r_], rank, np.asarray(rc)[r_])
        kwp = {k_: (None if v_ is None else v_[r_]) for k_, v_ in kw.items()}
        _, Fd = woodbury(ctx, Tp[sub], Tdp[sub], *argsp, centred=Up[sub], **kwp)
        dE[sub] = np.asarray(ctx.to_float(-(g[r_] ** 2) * Fd - E[r_]), dtype=float)
    return dE


#: accepted values of ``method`` (:func:`symattn.theory.solve`), and the default
METHODS = ("closed", "quadrature")
DEFAULT = "closed"


def isolated(run, P: int, errors: str, failures: dict) -> dict:
    """``run(idx)`` (a dict of arrays over the points ``idx``) over all P points, the per-point fallback of
    :func:`symattn.solve` and of generated solvers: with ``errors='nan'`` a ConvergenceError splits the points
    in halves until the failing ones are isolated, which get NaN and an entry in ``failures``
    (index → (reason, error)); ``errors='raise'``: the error propagates. Returns the dict of (P,) arrays.

    Examples
    --------
    >>> def run(idx):
    ...     if 2 in idx:
    ...         raise ConvergenceError("no convergence at this point")
    ...     return {"x": idx * 1.0}
    >>> failures = {}
    >>> isolated(run, 4, "nan", failures)["x"].tolist(), sorted(failures)
    ([0.0, 1.0, nan, 3.0], [2])
    """
    out = {}

    def store(idx, vals):
        for key, v in vals.items():
            if key not in out:
                arr = np.asarray(v)
                out[key] = np.full((P,) + arr.shape[1:], np.nan, dtype=object if arr.dtype == object else float)
            out[key][idx] = v

    def go(idx):
        try:
            vals = run(idx)
        except ConvergenceError as err:
            if errors == "raise":
                raise
            if len(idx) == 1:
                failures[int(idx[0])] = (err.reason, err)
                return
            half = len(idx) // 2
            go(idx[:half])
            go(idx[half:])
            return
        store(idx, vals)

    go(np.arange(P))
    return out


def attention_points(ctx, c, gamma, a1v, s2v, dv, gram, rank: int, point_info=None, method: str = "closed"):
    r"""E_A, F, e, residual, precision and the method at P points: the closed form where it applies
    (:func:`attention_closed`), the quadrature solver elsewhere (docs/theory.md §5.8).

    Returns a dict of (P,) arrays as :func:`symattn.theory.solve` needs them, with ``closed``
    (1.0 where the closed form solved the point, 0.0 where quadrature did) and ``iterations``
    (Newton iterations of the closed form plus those of the quadrature solver).

    Examples
    --------
    >>> import numpy as np
    >>> from symattn.backends.context import FloatContext
    >>> out = attention_points(FloatContext(), 0.5, [1e-3, 1.0], 0.6, 0.03, 0.0, np.eye(3), 1)
    >>> out["closed"].tolist()
    [1.0, 1.0]
    """
    P, (cv, gv) = point_arrays(ctx, c, gamma)
    dtype = ctx.dtype
    dvec = np.broadcast_to(np.asarray(dv, dtype=dtype), (P,)) if np.ndim(dv) else None
    out = {"E": np.full(P, np.nan, dtype=dtype), "F": np.full(P, np.nan, dtype=dtype),
           "e": np.full((P, 3), np.nan, dtype=dtype), "residual": np.zeros(P), "precision": np.zeros(P),
           "closed": np.zeros(P), "iterations": 0}
    todo = np.arange(P)
    if method == "closed":
        got = attention_closed(ctx, cv, gv, a1v, s2v, dv if dvec is None else dvec, gram, rank)
        ok = got["ok"]
        for key in ("E", "F", "e", "residual", "precision"):
            out[key][ok] = got[key][ok]
        out["closed"][ok] = 1.0
        out["iterations"] += got["iterations"]
        todo = np.nonzero(~ok)[0]
    if todo.size:
        d_sub = dv if dvec is None else np.asarray(dvec[todo], dtype=dtype)
        g_sub = gram[todo] if np.ndim(gram) == 3 and np.shape(gram)[0] == P else gram   # one Gram matrix per point
        E, F, sol = quadrature_error(ctx, cv[todo], gv[todo], a1v, s2v, d_sub, g_sub, rank, point_info=point_info)
        out["E"][todo], out["F"][todo], out["e"][todo] = E, F, sol.e
        out["residual"][todo] = np.asarray(sol.residual, float)
        out["precision"][todo] = precision_estimate(ctx, sol, g_sub, rank, E)
        out["iterations"] += sol.iterations
    return out


def solution_quantities(ctx, c, gamma, a1v, s2v, dv, e, gram, rank: int):
    r"""The traces, their γ-derivatives and the Gram quantities at a solved bulk point (docs/theory.md §6.3–§6.5).

    At the bulk solution ``e`` (P, 3) of :func:`symattn.theory.solve` (its ``bulk``): the nine traces
    T_j = ∫ λ^j {q, k, r} dμ_S, their γ-derivatives Ṫ_j, the centred traces U = (T_KQK^(1) − 1,
    T_KQK^(2) − 1/c, T_KQK^(3) − (1 + 1/c)/c) in closed form (:func:`closed_traces`, in mpmath with
    :data:`GUARD_DIGITS` more digits, as the solver), by quadrature (:func:`symattn.backends.solver.regular_traces`
    on the quadrature solver's solution) where a root of Δ meets the support; then the Gram matrix Γ, its
    γ-derivative Γ̇ (both written in U) and the coupling Ĉ of the Woodbury step (§6.4, §6.5), from which the
    solver's F = (Γv)_0, F' = vᵀΓ̇v, v = (I + ĈΓ)^{-1}e_0.

    Returns a dict of arrays in ``ctx``'s numbers: ``T`` (P, 9), ``U`` (P, 3), ``T_dot`` (P, 9), ``Gamma``,
    ``Gamma_dot``, ``C_hat`` (P, N, N) with N = 6 + 4r; rows of points whose ``e`` is not finite are NaN.

    Examples
    --------
    >>> import numpy as np
    >>> from symattn.backends.context import FloatContext
    >>> ctx = FloatContext()
    >>> out = attention_closed(ctx, 0.5, 1.0, 0.6, 0.03, 0.0, np.eye(3), 1)
    >>> q = solution_quantities(ctx, 0.5, 1.0, 0.6, 0.03, 0.0, out["e"], np.eye(3), 1)
    >>> bool(abs(q["T"][0, 3] * np.sqrt(0.5) - out["e"][0, 2]) < 1e-14)      # e3 = √c T_QK^(1)
    True
    >>> q["Gamma"].shape
    (1, 10, 10)
    """
    P, (cv, gv, av, sv, dvv) = point_arrays(ctx, c, gamma, a1v, s2v, dv)
    dtype = ctx.dtype
    e = np.asarray(e, dtype=dtype).reshape(P, 3)
    N = 6 + 4 * rank
    out = {"T": np.full((P, 9), np.nan, dtype=dtype), "U": np.full((P, 3), np.nan, dtype=dtype),
           "T_dot": np.full((P, 9), np.nan, dtype=dtype)}
    finite = np.all(np.isfinite(np.asarray(ctx.to_float(e), dtype=float)), axis=1)
    work = _guarded(ctx)
    todo = np.zeros(P, dtype=bool)
    with work:
        p = Points(work, cv, gv, av, sv, dvv)
        ew = work.convert(e)
        a1f = snap_a1(work, p, np.asarray(work.to_float(p.a1), dtype=float), float(ctx.tol))
        for linear in (False, True):
            idx = np.nonzero(((a1f == 0) == linear) & finite)[0]
            if not idx.size:
                continue
            with np.errstate(all="ignore"):
                T, U, T_dot, _, ok = closed_traces(work, p, ew[idx], idx, linear, extended=True)
            for key, v in (("T", T), ("U", U), ("T_dot", T_dot)):
                out[key][idx[ok]] = v[ok]
            todo[idx[~ok]] = True
    if ctx.dtype is object:   # back to the result's digits
        with ctx:
            rnd = np.frompyfunc(lambda v: +v, 1, 1)
            out = {k: np.asarray(rnd(v), dtype=object) for k, v in out.items()}
    if todo.any():   # a root of Δ on the support: the quadrature solver's solution (docs/theory.md §5.8)
        idx = np.nonzero(todo)[0]
        with ctx:
            sol = solve_bulk(ctx, cv[idx], gv[idx], av[idx], sv[idx], dvv[idx])
            T, U, T_dot = regular_traces(ctx, sol)
        out["T"][idx], out["U"][idx], out["T_dot"][idx] = T, U, T_dot
    with ctx:
        g = ctx.convert(np.asarray(gram))
        g = np.broadcast_to(g, (P,) + np.shape(g)[-2:])
        A = kernel_coefficients(ctx, av, g, rank)
        Tc = np.concatenate([out["T"][:, :6], out["U"]], axis=1)
        Gam, Gdot, Ch = coupling_matrices(KERNELS[ctx.lambdify_modules], Tc, out["T_dot"], A, g, rank,
                                           ctx.sqrt(cv), P, dtype)
    out.update(Gamma=Gam, Gamma_dot=Gdot, C_hat=Ch)
    assert Gam.shape[-1] == N
    return out
