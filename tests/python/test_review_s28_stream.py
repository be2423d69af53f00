"""Review of the native stream runner (aa36fa8: ``_C.FusedRunner``, ``FusedPipeline._stream``, used
by ResumablePipeline's columnar reading path and by ``luminamoon run``): a user abandoning or
interrupting a stream, committing while the runner works ahead, forking, dropping pipelines,
bad records at block boundaries, the memory bound, and the pipelines that have no stream.

Each test compares against what the path gives without the stream (FusedPipeline._stream hidden:
every batch then goes through ``pipe(texts)``), or against an uninterrupted run.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch  # noqa: F401  (torch's libraries before the extension)

from luminamoon import stages
from luminamoon.data import JsonlSource, ResumablePipeline
from test_run_end import _rows as _parts_rows  # the rows of a run's parts, in part order

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

WORDS = ("the of and to in is was for on that with as by at from it be this are have not an or but which one all "
         "were there their been has had more will would who can its also about into other than some time only new "
         "after two first may these such over most where when many any both those then made use through each "
         "between well under much").split()


def _docs(seed: int, n: int):
    import random

    rnd = random.Random(seed)
    out = []
    for i in range(n):
        s = [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(8, 16))).capitalize() + "."
             for _ in range(rnd.randint(2, 8))]
        if i % 5 == 0:
            s.append(f"Write to user{seed}x{i}@example.org for more.")
        out.append(" ".join(s))
    return out


def _corpus(path, n=700, bad_lines=()):
    """JSONL with exact duplicates far apart (dedup drops them only across batches) and PII;
    ``bad_lines``: 0-based line numbers replaced by malformed JSON."""
    docs = _docs(3, n // 2)
    docs = docs + docs[::4] + _docs(4, n - len(docs) - len(docs[::4]))
    lines = [json.dumps({"id": f"d{i}", "text": t}) for i, t in enumerate(docs)]
    for k in bad_lines:
        lines[k] = '{"id": "broken", "text": "no end'
    path.write_text("\n".join(lines) + "\n")
    return path


def _tasks() -> int:
    """Threads of this process (native ones included: the runner is not a Python thread); any
    worker pool a 2-thread batch starts is started first, so that only threads left behind count."""
    stages.FusedPipeline(dedup=False, num_threads=2)(_docs(0, 8))
    return len(os.listdir("/proc/self/task"))


def _pipeline(corpus, state_dir, **kw):
    kw.setdefault("batch_size", 64)
    kw.setdefault("num_threads", 2)
    kw.setdefault("stages", {"pii": {"mode": "datatrove"}})
    src_kw = kw.pop("source_kw", {})
    return ResumablePipeline(JsonlSource(str(corpus), **src_kw), state_dir=str(state_dir), **kw)


def _row(b):
    return (b.index, b.texts.tolist(), b.reasons.tolist(), [r["id"] for r in b.kept_records], b.coord)


def _all(corpus, state_dir, **kw):
    with _pipeline(corpus, state_dir, **kw) as p:
        return [_row(b) for b in p]


@pytest.fixture
def no_stream(monkeypatch):
    """Hide FusedPipeline._stream: the reading path goes batch by batch (the reference)."""
    def off():
        monkeypatch.setattr(stages.FusedPipeline, "_stream", None)
    return off


@pytest.fixture
def streams(monkeypatch):
    """The streams opened (FusedPipeline._stream calls): which reading path a test exercised."""
    opened = []
    real = stages.FusedPipeline._stream

    def spy(self, max_jobs=2):
        opened.append(max_jobs)
        return real(self, max_jobs)

    monkeypatch.setattr(stages.FusedPipeline, "_stream", spy)
    return opened


# ----------------------------------------------------------------- abandoning and resuming

@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_break_mid_stream_commit_close_then_resume_equals_uninterrupted(tmp_path, streams, prefetch):
    """The consumer leaves the loop while the runner has the next batches queued or running (their
    hashes already in the dedup table and WAL), commits, closes; the resumed run's batches are the
    uninterrupted run's (nothing dropped as a duplicate of a batch that was never delivered)."""
    corpus = _corpus(tmp_path / "c.jsonl")
    want = _all(corpus, tmp_path / "ref", prefetch_batches=prefetch)
    assert len(want) >= 8 and any(1 in w[2] for w in want[4:])  # later batches drop duplicates
    got = []
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch) as p:
        for b in p:
            got.append(_row(b))
            if len(got) == 3:
                p.commit()
                break
        lsn_committed = got[-1][4]["wal_lsn"]
        assert p.dedup.lsn >= lsn_committed
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch) as p:
        assert p.state_dict()["wal_lsn"] == lsn_committed
        got += [_row(b) for b in p]
    assert [g[:4] for g in got] == [w[:4] for w in want]
    assert got[-1][4]["wal_lsn"] == want[-1][4]["wal_lsn"]
    assert len(streams) == (3 if prefetch else 0)  # the stream path with a prefetch thread only


