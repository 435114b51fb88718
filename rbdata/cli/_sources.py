"""What ``rbdata convert`` reads: each format as a length and a stream of TED chunks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from tensordict import TensorDictBase

from rbdata.checkpoint import load_tensordict_dir
from rbdata.cli._formats import FORMATS  # noqa: F401  (re-exported: the sources read these)
from rbdata.datasets import MinariReader, load_d4rl_hdf5, load_offline_data


class Source(Protocol):
    """Transitions to convert: how many, how many bytes each, and their chunks in order."""

    def __len__(self) -> int: ...

    @property
    def row_bytes(self) -> int:
        """Bytes of one transition in memory."""
        ...

    def chunks(self, max_rows: int) -> Iterator[TensorDictBase]:
        """Yield the transitions in order, at most ``max_rows`` at a time."""
        ...


def open_source(path: str, fmt: str) -> Source:
    """Open ``path`` as a source of format ``fmt`` (one of :data:`FORMATS`).

    Only a dump is read whole: the others are read chunk by chunk.
    """
    if fmt == "minari":
        return MinariReader(path)
    if fmt == "d4rl":
        return _D4RLSource(Path(path))
    if fmt == "memmap":
        return _TensorDictSource(load_tensordict_dir(path))
    # A dump is one torch.save file: read whole (the checkpoint format has no partial read).
    return _TensorDictSource(load_offline_data(path, progress=False))


class _TensorDictSource:
    """Chunks of a TensorDict (memory-mapped ones are read page by page as chunks go)."""

    def __init__(self, data: TensorDictBase) -> None:
        if data.batch_dims != 1:
            raise ValueError(f"a source must have one batch dimension, got {list(data.shape)}.")
        self._data = data

    def __len__(self) -> int:
        return self._data.shape[0]

    @property
    def row_bytes(self) -> int:
        return int(self._data[:1].bytes())

    def chunks(self, max_rows: int) -> Iterator[TensorDictBase]:
        for start in range(0, len(self), max_rows):
            yield self._data[start : start + max_rows]


class _D4RLSource:
    """A D4RL-style file read one row range at a time."""

    def __init__(self, path: Path) -> None:
        self._path = path
        head = load_d4rl_hdf5(path, progress=False, rows=slice(0, 1))  # checks the layout
        self.row_bytes = int(head.bytes())
        import h5py

        with h5py.File(path, "r") as f:
            self._length = int(f["observations"].shape[0])

    def __len__(self) -> int:
        return self._length

    def chunks(self, max_rows: int) -> Iterator[TensorDictBase]:
        for start in range(0, self._length, max_rows):
            yield load_d4rl_hdf5(self._path, progress=False, rows=slice(start, start + max_rows))
