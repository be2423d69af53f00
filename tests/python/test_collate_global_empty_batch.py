"""The collate with a shared GlobalDedup: a batch whose documents the stages all drop gave
``ValueError: both buffer length (0) and count (-1) must not be 0`` (torch.frombuffer of the
server's empty answer) and ended the epoch; it is an empty batch now, and the batches after it
are delivered and deduplicated as before."""
import os
import sys

import pytest
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, os.path.dirname(__file__))
from test_collate import doc  # noqa: E402

from luminamoon.data import create_resumable_collate, start_global_dedup  # noqa: E402


@pytest.mark.filterwarnings("ignore:create_resumable_collate. the shared GlobalDedup")
def test_all_dropped_batches_with_a_global_dedup():
    good = [{"text": doc(i)} for i in range(24)]
    short = [{"text": "x"}] * 8  # too short for the quality filter: every document dropped
    docs = short + good[:8] + short + good[8:] + good[:8]  # the last 8 are duplicates
    server = start_global_dedup()
    try:
        collate = create_resumable_collate(dedup=server, return_string_tensor=True)
        got = [st.tolist() for st in DataLoader(docs, batch_size=8, collate_fn=collate)]
        assert [len(b) for b in got] == [0, 8, 0, 8, 8, 0]
        kept = [t for b in got for t in b]
        assert len(set(kept)) == 24 and all(t.startswith(f"Document {i} ") for i, t in enumerate(kept))
        assert server.lsn == 24
        # a second pass, two workers: every good document is already in the table (it spans epochs)
        collate = create_resumable_collate(dedup=server, return_string_tensor=True)
        got = [st.tolist() for st in DataLoader(docs, batch_size=8, collate_fn=collate, num_workers=2)]
        assert [len(b) for b in got] == [0] * 6 and server.lsn == 24
    finally:
        server.close()


def test_all_dropped_batch_tokenized_with_a_global_dedup():
    server = start_global_dedup()
    try:
        collate = create_resumable_collate(dedup=server, max_length=64)
        out = collate([{"text": "x"}] * 4)
        assert out["input_ids"].shape == (0, 64) and out["lengths"].numel() == 0
        out = collate([{"text": doc(i)} for i in range(4)])
        assert out["input_ids"].shape == (4, 64) and torch.equal(out["lengths"], out["attention_mask"].sum(1))
    finally:
        server.close()
