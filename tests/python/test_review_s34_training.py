"""Review s34: the training-side paths (DataLoader collate, ResumablePipeline, DistributedPipeline) used
carelessly.  Each test fails on the defect it names; the last ones pin behaviour that held up."""
import json
import pickle
import threading

import pytest
import torch
from torch.utils.data import DataLoader

from luminamoon.data import DistributedPipeline, JsonlSource, ResumablePipeline, create_resumable_collate
from luminamoon.data.sources import IterableSource

STAGES = {"quality": False, "pii": False}  # short synthetic documents: only cleaning and dedup


def docs(n, distinct=None):
    distinct = distinct or n
    return [{"text": f"document number {i % distinct} with some words"} for i in range(n)]


def number(text):
    return int(text.split()[2])


def jsonl(tmp_path, n):
    f = tmp_path / "a.jsonl"
    f.write_text("".join(json.dumps({"text": f"document number {i} with some words", "id": i}) + "\n"
                         for i in range(n)))
    return str(f)


# ---------------------------------------------------------------- defects found (fixed)

def test_stateful_loader_state_taken_at_epoch_end_resumes_into_a_full_next_epoch():
    """StatefulDataLoader(num_workers=0) loads a state taken after an epoch ended into an iterator it
    discards as finished, and runs the next epoch on a new one.  That epoch got the finished epoch's
    dedup table and delivered nothing (40 -> 0 documents); it must deliver the dataset anew."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    data = docs(60, distinct=40)
    base = create_resumable_collate(stages=STAGES, return_string_tensor=True)

    def make():
        c = pickle.loads(pickle.dumps(base))  # as in a new process: empty tables
        return sdl.StatefulDataLoader(c.stateful(data), batch_size=7, collate_fn=c)

    first = make()
    epoch1 = [t for b in first for t in b.tolist()]
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    epoch2 = [t for b in resumed for t in b.tolist()]
    epoch3 = [t for b in resumed for t in b.tolist()]
    assert sorted(map(number, epoch1)) == list(range(40))
    assert epoch2 == epoch1 and epoch3 == epoch1


def test_resumed_mid_epoch_state_still_restores_the_dedup_table():
    """The fix above keeps a mid-epoch resume exact: the restored table belongs to the resumed pass."""
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    data = docs(60, distinct=40)
    base = create_resumable_collate(stages=STAGES, return_string_tensor=True)

    def make():
        c = pickle.loads(pickle.dumps(base))
        return sdl.StatefulDataLoader(c.stateful(data), batch_size=7, collate_fn=c)

    full = [t for b in make() for t in b.tolist()]
    for k in (1, 4, 6):
        first = make()
        it = iter(first)
        head = [t for _, b in zip(range(k), it) for t in b.tolist()]
        resumed = make()
        resumed.load_state_dict(first.state_dict())
        assert head + [t for b in resumed for t in b.tolist()] == full, k


@pytest.mark.parametrize("make", [lambda s: ResumablePipeline(s, stages=STAGES),
                                  lambda s: DistributedPipeline(s, stages=STAGES),
                                  lambda s: IterableSource(s)])
def test_a_set_or_a_mapping_is_refused_as_a_source(make):
    """A set's order changes with the process's hash seed, so a resumed run replaying it skipped records
    it never delivered (with dedup: 11 of 50 lost across a commit and a restart with another
    PYTHONHASHSEED); a dict (one record, a DatasetDict) was iterated by its keys, delivered as texts."""
    texts = {f"document number {i} with some words" for i in range(10)}
    with pytest.raises(TypeError, match="stable order"):
        make(texts)
    with pytest.raises(TypeError, match="stable order"):
        make(frozenset(texts))
    with pytest.raises(TypeError, match="mapping"):
        make({"text": "document number 1 with some words"})
    ok = make(sorted(texts))  # the advice of the message works
    if hasattr(ok, "close"):
        ok.close()


def test_dedup_seed_of_the_wrong_type_names_the_argument(tmp_path):
    """dedup={'seed': 'x'} raised ValueError("invalid literal for int()"), naming nothing."""
    for bad in ("x", 1.5, True):
        with pytest.raises(TypeError, match=r"dedup\['seed'\]"):
            ResumablePipeline(["a text"], dedup={"seed": bad}, state_dir=str(tmp_path / "s"))


def test_collate_max_length_true_is_refused():
    """max_length=True (a bool is an int) padded and truncated every document to one token."""
    with pytest.raises(ValueError, match="max_length"):
        create_resumable_collate(max_length=True)


@pytest.mark.parametrize("prefetch", [0, 2])
def test_close_from_another_thread_does_not_read_as_the_end_of_the_data(tmp_path, prefetch):
    """close() while another thread iterates stopped the producer, and the consumer's loop ended as if the
    data were exhausted (21 of 2000 records, no error); it must raise ValueError."""
    f = jsonl(tmp_path, 2000)
    pipe = ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=str(tmp_path / "s"),
                             prefetch_batches=prefetch)
    seen = 0
    with pytest.raises(ValueError, match="closed while it was iterated"):
        for b in pipe:
            seen += b.n_in
            if b.index == 2:
                t = threading.Thread(target=pipe.close)
                t.start()
                t.join()
    assert seen == 21


def test_next_on_an_iterator_after_close_raises(tmp_path):
    f = jsonl(tmp_path, 200)
    pipe = ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=str(tmp_path / "s"),
                             prefetch_batches=1)
    it = iter(pipe)
    next(it)
    pipe.close()
    with pytest.raises(ValueError, match="closed"):
        next(it)


def test_distributed_close_from_another_thread_raises(tmp_path):
    f = jsonl(tmp_path, 2000)
    pipe = DistributedPipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=str(tmp_path / "s"))
    with pytest.raises(ValueError, match="closed while it was iterated"):
        for b in pipe:
            if b.index == 2:
                t = threading.Thread(target=pipe.close)
                t.start()
                t.join()


# ---------------------------------------------------------------- what held up

@pytest.mark.parametrize("kw", [dict(), dict(shuffle=True), dict(num_workers=2),
                                dict(num_workers=2, persistent_workers=True, shuffle=True)])
def test_collate_delivers_every_document_once_per_epoch_with_early_breaks(kw):
    """batch_size not dividing the dataset, several epochs, an epoch left early, then a full one."""
    n = 53
    loader = DataLoader(docs(n), batch_size=10, collate_fn=create_resumable_collate(
        stages=STAGES, return_string_tensor=True), **kw)
    for _ in range(2):
        assert sorted(number(t) for b in loader for t in b.tolist()) == list(range(n))
    for b in loader:
        break
    assert sorted(number(t) for b in loader for t in b.tolist()) == list(range(n))


def test_commit_at_odd_moments_then_resume_exactly_once(tmp_path):
    """commit before the first batch, twice in a row, from another thread, after exhaustion."""
    f, sd = jsonl(tmp_path, 100), str(tmp_path / "s")

    def ids(b):
        return [r["id"] for r in b.kept_records]

    with ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd) as p:
        p.commit()
        p.commit()
        got = []
        for b in p:
            got += ids(b)
            t = threading.Thread(target=p.commit)
            t.start()
            t.join()
            if b.index == 3:
                p.commit()
                p.commit()
                break
    with ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd) as p:
        got += [i for b in p for i in ids(b)]
        p.commit()
        p.commit()
    assert got == list(range(100))
    with ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd) as p:
        assert [b for b in p] == []


def test_exception_in_the_consumer_loop_resumes_from_the_last_commit(tmp_path):
    f, sd = jsonl(tmp_path, 100), str(tmp_path / "s")
    with pytest.raises(KeyError):
        with ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd) as p:
            for b in p:
                if b.index == 2:
                    p.commit()
                if b.index == 5:
                    raise KeyError("the training step failed")
    with ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd) as p:
        assert [r["id"] for b in p for r in b.kept_records] == list(range(21, 100))


@pytest.mark.parametrize("change", ["truncate", "append", "touch"])
def test_resume_over_a_changed_input_file_is_refused(tmp_path, change):
    import os

    f, sd = jsonl(tmp_path, 100), str(tmp_path / "s")
    with ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd) as p:
        for b in p:
            if b.index == 3:
                p.commit()
                break
    if change == "truncate":
        os.truncate(f, os.path.getsize(f) // 2)
    elif change == "append":
        with open(f, "a") as fh:
            fh.write(json.dumps({"text": "one more document with words", "id": 999}) + "\n")
    else:
        os.utime(f, (1, 1))
    with pytest.raises(ValueError, match="input changed"):
        ResumablePipeline(JsonlSource(f), stages=STAGES, batch_size=7, state_dir=sd)


def test_bad_arguments_raise_typed_errors_naming_them(tmp_path):
    f = jsonl(tmp_path, 10)
    (tmp_path / "afile").write_text("")
    for kw, exc, word in [(dict(num_threads=0), ValueError, "num_threads"),
                          (dict(num_threads="2"), TypeError, "num_threads"),
                          (dict(text_key=None), TypeError, "text_key"),
                          (dict(max_prefetch_bytes=0), ValueError, "max_prefetch_bytes"),
                          (dict(pipeline="FUSED"), ValueError, "pipeline"),
                          (dict(stages={"cleaner": "yes"}), TypeError, "cleaner"),
                          (dict(state_dir=b"/tmp/x"), TypeError, "state_dir"),
                          (dict(state_dir=str(tmp_path / "afile")), OSError, "afile")]:
        with pytest.raises(exc, match=word):
            ResumablePipeline(JsonlSource(f), **kw)
