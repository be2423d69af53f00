"""Exact resume: SIGKILL crash loop, commits never ahead of the consumer, corrupt state handling."""
import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

import luminamoon
from luminamoon.data import IterableSource, JsonlSource, ResumablePipeline, write_jsonl

from conftest import CORPUS

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "resume_child.py")


def make_corpus(path, n=3000, seed=0):
    """The shared corpus's first n documents when present, else generated text; with duplicates."""
    rng = random.Random(seed)
    docs = []
    if CORPUS.exists():
        with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
            for line in f:
                docs.append(json.loads(line)["text"])
                if len(docs) >= n:
                    break
    else:  # generated documents that pass the quality filters (enough words, sentences, punctuation)
        words = ("the data pipeline reads many documents and cleans them before training a model on the text "
                 "because quality matters for every language model we build with care").split()
        for i in range(n):
            sents = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 14))).capitalize() + "."
                     for _ in range(rng.randint(6, 10))]
            docs.append(f"Document {i} is about topic {i % 17}. " + " ".join(sents[:3]) + "\n" + " ".join(sents[3:]))
    docs += [docs[rng.randrange(len(docs))] for _ in range(n // 5)]  # exact duplicates, later in the stream
    rng.shuffle(docs)
    write_jsonl(path, ({"id": f"doc-{i}", "text": t} for i, t in enumerate(docs)))
    return docs


def run_child(corpus, state_dir, out, batch_size=50, commit_every=3, prefetch=4, **kw):
    return subprocess.Popen([sys.executable, CHILD, str(corpus), str(state_dir), str(out), str(batch_size),
                             str(commit_every), str(prefetch)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kw)


def test_sigkill_crash_loop_equals_uninterrupted_run(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    make_corpus(corpus)
    # the uninterrupted reference
    t0 = time.perf_counter()
    p = run_child(corpus, tmp_path / "ref-state", tmp_path / "ref.jsonl")
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "DONE" in out, err
    ref_time = time.perf_counter() - t0

    min_kills = int(os.environ.get("LM_CRASH_KILLS", "20"))
    rng = random.Random(int(os.environ.get("LM_CRASH_SEED", "1234")))
    kills, runs = 0, 0
    # kill after a random delay once the child iterates; small enough that the work spans many kills
    ready_at = []
    while True:
        runs += 1
        p = run_child(corpus, tmp_path / "state", tmp_path / "out.jsonl")
        line = p.stdout.readline()
        if "READY" not in line:
            p.wait(timeout=60)
            raise AssertionError(f"child failed to start: {line}{p.stderr.read()}")
        ready_at.append(time.perf_counter())
        if kills < min_kills:
            time.sleep(rng.uniform(0.0, max(0.05, ref_time / 40)))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                p.wait(timeout=60)
                kills += 1
                continue
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        if "DONE" in out:
            break
    assert kills >= min_kills, f"only {kills} kills"
    got = (tmp_path / "out.jsonl").read_text().splitlines()
    want = (tmp_path / "ref.jsonl").read_text().splitlines()
    assert len(got) == len(want)
    assert got == want  # same batches, same documents, same order, same dedup decisions
    print(f"{kills} SIGKILLs over {runs} runs; {len(want)} batches identical")


def batches_of(pipe, n=None):
    out = []
    for b in pipe:
        out.append((b.index, b.texts.tolist(), b.reasons.tolist(), b.source_index.tolist()))
        if n is not None and len(out) == n:
            break
    return out


def test_prefetched_batches_are_not_committed(tmp_path):
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=1500)
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=40, prefetch_batches=8,
                           state_dir=str(tmp_path / "ref")) as ref:
        want = batches_of(ref)
    assert any(1 in w[2] for w in want[3:])  # the corpus has duplicates after batch 3 (reason 1 = duplicate)

    pipe = ResumablePipeline(JsonlSource(str(corpus)), batch_size=40, prefetch_batches=8,
                             state_dir=str(tmp_path / "s"))
    got = batches_of(pipe, 3)
    deadline = time.time() + 30
    while pipe._prefetch.qsize() < 8 and time.time() < deadline:  # let the producer run 8 batches ahead
        time.sleep(0.01)
    assert pipe._prefetch.qsize() == 8
    pipe.commit()
    pipe.close()  # a crash: the prefetched batches' hashes reached the WAL, their batches were never consumed
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=40, prefetch_batches=8,
                           state_dir=str(tmp_path / "s")) as again:
        rest = batches_of(again)
    assert got == want[:3]
    assert rest[0][0] == 3  # batch 4 comes again ...
    assert rest == want[3:]  # ... identical, none of its documents wrongly reported as duplicates


def test_state_dict_round_trip_in_process(tmp_path):
    texts = [f"document number {i} " * (i % 7 + 1) for i in range(400)] + [f"document number {i} " for i in range(50)]
    src = IterableSource(texts)
    with ResumablePipeline(src, batch_size=30, prefetch_batches=3, state_dir=str(tmp_path / "a")) as ref:
        want = batches_of(ref)
    with ResumablePipeline(IterableSource(texts), batch_size=30, prefetch_batches=3,
                           state_dir=str(tmp_path / "b")) as p:
        first = batches_of(p, 5)
        sd = p.state_dict()
    with ResumablePipeline(IterableSource(texts), batch_size=30, prefetch_batches=3,
                           state_dir=str(tmp_path / "b")) as p2:
        p2.load_state_dict(sd)
        rest = batches_of(p2)
    assert first + rest == want


def commit_n(state_dir, corpus, n_batches, commit_every):
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, prefetch_batches=2, state_dir=state_dir) as p:
        got = []
        for b in p:
            got.append(b.index)
            if (b.index + 1) % commit_every == 0:
                p.commit(extra={"at": b.index})
            if len(got) == n_batches:
                break
    return got


