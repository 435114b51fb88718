"""RandomSampler: uniform sampling with replacement."""

from __future__ import annotations

from typing import Any

import torch

from rbdata.samplers._base import Sampler
from rbdata.samplers._live import _LiveSet
from rbdata.storages import Storage

_is_compiling = torch.compiler.is_compiling


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the filled slots.

    A batch is ``torch.randint(len(storage), (batch_size,), generator=rng)``.
    With consume-after-n, a batch holds distinct live items drawn uniformly
    (fewer than ``batch_size`` when fewer are live). The sampler never runs
    out. In a buffer that other processes write (``share()``), a batch
    holding rows still being copied is drawn again (up to a few times): the
    rows are then uniform over those whose write is complete.

    Examples:
        >>> import torch
        >>> from rbdata.samplers import RandomSampler
        >>> class Slots:
        ...     max_size = 100
        ...     def __len__(self):
        ...         return 10
        >>> _ = torch.manual_seed(0)
        >>> index, info = RandomSampler().sample(Slots(), 5)
        >>> index
        tensor([4, 9, 3, 0, 3])
    """

    reads_only_length = True
    draws_independent = True

    def sample(self, storage: Storage, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Pick ``batch_size`` slots uniformly (see :meth:`Sampler.sample`)."""
        if (
            type(self) is RandomSampler  # a subclass may draw otherwise (its own ``_sample``)
            and self._live is None
            and type(batch_size) is int
            and batch_size > 0
            and not _is_compiling()
        ):  # the checked path's outcome, without its calls: it runs on every batch
            filled, rng = len(storage), self._rng
            if filled:  # no ``generator=None`` for the global RNG: parsing it costs 0.2 us
                if rng is None:
                    return torch.randint(filled, (batch_size,)), {}
                return torch.randint(filled, (batch_size,), generator=rng), {}
        return super().sample(storage, batch_size)

    def _sample(
        self, storage: Storage, batch_size: int, live: _LiveSet | None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        if live is None:
            if torch.compiler.is_compiling():  # not traced: len would be guarded (torchrl's way)
                return storage.random_slots(batch_size, self._rng), {}
            return torch.randint(len(storage), (batch_size,), generator=self._rng), {}
        return live.take(batch_size, self._rng), {}
