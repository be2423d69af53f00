"""Text stages vs HuggingFace datatrove, on the shared corpus, on ONE CPU core.

Measured in the same run, on the same documents for each ratio:
  * our FusedPipeline (clean -> quality -> dedup -> PII) vs datatrove's
    equivalent pipeline: GopherRepetition -> GopherQuality -> C4 -> FineWeb
    filters (C4 rewrites the text the later steps see), an exact dedup by hash
    (a Python set of xxh3-128 digests) and PIIFormatter — per document, as
    datatrove runs them;
  * each of our stages vs its datatrove counterpart (TextCleaner has none in
    datatrove: it is compared with a plain-Python re/str implementation);
  * the deduplicator's inserts+probes per second and bytes per distinct document.

datatrove is slow (milliseconds per document), so it runs on a deterministic
random sample (--dt-sample, default 2000 documents); our stages are timed on
that same sample for the ratios, and also on the whole input (--limit) for
their absolute throughput.  Targets: fused >= 50x datatrove docs/s per core;
dedup >= 20 M hashes/s per core at <= 32 bytes per distinct document.

Threads (--threads-only runs just this part; also printed after the one-core tables):
  * FusedPipeline on 2 threads vs 1 thread on the corpus (batches of --batch
    documents), 1- and 2-thread runs interleaved, every round printed (the
    machine is shared: report all rounds, not the best);
  * the heavy-then-tiny batch of issue 21 (512 documents of ~100 KB, then 512
    of ~100 B) on 2 vs 1 thread, same way;
  * retained memory: FusedPipeline.retained_bytes and the process RSS growth
    after one batch of 64 x 1 MB documents (and the same batch through
    QualityFilter as the peer).

  --fused-corpus-only prints only the corpus rows of that table (issue 14's
    method: FusedPipeline(dedup=False), PII datatrove, batches of 4096 built
    before timing) and their medians: docs/s and MB/s on 1 and 2 threads.

Usage: python bench/bench_stages.py [--limit N] [--dt-sample N] [--dedup-hashes N] [--threads-only]
                                    [--fused-corpus-only] [--rounds N] [--batch N]
"""
from __future__ import annotations

import argparse
import random
import re
import sys
import time
import warnings

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from common import load_corpus, print_table  # noqa: E402

import luminamoon as lm  # noqa: E402
from luminamoon import (FusedPipeline, PIIMasker, QualityFilter, StreamDeduplicator, StringTensor,  # noqa: E402
                        TextCleaner)


def timed(fn, repeat=3):
    best = float("inf")
    out = None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


# ------------------------------------------------------------------ datatrove side

def dt_filters():
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)

    return {"gopher_repetition": GopherRepetitionFilter(), "gopher_quality": GopherQualityFilter(),
            "c4": C4QualityFilter(), "fineweb": FineWebQualityFilter()}


def dt_keep(flt, doc) -> bool:
    try:
        r = flt.filter(doc)
    except Exception:  # datatrove divides by zero on a few degenerate documents
        return False
    return bool(r[0]) if isinstance(r, tuple) else bool(r)


def dt_pipeline(texts):
    import xxhash
    from datatrove.data import Document
    from datatrove.pipeline.formatters import PIIFormatter

    filters = list(dt_filters().values())
    pii = PIIFormatter()
    seen = set()
    out = []
    for i, t in enumerate(texts):
        doc = Document(text=t, id=str(i))
        if not all(dt_keep(f, doc) for f in filters):  # all() stops at the first drop
            continue
        h = xxhash.xxh3_128_intdigest(doc.text.encode("utf-8"))
        if h in seen:
            continue
        seen.add(h)
        out.append(pii.format(doc.text))
    return out


def dt_one_filter(name, texts):
    from datatrove.data import Document

    f = dt_filters()[name]
    return [dt_keep(f, Document(text=t, id=str(i))) for i, t in enumerate(texts)]


def dt_pii(texts):
    from datatrove.pipeline.formatters import PIIFormatter

    f = PIIFormatter()
    return [f.format(t) for t in texts]


def py_dedup(texts):
    import xxhash

    seen = set()
    keep = []
    for t in texts:
        h = xxhash.xxh3_128_intdigest(t.encode("utf-8"))
        keep.append(h not in seen)
        seen.add(h)
    return keep


_SPACES = re.compile(r"[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]")
_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def py_clean(texts):
    out = []
    for s in texts:
        s = s.replace("\r\n", "\n").replace("\r", "\n")
        s = _CTRL.sub("", s)
        s = _SPACES.sub(" ", s)
        s = re.sub(r" {2,}", " ", s)
        s = "\n".join(line.rstrip(" \t") for line in s.split("\n"))
        s = re.sub(r"\n{4,}", "\n\n\n", s)
        if s.strip():
            out.append(s)
    return out


