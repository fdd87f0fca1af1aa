"""symattn: the random-matrix theory of nonlinear attention, executable.

Layers (each imports only from the ones before it):

1. ``activations``  -- activations and their Hermite expansions
2. ``model``        -- parameters, geometry and the linearised kernel
3. ``systems``      -- the deterministic-equivalent systems as SymPy objects
4. ``backends``     -- numeric evaluation (numpy, mpmath, generated code)
5. ``montecarlo``   -- exact finite-n simulation
6. ``verification``, ``cli``, ``plotting`` -- built on the above

Public names are imported lazily so that ``import symattn`` stays fast.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_PUBLIC = {
    "Activation": "activations",
    "activation": "activations",
    "CATALOG": "activations",
    "Geometry": "model",
    "KernelConstants": "model",
    "kernel_constants": "model",
    "SymattnError": "errors",
    "ParameterError": "errors",
    "ActivationError": "errors",
    "ConvergenceError": "errors",
    "memorization_error": "solve",
    "bulk_trace": "solve",
    "simulate": "montecarlo",
    "SimulationResult": "montecarlo",
    "linear_system": "systems",
    "bulk_system": "systems",
    "attention_system": "systems",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str):
    if name in _PUBLIC:
        module = importlib.import_module(f".{_PUBLIC[name]}", __name__)
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'symattn' has no attribute {name!r}")


def __dir__():
    return __all__
