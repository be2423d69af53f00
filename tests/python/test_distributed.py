"""DistributedPipeline on gloo (CPU) through torch.multiprocessing: sharding over 1–4 ranks,
global exact dedup == one process, elastic resume 3 -> 2 -> 4, a rank killed mid-commit.

The multi-rank tests start rank processes (spawn) running tests/python/dist_worker.py;
each process serves several runs to keep the module short.  The reference is always a
one-process ResumablePipeline / FusedPipeline over the same corpus.
"""
import gzip
import json
import os
import random
import re
import subprocess
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp

import luminamoon
from luminamoon import FusedPipeline, StreamDeduplicator, hash128
from luminamoon.data import (DistributedPipeline, IterableSource, JsonlSource, ResumablePipeline, TextSource,
                             write_jsonl)
from luminamoon.data.dist_state import crc32c, owner_of, read_wal_hashes, wal_path
from luminamoon.data.dist_stream import GlobalStream

import dist_worker
from conftest import CORPUS

STAGES = {"quality": False}  # the corpus is mostly short package blurbs: quality would drop 98% of it


def make_corpus(path, n=1500, dups=300, seed=0):
    """The shared corpus's first n documents (else generated text), plus exact duplicates, shuffled."""
    rng = random.Random(seed)
    docs = []
    if CORPUS.exists():
        with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
            for line in f:
                docs.append(json.loads(line)["text"])
                if len(docs) >= n:
                    break
    else:
        words = ("data training model token corpus filter clean text quality pipeline resume commit "
                 "package library debian python kernel tensor").split()
        for i in range(n):
            docs.append(" ".join(rng.choice(words) for _ in range(rng.randint(20, 200))) + f". Doc {i}.")
        docs[5] = "write to ann@example.org or call 555-123-4567 " + docs[5]
    docs += [docs[rng.randrange(len(docs))] for _ in range(dups)]
    rng.shuffle(docs)
    write_jsonl(path, ({"id": f"doc-{i}", "text": t} for i, t in enumerate(docs)))
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("dist-corpus")
    path = d / "corpus.jsonl"
    docs = make_corpus(path)
    return str(path), docs


def single_process(corpus_path, stages=STAGES, dedup=True, near_dedup=False):
    """{global index: text} of the kept documents of a one-process ResumablePipeline."""
    out = {}
    with ResumablePipeline(JsonlSource(corpus_path), stages=stages, dedup=dedup, batch_size=37,
                           prefetch_batches=0, near_dedup=near_dedup) as pipe:
        for b in pipe:
            for i, t in zip(b.source_index.tolist(), b.texts.tolist()):
                g = int(b.records[i]["id"].split("-")[1])
                assert g not in out
                out[g] = t
    return out


