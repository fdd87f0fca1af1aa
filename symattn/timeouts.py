"""Wall-clock limits on pure-Python computations (base layer), in one place.

:func:`time_limited` runs ``fn()`` under a limit of ``seconds``: in the main thread a SIGALRM
interval timer interrupts it, and again every 50 ms should the interruption be swallowed (an outer timer
is re-armed with what is left of it); elsewhere the
call runs in a daemon thread that is abandoned on time-out. It returns the value, :data:`TIMEOUT`
or :data:`FAILED` (``fn`` raised an ``Exception``).
"""

from __future__ import annotations

import signal
import threading
import time

#: returned by :func:`time_limited` when the limit was reached
TIMEOUT = object()
#: returned by :func:`time_limited` when ``fn`` raised
FAILED = object()

#: limits, in seconds, of the steps that can run long
FINITE_P_SECONDS = 120         # one finite-p corrected theory evaluation in the verification suite
SOLVESET_SECONDS = 2.0         # sympy.solveset of one kink candidate (activations.analysis.real_roots)
EXPRESSION_SECONDS = 2.0       # building the SymPy expression of one activation/phi string (activations.expression)
LIMIT_SECONDS = 5.0            # sympy.limit of f(x)/x, the diagonal constant d (activations.diagonal)
EXACT_COEFFICIENTS_SECONDS = 2.0  # default total budget of the exact (SymPy) coefficients in Activation.exact_coefficients
QUADRATURE_SECONDS = 30.0      # one tanh-sinh pass of an activation's Gaussian moments (Activation._moments)
VALIDATION_SECONDS = 5.0       # checking that an activation is finite and real (Activation._validate)


def time_limited(fn, seconds: float, reraise: bool = False):
    """``fn()`` with a wall-clock bound: its value, or :data:`TIMEOUT`, or :data:`FAILED` if it raised.

    Parameters
    ----------
    fn : callable
        A function of no arguments.
    seconds : float
        The limit; ``<= 0`` returns :data:`TIMEOUT` at once.
    reraise : bool
        Let an exception of ``fn`` propagate instead of returning :data:`FAILED`.

    Examples
    --------
    >>> time_limited(lambda: 2 + 2, 1.0)
    4
    >>> time_limited(lambda: 1 / 0, 1.0) is FAILED
    True
    """
    if seconds <= 0:
        return TIMEOUT
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        class _TimeUp(BaseException):
            pass

        active = [True]

        def _handler(signum, frame):
            if active[0]:
                raise _TimeUp

        start = time.monotonic()
        old_handler = signal.signal(signal.SIGALRM, _handler)
        # the timer repeats every 50 ms after the limit: code that swallows the first interruption (a bare
        # ``except:`` deep in a library) is interrupted again, until the call ends
        old_timer = signal.setitimer(signal.ITIMER_REAL, seconds, 0.05)
        try:
            return fn()
        except _TimeUp:
            active[0] = False
            return TIMEOUT
        except Exception:
            active[0] = False
            if reraise:
                raise
            return FAILED
        finally:
            active[0] = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
            if old_timer[0] > 0:  # re-arm an outer timer with what is left of it
                left = old_timer[0] - (time.monotonic() - start)
                signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), old_timer[1])
    box = []

    def _run():
        try:
            box.append(fn())
        except Exception as exc:
            box.append(exc if reraise else FAILED)

    t = threading.Thread(target=_run, daemon=True)
    t.start()
    t.join(seconds)
    if box and isinstance(box[0], Exception):
        raise box[0]
    return box[0] if box else TIMEOUT
