"""load_offline_data: one entry point for every supported source of offline data."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from tensordict import TensorDictBase

from rbdata.checkpoint import MANIFEST, load_tensordict_dir, read_dump
from rbdata.datasets.hdf5 import load_d4rl_hdf5
from rbdata.datasets.minari import (
    MAIN_DATA,
    METADATA,
    datasets_root,
    is_minari_dataset,
    load_minari,
)
from rbdata.storages import LazyTensorStorage

__all__ = ["load_offline_data", "offline_data_format"]

_HDF5_SUFFIXES = (".hdf5", ".h5")
_MEMMAP_META = "meta.json"  # written by TensorDict.memmap() at the root of its directory


def load_offline_data(
    source: TensorDictBase | str | os.PathLike[str], *, progress: bool = True
) -> TensorDictBase:
    """Load offline experience as a TensorDict whose first dimension indexes items.

    ``source`` may be:

    - a TensorDict: returned as it is;
    - a ``dumps`` directory (``ReplayBuffer.dumps``, a ``manifest.json`` at its
      root) of a tensor storage holding TensorDicts: its items, oldest first;
    - a memory-mapped TensorDict directory (``TensorDict.memmap(path)``, a
      ``meta.json`` at its root): loaded with ``TensorDict.load_memmap`` (nothing
      unpickled: see :func:`rbdata.checkpoint.load_tensordict_dir`), still
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


def offline_data_format(path: str | os.PathLike[str]) -> str:
    """Which kind of offline data is at ``path``, the reader :func:`load_offline_data` uses.

    ``"d4rl"``, ``"dumps"``, ``"memmap"`` or ``"minari"``; ``path`` may also be
    a Minari dataset id found under ``$MINARI_DATASETS_PATH``.

    Raises:
        FileNotFoundError: if nothing is at ``path`` and it is no local Minari id.
        ValueError: if what is there is of none of these kinds.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata.datasets import offline_data_format
        >>> path = tempfile.mkdtemp()
        >>> _ = TensorDict({"x": torch.zeros(2)}, [2]).memmap(path)
        >>> offline_data_format(path)
        'memmap'
    """
    where = Path(path)
    if where.is_file():
        if where.suffix.lower() in _HDF5_SUFFIXES:
            return "d4rl"
        raise ValueError(
            f"offline data file {str(where)!r} has suffix {where.suffix!r}; expected a "
            f"D4RL-style {' or '.join(_HDF5_SUFFIXES)} file."
        )
    if where.is_dir():
        if (where / MANIFEST).is_file():
            return "dumps"
        if (where / _MEMMAP_META).is_file():
            return "memmap"
        if is_minari_dataset(where):
            return "minari"
        raise ValueError(
            f"offline data directory {str(where)!r} is neither a replay-buffer dump (no "
            f"{MANIFEST}), a memory-mapped TensorDict (no {_MEMMAP_META}) nor a Minari dataset "
            f"(no {METADATA} and {MAIN_DATA} in it or in its data/ directory)."
        )
    local_id = isinstance(path, str) and not where.is_absolute()
    if local_id and is_minari_dataset(datasets_root() / path):
        return "minari"
    raise FileNotFoundError(
        f"offline data path {str(where)!r} does not exist (nor is it a Minari dataset id under "
        f"{str(datasets_root())!r})."
    )


def _load_path(path: str | os.PathLike[str], progress: bool) -> TensorDictBase:
    kind = offline_data_format(path)
    if kind == "d4rl":
        return load_d4rl_hdf5(path, progress=progress)
    if kind == "dumps":
        return _read_dump_items(Path(path))
    if kind == "memmap":
        return load_tensordict_dir(path)
    return load_minari(path, progress=progress)


def _read_dump_items(path: Path) -> TensorDictBase:
    """The items of a buffer dump as a TensorDict, oldest first."""
    manifest, state, objects = read_dump(path)
    storage_state = state.get("_storage", state.get("storage", {}))
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
