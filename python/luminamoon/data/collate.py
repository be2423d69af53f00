"""create_resumable_collate: a drop-in, picklable ``collate_fn`` for ``torch.utils.data.DataLoader``.

It extracts the text field of each sample, runs the luminamoon pipeline on the
batch in C (clean → quality → dedup → PII; fused or the modular chain) and
returns byte-level tokens (through the ``pad_bytes`` operator), tokens from any
callable tokenizer, or the StringTensor itself.

Deduplication and DataLoader workers
------------------------------------
``DataLoader`` runs ``collate_fn`` in each worker process on the batches that
worker was handed.  What "duplicate" means therefore depends on ``dedup``:

* ``dedup="worker"`` (default): each worker process has its own
  deduplicator.  A document repeated inside one batch, or in two batches of
  the same worker, is delivered once; a copy that lands in another worker's
  batch is delivered again.  With ``num_workers=0`` this is exact dedup over
  everything the loader yields.
* ``dedup=start_global_dedup()``: one deduplicator shared by all workers of
  the loader, living in a small server process.  Workers send
  each batch's 128-bit hashes (16 bytes per document) in one round trip and
  get keep/drop back, so a document is delivered once across all workers.
  Which copy survives follows the order in which batches reach the server,
  which with several workers depends on timing: the *set* of delivered
  documents is deterministic, the batch a given copy lands in is not.
* ``dedup=None``: no deduplication.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from luminamoon.data import create_resumable_collate
    >>> collate = create_resumable_collate(max_length=256)
    >>> loader = DataLoader([{"text": "hello"}, {"text": "world"}], batch_size=2, collate_fn=collate)
    >>> next(iter(loader))["input_ids"].shape
    torch.Size([2, 256])
"""
from __future__ import annotations

import multiprocessing as mp
import os
from multiprocessing.managers import BaseManager
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch

__all__ = ["ResumableCollate", "create_resumable_collate", "GlobalDedup", "start_global_dedup"]


# ------------------------------------------------------------ global dedup

class _DedupService:
    """Runs in the server process: one StreamDeduplicator over 16-byte hash keys."""

    def __init__(self, wal_path: Optional[str], max_entries: int = 0):
        from .. import stages
        from ..string_tensor import StringTensor

        self._st = StringTensor
        self._dedup = None
        self._error: Optional[BaseException] = None
        try:
            self._dedup = stages.StreamDeduplicator(wal_path=wal_path, max_entries=max_entries)
        except Exception as e:  # handed to the client by init_error() (a RemoteError would hide its type)
            self._error = e

    def init_error(self) -> Optional[BaseException]:
        return self._error

    def check_insert(self, hashes: bytes) -> bytes:
        """hashes: N x 16 bytes; returns N bytes, 1 where the hash was new (kept)."""
        n = len(hashes) // 16
        data = torch.frombuffer(bytearray(hashes), dtype=torch.uint8) if n else torch.empty(0, dtype=torch.uint8)
        offsets = torch.arange(0, 16 * n + 1, 16, dtype=torch.int64)
        r = self._dedup(self._st.from_buffers(offsets, data, validate=False))
        return (r.reasons == 0).to(torch.uint8).numpy().tobytes()

    def lsn(self) -> int:
        return self._dedup.lsn

    def stats(self) -> Dict[str, Any]:
        return self._dedup.stats

    def sync(self) -> int:
        return self._dedup.sync()

    def truncate(self, lsn: int) -> None:
        self._dedup.truncate(lsn)


class _DedupManager(BaseManager):
    pass


_DedupManager.register("DedupService", _DedupService)


class GlobalDedup:
    """A deduplicator shared by every DataLoader worker (a server process).

    Pass it as ``create_resumable_collate(dedup=GlobalDedup(...))``; its proxy
    pickles into the workers.  ``max_entries`` bounds the table (0: no bound; at
    it the collate raises ValueError saying the table is full); ``stats``
    reports its entries and bytes.  ``close()`` stops the server; afterwards the
    object raises ValueError("... closed").
    """

    def __init__(self, wal_path: Optional[str] = None, max_entries: int = 0):
        if wal_path is not None and not isinstance(wal_path, (str, os.PathLike)):
            raise TypeError(f"GlobalDedup: wal_path must be None, a str or a PathLike, got {type(wal_path).__name__}")
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 0:
            raise ValueError(f"GlobalDedup: max_entries must be an int >= 0 (0: no bound), got {max_entries!r}")
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


# ------------------------------------------------------------------ collate

