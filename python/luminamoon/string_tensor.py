"""StringTensor: a tensor of UTF-8 strings in two layouts (described below).

* offsets layout: ``offsets`` (int32, or int64 past 2 GiB; N+1 entries,
  ``offsets[0] == 0``) and ``data`` (uint8 payload) — the GPU / Arrow ``string``
  / ``large_string`` layout;
* views layout (CPU): ``views`` (uint8 [N, 16], Arrow's Utf8View bytes) plus the
  payload ``buffers`` the long views point into.

``from_list`` builds both layouts in its one pass over the list, over one shared
payload (16 bytes a string for the views on top of 4 for the offsets).  The
zero-copy constructors (``from_arrow``, ``from_buffers``) and the stages' outputs
hold one layout and build the other on first use, then keep it: building views
costs a pass over the offsets (not over the payload) that a tensor headed for
``collate`` or a GPU never needs.  Either layout is derived from the other that
way: offsets → views copies no payload; views → offsets copies the payload once.
Slicing, masks and index tensors on the views layout copy no payload bytes either.
On the CPU each method runs on its faster layout (see ``StringTensor.fast_eq``).

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
from . import arrow as _arrow
from ._intarg import as_int
from . import ops as _ops  # noqa: F401  (registers the fake kernels)

_VIEWS_HASH_VECTOR = bool(_C.hash_views_vector())

__all__ = ["StringTensor"]

_lib = torch.ops.luminamoon
# The eager CPU calls of starts_with / fast_eq / hash64 go to luminamoon._C (torch_ops/bind_strops.cpp):
# the same core kernels as the operators, without the ~3.5-5 us torch.ops dispatch a call (issue 13: it
# capped the 2-thread speed-up on documents).  They return None for anything they do not handle (a
# kernel error, a non-CPU tensor), and the method then repeats the call through torch.ops, which raises
# the operator's usual error.  torch.compile / torch.ops users are unaffected.
_fast_om = _C.fast_offsets_match
_fast_oe = _C.fast_offsets_equal
_fast_oh = _C.fast_offsets_hash64
_fast_vm = _C.fast_views_match
_fast_vf = _C.fast_views_filter_prefix
_fast_ve = _C.fast_views_equal
_fast_vh = _C.fast_views_hash64
_compiling = torch.compiler.is_compiling  # True while torch.compile traces: keep the operators in the graph
_WINDOW = 1 << 31  # long views address payloads > 2 GiB through 2 GiB windows
_MAX_STRING_LEN = (1 << 31) - 1  # the longest string (LM_MAX_STRING_LEN: a view's length)


def _as_uint8(t, name: str) -> torch.Tensor:
    if isinstance(t, np.ndarray):
        # A read-only array (np.frombuffer of bytes, np.memmap(mode="r")) is copied, as from_arrow copies
        # read-only Arrow buffers (review s34): torch has no read-only tensors (it warned "undefined
        # behavior") and a write through st.data / dlpack_buffers() into a read-only mapping is a SIGSEGV.
        t = torch.from_numpy(t if t.flags.writeable else t.copy())
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(t).__name__}")
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must have dtype uint8, got {t.dtype}")
    if t.dim() != 1:
        raise ValueError(f"{name} must be 1-D, got shape {tuple(t.shape)}")
    return t.contiguous()


def _as_offsets(t, name: str = "offsets") -> torch.Tensor:
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t if t.flags.writeable else t.copy())  # read-only: copied (see _as_uint8)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(t).__name__}")
    if t.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must have dtype int32 or int64, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] < 1:
        raise ValueError(f"{name} must be 1-D with N+1 >= 1 entries, got shape {tuple(t.shape)}")
    return t.contiguous()


def _as_index_tensor(t, name: str, empty_dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """torch.as_tensor with errors that name the argument; an empty list is an empty index (not float32)."""
    if isinstance(t, torch.Tensor) and t.device.type == "meta":
        raise ValueError(f"{name} is on the meta device, which holds no values to select with; "
                         "pass a CPU (or the StringTensor's device) tensor")
    try:
        if isinstance(t, (list, tuple)) and len(t) == 0:
            return torch.empty(0, dtype=empty_dtype)
        if isinstance(t, np.ndarray):
            t = _canonical_unsigned(t)
        return torch.as_tensor(t)
    except OverflowError:
        raise IndexError(f"{name} holds a value outside the int64 range") from None
    except (TypeError, ValueError, RuntimeError) as e:
        if "overflow" in str(e).lower():
            raise IndexError(f"{name} holds a value outside the int64 range") from None
        raise TypeError(f"{name} must be a tensor, array or list of integers/bools, got {type(t).__name__}") from None


def _bool_arg(method: str, name: str, value) -> bool:
    """A bool flag, refused with a TypeError naming it otherwise (review s34: ``validate="no"`` was read as
    True by from_arrow, ``validate=None`` as False by from_buffers, and from_list raised pybind11's
    "incompatible function arguments" that names no argument)."""
    if not isinstance(value, bool):
        raise TypeError(f"{method}: {name} must be a bool, got {type(value).__name__}")
    return value


def _windows(data: torch.Tensor) -> tuple:
    """The payload buffers views over ``data`` address: buffer w is data[w * 2**31:]."""
    return tuple(data[w * _WINDOW:] for w in range((data.numel() >> 31) + 1))


def _old_bytes_keyword(kwargs: dict, as_bytes, method: str):
    """tolist()'s deprecated ``bytes=`` keyword: its value (DeprecationWarning); any other keyword: TypeError."""
    unknown = sorted(k for k in kwargs if k != "bytes")
    if unknown:
        raise TypeError(f"{method}() got an unexpected keyword argument {unknown[0]!r}")
    if as_bytes is not False:
        raise TypeError(f"{method}(): give as_bytes or bytes (its deprecated old name), not both")
    warnings.warn(f"{method}(bytes=...) is deprecated; use tolist(as_bytes=...)", DeprecationWarning, stacklevel=3)
    return kwargs["bytes"]


