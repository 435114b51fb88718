"""StorageEnsembleCheckpointer: each member of a StorageEnsemble in a folder of its own."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from .base import StorageCheckpointerBase, _CheckpointedStorage

__all__ = ["StorageEnsembleCheckpointer"]


@runtime_checkable
class _Stateful(Protocol):
    def state_dict(self) -> dict[str, object]: ...

    def load_state_dict(self, state_dict: dict[str, object]) -> None: ...


@runtime_checkable
class _Ensemble(Protocol):
    @property
    def members(self) -> tuple[_CheckpointedStorage, ...]: ...

    @property
    def transforms(self) -> list[object] | None: ...


class StorageEnsembleCheckpointer(StorageCheckpointerBase):
    """Checkpointer of a :class:`~rbdata.StorageEnsemble` (torchrl's layout).

    ``dumps`` writes ``metadata.json`` (``{"empty_members": [...]}``), each
    non-empty member's own ``dumps`` in the sub-folder ``<i>``, and the state
    of each member transform that has one as ``<i>_transform.pt``; ``loads``
    reads them back, emptying the members saved empty. Nothing is unpickled
    (states load with ``weights_only=True``).

    Examples:
        >>> import tempfile, torch
        >>> from rbdata import LazyTensorStorage, StorageEnsemble
        >>> ensemble = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> ensemble[0].set(torch.arange(2), torch.ones(2, 3))
        >>> copy = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     ensemble.dumps(folder)
        ...     copy.loads(folder)
        >>> len(copy[0]), len(copy[1])
        (2, 0)
    """

    def dumps(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Write every member of the ensemble ``storage`` under ``path``."""
        ensemble = _as_ensemble(storage)
        root = Path(path).absolute()
        root.mkdir(parents=True, exist_ok=True)
        empty = [i for i, member in enumerate(ensemble.members) if not len(member)]
        (root / "metadata.json").write_text(json.dumps({"empty_members": empty}))
        for i, member in enumerate(ensemble.members):
            if i not in empty:
                member.dumps(root / str(i))
        for i, transform in enumerate(ensemble.transforms or ()):
            if isinstance(transform, _Stateful):
                torch.save(transform.state_dict(), root / f"{i}_transform.pt")

    def loads(self, storage: _CheckpointedStorage, path: str | os.PathLike[str]) -> None:
        """Read what :meth:`dumps` wrote under ``path`` into the members of ``storage``."""
        ensemble = _as_ensemble(storage)
        root = Path(path).absolute()
        metadata = root / "metadata.json"
        empty: set[int] = set()
        if metadata.exists():
            found = json.loads(metadata.read_text()).get("empty_members", [])
            if not isinstance(found, list) or not all(type(i) is int for i in found):
                raise ValueError(f"{metadata}: 'empty_members' must be a list of ints.")
            empty = set(found)
        for i, member in enumerate(ensemble.members):
            if i in empty:
                member.empty()
            else:
                member.loads(root / str(i))
        for i, transform in enumerate(ensemble.transforms or ()):
            state_file = root / f"{i}_transform.pt"
            if isinstance(transform, _Stateful) and state_file.exists():
                state = torch.load(state_file, weights_only=True, map_location="cpu")
                transform.load_state_dict(state)


def _as_ensemble(storage: object) -> _Ensemble:
    if not isinstance(storage, _Ensemble):
        raise TypeError(
            f"storage must be a StorageEnsemble for a StorageEnsembleCheckpointer, "
            f"got {type(storage).__name__}."
        )
    return storage
