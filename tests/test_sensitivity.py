"""symattn.sensitivity (docs/theory.md §6.9) against 40-digit central differences of sa.solve.

The reference is an independent method: the closed-form mpmath solver (docs/theory.md §5.8) at
40 digits, differenced with a binary step h = 2^-40 about the exact Gram entry (truncation error
O(h²) ~ 1e-24); the sensitivity uses the quadrature solver's traces and the explicit formula.
"""

from __future__ import annotations

import mpmath
import pytest

import symattn as sa
from symattn.sensitivity import GRAM_NAMES

BASE = dict(snr=1.0, wk2=1.0, wq2=0.8, mu_wk=0.5, mu_wq=0.3, wk_wq=0.2)
H = 2.0**-40


def _central_difference(f, c, gamma, wrt):
    E = [sa.solve(f, c, gamma, sa.Geometry(**dict(BASE, **{wrt: BASE[wrt] + s * H})), backend="mpmath",
                  dps=40).attention[()] for s in (1, -1)]
    with mpmath.workdps(40):
        return (E[0] - E[1]) / (2 * mpmath.mpf(H))


CASES = [("tanh", 0.5, "snr"), pytest.param("tanh", 0.5, "mu_wk", marks=pytest.mark.slow),
         pytest.param("relu", 2.0, "snr", marks=pytest.mark.slow),
         pytest.param("relu", 2.0, "mu_wk", marks=pytest.mark.slow),
         pytest.param("erf", 3.0, "mu_wq", marks=pytest.mark.slow)]


@pytest.mark.parametrize("f, c, wrt", CASES)
def test_sensitivity_matches_a_40_digit_central_difference(f, c, wrt):
    cd = _central_difference(f, c, 0.5, wrt)
    geo = sa.Geometry(**BASE)
    d40 = sa.sensitivity(f, c, 0.5, geo, wrt=wrt, backend="mpmath", dps=40)[()]
    d64 = float(sa.sensitivity(f, c, 0.5, geo, wrt=wrt))
    with mpmath.workdps(40):
        assert abs(d40 - cd) < mpmath.mpf(10) ** -20
    assert abs(d64 - float(cd)) < 1e-8 * abs(float(cd))
    assert cd != 0


def test_sensitivity_broadcasts_and_rejects_unknown_parameters():
    d = sa.sensitivity("tanh", [0.5, 2.0], 1.0, sa.Geometry.aligned(snr=1.0), wrt="snr")
    assert d.shape == (2,) and (d < 0).all()
    with pytest.raises(sa.ParameterError):
        sa.sensitivity("tanh", 0.5, 1.0, None, wrt="c")
    assert set(GRAM_NAMES) >= {"snr", "mu_wk"}
