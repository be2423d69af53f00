import gzip
import json
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# LM_NO_CORPUS=1 runs the suite as on a machine without the shared corpus.
CORPUS = (ROOT / "no-corpus" if os.environ.get("LM_NO_CORPUS") == "1"
          else ROOT.parent / "shared" / "corpus" / "debian-dev.jsonl.gz")


def corpus_texts(limit=None):
    """Texts of the shared corpus (skips the test when the corpus is absent)."""
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    out = []
    with gzip.open(CORPUS, "rt", encoding="utf-8") as f:
        for line in f:
            out.append(json.loads(line)["text"])
            if limit is not None and len(out) >= limit:
                break
    return out
