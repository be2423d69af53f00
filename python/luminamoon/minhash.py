"""MinHash signatures identical to datatrove 0.10.1's ``MinhashDedupSignature``.

``MinHash(n_grams=5, num_buckets=14, hashes_per_bucket=8, seed=1, precision=64)`` computes, in C
with the GIL released, the signature datatrove computes with its default ``MinhashConfig``:
``simplify_text`` (default ``TextNormConfig``), spaCy's English word tokenizer, n-grams joined by
one space, XXH64 of their UTF-8 bytes (XXH32 for ``precision=32``), the permutation parameters
``numpy.random.RandomState(seed)`` draws as datatrove draws them, ``(h * a + b) mod (2^61 - 1)``
with numpy's uint64 wrap-around, the minimum per hash function.

Documents with fewer than ``n_grams`` words have no shingle: datatrove writes no signature for
them (they are never duplicates); here their row is all ``-1`` (every bit set, a value no real
signature takes) and ``has_signature`` is False.  Invalid UTF-8 bytes (possible only in a
StringTensor built without validation) are each read as U+FFFD; a document over 1 GiB raises
ValueError.

Example:
    >>> import luminamoon
    >>> mh = luminamoon.MinHash()
    >>> sig = mh.signatures(["the quick brown fox jumps over the lazy dog", "too short"])
    >>> sig.shape, bool((sig[1] == -1).all())
    (torch.Size([2, 112]), True)

The heavy step also exists as an operator on the CPU and CUDA:
``torch.ops.luminamoon.minhash(shingle_hashes, doc_offsets, a, b, precision=64)`` (see
:func:`minhash`), fed by :meth:`MinHash.shingles`.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _C
from ._intarg import as_int
from . import ops  # noqa: F401  (registers the fake kernel of torch.ops.luminamoon.minhash)

__all__ = ["MinHash", "minhash"]


def _int_param(name: str, value, lo: int, hi: int) -> int:
    i = as_int(value)  # int, numpy integer (bool refused): a plain int is kept
    if i is None:
        raise TypeError(f"MinHash: {name} must be an int, got {type(value).__name__}")
    value = i
    if not lo <= value <= hi:
        raise ValueError(f"MinHash: {name} must be in [{lo}, {hi}], got {value}")
    return value


class MinHash:
    """MinHash signatures of texts, bit-identical to datatrove's ``MinhashDedupSignature``.

    Args:
        n_grams: words per shingle (>= 1).
        num_buckets, hashes_per_bucket: LSH bands and rows; ``num_hashes = num_buckets *
            hashes_per_bucket`` (at most 65536).
        seed: the ``numpy.random.RandomState`` seed of the permutation parameters (0 .. 2**32-1).
        precision: 64 (XXH64, values < 2**61-1) or 32 (XXH32, values < 2**32).
        num_threads: threads per call (None: ``torch.get_num_threads()`` at call time).

    Thread-safety: one object may be used from several threads at once.
    """

    def __init__(self, n_grams: int = 5, num_buckets: int = 14, hashes_per_bucket: int = 8, seed: int = 1,
                 precision: int = 64, num_threads: Optional[int] = None):
        self.n_grams = _int_param("n_grams", n_grams, 1, 65536)
        self.num_buckets = _int_param("num_buckets", num_buckets, 1, 65536)
        self.hashes_per_bucket = _int_param("hashes_per_bucket", hashes_per_bucket, 1, 65536)
        if self.num_buckets * self.hashes_per_bucket > 65536:
            raise ValueError(f"MinHash: num_buckets * hashes_per_bucket must be <= 65536, got "
                             f"{self.num_buckets * self.hashes_per_bucket}")
        self.seed = _int_param("seed", seed, 0, 2**32 - 1)
        p = as_int(precision)  # 64.0 was accepted (review s34); a numpy integer is
        if p is None:
            raise TypeError(f"MinHash: precision must be an int (32 or 64), got {type(precision).__name__}")
        if p not in (32, 64):
            raise ValueError(f"MinHash: precision must be 32 or 64, got {precision!r}")
        self.precision = p
        if num_threads is not None:
            num_threads = _int_param("num_threads", num_threads, 1, 1 << 20)
        self.num_threads = num_threads
        self._obj = _C.MinHash(self.n_grams, self.num_buckets, self.hashes_per_bucket, self.precision, self.seed)

    @property
    def num_hashes(self) -> int:
        """``num_buckets * hashes_per_bucket``: the width of a signature."""
        return self.num_buckets * self.hashes_per_bucket

    @property
    def a(self) -> torch.Tensor:
        """The multipliers (int64 [num_hashes], uint64 bit patterns; all in [1, 2**61-1))."""
        return self._obj.a

    @property
    def b(self) -> torch.Tensor:
        """The offsets (int64 [num_hashes], uint64 bit patterns; all in [0, 2**61-1))."""
        return self._obj.b

    def _threads(self) -> int:
        return self.num_threads or torch.get_num_threads()

    def signatures(self, texts, return_mask: bool = False):
        """int64 [N, num_hashes] signatures (the unsigned values' bit patterns); rows of documents
        without shingles are all -1.  ``return_mask=True`` also returns ``has_signature``, bool [N].

        ``texts``: a list of str, a StringTensor (CPU) or an Arrow string array."""
        from .stages import _as_string_tensor
        if not isinstance(return_mask, bool):  # "yes" / None were read as truthy / falsy (review s34)
            raise TypeError(f"MinHash.signatures: return_mask must be a bool, got {type(return_mask).__name__}")
        st = _as_string_tensor(texts)
        sig, has = self._obj.signatures(st.offsets, st.data, self._threads())
        return (sig, has) if return_mask else sig

    def shingles(self, texts):
        """(shingle_hashes int64 [M], doc_offsets int64 [N+1]): the hashed n-grams of every document,
        in order, the input of :func:`minhash` (move them to a GPU to run the permutations there)."""
        from .stages import _as_string_tensor
        st = _as_string_tensor(texts)
        return self._obj.shingles(st.offsets, st.data, self._threads())

    def simplify(self, text: str) -> str:
        """datatrove's ``simplify_text(text)`` with the default TextNormConfig (for inspection)."""
        if not isinstance(text, str):
            raise TypeError(f"MinHash.simplify: text must be a str, got {type(text).__name__}")
        # a lone surrogate raised pybind11's "incompatible function arguments", naming nothing (review s34)
        ops._str_arg("MinHash.simplify", "text", text)
        return self._obj.simplify(text)

    def bands(self, signatures: torch.Tensor) -> torch.Tensor:
        """A view of signatures as [N, num_buckets, hashes_per_bucket] (datatrove's buckets)."""
        if not isinstance(signatures, torch.Tensor):
            raise TypeError(f"MinHash.bands: signatures must be a torch.Tensor, got {type(signatures).__name__}")
        if signatures.dtype != torch.int64:
            raise TypeError(f"MinHash.bands: signatures must be int64, got {signatures.dtype}")
        h = self.num_buckets * self.hashes_per_bucket
        if signatures.dim() != 2 or signatures.shape[1] != h:
            raise ValueError(f"MinHash.bands: signatures must have shape [N, {h}], got {list(signatures.shape)}")
        return signatures.view(-1, self.num_buckets, self.hashes_per_bucket)

    def __getstate__(self):
        return dict(n_grams=self.n_grams, num_buckets=self.num_buckets, hashes_per_bucket=self.hashes_per_bucket,
                    seed=self.seed, precision=self.precision, num_threads=self.num_threads)

    def __setstate__(self, state):
        self.__init__(**state)

    def __repr__(self) -> str:
        return (f"MinHash(n_grams={self.n_grams}, num_buckets={self.num_buckets}, "
                f"hashes_per_bucket={self.hashes_per_bucket}, seed={self.seed}, precision={self.precision})")


def minhash(shingle_hashes: torch.Tensor, doc_offsets: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
            precision: int = 64) -> torch.Tensor:
    """``torch.ops.luminamoon.minhash``: int64 [N, H] signatures from shingle hashes.

    ``shingle_hashes`` int64 [M]; ``doc_offsets`` int64 [N+1] (non-negative, non-decreasing,
    ``<= M``): document i owns ``shingle_hashes[doc_offsets[i]:doc_offsets[i+1]]``; ``a``, ``b``
    int64 [H]; all on one device (CPU or CUDA, identical bits).  A document without shingles
    gets a row of -1."""
    for name, t in (("shingle_hashes", shingle_hashes), ("doc_offsets", doc_offsets), ("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"luminamoon.minhash: {name} must be a torch.Tensor, got {type(t).__name__}")
    p = as_int(precision)  # int, numpy integer; bool and float (64.0) refused
    if p is None or p not in (32, 64):
        raise ValueError(f"luminamoon.minhash: precision must be 32 or 64, got {precision!r}")
    return torch.ops.luminamoon.minhash(shingle_hashes, doc_offsets, a, b, p)
