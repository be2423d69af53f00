"""Near-duplicate quality, measured (issue 12, acceptance 3).

Planted near-duplicates at controlled 5-gram Jaccard similarity, made from documents of
the shared corpus that have no near-duplicate in it (singletons of the offline
clustering, 80-3000 words).  Each variant of a base document gets whitespace/case changes
(which the MinHash text normalisation undoes), sometimes its paragraphs reordered and
boilerplate lines inserted, then word substitutions until its 5-gram Jaccard similarity
with the base (measured exactly on the shingle sets of ``luminamoon.MinHash.shingles``)
reaches a target drawn uniformly from [0.2, 1].  Base documents, their variants (each
after its base) and control documents without a variant are shuffled into one corpus and
deduplicated by:

  * cluster   -- ``luminamoon.near_dup.cluster_texts`` (offline, datatrove's semantics),
  * stream    -- ``luminamoon.NearDeduplicator`` (a document is dropped when one of its
                 bands was seen earlier),
  * datatrove -- its four MinHash stages (LocalPipelineExecutor; --no-datatrove skips it).

Per similarity band: recall (the planted pair is caught: cluster/datatrove -- one of the
two removed; stream -- the variant dropped) beside LSH's theoretical probability
1 - (1 - J^8)^14 averaged over the band's pairs, and the central 95 % interval of the recall
under that theory (the exact Poisson-binomial distribution of the number caught, each pair
caught with its own probability): a recall inside it is "within sampling error".  Precision: of the removals among the band's
pairs, the share explained by the planted partner; a removed control document or a removal
not explained by its partner is a false positive.

Then: how the stream's decisions differ from the offline clusters on the whole shared corpus.

    python bench/bench_near_dup_quality.py [--pairs 3000] [--controls 1000] [--seed 1] [--no-datatrove]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from common import load_corpus  # noqa: E402

import luminamoon  # noqa: E402
from luminamoon.near_dup import cluster, compute_signatures  # noqa: E402

BOILERPLATE = [
    "Click here to subscribe to our newsletter and never miss an update.",
    "All rights reserved. Reproduction without permission is prohibited.",
    "This page was last edited on 12 March 2024, at 10:41.",
    "Share this article on Facebook, Twitter and LinkedIn.",
    "Cookies help us deliver our services. By using our services, you agree to our use of cookies.",
    "Posted by admin in Uncategorized | Leave a comment",
    "Sponsored content: the views expressed here are those of the author.",
    "Read more at our website for the latest news and announcements.",
]
BANDS = [(0.2, 0.3), (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 1.0001)]
R, B = 8, 14


def poisson_binomial_interval(p, level=0.95):
    """Central ``level`` interval of the number of successes of independent Bernoulli(p_i)
    trials (exact pmf by convolution): the sampling error of a recall under the theory."""
    pmf = np.zeros(len(p) + 1)
    pmf[0] = 1.0
    for q in p:
        pmf[1:] = pmf[1:] * (1 - q) + pmf[:-1] * q
        pmf[0] *= 1 - q
    cdf = np.cumsum(pmf)
    a = (1 - level) / 2
    lo = int(np.searchsorted(cdf, a - 1e-12))
    hi = int(np.searchsorted(cdf, 1 - a - 1e-12))
    return lo, hi


def p_lsh(j):
    return 1.0 - (1.0 - np.asarray(j, dtype=np.float64) ** R) ** B


class Shingler:
    def __init__(self):
        self.mh = luminamoon.MinHash()

    def sets(self, texts):
        h, off = self.mh.shingles(list(texts))
        h, off = h.numpy(), off.numpy()
        return [set(h[off[i]:off[i + 1]].tolist()) for i in range(len(texts))]


def jaccard(a, b):
    return len(a & b) / max(len(a | b), 1)


_WS = re.compile(r"(\S+)")


def _surface(text, rng):
    """Whitespace and case changes (undone by the MinHash normalisation)."""
    out = []
    for line in text.split("\n"):
        words = line.split(" ")
        words = [w.upper() if w and rng.random() < 0.05 else (w.capitalize() if rng.random() < 0.05 else w)
                 for w in words]
        line = " ".join(w + (" " if rng.random() < 0.05 else "") for w in words)
        out.append(line + ("  " if rng.random() < 0.2 else ""))
    return "\n".join(out)


def make_variant(base, target, rng, vocab, shingler, base_set):
    """A variant of ``base`` whose 5-gram Jaccard similarity with it is close to
    ``target`` (binary search on the number of substituted words)."""
    text = base
    edits = ["surface"]
    paras = [p for p in text.split("\n") if p.strip()]
    if len(paras) >= 3 and rng.random() < 0.3:
        i = rng.randrange(len(paras) - 1)
        paras[i], paras[i + 1] = paras[i + 1], paras[i]
        text = "\n".join(paras)
        edits.append("reorder")
    if rng.random() < 0.3:
        lines = text.split("\n")
        for _ in range(rng.randint(1, 2)):
            lines.insert(rng.randint(0, len(lines)), rng.choice(BOILERPLATE))
        text = "\n".join(lines)
        edits.append("boilerplate")
    tokens = _WS.split(text)  # words at odd positions
    word_pos = list(range(1, len(tokens), 2))
    rng.shuffle(word_pos)
    subs = [rng.choice(vocab) for _ in word_pos]

    def build(k):
        t = list(tokens)
        for p, w in zip(word_pos[:k], subs[:k]):
            t[p] = w
        return "".join(t)

    lo, hi = 0, len(word_pos)
    best = (None, 9.0, 0)
    for _ in range(12):
        k = (lo + hi) // 2
        cand = build(k)
        j = jaccard(shingler.sets([cand])[0], base_set)
        if abs(j - target) < abs(best[1] - target):
            best = (cand, j, k)
        if j > target:
            lo = k + 1
        else:
            hi = k - 1
        if lo > hi:
            break
    cand, j, k = best
    if k:
        edits.append("substitute")
    return _surface(cand, rng), edits


def build_benchmark(texts, n_pairs, n_controls, seed):
    rng = random.Random(seed)
    sig = compute_signatures(texts)
    res = cluster(sig)
    counts = np.bincount(res.root, minlength=len(texts))
    single = np.flatnonzero((counts[res.root] == 1) & (sig[:, 0] != np.uint64(2**64 - 1)))
    nwords = np.array([len(t.split()) for t in texts])
    cand = [int(i) for i in single if 80 <= nwords[i] <= 3000]
    rng.shuffle(cand)
    if len(cand) < n_pairs + n_controls:
        raise SystemExit(f"only {len(cand)} candidate documents for {n_pairs} pairs + {n_controls} controls")
    bases, controls = cand[:n_pairs], cand[n_pairs:n_pairs + n_controls]
    vocab = sorted({w for i in cand[:2000] for w in texts[i].split() if w.isalpha() and len(w) > 2})
    shingler = Shingler()
    base_sets = shingler.sets([texts[i] for i in bases])
    variants, sims, edits = [], [], []
    for bi, s in zip(bases, base_sets):
        target = rng.uniform(0.2, 1.0)
        v, e = make_variant(texts[bi], target, rng, vocab, shingler, s)
        variants.append(v)
        edits.append(e)
    var_sets = shingler.sets(variants)
    sims = np.array([jaccard(a, b) for a, b in zip(base_sets, var_sets)])
    # the corpus: bases and controls shuffled, each variant somewhere after its base
    order = [("b", k) for k in range(n_pairs)] + [("c", k) for k in range(n_controls)]
    rng.shuffle(order)
    docs, pos_b, pos_v, pos_c = [], np.zeros(n_pairs, int), np.zeros(n_pairs, int), []
    pending = []
    for kind, k in order:
        docs.append(texts[bases[k]] if kind == "b" else texts[controls[k]])
        if kind == "b":
            pos_b[k] = len(docs) - 1
            pending.append(k)
        else:
            pos_c.append(len(docs) - 1)
        if pending and rng.random() < 0.5:
            k2 = pending.pop(rng.randrange(len(pending)))
            docs.append(variants[k2])
            pos_v[k2] = len(docs) - 1
    for k2 in pending:
        docs.append(variants[k2])
        pos_v[k2] = len(docs) - 1
    return {"docs": docs, "pos_b": pos_b, "pos_v": pos_v, "pos_c": np.array(pos_c, int), "sim": sims,
            "edits": edits}


def evaluate(bench, removed_mask, kind, root=None):
    """Per pair: caught?  Per removal: explained by the partner?"""
    b, v = bench["pos_b"], bench["pos_v"]
    rb, rv = removed_mask[b], removed_mask[v]
    if kind == "stream":
        caught = rv.copy()
        explained = rv & bench["collide"]  # the variant dropped because of a band shared with its base
        fp_pair = (rv & ~bench["collide"]).astype(int) + rb.astype(int)
    else:
        same = (root[b] == root[v]) if root is not None else np.ones_like(rb)
        caught = (rb ^ rv) & same
        explained = caught
        fp_pair = ((rb | rv) & ~caught).astype(int) * (rb.astype(int) + rv.astype(int))
    fp_controls = int(removed_mask[bench["pos_c"]].sum())
    return caught, explained, fp_pair, fp_controls


def band_table(bench, results):
    sim = bench["sim"]
    p = p_lsh(sim)
    rows = []
    head = f"{'J band':<11}{'pairs':>6}{'theory':>8}{'95% interval':>14}"
    for name in results:
        head += f"{name + ' recall':>17}{'in':>4}{'prec':>7}"
    print(head)
    summary = {}
    for lo, hi in BANDS:
        m = (sim >= lo) & (sim < hi)
        n = int(m.sum())
        if n == 0:
            continue
        exp = float(p[m].mean())
        se = math.sqrt(float((p[m] * (1 - p[m])).sum())) / n
        ilo, ihi = poisson_binomial_interval(p[m])
        line = f"{lo:.1f}-{min(hi, 1.0):.1f}{'':<4}{n:>6}{exp:>8.3f}{f'{ilo / n:.3f}-{ihi / n:.3f}':>14}"
        row = {"band": [lo, min(hi, 1.0)], "pairs": n, "theory": exp, "se": se, "interval": [ilo / n, ihi / n]}
        for name, (caught, explained, fp_pair, _) in results.items():
            obs = float(caught[m].mean())
            z = (obs - exp) / se if se > 0 else (0.0 if abs(obs - exp) < 1e-12 else float("inf"))
            tp = int(explained[m].sum())
            fp = int(fp_pair[m].sum())
            prec = tp / (tp + fp) if tp + fp else float("nan")
            inside = ilo <= int(caught[m].sum()) <= ihi
            line += f"{obs:>17.3f}{'yes' if inside else 'NO':>4}{prec:>7.3f}"
            row[name] = {"recall": obs, "z": z, "precision": prec, "tp": tp, "fp": fp, "within": inside}
        print(line)
        rows.append(row)
    print()
    for name, (caught, explained, fp_pair, fp_c) in results.items():
        p_all = p
        exp_all = float(p_all.mean())
        se_all = math.sqrt(float((p_all * (1 - p_all)).sum())) / len(p_all)
        within = [r[name]["within"] for r in rows]
        tp, fp = int(explained.sum()), int(fp_pair.sum()) + fp_c
        hi = sim >= 0.72
        det = caught.astype(bool)
        thr_prec = float((det & hi).sum() / max(det.sum(), 1))
        print(f"{name:<10} recall {caught.mean():.4f} (theory {exp_all:.4f} ± {se_all:.4f}, "
              f"z {(caught.mean() - exp_all) / se_all:+.2f}); bands inside their 95% interval: "
              f"{sum(within)}/{len(within)}; precision {tp / max(tp + fp, 1):.4f} "
              f"({fp} false positive removals, {fp_c} of them control documents); "
              f"share of caught pairs with J >= 0.72 (LSH threshold (1/14)^(1/8)): {thr_prec:.3f}")
        summary[name] = {"recall": float(caught.mean()), "theory": exp_all, "se": se_all, "precision": tp / max(tp + fp, 1),
                         "false_positives": fp, "control_false_positives": fp_c, "bands_within_95": sum(within),
                         "bands": len(within)}
    return rows, summary


def stream_vs_cluster(texts):
    """The stream's decisions against the offline clusters on the same corpus."""
    sig = compute_signatures(texts)
    res = cluster(sig)
    nd = luminamoon.stages.NearDeduplicator()
    try:
        stream = np.asarray(nd.decisions(iter(texts)))
    finally:
        nd.close()
    offline = ~res.keep
    both = int((stream & offline).sum())
    s_only = int((stream & ~offline).sum())
    c_only = int((~stream & offline).sum())
    n = len(texts)
    # The stream keeps the first document of each chain of band collisions; the offline
    # clustering keeps each cluster's root (union by size), not necessarily its first document,
    # and removes documents the stream keeps (linked to the cluster only through later ones).
    size = np.bincount(res.root, minlength=n)
    first = np.full(n, n, dtype=np.int64)
    np.minimum.at(first, res.root, np.arange(n))
    roots = np.flatnonzero((size >= 2) & (res.root == np.arange(n)))
    root_first = int((first[roots] == roots).sum())
    print(f"shared corpus, {n:,} documents (raw text): offline cluster removes {int(offline.sum()):,}, "
          f"stream removes {int(stream.sum()):,}; both {both:,}, stream only {s_only:,}, cluster only {c_only:,}; "
          f"same decision for {100 * (1 - (s_only + c_only) / n):.3f} % of documents")
    print(f"  {roots.size:,} clusters of two or more; the kept root is the cluster's first document in "
          f"{root_first:,} of them (the stream always keeps the first)")
    return {"documents": n, "cluster_removed": int(offline.sum()), "stream_removed": int(stream.sum()),
            "both": both, "stream_only": s_only, "cluster_only": c_only,
            "agreement": 1 - (s_only + c_only) / n}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--controls", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-datatrove", action="store_true")
    ap.add_argument("--no-corpus-compare", action="store_true", help="skip stream vs cluster on the whole corpus")
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args(argv)
    t0 = time.time()
    texts = load_corpus()
    bench = build_benchmark(texts, a.pairs, a.controls, a.seed)
    docs = bench["docs"]
    sims = bench["sim"]
    print(f"planted near-duplicates: {a.pairs} pairs + {a.controls} controls = {len(docs)} documents "
          f"(J: min {sims.min():.2f}, median {np.median(sims):.2f}; edits: "
          + ", ".join(f"{e} {sum(e in x for x in bench['edits'])}" for e in ("reorder", "boilerplate", "substitute"))
          + f") [{time.time() - t0:.0f} s]")
    sig = compute_signatures(docs)
    b, v = bench["pos_b"], bench["pos_v"]
    bench["collide"] = np.array([any(np.array_equal(sig[i, k * R:(k + 1) * R], sig[j, k * R:(k + 1) * R])
                                     for k in range(B)) for i, j in zip(b, v)])
    results = {}
    res = cluster(sig)
    results["cluster"] = evaluate(bench, ~res.keep, "cluster", res.root)
    nd = luminamoon.stages.NearDeduplicator()
    try:
        stream = np.asarray(nd.decisions(iter(docs)))
    finally:
        nd.close()
    results["stream"] = evaluate(bench, stream, "stream")
    if not a.no_datatrove:
        from reference_datatrove_minhash import run_datatrove_minhash

        with tempfile.TemporaryDirectory() as d:
            t1 = time.time()
            ref = run_datatrove_minhash(docs, d)
            print(f"datatrove's four stages: {time.time() - t1:.0f} s")
        dt_removed = np.zeros(len(docs), dtype=bool)
        dt_removed[ref["removed"]] = True
        results["datatrove"] = evaluate(bench, dt_removed, "datatrove", res.root)
        print(f"cluster vs datatrove: same removed set: {bool((dt_removed == ~res.keep).all())} "
              f"({int((dt_removed != ~res.keep).sum())} documents differ)")
    print()
    rows, summary = band_table(bench, results)
    out = {"bands": rows, "summary": summary}
    if not a.no_corpus_compare:
        print()
        out["stream_vs_cluster"] = stream_vs_cluster(texts)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1, default=float)
    print(f"[{time.time() - t0:.0f} s]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
