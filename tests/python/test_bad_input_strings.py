"""Bad input to StringTensor and the operators raises a clear Python exception naming the argument."""
import numpy as np
import pytest
import torch

from luminamoon import StringTensor, ops

OPS = torch.ops.luminamoon


def good():
    st = StringTensor.from_list(["alpha", "a much longer string here", ""])
    return st.offsets, st.data


@pytest.mark.parametrize("items, exc, msg", [
    (["ok", 3], TypeError, r"strings\[1\] must be str"),
    (["ok", None], TypeError, r"strings\[1\] must be str.*NoneType"),
    ([b"\xff\xfe"], ValueError, r"strings\[0\] is not valid UTF-8"),
    (["\ud800"], ValueError, r"strings\[0\] cannot be encoded as UTF-8"),
    ("not a list", TypeError, "sequence of str"),
    (42, TypeError, "iterable of str"),
])
def test_from_list_rejects(items, exc, msg):
    with pytest.raises(exc, match=msg):
        StringTensor.from_list(items)


@pytest.mark.parametrize("offsets, data, exc, msg", [
    (torch.tensor([0, 3, 2]), torch.zeros(3, dtype=torch.uint8), ValueError, "^StringTensor.from_buffers: .*non-decreasing"),
    (torch.tensor([0, 2, 9]), torch.zeros(3, dtype=torch.uint8), ValueError,
     "^StringTensor.from_buffers: .*past the end of data"),
    (torch.tensor([-1, 2]), torch.zeros(3, dtype=torch.uint8), ValueError, "^StringTensor.from_buffers: .*non-negative"),
    (torch.tensor([0.0, 1.0]), torch.zeros(3, dtype=torch.uint8), TypeError, "offsets must have dtype int32 or int64"),
    (torch.tensor([0, 1]), torch.zeros(3, dtype=torch.int32), TypeError, "data must have dtype uint8"),
    (torch.tensor([[0, 1]]), torch.zeros(3, dtype=torch.uint8), ValueError, "offsets must be 1-D"),
    (torch.tensor([], dtype=torch.int64), torch.zeros(3, dtype=torch.uint8), ValueError, "N\\+1 >= 1"),
    ([0, 1], torch.zeros(3, dtype=torch.uint8), TypeError, "offsets must be a torch.Tensor"),
    (torch.tensor([0, 2]), torch.tensor([0xC3, 0x28], dtype=torch.uint8), ValueError, "string 0 is not valid UTF-8"),
])
def test_from_buffers_rejects(offsets, data, exc, msg):
    with pytest.raises(exc, match=msg):
        StringTensor.from_buffers(offsets, data)


def test_ops_reject_bad_tensors():
    off, data = good()
    with pytest.raises(TypeError, match="offsets must be an int32 or int64 tensor"):
        OPS.prefix_match(off.float(), data, "a")
    with pytest.raises(TypeError, match="data must be a uint8 tensor"):
        OPS.hash64(off, data.int(), 0)
    with pytest.raises(ValueError, match="offsets must be 1-D"):
        OPS.equal_scalar(off[None], data, "a")
    with pytest.raises(ValueError, match="must be contiguous"):
        OPS.prefix_match(off.repeat_interleave(2)[::2], data, "a")
    with pytest.raises(ValueError, match="non-decreasing"):
        OPS.hash64(torch.tensor([0, 5, 3], dtype=torch.int32), data, 0)
    with pytest.raises(ValueError, match="past the end of data"):
        OPS.pad_bytes(torch.tensor([0, 5, 300], dtype=torch.int32), data, 8)
    with pytest.raises(ValueError, match="max_len must be >= 0"):
        OPS.pad_bytes(off, data, -1)
    with pytest.raises(ValueError, match="same number of strings"):
        OPS.equal(off, data, off[:2], data)
    with pytest.raises(TypeError, match="same dtype"):
        OPS.equal(off, data, off.long(), data)
    with pytest.raises(IndexError, match=r"index\[1\] = 3 is out of range"):
        OPS.gather(off, data, torch.tensor([0, 3]))
    with pytest.raises(IndexError, match="out of range"):
        OPS.gather(off, data, torch.tensor([-1]))
    with pytest.raises(TypeError, match="index must be int64"):
        OPS.gather(off, data, torch.tensor([0], dtype=torch.int32))
    with pytest.raises(TypeError, match="mask must be bool"):
        OPS.compact(off, data, torch.tensor([1, 0, 1]))
    with pytest.raises(ValueError, match="mask must have shape"):
        OPS.compact(off, data, torch.tensor([True]))


