"""Scale-out on Ray Data (issue 16): the same stages, the same decisions, on a cluster.

``pip install luminamoon[ray]`` (``ray[data]``).  Two entry points:

* :func:`process` takes a ``ray.data.Dataset`` with a text column and returns a
  Dataset of the kept rows (text replaced by the output text), in input order.
  The C stages (``FusedPipeline``: cleaner, quality; then PII) run inside
  ``map_batches`` on Arrow batches (a ``StringTensor`` takes the Arrow column
  without copying the payload).
* ``luminamoon run ... --engine ray [--address ADDR]`` (:func:`run_corpus_ray`)
  writes the same Parquet/JSONL parts, ``stats.json`` and ``report.png`` as a
  local run: one Ray task per input file reads it with the local run's own
  sources (same ids, same bad-record handling) and runs the stages.

Global exact dedup has the single-process semantics (first occurrence in input
order kept): every document that passes the cleaner and the quality filter
carries a global order key (``file index << 40 | record index`` for a run,
the row's position for a Dataset) and its XXH3-128 (``luminamoon.hash128``,
the deduplicator's hash).  A hash-keyed shuffle sends ``(hash, order)`` to the
owner of the hash (``lo mod P`` over ``P`` owner tasks); an owner keeps the
smallest order key of each hash and sends back the order keys of the others
(the duplicates), split by input chunk; the decisions are joined back by order
key.  Near dedup (``--near-dup stream``) is the same on MinHash band keys
(``NearDeduplicator.keys``), over the documents that survive exact dedup: the
stream inserts the keys of every document that reaches it, so a document is a
near duplicate exactly when one of its keys is held by a document with a
smaller order key -- per key independent, hence an owner-side min.

Fault tolerance: every task is a pure function of its inputs (files, object
refs), so when Ray retries a task whose worker died (``max_retries``), its
result is the same and no document is lost or repeated.  ``run_corpus_ray``
checkpoints each finished input file's stage results in
``OUT/.luminamoon/ray/`` (pickle, written atomically); a stopped run restarted
with ``--resume`` reads those and processes only the other files.

Example:
    >>> import ray, luminamoon.ray as lr                                   # doctest: +SKIP
    >>> ds = ray.data.read_parquet("crawl/")                               # doctest: +SKIP
    >>> kept = lr.process(ds, text_column="text", near_dedup={})           # doctest: +SKIP
    >>> kept.write_parquet("clean/")                                       # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import pickle
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ._intarg import as_int

__all__ = ["process", "run_corpus_ray", "shuffle_stats"]

_FILE_SHIFT = 40  # order key of a run: file index << 40 | record index (2**40 records per file)
_CKPT_DIR = "ray"


def _ray():
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except ImportError as e:  # pragma: no cover - the extra is not installed
        raise ImportError("luminamoon.ray needs Ray Data: pip install 'luminamoon[ray]' "
                          f"(or pip install 'ray[data]') ({e})") from None
    return ray


# --------------------------------------------------------------- stages
def _pipes(stage_kw: Dict[str, Any]):
    """(stage A: cleaner + quality, stage B: PII) as FusedPipelines (None when off); one thread each:
    Ray gives a task one CPU."""
    from .stages import FusedPipeline

    a = b = None
    if stage_kw.get("cleaner") or stage_kw.get("quality"):
        a = FusedPipeline(cleaner=stage_kw.get("cleaner") or False, quality=stage_kw.get("quality") or False,
                          dedup=False, pii=False, num_threads=1)
    if stage_kw.get("pii"):
        b = FusedPipeline(cleaner=False, quality=False, dedup=False, pii=stage_kw["pii"], num_threads=1)
    return a, b


def _stage_a(texts, pipe_a, dedup_seed: Optional[int], near_cfg: Optional[Dict[str, Any]]):
    """Cleaner + quality on a StringTensor: (reasons int32 [n], passed idx int64 [m], cleaned texts
    StringTensor [m], hashes int64 [m, 2] or None, near (keys [m*B, 2], has [m]) or None, counters)."""
    import torch

    from .stages import NearDeduplicator, hash128

    n = len(texts)
    if pipe_a is not None:
        r = pipe_a(texts)
        reasons = r.reasons.numpy().astype(np.int32)
        passed = r.source_index.numpy().astype(np.int64)
        out = r.texts
    else:
        reasons = np.zeros(n, np.int32)
        passed = np.arange(n, dtype=np.int64)
        out = texts
    h = hash128(out, seed=dedup_seed).numpy() if dedup_seed is not None else None
    near = None
    if near_cfg is not None:
        cfg = {k: v for k, v in near_cfg.items() if k != "max_entries"}
        nd = NearDeduplicator(num_threads=1, **cfg)
        try:
            k, has = nd.keys(out)
        finally:
            nd.close()
        near = (k.numpy(), has.numpy().astype(bool))
    del torch
    return reasons, passed, out, h, near


def _split_by_owner(lo: np.ndarray, P: int) -> np.ndarray:
    return (lo.view(np.uint64) % np.uint64(P)).astype(np.int64)


def _keys_payload(order: np.ndarray, h, near, bands: int) -> Dict[str, Any]:
    return {"order": order, "h": h, "near_keys": None if near is None else near[0],
            "near_has": None if near is None else near[1], "bands": bands}


# ------------------------------------------------------------ shuffle tasks
_REC = np.dtype([("lo", "<i8"), ("hi", "<i8"), ("order", "<i8")])


def _records(lo, hi, order) -> np.ndarray:
    a = np.empty(len(order), _REC)
    a["lo"], a["hi"], a["order"] = lo, hi, order
    return a


def _partition(recs: np.ndarray, P: int) -> List[np.ndarray]:
    if P == 1:
        return [recs]
    owner = _split_by_owner(np.ascontiguousarray(recs["lo"]), P)
    idx = np.argsort(owner, kind="stable")
    cuts = np.searchsorted(owner[idx], np.arange(1, P))
    return [np.ascontiguousarray(x) for x in np.split(recs[idx], cuts)]


def _split_exact(keys: Dict[str, Any], P: int):
    h = keys["h"]
    recs = _records(h[:, 0], h[:, 1], keys["order"]) if h is not None and len(keys["order"]) else np.empty(0, _REC)
    parts = _partition(recs, P)
    return parts if P > 1 else parts[0]


def _losers(recs: np.ndarray) -> np.ndarray:
    """Order keys of the records whose (lo, hi) key is held by a smaller order key (sorted, unique)."""
    if recs.size == 0:
        return np.empty(0, np.int64)
    idx = np.lexsort((recs["order"], recs["hi"], recs["lo"]))
    s = recs[idx]
    first = np.ones(len(s), bool)
    first[1:] = (s["lo"][1:] != s["lo"][:-1]) | (s["hi"][1:] != s["hi"][:-1])
    return np.unique(s["order"][~first])


def _by_chunk(orders: np.ndarray, starts: np.ndarray) -> List[np.ndarray]:
    cuts = np.searchsorted(orders, starts[1:], side="left")
    return [np.ascontiguousarray(x) for x in np.split(orders, cuts)]


def _own(starts: np.ndarray, *parts):
    """An owner: all records of its keys -> per chunk, the sorted order keys that lose
    (plus, last, the bytes it received)."""
    recs = np.concatenate(parts) if parts else np.empty(0, _REC)
    lose = _losers(recs)
    out = _by_chunk(lose, starts)
    nbytes = int(sum(p.nbytes for p in parts)) + int(lose.nbytes)
    return (*out, {"bytes": nbytes, "records": int(recs.size), "distinct": int(recs.size - _n_repeats(recs))})


def _n_repeats(recs: np.ndarray) -> int:
    if recs.size == 0:
        return 0
    k = np.unique(recs[["lo", "hi"]])
    return int(recs.size - k.size)


def _split_near(keys: Dict[str, Any], P: int, *dups):
    """Band keys (with their document's order key) of the documents that survive exact dedup."""
    order = keys["order"]
    kk, has = keys["near_keys"], keys["near_has"]
    B = keys["bands"]
    if kk is None or not len(order):
        recs = np.empty(0, _REC)
    else:
        dup = np.concatenate(dups) if dups else np.empty(0, np.int64)
        alive = has & ~np.isin(order, dup, assume_unique=False)
        rows = np.repeat(alive, B)
        k = kk[rows]
        recs = _records(k[:, 0], k[:, 1], np.repeat(order[alive], B))
    parts = _partition(recs, P)
    return parts if P > 1 else parts[0]


# ------------------------------------------------------------ decisions
def _global_decisions(ray, keys_refs: List[Any], starts: np.ndarray, P: int, exact: bool, near: bool):
    """Per chunk: (refs of exact-dup order arrays, refs of near-dup order arrays); and the shuffle's
    bytes (exact, near)."""
    C = len(keys_refs)
    split_exact = ray.remote(_split_exact).options(num_returns=P)
    own = ray.remote(_own).options(num_returns=C + 1)
    split_near = ray.remote(_split_near).options(num_returns=P)
    starts_ref = ray.put(np.asarray(starts, np.int64))
    exact_dups: List[List[Any]] = [[] for _ in range(C)]
    near_dups: List[List[Any]] = [[] for _ in range(C)]
    nbytes = [0, 0]
    byte_refs: List[Tuple[int, Any]] = []
    if exact:
        parts = [split_exact.remote(k, P) for k in keys_refs]
        parts = [p if isinstance(p, list) else [p] for p in parts]
        for p in range(P):
            res = own.remote(starts_ref, *[parts[c][p] for c in range(C)])
            for c in range(C):
                exact_dups[c].append(res[c])
            byte_refs.append((0, res[C]))
    if near:
        parts = [split_near.remote(keys_refs[c], P, *exact_dups[c]) for c in range(C)]
        parts = [p if isinstance(p, list) else [p] for p in parts]
        for p in range(P):
            res = own.remote(starts_ref, *[parts[c][p] for c in range(C)])
            for c in range(C):
                near_dups[c].append(res[c])
            byte_refs.append((1, res[C]))
    return exact_dups, near_dups, nbytes, byte_refs


def _apply(n: int, reasons: np.ndarray, passed: np.ndarray, order: np.ndarray, exact_dups, near_dups):
    """Final reasons of a chunk: stage A's, then duplicate / near_duplicate by order key.  Returns
    (reasons, exact survivors (bool over ``passed``), kept (bool over ``passed``)): the local run's
    PII stage sees the exact survivors (its counters count the near duplicates' matches too)."""
    from .stages import REASON_DUPLICATE, REASON_NEAR_DUPLICATE

    reasons = reasons.copy()
    keep = np.ones(len(passed), bool)
    survivors = keep
    for dups, code in ((exact_dups, REASON_DUPLICATE), (near_dups, REASON_NEAR_DUPLICATE)):
        d = np.concatenate(dups) if dups else np.empty(0, np.int64)
        if d.size:
            hit = np.isin(order, d)
            reasons[passed[hit & keep]] = code
            keep = keep & ~hit
        if code == REASON_DUPLICATE:
            survivors = keep.copy()
    return reasons, survivors, keep


def _pii_stage(pipe_b, texts, pii_cycle=None):
    """PII over ``texts`` (a StringTensor of the exact-dedup survivors): (StageResult, counters view)."""
    from .cli.runner import _counter_view

    if pii_cycle is not None:
        pipe_b.pii_cycle = list(pii_cycle)
    res = pipe_b(texts)
    return res, _counter_view(pipe_b.counters)


# ------------------------------------------------------------ process(ds)
_PIPE_CACHE: Dict[str, Any] = {}


def _cached_pipes(stage_kw):
    key = json.dumps(stage_kw, sort_keys=True, default=str)
    if key not in _PIPE_CACHE:
        _PIPE_CACHE.clear()
        _PIPE_CACHE[key] = _pipes(stage_kw)
    return _PIPE_CACHE[key]


def _ds_stage_a(batch, text_column: str, stage_kw, dedup_seed, near_cfg):
    """map_batches: cleaner + quality on an Arrow batch; adds __lm_reason, __lm_text (cleaned or
    null), __lm_h (hash lo, hi) and __lm_near (band keys, flattened) columns."""
    import pyarrow as pa

    from .string_tensor import StringTensor

    col = batch.column(text_column)
    st = StringTensor.from_arrow(col)  # no copy of the payload
    pipe_a, _ = _cached_pipes(stage_kw)
    reasons, passed, out, h, near = _stage_a(st, pipe_a, dedup_seed, near_cfg)
    n = batch.num_rows
    texts = out.to_arrow()
    if texts.type != pa.large_string():
        texts = texts.cast(pa.large_string())
    take = np.full(n, -1, np.int64)
    take[passed] = np.arange(len(passed))
    mask = take < 0
    full = texts.take(pa.array(np.where(mask, 0, take), mask=mask)) if len(passed) else pa.nulls(n, pa.large_string())
    cols = {"__lm_reason": pa.array(reasons, pa.int32()), "__lm_text": full}
    hh = np.zeros((n, 2), np.int64)
    if h is not None and len(passed):
        hh[passed] = h
    cols["__lm_h"] = pa.FixedSizeListArray.from_arrays(pa.array(hh.reshape(-1)), 2)
    if near is not None:
        B = int(near_cfg.get("num_buckets", 14))
        kk = np.zeros((n, B * 2), np.int64)
        hs = np.zeros(n, bool)
        if len(passed):
            kk[passed] = near[0].reshape(len(passed), B * 2)
            hs[passed] = near[1]
        cols["__lm_near"] = pa.FixedSizeListArray.from_arrays(pa.array(kk.reshape(-1)), B * 2)
        cols["__lm_near_has"] = pa.array(hs)
    for k, v in cols.items():
        batch = batch.append_column(k, v)
    return batch


def _ds_keys(block, base: int, bands: int, near: bool):
    r = block.column("__lm_reason").to_numpy()
    passed = np.nonzero(r == 0)[0].astype(np.int64)
    h = np.asarray(block.column("__lm_h").combine_chunks().flatten().to_numpy()).reshape(-1, 2)[passed]
    nr = None
    if near:
        kk = np.asarray(block.column("__lm_near").combine_chunks().flatten().to_numpy()).reshape(-1, bands * 2)
        has = block.column("__lm_near_has").to_numpy(zero_copy_only=False).astype(bool)
        nr = (kk[passed].reshape(-1, 2), has[passed])
    return _keys_payload(base + passed, h, nr, bands)


def _num_rows(block) -> int:
    return int(block.num_rows)


def _ds_finish(block, base: int, text_column: str, stage_kw, keep_dropped: bool, exact_n: int, *dups):
    """Applies the decisions to a block, runs PII on the kept rows, drops the helper columns."""
    import pyarrow as pa
    import pyarrow.compute  # noqa: F401

    from .string_tensor import StringTensor

    r = block.column("__lm_reason").to_numpy().astype(np.int32)
    passed = np.nonzero(r == 0)[0].astype(np.int64)
    reasons, surv, keep = _apply(block.num_rows, r, passed, base + passed, list(dups[:exact_n]),
                                 list(dups[exact_n:]))
    _, pipe_b = _cached_pipes(stage_kw)
    kept = passed[keep]
    if pipe_b is not None and surv.any():
        sidx = np.nonzero(surv)[0]
        texts = block.column("__lm_text").take(pa.array(passed[sidx])).combine_chunks()
        pipe_b.reset_counters()  # a worker reuses its pipeline: each block starts the PII cycle at 0
        res, _ = _pii_stage(pipe_b, StringTensor.from_arrow(texts))
        rb = res.reasons.numpy()
        pos_out = np.full(len(sidx), -1, np.int64)
        pos_out[rb == 0] = np.arange(int((rb == 0).sum()))
        want = keep[sidx] & (rb == 0)
        reasons[passed[sidx[keep[sidx] & (rb != 0)]]] = rb[keep[sidx] & (rb != 0)]
        kept = passed[sidx[want]]
        st = res.texts[torch_index(pos_out[want])]
    else:
        texts = block.column("__lm_text").take(pa.array(kept)).combine_chunks()
        st = StringTensor.from_arrow(texts) if len(kept) else StringTensor.from_list([])
    out_text = st.to_arrow() if len(kept) else pa.array([], pa.large_string())
    drop = [c for c in block.column_names if c.startswith("__lm_")]
    if keep_dropped:
        n = block.num_rows
        full = pa.nulls(n, pa.large_string())
        if len(kept):
            pos = np.full(n, 0, np.int64)
            pos[kept] = np.arange(len(kept))
            m = np.zeros(n, bool)
            m[kept] = True
            full = pa.compute.if_else(pa.array(m), out_text.cast(pa.large_string()).take(pa.array(pos)), full)
        out = block.drop_columns(drop)
        i = out.column_names.index(text_column)
        out = out.set_column(i, text_column, full)
        return out.append_column("reason", pa.array(reasons, pa.int32()))
    out = block.drop_columns(drop).take(pa.array(kept))
    i = out.column_names.index(text_column)
    return out.set_column(i, text_column, out_text)


def process(ds, text_column: str = "text", stages: Optional[Dict[str, Any]] = None, dedup: Any = "global",
            near_dedup: Optional[Dict[str, Any]] = None, *, batch_size: int = 2048,
            num_partitions: Optional[int] = None, keep_dropped: bool = False):
    """Runs the luminamoon stages over a ``ray.data.Dataset``; returns a Dataset.

    Args:
        ds: a Dataset with a string column ``text_column`` (no nulls).
        stages: ``{"cleaner": ..., "quality": ..., "pii": ...}``, each True (defaults), False (off) or a
            dict of the stage's parameters (``luminamoon.cli.config.stage_kwargs(cfg)`` gives a run's);
            None: all three with defaults.
        dedup: ``"global"`` (exact dedup over the whole Dataset, first occurrence in input order
            kept), ``{"seed": S}`` (the same with the hash seed S) or False.
        near_dedup: None (off) or a dict of ``NearDeduplicator`` settings (``{}``: datatrove's
            defaults): global near dedup with the stream's semantics, on the text before PII
            masking, as ``FusedPipeline(near_dedup=...)`` and ``luminamoon run --near-dup stream``
            (its engine takes them in stage A, before PII, too).
        batch_size: rows per ``map_batches`` call.
        num_partitions: owner tasks of the hash shuffle (default: the cluster's CPUs).
        keep_dropped: also return dropped rows, with a ``reason`` column (0 = kept; text null).

    PII in datatrove mode cycles its replacements per block here (each block starts at 0);
    ``luminamoon run --engine ray`` carries the cycle across files like a local run.

    Returns a Dataset of the kept rows, ``text_column`` replaced by the output text (cleaned,
    PII-masked), other columns as they were.  Its blocks are in input order (the input's
    order: the stage-A result is materialized with ``preserve_order``); Ray Data yields blocks
    in that order when ``DataContext.get_current().execution_options.preserve_order`` is True
    (otherwise in the order they become ready).  The decisions do not depend on it.
    """
    ray = _ray()
    from ray.data import DataContext

    if not isinstance(text_column, str):
        raise TypeError(f"process: text_column must be a str, got {type(text_column).__name__}")
    if stages is None:
        stages = {"cleaner": True, "quality": True, "pii": True}
    if not isinstance(stages, dict) or set(stages) - {"cleaner", "quality", "pii"}:
        raise ValueError("process: stages must be a dict with keys among cleaner, quality, pii")
    if dedup == "global" or dedup is True:
        seed: Optional[int] = 0
    elif isinstance(dedup, dict):
        # review s34: {'seed': 'x'} raised int()'s bare message, 1.7 was truncated to 1, 2**64 failed
        # inside a Ray task and an unknown key ({'sed': 3}) was ignored (seed 0): checked here
        if set(dedup) - {"seed"}:
            raise ValueError(f"process: dedup accepts only the key 'seed', got {sorted(map(str, dedup))}")
        seed = dedup.get("seed", 0)
        if as_int(seed) is None:  # int, numpy integer (bool refused)
            raise TypeError(f"process: dedup['seed'] must be an int, got {type(seed).__name__}")
        seed = as_int(seed)
        if not -(1 << 63) <= seed < 1 << 64:
            raise ValueError(f"process: dedup['seed'] must be in [-2**63, 2**64) (64 bits), got {seed}")
    elif dedup is False or dedup is None:
        seed = None
    else:
        raise ValueError(f"process: dedup must be 'global', a dict {{'seed': S}} or False, got {dedup!r}")
    if near_dedup is not None and not isinstance(near_dedup, dict):
        raise TypeError(f"process: near_dedup must be None or a dict of NearDeduplicator settings, "
                        f"got {type(near_dedup).__name__}")
    if as_int(batch_size) is None or as_int(batch_size) < 1:
        raise ValueError(f"process: batch_size must be a positive int, got {batch_size!r}")
    batch_size = as_int(batch_size)
    # review s34: num_partitions=-1 / 2.5 / "2" failed inside Ray ('num_returns') or with an unrelated
    # TypeError, and keep_dropped="no" was taken as True: checked here, naming the argument
    if num_partitions is not None:
        if as_int(num_partitions) is None:
            raise TypeError(f"process: num_partitions must be a positive int or None, got {type(num_partitions).__name__}")
        num_partitions = as_int(num_partitions)
    if num_partitions is not None and num_partitions < 1:
        raise ValueError(f"process: num_partitions must be a positive int or None, got {num_partitions}")
    if not isinstance(keep_dropped, bool):
        raise TypeError(f"process: keep_dropped must be a bool, got {type(keep_dropped).__name__}")
    schema = ds.schema()
    if schema is None:  # review s34: a Dataset without rows or schema (from_items([])): AttributeError on .names
        return ds
    if text_column not in schema.names:
        raise ValueError(f"process: the Dataset has no column {text_column!r} (columns: "
                         f"{', '.join(schema.names)})")
    _check_text_type(schema, text_column)
    near_cfg = None
    if near_dedup is not None:
        from .stages import NearDeduplicator

        with NearDeduplicator(**near_dedup) as nd:  # checks the settings up front
            near_cfg = dict(nd.config)
    stage_kw = {k: stages.get(k, False) for k in ("cleaner", "quality", "pii")}
    try:  # review s34: a bad stage setting (pii=3) failed inside every Ray task; built once here to check it
        for x in _pipes(stage_kw):
            if x is not None:
                x.close()
    except (TypeError, ValueError) as e:
        raise type(e)(f"process: stages: {e}") from None
    P = num_partitions or max(1, int(ray.cluster_resources().get("CPU", 1)))
    ctx = DataContext.get_current()
    old = ctx.execution_options.preserve_order
    ctx.execution_options.preserve_order = True
    try:
        staged = ds.map_batches(_ds_stage_a, batch_format="pyarrow", batch_size=batch_size, zero_copy_batch=True,
                                fn_kwargs={"text_column": text_column, "stage_kw": stage_kw, "dedup_seed": seed,
                                           "near_cfg": near_cfg}).materialize()
        blocks = staged.to_arrow_refs()  # the blocks, in the Dataset's order
        rows = ray.get([ray.remote(_num_rows).remote(b) for b in blocks])
    finally:
        ctx.execution_options.preserve_order = old
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64) if rows else np.zeros(0, np.int64)
    # review s34: an empty block (an empty Dataset, or one a filter emptied) has none of the stage-A
    # columns (map_batches never ran on it): _ds_keys raised KeyError '__lm_reason'.  Empty blocks
    # hold no rows: left out (the order keys of the others are unchanged)
    nonempty = [c for c, n in enumerate(rows) if n]
    blocks, starts = [blocks[c] for c in nonempty], starts[nonempty]
    bands = int(near_cfg["num_buckets"]) if near_cfg else 0
    keys_task = ray.remote(_ds_keys)
    keys_refs = [keys_task.remote(b, int(s), bands, near_cfg is not None) for b, s in zip(blocks, starts)]
    if blocks:
        ex, nr, _, _ = _global_decisions(ray, keys_refs, starts, P, seed is not None, near_cfg is not None)
    else:
        ex, nr = [], []
    fin = ray.remote(_ds_finish)
    out = [fin.remote(b, int(s), text_column, stage_kw, keep_dropped, len(ex[c]), *ex[c], *nr[c])
           for c, (b, s) in enumerate(zip(blocks, starts))]
    if not out:
        return ds.filter(lambda r: False)
    return ray.data.from_arrow_refs(out)


