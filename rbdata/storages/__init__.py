"""Storages: where a replay buffer's items live."""

from ._base import Storage, shape_of
from .checkpointers import (
    CompressedListStorageCheckpointer,
    Flat2TED,
    FlatStorageCheckpointer,
    H5Combine,
    H5Split,
    H5StorageCheckpointer,
    ListStorageCheckpointer,
    Nested2TED,
    NestedStorageCheckpointer,
    StorageCheckpointerBase,
    StorageEnsembleCheckpointer,
    TED2Flat,
    TED2Nested,
    TensorStorageCheckpointer,
)
from .compressed import CompressedListStorage
from .ensemble import StorageEnsemble
from .frames import FrameDedupStorage
from .lazy_tensor import LazyTensorStorage
from .list import LazyStackStorage, ListStorage
from .memmap import LazyMemmapStorage
from .store import StoreStorage
from .tensor import TensorStorage

__all__ = [
    "CompressedListStorage",
    "CompressedListStorageCheckpointer",
    "Flat2TED",
    "FlatStorageCheckpointer",
    "H5Combine",
    "H5Split",
    "H5StorageCheckpointer",
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
    "Nested2TED",
    "NestedStorageCheckpointer",
    "TED2Flat",
    "TED2Nested",
    "StoreStorage",
    "TensorStorage",
    "TensorStorageCheckpointer",
    "shape_of",
]
