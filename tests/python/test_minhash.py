"""luminamoon.MinHash and torch.ops.luminamoon.minhash (issue 12, parts 1 and 2).

The reference is datatrove 0.10.1 itself, computed in the test (nothing cached): its
MinhashDedupSignature's get_shingles / get_signature with the default MinhashConfig, and numpy's
RandomState for the permutation parameters.  datatrove hashes `str` with xxhash, which needs
xxhash < 4 (pinned in requirements.txt).

Shared corpus: a 3,000-document sample spread over the whole corpus always runs;
LM_MINHASH_FULL=1 runs all 68,330 documents (datatrove takes a few minutes).
"""
import os
import pickle

import numpy as np
import pyarrow as pa
import pytest
import torch
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as hst

import luminamoon
from luminamoon import MinHash, StringTensor
from luminamoon.minhash import minhash

from conftest import corpus_texts

from datatrove.pipeline.dedup.minhash import MinhashConfig, MinhashDedupSignature  # noqa: E402
from datatrove.utils.hashing import HashConfig  # noqa: E402
from datatrove.utils.text import simplify_text  # noqa: E402

EMPTY = -1  # a document without shingles: every bit set

assert int(xxhash.VERSION.split(".")[0]) < 4, "datatrove 0.10.1's MinHash needs xxhash<4 (it hashes str)"


def _dt(config=None, tmp="/tmp/lm_minhash_dt_unused"):
    return MinhashDedupSignature(tmp, config=config)


_DT_DEFAULT = None


def dt_default():
    global _DT_DEFAULT
    if _DT_DEFAULT is None:
        _DT_DEFAULT = _dt()
    return _DT_DEFAULT


def dt_signature(sig_step, text):
    """datatrove's signature of one text as int64 [H] (uint64 bit patterns), or None when it
    writes no signature (no shingles)."""
    sh = sig_step.get_shingles(text)
    if sh.size == 0:
        return None
    flat = [v for bucket in sig_step.get_signature(sh) for v in bucket]
    return torch.from_numpy(np.array(flat, dtype=np.uint64).view(np.int64))


def compare(mh, sig_step, texts):
    """Indices of the texts whose luminamoon signature differs from datatrove's."""
    ours, has = mh.signatures(texts, return_mask=True)
    bad = []
    for i, t in enumerate(texts):
        ref = dt_signature(sig_step, t)
        if ref is None:
            if bool(has[i]) or not bool((ours[i] == EMPTY).all()):
                bad.append(i)
        elif not bool(has[i]) or not torch.equal(ours[i], ref):
            bad.append(i)
    return bad


def describe(texts, bad, mh, sig_step):
    lines = []
    for i in bad[:20]:
        t = texts[i]
        simp = simplify_text(t)
        same_simp = mh.simplify(t) == simp
        words = sig_step.word_tokenizer.word_tokenize(simp)
        lines.append(f"doc {i}: simplify {'equal' if same_simp else 'DIFFERS'}; {len(words)} words; "
                     f"text[:120]={t[:120]!r}")
    return "\n".join(lines)


# ----------------------------------------------------------------- parameters

@pytest.mark.parametrize("seed,buckets,rows", [(1, 14, 8), (0, 14, 8), (7, 3, 5), (2**32 - 1, 20, 10), (123, 1, 1)])
def test_parameters_equal_numpy_randomstate_draws(seed, buckets, rows):
    mh = MinHash(seed=seed, num_buckets=buckets, hashes_per_bucket=rows)
    step = _dt(MinhashConfig(seed=seed, num_buckets=buckets, hashes_per_bucket=rows))
    a, b = step.parameters
    assert torch.equal(mh.a, torch.from_numpy(a.reshape(-1).view(np.int64)))
    assert torch.equal(mh.b, torch.from_numpy(b.reshape(-1).view(np.int64)))
    # and directly against numpy (not through datatrove)
    g = np.random.RandomState(seed)
    p = (1 << 61) - 1
    ra = g.randint(1, p, dtype=np.uint64, size=buckets * rows)
    rb = g.randint(0, p, dtype=np.uint64, size=buckets * rows)
    assert (mh.a.numpy().view(np.uint64) == ra).all() and (mh.b.numpy().view(np.uint64) == rb).all()


# --------------------------------------------------------- equality with datatrove

_CORPUS = None


def corpus():
    global _CORPUS
    if _CORPUS is None:
        _CORPUS = corpus_texts()
    return _CORPUS


