"""The CUDA kernels (csrc/*.cu) run on the CPU under a host emulation of their launch layout.

tests/emu/build.py compiles the kernels' device code as host C++ against tests/emu/include/lm_emu.h
(grid, blocks, warps of fibers, __shfl*_sync / __ballot_sync / __all_sync with their masks and
widths, __shared__, __syncthreads, atomics; host stand-ins for CUB's scan and select), and
tests/emu/emu_ops.py drives them as torch_ops/ops_cuda.cu does.  Every kernel is compared, bit
for bit, with the CPU operators on the GPU tests' data sets (tests/gpu/gpu_data.py: every XXH3
length class, strings >= 64 KB for the grid-wide hash and compare paths, 1-4 MB strings among
150,000 short ones, real text, an unaligned payload) with int32 and int64 offsets.  A planted
bug (a wrong shuffle lane, an off-by-one in a bound) must make the comparison fail.
This runs without a GPU; it proves the kernels' logic, not their speed or the CUDA toolchain.
"""
import pathlib
import sys

import numpy as np
import pytest
import torch

import luminamoon  # noqa: F401  (registers torch.ops.luminamoon.*)

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests" / "emu"), str(ROOT / "tests" / "gpu")]
from build import build  # noqa: E402
from emu_ops import EmuError, EmuOps  # noqa: E402
from gpu_data import all_datasets, from_bytes_list, mutated, plant  # noqa: E402

OPS = torch.ops.luminamoon
DATASETS = ["empty_set", "empty_strings", "length_classes", "skewed", "real", "unaligned"]
DTYPES = [torch.int32, torch.int64]


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("emu")


@pytest.fixture(scope="module")
def emu(build_dir):
    return EmuOps(build(build_dir))


@pytest.fixture(scope="module")
def datasets():
    return all_datasets()


def same(cpu, emu_out):
    if isinstance(cpu, (tuple, list)):
        return len(cpu) == len(emu_out) and all(same(a, b) for a, b in zip(cpu, emu_out))
    return cpu.dtype == emu_out.dtype and cpu.shape == emu_out.shape and torch.equal(cpu, emu_out)


def check(emu, op, *args):
    cpu = getattr(OPS, op)(*args)
    got = getattr(emu, op)(*args)
    if not same(cpu, got):
        if isinstance(cpu, torch.Tensor) and cpu.shape == got.shape:
            bad = (cpu != got).nonzero()[:5].flatten().tolist()
            raise AssertionError(f"{op}: CPU and emulated CUDA differ at {bad}")
        raise AssertionError(f"{op}: CPU and emulated CUDA differ")
    return cpu


def run_all_ops(emu, ds, dtype, big):
    """Every kernel once or more on one data set; `big` data sets get fewer parameter sets."""
    rng = np.random.default_rng(3)
    off = ds.offsets.to(dtype)
    data = ds.data
    plens = (0, 9, 600) if big else (0, 1, 4, 8, 9, 40, 512, 513, 600, 70000)
    for plen in plens:
        pat = bytes(rng.integers(33, 127, size=plen, dtype=np.uint8))
        planted = plant(ds, pat, rng)
        hit = check(emu, "prefix_match", off, planted, pat.decode())
        check(emu, "equal_scalar", off, planted, pat.decode())
        if ds.n and 0 < plen < 1000:
            lens = ds.offsets[1:] - ds.offsets[:-1]
            assert hit.any() or not (lens >= plen).any()  # planted strings do match
    # equal: identical, with changed bytes, shifted by one string
    check(emu, "equal", off, data, off, data.clone())
    check(emu, "equal", off, data, off, mutated(ds, rng))
    if ds.n >= 2:
        o2, d2 = OPS.gather(off, data, torch.roll(torch.arange(ds.n), 1))
        check(emu, "equal", off, data, o2, d2)
    for seed in ((0, -1) if big else (0, 1, -(2**63), 2**63 - 1)):
        check(emu, "hash64", off, data, seed)
    pads = [(0, 0, 256, 257), (2, 7, 256, 257), (33, 0, -1, -1), (300, 258, -1, 257)]
    for max_len, pad, bos, eos in (pads[1:3] if big else pads):
        check(emu, "pad_bytes", off, data, max_len, pad, bos, eos)
    indices = [torch.empty(0, dtype=torch.int64)]
    if ds.n:
        indices += [torch.from_numpy(rng.integers(0, ds.n, size=ds.n)), torch.arange(ds.n - 1, -1, -1)]
    for idx in indices:
        check(emu, "gather", off, data, idx)
    for mask in [torch.zeros(ds.n, dtype=torch.bool), torch.from_numpy(rng.random(ds.n) < 0.5)]:
        check(emu, "compact", off, data, mask)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", DATASETS)
