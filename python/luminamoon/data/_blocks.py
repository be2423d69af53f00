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
``skipped`` at that position, and a bad record raises after the blocks made of
the records before it were yielded.
"""
from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np
import torch

from .errors import BadRecordError

__all__ = ["RecordBlock", "LazyRecords", "jsonl_blocks"]

_READ = 1 << 20  # decompressed bytes read (and scanned) at a time
_OK, _BLANK, _SLOW, _TOO_LONG = 0, 1, 2, 3


class LazyRecords(Sequence):
    """The records of a block without their text field, as a read-only sequence of
    dicts; a record is decoded from its JSON line (``json.loads``) the first time it
    is read and kept (so changes to a returned dict persist).  Compares equal to a
    list of the same dicts."""

    def __init__(self, key: str, segs: List[Any], seg: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 parsed: Dict[int, Dict[str, Any]]):
        self._key = key
        self._segs, self._seg, self._lo, self._hi = segs, seg, lo, hi
        self._cache: Dict[int, Dict[str, Any]] = dict(parsed)

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
    at that position)."""

    __slots__ = ("texts", "records", "shards", "lines", "position", "skipped")

    def __init__(self, texts, records, shards, lines, position, skipped):
        self.texts, self.records, self.shards, self.lines = texts, records, shards, lines
        self.position, self.skipped = position, skipped

    def __len__(self) -> int:
        return len(self.records)


class _Chunk:
    """The records of one scanned piece of one file (arrays aligned per record)."""

    __slots__ = ("buf", "texts", "lo", "hi", "parsed", "lines", "offs", "recs", "frames", "fuoffs",
                 "skipped", "shard", "error", "error_pos")

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
          reader, fix_text=None) -> "tuple[_Chunk, int, int]":
    """Scans buf[:cut] (complete lines) read at uncompressed offset ``base`` after
    ``line0`` lines and ``rec0`` records of the file.  Returns the chunk and the
    file's line and record counts after it."""
    from .. import _C

    lim = src.max_record_bytes
    view = memoryview(buf)[:cut]
    ends_t, status_t, toff_t, tdata_t = _C.jsonl_scan(view, src.text_key, -1 if lim is None else lim)
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
    if ws > 1 and not src._file_split:
        mine = nonblank & (rec_idx % ws == src.rank)
    else:
        mine = nonblank
    idx = np.flatnonzero(mine)
    st = status[idx]
    c = _Chunk()
    c.buf, c.shard, c.error = buf, shard, None
    c.parsed = {}
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
                break
            keep_l.append(i)
            sk.append(src.skipped)
        keep = np.asarray(keep_l, dtype=np.int64)
        skipped = np.asarray(sk, dtype=np.int64)
        c.texts = texts
    c.lo = starts[keep]
    c.hi = ends[keep]
    c.lines = line0 + keep + 1
    c.offs = base + ends[keep]
    c.recs = rec_idx[keep] + 1
    c.skipped = skipped
    c.frames, c.fuoffs = _frames(getattr(reader, "_bounds", None) or [], c.offs)
    if len(c.offs) and hasattr(reader, "prune_bounds"):
        reader.prune_bounds(int(c.offs[-1]))
    return c, line0 + nlines, rec0 + (int(nb_cum[-1]) if nlines else 0)


def _take(o: np.ndarray, d: np.ndarray, s: np.ndarray) -> "tuple[np.ndarray, np.ndarray]":
    """The strings ``s`` (sorted indices) of an (offsets, data) pair, compacted."""
    lens = o[1:] - o[:-1]
    new_off = np.zeros(len(s) + 1, dtype=np.int64)
    np.cumsum(lens[s], out=new_off[1:])
    out = np.empty(int(new_off[-1]), dtype=np.uint8)
    for k, j in enumerate(s.tolist()):
        out[new_off[k]:new_off[k + 1]] = d[o[j]:o[j + 1]]
    return new_off, out


def _too_long_chunk(src, path: str, shard: int, line0: int, rec0: int, end_off: int, nbytes: int,
                    reader) -> "tuple[_Chunk, int, int]":
    """A line longer than max_record_bytes streamed past (never held whole)."""

    lineno = line0 + 1
    c = _Chunk()
    c.buf, c.shard, c.error, c.parsed, c.texts = b"", shard, None, {}, []
    mine = src._file_split or src.world_size == 1 or rec0 % src.world_size == src.rank
    if mine:
        try:
            src._refuse_big(f"{path}:{lineno}", nbytes)
        except BadRecordError as e:
            c.error = e
            c.error_pos = dict(src._start_pos(shard), offset=end_off, line=lineno, record=rec0 + 1)
    e = np.zeros(0, dtype=np.int64)
    c.lo = c.hi = c.lines = c.offs = c.recs = c.skipped = c.frames = c.fuoffs = e
    return c, lineno, rec0 + 1


def _chunks(src, fix_text=None) -> Iterator[_Chunk]:
    """The source's records chunk by chunk from its current position."""
    lim = src.max_record_bytes
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
            while True:
                data = reader.read(_READ)
                if not data:
                    if carry:
                        c, line0, rec0 = _scan(src, path, shard, carry, len(carry), base, line0, rec0, reader, fix_text)
                        yield c
                    break
                buf = carry + data if carry else data
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    carry = buf
                    if lim is not None and len(carry) > lim + 2:  # too long already: stream past the line
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
                        nbytes = total - ((2 if last == b"\r" else 1) if ended else 0)
                        c, line0, rec0 = _too_long_chunk(src, path, shard, line0, rec0, base + total, nbytes, reader)
                        yield c
                        base += total
                        carry = rest
                        if not ended:
                            break
                    continue
                c, line0, rec0 = _scan(src, path, shard, buf, cut, base, line0, rec0, reader, fix_text)
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


def jsonl_blocks(src, n: int, fix_text=None) -> Iterator[RecordBlock]:
    """``JsonlSource.iter_blocks``: blocks of ``n`` records from the current position."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    key = src.text_key
    pend: List[tuple] = []  # (chunk, a, b): records [a, b) of a chunk
    have = 0

    def position(c: _Chunk, i: int) -> Dict[str, Any]:
        p = src._start_pos(c.shard)
        p.update(offset=int(c.offs[i]), line=int(c.lines[i]), record=int(c.recs[i]),
                 frame=int(c.frames[i]), frame_uoff=int(c.fuoffs[i]))
        return p

    def make(final: Optional[Dict[str, Any]], skipped_final: int) -> RecordBlock:
        segs, seg, lo, hi, shards, lines, pieces = [], [], [], [], [], [], []
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
            k += b - a
        c, a, b = pend[-1]
        pos = final if final is not None else position(c, b - 1)
        sk = skipped_final if final is not None else int(c.skipped[b - 1])
        recs = LazyRecords(key, segs, np.concatenate(seg), np.concatenate(lo), np.concatenate(hi), parsed)
        return RecordBlock(_texts_of(pieces), recs, np.concatenate(shards), np.concatenate(lines), pos, sk)

    for c in _chunks(src, fix_text):
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
            src._pos = c.error_pos
            raise c.error
    final = src._start_pos(len(src.paths))
    src._pos = final
    if have:
        blk = make(dict(final), src.skipped)
        yield blk
