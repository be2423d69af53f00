"""The text stages on the shared corpus (../shared/corpus/debian-dev.jsonl.gz).

* agreement with HuggingFace datatrove, per rule set (Gopher quality, Gopher
  repetition, C4, FineWeb) and for its PIIFormatter (e-mail + IPv4, our
  "datatrove" mode): >= 99% of per-document decisions each.  datatrove is slow
  (seconds per hundred documents), so by default a deterministic random sample
  is used (LM_AGREEMENT_SAMPLE docs, default 1000 for the filters and 3000 for
  PII); LM_FULL_AGREEMENT=1 runs the whole corpus.  The figures are printed
  (pytest -s).
* exact dedup == a Python set over the same cleaned texts, on the whole
  corpus, and the same state after close + reopen of the WAL;
* FusedPipeline == ChainPipeline on the whole corpus.

Skips with a message when the corpus (or datatrove) is absent.
"""
import collections
import os
import random

import pytest
import torch

from conftest import corpus_texts

import luminamoon as lm
from luminamoon import ChainPipeline, FusedPipeline, PIIMasker, QualityFilter, StreamDeduplicator, TextCleaner

FULL = os.environ.get("LM_FULL_AGREEMENT") == "1"
RULE_SETS = ["gopher_quality", "gopher_repetition", "c4", "fineweb"]


@pytest.fixture(scope="module")
def texts():
    return corpus_texts()


def _sample(texts, n):
    if FULL or n >= len(texts):
        return list(range(len(texts)))
    return sorted(random.Random(1234).sample(range(len(texts)), n))


@pytest.fixture(scope="module")
def reference():
    ref = pytest.importorskip("reference_datatrove")
    if not ref.available():
        pytest.skip("datatrove / spaCy not installed: pip install datatrove spacy")
    return ref


@pytest.fixture(scope="module")
def quality_sample(texts, reference):
    idx = _sample(texts, int(os.environ.get("LM_AGREEMENT_SAMPLE", "1000")))
    sample = [texts[i] for i in idx]
    return sample, reference.run_all(sample)


@pytest.mark.parametrize("rule_set", RULE_SETS)
def test_quality_agreement_with_datatrove(quality_sample, rule_set):
    sample, dt = quality_sample
    r = QualityFilter(rules=[rule_set])(sample)
    ours = r.kept.tolist()
    theirs = [d.keep for d in dt[rule_set]]
    n = len(sample)
    agree = sum(a == b for a, b in zip(ours, theirs))
    dis = collections.Counter((lm.reason_name(r.reasons[i]), dt[rule_set][i].reason)
                              for i in range(n) if ours[i] != theirs[i])
    print(f"\n[agreement] {rule_set}: {agree}/{n} = {agree / n:.4%} (datatrove drops {theirs.count(False)}, "
          f"we drop {ours.count(False)}); disagreements (ours, datatrove): {dis.most_common(5)}")
    # the rule set must actually decide something on this corpus, both ways
    assert 0 < theirs.count(False) < n
    assert agree / n >= 0.99
    if rule_set == "c4":
        # C4 rewrites the documents it keeps: the kept texts agree too
        out = dict(zip(r.source_index.tolist(), r.texts.tolist()))
        both = [i for i in range(n) if ours[i] and theirs[i]]
        same = sum(out[i] == dt["c4"][i].text for i in both)
        print(f"[agreement] c4 kept text identical: {same}/{len(both)}")
        assert same >= 0.99 * len(both)


