r"""The theory layer: deterministic equivalents of the training errors E_A and E_LR.

  E(γ) = lim γ² ŷᵀ Q(γ)² ŷ = −γ² F'(γ),   F(γ) = lim ŷᵀ (ΦᵀΦ/n + γ I_n)^{-1} ŷ,

with Φ = X K_X (attention, docs/theory.md §6) or Φ = X (linear regression, docs/theory.md §3).

- :func:`solve` returns a :class:`TheoryResult` (E, F, the bulk solution, residuals, iterations,
  parameters, ``to_dict()``), the counterpart of :class:`symattn.montecarlo.SimulationResult`;
- :func:`ridgeless` gives the γ = 0 values;
- :func:`symattn.layer.memorization_error` (``sa.memorization_error``) is the thin wrapper over
  :class:`symattn.Layer` that returns E only, for every layer; this module is its paper-model engine;
- :func:`bulk_trace` evaluates the Proposition 1 traces of the bulk resolvent (docs/theory.md §5).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from .activations.activation import activation as _activation
from .backends.context import FloatContext, context
from .backends import closed_runtime as closed_form, registry, solver
from .errors import ConvergenceError, FailedPointsWarning, ParameterError, PrecisionWarning
from .validation import known_keywords
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
    precision : numpy.ndarray or None
        The estimated relative error of E_A at each point (:func:`symattn.backends.solver.precision_estimate`;
        after any escalation to mpmath), NaN at failed points.
    closed : numpy.ndarray or None
        True where the closed form (docs/theory.md §5.8) solved the point, False where the
        quadrature solver did (``method='quadrature'``, or where the closed form does not apply).
    failures : list
        With ``errors='nan'``: one dict per failed point (its parameters and ``reason``); its E is NaN.
    accuracy : symattn.accuracy.Accuracy or None
        The measured accuracy of the attention theory at each point, from the accuracy atlas
        (set by :meth:`symattn.Layer.theory`; docs/accuracy.md).
    parameters : dict
        Everything the result depends on: activation and its constants a1, ν, s², d, diagonal,
        geometry (Gram matrix), n, correction, backend and dps.
    constants : KernelConstants or None
        The kernel constants (a1, s², d) the asymptotic attention solver used (a1, d of the size of
        quadrature noise set to exact zeros); None otherwise.
    error : {'train', 'test'}
        Which error ``attention``/``linear`` hold: the training (memorisation) error, or the test
        (generalisation) error of :func:`symattn.generalization.solve_test` (docs/theory.md §14).
    readout : dict or None
        With error='test': per model, ``E_train``, ``norm2`` = ‖β‖² and ``overlaps`` = (βᵀμ, βᵀw_K, βᵀw_Q).

    The quantities at the solution (asymptotic attention theory; computed on first use, in the
    result's arithmetic, from the bulk solution ``bulk``; docs/theory.md §6.3–§6.5):

    - ``traces``: the nine traces T_Q^(0,1) = ∫λ^j q dμ_S, T_QK^(0,1,2) = ∫λ^j k dμ_S,
      T_KQK^(0..3) = ∫λ^j r dμ_S, a dict ``{"T_Q0": array, ..., "T_KQK3": array}`` in the order of
      :data:`symattn.systems.attention.TRACES`; ``trace_dots``: their γ-derivatives Ṫ_j (same keys);
    - ``centred_traces``: ``{"U_KQK1": T_KQK^(1) − 1, "U_KQK2": T_KQK^(2) − 1/c, "U_KQK3": T_KQK^(3) − (1 + 1/c)/c}``,
      computed without the cancellation (docs/theory.md §5.7);
    - ``gram``: 𝔊, the Gram matrix of (μ, w_K, w_Q) (§6.2); ``Gamma``, ``Gamma_dot``: Γ = UᵀH0^{-1}U and
      dΓ/dγ (§6.5), ``C_hat``: Ĉ (§6.4), each shaped ``shape + (N, N)``, N = 6 + 4r, so that
      F = [(I + ΓĈ)^{-1}Γ]_00 and E_A = −γ² F'(γ) (§6.6).

    Examples
    --------
    >>> r = solve("tanh", c=0.5, gamma=[0.1, 1.0], model="both")
    >>> bool(np.all(r.attention > r.linear))       # μ = 0: attention memorises worse
    True
    >>> sorted(r.to_dict())[:3]
    ['E_attention', 'E_linear', 'F_attention']
    >>> T = r.traces                               # e3 = √c T_QK^(1), e2 = 1 − c T_KQK^(2) (§6.3)
    >>> bool(np.allclose(np.sqrt(0.5) * T["T_QK1"], r.bulk[:, 2]) and np.allclose(1 - 0.5 * T["T_KQK2"], r.bulk[:, 1]))
    True
    >>> r.Gamma.shape, bool(np.allclose(r.Gamma, np.swapaxes(r.Gamma, -1, -2)))
    ((2, 10, 10), True)
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
    precision: np.ndarray | None = None
    closed: np.ndarray | None = None
    failures: list = field(default_factory=list)
    parameters: dict = field(default_factory=dict)
    accuracy: object = field(default=None, repr=False)
    constants: object = field(default=None, repr=False)
    error: str = "train"
    readout: dict | None = field(default=None, repr=False)

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

    @property
    def _at_solution(self) -> dict:
        """T, U, Ṫ, Γ, Γ̇, Ĉ at the solved points (:func:`symattn.backends.closed.solution_quantities`),
        computed once."""
        if "_solution_cache" not in self.__dict__:
            self.__dict__["_solution_cache"] = self._solution_quantities()
        return self.__dict__["_solution_cache"]

    def _solution_quantities(self) -> dict:
        if self.bulk is None or self.constants is None:
            raise ParameterError("result", f"model={self.model!r}, correction={self.parameters.get('correction')!r}",
                                 "a result of the asymptotic attention theory (model 'attention' or 'both', "
                                 "no correction): only it has traces")
        k, P = self.constants, int(np.prod(self.shape, dtype=int))
        gram = np.asarray(self.parameters["geometry"], dtype=float)
        rank = (gram.shape[0] - 1) // 2
        ctx = context(self.parameters["backend"], self.parameters["dps"])
        dv = np.asarray(k.d, dtype=object).reshape(-1) if np.ndim(k.d) else k.d
        with ctx:
            q = closed_form.solution_quantities(ctx, self.c.reshape(-1), self.gamma.reshape(-1), k.a1, k.s2, dv,
                                                self.bulk.reshape(P, 3), gram, rank)
        return {key: v.reshape(self.shape + v.shape[1:]) for key, v in q.items()}

    @property
    def traces(self) -> dict:
        """The nine traces T_j at the solution (docs/theory.md §6.3): ``{"T_Q0": array, ...}``."""
        from .systems.attention import TRACES

        return {name: self._at_solution["T"][..., j] for j, (name, _, _) in enumerate(TRACES)}

    @property
    def trace_dots(self) -> dict:
        """Ṫ_j = dT_j/dγ at the solution (docs/theory.md §6.6), keyed as :attr:`traces`."""
        from .systems.attention import TRACES

        return {name: self._at_solution["T_dot"][..., j] for j, (name, _, _) in enumerate(TRACES)}

    @property
    def centred_traces(self) -> dict:
        """U_KQK^(j) = T_KQK^(j) − M_{j−1}/c, j = 1, 2, 3 (docs/theory.md §5.7), without cancellation."""
        return {f"U_KQK{j}": self._at_solution["U"][..., j - 1] for j in (1, 2, 3)}

    @property
    def gram(self) -> np.ndarray:
        """𝔊, the Gram matrix of (μ, w_K^(1..r), w_Q^(1..r)) (docs/theory.md §6.2)."""
        return np.asarray(self.parameters["geometry"], dtype=float)

    @property
    def Gamma(self) -> np.ndarray:
        """Γ = UᵀH0^{-1}U at the solution (docs/theory.md §6.5), shape ``shape + (N, N)``."""
        return self._at_solution["Gamma"]

    @property
    def Gamma_dot(self) -> np.ndarray:
        """dΓ/dγ at the solution (docs/theory.md §6.6), shape ``shape + (N, N)``."""
        return self._at_solution["Gamma_dot"]

    @property
    def C_hat(self) -> np.ndarray:
        """Ĉ = [[0, Cᵀ], [C, 0]] (docs/theory.md §6.4), shape ``shape + (N, N)``."""
        return self._at_solution["C_hat"]

    def to_dict(self) -> dict:
        """A JSON-ready dict: points, E and F per model (decimal strings for mpmath numbers),
        the bulk solution, residuals, iterations and parameters."""
        digits = self.parameters.get("dps") or 17
        return {
            "c": _plain(self.c), "gamma": _plain(self.gamma), "model": self.model, "error": self.error,
            **{key: _plain(getattr(self, name), digits) for key, name in (
                ("E_attention", "attention"), ("E_linear", "linear"), ("F_attention", "F_attention"),
                ("F_linear", "F_linear"), ("bulk", "bulk"), ("residuals", "residuals"), ("precision", "precision"))},
            "iterations": self.iterations,
            "readout": None if self.readout is None else _plain(self.readout, digits),
            "failures": _plain(self.failures, digits),
            "accuracy": None if self.accuracy is None else self.accuracy.to_dict(),
            "parameters": _plain(self.parameters, digits),
        }


def _plain(v, digits: int = 17):
    """numpy/mpmath values to JSON-ready Python values (mpmath numbers as decimal strings of ``digits``)."""
    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, dict):
        return {k: _plain(x, digits) for k, x in v.items()}
    if isinstance(v, list) and any(isinstance(x, dict) for x in v):
        return [_plain(x, digits) for x in v]
    if isinstance(v, (list, tuple, np.ndarray)):
        arr = np.asarray(v)
        if arr.dtype != object:
            return arr.tolist()
        return [_plain(x, digits) for x in arr] if arr.ndim else _plain(arr.item(), digits)
    if isinstance(v, np.generic):
        return v.item()
    from .formatting import decimal

    return decimal(v, digits)


@lru_cache(maxsize=None)
def _linear_F(modules: str):
    """F_LR(c, γ, ‖μ‖²) of docs/theory.md §3 compiled for a lambdify module."""
    from .backends.compile import CompiledExprs
    from .systems import linear_system
    from .systems.symbols import c, gamma, m2

    return CompiledExprs([linear_system().closed_form["F"]], (c, gamma, m2), modules)


def _linear_F_values(ctx, c, gamma, snr):
    fn = _linear_F(ctx.lambdify_modules)
    return ctx.pointwise(lambda ci, gi, si: fn(ctx.sqrt(ci), gi, si)[0], c, gamma, snr + 0 * c)


@known_keywords
def solve(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention", backend: str = "numpy",
          dps: int | None = None, n: int | None = None, diagonal: str = "f",
          correction: str | None = None, errors: str = "raise", method: str | None = None) -> TheoryResult:
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
        ``|t| > 0.15`` issues a ``FiniteSizeWarning``. E_LR (model 'linear') is not affected.
    errors : 'raise' (default) or 'nan'
        What a point that cannot be solved does: raise :class:`~symattn.errors.ConvergenceError`
        (its point, residuals, iterations and reason), or become NaN while the other points are
        kept, with one :class:`~symattn.errors.FailedPointsWarning` that lists the failed points
        and their reasons (``TheoryResult.failures``).
    method : None, 'closed' or 'quadrature'
        How the asymptotic attention system is solved: in closed form (partial fractions and the
        Marchenko–Pastur Stieltjes transform, no quadrature; docs/theory.md §5.8), with the
        quadrature solver for the points where the closed form does not apply (a root of Δ on the
        support, Newton from (1/γ, 0, 0) failing, or an estimated error above 1e-11) -- the
        result's ``closed`` says which points it solved -- or by quadrature everywhere (an
        independent check). None: :data:`symattn.backends.closed.DEFAULT` ('closed').

    Every returned E is finite and in [0, 1] (ridge training error with ±1 labels: 0 ≤ E ≤
    ‖y‖²/n = 1); a value outside is a failure, never a result. E_A is checked for loss of
    precision (:func:`symattn.backends.solver.precision_estimate`): numpy points whose estimated
    relative error exceeds 1e-8 are solved again with the mpmath backend at 30, then 60 digits
    (mpmath points at more digits); a value still above 1e-8 is returned with a
    :class:`~symattn.errors.PrecisionWarning` naming the point and the estimate, one above 1e-3
    is a failure. E_LR is a cancellation-free closed form (docs/theory.md §3); numpy points
    outside c ∈ [1e-4, 1e4], γ ∈ [1e-12, 1e6] (where it is verified) are evaluated in mpmath.

    Returns
    -------
    TheoryResult
        E, F, the bulk solution, residuals, iterations, the precision estimate, failures and
        parameters, shaped broadcast(c, gamma).

    Raises
    ------
    ConvergenceError
        With ``errors='raise'``, for the first point that fails.

    Examples
    --------
    >>> from symattn import Geometry
    >>> r = solve("tanh", c=0.5, gamma=1.0, geometry=Geometry.aligned(snr=1.0))
    >>> round(float(r.E), 6) == round(float(solve("tanh", 0.5, 1.0, Geometry.aligned(snr=1.0), method="quadrature").E), 6)
    True
    >>> r.bulk.shape, r.iterations > 0
    ((3,), True)
    """
    if model not in MODEL_CHOICES:
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    method = closed_form.DEFAULT if method is None else method
    if errors not in ERRORS_CHOICES:
        raise ParameterError("errors", errors, "'raise' or 'nan'")
    from .backends import finite_p

    finite_p.check_correction(correction, n)
    engine = registry.get(attention_method(method, correction))
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    geom = as_geometry(geometry)
    ctx = context(backend, dps)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c_arr, g_arr))
    out = TheoryResult(c=np.broadcast_to(c_arr, shape).copy(), gamma=np.broadcast_to(g_arr, shape).copy(),
                       model=model, parameters={"geometry": geom.gram.tolist(), "n": n, "correction": correction,
                                                "backend": backend, "dps": ctx.dps})
    failures, warned = [], []
    with ctx:
        if model in ("linear", "both"):
            out.linear, out.F_linear = _linear_points(ctx, cb, gb, geom.snr)
            _check_values(ctx, out.linear, None, cb, gb, {"model": "linear"}, {}, failures, warned)
        if model in ("attention", "both"):
            f = _activation(f)
            k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None,
                                 snr=geom.snr, dps=ctx.dps)
            info = {"activation": f.name, "diagonal": diagonal, "method": method}
            out.parameters.update(activation=f.name, diagonal=diagonal, a1=k.a1, s2=k.s2, nu=k.nu, d=k.d)
            if correction is not None:
                info["correction"] = correction
            if n is not None:
                finite_p.warn_if_strong(geom, n, cb, stacklevel=3, correction=correction)
            found = {}
            vals = _attention_points(ctx, engine, f, k, cb, gb, geom, n, diagonal, info, errors, found)
            out.attention, precision = vals["E"], vals.get("precision")
            if "a1" in engine.inputs:   # what the solver used; the traces are computed from it on demand
                out.constants = _chopped(k)
            if engine.precision:   # the bulk solvers' own quantities (the closed form, quadrature)
                out.F_attention, out.bulk, out.residuals = vals["F"], vals["e"], vals["residual"]
                out.iterations, out.precision = vals["iterations"], precision
                out.closed = np.asarray(vals["closed"], dtype=float).reshape(shape) == 1  # docs/theory.md §5.8
            _check_values(ctx, out.attention, precision, cb, gb, dict(info, model="attention"), found, failures, warned)
    _report(failures, warned, errors, out)
    for name in ("attention", "linear", "F_attention", "F_linear", "residuals"):
        if getattr(out, name) is not None:
            setattr(out, name, _finish(ctx, getattr(out, name), shape))
    if out.precision is not None:
        out.precision = np.asarray(out.precision, dtype=float).reshape(shape)
    if out.bulk is not None:
        out.bulk = np.asarray(out.bulk).reshape(shape + (3,))
    return out


