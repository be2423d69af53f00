"""Design §8: a resume changes nothing before it has succeeded.  A committed state whose dedup
log lost committed records (here: the last record, inside the committed part, damaged) is refused
-- and opening the log used to cut that damaged record off the file first, so the refusal came
after the file had changed (the evidence gone, a restored copy the only way back).  Now the log is
inspected read-only before it is opened: refused with OSError, the file byte for byte as it was.
"""
import os
import struct

import pytest

from luminamoon import _C
from luminamoon.data import ResumablePipeline

DOCS = [f"document {i}: " + "some words of a longer text " * (i % 5 + 2) for i in range(400)]


def _records(path: str) -> list:
    """[(offset, first_lsn, count)] of the WAL's records (format: dedup.h)."""
    data = open(path, "rb").read()
    out, off = [], 64
    while off + 24 <= len(data):
        magic, count, first = struct.unpack_from("<4sIQ", data, off)
        assert magic == b"LMR1"
        out.append((off, first, count))
        off += 24 + 16 * count
    return out


def _committed_state(tmp_path, **kw) -> str:
    sd = str(tmp_path / "state")
    with ResumablePipeline(DOCS, batch_size=50, state_dir=sd, prefetch_batches=0,
                           dedup={"wal_buffer_hashes": 16}, stages={"quality": False}, **kw) as p:
        for i, _ in enumerate(p):
            if i == 3:
                p.commit()
                break
    return sd


def test_damaged_committed_tail_is_refused_before_the_log_changes(tmp_path):
    sd = _committed_state(tmp_path)
    wal = os.path.join(sd, "dedup.wal")
    recs = _records(wal)
    off, first, count = recs[-1]
    assert first > 0 and count > 0
    data = bytearray(open(wal, "rb").read())
    data[off + 24 + 7] ^= 0x10  # one bit of the last record's payload
    open(wal, "wb").write(bytes(data))
    info = _C.dedup_wal_inspect(wal)
    assert (info["lsn_end"], info["lsn_kept"]) == (first + count, first)
    with pytest.raises(OSError, match="lost committed records") as e:
        ResumablePipeline(DOCS, batch_size=50, state_dir=sd, prefetch_batches=0, dedup={"wal_buffer_hashes": 16}, stages={"quality": False})
    assert open(wal, "rb").read() == bytes(data)  # was: the damaged record cut off the file
    assert "Nothing was changed" in str(e.value) and "torn or damaged" in str(e.value)
    # the intact log back: the resume works and goes on after the commit (batches 4..7)
    data[off + 24 + 7] ^= 0x10
    open(wal, "wb").write(bytes(data))
    with ResumablePipeline(DOCS, batch_size=50, state_dir=sd, prefetch_batches=0,
                           dedup={"wal_buffer_hashes": 16}, stages={"quality": False}) as p:
        n = sum(len(b.texts) for b in p)
    assert n == 400 - 4 * 50


def test_torn_uncommitted_tail_is_still_cut_and_the_resume_goes_on(tmp_path):
    """Past the committed LSN a torn record is what a crash leaves: the resume cuts it and goes on."""
    sd = _committed_state(tmp_path)
    wal = os.path.join(sd, "dedup.wal")
    size = os.path.getsize(wal)
    with open(wal, "ab") as f:  # a record header announcing more than was written
        f.write(struct.pack("<4sIQ", b"LMR1", 16, 10 ** 6) + b"\0" * 20)
    with ResumablePipeline(DOCS, batch_size=50, state_dir=sd, prefetch_batches=0,
                           dedup={"wal_buffer_hashes": 16}, stages={"quality": False}) as p:
        n = sum(len(b.texts) for b in p)
    assert n == 400 - 4 * 50
    assert os.path.getsize(wal) >= size


def test_distributed_resume_refuses_a_damaged_committed_tail_before_the_log_changes(tmp_path):
    from luminamoon.data import DistributedPipeline
    from luminamoon.data.checkpoint import wal_path

    sd = str(tmp_path / "dstate")
    kw = dict(batch_size=50, state_dir=sd, prefetch_batches=0, stages={"quality": False})
    with DistributedPipeline(DOCS, **kw) as p:
        for i, _ in enumerate(p):
            if i == 3:
                p.commit()
                break
    wal = wal_path(sd, 0, 1)
    off, first, count = _records(wal)[-1]
    data = bytearray(open(wal, "rb").read())
    data[off + 24 + 3] ^= 0x01
    open(wal, "wb").write(bytes(data))
    with pytest.raises(OSError, match="lost committed records"):
        DistributedPipeline(DOCS, **kw)
    assert open(wal, "rb").read() == bytes(data)  # was: cut by the open before the refusal


def test_a_dedup_log_from_another_state_folder_is_refused(tmp_path):
    """A dedup.wal copied in from another state folder (same settings, more hashes) was accepted:
    the resume cut it to the committed LSN and decided duplicates by the other run's documents
    (here: 150 of the 200 remaining documents dropped).  Each folder's log now has its own tag, the
    commit records it, and the resume compares it with the log's header before opening it."""
    import shutil

    kw = dict(batch_size=50, prefetch_batches=0, dedup={"wal_buffer_hashes": 16}, stages={"quality": False})
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    with ResumablePipeline(DOCS, state_dir=a, **kw) as p:
        for i, _ in enumerate(p):
            if i == 3:
                p.commit()
                break
    other = DOCS[::-1]  # another run: the last documents first
    with ResumablePipeline(other, state_dir=b, **kw) as p:
        for i, _ in enumerate(p):
            if i == 5:
                p.commit()
                break
    wal = os.path.join(a, "dedup.wal")
    shutil.copyfile(os.path.join(b, "dedup.wal"), wal)
    foreign = open(wal, "rb").read()
    with pytest.raises(OSError, match="not the log this state folder committed with"):
        ResumablePipeline(DOCS, state_dir=a, **kw)
    assert open(wal, "rb").read() == foreign  # nothing changed
    # a folder whose own log is in place resumes and delivers the 200 documents after the commit
    shutil.rmtree(a)
    with ResumablePipeline(DOCS, state_dir=a, **kw) as p:
        for i, _ in enumerate(p):
            if i == 3:
                p.commit()
                break
    with ResumablePipeline(DOCS, state_dir=a, **kw) as p:
        assert sum(len(x.texts) for x in p) == 200


def test_a_resume_over_another_list_is_refused(tmp_path):
    """A list has an identity now (its length and a CRC of 32 sampled records): resuming a state
    committed over another list was accepted and applied its position and dedup table to other
    records (here all 200 remaining documents dropped as duplicates)."""
    kw = dict(batch_size=50, prefetch_batches=0, stages={"quality": False})
    sd = str(tmp_path / "s")
    with ResumablePipeline(DOCS[::-1], state_dir=sd, **kw) as p:
        for i, _ in enumerate(p):
            if i == 3:
                p.commit()
                break
    with pytest.raises(ValueError, match="in-memory list of 400"):
        ResumablePipeline(DOCS, state_dir=sd, **kw)
    with ResumablePipeline(DOCS[::-1], state_dir=sd, **kw) as p:  # the same list resumes
        assert sum(len(x.texts) for x in p) == 200
