"""Shared machinery of the pipelines: the background producer thread feeding a
bounded queue, and durable (atomic) small-file writes.

A producer thread runs ``Prefetcher.pump`` over an iterator of items; the
consumer calls ``Prefetcher.get``, which returns an item, ``END`` when the
iterator is exhausted (or the prefetcher was stopped), and re-raises in the
consumer any exception the iterator raised.  ``stop`` unblocks and joins the
thread promptly (the queue is bounded, so a producer may be waiting on it).
"""
from __future__ import annotations

import os
import threading
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, Optional, Tuple

from .._durable import atomic_write, fsync_dir  # re-exported: their home is luminamoon/_durable.py
from .._intarg import as_int

__all__ = ["END", "Prefetcher", "fsync_dir", "atomic_write", "DEFAULT_MAX_PREFETCH_BYTES", "check_max_bytes",
           "empty_prefetch_stats", "tensor_memory", "lock_state_dir", "unlock_state_dir", "LOCK_NAME"]

#: The lock file of a state folder (one process, or one job of ranks, at a time: a second run on the same state folder is refused).
LOCK_NAME = "lock"

DEFAULT_MAX_PREFETCH_BYTES = 256 << 20

END = object()


def check_max_bytes(value: Any, name: str = "max_prefetch_bytes") -> Optional[int]:
    """``value`` checked (a positive int, a numpy integer, or None), as a plain int or None."""
    if value is None:
        return None
    n = as_int(value)
    if n is None or n < 1:
        raise ValueError(f"{name} must be a positive int (bytes) or None, got {value!r}")
    return n


def empty_prefetch_stats(depth: int, max_bytes: Optional[int]) -> Dict[str, Any]:
    return {"queued_batches": 0, "queued_bytes": 0, "peak_batches": 0, "peak_bytes": 0,
            "max_batches": depth, "max_bytes": max_bytes, "producer_waits": 0}


def tensor_memory(x: Any) -> int:
    """Bytes held by a torch.Tensor's storage or a StringTensor's storages (0 for anything else)."""
    if x is None:
        return 0
    n = getattr(x, "storage_nbytes", None)
    if isinstance(n, int):
        return n
    if hasattr(x, "untyped_storage"):
        return int(x.untyped_storage().nbytes())
    return 0


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Prefetcher:
    """Run ``produce()`` (an iterable factory) on a daemon thread, ``depth`` items ahead.

    Memory bound: with ``max_bytes`` (and ``sizeof(item) -> int``), the producer
    also waits while the queued items hold ``max_bytes`` or more, and an item is
    queued only if it fits beside the others.  One item is always admitted into
    an empty queue (a batch larger than the bound cannot deadlock the pipeline),
    so the queue holds at most ``max(max_bytes, one item)`` bytes; the producer
    holds the one item it is building besides.  ``stats()`` reports it.
    """

    def __init__(self, produce: Callable[[], Iterable[Any]], depth: int, name: str = "luminamoon-prefetch",
                 max_bytes: Optional[int] = None, sizeof: Optional[Callable[[Any], int]] = None):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth!r}")
        self._produce = produce
        self._depth = depth
        self._max_bytes = max_bytes if max_bytes else None
        self._sizeof = sizeof if sizeof is not None else (lambda item: 0)
        self._cv = threading.Condition()
        self._items: Deque[Tuple[Any, int]] = deque()
        self._bytes = 0
        self._peak_bytes = 0
        self._peak_items = 0
        self._waits = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self._thread.start()

    def _full(self, size: int) -> bool:
        if len(self._items) >= self._depth:
            return True
        return (self._max_bytes is not None and bool(self._items)
                and self._bytes + size > self._max_bytes)

    def _put(self, item, size: int) -> bool:
        with self._cv:
            waited = False
            while not self._stop.is_set() and self._full(size):
                if not waited:
                    self._waits += 1
                    waited = True
                self._cv.wait(0.1)
            if self._stop.is_set():
                return False
            self._items.append((item, size))
            self._bytes += size
            self._peak_bytes = max(self._peak_bytes, self._bytes)
            self._peak_items = max(self._peak_items, len(self._items))
            self._cv.notify_all()
            return True

    def _pump(self) -> None:
        try:
            for item in self._produce():
                if not self._put(item, int(self._sizeof(item))):
                    return
            last = END
        except BaseException as e:  # re-raised in the consumer
            last = _Failure(e)
        self._put(last, 0)

    def get(self):
        """The next item, or END; raises what the producer raised."""
        with self._cv:
            while not self._items:
                if self._stop.is_set():
                    return END
                if not self._thread.is_alive() and not self._items:
                    raise RuntimeError("the prefetch thread ended without a result")
                self._cv.wait(0.1)
            item, size = self._items.popleft()
            self._bytes -= size
            self._cv.notify_all()
        if isinstance(item, _Failure):
            raise item.exc
        return item

    def qsize(self) -> int:
        with self._cv:
            return len(self._items)

    def stats(self) -> Dict[str, Any]:
        """Queued items and bytes now, their peaks, the bound, and how often the producer waited."""
        with self._cv:
            return {"queued_batches": len(self._items), "queued_bytes": self._bytes,
                    "peak_batches": self._peak_items, "peak_bytes": self._peak_bytes,
                    "max_batches": self._depth, "max_bytes": self._max_bytes, "producer_waits": self._waits}

    def stop(self) -> None:
        """Stop the producer (its current item finishes), drop what is queued and join it."""
        self._stop.set()
        with self._cv:
            self._items.clear()
            self._bytes = 0
            self._cv.notify_all()
        if threading.current_thread() is not self._thread:  # a finalizer run by the producer itself
            self._thread.join()


