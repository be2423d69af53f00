"""Review of the quality n-gram sets (dc6d257): slot arrays of 4 MiB and more are a mapping of
their own (2 MiB aligned, MADV_HUGEPAGE / MADV_POPULATE_WRITE).  Documents whose n-gram sets
grow past that size and then shrink, alternating with small ones, the same filter object reused
across many batches, on 1 and 2 threads: the Gopher repetition decisions must be those of
datatrove's own counting functions (gopher_repetition_filter.find_duplicates /
find_top_duplicate / find_all_duplicate, computed here in Python on the documents' words: the
synthetic documents are single-space separated lowercase words, so the words are
``text.split()`` and spaCy's tokenizer is not needed); memory must not grow over 50 batches;
and a mapping that cannot be made (RLIMIT_AS in a child process) must give an error or the
same decision, never a crash."""
import json
import os
import random
import subprocess
import sys

import pytest

from luminamoon.stages import QualityFilter

from datatrove.pipeline.filters import gopher_repetition_filter as G


def _reference_keep(text: str) -> bool:
    """datatrove GopherRepetitionFilter.filter (defaults) with words = text.split()."""
    f = G.GopherRepetitionFilter()
    if not text:
        return False
    paragraphs = f.paragraph_exp.split(text.strip())
    d, c = G.find_duplicates(paragraphs)
    if d / len(paragraphs) > f.dup_para_frac or c / len(text) > f.dup_para_char_frac:
        return False
    lines = f._line_splitter.split(text)
    d, c = G.find_duplicates(lines)
    if d / len(lines) > f.dup_line_frac or c / len(text) > f.dup_line_char_frac:
        return False
    words = text.split()
    for n, frac in f.top_n_grams:
        grams = G.get_n_grams(words, n)
        if grams and G.find_top_duplicate(grams) / len(text) > frac:
            return False
    for n, frac in f.dup_n_grams:
        if G.find_all_duplicate(words, n) / len(text) > frac:
            return False
    return True


def _word(r):
    return "".join(chr(97 + r.randrange(26)) for _ in range(r.randint(3, 9)))


def _doc(seed: int, unique: int, dup_frac: float) -> str:
    """`unique` random words, then repeats of a 600-word piece of them making about `dup_frac`
    of the words (n-gram sets of ~unique elements: >= 131072 distinct n-grams need >= 4 MiB)."""
    r = random.Random(seed)
    words = [_word(r) for _ in range(unique)]
    piece = words[:600]
    extra = int(unique * dup_frac)
    while extra > 0:
        words += piece[:extra]
        extra -= len(piece)
    return " ".join(words)


def _docs():
    big = [_doc(1, 200_000, 0.0), _doc(2, 150_000, 0.09), _doc(3, 180_000, 0.14), _doc(4, 260_000, 0.12),
           _doc(5, 140_000, 0.2)]
    small = [_doc(10 + i, n, f) for i, (n, f) in enumerate([(50, 0.0), (300, 0.3), (2000, 0.11), (40, 0.5),
                                                           (5000, 0.08), (12000, 0.13)])]
    return big, small


@pytest.fixture(scope="module")
def docs():
    big, small = _docs()
    keep = {d: _reference_keep(d) for d in big + small}
    assert any(keep[d] for d in big) and not all(keep[d] for d in big)  # both decisions among the big ones
    assert any(keep[d] for d in small) and not all(keep[d] for d in small)
    return big, small, keep


@pytest.mark.parametrize("threads", [1, 2])
def test_sets_grow_past_the_mapping_size_shrink_and_alternate(docs, threads):
    big, small, keep = docs
    q = QualityFilter(rules=["gopher_repetition"], num_threads=threads)
    rng = random.Random(threads)
    batches = [big, small, [big[0], small[0], big[1], small[1]], small[::-1], big[::-1],
               [small[2]] * 3 + [big[2]] + [small[3]] * 3 + [big[3]]]
    for _ in range(4):
        b = big + small
        rng.shuffle(b)
        batches.append(b[:rng.randint(1, len(b))])
    for i, b in enumerate(batches):
        got = q(b).kept.tolist()
        assert got == [keep[d] for d in b], f"batch {i} on {threads} threads"


_CHILD = r"""
import os, resource, sys, random
import torch
from luminamoon.stages import QualityFilter
sys.path.insert(0, sys.argv[1])
from test_review_quality_sets import _doc
docs = [_doc(1, 200_000, 0.0), _doc(3, 180_000, 0.14)]
q = QualityFilter(rules=["gopher_repetition"], num_threads=1)
q([_doc(10, 50, 0.0)])
def vm():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
lim = vm() + int(sys.argv[2]) * (1 << 20)
resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
try:
    print("RESULT", q(docs).kept.tolist(), flush=True)
except MemoryError as e:
    print("ERROR MemoryError", e, flush=True)
except (RuntimeError, ValueError, OSError) as e:
    print("ERROR", type(e).__name__, e, flush=True)
"""


