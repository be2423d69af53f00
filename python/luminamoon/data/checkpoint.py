"""The checkpoint files that ResumablePipeline (``data/resumable.py``) and DistributedPipeline
(``data/distributed.py``) share: where they live in a ``state_dir``, how a commit sidecar is written
and read back (checked against the CRC32 its state slot holds), and how a resume decides that the
committed run had the same settings and input (the fingerprint check).

A ``state_dir``::

    state                          StateTracker (two 64-byte slots, luminamoon/state.py): the commit point.
                                   source_pos = commit id, source_pos2 = CRC32 of that commit's sidecar
    commit-<id>.json               the commit sidecar: source position, WAL LSNs, the run record, ``extra``
    dedup.wal, near_dedup.wal      the dedup WALs of a ResumablePipeline
    commit-<id>-rank<r>-of<W>.json DistributedPipeline: rank r's sidecar, written before the agreement
    dedup-rank<r>-of<W>.wal        DistributedPipeline: the hashes rank r owns (``data/dist_state.py``
                                   reads and re-partitions them)

The sidecars of the last two commits are kept (the state file has two slots).  The order of a commit
(WAL synced, sidecar written atomically, then the slot) is written in ``data/resumable.py``.
"""
from __future__ import annotations

import json
import os
import re
import zlib
from typing import Any, Dict, List, Optional

from .._durable import atomic_write  # noqa: F401  (re-exported: the sidecars are written with it)
from .fingerprint import fingerprint_differences

__all__ = ["STATE_VERSION", "WAL_HEADER", "STATE_NAME", "WAL_NAME_RE", "state_path", "sidecar_path",
           "rank_sidecar_path", "wal_path", "local_wal_path", "wal_bytes", "dump_json", "load_json_checked",
           "describe_setting", "run_differences", "source_differences", "atomic_write"]

STATE_VERSION = 1  # "version" of a ResumablePipeline's sidecar and state_dict
WAL_HEADER = 64  # bytes of an empty dedup WAL (core/include/luminamoon/dedup.h): more means it holds hashes
STATE_NAME = "state"
WAL_NAME_RE = re.compile(r"^dedup-rank(\d+)-of(\d+)\.wal(\.snap(\.tmp)?)?$")


# ------------------------------------------------------------------ paths
def state_path(state_dir: str) -> str:
    """The StateTracker file (the commit point)."""
    return os.path.join(state_dir, STATE_NAME)


def sidecar_path(state_dir: str, commit_id: int) -> str:
    """The sidecar of commit ``commit_id`` (the global one, for a DistributedPipeline)."""
    return os.path.join(state_dir, f"commit-{commit_id:020d}.json")


def rank_sidecar_path(state_dir: str, commit_id: int, rank: int, world_size: int) -> str:
    """A DistributedPipeline rank's sidecar of commit ``commit_id``."""
    return os.path.join(state_dir, f"commit-{commit_id:020d}-rank{rank}-of{world_size}.json")


def wal_path(state_dir: str, rank: int, world_size: int) -> str:
    """The dedup WAL of ``rank`` under ``world_size`` ranks (DistributedPipeline)."""
    return os.path.join(state_dir, f"dedup-rank{rank}-of{world_size}.wal")


def local_wal_path(state_dir: str, near: bool = False) -> str:
    """A ResumablePipeline's exact (``dedup.wal``) or near (``near_dedup.wal``) dedup WAL."""
    return os.path.join(state_dir, "near_dedup.wal" if near else "dedup.wal")


def inspect_wal(path: str) -> Optional[Dict[str, Any]]:
    """``dedup_wal_inspect`` of the log at ``path`` (read only: no lock, no change), or None when there
    is no file, it cannot be read, or its header is one the open will report (missing magic, damage,
    another version)."""
    if not os.path.exists(path):
        return None
    from .. import _C

    try:
        info = _C.dedup_wal_inspect(path)
    except OSError:
        return None
    return info if info["status"] == "LM_OK" else None


