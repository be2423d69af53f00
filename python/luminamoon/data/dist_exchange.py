"""Global exact deduplication across ranks: each 128-bit document hash is owned by
rank ``lo mod world_size`` (the low 64 bits as unsigned); ranks send their
hashes to the owners with ``all_to_all_single``, each owner admits what it
received **in global record order** into its own ``StreamDeduplicator`` and
answers keep/drop the same way back.  Since every copy of a hash meets the
same owner, and the owner admits in stream order, the first occurrence in the
global stream is kept and every later one dropped — exactly what one process
deduplicating the whole stream decides.

Per step and rank three ``all_to_all_single`` calls: the head (16 bytes per peer: the count of
documents sent to it, and the number of records in this step as this rank read them; the count
is -1 from a rank that failed at this step, see ``fail``, and -2 from a rank whose stream ended,
see ``end``), the requests (24 bytes per document: lo, hi, global record index) and the answers
(1 byte per document).  The step sizes are compared on every rank: ranks whose streams differ in
length (a generator or factory that yields other records on another rank) stop with ValueError
at the first step where they differ, all of them, instead of leaving one rank waiting in a
collective the others never enter (until the group timeout).  gloo implements ``all_to_all_single``
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


_FAILED = -1  # the head's count from a rank that failed at this step (fail)
_ENDED = -2   # ... from a rank whose stream ended before this step (end)
_DIFFERENT_STREAMS = ("every rank must read the same stream (a generator or factory must yield the same "
                      "records on every rank; each rank takes its share of every step itself)")


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
        if self.world_size > 1:
            self._head(np.full(self.world_size, _FAILED, dtype=np.int64), -1)

    def end(self) -> None:
        """Collective, in place of ``keep`` after this rank's last step: every rank's stream must
        end here too.  A rank still reading raises ValueError in its ``keep`` (and this one here),
        instead of waiting in a collective this rank never enters."""
        if self.world_size == 1:
            return
        self.busy = True  # an error here: the peers stop in their own head (no fail() after it)
        head = self._head(np.full(self.world_size, _ENDED, dtype=np.int64), -1)
        if (head[:, 0] == _FAILED).any():
            raise PeerFailedError(f"rank(s) {np.flatnonzero(head[:, 0] == _FAILED).tolist()} failed at the step "
                                  "after this rank's last one (the error is raised there)")
        more = np.flatnonzero(head[:, 0] != _ENDED).tolist()
        if more:
            raise ValueError(f"this rank's stream ended, but rank(s) {more} read another step of "
                             f"{int(head[more[0], 1])} record(s): {_DIFFERENT_STREAMS}")
        self.busy = False

    def _head(self, counts: np.ndarray, step_items: int) -> np.ndarray:
        """The step's first collective: (count sent to each peer, this step's record count) out,
        [W, 2] in (row r: what rank r sent this rank)."""
        W = self.world_size
        send = torch.empty((W, 2), dtype=torch.int64)
        send[:, 0] = torch.from_numpy(np.ascontiguousarray(counts, dtype=np.int64))
        send[:, 1] = int(step_items)
        return self._a2a(send, [1] * W, [1] * W).numpy()

    def _a2a(self, send: torch.Tensor, in_splits, out_splits) -> torch.Tensor:
        import torch.distributed as dist

        n_out = int(sum(out_splits))
        if self.device is not None:
            send = send.to(self.device)
        out = torch.empty((n_out,) + tuple(send.shape[1:]), dtype=send.dtype, device=send.device)
        dist.all_to_all_single(out, send, output_split_sizes=list(out_splits), input_split_sizes=list(in_splits),
                               group=self.group)
        return out.cpu()

    def keep(self, hashes: torch.Tensor, gidx: torch.Tensor, step_items: int = -1) -> torch.Tensor:
        """hashes int64 [N, 2], gidx int64 [N] (global record indices, increasing) -> bool [N].
        ``step_items``: the number of records in this step as this rank read them (compared across
        ranks: ValueError on every rank when they differ; -1: not compared)."""
        t0 = time.perf_counter()
        self.busy = True
        try:
            out = self._keep(hashes, gidx, step_items)
            self.busy = False
            return out
        finally:
            self.seconds += time.perf_counter() - t0

    def _keep(self, hashes: torch.Tensor, gidx: torch.Tensor, step_items: int) -> torch.Tensor:
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
        head = self._head(counts, step_items)
        recv_counts = np.ascontiguousarray(head[:, 0])
        failed = np.flatnonzero(recv_counts == _FAILED).tolist()  # ranks that called fail() for this step
        if failed:
            raise PeerFailedError(f"rank(s) {failed} failed at this step (the error is raised there); "
                                  "this rank stops too, nothing of this step was admitted")
        ended = np.flatnonzero(recv_counts == _ENDED).tolist()
        if ended:
            raise ValueError(f"rank(s) {ended} reached the end of their stream before this step, in which this "
                             f"rank read {step_items} record(s): {_DIFFERENT_STREAMS}; nothing of this step "
                             "was admitted")
        sizes = head[:, 1]
        if step_items >= 0 and ((sizes >= 0) & (sizes != step_items)).any():
            per_rank = {r: int(x) for r, x in enumerate(sizes.tolist()) if x >= 0}
            raise ValueError(f"the ranks read steps of different sizes (records per rank in this step: "
                             f"{per_rank}): {_DIFFERENT_STREAMS}; nothing of this step was admitted")
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
