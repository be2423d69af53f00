"""Bounded cost under adversarial input (issue 21): time per byte, growth and peak memory, per stage.

For every stage (TextCleaner plain / NFC / NFKC, QualityFilter, PIIMasker strict,
StreamDeduplicator, FusedPipeline), each on one thread, and each input

  normal        the shared corpus (documents of it, up to the size)   -- the baseline
  combining     "a" + "\\u0301\\u0316" * k      (one run of combining marks)
  paren_digit   "(" * n + "1"                   (one token ending in a digit)
  paren_letter  "(" * n + "a"
  close_paren   ")" * n                          (every character a token)

at 1 KB, 100 KB and 10 MB (--quick: 1 KB, 10 KB, 100 KB), it prints

  * CPU time per input byte (ns/B; the best of the runs that fit in ~0.5 s, at
    least one: the steady state; the 1 KB column is mostly the fixed cost of one
    call, ~10-40 us),
  * the growth exponent log(t_big / t_mid) / log(size_big / size_mid)
    (1.0 = linear, 2.0 = quadratic),
  * the ratio of the largest size's ns/B to the same stage's ns/B on normal text
    of the same size,
  * peak memory per input byte: the child's peak RSS during the first run minus
    its RSS just before it (the peak is reset with /proc/self/clear_refs), so
    malloc'ed C buffers count too; the stage's output counts (it is alive).

Every measurement runs in a fresh child process with a timeout: a case that
does not finish is reported as "> T s" (and the larger sizes of that case are
not tried).  CPU time (not wall time) is used because the machine may be
shared; wall time is in the --json output.

Two more rows:
  * FusedPipeline (and QualityFilter, as a peer) retained memory: RSS after one
    batch of 64 documents of 1 MB of corpus text (the result deleted) minus RSS
    before it (--quick: 8 documents);
  * StreamDeduplicator growth: the latency of each batch of 4096 new random
    hashes while growing to 10 M entries (--quick: 1 M): median, p99 and the worst
    batch (wall and thread CPU time), and bytes per entry at the end.

Usage: python bench/bench_adversarial.py [--quick] [--timeout S] [--stages a,b] [--inputs a,b]
                                         [--skip-extra] [--json out.json]
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

STAGES = ["clean", "clean_nfc", "clean_nfkc", "quality", "pii", "dedup", "fused"]
INPUTS = ["normal", "combining", "paren_digit", "paren_letter", "close_paren"]
FULL_SIZES = [1_000, 100_000, 10_000_000]
QUICK_SIZES = [1_000, 10_000, 100_000]


# ------------------------------------------------------------------ child side

def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def load_corpus_bytes(size: int) -> list:
    """Documents of the shared corpus, in order, until they hold `size` UTF-8 bytes (the last one cut)."""
    import gzip

    from common import CORPUS

    if not CORPUS.exists():
        raise SystemExit(f"corpus not found at {CORPUS} (set LM_CORPUS)")
    out, total = [], 0
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            t = json.loads(line)["text"]
            b = t.encode("utf-8")
            if total + len(b) >= size:
                out.append(b[:size - total].decode("utf-8", errors="ignore"))
                return out
            out.append(t)
            total += len(b)
    raise SystemExit(f"the corpus holds only {total} bytes, {size} asked")


def _trim() -> None:
    """Give glibc's free heap pages back, so that the next peak counts new memory, not reused pages."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _make_input(name: str, size: int) -> list:
    if name == "normal":
        return load_corpus_bytes(size)
    if name == "combining":
        k = max(1, (size - 1) // 4)  # U+0301 and U+0316 are 2 bytes each in UTF-8
        return ["a" + "\u0301\u0316" * k]
    if name == "paren_digit":
        return ["(" * (size - 1) + "1"]
    if name == "paren_letter":
        return ["(" * (size - 1) + "a"]
    if name == "close_paren":
        return [")" * size]
    raise SystemExit(f"unknown input {name!r}")


def _with_no_limit(cls, *args, **kw):
    """The stage with no document-size limit (so the bench measures the work, not a refusal)."""
    try:
        return cls(*args, max_doc_bytes=0, **kw)
    except (TypeError, ValueError):
        return cls(*args, **kw)


def _make_stage(name: str):
    from luminamoon import FusedPipeline, PIIMasker, QualityFilter, StreamDeduplicator, TextCleaner

    if name == "clean":
        return _with_no_limit(TextCleaner, num_threads=1)
    if name == "clean_nfc":
        return _with_no_limit(TextCleaner, "NFC", num_threads=1)
    if name == "clean_nfkc":
        return _with_no_limit(TextCleaner, "NFKC", num_threads=1)
    if name == "quality":
        return _with_no_limit(QualityFilter, num_threads=1)
    if name == "pii":
        return _with_no_limit(PIIMasker, "strict", num_threads=1)
    if name == "dedup":
        return StreamDeduplicator(num_threads=1)
    if name == "fused":
        return FusedPipeline(cleaner=_with_no_limit(TextCleaner), quality=_with_no_limit(QualityFilter),
                             pii=_with_no_limit(PIIMasker, "strict"), num_threads=1)
    raise SystemExit(f"unknown stage {name!r}")


def child_measure(stage: str, inp: str, size: int) -> dict:
    from luminamoon import StringTensor

    texts = _make_input(inp, size)
    st = StringTensor.from_list(texts)
    nbytes = sum(len(t.encode("utf-8")) for t in texts)
    ndocs = len(texts)
    del texts
    fn = _make_stage(stage)
    fresh = [None]
    if stage in ("dedup", "fused"):  # a second run would only see duplicates: a fresh stage per run
        def run():
            fresh[0] = _make_stage(stage)
            return fresh[0](st)
    else:
        def run():
            return fn(st)
    warm = StringTensor.from_list(["warm up (lazy buffers, thread pools)"])
    r = fn(warm)
    del r, warm
    gc.collect()
    _trim()
    _reset_peak()
    base = _rss_kb("VmRSS")
    c0, w0 = time.process_time(), time.perf_counter()
    res = fn(st)
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    peak = _rss_kb("VmHWM")
    kept = int(res.kept.sum()) if hasattr(res.kept, "sum") else len(res)
    reasons = res.reason_counts() if hasattr(res, "reason_counts") else {}
    del res
    # More runs (best CPU time), within ~1 s, at every size: the steady state of a stage that sees
    # one batch after another.  From here glibc keeps freed buffers of up to 64 MiB in its heap (as its
    # dynamic threshold would), so a 10 MB run does not page-fault fresh output pages that a 100 KB run
    # gets from the heap: the exponent compares like with like.  The first run above gave the peak.
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-1, 128 << 20)  # M_TRIM_THRESHOLD
        libc.mallopt(-3, 64 << 20)   # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass
    runs, spent = 1, wall
    while spent < 0.5 and runs < 200 and wall < 0.25:
        c0, w0 = time.process_time(), time.perf_counter()
        r = run()
        c, w = time.process_time() - c0, time.perf_counter() - w0
        del r
        cpu, wall = min(cpu, c), min(wall, w)
        spent += w
        runs += 1
    return {"stage": stage, "input": inp, "size": size, "bytes": nbytes, "docs": ndocs, "cpu_s": cpu,
            "wall_s": wall, "runs": runs, "peak_delta_kb": peak - base, "base_kb": base, "kept": kept,
            "reasons": {str(k): v for k, v in reasons.items()}}


