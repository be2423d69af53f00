"""Writers of the data package: :func:`write_jsonl` (plain, gzip or zstd JSONL cut into
independent members/frames, so that the sources in ``data/sources.py`` resume a
compressed file in O(frame))."""
from __future__ import annotations

import json
import os
import zlib
from typing import Any, Iterable, List

from .._durable import atomic_replace
from .._intarg import as_int
from .readers import _compression, _zstd

__all__ = ["write_jsonl"]


def write_jsonl(path: str, records: Iterable[Any], frame_bytes: int = 1 << 20, level: int = 3) -> None:
    """Writes records (dicts, or str lines written verbatim) as JSONL, plain,
    gzip or zstd by suffix.  Compressed output is cut into independent gzip
    members / zstd frames of about ``frame_bytes`` uncompressed bytes so that a
    resume never decompresses more than one of them.

    The file is written under ``path + ".tmp"`` and renamed at the end: on any
    error (a record that is not JSON-serialisable or not UTF-8, a full disk)
    the temporary file is removed and an existing ``path`` is left as it was."""
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise TypeError(f"path must be a str or PathLike, got {type(path).__name__}")
    if isinstance(records, (str, bytes)) or not hasattr(records, "__iter__"):
        raise TypeError(f"records must be an iterable of dicts or str lines, got {type(records).__name__}")
    if as_int(frame_bytes) is None:  # int, numpy integer (bool refused)
        raise TypeError(f"frame_bytes must be an int, got {type(frame_bytes).__name__}")
    frame_bytes = as_int(frame_bytes)
    if frame_bytes < 1:
        raise ValueError(f"frame_bytes must be >= 1, got {frame_bytes}")
    if as_int(level) is None:
        raise TypeError(f"level must be an int, got {type(level).__name__}")
    level = as_int(level)
    path = os.fspath(path)
    comp = _compression(path)
    if comp == "gzip" and not -1 <= level <= 9:
        raise ValueError(f"level must be in [-1, 9] for gzip, got {level}")
    if comp == "zstd" and not -(1 << 17) <= level <= 22:
        raise ValueError(f"level must be in [-131072, 22] for zstd, got {level}")
    try:
        with atomic_replace(path, tmp=path + ".tmp") as tmp:  # fsync, rename, fsync folder; no tmp left
            _write_jsonl_to(tmp, comp, records, frame_bytes, level)
    except OSError as e:
        if e.filename is None:  # a failed write() does not say which file
            raise OSError(e.errno, f"write_jsonl: {e.strerror or e}", path) from e
        raise


def _write_jsonl_to(tmp: str, comp: str, records: Iterable[Any], frame_bytes: int, level: int) -> None:
    with open(tmp, "wb") as f:
        pending: List[bytes] = []
        size = 0

        def flush() -> None:
            nonlocal pending, size
            if not pending:
                return
            data = b"".join(pending)
            if comp == "gzip":
                c = zlib.compressobj(level, zlib.DEFLATED, 31)
                f.write(c.compress(data) + c.flush())
            elif comp == "zstd":
                f.write(_zstd().ZstdCompressor(level=level).compress(data))
            else:
                f.write(data)
            pending, size = [], 0

        for i, r in enumerate(records):
            try:
                line = (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)).encode("utf-8") + b"\n"
            except TypeError as e:  # not JSON-serialisable
                raise TypeError(f"records[{i}] cannot be written as a JSON line: {e}") from None
            except ValueError as e:  # UnicodeEncodeError: a lone surrogate; a circular reference
                raise ValueError(f"records[{i}] cannot be written as a UTF-8 JSON line: {e}") from None
            pending.append(line)
            size += len(line)
            if size >= frame_bytes:
                flush()
        flush()
