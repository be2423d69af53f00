"""Big arrays of luminamoon._C on pooled, huge-page mappings (torch_ops/bind_array.h: map_take).

from_list's offsets and views (from 256 KiB) and payload (from 8 MB), the views built on first use and
the outputs of the StringTensor fast paths (starts_with / fast_eq / hash64, from 256 KiB) are
anonymous mappings: 2 MiB-aligned and advised onto transparent huge pages from 2 MiB, and kept in a
small pool when their tensor dies, so the next array of about their size is written without page
faults.  These tests check the mappings (/proc/self/smaps), that a loop of calls faults no pages even
where glibc would map every output afresh, and that reuse never lets one tensor see another's bytes.
"""
from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch
import xxhash

from luminamoon import StringTensor, _C

_LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not _LINUX, reason="anonymous mappings and /proc/self/smaps are Linux's")

_HUGE = 2 << 20


def _vma(addr: int) -> dict:
    """The /proc/self/smaps entry of the mapping holding addr: start, end and its fields."""
    cur = found = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and len(head) >= 5 and all(c in "0123456789abcdef-" for c in head[0]):
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                cur = {"start": lo, "end": hi} if lo <= addr < hi else None
                if cur is not None:
                    found = cur
            elif cur is not None and ":" in head[0]:
                cur[head[0].rstrip(":")] = " ".join(head[1:])
    assert found is not None, f"no mapping holds {addr:#x}"
    return found


def _words(n: int, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 16, size=n)
    alpha = np.array(list("abcdefghijklmnopqrstuvwxyzé"))
    return ["".join(alpha[rng.integers(0, len(alpha), size=k)]) for k in lens]


def test_from_list_views_and_payload_on_aligned_huge_page_mappings():
    words = _words(600_000)  # views 9.6 MB, payload ~5 MB (under 8 MB: malloc)
    st = StringTensor.from_list(words)
    views = st._vb[0]
    assert views.shape == (len(words), 16)
    v = _vma(views.data_ptr())
    assert views.data_ptr() % _HUGE == 0, hex(views.data_ptr())
    assert "hg" in v["VmFlags"].split(), v["VmFlags"]  # MADV_HUGEPAGE
    assert v["end"] - v["start"] >= views.numel()
    off = st.offsets  # int32, 2.4 MB: a pooled mapping on huge pages too
    assert off.data_ptr() % _HUGE == 0 and "hg" in _vma(off.data_ptr())["VmFlags"].split()
    # a payload of 8 MB or more: mapped the same way
    big = StringTensor.from_list([w * 4 for w in words[:400_000]])
    d = big.data
    assert d.numel() >= 8 << 20
    assert "hg" in _vma(d.data_ptr())["VmFlags"].split()
    # the answers do not depend on where the arrays live
    assert st.tolist() == words
    assert st.starts_with("ab").tolist() == [w.startswith("ab") for w in words]
    k = 2000
    assert [h & (2**64 - 1) for h in st.hash64()[:k].tolist()] == [xxhash.xxh3_64_intdigest(w.encode())
                                                                     for w in words[:k]]


def test_materialized_views_are_pooled_and_equal_the_operators():
    words = _words(300_000, seed=3)
    src = StringTensor.from_list(words)
    st = StringTensor.from_buffers(src.offsets, src.data)  # offsets layout only: views built on first use
    assert not st.has_views_layout
    mask = st.starts_with("b")
    assert st.has_views_layout
    views = st._vb[0]
    assert torch.equal(views, torch.ops.luminamoon.views_from_offsets(src.offsets, src.data))
    assert views.data_ptr() % _HUGE == 0 and "hg" in _vma(views.data_ptr())["VmFlags"].split()
    assert mask.tolist() == [w.startswith("b") for w in words]
    # bad offsets: _C declines and the operator raises its usual error
    with pytest.raises(ValueError):
        StringTensor.from_buffers(torch.tensor([0, 5, 3], dtype=torch.int64),
                                  torch.zeros(5, dtype=torch.uint8)).starts_with("a")


_FAULTS_CHILD = r"""
import resource, sys, torch
torch.set_num_threads(1)
from luminamoon import StringTensor
words = ["w%d" % (i % 50000) + "x" * (i % 11) for i in range(1_000_000)]
st = StringTensor.from_list(words)
calls = {"hash64": st.hash64, "starts_with": lambda: st.starts_with("w1"), "fast_eq": lambda: st.fast_eq("w7x")}
out = {}
for name, fn in calls.items():
    fn(); fn()
    a = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        r = fn()
        del r
    out[name] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - a
print(out)
"""


