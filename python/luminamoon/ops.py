"""Fake (meta) kernels for ``torch.ops.luminamoon.*`` and thin typed wrappers.

Every operator is defined in C++ (torch_ops/ops_cpu.cpp, ``TORCH_LIBRARY``);
this module registers the fake kernels that let ``torch.compile`` trace them
and offers Python wrappers with argument checks and docstrings.

Example:
    >>> import torch, luminamoon
    >>> st = luminamoon.StringTensor.from_list(["apple", "banana"])
    >>> luminamoon.ops.prefix_match(st.offsets, st.data, "ba")
    tensor([False,  True])
"""
from __future__ import annotations

import torch

from . import _C  # noqa: F401  (registers the operators)

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
    nbytes = torch.library.get_ctx().new_dynamic_size()
    dtype = torch.int64 if large else torch.int32
    return views.new_empty((views.shape[0] + 1,), dtype=dtype), views.new_empty((nbytes,))


for _name in ("views_prefix_match", "views_equal_scalar"):
    def _fake(views, buffers, s):
        return views.new_empty((views.shape[0],), dtype=torch.bool)
    torch.library.register_fake(f"luminamoon::{_name}", _fake)


@torch.library.register_fake("luminamoon::views_equal")
def _views_equal_fake(views_a, buffers_a, views_b, buffers_b):
    return views_a.new_empty((views_a.shape[0],), dtype=torch.bool)


@torch.library.register_fake("luminamoon::views_hash64")
def _views_hash64_fake(views, buffers, seed=0):
    return views.new_empty((views.shape[0],), dtype=torch.int64)


# ---------------------------------------------------------------- wrappers

def prefix_match(offsets: torch.Tensor, data: torch.Tensor, prefix: str) -> torch.Tensor:
    """bool[N]: which strings start with ``prefix`` (UTF-8 bytes).

    >>> prefix_match(torch.tensor([0, 2, 5], dtype=torch.int32), torch.tensor(list(b"abcde"), dtype=torch.uint8), "cd")
    tensor([False,  True])
    """
    return _lib.prefix_match(offsets, data, prefix)


def equal(offsets_a, data_a, offsets_b, data_b) -> torch.Tensor:
    """bool[N]: element-wise equality of two string tensors in the offsets layout."""
    return _lib.equal(offsets_a, data_a, offsets_b, data_b)


def equal_scalar(offsets, data, s: str) -> torch.Tensor:
    """bool[N]: which strings equal ``s``."""
    return _lib.equal_scalar(offsets, data, s)


def hash64(offsets, data, seed: int = 0) -> torch.Tensor:
    """int64[N]: XXH3-64 of each string (the unsigned value's bits), identical on CPU and CUDA."""
    return _lib.hash64(offsets, data, seed)


def pad_bytes(offsets, data, max_len: int, pad_id: int = 0, bos_id: int = -1, eos_id: int = -1):
    """Byte-level tokens: (int64[N, max_len], lengths int64[N]); bos/eos < 0 mean none."""
    return _lib.pad_bytes(offsets, data, max_len, pad_id, bos_id, eos_id)


def attention_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """int64[N, max_len]: 1 where the column is below ``lengths[i]`` (the mask of ``pad_bytes``' tokens)."""
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
    return _lib.offsets_from_views(views, list(buffers), large)
