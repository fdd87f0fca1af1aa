r"""The paper's figures: theory lines against Monte Carlo points (``symattn reproduce``).

Every figure shows the deterministic equivalents (solid lines, :func:`symattn.memorization_error`)
and exact finite-n Monte Carlo (markers with ±1 standard-error bars, :func:`symattn.simulate`),
and is written as PNG and PDF next to a CSV of its data. The theory uses the finite-p diagonal
d_n at the simulated n (docs/theory.md §1.3), so lines and points describe the same finite system.

Figures (file stem ``fig_<name>``):

- ``ridge`` -- the paper's Figure 1, ridge regression alone: E_LR over γ, over c = p/n at a
  small γ, and over ‖μ‖² (docs/theory.md §3); at ``--paper`` scale the paper's sizes.
- ``mu0`` -- μ = 0: E_A for tanh and ReLU against E_LR, as functions of γ (c = 1) and of c
  (γ = 0.1); the third panel keeps W = I (w_K = w_Q = 0) and varies ‖μ‖² (c = 1, γ = 0.1).
  (docs/theory.md §8.1, claim 1.)
- ``aligned`` -- w_K = w_Q = θμ/‖μ‖ (c = 0.5, ‖μ‖² = 1, tanh): E_A against E_LR over θ and γ, and
  the theory map of E_A/E_LR over (θ, γ) with the contours E_A = E_LR (the gap reverses, E_A <
  E_LR, at larger γ) and E_A = 1.01 E_LR (the gap is closed to below 1 % at smaller γ). (docs/theory.md §8.2, claim 2.)
- ``a1zero`` -- a1 = 0 against a1 ≠ 0: cos and He3 against tanh, as functions of c
  (μ = 0, γ = 0.1) and of ‖μ‖² (c = 1, W = I, γ = 0.1). He3 is superlinear, so its kernel
  diagonal is zeroed (``diagonal='zero'``) in both theory and Monte Carlo. (docs/theory.md §8.3, claim 3.)
- ``minilm_w`` -- real pretrained weights (all-MiniLM-L6-v2, :mod:`symattn.realweights`) per layer
  and per head: the general-W theory of the real W (docs/theory.md §12) against exact Monte Carlo
  with that W, μ = 0 and μ = top (:mod:`~symattn.figures.minilm_w`).
- ``minilm``, ``minilm_rank`` -- a comparison: the paper's model fitted to the same weights as
  αI + rank r (:mod:`~symattn.figures.minilm`). The real-weights figures need the ``[real]`` extra,
  else they are skipped with a message.

CSV columns (one file per figure): ``figure, panel, kind`` (``curve``: a theory line, no Monte
Carlo; ``point``: a Monte Carlo point with the theory at the same x; ``diagnostic``: other data of
the figure), ``curve, model, activation, diagonal, x_name, x, theory, mc_mean, mc_sem, mc_model``
(``theory model``: the simulated system is the one the theory describes; ``real weights``: the
Monte Carlo uses the real W, the theory its fitted structure; ``real weights, general-W theory``:
both use the real W, counted apart and checked in the figure's note), ``n, p, draws, c, gamma, snr,
theta, t, strong_signal``. ``t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p`` is the finite-p signal
strength of docs/theory.md §10.1; ``strong_signal = |t| > 0.15`` (:data:`STRONG_SIGNAL_T`), the
regime where the asymptotic theory is known to be off at realistic p (attention points only);
``theory_finite_p``: at strong-signal points, the finite-p corrected theory
(``correction="finite-p"``, docs/theory.md §10), against which those points are checked.

Modules
-------
runner : :class:`Settings` (:data:`QUICK`, :data:`FULL`, :data:`PAPER`), the Monte Carlo jobs and :class:`Runner`,
    the theory values (:func:`~symattn.figures.runner.theory`).
records : the CSV rows (:class:`Records`), the CSV file and :func:`agreement`.
style : colours, markers, the drawing helpers and saving (PNG, PDF, CSV).
mu0, aligned, a1zero, minilm, minilm_w : one module per figure (``plan_<name>``, ``make_<name>``).
reproduce : :data:`FIGURES` and the driver :func:`run`.
demo : the one-minute tour of ``symattn demo``.

The command lines ``symattn reproduce`` and ``symattn demo`` are :mod:`symattn.cli.reproduce`
and :mod:`symattn.cli.demo`; nothing here parses arguments.
"""

from .records import CSV_COLUMNS, REAL_WEIGHTS, STRONG_SIGNAL_T, THEORY_MODEL, FigureResult, Records, agreement
from .reproduce import FIGURES, run
from .runner import FULL, PAPER, PAPER_FIGURES, QUICK, Job, Runner, Settings

__all__ = [
    "Settings",
    "QUICK",
    "FULL",
    "PAPER",
    "PAPER_FIGURES",
    "FIGURES",
    "STRONG_SIGNAL_T",
    "CSV_COLUMNS",
    "THEORY_MODEL",
    "REAL_WEIGHTS",
    "Records",
    "FigureResult",
    "Job",
    "Runner",
    "run",
    "agreement",
]
