"""Line readers of the file sources: plain, gzip (indexed or by member) and zstd (by frame).

Every reader has ``readline() -> bytes`` (``b""`` at EOF, a :class:`TooLong` for a
line longer than the limit), ``.offset`` (uncompressed offset of the next line) and
``.frame`` / ``.frame_uoff`` (compressed offset and uncompressed offset of the
member/frame holding ``.offset``; 0, 0 when not applicable), so that a source's
position is a few integers and a resume starts at the right member/frame.
``data/sources.py`` builds its ``JsonlSource`` / ``TextSource`` on these; what a
resume costs for each format is written at the top of that module.

gzip members are inflated by ISA-L (``isal.isal_zlib``, 2-3x faster than zlib on
x86-64 and ARM) when the ``isal`` package is installed, and by the standard
library's zlib otherwise or with ``LM_NO_ISAL=1`` in the environment; the bytes,
member boundaries and positions are the same either way.  A member whose header
does not fit in the first piece fed (header fields over 64 KiB) or that is not a
plain deflate gzip header goes through zlib (ISA-L's streaming header parser
fails on some headers split across calls), so that zlib names what is wrong.
"""
from __future__ import annotations

import hashlib
import os
import zlib
from typing import Optional

from .._durable import atomic_replace

_CHUNK = 1 << 16
_MIN_PIECE = 256  # smallest piece of compressed input fed to a decoder at once


def _compression(path: str) -> str:
    path = os.fspath(path)
    if path.endswith(".gz") or path.endswith(".gzip"):
        return "gzip"
    if path.endswith(".zst") or path.endswith(".zstd"):
        return "zstd"
    return "plain"


def _isal_zlib():
    """``isal.isal_zlib`` when installed and not switched off by ``LM_NO_ISAL=1``, else None."""
    if os.environ.get("LM_NO_ISAL", "") not in ("", "0"):
        return None
    try:
        from isal import isal_zlib
    except ImportError:
        return None
    return isal_zlib


_ISAL = _isal_zlib()
_GZ_HEADER_MAX = 1 << 16  # a gzip header longer than this goes through zlib


def _gzip_header_len(b) -> Optional[int]:
    """Length of the gzip member header at the start of ``b``; None when ``b`` ends
    inside it, -1 when it is not a deflate gzip header zlib would take silently."""
    n = len(b)
    if n < 10:
        return -1 if (n >= 1 and b[0] != 0x1F) or (n >= 2 and b[1] != 0x8B) or (n >= 3 and b[2] != 8) else None
    if b[0] != 0x1F or b[1] != 0x8B or b[2] != 8 or b[3] & 0xE0:
        return -1
    flg, i = b[3], 10
    if flg & 4:  # FEXTRA
        if n < i + 2:
            return None
        i += 2 + b[i] + (b[i + 1] << 8)
    for bit in (8, 16):  # FNAME, FCOMMENT: zero-terminated
        if flg & bit:
            if i >= n:
                return None
            j = b.find(b"\0", i)
            if j < 0:
                return None
            i = j + 1
    if flg & 2:  # FHCRC
        i += 2
    return i if i <= n else None


def _zstd():
    try:
        import zstandard
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("reading .zst files needs the 'zstandard' package (pip install zstandard)") from e
    return zstandard



# ---------------------------------------------------------------------------
# line readers: readline() -> bytes (b"" at EOF); .offset = uncompressed offset
# of the next line; .frame / .frame_uoff = compressed offset and uncompressed
# offset of the member/frame holding .offset (0, 0 when not applicable).


class TooLong:
    """What a reader returns for a line longer than the limit: its length only."""

    __slots__ = ("nbytes",)

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


def _compressed_magic(head: bytes) -> Optional[str]:
    """"gzip" / "zstd" when ``head`` (a file's first 4 bytes) opens a gzip member or a zstd frame:
    never the start of UTF-8 text (0x8B and 0xB5 are continuation bytes), so a plain-named file
    starting so is compressed data under the wrong name (review s35: a ``.jsonl`` holding gzip was
    read as text, "invalid UTF-8 at byte 1", or every line skipped with on_error="skip")."""
    if head[:3] == b"\x1f\x8b\x08":
        return "gzip"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


