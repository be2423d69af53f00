"""The Python stage classes: call protocol, results, counters, parameters,
pipelines, the deduplicator's WAL API, the StateTracker, the GIL.

Expected values come from plain-Python references (str methods, sets, re) or
from the stage contract, not from the stages' own output.
"""
import pickle
import re
import threading
import time

import pyarrow as pa
import pytest
import torch

import luminamoon as lm
from luminamoon import (ChainPipeline, FusedPipeline, PIIMasker, QualityFilter, StageResult, StateTracker,
                        StreamDeduplicator, StringTensor, TextCleaner, reason_name)

_VOCAB = ("package system archive mirror kernel release upload review patch source library module network "
          "server client driver option format parser editor manual screen window device storage memory process "
          "thread signal buffer stream record field value string number letter report answer question problem "
          "solution feature version branch commit merge build test image sound music video picture document "
          "project member people friend family city country river mountain garden flower animal weather season "
          "morning evening history science nature reason method result effect change power energy market").split()
_STOP = "the be to of and that have with".split()


def good_doc(i):
    """An English-like document (distinct per i) that every default quality rule keeps (checked in the tests)."""
    import random

    rng = random.Random(i)
    lines = []
    for _ in range(8):
        sents = []
        for _ in range(3):
            words = [rng.choice(_VOCAB if k % 2 else _STOP) for k in range(12)]
            sents.append(" ".join(words).capitalize() + ".")
        lines.append(" ".join(sents))
    return "\n".join(lines) + f"\nThis is document {i} of the set.\n"


# ------------------------------------------------------------------ results

@pytest.mark.parametrize("kind", ["list", "tuple", "string_tensor", "arrow", "arrow_large", "chunked", "views"])
def test_inputs_of_every_kind(kind):
    texts = ["a  b", "", "c\u00a0d", "a  b"]
    if kind == "list":
        x = texts
    elif kind == "tuple":
        x = tuple(texts)
    elif kind == "string_tensor":
        x = StringTensor.from_list(texts)
    elif kind == "arrow":
        x = pa.array(texts)
    elif kind == "arrow_large":
        x = pa.array(texts, pa.large_string())
    elif kind == "chunked":
        x = pa.chunked_array([texts[:2], texts[2:]])
    else:
        st = StringTensor.from_list(texts)
        x = StringTensor(views=st.views, buffers=st.buffers)
    r = TextCleaner()(x)
    assert isinstance(r, StageResult)
    assert r.texts.tolist() == ["a b", "c d", "a b"]
    assert r.reasons.dtype == torch.int32 and r.reasons.tolist() == [0, lm.stages.REASON_EMPTY, 0, 0]
    assert r.source_index.dtype == torch.int64 and r.source_index.tolist() == [0, 2, 3]
    assert r.kept.tolist() == [True, False, True, True]
    assert r.texts.offsets.dtype == torch.int32  # the StringTensor convention below 2 GiB


def test_reason_names():
    assert reason_name(0) == "kept"
    assert reason_name(1) == "duplicate"
    assert reason_name(2) == "empty"
    assert reason_name(3) == "too_large"
    assert reason_name(16 + lm.stages.QUALITY_RULES["gopher_quality.min_doc_words"]) == "gopher_quality.min_doc_words"
    assert reason_name(torch.tensor(1, dtype=torch.int32)) == "duplicate"
    assert reason_name(999).startswith("unknown")
    assert set(lm.stages.QUALITY_RULE_SETS) == {"gopher_quality", "gopher_repetition", "c4", "fineweb"}
    assert sum(len(v) for v in lm.stages.QUALITY_RULE_SETS.values()) == len(lm.stages.QUALITY_RULES)


def test_empty_batch_everywhere():
    for stage in (TextCleaner(), QualityFilter(), PIIMasker(), StreamDeduplicator(), FusedPipeline(),
                  ChainPipeline()):
        r = stage([])
        assert len(r) == 0 and r.reasons.numel() == 0 and r.source_index.numel() == 0


# ------------------------------------------------------------------ stages

