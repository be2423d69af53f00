"""The bad-input matrix (issue 8): every public entry point of the package, swept with
wrong types, None, empty input, huge input, invalid UTF-8 / lone surrogates, wrong
devices (``meta``: there is no GPU here) and dtypes, closed objects, out-of-range
values, and — for everything that reads or writes files — missing paths, read-only
folders and a full file system.

The rule each case checks: the call raises a TypeError / ValueError / OSError /
IndexError (or one of the package's OSError / ValueError subclasses) whose message
names the offending argument, or — where the input is legal but unusual (an empty
batch, a meta tensor for a shape-only op) — gives a defined result.  Nothing crashes
the interpreter and no committed data is lost.

How it is organised:

* ``CASES``: the in-process cases, one per (entry point, kind of bad input), run by
  ``test_matrix``.  Each names the public names it covers.
* ``public_surface()`` enumerates the public API (``luminamoon.__all__``,
  ``luminamoon.data.__all__``, ``luminamoon.ops``, every ``torch.ops.luminamoon``
  operator, the ``luminamoon`` command, and every public method / property of each
  public class); ``test_every_public_name_has_a_bad_input_case`` fails when one has
  no case, so a new public API needs a bad-input case (or an entry in the small
  ``ALLOW`` list of things that take no input).
* Subprocesses (``_badinput_child.py``) for what could kill an interpreter or needs
  file-system tricks: huge inputs; a full disk — small tmpfs mounts under
  ``unshare -rm`` and, without namespaces, ``RLIMIT_FSIZE``; a read-only folder (a
  read-only bind mount, or chmod 0555 when not root).  A child killed by a signal
  fails the test with its stderr.  The writers of persistent state are filled up
  mid-run and then resumed with space again: the state equals the last successful
  commit.

Product bugs whose fix belongs to files this module's author does not own are marked
``xfail(strict=True)`` with the reason; they turn into failures once fixed, so the
mark must then be removed.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import errno
import gzip
import hashlib
import inspect
import io
import json
import os
import pathlib
import re
import resource
import shutil
import signal
import subprocess
import sys
from typing import Any, Callable, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import luminamoon
import luminamoon.cli
import luminamoon.data
import luminamoon.ops
from luminamoon import (ChainPipeline, CorruptError, FormatVersionError, FusedPipeline, PIIMasker, QualityFilter,
                        StageResult, StateCorruptError, StateTracker, StreamDeduplicator, StringTensor, TextCleaner,
                        hash128, reason_name)
from luminamoon.data import (Batch, DistBatch, DistributedPipeline, GlobalDedup, HFIterableSource, IterableSource,
                             JsonlSource, ParquetSource, ResumableCollate, ResumablePipeline, Source, TextSource,
                             create_resumable_collate, expand_paths, start_global_dedup, write_jsonl)

HERE = pathlib.Path(__file__).resolve().parent
CHILD = HERE / "_badinput_child.py"
OPS = torch.ops.luminamoon
STAGES = {"quality": False}  # short synthetic texts: keep all that are not duplicates
HAS_CUDA = torch.cuda.is_available()

# --------------------------------------------------------------------------- registry


@dataclasses.dataclass
class Case:
    id: str
    covers: tuple
    fn: Callable[[pathlib.Path], Any]
    raises: Any = None          # exception type(s); None: fn must return normally (and asserts itself)
    match: Optional[str] = None  # regex on str(exception): names the argument / what was expected
    xfail: Optional[str] = None  # a product bug not fixed here (reason, with the suggested fix)
    skip: Optional[str] = None


CASES: list = []
COVERED: dict = collections.defaultdict(list)


def bad(cid: str, covers, fn, raises=None, match=None, *, xfail=None, skip=None) -> None:
    covers = (covers,) if isinstance(covers, str) else tuple(covers)
    assert cid not in {c.id for c in CASES}, f"duplicate case id {cid}"
    CASES.append(Case(cid, covers, fn, raises, match, xfail, skip))
    for n in covers:
        COVERED[n].append(cid)


def covers(*names):
    """For tests outside the matrix (subprocess scenarios): the public names they exercise."""
    def deco(fn):
        for n in names:
            COVERED[n].append(fn.__name__)
        return fn
    return deco


# Public names that take no input at all, so no bad input can reach them.
ALLOW = {
    "StreamDeduplicator.tag": "the 32 bytes of the WAL header's tag; no input",
    "StringTensor.has_offsets_layout": "a bool: which layout is materialised; no input",
    "StringTensor.has_views_layout": "a bool: which layout is materialised; no input",
    "StringTensor.device": "the device of the tensors; no input",
    "StringTensor.is_pinned": "a bool query; no input",
    "TextCleaner.params": "the effective parameters (bad ones are refused by the constructor cases); no input",
    "QualityFilter.params": "the effective parameters (bad ones are refused by the constructor cases); no input",
    "QualityFilter.rules": "the names of the enabled rules; no input",
    "QualityFilter.defaults": "a static dict of datatrove's thresholds; no input",
    "TextCleaner.counters": "counts kept by the C object; no input",
    "TextCleaner.reset_counters": "zeroes the counts; no input",
    "QualityFilter.counters": "counts kept by the C object; no input",
    "QualityFilter.reset_counters": "zeroes the counts; no input",
    "PIIMasker.counters": "counts kept by the C object; no input",
    "PIIMasker.reset_counters": "zeroes the counts; no input",
    "FusedPipeline.cleaner": "returns the stage object given to the constructor; no input",
    "FusedPipeline.retained_bytes": "bytes the pipeline keeps allocated between batches; no input",
    "FusedPipeline.quality": "returns the stage object given to the constructor; no input",
    "FusedPipeline.pii": "returns the stage object given to the constructor; no input",
    "ChainPipeline.cleaner": "returns the stage object given to the constructor; no input",
    "ChainPipeline.quality": "returns the stage object given to the constructor; no input",
    "ChainPipeline.pii": "returns the stage object given to the constructor; no input",
    "JsonlSource.kind": "a class constant naming the position kind",
    "Batch.block": "a dataclass field (the source's RecordBlock or None); no input",
    "DistBatch.block": "a dataclass field inherited from Batch; no input",
    "TextSource.kind": "a class constant naming the position kind",
    "Source.identity": "describes the source's files (fingerprints); no input",
    "IterableSource.identity": "None: a plain iterable has no identity; no input",
    "HFIterableSource.identity": "None: a dataset has no identity; no input",
    "JsonlSource.identity": "describes the source's files (fingerprints); no input",
    "TextSource.identity": "describes the source's files (fingerprints); no input",
    "ParquetSource.identity": "describes the source's files (fingerprints); no input",
    "DistBatch.rank": "a dataclass field with a default, filled in by the pipeline",
    "Stage.__call__": "a typing.Protocol member: declares what each stage implements (the stages' own cases)",
    "Stage.counters": "a typing.Protocol member: declares what each stage implements (the stages' own cases)",
    "Stage.reset_counters": "a typing.Protocol member: declares what each stage implements (the stages' own cases)",
    "DistBatch.world_size": "a dataclass field with a default, filled in by the pipeline",
}

# --------------------------------------------------------------------------- helpers

ITEMS = ["alpha", "a much longer string here", ""]


def st3() -> StringTensor:
    return StringTensor.from_list(ITEMS)


def meta3() -> StringTensor:
    return st3().to("meta")


def views_only() -> StringTensor:
    st = st3()
    return StringTensor(views=st.views, buffers=st.buffers)


def padded_views() -> StringTensor:
    """An inline view ("alpha") with a non-zero byte after the string (Arrow wants zeros)."""
    st = st3()
    v = st.views.clone()
    v[0, 4 + 5] = ord("z")
    return StringTensor(views=v, buffers=st.buffers)


def corrupt_views() -> StringTensor:
    st = st3()
    v = st.views.clone()
    v[1, 8:12] = torch.tensor([5, 0, 0, 0], dtype=torch.uint8)  # buffer index 5 of 1
    return StringTensor(views=v, buffers=st.buffers)


def closed(obj):
    obj.close()
    return obj


def jsonl_file(tmp: pathlib.Path, n: int = 20, name: str = "c.jsonl") -> str:
    path = tmp / name
    write_jsonl(path, [{"id": f"d{i}", "text": f"document {i} about kernels and mirrors"} for i in range(n)])
    return str(path)


def parquet_file(tmp: pathlib.Path, texts=("a", "b"), name: str = "c.parquet") -> str:
    path = tmp / name
    pq.write_table(pa.table({"text": pa.array(list(texts), pa.string())}), path)
    return str(path)


def run_cli(argv) -> tuple:
    """(exit status, stderr) of the luminamoon command, in process; an uncaught exception fails."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = luminamoon.cli.main([str(a) for a in argv])
        except SystemExit as e:  # argparse
            rc = e.code
    return rc, err.getvalue()


def expect_cli(argv_fn, pattern: str):
    def fn(tmp):
        rc, err = run_cli(argv_fn(tmp))
        assert rc == 2, (rc, err)
        assert "Traceback" not in err, err
        assert re.search(pattern, err), err
    return fn


def raises_unchanged(obj, call, exc, pattern):
    """The call raises and leaves ``obj.position()`` as it was (errors before any state change)."""
    before = obj.position()
    with pytest.raises(exc, match=pattern):
        call()
    assert obj.position() == before


def defined(fn, check):
    """A legal but unusual input: a defined result, which ``check`` must accept."""
    def run(tmp):
        r = fn(tmp)
        assert check(r), f"unexpected result: {r!r:.500}"
    return run


# =========================================================================== StringTensor

bad("StringTensor-no-layout", "StringTensor", lambda t: StringTensor(), ValueError, r"offsets\+data|views\+buffers")
bad("StringTensor-offsets-without-data", "StringTensor", lambda t: StringTensor(offsets=torch.tensor([0])),
    ValueError, "offsets and data")

FL = "StringTensor.from_list"
bad("from_list-None", FL, lambda t: StringTensor.from_list(None), TypeError, "strings")
bad("from_list-int-item", FL, lambda t: StringTensor.from_list(["ok", 3]), TypeError, r"strings\[1\]")
bad("from_list-None-item", FL, lambda t: StringTensor.from_list(["ok", None]), TypeError, r"strings\[1\]")
bad("from_list-single-str", FL, lambda t: StringTensor.from_list("abc"), TypeError, "strings")
bad("from_list-lone-surrogate", FL, lambda t: StringTensor.from_list(["ok", "\ud800"]), ValueError,
    r"strings\[1\].*UTF-8")
bad("from_list-invalid-utf8", FL, lambda t: StringTensor.from_list([b"\xff\xfe"]), ValueError, r"strings\[0\].*UTF-8")
bad("from_list-generator-surrogate", FL, lambda t: StringTensor.from_list(x for x in ["a", "\udcff"]), ValueError,
    r"strings\[1\]")
bad("from_list-validate-not-bool", FL, lambda t: StringTensor.from_list(["a"], validate="x"), TypeError, "validate")
bad("from_list-empty", FL, defined(lambda t: StringTensor.from_list([]), lambda st: (len(st) == 0)))

FB = "StringTensor.from_buffers"
U8 = lambda n: torch.zeros(n, dtype=torch.uint8)  # noqa: E731
bad("from_buffers-None", FB, lambda t: StringTensor.from_buffers(None, U8(1)), TypeError, "offsets")
bad("from_buffers-data-None", FB, lambda t: StringTensor.from_buffers(torch.tensor([0, 1]), None), TypeError, "data")
bad("from_buffers-float-offsets", FB, lambda t: StringTensor.from_buffers(torch.tensor([0.0, 1.0]), U8(1)),
    TypeError, "offsets")
bad("from_buffers-int32-data", FB, lambda t: StringTensor.from_buffers(torch.tensor([0, 1]),
                                                                      torch.zeros(1, dtype=torch.int32)),
    TypeError, "data")
bad("from_buffers-2d-offsets", FB, lambda t: StringTensor.from_buffers(torch.tensor([[0, 1]]), U8(1)), ValueError,
    "offsets")
bad("from_buffers-empty-offsets", FB, lambda t: StringTensor.from_buffers(torch.tensor([], dtype=torch.int64), U8(1)),
    ValueError, "offsets")
bad("from_buffers-decreasing", FB, lambda t: StringTensor.from_buffers(torch.tensor([0, 3, 2]), U8(3)), ValueError,
    "offsets must be non-negative and non-decreasing")
bad("from_buffers-past-end", FB, lambda t: StringTensor.from_buffers(torch.tensor([0, 9]), U8(3)), ValueError,
    "offsets point past the end of data")
bad("from_buffers-negative", FB, lambda t: StringTensor.from_buffers(torch.tensor([-1, 2]), U8(3)), ValueError,
    "offsets must be non-negative")
bad("from_buffers-mixed-devices", FB, lambda t: StringTensor.from_buffers(torch.tensor([0, 1]), U8(1).to("meta")),
    ValueError, "same device")
bad("from_buffers-meta", FB, lambda t: StringTensor.from_buffers(torch.tensor([0, 1], device="meta"),
                                                                U8(1).to("meta")), ValueError, "meta")
bad("from_buffers-invalid-utf8", FB, lambda t: StringTensor.from_buffers(
    torch.tensor([0, 2]), torch.tensor([0xC3, 0x28], dtype=torch.uint8)), ValueError, "string 0 is not valid UTF-8")

FN = "StringTensor.from_numpy"
bad("from_numpy-None", FN, lambda t: StringTensor.from_numpy(None), TypeError, "array")
bad("from_numpy-list", FN, lambda t: StringTensor.from_numpy(["a"]), TypeError, "array")
bad("from_numpy-2d", FN, lambda t: StringTensor.from_numpy(np.array([["a"]])), ValueError, "array")
bad("from_numpy-ints", FN, lambda t: StringTensor.from_numpy(np.arange(3)), TypeError, "array must hold strings")
bad("from_numpy-invalid-utf8", FN, lambda t: StringTensor.from_numpy(np.array([b"\xff\xfe"])), ValueError,
    r"strings\[0\]")
bad("from_numpy-surrogate", FN, lambda t: StringTensor.from_numpy(np.array(["\ud800"])), ValueError, r"strings\[0\]")
bad("from_numpy-object-None", FN, lambda t: StringTensor.from_numpy(np.array(["a", None], dtype=object)), TypeError,
    r"strings\[1\]")
bad("from_numpy-empty", FN, defined(lambda t: StringTensor.from_numpy(np.array([], dtype=str)),
                                    lambda st: (len(st) == 0)))

FA = "StringTensor.from_arrow"
bad("from_arrow-None", FA, lambda t: StringTensor.from_arrow(None), TypeError, "obj")
bad("from_arrow-ints", FA, lambda t: StringTensor.from_arrow(pa.array([1, 2])), TypeError, "string")
bad("from_arrow-nulls", FA, lambda t: StringTensor.from_arrow(pa.array(["a", None])), ValueError, "null")
bad("from_arrow-invalid-binary", FA, lambda t: StringTensor.from_arrow(pa.array([b"\xff"], pa.binary())), ValueError,
    "string 0 is not valid UTF-8")
bad("from_arrow-invalid-string-view", FA, lambda t: StringTensor.from_arrow(
    pa.array([b"\xff" * 20], pa.binary_view()).cast(pa.string_view(), safe=False)), ValueError, "not valid UTF-8")
bad("from_arrow-views-buffer-longer", FA, defined(lambda t: StringTensor.from_arrow(pa.Array.from_buffers(
    pa.string_view(), 1, [None, pa.py_buffer(bytearray(b"\x01\0\0\0a" + bytes(11 + 40))), pa.py_buffer(b"")])),
    lambda st: (st.tolist() == ["a"])))
bad("from_arrow-dictionary-string-view", FA, defined(lambda t: StringTensor.from_arrow(pa.DictionaryArray.from_arrays(
    pa.array([1, 0, 1], pa.uint8()), pa.array(["x", "y" * 20], pa.string_view()))),
    lambda st: (st.tolist() == ["y" * 20, "x", "y" * 20])))
bad("from_arrow-padded-view", FA, lambda t: StringTensor.from_arrow(pa.Array.from_buffers(
    pa.string_view(), 1, [None, pa.py_buffer(bytearray(b"\x01\0\0\0a\0z" + bytes(9))), pa.py_buffer(b"")])),
    ValueError, "non-zero padding")
