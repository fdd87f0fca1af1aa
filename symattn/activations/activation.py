r"""The :class:`Activation` object and the :func:`activation` factory (docs/theory.md §1.2–§1.3).

An :class:`Activation` wraps a real function f of one real variable, given as

- a catalog name (:data:`~symattn.activations.catalog.CATALOG`), e.g. ``"tanh"``, ``"relu"``, ``"gelu"``;
- a SymPy expression in ``x``, as a string (``"x*erf(x)"``, ``"atan(x)"``, ``"max(x, 0)"``)
  or as a sympy object in ``Symbol('x')``;
- a plain Python callable (numeric paths only: no exact coefficients, no symbolic limit).

With ξ ~ N(0, 1), φ the standard normal density and He_k the probabilists' Hermite
polynomials, the quantities the theory needs are (docs/theory.md §1.2, §1.3)

.. math::

    a_0 = E f(ξ), \qquad f_c = f - a_0 \ \text{(the centred f, used by the model)},\\
    a_k = E[f_c(ξ)\,He_k(ξ)]/\sqrt{k!}, \qquad a_1 = E[ξ f(ξ)],\\
    ν = E f_c(ξ)^2 = \sum_{k\ge1} a_k^2, \qquad s^2 = ν - a_1^2,\\
    d = \lim_{p\to\infty} f_c(\sqrt p)/\sqrt p, \qquad
    d_n = E f_c(\lVert x\rVert^2/\sqrt p)/\sqrt p,\ \lVert x\rVert^2 \sim χ^2_p(\lVert μ\rVert^2).

The class holds the caches and delegates each job to its module: :mod:`.parsing` (spec ->
expression), :mod:`.analysis` (kinks, pieces), :mod:`.evaluation` (numpy / torch / mpmath
functions), :mod:`.hermite` (quadrature), :mod:`.exact` (closed-form coefficients) and
:mod:`.diagonal` (d, d_n).
"""

from __future__ import annotations

import math
import time
import warnings
from functools import cached_property

import numpy as np
import sympy as sp
from mpmath import mp

from ..caching import Memo
from ..errors import ActivationError, ParameterError, QuadratureWarning
from ..timeouts import EXACT_COEFFICIENTS_SECONDS, QUADRATURE_SECONDS, VALIDATION_SECONDS
from ..validation import known_keywords
from ..validation import check_dps, check_int
from .analysis import find_kinks, pieces, special_points
from .catalog import catalog_name
from .diagonal import finite_p_diagonal, numeric_diagonal, symbolic_diagonal
from .evaluation import mpmath_function, numpy_from_callable, numpy_function, torch_function
from .exact import exact_hermite_coefficient
from .hermite import gauss_hermite_coefficients as _gh_coefficients, gaussian_moments
from .parsing import parse_spec

__all__ = ["Activation", "activation"]


def _check_kmax(kmax) -> int:
    return check_int("kmax", kmax, 0, 200)


