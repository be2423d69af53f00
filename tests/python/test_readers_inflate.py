"""gzip inflate through ISA-L (``isal``) and through the standard library's zlib
(python/luminamoon/data/readers.py): both decoders give the same records, positions,
resumes and errors, on every gzip header form (FEXTRA / FNAME / FCOMMENT / FHCRC,
short and long), multi-member files, zero padding and damaged files.

ISA-L's streaming gzip header parser fails on headers split across calls (two or more
optional fields, or FHCRC): the reader feeds a member's whole header in its first
call; ``test_every_header_form`` fails without that."""
import gzip
import json
import os
import struct
import subprocess
import sys
import zlib

import pytest

import isal.isal_zlib  # noqa: F401  (a test dependency: a missing one fails the run, never skips it)
from luminamoon.data import readers as R
from luminamoon.data import sources as S


@pytest.fixture(params=["isal", "zlib"])
def decoder(request, monkeypatch):
    monkeypatch.setattr(R, "_ISAL", isal.isal_zlib if request.param == "isal" else None)
    return request.param


def _member(payload: bytes, flags: int, field: int, level: int = 6) -> bytes:
    """One gzip member written field by field (RFC 1952), each optional field ``field`` bytes."""
    hdr = b"\x1f\x8b\x08" + bytes([flags]) + struct.pack("<I", 0) + b"\x00\xff"
    if flags & 4:
        n = min(field, 0xFFFF)
        hdr += struct.pack("<H", n) + bytes(range(256)) * (n // 256) + bytes(range(n % 256))
    if flags & 8:
        hdr += b"n" * field + b"\0"
    if flags & 16:
        hdr += b"c" * field + b"\0"
    if flags & 2:
        hdr += struct.pack("<H", zlib.crc32(hdr) & 0xFFFF)
    co = zlib.compressobj(level, zlib.DEFLATED, -15)
    body = co.compress(payload) + co.flush()
    return hdr + body + struct.pack("<II", zlib.crc32(payload), len(payload) & 0xFFFFFFFF)


def _records(n: int, seed: int):
    return [{"id": seed * 100000 + i, "text": f"doc {i} " + "wörd " * (i % 37) + "x" * (i % 200)} for i in range(n)]


def _lines(recs) -> bytes:
    return b"".join(json.dumps(r, ensure_ascii=False).encode() + b"\n" for r in recs)


def _read_all(reader, n: int = 7777) -> bytes:
    out = []
    while True:
        d = reader.read(n)
        if not d:
            return b"".join(out)
        out.append(d)


@pytest.mark.parametrize("flags", range(0, 32, 2))
@pytest.mark.parametrize("field", [0, 7, 300, 70000])
def test_every_header_form(tmp_path, decoder, flags, field):
    """Two members and zero padding, every combination of optional header fields, fields
    of 0..70,000 bytes (longer than the first piece fed, and than ISA-L's header limit):
    the bytes read equal the payload, the records equal the source's, record by record
    and in blocks."""
    a, b = _records(300, 1), _records(2000, 2)
    members = _member(_lines(a), flags, field) + _member(_lines(b), flags, field, level=1)
    assert gzip.decompress(members) == _lines(a + b)  # the file is valid gzip
    p = tmp_path / "h.jsonl.gz"
    p.write_bytes(members + b"\0" * 13)
    assert _read_all(R._FramedReader(str(p), "gzip", 0, 0, 0)) == _lines(a + b)
    got = list(S.JsonlSource(str(p), gzip_index=False))
    assert got == a + b
    blocks = list(S.JsonlSource(str(p), gzip_index=False).iter_blocks(512))
    assert [t for blk in blocks for t in blk.texts.tolist()] == [r["text"] for r in a + b]
    assert [r for blk in blocks for r in blk.records] == [{"id": r["id"]} for r in a + b]


def test_resume_inside_each_member(tmp_path, decoder):
    """Positions taken with one decoder resume with the other to the same tail (the
    member boundaries are the same)."""
    recs = [_records(150, k) for k in range(5)]
    blob = b"".join(_member(_lines(r), (8 if k % 2 else 0x1E), 40) for k, r in enumerate(recs))
    p = tmp_path / "m.jsonl.gz"
    p.write_bytes(blob)
    flat = [x for r in recs for x in r]
    src = S.JsonlSource(str(p), gzip_index=False)
    positions = []
    for i, _ in enumerate(src):
        if i % 97 == 0:
            positions.append((i + 1, json.loads(json.dumps(src.position()))))
    assert len(positions) > 5
    other = None if decoder == "isal" else isal.isal_zlib
    R._ISAL, saved = other, R._ISAL
    try:
        for k, pos in positions:
            assert list(S.JsonlSource(str(p), gzip_index=False, position=pos)) == flat[k:]
    finally:
        R._ISAL = saved


@pytest.mark.parametrize("damage", ["crc", "size", "body", "header_crc", "cut", "garbage"])
def test_damaged_member_is_an_error(tmp_path, decoder, damage):
    """A damaged member raises ValueError naming the file, with both decoders, in both
    reading paths; on_error="skip" does not skip a damaged file."""
    payload = _lines(_records(3000, 3))
    m = bytearray(_member(payload, 0x1A if damage == "header_crc" else 8, 20))
    if damage == "crc":
        m[-8] ^= 1
    elif damage == "size":
        m[-4] ^= 1
    elif damage == "body":
        m[len(m) // 2] ^= 0xFF
    elif damage == "header_crc":
        m[m.index(b"c\0") + 2] ^= 1  # the header CRC's first byte
    elif damage == "cut":
        m = m[: len(m) * 2 // 3]
    else:
        m += b"trailing, not gzip"
    p = tmp_path / "bad.jsonl.gz"
    p.write_bytes(bytes(m))
    for read in (lambda s: list(s), lambda s: [len(b) for b in s.iter_blocks(256)]):
        with pytest.raises(ValueError) as ei:
            read(S.JsonlSource(str(p), gzip_index=False, on_error="skip"))
        assert not isinstance(ei.value, S.BadRecordError)
        assert str(p) in str(ei.value) and "gzip" in str(ei.value)


def test_gzip_header_len():
    for flags in range(0, 32, 2):
        for field in (0, 5, 300):
            m = _member(b"abc\n", flags, field)
            body = zlib.compressobj(6, zlib.DEFLATED, -15)
            h = len(m) - len(body.compress(b"abc\n") + body.flush()) - 8
            assert R._gzip_header_len(m) == h
            for cut in range(h):  # a header not yet whole
                assert R._gzip_header_len(m[:cut]) is None
    assert R._gzip_header_len(b"PK\x03\x04" + b"\0" * 20) == -1  # not gzip: zlib names it
    assert R._gzip_header_len(b"\x1f\x8b\x07" + b"\0" * 20) == -1  # not deflate
    assert R._gzip_header_len(b"\x1f\x8b\x08\x20" + b"\0" * 20) == -1  # reserved flag bit


def test_switch_off_and_fallback():
    """LM_NO_ISAL=1 selects zlib; without the isal package the reader uses zlib."""
    code = ("import luminamoon.data.readers as R; print(R._ISAL is None)")
    env = dict(os.environ, LM_NO_ISAL="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
    env["LM_NO_ISAL"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    code = ("import sys; sys.modules['isal'] = None; import luminamoon.data.readers as R; print(R._ISAL is None)")
    env.pop("LM_NO_ISAL")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
