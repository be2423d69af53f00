"""StringTensor behaves like the list[str] it was made from (hypothesis property tests)."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st_

import luminamoon
from luminamoon import StringTensor

# Text of every length class: inline (<= 12 bytes), long, multi-byte, empty.
texts = st_.lists(st_.one_of(st_.text(max_size=14), st_.text(min_size=10, max_size=60),
                             st_.sampled_from(["", "abc", "prefix-1", "prefix-22", "日本語テキストです", "é" * 7])),
                  max_size=40)
SETTINGS = settings(max_examples=60, deadline=None)


def both_layouts(items):
    """The same strings as from_list builds them (both layouts), in the views layout only and in
    the offsets layout only (views built on first use)."""
    a = StringTensor.from_list(items)
    b = StringTensor(views=a.views, buffers=a.buffers)
    c = StringTensor(a.offsets, a.data)
    return a, b, c


@SETTINGS
@given(texts)
def test_len_iter_index(items):
    for s in both_layouts(items):
        assert len(s) == len(items)
        assert list(s) == items
        assert s.tolist() == items
        for i in range(-len(items), len(items)):
            assert s[i] == items[i]
        with pytest.raises(IndexError):
            s[len(items)]


@SETTINGS
@given(texts, st_.integers(-50, 50), st_.integers(-50, 50), st_.sampled_from([None, 1, 2, 3, -1, -2]))
def test_slicing(items, a, b, step):
    for s in both_layouts(items):
        assert s[a:b:step].tolist() == items[a:b:step]


@SETTINGS
@given(texts, st_.data())
def test_masks_and_index_tensors(items, data):
    mask = data.draw(st_.lists(st_.booleans(), min_size=len(items), max_size=len(items)))
    idx = data.draw(st_.lists(st_.integers(-len(items), len(items) - 1), max_size=30)) if items else []
    for s in both_layouts(items):
        assert s[torch.tensor(mask, dtype=torch.bool)].tolist() == [x for x, m in zip(items, mask) if m]
        assert s[torch.tensor(idx, dtype=torch.int64)].tolist() == [items[i] for i in idx]
        assert s[np.array(idx, dtype=np.int64)].tolist() == [items[i] for i in idx]


@SETTINGS
@given(texts, st_.data())
def test_equality_and_prefix(items, data):
    probe = data.draw(st_.one_of(st_.sampled_from(items) if items else st_.just(""), st_.text(max_size=14)))
    other = data.draw(st_.lists(st_.text(max_size=20), min_size=len(items), max_size=len(items)))
    other = [o if data.draw(st_.booleans()) else x for x, o in zip(items, other)]
    for s in both_layouts(items):
        assert (s == probe).tolist() == [x == probe for x in items]
        assert (s != probe).tolist() == [x != probe for x in items]
        for t in both_layouts(other):
            assert s.fast_eq(t).tolist() == [x == y for x, y in zip(items, other)]
        pre = probe[: data.draw(st_.integers(0, 6))]
        assert s.starts_with(pre).tolist() == [x.startswith(pre) for x in items]
        assert s.filter_by_prefix(pre).tolist() == [x for x in items if x.startswith(pre)]
        assert s.equals(items)


@SETTINGS
@given(texts, st_.integers(0, 2**64 - 1))
def test_hash64_is_xxh3(items, seed):
    xxhash = pytest.importorskip("xxhash")
    want = [xxhash.xxh3_64_intdigest(x.encode(), seed=seed) for x in items]
    for s in both_layouts(items):
        got = [h & 0xFFFFFFFFFFFFFFFF for h in s.hash64(seed).tolist()]
        assert got == want


@SETTINGS
@given(texts)
def test_layout_round_trips(items):
    a, b, _ = both_layouts(items)
    assert StringTensor(views=a.views, buffers=a.buffers).offsets.tolist() == a.offsets.tolist()
    assert torch.equal(b.data, a.data)
    assert a.offsets[0] == 0 and a.offsets.dtype == torch.int32


def test_payload_is_shared_not_copied():
    items = ["a fairly long string number %d" % i for i in range(100)]
    s = StringTensor.from_list(items)
    views, bufs = s.views, s.buffers
    assert bufs[0].data_ptr() == s.data.data_ptr()  # offsets -> views: no copy
    sub = s[10:50][torch.arange(0, 40, 3)]
    assert sub.buffers[0].data_ptr() == s.data.data_ptr()  # slice + take: no copy
    masked = s.mask(torch.arange(100) % 2 == 0)
    assert masked.buffers[0].data_ptr() == s.data.data_ptr()
    assert masked.tolist() == items[::2]
    del views


def test_from_buffers_rebases_and_shares():
    data = torch.tensor(list(b"xxhello world"), dtype=torch.uint8)
    s = StringTensor.from_buffers(torch.tensor([2, 7, 13], dtype=torch.int64), data)
    assert s.tolist() == ["hello", " world"]
    assert s.offsets.tolist() == [0, 5, 11]
    assert s.data.data_ptr() == data.data_ptr() + 2


def test_bytes_semantics_on_request():
    s = StringTensor.from_list([b"ok", b"\xff\xfe"], validate=False)
    assert s.tolist(as_bytes=True) == [b"ok", b"\xff\xfe"]
    with pytest.raises(ValueError, match="not valid UTF-8"):
        s.tolist()


def test_empty_and_pytree():
    e = StringTensor.from_list([])
    assert len(e) == 0 and e.tolist() == [] and e.offsets.tolist() == [0]
    s = StringTensor.from_list(["a", "bbbbbbbbbbbbbbbbbbbbbbbb"])
    leaves, spec = torch.utils._pytree.tree_flatten({"x": s})
    assert all(isinstance(x, torch.Tensor) for x in leaves)
    back = torch.utils._pytree.tree_unflatten(leaves, spec)["x"]
    assert back.tolist() == s.tolist()


def test_pad_bytes_method():
    s = StringTensor.from_list(["ab", "é"])
    tok, lengths = s.pad_bytes(5, pad_id=0, bos_id=256, eos_id=257)
    assert tok.tolist() == [[256, 97, 98, 257, 0], [256, 0xC3, 0xA9, 257, 0]]
    assert lengths.tolist() == [4, 4]


def test_to_device_cpu_is_identity_and_pin_memory_api():
    s = StringTensor.from_list(["x"])
    assert s.to("cpu") is s
    assert s.device == torch.device("cpu")
    assert luminamoon.StringTensor.from_list(["q"]).data.tolist() == [ord("q")]


def test_zero_d_index_uint8_index_and_huge_step():
    """Issue 19: s[torch.tensor(1)] is element 1 (as in torch); a uint8 index tensor is refused as
    ambiguous (torch reads it as a mask) while take() and NumPy uint8 arrays mean indices;
    s[::2**64] selects the first element instead of overflowing."""
    for s in both_layouts(["a", "bb", "ccc", "d" * 20]):
        assert s[torch.tensor(1)] == "bb" and s[np.array(-1)] == "d" * 20 and s[torch.tensor(3, dtype=torch.int8)]
        with pytest.raises(IndexError, match="out of range"):
            s[torch.tensor(4)]
        with pytest.raises(TypeError, match="uint8 index is ambiguous"):
            s[torch.tensor([1, 0, 1, 0], dtype=torch.uint8)]
        with pytest.raises(TypeError, match="0-d index"):
            s[torch.tensor(True)]
        assert s.take(torch.tensor([3, 0], dtype=torch.uint8)).tolist() == ["d" * 20, "a"]
        assert s[np.array([3, 0], dtype=np.uint8)].tolist() == ["d" * 20, "a"]
        assert s[::2 ** 64].tolist() == ["a"] and s[::-(2 ** 64)].tolist() == ["d" * 20]
        assert s[5::2 ** 70].tolist() == [] and s[1:3:2 ** 63].tolist() == ["bb"]


def test_hash64_seed_is_64_bits_like_hash128():
    """Issue 19: hash64(seed=2**64+5) silently equalled hash64(5); seeds are 64 bits, a
    negative one stands for its two's-complement bits (hash128 reads seeds the same way)."""
    s = StringTensor.from_list(["a", "bb"])
    with pytest.raises(ValueError, match=r"seed must be in \[-2\*\*63, 2\*\*64\)"):
        s.hash64(seed=2 ** 64 + 5)
    with pytest.raises(ValueError, match="seed"):
        s.hash64(seed=-(2 ** 63) - 1)
    assert torch.equal(s.hash64(seed=-1), s.hash64(seed=2 ** 64 - 1))
    assert torch.equal(luminamoon.hash128(s, seed=-1), luminamoon.hash128(s, seed=2 ** 64 - 1))
    with pytest.raises(ValueError, match="seed"):
        luminamoon.hash128(s, seed=2 ** 64 + 5)


