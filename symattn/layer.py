r"""The attention layer as one object: :class:`Layer`, shared by the theory, the Monte Carlo, sweeps and the CLI.

A :class:`Layer` describes the features Φ the ridge readout sees (docs/theory.md §1, §12, §13):

.. math::

   Φ = X K,\qquad K = f(XᵀWX/\sqrt p)/\sqrt p                       &\quad\text{(plain; } W = I + w_K w_Qᵀ \text{ or the given weights)}\\
   Φ = X(I + K)                                                     &\quad\text{(residual=True)}\\
   Φ = [XK_1; …; XK_H]\ \text{or}\ X \textstyle\sum_h K_h          &\quad\text{(heads=…, readout='concat' | 'sum')}\\
   K_{ij} = e^{a_{ij}/τ}/\textstyle\sum_{l≠i} e^{a_{il}/τ},\ a = XᵀWX/\sqrt p &\quad\text{(kernel='softmax')}

and the training error is E(γ) = γ² ŷᵀ(ΦᵀΦ/n + γ)^{-2} ŷ, ŷ = y/√n.

- :meth:`Layer.theory` returns the deterministic equivalent as a :class:`~symattn.theory.TheoryResult`,
  computed by the engine of :data:`THEORY_ENGINES` that the layer's structure selects
  (:meth:`Layer.engine`), in the style of ``scipy.optimize.minimize(method=...)``;
- :meth:`Layer.simulate` returns the exact Monte Carlo (:class:`~symattn.montecarlo.SimulationResult`);
- :func:`memorization_error` and :func:`simulate` are the thin function forms of the two, with the
  same keyword names (``weights=`` in both).

Weights and heads may be arrays, ``.npy`` paths or references ``minilm:LAYER`` / ``minilm:LAYER:HEAD``
(all-MiniLM-L6-v2, unit-scaled, :func:`symattn.realweights.layer_weight`), resolved once. The layer
has a content :attr:`~Layer.digest` and round-trips through :meth:`Layer.to_dict` / :meth:`Layer.from_dict`
(JSON and TOML).
"""

from __future__ import annotations

import io
import json
import math
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from .backends.registry import METHODS, Registry, methods as backend_methods
from .errors import ParameterError
from .files import check_inside, read_regular
from .validation import known_keywords
from .model import MODELS, check_diagonal, check_error, check_heads, check_mu, check_variant_flags, check_weights

__all__ = ["Layer", "Engine", "THEORY_ENGINES", "memorization_error", "simulate", "resolve_weights",
           "resolve_heads", "tiled", "SIGNALS"]

#: the keys of :meth:`Layer.to_dict` (the constructor's keywords)
LAYER_KEYS = ("activation", "weights", "heads", "readout", "residual", "kernel", "temperature", "diagonal")
#: the constructor's defaults
LAYER_DEFAULTS = {"activation": "tanh", "weights": None, "heads": None, "readout": "concat", "residual": False,
                  "kernel": "entrywise", "temperature": None, "diagonal": "f"}
#: the named signals of :meth:`Layer.signal`
SIGNALS = ("zero", "top", "random:SEED", "FILE.npy")
MINILM = "minilm:"


# ----------------------------------------------------------------------------- weight references
def _file_sha256(path: Path, key: str = "weights") -> str:
    from .caching import digest

    return digest(read_regular(path, key))


def _read_npy(key: str, ref: str, what: str) -> np.ndarray:
    """A real array from a regular ``.npy`` file (:func:`symattn.files.read_regular`: no FIFO, no device)."""
    data = read_regular(ref, key)
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ParameterError(key, ref, f"a readable .npy file holding {what} ({exc})") from None
    if not isinstance(arr, np.ndarray):
        raise ParameterError(key, ref, f"a .npy file holding {what} (this is an .npz archive)")
    if not np.issubdtype(arr.dtype, np.number) or np.iscomplexobj(arr) or arr.dtype == np.bool_:
        raise ParameterError(key, ref, f"a .npy file holding {what} of real numbers (this one holds {arr.dtype})")
    return arr


def _minilm_parts(key: str, ref: str, heads_allowed: bool) -> tuple:
    """(layer, head or None) of a ``minilm:LAYER[:HEAD]`` reference; a ParameterError naming ``key``."""
    from . import realweights as rw

    parts = ref[len(MINILM):].split(":")
    heads = rw.MINILM_HIDDEN // rw.MINILM_HEAD_DIM
    ranges = f"layers LAYER 0–{rw.MINILM_LAYERS - 1}" + (f" and heads HEAD 0–{heads - 1}" if heads_allowed else "")
    allowed = ("minilm:LAYER or minilm:LAYER:HEAD" if heads_allowed else "minilm:LAYER (all heads of a layer)") \
        + f" with {ranges} (all-MiniLM-L6-v2)"
    if len(parts) not in ((1, 2) if heads_allowed else (1,)) or not all(x.strip().isdigit() for x in parts):
        raise ParameterError(key, ref, allowed)
    layer, head = int(parts[0]), (int(parts[1]) if len(parts) == 2 else None)
    if not 0 <= layer < rw.MINILM_LAYERS or not (head is None or 0 <= head < heads):
        what = f"layer {layer}" if not 0 <= layer < rw.MINILM_LAYERS else f"head {head}"
        raise ParameterError(key, ref, allowed, hint=f"all-MiniLM-L6-v2 has no {what}")
    return layer, head


@lru_cache(maxsize=64)
def _minilm_weight(layer: int, head) -> np.ndarray:
    """W_KᵀW_Q of a MiniLM layer (or one head), unit-scaled; read once per process."""
    from . import realweights as rw

    W = rw.layer_weight(rw.load_minilm(), layer, head=head)
    W.setflags(write=False)
    return W


