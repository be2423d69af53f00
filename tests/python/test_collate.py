"""create_resumable_collate with DataLoader (workers, pin_memory, persistent workers) and StatefulDataLoader."""
import pickle
import random

import pytest
import torch
from torch.utils.data import DataLoader

from luminamoon import StringTensor
from luminamoon.data import create_resumable_collate, start_global_dedup

WORDS = ("the data pipeline reads many documents and cleans them before training a model on the text because "
         "quality matters for every language model we build with care").split()


def doc(i):
    """A document that passes the quality filters (enough words, sentences, punctuation)."""
    r = random.Random(i)
    sents = [" ".join(r.choice(WORDS) for _ in range(r.randint(8, 14))).capitalize() + "." for _ in range(8)]
    return (f"Document {i} is about topic {i % 13}. " + " ".join(sents[:4]) + "\n" + " ".join(sents[4:])
            + f" Mail me at u{i}@example.org if you have questions.")


DOCS = [{"id": i, "text": doc(i)} for i in range(240)]
DOCS += [dict(d) for d in DOCS[:40]]  # duplicates


def byte_rows(batch):
    return [bytes(r[:n].tolist()).decode() for r, n in zip(batch["input_ids"], batch["lengths"])]


def test_collate_output_and_pickling():
    collate = create_resumable_collate(max_length=64, pipeline=None)
    out = collate(DOCS[:3])
    assert set(out) == {"input_ids", "attention_mask", "lengths"}
    assert out["input_ids"].shape == (3, 64) and out["input_ids"].dtype == torch.int64
    assert byte_rows(out) == [d["text"].encode()[:64].decode("utf-8", "ignore") for d in DOCS[:3]]
    assert out["attention_mask"].sum(1).tolist() == out["lengths"].tolist()
    again = pickle.loads(pickle.dumps(collate))
    assert torch.equal(again(DOCS[:3])["input_ids"], out["input_ids"])
    st = create_resumable_collate(pipeline=None, return_string_tensor=True)(["a", "b"])
    assert isinstance(st, StringTensor) and st.tolist() == ["a", "b"]


def test_collate_runs_the_pipeline_and_bos_eos():
    collate = create_resumable_collate(max_length=None, bos_id=256, eos_id=257, return_string_tensor=False)
    out = collate(DOCS[:8] + DOCS[:2])  # two duplicates within the batch
    assert out["input_ids"].shape[0] == 8
    assert (out["input_ids"][:, 0] == 256).all()
    ends = out["input_ids"][torch.arange(8), out["lengths"] - 1]
    assert (ends == 257).all()
    texts = create_resumable_collate(return_string_tensor=True)(DOCS[:2])
    assert all("@example.org" not in t for t in texts.tolist())  # e-mail addresses masked


def test_collate_with_a_callable_tokenizer():
    tok = lambda texts: [[len(w) for w in t.split()] for t in texts]  # noqa: E731
    out = create_resumable_collate(pipeline=None, tokenizer=tok, max_length=5)(["a bb ccc", "dddd"])
    assert out["input_ids"].tolist() == [[1, 2, 3, 0, 0], [4, 0, 0, 0, 0]]
    assert out["lengths"].tolist() == [3, 1]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_workers_pin_memory_persistent(num_workers):
    collate = create_resumable_collate(max_length=96, dedup=None)
    kw = dict(num_workers=num_workers, pin_memory=True)
    if num_workers:
        kw.update(persistent_workers=True)
    loader = DataLoader(DOCS, batch_size=16, collate_fn=collate, **kw)
    want = [collate(DOCS[i:i + 16]) for i in range(0, len(DOCS), 16)]
    for epoch in range(2):  # a second epoch reuses the persistent workers
        got = list(loader)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert torch.equal(g["input_ids"], w["input_ids"]) and torch.equal(g["lengths"], w["lengths"])


def test_per_worker_dedup_with_one_worker_is_exact():
    collate = create_resumable_collate(max_length=200, dedup="worker", return_string_tensor=True)
    loader = DataLoader(DOCS, batch_size=16, collate_fn=collate, num_workers=1)
    texts = [t for st in loader for t in st.tolist()]
    assert len(texts) == len(set(texts)) == 240


def test_global_dedup_across_workers():
    server = start_global_dedup()
    try:
        collate = create_resumable_collate(dedup=server, return_string_tensor=True)
        loader = DataLoader(DOCS, batch_size=16, collate_fn=collate, num_workers=2)
        texts = [t for st in loader for t in st.tolist()]
        assert len(texts) == len(set(texts)) == 240  # every document once, across both workers
        assert server.lsn == 240
    finally:
        server.close()


def test_stateful_dataloader_resume_mid_epoch():
    sdl = pytest.importorskip("torchdata.stateful_dataloader")
    collate = create_resumable_collate(max_length=128, dedup=None)

    def make():
        return sdl.StatefulDataLoader(DOCS, batch_size=16, collate_fn=collate, num_workers=2)

    full = [b["input_ids"] for b in make()]
    loader = make()
    it = iter(loader)
    head = [next(it)["input_ids"] for _ in range(6)]
    state = loader.state_dict()
    del it, loader
    resumed = make()
    resumed.load_state_dict(state)
    tail = [b["input_ids"] for b in resumed]
    assert len(head) + len(tail) == len(full)
    assert all(torch.equal(a, b) for a, b in zip(head + tail, full))


def test_collate_bad_input():
    with pytest.raises(ValueError, match="pipeline"):
        create_resumable_collate(pipeline="nope")
    with pytest.raises(ValueError, match="start_global_dedup"):
        create_resumable_collate(dedup="global")
    with pytest.raises(TypeError, match="tokenizer"):
        create_resumable_collate(tokenizer=3)
    with pytest.raises(ValueError, match="max_length"):
        create_resumable_collate(max_length=0)
    with pytest.raises(TypeError, match=r"sample 1: expected str or a dict"):
        create_resumable_collate(pipeline=None)([{"text": "ok"}, {"body": "x"}])
