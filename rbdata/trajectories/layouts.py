"""Trajectory indexes recomputed from the storage: multi-dim storages and fragmented data.

:class:`~rbdata.trajectories.index.TrajectoryIndex` follows a one-dimensional ring
incrementally. Two layouts do not fit it, and these subclasses recompute their
trajectories (vectorized, O(len)) whenever the storage changed, so that a
sample still costs O(batch) between writes:

- :class:`GridTrajectoryIndex`: a storage with ``ndim > 1`` holds items of
  several cells (e.g. one per environment); each cell is a ring of its own and
  trajectories run along the first dimension inside one cell. Position
  ``c * COLUMN + v`` is item ``v`` (a running write count) of cell ``c``, so
  positions stay stable across writes.
- :class:`FragmentedTrajectoryIndex`: the steps of a trajectory are scattered
  over the storage (e.g. several collectors writing to one buffer); runs of
  consecutive step numbers of one trajectory id are the trajectories, and
  position ``p`` is the ``p``-th live slot in (id, step) order.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rbdata._component.checks import NestedKey
from rbdata.errors import DuplicateStepError
from rbdata.storages import Storage, shape_of
from rbdata.trajectories.index import TrajectoryIndex
from rbdata.trajectories.markers import Markers
from rbdata.trajectories.reading import read_leaf, storage_keys
from rbdata.trajectories.ring import next_v_end
from rbdata.trajectories.runs import split_runs

#: Position stride between the cells of a multi-dim storage (more than any write count).
COLUMN = 1 << 40

#: Trajectory-id entries a fragmented index looks for when none is given (torchrl's order).
FRAGMENT_ID_KEYS: tuple[NestedKey, ...] = (("collector", "traj_ids"), "episode")


class _Rebuilt(TrajectoryIndex):
    """Common part: writes only note the newest slot; :meth:`sync` recomputes the index."""

    def clear(self) -> None:
        """Forget every trajectory and pending write."""
        super().clear()
        self._last_write: int | None = None
        self._stale = True

    def extend(self, index: torch.Tensor) -> None:
        """Record that the slots ``index`` were written, in this order."""
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if index.numel():
            self._last_write = int(index[-1])

    def touch(self, index: torch.Tensor) -> None:
        """Record that the slots ``index`` were edited in place."""
        self._stale = self._stale or bool(torch.as_tensor(index).numel())

    @property
    def fed(self) -> bool:
        """Whether any write was recorded."""
        return self.v_end > 0 or self._last_write is not None

    @property
    def pending(self) -> bool:
        """Whether writes or edits were recorded that :meth:`sync` has not read yet."""
        return self._last_write is not None or self._stale

    def _changed(self, live: int) -> bool:
        return self._last_write is not None or self._stale or live != self.size

    def _take_newest(self) -> int | None:
        """The slot written last since the previous sync (None: none), forgotten."""
        newest, self._last_write, self._stale = self._last_write, None, False
        return newest

    def state_dict(self) -> dict[str, Any]:
        """Where the write stream stands (trajectories are recomputed on load)."""
        newest = self._last_write
        if newest is None:
            newest = (self.v_end - 1) % self.modulus if self.v_end and self.modulus else -1
        return {"v_end": self.v_end, "newest": newest}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the next :meth:`sync` recomputes everything."""
        v_end = int(state_dict.get("v_end", self.v_end))
        newest = int(state_dict.get("newest", -1))
        self.clear()
        self.v_end = v_end
        self._last_write = newest if newest >= 0 else None


