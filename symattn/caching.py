r"""Caches, under one rule (base layer: numpy only), in the style of Devito's scoped memoization.

Every cache of symattn that outlives a call and holds arrays, or is keyed by them, is a :class:`Memo`:

- a declared **name** (``"module.what"``) and **size** (the most entries kept);
- a **key**: the content of its arguments (:func:`content_key`; an array counts by its shape, dtype and
  :func:`digest` of its bytes, so an array changed in place is a new key);
- **least-recently-used eviction** (:func:`functools.lru_cache` keeps the entries);
- a **registry**: :func:`registry` lists every Memo (by name) and :func:`clear_all` empties them all (for tests).

:func:`functools.lru_cache` stays on pure builders whose arguments are small, immutable and hashable (names,
integers, SymPy objects: the SymPy systems and their compiled kernels), which hold no arrays and need no key.

:func:`digest` is the one content hash of symattn: the provenance of an explicit array
(:func:`symattn.provenance.array_digest`), the identity of a layer (:attr:`symattn.Layer.digest`) and the keys
of the caches.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache, wraps

import numpy as np

__all__ = ["digest", "content_key", "Memo", "memoize", "registry", "clear_all"]


def digest(data) -> str:
    r"""SHA-256 (hex) of ``data``'s bytes: a numpy array's in C order (an object array, of mpmath numbers, by
    the ``repr`` of its entries joined by ``|``), a string's in UTF-8, or bytes as they are.

    The array's shape and dtype are not part of the bytes (:func:`content_key` adds them), so that the digest
    of a float64 array is the ``sha256sum`` of its raw data.

    Parameters
    ----------
    data : numpy.ndarray, str or bytes

    Returns
    -------
    str
        64 hexadecimal digits.

    Examples
    --------
    >>> import hashlib
    >>> digest(np.eye(2)) == hashlib.sha256(np.eye(2).tobytes()).hexdigest()
    True
    >>> digest("tanh") == hashlib.sha256(b"tanh").hexdigest(), digest(np.eye(2)) == digest(2 * np.eye(2))
    (True, False)
    """
    if isinstance(data, str):
        data = data.encode()
    elif isinstance(data, np.ndarray):
        a = np.ascontiguousarray(data)
        data = "|".join(map(repr, a.ravel())).encode() if a.dtype == object else a.data
    return hashlib.sha256(data).hexdigest()


def content_key(*args) -> tuple:
    r"""The cache key of ``args``: each numpy array replaced by ``(shape, dtype, digest)`` (:func:`digest`),
    lists and tuples by tuples of their keys, dicts by their sorted items; anything else as it is (hashable).

    Examples
    --------
    >>> content_key(np.eye(2), 3) == content_key(np.eye(2), 3), content_key(np.eye(2)) == content_key(np.eye(2, dtype=np.float32))
    (True, False)
    >>> content_key(np.zeros(4)) == content_key(np.zeros((2, 2)))
    False
    """
    return tuple(_part(a) for a in args)


def _part(a):
    if isinstance(a, np.ndarray):
        return ("array", a.shape, a.dtype.str, digest(a))
    if isinstance(a, (list, tuple)):
        return tuple(_part(x) for x in a)
    if isinstance(a, dict):
        return tuple(sorted((k, _part(v)) for k, v in a.items()))
    return a


class _Keyed:
    """A content key, hashed and compared by the key alone, carrying what computes its value (dropped once
    computed, so that an entry keeps no argument alive)."""

    __slots__ = ("key", "hash", "make")

    def __init__(self, key, make):
        self.key, self.hash, self.make = key, hash(key), make

    def __hash__(self):
        return self.hash

    def __eq__(self, other):
        return self.key == other.key


_REGISTRY: dict = {}   # name → Memo: the registry itself (not a cache)


class Memo:
    r"""A named, bounded, least-recently-used cache keyed by content (module docstring).

    Parameters
    ----------
    name : str
        Its name in :func:`registry` (``"module.what"``); a second Memo of that name replaces the first
        (a reloaded module).
    size : int
        The most entries kept; the least recently used one goes first.

    Examples
    --------
    >>> calls = []
    >>> squares = Memo("doc.squares", 2)
    >>> def square(a):
    ...     calls.append(1)
    ...     return a * a
    >>> a = np.arange(3.0)
    >>> squares.get((a,), lambda: square(a)).tolist(), squares.get((a.copy(),), lambda: square(a)).tolist()
    ([0.0, 1.0, 4.0], [0.0, 1.0, 4.0])
    >>> len(calls), squares.info().currsize, "doc.squares" in registry()
    (1, 1, True)
    >>> squares.clear(); squares.info().currsize
    0
    """

    def __init__(self, name: str, size: int):
        self.name, self.size = name, int(size)
        self._cached = lru_cache(maxsize=self.size)(self._compute)
        _REGISTRY[name] = self

    @staticmethod
    def _compute(keyed):
        value = keyed.make()
        keyed.make = None
        return value

    def get(self, args: tuple, make):
        """The value of the key :func:`content_key` ``(*args)``: the cached one, or ``make()`` (then kept)."""
        return self._cached(_Keyed(content_key(*args), make))

    def clear(self) -> None:
        """Empty this cache."""
        self._cached.cache_clear()

    def info(self):
        """hits, misses, maxsize, currsize (:func:`functools.lru_cache`'s ``cache_info``)."""
        return self._cached.cache_info()

    def __repr__(self):
        i = self.info()
        return f"Memo({self.name!r}, size={self.size}: {i.currsize} entries, {i.hits} hits, {i.misses} misses)"


def memoize(name: str, size: int):
    r"""Decorator: a function whose value depends on the content of its arguments, cached in a :class:`Memo`
    (``func.memo``) keyed by ``content_key(*args, kwargs)``.

    Examples
    --------
    >>> @memoize("doc.trace", 4)
    ... def trace(W):
    ...     return float(np.trace(W))
    >>> trace(np.eye(3)), trace(np.eye(3)), trace.memo.info().misses
    (3.0, 3.0, 1)
    """
    def wrap(func):
        memo = Memo(name, size)

        @wraps(func)
        def cached(*args, **kwargs):
            return memo.get((args, kwargs), lambda: func(*args, **kwargs))

        cached.memo = memo
        return cached

    return wrap


def registry() -> dict:
    r"""Every :class:`Memo` of the modules imported so far, by name.

    Examples
    --------
    >>> isinstance(registry(), dict) and all(isinstance(m, Memo) for m in registry().values())
    True
    """
    return dict(_REGISTRY)


def clear_all() -> None:
    r"""Empty every cache of :func:`registry` (tests: a computation from scratch).

    Examples
    --------
    >>> clear_all()
    >>> sum(m.info().currsize for m in registry().values())
    0
    """
    for memo in _REGISTRY.values():
        memo.clear()
