"""The engine of ``luminamoon run``: source → ResumablePipeline → ShardWriter, with
stats, progress, commits and resume.

Commit protocol (what makes ``--resume`` give the output of an uninterrupted
run): a part file is finished (written under a temporary name, fsynced,
renamed) *before* ``ResumablePipeline.commit`` records the coordinate of the
last batch it holds, together with the writer's and the statistics' state.  On
resume, the pipeline restores the source position and truncates the dedup log
to the commit; the writer deletes any part file beyond the committed ones; the
statistics continue from the committed counts.  Part boundaries depend only on
the input (``part_docs`` / ``part_mb`` at batch boundaries), so the resumed run
writes the same files an uninterrupted run writes.

Example:
    >>> from luminamoon.cli.runner import run_corpus
    >>> from luminamoon.cli.config import default_config
    >>> stats = run_corpus(["pages.jsonl"], "out", default_config(), quiet=True)   # doctest: +SKIP
    >>> stats["documents"]["kept"] + stats["documents"]["dropped"] == stats["documents"]["input"]  # doctest: +SKIP
    True
"""
from __future__ import annotations

import hashlib
import json
import importlib
import os
import shutil
import signal
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from .config import ConfigError, stage_kwargs
from ..data.sources import BadRecordError
from .report import RunStats, format_summary, length_histogram, render_report
from ..stages import DedupFullError
from .writers import PART_RE, ShardWriter, group_label, id_text, repair_surrogates

__all__ = ["run_corpus", "RunError", "detect_format", "STATE_DIRNAME"]

STATE_DIRNAME = ".luminamoon"
_RUN_FILE = "run.json"


class RunError(Exception):
    """A problem the user can fix (bad input, output folder in use, ...); the message says how."""


# ------------------------------------------------------------------ inputs
def detect_format(path: str) -> str:
    p = path.lower()
    for suf in (".gz", ".gzip", ".zst", ".zstd"):
        if p.endswith(suf):
            p = p[: -len(suf)]
            break
    if p.endswith(".parquet") or p.endswith(".pq"):
        return "parquet"
    if p.endswith((".jsonl", ".json", ".ndjson")):
        return "jsonl"
    if p.endswith((".txt", ".text", ".md")):
        return "text"
    raise RunError(f"cannot tell the format of {path!r} from its name: pass --input-format jsonl|text|parquet")


STDIN_NAMES = ("-", "/dev/stdin", "/dev/fd/0")
_STDIN_TMP = ".luminamoon-stdin.tmp"  # standard input being copied, before the run's state exists


class _Inputs:
    """The files of a run: ``paths`` (read in this order), ``names`` (each file's
    path relative to the inputs' common root: the ids' prefix), and what the
    expansion passed over (``skipped``: not_data, dangling_symlinks, own_output, run_files)."""

    def __init__(self) -> None:
        self.paths: List[str] = []
        self.names: List[str] = []
        self.skipped: Dict[str, List[str]] = {"not_data": [], "dangling_symlinks": [], "own_output": [],
                                              "run_files": []}
        self.stdin = False


def _under(path: str, folder: str) -> bool:
    try:
        return os.path.commonpath([os.path.realpath(path), os.path.realpath(folder)]) == os.path.realpath(folder)
    except ValueError:
        return False


def _gather_inputs(inputs: Sequence[str], out: str, fmt: str, stdin_copy: Optional[str],
                   own: "set") -> _Inputs:
    """Expands the inputs (see ``sources.expand_input``), drops what is not data and
    this output folder's own files (``own``: the manifest of the run in ``out``) from
    folder and glob expansions, and refuses any other input inside the output folder."""
    from ..data.sources import expand_input

    res = _Inputs()
    roots: List[str] = []
    seen = set()
    for item in inputs:
        if item in STDIN_NAMES:
            if len(inputs) > 1:
                raise RunError("standard input ('-') must be the only input")
            res.stdin = True
            res.paths, res.names = [stdin_copy], ["stdin"]
            return res
        literal = os.path.lexists(item) and not os.path.isdir(item)
        try:
            files, root, skipped = expand_input(item)
        except FileNotFoundError as e:
            raise RunError(f"input not found: {e.args[0] if e.args else e}") from None
        for k, v in skipped.items():
            res.skipped[k] += v
        n_before = len(res.paths)
        for f in files:
            if _under(f, out):
                rel = os.path.relpath(os.path.realpath(f), os.path.realpath(out))
                if not literal and (rel in own or rel.split(os.sep)[0] == STATE_DIRNAME):
                    res.skipped["own_output"].append(f)
                    continue
                raise RunError(f"the output folder {out!r} holds input file {f!r}: a run must not write where it "
                               "reads (it could replace or delete its input); write the output to another folder")
            if not literal and _run_file_of_earlier_run(f):
                res.skipped["run_files"].append(f)
                continue
            if not literal and fmt == "auto":
                try:
                    detect_format(f)
                except RunError:
                    res.skipped["not_data"].append(f)
                    continue
            key = os.path.realpath(f)
            if key in seen:
                continue  # the same file named twice (a file and a glob): read once
            seen.add(key)
            res.paths.append(f)
            roots.append(os.path.abspath(root))
        if n_before == len(res.paths) and not literal:
            raise RunError(f"input not found: {item!r} holds no data file (passed over: "
                           f"{', '.join(res.skipped['not_data'][:5] + res.skipped['own_output'][:5] + res.skipped['run_files'][:5]) or 'nothing'})")
    try:
        common = os.path.commonpath(roots) if roots else "."
    except ValueError:  # different drives
        common = ""
    res.names = [os.path.relpath(os.path.abspath(p), common) if common else os.path.abspath(p) for p in res.paths]
    return res


def _run_file_of_earlier_run(path: str) -> bool:
    """Whether ``path`` is the statistics or report of an earlier run (``stats.json``, ``report.png`` beside
    a ``.luminamoon/run.json``): a folder (or glob) input that is, or holds, another run's output is read
    for its parts only.  ``stats.json`` was read as JSON Lines and stopped the run ("malformed JSON"), so
    chaining runs (``luminamoon run out1 -o out2``) failed."""
    d, name = os.path.split(path)
    return name in _OWN_FILES and os.path.isfile(os.path.join(d, STATE_DIRNAME, _RUN_FILE))


def _spool_stdin(out: str, fmt: str) -> "tuple[str, str]":
    """Copies standard input to a file in ``out`` (a resume reads that copy: standard
    input cannot be read twice), named by what it holds: gzip / zstd / Parquet by
    their magic bytes, JSON Lines or text by the first byte (or ``--input-format``)."""
    tmp = os.path.join(out, _STDIN_TMP)
    src = sys.stdin.buffer
    head = b""
    with open(tmp, "wb") as f:
        while True:
            chunk = src.read(1 << 20)
            if not chunk:
                break
            if len(head) < 1 << 16:
                head += chunk[: (1 << 16) - len(head)]
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    comp = ""
    body = head
    if head[:2] == b"\x1f\x8b":
        comp = ".gz"
        try:
            body = _first_bytes(head, "gzip")
        except Exception as e:  # zlib.error: was a traceback (exit 1); the caller drops the spool
            raise RunError(f"standard input starts like gzip data but is not readable gzip ({e})") from None
    elif head[:4] == b"\x28\xb5\x2f\xfd" or (len(head) >= 8 and  # a zstd frame, or a skippable one (pzstd)
                                               int.from_bytes(head[:4], "little") & 0xFFFFFFF0 == 0x184D2A50):
        comp = ".zst"
        try:
            body = _first_bytes(head, "zstd")
        except Exception:
            body = b"{"
    if fmt == "auto":
        # a UTF-8 byte order mark before the first record (the JSONL reader ignores it) does not make
        # JSON Lines text (it did: every record was written as one document of raw JSON)
        body = body[3:] if body[:3] == b"\xef\xbb\xbf" else body
        fmt = "parquet" if head[:4] == b"PAR1" else "jsonl" if body.lstrip()[:1] == b"{" else "text"
    ext = {"parquet": ".parquet", "jsonl": ".jsonl", "text": ".txt"}[fmt]
    return tmp, "stdin" + ext + ("" if fmt == "parquet" else comp)


