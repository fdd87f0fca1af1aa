"""Tests of symattn.model: parameter validation, Geometry and the kernel constants."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symattn.errors import ParameterError, SymattnError
from symattn.model import (
    Geometry,
    KernelConstants,
    as_geometry,
    check_c,
    check_diagonal,
    check_dps,
    check_gamma,
    check_int,
    check_nonnegative,
    check_positive,
    dimension,
    kernel_constants,
)


# ----------------------------------------------------------------------------- validators
def test_parameter_error_message_names_parameter_value_and_range():
    with pytest.raises(ParameterError) as ei:
        check_c(-1.0)
    e = ei.value
    assert str(e) == "invalid c=-1.0: allowed 0 < c <= 10000"
    assert (e.name, e.value) == ("c", -1.0)
    assert isinstance(e, SymattnError) and isinstance(e, ValueError)


@pytest.mark.parametrize("bad", [0.0, -1e-300, 1e4 * (1 + 1e-12), float("nan"), float("inf"), -float("inf")])
def test_check_c_rejects(bad):
    with pytest.raises(ParameterError, match=r"invalid c="):
        check_c(bad)


def test_check_c_accepts_and_returns_arrays():
    assert float(check_c(1e4)) == 1e4
    assert float(check_c(1e-9)) == 1e-9
    np.testing.assert_array_equal(check_c([0.5, 1, 2]), [0.5, 1.0, 2.0])
    with pytest.raises(ParameterError, match="c="):
        check_c([0.5, -1])


@pytest.mark.parametrize("bad", [0, -0.1, 1e13, float("nan"), [0.1, float("nan")], [], "abc", None])
def test_check_gamma_rejects(bad):
    with pytest.raises(ParameterError, match=r"^invalid gamma="):
        check_gamma(bad)


def test_check_gamma_accepts():
    np.testing.assert_array_equal(check_gamma([1e-12, 1, 1e12]), [1e-12, 1.0, 1e12])


def test_check_positive_upper_and_message():
    with pytest.raises(ParameterError, match=r"allowed 0 < x <= 2"):
        check_positive("x", 3, upper=2)
    with pytest.raises(ParameterError, match=r"allowed 0 < x < inf"):
        check_positive("x", -3)


def test_check_nonnegative():
    assert check_nonnegative("snr", 0) == 0.0
    assert check_nonnegative("snr", 2.5) == 2.5
    for bad in (-1e-9, [1.0, 2.0], float("nan")):
        with pytest.raises(ParameterError, match="snr"):
            check_nonnegative("snr", bad)


@pytest.mark.parametrize("value,expected", [(15, 15), (30, 30), (1000, 1000), (20.0, 20), (np.int64(50), 50)])
def test_check_dps_accepts(value, expected):
    assert check_dps(value) == expected
    assert type(check_dps(value)) is int


@pytest.mark.parametrize("bad", [14, 0, -5, 1001, 20.5, True, "30", None, float("nan")])
def test_check_dps_rejects(bad):
    with pytest.raises(ParameterError, match=r"^invalid dps="):
        check_dps(bad)


def test_check_int_ranges():
    assert check_int("n", 2, 2) == 2
    with pytest.raises(ParameterError, match=r"invalid n=1: allowed an integer with 2 <= n"):
        check_int("n", 1, 2)
    with pytest.raises(ParameterError, match=r"1 <= k <= 3"):
        check_int("k", 4, 1, 3)
    with pytest.raises(ParameterError, match="an integer"):
        check_int("n", False, 0)


def test_check_diagonal():
    assert check_diagonal("f") == "f"
    assert check_diagonal("zero") == "zero"
    with pytest.raises(ParameterError, match="diagonal"):
        check_diagonal("one")


@pytest.mark.parametrize("n,c,p", [(1000, 0.5, 500), (500, 1.0, 500), (3, 0.5, 2), (10, 0.01, 1), (7, 1 / 3, 2)])
def test_dimension(n, c, p):
    assert dimension(n, c) == p


# ----------------------------------------------------------------------------- Geometry
def test_default_geometry_is_null():
    g = Geometry()
    assert g.is_null and g.rank == 1 and g.snr == 0.0
    assert g.signal_weight == 0.0
    assert as_geometry(None) == g


def test_geometry_gram_layout():
    g = Geometry(snr=2.0, wk2=3.0, wq2=4.0, mu_wk=0.5, mu_wq=-0.25, wk_wq=1.0)
    np.testing.assert_array_equal(g.gram, [[2.0, 0.5, -0.25], [0.5, 3.0, 1.0], [-0.25, 1.0, 4.0]])
    assert g.as_dict() == {"snr": 2.0, "wk2": 3.0, "wq2": 4.0, "mu_wk": 0.5, "mu_wq": -0.25, "wk_wq": 1.0}
    np.testing.assert_array_equal(g.kappa_K, [0.5])
    np.testing.assert_array_equal(g.kappa_Q, [-0.25])
    assert g.signal_weight == pytest.approx(2.0 - 0.125)
    assert not g.is_null
    assert "snr=2.0" in repr(g)
    assert Geometry(**g.as_dict()) == g
    assert g != Geometry(snr=2.0)


@pytest.mark.parametrize("snr", [0.0, 0.5, 1.0, 4.0])
def test_aligned_is_w_equal_mu(snr):
    g = Geometry.aligned(snr)
    np.testing.assert_allclose(g.gram, np.full((3, 3), snr))
    mu, wk, wq = g.vectors(8)
    np.testing.assert_allclose(wk[0], mu, atol=1e-12)
    np.testing.assert_allclose(wq[0], mu, atol=1e-12)


def test_aligned_with_theta():
    g = Geometry.aligned(4.0, theta=1.0)  # w = mu/|mu|
    assert g.as_dict() == pytest.approx({"snr": 4.0, "wk2": 1.0, "wq2": 1.0, "mu_wk": 2.0, "mu_wq": 2.0, "wk_wq": 1.0})
    with pytest.raises(ParameterError, match="snr"):
        Geometry.aligned(-1.0)


def test_from_vectors_rank_one():
    rng = np.random.default_rng(0)
    mu, wk, wq = rng.standard_normal((3, 6))
    g = Geometry.from_vectors(mu, wk, wq)
    assert g.rank == 1
    assert g.snr == pytest.approx(mu @ mu)
    assert g.as_dict()["mu_wk"] == pytest.approx(mu @ wk)
    assert g.as_dict()["wk_wq"] == pytest.approx(wk @ wq)
    g0 = Geometry.from_vectors(mu)  # no weights: w = 0
    assert g0.signal_weight == pytest.approx(mu @ mu)
    np.testing.assert_array_equal(g0.gram[1:, :], 0.0)


def test_from_vectors_and_from_gram_rank_two():
    rng = np.random.default_rng(1)
    p = 7
    mu = rng.standard_normal(p)
    wk = rng.standard_normal((2, p))
    wq = rng.standard_normal((2, p))
    g = Geometry.from_vectors(mu, wk, wq)
    assert g.rank == 2 and g.gram.shape == (5, 5)
    V = np.vstack([mu, wk, wq])
    np.testing.assert_allclose(g.gram, V @ V.T, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(g.kappa_K, wk @ mu)
    np.testing.assert_allclose(g.kappa_Q, wq @ mu)
    assert g.signal_weight == pytest.approx(mu @ mu + (wk @ mu) @ (wq @ mu))
    g2 = Geometry.from_gram(V @ V.T)
    assert g2.rank == 2 and g2 == Geometry.from_gram(g.gram)
    assert g2.as_dict()["rank"] == 2
    # vectors(p) reproduces the Gram matrix
    for pp in (5, 12):
        m2, k2, q2 = g2.vectors(pp)
        assert m2.shape == (pp,) and k2.shape == (2, pp) and q2.shape == (2, pp)
        W = np.vstack([m2, k2, q2])
        np.testing.assert_allclose(W @ W.T, g2.gram, atol=1e-12 * max(1.0, np.abs(g2.gram).max()))


def test_from_gram_rank_zero_is_mu_only():
    g = Geometry.from_gram([[2.0]])
    assert g.rank == 0
    mu, wk, wq = g.vectors(3)
    assert mu @ mu == pytest.approx(2.0) and wk.shape == (0, 3) and wq.shape == (0, 3)
    np.testing.assert_array_equal(g.weight_matrix(3), np.eye(3))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3), st.integers(0, 10_000), st.sampled_from([0, 1, 2]))
def test_vectors_reproduce_gram_property(r, seed, deficiency):
    """Random PSD Gram matrices (possibly singular) are embedded exactly by vectors(p)."""
    rng = np.random.default_rng(seed)
    k = 1 + 2 * r
    dim = max(1, k - deficiency)
    V = rng.standard_normal((k, dim)) * rng.uniform(0.1, 3.0)
    gram = V @ V.T
    g = Geometry.from_gram(gram)
    p = k + int(rng.integers(0, 5))
    mu, wk, wq = g.vectors(p)
    E = np.vstack([mu[None, :], wk, wq])
    np.testing.assert_allclose(E @ E.T, g.gram, atol=1e-12 * max(1.0, np.abs(gram).max()))


def test_weight_matrix():
    g = Geometry(snr=1.0, wk2=2.0, wq2=0.5, mu_wk=0.3, mu_wq=-0.2, wk_wq=0.7)
    p = 6
    W = g.weight_matrix(p)
    mu, wk, wq = g.vectors(p)
    np.testing.assert_allclose(W, np.eye(p) + np.outer(wk[0], wq[0]), atol=1e-14)
    assert np.linalg.matrix_rank(W - np.eye(p), tol=1e-10) == 1
    # the signal part of mu^T W mu is snr + kappa_K kappa_Q
    assert mu @ W @ mu == pytest.approx(g.signal_weight, abs=1e-12)
    assert np.trace(W - np.eye(p)) == pytest.approx(0.7, abs=1e-12)  # w_Q^T w_K


def test_strength():
    g = Geometry.aligned(1.0)  # signal weight 1 + 1*1 = 2
    assert g.signal_weight == pytest.approx(2.0)
    assert g.strength(100) == pytest.approx(0.2)
    np.testing.assert_allclose(g.strength(np.array([4, 16])), [1.0, 0.5])
    assert Geometry(snr=3.0).strength(9) == pytest.approx(1.0)


def test_non_psd_geometry_is_rejected_with_a_hint():
    with pytest.raises(ParameterError) as ei:
        Geometry(snr=1.0, wk2=1.0, mu_wk=5.0)
    assert ei.value.name == "geometry"
    assert "positive semi-definite" in str(ei.value)
    assert "smallest eigenvalue" in str(ei.value)
    # boundary: |mu_wk| = sqrt(snr wk2) is allowed (w_K parallel to mu)
    Geometry(snr=1.0, wk2=4.0, mu_wk=2.0)


@pytest.mark.parametrize("kw,name", [
    ({"snr": -1.0}, "snr"), ({"wk2": -0.5}, "wk2"), ({"wq2": -2.0}, "wq2"),
    ({"snr": float("nan")}, "snr"), ({"mu_wk": float("inf")}, "mu_wk"), ({"wk_wq": [1.0, 2.0]}, "wk_wq"),
    ({"mu_wq": "x"}, "mu_wq"),
])
def test_geometry_bad_entries_name_the_parameter(kw, name):
    with pytest.raises(ParameterError) as ei:
        Geometry(**kw)
    assert ei.value.name == name
    assert f"invalid {name}=" in str(ei.value)


def test_from_gram_and_from_vectors_bad_input():
    with pytest.raises(ParameterError, match="gram"):
        Geometry.from_gram(np.eye(2))
    with pytest.raises(ParameterError, match="gram"):
        Geometry.from_gram(np.ones((3, 2)))
    with pytest.raises(ParameterError, match="rank"):
        Geometry.from_gram(np.eye(3), rank=2)
    with pytest.raises(ParameterError, match="symmetric"):
        Geometry.from_gram([[1.0, 0.5, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(ParameterError, match="mu"):
        Geometry.from_vectors(np.ones((2, 3)))
    with pytest.raises(ParameterError, match="wk"):
        Geometry.from_vectors(np.ones(3), np.ones(4), np.ones(3))
    with pytest.raises(ParameterError, match="wq"):
        Geometry.from_vectors(np.ones(3), np.ones((2, 3)), np.ones(3))
    with pytest.raises(ParameterError, match=r"invalid p=1: allowed p >= 2 \(the rank of the Gram matrix\)"):
        Geometry(snr=1.0, wk2=1.0).vectors(1)  # two independent vectors do not fit in R^1
    # p only needs the rank of the Gram matrix: a rank-one geometry embeds in R^2 (and R^1) exactly
    for p in (1, 2):
        mu, wk, wq = Geometry(snr=1.0).vectors(p)
        V = np.vstack([mu, wk, wq])
        np.testing.assert_array_equal(V @ V.T, Geometry(snr=1.0).gram)


def test_as_geometry():
    g = Geometry(snr=1.0)
    assert as_geometry(g) is g
    assert as_geometry({"snr": 1.0}) == g
    with pytest.raises(ParameterError, match="geometry"):
        as_geometry(3.0)


# ----------------------------------------------------------------------------- kernel constants
class _FakeActivation:
    """Duck-typed activation: kernel_constants only needs name, a1, nu, d, d_n, constants."""

    def __init__(self, a1=0.5, nu=0.75, d=1.0, name="fake"):
        self.name, self.a1, self.nu, self.d = name, a1, nu, d
        self.calls = []

    def d_n(self, p, snr=0.0):
        self.calls.append((p, snr))
        return 1.0 / math.sqrt(p)

    def constants(self, dps):
        import mpmath

        with mpmath.workdps(dps):
            a1, nu = mpmath.mpf(1) / 2, mpmath.mpf(3) / 4
            return {"a1": a1, "nu": nu, "s2": nu - a1**2}


def test_kernel_constants_infinite_p():
    k = kernel_constants(_FakeActivation())
    assert isinstance(k, KernelConstants)
    assert (k.a1, k.s2, k.d) == (0.5, 0.5, 1.0)
    assert k.nu == pytest.approx(0.75)
    assert kernel_constants(_FakeActivation(), diagonal="zero").d == 0.0


def test_kernel_constants_finite_p_uses_d_n():
    f = _FakeActivation()
    k = kernel_constants(f, n=400, c=0.25, snr=2.0)
    assert k.d == pytest.approx(0.1) and f.calls == [(100, 2.0)]
    k = kernel_constants(f, n=100, c=[1.0, 4.0])
    np.testing.assert_allclose(k.d, [0.1, 0.05])
    with pytest.raises(ParameterError, match="c"):
        kernel_constants(f, n=100)
    with pytest.raises(ParameterError, match="n"):
        kernel_constants(f, n=1, c=1.0)


def test_kernel_constants_superlinear_needs_zero_diagonal():
    f = _FakeActivation(d=math.inf, name="he3")
    with pytest.raises(ParameterError) as ei:
        kernel_constants(f)
    assert ei.value.name == "diagonal" and "--diagonal zero" in str(ei.value)
    with pytest.raises(ParameterError, match="diagonal"):
        kernel_constants(_FakeActivation(d=None))
    assert kernel_constants(f, diagonal="zero").d == 0.0
    with pytest.raises(ParameterError, match="diagonal"):
        kernel_constants(f, diagonal="ones")


def test_kernel_constants_mpmath():
    import mpmath

    k = kernel_constants(_FakeActivation(), dps=40)
    assert isinstance(k.a1, mpmath.mpf) and isinstance(k.d, mpmath.mpf)
    assert k.s2 == mpmath.mpf(1) / 2
