"""Fake (meta) kernels for ``torch.ops.luminamoon.*`` and thin typed wrappers.

Importing this module loads the operators: the extension ``luminamoon._ops``, written against the
LibTorch stable ABI only (one binary for every torch >= 2.10; docs/stable_abi.md), through
``torch.ops.load_library``.  Errors: bad input raises TypeError / ValueError / IndexError naming the
argument, from these wrappers and from direct ``torch.ops.luminamoon.NAME`` calls alike (the kernels
throw pybind11's typed exceptions, which torch's Python binding passes through:
torch_ops/stable/stable_common.h); called from C++ they are std::runtime_error.

Every operator NAME has its schema in torch_ops/schema.cpp (``STABLE_TORCH_LIBRARY``),
its CPU kernel ``NAME_cpu`` in torch_ops/ops_cpu.cpp (minhash: minhash.cpp) and its
CUDA kernel ``NAME_cuda`` in torch_ops/ops_cuda.cu (minhash: minhash_cuda.cu; the
views-layout ops are CPU-only).  This module registers the fake kernel of every
operator (``register_fake("luminamoon::NAME")``), which lets ``torch.compile``
trace them, and offers Python wrappers with argument checks and docstrings.

Example:
    >>> import torch, luminamoon
    >>> st = luminamoon.StringTensor.from_list(["apple", "banana"])
    >>> luminamoon.ops.prefix_match(st.offsets, st.data, "ba")
    tensor([False,  True])
"""
from __future__ import annotations

import importlib.machinery
import os

import torch
from torch._subclasses.fake_tensor import FakeTensor

from ._intarg import as_int


def _load_ops() -> str:
    """Load luminamoon._ops (registers every torch.ops.luminamoon operator); its path."""
    here = os.path.dirname(os.path.abspath(__file__))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(here, "_ops" + suffix)
        if os.path.exists(path):
            torch.ops.load_library(path)
            return path
    raise ImportError(f"luminamoon: the operator library _ops{importlib.machinery.EXTENSION_SUFFIXES[0]} is not in "
                      f"{here} (build it: python setup.py build_ext --inplace)")


OPS_LIBRARY = _load_ops()

__all__ = [
    "prefix_match", "equal", "equal_scalar", "hash64", "pad_bytes", "attention_mask", "gather", "compact",
    "views_from_offsets", "offsets_from_views",
]

_lib = torch.ops.luminamoon


def guard_or_false(cond) -> bool:
    """torch.fx.experimental.symbolic_shapes.guard_or_false, imported on the first call: only fake kernels
    (meta tensors, torch.compile, export) call it, and importing that module at ``import luminamoon`` cost
    every process half a second (sympy, mpmath), a third of the package's own import time."""
    from torch.fx.experimental.symbolic_shapes import guard_or_false as _guard_or_false

    return _guard_or_false(cond)


def _n(offsets: torch.Tensor):
    if offsets.dim() == 0 or guard_or_false(offsets.shape[0] == 0):
        return 0  # not N+1 >= 1 offsets: the kernel raises its ValueError (review s35; see _strict)
    return offsets.shape[0] - 1


def _nonneg(size):
    """A size the kernel checks itself (max_len): 0 when negative, so that the fake output can be made."""
    return 0 if guard_or_false(size < 0) else size


def _strict(*tensors) -> bool:
    """True for plain meta tensors (no real kernel runs after the fake one, so the fake kernel raises the
    kernel's error itself); False for FakeTensors (torch.compile / export): bad input is then left to the real
    kernel at run time, which raises the same TypeError / ValueError as eager.  An error raised while tracing
    reaches the caller as torch._dynamo's TorchRuntimeError instead, and unclear ones ("Trying to create tensor
    with negative dimension -1" for empty offsets, "tuple index out of range" for 0-d lengths) were (review s35)."""
    flat = [t for x in tensors for t in (x if isinstance(x, (list, tuple)) else (x,))]
    return not any(isinstance(t, FakeTensor) for t in flat)