def _first_bytes(head: bytes, comp: str) -> bytes:
    """The first decompressed bytes of ``head`` (the start of a gzip or zstd stream) that are not
    blank, read across members / frames (review s35: only the first member / frame was read, so a
    stream opening with an empty gzip member, an empty zstd frame or a skippable frame was taken
    for text, and its JSON lines became documents of raw JSON).  Raises on data that is not the
    format (zlib.error, zstd.ZstdError)."""
    import zlib

    rest, body = head, b""
    while rest and not body.strip():
        if comp == "gzip":
            if not rest.strip(b"\0"):  # zero padding after the last member
                break
            d = zlib.decompressobj(31)
            body += d.decompress(rest, 1 << 16)
            if not d.eof:
                break
            rest = d.unused_data
        else:
            import zstandard

            if len(rest) >= 8 and int.from_bytes(rest[:4], "little") & 0xFFFFFFF0 == 0x184D2A50:
                rest = rest[8 + int.from_bytes(rest[4:8], "little"):]  # a skippable frame
                continue
            d = zstandard.ZstdDecompressor().decompressobj()
            body += d.decompress(rest)
            if not d.eof:
                break
            rest = d.unused_data
    return body


def _make_source(paths: List[str], fmt: str, cfg: Dict[str, Any]):
    from ..data import sources as S

    icfg = cfg["input"]
    on_error = "skip" if icfg["skip_bad_records"] else "raise"
    key = icfg["text_field"]
    mb = icfg["max_record_mb"]
    limit = {"on_error": on_error, "max_record_bytes": max(1, int(mb * 2**20)) if mb else None}
    if icfg["text_per"] == "file" and fmt != "text":  # was: ignored without a word
        raise ConfigError(f"--text-per-file (input.text_per='file') applies to text input, and this input is "
                          f"{fmt}: drop the option, or pass --input-format text to read each file as one document")
    if fmt == "jsonl":
        return S.JsonlSource(paths, text_key=key, **limit)
    if fmt == "text":
        return S.TextSource(paths, per=icfg["text_per"], text_key=key, **limit)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        for p in paths:  # check the text column up front: a clear error before any work
            try:
                names = pq.read_schema(p).names
            except Exception as e:
                raise RunError(f"{p}: not a readable Parquet file ({e})") from None
            if key not in names:
                raise RunError(f"{p}: no column {key!r} (columns: {', '.join(names)}); "
                               f"name the text column with --text-field")
        # only the columns the run uses are read (an unused wide column is never decoded)
        wanted = [icfg["id_field"], *cfg["output"]["keep_fields"]] + ([cfg["run"]["group_by"]] if cfg["run"]["group_by"] else [])
        return S.ParquetSource(paths, text_column=key, columns=[c for c in wanted if c != key], **limit)
    raise RunError(f"unknown input format {fmt!r}")


# internal notes on a record: tuple keys, which no JSON object or Parquet row can hold
# (an input field named "__lm_skipped" is data, not a note)
_SKIPPED = ("luminamoon", "skipped")
_SURROGATES = ("luminamoon", "surrogates")


def _input_source(inner, id_field: str, text_field: str, names: Sequence[str]):
    """Wraps a source: gives records without an id one ("<file>:<row>", the file's
    path relative to the inputs' root and the line number (JSONL, text) or row
    index (Parquet; 0 for one document per file)), replaces
    lone surrogates (how JSON carries undecodable bytes) by U+FFFD, and notes
    bad records skipped before each record (so they are counted in the batch
    that follows them, not ahead of the consumer)."""
    from ..data.sources import Source

    class _InputSource(Source):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.paths = getattr(inner, "paths", [])
            self.surrogate_docs = 0
            self._seen_skipped = 0
            self.names = list(names)

        def position(self):
            return self.inner.position()

        def seek(self, position):
            self.inner.seek(position)

        @property
        def skipped(self):  # type: ignore[override]
            return self.inner.skipped

        @skipped.setter
        def skipped(self, v):
            pass

        @property
        def _columnar(self):
            return bool(getattr(inner, "_columnar", False))

        def iter_blocks(self, n):
            """The columnar path: ids are given when the batch is written (from each
            record's file and line), skips come with each block."""
            def fix(rec, text):
                fixed = repair_surrogates(text)  # ONE U+FFFD per lone surrogate
                if fixed != text:
                    rec[_SURROGATES] = 1
                return fixed

            # JSONL: the ids decoded by the same C scan as the texts (field_strings reads no line again)
            kw = {"fields": (id_field,)} if getattr(inner, "kind", "") == "jsonl" else {}
            return inner.iter_blocks(n, fix_text=fix, **kw)

        def _records(self):
            inner = self.inner
            per_file = getattr(inner, "per", None) == "file"
            for rec in inner:
                if id_field not in rec or rec[id_field] is None:
                    pos = inner._pos if hasattr(inner, "_pos") else inner.position()
                    shard = pos.get("shard", 0)
                    if per_file:  # the position is already past the file it yielded
                        shard, n = shard - 1, 0
                    else:
                        n = pos["line"] if "line" in pos else pos.get("record", 0) - 1
                    name = names[shard] if 0 <= shard < len(names) else "doc"
                    rec[id_field] = f"{name}:{n}"
                text = rec[text_field]
                if not text.isascii():
                    fixed = repair_surrogates(text)  # ONE U+FFFD per lone surrogate
                    if fixed != text:
                        rec[text_field] = fixed
                        rec[_SURROGATES] = 1
                sk = inner.skipped
                if sk != self._seen_skipped:
                    rec[_SKIPPED] = sk - self._seen_skipped
                    self._seen_skipped = sk
                yield rec

    return _InputSource()


# --------------------------------------------------------------- pipeline
def _delta(now: Any, before: Any) -> Any:
    if isinstance(now, dict):
        b = before if isinstance(before, dict) else {}
        return {k: _delta(v, b.get(k)) for k, v in now.items()}
    if isinstance(now, (list, tuple)):
        b = before if isinstance(before, (list, tuple)) else [None] * len(now)
        return [_delta(x, y) for x, y in zip(now, b)]
    if isinstance(now, (int, float)) and not isinstance(now, bool):
        return now - (before if isinstance(before, (int, float)) else 0)
    return now


class _Measure:
    """What the producer thread keeps of one batch for the statistics: the input and output
    offsets and the stages' counters after it.  The consumer turns it into lengths, histograms
    and counter deltas (``_MeasuredPipeline.take``), so that the producer starts the next batch's
    stages at once instead of doing that Python work while the stages' other threads wait."""

    __slots__ = ("off_in", "off_out", "counters")

    def __init__(self, off_in, off_out, counters) -> None:
        self.off_in, self.off_out, self.counters = off_in, off_out, counters


def _lengths(offsets: torch.Tensor) -> np.ndarray:
    o = offsets.numpy()
    return np.diff(o).astype(np.int64, copy=False)