bad("from_arrow-read-only-buffers", FA, defined(lambda t: StringTensor.from_arrow(pa.Array.from_buffers(
    pa.string(), 1, [None, pa.py_buffer(bytes(np.array([0, 3], np.int32).data)), pa.py_buffer(b"abc")])),
    lambda st: (st.tolist() == ["abc"] and st.data.data_ptr() != 0)))
bad("from_arrow-empty-chunked", FA, defined(lambda t: StringTensor.from_arrow(pa.chunked_array([], pa.string())),
                                            lambda st: (len(st) == 0)))

bad("offsets-corrupt-view", ("StringTensor.offsets", "StringTensor.data"), lambda t: corrupt_views().offsets,
    ValueError, "outside its payload buffer")
bad("views-meta", ("StringTensor.views", "StringTensor.buffers"), lambda t: meta3().views, ValueError, "CPU only")
bad("nbytes-meta", "StringTensor.nbytes", lambda t: meta3().nbytes, ValueError, "meta")
bad("storage_nbytes-meta", "StringTensor.storage_nbytes",
    defined(lambda t: meta3().storage_nbytes, lambda n: (n == 0)))
bad("tolist-as_bytes-not-bool", "StringTensor.tolist", lambda t: st3().tolist(as_bytes="x"), TypeError, "as_bytes")
bad("tolist-unknown-keyword", "StringTensor.tolist", lambda t: st3().tolist(byts=True), TypeError, "byts")
bad("tolist-bytes-and-as_bytes", "StringTensor.tolist", lambda t: st3().tolist(as_bytes=True, bytes=True), TypeError,
    "not both")
bad("tolist-meta", "StringTensor.tolist", lambda t: meta3().tolist(), ValueError, "meta")
bad("tolist-invalid-utf8-content", "StringTensor.tolist",
    lambda t: StringTensor.from_list([b"\xff"], validate=False).tolist(), ValueError, r"tolist\(as_bytes=True\)")


def _deprecated(fn, replacement: str):
    """A deprecated alias: fn() works, and warns once with a DeprecationWarning naming its replacement."""
    def run(t):
        import warnings
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = fn(t)
        dep = [x for x in w if issubclass(x.category, DeprecationWarning)]
        assert len(dep) == 1 and re.search(replacement, str(dep[0].message)), [str(x.message) for x in w]
        assert dep[0].filename == __file__, f"the warning points at {dep[0].filename}, not at the caller"
        return r
    return run


# the deprecated aliases warn (at the caller's line) naming the replacement, and still refuse bad input as tolist does
bad("to_pylist-deprecated", "StringTensor.to_pylist",
    defined(_deprecated(lambda t: st3().to_pylist(), r"use StringTensor\.tolist\(\)"), lambda r: r == st3().tolist()))
bad("to_torch-deprecated", "StringTensor.to_torch",
    defined(_deprecated(lambda t: st3().to_torch(), r"to_gpu_buffers\(\)"),
            lambda r: (torch.equal(r[0], st3().offsets) and torch.equal(r[1], st3().data))))
bad("tolist-bytes-deprecated", "StringTensor.tolist",
    defined(_deprecated(lambda t: st3().tolist(bytes=True), r"tolist\(as_bytes=\.\.\.\)"),
            lambda r: r == [x.encode() for x in st3().tolist()]))
bad("to_pylist-bytes-not-bool", "StringTensor.to_pylist", lambda t: st3().to_pylist(bytes="x"), TypeError, "as_bytes")
bad("to_pylist-invalid-utf8-content", "StringTensor.to_pylist",
    lambda t: StringTensor.from_list([b"\xff"], validate=False).to_pylist(), ValueError, r"as_bytes=True")
bad("iter-meta", "StringTensor.__iter__", lambda t: list(meta3()), ValueError, "meta")

GI = "StringTensor.__getitem__"
bad("getitem-None", GI, lambda t: st3()[None], TypeError, "indices")
bad("getitem-float", GI, lambda t: st3()[1.5], TypeError, "indices")
bad("getitem-out-of-range", GI, lambda t: st3()[3], IndexError, "index 3 is out of range")
bad("getitem-huge", GI, lambda t: st3()[10 ** 30], IndexError, "index 10+ is out of range")
bad("getitem-mask-shape", GI, lambda t: st3()[torch.tensor([True, False])], ValueError, "mask")
bad("getitem-float-tensor", GI, lambda t: st3()[torch.tensor([0.5])], TypeError, "bool or integer")
bad("getitem-index-out-of-range", GI, lambda t: views_only()[[0, 7]], IndexError, "index 7 is out of range")
bad("getitem-meta", GI, lambda t: meta3()[0], ValueError, "meta")
bad("getitem-0d-tensor", GI, defined(lambda t: st3()[torch.tensor(1)], lambda r: (r == ITEMS[1])))
bad("getitem-0d-float-tensor", GI, lambda t: st3()[torch.tensor(1.0)], TypeError, "0-d index")
bad("getitem-0d-bool-tensor", GI, lambda t: st3()[torch.tensor(True)], TypeError, "0-d index")
bad("getitem-0d-meta-tensor", GI, lambda t: st3()[torch.tensor(1, device="meta")], ValueError, "index.*meta")
bad("getitem-uint8-tensor", GI, lambda t: st3()[torch.tensor([1, 0, 1], dtype=torch.uint8)], TypeError,
    "uint8 index is ambiguous")
bad("getitem-meta-index", GI, lambda t: st3()[torch.tensor([0], device="meta")], ValueError, "index.*meta")
bad("getitem-step-2-64", GI, defined(lambda t: st3()[::2 ** 64], lambda r: (r.tolist() == ITEMS[:1])))
bad("getitem-step-minus-2-64", GI, defined(lambda t: views_only()[::-(2 ** 64)], lambda r: (r.tolist() == ITEMS[-1:])))
bad("getitem-padded-view", GI, lambda t: padded_views()[0:1].tolist(), ValueError, "non-zero padding")
bad("getitem-invalid-utf8", GI, lambda t: StringTensor.from_list([b"\xff"], validate=False)[0], ValueError,
    "element 0")

TK = "StringTensor.take"
bad("take-None", TK, lambda t: st3().take(None), TypeError, "index")
bad("take-str", TK, lambda t: st3().take("a"), TypeError, "index")
bad("take-2d", TK, lambda t: st3().take([[0]]), ValueError, "index")
bad("take-float", TK, lambda t: st3().take([0.5]), TypeError, "index")
bad("take-int64-overflow", TK, lambda t: st3().take([10 ** 20]), IndexError, "index")
bad("take-out-of-range", TK, lambda t: st3().take([5]), IndexError, "index 5 is out of range")
bad("take-meta", TK, lambda t: meta3().take([0]), ValueError, "meta")
bad("take-meta-index", TK, lambda t: st3().take(torch.tensor([0], device="meta")), ValueError, "index.*meta")
bad("take-empty", TK, defined(lambda t: st3().take([]), lambda st: (len(st) == 0)))

for _name in ("mask", "compact"):
    MK = f"StringTensor.{_name}"
    bad(f"{_name}-None", MK, lambda t, n=_name: getattr(st3(), n)(None), TypeError, "mask")
    bad(f"{_name}-ints", MK, lambda t, n=_name: getattr(st3(), n)([1, 0, 1]), TypeError, "mask")
    bad(f"{_name}-shape", MK, lambda t, n=_name: getattr(st3(), n)([True]), ValueError, "mask")
    bad(f"{_name}-meta", MK, lambda t, n=_name: getattr(meta3(), n)([True, False, True]), ValueError, "meta")
    bad(f"{_name}-meta-mask", MK, lambda t, n=_name: getattr(st3(), n)(torch.ones(3, dtype=torch.bool, device="meta")),
        ValueError, "mask.*meta")

FE = "StringTensor.fast_eq"
bad("fast_eq-None", FE, lambda t: st3().fast_eq(None), TypeError, "other")
bad("fast_eq-length", FE, lambda t: st3().fast_eq(["a"]), ValueError, "other")
bad("fast_eq-device", FE, lambda t: st3().fast_eq(meta3()), ValueError, "other")
bad("fast_eq-surrogate", FE, lambda t: st3().fast_eq("\ud800"), ValueError, "other.*UTF-8")
bad("eq-length", "StringTensor.__eq__", lambda t: st3() == ["a"], ValueError, "other")
bad("eq-None", "StringTensor.__eq__", defined(lambda t: st3() == None, lambda r: (r is False)))  # noqa: E711
bad("equals-None", "StringTensor.equals", lambda t: st3().equals(None), TypeError, "other")
bad("equals-meta", "StringTensor.equals", lambda t: meta3().equals(meta3()), ValueError, "meta")
bad("starts_with-bytes", "StringTensor.starts_with", lambda t: st3().starts_with(b"a"), TypeError, "prefix")
bad("starts_with-surrogate", "StringTensor.starts_with", lambda t: st3().starts_with("\ud800"), ValueError,
    "prefix.*UTF-8")
bad("starts_with-1mb-prefix", "StringTensor.starts_with",
    defined(lambda t: st3().starts_with("a" * (1 << 20)), lambda m: (m.tolist() == [False] * 3)))
bad("filter_by_prefix-None", "StringTensor.filter_by_prefix", lambda t: st3().filter_by_prefix(None), TypeError,
    "prefix")
bad("hash64-None", "StringTensor.hash64", lambda t: st3().hash64(None), TypeError, "seed")
bad("hash64-float", "StringTensor.hash64", lambda t: st3().hash64(1.5), TypeError, "seed")
bad("hash64-seed-past-64-bits", "StringTensor.hash64", lambda t: st3().hash64(2 ** 64 + 5), ValueError, "seed")
bad("hash64-seed-below-64-bits", "StringTensor.hash64", lambda t: views_only().hash64(-(2 ** 63) - 1), ValueError,
    "seed")
bad("hash64-padded-view", "StringTensor.hash64", lambda t: padded_views().hash64(), ValueError, "non-zero padding")
bad("starts_with-padded-view", "StringTensor.starts_with",  # reads no padding byte: the clean answer
    defined(lambda t: padded_views().starts_with("alpha"), lambda m: (m.tolist() == [True, False, False])))
for _name, _call in (("fast_eq", lambda st: st.fast_eq("a")), ("equals", lambda st: st.equals(["a", "b", "c"]))):
    bad(f"{_name}-padded-view", f"StringTensor.{_name}", lambda t, c=_call: c(padded_views()), ValueError,
        "non-zero padding")
PB = "StringTensor.pad_bytes"
bad("pad_bytes-negative", PB, lambda t: st3().pad_bytes(-1), ValueError, "max_len")
bad("pad_bytes-str", PB, lambda t: st3().pad_bytes("4"), TypeError, "max_len")
bad("pad_bytes-pad_id-overflow", PB, lambda t: st3().pad_bytes(4, pad_id=2 ** 70), ValueError, "pad_id")
bad("pad_bytes-size-overflow", PB, lambda t: st3().pad_bytes(2 ** 62), ValueError, "max_len")

TO = "StringTensor.to"
bad("to-bad-device-string", TO, lambda t: st3().to("nonsense"), ValueError, "device")
bad("to-None", TO, lambda t: st3().to(None), TypeError, "device")
bad("to-non_blocking-not-bool", TO, lambda t: st3().to("meta", non_blocking="x"), TypeError, "non_blocking")
bad("to-from-meta", TO, lambda t: meta3().to("cpu"), ValueError, "meta")
bad("to-cuda-without-cuda", TO, lambda t: st3().to("cuda"), ValueError, "CUDA", skip="CUDA is available" if HAS_CUDA
    else None)
bad("cpu-meta", "StringTensor.cpu", lambda t: meta3().cpu(), ValueError, "meta")
bad("cuda-without-cuda", "StringTensor.cuda", lambda t: st3().cuda(), ValueError, "CUDA",
    skip="CUDA is available" if HAS_CUDA else None)
bad("to_torch_gpu-bad-device", "StringTensor.to_torch_gpu", lambda t: st3().to_torch_gpu("nonsense"), ValueError,
    "device")
bad("pin_memory-meta", "StringTensor.pin_memory", lambda t: meta3().pin_memory(), ValueError, "CPU")
bad("pin_memory-without-accelerator", "StringTensor.pin_memory", lambda t: st3().pin_memory(), ValueError,
    "pin_memory: .*accelerator", skip="an accelerator is available" if HAS_CUDA else None)
for _name in ("to_gpu_buffers", "to_torch"):
    bad(f"{_name}-meta", f"StringTensor.{_name}",
        defined(lambda t, n=_name: getattr(meta3(), n)(),
                lambda r: (all(x.device.type == "meta" for x in r))))
bad("dlpack_buffers-meta", "StringTensor.dlpack_buffers",
    defined(lambda t: meta3().dlpack_buffers(), lambda d: (set(d) == {"offsets", "data"})))
for _name in ("to_numpy_gpu", "to_numpy", "to_arrow", "to_arrow_view", "to_polars"):
    bad(f"{_name}-meta", f"StringTensor.{_name}", lambda t, n=_name: getattr(meta3(), n)(), ValueError, "meta")
for _name, _typ in (("to_arrow", pa.binary()), ("to_arrow_view", pa.binary_view())):
    bad(f"{_name}-bytes-semantics", f"StringTensor.{_name}",
        defined(lambda t, n=_name: getattr(StringTensor.from_list([b"\xff\xfe"], validate=False), n)(),
                lambda a, typ=_typ: (a.type == typ and a.to_pylist() == [b"\xff\xfe"])))
bad("to_polars-bytes-semantics", "StringTensor.to_polars",
    defined(lambda t: StringTensor.from_list([b"\xff\xfe"], validate=False).to_polars(),
            lambda s: (str(s.dtype) == "Binary")))
bad("to_polars-name", "StringTensor.to_polars", lambda t: st3().to_polars(name=5), TypeError, "name")

# =========================================================================== luminamoon.ops

def _od():
    st = st3()
    return st.offsets, st.data


bad("ops.prefix_match-float-offsets", "ops.prefix_match", lambda t: luminamoon.ops.prefix_match(
    _od()[0].float(), _od()[1], "a"), TypeError, "offsets")
bad("ops.prefix_match-prefix-int", "ops.prefix_match", lambda t: luminamoon.ops.prefix_match(*_od(), 3), TypeError,
    "prefix")
bad("ops.prefix_match-surrogate", "ops.prefix_match", lambda t: luminamoon.ops.prefix_match(*_od(), "\ud800"),
    ValueError, "prefix")
bad("ops.prefix_match-mixed-devices", "ops.prefix_match", lambda t: luminamoon.ops.prefix_match(
    _od()[0], _od()[1].to("meta"), "a"), ValueError, "device")
bad("ops.equal-length", "ops.equal", lambda t: luminamoon.ops.equal(*_od(), _od()[0][:2], _od()[1]), ValueError,
    "offsets_a and offsets_b must describe the same number of strings")
bad("ops.equal-dtypes", "ops.equal", lambda t: luminamoon.ops.equal(*_od(), _od()[0].long(), _od()[1]), TypeError,
    "same dtype")
bad("ops.equal-mixed-devices", "ops.equal", lambda t: luminamoon.ops.equal(
    *_od(), _od()[0].to("meta"), _od()[1].to("meta")), ValueError, "device")
bad("ops.equal_scalar-None", "ops.equal_scalar", lambda t: luminamoon.ops.equal_scalar(*_od(), None), TypeError,
    "s must be str")
bad("ops.equal_scalar-surrogate", "ops.equal_scalar", lambda t: luminamoon.ops.equal_scalar(*_od(), "\udfff"),
    ValueError, "UTF-8")
bad("ops.hash64-seed-str", "ops.hash64", lambda t: luminamoon.ops.hash64(*_od(), "x"), TypeError, "seed")
bad("ops.hash64-seed-overflow", "ops.hash64", lambda t: luminamoon.ops.hash64(*_od(), 2 ** 64), ValueError, "seed")
bad("ops.hash64-int32-data", "ops.hash64", lambda t: luminamoon.ops.hash64(_od()[0], _od()[1].int()), TypeError,
    "data")
