"""ResumablePipeline: background prefetch, atomic commit and exact resume.  The commit and
recovery protocol is written out below and in core/include/luminamoon/state.h.

The promise: kill the process at any instant, restart with the same
``state_dir``, and every document is delivered exactly once across the runs'
committed output — none skipped, none repeated, none wrongly dropped as a
duplicate.

How:

* a background thread reads records from the source, runs the pipeline (clean
  → quality → dedup → PII) and puts ``Batch`` objects into a bounded
  ``queue.Queue`` (``prefetch_batches``);
* ``commit()`` makes durable the coordinate of the **last batch the consumer
  received** — never one the thread produced ahead: first the dedup WAL is
  synced, then a small JSON sidecar (source position + your ``extra``) is
  written atomically, then the 64-byte state slot naming that sidecar is
  written and synced (``StateTracker``: two slots, a torn write leaves the
  other valid);
* on restart the newest valid slot is loaded, the dedup WAL **and table** are
  truncated back to the committed LSN (hashes of batches after the checkpoint
  are forgotten, so those documents are not wrongly dropped when read again),
  and the source is positioned at the committed coordinate.

Example:
    >>> from luminamoon.data import ResumablePipeline, JsonlSource
    >>> with ResumablePipeline(JsonlSource("shards/*.jsonl.gz"), batch_size=512,
    ...                        state_dir="ckpt") as pipe:           # doctest: +SKIP
    ...     for batch in pipe:
    ...         train_on(batch.texts)
    ...         if batch.index % 100 == 0:
    ...             pipe.commit()
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import weakref
import zlib
from dataclasses import dataclass, field
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Union

import torch

from .._intarg import as_int
from ._prefetch import (DEFAULT_MAX_PREFETCH_BYTES, END, Prefetcher, atomic_write, check_max_bytes,
                        empty_prefetch_stats, lock_state_dir, tensor_memory, unlock_state_dir)
from .checkpoint import (STATE_VERSION as _STATE_VERSION, WAL_HEADER as _WAL_HEADER, describe_setting,  # noqa: F401
                         check_wal_keeps, dump_json, inspect_wal, load_json_checked, local_wal_path,
                         run_differences, sidecar_path, source_differences, state_path, wal_bytes, wal_tag)
from .sources import Source, as_source, refuse_lone_surrogates

__all__ = ["Batch", "ResumablePipeline"]



class _Resources:
    """What a ResumablePipeline must release: its prefetch thread, dedup log, state file and
    folder lock.  Held apart from the pipeline (a ``weakref.finalize`` closes it), so a
    pipeline dropped without ``close()`` is collected and releases them."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        # serialises use of the pipeline/dedup between threads; re-entrant, so that a commit()
        # from a signal handler that interrupts the consumer's own batch (prefetch_batches=0)
        # does not deadlock (the native call has returned: handlers run between bytecodes)
        self.lock = threading.RLock()
        self.prefetch: Optional[Prefetcher] = None
        self.dedup = None
        self.near = None
        self.state = None
        self.lock_fd = -1
        self.own_dir: Optional[str] = None
        self.pid = os.getpid()  # the process they belong to

    def close(self) -> None:
        """Release everything, even when a step fails (a full disk failing the WAL's last
        flush must not keep the folder locked); the first error is raised at the end.

        In a child forked from the owner (its interpreter exit, or the pipeline dropped there, runs
        this) nothing is touched: the thread is not there, ``lock`` or the queue's lock may be held
        by a thread that is not there either, and the folder and its files are the parent's."""
        if os.getpid() != self.pid:
            # review s35: it waited forever on ``lock`` held by the parent's producer at the fork
            # (the child never exited), or removed the parent's private state_dir (the parent's
            # next commit failed: FileNotFoundError).  The lock's descriptor is closed at the fork.
            if self.prefetch is not None and self.prefetch._thread.is_alive():  # started here, in the child
                self.prefetch.stop()
            return
        self.stop.set()
        # the thread first, outside the lock (it may be waiting for it to finish a batch)
        first = _run_all([lambda: self.prefetch is not None and self.prefetch.stop()])
        with self.lock:
            later = _run_all([lambda: self.dedup is not None and self.dedup.close(),
                              lambda: self.near is not None and self.near.close(),
                              lambda: self.state is not None and self.state.close()])
        first = first or later
        unlock_state_dir(self.lock_fd)
        self.lock_fd = -1
        if self.own_dir is not None:
            shutil.rmtree(self.own_dir, ignore_errors=True)
        if first is not None:
            raise first


def _run_all(steps: List[Callable[[], Any]]) -> Optional[BaseException]:
    """Call each step; return the first exception (the others are dropped)."""
    first = None
    for step in steps:
        try:
            step()
        except BaseException as e:  # noqa: PERF203 - each resource is released regardless
            if first is None:
                first = e
    return first


#: Blocks submitted ahead to a pipeline's stream on the reading path (one running, one queued).
STREAM_DEPTH = 2


