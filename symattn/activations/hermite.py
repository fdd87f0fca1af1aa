r"""Gaussian expectations and Hermite coefficients: numeric (mpmath, numpy) and exact (SymPy).

This module is the arithmetic under :mod:`symattn.activations` (layer 1, docs/theory.md §1.2). It
knows nothing about activations as objects, only about a function ``f`` of one real
variable and the standard Gaussian ξ ~ N(0, 1) with density φ(x) = e^{-x²/2}/√(2π).

Conventions (docs/theory.md §1.2): the normalised probabilists' Hermite polynomials are
h_k = He_k/√(k!), which are orthonormal under φ, and the Hermite coefficients are

.. math::  a_k = E[f(ξ)\,He_k(ξ)]/\sqrt{k!} = E[f(ξ)\,h_k(ξ)], \qquad ν = \sum_{k\ge1} a_k^2 .

Three independent ways of computing them live here:

- :func:`gaussian_moments` -- doubly exponential (tanh-sinh) quadrature in mpmath at any
  precision, one pass for all k, split at the kinks of f;
- :func:`gauss_hermite_coefficients` -- fixed-node Gauss–Hermite in float64 (quick, but
  only algebraically convergent at a kink: docs/theory.md §1.2);
- :func:`exact_gaussian_expectation` -- closed forms in SymPy for integrands that are
  sums of ``poly(x)·exp(quadratic(x))·[erf(linear(x))]`` (whole line) or
  ``poly(x)·exp(quadratic(x))`` (on an interval). This covers polynomials, ReLU-type
  piecewise polynomials, |x|, exp, sin, cos, sinh, cosh, erf and GELU for every k, in
  milliseconds, without calling ``sympy.integrate``.
"""

from __future__ import annotations

import math
import time
import warnings
from functools import lru_cache

from mpmath import mp
import numpy as np
import sympy as sp
from mpmath.calculus.quadrature import TanhSinh
from ..errors import QuadratureWarning, UnsupportedIntegrand

__all__ = [
    "hermite_normalised_mp",
    "gaussian_moments",
    "gauss_hermite_coefficients",
    "exact_gaussian_expectation",
    "QuadratureWarning",
]


# ============================================================================ numeric (mpmath)
_TS = TanhSinh(mp)  # private node cache, independent of mp.quad's


def hermite_normalised_mp(t, kmax: int) -> list:
    r"""[h_0(t), ..., h_kmax(t)] with h_k = He_k/√(k!), by the stable three-term recurrence

    h_{k+1}(t) = (t·h_k(t) − √k·h_{k−1}(t))/√(k+1).
    """
    out = [mp.one]
    if kmax >= 1:
        out.append(mp.mpf(t))
    for k in range(1, kmax):
        out.append((t * out[k] - mp.sqrt(k) * out[k - 1]) / mp.sqrt(k + 1))
    return out


def _cutoff(dps: int) -> float:
    """|x| beyond which φ(x) < 10^{-3(dps+30)}: the Gaussian tail that is dropped."""
    return math.sqrt(2.0 * 3.0 * (dps + 30) * math.log(10.0))


