"""Review s34 (text stages and their durable state): an adversary's tests.

* a WAL-backed deduplicator inherited by a forked child: using it there wrote into the parent's
  log (the child's "durable" records were overwritten, or replayed as the parent's), and a normal
  exit of the child flushed the parent's buffered hashes into the log (hashes the parent truncated
  came back on reopening);
* two StateTrackers on one file each committed from their own view of the slots: the second
  silently overwrote the first's commit;
* a second StreamDeduplicator on a locked WAL was refused as "object is in the wrong state";
* num_threads=2**40 was accepted and every call then raised pybind's "incompatible function
  arguments";
* what held up: SIGKILL of a writer at random points recovers exactly a prefix of the admitted
  documents that covers every sync; the last record truncated at every byte or with any bit
  flipped is cut, damage before it is refused; concurrent calls on one stage object.
"""
from __future__ import annotations

import os
import random
import select
import signal
import sys
import threading
import time

import pytest

from luminamoon import StateTracker
from luminamoon import _C
from luminamoon.stages import (FusedPipeline, NearDeduplicator, PIIMasker, QualityFilter, StreamDeduplicator,
                               TextCleaner)

from forking import fork_child  # noqa: E402

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


# ------------------------------------------------------------------ fork

@pytest.mark.parametrize("cls", [StreamDeduplicator, NearDeduplicator])
def test_forked_child_cannot_write_into_the_parents_wal(tmp_path, cls):
    wal = tmp_path / "x.wal"
    d = cls(wal)
    docs = [" ".join("w" + "abcdef"[i] + "ghijklmnopqr"[j] for j in range(12)) for i in range(6)]  # no shared shingles
    d(docs[:2])
    d.sync()

    def child():
        try:
            d(docs[2:5])
            return f"admitted {d.sync()}"
        except ValueError as e:
            return f"refused {e}"

    status, out = fork_child(child)
    assert status == 0, out
    assert out.startswith("refused") and "fork" in out, out  # was: "admitted ..." (its records overwritten next)
    lsn_before = d.lsn
    d(docs[5:])
    d.sync()
    d.close()
    with cls(wal) as again:
        assert again.lsn > lsn_before  # the parent's last batch is there
        r = again(docs[2:5])  # the child's documents were never admitted: still new here
        assert r.kept.all().item(), r.reasons.tolist()


