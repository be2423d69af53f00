"""Errors shared by the readers and sources of :mod:`luminamoon.data` (its own module so
that the block reader and the sources both import it without importing each other)."""


class BadRecordError(ValueError):
    """A record a source cannot use: malformed JSON, a missing or non-string text
    field, invalid UTF-8, larger than ``max_record_bytes``.  ``on_error="skip"``
    skips and counts these (``source.skipped``) instead of raising."""


__all__ = ["BadRecordError"]

#: A UTF-8 byte order mark (Windows tools write one): before a file's first line it is not text, in
#: every reader (JSONL, text by line or by file, the block scans, the distributed stream).
UTF8_BOM = b"\xef\xbb\xbf"
