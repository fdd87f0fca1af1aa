"""Atomic file output (base layer): every file symattn writes appears whole or not at all.

A file is written to a temporary name in the same folder and renamed onto its final name with
:func:`os.replace`, which is atomic on POSIX and Windows. An interrupted run (Ctrl-C, ``kill``)
therefore leaves either the previous file or none, never a truncated one.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from .errors import ParameterError

__all__ = ["atomic_path", "write_text", "check_output_dir"]


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, else delete it.

    Parameters
    ----------
    path : str or pathlib.Path
        The final file name. Its folder must exist.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> with atomic_path(d / "a.txt") as tmp:
    ...     _ = tmp.write_text("whole")
    >>> (d / "a.txt").read_text(), sorted(p.name for p in d.iterdir())
    ('whole', ['a.txt'])
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part" + path.suffix, dir=path.parent)
    os.close(fd)
    tmp = Path(tmp)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (:func:`atomic_path`); returns the path.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = write_text(pathlib.Path(tempfile.mkdtemp()) / "b.json", "{}")
    >>> p.read_text()
    '{}'
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return path


def check_output_dir(out, name: str = "out") -> Path:
    """Create the output folder ``out`` (and its parents) and check that it is writable, before any work.

    Raises
    ------
    ParameterError
        When ``out`` is an existing file, cannot be created, or is not writable.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> check_output_dir(pathlib.Path(tempfile.mkdtemp()) / "new" / "dir").is_dir()
    True
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ParameterError(name, str(out), "a folder (this path is an existing file)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".symattn-write-test.", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ParameterError(name, str(out), "a folder that can be created and written to",
                             hint=exc.strerror or str(exc)) from None
    return out
