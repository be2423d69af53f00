"""Shared helpers for the benchmarks: corpus loading, timing, table printing."""
from __future__ import annotations

import gzip
import json
import os
import pathlib
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CORPUS = pathlib.Path(os.environ.get("LM_CORPUS", ROOT.parent / "shared" / "corpus" / "debian-dev.jsonl.gz"))


def load_corpus(limit: int | None = None) -> list[str]:
    """Texts of the shared corpus; exits with a message when it is absent."""
    if not CORPUS.exists():
        raise SystemExit(f"corpus not found at {CORPUS} (set LM_CORPUS to another JSONL.gz with a 'text' field)")
    out = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if limit and len(out) >= limit:
                break
    return out


def best_time(fn, repeat: int = 7, min_time: float = 0.05) -> float:
    """Best per-call wall time over `repeat` rounds, each of enough calls to last `min_time`."""
    fn()  # warm up
    calls, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t = time.perf_counter() - t0
        if t >= min_time or calls >= 1 << 20:
            break
        calls *= 2
    best = t / calls
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    print(f"\n### {title}\n")
    print("| " + " | ".join(str(h).ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |")
