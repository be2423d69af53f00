"""Arrow interop for StringTensor: zero-copy in both directions where the layouts allow.

* offsets layout <-> ``pa.string()`` / ``pa.large_string()`` (the offsets and
  payload buffers are shared, not copied);
* views layout -> ``pa.string_view()`` (the views buffer plus one variadic data
  buffer per payload buffer, shared);
* ``pa.string_view()`` -> views layout (shared, fully validated first);
* chunked arrays and Arrow PyCapsule producers (``__arrow_c_array__`` /
  ``__arrow_c_stream__``) are accepted too.

Example:
    >>> import pyarrow as pa, luminamoon
    >>> st = luminamoon.StringTensor.from_arrow(pa.array(["a", "b"]))
    >>> pa.array(st).to_pylist()
    ['a', 'b']
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import torch

from . import _C
from .string_tensor import StringTensor, _frombuffer

_lib = torch.ops.luminamoon
_STRING_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
_VIEW_TYPES = (pa.string_view(), pa.binary_view())


def _np_view(t: torch.Tensor) -> np.ndarray:
    return t.numpy() if t.numel() else np.empty(0, dtype=t.numpy().dtype)


def to_arrow(st: StringTensor, zero_copy: bool = True) -> pa.Array:
    offsets, data = st.offsets, st.data
    if offsets.device.type != "cpu":
        offsets, data = offsets.cpu(), data.cpu()
    if not zero_copy:
        offsets, data = offsets.clone(), data.clone()
    typ = pa.string() if offsets.dtype == torch.int32 else pa.large_string()
    return pa.Array.from_buffers(typ, len(st), [None, pa.py_buffer(_np_view(offsets)), pa.py_buffer(_np_view(data))])


def to_arrow_view(st: StringTensor) -> pa.Array:
    if st.device.type != "cpu":
        st = st.cpu()
    views = st.views
    bufs = [None, pa.py_buffer(views.numpy().reshape(-1))] + [pa.py_buffer(_np_view(b)) for b in st.buffers]
    return pa.Array.from_buffers(pa.string_view(), len(st), bufs)


def _from_offsets_array(arr: pa.Array, validate: bool) -> StringTensor:
    n = len(arr)
    _, obuf, dbuf = arr.buffers()
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    odt = torch.int64 if wide else torch.int32
    width = 8 if wide else 4
    if obuf is None:  # an empty array may have no offsets buffer
        offsets = torch.zeros(n + 1, dtype=odt)
    else:
        offsets = _frombuffer(obuf)[arr.offset * width:(arr.offset + n + 1) * width].view(odt)
    data = _frombuffer(dbuf) if dbuf is not None else torch.empty(0, dtype=torch.uint8)
    is_text = pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
    # Arrow string arrays are UTF-8 by contract only: check unless told not to.
    return StringTensor.from_buffers(offsets, data, validate=validate and (is_text or validate))


def _from_view_array(arr: pa.Array, validate: bool) -> StringTensor:
    bufs = arr.buffers()
    views = _frombuffer(bufs[1]).view(-1, 16)[arr.offset:arr.offset + len(arr)]
    payload = [_frombuffer(b) if b is not None else torch.empty(0, dtype=torch.uint8) for b in bufs[2:]]
    _C.validate_views(views, payload)  # bounds, padding, prefixes: never trust a foreign view
    st = StringTensor(views=views, buffers=payload)
    if validate:
        _C.validate_utf8(st.offsets, st.data)
    return st


def _concat(parts: list) -> StringTensor:
    if len(parts) == 1:
        return parts[0]
    # views layout: concatenate the views, re-basing each part's buffer indices (no payload copy).
    views, buffers = [], []
    for p in parts:
        v = p.views.clone()
        if len(p) and len(buffers):
            long = v[:, :4].contiguous().view(torch.int32).view(-1) > 12
            idx = v[:, 8:12].contiguous().view(torch.int32).view(-1)
            idx = torch.where(long, idx + len(buffers), idx)
            v[:, 8:12] = idx.view(torch.uint8).view(-1, 4)
        views.append(v)
        buffers.extend(p.buffers)
    return StringTensor(views=torch.cat(views) if views else torch.empty(0, 16, dtype=torch.uint8), buffers=buffers)


def _from_array(arr: pa.Array, validate: bool) -> StringTensor:
    if arr.null_count:
        first = arr.is_null().index(True).as_py()
        raise ValueError(f"the Arrow array holds {arr.null_count} nulls (the first at {first}); "
                         "StringTensor has no nulls: fill them first (pyarrow.compute.fill_null)")
    t = arr.type
    if pa.types.is_dictionary(t):
        return _from_array(arr.dictionary_decode(), validate)
    if t in _STRING_TYPES:
        if t in (pa.binary(), pa.large_binary()) and validate:
            pass  # checked as UTF-8 below
        return _from_offsets_array(arr, validate)
    if t in _VIEW_TYPES:
        return _from_view_array(arr, validate)
    raise TypeError(f"expected an Arrow string, large_string, string_view (or binary) array, got {t}")


def from_arrow(cls, obj, validate: bool = True) -> StringTensor:
    if isinstance(obj, StringTensor):
        return obj
    if isinstance(obj, pa.ChunkedArray):
        chunks = [c for c in obj.chunks if len(c)] or [pa.array([], type=obj.type)]
        return _concat([_from_array(c, validate) for c in chunks])
    if isinstance(obj, pa.Array):
        return _from_array(obj, validate)
    if hasattr(obj, "__arrow_c_stream__"):
        return from_arrow(cls, pa.chunked_array(obj), validate)
    if hasattr(obj, "__arrow_c_array__"):
        return from_arrow(cls, pa.array(obj), validate)
    try:  # polars Series and friends
        import polars as pl

        if isinstance(obj, pl.Series):
            return from_arrow(cls, obj.to_arrow(), validate)
    except ImportError:
        pass
    raise TypeError(f"obj must be an Arrow array, chunked array or an Arrow PyCapsule producer, "
                    f"got {type(obj).__name__}")
