"""NumPy integer scalars as integer arguments across the Python API.

A PyTorch/NumPy user passes values computed with numpy (``batch_size=np.int64(512)``,
``seed=np.uint64(7)``, ``num_threads=np.int32(2)``).  They are accepted as PyTorch accepts
them (``operator.index``) and give what the Python int gives: the same output, and a plain
``int`` stored (settings are JSON in commit files and compared on resume).  ``bool`` /
``numpy.bool_`` and floats (``2.0`` / ``np.float64(2.0)``) stay refused, with the exception
type a Python bool / float gets, naming the argument.

Every check here compares the numpy run with an independent run given Python ints.
"""
import gzip
import json
import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import luminamoon
import luminamoon.ops as lops
from luminamoon import MinHash, StringTensor
from luminamoon._intarg import as_int
from luminamoon.data import (DistributedPipeline, IterableSource, JsonlSource, ParquetSource, ResumablePipeline,
                             TextSource, create_resumable_collate, start_global_dedup, write_jsonl)
from luminamoon.data.collate import BlockDataset
from luminamoon.data.checkpoint import describe_setting
from luminamoon.minhash import minhash
from luminamoon.near_dup import cluster, compute_signatures
from luminamoon.stages import (PII_TYPES, NearDeduplicator, PIIMasker, QualityFilter, StreamDeduplicator,
                               TextCleaner, hash128)

WORDS = ("the quick brown fox jumps over a lazy dog while seven tired cats watch from the old "
         "garden wall and nobody says anything about the weather today").split()


def _doc(i):
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(40 + i % 9)]
    return (f"Document {i} starts here.  " + " ".join(words[:20]).capitalize() + ".\n\n\n\n" +
            " ".join(words[20:]).capitalize() + ". Mail admin{0}@example.org now.".format(i % 4))


DOCS = [_doc(i) for i in range(24)] + [_doc(3), _doc(5)]  # two exact duplicates at the end


