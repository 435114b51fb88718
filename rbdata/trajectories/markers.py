"""What splits transitions into trajectories: :class:`Markers` and the rule picking them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from rbdata._component.checks import NestedKey
from rbdata._component.done_keys import DEFAULT_DONE_KEYS
from rbdata.storages import Storage
from rbdata.trajectories.reading import LeafSource, read_leaf

__all__ = ["DEFAULT_DONE_KEYS", "QUERY_TRAJ_KEYS", "SLICE_TRAJ_KEYS", "Markers", "resolve_markers"]

SLICE_TRAJ_KEYS: tuple[NestedKey, ...] = ("episode", ("collector", "traj_ids"), "traj_ids")
QUERY_TRAJ_KEYS: tuple[NestedKey, ...] = (("collector", "traj_ids"), "traj_ids", "episode")
_END_KEYS: tuple[tuple[NestedKey, ...], ...] = (
    (("next", "done"), ("next", "terminated"), ("next", "truncated")),
    ("done", "terminated", "truncated"),
)


@dataclass(frozen=True)
class Markers:
    """What splits transitions into trajectories.

    Attributes:
        kind: ``"ids"`` (a trajectory id per transition) or ``"ends"`` (end flags).
        keys: the entries read; end flags from several keys are OR-ed.
    """

    kind: str
    keys: tuple[NestedKey, ...]

    def read(self, storage: Storage | LeafSource, slots: torch.Tensor) -> torch.Tensor:
        """One marker per slot: the id (``"ids"``) or the end flag (``"ends"``)."""
        n = slots.numel()
        if self.kind == "ids":
            return read_leaf(storage, self.keys[0], slots).reshape(n, -1)[:, 0].cpu()
        flags = read_leaf(storage, self.keys[0], slots).reshape(n, -1).any(1)
        for key in self.keys[1:]:
            flags |= read_leaf(storage, key, slots).reshape(n, -1).any(1)
        return flags.cpu()


def resolve_markers(
    keys: set[NestedKey],
    *,
    traj_key: NestedKey | None,
    end_key: NestedKey | None,
    traj_candidates: Iterable[NestedKey],
) -> Markers:
    """Pick the entries that delimit trajectories among the stored ``keys``.

    A given ``traj_key`` is used when it is stored; then a given ``end_key``
    (so both may be given: ids when the data has them, else end flags). With
    neither, the first stored candidate id key is used, then the
    done/terminated/truncated flags under ``"next"`` (TED layout), then at the root.

    Raises:
        KeyError: when the requested (or any usable) entry is not stored.
    """
    stored = sorted(map(str, keys))
    if traj_key is not None and traj_key in keys:
        return Markers("ids", (traj_key,))
    if end_key is not None and end_key in keys:
        return Markers("ends", (end_key,))
    for name, key in (("traj_key", traj_key), ("end_key", end_key)):
        if key is not None:
            raise KeyError(f"{name}={key!r} is not stored; stored keys are {stored}.")
    for key in traj_candidates:
        if key in keys:
            return Markers("ids", (key,))
    for group in _END_KEYS:
        found = tuple(k for k in group if k in keys)
        if found:
            return Markers("ends", found)
    raise KeyError(
        "cannot split the data into trajectories: no trajectory id entry "
        f"({list(traj_candidates)}) nor done/terminated/truncated flag is stored "
        f"(stored keys: {stored}); pass traj_key or end_key."
    )
