r"""Sensitivities ∂E_A/∂θ of the attention error by implicit differentiation (docs/theory.md §6.9).

E_A = E(U, θ) is the explicit formula of :func:`symattn.systems.explicit.explicit_error` in the
traces and their γ-derivatives, which are functions of the bulk unknowns U = (e1, e2, e3) at
the solution of R(U; θ) = U − I(U; θ) = 0 (docs/theory.md §5.2). Then

  dE/dθ = ∂E/∂θ + (∂E/∂U) dU/dθ,   dU/dθ = −(∂R/∂U)^{-1} ∂R/∂θ.

For θ a Gram entry of the geometry (‖μ‖², μᵀw_K, ...) the bulk system does not depend on θ
(∂R/∂θ = 0), so dE/dθ is the explicit partial derivative ∂E/∂θ, taken through the steps of the
explicit formula (:meth:`symattn.systems.explicit.ExplicitError.diff`) and evaluated at the
traces of the solution.

For θ = γ the traces move with U: E = E(T, Ṫ, γ) and

  dE/dγ = ∂E/∂γ + Σ_k ∂E/∂T_k Ṫ_k + Σ_k ∂E/∂Ṫ_k T̈_k,

one directional derivative of the explicit formula (:func:`_directional`). With L = ∂/∂γ + Σ_j ė_j ∂/∂e_j
(ė = dU/dγ = (I − ∫∂g/∂e)^{-1}∫∂g/∂γ held fixed), differentiating (I − ∫∂g/∂e) ė = ∫∂g/∂γ once more
along the solution gives the second-order implicit derivative

  (I − ∫∂g/∂e) ë = ∫ L²g dμ_S,   T̈_k = ∫ λ^j (L²K + Σ_l ∂K/∂e_l ë_l) dμ_S

(K = q, k, r of docs/theory.md §5.3), all integrands derived in SymPy (:func:`_gamma_kernel`) and
integrated on the quadrature solver's nodes.

For θ = c the Marchenko–Pastur law itself moves, so the traces are not differentiated under the
integral: dE/dc is the central difference [E(c + h) − E(c − h)]/(2h) of the closed-form solution
(docs/theory.md §5.8) evaluated at D' = 2D + 10 digits with h = c·10^{−(D+4)/2}, for a result wanted
to D digits (D = 16 in float64): truncation O((h/c)²) = 10^{−(D+4)}, rounding 10^{−D'}/(h/c) =
10^{−(1.5D+8)} (:func:`_c_derivative`).

The evaluation is written once against an arithmetic context (:mod:`symattn.backends.context`):
float64, or mpmath at any ``dps``.
"""

from __future__ import annotations

import sys
import types
from functools import lru_cache

import numpy as np
import sympy as sp

from .activations.activation import activation as _activation
from .backends import solver
from .backends.context import context
from .errors import ParameterError
from .validation import known_keywords
from .model import as_geometry, check_c, check_gamma, kernel_constants
from .systems.explicit import explicit_error

#: rank-one names of the Gram entries θ = 𝔊_ij (those of :class:`symattn.Geometry`)
GRAM_NAMES = {"snr": (0, 0), "mu_wk": (0, 1), "mu_wq": (0, 2), "wk2": (1, 1), "wq2": (2, 2), "wk_wq": (1, 2)}


def _entry(wrt, rank):
    if isinstance(wrt, str) and wrt in GRAM_NAMES and rank == 1:
        return GRAM_NAMES[wrt]
    if wrt == "snr":
        return (0, 0)
    if (isinstance(wrt, tuple) and len(wrt) == 3 and wrt[0] == "gram"
            and all(isinstance(v, int) and 0 <= v <= 2 * rank for v in wrt[1:])):
        return tuple(sorted(wrt[1:]))
    if wrt in ("gamma", "c"):
        return wrt
    raise ParameterError("wrt", wrt, "'gamma', 'c', 'snr', 'mu_wk', 'mu_wq', 'wk2', 'wq2', 'wk_wq' (rank one) or "
                         f"('gram', i, j) with 0 <= i, j <= {2 * rank}")


@lru_cache(maxsize=None)
def _compiled(rank: int, entry: tuple, backend: str):
    """E_A and dE_A/d𝔊_ij as one function of the base symbols of the explicit formula: the steps they need,
    printed by the library's printers (:meth:`symattn.systems.explicit.ExplicitError.compile`; pure arithmetic,
    on float64 arrays or object arrays of mpmath numbers)."""
    ex = explicit_error(rank)
    return ex.compile(backend, (ex.E_A, ex.diff(ex.E_A, ex.gram[entry])))


#: the symbols of T̈ (the second γ-derivatives of the nine traces), extra arguments of :func:`_directional`
TRACE_DDOTS = tuple(sp.Symbol(f"Tddot_{k}", real=True) for k in range(9))


