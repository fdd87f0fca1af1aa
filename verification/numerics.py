r"""Independent numerical references for the checks (mpmath quadrature, Monte Carlo helpers).

Nothing here uses the package's solvers: the references are computed from their own
definitions so that agreement with :func:`symattn.memorization_error` means something.

- :func:`mp_law_integral`: ∫ g dμ_S for the Marchenko–Pastur law of S = ZᵀZ/p (ratio 1/c),
  ρ(λ) = c√((b−λ)(λ−a))/(2πλ) on [a, b] = [(1 − c^{-1/2})², (1 + c^{-1/2})²] plus the atom
  (1−c)_+ at 0 (docs/theory.md §1), by mpmath tanh-sinh quadrature.
- :func:`semicircle_integral`: ∫ g(x) ρ_sc(x) dx, ρ_sc(x) = √(4 − x²)/(2π) on [−2, 2].
- :func:`mc_theory_gap`: Monte Carlo mean ± se of E against the theory at the same n.
- :func:`mc_quadratic_form`: Monte Carlo of ŷᵀMŷ = ‖XKŷ‖²/n (no eigendecomposition needed).
"""

from __future__ import annotations

import math

import mpmath
import numpy as np


# ----------------------------------------------------------------------------- reference integrals
def mp_edges(c):
    """Edges (a, b) of the Marchenko–Pastur law μ_S (mpf)."""
    c = mpmath.mpf(c)
    r = 1 / mpmath.sqrt(c)
    return (1 - r) ** 2, (1 + r) ** 2


def mp_density(lam, c):
    """ρ(λ) = c√((b−λ)(λ−a))/(2πλ) (continuous part of μ_S)."""
    a, b = mp_edges(c)
    return mpmath.mpf(c) * mpmath.sqrt(max((b - lam) * (lam - a), 0)) / (2 * mpmath.pi * lam)


def mp_law_integral(g, c):
    r"""∫ g dμ_S = (1−c)_+ g(0) + ∫_a^b g(λ)ρ(λ)dλ by tanh-sinh quadrature (split at the midpoint)."""
    c = mpmath.mpf(c)
    a, b = mp_edges(c)
    cont = mpmath.quad(lambda t: g(t) * mp_density(t, c), [a, (a + b) / 2, b])
    atom = (1 - c) * g(mpmath.mpf(0)) if c < 1 else 0
    return cont + atom


def semicircle_integral(g):
    r"""∫_{−2}^{2} g(x) √(4−x²)/(2π) dx (mpmath tanh-sinh)."""
    return mpmath.quad(lambda x: g(x) * mpmath.sqrt(4 - x * x) / (2 * mpmath.pi), [-2, 0, 2])


def semicircle_floor(nu, gamma):
    r"""E_∞ = γ² ∫ ρ_sc(x) dx/(νx² + γ)²: the c → ∞ limit of E_A when d = 0, μ = 0 (docs/theory.md §7)."""
    nu, gamma = mpmath.mpf(nu), mpmath.mpf(gamma)
    return gamma**2 * semicircle_integral(lambda x: 1 / (nu * x * x + gamma) ** 2)


# ----------------------------------------------------------------------------- Monte Carlo helpers
def mc_theory_gap(f, n, c, gamma, geometry=None, draws=8, seed=0, model="attention", k_se=4.0):
    r"""Monte Carlo (exact finite-n model, :func:`symattn.simulate`) against the theory at the same n.

    Theory: :func:`symattn.memorization_error` with the finite-p diagonal d_n (``n=n``) for the
    attention model. Returns a dict with ``mc`` (mean over draws), ``se`` (std/√draws), ``theory``,
    ``z`` = (mc − theory)/se and ``tol`` = k_se·se, each an array over γ.
    """
    import warnings

    import symattn as sa

    gamma = np.atleast_1d(np.asarray(gamma, dtype=float))
    res = sa.simulate(f, n=n, c=c, gamma=gamma, geometry=geometry, draws=draws, seed=seed,
                      models=(model,), progress=False)
    per = getattr(res, model)
    mc = per.mean(axis=0)
    se = per.std(axis=0, ddof=1) / math.sqrt(draws)
    with warnings.catch_warnings(record=True) as caught:  # e.g. the finite-p strength warning
        warnings.simplefilter("always")
        th = np.asarray(sa.memorization_error(f, c, gamma, geometry=geometry, model=model,
                                              n=n if model == "attention" else None), dtype=float)
    return {"warnings": [str(w.message).split(":")[0] for w in caught],"mc": mc, "se": se, "theory": th, "z": (mc - th) / se, "tol": k_se * se, "per_draw": per,
            "n": n, "p": res.p, "draws": draws, "seconds": res.seconds}


def mc_quadratic_form(f, n, c, geometry=None, draws=8, seed=0, model="attention"):
    r"""Monte Carlo of ŷᵀMŷ with M = ΦᵀΦ/n: ‖X K ŷ‖²/n (attention) or ‖X ŷ‖²/n (linear).

    Uses the package's token sampler and kernel (:func:`symattn.montecarlo.sample_tokens`,
    :func:`~symattn.montecarlo.kernel_matrix`, f on the diagonal) with the per-draw generators of
    :func:`~symattn.montecarlo.draw_generators`. Returns (per-draw values, p).
    """
    from symattn.model import as_geometry, dimension
    from symattn.montecarlo import draw_generators, kernel_matrix, sample_tokens

    geo = as_geometry(geometry)
    p = dimension(n, c)
    mu, _, _ = geo.vectors(p)
    W = None if geo.is_null else geo.weight_matrix(p)
    vals = []
    for rng in draw_generators(seed, draws):
        X, y = sample_tokens(n, p, mu, rng)
        yh = y / math.sqrt(n)
        if model == "attention":
            v = X @ (kernel_matrix(f, X, W) @ yh)
        else:
            v = X @ yh
        vals.append(float(v @ v) / n)
    return np.array(vals), p
