"""Near-dup band keys are computed on the cleaned, unmasked text, before PII masking: the
order of ``FusedPipeline(near_dedup=...)`` (clean -> quality -> exact dedup -> near dedup ->
PII).  ``luminamoon run --near-dup stream`` computed them after masking (ResumablePipeline ran
the near stage on the run's stage outputs), so documents that differ only in their e-mail
addresses became near duplicates of each other once the addresses were all ``<EMAIL>``.
The reference is FusedPipeline(near_dedup=NearDeduplicator(the run's settings)) over the
same texts in the same order."""
import glob
import json
import os
import random

import pytest
import torch  # noqa: F401

from luminamoon import stages as S
from luminamoon import StringTensor
from luminamoon.cli import main
from luminamoon.cli.config import default_config, stage_kwargs
from luminamoon.cli.runner import _near_stream_kwargs

WORDS = ("the river runs past an old mill where farmers once brought grain from the hills and sold "
         "flour in the market each week before the long road to the city was built across the valley").split()


def _docs(n_prose=12, copies=3, seed=0):
    """Documents made of a prose passage with an e-mail address after every word: copies of
    one passage differ only in their addresses (each 5-word shingle holds one)."""
    rng = random.Random(seed)
    docs = []
    for p in range(n_prose):
        words = WORDS[:]
        rng.shuffle(words)
        for c in range(copies):
            parts = []
            for k, w in enumerate(words):
                parts += [w, f"{rng.choice(['ann', 'bob', 'cy'])}.{p}x{c}x{k}@mail{c}.example.org"]
            docs.append({"id": f"d{p}-{c}", "text": " ".join(parts) + "."})
    rng.shuffle(docs)
    docs += [{"id": "plain-a", "text": " ".join(WORDS) + "."}, {"id": "plain-b", "text": " ".join(WORDS) + "!"}]
    return docs


def _reference(docs, cfg):
    """FusedPipeline over the texts in one batch: the stages of the run's configuration, exact
    dedup, near dedup with the run's settings (before PII)."""
    with S.NearDeduplicator(**_near_stream_kwargs(cfg["near_dup"])) as near:
        pipe = S.FusedPipeline(dedup=True, near_dedup=near, **stage_kwargs(cfg))
        r = pipe(StringTensor.from_list([d["text"] for d in docs]))
        reasons = r.reasons.tolist()
        kept = {docs[i]["id"]: t for i, t in zip(r.source_index.tolist(), r.texts.tolist())}
    return kept, reasons


def _after_pii_near(docs, cfg):
    """How many near duplicates the keys of the masked outputs give (the old order)."""
    pipe = S.FusedPipeline(dedup=True, **stage_kwargs(cfg))
    r = pipe(StringTensor.from_list([d["text"] for d in docs]))
    with S.NearDeduplicator(**_near_stream_kwargs(cfg["near_dup"])) as near:
        return int((near(r.texts).reasons != 0).sum())


def _run_out(out):
    kept = {}
    for p in sorted(glob.glob(os.path.join(out, "part-*.jsonl"))):
        with open(p, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                kept[r["id"]] = r["text"]
    with open(os.path.join(out, "stats.json")) as f:
        return kept, json.load(f)


@pytest.mark.parametrize("batch_size", [4096, 7])
def test_run_near_dup_stream_decides_before_pii_like_fused(tmp_path, batch_size):
    docs = _docs()
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    cfg = default_config()
    cfg["quality"]["enabled"] = False  # the passages are word salad: keep the quality filter out of it
    cfg["near_dup"]["mode"] = "stream"
    ref_kept, ref_reasons = _reference(docs, cfg)
    near_code = S.REASON_NEAR_DUPLICATE
    # the documents are what the test is about: keys taken after masking drop more of them
    assert sum(c == near_code for c in ref_reasons) + 10 <= _after_pii_near(docs, cfg)
    out = str(tmp_path / "o")
    assert main(["run", str(path), "-o", out, "--format", "jsonl", "--near-dup", "stream", "--no-quality",
                 "--batch-size", str(batch_size), "-q", "--no-report"]) == 0
    kept, stats = _run_out(out)
    assert stats["dropped_by_reason"].get("near_duplicate", 0) == sum(c == near_code for c in ref_reasons)
    assert kept == ref_kept
    assert all("<EMAIL>" in t for i, t in kept.items() if i.startswith("d"))
