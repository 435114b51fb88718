"""Storage checkpointers: how ``storage.dumps(path)`` / ``storage.loads(path)`` lay a storage out.

A storage dumps in rbdata's own format until a checkpointer is set
(``storage.checkpointer = ...`` or ``ReplayBuffer(checkpointer=...)``); then
its ``dumps``/``loads`` (and the ``dump``/``save``/``load`` aliases) go through
the checkpointer, with torchrl's classes and on-disk layouts.
"""

from __future__ import annotations

from .base import StorageCheckpointerBase
from .compact import FlatStorageCheckpointer, H5StorageCheckpointer, NestedStorageCheckpointer
from .ensemble import StorageEnsembleCheckpointer
from .list import CompressedListStorageCheckpointer, ListStorageCheckpointer
from .ted_flat import Flat2TED, TED2Flat
from .ted_h5 import H5Combine, H5Split
from .ted_nested import Nested2TED, TED2Nested
from .tensor import TensorStorageCheckpointer

__all__ = [
    "CompressedListStorageCheckpointer",
    "Flat2TED",
    "FlatStorageCheckpointer",
    "H5Combine",
    "H5Split",
    "H5StorageCheckpointer",
    "ListStorageCheckpointer",
    "Nested2TED",
    "NestedStorageCheckpointer",
    "StorageCheckpointerBase",
    "StorageEnsembleCheckpointer",
    "TED2Flat",
    "TED2Nested",
    "TensorStorageCheckpointer",
]
