r"""The attention theory for a general fixed p×p weight matrix W (docs/theory.md §12), numerically.

Model: X = μyᵀ + Z (p×n, z_ij ~ N(0, 1)), K = f(XᵀWX/√p)/√p exactly (no rescaling), Φ = XK,
E_A(γ) = γ² ŷᵀ(ΦᵀΦ/n + γ)^{-2}ŷ = −γ² F'(γ), F(γ) = ŷᵀ(ΦᵀΦ/n + γ)^{-1}ŷ.

**Gaussian-equivalent kernel** (§12.1). With ω = ‖W‖_F²/p (the variance of the off-diagonal
argument ξ_ij = z_iᵀWz_j/√p) and ρ = tr W²/‖W‖_F² (the correlation of ξ_ij and ξ_ji),

  √p K_ij ≈ a0' + a1'·x_iᵀWx_j/√p + s·N_ij  (i ≠ j),   √p K_ii = f(x_iᵀWx_i/√p),

a0' = E f(ξ), a1' = E f'(ξ) = E[ξ f(ξ)]/ω, s² = Var f(ξ) − a1'²ω (ξ ~ N(0, ω)), and N an
elliptic noise matrix, unit variance, corr(N_ij, N_ji) = τ with s²τ = Cov(f(ξ), f(ξ')) − a1'²ρω
((ξ, ξ') centred Gaussian, variances ω, correlation ρ). The diagonal is a latent variable: its
law is that of f(q)/√p, q = x_iᵀWx_i/√p ≈ N((tr W + μᵀWμ)/√p, (2‖W_s‖_F² + 4‖W_sμ‖²)/p),
W_s = (W + Wᵀ)/2, integrated by Gauss–Hermite nodes.

**Pencil** (§12.2). With Y = X/√n, K = (a1/c)YᵀWY + D + σÑ (σ = s/√c, Ñ = N/√n), Q = (γ + KᵀYᵀYK)^{-1}
is the (x, x) block of the inverse of the 8-block linear pencil in the unknowns
x, u, w (n-space) and t, v, h, g, l (p-space):

  γx + (a1/c)Yᵀg + Dw + σÑᵀw = b,   u − (a1/c)Yᵀl − Dx − σÑx = 0,   w − Yᵀv = 0,
  t − Yx = 0,   v − Yu = 0,   h − Yw = 0,   g − Wᵀh = 0,   l − Wt = 0.

Its random part is linear in Y, Yᵀ and Ñ, whose covariance maps return multiples of the
identity (E[YAYᵀ] = tr_n A·I_p, E[YᵀBY] = c·tr_p B·I_n, E[ÑAÑᵀ] = tr_n A, E[ÑAÑ] = τ tr_n A), so the
operator-valued Dyson equation G = (L0 − η(G))^{-1} closes on the 3×3 matrix g of normalised
traces of the n-blocks; W enters through the 2p×2p block matrix
B2 = [[I − αW, −βWᵀ], [−γ'W, I − δWᵀ]] (after eliminating g, l and v), whose traces
tr_p(W H_tt), tr_p(W H_th), tr_p(Wᵀ H_ht), tr_p(Wᵀ H_hh) (H = B2^{-1}) are computed by dense
linear algebra at every iteration: with κ = βγ', D = I − δWᵀ, A = I − αW and the p×p Schur complements
N = DA − κWᵀW, N' = AD − κWWᵀ (D commutes with Wᵀ, A with W), H_tt = N^{-1}D, H_th = βN^{-1}Wᵀ,
H_ht = γ'N'^{-1}W, H_hh = N'^{-1}A, so each evaluation is two p×p inverses (not one 2p×2p); and since
det B2 = det N(α, δ, q), q = αδ − βγ', the four traces are derivatives of log det N, so one inverse (of N)
gives them and their Jacobian (docs/theory.md §12.5).

**Signal** (§12.3). Y = Y_Z + μŷᵀ is a rank-one deterministic shift of every Y-slot of the
pencil; Woodbury on the pencil, with the quadratic forms ŷᵀ𝒢_nn ŷ = tr_n, μᵀ𝒢_pp μ (exact
p×p solves with μ) and zero n–p cross forms, gives F. The directions y, Zᵀμ, ZᵀWμ, ZᵀWᵀμ of the
issue all come out of this one shift.

**Strong direction** (§12.3, ``signal='latent'``, the default when μ ≠ 0). The kernel's dependence
on each token's projection u_i = μ̂ᵀx_i (conditional mean F(δ) and pair-dependent slope F'(δ),
δ_ij = b u_i u_j/√p, b = μ̂ᵀWμ̂) is what the Gaussian-equivalent kernel misses (measured by
kernel-level Monte Carlo). It is added as ΔE = E_fp(Ŵ) − E_GE(Ŵ), Ŵ = I + (b − 1)μ̂μ̂ᵀ: the
finite-p conditional-kernel theory (docs/theory.md §10.3, :mod:`symattn.backends.finite_p`, latent
dimension 1) minus this module's value for the same surrogate (:func:`~.strong.strong_direction_correction`).
A shortcut checked by Monte Carlo, exact for W = Ŵ. ``signal='linear'`` is the Gaussian-equivalent
value alone; ``signal='conditional'`` (rejected, kept for the record) only replaces the y yᵀ
coefficient a1'·t (t = μᵀWμ/√p) by F_odd(t) of §10.2.

**Symmetric W** (§12.5): one ``eigh``, then B2 splits into p independent 2×2 blocks, so each Dyson
evaluation is O(p) (traces) or O(p²) (solves with μ). Otherwise each evaluation is one p×p inverse of N
(LAPACK getrf + gecon + getri; the two inverses of N and N' with a probe check when N's estimated condition
is too large), in float32 during the Anderson phase (relative residual above 1e-3), and the Newton steps use
a float32 Jacobian of the traces (three p×p products; the derivative's is float64).

**Arithmetic.** The solver is written once against an arithmetic context (:class:`~.linalg.FloatArith`,
:class:`~.linalg.MPArith`: :mod:`symattn.backends.context` plus a p×p inverse, dot, eigh, least squares, the
activation and its Gauss–Hermite rule); ``backend='mpmath'`` evaluates the same formulas at ``dps``
digits (p <= :data:`MPMATH_MAX_P`).

**Derivative.** F is solved at real γ (everything real), then F'(γ) by implicit
differentiation of the fixed point, with the Jacobian by complex steps
(:func:`~.error.general_w_error`).

**Modules**, one per piece of docs/theory.md §12, each importing only those below it (an import-linter
``layers`` contract in pyproject.toml):

- :mod:`.response`: the linear response of both pencils to a p-space shift, the readout's moments (§14.9);
- :mod:`.error` (E_GE + the correction) and :mod:`.hermite` (the block Dyson equation, §12.8): the two solvers;
- :mod:`.strong`: the strong-direction correction (§12.3);
- :mod:`.physical`: the physical checks, the γ-ladder and :func:`~.physical.model_error` (§12.9);
- :mod:`.pencil`: the model, the self-energies, the Dyson map and its solve, F by Woodbury (§12.2, §12.3);
- :mod:`.hoperator`: the p-trace operators H = B2^{-1} (dense, symmetric, low rank; §12.2, §12.5);
- :mod:`.block_constants` (§12.8, §12.9): the Hermite-block constants, by quadrature over the latent law;
- :mod:`.constants` (§12.1): the Gaussian-equivalent constants; :mod:`.latent`: the Gauss rule of the conditional
  variance of an entry and the trace identities of the transposed entry (§12.8);
- :mod:`.linalg`: the arithmetic contexts, digests, p×p inverses, workspace, Gram matrices, eigen-decompositions.

The entry point that chooses between the free noise and the blocks is
:mod:`symattn.backends.general_w_entry`.
"""

