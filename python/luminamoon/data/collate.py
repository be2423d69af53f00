"""create_resumable_collate: a drop-in, picklable ``collate_fn`` for ``torch.utils.data.DataLoader``.

It extracts the text field of each sample, runs the luminamoon pipeline on the
batch in C (clean → quality → dedup → PII; fused or the modular chain) and
returns byte-level tokens (through the ``pad_bytes`` operator), tokens from any
callable tokenizer, or the StringTensor itself.

Deduplication: per epoch, per worker, or shared
-----------------------------------------------
``DataLoader`` runs ``collate_fn`` in each worker process on the batches that
worker was handed.  What "duplicate" means therefore depends on ``dedup``:

* ``dedup="worker"`` (default): **per epoch**, in each worker process.  Each
  pass over the loader (each ``for batch in loader``, i.e. each epoch) starts
  with an empty table, so every epoch delivers the dataset anew: epoch 2
  delivers the same documents as epoch 1.  Within a pass, a document repeated
  inside one batch, or in two batches of the same worker, is delivered once; a
  copy that lands in another worker's batch is delivered again.  With
  ``num_workers=0`` this is exact dedup over each epoch.  The collate sees a
  pass begin because ``DataLoader`` and ``StatefulDataLoader`` create a new
  dataset fetcher (the object that calls ``collate_fn``) for every
  ``iter(loader)``, in the main process and in persistent workers alike (a
  non-persistent worker is a new process per epoch).  Called directly, outside
  a loader, the collate keeps one table across all calls.
* ``dedup=start_global_dedup()``: **across epochs and workers**: one table
  for the whole run, shared by all workers of the loader, living in a small
  server process.  Workers send each batch's 128-bit hashes (16 bytes per
  document) in one round trip and get keep/drop back, so a document is
  delivered once across all workers and all epochs: a second epoch over the
  same data delivers only documents not seen before, and the collate warns
  (``RuntimeWarning``) when a pass begins while the table already holds
  documents.  For per-epoch dedup across workers, start a new server per
  epoch.  Which copy survives follows the order in which batches reach the
  server, which with several workers depends on timing: the *set* of
  delivered documents is deterministic, the batch a given copy lands in is not.
* ``dedup=None``: no deduplication.

Near duplicates: ``near_dedup=True`` (or a dict of ``NearDeduplicator``
arguments) also drops near-duplicates (MinHash LSH band keys, issue 12), after
exact dedup and before PII, with ``dedup="worker"``'s scope whatever ``dedup``
is: per pass, per worker process (one band index per pass; its admitted band
keys, 16 bytes each, ride in the loader's ``state_dict`` like the worker
table's hashes, so a resumed loader decides exactly as the uninterrupted one).

Resuming (``StatefulDataLoader``)
---------------------------------
The dedup state is part of the loader's ``state_dict`` when the dataset is
wrapped by the collate: ``StatefulDataLoader(collate.stateful(dataset),
collate_fn=collate, ...)`` (map-style datasets).  Each worker's state is taken
right after the batch it belongs to, so a loader resumed from
``state_dict()`` delivers exactly what the uninterrupted run delivers:

* ``dedup="worker"``: the state holds the hashes admitted in the current
  epoch (16 bytes per delivered document, in chunks of 4096 so that the
  loader's incremental snapshots send only what changed).
* ``dedup=start_global_dedup()``: the state holds each worker's admission
  count; the server logs admissions per worker (16 bytes per document for
  its life), and ``load_state_dict`` rolls each worker back to its count.
  Admissions of batches that were in flight when the state was taken, or
  when a worker was SIGKILLed, are uncommitted and forgotten, so restarting
  from the first undelivered row loses nothing.  The rollback needs the same
  server process: a state loaded into another (or a restarted) server is
  refused with ValueError.  A server started on a ``wal_path`` keeps the log's
  tag (a new log gets a random one) and each worker's state records it: a
  state loaded into a server whose log is another (one copied from another
  run with the same settings) is refused with OSError naming the log, before
  anything is rolled back.

Under ``StatefulDataLoader`` a collate with dedup on refuses a dataset that is
not wrapped (ValueError): its resume would silently deliver other documents.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from luminamoon.data import create_resumable_collate
    >>> collate = create_resumable_collate(max_length=256, stages={"quality": False})  # one-word texts
    >>> loader = DataLoader([{"text": "hello"}, {"text": "world"}], batch_size=2, collate_fn=collate)
    >>> next(iter(loader))["input_ids"].shape
    torch.Size([2, 256])
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import uuid
import warnings
import weakref
from multiprocessing.managers import BaseManager
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch

from .._intarg import as_int

__all__ = ["ResumableCollate", "create_resumable_collate", "GlobalDedup", "start_global_dedup", "BlockDataset"]


# ------------------------------------------------------------ global dedup

class _DedupService:
    """Runs in the server process: one StreamDeduplicator over 16-byte hash keys.

    The manager serves each client connection in its own thread: one lock
    orders every call.  Besides the table it keeps the admission log of this
    server's life, per client (a DataLoader worker id, -1 for the main
    process): ``restore(client, count)`` rolls a client back to its first
    ``count`` admissions (those of the batches the consumer had received when
    the loader's ``state_dict`` was taken), so the admissions of batches in
    flight when a worker died are forgotten."""

    def __init__(self, wal_path: Optional[str], max_entries: int = 0):
        from .. import stages
        from ..string_tensor import StringTensor

        self._st = StringTensor
        self._stages = stages
        self._wal_path, self._max_entries = wal_path, max_entries
        self._dedup = None
        self._lock = threading.Lock()
        self._log: List[List[Any]] = []  # [client, lsn_before, admitted hashes (bytes), client count after]
        self._counts: Dict[int, int] = {}  # client -> admissions logged
        self._passes: set = set()  # the pass keys seen (see _admit)
        self._error: Optional[BaseException] = None
        parent = mp.parent_process()
        if parent is not None:  # a kill -9 of the training process must not leave this server running
            threading.Thread(target=self._exit_with, args=(parent.sentinel,), daemon=True).start()
        try:
            tag = None
            if wal_path is not None:  # the log's own tag, or a new random one (loader states record it)
                from .checkpoint import inspect_wal, wal_tag

                tag = wal_tag(wal_path, None, inspect_wal(wal_path))
            self._dedup = stages.StreamDeduplicator(wal_path=wal_path, max_entries=max_entries, tag=tag)
        except Exception as e:  # handed to the client by init_error() (a RemoteError would hide its type)
            self._error = e

    def init_error(self) -> Optional[BaseException]:
        return self._error

    def wal(self):
        """(the log's path, its header tag as hex), or (None, None) for an in-memory table."""
        if self._wal_path is None:
            return None, None
        return self._wal_path, self._dedup.tag.hex()

    @staticmethod
    def _exit_with(sentinel) -> None:
        """Exit the server process when its parent is gone (its log was the loader's; nobody can resume it)."""
        from multiprocessing.connection import wait

        wait([sentinel])
        os._exit(0)

    def _keep(self, hashes: bytes) -> bytes:
        n = len(hashes) // 16
        data = torch.frombuffer(bytearray(hashes), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        offsets = torch.arange(0, 16 * n + 1, 16, dtype=torch.int64)
        r = self._dedup(self._st.from_buffers(offsets, data, validate=False))
        return (r.reasons == 0).to(torch.uint8).numpy().tobytes()

    def check_insert(self, hashes: bytes) -> bytes:
        """hashes: N x 16 bytes; returns N bytes, 1 where the hash was new (kept).  Logged under client None,
        which no restore rolls back (a rollback re-admits it with the other kept admissions)."""
        return self.admit(None, None, hashes)[0]

    def admit(self, client: int, pass_key, hashes: bytes):
        """check_insert, logged for ``client``; returns (keep, client's count after, table entries from before
        this pass when ``pass_key`` is new and the table already held documents, else 0)."""
        with self._lock:
            earlier = 0
            if pass_key not in self._passes:
                self._passes.add(pass_key)
                earlier = len(self._dedup)
            lsn = self._dedup.lsn
            keep = self._keep(hashes)
            admitted = b"".join(hashes[16 * i:16 * i + 16] for i, k in enumerate(keep) if k)
            if admitted:
                self._counts[client] = self._counts.get(client, 0) + len(admitted) // 16
                self._log.append([client, lsn, admitted, self._counts[client]])
            return keep, self._counts.get(client, 0), earlier

    def count(self, client: int) -> int:
        with self._lock:
            return self._counts.get(client, 0)

    def restore(self, client: int, count: int) -> None:
        """Forget ``client``'s admissions after its first ``count``."""
        with self._lock:
            have = self._counts.get(client, 0)
            if have < count:
                raise ValueError(f"GlobalDedup: the loader state says worker {client} had {count} documents "
                                 f"admitted, but this server holds {have} of its admissions: it is not the "
                                 "server of that run (or it was restarted); resume with the server the state was "
                                 "taken with")
            drop = [i for i, e in enumerate(self._log) if e[0] == client and e[3] > count]
            if not drop:
                return
            first = drop[0]
            if (self._log[first][3] - len(self._log[first][2]) // 16) != count:
                raise ValueError(f"GlobalDedup: count {count} for worker {client} is not at a batch boundary")
            tail = [e for e in self._log[first:] if not (e[0] == client and e[3] > count)]
            if self._wal_path is not None:
                self._dedup.truncate(self._log[first][1])
                del self._log[first:]
            else:  # an in-memory table cannot be cut back: rebuild it from the log
                self._dedup.close()
                self._dedup = self._stages.StreamDeduplicator(max_entries=self._max_entries)
                tail = self._log[:first] + tail
                self._log = []
            for e in tail:  # the kept admissions again, in their order: each is still new
                e[1] = self._dedup.lsn
                self._keep(e[2])
                self._log.append(e)
            self._counts[client] = count

    def lsn(self) -> int:
        return self._dedup.lsn

    def stats(self) -> Dict[str, Any]:
        return self._dedup.stats

    def sync(self) -> int:
        with self._lock:
            return self._dedup.sync()

    def truncate(self, lsn: int) -> None:
        with self._lock:
            self._dedup.truncate(lsn)
            self._log = [e for e in self._log if e[1] + len(e[2]) // 16 <= lsn]
            self._counts = {}
            for e in self._log:
                self._counts[e[0]] = e[3]


class _DedupManager(BaseManager):
    pass


_DedupManager.register("DedupService", _DedupService)


class GlobalDedup:
    """A deduplicator shared by every DataLoader worker (a server process).

    Pass it as ``create_resumable_collate(dedup=GlobalDedup(...))``; its proxy
    pickles into the workers.  Its table spans epochs (each document is
    delivered once per run; see the module docstring).  It also logs each
    worker's admissions (16 bytes per document) so that a
    ``StatefulDataLoader`` resumed from its ``state_dict`` rolls back the
    batches that were in flight.  ``max_entries`` bounds the table (0: no bound; at
    it the collate raises ValueError saying the table is full); ``stats``
    reports its entries and bytes.  ``close()`` stops the server; afterwards the
    object raises ValueError("... closed").
    """

    def __init__(self, wal_path: Optional[str] = None, max_entries: int = 0):
        if wal_path is not None and not isinstance(wal_path, (str, os.PathLike)):
            raise TypeError(f"GlobalDedup: wal_path must be None, a str or a PathLike, got {type(wal_path).__name__}")
        if as_int(max_entries) is None or as_int(max_entries) < 0:  # int, numpy integer (bool refused)
            raise ValueError(f"GlobalDedup: max_entries must be an int >= 0 (0: no bound), got {max_entries!r}")
        max_entries = as_int(max_entries)
        self._closed = False
        self._manager = _DedupManager(ctx=mp.get_context("spawn"))
        self._manager.start()
        try:
            self.service = self._manager.DedupService(None if wal_path is None else os.fspath(wal_path), max_entries)
            err = self.service.init_error()
        except BaseException:
            self.close()
            raise
        if err is not None:  # e.g. an unwritable wal_path: the server's own exception, and no server left behind
            self.close()
            raise err

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise ValueError(f"GlobalDedup.{what}: the GlobalDedup is closed")

    def check_insert(self, hashes: bytes) -> bytes:
        """``hashes``: N x 16 bytes (XXH3-128, lo then hi); returns N bytes, 1 where the hash was new."""
        self._check_open("check_insert")
        if not isinstance(hashes, (bytes, bytearray, memoryview)):
            raise TypeError(f"hashes must be bytes (N x 16), got {type(hashes).__name__}")
        if len(hashes) % 16:
            raise ValueError(f"hashes must hold N x 16 bytes, got {len(hashes)} bytes")
        return self.service.check_insert(bytes(hashes))

    # The collate's protocol (see ResumableCollate): admissions logged per client, rolled back on restore.
    def _admit(self, client: int, pass_key, hashes: bytes):
        self._check_open("check_insert")
        return self.service.admit(client, pass_key, bytes(hashes))

    def _count(self, client: int) -> int:
        self._check_open("state_dict")
        return self.service.count(client)

    def _restore(self, client: int, count: int) -> None:
        self._check_open("load_state_dict")
        self.service.restore(client, count)

    def _wal(self):
        """(the server's log path, its header tag as hex), or (None, None) without a log; asked once
        (a server keeps its log, and so its tag, for its life)."""
        if getattr(self, "_wal_cache", None) is None:
            self._check_open("state_dict")
            self._wal_cache = tuple(self.service.wal())
        return self._wal_cache

    @property
    def lsn(self) -> int:
        self._check_open("lsn")
        return self.service.lsn()

    @property
    def stats(self) -> Dict[str, Any]:
        """The shared table's StreamDeduplicator stats (entries, table_bytes, max_entries, ...)."""
        self._check_open("stats")
        return self.service.stats()

    def sync(self) -> int:
        self._check_open("sync")
        return self.service.sync()

    def truncate(self, lsn: int) -> None:
        self._check_open("truncate")
        self.service.truncate(lsn)

    def close(self) -> None:
        self._closed = True
        if self._manager is not None:
            self._manager.shutdown()
            self._manager = None

    def __getstate__(self):
        self._check_open("pickle")
        return {"service": self.service}

    def __setstate__(self, state):
        self.service = state["service"]
        self._manager = None
        self._closed = False


def start_global_dedup(wal_path: Optional[str] = None, max_entries: int = 0) -> GlobalDedup:
    """Start the shared deduplicator server (see the module docstring)."""
    return GlobalDedup(wal_path, max_entries)


# ------------------------------------------------------------------ passes

_CHUNK = 4096  # hashes per sealed chunk of the state: a snapshot sends only the chunks that changed


def _find_pass():
    """(fetcher, under_stateful) of the DataLoader pass that is calling the collate, or (None, False).

    A pass is one iteration over a loader: ``DataLoader`` and ``StatefulDataLoader`` create a new
    dataset fetcher for every ``iter(loader)`` (in the main process with ``num_workers=0``, and in
    each worker at its start and at each new epoch with ``persistent_workers=True``; a
    non-persistent worker is a new process per epoch), and the fetcher calls ``collate_fn``."""
    from torch.utils.data._utils.fetch import _BaseDatasetFetcher
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    fetcher, stateful = None, False
    f = sys._getframe(1)
    for _ in range(16):
        if f is None:
            break
        if fetcher is None:
            loc = f.f_locals
            for name in ("self", "fetcher"):
                o = loc.get(name)
                if isinstance(o, _BaseDataLoaderIter):
                    o = o.__dict__.get("_dataset_fetcher")
                if isinstance(o, _BaseDatasetFetcher):
                    fetcher = o
                    break
        if "stateful_dataloader" in f.f_code.co_filename and f"{os.sep}torchdata{os.sep}" in f.f_code.co_filename:
            stateful = True
        f = f.f_back
    return fetcher, stateful


def _find_loader_iter():
    """The ``DataLoader`` iterator (``_BaseDataLoaderIter``) on the calling stack, or None (in a worker
    process, or when called outside a loader)."""
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    f = sys._getframe(1)
    for _ in range(24):
        if f is None:
            break
        o = f.f_locals.get("self")
        if isinstance(o, _BaseDataLoaderIter):
            return o
        f = f.f_back
    return None


class _Table:
    """The dedup state of one pass (dedup='worker': its table and the log of admitted hashes)."""

    def __init__(self, pass_no: int = 0):
        self.pass_no = pass_no
        self.restored = False  # loaded from a state_dict: the pass being resumed
        self.dedup = None
        self.chunks: List[bytes] = []
        self.tail = bytearray()
        self.near = None  # the pass's NearDeduplicator and the log of its admitted band keys
        self.near_chunks: List[bytes] = []
        self.near_tail = bytearray()

    def log_near(self, admitted: bytes) -> None:
        self.near_tail += admitted
        while len(self.near_tail) >= 16 * _CHUNK:
            self.near_chunks.append(bytes(self.near_tail[:16 * _CHUNK]))
            del self.near_tail[:16 * _CHUNK]

    def near_chunk_dict(self) -> Dict[str, bytes]:
        d = {str(i): c for i, c in enumerate(self.near_chunks)}
        d[str(len(self.near_chunks))] = bytes(self.near_tail)
        return d

    def log(self, admitted: bytes) -> None:
        self.tail += admitted
        while len(self.tail) >= 16 * _CHUNK:
            self.chunks.append(bytes(self.tail[:16 * _CHUNK]))
            del self.tail[:16 * _CHUNK]

    def chunk_dict(self) -> Dict[str, bytes]:
        d = {str(i): c for i, c in enumerate(self.chunks)}
        d[str(len(self.chunks))] = bytes(self.tail)
        return d


class _Proc:
    """What one process holds for a collate: its native stages and one _Table per live pass (fetcher), so
    that two loaders sharing the collate, iterated in turn (training and validation), keep their own."""

    def __init__(self):
        self.pid = os.getpid()
        self.parts: Optional[Dict[str, Any]] = None
        self.tables: "weakref.WeakKeyDictionary[Any, _Table]" = weakref.WeakKeyDictionary()
        self.direct: Optional[_Table] = None  # calls from outside a loader
        self.pending: Optional[_Table] = None  # a restored state, waiting for the pass it belongs to
        self.pending_iter = None  # weakref to the loader iterator that loaded it (None: unknown, any pass)
        self.passes = 0
        self.warned: set = set()
        self.count: Optional[int] = None  # GlobalDedup: this client's admissions at its last batch


# ------------------------------------------------------------------ collate

class ResumableCollate:
    """The picklable collate callable; build it with ``create_resumable_collate``.

    Native stage objects are created lazily in each process that calls it (they
    hold C state and are not pickled)."""

    def __init__(self, text_key: str = "text", pipeline: Union[str, None] = "fused",
                 dedup: Union[str, GlobalDedup, None] = "worker", stages: Optional[Dict[str, Any]] = None,
                 tokenizer: Union[str, Callable, Any] = "bytes", max_length: Optional[int] = None,
                 pad_id: int = 0, bos_id: int = -1, eos_id: int = -1, return_string_tensor: bool = False,
                 num_threads: Optional[int] = 1, dedup_max_entries: int = 0,
                 near_dedup: Union[bool, Dict[str, Any]] = False):
        if not isinstance(near_dedup, (bool, dict)):
            raise TypeError(f"near_dedup must be a bool or a dict of NearDeduplicator arguments, "
                            f"got {type(near_dedup).__name__}")
        if isinstance(near_dedup, dict) and "wal_path" in near_dedup:
            raise ValueError("near_dedup: the collate's band index lives in memory (its keys ride in the loader's "
                             "state_dict); leave wal_path out")
        if near_dedup is not False:
            if pipeline is None:
                raise ValueError("near_dedup needs a pipeline ('fused' or 'chain'), got pipeline=None")
            from .. import stages as _S

            _S.NearDeduplicator(**(near_dedup if isinstance(near_dedup, dict) else {})).close()  # bad args raise now
        self.near_dedup = near_dedup
        if not isinstance(text_key, str):
            raise TypeError(f"text_key must be str, got {type(text_key).__name__}")
        if pipeline not in ("fused", "chain", None):
            raise ValueError(f"pipeline must be 'fused', 'chain' or None, got {pipeline!r}")
        if not (dedup in ("worker", "global", None) or isinstance(dedup, GlobalDedup)):
            raise ValueError(f"dedup must be 'worker', 'global', None or a GlobalDedup, got {dedup!r}")
        if dedup == "global":
            raise ValueError("dedup='global' needs the shared server: pass dedup=luminamoon.data.start_global_dedup()")
        if tokenizer != "bytes" and not callable(tokenizer) and not hasattr(tokenizer, "encode_batch"):
            raise TypeError("tokenizer must be 'bytes', a callable (list[str] -> list[list[int]]) or an object "
                            f"with encode_batch (tokenizers.Tokenizer), got {type(tokenizer).__name__}")
        # review s34: a bool is an int to isinstance: max_length=True truncated every document to 1 token
        if max_length is not None:  # an int or a numpy integer, kept as a plain int
            if as_int(max_length) is None or as_int(max_length) < 1:
                raise ValueError(f"max_length must be a positive int or None, got {max_length!r}")
            max_length = as_int(max_length)
        if stages is not None and not isinstance(stages, dict):
            raise TypeError(f"stages must be a dict, got {type(stages).__name__}")
        unknown = set(stages or {}) - {"cleaner", "quality", "pii"}
        if unknown:
            raise ValueError(f"stages: unknown stage(s) {sorted(unknown)} (valid: cleaner, quality, pii; "
                             "deduplication is the dedup argument)")
        ids = {}
        for name, v in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
            if as_int(v) is None:
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            v = ids[name] = as_int(v)
            if not -(1 << 63) <= v < (1 << 63):
                raise ValueError(f"{name} must fit in int64, got {v}")
        pad_id, bos_id, eos_id = ids["pad_id"], ids["bos_id"], ids["eos_id"]
        if not isinstance(return_string_tensor, bool):
            raise TypeError(f"return_string_tensor must be a bool, got {type(return_string_tensor).__name__}")
        if num_threads is not None:
            if as_int(num_threads) is None:
                raise TypeError(f"num_threads must be an int or None, got {type(num_threads).__name__}")
            num_threads = as_int(num_threads)
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if as_int(dedup_max_entries) is None or as_int(dedup_max_entries) < 0:
            raise ValueError(f"dedup_max_entries must be an int >= 0 (0: no bound), got {dedup_max_entries!r}")
        dedup_max_entries = as_int(dedup_max_entries)
        if dedup_max_entries and dedup != "worker":
            raise ValueError("dedup_max_entries bounds the per-worker tables (dedup='worker'); "
                             "bound a shared table with start_global_dedup(max_entries=...)")
        self.dedup_max_entries = dedup_max_entries
        self.text_key, self.pipeline, self.dedup, self.stages = text_key, pipeline, dedup, dict(stages or {})
        self.tokenizer, self.max_length = tokenizer, max_length
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.return_string_tensor = return_string_tensor
        self.num_threads = num_threads
        self._token = uuid.uuid4().hex  # names this collate (and its copies in the workers) to its dataset wrapper
        self._built: Optional[_Proc] = None  # per process: the native stages, the dedup table of the pass, its log

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_built"] = None
        return d

    def __repr__(self) -> str:
        """The settings that differ from create_resumable_collate's defaults (a tokenizer by its type)."""
        shown = {"text_key": (self.text_key, "text"), "pipeline": (self.pipeline, "fused"),
                 "dedup": (self.dedup, "worker"), "stages": (self.stages, {}),
                 "tokenizer": (self.tokenizer, "bytes"), "max_length": (self.max_length, None),
                 "pad_id": (self.pad_id, 0), "bos_id": (self.bos_id, -1), "eos_id": (self.eos_id, -1),
                 "return_string_tensor": (self.return_string_tensor, False), "num_threads": (self.num_threads, 1),
                 "dedup_max_entries": (self.dedup_max_entries, 0), "near_dedup": (self.near_dedup, False)}
        parts = []
        for k, (v, default) in shown.items():
            if type(v) is type(default) and v == default:
                continue
            if k == "tokenizer" and not isinstance(v, str):
                v = f"<{getattr(v, '__qualname__', None) or type(v).__qualname__}>"
                parts.append(f"{k}={v}")
                continue
            parts.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def _proc(self) -> "_Proc":
        """This process's state, created on first use (a forked worker starts afresh)."""
        if self._built is None or self._built.pid != os.getpid():
            self._built = _Proc()
        return self._built

    # The native objects, built once per process.
    def _parts(self):
        P = self._proc()
        if P.parts is not None:
            return P.parts
        from .. import stages as S

        kw = dict(self.stages)
        if self.num_threads is not None:
            kw["num_threads"] = self.num_threads
        parts: Dict[str, Any] = {}
        cls = S.FusedPipeline if self.pipeline == "fused" else S.ChainPipeline
        if self.pipeline is None:
            parts["main"] = None
        elif self.dedup is None and self.near_dedup is False:
            kw["dedup"] = False
            parts["main"] = cls(**kw)
        else:
            # clean + quality, then dedup here (the pass's table, or the server), then PII: the fused order.
            parts["pre"] = cls(cleaner=kw.get("cleaner", True), quality=kw.get("quality", True),
                               dedup=False, pii=False, num_threads=kw.get("num_threads"))
            pii = kw.get("pii", True)
            parts["post"] = S.ChainPipeline(cleaner=False, quality=False, dedup=False, pii=pii,
                                            num_threads=kw.get("num_threads")) if pii else None
        P.parts = parts
        return parts

    # Passes: one iteration over the loader (see the module docstring).
    def _table(self, fetcher) -> _Table:
        P = self._proc()
        if fetcher is None:
            if P.direct is None:
                P.direct, P.pending = P.pending or _Table(), None
            return P.direct
        t = P.tables.get(fetcher)
        if t is None:  # a new pass: a new table (a restored one if a state was loaded for it)
            P.passes += 1
            if P.pending is not None and P.pending_iter is not None and P.pending_iter() is not _find_loader_iter():
                # Review s34: the state was loaded into another iterator than this pass's.  StatefulDataLoader
                # (num_workers=0) loads a state taken at the end of an epoch into an iterator it then
                # discards as finished, and starts the next epoch on a new one: that epoch must start
                # empty, not with the finished epoch's table (which dropped every document as a duplicate).
                P.pending = None
            P.pending_iter = None
            t, P.pending = P.pending or _Table(), None
            t.pass_no = P.passes
            P.tables[fetcher] = t
        return t

    def _check_stateful(self, fetcher, stateful: bool) -> None:
        if not stateful or (self.dedup is None and self.near_dedup is False) or self.pipeline is None \
                or fetcher is None:
            return
        ds = getattr(fetcher, "dataset", None)
        if isinstance(ds, torch.utils.data.IterableDataset):
            raise ValueError("create_resumable_collate: under StatefulDataLoader the dedup state must be part of "
                             "the loader's state_dict, which collate.stateful() can do for map-style datasets "
                             "only: use a map-style dataset, or dedup=None")
        if not (isinstance(ds, _CollateStateDataset) and ds.collate._token == self._token):
            raise ValueError("create_resumable_collate: under StatefulDataLoader the dedup state must be part of "
                             "the loader's state_dict: pass the dataset wrapped by this collate, "
                             "StatefulDataLoader(collate.stateful(dataset), collate_fn=collate, ...) "
                             "(or use dedup=None)")

    def _client(self) -> int:
        info = torch.utils.data.get_worker_info()
        return -1 if info is None else int(info.id)

    def _pass_key(self, t: _Table):
        info = torch.utils.data.get_worker_info()
        if info is None:
            return ("main", os.getpid(), t.pass_no)
        return ("workers", int(info.seed) - int(info.id), t.pass_no)  # the loader's base seed: one per iterator

    def _dedup_local(self, t: _Table, hashes: torch.Tensor) -> torch.Tensor:
        if t.dedup is None:
            from .. import stages as S

            t.dedup = S.StreamDeduplicator(max_entries=self.dedup_max_entries)
        keep = t.dedup.check_insert_hashes(hashes)
        t.log(hashes[keep].contiguous().numpy().tobytes())
        return keep

    def _near_local(self, t: _Table, keys: torch.Tensor, has: torch.Tensor) -> torch.Tensor:
        """bool [N]: near duplicates among N documents with band keys [N * B, 2] (admits every key)."""
        from .. import stages as S

        if t.near is None:
            t.near = S.NearDeduplicator(**(self.near_dedup if isinstance(self.near_dedup, dict) else {}))
        B = int(t.near.config["num_buckets"])
        n = int(has.numel())
        cand = torch.nonzero(has, as_tuple=False).flatten()
        k = keys.view(n, B, 2)[cand].reshape(-1, 2).contiguous()
        new = t.near.check_insert_hashes(k)
        t.log_near(k[new].contiguous().numpy().tobytes())
        dup = torch.zeros(n, dtype=torch.bool)
        if len(cand):
            dup[cand] = ~new.view(-1, B).all(dim=1)
        return dup

    def _dedup_global(self, t: _Table, hashes: torch.Tensor) -> torch.Tensor:
        P, key = self._proc(), self._pass_key(t)
        keep, P.count, earlier = self.dedup._admit(self._client(), key, hashes.contiguous().numpy().tobytes())
        if earlier and not t.restored and key not in P.warned:
            P.warned.add(key)
            warnings.warn(f"create_resumable_collate: the shared GlobalDedup table already held {earlier} "
                          "documents when this pass over the loader began; it spans epochs, so documents "
                          "delivered in an earlier epoch are dropped as duplicates now. For each epoch to see "
                          "the dataset anew use dedup='worker', or a new start_global_dedup() per epoch",
                          RuntimeWarning, stacklevel=3)
        if not keep:  # a batch the stages dropped entirely (torch.frombuffer refuses an empty buffer)
            return torch.zeros(0, dtype=torch.bool)
        return torch.frombuffer(bytearray(keep), dtype=torch.uint8).bool()

    # The dedup state, carried in the loader's state_dict by the dataset wrapper (see stateful()).
    def _state_dict(self) -> Dict[str, Any]:
        fetcher, _ = _find_pass()
        t, P = self._table(fetcher), self._proc()
        near = {} if self.near_dedup is False or self.pipeline is None else {"near_keys": t.near_chunk_dict()}
        if self.pipeline is None or self.dedup is None:
            return {"format": 1, "dedup": None, **near}
        if self.dedup == "worker":
            return {"format": 1, "dedup": "worker", "hashes": t.chunk_dict(), **near}
        client = self._client()
        if P.count is None:
            P.count = self.dedup._count(client)
        _, tag = self.dedup._wal()  # which log the count counts in (checked by load_state_dict)
        return {"format": 1, "dedup": "global", "client": client, "count": P.count,
                **({"wal_tag": tag} if tag is not None else {}), **near}

    def _load_state_dict(self, state: Dict[str, Any]) -> None:
        kind = None if self.pipeline is None or self.dedup is None else \
            ("worker" if self.dedup == "worker" else "global")
        if not isinstance(state, dict) or state.get("format") != 1 or "dedup" not in state:
            raise ValueError(f"load_state_dict: not a collate dedup state: {type(state).__name__} "
                             f"{sorted(state) if isinstance(state, dict) else ''}")
        if state["dedup"] != kind:
            raise ValueError(f"load_state_dict: the state was taken with dedup {state['dedup']!r}, this collate "
                             f"has {kind!r}: resuming would change which documents are delivered")
        near_on = self.near_dedup is not False and self.pipeline is not None
        if near_on != ("near_keys" in state):
            raise ValueError(f"load_state_dict: the state was taken with near dedup "
                             f"{'on' if 'near_keys' in state else 'off'}, this collate has it "
                             f"{'on' if near_on else 'off'}: resuming would change which documents are delivered")
        P, t = self._proc(), _Table()
        t.restored = True
        if near_on:
            chunks = state["near_keys"]
            if not isinstance(chunks, dict):
                raise ValueError("load_state_dict: the state's 'near_keys' must be a dict of byte chunks")
            blob = b"".join(chunks[k] for k in sorted(chunks, key=int))
            if len(blob) % 16:
                raise ValueError(f"load_state_dict: near-dedup band keys must be N x 16 bytes, got {len(blob)}")
            from .. import stages as S

            t.near = S.NearDeduplicator(**(self.near_dedup if isinstance(self.near_dedup, dict) else {}))
            if blob:
                k = torch.frombuffer(bytearray(blob), dtype=torch.int64).reshape(-1, 2)
                t.near.check_insert_hashes(k)
                t.log_near(blob)
        if kind == "worker":
            chunks = state.get("hashes")
            if not isinstance(chunks, dict):
                raise ValueError("load_state_dict: the dedup state has no 'hashes'")
            blob = b"".join(chunks[k] for k in sorted(chunks, key=int))
            if len(blob) % 16:
                raise ValueError(f"load_state_dict: dedup hashes must be N x 16 bytes, got {len(blob)}")
            if blob:
                hashes = torch.frombuffer(bytearray(blob), dtype=torch.int64).reshape(-1, 2)
                self._dedup_local(t, hashes)
        elif kind == "global":
            client, count = state.get("client"), state.get("count")
            if client != self._client():
                raise ValueError(f"load_state_dict: the dedup state is worker {client}'s, loaded into "
                                 f"worker {self._client()}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"load_state_dict: the dedup state's count must be an int >= 0, got {count!r}")
            path, tag = self.dedup._wal()
            if path is not None:  # before the rollback (the first change): a log from another run is refused
                from .checkpoint import check_wal_tag

                check_wal_tag(path, bytes.fromhex(tag), state.get("wal_tag"), whose="the loader state was taken with",
                              fix="start the server on the log this state was taken with (its own wal_path), "
                                  "or start over without the state")
            self.dedup._restore(client, count)
            P.count = count
        P.pending = t
        it = _find_loader_iter()  # the pass it belongs to: the iterator loading it (see _table)
        P.pending_iter = weakref.ref(it) if it is not None else None

    def stateful(self, dataset):
        """Wrap a map-style dataset so that the dedup state rides in ``StatefulDataLoader.state_dict()``.

        ``StatefulDataLoader(collate.stateful(dataset), collate_fn=collate, ...)``: the loader
        saves and restores each worker's dedup state with the dataset's (torchdata's ``Stateful``
        protocol), so a loader resumed mid-epoch delivers what the uninterrupted run delivers.
        With ``dedup=start_global_dedup()`` the state holds each worker's admission count and
        restoring rolls the shared table back to it: batches that were in flight when the state
        was taken (or when a worker died) are admitted again when they are read again.

        >>> from torchdata.stateful_dataloader import StatefulDataLoader
        >>> collate = create_resumable_collate(return_string_tensor=True)
        >>> loader = StatefulDataLoader(collate.stateful(["some text"] * 4), batch_size=2, collate_fn=collate)
        """
        if isinstance(dataset, torch.utils.data.IterableDataset):
            raise TypeError("ResumableCollate.stateful: dataset must be map-style (__getitem__ and __len__); an "
                            "IterableDataset's position is its iterator's, which this wrapper cannot restore")
        if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
            raise TypeError(f"ResumableCollate.stateful: dataset must be map-style (__getitem__ and __len__), "
                            f"got {type(dataset).__name__}")
        return _CollateStateDataset(dataset, self)

    def blocks(self, source: Any, block_size: int) -> "BlockDataset":
        """An ``IterableDataset`` of ``source.iter_blocks(block_size)`` (the columnar reading
        path: no Python object per record) for ``DataLoader(collate.blocks(src, 64),
        batch_size=None, collate_fn=collate)``: each block is one batch (see :class:`BlockDataset`)."""
        return BlockDataset(source, block_size)

    def _strings(self, samples: Any):
        """The batch's texts as a StringTensor: a RecordBlock's texts (the columnar path) or a
        StringTensor as they are, a list of str / dicts through ``from_list``."""
        from ..string_tensor import StringTensor
        from ._blocks import RecordBlock

        if isinstance(samples, RecordBlock):
            return samples.texts
        if isinstance(samples, StringTensor):
            return samples
        return StringTensor.from_list(self._texts(samples))

    def _texts(self, samples: Sequence[Any]) -> List[str]:
        if isinstance(samples, (str, bytes, dict)) or not hasattr(samples, "__iter__"):
            raise TypeError(f"samples must be a batch (a list of str or of dicts), got {type(samples).__name__}")
        key = self.text_key
        out = []
        for i, s in enumerate(samples):
            t = s if isinstance(s, str) else (s.get(key) if isinstance(s, dict) else None)
            if not isinstance(t, str):
                raise TypeError(f"sample {i}: expected str or a dict with a str {key!r} field, got "
                                f"{type(s).__name__}")
            out.append(t)
        return out

    def process(self, samples: Sequence[Any]):
        """Run the pipeline on a batch of samples (a list of str or dicts, a ``RecordBlock`` of a
        source's ``iter_blocks``, or a StringTensor); returns the kept texts (StringTensor)."""
        from .. import _C

        fetcher, stateful = _find_pass()
        self._check_stateful(fetcher, stateful)
        st = self._strings(samples)
        parts = self._parts()
        if self.pipeline is None:
            return st
        if "main" in parts:
            return parts["main"](st).texts
        pre = parts["pre"](st).texts
        t = self._table(fetcher)
        if self.dedup is None:
            kept = pre
        else:
            hashes = _C.hash128(pre.offsets, pre.data, 0).reshape(-1, 2)
            keep = self._dedup_local(t, hashes) if self.dedup == "worker" else self._dedup_global(t, hashes)
            kept = pre.mask(keep)
        if self.near_dedup is not False:
            if t.near is None:
                from .. import stages as S

                t.near = S.NearDeduplicator(**(self.near_dedup if isinstance(self.near_dedup, dict) else {}))
            keys, has = t.near.keys(kept)
            kept = kept.mask(~self._near_local(t, keys, has))
        return parts["post"](kept).texts if parts["post"] is not None else kept

    def __call__(self, samples: Sequence[Any]):
        texts = self.process(samples)
        if self.return_string_tensor:
            return texts
        if self.tokenizer == "bytes":
            specials = (self.bos_id >= 0) + (self.eos_id >= 0)
            max_len = self.max_length
            if max_len is None:
                off = texts.offsets
                max_len = int((off[1:] - off[:-1]).max()) + specials if len(texts) else specials
            ids, lengths = torch.ops.luminamoon.pad_bytes(texts.offsets, texts.data, max_len, self.pad_id,
                                                          self.bos_id, self.eos_id)
        else:
            ids, lengths = self._tokenize(texts.tolist())
        mask = torch.ops.luminamoon.attention_mask(lengths, ids.shape[1])
        return {"input_ids": ids, "attention_mask": mask, "lengths": lengths}

    def _tokenize(self, texts: List[str]):
        tok = self.tokenizer
        if hasattr(tok, "encode_batch"):
            seqs = [e.ids for e in tok.encode_batch(texts)]
        else:
            seqs = tok(texts)
            if isinstance(seqs, dict):
                seqs = seqs["input_ids"]
        if isinstance(seqs, (str, bytes)) or not hasattr(seqs, "__iter__"):
            raise TypeError(f"tokenizer must return one sequence of token ids per text, got {type(seqs).__name__}")
        seqs = list(seqs)
        if len(seqs) != len(texts):
            raise ValueError(f"tokenizer returned {len(seqs)} sequences for {len(texts)} texts")
        out = []
        for i, s in enumerate(seqs):
            if isinstance(s, (str, bytes)) or not hasattr(s, "__iter__"):
                raise TypeError(f"tokenizer output {i} must be a sequence of int token ids, got {type(s).__name__}")
            out.append(list(s))
        seqs = out
        if self.bos_id >= 0:
            seqs = [[self.bos_id] + s for s in seqs]
        if self.eos_id >= 0:
            seqs = [s + [self.eos_id] for s in seqs]
        max_len = self.max_length or max((len(s) for s in seqs), default=0)
        ids = torch.full((len(seqs), max_len), self.pad_id, dtype=torch.int64)
        lengths = torch.empty(len(seqs), dtype=torch.int64)
        for i, s in enumerate(seqs):
            s = s[:max_len]
            if s:
                try:
                    ids[i, :len(s)] = torch.tensor(s, dtype=torch.int64)
                except (TypeError, ValueError, RuntimeError) as e:
                    raise TypeError(f"tokenizer output {i} must hold int token ids: {e}") from None
            lengths[i] = len(s)
        return ids, lengths


class BlockDataset(torch.utils.data.IterableDataset):
    """A source read as blocks (``source.iter_blocks(block_size)``: JSONL and Parquet sources),
    one ``RecordBlock`` per item, for ``DataLoader(..., batch_size=None, collate_fn=collate)``:
    the collate takes each block's texts as they are (a StringTensor decoded in C / from
    Arrow), with no Python object per record.  Each pass reads the source from its start.
    With ``num_workers=N`` each worker reads its own share of the source (rank ``id`` of
    ``N``: files when there are at least ``N``, records otherwise), which needs an
    unsharded source."""

    def __init__(self, source: Any, block_size: int):
        if not callable(getattr(source, "iter_blocks", None)):
            raise TypeError(f"source must have iter_blocks (JsonlSource, ParquetSource), got {type(source).__name__}")
        if as_int(block_size) is None or as_int(block_size) < 1:  # int, numpy integer (bool refused)
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        block_size = as_int(block_size)
        self.source, self.block_size = source, block_size
        self._start = source.position()

    def __iter__(self):
        import copy

        src = copy.copy(self.source)
        src._pos = dict(self._start)
        info = torch.utils.data.get_worker_info()
        if info is not None and info.num_workers > 1:
            if src.world_size != 1:
                raise ValueError("BlockDataset with num_workers > 1 shards the source over the workers: pass an "
                                 f"unsharded source (world_size=1), got world_size={src.world_size}")
            src.rank, src.world_size = int(info.id), int(info.num_workers)
            src._file_split = len(src.paths) >= src.world_size
        src.skipped = 0
        return src.iter_blocks(self.block_size)


class _CollateStateDataset(torch.utils.data.Dataset):
    """A map-style dataset whose ``state_dict`` is its collate's dedup state (see ResumableCollate.stateful)."""

    def __init__(self, dataset, collate: ResumableCollate):
        self.dataset, self.collate = dataset, collate

    def __getitem__(self, index):
        return self.dataset[index]

    def __len__(self) -> int:
        return len(self.dataset)

    def state_dict(self) -> Dict[str, Any]:
        inner = self.dataset.state_dict() if hasattr(self.dataset, "state_dict") else None
        return {"collate": self.collate._state_dict(), "dataset": inner}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if not isinstance(state, dict) or "collate" not in state:
            raise ValueError("load_state_dict: not the state of a collate.stateful() dataset")
        self.collate._load_state_dict(state["collate"])
        if state.get("dataset") is not None and hasattr(self.dataset, "load_state_dict"):
            self.dataset.load_state_dict(state["dataset"])


def create_resumable_collate(text_key: str = "text", pipeline: Union[str, None] = "fused", *,
                             dedup: Union[str, GlobalDedup, None] = "worker", stages: Optional[Dict[str, Any]] = None,
                             tokenizer: Union[str, Callable, Any] = "bytes", max_length: Optional[int] = None,
                             pad_id: int = 0, bos_id: int = -1, eos_id: int = -1,
                             return_string_tensor: bool = False, num_threads: Optional[int] = 1,
                             dedup_max_entries: int = 0,
                             near_dedup: Union[bool, Dict[str, Any]] = False) -> ResumableCollate:
    """A picklable ``collate_fn`` running the luminamoon pipeline (see the module docstring).

    Returns ``{"input_ids", "attention_mask", "lengths"}`` (int64 tensors) or,
    with ``return_string_tensor=True``, the kept texts as a StringTensor.
    ``max_length=None`` pads to the longest document of the batch.
    ``dedup="worker"`` deduplicates per epoch (each pass over the loader sees
    the dataset anew), ``dedup=start_global_dedup()`` across workers and
    epochs; with ``StatefulDataLoader`` wrap the dataset with
    ``collate.stateful(dataset)`` so that the dedup state is in the loader's
    ``state_dict`` (see the module docstring).
    ``dedup_max_entries`` bounds each worker's table (``dedup="worker"``; 0: no
    bound); at the bound the collate raises ValueError saying the table is full.
    ``near_dedup``: True or a dict of ``NearDeduplicator`` arguments also drops
    near duplicates (per pass and worker; see the module docstring).
    """
    return ResumableCollate(text_key, pipeline, dedup, stages, tokenizer, max_length, pad_id, bos_id, eos_id,
                            return_string_tensor, num_threads, dedup_max_entries, near_dedup)