@lru_cache(maxsize=None)
def _directional(rank: int, backend: str):
    r"""E_A and dE_A/dγ = ∂E/∂γ + Σ ∂E/∂T_k Ṫ_k + Σ ∂E/∂Ṫ_k T̈_k as one function of the base symbols and
    T̈ (:data:`TRACE_DDOTS`): a forward chain-rule pass through the steps of the explicit formula in the
    direction (T → Ṫ, Ṫ → T̈, γ → 1)."""
    ex = explicit_error(rank)
    base = ex.base
    direction = {b: base[9 + k] for k, b in enumerate(base[:9])}
    direction.update({base[9 + k]: TRACE_DDOTS[k] for k in range(9)})
    direction[ex.gamma if hasattr(ex, "gamma") else base[-1]] = sp.Integer(1)
    total = ex.diff_along(ex.E_A, direction, "gamma_total")
    return ex.compile(backend, (ex.E_A, total), args=ex.base + TRACE_DDOTS)


@lru_cache(maxsize=None)
def _gamma_kernel(modules: str):
    r"""The integrands of the second γ-derivatives, in the (e1, e2, e3) form with ė as arguments
    (:data:`symattn.backends.kernels.E_DOTS`): L²g_i (3), L²K (3: q, k, r) and ∂K/∂e_l (9, row-major),
    L = ∂/∂γ + Σ_l ė_l ∂/∂e_l (docs/theory.md §6.9)."""
    from .backends.compile import CompiledExprs
    from .backends.kernels import E_DOTS, INTEGRAND_ARGS, KERNEL_ORDER, UNKNOWNS
    from .systems import bulk_system
    from .systems.bulk import INTERMEDIATES, RESOLVENT_KERNELS, total_derivative
    from .systems.symbols import gamma as g_sym

    def L(x):
        return total_derivative(x, g_sym) + sum((total_derivative(x, u) * v for u, v in zip(UNKNOWNS, E_DOTS)),
                                                sp.Integer(0))

    K = [RESOLVENT_KERNELS[kind] for kind in KERNEL_ORDER]
    exprs = [L(L(gi)) for gi in bulk_system().integrands] + [L(L(k)) for k in K]
    exprs += [total_derivative(k, u) for k in K for u in UNKNOWNS]
    return CompiledExprs(exprs, INTEGRAND_ARGS + E_DOTS, modules, intermediates=INTERMEDIATES)


def _gamma_derivative(ctx, sol, T, T_dot, geom_args, rank, a1v, cv, gv):
    """dE_A/dγ at the bulk solution ``sol`` (docs/theory.md §6.9): ë, T̈, then the directional derivative."""
    from .backends.kernels import TRACE_MOMENTS

    eye = ctx.convert(np.eye(3))[None]
    JI = sol.integrate(ctx, "bulk-newton")[:, 3:12].reshape(-1, 3, 3)
    e_dot = ctx.solve(eye - JI, sol.integrate(ctx, "bulk-sensitivity"))
    fn = _gamma_kernel(ctx.lambdify_modules)
    H = sol.integrate_with(ctx, fn, extra=e_dot)[:, :3]
    e_ddot = ctx.solve(eye - JI, H)
    A = sol.integrate_with(ctx, fn, extra=e_dot, moments=[(3 + i, j) for i, j in TRACE_MOMENTS])
    B = sol.integrate_with(ctx, fn, extra=e_dot, moments=[(6 + 3 * i + l, j) for i, j in TRACE_MOMENTS
                                                          for l in range(3)]).reshape(-1, 9, 3)
    T_ddot = A + ctx.matvec(B, e_ddot)
    _, dE = _directional(rank, ctx.lambdify_modules)(*T.T, *T_dot.T, *geom_args, a1v, cv, gv, *T_ddot.T)
    return dE


def _error_at(ctx, f, cv, gv, geom, diagonal):
    """E_A at the points (cv, gv) (numbers of ``ctx``, not rounded to float64): the closed-form solution of
    docs/theory.md §5.8, with the quadrature solver where the closed form does not apply."""
    from .backends import closed_runtime as closed

    k = kernel_constants(_activation(f), diagonal=diagonal, dps=ctx.dps)
    return closed.attention_points(ctx, cv, gv, k.a1, k.s2, k.d, ctx.convert(geom.gram), geom.rank)["E"]


def _c_derivative(ctx, f, cb, gb, geom, diagonal):
    """dE_A/dc at the float points (cb, gb) to the digits D of ``ctx`` (16 in float64): a central difference at
    2D + 10 digits with the relative step 10^{−(D+4)/2} (module docstring), returned in ``ctx``'s numbers."""
    import mpmath

    D = ctx.digits
    hi = context("mpmath", 2 * D + 10)
    with hi:
        cv, gv = hi.convert(cb), hi.convert(gb)
        h = cv * mpmath.mpf(10) ** (-(D + 4) / 2)
        dE = (_error_at(hi, f, cv + h, gv, geom, diagonal) - _error_at(hi, f, cv - h, gv, geom, diagonal)) / (2 * h)
    with ctx:
        return ctx.convert(dE)