class _MeasuredPipeline:
    """The stages as a callable for ResumablePipeline that also measures each batch
    (lengths before/after, counter deltas): the producer thread keeps what is needed (a
    ``_Measure``: offsets and the counters after the batch) in batch order, and the consumer
    takes one per batch with ``take()``, which computes the figures."""

    def __init__(self, kind: str, kwargs: Dict[str, Any], num_threads: Optional[int]):
        self.kind, self.kwargs, self.num_threads = kind, kwargs, num_threads
        self.pipe = None
        import collections

        self.measures = collections.deque()
        self._last: Dict[str, Any] = {}

    #: ResumablePipeline hands its near-dup index over (bind_near_dedup) instead of running it on
    #: this callable's outputs: the band keys are taken before PII, in the fused order
    runs_near_dedup = True
    _near = None

    def bind_near_dedup(self, near) -> None:
        self._near = near

    def bind(self, dedup) -> None:
        from .. import stages

        cls = stages.FusedPipeline if self.kind == "fused" else stages.ChainPipeline
        try:
            self.pipe = cls(dedup=dedup if dedup is not None else False, num_threads=self.num_threads,
                            near_dedup=self._near, **self.kwargs)
        except (TypeError, ValueError) as e:
            raise ConfigError(f"stage configuration: {e}") from None
        self._last = self.pipe.counters

    @property
    def pii_cycle(self):
        """The stages' PII replacement cycle: ResumablePipeline commits and restores it."""
        return self.pipe.pii_cycle

    @pii_cycle.setter
    def pii_cycle(self, value) -> None:
        self.pipe.pii_cycle = value

    def __call__(self, st):
        r = self.pipe(st)
        self.measures.append(_Measure(st.offsets, r.texts.offsets, self.pipe.counters))
        return r

    @property
    def _stream(self) -> Optional[Callable[[int], "_MeasuredStream"]]:
        """The pipeline's stream (``FusedPipeline._stream``: ResumablePipeline's reading path), the
        batches measured as by ``__call__``; None when the stages have no stream (a ChainPipeline):
        the reading path then calls this pipeline batch by batch."""
        inner = getattr(self.pipe, "_stream", None)
        if not callable(inner):
            return None
        return lambda max_jobs: _MeasuredStream(self, inner(max_jobs))

    def take(self) -> Dict[str, Any]:
        """The next batch's figures (consumer thread, batch order): ``len_in``, ``len_out`` (the
        documents' byte lengths, int64 arrays) and ``bytes_out``.  The stages' counters after the
        batch are kept: ``counters()`` gives their change since it was last called."""
        m = self.measures.popleft()
        self._taken = m.counters
        len_out = _lengths(m.off_out)
        return {"len_in": _lengths(m.off_in), "len_out": len_out, "bytes_out": int(len_out.sum())}

    def counters(self) -> Dict[str, Dict[str, int]]:
        """The stages' counts (``_counter_view``) of the batches taken since the last call (the
        counters are cumulative integers: their change over several batches is the sum of the
        batches' changes, so the statistics add them at each commit instead of once a batch)."""
        now = getattr(self, "_taken", None)
        if now is None:
            return {}
        d = _delta(now, self._last)
        self._last, self._taken = now, None
        return _counter_view(d)


class _MeasuredStream:
    """``_MeasuredPipeline``'s stream: each collected batch measured in submission order (its
    counters as the stream took them right after it)."""

    def __init__(self, measured: "_MeasuredPipeline", inner) -> None:
        import collections

        self._m, self._inner = measured, inner
        self._offsets = collections.deque()
        self.dedup, self.near_dedup = inner.dedup, inner.near_dedup

    def submit(self, st) -> None:
        self._inner.submit(st)
        self._offsets.append(st.offsets)

    def collect(self):
        r, lsn, near_lsn, cycle, counters = self._inner.collect()
        self._m.measures.append(_Measure(self._offsets.popleft(), r.texts.offsets, counters))
        return r, lsn, near_lsn, cycle, counters

    def close(self) -> None:
        self._inner.close()


class _ReasonTally:
    """The dropped documents by reason over the batches since the last ``flush``: one
    ``np.bincount`` a batch into a running array, the names given at ``flush`` (codes in
    ascending order), instead of a dict a batch; codes outside 0..65535 are counted by
    ``np.unique`` (as ``report.reason_counts`` does)."""

    def __init__(self) -> None:
        self.counts = np.zeros(0, dtype=np.int64)
        self.other: Dict[int, int] = {}

    def add(self, reasons: np.ndarray) -> None:
        if not reasons.size:
            return
        lo, hi = int(reasons.min()), int(reasons.max())
        if lo < 0 or hi >= 1 << 16:
            for c, k in zip(*np.unique(reasons, return_counts=True)):
                if c:
                    self.other[int(c)] = self.other.get(int(c), 0) + int(k)
            return
        if hi == 0:
            return
        c = np.bincount(reasons)
        if len(c) > len(self.counts):
            c[: len(self.counts)] += self.counts
            self.counts = c.astype(np.int64, copy=False)
        else:
            self.counts[: len(c)] += c

    def flush(self, names: Dict[int, str]) -> Dict[str, int]:
        from ..stages import reason_name

        codes = np.flatnonzero(self.counts).tolist()
        got = {c: int(self.counts[c]) for c in codes if c}
        for c, k in self.other.items():
            got[c] = got.get(c, 0) + k
        self.counts = np.zeros(0, dtype=np.int64)
        self.other = {}
        return {names.setdefault(c, reason_name(c)): got[c] for c in sorted(got)}