def test_a_loop_of_calls_faults_no_pages_where_malloc_maps_every_output():
    # MALLOC_MMAP_THRESHOLD_ fixes glibc's threshold at 128 KiB: a malloc'd 8 MB (hash64) or 1 MB
    # output would be a fresh mapping every call (thousands of page faults in 10 calls)
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    out = subprocess.run([sys.executable, "-c", _FAULTS_CHILD], env=env, capture_output=True, text=True,
                         check=True, timeout=300)
    faults = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our child's dict literal)
    # 10 calls: 8 MB of hash64 output is 2,048 pages a call on 4 KiB pages; the pool reuses one mapping
    assert faults["hash64"] < 50, faults
    assert faults["starts_with"] < 50, faults
    assert faults["fast_eq"] < 50, faults


def test_reused_mappings_never_alias_a_live_tensor():
    words = _words(200_000, seed=11)
    st = StringTensor.from_list(words)
    want = {s: st.hash64(s).clone() for s in (0, 1, 2)}  # clones: malloc'd copies to compare with
    a = st.hash64(0)
    b = st.hash64(1)
    assert a.data_ptr() != b.data_ptr()
    pa = a.data_ptr()
    del a  # its mapping goes back to the pool ...
    c = st.hash64(2)  # ... and is the one reused here
    assert c.data_ptr() == pa
    assert torch.equal(b, want[1]) and torch.equal(c, want[2])
    d = st.hash64(0)
    assert torch.equal(b, want[1]) and torch.equal(c, want[2]) and torch.equal(d, want[0])
    # numpy views of a pooled output keep it alive after the tensor is gone
    arr = d.numpy()
    del d
    e = st.hash64(1)
    assert np.array_equal(arr, want[0].numpy()) and torch.equal(e, want[1])


def test_outputs_made_and_released_on_many_threads():
    words = _words(100_000, seed=5)
    st = StringTensor.from_list(words)
    want = {s: st.hash64(s).clone() for s in range(4)}
    want_sw = st.starts_with("c").clone()
    errors = []
    keep = []
    lock = threading.Lock()

    def work(t):
        try:
            for i in range(30):
                s = (t + i) % 4
                h = st.hash64(s)
                m = st.starts_with("c")
                if not (torch.equal(h, want[s]) and torch.equal(m, want_sw)):
                    errors.append((t, i))
                with lock:  # some outputs die on another thread than the one that made them
                    keep.append(h)
                    if len(keep) > 6:
                        keep.pop(0)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    ths = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    assert not errors, errors[:5]


_HOT_CHILD = r"""
import re, torch
from luminamoon import StringTensor
n = 10 * (1 << 20) // 8  # hash64 outputs of 10 MiB each
st = StringTensor.from_list(["x%d" % (i % 1000) for i in range(n)])
outs = [st.hash64(s) for s in range(8)]
addrs = [o.data_ptr() for o in outs]
while outs:
    outs.pop(0)  # released in order: 0 first
def lazy(addr):
    cur = False
    for line in open("/proc/self/smaps"):
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) ", line)
        if m:
            cur = int(m.group(1), 16) <= addr < int(m.group(2), 16)
        elif cur and line.startswith("LazyFree:"):
            return int(line.split()[1])
    raise SystemExit("no mapping at %x" % addr)
print([lazy(a) for a in addrs])
"""


def test_the_most_recently_released_mappings_stay_hot():
    # 8 released outputs of 10 MiB: 80 MiB, past the 64 MiB kept hot; the oldest are MADV_FREE'd
    # (LazyFree in smaps), the newest -- what a loop of calls reuses next -- are not
    out = subprocess.run([sys.executable, "-c", _HOT_CHILD], capture_output=True, text=True, check=True,
                         timeout=300)
    lazy = eval(out.stdout.strip().splitlines()[-1])  # noqa: S307 (our child's list literal)
    assert len(lazy) == 8
    assert lazy[0] > 0 and lazy[1] > 0, lazy
    assert all(k == 0 for k in lazy[2:]), lazy


def _fork_child(st, wb, q):
    # no torch op here: torch's own intra-op pool is not fork-safe; ours (and the mapping pool) are
    ok = all(st.hash64().numpy().tobytes() == wb for _ in range(5)) and bool(st.starts_with("w1").numpy().any())
    q.put(ok)


