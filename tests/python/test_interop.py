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
    off, data = st.to_torch()
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
    assert StringTensor.from_arrow(pa.array([b"ok", b"\xff"], type=pa.binary()), validate=False).tolist(bytes=True) == [b"ok", b"\xff"]
    with pytest.raises(TypeError, match="string"):
        StringTensor.from_arrow(pa.array([1, 2]))


def test_corrupt_string_view_refused():
    arr = pa.array(ITEMS, type=pa.string_view())
    views = bytearray(arr.buffers()[1].to_pybytes())
    views[6 * 16 + 12:6 * 16 + 16] = (10**9).to_bytes(4, "little")  # offset far past the buffer
    bad = pa.Array.from_buffers(pa.string_view(), len(ITEMS), [None, pa.py_buffer(views), arr.buffers()[2]])
    with pytest.raises((ValueError, IndexError), match="view"):
        StringTensor.from_arrow(bad)
