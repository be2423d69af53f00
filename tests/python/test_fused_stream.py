"""FusedPipeline._stream: the native runner ResumablePipeline's reading path hands its batches to
(``_C.FusedRunner``: a thread that never takes the GIL runs them one after another).

It must give what calling the pipeline batch by batch gives -- texts, reasons, source indices, the
dedup LSN, the PII cycle and the counters after each batch --, raise a failed batch's error at its
turn and run nothing after it, keep its bound, and close cleanly while batches are queued.
"""
from __future__ import annotations

import random
import threading

import pytest
import torch

from luminamoon import DedupFullError, StringTensor
from luminamoon.stages import FusedPipeline, PIIMasker, StreamDeduplicator

_REAL_STREAM = FusedPipeline._stream

WORDS = ("the of and to in is was for on that with as by at from it be this are have not an or but which one all "
         "were there their been has had more will would who can its also about into other than some time only new "
         "after two first may these such over most where when many any both those then made use through each "
         "between well under much").split()


def _docs(seed: int, n: int):
    """English-like documents: most pass the quality rules, some fail them, every 7th holds an
    e-mail address (PII), and the second half repeats some of the first (duplicates)."""
    rnd = random.Random(seed)

    def sentence():
        w = [rnd.choice(WORDS) for _ in range(rnd.randint(8, 16))]
        return w[0].capitalize() + " " + " ".join(w[1:]) + "."

    out = []
    for i in range(n):
        s = [sentence() for _ in range(rnd.randint(1, 12))]
        if i % 7 == 0:
            s.insert(min(1, len(s)), f"Write to user{seed}x{i}@example.org for more.")
        out.append("\n".join(s))
    return out


def _batches(k: int = 6, per: int = 250):
    batches, seen = [], []
    for b in range(k):
        docs = _docs(b, per)
        docs[::9] = seen[: len(docs[::9])] if seen else docs[::9]  # repeats of earlier batches
        seen.extend(docs[1::5])
        batches.append(StringTensor.from_list(docs))
    return batches


def _pipe(tmp_path, name, **dedup):
    return FusedPipeline(num_threads=2, pii=PIIMasker("datatrove"),
                         dedup=StreamDeduplicator(str(tmp_path / f"{name}.wal"), **dedup))


def test_stream_equals_batch_by_batch(tmp_path):
    batches = _batches()
    ref, got = _pipe(tmp_path, "ref"), _pipe(tmp_path, "got")
    want = []
    for st in batches:
        r = ref(st)
        want.append((r, ref.dedup.lsn, ref.pii_cycle, ref.counters))
    stream = got._stream(2)
    out = []
    pending = list(batches)
    stream.submit(pending.pop(0))
    while pending or len(out) < len(batches):
        if pending:
            stream.submit(pending.pop(0))  # one queued behind the running one
        out.append(stream.collect())
    stream.close()
    assert len(out) == len(want)
    kept = dropped = 0
    for (r, lsn, cyc, cnt), (s, slsn, near, scyc, scnt) in zip(want, out):
        assert s.texts.tolist() == r.texts.tolist()
        assert torch.equal(s.reasons, r.reasons) and torch.equal(s.source_index, r.source_index)
        assert (slsn, scyc, scnt) == (lsn, cyc, cnt)
        assert near is None
        kept += len(r.texts)
        dropped += int((r.reasons != 0).sum())
    assert kept and dropped and any(want[-1][2])  # the data exercised dedup / quality drops and PII
    assert got.dedup.lsn == ref.dedup.lsn and got.counters == ref.counters


def test_failed_batch_raises_at_its_turn_and_nothing_after_runs(tmp_path):
    batches = _batches(4, 200)
    ref = _pipe(tmp_path, "ref", max_entries=300)
    fail_at = None
    for i, st in enumerate(batches):
        try:
            ref(st)
        except DedupFullError:
            fail_at = i
            break
    assert fail_at is not None and fail_at > 0
    pipe = _pipe(tmp_path, "got", max_entries=300)
    stream = pipe._stream(len(batches))
    for st in batches:
        stream.submit(st)
    for i in range(fail_at):
        stream.collect()
    lsn_ok = pipe.dedup.lsn
    with pytest.raises(DedupFullError):
        stream.collect()
    with pytest.raises(ValueError, match="an earlier batch failed"):
        stream.collect()
    assert pipe.dedup.lsn == lsn_ok == ref.dedup.lsn  # the batches after the failed one did not run
    stream.close()


def test_bound_and_misuse(tmp_path):
    st = _batches(1, 50)[0]
    pipe = _pipe(tmp_path, "p")
    stream = pipe._stream(2)
    with pytest.raises(ValueError, match="no batch submitted"):
        stream.collect()
    stream.submit(st)
    stream.submit(st)
    with pytest.raises(ValueError, match="2 batches are submitted and not collected"):
        stream.submit(st)
    stream.collect()
    stream.collect()
    with pytest.raises(ValueError, match="offsets point outside data"):
        stream._runner.submit(torch.tensor([0, 5], dtype=torch.int64), torch.zeros(3, dtype=torch.uint8), 1)
    with pytest.raises(TypeError, match="FusedPipeline: data must be uint8"):
        stream._runner.submit(torch.tensor([0, 1], dtype=torch.int64), torch.zeros(3, dtype=torch.int32), 1)
    with pytest.raises(TypeError):
        stream.submit("one string")
    stream.close()
    with pytest.raises(ValueError, match="closed"):
        stream.submit(st)
    with pytest.raises(ValueError, match="max_jobs must be >= 1"):
        pipe._stream(0)
    assert len(pipe(st).texts) >= 0  # the pipeline itself still works after its stream closed


