r"""Figure ``minilm_test``: the test error of a real attention layer against ridge regression (docs/theory.md §14.9).

The weights are all-MiniLM-L6-v2's (:mod:`symattn.realweights`, unit scale): all heads of a layer (W = W_KᵀW_Q) and one
head. For each W and each signal (μ = 0, μ = √snr·top eigenvector of (W + Wᵀ)/2) one panel shows the test error over
c = p/n (n = round(p/c), p = 384) at the γ of the settings:

- lines: the theory of §14.9 (``generalization_error(f, c, gamma, weights=W, mu=mu)``: the linear response of the
  general-W or Hermite-block pencil and the test moments of that W) and ridge regression on X (§14.4);
- markers: exact Monte Carlo with the same W (``simulate(..., weights=W, mu=mu, error="test")``), each draw tested on
  its own fresh sequence.

The rows carry ``mc_model =`` :data:`~symattn.figures.minilm_w.GENERAL_W` (the real W in both), so the synthetic
figures' agreement does not count them; the figure's note has its own count
(:func:`~symattn.figures.minilm_w.agreement_note`).

Needs the ``[real]`` extra; without it :func:`plan_minilm_test` raises
:class:`~symattn.errors.RealWeightsUnavailable` and ``symattn reproduce`` skips the figure.
"""

from __future__ import annotations

import warnings

import numpy as np

from .minilm_w import GENERAL_W, MU_KINDS, signal_vector, agreement_note, head_label
from .records import FigureResult, Records
from .runner import Job, mc_at
from .style import COLORS, finish_axes, new_figure, save

__all__ = ["plan_minilm_test", "make_minilm_test", "theory_test_error"]

_GAMMA_STYLE = ("-", "--", ":", "-.")


def theory_test_error(f, c, gamma, W=None, mu=None, model: str = "attention") -> np.ndarray:
    r"""E_test of one model (attention with the weights W, or ridge regression on X at ‖μ‖²) over the points c as a
    float array; NaN where a point fails (docs/theory.md §14.9, §14.4).

    Examples
    --------
    >>> E = theory_test_error("tanh", [0.5, 1.0], 1.0, np.eye(16), np.zeros(16))
    >>> E.shape, bool(np.all(E > 1))          # μ = 0: worse than the zero predictor
    ((2,), True)
    """
    from ..accuracy import internal
    from ..layer import Layer
    from ..model import Geometry

    c = np.atleast_1d(np.asarray(c, dtype=float))
    with warnings.catch_warnings(), internal():
        warnings.simplefilter("ignore")
        if model == "linear":
            snr = 0.0 if mu is None else float(np.dot(mu, mu))
            r = Layer(f).theory(c, gamma, geometry=Geometry(snr=snr), model="linear", error="test", errors="nan")
        else:
            r = Layer(f, weights=W).theory(c, gamma, mu=None if mu is None or not np.any(mu) else mu, error="test",
                                           errors="nan")
    return np.asarray(r.E, dtype=float).reshape(-1)


def plan_minilm_test(s, runner):
    """Load the weights and queue one train-and-test Monte Carlo run per (head, μ, c) of the settings."""
    from ..activations.activation import activation
    from ..realweights import layer_weight, load_minilm, tokens_for

    weights = load_minilm()
    f = activation(s.rt_activation)
    cases = []
    for head in s.rt_heads:
        W = layer_weight(weights, s.rt_layer, s.real_scale, head=head)
        p = W.shape[0]
        for kind in MU_KINDS:
            mu = signal_vector(W, kind, s.real_snr)
            keys = []
            for c in s.rt_cs:
                key = ("minilm_test", s.rt_layer, head_label(head), kind, float(c))
                runner.add(key, Job(f=f, n=tokens_for(p, c), c=float(c), gammas=tuple(s.rt_gammas), draws=s.rt_draws,
                                    W=W, mu=mu, models=("attention", "linear"), error=("train", "test")))
                keys.append(key)
            cases.append(dict(head=head, mu_kind=kind, W=W, mu=mu, p=p, keys=keys))
    runner.context["minilm_test"] = dict(cases=cases, activation=f)


def make_minilm_test(s, runner, out):
    """fig_minilm_test: E_test over c per (head, μ), attention (the theory of §14.9) against ridge regression."""
    from ..realweights import tokens_for

    ctx = runner.context["minilm_test"]
    cases, f = ctx["cases"], ctx["activation"]
    cs = np.asarray(s.rt_cs, dtype=float)
    cgrid = np.unique(np.concatenate([cs, np.geomspace(cs.min(), cs.max(), s.rt_curve_points)]))
    rec = Records("minilm_test")
    ncols = min(2, len(cases))
    fig, axes = new_figure(ncols, -(-len(cases) // ncols), width=4.6, height=3.7)
    axes = np.ravel(axes)
    for ax, cs_ in zip(axes, cases):
        head, kind, W, mu, p = (cs_[k] for k in ("head", "mu_kind", "W", "mu", "p"))
        results = [runner.result(k) for k in cs_["keys"]]
        panel = f"{head_label(head)} mu={kind}"
        meta = dict(layer=s.rt_layer, head=head_label(head), mu=kind, activation=f.name, snr=float(mu @ mu))
        for j, g in enumerate(s.rt_gammas):
            for model, color, marker in (("attention", COLORS["attention"], "o"), ("linear", COLORS["linear"], "D")):
                line = theory_test_error(f, cgrid, g, W, mu, model)
                pts = theory_test_error(f, cs, g, W, mu, model)
                label = f"{model}, gamma={g:g}"
                rec.curve(panel, label, "c", cgrid, line, model=model, error="test", gamma=float(g), **meta)
                mc = [mc_at(r, model + "_test", g) for r in results]
                for c, tv, (m, se), r in zip(cs, pts, mc, results):
                    rec.point(panel, label, "c", c, tv, m, se, model=model, error="test", n=tokens_for(p, c), p=p,
                              draws=r.draws, c=float(c), gamma=float(g), mc_model=GENERAL_W, **meta)
                style = _GAMMA_STYLE[j % len(_GAMMA_STYLE)]
                ax.plot(cgrid, line, color=color, ls=style, lw=1.4,
                        label=f"{'attention' if model == 'attention' else 'ridge on X'}, $\\gamma={g:g}$")
                ax.errorbar(cs, [m for m, _ in mc], yerr=[e for _, e in mc], fmt=marker, ms=4, capsize=2,
                            color=color, markerfacecolor="white" if j else color)
        ax.set_xscale("log")
        ax.set_yscale("log")
        who = "all heads" if head is None else f"head {head}"
        finish_axes(ax, r"$c=p/n$", f"layer {s.rt_layer}, {who}, " + (r"$\mu=0$" if kind == "zero" else r"$\mu$ = top"),
                    ylabel=r"test MSE $E_{test}$")
        ax.legend(fontsize="x-small", frameon=False)
    for ax in axes[len(cases):]:
        ax.set_visible(False)
    fig.suptitle(rf"test error of a real attention layer (all-MiniLM-L6-v2, {f.name}, unit scale) against ridge "
                 rf"regression; $p=384$, $n=384/c$" + "\n" + r"lines: theory (linear response of the pencil, "
                 rf"docs/theory.md §14.9); markers: exact Monte Carlo, {s.rt_draws} draws, ±1 s.e.; top: $\mu$ along "
                 rf"the top eigenvector of $(W+W^\top)/2$, $\|\mu\|^2={s.real_snr:g}$", fontsize="small")
    files = save(fig, rec, out, "fig_minilm_test")
    return FigureResult("minilm_test", rec, files, note=agreement_note(rec.rows, "test-error theory"))
