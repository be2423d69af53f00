"""Collate throughput: luminamoon's collate vs a plain Python collate, and vs a
DataLoader running the same pipeline in Python (datatrove's filters + PII
formatter + a hash-set dedup), on one CPU core, in the same run.

    python bench/bench_collate.py [--batch-size 64] [--max-length 512] [--docs 4000]

Prints batches/s and the ratio (ours / peer; > 1 means we are faster).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from torch.nn.utils.rnn import pad_sequence  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from common import load_corpus, print_table  # noqa: E402

from luminamoon.data import create_resumable_collate  # noqa: E402


def python_collate(max_length):
    """What people write today: encode each text, make a tensor, pad_sequence."""
    def collate(samples):
        seqs = [torch.tensor(list(s["text"].encode("utf-8")[:max_length]), dtype=torch.int64) for s in samples]
        ids = pad_sequence(seqs, batch_first=True, padding_value=0)
        lengths = torch.tensor([len(s) for s in seqs])
        mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
        return {"input_ids": ids, "attention_mask": mask.long(), "lengths": lengths}
    return collate


def python_pipeline_collate(max_length):
    """The same pipeline in Python: datatrove's Gopher/C4/FineWeb filters + PII formatter + set dedup."""
    import xxhash
    from datatrove.data import Document
    from datatrove.pipeline.filters import (C4QualityFilter, FineWebQualityFilter, GopherQualityFilter,
                                            GopherRepetitionFilter)
    from datatrove.pipeline.formatters import PIIFormatter

    filters = [GopherRepetitionFilter(), GopherQualityFilter(), C4QualityFilter(filter_no_terminal_punct=False),
               FineWebQualityFilter()]
    pii = PIIFormatter()
    seen = set()
    inner = python_collate(max_length)

    def collate(samples):
        kept = []
        for s in samples:
            doc = Document(text=s["text"], id="x")
            ok = True
            for f in filters:
                r = f.filter(doc)
                if r is False or (isinstance(r, tuple) and r[0] is False):
                    ok = False
                    break
            if not ok:
                continue
            h = xxhash.xxh3_128_intdigest(doc.text.encode())
            if h in seen:
                continue
            seen.add(h)
            doc.text = pii.format(doc.text)
            kept.append({"text": doc.text})
        return inner(kept) if kept else inner([{"text": ""}])
    return collate


def rate(loader, limit_batches=None):
    n, t0 = 0, time.perf_counter()
    for _ in loader:
        n += 1
        if limit_batches and n >= limit_batches:
            break
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--docs", type=int, default=8000)
    ap.add_argument("--python-pipeline-batches", type=int, default=15,
                    help="batches timed for the (slow) Python pipeline")
    args = ap.parse_args()
    torch.set_num_threads(1)
    docs = [{"text": t} for t in load_corpus(args.docs)]
    bs, ml = args.batch_size, args.max_length
    print(f"{len(docs)} documents of the shared corpus, batch {bs}, max_length {ml}, one core, num_workers=0")

    rows = []
    ours_plain = rate(DataLoader(docs, batch_size=bs, collate_fn=create_resumable_collate(pipeline=None, max_length=ml)))
    py_plain = rate(DataLoader(docs, batch_size=bs, collate_fn=python_collate(ml)))
    rows.append(["collate only (bytes + pad)", f"{ours_plain:.0f}", "Python encode + pad_sequence", f"{py_plain:.0f}",
                 f"{ours_plain / py_plain:.1f}x"])
    ours_full = rate(DataLoader(docs, batch_size=bs, collate_fn=create_resumable_collate(max_length=ml)))
    try:
        py_full = rate(DataLoader(docs, batch_size=bs, collate_fn=python_pipeline_collate(ml)),
                       args.python_pipeline_batches)
        rows.append(["clean+quality+dedup+PII + collate", f"{ours_full:.0f}",
                     "DataLoader + the same pipeline in Python (datatrove)", f"{py_full:.1f}",
                     f"{ours_full / py_full:.0f}x"])
    except ImportError as e:
        rows.append(["clean+quality+dedup+PII + collate", f"{ours_full:.0f}", f"datatrove missing ({e})", "-", "-"])
    print_table("Collate: batches per second (ratio = ours / peer)", ["ours", "batches/s", "peer", "batches/s", "ratio"],
                rows)


if __name__ == "__main__":
    main()
