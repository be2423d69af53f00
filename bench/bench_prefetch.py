"""Does the prefetch thread overlap with the consumer?  The consumer's wait per
batch (time blocked in ``next()``) with prefetch on and off, for a consumer
slower than the producer (it sleeps to stand for a training step).

    python bench/bench_prefetch.py [--step-ms 20] [--batches 60]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import load_corpus, print_table  # noqa: E402

from luminamoon.data import IterableSource, ResumablePipeline  # noqa: E402


def measure(texts, prefetch, step_s, batches, batch_size):
    with tempfile.TemporaryDirectory() as d, ResumablePipeline(IterableSource(texts), batch_size=batch_size,
                                                               prefetch_batches=prefetch, state_dir=d) as p:
        it = iter(p)
        next(it)  # start-up is not steady state
        waits, produce = [], []
        for _ in range(batches):
            t0 = time.perf_counter()
            try:
                next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t0)
            time.sleep(step_s)  # the training step
        return sum(waits) / len(waits)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--step-ms", type=float, default=30.0)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--batch-size", type=int, default=256)
    args = ap.parse_args()
    texts = load_corpus(args.batch_size * (args.batches + 4))
    no = measure(texts, 0, args.step_ms / 1e3, args.batches, args.batch_size)
    yes = measure(texts, 4, args.step_ms / 1e3, args.batches, args.batch_size)
    print_table(f"Consumer wait per batch ({args.batch_size} docs/batch, a {args.step_ms:.0f} ms training step)",
                ["prefetch_batches", "wait per batch (ms)", "share of the step"],
                [["0 (in the consumer's thread)", f"{no * 1e3:.2f}", f"{no / (args.step_ms / 1e3):.0%}"],
                 ["4 (background thread)", f"{yes * 1e3:.2f}", f"{yes / (args.step_ms / 1e3):.0%}"]])


if __name__ == "__main__":
    main()