def _pinning_available() -> bool:
    """Pinned memory needs an accelerator; torch raises an unclear RuntimeError without one."""
    acc = getattr(torch, "accelerator", None)
    if acc is not None and hasattr(acc, "is_available"):
        return bool(acc.is_available())
    return torch.cuda.is_available()


_UINT8_INDEX = ("a uint8 index is ambiguous (torch reads a uint8 index tensor as a mask): pass .bool() "
                "for a mask or .long() for indices (take() reads uint8 as indices)")


# uint16/32/64 index tensors (torch.as_tensor of a NumPy uint16/32/64 index array): indices, as in NumPy (review
# s35: refused with "index must hold integers, got torch.uint32").  Read as int64 after a range check (a uint64
# past 2**63 - 1 would otherwise turn into a negative index, counted from the end).
_WIDE_UNSIGNED = tuple(getattr(torch, name) for name in ("uint16", "uint32", "uint64") if hasattr(torch, name))


def _canonical_unsigned(arr: np.ndarray) -> np.ndarray:
    """np.asarray([2**63]) is numpy.ulonglong, a uint64 that torch.as_tensor cannot convert (it takes
    numpy.uint64, the same 8 bytes under another type code): the canonical type of that size."""
    if arr.dtype.kind == "u" and arr.dtype.char != np.dtype(f"u{arr.dtype.itemsize}").char:
        return arr.view(np.dtype(f"u{arr.dtype.itemsize}"))  # (dtype == says they are equal)
    return arr


def _unsigned_index(index: torch.Tensor, n: int) -> torch.Tensor:
    if index.dtype != torch.uint64:
        return index.to(torch.int64)  # every uint16/uint32 value fits int64
    arr = index.cpu().numpy()  # torch has few uint64 kernels: the range check in NumPy
    if arr.size and int(arr.max()) >= n:
        raise IndexError(f"index {int(arr.max())} is out of range for a StringTensor of length {n}")
    return torch.from_numpy(arr.astype(np.int64)).to(index.device)


def _scalar_index(key) -> int:
    """The int a 0-d index tensor/array stands for (torch and NumPy read one as an element index)."""
    if isinstance(key, torch.Tensor):
        if key.device.type == "meta":
            raise ValueError("index is on the meta device, which holds no value to index with")
        if key.dtype == torch.uint8:
            raise TypeError(_UINT8_INDEX)
        ok = not (key.dtype == torch.bool or key.dtype.is_floating_point or key.dtype.is_complex)
    else:
        ok = key.dtype.kind in "iu"
    if not ok:
        raise TypeError(f"a 0-d index must hold an integer, got dtype {key.dtype} "
                        "(use a 1-D bool mask of length N to select with booleans)")
    return int(key.item())


