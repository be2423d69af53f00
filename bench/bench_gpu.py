"""GPU benchmark of the luminamoon CUDA ops: GB/s of bytes actually touched, and fraction of copy bandwidth.

On a payload of corpus-like strings (default 1 GB; byte lengths log-normal with median ~330 and a
long tail, printable text), measured in the same run:
  * copy        torch's own device-to-device copy of the payload tensor (the reference bandwidth)
  * each op     prefix_match, equal_scalar, equal, hash64, pad_bytes, gather, compact, with the
                offsets as built (int32 under 2 GiB) and again with int64 offsets for the main ops;
                hash64/equal also on strings of 64 KB - 4 MB (hash64's grid-wide block path, equal's
                grid-wide segments).
Convention: GB/s = bytes the op reads + bytes it writes (offsets, payload bytes actually compared
or copied, index/mask, outputs), divided by the time; so the d2d copy of N bytes counts 2N (read +
write), and an op's "x copy" compares like with like.  prefix_match and equal_scalar get their
pattern planted at the start of half the candidate strings, so the payload is really read; their
byte counts are upper bounds (every candidate counted as read over the whole pattern).
  * H2D         host -> device transfer of offsets + payload from pinned memory (the StringTensor's
                .to("cuda", non_blocking=True) when luminamoon.StringTensor offers it, else the two
                tensors), against torch's own pinned copy of a tensor of the same bytes (bytes moved
                once: here a copy counts its size, as PCIe/NVLink figures do).
Times are CUDA-event times, after warmup, median of --repeats runs.  Each op call includes its
offsets validation (one small check kernel and a 4-byte copy back: a synchronisation).

Usage: python bench/bench_gpu.py [--gb 1.0] [--repeats 5] [--max-len 512] [--json out.json] [--device cpu (dry run)]
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch


def timed(fn, warmup, repeats):
    for _ in range(warmup):
        fn()
    if not torch.cuda.is_available():  # --device cpu: a dry run of the script, wall-clock times
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def corpus_like(total_bytes, seed=0, device="cuda"):
    """Offsets (int64, or int32 when the payload is under 2 GiB) + payload on the device."""
    g = torch.Generator(device=device).manual_seed(seed)
    mean = math.exp(math.log(330) + 0.5)  # log-normal, sigma 1: median 330, mean ~544
    n = int(total_bytes / mean * 1.05) + 16
    lengths = torch.empty(n, device=device).log_normal_(math.log(330), 1.0, generator=g)
    lengths = lengths.clamp_(0, 4 << 20).long()
    cum = torch.cumsum(lengths, 0)
    n = int(torch.searchsorted(cum, torch.tensor(total_bytes, device=device)).item())
    lengths = lengths[:n]
    offsets = torch.zeros(n + 1, dtype=torch.int64, device=device)
    torch.cumsum(lengths, 0, out=offsets[1:])
    size = int(offsets[-1].item())
    data = torch.randint(32, 127, (size,), dtype=torch.uint8, device=device, generator=g)
    if size < 2**31 - 1:
        offsets = offsets.int()
    return offsets, data


def plant(offsets, data, which, pattern):
    """Write `pattern` at the start of half the strings where `which` holds (so ops read them)."""
    idx = torch.nonzero(which).flatten()
    idx = idx[torch.randperm(idx.numel(), device=idx.device)[: idx.numel() // 2]]
    starts = offsets[idx].long()
    for k, byte in enumerate(pattern):
        data[starts + k] = byte
    return data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=1.0, help="payload size in GB (1e9 bytes)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--max-len", default="128,512", help="pad_bytes columns (comma-separated list)")
    ap.add_argument("--json", help="write the results here as JSON")
    ap.add_argument("--device", default="cuda", help="cuda; cpu is a dry run of this script on the CPU ops")
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        print("bench_gpu: no CUDA device", file=sys.stderr)
        return 2
    import luminamoon  # noqa: F401  (registers torch.ops.luminamoon)

    ops = torch.ops.luminamoon
    offsets, data = corpus_like(int(args.gb * 1e9), device=dev)
    n, nbytes = offsets.numel() - 1, data.numel()
    lens = (offsets[1:] - offsets[:-1]).float()
    name = torch.cuda.get_device_name() if dev.type == "cuda" else "cpu (dry run)"
    print(f"device: {name}  torch {torch.__version__}  CUDA {torch.version.cuda}")
    print(f"payload: {nbytes / 1e9:.3f} GB, {n} strings, offsets {offsets.dtype}, median length "
          f"{lens.median().item():.0f}, mean {lens.mean().item():.0f}, max {lens.max().item():.0f}")
    del lens

    results = {"device": name, "payload_bytes": nbytes, "strings": n,
               "convention": "GB/s = (bytes read + bytes written) / time; the d2d copy of N bytes counts 2N",
               "ops": {}}
    dst = torch.empty_like(data)
    t_copy = timed(lambda: dst.copy_(data), args.warmup, args.repeats)
    copy_gbs = 2 * nbytes / t_copy / 1e9
    del dst
    results["copy_gbps"] = copy_gbs
    print(f"\n{'op':<22}{'time ms':>10}{'GB':>8}{'GB/s':>10}{'x copy':>9}  note")
    print(f"{'copy (torch)':<22}{t_copy * 1e3:>10.3f}{2 * nbytes / 1e9:>8.2f}{copy_gbs:>10.1f}{1.0:>9.2f}  "
          "d2d copy of the payload (read + write)")

    lens = offsets[1:].long() - offsets[:-1].long()
    prefix = "The q"
    scalar = "x" * 330
    data = plant(offsets, data, lens >= len(prefix), prefix.encode())
    data = plant(offsets, data, lens == len(scalar), scalar.encode())
    # equal's second operand: the same strings in another buffer, a few changed bytes
    data_b = data.clone()
    data_b[:: max(1, nbytes // 1000)] ^= 1
    gidx = torch.randperm(n, device=dev)
    mask = torch.rand(n, device=dev) < 0.5
    kept = int(lens[mask].sum())
    # bytes touched by each op (offsets of width w: (n + 1) * w per offsets array)
    def off_b(o):
        return o.numel() * o.element_size()
    cand_p = int(lens.clamp(max=len(prefix))[lens >= len(prefix)].sum())
    cand_s = int((lens == len(scalar)).sum()) * len(scalar)
    off64 = offsets.long()
    cases = [
        ("prefix_match", lambda: ops.prefix_match(offsets, data, prefix), off_b(offsets) + cand_p + n, "target >= 0.5"),
        ("equal_scalar", lambda: ops.equal_scalar(offsets, data, scalar), off_b(offsets) + cand_s + n, "target >= 0.5"),
        ("equal", lambda: ops.equal(offsets, data, offsets, data_b), 2 * off_b(offsets) + 2 * nbytes + n, ""),
        ("hash64", lambda: ops.hash64(offsets, data, 0), off_b(offsets) + nbytes + 8 * n, "target >= 0.5"),
        ("hash64 seed", lambda: ops.hash64(offsets, data, 12345), off_b(offsets) + nbytes + 8 * n, "derived secret"),
        ("gather", lambda: ops.gather(offsets, data, gidx), 2 * off_b(offsets) + 8 * n + 2 * nbytes,
         "random permutation; 1 sync"),
        ("compact", lambda: ops.compact(offsets, data, mask), 2 * off_b(offsets) + n + 2 * kept, "half kept; 1 sync"),
    ]
    if offsets.dtype != torch.int64:
        cases += [
            ("prefix_match i64", lambda: ops.prefix_match(off64, data, prefix), off_b(off64) + cand_p + n, "int64 offsets"),
            ("hash64 i64", lambda: ops.hash64(off64, data, 0), off_b(off64) + nbytes + 8 * n, "int64 offsets"),
            ("gather i64", lambda: ops.gather(off64, data, gidx), 2 * off_b(off64) + 8 * n + 2 * nbytes, "int64 offsets"),
        ]
    for ml in [int(x) for x in str(args.max_len).split(",") if x]:
        read = int(lens.clamp(max=max(ml - 2, 0)).sum())
        cases.insert(5, (f"pad_bytes@{ml}", lambda ml=ml: ops.pad_bytes(offsets, data, ml, 0, 256, 257),
                         off_b(offsets) + read + 8 * n * ml + 8 * n, "target >= 0.5; mostly the int64 tokens written"))
    # hash64's grid-wide path and equal's grid-wide segments: strings of 64 KB - 4 MB
    g = torch.Generator(device=dev).manual_seed(1)
    hl = torch.randint(64 << 10, 4 << 20, (max(1, min(nbytes, 1 << 30) // (2 << 20)),), device=dev, generator=g)
    hoff = torch.zeros(hl.numel() + 1, dtype=torch.int64, device=dev)
    torch.cumsum(hl, 0, out=hoff[1:])
    keep = int(torch.searchsorted(hoff, torch.tensor(nbytes, device=dev), right=True).item())
    hoff = hoff[:max(keep, 1)].contiguous()
    hn, hbytes = hoff.numel() - 1, int(hoff[-1].item())
    if hn:
        cases += [
            ("hash64 >=64KB", lambda: ops.hash64(hoff, data, 0), off_b(hoff) + hbytes + 8 * hn,
             f"{hn} strings of 64 KB-4 MB (grid-wide path), int64 offsets"),
            ("equal >=64KB", lambda: ops.equal(hoff, data, hoff, data_b), 2 * off_b(hoff) + 2 * hbytes + hn,
             "grid-wide segments"),
        ]
    # MinHash (issue 12): signatures of ~100-shingle documents, 112 hash functions (datatrove's
    # defaults), from 8-byte shingle hashes; bytes touched = hashes + offsets + the int64 signatures
    mh_m = max(1, min(nbytes // 8, 1 << 24))
    g2 = torch.Generator(device=dev).manual_seed(2)
    mh_h = torch.randint(-2**63, 2**63 - 1, (mh_m,), device=dev, dtype=torch.int64, generator=g2)
    mh_n = max(1, mh_m // 100)
    mh_off = torch.linspace(0, mh_m, mh_n + 1, device=dev).round().long()
    mh_a = torch.randint(1, 2**61 - 1, (112,), device=dev, dtype=torch.int64, generator=g2)
    mh_b = torch.randint(0, 2**61 - 1, (112,), device=dev, dtype=torch.int64, generator=g2)
    cases.append(("minhash", lambda: ops.minhash(mh_h, mh_off, mh_a, mh_b, 64),
                  8 * mh_m + 8 * (mh_n + 1) + 8 * mh_n * 112,
                  f"{mh_m} shingle hashes, {mh_n} docs x 112 permutations (compute-bound); 1 sync"))
    del lens
    for name, fn, touched, note in cases:
        t = timed(fn, args.warmup, args.repeats)
        gbs = touched / t / 1e9
        results["ops"][name] = {"seconds": t, "bytes_touched": touched, "gbps": gbs, "fraction_of_copy": gbs / copy_gbs}
        print(f"{name:<22}{t * 1e3:>10.3f}{touched / 1e9:>8.2f}{gbs:>10.1f}{gbs / copy_gbs:>9.2f}  {note}")
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    del data_b, gidx, mask, off64, hoff, mh_h, mh_off

    if dev.type != "cuda":
        return write_json(args, results)
    # Host -> device: offsets + payload from pinned memory.
    h_off = torch.empty(offsets.shape, dtype=offsets.dtype, pin_memory=True)
    h_data = torch.empty(data.shape, dtype=torch.uint8, pin_memory=True)
    h_off.copy_(offsets)
    h_data.copy_(data)
    del offsets, data
    torch.cuda.empty_cache()
    total = h_off.numel() * h_off.element_size() + h_data.numel()
    h_ref = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    t_ref = timed(lambda: h_ref.to(dev, non_blocking=True), args.warmup, args.repeats)
    how = "offsets + payload tensors, .to(non_blocking=True)"
    st = None
    st_cls = getattr(luminamoon, "StringTensor", None)
    if st_cls is not None and hasattr(st_cls, "from_buffers"):
        try:
            st = st_cls.from_buffers(h_off, h_data)
            st.to(dev, non_blocking=True)
            how = "StringTensor.to('cuda', non_blocking=True) from pinned buffers"
        except Exception as e:  # the API is someone else's; fall back to the raw tensors
            print(f"(StringTensor path unavailable: {type(e).__name__}: {e})")
            st = None
    if st is not None:
        t_h2d = timed(lambda: st.to(dev, non_blocking=True), args.warmup, args.repeats)
    else:
        t_h2d = timed(lambda: (h_off.to(dev, non_blocking=True), h_data.to(dev, non_blocking=True)), args.warmup,
                      args.repeats)
    ref_gbs, h2d_gbs = total / t_ref / 1e9, total / t_h2d / 1e9
    results["h2d"] = {"bytes": total, "torch_pinned_gbps": ref_gbs, "strings_gbps": h2d_gbs,
                      "fraction": h2d_gbs / ref_gbs, "how": how}
    print(f"\nH2D {total / 1e9:.3f} GB: torch pinned copy {ref_gbs:.1f} GB/s; strings {h2d_gbs:.1f} GB/s "
          f"= {h2d_gbs / ref_gbs:.2f} x torch (target >= 0.8) [{how}]")
    return write_json(args, results)


def write_json(args, results):
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