def _check_text_type(schema, text_column: str) -> None:
    """TypeError unless ``text_column`` is a string (or binary) column; best effort (a schema whose
    types are not pyarrow's is not checked)."""
    import pyarrow as pa

    try:
        typ = schema.types[schema.names.index(text_column)]
    except Exception:  # pragma: no cover - an unusual schema object
        return
    if not isinstance(typ, pa.DataType):
        return
    ok = (pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_binary(typ)
          or pa.types.is_large_binary(typ) or getattr(pa.types, "is_string_view", lambda t: False)(typ)
          or getattr(pa.types, "is_binary_view", lambda t: False)(typ))
    if not ok:
        raise TypeError(f"process: column {text_column!r} must hold strings, it holds {typ}")


# ------------------------------------------------------------ luminamoon run --engine ray
def run_corpus_ray(inputs: Sequence[str], out: str, cfg: Optional[Dict[str, Any]] = None, *,
                   address: Optional[str] = None, **kw) -> Dict[str, Any]:
    """``luminamoon run INPUTS -o OUT --engine ray [--address ADDR]`` from Python: ``run_corpus``
    with ``engine="ray"`` (``cfg``: a run configuration, default ``default_config()``; ``kw``:
    ``resume``, ``overwrite``, ``quiet``, ``report``, ...).  Returns the stats.json dict.

    (review s34: named in ``__all__`` and the module's docs but missing, so
    ``from luminamoon.ray import *`` raised AttributeError.)"""
    from .cli.config import default_config
    from .cli.runner import run_corpus

    return run_corpus(inputs, out, default_config() if cfg is None else cfg, engine="ray", address=address, **kw)


