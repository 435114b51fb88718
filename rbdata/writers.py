"""Writers: they decide which storage slots new data goes to."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase

from rbdata.storages._base import Storage

__all__ = [
    "ImmutableDatasetWriter",
    "RoundRobinWriter",
    "TensorDictMaxValueWriter",
    "TensorDictRoundRobinWriter",
    "Writer",
]


def _batch_len(data: Any) -> int:
    """Items in a batch (its leading dim); ValueError when it has none."""
    if isinstance(data, list):
        return len(data)
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        shape = data.shape
    else:
        leaves = torch.utils._pytree.tree_leaves(data)
        if not leaves:
            raise ValueError(
                f"cannot extend with data that holds no tensor: {type(data).__name__}."
            )
        shape = leaves[0].shape
    if not shape:
        raise ValueError(
            f"extend expects a batch with a leading batch dim, got {type(data).__name__} with "
            f"shape {list(shape)}; use add() to write one item."
        )
    return int(shape[0])


class Writer:
    """Base class of writers.

    A writer owns the write cursor, the count of items written and, when
    ``track_generations`` is set, one generation number per slot that grows
    each time the slot is rewritten (so a handle ``(index, generation)``
    captured at sampling time can tell whether the slot still holds the same
    item).

    Args:
        track_generations: keep a per-slot generation counter.

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, RoundRobinWriter
        >>> writer = RoundRobinWriter(track_generations=True)
        >>> writer.register_storage(LazyTensorStorage(3))
        >>> writer.extend(torch.arange(4)).tolist(), writer.write_count
        ([0, 1, 2, 0], 4)
        >>> writer.generation(torch.arange(3)).tolist()
        [2, 1, 1]
    """

    #: whether ``extend`` may drop items (their returned index is -1)
    _drops_items: bool = False

    def __init__(self, *, track_generations: bool = False) -> None:
        self.track_generations = bool(track_generations)
        self._storage: Storage | None = None
        # [cursor, write_count]: a list, or a shared int64 tensor after share_memory_().
        self._counters: list[int] | torch.Tensor = [0, 0]
        self._generations: torch.Tensor | None = None

    @property
    def _cursor(self) -> int:
        return int(self._counters[0])

    @_cursor.setter
    def _cursor(self, value: int) -> None:
        self._counters[0] = value

    @property
    def _write_count(self) -> int:
        return int(self._counters[1])

    @_write_count.setter
    def _write_count(self, value: int) -> None:
        self._counters[1] = value

    def share_memory_(self) -> Writer:
        """Move the cursor, counters and generations to shared memory (for child processes)."""
        self._counters = torch.tensor(
            [int(c) for c in self._counters], dtype=torch.long
        ).share_memory_()
        if self._generations is not None:
            self._generations.share_memory_()
        return self

    def register_storage(self, storage: Storage) -> None:
        """Attach the storage this writer writes into."""
        self._storage = storage
        if self.track_generations:
            self._generations = torch.zeros(storage.max_size, dtype=torch.long)

    @property
    def storage(self) -> Storage:
        """The storage registered with :meth:`register_storage`."""
        if self._storage is None:
            raise RuntimeError(
                f"{type(self).__name__} has no storage: call register_storage first."
            )
        return self._storage

    @property
    def write_count(self) -> int:
        """Total number of items written through ``add`` and ``extend``."""
        return self._write_count

    def generation(self, index: torch.Tensor) -> torch.Tensor:
        """Current generation of the slots in ``index``.

        Raises:
            RuntimeError: if the writer does not track generations.
        """
        if self._generations is None:
            raise RuntimeError(
                f"{type(self).__name__} does not track slot generations: build it with "
                "track_generations=True."
            )
        return self._generations[index]

    def add(self, data: Any) -> int:
        """Write one item and return its slot."""
        raise NotImplementedError

    def extend(self, data: Any) -> torch.Tensor:
        """Write a batch of items and return their slots, in data order."""
        raise NotImplementedError

    def _capacity(self) -> int:
        """Slots along the storage's first dim (items, for multi-dim storages)."""
        return getattr(self.storage, "_max_size_along_dim0", self.storage.max_size)

    def _bump(self, index: torch.Tensor | int | slice) -> None:
        if self._generations is None:
            return
        if isinstance(index, torch.Tensor):  # repeated slots count once per write
            self._generations.index_add_(0, index, torch.ones_like(index))
        else:
            self._generations[index] += 1

    def _empty(self) -> None:
        if self._generations is not None:
            self._generations += 1

    def state_dict(self) -> dict[str, Any]:
        """Return the writer's state (counters and generations)."""
        gens = None if self._generations is None else self._generations.clone()
        return {"write_count": self._write_count, "generations": gens}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the writer's state."""
        self._write_count = int(state_dict.get("write_count", self._write_count))
        gens = state_dict.get("generations")
        if gens is not None and self._generations is not None:
            if gens.shape != self._generations.shape:
                raise ValueError(
                    f"writer generations have shape {tuple(gens.shape)}, expected "
                    f"{tuple(self._generations.shape)} (one per storage slot)."
                )
            self._generations.copy_(gens)