class ResumableCollate:
    """The picklable collate callable; build it with ``create_resumable_collate``.

    Native stage objects are created lazily in each process that calls it (they
    hold C state and are not pickled)."""

    def __init__(self, text_key: str = "text", pipeline: Union[str, None] = "fused",
                 dedup: Union[str, GlobalDedup, None] = "worker", stages: Optional[Dict[str, Any]] = None,
                 tokenizer: Union[str, Callable, Any] = "bytes", max_length: Optional[int] = None,
                 pad_id: int = 0, bos_id: int = -1, eos_id: int = -1, return_string_tensor: bool = False,
                 num_threads: Optional[int] = 1, dedup_max_entries: int = 0):
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
        if max_length is not None and (not isinstance(max_length, int) or max_length < 1):
            raise ValueError(f"max_length must be a positive int or None, got {max_length!r}")
        if stages is not None and not isinstance(stages, dict):
            raise TypeError(f"stages must be a dict, got {type(stages).__name__}")
        unknown = set(stages or {}) - {"cleaner", "quality", "pii"}
        if unknown:
            raise ValueError(f"stages: unknown stage(s) {sorted(unknown)} (valid: cleaner, quality, pii; "
                             "deduplication is the dedup argument)")
        for name, v in (("pad_id", pad_id), ("bos_id", bos_id), ("eos_id", eos_id)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
            if not -(1 << 63) <= v < (1 << 63):
                raise ValueError(f"{name} must fit in int64, got {v}")
        if not isinstance(return_string_tensor, bool):
            raise TypeError(f"return_string_tensor must be a bool, got {type(return_string_tensor).__name__}")
        if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)):
            raise TypeError(f"num_threads must be an int or None, got {type(num_threads).__name__}")
        if num_threads is not None and num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        if isinstance(dedup_max_entries, bool) or not isinstance(dedup_max_entries, int) or dedup_max_entries < 0:
            raise ValueError(f"dedup_max_entries must be an int >= 0 (0: no bound), got {dedup_max_entries!r}")
        if dedup_max_entries and dedup != "worker":
            raise ValueError("dedup_max_entries bounds the per-worker tables (dedup='worker'); "
                             "bound a shared table with start_global_dedup(max_entries=...)")
        self.dedup_max_entries = dedup_max_entries
        self.text_key, self.pipeline, self.dedup, self.stages = text_key, pipeline, dedup, dict(stages or {})
        self.tokenizer, self.max_length = tokenizer, max_length
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.return_string_tensor = return_string_tensor
        self.num_threads = num_threads
        self._built = None  # per process: (pid, pipeline parts)

    def __getstate__(self):
        d = dict(self.__dict__)
        d["_built"] = None
        return d

    # The native objects, built once per process.
    def _parts(self):
        if self._built is not None and self._built[0] == os.getpid():
            return self._built[1]
        from .. import stages as S

        kw = dict(self.stages)
        if self.num_threads is not None:
            kw["num_threads"] = self.num_threads
        parts: Dict[str, Any] = {}
        if self.pipeline is None:
            parts["main"] = None
        elif isinstance(self.dedup, GlobalDedup):
            # clean + quality here, dedup on the server, PII after it: the fused order.
            parts["pre"] = S.ChainPipeline(cleaner=kw.get("cleaner", True), quality=kw.get("quality", True),
                                           dedup=False, pii=False, num_threads=kw.get("num_threads"))
            pii = kw.get("pii", True)
            parts["post"] = S.ChainPipeline(cleaner=False, quality=False, dedup=False, pii=pii,
                                            num_threads=kw.get("num_threads")) if pii else None
        else:
            cls = S.FusedPipeline if self.pipeline == "fused" else S.ChainPipeline
            kw["dedup"] = {"max_entries": self.dedup_max_entries} if self.dedup == "worker" else False
            parts["main"] = cls(**kw)
        self._built = (os.getpid(), parts)
        return parts

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
        """Run the pipeline on a batch of samples; returns the kept texts (StringTensor)."""
        from .. import _C
        from ..string_tensor import StringTensor

        st = StringTensor.from_list(self._texts(samples))
        parts = self._parts()
        if self.pipeline is None:
            return st
        if "main" in parts:
            return parts["main"](st).texts
        pre = parts["pre"](st).texts
        hashes = _C.hash128(pre.offsets, pre.data, 0)
        keep = torch.frombuffer(bytearray(self.dedup.check_insert(hashes.numpy().tobytes())), dtype=torch.uint8) \
            if len(pre) else torch.empty(0, dtype=torch.uint8)
        kept = pre.mask(keep.bool())
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


def create_resumable_collate(text_key: str = "text", pipeline: Union[str, None] = "fused", *,
                             dedup: Union[str, GlobalDedup, None] = "worker", stages: Optional[Dict[str, Any]] = None,
                             tokenizer: Union[str, Callable, Any] = "bytes", max_length: Optional[int] = None,
                             pad_id: int = 0, bos_id: int = -1, eos_id: int = -1,
                             return_string_tensor: bool = False, num_threads: Optional[int] = 1,
                             dedup_max_entries: int = 0) -> ResumableCollate:
    """A picklable ``collate_fn`` running the luminamoon pipeline (see the module docstring).

    Returns ``{"input_ids", "attention_mask", "lengths"}`` (int64 tensors) or,
    with ``return_string_tensor=True``, the kept texts as a StringTensor.
    ``max_length=None`` pads to the longest document of the batch.
    ``dedup_max_entries`` bounds each worker's table (``dedup="worker"``; 0: no
    bound); at the bound the collate raises ValueError saying the table is full.
    """
    return ResumableCollate(text_key, pipeline, dedup, stages, tokenizer, max_length, pad_id, bos_id, eos_id,
                            return_string_tensor, num_threads, dedup_max_entries)
