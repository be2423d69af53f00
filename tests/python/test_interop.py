"""Zero-copy interop: Arrow (string, large_string, string_view, chunked, PyCapsule), Polars, NumPy, torch, DLPack."""
import numpy as np
import pyarrow as pa
import pytest
import torch

from luminamoon import StringTensor

ITEMS = ["", "a", "twelve bytes", "thirteen byte", "日本語のテキスト", "a much longer string that is stored out of line",
         "x" * 300, "é"]


def test_to_arrow_shares_memory():
    st = StringTensor.from_list(ITEMS)
    arr = st.to_arrow(zero_copy=True)
    assert arr.type == pa.string()
    assert arr.buffers()[1].address == st.offsets.data_ptr()
    assert arr.buffers()[2].address == st.data.data_ptr()
    assert arr.to_pylist() == ITEMS
    copy = st.to_arrow(zero_copy=False)
    assert copy.buffers()[2].address != st.data.data_ptr() and copy.to_pylist() == ITEMS


def test_to_arrow_view_is_valid_and_shares_memory():
    st = StringTensor.from_list(ITEMS)
    arr = st.to_arrow_view()
    assert arr.type == pa.string_view()
    arr.validate(full=True)
    assert arr.to_pylist() == ITEMS
    assert arr.buffers()[1].address == st.views.data_ptr()
    assert arr.buffers()[2].address == st.buffers[0].data_ptr()
    # after slicing/taking (views layout only, several buffers after a concat)
    sub = st[[7, 1, 5]]
    a2 = sub.to_arrow_view()
    a2.validate(full=True)
    assert a2.to_pylist() == [ITEMS[7], ITEMS[1], ITEMS[5]]


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.string_view()])
def test_from_arrow_types(typ):
    arr = pa.array(ITEMS, type=typ)
    st = StringTensor.from_arrow(arr)
    assert st.tolist() == ITEMS
    if typ != pa.string_view():
        assert st.data.data_ptr() == arr.buffers()[2].address  # payload shared
        assert st.offsets.dtype == (torch.int64 if typ == pa.large_string() else torch.int32)
    else:
        assert st.buffers[0].data_ptr() == arr.buffers()[2].address
    # sliced arrays (non-zero Arrow offset)
    assert StringTensor.from_arrow(arr[2:6]).tolist() == ITEMS[2:6]


def test_from_chunked_and_capsules():
    chunked = pa.chunked_array([ITEMS[:3], ITEMS[3:], []], type=pa.string())
    assert StringTensor.from_arrow(chunked).tolist() == ITEMS
    views = pa.chunked_array([pa.array(ITEMS[:4], type=pa.string_view()), pa.array(ITEMS[4:], type=pa.string_view())])
    st = StringTensor.from_arrow(views)
    assert st.tolist() == ITEMS
    st.to_arrow_view().validate(full=True)

    class Producer:  # any object speaking the Arrow PyCapsule interface
        def __init__(self, a):
            self.a = a

        def __arrow_c_array__(self, requested_schema=None):
            return self.a.__arrow_c_array__(requested_schema)

    class StreamProducer:
        def __arrow_c_stream__(self, requested_schema=None):
            return chunked.__arrow_c_stream__(requested_schema)

    assert StringTensor.from_arrow(Producer(pa.array(ITEMS))).tolist() == ITEMS
    assert StringTensor.from_arrow(StreamProducer()).tolist() == ITEMS


def test_pyarrow_and_polars_consume_the_capsules():
    pl = pytest.importorskip("polars")
    st = StringTensor.from_list(ITEMS)
    assert pa.array(st).to_pylist() == ITEMS
    assert pa.chunked_array(st).to_pylist() == ITEMS
    assert pl.from_arrow(st).to_list() == ITEMS
    assert st.to_polars().to_list() == ITEMS
    assert StringTensor.from_arrow(pl.Series(ITEMS)).tolist() == ITEMS


def test_numpy_torch_dlpack_exports():
    st = StringTensor.from_list(ITEMS)
    arr = st.to_numpy()
    assert arr.tolist() == ITEMS
    assert StringTensor.from_numpy(arr).tolist() == ITEMS
    assert StringTensor.from_numpy(np.array(ITEMS, dtype=object)).tolist() == ITEMS
    assert StringTensor.from_numpy(np.array(ITEMS)).tolist() == ITEMS
    off, data = st.offsets, st.data
    assert bytes(data[off[2]:off[3]].numpy()).decode() == ITEMS[2]
    noff, ndata = st.to_numpy_gpu()
    assert noff.ctypes.data == st.offsets.data_ptr() and ndata.ctypes.data == st.data.data_ptr()
    bufs = st.dlpack_buffers()
    o = np.from_dlpack(bufs["offsets"])
    d = np.from_dlpack(bufs["data"])
    assert [bytes(d[o[i]:o[i + 1]]).decode() for i in range(len(ITEMS))] == ITEMS
    assert o.ctypes.data == st.offsets.data_ptr()
    v = torch.from_dlpack(bufs["views"])
    assert v.shape == (len(ITEMS), 16) and v.data_ptr() == st.views.data_ptr()


