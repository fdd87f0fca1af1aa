r"""The linear algebra of the general-W solver (docs/theory.md §12.2, §12.5): the arithmetic contexts, content
keys of W, the p×p inverses with their condition estimate, the reused workspace, Gram matrices and eigen-
decompositions (cached per content of W).

The solver is written once against an arithmetic (:class:`FloatArith`, :class:`MPArith`:
:mod:`symattn.backends.context` plus a p×p inverse, dot, eigh, least squares, the activation and its
Gauss–Hermite rule); ``backend='mpmath'`` evaluates the same formulas at ``dps`` digits.
"""

from __future__ import annotations

import threading

import numpy as np

import mpmath

from ...caching import Memo, content_key
from ...gauss import gauss_hermite
from ..context import FloatContext, MPContext

__all__ = ["FloatArith", "MPArith", "FLOAT", "arith", "model_arith", "array_key", "forget_digests", "cast", "rmul",
           "workspace", "symmetric_eig", "seed_rank_one_eig", "lapack_inv", "lapack_inv_rcond", "grams",
           "identity_minus"]


class FloatArith(FloatContext):
    """float64 arithmetic of this module: :class:`~symattn.backends.context.FloatContext` plus the few
    operations the general-W solver needs beyond it (fast p×p inverse, dot, eigh, least squares, the
    activation and its quadrature nodes, and ``low``, the precision of the far-from-converged phase)."""

    low, high = np.float32, np.float64

    def scalar(self, x):
        return float(x)

    def inv_p(self, A):
        return lapack_inv(A)

    def dot(self, A, B):
        """Σ_ij A_ij B_ij (C-ordered arrays of equal shape)."""
        return float(np.vdot(A, B))

    def eigh(self, W):
        return np.linalg.eigh(W)

    def lstsq(self, A, b):
        return np.linalg.lstsq(A, b, rcond=None)[0]

    def f(self, f, x):
        """The centred activation at the points x."""
        return np.asarray(f.numpy(x), dtype=float)

    def f_constants(self, f):
        """(a1, ν, d) of f for ξ ~ N(0, 1)."""
        return float(f.a1), float(f.nu), float(f.d)

    def gauss_hermite(self, nq):
        return gauss_hermite(nq)


class MPArith(MPContext):
    """The same operations as :class:`FloatArith` at ``dps`` digits (mpmath numbers in object arrays)."""

    low = high = None

    def scalar(self, x):
        return mpmath.mpf(x) if not isinstance(x, (mpmath.mpf, mpmath.mpc)) else +x

    def inv_p(self, A):
        return self.inv(A)

    def dot(self, A, B):
        return mpmath.fsum(np.ravel(A * B))

    def eigh(self, W):
        lam, E = mpmath.eigsy(mpmath.matrix(np.asarray(W, dtype=object).tolist()))
        p = W.shape[0]
        return (np.array([lam[i] for i in range(p)], dtype=object),
                np.array([[E[i, j] for j in range(p)] for i in range(p)], dtype=object))

    def lstsq(self, A, b):
        x = mpmath.qr_solve(mpmath.matrix(np.asarray(A, dtype=object).tolist()), mpmath.matrix(list(b)))[0]
        return np.array([x[i] for i in range(A.shape[1])], dtype=object)

    def f(self, f, x):
        a0 = f.constants(self.dps)["a0"]
        return np.asarray(np.frompyfunc(lambda t: f._mp_eval(t) - a0, 1, 1)(np.asarray(x, dtype=object)),
                          dtype=object)

    def f_constants(self, f):
        k = f.constants(self.dps)
        return k["a1"], k["nu"], k["d"]

    def gauss_hermite(self, nq):
        return _gauss_hermite_mp(nq, self.dps)


#: probabilists' Gauss–Hermite rules at dps digits already computed ((nq, dps) → (x, w))
GAUSS_HERMITE_MP = Memo("general_w.gauss_hermite_mp", 32)