bad("ops.pad_bytes-negative", "ops.pad_bytes", lambda t: luminamoon.ops.pad_bytes(*_od(), -1), ValueError, "max_len")
bad("ops.pad_bytes-None", "ops.pad_bytes", lambda t: luminamoon.ops.pad_bytes(*_od(), None), TypeError, "max_len")
bad("ops.pad_bytes-bos-overflow", "ops.pad_bytes", lambda t: luminamoon.ops.pad_bytes(*_od(), 4, bos_id=2 ** 70),
    ValueError, "bos_id")
bad("ops.pad_bytes-size-overflow", "ops.pad_bytes", lambda t: luminamoon.ops.pad_bytes(*_od(), 2 ** 62), ValueError,
    "max_len")
bad("ops.attention_mask-float", "ops.attention_mask", lambda t: luminamoon.ops.attention_mask(
    torch.tensor([1.0]), 3), TypeError, "lengths")
bad("ops.attention_mask-negative", "ops.attention_mask", lambda t: luminamoon.ops.attention_mask(
    torch.tensor([1]), -3), ValueError, "max_len")
bad("ops.attention_mask-2d", "ops.attention_mask", lambda t: luminamoon.ops.attention_mask(
    torch.tensor([[1]]), 3), ValueError, "lengths")
bad("ops.attention_mask-size-overflow", "ops.attention_mask", lambda t: luminamoon.ops.attention_mask(
    torch.tensor([1, 2]), 2 ** 62), ValueError, "max_len")
bad("ops.gather-out-of-range", "ops.gather", lambda t: luminamoon.ops.gather(*_od(), torch.tensor([0, 3])),
    IndexError, r"index\[1\] = 3")
bad("ops.gather-int32-index", "ops.gather", lambda t: luminamoon.ops.gather(
    *_od(), torch.tensor([0], dtype=torch.int32)), TypeError, "index")
bad("ops.gather-mixed-devices", "ops.gather", lambda t: luminamoon.ops.gather(
    *_od(), torch.tensor([0], device="meta")), ValueError, "device")
bad("ops.compact-int-mask", "ops.compact", lambda t: luminamoon.ops.compact(*_od(), torch.tensor([1, 0, 1])),
    TypeError, "mask")
bad("ops.compact-shape", "ops.compact", lambda t: luminamoon.ops.compact(*_od(), torch.tensor([True])), ValueError,
    "mask")
bad("ops.compact-mixed-devices", "ops.compact", lambda t: luminamoon.ops.compact(
    *_od(), torch.ones(3, dtype=torch.bool, device="meta")), ValueError, "device")
bad("ops.views_from_offsets-float", "ops.views_from_offsets", lambda t: luminamoon.ops.views_from_offsets(
    _od()[0].float(), _od()[1]), TypeError, "offsets")
bad("ops.views_from_offsets-mixed-devices", "ops.views_from_offsets", lambda t: luminamoon.ops.views_from_offsets(
    _od()[0], _od()[1].to("meta")), ValueError, "device")
OFV = "ops.offsets_from_views"
bad("ops.offsets_from_views-buffers-None", OFV, lambda t: luminamoon.ops.offsets_from_views(st3().views, None),
    TypeError, "buffers")
bad("ops.offsets_from_views-buffer-None", OFV, lambda t: luminamoon.ops.offsets_from_views(st3().views, [None]),
    TypeError, r"buffers\[0\]")
bad("ops.offsets_from_views-shape", OFV, lambda t: luminamoon.ops.offsets_from_views(
    st3().views[:, :8].contiguous(), [st3().data]), ValueError, r"views must have shape \[N, 16\]")
bad("ops.offsets_from_views-meta-buffer", OFV, lambda t: luminamoon.ops.offsets_from_views(
    st3().views, [st3().data.to("meta")]), ValueError, "device")
bad("ops.offsets_from_views-large-not-bool", OFV, lambda t: luminamoon.ops.offsets_from_views(
    st3().views, [st3().data], "yes"), TypeError, "large")
bad("ops.offsets_from_views-corrupt", OFV, lambda t: luminamoon.ops.offsets_from_views(
    corrupt_views().views, list(corrupt_views().buffers)), ValueError, "outside its payload buffer")

# =========================================================================== torch.ops.luminamoon.*
# Kernel checks raise TypeError / ValueError / IndexError naming the argument.  A scalar of
# the wrong Python type never reaches the kernel: torch's dispatcher refuses it with a
# RuntimeError that names the argument (the luminamoon.ops wrappers turn those into
# TypeError / ValueError first).

TO_ = "torch.ops.luminamoon."


def _v():
    st = st3()
    return st.views, [st.data]


_raw = [
    ("prefix_match", lambda: OPS.prefix_match(_od()[0].float(), _od()[1], "a"), TypeError, "offsets"),
    ("prefix_match", lambda: OPS.prefix_match(_od()[0], _od()[1].to("meta"), "a"), ValueError, "device"),
    ("prefix_match", lambda: OPS.prefix_match(*_od(), "\ud800"), RuntimeError, "argument 'prefix'"),
    ("equal", lambda: OPS.equal(_od()[0].float(), _od()[1], *_od()), TypeError, "offsets_a"),
    ("equal", lambda: OPS.equal(*_od(), _od()[0][:2], _od()[1]), ValueError, "same number of strings"),
    ("equal_scalar", lambda: OPS.equal_scalar(_od()[0][None], _od()[1], "a"), ValueError, "offsets must be 1-D"),
    ("equal_scalar", lambda: OPS.equal_scalar(*_od(), None), RuntimeError, "argument 's'"),
    ("hash64", lambda: OPS.hash64(_od()[0], _od()[1].int(), 0), TypeError, "data"),
    ("hash64", lambda: OPS.hash64(torch.tensor([0, 5, 3], dtype=torch.int32), _od()[1], 0), ValueError,
     "offsets must be non-negative and non-decreasing"),
    ("hash64", lambda: OPS.hash64(*_od(), "x"), RuntimeError, "argument 'seed'"),
    ("pad_bytes", lambda: OPS.pad_bytes(*_od(), -1), ValueError, "max_len"),
    ("pad_bytes", lambda: OPS.pad_bytes(torch.tensor([0, 5, 300], dtype=torch.int32), _od()[1], 8), ValueError,
     "past the end of data"),
    ("pad_bytes", lambda: OPS.pad_bytes(*_od(), None), RuntimeError, "argument 'max_len'"),
    ("attention_mask", lambda: OPS.attention_mask(torch.tensor([1]).int(), 3), TypeError, "lengths"),
    ("attention_mask", lambda: OPS.attention_mask(torch.tensor([1]), -1), ValueError, "max_len"),
    ("gather", lambda: OPS.gather(*_od(), torch.tensor([-1])), IndexError, "out of range"),
    ("gather", lambda: OPS.gather(*_od(), torch.tensor([[0]])), ValueError, "index must be 1-D"),
    ("compact", lambda: OPS.compact(*_od(), torch.tensor([1, 0, 1])), TypeError, "mask must be bool"),
    ("compact", lambda: OPS.compact(_od()[0].float(), _od()[1], torch.ones(3, dtype=torch.bool)), TypeError,
     "offsets"),
    ("views_from_offsets", lambda: OPS.views_from_offsets(_od()[0].float(), _od()[1]), TypeError, "offsets"),
    ("views_from_offsets", lambda: OPS.views_from_offsets(_od()[0], _od()[1].to("meta")), ValueError, "device"),
    ("offsets_from_views", lambda: OPS.offsets_from_views(_v()[0].int(), _v()[1]), TypeError, "views must be uint8"),
    ("offsets_from_views", lambda: OPS.offsets_from_views(_v()[0], None), RuntimeError, "argument 'buffers'"),
    ("views_prefix_match", lambda: OPS.views_prefix_match(corrupt_views().views, _v()[1], "a much"), ValueError,
     "outside its payload buffer"),
    ("views_prefix_match", lambda: OPS.views_prefix_match(_v()[0], [_v()[1][0].to("meta")], "a much"), ValueError,
     "device"),
    ("views_equal_scalar", lambda: OPS.views_equal_scalar(_v()[0][:, :8].contiguous(), _v()[1], "a"), ValueError,
     r"shape \[N, 16\]"),
    ("views_equal_scalar", lambda: OPS.views_equal_scalar(_v()[0], [_v()[1][0].to("meta")], ITEMS[1]), ValueError,
     "device"),
    ("views_equal", lambda: OPS.views_equal(*_v(), _v()[0][:1], _v()[1]), ValueError, "same length"),
    ("views_equal", lambda: OPS.views_equal(*_v(), _v()[0].clone(), [_v()[1][0].to("meta")]), ValueError, "device"),
    ("views_equal", lambda: OPS.views_equal(_v()[0].float(), _v()[1], *_v()), TypeError, "views_a"),
    ("views_hash64", lambda: OPS.views_hash64(_v()[0], [_v()[1][0].int()], 0), TypeError, r"buffers\[0\]"),
    ("views_hash64", lambda: OPS.views_hash64(_v()[0], [_v()[1][0].to("meta")], 0), ValueError, "device"),
    ("views_hash64", lambda: OPS.views_hash64(_v()[0], [], 0), ValueError, "outside its payload buffer"),
    # an inline view with non-zero padding is refused where views enter every views op
    ("views_hash64", lambda: OPS.views_hash64(padded_views().views, _v()[1], 0), ValueError,
     r"views\[0\] is an inline view .* non-zero padding"),
    ("views_equal_scalar", lambda: OPS.views_equal_scalar(padded_views().views, _v()[1], "alpha"), ValueError,
     "non-zero padding"),
    ("views_equal", lambda: OPS.views_equal(*_v(), padded_views().views, _v()[1]), ValueError,
     r"views_b\[0\] is an inline view"),
    ("offsets_from_views", lambda: OPS.offsets_from_views(padded_views().views, _v()[1]), ValueError,
     "non-zero padding"),
]
_seen_raw = collections.Counter()
for _op, _fn, _exc, _pat in _raw:
    _seen_raw[_op] += 1
    bad(f"{TO_}{_op}-{_seen_raw[_op]}", TO_ + _op, lambda t, f=_fn: f(), _exc, _pat)

# =========================================================================== text stages

bad("Stage-instantiate", "Stage", lambda t: luminamoon.Stage(), TypeError, "Protocols cannot be instantiated")
bad("Stage-isinstance-non-stage", "Stage",
    defined(lambda t: [isinstance(x, luminamoon.Stage) for x in (None, "text", len, StageResult)],
            lambda r: (r == [False] * 4)))

STAGE_CLASSES = (TextCleaner, QualityFilter, PIIMasker, StreamDeduplicator, FusedPipeline, ChainPipeline)
for C in STAGE_CLASSES:
    n = C.__name__
    call = f"{n}.__call__"
    bad(f"{n}-num_threads-str", (n, f"{n}.num_threads"), lambda t, C=C: C(num_threads="2"), TypeError, "num_threads")
    bad(f"{n}-num_threads-zero", (n, f"{n}.num_threads"), lambda t, C=C: C(num_threads=0), ValueError, "num_threads")
    bad(f"{n}-call-None", call, lambda t, C=C: C()(None), TypeError, "texts")
    bad(f"{n}-call-str", call, lambda t, C=C: C()("one document"), TypeError, "texts")
    bad(f"{n}-call-ndarray", call, lambda t, C=C: C()(np.array(["a"])), TypeError, "texts")
    bad(f"{n}-call-meta", call, lambda t, C=C: C()(meta3()), ValueError, "texts.*CPU")
    bad(f"{n}-call-int-item", call, lambda t, C=C: C()(["ok", 1]), TypeError, r"strings\[1\]")
    bad(f"{n}-call-surrogate", call, lambda t, C=C: C()(["\ud800"]), ValueError, r"strings\[0\]")
    bad(f"{n}-call-empty", call, defined(lambda t, C=C: C()([]), lambda r: (r.num_in == 0 and len(r) == 0)))
    bad(f"{n}-call-invalid-utf8-bytes-semantics", call, defined(
        lambda t, C=C: C()(StringTensor.from_list([b"ok \xff\xfe end"], validate=False)),
        lambda r: (r.num_in == 1)))
for C in (TextCleaner, QualityFilter, PIIMasker, StreamDeduplicator):
    n = C.__name__

    def _set(C=C):
        s = C()
        s.num_threads = -1
    bad(f"{n}-set-num_threads", f"{n}.num_threads", lambda t, f=_set: f(), ValueError, "num_threads")

bad("TextCleaner-normalize-int", "TextCleaner", lambda t: TextCleaner(normalize=1), TypeError, "normalize")
bad("TextCleaner-normalize-NFD", "TextCleaner", lambda t: TextCleaner(normalize="NFD"), ValueError, "normalize")
bad("TextCleaner-param-type", "TextCleaner", lambda t: TextCleaner(max_blank_lines="x"), TypeError, "max_blank_lines")
bad("TextCleaner-unknown-param", "TextCleaner", lambda t: TextCleaner(foo=1), TypeError, "foo")
bad("TextCleaner-bool-param-str", "TextCleaner", lambda t: TextCleaner(fold_spaces="no"), TypeError, "fold_spaces")
bad("TextCleaner-max_blank_lines-below", "TextCleaner", lambda t: TextCleaner(max_blank_lines=-2), ValueError,
    "max_blank_lines")
bad("TextCleaner-positional-setting", "TextCleaner", lambda t: TextCleaner(None, True), TypeError, "positional")
bad("QualityFilter-unknown-param", "QualityFilter", lambda t: QualityFilter(gq_min_words=1), TypeError,
    "gq_min_words")
bad("QualityFilter-size-negative", "QualityFilter", lambda t: QualityFilter(gq_min_doc_words=-1), ValueError,
    "gq_min_doc_words")
bad("QualityFilter-float-str", "QualityFilter", lambda t: QualityFilter(gr_dup_line_frac="0.3"), TypeError,
    "gr_dup_line_frac")
bad("QualityFilter-ngram-fracs-length", "QualityFilter", lambda t: QualityFilter(gr_top_ngram_frac=(0.2,)),
    ValueError, "gr_top_ngram_frac")
bad("QualityFilter-ngram-fracs-item", "QualityFilter", lambda t: QualityFilter(gr_dup_ngram_frac=[0.1] * 5 + ["x"]),
    TypeError, r"gr_dup_ngram_frac\[5\]")
bad("QualityFilter-enabled-unknown-bits", "QualityFilter", lambda t: QualityFilter(enabled=1 << 62), ValueError,
    "enabled")
bad("PIIMasker-unknown-param", "PIIMasker", lambda t: PIIMasker(ipv4_only=True), TypeError, "ipv4_only")
bad("PIIMasker-bool-param-float", "PIIMasker", lambda t: PIIMasker(ipv6_public_only=0.5), TypeError,
    "ipv6_public_only")
bad("PIIMasker-replacements-unknown-type", "PIIMasker", lambda t: PIIMasker(replacements={"mail": "x"}), ValueError,
    "mail")
bad("PIIMasker-replacements-empty-list", "PIIMasker", lambda t: PIIMasker(replacements={"iban": []}), ValueError,
    r"replacements\['iban'\] is empty")
bad("PIIMasker-replacements-NUL", "PIIMasker", lambda t: PIIMasker(replacements={"iban": "a\0"}), ValueError, "NUL")
bad("TextCleaner-negative", "TextCleaner", lambda t: TextCleaner(max_doc_bytes=-1), ValueError, "max_doc_bytes")
bad("QualityFilter-rules-int", "QualityFilter", lambda t: QualityFilter(rules=5), TypeError, "rules")
bad("QualityFilter-rules-unknown", "QualityFilter", lambda t: QualityFilter(rules=["nope"]), ValueError, "nope")
bad("QualityFilter-rules-None-item", "QualityFilter", lambda t: QualityFilter(rules=[None]), TypeError, "rule names")
bad("QualityFilter-nan", "QualityFilter", lambda t: QualityFilter(fw_short_line_thr=float("nan")), ValueError,
    "fw_short_line_thr")
bad("QualityFilter-rules-and-enabled", "QualityFilter", lambda t: QualityFilter(rules=["c4"], enabled=1), TypeError,
    "rules or enabled")
