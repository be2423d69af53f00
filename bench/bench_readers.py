"""The reading paths of ResumablePipeline, DistributedPipeline and the collate, columnar
(``iter_blocks``: the text column decoded in C / taken from Arrow, no Python object per record)
against record by record, in one run (issue 14 acceptance 4).

Rows (docs/s over the shared corpus, the same stages as ``luminamoon run``'s default
configuration with exact dedup, the same thread count and batch size):

* FusedPipeline over the texts already in memory (the bound);
* ResumablePipeline over the gzip JSONL corpus, and over a Parquet copy of it
  (snappy, 8,192-row groups), columnar and record by record;
* DistributedPipeline, one rank, over the JSONL corpus: columnar (``stream_steps``) and
  line by line (GlobalStream take + parse, the path before); and over a plain text copy
  (``TextSource(per="line")``, one document a line, its newlines made spaces), columnar
  (``stream_steps(text=True)``) and line by line;
* the collate (``create_resumable_collate(max_length=512)``, byte tokens) under a
  DataLoader: fed blocks (``collate.blocks(JsonlSource(...), B)``, ``batch_size=None``) and
  fed the records as dicts read by iterating the source (``batch_size=B``).

Each row is the best of ``--rounds`` rounds, the rows interleaved within a round (the machine
is shared: compare the ratios, not the absolute figures).

    python bench/bench_readers.py [--threads 2] [--rounds 3] [--batch-size 2048]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager, nullcontext

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from common import CORPUS, load_corpus, print_table  # noqa: E402
from luminamoon import StringTensor, stages  # noqa: E402
from luminamoon.cli.config import default_config, stage_kwargs  # noqa: E402
from luminamoon.data import DistributedPipeline, ResumablePipeline, create_resumable_collate  # noqa: E402
from luminamoon.data import sources as S  # noqa: E402


class RecordByRecordJsonl(S.JsonlSource):
    """JsonlSource read record by record (json.loads per line)."""

    def _records(self):
        return super()._records()


class RecordByRecordParquet(S.ParquetSource):
    """ParquetSource read record by record (a dict per row)."""

    iter_blocks = None


@contextmanager
def line_by_line(cls=S.JsonlSource):
    """DistributedPipeline's path before the blocks: GlobalStream take + parse."""
    old = cls._columnar
    cls._columnar = property(lambda self: False)
    try:
        yield
    finally:
        cls._columnar = old


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=2048)
    args = ap.parse_args()
    T, B = args.threads, args.batch_size
    t_start = time.perf_counter()
    texts = load_corpus()
    n = len(texts)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    batches = [StringTensor.from_list(texts[i:i + B]) for i in range(0, n, B)]
    cfg = default_config()
    kw = stage_kwargs(cfg)
    tmp = tempfile.mkdtemp(prefix="bench-readers-")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq_path = os.path.join(tmp, "corpus.parquet")
    recs = list(S.JsonlSource(str(CORPUS)))
    pq.write_table(pa.Table.from_pylist(recs), pq_path, row_group_size=8192)
    del recs
    txt_path = os.path.join(tmp, "corpus.txt")
    with open(txt_path, "w", encoding="utf-8") as f:
        for t in texts:
            f.write(" ".join(t.splitlines()).replace("\x85", " ") + "\n")

    def fused():
        pipe = stages.FusedPipeline(dedup=True, num_threads=T, **kw)
        for st in batches:
            pipe(st)

    def resumable(make):
        def go():
            state = os.path.join(tmp, "state")
            shutil.rmtree(state, ignore_errors=True)
            with ResumablePipeline(make(), batch_size=B, state_dir=state, num_threads=T, stages=kw) as pipe:
                got = sum(b.n_in for b in pipe)
            assert got == n, got
        return go

    def distributed(columnar, text=False):
        def go():
            state = os.path.join(tmp, "dstate")
            shutil.rmtree(state, ignore_errors=True)
            src = (lambda: S.TextSource(txt_path)) if text else (lambda: S.JsonlSource(str(CORPUS)))
            with (nullcontext() if columnar else line_by_line(S.TextSource if text else S.JsonlSource)):
                with DistributedPipeline(src(), batch_size=B, state_dir=state,
                                         num_threads=T, stages=kw) as pipe:
                    got = sum(b.n_in for b in pipe)
                    assert (pipe._steps is not None) == columnar
            assert got == n, got
        return go

    def collate(blocks):
        from torch.utils.data import DataLoader

        def go():
            c = create_resumable_collate(max_length=512, stages=kw, num_threads=T)
            if blocks:
                loader = DataLoader(c.blocks(S.JsonlSource(str(CORPUS)), B), batch_size=None, collate_fn=c)
            else:
                loader = DataLoader(list(S.JsonlSource(str(CORPUS))), batch_size=B, collate_fn=c)
            rows = sum(int(x["input_ids"].shape[0]) for x in loader)
            assert 0 < rows <= n
        return go

    rows = {
        "FusedPipeline (texts in memory)": fused,
        "ResumablePipeline, JSONL.gz, columnar": resumable(lambda: S.JsonlSource(str(CORPUS))),
        "ResumablePipeline, JSONL.gz, record by record": resumable(lambda: RecordByRecordJsonl(str(CORPUS))),
        "ResumablePipeline, Parquet, columnar": resumable(lambda: S.ParquetSource(pq_path)),
        "ResumablePipeline, Parquet, record by record": resumable(lambda: RecordByRecordParquet(pq_path)),
        "DistributedPipeline (1 rank), JSONL.gz, columnar": distributed(True),
        "DistributedPipeline (1 rank), JSONL.gz, line by line": distributed(False),
        "DistributedPipeline (1 rank), text lines, columnar": distributed(True, text=True),
        "DistributedPipeline (1 rank), text lines, line by line": distributed(False, text=True),
        "collate + DataLoader, blocks of the JSONL source": collate(True),
        "collate + DataLoader, dicts read record by record": collate(False),
    }
    best = {k: float("inf") for k in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    shutil.rmtree(tmp, ignore_errors=True)
    base = best["FusedPipeline (texts in memory)"]
    table = [[name, f"{n / t:,.0f}", f"{mb / t:.1f}", f"{base / t:.2f}"] for name, t in best.items()]
    print_table(f"reading paths, {n:,} docs ({mb:.0f} MB), {T} threads, batch {B}, best of {args.rounds}",
                ["what", "docs/s", "MB/s", "x FusedPipeline"], table)
    print(f"(the whole benchmark took {time.perf_counter() - t_start:.0f} s)")


if __name__ == "__main__":
    main()
