"""The stages' public API (issue 18 part 5): one protocol for every stage and pipeline, settings as
typed keyword parameters checked in Python, reprs that show the settings.

The expected values are computed independently of the code under test: the defaults against the
core's own ``*_params_default()`` (C structs filled by core/src/*.c), the effect of each setting
against the C object's effective ``params()``, the protocol against an explicit list of what each
member must do.
"""
from __future__ import annotations

import inspect
import math
import pickle
import typing

import pytest
import torch

import luminamoon
from luminamoon import (ChainPipeline, FusedPipeline, NearDeduplicator, PIIMasker, QualityFilter, Stage,
                        StageResult, StreamDeduplicator, StringTensor, TextCleaner, _C)
from luminamoon import stages as S
from luminamoon.data.collate import create_resumable_collate

DOCS = ["Hello  world.\n\n\n\nWrite to ann@example.org today.", "Hello  world.\n\n\n\nWrite to ann@example.org today.",
        "", "the quick brown fox jumps over the lazy dog and runs away into the woods"]
DEDUPS = (StreamDeduplicator, NearDeduplicator)


def _public_stage_classes() -> dict:
    """Every public class of luminamoon / luminamoon.stages that processes a batch of texts."""
    out = {}
    for mod in (luminamoon, S):
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isclass(obj) and obj is not Stage and callable(getattr(obj, "__call__", None)) and \
                    issubclass(obj, (S._Stage, S._Pipeline)):
                out[name] = obj
    return out


def _make(cls):
    return cls(quality=False) if issubclass(cls, S._Pipeline) else cls()


# ------------------------------------------------------------------ protocol

def test_the_public_stages_are_the_known_seven():
    # a new stage must be added here (and so to the protocol checks below)
    assert set(_public_stage_classes()) == {"TextCleaner", "QualityFilter", "PIIMasker", "StreamDeduplicator",
                                            "NearDeduplicator", "FusedPipeline", "ChainPipeline"}
    assert "Stage" in luminamoon.__all__ and luminamoon.Stage is S.Stage


def test_protocol_members():
    assert typing.get_origin(Stage) is None and getattr(Stage, "_is_protocol", False)
    members = {n for n in vars(Stage) if not n.startswith("_")} | {"__call__"}
    assert {"__call__", "counters", "reset_counters"} <= members
    assert "num_threads" in typing.get_type_hints(Stage)


@pytest.mark.parametrize("name", sorted(_public_stage_classes()))
def test_every_stage_and_pipeline_implements_the_protocol(name):
    cls = _public_stage_classes()[name]
    s = _make(cls)
    try:
        assert isinstance(s, Stage)
        # __call__(texts) -> StageResult, for each kind of batch
        for batch in (DOCS, StringTensor.from_list(DOCS)):
            r = s(batch)
            src = r.source_index.tolist()
            assert type(r) is StageResult and r.num_in == len(DOCS) and len(r.texts) == len(src)
            assert src == sorted(set(src)) and r.kept.nonzero().flatten().tolist() == src
        assert inspect.signature(cls.__call__).return_annotation in (StageResult, "StageResult")
        # num_threads: an int >= 1 to read, settable where the class has a setter (None: torch's count)
        assert isinstance(s.num_threads, int) and s.num_threads >= 1
        if getattr(type(s).num_threads, "fset", None) is not None:
            s.num_threads = 2
            assert s.num_threads == 2
            s.num_threads = None
            assert s.num_threads == torch.get_num_threads()
        # counters: a fresh dict each time
        c1, c2 = s.counters, s.counters
        assert isinstance(c1, dict) and c1 == c2 and c1 is not c2
        # reset_counters: zeroes them (the deduplicators' counters are their table: NotImplementedError)
        if isinstance(s, DEDUPS):
            with pytest.raises(NotImplementedError, match="cannot be reset"):
                s.reset_counters()
        else:
            # (ChainPipeline lists its deduplicator's stats too: those are the table, not reset)
            resettable = lambda: {k: v for k, v in s.counters.items() if k not in ("dedup", "near_dedup")}  # noqa
            assert _any_nonzero(resettable())
            s.reset_counters()
            assert not _any_nonzero(resettable()), s.counters
    finally:
        if hasattr(s, "close"):
            s.close()


def _any_nonzero(d) -> bool:
    if isinstance(d, dict):
        return any(_any_nonzero(v) for v in d.values())
    if isinstance(d, (list, tuple)):
        return any(_any_nonzero(v) for v in d)
    return bool(d)


def test_a_non_stage_does_not_satisfy_the_protocol():
    assert not isinstance(object(), Stage)
    assert not isinstance(lambda texts: texts, Stage)  # a bare callable has no counters
    with pytest.raises(TypeError):
        Stage()


# ------------------------------------------------------------------ typed settings

_CORE_DEFAULTS = {TextCleaner: _C.cleaner_params_default(), QualityFilter: _C.quality_params_default()}
_STAGE_CLASSES = (TextCleaner, QualityFilter, PIIMasker, StreamDeduplicator, NearDeduplicator, FusedPipeline,
                  ChainPipeline)


