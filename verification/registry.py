r"""The check registry behind ``symattn verify``: every module that defines checks, and running them all.

The checks themselves (:class:`Check`, :class:`Outcome`, :func:`register`, ...) are defined in
:mod:`symattn.verification.checks`, the bottom module that the check modules import; they are
re-exported here. This module sits above the check modules: :data:`CHECK_MODULES` names them,
and :func:`all_checks` imports them (which registers their checks) before :func:`run_checks`
runs the selection. This module is kept free of heavy imports (the CLI parser imports the package).
"""

from __future__ import annotations

import importlib
from typing import Callable

from .checks import (FULL, METHODS, QUICK, REGISTRY, RELATIONS, Check, CheckResult, Outcome, Profile, register,
                     run_registered, select)

__all__ = ["CHECK_MODULES", "all_checks", "run_checks", "select", "register", "REGISTRY", "Check", "CheckResult",
           "Outcome", "Profile", "QUICK", "FULL", "METHODS", "RELATIONS"]

#: The modules whose import registers checks, in the order of the verify table (relative to this package,
#: symattn.verification).
CHECK_MODULES = (
    ".cases.linear_f",
    ".cases.a1_zero",
    ".cases.mu_zero",
    ".cases.gamma_large",
    ".cases.gamma_small",
    ".cases.c_limits",
    ".finite_p",  # the finite-p correction's checks (docs/theory.md §10)
    ".cases.variants",  # residual, multi-head, softmax (docs/theory.md §13)
)


def all_checks() -> list[Check]:
    """Every registered check, in registration order (imports every module of :data:`CHECK_MODULES`)."""
    for mod in CHECK_MODULES:
        importlib.import_module(mod, __package__)
    return list(REGISTRY.values())


def run_checks(quick: bool = False, only: str | None = None, method: str | None = None,
               profile: Profile | None = None, progress: Callable[[CheckResult], None] | None = None):
    """Run the selected checks of the whole package; returns the list of :class:`CheckResult` (in order).

    Parameters
    ----------
    quick : bool
        Only the checks of the quick set, with the :data:`QUICK` profile (n = 400, 8 draws) unless
        ``profile`` is given (else :data:`FULL`: n = 1000, 16 draws).
    only : str, optional
        Comma-separated substrings of check names, or group names.
    method : str, optional
        One of :data:`METHODS`.
    profile : Profile, optional
        Monte Carlo size and precision.
    progress : callable, optional
        Called with each :class:`CheckResult` as it is done.

    Returns
    -------
    list of CheckResult

    Examples
    --------
    >>> res = run_checks(quick=True, only="gamma-large/linear", method="symbolic")
    >>> len(res) >= 1 and all(r.passed for r in res)
    True
    """
    all_checks()
    return run_registered(quick=quick, only=only, method=method, profile=profile, progress=progress)
