r"""One fixed-point driver for the Dyson equations x = Φ(x) of the backends (after mpmath's ``findroot``).

The four Dyson loops (:func:`symattn.backends.general_w.solve_pencil`, ``general_w.hermite._solve``,
``symattn.variants._concat_solve``, :func:`symattn.backends.finite_p.solve_pencil`) run on
:func:`fixed_point`. A *strategy* proposes the next iterate from the current one and its image;
the driver owns everything else:

- the tolerance: stop when ρ(Φ(x), x) < ``tol`` (≤ with ``inclusive``), ρ the engine's relative residual;
- the escalation from one strategy to the next (``strategies[k+1].ready(ρ)``, e.g. Newton below a residual);
- stall detection and restarts (a ``restart`` policy: :class:`StallRestart`, :class:`GrowthRestart`);
- a rounding ``floor``: a residual that stops decreasing below it returns the best point;
- the failure: :class:`~symattn.errors.ConvergenceError` with ``iterations``, ``residuals``, ``restarts``
  and ``history`` (the tail of the residuals).

Strategies:

- :class:`Damped`: x ← x + ϑ r, r = Φ(x) − x;
- :class:`Anderson`: Anderson (type II) mixing of depth m on the differences ΔX, ΔR of the last m + 1
  iterates, x ← x + β r − (ΔX + β ΔR) α with α = argmin ‖ΔR α − r‖ (``solver='lstsq'``) or the
  Tikhonov normal equations (ΔRᵀΔR + λI) α = ΔRᵀ r (``solver='ridge'``); with no history the damped step ϑ r;
- :class:`Newton`: x ← x + (I − ∂Φ/∂x)^{-1} r by an engine callable, with step halving when the
  residual does not decrease and its own rounding floor.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from ..errors import ConvergenceError
from .result import EngineResult

__all__ = ["FixedPointResult", "Damped", "Anderson", "Newton", "StallRestart", "GrowthRestart", "fixed_point"]


class FixedPointResult(EngineResult):
    """The outcome of :func:`fixed_point`: an :class:`~symattn.backends.result.EngineResult` (scipy's
    ``OptimizeResult``) with ``values`` the fixed point, ``residuals`` its residual, ``method`` the strategy
    active at the end, and the driver's extras.

    Attributes
    ----------
    x : array
        The fixed point (``values``): Φ(x_k) at the last evaluation (or at the best point when a floor stopped it).
    residual : float
        ρ(Φ(x_k), x_k) of the returned point (``residuals``).
    iterations : int
        Evaluations of Φ.
    restarts : int
        Restarts (history resets) of the restart policy.
    strategy : str
        The strategy active at the end ('damped', 'anderson', 'newton'; ``method``).
    converged : bool
        True (a result that did not converge is raised as ConvergenceError instead).
    history : list of float
        The last residuals (at most ``keep`` of them).
    aux : object
        What the engine's ``evaluate`` returned with Φ at the returned point.

    Examples
    --------
    >>> r = FixedPointResult(x=[0.5], residual=1e-14, iterations=3, restarts=0, strategy="newton")
    >>> r.x is r.values, r.strategy, r.converged
    (True, 'newton', True)
    """

    def __init__(self, x, residual, iterations, restarts, strategy, converged=True, history=None, aux=None):
        super().__init__(x, strategy, residuals=residual, iterations=iterations, restarts=restarts,
                         converged=converged, history=[] if history is None else history, aux=aux)

    x = property(lambda self: self["values"])
    residual = property(lambda self: self["residuals"])
    strategy = property(lambda self: self["method"])


class State:
    """What ``evaluate`` is told about the iteration: the active ``strategy`` name, the previous
    ``residual`` (inf at the start) and the last ``action`` ('start', 'damped', 'anderson',
    'newton', 'halve', 'restart')."""

    def __init__(self, strategy):
        self.strategy, self.residual, self.action = strategy, np.inf, "start"


class Damped:
    """The damped step x ← x + ϑ (Φ(x) − x).

    Parameters
    ----------
    damping : float
        ϑ.
    below : float
        Escalation: the strategy is entered once the residual is below this (inf: at once).
    """

    name = "damped"

    def __init__(self, damping=0.5, below=np.inf):
        self.damping, self.below = damping, below

    def ready(self, res):
        return res < self.below

    def reset(self):
        pass

    def step(self, x, fx, res, aux, state):
        return x + (fx - x) * self.damping if self.damping != 0.5 else x + (fx - x) / 2


class Anderson:
    r"""Anderson mixing of depth m.

    With r_k = Φ(x_k) − x_k, ΔX, ΔR the consecutive differences of the last m + 1 iterates and β the mixing,

    .. math:: x_{k+1} = x_k + β r_k − (ΔX + β ΔR)\,α,

    α the least-squares solution of ΔR α ≈ r_k (``solver='lstsq'``, or a callable (ΔR, r) → α), or of the
    Tikhonov normal equations (PᵀP + λ max diag(PᵀP) I) α = Pᵀ p(r_k) (``solver='ridge'``, P the projected
    differences p(Δr) by ``project``, a real float64 image of a complex or mpmath vector). With no history
    (the first step, after a restart) the damped step x + ϑ r. ``check_finite``: a non-finite Anderson
    candidate falls back to the damped step.
    """

    name = "anderson"

    def __init__(self, depth=5, mixing=1.0, damping=0.5, solver="lstsq", ridge=0.0, project=None,
                 check_finite=True, below=np.inf):
        self.depth, self.mixing, self.damping = depth, mixing, damping
        self.solver, self.ridge, self.project, self.check_finite = solver, ridge, project, check_finite
        self.below = below
        self.reset()

    def ready(self, res):
        return res < self.below

    def reset(self):
        self.X, self.R, self.P = [], [], []

    def step(self, x, fx, res, aux, state):
        shape = np.shape(x)
        xf = x.reshape(-1)
        r = (fx - x).reshape(-1)
        if self.solver == "ridge":
            return self._ridge(xf, r, aux).reshape(shape)
        self.X.append(xf.copy())
        self.R.append(r)
        if len(self.X) > self.depth + 1:
            self.X.pop(0)
            self.R.pop(0)
        new = xf + r / 2 if self.damping == 0.5 else xf + self.damping * r
        if len(self.X) >= 2:
            dR = np.diff(np.array(self.R), axis=0).T
            dX = np.diff(np.array(self.X), axis=0).T
            lstsq = self.solver if callable(self.solver) else (lambda A, b: np.linalg.lstsq(A, b, rcond=None)[0])
            coef = lstsq(dR, r)
            cand = xf + r - (dX + dR) @ coef if self.mixing == 1.0 else xf + self.mixing * r - (dX + self.mixing * dR) @ coef
            if not self.check_finite or np.all(np.isfinite(np.asarray(cand, dtype=complex))):
                new = cand
        return new.reshape(shape)

    def _ridge(self, xf, r, aux):
        proj = (lambda v, x: v) if self.project is None else self.project
        rs = proj(r, xf)
        if self.X:
            dr = r - self.R[-1]
            self.P.append(proj(dr, xf))
            self.U = getattr(self, "U", [])
            self.U.append(xf - self.X[-1] + self.mixing * dr)
            if len(self.P) > self.depth:
                self.P.pop(0)
                self.U.pop(0)
        else:
            self.U = []
        self.X, self.R = [xf], [r]
        if self.P:
            D = np.column_stack(self.P)
            A = D.T @ D
            reg = self.ridge * max(float(np.max(np.diagonal(A))), 1e-300)
            alpha = np.linalg.solve(A + reg * np.eye(len(self.P)), D.T @ rs)
            step = self.mixing * r - np.column_stack(self.U) @ alpha
        else:
            step = self.damping * r
        return xf + step


class Newton:
    r"""Newton's method on x − Φ(x): x ← x + δ, δ = ``solve(x, Φ(x), aux)`` ≈ (I − ∂Φ/∂x)^{-1}(Φ(x) − x).

    ``solve`` returns (δ, Φ(x), aux), the last two possibly refreshed (an engine that recomputes Φ with its
    Jacobian), or None (no step: the driver takes the previous strategy's step).

    Safeguards, on the residual ρ against the previous Newton point's ρ₀:

    - ``floor``: ρ ≥ ρ₀ with ρ₀ < floor returns the previous Newton point (rounding floor);
    - ``halve='increase'`` (ρ > ρ₀) or ``'no-decrease'`` (ρ ≥ ρ₀): x ← x₀ + (x − x₀)/2; with
      ``rearm=True`` the next iterate is then accepted without a test (ρ₀ ← ∞), else halvings repeat, at most
      ``max_halvings`` times (then the driver raises).

    ``halve='never'``: no halving. ``halve_nonfinite``: a non-finite image after a Newton step is halved
    (not a failure).

    Parameters
    ----------
    below : float
        Escalation: Newton takes over once the residual is below this.
    sticky : bool
        Once entered, stay (else re-tested at each iteration).
    """

    name = "newton"

    def __init__(self, solve, below, floor=0.0, halve="increase", rearm=True, max_halvings=None, sticky=True,
                 halve_nonfinite=False):
        self.solve, self.below, self.floor = solve, below, floor
        self.halve_nonfinite = halve_nonfinite
        self.halve, self.rearm, self.max_halvings, self.sticky = halve, rearm, max_halvings, sticky
        self.reset()

    def ready(self, res):
        return res < self.below

    def reset(self):
        self.prev = None      # (x, ρ, Φ(x), aux) of the last Newton point
        self.halvings = 0

    def step(self, x, fx, res, aux, state):
        p = self.prev
        if p is not None:
            worse = (res > p[1] if self.halve == "increase" else not res < p[1]) if self.halve != "never" else False
            if res >= p[1] and p[1] < self.floor:
                return ("done", p)
            if worse:
                self.halvings += 1
                if self.max_halvings is not None and self.halvings > self.max_halvings:
                    return ("fail", None)
                new = p[0] + (x - p[0]) / 2
                if self.rearm:
                    self.prev = (p[0], np.inf, p[2], p[3])
                return ("halve", new)
        out = self.solve(x, fx, aux)
        if out is None:
            return None
        dx, fx, aux = out
        self.prev, self.halvings = (x, res, fx, aux), 0
        return ("newton", x + dx)


class StallRestart:
    """Restart after ``stall`` evaluations without a new best residual: back to the best point with an
    empty history, then plain damped steps (ϑ = ``damping``) for ``stall``·2^k evaluations after the k-th
    restart (from the same point the same history would cycle again)."""

    def __init__(self, stall=8, damping=0.5):
        self.stall, self.damping = stall, damping
        self.best, self.best_x, self.count, self.restarts, self.damped = np.inf, None, 0, 0, 0

    def __call__(self, x, res):
        """'restart' (go to self.best_x), 'damped' (a plain damped step) or None."""
        if res < self.best:
            self.best, self.best_x, self.count = res, x, 0
        else:
            self.count += 1
        if self.count >= self.stall:
            self.count, self.restarts = 0, self.restarts + 1
            self.damped = self.stall * 2 ** self.restarts
            return "restart"
        if self.damped > 0:
            self.damped -= 1
            return "damped"
        return None


class GrowthRestart:
    """Clear the history (no change of point) when the residual exceeds ``factor`` × the best one so far."""

    def __init__(self, factor=10.0):
        self.factor, self.best, self.restarts = factor, float("inf"), 0

    def __call__(self, x, res):
        out = None
        if res > self.factor * self.best:
            self.restarts += 1
            out = "clear"
        self.best = min(self.best, res)
        return out


def _finite(v):
    try:
        return bool(np.all(np.isfinite(v)))
    except TypeError:
        import mpmath
        return all(mpmath.isfinite(e) for e in np.asarray(v).ravel())


def fixed_point(evaluate, x0, strategies, *, tol, residual, maxiter=300, restart=None, floor=None,
                inclusive=False, finite=_finite, keep=20, name="fixed-point iteration", point=None):
    r"""Solve x = Φ(x) by the strategies in turn; the driver owns tolerance, restarts, floor and failure.

    At each iteration k: (Φ(x_k), aux) = ``evaluate(x_k, state)``; ρ_k = ``residual(Φ(x_k), x_k)``
    (∞ when Φ(x_k) is not finite); stop when ρ_k < tol (≤ with ``inclusive``); raise on ρ_k = ∞.
    With a ``floor``: ρ_k ≥ min_{j<k} ρ_j while that minimum is below ``floor`` returns the best point.
    The active strategy escalates to the next while ``strategies[i+1].ready(ρ_k)``. Before a non-Newton
    step the ``restart`` policy may restart (back to its best point, all histories cleared), clear the
    histories, or ask for a damped step.

    Parameters
    ----------
    evaluate : callable (x, State) -> (Φ(x), aux)
    x0 : array
    strategies : list of Damped | Anderson | Newton
    tol : float
    residual : callable (Φ(x), x) -> float
    maxiter : int
    restart : StallRestart | GrowthRestart | None
    floor : float, optional
    inclusive : bool
    keep : int
        Residuals kept in ``history``.
    name, point : str, dict
        For the error message.

    Returns
    -------
    FixedPointResult

    Raises
    ------
    ConvergenceError
        No convergence in ``maxiter`` evaluations, a non-finite iterate, or too many Newton halvings;
        with ``iterations``, ``residuals`` (the last residual), ``restarts`` and ``history``.

    Examples
    --------
    The contraction x ↦ cos x (fixed point 0.739085…):

    >>> import numpy as np
    >>> rel = lambda fx, x: float(np.max(np.abs(fx - x) / np.abs(fx)))
    >>> out = fixed_point(lambda x, s: (np.cos(x), None), np.array([1.0]), [Anderson(depth=3)],
    ...                   tol=1e-13, residual=rel)
    >>> round(float(out.x[0]), 10), out.converged, out.strategy
    (0.7390851332, True, 'anderson')
    """
    strategies = list(strategies)
    for s in strategies:
        s.reset()
    k = 0
    state = State(strategies[0].name)
    hist = deque(maxlen=keep)
    x = x0
    best = (np.inf, None, None)
    res = np.inf
    it = 0

    def result(fx, r, aux):
        return FixedPointResult(x=fx, residual=r, iterations=it, strategy=strategies[k].name, converged=True,
                                restarts=0 if restart is None else restart.restarts, history=list(hist), aux=aux)

    for it in range(1, maxiter + 1):
        fx, aux = evaluate(x, state)
        res = residual(fx, x) if finite(fx) else np.inf
        hist.append(res)
        state.residual = res
        if res <= tol if inclusive else res < tol:
            return result(fx, res, aux)
        if not math.isfinite(float(res)):       # res may be an mpf (float() of it is exact enough here)
            s = strategies[k]
            if not (s.name == "newton" and s.halve_nonfinite and s.prev is not None):
                break
        elif floor is not None:
            if res < floor and res >= best[0]:
                return result(best[1], best[0], best[2])
            if res < best[0]:
                best = (res, fx, aux)
        while k + 1 < len(strategies) and strategies[k + 1].ready(res):
            k += 1
        s = strategies[k]
        if s.name == "newton" and not s.sticky and not s.ready(res):
            s = strategies[k - 1]
        state.strategy = s.name
        if s.name == "newton":
            out = s.step(x, fx, res, aux, state)
            if out is not None:
                kind, val = out
                if kind == "done":
                    return result(val[2], val[1], val[3])
                if kind == "fail":
                    break
                x, state.action = val, kind
                continue
            s = strategies[k - 1]
        if restart is not None:
            act = restart(x, res)
            if act == "restart":
                for t in strategies:
                    t.reset()
                x, state.action = restart.best_x, "restart"
                continue
            if act == "clear":
                s.reset()
            elif act == "damped":
                x = x + restart.damping * (fx - x)   # ·½ is exact: the same iterate as (fx − x)/2
                state.action = "damped"
                continue
        x, state.action = s.step(x, fx, res, aux, state), s.name
    raise ConvergenceError(f"{name} did not converge (residual {res:.3g})", residuals=[res], iterations=it,
                           point=point, restarts=0 if restart is None else restart.restarts, history=list(hist))
