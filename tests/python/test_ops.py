"""Operators: opcheck, torch.compile(fullgraph=True), agreement with Python references."""
import pytest
import torch

import luminamoon
from luminamoon import StringTensor, ops

ITEMS = ["", "a", "apple", "apple pie with a long tail", "banana", "日本語", "applesauce is twelve+", "é" * 9]
OPS = torch.ops.luminamoon


def strings(large=False):
    st = StringTensor.from_list(ITEMS)
    off = st.offsets.long() if large else st.offsets
    return off, st.data


@pytest.mark.parametrize("large", [False, True])
def test_opcheck_every_op(large):
    off, data = strings(large)
    o2, d2 = StringTensor.from_list(list(reversed(ITEMS))).to_gpu_buffers()
    o2 = o2.long() if large else o2
    views = OPS.views_from_offsets(off, data)
    cases = [
        (OPS.prefix_match.default, (off, data, "app")),
        (OPS.equal.default, (off, data, o2, d2)),
        (OPS.equal_scalar.default, (off, data, "banana")),
        (OPS.hash64.default, (off, data, 7)),
        (OPS.pad_bytes.default, (off, data, 12, 0, 256, 257)),
        (OPS.attention_mask.default, (torch.tensor([0, 3, 12, 20]), 12)),
        (OPS.gather.default, (off, data, torch.tensor([3, 0, 3, 7]))),
        (OPS.compact.default, (off, data, torch.tensor([True, False] * 4))),
        (OPS.views_from_offsets.default, (off, data)),
        (OPS.offsets_from_views.default, (views, [data], large)),
        (OPS.views_prefix_match.default, (views, [data], "app")),
        (OPS.views_equal_scalar.default, (views, [data], "apple")),
        (OPS.views_equal.default, (views, [data], views, [data])),
        (OPS.views_hash64.default, (views, [data], 3)),
        (OPS.views_compact.default, (views, torch.tensor([True, False, False, True] * 2))),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_ops_match_python_references():
    off, data = strings()
    assert ops.prefix_match(off, data, "app").tolist() == [s.startswith("app") for s in ITEMS]
    assert ops.equal_scalar(off, data, "apple").tolist() == [s == "apple" for s in ITEMS]
    go, gd = ops.gather(off, data, torch.tensor([7, 2, 2]))
    assert StringTensor.from_buffers(go, gd).tolist() == [ITEMS[7], ITEMS[2], ITEMS[2]]
    co, cd = ops.compact(off, data, torch.tensor([s.startswith("a") for s in ITEMS]))
    assert StringTensor.from_buffers(co, cd).tolist() == [s for s in ITEMS if s.startswith("a")]
    tok, lengths = ops.pad_bytes(off, data, 6, pad_id=-1)
    for s, row, n in zip(ITEMS, tok.tolist(), lengths.tolist()):
        b = list(s.encode())[:6]
        assert n == len(b) and row == b + [-1] * (6 - len(b))


def test_attention_mask_matches_reference():
    lengths = torch.tensor([0, 1, 5, 9, -2])
    want = (torch.arange(7)[None, :] < lengths.clamp(0, 7)[:, None]).long()
    assert torch.equal(ops.attention_mask(lengths, 7), want)
    with pytest.raises(TypeError, match="lengths must be int64"):
        ops.attention_mask(lengths.int(), 7)


def test_outputs_never_alias_inputs():
    off, data = strings()
    all_true = torch.ones(len(ITEMS), dtype=torch.bool)
    co, cd = ops.compact(off, data, all_true)
    assert co.data_ptr() != off.data_ptr() and cd.data_ptr() != data.data_ptr()
    go, gd = ops.gather(off, data, torch.arange(len(ITEMS)))
    assert gd.data_ptr() != data.data_ptr()


def test_compile_fullgraph_fixed_shape_ops():
    off, data = strings()
    o2, d2 = StringTensor.from_list(list(reversed(ITEMS))).to_gpu_buffers()

    def f(off, data, o2, d2):
        m = OPS.prefix_match(off, data, "app")
        e = OPS.equal(off, data, o2, d2)
        s = OPS.equal_scalar(off, data, "apple")
        h = OPS.hash64(off, data, 11)
        tok, lengths = OPS.pad_bytes(off, data, 16, 0, 1, 2)
        mask = OPS.attention_mask(lengths, 16)
        return m & ~e, s, h, (tok * m[:, None] * mask).sum(1) + lengths

    eager = f(off, data, o2, d2)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)(off, data, o2, d2)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_compile_dynamic_output_ops(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True, raising=False)
    off, data = strings()

    def f(off, data, mask, index):
        co, cd = OPS.compact(off, data, mask)
        go, gd = OPS.gather(co, cd, index)
        return go, gd, OPS.hash64(go, gd, 0)

    mask = torch.tensor([True, False, True, True, False, True, True, True])
    index = torch.tensor([0, 2, 1])
    eager = f(off, data, mask, index)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)(off, data, mask, index)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_string_tensor_through_compile():
    st = StringTensor.from_list(ITEMS)

    def f(st: StringTensor):
        off, data = st.to_gpu_buffers()
        return OPS.hash64(off, data, 0) ^ OPS.prefix_match(off, data, "a").long()

    torch._dynamo.reset()
    assert torch.equal(torch.compile(f, fullgraph=True)(st), f(st))


