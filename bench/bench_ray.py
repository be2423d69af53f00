"""Ray engine throughput: ``luminamoon run --engine ray`` on a local Ray cluster with 1 and 2 CPUs
against the single-process run (``--engine local``, the same threads), in one benchmark run.

The shared corpus (68,330 documents, 47 MB) is split into ``--files`` JSONL files (the Ray
engine's unit of work is an input file).  Each configuration runs ``--repeat`` times; the
best wall time counts (this machine is shared and noisy: read the ratios, measured in the
same run, not the absolute figures).  Also printed: the shuffle's bytes per input document
(exact-dedup records and near-dedup band-key records, 24 B each, plus the decisions sent
back), and that each Ray run's parts equal the local run's byte for byte.

    python bench/bench_ray.py [--files 8] [--repeat 2] [--no-quality] [--near-dup stream|off]
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "..", "shared", "corpus", "debian-dev.jsonl.gz")


def _split(path: str, out_dir: str, files: int, limit: int) -> int:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = f.readlines()
    if limit:
        lines = lines[:limit]
    per = -(-len(lines) // files)
    for k in range(files):
        with open(os.path.join(out_dir, f"shard-{k:03d}.jsonl"), "w", encoding="utf-8") as f:
            f.writelines(lines[k * per:(k + 1) * per])
    return len(lines)


def _digest(d: str) -> str:
    h = hashlib.sha256()
    for p in sorted(f for f in os.listdir(d) if f.startswith("part-")):
        with open(os.path.join(d, p), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--limit", type=int, default=0, help="first N documents only (0: all)")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-quality", action="store_true", help="switch the quality filter off (more documents "
                    "reach the dedup shuffle)")
    ap.add_argument("--near-dup", choices=["stream", "off"], default="stream")
    args = ap.parse_args()
    if not os.path.exists(args.corpus):
        print(f"bench_ray: corpus not found: {args.corpus}", file=sys.stderr)
        return 2
    import ray

    import luminamoon.ray as lr
    from luminamoon.cli.config import default_config
    from luminamoon.cli.runner import run_corpus

    cfg = default_config()
    cfg["near_dup"]["mode"] = args.near_dup
    cfg["quality"]["enabled"] = not args.no_quality
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        src = os.path.join(tmp, "in")
        os.makedirs(src)
        n = _split(args.corpus, src, args.files, args.limit)
        rows = []

        def timed(label: str, cpus: int, engine: str):
            best, digest, info = None, None, {}
            for r in range(args.repeat):
                out = os.path.join(tmp, f"out-{label}-{r}")
                c = dict(cfg, run=dict(cfg["run"], threads=cpus))
                t0 = time.perf_counter()
                run_corpus([src], out, c, quiet=True, report=False, engine=engine)
                dt = time.perf_counter() - t0
                if best is None or dt < best:
                    best = dt
                    info = lr.shuffle_stats() if engine == "ray" else {}
                digest = _digest(out)
            rows.append((label, cpus, best, digest, info))

        timed("single process (--engine local)", 2, "local")
        for cpus in (1, 2):
            ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level="warning")
            try:
                timed(f"ray, {cpus} CPU{'s' if cpus > 1 else ''}", cpus, "ray")
            finally:
                ray.shutdown()
    base = rows[0][2]
    print(f"bench_ray: {n:,} documents of the shared corpus in {args.files} files; stages: cleaner, "
          f"{'quality, ' if not args.no_quality else ''}exact dedup{', near dedup (stream)' if args.near_dup == 'stream' else ''}, PII; "
          f"best of {args.repeat}; {os.cpu_count()} cores on this machine")
    print(f"{'run':<34} {'wall s':>8} {'docs/s':>9} {'x local':>8} {'shuffle B/doc':>14} {'parts':>18}")
    for label, cpus, t, digest, info in rows:
        sb = info.get("shuffle_bytes_per_doc")
        print(f"{label:<34} {t:8.2f} {n / t:9,.0f} {base / t:8.2f} {('-' if sb is None else f'{sb:.1f}'):>14} "
              f"{digest + (' =' if digest == rows[0][3] else ' DIFFERENT'):>18}")
    info = rows[-1][4]
    if info:
        print(f"shuffle (ray, 2 CPUs): exact {info['shuffle_bytes_exact']:,} B, near {info['shuffle_bytes_near']:,} B "
              f"over {info['documents']:,} input documents; stage A (read + cleaner + quality + hashes) "
              f"{info['stage_a_seconds']:.2f} s of {info['seconds']:.2f} s")
    return 0 if all(r[3] == rows[0][3] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