class _PlainReader:
    def __init__(self, path: str, offset: int):
        self._f = open(path, "rb")
        size = os.fstat(self._f.fileno()).st_size
        if offset > size:
            self._f.close()
            raise ValueError(f"{path}: position {offset} is past the end of the file ({size} bytes): "
                             "the file changed since the position was taken")
        if offset == 0:
            what = _compressed_magic(self._f.read(4))
            if what is not None:
                self._f.close()
                raise ValueError(f"{path}: the file holds {what}-compressed data but its name does not end in "
                                 f"{'.gz' if what == 'gzip' else '.zst'}: rename it (read as plain text, "
                                 "every line would be a bad record)")
        self._f.seek(offset)
        self.offset = offset
        self.frame = 0
        self.frame_uoff = 0

    def readline(self, limit: Optional[int] = None):
        """The next line (b"" at EOF); with ``limit``, a longer line is skipped
        without being held in memory and returned as ``TooLong(its length)``."""
        if limit is None:
            line = self._f.readline()
            self.offset += len(line)
            return line
        line = self._f.readline(limit + 1)
        self.offset += len(line)
        if len(line) <= limit:
            return line
        total = len(line)
        prev = b""
        while not line.endswith(b"\n"):
            prev = line
            line = self._f.readline(_CHUNK)
            if not line:
                break
            total += len(line)
            self.offset += len(line)
        # review s35: the "\r" of a "\r\n" may end the piece before (it was counted as text)
        end = 2 if (prev[-1:] + line)[-2:] == b"\r\n" else 1 if line.endswith(b"\n") else 0
        return TooLong(total - end)  # the line without its ending

    def read(self, n: int, head: bytes = b"") -> bytes:
        """``head`` followed by up to ``n`` more bytes of the file (b"" at EOF: no byte left);
        lines not split apart by anything but ``n``.  ``.offset`` counts the new bytes only."""
        data = self._f.read(n)
        self.offset += len(data)
        if not data:
            return b""
        return head + data if head else data

    def read_parts(self, n: int) -> list:
        """``read(n)`` as a list of pieces to be read as their concatenation ([] at EOF)."""
        data = self.read(n)
        return [data] if data else []

    def close(self) -> None:
        self._f.close()


def _check_gzip_whole(path: str) -> None:
    """Inflates ``path`` once (output discarded, bounded memory) and raises ValueError
    unless it is whole: every gzip member complete (trailer and CRC checked by zlib)
    and nothing after the last member but zero padding.  indexed_gzip reads a
    truncated file or trailing garbage as if complete, so its index is only built
    (and cached) for a file that passed this check."""
    with open(path, "rb") as f:
        dec = None
        cpos = 0  # compressed offset of data[0]
        padding = False
        while True:
            data = f.read(_CHUNK)
            if not data:
                break
            while data:
                if padding or (dec is None and data[0] == 0):
                    padding = True
                    rest = data.lstrip(b"\0")
                    if rest:
                        raise ValueError(f"{path}: corrupt gzip data: non-zero bytes at byte "
                                         f"{cpos + len(data) - len(rest)} after the zero padding that "
                                         "follows the last gzip member")
                    cpos += len(data)
                    break
                if dec is None:
                    dec = zlib.decompressobj(31)
                    start = cpos
                try:
                    dec.decompress(data, _CHUNK)
                except zlib.error as e:
                    what = ("trailing data after the last gzip member is not gzip" if start and start == cpos
                            else "corrupt gzip data")
                    raise ValueError(f"{path}: {what} (member at byte {start}): {e}") from e
                if dec.eof:
                    rest = dec.unused_data
                    cpos += len(data) - len(rest)
                    data = rest
                    dec = None
                else:
                    tail = dec.unconsumed_tail
                    cpos += len(data) - len(tail)
                    data = tail
        if dec is not None:
            raise ValueError(f"{path}: truncated gzip stream (the member at byte {start} ends before its "
                             f"trailer; the file has {cpos} bytes)")


class _IndexedGzipReader(_PlainReader):
    """gzip through indexed_gzip with a cached full index (see module doc).  The
    file is checked whole (``_check_gzip_whole``) before its index is built; the
    cache key includes size and mtime, so a cached index stands for a checked file."""

    def __init__(self, path: str, offset: int, index_dir: str, spacing: int):
        import indexed_gzip

        st = os.stat(path)
        # "v2": indexes cached before files were checked whole are not reused
        key = hashlib.sha1(f"v2\0{os.path.abspath(path)}\0{st.st_size}\0{st.st_mtime_ns}\0{spacing}".encode()).hexdigest()
        index_path = os.path.join(index_dir, key + ".gzidx")
        self._f = indexed_gzip.IndexedGzipFile(path, spacing=spacing, drop_handles=False, buffer_size=_CHUNK)
        try:
            loaded = False
            if os.path.exists(index_path):
                try:
                    self._f.import_index(index_path)
                    loaded = True
                except Exception:  # a stale or damaged cache entry: rebuild it
                    self._f.close()
                    self._f = indexed_gzip.IndexedGzipFile(path, spacing=spacing, drop_handles=False, buffer_size=_CHUNK)
            if not loaded:
                _check_gzip_whole(path)
                self._f.build_full_index()
                try:  # the index is a cache: a folder we cannot write (read-only, full) costs speed, not the read
                    os.makedirs(index_dir, exist_ok=True)
                    with atomic_replace(index_path, durable=False) as tmp:
                        self._f.export_index(tmp)
                except OSError:
                    pass
            self._f.seek(offset)
        except Exception as e:
            self._f.close()
            if isinstance(e, ValueError) or (isinstance(e, OSError) and type(e).__name__ != "ZranError"):
                raise
            raise ValueError(f"{path}: not a readable gzip file: {e}") from e
        self.offset = offset
        self.frame = 0
        self.frame_uoff = 0