def test_torn_or_corrupt_slot_falls_back(tmp_path):
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=600)
    sd = str(tmp_path / "s")
    commit_n(sd, corpus, 6, 2)  # commits after batches 1, 3, 5
    state = os.path.join(sd, "state")
    raw = bytearray(open(state, "rb").read())
    seqs = [int.from_bytes(raw[o + 8:o + 16], "little") for o in (0, 64)]
    newest = 0 if seqs[0] > seqs[1] else 64
    raw[newest + 20] ^= 0xFF  # flip bits inside the newest slot (a torn write)
    open(state, "wb").write(bytes(raw))
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd) as p:
        assert p.resume_extra == {"at": 3}  # the previous commit, from the other slot
        assert next(iter(p)).index == 4
    raw[(64 - newest) + 30] ^= 0xFF  # now both slots are corrupt
    open(state, "wb").write(bytes(raw))
    with pytest.raises(OSError, match="(?i)corrupt|valid"):
        ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd)


def test_torn_wal_tail_is_recovered(tmp_path):
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=600)
    sd = str(tmp_path / "s")
    commit_n(sd, corpus, 4, 2)
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=str(tmp_path / "ref")) as ref:
        want = batches_of(ref)
    with open(os.path.join(sd, "dedup.wal"), "ab") as f:
        f.write(b"LMR1\x07\x00garbage-torn-tail")
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd) as p:
        rest = batches_of(p)
    assert rest == want[4:]


def test_producer_exception_reraised_and_close_does_not_hang(tmp_path):
    def gen():
        yield {"text": "fine document here"}
        raise RuntimeError("boom in the source")

    class Factory:
        def __call__(self):
            return gen()

    with ResumablePipeline(IterableSource(Factory()), batch_size=1, prefetch_batches=2) as p:
        with pytest.raises(RuntimeError, match="boom in the source"):
            for _ in p:
                pass
    # a pipeline abandoned mid-iteration with a full queue closes promptly
    p = ResumablePipeline(IterableSource([f"t{i} " * 20 for i in range(10000)]), batch_size=10, prefetch_batches=2)
    it = iter(p)
    next(it)
    t0 = time.perf_counter()
    p.close()
    assert time.perf_counter() - t0 < 5


def test_no_hang_at_interpreter_exit(tmp_path):
    code = ("from luminamoon.data import ResumablePipeline, IterableSource\n"
            "p = ResumablePipeline(IterableSource([('x %d ' % i) * 30 for i in range(100000)]), batch_size=10,"
            " prefetch_batches=4)\n"
            "it = iter(p); next(it); print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="batch_size"):
        ResumablePipeline(IterableSource(["a"]), batch_size=0)
    with pytest.raises(ValueError, match="prefetch_batches"):
        ResumablePipeline(IterableSource(["a"]), prefetch_batches=-1)
    with pytest.raises(ValueError, match="pipeline"):
        ResumablePipeline(IterableSource(["a"]), pipeline="bogus")
    with pytest.raises(TypeError, match="source"):
        ResumablePipeline(42)
    p = ResumablePipeline(IterableSource(["a b c"]))
    with pytest.raises(TypeError, match="JSON"):
        p.commit(extra={"x": object()})
    with pytest.raises(ValueError, match="missing"):
        p.load_state_dict({"source": None})
    p.close()
    with pytest.raises(ValueError, match="closed"):
        p.commit()
    assert torch.is_tensor(torch.zeros(1))
