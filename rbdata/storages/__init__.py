"""Storages: where a replay buffer's items live."""

from ._base import Storage, shape_of
from .compressed import CompressedListStorage
from .frames import FrameDedupStorage
from .lazy_tensor import LazyTensorStorage
from .list import LazyStackStorage, ListStorage
from .memmap import LazyMemmapStorage
from .store import StoreStorage
from .tensor import TensorStorage

__all__ = [
    "CompressedListStorage",
    "FrameDedupStorage",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "StoreStorage",
    "TensorStorage",
    "shape_of",
]
