"""StringTensor against pyarrow.compute and Polars, one thread each, in the same run.

    python bench/bench_strings.py                 # words, lines and documents of the shared corpus
    python bench/bench_strings.py --regimes words --max-words 500000
    python bench/bench_strings.py --max-words 1000000 --max-lines 500000   # the README table
    python bench/bench_strings.py --threads-only  # only the 2-thread table (rerun it on an idle machine)

Three regimes from the shared corpus (bench/common.py, 68k documents, 47 MB):
  words      every document split on whitespace (~11 bytes a string)
  lines      every document split into lines
  documents  whole documents (~680 bytes a string)

Every row times ours, pyarrow.compute and Polars side by side (best of 7 rounds, the three
interleaved round by round: best_times), and
prints ratio = peer time / our time (> 1: we are faster).  torch, pyarrow
(pa.set_cpu_count(1)) and Polars (POLARS_MAX_THREADS=1, set before import) each use
one thread.  "StringTensor" rows call the methods of a tensor built by from_list (its
views layout, built in the same pass); "offsets op" rows call the registered operators
torch.ops.luminamoon.* on the offsets layout (what a compiled model calls).  The cost of
building the views from the offsets layout (what a tensor from from_arrow / from_buffers /
a stage pays on its first method call) is its own row, as is from_list.  One fast_eq(StringTensor)
row runs on the same pairs held as views only (what take / mask return on the CPU: equality then
reads 32 bytes of views a pair instead of 8 of offsets).  A last table times
starts_with, fast_eq and hash64 on documents (and hash64 on the words) with 2 threads against 1 (--threads-only: that
table alone; microseconds a call, 1 and 2 threads interleaved over 15 rounds, the best of each; a second
thread is a started worker of the core's pool, ~0.3-2 us to wake; equal and hash64 cut the work into
ranges of about equal bytes; rerun it on an idle machine, on a loaded one it measures the other jobs).
After the equality rows of each regime, a "bound" row times one memcmp (CPython's bytes ==) of the
bytes every kernel must read for fast_eq(StringTensor) (the pairs of equal length, each side's
concatenated): a sequential C stream in the same run, with its GB/s; its ratio column is pyarrow's
time over it, the most any kernel could gain over pyarrow on that regime if it read nothing else.
A "floor" row times one memcmp of two copies of the offsets and the whole payload (every byte a per-pair
kernel on the offsets layout reads where nearly every 64-byte line holds a byte of an equal-length pair:
the row gives that share of the payload's lines; no per-pair work); ours and pyarrow's times against it
say how close both are to this machine's stream rate (on a VM with a small L3 reading the skipped pairs'
bytes too was faster than skipping them; on this one it is not: core/src/ops_internal.h).
Two from_list rows: "cached UTF-8" runs on the list pyarrow and Polars have already read, so CPython
caches each non-ASCII str's UTF-8 and every library copies it; "fresh list" gives every library, every
round, new str objects made before the clock starts (nobody has encoded them: each library pays its
encoding pass, and Polars' and pyarrow's leave a UTF-8 copy cached on each non-ASCII str, ours does not).
A full run takes ~70 s (68 s at load average 11 on the 2-core development VM).  On x86-64 with AVX2
the hash of strings over 240 bytes and the first pass of equal_scalar / equal run AVX2
copies chosen at run time; LM_NO_AVX2=1 in the environment turns them off (to compare).  With
AVX-512 F/BW/VL/DQ those passes run AVX-512 copies, and equal on strings averaging under 256 bytes
compares each pair's first 128 bytes by masked loads.  With AVX-512 F the hash of strings over 240 bytes runs XXH3's AVX-512 copy instead; with AVX-512
(F/DQ/BW/VL/VBMI/VBMI2) hash64 hashes strings of up to 8 bytes 8 at a time (views: up to 12
bytes read from the views alone), and StringTensor.hash64 then takes the views layout for short strings;
LM_NO_AVX512=1 turns both off.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ["POLARS_MAX_THREADS"] = "1"
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import torch  # noqa: E402
import xxhash  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from common import load_corpus, print_table  # noqa: E402

from luminamoon import StringTensor, _C  # noqa: E402

OPS = torch.ops.luminamoon


def regimes(texts: list[str], which: list[str], max_words: int, max_lines: int) -> dict[str, list[str]]:
    out = {}
    if "words" in which:
        words: list[str] = []
        for t in texts:
            words.extend(t.split())
            if len(words) >= max_words:
                break
        out["words"] = words[:max_words]
    if "lines" in which:
        lines: list[str] = []
        for t in texts:
            lines.extend(t.split("\n"))
            if len(lines) >= max_lines:
                break
        out["lines"] = lines[:max_lines]
    if "documents" in which:
        out["documents"] = texts
    return out


def pick_prefix(strings: list[str]) -> str:
    """A prefix that selects a few percent: the most common 3-character start among long-enough strings."""
    from collections import Counter

    c = Counter(s[:3] for s in strings[:200000] if len(s) >= 6)
    for p, k in c.most_common():
        if k < 0.2 * min(len(strings), 200000):
            return p
    return "the"


def line_share(off: np.ndarray, pick: np.ndarray) -> float:
    """The share of the payload's 64-byte lines (counted from its first byte) that hold a byte
    of a picked string (pick: bool per string)."""
    off = off.astype(np.int64)
    s, e = off[:-1][pick] - off[0], off[1:][pick] - off[0]
    keep = e > s
    first, last = s[keep] // 64, (e[keep] - 1) // 64
    nl = max(int(off[-1] - off[0] + 63) // 64, 1)
    d = np.bincount(first, minlength=nl + 1) - np.bincount(last + 1, minlength=nl + 1)
    return float((np.cumsum(d[:nl]) > 0).mean())


def other_side(strings: list[str]) -> list[str]:
    """The right-hand side of fast_eq(StringTensor): every other string replaced by its neighbour
    (about half equal), built as a separate list so no payload is shared."""
    n = len(strings)
    return [(s if i % 2 == 0 else strings[(i + 1) % n]) + "" for i, s in enumerate(strings)]


def best_times(fns, repeat: int = 7, min_time: float = 0.05, setups=None) -> list[float]:
    """Best per-call wall time of each of `fns`, the rounds interleaved: round r times every fn
    once (the order rotating from round to round), each with enough calls to last `min_time`
    (counted once, before round 0).  This VM's speed drifts +-40% within a minute: timed one
    after the other (seven rounds of ours, then seven of a peer) a drift between the blocks
    moved a ratio by as much; interleaved, every library gets the same slow and fast moments.
    setups[k] (optional) runs before fn k's calls, outside the clock."""
    calls = []
    for k, fn in enumerate(fns):
        if setups:
            setups[k]()
        fn()  # warm up
        c = 1
        while True:
            t0 = time.perf_counter()
            for _ in range(c):
                fn()
            if time.perf_counter() - t0 >= min_time or c >= 1 << 20:
                break
            c *= 2
        calls.append(c)
    best = [float("inf")] * len(fns)
    for r in range(repeat):
        for j in range(len(fns)):
            k = (j + r) % len(fns)
            if setups:
                setups[k]()
            t0 = time.perf_counter()
            for _ in range(calls[k]):
                fns[k]()
            best[k] = min(best[k], (time.perf_counter() - t0) / calls[k])
    return best


