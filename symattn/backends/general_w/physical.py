r"""The physical checks of a deterministic equivalent and the γ-ladder (docs/theory.md §12.9), and E_A(γ) of a
general-W model with them (:func:`model_error`).

F(γ) = ∫dν/(λ + γ) and E(γ) = −γ²F'(γ) for a probability measure ν on [0, ∞): every point must satisfy
0 < γF <= 1 and (γF)² <= E <= γF, and F decrease, γF and E increase in γ. A cold-start fixed point that fails
them is solved again by γ-continuation with warm starts (:func:`physical_points`).
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ConvergenceError
from .hoperator import HOperator
from .linalg import model_arith
from .pencil import coefficient_matrix, pencil_jacobian, pencil_map, resolvent_F, sigma_pp, solve_pencil

__all__ = ["VERIFY_BELOW", "VERIFY_RATIO", "LADDER_PER_DECADE", "LADDER_BISECT", "PHYSICAL_RTOL", "physical_points",
           "model_error"]


#: below this γ a cold-start point is cross-checked against a second point at a larger γ (a requested one within
#: :data:`VERIFY_RATIO`, else one more fixed point at 2γ): the sign-flipped and small-F branches were all seen at γ <= 1e-2
VERIFY_BELOW = 0.1
#: a requested γ' <= VERIFY_RATIO·γ serves as the cross-check of the point at γ
VERIFY_RATIO = 10.0
#: γ steps per decade of the continuation ladder (docs/theory.md §12.9: 8 per decade removed every failure seen)
LADDER_PER_DECADE = 8
#: halvings (in log γ) of a continuation step that fails before giving up
LADDER_BISECT = 6
#: relative slack of the physical inequalities (the fixed point is solved to 1e-13)
PHYSICAL_RTOL = 1e-6


def _physical_reason(gamma, E, F):
    """Why (E, F) at γ cannot be a deterministic equivalent (None when it can). F(γ) = ∫dν/(λ + γ) and
    E(γ) = ∫γ²dν/(λ + γ)² for a probability measure ν on [0, ∞) (‖ŷ‖ = 1), so 0 < γF <= 1 and (γF)² <= E <= γF."""
    tol = PHYSICAL_RTOL
    if F is not None:
        gF = gamma * F
        if not math.isfinite(gF):
            return f"F = {F!r} is not finite"
        if not 0 < gF <= 1 + tol:
            return f"gamma*F = {gF:.6g} outside (0, 1]"
    if E is None:
        return None
    if not math.isfinite(E):
        return f"E = {E!r} is not finite"
    if not -1e-12 <= E <= 1 + 1e-12:
        return f"E = {E:.6g} outside [0, 1]"
    if F is not None and not (gF * gF * (1 - tol) - 1e-12 <= E <= gF * (1 + tol) + 1e-12):
        return f"E = {E:.6g} outside [(gamma*F)^2, gamma*F] = [{gF * gF:.6g}, {gF:.6g}]"
    return None


def _order_reason(g1, E1, F1, g2, E2, F2):
    """Why the points γ1 < γ2 cannot both be on the physical branch (None when they can): F decreasing, γF
    increasing, E non-decreasing and E(γ1) >= (γ1/γ2)² E(γ2) (each E term only when both are known)."""
    tol = PHYSICAL_RTOL
    if F1 < F2 * (1 - tol):
        return f"F({g1:g}) = {F1:.6g} < F({g2:g}) = {F2:.6g} (F must decrease in gamma)"
    if g1 * F1 > g2 * F2 * (1 + tol):
        return f"gamma*F({g1:g}) = {g1 * F1:.6g} > gamma*F({g2:g}) = {g2 * F2:.6g} (gamma*F must increase)"
    if E1 is not None and E2 is not None:
        if E1 > E2 * (1 + tol) + 1e-12:
            return f"E({g1:g}) = {E1:.6g} > E({g2:g}) = {E2:.6g} (E must not decrease in gamma)"
        if E1 < (g1 / g2) ** 2 * E2 * (1 - tol) - 1e-12:
            return f"E({g1:g}) = {E1:.6g} < (gamma1/gamma2)^2 E({g2:g}) (E falls faster than gamma^2)"
    return None


def physical_points(gammas, solve, evaluate, *, verify: bool = True, name: str = "general-W"):
    r"""E and F at the points γ with the physical checks and, where the cold start fails them, γ-continuation.

    Every γ is first solved from the γ → ∞ start (``solve(γ, None)``), as before; the value is kept unchanged
    when it passes the checks of a deterministic equivalent (F(γ) = ∫dν/(λ + γ), E = −γ²F', ν a probability
    measure on [0, ∞)):

    - at the point: E, F finite, 0 < γF <= 1, (γF)² <= E <= γF;
    - against every accepted point at a larger γ': F decreasing, γF increasing, E non-decreasing, and
      E(γ) >= (γ/γ')² E(γ');
    - with ``verify``, below :data:`VERIFY_BELOW` at least one such larger point within a factor
      :data:`VERIFY_RATIO` (a requested one, or one more cold fixed point at 2γ).

    A point that raises or fails a check is solved by continuation: from the nearest accepted larger γ (or a
    cold start at max(1, 10γ)) down a geometric ladder of at least :data:`LADDER_PER_DECADE` steps per decade,
    each fixed point warm-started from the previous one (``solve(γ, state)``), each step checked against the
    previous one (a failing step is halved up to :data:`LADDER_BISECT` times). When the cold value passed the
    point checks and agrees with the continued one to 1e-10 it is returned (the same number as without the
    checks). A point that still fails raises :class:`~symattn.errors.ConvergenceError` with the reasons.

    Parameters
    ----------
    gammas : array_like of float
        γ > 0 (any order, repeats allowed).
    solve : callable
        ``solve(γ, start) -> (state, F, info)``: the fixed point at γ from ``start`` (None: the cold start),
        F there (a float) and the number of evaluations; raises ConvergenceError when it does not converge.
    evaluate : callable
        ``evaluate(γ, state) -> (E, F, value)``: E (float) by the implicit derivative, F, and the value to
        return for the point (any object, e.g. mpmath numbers).
    verify : bool
        Cross-check points below :data:`VERIFY_BELOW` (one more fixed point when no requested γ is near).
    name : str
        The solver's name in the error messages.

    Returns
    -------
    values : list
        ``value`` of each γ, in the order given.
    info : dict
        'evaluations' (summed info), 'continued' (the γ solved by continuation), 'reasons' (why, per γ).

    Examples
    --------
    A toy "fixed point" whose F is the Stieltjes transform of ν = δ_1 (F = 1/(1 + γ), E = γ²/(1 + γ)²):

    >>> solve = lambda g, start: (None, 1 / (1 + g), 1)
    >>> evaluate = lambda g, st: (g * g / (1 + g) ** 2, 1 / (1 + g), g * g / (1 + g) ** 2)
    >>> values, info = physical_points([0.01, 1.0], solve, evaluate)
    >>> [round(v, 6) for v in values], info["continued"]
    ([9.8e-05, 0.25], [])
    """
    gl = [float(g) for g in np.atleast_1d(np.asarray(gammas, dtype=float))]
    accepted = {}          # γ -> (E or None, F, state)
    results = {}           # γ -> value
    reasons = {}
    continued = []
    count = [0]

    def cold(g):
        st, F, k = solve(g, None)
        count[0] += k
        return st, F

    def check_against(g, E, F, pts):
        for g2, (E2, F2, _) in pts.items():
            if g2 > g:
                why = _order_reason(g, E, F, g2, E2, F2)
            elif g2 < g:
                why = _order_reason(g2, E2, F2, g, E, F)
            else:
                continue
            if why:
                return why
        return None

    for g in sorted(set(gl), reverse=True):
        why, cold_value, cold_E = None, None, None
        try:
            st, _ = cold(g)
            E, F, value = evaluate(g, st)
            why = _physical_reason(g, E, F)
            if why is None:
                cold_value, cold_E = value, E
                why = check_against(g, E, F, accepted)
            if why is None and verify and g < VERIFY_BELOW and not any(g < g2 <= VERIFY_RATIO * g for g2 in accepted):
                gr = 2.0 * g
                str_, Fr = cold(gr)
                why = _physical_reason(gr, None, Fr) or _order_reason(g, E, F, gr, None, Fr)
                if why is None:
                    why = check_against(gr, None, Fr, accepted)
                    if why is None:
                        accepted[gr] = (None, Fr, str_)
                else:
                    why = "the cross-check at 2*gamma: " + why
        except (ConvergenceError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError, ValueError) as err:
            why = getattr(err, "reason", None) or str(err)
        if why is None:
            accepted[g] = (E, F, st)
            results[g] = value
            continue
        # γ-continuation from the nearest accepted larger γ (or a cold start at max(1, 10γ))
        reasons[g] = why
        continued.append(g)
        above = [g2 for g2 in accepted if g2 > g]
        if above:
            g0 = min(above)
            _, F0, st0 = accepted[g0]
        else:
            g0 = max(1.0, 10.0 * g)
            try:
                st0, F0 = cold(g0)
            except ConvergenceError as err:
                raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}) and the continuation's "
                                       f"start at gamma = {g0:g} did not converge: {err.reason}",
                                       point={"gamma": g}) from None
            bad = _physical_reason(g0, None, F0)
            if bad:
                raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}) and the continuation's "
                                       f"start at gamma = {g0:g} is not physical: {bad}", point={"gamma": g})
        steps = max(1, int(math.ceil(math.log10(g0 / g) * LADDER_PER_DECADE - 1e-9)))
        ladder = list(np.geomspace(g0, g, steps + 1)[1:])
        ladder[-1] = g
        gp, Fp, stp = g0, F0, st0
        while ladder:
            gk = float(ladder[0])
            bad = None
            try:
                stk, Fk, k = solve(gk, stp)
                count[0] += k
                bad = _physical_reason(gk, None, Fk) or _order_reason(gk, None, Fk, gp, None, Fp)
            except (ConvergenceError, FloatingPointError, ZeroDivisionError, np.linalg.LinAlgError, ValueError) as err:
                bad = getattr(err, "reason", None) or str(err)
            if bad is None:
                gp, Fp, stp = gk, Fk, stk
                ladder.pop(0)
                continue
            if math.log(gp / gk) < math.log(10.0) / LADDER_PER_DECADE / 2 ** LADDER_BISECT:
                raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}); the gamma-continuation "
                                       f"from {g0:g} stopped at gamma = {gp:g}: the step to {gk:g} failed ({bad})",
                                       point={"gamma": g})
            ladder.insert(0, math.sqrt(gp * gk))
        E, F, value = evaluate(g, stp)
        bad = _physical_reason(g, E, F) or check_against(g, E, F, accepted)
        if bad:
            raise ConvergenceError(f"{name}: gamma = {g:g} failed the cold start ({why}) and the continued fixed "
                                   f"point is not physical either ({bad})", point={"gamma": g})
        if cold_value is not None and abs(cold_E - E) <= 1e-10 * max(abs(E), 1e-300):
            value = cold_value
        accepted[g] = (E, F, stp)
        results[g] = value
    return [results[g] for g in gl], {"evaluations": count[0], "continued": sorted(continued), "reasons": reasons}


def model_error(m, gamma, extra=None) -> dict:
    r"""E_A(γ) = −γ² F'(γ) of a :class:`GeneralWModel` (or any model with its fields) at the points γ.

    The Dyson fixed point g* = Φ(g*, γ) is solved at each γ from the γ → ∞ start, then
    dg/dγ = (I − ∂Φ/∂g)^{-1} ∂Φ/∂γ and F' = ∂F/∂g·dg/dγ + ∂F/∂γ by complex steps (η = 1e-20).
    Each point is checked as a deterministic equivalent must be (:func:`physical_points`: 0 < γF <= 1,
    (γF)² <= E <= γF, F decreasing, γF and E increasing in γ, cross-checked below γ = 0.1); a point that fails
    (or does not converge) is solved by γ-continuation with warm starts, and one that still fails raises
    :class:`~symattn.errors.ConvergenceError` (docs/theory.md §12.9). A point that passes is the cold-start
    value, unchanged.
    :func:`general_w_error` builds the model of one W; the multi-head sum (:mod:`symattn.variants`)
    builds the model of the summed kernel.

    Parameters
    ----------
    m : GeneralWModel
    gamma : array_like
        γ > 0 values.
    extra : callable, optional
        ``extra(γ, g*, J, Hop)`` at each accepted point (J = ∂Φ/∂g there), e.g. the readout moments of
        :mod:`.response`; its values are returned as 'extra'.

    Returns
    -------
    dict
        'E' and 'F' (arrays), 'iterations' (total), 'residual' (max), 'continued' (the γ solved by
        continuation); with ``extra`` also 'extra' (a list, one per γ).

    Examples
    --------
    >>> from symattn import activation
    >>> from symattn.backends.general_w.pencil import general_w_model
    >>> m = general_w_model(activation("tanh"), 0.5, np.eye(20))
    >>> bool(np.all(model_error(m, [1.0])["E"] > 0))
    True
    """
    gammas = np.atleast_1d(np.asarray(gamma, dtype=float))
    ar = model_arith(m)
    res = [0.0]
    with ar:
        eta = ar.step

        def solve(gi, start):
            # the cold start is the γ → ∞ point diag(1/γ, 1, 1); a warm start (continuation only) runs the same
            # Anderson phase from the previous ladder point (a Newton-only warm start can land on a non-physical branch)
            gm = ar.scalar(gi)
            sol = solve_pencil(m, gm, g0=None if start is None else start[0])
            res[0] = max(res[0], float(sol.residual))
            Hm = None if m.W_traces is m.W else HOperator(m.W, ar.real(coefficient_matrix(sigma_pp(m, sol.g))[1]), ar=ar)
            F = resolvent_F(m, sol.g, gm, sol.Hop, Hm)
            return (sol.g, sol.Hop, Hm), float(ar.real(F)), sol.iterations

        def evaluate(gi, state):
            gs, Hop, Hm = state
            gm = ar.scalar(gi)
            J = pencil_jacobian(m, gs, gm, Hop, eta)
            zc = ar.complex(gm, eta * gm)
            dz = ar.imag(pencil_map(m, gs, zc, Hop)[0]).ravel() / (eta * gm)
            dg = ar.solve(np.eye(9) - J, dz)
            Fc = resolvent_F(m, gs + ar.complex(0, eta * gm) * dg.reshape(3, 3), zc, Hop, Hm)
            E = -gm * gm * ar.imag(Fc) / (eta * gm)
            more = () if extra is None else (extra(gm, gs, J, Hop),)
            return float(E), float(ar.real(Fc)), (E, ar.real(Fc)) + more

        vals, info = physical_points(gammas.ravel(), solve, evaluate, verify=ar.dps is None)
        E, Fv = (ar.convert(np.array([v[k] for v in vals], dtype=object)).reshape(gammas.shape) for k in (0, 1))
    out = {"E": E, "F": Fv, "iterations": info["evaluations"], "residual": res[0], "continued": info["continued"]}
    if extra is not None:
        out["extra"] = [v[2] for v in vals]
    return out
