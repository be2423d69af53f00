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
    """The same strings in the offsets layout and in the views layout only."""
    a = StringTensor.from_list(items)
    b = StringTensor(views=a.views, buffers=a.buffers)
    return a, b


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
    a, b = both_layouts(items)
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
    assert s.tolist(bytes=True) == [b"ok", b"\xff\xfe"]
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
    assert luminamoon.StringTensor.from_list(["q"]).to_torch()[1].tolist() == [ord("q")]


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
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors = []
    try:
        for _ in range(2000):
            s = StringTensor.from_list(items)
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
