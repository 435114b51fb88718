"""H5Split / H5Combine: per-trajectory rows (TED2Nested) as one group per trajectory, and back."""

from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import NonTensorData, TensorDict, TensorDictBase

from .ted_flat import non_tensor_value

__all__ = ["H5Combine", "H5Split"]


class H5Split:
    """Cut per-trajectory rows (:class:`~rbdata.TED2Nested`'s) into one entry per trajectory.

    The result maps ``"traj_<i>"`` (``i`` zero-padded to the number of digits
    of the trajectory count) to that trajectory's TensorDict of plain tensors,
    and keeps the non-tensor entries, so that an h5 file holds one group per
    trajectory. ``shift`` and ``is_full`` are accepted as attributes (a
    checkpointer sets them on every save hook) and not used.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import H5Combine, H5Split
        >>> obs = torch.nested.nested_tensor([torch.zeros(2), torch.ones(3)])
        >>> nested = TensorDict({"obs": obs}, batch_size=[2])
        >>> groups = H5Split()(nested)
        >>> sorted(groups.keys()), groups["traj_1", "obs"].tolist()
        (['traj_0', 'traj_1'], [1.0, 1.0, 1.0])
        >>> [t.tolist() for t in H5Combine()(groups)["obs"].unbind(0)]
        [[0.0, 0.0], [1.0, 1.0, 1.0]]
    """

    def __init__(self) -> None:
        self.shift: int | None = None
        self.is_full: bool | None = None

    def __call__(self, data: TensorDictBase) -> TensorDictBase:
        """One entry per trajectory of ``data`` (batch size: the number of trajectories)."""
        if not isinstance(data, TensorDictBase) or data.ndim != 1:
            raise TypeError(
                f"H5Split cuts a TensorDict with one row per trajectory, got {type(data).__name__}."
            )
        count = data.shape[0]
        digits = int(math.ceil(math.log10(count))) if count else 0
        rows = data.filter_non_tensor_data().unbind(0)
        result = TensorDict({f"traj_{str(i).zfill(digits)}": row for i, row in enumerate(rows)})
        for key, value in data.non_tensor_items():
            result.set_non_tensor(key, value.data if isinstance(value, NonTensorData) else value)
        return result


class H5Combine:
    """Put the ``"traj_<i>"`` entries of :class:`~rbdata.H5Split` back into per-trajectory rows.

    Each key becomes a nested tensor of one row per trajectory (in the order
    of their names); the other entries are kept as non-tensor data. Called by
    a checkpointer as ``hook(data, out=None)``; ``out`` is not used.
    Example: see :class:`~rbdata.H5Split`.
    """

    def __call__(self, data: TensorDictBase, out: Any = None) -> TensorDictBase:
        """Per-trajectory rows from the groups of ``data``."""
        names = sorted(
            key for key in data.keys() if isinstance(key, str) and key.startswith("traj")
        )
        if not names:
            raise ValueError("H5Combine found no 'traj_<i>' entry to combine.")
        trajectories = [data.get(name) for name in names]
        result = TensorDict(batch_size=[len(names)])
        for key in data.keys():
            if isinstance(key, str) and not key.startswith("traj"):
                result.set_non_tensor(key, non_tensor_value(data, key))
        for key in trajectories[0].keys(True, True):
            parts = [torch.as_tensor(traj.get(key)) for traj in trajectories]
            result.set(key, torch.nested.nested_tensor(parts))
        return result