def test_kernels_match_cpu_ops(emu, datasets, name, dtype):
    run_all_ops(emu, datasets[name], dtype, big=name == "skewed")


def test_huge_strings_take_the_grid_wide_paths(emu, datasets):
    """The skewed set holds 1-4 MB strings: hash64's block-contribution kernel and equal's long
    pairs run over a grid smaller than the work (LM_EMU_SMS=2 x 2 blocks), so their grid-stride
    loops and the segment lookup are exercised; a byte changed deep inside a 4 MB string is found."""
    ds = datasets["skewed"]
    lens = (ds.offsets[1:] - ds.offsets[:-1])
    big = torch.nonzero(lens > (1 << 20) - 1).flatten()
    idx = torch.cat([big, big.flip(0), torch.tensor([0, 1, 2])])
    o, d = OPS.gather(ds.offsets, ds.data, idx)
    check(emu, "hash64", o, d, 5)
    d2 = d.clone()
    d2[int(o[2]) + 3_000_001] ^= 1
    assert not bool(check(emu, "equal", o, d, o, d2)[2])


def test_bad_launch_use_is_reported(emu):
    """Misuse the emulation cannot model is an error, not a guess: offsets past the end are flagged
    by the validation kernel, which runs under the emulation too."""
    ds = from_bytes_list("small", [b"abc", b"de"])
    bad = ds.offsets.clone()
    bad[-1] = 99
    with pytest.raises(ValueError, match="invalid offsets"):
        emu.hash64(bad, ds.data, 0)


PLANTS = {
    # a wrong shuffle lane: the grid-wide hash exchanges the data sums with lane ^ 3 instead of lane ^ 1
    "shuffle_lane": ("hash64.cu", "own + __shfl_xor_sync(0xffffffffu, dsum, 1);",
                     "own + __shfl_xor_sync(0xffffffffu, dsum, 3);"),
    # an off-by-one in a bound: pad_bytes copies one content column too many
    "off_by_one": ("pad_bytes.cu", "else if (j < end_content)", "else if (j <= end_content)"),
    # the warp path of equal takes the second string's start from the neighbouring lane
    "equal_lane": ("compare.cu", "cb = __shfl_sync(kFull, sb, c)", "cb = __shfl_sync(kFull, sb, c ^ 1)"),
    # a shuffle reading a lane outside its 8-lane group's mask: reported by the emulation (EmuError)
    "outside_mask": ("hash64.cu", "partner = __shfl_xor_sync(gmask, acc, 1, 8);",
                     "partner = __shfl_xor_sync(gmask, acc, 8);"),
    # gather/compact copy one byte less of each string
    "copy_bound": ("gather.cu", "b = min(d1, d0 + len);", "b = min(d1, d0 + len - 1);"),
}


@pytest.mark.parametrize("bug", sorted(PLANTS))
def test_a_planted_bug_is_caught(build_dir, datasets, bug):
    planted = EmuOps(build(build_dir, plant=PLANTS[bug]))
    with pytest.raises((AssertionError, EmuError)):
        run_all_ops(planted, datasets["length_classes"], torch.int64, big=True)