class GridTrajectoryIndex(_Rebuilt):
    """Trajectories of a storage with ``ndim > 1``, one ring per cell (see the module doc).

    Args:
        cell_writes: ``extend`` receives the written flat cells (a sampler with
            per-cell state, see ``Sampler.per_cell_writes``) rather than items.
        **index_args: see :class:`~rbdata.trajectories.index.TrajectoryIndex`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage
        >>> storage = LazyTensorStorage(8, ndim=2)
        >>> ids = torch.tensor([[0, 0, 1, 1], [5, 5, 5, 5]])
        >>> storage.set(slice(0, 4), TensorDict({"episode": ids.T}, [4, 2]))
        >>> index = GridTrajectoryIndex(traj_key="episode")
        >>> index.extend(torch.arange(4))
        >>> _ = index.sync(storage)
        >>> index.to_slots(index.view("starts").clone()).tolist()  # first slot of each
        [0, 4, 1]
    """

    def __init__(self, *, cell_writes: bool = False, **index_args: Any) -> None:
        self.cell_writes = cell_writes
        super().__init__(**index_args)

    def clear(self) -> None:
        """Forget every trajectory and pending write."""
        super().clear()
        self._capacity, self._cells = 1, 1

    def sync(self, storage: Storage) -> tuple[bool, int] | None:
        """Recompute the trajectories if ``storage`` changed; ``(True, 0)`` when it did."""
        shape = shape_of(storage)
        capacity, cells = shape[0], math.prod(shape[1:])
        items = len(storage) // cells
        if not self._changed(items):
            return None
        newest = self._take_newest()
        if newest is not None and self.cell_writes:
            newest //= cells
        if newest is None and self.v_end:
            newest = (self.v_end - 1) % capacity
        v_end = next_v_end(self.v_end, newest, items, capacity)
        self._capacity, self._cells = capacity, cells
        self.modulus = capacity
        v_begin = v_end - items
        slots = (torch.arange(v_begin, v_end) % capacity) * cells
        order = (slots.unsqueeze(0) + torch.arange(cells).unsqueeze(1)).reshape(-1)
        markers = self.markers_for(storage)
        marks = markers.read(storage, order).numpy() if order.numel() else np.zeros(0)
        starts, lengths = split_runs(marks, markers.kind, lane=items)
        cell, step = np.divmod(starts, max(items, 1))
        self.assign(cell * COLUMN + v_begin + step, lengths, v_end=v_end, size=items)
        return True, 0

    def to_slots(self, v: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Storage slots (flat cell indices) of the positions ``v``."""
        v = torch.as_tensor(v)
        cell = torch.div(v, COLUMN, rounding_mode="floor")
        return (v - cell * COLUMN).remainder_(self._capacity).mul_(self._cells).add_(cell)

    def slots_to_v(self, slots: torch.Tensor) -> torch.Tensor:
        """Positions of the live storage slots (flat cell indices) ``slots``."""
        item, cell = torch.div(slots, self._cells, rounding_mode="floor"), slots % self._cells
        last = self.v_end - 1
        return cell * COLUMN + last - torch.remainder(last - item, self._capacity)

    def state_dict(self) -> dict[str, Any]:
        """Where the write stream stands (``newest`` a cell with ``cell_writes``)."""
        state = super().state_dict()
        if self.cell_writes and self._last_write is None and state["newest"] >= 0:
            state["newest"] = (state["newest"] + 1) * self._cells - 1
        return state


class FragmentedTrajectoryIndex(_Rebuilt):
    """Trajectories rebuilt from (trajectory id, step) pairs wherever they are stored.

    Args:
        traj_key: entry holding integer trajectory ids (None: the first of
            ``("collector", "traj_ids")`` and ``"episode"`` that is stored).
        step_key: entry holding non-negative integer step numbers.
        weight: see :class:`~rbdata.trajectories.index.TrajectoryIndex`.

    Raises (at :meth:`sync`):
        RuntimeError: no trajectory id entry is stored.
        DuplicateStepError: two live transitions share an id and a step.
        TypeError: ids or steps are not integers.
        ValueError: a step is negative, or the storage has ``ndim > 1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage
        >>> storage = LazyTensorStorage(6)
        >>> data = {"episode": torch.tensor([0, 1, 0, 1, 0, 1]),
        ...         "step_count": torch.tensor([0, 0, 1, 1, 3, 2])}
        >>> storage.set(slice(0, 6), TensorDict(data, [6]))
        >>> index = FragmentedTrajectoryIndex(traj_key=None, step_key="step_count")
        >>> index.extend(torch.arange(6))
        >>> _ = index.sync(storage)
        >>> [index.to_slots(torch.arange(s, s + n)).tolist()
        ...  for s, n in zip(*[t.tolist() for t in index.trajectories()])]
        [[0, 2], [4], [1, 3, 5]]
    """

    def __init__(self, *, traj_key: NestedKey | None, step_key: NestedKey, weight: Any = None):
        self.traj_key, self.step_key = traj_key, step_key
        self._order = torch.zeros(0, dtype=torch.long)
        super().__init__(weight=weight)

    def sync(self, storage: Storage) -> tuple[bool, int] | None:
        """Recompute the runs if ``storage`` changed; ``(True, 0)`` when it did."""
        n = len(storage)
        if not self._changed(n):
            return None
        if storage.ndim != 1:
            raise ValueError(
                f"fragmented trajectories need a storage with ndim=1, got ndim={storage.ndim}."
            )
        self._take_newest()
        key = self._id_key(storage)
        self.markers = Markers("ids", (key,))
        slots = torch.arange(n)
        ids = self._integers(read_leaf(storage, key, slots), key, n)
        steps = self._integers(read_leaf(storage, self.step_key, slots), self.step_key, n)
        if n and int(steps.min()) < 0:
            raise ValueError(
                f"step numbers must be non-negative, got {int(steps.min())} under "
                f"step_key={self.step_key!r}."
            )
        order = torch.argsort(steps, stable=True)
        order = order[torch.argsort(ids[order], stable=True)]
        by_id, by_step = ids[order].numpy(), steps[order].numpy()
        same = by_id[1:] == by_id[:-1]
        self._check_unique(same & (by_step[1:] == by_step[:-1]), by_id, by_step, key)
        # a run goes on while the id stays and the step grows by one (step - rank stays)
        runs = np.stack([by_id, by_step - np.arange(n)], 1)
        starts, lengths = split_runs(runs, "ids")
        self._order, self.modulus = order, max(n, 1)
        self.assign(starts, lengths, v_end=n, size=n)
        return True, 0

    def to_slots(self, v: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Storage slots of the positions ``v`` (indices in (id, step) order)."""
        return self._order[torch.as_tensor(v)]

    def _id_key(self, storage: Storage) -> NestedKey:
        if self.traj_key is not None:
            return self.traj_key
        keys = storage_keys(storage)
        for key in FRAGMENT_ID_KEYS:
            if key in keys:
                return key
        raise RuntimeError(
            "fragmented=True requires a trajectory identifier under traj_key; end-of-trajectory "
            f"flags alone cannot reconstruct interleaved data (looked for {FRAGMENT_ID_KEYS}, "
            f"stored keys: {sorted(map(str, keys))})."
        )

    @staticmethod
    def _integers(value: torch.Tensor, key: NestedKey, n: int) -> torch.Tensor:
        if value.dtype == torch.bool or value.is_floating_point() or value.is_complex():
            raise TypeError(f"key={key!r} must contain integer values, got dtype={value.dtype}.")
        if n and value[0].numel() != 1:
            raise ValueError(
                f"expected one scalar per transition under key={key!r}, got shape "
                f"{tuple(value.shape)}."
            )
        return value.reshape(n).to(torch.long).cpu()

    def _check_unique(self, dup: np.ndarray, ids: np.ndarray, steps: np.ndarray, key: Any) -> None:
        where = np.flatnonzero(dup)
        if where.size:
            i = int(where[0])
            raise DuplicateStepError(
                f"Found duplicate records for trajectory {int(ids[i])} at step {int(steps[i])} "
                f"(traj_key={key!r}, step_key={self.step_key!r}). Trajectory-step pairs must be "
                "unique in the live storage (e.g. a recreated collector restarting its traj_ids "
                "at 0 while older episodes are stored); use ids that stay unique or empty the "
                "buffer before reusing them."
            )
