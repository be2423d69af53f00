"""Configuration of ``luminamoon run``: defaults, TOML in and out, overrides.

The configuration is a dict of sections (``input``, ``output``, ``run``,
``cleaner``, ``quality``, ``dedup``, ``near_dup``, ``pii``).  Stage parameters carry the
names the stage classes take (``luminamoon.stages``), and their defaults are
read from the stages themselves, so ``luminamoon config`` always prints what a
run would use.

Example:
    >>> from luminamoon.cli.config import default_config, dumps_toml, loads_toml
    >>> cfg = default_config()
    >>> cfg["quality"]["gq_min_doc_words"]
    50
    >>> loads_toml(dumps_toml(cfg)) == cfg
    True
"""
from __future__ import annotations

import copy
import math
from typing import Any, Dict, List, Optional

try:  # Python >= 3.11
    import tomllib as _toml
except ImportError:  # pragma: no cover - Python 3.10
    try:
        import tomli as _toml  # type: ignore[no-redef]
    except ImportError:
        _toml = None

__all__ = ["default_config", "load_config", "loads_toml", "dumps_toml", "merge", "apply_override",
           "ConfigError", "stage_kwargs", "check_config"]


class ConfigError(ValueError):
    """A configuration file or override that cannot be used (the message says why)."""


_BASE: Dict[str, Dict[str, Any]] = {
    "input": {
        "format": "auto",           # auto | jsonl | text | parquet (auto: by file name)
        "text_field": "text",
        "id_field": "id",           # records without it get "<file>:<line>" (or "<file>:<row>")
        "text_per": "line",         # text files: one document per "line" or per "file"
        "skip_bad_records": False,  # malformed lines / rows: skip and count instead of stopping
        "max_record_mb": 64.0,      # a larger line / row is a bad record (refused, never read whole); 0: no limit
    },
    "output": {
        "format": "parquet",        # parquet | jsonl
        "compression": "auto",      # auto (parquet: zstd, jsonl: none) | zstd | snappy | gzip | none
        "part_docs": 50000,         # kept documents per part file; each finished part is a commit
        "part_mb": 256.0,           # ... or this many MB of text, whichever comes first
        "keep_fields": [],          # input fields copied to the output beside id and text
    },
    "run": {
        "batch_size": 2048,         # input documents per batch
        "threads": 0,               # C threads per batch; 0: all cores
        "prefetch_batches": 2,      # batches prepared ahead by the background thread
        "prefetch_mb": 256.0,       # ... holding at most this many MB (a larger single batch goes alone)
        "pipeline": "fused",        # fused (one pass) | chain (the four stages one after another)
        "group_by": "",             # an input field: the stats count kept/dropped per value of it
    },
}

_COMMENTS = {
    "input": "What to read.",
    "output": "What to write: sharded part files with the kept documents and their ids.",
    "run": "How to run.",
    "cleaner": "TextCleaner: UTF-8 repair, control characters, Unicode spaces, blank lines, NFC/NFKC.",
    "quality": ("QualityFilter: datatrove's Gopher repetition, Gopher quality, C4 and FineWeb rules with their\n"
                "published thresholds. rules: rule sets or single rules (luminamoon.stages.QUALITY_RULES)."),
    "dedup": ("StreamDeduplicator: exact deduplication of the cleaned text (XXH3-128, write-ahead log).\n"
              "max_entries: the most distinct documents kept (0: no bound); at it the run stops and says so."),
    "near_dup": ("Near-duplicate removal, MinHash LSH with datatrove's defaults (issue 12). mode: off | cluster\n"
                 "(offline, two passes: datatrove's four MinHash stages' result) | stream (NearDeduplicator in the\n"
                 "stream: a document is dropped when a band was seen earlier). max_entries bounds stream's band index."),
    "pii": ("PIIMasker: e-mail, IPv4/IPv6, phone numbers, credit cards (Luhn), IBANs (mod 97).\n"
            "mode: strict | datatrove."),
}

SECTIONS = ("input", "output", "run", "cleaner", "quality", "dedup", "near_dup", "pii")


def _stage_defaults() -> Dict[str, Dict[str, Any]]:
    from .. import stages

    cleaner = dict(stages.TextCleaner().params)
    norm = cleaner.pop("normalize", 0)
    cleaner = {"enabled": True, "normalize": {0: "none", 1: "NFC", 2: "NFKC"}.get(norm, "none"),
               **{k: (bool(v) if k not in ("max_blank_lines", "max_doc_bytes") else int(v)) for k, v in cleaner.items()}}
    q = dict(stages.QualityFilter.defaults())
    q.pop("enabled", None)
    if "c4_modify_text" in q:
        q["c4_modify_text"] = bool(q["c4_modify_text"])
    if "fw_line_punct_exclude_zero" in q:
        q["fw_line_punct_exclude_zero"] = bool(q["fw_line_punct_exclude_zero"])
    quality = {"enabled": True, "rules": list(stages.QUALITY_RULE_SETS), **{k: _plain(v) for k, v in q.items()}}
    dedup = {"enabled": True, "seed": 0, "max_entries": 0}
    pii = {"enabled": True, "mode": "strict", "types": list(stages.PII_TYPES),
           "ipv4_public_only": True, "ipv6_public_only": True, "max_doc_bytes": 0}
    near_dup = dict(NEAR_DUP_DEFAULTS)
    return {"cleaner": cleaner, "quality": quality, "dedup": dedup, "near_dup": near_dup, "pii": pii}


