r"""The sweep spec: a TOML file (or dict) of scalars and lists; every list spans one grid axis.

.. code-block:: toml

   activation = ["tanh", "erf"]
   c = [0.5, 1.0]
   gamma = [0.01, 0.1, 1.0]
   snr = [0.0, 1.0]
   aligned = true          # w_K = w_Q = mu (otherwise the geometry keys wk2, mu_wk, ... as in `solve`)
   n = 300
   draws = 6
   seed = 7

A sweep of the real layer (any :class:`symattn.Layer` key may be a list):

.. code-block:: toml

   activation = "gelu"
   weights = ["minilm:2", "minilm:2:0"]     # all heads of layer 2; its head 0
   residual = [false, true]
   mu = ["zero", "top"]                     # with weights or heads: zero | top | random:SEED | FILE.npy
   snr = 2.0                                # ||mu||^2 of top / random
   c = [1.0, 2.0]                           # n = round(p/c), p = 384 fixed by the weights
   gamma = [0.01, 0.1, 1.0]
   draws = 4

Keys (every other key is refused, naming it):

- swept (a scalar, or a non-empty list without repeats, which becomes a dimension of the
  result): ``activation`` (catalog name or SymPy string in x), ``c`` (0 < c <= 1e4), ``snr``,
  ``wk2``, ``wq2`` (>= 0), ``mu_wk``, ``mu_wq``, ``wk_wq`` (real; the Gram matrix must be PSD),
  ``n`` (2 <= n <= 1e9, or ``"auto"``: n = round(p/c) for a layer with weights or heads, the default
  for such a spec), ``diagonal`` ('f' or 'zero', default 'f');
  the layer (:class:`symattn.Layer`): ``weights`` ('none' (default), ``minilm:LAYER[:HEAD]`` or FILE.npy),
  ``heads`` (a value is 'none', ``minilm:LAYER`` (its 12 heads), ``minilm:LAYER:HEAD`` (one head), an H×p×p
  FILE.npy, or a list of such references naming one head each; as everywhere a list of values is an axis,
  so ``heads = ["minilm:2", "minilm:3"]`` sweeps two layers' heads and ``heads = [["minilm:2:0",
  "minilm:2:1"]]`` is one layer of two heads), ``readout`` ('concat' or 'sum'), ``residual`` (bool), ``kernel`` ('entrywise' or
  'softmax'), ``temperature`` (> 0); and ``mu`` ('zero', 'top', 'random:SEED' or FILE.npy: the signal of
  a layer with weights or heads, scaled to ‖μ‖² = ``snr`` for top and random, :meth:`symattn.Layer.signal`);
  ``tile`` (1 <= T <= 64, default 1: the weights or heads W ⊗ I_T, p → pT, for the n-law at fixed c);
- ``gamma`` (0 < γ <= 1e12, scalar or list): always the last dimension; every γ of a point comes
  from the same eigendecomposition, so γ is *not* a task axis;
- scalars only: ``aligned`` (bool, default false: w_K = w_Q = μ, geometry from ``snr`` alone),
  ``draws`` (1..10⁶, default 4; at most 10⁵ tasks = grid points × draws, 10⁴ grid points and 1000 γ values per sweep), ``seed`` (0 <= seed < 2⁶³, default 0), ``backend`` ('numpy' or
  'torch', default 'numpy'), ``correction`` ('none' or 'finite-p': the finite-p corrected theory of the
  paper's model, docs/theory.md §10).

A *task* is one (point, draw), a point being one value of every swept key except γ. Draw k of
a point uses the generator ``default_rng(SeedSequence(entropy).spawn(k + 1)[k])`` with

.. math::  \mathrm{entropy} = \mathrm{seed} + 2^{64} h,\quad
           h = \text{the first 16 bytes (little-endian) of } \mathrm{sha256}(\text{canonical JSON of the point}),

so a task's numbers depend on the spec's seed and the point's parameters only -- never on the
order of scheduling, on how many workers there are, on the other values of the grid or on the number
of draws -- and draw k of a point is draw k of ``simulate(..., draws=D, seed=SeedSequence(entropy))``.
(The layer keys and ``mu`` enter the point's identity only where they differ from their defaults, so
the stores of specs without them keep their seeds.)

*Extension*: a spec that differs from the one that made a store only by more draws, or by supersets of
its swept lists (a former scalar becoming a list that holds it counts), reuses every stored task
(:meth:`SweepSpec.extension_of`); any other difference is refused, naming the key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
from dataclasses import dataclass
from functools import lru_cache
from numbers import Integral, Real
from pathlib import Path

from ..caching import digest
from ..errors import ParameterError

__all__ = ["SweepSpec", "load_spec", "SWEPT_KEYS", "SCALAR_KEYS", "GEOMETRY_KEYS", "LAYER_SPEC_KEYS", "value_key"]

#: the geometry entries (as in ``symattn solve``)
GEOMETRY_KEYS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")
#: the layer's keys besides the activation (:class:`symattn.Layer`), and the signal vector ``mu``
LAYER_SPEC_KEYS = ("weights", "heads", "readout", "residual", "kernel", "temperature")
#: keys that may be lists (grid dimensions), in the order of the dimensions
SWEPT_KEYS = ("activation", "c") + GEOMETRY_KEYS + ("n", "diagonal") + LAYER_SPEC_KEYS + ("mu", "tile")
#: keys that must be scalars
SCALAR_KEYS = ("aligned", "draws", "seed", "backend", "correction")
DEFAULTS = {"activation": "tanh", "c": 0.5, "gamma": [0.1, 1.0], "snr": 0.0, "wk2": 0.0, "wq2": 0.0,
            "mu_wk": 0.0, "mu_wq": 0.0, "wk_wq": 0.0, "n": 200, "aligned": False, "draws": 4, "seed": 0,
            "diagonal": "f", "backend": "numpy", "weights": "none", "heads": "none", "readout": "concat",
            "residual": False, "kernel": "entrywise", "temperature": "none", "mu": "zero", "correction": "none",
            "tile": 1}
#: keys of the first spec format: always in the canonical spec; the others only where they differ from DEFAULTS
FORMAT1_KEYS = ("activation", "c", "snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq", "n", "gamma", "aligned", "draws",
                "seed", "diagonal", "backend")
ALL_KEYS = SWEPT_KEYS + ("gamma",) + SCALAR_KEYS
DRAWS_MAX = 10**6
#: the size of one sweep: grid points (each solved by the theory when the store is made), γ values, and tasks
POINTS_MAX = 10**4
GAMMA_MAX = 1000
TASKS_MAX = 10**5
SEED_MAX = 2**63 - 1
#: spec format version stored with the results
SPEC_VERSION = 1


def label(value) -> str:
    """The text of a swept value as a store coordinate: a head set (a list) joined by '+'.

    Examples
    --------
    >>> label(["minilm:2:0", "minilm:2:1"]), label(0.5)
    ('minilm:2:0+minilm:2:1', '0.5')
    """
    return "+".join(map(str, value)) if isinstance(value, list) else str(value)


def value_key(value) -> str:
    """A hashable identity of a (possibly list-valued) spec value: its JSON with sorted keys.

    Examples
    --------
    >>> value_key([1, 2]) == value_key([1, 2]), value_key({"b": 1, "a": 2})
    (True, '{"a": 2, "b": 1}')
    """
    return json.dumps(value, sort_keys=True)


def _real(key, v, lo=None, hi=None, lo_open=False):
    if isinstance(v, bool) or not isinstance(v, Real) or not math.isfinite(float(v)):
        raise ParameterError(key, v, _range(key, lo, hi, lo_open))
    x = float(v)
    if (lo is not None and (x < lo or (lo_open and x <= lo))) or (hi is not None and x > hi):
        raise ParameterError(key, v, _range(key, lo, hi, lo_open))
    return x


def _range(key, lo, hi, lo_open):
    if lo is None and hi is None:
        return f"a finite real number {key}"
    left = f"{lo:g} {'<' if lo_open else '<='} " if lo is not None else ""
    right = f" <= {hi:g}" if hi is not None else ""
    return f"a real number {left}{key}{right}"


def _int(key, v, lo, hi):
    ok = not isinstance(v, bool) and (isinstance(v, Integral) or (isinstance(v, Real) and math.isfinite(float(v))
                                                                    and float(v).is_integer()))
    if not ok or not lo <= int(v) <= hi:
        raise ParameterError(key, v, f"an integer {lo} <= {key} <= {hi}")
    return int(v)


def _check_value(key, v):
    if key == "activation":
        if not isinstance(v, str) or not v.strip():
            raise ParameterError(key, v, "a catalog name (tanh, erf, relu, ...) or a SymPy expression in x")
        from ..activations.activation import activation
        from ..errors import ActivationError

        try:
            activation(v)
        except ActivationError as exc:
            raise ParameterError(key, v, "a catalog name (tanh, erf, relu, ...) or a SymPy expression in x",
                                 hint=str(exc)) from None
        return v
    if key == "c":
        return _real(key, v, 0.0, 1e4, lo_open=True)
    if key == "gamma":
        return _real(key, v, 0.0, 1e12, lo_open=True)
    if key in ("snr", "wk2", "wq2"):
        return _real(key, v, 0.0, 1e6)
    if key in ("mu_wk", "mu_wq", "wk_wq"):
        return _real(key, v, -1e6, 1e6)
    if key == "n":
        return v if v == "auto" else _int(key, v, 2, 10**9)
    if key == "draws":
        return _int(key, v, 1, DRAWS_MAX)
    if key == "seed":
        return _int(key, v, 0, SEED_MAX)
    if key == "aligned":
        if not isinstance(v, bool):
            raise ParameterError(key, v, "true or false")
        return v
    if key == "diagonal":
        if v not in ("f", "zero"):
            raise ParameterError(key, v, "'f' or 'zero'")
        return v
    if key == "backend":
        if v not in ("numpy", "torch"):
            raise ParameterError(key, v, "'numpy' or 'torch'")
        return v
    if key in ("weights", "mu"):
        if not isinstance(v, str) or not v.strip():
            raise ParameterError(key, v, "'none', minilm:LAYER[:HEAD] or FILE.npy" if key == "weights"
                                 else "zero, top, random:SEED or FILE.npy")
        return v
    if key == "heads":
        ok = isinstance(v, str) and v.strip() or isinstance(v, list) and v and all(
            isinstance(x, str) and x.strip() for x in v)
        if not ok:
            raise ParameterError(key, v, "'none', minilm:LAYER, FILE.npy, or a list of head references")
        return list(v) if isinstance(v, list) else v
    if key in ("readout", "kernel"):
        from ..model import KERNELS, READOUTS

        allowed = READOUTS if key == "readout" else KERNELS
        if v not in allowed:
            raise ParameterError(key, v, "one of " + ", ".join(repr(a) for a in allowed))
        return v
    if key == "residual":
        if not isinstance(v, bool):
            raise ParameterError(key, v, "true or false")
        return v
    if key == "temperature":
        return v if v == "none" else _real(key, v, 0.0, 1e6, lo_open=True)
    if key == "tile":
        return _int(key, v, 1, 64)
    if key == "correction":
        if v not in ("none", "finite-p"):
            raise ParameterError(key, v, "'none' or 'finite-p'")
        return v
    raise AssertionError(key)  # pragma: no cover


#: the keys of a point that make its layer
LAYER_POINT_KEYS = ("activation", "diagonal") + LAYER_SPEC_KEYS + ("tile",)


def _files(value) -> list:
    """The .npy paths a point's layer keys name."""
    if isinstance(value, dict):
        return [f for v in value.values() for f in _files(v)]
    if isinstance(value, list):
        return [f for v in value for f in _files(v)]
    return [value] if isinstance(value, str) and value.endswith(".npy") else []