def test_arrow_nulls_refused_and_binary_checked():
    with pytest.raises(ValueError, match="nulls"):
        StringTensor.from_arrow(pa.array(["a", None]))
    with pytest.raises(ValueError, match="UTF-8"):
        StringTensor.from_arrow(pa.array([b"ok", b"\xff"], type=pa.binary()))
    assert StringTensor.from_arrow(pa.array([b"ok", b"\xff"], type=pa.binary()), validate=False).tolist(as_bytes=True) == [b"ok", b"\xff"]
    with pytest.raises(TypeError, match="string"):
        StringTensor.from_arrow(pa.array([1, 2]))


def test_corrupt_string_view_refused():
    arr = pa.array(ITEMS, type=pa.string_view())
    views = bytearray(arr.buffers()[1].to_pybytes())
    views[6 * 16 + 12:6 * 16 + 16] = (10**9).to_bytes(4, "little")  # offset far past the buffer
    bad = pa.Array.from_buffers(pa.string_view(), len(ITEMS), [None, pa.py_buffer(views), arr.buffers()[2]])
    with pytest.raises((ValueError, IndexError), match="view"):
        StringTensor.from_arrow(bad)


def test_bytes_semantics_export_as_binary():
    """Issue 19 item 11: StringTensor.from_list([b"\\xff\\xfe"], validate=False).to_arrow() had type
    string, and Polars then segfaulted on str.to_uppercase()."""
    raw = [b"\xff\xfe", b"ok"]
    st = StringTensor.from_list(raw, validate=False)
    assert st.to_arrow().type == pa.binary()
    assert st.to_arrow_view().type == pa.binary_view()
    assert pa.array(st).type == pa.binary() and st.to_arrow().to_pylist() == raw
    assert st[1:].to_arrow().type == pa.binary() and st.take([0]).to_arrow().type == pa.binary()
    off, data = st.offsets, st.data
    assert StringTensor.from_buffers(off, data, validate=False).to_arrow().type == pa.binary()
    assert StringTensor.from_arrow(pa.array(raw, pa.binary()), validate=False).to_arrow().type == pa.binary()
    # text stays text: str items, validated bytes, and tensors built by the low-level constructor
    # whose bytes are UTF-8 (checked on export)
    assert StringTensor.from_list(["é", "x"], validate=False).to_arrow().type == pa.string()
    assert StringTensor.from_list([b"ok"]).to_arrow().type == pa.string()
    assert StringTensor(off, data).to_arrow().type == pa.binary()
    assert StringTensor(*StringTensor.from_list(["a"]).to_gpu_buffers()).to_arrow().type == pa.string()
    pl = pytest.importorskip("polars")
    s = st.to_polars()
    assert s.dtype == pl.Binary and s.to_list() == raw


def test_string_view_with_longer_views_buffer_and_dictionaries():
    """Issue 19: a valid string_view array whose views buffer is longer than 16 x length was refused
    (RuntimeError: shape '[-1, 16]' is invalid); dictionaries over string_view (Polars Categorical /
    Enum through the PyCapsule stream) failed in pyarrow's dictionary_decode."""
    arr = pa.array(ITEMS, type=pa.string_view())
    vbuf = arr.buffers()[1]
    longer = pa.py_buffer(bytearray(vbuf.to_pybytes() + b"\0" * 40))  # spare capacity, not a multiple of 16
    short = pa.Array.from_buffers(pa.string_view(), 3, [None, longer, *arr.buffers()[2:]])
    assert StringTensor.from_arrow(short).tolist() == ITEMS[:3]
    assert StringTensor.from_arrow(arr.slice(2, 3)).tolist() == ITEMS[2:5]
    idx = pa.array([3, 0, 3, 5], pa.int8())
    for values in (pa.array(ITEMS, pa.string_view()), pa.array(ITEMS, pa.large_string())):
        d = pa.DictionaryArray.from_arrays(idx, values)
        assert StringTensor.from_arrow(d).tolist() == [ITEMS[3], ITEMS[0], ITEMS[3], ITEMS[5]]
        assert StringTensor.from_arrow(pa.chunked_array([d, d.slice(1, 2)])).tolist() == (
            [ITEMS[3], ITEMS[0], ITEMS[3], ITEMS[5], ITEMS[0], ITEMS[3]])
    with pytest.raises(ValueError, match="null"):
        StringTensor.from_arrow(pa.DictionaryArray.from_arrays(pa.array([0, None], pa.int8()), values))
    pl = pytest.importorskip("polars")
    words = ["b", "a", "b", "c" * 20]
    for dtype in (pl.Categorical, pl.Enum(["a", "b", "c" * 20])):
        s = pl.Series(words, dtype=dtype)
        assert StringTensor.from_arrow(s).tolist() == words
        stream = pa.chunked_array(s)  # the PyCapsule stream: dictionary<values=string_view>
        assert StringTensor.from_arrow(stream).tolist() == words