_DTYPE_NAMES = {torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int", torch.int64: "Long",
                torch.float16: "Half", torch.float32: "Float", torch.float64: "Double", torch.bool: "Bool",
                torch.bfloat16: "BFloat16", torch.uint16: "UInt16", torch.uint32: "UInt32", torch.uint64: "UInt64"}


def _dt(dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def _shape(t) -> str:
    return "[" + ", ".join(str(x) for x in t.shape) + "]"


def _check_strings_meta(op: str, offsets, data, on: str = "offsets", dn: str = "data") -> None:
    """The kernels' checks of (offsets, data) (torch_ops/stable/stable_common.h: check_strings_light), for
    plain meta tensors (see _strict)."""
    if offsets.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"luminamoon.{op}: {on} must be an int32 or int64 tensor, got {_dt(offsets.dtype)}")
    if data.dtype != torch.uint8:
        raise TypeError(f"luminamoon.{op}: {dn} must be a uint8 tensor, got {_dt(data.dtype)}")
    if offsets.dim() != 1 or offsets.shape[0] < 1:
        raise ValueError(f"luminamoon.{op}: {on} must be 1-D with N+1 >= 1 entries, got shape {_shape(offsets)}")
    if data.dim() != 1:
        raise ValueError(f"luminamoon.{op}: {dn} must be 1-D, got shape {_shape(data)}")


def _check_views_meta(op: str, views, buffers=(), vn: str = "views") -> None:
    """The views kernels' checks (torch_ops/ops_cpu.cpp: check_views), for plain meta tensors."""
    if views.dtype != torch.uint8:
        raise TypeError(f"luminamoon.{op}: {vn} must be uint8, got {_dt(views.dtype)}")
    if views.dim() != 2 or views.shape[1] != 16:
        raise ValueError(f"luminamoon.{op}: {vn} must have shape [N, 16], got {_shape(views)}")
    for i, b in enumerate(buffers):
        if b.dtype != torch.uint8:
            raise TypeError(f"luminamoon.{op}: buffers[{i}] must be uint8")
        if b.dim() != 1:
            raise ValueError(f"luminamoon.{op}: buffers[{i}] must be a contiguous 1-D CPU tensor")


def _check_mask_meta(op: str, mask, n: int) -> None:
    if mask.dtype != torch.bool:
        raise TypeError(f"luminamoon.{op}: mask must be bool, got {_dt(mask.dtype)}")
    if mask.dim() != 1 or mask.shape[0] != n:
        raise ValueError(f"luminamoon.{op}: mask must have shape [{n}], got {_shape(mask)}")


def _check_max_len_meta(op: str, max_len) -> None:
    if max_len < 0:
        raise ValueError(f"luminamoon.{op}: max_len must be >= 0, got {max_len}")


def _same_device(op: str, **tensors) -> None:
    """Mixed devices are refused under fake/meta dispatch too (the real kernels check them as well)."""
    items = list(tensors.items())
    name0, t0 = items[0]
    for name, t in items[1:]:
        if t.device != t0.device:
            raise ValueError(f"luminamoon.{op}: {name0} and {name} must be on the same device, "
                             f"got {t0.device} and {t.device}")


def _views_device(op: str, **args) -> None:
    """The views and every payload buffer on one device (one meta tensor among CPU ones would
    otherwise dispatch the whole call to the fake kernel and return uninitialised memory)."""
    flat = {}
    for name, t in args.items():
        if isinstance(t, (list, tuple)):
            flat.update({f"{name}[{i}]": b for i, b in enumerate(t)})
        else:
            flat[name] = t
    _same_device(op, **flat)


@torch.library.register_fake("luminamoon::prefix_match")
def _prefix_match_fake(offsets, data, prefix):
    if _strict(offsets, data):
        _check_strings_meta('prefix_match', offsets, data)
    _same_device('prefix_match', offsets=offsets, data=data)
    return offsets.new_empty((_n(offsets),), dtype=torch.bool)


