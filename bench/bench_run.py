"""`luminamoon run` end to end against FusedPipeline alone, in one run (issue 14 acceptance 1/4).

Rows (docs/s over the shared corpus, same thread count, same stages as the run's default
configuration, exact dedup on):

* FusedPipeline: the stages over the corpus already in memory as StringTensors (the bound);
* luminamoon run: run_corpus end to end (read gzip JSONL, stages, write Parquet, commits);
* ResumablePipeline: JsonlSource -> ResumablePipeline, the batches consumed (columnar path);
* ResumablePipeline, record by record: the same through the per-record (json.loads) path.
* luminamoon run, fresh process: the command as a user runs it (``python -m luminamoon run ... -q
  --no-report``, a new process every round), timed by its own stats.json (``throughput.seconds``:
  from the run's statistics being set up to the last batch counted -- without the interpreter's
  start and imports, ~2 s, and without the last part's write); the first run of a process pays
  what a warm process does not (fresh heap pages, lazy imports, cold caches).
* FusedPipeline, fresh process: its peer under the same conditions -- a new process every round
  (this script with ``--fused-once``) loads the corpus into StringTensors untimed, freezes the
  garbage collector as the command does, and times one pass of a new FusedPipeline over the
  batches: the first pass of a process pays the same first-run costs (new heap pages, the n-gram
  sets of the corpus's 2 MB documents grown from nothing).  The fresh run's "x" columns are
  against this row (its round's time for the paired ratio), every other row's against the first.

Each row is the best of ``--rounds`` rounds, the rows interleaved within a round (the
machine is shared: compare the ratios, not the absolute figures).  A round of the run and
ResumablePipeline rows writes into a new folder: deleting the previous round's output (or
state) is done before the clock starts -- it is not the run's work, and on a file system
mounted with ``discard`` (this project's machine) each unlink waits for the device (~30 ms
for a run's output folder).  "CPU s" is the process's
CPU time (all threads) in the round with the best wall time: on a loaded machine it says
what each row costs when the wall times do not (the run adds reading -- gzip inflate, JSONL
scan -- and writing to the stages' CPU).  "others CPU s" is the CPU other processes took
during that round (/proc/stat's busy time of the machine minus this process's; 0 where there
is no /proc/stat): above ~0.1 s the round shared the cores and its wall time is not the
row's own.  "paired x (min / median / max)": each round's FusedPipeline time over the
row's time in the same round -- the rows of a round run seconds apart, so a drift of the
machine's speed between rounds (this project's VM moves +-40% from one minute to the next)
cancels in the pair; the spread says how far one round's ratio can be trusted.  gzip is inflated by ISA-L when the ``isal``
package is installed (``LM_NO_ISAL=1``: the standard library's zlib).

    python bench/bench_run.py [--threads 2] [--rounds 2] [--batch-size 2048]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402,F401

from common import CORPUS, load_corpus, print_table  # noqa: E402
from luminamoon import StringTensor, stages  # noqa: E402
from luminamoon.cli.config import default_config, stage_kwargs  # noqa: E402
from luminamoon.data import ResumablePipeline  # noqa: E402
from luminamoon.data.sources import JsonlSource  # noqa: E402
from luminamoon.cli.runner import run_corpus  # noqa: E402


class RecordByRecord(JsonlSource):
    """JsonlSource read record by record (json.loads per line): the path before issue 14."""

    def _records(self):
        return super()._records()


def _f(x: float) -> str:
    return "-" if x != x else f"{x:.2f}"


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat, all CPUs), 0.0 without it."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return 0.0
    if len(v) < 8:
        return 0.0
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf("SC_CLK_TCK")


def setup(T: int, B: int):
    """The corpus's texts, the same as StringTensor batches of B, and the run's default configuration
    at T threads and batch size B: the inputs of every row."""
    texts = load_corpus()
    batches = [StringTensor.from_list(texts[i:i + B]) for i in range(0, len(texts), B)]
    cfg = default_config()
    cfg["run"]["threads"] = T
    cfg["run"]["batch_size"] = B
    return texts, batches, cfg


def fused_once(T: int, B: int) -> None:
    """FusedPipeline's first pass in this (fresh) process: the corpus loaded and the pipeline made
    untimed, the garbage collector frozen as `luminamoon run`'s entry point does; prints
    {"seconds": ...}.  The texts' str objects are freed before the clock starts: their ~50 MB of
    heap pages are then there for the pass to reuse, which a fresh `luminamoon run` does not have
    (so this row errs on the fast side, against the run's ratio)."""
    import gc
    from luminamoon import _C
    _C.tune_malloc()
    texts, batches, cfg = setup(T, B)
    pipe = stages.FusedPipeline(dedup=True, num_threads=T, **stage_kwargs(cfg))
    del texts
    gc.collect()
    gc.freeze()
    t0 = time.perf_counter()
    for st in batches:
        pipe(st)
    print(json.dumps({"seconds": time.perf_counter() - t0}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=2048)
    ap.add_argument("--fused-once", action="store_true",
                    help="(the fresh-process FusedPipeline row) one timed pass in this process, printed as JSON")
    args = ap.parse_args()
    if args.fused_once:
        fused_once(args.threads, args.batch_size)
        return
    # the process as `luminamoon run` sets it up (glibc malloc tuned; LM_NO_MALLOC_TUNE=1 leaves it
    # alone): every row, FusedPipeline's too, runs under the same allocator settings
    from luminamoon import _C
    print(f"malloc tuned as by `luminamoon run`: {_C.tune_malloc()}")
    T, B = args.threads, args.batch_size
    texts, batches, cfg = setup(T, B)
    n = len(texts)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    kw = stage_kwargs(cfg)
    tmp = tempfile.mkdtemp(prefix="bench-run-")

    def fused():
        pipe = stages.FusedPipeline(dedup=True, num_threads=T, **kw)
        for st in batches:
            pipe(st)

    folder = [0]

    def fresh(name: str) -> str:
        """A new, absent folder for the next timed call; the ones before it deleted now (untimed)."""
        for f in os.listdir(tmp):
            shutil.rmtree(os.path.join(tmp, f), ignore_errors=True)
        folder[0] += 1
        return os.path.join(tmp, f"{name}-{folder[0]}")

    def run(out):
        stats = run_corpus([str(CORPUS)], out, cfg, quiet=True, report=False)
        assert stats["documents"]["input"] == n

    def resumable(cls):
        def go(state):
            with ResumablePipeline(cls(str(CORPUS)), batch_size=B, state_dir=state, num_threads=T,
                                   stages=kw) as pipe:
                got = sum(b.n_in for b in pipe)
            assert got == n
        return go

    def fused_fresh():
        cmd = [sys.executable, os.path.abspath(__file__), "--fused-once", "--threads", str(T), "--batch-size", str(B)]
        r = subprocess.run(cmd, check=True, timeout=600, capture_output=True, text=True)
        return json.loads(r.stdout.strip().splitlines()[-1])["seconds"]

    def fresh_process(out):
        cmd = [sys.executable, "-m", "luminamoon", "run", str(CORPUS), "-o", out, "-j", str(T), "--batch-size",
               str(B), "-q", "--no-report"]
        subprocess.run(cmd, check=True, timeout=600)
        with open(os.path.join(out, "stats.json")) as f:
            st = json.load(f)
        assert st["documents"]["input"] == n
        return st["throughput"]["seconds"]  # the row's time: the run's own, not the process'

    rows = {"FusedPipeline (texts in memory)": fused, "luminamoon run (end to end)": run,
            "FusedPipeline (fresh process, first pass)": fused_fresh,
            "luminamoon run (fresh process, its stats.json)": fresh_process,
            "ResumablePipeline (JsonlSource, columnar)": resumable(JsonlSource),
            "ResumablePipeline (record by record)": resumable(RecordByRecord)}
    best = {k: float("inf") for k in rows}
    cpu = {k: 0.0 for k in rows}
    others = {k: 0.0 for k in rows}
    times = {k: [] for k in rows}  # every round's wall time, for the paired ratios
    writes = {"luminamoon run (end to end)": "out", "luminamoon run (fresh process, its stats.json)": "out",
              "ResumablePipeline (JsonlSource, columnar)": "state",
              "ResumablePipeline (record by record)": "state"}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            arg = ()
            if name in writes:
                arg = (fresh(writes[name]),)
                os.sync()  # the deletes' journal written out before the clock starts
            m0, c0, t0 = machine_busy(), time.process_time(), time.perf_counter()
            own = fn(*arg)
            t, c = time.perf_counter() - t0, time.process_time() - c0
            o = max(0.0, machine_busy() - m0 - c) if m0 else 0.0
            if own is not None:  # a row timed by the run itself (another process: its CPU is not ours)
                t, c, o = own, float("nan"), float("nan")
            times[name].append(t)
            if t < best[name]:
                best[name], cpu[name], others[name] = t, c, o
    shutil.rmtree(tmp, ignore_errors=True)
    # each row's peer: FusedPipeline in this process, or, for the fresh command, FusedPipeline's
    # first pass in a fresh process
    peer = {k: "FusedPipeline (texts in memory)" for k in rows}
    peer["luminamoon run (fresh process, its stats.json)"] = "FusedPipeline (fresh process, first pass)"

    def paired(name: str) -> str:
        r = sorted(f / t for f, t in zip(times[peer[name]], times[name]))
        return f"{r[0]:.2f} / {statistics.median(r):.2f} / {r[-1]:.2f}"

    table = [[name, f"{n / t:,.0f}", f"{mb / t:.1f}", f"{best[peer[name]] / t:.2f}", paired(name), _f(cpu[name]),
              _f(others[name])] for name, t in best.items()]
    print_table(f"luminamoon run vs FusedPipeline, {n:,} docs ({mb:.0f} MB), {T} threads, batch {B}, "
                f"{args.rounds} rounds",
                ["what", "docs/s", "MB/s", "x FusedPipeline (fresh run: x fresh pass)", "paired x (min / median / max)", "CPU s",
                 "others CPU s"], table)


if __name__ == "__main__":
    main()
