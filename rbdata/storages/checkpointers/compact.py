"""FlatStorageCheckpointer: a TED storage saved in the flat form (TED2Flat / Flat2TED)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensor_collection

from rbdata._component.checks import NestedKey
from rbdata._component.stateful import transaction

from .base import _CheckpointedStorage
from .ted_flat import Flat2TED, TED2Flat
from .ted_h5 import H5Combine, H5Split
from .ted_nested import Nested2TED, TED2Nested
from .tensor import TensorStorageCheckpointer, all_rows

__all__ = ["FlatStorageCheckpointer", "H5StorageCheckpointer", "NestedStorageCheckpointer"]


def _ted_kwargs(
    done_keys: Iterable[NestedKey] | None, reward_keys: Iterable[NestedKey] | None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if done_keys is not None:
        kwargs["done_keys"] = done_keys
    if reward_keys is not None:
        kwargs["reward_keys"] = reward_keys
    return kwargs


class FlatStorageCheckpointer(TensorStorageCheckpointer):
    """Saves a TED storage in the flat form: each observation once (see :class:`~rbdata.TED2Flat`).

    A :class:`~rbdata.TensorStorageCheckpointer` whose save hook is
    ``TED2Flat`` and load hook ``Flat2TED``. As torchrl's, it assumes without
    checking that the root done flags are False and that ``("next", obs)`` of
    a step is ``obs`` of the next step of its trajectory.

    Args:
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import FlatStorageCheckpointer, LazyTensorStorage, TensorDictReplayBuffer
        >>> def steps(start, n):
        ...     obs = torch.arange(start, start + n, dtype=torch.float32)
        ...     return TensorDict({"obs": obs, "done": torch.zeros(n, 1, dtype=torch.bool),
        ...         "next": {"obs": obs + 1, "done": (obs == 4)[:, None],
        ...                  "reward": torch.ones(n, 1)}}, batch_size=[n])
        >>> rb = TensorDictReplayBuffer(
        ...     storage=LazyTensorStorage(8), checkpointer=FlatStorageCheckpointer()
        ... )
        >>> _ = rb.extend(steps(0, 10))
        >>> copy = LazyTensorStorage(8)
        >>> copy.checkpointer = FlatStorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     rb.storage.dumps(folder)
        ...     copy.loads(folder)
        >>> bool((copy.get(torch.arange(8)) == rb.storage.get(torch.arange(8))).all())
        True
    """

    def __init__(
        self,
        done_keys: Iterable[NestedKey] | None = None,
        reward_keys: Iterable[NestedKey] | None = None,
    ) -> None:
        super().__init__()
        kwargs = _ted_kwargs(done_keys, reward_keys)
        self._save_hooks = [TED2Flat(**kwargs)]
        self._load_hooks = [Flat2TED(**kwargs)]


class NestedStorageCheckpointer(FlatStorageCheckpointer):
    """Saves a TED storage as one row per trajectory (:class:`~rbdata.TED2Nested`).

    The directory holds memory-mapped nested tensors (a ``<key>.memmap`` and a
    ``<key>.shape.memmap`` per entry), as torchrl's does. Same assumptions as
    :class:`~rbdata.FlatStorageCheckpointer`.

    Args:
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, NestedStorageCheckpointer
        >>> obs = torch.arange(6.0)
        >>> steps = TensorDict({"obs": obs, "next": {"obs": obs + 1, "reward": obs[:, None],
        ...     "done": (obs % 3 == 2)[:, None]}}, batch_size=[6])
        >>> storage = LazyTensorStorage(6)
        >>> storage.checkpointer = NestedStorageCheckpointer()
        >>> storage.set(torch.arange(6), steps)
        >>> copy = LazyTensorStorage(6)
        >>> copy.checkpointer = NestedStorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage.dumps(folder)
        ...     copy.loads(folder)
        >>> copy.get(torch.arange(6))["next", "obs"].tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    """

    def __init__(
        self,
        done_keys: Iterable[NestedKey] | None = None,
        reward_keys: Iterable[NestedKey] | None = None,
    ) -> None:
        super().__init__(done_keys, reward_keys)
        kwargs = _ted_kwargs(done_keys, reward_keys)
        self._save_hooks = [TED2Nested(**kwargs)]
        self._load_hooks = [Nested2TED(**kwargs)]


class H5StorageCheckpointer(NestedStorageCheckpointer):
    """Saves a TED storage in an h5 file, one group per trajectory (needs the ``hdf5`` extra).

    The rows go through :class:`~rbdata.TED2Nested` and :class:`~rbdata.H5Split`
    and are written with tensordict's ``PersistentTensorDict`` (plus a
    ``_len`` entry); loading reads them back through
    :class:`~rbdata.H5Combine` and :class:`~rbdata.Nested2TED`. The file is
    ``checkpoint_file`` in the directory given to ``dumps``/``loads``, or that
    path itself when it ends with ``.h5``. Same assumptions as
    :class:`~rbdata.FlatStorageCheckpointer`.

    Args:
        checkpoint_file: the file name inside the directory (``"checkpoint.h5"``).
        done_keys: the done entries (default ``("done", "truncated", "terminated")``).
        reward_keys: the reward entries (default ``("reward",)``).
        h5_kwargs: keyword arguments of ``h5py.File.create_dataset`` (e.g.
            ``{"compression": "gzip"}``).
        **kwargs: other arguments of :class:`~rbdata.TED2Flat`.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> from rbdata import H5StorageCheckpointer, LazyTensorStorage
        >>> obs = torch.arange(6.0)
        >>> steps = TensorDict({"obs": obs, "next": {"obs": obs + 1, "reward": obs[:, None],
        ...     "done": (obs % 3 == 2)[:, None]}}, batch_size=[6])
        >>> storage = LazyTensorStorage(6)
        >>> storage.checkpointer = H5StorageCheckpointer()
        >>> storage.set(torch.arange(6), steps)
        >>> copy = LazyTensorStorage(6)
        >>> copy.checkpointer = H5StorageCheckpointer()
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     storage.dumps(folder)
        ...     copy.loads(folder)
        >>> copy.get(torch.arange(6))["next", "obs"].tolist()
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    """

    def __init__(
        self,
        *,
        checkpoint_file: str = "checkpoint.h5",
        done_keys: Iterable[NestedKey] | None = None,
        reward_keys: Iterable[NestedKey] | None = None,
        h5_kwargs: Mapping[str, Any] | Iterable[tuple[str, Any]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(done_keys, reward_keys)
        if not isinstance(checkpoint_file, str) or not checkpoint_file:
            raise TypeError(f"checkpoint_file must be a non-empty str, got {checkpoint_file!r}.")
        ted_kwargs = {**kwargs, **_ted_kwargs(done_keys, reward_keys)}
        self._save_hooks = [TED2Nested(**ted_kwargs), H5Split()]
        self._load_hooks = [H5Combine(), Nested2TED(**ted_kwargs)]
        self.kwargs = {} if h5_kwargs is None else dict(h5_kwargs)
        self.checkpoint_file = checkpoint_file

    def dumps(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Write the rows of ``storage`` into the h5 file of ``path``."""
        from tensordict import NonTensorData, PersistentTensorDict

        if not storage.initialized:
            raise RuntimeError("Cannot save a non-initialized storage.")
        if storage.ndim != 1 or not len(storage):
            raise ValueError(
                f"{type(self).__name__} saves a non-empty storage with ndim=1; got ndim="
                f"{storage.ndim} and {len(storage)} items."
            )
        self._prepare_save_hooks(storage)
        file = self._file(path, create=True)
        rows = all_rows(storage, len(storage))
        for hook in self._save_hooks:
            rows = hook(rows)
        if not is_tensor_collection(rows):
            raise ValueError("Only tensor collections are supported.")
        data = PersistentTensorDict.from_dict(rows, file, **self.kwargs)
        try:
            data["_len"] = NonTensorData(data=len(storage))
        finally:
            data.close()

    def loads(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Read the h5 file of ``path`` into ``storage``."""
        from tensordict import PersistentTensorDict

        from .ted_flat import non_tensor_value

        file = self._file(path, create=False)
        data = PersistentTensorDict.from_h5(file)
        try:
            length = non_tensor_value(data, "_len")
            rows: Any = data
            for hook in self._load_hooks:
                rows = hook(rows, out=None)
        finally:
            data.close()
        if type(length) is not int or not 0 <= length <= storage.max_size_along_dim0:
            raise ValueError(f"{file}: '_len' is {length!r}, expected an int up to the capacity.")
        if storage.initialized and len(storage) and isinstance(rows, TensorDictBase):
            rows = rows.select(*storage.get(torch.arange(1)).keys(True, True), strict=False)
        with transaction(storage):
            storage.empty()
            if length:
                storage.set(torch.arange(length), rows[:length].to_tensordict())

    def _file(self, path: str | os.PathLike[str], *, create: bool) -> str:
        if importlib.util.find_spec("h5py") is None:
            raise ImportError(
                "H5StorageCheckpointer needs the 'hdf5' extra: pip install 'rbdata[hdf5]'."
            )
        target = Path(path)
        if target.suffix == ".h5":
            return str(target.absolute())
        if create:
            try:
                target.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise RuntimeError(f"Failed to create the checkpoint directory {target}.") from err
        return str((target / self.checkpoint_file).absolute())
