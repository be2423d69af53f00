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
from forkserver import ForkServer

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "resume_child.py")


def make_corpus(path, n=3000, seed=0, pii=False, near=False):
    """The shared corpus's first n documents when present, else generated text; with duplicates.
    pii: every third document also names an e-mail address and a public IPv4 address.
    near: also near duplicates (an earlier document with one word changed and a line appended)."""
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
    if pii:
        docs = [d + (f"\nWrite to maintainer{i}@lists.example.org or reach 8.8.{i % 250}.{i % 200 + 1} today."
                     if i % 3 == 0 else "") for i, d in enumerate(docs)]
    docs += [docs[rng.randrange(len(docs))] for _ in range(n // 5)]  # exact duplicates, later in the stream
    if near:
        for _ in range(n // 5):
            words = docs[rng.randrange(n)].split(" ")
            words[rng.randrange(len(words))] = "changed"
            docs.append(" ".join(words) + "\nShared on a mirror.")
    rng.shuffle(docs)
    write_jsonl(path, ({"id": f"doc-{i}", "text": t} for i, t in enumerate(docs)))
    return docs


@pytest.fixture(scope="module")
def forks():
    """One fork server a module (and xdist worker) for the crash loops' children: each run is a
    fork of a process that imported luminamoon once, instead of a new interpreter importing
    torch (~2-3 s of CPU a run; forkserver.py)."""
    with ForkServer() as fs:
        yield fs


def run_child(corpus, state_dir, out, batch_size=50, commit_every=3, prefetch=4, env=None, forks=None):
    argv = [CHILD, str(corpus), str(state_dir), str(out), str(batch_size), str(commit_every), str(prefetch)]
    env = None if env is None else {**os.environ, **env}
    if forks is not None:
        return forks.popen(argv, env=env)
    return subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def crash_loop(tmp_path, corpus, min_kills, env=None, die_after_first_commit=False, forks=None):
    """Runs resume_child to the end once uninterrupted, then again killing it with SIGKILL at
    random moments (at least min_kills times) and resuming; returns both outputs' lines.
    die_after_first_commit: every third run kills itself right after its commit before the
    first batch (with LM_CHILD_COMMIT_FIRST).  forks: a ForkServer to start the runs from."""
    t0 = time.perf_counter()
    p = run_child(corpus, tmp_path / "ref-state", tmp_path / "ref.jsonl", env=env, forks=forks)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0 and "DONE" in out, err
    ref_time = time.perf_counter() - t0

    want = (tmp_path / "ref.jsonl").read_text().splitlines()
    rng = random.Random(int(os.environ.get("LM_CRASH_SEED", "1234")))
    kills, runs, passes = 0, 0, 0
    # kill after a random delay once the child iterates; small enough that the work spans many kills.
    # A pass that reaches the end before min_kills kills (its runs ran past their delays: a fast or
    # lightly loaded machine) must equal the reference, and a new pass starts from nothing.
    while True:
        runs += 1
        die = die_after_first_commit and kills < min_kills and runs % 3 == 1
        state, out_file = tmp_path / f"state-{passes}", tmp_path / f"out-{passes}.jsonl"
        p = run_child(corpus, state, out_file,
                      env={**(env or {}), "LM_CHILD_DIE_AFTER_FIRST_COMMIT": "1" if die else "0"}, forks=forks)
        line = p.stdout.readline()
        if "READY" not in line:
            p.wait(timeout=60)
            raise AssertionError(f"child failed to start: {line}{p.stderr.read()}")
        if die:
            p.communicate(timeout=60)
            assert p.returncode == -signal.SIGKILL, p.stderr
            kills += 1
            continue
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
            if kills >= min_kills:
                break
            got = out_file.read_text().splitlines()
            assert len(got) == len(want) and got == want, f"pass {passes} ({kills} kills so far)"
            passes += 1
    assert kills >= min_kills, f"only {kills} kills"
    print(f"{kills} SIGKILLs over {runs} runs in {passes + 1} pass(es)")
    return out_file.read_text().splitlines(), want


def test_sigkill_crash_loop_equals_uninterrupted_run(tmp_path, forks):
    corpus = tmp_path / "corpus.jsonl"
    make_corpus(corpus)
    got, want = crash_loop(tmp_path, corpus, int(os.environ.get("LM_CRASH_KILLS", "20")), forks=forks)
    assert len(got) == len(want)
    assert got == want  # same batches, same documents, same order, same dedup decisions


def test_sigkill_crash_loop_datatrove_pii_and_commit_before_first_batch(tmp_path, forks):
    """Issue 19 acceptance 2: every run commits while its first batch is being produced, and the
    datatrove replacement cycle must continue exactly across the kills."""
    corpus = tmp_path / "corpus.jsonl"
    make_corpus(corpus, n=1200, pii=True)
    got, want = crash_loop(tmp_path, corpus, int(os.environ.get("LM_CRASH_KILLS", "10")) // 2 or 1,
                           env={"LM_CHILD_PII_MODE": "datatrove", "LM_CHILD_COMMIT_FIRST": "1"},
                           die_after_first_commit=True, forks=forks)
    assert not any("@lists.example.org" in ln for ln in want)  # masked, with the cycle's second string too:
    assert any("firstname.lastname@example.org" in ln for ln in want)
    assert len(got) == len(want)
    assert got == want


def test_sigkill_crash_loop_exact_and_near_dedup(tmp_path, forks):
    """Issue 12 acceptance 4: exact and near dedup both on; the band index's WAL is synced with
    every commit and cut back on resume, so the output equals an uninterrupted run."""
    corpus = tmp_path / "corpus.jsonl"
    make_corpus(corpus, n=2000, near=True)
    got, want = crash_loop(tmp_path, corpus, int(os.environ.get("LM_CRASH_KILLS", "20")) // 2 or 1,
                           env={"LM_CHILD_NEAR_DEDUP": "1"}, forks=forks)
    reasons = [r for ln in want for r in json.loads(ln)["reasons"]]
    assert reasons.count(luminamoon.stages.REASON_NEAR_DUPLICATE) > 100  # the near stage really drops
    assert reasons.count(luminamoon.stages.REASON_DUPLICATE) > 100
    assert len(got) == len(want)
    assert got == want


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


# ---------------------------------------------------------------- issue 19

def _texts(n, tag="doc"):
    return [f"{tag} number {i} says hello to the world " * (i % 5 + 1) for i in range(n)]


def test_commit_before_first_batch_after_source_error_commits_the_start(tmp_path):
    """Issue 19 item 1: a commit() with nothing received stored the producer's live position."""
    texts = _texts(250)

    class Flaky:
        fail = True

        def __iter__(self):
            for i, t in enumerate(texts):
                if i == 60 and Flaky.fail:
                    raise ConnectionError("network down at record 60")
                yield t

    sd = str(tmp_path / "s")
    with ResumablePipeline(IterableSource(Flaky()), batch_size=100, state_dir=sd, stages={"quality": False}) as p:
        with pytest.raises(ConnectionError):
            for _ in p:
                pass
        assert p.state_dict()["source"] == {"kind": "iterable", "consumed": 0}
        p.commit()
    Flaky.fail = False
    with ResumablePipeline(IterableSource(Flaky()), batch_size=100, state_dir=sd, stages={"quality": False}) as p:
        got = sum(b.n_in for b in p)
    assert got == 250


def test_commit_while_first_batch_is_built_commits_the_start(tmp_path):
    """Issue 19 item 1: a commit from a timer while the producer is mid-batch."""
    import threading

    texts = _texts(300)
    in_batch = threading.Event()
    go = threading.Event()

    def gen():
        for i, t in enumerate(texts):
            if i == 47:
                in_batch.set()
                go.wait(10)
            yield t

    sd = str(tmp_path / "s")
    with ResumablePipeline(IterableSource(gen), batch_size=100, state_dir=sd, prefetch_batches=2,
                           stages={"quality": False}) as p:
        it = iter(p)
        t = threading.Thread(target=lambda: next(it))
        t.start()
        assert in_batch.wait(10)
        p.commit()  # nothing received: the start
        go.set()
        t.join(10)
    with ResumablePipeline(IterableSource(gen), batch_size=100, state_dir=sd, stages={"quality": False}) as p:
        assert sum(b.n_in for b in p) == 300


def _commit_some(sd, corpus, n=4, **kw):
    kw.setdefault("batch_size", 30)
    with ResumablePipeline(JsonlSource(str(corpus)), state_dir=sd, **kw) as p:
        for b in p:
            if b.index + 1 == n:
                p.commit()
                break


def test_missing_state_file_is_refused_and_wal_kept(tmp_path):
    """Issue 19 item 2: without its state file a folder restarted from zero and wiped the WAL."""
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=600)
    sd = str(tmp_path / "s")
    _commit_some(sd, corpus)
    wal = os.path.join(sd, "dedup.wal")
    before = open(wal, "rb").read()
    assert len(before) > 64
    os.rename(os.path.join(sd, "state"), str(tmp_path / "state.bak"))
    with pytest.raises(OSError, match="no state file"):
        ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd)
    assert open(wal, "rb").read() == before  # nothing truncated
    assert not os.path.exists(os.path.join(sd, "state"))
    os.rename(str(tmp_path / "state.bak"), os.path.join(sd, "state"))
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd) as p:
        assert next(iter(p)).index == 4
    # sidecars alone (dedup off) are refused too
    sd2 = str(tmp_path / "s2")
    _commit_some(sd2, corpus, dedup=False)
    os.remove(os.path.join(sd2, "state"))
    with pytest.raises(OSError, match="no state file"):
        ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd2, dedup=False)


