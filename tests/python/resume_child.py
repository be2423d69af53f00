"""Child process of the crash tests: runs a ResumablePipeline over a JSONL corpus and
appends every received batch to an output file, committing every few batches.

    python resume_child.py CORPUS STATE_DIR OUT_FILE BATCH_SIZE COMMIT_EVERY [PREFETCH]

The output file is made durable before each commit and its committed length goes
into the commit's ``extra``; on start the file is cut back to that length, so the
file always equals the concatenation of the committed outputs of all runs.
Prints READY once iterating, DONE at the end.
"""
import json
import os
import sys

from luminamoon.data import JsonlSource, ResumablePipeline


def main() -> None:
    corpus, state_dir, out_path = sys.argv[1:4]
    batch_size, commit_every = int(sys.argv[4]), int(sys.argv[5])
    prefetch = int(sys.argv[6]) if len(sys.argv) > 6 else 4
    with ResumablePipeline(JsonlSource(corpus), batch_size=batch_size, prefetch_batches=prefetch,
                           state_dir=state_dir) as pipe:
        committed = (pipe.resume_extra or {}).get("out_bytes", 0)
        with open(out_path, "ab") as f:
            f.truncate(committed)
            f.seek(committed)
            print("READY", flush=True)
            for batch in pipe:
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
