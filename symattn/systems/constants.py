r"""The constants of an activation as SymPy numbers, substituted into a system (docs/theory.md §1.2, §4).

The systems are written in the symbols a1, s² = ν − a1² and d of the linearised kernel
(:data:`symattn.systems.symbols.KERNEL`). Given an activation, :func:`activation_constants` gives
their values, exact where the activation has closed-form Gaussian integrals
(:meth:`symattn.Activation.exact_constants`: ReLU, |x|, sin, erf's a1, ...) and SymPy Floats at
``dps`` digits otherwise (tanh, sigmoid, ...; tanh-sinh quadrature, :meth:`symattn.Activation.constants`);
:func:`substitute_constants` puts them into every equation, definition, the output and the
SymPy attributes of a system (Λ, C, Ĉ, Γ, the trace integrands, ...).
"""

from __future__ import annotations

import sympy as sp

from ..activations.activation import activation as _activation
from ..model import kernel_constants
from .symbols import a1, d, s2

__all__ = ["activation_constants", "substitute_constants"]


def activation_constants(f, diagonal: str = "f", dps: int = 30) -> dict:
    r"""{a1: value, s²: value, d: value} for the activation ``f``: exact SymPy numbers where closed forms
    exist, SymPy Floats of ``dps`` digits elsewhere (docs/theory.md §1.2, §1.3).

    a1 = E[ξ f(ξ)], s² = E f(ξ)² − (E f(ξ))² − a1², d = lim f_c(√p)/√p (``diagonal='zero'``: d = 0).
    A superlinear f (d = ∞) with ``diagonal='f'`` raises ParameterError, as in :func:`symattn.solve`.

    Parameters
    ----------
    f : activation spec (catalog name, SymPy string in x, expression, callable or Activation)
    diagonal : {'f', 'zero'}
    dps : int
        Digits of the Floats where no closed form exists.

    Returns
    -------
    dict
        Keyed by the symbols a1, s², d of :mod:`symattn.systems.symbols`.

    Examples
    --------
    >>> k = activation_constants("relu")                 # a1 = 1/2, s² = 1/4 − 1/(2π), d = 1
    >>> [k[s] for s in (a1, s2, d)]
    [1/2, (-2 + pi)/(4*pi), 1]
    >>> activation_constants("tanh")[a1]                 # no closed form: 30 digits
    0.605705509602158825583540227556
    """
    act = _activation(f)
    numeric = kernel_constants(act, diagonal=diagonal, dps=dps)   # also refuses a superlinear f with 'f'
    exact = act.exact_constants()
    exact_d = sp.Integer(0) if diagonal == "zero" else exact["d"]
    out = {}
    for sym, key, value in ((a1, "a1", numeric.a1), (s2, "s2", numeric.s2), (d, "d", numeric.d)):
        e = exact_d if key == "d" else exact[key]
        out[sym] = e if e is not None and e.is_finite else sp.Float(value, dps)
    return out


def substitute_constants(system, f=None, diagonal: str = "f", dps: int = 30):
    r"""``system`` with the constants a1, s², d of the activation ``f`` substituted (:func:`activation_constants`);
    ``system`` itself when ``f`` is None (the symbols kept).

    Every equation, definition and the output are substituted (:meth:`SymbolicSystem.subs`), and so are the
    SymPy attributes the builders add (matrices, expressions, dicts and tuples of them); the constants leave
    ``parameters``, and ``constants`` records what was substituted.

    Examples
    --------
    >>> from symattn.systems import bulk_system
    >>> s = substitute_constants(bulk_system(), "relu")
    >>> s.parameters, s.constants[a1]
    ((c, gamma), 1/2)
    """
    if f is None:
        return system
    values = activation_constants(f, diagonal=diagonal, dps=dps)
    out = _system_subs(system, values)
    out.constants = values
    out.symbolic = system   # the same system with the constants as symbols: what latex() prints
    out.notes = f"activation {_activation(f).name}: a_1, s^2, d substituted" + ("; " + out.notes if out.notes else "")
    return out


#: the fields of a SymbolicSystem (substituted by its own ``subs``)
_FIELDS = ("name", "unknowns", "parameters", "equations", "definitions", "output", "notes")


def _system_subs(system, values):
    out = system.subs(values)
    out.parameters = tuple(p for p in system.parameters if p not in values)
    for name, value in vars(system).items():
        if name not in _FIELDS:
            setattr(out, name, _subs(value, values))
    return out


def _subs(value, values):
    if isinstance(value, sp.Basic):
        return value.xreplace(values)
    if isinstance(value, sp.MatrixBase):
        return value.xreplace(values)
    if isinstance(value, dict):
        return {_subs(k, values): _subs(v, values) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_subs(v, values) for v in value)
    if all(hasattr(value, k) for k in ("equations", "subs", "parameters")):   # a nested system (e.g. ``bulk``)
        return _system_subs(value, values)
    return value
