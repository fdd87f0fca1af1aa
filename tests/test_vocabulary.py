"""One vocabulary across the front (issue 35): the front functions take the same keywords or refuse them
with a ParameterError naming them; a misspelt keyword or CLI flag is named with the nearest correct one; a
MiniLM reference out of range names ``weights`` and the allowed layers and heads."""

from __future__ import annotations

import inspect

import pytest

import symattn as sa
from symattn.errors import KeywordError, ParameterError

FRONT = {
    "memorization_error": lambda **kw: sa.memorization_error("tanh", 0.5, 0.1, **kw),
    "generalization_error": lambda **kw: sa.generalization_error("tanh", 0.5, 0.1, **kw),
    "simulate": lambda **kw: sa.simulate("tanh", n=20, c=0.5, gamma=[0.1], draws=1, **kw),
    "Layer": lambda **kw: sa.Layer("tanh", **kw),
    "Layer.theory": lambda **kw: sa.Layer("tanh").theory(0.5, 0.1, **kw),
    "Layer.simulate": lambda **kw: sa.Layer("tanh").simulate(20, 0.5, [0.1], draws=1, **kw),
    "solve": lambda **kw: sa.solve("tanh", 0.5, 0.1, **kw),
    "limits": lambda **kw: sa.limits("tanh", 0.5, 1.0, which="gamma->oo", **kw),
    "Geometry": lambda **kw: sa.Geometry(**kw),
    "kernel_constants": lambda **kw: sa.kernel_constants("tanh", **kw),
    "activation": lambda **kw: sa.activation("tanh", **kw),
}

#: (function, misspelt keyword, the keyword meant)
TYPOS = [("memorization_error", "gama", "gamma"), ("memorization_error", "geometri", "geometry"),
         ("memorization_error", "weight", "weights"), ("generalization_error", "modle", "model"),
         ("simulate", "drows", "draws"), ("simulate", "seeds", "seed"), ("Layer", "weigths", "weights"),
         ("Layer", "actvation", "activation"), ("Layer.theory", "gamme", "gamma"),
         ("Layer.simulate", "geometry_", "geometry"), ("solve", "diagonl", "diagonal"), ("limits", "wich", "which"),
         ("Geometry", "snrr", "snr"), ("Geometry", "mu_wq2", "mu_wq"), ("kernel_constants", "diagonla", "diagonal"),
         ("activation", "kink", "kinks")]


@pytest.mark.parametrize("front,typo,meant", TYPOS)
def test_misspelt_keyword_says_did_you_mean(front, typo, meant):
    with pytest.raises(KeywordError) as info:
        FRONT[front](**{typo: 0.1})
    err = info.value
    assert isinstance(err, ParameterError) and isinstance(err, TypeError)   # still a TypeError, as Python's
    assert err.name == typo and meant in err.suggestions
    text = str(err)
    assert f"{typo}=" in text and f"did you mean {meant}" in text and "\n" not in text


def test_keyword_check_keeps_the_signature():
    assert "gamma" in inspect.signature(sa.memorization_error).parameters
    assert "weights" in inspect.signature(sa.Layer).parameters


def test_generalization_error_takes_the_keywords_of_memorization_error():
    """Issue 35: generalization_error(..., weights=...) raised a bare TypeError. It takes every keyword of
    memorization_error; issue 36: one weight matrix has a test theory (a value), a layer whose engine (or method)
    has none raises a one-line ParameterError naming ``error`` and it, an inconsistent keyword names itself."""
    import numpy as np

    mem = set(inspect.signature(sa.memorization_error).parameters) - {"error"}
    gen = set(inspect.signature(sa.generalization_error).parameters)
    assert mem <= gen
    assert np.isfinite(sa.generalization_error("tanh", 0.5, 0.1, weights=np.eye(20)))
    expected = {"heads": ([np.eye(20), 2 * np.eye(20)], "error"), "residual": (True, "error"), "kernel": ("softmax", "error"),
                "correction": ("finite-p", "error"), "temperature": (2.0, "temperature"), "mu": (np.ones(20), "weights"),
                "readout": ("sum", "readout"), "structure": ("free", "structure")}
    for key, (value, name) in expected.items():
        with pytest.raises(ParameterError) as info:
            sa.generalization_error("tanh", 0.5, 0.1, **{key: value})
        assert info.value.name == name and "\n" not in str(info.value), key
        if name == "error":   # the engine (or the correction's method) that has no test theory
            assert "engine" in str(info.value) or "method" in str(info.value), key
    # the defaults given explicitly are accepted
    ref = sa.generalization_error("tanh", 0.5, 0.1)
    assert sa.generalization_error("tanh", 0.5, 0.1, weights=None, kernel="entrywise", residual=False) == ref


@pytest.mark.parametrize("ref,what", [("minilm:9", "layer 9"), ("minilm:6", "layer 6"), ("minilm:2:12", "head 12"),
                                      ("minilm:1:40", "head 40")])
def test_minilm_reference_out_of_range_names_weights_and_the_ranges(ref, what):
    """Issue 35: weights="minilm:9" said "invalid layer=9". No [real] extra is needed to refuse it."""
    for call in (lambda: sa.Layer("gelu", weights=ref), lambda: sa.memorization_error("gelu", 1.0, 0.1, weights=ref)):
        with pytest.raises(ParameterError) as info:
            call()
        text = str(info.value)
        assert info.value.name == "weights" and ref in text and what in text
        assert "0–5" in text and "0–11" in text


@pytest.mark.parametrize("argv,flag,meant", [
    (["solve", "-a", "tanh", "--c", "0.5", "--gama", "0.1"], "--gama", "--gamma"),
    (["solve", "-a", "tanh", "--c", "0.5", "--gamma", "0.1", "--snrr", "1"], "--snrr", "--snr"),
    (["simulate", "-a", "tanh", "--c", "0.5", "--gamma", "0.1", "--drwas", "2"], "--drwas", "--draws"),
    (["hermite", "tanh", "--kmx", "3"], "--kmx", "--kmax"),
    (["sweep", "spec.toml", "--stroe", "dir"], "--stroe", "--store"),
    (["--versoin"], "--versoin", "--version"),
])
def test_cli_unknown_flag_is_named_with_the_nearest(argv, flag, meant, capsys):
    """Issue 35: `--gama 0.1` reported "required: --gamma" and never named the unknown flag."""
    from symattn.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"unknown flag {flag}" in err and f"did you mean {meant}?" in err


def test_cli_abbreviations_and_negative_values_still_parse(capsys):
    from symattn.cli import main

    assert main(["solve", "-a", "tanh", "--c", "0.5", "--gam", "0.1", "--json"]) == 0
    capsys.readouterr()
    assert main(["solve", "-a", "tanh", "--c", "0.5", "-g", "0.1", "--snr", "-1"]) == 2
    assert "snr" in capsys.readouterr().err
