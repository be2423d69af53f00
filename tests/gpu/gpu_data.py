"""String sets in the offsets + payload layout for the GPU tests and benchmark (NumPy only)."""
import gzip
import json
import pathlib

import numpy as np
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT.parent / "shared" / "corpus" / "debian-dev.jsonl.gz"


class Strings:
    """A set of strings as offsets + payload (CPU tensors), with the Python bytes for references."""

    def __init__(self, name, offsets, data):
        self.name = name
        self.offsets = offsets  # int64 CPU
        self.data = data  # uint8 CPU

    @property
    def n(self):
        return self.offsets.numel() - 1

    def tensors(self, dtype, device):
        return self.offsets.to(dtype).to(device), self.data.to(device)

    def get(self, i):
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return bytes(self.data[a:b].numpy())


def from_lengths(name, lengths, rng, head=0, alphabet=None):
    """Random strings of the given byte lengths; `head` junk bytes before the first string."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if alphabet is None:
        payload = rng.integers(0, 256, size=head + total, dtype=np.uint8)
    else:
        payload = rng.choice(np.frombuffer(alphabet, dtype=np.uint8), size=head + total)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    offsets += head
    return Strings(name, torch.from_numpy(offsets), torch.from_numpy(payload.astype(np.uint8)))


def from_bytes_list(name, items):
    lengths = np.fromiter((len(b) for b in items), dtype=np.int64, count=len(items))
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    payload = np.frombuffer(b"".join(items), dtype=np.uint8).copy()
    return Strings(name, torch.from_numpy(offsets), torch.from_numpy(payload))


def every_length_class(rng):
    """0, 1-3, 4-8, 9-16, 17-128, 129-240, 241-1024, 1025-64K (8-thread path), >= 64K (grid-wide path)."""
    lengths = list(range(0, 2100))  # every length up to 2 KiB once: all XXH3 classes and block edges
    for lo, hi, k in [(0, 17, 3000), (17, 241, 3000), (241, 5000, 800), (5000, 65536, 60), (65536, 300000, 12)]:
        lengths += rng.integers(lo, hi, size=k).tolist()
    lengths += [65535, 65536, 65537, 1024 * 64 + 1024, 1024 * 80 + 1]
    rng.shuffle(lengths)
    return from_lengths("length_classes", lengths, rng)


def skewed(rng):
    """Many short strings and a few 1-4 MB ones among them (the load-balancing case)."""
    lengths = rng.integers(0, 400, size=150_000)
    for pos, size in [(10, 1 << 20), (70_000, (3 << 20) + 5), (149_990, (4 << 20) - 3)]:
        lengths[pos] = size
    return from_lengths("skewed", lengths, rng)


def real_text(limit=20000):
    """The shared corpus when present, else generated corpus-like text (median ~330 bytes)."""
    if CORPUS.exists():
        items = []
        with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
            for line in f:
                items.append(json.loads(line)["text"].encode("utf-8"))
                if len(items) >= limit:
                    break
        return from_bytes_list("corpus", items)
    rng = np.random.default_rng(5)
    words = [w.encode() for w in ("the of and to in is for on that with as by this be are from at or an it "
                                  "package debian version install system file data über naïve 数据 текст").split()]
    lengths = np.clip(rng.lognormal(mean=np.log(330), sigma=1.0, size=limit), 0, 200_000).astype(np.int64)
    items = []
    for n in lengths:
        out, size = [], 0
        while size < n:
            w = words[rng.integers(len(words))]
            out.append(w)
            size += len(w) + 1
        items.append(b" ".join(out))
    return from_bytes_list("generated_text", items)


def unaligned(rng):
    """Offsets that do not start at 0 and a payload whose data pointer is not 8-byte aligned."""
    base = from_lengths("unaligned", rng.integers(0, 3000, size=4000).tolist() + [70000, 9], rng, head=5)
    big = torch.empty(base.data.numel() + 3, dtype=torch.uint8)
    big[3:] = base.data
    return Strings("unaligned", base.offsets, big[3:])  # contiguous view at storage offset 3


def plant(ds, pattern, rng, share=0.25):
    """A copy of the payload where a share of the strings start with `pattern` (strings of exactly
    its length become equal to it), so prefix and equality tests have true results."""
    data = ds.data.clone()
    lens = (ds.offsets[1:] - ds.offsets[:-1]).numpy()
    p = torch.frombuffer(bytearray(pattern), dtype=torch.uint8) if pattern else None
    idx = np.nonzero(lens >= len(pattern))[0]
    if len(idx) and p is not None:
        for i in rng.choice(idx, size=max(1, int(len(idx) * share)), replace=False)[:5000]:
            a = int(ds.offsets[i])
            data[a:a + len(pattern)] = p
    return data


def mutated(ds, rng):
    """A copy of the payload with changes: some strings differ in their first, middle or last byte."""
    data = ds.data.clone()
    off = ds.offsets
    lens = (off[1:] - off[:-1]).numpy()
    nonempty = np.nonzero(lens > 0)[0]
    if len(nonempty):
        pick = rng.choice(nonempty, size=min(len(nonempty), max(1, len(nonempty) // 3)), replace=False)
        for i in pick:
            a, n = int(off[i]), int(lens[i])
            where = a + [0, n // 2, n - 1][int(rng.integers(3))]
            data[where] ^= 0x5A
    return data


def all_datasets():
    """The data sets of the GPU tests (and of the host emulation test), by name."""
    rng = np.random.default_rng(1234)
    return {
        "empty_set": Strings("empty_set", torch.zeros(1, dtype=torch.int64), torch.empty(0, dtype=torch.uint8)),
        "empty_strings": Strings("empty_strings", torch.zeros(7, dtype=torch.int64), torch.empty(0, dtype=torch.uint8)),
        "length_classes": every_length_class(rng),
        "skewed": skewed(rng),
        "real": real_text(),
        "unaligned": unaligned(rng),
    }
