"""Columnar reading of the file sources: :class:`RecordBlock` and the JSONL block reader.

``JsonlSource.iter_blocks(n)`` yields blocks of ``n`` records (the last may hold fewer)
holding the text field as one StringTensor and the other fields as
:class:`LazyRecords` (each record's JSON line, decoded only when a record is read).
Reading goes a block of decompressed bytes at a time; the C scanner
(``core/src/jsonl_scan.c``) validates each line and decodes its text field straight
into the StringTensor's payload with the GIL released; the lines it does not vouch
for (malformed, unusual, too long) go through the exact per-line parser of
``JsonlSource`` and so give the same records, errors (file:line) and skips.

Positions, skips and errors are those of iterating the source record by record:
``block.position`` is the source position after the block's last record (after
everything when the block ends the input), ``block.skipped`` the source's
``skipped`` at that position, and a bad record (``on_error="raise"``) raises after
every record before it was yielded: the block it falls in is cut short there (a
block of fewer than ``n`` records, its position just before the bad record), so a
caller that catches the error and reads on from ``source.position()`` -- past the
bad record, as when iterating -- loses no record.
"""
from __future__ import annotations

import json
from bisect import bisect_right
from itertools import accumulate
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch

from .errors import UTF8_BOM, BadRecordError

__all__ = ["RecordBlock", "LazyRecords", "jsonl_blocks"]

_READ = 4 << 20  # decompressed bytes read (and scanned) at a time: fewer blocks span two reads (their
# texts are then copied into one payload) and fewer calls (callgrind, the corpus read in blocks of 2048:
# 920M -> 874M instructions against 1 MiB reads)
_READ_FIRST = 2 << 20  # the first read of a file: its first block reaches the stages sooner
_OK, _BLANK, _SLOW, _TOO_LONG = 0, 1, 2, 3


class LazyRecords(Sequence):
    """The records of a block without their text field, as a read-only sequence of
    dicts; a record is decoded from its JSON line (``json.loads``) the first time it
    is read and kept (so changes to a returned dict persist).  Compares equal to a
    list of the same dicts."""

    def __init__(self, key: str, segs: List[Any], seg: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 parsed: Dict[int, Dict[str, Any]], field: Optional[tuple] = None):
        self._key = key
        self._segs, self._seg, self._lo, self._hi = segs, seg, lo, hi
        self._cache: Dict[int, Dict[str, Any]] = dict(parsed)
        # (name, offsets int64 tensor [n + 1], data uint8 tensor, ok int8 array [n]): one more string
        # field the scanner decoded with the texts (``iter_blocks(fields=...)``), each record's value
        # (empty where ok is 0: the scanner could not vouch for it)
        self._field = field

    def __len__(self) -> int:
        return len(self._seg)

    def _get(self, i: int) -> Dict[str, Any]:
        rec = self._cache.get(i)
        if rec is None:
            buf = self._segs[int(self._seg[i])]
            obj = json.loads(bytes(buf[int(self._lo[i]):int(self._hi[i])]))
            obj.pop(self._key, None)
            rec = self._cache[i] = obj
        return rec

    def field_strings(self, idx: Sequence[int], field: str) -> List[Optional[str]]:
        """For each record index in ``idx``: ``record[field]`` when the C scanner proves it a
        string (the record's line scanned again for ``field``: the value is byte for byte what
        ``json.loads`` gives), else None (the field is missing or not a string, the line is
        unusual, or the record was already decoded): read the record itself then.  Decodes
        no record, so a caller that needs only one string field skips ``json.loads`` of the
        whole line (the text included) per record."""
        from .. import _C

        pre = self._field
        if pre is not None and pre[0] == field:
            return self._prescanned(idx)
        out: List[Optional[str]] = [None] * len(idx)
        lines, where = [], []
        for k, i in enumerate(idx):
            if i in self._cache:
                continue
            buf = self._segs[int(self._seg[i])]
            line = bytes(buf[int(self._lo[i]):int(self._hi[i])])
            if not line.endswith(b"\n"):
                line += b"\n"
            lines.append(line)
            where.append(k)
        if not lines:
            return out
        _ends, status, toff, tdata = _C.jsonl_scan(b"".join(lines), field, -1)
        st = status.numpy().tolist()
        if len(st) != len(lines):  # the lines did not scan one for one: leave them all to json.loads
            return out
        offs = toff.numpy().tolist()
        data = tdata.numpy().tobytes()
        r = 0
        for k, s in zip(where, st):
            if s == _OK:
                out[k] = data[offs[r]:offs[r + 1]].decode("utf-8")
                r += 1
        return out

    def _prescanned(self, idx: Sequence[int]) -> List[Optional[str]]:
        """field_strings of the field decoded with the block (no second scan): the block's
        values made str by one C call (``_C.to_list``), None where the scanner could not vouch
        for one or the record was already decoded."""
        from .. import _C

        _, offs, data, ok = self._field
        n = len(self)
        idx = [int(i) + n if i < 0 else int(i) for i in idx]
        if idx and not (0 <= min(idx) and max(idx) < n):
            raise IndexError(f"record index out of range for {n} records")
        cache = self._cache
        if 8 * len(idx) >= n:  # many: every value made str by one C call
            vals = _C.to_list(offs, data, False)
            okl = ok.tolist()
            if not cache:
                return [vals[i] if okl[i] else None for i in idx]
            return [vals[i] if okl[i] and i not in cache else None for i in idx]
        o = offs.numpy()  # few (the run's kept records): only theirs decoded
        mv = memoryview(data.numpy())
        return [str(mv[o[i]:o[i + 1]], "utf-8") if ok[i] and i not in cache else None for i in idx]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if isinstance(i, (int, np.integer)):
            j = int(i)
            if j < 0:
                j += n
            if not 0 <= j < n:
                raise IndexError(f"record index {i} out of range for {n} records")
            return self._get(j)
        raise TypeError(f"records indices must be int or slice, not {type(i).__name__}")

    def __iter__(self):
        return (self._get(j) for j in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (list, tuple, LazyRecords)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"LazyRecords({len(self)} records)"


class RecordBlock:
    """``n`` records as columns: ``texts`` (StringTensor of the text field),
    ``records`` (the other fields, :class:`LazyRecords`), ``shards`` and ``lines``
    (int64 arrays: each record's file index and 1-based line number), ``position``
    (the source position after the block) and ``skipped`` (the source's skip count
    at that position).  ``error_follows``: the block was cut short by a bad record
    (``on_error="raise"``) whose error the next step of the iteration raises."""

    __slots__ = ("texts", "records", "shards", "lines", "position", "skipped", "error_follows")

    def __init__(self, texts, records, shards, lines, position, skipped):
        self.texts, self.records, self.shards, self.lines = texts, records, shards, lines
        self.position, self.skipped = position, skipped
        self.error_follows = False

    def __len__(self) -> int:
        return len(self.records)


class _Joined:
    """Pieces of bytes read as their concatenation, never joined whole: the decompressed pieces of
    one read, scanned in place by the C scanner (``_C.jsonl_scan`` takes the list); a slice is the
    bytes of the pieces it covers (a record's line, read when the record is)."""

    __slots__ = ("parts", "_ends")

    def __init__(self, parts: List[Any]):
        self.parts = parts
        self._ends = list(accumulate(len(p) for p in parts))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, sl: slice) -> bytes:
        a, b, _ = sl.indices(len(self))
        if b <= a:
            return b""
        ends = self._ends
        i = bisect_right(ends, a)
        out = []
        while a < b:
            p0 = ends[i] - len(self.parts[i])
            e = min(b, ends[i])
            out.append(bytes(memoryview(self.parts[i])[a - p0:e - p0]))
            a = e
            i += 1
        return out[0] if len(out) == 1 else b"".join(out)


