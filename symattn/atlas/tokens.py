r"""The accuracy atlas' token block: the theory under time-correlated tokens (docs/theory.md §15) against exact
Monte Carlo, as atlas cells.

The cells come from the measured tables of docs/theory.md §15.3–§15.5 (exact Monte Carlo, ``tokens=``):

- ``docs/tokens_attention_theory_mc.csv``: attention's training error (engine ``temporal``), tanh, ReLU, GELU,
  erf, AR(1) ρ ∈ {0.2, 0.5, 0.8}, c ∈ {0.5, 1, 2}, μ = 0 and aligned ‖μ‖² = 1, γ ∈ {0.01, 0.1, 1, 10},
  n = 1000, 16 draws;
- ``docs/tokens_attention_theory_mc_n500.csv``: the same theory at the Monte Carlo of §15.4 (tanh, ReLU, cos;
  ρ ∈ {0.5, 0.9}; c ∈ {0.5, 1}; n = 500, 8 draws), where the misses are;
- ``docs/tokens_attention_heldout_mc.csv``: the held-out laws of §15.5 (AR(1) ρ = 0.65; r = (0.5, 0.2, −0.1)
  with Markov labels q = 0.8; AR(1) ρ = 0.8 with q = 0.9), tanh and ReLU, c = 1, n = 1000, 16 draws, seed 21;
- ``docs/tokens_attention_test_theory_mc.csv``: attention's **test** error (block ``tokens-test``, ``error`` =
  ``test``; docs/theory.md §15.6) at the grid above and the held-out laws, n = 1000, 16 draws (the Monte Carlo of
  ``docs/tokens_attention_test_mc.csv`` with the theory of :func:`symattn.temporal.attention_test_errors`);
- ``docs/tokens_lr_mc.csv``: ridge regression on X (engines ``temporal/linear`` and ``temporal/linear-test``,
  activation ``linear``), training and test error, n = 1000, 16 draws.

Each row has the atlas' columns (:data:`symattn.accuracy.COLUMNS`) and block ``tokens`` (``tokens-test``); its ``call`` holds the
law (``tokens``: :meth:`symattn.tokens.TokenLaw.as_dict`), from which :func:`symattn.accuracy.load_atlas` reads
the two coordinates the distance adds under a token law: r₁ (the lag-1 correlation of the noise) and
ρ_y = 2q − 1 (of Markov labels; 0 for iid labels). The table is shipped as ``symattn/data/atlas_tokens.csv``
(:data:`symattn.accuracy.TOKENS_ATLAS_PATH`), apart from the main atlas so that the two are regenerated
independently; :meth:`symattn.Layer.theory` reads it for its AccuracyWarning under a token law.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

from ..accuracy import within_tolerance

__all__ = ["token_cells", "write_token_table", "SOURCES"]

#: the measured tables (under docs/) the block is made of, with their n and draws
SOURCES = {"attention": (("tokens_attention_theory_mc.csv", 1000, 16), ("tokens_attention_theory_mc_n500.csv", 500, 8),
                         ("tokens_attention_heldout_mc.csv", 1000, 16)),
           "attention-test": (("tokens_attention_test_theory_mc.csv", 1000, 16),),
           "linear": (("tokens_lr_mc.csv", 1000, 16),)}


def _law(text: str) -> dict:
    """The law of a row of docs/tokens_lr_mc.csv ('ar1=0.9;markov=0.9', 'autocorr=[0.5;0.2;-0.1];markov=0.2').

    Examples
    --------
    >>> _law("autocorr=[0.5;0.2;-0.1];markov=0.2")
    {'autocorr': [0.5, 0.2, -0.1], 'markov': 0.2}
    """
    return {k: [float(x) for x in v.strip("[]").split(";")] if v.startswith("[") else float(v)
            for k, v in re.findall(r"(\w+)=(\[[^\]]*\]|[^;]+)", text)}


def _row(block, engine, activation, layer, c, gamma, n, snr, theory, mc, se, draws, law, geometry, features,
         error="train"):
    from ..tokens import as_token_law

    call = {"layer": layer.to_dict() if layer is not None else None, "c": c, "n": n, "mu": "zero" if snr == 0 else
            "geometry", "snr": snr, "geometry": geometry, "correction": None,
            "tokens": as_token_law(law).as_dict()}
    return {"block": block, "engine": engine, "layer": layer.label if layer is not None else "X (ridge)",
            "activation": activation, "c": c, "gamma": gamma, "n": n, "p": round(c * n), "tile": 1,
            "mu": call["mu"], "snr": snr, "align": features["align"], "log_reff": features["log_reff"],
            "theory": theory, "mc": mc, "se": se, "draws": draws, "gap": (mc - theory) / theory,
            "z": (mc - theory) / se if se > 0 else 0.0, "within": within_tolerance(theory, mc, se),
            "call": json.dumps(call, sort_keys=True), "error": error}


def token_cells(docs) -> list:
    """The token block's rows (atlas columns) from the measured tables under the folder ``docs``.

    Examples
    --------
    >>> from pathlib import Path
    >>> import symattn
    >>> docs = Path(symattn.__file__).parents[1] / "docs"
    >>> rows = token_cells(docs) if (docs / "tokens_lr_mc.csv").is_file() else [{"engine": "temporal"}]
    >>> "temporal" in {r["engine"] for r in rows}
    True
    """
    from ..layer import Layer
    from ..model import Geometry

    docs = Path(docs)
    rows = []
    for error, source in (("train", "attention"), ("test", "attention-test")):
        for name, n, draws in SOURCES[source]:
            with open(docs / name, newline="", encoding="utf-8") as fh:
                for r in csv.DictReader(fh):
                    layer = Layer(r["f"])
                    geo = Geometry.aligned(float(r["snr"]))
                    rows.append(_row("tokens" if error == "train" else "tokens-test", "temporal", layer.activation_name,
                                     layer, float(r["c"]), float(r["gamma"]), n, float(r["snr"]), float(r["E_theory"]),
                                     float(r["E_mc"]), float(r["se"]), draws,
                                     _law(r["law"]) if "law" in r else {"ar1": float(r["rho"])}, geo.as_dict(),
                                     layer.features(geometry=geo), error=error))
    for name, n, draws in SOURCES["linear"]:
        with open(docs / name, newline="", encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                engine = "temporal/linear" + ("-test" if r["error"] == "test" else "")
                rows.append(_row("tokens", engine, "linear", None, float(r["c"]), float(r["gamma"]), n, float(r["snr"]),
                                 float(r["theory"]), float(r["mc"]), float(r["se"]), draws, _law(r["law"]), None,
                                 {"align": 0.0, "log_reff": 0.0}))
    return rows


def write_token_table(docs, path=None) -> Path:
    """Write the token block (:func:`token_cells`) as an atlas table (default: the shipped
    :data:`symattn.accuracy.TOKENS_ATLAS_PATH`)."""
    from ..accuracy import TOKENS_ATLAS_PATH
    from . import write_table

    return write_table(token_cells(docs), TOKENS_ATLAS_PATH if path is None else path)
