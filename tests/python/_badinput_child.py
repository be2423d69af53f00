"""Child process of test_bad_input_matrix.py: the bad-input cases that could kill an
interpreter (huge inputs) or need file-system tricks (a full file system, a read-only
folder).  It prints one line ``RESULT <json>`` on stdout; the parent asserts on it and
counts a death by signal as a crash.

    python _badinput_child.py full tmpfs WORK    WORK/<scenario>/ are small tmpfs mounts (made by the
                                                 parent's ``unshare -rm`` shell): "full" = a filler file
                                                 takes all but a little of the space; "space again" =
                                                 the filler is deleted
    python _badinput_child.py full rlimit WORK   RLIMIT_FSIZE (SIGXFSZ ignored, set up by the parent's
                                                 preexec_fn): "full" = the soft limit is lowered to just
                                                 above the files' sizes; "space again" = raised back
    python _badinput_child.py readonly RO WORK   RO: a read-only folder (read-only bind mount, or chmod
                                                 0555 when not root) holding files made before
    python _badinput_child.py huge WORK          a 64 MB document, a 10^6-element list, sizes that overflow

Every observation is a dict: for an exception ``{"error": {"type", "is", "errno",
"filename", "msg"}}``, plus what was found afterwards (recovered state, files left).
"""
import contextlib
import io
import json
import os
import resource
import sys
import traceback

import torch

from luminamoon import (FusedPipeline, PIIMasker, QualityFilter, StateTracker, StreamDeduplicator, StringTensor,
                        TextCleaner, hash128)
from luminamoon import ops
from luminamoon.cli import main as cli_main
from luminamoon.data import (DistributedPipeline, GlobalDedup, JsonlSource, ResumableCollate, ResumablePipeline,
                             write_jsonl)

STAGES = {"quality": False}  # the synthetic corpus is short lines: keep every document that is not a duplicate
_KINDS = (("OSError", OSError), ("ValueError", ValueError), ("TypeError", TypeError), ("IndexError", IndexError),
          ("MemoryError", MemoryError), ("RuntimeError", RuntimeError))


def err(e: BaseException) -> dict:
    return {"type": type(e).__name__, "is": [n for n, k in _KINDS if isinstance(e, k)],
            "errno": getattr(e, "errno", None), "filename": str(getattr(e, "filename", None) or "") or None,
            "msg": str(e)[:2000]}


def attempt(fn) -> dict:
    """{"ok": repr(result)} or {"error": err(e)}."""
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - every exception is an observation
        return {"error": err(e)}
    return {"ok": repr(r)[:300]}


def listing(d: str) -> list:
    out = []
    for root, _dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, f), d) for f in files]
    return sorted(f for f in out if not f.endswith(".filler"))


def cli(argv) -> dict:
    """The luminamoon command in this process: exit status, stderr, and an uncaught exception if any."""
    buf = io.StringIO()
    out = {}
    with contextlib.redirect_stderr(buf), contextlib.redirect_stdout(io.StringIO()):
        try:
            out["rc"] = cli_main([str(a) for a in argv])
        except SystemExit as e:
            out["rc"] = e.code
        except BaseException as e:  # noqa: BLE001 - a traceback is what the test refuses
            out["rc"] = None
            out["uncaught"] = err(e)
            out["traceback"] = traceback.format_exc()[-3000:]
    out["stderr"] = buf.getvalue()[-3000:]
    return out


# --------------------------------------------------------------- "the disk is full"

class Tmpfs:
    """Each scenario folder is its own small tmpfs: a filler file takes the space."""

    name = "tmpfs"

    def fill(self, d: str, slack: int, rlimit_bytes=None) -> None:
        path = os.path.join(d, ".filler")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            chunk = b"\0" * 65536
            while True:
                try:
                    if os.write(fd, chunk) == 0:
                        break
                except OSError:
                    break
            size = os.fstat(fd).st_size
            os.ftruncate(fd, max(0, size - slack))
        finally:
            os.close(fd)

    def empty(self, d: str) -> None:
        os.remove(os.path.join(d, ".filler"))