@pytest.mark.parametrize("change, match", [
    ({"batch_size": 40}, "batch_size"),
    ({"stages": {"quality": False}}, "stages"),
    ({"dedup": False}, "dedup"),
    ({"dedup": {"seed": 7}}, "dedup"),
    ({"stages": {"pii": {"mode": "datatrove"}}}, "stages"),
])
def test_resume_with_other_settings_is_refused(tmp_path, change, match):
    """Issue 19 item 3: changed stages / dedup / batch_size were accepted silently."""
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=300)
    sd = str(tmp_path / "s")
    _commit_some(sd, corpus, n=2)
    kw = {"batch_size": 30, **change}
    with pytest.raises(ValueError, match=f"(?s)differ.*{match}"):
        ResumablePipeline(JsonlSource(str(corpus)), state_dir=sd, **kw)
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd) as p:  # same settings: fine
        assert next(iter(p)).index == 2


def test_resume_over_changed_input_is_refused(tmp_path):
    """Issue 19 item 3: an input shuffled in place (same size) was resumed at a stale offset."""
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=300)
    sd = str(tmp_path / "s")
    _commit_some(sd, corpus, n=2)
    lines = corpus.read_bytes().splitlines(keepends=True)
    random.Random(5).shuffle(lines)
    st = os.stat(corpus)
    corpus.write_bytes(b"".join(lines))
    assert os.path.getsize(corpus) == st.st_size
    with pytest.raises(ValueError, match="(?s)input.*changed"):
        ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd)
    os.utime(corpus, ns=(st.st_atime_ns, st.st_mtime_ns))  # content differs, mtime restored: still refused
    with pytest.raises(ValueError, match="content"):
        ResumablePipeline(JsonlSource(str(corpus)), batch_size=30, state_dir=sd)


