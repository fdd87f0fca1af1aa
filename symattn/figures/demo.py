r"""The demo (``symattn demo``): a one-minute tour of what symattn computes.

1. The Hermite expansion of tanh: a_k (k <= 6), a1, ν and the diagonal constant d.
2. The deterministic equivalent of the linear-regression error E_LR(γ) (docs/theory.md §3) next to an
   exact Monte Carlo at n = 500 (mean ± standard error over a few draws), for c ∈ {0.5, 1};
   the same for attention E_A(γ) (docs/theory.md §6, with the finite-p diagonal d_n).
3. A figure ``DIR/demo_linear.png``: theory curves vs γ (log axis) with the Monte Carlo points.

Use :func:`run` from Python; it returns a JSON-friendly summary. The command ``symattn demo``
is :mod:`symattn.cli.demo`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

DEFAULT_OUT = "symattn-out"
FIGURE_NAME = "demo_linear.png"


def run(out: str | Path | None = DEFAULT_OUT, echo: Callable[[str], object] | None = print,
        activation: str = "tanh", n: int = 500, draws: int = 6, cs: Sequence[float] = (0.5, 1.0),
        gammas: Sequence[float] = (0.01, 0.1, 1.0, 10.0), snr: float = 1.0, seed: int = 0,
        curve_points: int = 41) -> dict:
    """Run the demo; print a report through ``echo`` (None: silent) and write the figure to ``out``
    (None: no figure). Returns a JSON-friendly summary dict.

    The geometry is aligned (w_K = w_Q = μ with ‖μ‖² = ``snr``); attention theory uses the
    finite-p diagonal d_n at the simulated n, so that it is comparable to the Monte Carlo.
    """
    import mpmath

    from ..activations.activation import activation as make_activation
    from ..formatting import fmt, format_table
    from ..model import Geometry, dimension
    from ..layer import memorization_error, simulate

    say = echo if echo is not None else (lambda *_: None)
    t0 = time.perf_counter()
    f = make_activation(activation)
    geometry = Geometry.aligned(snr)
    gammas = np.asarray(gammas, dtype=float)
    curve = np.logspace(np.log10(gammas.min()) - 0.5, np.log10(gammas.max()) + 0.5, curve_points)

    # -- 1. Hermite expansion
    coeffs = f.hermite_coefficients(kmax=6, dps=30)
    d = float(f.d) if f.d is not None else float("inf")
    say(f"1. Hermite expansion of {f.name} (centred): f(xi) - a0 = sum_k a_k He_k(xi)/sqrt(k!)")
    say(format_table(["k", "a_k"], [[str(k), mpmath.nstr(a, 12)] for k, a in enumerate(coeffs)], align="rr"))
    say(f"   a1 = {fmt(f.a1, 10)}, nu = sum a_k^2 = {fmt(f.nu, 10)}, d = lim f(sqrt p)/sqrt p = {fmt(d)}")
    say("")

    # -- 2. theory vs Monte Carlo
    say(f"2. Memorization error E(gamma): theory (deterministic equivalent with the finite-p diagonal d_n "
        f"at the same n) vs exact Monte Carlo at n = {n}, "
        f"{draws} draws")
    say(f"   geometry: w_K = w_Q = mu, ||mu||^2 = {fmt(snr)}; mean +- standard error")
    rows, panels = [], []
    for c in cs:
        p = dimension(n, c)
        lin_curve = np.asarray(memorization_error(f, c, curve, geometry=geometry, model="linear"), dtype=float)
        lin_pts = np.asarray(memorization_error(f, c, gammas, geometry=geometry, model="linear"), dtype=float)
        # attention theory with the finite-p diagonal d_n at the simulated n (comparable to the MC)
        att_curve = np.asarray(memorization_error(f, c, curve, geometry=geometry, n=n), dtype=float)
        att_pts = np.asarray(memorization_error(f, c, gammas, geometry=geometry, n=n), dtype=float)
        mc = simulate(f, n=n, c=c, gamma=gammas, geometry=geometry, draws=draws, seed=seed, progress=False)
        for i, g in enumerate(gammas):
            rows.append({
                "c": float(c), "p": p, "gamma": float(g),
                "E_linear_theory": float(lin_pts[i]),
                "E_linear_mc": float(mc.linear_mean[i]), "E_linear_sem": float(mc.linear_sem[i]),
                "E_attention_theory": float(att_pts[i]),
                "E_attention_mc": float(mc.attention_mean[i]), "E_attention_sem": float(mc.attention_sem[i]),
            })
        panels.append((c, p, lin_curve, att_curve, mc))

    def pm(m, s):
        return f"{m:.4f} +- {s:.4f}"

    table = [[fmt(r["c"]), fmt(r["gamma"]), f"{r['E_linear_theory']:.4f}",
              pm(r["E_linear_mc"], r["E_linear_sem"]),
              f"{r['E_attention_theory']:.4f}",
              pm(r["E_attention_mc"], r["E_attention_sem"])] for r in rows]
    say(format_table(["c", "gamma", "E_LR theory", "E_LR MC", "E_A theory", "E_A MC"], table, align="rrrrrr"))
    say("")

    # -- 3. figure
    figure = None
    if out is not None:
        from .style import COLORS, new_figure, plot_theory_vs_mc, save_figure, style_error_axes

        fig, axes = new_figure(len(panels))
        for ax, (c, p, lin_curve, att_curve, mc) in zip(axes, panels):
            plot_theory_vs_mc(ax, curve, lin_curve, mc.linear_mean, mc.linear_sem, label="linear",
                              mc_gamma=gammas, color=COLORS["linear"])
            plot_theory_vs_mc(ax, curve, att_curve, mc.attention_mean, mc.attention_sem, label="attention",
                              mc_gamma=gammas, color=COLORS["attention"], marker="s")
            style_error_axes(ax, title=f"{f.name}, c = {fmt(c)} (n = {n}, p = {p})")
        figure = str(save_figure(fig, Path(out) / FIGURE_NAME))
        say(f"3. figure written: {figure}")

    seconds = time.perf_counter() - t0
    say(f"done in {seconds:.1f} s")
    return {
        "activation": f.name,
        "hermite": {"coefficients": [mpmath.nstr(a, 12) for a in coeffs],
                    "a1": float(f.a1), "nu": float(f.nu), "d": d},
        "geometry": geometry.as_dict(),
        "n": int(n), "draws": int(draws), "seed": int(seed),
        "rows": rows,
        "figure": figure,
        "seconds": seconds,
    }
