"""CUDA kernels of torch.ops.luminamoon.* against the CPU kernels, bit for bit.

The CPU kernels are the independent reference (core/, libxxhash for hash64).  Every op runs on
every data set (empty set, empty strings, every length class, a skewed set with 1-4 MB strings,
real or corpus-like text, an unaligned payload) for int32 and int64 offsets; then opcheck on
CUDA tensors, torch.compile(fullgraph=True) on CUDA, and bad input raising before any kernel.
"""
import os

import numpy as np
import pytest
import torch

import luminamoon  # noqa: F401  (loads the extension: registers torch.ops.luminamoon.*)
from gpu_data import from_bytes_list, mutated, plant

# LM_GPU_TESTS_DEVICE=cpu runs the same tests with the CPU standing in for the GPU: a dry run of
# the tests' own logic on machines without a GPU (it proves nothing about the CUDA kernels).
DEV = os.environ.get("LM_GPU_TESTS_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEV == "cuda" and not torch.cuda.is_available(), reason="no CUDA device")

OPS = torch.ops.luminamoon
DATASETS = ["empty_set", "empty_strings", "length_classes", "skewed", "real", "unaligned"]
DTYPES = [torch.int32, torch.int64]


def both(ds, dtype):
    return ds.tensors(dtype, "cpu"), ds.tensors(dtype, DEV)


def assert_same(cpu, gpu, what):
    if isinstance(cpu, (tuple, list)):
        assert len(cpu) == len(gpu)
        for k, (a, b) in enumerate(zip(cpu, gpu)):
            assert_same(a, b, f"{what}[{k}]")
        return
    assert gpu.device.type == torch.device(DEV).type, what
    g = gpu.cpu()
    assert cpu.dtype == g.dtype, f"{what}: dtype {cpu.dtype} vs {g.dtype}"
    assert cpu.shape == g.shape, f"{what}: shape {tuple(cpu.shape)} vs {tuple(g.shape)}"
    if not torch.equal(cpu, g):
        bad = (cpu != g).nonzero()[:5].tolist()
        raise AssertionError(f"{what}: CPU and CUDA differ at {bad}")


def make_pattern(rng, length):
    return bytes(rng.integers(33, 127, size=length, dtype=np.uint8))  # printable ASCII: its own UTF-8


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_prefix_match_and_equal_scalar(datasets, name, dtype):
    """Patterns of 0, 1, 4, 8, 9 (warp path), 40, 512, 513 and 600 (device copy) and 70000 bytes,
    planted at the start of a share of the strings so that matches happen."""
    ds = datasets[name]
    rng = np.random.default_rng(3)
    for plen in (0, 1, 4, 8, 9, 40, 512, 513, 600, 70000):
        pat = make_pattern(rng, plen)
        data = plant(ds, pat, rng)
        oc, dc = ds.offsets.to(dtype), data
        og, dg = oc.to(DEV), dc.to(DEV)
        s = pat.decode("ascii")
        cpu = OPS.prefix_match(oc, dc, s)
        assert_same(cpu, OPS.prefix_match(og, dg, s), f"prefix_match[{plen}]")
        assert_same(OPS.equal_scalar(oc, dc, s), OPS.equal_scalar(og, dg, s), f"equal_scalar[{plen}]")
        if ds.n and plen and plen < 1000:
            lens = ds.offsets[1:] - ds.offsets[:-1]
            assert cpu.any() or not (lens >= plen).any()  # the planted strings do match
    if name == "real":
        oc, dc = ds.tensors(dtype, "cpu")
        og, dg = ds.tensors(dtype, DEV)
        for s in ["The", "http", "über", "数据", "a" * 9, "Package: ", "x" * 700]:
            assert_same(OPS.prefix_match(oc, dc, s), OPS.prefix_match(og, dg, s), f"prefix_match {s[:10]!r}")
            assert_same(OPS.equal_scalar(oc, dc, s), OPS.equal_scalar(og, dg, s), f"equal_scalar {s[:10]!r}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_equal(datasets, name, dtype):
    ds = datasets[name]
    rng = np.random.default_rng(4)
    (oc, dc), (og, dg) = both(ds, dtype)
    # identical; with changed bytes; shifted by one string (different lengths mostly)
    db = mutated(ds, rng)
    cases = [(oc, dc, oc, dc.clone()), (oc, dc, oc, db)]
    if ds.n >= 2:
        perm = torch.roll(torch.arange(ds.n), 1)
        o2, d2 = OPS.gather(oc, dc, perm)
        cases.append((oc, dc, o2, d2))
    for k, (a_o, a_d, b_o, b_d) in enumerate(cases):
        cpu = OPS.equal(a_o, a_d, b_o, b_d)
        gpu = OPS.equal(a_o.to(DEV), a_d.to(DEV), b_o.to(DEV), b_d.to(DEV))
        assert_same(cpu, gpu, f"equal case {k}")
    if ds.n:
        assert OPS.equal(og, dg, og, dg.clone()).all().item()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_hash64(datasets, name, dtype):
    ds = datasets[name]
    (oc, dc), (og, dg) = both(ds, dtype)
    for seed in (0, 1, 12345, -1, -(2**63), 2**63 - 1):
        assert_same(OPS.hash64(oc, dc, seed), OPS.hash64(og, dg, seed), f"hash64 seed={seed}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_pad_bytes(datasets, name, dtype):
    ds = datasets[name]
    (oc, dc), (og, dg) = both(ds, dtype)
    for max_len, pad, bos, eos in [(0, 0, 256, 257), (1, 0, 256, 257), (2, 7, 256, 257), (17, 0, -1, -1),
                                   (64, 258, 256, -1), (300, 258, -1, 257), (1000, -100, 256, 257)]:
        if ds.n * max_len > 40_000_000:
            max_len = 40_000_000 // max(ds.n, 1)
        assert_same(OPS.pad_bytes(oc, dc, max_len, pad, bos, eos), OPS.pad_bytes(og, dg, max_len, pad, bos, eos),
                    f"pad_bytes({max_len},{pad},{bos},{eos})")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_gather(datasets, name, dtype):
    ds = datasets[name]
    rng = np.random.default_rng(6)
    (oc, dc), (og, dg) = both(ds, dtype)
    indices = [torch.empty(0, dtype=torch.int64)]
    if ds.n:
        indices += [
            torch.from_numpy(rng.integers(0, ds.n, size=ds.n)),  # with repeats
            torch.arange(ds.n - 1, -1, -1),  # reversed
            torch.from_numpy(rng.integers(0, ds.n, size=7)),
        ]
    for idx in indices:
        cpu = OPS.gather(oc, dc, idx)
        gpu = OPS.gather(og, dg, idx.to(DEV))
        assert_same(cpu, gpu, f"gather({idx.numel()})")
        assert int(gpu[0][0]) == 0
        assert gpu[1].data_ptr() != dg.data_ptr() or gpu[1].numel() == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_compact(datasets, name, dtype):
    ds = datasets[name]
    rng = np.random.default_rng(7)
    (oc, dc), (og, dg) = both(ds, dtype)
    masks = [torch.zeros(ds.n, dtype=torch.bool), torch.ones(ds.n, dtype=torch.bool),
             torch.from_numpy(rng.random(ds.n) < 0.5), torch.from_numpy(rng.random(ds.n) < 0.01)]
    for k, mask in enumerate(masks):
        cpu = OPS.compact(oc, dc, mask)
        gpu = OPS.compact(og, dg, mask.to(DEV))
        assert_same(cpu, gpu, f"compact mask {k}")
        assert gpu[1].data_ptr() != dg.data_ptr() or gpu[1].numel() == 0


def test_gather_of_huge_strings_is_exact(datasets):
    """The copy kernel splits MB-long strings over many blocks: check the bytes themselves."""
    ds = datasets["skewed"]
    og, dg = ds.tensors(torch.int64, DEV)
    lens = (ds.offsets[1:] - ds.offsets[:-1])
    idx = torch.nonzero(lens > 100_000).flatten()
    idx = torch.cat([idx, idx.flip(0), torch.tensor([0, 1, 2])])
    go, gd = OPS.gather(og, dg, idx.to(DEV))
    go, gd = go.cpu(), gd.cpu()
    for k, i in enumerate(idx.tolist()):
        assert bytes(gd[int(go[k]):int(go[k + 1])].numpy()) == ds.get(i)


# ---------------------------------------------------------------- opcheck and compile

def small(dtype=torch.int32):
    items = [b"apple", b"", b"banana", b"apricot", b"x" * 300, b"app", "über".encode(), b"y" * 2000]
    return from_bytes_list("small", items).tensors(dtype, DEV)


@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck_on_cuda(dtype):
    off, data = small(dtype)
    o2 = off.flip(0)
    o2 = (o2[0] - o2).contiguous()  # the strings reversed: offsets of the reversed payload
    d2 = data.flip(0).contiguous()
    cases = [
        (OPS.prefix_match.default, (off, data, "app")),
        (OPS.equal.default, (off, data, o2, d2)),
        (OPS.equal_scalar.default, (off, data, "banana")),
        (OPS.hash64.default, (off, data, 7)),
        (OPS.pad_bytes.default, (off, data, 12, 0, 256, 257)),
        (OPS.gather.default, (off, data, torch.tensor([3, 0, 3, 7], device=DEV))),
        (OPS.compact.default, (off, data, torch.tensor([True, False] * 4, device=DEV))),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_compile_fullgraph_on_cuda():
    off, data = small()
    o2, d2 = OPS.gather(off, data, torch.arange(7, -1, -1, device=DEV))

    def f(off, data, o2, d2):
        m = OPS.prefix_match(off, data, "app")
        e = OPS.equal(off, data, o2, d2)
        s = OPS.equal_scalar(off, data, "apple")
        h = OPS.hash64(off, data, 11)
        tok, lengths = OPS.pad_bytes(off, data, 16, 0, 1, 2)
        return m & ~e, s, h, (tok * m[:, None]).sum(1) + lengths

    eager = f(off, data, o2, d2)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)(off, data, o2, d2)
    for a, b in zip(eager, compiled):
        assert b.device.type == torch.device(DEV).type and torch.equal(a, b)


def test_compile_dynamic_output_on_cuda(monkeypatch):
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True)
    off, data = small()

    def f(off, data, mask, index):
        co, cd = OPS.compact(off, data, mask)
        go, gd = OPS.gather(co, cd, index)
        return go, gd, OPS.hash64(go, gd, 0)

    mask = torch.tensor([True, False, True, True, False, True, True, True], device=DEV)
    index = torch.tensor([0, 2, 1], device=DEV)
    eager = f(off, data, mask, index)
    torch._dynamo.reset()
    compiled = torch.compile(f, fullgraph=True)(off, data, mask, index)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


def test_attention_mask_matches_a_reference():
    """attention_mask's CUDA kernel (torch_ops/ops_cuda.cu, stable ABI) against torch's own comparison."""
    lengths = torch.tensor([0, 1, 5, 9, -2, 7, 1 << 40], dtype=torch.int64)
    for max_len in (0, 1, 7, 300):
        got = OPS.attention_mask(lengths.to(DEV), max_len)
        assert got.device.type == torch.device(DEV).type and got.dtype == torch.int64
        want = (torch.arange(max_len)[None, :] < lengths.clamp(0, max_len)[:, None]).long()
        assert torch.equal(got.cpu(), want), max_len
    rng = torch.Generator().manual_seed(5)
    big = torch.randint(-5, 3000, (5000,), generator=rng)
    want = (torch.arange(2048)[None, :] < big.clamp(0, 2048)[:, None]).long()
    assert torch.equal(OPS.attention_mask(big.to(DEV), 2048).cpu(), want)
    assert OPS.attention_mask(torch.empty(0, dtype=torch.int64, device=DEV), 5).shape == (0, 5)
    with pytest.raises(TypeError, match="lengths must be int64"):
        OPS.attention_mask(lengths.to(DEV).int(), 4)
    with pytest.raises(ValueError, match="max_len"):
        OPS.attention_mask(lengths.to(DEV), -1)


# ------------------------------------------------------------------------ bad input

def test_bad_input_raises_before_any_kernel():
    off, data = small(torch.int64)
    if DEV == "cuda":  # mixed devices
        with pytest.raises(ValueError, match="same device"):
            OPS.hash64(off, data.cpu(), 0)
        with pytest.raises(ValueError, match="same device"):
            OPS.prefix_match(off.cpu(), data, "a")
        with pytest.raises(ValueError, match="index"):
            OPS.gather(off, data, torch.tensor([0]))  # index on the CPU
        with pytest.raises(ValueError, match="mask"):
            OPS.compact(off, data, torch.ones(8, dtype=torch.bool))  # mask on the CPU
    with pytest.raises(TypeError, match="offsets"):
        OPS.hash64(off.float(), data, 0)  # wrong dtype
    with pytest.raises(TypeError, match="data"):
        OPS.hash64(off, data.to(torch.int32), 0)
    with pytest.raises(ValueError, match="past the end"):
        bad = off.clone()
        bad[-1] = data.numel() + 1
        OPS.hash64(bad, data, 0)
    with pytest.raises(ValueError, match="past the end"):
        OPS.pad_bytes(off, data[:-5].clone(), 8)
    with pytest.raises(ValueError, match="non-decreasing"):
        bad = off.clone()
        bad[2] = bad[3] + 1  # offsets[3] < offsets[2]
        OPS.equal_scalar(bad, data, "x")
    with pytest.raises(ValueError, match="contiguous"):
        OPS.hash64(torch.stack([off, off], 1)[:, 0], data, 0)
    with pytest.raises(ValueError, match="1-D"):
        OPS.hash64(off[None], data, 0)
    with pytest.raises(IndexError):
        OPS.gather(off, data, torch.tensor([0, 8], device=DEV))
    with pytest.raises(IndexError):
        OPS.gather(off, data, torch.tensor([-1], device=DEV))
    with pytest.raises(TypeError, match="index"):
        OPS.gather(off, data, torch.tensor([0], device=DEV, dtype=torch.int32))
    with pytest.raises(TypeError, match="mask"):
        OPS.compact(off, data, torch.ones(8, device=DEV, dtype=torch.uint8))
    with pytest.raises(ValueError, match="mask"):
        OPS.compact(off, data, torch.ones(7, device=DEV, dtype=torch.bool))
    with pytest.raises(ValueError, match="max_len"):
        OPS.pad_bytes(off, data, -1)
    with pytest.raises(TypeError):
        OPS.equal(off, data, off.int(), data)
    with pytest.raises(ValueError):
        OPS.equal(off, data, off[:-1].contiguous(), data)
    if DEV == "cuda":
        torch.cuda.synchronize()  # nothing bad was launched: the context is healthy
    assert OPS.hash64(off, data, 0).shape == (8,)


def test_string_tensor_round_trip_to_cuda():
    """The Python StringTensor onto the device (pinned staging) and back."""
    items = ["alpha", "", "βeta", "x" * 5000]
    st = luminamoon.StringTensor.from_list(items)
    g = st.to(DEV, non_blocking=True)
    assert g.offsets.device.type == torch.device(DEV).type
    h = OPS.hash64(g.offsets, g.data, 0).cpu()
    assert torch.equal(h, OPS.hash64(st.offsets, st.data, 0))
    assert g.to("cpu").tolist() == items
    for _ in range(20):  # device -> host with non_blocking=True: synchronous, never stale bytes
        g2 = st.to(DEV)
        assert g2.to("cpu", non_blocking=True).tolist() == items
