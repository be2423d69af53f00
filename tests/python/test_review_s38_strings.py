"""Review s38 (an adversarial pass over the StringTensor constructors):

* validate=True checked the bytes from the first offset to the last as one UTF-8 stream, never that each
  string starts and ends between characters: offsets cutting "é" (C3 A9) into [C3] and [A9] were accepted,
  the tensor was marked UTF-8, to_arrow() exported it as `string` and Polars crashed reading it (a Rust
  panic).  Every constructor that validates (from_buffers, from_arrow of binary / binary_view / an
  unvalidated string array, to_polars' re-check) goes through _C.validate_utf8, which now checks the cuts.
* from_buffers / from_arrow(large_string) accepted one string of 2**31 bytes or more, which every method on
  the views layout (slicing, mask, starts_with) then refused with "size or offset overflows its type"; it
  is refused when the tensor is built, as from_list refuses it.
* st[i] read its two offsets without a check (after a write into st.offsets a negative one counted from the
  end of the payload) where every other reader raises.
"""
import numpy as np
import pyarrow as pa
import pytest
import torch

from luminamoon import StringTensor


def _st_from(offsets, payload: bytes, dtype=torch.int64, validate=True):
    return StringTensor.from_buffers(torch.tensor(offsets, dtype=dtype),
                                     torch.tensor(list(payload), dtype=torch.uint8), validate=validate)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_a_cut_inside_a_character_is_refused(dtype):
    with pytest.raises(ValueError, match="string 0 is not valid UTF-8.*string 1"):
        _st_from([0, 1, 2], "é".encode(), dtype)
    # empty strings at the cut: the string that ends inside the character is named
    with pytest.raises(ValueError, match="string 1 is not valid UTF-8.*string 3"):
        _st_from([0, 1, 3, 3, 4], "a€".encode(), dtype)  # € = E2 82 AC, cut after its second byte
    # cuts between characters are fine, and so are the same bytes as bytes semantics
    st = _st_from([0, 2, 3, 3, 6], "éa€".encode(), dtype)
    assert st.tolist() == ["é", "a", "", "€"]
    raw = _st_from([0, 1, 2], "é".encode(), dtype, validate=False)
    assert raw.tolist(as_bytes=True) == [b"\xc3", b"\xa9"]
    assert raw.to_arrow().type in (pa.binary(), pa.large_binary())


def test_arrow_inputs_cut_inside_a_character_are_refused():
    payload = pa.py_buffer("é".encode())
    offsets = pa.py_buffer(np.array([0, 1, 2], dtype=np.int32).tobytes())
    binary = pa.Array.from_buffers(pa.binary(), 2, [None, offsets, payload])
    unvalidated = pa.Array.from_buffers(pa.string(), 2, [None, offsets, payload])
    for arr in (binary, binary.cast(pa.binary_view()), unvalidated):
        with pytest.raises(ValueError, match="string 0 is not valid UTF-8"):
            StringTensor.from_arrow(arr)
        assert StringTensor.from_arrow(arr, validate=False).tolist(as_bytes=True) == [b"\xc3", b"\xa9"]


def test_random_cuts_agree_with_decoding_each_string():
    rng = np.random.default_rng(38)
    alphabet = ["a", "é", "€", "😀", "\u0301", "\x00", "中"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet, int(rng.integers(0, 12))))
        payload = text.encode()
        k = int(rng.integers(0, 5))
        cuts = sorted(int(c) for c in rng.integers(0, len(payload) + 1, k))
        offsets = [0] + cuts + [len(payload)]
        pieces = [payload[a:b] for a, b in zip(offsets, offsets[1:])]
        bad = []
        for i, p in enumerate(pieces):
            try:
                p.decode("utf-8")
            except UnicodeDecodeError:
                bad.append(i)
        if bad:
            with pytest.raises(ValueError, match=f"string {bad[0]} is not valid UTF-8"):
                _st_from(offsets, payload)
        else:
            assert _st_from(offsets, payload).tolist() == [p.decode() for p in pieces]


def test_a_string_over_2_gib_is_refused_when_built():
    n = (1 << 31) + 5
    data = torch.empty(n, dtype=torch.uint8)  # never written: no memory is touched
    with pytest.raises(ValueError, match=r"string 1 is 2147483653 bytes, longer than 2\*\*31 - 1"):
        StringTensor.from_buffers(torch.tensor([0, 0, n], dtype=torch.int64), data, validate=False)
    # the longest string that fits is accepted (its views hold it)
    st = StringTensor.from_buffers(torch.tensor([0, 4, (1 << 31) + 3], dtype=torch.int64), data, validate=False)
    assert len(st) == 2 and int(st.offsets[2] - st.offsets[1]) == (1 << 31) - 1


def test_getitem_checks_the_offsets_it_reads():
    st = StringTensor.from_list(["abc", "abcdefghijklmnopq", "x"])
    assert st[1] == "abcdefghijklmnopq"
    st.offsets[1] = -7
    with pytest.raises(ValueError, match=r"StringTensor\[1\]: offsets must be non-negative"):
        st[1]
    st2 = StringTensor.from_list(["abc", "abcdefghijklmnopq", "x"])
    st2.offsets[1] = 10**6
    with pytest.raises(ValueError, match=r"StringTensor\[0\]: offsets"):
        st2[0]
