"""Run every torch.ops.luminamoon operator, StringTensor and one stage against plain-Python references.

Run by tests/python/test_wheel.py and scripts/check_wheel.sh with the Python of a fresh venv into which
the wheel was installed (not a test module: pytest does not collect it). Exit 0 and a last line
"wheel smoke: N operators ok" on success; an AssertionError names the first operator that disagrees.
An operator registered by the extension but missing here fails too, so a new operator is covered.
"""
import sys

import torch

import luminamoon
from luminamoon import StringTensor

ITEMS = ["", "a", "apple", "apple pie with a long tail", "banana", "日本語", "applesauce is twelve+", "é" * 9]
OPS = torch.ops.luminamoon


def tolist(off, data):
    o = off.tolist()
    b = bytes(data.tolist())
    return [b[o[i]:o[i + 1]].decode() for i in range(len(o) - 1)]


def main():
    print("luminamoon", luminamoon.__file__, "torch", torch.__version__)
    st = StringTensor.from_list(ITEMS)
    assert st.tolist() == ITEMS
    off, data = st.offsets, st.data
    assert tolist(off, data) == ITEMS
    # independent offsets/bytes from Python
    enc = [s.encode() for s in ITEMS]
    ref_off = [0]
    for b in enc:
        ref_off.append(ref_off[-1] + len(b))
    assert off.tolist() == ref_off and bytes(data.tolist()) == b"".join(enc)
    views = OPS.views_from_offsets(off, data)
    rev = list(reversed(ITEMS))
    o2, d2 = StringTensor.from_list(rev).to_gpu_buffers()
    views2 = OPS.views_from_offsets(o2, d2)
    mask = torch.tensor([s.startswith("a") for s in ITEMS])
    checks = {
        "prefix_match": lambda: OPS.prefix_match(off, data, "app").tolist() == [s.startswith("app") for s in ITEMS],
        "equal": lambda: OPS.equal(off, data, o2, d2).tolist() == [a == b for a, b in zip(ITEMS, rev)],
        "equal_scalar": lambda: OPS.equal_scalar(off, data, "banana").tolist() == [s == "banana" for s in ITEMS],
        "hash64": lambda: _hash64(OPS.hash64(off, data, 7), 7),
        "pad_bytes": lambda: _pad(*OPS.pad_bytes(off, data, 6, -1)),
        "attention_mask": lambda: OPS.attention_mask(torch.tensor([0, 3, 9]), 4).tolist()
        == [[j < min(n, 4) for j in range(4)] for n in (0, 3, 9)],
        "gather": lambda: tolist(*OPS.gather(off, data, torch.tensor([7, 2, 2]))) == [ITEMS[7], ITEMS[2], ITEMS[2]],
        "compact": lambda: tolist(*OPS.compact(off, data, mask)) == [s for s in ITEMS if s.startswith("a")],
        "views_from_offsets": lambda: tuple(views.shape) == (len(ITEMS), 16) and views.dtype == torch.uint8,
        "offsets_from_views": lambda: tolist(*OPS.offsets_from_views(views, [data], True)) == ITEMS,
        "views_prefix_match": lambda: OPS.views_prefix_match(views, [data], "app").tolist()
        == [s.startswith("app") for s in ITEMS],
        "views_equal_scalar": lambda: OPS.views_equal_scalar(views, [data], "apple").tolist()
        == [s == "apple" for s in ITEMS],
        "views_equal": lambda: OPS.views_equal(views, [data], views2, [d2]).tolist()
        == [a == b for a, b in zip(ITEMS, rev)],
        "views_hash64": lambda: _hash64(OPS.views_hash64(views, [data], 3), 3),
        "views_compact": lambda: tolist(*OPS.offsets_from_views(OPS.views_compact(views, mask), [data], False))
        == [s for s in ITEMS if s.startswith("a")],
        "minhash": _minhash,
    }
    registered = sorted(n.split("::", 1)[1].split(".")[0] for n in torch._C._dispatch_get_all_op_names()
                        if n.startswith("luminamoon::"))
    missing = sorted(set(registered) - set(checks))
    assert not missing, f"operators with no smoke check here: {missing}"
    for name, check in checks.items():
        assert name in registered, f"operator {name} is not registered"
        assert check(), f"operator {name} disagrees with its Python reference"
    # the operators come from the installed luminamoon/_ops*.so (stable ABI), and bad input raises the
    # contract's Python types through it (pybind11's typed exceptions: torch_ops/stable/stable_common.h)
    import os
    assert os.path.dirname(luminamoon.ops.OPS_LIBRARY) == os.path.dirname(luminamoon.__file__)
    for exc, call in ((TypeError, lambda: OPS.hash64(off.float(), data, 0)),
                      (ValueError, lambda: OPS.prefix_match(torch.tensor([0, 9], dtype=torch.int32), data[:3], "a")),
                      (IndexError, lambda: OPS.gather(off, data, torch.tensor([len(ITEMS)])))):
        try:
            call()
            raise AssertionError(f"{exc.__name__}: no error")
        except exc as e:
            assert str(e).startswith("luminamoon."), e
    # one stage end to end, through utf8proc (linked statically into the wheel): NFKC against Python's
    import unicodedata
    text = "\ufb01le \u2460 \u212b"
    got = luminamoon.TextCleaner(normalize="NFKC")([text]).texts.tolist()
    assert got == [unicodedata.normalize("NFKC", text)], f"TextCleaner NFKC: {got}"
    print(f"wheel smoke: {len(checks)} operators ok")


def _hash64(h, seed):
    import xxhash  # datatrove's pin: xxhash>=3,<4
    want = [xxhash.xxh3_64_intdigest(s.encode(), seed=seed) for s in ITEMS]
    return [x & (2**64 - 1) for x in h.tolist()] == want


def _pad(tok, lengths):
    for s, row, n in zip(ITEMS, tok.tolist(), lengths.tolist()):
        b = list(s.encode())[:6]
        if n != len(b) or row != b + [-1] * (6 - len(b)):
            return False
    return True


def _minhash():
    # out[d, j] = min over the document's shingles h of ((h * a[j] + b[j]) mod 2^64) mod (2^61 - 1),
    # -1 for a document without shingles (torch_ops/minhash.cpp), computed here in Python.
    hashes = torch.tensor([5, 17, 3, 2**40 + 9, 11], dtype=torch.int64)
    doc_off = torch.tensor([0, 2, 2, 5], dtype=torch.int64)
    a = torch.tensor([3, 7], dtype=torch.int64)
    b = torch.tensor([1, 4], dtype=torch.int64)
    sig = OPS.minhash(hashes, doc_off, a, b, 64)
    p = (1 << 61) - 1
    return tuple(sig.shape) == (3, 2) and sig.dtype == torch.int64 and _minhash_ref(sig, p)


def _minhash_ref(sig, p):
    hs = [5, 17, 3, 2**40 + 9, 11]
    docs = [hs[0:2], [], hs[2:5]]
    got = sig.tolist()
    for d, row in zip(docs, got):
        want = [min((((a * h + b) % 2**64) % p) for h in d) if d else -1 for a, b in ((3, 1), (7, 4))]
        if row != want:
            return False
    return True


if __name__ == "__main__":
    main()
    sys.exit(0)
