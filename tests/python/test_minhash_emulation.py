"""csrc/minhash.cu (torch.ops.luminamoon.minhash on CUDA) under the host emulation of tests/emu.

The kernel's device code runs as host C++ (tests/emu/build.py: blocks, threads as fibers, __shared__,
__syncthreads, atomicMin) and is compared bit for bit with the CPU operator on layouts that exercise
every path of its tiling: documents cut by tile boundaries and spread over many tiles, runs of empty
documents, offsets that start after 0 and end before the last shingle, more hash functions than
threads per block, precision 32, and real shingles of the shared corpus.  A planted off-by-one must
make the comparison fail.  No GPU needed: this proves the logic, tests/gpu proves the hardware.
"""
import pathlib
import sys

import pytest
import torch

import luminamoon

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "emu")]
from build import build  # noqa: E402
from emu_ops import EmuError, EmuOps  # noqa: E402

from conftest import corpus_texts  # noqa: E402

TILE = 256


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    return EmuOps(build(tmp_path_factory.mktemp("emu_minhash")))


def layout(seed, n_docs=60, big=3 * TILE + 17):
    """Document lengths with empties, tile-crossing and multi-tile documents."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, 40, (n_docs,), generator=g)
    lens[::5] = 0
    lens[7] = big               # spans several tiles
    lens[8:12] = 0              # a run of empty documents right after it
    lens[20] = TILE             # exactly one tile long
    lens[-1] = 0                # ends with an empty document
    off = torch.zeros(n_docs + 1, dtype=torch.int64)
    off[1:] = lens.cumsum(0)
    h = torch.randint(-2**63, 2**63 - 1, (int(off[-1]),), generator=g, dtype=torch.int64)
    return h, off


def params(H, seed=1):
    g = torch.Generator().manual_seed(seed + 100)
    a = torch.randint(1, 2**61 - 1, (H,), generator=g, dtype=torch.int64)
    b = torch.randint(0, 2**61 - 1, (H,), generator=g, dtype=torch.int64)
    return a, b


def check(emu, h, off, a, b, precision=64):
    cpu = torch.ops.luminamoon.minhash(h, off, a, b, precision)
    got = emu.minhash(h, off, a, b, precision)
    assert cpu.shape == got.shape and cpu.dtype == got.dtype
    if not torch.equal(cpu, got):
        bad = (cpu != got).any(dim=1).nonzero().flatten()[:10].tolist()
        raise AssertionError(f"minhash: CPU and emulated CUDA differ for documents {bad}")
    return cpu


@pytest.mark.parametrize("H", [112, 13, 200])
@pytest.mark.parametrize("precision", [64, 32])
def test_kernel_matches_cpu(emu, H, precision):
    h, off = layout(H * 7 + precision)
    a, b = params(H)
    out = check(emu, h, off, a, b, precision)
    assert bool((out[off[1:] == off[:-1]] == -1).all())


def test_offsets_not_starting_at_zero_and_partial_end(emu):
    h, off = layout(3)
    a, b = params(112)
    sub = off[10:31].clone()          # starts inside the array, ends before its end
    check(emu, h, sub, a, b)
    check(emu, h, off[:1].clone(), a, b)  # zero documents
    check(emu, h[:0], torch.zeros(4, dtype=torch.int64), a, b)  # only empty documents, no shingles


def test_real_shingles(emu):
    texts = corpus_texts(400)
    mh = luminamoon.MinHash()
    h, off = mh.shingles(texts)
    out = check(emu, h, off, mh.a, mh.b)
    assert torch.equal(out, mh.signatures(texts))


def test_invalid_offsets_are_reported_and_memory_safe(emu):
    h, off = layout(5)
    a, b = params(16)
    bad = off.clone()
    bad[4] = bad[5] + 3
    with pytest.raises(ValueError, match="flags 2"):
        emu.minhash(h, bad, a, b)
    past = off.clone()
    past[-1] = h.numel() + 5
    with pytest.raises(ValueError, match="flags 4"):
        emu.minhash(h, past, a, b)
    neg = off.clone()
    neg[0] = -3
    with pytest.raises(ValueError, match="flags 1"):
        emu.minhash(h, neg, a, b)
    # the kernel alone clamps whatever the offsets hold: defined shapes, no fault
    wild = torch.tensor([5, -100, 10**12, 3, 2**40, 0], dtype=torch.int64)
    assert emu.minhash_unvalidated(h, wild, a, b).shape == (5, 16)


@pytest.mark.parametrize("plant", [
    ("minhash.cu", "if (pos >= end) {", "if (pos > end) {"),
    ("minhash.cu", "if (d >= n || pos < beg) continue;", "if (d >= n) continue;"),
])
def test_planted_bug_is_caught(tmp_path, plant):
    bad = EmuOps(build(tmp_path, plant=plant))
    h, off = layout(11)
    sub = off[3:].clone()
    a, b = params(112)
    with pytest.raises((AssertionError, EmuError)):
        check(bad, h, off, a, b)
        check(bad, h, sub, a, b)
