"""Review s35: torch.ops.luminamoon operators, their fake kernels, and StringTensor indexing / Arrow import.

Each test compares against a reference: the CPU kernel's own error for the fake/meta kernels, Python list
indexing / NumPy for indices, pyarrow.compute for null positions.
"""
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch

import luminamoon  # noqa: F401  (registers the operators)
from luminamoon import StringTensor

OPS = torch.ops.luminamoon
ITEMS = ["", "a", "apple", "apple pie with a long tail", "banana", "日本語", "twelve bytes", "thirteen byte"]


def _compiled(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True)


def _error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the exception itself is the result compared
        return e
    return None


# ---------------------------------------------------------------- fake kernels under torch.compile
# Bad input to an op inside torch.compile must raise the eager TypeError/ValueError (the real kernel raises it at
# run time), not a TorchRuntimeError from the fake kernel ("Trying to create tensor with negative dimension -1",
# "tuple index out of range", a torch._check failure).

def _strings(large=False):
    st = StringTensor.from_list(ITEMS)
    return (st.offsets.long() if large else st.offsets), st.data


@pytest.mark.parametrize("op", ["hash64", "pad_bytes", "views_from_offsets", "prefix_match"])
def test_compiled_op_on_empty_offsets_raises_the_eager_error(op):
    off, data = _strings()
    calls = {
        "hash64": lambda o, d: OPS.hash64(o, d, 0),
        "pad_bytes": lambda o, d: OPS.pad_bytes(o, d, 4, 0, -1, -1),
        "views_from_offsets": lambda o, d: OPS.views_from_offsets(o, d),
        "prefix_match": lambda o, d: OPS.prefix_match(o, d, "a"),
    }
    f = calls[op]
    eager = _error_of(lambda: f(off[:0], data))
    assert isinstance(eager, ValueError)
    with pytest.raises(type(eager), match=r"N\+1 >= 1"):
        _compiled(f)(off[:0], data)


def test_compiled_attention_mask_of_0d_lengths_raises_the_eager_error():
    lengths = torch.tensor(3)
    eager = _error_of(lambda: OPS.attention_mask(lengths, 4))
    assert isinstance(eager, ValueError)
    with pytest.raises(type(eager), match="1-D"):
        _compiled(lambda x: OPS.attention_mask(x, 4))(lengths)


def test_compiled_equal_of_different_lengths_raises_the_eager_error():
    off, data = _strings()
    eager = _error_of(lambda: OPS.equal(off, data, off[:3], data))
    assert isinstance(eager, ValueError)
    with pytest.raises(type(eager), match="same number of strings"):
        _compiled(lambda o, d: OPS.equal(o, d, o[:3], d))(off, data)


def test_compiled_equal_of_two_compact_results_still_matches_eager(monkeypatch):
    # the fake's torch._check that ties two data-dependent lengths together is kept
    monkeypatch.setattr(torch._dynamo.config, "capture_dynamic_output_shape_ops", True, raising=False)
    off, data = _strings()
    m1 = torch.tensor([s.startswith("a") for s in ITEMS])
    m2 = torch.tensor([s.startswith("ap") or s == "a" for s in ITEMS])

    def f(o, d, a, b):
        oa, da = OPS.compact(o, d, a)
        ob, db = OPS.compact(o, d, b)
        return OPS.equal(oa, da, ob, db)

    want = [x == y for x, y in zip([s for s in ITEMS if s.startswith("a")],
                                    [s for s in ITEMS if s.startswith("ap") or s == "a"])]
    assert f(off, data, m1, m2).tolist() == want
    assert _compiled(f)(off, data, m1, m2).tolist() == want


# ---------------------------------------------------------------- fake kernels on plain meta tensors
# No real kernel runs after the fake on meta tensors: the fake must raise what the CPU kernel raises (it returned
# a made-up shape: [1, k] offsets gave a [0] result; empty offsets / negative max_len a RuntimeError).