def test_ops_reject_mixed_devices():
    off, data = good()
    with pytest.raises((ValueError, RuntimeError), match="device"):
        OPS.prefix_match(off, data.to("meta"), "a")
    with pytest.raises((ValueError, RuntimeError), match="device"):
        OPS.gather(off, data, torch.tensor([0], device="meta"))


def test_views_ops_reject_bad_views():
    off, data = good()
    views = OPS.views_from_offsets(off, data)
    bad = views.clone()
    bad[1, 8:12] = torch.tensor([5, 0, 0, 0], dtype=torch.uint8)  # buffer index 5 of 1
    with pytest.raises(ValueError, match="outside its payload buffer"):
        OPS.views_prefix_match(bad, [data], "a much")  # needs the payload of view 1
    # a corrupt view whose payload is never needed is decided on its head alone
    assert OPS.views_prefix_match(bad, [data], "zz").tolist() == [False, False, False]
    with pytest.raises(ValueError, match="outside its payload buffer"):
        OPS.offsets_from_views(bad, [data])
    bad = views.clone()
    bad[1, 12:16] = torch.tensor([255, 255, 0, 0], dtype=torch.uint8)  # offset past the buffer
    with pytest.raises(ValueError, match="outside its payload buffer"):
        OPS.views_hash64(bad, [data], 0)
    with pytest.raises(ValueError, match=r"shape \[N, 16\]"):
        OPS.views_equal_scalar(views[:, :8].contiguous(), [data], "a")
    with pytest.raises(TypeError, match=r"buffers\[0\] must be uint8"):
        OPS.views_hash64(views, [data.int()], 0)
    with pytest.raises(ValueError, match="int32 offsets"):
        # 3 views of 2^30 bytes each would need int64 offsets: refused before any copy
        v = views[1:2].repeat(3, 1)
        v[:, 0:4] = torch.tensor(list((1 << 30).to_bytes(4, "little")), dtype=torch.uint8)
        v[:, 12:16] = 0
        OPS.offsets_from_views(v, [torch.zeros(1 << 30, dtype=torch.uint8)], False)


def test_indexing_rejects():
    st = StringTensor.from_list(["a", "b", "c"])
    for s in (st, StringTensor(views=st.views, buffers=st.buffers)):
        with pytest.raises(IndexError, match="out of range"):
            s[3]
        with pytest.raises(IndexError, match="out of range"):
            s[-4]
        with pytest.raises(IndexError, match="index 7 is out of range"):
            s[torch.tensor([0, 7])]
        with pytest.raises(IndexError, match="index -9 is out of range"):
            s[[-9]]
        with pytest.raises(ValueError, match="mask must have shape"):
            s[torch.tensor([True, False])]
        with pytest.raises(TypeError, match="bool or integer"):
            s[torch.tensor([0.5])]
        with pytest.raises(TypeError, match="indices must be"):
            s["x"]
        with pytest.raises(TypeError, match="prefix must be str"):
            s.starts_with(b"a")
        with pytest.raises(ValueError, match="same length"):
            s.fast_eq(["a"])
        with pytest.raises(TypeError, match="other must be"):
            s.fast_eq(3)


def test_from_numpy_and_arrow_reject():
    with pytest.raises(TypeError, match="array must hold strings"):
        StringTensor.from_numpy(np.arange(3))
    with pytest.raises(TypeError, match="numpy.ndarray"):
        StringTensor.from_numpy([1, 2])
    with pytest.raises(ValueError, match="1-D"):
        StringTensor.from_numpy(np.array([["a"]]))
    with pytest.raises(TypeError, match="Arrow"):
        StringTensor.from_arrow(object())
