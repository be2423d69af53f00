"""Offline near-duplicate removal with datatrove's MinHash semantics.

``cluster(signatures)`` finds the documents that datatrove 0.10.1's four MinHash
stages (``MinhashDedupSignature`` → ``MinhashDedupBuckets`` → ``MinhashDedupCluster``
→ ``MinhashDedupFilter``, default ``MinhashConfig``) remove, given the same signatures
(``luminamoon.MinHash(...).signatures(texts)``, or datatrove's own):

1. **Buckets.**  Band ``b`` of a document is its hashes ``b*R .. (b+1)*R``.  For each
   band the (band, document index) records are sorted (datatrove sorts each bucket's
   records by their hashes, then the document index) and every two consecutive records
   with equal hashes give the pair (earlier, later): a group of k equal bands gives the
   k-1 pairs of a chain, in document order.
2. **Clusters.**  The pairs go through datatrove's union-find in datatrove's order
   (band 0's pairs in sorted order, then band 1's, ...): ``union(a, b)`` joins the
   root of the smaller set under the root of the larger one, and on equal sizes the
   root of ``b``'s set joins ``a``'s.  The order matters for *which* document of a
   cluster is kept; it is reproduced exactly.
3. **Filter.**  Every document whose root is not itself is removed: one document per
   cluster is kept, the root.

Documents without a signature (fewer words than ``n_grams``: datatrove writes no record
for them; ``MinHash`` gives them rows of -1) are in no pair and always kept.

Memory is bounded: the signatures may be a file (``.npy``, memory-mapped) and only one
band (N x R values), its sort order and one comparison column are in memory at a time;
the pairs of each band go to disk (``work_dir``), then the union-find holds two int64
per document.  ``ClusterResult.peak_bytes`` reports the measured peak (tracemalloc, which
numpy reports its buffers to) and ``bytes_per_doc`` that over the documents.

Resumable: with ``work_dir``, each band's pairs are written atomically (temporary file,
fsync, rename) with a digest of the band they came from, and the result likewise; a
rerun after a kill reuses every finished band whose digest matches (and the result)
instead of sorting again.

Example:
    >>> import numpy as np
    >>> from luminamoon.near_dup import cluster
    >>> sig = np.array([[1, 2], [1, 2], [3, 4], [5, 4]], dtype=np.uint64)
    >>> r = cluster(sig, num_buckets=2, hashes_per_bucket=1)
    >>> r.removed.tolist(), r.root.tolist()
    ([1, 3], [0, 0, 2, 2])
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import tracemalloc
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._durable import atomic_replace
from ._intarg import as_int

__all__ = ["cluster", "cluster_texts", "ClusterResult", "band_pairs", "union_pairs", "EMPTY_SIGNATURE",
           "compute_signatures"]

#: the value of every hash of a document without shingles (MinHash: int64 -1)
EMPTY_SIGNATURE = np.uint64(0xFFFFFFFFFFFFFFFF)
_FORMAT = 1


@dataclass
class ClusterResult:
    """What ``cluster`` found.

    removed: sorted int64 indices of the documents to remove (not their cluster's root).
    root: int64 [N]: each document's kept representative (itself when it is kept).
    pairs_per_band: the duplicate pairs each band gave (datatrove's ``total_matches``).
    """

    removed: np.ndarray
    root: np.ndarray
    n_docs: int
    n_signed: int
    pairs_per_band: List[int]
    clusters: int                  # clusters of two or more documents
    peak_bytes: int                # measured peak of traced memory during the call (0: not measured)
    seconds: float
    reused_bands: int = 0          # bands whose pairs a rerun took from work_dir
    reused_result: bool = False    # the whole result came from work_dir

    @property
    def keep(self) -> np.ndarray:
        """bool [N]: True for the documents kept."""
        m = np.ones(self.n_docs, dtype=bool)
        m[self.removed] = False
        return m

    @property
    def bytes_per_doc(self) -> float:
        return self.peak_bytes / max(self.n_docs, 1)

    def summary(self) -> Dict[str, Any]:
        return {"documents": self.n_docs, "with_signature": self.n_signed, "removed": int(self.removed.size),
                "clusters": self.clusters, "pairs": int(sum(self.pairs_per_band)),
                "pairs_per_band": [int(x) for x in self.pairs_per_band], "peak_bytes": int(self.peak_bytes),
                "bytes_per_doc": round(self.bytes_per_doc, 1), "seconds": round(self.seconds, 3),
                "reused_bands": self.reused_bands, "reused_result": self.reused_result}


# ------------------------------------------------------------------ inputs
def _as_signatures(signatures: Any) -> np.ndarray:
    """A 2-D unsigned view of the signatures: numpy array, torch tensor or .npy path
    (memory-mapped, read a band at a time)."""
    if isinstance(signatures, (str, os.PathLike)):
        try:
            arr = np.load(os.fspath(signatures), mmap_mode="r")
        except (OSError, ValueError) as e:
            raise OSError(f"signatures: cannot read {os.fspath(signatures)!r} as a .npy file: {e}") from None
    elif type(signatures).__module__.startswith("torch"):
        t = signatures.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        arr = t.contiguous().numpy()
    elif isinstance(signatures, np.ndarray):
        arr = signatures
    else:
        raise TypeError(f"signatures must be a numpy array, a torch tensor or a .npy path, "
                        f"got {type(signatures).__name__}")
    if arr.ndim != 2:
        raise ValueError(f"signatures must be 2-D [documents, num_buckets * hashes_per_bucket], got shape "
                         f"{tuple(arr.shape)}")
    if arr.dtype in (np.int64, np.uint64):
        return arr.view(np.uint64)
    if arr.dtype in (np.int32, np.uint32):  # 32-bit precision: compare as unsigned
        return arr.view(np.uint32)
    raise TypeError(f"signatures must hold 64- or 32-bit integers, got {arr.dtype}")


def _check_geometry(sig: np.ndarray, num_buckets: int, hashes_per_bucket: int) -> Tuple[int, int]:
    for name, v in (("num_buckets", num_buckets), ("hashes_per_bucket", hashes_per_bucket)):
        if as_int(v) is None or as_int(v) < 1:  # int, numpy integer (bool refused)
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    num_buckets, hashes_per_bucket = as_int(num_buckets), as_int(hashes_per_bucket)
    if sig.shape[1] != num_buckets * hashes_per_bucket:
        raise ValueError(f"signatures have {sig.shape[1]} hashes per document, expected num_buckets * "
                         f"hashes_per_bucket = {num_buckets} * {hashes_per_bucket} = "
                         f"{num_buckets * hashes_per_bucket}")
    return num_buckets, hashes_per_bucket


# ------------------------------------------------------------------ the steps
def band_pairs(band: np.ndarray, doc_ids: Optional[np.ndarray] = None) -> np.ndarray:
    """The duplicate pairs of one band in datatrove's order: ``band`` [n, R] (unsigned),
    ``doc_ids`` [n] (default 0..n-1).  Records are sorted by (hashes, doc id); each two
    consecutive records with equal hashes give one pair (earlier, later).  Returns
    int64 [P, 2]."""
    band = np.asarray(band)
    n = band.shape[0]
    ids = np.arange(n, dtype=np.int64) if doc_ids is None else np.asarray(doc_ids, dtype=np.int64)
    if n < 2:
        return np.empty((0, 2), dtype=np.int64)
    # np.lexsort: the last key is the primary one -> (col 0, col 1, ..., col R-1, doc id)
    keys = [ids] + [band[:, c] for c in range(band.shape[1] - 1, -1, -1)]
    order = np.lexsort(keys)
    del keys
    eq = np.ones(n - 1, dtype=bool)
    for c in range(band.shape[1]):
        col = band[:, c][order]
        eq &= col[1:] == col[:-1]
        del col
    first = order[:-1][eq]
    second = order[1:][eq]
    return np.stack([ids[first], ids[second]], axis=1)


def union_pairs(n: int, pairs: Iterable[np.ndarray], parent: Optional[np.ndarray] = None,
                size: Optional[np.ndarray] = None) -> "tuple[np.ndarray, np.ndarray]":
    """datatrove's ``MinhashDedupCluster`` union-find over ``pairs`` (arrays [P, 2] of
    document indices, taken in order): union by size, on equal sizes the first document's
    root stays the root.  Returns (root [n] int64: each document's root, size [n])."""
    if parent is None:
        parent = np.arange(n, dtype=np.int64)
    if size is None:
        size = np.ones(n, dtype=np.int64)
    native = _native_union()
    for p in pairs:
        p = np.ascontiguousarray(p, dtype=np.int64)
        if p.size == 0:
            continue
        if p.ndim != 2 or p.shape[1] != 2:
            raise ValueError(f"pairs must be [P, 2], got shape {tuple(p.shape)}")
        if int(p.min()) < 0 or int(p.max()) >= n:
            raise ValueError(f"pairs name documents outside [0, {n})")
        if native is not None:
            native(parent, size, p)
        else:
            _union_python(parent, size, p)
    roots = _roots(parent)
    return roots, size


def _native_union():
    try:
        from . import _C

        return getattr(_C, "near_union_pairs", None)
    except ImportError:  # pragma: no cover
        return None


def _union_python(parent: np.ndarray, size: np.ndarray, pairs: np.ndarray) -> None:
    par = parent.tolist()
    sz = size.tolist()

    def find(x: int) -> int:
        r = x
        while par[r] != r:
            r = par[r]
        while par[x] != r:
            par[x], x = r, par[x]
        return r

    for a, b in pairs.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            if sz[ra] < sz[rb]:
                ra, rb = rb, ra
            par[rb] = ra
            sz[ra] += sz[rb]
    parent[:] = par
    size[:] = sz


def _roots(parent: np.ndarray) -> np.ndarray:
    """Each element's root (pointer jumping, vectorised)."""
    r = parent.copy()
    while True:
        nxt = r[r]
        if np.array_equal(nxt, r):
            return r
        r = nxt


# ------------------------------------------------------------------ persistence
def _atomic_save(path: str, **arrays: np.ndarray) -> None:
    """Write ``arrays`` as an .npz at ``path`` atomically and durably (luminamoon._durable)."""
    with atomic_replace(path) as tmp:
        with open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
            np.savez(f, **arrays)


def _load(path: str) -> Optional[Dict[str, np.ndarray]]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # missing or torn (a kill during a write that bypassed the rename): computed again


def _digest(*parts: Any) -> np.ndarray:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(str((p.dtype.str, p.shape)).encode())
            h.update(np.ascontiguousarray(p).view(np.uint8).reshape(-1).data)
        else:
            h.update(json.dumps(p, sort_keys=True).encode())
    return np.frombuffer(h.digest(), dtype=np.uint8).copy()


# ------------------------------------------------------------------ the API
def cluster(signatures: Any, *, num_buckets: int = 14, hashes_per_bucket: int = 8,
            has_signature: Optional[Any] = None, work_dir: Optional[str] = None,
            measure_memory: bool = True) -> ClusterResult:
    """Near-duplicate clusters of ``signatures`` ([N, num_buckets * hashes_per_bucket]
    int64/uint64, or int32/uint32 for 32-bit precision: numpy, torch, or a ``.npy`` path)
    with datatrove's semantics (module docstring).  ``has_signature``: bool [N], False
    for documents without one (default: rows whose first hash is 2**64-1, MinHash's
    empty signature).  ``work_dir``: where each band's pairs and the result are kept
    (atomically) so that a rerun after a kill continues; None: nothing is written."""
    t0 = time.perf_counter()
    started = False
    if measure_memory:
        if not tracemalloc.is_tracing():
            tracemalloc.start()
            started = True
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
    try:
        res = _cluster(signatures, num_buckets, hashes_per_bucket, has_signature, work_dir)
        if measure_memory:
            res.peak_bytes = max(0, tracemalloc.get_traced_memory()[1] - base)
    finally:
        if started:
            tracemalloc.stop()
    res.seconds = time.perf_counter() - t0
    return res


def _cluster(signatures, num_buckets, hashes_per_bucket, has_signature, work_dir) -> ClusterResult:
    sig = _as_signatures(signatures)
    num_buckets, hashes_per_bucket = _check_geometry(sig, num_buckets, hashes_per_bucket)
    n = int(sig.shape[0])
    R = int(hashes_per_bucket)
    if has_signature is None:
        empty = sig.dtype.type(np.iinfo(sig.dtype).max)
        has = np.asarray(sig[:, 0]) != empty
    else:
        has = np.asarray(has_signature.numpy() if hasattr(has_signature, "numpy") else has_signature)
        if has.dtype != np.bool_ or has.shape != (n,):
            raise ValueError(f"has_signature must be a bool array of shape ({n},), got {has.dtype} {has.shape}")
    ids = np.flatnonzero(has).astype(np.int64)
    if work_dir is not None:
        os.makedirs(work_dir, exist_ok=True)
    geometry = {"format": _FORMAT, "n": n, "num_buckets": int(num_buckets), "hashes_per_bucket": R,
                "dtype": sig.dtype.str}
    ids_digest = _digest(geometry, ids)
    pair_files: List[Optional[np.ndarray]] = []
    pairs_per_band: List[int] = []
    reused = 0
    band_digests = []
    for b in range(num_buckets):
        band = np.ascontiguousarray(sig[ids, b * R:(b + 1) * R]) if ids.size != n else \
            np.ascontiguousarray(sig[:, b * R:(b + 1) * R])
        dig = _digest(ids_digest, band)
        band_digests.append(dig)
        path = os.path.join(work_dir, f"band_{b:03d}.npz") if work_dir else None
        got = _load(path) if path else None
        if got is not None and np.array_equal(got.get("digest"), dig) and "pairs" in got:
            pairs = got["pairs"]
            reused += 1
        else:
            pairs = band_pairs(band, ids)
            if path:
                _atomic_save(path, pairs=pairs, digest=dig)
        del band
        pairs_per_band.append(int(pairs.shape[0]))
        pair_files.append(None if path else pairs)  # on disk: read back one band at a time below
        del pairs
    result_path = os.path.join(work_dir, "clusters.npz") if work_dir else None
    all_digest = _digest(*band_digests)
    got = _load(result_path) if result_path else None
    if got is not None and np.array_equal(got.get("digest"), all_digest):
        root = got["root"]
        reused_result = True
    else:
        def pair_iter():
            for b in range(num_buckets):
                if pair_files[b] is not None:
                    yield pair_files[b]
                else:
                    z = _load(os.path.join(work_dir, f"band_{b:03d}.npz"))
                    if z is None:
                        raise OSError(f"{work_dir}: band_{b:03d}.npz vanished while clustering")
                    yield z["pairs"]

        root, _ = union_pairs(n, pair_iter())
        reused_result = False
        if result_path:
            _atomic_save(result_path, root=root, digest=all_digest)
    removed = np.flatnonzero(root != np.arange(n, dtype=np.int64)).astype(np.int64)
    roots_with_members = np.unique(root[removed]) if removed.size else np.empty(0, dtype=np.int64)
    return ClusterResult(removed=removed, root=root, n_docs=n, n_signed=int(ids.size),
                         pairs_per_band=pairs_per_band, clusters=int(roots_with_members.size), peak_bytes=0,
                         seconds=0.0, reused_bands=reused, reused_result=reused_result)


# ------------------------------------------------------------------ from texts
def compute_signatures(texts: Sequence[str], *, n_grams: int = 5, num_buckets: int = 14,
                       hashes_per_bucket: int = 8, seed: int = 1, precision: int = 64) -> np.ndarray:
    """MinHash signatures (uint64 [N, num_buckets * hashes_per_bucket]; rows of 2**64-1 for
    documents without shingles) from ``luminamoon.MinHash``."""
    from . import MinHash  # issue 12 part 1 (C)

    mh = MinHash(n_grams=n_grams, num_buckets=num_buckets, hashes_per_bucket=hashes_per_bucket, seed=seed,
                 precision=precision)
    out = mh.signatures(list(texts) if not hasattr(texts, "offsets") else texts)
    return out.numpy().view(np.uint64) if hasattr(out, "numpy") else np.asarray(out).view(np.uint64)


def cluster_texts(texts: Sequence[str], *, n_grams: int = 5, num_buckets: int = 14, hashes_per_bucket: int = 8,
                  seed: int = 1, precision: int = 64, work_dir: Optional[str] = None,
                  chunk: int = 65536) -> ClusterResult:
    """``cluster`` over the MinHash signatures of ``texts`` (computed ``chunk`` documents
    at a time; with ``work_dir`` they are kept there as ``signatures.npy``)."""
    n = len(texts)
    H = num_buckets * hashes_per_bucket
    if work_dir is not None:
        os.makedirs(work_dir, exist_ok=True)
        sig = np.lib.format.open_memmap(os.path.join(work_dir, "signatures.npy"), mode="w+", dtype=np.uint64,
                                        shape=(n, H))
    else:
        sig = np.empty((n, H), dtype=np.uint64)
    for s in range(0, n, chunk):
        sig[s:s + chunk] = compute_signatures(texts[s:s + chunk], n_grams=n_grams, num_buckets=num_buckets,
                                              hashes_per_bucket=hashes_per_bucket, seed=seed, precision=precision)
    if work_dir is not None:
        sig.flush()
    return cluster(sig, num_buckets=num_buckets, hashes_per_bucket=hashes_per_bucket, work_dir=work_dir)