def gaussian_moments(f, kmax: int, dps: int, breakpoints=(), cutoff: float | None = None,
                     max_degree: int | None = None) -> dict:
    r"""Gaussian integrals of ``f`` by tanh-sinh quadrature at ``dps`` digits, in one pass.

    Returns a dict of mpmath numbers (computed with guard digits, then rounded to ``dps``):

    - ``'h'``: [E f(ξ)h_0(ξ), ..., E f(ξ)h_kmax(ξ)], i.e. the *uncentred* a_k = E[f He_k]/√k!
      (entry 0 is a0 = E f(ξ));
    - ``'f2'``: E f(ξ)²;
    - ``'error'``: the estimated absolute error (max over components);
    - ``'evaluations'``: the number of evaluations of ``f``.

    ``f`` maps an mpf to an mpf. The real line is split at 0 and at each point of
    ``breakpoints`` (the kinks of f), so that a function that is only piecewise smooth
    (ReLU, |x|) still gets the double-exponential convergence on every piece. Points with
    |x| > ``cutoff`` (default: where φ < 10^{-3(dps+30)}) are dropped.

    A :class:`QuadratureWarning` is issued when the error estimate exceeds 10^{-dps}·√(E f²).
    """
    guard = 10 + kmax // 4
    X = _cutoff(dps) if cutoff is None else float(cutoff)
    with mp.workdps(dps + guard):
        prec = mp.prec
        bps = sorted({float(0)} | {float(b) for b in breakpoints if abs(float(b)) < X})
        # keep exact mp values for the breakpoints
        pts = [mp.ninf] + [mp.mpf(b) for b in bps] + [mp.inf]
        ncomp = kmax + 2  # h_0..h_kmax, f^2
        eps = mp.mpf(10) ** (-(dps + 3))
        unnorm = [1 / mp.sqrt(mp.factorial(k)) for k in range(kmax + 1)] + [mp.one]
        if max_degree is None:
            max_degree = _TS.guess_degree(prec) + 2
        total = [mp.zero] * ncomp
        total_err = mp.zero
        n_eval = 0
        unconverged = False
        for i in range(len(pts) - 1):
            a, b = pts[i], pts[i + 1]
            prev = None
            history = []
            err = mp.inf
            for degree in range(1, max_degree + 1):
                nodes = _TS.get_nodes(a, b, degree, prec)
                h = mp.ldexp(1, -degree)
                S = [p / (2 * h) for p in prev] if prev is not None else [mp.zero] * ncomp
                for t, w in nodes:
                    if abs(t) > X:
                        continue
                    fv = f(t)
                    n_eval += 1
                    if not fv:
                        continue
                    g = fv * w * mp.exp(-t * t / 2)
                    S[0] += g
                    if kmax >= 1:
                        # unnormalised He_{k+1} = t He_k - k He_{k-1}; divided by √k! at the end
                        h0, h1 = g, g * t
                        S[1] += h1
                        for k in range(1, kmax):
                            h0, h1 = h1, t * h1 - k * h0
                            S[k + 1] += h1
                    S[-1] += g * fv
                cur = [h * s for s in S]
                history.append(cur)
                prev = cur
                if degree >= 2:
                    scale = max(mp.sqrt(abs(cur[-1])), mp.mpf(10) ** (-dps))
                    err = max(_estimate_error([r[c] for r in history], prec) * unnorm[c] for c in range(ncomp))
                    if err <= eps * scale:
                        break
            else:
                unconverged = True
            total = [t_ + c for t_, c in zip(total, prev)]
            total_err += err
        inv = 1 / mp.sqrt(2 * mp.pi)
        norms = [inv / mp.sqrt(mp.factorial(k)) for k in range(kmax + 1)] + [inv]
        total = [t_ * c for t_, c in zip(total, norms)]
        total_err *= inv
    with mp.workdps(dps):
        res = {
            "h": [+v for v in total[:kmax + 1]],
            "f2": +total[-1],
            "error": +total_err,
            "evaluations": n_eval,
        }
    scale = mp.sqrt(abs(res["f2"])) if res["f2"] else mp.one
    if unconverged or total_err > mp.mpf(10) ** (-dps) * scale:
        warnings.warn(
            f"tanh-sinh quadrature reached an estimated error {mp.nstr(total_err, 3)} "
            f"(requested 1e-{dps} relative to sqrt(E f^2) = {mp.nstr(scale, 5)})",
            QuadratureWarning, stacklevel=3)
    return res


def _estimate_error(results, prec) -> mp.mpf:
    """mpmath's Borwein–Bailey–Girgensohn extrapolation of |I_∞ − I_k| from I_{k−2..k}."""
    if len(results) == 2:
        return abs(results[0] - results[1])
    if results[-1] == results[-2] == results[-3]:
        return mp.zero
    d12 = abs(results[-1] - results[-2])
    d13 = abs(results[-1] - results[-3])
    if d12 == 0:
        return mp.zero
    if d13 == 0:
        return d12
    D1 = mp.log(d12, 10)
    D2 = mp.log(d13, 10)
    D3 = -prec
    D4 = min(0, max(D1 ** 2 / D2, 2 * D1, D3))
    return mp.mpf(10) ** int(D4)


# ============================================================================ numeric (numpy)
@lru_cache(maxsize=16)
def _hermegauss(nodes: int):
    x, w = np.polynomial.hermite_e.hermegauss(nodes)
    return x, w / math.sqrt(2.0 * math.pi)


def hermite_normalised_np(x: np.ndarray, kmax: int) -> np.ndarray:
    """Array of shape (kmax+1, len(x)) with h_k(x) = He_k(x)/√(k!) (stable recurrence)."""
    x = np.asarray(x, dtype=float)
    H = np.empty((kmax + 1,) + x.shape)
    H[0] = 1.0
    if kmax >= 1:
        H[1] = x
    for k in range(1, kmax):
        H[k + 1] = (x * H[k] - math.sqrt(k) * H[k - 1]) / math.sqrt(k + 1)
    return H


