"""Atomic file output and guarded file input (base layer).

Output: every file symattn writes appears whole or not at all. Input (:func:`read_regular`): only regular
files are read, opened without blocking, so a FIFO, a device or a folder given as a data file is refused
at once instead of hanging; :func:`check_inside` refuses a recorded path outside the working folder.

A file is written to a temporary name in the same folder and renamed onto its final name with
:func:`os.replace`, which is atomic on POSIX and Windows. An interrupted run (Ctrl-C, ``kill``)
therefore leaves either the previous file or none, never a truncated one.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from .errors import ParameterError

__all__ = ["atomic_path", "write_text", "write_bytes", "check_output_dir", "remove_stale_parts", "PART_RE",
           "read_regular", "check_inside", "MAX_READ_BYTES", "alive"]

#: the largest data file read (weights, signals): 2 GiB
MAX_READ_BYTES = 2 * 1024**3


def read_regular(path, name: str = "file", max_bytes: int = MAX_READ_BYTES) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``max_bytes`` bytes.

    The file is opened with ``O_NONBLOCK`` and checked with ``fstat`` before anything is read: a FIFO, a
    socket, a device or a folder is refused (opening a FIFO for reading would otherwise wait for a writer
    for ever), and so is a file larger than the limit.

    Raises
    ------
    ParameterError
        ``name``, when the path is missing, unreadable, not a regular file or too large.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "w.bin"
    >>> _ = p.write_bytes(b"abc")
    >>> read_regular(p)
    b'abc'
    >>> read_regular(p.parent)
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid file=...: allowed a regular file (this is a folder)
    """
    import stat

    path = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ParameterError(name, path, "a readable regular file", hint=exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode)
                    else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a plain file")
            raise ParameterError(name, path, f"a regular file (this is {kind})")
        if st.st_size > max_bytes:
            raise ParameterError(name, path, f"a file of at most {max_bytes} bytes (this one has {st.st_size})")
        chunks = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                break
            chunks.append(b)
        return b"".join(chunks)
    except OSError as exc:
        raise ParameterError(name, path, "a readable regular file", hint=exc.strerror or str(exc)) from None
    finally:
        os.close(fd)


def check_inside(path, name: str = "path", root=None) -> Path:
    """``path`` resolved (links followed), which must lie inside ``root`` (default: the working folder).

    For paths read from records (a stored layer's ``{"path", "sha256"}``): reading or even hashing a file
    elsewhere would tell the record's author whether it exists.

    Raises
    ------
    ParameterError
        ``name``, for a path outside ``root``.

    Examples
    --------
    >>> check_inside("/etc/passwd", "weights", root="/tmp")
    Traceback (most recent call last):
    ...
    symattn.errors.ParameterError: invalid weights='/etc/passwd': allowed a path inside /tmp (a recorded reference outside the working folder is read only when given explicitly)
    """
    base = Path(root if root is not None else os.getcwd()).resolve()
    full = (base / Path(path)).resolve()
    if full != base and base not in full.parents:
        raise ParameterError(name, str(path), f"a path inside {base} (a recorded reference outside the working "
                                              "folder is read only when given explicitly)")
    return full


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _umask()


@contextlib.contextmanager
def atomic_path(path):
    """Yield a temporary path beside ``path``; on success rename it onto ``path``, else delete it.

    The temporary name is ``.<name>.<pid>-<random>.part<suffix>``: hidden, marked as partial, and
    carrying the id of the writing process, so that :func:`remove_stale_parts` can delete what a
    killed process (``kill -9``: no clean-up runs) left behind without touching live writers.

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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}-", suffix=".part" + path.suffix, dir=path.parent)
    try:  # mkstemp creates 0600: give the file the mode a plain open() would (or that of the file replaced)
        os.fchmod(fd, path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_UMASK)
    except OSError:
        pass
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


def write_bytes(path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (:func:`atomic_path`); returns the path.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> write_bytes(pathlib.Path(tempfile.mkdtemp()) / "b.bin", b"whole").read_bytes()
    b'whole'
    """
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return path


#: The name of a temporary file of :func:`atomic_path` (group 1: the writer's process id).
PART_RE = re.compile(r"^\..+\.(\d+)-[^.]*\.part(\.[^.]*)?$")


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (this process: True; another user's, or when that cannot be told: True),
    so that the temporary files of a live writer are kept.

    Examples
    --------
    >>> alive(os.getpid())
    True
    """
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or cannot tell: keep its file
    return True


def remove_stale_parts(folder) -> list:
    """Delete the temporary files of :func:`atomic_path` in ``folder`` whose writer is no longer alive.

    A process killed while writing (SIGKILL, power loss) leaves its ``.<name>.<pid>-….part…``
    file; the final name was never touched. Returns the paths removed.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / ".fig.png.999999999-abc.part.png").write_bytes(b"half")   # no such process
    >>> [p.name for p in remove_stale_parts(d)], list(d.iterdir())
    (['.fig.png.999999999-abc.part.png'], [])
    """
    folder = Path(folder)
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = PART_RE.match(entry.name)
        if m and not alive(int(m.group(1))) and entry.is_file():
            with contextlib.suppress(OSError):
                entry.unlink()
                removed.append(entry)
    return removed


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