def test_pin_memory_without_accelerator_and_meta_indices():
    """Issue 19: pin_memory() on a CPU-only torch and take/mask with a meta index raised torch's
    own unclear errors."""
    s = StringTensor.from_list(["a", "bb", "ccc"])
    if torch.cuda.is_available():
        assert s.pin_memory().is_pinned()
    else:
        with pytest.raises(ValueError, match="pin_memory: .*accelerator"):
            s.pin_memory()
        assert not s.is_pinned()
    for s in both_layouts(["a", "bb", "ccc"]):
        with pytest.raises(ValueError, match="index is on the meta device"):
            s.take(torch.tensor([0], device="meta"))
        with pytest.raises(ValueError, match="index is on the meta device"):
            s[torch.tensor([0, 1], device="meta")]
        with pytest.raises(ValueError, match="mask is on the meta device"):
            s.mask(torch.tensor([True, False, True], device="meta"))
        with pytest.raises(ValueError, match="index is on the meta device"):
            s[torch.tensor(0, device="meta")]


def test_lazy_layouts_are_published_whole_under_threads():
    """Issue 19 item 13: _materialize_views set the views before their buffers, so another thread's
    starts_with / == on the same StringTensor failed ('NoneType' object is not iterable) or built
    a child with no buffers.  Reader threads spin on a fresh tensor while this thread builds its
    views layout (before the fix 16 to 26 of the 2,000 rounds failed)."""
    import sys
    import threading

    items = [f"string number {i} that is long" for i in range(64)]
    base = StringTensor.from_list(items)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors = []
    try:
        for _ in range(2000):
            s = StringTensor.from_buffers(base.offsets, base.data)  # offsets only: views built below
            go, done = threading.Event(), threading.Event()

            def reader(s=s, go=go, done=done):
                go.wait()
                while not done.is_set():
                    try:
                        s.starts_with("string number 1")
                        s.fast_eq(items[3])
                    except Exception as e:  # noqa: BLE001 - reported below
                        errors.append(repr(e))
                        return

            ts = [threading.Thread(target=reader) for _ in range(3)]
            for t in ts:
                t.start()
            go.set()
            views, buffers = s.views, s.buffers  # built while the readers spin
            done.set()
            for t in ts:
                t.join()
            assert buffers and StringTensor(views=views, buffers=buffers).tolist() == items
            assert int(s.starts_with("string number 1").sum()) == 11 and int((s == items[3]).sum()) == 1
    finally:
        sys.setswitchinterval(old)
    assert not errors, f"{len(errors)} failures, the first: {errors[:3]}"