def child_retained(stage: str, ndocs: int, doc_bytes: int, inp: str = "normal") -> dict:
    import ctypes

    from luminamoon import StringTensor

    if inp != "normal":
        st = StringTensor.from_list([_make_input(inp, doc_bytes)[0]] * ndocs)
        return _retained_run(stage, st, ndocs, doc_bytes, inp)
    # documents of doc_bytes each, cut from the corpus text joined end to end (repeated if it is shorter)
    raw = "\n".join(load_corpus_bytes(min(ndocs * doc_bytes + 1, 40_000_000))).encode("utf-8")
    pool = raw
    while len(raw) < ndocs * doc_bytes:
        raw += b"\n" + pool
    del pool
    texts = []
    for i in range(ndocs):
        texts.append(raw[i * doc_bytes:(i + 1) * doc_bytes].decode("utf-8", errors="ignore"))
    del raw
    st = StringTensor.from_list(texts)
    del texts
    return _retained_run(stage, st, ndocs, doc_bytes, inp)


def _retained_run(stage: str, st, ndocs: int, doc_bytes: int, inp: str) -> dict:
    import ctypes

    fn = _make_stage(stage)
    gc.collect()
    _trim()
    before = _rss_kb("VmRSS")
    _reset_peak()
    t0 = time.process_time()
    res = fn(st)
    cpu = time.process_time() - t0
    peak = _rss_kb("VmHWM")
    del res
    gc.collect()
    after = _rss_kb("VmRSS")
    try:  # what stays after glibc returns its free heap pages: the stage's own buffers
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    after_trim = _rss_kb("VmRSS")
    out = {"stage": stage, "input": inp, "docs": ndocs, "doc_bytes": doc_bytes, "cpu_s": cpu, "before_kb": before,
           "peak_delta_kb": peak - before, "retained_kb": after - before, "retained_after_trim_kb": after_trim - before}
    retained = getattr(fn, "retained_bytes", None)
    if retained is not None:
        out["reported_retained_bytes"] = retained() if callable(retained) else retained
    return out