def test_cleaner_against_python_reference():
    raw = ["x\r\ny", "  lead  and  trail   \n\n\n\n\nnext", "ctl\x01\x7fz", "\u2003wide\u3000space", "\t\n \n"]
    r = TextCleaner()(raw)

    def ref(s):
        s = s.replace("\r\n", "\n").replace("\r", "\n")
        s = "".join(ch for ch in s if ch in "\t\n" or not (ord(ch) < 32 or 0x7f <= ord(ch) <= 0x9f))
        s = re.sub(r"[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]", " ", s)
        s = re.sub(r" {2,}", " ", s)
        s = "\n".join(line.rstrip(" \t") for line in s.split("\n"))
        s = re.sub(r"\n{4,}", "\n\n\n", s)
        return s

    expected = [ref(s) for s in raw]
    kept = [e for e in expected if e.strip()]
    assert r.texts.tolist() == kept
    assert r.reasons.tolist() == [0 if e.strip() else 2 for e in expected]
    c = TextCleaner(normalize="NFKC")(["\ufb01le \u2460"])
    assert c.texts.tolist() == ["file 1"]
    assert TextCleaner(max_blank_lines=-1, collapse_spaces=False)(["a  b\n\n\n\n\nc"]).texts.tolist() == \
        ["a  b\n\n\n\n\nc"]


def test_cleaner_counters_and_reset():
    t = TextCleaner()
    t(["a", "", "b\x00"])
    c = t.counters
    assert c["docs_in"] == 3 and c["docs_kept"] == 2 and c["docs_empty"] == 1 and c["control_removed"] == 1
    t.reset_counters()
    assert t.counters["docs_in"] == 0


def test_quality_rules_selection_and_thresholds():
    short = "too short to pass"
    assert reason_name(QualityFilter(rules=["gopher_quality"])([short]).reasons[0]) == "gopher_quality.min_doc_words"
    # rule off -> the next rule of the set decides
    q = QualityFilter(rules=["gopher_quality.max_doc_words"])
    assert q([short]).kept.tolist() == [True]
    assert q.rules == ["gopher_quality.max_doc_words"]
    # a threshold by name
    assert QualityFilter(rules=["gopher_quality.min_doc_words"], gq_min_doc_words=3)([short]).kept.tolist() == [True]
    assert QualityFilter(rules="gopher_quality.min_doc_words")([short]).kept.tolist() == [False]
    docs = [good_doc(i) for i in range(3)]
    r = QualityFilter()(docs)
    assert r.kept.all(), [reason_name(x) for x in r.reasons]
    assert QualityFilter(rules=[])(["", "x"]).kept.tolist() == [True, True]
    d = QualityFilter.defaults()
    assert d["gq_min_doc_words"] == 50 and d["c4_min_sentences"] == 5
    q = QualityFilter(rules=["c4"])
    q(docs + [docs[0] + "Lorem ipsum dolor sit amet, consectetur adipiscing.\n"])
    assert q.counters["docs_in"] == 4 and q.counters["rules"]["c4.lorem_ipsum"] == 1


def test_quality_bad_arguments():
    with pytest.raises(ValueError, match="valid rule sets: .*gopher_quality"):
        QualityFilter(rules=["gopher"])
    with pytest.raises(TypeError):
        QualityFilter(rules=[1])
    with pytest.raises(TypeError):
        QualityFilter(rules=5)
    with pytest.raises(TypeError, match="unexpected keyword argument 'gq_min_words'"):
        QualityFilter(gq_min_words=3)
    with pytest.raises(TypeError, match="gq_min_doc_words"):
        QualityFilter(gq_min_doc_words="50")
    with pytest.raises(ValueError, match="gq_min_doc_words"):
        QualityFilter(gq_min_doc_words=-1)
    with pytest.raises(ValueError, match="3 entries"):
        QualityFilter(gr_top_ngram_frac=[0.1])


