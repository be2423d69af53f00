"""Text stages (C kernels in core/src/clean.c, quality.c, pii.c, dedup.c): TextCleaner, QualityFilter, PIIMasker,
StreamDeduplicator, and the two ways of chaining them, FusedPipeline (one C
pass per document) and ChainPipeline (the four stages as separate batch calls).

Every stage is called on a batch — a :class:`StringTensor`, a ``list[str]`` or
an Arrow string array — and returns a :class:`StageResult`: the surviving texts
(a StringTensor, in input order), one reason code per input document (0 =
kept), and the input index of each output.  The C core runs with the GIL
released, on ``num_threads`` threads (default: ``torch.get_num_threads()``).

Example:
    >>> from luminamoon import FusedPipeline
    >>> pipe = FusedPipeline(quality=False)
    >>> r = pipe(["mail me at bob@example.com", "mail me at bob@example.com", "  "])
    >>> r.texts.tolist(), [reason_name(c) for c in r.reasons.tolist()]
    (['mail me at <EMAIL>'], ['kept', 'duplicate', 'empty'])
"""
from __future__ import annotations

import inspect
import operator
import os
from typing import Iterable, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

import torch

from . import _C
from ._intarg import as_int
from .string_tensor import StringTensor

__all__ = [
    "Stage",
    "StageResult",
    "TextCleaner",
    "QualityFilter",
    "PIIMasker",
    "StreamDeduplicator",
    "NearDeduplicator",
    "FusedPipeline",
    "ChainPipeline",
    "reason_name",
    "REASON_KEPT",
    "REASON_DUPLICATE",
    "REASON_EMPTY",
    "REASON_TOO_LARGE",
    "REASON_NEAR_DUPLICATE",
    "REASON_QUALITY_BASE",
    "QUALITY_RULES",
    "QUALITY_RULE_SETS",
    "PII_TYPES",
    "CorruptError",
    "FormatVersionError",
    "DedupFullError",
]

REASON_KEPT = 0
REASON_DUPLICATE = 1
REASON_EMPTY = 2
REASON_TOO_LARGE = 3
REASON_NEAR_DUPLICATE = 4
REASON_QUALITY_BASE = 16

CorruptError = _C.CorruptError
FormatVersionError = _C.FormatVersionError
DedupFullError = _C.DedupFullError

_RULE_SET_NAMES = ("gopher_repetition", "gopher_quality", "c4", "fineweb")  # core rule-set ids 0..3
#: rule name -> rule id (stable), in id order
QUALITY_RULES: dict = {name: rid for rid, name, _ in _C.quality_rules()}
#: rule-set name -> tuple of its rule names
QUALITY_RULE_SETS: dict = {
    s: tuple(name for _, name, sid in _C.quality_rules() if sid == i) for i, s in enumerate(_RULE_SET_NAMES)
}
PII_TYPES: tuple = tuple(_C.pii_types())
_BASE_REASONS = {REASON_KEPT: "kept", REASON_DUPLICATE: "duplicate", REASON_EMPTY: "empty",
                 REASON_TOO_LARGE: "too_large", REASON_NEAR_DUPLICATE: "near_duplicate"}
_RULE_BY_ID = {rid: name for name, rid in QUALITY_RULES.items()}


def reason_name(code: int) -> str:
    """The name of a reason code.

    >>> reason_name(0), reason_name(1), reason_name(16 + 14)
    ('kept', 'duplicate', 'gopher_quality.min_doc_words')
    """
    if isinstance(code, bool):
        raise TypeError("reason_name: code must be an int reason code, got bool")
    try:
        code = operator.index(code)  # int, numpy integer, 0-d integer tensor
    except TypeError:
        raise TypeError(f"reason_name: code must be an int reason code, got {type(code).__name__}") from None
    if code in _BASE_REASONS:
        return _BASE_REASONS[code]
    if code - REASON_QUALITY_BASE in _RULE_BY_ID:
        return _RULE_BY_ID[code - REASON_QUALITY_BASE]
    return f"unknown({code})"


# ----------------------------------------------------------------- plumbing

def _as_string_tensor(texts, name: str = "texts") -> StringTensor:
    if isinstance(texts, StringTensor):
        st = texts
    elif isinstance(texts, (str, bytes)):
        raise TypeError(f"{name} must be a batch (StringTensor, list of str, Arrow array), not a single "
                        f"{type(texts).__name__}")
    elif isinstance(texts, (list, tuple)):
        st = StringTensor.from_list(texts)
    elif hasattr(texts, "__arrow_c_array__") or hasattr(texts, "__arrow_c_stream__") or \
            type(texts).__module__.startswith("pyarrow"):
        st = StringTensor.from_arrow(texts)
    else:
        raise TypeError(f"{name} must be a StringTensor, a list of str or an Arrow string array, "
                        f"got {type(texts).__name__}")
    if st.device.type != "cpu":
        raise ValueError(f"{name}: the text stages run on the CPU; move the StringTensor with .cpu() first")
    return st


def _texts_from(off64: torch.Tensor, data: torch.Tensor) -> StringTensor:
    # int32 offsets below 2 GiB of payload (the StringTensor convention), int64 above
    if data.numel() < (1 << 31):
        off64 = off64.to(torch.int32)
    return StringTensor(off64, data)


def _threads_arg(num_threads) -> Optional[int]:
    if num_threads is None:
        return None
    n = as_int(num_threads)  # int, numpy integer (bool refused)
    if n is None:
        raise TypeError(f"num_threads must be an int or None, got {type(num_threads).__name__}")
    num_threads = n
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    # review s34: 2**40 was accepted here and every later call raised pybind's "incompatible function
    # arguments" (the binding takes a C int); the core uses at most 256 threads whatever is asked
    if num_threads > _MAX_THREADS_ARG:
        raise ValueError(f"num_threads must be <= {_MAX_THREADS_ARG}, got {num_threads}")
    return num_threads


_MAX_THREADS_ARG = 2**31 - 1  # the binding's C int


# ---------------------------------------------------------- setting checks
# Each stage checks its settings here, in Python, before the C++ binding sees them: a wrong type
# raises TypeError, a value out of range ValueError, both naming the class and the argument.
# (The binding checks them again: it is the contract of the _C objects, which take a dict.)

def _setting_bool(what: str, name: str, v) -> bool:
    # int too (0 / 1 and the like), as the binding always accepted: truthiness decides
    if isinstance(v, (bool, int)):
        return bool(v)
    raise TypeError(f"{what}: {name} must be a bool, got {type(v).__name__}")


def _setting_int(what: str, name: str, v, lo: int, hi: int) -> int:
    i = as_int(v)  # int, numpy integer (bool refused): a plain int is recorded
    if i is None:
        raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    v = i
    if not lo <= v <= hi:
        raise ValueError(f"{what}: {name} must be in [{lo}, {hi}], got {v}")
    return v


def _setting_size(what: str, name: str, v) -> int:
    """An int in [0, 2**64) (a count, a byte size, a seed)."""
    i = as_int(v)  # int, numpy integer (bool refused): a plain int is recorded
    if i is None:
        raise TypeError(f"{what}: {name} must be an int, got {type(v).__name__}")
    v = i
    if v < 0:
        raise ValueError(f"{what}: {name} must be >= 0, got {v}")
    if v >= 1 << 64:
        raise ValueError(f"{what}: {name} must be < 2**64, got {v}")
    return v


