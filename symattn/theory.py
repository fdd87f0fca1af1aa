r"""The theory layer: deterministic equivalents of the training errors E_A and E_LR.

  E(γ) = lim γ² ŷᵀ Q(γ)² ŷ = −γ² F'(γ),   F(γ) = lim ŷᵀ (ΦᵀΦ/n + γ I_n)^{-1} ŷ,

with Φ = X K_X (attention, docs/theory.md §6) or Φ = X (linear regression, docs/theory.md §3).

- :func:`solve` returns a :class:`TheoryResult` (E, F, the bulk solution, residuals, iterations,
  parameters, ``to_dict()``), the counterpart of :class:`symattn.montecarlo.SimulationResult`;
- :func:`memorization_error` is the thin wrapper that returns E only;
- :func:`bulk_trace` evaluates the Proposition 1 traces of the bulk resolvent (docs/theory.md §5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .activations.activation import activation as _activation
from .backends.context import context
from .backends import solver
from .errors import ParameterError
from .model import MODELS, as_geometry, check_c, check_gamma, kernel_constants

#: accepted values of ``model``: one of :data:`symattn.model.MODELS`, or both
MODEL_CHOICES = MODELS + ("both",)


@dataclass
class TheoryResult:
    r"""The deterministic-equivalent solution at a grid of points (c, γ), broadcast together.

    Attributes
    ----------
    c, gamma : numpy.ndarray
        The points, both of the broadcast shape ``shape``.
    model : str
        'attention', 'linear' or 'both' (what was solved).
    attention, linear : numpy.ndarray or None
        E_A(γ) = −γ² F_A'(γ) (docs/theory.md §6) and E_LR(γ) = −γ² F_LR'(γ) (§3), or None when
        not solved. float64, or mpmath numbers (object arrays) with the mpmath backend.
    F_attention, F_linear : numpy.ndarray or None
        F(γ) = lim ŷᵀ(ΦᵀΦ/n + γ)^{-1}ŷ for each model (None for the finite-p corrected attention
        theory, which returns E only).
    bulk : numpy.ndarray or None
        The bulk unknowns (e1, e2, e3) of docs/theory.md §5, shape ``shape + (3,)`` (asymptotic
        attention theory only).
    residuals : numpy.ndarray or None
        The relative fixed-point residual of the bulk system at each point.
    iterations : int or None
        Newton / fixed-point iterations spent on the bulk system.
    parameters : dict
        Everything the result depends on: activation and its constants a1, ν, s², d, diagonal,
        geometry (Gram matrix), n, correction, backend and dps.

    Examples
    --------
    >>> r = solve("tanh", c=0.5, gamma=[0.1, 1.0], model="both")
    >>> bool(np.all(r.attention > r.linear))       # μ = 0: attention memorises worse
    True
    >>> sorted(r.to_dict())[:3]
    ['E_attention', 'E_linear', 'F_attention']
    """

    c: np.ndarray
    gamma: np.ndarray
    model: str
    attention: np.ndarray | None = None
    linear: np.ndarray | None = None
    F_attention: np.ndarray | None = None
    F_linear: np.ndarray | None = None
    bulk: np.ndarray | None = None
    residuals: np.ndarray | None = None
    iterations: int | None = None
    parameters: dict = field(default_factory=dict)

    @property
    def shape(self) -> tuple:
        """The broadcast shape of (c, γ)."""
        return np.shape(self.gamma)

    @property
    def E(self):
        """E of the solved model; ``{"attention": E_A, "linear": E_LR}`` when model='both'."""
        if self.model == "both":
            return {"attention": self.attention, "linear": self.linear}
        return getattr(self, self.model)

    @property
    def F(self):
        """F(γ) of the solved model; a dict of both when model='both'."""
        if self.model == "both":
            return {"attention": self.F_attention, "linear": self.F_linear}
        return getattr(self, "F_" + self.model)

    def to_dict(self) -> dict:
        """A JSON-ready dict: points, E and F per model (decimal strings for mpmath numbers),
        the bulk solution, residuals, iterations and parameters."""
        digits = self.parameters.get("dps") or 17
        return {
            "c": _plain(self.c), "gamma": _plain(self.gamma), "model": self.model,
            **{key: _plain(getattr(self, name), digits) for key, name in (
                ("E_attention", "attention"), ("E_linear", "linear"), ("F_attention", "F_attention"),
                ("F_linear", "F_linear"), ("bulk", "bulk"), ("residuals", "residuals"))},
            "iterations": self.iterations,
            "parameters": _plain(self.parameters, digits),
        }


def _plain(v, digits: int = 17):
    """numpy/mpmath values to JSON-ready Python values (mpmath numbers as decimal strings of ``digits``)."""
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, dict):
        return {k: _plain(x, digits) for k, x in v.items()}
    if isinstance(v, (list, tuple, np.ndarray)):
        arr = np.asarray(v)
        if arr.dtype != object:
            return arr.tolist()
        return [_plain(x, digits) for x in arr] if arr.ndim else _plain(arr.item(), digits)
    if isinstance(v, np.generic):
        return v.item()
    import mpmath

    return mpmath.nstr(v, digits)


@lru_cache(maxsize=None)
def _linear_F(modules: str):
    """F_LR(c, γ, ‖μ‖²) of docs/theory.md §3 compiled for a lambdify module."""
    from .backends.compile import CompiledExprs
    from .systems import linear_system
    from .systems.symbols import c, gamma, m2

    return CompiledExprs([linear_system().closed_form["F"]], (c, gamma, m2), modules)


def _linear_F_values(ctx, c, gamma, snr):
    fn = _linear_F(ctx.lambdify_modules)
    if ctx.name == "numpy":
        return np.asarray(fn(np.sqrt(c), gamma, snr * np.ones_like(c))[0], dtype=float)
    return np.array([fn(ctx.sqrt(c[i:i + 1])[0], gamma[i], snr)[0] for i in range(len(c))], dtype=object)


def solve(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention", backend: str = "numpy",
          dps: int | None = None, n: int | None = None, diagonal: str = "f",
          correction: str | None = None) -> TheoryResult:
    r"""The deterministic equivalent at the points (c, γ): E(γ) = −γ² F'(γ), F, the bulk solution.

    Parameters
    ----------
    f : activation spec (catalog name, SymPy string in x, sympy expr, callable, or Activation)
    c : p/n > 0, scalar or array (broadcast against ``gamma``)
    gamma : ridge γ > 0, scalar or array
    geometry : :class:`~symattn.model.Geometry` (Gram matrix of μ, w_K, w_Q); default μ = w = 0
    model : 'attention' (E_A, docs/theory.md §6), 'linear' (E_LR, docs/theory.md §3) or 'both'
    backend : 'numpy' (float64, vectorised) or 'mpmath' (``dps`` digits, default 30)
    n : if given, use the finite-p diagonal d_n with p = round(c·n) instead of d = lim f(√p)/√p
    diagonal : 'f' (the kernel's diagonal is f, giving d) or 'zero' (d = 0)
    correction : None (the asymptotic theory, default) or 'finite-p' (needs ``n``): the finite-p
        corrected attention theory of :mod:`symattn.backends.finite_p` (docs/theory.md §10). The kernel is
        expanded conditionally on the exact latent part of its argument (labels and projections
        on span(μ, w_K, w_Q)), to all orders in it, with a pair-dependent slope. It matters when
        t = (‖μ‖² + Σ μᵀw_K μᵀw_Q)/√p is not small: with ``n`` given and no correction,
        t > 0.15 issues a ``FiniteSizeWarning``. E_LR (model 'linear') is not affected.

    Returns
    -------
    TheoryResult
        E, F, the bulk solution, residuals, iterations and parameters, shaped broadcast(c, gamma).

    Examples
    --------
    >>> from symattn import Geometry
    >>> r = solve("tanh", c=0.5, gamma=1.0, geometry=Geometry.aligned(snr=1.0))
    >>> round(float(r.E), 6) == round(float(memorization_error("tanh", 0.5, 1.0, Geometry.aligned(snr=1.0))), 6)
    True
    >>> r.bulk.shape, r.iterations > 0
    ((3,), True)
    """
    if model not in MODEL_CHOICES:
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    from .backends import finite_p

    finite_p.check_correction(correction, n)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    geom = as_geometry(geometry)
    ctx = context(backend, dps)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c_arr, g_arr))
    out = TheoryResult(c=np.broadcast_to(c_arr, shape).copy(), gamma=np.broadcast_to(g_arr, shape).copy(),
                       model=model, parameters={"geometry": geom.gram.tolist(), "n": n, "correction": correction,
                                                "backend": ctx.name, "dps": getattr(ctx, "dps", None)})
    with ctx:
        if model in ("linear", "both"):
            out.linear = solver.linear_error(ctx, ctx.convert(cb), ctx.convert(gb), ctx.convert(geom.snr))
            out.F_linear = _linear_F_values(ctx, ctx.convert(cb), ctx.convert(gb), ctx.convert(geom.snr))
        if model in ("attention", "both"):
            f = _activation(f)
            k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None,
                                 snr=geom.snr, dps=ctx.dps if ctx.name == "mpmath" else None)
            info = {"activation": f.name, "diagonal": diagonal}
            out.parameters.update(activation=f.name, diagonal=diagonal, a1=k.a1, s2=k.s2, nu=k.nu, d=k.d)
            if correction == "finite-p":
                info["correction"] = correction
                E = finite_p.finite_p_error(ctx, f, cb, gb, geom, n, diagonal=diagonal, point_info=info)
            else:
                if n is not None:
                    finite_p.warn_if_strong(geom, n, cb, stacklevel=3)
                E, F, sol = solver.attention_error(ctx, cb, gb, k.a1, k.s2, k.d, geom.gram, geom.rank, point_info=info)
                out.F_attention, out.bulk = F, sol.e
                out.residuals, out.iterations = sol.residual, sol.iterations
            out.attention = E
    for name in ("attention", "linear", "F_attention", "F_linear", "residuals"):
        if getattr(out, name) is not None:
            setattr(out, name, _finish(ctx, getattr(out, name), shape))
    if out.bulk is not None:
        out.bulk = np.asarray(out.bulk).reshape(shape + (3,))
    return out


def memorization_error(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention",
                       backend: str = "numpy", dps: int | None = None, n: int | None = None,
                       diagonal: str = "f", correction: str | None = None):
    r"""Deterministic-equivalent training (memorisation) error E(γ) = −γ² F'(γ).

    The thin wrapper of :func:`solve` that returns E only; the parameters are those of :func:`solve`.

    Returns
    -------
    numpy.ndarray or dict
        A float array of shape broadcast(c, gamma) -- or, for model='both',
        ``{"attention": array, "linear": array}``. With backend='mpmath' the arrays hold mpf.

    Examples
    --------
    >>> E = memorization_error("tanh", c=0.5, gamma=[0.01, 1.0], model="both")
    >>> bool(np.all(E["attention"] >= E["linear"]))      # no signal: attention memorises worse
    True
    """
    return solve(f, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps, n=n,
                 diagonal=diagonal, correction=correction).E


def _finish(ctx, values, shape):
    arr = np.asarray(values, dtype=object if ctx.name == "mpmath" else float).reshape(shape)
    return arr


def bulk_trace(f="tanh", c=0.5, gamma=1.0, phi=1, kind: str = "Q", backend: str = "numpy",
               dps: int | None = None, n: int | None = None, diagonal: str = "f"):
    r"""Proposition 1: deterministic equivalents of normalised traces of the bulk resolvent.

    With Q0 = (c K0 S K0 + γ)^{-1}, K0 = a1(S − I) + d I + s N/√p (docs/theory.md §5) and φ a polynomial,

      kind='Q':   (1/n) tr φ(S) Q0       → ∫ φ(λ) q(λ) dμ_S,   q = (1 + s² e1 λ)/Δ,
      kind='QK':  (1/n) tr φ(S) Q0 K0    → ∫ φ(λ) k(λ) dμ_S,   k = β/(√c Δ),
      kind='KQK': (1/n) tr φ(S) K0 Q0 K0 → ∫ φ(λ) r(λ) dμ_S,   r = (s² e1(γ + s² e2) + β²)/(c Δ),

    at the solution (e1, e2, e3) of the bulk system. ``phi`` is a SymPy expression (or string)
    in ``lam`` (λ). Returns an array shaped broadcast(c, gamma).
    """
    import sympy as sp

    from .backends.compile import CompiledExprs
    from .backends.kernels import INTEGRAND_ARGS
    from .systems.bulk import INTERMEDIATES, proposition1_integrand
    from .systems.symbols import lam

    if kind not in ("Q", "QK", "KQK"):
        raise ParameterError("kind", kind, "one of 'Q', 'QK', 'KQK'")
    try:
        phi_expr = sp.sympify(phi, locals={"lam": lam, "lambda_": lam})
    except (sp.SympifyError, SyntaxError, TypeError):
        raise ParameterError("phi", phi, "a polynomial in lam (e.g. 'lam**2 + 1')") from None
    if not phi_expr.free_symbols <= {lam} or not phi_expr.is_polynomial(lam):
        raise ParameterError("phi", phi, "a polynomial in lam (e.g. 'lam**2 + 1')")
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    ctx = context(backend, dps)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c_arr, g_arr))
    f = _activation(f)
    with ctx:
        k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None,
                             dps=ctx.dps if ctx.name == "mpmath" else None)
        sol = solver.solve_bulk(ctx, cb, gb, k.a1, k.s2, k.d, {"activation": f.name})
        fn = CompiledExprs([proposition1_integrand(kind, phi_expr)], INTEGRAND_ARGS,
                           ctx.lambdify_modules, intermediates=INTERMEDIATES)
        out = sol.integrate_with(ctx, fn)[:, 0]
    return _finish(ctx, out, shape)
