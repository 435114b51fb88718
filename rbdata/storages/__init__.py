"""Storages: where a replay buffer's items live."""

from ._base import Storage, shape_of
from .checkpointers import (
    CompressedListStorageCheckpointer,
    ListStorageCheckpointer,
    StorageCheckpointerBase,
    StorageEnsembleCheckpointer,
    TensorStorageCheckpointer,
)
from .compressed import CompressedListStorage
from .ensemble import StorageEnsemble
from .frames import FrameDedupStorage
from .lazy_tensor import LazyTensorStorage
from .list import LazyStackStorage, ListStorage
from .memmap import LazyMemmapStorage
from .tensor import TensorStorage

__all__ = [
    "CompressedListStorage",
    "CompressedListStorageCheckpointer",
    "FrameDedupStorage",
    "LazyMemmapStorage",
    "LazyStackStorage",
    "LazyTensorStorage",
    "ListStorage",
    "ListStorageCheckpointer",
    "Storage",
    "StorageCheckpointerBase",
    "StorageEnsemble",
    "StorageEnsembleCheckpointer",
    "TensorStorage",
    "TensorStorageCheckpointer",
    "shape_of",
]
