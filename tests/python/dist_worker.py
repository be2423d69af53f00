"""Rank process of the distributed tests (started with torch.multiprocessing, spawn).

``run(rank, world, init_file, spec)`` joins a gloo group through a file store and
runs ``spec["jobs"]`` in order.  Each job writes what this rank received as JSON
lines, one per batch: {"step", "end" (sample_index after the step), "gidx"
(global indices of the input records), "kept": [[gidx, id, text], ...]}.

Jobs:
  {"kind": "pool", ...}   world sizes 1..world and dedup modes in one set of
                          processes, each over a subgroup of ranks 0..W-1
  (both take "near": "global" / "local" / None for DistributedPipeline(near_dedup=...))
  {"kind": "phase", ...}  one run of an elastic / crash scenario: resume from
                          state_dir, commit at the given steps, optionally die
                          (SIGKILL) after a step, or with a fault injected in commit
  {"kind": "disagree", ...}   ranks given different inputs / settings ("per_rank"
                          overrides): each writes the error of its constructor
  {"kind": "bad_record", ...} one rank meets a bad record: each writes what its
                          iteration raised and what its commit() did
"""
import json
import os
import signal
import sys
from datetime import timedelta


def _lines(pipe, out_path, commit_at=(), die_after=None, meta_path=None):
    import torch  # noqa: F401

    with open(out_path, "a") as f:
        if meta_path:
            with open(meta_path, "w") as m:
                json.dump({"resumed_from": pipe.resumed_from, "world_size": pipe.world_size,
                           "resume_extra": pipe.resume_extra}, m)
        for b in pipe:
            ids = [r.get("id") for r in b.records]
            gi = b.global_index.tolist()
            kept = [[gi[i], ids[i], t] for i, t in zip(b.source_index.tolist(), b.texts.tolist())]
            f.write(json.dumps({"step": b.index, "end": b.coord["sample_index"], "gidx": gi, "kept": kept,
                                "reasons": b.reasons.tolist()}) + "\n")
            f.flush()
            if b.index + 1 in commit_at:
                pipe.commit(extra={"rank": pipe.rank, "step": b.index + 1})
            if die_after is not None and b.index + 1 == die_after:
                os.kill(os.getpid(), signal.SIGKILL)
        pipe.commit(extra={"rank": pipe.rank, "done": True})


