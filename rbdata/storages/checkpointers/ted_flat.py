"""TED2Flat / Flat2TED: a TED storage in a compact, flat form (each observation stored once).

A TED (TensorDict Environment Data) row holds a step: ``obs``, ``action``, and
under ``"next"`` the next ``obs``, ``reward`` and done flags. Consecutive rows
of a trajectory repeat each observation (as ``("next", obs)`` of one row and
``obs`` of the next). The flat form stores, for each key found under
``"next"`` other than the done and reward keys, one sequence per trajectory
with its last ``next`` value appended (``N + number of trajectories`` rows);
the done and reward keys from ``"next"`` and the root-only keys keep ``N``
rows. Rows are laid out oldest first (a full ring is unrolled from the
``shift`` slot), and the entries ``shift``, ``is_full`` and ``_storage_shape``
record how to put them back.

As torchrl's, the conversion assumes (without checking) that the root done
flags are False and that ``("next", obs)`` of a step is ``obs`` of the
following one within a trajectory.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from rbdata._component.checks import NestedKey, normalize_key
from rbdata._component.done_keys import DEFAULT_DONE_KEYS

__all__ = ["Flat2TED", "TED2Flat"]


def _keys(keys: Iterable[Any], name: str) -> set[NestedKey]:
    if isinstance(keys, str):
        raise TypeError(f"{name} must be an iterable of keys (a tuple or list), got {keys!r}.")
    return {normalize_key(key, name) for key in keys}


def non_tensor_value(data: TensorDictBase, key: NestedKey) -> Any:
    """The plain value of a non-tensor entry (a NonTensorData, or a one-element tensor)."""
    value = data.get(key, None)
    if isinstance(value, NonTensorData):
        value = value.data
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, np.ndarray | np.generic):  # read back from an h5 file
        return value.tolist()
    return value


class _Layout:
    """The settings shared by the save and the load converters."""

    def __init__(
        self,
        done_key: NestedKey,
        shift_key: NestedKey,
        is_full_key: NestedKey,
        done_keys: Iterable[NestedKey],
        reward_keys: Iterable[NestedKey],
    ) -> None:
        self.done_key = normalize_key(done_key, "done_key")
        self.shift_key = normalize_key(shift_key, "shift_key")
        self.is_full_key = normalize_key(is_full_key, "is_full_key")
        self.done_keys = _keys(done_keys, "done_keys")
        self.reward_keys = _keys(reward_keys, "reward_keys")

    @property
    def _step_keys(self) -> set[NestedKey]:
        return self.done_keys | self.reward_keys


class TED2Flat(_Layout):
    """A save hook: TED rows -> the flat form (see the module docstring).

    Called by a checkpointer as ``hook(data, path=...)``, after it set the
    ``shift`` (the slot after the last one written) and ``is_full`` attributes.
    Returns the flat TensorDict (in memory; the checkpointer writes it).

    Args:
        done_key: where the done flags are read. Defaults to ``("next", "done")``.
        shift_key: the entry the shift is written to. Defaults to ``"shift"``.
        is_full_key: the entry ``is_full`` is written to. Defaults to ``"is_full"``.
        done_keys: the done entries. Defaults to ``("done", "truncated", "terminated")``.
        reward_keys: the reward entries. Defaults to ``("reward",)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import Flat2TED, TED2Flat
        >>> steps = TensorDict(
        ...     {"obs": torch.tensor([0.0, 1.0, 10.0]),
        ...      "next": {"obs": torch.tensor([1.0, 2.0, 11.0]), "reward": torch.ones(3, 1),
        ...               "done": torch.tensor([[False], [True], [False]])}},
        ...     batch_size=[3],
        ... )
        >>> to_flat = TED2Flat()
        >>> to_flat.shift, to_flat.is_full = 3, True
        >>> flat = to_flat(steps)
        >>> flat["obs"].tolist()  # two trajectories, each with its last next obs
        [0.0, 1.0, 2.0, 10.0, 11.0]
        >>> back = Flat2TED()(flat)
        >>> (back["next", "obs"] == steps["next", "obs"]).all().item()
        True
    """

    def __init__(
        self,
        done_key: NestedKey = ("next", "done"),
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: Iterable[NestedKey] = DEFAULT_DONE_KEYS,
        reward_keys: Iterable[NestedKey] = ("reward",),
    ) -> None:
        super().__init__(done_key, shift_key, is_full_key, done_keys, reward_keys)
        self.shift: int | None = None
        self.is_full: bool | None = None

    def __call__(self, data: TensorDictBase, path: str | os.PathLike[str] | None = None) -> Any:
        """The flat form of the TED rows ``data`` (``path`` is accepted and not used)."""
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"{type(self).__name__} converts TensorDicts, got {type(data).__name__}."
            )
        if data.ndim != 1:
            raise ValueError(
                f"{type(self).__name__} converts rows of a 1-d storage; got batch size "
                f"{tuple(data.batch_size)}."
            )
        shift, is_full = self._ring()
        n = data.shape[0]
        order = (torch.arange(n) + shift) % n if is_full else torch.arange(n)
        done = data.get(self.done_key).reshape(n, -1)[:, 0].clone().bool()[order]
        if is_full:
            done[-1] = True
        else:
            done[shift - 1] = True
        # where each step's value lands in an expanded key, and the trajectory ends after it
        before = torch.cumsum(done.long(), 0) - done.long()
        position = torch.arange(n) + before
        ends = position[done] + 1
        total = n + int(done.sum())
        next_td = data.get("next")
        next_keys = set(next_td.keys(True, True))
        expand = next_keys - self._step_keys
        out = TensorDict(batch_size=[])
        out.set_non_tensor(self.is_full_key, is_full)
        out.set_non_tensor(self.shift_key, shift)
        out.set_non_tensor("_storage_shape", tuple(data.shape))
        for key in sorted(set(data.exclude("next").keys(True, True)) | next_keys, key=str):
            entry = (next_td if key in self._step_keys else data).get(key)[order]
            if key in expand:
                values = torch.zeros((total, *entry.shape[1:]), dtype=entry.dtype)
                values[position] = entry
                values[ends] = next_td.get(key)[order][done]
                out.set(key, values)
            else:
                out.set(key, entry.clone())
        return out

    def _ring(self) -> tuple[int, bool]:
        shift, is_full = self.shift, self.is_full
        if type(shift) is not int or is_full is None:
            raise RuntimeError(
                f"{type(self).__name__} needs its shift and is_full attributes set (a storage "
                "checkpointer sets them before calling its save hooks)."
            )
        return shift, bool(is_full)


class Flat2TED(_Layout):
    """A load hook: the flat form -> TED rows, in the storage's slot order.

    Called by a checkpointer as ``hook(data, out=None)``; returns a TensorDict
    of ``_storage_shape`` rows. The root done entries (other than the reward)
    that the flat form lacks are created as zeros (False), as torchrl does.

    Args:
        done_key: where the done flags are read in the flat form. Defaults to ``"done"``.
        shift_key: where the shift is read. Defaults to ``"shift"``.
        is_full_key: where ``is_full`` is read. Defaults to ``"is_full"``.
        done_keys: the done entries. Defaults to ``("done", "truncated", "terminated")``.
        reward_keys: the reward entries. Defaults to ``("reward",)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import Flat2TED
        >>> flat = TensorDict(
        ...     {"obs": torch.tensor([0.0, 1.0, 2.0]), "done": torch.tensor([[False], [True]]),
        ...      "reward": torch.ones(2, 1)}, batch_size=[])
        >>> _ = flat.set_non_tensor("shift", 2)
        >>> _ = flat.set_non_tensor("is_full", True)
        >>> _ = flat.set_non_tensor("_storage_shape", (2,))
        >>> steps = Flat2TED()(flat)
        >>> steps["obs"].tolist(), steps["next", "obs"].tolist()
        ([0.0, 1.0], [1.0, 2.0])
    """

    def __init__(
        self,
        done_key: NestedKey = "done",
        shift_key: NestedKey = "shift",
        is_full_key: NestedKey = "is_full",
        done_keys: Iterable[NestedKey] = DEFAULT_DONE_KEYS,
        reward_keys: Iterable[NestedKey] = ("reward",),
    ) -> None:
        super().__init__(done_key, shift_key, is_full_key, done_keys, reward_keys)

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        """TED rows from the flat form ``data``; written into ``out`` when it is given."""
        shape = non_tensor_value(data, "_storage_shape")
        shift = non_tensor_value(data, self.shift_key)
        is_full = bool(non_tensor_value(data, self.is_full_key))
        if isinstance(shape, int):
            shape = (shape,)
        if shape is None or len(shape) != 1:
            raise ValueError(
                f"{type(self).__name__} reads the flat form of a 1-d storage; got "
                f"_storage_shape={shape!r}."
            )
        if type(shift) is not int:
            raise ValueError(f"the flat form holds no int {self.shift_key!r} entry: {shift!r}.")
        n = int(shape[0])
        done = data.get(self.done_key).reshape(n, -1)[:, 0].clone().bool()
        if is_full:
            done[-1] = True
        else:
            done[shift - 1] = True
        before = torch.cumsum(done.long(), 0) - done.long()
        position = torch.arange(n) + before
        # slot s holds the logical step (s - shift) % n of a full ring
        logical = (torch.arange(n) - shift) % n if is_full else torch.arange(n)
        result = TensorDict(batch_size=[n])
        for key, entry in data.items(True, True):
            if not isinstance(entry, torch.Tensor):
                continue
            if entry.shape[0] == n:
                if key in self._step_keys:
                    result.set(("next", *_path(key)), entry[logical])
                    if key != "reward" and key not in result.keys(True, True):
                        result.set(key, torch.zeros_like(entry))
                else:
                    result.set(key, entry[logical])
                continue
            roots = entry[position]
            nexts = torch.zeros_like(roots)
            last = n if is_full else n - 1
            nexts[:last] = entry[position[:last] + 1]
            result.set(key, roots[logical])
            result.set(("next", *_path(key)), nexts[logical])
        if out is not None:
            out.update_(result.select(*out.keys(True, True), strict=False))
            return out
        return result


def _path(key: NestedKey) -> tuple[str, ...]:
    return (key,) if isinstance(key, str) else tuple(key)