# ------------------------------------------------------------------ threads

def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * __import__("os").sysconf("SC_PAGE_SIZE")


def threads_section(texts, rounds: int, batch: int, corpus_only: bool = False) -> None:
    def corpus_run(nt):
        pipe = FusedPipeline(dedup=False, pii=PIIMasker("datatrove"), num_threads=nt)
        t0 = time.perf_counter()
        for i in range(0, len(batches)):
            pipe(batches[i])
        return time.perf_counter() - t0

    batches = [StringTensor.from_list(texts[i:i + batch]) for i in range(0, len(texts), batch)]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    rows = []
    ratios = []
    for r in range(rounds):
        t1 = corpus_run(1)
        t2 = corpus_run(2)
        ratios.append(t1 / t2)
        rows.append([f"corpus, batches of {batch}", r + 1, f"{len(texts) / t1:,.0f}", f"{len(texts) / t2:,.0f}",
                     f"{mb / t1:.1f}", f"{mb / t2:.1f}", f"{t1 / t2:.2f}x"])
        print("  " + " | ".join(map(str, rows[-1])), flush=True)
    if corpus_only:  # issue 14's method: FusedPipeline(dedup=False), PII datatrove, prebuilt batches
        print_table("FusedPipeline(dedup=False), 2 threads vs 1, corpus (interleaved rounds)",
                    ["input", "round", "docs/s 1 thread", "docs/s 2 threads", "MB/s 1", "MB/s 2", "speed-up"], rows)

        def med(col):
            v = sorted(float(str(r[col]).replace(",", "")) for r in rows)
            return v[len(v) // 2]
        print(f"median of {rounds} rounds: 1 thread {med(2):,.0f} docs/s, {med(4):.1f} MB/s; 2 threads "
              f"{med(3):,.0f} docs/s, {med(5):.1f} MB/s; speed-up {sorted(ratios)[len(ratios) // 2]:.2f}x")
        return

    # issue 21: 512 heavy documents (~100 KB of corpus text each) then 512 tiny ones (~100 B)
    rng = random.Random(1)
    heavy = []
    for _ in range(512):
        parts, size = [], 0
        while size < 100_000:
            t = texts[rng.randrange(len(texts))]
            parts.append(t)
            size += len(t)
        heavy.append("\n\n".join(parts)[:100_000])
    tiny = [(texts[rng.randrange(len(texts))] + " " * 100)[:100] for _ in range(512)]
    ht = StringTensor.from_list(heavy + tiny)
    ht_mb = sum(len(t.encode()) for t in heavy + tiny) / 1e6
    ratios_ht = []
    for r in range(rounds):
        tt = []
        for nt in (1, 2):
            pipe = FusedPipeline(pii=PIIMasker("datatrove"), num_threads=nt)
            t0 = time.perf_counter()
            pipe(ht)
            tt.append(time.perf_counter() - t0)
        ratios_ht.append(tt[0] / tt[1])
        rows.append(["heavy-then-tiny (512 x 100 KB, 512 x 100 B)", r + 1, f"{1024 / tt[0]:,.0f}",
                     f"{1024 / tt[1]:,.0f}", f"{ht_mb / tt[0]:.1f}", f"{ht_mb / tt[1]:.1f}", f"{tt[0] / tt[1]:.2f}x"])
        print("  " + " | ".join(map(str, rows[-1])), flush=True)
    print_table("FusedPipeline, 2 threads vs 1 (interleaved rounds, this shared 2-core machine: noisy)",
                ["input", "round", "docs/s 1 thread", "docs/s 2 threads", "MB/s 1", "MB/s 2", "speed-up"], rows)
    print(f"speed-up, corpus: median {sorted(ratios)[len(ratios) // 2]:.2f}x, all {[round(x, 2) for x in ratios]}; "
          f"heavy-then-tiny: median {sorted(ratios_ht)[len(ratios_ht) // 2]:.2f}x, all "
          f"{[round(x, 2) for x in ratios_ht]}")

    # retained memory after one batch of 64 x 1 MB documents
    big = []
    for _ in range(64):
        parts, size = [], 0
        while size < 1 << 20:
            t = texts[rng.randrange(len(texts))]
            parts.append(t)
            size += len(t)
        big.append("\n\n".join(parts)[: 1 << 20])
    bt = StringTensor.from_list(big)
    mrows = []
    for name, make in (("FusedPipeline (2 threads)", lambda: FusedPipeline(pii=PIIMasker("datatrove"), num_threads=2)),
                       ("QualityFilter (2 threads), peer", lambda: QualityFilter(num_threads=2))):
        obj = make()
        obj(StringTensor.from_list(texts[:1000]))  # warm: a normal batch first
        rss0 = _rss()
        res = obj(bt)
        del res
        rss1 = _rss()
        kept = obj.retained_bytes if hasattr(obj, "retained_bytes") else None
        mrows.append([name, f"{(rss1 - rss0) / 1e6:+.1f}", "—" if kept is None else f"{kept / 1e6:.2f}"])
        del obj
    print_table("Memory kept after one batch of 64 x 1 MB documents (RSS growth of this process)",
                ["object", "RSS after - before (MB)", "retained_bytes (MB)"], mrows)


# ------------------------------------------------------------------ main

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="documents of the corpus to use (default: all)")
    ap.add_argument("--dt-sample", type=int, default=2000, help="documents datatrove runs on (default 2000)")
    ap.add_argument("--dedup-hashes", type=int, default=10_000_000, help="distinct hashes for the dedup table test")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads-only", action="store_true", help="only the 2-threads-vs-1 and memory tables")
    ap.add_argument("--fused-corpus-only", action="store_true",
                    help="only FusedPipeline(dedup=False) 1 vs 2 threads on the corpus (issue 14's method)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the threads table")
    ap.add_argument("--batch", type=int, default=4096, help="documents per batch in the threads table")
    args = ap.parse_args()
    if args.threads_only or args.fused_corpus_only:
        warnings.simplefilter("ignore")
        threads_section(load_corpus(args.limit), args.rounds, args.batch, corpus_only=args.fused_corpus_only)
        return

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    texts = load_corpus(args.limit)
    n = len(texts)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    idx = sorted(random.Random(args.seed).sample(range(n), min(args.dt_sample, n)))
    sample = [texts[i] for i in idx]
    smb = sum(len(t.encode()) for t in sample) / 1e6
    st_all = StringTensor.from_list(texts)
    st_s = StringTensor.from_list(sample)
    print(f"corpus: {n} docs, {mb:.1f} MB; datatrove sample: {len(sample)} docs ({smb:.2f} MB, random, seed "
          f"{args.seed}); one core (torch.set_num_threads(1), num_threads=1)")

    try:
        import datatrove  # noqa: F401
        import xxhash  # noqa: F401
        have_dt = True
    except ImportError:
        have_dt = False
        print("datatrove / xxhash not installed: only our side is measured")

    rows = []

    def row(name, ours_s_time, dt_time, ours_all_time, counterpart):
        ours_dps = len(sample) / ours_s_time
        r = [name, f"{ours_dps:,.0f}", f"{len(sample) / dt_time:,.0f}" if dt_time else "—",
             f"{ours_dps / (len(sample) / dt_time):,.0f}x" if dt_time else "—",
             f"{n / ours_all_time:,.0f}", f"{mb / ours_all_time:,.1f}", counterpart]
        rows.append(r)
        print("  " + " | ".join(r), flush=True)

    # fused pipeline
    def fused(st, mode="datatrove"):
        return lambda: FusedPipeline(pii=PIIMasker(mode), num_threads=1)(st)

    t_s, _ = timed(fused(st_s))
    t_all, res = timed(fused(st_all), repeat=2)
    t_dt = None
    if have_dt:
        t0 = time.perf_counter()
        dt_out = dt_pipeline(sample)
        t_dt = time.perf_counter() - t0
        ours_out = FusedPipeline(cleaner=False, pii=PIIMasker("datatrove"), num_threads=1)(st_s).texts.tolist()
        print(f"  (same-docs check, fused without cleaner vs datatrove pipeline: {len(ours_out)} vs {len(dt_out)} "
              f"outputs, {sum(a == b for a, b in zip(ours_out, dt_out))} identical in order)")
    row("FusedPipeline (clean+4 rule sets+dedup+PII dt)", t_s, t_dt, t_all,
        "4 filters + xxh3-128 set + PIIFormatter")
    t_s2, _ = timed(fused(st_s, "strict"))
    t_all2, _ = timed(fused(st_all, "strict"), repeat=2)
    row("FusedPipeline, PII strict (6 types)", t_s2, t_dt, t_all2, "same datatrove pipeline")

    # each stage
    t_s, _ = timed(lambda: TextCleaner(num_threads=1)(st_s))
    t_all, _ = timed(lambda: TextCleaner(num_threads=1)(st_all), repeat=2)
    t0 = time.perf_counter()
    py_clean(sample)
    row("TextCleaner", t_s, time.perf_counter() - t0, t_all, "plain Python re/str (no datatrove step)")

    for rs in ("gopher_repetition", "gopher_quality", "c4", "fineweb"):
        t_s, _ = timed(lambda: QualityFilter(rules=[rs], num_threads=1)(st_s))
        t_all, _ = timed(lambda: QualityFilter(rules=[rs], num_threads=1)(st_all), repeat=2)
        t_dt = None
        if have_dt:
            t0 = time.perf_counter()
            dt_one_filter(rs, sample)
            t_dt = time.perf_counter() - t0
        row(f"QualityFilter {rs}", t_s, t_dt, t_all, f"datatrove {rs} filter")

    t_s, _ = timed(lambda: PIIMasker("datatrove", num_threads=1)(st_s))
    t_all, _ = timed(lambda: PIIMasker("datatrove", num_threads=1)(st_all), repeat=2)
    t_dt = None
    if have_dt:
        t0 = time.perf_counter()
        dt_pii(sample)
        t_dt = time.perf_counter() - t0
    row("PIIMasker datatrove mode", t_s, t_dt, t_all, "datatrove PIIFormatter")
    t_s, _ = timed(lambda: PIIMasker("strict", num_threads=1)(st_s))
    t_all, _ = timed(lambda: PIIMasker("strict", num_threads=1)(st_all), repeat=2)
    row("PIIMasker strict (6 types)", t_s, t_dt, t_all, "datatrove PIIFormatter (2 types)")

    t_s, _ = timed(lambda: StreamDeduplicator(num_threads=1)(st_s))
    t_all, _ = timed(lambda: StreamDeduplicator(num_threads=1)(st_all), repeat=2)
    t_dt = None
    if have_dt:
        t0 = time.perf_counter()
        py_dedup(sample)
        t_dt = time.perf_counter() - t0
    row("StreamDeduplicator (hash + admit)", t_s, t_dt, t_all, "Python set of xxh3-128")

    print_table("Stages, one core: docs/s (ratios on the same sample of documents)",
                ["stage", f"ours docs/s ({len(sample)} sample)", "datatrove docs/s", "ratio",
                 f"ours docs/s (all {n})", "ours MB/s (all)", "counterpart"], rows)

    # dedup table: inserts + probes per second, bytes per distinct document
    m = args.dedup_hashes
    g = torch.Generator().manual_seed(1)
    hashes = torch.randint(-(1 << 63), (1 << 63) - 1, (m, 2), dtype=torch.int64, generator=g)
    d = StreamDeduplicator()
    t0 = time.perf_counter()
    new = d.check_insert_hashes(hashes)
    t_ins = time.perf_counter() - t0
    t0 = time.perf_counter()
    again = d.check_insert_hashes(hashes)
    t_probe = time.perf_counter() - t0
    assert bool(new.all()) and not bool(again.any())
    stt = d.stats
    # the same into a table pre-sized for m entries (no growth during the run; 1.5 slots per entry)
    d2 = StreamDeduplicator(initial_capacity=int(m * 1.5))
    t0 = time.perf_counter()
    d2.check_insert_hashes(hashes)
    t_ins2 = time.perf_counter() - t0
    st2 = d2.stats
    import xxhash  # noqa: F401  (reference: a Python set of 128-bit ints)
    pyset = set()
    ints = [int(a) << 64 | (int(b) & ((1 << 64) - 1)) for a, b in hashes[: min(m, 2_000_000)].tolist()]
    t0 = time.perf_counter()
    for h in ints:
        if h not in pyset:
            pyset.add(h)
    t_py = time.perf_counter() - t0
    py_bytes = sys.getsizeof(pyset) + sum(sys.getsizeof(x) for x in ints[:1000]) / 1000 * len(pyset)
    print_table("Dedup table, one core (random 128-bit hashes)",
                ["operation", "hashes", "M hashes/s", "bytes per distinct document", "vs Python set"],
                [["insert (probe + admit, grows from empty)", f"{m:,}", f"{m / t_ins / 1e6:.1f}",
                  f"{stt['bytes_per_entry']:.1f}", f"{(m / t_ins) / (len(ints) / t_py):.1f}x"],
                 ["insert into a pre-sized table", f"{m:,}", f"{m / t_ins2 / 1e6:.1f}",
                  f"{st2['bytes_per_entry']:.1f}", f"{(m / t_ins2) / (len(ints) / t_py):.1f}x"],
                 ["probe (all present)", f"{m:,}", f"{m / t_probe / 1e6:.1f}", "",
                  f"{(m / t_probe) / (len(ints) / t_py):.1f}x"],
                 ["insert + probe", f"{2 * m:,}", f"{2 * m / (t_ins + t_probe) / 1e6:.1f}", "", ""],
                 ["Python set of int (reference)", f"{len(ints):,}", f"{len(ints) / t_py / 1e6:.1f}",
                  f"{py_bytes / len(pyset):.0f}", "1x"]])
    print(f"\ncorpus dedup: {res.reasons.eq(1).sum().item()} duplicates dropped by the fused pipeline; "
          f"table {stt['table_bytes'] / 1e6:.0f} MB for {stt['entries']:,} hashes")
    threads_section(texts, args.rounds, args.batch)


if __name__ == "__main__":
    main()