def test_gil_released_while_kernel_runs():
    # A second thread makes progress while a long native op runs in the first.
    import threading
    import time

    big = StringTensor.from_list(["x" * 2000] * 20000)
    off, data = big.offsets, big.data
    ticks = []
    done = threading.Event()

    def ticker():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.0005)

    t = threading.Thread(target=ticker)
    t.start()
    t0 = time.perf_counter()
    for _ in range(20):
        OPS.hash64(off, data, 0)
    t1 = time.perf_counter()
    done.set()
    t.join()
    during = [x for x in ticks if t0 < x < t1]
    assert len(during) >= 3, "the ticker thread was starved: the GIL was held by the op"
    assert luminamoon.StringTensor  # keep import used


# A child process whose writer threads scribble over the offsets (and views, indices,
# masks) that the main thread's ops are reading with the GIL released.  The ops may
# raise or give wrong strings, but must never read outside their buffers: a crash
# (SIGSEGV, std::bad_alloc, abort) kills the child and fails the test.
_RACE_CHILD = r"""
import sys, threading
import torch
import luminamoon
from luminamoon import (StringTensor, TextCleaner, QualityFilter, PIIMasker, StreamDeduplicator, FusedPipeline,
                        hash128, _C)

OPS = torch.ops.luminamoon
torch.set_num_threads(2)
N, ROUNDS = 60000, int(sys.argv[1])
base = StringTensor.from_list([("w%d " % i) * (1 + i % 9) + "mail a@b.co" for i in range(N)])
stop = threading.Event()
targets = []   # (tensor, good copy, bad copy): the writer flips each between the two


def writer():
    k = 0
    while not stop.is_set():
        t, good, bad = targets[k % len(targets)]
        t.copy_(bad)
        t.copy_(good)
        k += 1


def scribbled(t, bad):
    targets.append((t, t.clone(), bad))
    return t


def offsets_pair(dtype):
    off, data = base.offsets.to(dtype).clone(), base.data
    bad = off.clone()
    bad[N // 3:] = (1 << 30) if dtype == torch.int32 else (1 << 40)   # far past the payload
    bad[N // 2:2 * N // 3] = -(1 << 20)                               # negative, then decreasing
    return scribbled(off, bad), data


def views_of():
    v = base.views.clone()
    bad = v.clone()
    bad[N // 3:, 0:4] = 0xFF                        # length 2**32-1
    bad[N // 3:, 8:16] = 0x7F                       # buffer index and offset far off
    return scribbled(v, bad), list(base.buffers)


calls = []
for dt in (torch.int32, torch.int64):
    off, data = offsets_pair(dt)
    idx = torch.arange(N - 1, -1, -1)
    scribbled(idx, torch.full_like(idx, 1 << 40))
    mask = torch.zeros(N, dtype=torch.bool)
    scribbled(mask, torch.ones(N, dtype=torch.bool))
    calls += [
        ("hash64", lambda off=off, data=data: OPS.hash64(off, data, 0)),
        ("pad_bytes", lambda off=off, data=data: OPS.pad_bytes(off, data, 16, 0, -1, -1)),
        ("prefix_match", lambda off=off, data=data: OPS.prefix_match(off, data, "w1")),
        ("equal_scalar", lambda off=off, data=data: OPS.equal_scalar(off, data, "w1 ")),
        ("equal", lambda off=off, data=data: OPS.equal(off, data, base.offsets.to(off.dtype), base.data)),
        ("gather", lambda off=off, data=data, idx=idx: OPS.gather(off, data, idx)),
        ("compact", lambda off=off, data=data, mask=mask: OPS.compact(off, data, mask)),
        ("views_from_offsets", lambda off=off, data=data: OPS.views_from_offsets(off, data)),
        ("to_list", lambda off=off, data=data: _C.to_list(off, data, True)),
        ("validate_utf8", lambda off=off, data=data: _C.validate_utf8(off, data)),
        ("hash128", lambda off=off, data=data: hash128(StringTensor(off, data))),
        ("TextCleaner", lambda off=off, data=data: TextCleaner()(StringTensor(off, data))),
        ("QualityFilter", lambda off=off, data=data: QualityFilter()(StringTensor(off, data))),
        ("PIIMasker", lambda off=off, data=data: PIIMasker()(StringTensor(off, data))),
        ("StreamDeduplicator", lambda off=off, data=data: StreamDeduplicator()(StringTensor(off, data))),
        ("FusedPipeline", lambda off=off, data=data: FusedPipeline()(StringTensor(off, data))),
    ]
views, bufs = views_of()
calls += [
    ("views_hash64", lambda: OPS.views_hash64(views, bufs, 0)),
    ("views_prefix_match", lambda: OPS.views_prefix_match(views, bufs, "w1 w1 w1")),
    ("views_equal_scalar", lambda: OPS.views_equal_scalar(views, bufs, "w1 w1 w1 w1")),
    ("views_equal", lambda: OPS.views_equal(views, bufs, base.views, list(base.buffers))),
    ("offsets_from_views", lambda: OPS.offsets_from_views(views, bufs, False)),
    ("views_to_list", lambda: _C.views_to_list(views, bufs, True)),
]
threads = [threading.Thread(target=writer, daemon=True) for _ in range(2)]
for t in threads:
    t.start()
outcomes = {}
HEAVY = {"TextCleaner", "QualityFilter", "PIIMasker", "StreamDeduplicator", "FusedPipeline"}  # whole stages
only = set(sys.argv[2].split(",")) if len(sys.argv) > 2 else None   # for a diagnosis by hand
for name, fn in calls:
    if only and name not in only:
        continue
    print("running", name, file=sys.stderr, flush=True)
    for _ in range(ROUNDS if name not in HEAVY else max(2, ROUNDS // 2)):
        try:
            fn()
            outcomes.setdefault(name, set()).add("ok")
        except (ValueError, IndexError, TypeError) as e:
            outcomes.setdefault(name, set()).add(type(e).__name__)
stop.set()
for t in threads:
    t.join()
print("SURVIVED", sorted((k, sorted(v)) for k, v in outcomes.items()))
"""