class _Producer:
    """What the prefetch thread runs.  It holds the source, the stages and the lock, never
    the ResumablePipeline itself (see ``_Resources``)."""

    def __init__(self, source: Source, pipeline: Any, dedup: Any, batch_size: int, text_key: str,
                 res: _Resources, near: Any = None, near_after: bool = False) -> None:
        self.source, self.pipeline, self.dedup = source, pipeline, dedup
        self.near, self.near_after = near, near_after  # near_after: run the near stage after the pipeline
        self.batch_size, self.text_key, self.res = batch_size, text_key, res
        self.start = {"batch_index": 0, "sample_index": 0, "epoch": 0}
        self.read_ahead = 2  # blocks read ahead of the stages on the reader thread (0: none)

    def produce_one(self, it: Iterator[Dict[str, Any]], index: int, sample_index: int) -> Optional["Batch"]:
        from ..string_tensor import StringTensor

        texts: List[str] = []
        records: List[Dict[str, Any]] = []
        key = self.text_key
        for rec in it:
            t = rec.get(key) if isinstance(rec, dict) else None
            if not isinstance(t, str):
                raise ValueError(f"record {sample_index + len(texts)} has no str field {key!r}")
            texts.append(t)
            records.append({k: v for k, v in rec.items() if k != key})
            if len(texts) == self.batch_size:
                break
        if not texts:
            return None
        return self._process(StringTensor.from_list(texts), records, len(texts), self.source.position(),
                             index, sample_index)

    def _process(self, st: Any, records: Any, n: int, pos: Dict[str, Any], index: int, sample_index: int,
                 block: Any = None) -> "Batch":
        """Runs the stages on one batch of ``n`` input texts and makes its Batch."""
        bytes_in = st.nbytes
        cycle = None
        with self.res.lock:
            if self.pipeline is None:
                out, reasons = st, torch.zeros(n, dtype=torch.int32)
                src_idx = torch.arange(n, dtype=torch.int64)
            else:
                r = self.pipeline(st)
                out, reasons, src_idx = r.texts, r.reasons, r.source_index
                cycle = _get_cycle(self.pipeline)
            if self.near_after:  # a custom pipeline (or none): the near stage on its outputs
                r = self.near(out)
                reasons = reasons.clone()
                reasons[src_idx] = torch.where(r.reasons != 0, r.reasons, reasons[src_idx])
                out, src_idx = r.texts, src_idx[r.source_index]
            lsn = self.dedup.lsn if self.dedup is not None else 0
            near_lsn = self.near.lsn if self.near is not None else None
        return self._batch(out, reasons, src_idx, lsn, near_lsn, cycle, records, n, bytes_in, pos, index,
                           sample_index, block)

    def _batch(self, out: Any, reasons: torch.Tensor, src_idx: torch.Tensor, lsn: int, near_lsn: Optional[int],
               cycle: Optional[List[int]], records: Any, n: int, bytes_in: int, pos: Dict[str, Any], index: int,
               sample_index: int, block: Any) -> "Batch":
        """The Batch of a processed batch, with its coordinate (what a commit after it records)."""
        coord = {"version": _STATE_VERSION, "source": pos, "batch_index": index + 1,
                 "sample_index": sample_index + n, "epoch": self.start["epoch"], "wal_lsn": lsn}
        if near_lsn is not None:
            coord["near_wal_lsn"] = near_lsn
        if cycle is not None:
            coord["pii_cycle"] = cycle
        return Batch(index, out, reasons, src_idx, records, n, bytes_in, coord, block)

    def batches(self) -> Iterator["Batch"]:
        if getattr(self.source, "_columnar", False) and callable(getattr(self.source, "iter_blocks", None)):
            yield from self._block_batches()
            return
        it = iter(self.source)
        index, sample = self.start["batch_index"], self.start["sample_index"]
        while not self.res.stop.is_set():
            b = self.produce_one(it, index, sample)
            if b is None:
                return
            index, sample = b.coord["batch_index"], b.coord["sample_index"]
            yield b


    def _block_batches(self) -> Iterator["Batch"]:
        """The columnar reading path (``source.iter_blocks``): no Python object per record;
        with ``read_ahead`` the source is read (decompressed, scanned) on a thread of its
        own, a few blocks ahead of the stages (the C parts release the GIL)."""
        index, sample = self.start["batch_index"], self.start["sample_index"]
        blocks = self.source.iter_blocks(self.batch_size)
        pf = None
        if self.read_ahead:
            pf = Prefetcher(lambda: blocks, self.read_ahead, name="luminamoon-read")

            def get():
                item = pf.get()
                return None if item is END else item
        else:
            def get():
                return next(blocks, None)

        def nxt():
            # a block cut short by a bad record (on_error="raise") is not a batch: the batches
            # stay whole, and the error raises next; nothing is committed past the last whole
            # batch, so a resume reads those records again
            blk = get()
            while blk is not None and getattr(blk, "error_follows", False):
                blk = get()
            return blk
        stream = None
        # not with prefetch_batches=0 (read_ahead 0): the consumer's own thread then produces each
        # batch when asked, nothing ahead (the stream would read and run the next block meanwhile)
        if self.read_ahead and not self.near_after and _streams_as_called(self.pipeline):
            stream = self.pipeline._stream(STREAM_DEPTH)
            if stream.dedup is not self.dedup or stream.near_dedup is not self.near:
                # the LSNs a commit records are those of this pipeline's deduplicators: a callable
                # holding others (or none) goes batch by batch, reading them after each batch
                stream.close()
                stream = None
        try:
            if stream is not None:
                yield from self._streamed(stream, nxt, index, sample)
                return
            while not self.res.stop.is_set():
                blk = nxt()
                if blk is None:
                    return
                b = self._process(blk.texts, blk.records, len(blk), blk.position, index, sample, blk)
                index, sample = b.coord["batch_index"], b.coord["sample_index"]
                yield b
        finally:
            if stream is not None:
                stream.close()  # the batches not run dropped, the running one waited for
            if pf is not None:
                pf.stop()

    def _streamed(self, stream: Any, nxt: Callable[[], Any], index: int, sample: int) -> Iterator["Batch"]:
        """The blocks through the pipeline's stream (``FusedPipeline._stream``): up to
        ``STREAM_DEPTH`` blocks are submitted ahead, so the native thread running them starts the
        next one as soon as one ends, whoever holds the GIL then.  Same batches, coordinates and
        errors as ``_process`` one block at a time: a block's results are yielded in order, a
        failed batch raises at its turn (no later batch runs), and an error of the reader raises
        after the batches of the blocks before it."""
        pending: Deque[Any] = deque()
        failure: Optional[BaseException] = None
        ended = False
        while not self.res.stop.is_set():
            while not ended and failure is None and len(pending) < STREAM_DEPTH:
                try:
                    blk = nxt()
                except Exception as e:  # raised after the batches before it, as one block at a time
                    failure = e
                    break
                if blk is None:
                    ended = True
                    break
                stream.submit(blk.texts)
                pending.append(blk)
            if not pending:
                if failure is not None:
                    raise failure
                return
            blk = pending.popleft()
            n = len(blk)
            bytes_in = blk.texts.nbytes
            r, lsn, near_lsn, cycle, counters = stream.collect()
            b = self._batch(r.texts, r.reasons, r.source_index, lsn, near_lsn, _cycle_or_none(cycle), blk.records,
                            n, bytes_in, blk.position, index, sample, blk)
            index, sample = b.coord["batch_index"], b.coord["sample_index"]
            yield b


