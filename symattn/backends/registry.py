r"""The registry of the backends' methods (in the style of ``scipy.optimize.minimize(method=...)``).

Every method is one callable with one signature,

  ``run(ctx, c, gamma, **inputs) -> EngineResult``

(ctx the arithmetic context, :mod:`symattn.backends.context`; c, γ the points; ``inputs`` the keywords the
method declares), registered under a name with its declared capabilities:

- ``inputs`` / ``optional``: the keywords it requires and those it accepts (:func:`call` passes exactly these
  from what the caller offers, so a caller offers one set of keywords to whichever method it picked);
- ``covers``: for each feature (``model``, ``backend``, ``correction``, ``error``), the values it handles;
  :meth:`Registry.require` turns an unsupported combination into a ParameterError that names the method;
- ``engine``: the layer engine it serves (:data:`symattn.layer.THEORY_ENGINES`; None for a reference
  method the layer does not use), ``precision``: it estimates each value's error (so that
  :func:`symattn.theory.solve` re-solves imprecise points at more digits), ``example``: a small case.

:func:`register`, :func:`get` and :func:`methods` read and write the module's registry :data:`METHODS`.
The same :class:`Registry` holds the layer's engines (:data:`symattn.layer.THEORY_ENGINES`), each declaring the
layers it covers. Engines whose internals live in ``solver``, ``closed_runtime`` and ``quadrature`` are
registered as thin adapters around their public entry points; each adapter returns an
:class:`~symattn.backends.result.EngineResult` (:mod:`symattn.backends.result`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import ParameterError
from .result import EngineResult

__all__ = ["Method", "Registry", "METHODS", "register", "get", "methods", "call"]


class Registry(dict):
    r"""Named entries (each with ``name`` and ``covers``, a dict feature → the values it handles).

    A dict (name → entry) that answers which entries cover a combination of features. An entry covers the value
    v of a feature when v is among ``entry.covers[feature]``, or when it declares nothing for that feature.

    Parameters
    ----------
    what : str
        What an entry is ('method', 'engine'): the name of the parameter in the errors.

    Examples
    --------
    >>> from types import SimpleNamespace as E
    >>> reg = Registry("engine")
    >>> for e in (E(name="a", covers={"kernel": ("x",)}), E(name="b", covers={"kernel": ("y", "z")})):
    ...     _ = reg.add(e)
    >>> reg.first(kernel="z").name, [e.name for e in reg.covering(kernel="x")]
    ('b', ['a'])
    >>> reg.require("a", kernel="y")
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid kernel='y': allowed 'x' with the 'a' engine
    """

    def __init__(self, what: str):
        super().__init__()
        self.what = what

    def add(self, entry, replace: bool = False):
        """Register ``entry`` under ``entry.name`` (a name already taken needs ``replace=True``)."""
        if entry.name in self and not replace:
            raise ValueError(f"the {self.what} {entry.name!r} is registered already (replace=True replaces it)")
        self[entry.name] = entry
        return entry

    def lookup(self, name: str):
        """The entry registered as ``name``; ParameterError naming the registered ones otherwise."""
        try:
            return self[name]
        except (KeyError, TypeError):
            raise ParameterError(self.what, name, "one of " + ", ".join(map(repr, self))) from None

    def covering(self, **features) -> list:
        """The entries that cover every given feature (an entry that declares no values for a feature covers
        all of them)."""
        return [e for e in self.values() if all(v in e.covers.get(k, (v,)) for k, v in features.items())]

    def require(self, name: str, hints=None, **features):
        """The entry ``name``, after checking that it covers each feature: otherwise ParameterError(feature, value,
        the values it covers, with the entry's name), with ``hints[feature]`` as its hint."""
        entry = self.lookup(name)
        for key, value in features.items():
            allowed = entry.covers.get(key, (value,))
            if value not in allowed:
                raise ParameterError(key, value, f"{_alternatives(allowed)} with the {name!r} {self.what}",
                                     hint=(hints or {}).get(key, ""))
        return entry

    def first(self, hints=None, **features):
        """The one entry that covers the features, taken in order (a callable value is evaluated only when a
        remaining entry declares that feature); ParameterError names the first feature that no remaining entry
        covers, with the values they do cover."""
        left = list(self.values())
        for key, value in features.items():
            if not any(key in e.covers for e in left):
                continue
            value = value() if callable(value) else value
            kept = [e for e in left if value in e.covers.get(key, (value,))]
            if not kept:
                allowed = sorted({v for e in left for v in e.covers.get(key, ())}, key=str)
                names = " or ".join(repr(e.name) for e in left)
                raise ParameterError(key, value, f"{_alternatives(allowed)} with the {names} {self.what}",
                                     hint=(hints or {}).get(key, ""))
            left = kept
        if len(left) != 1:
            raise ValueError(f"{len(left)} {self.what}s cover {features}: " + ", ".join(e.name for e in left))
        return left[0]


def _alternatives(values) -> str:
    return " or ".join(map(repr, values))


@dataclass(frozen=True)
class Method:
    r"""One registered method: ``run(ctx, c, gamma, **inputs) -> EngineResult`` and its declared capabilities.

    Attributes
    ----------
    name : str
    run : callable
    summary : str
        What it evaluates, with its section of docs/theory.md.
    inputs, optional : tuple of str
        The keywords ``run`` requires, and those it also accepts.
    engine : str or None
        The layer engine it serves (:data:`symattn.layer.THEORY_ENGINES`), None for a reference method.
    covers : dict
        Feature → the values handled (``model``, ``backend``, ``correction``, ``error``).
    derivative, precision : bool
        Its results carry F'(γ), and a precision estimate.
    example : callable
        () → (ctx, c, gamma, inputs): a small case (the tests run each method on it).

    Examples
    --------
    >>> m = get("finite-p")
    >>> m.engine, m.inputs, m.covers["correction"]
    ('paper', ('f', 'geometry', 'n'), ('finite-p',))
    """

    name: str
    run: Callable
    summary: str
    inputs: tuple = ()
    optional: tuple = ()
    engine: str | None = None
    covers: dict = field(default_factory=dict)
    derivative: bool = False
    precision: bool = False
    example: Callable | None = None


#: the backends' methods, by name
METHODS = Registry("method")


def register(name: str, run: Callable, *, summary: str, replace: bool = False, **declared) -> Method:
    r"""Register ``run(ctx, c, gamma, **inputs) -> EngineResult`` as the method ``name`` of :data:`METHODS`.

    Parameters
    ----------
    name : str
        The method's name (taken already: ValueError, unless ``replace``).
    run : callable
        ``run(ctx, c, gamma, **inputs)`` returning an :class:`~symattn.backends.result.EngineResult`.
    summary : str
        What it evaluates, with its section of docs/theory.md.
    replace : bool
        Replace a method registered under the same name.
    **declared
        The other fields of :class:`Method` (inputs, optional, engine, covers, derivative, precision, example).

    Returns
    -------
    Method

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> m = register("one-minus-c", lambda ctx, c, gamma: EngineResult(1 - np.asarray(c), "one-minus-c"),
    ...              summary="E = 1 − c (a test)")
    >>> call("one-minus-c", FloatContext(), [0.25], [1.0], snr=0.0).values
    array([0.75])
    >>> _ = METHODS.pop("one-minus-c")
    """
    return METHODS.add(Method(name, run, summary, **declared), replace=replace)


def get(name: str) -> Method:
    r"""The method registered as ``name`` (ParameterError naming the registered methods otherwise).

    Parameters
    ----------
    name : str

    Returns
    -------
    Method

    Examples
    --------
    >>> get("closed").engine, get("closed").inputs
    ('paper', ('a1', 's2', 'd', 'gram', 'rank'))
    """
    return METHODS.lookup(name)


def methods(**features) -> tuple:
    r"""The names of the registered methods, or of those that cover every given feature.

    Parameters
    ----------
    **features
        Feature → value (``model``, ``backend``, ``correction``, ``error``), and ``engine``: the layer engine
        served (None: the reference methods).

    Returns
    -------
    tuple of str
        In the order of registration.

    Examples
    --------
    >>> methods(engine="paper", model="attention", correction=None)
    ('closed', 'quadrature')
    """
    engine = features.pop("engine", ...)
    return tuple(m.name for m in METHODS.covering(**features) if engine is ... or m.engine == engine)


def call(name: str, ctx, c, gamma, **offered) -> EngineResult:
    r"""Run the method ``name`` at the points (c, γ) with the keywords it declares, taken from ``offered``.

    A required input missing from ``offered`` is a TypeError (a programming error); keywords the method does not
    declare are not passed.

    Parameters
    ----------
    name : str
        A registered method.
    ctx : FloatContext or MPContext
        The arithmetic.
    c, gamma : array_like
        The points (one c for the general-W methods).
    **offered
        Keywords, of which the method takes those it declares (``inputs`` and ``optional``).

    Returns
    -------
    EngineResult

    Examples
    --------
    >>> from symattn.backends.context import FloatContext
    >>> r = call("linear", FloatContext(), [0.5], [1e12], snr=0.0, gram=None)
    >>> r.method, bool(abs(r.values[0] - 1) < 1e-9)        # γ → ∞: E → 1
    ('linear', True)
    """
    m = get(name)
    missing = [k for k in m.inputs if k not in offered]
    if missing:
        raise TypeError(f"the method {name!r} needs the inputs {missing}")
    kw = {k: offered[k] for k in m.inputs + m.optional if k in offered}
    out = m.run(ctx, c, gamma, **kw)
    if not isinstance(out, EngineResult):
        raise TypeError(f"the method {name!r} returned {type(out).__name__}, not an EngineResult")
    return out


# ----------------------------------------------------------------------------- the adapters
def _derivative(ctx, E, gamma):
    """F'(γ) = −E/γ² (E = −γ² F'(γ), docs/theory.md §6)."""
    g = ctx.asarray(np.broadcast_to(np.asarray(gamma, dtype=ctx.dtype), np.shape(E)))
    return -E / (g * g)


def _paper(method, fallback=None):
    """The adapter of ``closed_runtime.attention_points(method=method)``; ``fallback``: the method that solves the
    points where ``method`` does not apply (quadrature where the closed form does not, docs/theory.md §5.8)."""
    def run(ctx, c, gamma, *, a1, s2, d, gram, rank, point_info=None):
        from .closed_runtime import attention_points

        got = attention_points(ctx, c, gamma, a1, s2, d, gram, rank, point_info=point_info, method=method)
        closed = got["closed"]
        fallbacks = None if fallback is None else np.where(closed == 1, None, fallback).astype(object)
        return EngineResult(got["E"], method, derivative=_derivative(ctx, got["E"], gamma), residuals=got["residual"],
                            iterations=got["iterations"], precision=got["precision"], fallbacks=fallbacks,
                            F=got["F"], e=got["e"], closed=closed)
    run.__name__ = run.__qualname__ = f"paper_{method}"
    return run


def _finite_p(ctx, c, gamma, *, f, geometry, n, diagonal="f", point_info=None):
    from .finite_p import finite_p_error

    E = finite_p_error(ctx, f, c, gamma, geometry, n, diagonal=diagonal, point_info=point_info)
    return EngineResult(E, "finite-p", iterations=None)


def _linear(ctx, c, gamma, *, snr):
    from .solver import linear_error

    return EngineResult(linear_error(ctx, c, gamma, snr), "linear", iterations=None)


def _bulk(ctx, c, gamma, *, a1, s2, d, point_info=None):
    from .solver import bulk_error

    E, e1, sol = bulk_error(ctx, c, gamma, a1, s2, d, point_info=point_info)
    return EngineResult(E, "bulk", derivative=_derivative(ctx, E, gamma), residuals=np.asarray(sol.residual),
                        iterations=sol.iterations, F=e1)   # e1 is the bulk system's F (E = −γ² de1/dγ)


def _residual(ctx, c, gamma, *, a1, s2, d, gram, rank, point_info=None):
    from .variants import residual_error

    E, F, sol = residual_error(ctx, c, gamma, a1, s2, d, gram, rank, point_info=point_info)
    return EngineResult(E, "residual", derivative=_derivative(ctx, E, gamma), residuals=np.asarray(sol.residual),
                        iterations=sol.iterations, F=F)


def _sum_heads(ctx, c, gamma, *, a1, s2, d, heads, mu=None, point_info=None):
    from .variants import sum_heads_error

    E, F, sol = sum_heads_error(ctx, c, gamma, a1, s2, d, heads, mu=mu, point_info=point_info)
    return EngineResult(E, "sum-heads", derivative=_derivative(ctx, E, gamma), residuals=np.asarray(sol.residual),
                        iterations=sol.iterations, F=F)


def _softmax(ctx, c, gamma, *, n, temperature, gram, rank, point_info=None):
    from .variants import softmax_error

    return EngineResult(softmax_error(ctx, c, gamma, n, temperature, gram, rank, point_info=point_info), "softmax",
                        iterations=None)


def _polynomial(ctx, c, gamma, *, alpha, beta):
    from .variants import polynomial_error

    return EngineResult(polynomial_error(ctx, c, gamma, alpha, beta), "polynomial", iterations=None)


def _general_w(ctx, c, gamma, *, f, weights, mu=None, diagonal="f", signal="latent"):
    from .general_w import arith, general_w_error

    got = general_w_error(f, c, gamma, weights, mu, signal=signal, diagonal=diagonal, ctx=arith(ctx))
    extras = {k: got[k] for k in ("F", "model", "E_linear", "correction") if k in got}
    return EngineResult(got["E"], "general-w", residuals=got.get("residual"), iterations=got.get("iterations"),
                        **extras)


def _hermite_blocks(ctx, c, gamma, *, f, weights, mu=None, signal="latent", constants=None):
    from .general_w import hermite_block_error

    got = hermite_block_error(f, c, gamma, weights, mu, signal=signal, constants=constants)
    extras = {k: v for k, v in got.items() if k not in ("E", "residual", "iterations")}
    return EngineResult(got["E"], "hermite-blocks", residuals=got.get("residual"),
                        iterations=got.get("iterations"), **extras)


def _bulk_signal(ctx, c, gamma, *, f, weights, mu, diagonal="f"):
    from .strong_direction import bulk_signal_error

    return EngineResult(bulk_signal_error(f, c, gamma, weights, mu, diagonal=diagonal), "bulk-signal",
                        iterations=None)


# ----------------------------------------------------------------------------- small cases (the tests run them)
def _float():
    from .context import FloatContext

    return FloatContext()


def _tanh():
    from ..activations.activation import activation

    return activation("tanh")


def _kernel_case():
    """tanh's kernel constants a1 = E f'(z), s² = Var f − a1², d = 0 and the null geometry (rank 1)."""
    from ..model import kernel_constants

    k = kernel_constants(_tanh())
    return dict(a1=k.a1, s2=k.s2, d=0.0, gram=np.zeros((3, 3)), rank=1)


def _geometry():
    from ..model import Geometry

    return Geometry.aligned(1.0)


def _low_rank(p: int, r: int):
    """A p×p W of rank r (the Hermite blocks' case, docs/theory.md §12.8)."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((p, r)) @ rng.standard_normal((r, p)) / np.sqrt(r)


_NUMPY = ("numpy",)
_BOTH = ("numpy", "mpmath")
_ATTENTION = {"model": ("attention",), "backend": _BOTH, "correction": (None,), "error": ("train", "test")}

for _name, _fallback, _text in (
        ("closed", "quadrature", "the closed form (partial fractions, the Marchenko–Pastur Stieltjes transform; "
                                 "quadrature where it does not apply), docs/theory.md §5.8, §6"),
        ("quadrature", None, "the bulk system by quadrature and the Woodbury step, docs/theory.md §5–6")):
    register(_name, _paper(_name, _fallback), summary=_text, inputs=("a1", "s2", "d", "gram", "rank"),
             optional=("point_info",), engine="paper", covers=_ATTENTION, derivative=True, precision=True,
             example=lambda: (_float(), [0.5, 2.0], [1e-2, 1.0], _kernel_case()))
register("finite-p", _finite_p, summary="the finite-p corrected attention theory, docs/theory.md §10",
         inputs=("f", "geometry", "n"), optional=("diagonal", "point_info"), engine="paper",
         covers={"model": ("attention",), "backend": _BOTH, "correction": ("finite-p",), "error": ("train",)},
         example=lambda: (_float(), [0.5], [0.1], dict(f=_tanh(), geometry=_geometry(), n=100)))
register("linear", _linear, summary="E_LR of ridge regression on X, docs/theory.md §3", inputs=("snr",),
         engine="paper", covers={"model": ("linear",), "backend": _BOTH, "error": ("train", "test")},
         example=lambda: (_float(), [0.5, 2.0], [1e-2, 1.0], dict(snr=1.0)))
register("bulk", _bulk, summary="E of the bulk system alone (μ = w = 0), docs/theory.md §5",
         inputs=("a1", "s2", "d"), optional=("point_info",), covers={"model": ("attention",), "backend": _BOTH},
         derivative=True, example=lambda: (_float(), [0.5], [0.1, 1.0], _kernel_case()))
register("residual", _residual, summary="the residual layer X(I + K), docs/theory.md §13.1",
         inputs=("a1", "s2", "d", "gram", "rank"), optional=("point_info",), engine="residual",
         covers={"model": ("attention",), "backend": _BOTH, "error": ("train",)}, derivative=True,
         example=lambda: (_float(), [0.5], [0.1, 1.0], _kernel_case()))
register("sum-heads", _sum_heads, summary="H heads summed, docs/theory.md §13.2",
         inputs=("a1", "s2", "d", "heads"), optional=("mu", "point_info"), engine="sum",
         covers={"model": ("attention",), "backend": _BOTH, "error": ("train",)}, derivative=True,
         example=lambda: (_float(), 0.5, [0.1, 1.0], dict(_kernel_case(), heads=[np.eye(4)] * 2)))
register("softmax", _softmax, summary="the row softmax kernel, docs/theory.md §13.3",
         inputs=("n", "temperature", "gram", "rank"), optional=("point_info",), engine="softmax",
         covers={"model": ("attention",), "backend": _BOTH, "error": ("train",)},
         example=lambda: (_float(), [0.5], [5e-4], dict(n=1000, temperature=1.0, gram=np.zeros((3, 3)), rank=1)))
register("polynomial", _polynomial, summary="Φ = X(αI + βXᵀX/p) at μ = 0, the outside reference of §13.1",
         inputs=("alpha", "beta"), covers={"model": ("attention",), "backend": _NUMPY},
         example=lambda: (_float(), 0.5, [0.3, 1.0], dict(alpha=1.0, beta=0.5)))
register("general-w", _general_w, summary="a general W, free elliptic noise, docs/theory.md §12.1–12.3 (one c)",
         inputs=("f", "weights"), optional=("mu", "diagonal", "signal"), engine="general-w",
         covers={"model": ("attention",), "backend": _BOTH, "error": ("train",)},
         example=lambda: (_float(), 0.5, [0.1, 1.0], dict(f=_tanh(), weights=np.eye(16))))
register("hermite-blocks", _hermite_blocks, summary="a low-rank W, structured Hermite blocks, docs/theory.md §12.8 "
                                                    "(one c)",
         inputs=("f", "weights"), optional=("mu", "signal", "constants"), engine="hermite-blocks",
         covers={"model": ("attention",), "backend": _NUMPY, "error": ("train",)},
         example=lambda: (_float(), 0.5, [0.1, 1.0], dict(f=_tanh(), weights=_low_rank(16, 2))))
register("bulk-signal", _bulk_signal, summary="the strong direction on W's own bulk, docs/theory.md §12.10 (one c)",
         inputs=("f", "weights", "mu"), optional=("diagonal",), engine="general-w",
         covers={"model": ("attention",), "backend": _NUMPY, "error": ("train",)},
         example=lambda: (_float(), 0.5, [0.1, 1.0], dict(f=_tanh(), weights=np.eye(16), mu=np.r_[1.0, np.zeros(15)])))