#: accepted values of ``errors`` (:func:`solve`)
ERRORS_CHOICES = ("raise", "nan")


def attention_method(method=None, correction=None) -> str:
    r"""The registered method (:mod:`symattn.backends.registry`) that :func:`solve` runs for E_A.

    ``method`` names one of the paper engine's asymptotic methods (``registry.methods(engine='paper',
    model='attention', correction=None)``: 'closed', the default, or 'quadrature'); with a ``correction`` the
    paper engine's method of that correction ('finite-p', docs/theory.md §10) runs instead.

    Parameters
    ----------
    method : {None, 'closed', 'quadrature'}
        As in :func:`solve` (None: :data:`symattn.backends.closed.DEFAULT`); another name raises ParameterError.
    correction : {None, 'finite-p'}
        As in :func:`solve`.

    Returns
    -------
    str
        The name of a method of :data:`symattn.backends.registry.METHODS`.

    Examples
    --------
    >>> attention_method(), attention_method("quadrature"), attention_method(None, "finite-p")
    ('closed', 'quadrature', 'finite-p')
    >>> attention_method(None, "finite_p")
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid correction='finite_p': allowed None or 'finite-p'
    """
    names = registry.methods(engine="paper", model="attention", correction=None)
    method = closed_form.DEFAULT if method is None else method
    if method not in names:
        raise ParameterError("method", method, " or ".join(map(repr, names)))
    if correction is None:
        return method
    found = registry.methods(engine="paper", model="attention", correction=correction)
    if not found:
        known = dict.fromkeys(v for name in registry.methods(engine="paper", model="attention")
                              for v in registry.get(name).covers["correction"])
        raise ParameterError("correction", correction, " or ".join(map(repr, known)))
    return found[0]