#: the near_dup section: datatrove's MinhashConfig defaults
NEAR_DUP_DEFAULTS: Dict[str, Any] = {"mode": "off", "n_grams": 5, "num_buckets": 14, "hashes_per_bucket": 8,
                                     "seed": 1, "precision": 64, "max_entries": 0}
NEAR_DUP_MODES = ("off", "cluster", "stream")


def _plain(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def default_config() -> Dict[str, Dict[str, Any]]:
    """The full default configuration (a fresh dict)."""
    cfg = copy.deepcopy(_BASE)
    cfg.update(_stage_defaults())
    return cfg


# ----------------------------------------------------------------- TOML out
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        s = repr(v)
        return s if any(c in s for c in ".en") else s + ".0"
    if isinstance(v, str):
        out = ['"']
        for ch in v:
            if ch in '"\\':
                out.append("\\" + ch)
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\t":
                out.append("\\t")
            elif ord(ch) < 0x20 or ord(ch) == 0x7F:
                out.append(f"\\u{ord(ch):04X}")
            else:
                out.append(ch)
        out.append('"')
        return "".join(out)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dumps_toml(cfg: Dict[str, Dict[str, Any]], comments: bool = True) -> str:
    """TOML text of a configuration (tables of scalars and arrays)."""
    lines: List[str] = []
    if comments:
        lines += ["# luminamoon run configuration (defaults). Use: luminamoon run INPUT -o OUT --config this.toml",
                  "# Any key can also be set on the command line: --set section.key=value", ""]
    for section, table in cfg.items():
        if comments and section in _COMMENTS:
            lines += ["# " + c for c in _COMMENTS[section].split("\n")]
        lines.append(f"[{section}]")
        for k, v in table.items():
            lines.append(f"{k} = {_toml_value(v)}")
        lines.append("")
    return "\n".join(lines)


# ------------------------------------------------------------------ TOML in
def loads_toml(text: str) -> Dict[str, Any]:
    """Parses TOML text (tomllib)."""
    if _toml is None:  # pragma: no cover
        raise ConfigError("reading TOML needs Python >= 3.11 or the 'tomli' package")
    try:
        return _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise ConfigError(f"invalid TOML: {e}") from None


def merge(base: Dict[str, Dict[str, Any]], override: Dict[str, Any], where: str = "config") -> Dict[str, Dict[str, Any]]:
    """``base`` updated with ``override`` (sections of keys); unknown sections,
    unknown keys and values of the wrong type raise ConfigError naming them."""
    out = copy.deepcopy(base)
    for section, table in override.items():
        if section not in out:
            raise ConfigError(f"{where}: unknown section [{section}] (known: {', '.join(out)})")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: [{section}] must be a table")
        for k, v in table.items():
            if k not in out[section]:
                raise ConfigError(f"{where}: unknown key {section}.{k} (known: {', '.join(out[section])})")
            out[section][k] = _coerce(out[section][k], v, f"{where}: {section}.{k}")
    check_config(out, where)
    return out


#: (low, high, low inclusive) for the numeric settings of the base sections; stage
#: parameters without an entry must be finite and >= 0 (ratios and counts)
_RANGES: Dict[str, Any] = {
    "input.max_record_mb": (0.0, 1e6, True),      # 0: no limit; at most 1 TB
    "output.part_docs": (1, 2**40, True),
    "output.part_mb": (0.0, 1e6, False),
    "run.batch_size": (1, 2**31 - 1, True),
    "run.threads": (0, 4096, True),
    "run.prefetch_batches": (0, 2**20, True),
    "run.prefetch_mb": (0.0, 1e6, False),
    "dedup.seed": (0, 2**64 - 1, True),
    "dedup.max_entries": (0, 2**62, True),
    "cleaner.max_blank_lines": (-1, 2**31 - 1, True),   # -1: no limit
    "near_dup.n_grams": (1, 1 << 16, True),
    "near_dup.num_buckets": (1, 1024, True),
    "near_dup.hashes_per_bucket": (1, 1024, True),
    "near_dup.seed": (0, 2**64 - 1, True),
    "near_dup.precision": (32, 64, True),
    "near_dup.max_entries": (0, 2**62, True),
}


def check_config(cfg: Dict[str, Dict[str, Any]], where: str = "config") -> None:
    """Checks every numeric setting: finite and in range, and output.keep_fields:
    distinct non-empty strings.  Raises ConfigError naming the key."""
    for section, table in cfg.items():
        if not isinstance(table, dict):
            continue
        for k, v in table.items():
            key = f"{section}.{k}"
            for x in (v if isinstance(v, list) and k != "keep_fields" else [v]):
                if isinstance(x, bool) or not isinstance(x, (int, float)):
                    continue
                if isinstance(x, float) and not math.isfinite(x):
                    raise ConfigError(f"{where}: {key} must be a finite number, got {x!r}")
                lo, hi, lo_incl = _RANGES.get(key, (0, 2**63 - 1, True))
                if x > hi or (x < lo if lo_incl else x <= lo):
                    rng = f"{'[' if lo_incl else '('}{lo:g}, {hi:g}]"
                    raise ConfigError(f"{where}: {key} = {x!r} is out of range {rng}")
    keep = cfg.get("output", {}).get("keep_fields", [])
    if not isinstance(keep, list):
        raise ConfigError(f"{where}: output.keep_fields must be an array of field names, got {keep!r}")
    seen = set()
    for i, f in enumerate(keep):
        if not isinstance(f, str):
            raise ConfigError(f"{where}: output.keep_fields[{i}] must be a string (a field name), got {f!r}")
        if not f:
            raise ConfigError(f"{where}: output.keep_fields[{i}] is empty")
        if f in seen:
            raise ConfigError(f"{where}: output.keep_fields names {f!r} more than once")
        seen.add(f)


def _coerce(old: Any, new: Any, what: str) -> Any:
    if isinstance(old, bool):
        if not isinstance(new, bool):
            raise ConfigError(f"{what} must be true or false, got {new!r}")
        return new
    if isinstance(old, int):
        if isinstance(new, bool) or not isinstance(new, int):
            raise ConfigError(f"{what} must be an integer, got {new!r}")
        return new
    if isinstance(old, float):
        if isinstance(new, bool) or not isinstance(new, (int, float)):
            raise ConfigError(f"{what} must be a number, got {new!r}")
        return float(new)
    if isinstance(old, str):
        if not isinstance(new, str):
            raise ConfigError(f"{what} must be a string, got {new!r}")
        return new
    if isinstance(old, list):
        if not isinstance(new, list):
            raise ConfigError(f"{what} must be an array, got {new!r}")
        if old and len(new) == len(old) and all(isinstance(x, (int, float)) for x in old):
            return [_coerce(o, n, what) for o, n in zip(old, new)]
        if old and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in old):
            raise ConfigError(f"{what} must be an array of {len(old)} numbers, got {new!r}")
        return list(new)
    return new


