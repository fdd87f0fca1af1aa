"""fig_tokens (symattn.figures.tokens, docs/gallery.md): the errors against the AR(1) correlation ρ. One column at a
tiny size: the CSV's theory is the library's (§15.2, §15.5), its Monte Carlo an outside run of simulate(tokens=)."""

from __future__ import annotations

import csv
import math
from dataclasses import replace

import numpy as np
import pytest

import symattn as sa
from symattn.figures import tokens as fig
from symattn.figures.reproduce import FIGURES
from symattn.figures.runner import QUICK
from symattn.temporal import attention_errors, attention_test_errors, linear_errors

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_fig_tokens_theory_and_monte_carlo_are_the_librarys(tmp_path, monkeypatch):
    monkeypatch.setattr(fig, "COLUMNS", (("tanh", 1.0, 1.0),))
    s = replace(QUICK, n=80, draws=2, seed=3)
    assert "tokens" in FIGURES
    res = fig.make_tokens(s, None, tmp_path)
    assert sorted(p.rsplit("/", 1)[1] for p in res.files) == ["fig_tokens.csv", "fig_tokens.pdf", "fig_tokens.png"]
    with open(tmp_path / "fig_tokens.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    geo = sa.Geometry.aligned(1.0)
    sims = {rho: sa.simulate("tanh", n=80, c=1.0, gamma=list(fig.gammas(s)), geometry=geo, draws=2, seed=3,
                             tokens={"ar1": rho} if rho else None, error="both", progress=False)
            for rho in fig.RHOS}
    points = [r for r in rows if r["kind"] in ("point", "mc_only")]
    assert len(points) == 4 * len(fig.RHOS) * len(fig.gammas(s))
    for r in points:
        rho, g = float(r["x"]), float(r["gamma"])
        law = {"ar1": rho} if rho else None
        j = list(fig.gammas(s)).index(g)
        key = r["model"] + ("_test" if r["error"] == "test" else "")
        assert float(r["mc_mean"]) == pytest.approx(getattr(sims[rho], key + "_mean")[j], rel=1e-12)
        if r["model"] == "linear":
            assert float(r["theory"]) == pytest.approx(linear_errors(1.0, g, snr=1.0, tokens=law)[r["error"]],
                                                       rel=1e-10)
        elif r["error"] == "train":
            ref = attention_errors("tanh", 1.0, g, n=80, geometry=geo, tokens=law)["train"]
            assert float(r["theory"]) == pytest.approx(ref, rel=1e-7)
        elif rho > 0:   # attention's test error under T (§15.6)
            ref = attention_test_errors("tanh", 1.0, g, n=80, geometry=geo, tokens=law)["test"]
            assert r["kind"] == "point" and float(r["theory"]) == pytest.approx(ref, rel=1e-7)
    assert ("Monte Carlo points without a theory" in res.note) == any(r["kind"] == "mc_only" for r in points)
    assert all(math.isfinite(float(r["theory"])) for r in rows if r["kind"] == "curve")
    assert np.isfinite([float(r["mc_sem"]) for r in points]).all()