class Activation:
    r"""An activation f, its centring and its Hermite expansion (docs/theory.md §1.2).

    Build one with :func:`activation`. Attributes (floats, for the centred f_c = f − a0):

    - ``a0`` = E f(ξ) (reported and subtracted);
    - ``a1`` = E[ξ f(ξ)] = a_1;
    - ``nu`` = ν = E f_c(ξ)² = Σ_{k≥1} a_k²;
    - ``s2`` = s² = ν − a1²;
    - ``d`` = lim_{p→∞} f_c(√p)/√p (0 for bounded f, 1 for ReLU, ``|x|`` and x, ±inf for superlinear f,
      nan if the limit does not exist, e.g. x·sin x);
    - ``superlinear`` -- d is infinite.

    ``name`` is the catalog name, the expression string, or the callable's ``__name__``;
    ``expr`` the SymPy expression in x of the uncentred f (None for callables); ``kind`` one of
    'catalog', 'expression', 'callable'; ``kinks`` the points where f is not analytic
    (floats; the quadrature splits there: found from Abs/Max/Min/Piecewise/sign/Heaviside for
    expressions, given by ``kinks=[...]`` for callables); ``float_only`` -- a callable that
    does not accept mpmath numbers, so its coefficients have float64 accuracy only.

    The constructor takes the same ``spec`` as :func:`activation` (which adds caching).

    Parameters
    ----------
    spec : str, sympy.Basic or callable
        As for :func:`activation` (parsed by :func:`symattn.activations.parsing.parse_spec`).
    kinks : sequence of float, optional
        Further points where f is not analytic (for a callable, the only ones known).
    name : str, optional
        Overrides the name taken from ``spec``.

    Examples
    --------
    >>> f = Activation("relu")
    >>> f.kind, f.kinks, f.a1, f.d
    ('catalog', (0.0,), 0.5, 1.0)
    >>> round(f.nu, 12) == round(0.5 - 1 / (2 * math.pi), 12)
    True
    """

    def __init__(self, spec, *, kinks=None, name: str | None = None):
        self._moment_cache: dict = {}
        self._exact_cache: dict = {}
        self._dn_cache: dict = {}
        self.float_only = False
        nm, expr, kind, self._func = parse_spec(spec)
        self.name = name or nm
        self.expr = expr
        self.kind = kind
        if expr is not None:
            exact_kinks, complete = find_kinks(expr)
            self._exact_kinks = exact_kinks if complete else None
            self.kinks = tuple(sorted({float(k) for k in exact_kinks} | {float(k) for k in (kinks or ())}))
            self._special = special_points(expr)
            self._mp_raw = mpmath_function(expr)
        else:
            self._exact_kinks = None
            self.kinks = tuple(sorted(float(k) for k in (kinks or ())))
            self._special = []
            self._setup_callable()
        self._validate()

    # ------------------------------------------------------------------ construction helpers
    def _setup_callable(self):
        f = self._func
        probe = mp.mpf("0.3")
        try:
            r = f(probe)
            ok = isinstance(r, mp.mpf) or (isinstance(r, mp.mpc) and r.imag == 0)
        except Exception:
            ok = False
        if not ok:
            self.float_only = True
            try:
                float(f(0.3))
            except Exception as exc:
                raise ActivationError(f"the callable {self.name!r} cannot be evaluated at 0.3: {exc}") from None

    def _mp_eval(self, t):
        """f(t) as an mpf (raises on complex or non-finite values)."""
        if self._func is None:
            v = self._mp_raw(t)
        elif self.float_only:
            v = float(self._func(float(t)))
        else:
            v = self._func(t)
        if isinstance(v, mp.mpc):
            if v.imag != 0:
                raise ValueError(f"complex value {v}")
            v = v.real
        return mp.mpf(v)

    def _validate(self):
        grid = list(np.linspace(-8.0, 8.0, 161)) + list(self.kinks) + list(self._special)
        deadline = time.monotonic() + VALIDATION_SECONDS
        with mp.workdps(20), np.errstate(all="ignore"):
            for t in grid:
                if time.monotonic() > deadline:
                    raise ActivationError(
                        f"checking the activation {self.name!r} took longer than {VALIDATION_SECONDS:g} s "
                        f"(stopped at x = {t:g}): give a cheaper expression")
                try:
                    v = self._mp_eval(mp.mpf(t))
                    if not mp.isfinite(v):
                        raise ValueError(f"value {v}")
                except (ValueError, ZeroDivisionError, TypeError, ArithmeticError) as exc:
                    raise ActivationError(
                        f"the activation {self.name!r} is not finite and real at x = {t:g} "
                        f"({type(exc).__name__}: {exc}); "
                        "an activation must be real-valued with E f(xi)^2 < inf") from None
            # tail: x^2 f(x)^2 phi(x) must decay (E f^2 < inf)
            far = (20.0, 30.0) if self.float_only else (20.0, 40.0)
            for sgn in (1, -1):
                vals = []
                for t in far:
                    t = mp.mpf(sgn * t)
                    try:
                        v = self._mp_eval(t)
                    except (OverflowError, ValueError, ZeroDivisionError, ArithmeticError):
                        v = mp.inf
                    if not mp.isfinite(v):
                        raise ActivationError(
                            f"the activation {self.name!r} overflows at x = {float(t):g}: "
                            "E f(xi)^2 cannot be computed (it must be finite)")
                    vals.append(t * t * v * v * mp.exp(-t * t / 2))
                if vals[1] > mp.mpf(10) ** -30 and vals[1] >= vals[0] / 2:
                    raise ActivationError(
                        f"E f(xi)^2 is infinite for the activation {self.name!r}: f(x)^2 grows like "
                        "exp(x^2/2) or faster")

    # ------------------------------------------------------------------ pickling / equality
    def __reduce__(self):
        if self.kind == "catalog":
            return (activation, (self.name,))
        if self.kind == "expression":
            return (_rebuild, (self.expr, self.name))
        return (_rebuild_callable, (self._func, self.kinks, self.name))

    def __eq__(self, other):
        if not isinstance(other, Activation):
            return NotImplemented
        if self.expr is not None or other.expr is not None:
            return self.expr == other.expr
        return self._func is other._func and self.kinks == other.kinks

    def __hash__(self):
        return hash(self.expr) if self.expr is not None else hash((id(self._func), self.kinks))

    def __repr__(self):
        if self.kind == "catalog":
            return f"Activation({self.name!r}: {self.expr})"
        if self.kind == "expression":
            return f"Activation({self.name!r})"
        prec = ", float precision" if self.float_only else ""
        return f"Activation(callable {self.name!r}{prec})"

    # ------------------------------------------------------------------ quadrature
    def _moments(self, dps: int, kmax: int, warn: bool = True) -> dict:
        """gaussian_moments of the uncentred f at dps digits, cached (reuses a larger kmax or more digits), within
        ``QUADRATURE_SECONDS`` (:mod:`symattn.timeouts`)."""
        for (d, k), res in self._moment_cache.items():
            if d >= dps and k >= kmax:   # more digits serve as well (the callers round to dps)
                return res
        cutoff = 30.0 if self.float_only else None
        if self.float_only and dps > 15 and warn:
            warnings.warn(
                f"the callable {self.name!r} does not accept mpmath numbers: its Hermite "
                f"coefficients are computed from float64 values (about 15 digits, not {dps})",
                QuadratureWarning, stacklevel=3)
        qdps = 15 if self.float_only else dps  # float values: more digits cannot be had
        deadline = time.monotonic() + QUADRATURE_SECONDS

        def f(t):   # the quadrature with a cooperative deadline, checked at every node
            if time.monotonic() > deadline:
                raise TimeoutError(f"the quadrature took longer than {QUADRATURE_SECONDS:g} s (kmax = {kmax}, "
                                   f"dps = {dps}): give a cheaper expression, a lower kmax or fewer digits")
            return self._mp_eval(t)

        with np.errstate(all="ignore"):
            try:
                res = gaussian_moments(f, kmax, qdps, self.kinks, cutoff=cutoff)
            except (OverflowError, TimeoutError) as exc:   # a bound reached (evaluation.MP_EXP_LIMIT, the deadline)
                raise ActivationError(f"the activation {self.name!r} cannot be integrated: {exc}") from None
        self._moment_cache[(dps, kmax)] = res
        return res

    def constants(self, dps: int = 30) -> dict:
        r"""The constants of f at ``dps`` digits (docs/theory.md §1.2, §1.3).

        a0 = E f(ξ), a1 = E[ξ f(ξ)], ν = E(f(ξ) − a0)², s² = ν − a1², d = lim f_c(√p)/√p.

        Parameters
        ----------
        dps : int
            Working precision, 15 <= dps <= 1000.

        Returns
        -------
        dict
            ``{'a0', 'a1', 'nu', 's2', 'd'}`` as mpmath numbers (d = mpf('inf') for a
            superlinear f).

        Examples
        --------
        >>> c = activation("abs").constants(20)
        >>> print(mp.nstr(c["a0"], 20), mp.nstr(c["nu"], 20), c["d"])   # √(2/π), 1 − 2/π, 1
        0.79788456080286535588 0.36338022763241865692 1.0
        """
        dps = check_dps(dps)
        return self._constants(dps)

    def _constants(self, dps: int, with_d: bool = True) -> dict:
        m = self._moments(dps, 1, warn=with_d)
        with mp.workdps(dps):
            a0 = +m["h"][0]
            a1 = +m["h"][1]
            nu = m["f2"] - a0 * a0
            s2 = nu - a1 * a1
        out = {"a0": a0, "a1": a1, "nu": nu, "s2": s2}
        if with_d:
            out["d"] = self._d_mp(dps)
        return out

    @cached_property
    def _const20(self) -> dict:
        return self._constants(20, with_d=False)

    @property
    def a0(self) -> float:
        """a0 = E f(ξ), ξ ~ N(0,1) (the constant subtracted to centre f)."""
        return float(self._const20["a0"])

    @property
    def a1(self) -> float:
        """a1 = E[ξ f(ξ)] = E f'(ξ) (first Hermite coefficient)."""
        return float(self._const20["a1"])

    @property
    def nu(self) -> float:
        """ν = E[(f(ξ) − a0)²] = Σ_{k≥1} a_k² (variance of f(ξ))."""
        return float(self._const20["nu"])

    @property
    def s2(self) -> float:
        """s² = ν − a1² (variance of the GOE part of the linearised kernel, docs/theory.md §4)."""
        return float(self._const20["s2"])

    def hermite_coefficients(self, kmax: int = 8, dps: int = 30) -> list:
        r"""a_k = E[f_c(ξ) He_k(ξ)]/√(k!) of the centred f, k = 0..kmax (docs/theory.md §1.2).

        Computed by tanh-sinh quadrature of f·He_k·φ at ``dps`` digits, with the real line split
        at the kinks of f, so that the absolute error is about 10^{-dps}·√(E f²). A callable that
        does not accept mpmath numbers gives float precision only (a QuadratureWarning says so).

        Parameters
        ----------
        kmax : int
            Highest order, 0 <= kmax <= 200.
        dps : int
            Working precision, 15 <= dps <= 1000.

        Returns
        -------
        list of mpmath.mpf
            ``[a_0, ..., a_kmax]``; entry 0 is 0 (f_c is centred; a0 = E f is :attr:`a0`).

        Examples
        --------
        >>> h = activation("relu").hermite_coefficients(kmax=2, dps=20)
        >>> print(mp.nstr(h[1], 20), mp.nstr(h[2], 20))   # 1/2, 1/(2√π)
        0.5 0.28209479177387814347
        """
        kmax = _check_kmax(kmax)
        dps = check_dps(dps)
        m = self._moments(dps, kmax)
        with mp.workdps(dps):
            return [mp.mpf(0)] + [+v for v in m["h"][1:kmax + 1]]

    def gauss_hermite_coefficients(self, kmax: int = 8, nodes: int = 200) -> np.ndarray:
        r"""Float64 a_k = Σ_i w_i f_c(x_i) He_k(x_i)/√(k!) with the ``nodes``-point Gauss–Hermite rule.

        The rule is numpy.polynomial.hermite_e.hermegauss, normalised. Quick; spectrally
        accurate for analytic f, but only algebraically convergent at a kink (ReLU: ν off by
        2e-3 at 200 nodes, docs/theory.md §1.2).

        Parameters
        ----------
        kmax : int
            Highest order, 0 <= kmax <= 200.
        nodes : int
            Number of nodes, 1 <= nodes <= 10000.

        Returns
        -------
        numpy.ndarray, shape (kmax + 1,)
            a_0..a_kmax, with a_0 = 0.

        Examples
        --------
        >>> activation("tanh").gauss_hermite_coefficients(kmax=3, nodes=100).round(5).tolist()
        [0.0, 0.60571, 0.0, -0.14844]
        """
        kmax = _check_kmax(kmax)
        nodes = check_int("nodes", nodes, 1, 10000)
        out = _gh_coefficients(self.numpy, kmax, nodes)
        out[0] = 0.0
        return out

    def exact_coefficients(self, kmax: int = 8, timeout: float = EXACT_COEFFICIENTS_SECONDS) -> list:
        r"""a_k = E[f(ξ) He_k(ξ)]/√(k!) as exact SymPy numbers, k = 0..kmax (docs/theory.md §1.2).

        Computed piece by piece between the kinks of f by closed-form Gaussian integration of
        poly(x)·e^{quadratic(x)}·[erf(linear(x))]
        (:func:`symattn.activations.exact.exact_hermite_coefficient`): this covers polynomials,
        ReLU, leaky ReLU, ``|x|``, ELU, exp, sin, cos, erf, GELU for every k. Otherwise
        ``sympy.integrate`` is tried within ``timeout`` seconds in total, except for functions
        known to have no closed form (tanh, sigmoid, softplus, silu, softsign, log, atan, ...).

        Parameters
        ----------
        kmax : int
            Highest order, 0 <= kmax <= 200.
        timeout : float
            Total seconds of the exact computation (default ``EXACT_COEFFICIENTS_SECONDS`` of
            :mod:`symattn.timeouts`).

        Returns
        -------
        list
            ``[0, a_1, ..., a_kmax]`` (centred f, so entry 0 is 0), ``None`` where no closed form
            was found; all ``None`` for a callable.

        Examples
        --------
        >>> activation("relu").exact_coefficients(kmax=4)
        [0, 1/2, 1/(2*sqrt(pi)), 0, -sqrt(3)/(12*sqrt(pi))]
        """
        kmax = _check_kmax(kmax)
        out = [sp.Integer(0)]
        if self.expr is None or self._exact_kinks is None:
            return out + [None] * kmax
        deadline = time.monotonic() + float(timeout)
        parts = None
        for k in range(1, kmax + 1):
            if k not in self._exact_cache:
                if time.monotonic() > deadline:   # out of time: the rest stays unknown (not cached)
                    out += [None] * (kmax + 1 - k)
                    break
                if parts is None:
                    parts = pieces(self.expr, self._exact_kinks)
                self._exact_cache[k] = exact_hermite_coefficient(self.expr, k, parts, deadline)
            out.append(self._exact_cache[k])
        return out

    def exact_constants(self, timeout: float = EXACT_COEFFICIENTS_SECONDS) -> dict:
        r"""a0 = E f(ξ), a1 = E[ξ f(ξ)], ν = E f(ξ)² − a0², s² = ν − a1² and d = lim f_c(√p)/√p as exact
        SymPy numbers, each None where no closed form is found (docs/theory.md §1.2, §1.3).

        a1 is :meth:`exact_coefficients` (k = 1); a0 and E f² are the closed-form Gaussian integrals of f
        and f² piece by piece between the kinks (:func:`symattn.activations.hermite.exact_gaussian_expectation`);
        d is the SymPy limit of the diagonal (``oo`` for a superlinear f).

        Parameters
        ----------
        timeout : float
            Seconds for ``sympy.integrate`` in :meth:`exact_coefficients`.

        Returns
        -------
        dict
            ``{'a0', 'a1', 'nu', 's2', 'd'}``: SymPy numbers or None (all None for a callable).

        Examples
        --------
        >>> k = activation("relu").exact_constants()      # a1 = 1/2, ν = 1/2 − 1/(2π), d = 1
        >>> k["a1"], sp.simplify(k["nu"] - (sp.Rational(1, 2) - 1 / (2 * sp.pi))), k["d"]
        (1/2, 0, 1)
        >>> activation("tanh").exact_constants()["a1"] is None       # no closed form: E tanh'(ξ)
        True
        """
        from .catalog import X
        from .hermite import exact_gaussian_expectation

        out = dict.fromkeys(("a0", "a1", "nu", "s2", "d"))
        if self.expr is None or self._exact_kinks is None:
            return out
        deadline = time.monotonic() + 2 * float(timeout)
        out["a1"] = self.exact_coefficients(kmax=1, timeout=timeout)[1]
        parts = pieces(self.expr, self._exact_kinks)

        def expectation(power):
            vals = [exact_gaussian_expectation(piece**power, X, lo, hi, deadline=deadline) for lo, hi, piece in parts]
            return None if any(v is None for v in vals) else sp.Add(*vals)

        a0, f2 = expectation(1), expectation(2)
        out["a0"] = None if a0 is None else sp.simplify(a0)
        if a0 is not None and f2 is not None:
            out["nu"] = sp.simplify(f2 - a0**2)
            if out["a1"] is not None:
                out["s2"] = sp.simplify(out["nu"] - out["a1"] ** 2)
        out["d"] = self._d_info[1]
        return out

    # ------------------------------------------------------------------ numeric evaluation
    @cached_property
    def _np_raw(self):
        if self._func is not None:
            return numpy_from_callable(self._func)
        return numpy_function(self.expr, self.name if self.kind == "catalog" else None)

    def numpy(self, t) -> np.ndarray:
        """f_c(t) = f(t) − a0 elementwise on a float64 array (vectorised).

        Parameters
        ----------
        t : array_like
            Points.

        Returns
        -------
        numpy.ndarray
            float64, of the shape of ``t``.

        Examples
        --------
        >>> activation("abs").numpy([-2.0, 0.0]).round(6).tolist()   # |t| − √(2/π)
        [1.202115, -0.797885]
        """
        arr = np.asarray(t, dtype=float)
        with np.errstate(over="ignore"):
            out = np.asarray(self._np_raw(arr), dtype=float)
        if out.shape != arr.shape:
            out = np.broadcast_to(out, arr.shape).copy()
        return out - self.a0

    def __call__(self, t) -> np.ndarray:
        """Same as :meth:`numpy`: the centred f applied elementwise."""
        return self.numpy(t)

    @cached_property
    def _torch_raw(self):
        if self._func is not None:
            return None
        return torch_function(self.expr, self.name if self.kind == "catalog" else None)

    def torch(self, t):
        """f_c(t) = f(t) − a0 on a torch tensor, with torch ops (same device and dtype).

        Expressions are translated to torch functions (tanh, erf, exp, log, Max, Abs,
        Piecewise, ...: :func:`symattn.activations.evaluation.torch_function`); a function
        without a torch translation, or a callable that does not accept tensors, is evaluated
        through numpy and copied back.

        Parameters
        ----------
        t : torch.Tensor or array_like
            Points (anything else becomes a float64 tensor).

        Returns
        -------
        torch.Tensor
            Of the shape, dtype and device of ``t``.

        Examples
        --------
        >>> import importlib.util
        >>> f = activation("relu")
        >>> if importlib.util.find_spec("torch"):
        ...     print(f.torch([-1.0, 2.0]).numpy().round(6).tolist())
        ... else:
        ...     print(f.numpy([-1.0, 2.0]).round(6).tolist())
        [-0.398942, 1.601058]
        """
        import torch

        if not isinstance(t, torch.Tensor):
            t = torch.as_tensor(t, dtype=torch.float64)
        fn = self._torch_raw
        if fn is None and self._func is not None:
            try:
                r = self._func(t)
                if isinstance(r, torch.Tensor) and r.shape == t.shape:
                    return r.to(t.dtype) - self.a0
            except Exception:
                pass
        if fn is not None:
            out = fn(t)
            if not isinstance(out, torch.Tensor):
                out = torch.full_like(t, float(out))
            return out - self.a0
        arr = t.detach().cpu().numpy().astype(np.float64)
        return torch.as_tensor(self.numpy(arr), dtype=t.dtype, device=t.device)

    # ------------------------------------------------------------------ diagonal constant
    @cached_property
    def _d_info(self):
        """(d as float, exact SymPy value or None, method)."""
        if self.expr is not None:
            r = symbolic_diagonal(self.expr, self._exact_kinks)
            if r is not None:
                return r[0], r[1], "sympy"
        return numeric_diagonal(self._mp_eval, self.a0), None, "numeric"

    @property
    def d(self) -> float:
        r"""d = lim_{p→∞} f_c(√p)/√p (a SymPy limit, numeric fallback): the diagonal constant."""
        return self._d_info[0]

    @property
    def superlinear(self) -> bool:
        """True when f grows faster than linearly (d = ±inf): the diagonal must be zeroed."""
        return math.isinf(self.d)

    def _d_mp(self, dps):
        d, exact, _ = self._d_info
        with mp.workdps(dps):
            if exact is not None and math.isfinite(d):
                return mp.mpf(sp.N(exact, dps + 5))
            return mp.mpf(d)

    def d_n(self, p, snr: float = 0.0) -> float:
        r"""Finite-p diagonal d_n = E f_c(‖x‖²/√p)/√p with ‖x‖² ~ χ²_p(‖μ‖² = snr) (docs/theory.md §1.3).

        One-dimensional quadrature against the χ² (snr = 0) or non-central χ² law of ‖x‖²
        (scipy.stats densities, written in r = ‖x‖; adaptive composite Gauss–Legendre split
        at the kinks of f: :func:`symattn.activations.diagonal.finite_p_diagonal`), not sampling.
        Cached on (p, snr).

        Parameters
        ----------
        p : int
            Dimension, p >= 1.
        snr : float
            m_2 = ‖μ‖² >= 0.

        Returns
        -------
        float
            d_n; ``inf`` for a superlinear f.

        Examples
        --------
        >>> round(activation("tanh").d_n(10_000) * 100, 8)   # d_n ≈ 1/√p for tanh
        1.0
        """
        p = check_int("p", p, 1)
        try:
            snr = float(snr)
        except (TypeError, ValueError):
            raise ParameterError("snr", snr, "a real number snr >= 0") from None
        if not (math.isfinite(snr) and snr >= 0):
            raise ParameterError("snr", snr, "a real number snr >= 0")
        key = (p, snr)
        if key not in self._dn_cache:
            self._dn_cache[key] = (math.inf if self.superlinear
                                   else finite_p_diagonal(self._np_raw, self.a0, self.kinks, p, snr))
        return self._dn_cache[key]


