r"""Ridge regression on AR(1) tokens as a SymPy system: the spectral integrals of docs/theory.md §15.2 in closed form.

Under a token law the deterministic equivalent of ridge regression on X is a scalar fixed point for δ whose
terms are integrals over the spectral density s(ω) of T (docs/theory.md §15.2; :mod:`symattn.temporal` evaluates
them by the trapezoid rule). For AR(1) they are elementary. With h = a s + γ, a = c/(1 + δ), and
1/s(ω) = (1 + ρ² − 2ρ cos ω)/(1 − ρ²) linear in cos ω, the identity
⟨1/(P − Q cos ω)⟩ = 1/√(P² − Q²) (P > |Q|) gives

.. math::  \delta = \Big\langle\frac{1}{a + \gamma/s}\Big\rangle
                  = \frac{1}{\sqrt{(a + \gamma/\kappa)(a + \gamma\kappa)}},\qquad \kappa = s(0) = \frac{1+\rho}{1-\rho},

and, since γ/h = 1 − a s/h, the labels' form (iid labels, s_y ≡ 1) is
:math:`\alpha = \langle 1/h\rangle = (1 - a\delta)/\gamma`.
Then, as §15.2, with D = ‖μ‖²α + δ: F = α(1 + δ)/(1 + D), E_train = −γ²F'(γ) (δ' by implicit differentiation of
the fixed point), βᵀμ = ‖μ‖²α/(1 + D), ‖β‖² = F − E_train/γ and E_test = 1 − 2βᵀμ + ‖β‖² + (βᵀμ)².
At ρ = 0 (κ = 1) the fixed point is Marchenko–Pastur's, δ = 1/(c/(1 + δ) + γ).

*Scope.* Symbolic: AR(1) noise with iid labels, the training and the test error of ridge regression. Numeric
only (:mod:`symattn.temporal`): Markov labels, other autocorrelations (their integrals are rational in cos ω too,
but of higher degree), and attention under a token law (a Dyson equation per frequency, §15.5).
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from .base import SymbolicSystem
from .symbols import c, gamma, m2

__all__ = ["ar1_linear_system", "rho", "delta"]

rho = sp.Symbol("rho", nonnegative=True)
delta = sp.Symbol("delta", positive=True)


@lru_cache(maxsize=None)
def ar1_linear_system() -> SymbolicSystem:
    r"""Ridge regression on AR(1) tokens (iid labels) as a SymbolicSystem: one unknown δ, closed-form integrals.

    The fixed point is written :math:`\delta\sqrt{(a + \gamma/\kappa)(a + \gamma\kappa)} = 1`, a = c/(1 + δ),
    κ = (1 + ρ)/(1 − ρ) (module docstring). ``closed_form`` holds, as expressions in δ and the parameters:
    ``alpha``, ``F``, ``delta_prime`` (dδ/dγ), ``E`` (E_train = −γ²F'), ``overlap`` (βᵀμ) and ``E_test``; and
    :meth:`evaluate` is attached as ``system.evaluate(c, gamma, snr, rho)``: δ by Brent on [0, 1/γ] (the left
    side is −1 at 0 and ≥ 0 at 1/γ, since (a + γ/κ)(a + γκ) ≥ γ²), then the compiled expressions.

    Returns
    -------
    SymbolicSystem
        Unknown δ, parameters (c, γ, ‖μ‖², ρ).

    Examples
    --------
    >>> s = ar1_linear_system()
    >>> s.unknowns, s.parameters
    ((delta,), (c, gamma, m_2, rho))
    >>> sp.simplify(s.equations[0].lhs.subs(rho, 0) - delta * (c / (1 + delta) + gamma))   # ρ = 0: Marchenko–Pastur
    0
    >>> r = s.evaluate(1.0, 0.1, 1.0, 0.8)
    >>> from symattn.temporal import linear_errors
    >>> q = linear_errors(1.0, 0.1, snr=1.0, tokens={"ar1": 0.8})       # the trapezoid rule on the ω grid
    >>> bool(abs(r["train"] / q["train"] - 1) < 1e-10 and abs(r["test"] / q["test"] - 1) < 1e-10)
    True
    """
    kappa = (1 + rho) / (1 - rho)
    a = c / (1 + delta)
    phi = delta * sp.sqrt((a + gamma / kappa) * (a + gamma * kappa))
    alpha = (1 - a * delta) / gamma
    D = m2 * alpha + delta
    F = alpha * (1 + delta) / (1 + D)
    # δ(γ) from the fixed point φ(δ, γ) = 1: δ' = −φ_γ/φ_δ; every γ-derivative is the total one
    d_prime = -sp.diff(phi, gamma) / sp.diff(phi, delta)

    def total(expr):
        return sp.diff(expr, gamma) + sp.diff(expr, delta) * d_prime

    E = -gamma**2 * total(F)
    overlap = m2 * alpha / (1 + D)
    E_test = 1 - 2 * overlap + (F - E / gamma) + overlap**2
    system = SymbolicSystem(
        name="ridge regression on AR(1) tokens",
        unknowns=(delta,),
        parameters=(c, gamma, m2, rho),
        equations=[sp.Eq(phi, 1)],
        definitions={sp.Symbol("kappa", positive=True): kappa, sp.Symbol("alpha", positive=True): alpha},
        output=F,
        notes="delta: the root in [0, 1/gamma]; E_train = -gamma^2 F' with delta' implicit (docs/theory.md §15.2)",
    )
    system.closed_form = {"alpha": alpha, "F": F, "delta_prime": d_prime, "E": E, "overlap": overlap,
                          "E_test": E_test}
    compiled = sp.lambdify((delta, c, gamma, m2, rho), [E, E_test, F, overlap], modules="math")
    root = sp.lambdify((delta, c, gamma, rho), phi - 1, modules="math")

    def evaluate(cv, gv, snr, rv) -> dict:
        """E_train, E_test, F, βᵀμ and δ of the closed form at one point (floats)."""
        from scipy.optimize import brentq

        dv = brentq(lambda x: root(x, cv, gv, rv), 0.0, 1.0 / gv, xtol=1e-300, rtol=1e-15, maxiter=500)
        Ev, Tv, Fv, ov = compiled(dv, cv, gv, snr, rv)
        return {"train": Ev, "test": Tv, "F": Fv, "overlap": ov, "delta": dv}

    system.evaluate = evaluate
    return system
