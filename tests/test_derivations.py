"""derivations/: the systems built step by step in SymPy are the ones symattn solves, and
docs/derivation.md is the builder's current output."""

from __future__ import annotations

import pytest
import sympy as sp

from derivations import build as B


@pytest.fixture(scope="module")
def steps():
    return B.build()


def test_every_derivation_step_matches_the_package(steps):
    assert len(steps) == 7
    failed = [(st.title, s) for st in steps for s, ok in st.checks if not ok]
    assert not failed, failed
    assert sum(len(st.checks) for st in steps) >= 15


def test_derivation_doc_is_generated_and_current(steps):
    text = B.render(steps)
    assert B.DOC.read_text() == text, "docs/derivation.md is out of date: run python -m derivations.build"
    assert "$$" in text and "generated" in text.splitlines()[0]


def test_each_step_has_latex(steps):
    for st in steps:
        assert st.equations, st.title
        for _, tex in st.equations:
            assert tex.strip()


def test_lambda_comparison_can_fail():
    """Control: a different weight matrix (W = I + 2 w_K w_Qᵀ) gives a Λ that does not match the system."""
    from symattn.systems import attention_system

    n, p, mu, y, Z, wK, wQ = B._matrix_symbols()
    X = mu * y.T + Z
    D = (X.T * (sp.Identity(p) + 2 * wK * wQ.T) * X - Z.T * Z).expand()
    G = attention_system(1).gram
    pos = {mu: 0, wK: 1, wQ: 2}
    L = B._read_off(D, [mu, wK, wQ], y, Z, lambda u, v: G[pos[u], pos[v]])
    assert not B._matrix_equal(L, attention_system(1).Lambda)


def test_gamma_word_rules():
    """(1/n)tr(K Q S) is T_QK^(1) (transpose + rotation); an unknown word is an error."""
    from symattn.systems.attention import TRACES, TRACE_SYMBOLS

    T = {(kind, j): s for (name, kind, j), s in zip(TRACES, TRACE_SYMBOLS)}
    assert B._canonical_trace(["K", "Q", "S"], T, lambda k: None) == T[("QK", 1)]
    assert B._canonical_trace(["S", "K", "Q", "K", "S"], T, lambda k: None) == T[("KQK", 2)]
    with pytest.raises(ValueError):
        B._canonical_trace(["Q", "Q"], T, lambda k: None)
