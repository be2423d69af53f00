"""The ``luminamoon`` command.

    luminamoon demo [--size-mb 50] [-o DIR]       generate a web-like corpus, run on it, print the summary
    luminamoon run INPUT... -o OUT [options]      clean, filter, deduplicate, mask; Parquet/JSONL parts,
                                                  stats.json and report.png in OUT; --resume after a stop
    luminamoon config                             the default configuration, as TOML
    luminamoon bench [NAME...]                    run the benchmark scripts in bench/ and print their tables

Exit status: 0 on success, 2 for a problem with the command line, the input or
the output folder (the message says what to do), 130 when interrupted (the
last commit stands: continue with the same command and ``--resume``).

Example:
    $ luminamoon run 'crawl/*.jsonl.gz' -o clean/ -j 8
    $ luminamoon run 'crawl/*.jsonl.gz' -o clean/ -j 8 --resume    # after Ctrl-C or a kill
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

__all__ = ["main"]


class _Fail(Exception):
    pass


def _err(msg: str) -> None:
    print(f"luminamoon: error: {msg}", file=sys.stderr)


# ------------------------------------------------------------------ config
def _build_config(args) -> Dict[str, Any]:
    from .config import apply_override, load_config

    cfg = load_config(getattr(args, "config", None))
    i, o, r = cfg["input"], cfg["output"], cfg["run"]
    if getattr(args, "input_format", None):
        i["format"] = args.input_format
    if getattr(args, "text_field", None) is not None:  # '' reaches _validate (was silently "text")
        i["text_field"] = args.text_field
    if getattr(args, "id_field", None) is not None:  # '' reaches _validate (was silently "id")
        i["id_field"] = args.id_field
    if getattr(args, "text_per_file", False):
        i["text_per"] = "file"
    if getattr(args, "skip_bad_records", False):
        i["skip_bad_records"] = True
    if getattr(args, "format", None):
        o["format"] = args.format
    if getattr(args, "compression", None):
        o["compression"] = args.compression
    if getattr(args, "part_docs", None) is not None:  # 0 reaches _validate (was silently the default)
        o["part_docs"] = args.part_docs
    if getattr(args, "keep_fields", None):
        o["keep_fields"] = [f for f in args.keep_fields.split(",") if f]
    if getattr(args, "batch_size", None) is not None:
        r["batch_size"] = args.batch_size
    if getattr(args, "threads", None) is not None:
        r["threads"] = args.threads
    if getattr(args, "group_by", None):
        r["group_by"] = args.group_by
    if getattr(args, "chain", False):
        r["pipeline"] = "chain"
    for stage, flag in (("cleaner", "no_clean"), ("quality", "no_quality"), ("dedup", "no_dedup"), ("pii", "no_pii")):
        if getattr(args, flag, False):
            cfg[stage]["enabled"] = False
    if getattr(args, "near_dup", None):
        cfg["near_dup"]["mode"] = args.near_dup
    if getattr(args, "rules", None):
        cfg["quality"]["rules"] = [x for x in args.rules.split(",") if x]
    if getattr(args, "normalize", None):
        cfg["cleaner"]["normalize"] = args.normalize
    if getattr(args, "pii_mode", None):
        cfg["pii"]["mode"] = args.pii_mode
    if getattr(args, "pii_types", None):
        cfg["pii"]["types"] = [x for x in args.pii_types.split(",") if x]
    for a in getattr(args, "set", None) or []:
        cfg = apply_override(cfg, a)
    _validate(cfg)
    return cfg


def _validate(cfg: Dict[str, Any]) -> None:
    from .config import ConfigError, check_config

    check_config(cfg, "settings")  # every number finite and in range, keep_fields distinct strings

    i, o, r = cfg["input"], cfg["output"], cfg["run"]
    for k in ("text_field", "id_field"):  # an empty name was refused with a message about --group-by
        if not i[k]:                      # (text) or an internal one about `fields` (id)
            raise ConfigError(f"input.{k} is empty: name the {k.split('_')[0]} field "
                              f"(--{k.replace('_', '-')} NAME)")
    if i["format"] not in ("auto", "jsonl", "text", "parquet"):
        raise ConfigError(f"input.format must be auto, jsonl, text or parquet, not {i['format']!r}")
    if i["text_per"] not in ("line", "file"):
        raise ConfigError(f"input.text_per must be line or file, not {i['text_per']!r}")
    if o["format"] not in ("parquet", "jsonl"):
        raise ConfigError(f"output.format must be parquet or jsonl, not {o['format']!r}")
    comps = ("auto", "zstd", "snappy", "gzip", "lz4", "brotli", "none") if o["format"] == "parquet" else \
        ("auto", "none", "gzip", "zstd")
    if o["compression"] not in comps:
        raise ConfigError(f"output.compression for {o['format']} must be one of {', '.join(comps)}, "
                          f"not {o['compression']!r}")
    if o["part_docs"] < 1 or o["part_mb"] <= 0:
        raise ConfigError("output.part_docs and output.part_mb must be positive")
    if r["batch_size"] < 1:
        raise ConfigError("run.batch_size must be positive")
    if r["threads"] < 0:
        raise ConfigError("run.threads must be >= 0 (0: all cores)")
    if r["pipeline"] not in ("fused", "chain"):
        raise ConfigError(f"run.pipeline must be fused or chain, not {r['pipeline']!r}")
    if r["prefetch_batches"] < 0:
        raise ConfigError("run.prefetch_batches must be >= 0")
    if not cfg["input"]["max_record_mb"] >= 0:
        raise ConfigError("input.max_record_mb must be >= 0 (0: no limit)")
    if not r["prefetch_mb"] > 0:
        raise ConfigError("run.prefetch_mb must be positive")
    from ..stages import PII_TYPES, QUALITY_RULE_SETS, QUALITY_RULES

    for rule in cfg["quality"]["rules"]:
        if rule not in QUALITY_RULE_SETS and rule not in QUALITY_RULES:
            raise ConfigError(f"unknown quality rule {rule!r}; rule sets: {', '.join(QUALITY_RULE_SETS)} "
                              f"(single rules: luminamoon.stages.QUALITY_RULES)")
    for t in cfg["pii"]["types"]:
        if t not in PII_TYPES:
            raise ConfigError(f"unknown PII type {t!r} (known: {', '.join(PII_TYPES)})")
    if cfg["dedup"]["max_entries"] < 0:
        raise ConfigError("dedup.max_entries must be >= 0 (0: no bound)")
    if not 0 <= cfg["dedup"]["seed"] < 2**64:
        raise ConfigError("dedup.seed must be in [0, 2**64)")
    from .config import NEAR_DUP_MODES

    nd = cfg["near_dup"]
    if nd["mode"] not in NEAR_DUP_MODES:
        raise ConfigError(f"near_dup.mode must be off, cluster or stream, not {nd['mode']!r}")
    if nd["precision"] not in (32, 64):
        raise ConfigError(f"near_dup.precision must be 32 or 64, not {nd['precision']!r}")
    if nd["mode"] == "cluster" and nd["max_entries"]:
        raise ConfigError("near_dup.max_entries bounds the stream's band index (--near-dup stream); "
                          "cluster mode has no index to bound: leave it 0")
    if cfg["pii"]["max_doc_bytes"] < 0:
        raise ConfigError("pii.max_doc_bytes must be >= 0 (0: no limit)")
    if cfg["pii"]["mode"] not in ("strict", "datatrove"):
        raise ConfigError(f"pii.mode must be strict or datatrove, not {cfg['pii']['mode']!r}")


# ---------------------------------------------------------------- commands
def _tune_process() -> None:
    """The run and demo commands own their process: tune glibc malloc for it (faults of big per-batch
    buffers; see torch_ops/module.cpp tune_malloc_once; LM_NO_MALLOC_TUNE=1 or the user's own
    GLIBC_TUNABLES / MALLOC_*_ settings leave it alone).  Importing luminamoon never does this."""
    from .. import _C

    _C.tune_malloc()


def cmd_run(args) -> int:
    from .report import format_summary
    from .runner import run_corpus

    _tune_process()
    cfg = _build_config(args)
    if args.address is not None and args.engine != "ray":  # was silently ignored (a local run)
        raise _Fail(f"--address {args.address} joins a Ray cluster: it needs --engine ray")
    t0 = time.perf_counter()
    stats = run_corpus(args.inputs, args.output, cfg, resume=args.resume, overwrite=args.overwrite,
                       quiet=args.quiet, report=not args.no_report,
                       stop_after_batches=args.stop_after_batches, engine=args.engine, address=args.address)
    if not args.quiet:
        print(format_summary(stats))
        print(f"\noutput: {args.output}  ({len(stats['output']['parts'])} part file(s), "
              f"{stats['output']['rows']:,} documents)  stats.json"
              + ("  report.png" if not args.no_report else "") + f"   [{time.perf_counter() - t0:.1f} s]")
    return 0


def cmd_demo(args) -> int:
    from .demo_corpus import generate
    from .report import format_summary
    from .runner import run_corpus

    _tune_process()
    root = args.output
    corpus_dir = os.path.join(root, "corpus")
    manifest = os.path.join(corpus_dir, "manifest.json")
    want = {"size_mb": args.size_mb, "seed": args.seed, "generator": 1}
    info = None
    if os.path.exists(manifest) and not args.regenerate:
        try:
            with open(manifest, "r", encoding="utf-8") as f:
                info = json.load(f)
            if info.get("request") != want or not all(os.path.exists(p) for p in info["paths"]):
                info = None
        except (OSError, ValueError, KeyError):
            info = None
    t0 = time.perf_counter()
    if info is None:
        if not args.quiet:
            print(f"generating a {args.size_mb:g} MB web-like demo corpus (seed {args.seed}) in {corpus_dir} ...",
                  file=sys.stderr)
        try:  # a size below one document, or more than the disk holds: refused before anything is written
            info = generate(corpus_dir, size_mb=args.size_mb, seed=args.seed)
        except ValueError as e:
            raise _Fail(f"--size-mb: {e}") from None
        info["request"] = want
        info["generate_s"] = round(time.perf_counter() - t0, 2)
        with open(manifest, "w", encoding="utf-8") as f:
            json.dump(info, f, indent=1)
    elif not args.quiet:
        print(f"using the demo corpus in {corpus_dir} (generated earlier)", file=sys.stderr)
    if not args.quiet:
        kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(info["kinds"].items(), key=lambda kv: -kv[1]))
        print(f"corpus: {info['documents']:,} pages, {info['bytes'] / 1e6:.1f} MB in {len(info['paths'])} JSONL "
              f"shards ({kinds})", file=sys.stderr)
    args.inputs = [os.path.join(corpus_dir, "web-*.jsonl*")]
    args.group_by = args.group_by or "kind"
    args.keep_fields = args.keep_fields or "url,kind"
    cfg = _build_config(args)
    out = os.path.join(root, "out")
    t1 = time.perf_counter()
    stats = run_corpus(args.inputs, out, cfg, resume=False, overwrite=True, quiet=args.quiet,
                       title=f"luminamoon demo — {info['documents']:,} generated web pages, {info['bytes'] / 1e6:.0f} MB")
    t_run = time.perf_counter() - t1
    if args.quiet:
        return 0
    print(format_summary(stats))
    print(f"\ngenerated in {info.get('generate_s', 0):.1f} s, processed in {t_run:.1f} s  "
          f"({stats['throughput']['mb_per_s']:.1f} MB/s on {stats.get('threads', '?')} threads)")
    print(f"output: {out}/part-*.{'parquet' if cfg['output']['format'] == 'parquet' else 'jsonl'}   "
          f"stats: {out}/stats.json   report: {out}/report.png")
    return 0


def cmd_config(args) -> int:
    from .config import dumps_toml

    cfg = _build_config(args)
    sys.stdout.write(dumps_toml(cfg))
    return 0


_BENCH_ORDER = ["bench_strings.py", "bench_stages.py", "bench_pipeline.py", "bench_collate.py", "bench_prefetch.py",
                "bench_adapters.py", "bench_source_resume.py", "bench_gpu.py"]


def _bench_dir() -> Optional[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.environ.get("LUMINAMOON_BENCH_DIR"), os.path.join(here, "..", "..", "bench"),
                 os.path.join(os.getcwd(), "bench")):
        if cand and os.path.isdir(cand):
            return os.path.abspath(cand)
    return None


def cmd_bench(args) -> int:
    d = _bench_dir()
    if d is None:
        raise _Fail("bench/ not found: run from a checkout of luminamoon (or set LUMINAMOON_BENCH_DIR)")
    found = sorted(f for f in os.listdir(d) if f.startswith("bench_") and f.endswith(".py"))
    order = [f for f in _BENCH_ORDER if f in found] + [f for f in found if f not in _BENCH_ORDER]
    if args.names:
        want = [n if n.endswith(".py") else (n if n.startswith("bench_") else "bench_" + n) + ".py" for n in args.names]
        unknown = [n for n, w in zip(args.names, want) if w not in found]
        if unknown:
            known = ", ".join(f[len("bench_"):-3] for f in order)
            raise _Fail(f"unknown benchmark(s): {', '.join(unknown)} (known: {known})")
        order = want
    failed = 0
    for name in order:
        path = os.path.join(d, name)
        print(f"\n=== {name} " + "=" * max(0, 60 - len(name)), flush=True)
        if not os.path.exists(path):
            print(f"(skipped: {name} is not in {d})")
            continue
        if name == "bench_gpu.py" and not _has_cuda():
            print("(skipped: no CUDA device)")
            continue
        cmd = [sys.executable, path] + (shlex.split(args.args) if args.args else [])
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=os.path.dirname(d))
        print(f"--- {name}: exit {rc}, {time.perf_counter() - t0:.1f} s", flush=True)
        failed += rc != 0
    return 1 if failed else 0


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover
        return False


# ------------------------------------------------------------------ parser
def _add_stage_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("stages and thresholds (defaults: luminamoon config)")
    g.add_argument("--config", metavar="FILE.toml", help="configuration file (write one with: luminamoon config)")
    g.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE",
                   help="override one setting, e.g. --set quality.gq_min_doc_words=30 (repeatable)")
    g.add_argument("--no-clean", action="store_true", help="switch the TextCleaner off")
    g.add_argument("--no-quality", action="store_true", help="switch the QualityFilter off")
    g.add_argument("--no-dedup", action="store_true", help="switch exact deduplication off")
    g.add_argument("--near-dup", choices=["off", "cluster", "stream"],
                   help="near-duplicate removal (MinHash LSH, datatrove's settings): cluster = offline, two passes, "
                   "datatrove's result (one document kept per cluster); stream = in the stream (a document is "
                   "dropped when one of its bands was seen earlier); default off")
    g.add_argument("--no-pii", action="store_true", help="switch PII masking off")
    g.add_argument("--rules", metavar="LIST", help="quality rule sets / rules, comma-separated "
                   "(gopher_repetition,gopher_quality,c4,fineweb)")
    g.add_argument("--normalize", choices=["none", "NFC", "NFKC"], help="Unicode normalisation in the cleaner")
    g.add_argument("--pii-mode", choices=["strict", "datatrove"])
    g.add_argument("--pii-types", metavar="LIST", help="PII types to mask, comma-separated "
                   "(email,ipv4,ipv6,phone,credit_card,iban)")
    g.add_argument("--chain", action="store_true", help="run the four stages one after another instead of fused")


def _add_run_flags(p: argparse.ArgumentParser, demo: bool = False) -> None:
    g = p.add_argument_group("input and output")
    if not demo:
        g.add_argument("--input-format", choices=["auto", "jsonl", "text", "parquet"], help="default: by file name")
        g.add_argument("--text-field", metavar="NAME", help="the text field / column (default: text)")
        g.add_argument("--id-field", metavar="NAME", help="the id field (default: id; missing: <path>:<row>, "
                       "the path relative to the inputs' root)")
        g.add_argument("--text-per-file", action="store_true", help="text input: one document per file, not per line")
        g.add_argument("--skip-bad-records", action="store_true",
                       help="skip malformed lines/rows (counted in stats.json) instead of stopping")
    g.add_argument("--format", choices=["parquet", "jsonl"], help="output format (default: parquet)")
    g.add_argument("--compression", help="auto (parquet: zstd, jsonl: none); parquet: zstd|snappy|gzip|none; "
                   "jsonl: none|gzip|zstd")
    g.add_argument("--part-docs", type=int, metavar="N", help="kept documents per part file (default 50000)")
    g.add_argument("--keep-fields", metavar="LIST", help="input fields to copy to the output, comma-separated")
    g.add_argument("--group-by", metavar="FIELD", help="count kept/dropped per value of this input field")
    g = p.add_argument_group("execution")
    g.add_argument("-j", "--threads", type=int, metavar="N", help="threads (default: all cores)")
    g.add_argument("--batch-size", type=int, metavar="N", help="documents per batch (default 2048)")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar or summary")


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="luminamoon", description="Clean, filter, deduplicate and mask text corpora "
                                "for PyTorch training — fast, resumable, with a report.",
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="examples:\n  luminamoon demo\n  luminamoon run 'crawl/*.jsonl.gz' -o clean/\n"
                                       "  luminamoon run 'crawl/*.jsonl.gz' -o clean/ --resume\n"
                                       "  luminamoon config > my.toml && luminamoon run data.parquet -o out --config my.toml")
    from .. import __version__

    p.add_argument("--version", action="version", version=f"luminamoon {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("run", help="process a corpus", description="Clean, filter, deduplicate and mask INPUT "
                       "(JSONL plain/gzip/zstd, text, Parquet; files, folders (recursive), globs, or - for standard input) "
                       "into OUT. Ids: the id field, or <path relative to the inputs' root>:<row>.")
    r.add_argument("inputs", nargs="+", metavar="INPUT")
    r.add_argument("-o", "--output", required=True, metavar="OUT", help="output folder")
    r.add_argument("--resume", action="store_true", help="continue the run committed in OUT")
    r.add_argument("--overwrite", action="store_true", help="start over: delete the files the earlier run in OUT wrote (only those) and its state")
    r.add_argument("--no-report", action="store_true", help="skip report.png")
    r.add_argument("--stop-after-batches", type=int, help=argparse.SUPPRESS)  # tests: a clean interruption
    r.add_argument("--engine", choices=["local", "ray"], default="local",
                   help="local (default): this process; ray: a Ray cluster (pip install 'luminamoon[ray]'), "
                   "the same output; see README 'Scale-out on Ray'")
    r.add_argument("--address", metavar="ADDR", help="--engine ray: the cluster to join (auto, HOST:6379, "
                   "ray://HOST:10001); default: start a local one with -j CPUs")
    _add_run_flags(r)
    _add_stage_flags(r)
    r.set_defaults(func=cmd_run)

    d = sub.add_parser("demo", help="generate a web-like corpus and run on it",
                       description="Generate a deterministic web-like corpus (no network) and run on it.")
    d.add_argument("--size-mb", type=_positive_float, default=50.0, help="corpus size (default 50)")
    d.add_argument("--seed", type=int, default=1234)
    d.add_argument("-o", "--output", default="luminamoon-demo", metavar="DIR",
                   help="folder for corpus/ and out/ (default ./luminamoon-demo)")
    d.add_argument("--regenerate", action="store_true", help="generate the corpus again even if present")
    _add_run_flags(d, demo=True)
    _add_stage_flags(d)
    d.set_defaults(func=cmd_demo, stop_after_batches=None)

    c = sub.add_parser("config", help="print the default configuration (TOML)")
    c.add_argument("--config", metavar="FILE.toml", help="print this file merged over the defaults")
    c.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE")
    c.set_defaults(func=cmd_config)

    b = sub.add_parser("bench", help="run the benchmark scripts in bench/ and print their tables")
    b.add_argument("names", nargs="*", help="benchmarks to run (default: all), e.g. strings stages")
    b.add_argument("--args", help="extra arguments passed to every script")
    b.set_defaults(func=cmd_bench)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from .config import ConfigError
    from .runner import RunError, term_as_interrupt

    # SIGTERM like Ctrl-C from the start of a run, not only once its main loop runs (review s34: a SIGTERM
    # while standard input was copied, at startup or in near-dup pass 1 killed the process, exit -15,
    # leaving the partial copy of standard input in OUT)
    old_term = term_as_interrupt() if args.command in ("run", "demo") else None
    try:
        return args.func(args)
    except (RunError, ConfigError, _Fail) as e:
        _err(str(e))
        return 2
    except KeyboardInterrupt:
        out = getattr(args, "output", None)
        print(f"\nluminamoon: interrupted; the last commit stands. Continue with the same command and --resume"
              + (f" (output: {out})" if out else ""), file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. luminamoon config | head
        return 0
    except OSError as e:  # the output folder or an input: unwritable, full, a file where a folder should be, ...
        where = f" ({e.filename})" if e.filename and str(e.filename) not in str(e) else ""
        _err(f"{e}{where}")
        return 2
    finally:
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)


def entry() -> int:
    """The ``luminamoon`` command (the console script): ``main`` in a process of its own.  The objects
    the imports made (torch's ~200k) are moved out of the garbage collector's reach first
    (``gc.freeze``): the first full collection after them walked them all, 80-120 ms of every
    `luminamoon run` on the shared corpus (measured with gc.callbacks), in the command's serial start.
    They live as long as the process anyway.  ``main`` called from Python leaves the caller's collector
    as it is."""
    import gc

    gc.freeze()
    return main()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(entry())
