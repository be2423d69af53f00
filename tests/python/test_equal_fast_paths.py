"""Element-wise equality of two StringTensors (and torch.ops.luminamoon.equal) against
pyarrow.compute.equal on random and adversarial data: both modes of the offsets kernel
(short strings: every pair's first 16 bytes compared without a branch; longer strings: only
pairs of equal length read), lengths 0..300, pairs differing in one byte anywhere (often the
last, or past byte 16), the same tensor (one payload), int64 offsets, and every layout mix."""
import os
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

from luminamoon import StringTensor

OPS = torch.ops.luminamoon


def _pairs(rng: random.Random, n: int, max_len: int, short_share: float):
    a, b = [], []
    for _ in range(n):
        if rng.random() < short_share:
            k = rng.randrange(0, 13)
        else:
            k = rng.randrange(0, max_len + 1)
        x = "".join(rng.choice("ab") for _ in range(k))
        r = rng.randrange(5)
        if r <= 1:
            y = x
        elif r == 2 and x:
            at = len(x) - 1 if rng.random() < 0.4 else rng.randrange(len(x))
            y = x[:at] + ("c" if x[at] != "c" else "d") + x[at + 1:]
        elif r == 3:
            y = "".join(rng.choice("ab") for _ in range(len(x)))
        else:
            y = "".join(rng.choice("ab") for _ in range(rng.randrange(0, max_len + 1)))
        # some multi-byte text: lengths in bytes differ from lengths in characters
        if rng.random() < 0.05:
            x, y = x + "é", y + "é"
        a.append(x)
        b.append(y)
    return a, b


def _want(a, b):
    return pc.equal(pa.array(a, pa.string()), pa.array(b, pa.string())).to_numpy(zero_copy_only=False)


@pytest.mark.parametrize("n", [1, 7, 1023, 1025, 5000])
@pytest.mark.parametrize("max_len,short_share", [(12, 1.0), (20, 0.5), (300, 0.9), (300, 0.0), (80, 0.0)])
def test_equal_matches_pyarrow(n, max_len, short_share):
    rng = random.Random(n * 1000 + max_len + int(short_share * 10))
    a, b = _pairs(rng, n, max_len, short_share)
    want = _want(a, b)
    sa, sb = StringTensor.from_list(a), StringTensor.from_list(b)
    assert np.array_equal(sa.fast_eq(sb).numpy(), want)
    assert np.array_equal((sa == sb).numpy(), want)
    assert np.array_equal(OPS.equal(sa.offsets, sa.data, sb.offsets, sb.data).numpy(), want)
    # int64 offsets
    assert np.array_equal(OPS.equal(sa.offsets.long(), sa.data, sb.offsets.long(), sb.data).numpy(), want)
    # layout mixes: views only on one or both sides, offsets only on one side
    va = StringTensor(views=sa.views, buffers=sa.buffers)
    vb = StringTensor(views=sb.views, buffers=sb.buffers)
    ob = StringTensor(sb.offsets, sb.data)
    for x, y in ((va, vb), (va, sb), (sa, ob), (va, ob)):
        assert np.array_equal(x.fast_eq(y).numpy(), want)


@pytest.mark.parametrize("threads", [1, 2])
def test_equal_every_length_near_misses(threads):
    """Every length 0..300, the partner equal, differing in its last byte or its first,
    with short and long neighbours; the last string ends the payload."""
    a, b = [], []
    for n in range(301):
        base = "".join(chr(97 + (i * 7 + n) % 26) for i in range(n))
        for kind in range(3):
            y = base
            if n and kind == 1:
                y = base[:-1] + ("z" if base[-1] != "z" else "y")
            if n and kind == 2:
                y = ("z" if base[0] != "z" else "y") + base[1:]
            a += ["p" * (n % 5), base]
            b += ["p" * (n % 5), y]
    want = _want(a, b)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        sa, sb = StringTensor.from_list(a), StringTensor.from_list(b)
        assert np.array_equal(OPS.equal(sa.offsets, sa.data, sb.offsets, sb.data).numpy(), want)
        assert np.array_equal(sa.fast_eq(sb).numpy(), want)
    finally:
        torch.set_num_threads(old)