#: an E_A whose estimated relative error exceeds this is solved again at higher precision, then warned about
PRECISION_TARGET = 1e-8
#: an E_A whose estimated relative error still exceeds this is a failure, not a result
PRECISION_LIMIT = 1e-3
#: the mpmath digits tried, in order, for numpy points that float64 cannot resolve
ESCALATION_DPS = (30, 60)
#: where the float64 closed form of E_LR is verified against 60-digit mpmath (docs/theory.md §3)
LINEAR_FLOAT_C, LINEAR_FLOAT_GAMMA = (1e-4, 1e4), (1e-12, 1e6)


def _linear_points(ctx, cb, gb, snr):
    """E_LR and F_LR (docs/theory.md §3) at the points; numpy points outside the verified range
    (:data:`LINEAR_FLOAT_C`, :data:`LINEAR_FLOAT_GAMMA`) are evaluated in mpmath (30 digits)."""
    E = registry.call("linear", ctx, ctx.convert(cb), ctx.convert(gb), snr=ctx.convert(snr)).values
    F = _linear_F_values(ctx, ctx.convert(cb), ctx.convert(gb), ctx.convert(snr))
    if ctx.escalates:
        E, F = np.array(E, dtype=float, copy=True).reshape(-1), np.array(F, dtype=float, copy=True).reshape(-1)
        out = (cb < LINEAR_FLOAT_C[0]) | (cb > LINEAR_FLOAT_C[1]) | (gb < LINEAR_FLOAT_GAMMA[0]) | (gb > LINEAR_FLOAT_GAMMA[1])
        idx = np.nonzero(out | ~np.isfinite(E))[0]
        if idx.size:
            mctx = context("mpmath", ESCALATION_DPS[0])
            with mctx:
                Em = registry.call("linear", mctx, mctx.convert(cb[idx]), mctx.convert(gb[idx]),
                                   snr=mctx.convert(snr)).values
                Fm = _linear_F_values(mctx, mctx.convert(cb[idx]), mctx.convert(gb[idx]), mctx.convert(snr))
                E[idx], F[idx] = mctx.to_float(Em), mctx.to_float(Fm)
    return E, F