from .block_constants import (MAX_BLOCK_RANK, BlockAtoms, HermiteBlockConstants, compress_weights,
                              hermite_block_constants)
from .constants import CONSTANT_NODES, DIAGONAL_NODES, GeneralWConstants, general_w_constants
from .error import general_w_error
from .hermite import hermite_block_error
from .linalg import arith, array_key
from .pencil import (MPMATH_MAX_P, SIGNAL_RULES, GeneralWModel, PencilSolution, general_w_model, pencil_map,
                     resolvent_F, solve_pencil)
from .physical import model_error, physical_points
from .strong import strong_direction_correction

__all__ = [
    "SIGNAL_RULES",
    "MPMATH_MAX_P",
    "DIAGONAL_NODES",
    "CONSTANT_NODES",
    "GeneralWConstants",
    "general_w_constants",
    "GeneralWModel",
    "general_w_model",
    "pencil_map",
    "solve_pencil",
    "PencilSolution",
    "resolvent_F",
    "general_w_error",
    "strong_direction_correction",
    "model_error",
    "physical_points",
    "MAX_BLOCK_RANK",
    "BlockAtoms",
    "compress_weights",
    "HermiteBlockConstants",
    "hermite_block_constants",
    "hermite_block_error",
    "arith",
    "array_key",
]