class _Chunk:
    """The records of one scanned piece of one file (arrays aligned per record)."""

    __slots__ = ("buf", "texts", "lo", "hi", "parsed", "lines", "offs", "recs", "frames", "fuoffs",
                 "skipped", "shard", "error", "error_pos", "gord", "items", "error_g", "ids")

    def __len__(self) -> int:
        return len(self.lines)


def _frames(bounds: List[tuple], offs: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    """For each offset the (compressed, uncompressed) start of the member holding it."""
    if not bounds:
        z = np.zeros(len(offs), dtype=np.int64)
        return z, z
    bu = np.fromiter((b[0] for b in bounds), dtype=np.int64, count=len(bounds))
    bc = np.fromiter((b[1] for b in bounds), dtype=np.int64, count=len(bounds))
    k = np.maximum(np.searchsorted(bu, offs, side="right") - 1, 0)
    return bc[k], bu[k]


def _scan(src, path: str, shard: int, buf: Any, cut: int, base: int, line0: int, rec0: int,
          reader, fix_text=None, own=None, key2: Optional[str] = None) -> "tuple[_Chunk, int, int]":
    """Scans buf[:cut] (complete lines) read at uncompressed offset ``base`` after
    ``line0`` lines and ``rec0`` records of the file.  Returns the chunk and the
    file's line and record counts after it.

    ``own=(W, r, g0)``: the global stream of a distributed pipeline: the chunk's records are
    stream items ``g0, g0 + 1, ...`` (across files) and this rank's are those with
    ``g % W == r``; the chunk then also carries every item's ordinal and position
    (``items``) and each kept record's ordinal (``gord``).

    ``key2``: a second string field decoded in the same pass (``c.ids``: (data, starts, ends,
    ok) per kept record, ok = 0 where the scanner could not vouch for the value)."""
    from .. import _C

    lim = src.max_record_bytes
    if isinstance(buf, _Joined):  # the pieces of a read, scanned in place (cut: all of them)
        view = buf
        arg = buf.parts
    else:
        view = memoryview(buf)[:cut]
        arg = view
    if key2 is None:
        ends_t, status_t, toff_t, tdata_t = _C.jsonl_scan(arg, src.text_key, -1 if lim is None else lim)
    else:
        ends_t, status_t, toff_t, tdata_t, koff_t, kdata_t, kok_t = _C.jsonl_scan(
            arg, src.text_key, -1 if lim is None else lim, key2)
        koff, kok = koff_t.numpy(), kok_t.numpy()
    ends = ends_t.numpy()
    status = status_t.numpy()
    nlines = len(ends)
    starts = np.empty(nlines, dtype=np.int64)
    if nlines:
        starts[0] = 0
        starts[1:] = ends[:-1]
    nonblank = status != _BLANK
    nb_cum = np.cumsum(nonblank, dtype=np.int64)
    rec_idx = rec0 + nb_cum - 1  # each non-blank line's record index
    ws = src.world_size
    if own is not None:
        gall = own[2] + nb_cum - 1
        mine = nonblank & (gall % own[0] == own[1])
    elif ws > 1 and not src._file_split:
        mine = nonblank & (rec_idx % ws == src.rank)
    else:
        mine = nonblank
    idx = np.flatnonzero(mine)
    st = status[idx]
    c = _Chunk()
    c.buf, c.shard, c.error = buf, shard, None
    c.parsed = {}
    c.ids = None
    ok_mask = status == _OK
    if len(st) == 0 or (st == _OK).all():
        # the common case: every record of this chunk decoded by the scanner
        if len(idx) == int(ok_mask.sum()):
            c.texts = (toff_t.numpy(), tdata_t.numpy())
        else:  # record-level sharding: this rank's records among the decoded ones
            c.texts = _take(toff_t.numpy(), tdata_t.numpy(), np.flatnonzero(mine[ok_mask]))
        keep = idx
        skipped = np.full(len(idx), src.skipped, dtype=np.int64)
    else:
        texts: List[str] = []
        okrank = np.cumsum(ok_mask) - 1
        dec = None
        keep_l: List[int] = []
        sk: List[int] = []
        toff = toff_t.numpy()
        for i in idx.tolist():
            s = int(status[i])
            lineno = line0 + i + 1
            try:
                if s == _OK:
                    if dec is None:
                        dec = tdata_t.numpy()
                    r = int(okrank[i])
                    texts.append(bytes(dec[toff[r]:toff[r + 1]]).decode("utf-8"))
                elif s == _TOO_LONG:
                    raw = bytes(view[int(starts[i]):int(ends[i])])
                    n = len(raw) - (2 if raw.endswith(b"\r\n") else 1 if raw.endswith(b"\n") else 0)
                    src._refuse_big(f"{path}:{lineno}", n)
                    continue
                else:
                    obj = src._parse_line(path, lineno, bytes(view[int(starts[i]):int(ends[i])]))
                    if obj is None:
                        continue
                    rec = {k: v for k, v in obj.items() if k != src.text_key}
                    t = obj[src.text_key]
                    if fix_text is not None and not t.isascii():
                        t = fix_text(rec, t)
                    c.parsed[len(keep_l)] = rec
                    texts.append(t)
            except BadRecordError as e:
                c.error = e
                # the file's position at the bad line, as iterating record by record leaves it
                c.error_pos = dict(src._start_pos(shard), offset=base + int(ends[i]), line=lineno,
                                   record=int(rec_idx[i]) + 1)
                if own is not None:
                    c.error_g = int(gall[i])
                break
            keep_l.append(i)
            sk.append(src.skipped)
        keep = np.asarray(keep_l, dtype=np.int64)
        skipped = np.asarray(sk, dtype=np.int64)
        c.texts = texts
    if key2 is not None:  # each kept record's value: its OK line's (the parsed ones: none)
        if len(keep) == len(kok) and (len(st) == 0 or (st == _OK).all()):
            c.ids = (kdata_t.numpy(), koff[:-1], koff[1:], kok)
        else:
            before = np.cumsum(ok_mask)[keep] - ok_mask[keep]  # OK lines before each kept record
            okk = ok_mask[keep]
            st_ = koff[before]
            en_ = np.where(okk, koff[np.minimum(before + 1, len(koff) - 1)], st_)
            c.ids = (kdata_t.numpy(), st_, en_,
                     np.where(okk, kok[np.minimum(before, max(len(kok) - 1, 0))] if len(kok) else 0, 0).astype(np.int8))
    c.lo = starts[keep]
    c.hi = ends[keep]
    c.lines = line0 + keep + 1
    c.offs = base + ends[keep]
    c.recs = rec_idx[keep] + 1
    c.skipped = skipped
    bounds = getattr(reader, "_bounds", None) or []
    c.frames, c.fuoffs = _frames(bounds, c.offs)
    last = c.offs
    if own is not None:
        nbi = np.flatnonzero(nonblank)
        c.gord = gall[keep]
        ioffs = base + ends[nbi]
        c.items = (gall[nbi], ioffs, line0 + nbi + 1, rec_idx[nbi] + 1) + _frames(bounds, ioffs)
        last = ioffs
    if len(last) and hasattr(reader, "prune_bounds"):
        reader.prune_bounds(int(last[-1]))
    return c, line0 + nlines, rec0 + (int(nb_cum[-1]) if nlines else 0)


def _scan_text(src, path: str, shard: int, buf: Any, cut: int, base: int, line0: int, rec0: int,
               reader, fix_text=None, own=None) -> "tuple[_Chunk, int, int]":
    """``_scan`` for a TextSource (``per="line"``): every line is a record, its text the line
    without its ending; the chunk is checked as UTF-8 once (a line ending is ASCII, so the
    chunk is valid exactly when each of its lines is) and only a chunk that fails is judged
    line by line (the error names the file, line and byte as iterating does)."""
    lim = src.max_record_bytes
    arr = np.frombuffer(memoryview(buf)[:cut], dtype=np.uint8)
    ends = np.flatnonzero(arr == 10).astype(np.int64) + 1
    if len(ends) == 0 or ends[-1] != cut:
        ends = np.append(ends, np.int64(cut)) if cut else ends
    nlines = len(ends)
    starts = np.empty(nlines, dtype=np.int64)
    if nlines:
        starts[0] = 0
        starts[1:] = ends[:-1]
    stop = ends.copy()  # the text's end: the line without "\n" / "\r\n"
    nl = arr[ends - 1] == 10 if nlines else np.zeros(0, bool)
    stop[nl] -= 1
    cr = nl & (stop > starts)
    cr[cr] = arr[stop[cr] - 1] == 13
    stop[cr] -= 1
    rec_idx = rec0 + np.arange(nlines, dtype=np.int64)
    ws = src.world_size
    if own is not None:  # every line is a stream item
        gall = own[2] + np.arange(nlines, dtype=np.int64)
        mine = gall % own[0] == own[1]
    elif ws > 1 and not src._file_split:
        mine = rec_idx % ws == src.rank
    else:
        mine = np.ones(nlines, dtype=bool)
    lens = stop - starts
    # a UTF-8 byte order mark before the file's first line is not text (TextSource._records drops it too)
    bom = line0 == 0 and nlines > 0 and lens[0] >= 3 and bytes(arr[:3]) == UTF8_BOM
    if bom:
        lens[0] -= 3
    big = (lens > lim) if lim is not None else np.zeros(nlines, dtype=bool)
    try:
        str(memoryview(buf)[:cut], "utf-8") if nlines else None  # the check only (no copy first)
        utf8_ok = True
    except UnicodeDecodeError:
        utf8_ok = False
    c = _Chunk()
    c.buf, c.shard, c.error, c.parsed, c.ids = buf, shard, None, {}, None
    if utf8_ok and not (mine & big).any():
        keep = np.flatnonzero(mine)
        skipped = np.full(len(keep), src.skipped, dtype=np.int64)
    else:
        keep_l: List[int] = []
        sk: List[int] = []
        for i in np.flatnonzero(mine).tolist():
            lineno = line0 + i + 1
            try:
                if big[i]:
                    src._refuse_big(f"{path}:{lineno}", int(lens[i]))
                    continue
                if not utf8_ok:
                    try:
                        bytes(arr[starts[i]:stop[i]]).decode("utf-8")
                    except UnicodeDecodeError as e:
                        src._bad(f"{path}:{lineno}: invalid UTF-8 at byte {e.start}", e)
                        continue
            except BadRecordError as e:
                c.error = e
                c.error_pos = dict(src._start_pos(shard), offset=base + int(ends[i]), line=lineno,
                                   record=int(rec_idx[i]) + 1)
                if own is not None:
                    c.error_g = int(gall[i])
                break
            keep_l.append(i)
            sk.append(src.skipped)
        keep = np.asarray(keep_l, dtype=np.int64)
        skipped = np.asarray(sk, dtype=np.int64)
    # the kept texts, compacted: one boolean selection over the chunk's bytes (the kept
    # lines' bytes without their line endings)
    klens = lens[keep]
    off = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(klens, out=off[1:])
    total = int(off[-1])
    if total:
        if len(keep) == nlines:
            sel = np.ones(len(arr), dtype=bool)
        else:
            flag = np.zeros(nlines, dtype=bool)
            flag[keep] = True
            sel = np.repeat(flag, ends - starts)
        sel[stop[nl]] = False  # the "\r" of "\r\n" or the "\n"
        sel[stop[cr] + 1] = False  # the "\n" after a "\r"
        if bom:
            sel[:3] = False
        data = arr[sel]
    else:
        data = np.zeros(0, dtype=np.uint8)
    c.texts = (off, data)
    c.lo, c.hi = starts[keep], ends[keep]
    c.lines = line0 + keep + 1
    c.offs = base + ends[keep]
    c.recs = rec_idx[keep] + 1
    c.skipped = skipped
    bounds = getattr(reader, "_bounds", None) or []
    c.frames, c.fuoffs = _frames(bounds, c.offs)
    if own is not None:
        c.gord = gall[keep]
        ioffs = base + ends
        c.items = (gall, ioffs, line0 + np.arange(nlines, dtype=np.int64) + 1, rec_idx + 1) + _frames(bounds, ioffs)
    if nlines and hasattr(reader, "prune_bounds"):
        reader.prune_bounds(int(base + ends[-1]))
    return c, line0 + nlines, rec0 + nlines


class TextRecords(Sequence):
    """The records of a TextSource block without their text field: one empty dict per record
    (a text line has no other field).  Compares equal to a list of empty dicts."""

    def __init__(self, n: int):
        self._recs = [{} for _ in range(n)]
        self._cache: Dict[int, Dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._recs)

    def __getitem__(self, i):
        return self._recs[i]

    def __iter__(self):
        return iter(self._recs)

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (list, tuple, Sequence)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented


def text_blocks(src, n: int, fix_text=None) -> Iterator[RecordBlock]:
    """``TextSource.iter_blocks`` (``per="line"``): blocks of ``n`` lines from the current position."""
    for blk in jsonl_blocks(src, n, fix_text, scan=_scan_text):
        blk.records = TextRecords(len(blk.texts))
        yield blk


def _take(o: np.ndarray, d: np.ndarray, s: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    """The strings ``s`` (sorted indices) of an (offsets, data) pair, compacted."""
    lens = o[1:] - o[:-1]
    new_off = np.zeros(len(s) + 1, dtype=np.int64)
    np.cumsum(lens[s], out=new_off[1:])
    total = int(new_off[-1])
    if not total:
        return new_off, d[:0].copy()
    # the byte index of each output byte: its string's start in d, then 0, 1, 2, ...
    src_start = np.repeat(o[s].astype(np.int64) - new_off[:-1], lens[s])
    return new_off, d[src_start + np.arange(total, dtype=np.int64)]


def _too_long_chunk(src, path: str, shard: int, line0: int, rec0: int, end_off: int, nbytes: int,
                    reader, own=None) -> "tuple[_Chunk, int, int]":
    """A line longer than max_record_bytes streamed past (never held whole)."""

    lineno = line0 + 1
    c = _Chunk()
    c.buf, c.shard, c.error, c.parsed, c.texts = b"", shard, None, {}, []
    if own is not None:
        mine = own[2] % own[0] == own[1]
        fr, fu = _frames(getattr(reader, "_bounds", None) or [], np.asarray([end_off], dtype=np.int64))
        c.items = (np.asarray([own[2]], dtype=np.int64), np.asarray([end_off], dtype=np.int64),
                   np.asarray([lineno], dtype=np.int64), np.asarray([rec0 + 1], dtype=np.int64), fr, fu)
        c.gord = np.zeros(0, dtype=np.int64)
    else:
        mine = src._file_split or src.world_size == 1 or rec0 % src.world_size == src.rank
    if mine:
        try:
            src._refuse_big(f"{path}:{lineno}", nbytes)
        except BadRecordError as e:
            c.error = e
            c.error_pos = dict(src._start_pos(shard), offset=end_off, line=lineno, record=rec0 + 1)
            if own is not None:
                c.error_g = own[2]
    e = np.zeros(0, dtype=np.int64)
    c.ids = None
    c.lo = c.hi = c.lines = c.offs = c.recs = c.skipped = c.frames = c.fuoffs = e
    return c, lineno, rec0 + 1


def _chunks(src, fix_text=None, own=None, scan=None) -> Iterator[_Chunk]:
    """The source's records chunk by chunk from its current position (``own=(W, r)``: the
    records of rank ``r`` of ``W`` in the global stream from here; see ``_scan``)."""
    lim = src.max_record_bytes
    g = 0  # stream items (non-blank lines) before the next chunk, with ``own``
    # JSONL: a read's pieces are scanned in place (_Joined), never joined; other scans need one buffer
    pieces_ok = scan is None or getattr(scan, "_pieces", False)
    scan = scan or _scan
    pos = dict(src._pos)
    first = True
    while pos["shard"] < len(src.paths):
        shard = pos["shard"]
        path = src.paths[shard]
        if not src._mine(shard):
            pos = src._start_pos(shard + 1)
            continue
        if not first:
            pos = src._start_pos(shard)
        first = False
        reader = src._open_stream(path, pos)  # from the start a gzip file needs no index
        try:
            base, line0, rec0 = pos["offset"], pos["line"], pos["record"]
            carry = b""
            size = _READ_FIRST
            while True:
                if pieces_ok and hasattr(reader, "read_parts"):
                    parts = reader.read_parts(size)
                    size = _READ
                    # the read's last line end: the pieces up to it are the chunk, read in place
                    j = len(parts) - 1
                    k = -1
                    while j >= 0:
                        k = parts[j].rfind(b"\n")
                        if k >= 0:
                            break
                        j -= 1
                    if j >= 0:
                        last = parts[j] if k + 1 == len(parts[j]) else memoryview(parts[j])[:k + 1]
                        buf = _Joined(([carry] if carry else []) + parts[:j] + [last])
                        rest = parts[j][k + 1:]
                        tail = bytes(rest) + b"".join(parts[j + 1:]) if j + 1 < len(parts) else bytes(rest)
                        r0 = rec0
                        c, line0, rec0 = scan(src, path, shard, buf, len(buf), base, line0, rec0, reader, fix_text,
                                               None if own is None else (*own, g))
                        g += rec0 - r0
                        yield c
                        base += len(buf)
                        carry = tail
                        continue
                    data = b"".join([carry] + parts) if parts else b""  # no line end: as below
                else:
                    data = reader.read(size, carry)  # the partial line, then the next bytes
                size = _READ
                if not data:
                    if carry:
                        r0 = rec0
                        c, line0, rec0 = scan(src, path, shard, carry, len(carry), base, line0, rec0, reader,
                                               fix_text, None if own is None else (*own, g))
                        g += rec0 - r0
                        yield c
                    break
                buf = data
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    carry = buf
                    # a text file's byte order mark is not part of its first line's text (_scan_text); review
                    # s35: it counted here, so a first line without a line end within 3 bytes of the limit
                    # was refused, and a longer one reported 3 bytes more than the record path
                    bom = 3 if scan is _scan_text and line0 == 0 and carry[:3] == UTF8_BOM else 0
                    if lim is not None and len(carry) > lim + 2 + bom:  # too long already: stream past the line
                        total = len(carry)
                        last = carry[-1:]
                        rest = b""
                        ended = False
                        while True:
                            more = reader.read(_READ)
                            if not more:
                                break
                            nl = more.find(b"\n")
                            if nl < 0:
                                total += len(more)
                                last = more[-1:]
                                continue
                            total += nl + 1
                            last = more[nl - 1:nl] if nl > 0 else last
                            rest = more[nl + 1:]
                            ended = True
                            break
                        nbytes = total - ((2 if last == b"\r" else 1) if ended else 0) - bom
                        c, line0, rec0 = _too_long_chunk(src, path, shard, line0, rec0, base + total, nbytes, reader,
                                                         None if own is None else (*own, g))
                        g += 1
                        yield c
                        base += total
                        carry = rest
                        if not ended:
                            break
                    continue
                r0 = rec0
                c, line0, rec0 = scan(src, path, shard, buf, cut, base, line0, rec0, reader, fix_text,
                                       None if own is None else (*own, g))
                g += rec0 - r0
                yield c
                base += cut
                carry = buf[cut:]
        finally:
            reader.close()
        pos = src._start_pos(shard + 1)


def _texts_of(pieces: List[Any]):
    """One StringTensor from chunk pieces: (offsets, data) numpy pairs or lists of str."""
    from ..string_tensor import StringTensor

    if any(isinstance(p, list) for p in pieces):
        strs: List[str] = []
        for p in pieces:
            if isinstance(p, list):
                strs += p
            else:
                strs += StringTensor(*_small(p), utf8=True).tolist()
        return StringTensor.from_list(strs)
    if len(pieces) == 1:
        return StringTensor(*_small(pieces[0]), utf8=True)
    offs, datas, shift = [], [], 0
    for k, p in enumerate(pieces):
        o, d = _rebase(p)
        offs.append(o if k == 0 else o[1:] + shift)
        datas.append(d)
        shift += int(o[-1])
    return StringTensor(*_small((np.concatenate(offs), np.concatenate(datas))), utf8=True)


def _rebase(pair):
    """(int64 offsets starting at 0, the payload they cover) as numpy arrays."""
    o, d = pair
    if not len(o):
        return np.zeros(1, dtype=np.int64), d[:0]
    o0, o1 = int(o[0]), int(o[-1])
    return o - o0 if o0 else o, d[o0:o1]


def _small(pair):
    """As torch tensors for StringTensor: int32 offsets where they fit."""
    o, d = _rebase(pair)
    if int(o[-1]) < (1 << 31):
        o = o.astype(np.int32)
    return torch.from_numpy(np.ascontiguousarray(o)), torch.from_numpy(np.ascontiguousarray(d))


def _slice_texts(texts, a: int, b: int):
    if isinstance(texts, list):
        return texts[a:b]
    o, d = texts
    return (o[a:b + 1], d)


def _compact_ids(parts: List[tuple]):
    """(offsets int64 tensor, data uint8 tensor, ok int8 array) of the values ``parts`` =
    [(data, starts, ends, ok)] point at, in order, as one (offsets, data) pair: a part whose
    values lie back to back in its data is one slice of it (the common case), else gathered."""
    offs, datas, shift = [np.zeros(1, dtype=np.int64)], [], 0
    for d, s_, e_, _ in parts:
        lens = e_ - s_
        if not len(lens):
            continue
        if len(s_) == 1 or (s_[1:] == e_[:-1]).all():
            piece = d[int(s_[0]):int(e_[-1])]
        else:
            total = int(lens.sum())
            src = np.repeat(s_ - (np.cumsum(lens) - lens), lens)
            piece = d[src + np.arange(total, dtype=np.int64)] if total else d[:0]
        offs.append(np.cumsum(lens) + shift)
        datas.append(piece)
        shift += len(piece)
    data = datas[0] if len(datas) == 1 else np.concatenate(datas) if datas else np.zeros(0, dtype=np.uint8)
    ok = np.concatenate([t[3] for t in parts]) if parts else np.zeros(0, dtype=np.int8)
    return (torch.from_numpy(np.concatenate(offs)), torch.from_numpy(np.ascontiguousarray(data)), ok)


def _assemble(key: str, pend: List[tuple], key2: Optional[str] = None):
    """(texts, LazyRecords, shards, lines) of the records [a, b) of each (chunk, a, b); with
    ``key2`` the chunks' pre-scanned ``key2`` values go to the LazyRecords."""
    segs, seg, lo, hi, shards, lines, pieces = [], [], [], [], [], [], []
    ids: List[tuple] = []
    parsed: Dict[int, Dict[str, Any]] = {}
    k = 0
    for c, a, b in pend:
        segs.append(c.buf)
        seg.append(np.full(b - a, len(segs) - 1, dtype=np.int32))
        lo.append(c.lo[a:b])
        hi.append(c.hi[a:b])
        shards.append(np.full(b - a, c.shard, dtype=np.int64))
        lines.append(c.lines[a:b])
        for j, r in c.parsed.items():
            if a <= j < b:
                parsed[k + j - a] = r
        pieces.append(_slice_texts(c.texts, a, b))
        if key2 is not None:
            if c.ids is None:
                z = np.zeros(b - a, dtype=np.int64)
                ids.append((np.zeros(0, dtype=np.uint8), z, z, np.zeros(b - a, dtype=np.int8)))
            else:
                d, s_, e_, ok = c.ids
                ids.append((d, s_[a:b], e_[a:b], ok[a:b]))
        k += b - a
    if not pend:
        from ..string_tensor import StringTensor

        z = np.zeros(0, dtype=np.int64)
        return StringTensor.from_list([]), LazyRecords(key, [], np.zeros(0, np.int32), z, z, {}), z, z
    field = None
    if key2 is not None:
        field = (key2, *_compact_ids(ids))
    recs = LazyRecords(key, segs, np.concatenate(seg), np.concatenate(lo), np.concatenate(hi), parsed, field)
    return _texts_of(pieces), recs, np.concatenate(shards), np.concatenate(lines)


def jsonl_blocks(src, n: int, fix_text=None, scan=None, fields: Sequence[str] = ()) -> Iterator[RecordBlock]:
    """``JsonlSource.iter_blocks``: blocks of ``n`` records from the current position.
    ``fields``: at most one more top-level string field decoded with the texts in the same
    scan (``records.field_strings(idx, that field)`` then reads no line again)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    key = src.text_key
    fields = [fields] if isinstance(fields, str) else list(fields)
    if len(fields) > 1 or any(not isinstance(f, str) or not f for f in fields):
        raise ValueError(f"fields must hold at most one non-empty str, got {fields!r}")
    key2 = fields[0] if fields and scan is None and fields[0] != key else None
    if key2 is not None:
        def scan(*a, **kw):
            return _scan(*a, **kw, key2=key2)
        scan._pieces = True  # reads the pieces of a read in place, as _scan does

    def position(c: _Chunk, i: int) -> Dict[str, Any]:
        p = src._start_pos(c.shard)
        p.update(offset=int(c.offs[i]), line=int(c.lines[i]), record=int(c.recs[i]),
                 frame=int(c.frames[i]), frame_uoff=int(c.fuoffs[i]))
        return p

    yield from _cut_blocks(src, _chunks(src, fix_text, scan=scan), n, lambda pend: _assemble(key, pend, key2),
                           position, src._start_pos)


def _cut_blocks(src, pieces, n: int, build, position, start) -> Iterator[RecordBlock]:
    """The records of ``pieces`` (chunks or Parquet pieces: ``len``, ``shard``, ``skipped``, ``error``,
    ``error_pos``) cut into blocks of ``n``, the last one shorter.  ``build(pend)`` makes (texts, records,
    shards, lines) of the spans ``pend`` = [(piece, a, b)]; ``position(piece, i)`` is the resume position
    after record i of a piece; ``start(k)`` the position at the start of file k.  ``src._pos`` follows the
    blocks handed out, and a piece's error is raised after its good records (the block
    they end is handed out short first)."""
    pend: List[tuple] = []  # (piece, a, b): records [a, b) of a piece
    have = 0

    def make(final: Optional[Dict[str, Any]], skipped_final: int) -> RecordBlock:
        texts, recs, shards, lines = build(pend)
        c, a, b = pend[-1]
        pos = final if final is not None else position(c, b - 1)
        sk = skipped_final if final is not None else int(c.skipped[b - 1])
        return RecordBlock(texts, recs, shards, lines, pos, sk)

    for c in pieces:
        a = 0
        m = len(c)
        while a < m:
            take = min(n - have, m - a)
            pend.append((c, a, a + take))
            have += take
            a += take
            if have == n:
                blk = make(None, 0)
                pend, have = [], 0
                src._pos = dict(blk.position)
                yield blk
        if c.error is not None:
            if have:  # the good records before the bad one: a short block, then the error
                blk = make(None, 0)
                blk.error_follows = True
                pend, have = [], 0
                src._pos = dict(blk.position)
                yield blk
            src._pos = c.error_pos
            raise c.error
    final = start(len(src.paths))
    src._pos = final
    if have:
        yield make(dict(final), src.skipped)


class StreamStep:
    """One step of a distributed pipeline's global stream (``stream_steps``): this rank's
    records of the step (``texts``, ``records``: :class:`LazyRecords`), their ordinals in the
    stream from where it started (``gidx``), the step's stream items (``n_items``, every
    rank's, bad ones included) and the source position after them (``position``)."""

    __slots__ = ("texts", "records", "gidx", "n_items", "position")

    def __init__(self, texts, records, gidx, n_items, position):
        self.texts, self.records, self.gidx, self.n_items, self.position = texts, records, gidx, n_items, position


def stream_steps(src, G: int, W: int, r: int, text: bool = False) -> Iterator[StreamStep]:
    """The global stream of an unsharded ``JsonlSource`` from its current position, ``G`` items
    (non-blank lines) a step; rank ``r`` of ``W`` owns the items whose ordinal is ``r`` mod ``W``
    (``G`` is a multiple of ``W``) and judges only those: its records, errors (file:line) and
    skips are those ``GlobalStream`` (``take`` + ``parse``) gives, the other ranks' lines are
    scanned, never parsed.  A bad record of this rank raises when its step is reached (the
    steps before it are yielded).  ``text=True``: an unsharded ``TextSource(per="line")``, every
    line an item (``_scan_text``; the records are empty dicts, :class:`TextRecords`)."""
    if G < 1 or W < 1 or G % W or not 0 <= r < W:
        raise ValueError(f"need G a positive multiple of W and 0 <= r < W, got G={G}, W={W}, r={r}")
    key = src.text_key
    pend: List[tuple] = []
    lo = 0      # ordinal of the current step's first item
    total = 0   # items seen

    def assemble(pend):
        texts, recs, _, _ = _assemble(key, pend)
        if text:
            recs = TextRecords(len(texts))
        return texts, recs

    for c in _chunks(src, None, (W, r), scan=_scan_text if text else None):
        ig = c.items[0]
        if len(ig):
            total = int(ig[-1]) + 1
        a = 0
        while True:
            end = lo + G
            b = int(np.searchsorted(c.gord, end, side="left"))
            if b > a:
                pend.append((c, a, b))
                a = b
            if c.error is not None and c.error_g < end:
                break
            if len(ig) and int(ig[-1]) >= end - 1:  # the step's last item is in this chunk
                k = end - 1 - int(ig[0])
                pos = src._start_pos(c.shard)
                pos.update(offset=int(c.items[1][k]), line=int(c.items[2][k]), record=int(c.items[3][k]),
                           frame=int(c.items[4][k]), frame_uoff=int(c.items[5][k]))
                texts, recs = assemble(pend)
                gidx = np.concatenate([c2.gord[a2:b2] for c2, a2, b2 in pend]) if pend else np.zeros(0, np.int64)
                pend = []
                lo = end
                src._pos = dict(pos)
                yield StreamStep(texts, recs, gidx, G, pos)
                continue
            break
        if c.error is not None:
            src._pos = c.error_pos
            raise c.error
    final = src._start_pos(len(src.paths))
    src._pos = final
    if total > lo:
        texts, recs = assemble(pend)
        gidx = np.concatenate([c2.gord[a2:b2] for c2, a2, b2 in pend]) if pend else np.zeros(0, np.int64)
        yield StreamStep(texts, recs, gidx, total - lo, dict(final))


# --------------------------------------------------------------------------- Parquet


class ArrowRecords(Sequence):
    """The records of a Parquet block without their text column: the selected rows of the
    other columns kept as Arrow (``table``, a ``pyarrow.Table``), read as a sequence of dicts;
    a row becomes a dict (``to_pylist`` of that row) the first time it is read, and is kept
    (so changes to a returned dict persist).  Compares equal to a list of the same dicts."""

    def __init__(self, table, n: int):
        self.table = table
        self._n = n  # (a table without columns may not keep its row count through concatenation)
        self._cache: Dict[int, Dict[str, Any]] = {}
        self._all = False

    def __len__(self) -> int:
        return self._n

    def _get(self, i: int) -> Dict[str, Any]:
        rec = self._cache.get(i)
        if rec is None:
            rec = self._cache[i] = self.table.slice(i, 1).to_pylist()[0] if self.table.num_columns else {}
        return rec

    def _fill(self) -> None:
        if self._all:
            return
        if self.table.num_columns:
            for i, rec in enumerate(self.table.to_pylist()):
                self._cache.setdefault(i, rec)
        else:
            for i in range(len(self)):
                self._cache.setdefault(i, {})
        self._all = True

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self._get(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if isinstance(i, (int, np.integer)):
            j = int(i)
            if j < 0:
                j += n
            if not 0 <= j < n:
                raise IndexError(f"record index {i} out of range for {n} records")
            return self._get(j)
        raise TypeError(f"records indices must be int or slice, not {type(i).__name__}")

    def __iter__(self):
        self._fill()
        return (self._cache[j] for j in range(len(self)))

    def __eq__(self, other: Any) -> bool:
        if isinstance(other, (list, tuple, Sequence)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return f"ArrowRecords({len(self)} records, columns {self.table.column_names})"


class _PqPiece:
    """Kept rows of one Arrow batch: texts (a StringTensor), the other columns (Arrow table),
    each row's index in its file (``lines``), the position and skip count after each row."""

    __slots__ = ("texts", "others", "shard", "lines", "groups", "rows", "recs", "skipped", "error", "error_pos")

    def __len__(self) -> int:
        return len(self.lines)


def _pq_texts(col, lim: Optional[int]):
    """The text column of a batch as (kind per row, UTF-8 sizes, string array or None):
    kind 0 a string, 1 null, 2 anything the exact per-row path must judge (another
    type, binary that is not UTF-8).  Never a Python object per row."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from ..arrow import int_values, null_mask

    t = col.type
    n = len(col)
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
        t = col.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        try:
            col = col.cast(pa.large_string() if pa.types.is_large_binary(t) else
                           pa.string_view() if pa.types.is_binary_view(t) else pa.string())
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            return np.full(n, 2, dtype=np.int8), None, None
        t = col.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        return np.full(n, 2, dtype=np.int8), None, None
    if lim and pa.types.is_string_view(t):
        # review s35: pyarrow has no binary_length kernel for string_view (ArrowNotImplementedError: every
        # string_view text column crashed the run under max_record_bytes, the CLI's default); its sizes
        # are read from a large_string copy, which the StringTensor then takes
        col = col.cast(pa.large_string())
    # the masks and sizes read from the Arrow buffers: to_numpy and fill_null (a pa.scalar) import
    # pandas on their first call in a process (~0.3 s; see luminamoon.arrow.string_array)
    kind = np.zeros(n, dtype=np.int8)
    if col.null_count:
        kind[null_mask(col)] = 1
    sizes = int_values(pc.binary_length(col)) if lim else None  # a null's size 0
    return kind, sizes, col


def _pq_pieces(src, fix_text=None) -> Iterator[_PqPiece]:
    """The ParquetSource's kept records from its current position, a batch at a time."""
    import pyarrow.parquet as pq

    from ..arrow import int64_array
    from ..string_tensor import StringTensor

    tc = src.text_column
    lim = src.max_record_bytes
    ws, rank = src.world_size, src.rank
    pos = dict(src._pos)
    while pos["shard"] < len(src.paths):
        shard = pos["shard"]
        path = src.paths[shard]
        if src._file_split and shard % ws != rank:
            pos = src._start(shard + 1)
            continue
        try:
            pf = pq.ParquetFile(path)
        except Exception as e:
            raise ValueError(f"{path}: not a readable Parquet file: {e}") from e
        names = pf.schema_arrow.names
        if tc not in names:
            raise ValueError(f"{path}: no column {tc!r} (columns: {names})")
        cols = None if src.columns is None else [c for c in src.columns if c in names]
        rec0 = pos["record"]
        while pos["row_group"] < pf.num_row_groups:
            g = pos["row_group"]
            first = pos["row"]
            r = 0
            for batch in src._batches(pf, path, g, cols):
                if r + batch.num_rows <= first:  # resumed inside the row group: skip what was read
                    r += batch.num_rows
                    continue
                cut = max(first - r, 0)
                if cut:
                    batch = batch.slice(cut)
                r = max(r, first)
                m = batch.num_rows
                rows = r + np.arange(m, dtype=np.int64)          # row in the row group
                recs = rec0 + np.arange(m, dtype=np.int64)       # record index in the file
                mine = np.ones(m, dtype=bool) if ws == 1 or src._file_split else (recs % ws == rank)
                col = batch.column(tc)
                kind, sizes, strs = _pq_texts(col, lim)
                if lim is not None and sizes is not None:
                    big = (kind == 0) & (sizes > lim)
                else:
                    big = np.zeros(m, dtype=bool)
                bad = mine & ((kind != 0) | big)
                c = _PqPiece()
                c.shard, c.error = shard, None
                slow: Optional[List[str]] = None  # texts judged row by row (a column of another type)
                if not bad.any():
                    keep = np.flatnonzero(mine)
                    skipped = np.full(len(keep), src.skipped, dtype=np.int64)
                else:  # the rows the exact per-row path judges, in order, as iterating does
                    keep_l: List[int] = []
                    sk: List[int] = []
                    if strs is None:
                        slow = []
                    for i in np.flatnonzero(mine).tolist():
                        if bad[i]:
                            where = f"{path}: row group {g}, row {int(rows[i])}"
                            try:
                                if kind[i] == 0:
                                    src._refuse_big(where, int(sizes[i]))
                                    continue
                                row = {tc: col[i].as_py()}
                                text = src._text_of(row, where)
                                if text is None:
                                    continue
                                nb = src._too_big(text)
                                if nb is not None:
                                    src._refuse_big(where, nb)
                                    continue
                                if slow is not None:
                                    slow.append(text)
                            except BadRecordError as e:
                                c.error = e
                                c.error_pos = src._start(shard)
                                c.error_pos.update(row_group=g, row=int(rows[i]) + 1, record=int(recs[i]) + 1)
                                break
                        keep_l.append(i)
                        sk.append(src.skipped)
                    keep = np.asarray(keep_l, dtype=np.int64)
                    skipped = np.asarray(sk, dtype=np.int64)
                sel = int64_array(keep)  # pa.array would import pandas (arrow.string_array)
                whole = len(keep) == m
                if slow is not None:
                    c.texts = StringTensor.from_list(slow)
                elif len(keep):
                    c.texts = StringTensor.from_arrow(strs if whole else strs.take(sel))
                else:
                    c.texts = StringTensor.from_list([])
                other = batch.drop_columns([tc]) if tc in batch.schema.names else batch
                c.others = other if whole else other.take(sel)
                c.lines = recs[keep]
                c.groups = np.full(len(keep), g, dtype=np.int64)
                c.rows = rows[keep] + 1
                c.recs = recs[keep] + 1
                c.skipped = skipped
                yield c
                r += m
                rec0 += m
                if c.error is not None:
                    return
            pos["row_group"] = g + 1
            pos["row"] = 0
        pos = src._start(shard + 1)


def parquet_blocks(src, n: int, fix_text=None) -> Iterator[RecordBlock]:
    """``ParquetSource.iter_blocks``: blocks of ``n`` records from the current position."""
    import pyarrow as pa

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")

    def position(c: _PqPiece, i: int) -> Dict[str, Any]:
        p = src._start(c.shard)
        p.update(row_group=int(c.groups[i]), row=int(c.rows[i]), record=int(c.recs[i]))
        return p

    def build(pend: List[tuple]):
        texts = [c.texts[a:b] if (a, b) != (0, len(c)) else c.texts for c, a, b in pend]
        others = [c.others.slice(a, b - a) for c, a, b in pend]
        tables = [pa.Table.from_batches([o]) for o in others]
        try:
            table = pa.concat_tables(tables, promote_options="default") if len(tables) > 1 else tables[0]
        except TypeError:  # older pyarrow
            table = pa.concat_tables(tables, promote=True) if len(tables) > 1 else tables[0]
        st = texts[0] if len(texts) == 1 else _cat_tensors(texts)
        shards = np.concatenate([np.full(b - a, c.shard, dtype=np.int64) for c, a, b in pend])
        lines = np.concatenate([c.lines[a:b] for c, a, b in pend])
        return st, ArrowRecords(table, sum(b - a for _, a, b in pend)), shards, lines

    yield from _cut_blocks(src, _pq_pieces(src, fix_text), n, build, position, src._start)


def _cat_tensors(parts):
    """One StringTensor (offsets layout) from several."""
    from ..string_tensor import StringTensor

    offs, datas, shift = [], [], 0
    for k, p in enumerate(parts):
        o, d = p.offsets.to(torch.int64).numpy(), p.data.numpy()
        o0, o1 = int(o[0]), int(o[-1])
        o = o - o0
        offs.append(o if k == 0 else o[1:] + shift)
        datas.append(d[o0:o1])
        shift += o1 - o0
    return StringTensor(*_small((np.concatenate(offs), np.concatenate(datas))), utf8=True)
