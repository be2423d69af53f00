"""NearDeduplicator (issue 12 part 4): the streaming near-duplicate stage.

The reference for the decisions is computed independently here: datatrove 0.10.1's own
MinhashDedupSignature computes the signatures, the band keys are XXH3-128 (the ``xxhash``
package) of each band's little-endian values with the band index as seed and the band index in
the key's top byte (near_dedup.h), and the decision rule -- "a document is a near duplicate when
any of its band keys was seen before; the keys of every document are inserted" -- is a Python set.
"""
import random

import pytest
import torch
import xxhash

import luminamoon
from luminamoon.data import IterableSource, ResumablePipeline
from luminamoon.stages import (REASON_DUPLICATE, REASON_NEAR_DUPLICATE, ChainPipeline, DedupFullError,
                               FusedPipeline, NearDeduplicator, StringTensor, near_dedup_wal_config,
                               reason_name)

from conftest import corpus_texts

M64 = 2**64 - 1


def datatrove_signatures(texts, tmp_path, n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=1, precision=64):
    from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature
    from datatrove.utils.hashing import HashConfig

    cfg = MinhashConfig(n_grams=n_grams, num_buckets=num_buckets, hashes_per_bucket=hashes_per_bucket, seed=seed,
                        hash_config=HashConfig(precision=precision))
    sig = MinhashDedupSignature(output_folder=str(tmp_path / "dt-sigs"), config=cfg)
    out = []
    for t in texts:
        sh = sig.get_shingles(t)
        out.append(sig.get_signature(sh) if sh.size else None)
    return out


def band_key(values, b, precision=64):
    width = 8 if precision == 64 else 4
    raw = b"".join(int(v).to_bytes(width, "little") for v in values)
    h = xxhash.xxh3_128_intdigest(raw, seed=b)
    lo, hi = h & M64, h >> 64
    lo = (lo & ((1 << 56) - 1)) | (b << 56)
    return lo, hi


def reference_decisions(sigs, precision=64, seen=None):
    """True where a document is a near duplicate: some band key seen before (keys of all inserted)."""
    seen = set() if seen is None else seen
    out = []
    for s in sigs:
        if s is None:
            out.append(False)
            continue
        keys = [band_key(band, b, precision) for b, band in enumerate(s)]
        out.append(any(k in seen for k in keys))
        seen.update(keys)
    return out


def near_variants(texts, rng, n):
    """n near duplicates of random texts: one word changed, a line appended, case and spaces changed."""
    out = []
    for _ in range(n):
        words = texts[rng.randrange(len(texts))].split(" ")
        kind = rng.randrange(3)
        if kind == 0:
            words[rng.randrange(len(words))] = "altered"
            out.append(" ".join(words))
        elif kind == 1:
            out.append(" ".join(words) + "\nMirrored from the original site.")
        else:
            out.append("  ".join(words).upper())
    return out


@pytest.fixture(scope="module")
def sample():
    rng = random.Random(5)
    texts = corpus_texts(1500)
    texts = texts + near_variants(texts, rng, 400) + ["", "word", "two words", "\u00e9t\u00e9 ok"]
    rng.shuffle(texts)
    return texts


def test_decisions_match_datatrove_signatures_and_set_reference(sample, tmp_path):
    sigs = datatrove_signatures(sample, tmp_path)
    want = reference_decisions(sigs)
    with NearDeduplicator() as nd:
        got = []
        for i in range(0, len(sample), 333):  # across batches and inside them
            r = nd(sample[i:i + 333])
            got += (r.reasons == REASON_NEAR_DUPLICATE).tolist()
            assert set(r.reasons.tolist()) <= {0, REASON_NEAR_DUPLICATE}
            assert r.texts.tolist() == [t for t, d in zip(sample[i:i + 333], got[i:]) if not d]
        assert nd.lsn == len({band_key(band, b) for s in sigs if s is not None for b, band in enumerate(s)})
    assert got == want
    assert 200 < sum(got) < len(sample) - 500  # the corpus holds many near duplicates, and the variants