def _all_plain_ints(obj):
    """Every int in a (nested) settings object is a plain int (no numpy scalar) -- and JSON works."""
    json.dumps(obj)
    if isinstance(obj, dict):
        return all(_all_plain_ints(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return all(_all_plain_ints(v) for v in obj)
    return not isinstance(obj, np.generic)


def _refused_like(call, py_bad, np_bad, name):
    """``call(np_bad)`` raises what ``call(py_bad)`` raises (TypeError or ValueError), naming ``name``."""
    with pytest.raises((TypeError, ValueError)) as py_e:
        call(py_bad)
    with pytest.raises((TypeError, ValueError)) as np_e:
        call(np_bad)
    assert type(np_e.value) is type(py_e.value), (py_e.value, np_e.value)
    assert name in str(np_e.value), str(np_e.value)


def _texts(result):
    return result.texts.tolist(), result.reasons.tolist()


# ---------------------------------------------------------------- the helper
def test_as_int_helper():
    assert as_int(5) == 5 and type(as_int(np.int64(5))) is int
    assert as_int(np.uint64(2**64 - 1)) == 2**64 - 1
    assert as_int(np.int32(-3)) == -3 and as_int(np.uint8(200)) == 200
    assert as_int(np.array(7)) == 7 and as_int(torch.tensor(9)) == 9
    for bad in (True, False, np.bool_(True), np.array(True), torch.tensor(True), 3.0, np.float64(3),
                np.float32(3), torch.tensor(3.0), "3", None, [3]):
        assert as_int(bad) is None, bad


# ---------------------------------------------------------------- stages.py
def test_text_cleaner_numpy_settings():
    a = TextCleaner(max_blank_lines=1, max_doc_bytes=4000, num_threads=2)
    b = TextCleaner(max_blank_lines=np.int64(1), max_doc_bytes=np.uint64(4000), num_threads=np.int32(2))
    assert _texts(b(DOCS)) == _texts(a(DOCS))
    assert b._config == a._config and _all_plain_ints(b._config)
    assert type(b.num_threads) is int and b.num_threads == 2
    assert json.dumps(describe_setting(b), sort_keys=True) == json.dumps(describe_setting(a), sort_keys=True)
    b.num_threads = np.int64(3)  # the setter
    assert type(b.num_threads) is int and b.num_threads == 3


def test_quality_filter_numpy_settings():
    kw = dict(gq_min_doc_words=30, fw_short_line_length=25, c4_min_words_per_line=2, gq_min_avg_word_length=2)
    a = QualityFilter(**kw)
    b = QualityFilter(**{k: np.int64(v) for k, v in kw.items()})  # a float setting given a numpy int too
    assert _texts(b(DOCS)) == _texts(a(DOCS))
    assert b._config == a._config and _all_plain_ints(b._config)
    assert b.params == a.params


def test_pii_masker_numpy_settings_and_cycle():
    a = PIIMasker("datatrove", max_doc_bytes=10000, cycle_across_documents=True)
    b = PIIMasker("datatrove", max_doc_bytes=np.int64(10000), cycle_across_documents=True)
    cyc = [i % 3 for i in range(len(PII_TYPES))]
    a.pii_cycle = cyc
    b.pii_cycle = [np.uint64(x) for x in cyc]
    assert _texts(b(DOCS)) == _texts(a(DOCS))
    assert b.pii_cycle == a.pii_cycle
    assert b._config == a._config and _all_plain_ints(b._config)


def test_stream_dedup_numpy_seed():
    a = StreamDeduplicator(seed=7, max_entries=1000, initial_capacity=64)
    b = StreamDeduplicator(seed=np.uint64(7), max_entries=np.int64(1000), initial_capacity=np.int32(64))
    ra, rb = a(DOCS), b(DOCS)
    assert rb.reasons.tolist() == ra.reasons.tolist() and 1 in rb.reasons.tolist()
    assert b.seed == a.seed == 7 and type(b.seed) is int
    assert b._config == a._config and _all_plain_ints(b._config)
    c = StreamDeduplicator(seed=8)
    assert c(DOCS).reasons.tolist() == ra.reasons.tolist()  # the seed does not change decisions ...
    assert not torch.equal(hash128(DOCS, 8), hash128(DOCS, np.uint64(7)))  # ... but the hashes


def test_stream_dedup_truncate_numpy(tmp_path):
    with StreamDeduplicator(wal_path=str(tmp_path / "a.wal")) as a, \
            StreamDeduplicator(wal_path=str(tmp_path / "b.wal")) as b:
        a(DOCS[:10]), b(DOCS[:10])
        a.truncate(4)
        b.truncate(np.int64(4))
        assert a.lsn == b.lsn == 4
        assert a(DOCS).reasons.tolist() == b(DOCS).reasons.tolist()


def test_near_dedup_numpy_settings():
    kw = dict(seed=3, n_grams=3, num_buckets=4, hashes_per_bucket=2, precision=64, max_entries=100)
    a = NearDeduplicator(**kw)
    b = NearDeduplicator(**{k: (np.int32(v) if k == "n_grams" else np.int64(v)) for k, v in kw.items()})
    assert b.config == a.config
    assert b._config == a._config and _all_plain_ints(b._config)
    near = DOCS[:6] + [DOCS[1] + " extra", DOCS[2].replace("Document", "Doc")]
    da = a.decisions(iter(near), batch_size=3)
    db = b.decisions(iter(near), batch_size=np.int64(3))
    assert db.tolist() == da.tolist() and any(da.tolist())


def test_hash128_and_hash64_numpy_seed():
    st = StringTensor.from_list(DOCS)
    assert torch.equal(hash128(DOCS, np.uint64(3)), hash128(DOCS, 3))
    assert torch.equal(hash128(DOCS, np.uint64(2**64 - 1)), hash128(DOCS, -1))
    assert torch.equal(st.hash64(seed=np.uint64(3)), st.hash64(seed=3))
    assert torch.equal(st.hash64(seed=np.int64(-1)), st.hash64(seed=-1))
    assert torch.equal(st.hash64(seed=np.uint64(2**64 - 1)), st.hash64(seed=-1))
    assert torch.equal(st.hash64(seed=torch.tensor(5)), st.hash64(seed=5))  # a 0-d integer tensor
    assert not torch.equal(st.hash64(seed=np.uint64(3)), st.hash64(seed=4))
    assert torch.equal(lops.hash64(st.offsets, st.data, np.int64(11)), lops.hash64(st.offsets, st.data, 11))


def test_pad_bytes_and_attention_mask_numpy():
    st = StringTensor.from_list(["abc", "hello world", ""])
    ia, la = st.pad_bytes(8, pad_id=0, bos_id=1, eos_id=2)
    ib, lb = st.pad_bytes(np.int64(8), pad_id=np.int32(0), bos_id=np.int64(1), eos_id=np.uint8(2))
    assert torch.equal(ia, ib) and torch.equal(la, lb)
    assert torch.equal(lops.attention_mask(la, np.int64(8)), lops.attention_mask(la, 8))


# ---------------------------------------------------------------- minhash.py, near_dup.py
def test_minhash_numpy_settings():
    a = MinHash(n_grams=3, num_buckets=4, hashes_per_bucket=2, seed=9, precision=64, num_threads=2)
    b = MinHash(n_grams=np.int64(3), num_buckets=np.int32(4), hashes_per_bucket=np.int64(2), seed=np.uint32(9),
                precision=np.int64(64), num_threads=np.int64(2))
    for k in ("n_grams", "num_buckets", "hashes_per_bucket", "seed", "precision", "num_threads"):
        assert type(getattr(b, k)) is int and getattr(b, k) == getattr(a, k), k
    assert torch.equal(b.signatures(DOCS), a.signatures(DOCS))
    assert torch.equal(pickle.loads(pickle.dumps(b)).signatures(DOCS), a.signatures(DOCS))
    assert repr(b) == repr(a)
    sh, off = a.shingles(DOCS)
    assert torch.equal(minhash(sh, off, a.a, a.b, np.int64(64)), minhash(sh, off, a.a, a.b, 64))


def test_near_dup_cluster_numpy(tmp_path):
    sig = compute_signatures(DOCS[:6] + [DOCS[1] + " more", DOCS[2]], n_grams=np.int64(3), num_buckets=4,
                             hashes_per_bucket=np.int32(2), seed=np.uint64(1), precision=np.int64(64))
    ref = compute_signatures(DOCS[:6] + [DOCS[1] + " more", DOCS[2]], n_grams=3, num_buckets=4,
                             hashes_per_bucket=2, seed=1, precision=64)
    assert np.array_equal(sig, ref)
    ra = cluster(ref, num_buckets=4, hashes_per_bucket=2, measure_memory=False)
    rb = cluster(ref, num_buckets=np.int64(4), hashes_per_bucket=np.int32(2), work_dir=str(tmp_path),
                 measure_memory=False)
    assert rb.removed.tolist() == ra.removed.tolist() and rb.root.tolist() == ra.root.tolist()
    assert rb.removed.size >= 1


# ---------------------------------------------------------------- data/writers.py, data/sources.py
def _records(n=40):
    return [{"id": f"d{i}", "text": DOCS[i % len(DOCS)]} for i in range(n)]


def test_write_jsonl_numpy(tmp_path):
    for suffix in (".jsonl.gz", ".jsonl"):
        a, b = str(tmp_path / f"a{suffix}"), str(tmp_path / f"b{suffix}")
        write_jsonl(a, _records(), frame_bytes=3000, level=6)
        write_jsonl(b, _records(), frame_bytes=np.int64(3000), level=np.int32(6))
        with open(a, "rb") as fa, open(b, "rb") as fb:
            assert fa.read() == fb.read()
    with gzip.open(str(tmp_path / "b.jsonl.gz"), "rt") as f:
        assert [json.loads(x) for x in f] == _records()


def test_jsonl_source_numpy(tmp_path):
    p = str(tmp_path / "c.jsonl.gz")
    write_jsonl(p, _records(), frame_bytes=2000)
    a = JsonlSource(p, rank=1, world_size=2, max_record_bytes=1 << 20, gzip_spacing=1 << 20)
    b = JsonlSource(p, rank=np.int64(1), world_size=np.int32(2), max_record_bytes=np.uint64(1 << 20),
                    gzip_spacing=np.int64(1 << 20))
    for k in ("rank", "world_size", "max_record_bytes", "gzip_spacing"):
        assert type(getattr(b, k)) is int and getattr(b, k) == getattr(a, k), k
    ra = list(a)
    assert list(b) == ra and len(ra) == 20
    assert b.identity() == a.identity() and _all_plain_ints(b.identity())
    assert repr(b) == repr(a)
    # iter_blocks(n): a numpy n reads the same blocks
    a2, b2 = JsonlSource(p), JsonlSource(p)
    ba = [blk.texts.tolist() for blk in a2.iter_blocks(7)]
    bb = [blk.texts.tolist() for blk in b2.iter_blocks(np.int64(7))]
    assert bb == ba and [len(x) for x in ba] == [7] * 5 + [5]
    # a record larger than max_record_bytes is refused the same way
    small_a = JsonlSource(p, max_record_bytes=100, on_error="skip")
    small_b = JsonlSource(p, max_record_bytes=np.int16(100), on_error="skip")
    assert list(small_b) == list(small_a) == [] and small_b.skipped == small_a.skipped == 40


def test_text_and_parquet_sources_numpy(tmp_path):
    t = tmp_path / "lines.txt"
    t.write_text("".join(f"line {i}\n" for i in range(10)))
    a, b = TextSource(str(t), world_size=2, rank=0), TextSource(str(t), world_size=np.int64(2), rank=np.int64(0))
    assert list(b) == list(a) and b.identity() == a.identity() and _all_plain_ints(b.identity())
    assert [x.texts.tolist() for x in TextSource(str(t)).iter_blocks(np.int32(4))] == \
        [x.texts.tolist() for x in TextSource(str(t)).iter_blocks(4)]
    pqp = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"text": [f"row {i}" for i in range(9)]}), pqp)
    assert [x.texts.tolist() for x in ParquetSource(pqp).iter_blocks(np.int64(4))] == \
        [x.texts.tolist() for x in ParquetSource(pqp).iter_blocks(4)]
    assert list(IterableSource(["x", "y", "z"], rank=np.int64(1), world_size=np.int64(2))) == \
        list(IterableSource(["x", "y", "z"], rank=1, world_size=2))


