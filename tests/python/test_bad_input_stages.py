"""Bad input to the text stages gets a defined result or a clear error:
invalid UTF-8, NUL bytes, a 100 MB document, empty documents, unwritable or
foreign WAL paths, a WAL / state file of another format version, closed
objects, wrong types."""
import os
import struct

import pytest
import torch

import luminamoon as lm
from luminamoon import (ChainPipeline, FusedPipeline, PIIMasker, QualityFilter, StateTracker, StreamDeduplicator,
                        StringTensor, TextCleaner)

BAD = [b"ok \xff\xfe end", b"trunc \xe2\x82", b"\xc0\xaf overlong", b"surrogate \xed\xa0\x80 x", b"\x80 lone"]


def bytes_tensor(items):
    return StringTensor.from_list(items, validate=False)


def test_invalid_utf8_is_repaired_like_python_by_the_cleaner():
    r = TextCleaner()(bytes_tensor(BAD))
    # Python's decode("utf-8", "replace") is the reference of the repair (no other cleaning applies here)
    assert r.texts.tolist() == [b.decode("utf-8", "replace") for b in BAD]
    assert r.kept.all()
    assert TextCleaner().counters["invalid_sequences"] == 0  # a fresh object
    with pytest.raises(ValueError, match="UTF-8"):
        StringTensor.from_list(BAD)  # validation is on by default


def test_invalid_utf8_through_the_other_stages_is_defined():
    st = bytes_tensor(BAD + [BAD[0]])
    # PII and dedup work on bytes: invalid bytes pass through unchanged
    p = PIIMasker()(st)
    assert p.texts.tolist(as_bytes=True) == BAD + [BAD[0]]
    d = StreamDeduplicator()(st)
    assert d.kept.tolist() == [True] * 5 + [False]
    # the quality filter takes them as U+FFFD each: a decision per document, no error
    q = QualityFilter()(st)
    assert q.reasons.numel() == 6
    # the fused pipeline repairs first: its outputs are valid UTF-8 and equal the chain's
    f, c = FusedPipeline(quality=False)(st), ChainPipeline(quality=False)(st)
    assert f.texts.tolist() == c.texts.tolist() == [b.decode("utf-8", "replace") for b in BAD]
    assert f.reasons.tolist() == [0, 0, 0, 0, 0, 1]


def test_nul_bytes():
    texts = ["a\x00b", "\x00\x00", "mail x@example.org\x00 now"]
    r = TextCleaner()(texts)
    assert r.texts.tolist() == ["ab", "mail x@example.org now"]
    assert r.reasons.tolist() == [0, lm.stages.REASON_EMPTY, 0]
    # without the cleaner the bytes are data: kept, masked around, hashed
    assert PIIMasker()(texts).texts.tolist() == ["a\x00b", "\x00\x00", "mail <EMAIL>\x00 now"]
    d = StreamDeduplicator()
    assert d(["a\x00b", "a\x00c", "a"]).kept.tolist() == [True, True, True]
    f = FusedPipeline(cleaner=False, quality=False)(texts)
    assert f.texts.tolist() == ["a\x00b", "\x00\x00", "mail <EMAIL>\x00 now"]


def test_empty_documents():
    texts = ["", "", " \n\t ", ""]
    assert TextCleaner()(texts).reasons.tolist() == [lm.stages.REASON_EMPTY] * 4
    # lines are trimmed, the document is not stripped: " \n\t " -> "\n"
    assert TextCleaner(drop_empty=False)(texts).texts.tolist() == ["", "", "\n", ""]
    q = QualityFilter()(texts)
    assert not q.kept.any()
    assert PIIMasker()(texts).texts.tolist() == texts
    assert StreamDeduplicator()(texts).kept.tolist() == [True, False, True, False]
    f = FusedPipeline()(texts)
    assert len(f) == 0 and f.reasons.tolist() == [lm.stages.REASON_EMPTY] * 4