def test_precision_32_and_other_shape(sample, tmp_path):
    texts = sample[:400]
    sigs = datatrove_signatures(texts, tmp_path, n_grams=3, num_buckets=9, hashes_per_bucket=5, seed=7, precision=32)
    want = reference_decisions(sigs, precision=32)
    with NearDeduplicator(n_grams=3, num_buckets=9, hashes_per_bucket=5, seed=7, precision=32) as nd:
        got = (nd(texts).reasons == REASON_NEAR_DUPLICATE).tolist()
        assert nd.config == {"seed": 7, "n_grams": 3, "num_buckets": 9, "hashes_per_bucket": 5, "precision": 32}
    assert got == want


def test_signature_keys_equal_stage_keys(sample):
    texts = sample[:300]
    with NearDeduplicator() as nd:
        k1, h1 = nd.keys(texts)
        sig = luminamoon.MinHash().signatures(texts)
        k2, h2 = nd.signature_keys(sig)
        assert torch.equal(h1, h2) and torch.equal(k1, k2)
        assert nd.lsn == 0  # keys() admits nothing
        dup = nd.check_keys(k1, h1)
    with NearDeduplicator() as nd2:
        assert torch.equal(dup, nd2(texts).reasons == REASON_NEAR_DUPLICATE)


def test_first_occurrence_kept_and_transitive_chain():
    """a~b (a shared band key), b~c, but a and c share no band: the stream drops b and c (b's keys
    were inserted although b was dropped), as datatrove's union-find keeps only a of {a, b, c}."""
    rng = random.Random(3)
    vocab = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(7)) for _ in range(5000)]
    keyset = lambda t: {tuple(k) for k in NearDeduplicator().keys([t])[0].tolist()}  # noqa: E731
    found = None
    for _ in range(400):
        a = [rng.choice(vocab) for _ in range(60)]
        b = list(a)
        for i in rng.sample(range(60), 2):
            b[i] = rng.choice(vocab)
        c = list(b)
        for i in rng.sample(range(60), 2):
            c[i] = rng.choice(vocab)
        ta, tb, tc = " ".join(a), " ".join(b), " ".join(c)
        ka, kb, kc = keyset(ta), keyset(tb), keyset(tc)
        if ka & kb and kb & kc and not ka & kc:
            found = ta, tb, tc
            break
    assert found is not None
    with NearDeduplicator() as nd:
        assert [reason_name(x) for x in nd(list(found)).reasons.tolist()] == ["kept", "near_duplicate",
                                                                              "near_duplicate"]
    with NearDeduplicator() as nd:
        assert nd([found[0], found[2]]).reasons.tolist() == [0, 0]
    with NearDeduplicator() as nd:  # the first occurrence is kept, whichever it is
        assert nd([found[2], found[1]]).reasons.tolist() == [0, REASON_NEAR_DUPLICATE]


def test_wal_resume_truncate_and_snapshot(sample, tmp_path):
    wal = tmp_path / "nd.wal"
    texts = sample[:600]
    with NearDeduplicator() as ref:
        want = (ref(texts).reasons == REASON_NEAR_DUPLICATE).tolist()
    nd = NearDeduplicator(wal_path=wal)
    got = (nd(texts[:300]).reasons == REASON_NEAR_DUPLICATE).tolist()
    lsn = nd.sync()
    nd.snapshot()
    nd(texts[300:450])  # admitted after the commit point, then forgotten
    nd.close()
    assert near_dedup_wal_config(wal) == {"seed": 1, "n_grams": 5, "num_buckets": 14, "hashes_per_bucket": 8,
                                          "precision": 64}
    nd = NearDeduplicator(wal_path=wal)
    assert nd.stats["snapshot_loaded"] or nd.stats["replayed_hashes"]
    nd.truncate(lsn)
    assert nd.lsn == lsn
    got += (nd(texts[300:]).reasons == REASON_NEAR_DUPLICATE).tolist()
    nd.close()
    assert got == want
    with pytest.raises(ValueError, match="closed"):
        nd(["x"])
    assert "closed" in repr(nd)