def _datatrove_corpus(path, n=400):
    rng = random.Random(3)
    docs = []
    for i in range(n):
        k = rng.randint(0, 3)
        addrs = " ".join(f"user{rng.randint(0, 99)}@example{i}.org and 8.8.{i % 250}.{rng.randint(1, 250)}"
                         for _ in range(k))
        docs.append(f"Document {i} mentions {addrs} in its text for testing the masking cycle.")
    write_jsonl(path, ({"id": f"d{i}", "text": t} for i, t in enumerate(docs)))


@pytest.mark.parametrize("pipeline", ["fused", "chain"])
def test_datatrove_pii_cycle_survives_resume(tmp_path, pipeline):
    """Issue 19 item 5: the datatrove replacement cycle restarted at 0 after a resume."""
    corpus = tmp_path / "c.jsonl"
    _datatrove_corpus(corpus)
    kw = dict(pipeline=pipeline, batch_size=25, stages={"quality": False, "pii": {"mode": "datatrove"}})
    with ResumablePipeline(JsonlSource(str(corpus)), state_dir=str(tmp_path / "ref"), **kw) as ref:
        want = batches_of(ref)
    sd = str(tmp_path / "s")
    with ResumablePipeline(JsonlSource(str(corpus)), state_dir=sd, prefetch_batches=4, **kw) as p:
        first = batches_of(p, 5)
        p.commit()
    with ResumablePipeline(JsonlSource(str(corpus)), state_dir=sd, **kw) as p:
        rest = batches_of(p)
    assert first + rest == want