@pytest.mark.parametrize("headroom_mb", [4, 30, 64])
def test_mapping_failure_under_rlimit_as_is_an_error_not_a_crash(docs, headroom_mb):
    big, _, keep = docs
    p = subprocess.run([sys.executable, "-c", _CHILD, os.path.dirname(__file__), str(headroom_mb)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"child died ({p.returncode}): {p.stderr[-2000:]}"
    line = [x for x in p.stdout.splitlines() if x.startswith(("RESULT", "ERROR"))]
    assert len(line) == 1, p.stdout + p.stderr[-2000:]
    if line[0].startswith("RESULT"):
        assert line[0] == f"RESULT {[keep[big[0]], keep[big[2]]]}"
    else:
        assert "MemoryError" in line[0] or "memory" in line[0].lower(), line[0]


# An LD_PRELOAD library that makes the set's mapping fail (mode 1: anonymous mmap of >= 6 MiB ->
# ENOMEM; glibc's malloc maps its large blocks through its internal __mmap, not this symbol) or
# its madvise hints fail (mode 2: MADV_HUGEPAGE / MADV_POPULATE_WRITE -> EINVAL: the set is then
# cleared by a write), and counts what it failed.
_FAIL_MMAP_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
static int mode = -1; static long failed_mmap, failed_madv;
static void init(void) { if (mode < 0) { const char *e = getenv("REVIEW_FAIL"); mode = e ? atoi(e) : 0; } }
void *mmap(void *a, size_t len, int prot, int flags, int fd, off_t off) {
  static void *(*real)(void *, size_t, int, int, int, off_t);
  if (!real) real = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
  init();
  if ((mode & 1) && fd == -1 && (flags & MAP_ANONYMOUS) && len >= ((size_t)6 << 20)) { failed_mmap++; errno = ENOMEM; return MAP_FAILED; }
  return real(a, len, prot, flags, fd, off);
}
int madvise(void *a, size_t len, int advice) {
  static int (*real)(void *, size_t, int);
  if (!real) real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
  init();
  if ((mode & 2) && (advice == MADV_HUGEPAGE || advice == 23 /* MADV_POPULATE_WRITE */)) { failed_madv++; errno = EINVAL; return -1; }
  return real(a, len, advice);
}
__attribute__((destructor)) static void report(void) { fprintf(stderr, "REVIEW_FAIL failed_mmap=%ld failed_madvise=%ld\n", failed_mmap, failed_madv); }
"""

_FAIL_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import test_review_quality_sets as T
from luminamoon.stages import QualityFilter
big, small = T._docs()
ds = big + small + big
q = QualityFilter(rules=["gopher_repetition"], num_threads=2)
print("KEPT", json.dumps(q(ds).kept.tolist()), flush=True)  # the parent compares with its reference
"""


@pytest.mark.parametrize("mode", [1, 2])
def test_failed_mapping_or_hints_fall_back_with_the_same_decisions(docs, tmp_path, mode):
    big, small, keep = docs
    lib = tmp_path / "fail_mmap.so"
    (tmp_path / "fail_mmap.c").write_text(_FAIL_MMAP_C)
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(lib), str(tmp_path / "fail_mmap.c"), "-ldl"],
                   check=True)
    env = dict(os.environ, LD_PRELOAD=str(lib), REVIEW_FAIL=str(mode))
    p = subprocess.run([sys.executable, "-c", _FAIL_CHILD, os.path.dirname(__file__)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    kept = [x for x in p.stdout.splitlines() if x.startswith("KEPT ")]
    assert kept, p.stdout + p.stderr[-2000:]
    assert json.loads(kept[-1][5:]) == [keep[d] for d in big + small + big]  # == datatrove's decisions
    counts = [x for x in p.stderr.splitlines() if x.startswith("REVIEW_FAIL")]
    assert counts, p.stderr[-2000:]
    n_mmap = int(counts[-1].split("failed_mmap=")[1].split()[0])
    n_madv = int(counts[-1].split("failed_madvise=")[1].split()[0])
    # the big documents' sets did ask for mappings (the path under test was taken)
    assert (n_mmap if mode == 1 else n_madv) >= 4, counts


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_does_not_grow_over_50_batches(docs):
    big, small, keep = docs
    q = QualityFilter(rules=["gopher_repetition"], num_threads=2)
    seq = [[big[i % len(big)], small[i % len(small)]] if i % 2 else small for i in range(50)]
    for b in seq[:6]:  # warm up: every set size reached once
        q(b)
    r0 = _rss()
    peak = 0
    for b in seq:
        assert q(b).kept.tolist() == [keep[d] for d in b]
        peak = max(peak, _rss())
    r1 = _rss()
    # the sets of the largest document (two threads: two sets of ~6-12 MiB, their copy buffers)
    # are freed or reused; 50 batches of leaks of them would be hundreds of MiB
    assert r1 - r0 < 64 << 20, (r0, r1, peak)
    assert peak - r0 < 128 << 20, (r0, r1, peak)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fused_pipeline_with_large_sets_keeps_the_reference_documents(docs, threads):
    """The same sets inside FusedPipeline (each worker its own scratch), reused over batches."""
    from luminamoon.stages import FusedPipeline

    big, small, keep = docs
    p = FusedPipeline(cleaner=False, dedup=False, pii=False, quality={"rules": ["gopher_repetition"]},
                      num_threads=threads)
    for b in ([*big, *small], [small[0], big[4], small[1], big[0]], big[::-1], small):
        r = p(b)
        assert r.source_index.tolist() == [i for i, d in enumerate(b) if keep[d]]
        assert r.texts.tolist() == [d for d in b if keep[d]]
    p.close()
