"""Review of the parallel ordered gather of FusedPipeline (phase 3, c306840) and the finer tail
ranges of lm_batch_plan_make: with 2..4 threads the output texts and source_index must be byte
for byte those of 1 thread (whose gather is a single range), with PII on / off, dedup on / off,
quality on / off, on empty batches, a batch of one huge document, every document dropped, many
tiny documents, random documents and slices of the shared corpus; and equal to ChainPipeline
(the modular chain: an independent code path for the output order).  The same pipeline objects
are reused across all the batches (the gather writes after earlier batches' state)."""
import random
import sys
import os

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import corpus_texts  # noqa: E402

from luminamoon.stages import ChainPipeline, FusedPipeline  # noqa: E402

_WORDS = ["alpha", "beta", "gamma", "the", "and", "of", "is", "mail", "x@y.org", "call 555-123-4567",
          "10.0.0.1", "é", "日本語", "a.b@c.de", "\n", "\n\n"]


def _doc(rng):
    n = rng.choice([0, 1, 3, 20, 200, 2000, 20000])
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _batches(corpus):
    rng = random.Random(7)
    yield []
    yield [""]
    yield ["", "", ""]
    yield ["a" * 3_000_000]                                  # one huge document (dropped by quality)
    yield ["word " * 300_000 + "x@y.org and 555-123-4567"]  # one huge document with PII at its end
    yield ["x"] * 5000                                       # many tiny duplicates
    yield [_doc(rng) for _ in range(500)]
    yield ["the and of is"] * 200                            # every document a duplicate of the first
    for _ in range(4):
        s = rng.randrange(0, len(corpus) - 3000)
        yield corpus[s:s + rng.choice([10, 300, 3000])]
    b = [_doc(rng) for _ in range(300)]
    yield b + b[::-1]                                        # second half: every one a duplicate
    yield [""] * 100                                         # every document dropped (empty)


def _run(cls, threads, corpus, **kw):
    p = cls(num_threads=threads, **kw)
    out = []
    try:
        for b in _batches(corpus):
            r = p(b)
            out.append((r.texts.tolist(), r.source_index.tolist()))
    finally:
        p.close()
    return out


@pytest.fixture(scope="module")
def corpus():
    return corpus_texts()


@pytest.mark.parametrize("pii", [True, False])
@pytest.mark.parametrize("dedup", [True, False])
@pytest.mark.parametrize("quality", [True, False])
def test_gather_output_is_thread_count_invariant(corpus, pii, dedup, quality):
    kw = dict(pii=pii, dedup=dedup, quality=quality)
    ref = _run(FusedPipeline, 1, corpus, **kw)
    n_out = sum(len(t) for t, _ in ref)
    assert n_out > 0
    for threads in (2, 4):
        got = _run(FusedPipeline, threads, corpus, **kw)
        for i, (a, b) in enumerate(zip(ref, got)):
            assert a[1] == b[1], f"batch {i}: source_index differs on {threads} threads"
            assert a[0] == b[0], f"batch {i}: texts differ on {threads} threads"
        assert len(got) == len(ref)
    if not quality:  # the chain (its own per-stage copies) gives the same output
        assert _run(ChainPipeline, 2, corpus, **kw) == ref


@pytest.mark.parametrize("kw", [dict(pii="datatrove", quality=False), dict(near_dedup=True, quality=False),
                                dict(near_dedup=True, pii="datatrove", quality=False, dedup=False)],
                         ids=["pii-datatrove-cycling", "near-dedup", "near-dedup-pii-no-exact-dedup"])
def test_gather_with_pii_cycling_and_near_dedup_is_thread_count_invariant(corpus, kw):
    from luminamoon.stages import PIIMasker

    kw = dict(kw)
    if kw.get("pii") == "datatrove":  # replacements cycled across documents (the pipeline's own cycle)
        kw["pii"] = PIIMasker("datatrove")
    ref = _run(FusedPipeline, 1, corpus, **kw)
    assert sum(len(t) for t, _ in ref) > 1000
    for threads in (2, 4):
        assert _run(FusedPipeline, threads, corpus, **kw) == ref, threads
