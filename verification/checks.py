r"""What a verification check is, and the registry it is entered in (the bottom of :mod:`symattn.verification`).

A :class:`Check` is one verifiable statement about the theory, evaluated by one method
(``symbolic``, ``mpmath``, ``float64``, ``monte-carlo``, ``contour``, ...). Running it gives a
:class:`CheckResult` with the row of the verify table::

    name, method, value, reference, tolerance, passed

and ``passed`` is decided by the check's ``relation`` between value and reference:

- ``abs``:  |value − reference| ≤ tolerance;
- ``ge``:   value ≥ reference − tolerance;   ``le``:  value ≤ reference + tolerance.

Monte Carlo checks use ``abs`` with tolerance = k·se (k stated in ``detail``); relative
tolerances are converted to absolute ones (tol_rel·|reference|) before they are reported.

The modules that define checks (:mod:`symattn.verification.cases`, :mod:`symattn.verification.finite_p`)
import only this module: :func:`register` (a decorator on a function ``run(profile) -> Outcome``)
enters a check in :data:`REGISTRY`, and :func:`run_registered` runs those registered so far.
Which modules hold checks is known only above them, in :mod:`symattn.verification.registry`
(:func:`~symattn.verification.registry.all_checks` imports them), so no import runs upward.
This module is kept free of heavy imports (the CLI parser imports the package).
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

METHODS = ("symbolic", "mpmath", "float64", "monte-carlo", "contour")
RELATIONS = ("abs", "ge", "le")


@dataclass(frozen=True)
class Profile:
    """How hard to check: Monte Carlo size and precision.

    ``n``, ``draws``: tokens and independent draws of the Monte Carlo checks; ``k_se``: the MC
    tolerance is k_se standard errors; ``dps``: mpmath digits of the high-precision checks.
    """

    name: str
    n: int
    draws: int
    k_se: float = 4.0
    dps: int = 30
    seed: int = 0


QUICK = Profile("quick", n=400, draws=8)
FULL = Profile("full", n=1000, draws=16)


@dataclass
class Outcome:
    """What a check function returns: the numbers; ``passed`` is derived from ``relation``."""

    value: float
    reference: float
    tolerance: float
    relation: str = "abs"
    detail: str = ""
    passed: bool | None = None  # set only to override the relation (e.g. a symbolic identity)

    def decide(self) -> bool:
        if self.passed is not None:
            return bool(self.passed)
        v, r, t = float(self.value), float(self.reference), float(self.tolerance)
        if not (math.isfinite(v) and math.isfinite(r) and math.isfinite(t)):
            return False
        if self.relation == "abs":
            return abs(v - r) <= t
        if self.relation == "ge":
            return v >= r - t
        if self.relation == "le":
            return v <= r + t
        raise ValueError(f"unknown relation {self.relation!r}")


@dataclass
class CheckResult:
    """One row of the verify table (plus group, relation, detail and run time)."""

    name: str
    method: str
    value: float
    reference: float
    tolerance: float
    passed: bool
    group: str = ""
    relation: str = "abs"
    detail: str = ""
    seconds: float = float("nan")

    def to_dict(self) -> dict:
        """``{"name", "method", "value", "reference", "tolerance", "passed"}`` + group, relation, detail, seconds."""
        return {
            "name": self.name, "method": self.method, "value": _num(self.value),
            "reference": _num(self.reference), "tolerance": _num(self.tolerance), "passed": bool(self.passed),
            "group": self.group, "relation": self.relation, "detail": self.detail,
            "seconds": _num(self.seconds),
        }


def _num(x):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@dataclass
class Check:
    """A registered check: ``run(profile) -> Outcome``; ``quick``: part of ``--quick``."""

    name: str
    group: str
    method: str
    run: Callable[[Profile], Outcome]
    quick: bool = True
    description: str = ""
    tags: tuple = field(default_factory=tuple)

    def __call__(self, profile: Profile) -> CheckResult:
        t0 = time.perf_counter()
        try:
            out = self.run(profile)
            passed = out.decide()
            res = CheckResult(self.name, self.method, float(out.value), float(out.reference),
                              float(out.tolerance), passed, self.group, out.relation, out.detail)
        except Exception as exc:  # a crashing check is a failing check, with the reason
            tb = traceback.extract_tb(exc.__traceback__)
            where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
            res = CheckResult(self.name, self.method, float("nan"), float("nan"), float("nan"), False,
                              self.group, "abs", f"error: {type(exc).__name__}: {exc}{where}")
        res.seconds = time.perf_counter() - t0
        return res


REGISTRY: dict[str, Check] = {}


def register(name: str, group: str, method: str, quick: bool = True, description: str = ""):
    """Decorator: register ``run(profile) -> Outcome`` as the check ``name``."""
    if method not in METHODS:
        raise ValueError(f"method {method!r} not in {METHODS}")

    def deco(fn):
        if name in REGISTRY:
            raise ValueError(f"duplicate check name {name!r}")
        REGISTRY[name] = Check(name, group, method, fn, quick=quick,
                               description=description or (fn.__doc__ or "").strip().split("\n")[0])
        return fn

    return deco


def select(checks, quick: bool = False, only: str | None = None, method: str | None = None) -> list[Check]:
    """Checks of the quick set (``quick``), whose name contains ``only``, of one ``method``."""
    out = [c for c in checks if (c.quick or not quick)]
    if only:
        keys = [k.strip() for k in only.split(",") if k.strip()]
        out = [c for c in out if any(k in c.name or k == c.group for k in keys)]
    if method:
        out = [c for c in out if c.method == method]
    return out


def run_registered(quick: bool = False, only: str | None = None, method: str | None = None,
                   profile: Profile | None = None, progress: Callable[[CheckResult], None] | None = None):
    """Run the selected checks among those registered so far; returns the list of :class:`CheckResult`.

    The selection is :func:`select` (``quick``, ``only``, ``method``) over :data:`REGISTRY` in
    registration order; BLAS runs single-threaded meanwhile. To run every check of the package,
    use :func:`symattn.verification.registry.run_checks`, which first imports all check modules.
    """
    from symattn.montecarlo import blas_threads

    profile = profile or (QUICK if quick else FULL)
    results = []
    with blas_threads(0):  # small matrices on shared cores: one BLAS thread
        for check in select(list(REGISTRY.values()), quick=quick, only=only, method=method):
            res = check(profile)
            results.append(res)
            if progress is not None:
                progress(res)
    return results
