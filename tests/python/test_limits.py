"""Resource limits: the prefetch queues' memory bound, the PII masker's document-size
limit, the dedup table's entry bound, and how each is reported."""
import threading
import time

import pytest
import torch

import luminamoon
from luminamoon import FusedPipeline, PIIMasker, StreamDeduplicator, reason_name
from luminamoon.data import DistributedPipeline, ResumablePipeline
from luminamoon.data._prefetch import END, Prefetcher


def _records(n, seed=0):
    """Documents of varied length (so batches differ in size), all distinct."""
    out = []
    for i in range(n):
        words = " ".join(f"w{(i * 7 + k * seed) % 1013}" for k in range(5 + (i * 37) % 300))
        out.append({"id": i, "text": f"Record {i}. {words}."})
    return out


def _drain(pipe, slow=0.0):
    got = []
    stats = []
    for b in pipe:
        got.append((b.index, b.texts.tolist(), b.reasons.tolist(), b.memory_bytes))
        stats.append(pipe.prefetch_stats)
        if slow:
            time.sleep(slow)
    return got, stats


# ------------------------------------------------------------------ prefetch

def test_prefetch_memory_bound_holds_and_output_is_unchanged():
    recs = _records(1200)
    ref, _ = _drain(ResumablePipeline(recs, pipeline=None, dedup=False, batch_size=40, prefetch_batches=0))
    sizes = [m for *_, m in ref]
    assert min(sizes) > 0
    bound = int(2.5 * max(sizes))  # room for two batches, not for the 16 allowed by prefetch_batches
    pipe = ResumablePipeline(recs, pipeline=None, dedup=False, batch_size=40, prefetch_batches=16,
                             max_prefetch_bytes=bound)
    got, stats = _drain(pipe, slow=0.01)
    # nothing lost, reordered or changed by the bound
    assert [g[:3] for g in got] == [r[:3] for r in ref]
    final = pipe.prefetch_stats
    assert final["max_bytes"] == bound and final["max_batches"] == 16
    assert 0 < final["peak_bytes"] <= bound
    assert final["peak_batches"] <= 3  # 2.5 batches of the largest size: at most 3 smaller ones fit
    assert final["producer_waits"] > 0  # the bound (not the depth of 16) made the producer wait
    assert all(s["queued_bytes"] <= bound for s in stats)
    pipe.close()


def test_prefetch_without_byte_bound_fills_to_depth():
    recs = _records(600)
    pipe = ResumablePipeline(recs, pipeline=None, dedup=False, batch_size=40, prefetch_batches=6,
                             max_prefetch_bytes=None)
    it = iter(pipe)
    first = next(it)
    deadline = time.time() + 30
    while pipe.prefetch_stats["queued_batches"] < 6 and time.time() < deadline:
        time.sleep(0.01)
    s = pipe.prefetch_stats
    assert s["queued_batches"] == 6 and s["max_bytes"] is None
    assert s["queued_bytes"] > first.memory_bytes  # six batches are held
    pipe.close()


def test_batch_larger_than_the_bound_is_delivered_alone():
    recs = _records(300)
    pipe = ResumablePipeline(recs, pipeline=None, dedup=False, batch_size=50, prefetch_batches=4,
                             max_prefetch_bytes=1)
    got, stats = _drain(pipe)
    assert sum(len(g[1]) for g in got) == 300  # no deadlock, nothing lost
    assert max(s["queued_batches"] for s in stats) <= 1
    assert pipe.prefetch_stats["peak_batches"] == 1
    pipe.close()


def test_prefetch_stats_before_iteration_and_without_prefetch():
    pipe = ResumablePipeline(_records(10), pipeline=None, dedup=False, prefetch_batches=0)
    s = pipe.prefetch_stats
    assert s["queued_batches"] == 0 and s["peak_bytes"] == 0
    assert s["max_bytes"] == luminamoon.data._prefetch.DEFAULT_MAX_PREFETCH_BYTES
    pipe.close()