def _rebuild(expr, name):
    return Activation(expr, name=name)


def _rebuild_callable(func, kinks, name):
    return Activation(func, kinks=kinks, name=name)


#: the activations built from a string or a SymPy expression (their computed constants with them)
INSTANCES = Memo("activations.instances", 512)


@known_keywords
def activation(spec, *, kinks=None) -> Activation:
    r"""Build (or return) an :class:`Activation` f, with a0 = E f(ξ) and f_c = f − a0 (docs/theory.md §1.2).

    String and sympy specs are cached, so repeated calls return the same object and reuse its
    computed constants.

    Parameters
    ----------
    spec : str, sympy.Basic, callable or Activation
        A catalog name (:data:`~symattn.activations.catalog.CATALOG`, case-insensitive; aliases
        identity, swish, logistic), a SymPy expression string in ``x`` (``"x*erf(x)"``,
        ``"max(x, 0)"``, ``"x^2 - 1"``; decimal literals are read as exact rationals,
        0.1 -> 1/10; the helpers ``relu``, ``sigmoid``, ``softplus``, ``Phi`` may be used), a
        sympy expression in ``Symbol('x')``, a Python callable (numeric paths only), or an
        Activation (returned as is).
    kinks : sequence of float, optional
        Points where a callable is not analytic (the quadratures split there).

    Returns
    -------
    Activation

    Raises
    ------
    ActivationError
        An unknown name (with close matches), an unparsable string, a symbol other than x, or
        f with non-finite values or E f(ξ)² = ∞.

    Examples
    --------
    >>> f = activation("Swish")
    >>> f.name, f is activation("silu")
    ('silu', True)
    >>> g = activation("x*erf(x)")
    >>> round(g.a0, 12) == round(2 / math.sqrt(3 * math.pi), 12)   # E ξ erf(ξ) = 2/√(3π)
    True
    """
    if isinstance(spec, Activation):
        return spec
    cacheable = kinks is None and isinstance(spec, (str, sp.Basic))
    if cacheable:
        if isinstance(spec, str):
            key = ("str", catalog_name(spec) or spec.strip())
        else:
            key = ("sympy", sp.srepr(spec))
        return INSTANCES.get(key, lambda: Activation(spec))
    return Activation(spec, kinks=kinks)