def child_dedup_growth(target: int, batch: int) -> dict:
    import torch

    from luminamoon import StreamDeduplicator

    d = StreamDeduplicator()
    g = torch.Generator().manual_seed(1234)
    lat_wall, lat_cpu = [], []
    done = 0
    worst_at = 0
    while done < target:
        n = min(batch, target - done)
        h = torch.randint(-(1 << 63), (1 << 63) - 1, (n, 2), dtype=torch.int64, generator=g)
        c0, w0 = time.thread_time(), time.perf_counter()
        d.check_insert_hashes(h)
        w, c = time.perf_counter() - w0, time.thread_time() - c0
        if not lat_cpu or c > max(lat_cpu):
            worst_at = done
        lat_wall.append(w)
        lat_cpu.append(c)
        done += n
    s = d.stats
    # a growth may be in progress at the end (both slot arrays held): duplicates move it on too;
    # re-check the last batch until the table is one array again, and report that size as well
    settled = s["bytes_per_entry"]
    for _ in range(10000):
        st_now = d.stats
        if st_now["table_bytes"] == st_now["capacity"] * 16:
            settled = st_now["bytes_per_entry"]
            break
        d.check_insert_hashes(h)
    lw, lc = sorted(lat_wall), sorted(lat_cpu)

    def q(v, f):
        return v[min(len(v) - 1, int(f * len(v)))]

    return {"entries": s["entries"], "batches": len(lat_wall), "batch": batch,
            "median_ms": q(lc, 0.5) * 1e3, "p99_ms": q(lc, 0.99) * 1e3, "worst_ms": lc[-1] * 1e3,
            "worst_at_entries": worst_at, "median_wall_ms": q(lw, 0.5) * 1e3, "worst_wall_ms": lw[-1] * 1e3,
            "bytes_per_entry": s["bytes_per_entry"], "settled_bytes_per_entry": settled, "capacity": s["capacity"]}


# ------------------------------------------------------------------ parent side

def spawn(args: list, timeout: float):
    cmd = [sys.executable, os.path.abspath(__file__), "--child"] + [str(a) for a in args]
    # a fixed mmap threshold: large buffers are mapped and unmapped at once (glibc's dynamic
    # threshold would otherwise serve them from already resident heap pages and hide the peak)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1")
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]}, 0.0
    return json.loads(p.stdout.strip().splitlines()[-1]), time.perf_counter() - t0


