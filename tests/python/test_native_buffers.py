"""luminamoon._C without libtorch (issue 15 part 2, torch_ops/bind_array.h): arrays cross between
Python and the pybind11 module through DLPack / the buffer protocol, and the buffers _C allocates
(malloc'd, or mmap'd past 8 MB) are owned by the tensors it returns and freed exactly once.

No ASan run of the Python tests exists, so ownership is checked by its effects: building and dropping
many results leaves the process's resident memory flat (a leak of any of them would grow it by the
total), tensors outlive every other object of the call, and nothing crashes (a double free aborts).
"""
import gc
import os

import numpy as np
import pytest
import torch

import luminamoon as lm
from luminamoon import _C


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _settle() -> int:
    gc.collect()
    return _rss()


def _docs(n, seed):
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "ünïcödé", "数据", "x" * 40]
    return [" ".join(rng.choice(words, size=int(rng.integers(5, 60)))) + f" {i}" for i in range(n)]


def _churn(docs, big):
    st = lm.StringTensor.from_list(docs)
    off, data = st.offsets, st.data
    assert st.tolist()[:3] == docs[:3]
    h = _C.hash128(off, data, 0)
    assert h.shape == (len(docs), 2)
    out = lm.TextCleaner()(st)
    assert out.texts.tolist()[:1] == [docs[0]]
    d = lm.StreamDeduplicator()
    r = d._obj.run(off, data, 1)
    assert [int(x) for x in r[2][:3]] == [0, 1, 2]
    is_new = d.check_insert_hashes(h)
    assert not bool(is_new.any())
    ends, status, toff, tdata = _C.jsonl_scan(b"".join(b'{"t": "%d"}\n' % i for i in range(200)), "t", -1)
    assert ends.numel() == 200 and toff.numel() == 201
    mh = lm.MinHash(seed=1)
    sig = mh.signatures(st)
    assert sig.shape[0] == len(docs)
    st_big = lm.StringTensor.from_list(big)  # > 8 MB: an mmap'd payload
    assert st_big.data.numel() == sum(len(b) for b in big)
    return st_big.data.numel()


def test_results_freed_exactly_once_rss_flat():
    docs = _docs(2000, 1)
    big = ["y" * (1 << 20)] * 12
    for _ in range(5):  # warm-up: allocator arenas, torch's thread pools, caches
        _churn(docs, big)
    before = _settle()
    total = 0
    for _ in range(60):
        total += _churn(docs, big)
    after = _settle()
    # ~60 x (12 MB mmap'd payload + ~1 MB of stage / hash / scan results) went through; a leak of
    # any one of them would show as >= 60 MB.
    assert total >= 60 * 12 * (1 << 20)
    assert after - before < 24 << 20, f"RSS grew by {(after - before) >> 20} MB over 60 rounds"


def test_tensors_outlive_the_call_objects():
    docs = _docs(300, 2)
    st = lm.StringTensor.from_list(docs)
    c = lm.TextCleaner()
    off, data, src, rea = c._obj.run(st.offsets, st.data, 1)
    del c, st
    gc.collect()
    assert lm.StringTensor(off, data).tolist() == docs
    assert src.tolist() == list(range(300)) and rea.dtype == torch.int32
    # a view of a result keeps the whole buffer alive
    part = data[10:20].clone()
    tail = data[5:]
    del data, off
    gc.collect()
    assert bytes(tail[5:15].numpy()) == bytes(part.numpy())


def test_inputs_from_numpy_and_bytes_and_strided_tensors():
    docs = ["a", "bc", "", "déf"]
    st = lm.StringTensor.from_list(docs)
    off, data = st.offsets, st.data
    assert _C.to_list(off.numpy(), data.numpy(), False) == docs
    assert _C.to_list(off, bytes(data.numpy()), False) == docs
    assert torch.equal(_C.hash128(off.numpy(), data.numpy(), 3), _C.hash128(off, data, 3))
    # a strided (every other) int64 offsets tensor: stages copy it; to_list asks for contiguous
    wide = torch.stack([off.long(), off.long()], 1).reshape(-1)[::2]
    assert not wide.is_contiguous()
    r = lm.TextCleaner()._obj.run(wide, data, 1)
    assert lm.StringTensor(r[0], r[1]).tolist() == [d for d in docs if d]
    with pytest.raises(ValueError, match="contiguous"):
        _C.to_list(wide, data, False)
    # the same hash three times: new once
    h = torch.zeros(3, 2, dtype=torch.int64, requires_grad=False)
    assert lm.StreamDeduplicator().check_insert_hashes(h).tolist() == [True, False, False]


def test_error_types_survive():
    off = torch.tensor([0, 5, 2], dtype=torch.int32)
    data = torch.zeros(5, dtype=torch.uint8)
    with pytest.raises(ValueError, match="non-decreasing"):
        _C.to_list(off, data, False)
    with pytest.raises(TypeError, match="int32 or int64"):
        _C.to_list(off.float(), data, False)
    with pytest.raises(TypeError, match="torch.Tensor or a numpy array"):
        _C.to_list([0, 1], data, False)
    with pytest.raises(ValueError, match="invalid argument|outside data"):
        lm.TextCleaner()._obj.run(off, data, 1)
    with pytest.raises(ValueError, match="CPU"):
        lm.TextCleaner()._obj.run(torch.zeros(2, dtype=torch.int64, device="meta"), data, 1)


def test_module_links_no_torch():
    """_C is a plain CPython extension: no libtorch / libc10 / libtorch_python among its needed libraries."""
    import subprocess
    out = subprocess.run(["readelf", "-d", _C.__file__], capture_output=True, text=True, check=True).stdout
    needed = [ln.split("[", 1)[1].rstrip("]") for ln in out.splitlines() if "(NEEDED)" in ln]
    assert not [n for n in needed if "torch" in n or "c10" in n], needed
