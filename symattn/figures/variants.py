r"""Figures of the layer's variants (docs/theory.md §13): heads, residual, softmax, MiniLM's real heads.

- ``fig_heads``: E against the number of heads H at fixed total width: H random heads of rank p/H
  each, W_h = A_hᵀB_h/√(qp), q = p/H (‖W_h‖_F²/p ≈ 1), tanh, c = 0.5, μ = 0. (a) the sum readout
  Φ = XΣ_hK_h: Monte Carlo against the summed general-W kernel (docs/theory.md §13.2); (b) the
  concatenation Φ = [XK_1; …; XK_H]: Monte Carlo against the block-pencil theory of distinct heads
  (docs/theory.md §13.2); E_LR dashed in both.
- ``fig_residual``: Φ = X(I + K) against Φ = XK and E_LR over γ (tanh, c = 0.5): (a) μ = 0, (b)
  w_K = w_Q = μ, ‖μ‖² = 1 (the plain-layer runs are those of ``fig_mu0`` and ``fig_aligned``).
- ``fig_softmax``: the row softmax (diagonal excluded, temperature τ) at γ = ε²γ̂, ε² = p/(n − 1)²,
  against the entrywise kernel ĝ(t) = exp(t/τ − 1/(2τ²)) − 1 (diagonal zeroed) at γ̂ and against
  E_LR(γ̂), over γ̂ (c = 0.5 and 2); one theory line: the reduction of docs/theory.md §13.3,
  which is the entrywise theory of ĝ.
- ``fig_minilm_heads``: the 12 real heads of all-MiniLM-L6-v2 layers (each ‖W_h‖_F²/p = 1), tanh,
  c = 0.5, μ = 0: sum readout (Monte Carlo and theory), concatenation (Monte Carlo) and E_LR over γ.
  Needs the ``[real]`` extra, else skipped.

Sizes: n and draws of the run's :class:`~symattn.figures.Settings`; the rest from :func:`sizes`
(``quick`` keeps the four figures to about 20 s on one core).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .records import FigureResult, Records
from .runner import Job, Runner, Settings, mc_at, theory
from .style import add_legend, curve_grid, draw, finish_axes, log_ticks, mc_note, new_figure, save

__all__ = ["sizes", "random_heads", "plan_heads", "make_heads", "plan_residual", "make_residual", "plan_softmax",
           "make_softmax", "plan_minilm_heads", "make_minilm_heads"]

_QUICK = dict(heads=(1, 2, 4, 8), heads_gammas=(0.01, 0.1, 1.0), heads_c=0.5, softmax_tau=1.5,
              softmax_cs=(0.5, 2.0), minilm_layers=(2,), minilm_draws=2, minilm_gammas=(0.01, 0.1, 1.0, 10.0))
_FULL = dict(heads=(1, 2, 4, 8, 16), heads_gammas=(0.01, 0.1, 1.0, 10.0), heads_c=0.5, softmax_tau=1.0,
             softmax_cs=(0.5, 2.0), minilm_layers=(0, 2, 5), minilm_draws=4, minilm_gammas=(0.01, 0.1, 1.0, 10.0))


def sizes(s: Settings) -> dict:
    """The variant figures' sizes: those of the full run for ``s.name == 'full'``, else the quick ones.

    Examples
    --------
    >>> from symattn.figures import FULL, QUICK
    >>> sizes(QUICK)["heads"], sizes(FULL)["softmax_tau"]
    ((1, 2, 4, 8), 1.0)
    """
    return dict(_FULL if s.name == "full" else _QUICK)


def random_heads(H: int, p: int, seed: int = 0) -> list:
    r"""H random heads of rank q = p // H: W_h = A_hᵀB_h/√(qp), A_h, B_h ∈ R^{q×p} standard Gaussian.

    ‖W_h‖_F²/p ≈ 1 for every H: the total width Hq = p is fixed, as in a transformer with head size p/H.

    Examples
    --------
    >>> hs = random_heads(4, 40)
    >>> len(hs), int(np.linalg.matrix_rank(hs[0]))
    (4, 10)
    """
    rng = np.random.default_rng([seed, H, p])
    q = max(1, p // H)
    return [rng.standard_normal((q, p)).T @ rng.standard_normal((q, p)) / math.sqrt(q * p) for _ in range(H)]


def _variant_theory(f, c, gamma, n=None, **kw) -> np.ndarray:
    """:func:`symattn.memorization_error` of a variant as floats; NaN where the theory refuses or fails."""
    from ..accuracy import internal
    from ..errors import ConvergenceError, ParameterError
    from ..layer import memorization_error

    g = np.atleast_1d(np.asarray(gamma, dtype=float))
    try:
        with internal():   # the figure sets its theory beside its own Monte Carlo
            return np.asarray(memorization_error(f, c, g, n=n, **kw), dtype=float)
    except ParameterError:
        return np.full(g.shape, np.nan)
    except ConvergenceError:
        if g.size == 1:
            return np.full(1, np.nan)
        return np.concatenate([_variant_theory(f, c, [v], n=n, **kw) for v in g])


def _mc_row(rec, panel, curve, x_name, x, th, mean, sem, **meta):
    """A Monte Carlo point with its theory (a ``point`` row), or, where the theory refuses (NaN: the
    concatenation of distinct heads), a ``diagnostic`` row that carries the Monte Carlo alone."""
    if np.isfinite(th):
        return rec.point(panel, curve, x_name, x, th, mean, sem, **meta)
    meta.pop("t", None)
    rec.diagnostic(panel, curve, x_name, [x], [float("nan")], mc_mean=float(mean), mc_sem=float(sem), **meta)


def _heads_key(H, ro):
    return ("variants", "heads", H, ro)


# ============================================================================ fig_heads
def plan_heads(s: Settings, runner: Runner):
    """Queue the sum and concat Monte Carlo of H random heads for every H (and E_LR once)."""
    from ..model import dimension

    z = sizes(s)
    c = z["heads_c"]
    p = dimension(s.n, c)
    for H in z["heads"]:
        hs = random_heads(H, p, s.seed)
        for ro in ("sum", "concat"):
            runner.add(_heads_key(H, ro), Job(f="tanh", n=s.n, c=c, gammas=tuple(z["heads_gammas"]), draws=s.draws,
                                              models=("attention", "linear") if (H, ro) == (1, "sum") else
                                              ("attention",), variant=dict(heads=hs, readout=ro)))


def make_heads(s: Settings, runner: Runner, out: Path) -> FigureResult:
    """fig_heads: E against H at fixed total width, sum (a) and concat (b), with E_LR."""
    import matplotlib

    from ..model import dimension

    z = sizes(s)
    c, Hs, gam = z["heads_c"], list(z["heads"]), list(z["heads_gammas"])
    p = dimension(s.n, c)
    rec = Records("heads")
    fig, axes = new_figure(2, width=4.8, height=3.8)
    cmap = matplotlib.colormaps["viridis"]
    col = {g: cmap(0.1 + 0.7 * k / max(1, len(gam) - 1)) for k, g in enumerate(gam)}
    lin = runner.result(_heads_key(1, "sum"))
    for k, (ax, ro) in enumerate(zip(axes, ("sum", "concat"))):
        entries = []
        th_h = {H: _variant_theory("tanh", c, gam, heads=random_heads(H, p, s.seed), readout=ro) for H in Hs}
        for j, g in enumerate(gam):
            th = np.array([float(th_h[H][j]) for H in Hs])
            mc = [mc_at(runner.result(_heads_key(H, ro)), "attention", g) for H in Hs]
            name = rf"$E_A$ {ro}, $\gamma={g:g}$"
            meta = dict(activation="tanh", c=c, gamma=float(g), snr=0.0, readout=ro)
            rec.curve("ab"[k], name, "heads", Hs, th, model="attention", n=s.n, **meta)
            for H, tv, (m, se) in zip(Hs, th, mc):
                _mc_row(rec, "ab"[k], name, "heads", H, tv, m, se, model="attention", n=s.n, p=p, draws=s.draws,
                        heads=H, **meta)
            entries.append((draw(ax, Hs, th, Hs, mc, col[g], "o", True), name))
            m_lr, se_lr = mc_at(lin, "linear", g)
            lr = float(theory("tanh", c, g, model="linear"))
            lr_line = ax.axhline(lr, color=col[g], ls="--", lw=0.9)
            rec.point("ab"[k], rf"$E_{{LR}}$, $\gamma={g:g}$", "heads", 1, lr, m_lr, se_lr, model="linear", n=s.n,
                      p=p, draws=s.draws, c=c, gamma=float(g), snr=0.0, activation="tanh")
        entries.append(((lr_line,), r"$E_{LR}$ (dashed, same colour)"))
        ax.set_xscale("log", base=2)
        log_ticks(ax, Hs)
        what = (r"(a) sum $\Phi=X\sum_hK_h$" if ro == "sum" else
                r"(b) concat $[XK_1;\dots;XK_H]$ (block pencil, §13.2)")
        finish_axes(ax, r"number of heads $H$ (each of rank $p/H$)", what)
        add_legend(ax, entries, loc="best")
    fig.suptitle(rf"multi-head attention at fixed total width: $H$ random heads $W_h=A_h^\top B_h/\sqrt{{qp}}$, "
                 rf"$q=p/H$; tanh, $c={c:g}$, $\mu=0$" + "\n" + mc_note(s).replace("finite-p diagonal $d_n$",
                                                                                   "docs/theory.md §13.2"),
                 fontsize="small")
    return FigureResult("heads", rec, save(fig, rec, out, "fig_heads"),
                        note="concat of distinct heads: the block pencil of docs/theory.md §13.2")


# ============================================================================ fig_residual
def _residual_geometries(s: Settings):
    from ..model import Geometry

    return (("a", None, r"(a) $\mu=0$"), ("b", Geometry.aligned(1.0, 1.0), r"(b) $w_K=w_Q=\mu$, $\|\mu\|^2=1$"))


def plan_residual(s: Settings, runner: Runner):
    """Queue the residual Monte Carlo (the plain-layer runs are the shared synthetic ones)."""
    from ..activations.activation import activation
    from ..model import as_geometry

    for panel, geo, _ in _residual_geometries(s):
        runner.synthetic("tanh", 0.5, geo, linear=True)
        g = as_geometry(geo)
        runner.add(("variants", "residual", panel), Job(f=activation("tanh"), n=s.n, c=0.5, gammas=tuple(s.mu0_gammas),
                                                        draws=s.draws, geometry=g, models=("attention",),
                                                        variant=dict(residual=True)))


def make_residual(s: Settings, runner: Runner, out: Path) -> FigureResult:
    """fig_residual: E_A with and without the residual connection against E_LR, over γ."""
    from ..model import dimension
    from .runner import strength

    rec = Records("residual")
    fig, axes = new_figure(2, width=4.6, height=3.7)
    gam = np.asarray(s.mu0_gammas, dtype=float)
    grid = curve_grid(gam, s.curve_points)
    p = dimension(s.n, 0.5)
    for ax, (panel, geo, title) in zip(axes, _residual_geometries(s)):
        entries = []
        plain = runner.result(runner.synthetic("tanh", 0.5, geo))
        resid = runner.result(("variants", "residual", panel))
        snr = 0.0 if geo is None else 1.0
        t = strength(geo, p)
        for name, model, res, kw, color, mk in (
                (r"$E_A$ tanh, $\Phi=XK$", "attention", plain, {}, "tab:red", "o"),
                (r"$E_A$ tanh, residual $\Phi=X(I+K)$", "attention", resid, dict(residual=True), "tab:purple", "s"),
                (r"$E_{LR}$", "linear", plain, {}, "tab:blue", "D")):
            if kw:
                th, thp = (_variant_theory("tanh", 0.5, x, n=s.n, geometry=geo, **kw) for x in (grid, gam))
            else:
                th, thp = (theory("tanh", 0.5, x, geo, n=s.n, model=model) for x in (grid, gam))
            mc = [mc_at(res, model, g) for g in gam]
            meta = dict(activation="tanh", c=0.5, snr=snr, residual=bool(kw))
            rec.curve(panel, name, "gamma", grid, th, model=model, n=s.n, **meta)
            for g, tv, (m, se) in zip(gam, thp, mc):
                rec.point(panel, name, "gamma", g, tv, m, se, model=model, n=s.n, p=p, draws=s.draws, t=t,
                          gamma=float(g), **meta)
            entries.append((draw(ax, grid, th, gam, mc, color, mk, True, linestyle="--" if model == "linear" else "-"),
                            name))
        finish_axes(ax, r"ridge $\gamma$", title + r", tanh, $c=0.5$")
        add_legend(ax, entries, loc="upper left")
    fig.suptitle("the residual connection (docs/theory.md §13.1): the theory is the attention system with "
                 r"$d\to d+1$" + "\n" + mc_note(s), fontsize="small")
    return FigureResult("residual", rec, save(fig, rec, out, "fig_residual"))


# ============================================================================ fig_softmax
def _ghat(tau: float) -> str:
    """ĝ(t) = exp(t/τ − 1/(2τ²)) − 1 as an expression string (the centred, normalised exp kernel)."""
    return f"exp(x/{tau!r} - {1 / (2 * tau * tau)!r}) - 1"


def _softmax_gammas(s, n, c):
    from ..backends.variants import softmax_scale
    from ..model import dimension

    eps2 = softmax_scale(n, dimension(n, c))
    return eps2, tuple(float(g) * eps2 for g in s.mu0_gammas)


def plan_softmax(s: Settings, runner: Runner):
    """Queue the softmax Monte Carlo (at γ = ε²γ̂) and the entrywise ĝ Monte Carlo (at γ̂, with E_LR)."""
    z = sizes(s)
    tau = z["softmax_tau"]
    for c in z["softmax_cs"]:
        _, sg = _softmax_gammas(s, s.n, c)
        runner.add(("variants", "softmax", c), Job(f="exp(x)", n=s.n, c=c, gammas=sg, draws=s.draws, diagonal="zero",
                                                   models=("attention",),
                                                   variant=dict(kernel="softmax", temperature=tau)))
        runner.add(("variants", "ghat", c), Job(f=_ghat(tau), n=s.n, c=c, gammas=tuple(s.mu0_gammas), draws=s.draws,
                                                diagonal="zero"))


def make_softmax(s: Settings, runner: Runner, out: Path) -> FigureResult:
    """fig_softmax: the softmax layer against the entrywise exp kernel and E_LR, over γ̂ = γ/ε²."""
    from ..model import dimension

    z = sizes(s)
    tau = z["softmax_tau"]
    rec = Records("softmax")
    cs = list(z["softmax_cs"])
    fig, axes = new_figure(len(cs), width=4.6, height=3.7)
    gh = np.asarray(s.mu0_gammas, dtype=float)
    grid = curve_grid(gh, s.curve_points)
    for k, (ax, c) in enumerate(zip(axes, cs)):
        panel = "abcd"[k]
        p = dimension(s.n, c)
        eps2, _ = _softmax_gammas(s, s.n, c)
        soft = runner.result(("variants", "softmax", c))
        ent = runner.result(("variants", "ghat", c))
        th = _variant_theory(None, c, grid * eps2, n=s.n, kernel="softmax", temperature=tau, diagonal="zero")
        thp = _variant_theory(None, c, gh * eps2, n=s.n, kernel="softmax", temperature=tau, diagonal="zero")
        th_ent = theory(_ghat(tau), c, gh, n=s.n, diagonal="zero")
        lr, lrp = theory("tanh", c, grid, model="linear"), theory("tanh", c, gh, model="linear")
        meta = dict(c=c, snr=0.0, temperature=tau, eps2=eps2)
        rec.curve(panel, "softmax reduction", "gamma_hat", grid, th, model="attention", n=s.n, activation="softmax",
                  **meta)
        rec.curve(panel, "E_LR", "gamma_hat", grid, lr, model="linear", n=s.n, **meta)
        ms = [mc_at(soft, "attention", float(g) * eps2) for g in gh]
        me = [mc_at(ent, "attention", float(g)) for g in gh]
        ml = [mc_at(ent, "linear", float(g)) for g in gh]
        for g, tv, te, tl, a, b, l_ in zip(gh, thp, th_ent, lrp, ms, me, ml):
            rec.point(panel, "softmax", "gamma_hat", g, tv, *a, model="attention", n=s.n, p=p, draws=s.draws,
                      gamma=float(g) * eps2, activation="softmax", diagonal="zero", **meta)
            rec.point(panel, "entrywise exp kernel", "gamma_hat", g, te, *b, model="attention", n=s.n, p=p,
                      draws=s.draws, gamma=float(g), activation="ghat", diagonal="zero", **meta)
            rec.point(panel, "E_LR", "gamma_hat", g, tl, *l_, model="linear", n=s.n, p=p, draws=s.draws,
                      gamma=float(g), **meta)
        entries = [(draw(ax, grid, th, gh, ms, "tab:green", "o", True),
                    rf"softmax, $\tau={tau:g}$, at $\gamma=\varepsilon^2\hat\gamma$ (line: reduction)")]
        bars = ax.errorbar(gh * 1.12, [m for m, _ in me], yerr=[e for _, e in me], fmt="^", ms=5, capsize=2,
                           color="tab:olive", markerfacecolor="white")
        entries.append((bars, r"entrywise $\hat g(t)=e^{t/\tau-1/(2\tau^2)}-1$ at $\hat\gamma$ (diag. zeroed)"))
        entries.append((draw(ax, grid, lr, gh, ml, "tab:blue", "D", True, linestyle="--"), r"$E_{LR}(\hat\gamma)$"))
        finish_axes(ax, r"rescaled ridge $\hat\gamma=\gamma/\varepsilon^2$, $\varepsilon^2=p/(n-1)^2$",
                    f"({panel}) $c={c:g}$, $\\mu=0$, $W=I$")
        add_legend(ax, entries, loc="lower right")
    fig.suptitle("row softmax (self excluded) = entrywise exp kernel, scaled by $\\varepsilon=\\sqrt{p}/(n-1)$, plus an "
                 "intercept (docs/theory.md §13.3)\n" + mc_note(s).replace("finite-p diagonal $d_n$",
                                                                          "the reduction"), fontsize="small")
    return FigureResult("softmax", rec, save(fig, rec, out, "fig_softmax"))


# ============================================================================ fig_minilm_heads
def plan_minilm_heads(s: Settings, runner: Runner):
    """Load MiniLM's per-head weights (RealWeightsUnavailable without the [real] extra) and queue the runs."""
    from ..realweights import layer_weight, load_minilm, tokens_for

    z = sizes(s)
    weights = load_minilm()
    layers = []
    for L in z["minilm_layers"]:
        hs = [layer_weight(weights, L, "unit", head=h) for h in range(12)]
        p = hs[0].shape[0]
        n = tokens_for(p, 0.5)
        for ro in ("sum", "concat"):
            runner.add(("variants", "minilm", L, ro),
                       Job(f="tanh", n=n, c=0.5, gammas=tuple(z["minilm_gammas"]), draws=z["minilm_draws"],
                           models=("attention", "linear") if ro == "sum" else ("attention",),
                           variant=dict(heads=hs, readout=ro)))
        layers.append(dict(layer=L, heads=hs, p=p, n=n))
    runner.context["minilm_heads"] = layers


