"""Every SIMD dispatch level on one machine (issue 13 review): the string ops chosen at run
time (AVX-512 hash64 kernels, AVX2 / AVX-512 first passes of offsets equal, xxHash's AVX-512
and AVX2 copies over 240 bytes) are switched off by LM_NO_AVX512=1 and LM_NO_AVX2=1 (read once per
process), so each level runs in a child process: with the default dispatch, with
LM_NO_AVX512=1, and with LM_NO_AVX2=1 LM_NO_AVX512=1 (the portable code CI or a GPU
machine without AVX2 runs).  Each child checks hash64 / views_hash64 against libxxhash
(the ``xxhash`` package), and equal / views_equal / equal_scalar / views_equal_scalar /
prefix_match / views_prefix_match (and the StringTensor methods, filter_by_prefix too) against Python's bytes comparisons, on int32 and int64
offsets, a sliced tensor (first offset not 0), lengths 0..300 and skewed documents, with 1,
2 and 3 threads (inputs large enough for the ops to split them)."""
import os
import subprocess
import sys

import pytest

CHILD = r"""
import sys, warnings
import numpy as np, torch, xxhash
import luminamoon
from luminamoon import StringTensor
warnings.simplefilter("ignore")
OPS = torch.ops.luminamoon
M64 = (1 << 64) - 1
rng = np.random.default_rng(13)
vec = bool(luminamoon._C.hash_views_vector())

def build(n, docs, dtype):
    # lengths 0..300 (every XXH3 class, inline and payload views) or skewed: a run of long
    # documents then words, so a split by counts and one by bytes differ
    if docs:
        lens = np.where(np.arange(n) < n // 20, rng.integers(200, 3000, n), rng.integers(0, 14, n))
    else:
        lens = np.where(rng.random(n) < 0.8, rng.integers(0, 18, n), rng.integers(0, 301, n))
    data = rng.integers(97, 100, int(lens.sum()) + 5, dtype=np.uint8)  # 5 unused bytes at the end
    off = np.full(n + 1, 5, dtype=np.int64)  # the first string starts at byte 5
    np.cumsum(lens, out=off[1:]); off[1:] += 5
    return torch.from_numpy(off.astype(dtype)), torch.from_numpy(data)

fails = []
checks = 0
for dtype in (np.int32, np.int64):
    for n, docs in ((40000, False), (40000, True), (300, False)):
        off, data = build(n, docs, dtype)
        o, d = off.numpy(), data.numpy().tobytes()
        strs = [d[o[i]:o[i + 1]] for i in range(n)]
        d2 = bytearray(d)
        for i in rng.choice(n, n // 3, replace=False):
            if o[i + 1] > o[i]:
                d2[int(rng.integers(o[i], o[i + 1]))] ^= 1
        data2 = torch.from_numpy(np.frombuffer(bytes(d2), dtype=np.uint8).copy())
        eq = [d[o[i]:o[i + 1]] == bytes(d2[o[i]:o[i + 1]]) for i in range(n)]
        probe = strs[n // 2]
        ps = probe.decode()
        k = n // 3  # a slice: offsets start mid-payload
        v, v2 = OPS.views_from_offsets(off, data), OPS.views_from_offsets(off, data2)
        for seed in (0, 7, -1):
            want = [xxhash.xxh3_64_intdigest(s, seed=seed & M64) for s in strs]
            for nt in (1, 2, 3):
                torch.set_num_threads(nt)
                tag = f"{dtype.__name__} n={n} docs={docs} seed={seed} threads={nt}"
                got = {
                    "hash64": [h & M64 for h in OPS.hash64(off, data, seed).tolist()] == want,
                    "hash64 slice": [h & M64 for h in OPS.hash64(off[k:], data, seed).tolist()] == want[k:],
                    "views_hash64": [h & M64 for h in OPS.views_hash64(v, [data], seed).tolist()] == want,
                    "views_hash64 slice": [h & M64 for h in OPS.views_hash64(v[k:], [data], seed).tolist()] == want[k:],
                }
                if seed == 0:
                    got.update({
                        "equal": OPS.equal(off, data, off, data2).tolist() == eq,
                        "equal slice": OPS.equal(off[k:], data, off[k:], data2).tolist() == eq[k:],
                        "views_equal": OPS.views_equal(v, [data], v2, [data2]).tolist() == eq,
                        "equal_scalar": OPS.equal_scalar(off, data, ps).tolist() == [s == probe for s in strs],
                        "views_equal_scalar": OPS.views_equal_scalar(v, [data], ps).tolist() == [s == probe for s in strs],
                        "prefix_match": OPS.prefix_match(off, data, ps[:5]).tolist() == [s.startswith(probe[:5]) for s in strs],
                        "views_prefix_match": OPS.views_prefix_match(v, [data], ps[:5]).tolist() == [s.startswith(probe[:5]) for s in strs],
                    })
                if seed == 7:  # the StringTensor methods (their eager CPU calls), both layouts
                    for lay, st in (("offsets", StringTensor.from_buffers(off, data)),
                                    ("list", StringTensor.from_list([x.decode() for x in strs]))):
                        got[f"st.hash64 {lay}"] = [h & M64 for h in st.hash64(seed).tolist()] == want
                        got[f"st.fast_eq str {lay}"] = st.fast_eq(ps).tolist() == [s == probe for s in strs]
                        got[f"st.starts_with {lay}"] = st.starts_with(ps[:5]).tolist() == [s.startswith(probe[:5]) for s in strs]
                        got[f"st.fast_eq {lay}"] = st.fast_eq(StringTensor.from_buffers(off, data2)).tolist() == eq
                        for pl in (3, 5):  # decided on the views alone / by the payload after 4 bytes
                            got[f"st.filter_by_prefix {pl} {lay}"] = st.filter_by_prefix(ps[:pl]).tolist() == [
                                s.decode() for s in strs if s.startswith(probe[:pl])]
                checks += len(got)
                fails += [f"{name} {tag}" for name, ok in got.items() if not ok]
print("vector", vec, "checks", checks, "fails", len(fails), fails[:5])
sys.exit(1 if fails else 0)
"""

LEVELS = {
    "default": {},
    "no_avx512": {"LM_NO_AVX512": "1"},
    "portable": {"LM_NO_AVX2": "1", "LM_NO_AVX512": "1"},
}


@pytest.mark.parametrize("level", list(LEVELS))
def test_string_ops_equal_references_at_every_dispatch_level(level):
    env = {k: v for k, v in os.environ.items() if k not in ("LM_NO_AVX2", "LM_NO_AVX512")}
    env.update(LEVELS[level])
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "fails 0" in out, out[-3000:]
    assert "checks 558 " in out, out[-3000:]  # 2 dtypes x 3 inputs x 3 seeds x 3 thread counts: 4 + 7 (seed 0) or 12 (seed 7)
    if level != "default":  # the switch turns the AVX-512 hash kernels off
        assert "vector False" in out, out[-3000:]