class _FramedReader:
    """gzip members (zlib) or zstd frames, each decompressed independently.
    A resume seeks to the compressed start of the member/frame holding the
    position and discards at most that member's bytes before it."""

    def __init__(self, path: str, comp: str, offset: int, frame: int, frame_uoff: int):
        if not (frame_uoff <= offset and frame >= 0):
            raise ValueError(f"{path}: inconsistent position (frame_uoff {frame_uoff} > offset {offset})")
        self._path = path
        self._comp = comp
        self._f = open(path, "rb")
        self._f.seek(frame)
        self._cpos = frame          # compressed offset of the next byte in self._in
        self._in = b""              # compressed bytes not yet fed
        self._piece = _MIN_PIECE     # compressed bytes fed per decompress call (see _fill)
        self._dec = None
        self._eof = False
        self._buf = bytearray()     # decompressed, not yet returned
        self._buf_uoff = frame_uoff  # uncompressed offset of self._buf[0]
        self._produced = frame_uoff  # uncompressed offset of the end of what was decompressed
        self._bounds = [(frame_uoff, frame)]  # (uoff, coff) of member starts not yet passed
        self._failed: Optional[BaseException] = None  # see read()
        self.offset = frame_uoff
        self.frame, self.frame_uoff = frame, frame_uoff
        skip = offset - frame_uoff
        while skip > 0:
            if not self._buf and not self._fill():
                raise ValueError(f"{path}: position {offset} is past the end of the file")
            n = min(skip, len(self._buf))
            del self._buf[:n]
            self._buf_uoff += n
            self.offset += n
            skip -= n
        self._update_frame()

    def _new_decoder(self):
        """A decoder for the member / frame starting at ``self._in[0]``; for gzip with ISA-L,
        reads ahead until ``self._in`` holds the member's whole header and returns how many
        bytes the first call must be fed (the whole header: see the module doc)."""
        if self._comp == "gzip":
            if _ISAL is not None:
                h = _gzip_header_len(self._in)
                while h is None and len(self._in) < _GZ_HEADER_MAX:
                    more = self._f.read(_CHUNK)
                    if not more:
                        break
                    self._in += more
                    h = _gzip_header_len(self._in)
                if h is not None and 0 < h <= _GZ_HEADER_MAX:
                    return _ISAL.decompressobj(31), h
            return zlib.decompressobj(31), 0
        return _zstd().ZstdDecompressor().decompressobj(), 0

    def _fill(self) -> bool:
        """Decompresses more bytes into self._buf; False at end of file."""
        out = self._more()
        if out is None:
            return False
        self._buf += out
        return True

    def _more(self) -> Optional[bytes]:
        """The next decompressed bytes (never empty); None at end of file."""
        while not self._eof:
            if not self._in:
                self._in = self._f.read(_CHUNK)
                if not self._in:
                    if self._dec is not None:
                        raise ValueError(f"{self._path}: truncated {self._comp} stream")
                    self._eof = True
                    return None
            if self._dec is None:
                if self._comp == "zstd" and len(self._in) >= 4:
                    magic = int.from_bytes(self._in[:4], "little")
                    if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame (e.g. a seek table)
                        need = 8
                        while len(self._in) < need:
                            more = self._f.read(_CHUNK)
                            if not more:
                                raise ValueError(f"{self._path}: truncated zstd skippable frame")
                            self._in += more
                        size = int.from_bytes(self._in[4:8], "little") + 8
                        while len(self._in) < size:
                            more = self._f.read(_CHUNK)
                            if not more:
                                raise ValueError(f"{self._path}: truncated zstd skippable frame")
                            self._in += more
                        self._in = self._in[size:]
                        self._cpos += size
                        continue
                if self._comp == "gzip" and not self._in.strip(b"\0"):
                    self._cpos += len(self._in)  # zero padding after the last member
                    self._in = b""
                    continue
                self._dec, first = self._new_decoder()
                self._piece = max(self._piece, first)
                self._bounds.append((self._produced, self._cpos))
            # Feed a piece at a time, so one call's output stays bounded even where the
            # data expands a lot (long runs; a zstd block can hold 128 KiB in 4 bytes):
            # the piece doubles up to _CHUNK while the output stays under 64x the input
            # and drops back to _MIN_PIECE otherwise.  At most ~8 MiB per call.
            step = self._piece
            piece = self._in[:step] if len(self._in) > step else self._in
            fed = len(piece)
            try:
                out = self._dec.decompress(piece)
            except Exception as e:
                raise ValueError(f"{self._path}: corrupt {self._comp} data near byte {self._cpos}: {e}") from e
            if self._dec.eof:
                rest = self._dec.unused_data
                self._cpos += fed - len(rest)
                self._in = rest + self._in[fed:]
                self._dec = None
            else:
                self._cpos += fed
                self._in = self._in[fed:]
            self._piece = min(2 * step, _CHUNK) if len(out) <= 64 * fed else _MIN_PIECE
            if out:
                self._produced += len(out)
                return out
        return None

    def _update_frame(self) -> None:
        b = self._bounds
        i = 0
        while i + 1 < len(b) and b[i + 1][0] <= self.offset:
            i += 1
        # A member that starts exactly at the offset but has produced nothing
        # yet is also a valid (and cheaper) resume point.
        del b[:i]
        self.frame_uoff, self.frame = b[0]

    def _consume(self, n: int) -> None:
        del self._buf[:n]
        self._buf_uoff += n
        self.offset += n

    def readline(self, limit: Optional[int] = None):
        """As _PlainReader.readline: a line longer than ``limit`` is skipped
        (its bytes dropped as they are decompressed) and returned as TooLong."""
        start = 0
        skipped = 0
        cr = False  # the last byte dropped was "\r" (review s35: of a "\r\n" cut by a drop, it counted as text)
        while True:
            nl = self._buf.find(b"\n", start)
            if nl >= 0:
                n = nl + 1
                break
            if limit is not None and len(self._buf) > limit - skipped:
                skipped += len(self._buf)  # too long already: drop what we hold, keep counting
                cr = self._buf[-1] == 13
                self._consume(len(self._buf))
            start = len(self._buf)
            if not self._fill():
                n = len(self._buf)
                break
        if limit is not None and skipped + n > limit:
            end = 0
            if n and self._buf[n - 1] == 10:
                end = 2 if (self._buf[n - 2] == 13 if n >= 2 else cr) else 1
            self._consume(n)
            self._update_frame()
            return TooLong(skipped + n - end)  # the line without its ending
        line = bytes(self._buf[:n])
        self._consume(n)
        self._update_frame()
        return line

    def read(self, n: int, head: bytes = b"") -> bytes:
        """``head`` followed by at least ``n`` more decompressed bytes, fewer only at the end
        of the file, more by at most the rest of one decompression call's output (b"" at EOF:
        no byte left); joined once, so a caller's partial line costs no second copy of the
        block.  ``.offset`` counts the new bytes only.  Member starts stay in ``_bounds``
        until ``prune_bounds`` (the caller maps offsets inside what it read to members).
        A decompression error after some bytes were read is raised by the next call."""
        parts = self.read_parts(n)
        if not parts:
            return b""
        if head:
            parts.insert(0, head)
        return b"".join(parts) if len(parts) > 1 else bytes(parts[0])

    def read_parts(self, n: int) -> list:
        """``read(n)`` as the decompressed pieces (bytes) to be read as their concatenation, not
        joined ([] at EOF): a caller that scans them in place copies none."""
        if self._failed is not None:
            e, self._failed = self._failed, None
            raise e
        parts = []
        got = len(self._buf)
        if got:
            parts.append(self._buf)
            self._buf = bytearray()
        try:
            while got < n:
                out = self._more()
                if out is None:
                    break
                parts.append(out)
                got += len(out)
        except ValueError as e:
            if not got:
                raise
            self._failed = e
        self.offset += got
        self._buf_uoff = self.offset
        if not got:
            return []
        return parts

    def prune_bounds(self, offset: int) -> None:
        """Forgets the member starts before the one holding ``offset``."""
        b = self._bounds
        i = 0
        while i + 1 < len(b) and b[i + 1][0] <= offset:
            i += 1
        del b[:i]

    def close(self) -> None:
        self._f.close()