def _file_stage_a(i: int, path: str, name: str, fmt: str, cfg: Dict[str, Any], keep: List[str]):
    """One input file: read with the local run's source (ids, surrogates, bad records as a local
    run), stage A in batches.  Returns (bulk, keys)."""
    import pyarrow as pa

    from .cli import runner as R
    from .cli.config import stage_kwargs
    from .cli.report import length_histogram
    from .string_tensor import StringTensor
    from .cli.writers import group_label, id_text, repair_surrogates

    icfg = cfg["input"]
    idf, tf = icfg["id_field"], icfg["text_field"]
    group_by = cfg["run"]["group_by"]
    src = R._input_source(R._make_source([path], fmt, cfg), idf, tf, [name])
    stage_kw = stage_kwargs(cfg)
    pipe_a, _ = _pipes({"cleaner": stage_kw.get("cleaner"), "quality": stage_kw.get("quality")})
    dedup_seed = int(cfg["dedup"]["seed"]) if cfg["dedup"]["enabled"] else None
    nd = cfg.get("near_dup") or {}
    # the run's near keys: the cleaned, unmasked text of the documents that pass quality (the fused
    # order, clean -> quality -> exact dedup -> near dedup -> PII; the decisions skip exact duplicates)
    near_cfg = R._near_stream_kwargs(nd) if nd.get("mode") == "stream" else None
    B = int(cfg["run"]["batch_size"])
    reasons_l, passed_l, texts_l, h_l, nk_l, nh_l = [], [], [], [], [], []
    len_in_l, skipped_l, surr_l, groups, ids, extra = [], [], [], [], [], {k: [] for k in keep}
    n = 0

    def flush(recs):
        nonlocal n
        if not recs:
            return
        texts = [r[tf] for r in recs]
        st = StringTensor.from_list(texts)
        off = st.offsets.numpy().astype(np.int64)
        len_in_l.append(off[1:] - off[:-1])
        rs, passed, out, h, near = _stage_a(st, pipe_a, dedup_seed, near_cfg)
        reasons_l.append(rs)
        passed_l.append(passed + n)
        texts_l.append(out.to_arrow())
        if h is not None:
            h_l.append(h)
        if near is not None:
            nk_l.append(near[0])
            nh_l.append(near[1])
        sk = np.zeros(len(recs), np.int64)
        su = np.zeros(len(recs), np.int8)
        for j, r in enumerate(recs):
            if R._SKIPPED in r:
                sk[j] = r.pop(R._SKIPPED)
            if R._SURROGATES in r:
                su[j] = r.pop(R._SURROGATES)
            if group_by:
                groups.append(group_label(r.get(group_by)))
        skipped_l.append(sk)
        surr_l.append(su)
        for j in passed.tolist():
            r = recs[j]
            ids.append(repair_surrogates(id_text(r.get(idf))))
            for k in keep:
                extra[k].append(repair_surrogates(r.get(k)))
        n += len(recs)

    buf = []
    for rec in src:
        buf.append(rec)
        if len(buf) >= B:
            flush(buf)
            buf = []
    flush(buf)
    trailing = int(src.skipped - src._seen_skipped)
    counters = R._counter_view(pipe_a.counters) if pipe_a is not None else {}
    cat = lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt)  # noqa: E731
    len_in = cat(len_in_l, np.int64)
    texts = [t.cast(pa.large_string()) if t.type != pa.large_string() else t for t in texts_l]
    bulk = {"n": n, "reasons": cat(reasons_l, np.int32), "passed": cat(passed_l, np.int64),
            "texts": pa.chunked_array(texts, pa.large_string()).combine_chunks(),
            "ids": ids, "extra": extra, "groups": groups if group_by else None,
            "len_in": len_in, "hist_in_total": length_histogram(len_in), "skipped": cat(skipped_l, np.int64),
            "surrogates": cat(surr_l, np.int8), "trailing_skipped": trailing, "counters": counters}
    order = (np.int64(i) << _FILE_SHIFT) + bulk["passed"]
    h = np.concatenate(h_l) if h_l else (np.zeros((0, 2), np.int64) if dedup_seed is not None else None)
    near = None
    if near_cfg is not None:
        near = (np.concatenate(nk_l) if nk_l else np.zeros((0, 2), np.int64),
                np.concatenate(nh_l) if nh_l else np.zeros(0, bool))
    keys = _keys_payload(order, h, near, int(near_cfg["num_buckets"]) if near_cfg else 0)
    return bulk, keys