class Rlimit:
    """RLIMIT_FSIZE: no file may grow past the soft limit (EFBIG; SIGXFSZ is ignored)."""

    name = "rlimit"

    def __init__(self):
        self.soft, self.hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    def fill(self, d: str, slack: int, rlimit_bytes=None) -> None:
        if rlimit_bytes is None:
            biggest = max([os.path.getsize(os.path.join(d, f)) for f in listing(d)] or [0])
            rlimit_bytes = biggest + slack
        resource.setrlimit(resource.RLIMIT_FSIZE, (rlimit_bytes, self.hard))

    def empty(self, d: str) -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (self.soft, self.hard))


def full_dedup_wal(d: str, fs) -> dict:
    """Admit and sync batches into a WAL until the disk is full; reopen with space again."""
    wal = os.path.join(d, "d.wal")
    docs = [f"document number {i} of the WAL scenario" for i in range(30000)]
    dd = StreamDeduplicator(wal_path=wal)
    dd(docs[:200])
    durable = dd.sync()
    fs.fill(d, slack=32 << 10)
    res = {"wal": wal, "failure": None}
    i = 200
    while i < len(docs):
        try:
            dd(docs[i:i + 100])
            i += 100
            durable = dd.sync()
        except Exception as e:  # noqa: BLE001
            res["failure"] = err(e)
            i += 100
            break
    res["after_failure"] = attempt(lambda: dd(["a document after the failure"]))
    res["close"] = attempt(dd.close)
    fs.empty(d)
    d2 = StreamDeduplicator(wal_path=wal)
    rec = d2.lsn
    member = [x in d2 for x in docs[:i]]
    res.update(durable=durable, admitted=i, recovered=rec, prefix_member=all(member[:rec]),
               none_after=not any(member[rec:]))
    # the recovered log takes new documents again
    res["new_ok"] = d2(["a brand new document"]).kept.tolist() == [True] and d2.sync() == rec + 1
    d2.close()
    return res


def full_dedup_snapshot(d: str, fs) -> dict:
    """A snapshot that does not fit leaves the log and its state intact."""
    wal = os.path.join(d, "s.wal")
    docs = [f"snapshot scenario document {i}" for i in range(3000)]
    dd = StreamDeduplicator(wal_path=wal)
    dd(docs)
    durable = dd.sync()
    fs.fill(d, slack=0, rlimit_bytes=4096)
    res = {"wal": wal, "snapshot": attempt(dd.snapshot), "close": attempt(dd.close)}
    fs.empty(d)
    d2 = StreamDeduplicator(wal_path=wal)
    res.update(durable=durable, recovered=d2.lsn, all_member=all(x in d2 for x in docs), files=listing(d))
    d2.close()
    return res


def full_state(d: str, fs) -> dict:
    st = StateTracker(os.path.join(d, "state"))
    st.commit(epoch=1, batch_index=1, wal_lsn=10)
    fs.fill(d, slack=0, rlimit_bytes=64)
    new_path = os.path.join(d, "new_state")
    res = {"new_path": new_path, "create": attempt(lambda: StateTracker(new_path)),
           "commit2": attempt(lambda: st.commit(epoch=1, batch_index=2, wal_lsn=20))}
    st.close()
    fs.empty(d)
    with StateTracker(os.path.join(d, "state")) as st2:
        coord, _seq = st2.load()
    res["loaded_batch_index"] = coord["batch_index"]
    res["loaded_wal_lsn"] = coord["wal_lsn"]
    return res


def _batch_view(b) -> list:
    return [b.index, b.texts.tolist(), b.reasons.tolist()]


def _run_to_failure(make, d: str, fs, fill_after: int, slack: int) -> dict:
    """Iterate and commit after every batch; the disk fills after batch ``fill_after``.
    Returns the batches received, the last successful commit, the error; then, with
    space again, what a new pipeline on the same state folder resumes from and delivers."""
    res = {"failure": None, "last_ok": None}
    pipe = make()
    it = iter(pipe)
    while True:
        try:
            b = next(it)
        except StopIteration:
            break
        except Exception as e:  # noqa: BLE001
            res["failure"] = err(e)
            res["failed_in"] = "iteration"
            break
        try:
            pipe.commit(extra={"batch": b.index})
            res["last_ok"] = b.index
        except Exception as e:  # noqa: BLE001
            res["failure"] = err(e)
            res["failed_in"] = "commit"
            break
        if b.index == fill_after:
            fs.fill(d, slack=slack)
    res["close"] = attempt(pipe.close)
    fs.empty(d)
    pipe2 = make()
    res["resume_extra"] = pipe2.resume_extra
    res["resumed_from"] = getattr(pipe2, "resumed_from", None)
    res["rest"] = [_batch_view(b) for b in pipe2]
    pipe2.close()
    return res


