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

Keys (every other key is refused, naming it):

- swept (a scalar, or a non-empty list without repeats, which becomes a dimension of the
  result): ``activation`` (catalog name or SymPy string in x), ``c`` (0 < c <= 1e4), ``snr``,
  ``wk2``, ``wq2`` (>= 0), ``mu_wk``, ``mu_wq``, ``wk_wq`` (real; the Gram matrix must be PSD),
  ``n`` (2 <= n <= 1e9);
- ``gamma`` (0 < γ <= 1e12, scalar or list): always the last dimension; every γ of a point comes
  from the same eigendecomposition, so γ is *not* a task axis;
- scalars only: ``aligned`` (bool, default false: w_K = w_Q = μ, geometry from ``snr`` alone),
  ``draws`` (1..10⁶, default 4), ``seed`` (0 <= seed < 2⁶³, default 0), ``diagonal``
  ('f' or 'zero', default 'f'), ``backend`` ('numpy' or 'torch', default 'numpy').

A *task* is one (point, draw), a point being one value of every swept key except γ. Draw k of
a point uses the generator ``default_rng(SeedSequence(entropy).spawn(k + 1)[k])`` with

.. math::  \mathrm{entropy} = \mathrm{seed} + 2^{64} h,\quad
           h = \text{the first 16 bytes (little-endian) of } \mathrm{sha256}(\text{canonical JSON of the point}),

so a task's numbers depend on the spec's seed and the point's parameters only -- never on the
order of scheduling or on how many workers there are -- and draw k of a point is draw k of
``simulate(..., draws=D, seed=SeedSequence(entropy))``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path

from ..errors import ParameterError

__all__ = ["SweepSpec", "load_spec", "SWEPT_KEYS", "SCALAR_KEYS", "GEOMETRY_KEYS"]

#: keys that may be lists (grid dimensions), in the order of the dimensions
SWEPT_KEYS = ("activation", "c", "snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq", "n")
#: the geometry entries (as in ``symattn solve``)
GEOMETRY_KEYS = ("snr", "wk2", "wq2", "mu_wk", "mu_wq", "wk_wq")
#: keys that must be scalars
SCALAR_KEYS = ("aligned", "draws", "seed", "diagonal", "backend")
DEFAULTS = {"activation": "tanh", "c": 0.5, "gamma": [0.1, 1.0], "snr": 0.0, "wk2": 0.0, "wq2": 0.0,
            "mu_wk": 0.0, "mu_wq": 0.0, "wk_wq": 0.0, "n": 200, "aligned": False, "draws": 4, "seed": 0,
            "diagonal": "f", "backend": "numpy"}
ALL_KEYS = SWEPT_KEYS + ("gamma",) + SCALAR_KEYS
DRAWS_MAX = 10**6
SEED_MAX = 2**63 - 1
#: spec format version stored with the results
SPEC_VERSION = 1


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
        return _int(key, v, 2, 10**9)
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
    raise AssertionError(key)  # pragma: no cover


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
        for key in data:
            if key not in ALL_KEYS:
                raise ParameterError(key, data[key], "no such key: the spec keys are " + ", ".join(ALL_KEYS))
        values, dims = {}, []
        for key in ALL_KEYS:
            v = data.get(key, DEFAULTS[key])
            if isinstance(v, (list, tuple)):
                if key in SCALAR_KEYS:
                    raise ParameterError(key, list(v), f"a single value ({key} cannot be swept)")
                if not v:
                    raise ParameterError(key, [], "a value or a non-empty list of values")
                vals = [_check_value(key, x) for x in v]
                if len(set(vals)) != len(vals):
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
            extra = [k for k in GEOMETRY_KEYS[1:] if k in data]
            if extra:
                raise ParameterError(extra[0], data[extra[0]], "unset when aligned = true",
                                     hint="aligned sets w_K = w_Q = mu from snr alone")
        spec = cls(values=values, dims=tuple(dims))
        from ..model import check_dimension

        for _, point in spec.points():  # every geometry must be a PSD Gram matrix that p = round(c n) can hold
            check_dimension(point["n"], point["c"], spec.geometry(point))
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
        """{dim: list of values} for the grid dimensions."""
        return {d: list(self.values[d]) for d in self.dims}

    def points(self) -> list:
        """Every point (a dict of all swept keys, γ excluded) in C order of the grid, with its index.

        Returns a list of ``(index, point)``; ``index`` is a tuple into :attr:`shape`."""
        out = []
        ranges = [range(len(self.values[d])) for d in self.dims]
        for idx in itertools.product(*ranges):
            point = {k: self.values[k] for k in SWEPT_KEYS}
            for d, i in zip(self.dims, idx):
                point[d] = self.values[d][i]
            point["diagonal"] = self.values["diagonal"]
            out.append((idx, point))
        return out

    def geometry(self, point):
        """The :class:`~symattn.model.Geometry` of one point."""
        from ..model import Geometry

        if isinstance(point, tuple):
            point = point[1]
        if self.values["aligned"]:
            return Geometry.aligned(point["snr"])
        return Geometry(**{k: point[k] for k in GEOMETRY_KEYS})

    def point_identity(self, point) -> dict:
        """What a point's seed is derived from: activation, c, n, diagonal and the full Gram entries."""
        geo = self.geometry(point).as_dict()
        return {"activation": point["activation"], "c": float(point["c"]), "n": int(point["n"]),
                "diagonal": point["diagonal"], "geometry": {k: float(geo[k]) for k in sorted(geo)}}

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
        """The JSON-ready normalized spec (stored with the results)."""
        return {"version": SPEC_VERSION, **{k: self.values[k] for k in ALL_KEYS}}

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of :meth:`canonical`: two specs with the same results have the same one."""
        blob = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()


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
