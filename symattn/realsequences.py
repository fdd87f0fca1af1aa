r"""Real token sequences: the time correlation T of MiniLM's input embeddings along real text (docs/theory.md §15.9).

The theory of docs/theory.md §15 takes tokens :math:`x_t = z_t` (μ = 0) with :math:`E[z_tz_s^\top] = T_{ts}I_p`. Here
the tokens are real: text that ships with Python (the docstrings of a fixed list of standard-library modules,
:data:`CORPUS_MODULES`, and the Zen of Python), cut into word pieces by MiniLM's own vocabulary (a BERT uncased
WordPiece tokenizer, :func:`wordpiece`, written here because the project depends on no tokenizer library), and
embedded by all-MiniLM-L6-v2's input word embeddings (the ``[real]`` extra; p = 384). The embeddings are centred
and whitened with the corpus covariance (so that E z zᵀ = I_p over the corpus, as the model's marginal law), and

.. math::  \hat r_k = \frac{1}{p\,N_k}\sum_{\text{windows}}\sum_{t} z_t^\top z_{t+k}\qquad(k = 1..L)

estimates the autocorrelation (:func:`estimate_autocorrelation`). :func:`compare` then sets the theory at that T
(:meth:`symattn.Layer.theory` with ``tokens=TokenLaw(autocorr=r̂)``: ridge regression §15.2, attention's training
error §15.5) against the exact errors of the real windows themselves (each window of n consecutive word pieces
one draw, iid balanced labels, :func:`symattn.montecarlo.draw_errors`), and against the iid theory.

Position embeddings are left out (they are the same in every window: a deterministic sequence, not the random
noise of the model); the whitened embeddings are neither Gaussian nor exactly isotropic, and the text is one
corpus: what this measures is how far the theory at the estimated T is from real sequences, not a validation.
"""

from __future__ import annotations

import unicodedata

import numpy as np

from .errors import ParameterError

__all__ = ["CORPUS_MODULES", "corpus_text", "load_vocabulary", "wordpiece", "load_word_embeddings",
           "embedded_windows", "estimate_autocorrelation", "compare"]

#: the standard-library modules whose docstrings (module, public classes and functions) make the corpus
CORPUS_MODULES = ("argparse", "collections", "json", "textwrap", "functools", "itertools", "pathlib", "logging",
                  "subprocess", "datetime", "random", "statistics", "fractions", "decimal", "heapq", "bisect",
                  "string", "shutil", "tempfile", "unittest", "doctest", "inspect", "typing", "dataclasses",
                  "contextlib", "email", "http.client", "urllib.parse", "csv", "configparser", "zipfile", "tarfile",
                  "calendar", "difflib", "pprint", "threading", "queue", "socket", "sqlite3", "xml.dom.minidom")


def _zen() -> str:
    """The Zen of Python, decoded from the ``this`` module's source (importing it would print it)."""
    import codecs
    import importlib.util
    import re

    src = open(importlib.util.find_spec("this").origin, encoding="utf-8").read()
    return codecs.decode(re.search(r's = """(.*?)"""', src, re.S).group(1), "rot13")


def corpus_text() -> str:
    """The corpus: the Zen of Python, then the docstrings of :data:`CORPUS_MODULES` (module, then its public
    classes and functions in name order), one paragraph each; deterministic for a given Python version.

    Examples
    --------
    >>> text = corpus_text()
    >>> text.startswith("The Zen of Python") and len(text.split()) > 20000
    True
    """
    import importlib
    import inspect

    parts = [_zen()]
    for name in CORPUS_MODULES:
        mod = importlib.import_module(name)
        parts.append(inspect.getdoc(mod) or "")
        for attr in sorted(getattr(mod, "__all__", None) or dir(mod)):
            if attr.startswith("_"):
                continue
            obj = getattr(mod, attr, None)
            if (inspect.isclass(obj) or inspect.isfunction(obj)) and getattr(obj, "__module__", "") == mod.__name__:
                parts.append(inspect.getdoc(obj) or "")
    return "\n\n".join(p for p in parts if p)


def load_vocabulary() -> dict:
    """MiniLM's WordPiece vocabulary (``vocab.txt`` of the ``[real]`` extra): word piece → id.

    Returns
    -------
    dict
        30,522 entries for all-MiniLM-L6-v2 (``[PAD]`` is 0, ``[UNK]`` 100).

    Raises
    ------
    RealWeightsUnavailable
        Without the ``[real]`` extra.

    Examples
    --------
    >>> from symattn.errors import RealWeightsUnavailable
    >>> try:
    ...     unk = load_vocabulary()["[UNK]"]
    ... except RealWeightsUnavailable:
    ...     unk = 100                         # the [real] extra is not installed
    >>> unk
    100
    """
    from .realweights import minilm_path

    path = minilm_path().with_name("vocab.txt")
    with open(path, encoding="utf-8") as fh:
        return {line.rstrip("\n"): i for i, line in enumerate(fh)}


