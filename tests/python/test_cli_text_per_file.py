"""``--text-per-file`` (input.text_per='file') on input that is not text was ignored without a word:
a user who asked for one document per file got one per JSONL record.  Refused (exit 2, nothing
written); on text input it still reads each file as one document."""
import json

from luminamoon.cli import main

QUIET = ["-q", "--no-quality", "--no-pii", "--no-dedup"]


def test_text_per_file_on_jsonl_is_refused(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"text": f"document {i} with words"}) + "\n" for i in range(3)))
    out = tmp_path / "out"
    assert main(["run", str(src), "-o", str(out), *QUIET, "--text-per-file"]) == 2
    err = capsys.readouterr().err
    assert "--text-per-file" in err and "jsonl" in err
    assert not out.exists()


def test_text_per_file_on_text_reads_each_file_whole(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    want = []
    for i in range(3):
        want.append(f"line one of file {i}\nline two of file {i}\n")
        (d / f"f{i}.txt").write_text(want[-1])
    out = tmp_path / "out"
    assert main(["run", str(d), "-o", str(out), *QUIET, "--no-clean", "--text-per-file", "--format", "jsonl"]) == 0
    texts = [json.loads(line)["text"] for p in sorted(out.glob("*.jsonl")) for line in open(p)]
    assert sorted(texts) == want  # one document per file, byte for byte