@torch.library.register_fake("luminamoon::equal_scalar")
def _equal_scalar_fake(offsets, data, s):
    if _strict(offsets, data):
        _check_strings_meta('equal_scalar', offsets, data)
    _same_device('equal_scalar', offsets=offsets, data=data)
    return offsets.new_empty((_n(offsets),), dtype=torch.bool)


@torch.library.register_fake("luminamoon::equal")
def _equal_fake(offsets_a, data_a, offsets_b, data_b):
    if _strict(offsets_a, data_a, offsets_b, data_b):
        _check_strings_meta('equal', offsets_a, data_a, "offsets_a", "data_a")
        _check_strings_meta('equal', offsets_b, data_b, "offsets_b", "data_b")
        if offsets_a.shape[0] != offsets_b.shape[0]:
            raise ValueError("luminamoon.equal: offsets_a and offsets_b must describe the same number of strings, "
                             f"got {offsets_a.shape[0] - 1} and {offsets_b.shape[0] - 1}")
        if offsets_a.dtype != offsets_b.dtype:
            raise TypeError("luminamoon.equal: offsets_a and offsets_b must have the same dtype, got "
                            f"{_dt(offsets_a.dtype)} and {_dt(offsets_b.dtype)}")
    _same_device('equal', offsets_a=offsets_a, data_a=data_a, offsets_b=offsets_b, data_b=data_b)
    if not guard_or_false(offsets_a.shape[0] != offsets_b.shape[0]):
        # (two unbacked lengths, e.g. two compact results, are checked equal at run time here; lengths known to
        # differ are left to the kernel, which raises its ValueError as in eager: review s35)
        torch._check(offsets_a.shape[0] == offsets_b.shape[0], lambda: "offsets_a and offsets_b differ in length")
    return offsets_a.new_empty((_n(offsets_a),), dtype=torch.bool)


@torch.library.register_fake("luminamoon::hash64")
def _hash64_fake(offsets, data, seed=0):
    if _strict(offsets, data):
        _check_strings_meta('hash64', offsets, data)
    _same_device('hash64', offsets=offsets, data=data)
    return offsets.new_empty((_n(offsets),), dtype=torch.int64)


@torch.library.register_fake("luminamoon::pad_bytes")
def _pad_bytes_fake(offsets, data, max_len, pad_id=0, bos_id=-1, eos_id=-1):
    if _strict(offsets, data):
        _check_strings_meta('pad_bytes', offsets, data)
        _check_max_len_meta('pad_bytes', max_len)
    _same_device('pad_bytes', offsets=offsets, data=data)
    n = _n(offsets)
    return (offsets.new_empty((n, _nonneg(max_len)), dtype=torch.int64), offsets.new_empty((n,), dtype=torch.int64))


@torch.library.register_fake("luminamoon::attention_mask")
def _attention_mask_fake(lengths, max_len):
    if _strict(lengths):
        if lengths.dtype != torch.int64:
            raise TypeError(f"luminamoon.attention_mask: lengths must be int64, got {_dt(lengths.dtype)}")
        if lengths.dim() != 1:
            raise ValueError(f"luminamoon.attention_mask: lengths must be 1-D, got shape {_shape(lengths)}")
        _check_max_len_meta('attention_mask', max_len)
    rows = lengths.shape[0] if lengths.dim() >= 1 else 1  # not 1-D: the kernel raises (see _strict)
    return lengths.new_empty((rows, _nonneg(max_len)), dtype=torch.int64)