# ---------------------------------------------------------------- data/resumable.py
def _run(pipe, stop_after=None):
    got = []
    for b in pipe:
        got.append((b.index, b.texts.tolist(), b.reasons.tolist()))
        if stop_after is not None and b.index == stop_after:
            pipe.commit(extra={"at": b.index})
            break
    return got


def test_resumable_pipeline_numpy(tmp_path):
    docs = DOCS * 2
    np_kw = dict(batch_size=np.int64(5), prefetch_batches=np.int32(1), max_prefetch_bytes=np.int64(1 << 20),
                 num_threads=np.int64(1), dedup={"seed": np.uint64(7)})
    py_kw = dict(batch_size=5, prefetch_batches=1, max_prefetch_bytes=1 << 20, num_threads=1, dedup={"seed": 7})
    with ResumablePipeline(IterableSource(docs), state_dir=str(tmp_path / "py"), **py_kw) as p:
        ref = _run(p)
    with ResumablePipeline(IterableSource(docs), state_dir=str(tmp_path / "np"), **np_kw) as p:
        for k in ("batch_size", "prefetch_batches", "max_prefetch_bytes", "num_threads"):
            assert type(getattr(p, k)) is int, k
        head = _run(p, stop_after=3)
        state = p.state_dict()
    assert head == ref[:4]
    assert state["run"]["batch_size"] == 5 and state["run"]["dedup"] == {"seed": 7}
    assert _all_plain_ints(state)
    committed = [n for n in os.listdir(tmp_path / "np") if n.startswith("commit-")]
    assert committed
    for n in committed:
        with open(tmp_path / "np" / n) as f:
            run = json.load(f)["run"]
        assert run["batch_size"] == 5 and run["dedup"] == {"seed": 7}
    # the numpy run's commit resumes with Python ints (the settings compare equal) and vice versa
    with ResumablePipeline(IterableSource(docs), state_dir=str(tmp_path / "np"), **py_kw) as p:
        assert p.resume_extra == {"at": 3}
        tail = _run(p)
    assert head + tail == ref
    with ResumablePipeline(IterableSource(docs), state_dir=str(tmp_path / "py2"), **py_kw) as p:
        _run(p, stop_after=1)
    with ResumablePipeline(IterableSource(docs), state_dir=str(tmp_path / "py2"), **np_kw) as p:
        assert p.resume_extra == {"at": 1}
        assert _run(p) == ref[2:]
    # a different numpy batch size is still a different setting
    with pytest.raises(ValueError, match="batch_size"):
        ResumablePipeline(IterableSource(docs), state_dir=str(tmp_path / "np"), **{**np_kw, "batch_size": np.int64(6)})