@pytest.mark.parametrize("cls", _STAGE_CLASSES, ids=lambda c: c.__name__)
def test_settings_are_typed_documented_parameters(cls):
    sig = inspect.signature(cls.__init__)
    params = [p for n, p in sig.parameters.items() if n != "self"]
    assert not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params), "no open **params"
    doc = inspect.getdoc(cls)
    for p in params:
        assert p.annotation is not inspect.Parameter.empty, f"{cls.__name__}({p.name}) has no type"
        assert p.default is not inspect.Parameter.empty, f"{cls.__name__}({p.name}) has no default"
        assert p.name in doc, f"{cls.__name__}'s docstring does not document {p.name}"


@pytest.mark.parametrize("cls", [TextCleaner, QualityFilter], ids=lambda c: c.__name__)
def test_signature_defaults_are_the_core_defaults(cls):
    core = dict(_CORE_DEFAULTS[cls])
    sig = {n: p.default for n, p in inspect.signature(cls.__init__).parameters.items()}
    if cls is TextCleaner:
        assert core.pop("normalize") == 0 and sig["normalize"] is None
    else:
        core.pop("enabled")
    for name, value in core.items():
        assert name in sig, f"{cls.__name__} has no parameter for the core's {name}"
        want = sig[name]
        if isinstance(value, tuple):
            assert tuple(want) == pytest.approx(value), name
        else:
            assert want == value and type(bool(want) if isinstance(value, bool) else want) is type(value), name


