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


def test_group_by_keeps_values_of_different_types_apart(tmp_path):
    """--group-by: the number 1 and the string "1" (and true / "true", null / "(none)") were merged
    into one group; they are separate groups, each counted once."""
    vals = [1, "1", True, "true", None, "(none)", "en", 1, "en"]
    src = tmp_path / "g.jsonl"
    with open(src, "w") as f:
        for i, v in enumerate(vals):
            rec = {"text": f"document number {i} with several words in it"}
            if v is not None:
                rec["lang"] = v
            f.write(json.dumps(rec) + "\n")
    out = tmp_path / "out"
    assert main(["run", str(src), "-o", str(out), *QUIET, "--group-by", "lang", "--format", "jsonl"]) == 0
    groups = json.load(open(out / "stats.json"))["by_group"]["groups"]
    want = {}
    for v in vals:
        key = json.dumps(v) if v is not None and not isinstance(v, str) else v
        key = "(none)" if v is None else key
        want[(type(v).__name__, key)] = want.get((type(v).__name__, key), 0) + 1
    assert len(groups) == len(want) == 7  # was 4: 1 / "1", true / "true", null / "(none)" merged
    assert sorted(sum(g.values()) for g in groups.values()) == sorted(want.values())
    assert groups["1"]["kept"] == 2 and groups['"1"']["kept"] == 1 and groups["(none)"]["kept"] == 1
    assert groups['"(none)"']["kept"] == 1 and groups["true"]["kept"] == 1 and groups['"true"']["kept"] == 1