def spawn(world, spec, tmp, expect_ok=True, timeout=240):
    """Start `world` rank processes running dist_worker.run(spec); returns their exit codes."""
    ctx = mp.get_context("spawn")
    store = os.path.join(tmp, f"store-{time.time_ns()}")
    procs = [ctx.Process(target=dist_worker.run, args=(r, world, store, spec)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:  # stragglers of a crashed group
        if p.is_alive():
            p.kill()
            p.join()
    codes = [p.exitcode for p in procs]
    if expect_ok:
        assert codes == [0] * world, f"rank exit codes {codes}"
    return codes


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


# --------------------------------------------------------------- unit tests


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_read_wal_hashes_lsn_order_and_checks(tmp_path):
    p = str(tmp_path / "d.wal")
    texts = [f"document {i % 700}" for i in range(1000)] + [f"late {i}" for i in range(9000)]
    firsts = list(dict.fromkeys(texts))  # admission order = first occurrences in order
    with StreamDeduplicator(wal_path=p, wal_buffer_hashes=128) as d:  # many records
        d(texts[:5000])
        d.sync()
        d(texts[5000:])
        assert d.lsn == len(firsts)
    full = read_wal_hashes(p, len(firsts))
    assert full.equal(hash128(firsts))
    assert read_wal_hashes(p, 333).equal(hash128(firsts[:333]))
    assert read_wal_hashes(p, 0).shape == (0, 2)
    with pytest.raises(OSError, match="needs"):
        read_wal_hashes(p, len(firsts) + 1)
    with pytest.raises(OSError, match="seed"):
        read_wal_hashes(p, 10, seed=7)
    raw = bytearray(open(p, "rb").read())
    bad = bytearray(raw)
    bad[64 + 4] ^= 1  # first record's count: its header CRC no longer matches
    open(p, "wb").write(bytes(bad))
    with pytest.raises(OSError, match="bad WAL record"):
        read_wal_hashes(p, 10)
    bad = bytearray(raw)
    bad[0] = ord("X")
    open(p, "wb").write(bytes(bad))
    with pytest.raises(OSError, match="not a dedup WAL"):
        read_wal_hashes(p, 10)


def test_owner_rule_is_low_64_bits_unsigned_mod_w():
    h = hash128([f"t{i}" for i in range(500)])
    for W in (1, 2, 3, 4, 7):
        own = owner_of(h, W)
        ref = [(int(lo) & (2 ** 64 - 1)) % W for lo in h[:, 0].tolist()]
        assert own.tolist() == ref


@pytest.mark.parametrize("kind", ["jsonl", "text", "iterable"])
def test_global_stream_positions_equal_the_sources_own(tmp_path, kind):
    lines = [f"line {i} " + "x" * (i % 13) for i in range(300)]
    if kind == "jsonl":
        p = tmp_path / "a.jsonl.gz"
        write_jsonl(p, [json.dumps({"text": t}) if i % 17 else "   " for i, t in enumerate(lines)], frame_bytes=2000)
        make = lambda: JsonlSource(str(p), gzip_index=False)  # noqa: E731
    elif kind == "text":
        p = tmp_path / "a.txt"
        p.write_text("\n".join(lines) + "\n")
        make = lambda: TextSource(str(p))  # noqa: E731
    else:
        make = lambda: IterableSource(lambda: iter(lines))  # noqa: E731
    gs, ref = GlobalStream(make()), make()
    it = iter(ref)
    expected_mode = {"jsonl": "jsonl", "text": "text", "iterable": "records"}[kind]
    assert gs.mode == expected_mode
    total = 0
    for n in (1, 7, 50, 1000):
        items = gs.take(n)
        want = [next(it) for _ in range(len(items))]
        assert [gs.parse(x)["text"] for x in items] == [w["text"] for w in want]
        if len(items) < n:  # the stream ended inside take(): both are past the end
            assert list(it) == []
        assert gs.position() == ref.position()
        total += len(items)
    assert gs.take(5) == []
    # resuming a source at a GlobalStream position continues exactly there
    s2 = make()
    gs2 = GlobalStream(s2)
    gs2.take(123)
    s3 = make()
    s3.seek(gs2.position())
    assert [r["text"] for r in s3] == [gs2.parse(x)["text"] for x in gs2.take(10 ** 6)]


def test_sharded_source_is_refused(tmp_path):
    p = tmp_path / "a.jsonl"
    write_jsonl(p, [{"text": "a"}])
    with pytest.raises(ValueError, match="unsharded"):
        DistributedPipeline(JsonlSource(str(p), rank=0, world_size=2))


def test_one_rank_without_process_group_equals_fused_and_resumes(corpus, tmp_path):
    path, docs = corpus
    ref = FusedPipeline(quality=False)(docs)
    ref_kept = dict(zip(ref.source_index.tolist(), ref.texts.tolist()))
    assert ref_kept == single_process(path)
    sd = str(tmp_path / "state")
    got = {}
    with DistributedPipeline(JsonlSource(path), batch_size=64, stages=STAGES, state_dir=sd) as pipe:
        assert (pipe.rank, pipe.world_size) == (0, 1)
        for b in pipe:
            assert b.reasons.shape[0] == b.n_in == len(b.records)
            for g, t in zip(b.kept_global_index.tolist(), b.texts.tolist()):
                got[g] = t
            if b.index == 9:
                pipe.commit(extra={"at": 10})
            if b.index == 14:
                break  # steps 10..14 delivered but not committed
    assert {g: t for g, t in got.items()} == {g: t for g, t in ref_kept.items() if g < 15 * 64}
    got2 = {}
    with DistributedPipeline(JsonlSource(path), batch_size=64, stages=STAGES, state_dir=sd) as pipe:
        assert pipe.resumed_from["step"] == 10 and pipe.resume_extra == {"at": 10}
        for b in pipe:
            for g, t in zip(b.kept_global_index.tolist(), b.texts.tolist()):
                got2[g] = t
    assert min(got2) >= 640
    merged = {g: t for g, t in got.items() if g < 640}
    assert not set(merged) & set(got2)
    merged.update(got2)
    assert merged == ref_kept
    # a checkpoint taken under another dedup mode is refused
    with pytest.raises(ValueError, match="dedup"):
        DistributedPipeline(JsonlSource(path), dedup="local", stages=STAGES, state_dir=sd)


def test_refuses_a_single_process_state_dir(corpus, tmp_path):
    path, _ = corpus
    sd = str(tmp_path / "rp")
    with ResumablePipeline(JsonlSource(path), batch_size=100, state_dir=sd, prefetch_batches=0) as pipe:
        next(iter(pipe))
        pipe.commit()
    with pytest.raises(OSError, match="not a distributed one"):
        DistributedPipeline(JsonlSource(path), state_dir=sd)


# --------------------------------------------------------------- multi-rank


def test_world_sizes_1_to_4_equal_single_process(corpus, tmp_path):
    """Global dedup: the union over ranks == the one-process run, exactly (kept set and texts).
    dedup="local": each rank == one-process dedup of its own records (a document that
    two ranks see is kept by both; the union has every distinct text).  dedup=None:
    the union == the one-process run without dedup."""
    path, docs = corpus
    d = str(tmp_path)
    tiny = os.path.join(d, "tiny.jsonl")  # 10 records, 4 ranks x 2: the last step has 2 records for 4 ranks
    write_jsonl(tiny, ({"id": f"doc-{i}", "text": t} for i, t in enumerate("a b a c b d e a f a".split())))
    spec = {"jobs": [
        {"kind": "pool", "world_sizes": [4], "modes": ["global"], "dir": d, "tag": "-tiny", "corpus": tiny,
         "batch_size": 2, "stages": {"quality": False, "cleaner": False}},
        {"kind": "pool", "world_sizes": [1, 2, 3, 4], "modes": ["global", "local", "none"], "dir": d,
         "corpus": path, "batch_size": 16, "stages": STAGES, "prefetch": 2},
        {"kind": "pool", "world_sizes": [3], "modes": ["global"], "dir": d, "tag": "-q", "corpus": path,
         "batch_size": 40, "stages": None, "prefetch": 0},  # quality on, no prefetch
        {"kind": "mismatch", "dir": d, "corpus": path},
    ]}
    spawn(4, spec, d)
    ref = single_process(path)
    ref_none = single_process(path, dedup=False)
    ref_q = single_process(path, stages=None)
    n = len(docs)
    assert len(ref) < len(ref_none) == n  # the corpus has duplicates
    for W in (1, 2, 3, 4):
        for mode, want in (("global", ref), ("none", ref_none), ("local", None)):
            union, seen_inputs = {}, []
            for r in range(W):
                lines = read_lines(os.path.join(d, f"out-W{W}-{mode}-rank{r}.jsonl"))
                assert [x["step"] for x in lines] == list(range(len(lines)))
                mine = {}
                for x in lines:
                    # record sharding: rank r gets the records of each global batch with index = r mod W
                    assert all(g % W == r for g in x["gidx"])
                    seen_inputs += x["gidx"]
                    for g, i, t in x["kept"]:
                        assert i == f"doc-{g}" and g not in union
                        union[g] = mine[g] = t
                if mode == "local":  # one-process dedup of this rank's own records
                    sub = [g for g in range(n) if g % W == r]
                    res = FusedPipeline(quality=False)([docs[g] for g in sub])
                    assert mine == {sub[i]: t for i, t in zip(res.source_index.tolist(), res.texts.tolist())}
            assert sorted(seen_inputs) == list(range(n))  # every record read by exactly one rank
            if want is not None:
                assert union == want, (W, mode)
            else:
                assert set(union.values()) == set(ref.values()) and len(union) >= len(ref)
            stats = [json.load(open(os.path.join(d, f"stats-W{W}-{mode}-rank{r}.json"))) for r in range(W)]
            if mode == "global":
                sent = sum(s["bytes_sent"] for s in stats)
                assert sent == sum(s["bytes_received"] for s in stats)
                docs_x = sum(s["docs"] for s in stats)
                assert docs_x == n
                if W == 1:
                    assert sent == 0
                else:  # 24 B per request and 1 B per answer to a peer, 8 B counts per peer and step
                    steps = stats[0]["steps"]
                    assert 0 < sent <= 25 * n + 8 * W * (W - 1) * steps
    for r in range(2):  # commits after different steps: refused on both ranks, the first commit stands
        m = json.load(open(os.path.join(d, f"mismatch-rank{r}.json")))
        assert "after the same step" in m["error"] and m["commit_id"] == 1
    union, steps = {}, []
    for r in range(4):
        lines = read_lines(os.path.join(d, f"out-W4-global-tiny-rank{r}.jsonl"))
        steps.append(len(lines))
        assert lines[-1]["gidx"] == ([8 + r] if r < 2 else [])  # every rank gets the last step, maybe empty
        for x in lines:
            for g, _, t in x["kept"]:
                union[g] = t
    assert steps == [2] * 4
    assert union == {0: "a", 1: "b", 3: "c", 5: "d", 6: "e", 8: "f"}
    union = {}
    for r in range(3):
        for x in read_lines(os.path.join(d, f"out-W3-global-q-rank{r}.jsonl")):
            for g, _, t in x["kept"]:
                union[g] = t
    assert union == ref_q and len(ref_q) < len(ref)


def _committed(d, names, last_ok=True):
    """Concatenate the committed outputs of consecutive runs: run j's batches whose
    end coordinate is <= the sample index the next run resumed from."""
    starts = []
    for name in names:
        meta = json.load(open(os.path.join(d, f"meta-{name}-rank0.json")))
        rf = meta["resumed_from"]
        starts.append(0 if rf is None else rf["sample_index"])
    kept, inputs = {}, []
    for j, name in enumerate(names):
        limit = starts[j + 1] if j + 1 < len(names) else float("inf")
        W = json.load(open(os.path.join(d, f"meta-{name}-rank0.json")))["world_size"]
        for r in range(W):
            for x in read_lines(os.path.join(d, f"out-{name}-rank{r}.jsonl")):
                if x["end"] <= limit:
                    inputs += x["gidx"]
                    for g, i, t in x["kept"]:
                        assert g not in kept, f"document {g} delivered twice"
                        kept[g] = t
    return kept, inputs, starts


def test_elastic_3_to_2_to_4_exactly_once(corpus, tmp_path):
    path, docs = corpus
    d, sd = str(tmp_path), str(tmp_path / "state")
    base = {"kind": "phase", "dir": d, "corpus": path, "state_dir": sd, "batch_size": 16, "stages": STAGES}
    # 3 ranks: G = 48; commits after steps 4 and 8, SIGKILL after step 11 (3 steps uncommitted)
    spawn(3, {"jobs": [dict(base, name="a", commit_at=[4, 8], die_after=11)]}, d, expect_ok=False)
    assert sorted(f for f in os.listdir(sd) if f.endswith(".wal")) == [f"dedup-rank{i}-of3.wal" for i in range(3)]
    # a switch to 2 ranks that dies before its first commit: the 3-rank checkpoint stays in force
    spawn(2, {"jobs": [dict(base, name="a2", die_after=10)]}, d, expect_ok=False)
    assert sorted(f for f in os.listdir(sd) if f.endswith(".wal")) == sorted(
        ["dedup-rank0-of2.wal", "dedup-rank1-of2.wal"] + [f"dedup-rank{i}-of3.wal" for i in range(3)])
    # 2 ranks (G = 32) resume at sample 8 * 48; commit after step 14, SIGKILL after step 17
    spawn(2, {"jobs": [dict(base, name="b", commit_at=[14], die_after=17)]}, d, expect_ok=False)
    assert sorted(f for f in os.listdir(sd) if f.endswith(".wal")) == ["dedup-rank0-of2.wal", "dedup-rank1-of2.wal"]
    # 4 ranks (G = 64) resume at 8 * 48 + 6 * 32 and run to the end
    spawn(4, {"jobs": [dict(base, name="c", commit_at=[20])]}, d)
    metas = [json.load(open(os.path.join(d, f"meta-{n}-rank0.json"))) for n in "abc"]
    a2 = json.load(open(os.path.join(d, "meta-a2-rank0.json")))
    assert metas[1]["resumed_from"] == a2["resumed_from"] == {"commit_id": 2, "step": 8, "sample_index": 384,
                                                              "world_size": 3}
    assert metas[2]["resumed_from"] == {"commit_id": 3, "step": 14, "sample_index": 576, "world_size": 2}
    assert metas[2]["resume_extra"] is None  # another world size: the per-rank extras are not handed out
    kept, inputs, _ = _committed(d, ["a", "a2", "b", "c"])
    assert sorted(inputs) == list(range(len(docs)))  # every record processed exactly once overall
    assert kept == single_process(path)  # same dedup decisions and texts as one process
    assert sorted(f for f in os.listdir(sd) if f.endswith(".wal")) == [f"dedup-rank{i}-of4.wal" for i in range(4)]
    assert all(read_wal_hashes(wal_path(sd, i, 4), 1).shape == (1, 2) for i in range(4))


def test_rank_killed_mid_commit_keeps_previous_checkpoint(corpus, tmp_path):
    path, docs = corpus
    d, sd = str(tmp_path), str(tmp_path / "state")
    base = {"kind": "phase", "dir": d, "corpus": path, "state_dir": sd, "batch_size": 16, "stages": STAGES}
    fault = lambda rank, spec: {str(rank): {"LUMINAMOON_DIST_FAULT": spec}}  # noqa: E731
    # rank 1 dies in its 2nd commit (step 6) after its WAL sync + sidecar, before the agreement
    spawn(3, {"env": fault(1, "rank_sidecar:1:2"), "jobs": [dict(base, name="a", commit_at=[3, 6])]}, d,
          expect_ok=False)
    # same world size; rank 0 dies in its 2nd commit (step 9) after the global sidecar, before the slot
    spawn(3, {"env": fault(0, "global_sidecar:0:2"), "jobs": [dict(base, name="b", commit_at=[5, 9])]}, d,
          expect_ok=False)
    # 2 ranks; rank 0 dies in its 2nd commit (step 12) right after the slot: that commit stands
    spawn(2, {"env": fault(0, "slot:0:2"), "jobs": [dict(base, name="c", commit_at=[8, 12])]}, d, expect_ok=False)
    spawn(3, {"jobs": [dict(base, name="d")]}, d)
    rf = [json.load(open(os.path.join(d, f"meta-{n}-rank0.json")))["resumed_from"] for n in "abcd"]
    assert rf[0] is None
    assert (rf[1]["step"], rf[1]["world_size"]) == (3, 3)  # the killed commit of step 6 never happened
    assert (rf[2]["step"], rf[2]["world_size"]) == (5, 3)  # nor the one of step 9
    assert (rf[3]["step"], rf[3]["world_size"]) == (12, 2)  # the slot was written: step 12 is committed
    kept, inputs, starts = _committed(d, list("abcd"))
    assert starts == [0, 3 * 48, 5 * 48, 5 * 48 + 7 * 32]
    assert sorted(inputs) == list(range(len(docs)))
    assert kept == single_process(path)


@pytest.mark.parametrize("mode", ["global", "local"])
def test_restore_dedup_repartitions_committed_hashes_only(tmp_path, mode):
    """Old world of 3 ranks with committed LSNs and uncommitted tails -> new world of 2:
    each new rank holds exactly the committed hashes it owns (global) or all of them (local)."""
    from luminamoon.data.dist_state import restore_dedup

    sd = str(tmp_path)
    texts = [f"doc {i}" for i in range(3000)]
    h = hash128(texts)
    own3 = owner_of(h, 3)
    committed, lsns = [], []
    for i in range(3):
        mine = [t for t, o in zip(texts, own3.tolist()) if o == i]
        cut = len(mine) * 2 // 3
        with StreamDeduplicator(wal_path=wal_path(sd, i, 3), wal_buffer_hashes=100) as d:
            d(mine[:cut])
            d.sync()
            d(mine[cut:])  # admitted after the commit: must not survive the switch
        committed += mine[:cut]
        lsns.append(cut)
    side = {"world_size": 3, "wal_lsns": lsns, "commit_id": 1}
    calls = []

    def agree(err, what):
        calls.append((err, what))
        if err:
            raise OSError(err)

    want = set(map(tuple, hash128(committed).tolist()))
    for r in range(2):
        d, resized = restore_dedup(sd, r, 2, mode, 0, side, agree)
        try:
            assert resized == 3
            held = read_wal_hashes(d.path, d.lsn)
            got = set(map(tuple, held.tolist()))
            if mode == "global":
                assert got == {x for x in want if (x[0] & (2 ** 64 - 1)) % 2 == r}
            else:
                assert got == want
            assert d.lsn == len(got)
            for t in committed[:50]:
                assert (t in d) == (mode == "local" or owner_of(hash128([t]), 2)[0] == r)
        finally:
            d.close()
    assert [c[0] for c in calls] == [None, None]
    # the old logs are untouched: still every admitted hash, committed or not
    assert sum(len(read_wal_hashes(wal_path(sd, i, 3), 0)) for i in range(3)) == 0
    for i in range(3):
        with StreamDeduplicator(wal_path=wal_path(sd, i, 3)) as d:
            assert d.lsn == int((own3 == i).sum())
    # a damaged old log is reported through the agreement, and nothing is built on it
    with open(wal_path(sd, 1, 3), "r+b") as f:
        f.seek(64 + 24 + 5)
        b = f.read(1)
        f.seek(64 + 24 + 5)
        f.write(bytes([b[0] ^ 0xFF]))
    size = os.path.getsize(wal_path(sd, 1, 3))
    with pytest.raises(OSError):
        restore_dedup(sd, 1, 2, mode, 0, side, agree)
    assert calls[-1][0].startswith("CorruptError")
    assert os.path.getsize(wal_path(sd, 1, 3)) == size  # corruption in the middle: the file is left as it is


def test_ranks_that_disagree_refuse_at_start(corpus, tmp_path):
    """Issue 19 item 8: ranks given different files of the same length ran and committed
    (wrong data); different lengths hung until the group timeout; batch_size 200 vs 150
    delivered wrong shards.  Now every rank refuses at start, naming what differs."""
    path, docs = corpus
    d = str(tmp_path)
    lines = open(path, "rb").read().splitlines(keepends=True)
    same_len = os.path.join(d, "same-length.jsonl")  # one record's text changed, same byte length
    rec = json.loads(lines[7])
    rec["text"] = rec["text"][::-1]
    with open(same_len, "wb") as f:
        f.writelines(lines[:7] + [(json.dumps(rec) + "\n").encode()] + lines[8:])
    assert os.path.getsize(same_len) == os.path.getsize(path) and open(same_len, "rb").read() != open(path, "rb").read()
    shorter = os.path.join(d, "shorter.jsonl")
    with open(shorter, "wb") as f:
        f.writelines(lines[:-100])
    base = {"kind": "disagree", "dir": d, "corpus": path, "batch_size": 200}
    jobs = [{**base, "name": "content", "per_rank": {"1": {"corpus": same_len}}},
            {**base, "name": "length", "per_rank": {"1": {"corpus": shorter}}},
            {**base, "name": "batch", "per_rank": {"1": {"batch_size": 150}}},
            {**base, "name": "stages", "per_rank": {"0": {"stages": STAGES}}},
            {**base, "name": "agree", "stages": STAGES}]
    spawn(2, {"jobs": jobs}, d)
    expect = {"content": "input file 0 '.*' differs in content", "length": "input file 0 '.*' differs in size",
              "batch": "rank 1 has batch_size=150, rank 0 200", "stages": "rank 1 has stages=.*quality"}
    for name, pattern in expect.items():
        for r in range(2):
            err = json.load(open(os.path.join(d, f"disagree-{name}-rank{r}.json")))["error"]
            assert err is not None and re.search(pattern, err), (name, r, err)
    for r in range(2):
        assert json.load(open(os.path.join(d, f"disagree-agree-rank{r}.json")))["error"] is None


def test_a_rank_that_fails_stops_the_others_at_once(corpus, tmp_path):
    """Issue 19 item 8: a rank that hit a BadRecordError and then called commit() left the
    others blocked in the dedup exchange until the group timeout.  Now the others raise
    PeerFailedError at that step, and a commit() on every rank commits what was received."""
    path, docs = corpus
    d = str(tmp_path)
    W, bs = 3, 50
    lines = open(path, "rb").read().splitlines(keepends=True)
    bad_at = 2 * W * bs + 1  # global step 2, owned by rank 1 (gidx mod W)
    lines[bad_at] = b'{"text": "unterminated\n'
    bad = os.path.join(d, "bad.jsonl")
    with open(bad, "wb") as f:
        f.writelines(lines)
    job = {"kind": "bad_record", "dir": d, "corpus": bad, "batch_size": bs, "stages": STAGES,
           "state_dir": os.path.join(d, "state")}
    spawn(W, {"jobs": [job]}, d)
    outs = [json.load(open(os.path.join(d, f"bad-record-rank{r}.json"))) for r in range(W)]
    assert outs[1]["error"][0] == "BadRecordError" and f"bad.jsonl:{bad_at + 1}:" in outs[1]["error"][1]
    for r in (0, 2):
        assert outs[r]["error"][0] == "PeerFailedError" and "rank(s) [1] failed" in outs[r]["error"][1], outs[r]
    assert [o["batches"] for o in outs] == [2] * W
    assert [o.get("commit") for o in outs] == [1] * W, outs


def test_four_ranks_exit_cleanly_every_time(corpus, tmp_path):
    """Issue 17 part 1: one 4-rank run in three aborted at exit ("terminate called without an
    active exception", SIGABRT) after destroy_process_group() had returned: the pipeline kept
    references to the gloo group after close(), so gloo's threads outlived
    destroy_process_group() and were torn down during the interpreter's finalization.
    LM_DIST_EXIT_RUNS runs (default 10: 40 exits, where one in three runs aborted before the
    fix) of 4 ranks, each ending with a normal interpreter exit: every exit code 0, and gloo's
    threads gone once destroy_process_group() returned (the deterministic part: before the fix
    they were still there in every run)."""
    runs = int(os.environ.get("LM_DIST_EXIT_RUNS", "10"))
    path, docs = corpus
    d = str(tmp_path)
    ref = len(single_process(path))
    p = subprocess.run([sys.executable, dist_worker.__file__, "exit-runs", str(runs), "4", d, path],
                       capture_output=True, text=True, timeout=60 + 30 * runs)
    assert p.returncode == 0, p.stdout + p.stderr
    codes = json.load(open(os.path.join(d, "exit-codes.json")))
    assert codes == [[0] * 4] * runs, (codes, p.stderr[-3000:])
    assert "terminate called" not in p.stderr
    for run_no in range(runs):
        res = [json.load(open(os.path.join(d, f"exit-{run_no}-rank{r}.json"))) for r in range(4)]
        assert sum(x["kept"] for x in res) == ref
        assert [x["threads_after"] for x in res] == [x["threads_before"] for x in res], (run_no, res)


def test_deeply_nested_json_is_a_bad_record_in_the_global_stream(tmp_path):
    """Issue 19 item 9, the distributed reader: 100,000 nested '[' raised RecursionError."""
    p = tmp_path / "deep.jsonl"
    p.write_bytes(b'{"text": "a"}\n{"text": "x", "meta": ' + b"[" * 100000 + b'\n{"text": "c"}\n')
    with pytest.raises(luminamoon.data.BadRecordError, match=rf"{p}:2: .*nested too deeply"):
        with DistributedPipeline(JsonlSource(str(p)), batch_size=4, stages={"quality": False},
                                 prefetch_batches=0) as pipe:
            list(pipe)
    with DistributedPipeline(JsonlSource(str(p), on_error="skip"), batch_size=4, stages={"quality": False},
                             prefetch_batches=0) as pipe:
        assert [t for b in pipe for t in b.texts.tolist()] == ["a", "c"]


# ------------------------------------------------------------ near dedup (issue 12 part 4)


def test_near_dedup_world_sizes_1_to_4_equal_single_process(corpus, tmp_path):
    """near_dedup="global": band keys owned by rank key mod W; the union over ranks equals a
    one-process ResumablePipeline(near_dedup=True) exactly, with exact dedup on or off.
    near_dedup="local": each rank equals a one-process near dedup of its own records."""
    path, docs = corpus
    d = str(tmp_path)
    spec = {"jobs": [
        {"kind": "pool", "world_sizes": [1, 2, 3, 4], "modes": ["global"], "dir": d, "tag": "-near",
         "corpus": path, "batch_size": 16, "stages": STAGES, "prefetch": 2, "near": "global"},
        {"kind": "pool", "world_sizes": [3], "modes": ["none"], "dir": d, "tag": "-nearonly",
         "corpus": path, "batch_size": 24, "stages": STAGES, "prefetch": 0, "near": "global"},
        {"kind": "pool", "world_sizes": [2], "modes": ["local"], "dir": d, "tag": "-nearlocal",
         "corpus": path, "batch_size": 16, "stages": STAGES, "near": "local"},
    ]}
    spawn(4, spec, d)
    ref = single_process(path, near_dedup=True)
    ref_exact = single_process(path)
    assert len(ref) < len(ref_exact) - 50  # near dedup removes many more documents on this corpus
    ref_near_only = single_process(path, dedup=False, near_dedup=True)
    n = len(docs)

    def union_of(tag, W):
        union, inputs, near = {}, [], 0
        for r in range(W):
            for x in read_lines(os.path.join(d, f"out-{tag}-rank{r}.jsonl")):
                inputs += x["gidx"]
                near += x["reasons"].count(luminamoon.stages.REASON_NEAR_DUPLICATE)
                for g, i, t in x["kept"]:
                    assert i == f"doc-{g}" and g not in union
                    union[g] = t
        assert sorted(inputs) == list(range(n))
        return union, near

    for W in (1, 2, 3, 4):
        union, near = union_of(f"W{W}-global-near", W)
        assert union == ref, W
        assert near == len(ref_exact) - len(ref)
    assert union_of("W3-none-nearonly", 3)[0] == ref_near_only
    for r in range(2):  # dedup="local", near_dedup="local": a one-process exact + near dedup of this rank's records
        mine = {}
        for x in read_lines(os.path.join(d, f"out-W2-local-nearlocal-rank{r}.jsonl")):
            for g, _, t in x["kept"]:
                mine[g] = t
        sub = [g for g in range(n) if g % 2 == r]
        with FusedPipeline(quality=False, near_dedup=True) as fp:
            res = fp([docs[g] for g in sub])
        assert mine == {sub[i]: t for i, t in zip(res.source_index.tolist(), res.texts.tolist())}


def test_near_dedup_elastic_3_to_2_to_4_exactly_once(corpus, tmp_path):
    path, docs = corpus
    d, sd = str(tmp_path), str(tmp_path / "state")
    base = {"kind": "phase", "dir": d, "corpus": path, "state_dir": sd, "batch_size": 16, "stages": STAGES,
            "near": "global"}
    spawn(3, {"jobs": [dict(base, name="a", commit_at=[4, 8], die_after=11)]}, d, expect_ok=False)
    assert sorted(f for f in os.listdir(sd) if f.startswith("near-")) == [f"near-rank{i}-of3.wal" for i in range(3)]
    spawn(2, {"jobs": [dict(base, name="a2", die_after=10)]}, d, expect_ok=False)
    spawn(2, {"jobs": [dict(base, name="b", commit_at=[14], die_after=17)]}, d, expect_ok=False)
    assert sorted(f for f in os.listdir(sd) if f.startswith("near-")) == ["near-rank0-of2.wal", "near-rank1-of2.wal"]
    spawn(4, {"jobs": [dict(base, name="c", commit_at=[20])]}, d)
    kept, inputs, starts = _committed(d, ["a", "a2", "b", "c"])
    assert starts[1:] == [384, 384, 576]
    assert sorted(inputs) == list(range(len(docs)))  # every record processed exactly once overall
    assert kept == single_process(path, near_dedup=True)  # same exact + near decisions as one process
    assert sorted(f for f in os.listdir(sd) if f.startswith("near-")) == [f"near-rank{i}-of4.wal" for i in range(4)]
    # another near-dedup configuration is refused on resume
    with pytest.raises(ValueError, match="near_dedup"):
        DistributedPipeline(JsonlSource(path), batch_size=16, state_dir=sd, stages=STAGES, near_dedup="global",
                            near_dedup_config={"num_buckets": 20})