def _basic_tokens(text: str) -> list:
    """BERT's basic tokenizer (uncased): lower case, accents stripped, split on white space and punctuation."""
    text = unicodedata.normalize("NFD", text.lower())
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Mn")
    out, word = [], []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch.isspace() or cat.startswith("C"):
            if word:
                out.append("".join(word))
                word = []
        elif cat.startswith("P") or (33 <= ord(ch) <= 47 or 58 <= ord(ch) <= 64 or 91 <= ord(ch) <= 96
                                     or 123 <= ord(ch) <= 126):
            if word:
                out.append("".join(word))
                word = []
            out.append(ch)
        else:
            word.append(ch)
    if word:
        out.append("".join(word))
    return out


def wordpiece(text: str, vocab: dict, max_chars: int = 100) -> list:
    """The word-piece ids of ``text``: BERT's uncased basic tokenizer, then greedy longest-match-first word
    pieces (continuations prefixed ``##``); a word with no split, or longer than ``max_chars``, is ``[UNK]``.

    Examples
    --------
    >>> vocab = {"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3, ",": 4}
    >>> wordpiece("Unaffable, unaffable", vocab)
    [1, 2, 3, 4, 1, 2, 3]
    >>> wordpiece("xyz", vocab)
    [0]
    """
    unk = vocab["[UNK]"]
    ids = []
    for word in _basic_tokens(text):
        if len(word) > max_chars:
            ids.append(unk)
            continue
        start, pieces = 0, []
        while start < len(word):
            end = len(word)
            while end > start:
                piece = ("##" if start else "") + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            if end == start:
                pieces = [unk]
                break
            pieces.append(vocab[piece])
            start = end
        ids += pieces
    return ids


def load_word_embeddings() -> np.ndarray:
    """MiniLM's input word embeddings (vocabulary × 384, float64) from the ``[real]`` extra's safetensors file.

    Returns
    -------
    numpy.ndarray
        ``embeddings.word_embeddings.weight``, shape (30522, 384).

    Examples
    --------
    >>> from symattn.errors import RealWeightsUnavailable
    >>> try:
    ...     shape = load_word_embeddings().shape
    ... except RealWeightsUnavailable:
    ...     shape = (30522, 384)                 # the [real] extra is not installed
    >>> shape
    (30522, 384)
    """
    from .realweights import import_safetensors, minilm_path

    safe_open = import_safetensors()
    with safe_open(str(minilm_path()), framework="numpy") as fh:
        return np.asarray(fh.get_tensor("embeddings.word_embeddings.weight"), dtype=np.float64)


def embedded_windows(n: int, text: str | None = None) -> np.ndarray:
    """The corpus as whitened embedding windows: shape (windows, p, n), each window n consecutive word pieces.

    The word embeddings of the whole stream are centred and whitened with the stream's own covariance
    (C^{-1/2}, C = cov over tokens), so that the tokens have mean 0 and identity covariance over the corpus.

    Parameters
    ----------
    n : int
        Tokens per window (2 <= n).
    text : str, optional
        The text (default :func:`corpus_text`).

    Returns
    -------
    numpy.ndarray
        Shape (windows, p, n): the tokens of each window as columns, as :func:`symattn.simulate` takes X.

    Examples
    --------
    >>> from symattn.errors import RealWeightsUnavailable
    >>> try:
    ...     Z = embedded_windows(64, text=corpus_text()[:20000])
    ...     ok = Z.shape[1:] == (384, 64) and abs(float(np.mean(Z * Z)) - 1) < 0.05   # whitened: E z² ≈ 1
    ... except RealWeightsUnavailable:
    ...     ok = True                                                                # no [real] extra
    >>> ok
    True
    """
    from .validation import check_int

    n = check_int("n", n, 2, 10**6)
    ids = wordpiece(corpus_text() if text is None else text, load_vocabulary())
    E = load_word_embeddings()[ids]                       # tokens × p
    E = E - E.mean(axis=0)
    w, V = np.linalg.eigh(E.T @ E / len(E))
    Z = E @ (V / np.sqrt(np.maximum(w, 1e-12 * w.max()))) @ V.T
    windows = len(Z) // n
    if windows < 2:
        raise ParameterError("n", n, f"at most {len(Z) // 2} (two windows of the corpus' {len(Z)} word pieces)")
    return Z[: windows * n].reshape(windows, n, -1).transpose(0, 2, 1)


