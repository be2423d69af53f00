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
import queue
import threading
from typing import Any, Callable, Iterable

__all__ = ["END", "Prefetcher", "fsync_dir", "atomic_write"]

END = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Prefetcher:
    """Run ``produce()`` (an iterable factory) on a daemon thread, ``depth`` items ahead."""

    def __init__(self, produce: Callable[[], Iterable[Any]], depth: int, name: str = "luminamoon-prefetch"):
        self._produce = produce
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self._thread.start()

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _pump(self) -> None:
        try:
            for item in self._produce():
                if not self._put(item):
                    return
            last = END
        except BaseException as e:  # re-raised in the consumer
            last = _Failure(e)
        self._put(last)

    def get(self):
        """The next item, or END; raises what the producer raised."""
        while True:
            try:
                item = self._queue.get(timeout=0.1)
            except queue.Empty:
                if self._stop.is_set():
                    return END
                if not self._thread.is_alive() and self._queue.empty():
                    raise RuntimeError("the prefetch thread ended without a result")
                continue
            if isinstance(item, _Failure):
                raise item.exc
            return item

    def qsize(self) -> int:
        return self._queue.qsize()

    def stop(self) -> None:
        """Stop the producer (its current item finishes) and join it."""
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a producer waiting on a full queue
                self._queue.get_nowait()
            except queue.Empty:
                pass
            self._thread.join(timeout=0.05)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """tmp + fsync + rename + directory fsync: the file holds the old or the new bytes, never a mix."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")