def test_equal_one_payload_both_sides():
    """Both sides over one payload: the same offsets (equal without reading) and shifted ones."""
    rng = random.Random(3)
    words = ["".join(rng.choice("ab") for _ in range(rng.randrange(0, 40))) for _ in range(3000)]
    st = StringTensor.from_list(words)
    off, data = st.offsets, st.data
    assert bool(OPS.equal(off, data, off, data).all())
    assert bool((st == st).all())
    # string i against string i + 1 of the same payload
    want = _want(words[:-1], words[1:])
    got = OPS.equal(off[:-1], data, off[1:], data).numpy()
    assert np.array_equal(got, want)


def _doc(rng: random.Random, k: int) -> str:
    return bytes(97 + c % 26 for c in rng.randbytes(k)).decode()


@pytest.mark.parametrize("regime,where", [("words", w) for w in (0, 1, 1023, 1024, 1500, 2999, 3000)]
                         + [("documents", w) for w in (0, 1, 255, 256, 700, 1199, 1200)])
def test_equal_rejects_bad_offsets(regime, where):
    """A bad offset anywhere (words: the short-strings mode; documents: the long-strings mode that
    touches the skipped pairs' bytes) is refused before any byte is read, on either side."""
    rng = random.Random(where)
    if regime == "words":
        strings = ["x" * (i % 50) for i in range(3000)]
    else:
        strings = [_doc(rng, 128 + (i * 37) % 900) for i in range(1200)]
    st = StringTensor.from_list(strings)
    other = StringTensor.from_list([d if i % 2 == 0 else d + "x" for i, d in enumerate(strings)])
    bad = st.offsets.clone()
    bad[where] = -1 if where % 2 else int(st.data.numel()) + 1
    with pytest.raises(ValueError):
        OPS.equal(bad, st.data, other.offsets, other.data)
    with pytest.raises(ValueError):
        OPS.equal(other.offsets, other.data, bad, st.data)
    with pytest.raises(ValueError):
        OPS.equal(bad, st.data, st.offsets, st.data)


@pytest.mark.parametrize("threads", [1, 2])
def test_equal_documents_with_skipped_pairs(threads):
    """Documents (128 B - 3 KB: the blocks of the long-strings mode, pairs of different lengths skipped
    unread or, on AMD CPUs, their bytes touched: ops_internal.h lm_eq_touch_on): every other pair of different lengths, the others equal or differing in one byte (first,
    last, anywhere); a run of short strings in the middle (the short-strings mode between long blocks),
    multi-byte text; every layout mix, int32 and int64 offsets."""
    rng = random.Random(11 + threads)
    a, b = [], []
    for i in range(1400):
        if 600 <= i < 900:  # short strings: the branch-free and the untouched modes
            x = _doc(rng, rng.randrange(0, 60))
            a.append(x)
            b.append(x if i % 3 else x + "q")
            continue
        x = _doc(rng, rng.randrange(128, 3000)) + ("é" if i % 7 == 0 else "")
        if i % 2:
            y = _doc(rng, len(x.encode()) + rng.choice([-5, -1, 1, 64, 300]))
        else:
            y = x
            r = rng.randrange(4)
            if r:
                at = {1: 0, 2: len(x) - 1, 3: rng.randrange(len(x))}[r]
                y = x[:at] + ("z" if x[at] != "z" else "y") + x[at + 1:]
        a.append(x)
        b.append(y)
    want = np.array([x == y for x, y in zip(a, b)])
    assert want.sum() > 100 and (~want).sum() > 600
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        sa, sb = StringTensor.from_list(a), StringTensor.from_list(b)
        assert np.array_equal(sa.fast_eq(sb).numpy(), want)
        assert np.array_equal(OPS.equal(sa.offsets, sa.data, sb.offsets, sb.data).numpy(), want)
        assert np.array_equal(OPS.equal(sa.offsets.long(), sa.data, sb.offsets.long(), sb.data).numpy(), want)
        va = StringTensor(views=sa.views, buffers=sa.buffers)
        vb = StringTensor(views=sb.views, buffers=sb.buffers)
        for x, y in ((va, vb), (va, sb), (sa, vb)):
            assert np.array_equal(x.fast_eq(y).numpy(), want)
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("touch", ["0", "1"])
def test_equal_documents_with_touching_forced(touch):
    """The documents test in a child process with LM_EQ_TOUCH forced off / on (read once per process):
    both modes of the long-strings kernels give the same answers, on any CPU."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = ("import test_equal_fast_paths as t\n"
            "for threads in (1, 2):\n    t.test_equal_documents_with_skipped_pairs(threads)\nprint('ok')")
    env = dict(os.environ, LM_EQ_TOUCH=touch)
    r = subprocess.run([sys.executable, "-c", code], cwd=here, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
