"""Resumable data sources.

Every source is an iterable of records (dicts holding at least the text field)
with a position protocol:

* ``source.position()`` -- a small JSON-serialisable dict: the position *after
  the last record this source yielded*.
* ``source.seek(position)`` or ``Source(..., position=position)`` -- the next
  iteration starts exactly after that record.  ``iter(source)`` always continues
  from the current position (a fresh source starts at the beginning).
* ``source.skipped`` -- records dropped because of ``on_error="skip"``.

Bad input: a missing file raises ``FileNotFoundError`` naming the path; a
malformed JSON line, a missing/non-string text field or non-UTF-8 bytes raise
``ValueError`` naming the file and line (row for Parquet) unless
``on_error="skip"``.

Size limit: ``max_record_bytes=N`` (every source; default None) refuses a record
larger than N bytes the same way (ValueError naming the file and line, or
skipped and counted with ``on_error="skip"``).  The file sources measure the
raw line and never hold more than N bytes of it: a multi-gigabyte line is
streamed past, not read into memory.

What a resume costs (``bench/bench_source_resume.py`` measures it):

* plain JSONL / text: a ``seek`` to the byte offset of the next line -- O(1).
* Parquet: open the file, read one row group, slice -- O(row group).
* gzip: with ``indexed_gzip`` installed (default when importable) a zran-style
  index of inflate checkpoints (one every ``gzip_spacing`` bytes, 32 KiB window
  each) is built once per file (by the first read that starts inside it: a read from
  the start inflates the file as a stream), cached under ``index_dir`` (default
  ``$LUMINAMOON_INDEX_DIR`` or ``~/.cache/luminamoon/gzindex``, keyed by path,
  size and mtime), and a resume inflates at most ``gzip_spacing`` bytes -- O(1)
  in the position.  Building the index costs two extra decompression passes the
  first time a file is opened: one checks the file whole (every member complete,
  nothing but zero padding after the last: a truncated or corrupt file is an
  error, as with the reader below, never read as complete), one builds the index.
  Without ``indexed_gzip`` the reader resumes at
  the start of the gzip *member* holding the position (multi-member files, e.g.
  written by :func:`write_jsonl`, resume in O(member)); a single-member file
  then costs O(position).
* zstd: resumes at the start of the zstd *frame* holding the position and
  decompresses at most one frame.  Files written by :func:`write_jsonl` with
  ``frame_bytes`` have bounded frames; a single-frame ``.zst`` (what the zstd CLI
  writes) costs O(position).  zstd keeps no checkpointable decoder state, so
  bounded frames are the honest way to O(1).
* :class:`IterableSource`: replays the iterable from a factory and skips N
  records -- O(N), by construction.

Columnar reading: ``iter_blocks(n)`` yields the same records ``n`` at a time as
``RecordBlock`` objects with the position after each block (see ``data/_blocks.py``):
``JsonlSource`` (text field in a StringTensor decoded by a C scanner, other fields
decoded lazily), ``ParquetSource`` (the text column from Arrow, the other columns kept
as Arrow) and ``TextSource(per="line")`` (lines split with numpy).  ``ResumablePipeline``,
``luminamoon run``, ``DistributedPipeline`` (JSONL) and the collate
(``collate.blocks(source, n)``) read that way.
A gzip file read from its start in blocks needs no index (it is inflated as a stream).

Sharding: ``rank``/``world_size`` split the files among ranks (file ``i`` goes to
rank ``i % world_size``) when there are at least ``world_size`` files, and the
records (record ``j`` of each file to rank ``j % world_size``) otherwise.
This module depends only on the standard library, pyarrow (Parquet) and,
optionally, ``zstandard``, ``indexed_gzip`` and ``datasets``.

The line readers (plain, gzip, zstd) are in ``data/readers.py``; :func:`write_jsonl` is in
``data/writers.py`` (and importable from here).
"""
from __future__ import annotations

import glob as _glob
import json
import os
import sys
import zlib
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from .._intarg import as_int
from ._blocks import jsonl_blocks, parquet_blocks, text_blocks
from .errors import UTF8_BOM, BadRecordError
from .readers import TooLong, _FramedReader, _IndexedGzipReader, _PlainReader, _compression
from .writers import write_jsonl  # noqa: F401  (re-exported: its old path)

__all__ = [
    "Source", "IterableSource", "JsonlSource", "TextSource", "ParquetSource",
    "HFIterableSource", "expand_paths", "write_jsonl", "BadRecordError",
]



PathsArg = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]


def _not_data_name(name: str) -> bool:
    """Names a folder or glob expansion passes over: hidden files (``.DS_Store``) and
    the ``_``-prefixed markers of Spark / Hive / Hadoop (``_SUCCESS``, ``_metadata``)."""
    return name.startswith((".", "_"))


def _glob_root(pattern: str) -> str:
    """The folder of a glob's fixed prefix: ``data/en/*.jsonl`` -> ``data/en``."""
    cut = min((pattern.index(ch) for ch in "*?[" if ch in pattern), default=len(pattern))
    return os.path.dirname(pattern[:cut]) or "."