def test_state_dir_locked_in_every_mode(tmp_path):
    """Issue 19 item 7: with dedup=False nothing locked the folder."""
    sd = str(tmp_path / "s")
    for dedup in (False, True):
        with ResumablePipeline(IterableSource(_texts(50)), dedup=dedup, state_dir=sd):
            with pytest.raises(OSError, match=f"in use by process {os.getpid()}"):
                ResumablePipeline(IterableSource(_texts(50)), dedup=dedup, state_dir=sd)
    code = ("import sys, time\nfrom luminamoon.data import ResumablePipeline, IterableSource\n"
            "p = ResumablePipeline(IterableSource(['a b c']), dedup=False, state_dir=sys.argv[1])\n"
            "print('LOCKED', flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", code, sd], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "LOCKED"
        with pytest.raises(OSError, match=f"in use by process {child.pid}"):
            ResumablePipeline(IterableSource(_texts(50)), dedup=False, state_dir=sd)
    finally:
        child.kill()
        child.wait()
    ResumablePipeline(IterableSource(_texts(50)), dedup=False, state_dir=sd).close()  # released by the kill


def test_dropped_pipeline_releases_thread_and_lock(tmp_path):
    """Issue 19 item 7: a pipeline dropped without close() kept its prefetch thread and lock."""
    import gc
    import threading

    sd = str(tmp_path / "s")
    p = ResumablePipeline(IterableSource(_texts(20000)), batch_size=10, prefetch_batches=2, state_dir=sd)
    it = iter(p)
    next(it)
    assert any(t.name == "luminamoon-prefetch" for t in threading.enumerate())
    del p, it
    gc.collect()
    assert not any(t.name == "luminamoon-prefetch" for t in threading.enumerate())
    ResumablePipeline(IterableSource(_texts(10)), state_dir=sd).close()  # the lock was released


# ------------------------------------------------------------ the CLI (issue 19)
CLI_ARGS = ["-q", "--no-report", "--no-quality", "--batch-size", "64", "--part-docs", "150", "-j", "1"]


def _cli(*args):
    return [sys.executable, "-m", "luminamoon", "run", *map(str, args)]


def _parts(out):
    """The part files now (one the run removes while this reads -- a resumed run drops the parts
    after its last commit -- is left out: it is not there)."""
    got = {}
    for n in sorted(os.listdir(out)):
        if n.startswith("part-"):
            try:
                got[n] = (out / n).read_bytes()
            except FileNotFoundError:
                pass
    return got


def test_cli_sigkill_then_resume_datatrove_pii_is_byte_identical(tmp_path):
    """Issue 19 item 5: with --pii-mode datatrove the resumed parts differed (the cycle restarted at 0)."""
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=1500, pii=True)
    ref = tmp_path / "ref"
    r = subprocess.run(_cli(corpus, "-o", ref, "--pii-mode", "datatrove", *CLI_ARGS), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    want = _parts(ref)
    assert len(want) >= 6 and any(b"firstname.lastname@example.org" in v for v in want.values())
    rng = random.Random(7)
    out = tmp_path / "out"
    cmd = _cli(corpus, "-o", out, "--pii-mode", "datatrove", *CLI_ARGS, "--resume")
    for _ in range(2):  # two kills -9 at random moments after some parts were written
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            need = len(_parts(out)) + rng.randrange(1, 3) if out.exists() else 1
            deadline = time.time() + 120
            while p.poll() is None and time.time() < deadline and (not out.exists() or len(_parts(out)) < need):
                time.sleep(0.005)
            time.sleep(rng.random() * 0.1)
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert _parts(out) == want


def test_cli_two_runs_into_one_state_folder(tmp_path):
    """Issue 19 item 7: two `luminamoon run --no-dedup --resume` into one folder both exited 0."""
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=1000)
    out = tmp_path / "out"
    cmd = _cli(corpus, "-o", out, "--no-dedup", *CLI_ARGS, "--resume")
    lock = out / ".luminamoon" / "lock"
    first = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while first.poll() is None and time.time() < deadline:  # running: its lock taken, or a part out
            if lock.exists() and lock.read_text().strip() == str(first.pid) or out.exists() and _parts(out):
                break
            time.sleep(0.002)
        first.send_signal(signal.SIGSTOP)  # holds the lock while the second one tries
        assert first.poll() is None, "the first run ended before the second could start"
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode != 0
        assert f"in use by process {first.pid}" in r.stderr, r.stderr
    finally:
        first.send_signal(signal.SIGCONT)
        first.kill()
        first.wait()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)  # the lock died with it
    assert r.returncode == 0, r.stderr