def _reference(make) -> list:
    pipe = make()
    out = [_batch_view(b) for b in pipe]
    pipe.close()
    return out


def full_resumable(d: str, fs, src: str, ref_dir: str) -> dict:
    def make(state_dir):
        return lambda: ResumablePipeline(JsonlSource(src), batch_size=25, prefetch_batches=2, stages=STAGES,
                                         state_dir=state_dir)
    ref = _reference(make(os.path.join(ref_dir, "rp")))
    res = _run_to_failure(make(os.path.join(d, "rp")), d, fs, fill_after=1, slack=8 << 10)
    res["reference"] = ref
    res["state_dir"] = os.path.join(d, "rp")
    return res


def full_distributed(d: str, fs, src: str, ref_dir: str) -> dict:
    def make(state_dir):
        return lambda: DistributedPipeline(JsonlSource(src), batch_size=25, prefetch_batches=2, stages=STAGES,
                                           state_dir=state_dir)
    ref = _reference(make(os.path.join(ref_dir, "dp")))
    res = _run_to_failure(make(os.path.join(d, "dp")), d, fs, fill_after=1, slack=8 << 10)
    res["reference"] = ref
    res["state_dir"] = os.path.join(d, "dp")
    return res


def _commit_on_full_disk(make, d: str, state_dir: str, fs) -> dict:
    """Commit batch 0, then, with the disk full, commit the same batch again: the WAL has
    nothing new to write, so the commit sidecar is the write that fails."""
    pipe = make()
    it = iter(pipe)
    b = next(it)
    pipe.commit(extra={"batch": b.index})
    fs.fill(d, slack=0, rlimit_bytes=64)
    res = {"state_dir": state_dir, "commit": attempt(lambda: pipe.commit(extra={"batch": b.index, "again": True}))}
    res["close"] = attempt(pipe.close)
    fs.empty(d)
    res["files"] = listing(state_dir)
    pipe2 = make()
    res["resume_extra"] = pipe2.resume_extra
    pipe2.close()
    return res


def full_commit_sidecar(d: str, fs, src: str) -> dict:
    rp, dp = os.path.join(d, "rp"), os.path.join(d, "dp")
    return {
        "resumable": _commit_on_full_disk(
            lambda: ResumablePipeline(JsonlSource(src), batch_size=25, prefetch_batches=0, stages=STAGES,
                                      state_dir=rp), d, rp, fs),
        "distributed": _commit_on_full_disk(
            lambda: DistributedPipeline(JsonlSource(src), batch_size=25, prefetch_batches=0, stages=STAGES,
                                        state_dir=dp), d, dp, fs),
    }


def full_write_jsonl(d: str, fs) -> dict:
    target = os.path.join(d, "out.jsonl")
    write_jsonl(target, [{"text": "the old content"}])
    with open(target, "rb") as f:
        old = f.read()
    fs.fill(d, slack=4096, rlimit_bytes=4096)
    res = {"target": target,
           "write": attempt(lambda: write_jsonl(target, ({"text": "new record %d " % i + "x" * 100}
                                                         for i in range(2000))))}
    fs.empty(d)
    with open(target, "rb") as f:
        res["unchanged"] = f.read() == old
    res["files"] = listing(d)
    return res


def _cli_output(out: str) -> dict:
    parts = sorted(f for f in os.listdir(out) if f.startswith("part-"))
    data = {}
    for p in parts:
        with open(os.path.join(out, p), "rb") as f:
            data[p] = f.read().decode("utf-8")
    with open(os.path.join(out, "stats.json")) as f:
        stats = json.load(f)
    return {"parts": data, "documents": stats["documents"], "dropped_by_reason": stats["dropped_by_reason"]}


