"""torch.ops.luminamoon.minhash on CUDA against the CPU kernel, bit for bit (issue 12).

Layouts: random lengths with runs of empty documents, documents spanning many 256-shingle tiles
(one of 1M shingles), offsets that start after 0 and end before the last shingle, 13 / 112 / 200
hash functions (more than the 128 threads of a block), precision 64 and 32, real shingles from
luminamoon.MinHash on generated text; then opcheck and torch.compile(fullgraph=True) on CUDA, and
bad offsets raising ValueError before the kernel runs.
LM_GPU_TESTS_DEVICE=cpu is a dry run of the test logic on the CPU (proves nothing about CUDA).
"""
import os
import random

import pytest
import torch

import luminamoon

DEV = os.environ.get("LM_GPU_TESTS_DEVICE", "cuda")
pytestmark = pytest.mark.skipif(DEV == "cuda" and not torch.cuda.is_available(), reason="no CUDA device")
OP = torch.ops.luminamoon.minhash


def layout(seed, n_docs=3000, big=0):
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 300, (n_docs,), generator=g)
    lens[::4] = 0
    lens[100:140] = 0
    lens[7] = 256 * 9 + 5
    if big:
        lens[n_docs // 2] = big
    off = torch.zeros(n_docs + 1, dtype=torch.int64)
    off[1:] = lens.cumsum(0)
    h = torch.randint(-2**63, 2**63 - 1, (int(off[-1]),), generator=g, dtype=torch.int64)
    return h, off


def params(H, seed=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(1, 2**61 - 1, (H,), generator=g, dtype=torch.int64),
            torch.randint(0, 2**61 - 1, (H,), generator=g, dtype=torch.int64))


def same(h, off, a, b, precision=64):
    cpu = OP(h, off, a, b, precision)
    gpu = OP(h.to(DEV), off.to(DEV), a.to(DEV), b.to(DEV), precision)
    assert gpu.device.type == torch.device(DEV).type
    g = gpu.cpu()
    assert g.shape == cpu.shape and g.dtype == cpu.dtype
    if not torch.equal(cpu, g):
        bad = (cpu != g).any(dim=1).nonzero().flatten()[:10].tolist()
        raise AssertionError(f"minhash: CPU and CUDA differ for documents {bad}")
    return cpu


@pytest.mark.parametrize("H", [13, 112, 200])
@pytest.mark.parametrize("precision", [64, 32])
def test_minhash_cuda_equals_cpu(H, precision):
    h, off = layout(H + precision)
    a, b = params(H)
    out = same(h, off, a, b, precision)
    assert bool((out[off[1:] == off[:-1]] == -1).all())
    same(h, off[50:2001].clone(), a, b, precision)  # starts after 0, ends before the last shingle


def test_minhash_cuda_skewed_huge_document():
    h, off = layout(9, n_docs=2000, big=1_000_000)
    a, b = params(112)
    same(h, off, a, b)


def test_minhash_cuda_real_shingles():
    rng = random.Random(5)
    vocab = [f"w{i}" for i in range(3000)] + ["the", "a", "of", "Ünïcode", "don't", "x.y", "42"]
    texts = [" ".join(rng.choice(vocab) for _ in range(rng.randrange(0, 400))) for _ in range(2000)]
    for precision in (64, 32):
        mh = luminamoon.MinHash(precision=precision)
        h, off = mh.shingles(texts)
        out = same(h, off, mh.a, mh.b, precision)
        assert torch.equal(out, mh.signatures(texts))


def test_minhash_opcheck_and_compile_on_cuda():
    h, off = layout(2, n_docs=200)
    a, b = params(112)
    args = (h.to(DEV), off.to(DEV), a.to(DEV), b.to(DEV))
    torch.library.opcheck(OP.default, args + (64,))
    torch.library.opcheck(OP.default, args + (32,))
    f = torch.compile(lambda h, off, a, b: OP(h, off, a, b) >> 3, fullgraph=True)
    assert torch.equal(f(*args).cpu(), OP(h, off, a, b) >> 3)


def test_minhash_bad_input_on_cuda():
    h, off = layout(4, n_docs=100)
    a, b = params(16)
    d = lambda t: t.to(DEV)  # noqa: E731
    bad = off.clone()
    bad[5] = bad[6] + 1
    with pytest.raises(ValueError, match="non-decreasing"):
        OP(d(h), d(bad), d(a), d(b))
    past = off.clone()
    past[-1] = h.numel() + 1
    with pytest.raises(ValueError, match="past the end"):
        OP(d(h), d(past), d(a), d(b))
    with pytest.raises(TypeError, match="int64"):
        OP(d(h).int(), d(off), d(a), d(b))
    if DEV == "cuda":
        with pytest.raises(ValueError, match="device"):
            OP(d(h), off, d(a), d(b))
        torch.cuda.synchronize()
    assert OP(d(h), d(off[:1]), d(a), d(b)).shape == (0, 16)