@lru_cache(maxsize=8)
def _minilm_heads(layer: int) -> tuple:
    from . import realweights as rw

    w = rw.load_minilm()
    return tuple(_minilm_weight(layer, h) for h in range(w.query[layer].shape[0] // rw.MINILM_HEAD_DIM))


def resolve_weights(ref, key: str = "weights") -> tuple:
    r"""The p×p matrix W a reference names, and its JSON-ready reference.

    Parameters
    ----------
    ref : array_like or str
        An array; a ``.npy`` file (a p×p array, read without pickles); or ``minilm:LAYER``
        (W_KᵀW_Q of all heads of an all-MiniLM-L6-v2 layer, 0–5) or ``minilm:LAYER:HEAD`` (one head,
        0–11), each scaled to ‖W‖_F²/p = 1 (:func:`symattn.realweights.layer_weight`).
    key : str
        The parameter named in errors.

    Returns
    -------
    (numpy.ndarray, str or dict)
        W (float64, read-only) and its reference: the ``minilm:`` string, ``{"path", "sha256"}`` of a
        file, or ``{"array": {"shape", "sha256"}}`` of an array given in memory.

    Examples
    --------
    >>> W, ref = resolve_weights(np.eye(3))
    >>> W.shape, sorted(ref["array"])
    ((3, 3), ['sha256', 'shape'])
    >>> resolve_weights("minilm:9")
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid weights='minilm:9': allowed minilm:LAYER or minilm:LAYER:HEAD with layers LAYER 0–5 and heads HEAD 0–11 (all-MiniLM-L6-v2). all-MiniLM-L6-v2 has no layer 9
    """
    from .provenance import array_digest

    if isinstance(ref, dict):
        return _from_reference(ref, key)
    if isinstance(ref, (str, Path)):
        text = str(ref)
        if text.startswith(MINILM):
            return _minilm_weight(*_minilm_parts(key, text, True)), text
        if not text.endswith(".npy"):
            raise ParameterError(key, text, "an array, a .npy file or minilm:LAYER[:HEAD]")
        W = _checked_weights(key, _read_npy(key, text, "a p×p array"))
        return W, {"path": text, "sha256": _file_sha256(Path(text), key)}
    W = _checked_weights(key, ref)
    return W, {"array": array_digest(W)}


def _checked_weights(key, W) -> np.ndarray:
    try:
        W = check_weights(W)
    except ParameterError as err:
        raise ParameterError(key, err.value, err.allowed) from None
    W.setflags(write=False)
    return W


def tiled(W, T: int) -> np.ndarray:
    r"""W ⊗ I_T: the same spectrum and normalised traces at T times the dimension (read-only).

    The n-law of a real W: at fixed c the theory is unchanged and the sizes grow, p → pT, n → nT.

    Examples
    --------
    >>> tiled(np.diag([1.0, 2.0]), 2).diagonal().tolist()
    [1.0, 1.0, 2.0, 2.0]
    """
    out = np.kron(np.asarray(W, dtype=float), np.eye(int(T)))
    out.setflags(write=False)
    return out


def _from_reference(ref: dict, key: str):
    """W (or a list of heads) from a stored reference: ``{"path", "sha256"}`` of a file, or ``{"tile": T,
    "of": reference}`` (each matrix tiled, :func:`tiled`); an in-memory array cannot be rebuilt."""
    if "tile" in ref:
        from .validation import check_int

        T = check_int("tile", ref["tile"], 1, 64)
        if key == "heads":
            hs, inner = resolve_heads(ref.get("of"))
            return tuple(tiled(W, T) for W in hs), {"tile": T, "of": inner}
        W, inner = resolve_weights(ref.get("of"), key)
        return tiled(W, T), {"tile": T, "of": inner}
    if "path" not in ref:
        raise ParameterError(key, ref, "a minilm: reference or {path, sha256} of a .npy file",
                             hint="an array given in memory is recorded by its digest only and cannot be rebuilt")
    path = Path(str(ref["path"]))
    if path.suffix != ".npy":
        raise ParameterError(key, str(path), "a .npy file")
    if "sha256" in ref and _file_sha256(path, key) != ref["sha256"]:
        raise ParameterError(key, str(path), f"the file of sha256 {ref['sha256'][:16]}…",
                             hint="the file has changed since the layer was recorded")
    if key == "heads":
        return resolve_heads(str(path))
    return resolve_weights(str(path), key)


def resolve_heads(ref) -> tuple:
    r"""The heads W_1..W_H a reference names, and the JSON-ready reference.

    Parameters
    ----------
    ref : str, array_like or sequence
        ``minilm:LAYER`` (the layer's 12 heads W_K^{hᵀ}W_Q^h, each unit-scaled; ``minilm:LAYER:HEAD``
        is that one head alone); a ``.npy`` file of an
        H×p×p array; an H×p×p array; or a sequence whose entries are anything :func:`resolve_weights`
        takes (for example ``["minilm:2:0", "minilm:2:5"]``).

    Returns
    -------
    (tuple of numpy.ndarray, str or list)

    Examples
    --------
    >>> hs, ref = resolve_heads([np.eye(3), 2 * np.eye(3)])
    >>> len(hs), len(ref)
    (2, 2)
    """
    if isinstance(ref, dict):
        return _from_reference(ref, "heads")
    if isinstance(ref, (str, Path)):
        text = str(ref)
        if text.startswith(MINILM):   # all heads of a layer, or one head (H = 1)
            layer, head = _minilm_parts("heads", text, True)
            return (_minilm_heads(layer) if head is None else (_minilm_weight(layer, head),)), text
        if not text.endswith(".npy"):
            raise ParameterError("heads", text, "minilm:LAYER, a .npy file holding an H x p x p array, or a list")
        A = _read_npy("heads", text, "an H x p x p array")
        if A.ndim != 3 or A.shape[0] < 1:
            raise ParameterError("heads", text, f"an H x p x p array (this file holds shape {A.shape})")
        hs = check_heads(list(A))
        return hs, {"path": text, "sha256": _file_sha256(Path(text), "heads")}
    if isinstance(ref, np.ndarray) and ref.ndim == 3:
        ref = list(ref)
    if isinstance(ref, np.ndarray) and ref.ndim == 2:
        raise ParameterError("heads", f"array of shape {ref.shape}", "a list of p×p matrices (or an H×p×p array)")
    try:
        entries = list(ref)
    except TypeError:
        raise ParameterError("heads", ref, "a list of p×p matrices or references") from None
    if not entries:
        raise ParameterError("heads", "[]", "a non-empty list of p×p matrices")
    mats, refs = [], []
    for entry in entries:
        if isinstance(entry, (str, Path, dict)):
            W, r = resolve_weights(entry, "heads")
        else:
            W, r = np.asarray(entry), None
        mats.append(W)
        refs.append(r)
    hs = check_heads(mats)
    from .provenance import array_digest

    return hs, [r if r is not None else {"array": array_digest(W)} for r, W in zip(refs, hs)]


# ----------------------------------------------------------------------------- the layer
#: the combinations a layer cannot have, checked at construction: (the keys in conflict, the first named as
#: the one to change; the test; what is allowed)
RULES = (
    (("heads", "weights"), lambda L: L.weights is not None and L.heads is not None,
     "either weights= (one head W) or heads= (several), not both"),
    (("readout", "heads"), lambda L: L.readout != "concat" and L.heads is None,
     "'concat' (the default) unless heads= is given"),
    (("readout", "residual", "heads"), lambda L: L.residual and L.readout == "concat" and L.heads is not None
     and len(L.heads) > 1,
     "'sum' with residual=True and more than one head (the residual X is p×n; the concatenation is Hp×n)"),
    (("activation", "kernel"), lambda L: L.activation is None and L.kernel != "softmax",
     "an activation (only the softmax kernel does without one)"),
)


class Layer:
    r"""An immutable description of the attention layer: activation, weights or heads, readout, residual, kernel.

    Φ = X K with K = f(XᵀWX/√p)/√p (``weights`` W, or W = I + w_K w_Qᵀ from the geometry given to
    :meth:`theory` / :meth:`simulate`); ``residual``: Φ = X(I + K); ``heads`` W_1..W_H with
    ``readout='concat'`` (Φ = [XK_1; …; XK_H]) or ``'sum'`` (Φ = X Σ_h K_h); ``kernel='softmax'``:
    the row softmax at ``temperature`` τ (docs/theory.md §13.3); ``diagonal``: K_ii from f, or 0.

    Parameters
    ----------
    activation : str, sympy expression, callable, Activation or None
        As :func:`symattn.activation` (None, or 'none', only with the softmax kernel). A plain callable is
        applied as given by the Monte Carlo (centred by the theory); wrap it in ``sa.activation``.
    weights : array_like, str or None
        One p×p W: an array, a ``.npy`` path, ``minilm:LAYER`` or ``minilm:LAYER:HEAD``
        (:func:`resolve_weights`).
    heads : sequence, str or None
        Several heads (:func:`resolve_heads`): ``minilm:LAYER`` (its 12 heads), a ``.npy`` H×p×p file,
        or a list of arrays / references.
    readout : {'concat', 'sum'}
    residual : bool
    kernel : {'entrywise', 'softmax'}
    temperature : float or None
        τ > 0 of the softmax (default 1 there).
    diagonal : {'f', 'zero'}

    Raises
    ------
    ParameterError
        A bad value, or a combination of :data:`RULES`: it names the key to change, and the hint all the
        keys in conflict.

    Examples
    --------
    >>> L = Layer("tanh", residual=True)
    >>> L.engine(), float(L.theory(0.5, 1.0).E) == float(memorization_error("tanh", 0.5, 1.0, residual=True))
    ('residual', True)
    >>> Layer.from_dict(json.loads(json.dumps(L.to_dict()))) == L
    True
    >>> Layer("tanh", temperature=2.0)
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid temperature=2.0: allowed None unless kernel='softmax'. the keys in conflict: temperature=2.0, kernel='entrywise'
    """

    __slots__ = ("activation", "weights", "heads", "readout", "residual", "kernel", "temperature", "diagonal",
                 "_refs", "_digest", "_derived")

    @known_keywords
    def __init__(self, activation="tanh", weights=None, heads=None, readout: str = "concat", residual: bool = False,
                 kernel: str = "entrywise", temperature=None, diagonal: str = "f"):
        set_ = object.__setattr__
        set_(self, "activation", _layer_activation(activation))
        refs = {}
        W = None
        if weights is not None:
            W, refs["weights"] = resolve_weights(weights)
        hs = None
        if heads is not None:
            hs, refs["heads"] = resolve_heads(heads)
        residual, readout, kernel, temperature = check_variant_flags(residual, readout, kernel, temperature)
        for name, value in (("weights", W), ("heads", hs), ("readout", readout), ("residual", residual),
                            ("kernel", kernel), ("temperature", temperature), ("diagonal", check_diagonal(diagonal)),
                            ("_refs", refs)):
            set_(self, name, value)
        for keys, bad, allowed in RULES:
            if bad(self):
                raise ParameterError(keys[0], self._shown(keys[0]), allowed, hint="the keys in conflict: " + ", ".join(
                    f"{k}={self._shown(k)!r}" for k in keys))
        set_(self, "_digest", None)
        set_(self, "_derived", {})   # quantities derived from the weights, computed once (_derive)

    def _derive(self, key: str, compute):
        """``compute()`` once per layer (the layer is immutable, so what it derives from its weights is too)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    @property
    def _logit_weights(self):
        """W of the logit form xᵀWx whose top direction μ = 'top' follows: the weights, or the first head."""
        return self.weights if self.weights is not None else self.heads[0]

    @property
    def _summed_weights(self):
        """W, or Σ_h W_h: the matrix whose effective rank and top direction place the layer in the atlas."""
        return self._derive("summed", lambda: self.weights if self.weights is not None else sum(self.heads))

    def _shown(self, key):
        """The value of ``key`` as an error message shows it (arrays by their shape)."""
        value = getattr(self, key)
        if key == "weights" and value is not None:
            return f"a {self.p}x{self.p} matrix"
        if key == "heads" and value is not None:
            return f"{len(value)} heads"
        return value

    def __setattr__(self, name, value):
        raise AttributeError(f"Layer is immutable: build a new one instead of setting {name!r}")

    # -- identity
    @property
    def p(self):
        """The dimension fixed by the weights or heads (None for the paper's model)."""
        mats = (self.weights,) if self.weights is not None else self.heads
        return None if mats is None else int(mats[0].shape[0])

    @property
    def activation_name(self) -> str | None:
        """The activation as text: its catalog name, or its expression in x (None for the softmax alone)."""
        return _activation_text(self.activation)

    def to_dict(self) -> dict:
        """The layer as JSON/TOML-ready data: every key of the constructor, None values left out.

        Weights and heads are stored by reference (``minilm:…``), as ``{"path", "sha256"}`` of their
        ``.npy`` file, or, for an array given in memory, as ``{"array": {"shape", "sha256"}}`` (which
        :meth:`from_dict` refuses: it records, it cannot rebuild).

        Examples
        --------
        >>> Layer("relu", heads=[np.eye(2), np.eye(2)], readout="sum").to_dict()["heads"][0]["array"]["shape"]
        [2, 2]
        """
        out = {"activation": self.activation_name or "none"}
        if self.weights is not None:
            out["weights"] = self._refs["weights"]
        if self.heads is not None:
            out["heads"] = self._refs["heads"]
        out.update(readout=self.readout, residual=self.residual, kernel=self.kernel, diagonal=self.diagonal)
        if self.temperature is not None:
            out["temperature"] = self.temperature
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict, *, outside_paths: bool = False) -> "Layer":
        """The layer of :meth:`to_dict` (or of a sweep spec's layer keys); unknown keys are refused.

        A file reference ``{"path", "sha256"}`` of a record must lie inside the working folder
        (:func:`symattn.files.check_inside`) unless ``outside_paths=True``: a record from elsewhere
        cannot make symattn read, or learn whether there is, a file outside it.

        Examples
        --------
        >>> Layer.from_dict({"activation": "erf", "residual": True}).to_dict()["residual"]
        True
        >>> Layer.from_dict({"weights": {"path": "/etc/passwd", "sha256": "0"}})
        Traceback (most recent call last):
        ...
        symattn.errors.ParameterError: invalid weights='/etc/passwd': allowed a path inside ...
        """
        if not isinstance(data, dict):
            raise ParameterError("layer", type(data).__name__, "a table of the keys " + ", ".join(LAYER_KEYS))
        bad = sorted(set(data) - set(LAYER_KEYS))
        if bad:
            raise ParameterError(bad[0], data[bad[0]], "a layer key: one of " + ", ".join(LAYER_KEYS))
        if not outside_paths:
            for key in ("weights", "heads", "mu"):
                ref = data.get(key)
                while isinstance(ref, dict):   # {"tile": T, "of": reference} nests the file reference
                    if "path" in ref:
                        check_inside(str(ref["path"]), key)
                    ref = ref.get("of")
        return cls(**{k: data[k] for k in LAYER_KEYS if k in data})

    @property
    def digest(self) -> str:
        """:func:`symattn.caching.digest` (sha256, hex) of the JSON of the activation's expression, the weights'
        :func:`~symattn.provenance.array_digest` and the flags.

        Two layers with the same digest compute the same numbers; a plain callable activation is
        identified by the function object (its name and id), so that digest holds within one process only."""
        if self._digest is None:
            from .caching import digest
            from .provenance import array_digest

            blob = {"activation": self.activation_name, "readout": self.readout, "residual": self.residual,
                    "kernel": self.kernel, "temperature": self.temperature, "diagonal": self.diagonal,
                    "weights": array_digest(self.weights),
                    "heads": None if self.heads is None else [array_digest(W) for W in self.heads]}
            text = json.dumps(blob, sort_keys=True, separators=(",", ":"))
            object.__setattr__(self, "_digest", digest(text))
        return self._digest

    def __eq__(self, other):
        return isinstance(other, Layer) and other.digest == self.digest

    def __hash__(self):
        return hash(self.digest)

    def __repr__(self):
        shown = {k: v for k, v in self.to_dict().items() if LAYER_DEFAULTS.get(k, object()) != v
                 or k == "activation"}
        for k in ("weights", "heads"):
            if k in shown:
                shown[k] = _reference_text(shown[k])
        return "Layer(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"

    @property
    def label(self) -> str:
        """A short name for tables and figures: the weights or heads by reference (W = I for the paper's model),
        with the residual and the softmax.

        Examples
        --------
        >>> Layer("tanh", weights={"tile": 2, "of": np.eye(3)}).label
        '<3x3 array>⊗I2'
        >>> Layer("tanh", residual=True).label
        'W = I (residual)'
        """
        if self.weights is not None:
            base = _reference_text(self._refs["weights"])
        elif self.heads is not None:
            base = f"heads[{_reference_text(self._refs['heads'])}]/{self.readout}"
        else:
            base = "W = I"
        extra = (["residual"] if self.residual else []) + (
            [f"softmax τ={1.0 if self.temperature is None else self.temperature:g}"] if self.kernel == "softmax" else [])
        return base + ("" if not extra else " (" + ", ".join(extra) + ")")

    # -- the signal
    def signal(self, spec="zero", snr=None):
        r"""μ of a named signal, for a layer with weights or heads (p fixed by them).

        - ``'zero'``: μ = 0 (returned as None);
        - ``'top'``: √snr·e, e the top eigenvector of (W + Wᵀ)/2, W the weights or the first head
          (:func:`symattn.realweights.signal_direction`; snr default 1);
        - ``'random:SEED'``: √snr·v/‖v‖, v ~ N(0, I_p) from ``numpy.random.default_rng(SEED)``;
        - ``FILE.npy`` or an array: that μ exactly (``snr`` must be unset).

        Parameters
        ----------
        spec : str or array_like
        snr : float or None
            ‖μ‖² for 'top' and 'random:SEED' (default 1).

        Returns
        -------
        numpy.ndarray or None

        Examples
        --------
        >>> L = Layer("tanh", weights=np.diag([3.0, 1.0, 2.0]))
        >>> L.signal("top", snr=4.0).tolist(), L.signal("zero")
        ([2.0, 0.0, 0.0], None)
        >>> round(float(np.sum(L.signal("random:7", snr=2.0) ** 2)), 12)
        2.0
        """
        from .model import check_nonnegative
        from .realweights import signal_direction

        p = self.p
        if isinstance(spec, str) and spec in ("zero", "none"):
            if snr not in (None, 0, 0.0):
                raise ParameterError("snr", snr, "0 or unset with mu = 'zero' (snr scales mu = 'top' or 'random:SEED')")
            return None
        if p is None:
            raise ParameterError("mu", spec, "'zero' for a layer without weights or heads",
                                 hint="the paper's model takes its signal as a geometry (snr, aligned, the Gram keys)")
        if isinstance(spec, str) and (spec == "top" or spec.startswith("random:")):
            s = 1.0 if snr is None else check_nonnegative("snr", snr)
            if spec == "top":   # √snr times the unit direction, which is computed once
                return math.sqrt(s) * self._derive("top", lambda: signal_direction(self._logit_weights, 1.0))
            seed = spec.split(":", 1)[1]
            if not seed.strip().isdigit():
                raise ParameterError("mu", spec, "random:SEED with an integer SEED >= 0")
            v = np.random.default_rng(int(seed)).standard_normal(p)
            return np.sqrt(s) * v / np.linalg.norm(v)
        if snr is not None:
            raise ParameterError("snr", snr, "unset when mu is given exactly (a file or an array)")
        if isinstance(spec, (str, Path)):
            if not str(spec).endswith(".npy"):
                raise ParameterError("mu", spec, "one of zero, top, random:SEED or FILE.npy")
            spec = _read_npy("mu", str(spec), "a vector")
        return check_mu(spec, p)

    # -- theory and simulation
    @property
    def form(self) -> str:
        r"""The layer's form, which with its kernel selects the engine (:meth:`engine`): 'plain', 'residual',
        'weights', 'weights+residual', 'heads:sum' (heads summed, identical heads concatenated) or 'heads:concat'
        (distinct heads concatenated).

        Examples
        --------
        >>> Layer("tanh").form, Layer("tanh", heads=[np.eye(4), 2 * np.eye(4)]).form
        ('plain', 'heads:concat')
        """
        if self.weights is not None:
            return "weights+residual" if self.residual else "weights"
        if self.heads is not None:
            H = len(self.heads)
            distinct = not all(np.array_equal(W, self.heads[0]) for W in self.heads[1:])
            return "heads:concat" if self.readout == "concat" and H > 1 and distinct else "heads:sum"
        return "residual" if self.residual else "plain"

    def engine(self, structure: str = "auto", backend: str = "numpy") -> str:
        r"""The name of the theory engine of :data:`THEORY_ENGINES` that :meth:`theory` uses for this layer:
        the one engine whose declared ``covers`` hold the layer's :attr:`form`, its kernel and, with weights,
        the kernel's structure (:func:`symattn.backends.general_w_entry.kernel_structure`).

        - ``'paper'``: no weights, heads, residual or softmax (Theorem 1, docs/theory.md §5–6);
        - ``'general-w'`` / ``'hermite-blocks'``: ``weights`` (§12.1 free noise; §12.8 blocks for a
          low-rank W);
        - ``'residual'``: the paper's layer with the residual (§13.1);
        - ``'sum'``: heads summed, identical heads concatenated, or the residual of one W (§13.2);
        - ``'concat'``: distinct heads concatenated (the block pencil, §13.2);
        - ``'softmax'``: the row softmax (§13.3).

        A layer that no engine covers (the softmax kernel with weights or heads) raises ParameterError naming
        the feature and the engines that come closest.

        Examples
        --------
        >>> Layer("tanh").engine(), Layer(None, kernel="softmax").engine(), Layer("tanh", weights=np.eye(8)).engine()
        ('paper', 'softmax', 'general-w')
        """
        def kind():
            from .backends.general_w_entry import kernel_structure

            return kernel_structure(self.weights, structure, backend=backend, diagonal=self.diagonal)

        return THEORY_ENGINES.first(hints=_COVER_HINTS, form=self.form, kernel=self.kernel, structure=kind).name

    @known_keywords
    def theory(self, c, gamma, mu=None, geometry=None, n=None, correction=None, backend: str = "numpy", dps=None,
               *, model: str = "attention", errors: str = "raise", structure: str = "auto", method=None,
               error: str = "train", tokens=None):
        r"""The deterministic equivalent of this layer's training error E(γ) = −γ² F'(γ) (or its test error),
        by the engine of :meth:`engine`.

        Parameters
        ----------
        c : float or array_like
            p/n, broadcast against ``gamma`` (a layer with weights fixes p, so n = round(p/c)).
        gamma : float or array_like
            The ridge γ > 0 (γ = 0: the ridgeless value of the paper's model, c < 1).
        mu : array_like, optional
            The signal μ (length p) of a layer with weights or heads (:meth:`signal` names some).
        geometry : Geometry, dict or None
            The Gram matrix of (μ, w_K, w_Q) of a layer without weights (paper, residual, softmax).
        n : int, optional
            Tokens: the finite-p diagonal d_n (paper), the softmax scale, or a check of round(p/c).
        correction : {None, 'finite-p'}
            The finite-p corrected theory (paper engine only, needs ``n``; docs/theory.md §10).
        backend, dps : 'numpy' (float64) or 'mpmath' at ``dps`` digits.
        model : {'attention', 'linear', 'both'}
        errors : {'raise', 'nan'}
            A point that cannot be solved raises ConvergenceError, or becomes NaN with a warning.
        structure : {'auto', 'blocks', 'free'}
            With weights: the kernel model (:func:`symattn.backends.general_w_entry.kernel_structure`).
        method : None, 'closed' or 'quadrature'
            Paper engine: how the bulk system is solved (:func:`symattn.theory.solve`).
        error : {'train', 'test'}
            The training (memorisation) error, or the test (generalisation) error
            E_test = E(1/n)‖y′ − Φ′ᵀβ‖² of the readout on a fresh sequence, γ > 0, no correction
            (docs/theory.md §14: :func:`symattn.generalization.solve_test` for the paper engine;
            :func:`symattn.generalization.general_test_error` for weights and summed heads, §14.9).
        tokens : TokenLaw, dict or None
            The law of the sequence (:class:`symattn.tokens.TokenLaw`, docs/theory.md §15). Tokens
            correlated in time or Markov labels: ridge regression on X (:func:`symattn.temporal.linear_errors`)
            and, for the paper's layer only and with ``n``, attention's training error
            (:func:`symattn.temporal.attention_errors`, §15.5) and test error
            (:func:`symattn.temporal.attention_test_errors`, §15.6), with an AccuracyWarning outside the
            measured region. Other layers raise ParameterError (simulate them).

        Returns
        -------
        TheoryResult
            E (``.E``), per model, shaped broadcast(c, gamma); ``parameters`` holds the layer's
            :meth:`to_dict`, its digest and the engine's name; ``error`` says which error E is.

        Examples
        --------
        >>> r = Layer("tanh", heads=[np.eye(30)] * 2, readout="sum").theory(0.5, [0.1, 1.0], model="both")
        >>> r.parameters["engine"], r.E["attention"].shape
        ('sum', (2,))
        """
        from .theory import ERRORS_CHOICES, MODEL_CHOICES

        error = check_error(error)
        if model not in MODEL_CHOICES:
            raise ParameterError("model", model, "one of 'attention', 'linear', 'both'")
        if errors not in ERRORS_CHOICES:
            raise ParameterError("errors", errors, "'raise' or 'nan'")
        from .tokens import as_token_law

        law = as_token_law(tokens)
        if not law.is_iid:
            return _correlated(self, c, gamma, law, mu, geometry, n, model, backend, correction, error)
        name = self.engine("auto" if self.weights is None else structure, backend)
        eng = THEORY_ENGINES[name]
        given = {"mu": mu, "geometry": geometry, "correction": correction, "method": method,
                 "structure": None if structure == "auto" else structure}
        if mu is not None and self.p is None:
            raise ParameterError("weights", None, "a p×p matrix W (or heads=) when mu= is given",
                                 hint=_OPTION_HINTS["mu"])
        for key, value in given.items():
            if value is not None and key not in eng.options:
                raise ParameterError(key, value if key != "mu" else "a vector",
                                     f"None (the default) with the {name!r} engine ({eng.theory})",
                                     hint=_OPTION_HINTS.get(key, ""))
        if _zero_ridge(gamma) and not eng.zero_ridge:   # the paper's test error: solve_test says why
            raise ParameterError("gamma", 0.0, "gamma > 0 with weights=, mu=, residual=, heads= or kernel='softmax' "
                                 "(the ridgeless value gamma = 0 is of the paper's model only)")
        THEORY_ENGINES.require(name, hints=_COVER_HINTS, error=error)
        if error == "test" and backend != "numpy" and name != "paper":   # the general-W test theory is float64
            raise ParameterError("error", "test", f"'train' with the {name!r} engine and backend={backend!r}",
                                 hint="the test error of a layer with weights or heads (docs/theory.md §14.9) is "
                                      "float64: backend='numpy'")
        if correction is not None:   # the correction's own method of the backends (docs/theory.md §10)
            from .theory import attention_method

            METHODS.require(attention_method(method, correction), hints=_COVER_HINTS, error=error)
        kw = {k: v for k, v in given.items() if k in eng.options}
        if error == "test":
            kw["error"] = "test"
        from .errors import ConvergenceError

        failed = []
        try:
            out = eng.run(self, c, gamma, model=model, backend=backend, dps=dps, n=n, errors=errors, **kw)
        except ConvergenceError:
            if errors != "nan" or eng.isolates:   # an engine that isolates its own failures failed as a whole
                raise
            # an engine that fails its points together: solved point by point, the failed ones NaN
            out, failed = _pointwise(eng, self, c, gamma, model=model, backend=backend, dps=dps, n=n, **kw)
        from .theory import TheoryResult

        if not isinstance(out, TheoryResult):
            out = _as_result(out, c, gamma, model, backend, dps, n)
            out.error = error
        if failed:
            out.failures = failed
        if error == "train":   # every engine's values pass the same physical checks
            _physical_front(out, model, errors, name)
        if self.p is None and n is not None and geometry is not None:
            from .backends.finite_p import warn_if_strong

            if not eng.warns_finite_size:   # the paper's engine (symattn.solve) warns itself
                warn_if_strong(geometry, n, np.unique(np.asarray(out.c, dtype=float)), stacklevel=_caller_level(),
                               correction=correction)
        out.parameters.update(layer=self.to_dict(), layer_digest=self.digest, engine=name)
        from .accuracy import assess, is_internal

        # the atlas measures the attention theory's training and test errors, at the user's points (not a function's own)
        if model != "linear" and not is_internal():
            tokens = n if n is not None or self.p is None else np.rint(self.p / np.asarray(out.c, dtype=float))
            measured = name if correction is None else f"{name}/{correction}"   # the corrected theory is another
            out.accuracy = assess(measured, self.activation_name, out.c, np.asarray(out.gamma, dtype=float),
                                  n=tokens, error=error, **self.features(mu, geometry))
            text = out.accuracy.message()
            if text is not None:
                from .errors import AccuracyWarning

                warnings.warn(AccuracyWarning(text), stacklevel=_caller_level())
        return out

    def features(self, mu=None, geometry=None) -> dict:
        r"""Where this layer and signal sit in the accuracy atlas' parameter space (:mod:`symattn.accuracy`).

        ``snr`` = ‖μ‖²; ``align`` = the alignment of μ with the top direction e of (W + Wᵀ)/2, (μᵀe)²/‖μ‖²
        (W the weights, Σ_h W_h for heads), or for the paper's geometry μᵀw_K μᵀw_Q/(‖μ‖² ‖w_K‖ ‖w_Q‖);
        ``log_reff`` = log10(r_eff/p) with the effective rank r_eff = ‖W‖_F⁴/‖WᵀW‖_F² (0 for the paper's W = I);
        ``wk2``, ``wq2`` = ‖w_K‖², ‖w_Q‖² of the paper's low-rank weights, summed over their rank (0 with W).

        Examples
        --------
        >>> from symattn import Geometry
        >>> Layer("tanh").features(geometry=Geometry.aligned(2.0))
        {'snr': 2.0, 'align': 1.0, 'log_reff': 0.0, 'wk2': 2.0, 'wq2': 2.0}
        """
        from .model import as_geometry

        if self.p is None:   # the Gram matrix of (μ, w_K^(1..r), w_Q^(1..r))
            geo = as_geometry(geometry)
            G, r = np.asarray(geo.gram, dtype=float), geo.rank
            snr = float(G[0, 0])
            num = sum(G[0, 1 + k] * G[0, 1 + r + k] for k in range(r))
            norm = math.sqrt(max(sum(G[1 + k, 1 + k] for k in range(r)) * sum(G[1 + r + k, 1 + r + k]
                                                                              for k in range(r)), 0.0))
            align = float(num / (snr * norm)) if snr > 0 and norm > 0 else 0.0
            return {"snr": snr, "align": align, "log_reff": 0.0, "wk2": float(sum(G[1 + k, 1 + k] for k in range(r))),
                    "wq2": float(sum(G[1 + r + k, 1 + r + k] for k in range(r)))}
        from .realweights import signal_direction

        W = self._summed_weights
        log_reff = self._derive("log_reff", lambda: math.log10(
            float(np.sum(W * W)) ** 2 / float(np.sum((W.T @ W) ** 2)) / self.p))
        mu = None if mu is None else np.asarray(mu, dtype=float)
        snr = 0.0 if mu is None else float(mu @ mu)
        align = 0.0
        if snr > 0:
            e = self._derive("summed_top", lambda: signal_direction(W, 1.0))
            align = float(mu @ e) ** 2 / snr
        return {"snr": snr, "align": align, "log_reff": log_reff, "wk2": 0.0, "wq2": 0.0}

    @known_keywords
    def simulate(self, n: int = 1024, c: float = 0.5, gamma=(1e-2, 1e-1), mu=None, geometry=None, draws: int = 8,
                 seed=0, *, backend: str = "numpy", device=None, progress=None, models=MODELS,
                 trace_estimator: bool = False, dtype: str = "float64", method: str = "auto", batch=None,
                 error="train", tokens=None):
        r"""Exact Monte Carlo of E_A and E_LR for this layer at n tokens (docs/theory.md §2), train and/or test.

        Per draw X = μyᵀ + Z (p×n, p = round(c·n)), Φ as the layer says, M = ΦᵀΦ/n, and
        E(γ) = (γ²/n) Σ_k (v_kᵀy)²/(λ_k + γ)² for every γ from one decomposition of M
        (:func:`symattn.montecarlo.exact_monte_carlo`, which documents every option).

        Parameters
        ----------
        n, c, gamma : tokens, p/n and the ridges.
        mu, geometry : the signal: a vector μ (with weights or heads), or the Gram geometry.
        draws, seed : independent draws and the root seed.
        backend, device, progress, models, trace_estimator, dtype, method, batch
            As :func:`symattn.montecarlo.exact_monte_carlo`.
        error : 'train', 'test', 'both' or a tuple of them
            The training errors (``attention``, ``linear``) and/or the test errors on a fresh
            sequence per draw (``attention_test``, ``linear_test``; docs/theory.md §14).
        tokens : TokenLaw, dict or None
            The law of the sequence: time-correlated tokens and/or Markov labels (docs/theory.md §15).

        Returns
        -------
        SimulationResult

        Examples
        --------
        >>> r = Layer("tanh").simulate(n=60, c=0.5, gamma=[1.0], draws=2, error=("train", "test"))
        >>> r.attention.shape, r.attention_test.shape
        ((2, 1), (2, 1))
        """
        from .montecarlo import exact_monte_carlo

        res = exact_monte_carlo(
            self.activation, n=n, c=c, gamma=gamma, geometry=geometry, draws=draws, seed=seed, backend=backend,
            device=device, diagonal=self.diagonal, weights=self.weights, mu=mu, progress=progress, models=models,
            trace_estimator=trace_estimator, dtype=dtype, method=method, residual=self.residual,
            heads=None if self.heads is None else list(self.heads), readout=self.readout, kernel=self.kernel,
            temperature=self.temperature, batch=batch, error=error, tokens=tokens)
        res.provenance["parameters"]["layer"] = self.to_dict()
        res.provenance["parameters"]["layer_digest"] = self.digest
        return res


def _reference_text(ref) -> str:
    """A weights reference as text: ``minilm:…``, a file's name, ``ref⊗IT`` for a tiling, ``a+b`` for heads."""
    if isinstance(ref, str):
        return ref
    if isinstance(ref, list):
        return "+".join(_reference_text(r) for r in ref)
    if isinstance(ref, dict) and "tile" in ref:
        return f"{_reference_text(ref['of'])}⊗I{ref['tile']}"
    if isinstance(ref, dict) and "path" in ref:
        return Path(str(ref["path"])).name
    shape = ref.get("array", {}).get("shape") if isinstance(ref, dict) else None
    return "array" if not shape else f"<{'x'.join(map(str, shape))} array>"


def _caller_level() -> int:
    """The stack level of the first frame outside symattn (a warning points at the user's line)."""
    import sys

    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("symattn"):
        frame, level = frame.f_back, level + 1
    return level


def _layer_activation(spec):
    """The activation of a layer: an Activation for names and expressions (resolved once), a plain
    callable as given, None for the softmax alone."""
    if spec is None or isinstance(spec, str) and spec == "none":
        return None
    if isinstance(spec, str) and spec.startswith("callable:"):
        raise ParameterError("activation", spec, "a catalog name or an expression in x",
                             hint="a layer with a plain Python callable is recorded by name only and cannot be rebuilt")
    if hasattr(spec, "numpy") and callable(getattr(spec, "numpy")):
        return spec
    import sympy

    if isinstance(spec, (str, sympy.Basic)):
        from .activations.activation import activation

        return activation(spec)   # an ActivationError names a bad one
    if callable(spec):
        return spec
    raise ParameterError("activation", spec, "an Activation, a catalog name or SymPy string in x, or a callable")


def _activation_text(act) -> str | None:
    if act is None:
        return None
    from .activations.activation import Activation, activation

    if isinstance(act, Activation):
        try:
            if activation(act.name) is act:
                return act.name
        except Exception:  # noqa: BLE001 - a name that is not a spec: fall back to the expression
            pass
        expr = getattr(act, "expr", None)
        return str(expr) if expr is not None else f"callable:{act.name}"
    # a plain callable is identified by the object itself: equal digests mean the same function object
    return f"callable:{getattr(act, '__qualname__', type(act).__name__)}@{id(act):x}"


def _correlated(layer, c, gamma, law, mu, geometry, n, model, backend, correction, error):
    """Layer.theory under a token law other than the paper's (docs/theory.md §15): ridge regression on X
    (§15.2) and, for the paper's layer (W = I + low rank), attention's training (§15.5) and test (§15.6) errors at
    finite p."""
    from .model import as_geometry
    from .temporal import attention_errors, attention_test_errors, linear_errors
    from .theory import TheoryResult

    if model != "linear":
        eng = THEORY_ENGINES[layer.engine("auto", backend)]
        if "correlated" not in eng.covers["tokens"]:
            raise ParameterError("tokens", law, f"None (iid tokens and labels) with the {eng.name!r} engine (weights=, "
                                                "heads=, residual= or kernel='softmax') and model='attention' or 'both'",
                                 hint="the attention theory under time-correlated tokens is derived for the paper's "
                                      "model W = I + low rank only (docs/theory.md §15.5): take model='linear', or "
                                      "simulate this layer")
        if n is None:
            raise ParameterError("n", None, "the number of tokens (an integer >= 2) with tokens= and "
                                            "model='attention' or 'both'",
                                 hint="the kernel's band under correlated tokens depends on p = round(c·n) "
                                      "(docs/theory.md §15.5)")
        from .model import check_n

        n = check_n(n)
    if backend != "numpy":
        raise ParameterError("backend", backend, "'numpy' with tokens= (docs/theory.md §15)")
    if correction is not None:
        raise ParameterError("correction", correction, "None with tokens= (docs/theory.md §15)")
    geo = as_geometry(geometry)
    snr = float(np.dot(np.ravel(mu), np.ravel(mu))) if mu is not None else geo.snr
    cb, gb = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
    out = {"model": model, "error": error}
    if model != "attention":
        r = linear_errors(c, gamma, snr=snr, tokens=law)
        out.update(linear=r[error], F_linear=r["F"])
    if model != "linear":
        E, F = np.empty(cb.shape), np.empty(cb.shape)
        solver = attention_test_errors if error == "test" else attention_errors   # §15.6 or §15.5
        for idx in np.ndindex(cb.shape):
            r = solver(layer.activation, cb[idx], gb[idx], n=n, geometry=geo, tokens=law, diagonal=layer.diagonal)
            E[idx], F[idx] = r[error], r["F"]
        out.update(attention=E, F_attention=F)
    res = TheoryResult(c=cb.copy(), gamma=gb.copy(), **out,
                       parameters={"backend": "numpy", "dps": None, "tokens": law.as_dict(), "snr": snr, "n": n,
                                   "engine": "temporal", "error": error, "layer": layer.to_dict(),
                                   "layer_digest": layer.digest})
    from .accuracy import assess, is_internal

    # the atlas' token block (symattn/data/atlas_tokens.csv, docs/theory.md §15.5–15.6): measured cells, not a rule
    if model != "linear" and not is_internal():
        res.accuracy = assess("temporal", layer.activation_name, cb, gb, n=n, tokens=law.as_dict(), error=error,
                              **layer.features(geometry=geo))
        text = res.accuracy.message()
        if text is not None:
            from .errors import AccuracyWarning

            warnings.warn(AccuracyWarning(text), stacklevel=_caller_level())
    return res


def _zero_ridge(gamma) -> bool:
    try:
        return bool(np.any(np.asarray(gamma, dtype=float) == 0))
    except (TypeError, ValueError):
        return False


#: the slack of the physical checks (:func:`unphysical_points`) on E, which the solvers give to ~1e-12
PHYSICAL_SLACK = 1e-9


def unphysical_points(gamma, E) -> dict:
    r"""The points of one curve E(γ) (a training error, at one c) that no deterministic equivalent can give.

    E(γ) = γ² ∫ dν(λ)/(λ + γ)² with ν a probability measure on [0, ∞) (docs/theory.md §12.9), so at every
    point 0 <= E <= 1 and, for γ < γ': E(γ) <= E(γ') (monotone), E(γ) >= (γ/γ')² E(γ') (E/γ² decreasing) and
    γ(1 − E(γ)) <= γ'(1 − E(γ')) (the γ → ∞ asymptote: γ(1 − E) increases to 2∫λ dν). Each inequality is
    checked with :data:`PHYSICAL_SLACK`; of a pair that violates one, the point in most violations is
    dropped first (both, between two points that only contradict each other).

    Parameters
    ----------
    gamma, E : array_like
        The ridges and the values (NaN: not checked).

    Returns
    -------
    dict
        index -> reason, for the points to be reported as failed.

    Examples
    --------
    >>> unphysical_points([1e6, 1e8], [0.98938, 0.97823])     # issue 38: E decreasing in gamma
    {0: 'E decreases in gamma: E=0.98938 at gamma=1e+06 > E=0.97823 at gamma=1e+08', 1: 'E decreases in gamma: E=0.98938 at gamma=1e+06 > E=0.97823 at gamma=1e+08'}
    >>> unphysical_points([0.1, 1.0, 10.0], [0.2, 0.5, 0.9])
    {}
    """
    g = np.asarray(gamma, dtype=float).ravel()
    e = np.array([float(v) for v in np.asarray(E, dtype=object).ravel()], dtype=float)
    tol = PHYSICAL_SLACK
    bad = {}
    for i in np.nonzero(np.isfinite(e))[0]:
        if not -tol <= e[i] <= 1 + tol:
            bad[int(i)] = f"impossible value E={e[i]:.6g} (outside [0, 1])"
    live = [int(i) for i in np.nonzero(np.isfinite(e))[0] if int(i) not in bad]

    def reason(i, j):   # g[i] < g[j]
        a, b, gi, gj = e[i], e[j], g[i], g[j]
        if a > b + tol:
            return f"E decreases in gamma: E={a:.6g} at gamma={gi:.6g} > E={b:.6g} at gamma={gj:.6g}"
        if a < (gi / gj) ** 2 * b - tol:
            return f"E/gamma^2 increases: E={a:.6g} at gamma={gi:.6g}, E={b:.6g} at gamma={gj:.6g}"
        if gi * (1 - a) > gj * (1 - b) + tol * gj + 1e-6 * gi * (1 - a):
            return (f"gamma (1 - E) decreases (the gamma -> inf asymptote): E={a:.6g} at gamma={gi:.6g}, "
                    f"E={b:.6g} at gamma={gj:.6g}")
        return None

    pairs = {}
    for x in live:
        for y in live:
            if g[x] < g[y]:
                r = reason(x, y)
                if r is not None:
                    pairs[(x, y)] = r
    while pairs:
        count = {}
        for x, y in pairs:
            count[x] = count.get(x, 0) + 1
            count[y] = count.get(y, 0) + 1
        top = max(count.values())
        drop = {max(count, key=count.get)} if top > 1 else set(count)
        for (x, y), r in list(pairs.items()):
            if x in drop or y in drop:
                for i in drop & {x, y}:
                    bad.setdefault(i, r)
                del pairs[(x, y)]
    return dict(sorted(bad.items()))


def _physical_front(out, model, errors, engine) -> None:
    """Apply :func:`unphysical_points` to each c's curve of each model of ``out`` (a TheoryResult): a failing
    point is NaN with a FailedPointsWarning (``errors='nan'``), or a ConvergenceError (``errors='raise'``)."""
    from .errors import ConvergenceError, FailedPointsWarning

    c = np.asarray(out.c, dtype=float).ravel()
    g = np.asarray(out.gamma, dtype=float).ravel()
    failed = []
    for m in ("attention", "linear") if model == "both" else (model,):
        vals = getattr(out, m, None)
        if vals is None:
            continue
        arr = np.array(vals)   # a writable copy, set back below
        flat = arr.reshape(-1)
        if flat.size != c.size:
            continue
        for ci in np.unique(c):
            idx = np.nonzero(c == ci)[0]
            for k, why in unphysical_points(g[idx], flat[idx]).items():
                point = {"c": float(ci), "gamma": float(g[idx[k]]), "model": m, "reason": why}
                if errors != "nan":
                    raise ConvergenceError(f"wrong branch: {why} ({engine} engine)",
                                           point={"c": float(ci), "gamma": float(g[idx[k]])})
                flat[idx[k]] = np.nan
                failed.append(point)
        setattr(out, m, arr)
    if failed:
        out.failures = list(getattr(out, "failures", None) or []) + failed
        shown = "; ".join(f"c={p['c']:g}, gamma={p['gamma']:g}: {p['reason']}" for p in failed[:10])
        warnings.warn(FailedPointsWarning(f"{len(failed)} point(s) failed the physical checks and are NaN: {shown}",
                                          failed), stacklevel=_caller_level())


def _pointwise(eng, layer, c, gamma, *, model, backend, dps, n, **kw):
    """``eng.run`` at each point (c, γ) alone: E per model shaped broadcast(c, gamma), NaN where the point's
    solver fails, with one FailedPointsWarning naming them (``errors='nan'`` for every engine); returns
    ``(E, failures)``, the failures as ``TheoryResult.failures`` lists them."""
    from .errors import ConvergenceError, FailedPointsWarning

    cb, gb = np.broadcast_arrays(np.asarray(c, dtype=float), np.asarray(gamma, dtype=float))
    models = ("attention", "linear") if model == "both" else (model,)
    out = {m: np.full(cb.shape, np.nan, dtype=object if backend == "mpmath" else float) for m in models}
    failed = []
    for i in np.ndindex(cb.shape):
        try:
            v = eng.run(layer, float(cb[i]), [float(gb[i])], model=model, backend=backend, dps=dps, n=n,
                        errors="nan", **kw)
        except ConvergenceError as err:
            failed.append({"c": float(cb[i]), "gamma": float(gb[i]), "model": "attention", "reason": err.reason})
            continue
        v = v.E if hasattr(v, "E") else v
        for m in models:
            out[m][i] = np.asarray(v[m] if isinstance(v, dict) else v, dtype=object).reshape(-1)[0]
    if failed:
        shown = "; ".join(f"c={p['c']:g}, gamma={p['gamma']:g}: {p['reason']}" for p in failed[:10])
        warnings.warn(FailedPointsWarning(f"{len(failed)} point(s) failed and are NaN: {shown}", failed),
                      stacklevel=_caller_level())
    return (out if model == "both" else out[model]), failed


def _as_result(values, c, gamma, model, backend, dps, n):
    """A TheoryResult around an engine's E (an array, or a dict of both models)."""
    from .theory import TheoryResult

    E = values if isinstance(values, dict) else {model: values}
    shape = np.shape(next(iter(E.values())))
    cb = np.broadcast_to(np.asarray(c, dtype=float), shape).copy()
    gb = np.broadcast_to(np.asarray(gamma, dtype=object if backend == "mpmath" else float), shape).copy()
    return TheoryResult(c=cb, gamma=gb, model=model, attention=E.get("attention"), linear=E.get("linear"),
                        parameters={"n": n, "backend": backend, "dps": dps})


# ----------------------------------------------------------------------------- the engines
@dataclass(frozen=True)
class Engine:
    """One theory engine of :data:`THEORY_ENGINES`: its name, the theory it evaluates, the options it takes and
    the layers it covers.

    ``run(layer, c, gamma, *, model, backend, dps, n, errors, **options)`` returns a
    :class:`~symattn.theory.TheoryResult` or E (an array, or a dict per model). ``isolates``: the engine
    makes a failed point NaN itself under ``errors='nan'``; the others are run point by point when a call
    fails (:meth:`Layer.theory`). ``covers``: feature → the values it handles: the layer's ``form``
    (:attr:`Layer.form`), ``kernel``, the weights' ``structure``, the ``error`` (train, test) and the
    ``tokens`` (iid, correlated); :meth:`Layer.engine` picks the one engine that covers a layer.
    ``zero_ridge``: it takes γ = 0; ``warns_finite_size``: it issues the FiniteSizeWarning of a strong signal itself.
    :attr:`methods`: the methods of the backends' registry (:mod:`symattn.backends.registry`) it runs."""

    name: str
    theory: str
    options: tuple
    run: Callable
    isolates: bool = False
    covers: dict = field(default_factory=dict)
    zero_ridge: bool = False
    warns_finite_size: bool = False

    @property
    def methods(self) -> tuple:
        """The registered methods of the backends that serve this engine (``registry.methods(engine=name)``)."""
        return backend_methods(engine=self.name)


def _paper(layer, c, gamma, *, model, backend, dps, n, errors, geometry=None, correction=None, method=None,
           error="train"):
    from .theory import ridgeless, solve

    if error == "test":
        from .generalization import solve_test

        return solve_test(layer.activation, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps, n=n,
                          diagonal=layer.diagonal, errors=errors, method=method)
    if _zero_ridge(gamma):
        values = ridgeless(layer.activation, c, gamma, geometry, model, backend, dps, n, layer.diagonal, correction,
                           errors, method)
        return _as_result(values, c, gamma, model, backend, dps, n)
    return solve(layer.activation, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps, n=n,
                 diagonal=layer.diagonal, correction=correction, errors=errors, method=method)


def _general_w(layer, c, gamma, *, model, backend, dps, n, errors, mu=None, structure=None, error="train"):
    if error == "test":
        from .generalization import general_test_error

        return general_test_error(layer.activation, c, gamma, layer.weights, mu, model=model, n=n,
                                  diagonal=layer.diagonal, errors=errors, structure=structure or "auto")
    from .backends.general_w_entry import general_memorization_error

    return general_memorization_error(layer.activation, c, gamma, layer.weights, mu, model=model, backend=backend,
                                      n=n, diagonal=layer.diagonal, errors=errors, dps=dps,
                                      structure=structure or "auto")


def _softmax(layer, c, gamma, *, model, backend, dps, n, errors, geometry=None):
    from .variants import variant_error

    return variant_error(layer.activation, c, gamma, geometry=geometry,
                         model=model, backend=backend, dps=dps, n=n, diagonal=layer.diagonal, residual=layer.residual,
                         kernel=layer.kernel, temperature=layer.temperature)


def _variant(layer, c, gamma, *, model, backend, dps, n, errors, mu=None, geometry=None, error="train"):
    from .variants import variant_error

    if error == "test":   # the 'sum' engine: summed general heads, or one W's residual (docs/theory.md §14.9)
        if layer.weights is None and (layer.heads is None or layer.readout != "sum" and len(layer.heads) > 1):
            raise ParameterError("error", "test", "'train' with the 'sum' engine for concatenated heads (readout='concat')",
                                 hint="the test-error theory covers heads summed (readout='sum') and one W's residual")
        from .generalization import general_test_error

        return general_test_error(layer.activation, c, gamma, layer.weights, mu, model=model, n=n,
                                  diagonal=layer.diagonal, errors=errors,
                                  heads=None if layer.heads is None else list(layer.heads), residual=layer.residual)

    if layer.weights is not None:  # the residual layer of one head W: heads=[W] summed (docs/theory.md §13.1)
        return variant_error(layer.activation, c, gamma, model=model, backend=backend, dps=dps, n=n,
                             diagonal=layer.diagonal, residual=layer.residual, heads=[layer.weights], readout="sum",
                             mu=mu)
    return variant_error(layer.activation, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps, n=n,
                         diagonal=layer.diagonal, residual=layer.residual,
                         heads=None if layer.heads is None else list(layer.heads), readout=layer.readout, mu=mu)


def _covering(form, kernel=("entrywise",), **more):
    """The ``covers`` of an engine: its layer forms and kernels; train error and iid tokens unless given."""
    return {"form": form, "kernel": kernel, "error": ("train",), "tokens": ("iid",), **more}


#: the theory engines, keyed by :meth:`Layer.engine` (which reads their ``covers``)
THEORY_ENGINES = Registry("engine")
for _engine in (
    Engine("paper", "Theorem 1: closed form, quadrature fallback (docs/theory.md §5-7, §10)",
           ("geometry", "correction", "method"), _paper, isolates=True,
           covers=_covering(("plain",), error=("train", "test"), tokens=("iid", "correlated")), zero_ridge=True,
           warns_finite_size=True),
    Engine("general-w", "general W, free elliptic noise (docs/theory.md §12.1)", ("mu", "structure"), _general_w,
           isolates=True, covers=_covering(("weights",), structure=("free",), error=("train", "test"))),
    Engine("hermite-blocks", "low-rank W, structured Hermite blocks (docs/theory.md §12.8)", ("mu", "structure"),
           _general_w, isolates=True,
           covers=_covering(("weights",), structure=("blocks",), error=("train", "test"))),
    Engine("residual", "the residual layer X(I + K) (docs/theory.md §13.1)", ("geometry",), _variant,
           covers=_covering(("residual",))),
    Engine("sum", "summed heads, identical heads, one head's residual (docs/theory.md §13.1-13.2)", ("mu",),
           _variant, covers=_covering(("heads:sum", "weights+residual"), error=("train", "test"))),
    Engine("concat", "distinct heads concatenated: the block pencil (docs/theory.md §13.2)", ("mu",), _variant,
           covers=_covering(("heads:concat",))),
    Engine("softmax", "the row softmax kernel (docs/theory.md §13.3)", ("geometry",), _softmax,
           covers=_covering(("plain", "residual"), kernel=("softmax",))),
):
    THEORY_ENGINES.add(_engine)
#: the hints of a combination that no engine (or method) covers
_COVER_HINTS = {
    "kernel": "the softmax theory (docs/theory.md §13.3) is of W = I + low rank: kernel='softmax' without weights= "
              "or heads=; simulate the others with sa.simulate",
    "error": "the test-error theory (docs/theory.md §14) is of the paper's model (asymptotic), of one weight matrix "
             "and of summed heads (§14.9); simulate the others with error='test'",
}
_OPTION_HINTS = {
    "mu": "the paper's model takes its signal as geometry=; mu= is the vector of a layer with weights= or heads=",
    "geometry": "with weights= or heads= the signal is the vector mu=",
    "correction": "the finite-p correction is of the paper's model only (no weights, heads, residual or softmax)",
    "structure": "structure= chooses the kernel model of a layer with weights=",
    "method": "method= chooses the paper model's bulk solver",
}


# ----------------------------------------------------------------------------- the function forms
@known_keywords
def memorization_error(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention",
                       backend: str = "numpy", dps: int | None = None, n: int | None = None,
                       diagonal: str = "f", correction: str | None = None, errors: str = "raise",
                       residual: bool = False, heads=None, readout: str = "concat", kernel: str = "entrywise",
                       temperature=None, weights=None, mu=None, structure: str = "auto", error: str = "train",
                       tokens=None):
    r"""Deterministic-equivalent training (memorisation) error E(γ) = −γ² F'(γ), or with error='test' the
    test error (:func:`generalization_error`).

    ``Layer(f, weights, heads, readout, residual, kernel, temperature, diagonal).theory(c, gamma, mu,
    geometry, n, correction, backend, dps, model=..., errors=..., structure=...).E``: the function form of
    :meth:`Layer.theory`. E_A is the attention error (docs/theory.md §6; §12 with ``weights``, §13 for
    the variants), E_LR the linear-regression error (docs/theory.md §3):

    .. math::

       E(\gamma) = \lim \frac{1}{n}\big\|y - \Phi^\top\beta\big\|^2
                  = -\gamma^2 F'(\gamma),\qquad
       F(\gamma) = \lim \hat y^\top \Big(\frac{\Phi^\top\Phi}{n} + \gamma\Big)^{-1} \hat y,

    with Φ the layer's features (Φ = X for E_LR) and β the ridge readout.

    Parameters
    ----------
    f : str, sympy expression, callable or Activation
        The activation: a catalog name (``"tanh"``), a SymPy string in ``x`` (``"x*erf(x)"``),
        a SymPy expression, a callable, or an :class:`~symattn.Activation`. The model uses the
        centred f − a0.
    c : float or array_like
        The ratio p/n > 0, broadcast against ``gamma``.
    gamma : float or array_like
        The ridge γ > 0; γ = 0 gives the ridgeless value, the γ → 0 limit, which exists for
        c < 1 (docs/theory.md §7.6); at c ≥ 1 it raises ParameterError.
    geometry : Geometry, dict or None
        The Gram matrix of (μ, w_K, w_Q) (:class:`~symattn.Geometry`); None means μ = w = 0.
    model : {'attention', 'linear', 'both'}
        E_A, E_LR or both.
    backend : {'numpy', 'mpmath'}
        float64 and vectorised, or mpmath at ``dps`` digits (default 30).
    dps : int, optional
        Decimal digits of the mpmath backend.
    n : int, optional
        The number of tokens: the finite-p diagonal d_n at p = round(c·n) replaces
        d = lim f(√p)/√p (docs/theory.md §1.3).
    diagonal : {'f', 'zero'}
        The kernel's diagonal is f (giving d) or zero (d = 0).
    correction : {None, 'finite-p'}
        None for the asymptotic theory, 'finite-p' (needs ``n``) for the finite-p corrected
        attention theory (docs/theory.md §10).
    errors : {'raise', 'nan'}
        A point that cannot be solved raises :class:`~symattn.errors.ConvergenceError`
        (default), or becomes NaN, the other points kept, with one
        :class:`~symattn.errors.FailedPointsWarning` listing the failed points and reasons.
        Every returned E is finite and in [0, 1] (see :func:`symattn.theory.solve`).
    residual, heads, readout, kernel, temperature, weights
        The layer (:class:`Layer`): Φ = X(I + K) (``residual``); heads W_1..W_H with ``readout``
        'concat' or 'sum'; the row softmax (``kernel='softmax'``, ``temperature=τ``, needs ``n`` and
        ``diagonal='zero'``); one exact p×p W (``weights``, an array, a .npy path or ``minilm:LAYER[:HEAD]``;
        the kernel f(XᵀWX/√p)/√p, n = round(p/c)). What the theory does not cover is refused with a
        ParameterError saying why.
    mu : array_like, optional
        The signal μ (length p) with ``weights`` or ``heads``.
    structure : {'auto', 'blocks', 'free'}
        With ``weights``: the kernel model of its nonlinear part, the free elliptic noise of
        docs/theory.md §12.1 ('free') or the structured Hermite blocks of §12.8 for a low-rank W
        ('blocks'); 'auto' takes 'blocks' when rank W <= min(64, p/4).
    error : {'train', 'test'}
        The training error (default) or the test error on a fresh sequence (docs/theory.md §14;
        the paper's model, γ > 0).
    tokens : TokenLaw, dict or None
        The law of the sequence (docs/theory.md §15): ridge regression on X, and for the paper's layer
        with ``n`` attention's training and test errors (:meth:`Layer.theory`).

    Returns
    -------
    numpy.ndarray or dict
        A float array of shape broadcast(c, gamma) -- or, for model='both',
        ``{"attention": array, "linear": array}``. With backend='mpmath' the arrays hold mpf.

    Raises
    ------
    ParameterError
        A parameter outside its allowed range, named with the range; a
        :class:`~symattn.errors.KeywordError` for a keyword the function does not take, with the nearest.
    ConvergenceError
        A point the solver cannot solve (``errors='raise'``).

    Warns
    -----
    AccuracyWarning
        A point whose accuracy the atlas has not measured nearby, or measured outside max(3 se, 3 %)
        (docs/accuracy.md).

    Examples
    --------
    >>> E = memorization_error("tanh", c=0.5, gamma=[0.01, 1.0], model="both")
    >>> bool(np.all(E["attention"] >= E["linear"]))      # no signal: attention memorises worse
    True
    >>> float(memorization_error("tanh", c=0.5, gamma=0.0))  # ridgeless: rank Φ = p, E_A(0) = 1 − c
    0.5
    """
    layer = Layer(f, weights=weights, heads=heads, readout=readout, residual=residual, kernel=kernel,
                  temperature=temperature, diagonal=diagonal)
    return layer.theory(c, gamma, mu=mu, geometry=geometry, n=n, correction=correction, backend=backend, dps=dps,
                        model=model, errors=errors, structure=structure, error=error, tokens=tokens).E


@known_keywords
def generalization_error(f="tanh", c=0.5, gamma=1.0, geometry=None, model: str = "attention",
                         backend: str = "numpy", dps: int | None = None, n: int | None = None,
                         diagonal: str = "f", errors: str = "raise", correction=None, residual: bool = False,
                         heads=None, readout: str = "concat", kernel: str = "entrywise", temperature=None,
                         weights=None, mu=None, structure: str = "auto", tokens=None):
    r"""Deterministic-equivalent test (generalisation) error of the ridge readout (docs/theory.md §14).

    β = (ΦΦᵀ/n + γ)^{-1}Φy/n is fitted on one sequence and tested on a fresh one (X′, y′) of the same
    law: E_test(γ) = E (1/n)‖y′ − Φ′ᵀβ‖² = 1 − 2βᵀm + βᵀCβ, with the test moments
    m = E[Φ′y′]/n, C = E[Φ′Φ′ᵀ]/n (:func:`symattn.generalization.population_moments`), ‖β‖² = F − E_train/γ
    and the overlaps βᵀμ, βᵀw of the training theory. Linear regression (model 'linear' or 'both')
    is ridge on X, m = μ, C = I + μμᵀ.

    Parameters
    ----------
    f, c, gamma, geometry, model, backend, dps, n, diagonal, errors, tokens
        As :func:`memorization_error` (γ > 0; the paper's model W = I + Σ w_K w_Qᵀ).
    correction, residual, heads, readout, kernel, temperature, weights, mu, structure
        The keywords of :func:`memorization_error`, so that both take the same ones. The test-error theory
        covers the paper's model (§14) and a layer with one weight matrix (``weights=``, an array, a .npy path or
        ``minilm:LAYER[:HEAD]``; ``mu=`` its signal; docs/theory.md §14.9, the free-noise or Hermite-block
        kernel of §12 by ``structure``); a layer whose engine has no test theory yet (heads, residual,
        softmax, ``correction``) raises a ParameterError that names ``error`` and the engine (measure those
        layers with ``simulate(..., error="test")``).

    Returns
    -------
    numpy.ndarray or dict
        E_test of shape broadcast(c, gamma), or ``{"attention": ..., "linear": ...}`` for model='both'.
        It is ≥ 0 and may exceed 1 (a readout worse than predicting 0).

    Examples
    --------
    >>> from symattn import Geometry
    >>> E = generalization_error("tanh", c=0.5, gamma=[0.1, 10.0], model="both")
    >>> bool(np.all(E["attention"] > 1))                  # no signal: worse than the zero predictor
    True
    >>> E = generalization_error("tanh", c=0.5, gamma=1.0, geometry=Geometry.aligned(1.0), model="both")
    >>> round(float(E["linear"]), 4)                      # the closed form of docs/theory.md §14.4
    0.6375
    >>> E = generalization_error(c=1.0, gamma=1.0, geometry=Geometry(snr=1.0), model="linear", tokens={"ar1": 0.8})
    >>> bool(E < generalization_error(c=1.0, gamma=1.0, geometry=Geometry(snr=1.0), model="linear"))
    True
    >>> W = np.eye(24) + np.outer(np.ones(24), np.ones(24)) / 24
    >>> bool(generalization_error("tanh", 0.5, 1.0, weights=W, mu=np.ones(24) / np.sqrt(24)) < 1)
    True
    """
    return memorization_error(f, c, gamma, geometry=geometry, model=model, backend=backend, dps=dps, n=n,
                              diagonal=diagonal, correction=correction, errors=errors, residual=residual, heads=heads,
                              readout=readout, kernel=kernel, temperature=temperature, weights=weights, mu=mu,
                              structure=structure, error="test", tokens=tokens)


@known_keywords
def simulate(f, n: int = 1024, c: float = 0.5, gamma=(1e-2, 1e-1), geometry=None, draws: int = 8,
             seed=0, backend: str = "numpy", device=None, diagonal: str = "f", weights=None, mu=None,
             progress=None, models=MODELS, trace_estimator: bool = False,
             dtype: str = "float64", method: str = "auto", residual: bool = False, heads=None,
             readout: str = "concat", kernel: str = "entrywise", temperature=None, batch=None, W=None,
             error="train", tokens=None):
    r"""Exact Monte Carlo of E_A (attention) and E_LR (linear regression) at finite n, train and/or test.

    ``Layer(f, weights, heads, readout, residual, kernel, temperature, diagonal).simulate(n, c, gamma, mu,
    geometry, draws, seed, ...)``: per draw X = μyᵀ + Z (p×n, p = round(c·n)), Φ of the layer,
    M = ΦᵀΦ/n, and E(γ) = (γ²/n) Σ_k (v_kᵀy)²/(λ_k+γ)² for every γ from one decomposition of M
    (docs/theory.md §2; every option is documented at :func:`symattn.montecarlo.exact_monte_carlo`).

    Parameters
    ----------
    f : Activation, str, sympy expression, callable or None
        The activation (a plain callable is applied as given; None with the softmax kernel).
    n, c, gamma : tokens n >= 2, ratio c = p/n, ridges γ > 0.
    geometry : Geometry, dict or None
        The Gram matrix of (μ, w_K, w_Q), embedded by ``Geometry.vectors(p)``.
    draws, seed : independent draws >= 1 and the root seed.
    weights, mu : one explicit p×p W (array, .npy path or ``minilm:LAYER[:HEAD]``) and/or the signal μ (p,).
    W : deprecated name of ``weights`` (a DeprecationWarning).
    backend, device, diagonal, progress, models, trace_estimator, dtype, method, batch
        As :func:`symattn.montecarlo.exact_monte_carlo`.
    residual, heads, readout, kernel, temperature
        The layer's variant (:class:`Layer`).
    error : 'train', 'test', 'both' or a tuple of them
        Training errors and/or test errors on a fresh sequence per draw (docs/theory.md §14).
    tokens : TokenLaw, dict or None
        Time-correlated tokens and/or Markov labels (docs/theory.md §15).

    Returns
    -------
    SimulationResult
        The per-draw errors, their means and standard errors, the seed, the sizes and the provenance.

    Examples
    --------
    >>> r = simulate("tanh", n=200, c=0.5, gamma=[0.1, 1.0], draws=3, seed=0)
    >>> r.attention.shape, r.attention_mean.round(2).tolist()
    ((3, 2), [0.63, 0.76])
    """
    if W is not None:
        if weights is not None:
            raise ParameterError("W", "a matrix", "unset when weights= is given (W= is the old name of weights=)")
        warnings.warn("simulate(W=...) is deprecated: use weights=, the name memorization_error and Layer use",
                      DeprecationWarning, stacklevel=2)
        weights = W
    try:
        layer = Layer(f, weights=weights, heads=heads, readout=readout, residual=residual, kernel=kernel,
                      temperature=temperature, diagonal=diagonal)
        return layer.simulate(n, c, gamma, mu=mu, geometry=geometry, draws=draws, seed=seed, backend=backend,
                              device=device, progress=progress, models=models, trace_estimator=trace_estimator,
                              dtype=dtype, method=method, batch=batch, error=error, tokens=tokens)
    except ParameterError as err:
        if W is None or err.name not in ("weights", "heads"):
            raise
        raise ParameterError("W", err.value, err.allowed) from None   # named as the caller named it
