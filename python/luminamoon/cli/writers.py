"""Crash-safe sharded output: Parquet or JSONL part files of (id, text, ...).

A part is written to a hidden temporary name, flushed, fsynced and renamed
to ``part-NNNNN.<ext>`` (and the folder fsynced) before the commit that covers
it, so a committed state never names a part that is not complete on disk.
``state()`` is the JSON-serialisable record of the finished parts (name, rows,
bytes); a writer built with that state deletes every part file beyond it and
every temporary file (a run killed mid-part leaves them), then continues
numbering after the last committed part.  With deterministic input and part
boundaries, a killed-and-resumed run writes byte-identical parts.

Example:
    >>> w = ShardWriter("out", fmt="parquet", part_docs=1000)          # doctest: +SKIP
    >>> w.add(["a", "b"], StringTensor.from_list(["x", "y"]))           # doctest: +SKIP
    >>> w.finish_part(); w.state()["rows"]                              # doctest: +SKIP
    2
"""
from __future__ import annotations

import io
import json
import os
import re
from typing import Any, Dict, List, Optional, Sequence

import pyarrow as pa

from .._durable import atomic_replace
from ..arrow import string_array

__all__ = ["ShardWriter", "PART_RE", "repair_surrogates", "json_value", "id_text"]

PART_RE = re.compile(r"^part-(\d{5,})\.(parquet|jsonl|jsonl\.gz|jsonl\.zst)$")
_TMP_PREFIX = ".tmp-part-"


_SURROGATE = re.compile("[\ud800-\udfff]")