def test_views_with_nonzero_padding_refused_by_the_views_ops():
    """Issue 19 item 12: an inline view with non-zero padding bytes was accepted by the views ops,
    which then disagreed (views_equal_scalar False, views_prefix_match True for the same string)."""
    ops = torch.ops.luminamoon
    st = StringTensor.from_list(["ab", "long string, out of line"])
    views, bufs = st.views.clone(), list(st.buffers)
    views[0, 4 + 2] = ord("z")  # after the 2 bytes of "ab"
    for call in (lambda: ops.views_equal_scalar(views, bufs, "ab"),
                 lambda: ops.views_hash64(views, bufs, 0),
                 lambda: ops.views_equal(views, bufs, st.views, bufs),
                 lambda: ops.offsets_from_views(views, bufs, False),
                 lambda: StringTensor(views=views, buffers=bufs) == "ab",
                 lambda: StringTensor(views=views, buffers=bufs).tolist()):
        with pytest.raises(ValueError, match=r"views.*\[0\].*non-zero padding"):
            call()
    # the prefix match reads no padding byte: it answers as for the zero-padded views
    assert ops.views_prefix_match(views, bufs, "ab").tolist() == [True, False]
    assert ops.views_prefix_match(views, bufs, "abz").tolist() == [False, False]


def _mapped_ipc(tmp_path):
    path = tmp_path / "t.arrow"
    table = pa.table({"text": pa.array(ITEMS), "view": pa.array(ITEMS, pa.string_view())})
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    return path, pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()


_WRITE_THROUGH_DLPACK = r"""
import sys
import numpy as np, pyarrow as pa, torch
from luminamoon import StringTensor
table = pa.ipc.open_file(pa.memory_map(sys.argv[1], "r")).read_all()
for col in ("text", "view"):
    st = StringTensor.from_arrow(table.column(col))
    for name, t in st.dlpack_buffers().items():
        a = np.from_dlpack(t)
        a.reshape(-1)[:1] = 1                 # a write a DLPack consumer is allowed to make
    st.data[:2] = 33                          # and one through torch
st = StringTensor.from_arrow(pa.array([b"abc", b"long enough to be out of line"], pa.binary()).cast(pa.string()))
np.from_dlpack(st.dlpack_buffers()["data"])[0] = 1
print("SURVIVED")
"""


def test_read_only_arrow_memory_is_not_shared_writable(tmp_path):
    """Issue 19 item 14: from_arrow on a memory-mapped IPC file returned tensors over the read-only
    mapping that looked writable; a write through dlpack_buffers() killed the process (SIGSEGV)."""
    import subprocess
    import sys

    path, table = _mapped_ipc(tmp_path)
    before = path.read_bytes()
    r = subprocess.run([sys.executable, "-c", _WRITE_THROUGH_DLPACK, str(path)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and "SURVIVED" in r.stdout, f"the child died (returncode {r.returncode}): {r.stderr}"
    assert path.read_bytes() == before
    # read-only Arrow buffers are copied (writable tensors), writable ones stay shared
    st = StringTensor.from_arrow(table.column("text"))
    assert st.tolist() == ITEMS
    assert st.data.data_ptr() != table.column("text").chunk(0).buffers()[2].address
    ro = pa.Array.from_buffers(pa.string(), 1, [None, pa.py_buffer(bytes(np.array([0, 3], np.int32).data)),
                                                pa.py_buffer(b"abc")])
    assert StringTensor.from_arrow(ro).tolist() == ["abc"]
    shared = pa.array(ITEMS)
    assert StringTensor.from_arrow(shared).data.data_ptr() == shared.buffers()[2].address