def load_config(path: Optional[str], base: Optional[Dict[str, Dict[str, Any]]] = None) -> Dict[str, Dict[str, Any]]:
    """The defaults (or ``base``) updated with a TOML file."""
    cfg = base if base is not None else default_config()
    if path is None:
        return copy.deepcopy(cfg)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    try:
        data = loads_toml(text)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from None
    return merge(cfg, data, where=path)


def apply_override(cfg: Dict[str, Dict[str, Any]], assignment: str) -> Dict[str, Dict[str, Any]]:
    """Applies ``section.key=value`` (value in TOML syntax; a bare word is a string)."""
    if "=" not in assignment or "." not in assignment.split("=", 1)[0]:
        raise ConfigError(f"--set expects section.key=value, got {assignment!r}")
    lhs, rhs = assignment.split("=", 1)
    section, key = lhs.strip().split(".", 1)
    rhs = rhs.strip()
    try:
        value = loads_toml(f"v = {rhs}")["v"]
    except ConfigError:
        value = rhs  # a bare word: a string
    return merge(cfg, {section: {key: value}}, where="--set")


def stage_kwargs(cfg: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Keyword arguments for FusedPipeline / ChainPipeline (without dedup) from a configuration."""
    c = dict(cfg["cleaner"])
    cleaner: Any = False
    if c.pop("enabled"):
        norm = c.pop("normalize")
        cleaner = dict(c, normalize=None if norm.lower() == "none" else norm)
    q = dict(cfg["quality"])
    quality: Any = False
    if q.pop("enabled"):
        rules = q.pop("rules")
        if not rules:
            raise ConfigError("quality.rules is empty: set quality.enabled = false to switch the filter off")
        quality = dict(q, rules=list(rules))
    p = dict(cfg["pii"])
    pii: Any = False
    if p.pop("enabled"):
        pii = dict(p, types=list(p["types"]))
        if not pii["types"]:
            raise ConfigError("pii.types is empty: set pii.enabled = false to switch masking off")
    return {"cleaner": cleaner, "quality": quality, "pii": pii}