@lru_cache(maxsize=256)
def _layer(keys: str, stamps: tuple):
    """The Layer of a point's layer keys (JSON); ``stamps`` (mtime, size of its files) key the cache only."""
    from ..layer import Layer

    point = json.loads(keys)
    weights = None if point["weights"] == "none" else point["weights"]
    heads = None if point["heads"] == "none" else point["heads"]
    T = point.get("tile", 1)
    if T != 1:   # W ⊗ I_T: the n-law of real weights at fixed c (symattn.layer.tiled)
        if weights is None and heads is None:
            raise ParameterError("tile", T, "1 for a layer without weights or heads (sweep n instead)")
        weights = None if weights is None else {"tile": T, "of": weights}
        heads = None if heads is None else {"tile": T, "of": heads}
    return Layer(point["activation"], weights=weights, heads=heads, readout=point["readout"],
                 residual=point["residual"], kernel=point["kernel"],
                 temperature=None if point["temperature"] == "none" else point["temperature"],
                 diagonal=point["diagonal"])


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep spec (see the module docstring for the keys).

    Attributes
    ----------
    values : dict
        Every key with its value (defaults filled in); swept keys given as lists stay lists.
    dims : tuple of str
        The swept keys given as lists (the grid dimensions besides ``draw`` and ``gamma``), in
        the order of :data:`SWEPT_KEYS`.

    Examples
    --------
    >>> s = SweepSpec.from_dict({"c": [0.5, 1.0], "gamma": [0.1, 1.0], "n": 60, "draws": 2})
    >>> s.dims, s.shape, len(s.tasks())
    (('c',), (2,), 4)
    >>> s.fingerprint == SweepSpec.from_dict(dict(s.values)).fingerprint
    True
    """

    values: dict
    dims: tuple

    @classmethod
    def from_dict(cls, data: dict) -> "SweepSpec":
        """Validate ``data`` (the parsed TOML): every key is checked, with a ParameterError naming it."""
        if not isinstance(data, dict):
            raise ParameterError("spec", type(data).__name__, "a table of keys (a TOML file or a dict)")
        data = {k: v for k, v in data.items() if k != "version"}
        for key in data:
            if key not in ALL_KEYS:
                raise ParameterError(key, data[key], "no such key: the spec keys are " + ", ".join(ALL_KEYS))
        values, dims = {}, []
        for key in ALL_KEYS:
            v = data.get(key, DEFAULTS[key])
            if key == "n" and key not in data and any(data.get(k, "none") != "none" for k in ("weights", "heads")):
                v = "auto"   # p is fixed by the weights: n = round(p/c)
            if isinstance(v, (list, tuple)):
                if key in SCALAR_KEYS:
                    raise ParameterError(key, list(v), f"a single value ({key} cannot be swept)")
                if not v:
                    raise ParameterError(key, [], "a value or a non-empty list of values")
                vals = [_check_value(key, x) for x in v]
                if len({value_key(x) for x in vals}) != len(vals):
                    raise ParameterError(key, list(v), "a list without repeated values")
                values[key] = vals
                if key != "gamma":
                    dims.append(key)
            elif isinstance(v, dict):
                raise ParameterError(key, v, "a value or a list of values, not a table")
            else:
                values[key] = _check_value(key, v)
        if not isinstance(values["gamma"], list):
            values["gamma"] = [values["gamma"]]
        if values["aligned"]:
            extra = [k for k in GEOMETRY_KEYS[1:] if k in data and data[k] != DEFAULTS[k]]  # (a stored spec has 0s)
            if extra:
                raise ParameterError(extra[0], data[extra[0]], "unset when aligned = true",
                                     hint="aligned sets w_K = w_Q = mu from snr alone")
        spec = cls(values=values, dims=tuple(dims))
        points = math.prod(spec.shape)
        if points > POINTS_MAX or points * spec.draws > TASKS_MAX or len(values["gamma"]) > GAMMA_MAX:
            raise ParameterError("spec", f"{points} grid points x {spec.draws} draws x {len(values['gamma'])} gamma",
                                 f"at most {POINTS_MAX} grid points, {GAMMA_MAX} gamma values and {TASKS_MAX} tasks "
                                 "(grid points x draws) per sweep",
                                 hint="split the sweep, or run fewer draws first and extend the store later (a spec "
                                      "with more draws keeps every stored task)")
        from ..model import check_dimension

        for _, point in spec.points():  # every point must make a valid layer, signal and size
            layer = spec.layer(point)
            where = "; at the point " + ", ".join(f"{d} = {label(point[d])}" for d in spec.dims)
            if layer.p is None:
                if point["mu"] != "zero":
                    raise ParameterError("mu", point["mu"], "'zero' for a layer without weights or heads",
                                         hint="the paper's model takes its signal from snr, aligned and the Gram "
                                              "keys" + where)
                if point["n"] == "auto":
                    raise ParameterError("n", "auto", "an integer 2 <= n <= 1000000000 for a layer without weights "
                                         "or heads ('auto' takes n = round(p/c) from the weights)" + where)
                # every geometry must be a PSD Gram matrix that p = round(c n) can hold
                check_dimension(point["n"], point["c"], spec.geometry(point))
            else:
                given = [k for k in GEOMETRY_KEYS[1:] if point[k] != DEFAULTS[k]] + (["aligned"] if values["aligned"]
                                                                                    else [])
                if given:   # the signal of a layer with weights is the vector mu, scaled by snr
                    raise ParameterError(given[0], point.get(given[0], True), "unset for a layer with weights or heads",
                                         hint="its signal is mu = zero|top|random:SEED|FILE.npy, scaled by snr" + where)
                spec.n_of(point)
                spec.signal(point)
            if values["correction"] != "none" and layer.engine() != "paper":
                raise ParameterError("correction", values["correction"],
                                     "'none' for a layer with weights, heads, residual or softmax",
                                     hint="the finite-p correction is of the paper's model" + where)
        return spec

    # -- the grid
    @property
    def shape(self) -> tuple:
        """The grid shape (one entry per dimension of :attr:`dims`)."""
        return tuple(len(self.values[d]) for d in self.dims)

    @property
    def gamma(self) -> list:
        return list(self.values["gamma"])

    @property
    def draws(self) -> int:
        return int(self.values["draws"])

    def coords(self) -> dict:
        """{dim: list of values} for the grid dimensions (head sets as :func:`label` strings)."""
        return {d: [label(v) if isinstance(v, list) else v for v in self.values[d]] for d in self.dims}

    def points(self) -> list:
        """Every point (a dict of all swept keys, γ excluded) in C order of the grid, with its index.

        Returns a list of ``(index, point)``; ``index`` is a tuple into :attr:`shape`."""
        out = []
        ranges = [range(len(self.values[d])) for d in self.dims]
        for idx in itertools.product(*ranges):
            point = {k: self.values[k] for k in SWEPT_KEYS}
            for d, i in zip(self.dims, idx):
                point[d] = self.values[d][i]
            out.append((idx, point))
        return out

    # -- one point
    def layer(self, point):
        """The :class:`symattn.Layer` of one point, built once per process for the same keys and files
        (a task and the theory of a point reuse it, and what it derives from its weights: :func:`_layer`)."""
        if isinstance(point, tuple):
            point = point[1]
        keys = {k: point[k] for k in LAYER_POINT_KEYS if k in point}
        files = [os.stat(f) for f in _files(keys) if os.path.isfile(f)]   # a rewritten file is another layer
        return _layer(json.dumps(keys, sort_keys=True), tuple((st.st_mtime_ns, st.st_size) for st in files))

    def geometry(self, point):
        """The :class:`~symattn.model.Geometry` of one point (of the paper's model: μ = w = 0 for a layer
        with weights or heads, whose signal is :meth:`signal`)."""
        from ..model import Geometry

        if isinstance(point, tuple):
            point = point[1]
        if point["weights"] != "none" or point["heads"] != "none":
            return Geometry()
        if self.values["aligned"]:
            return Geometry.aligned(point["snr"])
        return Geometry(**{k: point[k] for k in GEOMETRY_KEYS})

    def signal(self, point):
        """μ of one point's layer with weights or heads (:meth:`symattn.Layer.signal`; None for μ = 0)."""
        if isinstance(point, tuple):
            point = point[1]
        spec = point["mu"]
        snr = point["snr"] if spec == "top" or spec.startswith("random:") else None
        return self.layer(point).signal(spec, snr)

    def n_of(self, point) -> int:
        """The tokens n of one point: the spec's n, or round(p/c) for ``n = "auto"`` (p of the weights);
        a layer with weights needs round(c n) = p."""
        from ..model import dimension
        from ..realweights import tokens_for

        if isinstance(point, tuple):
            point = point[1]
        p = self.layer(point).p
        if point["n"] == "auto":
            return tokens_for(p, float(point["c"]))
        n = int(point["n"])
        if p is not None and dimension(n, float(point["c"])) != p:
            raise ParameterError("n", n, f"n with round(c n) = {p}, the size of the weights, at c = {point['c']:g} "
                                 f"(e.g. n = {round(p / float(point['c']))}, or n = 'auto')")
        return n

    def used(self, point) -> dict:
        """The parameters a point actually uses: ``n``, the Gram entries of the paper's geometry (NaN for a
        layer with weights or heads) and ``mu_norm2`` = ‖μ‖²."""
        if isinstance(point, tuple):
            point = point[1]
        layer = self.layer(point)
        out = {"n": self.n_of(point)}
        if layer.p is None:
            geo = self.geometry(point).as_dict()
            out.update({k: float(geo[k]) for k in GEOMETRY_KEYS})
            out["mu_norm2"] = float(geo["snr"])
        else:
            mu = self.signal(point)
            out.update({k: float("nan") for k in GEOMETRY_KEYS})
            out["mu_norm2"] = 0.0 if mu is None else float(mu @ mu)
        return out

    def point_identity(self, point) -> dict:
        """What a point's seed is derived from: activation, c, n, diagonal and the full Gram entries, and
        the layer keys and ``mu`` that differ from their defaults."""
        geo = self.geometry(point).as_dict()
        n = point["n"] if point["n"] == "auto" else int(point["n"])
        out = {"activation": point["activation"], "c": float(point["c"]), "n": n,
               "diagonal": point["diagonal"], "geometry": {k: float(geo[k]) for k in sorted(geo)}}
        for k in LAYER_SPEC_KEYS + ("mu", "tile"):
            if point[k] != DEFAULTS[k]:
                out[k] = point[k]
        if point["mu"] != "zero":
            out["snr"] = float(point["snr"])
        return out

    def entropy(self, point) -> int:
        """The SeedSequence entropy of a point: seed + 2⁶⁴·h, h = the first 16 bytes of sha256(point identity)."""
        blob = json.dumps(self.point_identity(point), sort_keys=True, separators=(",", ":")).encode()
        h = int.from_bytes(hashlib.sha256(blob).digest()[:16], "little")
        return int(self.values["seed"]) + (h << 64)

    def tasks(self) -> list:
        """Every task: a dict with ``index`` (grid index + (draw,)), ``point``, ``draw`` and ``entropy``."""
        out = []
        for idx, point in self.points():
            ent = self.entropy(point)
            for k in range(self.draws):
                out.append({"index": tuple(idx) + (k,), "point": point, "draw": k, "entropy": ent})
        return out

    # -- identity
    def canonical(self) -> dict:
        """The JSON-ready normalized spec (stored with the results): the keys of the first format always,
        the others where they differ from their defaults."""
        return {"version": SPEC_VERSION, **{k: self.values[k] for k in ALL_KEYS
                                            if k in FORMAT1_KEYS or self.values[k] != DEFAULTS[k]}}

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of :meth:`canonical`: two specs with the same results have the same one."""
        return digest(json.dumps(self.canonical(), sort_keys=True, separators=(",", ":")))

    def extension_of(self, old: dict) -> list:
        """The keys in which this spec extends the canonical spec ``old`` (more draws, supersets of swept lists).

        Parameters
        ----------
        old : dict
            :meth:`canonical` of the spec that made a store.

        Returns
        -------
        list of str
            The keys that differ (empty when the specs are the same).

        Raises
        ------
        ParameterError
            Naming the first key whose change is not an extension (a fixed value changed, a list
            that lost values, fewer draws).

        Examples
        --------
        >>> a = SweepSpec.from_dict({"c": [0.5], "n": 40, "draws": 2})
        >>> SweepSpec.from_dict({"c": [0.5, 1.0], "n": 40, "draws": 4}).extension_of(a.canonical())
        ['c', 'draws']
        """
        old = {k: v for k, v in old.items() if k != "version"}
        new = {k: v for k, v in self.canonical().items() if k != "version"}
        changed = []
        for key in ALL_KEYS:
            a, b = old.get(key, DEFAULTS[key]), new.get(key, DEFAULTS[key])
            if value_key(a) == value_key(b):
                continue
            if key == "draws" and b > a:
                changed.append(key)
                continue
            if key in SWEPT_KEYS + ("gamma",) and isinstance(b, list):
                olds = a if isinstance(a, list) else [a]   # a former scalar counts as a one-value list
                if {value_key(x) for x in olds} <= {value_key(x) for x in b}:
                    changed.append(key)
                    continue
            why = ("at least the stored draws" if key == "draws" else
                   "a list holding every stored value" if key in SWEPT_KEYS + ("gamma",) else "the stored value")
            raise ParameterError(key, b, f"{why} to extend a store")
        return changed


def load_spec(spec) -> SweepSpec:
    """A :class:`SweepSpec` from a TOML file path, a TOML string, a dict, or a SweepSpec.

    Parameters
    ----------
    spec : str, pathlib.Path, dict or SweepSpec
        A path to a ``.toml`` file, TOML text (a string containing ``=``), or the parsed table.

    Returns
    -------
    SweepSpec

    Raises
    ------
    ParameterError
        ``spec`` for a missing or unparsable file; the offending key for a bad value.

    Examples
    --------
    >>> load_spec('c = [0.5, 1.0]\\nn = 60\\ndraws = 2').dims
    ('c',)
    >>> load_spec({"n": 1})
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid n=1: allowed an integer 2 <= n <= 1000000000
    """
    if isinstance(spec, SweepSpec):
        return spec
    if isinstance(spec, dict):
        return SweepSpec.from_dict(spec)
    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        raise ParameterError("spec", str(spec), "a dict (reading TOML needs Python >= 3.11)") from None
    if isinstance(spec, str) and "=" in spec and "\n" in spec or (isinstance(spec, str) and spec.lstrip().startswith(
            tuple(ALL_KEYS)) and "=" in spec):
        text, where = spec, "spec"
    else:
        path = Path(spec)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ParameterError("spec", str(spec), "a readable TOML file",
                                 hint=getattr(exc, "strerror", None) or str(exc)) from None
        where = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ParameterError("spec", where, "a valid TOML file", hint=str(exc)) from None
    return SweepSpec.from_dict(data)
