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

import os
from typing import Optional, Union

from . import _C

__all__ = ["StateTracker", "StateCorruptError"]

#: No valid slot survives but the file is not fresh (a commit was made): never
#: treated as "start from zero"; call ``reset()`` to start over explicitly.  An OSError.
StateCorruptError = _C.StateCorruptError

COORD_FIELDS = ("epoch", "batch_index", "sample_index", "source_pos", "source_pos2", "shard", "wal_lsn")


class StateTracker:
    """Open (or create, durably) the state file at ``path``.

    ``load()`` -> ``(coord: dict, sequence: int)`` or None when nothing was
    ever committed; raises :class:`StateCorruptError` when no valid slot
    survives a commit, ``FormatVersionError`` for another format version.
    ``commit(epoch=, batch_index=, sample_index=, source_pos=, source_pos2=,
    shard=, wal_lsn=)`` -> the new sequence number, durable on return.
    """

    def __init__(self, path: Union[str, os.PathLike]):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"StateTracker: path must be a str or PathLike, got {type(path).__name__}")
        self._obj = _C.StateTracker(path)

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
        return self._obj.commit(epoch=epoch, batch_index=batch_index, sample_index=sample_index,
                                source_pos=source_pos, source_pos2=source_pos2, shard=shard, wal_lsn=wal_lsn)

    def reset(self) -> None:
        """Explicit fresh start: zero both slots (load() then returns None)."""
        self._obj.reset()

    def inspect(self) -> dict:
        """{'a': {'status': 'valid'|'empty'|'corrupt'|'version'|'io_error', 'sequence': int}, 'b': {...}}."""
        return self._obj.inspect()

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._obj.close()

    def __enter__(self) -> "StateTracker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StateTracker({self.path!r}{', closed' if self.closed else ''})"
