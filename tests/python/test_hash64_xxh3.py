"""hash64 is XXH3-64 (the ``xxhash`` package, libxxhash) bit for bit on every length 0..300 and
random seeds, on every path a user reaches: ``StringTensor.hash64`` on a from_list tensor (the
views layout where the CPU hashes inline views 8 at a time, else the offsets layout), on a tensor
with only the views layout, on one with only the offsets layout, and the registered operators
``hash64`` (offsets) and ``views_hash64``; also across the 256-string blocks of the kernels."""
import random

import torch
import xxhash

from luminamoon import StringTensor

OPS = torch.ops.luminamoon
M64 = (1 << 64) - 1


def _strings(rng: random.Random) -> list[str]:
    alphabet = ["a", "z", " ", "\x00", "\x7f", "é", "ß", "中", "😀"]
    out = []
    for length in range(0, 301):  # bytes: every XXH3 class, inline and payload views
        s = "".join(rng.choice(alphabet[:5]) for _ in range(length))
        out.append(s)
        t = ""
        while len(t.encode()) < length:
            t += rng.choice(alphabet)
        out.append(t)
    words = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 14))) for _ in range(3000)]
    out += words
    rng.shuffle(out)
    return out


def _check(got: torch.Tensor, strings: list[str], seed: int) -> None:
    want = [xxhash.xxh3_64_intdigest(s.encode(), seed=seed & M64) for s in strings]
    vals = [h & M64 for h in got.tolist()]
    bad = [i for i, (a, b) in enumerate(zip(vals, want)) if a != b]
    assert not bad, f"{len(bad)} wrong, first {strings[bad[0]]!r} (len {len(strings[bad[0]].encode())}) seed {seed}"


def test_hash64_matches_libxxhash_every_length_and_layout():
    rng = random.Random(13)
    strings = _strings(rng)
    st = StringTensor.from_list(strings)
    views_only = StringTensor(views=st.views, buffers=st.buffers)
    offsets_only = StringTensor.from_buffers(st.offsets, st.data)
    for seed in [0, 1, M64, -1, -(1 << 63), (1 << 63) + 12345, rng.getrandbits(64), rng.getrandbits(64)]:
        s = seed - (1 << 64) if seed >= 1 << 63 else seed
        _check(st.hash64(seed), strings, seed)
        _check(views_only.hash64(seed), strings, seed)
        _check(offsets_only.hash64(seed), strings, seed)
        _check(OPS.hash64(st.offsets, st.data, s), strings, seed)
        _check(OPS.views_hash64(st.views, list(st.buffers), s), strings, seed)


def test_hash64_on_slices_every_start():
    # views of a slice start anywhere in a 16-view group: every start 0..17, every count 0..40
    rng = random.Random(14)
    strings = ["".join(rng.choice("ab\u00e9") for _ in range(rng.randrange(0, 20))) for _ in range(64)]
    st = StringTensor.from_list(strings)
    for a in range(18):
        for n in range(0, 41, 3):
            part = st[a:a + n]
            _check(part.hash64(7), strings[a:a + n], 7)


def test_hash64_portable_path_when_vector_code_is_off():
    # LM_NO_AVX512=1 (read once per process) turns the AVX-512 kernels off: a child process
    # must report them off and give the same libxxhash values on every path
    import os
    import subprocess
    import sys

    code = r"""
import random, torch, xxhash
import luminamoon
from luminamoon import StringTensor
assert not luminamoon._C.hash_views_vector()
rng = random.Random(15)
strings = ["".join(rng.choice("ab\u00e9\u4e2d") for _ in range(rng.randrange(0, 30))) for _ in range(3000)]
st = StringTensor.from_list(strings)
want = [xxhash.xxh3_64_intdigest(s.encode(), seed=9) for s in strings]
for got in (st.hash64(9), torch.ops.luminamoon.hash64(st.offsets, st.data, 9),
            torch.ops.luminamoon.views_hash64(st.views, list(st.buffers), 9)):
    assert [h & ((1 << 64) - 1) for h in got.tolist()] == want
print("ok")
"""
    env = dict(os.environ, LM_NO_AVX512="1")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr
