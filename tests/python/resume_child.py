"""Child process of the crash tests: runs a ResumablePipeline over a JSONL corpus and
appends every received batch to an output file, committing every few batches.

    python resume_child.py CORPUS STATE_DIR OUT_FILE BATCH_SIZE COMMIT_EVERY [PREFETCH]

The output file is made durable before each commit and its committed length goes
into the commit's ``extra``; on start the file is cut back to that length, so the
file always equals the concatenation of the committed outputs of all runs.
Prints READY once iterating, DONE at the end.

Environment: LM_CHILD_PII_MODE=datatrove masks PII in datatrove mode (its replacement
cycle must survive the kills); LM_CHILD_COMMIT_FIRST=1 commits while the first batch
of each run is being produced (nothing received yet: the commit must be the start
or the last commit); with LM_CHILD_DIE_AFTER_FIRST_COMMIT=1 too, the child then kills
itself with SIGKILL (so the next run resumes from that commit).  LM_CHILD_NEAR_DEDUP=1 turns
near-duplicate removal on (NearDeduplicator, beside exact dedup) and the quality filter off (so
that many documents reach the near stage).
"""
import itertools
import json
import os
import random
import signal
import sys
import threading

from luminamoon.data import JsonlSource, ResumablePipeline


def main() -> None:
    corpus, state_dir, out_path = sys.argv[1:4]
    batch_size, commit_every = int(sys.argv[4]), int(sys.argv[5])
    prefetch = int(sys.argv[6]) if len(sys.argv) > 6 else 4
    pii_mode = os.environ.get("LM_CHILD_PII_MODE")
    stages = {"pii": {"mode": pii_mode}} if pii_mode else None
    near = os.environ.get("LM_CHILD_NEAR_DEDUP") == "1"
    if near:
        stages = dict(stages or {}, quality=False)
    commit_first = os.environ.get("LM_CHILD_COMMIT_FIRST") == "1"
    in_batch, go = threading.Event(), threading.Event()
    pause_at = random.randrange(batch_size)

    class PausingSource(JsonlSource):
        """Stops the producer in the middle of the first batch until the commit is made."""

        def _records(self):
            n = 0
            for i, rec in enumerate(super()._records()):
                if commit_first and i == pause_at:
                    in_batch.set()
                    go.wait(30)
                n += 1
                yield rec
            if commit_first and n <= pause_at:  # fewer records left than pause_at (or none: a finished run)
                in_batch.set()
                go.wait(30)

    with ResumablePipeline(PausingSource(corpus), batch_size=batch_size, prefetch_batches=prefetch,
                           state_dir=state_dir, stages=stages, near_dedup=near) as pipe:
        committed = (pipe.resume_extra or {}).get("out_bytes", 0)
        with open(out_path, "ab") as f:
            f.truncate(committed)
            f.seek(committed)
            print("READY", flush=True)
            batches = iter(pipe)
            if commit_first:
                box = {}
                th = threading.Thread(target=lambda: box.setdefault("b", next(batches, None)))
                th.start()
                if in_batch.wait(10):  # the producer is mid-batch, the consumer waits: nothing received
                    pipe.commit(extra={"out_bytes": committed})  # must be the last commit again
                    if os.environ.get("LM_CHILD_DIE_AFTER_FIRST_COMMIT") == "1":
                        os.kill(os.getpid(), signal.SIGKILL)
                go.set()
                th.join()
                batches = itertools.chain([box["b"]] if box.get("b") is not None else [], batches)
            for batch in batches:
                ids = [r["id"] for r in batch.records]
                line = {"batch": batch.index, "reasons": batch.reasons.tolist(),
                        "kept": list(zip([ids[i] for i in batch.source_index.tolist()], batch.texts.tolist()))}
                f.write((json.dumps(line) + "\n").encode())
                if (batch.index + 1) % commit_every == 0:
                    f.flush()
                    os.fsync(f.fileno())
                    pipe.commit(extra={"out_bytes": f.tell()})
            f.flush()
            os.fsync(f.fileno())
            pipe.commit(extra={"out_bytes": f.tell()})
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
