"""StorageEnsemble: the storages of several replay buffers, read together (torchrl's class)."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from typing import Any

from tensordict import TensorDictBase

from rbdata._component.members import select_members
from rbdata._component.stateful import load_members_state, members_state

from ._base import Index, Storage
from .checkpointers import StorageEnsembleCheckpointer

__all__ = ["StorageEnsemble"]

Transform = Callable[[Any], Any]


class StorageEnsemble(Storage):
    """An ensemble of storages, read by a :class:`~rbdata.ReplayBufferEnsemble`.

    ``get`` takes what a :class:`~rbdata.SamplerEnsemble` draws (a TensorDict
    with ``"buffer_ids"`` and per-member ``"index"`` rows) and returns a list
    of ``(buffer_id, items)`` pairs, each passed through that member's
    transform. ``len(ensemble)`` is the number of members; ``ensemble[i]`` is
    member ``i``, a slice, list or tensor of member ids a sub-ensemble, and
    ``ensemble[:, idx]`` reads ``idx`` of every member. The ensemble does not
    write: write into a member (``RuntimeError`` otherwise, as torchrl).

    Args:
        *storages: the member storages.
        transforms: one transform (or None) per member, applied to what
            :meth:`get` reads from it.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, StorageEnsemble
        >>> ensemble = StorageEnsemble(LazyTensorStorage(10), LazyTensorStorage(10))
        >>> ensemble[1].set(torch.arange(4), torch.arange(4.0))
        >>> draw = TensorDict(buffer_ids=torch.tensor([1]), index=torch.tensor([[3, 0]]))
        >>> ensemble.get(draw)
        [(1, tensor([3., 0.]))]
        >>> len(ensemble), ensemble.max_size
        (2, 20)
    """

    _default_checkpointer = StorageEnsembleCheckpointer

    def __init__(
        self, *storages: Storage, transforms: list[Transform | None] | None = None
    ) -> None:
        for i, storage in enumerate(storages):
            if not isinstance(storage, Storage):
                raise TypeError(f"storages[{i}] must be a Storage, got {type(storage).__name__}.")
        if transforms is not None and len(transforms) != len(storages):
            raise TypeError(
                f"transforms must have the same length as the storages provided: got "
                f"{len(transforms)} transforms for {len(storages)} storages."
            )
        self._storages = tuple(storages)
        self._transforms = None if transforms is None else list(transforms)
        super().__init__(max_size=sum(storage.max_size for storage in storages) or 1)
        self._checkpointer = StorageEnsembleCheckpointer()

    @property
    def members(self) -> tuple[Storage, ...]:
        """The member storages, in order."""
        return self._storages

    @property
    def transforms(self) -> list[Transform | None] | None:
        """The member transforms (None: none given)."""
        return self._transforms

    @property
    def initialized(self) -> bool:
        """Whether every member is initialized."""
        return all(storage.initialized for storage in self._storages)

    def __len__(self) -> int:
        return len(self._storages)

    # ------------------------------------------------------------- reading
    def get(self, index: Any) -> Any:
        """``[(buffer_id, items), ...]`` for a SamplerEnsemble draw ``{"buffer_ids", "index"}``."""
        if not isinstance(index, TensorDictBase) or "buffer_ids" not in index.keys():
            raise TypeError(
                "index must be a TensorDict with 'buffer_ids' and 'index' entries (what a "
                f"SamplerEnsemble draws), got {type(index).__name__}."
            )
        results = []
        for buffer_id, rows in zip(
            index.get("buffer_ids").tolist(), index.get("index"), strict=True
        ):
            items = self._storages[buffer_id].get(rows)
            transform = None if self._transforms is None else self._transforms[buffer_id]
            results.append((buffer_id, items if transform is None else transform(items)))
        return results

    def _get(self, index: Index) -> Any:
        return self.get(index)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, tuple):
            head, rest = index[0], index[1:]
            chosen = self[slice(None) if head is Ellipsis else head]
            if not rest:
                return chosen
            inner = rest[0] if len(rest) == 1 else rest
            if chosen is self:
                return [storage[inner] for storage in self._storages]
            return (
                chosen[(slice(None),) + rest]
                if isinstance(chosen, StorageEnsemble)
                else chosen[inner]
            )
        members = select_members(index, len(self._storages))
        if members is None:
            return self
        if isinstance(members, int):
            return self._storages[members]
        transforms: list[Transform | None] = (
            [None] * len(members)
            if self._transforms is None
            else [self._transforms[i] for i in members]
        )
        return StorageEnsemble(*(self._storages[i] for i in members), transforms=transforms)

    # ------------------------------------------------------------- writing
    def _set(self, index: Index, data: Any) -> int:
        raise RuntimeError(
            "StorageEnsemble does not write: index the ensemble (ensemble[i]) and write there."
        )

    def _empty(self) -> None:
        for storage in self._storages:
            storage.empty()

    # --------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """``{"0": member 0's state_dict, "1": ...}``."""
        return members_state(self._storages)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load each member's state from ``state_dict[str(i)]``."""
        load_members_state(self._storages, state_dict, strict=True)

    def __repr__(self) -> str:
        storages = textwrap.indent(f"storages={self._storages}", " " * 4)
        transforms = textwrap.indent(f"transforms={self._transforms}", " " * 4)
        return f"StorageEnsemble(\n{storages}, \n{transforms})"
