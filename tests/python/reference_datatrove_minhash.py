"""Reference near-duplicate removal: datatrove 0.10.1's four MinHash stages.

A small importable helper (it holds no tests), used by tests/python/test_near_dup_cluster.py
and bench/bench_near_dup_quality.py.  ``run_datatrove_minhash(texts, workdir)`` writes
the texts to one JSONL file and runs, each with datatrove's ``LocalPipelineExecutor``
and the default ``MinhashConfig`` (5-grams, 14 buckets x 8 hashes, seed 1, 64-bit
xxhash):

1. ``MinhashDedupSignature`` (one task: one signature file per bucket, sorted),
2. ``MinhashDedupBuckets`` (one task per bucket: the duplicate pairs),
3. ``MinhashDedupCluster`` (union-find over the pairs: the ``.remove`` file),
4. ``MinhashDedupFilter`` (the documents kept, and the removed ones through its
   exclusion writer).

It returns the indices (into ``texts``) of the documents the Filter stage removed,
and datatrove's own signatures, read back from the stage-1 files (each record holds
a bucket's hashes and the document's index), so that a clustering can be compared
with datatrove's on exactly the same signatures.

Requires datatrove 0.10.x with ``xxhash<4`` (datatrove hashes ``str``).
"""
from __future__ import annotations

import json
import logging
import os
import struct
from typing import Dict, List, Optional, Sequence

import numpy as np

__all__ = ["run_datatrove_minhash", "datatrove_signatures"]


def _quiet() -> None:
    try:
        from loguru import logger

        logger.remove()
    except Exception:  # pragma: no cover
        pass
    logging.getLogger("datatrove").setLevel(logging.ERROR)


def run_datatrove_minhash(texts: Sequence[str], workdir: str, config=None, tasks_buckets: Optional[int] = None,
                          ids: Optional[Sequence[str]] = None) -> Dict[str, object]:
    """Runs the four stages over ``texts`` in ``workdir``.  Returns
    ``{"removed": sorted list of indices, "signatures": uint64 [N, B*R] (rows of documents
    datatrove gave no signature -- fewer words than n_grams -- are all 2**64-1),
    "has_signature": bool [N], "kept_ids": ids the Filter forwarded}``."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (MinhashConfig, MinhashDedupBuckets, MinhashDedupCluster,
                                                  MinhashDedupFilter, MinhashDedupSignature)
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    _quiet()
    cfg = config or MinhashConfig()
    n = len(texts)
    ids = [str(i) for i in range(n)] if ids is None else [str(x) for x in ids]
    data = os.path.join(workdir, "input")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "docs.jsonl"), "w", encoding="utf-8") as f:
        for i, t in zip(ids, texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    sigs, buckets, remove = (os.path.join(workdir, x) for x in ("signatures", "buckets", "remove_ids"))
    kept, removed_dir = os.path.join(workdir, "kept"), os.path.join(workdir, "removed")

    def run(pipeline, tasks, name):
        LocalPipelineExecutor(pipeline=pipeline, tasks=tasks, workers=1, logging_dir=os.path.join(workdir, "logs", name),
                              skip_completed=False).run()

    run([JsonlReader(data), MinhashDedupSignature(output_folder=sigs, config=cfg)], 1, "1-signature")
    sig = datatrove_signatures(sigs, n, cfg, positions=[i for i, t in enumerate(texts) if t])
    run([MinhashDedupBuckets(input_folder=sigs, output_folder=buckets, config=cfg)],
        tasks_buckets or cfg.num_buckets, "2-buckets")
    run([MinhashDedupCluster(input_folder=buckets, output_folder=remove, config=cfg)], 1, "3-cluster")
    run([JsonlReader(data), MinhashDedupFilter(input_folder=remove, exclusion_writer=JsonlWriter(removed_dir)),
         JsonlWriter(kept)], 1, "4-filter")
    pos = {x: i for i, x in enumerate(ids)}
    removed_ids = _read_ids(removed_dir)
    out: Dict[str, object] = {"removed": sorted(pos[x] for x in removed_ids), "kept_ids": _read_ids(kept)}
    out["signatures"], out["has_signature"] = sig
    return out


def _read_ids(folder: str) -> List[str]:
    import gzip

    out: List[str] = []
    if not os.path.isdir(folder):
        return out
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name)
        opener = gzip.open if name.endswith(".gz") else open
        with opener(p, "rt", encoding="utf-8") as f:
            out += [json.loads(line)["id"] for line in f if line.strip()]
    return out


def datatrove_signatures(sig_folder: str, n: int, config=None, positions: Optional[Sequence[int]] = None):
    """datatrove's stage-1 output read back: (uint64 [n, B*R], bool [n] has a signature).
    datatrove's document index k is the k-th document its reader yielded; its reader skips
    empty texts, so ``positions[k]`` is that document's input position (default: k)."""
    from datatrove.pipeline.dedup.minhash import MinhashConfig

    cfg = config or MinhashConfig()
    r, b = cfg.hashes_per_bucket, cfg.num_buckets
    fmt = cfg.hash_config.struct_format
    dt = np.dtype([("sig", f"<{'u8' if fmt == 'Q' else 'u4'}", (r,)), ("doc", "<u4")])
    out = np.full((n, b * r), np.iinfo(np.uint64).max, dtype=np.uint64)
    has = np.zeros(n, dtype=bool)
    for bi in range(b):
        p = os.path.join(sig_folder, f"bucket_{bi:03d}", "00000.minhash.sig")
        rec = np.fromfile(p, dtype=dt)
        if positions is not None:
            rec["doc"] = np.asarray(positions, dtype=np.int64)[rec["doc"].astype(np.int64)]
        out[rec["doc"], bi * r:(bi + 1) * r] = rec["sig"]
        has[rec["doc"]] = True
    assert struct.calcsize(f"<{r}{fmt}I") == dt.itemsize
    return out, has
