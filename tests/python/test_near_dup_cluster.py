"""Offline near-duplicate clustering (luminamoon.near_dup, issue 12 part 3) against
datatrove 0.10.1's four MinHash stages run with its LocalPipelineExecutor.

CI: a 3,000-document sample of the shared corpus.  LM_NEAR_DUP_FULL=1: the whole
corpus (datatrove takes about 5 minutes on one core)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from conftest import corpus_texts as _corpus  # noqa: E402
from reference_datatrove_minhash import run_datatrove_minhash  # noqa: E402

from luminamoon import near_dup  # noqa: E402
from luminamoon.near_dup import band_pairs, cluster, union_pairs  # noqa: E402

FULL = os.environ.get("LM_NEAR_DUP_FULL") == "1"
SAMPLE = 3000


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    texts = _corpus(None if FULL else SAMPLE)
    ref = run_datatrove_minhash(texts, str(tmp_path_factory.mktemp("datatrove")))
    return texts, ref


def _agreement(removed_a, removed_b, n):
    a, b = set(map(int, removed_a)), set(map(int, removed_b))
    return 1 - len(a ^ b) / n, sorted(a - b)[:10], sorted(b - a)[:10]


def test_same_signatures_same_removals_as_datatrove(reference, tmp_path):
    """Given datatrove's own signatures (read back from its stage-1 files), the removed
    set is exactly datatrove's: buckets, pair order, union-find roots, the kept document."""
    texts, ref = reference
    assert len(ref["removed"]) > len(texts) // 20  # the sample is rich in near-duplicates
    r = cluster(ref["signatures"], has_signature=ref["has_signature"], work_dir=str(tmp_path / "w"))
    assert r.removed.tolist() == ref["removed"]
    assert r.n_docs == len(texts)
    # every removed document's root is kept and in the same cluster
    assert r.keep[r.root[r.removed]].all()
    # the default empty-signature detection (rows of 2**64-1) gives the same result
    assert cluster(ref["signatures"]).removed.tolist() == ref["removed"]
    print(f"\n[near-dup cluster] {len(texts)} docs: datatrove removed {len(ref['removed'])}, "
          f"luminamoon on the same signatures removed {r.removed.size}; {r.summary()}")


def test_luminamoon_signatures_agree_with_datatrove(reference):
    """End to end: luminamoon.MinHash signatures (C) + cluster vs datatrove's four stages
    on the same texts: >= 99.9% of documents get the same decision."""
    texts, ref = reference
    r = near_dup.cluster_texts(texts)
    agree, only_ours, only_theirs = _agreement(r.removed, ref["removed"], len(texts))
    print(f"\n[near-dup cluster] texts -> MinHash -> cluster: {agree:.5%} agreement over {len(texts)} docs "
          f"(datatrove removed {len(ref['removed'])}, luminamoon {r.removed.size}; only ours {only_ours}, "
          f"only datatrove {only_theirs})")
    assert agree >= 0.999


def test_order_decides_the_kept_document():
    """datatrove keeps the root, which depends on the pairs' order and the sizes:
    band 0 joins 2-3 (tie: 2 stays), band 1 joins 1-3 (root 2 has the larger set),
    band 2 joins 0-1: the cluster {0,1,2,3} keeps 2, not the first document."""
    sig = np.array([[10, 20, 31], [11, 21, 30], [12, 22, 32], [12, 21, 33]], dtype=np.uint64)
    # band 1: docs 1 and 3 share 21; band 2: docs 0 and 1 share... make them equal
    sig[0, 2] = 30
    r = cluster(sig, num_buckets=3, hashes_per_bucket=1)
    assert r.root.tolist() == [2, 2, 2, 2]
    assert r.removed.tolist() == [0, 1, 3]


def test_band_pairs_chain_in_document_order():
    band = np.array([[5, 1], [3, 3], [5, 1], [5, 1], [3, 3], [5, 2]], dtype=np.uint64)
    # sorted by (hashes, id): (3,3):1,4  (5,1):0,2,3  (5,2):5 -> pairs (1,4), (0,2), (2,3)
    assert band_pairs(band).tolist() == [[1, 4], [0, 2], [2, 3]]
    ids = np.array([10, 11, 12, 13, 14, 15])
    assert band_pairs(band, ids).tolist() == [[11, 14], [10, 12], [12, 13]]