def _file_stage_b(i: int, bulk: Dict[str, Any], stage_kw: Dict[str, Any], pii_cycle, near_cfg, exact_n: int,
                  *dups):
    """Exact- and near-dedup decisions joined back to one file (``dups``: the exact duplicates'
    order-key arrays, then the near duplicates'); PII on the survivors, as
    ``luminamoon run --near-dup stream`` (FusedPipeline's order: near dedup before PII).  Returns
    (the file's per-document reasons and surviving documents: ids, texts after PII, kept fields,
    PII counters; a keys payload without near keys: ``near_cfg`` is kept for old callers)."""
    import pyarrow as pa

    from .string_tensor import StringTensor

    passed = bulk["passed"]
    order = (np.int64(i) << _FILE_SHIFT) + passed
    reasons, _, surv = _apply(bulk["n"], bulk["reasons"], passed, order, list(dups[:exact_n]),
                              list(dups[exact_n:]))
    counters: Dict[str, Any] = {}
    cycle = None
    sel = np.nonzero(surv)[0]
    texts = bulk["texts"].take(pa.array(sel, pa.int64())) if len(sel) else pa.array([], pa.large_string())
    st = StringTensor.from_arrow(texts) if len(sel) else StringTensor.from_list([])
    if stage_kw.get("pii") and len(sel):
        _, pipe_b = _pipes({"pii": stage_kw["pii"]})
        res, counters = _pii_stage(pipe_b, st, pii_cycle)
        cycle = pipe_b.pii_cycle
        rb = res.reasons.numpy()
        reasons[passed[sel[rb != 0]]] = rb[rb != 0]
        sel = sel[rb == 0]
        st = res.texts
    off = st.offsets.numpy().astype(np.int64)
    kept_rows = passed[sel]
    keys = _keys_payload((np.int64(i) << _FILE_SHIFT) + kept_rows, None, None, 0)
    ids = [bulk["ids"][j] for j in sel.tolist()]
    extra = {k: [v[j] for j in sel.tolist()] for k, v in bulk["extra"].items()}
    res_d = {"reasons": reasons, "kept_rows": kept_rows, "ids": ids, "texts": st.to_arrow() if len(sel) else
             pa.array([], pa.large_string()), "len_out": off[1:] - off[:-1], "extra": extra,
             "counters": counters, "pii_cycle": cycle}
    return res_d, keys