def gauss_hermite_coefficients(fnp, kmax: int = 8, nodes: int = 200) -> np.ndarray:
    r"""Float a_k = Σ_i w_i f(x_i) h_k(x_i) with the ``nodes``-point Gauss–Hermite rule
    (numpy.polynomial.hermite_e.hermegauss, weights normalised by √(2π)).

    ``fnp`` is a vectorised numpy function. The result is exact for polynomials of degree
    < 2·nodes − kmax and spectrally accurate for analytic f, but only O(nodes^{-3/4})-ish
    for a kink (ReLU: docs/theory.md §1.2).
    """
    x, w = _hermegauss(int(nodes))
    fx = np.asarray(fnp(x), dtype=float)
    return hermite_normalised_np(x, kmax) @ (w * fx)


# ============================================================================ exact (SymPy)
_z = sp.Dummy("z")


def _normal_moment(j: int):
    """E ζ^j for ζ ~ N(0,1): (j−1)!! for even j, 0 for odd j."""
    return sp.Integer(0) if j % 2 else sp.factorial2(j - 1) if j else sp.Integer(1)


def _incomplete_moments(jmax: int, t) -> list:
    r"""J_j(t) = ∫_t^∞ ζ^j φ(ζ) dζ for j = 0..jmax (t may be ±∞ or complex):

    J_0 = erfc(t/√2)/2,  J_1 = φ(t),  J_j = t^{j−1} φ(t) + (j−1) J_{j−2}.
    """
    if t == sp.oo:
        return [sp.Integer(0)] * (jmax + 1)
    if t == -sp.oo:
        return [_normal_moment(j) for j in range(jmax + 1)]
    phi_t = sp.exp(-t ** 2 / 2) / sp.sqrt(2 * sp.pi)
    J = [(1 - sp.erf(t / sp.sqrt(2))) / 2]
    if jmax >= 1:
        J.append(phi_t)
    for j in range(2, jmax + 1):
        J.append(t ** (j - 1) * phi_t + (j - 1) * J[j - 2])
    return J


def _shifted_power(m: int, mu, s) -> dict:
    """Coefficients {j: c_j} of (μ + s ζ)^m as a polynomial in ζ (degree at most :data:`MAX_EXACT_DEGREE`)."""
    if m > MAX_EXACT_DEGREE:
        raise UnsupportedIntegrand(f"degree {m} > {MAX_EXACT_DEGREE}")
    if mu == 0:
        return {m: s ** m}
    out, b = {}, sp.Integer(1)
    for j in range(m + 1):   # binomial(m, j) by the recurrence, not from factorials each time
        out[j] = b * mu ** (m - j) * s ** j
        b = b * (m - j) / (j + 1)
    return out


def _poly_add(P: dict, Q: dict, c=1) -> dict:
    out = dict(P)
    for j, v in Q.items():
        out[j] = out.get(j, 0) + c * v
    return out


@lru_cache(maxsize=64)
def _hermite_prob_coeffs(n: int) -> dict:
    p = sp.Poly(sp.hermite_prob(n, _z), _z)
    return {m[0]: c for m, c in zip(p.monoms(), p.coeffs())}


@lru_cache(maxsize=64)
def _hermite_phys_coeffs(n: int) -> dict:
    p = sp.Poly(sp.hermite(n, _z), _z)
    return {m[0]: c for m, c in zip(p.monoms(), p.coeffs())}


def _to_hermite_basis(P: dict) -> dict:
    """Write Σ_j P_j ζ^j as Σ_n c_n He_n(ζ) (top-down elimination of leading terms)."""
    P = {j: v for j, v in P.items() if v != 0}
    out = {}
    while P:
        n = max(P)
        c = P.pop(n)
        out[n] = c
        for j, v in _hermite_prob_coeffs(n).items():
            if j < n:
                P[j] = P.get(j, 0) - c * v
        P = {j: v for j, v in P.items() if v != 0}
    return out


