"""Child for the collate crash loop: a StatefulDataLoader over a collate with per-pass dedup, checkpointed after
every batch (the delivered rows and loader.state_dict() in one file, replaced atomically), resumed from it.

usage: collate_child.py CHECKPOINT N_DOCS EPOCHS [DELAY_S] (prints READY after its first checkpoint, DONE at the end;
DELAY_S: a pause after each checkpoint, so that the parent's kill lands before the run ends)
"""
import os
import pickle
import sys
import time

from torchdata.stateful_dataloader import StatefulDataLoader

from luminamoon.data import create_resumable_collate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_collate import dataset_with_copies  # noqa: E402


def run(ckpt, n, epochs, delay=0.0):
    docs = dataset_with_copies(n)
    collate = create_resumable_collate(return_string_tensor=True)
    loader = StatefulDataLoader(collate.stateful(docs), batch_size=8, collate_fn=collate, num_workers=2,
                                persistent_workers=True)
    done = {"epoch": 0, "rows": [], "state": None}
    if os.path.exists(ckpt):
        with open(ckpt, "rb") as f:
            done = pickle.load(f)
        if done["state"] is not None:
            loader.load_state_dict(done["state"])
    ready = False
    while done["epoch"] < epochs:
        for st in loader:
            rows = done["rows"] + [(done["epoch"], t) for t in st.tolist()]
            new = {"epoch": done["epoch"], "rows": rows, "state": loader.state_dict()}
            with open(ckpt + ".tmp", "wb") as f:
                pickle.dump(new, f)
            os.replace(ckpt + ".tmp", ckpt)
            done = new
            if not ready:  # progress made in this run: the parent may kill it from now on
                print("READY", flush=True)
                ready = True
            if delay:
                time.sleep(delay)
        done = {"epoch": done["epoch"] + 1, "rows": done["rows"], "state": None}
        with open(ckpt + ".tmp", "wb") as f:
            pickle.dump(done, f)
        os.replace(ckpt + ".tmp", ckpt)
    print("DONE", flush=True)


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]) if len(sys.argv) > 4 else 0.0)
