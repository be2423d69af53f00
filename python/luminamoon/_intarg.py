"""The package's one check of an integer argument.

An integer argument takes what PyTorch takes for one: a Python ``int`` or
anything with ``__index__`` (a NumPy integer scalar such as ``np.int64(512)``
or ``np.uint64(7)``, a 0-d integer array, a one-element integer tensor), read
with :func:`operator.index` and handed back as a plain Python ``int``, so that
what a caller stores (settings recorded in a commit file as JSON and compared
on resume) is never a NumPy scalar. ``bool``, ``numpy.bool_`` and a bool
tensor are refused (``True`` is not a count), and so is every float, ``3.0``
and ``np.float64(3)`` included (no ``__index__``).

:func:`as_int` does not raise: it returns ``None`` for a value that is not an
integer, and each caller raises its own error (their messages and exception
types are part of the API).
"""
from __future__ import annotations

import operator
from typing import Any, Optional

__all__ = ["as_int"]


def _is_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return True
    t = type(v)
    mod = t.__module__
    if mod == "numpy" and t.__name__ in ("bool", "bool_"):  # numpy.bool_ (named numpy.bool in NumPy 2)
        return True
    if mod.startswith("numpy") or mod.startswith("torch"):  # a 0-d bool array, a bool tensor
        dt = getattr(v, "dtype", None)
        if dt is not None and str(dt) in ("bool", "torch.bool"):
            return True
    return False


def as_int(v: Any) -> Optional[int]:
    """``v`` as a plain ``int`` if it is an integer argument (see the module's note), else ``None``.

    >>> import numpy as np
    >>> as_int(np.int64(512)), type(as_int(np.uint64(7))), as_int(True), as_int(3.0), as_int(np.bool_(1))
    (512, <class 'int'>, None, None, None)
    """
    if type(v) is int:
        return v
    if _is_bool(v):
        return None
    try:
        i = operator.index(v)
    except TypeError:
        return None
    return int(i)  # an int subclass (IntEnum) comes back as a plain int