@known_keywords
def sensitivity(f="tanh", c=0.5, gamma=1.0, geometry=None, wrt="snr", backend: str = "numpy",
                dps: int | None = None, diagonal: str = "f"):
    r"""dE_A/dθ for θ a Gram entry of the geometry or the ridge γ, by implicit differentiation
    (docs/theory.md §6.9).

    dE/dθ = ∂E/∂θ + (∂E/∂U)·dU/dθ with dU/dθ = −(∂R/∂U)^{-1}∂R/∂θ for the bulk unknowns U; for
    θ = 𝔊_ij the bulk residual R does not depend on θ, so dE/dθ = ∂E/∂θ of the explicit formula
    E_A = −γ² Σ_j (∂F/∂T_j) Ṫ_j at the traces T and Ṫ of the bulk solution. For θ = γ,
    dE/dγ = ∂E/∂γ + Σ_k (∂E/∂T_k) Ṫ_k + Σ_k (∂E/∂Ṫ_k) T̈_k, with T̈ from the second-order implicit
    derivative ë: (I − ∫∂g/∂e) ë = ∫ L²g dμ_S, L = ∂/∂γ + ė·∂/∂e (an identity check: E = −γ²F'(γ), so
    dE/dγ = 2E/γ − γ²F''(γ)). For θ = c (which moves the Marchenko–Pastur law) dE/dc is a central
    difference of the closed-form solution at 2D + 10 digits, step h = c·10^{−(D+4)/2} (D the digits wanted:
    16 in float64), whose truncation and rounding errors are below 10^{−D}.

    Parameters
    ----------
    f : activation spec (as for :func:`symattn.solve`)
    c, gamma : float or array_like
        p/n > 0 and the ridge γ > 0, broadcast together.
    geometry : Geometry, dict or None
        The Gram matrix 𝔊 of (μ, w_K, w_Q); None means μ = w = 0.
    wrt : str or tuple
        'gamma' (the ridge), 'snr' (‖μ‖²), 'mu_wk', 'mu_wq', 'wk2', 'wq2', 'wk_wq' (rank one), or
        ('gram', i, j): the symmetric entry 𝔊_ij = 𝔊_ji (both change together); or 'c' (the ratio p/n).
    backend : {'numpy', 'mpmath'}
        float64, or mpmath at ``dps`` digits (default 30).
    dps : int, optional
    diagonal : {'f', 'zero'}

    Returns
    -------
    numpy.ndarray
        dE_A/dθ, shape broadcast(c, gamma) (mpmath numbers with the mpmath backend).

    Examples
    --------
    >>> from symattn import Geometry
    >>> g = Geometry.aligned(snr=1.0)
    >>> float(sensitivity("tanh", 0.5, 1.0, g, wrt="snr")) < 0      # more signal, less error
    True
    """
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    geom = as_geometry(geometry)
    entry = _entry(wrt, geom.rank)
    ctx = context(backend, dps)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c_arr, g_arr))
    if entry == "c":
        dE = _c_derivative(ctx, f, cb, gb, geom, diagonal)
        return ctx.asarray(dE).reshape(shape)
    with ctx:
        k = kernel_constants(_activation(f), diagonal=diagonal, dps=ctx.dps)
        cv, gv = ctx.convert(cb), ctx.convert(gb)
        sol = solver.solve_bulk(ctx, cv, gv, k.a1, k.s2, k.d)
        T, _, T_dot = solver.regular_traces(ctx, sol)
        ex = explicit_error(geom.rank)
        gram = ctx.convert(geom.gram)
        values = {s: gram[i, j] for (i, j), s in np.ndenumerate(ex.gram) if i <= j}
        gram_args = [values[s] for s in sorted(ex.gram.free_symbols, key=str)]
        a1v = ctx.convert(k.a1) * (0 * cv + 1)
        if entry == "gamma":
            dE = _gamma_derivative(ctx, sol, T, T_dot, gram_args, geom.rank, a1v, cv, gv)
        else:
            _, dE = _compiled(geom.rank, entry, ctx.lambdify_modules)(*T.T, *T_dot.T, *gram_args, a1v, cv, gv)
    # the symbol 𝔊_ij (i < j) stands for both entries 𝔊_ij = 𝔊_ji: one derivative moves both
    return ctx.asarray(dE).reshape(shape)


class _CallableModule(types.ModuleType):
    """This module, callable as :func:`sensitivity`: ``symattn.sensitivity`` names both the module and
    the function (``import symattn.sensitivity`` binds the module to that name)."""

    def __call__(self, *args, **kwargs):
        return sensitivity(*args, **kwargs)


__doc__ = (__doc__ or "") + "\n" + sensitivity.__doc__.split("\n", 1)[1]
sys.modules[__name__].__class__ = _CallableModule
