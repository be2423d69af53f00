"""Files of the distributed checkpoint (DistributedPipeline, data/distributed.py): dedup WAL reading for
re-partitioning, atomic sidecars, the global commit record.

Layout of a distributed ``state_dir`` (one folder shared by every rank)::

    state                                   StateTracker (two 64-byte slots), written by rank 0 only:
                                            the commit point.  source_pos = commit id,
                                            source_pos2 = CRC32 of the global sidecar, shard = world size
    commit-<id>.json                        global sidecar: step, world size, source position, every rank's
                                            committed WAL LSN, every rank's ``extra``
    commit-<id>-rank<r>-of<W>.json          per-rank sidecar (rank r's LSN), written before the agreement
    dedup-rank<r>-of<W>.wal                 the dedup table of the hashes rank r owns (owner rule h mod W);
                                            its header holds a random tag, which every commit records
                                            (``wal_tags``): a log from another folder or run is refused

The sidecars of the last two commits are kept (the state file has two slots).
The paths, the sidecar reading and the run-record check are shared with ResumablePipeline in
``data/checkpoint.py`` (re-exported here); this module keeps what only the distributed checkpoint does.

Reading a WAL (``read_wal_hashes``) goes through the core's read-only WAL reader
(``lm_dedup_wal_inspect`` / ``lm_dedup_wal_read_hashes``, format documented in
``core/include/luminamoon/dedup.h``): it never takes the WAL's lock and never
changes the file, so the old checkpoint stays intact until a new one supersedes
it.  Every record it reads is checked (header CRC, LSN sequence, payload CRC).
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, Optional

import numpy as np
import torch

from .. import _C
from .checkpoint import (WAL_NAME_RE, atomic_write, check_wal_keeps, dump_json, inspect_wal,  # noqa: F401
                         load_json_checked, rank_sidecar_path,
                         sidecar_path as global_sidecar_path, wal_path, wal_tag)

__all__ = ["crc32c", "read_wal_hashes", "validate_wal", "atomic_write", "wal_path", "global_sidecar_path",
           "rank_sidecar_path", "WAL_NAME_RE", "owner_of", "restore_dedup", "cleanup"]


def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC32C (Castagnoli) of ``data`` (bytes-like), continuing the running checksum ``crc``
    (the core's ``lm_crc32c_extend``).

    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    return _C.crc32c(data, crc)


def read_wal_hashes(path: str, limit_lsn: int, seed: int = 0) -> torch.Tensor:
    """The first ``limit_lsn`` hashes admitted to the WAL at ``path``, in LSN order: int64 [limit_lsn, 2] (lo, hi).

    Read-only (no lock, no change to the file).  Raises ``OSError`` when the
    file holds fewer than ``limit_lsn`` valid hashes, has another seed or
    format, or a record before ``limit_lsn`` fails its checks.

    >>> import tempfile, os, luminamoon
    >>> p = os.path.join(tempfile.mkdtemp(), "d.wal")
    >>> with luminamoon.StreamDeduplicator(wal_path=p) as d:
    ...     _ = d(["a", "b", "a", "c"])
    >>> read_wal_hashes(p, 3).equal(luminamoon.hash128(["a", "b", "c"]))
    True
    """
    if limit_lsn < 0:
        raise ValueError(f"limit_lsn must be >= 0, got {limit_lsn}")
    info = _C.dedup_wal_inspect(path)
    st = info["status"]
    if not info["magic_ok"]:
        raise OSError(f"{path}: not a dedup WAL")
    if st == "LM_EVERSION":
        raise OSError(f"{path}: WAL format version {info['version']}, expected {_C.DEDUP_WAL_VERSION}")
    if st != "LM_OK":
        raise OSError(f"{path}: WAL header damaged (checksum or size mismatch)")
    if info["seed"] != seed:
        raise OSError(f"{path}: WAL written with hash seed {info['seed']}, expected {seed}")
    out, st = _C.dedup_wal_read_hashes(path, limit_lsn)
    got = len(out)
    if st == "LM_ECORRUPT":
        raise OSError(f"{path}: bad WAL record after LSN {got} (header, LSN sequence or payload checksum)")
    if st != "LM_OK":
        raise OSError(f"{path} holds {got} hashes, but the committed state needs {limit_lsn}: "
                      "the log lost committed records")
    return out


_TAG_FIX = ("put this folder's own dedup-rank logs back (every rank's, from the same run), or use a new "
            "state_dir")


def validate_wal(path: str, limit_lsn: int, seed: int = 0, committed_tag: Optional[str] = None) -> None:
    """Open the WAL natively (every record after its snapshot is CRC-checked; a torn
    tail past the durable part is cut) and check it holds ``limit_lsn`` hashes.
    Takes the WAL's lock for the duration: fails if a live process holds it.  Before the
    open, its header tag is checked against ``committed_tag`` (hex, what the commit recorded;
    None: the log's own is taken): a log from another folder or run is refused, unchanged."""
    from ..stages import StreamDeduplicator

    if not os.path.exists(path):
        raise OSError(f"the committed dedup log {path} is missing: refusing to resume")
    info = inspect_wal(path)
    tag = wal_tag(path, committed_tag, info, fix=_TAG_FIX)
    check_wal_keeps(path, limit_lsn, info=info)  # before the open, which cuts a damaged tail
    d = StreamDeduplicator(wal_path=path, seed=seed, tag=tag)
    try:
        if d.lsn < limit_lsn:
            raise OSError(f"{path} holds {d.lsn} hashes, but the committed state needs {limit_lsn}: "
                          "the log lost committed records")
    finally:
        d.close()


def owner_of(hashes: torch.Tensor, world_size: int) -> np.ndarray:
    """Owner rank of each hash: the low 64 bits as unsigned, mod ``world_size`` (int64 array)."""
    lo = hashes[:, 0].numpy().view(np.uint64)
    return (lo % np.uint64(world_size)).astype(np.int64)


def restore_dedup(state_dir: str, rank: int, world_size: int, mode: Optional[str], seed: int,
                  side: Optional[Dict[str, Any]], agree: Callable[[Optional[str], str], None]):
    """Open this rank's ``StreamDeduplicator`` at the committed state ``side`` (the global
    sidecar, or None when nothing was committed).  Returns (dedup or None, old world size
    when the table was re-partitioned, else None).

    * nothing committed: the rank's WAL is cut to 0 (a crashed run's hashes are forgotten);
    * same world size: the WAL is cut back to this rank's committed LSN;
    * another world size: the old WALs are CRC-checked (each by one rank; ``agree`` is the
      collective that makes every rank raise if any failed), then read, and this rank's new
      WAL (a new random tag) receives every committed hash it owns under ``h mod world_size``
      ("global"), or all of them ("local": a document seen before the switch is never kept again).

    Before any log is opened, each committed log's header tag is checked against the one the
    commit recorded (``side["wal_tags"]``; absent in a commit written before commits recorded
    them: the log's own is taken): a log copied from another state folder or run is refused
    (OSError naming it) on every rank, and no rank has changed a file.
    """
    from ..stages import StreamDeduplicator as SD

    if mode is None:
        return None, None
    W, r, sd = world_size, rank, state_dir
    path = wal_path(sd, r, W)
    if side is None:
        d = SD(wal_path=path, seed=seed, tag=wal_tag(path, None, inspect_wal(path)))  # its own, or a new one
        if d.lsn:
            d.truncate(0)
        return d, None
    lsns = [int(x) for x in side["wal_lsns"]]
    tags = side.get("wal_tags")  # None: committed before commits recorded the logs' tags
    W_old = int(side["world_size"])
    if W_old == W:
        err, tag = None, None
        try:  # every check before any rank opens (and cuts) its log: all ranks raise, or none
            rs = rank_sidecar_path(sd, int(side["commit_id"]), r, W)
            mine = load_json_checked(rs)
            if int(mine["wal_lsn"]) != lsns[r]:
                raise OSError(f"{rs} holds LSN {mine['wal_lsn']}, the global commit {lsns[r]}")
            info = inspect_wal(path)
            tag = wal_tag(path, None if tags is None else tags[r], info, fix=_TAG_FIX)
            check_wal_keeps(path, lsns[r], info=info)  # before the open, which cuts a damaged tail
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
        agree(err, "checking the committed dedup logs")
        d = SD(wal_path=path, seed=seed, tag=tag)
        try:
            if d.lsn < lsns[r]:
                raise OSError(f"the dedup WAL {path} holds {d.lsn} hashes but the committed state "
                              f"needs {lsns[r]}: the log lost committed records")
            d.truncate(lsns[r])
        except BaseException:
            d.close()
            raise
        return d, None
    err = None
    try:
        for i in range(r, W_old, W):  # native CRC check of each old log (and its tag), by one rank each
            validate_wal(wal_path(sd, i, W_old), lsns[i], seed, None if tags is None else tags[i])
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    agree(err, "checking the old dedup logs")
    for p in (path, path + ".snap"):  # a partial rebuild from a crashed resize: never committed
        if os.path.exists(p):
            os.remove(p)
    d = SD(wal_path=path, seed=seed, tag=os.urandom(32))  # a new log: a new tag (the next commit records it)
    try:
        for i in range(W_old):
            h = read_wal_hashes(wal_path(sd, i, W_old), lsns[i], seed)
            if mode == "global":
                h = h[torch.from_numpy(owner_of(h, W) == r)]
                new = d.check_insert_hashes(h.contiguous())
                if not bool(new.all()):
                    raise OSError(f"old rank {i}'s log repeats a hash another old owner holds: "
                                  "the logs are not a partition of one dedup state")
            else:
                d.check_insert_hashes(h.contiguous())
        d.sync()
    except BaseException:
        d.close()
        raise
    return d, W_old


def cleanup(state_dir: str, commit_id: int, rank: int, world_size: int, stale_wals: bool) -> None:
    """After commit ``commit_id``: drop this rank's sidecars older than the last two commits
    (rank 0 also the global one); with ``stale_wals`` (the first commit of a run) rank 0
    deletes the WALs and rank sidecars of other world sizes — an old checkpoint's, or a
    crashed re-partition's."""
    sd, W, r = state_dir, world_size, rank
    old = commit_id - 2
    if old >= 1:
        for p in (rank_sidecar_path(sd, old, r, W), global_sidecar_path(sd, old) if r == 0 else None):
            if p and os.path.exists(p):
                os.remove(p)
    if stale_wals and r == 0:
        for name in os.listdir(sd):
            m = WAL_NAME_RE.match(name)
            if m and int(m.group(2)) != W:
                os.remove(os.path.join(sd, name))
            elif name.startswith("commit-") and "-of" in name and f"-of{W}.json" not in name:
                # not "-of{W}.json.<pid>.tmp" either: the other ranks may already be writing the
                # next commit's sidecars (removing their temp file failed that commit)
                os.remove(os.path.join(sd, name))