#: values this far outside [0, 1] are rounding (clipped); further out they are failures
UNIT_SLACK = 1e-12


def _check_values(ctx, values, precision, cb, gb, info, found, failures, warned):
    """Every E finite and in [0, 1] (within :data:`UNIT_SLACK`, then clipped), with an estimated
    relative error (``precision``) of at most :data:`PRECISION_LIMIT`; otherwise the point is a
    failure (NaN, appended to ``failures`` as (point, reason, error)). Points above
    :data:`PRECISION_TARGET` are appended to ``warned``. ``found``: failures of the solver,
    index → (reason, error)."""
    # the common case in bulk (finite, in [0, 1], precise enough) decided on whole arrays; the per-point
    # loop only for the points that need a message or a clip
    vf = np.asarray(ctx.to_float(values), dtype=float).reshape(values.shape[0], -1)[:, 0]
    plain = np.isfinite(vf) & (vf >= 0) & (vf <= 1)
    if precision is not None:
        est_all = np.asarray(precision, dtype=float).reshape(-1)
        plain &= est_all <= min(PRECISION_LIMIT, PRECISION_TARGET)
    if found:
        plain[np.fromiter(found, dtype=int)] = False
    for i in np.nonzero(~plain)[0]:
        point = _point(cb[i], gb[i], info)
        if i in found:
            reason, err = found[i]
            failures.append((dict(err.point or {}, **point), reason, err))
            values[i] = np.nan
            continue
        v = float(ctx.to_float(values[i]))
        est = None if precision is None else float(precision[i])
        reason = None
        if not np.isfinite(v):
            reason = f"impossible value E={v!r} (not finite)"
        elif not -UNIT_SLACK <= v <= 1 + UNIT_SLACK:
            reason = f"impossible value E={v!r} (outside [0, 1])"
        elif est is not None and not est <= PRECISION_LIMIT:
            reason = (f"precision: estimated relative error {est:.2g} of E={v:.6g}, even with mpmath at "
                      f"{max(ctx.ladder(ESCALATION_DPS) or [ctx.digits])} digits")
        if reason is not None:
            failures.append((point, reason, None))
            values[i] = np.nan
            continue
        if v < 0 or v > 1:
            values[i] = ctx.convert(min(max(v, 0.0), 1.0))
        if est is not None and est > PRECISION_TARGET:
            warned.append(dict(point, estimate=est))


