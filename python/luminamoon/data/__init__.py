"""luminamoon.data: resumable data sources, ResumablePipeline and the DataLoader collate."""
from .sources import (
    BadRecordError,
    HFIterableSource,
    IterableSource,
    JsonlSource,
    ParquetSource,
    Source,
    TextSource,
    expand_paths,
)
from .writers import write_jsonl

from .resumable import Batch, ResumablePipeline
from .collate import GlobalDedup, ResumableCollate, create_resumable_collate, start_global_dedup
from .distributed import DistBatch, DistributedPipeline

__all__ = [
    "Batch", "ResumablePipeline", "ResumableCollate", "create_resumable_collate", "GlobalDedup",
    "start_global_dedup",
    "Source", "IterableSource", "JsonlSource", "TextSource", "ParquetSource",
    "HFIterableSource", "expand_paths", "write_jsonl", "BadRecordError",
]
__all__ += ["DistributedPipeline", "DistBatch"]
