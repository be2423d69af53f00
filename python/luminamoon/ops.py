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


def _n(offsets: torch.Tensor):
    return offsets.shape[0] - 1


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
    _same_device('prefix_match', offsets=offsets, data=data)
    return offsets.new_empty((_n(offsets),), dtype=torch.bool)


@torch.library.register_fake("luminamoon::equal_scalar")
def _equal_scalar_fake(offsets, data, s):
    _same_device('equal_scalar', offsets=offsets, data=data)
    return offsets.new_empty((_n(offsets),), dtype=torch.bool)


@torch.library.register_fake("luminamoon::equal")
def _equal_fake(offsets_a, data_a, offsets_b, data_b):
    _same_device('equal', offsets_a=offsets_a, data_a=data_a, offsets_b=offsets_b, data_b=data_b)
    torch._check(offsets_a.shape[0] == offsets_b.shape[0], lambda: "offsets_a and offsets_b differ in length")
    return offsets_a.new_empty((_n(offsets_a),), dtype=torch.bool)


@torch.library.register_fake("luminamoon::hash64")
def _hash64_fake(offsets, data, seed=0):
    _same_device('hash64', offsets=offsets, data=data)
    return offsets.new_empty((_n(offsets),), dtype=torch.int64)


@torch.library.register_fake("luminamoon::pad_bytes")
def _pad_bytes_fake(offsets, data, max_len, pad_id=0, bos_id=-1, eos_id=-1):
    _same_device('pad_bytes', offsets=offsets, data=data)
    n = _n(offsets)
    return (offsets.new_empty((n, max_len), dtype=torch.int64), offsets.new_empty((n,), dtype=torch.int64))


@torch.library.register_fake("luminamoon::attention_mask")
def _attention_mask_fake(lengths, max_len):
    return lengths.new_empty((lengths.shape[0], max_len), dtype=torch.int64)


@torch.library.register_fake("luminamoon::gather")
def _gather_fake(offsets, data, index):
    _same_device('gather', offsets=offsets, data=data, index=index)
    ctx = torch.library.get_ctx()
    nbytes = ctx.new_dynamic_size()
    return offsets.new_empty((index.shape[0] + 1,)), data.new_empty((nbytes,))


@torch.library.register_fake("luminamoon::compact")
def _compact_fake(offsets, data, mask):
    _same_device('compact', offsets=offsets, data=data, mask=mask)
    ctx = torch.library.get_ctx()
    # The output length N_kept + 1 is itself the unbacked size (a bare symbol, so
    # that AOT dispatch can bind it from the real output).
    count_plus_one = ctx.new_dynamic_size(min=1)
    nbytes = ctx.new_dynamic_size()
    return offsets.new_empty((count_plus_one,)), data.new_empty((nbytes,))


@torch.library.register_fake("luminamoon::views_from_offsets")
def _views_from_offsets_fake(offsets, data):
    _same_device('views_from_offsets', offsets=offsets, data=data)
    return data.new_empty((_n(offsets), 16))


@torch.library.register_fake("luminamoon::offsets_from_views")
def _offsets_from_views_fake(views, buffers, large=False):
    _views_device("offsets_from_views", views=views, buffers=buffers)
    nbytes = torch.library.get_ctx().new_dynamic_size()
    dtype = torch.int64 if large else torch.int32
    return views.new_empty((views.shape[0] + 1,), dtype=dtype), views.new_empty((nbytes,))


@torch.library.register_fake("luminamoon::views_prefix_match")
def _views_prefix_match_fake(views, buffers, prefix):
    _views_device("views_prefix_match", views=views, buffers=buffers)
    return views.new_empty((views.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_equal_scalar")
def _views_equal_scalar_fake(views, buffers, s):
    _views_device("views_equal_scalar", views=views, buffers=buffers)
    return views.new_empty((views.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_equal")
def _views_equal_fake(views_a, buffers_a, views_b, buffers_b):
    _views_device("views_equal", views_a=views_a, buffers_a=buffers_a, views_b=views_b, buffers_b=buffers_b)
    return views_a.new_empty((views_a.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_hash64")
def _views_hash64_fake(views, buffers, seed=0):
    _views_device("views_hash64", views=views, buffers=buffers)
    return views.new_empty((views.shape[0],), dtype=torch.int64)


@torch.library.register_fake("luminamoon::views_compact")
def _views_compact_fake(views, mask):
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
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"luminamoon.{op}: {name} must be an int, got {type(value).__name__}")
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
