"""Content fingerprints of input files, so that a resume can tell a changed input.

A resume continues at a committed *position* in its inputs; that position only
means something for the same bytes.  Path and size are not enough (an input
shuffled in place keeps its size), and hashing whole multi-GB inputs at every
start is too slow, so a fingerprint records:

* the path, the size and the modification time (``st_mtime_ns``);
* the SHA-256 of the first MiB and of the last MiB;
* the SHA-256 of 16 samples of 64 KiB spread evenly over the file.

Reading costs at most ~3 MiB per file.  :func:`fingerprint_differences`
compares two fingerprints and names every difference; a changed mtime alone
counts as a change (the bytes may have been rewritten in place where no sample
happens to look).
"""

from __future__ import annotations

import hashlib
import os

__all__ = ["file_fingerprint", "fingerprint_differences", "FINGERPRINT_VERSION"]

FINGERPRINT_VERSION = 1
_EDGE = 1 << 20          # first / last MiB
_SAMPLE = 64 << 10       # 64 KiB per sample
_SAMPLES = 16


def _sha(fh, offset: int, length: int) -> str:
    h = hashlib.sha256()
    fh.seek(offset)
    left = length
    while left > 0:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            break
        h.update(chunk)
        left -= len(chunk)
    return h.hexdigest()


def file_fingerprint(path) -> dict:
    """The fingerprint of the file at ``path`` (a str or os.PathLike).

    Returns a JSON-serialisable dict with keys ``version``, ``path`` (absolute),
    ``size``, ``mtime_ns``, ``head_sha256``, ``tail_sha256`` and
    ``samples_sha256`` (one hash over the 16 evenly spaced 64 KiB samples).
    Raises TypeError for a ``path`` that is not a str/PathLike and OSError
    (naming the file) when it cannot be read.
    """
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = os.fspath(path)
    if not path:
        raise ValueError("path must not be empty")
    apath = os.path.abspath(path)
    try:
        with open(apath, "rb") as fh:
            st = os.fstat(fh.fileno())
            size = st.st_size
            head = _sha(fh, 0, min(size, _EDGE))
            tail = _sha(fh, max(0, size - _EDGE), min(size, _EDGE))
            samples = hashlib.sha256()
            if size > 0:
                span = max(0, size - _SAMPLE)
                for i in range(_SAMPLES):
                    off = (span * i) // (_SAMPLES - 1)
                    samples.update(bytes.fromhex(_sha(fh, off, min(_SAMPLE, size))))
            # mtime from the same open file, after the reads, so a writer racing
            # the fingerprint is more likely to show up as a changed mtime later.
            mtime_ns = os.fstat(fh.fileno()).st_mtime_ns
    except OSError as e:
        raise OSError(e.errno, f"cannot fingerprint input file {apath!r}: {e.strerror}") from e
    return {
        "version": FINGERPRINT_VERSION,
        "path": apath,
        "size": int(size),
        "mtime_ns": int(mtime_ns),
        "head_sha256": head,
        "tail_sha256": tail,
        "samples_sha256": samples.hexdigest(),
    }


_FIELDS = (
    ("size", "size"),
    ("head_sha256", "content of the first MiB"),
    ("tail_sha256", "content of the last MiB"),
    ("samples_sha256", "content (sampled)"),
    ("mtime_ns", "modification time"),
)


def fingerprint_differences(old: dict, new: dict) -> list:
    """Human-readable reasons why ``new`` is not the same input as ``old``.

    An empty list means the two fingerprints agree.  Both arguments are dicts
    from :func:`file_fingerprint` (``old`` may come from a committed state file:
    a missing or unknown field is reported, not guessed).  The path is
    compared too, but a moved file with identical content is reported as a
    move only.
    """
    if not isinstance(old, dict):
        raise TypeError(f"old must be a dict from file_fingerprint, got {type(old).__name__}")
    if not isinstance(new, dict):
        raise TypeError(f"new must be a dict from file_fingerprint, got {type(new).__name__}")
    name = new.get("path") or old.get("path") or "<input>"
    out = []
    if old.get("version") != new.get("version"):
        out.append(f"{name}: fingerprint format {old.get('version')!r} != {new.get('version')!r}")
        return out
    if old.get("path") != new.get("path"):
        out.append(f"path changed: {old.get('path')!r} -> {new.get('path')!r}")
    for key, label in _FIELDS:
        a, b = old.get(key), new.get(key)
        if a is None or b is None:
            out.append(f"{name}: {label} not recorded")
        elif a != b:
            if key == "size":
                out.append(f"{name}: size changed from {a} to {b} bytes")
            elif key == "mtime_ns":
                out.append(f"{name}: modification time changed (file rewritten or touched)")
            else:
                out.append(f"{name}: {label} changed")
    return out