def _meta_cases():
    off, data = _strings()
    views = OPS.views_from_offsets(off, data)
    n = len(ITEMS)
    return {
        "float offsets": lambda dev: OPS.hash64(off.float().to(dev), data.to(dev), 0),
        "int16 offsets": lambda dev: OPS.prefix_match(off.short().to(dev), data.to(dev), "a"),
        "2-D offsets": lambda dev: OPS.hash64(off.view(1, -1).to(dev), data.to(dev), 0),
        "empty offsets": lambda dev: OPS.equal_scalar(off[:0].to(dev), data.to(dev), "a"),
        "2-D data": lambda dev: OPS.hash64(off.to(dev), data.view(1, -1).to(dev), 0),
        "int32 data": lambda dev: OPS.views_from_offsets(off.to(dev), data.int().to(dev)),
        "negative max_len": lambda dev: OPS.pad_bytes(off.to(dev), data.to(dev), -1, 0, -1, -1),
        "0-d lengths": lambda dev: OPS.attention_mask(torch.tensor(2).to(dev), 3),
        "int32 lengths": lambda dev: OPS.attention_mask(torch.tensor([2], dtype=torch.int32).to(dev), 3),
        "equal lengths": lambda dev: OPS.equal(off.to(dev), data.to(dev), off[:3].to(dev), data.to(dev)),
        "equal dtypes": lambda dev: OPS.equal(off.to(dev), data.to(dev), off.long().to(dev), data.to(dev)),
        "views [N, 8]": lambda dev: OPS.views_hash64(views.view(-1, 8).to(dev), [data.to(dev)], 0),
        "views int8": lambda dev: OPS.views_prefix_match(views.to(torch.int8).to(dev), [data.to(dev)], "a"),
        "views_equal lengths": lambda dev: OPS.views_equal(views.to(dev), [data.to(dev)], views[:2].to(dev),
                                                           [data.to(dev)]),
        "buffer 2-D": lambda dev: OPS.views_equal_scalar(views.to(dev), [data.view(1, -1).to(dev)], "a"),
        "compact mask length": lambda dev: OPS.compact(off.to(dev), data.to(dev),
                                                       torch.ones(n - 1, dtype=torch.bool).to(dev)),
        "views_compact mask dtype": lambda dev: OPS.views_compact(views.to(dev), torch.ones(n, dtype=torch.uint8).to(dev)),
        "gather int32 index": lambda dev: OPS.gather(off.to(dev), data.to(dev), torch.tensor([0], dtype=torch.int32).to(dev)),
    }


@pytest.mark.parametrize("case", sorted(_meta_cases()))
def test_meta_tensors_raise_what_the_cpu_kernel_raises(case):
    call = _meta_cases()[case]
    cpu = _error_of(lambda: call("cpu"))
    assert isinstance(cpu, (TypeError, ValueError)), f"the CPU kernel accepted {case}"
    meta = _error_of(lambda: call("meta"))
    assert type(meta) is type(cpu), f"{case}: meta gave {meta!r}, the CPU kernel {cpu!r}"


def test_meta_tensors_of_valid_input_still_give_the_cpu_shapes():
    off, data = _strings()
    views = OPS.views_from_offsets(off, data)
    m = lambda t: t.to("meta")  # noqa: E731
    for cpu, meta in [
        (OPS.hash64(off, data, 1), OPS.hash64(m(off), m(data), 1)),
        (OPS.equal(off, data, off, data), OPS.equal(m(off), m(data), m(off), m(data))),
        (OPS.views_from_offsets(off, data), OPS.views_from_offsets(m(off), m(data))),
        (OPS.views_hash64(views, [data], 1), OPS.views_hash64(m(views), [m(data)], 1)),
        (OPS.attention_mask(torch.tensor([1, 5]), 0), OPS.attention_mask(m(torch.tensor([1, 5])), 0)),
        *zip(OPS.pad_bytes(off, data, 5, 0, 1, 2), OPS.pad_bytes(m(off), m(data), 5, 0, 1, 2)),
    ]:
        assert meta.device.type == "meta" and meta.shape == cpu.shape and meta.dtype == cpu.dtype


def test_opcheck_on_edge_inputs():
    # empty, all-empty strings, offsets that do not start at 0, int64 offsets
    for items in ([], ["", ""], ["x" * 20, "", "yy"]):
        st = StringTensor.from_list(items)
        for off, data in ((st.offsets, st.data), (st.offsets.long() + 2, torch.cat([torch.tensor([7, 8], dtype=torch.uint8), st.data]))):
            n = off.numel() - 1
            views = OPS.views_from_offsets(off, data)
            mask = torch.arange(n) % 2 == 0
            for op, args in [
                (OPS.prefix_match.default, (off, data, "x" * 14)),
                (OPS.hash64.default, (off, data, -1)),
                (OPS.pad_bytes.default, (off, data, 3, -5, 1, 2)),
                (OPS.gather.default, (off, data, torch.arange(n - 1, -1, -1))),
                (OPS.compact.default, (off, data, mask)),
                (OPS.views_from_offsets.default, (off, data)),
                (OPS.offsets_from_views.default, (views, [data], off.dtype == torch.int64)),
                (OPS.views_hash64.default, (views, [data], 3)),
                (OPS.views_compact.default, (views, mask)),
            ]:
                torch.library.opcheck(op, args)


# ---------------------------------------------------------------- unsigned index arrays

