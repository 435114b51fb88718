"""TED2Nested / Nested2TED: the flat form cut into one row per trajectory (nested tensors)."""

from __future__ import annotations

import os
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from .ted_flat import Flat2TED, TED2Flat, non_tensor_value

__all__ = ["Nested2TED", "TED2Nested"]


def trajectory_lengths(flat: TensorDictBase, shift: int, is_full: bool) -> torch.Tensor:
    """The length of each trajectory of the flat form ``flat`` (oldest first)."""
    done = flat.get("done").reshape(-1, *flat.get("done").shape[1:])
    done = done.reshape(done.shape[0], -1)[:, 0].clone().bool()
    if not is_full:
        done[shift - 1] = True
    done[-1] = True
    ends = done.nonzero().flatten()
    return torch.diff(ends, prepend=torch.tensor([-1]))


class TED2Nested(TED2Flat):
    """A save hook: TED rows -> one row per trajectory, each key a nested tensor.

    The flat form of :class:`~rbdata.TED2Flat`, cut at the trajectory ends:
    the result has a batch size of the number of trajectories; a key stored
    once per step holds each trajectory's steps, a key of ``"next"`` stored
    once per observation (``obs``) holds them plus the trajectory's last next
    value (not for the unwritten tail of a storage that is not full). The
    ``shift``, ``is_full`` and ``_storage_shape`` entries are kept.
    Arguments: those of :class:`~rbdata.TED2Flat`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import Nested2TED, TED2Nested
        >>> steps = TensorDict(
        ...     {"obs": torch.tensor([0.0, 1.0, 10.0]),
        ...      "next": {"obs": torch.tensor([1.0, 2.0, 11.0]), "reward": torch.ones(3, 1),
        ...               "done": torch.tensor([[False], [True], [False]])}},
        ...     batch_size=[3],
        ... )
        >>> to_nested = TED2Nested()
        >>> to_nested.shift, to_nested.is_full = 3, True
        >>> nested = to_nested(steps)
        >>> [t.tolist() for t in nested["obs"].unbind(0)]
        [[0.0, 1.0, 2.0], [10.0, 11.0]]
        >>> bool((Nested2TED()(nested)["next", "obs"] == steps["next", "obs"]).all())
        True
    """

    def __call__(self, data: TensorDictBase, path: str | os.PathLike[str] | None = None) -> Any:
        """One row per trajectory of the TED rows ``data`` (``path`` is accepted, not used)."""
        flat = super().__call__(data, path)
        shift, is_full = self._ring()
        n = data.shape[0]
        lengths = trajectory_lengths(flat, shift, is_full)
        # not full: the unwritten tail (ending at the last slot) gets no last next value
        ends_early = (torch.cumsum(lengths, 0) % n != 0).long()
        extended = lengths + 1 if is_full else lengths + ends_early
        out = TensorDict(batch_size=[lengths.numel()])
        for key in ("is_full", "shift", "_storage_shape"):
            out.set_non_tensor(key, non_tensor_value(flat, key))
        for key, value in flat.items(True, True):
            if not isinstance(value, torch.Tensor):
                continue
            sizes = lengths if value.shape[0] == n else extended
            out.set(key, torch.nested.nested_tensor(list(value.split(sizes.tolist()))))
        return out


class Nested2TED(Flat2TED):
    """A load hook: one row per trajectory (:class:`~rbdata.TED2Nested`) -> TED rows.

    Arguments: those of :class:`~rbdata.Flat2TED`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import Nested2TED
        >>> nested = TensorDict(
        ...     {"obs": torch.nested.nested_tensor([torch.tensor([0.0, 1.0, 2.0])]),
        ...      "done": torch.nested.nested_tensor([torch.tensor([[False], [True]])])},
        ...     batch_size=[1])
        >>> for key, value in (("shift", 2), ("is_full", True), ("_storage_shape", (2,))):
        ...     _ = nested.set_non_tensor(key, value)
        >>> Nested2TED()(nested)["next", "obs"].tolist()
        [1.0, 2.0]
    """

    def __call__(self, data: TensorDictBase, out: TensorDictBase | None = None) -> TensorDictBase:
        """TED rows from the per-trajectory rows ``data``; into ``out`` when it is given."""
        flat = TensorDict(batch_size=[])
        for key in ("_storage_shape", self.shift_key, self.is_full_key):
            flat.set_non_tensor(key, non_tensor_value(data, key))
        for key, value in data.items(True, True):
            if isinstance(value, torch.Tensor):
                flat.set(key, torch.cat([part for part in value.unbind(0)]))
        return super().__call__(flat, out)