def make_minilm_heads(s: Settings, runner: Runner, out: Path) -> FigureResult:
    """fig_minilm_heads: per layer, sum (MC + theory), concat (MC) and E_LR over γ."""
    z = sizes(s)
    layers = runner.context["minilm_heads"]
    gam = np.asarray(z["minilm_gammas"], dtype=float)
    draws = z["minilm_draws"]
    rec = Records("minilm_heads")
    fig, axes = new_figure(len(layers), width=4.6, height=3.7)
    for ax, lay in zip(axes, layers):
        L, hs, p, n = lay["layer"], lay["heads"], lay["p"], lay["n"]
        entries = []
        for ro, color, mk in (("sum", "tab:red", "o"), ("concat", "tab:purple", "s")):
            res = runner.result(("variants", "minilm", L, ro))
            th = _variant_theory("tanh", 0.5, gam, heads=hs, readout=ro)
            mc = [mc_at(res, "attention", g) for g in gam]
            name = f"$E_A$ {ro} of the 12 heads"
            for g, tv, (m, se) in zip(gam, th, mc):
                _mc_row(rec, f"layer {L}", name, "gamma", g, tv, m, se, model="attention", n=n, p=p, draws=draws,
                        gamma=float(g), c=0.5, snr=0.0, layer=L, readout=ro, activation="tanh", scale="unit")
            entries.append((draw(ax, gam, th, gam, mc, color, mk, True), name + ("" if np.all(np.isfinite(th)) else
                                                                               " (MC only)")))
        res = runner.result(("variants", "minilm", L, "sum"))
        grid = curve_grid(gam, s.curve_points)
        lr, lrp = theory("tanh", 0.5, grid, model="linear"), theory("tanh", 0.5, gam, model="linear")
        ml = [mc_at(res, "linear", g) for g in gam]
        rec.curve(f"layer {L}", "E_LR", "gamma", grid, lr, model="linear", n=n, c=0.5, snr=0.0, layer=L)
        for g, tv, (m, se) in zip(gam, lrp, ml):
            rec.point(f"layer {L}", "E_LR", "gamma", g, tv, m, se, model="linear", n=n, p=p, draws=draws,
                      gamma=float(g), c=0.5, snr=0.0, layer=L)
        entries.append((draw(ax, grid, lr, gam, ml, "tab:blue", "D", True, linestyle="--"), r"$E_{LR}$"))
        finish_axes(ax, r"ridge $\gamma$", f"layer {L}: 12 heads, $p={p}$, $n={n}$")
        add_legend(ax, entries, loc="lower right")
    fig.suptitle(r"all-MiniLM-L6-v2, real heads $W_h=W_K^{h\top}W_Q^h$ ($\|W_h\|_F^2/p=1$), tanh, $c=0.5$, $\mu=0$"
                 "\n" r"lines: theory at the Monte Carlo $\gamma$ (summed general-$W$ kernel, docs/theory.md §13.2)"
                 "\n" rf"markers: Monte Carlo, {draws} draws, ±1 s.e.", fontsize="small")
    return FigureResult("minilm_heads", rec, save(fig, rec, out, "fig_minilm_heads"))