def _counter_view(d: Dict[str, Any]) -> Dict[str, Dict[str, int]]:
    """PII counts by type and the cleaner's / quality filter's counters, from a
    (delta of) FusedPipeline or ChainPipeline ``counters``."""
    out: Dict[str, Dict[str, int]] = {"pii": {}, "cleaner": {}, "quality": {}}

    def find(*names):
        for n in names:
            if isinstance(d.get(n), dict):
                return d[n]
        return {}

    pii = find("pii", "pii_masker")
    m = pii.get("matches", pii.get("by_type"))
    if isinstance(m, dict):
        out["pii"] = {k: int(v) for k, v in m.items()}
    else:
        from ..stages import PII_TYPES

        out["pii"] = {t: int(pii[t]) for t in PII_TYPES if isinstance(pii.get(t), (int, float))}
    cl = find("clean", "cleaner")
    out["cleaner"] = {k: int(v) for k, v in cl.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    q = find("quality")
    out["quality"] = {k: int(v) for k, v in q.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for rule, v in (q.get("rules") or {}).items():  # C4 line rules count the lines they removed
        if rule.startswith("c4.line_") and v:
            out["quality"][f"lines_removed.{rule}"] = int(v)
    return out


# ------------------------------------------------------------------ output folder
# Settings that change neither the output nor the statistics: a resume may use others.
_HOW_NOT_WHAT = {"run": ("threads", "prefetch_batches", "prefetch_mb"),
                 "dedup": ("max_entries",),       # a bound, not a result: a resume may raise it
                 "near_dup": ("max_entries",),
                 "input": ("skip_bad_records",)}  # a resume may skip the bad record the run stopped at


def _run_identity(paths: List[str], fmt: str, cfg: Dict[str, Any],
                  fingerprints: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    """What a resume must match: the inputs by content (``file_fingerprint``: size,
    mtime, sampled SHA-256), the input format and every setting that shapes the output."""
    from ..data.fingerprint import file_fingerprint

    files = fingerprints if fingerprints is not None else [file_fingerprint(p) for p in paths]
    cfg = json.loads(json.dumps(cfg))
    if cfg.get("near_dup", {}).get("mode", "off") == "off":
        cfg.pop("near_dup", None)  # off: the identity of runs from before near-dup removal existed
    for sec, keys in _HOW_NOT_WHAT.items():
        for k in keys:
            cfg.get(sec, {}).pop(k, None)
    key = json.dumps({"paths": [f["path"] for f in files], "format": fmt, "config": cfg}, sort_keys=True)
    return {"files": files, "format": fmt, "config": cfg, "fingerprint": hashlib.sha256(key.encode()).hexdigest()[:16]}


def _identity_differences(prev: Dict[str, Any], ident: Dict[str, Any]) -> List[str]:
    from ..data.fingerprint import fingerprint_differences

    diff: List[str] = []
    a = [f.get("path") for f in prev.get("files", [])]
    b = [f["path"] for f in ident["files"]]
    if a != b:
        gone = [p for p in a if p not in b]
        new = [p for p in b if p not in a]
        diff.append("the input files (" + "; ".join(
            x for x in ((f"no longer read: {', '.join(map(str, gone[:3]))}" if gone else ""),
                        (f"new: {', '.join(new[:3])}" if new else ""),
                        ("" if gone or new else "another order")) if x) + ")")
    else:
        for old, cur in zip(prev.get("files", []), ident["files"]):
            diff += [f"input changed: {d}" for d in fingerprint_differences(old, cur)]
    pc, ic = prev.get("config", {}), ident["config"]
    keys = [f"{sec}.{k}" for sec in sorted(set(pc) | set(ic)) for k in sorted(set(pc.get(sec, {})) | set(ic.get(sec, {})))
            if pc.get(sec, {}).get(k) != ic.get(sec, {}).get(k)]
    if keys:
        diff.append("the configuration (" + ", ".join(keys[:8]) + ")")
    if prev.get("format") != ident["format"]:
        diff.append(f"the input format ({prev.get('format')} then, {ident['format']} now)")
    return diff


_OWN_FILES = ("stats.json", "report.png")


class _Manifest:
    """The files this run writes into the output folder, recorded in its run.json
    *before* each is created, so that --overwrite and a resume delete only files a
    run made (design: never a file the run did not create)."""

    def __init__(self, run_file: str, ident: Dict[str, Any]) -> None:
        self.run_file, self.ident = run_file, ident
        self.names = set(ident.get("manifest", []))

    def add(self, *names: str) -> None:
        """Records ``names`` (one run.json write for all of them; none when all are recorded)."""
        new = [n for n in names if n not in self.names]
        if new:
            self.names.update(new)
            self.ident["manifest"] = sorted(self.names)
            _write_run_file(self.run_file, self.ident)


def _write_run_file(run_file: str, ident: Dict[str, Any]) -> None:
    from .._durable import atomic_write

    atomic_write(run_file, (json.dumps(ident, indent=1) + "\n").encode("utf-8"))


def read_run_state(out: str) -> Optional[Dict[str, Any]]:
    """The run.json of the run in ``out`` (None when there is none or it is unreadable)."""
    try:
        with open(os.path.join(out, STATE_DIRNAME, _RUN_FILE), "r", encoding="utf-8") as f:
            prev = json.load(f)
        return prev if isinstance(prev, dict) else None
    except (OSError, ValueError):
        return None


def _own_files(out: str, prev: Optional[Dict[str, Any]]) -> "set":
    """The files in ``out`` the run recorded there wrote (a run.json from before
    manifests: its part files, stats.json and report.png)."""
    if prev is None:
        return set()
    if "manifest" in prev:
        return {str(n) for n in prev["manifest"]}
    names = set(os.listdir(out)) if os.path.isdir(out) else set()
    return {f for f in names if PART_RE.match(f) or f in _OWN_FILES}


def _foreign_outputs(out: str, own: "set") -> List[str]:
    """Files in ``out`` a run would write over or delete but did not write itself."""
    if not os.path.isdir(out):
        return []
    return sorted(f for f in os.listdir(out) if (PART_RE.match(f) or f in _OWN_FILES) and f not in own)


def _prepare_output(out: str, ident: Dict[str, Any], resume: bool, overwrite: bool, log,
                    prev: Optional[Dict[str, Any]]) -> "tuple[bool, _Manifest]":
    """Checks / clears the output folder. Returns (resuming a committed run, the manifest)."""
    state_dir = os.path.join(out, STATE_DIRNAME)
    run_file = os.path.join(state_dir, _RUN_FILE)
    if os.path.exists(out) and not os.path.isdir(out):
        raise RunError(f"output {out!r} exists and is not a folder")
    has_state = os.path.isdir(state_dir)
    own = _own_files(out, prev)
    if overwrite and has_state:
        for f in sorted(own):  # only what the earlier run wrote; anything else stays
            path = os.path.join(out, f)
            if os.path.isfile(path) and not os.path.islink(path):
                os.remove(path)
        for f in os.listdir(out):
            if f.startswith(".tmp-part-"):
                os.remove(os.path.join(out, f))
        shutil.rmtree(state_dir)
        has_state, own, prev = False, set(), None
    foreign = _foreign_outputs(out, own)
    if foreign:
        raise RunError(f"output folder {out!r} holds {', '.join(foreign[:3])}" + (", ..." if len(foreign) > 3 else "")
                       + f", not written by {'this' if has_state else 'a luminamoon'} run: a run would replace or "
                       "delete it. Choose another output folder, or move those files away")
    if has_state:
        if not resume:
            what = f"started {prev.get('started', '?')} on {len(prev.get('files', []))} input file(s)" if prev else "unreadable"
            raise RunError(f"output folder {out!r} holds the state of another run ({what}). "
                           f"Pass --resume to continue it, or --overwrite to start over (deletes its output).")
        if prev is None:
            raise RunError(f"{run_file} is missing or unreadable: cannot tell which run the state belongs to; "
                           "use --overwrite to start over")
        diff = _identity_differences(prev, ident)
        if diff:
            raise RunError(f"--resume: this command differs from the run in {out!r}: {'; '.join(diff[:6])}. "
                           "Resume with the same command and inputs, or start over with --overwrite")
        if "manifest" not in prev:
            prev["manifest"] = sorted(own)
        return True, _Manifest(run_file, prev)
    if resume:
        log(f"note: nothing to resume in {out!r}; starting a new run")
    os.makedirs(state_dir, exist_ok=True)
    ident = dict(ident, started=time.strftime("%Y-%m-%d %H:%M:%S"), manifest=[])
    _write_run_file(run_file, ident)
    return False, _Manifest(run_file, ident)


def _forget_run(out: str, manifest: Optional[_Manifest], created_out: bool) -> None:
    """A run that failed before its first commit: removes what it wrote (its state,
    the files in its manifest, the output folder if it made it and left it empty),
    so that the corrected command needs no --overwrite."""
    try:
        for f in sorted(manifest.names) if manifest else []:
            path = os.path.join(out, f)
            if os.path.isfile(path):
                os.remove(path)
        for f in os.listdir(out):
            if f.startswith(".tmp-part-") or f == _STDIN_TMP:
                os.remove(os.path.join(out, f))
        shutil.rmtree(os.path.join(out, STATE_DIRNAME), ignore_errors=True)
        if created_out and not os.listdir(out):
            os.rmdir(out)
    except OSError:
        pass  # the first error is the one to report


def _drop_spool(out: str, created_out: bool) -> None:
    try:
        os.remove(os.path.join(out, _STDIN_TMP))
    except OSError:
        pass
    try:
        if created_out and not os.listdir(out):
            os.rmdir(out)
    except OSError:
        pass


def _check_fields(cfg: Dict[str, Any]) -> List[str]:
    """The kept fields, checked against the output's id and text columns; refuses a
    --group-by on the text field (its records carry no text: every group was "(none)")."""
    from .config import ConfigError

    text, idf = cfg["input"]["text_field"], cfg["input"]["id_field"]
    if cfg["run"]["group_by"] == text:
        raise ConfigError(f"--group-by {text!r} names the text field; group by a metadata field "
                          "(e.g. --group-by source)")
    keep = []
    for k in cfg["output"]["keep_fields"]:
        if k == text or k == idf == "id":
            continue  # already the output's text / id column (a record's text is the cleaned text)
        if k in ("id", "text"):
            raise ConfigError(f"--keep-fields {k!r} would replace the output's {k} column "
                              f"(the input's {'text' if k == 'text' else 'id'} field is {text if k == 'text' else idf!r})")
        keep.append(k)
    return keep


# ---------------------------------------------------------------------- run
def run_corpus(inputs: Sequence[str], out: str, cfg: Dict[str, Any], *, resume: bool = False,
               overwrite: bool = False, quiet: bool = False, title: Optional[str] = None,
               report: bool = True, stop_after_batches: Optional[int] = None, engine: str = "local",
               address: Optional[str] = None) -> Dict[str, Any]:
    """Runs the pipeline over ``inputs`` into ``out``; returns the stats.json dict.

    ``engine="ray"`` (``--engine ray [--address ADDR]``) runs it on a Ray cluster
    (``luminamoon.ray``): the same parts, stats.json and report.png.

    Inputs are files, folders (read recursively), globs, or ``-`` for standard
    input.  Raises RunError (bad input, output folder in use, ...) with a message for
    the user; KeyboardInterrupt passes through after the pipeline is closed
    (the last commit stands)."""
    if engine not in ("local", "ray"):
        raise RunError(f"engine must be local or ray, not {engine!r}")
    if resume and overwrite:
        raise RunError("--resume and --overwrite together: --resume continues the committed run, --overwrite "
                       "discards it; pass one of them")
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    keep = _check_fields(cfg)
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise RunError(f"output folder: File exists and is not a folder: {out!r}")
    created_out = not os.path.exists(out)
    # One run per output folder: the folder itself is locked before anything in it is read or
    # touched (--overwrite deleting, the standard-input copy, the state), and held to the end.
    os.makedirs(out, exist_ok=True)
    try:
        lock_fd = _lock_output(out)
    except BaseException:
        if created_out:
            _remove_if_empty(out)
        raise
    try:
        return _run_locked(inputs, out, cfg, resume, overwrite, quiet, title, report, stop_after_batches,
                           log, keep, created_out, (engine, address))
    except BaseException:
        if created_out:  # a start that failed leaves no empty folder behind
            _remove_if_empty(out)
        raise
    finally:
        os.close(lock_fd)


def _lock_output(out: str) -> int:
    """Takes the exclusive lock of the output folder (``flock`` on the folder itself, so that
    nothing is left behind and ``--overwrite`` cannot delete it); raises RunError naming the
    process of the run that holds it."""
    import errno
    import fcntl

    from ..data._prefetch import LOCK_NAME

    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        try:
            with open(os.path.join(out, STATE_DIRNAME, LOCK_NAME), encoding="ascii", errors="replace") as f:
                holder = f.read(32).strip()
        except OSError:
            holder = ""
        raise RunError(f"output folder {out!r} is in use by process {holder or '(unknown)'}: one run per "
                       "output folder at a time; wait for it to end, or choose another output folder") from None
    return fd


def _remove_if_empty(out: str) -> None:
    try:
        if not os.listdir(out):
            os.rmdir(out)
    except OSError:
        pass


def _run_locked(inputs, out, cfg, resume, overwrite, quiet, title, report, stop_after_batches, log, keep,
                created_out, engine=("local", None)) -> Dict[str, Any]:
    fmt = cfg["input"]["format"]
    prev = read_run_state(out)
    state_dir = os.path.join(out, STATE_DIRNAME)
    stdin_copy = None
    if any(i in STDIN_NAMES for i in inputs):
        kept = [f for f in prev.get("manifest", []) if f.startswith(STATE_DIRNAME + "/stdin")] if prev else []
        if resume and kept:
            stdin_copy = os.path.join(out, kept[0])
            log(f"resuming over the copy of standard input kept in {stdin_copy} (standard input is not read)")
    got = _gather_inputs(inputs, out, fmt, stdin_copy or "-", _own_files(out, prev))
    for what, label in (("not_data", "file(s) that are not data (hidden, marker or unknown file type)"),
                        ("dangling_symlinks", "dangling symlink(s)"),
                        ("own_output", "own output file(s) of the run in the output folder"),
                        ("run_files", "statistics / report file(s) of an earlier run (its parts are read)")):
        if got.skipped[what]:
            names = got.skipped[what]
            print(f"luminamoon: skipped {len(names)} {label}: {', '.join(names[:8])}" + (", ..." if len(names) > 8 else ""),
                  file=sys.stderr)
    fps = None
    spooled = None
    if got.stdin and stdin_copy is None:
        try:
            tmp, name = _spool_stdin(out, fmt)
        except BaseException:
            _drop_spool(out, created_out)
            raise
        from ..data.fingerprint import file_fingerprint

        stdin_copy = os.path.join(out, STATE_DIRNAME, name)
        spooled = (tmp, stdin_copy)
        fp = file_fingerprint(tmp)
        fp["path"] = os.path.abspath(stdin_copy)
        fps = [fp]
        got.paths = [stdin_copy]
    elif got.stdin:
        got.paths = [stdin_copy]
    paths = got.paths
    if fmt == "auto":
        fmts = {detect_format(p) for p in paths}
        if len(fmts) > 1:
            raise RunError(f"the inputs mix formats ({', '.join(sorted(fmts))}): run them separately "
                           "or force one with --input-format")
        fmt = fmts.pop()
    try:
        ident = _run_identity(paths, fmt, cfg, fps)
        resuming, manifest = _prepare_output(out, ident, resume, overwrite, log, prev)
    except BaseException:
        if spooled:  # only the copy: the folder may hold another run's state
            _drop_spool(out, created_out)
        elif created_out:
            _remove_if_empty(out)
        raise
    committed = [resuming]
    try:
        if spooled:
            manifest.add(os.path.relpath(spooled[1], out))
            os.replace(*spooled)
        if engine[0] == "ray":  # luminamoon.ray: the same output from a Ray cluster
            # The Ray engine is an optional extra built on this module: it is looked up by
            # name (as a plugin), so that runner never imports it and ray needs no cycle.
            _run_ray = importlib.import_module("luminamoon.ray")._run_ray

            return _run_ray(paths, got, fmt, out, cfg, keep, manifest, resuming, committed, quiet, log, title,
                            report, stop_after_batches, address=engine[1])
        return _run(paths, got, fmt, out, cfg, keep, manifest, resuming, committed, quiet, log, title, report,
                    stop_after_batches)
    except BaseException:
        if not committed[0]:
            _forget_run(out, manifest, created_out)
        raise


def _run(paths, got: _Inputs, fmt: str, out: str, cfg: Dict[str, Any], keep: List[str], manifest: _Manifest,
         resuming: bool, committed: List[bool], quiet: bool, log, title, report, stop_after_batches) -> Dict[str, Any]:
    from ..data.resumable import ResumablePipeline

    ocfg, rcfg = cfg["output"], cfg["run"]
    kwargs = stage_kwargs(cfg)
    state_dir = os.path.join(out, STATE_DIRNAME)
    source = _input_source(_make_source(paths, fmt, cfg), cfg["input"]["id_field"], cfg["input"]["text_field"],
                           got.names)
    threads = rcfg["threads"] or None
    nd = cfg["near_dup"]
    near_removed, near_info = None, None
    if nd["mode"] == "cluster":  # pass 1 and the clustering (each resumable); this is pass 2
        near_removed, near_info = _near_cluster_pass(paths, got, fmt, cfg, state_dir, threads, quiet, log,
                                                     committed)
    measured = _MeasuredPipeline(rcfg["pipeline"], kwargs, threads)
    try:
        dcfg = cfg["dedup"]
        dedup = {"seed": int(dcfg["seed"]), "max_entries": int(dcfg["max_entries"])} if dcfg["enabled"] else False
        near_kw = {"near_dedup": _near_stream_kwargs(nd)} if nd["mode"] == "stream" else {}
        pipe = ResumablePipeline(source, pipeline=measured, dedup=dedup,
                                 batch_size=rcfg["batch_size"], prefetch_batches=rcfg["prefetch_batches"],
                                 state_dir=state_dir, text_key=cfg["input"]["text_field"], num_threads=threads,
                                 max_prefetch_bytes=max(1, int(rcfg["prefetch_mb"] * 2**20)), **near_kw)
    except TypeError as e:
        if near_kw and "near_dedup" in str(e):
            raise ConfigError("--near-dup stream: this build's ResumablePipeline has no near_dedup") from None
        raise
    except (OSError, ValueError) as e:
        raise RunError(f"cannot open the run state in {state_dir!r}: {e}") from None
    try:
        measured.bind(pipe.dedup)
        extra = pipe.resume_extra if resuming else None
        if resuming and extra is None and pipe.commits == 0 and pipe.state_dict().get("batch_index", 0):
            raise RunError(f"the state in {state_dir!r} has no output record: use --overwrite")
        try:
            writer = ShardWriter(out, fmt=ocfg["format"], compression=ocfg["compression"],
                                 part_docs=ocfg["part_docs"], part_bytes=int(ocfg["part_mb"] * 1e6),
                                 state=extra["writer"] if extra else None, extra_fields=keep,
                                 extra_types=_kept_types(paths, fmt, keep))
        except (OSError, ValueError) as e:
            raise RunError(str(e)) from None
        stats = RunStats.from_state(extra["stats"]) if extra else RunStats()
        stats.meta.update({"inputs": [os.path.abspath(p) for p in paths],
                           "output": {"folder": os.path.abspath(out), "format": ocfg["format"]},
                           "threads": threads or torch.get_num_threads(), "group_by": rcfg["group_by"],
                           "config": cfg})
        if extra:
            log(f"resuming: {stats.docs_in:,} documents and {len(writer.parts)} part file(s) already committed")
        def final_stats() -> Dict[str, Any]:
            """The content of stats.json, once the last batch is counted (the open part, if any,
            is still to be written: it is counted as written)."""
            near = near_info
            if nd["mode"] == "stream":
                near = {"mode": "stream", "removed": int(stats.dropped.get("near_duplicate", 0))}
                ns = getattr(pipe, "near_dedup_stats", None)
                if isinstance(ns, dict):
                    near["band_index"] = {k: ns[k] for k in ("entries", "table_bytes", "bytes_per_entry",
                                                             "keys_per_document") if k in ns}
                    kept_total = max(stats.docs_kept + near["removed"], 1)
                    near["band_index"]["bytes_per_document"] = round(ns.get("table_bytes", 0) / kept_total, 1)
            elif near is not None:
                near["removed_in_output"] = int(stats.dropped.get("near_duplicate", 0))
            if near is not None:
                stats.meta["near_dup"] = near
            result = stats.to_json()
            result["output"]["parts"] = [p["name"] for p in writer.parts] + \
                ([writer.open_part_name()] if writer.pending_rows else [])
            result["output"]["rows"] = writer.state()["rows"] + writer.pending_rows
            result["input_files"] = {"read": len(paths), "skipped": {k: len(v) for k, v in got.skipped.items()}}
            return result

        # stats.json and report.png are recorded with the last part (one run.json write fewer at the end);
        # stats.json is written while the last part is (see _loop's end)
        result = _loop(pipe, measured, source, writer, stats, cfg, keep, paths, fmt, quiet, stop_after_batches,
                       manifest, committed, near_removed,
                       end_files=("stats.json", "report.png") if report else ("stats.json",),
                       final_stats=(final_stats, os.path.join(out, "stats.json")))
        if report:
            manifest.add("report.png")
            render_report(result, os.path.join(out, "report.png"), title=title or f"luminamoon run → {out}")
        _mark_complete(state_dir)
    except BaseException:
        try:
            pipe.close()
        except Exception:
            pass  # the first error is the one to report (e.g. the disk filled during a write)
        raise
    pipe.close()
    return result


def _kept_types(paths: List[str], fmt: str, keep: List[str]) -> Dict[str, Any]:
    """Arrow types of the kept fields of Parquet inputs (Parquet output keeps them);
    a field whose files disagree is unified, or written as text when that fails."""
    if fmt != "parquet" or not keep:
        return {}
    import pyarrow as pa
    import pyarrow.parquet as pq

    types: Dict[str, Any] = {}
    for k in keep:
        seen = []
        for p in paths:
            sch = pq.read_schema(p)
            if k in sch.names:
                seen.append(pa.schema([sch.field(k)]))
        if seen:
            try:
                types[k] = pa.unify_schemas(seen, promote_options="permissive").field(k).type
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
                pass
    return types


def _write_json(path: str, data: Dict[str, Any]) -> None:
    from .._durable import atomic_write  # names the file on failure, leaves no tmp

    atomic_write(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))


def _mark_complete(state_dir: str) -> None:
    run_file = os.path.join(state_dir, _RUN_FILE)
    try:
        with open(run_file, "r", encoding="utf-8") as f:
            ident = json.load(f)
        ident["completed"] = time.strftime("%Y-%m-%d %H:%M:%S")
        _write_json(run_file, ident)
    except (OSError, ValueError):
        pass


def _progress(paths: List[str], fmt: str, quiet: bool, start_docs: int):
    if quiet:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return None
    plain = fmt in ("jsonl", "text") and all(not p.endswith((".gz", ".gzip", ".zst", ".zstd")) for p in paths)
    if plain:
        sizes = [os.path.getsize(p) for p in paths]
        bar = tqdm(total=sum(sizes), unit="B", unit_scale=True, unit_divisor=1000, dynamic_ncols=True,
                   desc="luminamoon", file=sys.stderr, smoothing=0.1)
        bar._lm_prefix = [0]
        for s in sizes:
            bar._lm_prefix.append(bar._lm_prefix[-1] + s)
    else:
        bar = tqdm(unit=" docs", unit_scale=True, dynamic_ncols=True, desc="luminamoon", file=sys.stderr,
                   initial=start_docs, smoothing=0.1)
        bar._lm_prefix = None
    return bar


#: _loop adds the statistics of this many batches or more (length histograms, drop reasons, stage
#: counters) while it waits for the next batch, rather than all at the next commit
_FOLD_IDLE_BATCHES = 8


def _loop(pipe, measured, source, writer: ShardWriter, stats: RunStats, cfg, keep, paths, fmt, quiet,
          stop_after_batches, manifest: _Manifest, committed: List[bool],
          near_removed: Optional[np.ndarray] = None, end_files: Sequence[str] = (),
          final_stats=None) -> Optional[Dict[str, Any]]:
    """The batches into the writer and the statistics, with commits; at the end the last part, the
    final commit, and (``final_stats``: (function giving the stats.json dict, its path)) stats.json,
    which is returned."""
    from ..stages import reason_name

    id_field = cfg["input"]["id_field"]
    group_by = cfg["run"]["group_by"]
    bar = _progress(paths, fmt, quiet, stats.docs_in)
    names: Dict[int, str] = {}
    names_in = getattr(source, "names", [])  # each input file's name: ids of records without one
    t_start = time.perf_counter()
    docs0, bytes0 = stats.docs_in, stats.bytes_in

    # the length histograms are counted over all the batches since the last commit at once (the
    # sum of the batches' histograms: one histogram of their lengths), before each commit
    lengths: "tuple[list, list]" = ([], [])
    # likewise the dropped documents by reason and the stages' counters: added to the statistics
    # at each commit (the same totals as a batch at a time; stats.json is written after the last)
    tally = _ReasonTally()

    def fold() -> None:
        stats.add_counts(tally.flush(names), measured.counters())
        if lengths[0]:
            stats.hist_in += length_histogram(np.concatenate(lengths[0]))
            stats.hist_out += length_histogram(np.concatenate(lengths[1]))
            lengths[0].clear()
            lengths[1].clear()

    def commit() -> None:
        fold()
        pipe.commit(extra={"writer": writer.state(), "stats": stats.state()})
        committed[0] = True

    registered = [False]  # the open part is in the manifest

    def finish_part(*also: str) -> None:
        # recorded as this run's before it exists (with ``also``: the files written after the
        # last part, recorded in the same run.json write)
        manifest.add(*([f"part-{len(writer.parts):05d}{writer.suffix}"] if writer.pending_rows else []), *also)
        writer.finish_part()
        registered[0] = False

    old_term = term_as_interrupt()
    try:
        nb = 0
        it = iter(pipe)
        while True:
            if len(lengths[0]) >= _FOLD_IDLE_BATCHES and not pipe.prefetch_stats["queued_batches"]:
                # the next batch is not there yet (this thread would wait for it): the statistics
                # of the batches so far are added now instead of at the next commit -- the same
                # sums; at the end of the input (the last batches are the run's serial tail) only
                # the last few are left to add
                fold()
            try:
                batch = next(it)
            except StopIteration:
                break
            except (ValueError, OSError, UnicodeError) as e:
                # only a bad input record can be skipped (not a failed write, not a full dedup table)
                hint = " (pass --skip-bad-records to skip and count bad records)" \
                    if isinstance(e, BadRecordError) and not cfg["input"]["skip_bad_records"] else ""
                if isinstance(e, DedupFullError):
                    hint = " (resume with a larger bound: --resume --set dedup.max_entries=N)"
                raise RunError(f"{e}{hint}") from None
            m = measured.take()
            if near_removed is not None:
                _drop_near(batch, near_removed)
            if cfg["near_dup"]["mode"] != "off":  # lengths of what is written, after the near-dup stage
                len_out = _lengths(batch.texts.offsets)
                m = dict(m, len_out=len_out, bytes_out=int(len_out.sum()))
            reasons = batch.reasons.numpy()
            tally.add(reasons)
            recs = batch.records
            skipped = 0
            surrogates = 0
            blk = batch.block
            if blk is not None:  # the columnar path: skips and ids from the block
                skipped = blk.skipped - source._seen_skipped
                source._seen_skipped = blk.skipped
                for r in recs._cache.values():  # only records parsed by json.loads can carry the note
                    surrogates += r.pop(_SURROGATES, 0)
                kept_idx = batch.source_index.tolist()
                if not keep and hasattr(recs, "field_strings"):
                    # only the ids are written: string ids straight from the lines (C scanner),
                    # the other records decoded as before
                    fast = recs.field_strings(kept_idx, id_field)
                    kept_recs = None
                    if None not in fast and "".join(fast).isascii():
                        ids = fast  # all strings, ASCII: as they are (no surrogate to repair)
                    else:
                        kept_recs = [{id_field: v} if v is not None else recs[i] for i, v in zip(kept_idx, fast)]
                else:
                    kept_recs = [recs[i] for i in kept_idx]
                if kept_recs is not None:
                    ids = []
                    for i, r in zip(kept_idx, kept_recs):
                        v = r.get(id_field)
                        if v is None:
                            sh = int(blk.shards[i])
                            v = r[id_field] = f"{names_in[sh] if 0 <= sh < len(names_in) else 'doc'}:{int(blk.lines[i])}"
                        ids.append(repair_surrogates(id_text(v)))
            else:
                for r in recs:
                    if _SKIPPED in r:
                        skipped += r.pop(_SKIPPED)
                    if _SURROGATES in r:
                        surrogates += r.pop(_SURROGATES)
                kept_recs = batch.kept_records
                # ids, kept and group values: lone surrogates become U+FFFD before anything is written
                # or committed; a non-string id is its JSON text (never a Python repr)
                ids = [repair_surrogates(id_text(r.get(id_field))) for r in kept_recs]
            extra = {k: [repair_surrogates(r.get(k)) for r in kept_recs] for k in keep} if keep else None
            writer.add(ids, batch.texts, extra)
            if writer.pending_rows and not registered[0]:
                # the open part (and the files written after the last part) recorded in run.json as
                # soon as the part has rows, while the stages work on the next batches, so that the
                # run's serial end does not wait for this write; finish_part() then has none to do
                manifest.add(f"part-{len(writer.parts):05d}{writer.suffix}", *end_files)
                registered[0] = True
            groups = None
            if group_by:
                groups = {}
                for r, c in zip(recs, reasons.tolist()):
                    g = group_label(r.get(group_by))  # 1 and "1" are two groups (they were one)
                    o = groups.setdefault(g, {})
                    key = "kept" if c == 0 else names.setdefault(c, reason_name(c))
                    o[key] = o.get(key, 0) + 1
            counters = {"input": {"docs_with_lone_surrogates": surrogates}} if surrogates else None
            stats.add_batch(batch.n_in, len(batch.texts), {}, batch.bytes_in, m["bytes_out"],
                            None, None, counters, skipped, groups)
            lengths[0].append(m["len_in"])
            lengths[1].append(m["len_out"])
            nb += 1
            if writer.should_finish():
                finish_part()
                commit()
            if bar is not None:
                el = max(time.perf_counter() - t_start, 1e-6)
                if bar._lm_prefix is not None:
                    pos = batch.coord.get("source") or {}
                    done = bar._lm_prefix[min(pos.get("shard", 0), len(paths))] + (pos.get("offset", 0) if pos.get("shard", 0) < len(paths) else 0)
                    bar.update(max(done - bar.n, 0))
                else:
                    bar.update(batch.n_in)
                bar.set_postfix_str(f"{(stats.docs_in - docs0) / el:,.0f} docs/s, "
                                    f"{(stats.bytes_in - bytes0) / el / 1e6:.1f} MB/s text, "
                                    f"kept {100 * stats.docs_kept / max(stats.docs_in, 1):.1f}%", refresh=False)
            if stop_after_batches is not None and nb >= stop_after_batches:
                raise KeyboardInterrupt
        # the end: skips after the last record, the last part, the final commit.  stats.json (its
        # content is known once the last batch is counted) is written on a thread of its own while
        # the last part is written, and the dedup log made durable there too (the commit then has
        # no log to sync): the three files' writes and syncs overlap instead of following each other.
        # The commit comes after both (the part durable before the commit that covers it); stats.json
        # before the final commit is safe: it is listed in run.json before it exists, and a run killed
        # before that commit rewrites the same stats.json when resumed.
        stats.add_skipped(source.skipped - source._seen_skipped)
        result = None
        if final_stats is None:
            finish_part(*end_files)
        else:
            fold()
            manifest.add(*([writer.open_part_name()] if writer.pending_rows else []), *end_files)
            result = final_stats[0]()
            side = _Side(_end_writes, pipe.dedup, final_stats[1], result)
            try:
                finish_part()
            except BaseException:
                side.join(quiet=True)  # the part's error is the one to report
                raise
            side.join()
        commit()
        if bar is not None:
            if bar.total:
                bar.update(bar.total - bar.n)
            bar.close()
        return result
    except BaseException:
        if bar is not None:
            bar.close()
        raise
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def term_as_interrupt():
    """SIGTERM (a polite kill) behaves like Ctrl-C: KeyboardInterrupt in the main thread.  Returns the
    handler it replaced, for the caller to put back; None where none could be installed (no SIGTERM, or
    not the main thread)."""
    if not hasattr(signal, "SIGTERM"):
        return None

    def _term(signum, frame):
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, _term)
    except ValueError:  # not the main thread
        return None


def _end_writes(dedup, path: str, result: Dict[str, Any]) -> None:
    """The run's end, beside the last part's write: the dedup log synced, stats.json written."""
    if dedup is not None:
        dedup.sync()
    _write_json(path, result)


class _Side:
    """``fn(*args)`` on a thread of its own; ``join()`` waits for it and raises what it raised."""

    def __init__(self, fn, *args) -> None:
        import threading

        self._exc: Optional[BaseException] = None

        def go() -> None:
            try:
                fn(*args)
            except BaseException as e:  # re-raised by join()
                self._exc = e

        self._thread = threading.Thread(target=go, name="luminamoon-end", daemon=True)
        self._thread.start()

    def join(self, quiet: bool = False) -> None:
        """Waits for the thread (a signal while waiting -- Ctrl-C, SIGTERM -- is raised after it
        ended: nothing of it is left writing behind the caller), then raises what it raised
        unless ``quiet``."""
        interrupted: Optional[BaseException] = None
        while self._thread.is_alive():
            try:
                self._thread.join()
            except BaseException as e:  # noqa: PERF203 - wait on: the thread ends on its own
                interrupted = e
        if interrupted is not None:
            raise interrupted
        if self._exc is not None and not quiet:
            raise self._exc


# ----------------------------------------------------------- near duplicates
_NEAR_COMMIT_S = 2.0  # pass 1 of --near-dup cluster commits at most this often (and at its end)


def _near_stream_kwargs(nd: Dict[str, Any]) -> Dict[str, int]:
    return {k: int(nd[k]) for k in ("seed", "n_grams", "num_buckets", "hashes_per_bucket", "precision",
                                    "max_entries")}


def _save_npy_atomic(path: str, arr: np.ndarray) -> None:
    from .._durable import atomic_write
    import io

    buf = io.BytesIO()
    np.save(buf, arr)
    atomic_write(path, buf.getvalue())


def _near_cluster_pass(paths, got: _Inputs, fmt: str, cfg: Dict[str, Any], state_dir: str, threads, quiet: bool,
                       log, committed: List[bool]) -> "tuple[np.ndarray, Dict[str, Any]]":
    """``--near-dup cluster``, before the writing pass: pass 1 runs the same stages over the
    same input and stores the MinHash signature and input index of every kept document
    (``near_dup/signatures.u64``, ``near_dup/index.i64``, committed with the pass's own
    ResumablePipeline state in ``near_dup/pass1``); then ``luminamoon.near_dup.cluster``
    (datatrove's four-stage result; per-band pairs in ``near_dup/cluster``).  Returns the
    sorted input indices of the documents to remove and the figures for stats.json.
    Each step's result is kept, so a resumed run skips finished steps."""
    from .. import MinHash
    from ..data.resumable import ResumablePipeline
    from ..near_dup import cluster

    nd, rcfg = cfg["near_dup"], cfg["run"]
    ndir = os.path.join(state_dir, "near_dup")
    os.makedirs(ndir, exist_ok=True)
    done_path, removed_path = os.path.join(ndir, "near_dup.json"), os.path.join(ndir, "removed.npy")
    try:
        with open(done_path, "r", encoding="utf-8") as f:
            info = json.load(f)
        removed = np.load(removed_path)
        if removed.dtype == np.int64 and removed.ndim == 1 and removed.size == info["removed"]:
            log(f"near-dup: clusters of an earlier run reused ({info['removed']:,} documents to remove)")
            return removed, info
    except (OSError, ValueError, KeyError, TypeError):
        pass
    H = int(nd["num_buckets"]) * int(nd["hashes_per_bucket"])
    sig_path, idx_path = os.path.join(ndir, "signatures.u64"), os.path.join(ndir, "index.i64")
    pass1_path = os.path.join(ndir, "pass1.json")
    t0 = time.perf_counter()
    try:
        with open(pass1_path, "r", encoding="utf-8") as f:
            p1 = json.load(f)
        rows = int(p1["rows"])
    except (OSError, ValueError, KeyError, TypeError):
        p1 = None
    if p1 is None:
        log("near-dup pass 1 of 2: MinHash signatures of the kept documents")
        source = _input_source(_make_source(paths, fmt, cfg), cfg["input"]["id_field"], cfg["input"]["text_field"],
                               got.names)
        measured = _MeasuredPipeline(rcfg["pipeline"], stage_kwargs(cfg), threads)
        dcfg = cfg["dedup"]
        dedup = {"seed": int(dcfg["seed"]), "max_entries": int(dcfg["max_entries"])} if dcfg["enabled"] else False
        try:
            pipe = ResumablePipeline(source, pipeline=measured, dedup=dedup, batch_size=rcfg["batch_size"],
                                     prefetch_batches=rcfg["prefetch_batches"], state_dir=os.path.join(ndir, "pass1"),
                                     text_key=cfg["input"]["text_field"], num_threads=threads,
                                     max_prefetch_bytes=max(1, int(rcfg["prefetch_mb"] * 2**20)))
        except (OSError, ValueError) as e:
            raise RunError(f"cannot open the near-dup pass-1 state in {ndir!r}: {e}") from None
        try:
            measured.bind(pipe.dedup)
            rows = int((pipe.resume_extra or {}).get("near_rows", 0))
            docs_in = int((pipe.resume_extra or {}).get("docs_in", 0))
            mh = MinHash(n_grams=int(nd["n_grams"]), num_buckets=int(nd["num_buckets"]),
                         hashes_per_bucket=int(nd["hashes_per_bucket"]), seed=int(nd["seed"]),
                         precision=int(nd["precision"]))
            bar = None
            if not quiet:
                try:
                    from tqdm import tqdm

                    bar = tqdm(unit=" docs", unit_scale=True, dynamic_ncols=True, desc="near-dup 1/2",
                               file=sys.stderr, initial=docs_in)
                except ImportError:  # pragma: no cover
                    bar = None
            with open(sig_path, "ab") as fs, open(idx_path, "ab") as fi:
                fs.truncate(rows * H * 8)  # what the last commit covers; anything later is redone
                fi.truncate(rows * 8)

                def commit() -> None:
                    for f in (fs, fi):
                        f.flush()
                        os.fsync(f.fileno())
                    pipe.commit(extra={"near_rows": rows, "docs_in": docs_in})
                    committed[0] = True

                last = time.monotonic()
                it = iter(pipe)
                while True:
                    try:
                        batch = next(it)
                    except StopIteration:
                        break
                    except (ValueError, OSError, UnicodeError) as e:
                        hint = " (pass --skip-bad-records to skip and count bad records)" \
                            if isinstance(e, BadRecordError) and not cfg["input"]["skip_bad_records"] else ""
                        raise RunError(f"{e}{hint}") from None
                    measured.measures.popleft()
                    if len(batch.texts):
                        sig = mh.signatures(batch.texts).numpy()
                        start = batch.coord["sample_index"] - batch.n_in
                        idx = start + batch.source_index.numpy().astype(np.int64)
                        fs.write(np.ascontiguousarray(sig).view(np.uint64).astype("<u8", copy=False).tobytes())
                        fi.write(idx.astype("<i8", copy=False).tobytes())
                        rows += len(batch.texts)
                    docs_in += batch.n_in
                    if bar is not None:
                        bar.update(batch.n_in)
                    if time.monotonic() - last > _NEAR_COMMIT_S:
                        commit()
                        last = time.monotonic()
                commit()
            if bar is not None:
                bar.close()
        except BaseException:
            try:
                pipe.close()
            except Exception:
                pass
            raise
        pipe.close()
        p1 = {"rows": rows, "documents_in": docs_in, "seconds": round(time.perf_counter() - t0, 3)}
        _write_json(pass1_path, p1)
    log(f"near-dup: clustering {rows:,} signatures (datatrove's buckets -> pairs -> union-find)")
    if rows:
        sig = np.memmap(sig_path, dtype=np.uint64, mode="r", shape=(rows, H))
    else:
        sig = np.empty((0, H), dtype=np.uint64)
    idx = np.fromfile(idx_path, dtype="<i8", count=rows)
    if idx.size != rows or (rows and os.path.getsize(sig_path) < rows * H * 8):
        raise RunError(f"near-dup: {ndir} holds fewer signatures than its pass 1 recorded: use --overwrite")
    res = cluster(sig, num_buckets=int(nd["num_buckets"]), hashes_per_bucket=int(nd["hashes_per_bucket"]),
                  work_dir=os.path.join(ndir, "cluster"))
    del sig
    removed = np.sort(idx[res.removed]).astype(np.int64)
    _save_npy_atomic(removed_path, removed)
    info = {"mode": "cluster", "signatures": rows, "pass1_seconds": p1.get("seconds"), **res.summary()}
    _write_json(done_path, info)
    return removed, info


def _drop_near(batch, removed: np.ndarray) -> int:
    """Pass 2 of ``--near-dup cluster``: drops from ``batch`` the kept documents whose input
    index is in ``removed`` (sorted), with reason ``near_duplicate``.  Returns how many."""
    from ..stages import REASON_NEAR_DUPLICATE

    if removed.size == 0 or len(batch.texts) == 0:
        return 0
    src = batch.source_index.numpy().astype(np.int64)
    idx = (batch.coord["sample_index"] - batch.n_in) + src
    pos = np.minimum(np.searchsorted(removed, idx), removed.size - 1)
    hit = removed[pos] == idx
    if not hit.any():
        return 0
    keep = torch.from_numpy(~hit)
    batch.texts = batch.texts[keep]
    reasons = batch.reasons.clone()
    reasons[torch.from_numpy(src[hit])] = REASON_NEAR_DUPLICATE
    batch.reasons = reasons
    batch.source_index = batch.source_index[keep]
    return int(hit.sum())