def torch_index(idx: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(idx, dtype=np.int64))


def _pii_matches(bulk_res: Dict[str, Any]) -> List[int]:
    from .stages import PII_TYPES

    m = (bulk_res.get("counters") or {}).get("pii", {})
    return [int(m.get(t, 0)) for t in PII_TYPES]


def shuffle_stats(last: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Figures of the last ``run_corpus_ray`` in this process (shuffle bytes, documents, seconds)."""
    return dict(_LAST if last is None else last)


_LAST: Dict[str, Any] = {}


def _ckpt_path(state_dir: str, i: int) -> str:
    return os.path.join(state_dir, _CKPT_DIR, f"file-{i:06d}.pkl")


def _load_ckpt(path: str):
    try:
        with open(path, "rb") as f:
            data = pickle.load(f)
        if isinstance(data, dict) and data.get("version") == 1:
            return data["bulk"], data["keys"]
    except (OSError, EOFError, pickle.UnpicklingError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def _save_ckpt(path: str, bulk, keys) -> None:
    from ._durable import atomic_write

    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, pickle.dumps({"version": 1, "bulk": bulk, "keys": keys}, protocol=5))


def init_ray(address: Optional[str] = None, num_cpus: Optional[int] = None):
    """Connects to the cluster at ``address`` (``auto``, ``ray://host:10001``, ``host:6379``), or
    starts a local one (``num_cpus``, no dashboard) when none is running in this process."""
    ray = _ray()
    if ray.is_initialized():
        return ray
    kw: Dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                          "logging_level": "warning"}
    if address:
        ray.init(address=address, **kw)
    else:
        ray.init(num_cpus=num_cpus, **kw)
    return ray


def _run_ray(paths, got, fmt: str, out: str, cfg: Dict[str, Any], keep: List[str], manifest, resuming: bool,
             committed: List[bool], quiet: bool, log, title, report, stop_after_files: Optional[int],
             address: Optional[str] = None, num_partitions: Optional[int] = None) -> Dict[str, Any]:
    """The ``--engine ray`` body of ``runner._run`` (the output folder is locked and prepared)."""
    import torch

    from .cli import runner as R
    from .cli.config import ConfigError, stage_kwargs
    from .cli.report import RunStats, render_report
    from .string_tensor import StringTensor
    from .cli.writers import ShardWriter

    nd = cfg["near_dup"]
    if nd["mode"] == "cluster":
        raise ConfigError("--engine ray runs --near-dup stream (global, first occurrence kept); "
                          "--near-dup cluster is a local two-pass run")
    if cfg["dedup"]["max_entries"] or nd.get("max_entries"):
        log("note: --engine ray: dedup.max_entries / near_dup.max_entries bound a single process's table; "
            "the cluster's shuffle holds no table, the bound is not applied")
    threads = cfg["run"]["threads"] or None
    ray = init_ray(address, threads)
    t0 = time.perf_counter()
    state_dir = os.path.join(out, R.STATE_DIRNAME)
    ckdir = os.path.join(state_dir, _CKPT_DIR)
    if not resuming and os.path.isdir(ckdir):
        import shutil

        shutil.rmtree(ckdir)
    F = len(paths)
    stage_kw = stage_kwargs(cfg)
    P = num_partitions or max(1, int(ray.cluster_resources().get("CPU", 1)))
    task_a = ray.remote(_file_stage_a).options(num_returns=2, max_retries=5, retry_exceptions=False)
    bulk_refs: List[Any] = [None] * F
    keys_refs: List[Any] = [None] * F
    reused = 0
    pending: Dict[Any, int] = {}
    for i, p in enumerate(paths):
        ck = _load_ckpt(_ckpt_path(state_dir, i)) if resuming else None
        if ck is not None and nd["mode"] == "stream" and ck[1].get("near_keys") is None:
            ck = None  # stage A of an older version (near keys after PII, in stage B): run it again
        if ck is not None:
            bulk_refs[i], keys_refs[i] = ray.put(ck[0]), ray.put(ck[1])
            reused += 1
            continue
        b, k = task_a.remote(i, os.path.abspath(p), got.names[i], fmt, cfg, keep)
        bulk_refs[i], keys_refs[i] = b, k
        pending[k] = i
    if reused:
        log(f"resuming: {reused} of {F} input file(s) already processed (checkpoints in {ckdir})")
    done_files = 0
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for k in ready:
            i = pending.pop(k)
            try:
                bulk, keys = ray.get([bulk_refs[i], k])
            except ray.exceptions.RayTaskError as e:
                cause = e.cause if getattr(e, "cause", None) is not None else e
                hint = " (pass --skip-bad-records to skip and count bad records)" \
                    if type(cause).__name__ == "BadRecordError" and not cfg["input"]["skip_bad_records"] else ""
                raise R.RunError(f"{paths[i]}: {cause}{hint}") from None
            _save_ckpt(_ckpt_path(state_dir, i), bulk, keys)
            committed[0] = True
            done_files += 1
            if stop_after_files is not None and done_files >= stop_after_files:
                for kk in pending:
                    ray.cancel(kk, force=True)
                raise KeyboardInterrupt
    t_a = time.perf_counter()
    starts = (np.arange(F, dtype=np.int64) << _FILE_SHIFT)
    exact_on = bool(cfg["dedup"]["enabled"])
    near_on = nd["mode"] == "stream"
    # exact and near decisions together, before PII (near keys from stage A, exact duplicates excluded)
    ex, nr, _, byte_refs = _global_decisions(ray, keys_refs, starts, P, exact_on, near_on) if F \
        else ([], [], 0, [])
    task_b = ray.remote(_file_stage_b).options(num_returns=2, max_retries=5)
    datatrove_cycle = bool(stage_kw.get("pii")) and cfg["pii"]["mode"] == "datatrove"
    b_refs = [task_b.remote(i, bulk_refs[i], stage_kw, None, None, len(ex[i]), *ex[i], *nr[i]) for i in range(F)]
    if datatrove_cycle and F > 1:  # the replacement cycle runs across documents: each file starts where
        cyc = [0] * 6                # the earlier files' matches left it (counts first, then the masking)
        offsets = []
        for i in range(F):
            offsets.append(list(cyc))
            cyc = [a + b for a, b in zip(cyc, _pii_matches(ray.get(b_refs[i][0])))]
        b_refs = [task_b.remote(i, bulk_refs[i], stage_kw, offsets[i], None, len(ex[i]), *ex[i], *nr[i])
                  for i in range(F)]
    res_refs = [r[0] for r in b_refs]
    # ---- write, in input order, with the local run's batch boundaries and part boundaries
    ocfg = cfg["output"]
    try:
        writer = ShardWriter(out, fmt=ocfg["format"], compression=ocfg["compression"], part_docs=ocfg["part_docs"],
                             part_bytes=int(ocfg["part_mb"] * 1e6), state=None, extra_fields=keep,
                             extra_types=R._kept_types(paths, fmt, keep))
    except (OSError, ValueError) as e:
        raise R.RunError(str(e)) from None
    stats = RunStats()
    stats.meta.update({"inputs": [os.path.abspath(p) for p in paths],
                       "output": {"folder": os.path.abspath(out), "format": ocfg["format"]},
                       "threads": threads or torch.get_num_threads(), "group_by": cfg["run"]["group_by"],
                       "config": cfg, "engine": {"name": "ray", "address": address or "local",
                                                 "cpus": int(ray.cluster_resources().get("CPU", 0)),
                                                 "partitions": P}})
    Bsz = int(cfg["run"]["batch_size"])
    names: Dict[int, str] = {}
    carry_skip = 0
    acc = _BatchAcc()
    g = 0  # global record index

    def end_batch() -> None:
        acc.flush(stats, names)
        if writer.should_finish():
            if writer.pending_rows:
                manifest.add(f"part-{len(writer.parts):05d}{writer.suffix}")
            writer.finish_part()

    for i in range(F):
        bulk = ray.get(bulk_refs[i])
        res = ray.get(res_refs[i])
        n = bulk["n"]
        reasons = res["reasons"]
        kept_rows = res["kept_rows"]
        skipped = bulk["skipped"].copy()
        if n and carry_skip:
            skipped[0] += carry_skip
            carry_skip = 0
        carry_skip += bulk["trailing_skipped"]
        acc.counters_pending.append(bulk["counters"])
        acc.counters_pending.append(res["counters"])
        texts = StringTensor.from_arrow(res["texts"]) if len(kept_rows) else None
        pos = 0
        while pos < n:
            end = min(n, pos + (Bsz - g % Bsz))
            lo, hi = np.searchsorted(kept_rows, [pos, end])
            acc.add(reasons[pos:end], bulk["len_in"][pos:end], res["len_out"][lo:hi], skipped[pos:end],
                    bulk["surrogates"][pos:end], bulk["groups"][pos:end] if bulk["groups"] is not None else None)
            if hi > lo:
                writer.add(res["ids"][lo:hi], texts[int(lo):int(hi)],
                           {k: v[lo:hi] for k, v in res["extra"].items()} if keep else None)
            g += end - pos
            pos = end
            if g % Bsz == 0:
                end_batch()
        del bulk, res
    if acc.n:
        end_batch()
    elif acc.counters_pending:
        acc.flush(stats, names, counters_only=True)
    stats.add_skipped(carry_skip)
    if writer.pending_rows:
        manifest.add(f"part-{len(writer.parts):05d}{writer.suffix}")
    writer.finish_part()
    committed[0] = True
    nbytes, distinct = [0, 0], [0, 0]
    for which, ref in byte_refs:
        info = ray.get(ref)
        nbytes[which] += info["bytes"]
        distinct[which] += info["distinct"]
    t_end = time.perf_counter()
    near_info = None
    if near_on:
        near_info = {"mode": "stream", "removed": int(stats.dropped.get("near_duplicate", 0)), "engine": "ray",
                     "band_index": {"entries": distinct[1], "keys_per_document": int(nd["num_buckets"]),
                                    "shuffle_bytes_per_document": round(nbytes[1] / max(stats.docs_in, 1), 1)}}
        stats.meta["near_dup"] = near_info
    figures = {"partitions": P, "files": F, "files_reused": reused, "documents": int(stats.docs_in),
               "shuffle_bytes_exact": nbytes[0], "shuffle_bytes_near": nbytes[1],
               "shuffle_bytes_per_doc": round((nbytes[0] + nbytes[1]) / max(stats.docs_in, 1), 2),
               "stage_a_seconds": round(t_a - t0, 3), "seconds": round(t_end - t0, 3)}
    stats.meta["engine"].update(figures)
    _LAST.clear()
    _LAST.update(figures)
    result = stats.to_json()
    result["output"]["parts"] = [p["name"] for p in writer.parts]
    result["output"]["rows"] = writer.state()["rows"]
    result["input_files"] = {"read": len(paths), "skipped": {k: len(v) for k, v in got.skipped.items()}}
    manifest.add("stats.json")
    R._write_json(os.path.join(out, "stats.json"), result)
    if report:
        manifest.add("report.png")
        render_report(result, os.path.join(out, "report.png"), title=title or f"luminamoon run (ray) → {out}")
    R._mark_complete(state_dir)
    return result


class _BatchAcc:
    """One local-run batch's numbers, accumulated across the files it spans."""

    def __init__(self) -> None:
        self.reset()
        self.counters_pending: List[Dict[str, Any]] = []

    def reset(self) -> None:
        self.n = 0
        self.reasons: List[np.ndarray] = []
        self.len_in: List[np.ndarray] = []
        self.len_out: List[np.ndarray] = []
        self.skipped = 0
        self.surrogates = 0
        self.groups: List[str] = []
        self.has_groups = False

    def add(self, reasons, len_in, len_out, skipped, surrogates, groups) -> None:
        self.n += len(reasons)
        self.reasons.append(reasons)
        self.len_in.append(len_in)
        self.len_out.append(len_out)
        self.skipped += int(skipped.sum())
        self.surrogates += int(surrogates.sum())
        if groups is not None:
            self.has_groups = True
            self.groups.extend(groups)

    def flush(self, stats, names: Dict[int, str], counters_only: bool = False) -> None:
        from .cli.report import length_histogram, reason_counts
        from .stages import reason_name

        counters: Dict[str, Dict[str, int]] = {}
        for c in self.counters_pending:
            for sec, d in (c or {}).items():
                o = counters.setdefault(sec, {})
                for k, v in d.items():
                    o[k] = o.get(k, 0) + int(v)
        self.counters_pending = []
        if counters_only:
            stats.add_batch(0, 0, {}, 0, 0, None, None, counters, 0, None)
            return
        reasons = np.concatenate(self.reasons) if self.reasons else np.zeros(0, np.int32)
        len_in = np.concatenate(self.len_in) if self.len_in else np.zeros(0, np.int64)
        len_out = np.concatenate(self.len_out) if self.len_out else np.zeros(0, np.int64)
        dropped = reason_counts(reasons, names)
        if self.surrogates:
            counters["input"] = {"docs_with_lone_surrogates": self.surrogates}
        groups = None
        if self.has_groups:
            groups = {}
            for gname, c in zip(self.groups, reasons.tolist()):
                o = groups.setdefault(gname, {})
                key = "kept" if c == 0 else names.setdefault(c, reason_name(c))
                o[key] = o.get(key, 0) + 1
        stats.add_batch(self.n, int((reasons == 0).sum()), dropped, int(len_in.sum()), int(len_out.sum()),
                        length_histogram(len_in), length_histogram(len_out), counters, self.skipped, groups)
        self.reset()