def test_pii_modes_types_replacements():
    text = "mail bob@example.com from 8.8.8.8 or call (555) 867-5309"
    assert PIIMasker()([text]).texts.tolist() == ["mail <EMAIL> from <IP_ADDRESS> or call <PHONE>"]
    assert PIIMasker(types=["email"])([text]).texts.tolist() == ["mail <EMAIL> from 8.8.8.8 or call (555) 867-5309"]
    m = PIIMasker(replacements={"email": ["E1", "E2"]}, types=["email"], cycle_across_documents=True)
    assert m(["a@b.org x", "c@d.org"]).texts.tolist() == ["E1 x", "E2"]
    assert m.counters["matches"]["email"] == 2
    dt = PIIMasker("datatrove")
    assert dt([text]).texts.tolist() == ["mail email@example.com from 22.214.171.124 or call (555) 867-5309"]
    assert dt.find("x bob@example.com y") == [("email", 2, 17)]
    with pytest.raises(ValueError, match="mode"):
        PIIMasker("fast")
    with pytest.raises(ValueError, match="valid: email"):
        PIIMasker(types=["ssn"])
    with pytest.raises(ValueError, match="unknown PII type"):
        PIIMasker(replacements={"ssn": "x"})
    with pytest.raises(TypeError):
        PIIMasker(replacements=["x"])


# Issue 19, PII strict mode: labelled cases (input, what strict mode gives).
PII_STRICT_LABELLED = [
    ("pip install requests==2.31.0.1", "pip install requests==2.31.0.1"),
    ("Firefox 115.0.2.1 is out", "Firefox 115.0.2.1 is out"),
    ('{"version": "1.2.3.4"}', '{"version": "1.2.3.4"}'),
    ("ip.addr == 8.8.8.8", "ip.addr == <IP_ADDRESS>"),
    ("Server 8.8.8.8 is down", "Server <IP_ADDRESS> is down"),
    ("<img src=logo@2x.png>", "<img src=logo@2x.png>"),
    ("ssh root@8.8.4.4", "ssh root@<IP_ADDRESS>"),
    ("mail O'Brien@example.com or a/b@example.com", "mail <EMAIL> or <EMAIL>"),
    ("iban gb82 west 1234 5698 7654 32", "iban <IBAN>"),
    ("iban DE89-3704-0044-0532-0130-00", "iban <IBAN>"),
    ("connexion vers 8.8.8.8 refusée", "connexion vers <IP_ADDRESS> refusée"),
    # the same kinds, found in review
    ("__version__ = '1.2.3.4'", "__version__ = '1.2.3.4'"),
    ("mail müller@example.de or иван@пример.рф", "mail <EMAIL> or <EMAIL>"),
    ("メール：taro@example.jp", "メール：<EMAIL>"),
]


def test_pii_strict_labelled_cases():
    texts = [t for t, _ in PII_STRICT_LABELLED]
    assert PIIMasker()(texts).texts.tolist() == [want for _, want in PII_STRICT_LABELLED]


def test_stage_results_do_not_depend_on_thread_count():
    docs = [good_doc(i % 50) + ("mail x%d@example.org\n" % i) for i in range(600)] + ["", " ", "x"] * 50
    ref = FusedPipeline(num_threads=1)(docs)
    for nt in (2, 3, 7):
        r = FusedPipeline(num_threads=nt)(docs)
        assert torch.equal(r.reasons, ref.reasons) and torch.equal(r.source_index, ref.source_index)
        assert r.texts.equals(ref.texts)


# ------------------------------------------------------------------ dedup

def test_dedup_matches_a_set_across_batches():
    import random

    rng = random.Random(5)
    batches = [[str(rng.randrange(300)) for _ in range(200)] for _ in range(5)]
    d = StreamDeduplicator()
    seen = set()
    for b in batches:
        r = d(b)
        exp = []
        for t in b:
            exp.append(t not in seen)
            seen.add(t)
        assert r.kept.tolist() == exp
        assert r.texts.tolist() == [t for t, k in zip(b, exp) if k]
    assert d.lsn == len(seen) == len(d)
    assert all(str(k) in d for k in seen) and "nope" not in d
    st = d.stats
    assert st["entries"] == len(seen) and st["probes"] == 1000 and st["bytes_per_entry"] > 0


