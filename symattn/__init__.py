"""symattn: the random-matrix theory of nonlinear attention, executable.

Layers, bottom to top; each imports only the layers below it (docs/architecture.md, enforced by
import-linter in tests/test_architecture.py):

0. ``errors``, ``validation``, ``timeouts``, ``gauss`` -- exceptions, checks, time limits, quadrature rules
1. ``activations`` -- activations and their Hermite expansions
2. ``model``       -- parameters, geometry, the linearised kernel's constants; ``tokens`` -- the law of the sequence
3. ``systems``     -- the deterministic-equivalent systems as SymPy objects
4. ``backends``    -- arithmetic contexts, quadrature, compiled kernels, solvers, finite-p numerics
5. ``theory``, ``montecarlo``, ``realweights`` -- the deterministic equivalents, exact simulation, weights
   ``generalization`` -- the test error of the readout, on top of ``theory``; ``temporal`` -- ridge under correlated tokens
6. ``layer``       -- the :class:`Layer` front: one description, the theory engines' registry, ``memorization_error``, ``simulate``
7. ``limits``, ``sensitivity`` -- leading terms and derivatives
8. ``codegen``, ``figures``, ``verification``, ``sweep`` -- generated solvers, the paper's figures, the checks (the
   repository's top-level ``verification/``, installed as ``symattn.verification``), sweeps
9. ``cli``         -- the command line (the only place that parses arguments)

Public names are imported lazily so that ``import symattn`` stays fast.
"""

from __future__ import annotations

import importlib
import sys
from importlib.util import spec_from_file_location
from pathlib import Path

__version__ = "0.1.0"


class _SourceTreeVerification:
    """Finds ``symattn.verification`` in a source checkout used without installing it (the repository root on
    ``sys.path``): the package lives in the repository's top-level ``verification/``, which an install maps to
    ``symattn/verification`` (setuptools ``package-dir``, pyproject.toml). Installed only when this ``symattn`` has
    no ``verification`` package beside its modules and the checkout has one, and first on ``sys.meta_path``, so
    that the checks are always those of the checkout this ``symattn`` comes from."""

    folder = Path(__file__).resolve().parent.parent / "verification"

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != __name__ + ".verification":
            return None
        return spec_from_file_location(fullname, cls.folder / "__init__.py",
                                       submodule_search_locations=[str(cls.folder)])

    @classmethod
    def needed(cls) -> bool:
        here = Path(__file__).resolve().parent
        # a folder symattn/verification without __init__.py (the __pycache__ a checkout kept from before the move) is
        # not the package
        return not (here / "verification" / "__init__.py").is_file() and (cls.folder / "__init__.py").is_file()


if _SourceTreeVerification.needed() and not any(getattr(f, "__name__", None) == "_SourceTreeVerification"
                                               for f in sys.meta_path):
    sys.meta_path.insert(0, _SourceTreeVerification)

_PUBLIC = {
    "Activation": "activations",
    "activation": "activations",
    "CATALOG": "activations",
    "Geometry": "model",
    "TokenLaw": "tokens",
    "KernelConstants": "model",
    "kernel_constants": "model",
    "SymattnError": "errors",
    "ParameterError": "errors",
    "ActivationError": "errors",
    "ConvergenceError": "errors",
    "ExpressionError": "errors",
    "PrecisionWarning": "errors",
    "FailedPointsWarning": "errors",
    "FiniteSizeWarning": "errors",
    "AccuracyWarning": "errors",
    "Layer": "layer",
    "memorization_error": "layer",
    "generalization_error": "layer",
    "solve": "theory",
    "TheoryResult": "theory",
    "signal_strength": "model",
    "bulk_trace": "theory",
    "simulate": "layer",
    "SimulationResult": "montecarlo",
    "sweep": "sweep",
    "open_sweep": "sweep",
    "linear_system": "systems",
    "bulk_system": "systems",
    "attention_system": "systems",
    "explicit_error": "systems.explicit",
    "ExplicitError": "systems.explicit",
    "sensitivity": "sensitivity",
    "limits": "limits",
    "LimitsResult": "limits",
    "Limit": "limits",
}

#: public names that are their (callable) module
_CALLABLE_MODULES = {"limits"}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str):
    if name in _PUBLIC:
        module = importlib.import_module(f".{_PUBLIC[name]}", __name__)
        # symattn.limits is a callable module: it is the public object itself, whatever was imported first (a
        # later `import symattn.limits` rebinds the name to the module): sa.limits(...) calls its function and
        # sa.limits.linear_activation is one of its closed forms
        value = module if name in _CALLABLE_MODULES else getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'symattn' has no attribute {name!r}")


def __dir__():
    return __all__