class RoundRobinWriter(Writer):
    """Writes items one after the other, wrapping around at the storage's end.

    Args:
        compilable: keep the cursor as plain Python ints so the writer can run
            inside a ``torch.compile``d function.
        track_generations: keep a per-slot generation counter (see :class:`Writer`).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4),
        ...                   writer=RoundRobinWriter(track_generations=True))
        >>> rb.extend(torch.arange(6)).tolist()
        [0, 1, 2, 3, 0, 1]
        >>> rb.writer.generation(torch.arange(4)).tolist()
        [2, 2, 1, 1]
    """

    def __init__(self, compilable: bool = False, *, track_generations: bool = False) -> None:
        super().__init__(track_generations=track_generations)
        self._compilable = compilable

    @property
    def cursor(self) -> int:
        """Slot the next item goes to."""
        return self._cursor

    def add(self, data: Any) -> int:
        """Write one item at the cursor and return its slot."""
        index = self._cursor
        self.storage.set(index, data)
        self._bump(index)
        self._cursor = (index + 1) % self._capacity()
        self._write_count += 1
        return index

    def extend(self, data: Any) -> torch.Tensor:
        """Write a batch at the cursor (wrapping around) and return the slots used."""
        storage = self.storage
        kind = type(data)
        n = (
            data.shape[0]
            if (kind is TensorDict or kind is torch.Tensor) and data.shape
            else _batch_len(data)
        )
        if n > 1 and storage.ndim > 1 and not storage.initialized:
            # A multi-dim lazy storage learns its item capacity from its first item.
            return torch.cat([self.extend(data[:1]), self.extend(data[1:])])
        max_size = self._capacity()
        start = self._cursor
        index = torch.arange(start, start + n)
        if start + n > max_size:
            index %= max_size
        if n == 0:
            return index
        if n > max_size:  # only the last max_size items survive: write just those
            data, skip = data[n - max_size :], n - max_size
        else:
            skip = 0
        first = (start + skip) % max_size
        stop = first + n - skip
        # Slice writes (two at the wrap point): fast copies, and compile-friendly.
        if stop <= max_size:
            storage.set(slice(first, stop), data)
        else:
            cut = max_size - first
            tail = data[cut:]
            if storage._reads_own_memory(tail):  # the first write would change it
                tail = tail.clone()
            storage.set(slice(first, max_size), data[:cut])
            storage.set(slice(0, stop - max_size), tail)
        self._bump(index)
        self._cursor = (start + n) % max_size
        self._write_count += n
        return index

    def _empty(self) -> None:
        super()._empty()
        self._cursor = 0

    def state_dict(self) -> dict[str, Any]:
        """Return the cursor, counters and generations."""
        return {**super().state_dict(), "cursor": self._cursor}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the cursor, counters and generations."""
        super().load_state_dict(state_dict)
        self._cursor = int(state_dict.get("cursor", self._cursor))


class TensorDictRoundRobinWriter(RoundRobinWriter):
    """Round-robin writer for TensorDict data (same behaviour as :class:`RoundRobinWriter`).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictReplayBuffer, TensorDictRoundRobinWriter
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10),
        ...     writer=TensorDictRoundRobinWriter(track_generations=True), batch_size=4)
        >>> rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, batch_size=[10])).shape
        torch.Size([10])
    """


class TensorDictMaxValueWriter(Writer):
    """Keeps the items with the highest ``rank_key`` value.

    While the storage has free slots, items are appended. Once it is full, a
    new item replaces the stored item with the lowest rank if its own rank is
    higher; otherwise it is dropped (its returned index is ``-1``).

    Args:
        rank_key: the entry ranking items (a scalar per item; trailing
            singleton dims are summed). Defaults to ``("next", "reward")``.
        reduction: how a non-scalar rank entry is reduced per item: "sum",
            "mean", "max" or "min".

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictMaxValueWriter, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2),
        ...     writer=TensorDictMaxValueWriter(rank_key="r"), batch_size=2)
        >>> _ = rb.extend(TensorDict({"r": torch.tensor([1., 5., 3., 0.])}, [4]))
        >>> sorted(rb[:]["r"].tolist())
        [3.0, 5.0]
    """

    _REDUCTIONS = ("sum", "mean", "max", "min")
    _drops_items = True

    def __init__(
        self, rank_key: Any = None, reduction: str = "sum", *, track_generations: bool = False
    ) -> None:
        super().__init__(track_generations=track_generations)
        if reduction not in self._REDUCTIONS:
            raise ValueError(f"reduction must be one of {self._REDUCTIONS}, got {reduction!r}.")
        self._rank_key = ("next", "reward") if rank_key is None else rank_key
        self._reduction = reduction
        self._ranks: torch.Tensor | None = None

    def register_storage(self, storage: Storage) -> None:
        """Attach the storage and allocate the per-slot rank table."""
        super().register_storage(storage)
        self._ranks = torch.full((storage.max_size,), float("-inf"), dtype=torch.float64)

    def _rank(self, data: TensorDictBase) -> torch.Tensor:
        if not isinstance(data, TensorDictBase):
            raise TypeError(
                f"TensorDictMaxValueWriter writes TensorDicts, got {type(data).__name__}."
            )
        try:
            rank = data.get(self._rank_key)
        except KeyError:
            rank = None
        if rank is None:
            raise KeyError(
                f"rank_key {self._rank_key!r} not found in the data; keys are "
                f"{sorted(map(str, data.keys(True, True)))}."
            )
        rank = rank.reshape(rank.shape[0], -1).to(torch.float64)
        return (
            getattr(rank, self._reduction)(-1)
            if self._reduction in ("sum", "mean")
            else (getattr(rank, self._reduction)(-1).values)
        )

    def add(self, data: TensorDictBase) -> int:
        """Write one item if it ranks high enough; return its slot or -1."""
        return int(self.extend(data.unsqueeze(0))[0])

    def extend(self, data: TensorDictBase) -> torch.Tensor:
        """Write the items that rank high enough; dropped items get index -1."""
        ranks = self._rank(data)
        assert self._ranks is not None
        n, capacity, filled = ranks.shape[0], self._ranks.shape[0], len(self.storage)
        out = torch.full((n,), -1, dtype=torch.long)
        n_free = min(n, capacity - filled)
        out[:n_free] = torch.arange(filled, filled + n_free)
        if n > n_free:
            # The storage is full: the top-`capacity` ranks among stored and
            # incoming items survive, as replacing the minimum one by one would.
            rest = torch.arange(n_free, n)
            table = self._ranks.clone()
            table[out[:n_free]] = ranks[:n_free]
            combined = torch.cat([table, ranks[rest]])
            keep = torch.zeros(combined.shape[0], dtype=torch.bool)
            keep[torch.topk(combined, capacity, sorted=False).indices] = True
            evicted = (~keep[:capacity]).nonzero().squeeze(-1)
            survivors = rest[keep[capacity:]]
            out[survivors] = evicted
        written = out >= 0
        if written.any():
            rows = written.nonzero().squeeze(-1)
            index = out[rows]
            self.storage.set(index, data[rows])
            self._bump(index)
            self._ranks[index] = ranks[rows]
            self._write_count += int(rows.numel())
        return out

    def _empty(self) -> None:
        super()._empty()
        if self._ranks is not None:
            self._ranks.fill_(float("-inf"))

    def state_dict(self) -> dict[str, Any]:
        """Return the counters, generations and the rank table."""
        ranks = None if self._ranks is None else self._ranks.clone()
        return {**super().state_dict(), "ranks": ranks}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the counters, generations and the rank table."""
        super().load_state_dict(state_dict)
        if state_dict.get("ranks") is not None:
            self._ranks = state_dict["ranks"].clone()


class ImmutableDatasetWriter(Writer):
    """A writer that refuses every write, for fixed (offline) datasets.

    Examples:
        >>> import torch
        >>> from rbdata import ImmutableDatasetWriter, ReplayBuffer, TensorStorage
        >>> rb = ReplayBuffer(
        ...     storage=TensorStorage(torch.arange(5)), writer=ImmutableDatasetWriter()
        ... )
        >>> len(rb)
        5
    """

    def add(self, data: Any) -> int:
        """Refuse the write.

        Raises:
            RuntimeError: always.
        """
        raise RuntimeError(
            "this buffer is read-only: its writer is an ImmutableDatasetWriter; build the "
            "buffer with a RoundRobinWriter to add data."
        )

    def extend(self, data: Any) -> torch.Tensor:
        """Refuse the write.

        Raises:
            RuntimeError: always.
        """
        return torch.tensor([self.add(data)])
