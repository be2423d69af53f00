"""StringTensor: a tensor of UTF-8 strings in two layouts (design.md §2).

* offsets layout: ``offsets`` (int32, or int64 past 2 GiB; N+1 entries,
  ``offsets[0] == 0``) and ``data`` (uint8 payload) — the GPU / Arrow ``string``
  / ``large_string`` layout;
* views layout (CPU): ``views`` (uint8 [N, 16], Arrow's Utf8View bytes) plus the
  payload ``buffers`` the long views point into.

Either layout is derived from the other on demand and cached: offsets → views
copies no payload; views → offsets copies the payload once.  Slicing, masks
and index tensors on the views layout copy no payload bytes either.

Example:
    >>> from luminamoon import StringTensor
    >>> st = StringTensor.from_list(["apple", "banana", "avocado"])
    >>> st.filter_by_prefix("a").tolist()
    ['apple', 'avocado']
    >>> st.to_arrow().to_pylist()
    ['apple', 'banana', 'avocado']
"""
from __future__ import annotations

import warnings
from typing import Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.utils._pytree as pytree

from . import _C
from . import ops as _ops  # noqa: F401  (registers the fake kernels)

__all__ = ["StringTensor"]

_lib = torch.ops.luminamoon
_WINDOW = 1 << 31  # long views address payloads > 2 GiB through 2 GiB windows


def _as_uint8(t, name: str) -> torch.Tensor:
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(t).__name__}")
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t.contiguous()


def _as_offsets(t, name: str = "offsets") -> torch.Tensor:
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(t).__name__}")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must have dtype int32 or int64, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] < 1:
        raise ValueError(f"{name} must be 1-D with N+1 >= 1 entries, got shape {tuple(t.shape)}")
    return t.contiguous()


