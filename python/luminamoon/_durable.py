"""Durable, atomic file replacement: the package's one copy of "temporary file +
fsync + rename + directory fsync" (the C core's own files go through
``core/src/durable.c``, which does the same in C).

* :func:`atomic_write` — put ``bytes`` at a path;
* :func:`atomic_replace` — a context manager for writers that write a file by
  path or by file object (parquet, gzip, a plot): it hands out the temporary
  path and does the rest when the block ends;
* :func:`fsync_dir` — make a create, rename or unlink in a folder durable.

A reader of ``path`` sees the old file or the whole new one, never a part; when
the write fails (a full disk, a read-only folder, Ctrl-C) the temporary file is
removed and ``path`` is left as it was.
"""
from __future__ import annotations

import contextlib
import os
from typing import Iterator, Optional

__all__ = ["fsync_dir", "atomic_write", "atomic_replace"]


def _fsync(path: str, flags: int = 0) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """fsync the folder ``path`` (so that a file created, renamed or removed in it stays so after a crash)."""
    _fsync(path or ".", os.O_DIRECTORY)


@contextlib.contextmanager
def atomic_replace(path: str, *, tmp: Optional[str] = None, durable: bool = True) -> Iterator[str]:
    """Yields the temporary path to write the new content of ``path`` to (default
    ``"<path>.<pid>.tmp"``, in the same folder; pass ``tmp`` when the writer needs a
    particular name, e.g. a suffix that selects the format).  When the block ends
    normally the file is renamed over ``path`` — with ``durable`` first fsynced, and
    the folder fsynced after the rename.  When the block (or the rename) raises, the
    temporary file is removed and the exception propagates unchanged.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "a.txt")
    >>> with atomic_replace(p) as t:
    ...     _ = open(t, "w").write("new")
    >>> open(p).read(), os.listdir(os.path.dirname(p))
    ('new', ['a.txt'])
    """
    path = os.fspath(path)
    tmp = f"{path}.{os.getpid()}.tmp" if tmp is None else os.fspath(tmp)
    try:
        yield tmp
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
        if durable:
            fsync_dir(os.path.dirname(path))
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def atomic_write(path: str, data: bytes, *, durable: bool = True) -> None:
    """Replace the file ``path`` by ``data`` atomically (and durably: see :func:`atomic_replace`).
    An ``OSError`` is re-raised naming ``path``: ``OSError(errno, "writing <path>: ...", path)``."""
    try:
        with atomic_replace(path, durable=durable) as tmp:
            with open(tmp, "wb") as f:
                f.write(data)
    except OSError as e:
        raise OSError(e.errno, f"writing {path}: {e.strerror or e}", path) from e