def test_from_list_builds_both_layouts_over_one_payload():
    """Issue 13 item 1: from_list gives the views as well (one pass), long views pointing into
    the same payload as the offsets; from_buffers builds them on first use and keeps them."""
    items = ["short", "", "a string longer than twelve bytes", "日本語テキストです", "x" * 13, "twelve bytes"]
    s = StringTensor.from_list(items)
    assert s.has_offsets_layout and s.has_views_layout
    assert s.buffers[0].data_ptr() == s.data.data_ptr()
    assert torch.equal(s.views, torch.ops.luminamoon.views_from_offsets(s.offsets, s.data))
    t = StringTensor.from_buffers(s.offsets, s.data)
    assert not t.has_views_layout
    assert t.starts_with("a s").tolist() == [x.startswith("a s") for x in items]
    assert t.has_views_layout
    views = t.views
    t.filter_by_prefix("x")
    assert t.views is views  # kept, not rebuilt
    for bad in ([1], ["a", 2], [None]):
        with pytest.raises(TypeError, match=r"strings\["):
            StringTensor.from_list(bad)
    with pytest.raises(ValueError, match="surrogate"):
        StringTensor.from_list(["ok", "\ud800"])
    with pytest.raises(ValueError, match="UTF-8"):
        StringTensor.from_list([b"ok", b"\xff"])
    assert StringTensor.from_list([b"ok", b"\xff"], validate=False).tolist(as_bytes=True) == [b"ok", b"\xff"]
    # a payload that grows through the mapped (mremap) path, and every length class
    big = [("%d" % i) * (i % 40) for i in range(100000)]
    b = StringTensor.from_list(big)
    assert b.nbytes > (8 << 20) and b.tolist() == big
    assert torch.equal(b.views, torch.ops.luminamoon.views_from_offsets(b.offsets, b.data))