def _streams_as_called(pipeline: Any) -> bool:
    """Whether the pipeline's batches may go through its ``_stream`` (which runs the C pipeline
    itself): ``_stream`` is defined by its class, and ``__call__`` / ``_run_raw`` are not overridden
    below the class that defines it (a FusedPipeline subclass with its own ``__call__`` is called;
    so is a wrapper that reaches a pipeline's ``_stream`` through ``__getattr__``)."""
    if not callable(getattr(pipeline, "_stream", None)):
        return False
    mro = type(pipeline).__mro__

    def owner(name: str) -> Any:
        return next((c for c in mro if name in vars(c)), None)

    home = owner("_stream")
    if home is None:
        return False
    return all(o is None or issubclass(home, o) for o in (owner("__call__"), owner("_run_raw")))


def _get_cycle(pipeline: Any) -> Optional[List[int]]:
    """The pipeline's PII replacement cycle (None when it has none, or it is all zeros)."""
    try:
        cyc = pipeline.pii_cycle
    except AttributeError:
        return None
    return _cycle_or_none(cyc)


def _cycle_or_none(cyc: Any) -> Optional[List[int]]:
    """A PII replacement cycle as the coordinate records it: a list of ints, None when all zeros."""
    cyc = [int(x) for x in cyc]
    return cyc if any(cyc) else None


@dataclass
class Batch:
    """One batch as the consumer receives it.

    ``texts`` are the pipeline's outputs (kept documents, cleaned and masked) in
    input order; ``reasons`` has one code per *input* record (0 = kept, see
    ``luminamoon.reason_name``); ``source_index`` maps each output to its input;
    ``records`` holds each input record without its text field (ids, metadata).
    """

    index: int
    texts: Any
    reasons: torch.Tensor
    source_index: torch.Tensor
    records: List[Dict[str, Any]]
    n_in: int
    bytes_in: int
    coord: Dict[str, Any] = field(repr=False, default_factory=dict)
    #: the source's RecordBlock (columnar reading path: ``lines``, ``shards``, ``skipped``), else None
    block: Any = field(repr=False, default=None)

    @property
    def memory_bytes(self) -> int:
        """Bytes of native memory the batch holds: its texts' storages, reasons and
        source_index (the records' Python objects are not counted)."""
        return tensor_memory(self.texts) + tensor_memory(self.reasons) + tensor_memory(self.source_index)

    @property
    def kept_records(self) -> List[Dict[str, Any]]:
        """The records of the kept documents, aligned with ``texts``."""
        return [self.records[i] for i in self.source_index.tolist()]