# ---------------------------------------------------------------- data/distributed.py
def test_distributed_pipeline_numpy(tmp_path):
    path = str(tmp_path / "in.jsonl")
    write_jsonl(path, _records(48))
    np_kw = dict(batch_size=np.int64(8), seed=np.uint64(5), prefetch_batches=np.int32(1), num_threads=np.int64(1),
                 max_prefetch_bytes=np.int64(1 << 20))
    py_kw = dict(batch_size=8, seed=5, prefetch_batches=1, num_threads=1, max_prefetch_bytes=1 << 20)

    def run(pipe, stop=None):
        got = []
        for b in pipe:
            got.append((b.index, b.texts.tolist(), b.reasons.tolist()))
            if stop is not None and b.index == stop:
                pipe.commit(extra={"at": stop})
                break
        return got

    with DistributedPipeline(JsonlSource(path), state_dir=str(tmp_path / "py"), **py_kw) as p:
        ref = run(p)
    with DistributedPipeline(JsonlSource(path), state_dir=str(tmp_path / "np"), **np_kw) as p:
        for k in ("batch_size", "seed", "prefetch_batches", "max_prefetch_bytes"):
            assert type(getattr(p, k)) is int, k
        assert (p.rank, p.world_size) == (0, 1)
        head = run(p, stop=2)
    assert head == ref[:3] and len(ref) == 6
    with DistributedPipeline(JsonlSource(path), state_dir=str(tmp_path / "np"), **py_kw) as p:
        assert p.resume_extra == {"at": 2}
        assert head + run(p) == ref