def _layouts():
    st = StringTensor.from_list(ITEMS)
    return {"both": st, "offsets": StringTensor.from_buffers(st.offsets, st.data),
            "views": StringTensor(views=st.views, buffers=st.buffers, utf8=True)}


@pytest.mark.parametrize("layout", ["both", "offsets", "views"])
@pytest.mark.parametrize("dtype", [np.uint16, np.uint32, np.uint64])
def test_numpy_unsigned_index_arrays_select_like_numpy(layout, dtype):
    st = _layouts()[layout]
    idx = np.array([7, 0, 3, 3], dtype=dtype)
    want = np.array(ITEMS, dtype=object)[idx].tolist()  # NumPy takes unsigned index arrays
    assert st[idx].tolist() == want
    assert st.take(idx).tolist() == want
    assert st[torch.from_numpy(idx)].tolist() == want


def test_uint64_index_past_int64_is_out_of_range_not_negative():
    st = _layouts()["views"]
    with pytest.raises(IndexError, match="out of range"):
        st[np.array([2**64 - 1], dtype=np.uint64)]  # not read as -1 (the last string)
    with pytest.raises(IndexError, match="out of range"):
        st[[2**63]]  # np.asarray reads this list as uint64
    with pytest.raises(IndexError, match="out of range"):
        st.take(np.array([len(ITEMS)], dtype=np.uint32))


# ---------------------------------------------------------------- from_arrow: nulls of dictionary / chunked arrays

def test_dictionary_with_encoded_null_names_the_elements_position():
    arr = pa.array(["a", "b", "a", None]).dictionary_encode(null_encoding="encode")
    assert arr.null_count == 0  # the null is an entry of the dictionary
    first = pc.index(pc.is_null(arr), True).as_py()
    count = pc.sum(pc.is_null(arr).cast(pa.int64())).as_py()
    with pytest.raises(ValueError, match=rf"holds {count} nulls \(the first at {first}\)"):
        StringTensor.from_arrow(arr)


@pytest.mark.parametrize("typ", [pa.string(), pa.large_string(), pa.string_view()])
def test_dictionary_whose_null_entry_is_unused_imports(typ):
    full = pa.array(["a", None, "a long string of more than 12 bytes", "b"])
    enc = pa.DictionaryArray.from_arrays(pa.array([2, 0, 2, 3, 1], type=pa.int32()), full.cast(typ))
    part = enc.slice(0, 4)  # no element left selects the null entry
    assert part.null_count == 0 and None not in part.to_pylist()
    st = StringTensor.from_arrow(part)
    assert st.tolist() == part.to_pylist()
    assert st.hash64(5).tolist() == StringTensor.from_list(part.to_pylist()).hash64(5).tolist()
    with pytest.raises(ValueError, match=r"holds 1 nulls \(the first at 4\)"):
        StringTensor.from_arrow(enc)


def test_chunked_array_null_position_is_the_position_in_the_whole_array():
    ch = pa.chunked_array([pa.array(["a", "b"]), pa.array([], type=pa.string()), pa.array(["c", None, None])])
    first = pc.index(pc.is_null(ch), True).as_py()
    with pytest.raises(ValueError, match=rf"holds 2 nulls \(the first at {first}\)"):
        StringTensor.from_arrow(ch)


# ---------------------------------------------------------------- torch.vmap over the data-dependent ops

def test_vmap_over_compact_and_gather_matches_a_loop_or_refuses_clearly():
    off, data = _strings()
    n = len(ITEMS)
    # two strings and 6 bytes kept by each ("a" + "apple", "" + "banana"): equal sizes, stacked
    same = torch.stack([torch.tensor([i in (1, 2) for i in range(n)]), torch.tensor([i in (0, 4) for i in range(n)])])
    got_off, got_data = torch.vmap(lambda m: OPS.compact(off, data, m))(same)
    for b in range(2):
        want = [s for s, k in zip(ITEMS, same[b].tolist()) if k]
        assert StringTensor.from_buffers(got_off[b], got_data[b]).tolist() == want
    idx = torch.tensor([[0, 2], [2, 0]])  # same strings, other order: equal sizes
    go, gd = torch.vmap(lambda i: OPS.gather(off, data, i))(idx)
    for b in range(2):
        assert StringTensor.from_buffers(go[b], gd[b]).tolist() == [ITEMS[i] for i in idx[b].tolist()]
    views = OPS.views_from_offsets(off, data)
    differ = torch.stack([torch.arange(n) < 2, torch.arange(n) < 5])
    for call in (lambda m: OPS.compact(off, data, m), lambda m: OPS.views_compact(views, m)):
        with pytest.raises(ValueError, match="depends on the data"):  # was torch.stack's "expects each tensor ..."
            torch.vmap(call)(differ)
