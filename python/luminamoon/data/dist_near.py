"""Near-duplicate band indexes of a DistributedPipeline (issue 12 part 4).

With ``near_dedup="global"`` each MinHash band key (``NearDeduplicator.keys``) is
owned by rank ``lo mod world_size``, exactly like an exact-dedup document hash
(``dist_exchange.HashExchange`` carries them, ordered by ``global record index *
num_buckets + band``); a document is a near duplicate when any of its keys was
held before.  Because every document's keys are inserted, whatever its decision,
each key's check-and-insert is independent of the others and the OR over the
owners' answers equals the one-process ``NearDeduplicator``.

Files in ``state_dir``: ``near-rank<r>-of<W>.wal`` (rank r's band index); the
sidecars record ``near_wal_lsn`` (per rank) and ``near_wal_lsns`` (global).
Resume on the same world size truncates each log to its committed LSN; on another
world size every committed key of every old log is re-partitioned under
``key mod M``, exactly as ``dist_state.restore_dedup`` does for exact dedup.
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable, Dict, Optional

import torch

from .checkpoint import check_wal_keeps, load_json_checked, rank_sidecar_path
from .dist_state import owner_of, read_wal_hashes

__all__ = ["NEAR_WAL_NAME_RE", "near_wal_path", "restore_near_dedup", "cleanup_near"]

NEAR_WAL_NAME_RE = re.compile(r"^near-rank(\d+)-of(\d+)\.wal(\.snap(\.tmp)?)?$")


def near_wal_path(state_dir: str, rank: int, world_size: int) -> str:
    """The near-dedup band index WAL of ``rank`` under ``world_size`` ranks."""
    return os.path.join(state_dir, f"near-rank{rank}-of{world_size}.wal")


def _open(path: str, cfg: Dict[str, Any]):
    from ..stages import NearDeduplicator

    return NearDeduplicator(wal_path=path, **cfg)


def restore_near_dedup(state_dir: str, rank: int, world_size: int, mode: Optional[str], cfg: Dict[str, Any],
                       side: Optional[Dict[str, Any]], agree: Callable[[Optional[str], str], None]):
    """This rank's NearDeduplicator at the committed state ``side`` (None: nothing committed).
    Returns (near or None, old world size when re-partitioned, else None)."""
    if mode is None:
        return None, None
    W, r, sd = world_size, rank, state_dir
    path = near_wal_path(sd, r, W)
    if side is None or side.get("near_wal_lsns") is None:
        nd = _open(path, cfg)
        if nd.lsn:
            nd.truncate(0)
        return nd, None
    lsns = [int(x) for x in side["near_wal_lsns"]]
    W_old = int(side["world_size"])
    if W_old == W:
        rs = rank_sidecar_path(sd, int(side["commit_id"]), r, W)
        mine = load_json_checked(rs)
        if int(mine.get("near_wal_lsn", -1)) != lsns[r]:
            raise OSError(f"{rs} holds near LSN {mine.get('near_wal_lsn')}, the global commit {lsns[r]}")
        check_wal_keeps(path, lsns[r], "the near-dedup WAL", "band keys")  # before the open, which cuts
        nd = _open(path, cfg)
        try:
            if nd.lsn < lsns[r]:
                raise OSError(f"the near-dedup WAL {path} holds {nd.lsn} band keys but the committed state "
                              f"needs {lsns[r]}: the log lost committed records")
            nd.truncate(lsns[r])
        except BaseException:
            nd.close()
            raise
        return nd, None
    err = None
    try:
        for i in range(r, W_old, W):  # native CRC check of each old log (and its configuration), one rank each
            old = near_wal_path(sd, i, W_old)
            if not os.path.exists(old):
                raise OSError(f"the committed near-dedup log {old} is missing: refusing to resume")
            check_wal_keeps(old, lsns[i], "the near-dedup WAL", "band keys")  # before the open, which cuts
            nd = _open(old, cfg)
            try:
                if nd.lsn < lsns[i]:
                    raise OSError(f"{old} holds {nd.lsn} band keys, but the committed state needs {lsns[i]}")
            finally:
                nd.close()
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    agree(err, "checking the old near-dedup logs")
    for p in (path, path + ".snap"):  # a partial rebuild from a crashed resize: never committed
        if os.path.exists(p):
            os.remove(p)
    nd = _open(path, cfg)
    try:
        seed = nd.index_seed
        for i in range(W_old):
            h = read_wal_hashes(near_wal_path(sd, i, W_old), lsns[i], seed)
            if mode == "global":
                h = h[torch.from_numpy(owner_of(h, W) == r)]
                new = nd.check_insert_hashes(h.contiguous())
                if not bool(new.all()):
                    raise OSError(f"old rank {i}'s near-dedup log repeats a key another old owner holds: "
                                  "the logs are not a partition of one band index")
            else:
                nd.check_insert_hashes(h.contiguous())
        nd.sync()
    except BaseException:
        nd.close()
        raise
    return nd, W_old


def cleanup_near(state_dir: str, rank: int, world_size: int) -> None:
    """Rank 0, after the first commit of a run: delete near-dedup logs of other world sizes."""
    if rank != 0:
        return
    for name in os.listdir(state_dir):
        m = NEAR_WAL_NAME_RE.match(name)
        if m and int(m.group(2)) != world_size:
            os.remove(os.path.join(state_dir, name))