def full_cli(d: str, fs, src: str, ref_dir: str) -> dict:
    opts = ["--format", "jsonl", "--part-docs", "100", "--batch-size", "50", "--no-quality", "-q", "--no-report",
            "-j", "1"]
    ref_out = os.path.join(ref_dir, "cli")
    ref = cli(["run", src, "-o", ref_out, *opts])
    out = os.path.join(d, "out")
    fs.fill(d, slack=48 << 10, rlimit_bytes=16 << 10)
    first = cli(["run", src, "-o", out, *opts])
    fs.empty(d)
    committed_parts = sorted(f for f in os.listdir(out) if f.startswith("part-")) if os.path.isdir(out) else []
    resumed = cli(["run", src, "-o", out, *opts, "--resume"])
    res = {"out": out, "reference_rc": ref, "first": first, "parts_after_failure": committed_parts,
           "resumed": resumed}
    if ref.get("rc") == 0:
        res["reference"] = _cli_output(ref_out)
    if resumed.get("rc") == 0:
        res["result"] = _cli_output(out)
    return res


def run_full(mech: str, work: str) -> dict:
    fs = Tmpfs() if mech == "tmpfs" else Rlimit()
    src = os.path.join(work, "src", "corpus.jsonl")
    ref = os.path.join(work, "ref")
    os.makedirs(ref, exist_ok=True)
    sub = lambda name: os.path.join(work, name)  # noqa: E731
    out = {}
    for name, fn in (("dedup_wal", lambda: full_dedup_wal(sub("dedup_wal"), fs)),
                     ("dedup_snapshot", lambda: full_dedup_snapshot(sub("dedup_snapshot"), fs)),
                     ("state", lambda: full_state(sub("state"), fs)),
                     ("resumable", lambda: full_resumable(sub("resumable"), fs, src, ref)),
                     ("distributed", lambda: full_distributed(sub("distributed"), fs, src, ref)),
                     ("commit_sidecar", lambda: full_commit_sidecar(sub("commit_sidecar"), fs, src)),
                     ("write_jsonl", lambda: full_write_jsonl(sub("write_jsonl"), fs)),
                     ("cli", lambda: full_cli(sub("cli"), fs, src, ref))):
        try:
            out[name] = fn()
        except Exception as e:  # noqa: BLE001 - a scenario that breaks is reported, the others still run
            out[name] = {"scenario_error": err(e), "traceback": traceback.format_exc()[-3000:]}
        finally:  # space again, whatever happened
            if isinstance(fs, Rlimit) or os.path.exists(os.path.join(sub(name), ".filler")):
                fs.empty(sub(name))
    return out


# ------------------------------------------------------------- read-only folder

def run_readonly(ro: str, work: str) -> dict:
    src = os.path.join(work, "src", "corpus.jsonl")
    docs = ["read-only scenario document %d" % i for i in range(50)]
    j = lambda *p: os.path.join(ro, *p)  # noqa: E731
    out = {
        "dedup_new": attempt(lambda: StreamDeduplicator(wal_path=j("new.wal"))),
        "dedup_existing": attempt(lambda: StreamDeduplicator(wal_path=j("existing.wal"))),
        "state_new": attempt(lambda: StateTracker(j("new.state"))),
        "state_existing": attempt(lambda: StateTracker(j("existing.state"))),
        "write_jsonl": attempt(lambda: write_jsonl(j("new.jsonl"), [{"text": "x"}])),
        "resumable_existing": attempt(lambda: ResumablePipeline(docs, state_dir=j("rp"), stages=STAGES)),
        "resumable_new": attempt(lambda: ResumablePipeline(docs, state_dir=j("rp_new"), stages=STAGES)),
        "distributed_existing": attempt(lambda: DistributedPipeline(docs, state_dir=j("dp"), stages=STAGES)),
        "distributed_new": attempt(lambda: DistributedPipeline(docs, state_dir=j("dp_new"), stages=STAGES)),
        "global_dedup": attempt(lambda: GlobalDedup(wal_path=j("global.wal"))),
        "cli": cli(["run", src, "-o", j("cli_out"), "-q", "--no-report"]),
        "cli_resume": cli(["run", src, "-o", j("out"), "-q", "--no-report", "--resume", "--batch-size", "500",
                           "--part-docs", "200"]),
        "gzip_index": attempt(lambda: sum(1 for _ in JsonlSource(j("corpus.jsonl.gz"), index_dir=j("idx"),
                                                                 gzip_index=True))),
    }
    out["ro"] = ro
    return out