@pytest.mark.parametrize("bad", [0, -5, 1.5, "1MB", True])
def test_max_prefetch_bytes_rejects(bad):
    with pytest.raises(ValueError, match="max_prefetch_bytes"):
        ResumablePipeline(_records(3), pipeline=None, dedup=False, max_prefetch_bytes=bad)
    with pytest.raises(ValueError, match="max_prefetch_bytes"):
        DistributedPipeline(_records(3), max_prefetch_bytes=bad)


def test_distributed_prefetch_bound(tmp_path):
    recs = _records(800)
    pipe = DistributedPipeline(recs, batch_size=40, prefetch_batches=12, dedup=None,
                               stages={"cleaner": False, "quality": False, "pii": False},
                               state_dir=str(tmp_path / "d"), max_prefetch_bytes=1)
    n = 0
    for b in pipe:
        n += b.n_in
        assert pipe.prefetch_stats["queued_batches"] <= 1
        time.sleep(0.002)
    assert n == 800
    assert pipe.prefetch_stats["peak_batches"] == 1 and pipe.prefetch_stats["producer_waits"] > 0
    pipe.close()


def test_prefetcher_stop_unblocks_a_waiting_producer_and_reraises():
    produced = []

    def gen():
        for i in range(1000):
            produced.append(i)
            yield torch.zeros(1000, dtype=torch.uint8)

    from luminamoon.data._prefetch import tensor_memory
    p = Prefetcher(gen, depth=100, max_bytes=2500, sizeof=tensor_memory)
    assert p.get() is not END
    deadline = time.time() + 10
    while p.stats()["producer_waits"] == 0 and time.time() < deadline:
        time.sleep(0.01)
    s = p.stats()
    assert s["queued_batches"] <= 2 and s["queued_bytes"] <= 2500  # 1000-byte storages: two fit
    assert len(produced) <= 5  # the producer waited instead of running ahead
    t = threading.Thread(target=p.stop)
    t.start()
    t.join(10)
    assert not t.is_alive()
    assert p.get() is END

    def bad():
        yield 1
        raise KeyError("boom")

    q = Prefetcher(bad, depth=2)
    assert q.get() == 1
    with pytest.raises(KeyError, match="boom"):
        q.get()
    q.stop()


def test_storage_nbytes_counts_each_storage_once():
    st = luminamoon.StringTensor.from_list(["short", "a string longer than twelve bytes", ""] * 10)
    off, data = st.offsets, st.data
    want = off.untyped_storage().nbytes() + data.untyped_storage().nbytes()
    # from_list builds both layouts over one payload: the views add their own
    # storage, and their payload buffers are windows of `data` (counted once).
    assert st.views.untyped_storage().data_ptr() not in (off.untyped_storage().data_ptr(), data.untyped_storage().data_ptr())
    assert st.storage_nbytes == want + st.views.untyped_storage().nbytes()
    # a tensor built from buffers has no views until first use; then they count too
    fb = luminamoon.StringTensor.from_buffers(off.clone(), data.clone())
    assert fb.storage_nbytes == want
    fb.views
    assert fb.storage_nbytes == want + fb.views.untyped_storage().nbytes()
    sub = st[2:5]
    assert sub.storage_nbytes >= sub.nbytes


# ---------------------------------------------------------------- PII limit

def _docs_with_sizes():
    small = [f"mail ann{i}@example.org" for i in range(5)]
    big = [f"call 555-867-5309 or mail bob{i}@example.org " + "x" * (200 + i) for i in range(3)]
    return [small[0], big[0], small[1], small[2], big[1], small[3], big[2], small[4]]