# ---------------------------------------------------------------- data/collate.py
def test_collate_numpy():
    samples = [{"text": d} for d in DOCS[:10]] + [{"text": DOCS[0]}]
    st = {"quality": False}  # the synthetic documents are no prose: the quality filter would drop them all
    a = create_resumable_collate(max_length=64, pad_id=0, bos_id=256, eos_id=257, num_threads=1,
                                 dedup_max_entries=100, stages=st)
    b = create_resumable_collate(max_length=np.int64(64), pad_id=np.int32(0), bos_id=np.int64(256),
                                 eos_id=np.uint16(257), num_threads=np.int64(1), dedup_max_entries=np.int64(100),
                                 stages=st)
    for k in ("max_length", "pad_id", "bos_id", "eos_id", "num_threads", "dedup_max_entries"):
        assert type(getattr(b, k)) is int and getattr(b, k) == getattr(a, k), k
    oa, ob = a(samples), b(samples)
    assert set(oa) == set(ob) and all(torch.equal(oa[k], ob[k]) for k in oa)
    assert oa["input_ids"].shape == (10, 64) and (oa["input_ids"][:, 0] == 256).all()  # the duplicate went
    again = pickle.loads(pickle.dumps(b))
    assert again.max_length == 64 and type(again.max_length) is int


def test_block_dataset_numpy(tmp_path):
    p = str(tmp_path / "b.jsonl")
    write_jsonl(p, _records(30))
    c = create_resumable_collate(pipeline=None, return_string_tensor=True)
    a = BlockDataset(JsonlSource(p), 8)
    b = c.blocks(JsonlSource(p), np.int64(8))
    assert type(b.block_size) is int and b.block_size == 8
    assert [x.texts.tolist() for x in b] == [x.texts.tolist() for x in a]


