"""The trajectories of a one-dimensional ring storage, kept incrementally.

Positions are virtual write positions (see :mod:`rbdata.trajectories.ring`):
positions ``v_end - len .. v_end - 1`` are the live ones, oldest first, so
trajectories never cross the write cursor (the newest item is not followed by
the oldest). :class:`TrajectoryIndex` keeps the trajectories
(:func:`~rbdata.trajectories.runs.split_runs` of the markers) in a deque,
updated from the slots written since the last look (one read of the markers
of those slots), and optionally a running prefix sum of per-trajectory
weights so that samplers draw a trajectory with one ``searchsorted``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import torch

from rbdata._component.checks import NestedKey
from rbdata.storages import Storage
from rbdata.trajectories.markers import SLICE_TRAJ_KEYS, Markers, resolve_markers
from rbdata.trajectories.reading import storage_keys
from rbdata.trajectories.ring import next_v_end
from rbdata.trajectories.runs import split_runs

__all__ = ["TrajectoryIndex"]


class TrajectoryIndex:
    """Trajectories of a ring storage, kept incrementally.

    ``extend(index)`` only records written slots; :meth:`sync` processes them
    (reading the markers of just those slots) when the index is next used.
    Writes that continue at the cursor update the deque of trajectories in
    O(written); any other write pattern (or a storage changed behind the
    index's back) triggers a vectorized rebuild from the storage.

    Args:
        traj_key: entry holding per-transition trajectory ids.
        end_key: entry holding end-of-trajectory flags.
        traj_candidates: id entries tried, in order, when neither key is given.
        weight: maps trajectory lengths to sampling weights (``one(int)`` and
            ``many(array)``); with it the index keeps running prefix sums of the
            weights (the ``excl`` and ``shift`` columns) that samplers draw from.
        static: ``("ids" | "ends", tensor)`` fixed markers of a full storage
            (the last trajectory may wrap to the first slots); writes are ignored.
        resolve: picks the markers of a storage (replaces the rule of
            :func:`resolve_markers` with the keys above).
    """

    def __init__(
        self,
        *,
        traj_key: NestedKey | None = None,
        end_key: NestedKey | None = None,
        traj_candidates: Iterable[NestedKey] = SLICE_TRAJ_KEYS,
        weight: Any = None,
        static: tuple[str, torch.Tensor] | None = None,
        resolve: Callable[[Any], Markers] | None = None,
    ) -> None:
        self._traj_key = traj_key
        self._end_key = end_key
        self._candidates = tuple(traj_candidates)
        self.weight = weight
        self._static = static
        self._resolve = resolve
        self.clear()

    # ------------------------------------------------------------ writes
    def clear(self) -> None:
        """Forget every trajectory and pending write (the storage was emptied)."""
        static = self._static
        self.markers: Markers | None = None if static is None else Markers(static[0], ())
        self.modulus = 0
        self.v_end = 0
        self.size = 0
        self._prev: Any = None
        self._dirty = False
        self._newest_hint: int | None = None
        self._pending: list[torch.Tensor] = []
        self._pending_n = 0
        self._alloc(64)

    def extend(self, index: torch.Tensor) -> None:
        """Record that the slots ``index`` were written, in this order."""
        if self._static is not None:
            return
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        if index.numel() == 0:
            return
        self._pending.append(index.clone())
        self._pending_n += index.numel()
        if self.modulus and self._pending_n > self.modulus:
            self._pending, self._pending_n, self._dirty = [index[-1:].clone()], 1, True
        elif len(self._pending) > 64:
            self._pending = [torch.cat(self._pending)]

    def touch(self, index: torch.Tensor) -> None:
        """Record that the slots ``index`` were edited in place (the write position stays)."""
        if self._static is None and torch.as_tensor(index).numel():
            self._dirty = True
            if not self._pending and self.modulus and self.v_end:
                self._newest_hint = (self.v_end - 1) % self.modulus

    @property
    def fed(self) -> bool:
        """Whether any write was ever recorded (or the markers are static)."""
        return self._static is not None or self.v_end > 0 or bool(self._pending)

    @property
    def pending(self) -> bool:
        """Whether writes or edits were recorded that :meth:`sync` has not read yet."""
        return bool(self._pending) or self._dirty

    # ------------------------------------------------------------ sync
    def sync(self, storage: Storage) -> tuple[bool, int] | None:
        """Bring the trajectories up to date with ``storage``.

        Returns:
            None when nothing changed, else ``(rebuilt, v_from)``: whether the
            whole index was rebuilt, and the first virtual position whose
            trajectory may have changed (the old end for an incremental update).
        """
        if storage.ndim != 1:
            raise ValueError(
                f"trajectory tracking needs a storage with ndim=1, got ndim={storage.ndim}."
            )
        if self._static is not None:
            return self._sync_static(storage, self._static)
        capacity = storage.max_size
        if capacity != self.modulus:
            self._dirty = self._dirty or self.modulus != 0
            self.modulus = capacity
        n = len(storage)
        if not self._pending:
            if not self._dirty and self.size == n:
                return None
            # a sampler never fed (or edits only): the storage knows its newest slot
            newest = self._newest_hint if self._newest_hint is not None else storage.newest_slot
            return self._rebuild(storage, newest)
        pending = self._pending[0] if len(self._pending) == 1 else torch.cat(self._pending)
        self._pending, self._pending_n = [], 0
        p, old_end = pending.numel(), self.v_end
        if (
            not self._dirty
            and p < capacity
            and n == min(capacity, self.size + p)
            and np.array_equal(pending.numpy(), np.arange(old_end, old_end + p) % capacity)
        ):
            self._append(storage, pending)
            return False, old_end
        return self._rebuild(storage, int(pending[-1]))

    def markers_for(self, storage: Storage) -> Markers:
        """The markers splitting ``storage`` into trajectories (resolved at the first call)."""
        if self.markers is None:
            if self._resolve is not None:
                self.markers = self._resolve(storage)
            else:
                self.markers = resolve_markers(
                    storage_keys(storage),
                    traj_key=self._traj_key,
                    end_key=self._end_key,
                    traj_candidates=self._candidates,
                )
        return self.markers

    def _append(self, storage: Storage, slots: torch.Tensor) -> None:
        markers = self.markers_for(storage)
        marks = markers.read(storage, slots).numpy()
        p, v0 = slots.numel(), self.v_end
        new_size = min(self.modulus, self.size + p)
        self._drop_front(v0 + p - new_size)
        starts, lengths = split_runs(marks, markers.kind, prev=self._prev if self.n else None)
        first_new = int(starts[0]) if starts.size else p
        if first_new:
            self._grow_last(first_new)
        if starts.size:
            self._push(starts + v0, lengths)
        self.v_end, self.size = v0 + p, new_size
        self._prev = marks[-1].item()

    def _rebuild(self, storage: Storage, newest: int | None) -> tuple[bool, int]:
        capacity, n = self.modulus, len(storage)
        self._reset_deque()
        self._dirty, self._newest_hint = False, None
        if n == 0:
            self.v_end, self.size, self._prev = 0, 0, None
            return True, 0
        v_end = next_v_end(self.v_end, newest, n, capacity)
        v_begin = v_end - n
        order = torch.arange(v_begin, v_end) % capacity
        markers = self.markers_for(storage)
        marks = markers.read(storage, order).numpy()
        starts, lengths = split_runs(marks, markers.kind)
        self._push(starts + v_begin, lengths)
        self.v_end, self.size, self._prev = v_end, n, marks[-1].item()
        return True, v_begin

    def _sync_static(
        self, storage: Storage, static: tuple[str, torch.Tensor]
    ) -> tuple[bool, int] | None:
        kind, marks = static
        n = marks.numel()
        if len(storage) != n:
            raise ValueError(
                f"the given {'ends' if kind == 'ends' else 'trajectories'} describe {n} "
                f"transitions but the storage holds {len(storage)}: they must match."
            )
        if self.modulus:
            return None
        last = marks.nonzero() if kind == "ends" else (marks != marks.roll(-1)).nonzero()
        oldest = (int(last[-1]) + 1) % n if last.numel() else 0
        order = torch.arange(oldest, oldest + n) % n
        starts, lengths = split_runs(marks[order].numpy(), kind)
        self._reset_deque()
        self._push(starts + oldest, lengths)
        self.modulus, self.v_end, self.size = n, oldest + n, n
        return True, oldest

    # ------------------------------------------------------------ deque
    def _alloc(self, capacity: int) -> None:
        self._np = {name: np.zeros(capacity + 1, dtype=np.int64) for name in _COLUMNS}
        self._t = {name: torch.from_numpy(a) for name, a in self._np.items()}
        self._reset_deque()

    def _reset_deque(self) -> None:
        self.first = 0
        self.n = 0
        self.base = 0
        self.total_end = 0
        self._views: dict[str, torch.Tensor] = {}

    def _ensure(self, extra: int) -> None:
        cap = self._np["starts"].size - 1
        if self.first + self.n + extra <= cap:
            return
        live = self.n + extra
        arrays = self._np
        if 2 * live > cap:
            self._np = {k: np.zeros(2 * live + 64, dtype=np.int64) for k in _COLUMNS}
            self._t = {name: torch.from_numpy(a) for name, a in self._np.items()}
        lo, hi = self.first, self.first + self.n
        for name in _COLUMNS:
            extra_one = 1 if name == "shift" else 0
            self._np[name][: self.n + extra_one] = arrays[name][lo : hi + extra_one].copy()
        self.first = 0
        self._views = {}

    def _push(self, starts: np.ndarray, lengths: np.ndarray) -> None:
        m = starts.size
        self._ensure(m)
        j = self.first + self.n
        a = self._np
        a["starts"][j : j + m] = starts
        a["lengths"][j : j + m] = lengths
        if self.weight is not None:
            w = self.weight.many(lengths)
            cum = np.cumsum(w)
            excl = cum - w + self.total_end
            a["excl"][j : j + m] = excl
            a["shift"][j + 1 : j + m + 1] = starts - excl
            if self.n == 0:
                self.base = self.total_end
            self.total_end += int(cum[-1])
        self.n += m
        self._views = {}

    def _grow_last(self, extra: int) -> None:
        j = self.first + self.n - 1
        lengths = self._np["lengths"]
        if self.weight is not None:
            old = int(lengths[j])
            self.total_end += self.weight.one(old + extra) - self.weight.one(old)
        lengths[j] += extra

    def _drop_front(self, v_begin: int) -> None:
        a = self._np
        if self.n == 0 or v_begin <= a["starts"][self.first]:
            return
        live = a["starts"][self.first : self.first + self.n]
        k = int(np.searchsorted(live, v_begin, side="right")) - 1
        self.first += k
        self.n -= k
        j = self.first
        delta = v_begin - int(a["starts"][j])
        old = int(a["lengths"][j])
        a["starts"][j] += delta
        a["lengths"][j] -= delta
        if self.weight is not None:
            a["excl"][j] += self.weight.one(old) - self.weight.one(old - delta)
            a["shift"][j + 1] = a["starts"][j] - a["excl"][j]
            self.base = int(a["excl"][j])
        self._views = {}

    # ------------------------------------------------------------ reading
    def view(self, name: str) -> torch.Tensor:
        """The live part of a column: ``starts``, ``lengths``, ``excl`` or ``shift``.

        ``shift`` has one more leading entry, so that
        ``shift[searchsorted(excl, x, right=True)]`` is the shift of the trajectory
        holding ``x``.
        """
        view = self._views.get(name)
        if view is None:
            lo, hi = self.first, self.first + self.n
            view = self._t[name][lo : hi + 1 if name == "shift" else hi]
            self._views[name] = view
        return view

    @property
    def total_weight(self) -> int:
        """Sum of the weights of the live trajectories."""
        return self.total_end - self.base

    def trajectories(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Copies of the live trajectories' start virtual positions and lengths, oldest first."""
        return self.view("starts").clone(), self.view("lengths").clone()

    def slots_to_v(self, slots: torch.Tensor) -> torch.Tensor:
        """Virtual positions of live ``slots``."""
        return (self.v_end - 1) - torch.remainder(self.v_end - 1 - slots, self.modulus)

    def locate(self, v: torch.Tensor) -> torch.Tensor:
        """Positions (in the live columns) of the trajectories holding virtual positions ``v``."""
        return torch.searchsorted(self.view("starts"), v, right=True).sub_(1)

    def to_slots(self, v: torch.Tensor | np.ndarray) -> torch.Tensor:
        """Storage slots of the virtual positions ``v`` (``v`` is modified in place)."""
        if isinstance(v, np.ndarray):
            return torch.from_numpy(np.remainder(v, self.modulus, out=v))
        return v.remainder_(self.modulus)

    def assign(self, starts: np.ndarray, lengths: np.ndarray, *, v_end: int, size: int) -> None:
        """Replace every trajectory with the runs ``starts`` (sorted) and ``lengths``.

        For indexes that recompute their trajectories from scratch (their own
        :meth:`sync`); ``v_end`` and ``size`` are the new write position and live count.
        """
        self._reset_deque()
        if starts.size:
            self._push(starts, lengths)
        self.v_end, self.size = v_end, size

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Where the write stream stands; trajectories are rebuilt from the storage on load."""
        if self._pending:
            newest, v_end = int(self._pending[-1][-1]), self.v_end + self._pending_n
        elif self._newest_hint is not None:  # loaded, not synced yet: the hint it was given
            newest, v_end = self._newest_hint, self.v_end
        else:
            newest = (self.v_end - 1) % self.modulus if self.modulus and self.v_end else -1
            v_end = self.v_end
        return {"v_end": v_end, "newest": newest}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the next :meth:`sync` rebuilds from the storage."""
        if self._static is not None:
            return
        v_end = int(state_dict.get("v_end", self.v_end))
        newest = int(state_dict.get("newest", -1))
        self.clear()
        self.v_end = v_end
        self._newest_hint = newest if newest >= 0 else None
        self._dirty = True


_COLUMNS = ("starts", "lengths", "excl", "shift")
