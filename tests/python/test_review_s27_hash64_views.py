"""Review (session 27) of hash64 on views (684b8d9, c0f2158): the AVX-512 views kernel
(hash_avx512.c) and ops_views.c's hash_range, whose long views (> 12 bytes) of a sparse block
are checked when listed and hashed by the kernel two blocks later (a ring of three pending
lists, flushed at the end of each thread's range).

Every value is compared with the ``xxhash`` package (libxxhash's XXH3-64, computed here):

* every length 0..300 at every start of a 16-view group, with and without a seed;
* tensor sizes 1..40 and LM_HASH_VIEWS_BLOCK (256) multiples +-1, with the long views placed
  at the blocks' first / last views, only in the last block, sparse at random, dense (the
  other path), and blocks alternating dense / sparse / without long views (the ring's slots
  reused, emptied and skipped), so that a pending list not flushed at the end of a call (or
  one hashed into the wrong block's output) shows as a wrong or stale value;
* 1, 2 and 3 threads on ~50,000 views (ranges cut by weight: they split blocks anywhere);
* slices of a tensor (non-zero starts) and a views tensor at an odd address;
* the payload's last byte the last byte before an unmapped page (no read past it);
* corrupted views (non-zero padding, buffer index / offset out of range, lengths that
  overflow) in any block, incl. a sparse last block: a ValueError, never a crash;
* the same checks at the portable level (``LM_NO_AVX512=1``, read once: one child process)."""
import ctypes
import mmap
import os
import random
import subprocess
import sys

import pytest
import torch
import xxhash

from luminamoon import StringTensor, _C

OPS = torch.ops.luminamoon
M64 = (1 << 64) - 1
BLOCK = 256  # LM_HASH_VIEWS_BLOCK


def _want(strings, seed):
    return [xxhash.xxh3_64_intdigest(s, seed=seed & M64) for s in strings]


def _got(t):
    return [h & M64 for h in t.tolist()]


def _rand_bytes(rng, n):
    return bytes(rng.getrandbits(8) for _ in range(n)) if rng.random() < 0.5 else bytes(
        rng.choice(b"ab z\x00\xff") for _ in range(n))


def _from(strings):
    """A views-only tensor of byte strings (what the views kernel hashes)."""
    st = StringTensor.from_list(strings, validate=False)
    return StringTensor(views=st.views, buffers=st.buffers)


def _od(strings):
    """(offsets int64, data) of byte strings."""
    st = StringTensor.from_list(strings, validate=False)
    return st.offsets, st.data


def _check(st, strings, seeds, what, offsets=None):
    """st (views only): StringTensor.hash64 and the views op; offsets=(offsets, data): also the
    offsets layout (StringTensor.hash64 of from_buffers, the hash64 op) on the same strings."""
    for seed in seeds:
        s = seed - (1 << 64) if seed >= 1 << 63 else seed
        want = _want(strings, seed)
        runs = [("hash64", st.hash64(seed)), ("op", OPS.views_hash64(st.views, list(st.buffers), s))]
        if offsets is not None:
            so = StringTensor.from_buffers(offsets[0], offsets[1], validate=False)
            runs += [("offsets hash64", so.hash64(seed)), ("offsets op", OPS.hash64(offsets[0], offsets[1], s))]
            o32 = offsets[0].to(torch.int32)
            runs += [("offsets32 op", OPS.hash64(o32, offsets[1], s))]
        for name, got in runs:
            g = _got(got)
            bad = [i for i in range(len(want)) if g[i] != want[i]]
            assert not bad, (f"{what} {name} seed {seed}: {len(bad)} of {len(want)} wrong, first at {bad[0]} "
                             f"(len {len(strings[bad[0]])})")