_PEAK_CHILD = r"""
import resource, sys
import luminamoon
from luminamoon import StringTensor
n = int(sys.argv[1])
strings = [chr(97 + i % 26) for i in range(n)]   # one-byte strings (26 shared str objects)
StringTensor.from_list(strings[:1000])            # warm up allocators and lazy imports
def hwm():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM"))
def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS"))
with open("/proc/self/clear_refs", "w") as f:     # reset the peak to the current RSS
    f.write("5")
before = rss()
st = StringTensor.from_list(strings)
peak = hwm() - before
print(peak, st.storage_nbytes)
"""


def test_from_list_peak_memory_is_its_final_size():
    """Issue 21 item 7: from_list peaked at 5.7x its final size (a tuple copy of the list, 8 bytes a
    string, and a 16-byte side array per string, on top of the offsets and payload).  Built in one
    pass, its peak is the tensor it returns (offsets, payload and views) plus small slack.  Measured
    in a fresh child process as the rise of VmHWM (the peak resident set, reset just before)."""
    import subprocess
    import sys

    n = 3_000_000
    r = subprocess.run([sys.executable, "-c", _PEAK_CHILD, str(n)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    peak, final = map(int, r.stdout.split())
    # final: 4 (offsets) + 1 (payload) + 16 (views) bytes a string; the old code's peak was
    # 8 (tuple) + 16 (side array) + 5 = 29 bytes a string against a final 5.
    assert final >= 21 * n
    assert peak <= 1.1 * final + (8 << 20), (peak, final, peak / final)


def test_from_list_encodes_non_ascii_once_and_leaves_the_strs_alone():
    """from_list writes the UTF-8 of a non-ASCII str straight into the payload (one pass over its
    code points, any of CPython's 1/2/4-byte kinds) instead of asking CPython for it, which
    encoded it and then kept that copy attached to the caller's str for its lifetime (a list of
    non-ASCII documents grew by their UTF-8 size)."""
    import sys

    items = ["latin ÿé" * 5, "日本語テキストです", "mixed 😀 ascii", "\u07ff\u0800\uffff\U00010000\U0010ffff", "a" * 30 + "é"]
    sizes = [sys.getsizeof(x) for x in items]
    st = StringTensor.from_list(items)
    assert [sys.getsizeof(x) for x in items] == sizes  # no UTF-8 copy cached on the inputs
    assert st.tolist() == items
    assert bytes(st.data.tolist()) == "".join(items).encode("utf-8")
    assert torch.equal(st.views, torch.ops.luminamoon.views_from_offsets(st.offsets, st.data))
    for bad in ("\ud800", "ok\udfff", "日本\ud83d"):
        with pytest.raises(ValueError, match=r"strings\[1\].*surrogate"):
            StringTensor.from_list(["fine", bad])


def test_from_list_reuses_released_payloads_and_cached_utf8_correctly():
    """from_list copies a non-ASCII str's UTF-8 when CPython already caches it on the str (pyarrow or
    Polars asked for it) and encodes the rest itself; a payload over 8 MB goes back to a small cache
    when its tensor is freed and the next large from_list writes into it (no page faults).  Every
    byte must still be the new list's: checked against str.encode on payloads that differ from the
    released ones, with the released mapping smaller, equal and larger than the new one."""
    import pyarrow as pa

    alphabet = ["a", "é", "日", "😀", "z", " ", "ß", "Ж"]

    codes = np.array([ord(c) for c in alphabet], dtype="<u4")

    def make(n, seed):  # n random strings of 0..119 characters of the alphabet (one decode, then slices)
        r = np.random.default_rng(seed)
        lens = r.integers(0, 120, n)
        text = codes[r.integers(0, len(alphabet), int(lens.sum()))].tobytes().decode("utf-32-le")
        ends = np.cumsum(lens).tolist()
        return [text[a:b] for a, b in zip([0] + ends[:-1], ends)]

    items = make(2000, 1)
    half = items[::2]
    pa.array(half)  # caches the UTF-8 on every other str (PyUnicode_AsUTF8AndSize)
    st = StringTensor.from_list(items)
    assert bytes(st.data.numpy()) == "".join(items).encode("utf-8")
    assert st.tolist() == items
    assert torch.equal(st.views, torch.ops.luminamoon.views_from_offsets(st.offsets, st.data))
    keep = None
    for n, seed in ((150_000, 2), (150_000, 3), (300_000, 4), (100_000, 5), (300_000, 6)):
        big = make(n, seed)
        if seed % 2:
            pa.array(big)
        b = StringTensor.from_list(big)
        assert b.nbytes > (8 << 20)
        assert bytes(b.data.numpy()) == "".join(big).encode("utf-8"), seed
        assert torch.equal(b.views, torch.ops.luminamoon.views_from_offsets(b.offsets, b.data))
        if seed == 3:
            keep = b  # stays alive: its payload must not be handed out
        del b
    again = StringTensor.from_list(make(150_000, 3))
    assert torch.equal(keep.data, again.data) and keep.data.data_ptr() != again.data.data_ptr()


def test_two_thread_ops_work_in_a_forked_child_after_the_parent_used_the_pool():
    """The core's worker pool (parallel.c) is started by the parent's 2-thread calls; a child
    forked afterwards (a DataLoader worker) has no such threads and must start its own, not
    wait forever on the parent's.  The child's answers are checked against plain Python."""
    import os

    items = [("w%d" % (i % 977)) * (1 + i % 5) for i in range(200_000)]
    st = StringTensor.from_list(items)
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        want = st.starts_with("w1").tolist()
        assert want == [s.startswith("w1") for s in items]
        import xxhash

        want_h = [xxhash.xxh3_64_intdigest(s.encode()) for s in items[:1000]]
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports through its exit status
            code = 1
            try:
                import signal

                signal.alarm(60)
                ok = st.starts_with("w1").tolist() == want
                ok = ok and st.fast_eq(items[7]).tolist() == [s == items[7] for s in items]
                ok = ok and [h & (2**64 - 1) for h in st.hash64()[:1000].tolist()] == want_h
                code = 0 if ok else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        torch.set_num_threads(old)