def _report(failures, warned, errors, out):
    """Raise the first failure (errors='raise'), or record them all in ``out.failures`` with one
    FailedPointsWarning; one PrecisionWarning for the values returned with an estimate above 1e-8."""
    if failures and errors == "raise":
        point, reason, err = failures[0]
        if err is not None:
            raise err
        raise ConvergenceError(reason, residuals=None if out.residuals is None else [out.residuals[0]],
                               iterations=out.iterations, point=point)
    if failures:
        out.failures = [dict(point, reason=reason) for point, reason, _ in failures]
        shown = "; ".join(f"c={p['c']:g}, gamma={p['gamma']:g}"
                          + (f" ({p['model']})" if "model" in p else "") + f": {p['reason']}" for p in out.failures[:10])
        more = f"; and {len(out.failures) - 10} more" if len(out.failures) > 10 else ""
        warnings.warn(FailedPointsWarning(f"{len(out.failures)} point(s) failed and are NaN: {shown}{more}",
                                          out.failures), stacklevel=3)
    if warned:
        shown = "; ".join(f"c={p['c']:g}, gamma={p['gamma']:g}: {p['estimate']:.2g}" for p in warned[:10])
        warnings.warn(PrecisionWarning(f"{len(warned)} value(s) with an estimated relative error above "
                                       f"{PRECISION_TARGET:g} (float64 and mpmath could not resolve them better): "
                                       f"{shown}", warned), stacklevel=3)


def _point(c, gamma, info=None):
    """The description of one point: c, gamma and ``info`` (activation, diagonal, model, ...)."""
    return {"c": float(c), "gamma": float(gamma), **(info or {})}