def test_forked_children_use_the_pool_while_a_parent_thread_hammers_it():
    # a thread takes and releases pooled mappings (and the core's thread pool) while the process forks, so a
    # child may start with the pool's lock held: the pool is only try-locked, the child must not hang
    import multiprocessing as mp

    st = StringTensor.from_list(["w%d" % i for i in range(300_000)])
    wb = st.hash64().numpy().tobytes()
    stop = threading.Event()

    def hammer():
        while not stop.is_set():
            x = st.hash64()
            del x

    t = threading.Thread(target=hammer)
    t.start()
    try:
        ctx = mp.get_context("fork")
        q = ctx.Queue()
        ps = [ctx.Process(target=_fork_child, args=(st, wb, q)) for _ in range(4)]
        for p in ps:
            p.start()
        got = [q.get(timeout=120) for _ in ps]
        for p in ps:
            p.join(60)
    finally:
        stop.set()
        t.join()
    assert got == [True] * 4 and [p.exitcode for p in ps] == [0] * 4
    assert st.hash64().numpy().tobytes() == wb


_GROW_CHILD = r"""
import ctypes, json, torch
torch.set_num_threads(1)
from luminamoon import StringTensor
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PROT_RW, PRIV_ANON, NOREPLACE, HUGE = 3, 0x22, 0x100000, 2 << 20

def gaps_above(lo, below):
    spans = sorted(tuple(int(x, 16) for x in l.split()[0].split("-")) for l in open("/proc/self/maps"))
    return [(a_hi, b_lo - a_hi) for (_, a_hi), (b_lo, _) in zip(spans, spans[1:])
            if a_hi >= lo and b_lo - a_hi >= 4096 and b_lo < below]

stack = [int(l.split("-")[0], 16) for l in open("/proc/self/maps") if "[stack]" in l][0]
small = StringTensor.from_list(["a"] * 40000)
size = (40000 * 8 + 4095) // 4096 * 4096  # hash64's output: over 256 KiB, a pooled mapping (4 KiB pages)
span = 64 << 20
r = libc.mmap(None, span, PROT_RW, PRIV_ANON, -1, 0)
libc.munmap(r, span)
# [r, r + 4096) a guard, [r + 4096, r + 4096 + size) free for the output, the rest of the span held, and
# every gap above it plugged: the output's mmap (the kernel takes the highest gap) lands at r + 4096
hold = r + 4096 + size
assert libc.mmap(ctypes.c_void_p(hold), r + span - hold, PROT_RW, PRIV_ANON | NOREPLACE, -1, 0) == hold
assert libc.mmap(ctypes.c_void_p(r), 4096, 0, PRIV_ANON | NOREPLACE, -1, 0) == r
plugs = [(p, n) for p, n in gaps_above(r + span, stack)
         if libc.mmap(ctypes.c_void_p(p), n, 0, PRIV_ANON | NOREPLACE, -1, 0) == p]
h = small.hash64()
at = h.data_ptr()
for p, n in plugs:
    libc.munmap(p, n)
libc.munmap(hold, r + span - hold)  # room above the output: an mremap would grow it in place
del h  # its mapping goes to the pool, the only one there
big = StringTensor.from_list(["y" * 2000] * 10000)  # a 20 MB payload, grown past 8 MB on a mapping
print(json.dumps({"placed": at == r + 4096 and at % HUGE != 0, "payload": big.data.data_ptr(), "reused": big.data.data_ptr() == at}))
"""


def test_a_growing_payload_never_takes_an_unaligned_pooled_mapping():
    """from_list's payload grows on a mapping from 8 MB on, and took the pool's largest mapping however
    small: a 316 KiB output, 4 KiB-aligned, grown in place by mremap became a 20 MB payload off the 2 MiB
    boundary (its huge pages lost at both ends), which the pool then handed to later arrays.  A child
    process places such an output 4 KiB past a 2 MiB boundary with free room above it (MAP_FIXED_NOREPLACE
    around it), releases it to the otherwise empty pool and builds a 20 MB payload."""
    out = subprocess.run([sys.executable, "-c", _GROW_CHILD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = __import__("json").loads(out.stdout.strip().splitlines()[-1])
    assert got["placed"], "the child could not place the small output where it meant to"
    assert got["payload"] % _HUGE == 0, hex(got["payload"])
    assert not got["reused"]