def lock_state_dir(state_dir: str) -> int:
    """Take the exclusive lock of ``state_dir`` (``fcntl.flock`` on ``state_dir/lock``, which then
    holds this process id); returns the file descriptor to pass to ``unlock_state_dir``.  The
    lock is released when the descriptor is closed, so also when the process dies.  Raises
    OSError (EBUSY) naming the process that holds it.
    """
    import errno
    import fcntl

    path = os.path.join(state_dir, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise OSError(e.errno, f"cannot open the lock file {path!r} of state_dir: {e.strerror}", path) from e
    _HELD_LOCKS[fd] = os.getpid()  # before the flock: a fork from now on closes the child's copy
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        try:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            holder = ""
        _HELD_LOCKS.pop(fd, None)
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise OSError(e.errno, f"cannot lock state_dir {state_dir!r}: {e.strerror}", path) from e
        raise OSError(errno.EBUSY, f"state_dir {state_dir!r} is in use by process {holder or '(unknown)'}: "
                      "one pipeline (or one job of ranks) at a time; close the other one, or use another "
                      "state_dir", path) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # a read-only folder: locked all the same, the holder just goes unnamed
    return fd


def unlock_state_dir(fd: int) -> None:
    """Release a lock from ``lock_state_dir`` (idempotent for a fd of -1).  In a child forked
    from the process that took it the descriptor is already closed (``_HELD_LOCKS``): nothing to
    do, and the number may now be another file's."""
    if fd is not None and fd >= 0 and _HELD_LOCKS.pop(fd, None) == os.getpid():
        try:
            os.close(fd)
        except OSError:
            pass


# review s35: the lock is an flock, which belongs to the open file, and a forked child (a
# DataLoader worker, a multiprocessing.Pool worker, any os.fork) shares that open file: after the
# parent closed its pipeline, its next ResumablePipeline / DistributedPipeline on the same
# state_dir was refused ("in use by process <its own pid>") for as long as the child lived.  The
# child closes its copies at once: the lock stays the parent's alone.
_HELD_LOCKS: Dict[int, int] = {}  # the descriptors of lock_state_dir -> the process that took them


def _locks_after_fork_in_child() -> None:
    for fd in list(_HELD_LOCKS):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD_LOCKS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_locks_after_fork_in_child)
