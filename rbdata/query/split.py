"""How a query splits transitions into trajectories: the markers, and the split itself.

Boundaries come from a trajectory id entry (``trajectory_key``, else the first
stored of ``("collector", "traj_ids")``, ``"traj_ids"`` and ``"episode"``),
else from done/terminated/truncated flags (with a warning); the split is
:func:`~rbdata.trajectories.runs.split_runs`, lane by lane for a storage with
``ndim > 1``.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from tensordict import TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata.storages import Storage
from rbdata.trajectories.markers import QUERY_TRAJ_KEYS, Markers, resolve_markers
from rbdata.trajectories.reading import get_items, storage_keys
from rbdata.trajectories.ring import chronological_order
from rbdata.trajectories.runs import split_runs

__all__ = ["markers_of", "split_data", "split_storage", "tensordict_keys"]


def markers_of(keys: set[NestedKey], trajectory_key: NestedKey | None) -> Markers:
    """What splits transitions into trajectories; warns when it falls back to end flags."""
    if trajectory_key is not None:
        key = normalize_key(trajectory_key, "trajectory_key")
        if key not in keys:
            raise KeyError(
                f"trajectory_key {key!r} is not stored; stored keys are {sorted(map(str, keys))}."
            )
        return Markers("ids", (key,))
    try:
        markers = resolve_markers(
            keys, traj_key=None, end_key=None, traj_candidates=QUERY_TRAJ_KEYS
        )
    except KeyError:
        raise KeyError(
            "Cannot split data into trajectories: no trajectory id entry "
            f"({', '.join(map(repr, QUERY_TRAJ_KEYS))}) nor done/terminated/truncated flag "
            f"is stored (stored keys: {sorted(map(str, keys))}); pass trajectory_key."
        ) from None
    if markers.kind == "ends":
        warnings.warn(
            f"no trajectory id entry is stored: splitting on the end-of-episode flags "
            f"{markers.keys}. A trajectory whose last transition has no end flag is merged "
            "with the next one; store trajectory ids (e.g. ('collector', 'traj_ids')) or "
            "pass trajectory_key.",
            UserWarning,
            stacklevel=4,
        )
    return markers


def tensordict_keys(storage: Storage) -> set[NestedKey]:
    """The stored entries; a storage of anything but single TensorDict transitions raises."""
    try:
        keys = storage_keys(storage)
    except TypeError as err:
        raise TypeError(f"query needs a tensordict-backed storage: {err}") from None
    if not storage.has_tensordict_leaves:
        first = get_items(storage, torch.zeros(1, dtype=torch.long))
        if first.batch_dims > 1:
            raise TypeError(
                "query on a list storage expects single-transition items (batch_size=[]), "
                f"got items of batch_size={list(first.batch_size[1:])}."
            )
    return keys


def split_storage(
    storage: Storage, markers: Markers, cursor: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(order, starts, lengths)``: the slots of ``storage`` oldest first, and its trajectories.

    ``starts`` are positions in ``order``; for ``ndim > 1`` the slots are grouped by
    batch coordinate, each group in time order (a trajectory never spans two).
    """
    order, group = chronological_order(storage, cursor)
    starts, lengths = split_runs(markers.read(storage, order).numpy(), markers.kind, lane=group)
    return order, torch.from_numpy(starts), torch.from_numpy(lengths)


class _Rows:
    """A TensorDict of transitions read like a storage's leaves (what :class:`Markers` reads)."""

    def __init__(self, data: TensorDictBase) -> None:
        self._data = data

    def get_leaf(self, key: NestedKey) -> torch.Tensor:
        leaf: torch.Tensor = self._data.get(key)
        return leaf


def split_data(
    data: Any, trajectory_key: NestedKey | None, caller: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(starts, lengths)`` of the trajectories of a flat TensorDict of transitions."""
    if not isinstance(data, TensorDictBase):
        raise TypeError(
            f"{caller} expects a TensorDictBase of transitions, got {type(data).__name__}."
        )
    if data.batch_dims != 1:
        raise ValueError(
            f"{caller} expects data with a single batch dimension (flat transitions), got "
            f"batch_size={list(data.batch_size)}."
        )
    n = int(data.batch_size[0])
    if n == 0:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    markers = markers_of({normalize_key(k) for k in data.keys(True, True)}, trajectory_key)
    starts, lengths = split_runs(markers.read(_Rows(data), torch.arange(n)).numpy(), markers.kind)
    return torch.from_numpy(starts), torch.from_numpy(lengths)
