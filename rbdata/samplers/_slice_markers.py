"""Which stored entries split a slice sampler's storage into trajectories (torchrl's rules)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from rbdata._component.checks import NestedKey
from rbdata.errors import MarkerShapeError
from rbdata.storages import Storage
from rbdata.trajectories.markers import Markers
from rbdata.trajectories.reading import read_leaf, storage_keys

#: Trajectory-id entries tried, in order, when no ``traj_key`` is given (torchrl's two first).
AUTO_ID_KEYS: tuple[NestedKey, ...] = (("collector", "traj_ids"), "episode", "traj_ids")
#: End-flag groups tried when no end key is given; the stored flags of a group are OR-ed.
AUTO_END_GROUPS: tuple[tuple[NestedKey, ...], ...] = (
    (("next", "done"), ("next", "terminated"), ("next", "truncated")),
    ("done", "terminated", "truncated"),
)
#: torchrl's default ``end_key``, reported when no end key is given.
DEFAULT_END_KEY: NestedKey = ("next", "done")


@dataclass(frozen=True)
class MarkerRule:
    """The marker arguments of a slice sampler and how they are resolved.

    Resolution follows torchrl: a given ``traj_key`` that is stored, then the
    given end flags (``end_keys``: those stored, OR-ed; or ``end_key``); a
    missing ``traj_key`` falls back to the end flags and missing end flags to
    the trajectory ids. With nothing given, ``("collector", "traj_ids")``,
    ``"episode"`` and ``"traj_ids"`` are tried, then the done / terminated /
    truncated flags under ``"next"`` (OR-ed), then at the root.

    Attributes:
        traj_key: the trajectory-id entry given (None: auto-detected).
        end_key: the end-flag entry given (None: defaults).
        end_keys: end-flag entries given, OR-ed (None: not given).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage
        >>> storage = LazyTensorStorage(4)
        >>> data = {"episode": torch.zeros(4), ("collector", "traj_ids"): torch.zeros(4)}
        >>> storage.set(slice(0, 4), TensorDict(data, [4]))
        >>> MarkerRule(None, None, None).resolve(storage)
        Markers(kind='ids', keys=(('collector', 'traj_ids'),))
    """

    traj_key: NestedKey | None
    end_key: NestedKey | None
    end_keys: Sequence[NestedKey] | None

    def resolve(self, storage: Storage) -> Markers:
        """The markers of ``storage``.

        Raises:
            KeyError: when no usable entry is stored.
            MarkerShapeError: when the chosen entry holds more than one value
                per transition (torchrl: "Expected the end-of-trajectory signal
                to be 1-dimensional").
        """
        keys = storage_keys(storage)
        markers = self._pick(keys)
        if markers is None:
            raise KeyError(
                "cannot split the data into trajectories: "
                f"{self._tried()} (stored keys: {sorted(map(str, keys))}); pass traj_key, "
                "end_key or end_keys naming a stored entry."
            )
        for key in markers.keys:
            _check_per_transition(storage, key, markers.kind)
        return markers

    def _pick(self, keys: set[NestedKey]) -> Markers | None:
        if self.traj_key is not None and self.traj_key in keys:
            return Markers("ids", (self.traj_key,))
        given_ends = (
            tuple(self.end_keys)
            if self.end_keys is not None
            else (self.end_key,)
            if self.end_key is not None
            else ()
        )
        found = tuple(k for k in given_ends if k in keys)
        if found:
            return Markers("ends", found)
        if self.traj_key is None:
            for key in AUTO_ID_KEYS:
                if key in keys:
                    return Markers("ids", (key,))
        if not given_ends:
            for group in AUTO_END_GROUPS:
                found = tuple(k for k in group if k in keys)
                if found:
                    return Markers("ends", found)
        return None

    def _tried(self) -> str:
        parts = []
        if self.traj_key is not None:
            parts.append(f"traj_key={self.traj_key!r} is not stored")
        if self.end_keys is not None:
            parts.append(f"none of end_keys={tuple(self.end_keys)!r} is stored")
        elif self.end_key is not None:
            parts.append(f"end_key={self.end_key!r} is not stored")
        if self.traj_key is None:
            parts.append(f"no trajectory id entry ({list(AUTO_ID_KEYS)}) is stored")
        if self.end_keys is None and self.end_key is None:
            parts.append("no done/terminated/truncated flag is stored")
        return "; ".join(parts)


def _check_per_transition(storage: Storage, key: NestedKey, kind: str) -> None:
    shape = read_leaf(storage, key, torch.zeros(1, dtype=torch.long)).shape[1:]
    if shape.numel() != 1:
        what = "end-of-trajectory flag" if kind == "ends" else "trajectory id"
        ndim = storage.ndim
        raise MarkerShapeError(
            f"Expected the end-of-trajectory signal to be {ndim}-dimensional: the "
            f"{what} entry {key!r} holds shape {tuple(shape)} per stored transition, "
            "expected a single value (e.g. shape [N] or [N, 1] for N transitions)."
        )
