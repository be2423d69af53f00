"""The dedup logs of DistributedPipeline (one per rank) and of the collate's GlobalDedup carry a random
header tag that every commit records, as ResumablePipeline's dedup.wal does.

Was: a log copied in from another state folder / another run with the same settings was accepted and
its table used -- documents dropped or kept by another run's history, silently.  Now a resume whose
log's header tag differs from the committed one is refused with OSError naming the log, before any
file is changed (on every rank); the honest resume (own logs, also on another number of ranks) still
delivers what the uninterrupted run delivers; a commit written before commits recorded the tag
(no ``wal_tags`` / ``wal_tag``) still resumes.
"""
import json
import os
import random
import re
import shutil
import time
import zlib
from datetime import timedelta

import pytest
import torch
import torch.multiprocessing as mp

from luminamoon import _C
from luminamoon.data import DistributedPipeline, JsonlSource, write_jsonl
from luminamoon.data.checkpoint import dump_json, wal_path

STAGES = {"quality": False}
BATCH = 16
WORDS = ("data training model token corpus filter clean text quality pipeline resume commit package "
         "library debian python kernel tensor").split()


def _corpus(path, reverse=False):
    rng = random.Random(3)
    docs = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) + f". Doc {i}." for i in range(300)]
    docs += [docs[rng.randrange(len(docs))] for _ in range(80)]  # exact duplicates, later in the stream
    rng.shuffle(docs)
    if reverse:  # another run with the same settings: another history in its dedup logs
        docs = docs[::-1]
    write_jsonl(path, ({"id": f"doc-{i}", "text": t} for i, t in enumerate(docs)))
    return str(path)


def _run_dp(corpus, state_dir, commit_after=None, stop_after=None, group=None):
    """One DistributedPipeline run (this rank): resume from state_dir, commit after step ``commit_after``
    (then the coordinate is step commit_after + 1), stop after step ``stop_after`` (its later steps
    uncommitted), else run to the end and commit.  {"kept": [[step, global index, text], ...],
    "resumed_from": ...}, or {"error": [type, message]} when the constructor refused."""
    try:
        pipe = DistributedPipeline(JsonlSource(corpus), batch_size=BATCH, stages=STAGES, state_dir=state_dir,
                                   prefetch_batches=0, num_threads=1, group=group)
    except Exception as e:
        return {"error": [type(e).__name__, str(e)]}
    kept = []
    with pipe:
        resumed_from = pipe.resumed_from
        for b in pipe:
            kept += [[b.index, g, t] for g, t in zip(b.kept_global_index.tolist(), b.texts.tolist())]
            if b.index == commit_after:
                pipe.commit()
            if b.index == stop_after:
                break
        else:
            pipe.commit()
    return {"kept": kept, "resumed_from": resumed_from}