def _attention_points(ctx, engine, f, k, cb, gb, geom, n, diagonal, info, errors, failures):
    """E_A at every point by the registered method ``engine`` (with a precision estimate: also F, the bulk
    solution, residuals, iterations and the estimate; dict of (P,) arrays), with the points that float64 (or
    the requested digits) cannot resolve solved again in mpmath (:data:`ESCALATION_DPS`); failed points are
    NaN and in ``failures``."""
    iterations = [0]
    vals = _attention_run(ctx, engine, f, k, cb, gb, geom, n, diagonal, info, errors, failures, iterations)
    for dps in ctx.ladder(ESCALATION_DPS) if engine.precision else ():
        with np.errstate(invalid="ignore"):
            E_f = np.asarray(ctx.to_float(vals["E"]), dtype=float)
            bad = ~(vals["precision"] <= PRECISION_TARGET) | ~((E_f >= 0) & (E_f <= 1))
        idx = np.array([i for i in np.nonzero(bad)[0] if i not in failures], dtype=int)
        if not idx.size:
            break
        mctx = context("mpmath", dps)
        sub_failures = {}
        with mctx:
            km = kernel_constants(f, diagonal=diagonal, n=n, c=cb[idx] if n is not None else None,
                                  snr=geom.snr, dps=dps)
            sub = _attention_run(mctx, engine, f, km, cb[idx], gb[idx], geom, n, diagonal, info, "nan", sub_failures,
                                 iterations)
        for j, i in enumerate(idx):
            if j in sub_failures or not sub["precision"][j] <= max(vals["precision"][i], PRECISION_TARGET):
                continue  # mpmath did not do better here: keep the lower-precision value and its estimate
            for key in ("E", "F", "e", "residual", "precision", "closed"):
                v = sub[key][j]
                vals[key][i] = ctx.convert(v)
    vals["iterations"] = iterations[0]
    return vals


#: a1 or d below this fraction of max(1, √ν) is quadrature noise (e.g. a1 ~ 1e-32 for an even f): an
#: exact zero, as in the generated solvers (:func:`symattn.codegen.folded_constants`)
CONSTANT_NOISE = 1e-28


def _chopped(k):
    """The kernel constants with a1, d of the size of quadrature noise set to exact zeros."""
    import dataclasses

    scale = max(1.0, float(abs(k.s2) + k.a1 * k.a1) ** 0.5)

    def chop(v):
        if np.ndim(v) or v == 0 or abs(float(v)) > CONSTANT_NOISE * scale:
            return v
        return 0 * v

    return dataclasses.replace(k, a1=chop(k.a1), d=chop(k.d))


#: the per-point arrays of a method with a precision estimate, and their shapes at one point
_SOLVER_KEYS = (("F", ()), ("e", (3,)), ("residual", ()), ("precision", ()), ("closed", ()))


def _attention_run(ctx, engine, f, k, cs, gs, geom, n, diagonal, info, errors, failures, iterations):
    """One backend's E_A at the points (cs, gs) by the registered method ``engine`` (with a precision estimate:
    also F, e, residual, precision and where the closed form solved), isolated
    (:func:`symattn.backends.closed_runtime.isolated`); adds the method's iterations to ``iterations[0]``."""
    k = _chopped(k)
    d_all = np.broadcast_to(np.asarray(k.d, dtype=object), cs.shape) if np.ndim(k.d) else None
    gram = ctx.convert(geom.gram)
    point_info = dict(info, **({"dps": ctx.dps} if ctx.dps else {}))

    def run(idx):
        d = k.d if d_all is None else ctx.asarray(d_all[idx])
        got = registry.call(engine.name, ctx, ctx.convert(cs[idx]), ctx.convert(gs[idx]), a1=k.a1, s2=k.s2, d=d,
                            gram=gram, rank=geom.rank, f=f, geometry=geom, n=n, diagonal=diagonal,
                            point_info=point_info)
        iterations[0] += got.iterations or 0
        arrays = {"E": got.values, "residual": got.residuals, "precision": got.precision, **got.extras()}
        return {key: v for key, v in arrays.items() if v is not None}

    vals = closed_form.isolated(run, cs.size, errors, failures)
    dtype = ctx.dtype
    for key, shape in (("E", ()),) + (_SOLVER_KEYS if engine.precision else ()):
        if key not in vals:  # every point failed
            vals[key] = np.full((cs.size,) + shape, np.nan, dtype=dtype if key in ("E", "F", "e") else float)
    return vals


#: the ridges of the γ → 0 extrapolation (c < 1): γ_j = RIDGELESS_GAMMA·(1 − √c)²·10^{-j}
RIDGELESS_GAMMA = 1e-3
#: for c < 1, E(γ) = E(0) + k2 γ² + k3 γ³ + … (a spectral gap at 0; docs/theory.md §7.6): the powers eliminated
#: (float64; at ``dps`` digits the context's ``richardson_powers``, 2–7)
RIDGELESS_POWERS = FloatContext.richardson_powers