@pytest.mark.parametrize("change,name", [({"seed": 2}, "seed=1"), ({"num_buckets": 20}, "num_buckets"),
                                         ({"hashes_per_bucket": 4}, "hashes_per_bucket"),
                                         ({"precision": 32}, "precision"), ({"n_grams": 3}, "n_grams")])
def test_wal_of_another_configuration_is_refused_naming_the_setting(tmp_path, change, name):
    wal = tmp_path / "nd.wal"
    with NearDeduplicator(wal_path=wal) as nd:
        nd(["the quick brown fox jumps over the lazy dog again"])
    size = wal.stat().st_size
    with pytest.raises(ValueError, match=name) as ei:
        NearDeduplicator(wal_path=wal, **change)
    assert "another MinHash configuration" in str(ei.value)
    assert wal.stat().st_size == size
    with NearDeduplicator(wal_path=wal) as nd:  # still opens with its own settings
        assert nd.lsn == 14


def test_stream_dedup_wal_is_not_a_band_index(tmp_path):
    wal = tmp_path / "x.wal"
    with luminamoon.StreamDeduplicator(wal_path=wal) as d:
        d(["a"])
    with pytest.raises(ValueError, match="not a near-dedup band index"):
        NearDeduplicator(wal_path=wal)
    assert near_dedup_wal_config(wal) is None


def test_max_entries_all_or_nothing(sample):
    texts = [t for t in sample if len(t.split()) > 20][:10]
    with NearDeduplicator(max_entries=14 * 5) as nd:
        nd(texts[:4])
        lsn = nd.lsn
        with pytest.raises(DedupFullError, match="max_entries=70"):
            nd(texts[4:])
        assert nd.lsn == lsn  # nothing of the failed batch admitted
        assert isinstance(DedupFullError("x"), ValueError)


def test_bad_arguments(tmp_path):
    with pytest.raises(TypeError, match="wal_path"):
        NearDeduplicator(wal_path=3)
    with pytest.raises(ValueError, match="precision"):
        NearDeduplicator(precision=16)
    with pytest.raises(ValueError, match="num_buckets"):
        NearDeduplicator(num_buckets=0)
    with pytest.raises(ValueError, match="num_buckets"):
        NearDeduplicator(num_buckets=256)
    with pytest.raises(ValueError, match="seed"):
        NearDeduplicator(seed=2**32)
    with pytest.raises(TypeError, match="n_grams"):
        NearDeduplicator(n_grams="5")
    with pytest.raises(TypeError):
        NearDeduplicator(bands=3)
    nd = NearDeduplicator()
    with pytest.raises(TypeError, match="pickled"):
        import pickle

        pickle.dumps(nd)
    with pytest.raises(TypeError):
        nd("one text")
    with pytest.raises(TypeError, match="int64"):
        nd.check_keys(torch.zeros(14, 2, dtype=torch.int32), torch.ones(1, dtype=torch.bool))
    with pytest.raises(ValueError, match="expected N"):
        nd.check_keys(torch.zeros(13, 2, dtype=torch.int64), torch.ones(1, dtype=torch.bool))
    with pytest.raises(TypeError, match="signatures"):
        nd.signature_keys(torch.zeros(2, 5, dtype=torch.int64))
    nd(["a b c d e f"])
    with pytest.raises(ValueError, match="in memory"):
        nd.truncate(0)
    nd.close()
    wal = tmp_path / "w.wal"
    a = NearDeduplicator(wal_path=wal)
    with pytest.raises(ValueError, match="in use|lock"):
        NearDeduplicator(wal_path=wal)
    a.close()


