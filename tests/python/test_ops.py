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
    o2, d2 = StringTensor.from_list(list(reversed(ITEMS))).to_torch()
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
    o2, d2 = StringTensor.from_list(list(reversed(ITEMS))).to_torch()

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
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
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
    off, data = big.to_torch()
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