def test_global_dedup_numpy():
    server = start_global_dedup(max_entries=np.int64(1000))
    try:
        st = {"quality": False}
        collate = create_resumable_collate(dedup=server, return_string_tensor=True, stages=st)
        out = collate([{"text": d} for d in DOCS]).tolist()
        ref = create_resumable_collate(dedup="worker", return_string_tensor=True, stages=st)(
            [{"text": d} for d in DOCS]).tolist()
        assert out == ref and len(out) == len(set(DOCS)) == len(DOCS) - 2
    finally:
        server.close()


# ---------------------------------------------------------------- ray.py (no Ray cluster started)
class _Stop(Exception):
    pass


class _FakeDataset:
    """Stands for a ray.data.Dataset up to the first Ray call: records what process() hands Ray."""

    def schema(self):
        return pa.schema([("text", pa.string())])

    def map_batches(self, fn, **kw):
        self.kw = kw
        raise _Stop


def test_ray_process_numpy_args():
    import luminamoon.ray as lr

    got = {}
    for label, kw in (("py", dict(batch_size=64, num_partitions=2, dedup={"seed": 7})),
                      ("np", dict(batch_size=np.int64(64), num_partitions=np.int32(2), dedup={"seed": np.uint64(7)}))):
        ds = _FakeDataset()
        with pytest.raises(_Stop):
            lr.process(ds, stages={"cleaner": True}, **kw)
        got[label] = ds.kw
    assert got["np"]["batch_size"] == got["py"]["batch_size"] == 64 and type(got["np"]["batch_size"]) is int
    seed = got["np"]["fn_kwargs"]["dedup_seed"]
    assert seed == got["py"]["fn_kwargs"]["dedup_seed"] == 7 and type(seed) is int


# ---------------------------------------------------------------- refusals: numpy bool and float
def _jsonl(tmp_path):
    p = str(tmp_path / "r.jsonl")
    if not os.path.exists(p):
        write_jsonl(p, _records(4))
    return p