@pytest.mark.parametrize("prefetch", [1, 2])
def test_commit_after_every_batch_while_the_runner_runs_ahead(tmp_path, streams, prefetch):
    """commit() from the consumer while the runner thread runs the next batch: the committed LSN is
    the delivered batch's (never the runner's, which is further), the WAL is durable up to it, and
    a restart from the last of those commits (a crash right after it) gives the uninterrupted output."""
    corpus = _corpus(tmp_path / "c.jsonl")
    want = _all(corpus, tmp_path / "ref", prefetch_batches=prefetch)
    states = []
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch) as p:
        for b in p:
            p.commit()
            st = p.dedup.stats
            states.append((b.index, b.coord["wal_lsn"], p.state_dict()["wal_lsn"]))
            assert st["durable_lsn"] >= b.coord["wal_lsn"]
            if len(states) == 4:
                break
    assert [s[1] for s in states] == [w[4]["wal_lsn"] for w in want[:4]]
    assert all(s[1] == s[2] for s in states)
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch) as p:
        rest = [_row(b) for b in p]
    assert [r[:4] for r in rest] == [w[:4] for w in want[4:]]
    assert len(streams) == 3


@pytest.mark.parametrize("prefetch", [0, 2])
def test_close_while_the_iterator_is_still_held(tmp_path, prefetch):
    """close() with the consumer's iterator still referenced: no hang; the next next() raises or
    ends; the folder is free again and the threads (prefetch, reader, runner) have ended once the
    iterator is dropped."""
    corpus = _corpus(tmp_path / "c.jsonl")
    base = _tasks()
    p = _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch)
    it = iter(p)
    next(it)
    next(it)
    p.close()
    with pytest.raises(Exception):
        for _ in range(20):
            next(it)
    del it
    gc.collect()
    assert _tasks() <= base
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch) as q:  # the lock was released
        assert len([b for b in q]) > 0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_dropped_without_close_releases_everything(tmp_path, prefetch):
    corpus = _corpus(tmp_path / "c.jsonl")
    base = _tasks()
    p = _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch)
    it = iter(p)
    next(it)
    del p, it
    gc.collect()
    assert _tasks() <= base  # the prefetch, reader and runner threads all ended
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=prefetch) as q:
        assert len([b for b in q]) > 0


