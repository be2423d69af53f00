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

__all__ = ["StringTensor", "ops"]
__version__ = "0.1.0"