def expand_input(item: str) -> Tuple[List[str], str, Dict[str, List[str]]]:
    """Expands one input: ``(files, root, skipped)``.

    An existing path is taken literally (``data[1].jsonl`` is a file name, not a
    pattern); a folder is read recursively (hive layouts such as
    ``year=2024/part-0.parquet`` included), in sorted order of the relative path;
    a pattern with ``*``, ``?`` or ``[`` expands sorted (``**`` recursive).  Hidden
    and ``_``-prefixed files (``.DS_Store``, ``_SUCCESS``) and folders found by the
    expansion are not read: ``skipped["not_data"]``; dangling symlinks:
    ``skipped["dangling_symlinks"]``.  ``root`` is the folder the files' ids are
    relative to: the folder given, the glob's fixed prefix, or a file's folder.
    Raises FileNotFoundError when nothing is left to read."""
    skipped: Dict[str, List[str]] = {"not_data": [], "dangling_symlinks": []}

    def keep(path: str) -> bool:
        if os.path.islink(path) and not os.path.exists(path):
            skipped["dangling_symlinks"].append(path)
            return False
        if _not_data_name(os.path.basename(path)) or not os.path.isfile(path):
            skipped["not_data"].append(path)
            return False
        return True

    if os.path.isdir(item):
        found = []
        for dirpath, dirs, files in os.walk(item):
            for d in list(dirs):
                if _not_data_name(d):
                    dirs.remove(d)
                    skipped["not_data"].append(os.path.join(dirpath, d) + os.sep)
            found += [os.path.join(dirpath, f) for f in files]
        found.sort(key=lambda f: os.path.relpath(f, item).split(os.sep))
        out = [f for f in found if keep(f)]
        if not out:
            raise FileNotFoundError(f"directory {item!r} holds no file to read" + _skip_note(skipped))
        return out, item, skipped
    if os.path.lexists(item):
        if not os.path.exists(item):
            raise FileNotFoundError(f"{item!r} is a dangling symlink (to {os.readlink(item)!r})")
        if not os.path.isfile(item):
            raise FileNotFoundError(f"{item!r} is not a regular file")
        return [item], os.path.dirname(item) or ".", skipped
    if any(ch in item for ch in "*?["):
        found = sorted(_glob.glob(item, recursive=True))
        out = [f for f in found if not os.path.isdir(f) and keep(f)]
        if not out:
            raise FileNotFoundError(f"no file matches {item!r}" + _skip_note(skipped))
        return out, _glob_root(item), skipped
    raise FileNotFoundError(f"no such file: {item!r}")


def _skip_note(skipped: Dict[str, List[str]]) -> str:
    n = sum(len(v) for v in skipped.values())
    return f" (passed over {n} hidden, marker or dangling entries)" if n else ""


def expand_paths(paths_or_glob: PathsArg) -> List[str]:
    """Deterministic file list: each glob expands sorted, a folder to its data
    files recursively (sorted by relative path; hidden and ``_``-prefixed entries
    and dangling symlinks passed over), an existing path is taken literally,
    explicit lists keep their order (see :func:`expand_input`).  Raises
    FileNotFoundError naming the first path or pattern that matches nothing."""
    if isinstance(paths_or_glob, (str, os.PathLike)):
        items = [paths_or_glob]
    elif isinstance(paths_or_glob, (list, tuple)):
        items = list(paths_or_glob)
    else:
        raise TypeError(f"paths_or_glob must be a path, a glob or a list of them, got {type(paths_or_glob).__name__}")
    if not items:
        raise ValueError("no paths given")
    out: List[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, (str, os.PathLike)):
            raise TypeError(f"paths_or_glob[{i}] must be a str or PathLike, got {type(item).__name__}")
        p = os.fspath(item)
        if not isinstance(p, str):
            raise TypeError(f"paths_or_glob[{i}] must be a str path, got {type(p).__name__}")
        out.extend(expand_input(p)[0])
    return out


# ---------------------------------------------------------------------------