def repair_surrogates(v: Any) -> Any:
    """``v`` with every lone surrogate in its strings (dict keys, nested lists and
    dicts included) replaced by ONE U+FFFD; the same object when there is none."""
    if isinstance(v, str):
        return v if v.isascii() else _SURROGATE.sub("\ufffd", v)
    if isinstance(v, dict):
        return {repair_surrogates(k): repair_surrogates(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [repair_surrogates(x) for x in v]
    return v


def json_value(v: Any) -> Any:
    """A JSON-native value for a kept field in JSONL output: dates, times and
    timestamps as ISO 8601 text, decimals as text (exact), binary as base64,
    timedeltas as seconds; lists and dicts converted inside."""
    import base64
    import datetime
    import decimal

    if v is None or isinstance(v, (str, bool, int, float)):
        return v
    if isinstance(v, (datetime.date, datetime.time)):  # datetime is a date
        return v.isoformat()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(v)).decode("ascii")
    if isinstance(v, datetime.timedelta):
        return v.total_seconds()
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    return str(v)


def _json_text(v: Any) -> str:
    return json.dumps(json_value(v), ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def id_text(v: Any) -> str:
    """The output id of an input id value: a string as is, anything else as JSON
    text (``true``, ``2.5``, ``{"a":1}``; timestamps ISO 8601, binary base64)."""
    if isinstance(v, str):
        return v
    j = json_value(v)
    return j if isinstance(j, str) else _json_text(j)


_JSON_START = frozenset('-0123456789tfn"[{')


def group_label(v: Any) -> str:
    """The ``--group-by`` label of a field value (stats.json ``groups`` keys, the report): a string
    as is, anything else as JSON text (``id_text``), a missing / null value ``(none)``.  A string
    that would read as one of those (the string 1 beside the number 1, true, (none), or the
    report's (other)) is written as its JSON string, in double quotes, so that two different
    values never share a group (1 and "1" were one group)."""
    if v is None:
        return "(none)"
    if not isinstance(v, str):
        return repair_surrogates(id_text(v))
    t = repair_surrogates(v)
    if t in ("(none)", "(other)"):
        return json.dumps(t, ensure_ascii=False)
    if t[:1] in _JSON_START or t[:1].isspace():
        try:
            json.loads(t)
        except ValueError:
            return t
        return json.dumps(t, ensure_ascii=False)
    return t


class ShardWriter:
    """Buffers kept documents and writes them as numbered part files.

    Args:
        out_dir: the output folder (created).
        fmt: ``"parquet"`` or ``"jsonl"``.
        compression: Parquet codec (zstd, snappy, gzip, none) or, for JSONL,
            none / gzip / zstd (file suffix ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``).
        part_docs / part_bytes: ``should_finish()`` turns true once the open
            part holds this many documents or text bytes.
        state: ``state()`` of a committed earlier run to continue from, or None
            (a fresh output: part files already in the folder are an error).
        extra_fields: names of additional columns given to ``add``.
        extra_types: Arrow types of some of them (from Parquet inputs): Parquet
            output keeps those types; JSONL output, and fields without a type,
            convert values with :func:`json_value` (ISO dates, decimals as text,
            binary as base64); in Parquet output an untyped non-string value is
            stored as its JSON text.
    """

    def __init__(self, out_dir: str, fmt: str = "parquet", compression: str = "zstd", part_docs: int = 50000,
                 part_bytes: int = 256 << 20, state: Optional[Dict[str, Any]] = None,
                 extra_fields: Sequence[str] = (), extra_types: Optional[Dict[str, Any]] = None):
        if fmt not in ("parquet", "jsonl"):
            raise ValueError(f"output format must be parquet or jsonl, not {fmt!r}")
        comp = (compression or "none").lower()
        if comp == "auto":
            comp = "zstd" if fmt == "parquet" else "none"
        if fmt == "parquet" and comp not in ("zstd", "snappy", "gzip", "none", "lz4", "brotli"):
            raise ValueError(f"Parquet compression must be zstd, snappy, gzip, lz4, brotli or none, not {compression!r}")
        if fmt == "jsonl" and comp not in ("none", "gzip", "zstd"):
            raise ValueError(f"JSONL compression must be none, gzip or zstd, not {compression!r}")
        if part_docs < 1 or part_bytes < 1:
            raise ValueError("part_docs and part_bytes must be positive")
        self.out_dir = out_dir
        self.fmt, self.compression = fmt, comp
        self.part_docs, self.part_bytes = int(part_docs), int(part_bytes)
        self.extra_fields = list(extra_fields)
        self.extra_types = dict(extra_types or {}) if fmt == "parquet" else {}
        self.suffix = ".parquet" if fmt == "parquet" else {"none": ".jsonl", "gzip": ".jsonl.gz", "zstd": ".jsonl.zst"}[comp]
        os.makedirs(out_dir, exist_ok=True)
        self.parts: List[Dict[str, Any]] = []
        if state is not None:
            if state.get("format") != fmt or state.get("suffix") != self.suffix:
                raise ValueError(f"the committed output is {state.get('format')} ({state.get('suffix')}), "
                                 f"this run writes {fmt} ({self.suffix}): use the same output options to resume")
            self.parts = [dict(p) for p in state["parts"]]
        self._remove_uncommitted()
        self._ids: List[pa.Array] = []
        self._texts: List[pa.Array] = []
        self._extra: Dict[str, List[pa.Array]] = {k: [] for k in self.extra_fields}
        self._rows = 0
        self._bytes = 0

    def __repr__(self) -> str:
        return (f"ShardWriter(out_dir={self.out_dir!r}, fmt={self.fmt!r}, compression={self.compression!r}, "
                f"part_docs={self.part_docs}, part_bytes={self.part_bytes}, parts={len(self.parts)}, "
                f"pending_rows={self._rows})")

    # ------------------------------------------------------------ recovery
    def _remove_uncommitted(self) -> None:
        keep = {p["name"] for p in self.parts}
        for f in os.listdir(self.out_dir):
            path = os.path.join(self.out_dir, f)
            if f.startswith(_TMP_PREFIX) or (PART_RE.match(f) and f not in keep):
                os.remove(path)
        for p in self.parts:
            path = os.path.join(self.out_dir, p["name"])
            if not os.path.exists(path):
                raise OSError(f"committed part {path} is missing: the output folder was changed after the commit")
            if os.path.getsize(path) != p["file_bytes"]:
                raise OSError(f"committed part {path} has {os.path.getsize(path)} bytes, the commit recorded "
                              f"{p['file_bytes']}: the output folder was changed after the commit")

    # --------------------------------------------------------------- writing
    @property
    def pending_rows(self) -> int:
        return self._rows

    def add(self, ids: Sequence[str], texts: Any, extra: Optional[Dict[str, Sequence[Any]]] = None) -> None:
        """Appends documents: ``ids`` (str), ``texts`` (a StringTensor or list of
        str, same length), and the extra fields' values."""
        n = len(ids)
        if len(texts) != n:
            raise ValueError(f"{n} ids but {len(texts)} texts")
        if n == 0:
            return
        if hasattr(texts, "to_arrow"):
            arr = texts.to_arrow()
            nbytes = int(texts.offsets[-1]) - int(texts.offsets[0]) if len(texts) else 0
        else:
            arr = pa.array(list(texts), type=pa.string())
            nbytes = sum(len(t.encode("utf-8")) for t in texts)
        if arr.type != pa.large_string():
            arr = arr.cast(pa.large_string()) if arr.type == pa.string_view() else arr
        self._ids.append(string_array(ids))
        self._texts.append(arr)
        for k in self.extra_fields:
            vals = (extra or {}).get(k)
            if vals is None:
                vals = [None] * n
            self._extra[k].append(self._extra_array(k, vals))
        self._rows += n
        self._bytes += nbytes

    def _extra_array(self, k: str, vals: Sequence[Any]) -> pa.Array:
        typ = self.extra_types.get(k)
        if typ is not None:
            try:
                return pa.array(vals, type=typ)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
                raise ValueError(f"kept field {k!r}: a value does not fit its input column type {typ} "
                                 f"({e})") from None
        if self.fmt == "jsonl":  # JSON text, spliced into each line as is (_ndjson)
            return string_array([_json_text(v) for v in vals])
        return string_array([None if v is None else v if isinstance(v, str) else _json_text(v) for v in vals])

    def should_finish(self) -> bool:
        """True when the open part is full (part_docs or part_bytes reached)."""
        return self._rows >= self.part_docs or self._bytes >= self.part_bytes

    def _table(self) -> pa.Table:
        def col(chunks: List[pa.Array], typ) -> pa.Array:
            if not chunks:
                return pa.array([], type=typ)
            chunks = [c.cast(pa.large_string()) if c.type != chunks[0].type else c for c in chunks]
            return pa.concat_arrays(chunks)

        texts = col(self._texts, pa.string())
        if texts.type == pa.large_string() and sum(len(c) for c in self._texts) and texts.nbytes < (1 << 31) - 1:
            texts = texts.cast(pa.string())
        cols = {"id": col(self._ids, pa.string()), "text": texts}
        for k in self.extra_fields:
            cols[k] = col(self._extra[k], self.extra_types.get(k, pa.string()))
        return pa.table(cols)

    def open_part_name(self) -> str:
        """The file name the open part gets when it is finished (``part-NNNNN<suffix>``)."""
        return f"part-{len(self.parts):05d}{self.suffix}"

    def finish_part(self) -> Optional[Dict[str, Any]]:
        """Writes the open part durably (temp file, fsync, rename, fsync folder)
        and returns its record; None when nothing is pending."""
        if self._rows == 0:
            return None
        table = self._table()
        name = self.open_part_name()
        tmp = os.path.join(self.out_dir, f"{_TMP_PREFIX}{len(self.parts):05d}{self.suffix}")
        final = os.path.join(self.out_dir, name)
        try:
            self._write_part(table, tmp, final)
        except OSError as e:  # full, read-only, ...: no half-written file left, and the error names the part
            if e.filename:
                raise
            raise OSError(e.errno, f"writing {final}: {e.strerror or e}", final) from e
        rec = {"name": name, "rows": int(table.num_rows), "text_bytes": int(self._bytes),
               "file_bytes": os.path.getsize(final)}
        self.parts.append(rec)
        self._ids, self._texts = [], []
        self._extra = {k: [] for k in self.extra_fields}
        self._rows = self._bytes = 0
        return rec

    def _write_part(self, table: pa.Table, tmp: str, final: str) -> None:
        with atomic_replace(final, tmp=tmp):  # fsync, rename, fsync folder; no tmp left on failure
            if self.fmt == "parquet":
                import pyarrow.parquet as pq

                with open(tmp, "wb") as f:
                    pq.write_table(table, f, compression=None if self.compression == "none" else self.compression,
                                   row_group_size=min(max(table.num_rows, 1), 1 << 16))
            else:
                data = _ndjson(table, raw=self.extra_fields)
                if self.compression == "gzip":
                    import gzip

                    data = gzip.compress(data, compresslevel=6, mtime=0)
                elif self.compression == "zstd":
                    import zstandard

                    data = zstandard.ZstdCompressor(level=3).compress(data)
                with open(tmp, "wb") as f:
                    f.write(data)

    def state(self) -> Dict[str, Any]:
        """The finished parts, for ``commit(extra=...)``."""
        return {"format": self.fmt, "suffix": self.suffix, "parts": [dict(p) for p in self.parts],
                "rows": sum(p["rows"] for p in self.parts)}


def _ndjson(table: pa.Table, raw: Sequence[str] = ()) -> bytes:
    """One JSON object per line, through Polars (fast, UTF-8 as is); the ``raw``
    columns hold JSON text, spliced into each line as the field's value."""
    if raw:
        base = _ndjson(table.drop_columns(list(raw))).split(b"\n")
        cols = [(json.dumps(k, ensure_ascii=False).encode("utf-8"), table.column(k).to_pylist()) for k in raw]
        out = []
        for i in range(table.num_rows):
            line = base[i]
            assert line.endswith(b"}")
            out.append(line[:-1] + b"".join(b"," + k + b":" + v[i].encode("utf-8") for k, v in cols) + b"}\n")
        return b"".join(out)
    try:
        import polars as pl

        buf = io.BytesIO()
        pl.from_arrow(table).write_ndjson(buf)
        return buf.getvalue()
    except ImportError:  # pragma: no cover - polars is a dependency of the CLI's fast path only
        rows = table.to_pylist()
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8")
