"""Arrow interop for StringTensor: zero-copy in both directions where the layouts allow.

* offsets layout <-> ``pa.string()`` / ``pa.large_string()`` (the offsets and
  payload buffers are shared, not copied);
* views layout -> ``pa.string_view()`` (the views buffer plus one variadic data
  buffer per payload buffer, shared);
* ``pa.string_view()`` -> views layout (shared, fully validated first);
* chunked arrays, dictionary arrays (Polars Categorical/Enum) and Arrow
  PyCapsule producers (``__arrow_c_array__`` / ``__arrow_c_stream__``) are
  accepted too.

Bytes semantics (``validate=False`` with bytes that were never checked as UTF-8,
or bytes that are not UTF-8) export as ``binary`` / ``large_binary`` /
``binary_view``, never as a string type: Arrow readers trust a string array to
hold UTF-8.  Read-only Arrow buffers (memory-mapped files) are copied on import
(see ``StringTensor.from_arrow``).

Example:
    >>> import pyarrow as pa, luminamoon
    >>> st = luminamoon.StringTensor.from_arrow(pa.array(["a", "b"]))
    >>> pa.array(st).to_pylist()
    ['a', 'b']
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from . import _C
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the class is passed in (``cls``): string_tensor imports this module
    from .string_tensor import StringTensor

_lib = torch.ops.luminamoon
_STRING_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
_VIEW_TYPES = (pa.string_view(), pa.binary_view())


def _frombuffer(buf) -> torch.Tensor:
    """A uint8 CPU tensor over an Arrow/Python buffer: shared (kept alive by the tensor) when the
    buffer is writable, a copy when it is read-only (a memory-mapped file, ``bytes``): torch has no
    read-only tensors, and a write through one (``st.data[0] = 1``, ``dlpack_buffers()``) into a
    read-only mapping would kill the process with SIGSEGV."""
    mv = memoryview(buf)
    if len(mv) == 0:
        return torch.empty(0, dtype=torch.uint8)
    arr = np.frombuffer(buf, dtype=np.uint8)
    if mv.readonly:
        return torch.from_numpy(arr.copy())
    return torch.from_numpy(arr)


def _np_view(t: torch.Tensor) -> np.ndarray:
    return t.numpy() if t.numel() else np.empty(0, dtype=t.numpy().dtype)


def string_array(values) -> pa.Array:
    """``pa.array(values, type=pa.string())`` for a list of ``str``, without pyarrow's lazy import
    of pandas: ``pa.array`` imports pandas the first time a process calls it (to recognise pandas
    objects), 0.2-0.4 s that every ``luminamoon run`` paid in its first batch (the ids).  The strings
    are encoded by the C ``from_list`` and its two buffers wrapped as the Arrow array's (no copy).
    A list ``from_list`` refuses (a value that is not a str, a lone surrogate) goes to ``pa.array``,
    which converts or raises as before."""
    try:
        off, data = _C.from_list(values)
    except (TypeError, ValueError):
        return pa.array(values, type=pa.string())
    typ = pa.string() if off.dtype == torch.int32 else pa.large_string()
    return pa.Array.from_buffers(typ, off.numel() - 1, [None, pa.py_buffer(_np_view(off)),
                                                          pa.py_buffer(_np_view(data))])


def int64_array(values) -> pa.Array:
    """``pa.array(values, type=pa.int64())`` for integers (a sequence or numpy array), without
    pyarrow's lazy pandas import (see ``string_array``); the buffer is shared when ``values`` is a
    contiguous int64 numpy array.  Anything else -- floats (pyarrow truncates a list's, refuses a
    float array's fractions), unsigned values past the int64 range, bools, None, objects -- goes to
    ``pa.array``, which converts or raises as it always did."""
    arr = np.asarray(values)
    if arr.ndim == 1 and (arr.dtype.kind == "i" or (arr.dtype.kind == "u" and (
            arr.dtype.itemsize < 8 or not arr.size or int(arr.max()) <= np.iinfo(np.int64).max))):
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        return pa.Array.from_buffers(pa.int64(), len(arr), [None, pa.py_buffer(arr)])
    if arr.ndim == 1 and arr.size == 0:  # [] reads as float64
        return pa.Array.from_buffers(pa.int64(), 0, [None, pa.py_buffer(np.empty(0, dtype=np.int64))])
    return pa.array(values, type=pa.int64())


def _chunks_of(col) -> list:
    return list(col.chunks) if isinstance(col, pa.ChunkedArray) else [col]


def _valid_bits(chunk) -> np.ndarray:
    """The chunk's validity as bools (True: a value), read from its bitmap."""
    n, off = len(chunk), chunk.offset
    if chunk.null_count == 0:
        return np.ones(n, dtype=bool)
    raw = np.frombuffer(chunk.buffers()[0], dtype=np.uint8)[off // 8:(off + n + 7) // 8]
    return np.unpackbits(raw, bitorder="little")[off % 8:off % 8 + n].astype(bool)


def null_mask(col) -> np.ndarray:
    """``col.is_null().to_numpy()`` for an Array or ChunkedArray, from the validity bitmaps:
    ``to_numpy`` imports pandas on its first call in a process (see ``string_array``)."""
    parts = [~_valid_bits(c) for c in _chunks_of(col)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def int_values(col) -> np.ndarray:
    """The values of an int32/int64 Array or ChunkedArray as int64 (a null's value 0), from the
    buffers (``to_numpy`` imports pandas; see ``string_array``)."""
    parts = []
    for c in _chunks_of(col):
        if not len(c):
            continue
        dt = {pa.int32(): np.int32, pa.int64(): np.int64}[c.type]
        v = np.frombuffer(c.buffers()[1], dtype=dt, count=len(c), offset=c.offset * np.dtype(dt).itemsize)
        v = v.astype(np.int64)
        if c.null_count:
            v[~_valid_bits(c)] = 0
        parts.append(v)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _check_offsets(what: str, offsets: torch.Tensor, data: torch.Tensor) -> None:
    """Offsets non-decreasing, from >= 0, within data: checked before Arrow gets them (review s34).  The
    tensors are writable and shared (st.offsets, dlpack_buffers()); after ``st.offsets[1] = 2**31 - 2``
    the exported array's readers (``to_pylist``, Polars) read past the payload and the process died with
    SIGSEGV.  Arrow itself checks only the last offset.  One pass over the offsets (~2 ns a string)."""
    if _C.fast_offsets_match(offsets, data, "", 0) is not None:
        return
    try:
        _lib.prefix_match(offsets, data, "")
    except ValueError as e:
        raise ValueError(f"StringTensor.{what}: {str(e).split(': ', 1)[-1]} (were st.offsets or st.data "
                         "written to?)") from None


def to_arrow(st: StringTensor, zero_copy: bool = True) -> pa.Array:
    offsets, data = st.offsets, st.data
    if offsets.device.type != "cpu":
        offsets, data = offsets.cpu(), data.cpu()
    if not zero_copy:
        offsets, data = offsets.clone(), data.clone()
    _check_offsets("to_arrow", offsets, data)
    if st._is_utf8():
        typ = pa.string() if offsets.dtype == torch.int32 else pa.large_string()
    else:
        typ = pa.binary() if offsets.dtype == torch.int32 else pa.large_binary()
    return pa.Array.from_buffers(typ, len(st), [None, pa.py_buffer(_np_view(offsets)), pa.py_buffer(_np_view(data))])


def to_arrow_view(st: StringTensor) -> pa.Array:
    if st.device.type != "cpu":
        st = st.cpu()
    views, buffers = st._vb_pair()
    try:  # see _check_offsets
        _C.validate_views(views, list(buffers))
    except ValueError as e:
        raise ValueError(f"StringTensor.to_arrow_view: {str(e).split(': ', 1)[-1]} (were st.views or the "
                         "buffers written to?)") from None
    bufs = [None, pa.py_buffer(views.numpy().reshape(-1))] + [pa.py_buffer(_np_view(b)) for b in buffers]
    typ = pa.string_view() if st._is_utf8() else pa.binary_view()
    return pa.Array.from_buffers(typ, len(st), bufs)


def _from_offsets_array(cls, arr: pa.Array, validate: bool) -> StringTensor:
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
    # Arrow string arrays are UTF-8 by contract only: check unless told not to.
    return cls.from_buffers(offsets, data, validate=validate)


def _from_view_array(cls, arr: pa.Array, validate: bool) -> StringTensor:
    bufs = arr.buffers()
    n = len(arr)
    # The views buffer may be longer than the array (a slice, or spare capacity): take our rows only.
    vbuf = _frombuffer(bufs[1]) if bufs[1] is not None else torch.empty(0, dtype=torch.uint8)
    lo, hi = arr.offset * 16, (arr.offset + n) * 16
    if vbuf.numel() < hi:
        raise ValueError(f"the string_view array's views buffer holds {vbuf.numel()} bytes, fewer than the "
                         f"{hi} its offset ({arr.offset}) and length ({n}) need")
    views = vbuf[lo:hi].view(n, 16)
    payload = [_frombuffer(b) if b is not None else torch.empty(0, dtype=torch.uint8) for b in bufs[2:]]
    _C.validate_views(views, payload)  # bounds, padding, prefixes: never trust a foreign view
    st = cls(views=views, buffers=payload, utf8=bool(validate))
    if validate:
        _C.validate_utf8(*st._od_pair())
    return st


def _concat(cls, parts: list) -> StringTensor:
    if len(parts) == 1:
        return parts[0]
    # views layout: concatenate the views, re-basing each part's buffer indices (no payload copy).
    views, buffers = [], []
    for p in parts:
        pv, pb = p._vb_pair()
        v = pv.clone()
        if len(p) and len(buffers):
            long = v[:, :4].contiguous().view(torch.int32).view(-1) > 12
            idx = v[:, 8:12].contiguous().view(torch.int32).view(-1)
            idx = torch.where(long, idx + len(buffers), idx)
            v[:, 8:12] = idx.view(torch.uint8).view(-1, 4)
        views.append(v)
        buffers.extend(pb)
    flags = [p._utf8 for p in parts]
    utf8 = False if False in flags else (True if all(flags) else None)
    return cls(views=torch.cat(views) if views else torch.empty(0, 16, dtype=torch.uint8), buffers=buffers,
                        utf8=utf8)


def _nulls_error(count: int, first: int, dictionary: bool = False) -> ValueError:
    how = ("fill them first (pyarrow.compute.fill_null; a dictionary array whose nulls are entries of its "
           "dictionary: cast it to its value type first, fill_null leaves those)" if dictionary else
           "fill them first (pyarrow.compute.fill_null)")
    return ValueError(f"the Arrow array holds {count} nulls (the first at {first}); StringTensor has no nulls: {how}")


def _from_array(cls, arr: pa.Array, validate: bool, base: int = 0) -> StringTensor:
    """``base``: the position of ``arr``'s first element in what the caller passed (a chunk of a chunked
    array), for the position an error names."""
    if arr.null_count:
        first = arr.is_null().index(True).as_py()
        raise _nulls_error(arr.null_count, base + first)
    t = arr.type
    if pa.types.is_dictionary(t):
        # Decoded here, not with dictionary_decode (which pyarrow cannot do for string_view
        # dictionaries): the dictionary becomes a StringTensor, the indices select from it
        # (views layout: no payload copy).  Nulls in the indices were refused above.
        dictionary = arr.dictionary
        idx = arr.indices.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        if len(idx) and (int(idx.min()) < 0 or int(idx.max()) >= len(dictionary)):
            raise ValueError(f"the dictionary array's indices point outside its dictionary "
                             f"({len(dictionary)} values)")
        if dictionary.null_count:
            # A null entry of the dictionary (dictionary_encode(null_encoding="encode"), or one no index uses
            # after a slice) is not counted in arr.null_count.  The elements that select one are this array's
            # nulls; entries no element selects do not matter (review s35: any null entry refused the array,
            # and the error named the entry's position in the dictionary as the element's).
            used = null_mask(dictionary)[idx]
            if used.any():
                raise _nulls_error(int(used.sum()), base + int(np.argmax(used)), dictionary=True)
            vt = dictionary.type
            if vt in _VIEW_TYPES:  # fill_null has no view kernel: a copy of the dictionary as large_*
                vt = pa.large_string() if vt == pa.string_view() else pa.large_binary()
                dictionary = dictionary.cast(vt)
            empty = b"" if pa.types.is_binary(vt) or pa.types.is_large_binary(vt) else ""
            dictionary = pc.fill_null(dictionary, pa.scalar(empty, type=vt))
        values = _from_array(cls, dictionary, validate)
        return values.take(torch.from_numpy(np.ascontiguousarray(idx)))
    if t in _STRING_TYPES:
        return _from_offsets_array(cls, arr, validate)
    if t in _VIEW_TYPES:
        return _from_view_array(cls, arr, validate)
    raise TypeError(f"expected an Arrow string, large_string, string_view (or binary) array, got {t}")


def from_arrow(cls, obj, validate: bool = True) -> StringTensor:
    if isinstance(obj, cls):
        return obj
    if isinstance(obj, pa.ChunkedArray):
        starts = np.cumsum([0] + [len(c) for c in obj.chunks])  # the position an error names (review s35)
        parts = [_from_array(cls, c, validate, int(b)) for c, b in zip(obj.chunks, starts) if len(c)]
        return _concat(cls, parts or [_from_array(cls, pa.array([], type=obj.type), validate)])
    if isinstance(obj, pa.Array):
        return _from_array(cls, obj, validate)
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