def test_dedup_wal_sync_truncate_snapshot_reopen(tmp_path):
    p = tmp_path / "d.wal"
    with StreamDeduplicator(wal_path=p, seed=11) as d:
        d([f"doc {i}" for i in range(100)])
        assert d.sync() == 100
        d.snapshot()
        d([f"doc {i}" for i in range(100, 150)])
        assert d.lsn == 150
        d.truncate(120)
        assert d.lsn == 120 and "doc 119" in d and "doc 120" not in d
        with pytest.raises(ValueError, match="past the current lsn"):
            d.truncate(500)
        with pytest.raises(TypeError):
            d.truncate("1")
        assert d.path == str(p)
    assert d.closed
    with StreamDeduplicator(wal_path=str(p), seed=11) as d2:
        assert d2.lsn == 120 and len(d2) == 120
        assert "doc 0" in d2 and "doc 119" in d2 and "doc 120" not in d2
        assert d2([f"doc {i}" for i in range(125)]).kept.tolist() == [False] * 120 + [True] * 5
    # another seed on the same log: refused
    with pytest.raises(ValueError, match="seed|argument|invalid"):
        StreamDeduplicator(wal_path=p, seed=12)


def test_dedup_closed_raises_value_error():
    d = StreamDeduplicator()
    d(["a"])
    d.close()
    d.close()  # idempotent
    for call in (lambda: d(["b"]), d.sync, lambda: d.truncate(0), d.snapshot, lambda: "a" in d,
                 lambda: d.check_insert_hashes(torch.zeros(1, 2, dtype=torch.int64))):
        with pytest.raises(ValueError, match="closed"):
            call()
    assert d.lsn == 1 and len(d) == 1  # still answers what it holds
    with pytest.raises(ValueError, match="closed"):
        FusedPipeline(dedup=d)


def test_dedup_hashes_api():
    d = StreamDeduplicator(seed=4)
    h = lm.hash128(["x", "y", "x"], seed=4)
    assert h.shape == (3, 2) and h.dtype == torch.int64
    assert torch.equal(h[0], h[2]) and not torch.equal(h[0], h[1])
    assert d.check_insert_hashes(h).tolist() == [True, True, False]
    assert "x" in d and "y" in d and d.lsn == 2
    with pytest.raises(TypeError):
        d.check_insert_hashes(torch.zeros(3, dtype=torch.int64))


def test_dedup_max_entries():
    d = StreamDeduplicator(max_entries=3)
    d(["a", "b", "c"])
    with pytest.raises(ValueError):
        d(["d"])
    assert d.lsn == 3


# ------------------------------------------------------------------ pipelines

def test_fused_equals_chain_and_shares_the_deduplicator():
    docs = [good_doc(i % 40) + ("Write to a%d@example.org or to the host 8.8.%d.1 today.\n" % (i % 40, i % 40))
            for i in range(300)]
    docs += ["", "short", docs[0]]
    shared = StreamDeduplicator()
    f = FusedPipeline(dedup=shared, pii=PIIMasker("datatrove"))
    c = ChainPipeline(pii=PIIMasker("datatrove"))
    a, b = f(docs), c(docs)
    assert f.dedup is shared
    assert torch.equal(a.reasons, b.reasons) and torch.equal(a.source_index, b.source_index)
    assert a.texts.equals(b.texts)
    assert shared.lsn == c.dedup.lsn == 40
    assert a.reason_counts()["duplicate"] == 300 - 40 + 1
    assert "email@example.com" in a.texts[0]
    # the second batch continues (dedup state and the PII cycle)
    a2, b2 = f(docs[:50]), c(docs[:50])
    assert torch.equal(a2.reasons, b2.reasons) and len(a2) == 0
    cnt = f.counters
    assert cnt["docs_in"] == 353 and cnt["docs_out"] == 40
    assert cnt["dedup"]["inserts"] == 40 and cnt["pii"]["matches"]["email"] == 40
    assert c.counters["pii"]["matches"]["email"] == 40
    f.reset_counters()
    assert f.counters["docs_in"] == 0


def test_pipeline_stage_arguments():
    p = FusedPipeline(cleaner=False, quality=None, dedup=False, pii=False)
    assert p([" a ", "a"]).texts.tolist() == [" a ", "a"]
    p = FusedPipeline(cleaner={"collapse_spaces": False}, quality=False, dedup=False, pii={"mode": "datatrove"})
    assert p(["a  b"]).texts.tolist() == ["a  b"]
    assert isinstance(p.pii, PIIMasker) and p.dedup is None
    with pytest.raises(TypeError, match="quality"):
        FusedPipeline(quality="yes")
    with pytest.raises(TypeError, match="dedup"):
        FusedPipeline(dedup=PIIMasker())
    with pytest.raises(TypeError, match="num_threads"):
        FusedPipeline(num_threads="2")
    with pytest.raises(ValueError, match="num_threads"):
        ChainPipeline(num_threads=0)
    with FusedPipeline() as fp:
        d = fp.dedup
    assert d.closed  # created by the pipeline -> closed with it
    shared = StreamDeduplicator()
    with FusedPipeline(dedup=shared):
        pass
    assert not shared.closed  # the caller's: left open


