"""MinHash signatures: luminamoon.MinHash vs datatrove 0.10.1's MinhashDedupSignature, one core, one run.

Both compute the same signatures (default MinhashConfig: 5-grams, 14 x 8 hashes, seed 1, XXH64):
datatrove's get_shingles + get_signature (its per-document work in MinhashDedupSignature.run, minus
the file writes), luminamoon's MinHash(num_threads=1).signatures on the same documents.  Reported:
docs/s and MB/s of each and their ratio (target >= 100x), measured in the same run on the same
machine (wall-clock on a shared machine is noisy: compare the ratio, not the absolute figures), and
the equality of the signatures on the documents timed.  Also: the CPU operator
torch.ops.luminamoon.minhash alone (shingle hashes -> signatures), and shingling alone.

    python bench/bench_minhash.py [--docs 68330] [--dt-docs 3000] [--json out.json]
"""
import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(os.path.dirname(ROOT), "shared", "corpus", "debian-dev.jsonl.gz")


def load(path, limit):
    out = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if limit and len(out) >= limit:
                break
    return out


def best_of(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        r = fn()
        best = min(best, time.perf_counter() - t)
    return best, r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--docs", type=int, default=0, help="documents for luminamoon (0: the whole corpus)")
    ap.add_argument("--dt-docs", type=int, default=3000, help="documents for datatrove (slow: ~650 docs/s)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    import luminamoon
    from luminamoon import MinHash, StringTensor

    texts = load(args.corpus, args.docs)
    st = StringTensor.from_list(texts)
    nbytes = int(st.data.numel())
    step = max(1, len(texts) // args.dt_docs)
    sample = texts[::step][:args.dt_docs]
    sample_bytes = sum(len(t.encode("utf-8")) for t in sample)

    # datatrove (imported here: its import time is not part of the measure)
    from datatrove.pipeline.dedup.minhash import MinhashDedupSignature
    dt = MinhashDedupSignature("/tmp/lm_bench_minhash_unused")
    dt.get_shingles("warm up the spacy tokenizer and the parameters")
    dt.parameters

    def dt_run():
        out = []
        for t in sample:
            sh = dt.get_shingles(t)
            out.append(dt.get_signature(sh) if sh.size else None)
        return out

    t0 = time.perf_counter()
    dt_sigs = dt_run()
    t_dt = time.perf_counter() - t0

    mh = MinHash(num_threads=1)
    mh.signatures(texts[:100])
    t_lm, sigs = best_of(lambda: mh.signatures(st), args.repeats)
    t_lm_sample, sample_sigs = best_of(lambda: mh.signatures(sample), args.repeats)

    # equality on the sample timed for datatrove
    differ = 0
    for i, ref in enumerate(dt_sigs):
        ours = sample_sigs[i]
        if ref is None:
            differ += int(not bool((ours == -1).all()))
        else:
            flat = np.array([v for b in ref for v in b], dtype=np.uint64).view(np.int64)
            differ += int(not np.array_equal(ours.numpy(), flat))

    # the pieces: shingling, and the operator alone
    t_sh, (h, off) = best_of(lambda: mh.shingles(st), args.repeats)
    t_op, op_out = best_of(lambda: torch.ops.luminamoon.minhash(h, off, mh.a, mh.b), args.repeats)
    assert torch.equal(op_out, sigs)

    dt_dps, lm_dps = len(sample) / t_dt, len(texts) / t_lm
    res = {
        "documents": len(texts), "bytes": nbytes, "datatrove_documents": len(sample),
        "datatrove_docs_per_s": dt_dps, "datatrove_mb_per_s": sample_bytes / t_dt / 1e6,
        "luminamoon_docs_per_s": lm_dps, "luminamoon_mb_per_s": nbytes / t_lm / 1e6,
        "luminamoon_sample_docs_per_s": len(sample) / t_lm_sample,
        "ratio": lm_dps / dt_dps, "ratio_same_documents": (len(sample) / t_lm_sample) / dt_dps,
        "signatures_differing_on_sample": differ,
        "shingles_docs_per_s": len(texts) / t_sh, "shingle_hashes": int(h.numel()),
        "op_seconds": t_op, "op_shingles_per_s": h.numel() / t_op,
        "op_gb_per_s": (8 * h.numel() + 8 * off.numel() + 8 * sigs.numel()) / t_op / 1e9,
        "threads": 1, "luminamoon_version": luminamoon.__version__,
    }
    print(f"corpus: {len(texts)} documents, {nbytes / 1e6:.1f} MB; datatrove timed on {len(sample)} of them")
    print(f"datatrove 0.10.1 MinhashDedupSignature : {dt_dps:10.0f} docs/s {res['datatrove_mb_per_s']:8.2f} MB/s")
    print(f"luminamoon MinHash.signatures (1 core) : {lm_dps:10.0f} docs/s {res['luminamoon_mb_per_s']:8.2f} MB/s"
          f"   = {res['ratio']:.0f}x datatrove (same documents: {res['ratio_same_documents']:.0f}x; target >= 100x)")
    print(f"  shingling alone (simplify+tokenize+XXH64): {res['shingles_docs_per_s']:10.0f} docs/s")
    print(f"  torch.ops.luminamoon.minhash (CPU, 1 core): {h.numel() / t_op / 1e6:8.1f} M shingles/s x 112 hashes "
          f"({res['op_gb_per_s']:.2f} GB/s touched)")
    print(f"signatures equal to datatrove's on the timed sample: {len(sample) - differ}/{len(sample)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