bad("PIIMasker-mode", "PIIMasker", lambda t: PIIMasker(mode="x"), ValueError, "mode")
bad("PIIMasker-mode-None", "PIIMasker", lambda t: PIIMasker(mode=None), ValueError, "mode")
bad("PIIMasker-types-unknown", "PIIMasker", lambda t: PIIMasker(types=["x"]), ValueError, "PII type")
bad("PIIMasker-types-int", "PIIMasker", lambda t: PIIMasker(types=5), TypeError, "types")
bad("PIIMasker-replacements-int", "PIIMasker", lambda t: PIIMasker(replacements=5), TypeError, "replacements")
bad("PIIMasker-replacements-value", "PIIMasker", lambda t: PIIMasker(replacements={"email": 5}), TypeError,
    r"replacements\['email'\]")
bad("PIIMasker-replacements-surrogate", "PIIMasker", lambda t: PIIMasker(replacements={"email": "\ud800"}),
    ValueError, "replacements")
bad("PIIMasker-find-None", "PIIMasker.find", lambda t: PIIMasker().find(None), TypeError, "text")
bad("PIIMasker-find-surrogate", "PIIMasker.find",
    defined(lambda t: PIIMasker().find("\ud800 ann@example.org"), lambda r: (r == [("email", 4, 19)])))
bad("PIIMasker-find-invalid-utf8", "PIIMasker.find",
    defined(lambda t: PIIMasker().find(b"\xff ann@example.org"), lambda r: (r == [("email", 2, 17)])))

SD = "StreamDeduplicator"
bad("SD-wal_path-int", SD, lambda t: StreamDeduplicator(wal_path=5), TypeError, "wal_path")
bad("SD-wal_path-empty", SD, lambda t: StreamDeduplicator(wal_path=""), ValueError, "wal_path")
bad("SD-wal_path-NUL", SD, lambda t: StreamDeduplicator(wal_path="a\0b"), ValueError, "wal_path")
bad("SD-seed-negative", SD, lambda t: StreamDeduplicator(seed=-1), ValueError, "seed")
bad("SD-max_entries-str", SD, lambda t: StreamDeduplicator(max_entries="1"), TypeError, "max_entries")
bad("SD-unknown-param", SD, lambda t: StreamDeduplicator(walpath="x"), TypeError, "walpath")
bad("SD-initial_capacity-str", SD, lambda t: StreamDeduplicator(initial_capacity="8"), TypeError, "initial_capacity")
bad("SD-initial_capacity-huge", SD, lambda t: StreamDeduplicator(initial_capacity=1 << 41), ValueError,
    "initial_capacity")
bad("SD-wal_buffer_hashes-negative", SD, lambda t: StreamDeduplicator(wal_buffer_hashes=-1), ValueError,
    "wal_buffer_hashes")
bad("SD-seed-2-64", SD, lambda t: StreamDeduplicator(seed=2 ** 64), ValueError, "seed")


def _sd_missing_dir(t):
    with pytest.raises(FileNotFoundError) as ei:
        StreamDeduplicator(wal_path=t / "missing" / "d.wal")
    assert ei.value.filename == str(t / "missing" / "d.wal")


bad("SD-wal_path-missing-dir", SD, _sd_missing_dir)


def _wal_version(t):
    p = t / "d.wal"
    with StreamDeduplicator(wal_path=p) as d:
        d(["a"])
    raw = bytearray(p.read_bytes())
    raw[8] = 2  # format version 2
    p.write_bytes(bytes(raw))
    StreamDeduplicator(wal_path=p)


def _wal_junk(t):
    p = t / "junk.wal"
    p.write_bytes(os.urandom(200))
    StreamDeduplicator(wal_path=p)


bad("SD-wal-other-version", (SD, "FormatVersionError"), _wal_version, FormatVersionError, "version")
bad("SD-wal-junk", (SD, "CorruptError"), _wal_junk, CorruptError, r"junk\.wal")
bad("SD-truncate-negative", f"{SD}.truncate", lambda t: StreamDeduplicator().truncate(-1), ValueError, "lsn")
bad("SD-truncate-str", f"{SD}.truncate", lambda t: StreamDeduplicator().truncate("1"), TypeError, "lsn")
bad("SD-truncate-past", f"{SD}.truncate", lambda t: StreamDeduplicator().truncate(5), ValueError, "lsn 5")
bad("SD-check_insert_hashes-None", f"{SD}.check_insert_hashes", lambda t: StreamDeduplicator().check_insert_hashes(
    None), TypeError, "hashes")
bad("SD-check_insert_hashes-shape", f"{SD}.check_insert_hashes", lambda t: StreamDeduplicator().check_insert_hashes(
    torch.zeros(3, dtype=torch.int64)), TypeError, "hashes")
bad("SD-check_insert_hashes-float", f"{SD}.check_insert_hashes", lambda t: StreamDeduplicator().check_insert_hashes(
    torch.zeros(3, 2)), TypeError, "hashes")
bad("SD-check_insert_hashes-meta", f"{SD}.check_insert_hashes", lambda t: StreamDeduplicator().check_insert_hashes(
    torch.zeros(3, 2, dtype=torch.int64, device="meta")), ValueError, "hashes")
bad("SD-contains-None", f"{SD}.__contains__", lambda t: None in StreamDeduplicator(), TypeError, "text")
bad("SD-contains-surrogate", f"{SD}.__contains__", lambda t: "\ud800" in StreamDeduplicator(), ValueError, "text")


def _sd_full(t):
    d = StreamDeduplicator(max_entries=2)
    with pytest.raises(luminamoon.DedupFullError, match="max_entries=2"):
        d(["a", "b", "c"])
    assert d.lsn == 0, f"the failed call admitted {d.lsn} of its documents"
    assert issubclass(luminamoon.DedupFullError, ValueError)


bad("SD-max_entries-exceeded-leaves-state", (SD, f"{SD}.__call__", "DedupFullError"), _sd_full)
for _m, _call in (("sync", lambda d: d.sync()), ("snapshot", lambda d: d.snapshot()),
                  ("truncate", lambda d: d.truncate(0)), ("__call__", lambda d: d(["x"])),
                  ("check_insert_hashes", lambda d: d.check_insert_hashes(torch.zeros(1, 2, dtype=torch.int64))),
                  ("__contains__", lambda d: "x" in d)):
    bad(f"SD-closed-{_m}", f"{SD}.{_m}", lambda t, c=_call: c(closed(StreamDeduplicator())), ValueError, "closed")


def _sd_closed_answers(t):
    d = StreamDeduplicator(wal_path=t / "d.wal")
    d(["a", "b", "a"])
    d.close()
    d.close()  # idempotent
    assert (d.closed, d.lsn, len(d), d.stats["entries"], d.counters["entries"]) == (True, 2, 2, 2, 2)
    assert d.path == str(t / "d.wal") and d.seed == 0
    with pytest.raises(NotImplementedError, match="counters"):
        d.reset_counters()


bad("SD-closed-reads-answer", [f"{SD}.{m}" for m in ("close", "closed", "lsn", "stats", "counters", "path", "seed",
                                                      "reset_counters")], _sd_closed_answers)

# ----------------------------------------------------------- MinHash (issue 12 parts 1-2)
MH = "MinHash"
MinHash = luminamoon.MinHash
bad("MH-n_grams-zero", MH, lambda t: MinHash(n_grams=0), ValueError, "n_grams")
bad("MH-precision-16", MH, lambda t: MinHash(precision=16), ValueError, "precision")
bad("MH-buckets-str", MH, lambda t: MinHash(num_buckets="14"), TypeError, "num_buckets")
bad("MH-sig-None", f"{MH}.signatures", lambda t: MinHash().signatures(None), TypeError, "texts")
bad("MH-sig-str", f"{MH}.signatures", lambda t: MinHash().signatures("one document"), TypeError, "texts")
bad("MH-sig-surrogate", f"{MH}.signatures", lambda t: MinHash().signatures(["\ud800"]), ValueError, r"strings\[0\]")
bad("MH-sig-empty-batch", f"{MH}.signatures", defined(lambda t: MinHash().signatures([]), lambda r: tuple(r.shape) == (0, 112)))
bad("MH-sig-short-docs", (f"{MH}.signatures", f"{MH}.num_hashes"),
    defined(lambda t: MinHash().signatures(["", "one", "two words", "\xff"]),
            lambda r: tuple(r.shape) == (4, MinHash().num_hashes) and bool((r == -1).all())))
bad("MH-shingles-None", f"{MH}.shingles", lambda t: MinHash().shingles(None), TypeError, "texts")
bad("MH-simplify-int", f"{MH}.simplify", lambda t: MinHash().simplify(5), TypeError, "text")
bad("MH-bands-float", f"{MH}.bands", lambda t: MinHash().bands(torch.zeros(3, 112)), TypeError, "int64")
bad("MH-bands-shape", f"{MH}.bands", lambda t: MinHash().bands(torch.zeros(3, 5, dtype=torch.int64)), ValueError,
    r"shape \[N, 112\]")
bad("MH-a-b-params", (f"{MH}.a", f"{MH}.b"), defined(lambda t: (MinHash().a, MinHash().b),
    lambda r: r[0].dtype == torch.int64 and r[0].shape == (112,) and r[1].shape == (112,) and bool((r[0] > 0).all())))
_MHA, _MHB = MinHash().a, MinHash().b
bad("op-minhash-offsets-past-end", "torch.ops.luminamoon.minhash", lambda t: torch.ops.luminamoon.minhash(
    torch.zeros(4, dtype=torch.int64), torch.tensor([0, 9]), _MHA, _MHB, 64), ValueError, "doc_offsets")
bad("op-minhash-float", "torch.ops.luminamoon.minhash", lambda t: torch.ops.luminamoon.minhash(
    torch.zeros(4), torch.tensor([0, 4]), _MHA, _MHB, 64), TypeError, "shingle_hashes")
bad("op-minhash-ab-length", "torch.ops.luminamoon.minhash", lambda t: torch.ops.luminamoon.minhash(
    torch.zeros(4, dtype=torch.int64), torch.tensor([0, 4]), _MHA, _MHB[:3], 64), ValueError, "same length")
_VC = StringTensor.from_list(["a", "bb"]).views
bad("op-views_compact-mask-len", "torch.ops.luminamoon.views_compact",
    lambda t: torch.ops.luminamoon.views_compact(_VC, torch.ones(3, dtype=torch.bool)), ValueError, "mask")
bad("op-views_compact-mask-dtype", "torch.ops.luminamoon.views_compact",
    lambda t: torch.ops.luminamoon.views_compact(_VC, torch.ones(2, dtype=torch.int64)), TypeError, "mask must be bool")
bad("op-views_compact-views-shape", "torch.ops.luminamoon.views_compact",
    lambda t: torch.ops.luminamoon.views_compact(torch.zeros(2, 8, dtype=torch.uint8), torch.ones(2, dtype=torch.bool)),
    ValueError, r"views must have shape")

# ----------------------------------------------------------- NearDeduplicator (issue 12 part 4)
ND = "NearDeduplicator"
NearDeduplicator = luminamoon.NearDeduplicator
bad("ND-num_threads-str", (ND, f"{ND}.num_threads"), lambda t: NearDeduplicator(num_threads="2"), TypeError,
    "num_threads")
bad("ND-call-None", f"{ND}.__call__", lambda t: NearDeduplicator()(None), TypeError, "texts")
bad("ND-call-str", f"{ND}.__call__", lambda t: NearDeduplicator()("one document"), TypeError, "texts")
bad("ND-call-meta", f"{ND}.__call__", lambda t: NearDeduplicator()(meta3()), ValueError, "texts.*CPU")
bad("ND-call-surrogate", f"{ND}.__call__", lambda t: NearDeduplicator()(["\ud800"]), ValueError, r"strings\[0\]")
bad("ND-call-empty", f"{ND}.__call__", defined(lambda t: NearDeduplicator()([]), lambda r: (r.num_in == 0)))
bad("ND-call-empty-and-one-word", f"{ND}.__call__", defined(
    lambda t: NearDeduplicator()(["", "", "word", "word", " \n "]), lambda r: (r.reasons.tolist() == [0] * 5)))
bad("ND-call-invalid-utf8-bytes-semantics", f"{ND}.__call__", defined(
    lambda t: NearDeduplicator()(StringTensor.from_list([b"ok \xff\xfe end of this line here", b"ok \xff\xfe end "
                                                         b"of this line here"], validate=False)),
    lambda r: (r.reasons.tolist() == [0, luminamoon.stages.REASON_NEAR_DUPLICATE])))
bad("ND-wal_path-int", ND, lambda t: NearDeduplicator(wal_path=5), TypeError, "wal_path")
bad("ND-wal_path-empty", ND, lambda t: NearDeduplicator(wal_path=""), ValueError, "wal_path")
bad("ND-precision", ND, lambda t: NearDeduplicator(precision=16), ValueError, "precision")
bad("ND-bands-zero", ND, lambda t: NearDeduplicator(num_buckets=0), ValueError, "num_buckets")
bad("ND-rows-str", ND, lambda t: NearDeduplicator(hashes_per_bucket="8"), TypeError, "hashes_per_bucket")
bad("ND-seed-big", ND, lambda t: NearDeduplicator(seed=2**32), ValueError, "seed")
bad("ND-unknown-param", ND, lambda t: NearDeduplicator(bands=3), TypeError, "bands")
bad("ND-initial_capacity-float", ND, lambda t: NearDeduplicator(initial_capacity=8.0), TypeError, "initial_capacity")
bad("ND-n_grams-bool", ND, lambda t: NearDeduplicator(n_grams=True), TypeError, "n_grams")
bad("ND-bands-too-many", ND, lambda t: NearDeduplicator(num_buckets=70000), ValueError, "num_buckets")


def _nd_other_config(t, change, name):
    p = t / "n.wal"
    with NearDeduplicator(wal_path=p) as d:
        d(["the quick brown fox jumps over the lazy dog"])
    size = p.stat().st_size
    with pytest.raises(ValueError, match=name):
        NearDeduplicator(wal_path=p, **change)
    assert p.stat().st_size == size, "the refused open changed the WAL"


for _nd_key, _nd_val, _nd_name in (("seed", 9, "seed=1"), ("num_buckets", 7, "num_buckets"),
                                   ("hashes_per_bucket", 3, "hashes_per_bucket"),
                                   ("precision", 32, "precision"), ("n_grams", 2, "n_grams")):
    bad(f"ND-wal-other-{_nd_key}", ND,
        lambda t, c={_nd_key: _nd_val}, m=_nd_name: _nd_other_config(t, c, m))
del _nd_key, _nd_val, _nd_name