class StringTensor:
    """A sequence of ``str`` stored as tensors; see the module docstring.

    >>> st = StringTensor.from_list(["a", "bb", "ccc"])
    >>> len(st), st[1], st[1:].tolist()
    (3, 'bb', ['bb', 'ccc'])
    """

    # Each layout is one attribute holding a tuple, (offsets, data) and (views, buffers), set once
    # (None -> tuple, never back): a lazily built layout is published by a single store, so another
    # thread sees either no layout or a complete one (never views without their buffers).
    # _utf8: True when the strings were checked as UTF-8 (or built from str), False for bytes
    # semantics (validate=False), None when not known (the trusted constructor): to_arrow checks
    # it then, once.
    __slots__ = ("_od", "_vb", "_utf8", "__weakref__")
    __hash__ = None  # mutable-free but ``==`` is element-wise, like torch

    def __init__(self, offsets: torch.Tensor | None = None, data: torch.Tensor | None = None,
                 views: torch.Tensor | None = None, buffers: Sequence[torch.Tensor] | None = None,
                 *, utf8: bool | None = None):
        """Low-level constructor from trusted, already validated tensors; use the ``from_*`` methods.

        ``utf8``: True when the strings are known to be UTF-8, False for bytes semantics (exported to
        Arrow as binary), None when not known (checked when first exported)."""
        if (offsets is None) != (data is None):
            raise ValueError("offsets and data must be given together")
        if offsets is None and views is None:
            raise ValueError("give offsets+data or views+buffers")
        self._od = (offsets, data) if offsets is not None else None
        self._vb = (views, tuple(buffers) if buffers is not None else ()) if views is not None else None
        self._utf8 = utf8

    def _od_pair(self) -> tuple:
        """(offsets, data), materialised from the views if needed: one consistent pair."""
        od = self._od
        if od is None:
            od = self._materialize_offsets()
        return od

    def _vb_pair(self) -> tuple:
        """(views, buffers), materialised from the offsets if needed: one consistent pair."""
        vb = self._vb
        if vb is None:
            vb = self._materialize_views()
        return vb

    def _derived(self, *args, **kwargs) -> "StringTensor":
        """A StringTensor holding a selection of these strings (same UTF-8 status)."""
        return StringTensor(*args, utf8=self._utf8, **kwargs)

    # ------------------------------------------------------------ construction
    @classmethod
    def from_list(cls, strings: Iterable[str], *, validate: bool = True) -> "StringTensor":
        """Build from a sequence of ``str`` (or ``bytes``, checked as UTF-8 unless ``validate=False``).

        Both layouts are built in the same single pass over the list and share one payload:
        the offsets layout (4 bytes a string, 8 past 2 GiB, plus the UTF-8 bytes) and the
        16-byte views (Arrow Utf8View) whose long strings point into that payload, so every
        method runs on its fastest layout from the first call.  Memory: 20 bytes a string
        plus the payload (the views are 16 of them: for one-byte strings 21 bytes a string
        in all, for ~700-byte documents +2%).  The peak while building is that final size
        (no copy of the list, no side array per string).  The offsets and views (from 256 KiB)
        and the payload (from 8 MB) are anonymous mappings, on 2 MiB transparent huge pages from
        2 MiB (where the system allows them; a mapping released by an earlier tensor is reused),
        so the kernels that read them take a TLB miss every 2 MiB instead of every 4 KiB
        (torch_ops/bind_array.h).

        >>> StringTensor.from_list(["x", "y"]).tolist()
        ['x', 'y']
        """
        _bool_arg("StringTensor.from_list", "validate", validate)
        if isinstance(strings, (str, bytes)):
            raise TypeError("strings must be a sequence of str, not a single str/bytes")
        if isinstance(strings, StringTensor):
            return strings
        if not isinstance(strings, (list, tuple)):
            try:
                strings = list(strings)
            except TypeError:
                raise TypeError(f"strings must be an iterable of str, got {type(strings).__name__}") from None
        # One pass over the items builds both layouts over one payload (no copy of the list,
        # no per-string side array): offsets + data, and the views whose long strings point
        # into data (buffer w is data[w * 2**31:]).
        offsets, data, views = _C.from_list_views(strings, True, validate)
        # str items are UTF-8 by construction; unchecked bytes items make it bytes semantics
        utf8 = True if validate else all(isinstance(x, str) for x in strings)
        return cls(offsets, data, views, _windows(data), utf8=utf8)

    @classmethod
    def from_buffers(cls, offsets, data, *, validate: bool = True) -> "StringTensor":
        """Wrap offsets (int32/int64, N+1) and a uint8 payload without copying.

        Offsets must be non-negative, non-decreasing and within ``data``; each string
        must be UTF-8 on its own (no string may start or end inside a character) unless
        ``validate=False`` (bytes semantics), and hold at most 2**31 - 1 bytes.
        Offsets that do not start at 0 are rebased (the payload is still shared).

        >>> StringTensor.from_buffers(torch.tensor([0, 1, 3]), torch.tensor([97, 98, 99], dtype=torch.uint8)).tolist()
        ['a', 'bc']
        """
        _bool_arg("StringTensor.from_buffers", "validate", validate)
        offsets = _as_offsets(offsets)
        data = _as_uint8(data, "data")
        if offsets.device != data.device:
            raise ValueError(f"offsets and data must be on the same device, got {offsets.device} and {data.device}")
        if offsets.device.type == "meta":
            raise ValueError("offsets and data are on the meta device, which holds no values to check; "
                             "build the StringTensor on the CPU and move it with .to('meta')")
        if offsets.device.type == "cpu":
            # monotone + bounds, checked in C by the cheapest op that checks them (its message names
            # the op: said again here as from_buffers' own)
            try:
                _lib.prefix_match(offsets, data, "")
            except ValueError as e:
                raise ValueError(f"StringTensor.from_buffers: {str(e).split(': ', 1)[-1]}") from None
            if validate:
                _C.validate_utf8(offsets, data)
        else:
            if not bool((offsets[1:] >= offsets[:-1]).all()) or int(offsets[0]) < 0:
                raise ValueError("offsets must be non-negative and non-decreasing")
            if int(offsets[-1]) > data.numel():
                raise ValueError(f"offsets point past the end of data (data has {data.numel()} bytes)")
        if offsets.dtype == torch.int64 and data.numel() > _MAX_STRING_LEN and offsets.numel() > 1:
            # one string of 2**31 bytes or more: every CPU method that works on the views layout
            # (slicing, mask, starts_with) failed later with "size or offset overflows its type" (review
            # s38); refused here as from_list refuses it.  Only a payload over 2**31 - 1 bytes can hold one.
            lens = offsets[1:] - offsets[:-1]
            i = int(lens.argmax())
            if int(lens[i]) > _MAX_STRING_LEN:
                raise ValueError(f"StringTensor.from_buffers: string {i} is {int(lens[i])} bytes, longer than "
                                 "2**31 - 1, the most one string of a StringTensor holds (the views layout's "
                                 "32-bit length, as Arrow's string_view)")
        start = int(offsets[0])
        if start:
            offsets = offsets - start
            data = data[start:]
        return cls(offsets, data, utf8=bool(validate))

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
        arrays (and binary ones with ``validate=False``), dictionary arrays of
        those (Polars Categorical/Enum), chunked arrays, and any object with
        ``__arrow_c_array__`` / ``__arrow_c_stream__``.
        Null entries are refused (ValueError).

        Read-only Arrow buffers (a memory-mapped IPC file, ``pa.py_buffer`` of
        ``bytes``) are copied once: torch tensors cannot be read-only, and a
        write into a read-only mapping would crash the process.  Writable
        buffers are shared.  With ``validate=False`` the tensor has bytes
        semantics and ``to_arrow()`` exports it as ``binary``.
        """
        _bool_arg("StringTensor.from_arrow", "validate", validate)
        return _arrow.from_arrow(cls, obj, validate=validate)

    # ------------------------------------------------------------------ layouts
    @property
    def offsets(self) -> torch.Tensor:
        """N+1 offsets (int32; int64 past 2 GiB of payload), materialised from the views if needed."""
        return self._od_pair()[0]

    @property
    def data(self) -> torch.Tensor:
        """The uint8 payload of the offsets layout."""
        return self._od_pair()[1]

    @property
    def views(self) -> torch.Tensor:
        """uint8 [N, 16] Utf8View views (CPU only), materialised without a payload copy if needed."""
        return self._vb_pair()[0]

    @property
    def buffers(self) -> tuple:
        """The payload buffers the views point into."""
        return self._vb_pair()[1]

    def _materialize_offsets(self) -> tuple:
        od = self._build_offsets()
        if not _compiling():
            self._od = od  # one store publishes both
        return od

    def _build_offsets(self) -> tuple:
        """(offsets, data) from the views (a copy of the strings' bytes), not stored."""
        views, buffers = self._vb
        if _compiling():
            # Under torch.compile the total length is data-dependent: int(sum) / `if views.shape[0]` failed
            # fullgraph tracing of every views-only tensor (a slice, take, mask, from_arrow string_view:
            # review s34).  int64 offsets are right for any size; not cached (no side effect on the input).
            return tuple(_lib.offsets_from_views(views, list(buffers), True))
        total = int(views[:, :4].contiguous().view(torch.int32).sum()) if views.shape[0] else 0
        large = total > 0x7FFFFFFF
        return tuple(_lib.offsets_from_views(views, list(buffers), large))

    def _materialize_views(self) -> tuple:
        offsets, data = self._od
        if data.device.type != "cpu":
            raise ValueError("the views layout exists on the CPU only; call .cpu() first")
        # eager: _C's copy of the op (the array on huge pages from 2 MiB, see torch_ops/bind_array.h);
        # None for anything it does not handle, and the op then raises its usual error
        views = None if _compiling() else _C.fast_views_from_offsets(offsets, data)
        if views is None:
            views = _lib.views_from_offsets(offsets, data)
        vb = (views, _windows(data))
        self._vb = vb  # one store publishes both
        return vb

    @property
    def has_offsets_layout(self) -> bool:
        return self._od is not None

    @property
    def has_views_layout(self) -> bool:
        return self._vb is not None

    @property
    def device(self) -> torch.device:
        od = self._od
        return od[0].device if od is not None else self._vb[0].device

    def _require_data(self, what: str) -> None:
        if self.device.type == "meta":
            raise ValueError(f"{what}: this StringTensor is on the meta device, which holds shapes but no strings; "
                             "build it on the CPU (or move it to a real device) first")

    @property
    def nbytes(self) -> int:
        """Bytes of string content (sum of lengths)."""
        self._require_data("nbytes")
        od = self._od
        if od is not None:
            return int(od[0][-1]) if od[0].numel() else 0
        return int(self._vb[0][:, :4].contiguous().view(torch.int32).sum())

    @property
    def storage_nbytes(self) -> int:
        """Bytes of memory held by the tensor's storages (offsets and payload, views
        and payload buffers, whichever exist); a storage shared by two of them is
        counted once.  A slice holds its parent's whole storage, so it counts it."""
        seen, total = set(), 0
        od, vb = self._od, self._vb
        parts = [*(od or ()), *((vb[0], *vb[1]) if vb is not None else ())]
        for t in parts:
            if t is None or t.device.type == "meta":  # a meta tensor holds no memory (and no data_ptr to tell apart)
                continue
            st = t.untyped_storage()
            key = (t.device, st.data_ptr())
            if key not in seen:
                seen.add(key)
                total += st.nbytes()
        return total

    # ----------------------------------------------------------------- pickling
    # Review s34: pickle / torch.save / copy.deepcopy of a slice, take or mask result wrote the parent's whole
    # payload storage (a 2-string slice of a 10 MB tensor pickled to 10 MB, an empty mask result too), and
    # DataLoader workers moved it all into shared memory.  A tensor holding far more storage than its
    # strings need is pickled as a compact offsets layout (its strings' bytes copied once); others as is.
    # And plain pickle writes a storage once per tensor that views it (no memo across tensors): from_list's
    # views buffers, windows of its payload, were written (and unpickled) as a second copy of the payload;
    # they are now rebuilt from the payload.
    def _pickle_wasteful(self) -> bool:
        if self.device.type == "meta":
            return False
        n = len(self)
        need = self.nbytes + 8 * (n + 1) + (16 * n if self._vb is not None else 0)
        return self.storage_nbytes > 2 * need + (1 << 16)

    def __getstate__(self):
        od, vb = self._od, self._vb
        if self._pickle_wasteful():
            if od is not None:
                off, data = od
                start, end = int(off[0]), int(off[-1])
                od = ((off - start) if start else off.clone()), data[start:end].clone()
            else:
                od = self._build_offsets()  # a fresh, compact copy (not kept by this tensor)
            vb = None
        elif od is not None and vb is not None and self._buffers_are_windows():
            vb = (vb[0], None)  # rebuilt by __setstate__ as _windows(data)
        return {"od": od, "vb": vb, "utf8": self._utf8}

    def _buffers_are_windows(self) -> bool:
        data, bufs = self._od[1], self._vb[1]
        if data.device.type != "cpu":
            return False
        wins = _windows(data)
        return len(bufs) == len(wins) and all(
            b.data_ptr() == w.data_ptr() and b.numel() == w.numel() for b, w in zip(bufs, wins))

    def __setstate__(self, state):
        if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):  # a pickle of before s34
            slots = state[1]
            state = {"od": slots.get("_od"), "vb": slots.get("_vb"), "utf8": slots.get("_utf8")}
        if not isinstance(state, dict) or set(state) != {"od", "vb", "utf8"}:
            raise ValueError("StringTensor: not a pickled StringTensor state")
        od, vb = state["od"], state["vb"]
        if vb is not None and vb[1] is None:
            vb = (vb[0], _windows(od[1]))
        self._od, self._vb, self._utf8 = od, vb, state["utf8"]

    def __copy__(self) -> "StringTensor":
        """A shallow copy sharing the tensors (a StringTensor is never changed in place)."""
        out = StringTensor.__new__(StringTensor)
        out._od, out._vb, out._utf8 = self._od, self._vb, self._utf8
        return out

    # ------------------------------------------------------------ sequence API
    def __len__(self) -> int:
        od = self._od
        return (od[0].shape[0] - 1) if od is not None else self._vb[0].shape[0]

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __repr__(self) -> str:
        n = len(self)
        head = "..."
        if self.device.type == "cpu":
            # repr never raises (review s34: it raised ValueError for bytes that are not UTF-8, so printing
            # a validate=False tensor or inspecting it in a debugger failed): bytes then, else the reason
            first = self[: min(n, 5)]
            try:
                head = first.tolist()
            except ValueError:
                try:
                    head = first.tolist(as_bytes=True)
                except ValueError as e:
                    head = f"<unreadable: {e}>"
        more = ", ..." if n > 5 else ""
        return f"StringTensor({head}{more}, len={n}, device={self.device})"

    def tolist(self, *, as_bytes: bool = False, **deprecated) -> list:
        """The strings as a Python list of ``str`` (``bytes`` objects with ``as_bytes=True``).

        ``bytes=`` is the deprecated old name of ``as_bytes=`` (DeprecationWarning)."""
        if deprecated:
            as_bytes = _old_bytes_keyword(deprecated, as_bytes, "tolist")
        if not isinstance(as_bytes, bool):
            raise TypeError(f"as_bytes must be a bool, got {type(as_bytes).__name__}")
        self._require_data("tolist")
        if self.device.type != "cpu":
            return self.cpu().tolist(as_bytes=as_bytes)
        od = self._od
        if od is not None:  # the offsets layout when present: a smaller snapshot to check
            return _C.to_list(od[0], od[1], as_bytes)
        vb = self._vb
        return _C.views_to_list(vb[0], list(vb[1]), as_bytes)

    def to_pylist(self, *, as_bytes: bool = False, **deprecated) -> list:
        """Deprecated alias of :meth:`tolist` (DeprecationWarning)."""
        warnings.warn("StringTensor.to_pylist() is deprecated; use StringTensor.tolist()", DeprecationWarning,
                      stacklevel=2)
        if deprecated:
            as_bytes = _old_bytes_keyword(deprecated, as_bytes, "to_pylist")
        return self.tolist(as_bytes=as_bytes)

    def __getitem__(self, key):
        self._require_data("indexing")
        n = len(self)
        if isinstance(key, (np.ndarray, torch.Tensor)) and key.ndim == 0:
            key = _scalar_index(key)  # a 0-d integer tensor/array indexes one element, as in torch and NumPy
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            i = int(key)
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of range for a StringTensor of length {n}")
            i %= n
            od = self._od
            if od is not None:
                offsets, data = od
                a, b = int(offsets[i]), int(offsets[i + 1])
                if not 0 <= a <= b <= data.numel():  # as every other reader checks (st.offsets is writable)
                    raise ValueError(f"StringTensor[{i}]: offsets must be non-negative and non-decreasing, within "
                                     f"the payload ({data.numel()} bytes); got [{a}, {b}] (were st.offsets written to?)")
                raw = data[a:b].cpu().numpy().tobytes()
                try:
                    return raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise ValueError(f"element {i} is not valid UTF-8; use tolist(as_bytes=True)") from None
            return self[i:i + 1].tolist()[0]
        if isinstance(key, slice):
            return self._slice(key)
        if isinstance(key, (list, tuple)) and len(key) == 0:
            return self.take(key)
        if isinstance(key, (list, tuple, np.ndarray)):
            arr = np.asarray(key)
            if arr.dtype == object:  # review s34: st[[2**70]] raised torch's "can't convert np.ndarray of type object"
                if all(isinstance(k, (int, np.integer)) and not isinstance(k, bool) for k in arr.ravel()):
                    raise IndexError(f"index holds a value outside the int64 range (a StringTensor of length {n})")
                raise TypeError("index list must hold ints (or bools for a mask)")
            if arr.dtype.kind not in "iubf":  # strings etc.: torch's "can't convert np.ndarray of type numpy.str_"
                raise TypeError(f"index list must hold ints (or bools for a mask), got dtype {arr.dtype}")
            if arr.dtype == np.uint8:  # NumPy reads a uint8 array as indices: keep that meaning
                arr = arr.astype(np.int64)
            arr = _canonical_unsigned(arr)
            key = torch.as_tensor(arr)
        if isinstance(key, torch.Tensor):
            if key.dtype == torch.bool:
                return self.mask(key)
            if key.dtype == torch.uint8:
                raise TypeError(_UINT8_INDEX)
            if key.dtype in (torch.int8, torch.int16, torch.int32, torch.int64) + _WIDE_UNSIGNED:
                return self.take(key)
            raise TypeError(f"index tensor must be bool or integer, got {key.dtype}")
        raise TypeError(f"StringTensor indices must be int, slice, bool mask or integer index tensor, "
                        f"got {type(key).__name__}")

    def _slice(self, key: slice) -> "StringTensor":
        for part in ("start", "stop", "step"):
            v = getattr(key, part)
            if v is not None and not isinstance(v, (int, np.integer)) and not hasattr(v, "__index__"):
                raise TypeError(f"slice {part} must be an int or None, got {type(v).__name__}")
        start, stop, step = key.indices(len(self))
        if step == 1 and self.device.type != "cpu":
            stop = max(stop, start)
            offsets, data = self._od
            off = offsets[start:stop + 1]
            base = off[0]
            return self._derived(off - base, data[int(base):int(off[-1])] if stop > start else data[:0])
        if step != 1:
            idx = range(start, stop, step)
            # len(idx) >= 2 implies |step| < len(self), so the arange below cannot overflow int64
            # (a step like 2**64 selects at most the first element)
            if len(idx) <= 1:
                return self.take(list(idx) or torch.empty(0, dtype=torch.int64))
            return self.take(torch.arange(idx.start, idx.stop, idx.step, dtype=torch.int64))
        views, buffers = self._vb_pair()
        return self._derived(views=views[start:max(stop, start)], buffers=buffers)

    def take(self, index) -> "StringTensor":
        """The strings at ``index`` (integers, negative counted from the end). No payload copy on the CPU."""
        self._require_data("take")
        index = _as_index_tensor(index, "index")
        n = len(self)
        if index.dtype in _WIDE_UNSIGNED:
            index = _unsigned_index(index, n)
        if index.dtype not in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            raise TypeError(f"index must hold integers, got {index.dtype}")
        if index.dim() != 1:
            raise ValueError(f"index must be 1-D, got shape {tuple(index.shape)}")
        index = index.to(device=self.device, dtype=torch.int64)
        if index.numel() and _compiling() and self.device.type == "cpu":
            # int(index.min()) is data-dependent and failed fullgraph tracing (review s34); negatives are
            # wrapped and index_select checks the range itself
            index = torch.where(index < 0, index + n, index)
        elif index.numel():
            lo, hi = int(index.min()), int(index.max())
            if lo < -n or hi >= n:
                bad = lo if lo < -n else hi
                raise IndexError(f"index {bad} is out of range for a StringTensor of length {n}")
            index = torch.where(index < 0, index + n, index)
        if self.device.type != "cpu":
            return self._derived(*_lib.gather(*self._od, index))
        views, buffers = self._vb_pair()
        return self._derived(views=views.index_select(0, index), buffers=buffers)

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
            return self._derived(*_lib.compact(*self._od, mask))
        views, buffers = self._vb_pair()
        return self._derived(views=_lib.views_compact(views, mask), buffers=buffers)

    compact = mask

    def _other(self, other) -> "StringTensor":
        if isinstance(other, StringTensor):
            return other
        if isinstance(other, (list, tuple)):
            return StringTensor.from_list(other)
        raise TypeError(f"other must be a str, StringTensor or list of str, got {type(other).__name__}")

    # Which layout each method uses on the CPU (its fastest, measured by bench/bench_strings.py):
    #   starts_with / filter_by_prefix / mask / take / slices: the views (the first 4 bytes of
    #     every string sit in its view: a prefix of up to 4 bytes is decided on 16 sequential
    #     bytes a string, with no payload access; the views are built on first use and kept
    #     when the tensor has none, e.g. after from_arrow / from_buffers or a stage);
    #   fast_eq / hash64: the offsets layout when present (equality first compares lengths, 4
    #     bytes a string instead of 16; hashing reads every byte either way), else the views;
    #     hash64 takes the views for short strings when the CPU hashes inline views 8 at a
    #     time (AVX-512).
    def fast_eq(self, other) -> torch.Tensor:
        """bool[N]: element-wise equality with one ``str`` or another StringTensor of the same length.

        On the CPU each call takes the layout that reads fewer bytes, with no layout built
        for it when the tensors already hold one both can use:

        * against a ``str``: the offsets layout when present (4 bytes a string decide
          almost every string by its length; only strings of the same length are read),
          else the views (16 bytes a string).
        * against a StringTensor: the offsets layouts when both have them: 8 bytes a pair
          of offsets plus the bytes of the pairs whose lengths are equal, against 32 bytes a
          pair of views (and the payload of long pairs whose first 4 bytes agree), which is
          more for strings under ~12 bytes (words: ~19 bytes a pair against 32) and about the
          same for long ones, where both read the equal pairs' bytes.  Short strings are
          compared 16 bytes a pair without a branch, long ones only when their lengths agree
          (see core/src/ops_offsets_impl.h).  When either side lacks the offsets layout and
          both have views, the views (building offsets would cost a pass over the payload).
          A tensor compared with itself (one payload, one offset) is not read.

        With ``torch.set_num_threads(k)`` the work is cut into tasks of about equal bytes
        that k threads take as they finish.
        """
        if isinstance(other, str):
            _ops._str_arg("fast_eq", "other", other)
            od, vb = self._od, self._vb
            if od is None:
                if vb[0].is_cpu and _compiling():  # the views op: building offsets would copy the payload
                    return _lib.views_equal_scalar(vb[0], list(vb[1]), other)
                if vb[0].is_cpu:
                    r = _fast_vm(vb[0], vb[1], other, 1)
                    return r if r is not None else _lib.views_equal_scalar(vb[0], list(vb[1]), other)
            elif od[0].is_cpu and not _compiling():
                r = _fast_om(od[0], od[1], other, 1)
                if r is not None:
                    return r
            return _lib.equal_scalar(*self._od_pair(), other)
        if isinstance(other, StringTensor):
            # eager CPU fast path, both in the offsets layout: _C checks the lengths and dtypes and returns
            # None for anything else (then the checks below raise their usual errors)
            oa, ob = self._od, other._od
            if oa is not None and ob is not None and oa[0].is_cpu and ob[0].is_cpu and not _compiling():
                r = _fast_oe(oa[0], oa[1], ob[0], ob[1])
                if r is not None:
                    return r
        other = self._other(other)
        if _compiling():  # two unbacked lengths (masks): a check, not a data-dependent guard (review s34)
            torch._check(len(other) == len(self), lambda: "other must have the same length")
        elif len(other) != len(self):
            raise ValueError(f"other must have the same length ({len(self)}), got {len(other)}")
        if other.device != self.device:
            raise ValueError(f"other is on {other.device}, self on {self.device}")
        va, vb = self._vb, other._vb
        cpu = self.device.type == "cpu"
        fast = cpu and not _compiling()
        if cpu and va is not None and vb is not None and (self._od is None or other._od is None):
            r = _fast_ve(va[0], va[1], vb[0], vb[1]) if fast else None
            return r if r is not None else _lib.views_equal(va[0], list(va[1]), vb[0], list(vb[1]))
        (a, da), (b, db) = self._od_pair(), other._od_pair()
        if a.dtype != b.dtype:
            a, b = a.long(), b.long()
        if fast:
            r = _fast_oe(a, da, b, db)
            if r is not None:
                return r
        return _lib.equal(a, da, b, db)

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
        vb = self._vb
        if vb is None and self.device.type == "cpu":
            vb = self._materialize_views()  # built on first use and kept
        if vb is not None and vb[0].is_cpu:
            if _compiling():
                return _lib.views_prefix_match(vb[0], list(vb[1]), prefix)
            r = _fast_vm(vb[0], vb[1], prefix, 0)
            return r if r is not None else _lib.views_prefix_match(vb[0], list(vb[1]), prefix)
        return _lib.prefix_match(*self._od_pair(), prefix)

    def filter_by_prefix(self, prefix: str) -> "StringTensor":
        """The strings that start with ``prefix``.

        On the CPU one pass over the views decides each string and copies the kept views
        (no mask in between; no payload access for a prefix of up to 4 bytes); the result
        shares this tensor's payload.  Elsewhere, and under ``torch.compile``,
        ``self.mask(self.starts_with(prefix))``."""
        _ops._str_arg("filter_by_prefix", "prefix", prefix)
        vb = self._vb
        if vb is None and self.device.type == "cpu":
            vb = self._materialize_views()  # built on first use and kept
        if vb is not None and vb[0].is_cpu and not _compiling():
            v = _fast_vf(vb[0], vb[1], prefix)
            if v is not None:
                return self._derived(views=v, buffers=vb[1])
        return self.mask(self.starts_with(prefix))

    def hash64(self, seed: int = 0) -> torch.Tensor:
        """int64[N]: XXH3-64 of each string (bits of the unsigned value).

        ``seed`` is a 64-bit seed: an int in [-2**63, 2**64) (a negative one stands for its
        two's-complement bits, ``-1`` == ``2**64 - 1``); others raise ValueError."""
        s = as_int(seed)  # int, numpy integer (bool refused)
        if s is None:
            raise TypeError(f"seed must be int, got {type(seed).__name__}")
        seed = s
        if not -(1 << 63) <= seed < (1 << 64):
            raise ValueError(f"seed must be in [-2**63, 2**64) (64 bits), got {seed}")
        if seed >= 1 << 63:
            seed -= 1 << 64
        od, vb = self._od, self._vb
        if od is None and _compiling() and vb[0].is_cpu:  # the views op (see fast_eq; review s34)
            return _lib.views_hash64(vb[0], list(vb[1]), seed)
        # the views layout when there is no offsets layout, or when the CPU hashes inline views
        # 8 at a time (AVX-512: a string of <= 12 bytes is hashed from its view alone) and the
        # strings are short (<= 16 bytes on average: words; longer ones hash faster from offsets)
        if (od[0].is_cpu if od is not None else vb[0].is_cpu) and not _compiling():
            if vb is not None and (od is None or (_VIEWS_HASH_VECTOR and od[1].numel() <= 16 * (od[0].shape[0] - 1))):
                r = _fast_vh(vb[0], vb[1], seed)
                return r if r is not None else _lib.views_hash64(vb[0], list(vb[1]), seed)
            if od is None:
                od = self._materialize_offsets()
            r = _fast_oh(od[0], od[1], seed)
            if r is not None:
                return r
        return _lib.hash64(*self._od_pair(), seed)

    def pad_bytes(self, max_len: int, pad_id: int = 0, bos_id: int = -1, eos_id: int = -1):
        """Byte-level tokens and lengths: see ``luminamoon.ops.pad_bytes``."""
        return _ops.pad_bytes(*self._od_pair(), max_len, pad_id, bos_id, eos_id)

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
        off, data = self._od_pair()
        if device.type != "cpu" and non_blocking and off.device.type == "cpu" and not off.is_pinned():
            off, data = off.pin_memory(), data.pin_memory()
        if device.type == "cpu":
            # Device -> host: a non_blocking copy lands in pinned memory while the copy may still be
            # in flight, and tolist()/numpy() right after could read stale bytes; copy synchronously.
            non_blocking = False
        return self._derived(off.to(device, non_blocking=non_blocking), data.to(device, non_blocking=non_blocking))

    def cpu(self) -> "StringTensor":
        return self.to("cpu")

    def cuda(self, device=None, non_blocking: bool = False) -> "StringTensor":
        return self.to(device if device is not None else "cuda", non_blocking=non_blocking)

    def pin_memory(self) -> "StringTensor":
        """A copy of the offsets layout in pinned (page-locked) host memory."""
        if self.device.type != "cpu":
            raise ValueError(f"pin_memory: only a CPU StringTensor can be pinned, this one is on {self.device}")
        if not _pinning_available():
            raise ValueError("pin_memory: pinned (page-locked) memory needs an accelerator (CUDA) device, and this "
                             "torch build or machine has none; keep the StringTensor in ordinary memory")
        off, data = self._od_pair()
        return self._derived(off.pin_memory(), data.pin_memory())

    def is_pinned(self) -> bool:
        od = self._od
        if od is None or not _pinning_available():
            return False
        return od[0].is_pinned() and od[1].is_pinned()

    # ----------------------------------------------------------------- exports
    def to_gpu_buffers(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(offsets, payload) tensors on this tensor's device: the GPU layout."""
        return self.offsets, self.data

    def to_torch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Deprecated (DeprecationWarning): ``(st.offsets, st.data)`` or :meth:`to_gpu_buffers`, the same
        (offsets, payload) tensors shared with this StringTensor (no copy)."""
        warnings.warn("StringTensor.to_torch() is deprecated; use (st.offsets, st.data) or st.to_gpu_buffers()",
                      DeprecationWarning, stacklevel=2)
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
        """``pa.string()`` (int32 offsets) or ``pa.large_string()`` array sharing the offsets and payload.

        Bytes semantics (built with ``validate=False`` from bytes, or holding bytes that are not
        UTF-8) export as ``pa.binary()`` / ``pa.large_binary()`` instead: an Arrow string array must
        hold UTF-8, and readers such as Polars trust that (invalid bytes crash them)."""
        self._require_data("to_arrow")
        return _arrow.to_arrow(self, zero_copy=zero_copy)

    def to_arrow_view(self):
        """``pa.string_view()`` array over the views and payload buffers (no copy);
        ``pa.binary_view()`` for bytes semantics (see ``to_arrow``)."""
        self._require_data("to_arrow_view")
        return _arrow.to_arrow_view(self)

    def to_polars(self, name: str = ""):
        """A ``polars.Series`` of the strings (``Binary`` for bytes semantics, see ``to_arrow``)."""
        import polars as pl

        if not isinstance(name, str):
            raise TypeError(f"to_polars: name must be a str, got {type(name).__name__}")
        arr = self.to_arrow()
        if self._is_utf8():  # exported as a string array (else binary: Polars reads its bytes as they are)
            # Polars trusts a string array's UTF-8 and panics (pyo3 PanicException, not an Exception) on bytes
            # written into st.data after the tensor was checked (review s34); one more pass over the payload
            # (~0.1 ms a MB) against Polars' own copy of it (~4 ms a MB)
            try:
                _C.validate_utf8(*self._od_pair() if self.device.type == "cpu" else self.cpu()._od_pair())
            except ValueError as e:
                raise ValueError(f"to_polars: {e} (was st.data written to?)") from None
        return pl.Series(name, arr)

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
        Strings themselves have no DLPack type; treat every tensor here as read-only: ``data``
        is shared with this StringTensor (and with any Arrow array it came from or went to),
        and on the CPU the views hold copies of each string's first bytes (all of a string of
        up to 12 bytes, the first 4 of a longer one), which a write into ``data`` does not
        change: after one, methods that read the views (``starts_with``, slicing, ``hash64``
        of short strings) and methods that read ``data`` (``tolist``, ``fast_eq``) can answer
        for different strings.  Every tensor here is writable memory (``from_arrow`` copies
        read-only Arrow buffers), so a stray write changes answers but cannot crash the
        process (every reader checks offsets and views before it uses them)."""
        offsets, data = self._od_pair()
        out = {"offsets": offsets, "data": data}
        if self.device.type == "cpu":
            out["views"] = self._vb_pair()[0]
        return out

    def _is_utf8(self) -> bool:
        """Whether the strings are UTF-8 (checked once, then remembered); False for bytes semantics."""
        if self._utf8 is None:
            if self.device.type == "meta":
                return True
            offsets, data = self._od_pair()
            if offsets.device.type != "cpu":
                offsets, data = offsets.cpu(), data.cpu()
            try:
                _C.validate_utf8(offsets, data)
                self._utf8 = True
            except ValueError:
                self._utf8 = False
        return self._utf8


# ---- pytree: flatten to the tensors of whichever layouts are present.

def _flatten(st: StringTensor):
    children, ctx = [], []
    od, vb = st._od, st._vb
    if od is not None:
        children += list(od)
        ctx.append("offsets")
    if vb is not None:
        children += [vb[0], *vb[1]]
        ctx.append(("views", len(vb[1])))
    ctx.append(("utf8", st._utf8))
    return children, tuple(ctx)


def _unflatten(children, ctx) -> StringTensor:
    children = list(children)
    offsets = data = views = None
    buffers = None
    utf8 = None
    i = 0
    for item in ctx:
        if item == "offsets":
            offsets, data = children[i], children[i + 1]
            i += 2
        elif item[0] == "utf8":
            utf8 = item[1]
        else:
            nb = item[1]
            views, buffers = children[i], children[i + 1:i + 1 + nb]
            i += 1 + nb
    return StringTensor(offsets, data, views, buffers, utf8=utf8)


pytree.register_pytree_node(
    StringTensor, _flatten, _unflatten,
    serialized_type_name="luminamoon.StringTensor",
)
