"""luminamoon._durable (the one atomic_write / atomic_replace / fsync_dir), the core's CRC32C
and read-only WAL reader as the Python layer sees them (_C.crc32c, _C.dedup_wal_inspect,
_C.dedup_wal_read_hashes), and the WAL tag of StreamDeduplicator."""
import os

import pytest

import luminamoon
from luminamoon import _C, _durable
from luminamoon.data import _prefetch, dist_state


def _crc32c_reference(data: bytes, crc: int = 0) -> int:  # bit by bit, from the definition
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
    return c ^ 0xFFFFFFFF


def test_one_home_for_atomic_write_and_fsync_dir():
    assert _prefetch.atomic_write is _durable.atomic_write
    assert _prefetch.fsync_dir is _durable.fsync_dir
    assert dist_state.atomic_write is _durable.atomic_write


def test_atomic_write_replaces_durably(tmp_path, monkeypatch):
    p = str(tmp_path / "f.json")
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    _durable.atomic_write(p, b"one")
    assert open(p, "rb").read() == b"one"
    assert os.listdir(tmp_path) == ["f.json"]
    assert synced[-1] == str(tmp_path) and synced[-2].startswith(p + ".")  # the file, then the folder
    synced.clear()
    _durable.atomic_write(p, b"two", durable=False)
    assert open(p, "rb").read() == b"two" and synced == []


def test_atomic_replace_failure_keeps_the_old_file_and_no_tmp(tmp_path):
    p = str(tmp_path / "f")
    _durable.atomic_write(p, b"old")
    with pytest.raises(KeyboardInterrupt):
        with _durable.atomic_replace(p) as tmp:
            open(tmp, "wb").write(b"half")
            raise KeyboardInterrupt
    assert open(p, "rb").read() == b"old"
    assert os.listdir(tmp_path) == ["f"]
    with _durable.atomic_replace(p, tmp=p + ".x.png") as tmp:
        assert tmp == p + ".x.png"
        open(tmp, "wb").write(b"new")
    assert open(p, "rb").read() == b"new" and os.listdir(tmp_path) == ["f"]


def test_atomic_write_error_names_the_path(tmp_path):
    p = str(tmp_path / "missing" / "f")
    with pytest.raises(OSError, match="writing .*missing/f") as e:
        _durable.atomic_write(p, b"x")
    assert e.value.filename == p
    with pytest.raises(FileNotFoundError):
        _durable.fsync_dir(str(tmp_path / "missing"))


def test_crc32c_is_the_core_and_matches_the_definition():
    import random

    rng = random.Random(5)
    for n in (0, 1, 7, 8, 9, 63, 64, 65, 1000):
        b = bytes(rng.randrange(256) for _ in range(n))
        assert _C.crc32c(b) == _crc32c_reference(b) == dist_state.crc32c(b)
        k = n // 3
        assert _C.crc32c(b[k:], _C.crc32c(b[:k])) == _crc32c_reference(b)  # running form
        assert _C.crc32c(memoryview(bytearray(b))) == _crc32c_reference(b)
    with pytest.raises(TypeError, match="bytes-like"):
        _C.crc32c("text")
    with pytest.raises(TypeError):
        _C.crc32c(memoryview(b"abcdef")[::2])  # not contiguous


def test_wal_tag_is_stored_and_checked(tmp_path):
    p = str(tmp_path / "d.wal")
    with luminamoon.StreamDeduplicator(wal_path=p, tag=b"cfg-1") as d:
        d(["a", "b", "a", "c"])
    info = _C.dedup_wal_inspect(p)
    assert info["status"] == "LM_OK" and info["tag"] == b"cfg-1".ljust(32, b"\0")
    assert info["lsn_end"] == 3 and info["valid_bytes"] == info["file_bytes"] == 64 + 24 + 3 * 16
    raw = open(p, "rb").read()
    assert raw[24:56] == b"cfg-1".ljust(32, b"\0")  # header bytes 24..55 (dedup.h)
    for kw in ({}, {"tag": b"cfg-2"}):
        with pytest.raises(ValueError, match="tag=") as e:
            luminamoon.StreamDeduplicator(wal_path=p, **kw)
        assert "cfg" not in str(e.value) or b"cfg-1".hex() in str(e.value)
    assert open(p, "rb").read() == raw  # refused without a change
    with luminamoon.StreamDeduplicator(wal_path=p, tag=b"cfg-1") as d:
        assert d.lsn == 3
    hashes, status = _C.dedup_wal_read_hashes(p, 3)
    assert status == "LM_OK" and hashes.equal(luminamoon.hash128(["a", "b", "c"]))
    hashes, status = _C.dedup_wal_read_hashes(p, 4)
    assert status == "LM_ERANGE" and len(hashes) == 3
    with pytest.raises(TypeError, match="tag must be bytes"):
        luminamoon.StreamDeduplicator(tag="cfg")
    with pytest.raises(ValueError, match="at most 32"):
        luminamoon.StreamDeduplicator(tag=b"x" * 33)
    with pytest.raises(FileNotFoundError):
        _C.dedup_wal_inspect(str(tmp_path / "none.wal"))