@torch.library.register_fake("luminamoon::gather")
def _gather_fake(offsets, data, index):
    if _strict(offsets, data, index):
        _check_strings_meta('gather', offsets, data)
        if index.dtype != torch.int64:
            raise TypeError(f"luminamoon.gather: index must be int64, got {_dt(index.dtype)}")
        if index.dim() != 1:
            raise ValueError(f"luminamoon.gather: index must be 1-D, got shape {_shape(index)}")
    _same_device('gather', offsets=offsets, data=data, index=index)
    ctx = torch.library.get_ctx()
    nbytes = ctx.new_dynamic_size()
    m = index.shape[0] if index.dim() >= 1 else 1  # not 1-D: the kernel raises (see _strict)
    return offsets.new_empty((m + 1,)), data.new_empty((nbytes,))


@torch.library.register_fake("luminamoon::compact")
def _compact_fake(offsets, data, mask):
    if _strict(offsets, data, mask):
        _check_strings_meta('compact', offsets, data)
        _check_mask_meta('compact', mask, offsets.shape[0] - 1)
    _same_device('compact', offsets=offsets, data=data, mask=mask)
    ctx = torch.library.get_ctx()
    # The output length N_kept + 1 is itself the unbacked size (a bare symbol, so
    # that AOT dispatch can bind it from the real output).
    count_plus_one = ctx.new_dynamic_size(min=1)
    nbytes = ctx.new_dynamic_size()
    return offsets.new_empty((count_plus_one,)), data.new_empty((nbytes,))


@torch.library.register_fake("luminamoon::views_from_offsets")
def _views_from_offsets_fake(offsets, data):
    if _strict(offsets, data):
        _check_strings_meta('views_from_offsets', offsets, data)
    _same_device('views_from_offsets', offsets=offsets, data=data)
    return data.new_empty((_n(offsets), 16))


@torch.library.register_fake("luminamoon::offsets_from_views")
def _offsets_from_views_fake(views, buffers, large=False):
    if _strict(views, buffers):
        _check_views_meta("offsets_from_views", views, buffers)
    _views_device("offsets_from_views", views=views, buffers=buffers)
    nbytes = torch.library.get_ctx().new_dynamic_size()
    dtype = torch.int64 if large else torch.int32
    return views.new_empty((views.shape[0] + 1,), dtype=dtype), views.new_empty((nbytes,))


