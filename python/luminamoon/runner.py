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
    >>> from luminamoon.runner import run_corpus
    >>> from luminamoon.config import default_config
    >>> stats = run_corpus(["pages.jsonl"], "out", default_config(), quiet=True)   # doctest: +SKIP
    >>> stats["documents"]["kept"] + stats["documents"]["dropped"] == stats["documents"]["input"]  # doctest: +SKIP
    True
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch

from .config import ConfigError, stage_kwargs
from .data.sources import BadRecordError
from .report import RunStats, format_summary, length_histogram, render_report
from .stages import DedupFullError
from .writers import PART_RE, ShardWriter

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


def _expand(inputs: Sequence[str]) -> List[str]:
    from .data.sources import expand_paths

    try:
        return expand_paths(list(inputs))
    except FileNotFoundError as e:
        raise RunError(f"input not found: {e.args[0] if e.args else e}") from None
    except ValueError as e:
        raise RunError(str(e)) from None


def _make_source(paths: List[str], fmt: str, cfg: Dict[str, Any]):
    from .data import sources as S

    icfg = cfg["input"]
    on_error = "skip" if icfg["skip_bad_records"] else "raise"
    key = icfg["text_field"]
    mb = icfg["max_record_mb"]
    limit = {"on_error": on_error, "max_record_bytes": max(1, int(mb * 2**20)) if mb else None}
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
        return S.ParquetSource(paths, text_column=key, **limit)
    raise RunError(f"unknown input format {fmt!r}")


def _input_source(inner, id_field: str, text_field: str):
    """Wraps a source: gives records without an id one ("<file>:<line>"), replaces
    lone surrogates (how JSON carries undecodable bytes) by U+FFFD, and notes
    bad records skipped before each record (so they are counted in the batch
    that follows them, not ahead of the consumer)."""
    from .data.sources import Source

    class _InputSource(Source):
        def __init__(self) -> None:
            super().__init__()
            self.inner = inner
            self.paths = getattr(inner, "paths", [])
            self.surrogate_docs = 0
            self._seen_skipped = 0

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

        def _records(self):
            inner = self.inner
            paths = self.paths
            for rec in inner:
                if id_field not in rec or rec[id_field] is None:
                    pos = inner._pos if hasattr(inner, "_pos") else inner.position()
                    name = os.path.basename(paths[pos["shard"]]) if paths and pos.get("shard", 0) < len(paths) else "doc"
                    n = pos["line"] if "line" in pos else pos.get("record", 0) - 1
                    rec[id_field] = f"{name}:{n}"
                text = rec[text_field]
                if not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:
                        rec[text_field] = text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                        rec["__lm_surrogates"] = 1
                sk = inner.skipped
                if sk != self._seen_skipped:
                    rec["__lm_skipped"] = sk - self._seen_skipped
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


class _MeasuredPipeline:
    """The stages as a callable for ResumablePipeline that also measures each
    batch (lengths before/after, counter deltas) in the producer thread; the
    measurements queue up in batch order and the consumer takes one per batch."""

    def __init__(self, kind: str, kwargs: Dict[str, Any], num_threads: Optional[int]):
        self.kind, self.kwargs, self.num_threads = kind, kwargs, num_threads
        self.pipe = None
        self.measures: "list" = []
        import collections

        self.measures = collections.deque()
        self._last: Dict[str, Any] = {}

    def bind(self, dedup) -> None:
        from . import stages

        cls = stages.FusedPipeline if self.kind == "fused" else stages.ChainPipeline
        try:
            self.pipe = cls(dedup=dedup if dedup is not None else False, num_threads=self.num_threads, **self.kwargs)
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
        now = self.pipe.counters
        d = _delta(now, self._last)
        self._last = now
        off_in = st.offsets.to(torch.int64)
        off_out = r.texts.offsets.to(torch.int64)
        len_in = (off_in[1:] - off_in[:-1]).numpy()
        len_out = (off_out[1:] - off_out[:-1]).numpy()
        self.measures.append({"hist_in": length_histogram(len_in), "hist_out": length_histogram(len_out),
                              "bytes_out": int(len_out.sum()), "counters": _counter_view(d)})
        return r


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
        from .stages import PII_TYPES

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
def _run_identity(paths: List[str], fmt: str, cfg: Dict[str, Any]) -> Dict[str, Any]:
    files = []
    for p in paths:
        st = os.stat(p)
        files.append({"path": os.path.abspath(p), "size": st.st_size})
    # threads and prefetch change neither the output nor the statistics: a resume may use others
    cfg = json.loads(json.dumps(cfg))
    for k in ("threads", "prefetch_batches", "prefetch_mb"):  # how, not what: a resume may change them
        cfg["run"].pop(k, None)
    cfg["dedup"].pop("max_entries", None)  # a bound, not a result: a resume may raise it
    key = json.dumps({"files": files, "format": fmt, "config": cfg}, sort_keys=True)
    return {"files": files, "format": fmt, "config": cfg, "fingerprint": hashlib.sha256(key.encode()).hexdigest()[:16]}