def _as_index_tensor(t, name: str, empty_dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """torch.as_tensor with errors that name the argument; an empty list is an empty index (not float32)."""
    try:
        if isinstance(t, (list, tuple)) and len(t) == 0:
            return torch.empty(0, dtype=empty_dtype)
        return torch.as_tensor(t)
    except OverflowError:
        raise IndexError(f"{name} holds a value outside the int64 range") from None
    except (TypeError, ValueError, RuntimeError) as e:
        if "overflow" in str(e).lower():
            raise IndexError(f"{name} holds a value outside the int64 range") from None
        raise TypeError(f"{name} must be a tensor, array or list of integers/bools, got {type(t).__name__}") from None


def _frombuffer(buf) -> torch.Tensor:
    """A uint8 CPU tensor sharing memory with an Arrow/Python buffer (kept alive by the tensor)."""
    if len(memoryview(buf)) == 0:
        return torch.empty(0, dtype=torch.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # read-only buffers: we never write into the payload
        return torch.from_numpy(np.frombuffer(buf, dtype=np.uint8))


class StringTensor:
    """A sequence of ``str`` stored as tensors; see the module docstring.

    >>> st = StringTensor.from_list(["a", "bb", "ccc"])
    >>> len(st), st[1], st[1:].tolist()
    (3, 'bb', ['bb', 'ccc'])
    """

    __slots__ = ("_offsets", "_data", "_views", "_buffers", "__weakref__")
    __hash__ = None  # mutable-free but ``==`` is element-wise, like torch

    def __init__(self, offsets: torch.Tensor | None = None, data: torch.Tensor | None = None,
                 views: torch.Tensor | None = None, buffers: Sequence[torch.Tensor] | None = None):
        """Low-level constructor from trusted, already validated tensors; use the ``from_*`` methods."""
        if (offsets is None) != (data is None):
            raise ValueError("offsets and data must be given together")
        if offsets is None and views is None:
            raise ValueError("give offsets+data or views+buffers")
        self._offsets = offsets
        self._data = data
        self._views = views
        self._buffers = tuple(buffers) if buffers is not None else (() if views is not None else None)

    # ------------------------------------------------------------ construction
    @classmethod
    def from_list(cls, strings: Iterable[str], *, validate: bool = True) -> "StringTensor":
        """Build from a sequence of ``str`` (or ``bytes``, checked as UTF-8 unless ``validate=False``).

        >>> StringTensor.from_list(["x", "y"]).tolist()
        ['x', 'y']
        """
        if isinstance(strings, (str, bytes)):
            raise TypeError("strings must be a sequence of str, not a single str/bytes")
        if isinstance(strings, StringTensor):
            return strings
        if not isinstance(strings, (list, tuple)):
            try:
                strings = list(strings)
            except TypeError:
                raise TypeError(f"strings must be an iterable of str, got {type(strings).__name__}") from None
        offsets, data = _C.from_list(strings, True, validate)
        return cls(offsets, data)

    @classmethod
    def from_buffers(cls, offsets, data, *, validate: bool = True) -> "StringTensor":
        """Wrap offsets (int32/int64, N+1) and a uint8 payload without copying.

        Offsets must be non-negative, non-decreasing and within ``data``; the
        strings must be UTF-8 unless ``validate=False`` (bytes semantics).
        Offsets that do not start at 0 are rebased (the payload is still shared).

        >>> StringTensor.from_buffers(torch.tensor([0, 1, 3]), torch.tensor([97, 98, 99], dtype=torch.uint8)).tolist()
        ['a', 'bc']
        """
        offsets = _as_offsets(offsets)
        data = _as_uint8(data, "data")
        if offsets.device != data.device:
            raise ValueError(f"offsets and data must be on the same device, got {offsets.device} and {data.device}")
        if offsets.device.type == "meta":
            raise ValueError("offsets and data are on the meta device, which holds no values to check; "
                             "build the StringTensor on the CPU and move it with .to('meta')")
        if offsets.device.type == "cpu":
            # monotone + bounds (raises ValueError/IndexError naming the argument)
            _lib.prefix_match(offsets, data, "")
            if validate:
                _C.validate_utf8(offsets, data)
        else:
            if not bool((offsets[1:] >= offsets[:-1]).all()) or int(offsets[0]) < 0:
                raise ValueError("offsets must be non-negative and non-decreasing")
            if int(offsets[-1]) > data.numel():
                raise ValueError(f"offsets point past the end of data (data has {data.numel()} bytes)")
        start = int(offsets[0])
        if start:
            offsets = offsets - start
            data = data[start:]
        return cls(offsets, data)

    @classmethod
    def from_numpy(cls, array: np.ndarray) -> "StringTensor":
        """Build from a NumPy array of strings (StringDType, ``U``, object of str, or ``S`` bytes)."""
        if not isinstance(array, np.ndarray):
            raise TypeError(f"array must be a numpy.ndarray, got {type(array).__name__}")
        if array.ndim != 1:
            raise ValueError(f"array must be 1-D, got shape {array.shape}")
        if array.dtype.kind == "S":
            return cls.from_list([bytes(x) for x in array])
        if array.dtype.kind not in ("U", "O", "T"):
            raise TypeError(f"array must hold strings, got dtype {array.dtype}")
        return cls.from_list(array.tolist())

    @classmethod
    def from_arrow(cls, obj, *, validate: bool = True) -> "StringTensor":
        """Build from Arrow without copying the payload.

        Accepts ``pa.string()``, ``pa.large_string()``, ``pa.string_view()``
        arrays (and binary ones with ``validate=False``), chunked arrays, and
        any object with ``__arrow_c_array__`` / ``__arrow_c_stream__``.
        Null entries are refused (ValueError).
        """
        from . import arrow as _arrow

        return _arrow.from_arrow(cls, obj, validate=validate)

    # ------------------------------------------------------------------ layouts
    @property
    def offsets(self) -> torch.Tensor:
        """N+1 offsets (int32; int64 past 2 GiB of payload), materialised from the views if needed."""
        if self._offsets is None:
            self._materialize_offsets()
        return self._offsets

    @property
    def data(self) -> torch.Tensor:
        """The uint8 payload of the offsets layout."""
        if self._data is None:
            self._materialize_offsets()
        return self._data

    @property
    def views(self) -> torch.Tensor:
        """uint8 [N, 16] Utf8View views (CPU only), materialised without a payload copy if needed."""
        if self._views is None:
            self._materialize_views()
        return self._views

    @property
    def buffers(self) -> tuple:
        """The payload buffers the views point into."""
        if self._views is None:
            self._materialize_views()
        return self._buffers

    def _materialize_offsets(self) -> None:
        views = self._views
        total = int(views[:, :4].contiguous().view(torch.int32).sum()) if views.shape[0] else 0
        large = total > 0x7FFFFFFF
        self._offsets, self._data = _lib.offsets_from_views(views, list(self._buffers), large)

    def _materialize_views(self) -> None:
        if self._data.device.type != "cpu":
            raise ValueError("the views layout exists on the CPU only; call .cpu() first")
        self._views = _lib.views_from_offsets(self._offsets, self._data)
        n = self._data.numel()
        windows = (n >> 31) + 1
        self._buffers = tuple(self._data[w * _WINDOW:] for w in range(windows))

    @property
    def has_offsets_layout(self) -> bool:
        return self._offsets is not None

    @property
    def has_views_layout(self) -> bool:
        return self._views is not None

    @property
    def device(self) -> torch.device:
        return self._offsets.device if self._offsets is not None else self._views.device

    def _require_data(self, what: str) -> None:
        if self.device.type == "meta":
            raise ValueError(f"{what}: this StringTensor is on the meta device, which holds shapes but no strings; "
                             "build it on the CPU (or move it to a real device) first")

    @property
    def nbytes(self) -> int:
        """Bytes of string content (sum of lengths)."""
        self._require_data("nbytes")
        if self._offsets is not None:
            return int(self._offsets[-1]) if self._offsets.numel() else 0
        return int(self._views[:, :4].contiguous().view(torch.int32).sum())

    @property
    def storage_nbytes(self) -> int:
        """Bytes of memory held by the tensor's storages (offsets and payload, views
        and payload buffers, whichever exist); a storage shared by two of them is
        counted once.  A slice holds its parent's whole storage, so it counts it."""
        seen, total = set(), 0
        parts = [self._offsets, self._data, self._views, *(self._buffers or ())]
        for t in parts:
            if t is None or t.device.type == "meta":  # a meta tensor holds no memory (and no data_ptr to tell apart)
                continue
            st = t.untyped_storage()
            key = (t.device, st.data_ptr())
            if key not in seen:
                seen.add(key)
                total += st.nbytes()
        return total

    # ------------------------------------------------------------ sequence API
    def __len__(self) -> int:
        return (self._offsets.shape[0] - 1) if self._offsets is not None else self._views.shape[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __repr__(self) -> str:
        n = len(self)
        head = self[: min(n, 5)].tolist() if self.device.type == "cpu" else "..."
        more = ", ..." if n > 5 else ""
        return f"StringTensor({head}{more}, len={n}, device={self.device})"

    def tolist(self, *, bytes: bool = False) -> list:
        """The strings as a Python list of ``str`` (``bytes`` with ``bytes=True``)."""
        if not isinstance(bytes, bool):
            raise TypeError(f"bytes must be a bool, got {type(bytes).__name__}")
        self._require_data("tolist")
        if self.device.type != "cpu":
            return self.cpu().tolist(bytes=bytes)
        if self._views is not None:
            return _C.views_to_list(self._views, list(self._buffers), bytes)
        return _C.to_list(self._offsets, self._data, bytes)

    to_pylist = tolist

    def __getitem__(self, key):
        self._require_data("indexing")
        n = len(self)
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            i = int(key)
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of range for a StringTensor of length {n}")
            i %= n
            if self._offsets is not None:
                a, b = int(self._offsets[i]), int(self._offsets[i + 1])
                raw = self._data[a:b].cpu().numpy().tobytes()
                try:
                    return raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"element {i} is not valid UTF-8; use tolist(bytes=True)") from None
            return self[i:i + 1].tolist()[0]
        if isinstance(key, slice):
            return self._slice(key)
        if isinstance(key, (list, tuple)) and len(key) == 0:
            return self.take(key)
        if isinstance(key, (list, tuple, np.ndarray)):
            key = torch.as_tensor(np.asarray(key) if not isinstance(key, np.ndarray) else key)
        if isinstance(key, torch.Tensor):
            if key.dtype == torch.bool:
                return self.mask(key)
            if key.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
                return self.take(key)
            raise TypeError(f"index tensor must be bool or integer, got {key.dtype}")
        raise TypeError(f"StringTensor indices must be int, slice, bool mask or integer index tensor, "
                        f"got {type(key).__name__}")

    def _slice(self, key: slice) -> "StringTensor":
        start, stop, step = key.indices(len(self))
        if step == 1 and self.device.type != "cpu":
            stop = max(stop, start)
            off = self._offsets[start:stop + 1]
            base = off[0]
            return StringTensor(off - base, self._data[int(base):int(off[-1])] if stop > start else self._data[:0])
        if step != 1:
            count = len(range(start, stop, step))
            return self.take(start + step * torch.arange(count, dtype=torch.int64))
        return StringTensor(views=self.views[start:max(stop, start)], buffers=self.buffers)

    def take(self, index) -> "StringTensor":
        """The strings at ``index`` (integers, negative counted from the end). No payload copy on the CPU."""
        self._require_data("take")
        index = _as_index_tensor(index, "index")
        if index.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            raise TypeError(f"index must hold integers, got {index.dtype}")
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D, got shape {tuple(index.shape)}")
        n = len(self)
        index = index.to(device=self.device, dtype=torch.int64)
        if index.numel():
            lo, hi = int(index.min()), int(index.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of range for a StringTensor of length {n}")
            index = torch.where(index < 0, index + n, index)
        if self.device.type != "cpu":
            return StringTensor(*_lib.gather(self._offsets, self._data, index))
        return StringTensor(views=self.views.index_select(0, index), buffers=self.buffers)

    def mask(self, mask) -> "StringTensor":
        """The strings where ``mask`` (bool[N]) is true. No payload copy on the CPU."""
        self._require_data("mask")
        mask = _as_index_tensor(mask, "mask", torch.bool)
        if mask.dtype != torch.bool:
            raise TypeError(f"mask must be bool, got {mask.dtype}")
        if mask.shape != (len(self),):
            raise ValueError(f"mask must have shape ({len(self)},), got {tuple(mask.shape)}")
        mask = mask.to(self.device)
        if self.device.type != "cpu":
            return StringTensor(*_lib.compact(self._offsets, self._data, mask))
        return StringTensor(views=self.views[mask], buffers=self.buffers)

    compact = mask

    def _other(self, other) -> "StringTensor":
        if isinstance(other, StringTensor):
            return other
        if isinstance(other, (list, tuple)):
            return StringTensor.from_list(other)
        raise TypeError(f"other must be a str, StringTensor or list of str, got {type(other).__name__}")

    def fast_eq(self, other) -> torch.Tensor:
        """bool[N]: element-wise equality with one ``str`` or another StringTensor of the same length."""
        if isinstance(other, str):
            _ops._str_arg("fast_eq", "other", other)
            if self.device.type == "cpu" and self._views is not None:
                return _lib.views_equal_scalar(self._views, list(self._buffers), other)
            return _lib.equal_scalar(self.offsets, self.data, other)
        other = self._other(other)
        if len(other) != len(self):
            raise ValueError(f"other must have the same length ({len(self)}), got {len(other)}")
        if other.device != self.device:
            raise ValueError(f"other is on {other.device}, self on {self.device}")
        if self.device.type == "cpu" and self._views is not None and other._views is not None:
            return _lib.views_equal(self._views, list(self._buffers), other._views, list(other._buffers))
        a, b = self.offsets, other.offsets
        if a.dtype != b.dtype:
            a, b = a.long(), b.long()
        return _lib.equal(a, self.data, b, other.data)

    def __eq__(self, other):
        if isinstance(other, (str, StringTensor, list, tuple)):
            return self.fast_eq(other)
        return NotImplemented

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else ~r

    def equals(self, other) -> bool:
        """True when both hold the same strings in the same order."""
        self._require_data("equals")
        other = self._other(other) if not isinstance(other, StringTensor) else other
        return len(self) == len(other) and bool(self.fast_eq(other).all())

    def starts_with(self, prefix: str) -> torch.Tensor:
        """bool[N]: which strings start with ``prefix``."""
        _ops._str_arg("starts_with", "prefix", prefix)
        if self.device.type == "cpu" and self._views is not None:
            return _lib.views_prefix_match(self._views, list(self._buffers), prefix)
        return _lib.prefix_match(self.offsets, self.data, prefix)

    def filter_by_prefix(self, prefix: str) -> "StringTensor":
        """The strings that start with ``prefix``."""
        return self.mask(self.starts_with(prefix))

    def hash64(self, seed: int = 0) -> torch.Tensor:
        """int64[N]: XXH3-64 of each string (bits of the unsigned value)."""
        if not isinstance(seed, int):
            raise TypeError(f"seed must be int, got {type(seed).__name__}")
        seed = seed & 0xFFFFFFFFFFFFFFFF
        if seed >= 1 << 63:
            seed -= 1 << 64
        if self.device.type == "cpu" and self._views is not None:
            return _lib.views_hash64(self._views, list(self._buffers), seed)
        return _lib.hash64(self.offsets, self.data, seed)

    def pad_bytes(self, max_len: int, pad_id: int = 0, bos_id: int = -1, eos_id: int = -1):
        """Byte-level tokens and lengths: see ``luminamoon.ops.pad_bytes``."""
        return _ops.pad_bytes(self.offsets, self.data, max_len, pad_id, bos_id, eos_id)

    # ----------------------------------------------------------------- devices
    def to(self, device, non_blocking: bool = False) -> "StringTensor":
        """Move to ``device`` in the offsets layout (pinned staging when ``non_blocking``)."""
        if not isinstance(non_blocking, bool):
            raise TypeError(f"non_blocking must be a bool, got {type(non_blocking).__name__}")
        if not isinstance(device, (str, int, torch.device)) or isinstance(device, bool):
            raise TypeError(f"device must be a torch.device, a device string or an index, got {type(device).__name__}")
        try:
            device = torch.device(device)
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"device {device!r} is not a usable device: {e}") from None
        if device == self.device:
            return self
        self._require_data(f"to({str(device)!r})")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r}: CUDA is not available on this machine")
        off, data = self.offsets, self.data
        if device.type != "cpu" and non_blocking and off.device.type == "cpu" and not off.is_pinned():
            off, data = off.pin_memory(), data.pin_memory()
        return StringTensor(off.to(device, non_blocking=non_blocking), data.to(device, non_blocking=non_blocking))

    def cpu(self) -> "StringTensor":
        return self.to("cpu")

    def cuda(self, device=None, non_blocking: bool = False) -> "StringTensor":
        return self.to(device if device is not None else "cuda", non_blocking=non_blocking)

    def pin_memory(self) -> "StringTensor":
        """A copy of the offsets layout in pinned (page-locked) host memory."""
        if self.device.type != "cpu":
            raise ValueError(f"pin_memory: only a CPU StringTensor can be pinned, this one is on {self.device}")
        return StringTensor(self.offsets.pin_memory(), self.data.pin_memory())

    def is_pinned(self) -> bool:
        return self._offsets is not None and self._offsets.is_pinned() and self._data.is_pinned()

    # ----------------------------------------------------------------- exports
    def to_gpu_buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(offsets, payload) tensors on this tensor's device: the GPU layout."""
        return self.offsets, self.data

    def to_torch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(offsets, payload) tensors, shared with this StringTensor (no copy)."""
        return self.offsets, self.data

    def to_torch_gpu(self, device="cuda", non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(offsets, payload) moved to a GPU."""
        return self.to(device, non_blocking=non_blocking).to_gpu_buffers()

    def to_numpy_gpu(self) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, payload) in the GPU layout as host NumPy arrays (shared on the CPU)."""
        self._require_data("to_numpy_gpu")
        off, data = self.offsets, self.data
        if off.device.type != "cpu":
            off, data = off.cpu(), data.cpu()
        return off.numpy(), data.numpy()

    def to_numpy(self) -> np.ndarray:
        """A NumPy array of the strings (``StringDType``)."""
        return np.array(self.tolist(), dtype=np.dtypes.StringDType())

    def to_arrow(self, zero_copy: bool = True):
        """``pa.string()`` (int32 offsets) or ``pa.large_string()`` array sharing the offsets and payload."""
        self._require_data("to_arrow")
        from . import arrow as _arrow

        return _arrow.to_arrow(self, zero_copy=zero_copy)

    def to_arrow_view(self):
        """``pa.string_view()`` array over the views and payload buffers (no copy)."""
        self._require_data("to_arrow_view")
        from . import arrow as _arrow

        return _arrow.to_arrow_view(self)

    def to_polars(self, name: str = ""):
        """A ``polars.Series`` of the strings."""
        import polars as pl

        return pl.Series(name, self.to_arrow())

    def __arrow_c_schema__(self):
        return self.to_arrow().type.__arrow_c_schema__()

    def __arrow_c_array__(self, requested_schema=None):
        return self.to_arrow().__arrow_c_array__(requested_schema)

    def __arrow_c_stream__(self, requested_schema=None):
        import pyarrow as pa

        return pa.chunked_array([self.to_arrow()]).__arrow_c_stream__(requested_schema)

    def dlpack_buffers(self) -> dict:
        """The tensors behind the strings, for DLPack consumers (``np.from_dlpack``,
        ``cupy.from_dlpack``): ``offsets`` and ``data`` always, ``views`` on the CPU.
        Strings themselves have no DLPack type; treat ``data`` as read-only."""
        out = {"offsets": self.offsets, "data": self.data}
        if self.device.type == "cpu":
            out["views"] = self.views
        return out


# ---- pytree: flatten to the tensors of whichever layouts are present.

def _flatten(st: StringTensor):
    children, ctx = [], []
    if st._offsets is not None:
        children += [st._offsets, st._data]
        ctx.append("offsets")
    if st._views is not None:
        children += [st._views, *st._buffers]
        ctx.append(("views", len(st._buffers)))
    return children, tuple(ctx)


def _unflatten(children, ctx) -> StringTensor:
    children = list(children)
    offsets = data = views = None
    buffers = None
    i = 0
    for item in ctx:
        if item == "offsets":
            offsets, data = children[i], children[i + 1]
            i += 2
        else:
            nb = item[1]
            views, buffers = children[i], children[i + 1:i + 1 + nb]
            i += 1 + nb
    return StringTensor(offsets, data, views, buffers)


pytree.register_pytree_node(
    StringTensor, _flatten, _unflatten,
    serialized_type_name="luminamoon.StringTensor",
)
