r"""Per-head structured Hermite blocks in the concatenation's block pencil (docs/theory.md §13.2, §12.8).

The concatenation Φ = [XK_1; …; XK_H] of low-rank heads (MiniLM: rank 32 each) is solved by the block pencil of
:func:`symattn.variants.general_concat_error`. With ``structure='free'`` each head's nonlinear part is
cross-correlated free noise; here (``structure='blocks'``) it is each head's kernel model of §12.8,

  √p K^h_ij = b0_h + b1_h ξ^h_ij + b3_h T33^h_ij + b31_h (P31 + P13)^h_ij [+ b2_h T22^h_ij] + s_{r,h} N^h_ij,
  √p K^h_ii = f(x_iᵀW_hx_i/√p),

with the structured parts Gaussian blocks ρu^h_i ρv^h_j Σ_α m_α A_αi B_αj (independent between heads) and the
remainders N^h free elliptic noise, cross-correlated between heads with the free model's correlation
coefficients. A block of head h enters the pencil's x-row and u_h-row exactly as the single-head block enters
§12.8's x- and u-rows (u → u_h, w → w_h), so its only effect is on two n-block self-energies per token i:

  Σ_xx(i) −= ρv_{b,i}² φ_b ĝ_{b,wu},   Σ_{u_h w_h}(i) −= ρu_{b,i}² φ_b ĝ_{b,xx},
  φ_b = (1/c) Σ_α m_α² / (1 + (n²/p) ĝ_{b,xx} ĝ_{b,wu} m_α²),
  ĝ_{b,xx} = ⟨ρv_b² G_xx⟩,  ĝ_{b,wu} = ⟨ρu_b² G_{w_h u_h}⟩,

(:func:`add_blocks`, :func:`block_means`). The token average ⟨·⟩ is over :data:`CONCAT_TOKENS` sampled tokens
z ~ N(0, I_p), shared by all heads, each carrying every head's exact diagonal q_h = x_iᵀW_hx_i/√p
(x_i = z_i + y_iμ) and every head's block scales (from z_i): the joint law of the heads' diagonals and scales
without the anchored cut-HDMR rule of the free model. Status: the block Dyson terms are derived (as §12.8);
the kernel model is the conjecture of §12.8, per head; checked by Monte Carlo (docs/theory.md §13.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .general_w import BlockAtoms, hermite_block_constants
from .general_w.block_constants import block_present, block_total, f_values
from .general_w.hermite import block_phi, token_scales

__all__ = ["CONCAT_TOKENS", "ConcatBlocks", "concat_blocks", "add_blocks", "block_means", "BLOCK_KINDS"]

#: sampled tokens of the joint latent (every head's diagonal and block scales)
CONCAT_TOKENS = 4000
#: the structured blocks of a head (docs/theory.md §12.8): T33, P31 + P13, T22 (the last only for f with an even part)
BLOCK_KINDS = ("33", "31", "22")


@dataclass
class ConcatBlocks:
    """The per-head block model of the concatenation (module docstring).

    Attributes
    ----------
    b1, rest, rest_tau : numpy.ndarray (H,)
        The exact-law slope b1_h, the remainder variance s_{r,h}² (blocks not kept folded in) and its transpose
        correlation, per head.
    blocks : list of (h, m2, ru, rv)
        Per block: its head, its squared weights (array or BlockAtoms) and the token scales ρu², ρv² (tokens,).
    kappa : numpy.ndarray (tokens, H)
        κ_h = f(q_h)/√p − b1_h tr W_h/p at each token (``diagonal='zero'``: the constant −b1_h tr W_h/p).
    kw : numpy.ndarray (tokens,)
        The token weights (1/tokens).
    """

    b1: np.ndarray
    rest: np.ndarray
    rest_tau: np.ndarray
    blocks: list
    kappa: np.ndarray
    kw: np.ndarray


def concat_blocks(f, heads, mu=None, blocks=BLOCK_KINDS, diagonal: str = "f", tokens: int = CONCAT_TOKENS,
                  seed: int = 0, pairs=None) -> ConcatBlocks:
    r"""The per-head Hermite blocks and the joint token latent of the concatenated heads (module docstring).

    Parameters
    ----------
    f : Activation
    heads : list of (p, p) arrays
    mu : (p,) array or None
        The signal: the tokens' diagonals are those of x_i = z_i + y_iμ, y_i = ±1 (the scales those of z_i).
    blocks : tuple of {'33', '31', '22'}
        The blocks kept; the others are folded into each head's remainder noise.
    diagonal : {'f', 'zero'}
    tokens, seed, pairs : the sampled tokens, their seed, and the latent pairs of
        :func:`~symattn.backends.general_w.hermite_block_constants`.

    Returns
    -------
    ConcatBlocks

    Examples
    --------
    >>> from symattn import activation
    >>> rng = np.random.default_rng(0)
    >>> heads = [rng.standard_normal((40, 4)) @ rng.standard_normal((4, 40)) / 40 for _ in range(2)]
    >>> cb = concat_blocks(activation("tanh"), heads, tokens=100, pairs=2000)
    >>> cb.kappa.shape, sorted({h for h, *_ in cb.blocks}), len(cb.blocks)
    ((100, 2), [0, 1], 4)
    """
    H, p = len(heads), heads[0].shape[0]
    ks = [hermite_block_constants(f, W, pairs=pairs, seed=seed) for W in heads]   # cached per head
    rng = np.random.default_rng(seed + 1)
    Z = rng.standard_normal((tokens, p))
    X = Z if mu is None else Z + rng.choice([-1.0, 1.0], tokens)[:, None] * np.asarray(mu, dtype=float)[None, :]
    b1 = np.array([k.b1 for k in ks])
    base = np.array([-k.b1 * float(np.trace(W)) / p for k, W in zip(ks, heads)])
    if diagonal == "zero":
        kappa = np.tile(base, (tokens, 1))
    else:
        q = np.stack([np.sum((X @ W) * X, axis=1) for W in heads], 1) / math.sqrt(p)
        kappa = f_values(f, q) / math.sqrt(p) + base[None, :]
    rest = np.array([k.rest_var for k in ks], dtype=float)
    out, one = [], np.ones(tokens)
    for h, k in enumerate(ks):
        sc = token_scales(k, Z)
        for name, mw in zip(BLOCK_KINDS, (k.m33, k.m31, k.m22)):
            if not block_present(mw):
                continue
            if name in blocks:
                ru, rv = sc.get(name, (one, one))
                out.append((h, mw if isinstance(mw, BlockAtoms) else mw * mw, ru, rv))
            else:
                rest[h] += block_total(mw)
    rest = np.maximum(rest, 0.0)     # a variance (the sampled constants can leave −1e-3 for a near-linear f)
    tv = np.array([k.rest_tau * max(k.rest_var, 0.0) for k in ks])
    tau = np.divide(tv, rest, out=np.zeros(H), where=rest > 0)
    return ConcatBlocks(b1=b1, rest=rest, rest_tau=tau, blocks=out, kappa=kappa, kw=np.full(tokens, 1.0 / tokens))


def add_blocks(L, cb, ex, n: int, p: int, c: float):
    r"""Add the blocks' self-energies to the per-token pencils L (tokens, 2H+1, 2H+1), in place:
    L_i[x, x] += ρv_{b,i}² φ_b ĝ_{b,wu}, L_i[u_h, w_h] += ρu_{b,i}² φ_b ĝ_{b,xx} (module docstring); ``ex`` the
    block state (ĝ_{b,xx}, ĝ_{b,wu}) per block, interleaved.

    Examples
    --------
    >>> cb = ConcatBlocks(np.ones(1), np.ones(1), np.zeros(1), [(0, np.array([4.0]), np.ones(2), 2 * np.ones(2))],
    ...                   np.zeros((2, 1)), np.full(2, 0.5))
    >>> L = np.zeros((2, 3, 3)); add_blocks(L, cb, np.array([1.0, 0.0]), 10, 10, 1.0)
    >>> float(L[0, 0, 0]), float(L[0, 1, 2])    # ĝ_wu = 0: φ = Σm² = 4; ρv² φ ĝ_wu = 0, ρu² φ ĝ_xx = 4
    (0.0, 4.0)
    """
    H = (L.shape[-1] - 1) // 2
    for j, (h, m2, ru, rv) in enumerate(cb.blocks):
        gxx, gwu = ex[2 * j], ex[2 * j + 1]
        phi = block_phi(m2, (n * n / p) * gxx * gwu) / c
        L[:, 0, 0] += rv * (phi * gwu)
        L[:, 1 + h, 1 + H + h] += ru * (phi * gxx)


def block_means(cb, G):
    r"""The new block state from the per-token resolvents G (tokens, 2H+1, 2H+1): per block
    ĝ_{b,xx} = ⟨ρv_b² G_xx⟩ and ĝ_{b,wu} = ⟨ρu_b² G_{w_h u_h}⟩, interleaved.

    Examples
    --------
    >>> cb = ConcatBlocks(np.ones(1), np.ones(1), np.zeros(1), [(0, np.array([1.0]), np.ones(2), 2 * np.ones(2))],
    ...                   np.zeros((2, 1)), np.full(2, 0.5))
    >>> G = np.tile(np.arange(9.0).reshape(3, 3), (2, 1, 1))
    >>> block_means(cb, G)                     # ρv² G_xx = 0, ρu² G_wu = G[2, 1] = 7
    array([0., 7.])
    """
    H = (G.shape[-1] - 1) // 2
    out = np.empty(2 * len(cb.blocks), dtype=G.dtype)
    for j, (h, _, ru, rv) in enumerate(cb.blocks):
        out[2 * j] = cb.kw @ (rv * G[:, 0, 0])
        out[2 * j + 1] = cb.kw @ (ru * G[:, 1 + H + h, 1 + h])
    return out