def _other_value(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 3
    if isinstance(v, float):
        return v / 2 + 0.01
    if isinstance(v, tuple):
        return tuple(x / 2 for x in v)
    raise AssertionError(v)


@pytest.mark.parametrize("cls", [TextCleaner, QualityFilter], ids=lambda c: c.__name__)
def test_each_setting_reaches_the_core(cls):
    core = _CORE_DEFAULTS[cls]
    for name, value in core.items():
        if name in ("normalize", "enabled"):
            continue
        new = _other_value(value)
        got = cls(**{name: new}).params
        assert got[name] == (pytest.approx(new) if isinstance(new, (float, tuple)) else new), name
        assert {k: v for k, v in got.items() if k != name} == {k: v for k, v in core.items() if k != name}, name


def test_pii_settings_reach_the_masker():
    text = ["mail ann@example.org from 10.0.0.1 and 8.8.8.8"]
    strict_all = PIIMasker()(text).texts[0]
    public_only = PIIMasker(ipv4_public_only=True)(text).texts[0]
    assert "10.0.0.1" not in strict_all and "10.0.0.1" in public_only and "8.8.8.8" not in public_only
    assert PIIMasker(types=["ipv4"])(text).texts[0].startswith("mail ann@example.org")
    assert PIIMasker(replacements={"email": "[at]"})(text).texts[0].startswith("mail [at] from")
    assert PIIMasker(max_doc_bytes=10)(text).reason_counts() == {"too_large": 1}


# what a wrong type / value of each kind of setting raises, naming the class and the argument
_BAD = [
    (TextCleaner, "remove_control", "yes", TypeError),
    (TextCleaner, "max_blank_lines", 2.0, TypeError),
    (TextCleaner, "max_blank_lines", True, TypeError),
    (TextCleaner, "max_blank_lines", -2, ValueError),
    (TextCleaner, "max_doc_bytes", 2 ** 64, ValueError),
    (QualityFilter, "gq_min_doc_words", -1, ValueError),
    (QualityFilter, "gq_min_doc_words", 1.5, TypeError),
    (QualityFilter, "fw_char_dup_ratio", "0.1", TypeError),
    (QualityFilter, "fw_char_dup_ratio", math.nan, ValueError),
    (QualityFilter, "gr_top_ngram_frac", (0.1, 0.2), ValueError),
    (QualityFilter, "gr_top_ngram_frac", "abc", TypeError),
    (QualityFilter, "gr_dup_ngram_frac", (0.1,) * 5 + (None,), TypeError),
    (QualityFilter, "c4_modify_text", None, TypeError),
    (QualityFilter, "enabled", 1 << 60, ValueError),
    (PIIMasker, "ipv4_public_only", "no", TypeError),
    (PIIMasker, "cycle_across_documents", 1.0, TypeError),
    (PIIMasker, "replacements", {"email": []}, ValueError),
    (PIIMasker, "replacements", {"email": "a\0b"}, ValueError),
    (PIIMasker, "replacements", {"nope": "x"}, ValueError),
    (PIIMasker, "max_doc_bytes", -5, ValueError),
    (StreamDeduplicator, "initial_capacity", "8", TypeError),
    (StreamDeduplicator, "wal_buffer_hashes", -1, ValueError),
    (StreamDeduplicator, "seed", 2 ** 64, ValueError),
    (StreamDeduplicator, "tag", "cfg", TypeError),
    (NearDeduplicator, "initial_capacity", 1.0, TypeError),
    (NearDeduplicator, "n_grams", 0, ValueError),
    (NearDeduplicator, "seed", -1, ValueError),
    (NearDeduplicator, "max_entries", None, TypeError),
]


@pytest.mark.parametrize("cls,name,value,exc", _BAD, ids=lambda v: str(v)[:20])
def test_bad_setting_raises_naming_the_argument(cls, name, value, exc):
    with pytest.raises(exc, match=f"{cls.__name__}: .*{name}|{name}.*{cls.__name__}|{cls.__name__}: {name}") as ei:
        cls(**{name: value})
    assert name in str(ei.value)


@pytest.mark.parametrize("cls", _STAGE_CLASSES, ids=lambda c: c.__name__)
def test_unknown_keyword_raises_type_error_naming_it(cls):
    with pytest.raises(TypeError, match="no_such_setting"):
        cls(no_such_setting=1)


def test_pipeline_stage_dicts_take_the_same_keywords():
    with pytest.raises(TypeError, match="max_blank_line"):
        FusedPipeline(cleaner={"max_blank_line": 1})
    p = FusedPipeline(cleaner={"max_blank_lines": 0}, quality=False, dedup=False, pii=False)
    assert p.cleaner.params["max_blank_lines"] == 0
    assert p(["a\n\nb"]).texts.tolist() == ["a\nb"]


# ------------------------------------------------------------------ repr

@pytest.mark.parametrize("stage", [
    TextCleaner(), TextCleaner("NFKC", max_blank_lines=0, drop_empty=False, num_threads=2),
    QualityFilter(), QualityFilter(rules=["c4", "fineweb.list_ratio"], gq_min_doc_words=10,
                                   gr_top_ngram_frac=(0.3, 0.2, 0.1)),
    QualityFilter(enabled=3),
    PIIMasker(), PIIMasker("datatrove", types=["email"], replacements={"email": ["<E1>", "<E2>"]}),
], ids=repr)
def test_stage_repr_shows_the_settings_and_rebuilds_the_stage(stage):
    text = repr(stage)
    assert text.startswith(type(stage).__name__ + "(")
    again = eval(text, vars(luminamoon))  # the repr is the constructor call
    assert getattr(again, "params", None) == getattr(stage, "params", None) and repr(again) == text
    probe = ["Hello  world.\n\n\n\nann@example.org", "x"]
    r1, r2 = stage(probe), again(probe)
    assert r1.texts.tolist() == r2.texts.tolist() and r1.reasons.tolist() == r2.reasons.tolist()


def test_repr_leaves_out_defaults_given_explicitly():
    assert repr(TextCleaner(max_blank_lines=2, fold_spaces=True)) == "TextCleaner()"
    assert repr(QualityFilter(gq_min_doc_words=50, gr_top_ngram_frac=[0.2, 0.18, 0.16])) == "QualityFilter()"
    assert repr(PIIMasker(mode="strict")) == "PIIMasker()"
    # ... so two ways of asking for the same settings are recorded alike (pickle, resumable run records)
    assert pickle.loads(pickle.dumps(TextCleaner(max_blank_lines=2))).params == TextCleaner().params


def test_pipeline_repr_shows_each_stage():
    with FusedPipeline(quality=QualityFilter(rules="c4"), pii=False, num_threads=1) as p:
        assert repr(p) == ("FusedPipeline(cleaner=TextCleaner(), quality=QualityFilter(rules=['c4']), "
                           "dedup=StreamDeduplicator(wal_path=None, seed=0, lsn=0), near_dedup=False, pii=False, "
                           "num_threads=1)")
    assert repr(ChainPipeline(False, False, False, False)) == (
        "ChainPipeline(cleaner=False, quality=False, dedup=False, near_dedup=False, pii=False)")
    assert "StreamDeduplicator(wal_path=None, seed=0" in repr(FusedPipeline())
    with StreamDeduplicator(max_entries=5) as d, NearDeduplicator(max_entries=7, n_grams=3) as nd:
        assert repr(d) == "StreamDeduplicator(wal_path=None, seed=0, max_entries=5, lsn=0)"
        assert repr(nd) == ("NearDeduplicator(wal_path=None, seed=1, n_grams=3, num_buckets=14, hashes_per_bucket=8, "
                            "precision=64, max_entries=7, lsn=0)")


def test_collate_repr_shows_the_settings():
    assert repr(create_resumable_collate()) == "ResumableCollate()"
    c = create_resumable_collate("body", pipeline="chain", dedup=None, max_length=8, eos_id=2,
                                 stages={"quality": False}, tokenizer=lambda texts: [[1] for _ in texts])
    text = repr(c)
    assert text.startswith("ResumableCollate(text_key='body', pipeline='chain', dedup=None, "
                           "stages={'quality': False}, tokenizer=<")
    assert text.endswith(">, max_length=8, eos_id=2)") and "lambda" in text