def best_times_fresh(fns, strings: list[str], repeat: int = 7) -> list[float]:
    """Best time of each fn(list) over `repeat` interleaved rounds (as best_times), every call on a
    new copy of `strings` made before its clock starts: new str objects, so no str has the UTF-8
    form that CPython caches on a str once something (pyarrow, Polars) asked for it; the copy is
    made by decoding each str's bytes."""
    best = [float("inf")] * len(fns)
    for r in range(repeat):
        for j in range(len(fns)):
            k = (j + r) % len(fns)
            fresh = [s.encode().decode() for s in strings]
            t0 = time.perf_counter()
            fns[k](fresh)
            best[k] = min(best[k], time.perf_counter() - t0)
            del fresh
    return best


def bench_regime(name: str, strings: list[str], rows: list, ratios: dict) -> None:
    prefix = pick_prefix(strings)
    probe = strings[len(strings) // 2]
    other = other_side(strings)
    st = StringTensor.from_list(strings)
    st2 = StringTensor.from_list(other)
    arr, arr2 = pa.array(strings, type=pa.string()), pa.array(other, type=pa.string())
    ser, ser2 = pl.Series(strings), pl.Series(other)
    off, data = st.offsets, st.data
    off2, data2 = st2.offsets, st2.data
    nbytes = int(off[-1])

    # the same answers before any timing
    want_sw = pc.starts_with(arr, prefix).to_numpy(zero_copy_only=False)
    assert np.array_equal(st.starts_with(prefix).numpy(), want_sw)
    assert np.array_equal(OPS.prefix_match(off, data, prefix).numpy(), want_sw)
    assert torch.equal(_C.fast_views_from_offsets(off, data), OPS.views_from_offsets(off, data))
    assert np.array_equal(ser.str.starts_with(prefix).to_numpy(), want_sw)
    want_eq = pc.equal(arr, probe).to_numpy(zero_copy_only=False)
    assert np.array_equal(st.fast_eq(probe).numpy(), want_eq)
    assert np.array_equal(OPS.equal_scalar(off, data, probe).numpy(), want_eq)
    want_eq2 = pc.equal(arr, arr2).to_numpy(zero_copy_only=False)
    assert np.array_equal(st.fast_eq(st2).numpy(), want_eq2)
    assert np.array_equal(OPS.equal(off, data, off2, data2).numpy(), want_eq2)
    assert st.filter_by_prefix(prefix).tolist() == pc.filter(arr, pc.starts_with(arr, prefix)).to_pylist()
    k = min(len(strings), 1000)
    want_h = [xxhash.xxh3_64_intdigest(s.encode()) for s in strings[:k]]
    assert [h & (2**64 - 1) for h in st.hash64()[:k].tolist()] == want_h
    assert [h & (2**64 - 1) for h in OPS.hash64(off, data, 0)[:k].tolist()] == want_h

    def row(what, ours, pa_fn=None, pl_fn=None, key=None, timer=best_times):
        fns = [f for f in (ours, pa_fn, pl_fn) if f is not None]
        times = iter(timer(fns))
        t = next(times)
        tp = next(times) if pa_fn else None
        tl = next(times) if pl_fn else None
        rp = tp / t if tp else None
        rl = tl / t if tl else None
        if key:
            ratios[(name, key)] = (rp, rl)
        rows.append([name, what, f"{t * 1e9 / len(strings):.1f}",
                     f"{tp * 1e9 / len(strings):.1f}" if tp else "-", f"{rp:.2f}x" if rp else "-",
                     f"{tl * 1e9 / len(strings):.1f}" if tl else "-", f"{rl:.2f}x" if rl else "-"])

    row("from_list, cached UTF-8 (a list pyarrow/Polars already read)", lambda: StringTensor.from_list(strings),
        lambda: pa.array(strings, type=pa.string()), lambda: pl.Series(strings), key="from_list")
    # H2: a list nobody has encoded: every round (untimed) makes new str objects, for every library
    row("from_list, fresh list (new str objects, no UTF-8 cached)", lambda x: StringTensor.from_list(x),
        lambda x: pa.array(x, type=pa.string()), lambda x: pl.Series(x), key="from_list_fresh",
        timer=lambda fns: best_times_fresh(fns, strings))
    # what the first method call on a from_arrow / from_buffers tensor runs (StringTensor._materialize_views:
    # luminamoon._C's copy of the operator, its array on a pooled huge-page mapping)
    row("build views from offsets (first use after from_arrow/from_buffers)",
        lambda: _C.fast_views_from_offsets(off, data))
    row("StringTensor.starts_with", lambda: st.starts_with(prefix),
        lambda: pc.starts_with(arr, prefix), lambda: ser.str.starts_with(prefix), key="starts_with")
    row("StringTensor.filter_by_prefix", lambda: st.filter_by_prefix(prefix),
        lambda: pc.filter(arr, pc.starts_with(arr, prefix)), lambda: ser.filter(ser.str.starts_with(prefix)),
        key="filter_by_prefix")
    row("StringTensor.fast_eq(str)", lambda: st.fast_eq(probe),
        lambda: pc.equal(arr, probe), lambda: ser == probe, key="fast_eq_str")
    row("StringTensor.fast_eq(StringTensor)", lambda: st.fast_eq(st2),
        lambda: pc.equal(arr, arr2), lambda: ser == ser2, key="fast_eq_st")
    # the same pairs held as views only (what take / mask / a strided slice return on the CPU)
    everything = torch.arange(len(strings))
    va, vb = st.take(everything), st2.take(everything)
    assert va._od is None and vb._od is None and np.array_equal(va.fast_eq(vb).numpy(), want_eq2)
    row("StringTensor.fast_eq(StringTensor), views only (after take / mask)", lambda: va.fast_eq(vb),
        lambda: pc.equal(arr, arr2), lambda: ser == ser2, key="fast_eq_st_views")
    del va, vb
    row("StringTensor.hash64 (XXH3-64)", lambda: st.hash64(), None, lambda: ser.hash(), key="hash64")
    row("offsets op prefix_match", lambda: OPS.prefix_match(off, data, prefix),
        lambda: pc.starts_with(arr, prefix), lambda: ser.str.starts_with(prefix), key="prefix_match")
    row("offsets op equal_scalar", lambda: OPS.equal_scalar(off, data, probe),
        lambda: pc.equal(arr, probe), lambda: ser == probe, key="equal_scalar")
    row("offsets op equal", lambda: OPS.equal(off, data, off2, data2),
        lambda: pc.equal(arr, arr2), lambda: ser == ser2, key="equal")
    row("offsets op hash64", lambda: OPS.hash64(off, data, 0), None, lambda: ser.hash(), key="hash64_offsets")
    # The memory bound of equality of two arrays: every pair of equal length (and equal
    # bytes) must be read whole by any kernel.  Those bytes, each side's concatenated into
    # one buffer, compared by one memcmp (CPython's bytes ==): a sequential C stream, the
    # fastest way to read them on this machine; "pyarrow" = pyarrow.compute.equal, its ratio
    # = pyarrow time / the bound (the most any kernel could gain over pyarrow here)
    eq_a, eq_b = [], []
    for s1, s2 in zip(strings, other):
        b1, b2 = s1.encode(), s2.encode()
        if len(b1) == len(b2):
            eq_a.append(b1)
            eq_b.append(b2)
    ba, bb = b"".join(eq_a), bytearray(b"".join(eq_a))  # equal bytes: memcmp reads both to the end
    bb = bytes(bb)
    # the peer and both memcmp rows interleaved (best_times)
    wa = bytes(off.numpy()) + bytes(data.numpy())
    wb = bytes(bytearray(wa))
    la_, lb_ = np.diff(off.numpy().astype(np.int64)), np.diff(off2.numpy().astype(np.int64))
    same_len = la_ == lb_
    tb, tp, tw = best_times([lambda: ba == bb, lambda: pc.equal(arr, arr2), lambda: wa == wb])
    rows.append([name, f"bound: memcmp of the equal-length pairs' bytes (2 x {len(ba) / 1e6:.1f} MB, "
                 f"{2 * len(ba) / tb / 1e9:.1f} GB/s)", f"{tb * 1e9 / len(strings):.1f}",
                 f"{tp * 1e9 / len(strings):.1f}", f"{tp / tb:.2f}x", "-", "-"])
    # the same over the offsets and both whole payloads: what a per-pair kernel on the offsets
    # layout reads where the equal pairs are spread over the payload and most lines hold one
    # (every offset is needed; the hardware prefetchers run past a pair into the next string)
    rows.append([name, f"floor: memcmp of offsets + payload, each side (2 x {len(wa) / 1e6:.1f} MB, "
                 f"{2 * len(wa) / tw / 1e9:.1f} GB/s; {100 * line_share(off.numpy(), same_len):.0f}% of the "
                 f"payload's lines hold an equal-length pair's byte)", f"{tw * 1e9 / len(strings):.1f}",
                 f"{tp * 1e9 / len(strings):.1f}", f"{tp / tw:.2f}x", "-", "-"])
    print(f"  {name}: {len(strings)} strings, {nbytes / 1e6:.1f} MB ({nbytes / max(len(strings), 1):.1f} B each), "
          f"prefix {prefix!r}", flush=True)


def one_vs_two(what: str, fn, rows: list) -> None:
    """A row of the 2-thread table: fn with 1 and 2 threads, 15 rounds with the two interleaved
    (torch.set_num_threads before each timed run, outside the clock), the best of each."""
    t1, t2 = best_times([fn, fn], repeat=15,
                        setups=[lambda: torch.set_num_threads(1), lambda: torch.set_num_threads(2)])
    torch.set_num_threads(1)
    rows.append([what, f"{t1 * 1e6:.1f}", f"{t2 * 1e6:.1f}", f"{t1 / t2:.2f}x"])


def bench_threads(strings: list[str], rows: list) -> None:
    st = StringTensor.from_list(strings)
    st2 = StringTensor.from_list(other_side(strings))
    prefix, probe = pick_prefix(strings), strings[len(strings) // 2]
    for what, fn in (("starts_with", lambda: st.starts_with(prefix)), ("fast_eq(str)", lambda: st.fast_eq(probe)),
                     ("fast_eq(StringTensor)", lambda: st.fast_eq(st2)), ("hash64", lambda: st.hash64())):
        one_vs_two(what, fn, rows)


def bench_threads_hash_words(words: list[str], rows: list) -> None:
    """hash64 on words (the views layout: strings of ~6 bytes) with 2 threads against 1: the one
    row of the 2-thread table not on documents (before the work was cut by count for short strings,
    the second thread read every view's length first and 2 threads ran at ~0.8x of one)."""
    st = StringTensor.from_list(words)
    one_vs_two(f"hash64 on {len(words):,} words", lambda: st.hash64(), rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regimes", default="words,lines,documents")
    ap.add_argument("--max-words", type=int, default=2_000_000)
    ap.add_argument("--max-lines", type=int, default=1_000_000)
    ap.add_argument("--no-threads", action="store_true", help="skip the 2-thread table")
    ap.add_argument("--threads-only", action="store_true",
                    help="only the 2-thread table on documents (one command for an idle machine)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    texts = load_corpus()
    which = [r.strip() for r in args.regimes.split(",") if r.strip()]
    if args.threads_only:
        which = ["documents"]
    data = regimes(texts, which, args.max_words, args.max_lines)
    print(f"one thread each: torch {torch.__version__} ({torch.get_num_threads()} thread), pyarrow {pa.__version__} "
          f"(cpu_count {pa.cpu_count()}), polars {pl.__version__} (POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']})")
    rows: list = []
    ratios: dict = {}
    for name in which if not args.threads_only else []:
        bench_regime(name, data[name], rows, ratios)
    if rows:
        print_table("StringTensor vs pyarrow.compute and Polars (ns per string, one thread; ratio = peer time / ours)",
                    ["regime", "call", "ours", "pyarrow", "ratio", "polars", "ratio"], rows)
    if "documents" in data and (args.threads_only or not args.no_threads):
        trows: list = []
        bench_threads(data["documents"], trows)
        words = data.get("words") or regimes(texts, ["words"], args.max_words, 0)["words"]
        bench_threads_hash_words(words, trows)
        print_table("documents, StringTensor methods: 1 thread vs num_threads=2 (us per call)",
                    ["call", "1 thread", "2 threads", "speed-up"], trows)


if __name__ == "__main__":
    main()