def test_empty_short_invalid_utf8_and_huge_documents():
    texts = ["", "word", "a b c d", "   \n\t  ", "one two three four five six seven"]
    with NearDeduplicator() as nd:
        r = nd(texts + texts)
        # documents with fewer than 5 words have no signature: kept, never duplicates
        assert r.reasons.tolist() == [0] * 5 + [0, 0, 0, 0, REASON_NEAR_DUPLICATE]
        assert nd.lsn == 14
        raw = StringTensor.from_list([b"\xff\xfe broken bytes in this document ok", b"\xff\xfe broken bytes in this "
                                      b"document ok"], validate=False) if _accepts_validate() else None
        if raw is not None:
            assert nd(raw).reasons.tolist() == [0, REASON_NEAR_DUPLICATE]
        big = ("lorem ipsum dolor sit amet " * (100 * 2**20 // 27 + 1))[: 100 * 2**20]
        r = nd([big, "tail " + big[:1000]])
        assert r.reasons.tolist()[0] == 0


def _accepts_validate():
    import inspect

    return "validate" in inspect.signature(StringTensor.from_list).parameters


def test_fused_and_chain_agree_with_near_dedup(sample):
    outs = []
    texts = sample[:900] + sample[:100]  # with exact copies
    for cls in (FusedPipeline, ChainPipeline):
        with cls(quality=False, near_dedup=True, pii=luminamoon.PIIMasker("datatrove")) as p:
            res = [p(texts[i:i + 250]) for i in range(0, 1000, 250)]
            outs.append([(r.texts.tolist(), r.reasons.tolist(), r.source_index.tolist()) for r in res])
            if cls is FusedPipeline:
                c = p.counters
                near = sum(int((r.reasons == REASON_NEAR_DUPLICATE).sum()) for r in res)
                assert c["dropped_near_duplicate"] == near > 0
                assert c["docs_out"] == sum(len(r) for r in res)
                assert "near_dedup" in repr(p)
    assert outs[0] == outs[1]
    reasons = [x for o in outs[0] for x in o[1]]
    assert REASON_DUPLICATE in reasons and REASON_NEAR_DUPLICATE in reasons
    # near dedup sits after exact dedup: an exact copy is 'duplicate', not 'near_duplicate'
    with FusedPipeline(quality=False, near_dedup=True) as p:
        t = sample[0] if len(sample[0].split()) > 10 else "x " * 20
        assert p([t, t]).reasons.tolist() == [0, REASON_DUPLICATE]


def test_resumable_pipeline_state_dict_round_trip_and_settings_check(sample, tmp_path):
    texts = [{"id": i, "text": t} for i, t in enumerate(sample[:800])]
    kw = dict(batch_size=100, prefetch_batches=0, near_dedup=True, stages={"quality": False})
    with ResumablePipeline(IterableSource(texts), state_dir=tmp_path / "ref", **kw) as p:
        want = [(b.reasons.tolist(), b.texts.tolist()) for b in p]
        assert p.near_dedup_stats["entries"] > 0
    got = []
    with ResumablePipeline(IterableSource(texts), state_dir=tmp_path / "s", **kw) as p:
        it = iter(p)
        for _ in range(3):
            b = next(it)
            got.append((b.reasons.tolist(), b.texts.tolist()))
        p.commit()
        next(it)  # received but not committed: its band keys are forgotten on resume
    with ResumablePipeline(IterableSource(texts), state_dir=tmp_path / "s", **kw) as p:
        got += [(b.reasons.tolist(), b.texts.tolist()) for b in p]
    assert got == want
    assert any(REASON_NEAR_DUPLICATE in r for r, _ in want)
    with pytest.raises(ValueError, match="near_dedup"):
        ResumablePipeline(IterableSource(texts), state_dir=tmp_path / "s", **dict(kw, near_dedup={"seed": 5}))
    with pytest.raises(ValueError, match="wal_path"):
        ResumablePipeline(IterableSource(texts), near_dedup={"wal_path": "x"})
    with pytest.raises(TypeError, match="near_dedup"):
        ResumablePipeline(IterableSource(texts), near_dedup="yes")


def test_decisions_over_a_corpus_for_offline_comparison(sample):
    with NearDeduplicator() as a, NearDeduplicator() as b:
        flags = a.decisions(iter(sample), batch_size=128)
        assert flags.dtype == torch.bool and flags.numel() == len(sample)
        assert torch.equal(flags, b(sample).reasons == REASON_NEAR_DUPLICATE)
