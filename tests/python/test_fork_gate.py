"""os.fork() while another thread is inside a stage call.

The stage objects (TextCleaner, QualityFilter, PIIMasker, the deduplicators, FusedPipeline,
StateTracker) serialise calls with a mutex that is held while the call runs with the GIL
released.  A fork taken by another thread at that moment copied the mutex locked, and in the
child nothing would ever unlock it: the first call there waited forever.  The binding now holds
forks back until no stage call is inside its lock (and starts none until the fork is done), so a
child can use every object it inherited.  A deduplicator with a write-ahead log is refused in a
child by the binding itself (its log is the parent's), whatever the Python wrapper knows.
"""
import os
import time

import pytest

from luminamoon import _C
from luminamoon.stages import (FusedPipeline, NearDeduplicator, PIIMasker, QualityFilter, StreamDeduplicator,
                               TextCleaner)
from luminamoon.string_tensor import StringTensor

from forking import fork_child, hammering

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_DOCS = [f"document number {i} with some words in it, and some more words to clean " * 6 for i in range(60_000)]


def _fork_during(busy, use, rounds: int = 4) -> list:
    """Fork `rounds` times while a thread runs busy() in a loop; the child runs use() and reports."""
    results = []
    with hammering(busy):
        for _ in range(rounds):
            time.sleep(0.02)  # well inside a call (each takes tens of ms)
            results.append(fork_child(use))
    return results


def _st():
    return StringTensor.from_list(_DOCS)


@pytest.mark.parametrize("make", [
    lambda: TextCleaner(),
    lambda: QualityFilter(),
    lambda: PIIMasker(),
    lambda: StreamDeduplicator(),
    lambda: NearDeduplicator(),
    lambda: FusedPipeline(dedup=True),
], ids=["cleaner", "quality", "pii", "dedup", "near_dedup", "fused"])
def test_child_forked_during_a_call_can_use_the_object(make):
    stage = make()
    st = _st()
    small = ["a short one", "a short one", "another text entirely, long enough to be kept by the filter"]
    # the parent's calls never see `small`: the child's answer is a fresh object's
    expected = str(make()(small).kept.tolist())

    def use():
        return stage(small).kept.tolist()

    for status, out in _fork_during(lambda: stage(st), use):
        assert (status, out) == (0, expected)  # was: 'hung' (the child waited on the parent's held mutex)


def test_parent_keeps_working_after_forks_during_calls():
    d = StreamDeduplicator()
    st = _st()
    n = []
    _fork_during(lambda: n.append(int(d(st).kept.sum())), lambda: "ok", rounds=3)
    # first pass admitted every distinct document; every later pass admitted none
    assert n[0] == len(set(_DOCS)) and all(k == 0 for k in n[1:]), n[:5]


def test_wal_dedup_refused_in_a_child_by_the_binding_itself(tmp_path):
    """The raw _C object (no Python wrapper involved) refuses a child: its log is the parent's."""
    d = StreamDeduplicator(wal_path=str(tmp_path / "d.wal"))
    d(["x"])
    raw = d._obj

    def use():
        try:
            raw.check_insert_hashes(__import__("torch").zeros(1, 2, dtype=__import__("torch").int64))
            msg = "admitted"
        except ValueError as e:
            msg = "refused" if "fork" in str(e) else f"other {e}"
        raw.close()  # marks it closed; writes nothing
        return msg + (" closed" if raw.closed else " open")

    status, out = fork_child(use)
    assert (status, out) == (0, "refused closed")
    assert d.lsn == 1 and d.sync() == 1
    d.close()
    assert StreamDeduplicator(wal_path=str(tmp_path / "d.wal")).lsn == 1