def richardson(values, ratio, powers):
    r"""Richardson extrapolation to t → 0 of v(t) = L + Σ_j k_j t^{p_j} + …, from v at t_i = t_0·ratio^{-i}.

    T_{i,0} = v(t_i), T_{i,j} = (ratio^{p_j} T_{i,j−1} − T_{i−1,j−1})/(ratio^{p_j} − 1) eliminates
    t^{p_j}; the estimate is T_{J,J} (J = len(powers)), its error estimate ``|T_{J,J} − T_{J,J−1}|``.
    Works elementwise on arrays, in float64 or with mpmath numbers.

    Parameters
    ----------
    values : sequence
        v(t_0), v(t_1), …, v(t_J) (numbers or equal-shape arrays), J = len(powers).
    ratio : float
        t_{i−1}/t_i > 1.
    powers : sequence of int
        The exponents p_1 < p_2 < … of the expansion, eliminated in that order.

    Returns
    -------
    tuple
        (estimate of L, error estimate), of the shape of one value.

    Examples
    --------
    >>> L, err = richardson([2 + 0.1**2, 2 + 0.01**2, 2 + 0.001**2], 10, (2, 4))
    >>> round(float(L), 12), bool(err < 1e-8)
    (2.0, True)
    """
    if len(values) != len(powers) + 1:
        raise ParameterError("values", len(values), f"{len(powers) + 1} values for powers {tuple(powers)}")
    T = [np.asarray(v, dtype=object if np.asarray(v).dtype == object else float) for v in values]
    diag = [T[-1]]
    for p in powers:
        q = ratio**p
        T = [(q * T[i + 1] - T[i]) / (q - 1) for i in range(len(T) - 1)]
        diag.append(T[-1])
    est = diag[-1]
    return est, np.abs(est - diag[-2])


def ridgeless(f, c, gamma, geometry=None, model: str = "attention", backend: str = "numpy", dps=None, n=None,
              diagonal: str = "f", correction=None, errors: str = "raise", method=None):
    r"""E at the points with γ = 0: the γ → 0 limit, which exists for c < 1 only (docs/theory.md §7.6).

    E_LR(0) = (1 − c)/(1 + ‖μ‖²) (docs/theory.md §3); E_A(0) = 1 − c at μ = w = 0 (rank Φ = p),
    otherwise the Richardson extrapolation (:func:`richardson`, :data:`RIDGELESS_POWERS`) of the
    theory at γ_j = :data:`RIDGELESS_GAMMA`·(1 − √c)²·10^{-j}; an extrapolation whose error estimate
    exceeds 1e-9 (float64; 10^{-(dps−8)} mpmath) raises ConvergenceError. The other points (γ > 0)
    are solved as usual (:func:`solve`). The parameters are those of :func:`solve`.

    Returns
    -------
    numpy.ndarray or dict
        E shaped broadcast(c, gamma); a dict of both models for model='both'.

    Examples
    --------
    >>> float(ridgeless("tanh", 0.5, 0.0)), float(ridgeless("tanh", 0.5, 0.0, model="linear"))
    (0.5, 0.5)
    """
    if model not in MODEL_CHOICES:
        raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
    c_arr = check_c(c)
    g_raw = np.asarray(gamma, dtype=object)
    zero = np.asarray(g_raw, dtype=float) == 0
    shape = np.broadcast_shapes(c_arr.shape, g_raw.shape)
    cb = np.broadcast_to(c_arr, shape).reshape(-1)
    gb = np.broadcast_to(g_raw, shape).reshape(-1)
    zb = np.broadcast_to(zero, shape).reshape(-1)
    if np.any(cb[zb] >= 1):
        bad = float(cb[zb][cb[zb] >= 1][0])
        raise ParameterError("gamma", 0.0, "0 < gamma <= 1e12; gamma = 0 (the ridgeless limit) only where c < 1",
                             hint=f"at c={bad:g} >= 1 the training error tends to 0 as gamma -> 0 (attention like sqrt(gamma), "
                                  "or gamma^2 when M has a gap; linear regression like gamma^2): sa.limits gives "
                                  "the rate and its coefficient")
    geom = as_geometry(geometry)
    ctx = context(backend, dps)
    models = ("attention", "linear") if model == "both" else (model,)
    if method is not None:
        attention_method(method)
    kw = dict(geometry=geometry, backend=backend, dps=dps, n=n, diagonal=diagonal, correction=correction,
              errors=errors, method=method)
    out = {}
    for m in models:
        vals = np.empty(cb.size, dtype=ctx.dtype)
        pos = ~zb
        if np.any(pos):
            vals[pos] = np.asarray(solve(f, cb[pos], gb[pos].astype(ctx.dtype), model=m, **kw).E).reshape(-1)
        cz = cb[zb]
        with ctx:
            one = ctx.convert(np.ones(cz.size))
            cc = ctx.convert(cz)
            if m == "linear":
                vals[zb] = (one - cc) / (1 + ctx.convert(np.array([geom.snr]))[0])  # docs/theory.md §3
            elif geom.is_null and correction is None:
                vals[zb] = one - cc                                            # rank Φ = p: docs/theory.md §7.3
            elif cz.size:
                powers = ctx.richardson_powers
                t0 = RIDGELESS_GAMMA * (1 - np.sqrt(cz)) ** 2
                E = [np.asarray(solve(f, cz, t0 * 10.0 ** (-j), model=m, **kw).E).reshape(-1)
                     for j in range(len(powers) + 1)]
                est, err = richardson(E, 10, powers)
                tol = ctx.richardson_tol
                worst = int(np.argmax([float(v) for v in np.atleast_1d(err)]))
                if float(np.atleast_1d(err)[worst]) > tol:
                    raise ConvergenceError("the gamma -> 0 extrapolation did not converge (error estimate "
                                           f"{float(np.atleast_1d(err)[worst]):.2g} > {tol:g})",
                                           point=_point(cz[worst], 0.0, {"model": m}))
                vals[zb] = est
        out[m] = _finish(ctx, vals, shape)
    return out if model == "both" else out[model]