def test_cli_overwrite_while_a_run_is_in_progress_deletes_nothing(tmp_path):
    """`--overwrite` deleted the state folder (lock file included) of a run still in progress,
    so that both then ran into one folder: the output folder is locked before anything in it is
    touched, and the run in progress ends whole."""
    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=1000)
    out = tmp_path / "out"
    first = subprocess.Popen(_cli(corpus, "-o", out, *CLI_ARGS), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    lock = out / ".luminamoon" / "lock"
    try:
        deadline = time.time() + 120
        while first.poll() is None and time.time() < deadline:
            if lock.exists() and lock.read_text().strip() == str(first.pid):
                break
            time.sleep(0.002)
        first.send_signal(signal.SIGSTOP)
        assert first.poll() is None, "the first run ended before the second could start"
        before = sorted(p.name for p in out.rglob("*"))
        r = subprocess.run(_cli(corpus, "-o", out, *CLI_ARGS, "--overwrite"), capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 2, r.stderr
        assert f"in use by process {first.pid}" in r.stderr, r.stderr
        assert sorted(p.name for p in out.rglob("*")) == before  # nothing deleted or added
    finally:
        first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=300) == 0, first.stderr.read().decode()
    stats = json.loads((out / "stats.json").read_text())
    assert stats["documents"]["input"] == len(corpus.read_text().splitlines()) and stats["documents"]["kept"] > 0
    again = subprocess.run(_cli(corpus, "-o", out, *CLI_ARGS, "--overwrite"), capture_output=True, text=True,
                           timeout=300)
    assert again.returncode == 0, again.stderr  # the lock died with the first run


# ------------------------------------------------- DistributedPipeline, one rank (issue 19)

def _dist_batches(pipe, n=None):
    out = []
    for b in pipe:
        out.append((b.index, b.texts.tolist(), b.reasons.tolist()))
        if n is not None and len(out) == n:
            break
    return out


def test_distributed_resume_checks_state_settings_input_and_lock(tmp_path):
    """Issue 19 items 2, 3, 7 for DistributedPipeline: a missing state file wiped the WAL, changed
    stages or input were resumed, and nothing locked the folder."""
    from luminamoon.data import DistributedPipeline

    corpus = tmp_path / "c.jsonl"
    make_corpus(corpus, n=400)
    sd = str(tmp_path / "s")
    kw = dict(batch_size=30, stages={"quality": False}, state_dir=sd)
    with DistributedPipeline(JsonlSource(str(corpus)), **kw) as p:
        with pytest.raises(OSError, match=f"in use by process {os.getpid()}"):
            DistributedPipeline(JsonlSource(str(corpus)), **kw)
        _dist_batches(p, 3)
        p.commit()
    with pytest.raises(ValueError, match="(?s)differ.*stages"):
        DistributedPipeline(JsonlSource(str(corpus)), **{**kw, "stages": {"quality": False, "pii": False}})
    wal = os.path.join(sd, "dedup-rank0-of1.wal")
    before = open(wal, "rb").read()
    os.rename(os.path.join(sd, "state"), str(tmp_path / "state.bak"))
    with pytest.raises(OSError, match="no state file"):
        DistributedPipeline(JsonlSource(str(corpus)), **kw)
    assert open(wal, "rb").read() == before
    os.rename(str(tmp_path / "state.bak"), os.path.join(sd, "state"))
    with open(corpus, "ab") as f:
        f.write(b'{"id": "new", "text": "one more document at the end"}\n')
    with pytest.raises(ValueError, match="(?s)input changed.*size"):
        DistributedPipeline(JsonlSource(str(corpus)), **kw)


def test_distributed_datatrove_pii_cycle_survives_resume(tmp_path):
    """Issue 19 item 5 for DistributedPipeline (one rank)."""
    from luminamoon.data import DistributedPipeline

    corpus = tmp_path / "c.jsonl"
    _datatrove_corpus(corpus)
    kw = dict(batch_size=25, stages={"quality": False, "pii": {"mode": "datatrove"}})
    with DistributedPipeline(JsonlSource(str(corpus)), state_dir=str(tmp_path / "ref"), **kw) as ref:
        want = _dist_batches(ref)
    sd = str(tmp_path / "s")
    with DistributedPipeline(JsonlSource(str(corpus)), state_dir=sd, **kw) as p:
        first = _dist_batches(p, 5)
        p.commit()
    with DistributedPipeline(JsonlSource(str(corpus)), state_dir=sd, **kw) as p:
        p.commit()  # nothing received yet: the same commit again, cycle included
    with DistributedPipeline(JsonlSource(str(corpus)), state_dir=sd, **kw) as p:
        rest = _dist_batches(p)
    assert first + rest == want


def test_commit_from_signal_handler_without_prefetch_thread(tmp_path):
    """Issue 19 item 1 with prefetch_batches=0: a SIGTERM-style handler commits while the
    consumer's own thread is building the first batch."""
    texts = _texts(230)
    sd = str(tmp_path / "s")
    box = {}

    def gen():
        for i, t in enumerate(texts):
            if i == 47 and "p" in box:
                os.kill(os.getpid(), signal.SIGUSR1)
            yield t

    old = signal.signal(signal.SIGUSR1, lambda *a: box.setdefault("id", box["p"].commit()))
    try:
        with ResumablePipeline(IterableSource(gen), batch_size=100, state_dir=sd, prefetch_batches=0,
                               stages={"quality": False}) as p:
            box["p"] = p
            next(iter(p))
            assert box["id"] == 1
    finally:
        signal.signal(signal.SIGUSR1, old)
    box.clear()
    with ResumablePipeline(IterableSource(gen), batch_size=100, state_dir=sd, stages={"quality": False}) as p:
        assert sum(b.n_in for b in p) == 230


def test_dropped_distributed_pipeline_releases_thread_and_lock(tmp_path):
    """Issue 19 item 7 for DistributedPipeline: its prefetch thread held the pipeline (and now its lock)."""
    import gc
    import threading

    from luminamoon.data import DistributedPipeline

    sd = str(tmp_path / "s")
    p = DistributedPipeline(IterableSource(_texts(20000)), batch_size=10, prefetch_batches=2, state_dir=sd,
                            dedup=None)
    it = iter(p)
    next(it)
    assert any(t.name == "luminamoon-dist-prefetch" for t in threading.enumerate())
    del p, it
    gc.collect()
    deadline = time.time() + 10
    while any(t.name == "luminamoon-dist-prefetch" for t in threading.enumerate()) and time.time() < deadline:
        time.sleep(0.01)  # the producer may be finishing the step it was preparing
    assert not any(t.name == "luminamoon-dist-prefetch" for t in threading.enumerate())
    DistributedPipeline(IterableSource(_texts(10)), state_dir=sd, dedup=None).close()  # the lock was released


def test_failed_close_still_releases_the_lock(tmp_path):
    """A close() whose file release fails (a full disk failing the last flush) kept the folder locked."""
    sd = str(tmp_path / "s")
    p = ResumablePipeline(IterableSource(_texts(10)), dedup=False, state_dir=sd)
    real = p.state.close

    def failing():
        real()
        raise OSError(28, "No space left on device")
    p.state.close = failing
    with pytest.raises(OSError, match="No space"):
        p.close()
    ResumablePipeline(IterableSource(_texts(10)), dedup=False, state_dir=sd).close()


def test_file_fingerprint_and_differences(tmp_path):
    """Issue 19 item 3: inputs are identified by content (sampled hashes), size and mtime."""
    from luminamoon.data.fingerprint import file_fingerprint, fingerprint_differences

    p = tmp_path / "f.txt"
    p.write_bytes(bytes(range(256)) * 20000)  # 5 MB: head, tail and samples are separate regions
    a = file_fingerprint(p)
    assert set(a) >= {"path", "size", "mtime_ns", "head_sha256", "tail_sha256", "samples_sha256"}
    assert fingerprint_differences(a, file_fingerprint(str(p))) == []
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched only: still a change
    assert any("modification time" in d for d in fingerprint_differences(a, file_fingerprint(p)))
    raw = bytearray(p.read_bytes())
    mid = (len(raw) - 65536) * 8 // 15 + 100  # inside the 9th of the 16 sampled blocks
    raw[mid:mid + 4] = b"XXXX"  # in the middle, same size, mtime put back
    p.write_bytes(bytes(raw))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    diff = fingerprint_differences(a, file_fingerprint(p))
    assert diff == [f"{p}: content (sampled) changed"]
    with pytest.raises(TypeError, match="path"):
        file_fingerprint(5)
    with pytest.raises(OSError, match="missing"):
        file_fingerprint(tmp_path / "missing")
    with pytest.raises(TypeError, match="old"):
        fingerprint_differences(None, a)
