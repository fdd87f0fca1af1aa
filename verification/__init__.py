"""symattn's scientific checks: limiting cases and theory-vs-simulation agreement.

Modules
-------
mc_grid : the theory-vs-Monte-Carlo grid of Theorem 1 (``python -m symattn.cli.mc_grid``).
registry : the check registry behind ``symattn verify`` (:class:`Check`, :class:`CheckResult`,
    :func:`run_checks`); the checks live in :mod:`symattn.verification.cases`, one module per limiting case.
symbolic : asymptotics of the SymPy systems (series in 1/γ, γ, c, 1/c; reduced systems).
numerics, references : independent numerical references (mpmath quadrature, partial fractions,
    contour integrals) and Monte Carlo helpers.
convergence : the theory–Monte Carlo gap against n (``symattn verify --convergence``).
__main__ : ``python -m symattn.verification`` runs ``symattn verify`` (:mod:`symattn.cli.verify`).

Importing this package is cheap (no SymPy, no solver): the CLI parser imports it.
"""

from .registry import FULL, QUICK, Check, CheckResult, Outcome, Profile, all_checks, register, run_checks

__all__ = ["Check", "CheckResult", "Outcome", "Profile", "QUICK", "FULL", "all_checks", "register", "run_checks"]
