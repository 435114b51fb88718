"""Storages: where a replay buffer's items live."""

from ._base import Storage, shape_of
from .compressed import CompressedListStorage
from .lazy_tensor import LazyTensorStorage
from .list import LazyStackStorage, ListStorage
from .memmap import LazyMemmapStorage
from .tensor import TensorStorage

__all__ = [
    "CompressedListStorage",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "TensorStorage",
    "shape_of",
]
