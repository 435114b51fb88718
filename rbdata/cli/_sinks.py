"""What ``rbdata convert`` writes: a memmap TensorDict directory, a D4RL-style file, a dump.

Each writer takes the transitions as a stream of TED chunks and their total
count, and writes beside the destination first, renaming the result into place
only once it is complete.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from tensordict import TensorDictBase

from rbdata._component.checks import key_path
from rbdata.buffers import TensorDictReplayBuffer
from rbdata.datasets.hdf5 import ITEM_SHAPE_ATTR
from rbdata.storages import LazyMemmapStorage

Chunks = Iterator[TensorDictBase]


class _H5Creator(Protocol):
    """What creating the datasets asks of an ``h5py.File`` opened for writing."""

    def create_dataset(self, name: str, *, shape: tuple[int, ...], dtype: Any) -> Any: ...


# D4RL dataset name -> TED key (``timeouts`` optional); per-step ones are stored [N].
D4RL_FIELDS: dict[str, tuple[str, ...]] = {
    "observations": ("observation",),
    "actions": ("action",),
    "next_observations": ("next", "observation"),
    "rewards": ("next", "reward"),
    "terminals": ("next", "terminated"),
    "timeouts": ("next", "truncated"),
}
_D4RL_PER_STEP = {"rewards", "terminals", "timeouts"}


@contextlib.contextmanager
def replacing(dst: Path) -> Iterator[Path]:
    """A fresh path beside ``dst`` to write to, renamed to ``dst`` on success, else removed."""
    if dst.exists():
        raise FileExistsError(f"{str(dst)!r} already exists; remove it or pick another name.")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.parent / f".{dst.name}.rbdata-tmp-{uuid.uuid4().hex[:8]}"
    try:
        yield tmp
        os.replace(tmp, dst)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def write_memmap(dst: Path, chunks: Chunks, n: int) -> list[str]:
    """Write a memory-mapped TensorDict directory (``TensorDict.load_memmap`` reads it)."""
    with replacing(dst) as tmp:
        out = None
        start = 0
        for chunk in chunks:
            if out is None:
                out = chunk[:1].expand(n).memmap_like(tmp)
            out[start : start + chunk.shape[0]] = chunk
            start += chunk.shape[0]
        if out is None:
            raise ValueError("the source holds no transition; nothing to convert.")
    return []


def write_d4rl(dst: Path, chunks: Chunks, n: int) -> list[str]:
    """Write a D4RL-style HDF5 file; returns the keys it has no place for (not written)."""
    import h5py

    dropped: list[str] = []
    with replacing(dst) as tmp, h5py.File(tmp, "w") as f:
        start = 0
        for chunk in chunks:
            if start == 0:
                dropped = _d4rl_datasets(f, chunk, n)
            stop = start + chunk.shape[0]
            for name, key in D4RL_FIELDS.items():
                if name in f:
                    values = chunk[key].numpy()
                    f[name][start:stop] = values.reshape(f[name][start:stop].shape)
            start = stop
        if start == 0:
            raise ValueError("the source holds no transition; nothing to convert.")
    return dropped


def _d4rl_datasets(f: _H5Creator, chunk: TensorDictBase, n: int) -> list[str]:
    """Create the file's datasets from the first chunk's layout; the keys left out."""
    keys = {key_path(k) for k in chunk.keys(include_nested=True, leaves_only=True)}
    required = {name: key for name, key in D4RL_FIELDS.items() if name != "timeouts"}
    missing = [key for key in required.values() if key not in keys]
    if missing:
        raise ValueError(
            f"a D4RL-style file needs {_names(required.values())} (one array per step); the "
            f"source has {_names(sorted(keys)) or 'no entry'} and lacks {_names(missing)}: "
            f"add {'it' if len(missing) == 1 else 'them'} to the data before converting, or "
            f"convert to memmap or dumps, which hold any entries."
        )
    for name, key in D4RL_FIELDS.items():
        if key in keys:
            value: torch.Tensor = chunk.get(key)
            shape = (n,) if name in _D4RL_PER_STEP else (n, *value.shape[1:])
            dataset = f.create_dataset(name, shape=shape, dtype=value.numpy().dtype)
            if name in _D4RL_PER_STEP:  # read back with the same per-item shape, [] or [1]
                dataset.attrs[ITEM_SHAPE_ATTR] = np.asarray(value.shape[1:], dtype=np.int64)
    written = set(D4RL_FIELDS.values()) | {("next", "done")}
    return sorted(".".join(k) for k in keys - written)


def _names(keys: Any) -> str:
    """Entries as a user writes them: ``observation, next.reward``."""
    return ", ".join(".".join(key) for key in keys)


def write_dump(dst: Path, chunks: Chunks, n: int) -> list[str]:
    """Write a ``ReplayBuffer.dumps`` directory of a ``LazyMemmapStorage(n)`` buffer."""
    if dst.exists():
        raise FileExistsError(f"{str(dst)!r} already exists; remove it or pick another name.")
    dst.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rbdata-convert-", dir=dst.parent) as scratch:
        rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(max(1, n), scratch_dir=scratch))
        for chunk in chunks:
            rb.extend(chunk)
        if not len(rb):
            raise ValueError("the source holds no transition; nothing to convert.")
        rb.dumps(dst)
    return []
