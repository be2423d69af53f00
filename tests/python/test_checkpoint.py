"""data/checkpoint.py: the run record a resume compares against."""
import inspect

import pytest

import luminamoon as lm
from luminamoon.data.checkpoint import describe_setting, run_differences

STAGES = [lm.TextCleaner, lm.QualityFilter, lm.PIIMasker, lm.StreamDeduplicator, lm.NearDeduplicator]


def _explicit_defaults(cls):
    """The record a checkpoint written before stages recorded only non-default settings holds for cls():
    every setting named with its default value."""
    return {"type": cls.__name__, **{n: describe_setting(p.default) for n, p in inspect.signature(cls).parameters.items()
                                     if p.default is not p.empty}}


@pytest.mark.parametrize("cls", STAGES, ids=lambda c: c.__name__)
def test_a_record_naming_the_defaults_equals_one_leaving_them_out(cls):
    now = {"pipeline": {"stage": describe_setting(cls())}}
    old = {"pipeline": {"stage": _explicit_defaults(cls)}}
    assert old != now  # the two records really are written differently
    assert run_differences(old, now) == []
    assert run_differences(now, old) == []


def test_a_changed_setting_is_still_reported_by_its_recorded_values():
    old = {"quality": describe_setting(lm.QualityFilter())}
    new = {"quality": describe_setting(lm.QualityFilter(rules=["c4"]))}
    diff = run_differences(old, new)
    assert len(diff) == 1 and diff[0].startswith("quality: committed ") and '"c4"' in diff[0]
    pii = run_differences({"p": describe_setting(lm.PIIMasker())}, {"p": describe_setting(lm.PIIMasker(mode="datatrove"))})
    assert len(pii) == 1 and "datatrove" in pii[0]
    changed = _explicit_defaults(lm.TextCleaner)
    changed["max_blank_lines"] = changed["max_blank_lines"] + 1
    assert len(run_differences({"c": changed}, {"c": describe_setting(lm.TextCleaner())})) == 1
