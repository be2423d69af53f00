"""Streaming near-dedup benchmark (issue 12 part 4, acceptance 5): NearDeduplicator docs/s
on one core over the shared corpus, beside its peers measured in the same run (the MinHash
signatures alone, the exact StreamDeduplicator), and the band index's bytes per document.

    python bench/bench_near_dedup.py [--limit N] [--batch 4096] [--wal]

Rows: each stage over the whole corpus (or --limit documents) in batches, one thread,
best of --passes rounds (default 5; the stages alternate inside each round, every
round starts from a fresh, empty index).  "ratio" is docs/s
relative to MinHash signatures alone (the stage's floor).  Memory: table_bytes of the
band index (the lm_dedup slot array) divided by the documents streamed, and by the
documents kept; WAL bytes on disk with --wal.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import luminamoon  # noqa: E402
from luminamoon import StringTensor  # noqa: E402
from luminamoon.stages import REASON_NEAR_DUPLICATE, NearDeduplicator, StreamDeduplicator  # noqa: E402

from common import load_corpus, print_table  # noqa: E402


def run_interleaved(makers, batches, passes=5):
    """Best wall time of each stage over `passes` rounds; the stages alternate inside each round so that
    the machine's load hits them alike.  Returns ({name: seconds}, {name: (stage, results) of the last round})."""
    best, last = {}, {}
    for _ in range(passes):
        for name, make in makers.items():
            stage = make()
            t0 = time.perf_counter()
            res = [stage(b) for b in batches]
            dt = time.perf_counter() - t0
            best[name] = min(best.get(name, float("inf")), dt)
            old = last.get(name)
            if old is not None and hasattr(old[0], "close"):
                old[0].close()
            last[name] = (stage, res)
    return best, last


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--wal", action="store_true", help="the near index with a WAL in a temporary folder")
    ap.add_argument("--passes", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(1)
    texts = load_corpus(a.limit)
    n = len(texts)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    batches = [StringTensor.from_list(texts[i:i + a.batch]) for i in range(0, n, a.batch)]
    mh = luminamoon.MinHash(num_threads=1)
    tmp = tempfile.mkdtemp(prefix="bench-near-")
    k = [0]

    def near():
        k[0] += 1
        return NearDeduplicator(wal_path=os.path.join(tmp, f"n{k[0]}.wal") if a.wal else None, num_threads=1)

    best, last = run_interleaved({"sig": lambda: (lambda b: mh.signatures(b)), "near": near,
                                  "exact": lambda: StreamDeduplicator(num_threads=1)}, batches, a.passes)
    t_sig, t_near, t_exact = best["sig"], best["near"], best["exact"]
    nd, res = last["near"]
    ex = last["exact"][0]
    dropped = sum(int((r.reasons == REASON_NEAR_DUPLICATE).sum()) for r in res)
    st = nd.stats
    rows = []
    for name, t in (("MinHash.signatures (floor)", t_sig), ("NearDeduplicator (stream stage)", t_near),
                    ("StreamDeduplicator (exact)", t_exact)):
        rows.append([name, f"{n / t:,.0f}", f"{mb / t:.1f}", f"{t_sig / t:.2f}"])
    print_table(f"Streaming near dedup, 1 thread, {n:,} documents ({mb:.1f} MB), batches of {a.batch}",
                ["stage", "docs/s", "MB/s", "ratio vs signatures"], rows)
    kept = n - dropped
    mem = [["band keys held (distinct)", f"{st['entries']:,}"],
           ["keys per document (bands)", st["keys_per_document"]],
           ["near duplicates dropped", f"{dropped:,} ({100 * dropped / n:.1f}%)"],
           ["index table_bytes", f"{st['table_bytes']:,}"],
           ["bytes per streamed document", f"{st['table_bytes'] / n:.1f}"],
           ["bytes per kept document", f"{st['table_bytes'] / max(kept, 1):.1f}"],
           ["bytes per distinct key (slot 16 B / load)", f"{st['bytes_per_entry']:.1f}"],
           ["exact dedup table_bytes per document", f"{ex.stats['table_bytes'] / n:.1f}"]]
    if a.wal:
        nd.sync()
        mem.append(["WAL bytes per streamed document", f"{os.path.getsize(nd.path) / n:.1f}"])
    print_table("Band index memory (issue target <= 128 B per document)", ["measure", "value"], mem)
    nd.close()
    ex.close()


if __name__ == "__main__":
    main()
