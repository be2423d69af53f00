"""Global exact dedup across ranks: throughput per rank for 1-4 ranks (gloo on CPU,
one process per rank through torch.multiprocessing) and the bytes the owner exchange
moves per document.

Every rank reads the whole JSONL stream (skipping the other ranks' lines unparsed),
processes its own records, and exchanges their hashes with the owners each step.
Three workloads, each with global dedup: the default stages (clean + quality + PII;
the quality rules drop most of this corpus's short package blurbs, so few hashes
travel), quality off (most documents reach the exchange), and "dedup only" (every
text stage off: what is left is reading, hashing and the exchange, i.e. the cost
of going distributed).  Baseline: one process, a
ResumablePipeline over the same file (fused, or dedup only).

    python bench/bench_distributed.py [--docs 20000] [--batch-size 512] [--ranks 1,2,3,4]

Figures are wall times on this machine: with more ranks than cores, ranks share cores,
and docs/s per rank falls for that reason alone (the table prints the core count).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import load_corpus, print_table  # noqa: E402

WORKLOADS = {"clean + quality + PII": None, "clean + PII (quality off)": {"quality": False},
             "dedup only": {"cleaner": False, "quality": False, "pii": False}}


def _rank(rank, world, store, corpus, batch_size, stages, out, repeat, prefetch):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    from luminamoon.data import DistributedPipeline, JsonlSource

    best = None
    for rep in range(repeat):  # the best of `repeat` runs: this machine is shared
        with tempfile.TemporaryDirectory() as junk:
            sd = os.path.join(os.path.dirname(out), f"state-{world}-{time.time_ns()}") if world > 1 else junk
            sd = _bcast(sd, world)
            with DistributedPipeline(JsonlSource(corpus), batch_size=batch_size, stages=stages, state_dir=sd,
                                     num_threads=1, prefetch_batches=prefetch) as pipe:
                dist.barrier()
                t0 = time.perf_counter()
                n_in = kept = 0
                for b in pipe:
                    n_in += b.n_in
                    kept += len(b.texts)
                wall = time.perf_counter() - t0
                pipe.commit()
                stats = pipe.exchange_stats
        walls = [None] * world
        dist.all_gather_object(walls, wall)
        if best is None or max(walls) < best[0]:
            best = (max(walls), {"rank": rank, "n_in": n_in, "kept": kept, "wall": wall, **stats})
    with open(out, "w") as f:
        json.dump(best[1], f)
    dist.barrier()
    dist.destroy_process_group()


def _bcast(obj, world):
    import torch.distributed as dist

    lst = [obj]
    dist.broadcast_object_list(lst, src=0)
    return lst[0]


def run_world(world, corpus, batch_size, stages, tmp, repeat, prefetch):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    store = os.path.join(tmp, f"store-{time.time_ns()}")
    outs = [os.path.join(tmp, f"r{world}-{r}-{time.time_ns()}.json") for r in range(world)]
    procs = [ctx.Process(target=_rank, args=(r, world, store, corpus, batch_size, stages, outs[r], repeat,
                                                            prefetch))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        raise SystemExit(f"a rank failed: exit codes {[p.exitcode for p in procs]}")
    return [json.load(open(o)) for o in outs]


def baseline(corpus, batch_size, stages, repeat):
    import torch

    from luminamoon.data import JsonlSource, ResumablePipeline

    torch.set_num_threads(1)
    best = None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as d, ResumablePipeline(
                JsonlSource(corpus), stages=stages or {}, batch_size=batch_size, state_dir=d, num_threads=1) as p:
            t0 = time.perf_counter()
            n = kept = 0
            for b in p:
                n += b.n_in
                kept += len(b.texts)
            t = time.perf_counter() - t0
        if best is None or t < best[2]:
            best = (n, kept, t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--batch-size", type=int, default=512)
    ap.add_argument("--ranks", default="1,2,3,4")
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs per configuration")
    ap.add_argument("--prefetch", type=int, default=2, help="prefetch_batches of each rank")
    args = ap.parse_args()
    ranks = [int(x) for x in args.ranks.split(",")]
    texts = load_corpus(args.docs)
    from luminamoon.data import write_jsonl

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        write_jsonl(corpus, ({"id": i, "text": t} for i, t in enumerate(texts)))
        mb = os.path.getsize(corpus) / 1e6
        for name, stages in WORKLOADS.items():
            n, kept_ref, t = baseline(corpus, args.batch_size, stages, args.repeat)
            rows = [["1 process, ResumablePipeline", f"{n / t:,.0f}", f"{n / t:,.0f}", "-", "-", "-", kept_ref]]
            for W in ranks:
                res = run_world(W, corpus, args.batch_size, stages, tmp, args.repeat, args.prefetch)
                wall = max(r["wall"] for r in res)
                n_all = sum(r["n_in"] for r in res)
                kept = sum(r["kept"] for r in res)
                assert n_all == n and kept == kept_ref, (n_all, n, kept, kept_ref)  # exact: same as one process
                sent = sum(r["bytes_sent"] for r in res)
                steps = res[0]["steps"]
                xs = max(r["seconds"] for r in res)
                per_rank = sum(r["n_in"] / r["wall"] for r in res) / W
                rows.append([f"{W} rank{'s' if W > 1 else ''}, global dedup", f"{per_rank:,.0f}", f"{n_all / wall:,.0f}",
                             f"{sent / n_all:.1f}", f"{xs / max(steps, 1) * 1e3:.2f}", f"{xs / wall:.0%}", kept])
            print_table(f"Global dedup, workload '{name}': {n:,} docs ({mb:.1f} MB JSONL), {args.batch_size} docs "
                        f"per rank per step, prefetch {args.prefetch}, {os.cpu_count()} cores, one thread per rank, "
                        f"best of {args.repeat}",
                        ["run", "docs/s per rank", "docs/s all ranks", "bytes sent/doc", "exchange ms/step",
                         "exchange share", "kept"], rows)
    print("\nbytes sent/doc: bytes each rank sends to other ranks (24 B request + 1 B answer per document "
          "owned elsewhere, 8 B counts per peer per step), summed over ranks, per input document.")
    print("exchange ms/step, share: wall time in the owner exchange (collectives, waiting for the slowest "
          "rank, admissions), the slowest rank's.")


if __name__ == "__main__":
    main()
