"""Global exact deduplication across ranks: each 128-bit document hash is owned by
rank ``lo mod world_size`` (the low 64 bits as unsigned); ranks send their
hashes to the owners with ``all_to_all_single``, each owner admits what it
received **in global record order** into its own ``StreamDeduplicator`` and
answers keep/drop the same way back.  Since every copy of a hash meets the
same owner, and the owner admits in stream order, the first occurrence in the
global stream is kept and every later one dropped — exactly what one process
deduplicating the whole stream decides.

Per step and rank three ``all_to_all_single`` calls: the counts (8 bytes per
peer; -1 from a rank that failed at this step, see ``fail``), the requests (24 bytes per document: lo, hi, global record index) and
the answers (1 byte per document).  gloo implements ``all_to_all_single``
(``alltoall_base``) but not the list form ``all_to_all``, hence the single-
tensor form with split sizes.  With an NCCL exchange group the tensors are
moved to the current CUDA device.
"""
from __future__ import annotations

import time
from typing import Optional

import numpy as np
import torch

from .dist_state import owner_of

__all__ = ["HashExchange", "PeerFailedError"]


class PeerFailedError(RuntimeError):
    """Raised on every rank of a step at which another rank failed (its own error is
    raised there): the ranks stop together instead of waiting for the group timeout."""


class HashExchange:
    """Owner-rule dedup over a process group.

    ``dedup``: this rank's ``StreamDeduplicator`` (the table of the hashes it
    owns).  ``keep(hashes, gidx)`` -> bool [N]: True for the documents that
    are the first of their hash in the global stream so far.  Collective: all
    ranks of ``group`` call it for the same step.

    Counters: ``bytes_sent`` / ``bytes_received`` (to/from other ranks; the
    part a rank sends itself is not counted), ``docs``, ``steps``, ``seconds``
    (wall time inside ``keep``: the collectives, including waiting for the
    slowest rank, and the owner's admissions).
    """

    def __init__(self, dedup, group, rank: int, world_size: int, device: Optional[torch.device] = None):
        self.dedup = dedup
        self.group = group
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.bytes_sent = 0
        self.bytes_received = 0
        self.docs = 0
        self.steps = 0
        self.seconds = 0.0
        self.busy = False  # inside keep(): an error there left the step's collectives half done

    def fail(self) -> None:
        """Collective, in place of ``keep`` for the step at which this rank failed: tells
        every rank (whose ``keep`` then raises PeerFailedError) and admits nothing."""
        W = self.world_size
        if W > 1:
            self._a2a(torch.full((W,), -1, dtype=torch.int64), [1] * W, [1] * W)

    def _a2a(self, send: torch.Tensor, in_splits, out_splits) -> torch.Tensor:
        import torch.distributed as dist

        n_out = int(sum(out_splits))
        if self.device is not None:
            send = send.to(self.device)
        out = torch.empty((n_out,) + tuple(send.shape[1:]), dtype=send.dtype, device=send.device)
        dist.all_to_all_single(out, send, output_split_sizes=list(out_splits), input_split_sizes=list(in_splits),
                               group=self.group)
        return out.cpu()

    def keep(self, hashes: torch.Tensor, gidx: torch.Tensor) -> torch.Tensor:
        """hashes int64 [N, 2], gidx int64 [N] (global record indices, increasing) -> bool [N]."""
        t0 = time.perf_counter()
        self.busy = True
        try:
            out = self._keep(hashes, gidx)
            self.busy = False
            return out
        finally:
            self.seconds += time.perf_counter() - t0

    def _keep(self, hashes: torch.Tensor, gidx: torch.Tensor) -> torch.Tensor:
        n = hashes.shape[0]
        self.docs += n
        self.steps += 1
        W = self.world_size
        if W == 1:
            return self.dedup.check_insert_hashes(hashes.contiguous())
        owner = owner_of(hashes, W)
        order = np.argsort(owner, kind="stable")  # grouped by owner, stream order inside each group
        counts = np.bincount(owner, minlength=W).astype(np.int64)
        order_t = torch.from_numpy(order)
        payload = torch.cat([hashes, gidx.view(-1, 1)], dim=1)[order_t].contiguous()  # [N, 3]
        recv_counts = self._a2a(torch.from_numpy(counts), [1] * W, [1] * W).numpy()
        failed = np.flatnonzero(recv_counts < 0).tolist()  # ranks that called fail() for this step
        if failed:
            raise PeerFailedError(f"rank(s) {failed} failed at this step (the error is raised there); "
                                  "this rank stops too, nothing of this step was admitted")
        req = self._a2a(payload, counts.tolist(), recv_counts.tolist())
        # Admit in global record order: the received rows sorted by their global index.
        o = torch.argsort(req[:, 2])
        new = self.dedup.check_insert_hashes(req[o, :2].contiguous())
        ans = torch.empty(req.shape[0], dtype=torch.uint8)
        ans[o] = new.to(torch.uint8)
        back = self._a2a(ans, recv_counts.tolist(), counts.tolist())
        keep = torch.empty(n, dtype=torch.bool)
        keep[order_t] = back.bool()
        me = self.rank
        others_out = int(counts.sum() - counts[me])
        others_in = int(recv_counts.sum() - recv_counts[me])
        self.bytes_sent += 8 * (W - 1) + 24 * others_out + others_in
        self.bytes_received += 8 * (W - 1) + 24 * others_in + others_out
        return keep