def check_wal_keeps(path: str, lsn: int, what: str = "the dedup WAL", unit: str = "hashes",
                    info: Optional[Dict[str, Any]] = None) -> None:
    """Before a committed state's WAL is opened: refuse (OSError) a log that does not hold the
    ``lsn`` records the commit needs, reading it only.  Opening it would cut a torn or damaged tail
    at once, before the resume could tell that the cut lost committed records: design §8, nothing
    is truncated before recovery has succeeded.  A log that cannot be inspected (missing, damaged
    header, other version) is left for the open to report; it changes nothing then.  ``info``: the
    log's ``inspect_wal`` when the caller has read it already."""
    if lsn <= 0:
        return
    info = info if info is not None else inspect_wal(path)
    if info is None or info["lsn_kept"] >= lsn:
        return
    damaged = info["lsn_kept"] < info["lsn_end"] or info["valid_bytes"] < info["file_bytes"]
    raise OSError(f"{what} {path} holds {info['lsn_kept']} intact {unit} but the committed state needs "
                  f"{lsn}: the log lost committed records"
                  f"{' (its end is torn or damaged)' if damaged else ''}. Nothing was changed: the file is "
                  "as it was (restore it from a copy, or start over with a new state_dir)")


_TAG_FIX = "put this folder's own log back, or use a new state_dir"


def wal_tag(path: str, committed: Optional[str], info: Optional[Dict[str, Any]], fix: str = _TAG_FIX) -> bytes:
    """The tag to open the dedup WAL at ``path`` with, decided before it is opened (``info``: its
    ``inspect_wal``, None when there is no readable log): the one the last commit recorded
    (``committed``, hex), checked against the log's header (``check_wal_tag``); else (no commit, or
    one written before commits recorded the tag) the log's own; else a new random one.
    ResumablePipeline, DistributedPipeline (each rank's log) and the collate's GlobalDedup share it."""
    stored = bytes(info["tag"]) if info is not None else None
    if committed is None:
        return stored if stored is not None else os.urandom(32)
    check_wal_tag(path, stored, committed, fix=fix)
    return bytes.fromhex(committed)


def check_wal_tag(path: str, stored: Optional[bytes], committed: Optional[str], fix: str = _TAG_FIX,
                  whose: str = "this state folder committed with") -> None:
    """Refuse (OSError naming ``path``) a dedup WAL whose header tag ``stored`` is not the one a commit
    recorded (``committed``, hex).  Such a log -- copied from another state folder or run with the same
    settings, enough hashes -- was accepted and its table used: documents dropped or kept by another
    run's history.  Nothing to check when either is unknown (no readable log, or a commit written
    before commits recorded the tag).  The caller checks before it changes anything (``fix``: what to
    do instead)."""
    if stored is None or committed is None or stored.hex() == committed:
        return
    raise OSError(f"the dedup WAL {path} is not the log {whose} (its header tag {stored.hex()[:16]}..., "
                  f"the commit's {str(committed)[:16]}...): a log from another state folder or run? Resuming with "
                  f"it would decide duplicates by another run's history. Nothing was changed: {fix}")


def wal_bytes(path: str) -> int:
    """The size of a WAL file, 0 when there is none; more than ``WAL_HEADER`` means it holds hashes."""
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


# ------------------------------------------------------------------ sidecars
def dump_json(obj: Dict[str, Any]) -> bytes:
    """A sidecar's bytes (sorted keys: the same object gives the same bytes and CRC32)."""
    return json.dumps(obj, sort_keys=True).encode()