def _finish(ctx, values, shape):
    return ctx.asarray(values).reshape(shape)


@known_keywords
def bulk_trace(f="tanh", c=0.5, gamma=1.0, phi=1, kind: str = "Q", backend: str = "numpy",
               dps: int | None = None, n: int | None = None, diagonal: str = "f"):
    r"""Proposition 1: deterministic equivalents of normalised traces of the bulk resolvent.

    With Q0 = (c K0 S K0 + γ)^{-1}, K0 = a1(S − I) + d I + s N/√p (docs/theory.md §5) and φ a polynomial,

      kind='Q':   (1/n) tr φ(S) Q0       → ∫ φ(λ) q(λ) dμ_S,   q = (1 + s² e1 λ)/Δ,
      kind='QK':  (1/n) tr φ(S) Q0 K0    → ∫ φ(λ) k(λ) dμ_S,   k = β/(√c Δ),
      kind='KQK': (1/n) tr φ(S) K0 Q0 K0 → ∫ φ(λ) r(λ) dμ_S,   r = (s² e1(γ + s² e2) + β²)/(c Δ),

    at the solution (e1, e2, e3) of the bulk system.

    Parameters
    ----------
    f : str, sympy expression, callable or Activation
        The activation, as in :func:`solve`.
    c : float or array_like
        The ratio p/n > 0, broadcast against ``gamma``.
    gamma : float or array_like
        The ridge γ > 0.
    phi : sympy expression, str or number
        The polynomial φ in ``lam`` (λ), e.g. ``"lam**2 + 1"``.
    kind : {'Q', 'QK', 'KQK'}
        Which trace: of φ(S) Q0, φ(S) Q0 K0 or φ(S) K0 Q0 K0.
    backend : {'numpy', 'mpmath'}
        float64, or mpmath at ``dps`` digits.
    dps : int, optional
        Decimal digits of the mpmath backend.
    n : int, optional
        Use the finite-p diagonal d_n at p = round(c·n) (docs/theory.md §1.3).
    diagonal : {'f', 'zero'}
        The kernel's diagonal is f (giving d) or zero (d = 0).

    Returns
    -------
    numpy.ndarray
        The limits, shaped broadcast(c, gamma) (mpf entries with the mpmath backend).

    Examples
    --------
    Q0 is positive definite with Q0 ≤ 1/γ, so its normalised trace lies in (0, 1/γ]:

    >>> t = bulk_trace("tanh", c=0.5, gamma=[0.5, 2.0], phi=1, kind="Q")
    >>> t.shape, bool(np.all((t > 0) & (t <= 1 / np.array([0.5, 2.0]))))
    ((2,), True)
    """
    from .activations.expression import as_expression
    from .backends.compile import CompiledExprs
    from .backends.kernels import INTEGRAND_ARGS
    from .systems.bulk import INTERMEDIATES, proposition1_integrand
    from .systems.symbols import lam

    if kind not in ("Q", "QK", "KQK"):
        raise ParameterError("kind", kind, "one of 'Q', 'QK', 'KQK'")
    # a string is read by the safe expression language, never by sympify (ExpressionError names 'phi')
    phi_expr = as_expression(phi, {"lam": lam, "lambda_": lam}, "phi")
    if not phi_expr.free_symbols <= {lam} or not phi_expr.is_polynomial(lam):
        raise ParameterError("phi", phi, "a polynomial in lam (e.g. 'lam**2 + 1')")
    c_arr, g_arr = check_c(c), check_gamma(gamma)
    ctx = context(backend, dps)
    shape = np.broadcast_shapes(c_arr.shape, g_arr.shape)
    cb, gb = (np.broadcast_to(v, shape).reshape(-1) for v in (c_arr, g_arr))
    f = _activation(f)
    with ctx:
        k = kernel_constants(f, diagonal=diagonal, n=n, c=cb if n is not None else None,
                             dps=ctx.dps)
        sol = solver.solve_bulk(ctx, cb, gb, k.a1, k.s2, k.d, {"activation": f.name})
        fn = CompiledExprs([proposition1_integrand(kind, phi_expr)], INTEGRAND_ARGS,
                           ctx.lambdify_modules, intermediates=INTERMEDIATES)
        out = sol.integrate_with(ctx, fn)[:, 0]
    return _finish(ctx, out, shape)