def test_racing_writer_never_crashes_an_op():
    """Issue 19 item 10: offsets (views, index, mask) changed by another thread while an op
    runs with the GIL released give wrong strings or an error, never a crash."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _RACE_CHILD, "12"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "SURVIVED" in r.stdout, (
        f"the child died (returncode {r.returncode}): {r.stderr[-2000:]}")


def _ragged(rng, n, max_len, alphabet=b"ab\xc3\xa9x"):
    return [bytes(rng.choice(list(alphabet), size=int(rng.integers(0, max_len + 1)))).decode("utf-8", "replace")
            for _ in range(n)]


@pytest.mark.parametrize("wide", [False, True])
def test_offsets_ops_every_length_and_the_end_of_data(wide):
    """Issue 13: the offsets kernels compare up to 8 (16) bytes as words when those bytes lie inside
    data and fall back to memcmp near its end, and hash short strings grouped by XXH3's length
    class; every prefix / scalar length and every string length (including strings ending exactly
    at the end of a payload with no slack) against Python."""
    import numpy as np
    import xxhash

    rng = np.random.default_rng(7)
    items = _ragged(rng, 3000, 40) + ["", "a", "ab" * 9]
    other = [x if rng.random() < 0.5 else y for x, y in zip(items, _ragged(rng, len(items), 40))]
    for src, oth in ((items, other), (items[-3:], other[-3:]), (items[:1], other[:1])):
        st, st2 = StringTensor.from_list(src), StringTensor.from_list(oth)
        off, data = st.offsets, st.data.clone()  # exactly nbytes: no slack after the last string
        o2, d2 = st2.offsets, st2.data.clone()
        if wide:
            off, o2 = off.long(), o2.long()
        probes = {src[0], src[-1], "", "a", "ab", "aba", "ab" * 9} | {x[:k] for x in src[:50] for k in range(0, 20)}
        for p in sorted(probes):
            assert OPS.prefix_match(off, data, p).tolist() == [x.startswith(p) for x in src], p
            assert OPS.equal_scalar(off, data, p).tolist() == [x == p for x in src], p
        assert OPS.equal(off, data, o2, d2).tolist() == [x == y for x, y in zip(src, oth)]
        for seed in (0, 1, 2**64 - 1):
            want = [xxhash.xxh3_64_intdigest(x.encode(), seed=seed) for x in src]
            got = OPS.hash64(off, data, seed - (1 << 64) if seed >= 1 << 63 else seed)
            assert [h & (2**64 - 1) for h in got.tolist()] == want


def test_offsets_ops_refuse_bad_offsets_with_the_old_messages():
    """The element-wise ops check each pair of offsets as they read it (no snapshot, no separate
    validation pass): bad offsets still raise ValueError naming the argument."""
    data = torch.tensor(list(b"abcdef"), dtype=torch.uint8)
    cases = [(torch.tensor([0, 3, 2, 6], dtype=torch.int32), "non-decreasing"),
             (torch.tensor([-1, 3], dtype=torch.int64), "non-decreasing"),
             (torch.tensor([0, 3, 9], dtype=torch.int32), "past the end"),
             (torch.tensor([7], dtype=torch.int64), "past the end")]
    for off, msg in cases:
        for call in (lambda: OPS.prefix_match(off, data, "ab"), lambda: OPS.equal_scalar(off, data, "ab"),
                     lambda: OPS.hash64(off, data, 0), lambda: OPS.equal(off, data, off, data)):
            with pytest.raises(ValueError, match=msg):
                call()
    good = torch.tensor([0, 3, 6], dtype=torch.int32)
    with pytest.raises(ValueError, match="offsets_b"):
        OPS.equal(good, data, torch.tensor([0, 4, 2], dtype=torch.int32), data)


def test_views_compact_matches_a_mask():
    import numpy as np

    rng = np.random.default_rng(3)
    items = _ragged(rng, 500, 30)
    st = StringTensor.from_list(items)
    for p in (0.0, 0.02, 0.5, 1.0):
        m = torch.from_numpy(rng.random(len(items)) < p)
        got = OPS.views_compact(st.views, m)
        assert torch.equal(got, st.views[m])
        assert st.mask(m).tolist() == [x for x, k in zip(items, m.tolist()) if k]
    with pytest.raises(ValueError, match="mask"):
        OPS.views_compact(st.views, torch.ones(3, dtype=torch.bool))
    with pytest.raises(TypeError, match="mask"):
        OPS.views_compact(st.views, torch.ones(len(items), dtype=torch.int64))