@pytest.mark.parametrize("mode", ["strict", "datatrove"])
def test_pii_max_doc_bytes_refuses_large_documents(mode):
    docs = _docs_with_sizes()
    limit = 100
    over = [len(d.encode()) > limit for d in docs]
    assert any(over) and not all(over)
    plain = PIIMasker(mode, cycle_across_documents=False)
    limited = PIIMasker(mode, cycle_across_documents=False, max_doc_bytes=limit)
    r = limited(docs)
    assert [reason_name(x) for x in r.reasons.tolist()] == ["too_large" if o else "kept" for o in over]
    kept = [d for d, o in zip(docs, over) if not o]
    assert r.texts.tolist() == plain(kept).texts.tolist()
    assert r.source_index.tolist() == [i for i, o in enumerate(over) if not o]
    # the refused documents' PII never comes out unmasked
    assert not any("bob" in t or "555-867" in t for t in r.texts.tolist())
    c = limited.counters
    assert c["docs_too_large"] == sum(over) and c["docs"] == len(docs) - sum(over)
    with pytest.raises(ValueError, match="max_doc_bytes"):
        limited.find(docs[1])
    assert limited.find(docs[0]) == plain.find(docs[0])


def test_pii_limit_fused_equals_chain_and_is_counted():
    docs = _docs_with_sizes() * 3  # duplicates too
    kw = dict(cleaner=True, quality=False, pii={"max_doc_bytes": 100})
    fused = FusedPipeline(**kw)(docs)
    chain = luminamoon.ChainPipeline(**kw)(docs)
    assert fused.reasons.tolist() == chain.reasons.tolist()
    assert fused.texts.tolist() == chain.texts.tolist()
    assert fused.source_index.tolist() == chain.source_index.tolist()
    f = FusedPipeline(**kw)
    f(docs)
    c = f.counters
    n_big = sum(len(d.encode()) > 100 for d in _docs_with_sizes())
    assert c["dropped_pii"] == n_big  # each large document once: its copies are duplicates
    assert c["pii"]["docs_too_large"] == n_big


@pytest.mark.parametrize("bad", [-1, "10", 1.5, None])
def test_pii_max_doc_bytes_rejects(bad):
    with pytest.raises((TypeError, ValueError), match="max_doc_bytes"):
        PIIMasker(max_doc_bytes=bad)


# --------------------------------------------------------------- dedup bound

def test_dedup_entry_bound_is_reported_and_enforced(tmp_path):
    d = StreamDeduplicator(str(tmp_path / "w.wal"), max_entries=50)
    r = d([f"doc {i}" for i in range(50)])
    assert (r.reasons == 0).all()
    s = d.stats
    assert s["max_entries"] == 50 and s["entries"] == 50 and s["table_bytes"] > 0
    assert s["bytes_per_entry"] == pytest.approx(s["table_bytes"] / 50)
    with pytest.raises(ValueError, match="max_entries|limit"):
        d(["one more"])
    assert d(["doc 3"]).reasons.tolist() == [1]  # duplicates are still recognised at the bound
    d.close()


# ------------------------------------------------------------ record size limit

