"""luminamoon: the fastest, most trustworthy text-data path into PyTorch training.

``import luminamoon`` loads the native extension, which registers every
operator under ``torch.ops.luminamoon`` (with fake kernels for torch.compile).

Example:
    >>> import luminamoon
    >>> st = luminamoon.StringTensor.from_list(["hello", "world"])
    >>> st.starts_with("wo")
    tensor([False,  True])
"""
from . import _C  # noqa: F401  (loads the extension: registers torch.ops.luminamoon.*)
from . import ops
from .string_tensor import StringTensor
from .stages import (ChainPipeline, CorruptError, DedupFullError, FormatVersionError,  # noqa: F401
                     FusedPipeline, PIIMasker, QualityFilter, Stage, StageResult, StreamDeduplicator,
                     TextCleaner, hash128, reason_name)
from .state import StateCorruptError, StateTracker  # noqa: F401
from .minhash import MinHash  # noqa: F401  (also registers the fake kernel of torch.ops.luminamoon.minhash)

__all__ = ["StringTensor", "ops"]
__all__ += ["TextCleaner", "QualityFilter", "PIIMasker", "StreamDeduplicator", "FusedPipeline", "ChainPipeline",
            "Stage", "StageResult", "reason_name", "hash128", "StateTracker", "StateCorruptError", "CorruptError",
            "FormatVersionError", "DedupFullError"]
__all__ += ["MinHash"]
from .stages import NearDeduplicator  # noqa: F401,E402
__all__ += ["NearDeduplicator"]
__version__ = "0.1.0"