def _prepare_output(out: str, ident: Dict[str, Any], resume: bool, overwrite: bool, log) -> bool:
    """Checks / clears the output folder. Returns True when resuming a committed run."""
    state_dir = os.path.join(out, STATE_DIRNAME)
    run_file = os.path.join(state_dir, _RUN_FILE)
    if os.path.exists(out) and not os.path.isdir(out):
        raise RunError(f"output {out!r} exists and is not a folder")
    has_state = os.path.isdir(state_dir)
    parts = [f for f in os.listdir(out) if PART_RE.match(f)] if os.path.isdir(out) else []
    if overwrite:
        if has_state:
            shutil.rmtree(state_dir)
        for f in parts + ["stats.json", "report.png"]:
            if os.path.exists(os.path.join(out, f)):
                os.remove(os.path.join(out, f))
        for f in os.listdir(out) if os.path.isdir(out) else []:
            if f.startswith(".tmp-part-"):
                os.remove(os.path.join(out, f))
        has_state, parts = False, []
    if has_state:
        try:
            with open(run_file, "r", encoding="utf-8") as f:
                prev = json.load(f)
        except (OSError, ValueError):
            prev = None
        if not resume:
            what = f"started {prev.get('started', '?')} on {len(prev.get('files', []))} input file(s)" if prev else "unreadable"
            raise RunError(f"output folder {out!r} holds the state of another run ({what}). "
                           f"Pass --resume to continue it, or --overwrite to start over (deletes its output).")
        if prev is None:
            raise RunError(f"{run_file} is missing or unreadable: cannot tell which run the state belongs to; "
                           "use --overwrite to start over")
        if prev.get("fingerprint") != ident["fingerprint"]:
            diff = []
            if [f["path"] for f in prev.get("files", [])] != [f["path"] for f in ident["files"]]:
                diff.append("the input files")
            elif prev.get("files") != ident["files"]:
                diff.append("the input files' sizes (they changed)")
            if prev.get("config") != ident["config"]:
                keys = [f"{s}.{k}" for s in ident["config"] for k in ident["config"][s]
                        if prev.get("config", {}).get(s, {}).get(k) != ident["config"][s][k]]
                diff.append("the configuration (" + ", ".join(keys[:6]) + ")")
            if prev.get("format") != ident["format"]:
                diff.append("the input format")
            raise RunError(f"--resume: this command differs from the run in {out!r} in "
                           f"{' and '.join(diff) or 'its inputs'}; resume with the same command, or --overwrite")
        return True
    if parts:
        raise RunError(f"output folder {out!r} already holds part files ({parts[0]}, ...) but no run state; "
                       "choose an empty folder or pass --overwrite")
    if resume:
        log(f"note: nothing to resume in {out!r}; starting a new run")
    os.makedirs(state_dir, exist_ok=True)
    ident = dict(ident, started=time.strftime("%Y-%m-%d %H:%M:%S"))
    tmp = run_file + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(ident, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, run_file)
    return False