def test_pii_agreement_with_datatrove(texts, reference):
    from datatrove.pipeline.formatters import PIIFormatter

    idx = _sample(texts, int(os.environ.get("LM_AGREEMENT_SAMPLE_PII", "3000")))
    sample = [texts[i] for i in idx]
    # as datatrove runs it: one formatter over the stream, replacements used in turn across documents
    fmt = PIIFormatter()
    expected = [fmt.format(t) for t in sample]
    got = PIIMasker("datatrove")(sample).texts.tolist()
    n = len(sample)
    agree = sum(a == b for a, b in zip(expected, got))
    # detection alone: a fresh formatter per document vs no cycling across documents
    exp1 = [PIIFormatter().format(t) for t in sample]
    got1 = PIIMasker("datatrove", cycle_across_documents=False)(sample).texts.tolist()
    agree1 = sum(a == b for a, b in zip(exp1, got1))
    touched = [i for i in range(n) if exp1[i] != sample[i] or got1[i] != sample[i]]
    agree_touched = sum(exp1[i] == got1[i] for i in touched)
    print(f"\n[agreement] pii (stream, cycling): {agree}/{n} = {agree / n:.4%}; per document: {agree1}/{n} = "
          f"{agree1 / n:.4%}; among the {len(touched)} documents with PII: {agree_touched}/{len(touched)}")
    assert len(touched) > 0
    assert agree / n >= 0.99
    assert agree1 / n >= 0.99


def test_dedup_exact_equals_python_set(texts, tmp_path):
    cleaner = TextCleaner()
    wal = tmp_path / "dedup.wal"
    bs = 8192
    cleaned, kept = [], []
    with StreamDeduplicator(wal_path=wal, seed=3) as d:
        for b in range(0, len(texts), bs):
            c = cleaner(texts[b:b + bs])
            ct = c.texts.tolist()
            r = d(c.texts)
            cleaned += ct
            kept += r.kept.tolist()
            if b == 4 * bs:
                d.snapshot()  # recovery then = snapshot + replay of the rest
        lsn = d.lsn
        assert d.sync() == lsn
    # the reference: first occurrence of each cleaned text, by a Python set
    seen, ref = set(), []
    for t in cleaned:
        ref.append(t not in seen)
        seen.add(t)
    assert kept == ref
    assert lsn == len(seen)
    assert 0 < len(seen) < len(cleaned)  # the corpus has duplicates (package families)
    print(f"\n[dedup] {len(cleaned)} cleaned docs, {len(seen)} distinct, {len(cleaned) - len(seen)} duplicates")
    # restart: same length, LSN and membership
    with StreamDeduplicator(wal_path=wal, seed=3) as d2:
        assert d2.lsn == lsn and len(d2) == len(seen)
        assert d2.stats["snapshot_loaded"]
        assert all(t in d2 for t in random.Random(0).sample(sorted(seen), 2000))
        assert "a text that is nowhere in the corpus 1f3a9" not in d2
        # everything again: all duplicates, nothing admitted
        again = d2(lm.StringTensor.from_list(cleaned[:20000]))
        assert not bool(again.kept.any()) and d2.lsn == lsn


@pytest.mark.parametrize("mode", ["strict", "datatrove"])
def test_fused_equals_chain_on_corpus(texts, mode):
    bs = 4096
    fused = FusedPipeline(pii=PIIMasker(mode), num_threads=2)
    chain = ChainPipeline(pii=PIIMasker(mode), num_threads=2)
    n_out = 0
    for b in range(0, len(texts), bs):
        st = lm.StringTensor.from_list(texts[b:b + bs])
        f = fused(st)
        c = chain(st)
        assert torch.equal(f.reasons, c.reasons), b
        assert torch.equal(f.source_index, c.source_index), b
        assert f.texts.equals(c.texts), b
        n_out += len(f)
    assert fused.dedup.lsn == chain.dedup.lsn
    fc = fused.counters
    assert fc["docs_in"] == len(texts) and fc["docs_out"] == n_out
    assert fc["pii"]["matches"] == chain.counters["pii"]["matches"]
    assert fc["quality"]["rules"] == chain.counters["quality"]["rules"]
    print(f"\n[fused==chain] {mode}: {len(texts)} docs in, {n_out} out, dedup lsn {fused.dedup.lsn}")