class ResumablePipeline:
    """Iterate processed batches from a source, with exact, crash-safe resume.

    Args:
        source: a ``luminamoon.data`` source (JSONL / text / Parquet files resume
            in O(1) by position; ``IterableSource`` replays and skips), or any
            re-iterable of ``str`` / dicts (wrapped in ``IterableSource``).
        pipeline: ``"fused"`` (default: one pass, clean → quality → dedup → PII),
            ``"chain"`` (the four stages as separate batch calls), ``None`` (no
            processing), or a callable ``StringTensor -> StageResult`` holding no
            dedup state of its own.
        dedup: exact deduplication across batches and restarts (its WAL lives
            in ``state_dir``): True, False, or a dict of ``StreamDeduplicator``
            arguments (``seed``, ``max_entries`` — the bound on the table: at it,
            iteration raises ValueError saying the table is full —,
            ``initial_capacity``, ``wal_buffer_hashes``).  ``dedup_stats`` reports
            the table's entries and bytes.
        near_dedup: near-duplicate removal across batches and restarts
            (``luminamoon.NearDeduplicator``: MinHash LSH band keys, reason
            ``near_duplicate``; its WAL is ``state_dir/near_dedup.wal``, synced
            and truncated with every commit exactly like the exact dedup WAL):
            False (default), True, or a dict of NearDeduplicator arguments
            (``seed``, ``n_grams``, ``num_buckets``, ``hashes_per_bucket``,
            ``precision``, ``max_entries``, ``initial_capacity``,
            ``wal_buffer_hashes``).  It runs after exact dedup and before PII;
            with a callable pipeline (or None) it runs on the pipeline's outputs, unless
            the callable has ``runs_near_dedup = True`` and a ``bind_near_dedup(index)``
            method: it is then given the index and runs it itself (before PII).
            ``near_dedup_stats`` reports the band index.
        stages: keyword arguments for ``FusedPipeline``/``ChainPipeline``
            (``cleaner=``, ``quality=``, ``pii=``).
        batch_size: input records per batch.
        prefetch_batches: batches produced ahead by the background thread (0:
            produce in the consumer's thread).
        max_prefetch_bytes: bound on the memory of the prefetched batches
            (``Batch.memory_bytes`` summed over the queue; default 256 MiB,
            ``None``: only ``prefetch_batches`` bounds it).  A single batch
            larger than the bound is still delivered, alone in the queue.
            ``prefetch_stats`` reports queued and peak bytes.  Besides the queue,
            the columnar reading path (file sources, ``prefetch_batches >= 1``)
            holds up to two read blocks ahead of it and ``STREAM_DEPTH`` (2) in the
            stages: one running on a native thread that needs no GIL, the next
            queued behind it (``FusedPipeline``; other pipelines one at a time).
        state_dir: where the state slots, commit sidecars and the dedup WAL
            live.  ``None``: a private temporary folder (in-process
            ``state_dict``/``load_state_dict`` still work; nothing survives the
            process).  A folder with a committed state is resumed from it.
        text_key: the records' text field.
        num_threads: C threads per batch (default: ``torch.get_num_threads()``).

    Resume never guesses: each commit records what shapes the
    output — the stages and their settings, dedup on/off and its seed, the
    batch size, the text key and the source's ``identity()`` (file sources: each
    file's size, mtime and sampled SHA-256; a list / tuple / range: its length and
    a CRC of 32 sampled records; iterators and factories have none, so a changed
    one cannot be detected) — and a pipeline built with other
    settings, or over changed files, is refused with ValueError saying what
    differs.  The dedup logs are checked read-only before they are opened
    (opening cuts a damaged tail): one that lost committed records is refused
    (OSError) unchanged, and so is a ``dedup.wal`` from another state folder (each
    folder's log carries a random tag in its header, recorded with every commit;
    open it by hand with ``tag=luminamoon._C.dedup_wal_inspect(path)["tag"]``).  A folder holding commit sidecars or a non-empty dedup log but no
    ``state`` file is refused (OSError) and left as it is.  The datatrove-mode
    PII replacement cycle is part of each commit.  ``state_dir`` is locked for
    the pipeline's life (``state_dir/lock``; a second opener gets OSError "in use
    by process N"); a pipeline dropped without ``close()`` releases its thread
    and lock when it is garbage-collected.
    """

    def __init__(self, source: Union[Source, Iterable[Any]], pipeline: Union[str, Callable, None] = "fused", *,
                 dedup: Union[bool, Dict[str, Any]] = True, stages: Optional[Dict[str, Any]] = None, batch_size: int = 1024,
                 prefetch_batches: int = 2, state_dir: Optional[str] = None, text_key: str = "text",
                 num_threads: Optional[int] = None, max_prefetch_bytes: Optional[int] = DEFAULT_MAX_PREFETCH_BYTES,
                 near_dedup: Union[bool, Dict[str, Any]] = False):
        # ints or numpy integers (bool refused), kept as plain ints: the run record is JSON and compared on resume
        if as_int(batch_size) is None or as_int(batch_size) < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        batch_size = as_int(batch_size)
        if as_int(prefetch_batches) is None or as_int(prefetch_batches) < 0:
            raise ValueError(f"prefetch_batches must be an int >= 0, got {prefetch_batches!r}")
        prefetch_batches = as_int(prefetch_batches)
        max_prefetch_bytes = check_max_bytes(max_prefetch_bytes)
        if as_int(num_threads) is not None:  # anything else is refused by the stages (their message)
            num_threads = as_int(num_threads)
        if not isinstance(text_key, str):
            raise TypeError(f"text_key must be str, got {type(text_key).__name__}")
        if pipeline not in ("fused", "chain", None) and not callable(pipeline):
            raise ValueError(f"pipeline must be 'fused', 'chain', None or a callable, got {pipeline!r}")
        if stages is not None and not isinstance(stages, dict):
            raise TypeError(f"stages must be a dict of stage arguments, got {type(stages).__name__}")
        if not isinstance(dedup, (bool, dict)):
            raise TypeError(f"dedup must be a bool or a dict of StreamDeduplicator arguments, "
                            f"got {type(dedup).__name__}")
        if isinstance(dedup, dict) and "wal_path" in dedup:
            raise ValueError("dedup: wal_path is chosen by the pipeline (state_dir/dedup.wal); leave it out")
        if isinstance(dedup, dict) and "seed" in dedup and as_int(dedup["seed"]) is None:
            # review s34: was int(seed) in the run record first ('x': "invalid literal for int()", 1.5: seed 1)
            raise TypeError(f"dedup['seed'] must be an int, got {type(dedup['seed']).__name__}")
        if not isinstance(near_dedup, (bool, dict)):
            raise TypeError(f"near_dedup must be a bool or a dict of NearDeduplicator arguments, "
                            f"got {type(near_dedup).__name__}")
        if isinstance(near_dedup, dict) and "wal_path" in near_dedup:
            raise ValueError("near_dedup: wal_path is chosen by the pipeline (state_dir/near_dedup.wal); leave it out")
        source = as_source(source, text_key)
        refuse_lone_surrogates(source)  # a bad record naming its line, not a batch the stages refuse
        self.source = source
        self.batch_size = batch_size
        self.prefetch_batches = prefetch_batches
        self.max_prefetch_bytes = max_prefetch_bytes
        self.text_key = text_key
        self.num_threads = num_threads

        if state_dir is not None and not isinstance(state_dir, (str, os.PathLike)):
            raise TypeError(f"state_dir must be None, a str or a PathLike, got {type(state_dir).__name__}")
        from .. import stages as _stages  # the native stage classes

        self._stages_mod = _stages
        stage_objs = self._stage_objects(pipeline, stages or {})  # bad stage arguments raise before any file
        self._own_dir = state_dir is None
        self.state_dir = tempfile.mkdtemp(prefix="luminamoon-state-") if state_dir is None else os.fspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        if not os.access(self.state_dir, os.W_OK):
            raise PermissionError(f"state_dir {self.state_dir!r} is not writable")

        self._res = res = _Resources()
        self._finalizer = weakref.finalize(self, res.close)
        self._lock = res.lock
        self._stop = res.stop
        self._closed = False
        self._started = False
        self._last: Optional[Dict[str, Any]] = None   # coordinate of the last batch received
        self._commit_id = 0
        self._committing = False
        self.resume_extra: Optional[Dict[str, Any]] = None
        self.commits = 0
        self._start = {"batch_index": 0, "sample_index": 0, "epoch": 0}
        self.dedup = None
        self.near_dedup = None
        self._pipeline = None
        try:
            if self._own_dir:
                res.own_dir = self.state_dir
            res.lock_fd = lock_state_dir(self.state_dir)  # 1. one process per folder
            dedup_kw = dict(dedup) if isinstance(dedup, dict) else {}
            near_kw = dict(near_dedup) if isinstance(near_dedup, dict) else {}
            near_cfg = None
            if near_dedup is not False:  # bad near-dedup arguments raise here, before any file changes
                probe = _stages.NearDeduplicator(**{k: v for k, v in near_kw.items()
                                                   if k not in ("max_entries", "initial_capacity",
                                                                "wal_buffer_hashes")})
                near_cfg = probe.config
                probe.close()
            self._run = self._run_record(pipeline, stage_objs, dedup, dedup_kw)
            self._run["near_dedup"] = near_cfg
            side = self._load_committed()  # 2. the committed state, checked, before any file changes
            wal_info = inspect_wal(local_wal_path(self.state_dir)) if dedup is not False else None
            if side is not None:  # 2b. its logs hold what it needs (read only: opening one cuts its tail)
                if dedup is not False:
                    check_wal_keeps(local_wal_path(self.state_dir), int(side["wal_lsn"]), info=wal_info)
                if near_dedup is not False:
                    check_wal_keeps(local_wal_path(self.state_dir, near=True), int(side.get("near_wal_lsn", 0)),
                                    "the near-dedup WAL", "band keys")
            if dedup is not False:  # 3. the dedup log, cut back to the commit
                tag_kw = {} if dedup_kw.get("tag") is not None else {"tag": self._wal_tag(side, wal_info)}
                self.dedup = res.dedup = _stages.StreamDeduplicator(
                    wal_path=local_wal_path(self.state_dir), **dedup_kw, **tag_kw)
            if near_dedup is not False:  # 3b. the near-dedup band index's log, likewise
                self.near_dedup = res.near = _stages.NearDeduplicator(
                    wal_path=local_wal_path(self.state_dir, near=True), **near_kw)
            self._pipeline = self._make_pipeline(pipeline, stage_objs)
            # a callable that runs the near stage itself, in the fused order (before PII), says so
            # with ``runs_near_dedup = True`` and is given the index through ``bind_near_dedup``
            own_near = callable(getattr(pipeline, "bind_near_dedup", None)) and bool(
                getattr(pipeline, "runs_near_dedup", False))
            if self.near_dedup is not None and own_near:
                pipeline.bind_near_dedup(self.near_dedup)
            near_after = self.near_dedup is not None and pipeline not in ("fused", "chain") and not own_near
            self._producer = _Producer(self.source, self._pipeline, self.dedup, batch_size, text_key, res,
                                       self.near_dedup, near_after)
            self._producer.read_ahead = 2 if prefetch_batches else 0
            if side is None:
                if self.dedup is not None and self.dedup.lsn:
                    self.dedup.truncate(0)  # hashes admitted before any commit are forgotten
                if self.near_dedup is not None and self.near_dedup.lsn:
                    self.near_dedup.truncate(0)
            else:
                self._apply(side)
        except BaseException:
            self._closed = True
            try:
                self._finalizer()
            except Exception:
                pass  # the first error is the one to report
            raise
        # 4. where a commit with nothing received points: the start, or the last commit
        self._origin = self._last if self._last is not None else {
            "version": _STATE_VERSION, "source": json.loads(json.dumps(self.source.position())), "wal_lsn": 0,
            **self._start}
        if self.near_dedup is not None and self._last is None:
            self._origin["near_wal_lsn"] = 0

    # ------------------------------------------------------------- building
    def _stage_objects(self, pipeline, stage_kwargs) -> Dict[str, Any]:
        if pipeline not in ("fused", "chain"):
            return {}
        S = self._stages_mod
        kw = dict(stage_kwargs)
        if "dedup" in kw:
            raise ValueError("stages: dedup is set by the pipeline's dedup= argument; leave it out of stages")
        for name, cls in (("cleaner", S.TextCleaner), ("quality", S.QualityFilter), ("pii", S.PIIMasker)):
            kw[name] = S._resolve(kw.get(name, True), cls, f"stages[{name!r}]")[0] or False
        return kw

    def _run_record(self, pipeline, stage_objs, dedup, dedup_kw) -> Dict[str, Any]:
        """What shapes the output, as committed with every state."""
        if pipeline in ("fused", "chain"):  # same output either way
            what: Any = {k: describe_setting(v) for k, v in stage_objs.items() if k != "num_threads"}
        elif pipeline is None:
            what = None
        else:
            what = {"callable": describe_setting(pipeline)}
        ident = self.source.identity() if hasattr(self.source, "identity") else None
        return {"batch_size": self.batch_size, "text_key": self.text_key, "stages": what,
                "dedup": None if dedup is False else {"seed": int(dedup_kw.get("seed", 0))},
                "source": ident}

    def _make_pipeline(self, pipeline, stage_objs):
        if pipeline is None:
            return None
        if callable(pipeline) and not isinstance(pipeline, str):
            return pipeline
        cls = self._stages_mod.FusedPipeline if pipeline == "fused" else self._stages_mod.ChainPipeline
        kw = dict(stage_objs)
        kw["dedup"] = self.dedup if self.dedup is not None else False
        kw["near_dedup"] = self.near_dedup
        if self.num_threads is not None:
            kw["num_threads"] = self.num_threads
        return cls(**kw)

    # ------------------------------------------------------------- recovery
    def _sidecar_path(self, commit_id: int) -> str:
        return sidecar_path(self.state_dir, commit_id)

    def _check_whole(self, state_path: str) -> None:
        """A folder with commits or dedup hashes but no state file lost its state: refuse."""
        if os.path.exists(state_path):
            return
        names = os.listdir(self.state_dir)
        held = [n for n in names if n.startswith("commit-") and n.endswith(".json")]
        for near in (False, True):
            wal = local_wal_path(self.state_dir, near)
            n = wal_bytes(wal)
            if n > _WAL_HEADER:
                held.append(f"{os.path.basename(wal)} ({n} bytes)")
        if os.path.exists(local_wal_path(self.state_dir) + ".snap"):
            held.append("dedup.wal.snap")
        if held:
            raise OSError(f"state_dir {self.state_dir!r} has no state file but holds {', '.join(sorted(held)[:4])}"
                          f"{' ...' if len(held) > 4 else ''}: the folder is incomplete (was 'state' moved or "
                          "deleted?); refusing to restart from zero. Put the state file back, or use a new "
                          "state_dir; nothing was changed")

    def _load_committed(self) -> Optional[Dict[str, Any]]:
        """The committed sidecar (checked against its slot and this pipeline's settings), or None."""
        from ..state import StateTracker

        path = state_path(self.state_dir)
        self._check_whole(path)
        self.state = self._res.state = StateTracker(path)
        loaded = self.state.load()  # raises StateCorruptError when no valid slot but the file is not fresh
        if loaded is None:
            return None
        coord, _seq = loaded
        commit_id, crc = int(coord["source_pos"]), int(coord["source_pos2"])
        path = self._sidecar_path(commit_id)
        side = load_json_checked(path, crc, missing=f"state in {self.state_dir!r} names commit {commit_id}, "
                                                    f"but {path} is missing")
        if side.get("kind") is not None:
            raise OSError(f"state_dir {self.state_dir!r} holds a checkpoint of kind {side.get('kind')!r} (a "
                          "DistributedPipeline's), not a ResumablePipeline's: refusing to resume")
        if side.get("version") != _STATE_VERSION:
            raise OSError(f"commit sidecar {path} has format version {side.get('version')}, expected {_STATE_VERSION}")
        self._check_run(side.get("run"), f"state_dir {self.state_dir!r}")
        self._commit_id = commit_id
        return side

    def _wal_tag(self, side: Optional[Dict[str, Any]], info: Optional[Dict[str, Any]]) -> bytes:
        """The tag of this folder's dedup WAL (``info``: its ``inspect_wal``, read before it is opened):
        the one the last commit recorded, checked against the log's header; else the log's own; else
        a new random one (``checkpoint.wal_tag``).  A log from another state folder -- same settings,
        enough hashes -- was accepted and its table used (documents dropped or kept by another run's
        history): now refused, unchanged."""
        return wal_tag(local_wal_path(self.state_dir), side.get("wal_tag") if side is not None else None, info,
                       fix="put this folder's own dedup.wal back, or use a new state_dir")

    def _check_run(self, old: Optional[Dict[str, Any]], where: str) -> None:
        if old is None:
            raise ValueError(f"{where} holds a commit that does not record its run settings (written by an "
                             "older luminamoon): refusing to resume a run that cannot be checked; use a new "
                             "state_dir")
        diff = run_differences(old, self._run)
        if diff:
            raise ValueError(f"{where} holds a run whose settings or input differ from this pipeline's, so "
                             "resuming would change the output: " + "; ".join(diff) +
                             ". Resume with the same settings and input, or use a new state_dir")

    def _apply(self, side: Dict[str, Any]) -> None:
        """Position source and dedup at a committed coordinate (before iteration)."""
        lsn = int(side["wal_lsn"])
        if self.dedup is not None:
            if self.dedup.lsn < lsn:
                raise OSError(f"the dedup WAL in {self.state_dir!r} holds {self.dedup.lsn} hashes but the "
                              f"committed state needs {lsn}: the log lost committed records")
        near_lsn = int(side.get("near_wal_lsn", 0))
        if self.near_dedup is not None and self.near_dedup.lsn < near_lsn:
            raise OSError(f"the near-dedup WAL in {self.state_dir!r} holds {self.near_dedup.lsn} band keys but "
                          f"the committed state needs {near_lsn}: the log lost committed records")
        if side.get("source") is not None:
            self.source.seek(side["source"])
        if self.dedup is not None:
            self.dedup.truncate(lsn)
        if self.near_dedup is not None:
            self.near_dedup.truncate(near_lsn)
        self._start = {k: int(side[k]) for k in ("batch_index", "sample_index", "epoch")}
        self._producer.start = dict(self._start)
        coord = {k: v for k, v in side.items() if k not in ("extra", "run", "state_dir", "wal_tag")}
        self._last = coord
        self._origin = coord
        self.resume_extra = side.get("extra")

    def _restore_cycle(self) -> None:
        cyc = (self._last or {}).get("pii_cycle")
        if not cyc:
            return
        if self._pipeline is None or not hasattr(self._pipeline, "pii_cycle"):
            raise ValueError("the committed state holds a PII replacement cycle, but this pipeline has no "
                             "pii_cycle to restore it into: resuming would change the output")
        with self._lock:
            self._pipeline.pii_cycle = cyc

    # ------------------------------------------------------------ consuming
    def __iter__(self) -> Iterator[Batch]:
        self._check_open()
        if self._started:
            raise RuntimeError("a ResumablePipeline is iterated once; build a new one (it resumes from state_dir)")
        self._started = True
        self._restore_cycle()
        if self.prefetch_batches == 0:
            for b in self._producer.batches():
                self._last = b.coord
                yield b
            self._check_not_closed_midway()
            return
        self._prefetch = self._res.prefetch = Prefetcher(
            self._producer.batches, self.prefetch_batches, max_bytes=self.max_prefetch_bytes,
            sizeof=_batch_memory)
        prefetch = self._prefetch
        while True:
            item = prefetch.get()
            if item is END:
                self._check_not_closed_midway()
                return
            self._last = item.coord
            yield item

    def _check_not_closed_midway(self) -> None:
        # review s34: close() (from another thread, or next() on an iterator after close) stops the
        # producer, whose end read as the end of the data: the loop ended quietly after a part of it
        if self._closed or self._stop.is_set():
            raise ValueError("this ResumablePipeline was closed while it was iterated: the iteration stopped "
                             "before the end of the data (resume from the last commit)")

    @property
    def dedup_stats(self) -> Optional[Dict[str, Any]]:
        """The deduplicator's table: ``entries``, ``table_bytes``, ``bytes_per_entry``,
        ``max_entries`` (0: unbounded), the WAL's LSNs and size (None without dedup)."""
        return None if self.dedup is None else self.dedup.stats

    @property
    def near_dedup_stats(self) -> Optional[Dict[str, Any]]:
        """The near-dedup band index: ``entries`` (distinct band keys), ``table_bytes``, the WAL's
        LSNs and size (None without near dedup)."""
        return None if self.near_dedup is None else self.near_dedup.stats

    @property
    def prefetch_stats(self) -> Dict[str, Any]:
        """The prefetch queue now: ``queued_batches``, ``queued_bytes``, their peaks
        ``peak_batches`` / ``peak_bytes``, the bounds ``max_batches`` / ``max_bytes``
        and ``producer_waits`` (times the producer waited on a full queue).  All zero
        before iteration starts or with ``prefetch_batches=0``."""
        if self._res.prefetch is None:
            return empty_prefetch_stats(self.prefetch_batches, self.max_prefetch_bytes)
        return self._res.prefetch.stats()

    @property
    def _prefetch(self) -> Optional[Prefetcher]:
        return self._res.prefetch

    @_prefetch.setter
    def _prefetch(self, value: Optional[Prefetcher]) -> None:
        self._res.prefetch = value

    # -------------------------------------------------------------- commits
    def commit(self, extra: Optional[Dict[str, Any]] = None) -> int:
        """Make the coordinate of the last batch received durable; returns the commit number.

        With nothing received yet it commits where this pipeline started (the
        start, or the commit it resumed from) — never a position the
        background thread reached ahead.  ``extra`` (JSON-serialisable) is
        stored with it and comes back as ``resume_extra`` after a restart: put
        your own output's position there.
        """
        self._check_open()
        if self._res.pid != os.getpid():
            # review s35: in a forked child it waited forever on the lock the parent's producer held at
            # the fork, or wrote a commit sidecar into the parent's state_dir before being refused
            raise ValueError(f"ResumablePipeline.commit: this pipeline belongs to process {self._res.pid}; this "
                             "process is a child forked from it and must not write the parent's state_dir")
        if extra is not None:
            try:
                json.dumps(extra)
            except (TypeError, ValueError) as e:
                raise TypeError(f"extra must be JSON-serialisable: {e}") from None
        last = self._last if self._last is not None else self._origin
        side = dict(last)
        side["extra"] = extra
        side["run"] = self._run
        if self.dedup is not None:
            side["wal_tag"] = self.dedup.tag.hex()  # which log the LSN counts in (_wal_tag checks it)
        with self._lock:
            if self._committing:
                raise RuntimeError("commit() called while this thread is inside commit() (from a signal "
                                   "handler?): nothing committed by the inner call")
            self._committing = True
            try:
                commit_id = self._commit_locked(side)
            finally:
                self._committing = False
        self.commits += 1
        return commit_id

    def _commit_locked(self, side: Dict[str, Any]) -> int:
        """The commit protocol (module docstring, "How"), under the lock."""
        if self.dedup is not None:
            durable = self.dedup.sync()  # 1. the WAL up to (at least) the batch's LSN
            if durable < int(side["wal_lsn"]):
                raise OSError(f"dedup WAL durable at {durable} < committed LSN {side['wal_lsn']}")
        if self.near_dedup is not None:
            durable = self.near_dedup.sync()  # 1b. the near-dedup WAL likewise
            if durable < int(side.get("near_wal_lsn", 0)):
                raise OSError(f"near-dedup WAL durable at {durable} < committed LSN {side['near_wal_lsn']}")
        raw = dump_json(side)
        commit_id = self._commit_id + 1
        atomic_write(self._sidecar_path(commit_id), raw)  # 2. the sidecar, atomically
        self.state.commit(epoch=int(side["epoch"]), batch_index=int(side["batch_index"]),  # 3. the slot
                          sample_index=int(side["sample_index"]), source_pos=commit_id,
                          source_pos2=zlib.crc32(raw), shard=0, wal_lsn=int(side["wal_lsn"]))
        old = self._sidecar_path(self._commit_id - 1)
        self._commit_id = commit_id
        if os.path.exists(old):  # keep the sidecars of both slots
            os.remove(old)
        return commit_id

    # ------------------------------------------------------ Stateful protocol
    def state_dict(self) -> Dict[str, Any]:
        """The coordinate of the last batch received (torchdata ``Stateful``); with nothing
        received, where this pipeline started (as ``commit()``).

        The dedup table itself lives in ``state_dir`` (its WAL); the state dict
        records the LSN to truncate it back to and the folder, and the run's
        settings (``load_state_dict`` refuses a pipeline whose settings differ).
        """
        last = self._last if self._last is not None else self._origin
        return {**json.loads(json.dumps(last)), "run": json.loads(json.dumps(self._run)),
                "state_dir": self.state_dir}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Resume from ``state_dict()`` output; call before iterating."""
        self._check_open()
        if self._started:
            raise RuntimeError("load_state_dict must be called before iteration starts")
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = {"source", "batch_index", "sample_index", "epoch", "wal_lsn"} - set(state)
        if missing:
            raise ValueError(f"state is missing {sorted(missing)}")
        if state.get("version", _STATE_VERSION) != _STATE_VERSION:
            raise ValueError(f"state has format version {state.get('version')}, expected {_STATE_VERSION}")
        if self.near_dedup is not None and "near_wal_lsn" not in state:
            raise ValueError("state is missing ['near_wal_lsn'] (taken without near dedup)")
        for k in ("batch_index", "sample_index", "epoch", "wal_lsn", "near_wal_lsn"):
            if k not in state:
                continue
            v = state[k]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"state[{k!r}] must be an int >= 0, got {v!r}")
        if not isinstance(state["source"], dict):
            raise ValueError(f"state['source'] must be a source position (dict), got {type(state['source']).__name__}")
        cyc = state.get("pii_cycle")
        if cyc is not None and (not isinstance(cyc, list) or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                   and x >= 0 for x in cyc)):
            raise ValueError(f"state['pii_cycle'] must be a list of ints >= 0, got {cyc!r}")
        sd = state.get("state_dir")
        if self.dedup is not None and sd is not None and os.path.realpath(sd) != os.path.realpath(self.state_dir):
            raise ValueError(f"state was taken with state_dir={sd!r}; this pipeline uses {self.state_dir!r} "
                             "(the dedup log lives there)")
        if "run" in state:
            self._check_run(state["run"], "state")
        self._apply(dict(state))

    # -------------------------------------------------------------- closing
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this ResumablePipeline is closed")

    def close(self) -> None:
        """Stop the prefetch thread and release files and the folder lock (uncommitted progress is not saved)."""
        if self._closed:
            return
        self._closed = True
        self._finalizer()

    def __repr__(self) -> str:
        """Source, batch size, state folder, which dedup stages run, commits so far, and whether closed."""
        pipe = getattr(self, "_pipeline", None)
        parts = [f"source={getattr(self, 'source', None)!r}", f"batch_size={getattr(self, 'batch_size', None)}",
                 f"pipeline={type(pipe).__name__ if pipe is not None else None}",
                 f"dedup={getattr(self, 'dedup', None) is not None}",
                 f"near_dedup={getattr(self, 'near_dedup', None) is not None}",
                 f"state_dir={getattr(self, 'state_dir', None)!r}", f"commits={getattr(self, 'commits', 0)}"]
        if getattr(self, "_closed", False):
            parts.append("closed")
        return f"ResumablePipeline({', '.join(parts)})"

    def __enter__(self) -> "ResumablePipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _batch_memory(b: Batch) -> int:
    return b.memory_bytes