def _layouts(rng):
    """(name, strings): sizes and placements of long views around the kernel's blocks."""
    def short():
        return _rand_bytes(rng, rng.randint(0, 12))

    def long_():
        return _rand_bytes(rng, rng.choice([13, 14, 16, 17, 31, 64, 129, 240, 241, rng.randint(13, 300)]))

    out = []
    sizes = list(range(1, 41)) + [k * BLOCK + d for k in (1, 2, 3, 4, 5) for d in (-1, 0, 1)] + [7 * BLOCK + 129]
    for n in sizes:
        edges = {0, n - 1} | {b for b in range(0, n, BLOCK)} | {min(n - 1, b + BLOCK - 1) for b in range(0, n, BLOCK)}
        out.append((f"edges n={n}", [long_() if i in edges else short() for i in range(n)]))
        last = max(0, n - 1 - (n - 1) % BLOCK)
        out.append((f"last-block n={n}", [long_() if i >= last and rng.random() < 0.3 else short() for i in range(n)]))
        out.append((f"last-only n={n}", [long_() if i == n - 1 else short() for i in range(n)]))
        out.append((f"sparse n={n}", [long_() if rng.random() < 0.1 else short() for i in range(n)]))
        if n > 40 or n % 5 == 0:
            out.append((f"dense n={n}", [long_() if rng.random() < 0.7 else short() for i in range(n)]))
            # blocks alternating: sparse, dense, none, sparse, sparse, dense ... (the ring reused)
            kinds = [rng.choice([0.05, 0.8, 0.0, 0.45, 0.55]) for _ in range(n // BLOCK + 1)]
            out.append((f"mixed n={n}", [long_() if rng.random() < kinds[i // BLOCK] else short() for i in range(n)]))
    # every length 0..300 at every start within a group of 16 views
    lens = list(range(301))
    for k in range(16):
        out.append((f"lengths shift={k}", [_rand_bytes(rng, 3) for _ in range(k)] + [_rand_bytes(rng, n) for n in lens]))
    return out


_SEEDS = [0, 1, M64, (1 << 63) + 5, 0x9E3779B97F4A7C15]


def _all_checks(level):
    rng = random.Random(27)
    for name, strings in _layouts(rng):
        _check(_from(strings), strings, _SEEDS[:2] if "lengths" not in name else _SEEDS, f"{level} {name}", _od(strings))
    # slices: non-zero starts into the views, lengths around a block
    strings = [_rand_bytes(rng, rng.choice([0, 3, 8, 9, 12, 13, 16, 40, 200])) for _ in range(3 * BLOCK + 50)]
    st = _from(strings)
    for a in (1, 7, 8, 15, 16, 255, 256, 257):
        for n in (0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 3):
            _check(st[a:a + n], strings[a:a + n], [3], f"{level} slice {a}:{a + n}")
    # a views tensor at an odd address (the 16-byte views read unaligned)
    raw = bytearray(1 + st.views.numel())
    raw[1:] = st.views.numpy().tobytes()
    v = torch.frombuffer(raw, dtype=torch.uint8)[1:].view(-1, 16)
    assert v.data_ptr() % 2 == 1
    _check(StringTensor(views=v, buffers=st.buffers), strings, [9], f"{level} odd address")
    # threads: ranges cut by weight split blocks anywhere; each range's pending lists flushed
    strings = [_rand_bytes(rng, rng.randint(13, 40)) if rng.random() < rng.choice([0.02, 0.3, 0.6]) else
               _rand_bytes(rng, rng.randint(0, 12)) for _ in range(50_001)]
    st = _from(strings)
    before = torch.get_num_threads()
    try:
        for nt in (1, 2, 3):
            torch.set_num_threads(nt)
            _check(st, strings, [0, 77], f"{level} threads={nt}")
    finally:
        torch.set_num_threads(before)
    _page_end_checks(rng, level)
    _views_at_page_end_checks(rng, level)
    _corrupt_checks(rng, level)


def _page_end_checks(rng, level):
    """The payload's last byte just before an unmapped page: long strings ending there."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    for n_last in (0, 1, 3, 4, 7, 8, 9, 12, 13, 14, 15, 16, 17, 31, 32, 33, 63, 64, 65, 128, 129, 239, 240, 241, 300):
        for count in (1, BLOCK - 1, BLOCK + 1, 2 * BLOCK):
            strings = [_rand_bytes(rng, rng.randint(0, 14)) for _ in range(count - 1)] + [_rand_bytes(rng, n_last)]
            st = StringTensor.from_list(strings, validate=False)
            assert len(st.buffers) == 1
            data = st.buffers[0].numpy().tobytes()
            assert data.endswith(strings[-1])
            if not data:
                continue  # no payload byte to place (torch.frombuffer refuses an empty buffer)
            size = (len(data) + page - 1) // page * page
            m = mmap.mmap(-1, size + page)
            addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
            assert libc.mprotect(addr + size, page, 0) == 0
            m[size - len(data):size] = data
            buf = torch.frombuffer(memoryview(m)[size - len(data):size], dtype=torch.uint8)
            try:
                _check(StringTensor(views=st.views, buffers=[buf]), strings, [0], f"{level} page end {n_last}",
                       (st.offsets, buf))
            finally:
                del buf
                assert libc.mprotect(addr + size, page, 3) == 0


def _views_at_page_end_checks(rng, level):
    """The views array (and the offsets array) itself ending at an unmapped page: the kernel's
    masked loads of the last views and the 9..12-byte gathers read nothing past view n-1."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page = mmap.PAGESIZE
    for n in list(range(1, 41)) + [BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 7]:
        strings = [_rand_bytes(rng, rng.choice([0, 3, 8, 9, 11, 12, 13, 20])) for _ in range(n)]
        st = StringTensor.from_list(strings, validate=False)
        raw_v = st.views.numpy().tobytes()
        raw_o = st.offsets.numpy().tobytes()
        maps = []
        try:
            placed = []
            for raw in (raw_v, raw_o):
                size = (len(raw) + page - 1) // page * page
                m = mmap.mmap(-1, size + page)
                addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
                assert libc.mprotect(addr + size, page, 0) == 0
                m[size - len(raw):size] = raw
                maps.append((m, addr, size))
                placed.append(torch.frombuffer(memoryview(m)[size - len(raw):size], dtype=torch.uint8))
            views = placed[0].view(-1, 16)
            offs = placed[1].view(st.offsets.dtype)
            _check(StringTensor(views=views, buffers=st.buffers), strings, [0, 5], f"{level} views at page end n={n}",
                   (offs, st.data))
            del views, offs, placed
        finally:
            for m, addr, size in maps:
                libc.mprotect(addr + size, page, 3)


def _corrupt_checks(rng, level):
    """Corrupted views anywhere (incl. the sparse last block whose long views are pending when
    the check runs) give a ValueError from both entry points, and good views after it still hash."""
    n = 3 * BLOCK + 17
    strings = [_rand_bytes(rng, 20) if i % 37 == 0 else _rand_bytes(rng, rng.randint(0, 12)) for i in range(n)]
    st = StringTensor.from_list(strings, validate=False)
    data = st.buffers[0]
    longs = [i for i, s in enumerate(strings) if len(s) > 12]
    inl = [i for i, s in enumerate(strings) if 0 <= len(s) <= 11]
    nine = [i for i, s in enumerate(strings) if 9 <= len(s) <= 11]
    assert nine and longs

    def put(v, i, lo, val):
        v[i, lo:lo + 4] = torch.tensor(list((val & 0xFFFFFFFF).to_bytes(4, "little")), dtype=torch.uint8)

    cases = []
    for i in (inl[0], inl[-1], rng.choice(inl), nine[0], nine[-1]):  # a padding byte set
        ln = len(strings[i])
        v = st.views.clone()
        v[i, 4 + ln + rng.randrange(12 - ln)] = 1
        cases.append(("padding", v))
    for i in (longs[0], longs[-1], rng.choice(longs)):
        v = st.views.clone()
        put(v, i, 8, 1)  # buffer index 1 of 1
        cases.append(("buffer index", v))
        v = st.views.clone()
        put(v, i, 12, data.numel() - 19)  # offset + len one past the buffer
        cases.append(("offset", v))
        v = st.views.clone()
        put(v, i, 0, 0xFFFFFFFF)  # a length that overflows offset + len on 32 bits
        cases.append(("length", v))
        v = st.views.clone()
        put(v, i, 0, 0x80000000)
        put(v, i, 12, 0x80000000)
        cases.append(("length+offset", v))
    before = torch.get_num_threads()
    try:
        for nt in (1, 3):
            torch.set_num_threads(nt)
            for what, v in cases:
                with pytest.raises(ValueError):
                    OPS.views_hash64(v, [data], 0)
                with pytest.raises(ValueError):
                    StringTensor(views=v, buffers=[data]).hash64(5)
                # the good tensor still hashes right after an error (no state left behind)
                _check(StringTensor(views=st.views, buffers=[data]), strings, [5], f"{level} after {what}")
    finally:
        torch.set_num_threads(before)


def test_views_hash64_equals_xxhash_around_blocks_threads_pages_and_bad_views():
    # the AVX-512 kernel where the CPU has it (F/DQ/BW/VL + VBMI/VBMI2), else the portable code
    # again (CI machines differ; the review machine, a Zen 4, runs the kernel)
    _all_checks("avx512" if _C.hash_views_vector() else "default (no AVX-512 VBMI)")


def test_views_hash64_portable_level_same_checks():
    code = ("import sys; sys.path.insert(0, %r); import test_review_s27_hash64_views as t; "
            "from luminamoon import _C; assert not _C.hash_views_vector(); t._all_checks('portable'); print('ok')"
            % os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, LM_NO_AVX512="1"), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