@pytest.mark.parametrize("prefetch", [0, 4])
def test_no_hang_at_interpreter_exit_mid_stream(tmp_path, prefetch):
    corpus = _corpus(tmp_path / "c.jsonl", n=3000)
    code = textwrap.dedent(f"""
        from luminamoon.data import ResumablePipeline, JsonlSource
        p = ResumablePipeline(JsonlSource({str(corpus)!r}), batch_size=16, prefetch_batches={prefetch},
                              state_dir={str(tmp_path / 's')!r}, num_threads=1)
        it = iter(p); next(it); print('ok', flush=True)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


# ----------------------------------------------------------------- several pipelines

def test_two_pipelines_interleaved_in_one_thread(tmp_path):
    ca, cb = _corpus(tmp_path / "a.jsonl"), _corpus(tmp_path / "b.jsonl", n=500)
    want_a = _all(ca, tmp_path / "ra", prefetch_batches=0)
    want_b = _all(cb, tmp_path / "rb", prefetch_batches=2, near_dedup=True)
    got_a, got_b = [], []
    with _pipeline(ca, tmp_path / "a", prefetch_batches=0) as pa, \
            _pipeline(cb, tmp_path / "b", prefetch_batches=2, near_dedup=True) as pb:
        ia, ib = iter(pa), iter(pb)
        while True:
            a, b = next(ia, None), next(ib, None)
            if a is None and b is None:
                break
            if a is not None:
                got_a.append(_row(a))
            if b is not None:
                got_b.append(_row(b))
    assert got_a == want_a and got_b == want_b


@pytest.mark.parametrize("num_threads", [1, None])
def test_num_threads_and_near_dedup_equal_batch_by_batch(tmp_path, no_stream, num_threads):
    corpus = _corpus(tmp_path / "c.jsonl")
    got = _all(corpus, tmp_path / "s", num_threads=num_threads, near_dedup=True)
    no_stream()
    want = _all(corpus, tmp_path / "r", num_threads=num_threads, near_dedup=True)
    assert got == want and "near_wal_lsn" in got[-1][4]


# ----------------------------------------------------------------- reader errors at block boundaries

@pytest.mark.parametrize("bad", [[63], [64], [127, 128], [0], [699]])
def test_bad_record_at_a_block_boundary_skipped_equals_batch_by_batch(tmp_path, no_stream, bad):
    corpus = _corpus(tmp_path / "c.jsonl", bad_lines=bad)
    kw = {"source_kw": {"on_error": "skip"}}
    got = _all(corpus, tmp_path / "s", **kw)
    no_stream()
    want = _all(corpus, tmp_path / "r", **kw)
    assert got == want
    assert sum(len(w[2]) for w in want) == 700 - len(bad)


@pytest.mark.parametrize("bad", [63, 64, 128])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_bad_record_at_a_block_boundary_raises_after_the_batches_before_it(tmp_path, no_stream, bad, prefetch):
    corpus = _corpus(tmp_path / "c.jsonl", bad_lines=[bad])

    def run(sd):
        out, err = [], None
        with _pipeline(corpus, sd, prefetch_batches=prefetch) as p:
            try:
                for b in p:
                    out.append(_row(b))
            except Exception as e:
                err = (type(e).__name__, str(e))
        return out, err

    got = run(tmp_path / "s")
    no_stream()
    want = run(tmp_path / "r")
    assert got == want and want[1] is not None and want[1][0] == "BadRecordError"
    assert len(want[0]) == bad // 64


# ----------------------------------------------------------------- memory bound

def test_max_prefetch_bytes_still_bounds_the_queue(tmp_path):
    corpus = _corpus(tmp_path / "c.jsonl", n=1500)
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=8, max_prefetch_bytes=1) as p:
        sizes = []
        it = iter(p)
        b = next(it)
        sizes.append(b.memory_bytes)
        for b in it:
            sizes.append(b.memory_bytes)
        st = p.prefetch_stats
    assert st["peak_batches"] == 1 and st["peak_bytes"] <= max(sizes)


# ----------------------------------------------------------------- luminamoon run

def _run_cfg(pipeline="fused", prefetch=2):
    from luminamoon.cli.config import default_config

    cfg = default_config()
    cfg["run"]["batch_size"] = 64
    cfg["run"]["threads"] = 2
    cfg["run"]["pipeline"] = pipeline
    cfg["run"]["prefetch_batches"] = prefetch
    return cfg


def test_run_chain_pipeline_over_jsonl(tmp_path):
    """``luminamoon run --chain`` over JSONL (the columnar reading path): the run's callable has
    ``_stream`` whatever its stages are, but a ChainPipeline has none."""
    from luminamoon.cli.runner import run_corpus

    corpus = _corpus(tmp_path / "c.jsonl")
    run_corpus([str(corpus)], str(tmp_path / "fused"), _run_cfg("fused"), quiet=True, report=False)
    run_corpus([str(corpus)], str(tmp_path / "chain"), _run_cfg("chain"), quiet=True, report=False)
    fused = _parts_rows(str(tmp_path / "fused"))
    assert fused and _parts_rows(str(tmp_path / "chain")) == fused


@pytest.mark.parametrize("prefetch", [0, 2])
def test_run_interrupted_then_resumed_equals_uninterrupted(tmp_path, prefetch):
    from luminamoon.cli.runner import run_corpus

    corpus = _corpus(tmp_path / "c.jsonl", n=1500)
    cfg = _run_cfg(prefetch=prefetch)
    cfg["output"]["part_docs"] = 150
    run_corpus([str(corpus)], str(tmp_path / "ref"), cfg, quiet=True, report=False)
    with pytest.raises(KeyboardInterrupt):
        run_corpus([str(corpus)], str(tmp_path / "out"), cfg, quiet=True, report=False, stop_after_batches=7)
    run_corpus([str(corpus)], str(tmp_path / "out"), cfg, resume=True, quiet=True, report=False)
    ref = _parts_rows(str(tmp_path / "ref"))
    assert ref and _parts_rows(str(tmp_path / "out")) == ref


# ----------------------------------------------------------------- fork

_FORK_STREAM = textwrap.dedent("""
    import json, os, sys
    import torch
    from luminamoon import StringTensor
    from luminamoon.stages import FusedPipeline, StreamDeduplicator
    mode = sys.argv[1]
    pipe = FusedPipeline(num_threads=1, dedup=StreamDeduplicator())
    docs = json.load(open(sys.argv[2]))
    a, b = StringTensor.from_list(docs[:300]), StringTensor.from_list(docs[300:600])
    s = pipe._stream(2)
    s.submit(a)
    want = len(s.collect()[0].texts)
    if mode == "busy":  # a long batch submitted right before the fork: running (or about to) then
        s.submit(StringTensor.from_list(docs[600:]))
    pid = os.fork()
    if pid == 0:
        if mode in ("pipe", "busy"):  # the pipeline itself: its locks are free in the child
            print("child pipe", len(pipe(b).texts), pipe.dedup.lsn > 0, flush=True)
            sys.exit(0)
        if mode == "use":  # the parent's stream: an error, not a wait for a thread that is not here
            try:
                s.submit(b)
                s.collect()
                print("no error", flush=True)
            except ValueError as e:
                print("raised", e, flush=True)
        s2 = pipe._stream(2)  # a stream of its own works
        s2.submit(b)
        print("child", len(s2.collect()[0].texts), flush=True)
        s2.close()
        if mode == "close":
            s.close()
        sys.exit(0)  # a normal exit: the parent's stream object is destroyed here
    _, status = os.waitpid(pid, 0)
    print("status", status, flush=True)
    if mode == "busy":
        s.collect()
    s.submit(b)
    print("parent", want, len(s.collect()[0].texts), flush=True)
    s.close()
""")


def test_forked_child_with_a_runner_thread_in_the_parent(tmp_path):
    """A process forks while a stream's runner thread is alive (idle; "busy": a long batch just
    submitted).  The child has no such thread: dropping or closing the stream there must not join
    it (std::thread::join on a thread of another process: abort or a hang) nor destroy the condition
    variable that thread waits on (a hang), using it must raise, its own stream must work, and the
    pipeline's locks must be free there (os.fork waits for the running batch).  One process a mode,
    the five run side by side."""
    docs = _docs(7, 600) + _docs(8, 6000)
    ref = stages.FusedPipeline(num_threads=1, dedup=stages.StreamDeduplicator())
    n_a, n_b = len(ref(docs[:300]).texts), len(ref(docs[300:600]).texts)
    assert n_a > 0 and n_b > 0
    (tmp_path / "docs.json").write_text(json.dumps(docs))
    script = tmp_path / "fork_stream.py"
    script.write_text(_FORK_STREAM)
    modes = ["exit", "close", "use", "pipe", "busy"]
    procs = {mode: subprocess.Popen([sys.executable, str(script), mode, str(tmp_path / "docs.json")],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for mode in modes}
    try:
        outs = {mode: p.communicate(timeout=90) + (p.returncode,) for mode, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for mode in modes:
        stdout, stderr, rc = outs[mode]
        assert rc == 0, (mode, stdout, stderr)
        lines = stdout.splitlines()
        assert "status 0" in lines, (mode, stdout, stderr)
        if mode == "busy":  # the parent's long batch ran first there: b's output after it
            assert any(ln.startswith(f"parent {n_a} ") for ln in lines), stdout
        else:
            assert f"parent {n_a} {n_b}" in lines, (mode, stdout)
        child = f"child pipe {n_b} True" if mode in ("pipe", "busy") else f"child {n_b}"
        assert child in lines, (mode, stdout, stderr)
        if mode == "use":
            assert any(ln.startswith("raised") and "fork" in ln for ln in lines), stdout


_FORK_RESUMABLE = textwrap.dedent("""
    import os, sys
    import torch
    from luminamoon.data import ResumablePipeline, JsonlSource
    corpus, sd, prefetch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    p = ResumablePipeline(JsonlSource(corpus), batch_size=64, prefetch_batches=prefetch, state_dir=sd,
                          num_threads=1)
    it = iter(p)
    next(it)
    pid = os.fork()
    if pid == 0:
        print("child", flush=True)
        sys.exit(0)  # interpreter exit in the child: the iterator and the pipeline are finalized
    _, status = os.waitpid(pid, 0)
    n = 1 + sum(1 for _ in it)
    p.close()
    print("status", status, "parent", n, flush=True)
""")


@pytest.mark.parametrize("prefetch", [0, 2])
def test_forked_child_of_an_iterating_resumable_pipeline_exits(tmp_path, prefetch):
    corpus = _corpus(tmp_path / "c.jsonl")
    script = tmp_path / "fork_resumable.py"
    script.write_text(_FORK_RESUMABLE)
    r = subprocess.run([sys.executable, str(script), str(corpus), str(tmp_path / "s"), str(prefetch)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "child" in r.stdout and f"status 0 parent {700 // 64 + 1}" in r.stdout, (r.stdout, r.stderr)


# ----------------------------------------------------------------- interrupts inside the stream

@pytest.mark.parametrize("prefetch", [0, 1, 2])
@pytest.mark.parametrize("at", [1, 5])
def test_run_interrupted_between_collect_and_yield_then_resumed(tmp_path, monkeypatch, prefetch, at):
    """A Ctrl-C / SIGTERM (KeyboardInterrupt) landing in the reading path right after a batch was
    collected from the stream (its hashes admitted, the next batch queued or running) but before it
    was delivered; the resumed run equals an uninterrupted one."""
    from luminamoon.cli.runner import run_corpus
    from luminamoon.data import resumable

    corpus = _corpus(tmp_path / "c.jsonl", n=1500)
    cfg = _run_cfg(prefetch=prefetch)
    cfg["output"]["part_docs"] = 100
    run_corpus([str(corpus)], str(tmp_path / "ref"), cfg, quiet=True, report=False)
    real = resumable._Producer._batch
    calls = []

    def interrupted(self, *a, **k):
        calls.append(1)
        if len(calls) == at + 3:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(resumable._Producer, "_batch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_corpus([str(corpus)], str(tmp_path / "out"), cfg, quiet=True, report=False)
    monkeypatch.setattr(resumable._Producer, "_batch", real)
    run_corpus([str(corpus)], str(tmp_path / "out"), cfg, resume=True, quiet=True, report=False)
    ref = _parts_rows(str(tmp_path / "ref"))
    assert ref and _parts_rows(str(tmp_path / "out")) == ref


# ----------------------------------------------------------------- prefetch_batches=0

def test_prefetch_zero_produces_nothing_ahead_of_the_consumer(tmp_path):
    """prefetch_batches=0 is documented as "produce in the consumer's thread" (and the reader then
    reads no block ahead): when a batch is received, the source and the deduplicator stand exactly
    at its coordinate -- no next block read from the source, no next batch's hashes admitted."""
    corpus = _corpus(tmp_path / "c.jsonl")
    n = 0
    with _pipeline(corpus, tmp_path / "s", prefetch_batches=0) as p:
        for b in p:
            assert p.source.position() == b.coord["source"], b.index
            assert p.dedup_stats["lsn"] == b.coord["wal_lsn"], b.index
            n += 1
    assert n == 700 // 64 + 1