def test_close_with_batches_queued_and_dedup_closed(tmp_path):
    batches = _batches(6, 300)
    pipe = _pipe(tmp_path, "p")
    stream = pipe._stream(6)
    for st in batches:
        stream.submit(st)
    stream.close()  # the running batch finishes, the queued ones are dropped
    lsn = pipe.dedup.lsn
    ref = _pipe(tmp_path, "ref")
    runs = 0
    while ref.dedup.lsn < lsn:
        ref(batches[runs])
        runs += 1
    assert ref.dedup.lsn == lsn and runs <= 1  # at most the one that was running ran
    stream2 = pipe._stream(2)
    stream2.submit(batches[0])
    pipe.dedup.close()
    with pytest.raises(ValueError, match="closed"):
        stream2.collect()
    stream2.close()


def test_dropped_stream_and_threads(tmp_path):
    """A stream dropped without close() joins its thread; streams of several pipelines run side
    by side from several Python threads (each its own order)."""
    batches = _batches(3, 150)
    pipe = _pipe(tmp_path, "a")
    s = pipe._stream(3)
    for st in batches:
        s.submit(st)
    del s  # the destructor waits for the batches running and drops the rest
    errors = []

    def go(k):
        try:
            p = _pipe(tmp_path, f"t{k}")
            r = _pipe(tmp_path, f"r{k}")
            want = [r(st).texts.tolist() for st in batches]
            s = p._stream(1)
            got = []
            for st in batches:
                s.submit(st)
                got.append(s.collect()[0].texts.tolist())
            s.close()
            assert got == want
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    th = [threading.Thread(target=go, args=(k,)) for k in range(3)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    assert not errors, errors


# ---------------------------------------------------------------- ResumablePipeline's reading path

def _corpus(path, n=900, bad_at=None):
    import json

    docs = _docs(11, n // 2)
    docs = docs + docs[::3] + _docs(12, n - len(docs) - len(docs[::3]))  # duplicates far apart
    lines = [json.dumps({"id": f"d{i}", "text": t}) for i, t in enumerate(docs)]
    if bad_at is not None:
        lines[bad_at] = '{"id": "broken", "text": "no end'
    path.write_text("\n".join(lines) + "\n")
    return path


def _iterate(tmp_path, name, corpus, streamed, monkeypatch, **kw):
    """(batches, error) of a ResumablePipeline over ``corpus``: each batch with its coordinate;
    the stream path switched off by hiding FusedPipeline._stream (then every batch goes through
    pipe(texts) under the lock, as before the stream)."""
    from luminamoon import stages
    from luminamoon.data import JsonlSource, ResumablePipeline

    used = []
    real = _REAL_STREAM

    def spy(self, max_jobs=2):
        used.append(max_jobs)
        return real(self, max_jobs)

    monkeypatch.setattr(stages.FusedPipeline, "_stream", spy if streamed else None)
    out, err = [], None
    with ResumablePipeline(JsonlSource(str(corpus)), batch_size=64, state_dir=str(tmp_path / name),
                           num_threads=2, stages={"pii": {"mode": "datatrove"}}, **kw) as p:
        try:
            for b in p:
                out.append((b.index, b.texts.tolist(), b.reasons.tolist(), b.source_index.tolist(), b.coord,
                            [r["id"] for r in b.kept_records]))
        except Exception as e:  # compared between the two paths
            err = (type(e), str(e))
    assert bool(used) == streamed
    return out, err


@pytest.mark.parametrize("near", [False, True])
def test_resumable_stream_path_equals_batch_by_batch(tmp_path, monkeypatch, near):
    corpus = _corpus(tmp_path / "c.jsonl")
    kw = {"near_dedup": True} if near else {}
    want, e1 = _iterate(tmp_path, "a", corpus, False, monkeypatch, **kw)
    got, e2 = _iterate(tmp_path, "b", corpus, True, monkeypatch, **kw)
    assert e1 is None and e2 is None
    assert got == want
    reasons = [r for b in want for r in b[2]]
    assert 1 in reasons and 0 in reasons  # duplicates dropped, documents kept
    assert any(b[4].get("pii_cycle") for b in want) and want[-1][4]["wal_lsn"] > 0
    assert ("near_wal_lsn" in want[-1][4]) == near


def test_resumable_stream_path_reader_error_after_the_batches_before_it(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path / "c.jsonl", bad_at=300)
    want, e1 = _iterate(tmp_path, "a", corpus, False, monkeypatch)
    got, e2 = _iterate(tmp_path, "b", corpus, True, monkeypatch)
    assert e1 is not None and e1[0].__name__ == "BadRecordError" and "c.jsonl:301:" in e1[1]
    assert (got, e2) == (want, e1)
    assert len(want) == 300 // 64  # every whole batch before the bad record, then the error


def test_resumable_stream_path_full_dedup_table_fails_at_the_same_batch(tmp_path, monkeypatch):
    corpus = _corpus(tmp_path / "c.jsonl")
    want, e1 = _iterate(tmp_path, "a", corpus, False, monkeypatch, dedup={"max_entries": 200})
    got, e2 = _iterate(tmp_path, "b", corpus, True, monkeypatch, dedup={"max_entries": 200})
    assert e1 is not None and e1[0] is DedupFullError
    assert (got, e2) == (want, e1)
    assert 0 < len(want) < 900 // 64