def _sample(texts, n):
    step = max(1, len(texts) // n)
    return texts[::step][:n]


FULL = os.environ.get("LM_MINHASH_FULL") == "1"


def test_signatures_equal_datatrove_on_corpus():
    """3,000 documents spread over the corpus; all 68,330 with LM_MINHASH_FULL=1 (pytest -s prints
    the figure and every differing document)."""
    texts = corpus()
    if not FULL:
        texts = _sample(texts, 3000)
        assert len(texts) == 3000
    mh, step = MinHash(), dt_default()
    bad = compare(mh, step, texts)
    share = 1 - len(bad) / len(texts)
    print(f"\nMinHash vs datatrove on {len(texts)} documents: {len(bad)} differ ({share:.5%} equal)")
    if bad:
        print(describe(texts, bad, mh, step))
    assert share >= 0.999, f"{len(bad)} of {len(texts)} signatures differ from datatrove's:\n" + \
        describe(texts, bad, mh, step)


@pytest.mark.parametrize("n_grams,buckets,rows,seed,precision",
                         [(3, 4, 5, 7, 64), (5, 14, 8, 1, 32), (1, 2, 3, 9, 64), (8, 9, 9, 0, 32)])
def test_other_configurations_equal_datatrove(n_grams, buckets, rows, seed, precision):
    texts = _sample(corpus(), 300) + ["", "one", "one two", "a b c d e f g h i j", "Ünïcödé wörds ΟΔΟΣ ok"]
    mh = MinHash(n_grams=n_grams, num_buckets=buckets, hashes_per_bucket=rows, seed=seed, precision=precision)
    step = _dt(MinhashConfig(n_grams=n_grams, num_buckets=buckets, hashes_per_bucket=rows, seed=seed,
                             hash_config=HashConfig(precision=precision)))
    bad = compare(mh, step, texts)
    assert not bad, describe(texts, bad, mh, step)
    if precision == 32:
        sig = mh.signatures(texts)
        real = sig[sig != EMPTY]
        assert real.numel() and int(real.min()) >= 0 and int(real.max()) < 2**32


TRICKY = [
    "ΟΔΟΣ ΣΑΣ Σ", "İstanbul İİ", "한국어 텍스트 입니다", "café naïve résumé coöperate", "e\u0301 a\u0300\u0316 z",
    "1,234.56 and ٣٤٫٥ and 7⎖8 12.a .5", "don't can't won't U.S. e.g. 3pm", "a\x01b\x1fc\x7fd\x85e\u2028f\u3000g",
    "tabs\tand\nnewlines\r\nand\x0bvt\x0cff", "“quoted” «guillemets» 【brackets】 —dash– …", "emoji 😀 👍🏽 text here too ok",
    "mixed CASE ΑΒΓ Ωmega ǅ ǈ ß ẞ", "\u1d165\u1d16d combining \u0f39\u302e", "http://example.com/path?x=1 mail@x.org",
    "  leading and trailing spaces  ", "ＦＵＬＬ　ＷＩＤＴＨ　１２３", "a \u0301 b \u0301 c d e f g", "x" * 1000 + " y z w v",
]


def test_tricky_texts_equal_datatrove():
    mh, step = MinHash(), dt_default()
    for t in TRICKY:
        assert mh.simplify(t) == simplify_text(t), t
    bad = compare(mh, step, TRICKY)
    assert not bad, describe(TRICKY, bad, mh, step)
    mh2 = MinHash(n_grams=2)
    step2 = _dt(MinhashConfig(n_grams=2))
    bad = compare(mh2, step2, TRICKY)
    assert not bad, describe(TRICKY, bad, mh2, step2)


_ALPHABET = list("abcXYZ019 .,;:'-!?\n\t") + ["Σ", "σ", "Ο", "İ", "é", "\u0301", "\u0316", "한", "٣", "٫", "،",
                                           "\u2003", "\x85", "\x01", "ß", "ǅ", "😀", "“", "…", "\u00a0", "ﬁ"]


@settings(max_examples=300, deadline=None)
@given(hst.lists(hst.sampled_from(_ALPHABET), max_size=60).map("".join))
def test_simplify_equals_datatrove_fuzz(text):
    assert MinHash(n_grams=1).simplify(text) == simplify_text(text)


@settings(max_examples=150, deadline=None)
@given(hst.lists(hst.sampled_from(_ALPHABET + [" ", " ", " ", "the", "Word", "x.y"]), max_size=60).map("".join))
def test_signatures_equal_datatrove_fuzz(text):
    mh, step = _FUZZ
    assert not compare(mh, step, [text]), (text, simplify_text(text))


_FUZZ = (MinHash(n_grams=2, num_buckets=2, hashes_per_bucket=4), None)
_FUZZ = (_FUZZ[0], _dt(MinhashConfig(n_grams=2, num_buckets=2, hashes_per_bucket=4)))


# ------------------------------------------------------------------ behaviour

def test_short_documents_have_no_signature():
    mh = MinHash()
    texts = ["", "   ", "one", "one two three four", "one, two; three. four!", "one two three four five"]
    sig, has = mh.signatures(texts, return_mask=True)
    assert sig.shape == (6, 112) and sig.dtype == torch.int64
    assert has.tolist() == [False] * 5 + [True]
    assert bool((sig[:5] == EMPTY).all()) and bool((sig[5] != EMPTY).all())
    step = dt_default()
    for t in texts[:5]:
        assert step.get_shingles(t).size == 0  # datatrove writes no signature for these
    h, off = mh.shingles(texts)
    assert off.tolist() == [0, 0, 0, 0, 0, 0, 1] and h.numel() == 1
    assert int(h[0]) & (2**64 - 1) == xxhash.xxh64_intdigest("one two three four five")


def test_input_kinds_and_threads_agree():
    texts = _sample(corpus(), 200)
    mh = MinHash()
    ref = mh.signatures(texts)
    assert torch.equal(mh.signatures(StringTensor.from_list(texts)), ref)
    assert torch.equal(mh.signatures(pa.array(texts)), ref)
    assert torch.equal(mh.signatures(pa.array(texts, type=pa.large_string())), ref)
    assert torch.equal(MinHash(num_threads=1).signatures(texts), ref)
    assert torch.equal(MinHash(num_threads=4).signatures(texts), ref)
    assert torch.equal(mh.bands(ref)[:, 3], ref[:, 24:32])
    assert mh.signatures([]).shape == (0, 112)
    m2 = pickle.loads(pickle.dumps(MinHash(n_grams=3, seed=5, precision=32)))
    assert (m2.n_grams, m2.seed, m2.precision) == (3, 5, 32)
    assert torch.equal(m2.a, MinHash(n_grams=3, seed=5, precision=32).a)


def test_invalid_utf8_reads_each_bad_byte_as_replacement_character():
    mh = MinHash(n_grams=2)
    raw = [b"alpha \xff beta \x80\x80 gamma delta", b"\xfe\xfe words here", b"fine text only here"]
    st = StringTensor.from_list(raw, validate=False)
    fixed = [r.decode("utf-8", "replace") for r in raw]  # single invalid bytes: one U+FFFD each
    assert torch.equal(mh.signatures(st), mh.signatures(fixed))
    step = _dt(MinhashConfig(n_grams=2))
    assert not compare(mh, step, fixed)
    # truncated sequences / surrogates: defined, no crash
    odd = StringTensor.from_list([b"word \xe2\x82", b"\xed\xa0\x80 one two", b"\xc0\xaf x y"], validate=False)
    assert mh.signatures(odd).shape == (3, 112)


def test_100mb_document():
    """A 100 MB document: no crash; periodic text has the shingle set of one period (+ n-1 words)."""
    words = [f"w{i}" for i in range(997)]
    unit = " ".join(words) + " "
    big = unit * (100_000_000 // len(unit) + 1)
    assert len(big) >= 100_000_000
    small = unit * 2
    mh = MinHash(num_threads=1)
    sig = mh.signatures([big, small])
    assert torch.equal(sig[0], sig[1])


def test_bad_arguments():
    with pytest.raises(TypeError, match="n_grams"):
        MinHash(n_grams=5.0)
    with pytest.raises(TypeError, match="seed"):
        MinHash(seed=True)
    with pytest.raises(ValueError, match="seed"):
        MinHash(seed=2**32)
    with pytest.raises(ValueError, match="seed"):
        MinHash(seed=-1)
    with pytest.raises(ValueError, match="precision"):
        MinHash(precision=16)
    with pytest.raises(ValueError, match="num_buckets"):
        MinHash(num_buckets=0)
    with pytest.raises(ValueError, match="65536"):
        MinHash(num_buckets=1000, hashes_per_bucket=1000)
    mh = MinHash()
    with pytest.raises(TypeError, match="texts"):
        mh.signatures("a single string")
    with pytest.raises(TypeError, match="texts"):
        mh.signatures(42)
    with pytest.raises(TypeError):
        mh.signatures([1, 2])
    with pytest.raises(TypeError, match="text"):
        mh.simplify(b"bytes")


# ------------------------------------------------------------------ the operator

P61 = (1 << 61) - 1


def ref_op(h, off, a, b, precision=64):
    """Plain numpy: datatrove's formula (uint64 wrap-around, % p, mask, min)."""
    h = h.numpy().view(np.uint64)
    a = a.numpy().view(np.uint64)
    b = b.numpy().view(np.uint64)
    off = off.tolist()
    out = np.full((len(off) - 1, a.size), np.uint64(2**64 - 1), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(len(off) - 1):
            s = h[off[i]:off[i + 1]].reshape(-1, 1)
            if s.size:
                phv = (s * a + b) % np.uint64(P61)
                if precision == 32:
                    phv &= np.uint64(0xFFFFFFFF)
                out[i] = phv.min(axis=0)
    return torch.from_numpy(out.view(np.int64))


def _op_inputs(seed=0, n=40, H=112):
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(0, 30, (n,), generator=g)
    counts[::7] = 0
    off = torch.zeros(n + 1, dtype=torch.int64)
    off[1:] = counts.cumsum(0)
    h = torch.randint(-2**63, 2**63 - 1, (int(off[-1]),), generator=g, dtype=torch.int64)
    if h.numel():
        h[0] = -1
    mh = MinHash(num_buckets=H // 8 if H % 8 == 0 else H, hashes_per_bucket=8 if H % 8 == 0 else 1)
    return h, off, mh.a, mh.b


@pytest.mark.parametrize("precision", [64, 32])
@pytest.mark.parametrize("H", [112, 13])
def test_op_matches_numpy_reference(precision, H):
    h, off, a, b = _op_inputs(1, H=H)
    out = minhash(h, off, a, b, precision)
    assert out.dtype == torch.int64 and out.shape == (off.numel() - 1, H)
    assert torch.equal(out, ref_op(h, off, a, b, precision))
    empty = (off[1:] == off[:-1])
    assert bool((out[empty] == EMPTY).all())


def test_op_equals_signatures_on_corpus():
    texts = _sample(corpus(), 300)
    mh = MinHash()
    h, off = mh.shingles(texts)
    assert off.numel() == len(texts) + 1 and int(off[-1]) == h.numel()
    assert torch.equal(torch.ops.luminamoon.minhash(h, off, mh.a, mh.b), mh.signatures(texts))
    m32 = MinHash(precision=32)
    h32, off32 = m32.shingles(texts)
    assert torch.equal(torch.ops.luminamoon.minhash(h32, off32, m32.a, m32.b, 32), m32.signatures(texts))


def test_op_opcheck_and_compile():
    h, off, a, b = _op_inputs(2)
    torch.library.opcheck(torch.ops.luminamoon.minhash.default, (h, off, a, b, 64))
    torch.library.opcheck(torch.ops.luminamoon.minhash.default, (h, off, a, b, 32))
    f = torch.compile(lambda h, off, a, b: torch.ops.luminamoon.minhash(h, off, a, b) & 0xFF, fullgraph=True)
    assert torch.equal(f(h, off, a, b), minhash(h, off, a, b) & 0xFF)


def test_op_bad_arguments():
    h, off, a, b = _op_inputs(3)
    op = torch.ops.luminamoon.minhash
    with pytest.raises(TypeError, match="shingle_hashes must be int64"):
        op(h.to(torch.int32), off, a, b)
    with pytest.raises(TypeError, match="doc_offsets must be int64"):
        op(h, off.to(torch.int32), a, b)
    with pytest.raises(ValueError, match="same length"):
        op(h, off, a, b[:-1])
    with pytest.raises(ValueError, match="1-D"):
        op(h.view(-1, 1), off, a, b)
    with pytest.raises(ValueError, match="precision"):
        op(h, off, a, b, 48)
    with pytest.raises(ValueError, match="N\\+1"):
        op(h, off[:0], a, b)
    bad = off.clone()
    bad[3] = bad[4] + 1
    with pytest.raises(ValueError, match="non-decreasing"):
        op(h, bad, a, b)
    bad = off.clone()
    bad[-1] = h.numel() + 1
    with pytest.raises(ValueError, match="past the end"):
        op(h, bad, a, b)
    bad = off.clone()
    bad[0] = -1
    with pytest.raises(ValueError, match="non-negative"):
        op(h, bad, a, b)
    with pytest.raises(ValueError, match="same device|one device"):
        op(h, off, a.to("meta"), b)
    with pytest.raises(TypeError, match="Tensor"):
        minhash([1, 2], off, a, b)
    # zero documents, zero hash functions
    assert op(h, off[:1], a, b).shape == (0, a.numel())
    assert op(h, off, a[:0], b[:0]).shape == (off.numel() - 1, 0)