def run(rank, world, init_file, spec):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    for k, v in spec.get("env", {}).get(str(rank), {}).items():
        os.environ[k] = v
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    from luminamoon.data import DistributedPipeline, JsonlSource

    try:
        for job in spec["jobs"]:
            if job["kind"] == "pool":
                for W in job["world_sizes"]:
                    for mode in job["modes"]:
                        group = None if W == world else dist.new_group(ranks=list(range(W)))
                        if rank < W:
                            tag = f"W{W}-{mode}{job.get('tag', '')}"
                            sd = os.path.join(job["dir"], f"state-{tag}")
                            with DistributedPipeline(JsonlSource(job["corpus"]), batch_size=job["batch_size"],
                                                     dedup=None if mode == "none" else mode, state_dir=sd,
                                                     group=group, prefetch_batches=job.get("prefetch", 2),
                                                     stages=job.get("stages"), near_dedup=job.get("near"),
                                                     num_threads=1) as pipe:
                                assert pipe.world_size == W and pipe.rank == rank
                                _lines(pipe, os.path.join(job["dir"], f"out-{tag}-rank{rank}.jsonl"))
                                st = pipe.exchange_stats
                            with open(os.path.join(job["dir"], f"stats-{tag}-rank{rank}.json"), "w") as f:
                                json.dump(st, f)
                        dist.barrier()
            elif job["kind"] == "mismatch":  # ranks 0 and 1 commit after different steps
                group = dist.new_group(ranks=[0, 1])
                if rank < 2:
                    sd = os.path.join(job["dir"], "state-mismatch")
                    with DistributedPipeline(JsonlSource(job["corpus"]), batch_size=8, dedup="local", state_dir=sd,
                                             group=group, prefetch_batches=0) as pipe:
                        it = iter(pipe)
                        next(it)
                        pipe.commit()  # step 1 on both: fine
                        next(it)
                        if rank == 1:
                            next(it)
                        try:
                            pipe.commit()
                            msg = None
                        except RuntimeError as e:
                            msg = str(e)
                        with open(os.path.join(job["dir"], f"mismatch-rank{rank}.json"), "w") as f:
                            json.dump({"error": msg, "commit_id": pipe._commit_id}, f)
                dist.barrier()
            elif job["kind"] == "disagree":  # per-rank source / batch_size: every rank must refuse at start
                mine = {**job, **job.get("per_rank", {}).get(str(rank), {})}
                try:
                    with DistributedPipeline(JsonlSource(mine["corpus"]), batch_size=mine["batch_size"],
                                             dedup="global", state_dir=os.path.join(job["dir"], "state-" + job["name"]),
                                             prefetch_batches=0, stages=mine.get("stages")):
                        msg = None
                except ValueError as e:
                    msg = str(e)
                with open(os.path.join(job["dir"], f"disagree-{job['name']}-rank{rank}.json"), "w") as f:
                    json.dump({"error": msg}, f)
                dist.barrier()
            elif job["kind"] == "bad_record":  # one rank meets a bad record; each catches it and commits
                out = {"batches": 0}
                with DistributedPipeline(JsonlSource(job["corpus"]), batch_size=job["batch_size"],
                                         dedup=job.get("dedup", "global"), state_dir=job["state_dir"],
                                         prefetch_batches=job.get("prefetch", 2), stages=job.get("stages"),
                                         num_threads=1) as pipe:
                    try:
                        for _ in pipe:
                            out["batches"] += 1
                    except Exception as e:
                        out["error"] = [type(e).__name__, str(e)]
                    try:
                        out["commit"] = pipe.commit()
                    except Exception as e:
                        out["commit_error"] = [type(e).__name__, str(e)]
                with open(os.path.join(job["dir"], f"bad-record-rank{rank}.json"), "w") as f:
                    json.dump(out, f)
                dist.barrier()
            elif job["kind"] == "phase":
                with DistributedPipeline(JsonlSource(job["corpus"]), batch_size=job["batch_size"],
                                         dedup=job.get("dedup", "global"), state_dir=job["state_dir"],
                                         prefetch_batches=job.get("prefetch", 3), num_threads=1,
                                         stages=job.get("stages"), near_dedup=job.get("near"),
                                         timeout=timedelta(seconds=30)) as pipe:
                    _lines(pipe, os.path.join(job["dir"], f"out-{job['name']}-rank{rank}.jsonl"),
                           commit_at=set(job.get("commit_at", ())), die_after=job.get("die_after"),
                           meta_path=os.path.join(job["dir"], f"meta-{job['name']}-rank{rank}.json"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _threads_settled(target: int, deadline_s: float = 5.0) -> int:
    """This process's thread count, once it is back at ``target`` or ``deadline_s`` has passed.
    A thread that pthread_join() has already waited for can still be listed in /proc/self/task
    for a moment: the kernel wakes the joiner (clear_child_tid) before it releases the task.
    On a loaded machine that moment was long enough to count it (CI, Dec 2: 2 against 1).
    A thread that really outlives its owner (gloo's, kept until finalization before issue 17's
    fix) is still there after the deadline."""
    import time

    end = time.monotonic() + deadline_s
    n = _threads()
    while n > target and time.monotonic() < end:
        time.sleep(0.01)
        n = _threads()
    return n


def _exit_rank(rank, world, d, run_no, corpus):
    """One rank of the issue-17 scenario: a gloo group through a file store, global dedup,
    a commit every 3 steps, then commit(), close(), destroy_process_group() and a normal
    interpreter exit.  Records this process's thread count before the group and after
    destroy_process_group(): gloo's threads must be gone by then (a pipeline that kept a
    reference to the group kept them until the interpreter's finalization, where destroying
    them aborted one run in three with "terminate called without an active exception")."""
    import torch
    import torch.distributed as dist
    from luminamoon.data import DistributedPipeline, JsonlSource

    torch.set_num_threads(1)
    before = _threads()
    dist.init_process_group("gloo", init_method=f"file://{d}/store-{run_no}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=60))
    pipe = DistributedPipeline(JsonlSource(corpus), batch_size=200, dedup="global", num_threads=1,
                               state_dir=os.path.join(d, f"state-{run_no}"), stages={"quality": False})
    kept = 0
    for b in pipe:
        kept += len(b.texts)
        if (b.index + 1) % 3 == 0:
            pipe.commit()
    pipe.commit()
    pipe.close()
    dist.destroy_process_group()
    with open(os.path.join(d, f"exit-{run_no}-rank{rank}.json"), "w") as f:
        json.dump({"threads_before": before, "threads_after": _threads_settled(before), "kept": kept}, f)


def exit_runs(runs, world, d, corpus):
    """``runs`` times: fork ``world`` ranks from this process (torch and luminamoon imported
    once, so a run costs no interpreter start) that run ``_exit_rank`` and then leave through
    the normal interpreter exit (not os._exit, as multiprocessing children do), where the
    abort happened; writes every run's exit codes (negative: killed by that signal)."""
    import torch  # noqa: F401  (imported before fork: the children share it)
    import luminamoon.data  # noqa: F401

    codes = []
    for run_no in range(runs):
        pids = []
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                _exit_rank(rank, world, d, run_no, corpus)
                sys.exit(0)  # SystemExit unwinds to the top: a full interpreter finalization
            pids.append(pid)
        got = []
        for pid in pids:
            _, status = os.waitpid(pid, 0)
            got.append(os.waitstatus_to_exitcode(status))
        codes.append(got)
        with open(os.path.join(d, "exit-codes.json"), "w") as f:
            json.dump(codes, f)


if __name__ == "__main__":
    if sys.argv[1] == "exit-runs":  # python dist_worker.py exit-runs RUNS WORLD DIR CORPUS
        exit_runs(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:  # manual use: python dist_worker.py RANK WORLD INIT_FILE SPEC_JSON
        run(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], json.loads(open(sys.argv[4]).read()))
