"""load_offline_data: one entry point for every supported source of offline data."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from tensordict import TensorDict, TensorDictBase

from rbdata.checkpoint import MANIFEST, read_dump
from rbdata.datasets.hdf5 import load_d4rl_hdf5
from rbdata.datasets.minari import MAIN_DATA, METADATA, datasets_root, load_minari
from rbdata.storages import LazyTensorStorage

__all__ = ["load_offline_data"]

_HDF5_SUFFIXES = (".hdf5", ".h5")
_MEMMAP_META = "meta.json"  # written by TensorDict.memmap() at the root of its directory


def load_offline_data(
    source: TensorDictBase | str | os.PathLike, *, progress: bool = True
) -> TensorDictBase:
    """Load offline experience as a TensorDict whose first dimension indexes items.

    ``source`` may be:

    - a TensorDict: returned as it is;
    - a ``dumps`` directory (``ReplayBuffer.dumps``, a ``manifest.json`` at its
      root) of a tensor storage holding TensorDicts: its items, oldest first;
    - a memory-mapped TensorDict directory (``TensorDict.memmap(path)``, a
      ``meta.json`` at its root): loaded with ``TensorDict.load_memmap``, still
      memory-mapped;
    - a D4RL-style ``.hdf5`` / ``.h5`` file: see :func:`load_d4rl_hdf5`;
    - a local Minari dataset: its directory or its ``data/`` directory, or a
      dataset id found under ``$MINARI_DATASETS_PATH``: see :func:`load_minari`.

    Args:
        source: the data or where it is.
        progress: show a progress bar when reading a file takes long.

    Returns:
        The items, a TensorDict with at least one batch dimension.

    Raises:
        FileNotFoundError: if the path does not exist.
        TypeError: if ``source`` is neither a TensorDict nor a path.
        ValueError: if the path is of no supported kind, or the data has no
            item dimension.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata.datasets import load_offline_data
        >>> td = TensorDict({"observation": torch.arange(6.0).reshape(3, 2)}, batch_size=[3])
        >>> path = tempfile.mkdtemp()
        >>> _ = td.memmap(path)
        >>> load_offline_data(path)["observation"][:, 0].tolist()
        [0.0, 2.0, 4.0]
    """
    if isinstance(source, TensorDictBase):
        data = source
    elif isinstance(source, (str, os.PathLike)):
        data = _load_path(source, progress)
    else:
        raise TypeError(
            "offline data must be a TensorDict or a path (dumps directory, memmap TensorDict "
            "directory, .hdf5/.h5 file, Minari dataset directory or id), got "
            f"{type(source).__name__}."
        )
    if not data.batch_dims:
        raise ValueError(
            "offline data must have a leading item dimension, got batch_size "
            f"{list(data.batch_size)}."
        )
    return data


def _load_path(source: str | os.PathLike, progress: bool) -> TensorDictBase:
    path = Path(source)
    if path.is_file():
        if path.suffix.lower() in _HDF5_SUFFIXES:
            return load_d4rl_hdf5(path, progress=progress)
        raise ValueError(
            f"offline data file {str(path)!r} has suffix {path.suffix!r}; expected a D4RL-style "
            f"{' or '.join(_HDF5_SUFFIXES)} file."
        )
    if path.is_dir():
        if (path / MANIFEST).is_file():
            return _read_dump_items(path)
        if (path / _MEMMAP_META).is_file():
            return TensorDict.load_memmap(path)
        if _is_minari_dir(path):
            return load_minari(path, progress=progress)
        raise ValueError(
            f"offline data directory {str(path)!r} is neither a replay-buffer dump (no "
            f"{MANIFEST}), a memory-mapped TensorDict (no {_MEMMAP_META}) nor a Minari dataset "
            f"(no {METADATA} and {MAIN_DATA} in it or in its data/ directory)."
        )
    if isinstance(source, str) and _is_minari_dir(datasets_root() / source):
        return load_minari(source, progress=progress)
    raise FileNotFoundError(
        f"offline data path {str(path)!r} does not exist (nor is it a Minari dataset id under "
        f"{str(datasets_root())!r})."
    )


def _is_minari_dir(path: Path) -> bool:
    """A Minari dataset's directory or its ``data/`` directory."""
    return any(
        (data / METADATA).is_file() and (data / MAIN_DATA).is_file()
        for data in (path, path / "data")
    )


def _read_dump_items(path: Path) -> TensorDictBase:
    """The items of a buffer dump as a TensorDict, oldest first."""
    manifest, state, objects = read_dump(path)
    storage_state = state.get("storage", {})
    if objects is not None or storage_state.get("lead"):
        raise ValueError(
            f"dump at {str(path)!r} holds a {manifest.get('components', {}).get('storage')} with "
            "Python objects or ndim > 1; offline data needs a one-dimensional tensor storage "
            "of TensorDicts."
        )
    storage = LazyTensorStorage(int(manifest["max_size"]))
    storage.load_state_dict(storage_state)
    length = len(storage)
    cursor = int(manifest.get("cursor", 0))
    # A full storage's oldest item sits at the writer's cursor.
    start = cursor % length if length == storage.max_size and length else 0
    order = (torch.arange(length) + start) % max(length, 1)
    items = storage.get(order)
    if not isinstance(items, TensorDictBase):
        raise ValueError(
            f"dump at {str(path)!r} holds {type(items).__name__} items; offline data needs "
            "TensorDicts."
        )
    return items