def _setting_number(what: str, name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        i = as_int(v)  # a numpy integer counts as the int it holds
        if i is None:
            raise TypeError(f"{what}: {name} must be a number, got {type(v).__name__}")
        v = i
    if v != v:
        raise ValueError(f"{what}: {name} must not be NaN")
    return v


def _setting_numbers(what: str, name: str, v, n: int) -> tuple:
    if isinstance(v, (str, bytes)) or not isinstance(v, (list, tuple)):
        raise TypeError(f"{what}: {name} must be a sequence of {n} numbers, got {type(v).__name__}")
    if len(v) != n:
        raise ValueError(f"{what}: {name} must have {n} entries, got {len(v)}")
    return tuple(_setting_number(what, f"{name}[{i}]", x) for i, x in enumerate(v))


def _non_default(settings: dict, defaults: dict, always: tuple = ()) -> dict:
    """The settings that differ from the defaults (and those named in ``always``), in signature order:
    what ``repr`` shows and what a resumable run records (``data.resumable.describe_setting``)."""
    return {k: v for k, v in settings.items() if k in always or k not in defaults or defaults[k] != v}


@runtime_checkable
class Stage(Protocol):
    """The protocol every text stage and pipeline implements.

    ``TextCleaner``, ``QualityFilter``, ``PIIMasker``, ``StreamDeduplicator``,
    ``NearDeduplicator``, ``FusedPipeline`` and ``ChainPipeline`` all satisfy it
    (``isinstance(obj, Stage)`` is True), so code that drives a stage — a
    training loop, ``ResumablePipeline``, a benchmark — can take any of them:

    * ``stage(texts) -> StageResult``: one batch (a :class:`StringTensor`, a
      ``list[str]`` or an Arrow string array); the result holds the surviving
      texts, one reason code per input and the input index of each output;
    * ``num_threads``: threads per call (settable; ``None`` at construction
      means ``torch.get_num_threads()`` at call time);
    * ``counters``: a fresh dict of what the calls so far counted;
    * ``reset_counters()``: zero them.  The deduplicators' counters are their
      persistent state (entries, LSN): theirs raise NotImplementedError.

    >>> all(isinstance(s, Stage) for s in (TextCleaner(), FusedPipeline(dedup=False)))
    True
    """

    num_threads: int

    def __call__(self, texts) -> "StageResult":
        ...

    @property
    def counters(self) -> dict:
        ...

    def reset_counters(self) -> None:
        ...


class StageResult:
    """What a stage returns for one batch.

    ``texts``: the surviving texts (StringTensor, input order); ``reasons``:
    int32 [n_in], 0 = kept, else why the document was dropped (see
    :func:`reason_name`); ``source_index``: int64 [n_out], the input index of
    each output.

    >>> r = TextCleaner()(["a  b", ""])
    >>> r.texts.tolist(), r.reasons.tolist(), r.source_index.tolist(), r.kept.tolist()
    (['a b'], [0, 2], [0], [True, False])
    """

    __slots__ = ("texts", "reasons", "source_index")

    def __init__(self, texts: StringTensor, reasons: torch.Tensor, source_index: torch.Tensor):
        if not isinstance(texts, StringTensor):
            raise TypeError(f"StageResult: texts must be a StringTensor, got {type(texts).__name__}")
        for name, t in (("reasons", reasons), ("source_index", source_index)):
            if not isinstance(t, torch.Tensor) or t.dim() != 1 or t.is_floating_point() or t.is_complex():
                raise TypeError(f"StageResult: {name} must be a 1-D integer tensor, got "
                                f"{type(t).__name__ if not isinstance(t, torch.Tensor) else f'{t.dtype} {tuple(t.shape)}'}")
        if source_index.numel() != len(texts):
            raise ValueError(f"StageResult: source_index has {source_index.numel()} entries for {len(texts)} texts")
        self.texts = texts
        self.reasons = reasons
        self.source_index = source_index

    @property
    def kept(self) -> torch.Tensor:
        """bool [n_in]: True where the input document produced an output."""
        return self.reasons == REASON_KEPT

    @property
    def num_in(self) -> int:
        return int(self.reasons.numel())

    def __len__(self) -> int:
        return len(self.texts)

    def reason_counts(self) -> dict:
        """{reason name: number of input documents}.

        >>> TextCleaner()(["x", "", " "]).reason_counts()
        {'kept': 1, 'empty': 2}
        """
        vals, counts = torch.unique(self.reasons, return_counts=True)
        return {reason_name(v): int(c) for v, c in zip(vals.tolist(), counts.tolist())}

    def __repr__(self) -> str:
        return f"StageResult(n_in={self.num_in}, n_out={len(self)}, reasons={self.reason_counts()})"


class _BatchCall:
    """What every stage and pipeline shares (the :class:`Stage` protocol): ``__call__`` over
    ``_run_raw``, ``num_threads``, and the counters of the C object ``_obj``."""

    _obj = None
    _num_threads: Optional[int] = None

    @property
    def num_threads(self) -> int:
        """Threads per call (None at construction: torch.get_num_threads() at call time)."""
        return self._num_threads or torch.get_num_threads()

    def _run_raw(self, offsets: torch.Tensor, data: torch.Tensor):
        """(offsets int64, data, source_index, reasons) of one batch in the offsets layout."""
        return self._obj.run(offsets, data, self.num_threads)

    def _check_usable(self) -> None:
        """Raise when this object cannot run here (a WAL-backed deduplicator in a forked child)."""

    def __call__(self, texts) -> StageResult:
        self._check_usable()
        st = _as_string_tensor(texts)
        off, data, src, reasons = self._run_raw(st.offsets, st.data)
        return StageResult(_texts_from(off, data), reasons, src)

    @property
    def counters(self) -> dict:
        """Counters accumulated over the calls (a fresh dict)."""
        return self._obj.counters()

    def reset_counters(self) -> None:
        """Zero the counters."""
        self._obj.reset_counters()


class _Stage(_BatchCall):
    """A single stage: the protocol plus a settable num_threads (not public)."""

    _what = "stage"

    def __init__(self, num_threads):
        self._num_threads = _threads_arg(num_threads)

    @_BatchCall.num_threads.setter
    def num_threads(self, value) -> None:
        self._num_threads = _threads_arg(value)

    def __getstate__(self):
        return dict(self._config, num_threads=self._num_threads)

    def __setstate__(self, state):
        self.__init__(**state)

    def __repr__(self) -> str:
        return _settings_repr(self)


def _signature_defaults(cls) -> dict:
    """{parameter: default} of cls.__init__ (the documented defaults, one source of truth)."""
    return {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()
            if p.default is not inspect.Parameter.empty}


def _settings_repr(obj, drop: Optional[dict] = None, extra: str = "") -> str:
    """``Cls(setting=value, ...)``: the settings that differ from the defaults, then num_threads when set.
    ``drop``: settings left out while they hold the given value (always-recorded ones at their default)."""
    cfg = getattr(obj, "_config", None)
    if cfg is None:  # its constructor raised
        return f"{type(obj).__name__}(<not created>)"
    drop = drop or {}
    parts = [f"{k}={v!r}" for k, v in cfg.items() if not (k in drop and drop[k] == v)]
    if getattr(obj, "_num_threads", None) is not None:
        parts.append(f"num_threads={obj._num_threads}")
    if extra:
        parts.append(extra)
    return f"{type(obj).__name__}({', '.join(parts)})"


# -------------------------------------------------------------------- stages

_NORMALIZE = {None: 0, "none": 0, "NFC": 1, "NFKC": 2}

#: The default ``max_doc_bytes`` of TextCleaner, QualityFilter and PIIMasker
#: (twice the CLI's 64 MB ``max_record_bytes``): a larger document is dropped
#: with reason TOO_LARGE.  Raise it per stage (``max_doc_bytes=...``; 0 = no limit).
DEFAULT_MAX_DOC_BYTES = 128 << 20


class TextCleaner(_Stage):
    """UTF-8 repair, control characters, Unicode spaces, blank lines; optional NFC/NFKC.

    Args:
        normalize: None (no Unicode normalisation), ``"NFC"`` or ``"NFKC"``.
        remove_control: drop C0/C1 control characters (tab and newline stay).
        normalize_newlines: ``\\r\\n`` and lone ``\\r`` become ``\\n``.
        fold_spaces: Unicode space characters (NBSP, ...) become an ASCII space.
        collapse_spaces: runs of spaces become one.
        trim_trailing: strip spaces at the end of each line.
        max_blank_lines: keep at most this many consecutive blank lines (-1: no limit).
        drop_empty: drop a document that is empty after cleaning (reason EMPTY).
        max_doc_bytes: a larger document is dropped with reason TOO_LARGE (0: no limit;
            default ``DEFAULT_MAX_DOC_BYTES`` = 128 MiB).
        num_threads: threads per call (None: ``torch.get_num_threads()`` at call time).

    These are the core's ``lm_cleaner_params`` (``core/include/luminamoon/clean.h``);
    ``params`` returns the effective ones.

    >>> TextCleaner()(["a\\u00a0\\u00a0b  \\n\\n\\n\\nc\\x00"]).texts.tolist()
    ['a b\\n\\n\\nc']
    >>> TextCleaner(normalize="NFKC", max_blank_lines=0)
    TextCleaner(normalize='NFKC', max_blank_lines=0)
    """

    _what = "TextCleaner"

    def __init__(self, normalize: Optional[str] = None, *, remove_control: bool = True,
                 normalize_newlines: bool = True, fold_spaces: bool = True, collapse_spaces: bool = True,
                 trim_trailing: bool = True, max_blank_lines: int = 2, drop_empty: bool = True,
                 max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES, num_threads: Optional[int] = None):
        super().__init__(num_threads)
        w = "TextCleaner"
        if normalize is not None and not isinstance(normalize, str):
            raise TypeError(f"TextCleaner: normalize must be None, 'NFC' or 'NFKC', got {type(normalize).__name__}")
        key = normalize.upper() if isinstance(normalize, str) and normalize.lower() != "none" else normalize
        if isinstance(key, str) and key.lower() == "none":
            key = None
        if key not in _NORMALIZE:
            raise ValueError(f"TextCleaner: normalize must be None, 'NFC' or 'NFKC', got {normalize!r}")
        settings = dict(normalize=normalize,
                        remove_control=_setting_bool(w, "remove_control", remove_control),
                        normalize_newlines=_setting_bool(w, "normalize_newlines", normalize_newlines),
                        fold_spaces=_setting_bool(w, "fold_spaces", fold_spaces),
                        collapse_spaces=_setting_bool(w, "collapse_spaces", collapse_spaces),
                        trim_trailing=_setting_bool(w, "trim_trailing", trim_trailing),
                        max_blank_lines=_setting_int(w, "max_blank_lines", max_blank_lines, -1, 1 << 30),
                        drop_empty=_setting_bool(w, "drop_empty", drop_empty),
                        max_doc_bytes=_setting_size(w, "max_doc_bytes", max_doc_bytes))
        self._config = _non_default(settings, _signature_defaults(TextCleaner), always=("normalize",))
        self._obj = _C.TextCleaner(dict(settings, normalize=_NORMALIZE[key]))

    def __repr__(self) -> str:
        return _settings_repr(self, drop={"normalize": None})

    @property
    def params(self) -> dict:
        """The effective parameters (defaults filled in)."""
        return self._obj.params()


def _resolve_rules(rules) -> int:
    if isinstance(rules, str):
        rules = [rules]
    try:
        items = list(rules)
    except TypeError:
        raise TypeError(f"QualityFilter: rules must be None or an iterable of rule / rule-set names, "
                        f"got {type(rules).__name__}") from None
    mask = 0
    for r in items:
        if not isinstance(r, str):
            raise TypeError(f"QualityFilter: rule names must be str, got {type(r).__name__}")
        if r in QUALITY_RULE_SETS:
            for name in QUALITY_RULE_SETS[r]:
                mask |= 1 << QUALITY_RULES[name]
        elif r in QUALITY_RULES:
            mask |= 1 << QUALITY_RULES[r]
        else:
            raise ValueError(f"QualityFilter: unknown rule {r!r}; valid rule sets: {', '.join(QUALITY_RULE_SETS)}; "
                             f"valid rules: {', '.join(QUALITY_RULES)}")
    return mask


class QualityFilter(_Stage):
    """datatrove's Gopher quality, Gopher repetition, C4 and FineWeb rules, in C.

    Args:
        rules: None (every rule, datatrove's defaults) or an iterable of rule names
            (``"gopher_quality.min_doc_words"``, ...: see ``QUALITY_RULES``) and rule-set names
            (``"gopher_quality"``, ``"gopher_repetition"``, ``"c4"``, ``"fineweb"``).
        enabled: the same as a bit mask of rule ids (``1 << QUALITY_RULES[name]``); give rules or
            enabled, not both.
        c4_modify_text: C4 removes the lines it rejects (citations, javascript, policy, short lines)
            instead of only judging the document.
        max_doc_bytes: a larger document is dropped with reason TOO_LARGE (0: no limit; default
            ``DEFAULT_MAX_DOC_BYTES`` = 128 MiB).
        gr_dup_para_frac, gr_dup_para_char_frac: Gopher repetition (``GopherRepetitionFilter``):
            the largest fraction of duplicated paragraphs, and of the characters in them.
        gr_dup_line_frac, gr_dup_line_char_frac: the same for lines.
        gr_top_ngram_frac: the largest fraction of characters in the most frequent 2-, 3- and
            4-gram (3 numbers).
        gr_dup_ngram_frac: the largest fraction of characters in duplicated 5- .. 10-grams (6 numbers).
        gq_min_doc_words, gq_max_doc_words: Gopher quality (``GopherQualityFilter``): the word
            count range.
        gq_min_avg_word_length, gq_max_avg_word_length: the mean word length range.
        gq_max_symbol_word_ratio: the largest ratio of ``#`` / ``...`` symbols to words.
        gq_max_bullet_lines_ratio, gq_max_ellipsis_lines_ratio: the largest fraction of lines
            starting with a bullet / ending with an ellipsis.
        gq_min_alpha_words_ratio: the smallest fraction of words holding a letter.
        gq_min_stop_words: the fewest English stop words.
        c4_min_sentences, c4_min_words_per_line, c4_max_word_length: C4 (``C4QualityFilter``):
            the fewest sentences, the fewest words of a kept line, the longest word.
        fw_line_punct_thr, fw_line_punct_exclude_zero: FineWeb (``FineWebQualityFilter``): the
            smallest fraction of lines ending in punctuation (and whether a document with none
            is exempt).
        fw_short_line_thr, fw_short_line_length: the largest fraction of lines of at most
            ``fw_short_line_length`` characters.
        fw_char_dup_ratio: the largest fraction of characters in duplicated lines.
        fw_new_line_ratio: the largest ratio of newlines to words.
        num_threads: threads per call (None: ``torch.get_num_threads()`` at call time).

    The thresholds default to datatrove's (``QualityFilter.defaults()``; the core's
    ``lm_quality_params`` in ``core/include/luminamoon/quality.h``).  Working memory is at most ~16
    bytes per byte of the largest document checked (9 per token, a word copy, C4's line buffers),
    plus the hash sets of distinct lines and n-grams.

    >>> r = QualityFilter(rules=["gopher_quality"])(["too short"])
    >>> reason_name(r.reasons[0])
    'gopher_quality.min_doc_words'
    >>> QualityFilter(rules="c4", c4_min_sentences=3)
    QualityFilter(rules=['c4'], c4_min_sentences=3)
    """

    _what = "QualityFilter"

    def __init__(self, rules: Optional[Iterable[str]] = None, *, enabled: Optional[int] = None,
                 c4_modify_text: bool = True, max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES,
                 gr_dup_para_frac: float = 0.3, gr_dup_para_char_frac: float = 0.2,
                 gr_dup_line_frac: float = 0.3, gr_dup_line_char_frac: float = 0.2,
                 gr_top_ngram_frac: Sequence[float] = (0.2, 0.18, 0.16),
                 gr_dup_ngram_frac: Sequence[float] = (0.15, 0.14, 0.13, 0.12, 0.11, 0.1),
                 gq_min_doc_words: int = 50, gq_max_doc_words: int = 100000,
                 gq_min_avg_word_length: float = 3.0, gq_max_avg_word_length: float = 10.0,
                 gq_max_symbol_word_ratio: float = 0.1, gq_max_bullet_lines_ratio: float = 0.9,
                 gq_max_ellipsis_lines_ratio: float = 0.3, gq_min_alpha_words_ratio: float = 0.8,
                 gq_min_stop_words: int = 2,
                 c4_min_sentences: int = 5, c4_min_words_per_line: int = 3, c4_max_word_length: int = 1000,
                 fw_line_punct_thr: float = 0.12, fw_line_punct_exclude_zero: bool = False,
                 fw_short_line_thr: float = 0.67, fw_short_line_length: int = 30,
                 fw_char_dup_ratio: float = 0.01, fw_new_line_ratio: float = 0.3,
                 num_threads: Optional[int] = None):
        super().__init__(num_threads)
        w = "QualityFilter"
        if enabled is not None and rules is not None:
            raise TypeError("QualityFilter: give rules or enabled, not both")
        given = dict(locals())
        settings: dict = {"rules": None if rules is None else ([rules] if isinstance(rules, str) else rules)}
        for name, kind in _QUALITY_SETTING_KINDS.items():
            v = given[name]
            if kind is bool:
                settings[name] = _setting_bool(w, name, v)
            elif kind is int:
                settings[name] = _setting_size(w, name, v)
            elif kind is float:
                settings[name] = _setting_number(w, name, v)
            else:  # a tuple of `kind` floats
                settings[name] = _setting_numbers(w, name, v, kind)
        p = {k: v for k, v in settings.items() if k != "rules"}
        if rules is not None:
            p["enabled"] = _resolve_rules(rules)
            settings["rules"] = list(settings["rules"])
        elif enabled is not None:
            p["enabled"] = _setting_size(w, "enabled", enabled)
            if p["enabled"] >> len(QUALITY_RULES):
                raise ValueError(f"QualityFilter: enabled has bits of unknown rules (rule ids are "
                                 f"0..{len(QUALITY_RULES) - 1})")
            settings = {"enabled": p["enabled"], **settings}
        self._config = _non_default(settings, _signature_defaults(QualityFilter), always=("rules",))
        self._obj = _C.QualityFilter(p)

    def __repr__(self) -> str:
        return _settings_repr(self, drop={"rules": None})

    @staticmethod
    def defaults() -> dict:
        """datatrove's default thresholds, by parameter name."""
        return _C.quality_params_default()

    @property
    def params(self) -> dict:
        return self._obj.params()

    @property
    def rules(self) -> list:
        """The names of the enabled rules."""
        en = self._obj.params()["enabled"]
        return [n for n, i in QUALITY_RULES.items() if en >> i & 1]


#: QualityFilter's threshold keywords: bool, int (>= 0), float, or n (a tuple of n floats)
_QUALITY_SETTING_KINDS: dict = {
    "c4_modify_text": bool, "max_doc_bytes": int,
    "gr_dup_para_frac": float, "gr_dup_para_char_frac": float, "gr_dup_line_frac": float,
    "gr_dup_line_char_frac": float, "gr_top_ngram_frac": 3, "gr_dup_ngram_frac": 6,
    "gq_min_doc_words": int, "gq_max_doc_words": int, "gq_min_avg_word_length": float,
    "gq_max_avg_word_length": float, "gq_max_symbol_word_ratio": float, "gq_max_bullet_lines_ratio": float,
    "gq_max_ellipsis_lines_ratio": float, "gq_min_alpha_words_ratio": float, "gq_min_stop_words": int,
    "c4_min_sentences": int, "c4_min_words_per_line": int, "c4_max_word_length": int,
    "fw_line_punct_thr": float, "fw_line_punct_exclude_zero": bool, "fw_short_line_thr": float,
    "fw_short_line_length": int, "fw_char_dup_ratio": float, "fw_new_line_ratio": float,
}


class PIIMasker(_Stage):
    """Mask e-mail addresses, IPv4/IPv6 addresses, phone numbers, credit cards and IBANs.

    Args:
        mode: ``"strict"`` (all six types, context rules against false positives) or
            ``"datatrove"`` (byte-exact datatrove ``PIIFormatter``: e-mail then public IPv4, its
            replacement strings used in turn).
        types: an iterable of type names (``PII_TYPES``) to mask (None: every type of the mode).
        ipv4_public_only, ipv6_public_only: mask only public (routable) addresses (None: the
            mode's default: True for IPv4 in datatrove mode, else False).
        cycle_across_documents: the replacement strings of a type are used in turn across
            documents, not restarted per document (None: the mode's default: True in datatrove mode).
        replacements: ``{type name: str or list of str}``: what a match becomes (default:
            ``<EMAIL>``, ``<IP_ADDRESS>``..., datatrove's lists in datatrove mode).
        max_doc_bytes: a larger document is refused - dropped with reason TOO_LARGE, never passed
            through unmasked - and ``find`` raises ValueError for it (0: no limit; default
            ``DEFAULT_MAX_DOC_BYTES`` = 128 MiB).
        num_threads: threads per call (None: ``torch.get_num_threads()`` at call time).

    These are the core's ``lm_pii_params`` (``core/include/luminamoon/pii.h``).

    >>> PIIMasker()(["write to ann@example.org or call 555-123-4567"]).texts.tolist()
    ['write to <EMAIL> or call <PHONE>']
    >>> PIIMasker("datatrove", types=["email"])
    PIIMasker(mode='datatrove', types=['email'])
    """

    _what = "PIIMasker"

    def __init__(self, mode: str = "strict", *, types: Optional[Iterable[str]] = None,
                 ipv4_public_only: Optional[bool] = None, ipv6_public_only: Optional[bool] = None,
                 cycle_across_documents: Optional[bool] = None,
                 replacements: Optional[Mapping[str, Union[str, Sequence[str]]]] = None,
                 max_doc_bytes: int = DEFAULT_MAX_DOC_BYTES, num_threads: Optional[int] = None):
        super().__init__(num_threads)
        w = "PIIMasker"
        if not isinstance(mode, str) or mode not in ("strict", "datatrove"):
            raise ValueError(f"PIIMasker: mode must be 'strict' or 'datatrove', got {mode!r}")
        p: dict = {"mode": 0 if mode == "strict" else 1}
        if types is not None:
            if isinstance(types, str):
                types = [types]
            if not hasattr(types, "__iter__"):
                raise TypeError(f"PIIMasker: types must be an iterable of type names ({', '.join(PII_TYPES)}), "
                                f"got {type(types).__name__}")
            types = list(types)
            bits = 0
            for t in types:
                if t not in PII_TYPES:
                    raise ValueError(f"PIIMasker: unknown PII type {t!r} (valid: {', '.join(PII_TYPES)})")
                bits |= 1 << PII_TYPES.index(t)
            p["types"] = bits
        for name, v in (("ipv4_public_only", ipv4_public_only), ("ipv6_public_only", ipv6_public_only),
                        ("cycle_across_documents", cycle_across_documents)):
            if v is not None:
                p[name] = _setting_bool(w, name, v)
        if replacements is not None:
            p["replacements"] = _pii_replacements(replacements)
        p["max_doc_bytes"] = _setting_size(w, "max_doc_bytes", max_doc_bytes)
        settings = dict(mode=mode, types=types, ipv4_public_only=p.get("ipv4_public_only"),
                        ipv6_public_only=p.get("ipv6_public_only"),
                        cycle_across_documents=p.get("cycle_across_documents"),
                        replacements=p.get("replacements"), max_doc_bytes=p["max_doc_bytes"])
        self._config = _non_default(settings, _signature_defaults(PIIMasker), always=("mode", "types"))
        self._obj = _C.PIIMasker(p)

    def __repr__(self) -> str:
        return _settings_repr(self, drop={"mode": "strict", "types": None})

    @property
    def pii_cycle(self) -> list:
        """The replacement cycle positions, one per type of ``PII_TYPES`` (matches replaced so
        far with ``cycle_across_documents``; datatrove mode).  Part of a resumable run's state:
        assign the saved list back to continue the cycle exactly.

        >>> m = PIIMasker("datatrove"); _ = m(["a@b.com"]); m.pii_cycle[PII_TYPES.index("email")]
        1
        """
        return self._obj.get_cycle()

    @pii_cycle.setter
    def pii_cycle(self, value) -> None:
        self._obj.set_cycle(_cycle_arg(value))

    def find(self, text: Union[str, bytes]) -> list:
        """[(type, start, end)] byte spans that would be replaced (see pii.h for datatrove mode)."""
        if isinstance(text, str):
            text = text.encode("utf-8", "surrogatepass")
        if not isinstance(text, bytes):
            raise TypeError(f"text must be str or bytes, got {type(text).__name__}")
        return self._obj.find(text)


def _pii_replacements(value) -> dict:
    """PIIMasker's replacements, checked: {type name: [str, ...]} (a copy)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"PIIMasker: replacements must be a dict {{type name: str or list of str}}, "
                        f"got {type(value).__name__}")
    out = {}
    for name, v in value.items():
        if name not in PII_TYPES:
            raise ValueError(f"PIIMasker: unknown PII type {name!r} in replacements (valid: {', '.join(PII_TYPES)})")
        where = f"PIIMasker: replacements[{name!r}]"
        if isinstance(v, str):
            vals = [v]
        elif isinstance(v, (list, tuple)):
            vals = list(v)
            if not all(isinstance(x, str) for x in vals):
                raise TypeError(f"{where} must hold str")
        else:
            raise TypeError(f"{where} must be a str or a list of str, got {type(v).__name__}")
        if not vals:
            raise ValueError(f"{where} is empty")
        for x in vals:
            try:
                x.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{where} is not encodable as UTF-8 (a lone surrogate?)") from None
            if "\0" in x:
                raise ValueError(f"{where} holds a NUL character")
        out[name] = vals if not isinstance(v, str) else v
    return out


class _DedupIndex(_Stage):
    """What the two deduplicators share: an exact-dedup table of 128-bit keys behind a WAL
    (StreamDeduplicator: one key per distinct document; NearDeduplicator: one per distinct band key)."""

    _holds = "a table"

    @property
    def _forked(self) -> bool:
        """True in a child forked from the process that opened this deduplicator's WAL: the
        binding refuses every call there (its log is the parent's) and close() writes nothing."""
        return self._obj is not None and self._obj.forked

    def _check_usable(self, what: Optional[str] = None) -> None:
        if self._forked:
            raise ValueError(
                f"{what or self._what}: this {self._what} and its WAL {self._obj.path!r} belong to the "
                f"process that created it; this process is a child forked from it, where using it would "
                f"write into (or wait on) the parent's log. Create a {self._what} of its own (another "
                f"wal_path) in this process")

    def __getstate__(self):
        raise TypeError(f"a {self._what} holds {self._holds} and an open log and cannot be pickled; "
                        "create one per process (each with its own WAL path)")

    @property
    def counters(self) -> dict:
        """The table's ``stats`` (a deduplicator's counters are its persistent state)."""
        self._check_usable()
        return self._obj.stats()

    def reset_counters(self) -> None:
        """Not supported: raises NotImplementedError (the counters are the table's state)."""
        raise NotImplementedError(f"the {self._what}'s counters are its stats; they cannot be reset")

    @property
    def lsn(self) -> int:
        """The number of keys admitted (distinct documents / band keys): the state is 'the first lsn
        admissions'."""
        self._check_usable()
        return self._obj.lsn()

    def sync(self) -> int:
        """Write the buffered keys and fdatasync the log; returns the durable LSN."""
        self._check_usable(f"{self._what}.sync")
        return self._obj.sync()

    def truncate(self, lsn: int) -> None:
        """Cut the log and the table back to the state at ``lsn`` (durably)."""
        self._check_usable(f"{self._what}.truncate")
        i = as_int(lsn)  # a numpy integer as the int it holds; anything else goes on to the binding's check
        self._obj.truncate(lsn if i is None else i)

    def snapshot(self) -> None:
        """Write a snapshot of the table next to the log (path + '.snap')."""
        self._check_usable(f"{self._what}.snapshot")
        self._obj.snapshot()

    @property
    def stats(self) -> dict:
        """entries (distinct keys), lsn, durable_lsn, bytes_per_entry, wal_bytes, probes, ..."""
        self._check_usable()
        return self._obj.stats()

    def __len__(self) -> int:
        self._check_usable()
        return int(self._obj.stats()["entries"])

    @property
    def closed(self) -> bool:
        return self._obj.closed

    @property
    def path(self) -> Optional[str]:
        return self._obj.path

    def close(self) -> None:
        """Sync and close the log (idempotent).  In a process forked from the one that opened the
        log it only marks the object closed: the log is the parent's, nothing is written."""
        self._obj.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class StreamDeduplicator(_DedupIndex):
    """Exact deduplication by XXH3-128 across batches and restarts (write-ahead log).

    Args:
        wal_path: None (in memory) or the log file (created, or recovered: snapshot + replay,
            torn tail cut).
        seed: the XXH3 seed, an int in [0, 2**64) (a WAL remembers its seed: reopening it with
            another raises ValueError).
        max_entries: the most distinct documents the table admits (0: unlimited); a batch that
            would pass it raises ``DedupFullError`` and admits nothing.
        initial_capacity: table slots to start with (None: the core's 1024; it doubles as needed).
        wal_buffer_hashes: hashes buffered per WAL record (None: the core's 4096; at most 65536).
        tag: up to 32 bytes stored in the WAL header and checked on reopening (None: none).
        num_threads: threads per call (None: ``torch.get_num_threads()`` at call time).

    ``lsn`` counts the admitted documents; ``sync()`` makes them durable and
    returns the durable LSN; ``truncate(lsn)`` forgets everything admitted
    after ``lsn``; ``snapshot()`` bounds recovery time.  After ``close()`` the
    object answers ``lsn``, ``stats`` and ``len()`` only; other calls raise
    ValueError("... closed").

    >>> with StreamDeduplicator() as d:
    ...     d(["a", "b", "a"]).reasons.tolist(), d.lsn
    ([0, 0, 1], 2)
    """

    _what = "StreamDeduplicator"

    def __init__(self, wal_path: Union[str, os.PathLike, None] = None, seed: int = 0, max_entries: int = 0, *,
                 initial_capacity: Optional[int] = None, wal_buffer_hashes: Optional[int] = None,
                 tag: Optional[bytes] = None, num_threads: Optional[int] = None):
        super().__init__(num_threads)
        w = "StreamDeduplicator"
        if wal_path is not None and not isinstance(wal_path, (str, os.PathLike)):
            raise TypeError(f"StreamDeduplicator: wal_path must be None, a str or a PathLike, "
                            f"got {type(wal_path).__name__}")
        p = dict(wal_path=wal_path, seed=_setting_size(w, "seed", seed),
                 max_entries=_setting_size(w, "max_entries", max_entries))
        for name, v in (("initial_capacity", initial_capacity), ("wal_buffer_hashes", wal_buffer_hashes)):
            if v is not None:
                p[name] = _setting_size(w, name, v)
        if tag is not None:
            if not isinstance(tag, bytes):
                raise TypeError(f"StreamDeduplicator: tag must be bytes (at most 32) or None, got {type(tag).__name__}")
            p["tag"] = tag
        # recorded as before: wal_path, seed and max_entries always, the others when given
        self._config = p
        try:
            self._obj = _C.StreamDeduplicator(dict(p))
        except ValueError as e:
            # review s34: a WAL locked by another open deduplicator was refused as "object is in the
            # wrong state for this call" (the core's LM_ESTATE from flock; NearDeduplicator names it)
            if wal_path is not None and "wrong state" in str(e):
                raise ValueError(f"StreamDeduplicator: the WAL {os.fspath(wal_path)} is in use (locked by "
                                 "another open StreamDeduplicator, in this or another process); close that "
                                 "one first or use another wal_path") from e
            raise

    def check_insert_hashes(self, hashes: torch.Tensor) -> torch.Tensor:
        """Admit precomputed hashes (int64 [N, 2]: lo, hi of XXH3-128); bool [N]: new."""
        self._check_usable(f"{self._what}.check_insert_hashes")
        if not isinstance(hashes, torch.Tensor):
            raise TypeError(f"hashes must be a torch.Tensor, got {type(hashes).__name__}")
        return self._obj.check_insert_hashes(hashes)

    def __contains__(self, text) -> bool:
        self._check_usable(f"{self._what}.contains")
        return self._obj.contains(text)

    @property
    def seed(self) -> int:
        return self._obj.seed

    @property
    def tag(self) -> bytes:
        """The 32 bytes stored in the WAL's header (zeros: no tag)."""
        return self._obj.tag

    def __repr__(self) -> str:
        if self._obj is None:  # its constructor raised
            return "StreamDeduplicator(<not created>)"
        if self._forked:
            return f"StreamDeduplicator(wal_path={self.path!r}, seed={self.seed}, <a forked child's copy>)"
        me = self._config.get("max_entries", 0)
        return (f"StreamDeduplicator(wal_path={self.path!r}, seed={self.seed}"
                f"{f', max_entries={me}' if me else ''}, lsn={self.lsn}{', closed' if self.closed else ''})")


class NearDeduplicator(_DedupIndex):
    """Near-duplicate removal in the stream: MinHash LSH band keys (issue 12), like StreamDeduplicator.

    Each document's MinHash signature (``luminamoon.MinHash``: datatrove's
    ``MinhashDedupSignature``; ``seed``, ``n_grams``, ``num_buckets`` bands of
    ``hashes_per_bucket`` rows, ``precision`` 64 or 32) is cut into bands; band
    ``b``'s key is XXH3-128 of the band's values (little-endian, 8 or 4 bytes
    each) with seed ``b``, its top 8 bits replaced by ``b`` (keys of different
    bands never match).  A document is dropped with reason ``near_duplicate``
    when ANY of its band keys was seen earlier in the stream (an earlier batch,
    or earlier in the same batch); the first occurrence is kept.  A document
    with fewer words than ``n_grams`` has no signature (as in datatrove): it is
    kept and adds no keys.

    Which keys are inserted: those of EVERY document that reaches the stage,
    dropped ones too.  Why: (1) datatrove clusters by union-find over bucket
    collisions, so A~B and B~C put C in A's cluster even when C shares no band
    with A; inserting only the kept documents' keys would keep C, inserting
    B's keys drops it, as datatrove does.  (2) Each key's check-and-insert is
    then independent of its document's decision (the decision is an OR over
    the keys), so ``DistributedPipeline(near_dedup="global")`` sends each key
    to the rank that owns it (``lo mod world_size``) exactly as exact global
    dedup sends document hashes, and elastic N->M resume re-partitions keys
    the same way.  Remaining difference from datatrove's offline clusters: the
    stream keeps the *first* document of a cluster it has seen so far and
    cannot drop an earlier document when a later one links two clusters.

    The band index is an exact-dedup table (``lsn`` counts distinct band keys;
    ``wal_path``, ``sync``, ``truncate``, ``snapshot``, ``max_entries`` with the
    all-or-nothing ``DedupFullError`` behave as in StreamDeduplicator).  The
    MinHash configuration is recorded in the WAL header: reopening it with
    another seed / n_grams / num_buckets / hashes_per_bucket / precision raises
    ValueError naming the differing setting.  Memory: one 16-byte slot per
    distinct key in a 50-80% full table, ``num_buckets`` keys per new document
    (see ``stats['table_bytes']``).  ``initial_capacity`` and ``wal_buffer_hashes`` tune the table
    and the log as in StreamDeduplicator (None: the core's defaults); ``num_threads``: threads per
    call (None: ``torch.get_num_threads()`` at call time).

    >>> with NearDeduplicator() as nd:
    ...     r = nd(["the quick brown fox jumps over the lazy dog today",
    ...             "The quick brown fox jumps over the lazy dog today!", "something else entirely here ok"])
    >>> [reason_name(c) for c in r.reasons.tolist()]
    ['kept', 'near_duplicate', 'kept']
    """

    _what = "NearDeduplicator"
    _holds = "a band index"

    def __init__(self, wal_path: Union[str, os.PathLike, None] = None, *, seed: int = 1, n_grams: int = 5,
                 num_buckets: int = 14, hashes_per_bucket: int = 8, precision: int = 64, max_entries: int = 0,
                 initial_capacity: Optional[int] = None, wal_buffer_hashes: Optional[int] = None,
                 num_threads: Optional[int] = None):
        super().__init__(num_threads)
        w = "NearDeduplicator"
        if wal_path is not None and not isinstance(wal_path, (str, os.PathLike)):
            raise TypeError(f"NearDeduplicator: wal_path must be None, a str or a PathLike, "
                            f"got {type(wal_path).__name__}")
        seed = _setting_int(w, "seed", seed, 0, 2**32 - 1)
        n_grams = _setting_int(w, "n_grams", n_grams, 1, 4096)
        num_buckets = _setting_int(w, "num_buckets", num_buckets, 1, 1 << 30)  # the binding's exact bounds come next
        hashes_per_bucket = _setting_int(w, "hashes_per_bucket", hashes_per_bucket, 1, 1 << 30)
        precision = _setting_size(w, "precision", precision)
        if precision not in (32, 64):
            raise ValueError(f"NearDeduplicator: precision must be 32 or 64, got {precision}")
        max_entries = _setting_size(w, "max_entries", max_entries)
        extra = {}
        for name, v in (("initial_capacity", initial_capacity), ("wal_buffer_hashes", wal_buffer_hashes)):
            if v is not None:
                extra[name] = _setting_size(w, name, v)
        cfg = dict(seed=seed, n_grams=n_grams, num_buckets=num_buckets, hashes_per_bucket=hashes_per_bucket,
                   precision=precision)
        self._config = dict(extra, wal_path=wal_path, max_entries=max_entries, **cfg)
        self._obj = _C.NearDeduplicator(dict(self._config))

    @property
    def config(self) -> dict:
        """The MinHash configuration: seed, n_grams, num_buckets, hashes_per_bucket, precision."""
        return self._obj.config

    @property
    def index_seed(self) -> int:
        """The hash seed recorded in the band index's WAL header (derived from the configuration)."""
        return self._obj.index_seed

    def keys(self, texts):
        """(keys int64 [N * num_buckets, 2], has_keys bool [N]): the band keys of each document
        (rows i*B .. i*B+B-1), without admitting anything; zero rows where has_keys is False."""
        st = _as_string_tensor(texts)
        return self._obj.keys(st.offsets, st.data, self.num_threads)

    def signature_keys(self, signatures: torch.Tensor):
        """The band keys of precomputed signatures (``MinHash(...).signatures(texts)`` with the
        same configuration): (keys [N * num_buckets, 2], has_keys bool [N])."""
        if not isinstance(signatures, torch.Tensor):
            raise TypeError(f"signatures must be a torch.Tensor, got {type(signatures).__name__}")
        return self._obj.signature_keys(signatures)

    def check_keys(self, keys: torch.Tensor, has_keys: torch.Tensor) -> torch.Tensor:
        """Admit the keys of N documents in order (as ``keys()`` returns them); bool [N]: near duplicate."""
        for name, t in (("keys", keys), ("has_keys", has_keys)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        self._check_usable(f"{self._what}.check_keys")
        return self._obj.check_keys(keys, has_keys)

    def check_insert_hashes(self, keys: torch.Tensor) -> torch.Tensor:
        """Admit raw band keys (int64 [M, 2]); bool [M]: new (the distributed owner's side)."""
        self._check_usable(f"{self._what}.check_insert_hashes")
        if not isinstance(keys, torch.Tensor):
            raise TypeError(f"keys must be a torch.Tensor, got {type(keys).__name__}")
        return self._obj.check_insert_hashes(keys)

    def decisions(self, texts_iter, batch_size: int = 4096):
        """Run the stage over an iterable of str (a corpus) and return bool [N]: True where the
        document is a near duplicate, as the stream decides (for comparing with offline clusters).
        Admits the keys into this deduplicator."""
        # batch_size 0, -1 or 1.5 never equalled len(batch): the whole corpus became one batch, silently
        # (review s34)
        n = as_int(batch_size)
        if n is None:
            raise TypeError(f"NearDeduplicator.decisions: batch_size must be an int, got {type(batch_size).__name__}")
        batch_size = n
        if batch_size < 1:
            raise ValueError(f"NearDeduplicator.decisions: batch_size must be >= 1, got {batch_size}")
        out = []
        batch = []
        for t in texts_iter:
            batch.append(t)
            if len(batch) == batch_size:
                out.append(self(batch).reasons == REASON_NEAR_DUPLICATE)
                batch = []
        if batch:
            out.append(self(batch).reasons == REASON_NEAR_DUPLICATE)
        return torch.cat(out) if out else torch.zeros(0, dtype=torch.bool)

    def __repr__(self) -> str:
        if self._obj is None:
            return "NearDeduplicator(<not created>)"
        if self._forked:
            return f"NearDeduplicator(wal_path={self.path!r}, <a forked child's copy>)"
        c, me = self.config, self._config.get("max_entries", 0)
        return (f"NearDeduplicator(wal_path={self.path!r}, seed={c['seed']}, n_grams={c['n_grams']}, "
                f"num_buckets={c['num_buckets']}, hashes_per_bucket={c['hashes_per_bucket']}, "
                f"precision={c['precision']}{f', max_entries={me}' if me else ''}, lsn={self.lsn}"
                f"{', closed' if self.closed else ''})")


def near_dedup_wal_config(path) -> Optional[dict]:
    """The MinHash configuration recorded in a NearDeduplicator's WAL (None: not one)."""
    return _C.near_dedup_wal_config(os.fspath(path))


def hash128(texts, seed: int = 0) -> torch.Tensor:
    """XXH3-128 of each text: int64 [N, 2] (lo, hi), as the deduplicator hashes them.

    ``seed``: 64 bits, an int in [-2**63, 2**64) (a negative one stands for its two's-complement
    bits, as in ``StringTensor.hash64``)."""
    s = as_int(seed)
    if s is None:
        raise TypeError(f"hash128: seed must be an int, got {type(seed).__name__}")
    seed = s
    if not -2**63 <= seed < 2**64:
        raise ValueError(f"hash128: seed must be in [-2**63, 2**64) (64 bits), got {seed}")
    st = _as_string_tensor(texts)
    return _C.hash128(st.offsets, st.data, seed & (2**64 - 1))


# ----------------------------------------------------------------- pipelines

def _cycle_arg(value) -> list:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"pii_cycle must be a list of {len(PII_TYPES)} ints, got {type(value).__name__}")
    v = [as_int(x) for x in value]  # ints, numpy integers (bool refused): plain ints are kept
    if len(v) != len(PII_TYPES) or any(x is None or not 0 <= x < 1 << 64 for x in v):
        raise ValueError(f"pii_cycle must be a list of {len(PII_TYPES)} ints in [0, 2**64), got {value!r}")
    return v


#: A pipeline's stage argument: True (the stage with its defaults), False / None (off), a dict of the
#: stage's settings (its keyword arguments), or a stage object.
StageSetting = Union[bool, None, Mapping[str, object], "_Stage"]


def _resolve(value, cls, name: str):
    """True -> a default stage; False/None -> off; a stage object -> itself; a dict -> cls(**dict)."""
    if value is True:
        return cls(), True
    if value is False or value is None:
        return None, False
    if isinstance(value, cls):
        return value, False
    if isinstance(value, dict):
        return cls(**value), True
    raise TypeError(f"{name} must be True, False/None, a dict of parameters or a {cls.__name__}, "
                    f"got {type(value).__name__}")


class _Pipeline(_BatchCall):
    def __init__(self, cleaner, quality, dedup, pii, num_threads, near_dedup=None):
        self._num_threads = _threads_arg(num_threads)
        self._near, self._owns_near = None, False
        self._dedup, self._owns_dedup = None, False
        self._cleaner, _ = _resolve(cleaner, TextCleaner, "cleaner")
        self._quality, _ = _resolve(quality, QualityFilter, "quality")
        self._pii, _ = _resolve(pii, PIIMasker, "pii")
        self._dedup, self._owns_dedup = _resolve(dedup, StreamDeduplicator, "dedup")
        if self._dedup is not None and self._dedup.closed:
            raise ValueError(f"{type(self).__name__}: the StreamDeduplicator is closed")
        self._near, self._owns_near = _resolve(near_dedup, NearDeduplicator, "near_dedup")
        if self._near is not None and self._near.closed:
            raise ValueError(f"{type(self).__name__}: the NearDeduplicator is closed")

    def _check_usable(self) -> None:
        for ix in (self._dedup, self._near):
            if ix is not None:
                ix._check_usable(f"{type(self).__name__}")

    @property
    def cleaner(self) -> Optional[TextCleaner]:
        return self._cleaner

    @property
    def quality(self) -> Optional[QualityFilter]:
        return self._quality

    @property
    def dedup(self) -> Optional[StreamDeduplicator]:
        """The StreamDeduplicator (shared with whoever passed it in), or None."""
        return self._dedup

    @property
    def pii(self) -> Optional[PIIMasker]:
        return self._pii

    @property
    def near_dedup(self) -> Optional[NearDeduplicator]:
        """The NearDeduplicator (shared with whoever passed it in), or None."""
        return self._near

    def close(self) -> None:
        """Close the deduplicators this pipeline created."""
        if self._dedup is not None and self._owns_dedup:
            self._dedup.close()
        if self._near is not None and self._owns_near:
            self._near.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self):
        if self._dedup is not None or self._near is not None:
            raise TypeError(f"a {type(self).__name__} with a StreamDeduplicator or NearDeduplicator cannot be "
                            "pickled; build it in each process")
        return {"cleaner": self._cleaner or False, "quality": self._quality or False, "dedup": False,
                "pii": self._pii or False, "num_threads": self._num_threads}

    def __setstate__(self, state):
        self.__init__(**state)

    def __repr__(self) -> str:
        """Each stage's repr in pipeline order (False: off), then num_threads when set."""
        if not hasattr(self, "_pii"):  # its constructor raised
            return f"{type(self).__name__}(<not created>)"
        parts = [f"{n}={s!r}" if s is not None else f"{n}=False"
                 for n, s in (("cleaner", self._cleaner), ("quality", self._quality), ("dedup", self._dedup),
                              ("near_dedup", self._near), ("pii", self._pii))]
        if self._num_threads is not None:
            parts.append(f"num_threads={self._num_threads}")
        return f"{type(self).__name__}({', '.join(parts)})"


class FusedPipeline(_Pipeline):
    """clean -> quality -> dedup -> near dedup -> PII in one pass per document (C), same output as ChainPipeline.

    Args:
        cleaner: a :class:`TextCleaner` setting (see ``StageSetting``).
        quality: a :class:`QualityFilter` setting.
        dedup: a :class:`StreamDeduplicator` setting.
        pii: a :class:`PIIMasker` setting.
        num_threads: threads per call (None: ``torch.get_num_threads()`` at call time).
        near_dedup: a :class:`NearDeduplicator` setting (default off).

    Each stage setting is True (that stage with its default settings), False or None (off), a
    dict of its settings (``quality={"rules": ["c4"]}`` = ``quality=QualityFilter(rules=["c4"])``),
    or a stage object whose settings are used.  A StreamDeduplicator / NearDeduplicator passed in
    is used itself (shared: sync / truncate it through ``pipe.dedup``); one the pipeline created is
    closed by ``close()``.  The PII replacement cycle (datatrove mode) and the counters are the
    pipeline's own.

    >>> pipe = FusedPipeline(quality=False, pii=PIIMasker("strict"))
    >>> pipe(["x@y.org is here", "x@y.org is here"]).texts.tolist()
    ['<EMAIL> is here']
    """

    def __init__(self, cleaner: StageSetting = True, quality: StageSetting = True, dedup: StageSetting = True,
                 pii: StageSetting = True, num_threads: Optional[int] = None, near_dedup: StageSetting = None):
        super().__init__(cleaner, quality, dedup, pii, num_threads, near_dedup)
        o = lambda s: None if s is None else s._obj  # noqa: E731
        # near dedup sits between exact dedup and PII, in the same C pass: band keys in phase 1
        # (parallel), admission in input order after the exact dedup admission (pipeline.h)
        self._obj = _C.FusedPipeline(o(self._cleaner), o(self._quality), o(self._dedup), o(self._pii), o(self._near))
        # counters: docs_in/out, bytes, drops per stage, and each stage's counters as its batch call
        # counts them; reset_counters() zeroes them and the PII replacement cycle

    @property
    def retained_bytes(self) -> int:
        """Bytes the pipeline keeps between batches (its per-range arenas; bounded after every batch:
        at most 16 MiB per phase, whatever the batch held)."""
        return self._obj.retained_bytes()

    @property
    def pii_cycle(self) -> list:
        """The pipeline's own PII replacement cycle positions (see ``PIIMasker.pii_cycle``);
        assign a saved list to continue it after a resume."""
        return self._obj.get_pii_cycle()

    @pii_cycle.setter
    def pii_cycle(self, value) -> None:
        self._obj.set_pii_cycle(_cycle_arg(value))

    def _stream(self, max_jobs: int = 2) -> "_FusedStream":
        """The batches of one stream run on a thread of their own (see :class:`_FusedStream`)."""
        return _FusedStream(self, max_jobs)


class _FusedStream:
    """A FusedPipeline's batches run one after another on a native thread that never takes the
    GIL (``_C.FusedRunner``): ``submit(texts)`` queues a batch (at most ``max_jobs`` submitted and
    not collected), ``collect()`` returns the oldest one's ``(StageResult, wal_lsn, near_wal_lsn,
    pii_cycle, counters)`` -- the deduplicators' LSNs (``near_wal_lsn`` None without near dedup),
    the PII cycle and the pipeline's counters right after that batch, taken under the batch's locks
    -- or raises what ``pipe(texts)`` would have raised.  After a failed batch no later batch runs.
    ``close()`` drops the batches not run and waits for the one running.

    ResumablePipeline's reading path uses it: the thread that hands the batches over then no
    longer has to win the GIL back (from the reader and the consumer) between two batches before
    the next one can start; the next one is already queued.  Internal."""

    def __init__(self, pipe: "FusedPipeline", max_jobs: int):
        pipe._check_usable()
        self._pipe = pipe
        self._runner = _C.FusedRunner(pipe._obj, max_jobs)
        #: the deduplicators whose LSNs collect() reports (the pipeline's own)
        self.dedup, self.near_dedup = pipe.dedup, pipe.near_dedup

    def submit(self, texts) -> None:
        self._pipe._check_usable()
        st = _as_string_tensor(texts)
        self._runner.submit(st.offsets, st.data, self._pipe.num_threads)

    def collect(self):
        off, data, src, reasons, lsn, near_lsn, cycle, counters = self._runner.collect()
        return StageResult(_texts_from(off, data), reasons, src), lsn, near_lsn, cycle, counters

    def close(self) -> None:
        self._runner.close()


class ChainPipeline(_Pipeline):
    """The modular chain: clean -> quality -> dedup -> PII as four separate batch calls.

    Same arguments (``cleaner``, ``quality``, ``dedup``, ``pii``, ``num_threads``,
    ``near_dedup``: see :class:`FusedPipeline`) and same output as FusedPipeline (slower:
    each stage copies the surviving texts once).  The stage objects are used
    directly, so their own counters advance.

    >>> ChainPipeline(quality=False)(["a", "a", "b"]).source_index.tolist()
    [0, 2]
    """

    def __init__(self, cleaner: StageSetting = True, quality: StageSetting = True, dedup: StageSetting = True,
                 pii: StageSetting = True, num_threads: Optional[int] = None, near_dedup: StageSetting = None):
        super().__init__(cleaner, quality, dedup, pii, num_threads, near_dedup)
        self._stages = [s for s in (self._cleaner, self._quality, self._dedup, self._near, self._pii)
                        if s is not None]

    def _run_raw(self, offsets: torch.Tensor, data: torch.Tensor):
        n = offsets.numel() - 1
        nt = self.num_threads
        reasons = torch.zeros(n, dtype=torch.int32)
        idx = torch.arange(n, dtype=torch.int64)
        off = offsets
        for s in self._stages:
            off, data, src, rea = s._obj.run(off, data, nt)
            reasons[idx] = rea
            idx = idx[src]
        if not self._stages:
            off = offsets.to(torch.int64)
        return off, data, idx, reasons

    @property
    def counters(self) -> dict:
        """Each stage's own counters, by stage."""
        out = {}
        for name, s in (("clean", self._cleaner), ("quality", self._quality), ("dedup", self._dedup),
                        ("near_dedup", self._near), ("pii", self._pii)):
            if s is not None:
                out[name] = s.counters
        return out

    def reset_counters(self) -> None:
        for s in (self._cleaner, self._quality, self._pii):
            if s is not None:
                s.reset_counters()

    @property
    def pii_cycle(self) -> list:
        """The PII masker's replacement cycle positions (zeros without a masker)."""
        return self._pii.pii_cycle if self._pii is not None else [0] * len(PII_TYPES)

    @pii_cycle.setter
    def pii_cycle(self, value) -> None:
        v = _cycle_arg(value)
        if self._pii is not None:
            self._pii.pii_cycle = v