def _poly_exp_integral(P: dict, q2, q1, q0, lo, hi):
    r"""∫_lo^hi P(x) e^{q2 x² + q1 x + q0} φ(x) dx in closed form (τ = 1 − 2 q2 > 0).

    Completing the square, e^{q2x²+q1x}φ(x) = s·e^{q1²/(2τ)}·φ((x−μ)/s)/s with s = τ^{-1/2},
    μ = q1/τ, so the integral is C·∫ P(μ + sζ) φ(ζ) dζ over ζ ∈ ((lo−μ)/s, (hi−μ)/s)
    (a contour shift when μ is complex: the integrand is entire and decays in the strip).
    """
    tau = 1 - 2 * q2
    s = 1 / sp.sqrt(tau)
    mu = q1 / tau
    C = sp.exp(q0 + q1 ** 2 / (2 * tau)) * s
    Q = {}
    for m, c in P.items():
        Q = _poly_add(Q, _shifted_power(m, mu, s), c)
    jmax = max(Q) if Q else 0
    if lo == -sp.oo and hi == sp.oo:
        mom = [_normal_moment(j) for j in range(jmax + 1)]
    else:
        tlo = -sp.oo if lo == -sp.oo else (lo - mu) / s
        thi = sp.oo if hi == sp.oo else (hi - mu) / s
        Jlo = _incomplete_moments(jmax, tlo)
        Jhi = _incomplete_moments(jmax, thi)
        mom = [a - b for a, b in zip(Jlo, Jhi)]
    return C * sum((c * mom[j] for j, c in Q.items()), sp.Integer(0))


def _poly_erf_expectation(P: dict, alpha, beta):
    r"""E[P(ζ) erf(αζ + β)], ζ ~ N(0,1), by Stein's lemma E[He_n(ζ) g(ζ)] = E[g^{(n)}(ζ)]:

    E erf(αζ+β) = erf(β/√(1+2α²)), and for n ≥ 1
    g^{(n)}(ζ) = (2α/√π)·(−α)^{n−1}·H_{n−1}(αζ+β)·e^{−(αζ+β)²} (H: physicists' Hermite),
    whose expectation is a Gaussian integral (:func:`_poly_exp_integral`).
    """
    total = sp.Integer(0)
    for n, c in _to_hermite_basis(P).items():
        if n == 0:
            total += c * sp.erf(beta / sp.sqrt(1 + 2 * alpha ** 2))
            continue
        # H_{n-1}(αζ+β) as a polynomial in ζ
        H = {}
        for m, hc in _hermite_phys_coeffs(n - 1).items():
            H = _poly_add(H, _shifted_power(m, beta, alpha), hc)
        G = _poly_exp_integral(H, -alpha ** 2, -2 * alpha * beta, -beta ** 2, -sp.oo, sp.oo)
        total += c * 2 * alpha / sp.sqrt(sp.pi) * (-alpha) ** (n - 1) * G
    return total


def _parse_term(term, x):
    """term = coef · x^m · exp(q2x²+q1x+q0) · [erf(αx+β)] -> (coef, m, (q2,q1,q0), (α,β) | None)."""
    coef = sp.Integer(1)
    m = 0
    q = sp.Integer(0)
    erf_arg = None
    for fac in sp.Mul.make_args(term):
        if not fac.has(x):
            coef *= fac
        elif fac == x:
            m += 1
        elif fac.is_Pow and fac.base == x and fac.exp.is_Integer and fac.exp >= 0:
            m += int(fac.exp)
        elif isinstance(fac, sp.exp):
            q += fac.args[0]
        elif fac.is_Pow and isinstance(fac.base, sp.exp) and fac.exp.is_Integer:
            q += fac.exp * fac.base.args[0]
        elif isinstance(fac, sp.erf) and erf_arg is None:
            erf_arg = fac.args[0]
        else:
            raise UnsupportedIntegrand(fac)
    try:
        qp = sp.Poly(sp.expand(q), x)
    except sp.PolynomialError:
        raise UnsupportedIntegrand(q) from None
    if qp.degree() > 2:
        raise UnsupportedIntegrand(q)
    q2, q1, q0 = (qp.coeff_monomial(x ** j) for j in (2, 1, 0))
    if not (sp.re(1 - 2 * q2) > 0) or sp.im(q2) != 0:
        raise UnsupportedIntegrand("non-integrable exponential")
    ab = None
    if erf_arg is not None:
        try:
            ep = sp.Poly(sp.expand(erf_arg), x)
        except sp.PolynomialError:
            raise UnsupportedIntegrand(erf_arg) from None
        if ep.degree() > 1:
            raise UnsupportedIntegrand(erf_arg)
        ab = (ep.coeff_monomial(x), ep.coeff_monomial(1))
    return coef, m, (q2, q1, q0), ab


#: the exact path's bounds: the highest power of x, and the number of terms the expanded integrand may have
MAX_EXACT_DEGREE = 512
MAX_EXACT_TERMS = 4000
_EXP_LIKE = (sp.exp, sp.sin, sp.cos, sp.sinh, sp.cosh)