REFUSALS = [
    # (id, argument name, call(value, tmp_path))
    ("TextCleaner.max_blank_lines", "max_blank_lines", lambda v, t: TextCleaner(max_blank_lines=v)),
    ("TextCleaner.num_threads", "num_threads", lambda v, t: TextCleaner(num_threads=v)),
    ("QualityFilter.gq_min_doc_words", "gq_min_doc_words", lambda v, t: QualityFilter(gq_min_doc_words=v)),
    ("PIIMasker.max_doc_bytes", "max_doc_bytes", lambda v, t: PIIMasker(max_doc_bytes=v)),
    ("PIIMasker.pii_cycle", "pii_cycle",
     lambda v, t: setattr(PIIMasker("datatrove"), "pii_cycle", [v] * len(PII_TYPES))),
    ("StreamDeduplicator.seed", "seed", lambda v, t: StreamDeduplicator(seed=v)),
    ("NearDeduplicator.n_grams", "n_grams", lambda v, t: NearDeduplicator(n_grams=v)),
    ("NearDeduplicator.decisions", "batch_size", lambda v, t: NearDeduplicator().decisions(["a"], batch_size=v)),
    ("hash128.seed", "seed", lambda v, t: hash128(["a"], v)),
    ("StringTensor.hash64", "seed", lambda v, t: StringTensor.from_list(["a"]).hash64(seed=v)),
    ("StringTensor.pad_bytes", "max_len", lambda v, t: StringTensor.from_list(["a"]).pad_bytes(v)),
    ("MinHash.num_buckets", "num_buckets", lambda v, t: MinHash(num_buckets=v)),
    ("MinHash.precision", "precision", lambda v, t: MinHash(precision=v)),
    ("minhash.precision", "precision",
     lambda v, t: minhash(torch.zeros(0, dtype=torch.int64), torch.zeros(1, dtype=torch.int64),
                          torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64), v)),
    ("cluster.num_buckets", "num_buckets",
     lambda v, t: cluster(np.zeros((2, 2), np.uint64), num_buckets=v, hashes_per_bucket=1, measure_memory=False)),
    ("write_jsonl.frame_bytes", "frame_bytes", lambda v, t: write_jsonl(str(t / "w.jsonl"), [], frame_bytes=v)),
    ("write_jsonl.level", "level", lambda v, t: write_jsonl(str(t / "w.jsonl.gz"), [], level=v)),
    ("JsonlSource.max_record_bytes", "max_record_bytes", lambda v, t: JsonlSource(_jsonl(t), max_record_bytes=v)),
    ("JsonlSource.rank", "rank", lambda v, t: JsonlSource(_jsonl(t), rank=v, world_size=2)),
    ("JsonlSource.gzip_spacing", "gzip_spacing", lambda v, t: JsonlSource(_jsonl(t), gzip_spacing=v)),
    ("JsonlSource.iter_blocks", "n", lambda v, t: list(JsonlSource(_jsonl(t)).iter_blocks(v))),
    ("ResumablePipeline.batch_size", "batch_size", lambda v, t: ResumablePipeline(["a"], batch_size=v)),
    ("ResumablePipeline.prefetch_batches", "prefetch_batches",
     lambda v, t: ResumablePipeline(["a"], prefetch_batches=v)),
    ("ResumablePipeline.max_prefetch_bytes", "max_prefetch_bytes",
     lambda v, t: ResumablePipeline(["a"], max_prefetch_bytes=v)),
    ("ResumablePipeline.dedup_seed", "seed", lambda v, t: ResumablePipeline(["a"], dedup={"seed": v})),
    ("DistributedPipeline.batch_size", "batch_size", lambda v, t: DistributedPipeline(["a"], batch_size=v)),
    ("DistributedPipeline.seed", "seed", lambda v, t: DistributedPipeline(["a"], seed=v)),
    ("DistributedPipeline.num_threads", "num_threads", lambda v, t: DistributedPipeline(["a"], num_threads=v)),
    ("collate.max_length", "max_length", lambda v, t: create_resumable_collate(max_length=v)),
    ("collate.pad_id", "pad_id", lambda v, t: create_resumable_collate(pad_id=v)),
    ("collate.num_threads", "num_threads", lambda v, t: create_resumable_collate(num_threads=v)),
    ("collate.dedup_max_entries", "dedup_max_entries", lambda v, t: create_resumable_collate(dedup_max_entries=v)),
    ("BlockDataset.block_size", "block_size", lambda v, t: BlockDataset(JsonlSource(_jsonl(t)), v)),
    ("GlobalDedup.max_entries", "max_entries", lambda v, t: start_global_dedup(max_entries=v)),
    ("ray.process.batch_size", "batch_size", lambda v, t: __import__("luminamoon.ray").ray.process(
        _FakeDataset(), stages={}, batch_size=v, num_partitions=1)),
    ("ray.process.num_partitions", "num_partitions", lambda v, t: __import__("luminamoon.ray").ray.process(
        _FakeDataset(), stages={}, num_partitions=v)),
    ("ray.process.dedup_seed", "seed", lambda v, t: __import__("luminamoon.ray").ray.process(
        _FakeDataset(), stages={}, dedup={"seed": v}, num_partitions=1)),
]


@pytest.mark.parametrize("label,name,call", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_numpy_bool_and_float_refused(tmp_path, label, name, call):
    _refused_like(lambda v: call(v, tmp_path), True, np.bool_(True), name)
    _refused_like(lambda v: call(v, tmp_path), 2.0, np.float64(2.0), name)
    # and the numpy int in the same place is accepted (no TypeError/ValueError naming the argument)
    ok = {"MinHash.precision": np.int64(64), "minhash.precision": np.int64(64),
          "JsonlSource.gzip_spacing": np.int64(1 << 20), "JsonlSource.rank": np.int64(1)}.get(label, np.int64(2))
    try:
        r = call(ok, tmp_path)
    except _Stop:
        return  # ray.process got through its checks to the (fake) dataset
    except (TypeError, ValueError) as e:
        assert name not in str(e), f"{label}: {ok!r} refused: {e}"
        return
    close = getattr(r, "close", None)
    if callable(close) and not isinstance(r, StringTensor):
        close()
