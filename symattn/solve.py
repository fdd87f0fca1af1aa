r"""The public entry point of the theory: ``memorization_error`` (E_A and E_LR in the limit).

  E(γ) = lim γ² ŷᵀ Q(γ)² ŷ = −γ² F'(γ),   F(γ) = lim ŷᵀ (ΦᵀΦ/n + γ I_n)^{-1} ŷ,

with Φ = X K_X (attention, MATH §6) or Φ = X (linear regression, MATH §3).
"""

from __future__ import annotations

import numpy as np

from .activations import activation as _activation
from .backends.context import context
from .backends import solver
from .errors import ParameterError
from .model import as_geometry, check_c, check_gamma, kernel_constants

MODELS = ("attention", "linear", "both")


def memorization_error(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention",
                       backend: str = "numpy", dps: int | None = None, n: int | None = None,
                       diagonal: str = "f", correction: str | None = None):
    r"""Deterministic-equivalent training (memorisation) error E(γ) = −γ² F'(γ).

    Parameters
    ----------
    f : activation spec (catalog name, SymPy string in x, sympy expr, callable, or Activation)
    c : p/n > 0, scalar or array (broadcast against ``gamma``)
    gamma : ridge γ > 0, scalar or array
    geometry : :class:`~symattn.model.Geometry` (Gram matrix of μ, w_K, w_Q); default μ = w = 0
    model : 'attention' (E_A, MATH §6), 'linear' (E_LR, MATH §3) or 'both'
    backend : 'numpy' (float64, vectorised) or 'mpmath' (``dps`` digits, default 30)
    n : if given, use the finite-p diagonal d_n with p = round(c·n) instead of d = lim f(√p)/√p
    diagonal : 'f' (the kernel's diagonal is f, giving d) or 'zero' (d = 0)
    correction : None (the asymptotic theory, default) or 'finite-p' (needs ``n``): the finite-p
        corrected attention theory of :mod:`symattn.finite_p` (docs/finite_p.md). The kernel is
        expanded conditionally on the exact latent part of its argument (labels and projections
        on span(μ, w_K, w_Q)), to all orders in it, with a pair-dependent slope. It matters when
        t = (‖μ‖² + Σ μᵀw_K μᵀw_Q)/√p is not small: with ``n`` given and no correction,
        t > 0.15 issues a ``FiniteSizeWarning``. E_LR (model 'linear') is not affected.

    Returns
    -------
    numpy float array of shape broadcast(c, gamma) -- or, for model='both',
    ``{"attention": array, "linear": array}``. With backend='mpmath' the arrays hold mpf.
    """
    if model not in MODELS:
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    from . import finite_p

    finite_p.check_correction(correction, n)
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    geom = as_geometry(geometry)
    ctx = context(backend, dps)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c_arr, g_arr))
    out = {}
    with ctx:
        if model in ("linear", "both"):
            out["linear"] = solver.linear_error(ctx, ctx.convert(cb), ctx.convert(gb), ctx.convert(geom.snr))
        if model in ("attention", "both"):
            f = _activation(f)
            k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None,
                                 snr=geom.snr, dps=ctx.dps if ctx.name == "mpmath" else None)
            info = {"activation": f.name, "diagonal": diagonal}
            if correction == "finite-p":
                info["correction"] = correction
                E = finite_p.finite_p_error(f, cb, gb, geom, n, ctx, diagonal=diagonal, point_info=info)
            else:
                if n is not None:
                    finite_p.warn_if_strong(geom, n, cb, stacklevel=3)
                E, _, _ = solver.attention_error(ctx, cb, gb, k.a1, k.s2, k.d, geom.gram, geom.rank, point_info=info)
            out["attention"] = E
    result = {key: _finish(ctx, val, shape) for key, val in out.items()}
    return result if model == "both" else result[model]


def _finish(ctx, values, shape):
    arr = np.asarray(values, dtype=object if ctx.name == "mpmath" else float).reshape(shape)
    return arr


def bulk_trace(f="tanh", c=0.5, gamma=1.0, phi=1, kind: str = "Q", backend: str = "numpy",
               dps: int | None = None, n: int | None = None, diagonal: str = "f"):
    r"""Proposition 1: deterministic equivalents of normalised traces of the bulk resolvent.

    With Q0 = (c K0 S K0 + γ)^{-1}, K0 = a1(S − I) + d I + s N/√p (MATH §5) and φ a polynomial,

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