def test_a_100_mb_document():
    sentence = "The package of the system and the archive that have a mirror with a kernel. "
    big = sentence * (100_000_000 // len(sentence) + 1)
    assert len(big) >= 100_000_000
    st = StringTensor.from_list([big, "small one"])
    c = TextCleaner()(st)
    assert c.source_index.tolist() == [0, 1] and c.texts.data.numel() == len(big.rstrip(" ")) + 9
    # limits give a defined reason instead of work
    assert TextCleaner(max_doc_bytes=1 << 20)(st).reasons.tolist() == [lm.stages.REASON_TOO_LARGE, 0]
    assert QualityFilter(max_doc_bytes=1 << 20)(st).reasons.tolist()[0] == lm.stages.REASON_TOO_LARGE
    # the whole pipeline: a decision for each document (the big one is one repeated line: dropped)
    f = FusedPipeline(num_threads=2)(st)
    assert f.reasons.numel() == 2 and f.reasons[0] != 0
    d = StreamDeduplicator()
    assert d(StringTensor.from_list([big, big])).kept.tolist() == [True, False]


def test_unwritable_wal_paths(tmp_path):
    f = tmp_path / "regular_file"
    f.write_text("x")
    with pytest.raises(OSError) as ei:
        StreamDeduplicator(wal_path=f / "dedup.wal")  # a path under a regular file
    assert ei.value.errno == 20  # ENOTDIR
    assert str(f) in str(ei.value.filename)
    with pytest.raises(OSError) as ei:
        StreamDeduplicator(wal_path="/proc/luminamoon-test.wal")
    assert ei.value.errno is not None and ei.value.errno > 0
    with pytest.raises(OSError) as ei:
        StreamDeduplicator(wal_path=tmp_path / "missing" / "dir" / "d.wal")
    assert ei.value.errno == 2
    with pytest.raises(OSError):
        StreamDeduplicator(wal_path=tmp_path)  # a directory
    with pytest.raises(OSError):
        StateTracker(f / "state")


def test_wal_of_another_format_version(tmp_path):
    p = tmp_path / "d.wal"
    with StreamDeduplicator(wal_path=p) as d:
        d(["a", "b"])
    raw = bytearray(p.read_bytes())
    assert raw[:8] == b"LMDDWAL\0" and struct.unpack_from("<I", raw, 8)[0] == 1
    struct.pack_into("<I", raw, 8, 2)
    p.write_bytes(bytes(raw))
    with pytest.raises(lm.FormatVersionError, match="version"):
        StreamDeduplicator(wal_path=p)
    # garbage that is not a WAL at all: corrupt, an OSError, not data
    q = tmp_path / "junk.wal"
    q.write_bytes(os.urandom(200))
    with pytest.raises(lm.CorruptError) as ei:
        StreamDeduplicator(wal_path=q)
    assert isinstance(ei.value, OSError)


def test_wal_torn_tail_is_cut_not_read(tmp_path):
    p = tmp_path / "d.wal"
    with StreamDeduplicator(wal_path=p) as d:
        d([f"t{i}" for i in range(10)])
    with open(p, "ab") as fh:
        fh.write(b"LMR1" + os.urandom(30))  # a torn record
    with StreamDeduplicator(wal_path=p) as d:
        assert d.lsn == 10 and d.stats["tail_bytes_cut"] == 34


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def test_state_file_of_another_format_version(tmp_path):
    assert _crc32c(b"123456789") == 0xE3069283  # the CRC32C check value
    p = tmp_path / "state"
    with StateTracker(p) as st:
        st.commit(epoch=1, batch_index=2)
    raw = bytearray(p.read_bytes())
    struct.pack_into("<H", raw, 2, 2)  # version 2, with a valid CRC
    struct.pack_into("<I", raw, 60, _crc32c(bytes(raw[:60])))
    p.write_bytes(bytes(raw))
    with StateTracker(p) as st:
        with pytest.raises(lm.FormatVersionError):
            st.load()
        with pytest.raises(lm.FormatVersionError):
            st.commit(epoch=1)


def test_closed_objects():
    d = StreamDeduplicator()
    f = FusedPipeline(dedup=d)
    c = ChainPipeline(dedup=d)
    d.close()
    with pytest.raises(ValueError, match="closed"):
        f(["x"])
    with pytest.raises(ValueError, match="closed"):
        c(["x"])
    with pytest.raises(ValueError, match="closed"):
        d.sync()


def test_wrong_types():
    with pytest.raises(TypeError, match="normalize"):
        TextCleaner(normalize=1)
    with pytest.raises(ValueError, match="normalize"):
        TextCleaner(normalize="NFD")
    with pytest.raises(TypeError, match="remove_control"):
        TextCleaner(remove_control="yes")
    with pytest.raises(TypeError, match="wal_path"):
        StreamDeduplicator(wal_path=5)
    with pytest.raises(ValueError, match="seed"):
        StreamDeduplicator(seed=-1)
    with pytest.raises(TypeError, match="seed"):
        StreamDeduplicator(seed="1")
    with pytest.raises(TypeError, match="unexpected keyword argument .walpath."):
        StreamDeduplicator(walpath="x")
    with pytest.raises(TypeError):
        PIIMasker(ipv4_public_only="no")
    with pytest.raises(TypeError, match="texts"):
        TextCleaner()({"a": 1})
    with pytest.raises(TypeError):
        TextCleaner()(["ok", None])
    # raw binding calls check dtypes and devices
    with pytest.raises(TypeError, match="offsets"):
        lm._C.TextCleaner({}).run(torch.zeros(2, dtype=torch.float32), torch.zeros(0, dtype=torch.uint8), 1)
    with pytest.raises(ValueError, match="outside"):
        lm._C.TextCleaner({}).run(torch.tensor([0, 5]), torch.zeros(2, dtype=torch.uint8), 1)
    with pytest.raises(ValueError):
        lm._C.TextCleaner({}).run(torch.tensor([0, 2, 1]), torch.zeros(2, dtype=torch.uint8), 1)


def test_errors_leave_state_unchanged():
    d = StreamDeduplicator()
    d(["a"])
    with pytest.raises(ValueError):
        lm._C.FusedPipeline(None, None, d._obj, None).run(torch.tensor([0, 2, 1]),
                                                          torch.zeros(2, dtype=torch.uint8), 1)
    assert d.lsn == 1
