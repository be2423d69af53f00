"""Train a small byte-level language model on the output of `luminamoon run`.

The model-side path of luminamoon, end to end:

  luminamoon run → Parquet parts → DataLoader + create_resumable_collate (a
  StringTensor per batch) → a model whose forward calls
  torch.ops.luminamoon.pad_bytes (bytes → padded token ids, in the graph) and
  torch.ops.luminamoon.hash64 (a hashed per-document feature), compiled with
  torch.compile(fullgraph=True) → checkpoint mid-epoch → resume exactly.

    python examples/train_byte_model.py                      # demo data, 120 steps, < 2 min on a CPU
    python examples/train_byte_model.py --data clean/ --steps 1000
    python examples/train_byte_model.py --stop-at 60         # checkpoint at step 60 and stop ...
    python examples/train_byte_model.py --resume             # ... then continue from it

The data loader is torchdata's StatefulDataLoader when installed (its
state_dict holds the sampler's position inside the epoch); otherwise a
seeded sampler whose position is saved by hand.  Either way a resumed run sees
exactly the batches the uninterrupted run would have seen (``--log`` writes
one line per step with a digest of the batch and the loss, to compare).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import luminamoon  # noqa: F401  (registers torch.ops.luminamoon)
from luminamoon import StringTensor

try:
    from luminamoon.data import create_resumable_collate
except ImportError:  # pragma: no cover - an older luminamoon
    create_resumable_collate = None

PAD, BOS, EOS = 256, 257, 258
VOCAB = 259
HASH_BUCKETS = 1024


# ------------------------------------------------------------------ the model
class ByteLM(nn.Module):
    """Causal byte model: embeddings + a hashed document embedding + causal convolutions.

    ``forward(offsets, data)`` takes a StringTensor's GPU/Arrow layout and does
    the tokenisation itself, with luminamoon's ops, inside the compiled graph.
    """

    def __init__(self, max_len: int = 256, dim: int = 128, layers: int = 4, kernel: int = 5):
        super().__init__()
        self.max_len = max_len
        self.kernel = kernel
        self.embed = nn.Embedding(VOCAB, dim)
        self.doc_embed = nn.Embedding(HASH_BUCKETS, dim)
        self.convs = nn.ModuleList(nn.Conv1d(dim, 2 * dim, kernel) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(dim) for _ in range(layers))
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, offsets: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        tokens, lengths = torch.ops.luminamoon.pad_bytes(offsets, data, self.max_len, PAD, BOS, EOS)
        doc = torch.ops.luminamoon.hash64(offsets, data, 17)            # XXH3-64 of each document
        bucket = torch.remainder(doc, HASH_BUCKETS)                     # hashed per-document feature
        x = self.embed(tokens[:, :-1]) + self.doc_embed(bucket)[:, None, :] * 0.1
        for conv, norm in zip(self.convs, self.norms):
            h = F.pad(norm(x).transpose(1, 2), (self.kernel - 1, 0))    # causal: pad on the left
            a, b = conv(h).chunk(2, dim=1)
            x = x + (a * torch.sigmoid(b)).transpose(1, 2)              # gated residual block
        logits = self.head(x)
        target = tokens[:, 1:]
        pos = torch.arange(target.shape[1], device=target.device)
        mask = pos[None, :] < (lengths[:, None] - 1)                    # real bytes only, no padding
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1), reduction="none")
        return (loss * mask.reshape(-1)).sum() / mask.sum().clamp(min=1)


# -------------------------------------------------------------------- the data
class Documents(torch.utils.data.Dataset):
    """The kept documents of a `luminamoon run` output folder (Parquet or JSONL parts)."""

    def __init__(self, folder: str):
        import pyarrow as pa
        import pyarrow.parquet as pq

        parts = sorted(glob.glob(os.path.join(folder, "part-*.parquet")))
        if parts:
            table = pa.concat_tables([pq.read_table(p, columns=["id", "text"]) for p in parts])
            self.ids = table.column("id").to_pylist()
            self.texts = table.column("text").to_pylist()
        else:
            import polars as pl

            parts = sorted(glob.glob(os.path.join(folder, "part-*.jsonl*")))
            if not parts:
                raise SystemExit(f"no part files in {folder!r}: run `luminamoon run INPUT -o {folder}` first")
            df = pl.concat([pl.read_ndjson(p) for p in parts])
            self.ids, self.texts = df["id"].to_list(), df["text"].to_list()

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int):
        return {"id": self.ids[i], "text": self.texts[i]}


class _ResumableSampler(torch.utils.data.Sampler):
    """A seeded random permutation per epoch whose position can be saved (the fallback
    when torchdata is not installed)."""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch, self.start = n, seed, 0, 0

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        perm = torch.randperm(self.n, generator=g).tolist()
        start, self.start = self.start, 0
        return iter(perm[start:])

    def __len__(self) -> int:
        return self.n


def _collate_fn(max_len: int):
    if create_resumable_collate is not None:
        return create_resumable_collate(text_key="text", pipeline=None, tokenizer="bytes", max_length=max_len,
                                        return_string_tensor=True)

    def collate(records):  # the same result without the adapter
        return StringTensor.from_list([r["text"] for r in records])

    return collate


def _as_string_tensor(batch) -> StringTensor:
    if isinstance(batch, StringTensor):
        return batch
    if isinstance(batch, dict):
        for v in batch.values():
            if isinstance(v, StringTensor):
                return v
    raise TypeError(f"the collate function returned {type(batch).__name__}, expected a StringTensor")


def make_loader(ds: Documents, batch_size: int, seed: int, max_len: int):
    collate = _collate_fn(max_len)
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:
        StatefulDataLoader = None
    if os.environ.get("LM_EXAMPLE_NO_TORCHDATA") == "1":  # tests: the fallback path
        StatefulDataLoader = None
    if StatefulDataLoader is not None:
        g = torch.Generator().manual_seed(seed)
        loader = StatefulDataLoader(ds, batch_size=batch_size, shuffle=True, generator=g, collate_fn=collate,
                                    drop_last=True, num_workers=0)
        loader._lm_gen, loader._lm_seed = g, seed
        return loader, "torchdata.StatefulDataLoader"
    sampler = _ResumableSampler(len(ds), seed)
    loader = torch.utils.data.DataLoader(ds, batch_size=batch_size, sampler=sampler, collate_fn=collate,
                                         drop_last=True)
    loader._lm_sampler = sampler
    return loader, "DataLoader + resumable sampler"


def loader_state(loader, batches_in_epoch: int):
    if hasattr(loader, "state_dict"):
        return {"kind": "stateful", "state": loader.state_dict()}
    s = loader._lm_sampler
    return {"kind": "manual", "epoch": s.epoch, "start": batches_in_epoch * loader.batch_size}


def load_loader_state(loader, st) -> None:
    if st["kind"] == "stateful":
        loader.load_state_dict(st["state"])
    else:
        loader._lm_sampler.epoch, loader._lm_sampler.start = st["epoch"], st["start"]


# ------------------------------------------------------------------ utilities
def demo_data(folder: str, size_mb: float) -> str:
    """Generates a small demo corpus and runs the pipeline on it (once)."""
    out = os.path.join(folder, "out")
    if glob.glob(os.path.join(out, "part-*")) and os.path.exists(os.path.join(out, "stats.json")):
        return out
    from luminamoon.cli.config import default_config
    from luminamoon.cli.demo_corpus import generate
    from luminamoon.cli.runner import run_corpus

    info = generate(os.path.join(folder, "corpus"), size_mb=size_mb, seed=7)
    run_corpus(info["paths"], out, default_config(), overwrite=True, quiet=True, report=False)
    return out


def save_checkpoint(path: str, model, opt, loader, step: int, epoch: int, batches_in_epoch: int) -> None:
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step, "epoch": epoch,
             "batches_in_epoch": batches_in_epoch, "loader": loader_state(loader, batches_in_epoch),
             "rng": torch.get_rng_state()}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a crash leaves the previous checkpoint


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="a `luminamoon run` output folder (default: generate demo data)")
    p.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "luminamoon-example"),
                   help="folder for demo data and the checkpoint")
    p.add_argument("--steps", type=int, default=120)
    p.add_argument("--quick", action="store_true", help="a short run for tests: 24 steps, tiny model")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-len", type=int, default=160)
    p.add_argument("--ckpt-every", type=int, default=40)
    p.add_argument("--stop-at", type=int, help="checkpoint at this step and stop (to try --resume)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --work")
    p.add_argument("--log", help="write one JSON line per step (step, batch digest, loss)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--backend", default=None,
                   help="torch.compile backend (default inductor; --quick: aot_eager, which traces the same "
                        "full graph, with the ops' fake kernels, but skips C++ code generation)")
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "max_len", "ckpt_every"):
        v = getattr(args, name)
        if v < (0 if name == "steps" else 1):
            p.error(f"--{name.replace('_', '-')} must be {'>= 0' if name == 'steps' else 'positive'}, got {v}")
    if args.quick:
        args.steps = min(args.steps, 24)
        args.ckpt_every = min(args.ckpt_every, 8)
        args.max_len = min(args.max_len, 128)
    torch.manual_seed(args.seed)
    os.makedirs(args.work, exist_ok=True)
    data = args.data or demo_data(os.path.join(args.work, "data"), size_mb=1.0 if args.quick else 4.0)
    ds = Documents(data)
    if len(ds) < args.batch_size:  # drop_last=True: an epoch would hold no batch, and the loop never end
        raise SystemExit(f"{data} holds {len(ds):,} document(s), fewer than --batch-size {args.batch_size}: "
                         f"an epoch would yield no batch. Pass --batch-size {max(len(ds), 1)} or less, or more data")
    loader, loader_kind = make_loader(ds, args.batch_size, args.seed, args.max_len)
    model = ByteLM(max_len=args.max_len, dim=48 if args.quick else 64, layers=2 if args.quick else 3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    backend = args.backend or ("aot_eager" if args.quick else "inductor")
    # Only the payload's length changes from batch to batch: it is the one dynamic dimension
    # (marked below); every shape after pad_bytes is static, which keeps compilation short.
    step_fn = model if args.no_compile else torch.compile(model, fullgraph=True, dynamic=False, backend=backend)
    ckpt = os.path.join(args.work, "checkpoint.pt")
    step = epoch = done_in_epoch = 0
    if args.resume:
        if not os.path.exists(ckpt):
            raise SystemExit(f"--resume: no checkpoint at {ckpt}")
        st = torch.load(ckpt, weights_only=False)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["optimizer"])
        torch.set_rng_state(st["rng"])
        step, epoch, done_in_epoch = st["step"], st["epoch"], st["batches_in_epoch"]
        load_loader_state(loader, st["loader"])
        print(f"resumed at step {step} (epoch {epoch}, batch {done_in_epoch} of the epoch)")
    log = open(args.log, "a") if args.log else None
    print(f"{len(ds):,} documents from {data}; loader: {loader_kind}; "
          f"{sum(p.numel() for p in model.parameters()):,} parameters; "
          f"torch.compile: {'off' if args.no_compile else f'fullgraph, backend={backend}'}")
    t0 = time.perf_counter()
    loss_value = None  # no step in this call (--steps 0, or resumed at the end)
    resumed_epoch = args.resume
    while step < args.steps:
        if hasattr(loader, "_lm_sampler"):
            loader._lm_sampler.epoch = epoch
        elif not resumed_epoch:
            # each epoch's order is a function of (seed, epoch) only, so a run resumed in an
            # earlier epoch shuffles the later ones exactly as the uninterrupted run does
            loader._lm_gen.manual_seed(loader._lm_seed + epoch)
        resumed_epoch = False
        steps_before = step
        for batch in loader:
            st_batch = _as_string_tensor(batch)
            offsets, payload = st_batch.to_gpu_buffers()
            if not args.no_compile:
                torch._dynamo.mark_dynamic(payload, 0)
            loss = step_fn(offsets, payload)
            loss_value = float(loss.detach())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            done_in_epoch += 1
            digest = int(torch.ops.luminamoon.hash64(offsets, payload, 0).sum())
            if log:
                log.write(json.dumps({"step": step, "digest": digest, "loss": round(loss_value, 6)}) + "\n")
                log.flush()
            if step % 10 == 0 or step == 1:
                print(f"step {step:5d}  loss {loss_value:.4f}  ({time.perf_counter() - t0:.1f} s)", flush=True)
            if step % args.ckpt_every == 0 or step == args.stop_at:
                save_checkpoint(ckpt, model, opt, loader, step, epoch, done_in_epoch)
            if step == args.stop_at:
                print(f"stopped at step {step} after a checkpoint; continue with --resume")
                return 0
            if step >= args.steps:
                break
        else:
            if step == steps_before and done_in_epoch == 0:  # a whole epoch without a batch: never spin
                raise SystemExit(f"epoch {epoch} yielded no batch ({len(ds):,} documents, --batch-size "
                                 f"{args.batch_size})")
            epoch += 1
            done_in_epoch = 0
            continue
        break
    save_checkpoint(ckpt, model, opt, loader, step, epoch, done_in_epoch)
    final = f"final loss {loss_value:.4f}" if loss_value is not None else "no step run in this call"
    print(f"done: {step} steps in {time.perf_counter() - t0:.1f} s, {final}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