def _gauss_hermite_mp(nq: int, dps: int):
    """The nq-point probabilists' Gauss–Hermite rule (weights summing to 1) at ``dps`` digits: the float64
    nodes refined by Newton's method on He_nq (three-term recurrence, 10 guard digits), w_i ∝ 1/He_{nq−1}(x_i)²
    (O(nq²) operations instead of the O(nq³) eigenvalue problem of :func:`symattn.gauss.gauss_hermite`)."""
    x, w = GAUSS_HERMITE_MP.get((int(nq), int(dps)), lambda: _gauss_hermite_rule(int(nq), int(dps)))
    return x.copy(), w.copy()


def _gauss_hermite_rule(nq: int, dps: int):
    """:func:`_gauss_hermite_mp`, computed."""
    x0, _ = gauss_hermite(nq)
    with mpmath.workdps(dps + 10):
        def he(x):
            a, b = mpmath.mpf(1), x          # He_0, He_1
            for k in range(1, nq):
                a, b = b, x * b - k * a      # He_{k+1} = x He_k − k He_{k−1}
            return b, a                      # He_nq(x), He_{nq−1}(x)
        xs, ws = [], []
        for xi in x0:
            x = mpmath.mpf(float(xi))
            for _ in range(60):
                hn, hm = he(x)
                dx = hn / (nq * hm)          # He_nq' = nq He_{nq−1}
                x -= dx
                if abs(dx) <= mpmath.mpf(10) ** (-(dps + 8)) * max(1, abs(x)):
                    break
            xs.append(x)
            ws.append(1 / he(x)[1] ** 2)
        tot = mpmath.fsum(ws)
    with mpmath.workdps(dps):
        return np.array([+v for v in xs], dtype=object), np.array([+(v / tot) for v in ws], dtype=object)


FLOAT = FloatArith()


def arith(ctx=None):
    """The arithmetic of a context (None: float64): :class:`FloatArith` or :class:`MPArith`.

    Examples
    --------
    >>> arith() is FLOAT, arith(MPArith(30)).dps
    (True, 30)
    """
    if ctx is None:
        return FLOAT
    if isinstance(ctx, (FloatArith, MPArith)):
        return ctx
    return MPArith(ctx.dps) if ctx.dps is not None else FLOAT


def model_arith(m):
    """The arithmetic of a model (float64 unless it was built with ``ctx``).

    Examples
    --------
    >>> model_arith(object()) is FLOAT
    True
    """
    return getattr(m, "arith", None) or FLOAT


#: eigendecompositions of symmetric W already seen (content of W, dps → (λ, E) or None)
EIGEN = Memo("general_w.eigen", 8)
#: Gram matrices of W already seen (content of W, dtype → (W, Wᵀ, WᵀW, WWᵀ))
GRAMS = Memo("general_w.grams", 16)
#: the content keys taken since the last :func:`~.pencil.general_w_model` (id of the array → (array, key)); the
#: entry holds the array, so that its id is not reused while it is remembered
ARRAY_KEYS = Memo("general_w.array_keys", 64)


def forget_digests() -> None:
    """Forget the remembered content keys (:func:`array_key`); :func:`~.pencil.general_w_model` calls it, since W
    may have changed in place since the last evaluation.

    Examples
    --------
    >>> forget_digests()
    """
    ARRAY_KEYS.clear()


def array_key(W) -> tuple:
    """The content key of an array (:func:`symattn.caching.content_key`: shape, dtype, digest of the entries): a W
    changed in place is a new key.

    Hashing a 384×384 W costs about 1 ms, so the key of an array is remembered until the next
    :func:`~.pencil.general_w_model` (where every evaluation starts), which forgets them all.

    Examples
    --------
    >>> array_key(np.eye(2)) == array_key(np.eye(2)), array_key(np.eye(2)) == array_key(2 * np.eye(2))
    (True, False)
    """
    return ARRAY_KEYS.get((id(W),), lambda: (W, content_key(np.asarray(W))[0]))[1]