# ------------------------------------------------------------------ huge input

def run_huge(work: str) -> dict:
    sentence = "The package of the system and the archive that have a mirror with a kernel. "
    big = sentence * ((64 << 20) // len(sentence) + 1)
    out = {}
    st = StringTensor.from_list([big, "small one"])
    out["from_list_64mb"] = {"ok": st.nbytes == len(big) + 9}
    out["hash64_64mb"] = attempt(lambda: st.hash64().tolist())
    out["starts_with_64mb"] = attempt(lambda: st.starts_with(sentence * 100).tolist())
    out["pad_bytes_64mb"] = attempt(lambda: tuple(st.pad_bytes(16)[0].shape))
    out["cleaner_64mb"] = attempt(lambda: TextCleaner()(st).reasons.tolist())
    # (the Gopher repetition rules on one 64 MB line take ~1.5 GB: the matrix keeps to the lighter stages)
    out["fused_64mb"] = attempt(lambda: FusedPipeline(quality=False, num_threads=2)(st).reasons.tolist())
    out["quality_64mb_c4"] = attempt(lambda: QualityFilter(rules=["c4"])(st).reasons.numel())
    out["quality_64mb_limited"] = attempt(lambda: QualityFilter(max_doc_bytes=1 << 20)(st).reasons.tolist()[0])
    out["pii_find_64mb"] = attempt(lambda: len(PIIMasker().find(big + " mail ann@example.org")))
    out["hash128_64mb"] = attempt(lambda: tuple(hash128(st).shape))
    with StreamDeduplicator() as d:
        out["dedup_64mb"] = attempt(lambda: d(StringTensor.from_list([big, big])).kept.tolist())
    path = os.path.join(work, "big.jsonl")
    write_jsonl(path, [{"text": big}, {"text": "after"}])
    out["jsonl_64mb_record"] = attempt(lambda: [len(r["text"]) for r in JsonlSource(path)])
    out["jsonl_64mb_record_limited"] = attempt(lambda: list(JsonlSource(path, max_record_bytes=1 << 20)))
    st = big = None  # free the 64 MB before the next part
    many = ["s%d" % i for i in range(1_000_000)]
    st = StringTensor.from_list(many)
    out["from_list_1e6"] = {"ok": len(st) == 1_000_000 and st[999_999] == "s999999"}
    out["hash64_1e6"] = attempt(lambda: int(torch.unique(st.hash64()).numel()))
    out["take_1e6_out_of_range"] = attempt(lambda: st.take(torch.arange(1_000_001)))
    out["dedup_1e6"] = attempt(lambda: int(StreamDeduplicator()(st).kept.sum()))
    out["collate_1e6"] = attempt(lambda: len(ResumableCollate(pipeline=None, return_string_tensor=True)(many)))
    out["from_list_1e6_one_bad"] = attempt(lambda: StringTensor.from_list(many[:-1] + [None]))
    st = many = None
    small = StringTensor.from_list(["alpha", "beta"])
    lib = torch.ops.luminamoon
    out["raw_pad_bytes_overflow"] = attempt(lambda: lib.pad_bytes(small.offsets, small.data, 1 << 62))
    out["raw_attention_mask_overflow"] = attempt(lambda: lib.attention_mask(torch.tensor([1]), 1 << 62))
    out["ops_pad_bytes_overflow"] = attempt(lambda: ops.pad_bytes(small.offsets, small.data, 1 << 62))
    out["dedup_initial_capacity_overflow"] = attempt(lambda: StreamDeduplicator(initial_capacity=1 << 62))
    return out


def main() -> None:
    mode = sys.argv[1]
    if mode == "full":
        res = run_full(sys.argv[2], sys.argv[3])
    elif mode == "readonly":
        res = run_readonly(sys.argv[2], sys.argv[3])
    elif mode == "huge":
        res = run_huge(sys.argv[2])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    sys.stdout.write("RESULT " + json.dumps(res) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