def fmt_size(n: int) -> str:
    return f"{n // 1_000_000} MB" if n >= 1_000_000 else f"{n // 1000} KB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="sizes 1 KB, 10 KB, 100 KB; smaller extra rows")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per measurement (default 60, quick 15)")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--inputs", default=",".join(INPUTS))
    ap.add_argument("--skip-extra", action="store_true", help="no retained-memory and dedup-growth rows")
    ap.add_argument("--only-extra", action="store_true", help="only the retained-memory and dedup-growth rows")
    ap.add_argument("--dedup-entries", type=int, default=None, help="dedup growth target (default 10 M, quick 1 M)")
    ap.add_argument("--json", default=None, help="write all measurements here")
    ap.add_argument("--jobs", type=int, default=1, help="children run at the same time (CPU time is measured, "
                    "so 2 on 2 cores is fair; peak memory is per child)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.child:
        kind = a.child[0]
        if kind == "measure":
            out = child_measure(a.child[1], a.child[2], int(a.child[3]))
        elif kind == "retained":
            out = child_retained(a.child[1], int(a.child[2]), int(a.child[3]), a.child[4])
        elif kind == "dedup_growth":
            out = child_dedup_growth(int(a.child[1]), int(a.child[2]))
        else:
            raise SystemExit(f"unknown child {kind}")
        print(json.dumps(out))
        return

    sizes = QUICK_SIZES if a.quick else FULL_SIZES
    timeout = a.timeout or (15.0 if a.quick else 60.0)
    stages = [s for s in a.stages.split(",") if s]
    inputs = [i for i in a.inputs.split(",") if i]
    for s in stages:
        if s not in STAGES:
            raise SystemExit(f"--stages: unknown {s!r}; valid: {', '.join(STAGES)}")
    for i in inputs:
        if i not in INPUTS:
            raise SystemExit(f"--inputs: unknown {i!r}; valid: {', '.join(INPUTS)}")
    if "normal" not in inputs:
        inputs = ["normal"] + inputs  # the baseline of every ratio
    commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", HERE, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    print(f"bench_adversarial: commit {commit}{' (+ uncommitted changes)' if dirty else ''}, "
          f"sizes {', '.join(fmt_size(s) for s in sizes)}, timeout {timeout:g} s per measurement, one thread, "
          f"a fresh process per measurement", flush=True)

    results = {}
    rows = []
    if not a.only_extra:
        def one_case(stage, inp):
            timed_out = False
            for size in sizes:  # smallest first: after a timeout the larger sizes are not tried
                if timed_out:
                    results[(stage, inp, size)] = None
                    continue
                r, _ = spawn(["measure", stage, inp, size], timeout)
                results[(stage, inp, size)] = r
                if r is None:
                    timed_out = True
                msg = ("> %gs" % timeout) if r is None else r.get("error") or \
                    f"{r['cpu_s'] / r['bytes'] * 1e9:.1f} ns/B, peak {r['peak_delta_kb'] * 1024 / r['bytes']:.1f} B/B"
                print(f"  {stage:10s} {inp:12s} {fmt_size(size):>6s}: {msg}", file=sys.stderr, flush=True)

        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max(1, a.jobs)) as ex:
            for f in [ex.submit(one_case, st_, in_) for st_ in stages for in_ in inputs]:
                f.result()

        def nspb(r):
            return r["cpu_s"] / r["bytes"] * 1e9

        for stage in stages:
            for inp in inputs:
                cells = [stage, inp]
                rs = [results[(stage, inp, s)] for s in sizes]
                for r in rs:
                    cells.append(f"> {timeout:g} s" if r is None else ("error" if "error" in r else f"{nspb(r):.1f}"))
                mid, big = rs[1], rs[2]
                ok = lambda r: r is not None and "error" not in r  # noqa: E731
                if ok(mid) and ok(big) and mid["cpu_s"] > 0:
                    cells.append(f"{math.log(big['cpu_s'] / mid['cpu_s']) / math.log(big['bytes'] / mid['bytes']):.2f}")
                elif ok(mid) and not ok(big) and ok(rs[0]):  # timed out: the exponent of the smaller sizes
                    e01 = math.log(mid["cpu_s"] / rs[0]["cpu_s"]) / math.log(mid["bytes"] / rs[0]["bytes"])
                    cells.append(f"{e01:.2f} ({fmt_size(sizes[0])}->{fmt_size(sizes[1])})")
                else:
                    cells.append("?")
                norm = results.get((stage, "normal", sizes[2]))
                if ok(big) and ok(norm):
                    cells.append(f"{nspb(big) / nspb(norm):.1f}")
                elif big is None and ok(norm) and ok(mid):
                    cells.append(f"> {timeout / big_bytes(sizes[2]) * 1e9 / nspb(norm):.0f}")
                else:
                    cells.append("?")
                for r in rs[1:]:
                    cells.append("-" if not ok(r) else f"{r['peak_delta_kb'] * 1024 / r['bytes']:.1f}")
                rows.append(cells)
        from common import print_table
        hdr = ["stage", "input"] + [f"ns/B {fmt_size(s)}" for s in sizes] + \
              [f"exp {fmt_size(sizes[1])}->{fmt_size(sizes[2])}", f"x normal @{fmt_size(sizes[2])}"] + \
              [f"peak B/B {fmt_size(s)}" for s in sizes[1:]]
        print_table("Cost per stage and input (CPU ns per input byte; exponent; ratio to normal text; "
                    "peak RSS per input byte)", hdr, rows)

    extra = {}
    if not a.skip_extra:
        ndocs = 8 if a.quick else 64
        rrows = []
        for stage, inp in (("fused", "normal"), ("fused", "close_paren"), ("quality", "normal"),
                           ("quality", "close_paren")):
            if stage not in stages:
                continue
            r, _ = spawn(["retained", stage, ndocs, 1_000_000, inp], max(timeout, 300.0))
            extra[f"retained_{stage}_{inp}"] = r
            if r is None or "error" in r:
                rrows.append([stage, f"{ndocs} x 1 MB {inp}", "timeout" if r is None else r["error"], "", "", ""])
                continue
            rrows.append([stage, f"{ndocs} x 1 MB {inp}", f"{r['peak_delta_kb'] / 1024:.0f}",
                          f"{r['retained_kb'] / 1024:.1f}", f"{r['retained_after_trim_kb'] / 1024:.1f}",
                          str(r.get("reported_retained_bytes", "n/a"))])
        if rrows:
            from common import print_table
            print_table("Memory kept after one batch (RSS MiB after the result is freed, minus before)",
                        ["stage", "batch", "peak MiB", "retained MiB", "retained after malloc_trim MiB",
                         "reported retained bytes"], rrows)
        if "dedup" in stages:
            target = a.dedup_entries or (1_000_000 if a.quick else 10_000_000)
            r, _ = spawn(["dedup_growth", target, 4096], max(timeout, 600.0))
            extra["dedup_growth"] = r
            from common import print_table
            if r is None or "error" in r:
                print(f"\ndedup growth: {'timeout' if r is None else r['error']}")
            else:
                print_table(f"StreamDeduplicator growing to {r['entries']:,} entries, batches of {r['batch']} new "
                            f"hashes (thread CPU time; wall in parentheses)",
                            ["batches", "median ms", "p99 ms", "worst ms", "worst at entries",
                             "B/entry at the end", "B/entry once no growth runs"],
                            [[r["batches"], f"{r['median_ms']:.2f} ({r['median_wall_ms']:.2f})",
                              f"{r['p99_ms']:.2f}", f"{r['worst_ms']:.2f} ({r['worst_wall_ms']:.2f})",
                              f"{r['worst_at_entries']:,}", f"{r['bytes_per_entry']:.1f}",
                              f"{r.get('settled_bytes_per_entry', r['bytes_per_entry']):.1f}"]])
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"commit": commit, "sizes": sizes, "timeout": timeout,
                       "measurements": [v for v in results.values() if v], "extra": extra}, f, indent=1)


def big_bytes(size: int) -> int:
    return size


if __name__ == "__main__":
    main()
