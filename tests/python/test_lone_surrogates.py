"""A JSONL record whose text holds a lone surrogate (``"\\ud800"``: a \\u escape that is not half of a
pair, how some tools write a byte that is not UTF-8) reached the stages, which refused the whole
batch with "strings[1] cannot be encoded as UTF-8": no file, no line, and ``on_error="skip"`` did not
skip it (review s35, readers).  In a pipeline it is now a bad record of its source on every reading
path (the columnar block path, record by record, DistributedPipeline's stream); iterating the source
itself still yields it as Python holds it; ``luminamoon run`` still replaces each by U+FFFD and counts
the documents."""
import json

import pytest

from luminamoon.data import BadRecordError, DistributedPipeline, JsonlSource, ResumablePipeline

LINES = ['{"text": "good one here"}', '{"text": "bad \\ud800 here"}', '{"text": "pair \\ud83d\\ude00 ok"}',
         '{"text": "third"}']


class _RecordByRecord(JsonlSource):
    def _records(self):  # not the columnar path (JsonlSource._columnar is False for an override)
        return super()._records()


@pytest.fixture
def path(tmp_path):
    p = tmp_path / "s.jsonl"
    p.write_text("\n".join(LINES) + "\n")
    return str(p)


@pytest.mark.parametrize("cls", [JsonlSource, _RecordByRecord], ids=["columnar", "records"])
def test_resumable_pipeline_names_the_line_and_skips_it(path, cls):
    want = [json.loads(line)["text"] for i, line in enumerate(LINES) if i != 1]
    with pytest.raises(BadRecordError, match=r"s\.jsonl:2: .*lone surrogate \(U\+D800"):
        with ResumablePipeline(cls(path), batch_size=2, stages={"quality": False}) as p:
            list(p)
    src = cls(path, on_error="skip")
    with ResumablePipeline(src, batch_size=2, stages={"quality": False}) as p:
        got = [t for b in p for t in b.texts.tolist()]
    assert got == want and src.skipped == 1  # the valid surrogate pair is text (an emoji)


def test_distributed_pipeline_likewise(path, tmp_path):
    with pytest.raises(BadRecordError, match=r"s\.jsonl:2: .*lone surrogate"):
        with DistributedPipeline(JsonlSource(path), batch_size=2, state_dir=str(tmp_path / "d1"),
                                 stages={"quality": False}) as p:
            list(p)
    with DistributedPipeline(JsonlSource(path, on_error="skip"), batch_size=2, state_dir=str(tmp_path / "d2"),
                             stages={"quality": False}) as p:
        got = [t for b in p for t in b.texts.tolist()]
    assert got == [json.loads(line)["text"] for i, line in enumerate(LINES) if i != 1]


def test_the_command_still_repairs_and_counts(path, tmp_path):
    from luminamoon.cli import main

    out = tmp_path / "out"
    assert main(["run", path, "-o", str(out), "-q", "--no-quality", "--no-pii", "--no-dedup", "--no-report",
                 "--format", "jsonl"]) == 0
    texts = [json.loads(line)["text"] for line in open(next(out.glob("part-*.jsonl")))]
    assert texts[1] == "bad \ufffd here" and len(texts) == 4
    assert json.load(open(out / "stats.json"))["input_repairs"]["docs_with_lone_surrogates"] == 1


def test_iterating_the_source_still_yields_it(path):
    """Outside a pipeline the text comes as Python holds it (the caller may repair it)."""
    assert [r["text"] for r in JsonlSource(path)] == [json.loads(line)["text"] for line in LINES]