# ---------------------------------------------------------------------- run
def run_corpus(inputs: Sequence[str], out: str, cfg: Dict[str, Any], *, resume: bool = False,
               overwrite: bool = False, quiet: bool = False, title: Optional[str] = None,
               report: bool = True, stop_after_batches: Optional[int] = None) -> Dict[str, Any]:
    """Runs the pipeline over ``inputs`` into ``out``; returns the stats.json dict.

    Raises RunError (bad input, output folder in use, ...) with a message for
    the user; KeyboardInterrupt passes through after the pipeline is closed
    (the last commit stands)."""
    from .data.adapters import ResumablePipeline

    log = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    paths = _expand(inputs)
    fmt = cfg["input"]["format"]
    if fmt == "auto":
        fmts = {detect_format(p) for p in paths}
        if len(fmts) > 1:
            raise RunError(f"the inputs mix formats ({', '.join(sorted(fmts))}): run them separately "
                           "or force one with --input-format")
        fmt = fmts.pop()
    ocfg, rcfg = cfg["output"], cfg["run"]
    kwargs = stage_kwargs(cfg)
    ident = _run_identity(paths, fmt, cfg)
    os.makedirs(out, exist_ok=True)
    resuming = _prepare_output(out, ident, resume, overwrite, log)
    state_dir = os.path.join(out, STATE_DIRNAME)

    source = _input_source(_make_source(paths, fmt, cfg), cfg["input"]["id_field"], cfg["input"]["text_field"])
    threads = rcfg["threads"] or None
    measured = _MeasuredPipeline(rcfg["pipeline"], kwargs, threads)
    try:
        dcfg = cfg["dedup"]
        dedup = {"seed": int(dcfg["seed"]), "max_entries": int(dcfg["max_entries"])} if dcfg["enabled"] else False
        pipe = ResumablePipeline(source, pipeline=measured, dedup=dedup,
                                 batch_size=rcfg["batch_size"], prefetch_batches=rcfg["prefetch_batches"],
                                 state_dir=state_dir, text_key=cfg["input"]["text_field"], num_threads=threads,
                                 max_prefetch_bytes=max(1, int(rcfg["prefetch_mb"] * 2**20)))
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
                                 state=extra["writer"] if extra else None, extra_fields=ocfg["keep_fields"])
        except (OSError, ValueError) as e:
            raise RunError(str(e)) from None
        stats = RunStats.from_state(extra["stats"]) if extra else RunStats()
        stats.meta.update({"inputs": [os.path.abspath(p) for p in paths],
                           "output": {"folder": os.path.abspath(out), "format": ocfg["format"]},
                           "threads": threads or torch.get_num_threads(), "group_by": rcfg["group_by"],
                           "config": cfg})
        if extra:
            log(f"resuming: {stats.docs_in:,} documents and {len(writer.parts)} part file(s) already committed")
        _loop(pipe, measured, source, writer, stats, cfg, paths, fmt, quiet, stop_after_batches)
        result = stats.to_json()
        result["output"]["parts"] = [p["name"] for p in writer.parts]
        result["output"]["rows"] = writer.state()["rows"]
        _write_json(os.path.join(out, "stats.json"), result)
        if report:
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


def _write_json(path: str, data: Dict[str, Any]) -> None:
    from .data._prefetch import atomic_write  # names the file on failure, leaves no tmp

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


def _loop(pipe, measured, source, writer: ShardWriter, stats: RunStats, cfg, paths, fmt, quiet,
          stop_after_batches) -> None:
    from .stages import reason_name

    id_field = cfg["input"]["id_field"]
    keep = cfg["output"]["keep_fields"]
    group_by = cfg["run"]["group_by"]
    bar = _progress(paths, fmt, quiet, stats.docs_in)
    names: Dict[int, str] = {}
    t_start = time.perf_counter()
    docs0, bytes0 = stats.docs_in, stats.bytes_in

    def commit() -> None:
        pipe.commit(extra={"writer": writer.state(), "stats": stats.state()})

    old_term = None
    if hasattr(signal, "SIGTERM"):
        def _term(signum, frame):  # a polite kill: behave like Ctrl-C
            raise KeyboardInterrupt

        try:
            old_term = signal.signal(signal.SIGTERM, _term)
        except ValueError:  # not the main thread
            old_term = None
    try:
        nb = 0
        it = iter(pipe)
        while True:
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
            m = measured.measures.popleft()
            reasons = batch.reasons.numpy()
            codes, counts = np.unique(reasons, return_counts=True)
            dropped: Dict[str, int] = {}
            for c, k in zip(codes.tolist(), counts.tolist()):
                if c:
                    names.setdefault(c, reason_name(c))
                    dropped[names[c]] = k
            recs = batch.records
            skipped = 0
            surrogates = 0
            for r in recs:
                if "__lm_skipped" in r:
                    skipped += r.pop("__lm_skipped")
                if "__lm_surrogates" in r:
                    surrogates += r.pop("__lm_surrogates")
            kept_recs = batch.kept_records
            ids = [str(r.get(id_field)) for r in kept_recs]
            extra = {k: [r.get(k) for r in kept_recs] for k in keep} if keep else None
            writer.add(ids, batch.texts, extra)
            groups = None
            if group_by:
                groups = {}
                for r, c in zip(recs, reasons.tolist()):
                    g = str(r.get(group_by, "(none)"))
                    o = groups.setdefault(g, {})
                    key = "kept" if c == 0 else names.setdefault(c, reason_name(c))
                    o[key] = o.get(key, 0) + 1
            counters = dict(m["counters"])
            if surrogates:
                counters["input"] = {"docs_with_lone_surrogates": surrogates}
            stats.add_batch(batch.n_in, len(batch.texts), dropped, batch.bytes_in, m["bytes_out"],
                            m["hist_in"], m["hist_out"], counters, skipped, groups)
            nb += 1
            if writer.should_finish():
                writer.finish_part()
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
        # the end: skips after the last record, the last part, the final commit
        stats.add_skipped(source.skipped - source._seen_skipped)
        writer.finish_part()
        commit()
        if bar is not None:
            if bar.total:
                bar.update(bar.total - bar.n)
            bar.close()
    except BaseException:
        if bar is not None:
            bar.close()
        raise
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