class Source:
    """Base class: subclasses implement ``_records()`` (a generator that keeps
    ``self._pos`` equal to the position after the record it just yielded),
    ``position()`` and ``seek()``."""

    def __init__(self, on_error: str = "raise", rank: int = 0, world_size: int = 1,
                 max_record_bytes: Optional[int] = None):
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        # ints or numpy integers (bool refused), kept as plain ints: identity() is JSON, compared on resume
        if max_record_bytes is not None:
            if as_int(max_record_bytes) is None or as_int(max_record_bytes) < 1:
                raise ValueError(f"max_record_bytes must be a positive int or None, got {max_record_bytes!r}")
            max_record_bytes = as_int(max_record_bytes)
        self.max_record_bytes = max_record_bytes
        for name, v in (("rank", rank), ("world_size", world_size)):
            if as_int(v) is None:
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        rank, world_size = as_int(rank), as_int(world_size)
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        self.on_error = on_error
        self.rank, self.world_size = rank, world_size
        self.skipped = 0

    def __repr__(self) -> str:
        """What it reads and where it stands, e.g.
        ``JsonlSource(files=2 ['a.jsonl', 'b.jsonl.gz'], text_key='text', position={...})``."""
        parts = []
        paths = getattr(self, "paths", None)
        if isinstance(paths, list):
            shown = ", ".join(repr(p) for p in paths[:2]) + (", ..." if len(paths) > 2 else "")
            parts.append(f"files={len(paths)} [{shown}]")
        for k in ("text_key", "text_column", "per", "columns"):
            v = getattr(self, k, None)
            if v is not None:
                parts.append(f"{k}={v!r}")
        if self.world_size > 1:
            parts.append(f"rank={self.rank}, world_size={self.world_size}")
        if self.on_error != "raise":
            parts.append(f"on_error={self.on_error!r}, skipped={self.skipped}")
        if self.max_record_bytes is not None:
            parts.append(f"max_record_bytes={self.max_record_bytes}")
        try:
            parts.append(f"position={self.position()!r}")
        except Exception:  # a subclass that cannot say yet: the repr still works
            pass
        return f"{type(self).__name__}({', '.join(parts)})"

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return self._records()

    def _records(self) -> Iterator[Dict[str, Any]]:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must implement _records(); Source is the base class")

    def position(self) -> Dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must implement position(); Source is the base class")

    def seek(self, position: Dict[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must implement seek(); Source is the base class")

    def identity(self) -> Optional[Dict[str, Any]]:
        """What this source reads, by content, for "is a resume over the same input?"
        (JSON-serialisable), or None when it cannot be known: the base class, plain
        iterables (``IterableSource``) and datasets have no identity, so a resume over
        them cannot detect changed input.  File sources return their files'
        ``luminamoon.data.fingerprint.file_fingerprint`` (size, mtime, sampled SHA-256)
        and the settings that change which records they yield (not ``on_error`` nor
        ``max_record_bytes``: a resume may skip a bad record the first run stopped at)."""
        return None

    def _file_identity(self, **settings: Any) -> Dict[str, Any]:
        from .fingerprint import file_fingerprint

        return {"kind": type(self).__name__, "files": [file_fingerprint(p) for p in self.paths],
                "rank": self.rank, "world_size": self.world_size, **settings}

    def _bad(self, msg: str, cause: Optional[BaseException] = None) -> None:
        if self.on_error == "skip":
            self.skipped += 1
            return
        raise BadRecordError(msg) from cause

    def _too_big(self, text: str) -> Optional[int]:
        """The UTF-8 size of ``text`` if it exceeds max_record_bytes, else None."""
        lim = self.max_record_bytes
        if lim is None or len(text) * 4 <= lim:
            return None
        n = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        return n if n > lim else None

    def _refuse_big(self, where: str, nbytes: int) -> None:
        self._bad(f"{where}: record of {nbytes} bytes is larger than max_record_bytes={self.max_record_bytes}")

    def _check_kind(self, position: Dict[str, Any], kind: str) -> None:
        if not isinstance(position, dict) or position.get("kind") != kind:
            raise ValueError(f"not a {kind} position: {position!r}")

    @staticmethod
    def _position_int(position: Dict[str, Any], key: str, default: Optional[int] = 0) -> int:
        v = position.get(key, default)
        if isinstance(v, bool) or not isinstance(v, int):
            raise ValueError(f"position[{key!r}] must be an int, got {v!r}")
        if v < 0:
            raise ValueError(f"negative {key} in position {position!r}")
        return v


def _block_count(n: Any) -> Any:
    """``iter_blocks``' ``n``: a numpy integer as the plain int it holds; anything else as it is (the
    block readers check it and name it)."""
    i = as_int(n)
    return n if i is None else i


def _check_key(name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be str, got {type(value).__name__}")


def refuse_lone_surrogates(source: Any) -> None:
    """For a pipeline reading ``source``: a JSONL text holding a lone surrogate is a bad record of the
    source (file:line, skippable), not a batch the stages refuse (see JsonlSource._keep_lone_surrogates)."""
    if isinstance(source, JsonlSource):
        source._keep_lone_surrogates = False


def lone_surrogate_at(text: str) -> int:
    """The index of the first lone surrogate in ``text`` (a JSON ``\\uD800``-``\\uDFFF`` escape that is
    not half of a pair: how some tools write a byte that is not UTF-8), or -1 when there is none."""
    if text.isascii():
        return -1
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return -1


def sequence_key(seq: Any) -> Optional[Dict[str, Any]]:
    """A list / tuple / range of records, by content: its length and a CRC32 of up to 32 evenly
    spaced items (each as JSON; an item that is not JSON by its type name -- never ``repr()``, which
    may hold an address).  None for anything else (iterators, factories: no content to read before
    the stream) or when an item cannot be read."""
    from collections.abc import Sequence

    if not isinstance(seq, Sequence) or isinstance(seq, (str, bytes)):
        return None
    try:
        n = len(seq)
        crc = 0
        for i in sorted({(k * n) // 32 for k in range(32)} if n > 32 else range(n)):
            item = seq[i]
            try:
                raw = json.dumps(item, sort_keys=True, default=lambda o: type(o).__name__)
            except (TypeError, ValueError):
                raw = type(item).__name__
            crc = zlib.crc32(raw.encode("utf-8", "surrogatepass"), crc)
    except Exception:  # an unusual sequence: no key
        return None
    return {"in_memory_items": n, "sampled_crc32": crc}


class IterableSource(Source):
    """Any Python iterable.  Resuming replays the iterable from the beginning
    and skips the records already consumed (O(position)), so it needs a way to
    replay: pass a re-iterable object (list, range, a class with ``__iter__``)
    or a zero-argument factory returning a fresh iterator.  A one-shot iterator
    or generator object can be read once but not resumed: ``seek`` to a non-zero
    position and a second pass raise ValueError.  Items that are str become
    ``{"text": item}``; dicts are yielded as they are."""

    def __init__(self, iterable_or_factory: Union[Iterable[Any], Callable[[], Iterable[Any]]],
                 text_key: str = "text", position: Optional[Dict[str, Any]] = None, **kw: Any):
        if isinstance(iterable_or_factory, (str, bytes)) or not (callable(iterable_or_factory)
                                                                 or hasattr(iterable_or_factory, "__iter__")):
            raise TypeError(f"iterable_or_factory must be an iterable of records or a factory returning one, "
                            f"got {type(iterable_or_factory).__name__}")
        _check_replayable(iterable_or_factory, "iterable_or_factory")
        _check_key("text_key", text_key)
        super().__init__(**kw)
        self._src = iterable_or_factory
        self.text_key = text_key
        self._one_shot = not callable(iterable_or_factory) and iter(iterable_or_factory) is iterable_or_factory
        self._used = False
        self._consumed = 0
        self._live: Optional[list] = None  # [iterator, records it has consumed]
        if position is not None:
            self.seek(position)

    def _fresh(self) -> Iterator[Any]:
        if self._one_shot:
            if self._used:
                raise ValueError("IterableSource over a one-shot iterator cannot be replayed or resumed; "
                                 "pass a list, a re-iterable object or a factory (lambda: make_iter())")
            self._used = True
            return self._src  # type: ignore[return-value]
        it = self._src() if callable(self._src) else self._src
        return iter(it)

    def position(self) -> Dict[str, Any]:
        return {"kind": "iterable", "consumed": self._consumed}

    def identity(self) -> Optional[Dict[str, Any]]:
        """A list / tuple / range by content (``sequence_key``: its length and a CRC of 32 sampled
        items), so that a resume over another list is refused (it was accepted: the committed
        position and dedup table applied to other records).  None for an iterator or a factory."""
        key = sequence_key(self._src) if not callable(self._src) else None
        return None if key is None else {"kind": "IterableSource", "text_key": self.text_key, **key}

    def seek(self, position: Dict[str, Any]) -> None:
        self._check_kind(position, "iterable")
        n = self._position_int(position, "consumed", None)
        if self._one_shot and n != 0 and not (self._live is not None and self._live[1] == n):
            raise ValueError("IterableSource over a one-shot iterator cannot be resumed; pass a factory")
        self._consumed = n

    def _records(self) -> Iterator[Dict[str, Any]]:
        live = self._live
        if live is not None and live[1] == self._consumed:
            it = live[0]  # continue the iterator a previous pass left off (no replay)
        else:
            it = self._fresh()
            for i in range(self._consumed):  # replay and skip
                try:
                    next(it)
                except StopIteration:
                    self._live = None
                    return
        self._live = [it, self._consumed]
        while True:
            try:
                item = next(it)
            except StopIteration:
                self._live = None
                return
            idx = self._consumed
            self._consumed += 1
            self._live[1] = self._consumed
            if self.world_size > 1 and idx % self.world_size != self.rank:
                continue
            if isinstance(item, str) or isinstance(item, dict) and isinstance(item.get(self.text_key), str):
                big = self._too_big(item if isinstance(item, str) else item[self.text_key])
                if big is not None:
                    self._refuse_big(f"item {idx}", big)
                    continue
                yield {self.text_key: item} if isinstance(item, str) else item
            else:
                self._bad(f"item {idx}: expected str or a dict with a str {self.text_key!r}, got {type(item).__name__}")


class _FileSource(Source):
    """Shared logic of the line-oriented file sources (JSONL, text)."""

    kind = ""

    def __init__(self, paths_or_glob: PathsArg, position: Optional[Dict[str, Any]], index_dir: Optional[str],
                 gzip_index: Union[bool, str], gzip_spacing: int, **kw: Any):
        super().__init__(**kw)
        self.paths = expand_paths(paths_or_glob)
        self._file_split = self.world_size > 1 and len(self.paths) >= self.world_size
        self.index_dir = index_dir or os.environ.get("LUMINAMOON_INDEX_DIR") or os.path.join(
            os.path.expanduser("~"), ".cache", "luminamoon", "gzindex")
        # "auto": indexed_gzip when it is installed -- looked up, not imported (its import costs
        # ~90 ms, in the run's serial start, and a read from a gzip file's start needs no index);
        # imported by the first reader that seeks into a gzip file, and a failed import there
        # falls back to the framed reader, as "auto" did when the import failed here
        self._gzip_index_auto = gzip_index == "auto"
        if self._gzip_index_auto:
            import importlib.util

            try:
                gzip_index = importlib.util.find_spec("indexed_gzip") is not None
            except (ImportError, ValueError):  # a parent that fails, a module in sys.modules without a spec
                gzip_index = False
        self.gzip_index = bool(gzip_index)
        if as_int(gzip_spacing) is None:  # int, numpy integer (bool refused)
            raise TypeError(f"gzip_spacing must be an int, got {type(gzip_spacing).__name__}")
        self.gzip_spacing = gzip_spacing = as_int(gzip_spacing)
        if self.gzip_index and self.gzip_spacing <= 32768:
            raise ValueError(f"gzip_spacing must exceed the 32 KiB inflate window, got {gzip_spacing}")
        self._pos = self._start_pos(0)
        if position is not None:
            self.seek(position)

    def identity(self) -> Dict[str, Any]:
        return self._file_identity(text_key=self.text_key, per=getattr(self, "per", None))

    def _start_pos(self, shard: int) -> Dict[str, Any]:
        return {"kind": self.kind, "nfiles": len(self.paths), "shard": shard, "offset": 0,
                "line": 0, "record": 0, "frame": 0, "frame_uoff": 0}

    def position(self) -> Dict[str, Any]:
        return dict(self._pos)

    def seek(self, position: Dict[str, Any]) -> None:
        self._check_kind(position, self.kind)
        if position.get("nfiles") != len(self.paths):
            raise ValueError(f"position was taken over {position.get('nfiles')} files, this source has {len(self.paths)}")
        pos = self._start_pos(0)
        for k in ("shard", "offset", "line", "record", "frame", "frame_uoff"):
            pos[k] = self._position_int(position, k)
        if pos["shard"] > len(self.paths):
            raise ValueError(f"shard {pos['shard']} out of range in position {position!r}")
        self._pos = pos

    def _open(self, path: str, pos: Dict[str, Any]):
        comp = _compression(path)
        if comp == "plain":
            return _PlainReader(path, pos["offset"])
        # from its start a gzip file is inflated as a stream (review s35: indexed_gzip refused an empty
        # file -- 0 bytes, or zero padding only -- "not a readable gzip file", which the block path and
        # gzip_index=False read as no record); the index serves the seeks into a file
        if comp == "gzip" and self.gzip_index and pos["offset"] > 0:
            if self._gzip_index_auto:
                try:
                    import indexed_gzip  # noqa: F401
                except ImportError:  # found but not importable (a broken install): as if absent
                    self.gzip_index = False
            if self.gzip_index:
                return _IndexedGzipReader(path, pos["offset"], self.index_dir, self.gzip_spacing)
        return _FramedReader(path, comp, pos["offset"], pos["frame"], pos["frame_uoff"])

    def _open_stream(self, path: str, pos: Dict[str, Any]):
        """A reader for ``path`` from ``pos`` for the block path: a gzip file read from
        its start is inflated as one stream (no index is built)."""
        if pos["offset"] == 0 and _compression(path) == "gzip":
            return _FramedReader(path, "gzip", 0, 0, 0)
        return self._open(path, pos)

    def _mine(self, shard: int) -> bool:
        return not self._file_split or shard % self.world_size == self.rank

    def _lines(self) -> Iterator[tuple]:
        """Yields (path, line_number (1-based), record_index, raw bytes) and keeps
        self._pos at the position after that line."""
        while self._pos["shard"] < len(self.paths):
            shard = self._pos["shard"]
            path = self.paths[shard]
            if not self._mine(shard):
                self._pos = self._start_pos(shard + 1)
                continue
            reader = self._open(path, self._pos)
            try:
                while True:
                    lim = self.max_record_bytes
                    # a text file's first line: a byte order mark is not part of its text (review s35: it
                    # counted against the limit here and not in the block scan, _scan_text)
                    bom = 3 if self.kind == "text" and self._pos["line"] == 0 else 0
                    raw = reader.readline(None if lim is None else lim + 2 + bom)  # + the line ending
                    if not raw:
                        break
                    if lim is not None and not isinstance(raw, TooLong):
                        n = len(raw) - (2 if raw.endswith(b"\r\n") else 1 if raw.endswith(b"\n") else 0)
                        if bom and raw.startswith(UTF8_BOM):
                            n -= 3
                        if n > lim:  # the record is the line without its ending
                            raw = TooLong(n)
                    elif bom and isinstance(raw, TooLong) and self._bom(path):  # its text's size, as the scan says
                        raw = TooLong(raw.nbytes - 3)
                    pos = self._pos
                    pos["offset"], pos["frame"], pos["frame_uoff"] = reader.offset, reader.frame, reader.frame_uoff
                    pos["line"] += 1
                    yield path, pos["line"], raw
            finally:
                reader.close()
            self._pos = self._start_pos(shard + 1)

    def _take_record(self) -> bool:
        """Record-level sharding: counts a record and says if it is this rank's."""
        idx = self._pos["record"]
        self._pos["record"] = idx + 1
        return self._file_split or self.world_size == 1 or idx % self.world_size == self.rank


class JsonlSource(_FileSource):
    """JSON Lines files (plain, ``.gz``, ``.zst``), resumed by (shard, offset).
    Blank lines are ignored.  Each record is the parsed JSON object."""

    kind = "jsonl"

    def __init__(self, paths_or_glob: PathsArg, text_key: str = "text", position: Optional[Dict[str, Any]] = None,
                 index_dir: Optional[str] = None, gzip_index: Union[bool, str] = "auto",
                 gzip_spacing: int = 1 << 20, **kw: Any):
        _check_key("text_key", text_key)
        self.text_key = text_key
        super().__init__(paths_or_glob, position, index_dir, gzip_index, gzip_spacing, **kw)

    def _records(self) -> Iterator[Dict[str, Any]]:
        for path, lineno, raw in self._lines():
            if isinstance(raw, TooLong):
                if self._take_record():
                    self._refuse_big(f"{path}:{lineno}", raw.nbytes)
                continue
            if not raw.strip():
                continue
            if not self._take_record():
                continue
            obj = self._parse_line(path, lineno, raw)
            if obj is not None:
                yield obj

    def _parse_line(self, path: str, lineno: int, raw: bytes) -> Optional[Dict[str, Any]]:
        """One non-blank line parsed exactly (``json.loads``): the record, or None after a
        bad record was skipped (``on_error="skip"``); raises BadRecordError otherwise."""
        if lineno == 1 and raw.startswith(UTF8_BOM):  # a UTF-8 byte order mark (Windows tools)
            raw = raw[3:]
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            self._bad(f"{path}:{lineno}: invalid UTF-8 at byte {e.start}", e)
            return None
        except json.JSONDecodeError as e:
            self._bad(f"{path}:{lineno}: malformed JSON: {e.msg} (column {e.colno})", e)
            return None
        except RecursionError as e:  # e.g. 100,000 nested '[': Python's json recurses per level
            self._bad(f"{path}:{lineno}: malformed JSON: nested too deeply to parse "
                      f"(more than about {sys.getrecursionlimit()} levels)", e)
            return None
        except ValueError as e:  # review s35: an integer of more than 4300 digits (Python's int limit)
            # raised a bare ValueError naming no file or line, never skipped by on_error="skip"
            self._bad(f"{path}:{lineno}: malformed JSON: {e}", e)
            return None
        if not isinstance(obj, dict):
            self._bad(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            return None
        text = obj.get(self.text_key)
        if not isinstance(text, str):
            what = "missing" if text is None and self.text_key not in obj else f"not a string ({type(text).__name__})"
            self._bad(f"{path}:{lineno}: text field {self.text_key!r} is {what}")
            return None
        if not self._keep_lone_surrogates and self._lone_surrogate(path, lineno, text):
            return None
        return obj

    #: True (iterating the source): a text with a lone surrogate is yielded as Python holds it (how
    #: JSON carries undecodable bytes; the caller may repair it).  The pipelines set False on the
    #: source they read (``refuse_lone_surrogates``): such a record is then a bad record (file:line;
    #: skipped with on_error="skip").  It reached the stages, which refused the whole batch with
    #: "strings[i] cannot be encoded as UTF-8", naming no file or line, never skipped.  ``luminamoon
    #: run`` keeps True: it replaces each by U+FFFD and counts the documents (stats.json).
    _keep_lone_surrogates = True

    def _lone_surrogate(self, path: str, lineno: int, text: str) -> bool:
        at = lone_surrogate_at(text)
        if at < 0:
            return False
        self._bad(f"{path}:{lineno}: text field {self.text_key!r} holds a lone surrogate (U+{ord(text[at]):04X} "
                  f"at character {at}: a \\u escape that is not half of a pair), which is not text and "
                  "cannot be encoded as UTF-8")
        return True

    @property
    def _columnar(self) -> bool:
        """Whether ``iter_blocks`` gives what iterating gives: not when a subclass
        changes ``_records`` (pipelines then read record by record)."""
        return type(self)._records is JsonlSource._records and type(self)._parse_line is JsonlSource._parse_line

    def iter_blocks(self, n: int, fix_text: Optional[Callable[[Dict[str, Any], str], str]] = None,
                    fields: Sequence[str] = ()) -> Iterator["RecordBlock"]:
        """The records as columns, ``n`` at a time (see :class:`RecordBlock`): the same
        records, positions, errors and skips as iterating the source, without a Python
        object per record on the way (a C scanner decodes the text field of each line
        straight into a StringTensor; only lines it cannot vouch for go through
        ``json.loads``).  Like ``iter(source)`` it continues from the current position.
        ``fix_text(record, text) -> text`` is applied to the non-ASCII texts of the
        records parsed by ``json.loads`` (the only ones that can hold lone surrogates).
        ``fields``: at most one more top-level field (e.g. the ids) the scanner decodes in
        the same pass, so that ``block.records.field_strings(idx, field)`` reads no line again."""
        return jsonl_blocks(self, _block_count(n), fix_text, fields=fields)


class TextSource(_FileSource):
    """Plain-text files (plain, ``.gz``, ``.zst``).  ``per="line"``: one record per
    line (newline stripped; empty lines are records too), resumed by (shard,
    byte offset).  ``per="file"``: one record per file, resumed by shard."""

    kind = "text"

    def __init__(self, paths_or_glob: PathsArg, per: str = "line", text_key: str = "text",
                 position: Optional[Dict[str, Any]] = None, index_dir: Optional[str] = None,
                 gzip_index: Union[bool, str] = "auto", gzip_spacing: int = 1 << 20, **kw: Any):
        if per not in ("line", "file"):
            raise ValueError(f"per must be 'line' or 'file', not {per!r}")
        _check_key("text_key", text_key)
        self.per, self.text_key = per, text_key
        super().__init__(paths_or_glob, position, index_dir, gzip_index, gzip_spacing, **kw)

    @property
    def _columnar(self) -> bool:
        """Whether ``iter_blocks`` gives what iterating gives: lines (``per="line"``) of a
        TextSource whose subclass does not change ``_records``."""
        return self.per == "line" and type(self)._records is TextSource._records

    def iter_blocks(self, n: int, fix_text: Optional[Callable[[Dict[str, Any], str], str]] = None,
                    fields: Sequence[str] = ()) -> Iterator["RecordBlock"]:
        """The lines as columns, ``n`` at a time (``per="line"``; see :class:`RecordBlock`):
        the same texts, positions, errors (file:line, invalid UTF-8) and skips as iterating
        the source, the lines split and checked with numpy a megabyte at a time.
        ``records`` holds an empty dict per line.  ``fix_text`` is accepted for the
        pipelines' sake and not needed (checked UTF-8 holds no lone surrogate); ``fields``
        too (a line has no other field)."""
        if self.per != "line":
            raise ValueError("iter_blocks reads lines: a TextSource with per='file' is read by iterating it")
        return text_blocks(self, _block_count(n), fix_text)

    def _records(self) -> Iterator[Dict[str, Any]]:
        if self.per == "file":
            yield from self._files()
            return
        for path, lineno, raw in self._lines():
            if not self._take_record():
                continue
            if isinstance(raw, TooLong):
                self._refuse_big(f"{path}:{lineno}", raw.nbytes)
                continue
            if lineno == 1 and raw.startswith(UTF8_BOM):  # as JsonlSource: not part of the first line's text
                raw = raw[3:]
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                self._bad(f"{path}:{lineno}: invalid UTF-8 at byte {e.start}", e)
                continue
            yield {self.text_key: text}

    def _bom(self, path: str) -> bool:
        """Whether ``path`` (decompressed) starts with a UTF-8 byte order mark."""
        reader = self._open(path, self._start_pos(0))
        try:
            return reader.read(3)[:3] == UTF8_BOM
        finally:
            reader.close()

    def _files(self) -> Iterator[Dict[str, Any]]:
        while self._pos["shard"] < len(self.paths):
            shard = self._pos["shard"]
            path = self.paths[shard]
            self._pos = self._start_pos(shard + 1)
            if not self._mine(shard) or not self._take_file(shard):
                continue
            reader = self._open(path, self._start_pos(shard))
            lim = self.max_record_bytes
            size = 0
            try:
                chunks = []
                while True:
                    line = reader.readline(None if lim is None else max(0, lim - size) if chunks is not None else 0)
                    if not line:
                        break
                    if isinstance(line, TooLong):
                        size += line.nbytes
                        chunks = None
                        continue
                    size += len(line)
                    if chunks is not None:
                        chunks.append(line)
            finally:
                reader.close()
            if chunks is None:
                self._refuse_big(path, size)
                continue
            try:
                body = b"".join(chunks)
                yield {self.text_key: (body[3:] if body.startswith(UTF8_BOM) else body).decode("utf-8")}
            except UnicodeDecodeError as e:
                self._bad(f"{path}: invalid UTF-8 at byte {e.start}", e)

    def _take_file(self, shard: int) -> bool:
        return self._file_split or self.world_size == 1 or shard % self.world_size == self.rank


class ParquetSource(Source):
    """Parquet files through pyarrow, read row group by row group and resumed by
    (file, row group, row).  Each record is a dict of the selected ``columns``
    (all by default; the text column is always included)."""

    def __init__(self, paths_or_glob: PathsArg, text_column: str = "text", columns: Optional[List[str]] = None,
                 position: Optional[Dict[str, Any]] = None, **kw: Any):
        _check_key("text_column", text_column)
        if columns is not None:
            if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
                raise TypeError(f"columns must be None or a list of column names, got {type(columns).__name__}")
            for i, c in enumerate(columns):
                _check_key(f"columns[{i}]", c)
        super().__init__(**kw)
        self.paths = expand_paths(paths_or_glob)
        self.text_column = text_column
        self.columns = None if columns is None else list(dict.fromkeys([text_column, *columns]))
        self._file_split = self.world_size > 1 and len(self.paths) >= self.world_size
        self._pos = self._start(0)
        if position is not None:
            self.seek(position)

    def identity(self) -> Dict[str, Any]:
        return self._file_identity(text_column=self.text_column, columns=self.columns)

    def _start(self, shard: int) -> Dict[str, Any]:
        return {"kind": "parquet", "nfiles": len(self.paths), "shard": shard, "row_group": 0, "row": 0, "record": 0}

    def position(self) -> Dict[str, Any]:
        return dict(self._pos)

    def seek(self, position: Dict[str, Any]) -> None:
        self._check_kind(position, "parquet")
        if position.get("nfiles") != len(self.paths):
            raise ValueError(f"position was taken over {position.get('nfiles')} files, this source has {len(self.paths)}")
        pos = self._start(0)
        for k in ("shard", "row_group", "row", "record"):
            pos[k] = self._position_int(position, k)
        self._pos = pos

    def _records(self) -> Iterator[Dict[str, Any]]:
        import pyarrow.parquet as pq

        while self._pos["shard"] < len(self.paths):
            shard = self._pos["shard"]
            path = self.paths[shard]
            if self._file_split and shard % self.world_size != self.rank:
                self._pos = self._start(shard + 1)
                continue
            try:
                pf = pq.ParquetFile(path)
            except Exception as e:
                raise ValueError(f"{path}: not a readable Parquet file: {e}") from e
            if self.text_column not in pf.schema_arrow.names:
                raise ValueError(f"{path}: no column {self.text_column!r} (columns: {pf.schema_arrow.names})")
            names = pf.schema_arrow.names
            # only the selected columns present in this file are read, in bounded batches
            cols = None if self.columns is None else [c for c in self.columns if c in names]
            while self._pos["row_group"] < pf.num_row_groups:
                g = self._pos["row_group"]
                first = self._pos["row"]
                r = 0
                for batch in self._batches(pf, path, g, cols):
                    if r + batch.num_rows <= first:  # resumed inside the row group: skip what was read
                        r += batch.num_rows
                        continue
                    rows = batch.slice(max(first - r, 0)).to_pylist()
                    r = max(r, first)
                    for row in rows:
                        self._pos["row"] = r + 1
                        idx = self._pos["record"]
                        self._pos["record"] = idx + 1
                        r += 1
                        if self.world_size > 1 and not self._file_split and idx % self.world_size != self.rank:
                            continue
                        if self._text_of(row, f"{path}: row group {g}, row {r - 1}") is None:
                            continue
                        big = self._too_big(row[self.text_column])
                        if big is not None:
                            self._refuse_big(f"{path}: row group {g}, row {r - 1}", big)
                            continue
                        yield row
                self._pos["row_group"] = g + 1
                self._pos["row"] = 0
            self._pos = self._start(shard + 1)

    @property
    def _columnar(self) -> bool:
        """Whether ``iter_blocks`` gives what iterating gives: not when a subclass changes
        ``_records`` or ``_text_of``."""
        return type(self)._records is ParquetSource._records and type(self)._text_of is ParquetSource._text_of \
            and callable(getattr(self, "iter_blocks", None))

    def iter_blocks(self, n: int, fix_text: Optional[Callable[[Dict[str, Any], str], str]] = None,
                    fields: Sequence[str] = ()) -> Iterator["RecordBlock"]:
        """The rows as columns, ``n`` at a time (see :class:`RecordBlock`): the text column as a
        StringTensor over the Arrow buffers (binary checked as UTF-8 by one cast), the other
        columns kept as Arrow (``records.table``; a row becomes a dict when read); the same
        records, positions, errors (file, row group, row) and skips as iterating the source.
        ``lines`` holds each row's index in its file.  ``fix_text`` is accepted for the
        pipelines' sake and not needed (Arrow strings hold no lone surrogate); ``fields`` too
        (the other columns stay Arrow)."""
        return parquet_blocks(self, _block_count(n), fix_text)

    def _batches(self, pf: Any, path: str, g: int, cols: Optional[List[str]]) -> Iterator[Any]:
        """Row group ``g`` in record batches of about 32 MiB of the selected columns
        (by the row group's uncompressed sizes); a read error names the file and row group."""
        md = pf.metadata.row_group(g)
        nbytes = 0
        for c in range(md.num_columns):
            cc = md.column(c)
            if cols is None or cc.path_in_schema.split(".", 1)[0] in cols:
                nbytes += max(cc.total_uncompressed_size, 0)
        per_row = max(nbytes // max(md.num_rows, 1), 1)
        rows = int(min(max((32 << 20) // per_row, 1), 65536))
        it = pf.iter_batches(batch_size=rows, row_groups=[g], columns=cols, use_threads=False)
        while True:
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception as e:  # pyarrow's own errors: "Corrupt snappy compressed data.", ...
                raise ValueError(f"{path}: row group {g}: cannot read the data ({type(e).__name__}: {e}); "
                                 "the file is damaged") from e
            yield batch

    def _text_of(self, row: Dict[str, Any], where: str) -> Optional[str]:
        """The row's text (UTF-8 binary decoded in place), or None after reporting a bad record."""
        text = row.get(self.text_column)
        if isinstance(text, str):
            return text
        if isinstance(text, (bytes, bytearray)):
            try:
                row[self.text_column] = text = bytes(text).decode("utf-8")
                return text
            except UnicodeDecodeError as e:
                self._bad(f"{where}: text column {self.text_column!r} is binary and not valid UTF-8 "
                          f"(at byte {e.start})", e)
                return None
        what = "null" if text is None else f"of type {type(text).__name__}, not a string"
        self._bad(f"{where}: text column {self.text_column!r} is {what}")
        return None


class HFIterableSource(Source):
    """A HuggingFace ``datasets.IterableDataset``, resumed through its own
    ``state_dict()`` / ``load_state_dict()`` (datasets >= 2.18).  The position is
    ``{"kind": "hf", "state": ds.state_dict()}``; it is JSON-serialisable when
    the dataset's state is (true for the built-in file-based builders)."""

    def __init__(self, ds: Any, text_key: str = "text", position: Optional[Dict[str, Any]] = None, **kw: Any):
        super().__init__(**kw)
        try:
            import datasets
        except ImportError as e:
            raise ImportError("HFIterableSource needs the 'datasets' package (pip install datasets)") from e
        if not isinstance(ds, datasets.IterableDataset):
            raise TypeError(f"ds must be a datasets.IterableDataset (HFIterableSource wraps one), got {type(ds).__name__}")
        if not hasattr(ds, "state_dict"):
            raise ImportError("HFIterableSource needs datasets >= 2.18 (IterableDataset.state_dict)")
        if self.world_size > 1:
            from datasets.distributed import split_dataset_by_node
            ds = split_dataset_by_node(ds, rank=self.rank, world_size=self.world_size)
        _check_key("text_key", text_key)
        self.ds = ds
        self.text_key = text_key
        self._loaded: Optional[Dict[str, Any]] = None  # state set by seek, not yet iterated from
        if position is not None:
            self.seek(position)

    def position(self) -> Dict[str, Any]:
        # Between two yields the dataset's state is the one after the last
        # example it yielded (datasets documents state_dict() mid-iteration).
        state = self._loaded if self._loaded is not None else self.ds.state_dict()
        return {"kind": "hf", "state": _jsonable(state)}

    def seek(self, position: Dict[str, Any]) -> None:
        self._check_kind(position, "hf")
        if not isinstance(position.get("state"), dict):
            raise ValueError(f"position['state'] must be the dataset's state_dict() (a dict), got "
                             f"{position.get('state')!r}")
        self._loaded = position["state"]
        self.ds.load_state_dict(self._loaded)

    def _records(self) -> Iterator[Dict[str, Any]]:
        if self._loaded is None:
            # A new pass continues from the current state, not from the start.
            self.ds.load_state_dict(self.ds.state_dict())
        it = iter(self.ds)
        self._loaded = None
        for idx, ex in enumerate(it):
            if not isinstance(ex.get(self.text_key), str):
                self._bad(f"example {idx}: text field {self.text_key!r} is missing or not a string")
                continue
            big = self._too_big(ex[self.text_key])
            if big is not None:
                self._refuse_big(f"example {idx}", big)
                continue
            yield ex


def as_source(source: Any, text_key: str = "text") -> "Source":
    """``source`` itself when it is a :class:`Source`, else an :class:`IterableSource` over it (a re-iterable
    of ``str`` / dicts, or a callable returning one); what ResumablePipeline and DistributedPipeline accept."""
    if isinstance(source, Source):
        return source
    if isinstance(source, (str, bytes)) or not hasattr(source, "__iter__") and not callable(source):
        raise TypeError(f"source must be a luminamoon.data source or an iterable of records, "
                        f"got {type(source).__name__}")
    _check_replayable(source, "source")
    return IterableSource(source, text_key=text_key)


def _check_replayable(obj: Any, name: str) -> None:
    """Review s34: refuse iterables whose replay cannot resume.  A set's order depends on the process's
    hash seed, so a resumed run replaying it skips records it never delivered and repeats others; a
    mapping (one record dict, a DatasetDict) iterates its keys, which would be delivered as texts."""
    import collections.abc as abc

    if isinstance(obj, (set, frozenset)):
        raise TypeError(f"{name} must have a stable order: a {type(obj).__name__} is iterated in an order "
                        "that changes between processes, so resuming would skip and repeat records; pass "
                        "sorted(...) or a list")
    if isinstance(obj, abc.Mapping):
        raise TypeError(f"{name} must be an iterable of records, got a {type(obj).__name__} (a mapping iterates "
                        "its keys); pass a list of records, e.g. [record] or list(mapping.values())")


def _jsonable(obj: Any) -> Any:
    """A deep copy made of dict/list/str/int/float/bool/None (tuples become lists)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj
