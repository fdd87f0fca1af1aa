r"""Figure ``minilm_w``: the general-W theory against the real-W Monte Carlo, per layer and per head.

The weights are all-MiniLM-L6-v2's (:mod:`symattn.realweights`): W = W_KᵀW_Q of a layer (all
heads together) or W_K^{hᵀ}W_Q^h of one head, unit-scaled (‖W‖_F²/p = 1). The kernel is exactly
f(XᵀWX/√p)/√p with that W, and both sides describe that same system:

- the theory is the general-W deterministic equivalent of docs/theory.md §12
  (``memorization_error(f, c, gamma, weights=W, mu=mu)``): W enters as a p×p matrix, nothing is
  fitted and nothing is folded into f;
- the Monte Carlo is exact (``simulate(..., weights=W, mu=mu)``, docs/theory.md §2).

Two signals per W: μ = 0, and μ = "top" = √snr·e with e the top eigenvector of (W + Wᵀ)/2
(:func:`~symattn.realweights.signal_direction`, ‖μ‖² = snr). A thin grey line is the paper's
model W = I at the same ‖W‖_F (docs/theory.md §5–§6 with the finite-p diagonal d_n) for
comparison: what the real W changes.

Panels: one per layer (E over γ; all heads and the first single head of the settings), and a
last panel with the gap (MC − theory)/theory at γ_fixed for every (layer, head, μ) simulated.

The rows carry ``mc_model =`` :data:`GENERAL_W` ("real weights, general-W theory"), so that the
summary of :func:`symattn.figures.records.agreement` counts them apart from the synthetic
figures (whose Monte Carlo is the theory's model at a size where the acceptance rule is known to
hold); this figure's own agreement, over every point including μ = top, is
:func:`general_w_agreement`, printed in the figure's note by ``symattn reproduce``.
``t = μᵀWμ/√p`` (for W = I + Σ w_K w_Qᵀ this is the t of docs/theory.md §10.1), ``rho`` =
tr W²/‖W‖_F² and ``tau`` (the elliptic correlation of the noise, §12.1) are extra columns.

Needs the ``[real]`` extra; without it :func:`plan_minilm_w` raises
:class:`~symattn.errors.RealWeightsUnavailable` and ``symattn reproduce`` skips the figure.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .records import TOL_REL, TOL_SE, FigureResult, Records
from .runner import Job, mc_at, theory
from .style import curve_grid, finish_axes, new_figure, save

__all__ = ["GENERAL_W", "MU_KINDS", "plan_minilm_w", "make_minilm_w", "general_w_theory", "general_w_agreement",
           "agreement_note", "head_label"]

#: ``mc_model`` of this figure's rows: the real W, simulated exactly, against the general-W theory of that W
GENERAL_W = "real weights, general-W theory"
#: the signals: μ = 0 and μ = √snr × top eigenvector of (W + Wᵀ)/2
MU_KINDS = ("zero", "top")

_MU_COLOR = {"zero": "tab:blue", "top": "tab:red"}
_MU_TEX = {"zero": r"$\mu=0$", "top": r"$\mu$ = top"}


def head_label(head) -> str:
    """``'all'`` for all heads of a layer (``head=None``), else ``'h<k>'``.

    Examples
    --------
    >>> head_label(None), head_label(3)
    ('all', 'h3')
    """
    return "all" if head is None else f"h{int(head)}"


def general_w_theory(f, c, gamma, W, mu) -> np.ndarray:
    r"""E_A of the general-W theory (docs/theory.md §12) as a float array; failed points are NaN.

    ``symattn.memorization_error(f, c, gamma, weights=W, mu=mu, errors="nan")``: K = f(XᵀWX/√p)/√p
    with the given W, X = μyᵀ + Z, n = round(p/c).

    Parameters
    ----------
    f : activation spec
    c : float
        p/n.
    gamma : array_like
        γ > 0.
    W : numpy.ndarray
        p×p.
    mu : numpy.ndarray
        Length p.

    Returns
    -------
    numpy.ndarray
        E_A at each γ (NaN where the solver failed; the failure is not raised).

    Examples
    --------
    >>> E = general_w_theory("tanh", 0.5, [0.1, 1.0], np.eye(20), np.zeros(20))
    >>> E.shape, bool(np.all((E > 0) & (E < 1)))
    ((2,), True)
    """
    from ..accuracy import internal
    from ..errors import FailedPointsWarning
    from ..layer import memorization_error

    with warnings.catch_warnings(), internal():   # the figure sets its theory beside its own Monte Carlo
        warnings.simplefilter("ignore", FailedPointsWarning)  # NaN points are visible in the CSV (empty cells)
        return np.asarray(memorization_error(f, c, np.atleast_1d(np.asarray(gamma, dtype=float)), weights=W, mu=mu,
                                             errors="nan"), dtype=float)


def general_w_agreement(rows, tol_se: float = TOL_SE, tol_rel: float = TOL_REL) -> dict:
    r"""The general-W theory against the real-W Monte Carlo on this figure's ``point`` rows.

    Every point is checked, μ = top included: |mc_mean − theory| <= max(tol_se·mc_sem, tol_rel·theory).

    Parameters
    ----------
    rows : iterable of dict
        CSV rows; only ``point`` rows with ``mc_model ==`` :data:`GENERAL_W` count.
    tol_se, tol_rel : float

    Returns
    -------
    dict
        ``{"checked", "agree", "max_rel_gap", "worst"}`` (``worst``: layer, head, mu, gamma, theory,
        mc_mean, mc_sem of the largest relative gap; None without points).

    Examples
    --------
    >>> rows = [dict(kind="point", mc_model=GENERAL_W, theory=0.5, mc_mean=0.51, mc_sem=0.004, layer=2,
    ...              head="all", mu="zero", gamma=0.1),
    ...         dict(kind="point", mc_model=GENERAL_W, theory=0.5, mc_mean=0.45, mc_sem=0.004, layer=2,
    ...              head="all", mu="top", gamma=0.1)]
    >>> a = general_w_agreement(rows)
    >>> a["checked"], a["agree"], round(a["max_rel_gap"], 3), a["worst"]["mu"]
    (2, 1, -0.1, 'top')
    """
    checked = agree = 0
    worst, gap_max = None, 0.0
    for r in rows:
        if r.get("kind") != "point" or r.get("mc_model") != GENERAL_W:
            continue
        th, m, se = float(r["theory"]), float(r["mc_mean"]), float(r["mc_sem"])
        if not (math.isfinite(th) and math.isfinite(m)):
            continue
        checked += 1
        agree += abs(m - th) <= max(tol_se * (se if math.isfinite(se) else 0.0), tol_rel * abs(th))
        gap = (m - th) / th
        if worst is None or abs(gap) > abs(gap_max):
            gap_max, worst = gap, {k: r.get(k) for k in ("layer", "head", "mu", "gamma", "theory", "mc_mean",
                                                         "mc_sem")}
    return {"checked": checked, "agree": agree, "max_rel_gap": gap_max, "worst": worst}


def signal_vector(W, kind, snr):
    """The signal μ of a figure's setting: ``kind='top'`` puts ‖μ‖² = snr along W's top direction
    (:func:`symattn.realweights.signal_direction`), ``kind='zero'`` gives μ = 0.

    Examples
    --------
    >>> import numpy as np
    >>> float(np.linalg.norm(signal_vector(np.diag([3.0, 1.0]), "top", 4.0)) ** 2)
    4.0
    >>> signal_vector(np.eye(2), "zero", 1.0)
    array([0., 0.])
    """
    from ..realweights import signal_direction

    return signal_direction(W, snr) if kind == "top" else np.zeros(W.shape[0])


def plan_minilm_w(s, runner):
    """Load the weights and queue one exact Monte Carlo run per (layer, head, μ) of the settings."""
    from ..activations.activation import activation
    from ..realweights import layer_weight, load_minilm, tokens_for

    weights = load_minilm()
    f = activation(s.real_activation)
    cases = []
    for L in s.gw_layers:
        for head in s.gw_heads:
            W = layer_weight(weights, L, s.real_scale, head=head)
            p = W.shape[0]
            n = tokens_for(p, s.real_c)
            for kind in s.gw_mus:
                mu = signal_vector(W, kind, s.real_snr)
                key = ("minilm_w", L, head_label(head), kind)
                runner.add(key, Job(f=f, n=n, c=s.real_c, gammas=tuple(s.gw_gammas), draws=s.gw_draws, W=W, mu=mu,
                                    models=("attention",)))
                cases.append(dict(layer=L, head=head, mu_kind=kind, W=W, mu=mu, p=p, n=n, key=key))
    runner.context["minilm_w"] = dict(cases=cases, activation=f, weights_path=weights.path)


def make_minilm_w(s, runner, out):
    """fig_minilm_w: E over γ per layer (general-W theory, real-W Monte Carlo, W = I for comparison)
    and the gap at γ_fixed for every (layer, head, μ)."""
    from ..backends.general_w import general_w_constants

    ctx = runner.context["minilm_w"]
    cases, f = ctx["cases"], ctx["activation"]
    gam = np.asarray(s.gw_gammas, dtype=float)
    grid = gam if s.gw_curve_points <= len(gam) else np.union1d(gam, curve_grid(gam, s.gw_curve_points, pad=0.0))
    g0 = float(s.gamma_fixed) if any(math.isclose(g, s.gamma_fixed) for g in gam) else float(gam[len(gam) // 2])
    layers = list(dict.fromkeys(cs["layer"] for cs in cases))
    shown = [None] + [h for h in s.gw_heads if h is not None][:1]   # heads drawn in the E(γ) panels
    rec = Records("minilm_w")
    npan = len(layers) + 1
    ncols = min(3, npan)
    fig, axes = new_figure(ncols, -(-npan // ncols), width=4.3, height=3.5)
    n0, p0 = cases[0]["n"], cases[0]["p"]
    # the paper's model W = I at the same ‖W‖_F (unit scale), same μ norm: one line per μ, every panel
    eye = {kind: theory(f, s.real_c, grid, {"snr": s.real_snr if kind == "top" else 0.0}, n=n0)
           for kind in s.gw_mus}
    for kind, th in eye.items():
        rec.curve("layers", f"W=I mu={kind}", "gamma", grid, th, model="attention", n=n0, c=s.real_c,
                  snr=s.real_snr if kind == "top" else 0.0, activation=f.name, mu=kind)
    gaps = []  # (layer, head, kind, gap, gap_se)
    entries = {}
    for cs in cases:
        L, head, kind, W, mu, p, n = (cs[k] for k in ("layer", "head", "mu_kind", "W", "mu", "p", "n"))
        res = runner.result(cs["key"])
        draw_it = head in shown
        k = general_w_constants(f, W, mu)
        th_pts = general_w_theory(f, s.real_c, gam, W, mu)
        snr = float(mu @ mu)
        meta = dict(layer=L, head=head_label(head), mu=kind, scale=s.real_scale, activation=f.name, c=s.real_c,
                    snr=snr, rho=k.rho, tau=k.tau)
        t = float(mu @ W @ mu) / math.sqrt(p)
        mc = [mc_at(res, "attention", g) for g in gam]
        for g, tv, (m, se) in zip(gam, th_pts, mc):
            rec.point("layers", f"{head_label(head)} mu={kind}", "gamma", g, tv, m, se, model="attention", n=n, p=p,
                      draws=res.draws, t=t, mc_model=GENERAL_W, gamma=float(g), **meta)
            if math.isclose(g, g0) and math.isfinite(tv):
                gaps.append((L, head, kind, (m - tv) / tv, se / tv))
        if not draw_it:
            continue
        ax = axes[layers.index(L)]
        ls, mk = ("-", "o") if head is None else ("--", "s")
        if len(grid) > len(gam):
            th_line = general_w_theory(f, s.real_c, grid, W, mu)
            rec.curve("layers", f"{head_label(head)} mu={kind}", "gamma", grid, th_line, model="attention", n=n,
                      **meta)
        else:
            th_line = th_pts
        (line,) = ax.plot(grid, th_line, color=_MU_COLOR[kind], ls=ls, lw=1.5)
        bars = ax.errorbar(gam, [m for m, _ in mc], yerr=[e for _, e in mc], fmt=mk, ms=5, capsize=2,
                           color=_MU_COLOR[kind], markerfacecolor="white" if head is not None else _MU_COLOR[kind])
        label = f"{'all heads' if head is None else 'head ' + str(head)}, " + _MU_TEX[kind]
        entries.setdefault(label, ((line, bars), label))
    for i, L in enumerate(layers):
        ax = axes[i]
        for kind, th in eye.items():
            (ln,) = ax.plot(grid, th, color="0.55", ls=":", lw=1.2)
            entries.setdefault("W=I", ((ln,), r"paper's model $W=I$ (same $\|W\|_F$), theory"))
        ax.set_xscale("log")
        finish_axes(ax, r"ridge $\gamma$", f"layer {L}")
    # gap panel: x = 0 for all heads, h + 1 for head h
    ax = axes[len(layers)]
    import matplotlib

    lcol = matplotlib.colormaps["tab10"]
    for j, L in enumerate(layers):
        for kind, mk, ls in (("zero", "o", "-"), ("top", "s", "--")):
            sel = sorted(((0 if h is None else int(h) + 1), gp, gs) for (LL, h, kk, gp, gs) in gaps
                         if LL == L and kk == kind)
            if not sel:
                continue
            xs, ys, es = zip(*sel)
            ax.errorbar(np.asarray(xs) + 0.08 * (j - len(layers) / 2), 100 * np.asarray(ys),
                        yerr=100 * np.asarray(es), color=lcol(j % 10), marker=mk, ls=ls, ms=4, capsize=2,
                        markerfacecolor=lcol(j % 10) if kind == "zero" else "white",
                        label=f"layer {L}, " + _MU_TEX[kind])
    ax.axhspan(-100 * TOL_REL, 100 * TOL_REL, color="0.9", zorder=0)
    ax.axhline(0.0, color="0.3", lw=0.8)
    heads_x = sorted({0 if h is None else int(h) + 1 for (_, h, _, _, _) in gaps})
    ax.set_xticks(heads_x, ["all" if x == 0 else str(x - 1) for x in heads_x])
    ax.set_xlabel("head (all = the whole layer)")
    ax.set_ylabel(r"(MC $-$ theory)/theory  [%]")
    ax.set_title(rf"gap at $\gamma={g0:g}$ (grey: $\pm${100 * TOL_REL:g} %)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="x-small", frameon=False, ncol=2)
    for ax in axes[npan:]:
        ax.set_visible(False)
    handles = [h for h, _ in entries.values()]
    labels = [lab for _, lab in entries.values()]
    from matplotlib.legend_handler import HandlerTuple

    fig.legend(handles, labels, handler_map={tuple: HandlerTuple(ndivide=None)}, loc="outside lower center",
               ncol=min(len(labels), 3), fontsize="small", frameon=False)
    fig.suptitle(
        rf"all-MiniLM-L6-v2, $W=W_K^\top W_Q$ per layer and per head ({s.real_scale} scale), {f.name}, "
        rf"$c={s.real_c:g}$" + "\n" + r"lines: general-W theory of the real $W$; markers: exact Monte Carlo "
        r"with the real $W$" + "\n" + rf"$p={p0}$, $n={n0}$, {s.gw_draws} draws, ±1 s.e.; top: $\mu$ along the "
        rf"top eigenvector of $(W+W^\top)/2$, $\|\mu\|^2={s.real_snr:g}$", fontsize="small")
    files = save(fig, rec, out, "fig_minilm_w")
    return FigureResult("minilm_w", rec, files, note=agreement_note(rec.rows, "general-W theory"))


def agreement_note(rows, what: str) -> str:
    """The figure's note: :func:`general_w_agreement` of its rows, with the worst point.

    Examples
    --------
    >>> rows = [dict(kind="point", mc_model=GENERAL_W, theory=0.5, mc_mean=0.51, mc_sem=0.004, layer=2,
    ...              head="all", mu="zero", gamma=0.1)]
    >>> agreement_note(rows, "theory")
    'theory vs real-W MC: 1/1 points within max(3 se, 3%), max |gap| 2.0% (layer 2 all mu=zero gamma=0.1)'
    """
    agr = general_w_agreement(rows)
    w = agr["worst"]
    return (f"{what} vs real-W MC: {agr['agree']}/{agr['checked']} points within max({TOL_SE:g} se, "
            f"{100 * TOL_REL:g}%), max |gap| {100 * abs(agr['max_rel_gap']):.1f}%"
            + (f" (layer {w['layer']} {w['head']} mu={w['mu']} gamma={w['gamma']:g})" if w else ""))