# ----------------------------------------------------------------- full tables, closing from another thread

@pytest.mark.parametrize("near", [False, True])
def test_run_full_table_mid_stream_then_resume_with_a_larger_bound(tmp_path, near):
    """The dedup (or near-dup band) table fills while the runner has the next batch queued: the run
    stops with the bound named; resumed with a larger bound it equals a run that never hit it."""
    from luminamoon.cli.runner import RunError, run_corpus

    corpus = _corpus(tmp_path / "c.jsonl", n=1500)
    cfg = _run_cfg(prefetch=2)
    cfg["output"]["part_docs"] = 100
    if near:
        cfg["near_dup"]["mode"] = "stream"
    run_corpus([str(corpus)], str(tmp_path / "ref"), cfg, quiet=True, report=False)
    small = json.loads(json.dumps(cfg))
    small["near_dup" if near else "dedup"]["max_entries"] = 400 if not near else 6000
    with pytest.raises(RunError, match="max_entries"):
        run_corpus([str(corpus)], str(tmp_path / "out"), small, quiet=True, report=False)
    assert os.path.exists(tmp_path / "out")
    run_corpus([str(corpus)], str(tmp_path / "out"), cfg, resume=True, quiet=True, report=False)
    ref = _parts_rows(str(tmp_path / "ref"))
    assert ref and _parts_rows(str(tmp_path / "out")) == ref


