"""Storages: where a replay buffer's items live."""

from ._base import Storage, shape_of
from .compressed import CompressedListStorage
from .list import LazyStackStorage, ListStorage
from .memmap import LazyMemmapStorage
from .tensor import LazyTensorStorage, TensorStorage

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