def cast(x, dtype):
    """x in ``dtype`` (None: unchanged).

    Examples
    --------
    >>> cast(np.ones(2), np.float32).dtype, cast(1.5, None)
    (dtype('float32'), 1.5)
    """
    if dtype is None:
        return x
    return x.astype(dtype, copy=False) if isinstance(x, np.ndarray) else dtype(x)


def rmul(A, x):
    """A @ x for a real float A and x real or complex128 (p,) or (p, k): a complex x is multiplied as its
    interleaved real and imaginary columns (one real product, no complex copy of A); object arrays as they are.

    Examples
    --------
    >>> A = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> rmul(A, np.array([1j, 1.0]))
    array([2.+1.j, 4.+3.j])
    """
    if A.dtype == object or not np.iscomplexobj(x) or x.dtype != np.complex128:
        return A @ x
    x2 = np.ascontiguousarray(x.reshape(x.shape[0], -1))
    return (A @ x2.view(np.float64)).view(np.complex128).reshape((A.shape[0],) + x.shape[1:])


#: scratch buffers of the p×p route ((p, dtype, thread) → dict of arrays), see :func:`workspace`
WORKSPACES = Memo("general_w.workspace", 8)


def workspace(p: int, dtype) -> dict:
    """Scratch arrays for one p and float dtype, reused by every evaluation of this thread: 'base', 'tmp'
    (p×p) and 'P', 'PT' (4×p×p). Fresh p×p temporaries in float64 (1.2 MB at p = 384) are returned to the
    system by the allocator and page-faulted back on every evaluation, which costs as much as the BLAS work.

    Examples
    --------
    >>> sorted(workspace(3, np.float64)), workspace(3, np.float64)['P'].shape
    (['P', 'PT', 'base', 'tmp'], (4, 3, 3))
    """
    return WORKSPACES.get((int(p), np.dtype(dtype).str, threading.get_ident()),
                          lambda: {"base": np.empty((p, p), dtype), "tmp": np.empty((p, p), dtype),
                                   "P": np.empty((4, p, p), dtype), "PT": np.empty((4, p, p), dtype)})


def symmetric_eig(W, ar=FLOAT):
    """(λ, E) with W = E diag(λ) Eᵀ when W is exactly symmetric, else None (cached per array).

    Examples
    --------
    >>> lam, E = symmetric_eig(np.diag([2.0, 1.0]))
    >>> lam.tolist(), symmetric_eig(np.array([[1.0, 1.0], [0.0, 1.0]]))
    ([1.0, 2.0], None)
    """
    # None: not symmetric (cached too)
    return EIGEN.get((array_key(W), ar.dps), lambda: ar.eigh(W) if np.array_equal(W, W.T) else None)


def lapack_inv(A):
    """A^{-1} by LAPACK getrf + getri (in A's precision; numpy's inv is a slower gesv, and slower still in
    float32); raises numpy.linalg.LinAlgError when A is exactly singular.

    Examples
    --------
    >>> lapack_inv(np.array([[2.0, 0.0], [1.0, 1.0]]))
    array([[ 0.5,  0. ],
           [-0.5,  1. ]])
    """
    from scipy.linalg import lapack

    # a C-ordered A is the Fortran-ordered Aᵀ: invert that without a copy, (Aᵀ)^{-1} = (A^{-1})ᵀ
    At = A.T
    getrf, getri, getri_lwork = lapack.get_lapack_funcs(("getrf", "getri", "getri_lwork"), (At,))
    lu, piv, info = getrf(At, overwrite_a=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getrf info {info})")
    lwork, _ = getri_lwork(A.shape[0])
    out, info = getri(lu, piv, lwork=int(lwork), overwrite_lu=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getri info {info})")
    return out.T