@pytest.mark.parametrize("after", [0, 2, 5])
def test_close_from_another_thread_while_the_consumer_iterates(tmp_path, after):
    """close() from another thread while the consumer is inside next() (the producer thread inside
    stream.collect(), the runner in a batch): no hang; the consumer's loop ends or raises; the
    folder then resumes from the last commit to the uninterrupted output."""
    import threading

    corpus = _corpus(tmp_path / "c.jsonl", n=1500)
    want = _all(corpus, tmp_path / "ref")
    got = []
    p = _pipeline(corpus, tmp_path / "s")
    closer = threading.Thread(target=p.close)
    try:
        for b in p:
            got.append(_row(b))
            if len(got) == after + 1:
                p.commit()
                closer.start()
    except ValueError as e:
        assert "closed" in str(e)
    closer.join(30)
    assert not closer.is_alive()
    committed = got[: after + 1]
    with _pipeline(corpus, tmp_path / "s") as q:
        rest = [_row(b) for b in q]
    assert [r[:4] for r in committed + rest] == [w[:4] for w in want]


@pytest.mark.parametrize("bad", [range(64, 200), range(600, 700), range(0, 130)])
def test_whole_blocks_of_bad_records_skipped_equal_batch_by_batch(tmp_path, no_stream, streams, bad):
    """Whole blocks of bad lines skipped (on_error="skip"): blocks with few or no records go
    through the stream as the batch-by-batch path runs them (same batches, coordinates, skips)."""
    corpus = _corpus(tmp_path / "c.jsonl", bad_lines=list(bad))

    def run(sd):
        out = []
        with _pipeline(corpus, sd, source_kw={"on_error": "skip"}) as p:
            for b in p:
                out.append(_row(b) + (b.block.skipped if b.block is not None else None,))
            return out, p.source.skipped

    got = run(tmp_path / "s")
    assert streams
    no_stream()
    want = run(tmp_path / "r")
    assert got == want and want[1] == len(bad)


# ----------------------------------------------------------------- callables that are not plain FusedPipelines

class _Logged(stages.FusedPipeline):
    """A FusedPipeline whose __call__ does more (here: counts and marks its outputs)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.calls = 0

    def __call__(self, texts):
        self.calls += 1
        r = super().__call__(texts)
        return stages.StageResult(type(r.texts).from_list([t.upper() for t in r.texts.tolist()]), r.reasons,
                                  r.source_index)


class _Delegating:
    """A wrapper whose __call__ does more, the rest of a FusedPipeline's attributes delegated."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self, texts):
        self.calls += 1
        return self.inner(texts)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@pytest.mark.parametrize("kind", ["subclass", "wrapper", "plain"])
def test_a_callable_pipeline_is_called_for_every_batch(tmp_path, streams, kind):
    """ResumablePipeline(pipeline=<callable>): the callable's own __call__ runs every batch.  A
    FusedPipeline subclass overriding __call__ (or a wrapper delegating _stream through
    __getattr__) was bypassed by the stream, which runs the C pipeline directly; a plain
    FusedPipeline still goes through the stream."""
    corpus = _corpus(tmp_path / "c.jsonl")
    fp = {"subclass": lambda: _Logged(dedup=False, num_threads=2), "plain": lambda: stages.FusedPipeline(
        dedup=False, num_threads=2), "wrapper": lambda: _Delegating(stages.FusedPipeline(dedup=False, num_threads=2))}
    pipe = fp[kind]()
    with ResumablePipeline(JsonlSource(str(corpus)), pipeline=pipe, dedup=False, batch_size=64,
                           state_dir=str(tmp_path / "s")) as p:
        got = [b.texts.tolist() for b in p]
    assert len(got) == 700 // 64 + 1
    if kind == "plain":
        assert len(streams) == 1
    else:
        assert pipe.calls == len(got) and not streams
    if kind == "subclass":
        assert all(t == t.upper() for b in got for t in b) and any(b for b in got)