def load_json_checked(path: str, crc: Optional[int] = None, missing: Optional[str] = None) -> Dict[str, Any]:
    """Reads a sidecar; with ``crc``, checks it against the CRC32 its state slot holds.

    A missing file is an OSError (``missing`` says what named it; the folder is incomplete and a
    restart from zero would silently repeat the run), a checksum mismatch likewise."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise OSError((missing or f"the distributed checkpoint names {path}, which is missing") +
                      ": the state folder is incomplete; refusing to restart from zero") from None
    if crc is not None and zlib.crc32(raw) != crc:
        raise OSError(f"commit sidecar {path} does not match its state slot (checksum): refusing to resume")
    return json.loads(raw)


# ------------------------------------------------------------------ the run record
def describe_setting(v: Any) -> Any:
    """A JSON-able description of a stage setting (for "does a resume use the same settings?"):
    plain values as they are, stage objects by class and configuration, other objects by type."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, dict):
        return {str(k): describe_setting(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [describe_setting(x) for x in v]
    cfg = getattr(v, "_config", None)
    if isinstance(cfg, dict):
        return {"type": type(v).__name__, **{str(k): describe_setting(x) for k, x in sorted(cfg.items())}}
    from ..stages import _Pipeline

    if isinstance(v, _Pipeline):  # a FusedPipeline / ChainPipeline passed as the pipeline callable
        stages = {k: describe_setting(getattr(v, k) or False) for k in ("cleaner", "quality", "pii")}
        return {"type": "pipeline", **stages, "dedup": v.dedup is not None}
    return {"type": f"{type(v).__module__}.{type(v).__qualname__}"}


def _with_defaults(d: Any) -> Any:
    """A described setting with every stage's unset settings filled in from its class's defaults, so that a
    record that names a default explicitly (checkpoints written before stages recorded only what differs from
    the defaults) and one that leaves it out compare equal."""
    if isinstance(d, list):
        return [_with_defaults(x) for x in d]
    if not isinstance(d, dict):
        return d
    out = {k: _with_defaults(x) for k, x in d.items()}
    kind = d.get("type")
    if isinstance(kind, str) and kind.isidentifier():
        from .. import stages

        cls = getattr(stages, kind, None)
        if isinstance(cls, type):
            import inspect

            for name, p in inspect.signature(cls).parameters.items():
                if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is not p.empty:
                    out.setdefault(name, describe_setting(p.default))
    return out


def run_differences(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    """What differs between two run records (settings that shape the output, and the source's
    identity), in words; [] when they agree."""
    out: List[str] = []
    for k in sorted(set(old) | set(new)):
        a, b = _with_defaults(old.get(k)), _with_defaults(new.get(k))
        if k == "source":
            out += source_differences(a, b)
        elif a != b:
            out.append(f"{k}: committed {json.dumps(old.get(k), sort_keys=True)}, "
                       f"now {json.dumps(new.get(k), sort_keys=True)}")
    return out


def source_differences(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> List[str]:
    """What differs between two sources' identities (settings, file count, file fingerprints)."""
    if a is None and b is None:
        return []
    if a is None and b.get("kind") == "IterableSource":
        return []  # committed before lists had an identity: nothing to compare
    if a is not None and b is not None and "in_memory_items" in a and "in_memory_items" in b and a != b:
        return [f"input: committed over an in-memory list of {a['in_memory_items']} record(s) (sampled CRC "
                f"{a.get('sampled_crc32')}), now {b['in_memory_items']} (sampled CRC {b.get('sampled_crc32')})"
                + (f", text_key {a.get('text_key')!r} -> {b.get('text_key')!r}"
                   if a.get("text_key") != b.get("text_key") else "")]
    if a is None or b is None:
        return [f"input: committed over {'a source without identity' if a is None else a.get('kind')}, "
                f"now {'a source without identity' if b is None else b.get('kind')}"]
    out = []
    fa, fb = a.get("files") or [], b.get("files") or []
    rest_a = {k: v for k, v in a.items() if k != "files"}
    rest_b = {k: v for k, v in b.items() if k != "files"}
    if rest_a != rest_b:
        out.append(f"input settings: committed {json.dumps(rest_a, sort_keys=True)}, "
                   f"now {json.dumps(rest_b, sort_keys=True)}")
    if len(fa) != len(fb):
        out.append(f"input: committed over {len(fa)} file(s), now {len(fb)}")
    else:
        for x, y in zip(fa, fb):
            out += [f"input changed: {d}" for d in fingerprint_differences(x, y)]
    return out