def _nd_huge_doc(t):
    big = ("lorem ipsum dolor sit amet " * (100 * 2**20 // 27 + 1))[: 100 * 2**20]
    r = NearDeduplicator()([big, big[:2000], "an unrelated short document with enough words"])
    # the repeated sentence has the same five 5-grams in both: the 2000-byte prefix is a near duplicate
    assert r.reasons.tolist() == [0, luminamoon.stages.REASON_NEAR_DUPLICATE, 0]


bad("ND-call-100MB-document", f"{ND}.__call__", _nd_huge_doc)


def _nd_full(t):
    d = NearDeduplicator(max_entries=20)
    with pytest.raises(luminamoon.DedupFullError, match="max_entries=20"):
        d(["the quick brown fox jumps over the lazy dog", "a completely different sentence with many words"])
    assert d.lsn == 0


bad("ND-max_entries-exceeded-leaves-state", (ND, "DedupFullError"), _nd_full)
bad("ND-truncate-negative", f"{ND}.truncate", lambda t: NearDeduplicator().truncate(-1), ValueError, "lsn")
bad("ND-truncate-str", f"{ND}.truncate", lambda t: NearDeduplicator().truncate("1"), TypeError, "lsn")
bad("ND-truncate-past", f"{ND}.truncate", lambda t: NearDeduplicator().truncate(5), ValueError, "lsn 5")
bad("ND-check_insert_hashes-None", f"{ND}.check_insert_hashes", lambda t: NearDeduplicator().check_insert_hashes(None),
    TypeError, "keys")
bad("ND-check_insert_hashes-shape", f"{ND}.check_insert_hashes", lambda t: NearDeduplicator().check_insert_hashes(
    torch.zeros(3, dtype=torch.int64)), TypeError, "keys")
bad("ND-check_keys-rows", f"{ND}.check_keys", lambda t: NearDeduplicator().check_keys(
    torch.zeros(3, 2, dtype=torch.int64), torch.ones(1, dtype=torch.bool)), ValueError, "keys has 3 rows")
bad("ND-check_keys-None", f"{ND}.check_keys", lambda t: NearDeduplicator().check_keys(None, None), TypeError, "keys")
bad("ND-signature_keys-shape", f"{ND}.signature_keys", lambda t: NearDeduplicator().signature_keys(
    torch.zeros(1, 3, dtype=torch.int64)), TypeError, "signatures")
bad("ND-keys-None", f"{ND}.keys", lambda t: NearDeduplicator().keys(None), TypeError, "texts")
bad("ND-decisions-int-item", f"{ND}.decisions", lambda t: NearDeduplicator().decisions(["ok", 5]), TypeError,
    r"strings\[1\]")
for _m, _call in (("sync", lambda d: d.sync()), ("snapshot", lambda d: d.snapshot()),
                  ("truncate", lambda d: d.truncate(0)), ("__call__", lambda d: d(["x"])),
                  ("keys", lambda d: d.keys(["x"]))):
    bad(f"ND-closed-{_m}", f"{ND}.{_m}", lambda t, c=_call: c(closed(NearDeduplicator())), ValueError, "closed")


def _nd_closed_answers(t):
    d = NearDeduplicator(wal_path=t / "n.wal")
    d(["the quick brown fox jumps over the lazy dog"])
    d.close()
    d.close()
    assert (d.closed, d.lsn, d.stats["entries"], d.counters["entries"]) == (True, 14, 14, 14)
    assert d.path == str(t / "n.wal") and d.config["num_buckets"] == 14 and isinstance(d.index_seed, int)
    with pytest.raises(NotImplementedError, match="counters"):
        d.reset_counters()


bad("ND-closed-reads-answer", [f"{ND}.{m}" for m in ("close", "closed", "lsn", "stats", "counters", "path", "config",
                                                      "index_seed", "reset_counters")], _nd_closed_answers)
for _P in ("FusedPipeline", "ChainPipeline"):
    bad(f"{_P}-near_dedup-int", (_P, f"{_P}.near_dedup"), lambda t, n=_P: getattr(luminamoon, n)(near_dedup=5),
        TypeError, "near_dedup")
    bad(f"{_P}-near_dedup-closed", (_P, f"{_P}.near_dedup"),
        lambda t, n=_P: getattr(luminamoon, n)(near_dedup=closed(NearDeduplicator())), ValueError, "closed")

bad("hash128-None", "hash128", lambda t: hash128(None), TypeError, "texts")
bad("hash128-seed-str", "hash128", lambda t: hash128(["a"], "x"), TypeError, "seed")
bad("hash128-meta", "hash128", lambda t: hash128(meta3()), ValueError, "texts")
bad("hash128-seed-below-64-bits", "hash128", lambda t: hash128(["a"], -(2 ** 63) - 1), ValueError, "seed")
bad("hash128-seed-past-64-bits", "hash128", lambda t: hash128(["a"], 2 ** 64 + 5), ValueError, "seed")
bad("hash128-seed-negative", "hash128", defined(lambda t: hash128(["a"], -1),
                                                lambda h: (torch.equal(h, hash128(["a"], 2 ** 64 - 1)))))
bad("hash128-empty", "hash128", defined(lambda t: hash128([]), lambda h: (tuple(h.shape) == (0, 2))))
bad("reason_name-negative", "reason_name", defined(lambda t: reason_name(-1), lambda s: (s == "unknown(-1)")))
bad("reason_name-None", "reason_name", lambda t: reason_name(None), TypeError, "code")
bad("reason_name-float", "reason_name", lambda t: reason_name(1.7), TypeError, "code")

for C in (FusedPipeline, ChainPipeline):
    n = C.__name__
    bad(f"{n}-cleaner-int", n, lambda t, C=C: C(cleaner=5), TypeError, "cleaner")
    bad(f"{n}-quality-str", n, lambda t, C=C: C(quality="yes"), TypeError, "quality")
    bad(f"{n}-pii-unknown-param", n, lambda t, C=C: C(pii={"foo": 1}), TypeError, "foo")
    bad(f"{n}-dedup-closed", (n, f"{n}.dedup"), lambda t, C=C: C(dedup=closed(StreamDeduplicator())), ValueError,
        "closed")
    bad(f"{n}-closed-call", (f"{n}.close", f"{n}.__call__"), lambda t, C=C: closed(C())(["x"]), ValueError, "closed")

    def _closed_reads(t, C=C):
        p = closed(C())
        p.close()  # idempotent
        assert p.dedup.closed and isinstance(p.counters, dict)
        p.reset_counters()
    bad(f"{n}-closed-reads-answer", (f"{n}.close", f"{n}.dedup", f"{n}.counters", f"{n}.reset_counters"),
        _closed_reads)

for C in (PIIMasker, FusedPipeline, ChainPipeline):
    n = C.__name__

    def _set_cycle(value, C=C):
        C().pii_cycle = value
    bad(f"{n}-pii_cycle-str", f"{n}.pii_cycle", lambda t, f=_set_cycle: f("abc"), TypeError, "pii_cycle")
    bad(f"{n}-pii_cycle-short", f"{n}.pii_cycle", lambda t, f=_set_cycle: f([1, 2]), ValueError, "pii_cycle")
    bad(f"{n}-pii_cycle-negative", f"{n}.pii_cycle", lambda t, f=_set_cycle: f([-1] * 6), ValueError, "pii_cycle")
    bad(f"{n}-pii_cycle-huge", f"{n}.pii_cycle", lambda t, f=_set_cycle: f([2**64] * 6), ValueError, "pii_cycle")

bad("StageResult-garbage", "StageResult", lambda t: StageResult("not texts", None, None), TypeError, "texts")


def _empty_result(t):
    r = FusedPipeline()([])
    assert (r.num_in, len(r), r.reason_counts(), r.kept.tolist(), r.texts.tolist(), r.reasons.tolist(),
            r.source_index.tolist()) == (0, 0, {}, [], [], [], [])


bad("StageResult-empty-batch", [f"StageResult.{m}" for m in ("kept", "num_in", "reason_counts", "texts", "reasons",
                                                             "source_index")], _empty_result)

# =========================================================================== StateTracker

ST = "StateTracker"
bad("StateTracker-None", ST, lambda t: StateTracker(None), TypeError, "path")
bad("StateTracker-int", ST, lambda t: StateTracker(5), TypeError, "path")
bad("StateTracker-empty", ST, lambda t: StateTracker(""), ValueError, "path")


def _st_oserror(t, path, exc):
    with pytest.raises(exc) as ei:
        StateTracker(path(t))
    assert ei.value.filename == str(path(t))


bad("StateTracker-directory", ST, lambda t: _st_oserror(t, lambda t: t, IsADirectoryError))
bad("StateTracker-missing-dir", ST, lambda t: _st_oserror(t, lambda t: t / "missing" / "state", FileNotFoundError))
bad("StateTracker-under-a-file", ST, lambda t: (t / "f").write_text("x") and _st_oserror(
    t, lambda t: t / "f" / "state", NotADirectoryError))


def _state_garbage(t):
    (t / "garbage").write_bytes(b"x" * 128)
    StateTracker(t / "garbage").load()


def _state_version(t):
    import struct

    from luminamoon.data.dist_state import crc32c
    p = t / "state"
    with StateTracker(p) as st:
        st.commit(epoch=1)
    raw = bytearray(p.read_bytes())
    struct.pack_into("<H", raw, 2, 2)  # slot A: format version 2, with a valid CRC32C
    struct.pack_into("<I", raw, 60, crc32c(bytes(raw[:60])))
    p.write_bytes(bytes(raw))
    StateTracker(p).load()


bad("StateTracker-garbage", (ST, f"{ST}.load", "StateCorruptError"), _state_garbage, StateCorruptError, "garbage")
bad("StateTracker-other-version", (ST, f"{ST}.load", "FormatVersionError"), _state_version, FormatVersionError,
    "version")
for _kw, _exc, _pat in ((dict(epoch=-1), ValueError, "epoch"), (dict(batch_index="1"), TypeError, "batch_index"),
                        (dict(epoch=2 ** 33), ValueError, "epoch"), (dict(wal_lsn=2 ** 64), ValueError, "wal_lsn"),
                        (dict(shard=None), TypeError, "shard"), (dict(foo=1), TypeError, "foo")):
    bad(f"StateTracker-commit-{'-'.join(f'{k}={v}' for k, v in _kw.items())}", f"{ST}.commit",
        lambda t, kw=_kw: StateTracker(t / "s").commit(**kw), _exc, _pat)
bad("StateTracker-commit-positional", f"{ST}.commit", lambda t: StateTracker(t / "s").commit(1), TypeError,
    "positional")
for _m in ("load", "reset", "inspect"):
    bad(f"StateTracker-closed-{_m}", f"{ST}.{_m}", lambda t, m=_m: getattr(closed(StateTracker(t / "s")), m)(),
        ValueError, "closed")
bad("StateTracker-closed-commit", f"{ST}.commit", lambda t: closed(StateTracker(t / "s")).commit(epoch=1),
    ValueError, "closed")


def _st_closed_reads(t):
    s = closed(StateTracker(t / "s"))
    s.close()
    assert s.closed and s.path == str(t / "s")


bad("StateTracker-closed-reads-answer", (f"{ST}.close", f"{ST}.closed", f"{ST}.path"), _st_closed_reads)


def _st_failed_commit_keeps_state(t):
    with StateTracker(t / "s") as s:
        s.commit(epoch=1, batch_index=7)
        with pytest.raises(ValueError):
            s.commit(epoch=1, batch_index=-8)
        assert s.load()[0]["batch_index"] == 7


bad("StateTracker-failed-commit-keeps-state", f"{ST}.commit", _st_failed_commit_keeps_state)

# =========================================================================== sources, write_jsonl, expand_paths

bad("expand_paths-None", "expand_paths", lambda t: expand_paths(None), TypeError, "paths_or_glob")
bad("expand_paths-int", "expand_paths", lambda t: expand_paths(5), TypeError, "paths_or_glob")
bad("expand_paths-empty", "expand_paths", lambda t: expand_paths([]), ValueError, "no paths")
bad("expand_paths-None-item", "expand_paths", lambda t: expand_paths([None]), TypeError, r"paths_or_glob\[0\]")
bad("expand_paths-missing", "expand_paths", lambda t: expand_paths(str(t / "missing.jsonl")), FileNotFoundError,
    "missing.jsonl")
bad("expand_paths-glob-nothing", "expand_paths", lambda t: expand_paths(str(t / "*.zzz")), FileNotFoundError,
    r"\*\.zzz")
bad("expand_paths-empty-dir", "expand_paths", lambda t: expand_paths(str(t)), FileNotFoundError, "holds no file")

WJ = "write_jsonl"
bad("write_jsonl-path-None", WJ, lambda t: write_jsonl(None, []), TypeError, "path")
bad("write_jsonl-records-None", WJ, lambda t: write_jsonl(t / "o.jsonl", None), TypeError, "records")
bad("write_jsonl-frame_bytes-zero", WJ, lambda t: write_jsonl(t / "o.jsonl.gz", [], frame_bytes=0), ValueError,
    "frame_bytes")
bad("write_jsonl-frame_bytes-str", WJ, lambda t: write_jsonl(t / "o.jsonl", [], frame_bytes="x"), TypeError,
    "frame_bytes")
bad("write_jsonl-level-out-of-range", WJ, lambda t: write_jsonl(t / "o.jsonl.gz", [], level=99), ValueError, "level")
bad("write_jsonl-missing-dir", WJ, lambda t: write_jsonl(t / "no" / "o.jsonl", []), FileNotFoundError,
    r"no/o\.jsonl")


def _write_jsonl_bad_record(record, exc, pattern):
    def fn(t):
        target = t / "o.jsonl"
        write_jsonl(target, [{"text": "old"}])
        old = target.read_bytes()
        with pytest.raises(exc, match=pattern):
            write_jsonl(target, [{"text": "fine"}, record])
        assert target.read_bytes() == old, "the existing file was changed"
        assert sorted(os.listdir(t)) == ["o.jsonl"], "a temporary file was left behind"
    return fn


bad("write_jsonl-unserialisable-record", WJ, _write_jsonl_bad_record({"a": {1}}, TypeError, r"records\[1\]"))
bad("write_jsonl-surrogate-record", WJ, _write_jsonl_bad_record({"text": "\ud800"}, ValueError, r"records\[1\]"))

FILE_SOURCES = (("JsonlSource", JsonlSource, jsonl_file), ("TextSource", TextSource, jsonl_file),
                ("ParquetSource", ParquetSource, parquet_file))
for n, S, make in FILE_SOURCES:
    bad(f"{n}-None", n, lambda t, S=S: S(None), TypeError, "paths_or_glob")
    bad(f"{n}-missing", n, lambda t, S=S: S(str(t / "missing.jsonl")), FileNotFoundError, "missing.jsonl")
    bad(f"{n}-on_error", n, lambda t, S=S, m=make: S(m(t), on_error="x"), ValueError, "on_error")
    bad(f"{n}-rank", n, lambda t, S=S, m=make: S(m(t), rank=2, world_size=2), ValueError, "rank")
    bad(f"{n}-world_size-str", n, lambda t, S=S, m=make: S(m(t), world_size="2"), TypeError, "world_size")
    bad(f"{n}-max_record_bytes", n, lambda t, S=S, m=make: S(m(t), max_record_bytes=0), ValueError,
        "max_record_bytes")
    bad(f"{n}-position-int", n, lambda t, S=S, m=make: S(m(t), position=5), ValueError, "position")
    bad(f"{n}-seek-None", (f"{n}.seek", f"{n}.position"), lambda t, S=S, m=make: (
        lambda s: raises_unchanged(s, lambda: s.seek(None), ValueError, "position"))(S(m(t))))
    bad(f"{n}-seek-other-kind", (f"{n}.seek", f"{n}.position"), lambda t, S=S, m=make: (
        lambda s: raises_unchanged(s, lambda: s.seek({"kind": "zzz"}), ValueError, "position"))(S(m(t))))
    key = "row" if S is ParquetSource else "offset"
    bad(f"{n}-seek-negative", f"{n}.seek", lambda t, S=S, m=make, k=key: (lambda s: raises_unchanged(
        s, lambda: s.seek({**s.position(), k: -1}), ValueError, f"negative {k}"))(S(m(t))))
    bad(f"{n}-seek-str", f"{n}.seek", lambda t, S=S, m=make, k=key: (lambda s: raises_unchanged(
        s, lambda: s.seek({**s.position(), k: "x"}), ValueError, rf"position\['{k}'\]"))(S(m(t))))
    bad(f"{n}-seek-other-files", f"{n}.seek", lambda t, S=S, m=make: (lambda s: raises_unchanged(
        s, lambda: s.seek({**s.position(), "nfiles": 7}), ValueError, "7 files"))(S(m(t))))


def _bad_utf8_file(t):
    p = t / "bad.jsonl"
    p.write_bytes(b'{"text": "ok"}\n{"text": "\xff\xfe"}\n')
    return str(p)


bad("JsonlSource-invalid-utf8", "JsonlSource.__iter__", lambda t: list(JsonlSource(_bad_utf8_file(t))), ValueError,
    r"bad\.jsonl:2: invalid UTF-8")
bad("TextSource-invalid-utf8", "TextSource.__iter__", lambda t: list(TextSource(_bad_utf8_file(t))), ValueError,
    r"bad\.jsonl:2: invalid UTF-8")
bad("JsonlSource-iter_blocks-invalid-utf8", "JsonlSource.iter_blocks",
    lambda t: list(JsonlSource(_bad_utf8_file(t)).iter_blocks(4)), ValueError, r"bad\.jsonl:2: invalid UTF-8")
bad("JsonlSource-iter_blocks-bad-n", "JsonlSource.iter_blocks",
    lambda t: list(JsonlSource(_bad_utf8_file(t)).iter_blocks(0)), ValueError, r"n must be a positive int")

def _null_text_parquet(t):
    p = t / "nulls.parquet"
    pq.write_table(pa.table({"text": ["ok", None, "c"], "id": [1, 2, 3]}), str(p))
    return str(p)


bad("ParquetSource-iter_blocks-null-text", "ParquetSource.iter_blocks",
    lambda t: list(ParquetSource(_null_text_parquet(t)).iter_blocks(4)), ValueError,
    r"nulls\.parquet: row group 0, row 1: text column 'text' is null")
bad("ParquetSource-iter_blocks-bad-n", "ParquetSource.iter_blocks",
    lambda t: list(ParquetSource(_null_text_parquet(t)).iter_blocks(0)), ValueError, r"n must be a positive int")
bad("TextSource-iter_blocks-invalid-utf8", "TextSource.iter_blocks",
    lambda t: list(TextSource(_bad_utf8_file(t)).iter_blocks(4)), ValueError, r"bad\.jsonl:2: invalid UTF-8")
bad("TextSource-iter_blocks-per-file", "TextSource.iter_blocks",
    lambda t: list(TextSource(_bad_utf8_file(t), per="file").iter_blocks(4)), ValueError, r"per='file'")
bad("collate-blocks-no-iter_blocks", "ResumableCollate.blocks",
    lambda t: create_resumable_collate().blocks(IterableSource(["a"]), 4), TypeError, r"source must have iter_blocks")
bad("collate-blocks-bad-size", "ResumableCollate.blocks",
    lambda t: create_resumable_collate().blocks(JsonlSource(_bad_utf8_file(t)), 0), ValueError,
    r"block_size must be a positive int")
bad("JsonlSource-malformed", ("JsonlSource.__iter__", "BadRecordError"),
    lambda t: (t / "m.jsonl").write_text('{"text": "a"}\n{oops\n')
    and list(JsonlSource(str(t / "m.jsonl"))), luminamoon.data.BadRecordError, r"m\.jsonl:2: malformed JSON")
bad("JsonlSource-position-past-end", "JsonlSource.__iter__", lambda t: (lambda p: list(JsonlSource(
    p, position={**JsonlSource(p).position(), "offset": 10 ** 9})))(jsonl_file(t)), ValueError, "past the end")
bad("JsonlSource-text_key-int", "JsonlSource", lambda t: JsonlSource(jsonl_file(t), text_key=5), TypeError,
    "text_key")
bad("JsonlSource-gzip_spacing", "JsonlSource", lambda t: JsonlSource(jsonl_file(t), gzip_spacing="x"), TypeError,
    "gzip_spacing")
bad("TextSource-per", "TextSource", lambda t: TextSource(jsonl_file(t), per="x"), ValueError, "per")
bad("ParquetSource-columns-int", "ParquetSource", lambda t: ParquetSource(parquet_file(t), columns=5), TypeError,
    "columns")
bad("ParquetSource-text_column-int", "ParquetSource", lambda t: ParquetSource(parquet_file(t), text_column=5),
    TypeError, "text_column")
bad("ParquetSource-not-parquet", "ParquetSource.__iter__", lambda t: list(ParquetSource(jsonl_file(t))), ValueError,
    "not a readable Parquet file")
bad("ParquetSource-null-text", "ParquetSource.__iter__", lambda t: list(ParquetSource(parquet_file(t, ["a", None]))),
    ValueError, "row 1")
bad("JsonlSource-empty-file", "JsonlSource.__iter__", defined(
    lambda t: (t / "e.jsonl").write_bytes(b"") or list(JsonlSource(str(t / "e.jsonl"))), lambda r: (r == [])))

IS = "IterableSource"
bad("IterableSource-None", IS, lambda t: IterableSource(None), TypeError, "iterable_or_factory")
bad("IterableSource-str", IS, lambda t: IterableSource("abc"), TypeError, "iterable_or_factory")
bad("IterableSource-text_key", IS, lambda t: IterableSource(["a"], text_key=5), TypeError, "text_key")
bad("IterableSource-None-item", f"{IS}.__iter__", lambda t: list(IterableSource([None])), ValueError, "item 0")
bad("IterableSource-seek-no-consumed", (f"{IS}.seek", f"{IS}.position"), lambda t: (lambda s: raises_unchanged(
    s, lambda: s.seek({"kind": "iterable"}), ValueError, "consumed"))(IterableSource(["a"])))
bad("IterableSource-seek-negative", (f"{IS}.seek", f"{IS}.position"), lambda t: (lambda s: raises_unchanged(
    s, lambda: s.seek({"kind": "iterable", "consumed": -1}), ValueError, "negative consumed"))(IterableSource(["a"])))
bad("IterableSource-one-shot-twice", f"{IS}.__iter__", lambda t: (lambda s: (list(s), list(s)))(
    IterableSource(iter(["a"]))), ValueError, "one-shot")


def _hf(texts=("a", "b"), key="text"):
    datasets = pytest.importorskip("datasets")
    return datasets.Dataset.from_dict({key: list(texts)}).to_iterable_dataset()


HF = "HFIterableSource"
bad("HFIterableSource-None", HF, lambda t: HFIterableSource(None), TypeError, "ds")
bad("HFIterableSource-list", HF, lambda t: HFIterableSource([{"text": "a"}]), TypeError, "ds")
bad("HFIterableSource-text_key", HF, lambda t: HFIterableSource(_hf(), text_key=5), TypeError, "text_key")
bad("HFIterableSource-seek-None", (f"{HF}.seek", f"{HF}.position"), lambda t: (lambda s: raises_unchanged(
    s, lambda: s.seek(None), ValueError, "position"))(HFIterableSource(_hf())))
bad("HFIterableSource-seek-no-state", (f"{HF}.seek", f"{HF}.position"), lambda t: (lambda s: raises_unchanged(
    s, lambda: s.seek({"kind": "hf"}), ValueError, r"position\['state'\]"))(HFIterableSource(_hf())))
bad("HFIterableSource-missing-text", f"{HF}.__iter__", lambda t: list(HFIterableSource(_hf(key="x"))), ValueError,
    "text field 'text'")

bad("Source-on_error", "Source", lambda t: Source(on_error="x"), ValueError, "on_error")
bad("Source-abstract-iter", "Source.__iter__", lambda t: list(Source()), NotImplementedError, "_records")
bad("Source-abstract-position", "Source.position", lambda t: Source().position(), NotImplementedError, "position")
bad("Source-abstract-seek", "Source.seek", lambda t: Source().seek({}), NotImplementedError, "seek")

# =========================================================================== ResumablePipeline

RP = "ResumablePipeline"
DOCS = [f"document {i} about kernels" for i in range(30)]
for cid, kw, exc, pat in (
        ("source-None", dict(source=None), TypeError, "source"),
        ("source-int", dict(source=5), TypeError, "source"),
        ("batch_size-zero", dict(batch_size=0), ValueError, "batch_size"),
        ("batch_size-str", dict(batch_size="1"), ValueError, "batch_size"),
        ("prefetch-negative", dict(prefetch_batches=-1), ValueError, "prefetch_batches"),
        ("pipeline-unknown", dict(pipeline="x"), ValueError, "pipeline"),
        ("stages-list", dict(stages=[1]), TypeError, "stages"),
        ("stages-unknown", dict(stages={"foo": 1}), TypeError, "foo"),
        ("text_key-int", dict(text_key=5), TypeError, "text_key"),
        ("num_threads-str", dict(num_threads="x"), TypeError, "num_threads"),
        ("num_threads-zero", dict(num_threads=0), ValueError, "num_threads"),
        ("dedup-str", dict(dedup="no"), TypeError, "dedup"),
        ("max_prefetch_bytes-negative", dict(max_prefetch_bytes=-1), ValueError, "max_prefetch_bytes")):
    bad(f"{RP}-{cid}", RP, lambda t, kw=kw: ResumablePipeline(**{"source": DOCS, "state_dir": str(t / "s"), **kw}),
        exc, pat)
bad(f"{RP}-state_dir-int", RP, lambda t: ResumablePipeline(DOCS, state_dir=5), TypeError, "state_dir")


def _rp_state_dir_file(t):
    f = t / "f"
    f.write_text("x")
    with pytest.raises(OSError) as ei:
        ResumablePipeline(DOCS, state_dir=str(f))
    assert str(f) in str(ei.value)


bad(f"{RP}-state_dir-is-a-file", RP, _rp_state_dir_file)


def rp(t, **kw):
    return ResumablePipeline(DOCS, state_dir=str(t / "s"), stages=STAGES, batch_size=10, **kw)


bad(f"{RP}-commit-extra-set", f"{RP}.commit", lambda t: rp(t).commit(extra={1, 2}), TypeError, "extra")
bad(f"{RP}-load_state_dict-None", f"{RP}.load_state_dict", lambda t: rp(t).load_state_dict(None), TypeError, "state")
bad(f"{RP}-load_state_dict-empty", f"{RP}.load_state_dict", lambda t: rp(t).load_state_dict({}), ValueError,
    "missing")
bad(f"{RP}-load_state_dict-version", f"{RP}.load_state_dict", lambda t: (lambda p: p.load_state_dict(
    {**p.state_dict(), "version": 99}))(rp(t)), ValueError, "version")
bad(f"{RP}-load_state_dict-source", f"{RP}.load_state_dict", lambda t: (lambda p: p.load_state_dict(
    {**p.state_dict(), "source": {"kind": "zzz"}}))(rp(t)), ValueError, "position")
bad(f"{RP}-load_state_dict-other-dir", f"{RP}.load_state_dict", lambda t: (lambda p: p.load_state_dict(
    {**p.state_dict(), "state_dir": "/elsewhere"}))(rp(t)), ValueError, "state_dir")
bad(f"{RP}-load_state_dict-lsn-beyond-log", f"{RP}.load_state_dict", lambda t: (lambda p: p.load_state_dict(
    {**p.state_dict(), "wal_lsn": 10 ** 6}))(rp(t)), OSError, "lost committed records")
bad(f"{RP}-load_state_dict-batch_index-str", f"{RP}.load_state_dict", lambda t: (lambda p: p.load_state_dict(
    {**p.state_dict(), "batch_index": "x"}))(rp(t)), ValueError, "batch_index")
bad(f"{RP}-iterate-twice", f"{RP}.__iter__", lambda t: (lambda p: (list(p), list(p)))(rp(t)), RuntimeError,
    "iterated once")
bad(f"{RP}-load_state_dict-after-start", f"{RP}.load_state_dict", lambda t: (lambda p: (
    next(iter(p)), p.load_state_dict(p.state_dict())))(rp(t)), RuntimeError, "before iteration")
bad(f"{RP}-record-without-text", f"{RP}.__iter__", lambda t: list(ResumablePipeline(
    [{"x": 1}], state_dir=str(t / "s"))), ValueError, "item 0")
bad(f"{RP}-surrogate-record", f"{RP}.__iter__", lambda t: list(ResumablePipeline(
    ["\ud800"], state_dir=str(t / "s"))), ValueError, r"strings\[0\]")
for _m, _call in (("__iter__", lambda p: list(p)), ("commit", lambda p: p.commit()),
                  ("load_state_dict", lambda p: p.load_state_dict({}))):
    bad(f"{RP}-closed-{_m}", (f"{RP}.close", f"{RP}.{_m}"), lambda t, c=_call: c(closed(rp(t))), ValueError, "closed")


def _rp_closed_reads(t):
    p = rp(t)
    batches = list(p)
    p.commit()
    p.close()
    p.close()
    sd = p.state_dict()
    assert sd["batch_index"] == len(batches) and sd["sample_index"] == len(DOCS)
    assert isinstance(p.prefetch_stats, dict) and p.dedup_stats["entries"] == len(set(DOCS))


bad(f"{RP}-closed-reads-answer", [f"{RP}.{m}" for m in ("close", "state_dict", "prefetch_stats", "dedup_stats")],
    _rp_closed_reads)


def _rp_failed_commit_keeps_state(t):
    p = rp(t)
    it = iter(p)
    next(it)
    p.commit(extra={"n": 1})
    next(it)
    with pytest.raises(TypeError):
        p.commit(extra={"bad": {1}})
    p.close()
    p2 = rp(t)
    assert p2.resume_extra == {"n": 1} and [b.index for b in p2] == [1, 2]


bad(f"{RP}-failed-commit-keeps-last", f"{RP}.commit", _rp_failed_commit_keeps_state)

# =========================================================================== DistributedPipeline

DP = "DistributedPipeline"
for cid, kw, exc, pat in (
        ("source-None", dict(source=None), TypeError, "source"),
        ("batch_size-zero", dict(batch_size=0), ValueError, "batch_size"),
        ("dedup-unknown", dict(dedup="x"), ValueError, "dedup"),
        ("pipeline-None", dict(pipeline=None), ValueError, "pipeline"),
        ("stages-dedup", dict(stages={"dedup": True}), ValueError, "dedup"),
        ("stages-pii-int", dict(stages={"pii": 5}), TypeError, "pii"),
        ("exchange_backend", dict(exchange_backend="mpi"), ValueError, "exchange_backend"),
        ("seed-str", dict(seed="x"), TypeError, "seed"),
        ("seed-negative", dict(seed=-1), ValueError, "seed"),
        ("group-int", dict(group=5), TypeError, "group"),
        ("text_key-int", dict(text_key=5), TypeError, "text_key"),
        ("timeout-int", dict(timeout=5), TypeError, "timeout"),
        ("num_threads-str", dict(num_threads="x"), TypeError, "num_threads"),
        ("prefetch-negative", dict(prefetch_batches=-1), ValueError, "prefetch_batches"),
        ("max_prefetch_bytes-negative", dict(max_prefetch_bytes=-1), ValueError, "max_prefetch_bytes")):
    bad(f"{DP}-{cid}", DP, lambda t, kw=kw: DistributedPipeline(**{"source": DOCS, "state_dir": str(t / "s"), **kw}),
        exc, pat)


def dp(t, **kw):
    return DistributedPipeline(DOCS, state_dir=str(t / "s"), stages=STAGES, batch_size=10, **kw)


def _dp_bad_extra(t):
    p = dp(t)
    next(iter(p))
    with pytest.raises(TypeError, match="extra"):
        p.commit(extra={1})
    p.close()
    assert dp(t).resumed_from is None  # nothing was committed


bad(f"{DP}-commit-extra-set", f"{DP}.commit", _dp_bad_extra)
bad(f"{DP}-iterate-twice", f"{DP}.__iter__", lambda t: (lambda p: (list(p), list(p)))(dp(t)), RuntimeError,
    "iterated once")
bad(f"{DP}-seed-mismatch-on-resume", DP, lambda t: (lambda p: (list(p), p.commit(), p.close(), dp(t, seed=7)))(
    dp(t)), ValueError, "seed")
for _m, _call in (("__iter__", lambda p: list(p)), ("commit", lambda p: p.commit())):
    bad(f"{DP}-closed-{_m}", (f"{DP}.close", f"{DP}.{_m}"), lambda t, c=_call: c(closed(dp(t))), ValueError, "closed")


def _dp_closed_reads(t):
    p = dp(t)
    list(p)
    p.close()
    p.close()
    assert p.state_dict()["sample_index"] == len(DOCS) and p.exchange_stats["steps"] == 3
    assert p.dedup.closed and isinstance(p.prefetch_stats, dict)


bad(f"{DP}-closed-reads-answer", [f"{DP}.{m}" for m in ("close", "state_dict", "exchange_stats", "dedup",
                                                         "prefetch_stats")], _dp_closed_reads)

bad(f"{RP}-near_dedup-str", RP, lambda t: rp(t, near_dedup="yes"), TypeError, "near_dedup")
bad(f"{RP}-near_dedup-wal_path", RP, lambda t: rp(t, near_dedup={"wal_path": "x"}), ValueError, "wal_path")
bad(f"{RP}-near_dedup-bad-bands", RP, lambda t: rp(t, near_dedup={"num_buckets": 0}), ValueError, "num_buckets")


def _rp_near_other_config(t):
    docs = [f"document {i} about kernels and the many drivers they load" for i in range(30)]

    def mk(**kw):
        return ResumablePipeline(docs, state_dir=str(t / "s"), stages=STAGES, batch_size=10, **kw)
    p = mk(near_dedup=True)
    list(p)
    p.commit()
    lsn = p.near_dedup_stats["lsn"]
    p.close()
    assert lsn > 0
    with pytest.raises(ValueError, match="near_dedup"):
        mk(near_dedup={"hashes_per_bucket": 4})
    p = mk(near_dedup=True)  # the committed state is untouched
    assert p.near_dedup_stats["lsn"] == lsn
    p.close()
    assert p.near_dedup_stats["entries"] == lsn  # answers after close


bad(f"{RP}-near_dedup-other-config", (RP, f"{RP}.near_dedup_stats"), _rp_near_other_config)
bad(f"{DP}-near_dedup-unknown", DP, lambda t: dp(t, near_dedup="x"), ValueError, "near_dedup")
bad(f"{DP}-near_dedup_config-list", DP, lambda t: dp(t, near_dedup="global", near_dedup_config=[1]), TypeError,
    "near_dedup_config")
bad(f"{DP}-near_dedup_config-bad", DP, lambda t: dp(t, near_dedup="global", near_dedup_config={"precision": 8}),
    ValueError, "precision")


def _dp_near_closed_reads(t):
    p = dp(t, near_dedup="global")
    list(p)
    p.commit()
    p.close()
    assert p.near_dedup.closed and p.near_exchange_stats["steps"] == 3


bad(f"{DP}-near-closed-reads-answer", [f"{DP}.{m}" for m in ("near_dedup", "near_exchange_stats")],
    _dp_near_closed_reads)

# =========================================================================== collate

CRC = "create_resumable_collate"
for cid, kw, exc, pat in (
        ("text_key-int", dict(text_key=5), TypeError, "text_key"),
        ("pipeline-unknown", dict(pipeline="x"), ValueError, "pipeline"),
        ("dedup-unknown", dict(dedup="x"), ValueError, "dedup"),
        ("dedup-global-string", dict(dedup="global"), ValueError, "dedup"),
        ("tokenizer-int", dict(tokenizer=5), TypeError, "tokenizer"),
        ("max_length-zero", dict(max_length=0), ValueError, "max_length"),
        ("max_length-str", dict(max_length="5"), ValueError, "max_length"),
        ("stages-int", dict(stages=5), TypeError, "stages"),
        ("stages-unknown", dict(stages={"foo": 1}), ValueError, "foo"),
        ("pad_id-str", dict(pad_id="x"), TypeError, "pad_id"),
        ("bos_id-overflow", dict(bos_id=2 ** 70), ValueError, "bos_id"),
        ("return_string_tensor-str", dict(return_string_tensor="yes"), TypeError, "return_string_tensor"),
        ("num_threads-zero", dict(num_threads=0), ValueError, "num_threads"),
        ("dedup_max_entries-negative", dict(dedup_max_entries=-1), ValueError, "dedup_max_entries")):
    bad(f"{CRC}-{cid}", CRC, lambda t, kw=kw: create_resumable_collate(**kw), exc, pat)
    bad(f"ResumableCollate-{cid}", "ResumableCollate", lambda t, kw=kw: ResumableCollate(**kw), exc, pat)
RCC = "ResumableCollate.__call__"
bad("collate-None", RCC, lambda t: create_resumable_collate()(None), TypeError, "samples")
bad("collate-str", RCC, lambda t: create_resumable_collate()("abc"), TypeError, "samples")
bad("collate-None-sample", RCC, lambda t: create_resumable_collate()([None]), TypeError, "sample 0")
bad("collate-surrogate", RCC, lambda t: create_resumable_collate()(["\ud800"]), ValueError, r"strings\[0\]")
bad("collate-empty", RCC, defined(lambda t: create_resumable_collate()([]),
                                  lambda b: (tuple(b["input_ids"].shape)[0] == 0)))
bad("collate-tokenizer-returns-int", RCC, lambda t: create_resumable_collate(tokenizer=lambda x: 5, pipeline=None)(
    ["a"]), TypeError, "tokenizer")
bad("collate-tokenizer-wrong-count", RCC, lambda t: create_resumable_collate(tokenizer=lambda x: [], pipeline=None)(
    ["a"]), ValueError, "tokenizer returned 0 sequences for 1")
bad("collate-tokenizer-returns-str", RCC, lambda t: create_resumable_collate(
    tokenizer=lambda x: ["abc" for _ in x], pipeline=None)(["a"]), TypeError, "tokenizer output 0")
bad("collate-tokenizer-returns-non-int", RCC, lambda t: create_resumable_collate(
    tokenizer=lambda x: [["a"] for _ in x], pipeline=None)(["a"]), TypeError, "tokenizer output 0")
bad("collate-process-None", "ResumableCollate.process", lambda t: create_resumable_collate().process(None), TypeError,
    "samples")
bad("collate-stateful-int", "ResumableCollate.stateful", lambda t: create_resumable_collate().stateful(5), TypeError,
    "map-style")
bad("collate-stateful-iterable", "ResumableCollate.stateful", lambda t: create_resumable_collate().stateful(
    torch.utils.data.ChainDataset([])), TypeError, "map-style")

# =========================================================================== Batch / DistBatch


def _batch(cls=Batch, **kw):
    st = StringTensor.from_list(["a"])
    return cls(0, st, torch.zeros(1, dtype=torch.int32), torch.tensor([5]), [{"id": 1}], 1, 1, **kw)


bad("Batch-kept_records-bad-index", ("Batch", "Batch.kept_records"), lambda t: _batch().kept_records, IndexError,
    "index")
bad("DistBatch-kept_records-bad-index", ("DistBatch", "DistBatch.kept_records"), lambda t: _batch(DistBatch)
    .kept_records, IndexError, "index")
bad("DistBatch-kept_global_index-bad-index", "DistBatch.kept_global_index", lambda t: _batch(
    DistBatch, global_index=torch.zeros(1, dtype=torch.int64)).kept_global_index, IndexError, "index")
for _c in (Batch, DistBatch):
    bad(f"{_c.__name__}-memory_bytes-meta", f"{_c.__name__}.memory_bytes", defined(lambda t, c=_c: c(
        0, meta3(), torch.zeros(3, dtype=torch.int32), torch.arange(3), [{}] * 3, 3, 0).memory_bytes,
        lambda n: (isinstance(n, int) and n >= 0)))

# =========================================================================== the luminamoon command (in process)

CLI = "cli.main"
for cid, argv, pat in (
        ("no-command", lambda t: [], ""),
        ("unknown-flag", lambda t: ["--bogus"], "unrecognized arguments"),
        ("run-no-args", lambda t: ["run"], "required"),
        ("run-missing-input", lambda t: ["run", t / "missing.jsonl", "-o", t / "o"], "input not found.*missing"),
        ("run-output-is-a-file", lambda t: ["run", jsonl_file(t), "-o", jsonl_file(t)], r"File exists.*c\.jsonl"),
        ("run-output-under-a-file", lambda t: ["run", jsonl_file(t), "-o", pathlib.Path(jsonl_file(t)) / "o"],
         r"Not a directory.*c\.jsonl"),
        ("run-batch-size-zero", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--batch-size", "0"], "batch_size"),
        ("run-batch-size-str", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--batch-size", "x"], "batch-size"),
        ("run-part-docs-zero", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--part-docs", "0"], "part_docs"),
        ("run-threads-negative", lambda t: ["run", jsonl_file(t), "-o", t / "o", "-j", "-1"], "threads"),
        ("run-set-malformed", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--set", "foo"], "section.key=value"),
        ("run-set-unknown", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--set", "quality.nope=1"], "nope"),
        ("run-config-missing", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--config", t / "no.toml"],
         "config file not found"),
        ("run-config-not-toml", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--config", jsonl_file(t)],
         "TOML"),
        ("run-format-unknown", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--format", "xml"], "--format"),
        ("run-compression-unknown", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--compression", "lzma"],
         "compression"),
        ("run-rules-unknown", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--rules", "nope"], "nope"),
        ("run-pii-types-unknown", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--pii-types", "nope"], "nope"),
        ("run-wrong-input-format", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--input-format", "parquet"],
         "not a readable Parquet file"),
        ("run-text-field-missing", lambda t: ["run", jsonl_file(t), "-o", t / "o", "--text-field", "nope", "-q"],
         "text field 'nope' is missing"),
        ("run-format-from-name", lambda t: ["run", (t / "x.bin").write_bytes(b"") or t / "x.bin", "-o", t / "o"],
         "cannot tell the format"),
        ("run-invalid-utf8-input", lambda t: ["run", _bad_utf8_file(t), "-o", t / "o", "-q"], "invalid UTF-8"),
        ("run-resume-other-command", lambda t: (run_cli(["run", jsonl_file(t), "-o", t / "o", "-q", "--no-report"]),
                                               ["run", jsonl_file(t), "-o", t / "o", "-q", "--resume", "--no-pii"])[1],
         "differs"),
        ("run-existing-state", lambda t: (run_cli(["run", jsonl_file(t), "-o", t / "o", "-q", "--no-report"]),
                                         ["run", jsonl_file(t), "-o", t / "o", "-q"])[1], "--resume"),
        ("demo-size-negative", lambda t: ["demo", "--size-mb", "-1", "-o", t / "d"], "size-mb"),
        ("config-set-malformed", lambda t: ["config", "--set", "x"], "section.key=value")):
    bad(f"cli-{cid}", CLI, expect_cli(argv, pat))


# =========================================================================== the matrix

def _param(c: Case):
    marks = []
    if c.xfail:
        marks.append(pytest.mark.xfail(strict=True, reason=c.xfail))
    if c.skip:
        marks.append(pytest.mark.skip(reason=c.skip))
    return pytest.param(c, id=c.id, marks=marks)


@pytest.mark.parametrize("c", [_param(c) for c in CASES])
def test_matrix(c: Case, tmp_path):
    if c.raises is None:
        c.fn(tmp_path)
        return
    with pytest.raises(c.raises) as ei:
        c.fn(tmp_path)
    assert c.match is None or re.search(c.match, str(ei.value)), \
        f"{type(ei.value).__name__}: {ei.value!s:.500} -- does not match {c.match!r}"


# Exceptions a bad input may raise.  RuntimeError only where documented: misuse of an
# iterate-once object, and torch's dispatcher refusing a scalar for a raw operator.
_STANDARD = (TypeError, ValueError, OSError, IndexError)
_DOCUMENTED_RUNTIME = {f"{TO_}{op}" for op in ("prefix_match", "equal_scalar", "hash64", "pad_bytes",
                                                 "offsets_from_views")} | {f"{RP}.__iter__", f"{DP}.__iter__",
                                                                           f"{RP}.load_state_dict"}


def test_cases_expect_standard_exceptions():
    odd = []
    for c in CASES:
        if c.raises is None:
            continue
        kinds = c.raises if isinstance(c.raises, tuple) else (c.raises,)
        for k in kinds:
            if issubclass(k, _STANDARD):
                continue
            if issubclass(k, NotImplementedError) and all(n.startswith("Source.") for n in c.covers):
                continue  # the abstract base class
            if k is RuntimeError and set(c.covers) <= _DOCUMENTED_RUNTIME:
                continue
            odd.append((c.id, k.__name__))
    assert not odd, odd
    assert all(c.match or c.raises is None for c in CASES), [c.id for c in CASES if c.raises and not c.match]


# =========================================================================== the public surface

_PROTOCOLS = ("__call__", "__getitem__", "__contains__", "__eq__", "__iter__")


def _own_source(fn) -> bool:
    try:
        return os.path.realpath(inspect.getsourcefile(fn) or "").startswith(
            os.path.realpath(os.path.dirname(luminamoon.__file__)))
    except TypeError:
        return False


def public_surface() -> set:
    names, classes = set(), {}
    for mod in (luminamoon, luminamoon.data):
        for n in mod.__all__:
            obj = getattr(mod, n)
            if inspect.ismodule(obj):
                names |= {f"ops.{f}" for f in obj.__all__}
                continue
            names.add(n)
            if inspect.isclass(obj) and not issubclass(obj, BaseException):
                classes[n] = obj
    names |= {TO_ + n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("luminamoon::")}
    names.add(CLI)
    for cname, cls in classes.items():
        names |= {f"{cname}.{m}" for m in dir(cls) if not m.startswith("_")}
        for d in _PROTOCOLS:
            fn = getattr(cls, d, None)
            if fn is not None and _own_source(fn):
                names.add(f"{cname}.{d}")
    return names


def test_every_public_name_has_a_bad_input_case():
    surface = public_surface()
    assert len(surface) > 150 and "torch.ops.luminamoon.hash64" in surface and "ops.pad_bytes" in surface
    missing = sorted(n for n in surface if n not in COVERED and n not in ALLOW)
    assert not missing, f"public names without a bad-input case (add one, or an ALLOW entry if it takes no input): " \
                        f"{missing}"


def test_allow_list_and_cases_name_real_api():
    surface = public_surface()
    assert not sorted(set(ALLOW) - surface), "stale ALLOW entries"
    assert not sorted(set(ALLOW) & set(COVERED)), "allow-listed names that have cases: drop them from ALLOW"
    assert not sorted(set(COVERED) - surface), "cases cover names that are not public API"


# =========================================================================== subprocesses


def _run_child(args, *, timeout=300, preexec=None, shell_prefix=None) -> dict:
    cmd = [sys.executable, str(CHILD), *map(str, args)]
    if shell_prefix is not None:
        cmd = shell_prefix(cmd)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=preexec, cwd=str(HERE))
    assert p.returncode >= 0, f"the child was killed by signal {-p.returncode} (a crash):\n{p.stderr[-4000:]}"
    assert p.returncode == 0, f"the child failed (exit {p.returncode}):\n{p.stderr[-4000:]}"
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result from the child:\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return json.loads(lines[-1][len("RESULT "):])


def _can_unshare() -> bool:
    if not shutil.which("unshare"):
        return False
    try:
        r = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {HERE} || exit 3"],
                           capture_output=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


UNSHARE = _can_unshare()
ROOT = os.geteuid() == 0


def _err_names(obs: dict, *paths) -> bool:
    e = obs.get("error") or obs
    return any(p and (e.get("filename") == p or p in (e.get("msg") or "")) for p in paths)


# ---------------------------------------------------------------- huge inputs

@pytest.fixture(scope="module")
def huge(tmp_path_factory):
    return _run_child(["huge", tmp_path_factory.mktemp("huge")])


_HUGE_OK = {  # observation -> check of its {"ok": repr} or {"error": ...}
    "from_list_64mb": lambda o: o["ok"] is True,
    "hash64_64mb": lambda o: "ok" in o,
    "starts_with_64mb": lambda o: o.get("ok") == "[True, False]",
    "pad_bytes_64mb": lambda o: o.get("ok") == "(2, 16)",
    "cleaner_64mb": lambda o: o.get("ok") == "[0, 0]",
    "fused_64mb": lambda o: o.get("ok") == "[0, 0]",
    "quality_64mb_c4": lambda o: o.get("ok") == "2",
    "quality_64mb_limited": lambda o: o.get("ok") == "3",  # REASON_TOO_LARGE
    "pii_find_64mb": lambda o: o.get("ok") == "1",
    "hash128_64mb": lambda o: o.get("ok") == "(2, 2)",
    "dedup_64mb": lambda o: o.get("ok") == "[True, False]",
    "jsonl_64mb_record": lambda o: "ok" in o and o["ok"].endswith(", 5]"),
    "jsonl_64mb_record_limited": lambda o: "ValueError" in o["error"]["is"] and "max_record_bytes" in o["error"]["msg"],
    "from_list_1e6": lambda o: o["ok"] is True,
    "hash64_1e6": lambda o: o.get("ok") == "1000000",
    "take_1e6_out_of_range": lambda o: o["error"]["type"] == "IndexError" and "1000000" in o["error"]["msg"],
    "dedup_1e6": lambda o: o.get("ok") == "1000000",
    "collate_1e6": lambda o: o.get("ok") == "1000000",
    "from_list_1e6_one_bad": lambda o: o["error"]["type"] == "TypeError" and "strings[999999]" in o["error"]["msg"],
    "ops_pad_bytes_overflow": lambda o: "ValueError" in o["error"]["is"] and "max_len" in o["error"]["msg"],
    "raw_pad_bytes_overflow": lambda o: "ValueError" in o["error"]["is"] and "max_len" in o["error"]["msg"],
    "raw_attention_mask_overflow": lambda o: "ValueError" in o["error"]["is"] and "max_len" in o["error"]["msg"],
    "dedup_initial_capacity_overflow": lambda o: "ValueError" in o["error"]["is"]
    and "initial_capacity" in o["error"]["msg"],
}
_HUGE_XFAIL: dict = {}  # name -> reason, for a known product bug (none open)


@covers("StringTensor.from_list", "StringTensor.hash64", "StringTensor.starts_with", "StringTensor.pad_bytes",
        "StringTensor.take", "TextCleaner.__call__", "FusedPipeline.__call__", "QualityFilter.__call__",
        "PIIMasker.find", "hash128",
        "StreamDeduplicator", "StreamDeduplicator.__call__", "JsonlSource.__iter__", "ResumableCollate.__call__",
        "ops.pad_bytes", "torch.ops.luminamoon.pad_bytes", "torch.ops.luminamoon.attention_mask")
@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=_HUGE_XFAIL[n])]
                                                if n in _HUGE_XFAIL else []) for n in _HUGE_OK])
def test_huge_input(huge, name):
    """A 64 MB document, a 10^6-element list, sizes that overflow: in a child process."""
    assert name in huge, sorted(huge)
    assert _HUGE_OK[name](huge[name]), huge[name]


# ---------------------------------------------------------------- the disk is full

SCENARIOS = ("dedup_wal", "dedup_snapshot", "state", "resumable", "distributed", "commit_sidecar", "write_jsonl",
             "cli")


def _corpus(path: pathlib.Path) -> None:
    import random
    rng = random.Random(0)
    docs = [f"Document {i} talks about {rng.choice(['kernels', 'mirrors', 'archives'])} and "
            f"{rng.choice(['python', 'debian', 'torch'])}." for i in range(2500)]
    docs += [docs[rng.randrange(2500)] for _ in range(500)]  # exact duplicates
    rng.shuffle(docs)
    write_jsonl(path, [{"id": f"doc-{i}", "text": t} for i, t in enumerate(docs)])


def _work(tmp_path_factory, name: str) -> pathlib.Path:
    work = tmp_path_factory.mktemp(name)
    (work / "src").mkdir()
    _corpus(work / "src" / "corpus.jsonl")
    for s in SCENARIOS:
        (work / s).mkdir()
    return work


def _tmpfs_prefix(work: pathlib.Path):
    mounts = " && ".join(f"mount -t tmpfs -o size=1m tmpfs {work / s}" for s in SCENARIOS)
    return lambda cmd: ["unshare", "-rm", "sh", "-c", f'{mounts} && exec "$@"', "sh", *cmd]


def _rlimit_preexec():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


@pytest.fixture(scope="module", params=["tmpfs", "rlimit"])
def full(request, tmp_path_factory):
    mech = request.param
    if mech == "tmpfs" and not UNSHARE:
        pytest.skip("unshare -rm (user + mount namespaces) is not available: no small tmpfs to fill")
    work = _work(tmp_path_factory, f"full-{mech}")
    if mech == "tmpfs":
        res = _run_child(["full", mech, work], shell_prefix=_tmpfs_prefix(work))
    else:
        res = _run_child(["full", mech, work], preexec=_rlimit_preexec)
    for name, r in res.items():
        assert "scenario_error" not in r, f"{mech}/{name}: {r.get('scenario_error')}\n{r.get('traceback')}"
    return mech, res


def _is_full(e: dict) -> bool:
    return "OSError" in e["is"] and (e["errno"] in (errno.ENOSPC, errno.EFBIG) or "No space left" in e["msg"]
                                     or "File too large" in e["msg"])


@covers("StreamDeduplicator", "StreamDeduplicator.__call__", "StreamDeduplicator.sync", "StreamDeduplicator.close",
        "StreamDeduplicator.__contains__")
def test_full_disk_dedup_wal_keeps_every_synced_hash(full):
    mech, res = full
    r = res["dedup_wal"]
    e = r["failure"]
    assert e is not None and _is_full(e) and _err_names(e, r["wal"]), e
    # a deduplicator whose write failed refuses further work rather than lose it silently
    assert "ValueError" in r["after_failure"]["error"]["is"], r["after_failure"]
    assert r["durable"] > 200, "some syncs succeeded after the disk filled: the failure is mid-run"
    # with space again: every synced hash is there, then exactly a prefix of the admissions, nothing else
    assert r["recovered"] >= r["durable"] and r["prefix_member"] and r["none_after"], r
    assert r["new_ok"]


@covers("StreamDeduplicator.snapshot")
def test_full_disk_snapshot_leaves_the_log(full):
    mech, res = full
    r = res["dedup_snapshot"]
    e = r["snapshot"]["error"]
    assert _is_full(e) and _err_names(e, r["wal"]), e
    assert r["recovered"] == r["durable"] == 3000 and r["all_member"], r
    assert r["files"] == ["s.wal"], f"a partial snapshot was left: {r['files']}"


@covers("StateTracker", "StateTracker.commit", "StateTracker.load")
def test_full_disk_state_tracker(full):
    mech, res = full
    r = res["state"]
    e = r["create"]["error"]
    assert _is_full(e) and _err_names(e, r["new_path"]), e
    # commits write in place: on a full tmpfs the slot still fits; past a file-size limit the commit fails.
    # Either way the loaded state is that of the last successful commit.
    ok2 = "ok" in r["commit2"]
    assert ok2 or _is_full(r["commit2"]["error"]), r["commit2"]
    assert (r["loaded_batch_index"], r["loaded_wal_lsn"]) == ((2, 20) if ok2 else (1, 10)), r


@pytest.mark.parametrize("kind", ["resumable", "distributed"])
def test_full_disk_resume_gives_the_last_commit(full, kind):
    """Iterate and commit after every batch; the disk fills after batch 1.  The failing call
    raises OSError; with space again a new pipeline resumes right after the last successful
    commit and delivers exactly what an uninterrupted run delivers from there."""
    mech, res = full
    r = res[kind]
    e = r["failure"]
    assert e is not None and _is_full(e), e
    last = r["last_ok"]
    assert last is not None and last >= 1, r["last_ok"]
    assert r["resume_extra"] == {"batch": last}
    if kind == "distributed":
        assert r["resumed_from"]["step"] == last + 1
    ref = r["reference"]
    assert r["rest"] == ref[last + 1:], "the resumed run differs from the uninterrupted one"
    assert len(r["rest"]) < len(ref)


covers("ResumablePipeline", "ResumablePipeline.commit", "ResumablePipeline.__iter__", "DistributedPipeline",
       "DistributedPipeline.commit", "DistributedPipeline.__iter__")(test_full_disk_resume_gives_the_last_commit)


@pytest.mark.parametrize("kind", ["resumable", "distributed"])
def test_full_disk_commit_keeps_the_previous_commit(full, kind):
    """commit() when the sidecar does not fit: OSError, and the previous commit stands."""
    mech, res = full
    r = res["commit_sidecar"][kind]
    e = r["commit"]["error"]
    assert _is_full(e), e
    assert r["resume_extra"] == {"batch": 0}, r




@pytest.mark.parametrize("kind", ["resumable", "distributed"])
def test_full_disk_commit_error_names_the_file(full, kind):
    mech, res = full
    r = res["commit_sidecar"][kind]
    e = r["commit"]["error"]
    assert e["filename"] and e["filename"].startswith(r["state_dir"]) or r["state_dir"] in e["msg"], e
    assert not [f for f in r["files"] if f.endswith(".tmp")], r["files"]


covers("ResumablePipeline.commit", "DistributedPipeline.commit")(test_full_disk_commit_error_names_the_file)


@covers("write_jsonl")
def test_full_disk_write_jsonl_keeps_the_old_file(full):
    mech, res = full
    r = res["write_jsonl"]
    e = r["write"]["error"]
    assert _is_full(e) and _err_names(e, r["target"]), e
    assert r["unchanged"] and r["files"] == ["out.jsonl"], r


@covers(CLI)
def test_full_disk_cli_exits_2_and_resumes(full):
    mech, res = full
    r = res["cli"]
    assert r["reference_rc"]["rc"] == 0, r["reference_rc"]
    first = r["first"]
    assert first["rc"] == 2 and "uncaught" not in first, first
    assert re.search(r"No space left|File too large", first["stderr"]) and r["out"] in first["stderr"], first
    assert r["parts_after_failure"], "the run failed before its first part: not mid-way"
    assert r["resumed"]["rc"] == 0, r["resumed"]
    # the resumed output is byte-identical to an uninterrupted run's
    assert r["result"] == r["reference"]


# ---------------------------------------------------------------- read-only folders

def _tree_digest(root: pathlib.Path) -> dict:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


@pytest.fixture(scope="module")
def readonly(tmp_path_factory):
    if ROOT and not UNSHARE:
        pytest.skip("running as root without user namespaces: neither chmod nor a read-only mount is available")
    work = tmp_path_factory.mktemp("readonly")
    (work / "src").mkdir()
    _corpus(work / "src" / "corpus.jsonl")
    ro = work / "ro"
    ro.mkdir()
    docs = ["read-only scenario document %d" % i for i in range(50)]
    with StreamDeduplicator(wal_path=ro / "existing.wal") as d:
        d(["a", "b"])
    with StateTracker(ro / "existing.state") as s:
        s.commit(epoch=1, batch_index=3)
    for cls, sub in ((ResumablePipeline, "rp"), (DistributedPipeline, "dp")):
        p = cls(docs, state_dir=str(ro / sub), stages=STAGES, batch_size=10, prefetch_batches=0)
        it = iter(p)
        next(it)
        p.commit(extra={"batch": 0})
        p.close()
    with gzip.open(ro / "corpus.jsonl.gz", "wt") as f:
        f.writelines(json.dumps({"text": f"line {i}"}) + "\n" for i in range(100))
    rc, err = run_cli(["run", work / "src" / "corpus.jsonl", "-o", ro / "out", "-q", "--no-report",
                       "--stop-after-batches", "1", "--batch-size", "500", "--part-docs", "200"])
    assert rc == 130, err  # a committed, interrupted run to --resume
    before = _tree_digest(ro)
    if ROOT:
        prefix = lambda cmd: ["unshare", "-rm", "sh", "-c",  # noqa: E731
                              f"mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && exec \"$@\"", "sh", *cmd]
        res = _run_child(["readonly", ro, work], shell_prefix=prefix)
    else:
        for p in [ro, *ro.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        try:
            res = _run_child(["readonly", ro, work])
        finally:
            for p in [ro, *ro.rglob("*")]:
                p.chmod(0o755 if p.is_dir() else 0o644)
    return res, ro, before


_RO_ERRNO = (errno.EROFS, errno.EACCES, errno.EPERM)


def _is_ro(e: dict) -> bool:
    return "OSError" in e["is"] and (e["errno"] in _RO_ERRNO or "not writable" in e["msg"]
                                     or "Read-only" in e["msg"] or "Permission denied" in e["msg"])


@pytest.mark.parametrize("name, covered, path", [
    ("dedup_new", "StreamDeduplicator", "new.wal"),
    ("dedup_existing", "StreamDeduplicator", "existing.wal"),
    ("state_new", "StateTracker", "new.state"),
    ("state_existing", "StateTracker", "existing.state"),
    ("write_jsonl", "write_jsonl", "new.jsonl"),
    ("resumable_existing", "ResumablePipeline", "rp"),
    ("resumable_new", "ResumablePipeline", "rp_new"),
    ("distributed_existing", "DistributedPipeline", "dp"),
    ("distributed_new", "DistributedPipeline", "dp_new"),
    ("global_dedup", "GlobalDedup", "global.wal"),
])
def test_read_only_folder_refused_with_its_path(readonly, name, covered, path):
    res, ro, _ = readonly
    obs = res[name]
    assert "error" in obs, f"{name} wrote into a read-only folder: {obs}"
    e, where = obs["error"], str(ro / path)
    assert _is_ro(e) and (where in e["msg"] or (e["filename"] or "").startswith(where)), obs


for _n in ("StreamDeduplicator", "StateTracker", "write_jsonl", "ResumablePipeline", "DistributedPipeline",
           "GlobalDedup"):
    covers(_n)(test_read_only_folder_refused_with_its_path)


@covers(CLI)
@pytest.mark.parametrize("name", ["cli", "cli_resume"])
def test_read_only_cli_output_exits_2(readonly, name):
    res, ro, _ = readonly
    r = res[name]
    assert r["rc"] == 2 and "uncaught" not in r, r
    assert re.search(r"Read-only|Permission denied|not writable", r["stderr"]) and str(ro) in r["stderr"], r


@covers("JsonlSource", "JsonlSource.__iter__")
def test_read_only_gzip_index_folder_still_reads(readonly):
    res, ro, _ = readonly
    assert res["gzip_index"] == {"ok": "100"}, res["gzip_index"]


def test_read_only_folder_is_intact_and_resumable(readonly, tmp_path):
    """Nothing in the read-only folder changed, and its committed states still resume."""
    res, ro, before = readonly
    assert _tree_digest(ro) == before
    copy = tmp_path / "copy"
    shutil.copytree(ro, copy)
    docs = ["read-only scenario document %d" % i for i in range(50)]
    for cls, sub in ((ResumablePipeline, "rp"), (DistributedPipeline, "dp")):
        p = cls(docs, state_dir=str(copy / sub), stages=STAGES, batch_size=10, prefetch_batches=0)
        assert p.resume_extra == {"batch": 0} and [b.index for b in p] == [1, 2, 3, 4]
        p.close()
    with StreamDeduplicator(wal_path=copy / "existing.wal") as d:
        assert d.lsn == 2 and "a" in d
    with StateTracker(copy / "existing.state") as s:
        assert s.load()[0]["batch_index"] == 3


# ---------------------------------------------------------------- the luminamoon command itself

@covers(CLI)
def test_console_command_exits_2_without_traceback(tmp_path):
    exe = shutil.which("luminamoon")
    cmd = [exe] if exe else [sys.executable, "-m", "luminamoon"]
    p = subprocess.run([*cmd, "run", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "input not found" in p.stderr and "missing.jsonl" in p.stderr


# ---------------------------------------------------------------- GlobalDedup (one server for all cases)

@pytest.fixture(scope="module")
def global_dedup():
    g = start_global_dedup()
    yield g
    g.close()


@covers("GlobalDedup", "start_global_dedup")
def test_global_dedup_bad_constructor_arguments(tmp_path):
    with pytest.raises(TypeError, match="wal_path"):
        GlobalDedup(wal_path=5)
    with pytest.raises(TypeError, match="wal_path"):
        start_global_dedup(wal_path=b"/tmp/x")
    with pytest.raises(ValueError, match="max_entries"):
        start_global_dedup(max_entries=-1)
    import multiprocessing as mp
    before = {p.pid for p in mp.active_children()}
    with pytest.raises(FileNotFoundError) as ei:
        start_global_dedup(wal_path=str(tmp_path / "missing" / "g.wal"))
    assert ei.value.filename == str(tmp_path / "missing" / "g.wal")
    assert {p.pid for p in mp.active_children()} <= before, "a failed GlobalDedup left its server running"


@covers("GlobalDedup.check_insert", "GlobalDedup.truncate", "GlobalDedup.lsn", "GlobalDedup.sync",
        "GlobalDedup.stats")
def test_global_dedup_bad_calls(global_dedup):
    g = global_dedup
    lsn = g.lsn
    with pytest.raises(TypeError, match="hashes"):
        g.check_insert(None)
    with pytest.raises(TypeError, match="hashes"):
        g.check_insert("0123456789abcdef")
    with pytest.raises(ValueError, match="N x 16"):
        g.check_insert(b"x" * 15)
    assert g.check_insert(b"") == b""
    with pytest.raises(ValueError, match="lsn"):
        g.truncate(-1)
    with pytest.raises(TypeError, match="lsn"):
        g.truncate("1")
    with pytest.raises(ValueError, match="past the current lsn"):
        g.truncate(lsn + 5)
    assert g.lsn == lsn and g.sync() == lsn and g.stats["lsn"] == lsn  # the refused calls changed nothing


@covers("GlobalDedup.close", "GlobalDedup.check_insert", "GlobalDedup.lsn", "GlobalDedup.sync",
        "GlobalDedup.truncate", "GlobalDedup.stats")
def test_global_dedup_closed():
    g = start_global_dedup()
    assert g.check_insert(b"h" * 16) == b"\x01"
    g.close()
    g.close()
    for call in (lambda: g.check_insert(b"h" * 16), lambda: g.lsn, g.sync, lambda: g.truncate(0), lambda: g.stats):
        with pytest.raises(ValueError, match="closed"):
            call()