def test_native_union_equals_python_reference():
    from luminamoon import _C

    assert hasattr(_C, "near_union_pairs"), "the C union-find binding is missing"
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(1, 500))
        pairs = rng.integers(0, n, size=(int(rng.integers(0, 800)), 2)).astype(np.int64)
        par, sz = np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64)
        near_dup._union_python(par, sz, pairs)
        want = near_dup._roots(par)
        got, _ = union_pairs(n, [pairs[: len(pairs) // 2], pairs[len(pairs) // 2:]])
        assert got.tolist() == want.tolist()


def test_resume_reuses_finished_bands(tmp_path):
    rng = np.random.default_rng(5)
    n = 4000
    sig = rng.integers(0, 50, size=(n, 14 * 8)).astype(np.uint64)  # small alphabet: many collisions
    sig[:, 8:16] = rng.integers(0, 3, size=(n, 8))
    w = str(tmp_path / "w")
    first = cluster(sig, work_dir=w)
    assert first.reused_bands == 0 and not first.reused_result and first.removed.size > 0
    again = cluster(sig, work_dir=w)
    assert again.reused_bands == 14 and again.reused_result
    assert again.removed.tolist() == first.removed.tolist()
    # a kill mid-way: the result and one band lost, another band torn
    os.remove(os.path.join(w, "clusters.npz"))
    os.remove(os.path.join(w, "band_005.npz"))
    with open(os.path.join(w, "band_006.npz"), "r+b") as f:
        f.truncate(40)
    third = cluster(sig, work_dir=w)
    assert third.reused_bands == 12 and not third.reused_result
    assert third.removed.tolist() == first.removed.tolist()
    # other signatures in the same folder: nothing stale is reused
    sig2 = sig.copy()
    sig2[:, 8:16] = 7  # band 1 now joins everything
    fourth = cluster(sig2, work_dir=w)
    assert fourth.reused_bands == 13 and fourth.removed.size == n - 1
    assert fourth.removed.tolist() == cluster(sig2).removed.tolist()


def test_signatures_from_a_file_and_torch(tmp_path):
    import torch

    rng = np.random.default_rng(1)
    sig = rng.integers(0, 4, size=(500, 6)).astype(np.int64)
    p = str(tmp_path / "s.npy")
    np.save(p, sig)
    want = cluster(sig, num_buckets=3, hashes_per_bucket=2).removed.tolist()
    assert cluster(p, num_buckets=3, hashes_per_bucket=2).removed.tolist() == want
    assert cluster(torch.from_numpy(sig), num_buckets=3, hashes_per_bucket=2).removed.tolist() == want
    assert cluster(sig.astype(np.uint32), num_buckets=3, hashes_per_bucket=2).removed.tolist() == want


def test_memory_is_bounded_and_reported():
    rng = np.random.default_rng(2)
    n = 100_000
    sig = rng.integers(0, 2**61, size=(n, 14 * 8), dtype=np.uint64)
    sig[::10] = sig[1::10]  # 10% exact copies: 10,000 pairs in each band
    r = cluster(sig)
    assert r.removed.size == n // 10
    # one band (64 B), its sort order and a column (16 B), pairs, the union-find (16 B):
    # far below the 896 B/document of holding all signatures twice
    assert 0 < r.bytes_per_doc < 200, r.summary()


@pytest.mark.parametrize("args,exc,needle", [
    (dict(signatures=np.zeros((3,), dtype=np.int64)), ValueError, "2-D"),
    (dict(signatures=np.zeros((3, 112), dtype=np.float64)), TypeError, "64- or 32-bit"),
    (dict(signatures=np.zeros((3, 100), dtype=np.int64)), ValueError, "num_buckets * hashes_per_bucket"),
    (dict(signatures=[[1, 2]]), TypeError, "numpy array"),
    (dict(signatures=np.zeros((3, 112), dtype=np.int64), num_buckets=0), ValueError, "num_buckets"),
    (dict(signatures=np.zeros((3, 112), dtype=np.int64), has_signature=np.ones(2, dtype=bool)), ValueError,
     "has_signature"),
    (dict(signatures="/nonexistent/sig.npy"), OSError, "signatures"),
])
def test_bad_input(args, exc, needle):
    sig = args.pop("signatures")
    with pytest.raises(exc, match=needle.replace("*", r"\*")):
        cluster(sig, **args)


def test_union_pairs_bad_input():
    with pytest.raises(ValueError, match="outside"):
        union_pairs(3, [np.array([[0, 3]])])
    with pytest.raises(ValueError, match=r"\[P, 2\]"):
        union_pairs(3, [np.array([[0, 1, 2]])])


def test_other_settings_agree_with_datatrove(tmp_path):
    """32-bit precision, 10 buckets of 4 hashes, 3-grams, seed 7: the same removals as
    datatrove's four stages with that MinhashConfig."""
    from datatrove.pipeline.dedup.minhash import MinhashConfig
    from datatrove.utils.hashing import HashConfig

    texts = _corpus(800)
    cfg = MinhashConfig(n_grams=3, num_buckets=10, hashes_per_bucket=4, seed=7,
                        hash_config=HashConfig(precision=32))
    ref = run_datatrove_minhash(texts, str(tmp_path), config=cfg)
    same_sigs = cluster(ref["signatures"], num_buckets=10, hashes_per_bucket=4, has_signature=ref["has_signature"])
    assert same_sigs.removed.tolist() == ref["removed"]
    r = near_dup.cluster_texts(texts, n_grams=3, num_buckets=10, hashes_per_bucket=4, seed=7, precision=32)
    agree, only_ours, only_theirs = _agreement(r.removed, ref["removed"], len(texts))
    assert len(ref["removed"]) > 50
    assert agree >= 0.999, (only_ours, only_theirs)
