"""TensorDictMaxValueWriter: keep the items that rank highest."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import is_tensor_collection

from rbdata._component.checks import normalize_key
from rbdata.errors import UnsupportedDataError
from rbdata.sharing.counters import spawning
from rbdata.storages import Storage
from rbdata.writers._base import Writer

__all__ = ["TensorDictMaxValueWriter"]

_REDUCTIONS = ("sum", "mean", "max", "min", "median")


class TensorDictMaxValueWriter(Writer):
    """Keeps the items with the highest ``rank_key`` value.

    While the storage has free slots, items are appended (the cursor moves).
    Once it is full, an item replaces the stored item of lowest rank if its
    own rank is strictly higher; otherwise it is dropped (index ``-1``). A
    batch gives the same result as writing its items one by one: an item
    replaced by a later item of the same batch also gets ``-1``.

    Args:
        rank_key: the entry ranking items; one value per item, or several that
            ``reduction`` merges. Defaults to ``("next", "reward")``.
        reduction: how an item's several rank values are merged: ``"sum"``,
            ``"mean"``, ``"max"``, ``"min"`` or ``"median"``.

    Keyword Args:
        compilable: accepted as torchrl's argument (see :class:`Writer`).
        track_generations: keep a per-slot generation stamp (see :class:`Writer`).

    Raises:
        UnsupportedDataError: (a TypeError and a RuntimeError) when written data is
            not a TensorDict (or tensorclass).
        TypeError: when the ``rank_key`` entry is complex (complex ranks have no order).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictMaxValueWriter, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2),
        ...     writer=TensorDictMaxValueWriter(rank_key="r"), batch_size=2)
        >>> rb.extend(TensorDict({"r": torch.tensor([1., 5., 3., 0.])}, [4])).tolist()
        [-1, 1, 0, -1]
        >>> sorted(rb[:]["r"].tolist())
        [3.0, 5.0]
    """

    drops_items = True

    def __init__(
        self,
        rank_key: Any = None,
        reduction: str = "sum",
        *,
        compilable: bool = False,
        track_generations: bool = False,
    ) -> None:
        super().__init__(compilable, track_generations=track_generations)
        if reduction not in _REDUCTIONS:
            raise ValueError(f"reduction must be one of {_REDUCTIONS}, got {reduction!r}.")
        self._rank_key = ("next", "reward") if rank_key is None else normalize_key(rank_key)
        self._reduction = reduction
        self._ranks: torch.Tensor | None = None

    def __getstate__(self) -> dict[str, Any]:
        if spawning():
            raise RuntimeError(
                f"Writers of type {type(self).__name__} cannot be shared between processes: "
                "the rank table that picks the slots is this process's; write from one process."
            )
        return self.__dict__.copy()

    def register_storage(self, storage: Storage) -> None:
        """Attach the storage and allocate the per-slot rank table.

        Raises:
            ValueError: for a storage with more than one dimension.
        """
        if storage.ndim > 1:
            raise ValueError(
                "TensorDictMaxValueWriter is not compatible with storages with more than one "
                f"dimension (got ndim={storage.ndim}): store flat transitions."
            )
        super().register_storage(storage)
        # an unbounded storage (ListStorage()) is never full: the table grows with the items
        slots = storage.max_size if storage.max_size <= 1 << 31 else max(1024, len(storage))
        self._ranks = torch.full((slots,), float("-inf"), dtype=torch.float64)

    @property
    def _current_top_values(self) -> list[tuple[float, int]]:
        """``(rank, slot)`` of every filled slot, lowest rank first (torchrl's heap contents)."""
        if self._ranks is None:
            return []
        filled = torch.isfinite(self._ranks).nonzero().squeeze(-1)
        ranks = self._ranks[filled]
        order = torch.argsort(ranks, stable=True)
        return list(zip(ranks[order].tolist(), filled[order].tolist(), strict=True))

    def _rank(self, data: Any) -> torch.Tensor:
        if not is_tensor_collection(data):
            raise UnsupportedDataError(
                f"{type(self).__name__} expects data to be a tensor collection (TensorDict or "
                f"tensorclass), got {type(data).__name__}."
            )
        rank = data.get(self._rank_key, None)
        if rank is None:
            raise KeyError(
                f"rank_key {self._rank_key!r} not found in the data; keys are "
                f"{sorted(map(str, data.keys(True, True)))}."
            )
        if rank.is_complex():
            raise TypeError(
                f"rank_key {self._rank_key!r} holds {rank.dtype} values: complex ranks have no "
                "order; give real-valued ranks."
            )
        rank = rank.reshape(rank.shape[0], -1).to(torch.float64)
        reduced = getattr(rank, self._reduction)(-1)
        return reduced if isinstance(reduced, torch.Tensor) else reduced.values

    write_at = None  # type: ignore[assignment]  # slots are chosen by rank, never given

    def _write_one(self, data: Any) -> int:
        return int(self._write_batch(data.unsqueeze(0))[0])

    def _write_batch(self, data: Any) -> torch.Tensor:
        ranks = self._rank(data)
        assert self._ranks is not None
        n, capacity, filled = ranks.shape[0], self.storage.max_size, len(self.storage)
        size = self._ranks.shape[0]
        if size < min(capacity, filled + n):  # an unbounded storage: grow the rank table
            grown = torch.full(
                (min(capacity, max(2 * size, filled + n)),), float("-inf"), dtype=torch.float64
            )
            grown[:size] = self._ranks
            self._ranks = grown
        out = torch.full((n,), -1, dtype=torch.long)
        n_free = min(n, capacity - filled)
        out[:n_free] = torch.arange(filled, filled + n_free)
        if n > n_free:
            out = self._replace_lowest(ranks, out, n_free)
        written = out >= 0
        if written.any():
            rows = written.nonzero().squeeze(-1)
            index = out[rows]
            self.storage.set(index, data[rows])
            self._ranks[index] = ranks[rows]
        self._cursor = (filled + n_free) % capacity
        return out

    def _replace_lowest(self, ranks: torch.Tensor, out: torch.Tensor, n_free: int) -> torch.Tensor:
        """Slots for the items past the free slots: the top ranks among stored and incoming.

        A stable descending sort keeps stored items (first) ahead of incoming
        ones of equal rank, and earlier incoming ones ahead of later ones, as
        writing them one by one with a strict comparison would.
        """
        assert self._ranks is not None
        capacity = self._ranks.shape[0]
        table = self._ranks.clone()
        table[out[:n_free]] = ranks[:n_free]
        rest = torch.arange(n_free, ranks.shape[0])
        combined = torch.cat([table, ranks[rest]])
        order = torch.sort(combined, descending=True, stable=True).indices
        keep = torch.zeros(combined.shape[0], dtype=torch.bool)
        keep[order[:capacity]] = True
        evicted = (~keep[:capacity]).nonzero().squeeze(-1)
        out = out.clone()
        # items of this batch that took a free slot and were outranked later in the batch
        lost = ~keep[out[:n_free]]
        out[:n_free][lost] = -1
        out[rest[keep[capacity:]]] = evicted
        return out

    def _empty(self, empty_write_count: bool = True) -> None:
        super()._empty(empty_write_count)
        if self._ranks is not None:
            self._ranks.fill_(float("-inf"))

    def state_dict(self) -> dict[str, Any]:
        """The counters, generations and the rank table."""
        state = super().state_dict()
        if self._ranks is not None:
            state["_ranks"] = self._ranks.clone()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the counters, generations and the rank table."""
        ranks = state_dict.get("_ranks", state_dict.get("ranks"))
        unbounded = self._storage is not None and self._storage.max_size > 1 << 31
        if (
            ranks is not None
            and self._ranks is not None
            and ranks.shape != self._ranks.shape
            and not unbounded
        ):
            raise ValueError(
                f"saved rank table has shape {tuple(ranks.shape)}, expected "
                f"{tuple(self._ranks.shape)} (one rank per storage slot)."
            )
        super().load_state_dict(state_dict)
        if ranks is not None:
            self._ranks = ranks.clone()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(cursor={self._cursor}, rank_key={self._rank_key!r}, "
            f"reduction={self._reduction!r})"
        )