def test_pickle_stages_and_pipelines_without_dedup():
    for obj in (TextCleaner(normalize="NFC"), QualityFilter(rules=["c4"], c4_min_sentences=2),
                PIIMasker("datatrove"), FusedPipeline(dedup=False), ChainPipeline(dedup=False)):
        clone = pickle.loads(pickle.dumps(obj))
        docs = [good_doc(1), "x@y.org is mail " * 20]
        a, b = obj(docs), clone(docs)
        assert a.texts.equals(b.texts) and torch.equal(a.reasons, b.reasons)
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(StreamDeduplicator())
    with pytest.raises(TypeError, match="pickled"):
        pickle.dumps(FusedPipeline())


def test_wrong_input_types():
    for stage in (TextCleaner(), FusedPipeline(), ChainPipeline()):
        with pytest.raises(TypeError, match="texts"):
            stage("a single string")
        with pytest.raises(TypeError, match="texts"):
            stage(42)
        with pytest.raises(TypeError):
            stage([1, 2])


# ------------------------------------------------------------------ GIL

def test_gil_is_released_while_c_runs():
    docs = StringTensor.from_list([good_doc(i) for i in range(4000)])
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    q = QualityFilter(num_threads=1)
    th = threading.Thread(target=spin)
    th.start()
    try:
        time.sleep(0.01)
        t0 = time.perf_counter()
        q(docs)
        t1 = time.perf_counter()
    finally:
        stop.set()
        th.join()
    during = [t for t in ticks if t0 < t < t1]
    assert t1 - t0 > 0.05, "the call is too short to tell"
    # with the GIL held the other thread could not tick at all during the call
    assert len(during) >= 5, (len(during), t1 - t0)


# ------------------------------------------------------------------ state

def test_state_tracker_roundtrip(tmp_path):
    p = tmp_path / "state"
    with StateTracker(p) as st:
        assert st.load() is None
        assert st.commit(epoch=1, batch_index=2, sample_index=3, source_pos=4, source_pos2=5, shard=6, wal_lsn=7) == 1
        assert st.commit(epoch=1, batch_index=9) == 2
        coord, seq = st.load()
        assert seq == 2 and coord["batch_index"] == 9 and coord["wal_lsn"] == 0
        ins = st.inspect()
        assert {ins["a"]["status"], ins["b"]["status"]} == {"valid"}
        with pytest.raises(TypeError):
            st.commit(epoch="1")
        with pytest.raises(ValueError):
            st.commit(epoch=-1)
        with pytest.raises(ValueError):
            st.commit(epoch=1 << 32)
        with pytest.raises(TypeError):
            st.commit(1)  # keyword-only
    with StateTracker(str(p)) as st:
        coord, seq = st.load()
        assert seq == 2 and coord["epoch"] == 1 and coord["batch_index"] == 9
        st.reset()
        assert st.load() is None
    with pytest.raises(ValueError, match="closed"):
        st.load()


def test_state_tracker_corrupt_is_an_oserror(tmp_path):
    p = tmp_path / "state"
    with StateTracker(p) as st:
        st.commit(epoch=0, batch_index=1)
    raw = bytearray(p.read_bytes())
    raw[10] ^= 0xFF  # slot A (the only committed one) fails its CRC
    p.write_bytes(bytes(raw))
    with StateTracker(p) as st:
        with pytest.raises(lm.StateCorruptError) as ei:
            st.load()
        assert isinstance(ei.value, OSError)
        st.reset()
        assert st.load() is None
    p.write_bytes(b"\0" * 100)  # wrong size
    with pytest.raises(lm.StateCorruptError):
        StateTracker(p)
    with pytest.raises(FileNotFoundError) as ei:
        StateTracker(tmp_path / "no" / "such" / "dir" / "state")
    assert ei.value.errno == 2 and "no/such/dir" in str(ei.value.filename)
    with pytest.raises(TypeError):
        StateTracker(3)
