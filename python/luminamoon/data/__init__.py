"""luminamoon.data: resumable data sources (and, later, the pipeline adapters)."""
from .sources import (
    HFIterableSource,
    IterableSource,
    JsonlSource,
    ParquetSource,
    Source,
    TextSource,
    expand_paths,
    write_jsonl,
)

__all__ = [
    "Source", "IterableSource", "JsonlSource", "TextSource", "ParquetSource",
    "HFIterableSource", "expand_paths", "write_jsonl",
]
