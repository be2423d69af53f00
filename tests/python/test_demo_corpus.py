"""The embedded demo corpus: deterministic, valid JSONL, every kind of page and
every PII type present, checksums right (checked with independent code)."""
import glob
import hashlib
import json
import os
import re

import pytest

from luminamoon.cli.demo_corpus import KINDS, generate, iban_check_digits, iter_documents, luhn_check_digit


def _luhn_valid(number: str) -> bool:
    # the textbook formulation: double every second digit from the right, sum the digits
    digits = [int(c) for c in number][::-1]
    s = 0
    for i, d in enumerate(digits):
        if i % 2 == 1:
            d = d * 2
            s += d // 10 + d % 10
        else:
            s += d
    return s % 10 == 0


def _iban_valid(iban: str) -> bool:
    iban = iban.replace(" ", "")
    moved = iban[4:] + iban[:4]
    num = "".join(str(ord(c) - 55) if c.isalpha() else c for c in moved)
    return int(num) % 97 == 1


def _digest(folder):
    h = hashlib.sha256()
    for p in sorted(glob.glob(os.path.join(folder, "web-*"))):
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def test_checksum_helpers_against_known_values():
    assert luhn_check_digit("7992739871") == 3            # the classic Luhn example
    assert _luhn_valid("79927398713") and not _luhn_valid("79927398710")
    assert iban_check_digits("GB", "WEST12345698765432") == "82"  # GB82 WEST 1234 5698 7654 32
    assert iban_check_digits("DE", "370400440532013000") == "89"  # DE89 3704 0044 0532 0130 00


def test_deterministic_and_seed_dependent(tmp_path):
    a = generate(str(tmp_path / "a"), size_mb=0.6, seed=11)
    b = generate(str(tmp_path / "b"), size_mb=0.6, seed=11)
    c = generate(str(tmp_path / "c"), size_mb=0.6, seed=12)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    assert a["documents"] == b["documents"] and a["kinds"] == b["kinds"]


def test_size_shards_and_valid_jsonl(tmp_path):
    info = generate(str(tmp_path), size_mb=2.0, seed=3, shard_mb=0.5)
    assert len(info["paths"]) >= 4
    total = sum(os.path.getsize(p) for p in info["paths"])
    assert total == info["bytes"]
    assert 1.9e6 <= total <= 2.2e6
    n = 0
    surrogate_lines = 0
    ids = set()
    for p in info["paths"]:
        with open(p, "rb") as f:
            for raw in f:
                line = raw.decode("utf-8")  # every file is valid UTF-8
                rec = json.loads(line)
                assert set(rec) == {"id", "url", "kind", "lang", "text"}
                assert rec["kind"] in KINDS
                ids.add(rec["id"])
                if re.search(r"\\ud[c-f][0-9a-f]{2}", line):
                    surrogate_lines += 1
                n += 1
    assert n == info["documents"] == len(ids)
    assert surrogate_lines > 0  # undecodable bytes, as JSON carries them
    # a second call replaces the shards rather than adding to them
    generate(str(tmp_path), size_mb=0.3, seed=3, shard_mb=0.5)
    assert len(glob.glob(str(tmp_path / "web-*"))) == 1


def test_every_kind_present_with_plausible_shares():
    docs = list(iter_documents(3_000_000, seed=5))
    kinds = {}
    for d in docs:
        kinds[d["kind"]] = kinds.get(d["kind"], 0) + 1
    assert set(kinds) == set(KINDS)
    for k, share in KINDS.items():
        assert abs(kinds[k] / len(docs) - share) < 0.05, (k, kinds[k] / len(docs))
    texts = {}
    for d in docs:
        texts.setdefault(d["text"], []).append(d["kind"])
    exact = [d for d in docs if d["kind"] == "exact_duplicate"]
    assert all(len(texts[d["text"]]) >= 2 for d in exact)  # each is a copy of an earlier page
    langs = {d["lang"] for d in docs}
    assert {"en", "de", "fr", "zh", "ru"} <= langs
    assert any(d["text"] == "" for d in docs if d["kind"] == "short")


def test_pii_values_are_valid():
    cards = ibans = 0
    iban_re = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){3,7}(?: ?[A-Z0-9]{1,3})?\b")
    for d in iter_documents(2_000_000, seed=9):
        if d["kind"] != "article_pii":
            continue
        for m in iban_re.finditer(d["text"]):
            ibans += 1
            assert _iban_valid(m.group()), m.group()
        rest = iban_re.sub(" IBAN ", d["text"])  # card-like digit runs inside IBANs are not cards
        for m in re.finditer(r"(?<![\d-])(?:\d[ -]?){14,15}\d(?![\d-])", rest):
            num = re.sub(r"[ -]", "", m.group())
            if len(num) in (15, 16) and num[0] in "345":
                assert _luhn_valid(num), num
                cards += 1
    assert cards > 20 and ibans > 20


def test_pii_masker_finds_every_type_in_the_corpus():
    stages = pytest.importorskip("luminamoon.stages")
    texts = [d["text"] for d in iter_documents(1_500_000, seed=2) if d["kind"] == "article_pii"]
    m = stages.PIIMasker()
    found = set()
    for t in texts:
        for span in m.find(t):
            found.add(span[0] if isinstance(span[0], str) else stages.PII_TYPES[span[0]])
    assert set(stages.PII_TYPES) <= found, set(stages.PII_TYPES) - found


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        generate(str(tmp_path), size_mb=0)
    with pytest.raises(ValueError):
        generate(str(tmp_path), size_mb=1, compression="lz4")


def test_size_below_one_document_or_beyond_the_disk_refused_first(tmp_path):
    """1e-7 MB made no shard ("input not found" later); 1e6 MB filled the disk (issue 20)."""
    import errno

    with pytest.raises(ValueError, match="smaller than one document"):
        generate(str(tmp_path / "small"), size_mb=1e-7)
    with pytest.raises(OSError, match="free") as e:
        generate(str(tmp_path / "huge"), size_mb=1e9)
    assert e.value.errno == errno.ENOSPC
    assert not os.path.exists(tmp_path / "small") and not os.path.exists(tmp_path / "huge")
    for bad in (float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="size_mb"):
            generate(str(tmp_path / "x"), size_mb=bad)


@pytest.mark.parametrize("compression", ["gzip", "zstd"])
def test_compressed_shards_read_back(tmp_path, compression):
    if compression == "zstd":
        pytest.importorskip("zstandard")
    from luminamoon.data import JsonlSource

    info = generate(str(tmp_path), size_mb=0.4, seed=1, compression=compression)
    plain = [d["id"] for d in iter_documents(int(0.4e6), seed=1)]
    got = [r["id"] for r in JsonlSource(info["paths"])]
    assert got == plain
