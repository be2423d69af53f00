"""Coordinator of the distributed chaos rounds of tests/python/test_chaos.py.

``python chaos_child.py DIR CORPUS N_DOCS SEED ROUNDS`` runs ROUNDS rounds; round i works in
DIR/round-i (its own state folder) and writes DIR/round-i/runs.json.  A round is a series of
runs of dist_worker's "phase" job over one state folder: each run has a random world size
(1..4), commits every 1..4 steps and is SIGKILLed at a random moment -- one rank or all
ranks after a random step (outside commit), one rank inside its n-th commit (the
LUMINAMOON_DIST_FAULT points), or one rank / all ranks by this process after a random
time -- until a run ends normally (after at most 3 kills the run is left alone).
The pytest side checks exactly-once delivery of the committed steps with
test_distributed._committed.

The ranks are forked from this process (torch and luminamoon imported once, as in
dist_worker.exit_runs), so this process is their parent and can kill them at any time.
"""
import json
import math
import os
import random
import signal
import sys
import time
import traceback

import dist_worker

BATCH = 8
STAGES = {"quality": False}
POINTS = ("rank_sidecar", "global_sidecar", "slot")
GRACE = 5.0  # after a rank died: how long the others may take to fail before they are killed
RUN_TIMEOUT = 180.0


def _fork_rank(rank, world, store, spec):
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            dist_worker.run(rank, world, store, spec)
        except BaseException:  # a rank that fails after a peer died: expected in a killed run
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return pid


def _run_ranks(world, store, specs, kill_at=None, kill_ranks=()):
    """Fork the ranks, SIGKILL kill_ranks kill_at seconds after the start, and kill the
    survivors GRACE seconds after a rank ended badly.  Returns (exit codes, ranks the grace
    kill had to end, seconds)."""
    pids = [_fork_rank(r, world, store, specs[r]) for r in range(world)]
    t0 = time.monotonic()
    codes, graced, fail_t, fired = [None] * world, [], None, False
    while None in codes:
        now = time.monotonic() - t0
        for r, pid in enumerate(pids):
            if codes[r] is None:
                got, status = os.waitpid(pid, os.WNOHANG)
                if got:
                    codes[r] = os.waitstatus_to_exitcode(status)
                    if codes[r] != 0 and fail_t is None:
                        fail_t = now
        if kill_at is not None and not fired and now >= kill_at:
            fired = True
            for r in kill_ranks:
                if codes[r] is None:
                    os.kill(pids[r], signal.SIGKILL)
        if (fail_t is not None and now - fail_t > GRACE) or now > RUN_TIMEOUT:
            for r, pid in enumerate(pids):
                if codes[r] is None:
                    graced.append(r)
                    os.kill(pid, signal.SIGKILL)
                    codes[r] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.005)
    return codes, graced, time.monotonic() - t0


def one_round(d, corpus, n_docs, rng, est):
    """est: {world size: the longest run that ended normally}, shared by the rounds."""
    sd = os.path.join(d, "state")
    runs = []
    max_kills = rng.randint(1, 3)
    while True:
        j = len(runs)
        W = rng.randint(1, 4)
        every = rng.randint(1, 4)
        steps = math.ceil(n_docs / (BATCH * W))  # the whole input; a resumed run has fewer left
        job = {"kind": "phase", "dir": d, "corpus": corpus, "state_dir": sd, "batch_size": BATCH,
               "stages": STAGES, "name": f"run{j}", "commit_at": list(range(every, steps + 1, every))}
        specs = [{"jobs": [dict(job)]} for _ in range(W)]
        kind = "none" if j >= max_kills else rng.choice(["step-one", "step-all", "commit", "time-one", "time-all"])
        detail, kill_at, kill_ranks = {}, None, ()
        if kind in ("step-one", "step-all"):  # SIGKILL itself after a random step (outside commit)
            k = rng.randint(1, steps)
            ranks = [rng.randrange(W)] if kind == "step-one" else list(range(W))
            for r in ranks:
                specs[r]["jobs"][0]["die_after"] = k
            detail = {"after_step": k, "ranks": ranks}
        elif kind == "commit":  # SIGKILL inside the n-th commit at one of its points
            point = rng.choice(POINTS)
            r = rng.randrange(W) if point == "rank_sidecar" else 0  # the global sidecar and slot: rank 0
            n = rng.randint(1, max(1, len(job["commit_at"])))
            specs[r]["env"] = {str(r): {"LUMINAMOON_DIST_FAULT": f"{point}:{r}:{n}"}}
            detail = {"point": point, "rank": r, "commit": n}
        elif kind in ("time-one", "time-all"):  # SIGKILL from here at a random time
            kill_at = rng.uniform(0, est.get(W, 0.5 + 0.02 * steps))
            kill_ranks = [rng.randrange(W)] if kind == "time-one" else list(range(W))
            detail = {"at_s": round(kill_at, 3), "ranks": kill_ranks}
        store = os.path.join(d, f"store-{j}")
        codes, graced, wall = _run_ranks(W, store, specs, kill_at, kill_ranks)
        done = codes == [0] * W
        if done:
            est[W] = max(est.get(W, 0.0), wall)
        runs.append({"name": job["name"], "world": W, "kind": kind, "detail": detail, "codes": codes,
                     "graced": graced, "wall": round(wall, 3), "completed": done,
                     "commit_every": every})
        with open(os.path.join(d, "runs.json"), "w") as f:
            json.dump(runs, f)
        if done or kind == "none" or j >= 8:
            return runs


def main(d, corpus, n_docs, seed, rounds):
    import torch  # noqa: F401  (imported before the forks: the ranks share it)
    import luminamoon.data  # noqa: F401

    est = {}
    for i in range(rounds):
        rd = os.path.join(d, f"round-{i}")
        os.makedirs(rd)
        one_round(rd, corpus, n_docs, random.Random(f"{seed}-{i}"), est)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]))
