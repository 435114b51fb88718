"""WriterEnsemble: the writers of the members of a replay-buffer ensemble (torchrl's class)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

import torch

from rbdata._component.members import select_members
from rbdata._component.stateful import load_members_state, members_state
from rbdata.storages._base import Storage
from rbdata.storages.ensemble import StorageEnsemble

from ._base import Writer

__all__ = ["WriterEnsemble"]


class WriterEnsemble(Writer):
    """An ensemble of writers, one per member of a :class:`~rbdata.StorageEnsemble`.

    It does not write itself (``add``/``extend`` raise ``NotImplementedError``,
    as torchrl's): write through a member buffer (``ensemble_buffer[i].extend``)
    or a routed :class:`~rbdata.ReplayBufferEnsemble`. ``write_count`` sums the
    members'; state, ``dumps`` and ``loads`` hold one entry per member.

    Args:
        *writers: the member writers.

    Examples:
        >>> from rbdata import RoundRobinWriter, WriterEnsemble
        >>> writers = WriterEnsemble(RoundRobinWriter(), RoundRobinWriter())
        >>> len(writers), type(writers[1]).__name__, writers.write_count
        (2, 'RoundRobinWriter', 0)
    """

    def __init__(self, *writers: Writer) -> None:
        super().__init__()
        for i, writer in enumerate(writers):
            if not isinstance(writer, Writer):
                raise TypeError(f"writers[{i}] must be a Writer, got {type(writer).__name__}.")
        self._writers = tuple(writers)

    @property
    def writers(self) -> tuple[Writer, ...]:
        """The member writers, in order."""
        return self._writers

    @property
    def write_count(self) -> int:
        """The items written by all members."""
        return sum(writer.write_count for writer in self._writers)

    @property
    def tracks_generations(self) -> bool:
        """Whether every member writer tracks slot generations."""
        return all(writer.tracks_generations for writer in self._writers)

    def register_storage(self, storage: Storage) -> None:
        """Register ``storage`` (a StorageEnsemble): member ``i`` writes into its member ``i``."""
        if not isinstance(storage, StorageEnsemble):
            raise TypeError(
                f"WriterEnsemble requires a StorageEnsemble, got {type(storage).__name__}."
            )
        if len(storage.members) != len(self._writers):
            raise ValueError(
                "WriterEnsemble and StorageEnsemble must have the same number of members: "
                f"got {len(self._writers)} writers and {len(storage.members)} storages."
            )
        self._storage = storage
        for writer, member in zip(self._writers, storage.members, strict=True):
            writer.register_storage(member)

    def add(self, data: Any) -> int:
        """Refused: write through a member (``NotImplementedError``, as torchrl)."""
        raise NotImplementedError("WriterEnsemble does not write: write through a member.")

    def extend(self, data: Any) -> torch.Tensor:
        """Refused: write through a member (``NotImplementedError``, as torchrl)."""
        raise NotImplementedError("WriterEnsemble does not write: write through a member.")

    def _write_one(self, data: Any) -> int:
        raise NotImplementedError("WriterEnsemble does not write: write through a member.")

    def _write_batch(self, data: Any) -> torch.Tensor:
        raise NotImplementedError("WriterEnsemble does not write: write through a member.")

    def state_dict(self) -> dict[str, Any]:
        """``{"0": writer 0's state_dict, ...}``."""
        return members_state(self._writers)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load each member writer's state from ``state_dict[str(i)]``."""
        load_members_state(self._writers, state_dict, strict=False)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save each member writer in the sub-folder ``<i>`` of ``path``."""
        root = Path(path).absolute()
        root.mkdir(parents=True, exist_ok=True)
        for i, writer in enumerate(self._writers):
            writer.dumps(root / str(i))

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load what :meth:`dumps` wrote under ``path``."""
        root = Path(path).absolute()
        for i, writer in enumerate(self._writers):
            writer.loads(root / str(i))

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            if len(index) > 1:
                raise IndexError(
                    "Tuple of length greater than 1 are not accepted to index writers of "
                    f"type {type(self)}."
                )
            index = slice(None) if index[0] is Ellipsis else index[0]
        members = select_members(index, len(self._writers))
        if members is None:
            return self
        if isinstance(members, int):
            return self._writers[members]
        return WriterEnsemble(*(self._writers[i] for i in members))

    def __len__(self) -> int:
        return len(self._writers)

    def __repr__(self) -> str:
        writers = textwrap.indent(f"writers={self._writers}", " " * 4)
        return f"WriterEnsemble(\n{writers})"