def _terms_bound(expr, x) -> float:
    """An upper bound on the number of terms of ``_prepare(expr)``, or inf where a factor is outside the
    supported shapes (exp, sin, cos, sinh, cosh of a polynomial of degree <= 2, erf, erfc of a linear
    one, integer powers): checked before expanding, so that nothing is expanded that cannot be integrated."""
    if not expr.has(x):
        return 1
    if expr == x:
        return 1
    if expr.is_Add:
        return sum(_terms_bound(a, x) for a in expr.args)
    if expr.is_Mul:
        return math.prod(_terms_bound(a, x) for a in expr.args)
    if expr.is_Pow:
        e = expr.exp
        if e.has(x) or not e.is_Integer or e < 0 or e > MAX_EXACT_DEGREE:
            return math.inf
        t = _terms_bound(expr.base, x)
        return math.inf if t == math.inf else math.comb(int(e) + int(t) - 1, int(t) - 1) if t > 1 else 1
    if isinstance(expr, _EXP_LIKE + (sp.erf, sp.erfc)):
        deg = 1 if isinstance(expr, (sp.erf, sp.erfc)) else 2
        try:
            if sp.Poly(expr.args[0], x).degree() > deg:
                return math.inf
        except sp.PolynomialError:
            return math.inf
        return 2 if isinstance(expr, (sp.sin, sp.cos, sp.sinh, sp.cosh, sp.erfc)) else 1
    return math.inf


def _prepare(expr):
    for fn in (sp.sin, sp.cos, sp.sinh, sp.cosh):
        if expr.has(fn):
            expr = expr.rewrite(fn, sp.exp)
    if expr.has(sp.erfc):
        expr = expr.rewrite(sp.erfc, sp.erf)
    return sp.expand(expr)


def exact_gaussian_expectation(g, x, lo=-sp.oo, hi=sp.oo, simplify: bool = True, deadline: float | None = None):
    r"""Closed form of ∫_lo^hi g(x) φ(x) dx, or ``None`` when g is outside the supported class.

    Supported: g a sum of terms c·x^m·e^{q(x)}·erf(αx+β)^{0|1} with q of degree ≤ 2 (and
    1 − 2q₂ > 0); the erf factor only on the whole line. sin, cos, sinh, cosh are rewritten
    as exponentials (with complex q1: the result is real and simplified back), erfc as 1 − erf.
    Bounded work: None also when the expanded g would have more than :data:`MAX_EXACT_TERMS` terms, a
    power of x above :data:`MAX_EXACT_DEGREE`, or when ``time.monotonic()`` passes ``deadline``.

    Examples
    --------
    >>> x = sp.Symbol("x", real=True)
    >>> exact_gaussian_expectation(sp.cos(x), x)
    exp(-1/2)
    >>> exact_gaussian_expectation(sp.sin(sp.sin(x)), x) is None      # outside the supported shapes
    True
    """
    try:
        if _terms_bound(g, x) > MAX_EXACT_TERMS:
            raise UnsupportedIntegrand("too many terms")
        terms = sp.Add.make_args(_prepare(g))
        total = sp.Integer(0)
        whole = lo == -sp.oo and hi == sp.oo
        for term in terms:
            if deadline is not None and time.monotonic() > deadline:
                raise UnsupportedIntegrand("out of time")
            coef, m, (q2, q1, q0), ab = _parse_term(term, x)
            if ab is None:
                total += coef * _poly_exp_integral({m: sp.Integer(1)}, q2, q1, q0, lo, hi)
            else:
                if not whole:
                    raise UnsupportedIntegrand("erf on a half-line")
                tau = 1 - 2 * q2
                s = 1 / sp.sqrt(tau)
                mu = q1 / tau
                C = sp.exp(q0 + q1 ** 2 / (2 * tau)) * s
                alpha, beta = ab
                total += coef * C * _poly_erf_expectation(_shifted_power(m, mu, s), alpha * s, alpha * mu + beta)
    except UnsupportedIntegrand:
        return None
    if total.has(sp.I):
        # erf of an imaginary argument is i·erfi: make that explicit so that I cancels
        total = total.replace(
            lambda e: isinstance(e, sp.erf) and e.args[0] != 0 and sp.re(e.args[0]) == 0,
            lambda e: sp.I * sp.erfi(sp.im(e.args[0])))
        total = sp.expand_complex(total)
        im = sp.simplify(sp.im(total))
        if im != 0:
            return None
        total = sp.re(total)
    if simplify:
        total = sp.factor_terms(sp.expand(total))
    return total
