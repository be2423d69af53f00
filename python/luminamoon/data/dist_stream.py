"""The global record stream of a distributed pipeline: every rank reads the same
(deterministically ordered) stream and parses only the records it owns.

``GlobalStream(source).take(n)`` returns the next ``n`` stream items; after it
the source's ``position()`` is the position after the last of them — the same
on every rank.  For JSONL files and line-oriented text files the items are raw
lines (``(path, line, bytes)``) and ``parse(item)`` decodes one record only
when this rank owns it: the other ranks' records cost a line split, not a JSON
parse.  Any other source yields parsed records (``parse`` returns them as
they are).  Record counting follows the source's own rules (blank JSONL
lines are not records), so positions are identical to the source's.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, Iterator, List, Optional

from .readers import TooLong
from .errors import UTF8_BOM
from .sources import JsonlSource, Source, TextSource

__all__ = ["GlobalStream"]


class GlobalStream:
    """Reads the whole stream of ``source`` (which must not be sharded itself)."""

    def __init__(self, source: Source, text_key: str = "text"):
        if getattr(source, "world_size", 1) != 1:
            raise ValueError("a distributed pipeline shards records itself: pass the unsharded source "
                             f"(world_size=1), got one with rank={source.rank}, world_size={source.world_size}")
        self.source = source
        self.text_key = getattr(source, "text_key", text_key)
        if type(source) is JsonlSource:
            self.mode = "jsonl"
        elif type(source) is TextSource and source.per == "line":
            self.mode = "text"
        else:
            self.mode = "records"
        self._it: Optional[Iterator[Any]] = None

    def _raw_lines(self) -> Iterator[tuple]:
        src = self.source
        jsonl = self.mode == "jsonl"
        for path, lineno, raw in src._lines():
            if jsonl and not isinstance(raw, TooLong) and raw.isspace():
                continue
            src._take_record()  # keeps the position's record counter equal to the source's own
            yield path, lineno, raw

    def take(self, n: int) -> List[Any]:
        """The next ``n`` items (fewer at the end of the stream)."""
        if self._it is None:
            self._it = self._raw_lines() if self.mode != "records" else iter(self.source)
        out: List[Any] = []
        it = self._it
        for item in it:
            out.append(item)
            if len(out) == n:
                break
        return out

    def position(self) -> Dict[str, Any]:
        return self.source.position()

    def parse(self, item: Any) -> Optional[Dict[str, Any]]:
        """The record of one item, or None when the source's ``on_error="skip"`` drops it."""
        if self.mode == "records":
            return item
        path, lineno, raw = item
        src = self.source
        if isinstance(raw, TooLong):  # longer than max_record_bytes: never held whole
            src._refuse_big(f"{path}:{lineno}", raw.nbytes)
            return None
        if lineno == 1 and raw.startswith(UTF8_BOM):  # a UTF-8 byte order mark, as JsonlSource / TextSource
            raw = raw[3:]
        if self.mode == "text":
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            try:
                return {self.text_key: raw.decode("utf-8")}
            except UnicodeDecodeError as e:
                src._bad(f"{path}:{lineno}: invalid UTF-8 at byte {e.start}", e)
                return None
        try:
            obj = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            src._bad(f"{path}:{lineno}: invalid UTF-8 at byte {e.start}", e)
            return None
        except json.JSONDecodeError as e:
            src._bad(f"{path}:{lineno}: malformed JSON: {e.msg} (column {e.colno})", e)
            return None
        except RecursionError as e:  # as JsonlSource: nested deeper than Python's json can parse
            src._bad(f"{path}:{lineno}: malformed JSON: nested too deeply to parse "
                     f"(more than about {sys.getrecursionlimit()} levels)", e)
            return None
        except ValueError as e:  # as JsonlSource: an integer longer than Python's int limit (4300 digits)
            src._bad(f"{path}:{lineno}: malformed JSON: {e}", e)
            return None
        if not isinstance(obj, dict):
            src._bad(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            return None
        text = obj.get(self.text_key)
        if not isinstance(text, str):
            what = "missing" if text is None and self.text_key not in obj else f"not a string ({type(text).__name__})"
            src._bad(f"{path}:{lineno}: text field {self.text_key!r} is {what}")
            return None
        if not getattr(src, "_keep_lone_surrogates", True) and src._lone_surrogate(path, lineno, text):
            return None  # as JsonlSource._parse_line: a bad record naming its line
        return obj