def _rank_main(rank, world, store, jobs, out_dir):
    """A rank process (spawn): runs ``jobs`` in order, each written to out_dir/<name>-rank<r>.json."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    try:
        for job in jobs:
            res = _run_dp(job["corpus"], job["state_dir"], job.get("commit_after"), job.get("stop_after"))
            with open(os.path.join(out_dir, f"{job['name']}-rank{rank}.json"), "w") as f:
                json.dump(res, f)
            dist.barrier()
    finally:
        dist.destroy_process_group()


def _spawn(world, jobs, tmp):
    ctx = mp.get_context("spawn")
    store = os.path.join(tmp, f"store-{time.time_ns()}")
    procs = [ctx.Process(target=_rank_main, args=(r, world, store, jobs, tmp)) for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 240
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    assert [p.exitcode for p in procs] == [0] * world
    out = {}
    for job in jobs:
        out[job["name"]] = [json.load(open(os.path.join(tmp, f"{job['name']}-rank{r}.json"))) for r in range(world)]
    return out


def _files(d):
    """Every file of a state folder and its bytes (the lock file holds the locker's pid: left out)."""
    return {n: open(os.path.join(d, n), "rb").read() for n in sorted(os.listdir(d)) if n != "lock"}


def _kept(results, before_step=None):
    """{global index: text} of every rank's results (only the steps before ``before_step``)."""
    out = {}
    for res in results:
        for step, g, t in res["kept"]:
            if before_step is None or step < before_step:
                assert g not in out, f"document {g} delivered twice"
                out[g] = t
    return out


def _strip_tags(sd):
    """Make the folder's last commit look like one written before commits recorded the logs' tags:
    drop ``wal_tags`` from the global sidecar (and re-point the state slot at its new CRC) and
    ``wal_tag`` from the rank sidecars."""
    from luminamoon.state import StateTracker

    st = StateTracker(os.path.join(sd, "state"))
    try:
        coord, _ = st.load()
        cid = int(coord["source_pos"])
        path = os.path.join(sd, f"commit-{cid:020d}.json")
        side = json.load(open(path))
        assert len(side.pop("wal_tags")) == int(side["world_size"])
        raw = dump_json(side)
        with open(path, "wb") as f:
            f.write(raw)
        st.commit(epoch=int(coord["epoch"]), batch_index=int(coord["batch_index"]),
                  sample_index=int(coord["sample_index"]), source_pos=cid, source_pos2=zlib.crc32(raw),
                  shard=int(coord["shard"]), wal_lsn=int(coord["wal_lsn"]))
    finally:
        st.close()
    for n in os.listdir(sd):
        if n.startswith(f"commit-{cid:020d}-rank"):
            p = os.path.join(sd, n)
            mine = json.load(open(p))
            mine.pop("wal_tag")
            with open(p, "w") as f:
                json.dump(mine, f, sort_keys=True)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("wal-tag-corpus")
    a, b = _corpus(d / "a.jsonl"), _corpus(d / "b.jsonl", reverse=True)
    ref = _run_dp(a, str(d / "ref-state"))  # the uninterrupted run (one rank == any number of ranks)
    return a, b, _kept([ref])


# ------------------------------------------------------------------ DistributedPipeline, one rank


def test_dist_one_rank_foreign_log_refused_own_and_untagged_resume(corpora, tmp_path):
    corpus, other, want = corpora
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    run_a = _run_dp(corpus, a, commit_after=5, stop_after=9)  # steps 6..9 delivered, not committed
    _run_dp(other, b, commit_after=12, stop_after=12)  # another run, same settings, more hashes
    saved = str(tmp_path / "a-saved")
    shutil.copytree(a, saved)
    log = wal_path(a, 0, 1)
    own_tag = bytes(_C.dedup_wal_inspect(log)["tag"]).hex()

    shutil.copyfile(wal_path(b, 0, 1), log)  # B's log over A's
    before = _files(a)
    with pytest.raises(OSError, match=re.escape(log)) as ei:
        DistributedPipeline(JsonlSource(corpus), batch_size=BATCH, stages=STAGES, state_dir=a, prefetch_batches=0)
    assert "not the log this state folder committed with" in str(ei.value)
    assert _files(a) == before  # nothing changed (the log was not opened, let alone cut)

    # the honest resume: A's own log back, the rest of the stream, as the uninterrupted run
    shutil.rmtree(a)
    shutil.copytree(saved, a)
    res = _run_dp(corpus, a)
    assert res["resumed_from"]["step"] == 6
    got = _kept([run_a], before_step=6)
    got.update(_kept([res]))
    assert got == want
    # and the commit it made records the log's tag, which a further resume accepts
    assert _run_dp(corpus, a)["kept"] == []
    side = json.load(open(os.path.join(saved, f"commit-{1:020d}.json")))
    assert side["wal_tags"] == [own_tag] and bytes.fromhex(own_tag) != bytes(32)  # random, not untagged zeros
    assert own_tag != json.load(open(os.path.join(b, f"commit-{1:020d}.json")))["wal_tags"][0]

    # a commit written before commits recorded the tag still resumes (the log's own tag is taken)
    legacy = str(tmp_path / "legacy")
    shutil.copytree(saved, legacy)
    _strip_tags(legacy)
    res = _run_dp(corpus, legacy)
    assert res["resumed_from"]["step"] == 6
    got = _kept([run_a], before_step=6)
    got.update(_kept([res]))
    assert got == want


# ------------------------------------------------------------------ DistributedPipeline, two ranks


def test_dist_two_ranks_foreign_logs_refused_on_every_rank_and_elastic(corpora, tmp_path):
    corpus, other, want = corpora
    d = str(tmp_path)
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    out = _spawn(2, [{"name": "a", "corpus": corpus, "state_dir": a, "commit_after": 4, "stop_after": 8},
                     {"name": "b", "corpus": other, "state_dir": b, "commit_after": 7, "stop_after": 7}], d)
    run_a = out["a"]
    saved = os.path.join(d, "a-saved")
    shutil.copytree(a, saved)

    # B's logs over A's (both ranks), and only rank 1's over another copy: refused on every rank
    half = os.path.join(d, "half")
    shutil.copytree(saved, half)
    for r in range(2):
        shutil.copyfile(wal_path(b, r, 2), wal_path(a, r, 2))
    shutil.copyfile(wal_path(b, 1, 2), wal_path(half, 1, 2))
    before_a, before_half = _files(a), _files(half)
    out = _spawn(2, [{"name": "foreign", "corpus": corpus, "state_dir": a},
                     {"name": "half", "corpus": corpus, "state_dir": half}], d)
    for r in range(2):
        assert "error" in out["foreign"][r] and "error" in out["half"][r], "a foreign log was accepted"
        typ, msg = out["foreign"][r]["error"]
        assert typ == "OSError" and "not the log this state folder committed with" in msg
        assert wal_path(a, 0, 2) in msg and wal_path(a, 1, 2) in msg
        typ, msg = out["half"][r]["error"]
        assert typ == "OSError" and wal_path(half, 1, 2) in msg
    assert _files(a) == before_a
    # rank 0's own log holds an uncommitted tail (steps 5..8): not cut, because rank 1's log was refused
    assert _files(half) == before_half

    # elastic: the 2-rank checkpoint with foreign logs resumed on one rank is refused too, unchanged
    with pytest.raises(OSError, match=re.escape(wal_path(a, 0, 2))):
        DistributedPipeline(JsonlSource(corpus), batch_size=BATCH, stages=STAGES, state_dir=a, prefetch_batches=0)
    assert _files(a) == before_a

    # honest resumes: 2 ranks (same world size), and 2 -> 1 rank (re-partition), each as the uninterrupted run
    shutil.rmtree(a)
    shutil.copytree(saved, a)
    one = os.path.join(d, "one")
    shutil.copytree(saved, one)
    legacy2, legacy1 = os.path.join(d, "legacy2"), os.path.join(d, "legacy1")
    for p in (legacy2, legacy1):
        shutil.copytree(saved, p)
        _strip_tags(p)
    out = _spawn(2, [{"name": "honest", "corpus": corpus, "state_dir": a},
                     {"name": "legacy2", "corpus": corpus, "state_dir": legacy2}], d)
    committed = _kept(run_a, before_step=5)
    for name in ("honest", "legacy2"):
        assert all(x["resumed_from"]["step"] == 5 for x in out[name])
        got = dict(committed)
        got.update(_kept(out[name]))
        assert got == want, name
    for p in (one, legacy1):
        res = _run_dp(corpus, p)
        assert res["resumed_from"] == {"commit_id": 1, "step": 5, "sample_index": 5 * 2 * BATCH, "world_size": 2}
        got = dict(committed)
        got.update(_kept([res]))
        assert got == want, p
        # the re-partitioned log is a new one with its own tag, recorded by the commit made after it
        tags = json.load(open(os.path.join(p, f"commit-{2:020d}.json")))["wal_tags"]
        assert len(tags) == 1 and tags[0] not in json.load(open(os.path.join(saved, f"commit-{1:020d}.json")))[
            "wal_tags"]
        assert sorted(n for n in os.listdir(p) if n.endswith(".wal")) == ["dedup-rank0-of1.wal"]
    tags = json.load(open(os.path.join(saved, f"commit-{1:020d}.json")))["wal_tags"]
    assert tags == [bytes(_C.dedup_wal_inspect(wal_path(saved, r, 2))["tag"]).hex() for r in range(2)]
    assert len(set(tags)) == 2  # one random tag per rank's log


# ------------------------------------------------------------------ the collate's GlobalDedup


def _collate_docs(reverse=False):
    rng = random.Random(5)
    docs = [{"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 30))) + f". Item {i}."}
            for i in range(120)]
    docs += [dict(docs[rng.randrange(120)]) for _ in range(40)]
    return docs[::-1] if reverse else docs


def test_collate_global_dedup_foreign_log_refused(tmp_path):
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    from luminamoon.data import create_resumable_collate, start_global_dedup

    docs = _collate_docs()

    def loader(server, state=None):
        c = create_resumable_collate(dedup=server, return_string_tensor=True, stages=STAGES)
        ld = sdl.StatefulDataLoader(c.stateful(docs), batch_size=8, collate_fn=c)
        if state is not None:
            ld.load_state_dict(state)
        return ld

    ref = start_global_dedup()  # the uninterrupted run
    try:
        want = [t for st in loader(ref) for t in st.tolist()]
    finally:
        ref.close()
    assert 0 < len(want) < len(docs)

    a_log, b_log = str(tmp_path / "a.wal"), str(tmp_path / "b.wal")
    server = start_global_dedup(wal_path=a_log)
    try:
        ld = loader(server)
        state0 = ld.state_dict()  # at the start (count 0)
        it = iter(ld)
        rows = [t for _ in range(3) for t in next(it).tolist()]
        state3 = ld.state_dict()
        for _ in range(2):  # admitted after the state: rolled back by a resume from it
            next(it)
        del it
        tag = state3["dataset_state"]["collate"].get("wal_tag")
        # the honest resume (the same server, its own log): as the uninterrupted run
        assert rows + [t for st in loader(server, state3) for t in st.tolist()] == want
        # a state taken before states recorded the tag (the field dropped) still resumes
        legacy = json.loads(json.dumps(state3))
        legacy["dataset_state"]["collate"].pop("wal_tag", None)
        assert rows + [t for st in loader(server, legacy) for t in st.tolist()] == want
    finally:
        server.close()
    own = open(a_log, "rb").read()

    other = start_global_dedup(wal_path=b_log)  # another run, same settings, its own history
    try:
        c = create_resumable_collate(dedup=other, return_string_tensor=True, stages=STAGES)
        for _ in sdl.StatefulDataLoader(c.stateful(_collate_docs(reverse=True)), batch_size=8, collate_fn=c):
            pass
    finally:
        other.close()

    shutil.copyfile(b_log, a_log)  # B's log over A's, and the server restarted on it
    foreign = open(a_log, "rb").read()
    for state in (state0, state3):  # state0: was accepted, and B's table dropped A's documents
        server = start_global_dedup(wal_path=a_log)
        try:
            with pytest.raises(OSError, match=re.escape(a_log)) as ei:
                next(iter(loader(server, state)))
            assert "not the log the loader state was taken with" in str(ei.value)
        finally:
            server.close()
        assert open(a_log, "rb").read() == foreign  # nothing rolled back or written

    # A's own log back: a restarted server keeps its tag; the state taken at the start is accepted
    with open(a_log, "wb") as f:
        f.write(own)
    server = start_global_dedup(wal_path=a_log)
    try:
        assert len(bytes.fromhex(tag)) == 32 and state0["dataset_state"]["collate"]["wal_tag"] == tag
        assert server._wal() == (a_log, tag)
        next(iter(loader(server, state0)))
        # (a state with admissions still needs the server it was taken with, as before)
        with pytest.raises(ValueError, match="not the server of that run"):
            next(iter(loader(server, state3)))
    finally:
        server.close()
