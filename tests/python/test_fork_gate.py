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
import signal
import threading
import time

import pytest

from luminamoon import _C
from luminamoon.stages import (FusedPipeline, NearDeduplicator, PIIMasker, QualityFilter, StreamDeduplicator,
                               TextCleaner)
from luminamoon.string_tensor import StringTensor

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

_DOCS = [f"document number {i} with some words in it, and some more words to clean " * 6 for i in range(60_000)]


def _child_result(pid: int, r: int, limit_s: float = 30.0) -> tuple:
    """(exit status or 'hung', text) of a forked child writing its result to pipe r."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            out = b""
            while True:
                b = os.read(r, 65536)
                if not b:
                    break
                out += b
            os.close(r)
            return status, out.decode()
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(r)
    return "hung", ""


def _fork_during(busy, use, rounds: int = 4) -> list:
    """Fork `rounds` times while a thread runs busy() in a loop; the child runs use() and reports."""
    stop = threading.Event()
    started = threading.Event()
    errors = []

    def loop():
        try:
            while not stop.is_set():
                started.set()
                busy()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
            started.set()

    t = threading.Thread(target=loop)
    t.start()
    results = []
    try:
        started.wait()
        for _ in range(rounds):
            time.sleep(0.02)  # well inside a call (each takes tens of ms)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child
                os.close(r)
                try:
                    msg, code = str(use()), 0
                except BaseException as e:  # noqa: BLE001
                    msg, code = f"raised {type(e).__name__}: {e}", 3
                os.write(w, msg.encode())
                os._exit(code)
            os.close(w)
            results.append(_child_result(pid, r))
    finally:
        stop.set()
        t.join()
    assert not errors, errors
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
        except ValueError as e:
            return "refused" if "fork" in str(e) else f"other {e}"
        return "admitted"

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            msg = use()
            raw.close()  # marks it closed; writes nothing
            msg += " closed" if raw.closed else " open"
        except BaseException as e:  # noqa: BLE001
            msg = f"raised {type(e).__name__}: {e}"
        os.write(w, msg.encode())
        os._exit(0)
    os.close(w)
    status, out = _child_result(pid, r)
    assert out == "refused closed", out
    assert d.lsn == 1 and d.sync() == 1
    d.close()
    assert StreamDeduplicator(wal_path=str(tmp_path / "d.wal")).lsn == 1


@pytest.mark.parametrize("cls", [StreamDeduplicator, NearDeduplicator])
def test_parent_reopens_its_log_while_a_forked_child_lives(tmp_path, cls):
    """A child that lives on (a DataLoader worker) kept the parent's log locked (an flock belongs
    to the open file both share): after the parent closed its deduplicator it could not open the
    log again ("is in use") until the child exited.  The child's copy now closes its descriptor at
    the fork (nothing written), and the child still refuses to use it."""
    path = str(tmp_path / "d.wal")
    d = cls(wal_path=path)
    d(["one document with several words in it for the shingles", "another one, different in every way"])
    d.sync()
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: wait until the parent is done, then report
        os.close(w)
        os.write(ready_w, b"r")  # its at-fork hooks have run (a DataLoader worker has long started)
        os.read(r, 1)
        try:
            d(["x"])
            msg = "admitted"
        except ValueError as e:
            msg = "refused" if "fork" in str(e) else f"other {e}"
        d.close()
        os._exit(0 if msg == "refused" else 3)
    os.close(r)
    os.close(ready_w)
    assert os.read(ready_r, 1) == b"r"
    os.close(ready_r)
    try:
        before = open(path, "rb").read()
        lsn = d.lsn
        d.close()
        e = cls(wal_path=path)  # was: ValueError "... is in use" while the child lived
        assert e.lsn == lsn
        e.close()
    finally:
        os.write(w, b"x")
        os.close(w)
        _, status = os.waitpid(pid, 0)
    assert status == 0  # the child refused to use the parent's log
    assert open(path, "rb").read() == before  # and wrote nothing into it
