"""StateTracker: the crash-safe, two-slot checkpoint file whose format core/include/luminamoon/state.h describes.

A 128-byte file with two 64-byte slots, each with a sequence number, the
coordinate (epoch, batch index, sample index, source position, shard), the
dedup WAL's LSN and a CRC32C.  ``commit`` writes the slot that does not hold
the newest state and syncs it, so a torn write always leaves one valid slot.

Example:
    >>> import tempfile, os
    >>> from luminamoon import StateTracker
    >>> with StateTracker(os.path.join(tempfile.mkdtemp(), "state")) as st:
    ...     st.load() is None, st.commit(epoch=0, batch_index=3, wal_lsn=10), st.load()[0]["batch_index"]
    (True, 1, 3)
"""
from __future__ import annotations

import errno
import fcntl
import os
import weakref
from typing import Optional, Union

from . import _C

__all__ = ["StateTracker", "StateCorruptError"]

#: No valid slot survives but the file is not fresh (a commit was made): never
#: treated as "start from zero"; call ``reset()`` to start over explicitly.  An OSError.
StateCorruptError = _C.StateCorruptError

COORD_FIELDS = ("epoch", "batch_index", "sample_index", "source_pos", "source_pos2", "shard", "wal_lsn")


def _trackers_after_fork_in_child() -> None:
    # a forked child must not keep the parent's lock alive (the lock belongs to the open file the
    # two processes share): after the parent closes, its next StateTracker on the file would be
    # refused for as long as the child lives
    for t in list(_TRACKERS):
        fd = t._unlock.detach()
        if fd is not None:
            try:
                os.close(fd[2][0])
            except OSError:
                pass


_TRACKERS: "weakref.WeakSet" = weakref.WeakSet()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_trackers_after_fork_in_child)


class StateTracker:
    """Open (or create, durably) the state file at ``path``.

    ``load()`` -> ``(coord: dict, sequence: int)`` or None when nothing was
    ever committed; raises :class:`StateCorruptError` when no valid slot
    survives a commit, ``FormatVersionError`` for another format version.
    ``commit(epoch=, batch_index=, sample_index=, source_pos=, source_pos2=,
    shard=, wal_lsn=)`` -> the new sequence number, durable on return.

    One StateTracker per file at a time (this process or another): a second one raises
    OSError(EBUSY) until the first is closed.  In a process forked from the one that opened it,
    ``commit`` and ``reset`` raise ValueError (the file is the parent's).
    """

    _obj = None

    def __init__(self, path: Union[str, os.PathLike]):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"StateTracker: path must be a str or PathLike, got {type(path).__name__}")
        self._obj = _C.StateTracker(path)
        # review s34: two trackers on one file (two objects, or two processes) both committed from
        # their own view of the slots: each commit returned as durable, and the second overwrote the
        # first's slot (A's commit of batch 10 was lost, load() returned B's batch 5).  A commit picks
        # its slot from what this handle last read, so one writer per file is the rule, as for the
        # dedup WAL: an exclusive flock on a descriptor of our own, released by close() (or GC/exit).
        self._pid = os.getpid()
        try:
            fd = os.open(self._obj.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._obj.close()
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            self._obj.close()
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise OSError(errno.EBUSY, f"StateTracker: the state file {self._obj.path} is in use (another open "
                          "StateTracker, in this or another process, holds it); close that one first",
                          self._obj.path) from None
        self._unlock = weakref.finalize(self, os.close, fd)
        _TRACKERS.add(self)

    @property
    def path(self) -> str:
        return self._obj.path

    @property
    def closed(self) -> bool:
        return self._obj.closed

    def load(self) -> Optional[tuple]:
        """The newest valid (coord, sequence), or None if never committed."""
        return self._obj.load()

    def commit(self, *, epoch: int = 0, batch_index: int = 0, sample_index: int = 0, source_pos: int = 0,
               source_pos2: int = 0, shard: int = 0, wal_lsn: int = 0) -> int:
        """Make the coordinate durable; returns its sequence number."""
        self._check_writer("commit")
        return self._obj.commit(epoch=epoch, batch_index=batch_index, sample_index=sample_index,
                                source_pos=source_pos, source_pos2=source_pos2, shard=shard, wal_lsn=wal_lsn)

    def reset(self) -> None:
        """Explicit fresh start: zero both slots (load() then returns None)."""
        self._check_writer("reset")
        self._obj.reset()

    def inspect(self) -> dict:
        """{'a': {'status': 'valid'|'empty'|'corrupt'|'version'|'io_error', 'sequence': int}, 'b': {...}}."""
        return self._obj.inspect()

    def _check_writer(self, what: str) -> None:
        if self._pid != os.getpid() and not self._obj.closed:
            raise ValueError(f"StateTracker.{what}: this tracker of {self._obj.path} belongs to process "
                             f"{self._pid}; this process is a child forked from it and must not write the "
                             "parent's state file")

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._obj.close()
        self._unlock()

    def __enter__(self) -> "StateTracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._obj is None:  # its constructor raised
            return "StateTracker(<not created>)"
        return f"StateTracker({self.path!r}{', closed' if self.closed else ''})"