def _oversize_records(limit):
    recs = []
    for i in range(30):
        n = limit * 3 if i in (4, 5, 17, 29) else 10 + (i * 13) % (limit // 2)
        recs.append({"id": i, "text": ("é" if i % 2 else "a") * (n // (2 if i % 2 else 1))})
    return recs


def _line_len(rec):
    import json
    return len(json.dumps(rec, ensure_ascii=False).encode())  # as write_jsonl writes it, without the newline


@pytest.mark.parametrize("ext, gzip_index", [("jsonl", False), ("jsonl.gz", False), ("jsonl.gz", True),
                                             ("jsonl.zst", False)])
def test_jsonl_max_record_bytes(tmp_path, ext, gzip_index):
    from luminamoon.data import JsonlSource, write_jsonl
    if gzip_index:
        pytest.importorskip("indexed_gzip", reason="indexed_gzip not installed")
    if ext.endswith("zst"):
        pytest.importorskip("zstandard", reason="zstandard not installed")
    limit = 400
    recs = _oversize_records(limit)
    path = str(tmp_path / f"r.{ext}")
    write_jsonl(path, recs, frame_bytes=700)
    big = [i for i, r in enumerate(recs) if _line_len(r) > limit]
    assert big and len(big) < len(recs)
    kw = dict(gzip_index=gzip_index, index_dir=str(tmp_path / "idx"), max_record_bytes=limit)
    # raise: the message names the file, the line and the limit
    src = JsonlSource(path, **kw)
    got = []
    with pytest.raises(ValueError, match=rf"r\.{ext.replace('.', '[.]')}:{big[0] + 1}: record of \d+ bytes is larger "
                                         rf"than max_record_bytes={limit}"):
        for r in src:
            got.append(r["id"])
    assert got == list(range(big[0]))
    # skip: the others, in order, counted; resume from any position gives the rest
    src = JsonlSource(path, on_error="skip", **kw)
    ids, positions = [], []
    for r in src:
        ids.append(r["id"])
        positions.append(src.position())
    assert ids == [i for i in range(len(recs)) if i not in big]
    assert src.skipped == len(big)
    for k in (0, 3, 4, len(ids) - 2):
        again = JsonlSource(path, on_error="skip", position=positions[k], **kw)
        assert [r["id"] for r in again] == ids[k + 1:]


def test_text_sources_max_record_bytes(tmp_path):
    from luminamoon.data import TextSource
    lines = ["short", "x" * 100, "fine line", "y" * 5000, ""]
    p = tmp_path / "t.txt"
    p.write_text("\n".join(lines) + "\n")
    src = TextSource(str(p), max_record_bytes=50, on_error="skip")
    assert [r["text"] for r in src] == ["short", "fine line", ""]
    assert src.skipped == 2
    with pytest.raises(ValueError, match=r"t\.txt:2: record of 100 bytes .*max_record_bytes=50"):
        list(TextSource(str(p), max_record_bytes=50))
    # the limit applies to the record, not to its line ending (LF or CRLF); exactly the limit passes
    q = tmp_path / "edge.txt"
    q.write_bytes(b"abc\nabcd\r\nab\r\nxyz")
    assert [r["text"] for r in TextSource(str(q), max_record_bytes=3, on_error="skip")] == ["abc", "ab", "xyz"]
    from luminamoon.data import IterableSource
    assert [r["text"] for r in IterableSource(["abc", "abcd", "ab", "xyz"], max_record_bytes=3,
                                              on_error="skip")] == ["abc", "ab", "xyz"]
    # per file: the whole file is the record
    small = tmp_path / "small.txt"
    small.write_text("just a little\ntext\n")
    src = TextSource([str(small), str(p)], per="file", max_record_bytes=200, on_error="skip")
    assert [r["text"] for r in src] == ["just a little\ntext\n"]
    assert src.skipped == 1
    with pytest.raises(ValueError, match=r"t\.txt: record of \d+ bytes is larger than max_record_bytes=200"):
        list(TextSource([str(small), str(p)], per="file", max_record_bytes=200))


def test_max_record_bytes_does_not_read_the_line_into_memory(tmp_path):
    import tracemalloc
    from luminamoon.data import JsonlSource
    p = tmp_path / "huge.jsonl"
    with open(p, "w") as f:
        f.write('{"text": "before"}\n{"text": "')
        chunk = "z" * (1 << 20)
        for _ in range(48):  # a 48 MB line
            f.write(chunk)
        f.write('"}\n{"text": "after"}\n')
    src = JsonlSource(str(p), max_record_bytes=1 << 20, on_error="skip")
    tracemalloc.start()
    texts = [r["text"] for r in src]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert texts == ["before", "after"] and src.skipped == 1
    assert peak < 8 << 20, f"peak Python allocation {peak} bytes while skipping a 48 MB line"


@pytest.mark.parametrize("ext", ["jsonl.gz", "jsonl.zst"])
def test_max_record_bytes_bounds_memory_in_compressed_files(tmp_path, ext):
    import tracemalloc
    from luminamoon.data import JsonlSource, write_jsonl
    if ext.endswith("zst"):
        pytest.importorskip("zstandard", reason="zstandard not installed")
    p = str(tmp_path / f"huge.{ext}")
    # a 64 MB line of one repeated byte: compresses to almost nothing, so a decoder fed
    # whole reads would expand it in one call
    write_jsonl(p, [{"text": "before"}, {"text": "z" * (64 << 20)}, {"text": "after"}], frame_bytes=1 << 20)
    src = JsonlSource(p, max_record_bytes=1 << 20, on_error="skip", gzip_index=False)
    tracemalloc.start()
    texts = [r["text"] for r in src]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert texts == ["before", "after"] and src.skipped == 1
    assert peak < 24 << 20, f"peak Python allocation {peak} bytes while skipping a 64 MB line"


def test_parquet_and_iterable_max_record_bytes(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from luminamoon.data import IterableSource, ParquetSource
    texts = ["ok", "é" * 40, "fine", "w" * 79, "w" * 81]  # "é" is 2 bytes: 80 bytes
    pq.write_table(pa.table({"text": texts}), tmp_path / "t.parquet", row_group_size=2)
    src = ParquetSource(str(tmp_path / "t.parquet"), max_record_bytes=80, on_error="skip")
    assert [r["text"] for r in src] == ["ok", "é" * 40, "fine", "w" * 79]
    assert src.skipped == 1
    src = IterableSource(texts, max_record_bytes=79, on_error="skip")
    assert [r["text"] for r in src] == ["ok", "fine", "w" * 79]
    with pytest.raises(ValueError, match=r"item 1: record of 80 bytes is larger than max_record_bytes=79"):
        list(IterableSource(texts, max_record_bytes=79))


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", True])
def test_max_record_bytes_rejects(bad):
    from luminamoon.data import IterableSource
    with pytest.raises(ValueError, match="max_record_bytes"):
        IterableSource(["a"], max_record_bytes=bad)


def test_resumable_pipeline_dedup_bound_and_stats(tmp_path):
    recs = _records(300)
    recs += recs[:50]  # duplicates at the end
    pipe = ResumablePipeline(recs, pipeline="fused", stages={"quality": False, "pii": False},
                             dedup={"max_entries": 1000, "seed": 5}, batch_size=64, prefetch_batches=0,
                             state_dir=str(tmp_path / "s"))
    kept = sum(len(b.texts) for b in pipe)
    s = pipe.dedup_stats
    assert kept == 300 and s["entries"] == 300 and s["max_entries"] == 1000 and s["table_bytes"] > 0
    pipe.commit()
    pipe.close()
    # at the bound: a clear error naming max_entries, and what was committed is kept
    pipe = ResumablePipeline(_records(300), pipeline="fused", stages={"quality": False, "pii": False},
                             dedup={"max_entries": 100}, batch_size=64, prefetch_batches=2,
                             state_dir=str(tmp_path / "t"))
    it = iter(pipe)
    next(it)
    pipe.commit()
    with pytest.raises(ValueError, match=r"deduplicator is full.*max_entries=100"):
        for _ in it:
            pass
    pipe.close()
    again = ResumablePipeline(_records(300), pipeline="fused", stages={"quality": False, "pii": False},
                              dedup={"max_entries": 100}, batch_size=64, state_dir=str(tmp_path / "t"))
    assert again.state_dict()["batch_index"] == 1 and again.dedup_stats["entries"] == 64
    again.close()


@pytest.mark.parametrize("bad, exc", [("yes", TypeError), (3, TypeError), ({"max_entries": -1}, ValueError),
                                      ({"wal_path": "x"}, ValueError), ({"bogus": 1}, TypeError)])
def test_resumable_pipeline_dedup_argument_rejects(bad, exc):
    with pytest.raises(exc, match="dedup|max_entries|bogus|wal_path"):
        ResumablePipeline(_records(3), dedup=bad)


def test_cli_dedup_max_entries_and_seed(tmp_path, capsys):
    import os
    from luminamoon.cli import main
    src = tmp_path / "in.jsonl"
    from luminamoon.data import write_jsonl
    write_jsonl(str(src), [{"id": i, "text": f"Document {i} says something about {i * 3}."} for i in range(50)])
    out = str(tmp_path / "o")
    base = ["run", str(src), "-o", out, "-q", "--no-report", "--no-quality", "--set", "run.batch_size=8",
            "--set", "output.part_docs=8"]
    rc = main(base + ["--set", "dedup.max_entries=20"])
    err = capsys.readouterr().err
    assert rc == 2 and "max_entries=20" in err and "--skip-bad-records" not in err, err
    assert "--set dedup.max_entries" in err  # says how to go on
    rc = main(base + ["--resume", "--set", "dedup.max_entries=100"])  # the bound may be raised on resume
    err = capsys.readouterr().err
    assert rc == 0, err
    ref = str(tmp_path / "ref")
    assert main([*base[:3], ref, *base[4:]]) == 0
    import pyarrow.parquet as pq
    import glob
    got = [t for f in sorted(glob.glob(os.path.join(out, "part-*"))) for t in pq.read_table(f).column("text").to_pylist()]
    want = [t for f in sorted(glob.glob(os.path.join(ref, "part-*"))) for t in pq.read_table(f).column("text").to_pylist()]
    assert got == want and len(want) == 50  # nothing lost at the bound, nothing twice
    rc = main(["run", str(src), "-o", out, "-q", "--no-report", "--no-quality", "--overwrite",
               "--set", "dedup.seed=77"])
    assert rc == 0
    wal = os.path.join(out, ".luminamoon", "dedup.wal")
    with pytest.raises(ValueError, match="dedup_wal_inspect"):  # the state folder's log is tagged
        StreamDeduplicator(wal, seed=77)
    from luminamoon import _C

    d = StreamDeduplicator(wal, seed=77, tag=_C.dedup_wal_inspect(wal)["tag"])  # written with the configured seed
    assert len(d) == 50
    d.close()
    with pytest.raises(ValueError, match="seed"):
        StreamDeduplicator(wal, seed=0)


def test_collate_dedup_bounds():
    from luminamoon.data import create_resumable_collate, start_global_dedup
    docs = [{"text": f"Sample number {i} of the collate bound test."} for i in range(30)]
    c = create_resumable_collate(dedup_max_entries=20, stages={"quality": False}, return_string_tensor=True)
    assert len(c(docs[:20])) == 20
    with pytest.raises(ValueError, match="deduplicator is full.*max_entries=20"):
        c(docs[20:])
    assert len(c(docs[:5])) == 0  # duplicates are still recognised at the bound
    with pytest.raises(ValueError, match="dedup_max_entries"):
        create_resumable_collate(dedup=None, dedup_max_entries=5)
    with pytest.raises(ValueError, match="dedup_max_entries"):
        create_resumable_collate(dedup_max_entries=-1)
    g = start_global_dedup(max_entries=10)
    try:
        c = create_resumable_collate(dedup=g, stages={"quality": False}, return_string_tensor=True)
        assert len(c(docs[:10])) == 10
        s = g.stats
        assert s["entries"] == 10 and s["max_entries"] == 10 and s["table_bytes"] > 0
        with pytest.raises(ValueError, match="deduplicator is full.*max_entries=10"):
            c(docs[10:12])
    finally:
        g.close()
    with pytest.raises(ValueError, match="max_entries"):
        start_global_dedup(max_entries=-3)


@pytest.mark.parametrize("mode", ["strict", "datatrove"])
def test_distributed_pipeline_pii_size_limit_equals_the_chain(tmp_path, mode):
    from luminamoon import ChainPipeline
    docs = [f"doc {i}: mail ann{i % 7}@example.org from 8.8.{i % 5}.{i % 3}" + (" pad" * 40 if i % 3 == 0 else "")
            for i in range(60)]
    docs += docs[:15]  # duplicates, some of them too large
    pii = {"mode": mode, "max_doc_bytes": 100}
    ref = ChainPipeline(cleaner=True, quality=False, dedup=True, pii=pii)(docs)
    assert (ref.reasons == 3).any() and (ref.reasons == 1).any() and (ref.reasons == 0).any()
    pipe = DistributedPipeline(docs, batch_size=16, dedup="local", state_dir=str(tmp_path / mode),
                               stages={"quality": False, "pii": pii})
    texts, reasons, gidx = [], [], []
    for b in pipe:
        texts += b.texts.tolist()
        reasons += b.reasons.tolist()
        gidx += b.kept_global_index.tolist()
        assert len(b.kept_records) == len(b.texts)
    pipe.close()
    assert reasons == ref.reasons.tolist()
    assert texts == ref.texts.tolist()
    assert gidx == ref.source_index.tolist()


# ------------------------------------------------ adversarial inputs (issue 21)
# Each runs in a fresh child process (peak memory of one call, and a wall
# limit that only a super-linear algorithm reaches: the old code took hours).

import json as _json
import subprocess as _subprocess
import sys as _sys
import textwrap as _textwrap
import unicodedata as _unicodedata

from hypothesis import given, settings, strategies as _hst

from luminamoon import QualityFilter, TextCleaner
from luminamoon.stages import DEFAULT_MAX_DOC_BYTES, REASON_TOO_LARGE

_CHILD_PRELUDE = _textwrap.dedent("""
    import json, sys
    def rss_kb(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    def reset_peak():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS
    import luminamoon
    from luminamoon import StringTensor, TextCleaner, QualityFilter
""")


def _run_child(body, timeout):
    code = _CHILD_PRELUDE + _textwrap.dedent(body)
    p = _subprocess.run([_sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return _json.loads(p.stdout.strip().splitlines()[-1])


_NO_FOLDING = dict(remove_control=False, normalize_newlines=False, fold_spaces=False, collapse_spaces=False,
                   trim_trailing=False, max_blank_lines=-1, drop_empty=False)


def test_nfkc_on_a_long_run_of_combining_marks_is_not_quadratic():
    # "a" + (U+0301 U+0316) * k: a run of 2k marks out of canonical order.  utf8proc_map's
    # swap loop took 4.5 s at 100 KB and grows with the square (4 MB: about two hours);
    # sorted per run it takes well under a second.  The output is checked against Python's
    # unicodedata on the 20 KB version (Python's own reordering is quadratic too).
    small = "a" + "\u0301\u0316" * 5_000
    for form in ("NFC", "NFKC"):
        got = TextCleaner(form, **_NO_FOLDING)([small]).texts.tolist()[0]
        assert got == _unicodedata.normalize(form, small)
    out = _run_child("""
        k = 1_000_000  # 4 MB of marks
        st = StringTensor.from_list(["a" + "\\u0301\\u0316" * k])
        res = {}
        for form in ("NFC", "NFKC"):
            t = TextCleaner(form)(st).texts.tolist()[0]
            res[form] = [len(t), t[:3] == "\\u00e1\\u0316\\u0316", t.endswith("\\u0301\\u0301")]
        print(json.dumps(res))
    """, timeout=300)
    for form in ("NFC", "NFKC"):
        # NFC: a + U+0301 compose to U+00E1; then the k U+0316 (class 220), then k-1 U+0301 (230)
        assert out[form] == [1 + 1_000_000 + 999_999, True, True], out


# Characters Python's unicodedata (Unicode 14) knows: utf8proc is Unicode 15, and
# normalization is stable for assigned characters (Unicode's stability policy), so the two
# agree exactly on these; characters assigned only in 15 are left out of the comparison.
_ASSIGNED = _hst.characters(blacklist_categories=("Cn", "Cs", "Co"))
_MARKS = _hst.sampled_from([chr(c) for c in list(range(0x300, 0x370)) +
                            [0x591, 0x5B0, 0x5C1, 0x64B, 0x651, 0x93C, 0x94D, 0x0F71, 0x0F72, 0x0F74,
                             0x0F80, 0x1DCE, 0x20D0, 0x302A, 0x3099, 0x309A, 0x1D165, 0x1D16D, 0x0E38, 0x0E48]])
_SPECIAL = _hst.sampled_from(["\u00e9", "\u00c5", "\u212b", "\u1e9b", "\uac00", "\u1100", "\u1161", "\u11a8",
                              "\ufb01", "\ufdfa", "\u2460", "\u00bd", "\uff21", "\u3300", "\u0958", "\u0344",
                              "\u0f73", "\u2adc", "\U0001d15e", "\u304b", "\u30d1", "e", "A", " "])
_TEXT = _hst.lists(_hst.one_of(_ASSIGNED, _MARKS, _MARKS, _SPECIAL), max_size=80).map("".join)


@settings(max_examples=400, deadline=None)
@given(_hst.lists(_TEXT, min_size=1, max_size=8))
def test_nfc_nfkc_equal_pythons_unicodedata(texts):
    for form in ("NFC", "NFKC"):
        got = TextCleaner(form, **_NO_FOLDING)(texts).texts.tolist()
        assert got == [_unicodedata.normalize(form, t) for t in texts]


def test_nfc_nfkc_equal_pythons_unicodedata_on_real_text():
    import gzip
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "corpus", "debian-dev.jsonl.gz")
    path = path if os.path.exists(path) else "/work/shared/corpus/debian-dev.jsonl.gz"
    texts = []
    with gzip.open(path, "rt") as f:
        for i, line in enumerate(f):
            if i >= 3000:
                break
            t = _json.loads(line)["text"]
            # the corpus is mostly ASCII: decompose a share of it so composition has work to do
            texts.append(_unicodedata.normalize("NFD", t) if i % 3 == 0 else t)
    for form in ("NFC", "NFKC"):
        got = TextCleaner(form, **_NO_FOLDING)(texts).texts.tolist()
        want = [_unicodedata.normalize(form, t) for t in texts]
        assert got == want


@pytest.mark.parametrize("kind", ["close_parens", "open_parens_digit"])
def test_quality_filter_memory_is_at_most_16_bytes_per_input_byte(kind):
    # Almost every character a token: the old filter held 65-83 bytes per input byte
    # (30 MB of ")" -> 2.1 GB).  Peak resident growth of one call, fresh process.
    out = _run_child(f"""
        n = 8 << 20
        kind = {kind!r}
        text = ")" * n if kind == "close_parens" else "(" * (n - 1) + "1"
        st = StringTensor.from_list([text])
        q = QualityFilter(num_threads=1)
        q(StringTensor.from_list(["warm up the filter once. " * 40]))
        reset_peak()
        base = rss_kb("VmRSS")
        r = q(st)
        peak = rss_kb("VmHWM")
        print(json.dumps({{"n": n, "delta": (peak - base) * 1024, "reason": int(r.reasons[0])}}))
    """, timeout=600)
    per_byte = out["delta"] / out["n"]
    assert per_byte <= 16, out


def test_stages_have_a_default_max_doc_bytes_that_can_be_raised():
    assert DEFAULT_MAX_DOC_BYTES == 128 << 20
    assert QualityFilter.defaults()["max_doc_bytes"] == DEFAULT_MAX_DOC_BYTES
    for cls in (TextCleaner, QualityFilter):
        assert cls().params["max_doc_bytes"] == DEFAULT_MAX_DOC_BYTES
        assert cls(max_doc_bytes=0).params["max_doc_bytes"] == 0
        assert cls(max_doc_bytes=1 << 40).params["max_doc_bytes"] == 1 << 40
    docs = ["x" * 100 + " the end of it.", "short"]
    assert TextCleaner(max_doc_bytes=50)(docs).reasons.tolist() == [REASON_TOO_LARGE, 0]
    assert QualityFilter(max_doc_bytes=50)(docs).reasons.tolist()[0] == REASON_TOO_LARGE
    assert PIIMasker(max_doc_bytes=50)(docs).reasons.tolist() == [REASON_TOO_LARGE, 0]
    assert PIIMasker(max_doc_bytes=0)(docs).reasons.tolist() == [0, 0]


def test_pii_masks_a_phone_after_a_long_run_of_open_parens():
    # a run of "(" is skipped to its last (only it can open "(NNN) NNN-NNNN")
    for prefix in ("(" * 10_000, "x(" * 3, "(("):
        for tail, want in (("(212) 555-1234", "<PHONE>"), ("(212 555-1234", "(212 555-1234")):
            got = PIIMasker("strict")([prefix + " " + tail]).texts.tolist()[0]
            assert got == prefix + " " + want
