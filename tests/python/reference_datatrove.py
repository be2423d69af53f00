"""Reference decisions of HuggingFace datatrove's quality filters.

A small importable helper (it holds no tests) used by the agreement tests and
benchmarks: it runs datatrove's four filter families over a list of texts and
returns one decision per document, so that luminamoon's C QualityFilter can be
compared with the reference implementation document by document.

Each ``run_*`` function returns a list of ``Decision`` (one per input text, in
order).  ``reason`` is datatrove's own reason string (``"gopher_short_doc"``,
``"dup_para_frac"``, ``"lorem_ipsum"``, ``"line_punct_ratio"`` ...), ``None``
when the document is kept.  The C4 filter *modifies* the documents it keeps (it
drops lines); ``text`` carries the text it would write out (``None`` for the
other filters, and for dropped documents).

The filters are applied independently to each original text (not chained), with
datatrove's default parameters and language (English: spaCy's blank ``en``
tokenizer plus its sentencizer).  A filter that raises on a document (datatrove
divides by zero on a few degenerate inputs) gives ``Decision(False, "error:...")``.

Example::

    >>> from reference_datatrove import available, run_all
    >>> if available():
    ...     res = run_all(["The cat sat on the mat. " * 20])
    ...     sorted(res)
    ['c4', 'fineweb', 'gopher_quality', 'gopher_repetition']

Requires ``pip install datatrove spacy`` (datatrove 0.10.x was used to write it).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

__all__ = [
    "Decision",
    "available",
    "make_filters",
    "run_filter",
    "run_gopher_quality",
    "run_gopher_repetition",
    "run_c4",
    "run_fineweb",
    "run_all",
    "word_tokens",
]


@dataclass(frozen=True)
class Decision:
    keep: bool
    reason: Optional[str]
    text: Optional[str] = None  # C4 only: the text kept (lines dropped)


def available() -> bool:
    """True when datatrove and its English word tokenizer (spaCy) can be imported."""
    try:
        import datatrove.pipeline.filters  # noqa: F401
        import spacy  # noqa: F401
    except Exception:  # pragma: no cover - depends on the environment
        return False
    return True


def make_filters() -> dict:
    """The four datatrove filters with their default parameters, by rule-set name."""
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )

    return {
        "gopher_quality": GopherQualityFilter(),
        "gopher_repetition": GopherRepetitionFilter(),
        "c4": C4QualityFilter(),
        "fineweb": FineWebQualityFilter(),
    }


def _decide(flt, text: str, want_text: bool) -> Decision:
    from datatrove.data import Document

    doc = Document(text=text, id="0")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # numpy's "mean of empty slice"
            res = flt.filter(doc)
    except Exception as e:  # datatrove divides by zero on a few inputs
        return Decision(False, f"error:{type(e).__name__}")
    if isinstance(res, tuple):
        return Decision(bool(res[0]), None if res[0] else str(res[1]))
    if res:
        return Decision(True, None, doc.text if want_text else None)
    return Decision(False, "dropped")


def run_filter(flt, texts: Iterable[str], want_text: bool = False) -> list[Decision]:
    """Apply one datatrove filter object to each text independently."""
    return [_decide(flt, t, want_text) for t in texts]


def _run(name: str, texts: Iterable[str], want_text: bool = False) -> list[Decision]:
    return run_filter(make_filters()[name], texts, want_text)


def run_gopher_quality(texts: Iterable[str]) -> list[Decision]:
    """datatrove GopherQualityFilter (defaults) on each text."""
    return _run("gopher_quality", texts)


def run_gopher_repetition(texts: Iterable[str]) -> list[Decision]:
    """datatrove GopherRepetitionFilter (defaults) on each text."""
    return _run("gopher_repetition", texts)


def run_c4(texts: Iterable[str], want_text: bool = True) -> list[Decision]:
    """datatrove C4QualityFilter (defaults); kept documents carry their line-filtered text."""
    return _run("c4", texts, want_text)


def run_fineweb(texts: Iterable[str]) -> list[Decision]:
    """datatrove FineWebQualityFilter (defaults) on each text."""
    return _run("fineweb", texts)


def run_all(texts: Iterable[str], progress: Optional[Callable[[int], None]] = None) -> dict:
    """All four rule sets over the same texts: {rule_set: [Decision, ...]}.

    Runs document by document so that datatrove's word-tokenizer cache (an
    lru_cache over the last texts) is shared by the filters of one document.
    """
    filters = make_filters()
    out: dict = {k: [] for k in filters}
    for i, t in enumerate(texts):
        for k, f in filters.items():
            out[k].append(_decide(f, t, k == "c4"))
        if progress is not None:
            progress(i)
    return out


def word_tokens(text: str) -> list[str]:
    """datatrove's English words of `text` (what the Gopher/FineWeb rules count)."""
    from datatrove.utils.text import split_into_words

    return list(split_into_words(text, "eng"))