def test_forked_child_sys_exit_does_not_flush_the_parents_buffered_hashes(tmp_path):
    """The same through a real interpreter exit (sys.exit: module teardown, finalizers)."""
    import subprocess
    import textwrap
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from luminamoon.stages import StreamDeduplicator
        wal = sys.argv[1]
        d = StreamDeduplicator(wal)
        d(["a", "b"])   # buffered, not synced
        pid = os.fork()
        if pid == 0:
            sys.exit(0)
        os.waitpid(pid, 0)
        d.truncate(0)
        d.close()
        with StreamDeduplicator(wal) as again:
            print("lsn", again.lsn)
    """))
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "w.wal")], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "lsn 0" in out.stdout.split("\n"), out.stdout  # was "lsn 2"


def test_forked_child_pipeline_with_a_wal_dedup_is_refused_and_close_writes_nothing(tmp_path):
    wal = tmp_path / "x.wal"
    pipe = FusedPipeline(quality=False, dedup={"wal_path": str(wal)}, num_threads=1)
    pipe(["one", "two"])
    size = os.path.getsize(wal)

    def child():
        msgs = []
        for f in (lambda: pipe(["three"]), lambda: pipe._stream(2).submit(["three"]), lambda: pipe.dedup.lsn,
                  lambda: pipe.dedup.sync()):
            try:
                f()
                msgs.append("ran")
            except ValueError as e:
                msgs.append("fork" in str(e))
        pipe.close()  # closes nothing of the parent's
        repr(pipe)
        return msgs

    status, out = fork_child(child)
    assert status == 0 and out == "[True, True, True, True]", out
    assert os.path.getsize(wal) == size  # the child wrote nothing (the parent's buffer is still its own)
    assert pipe(["three"]).kept.all().item()
    assert pipe.dedup.sync() == 3
    pipe.close()


def test_in_memory_dedup_still_works_in_a_forked_child():
    d = StreamDeduplicator()
    d(["a"])
    status, out = fork_child(lambda: d(["a", "b"]).reasons.tolist())
    assert status == 0 and out == "[1, 0]", out


# ---------------------------------------------------------- StateTracker

def test_two_state_trackers_on_one_file_cannot_both_commit(tmp_path):
    p = tmp_path / "state"
    a = StateTracker(p)
    a.commit(batch_index=10, wal_lsn=100)
    with pytest.raises(OSError, match="in use"):  # was: opened, and its commit overwrote a's slot
        StateTracker(p)
    assert a.load()[0]["batch_index"] == 10
    a.close()
    with StateTracker(p) as b:  # free again once closed
        assert b.load()[0]["batch_index"] == 10
        b.commit(batch_index=11)
    # a dropped tracker releases the file too
    StateTracker(p).load()
    with StateTracker(p) as c:
        assert c.load()[0]["batch_index"] == 11


def test_state_tracker_held_by_another_process_is_refused(tmp_path):
    p = tmp_path / "state"
    with StateTracker(p) as a:
        a.commit(batch_index=1)
        import subprocess
        code = ("import sys\nfrom luminamoon import StateTracker\n"
                "try:\n    StateTracker(sys.argv[1]).commit(batch_index=99)\n    print('committed')\n"
                "except OSError as e:\n    print('refused', e.errno)\n")
        out = subprocess.run([sys.executable, "-c", code, str(p)], capture_output=True, text=True, timeout=120)
        assert "refused 16" in out.stdout, (out.stdout, out.stderr)
        assert a.load()[0]["batch_index"] == 1


def test_forked_child_cannot_commit_the_parents_state_and_does_not_hold_its_lock(tmp_path):
    p = tmp_path / "state"
    st = StateTracker(p)
    st.commit(batch_index=1)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            st.commit(batch_index=99)
            msg = "committed"
        except ValueError as e:
            msg = "refused" if "fork" in str(e) else f"other {e}"
        loaded = st.load()[0]["batch_index"]  # reading is fine
        os.write(w, f"{msg} {loaded}\n".encode())
        time.sleep(3)  # alive while the parent closes and reopens
        os._exit(0)
    os.close(w)
    line = os.read(r, 200).decode().strip()
    try:
        assert line == "refused 1", line
        st.close()
        with StateTracker(p) as again:  # the child's copy of the lock does not keep the parent out
            assert again.load()[0]["batch_index"] == 1
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)


def test_state_tracker_torn_slots_and_foreign_files(tmp_path):
    p = tmp_path / "state"
    with StateTracker(p) as st:
        st.commit(batch_index=1)
        st.commit(batch_index=2)
    raw = p.read_bytes()
    for i in range(0, 128, 3):  # one flipped bit anywhere: the other slot's coordinate, never a third one
        b = bytearray(raw)
        b[i] ^= 0x10
        p.write_bytes(bytes(b))
        with StateTracker(p) as st:
            assert st.load()[0]["batch_index"] in (1, 2)
    for cut in (0, 1, 63, 64, 127):  # a short file is refused, not restarted from zero
        p.write_bytes(raw[:cut])
        with pytest.raises(OSError):
            StateTracker(p).load()
    b = bytearray(raw)
    b[5] ^= 1
    b[64 + 5] ^= 1
    p.write_bytes(bytes(b))
    with StateTracker(p) as st:
        with pytest.raises(OSError, match="corrupt"):
            st.load()
        with pytest.raises(OSError, match="corrupt"):
            st.commit(batch_index=3)
        st.reset()
        assert st.load() is None


# --------------------------------------------------------- dedup WAL

def test_second_stream_dedup_on_a_locked_wal_names_the_lock(tmp_path):
    wal = tmp_path / "x.wal"
    with StreamDeduplicator(wal):
        with pytest.raises(ValueError, match="in use"):  # was "object is in the wrong state for this call"
            StreamDeduplicator(wal)
        os.symlink(wal, tmp_path / "link.wal")
        with pytest.raises(ValueError, match="in use"):
            StreamDeduplicator(tmp_path / "link.wal")
    StreamDeduplicator(wal).close()


def _wal_with_records(path) -> list:
    d = StreamDeduplicator(path, wal_buffer_hashes=4)
    docs = [f"doc{i}" for i in range(10)]
    for a, b in ((0, 4), (4, 8), (8, 10)):
        d(docs[a:b])
        d.sync()
    d.close()
    return docs


def _open_lsn(path, data: bytes):
    path.write_bytes(data)
    for extra in (str(path) + ".snap",):
        if os.path.exists(extra):
            os.remove(extra)
    try:
        with StreamDeduplicator(path) as d:
            return d.lsn
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


def test_wal_last_record_torn_or_flipped_is_cut_earlier_damage_refused(tmp_path):
    src = tmp_path / "src.wal"
    _wal_with_records(src)
    raw = src.read_bytes()
    last = len(raw) - (24 + 2 * 16)
    t = tmp_path / "t.wal"
    for cut in range(last, len(raw)):  # the last record cut at every byte: its two hashes go
        assert _open_lsn(t, raw[:cut]) == 8, cut
    assert _open_lsn(t, raw) == 10
    for i in range(64, last):  # a flipped bit before the last record: refused, never a silent cut
        b = bytearray(raw)
        b[i] ^= 0x01
        assert _open_lsn(t, bytes(b)) in ("CorruptError",), i
    for i in range(0, 64, 7):  # in the header
        b = bytearray(raw)
        b[i] ^= 0x01
        assert _open_lsn(t, bytes(b)) in ("CorruptError", "FormatVersionError", "ValueError"), i
    assert _open_lsn(t, raw + raw) == "CorruptError"  # another log appended: a valid record after garbage
    assert _open_lsn(t, raw + b"\0" * 100) == 10


def test_sigkill_while_writing_recovers_exactly_a_prefix_covering_every_sync(tmp_path):
    rng = random.Random(34)
    batches = [[f"k{b}-{i}" for i in range(rng.randint(1, 40))] for b in range(400)]
    order = [d for b in batches for d in b]
    for it in range(24):
        wal = tmp_path / f"k{it}.wal"
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            os.close(r)
            d = StreamDeduplicator(wal, wal_buffer_hashes=rng.choice([1, 3, 64]), num_threads=1)
            for j, b in enumerate(batches):
                d(b + b[:2])  # a few duplicates in the batch
                if j % 3 == 0:
                    os.write(w, f"{d.sync()}\n".encode())
                if j % 50 == 49:
                    d.snapshot()
            os._exit(0)
        os.close(w)
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        got = b""
        while select.select([r], [], [], 0)[0]:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            got += chunk
        os.close(r)
        durable = max([int(x) for x in got.split()] or [0])
        with StreamDeduplicator(wal) as d:
            n = d.lsn
            assert durable <= n <= len(order), (it, durable, n)
            assert all(x in d for x in order[:n]), it
            assert not any(x in d for x in order[n:n + 50]), it
            # and it goes on from there: the next documents are new, the old ones duplicates
            res = d(order[max(0, n - 3):n + 3]).reasons.tolist()
            assert res == [1] * min(3, n) + [0] * len(order[n:n + 3]), (it, res)


# ------------------------------------------------------------ stage APIs

@pytest.mark.parametrize("value", [2**31, 2**40])
def test_num_threads_past_the_binding_is_a_value_error_naming_it(value):
    for make in (lambda: TextCleaner(num_threads=value), lambda: FusedPipeline(num_threads=value)):
        with pytest.raises(ValueError, match="num_threads"):  # was accepted; every call then a pybind TypeError
            make()
    c = TextCleaner()
    with pytest.raises(ValueError, match="num_threads"):
        c.num_threads = value
    assert TextCleaner(num_threads=2**31 - 1)(["a  b"]).texts.tolist() == ["a b"]  # capped by the core


def test_one_stage_object_from_several_threads_equals_serial():
    words = "the of and to in a is that for it as was with be by on not he this are or his".split()
    rng = random.Random(5)
    batches = [[" ".join(rng.choice(words) for _ in range(rng.randint(1, 80))) + f" x{i % 17}@ex.com"
                for i in range(30)] for _ in range(8)]
    for make in (lambda: TextCleaner(num_threads=2), lambda: QualityFilter(num_threads=2),
                 lambda: PIIMasker(num_threads=2)):
        serial = [make()(b).texts.tolist() for b in batches]
        obj, out, errs = make(), [None] * len(batches), []

        def work(k, obj=obj, out=out, errs=errs):
            try:
                for j in range(k, len(batches), 4):
                    out[j] = obj(batches[j]).texts.tolist()
            except Exception as e:  # noqa: BLE001
                errs.append(e)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        assert not errs and out == serial
    d = StreamDeduplicator(num_threads=2)
    kept, errs = [], []

    def dedup(k):
        try:
            for j in range(k, len(batches), 4):
                kept.extend(d(batches[j]).texts.tolist())
        except Exception as e:  # noqa: BLE001
            errs.append(e)

    ts = [threading.Thread(target=dedup, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    allu = {x for b in batches for x in b}
    assert not errs and len(kept) == len(allu) and set(kept) == allu and d.lsn == len(allu)


def test_wal_dedup_inspect_after_fork_refusal_is_untouched(tmp_path):
    """The parent's log after a refused child is whole: inspect sees every record the parent synced."""
    wal = tmp_path / "x.wal"
    d = StreamDeduplicator(wal)
    d(["p1", "p2"])
    d.sync()
    status, out = fork_child(lambda: d.check_insert_hashes(__import__("torch").zeros(1, 2, dtype=__import__("torch").int64)))
    assert status != 0 and "fork" in out, out
    d(["p3"])
    d.sync()
    d.close()
    info = _C.dedup_wal_inspect(str(wal))
    assert info["status"] == "LM_OK" and info["lsn_end"] == 3 and info["valid_bytes"] == info["file_bytes"]