def lapack_inv_rcond(A, max_err):
    """A^{-1} by LAPACK getrf + gecon + getri for A C-ordered real float (overwritten), or None when the
    estimated error eps·cond_∞(A) (gecon's reciprocal condition estimate, from the LU factors) is not below
    ``max_err`` (then getri is not run). Raises numpy.linalg.LinAlgError when A is exactly singular.

    Examples
    --------
    >>> lapack_inv_rcond(np.diag([2.0, 4.0]), 1e-3).diagonal().tolist()
    [0.5, 0.25]
    >>> lapack_inv_rcond(np.diag([1.0, 1e-15]), 1e-3) is None
    True
    """
    from scipy.linalg import lapack

    At = A.T   # Fortran-ordered Aᵀ, factorised in place; ‖Aᵀ‖_1 = ‖A‖_∞
    anorm = float(np.max(np.sum(np.abs(A), axis=1)))
    getrf, gecon, getri, getri_lwork = lapack.get_lapack_funcs(("getrf", "gecon", "getri", "getri_lwork"), (At,))
    lu, piv, info = getrf(At, overwrite_a=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getrf info {info})")
    rcond, info = gecon(lu, anorm, norm="1")
    if not float(np.finfo(A.dtype).eps) < max_err * float(rcond):
        return None
    lwork, _ = getri_lwork(A.shape[0])
    out, info = getri(lu, piv, lwork=int(lwork), overwrite_lu=True)
    if info != 0:
        raise np.linalg.LinAlgError(f"singular matrix (getri info {info})")
    return out.T


def grams(W, dtype=None):
    """(W, Wᵀ, WᵀW, WWᵀ) in ``dtype`` (None: W's own), C-contiguous (cached per array and dtype).

    Examples
    --------
    >>> W = np.array([[1.0, 2.0], [0.0, 1.0]])
    >>> [g.tolist() for g in grams(W)[2:]]
    [[[1.0, 2.0], [2.0, 5.0]], [[5.0, 2.0], [2.0, 1.0]]]
    """
    def make():
        if dtype is None or np.dtype(dtype) == W.dtype:
            return W, np.ascontiguousarray(W.T), W.T @ W, W @ W.T
        return tuple(np.ascontiguousarray(a, dtype=dtype) for a in grams(W, None))

    return GRAMS.get((array_key(W), None if dtype is None else np.dtype(dtype).str), make)


def identity_minus(p, Wd, Wt, a_, d_):
    """I − αW − δWᵀ (float arrays) in the reused buffer ``base`` of :func:`workspace`.

    Examples
    --------
    >>> W = np.array([[0.0, 1.0], [0.0, 0.0]])
    >>> identity_minus(2, W, W.T.copy(), 2.0, 3.0).tolist()
    [[1.0, -2.0], [-3.0, 1.0]]
    """
    ws = workspace(p, Wd.dtype)
    base, tmp = ws["base"], ws["tmp"]
    np.multiply(Wd, -a_, out=base)
    np.multiply(Wt, d_, out=tmp)
    np.subtract(base, tmp, out=base)
    base.flat[::p + 1] += 1
    return base



def seed_rank_one_eig(W_hat, e, b):
    """Put the eigendecomposition of W_hat = I + (b − 1)êêᵀ (‖ê‖ = 1) into the eigen cache without an ``eigh``:
    λ = (b, 1, …, 1) with the Householder reflector E = I − 2vvᵀ/vᵀv, v = ê + sign(ê_1)e_1, whose first column is
    ∓ê (E is symmetric and orthogonal, so W_hat = E diag(λ) Eᵀ); the other columns span ê^⊥, where W_hat is I.

    Examples
    --------
    >>> e = np.array([0.6, 0.8]); W_hat = np.eye(2) + 2.0 * np.outer(e, e)
    >>> seed_rank_one_eig(W_hat, e, 3.0)
    >>> lam, E = symmetric_eig(W_hat)
    >>> bool(np.allclose(E @ np.diag(lam) @ E.T, W_hat))
    True
    """
    def householder():
        v = np.array(e, dtype=float)
        v[0] += 1.0 if v[0] >= 0 else -1.0
        lam = np.ones(v.size)
        lam[0] = b
        return lam, np.eye(v.size) - (2.0 / float(v @ v)) * np.outer(v, v)

    EIGEN.get((array_key(W_hat), None), householder)