@torch.library.register_fake("luminamoon::views_prefix_match")
def _views_prefix_match_fake(views, buffers, prefix):
    if _strict(views, buffers):
        _check_views_meta("views_prefix_match", views, buffers)
    _views_device("views_prefix_match", views=views, buffers=buffers)
    return views.new_empty((views.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_equal_scalar")
def _views_equal_scalar_fake(views, buffers, s):
    if _strict(views, buffers):
        _check_views_meta("views_equal_scalar", views, buffers)
    _views_device("views_equal_scalar", views=views, buffers=buffers)
    return views.new_empty((views.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_equal")
def _views_equal_fake(views_a, buffers_a, views_b, buffers_b):
    if _strict(views_a, buffers_a, views_b, buffers_b):
        _check_views_meta("views_equal", views_a, buffers_a, "views_a")
        _check_views_meta("views_equal", views_b, buffers_b, "views_b")
        if views_a.shape[0] != views_b.shape[0]:
            raise ValueError("luminamoon.views_equal: views_a and views_b must have the same length, got "
                             f"{views_a.shape[0]} and {views_b.shape[0]}")
    _views_device("views_equal", views_a=views_a, buffers_a=buffers_a, views_b=views_b, buffers_b=buffers_b)
    return views_a.new_empty((views_a.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_hash64")
def _views_hash64_fake(views, buffers, seed=0):
    if _strict(views, buffers):
        _check_views_meta("views_hash64", views, buffers)
    _views_device("views_hash64", views=views, buffers=buffers)
    return views.new_empty((views.shape[0],), dtype=torch.int64)


@torch.library.register_fake("luminamoon::views_compact")
def _views_compact_fake(views, mask):
    if _strict(views, mask):
        _check_views_meta("views_compact", views)
        _check_mask_meta("views_compact", mask, views.shape[0])
    _same_device("views_compact", views=views, mask=mask)
    kept = torch.library.get_ctx().new_dynamic_size()
    return views.new_empty((kept, 16))


@torch.library.register_fake("luminamoon::minhash")
def _minhash_fake(shingle_hashes, doc_offsets, a, b, precision=64):
    for name, t in (("doc_offsets", doc_offsets), ("a", a), ("b", b)):
        if t.device != shingle_hashes.device:
            raise ValueError(f"luminamoon.minhash: shingle_hashes and {name} must be on the same device, "
                             f"got {shingle_hashes.device} and {t.device}")
        if t.dtype != torch.int64:
            raise TypeError(f"luminamoon.minhash: {name} must be int64, got {t.dtype}")
    if shingle_hashes.dtype != torch.int64:
        raise TypeError(f"luminamoon.minhash: shingle_hashes must be int64, got {shingle_hashes.dtype}")
    return shingle_hashes.new_empty((doc_offsets.shape[0] - 1, a.shape[0]), dtype=torch.int64)


# ---------------------------------------------------------------- wrappers
# The wrappers check their scalar arguments (the dispatcher would raise a RuntimeError
# for them) and leave the tensor checks to the kernels, which name the argument.

_I64 = (-(1 << 63), (1 << 63) - 1)


def _str_arg(op: str, name: str, value) -> str:
    if not isinstance(value, str):
        raise TypeError(f"luminamoon.{op}: {name} must be str, got {type(value).__name__}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"luminamoon.{op}: {name} cannot be encoded as UTF-8 (it holds a lone surrogate)") \
                from None
    return value


def _int_arg(op: str, name: str, value, lo: int = _I64[0], hi: int = _I64[1]):
    if isinstance(value, torch.SymInt):  # traced by torch.compile: the kernel checks it
        return value
    i = as_int(value)  # int, numpy integer (bool refused)
    if i is None:
        raise TypeError(f"luminamoon.{op}: {name} must be an int, got {type(value).__name__}")
    value = i
    if not lo <= value <= hi:
        raise ValueError(f"luminamoon.{op}: {name} must be in [{lo}, {hi}], got {value}")
    return value


def _tensor_list(op: str, name: str, value) -> list:
    if isinstance(value, torch.Tensor) or not isinstance(value, (list, tuple)):
        raise TypeError(f"luminamoon.{op}: {name} must be a list of tensors, got {type(value).__name__}")
    for i, t in enumerate(value):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"luminamoon.{op}: {name}[{i}] must be a torch.Tensor, got {type(t).__name__}")
    return list(value)


def _check_pad_size(op: str, n, max_len) -> None:
    if torch.compiler.is_compiling():
        # dynamo reads a SymInt row count as an int, and the comparison below then guarded on a data-dependent
        # size (a compact/mask result): fullgraph tracing failed (review s34).  The kernel checks the size too.
        return
    if isinstance(n, int) and isinstance(max_len, int) and max_len > _I64[1] // (8 * max(n, 1)):
        raise ValueError(f"luminamoon.{op}: max_len {max_len} is too large for {n} rows "
                         "(the int64 output would need more than 2**63 bytes)")


def _rows(t, minus: int = 0):
    return t.shape[0] - minus if isinstance(t, torch.Tensor) and t.dim() == 1 else None


def prefix_match(offsets: torch.Tensor, data: torch.Tensor, prefix: str) -> torch.Tensor:
    """bool[N]: which strings start with ``prefix`` (UTF-8 bytes).

    >>> prefix_match(torch.tensor([0, 2, 5], dtype=torch.int32), torch.tensor(list(b"abcde"), dtype=torch.uint8), "cd")
    tensor([False,  True])
    """
    return _lib.prefix_match(offsets, data, _str_arg("prefix_match", "prefix", prefix))


def equal(offsets_a, data_a, offsets_b, data_b) -> torch.Tensor:
    """bool[N]: element-wise equality of two string tensors in the offsets layout."""
    return _lib.equal(offsets_a, data_a, offsets_b, data_b)


def equal_scalar(offsets, data, s: str) -> torch.Tensor:
    """bool[N]: which strings equal ``s``."""
    return _lib.equal_scalar(offsets, data, _str_arg("equal_scalar", "s", s))


def hash64(offsets, data, seed: int = 0) -> torch.Tensor:
    """int64[N]: XXH3-64 of each string (the unsigned value's bits), identical on CPU and CUDA."""
    return _lib.hash64(offsets, data, _int_arg("hash64", "seed", seed))


def pad_bytes(offsets, data, max_len: int, pad_id: int = 0, bos_id: int = -1, eos_id: int = -1):
    """Byte-level tokens: (int64[N, max_len], lengths int64[N]); bos/eos < 0 mean none."""
    op = "pad_bytes"
    max_len = _int_arg(op, "max_len", max_len, 0)
    _check_pad_size(op, _rows(offsets, 1), max_len)
    return _lib.pad_bytes(offsets, data, max_len, _int_arg(op, "pad_id", pad_id), _int_arg(op, "bos_id", bos_id),
                          _int_arg(op, "eos_id", eos_id))


def attention_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """int64[N, max_len]: 1 where the column is below ``lengths[i]`` (the mask of ``pad_bytes``' tokens)."""
    max_len = _int_arg("attention_mask", "max_len", max_len, 0)
    _check_pad_size("attention_mask", _rows(lengths), max_len)
    return _lib.attention_mask(lengths, max_len)


def gather(offsets, data, index: torch.Tensor):
    """(offsets, data) of the strings ``index`` selects (int64, 0 <= index < N)."""
    return _lib.gather(offsets, data, index)


def compact(offsets, data, mask: torch.Tensor):
    """(offsets, data) of the strings where ``mask`` (bool[N]) is true."""
    return _lib.compact(offsets, data, mask)


def views_from_offsets(offsets, data) -> torch.Tensor:
    """uint8[N,16] string views over ``data`` (no payload copy; long views use buffer 0 / 2 GiB windows)."""
    return _lib.views_from_offsets(offsets, data)


def offsets_from_views(views, buffers, large: bool = False):
    """(offsets, data) from views + payload buffers; copies the payload once."""
    if not isinstance(large, bool):
        raise TypeError(f"luminamoon.offsets_from_views: large must be a bool, got {type(large).__name__}")
    return _lib.offsets_from_views(views, _tensor_list("offsets_from_views", "buffers", buffers), large)


# ---------------------------------------------------------------- torch.vmap
# The ops whose output sizes depend on the data: torch.vmap's fallback ran them once per batch element and
# stacked the results, and when the elements kept different numbers of strings or bytes the error was torch's
# "stack expects each tensor to be equal size, but got [3] at entry 0 and [4] at entry 1" (review s35).  Same
# loop here, with an error that says what happened.
def _vmap_loop(name: str):
    op = getattr(_lib, name)

    def rule(info, in_dims, *args):
        outs = []
        for b in range(info.batch_size):
            outs.append(op(*[a.select(d, b) if d is not None else a for a, d in zip(args, in_dims)]))
        single = isinstance(outs[0], torch.Tensor)
        cols = [[o] for o in outs] if single else [list(o) for o in outs]
        for k in range(len(cols[0])):
            shapes = [tuple(c[k].shape) for c in cols]
            if len(set(shapes)) > 1:
                raise ValueError(f"torch.vmap over luminamoon.{name}: its output size depends on the data and the "
                                 f"batch elements gave different sizes ({shapes[0]} and "
                                 f"{next(s for s in shapes if s != shapes[0])}); call it once per element instead")
        stacked = tuple(torch.stack([c[k] for c in cols]) for k in range(len(cols[0])))
        return (stacked[0], 0) if single else (stacked, (0,) * len(stacked))

    torch.library.register_vmap(f"luminamoon::{name}", rule)


for _name in ("gather", "compact", "views_compact"):
    _vmap_loop(_name)
