r"""Figures ``minilm`` and ``minilm_rank``: the paper's model W = α(I + low rank) against real attention weights.

A labelled comparison. The theory for the real W itself is the general-W theory of docs/theory.md
§12, drawn against the same real-W Monte Carlo in ``fig_minilm_w`` (:mod:`symattn.figures.minilm_w`).
These two figures keep the older path because it shows *why* that theory is needed: the paper's
model, fitted to W as αI + rank r with α folded into f, misses the real-W Monte Carlo by tens of
per cent at every rank, and ``fig_minilm_rank`` shows that W_KᵀW_Q is not identity plus low rank
(a tiny α, a slowly decaying spectrum of W − αI, most of the energy outside any small rank).

The weights are all-MiniLM-L6-v2's (:mod:`symattn.realweights`: loading, scaling, the fit
W ≈ αI + Σ_{k≤r} σ_k u_k v_kᵀ, the folded activation f_α and the signal direction μ).

- ``fig_minilm``: E over γ per layer: Monte Carlo with the real W' = W/α (black) and with the
  fitted W'_r (open squares), and the theory of the rank-r fit (lines; finite-p diagonal d_n).
- ``fig_minilm_rank``: (a) the spike strengths σ_k/(|α|√p), (b) the gap (MC − theory)/theory
  at γ_fixed against r for the real and the fitted W, (c) the energy ‖W − αI − L_r‖_F²/‖W‖_F²
  that the rank-r part leaves out.

Needs the ``[real]`` extra; without it :func:`plan_minilm` raises
:class:`~symattn.errors.RealWeightsUnavailable` and ``symattn reproduce`` skips the figure.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..realweights import fit_weight, fold_activation, layer_weight, load_minilm, signal_direction, tokens_for
from .records import REAL_WEIGHTS, THEORY_MODEL, FigureResult, Records
from .runner import Job, mc_at, strength, theory
from .style import finish_axes, new_figure, save

__all__ = ["plan_minilm", "make_minilm"]


def plan_minilm(s, runner):
    """Load the weights, fit every layer and queue the Monte Carlo runs (real W and fitted W_r)."""
    from ..activations.activation import activation

    weights = load_minilm()
    f = activation(s.real_activation)
    layers = []
    for L in s.real_layers:
        W = layer_weight(weights, L, s.real_scale)
        p = W.shape[0]
        n = tokens_for(p, s.real_c)
        full = fit_weight(W, max(s.real_ranks))
        fa = fold_activation(f, full.alpha)
        mu = signal_direction(W, s.real_snr)
        fits = {r: replace(full, rank=r, U=full.U[:, :r], V=full.V[:, :r]) for r in s.real_ranks}
        runner.add(("minilm", "real", L), Job(f=fa, n=n, c=s.real_c, gammas=tuple(s.real_gammas),
                                              draws=s.real_draws, W=W / full.alpha, mu=mu))
        for r, fit in fits.items():
            runner.add(("minilm", "fit", L, r), Job(f=fa, n=n, c=s.real_c, gammas=tuple(s.real_gammas),
                                                    draws=s.real_draws, W=fit.fitted_prime, mu=mu,
                                                    models=("attention",)))
        layers.append(dict(layer=L, W=W, p=p, n=n, fit=full, fits=fits, f_alpha=fa, mu=mu))
    runner.context["minilm"] = dict(layers=layers, weights_path=weights.path, activation=f)


def make_minilm(s, runner, out):
    """fig_minilm (E vs γ per layer) and fig_minilm_rank (gaps and fit quality against r)."""
    ctx = runner.context["minilm"]
    layers = ctx["layers"]
    f = ctx["activation"]
    ranks = list(s.real_ranks)
    gam = np.asarray(s.real_gammas, dtype=float)
    grid = np.logspace(math.log10(gam.min()) - 0.25, math.log10(gam.max()) + 0.25, s.curve_points)
    import matplotlib

    cmap = matplotlib.colormaps["plasma"]
    rcol = {r: cmap(0.1 + 0.75 * k / max(1, len(ranks) - 1)) for k, r in enumerate(ranks)}

    rec = Records("minilm")
    ncols = min(3, len(layers))
    nrows = -(-len(layers) // ncols)
    fig, axes = new_figure(ncols, nrows, width=4.2, height=3.4)
    gap_rows = []  # (layer, r, model, gap, gap_se) at gamma_fixed
    g0 = float(s.gamma_fixed) if any(math.isclose(g, s.gamma_fixed) for g in gam) else float(gam[len(gam) // 2])
    for ax, lay in zip(axes, layers):
        L, p, n, fa, mu = lay["layer"], lay["p"], lay["n"], lay["f_alpha"], lay["mu"]
        alpha = lay["fit"].alpha
        real = runner.result(("minilm", "real", L))
        base = dict(layer=L, alpha=alpha, scale=s.real_scale, activation=f"{f.name}(alpha x)", c=s.real_c,
                    snr=s.real_snr)
        lr = theory(fa, s.real_c, grid, lay["fits"][0].geometry(mu), model="linear")
        (lr_line,) = ax.plot(grid, lr, color="0.5", ls="--", lw=1)
        entries = []
        rec.curve("layers", "E_LR", "gamma", grid, lr, model="linear", n=n, **base)
        for g in gam:
            m, se = mc_at(real, "linear", g)
            rec.point("layers", "E_LR", "gamma", g, float(theory(fa, s.real_c, g, lay["fits"][0].geometry(mu),
                                                                  model="linear")), m, se, model="linear", n=n,
                      p=p, draws=s.real_draws, gamma=float(g), **base)
        for r in ranks:
            fit = lay["fits"][r]
            geo = fit.geometry(mu)
            t = strength(geo, p)
            th = theory(fa, s.real_c, grid, geo, n=n)
            thp = theory(fa, s.real_c, gam, geo, n=n)
            fitted = runner.result(("minilm", "fit", L, r))
            extra = dict(rank=r, unexplained=fit.unexplained,
                         spike_max=float(fit.spike_strengths.max()) if r else 0.0, **base)
            rec.curve("layers", f"theory r={r}", "gamma", grid, th, model="attention", n=n, **extra)
            (line,) = ax.plot(grid, th, color=rcol[r], lw=1.6)
            mf = [mc_at(fitted, "attention", g) for g in gam]
            bars = ax.errorbar(gam, [m for m, _ in mf], yerr=[e for _, e in mf], fmt="s", ms=4, capsize=2,
                               color=rcol[r], markerfacecolor="white")
            entries.append(((line, bars), f"rank-{r} fit: theory (line), MC with fitted $W'_{{{r}}}$ (squares)"))
            for g, tv, (m, se) in zip(gam, thp, mf):
                rec.point("layers", f"r={r}", "gamma", g, tv, m, se, model="attention", n=n, p=p, draws=s.real_draws,
                          t=t, mc_model=THEORY_MODEL, gamma=float(g), **extra)
            for g, tv in zip(gam, thp):
                m, se = mc_at(real, "attention", g)
                rec.point("layers", f"r={r}", "gamma", g, tv, m, se, model="attention", n=n, p=p, draws=s.real_draws,
                          t=t, mc_model=REAL_WEIGHTS, gamma=float(g), **extra)
            tv0 = float(theory(fa, s.real_c, g0, geo, n=n))
            for model_name, res in ((REAL_WEIGHTS, real), (THEORY_MODEL, fitted)):
                m, se = mc_at(res, "attention", g0)
                gap_rows.append((L, r, model_name, (m - tv0) / tv0, se / tv0, tv0, m, se, t, fit))
        mr = [mc_at(real, "attention", g) for g in gam]
        bars = ax.errorbar(gam, [m for m, _ in mr], yerr=[e for _, e in mr], fmt="o", ms=6, capsize=3, color="black",
                           zorder=5)
        entries += [(bars, "MC with the real $W$"), (lr_line, r"$E_{LR}$ theory")]
        ax.set_xscale("log")
        rmax = max(ranks)
        finish_axes(ax, r"ridge $\gamma$",
                     rf"layer {L}: $\alpha={alpha:.3f}$, unexplained (r={rmax}) "
                     f"{100 * lay['fits'][rmax].unexplained:.0f}%")
    for ax in axes[len(layers):]:
        ax.set_visible(False)
    from matplotlib.legend_handler import HandlerTuple

    handles, labels = zip(*entries)
    fig.legend(list(handles), list(labels), handler_map={tuple: HandlerTuple(ndivide=None)},
               loc="outside lower center", ncol=min(len(labels), 3), fontsize="small", frameon=False)
    lay0 = layers[0]
    fig.suptitle(
        r"comparison (the paper's model, fitted; the theory of the real $W$ is fig_minilm_w)" + "\n"
        + rf"all-MiniLM-L6-v2, $W=W_K^\top W_Q$ per layer ({s.real_scale} scale), {f.name}: Monte Carlo with the real "
        rf"$W$ vs theory of the fit $\alpha I+\sum_{{k\leq r}}\sigma_k u_k v_k^\top$ ($\alpha$ folded into "
        rf"$f(\alpha\cdot)$)" + "\n"
        + rf"$p={lay0['p']}$, $n={lay0['n']}$, {s.real_draws} draws; $\mu$ = top eigenvector of $(W+W^\top)/2$, "
          rf"$\|\mu\|^2={s.real_snr:g}$; lines: theory (finite-p $d_n$); black: real $W$; open squares: fitted "
          rf"$W_r$", fontsize="small")
    files = save(fig, rec, out, "fig_minilm")
    worst = max((abs(gp) for (_, r, mm, gp, *_rest) in gap_rows if mm == REAL_WEIGHTS and r == max(ranks)),
                default=float("nan"))
    res1 = FigureResult("minilm", rec, files,
                        note=f"comparison: real W vs the paper's theory of its rank-{max(ranks)} fit at gamma={g0:g}: "
                             f"|gap| up to {100 * worst:.0f}% (the general-W theory is fig_minilm_w; docs/gallery.md)")

    # ---- rank summary
    rec2 = Records("minilm_rank")
    fig2, ax2 = new_figure(3, width=4.3, height=3.6)
    lcol = matplotlib.colormaps["tab10"]
    kmax = min(64, layers[0]["p"])
    for i, lay in enumerate(layers):
        L, fit = lay["layer"], lay["fit"]
        col = lcol(i % 10)
        k = np.arange(1, kmax + 1)
        spikes = fit.singular_values[:kmax] / (abs(fit.alpha) * math.sqrt(fit.p))
        ax2[0].semilogy(k, spikes, color=col, lw=1.2, label=f"layer {L}")
        rec2.diagnostic("spectrum", f"layer {L}", "k", k, spikes, layer=L, alpha=fit.alpha, scale=s.real_scale)
        rr = np.arange(0, kmax + 1)
        s2 = fit.singular_values ** 2
        unexpl = np.array([np.sum(s2[r:]) / fit.frob2 for r in rr])
        ax2[2].plot(rr, 100 * unexpl, color=col, lw=1.2, label=f"layer {L}")
        rec2.diagnostic("unexplained", f"layer {L}", "rank", rr, unexpl, layer=L, alpha=fit.alpha, scale=s.real_scale)
        for model_name, ls, mk in ((REAL_WEIGHTS, "-", "o"), (THEORY_MODEL, "--", "s")):
            sel = [row for row in gap_rows if row[0] == L and row[2] == model_name]
            xs = [row[1] for row in sel]
            ax2[1].errorbar(xs, [100 * row[3] for row in sel], yerr=[100 * row[4] for row in sel], color=col, ls=ls,
                            marker=mk, ms=4, capsize=2, markerfacecolor=col if ls == "-" else "white",
                            label=f"layer {L}" if model_name == REAL_WEIGHTS else None)
            for (_, r, _, gp, gse, tv0, m, se, t, fitr) in sel:
                rec2.point("gap", f"layer {L}", "rank", r, tv0, m, se, model="attention", n=lay["n"], p=lay["p"],
                           draws=s.real_draws, t=t, mc_model=model_name, gamma=g0, layer=L, rank=r, alpha=fit.alpha,
                           unexplained=fitr.unexplained, scale=s.real_scale, c=s.real_c, snr=s.real_snr,
                           activation=f"{f.name}(alpha x)")
    ax2[0].axhline(1.0, color="0.4", lw=0.8, ls=":")
    ax2[0].set_xlabel(r"index $k$")
    ax2[0].set_ylabel(r"spike strength $\sigma_k/(|\alpha|\sqrt{p})$")
    ax2[0].set_title(r"(a) singular values of $W-\alpha I$")
    ax2[0].grid(True, alpha=0.3)
    ax2[0].legend(fontsize="x-small", frameon=False, ncol=2)
    ax2[1].axhline(0.0, color="0.3", lw=0.8)
    ax2[1].set_xlabel(r"rank $r$ of the fit")
    ax2[1].set_ylabel(r"(MC $-$ theory)/theory  [%]")
    ax2[1].set_title(rf"(b) gap at $\gamma={g0:g}$: real $W$ (solid), fitted $W_r$ (dashed)")
    ax2[1].grid(True, alpha=0.3)
    ax2[1].legend(fontsize="x-small", frameon=False, ncol=2)
    ax2[2].set_xlabel(r"rank $r$")
    ax2[2].set_ylabel(r"$\|W-\alpha I-L_r\|_F^2\,/\,\|W\|_F^2$  [%]")
    ax2[2].set_title(r"(c) energy left out by the rank-$r$ part $L_r$")
    ax2[2].grid(True, alpha=0.3)
    fig2.suptitle("all-MiniLM-L6-v2: how far real attention weights are from the theory's "
                  r"$\alpha(I+\mathrm{low\ rank})$" + "\n" + rf"{f.name}, $p={lay0['p']}$, $n={lay0['n']}$, "
                  rf"{s.real_draws} draws, $\|\mu\|^2={s.real_snr:g}$ along the top eigenvector of $(W+W^\top)/2$",
                  fontsize="small")
    res2 = FigureResult("minilm_rank", rec2, save(fig2, rec2, out, "fig_minilm_rank"))
    return [res1, res2]
