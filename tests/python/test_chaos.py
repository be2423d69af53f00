"""Chaos tests of the scale-out path (issue 17 part 2): random SIGKILLs, then resume.

* DistributedPipeline: rounds of runs over one state folder, each run with a random world
  size 1..4, killed at a random moment (one rank or all ranks, after a random step, inside
  a commit, or at a random time) until a run ends; the committed steps of all runs must
  deliver every document exactly once with the same texts as one process
  (tests/python/chaos_child.py runs the rounds; test_distributed's helpers check them).
* ``luminamoon run``: rounds of 1..3 kills -9 at random times, then ``--resume`` to the end;
  the part files must be byte-identical to an uninterrupted run's, with the same statistics.

LM_CHAOS_ROUNDS rounds each (default 3; 50 for the full stress run); LM_CHAOS_SEED reproduces
a run's random choices (kills at a random time also depend on timing).  The seed is printed
and named in every failure message.
"""
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

import chaos_child
import test_cli
import test_distributed
from forkserver import ForkServer
from luminamoon.cli.demo_corpus import generate

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "chaos_child.py")
ROUNDS = int(os.environ.get("LM_CHAOS_ROUNDS", "3"))


def _seed():
    seed = os.environ.get("LM_CHAOS_SEED") or str(random.SystemRandom().randrange(1 << 32))
    print(f"chaos: LM_CHAOS_SEED={seed} LM_CHAOS_ROUNDS={ROUNDS}")
    return seed


def test_distributed_random_kills_and_world_sizes_exactly_once(tmp_path):
    seed = _seed()
    d = str(tmp_path)
    corpus = os.path.join(d, "corpus.jsonl")
    docs = test_distributed.make_corpus(corpus, n=400, dups=80)
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, CHILD, d, corpus, str(len(docs)), seed, str(ROUNDS)],
                       capture_output=True, text=True, timeout=300 * ROUNDS)
    assert r.returncode == 0, f"seed {seed}: {r.stderr[-3000:]}"
    ref = test_distributed.single_process(corpus)
    kinds, worlds, checked, graced, n_runs = {}, set(), 0, 0, 0
    for i in range(ROUNDS):
        rd = os.path.join(d, f"round-{i}")
        with open(os.path.join(rd, "runs.json")) as f:
            runs = json.load(f)
        where = f"LM_CHAOS_SEED={seed} round {i}: {json.dumps(runs)}"
        assert runs[-1]["completed"], f"the last run did not end normally; {where}"
        for x in runs:
            k = "no kill" if x["completed"] else x["kind"]  # a kill planned after the run's end: none
            kinds[k] = kinds.get(k, 0) + 1
            worlds.add(x["world"])
            graced += len(x["graced"])
        n_runs += len(runs)
        # the runs that got as far as iterating (rank 0 wrote its meta) in order
        names = [x["name"] for x in runs if os.path.exists(os.path.join(rd, f"meta-{x['name']}-rank0.json"))]
        kept, inputs, _ = test_distributed._committed(rd, names)
        assert sorted(inputs) == list(range(len(docs))), f"records not processed exactly once; {where}"
        assert kept == ref, f"kept documents differ from one process; {where}"
        checked += len(inputs)
    print(f"chaos distributed: {ROUNDS} rounds, {n_runs} runs by kill (commit: inside a commit; step-one/all: "
          f"after a step; time-one/all: at a random time) {kinds}, world sizes {sorted(worlds)}, {graced} "
          f"surviving ranks killed {chaos_child.GRACE:.0f} s after a peer died, {checked} documents checked, "
          f"{time.monotonic() - t0:.1f} s")


CLI_ARGS = [*test_cli.RESUME_ARGS, "--batch-size", "32", "--part-docs", "25"]  # later options win: more commits


def _n_parts(out):  # counted, not read: a resumed run removes the parts written after the last commit
    return len(glob.glob(os.path.join(out, "part-*")))


def _kill_moment(rng, p, out, full):
    """Wait for a random moment of the run p: a random time since its start (often before
    it has begun reading), or a random number of new part files plus a random delay (while
    it writes and commits).  Returns a description, or None when p ended first."""
    state = os.path.join(out, ".luminamoon")
    if rng.random() < 0.3:
        at = full * rng.uniform(0.0, 1.0)
        try:
            p.wait(timeout=at)
        except subprocess.TimeoutExpired:
            return f"at {at:.2f} s"
        return None
    have = _n_parts(out)
    need = have + rng.randrange(0, 4)
    test_cli._wait_for(lambda: p.poll() is not None or os.path.isdir(state) and
                       _n_parts(out) >= need, 120)
    delay = rng.uniform(0.0, 0.2)
    time.sleep(delay)
    return None if p.poll() is not None else f"{delay:.3f} s after part {need}"


def test_cli_random_kills_then_resume_equal_uninterrupted(tmp_path):
    """The runs are forks of a process that imported luminamoon and its CLI once (forkserver.py:
    each a real process, killed by a real SIGKILL), not new interpreters importing torch."""
    seed = _seed()
    rng = random.Random(seed)
    info = generate(str(tmp_path / "corpus"), size_mb=1.0, seed=42, shard_mb=0.25)
    cmd = ["-m", "luminamoon", "run", *info["paths"], "-q", *CLI_ARGS]
    ref = str(tmp_path / "ref")
    with ForkServer(preload=("luminamoon.data", "luminamoon.cli")) as forks:
        _cli_random_kills(tmp_path, seed, rng, forks, cmd, ref)


def _cli_random_kills(tmp_path, seed, rng, forks, cmd, ref):
    t0 = time.monotonic()
    r = forks.run(cmd + ["-o", ref], timeout=300)
    assert r.returncode == 0, r.stderr
    full = time.monotonic() - t0  # an uninterrupted run (forked: no interpreter start)
    want, want_stats = test_cli._part_bytes(ref), test_cli._comparable(test_cli._stats(ref))
    kills, parts_at_kill, ended_early = 0, [], 0
    for i in range(ROUNDS):
        out = str(tmp_path / f"out-{i}")
        log = []
        for k in range(rng.randint(1, 3)):
            p = forks.popen(cmd + ["-o", out] + (["--resume"] if k else []), stdout=False)
            try:
                when = _kill_moment(rng, p, out, full)
                if when is None:
                    ended_early += 1
                    log.append(f"ended rc {p.wait()} before its kill")
                else:
                    p.send_signal(signal.SIGKILL)
                    p.wait(timeout=30)
                    kills += 1
                    n = _n_parts(out)
                    parts_at_kill.append(n)
                    log.append(f"killed {when} with {n} parts")
            finally:
                if p.poll() is None:
                    p.kill()
                    p.wait()
                p.stderr.close()
        where = f"LM_CHAOS_SEED={seed} round {i}: {log}"
        r = forks.run(cmd + ["-o", out, "--resume"], timeout=300)
        assert r.returncode == 0, f"{where}: {r.stderr}"
        assert test_cli._part_bytes(out) == want, f"part files differ from an uninterrupted run; {where}"
        assert test_cli._comparable(test_cli._stats(out)) == want_stats, f"statistics differ; {where}"
        assert not [f for f in os.listdir(out) if f.startswith(".tmp")], where
    print(f"chaos CLI: {ROUNDS} rounds, {kills} kills (parts written at each kill: {parts_at_kill}), "
          f"{ended_early} runs ended before their kill, {len(want)} parts compared per round, "
          f"{time.monotonic() - t0:.1f} s")