def estimate_autocorrelation(windows: np.ndarray, lags: int = 8) -> np.ndarray:
    r"""r̂_1..r̂_L of whitened windows (shape (windows, p, n)): the mean of :math:`z_t^\top z_{t+k}/p` over every
    window and position, over that of :math:`z_t^\top z_t/p` (module docstring).

    Examples
    --------
    >>> from symattn.tokens import TokenLaw
    >>> rng = np.random.default_rng(0)
    >>> Z = np.stack([TokenLaw(ar1=0.5).noise(300, 200, rng) for _ in range(4)])
    >>> estimate_autocorrelation(Z, lags=3).round(2).tolist()          # AR(1): 0.5, 0.25, 0.125
    [0.5, 0.25, 0.12]
    """
    Z = np.asarray(windows, dtype=float)
    r0 = np.einsum("wpt,wpt->", Z, Z) / Z[..., 0].size / Z.shape[2]
    return np.array([np.einsum("wpt,wpt->", Z[..., :-k], Z[..., k:]) / (Z[..., 0].size * (Z.shape[2] - k)) / r0
                     for k in range(1, lags + 1)])


def compare(f="tanh", n: int = 384, gamma=(0.01, 0.1, 1.0, 10.0), lags: int = 8, seed: int = 0,
            windows: np.ndarray | None = None) -> dict:
    r"""The theory at the estimated T against the exact errors of the real windows (μ = 0, iid balanced labels).

    Parameters
    ----------
    f : str
        The activation.
    n : int
        Tokens per window; c = p/n with p = 384.
    gamma : sequence of float
        The ridges.
    lags : int
        The lags L of the estimated autocorrelation r̂_1..r̂_L (the theory's T).
    seed : int
        The labels' seed (one permutation per window).
    windows : numpy.ndarray, optional
        Precomputed :func:`embedded_windows` (default: computed).

    Returns
    -------
    dict
        ``r`` (r̂), ``n``, ``p``, ``c``, ``windows``, ``gamma``; per model (``attention``, ``linear``): ``mc``, ``se``
        (over windows), ``theory`` (at T = Toeplitz of r̂ with Bartlett's taper r̂_k(1 − k/(L + 1)), which keeps
        every T_n positive definite), ``theory_iid`` (T = I), and the control ``mc_gaussian``, ``se_gaussian``:
        exact Monte Carlo of Gaussian tokens at that T, as many draws as windows. ``distinct``: the mean fraction
        of distinct word pieces in a window.

    Examples
    --------
    Any windows of shape (windows, p, n) do; here Gaussian ones of a known AR(1) law stand in for the real
    :func:`embedded_windows`, so the windows and the control are draws of one law:

    >>> from symattn.tokens import TokenLaw
    >>> rng = np.random.default_rng(0)
    >>> Z = np.stack([TokenLaw(ar1=0.3).noise(60, 120, rng) for _ in range(6)])
    >>> r = compare("tanh", windows=Z, gamma=(1.0,), lags=3)
    >>> round(float(r["r"][0]), 1), r["distinct"], r["c"]
    (0.3, 1.0, 0.5)
    >>> d = r["linear"]
    >>> bool(abs(d["mc"][0] - d["theory"][0]) < max(4 * d["se"][0], 0.03 * d["theory"][0]))
    True
    """
    import warnings

    from .accuracy import internal
    from .layer import Layer
    from .montecarlo import draw_errors
    from .tokens import TokenLaw

    Z = embedded_windows(n) if windows is None else np.asarray(windows, dtype=float)
    W, p, n = Z.shape
    c = p / n
    r = estimate_autocorrelation(Z, lags)
    law = TokenLaw(autocorr=r * (1 - np.arange(1, lags + 1) / (lags + 1)))   # Bartlett's taper: positive definite
    g = np.asarray(gamma, dtype=float)
    y0 = np.ones(n)
    y0[: n // 2] = -1.0
    rng = np.random.default_rng(seed)
    runs = [draw_errors(f, Z[w], rng.permutation(y0), g) for w in range(W)]
    # a window holds the same word piece many times: identical columns of X (the fraction of distinct ones)
    distinct = float(np.mean([np.unique(Z[w].T.round(9), axis=0).shape[0] / n for w in range(W)]))
    out = {"r": r, "n": n, "p": p, "c": c, "windows": W, "gamma": g.tolist(), "distinct": distinct}
    with warnings.catch_warnings(), internal():
        warnings.simplefilter("ignore")
        th = Layer(f).theory(c, g, n=n, tokens=law, model="both")
        iid = Layer(f).theory(c, g, n=n, model="both")
        # the control: Gaussian tokens of the same T (the theory's own model), as many draws as windows
        gauss = Layer(f).simulate(n, c, g, draws=W, seed=seed, tokens=law, progress=False)
    for model in ("attention", "linear"):
        vals = np.array([run[model] for run in runs])
        out[model] = {"mc": vals.mean(0), "se": vals.std(0, ddof=1) / np.sqrt(W),
                      "theory": np.asarray(getattr(th, model), dtype=float),
                      "theory_iid": np.asarray(getattr(iid, model), dtype=float),
                      "mc_gaussian": np.asarray(getattr(gauss, model + "_mean"), dtype=float),
                      "se_gaussian": np.asarray(getattr(gauss, model + "_sem"), dtype=float)}
    return out
