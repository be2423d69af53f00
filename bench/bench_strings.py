"""StringTensor against pyarrow, Polars and xxhash, on one CPU core, in the same run.

    python bench/bench_strings.py            # the shared corpus (68k documents, 47 MB)

Prints one table: our time, the peer's time, and the ratio (peer / ours: > 1 means
we are faster).  Every library is pinned to one thread.
"""
from __future__ import annotations

import os
import sys

os.environ.setdefault("POLARS_MAX_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import torch  # noqa: E402
import xxhash  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from common import best_time, load_corpus, print_table  # noqa: E402

import luminamoon  # noqa: E402
from luminamoon import StringTensor  # noqa: E402

OPS = torch.ops.luminamoon


def main() -> None:
    torch.set_num_threads(1)
    pa.set_cpu_count(1)
    texts = load_corpus()
    nbytes = sum(len(t.encode()) for t in texts)
    print(f"corpus: {len(texts)} documents, {nbytes / 1e6:.1f} MB; one thread each "
          f"(torch {torch.__version__}, pyarrow {pa.__version__}, polars {pl.__version__})")

    st = StringTensor.from_list(texts)
    views_st = StringTensor(views=st.views, buffers=st.buffers)  # the CPU views layout
    arr = pa.array(texts, type=pa.string())
    ser = pl.Series(texts)
    encoded = [t.encode() for t in texts]
    off, data = st.offsets, st.data
    prefix = "This package"
    probe = texts[len(texts) // 2]
    rng = np.random.default_rng(0)
    idx_np = rng.integers(0, len(texts), len(texts))
    idx_t, idx_pa = torch.from_numpy(idx_np), pa.array(idx_np)
    mask_np = rng.random(len(texts)) < 0.5
    mask_t, mask_pa = torch.from_numpy(mask_np), pa.array(mask_np)

    # sanity: the same answers
    assert st.starts_with(prefix).numpy().tolist() == pc.starts_with(arr, prefix).to_pylist()
    assert views_st.starts_with(prefix).numpy().tolist() == pc.starts_with(arr, prefix).to_pylist()
    assert (views_st == probe).numpy().tolist() == pc.equal(arr, probe).to_pylist()
    assert [h & (2**64 - 1) for h in st.hash64().tolist()[:100]] == [xxhash.xxh3_64_intdigest(t.encode()) for t in texts[:100]]

    rows = []

    def row(name, ours, peer_name, peer):
        t_ours, t_peer = best_time(ours), best_time(peer)
        rows.append([name, f"{t_ours * 1e3:.3f}", peer_name, f"{t_peer * 1e3:.3f}", f"{t_peer / t_ours:.2f}x"])

    row("from_list", lambda: StringTensor.from_list(texts), "pa.array", lambda: pa.array(texts, type=pa.string()))
    row("starts_with (views layout)", lambda: views_st.starts_with(prefix),
        "pc.starts_with", lambda: pc.starts_with(arr, prefix))
    row("prefix_match (offsets layout)", lambda: OPS.prefix_match(off, data, prefix),
        "pc.starts_with", lambda: pc.starts_with(arr, prefix))
    row("starts_with (views layout)", lambda: views_st.starts_with(prefix),
        "polars str.starts_with", lambda: ser.str.starts_with(prefix))
    row("equal_scalar (views layout)", lambda: views_st.fast_eq(probe), "pc.equal", lambda: pc.equal(arr, probe))
    row("equal_scalar (offsets layout)", lambda: OPS.equal_scalar(off, data, probe), "pc.equal",
        lambda: pc.equal(arr, probe))
    row("hash64 (XXH3-64)", lambda: OPS.hash64(off, data, 0), "polars Series.hash", lambda: ser.hash())
    row("hash64 (XXH3-64)", lambda: OPS.hash64(off, data, 0), "python xxhash loop",
        lambda: [xxhash.xxh3_64_intdigest(t) for t in encoded])
    row("take (views layout)", lambda: views_st.take(idx_t), "pc.take", lambda: pc.take(arr, idx_pa))
    row("gather (offsets layout)", lambda: OPS.gather(off, data, idx_t), "pc.take", lambda: pc.take(arr, idx_pa))
    row("compact (views layout)", lambda: views_st.mask(mask_t), "pc.filter", lambda: pc.filter(arr, mask_pa))
    row("compact (offsets layout)", lambda: OPS.compact(off, data, mask_t), "pc.filter",
        lambda: pc.filter(arr, mask_pa))
    row("to_arrow(zero_copy)", lambda: st.to_arrow(), "pa.array(list)", lambda: pa.array(texts, type=pa.string()))
    print_table("StringTensor vs peers (ms per call, one core; ratio = peer / ours)",
                ["ours", "ms", "peer", "ms", "ratio"], rows)

    # to_arrow is O(1): time it at 1x and 16x the size.
    big = StringTensor.from_list(texts * 16)
    t1, t16 = best_time(lambda: st.to_arrow()), best_time(lambda: big.to_arrow())
    print(f"\nto_arrow(zero_copy=True): {t1 * 1e6:.1f} us at {len(texts)} strings, {t16 * 1e6:.1f} us at "
          f"{len(texts) * 16} strings (ratio {t16 / t1:.2f}: constant time)")
    assert luminamoon.__version__


if __name__ == "__main__":
    main()
