#!/usr/bin/env python3
"""What does resuming a source cost at the start, the middle and the end?

For each format, a corpus of --records JSONL records (about 500 bytes each) is
written, the positions after records 0, N/2 and N-1 are taken from one full
pass, and then the time to build a fresh source from that position and obtain
its first record is measured (median of --repeat runs).  "O(1)" means the three
columns are about equal.

    python bench/bench_source_resume.py [--records 200000] [--repeat 5]
"""
import argparse
import gzip
import itertools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

try:
    from luminamoon.data import sources as S
except ImportError:  # extension not built: load the stand-alone module
    import importlib.util

    _p = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "luminamoon", "data", "sources.py")
    _spec = importlib.util.spec_from_file_location("lm_sources", _p)
    S = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = S
    _spec.loader.exec_module(S)


def records(n, seed=0):
    rng = random.Random(seed)
    vocab = [("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))) for _ in range(5000)]
    for i in range(n):
        yield {"id": i, "text": " ".join(rng.choice(vocab) for _ in range(80))}


def positions_at(make, indices):
    """Positions after consuming exactly k records, for each k in indices."""
    want = sorted(set(indices))
    out = {}
    src = make()
    it = iter(src)
    done = 0
    for k in want:
        for _ in itertools.islice(it, k - done):
            pass
        done = k
        out[k] = json.loads(json.dumps(src.position()))
    return out


def time_resume(make, pos, repeat):
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        src = make(position=pos)
        next(iter(src))
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    n = args.records
    d = args.dir or tempfile.mkdtemp(prefix="lm_bench_resume_")
    os.makedirs(d, exist_ok=True)
    idx_dir = os.path.join(d, "gzindex")
    recs = list(records(n))
    payload = "".join(json.dumps(r) + "\n" for r in recs).encode()
    print(f"corpus: {n} records, {len(payload) / 1e6:.1f} MB uncompressed, in {d}")

    t = time.perf_counter()
    with open(os.path.join(d, "c.jsonl"), "wb") as f:
        f.write(payload)
    S.write_jsonl(os.path.join(d, "multi.jsonl.gz"), recs, frame_bytes=1 << 20)
    S.write_jsonl(os.path.join(d, "multi.jsonl.zst"), recs, frame_bytes=1 << 20)
    with gzip.open(os.path.join(d, "single.jsonl.gz"), "wb", compresslevel=6) as f:
        f.write(payload)
    import zstandard

    with open(os.path.join(d, "single.jsonl.zst"), "wb") as f:
        f.write(zstandard.ZstdCompressor(level=3).compress(payload))
    with open(os.path.join(d, "c.txt"), "wb") as f:
        f.write("".join(r["text"] + "\n" for r in recs).encode())
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"id": [r["id"] for r in recs], "text": [r["text"] for r in recs]}),
                       os.path.join(d, "c.parquet"), row_group_size=10_000)
        have_pq = True
    except ImportError:
        have_pq = False
    print(f"wrote the files in {time.perf_counter() - t:.1f} s\n")

    def J(name, **kw):
        return lambda **k2: S.JsonlSource(os.path.join(d, name), index_dir=idx_dir, **kw, **k2)

    cases = [
        ("jsonl plain (byte offset)", J("c.jsonl")),
        ("text plain (byte offset)", lambda **k: S.TextSource(os.path.join(d, "c.txt"), **k)),
        ("gzip 1 MiB members (member + skip)", J("multi.jsonl.gz", gzip_index=False)),
        ("gzip single member, no index (O(pos))", J("single.jsonl.gz", gzip_index=False)),
        ("gzip single member, indexed_gzip warm", J("single.jsonl.gz", gzip_index=True)),
        ("zstd 1 MiB frames (frame + skip)", J("multi.jsonl.zst")),
        ("zstd single frame (O(pos))", J("single.jsonl.zst")),
    ]
    if have_pq:
        cases.append(("parquet 10k-row groups", lambda **k: S.ParquetSource(os.path.join(d, "c.parquet"), **k)))
    try:
        import indexed_gzip  # noqa: F401
    except ImportError:
        cases = [c for c in cases if "indexed_gzip" not in c[0]]

    ks = [0, n // 2, n - 1]
    print(f"{'format':42s} {'start ms':>9s} {'middle ms':>10s} {'end ms':>9s}")
    for name, make in cases:
        if "indexed_gzip" in name:
            shutil.rmtree(idx_dir, ignore_errors=True)
            # the first open builds and caches the index (one decompression pass)
            cold = time_resume(make, positions_at(make, [0])[0], 1)
        pos = positions_at(make, ks)
        row = [time_resume(make, pos[k], args.repeat) * 1e3 for k in ks]
        print(f"{name:42s} {row[0]:9.2f} {row[1]:10.2f} {row[2]:9.2f}")
        if "indexed_gzip" in name:
            print(f"{'  (one-time index build, cold cache)':42s} {cold * 1e3:9.1f} ms")
    if args.dir is None:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
