"""The read path of a replay buffer: draw, gather, ``sample``, prefetch hand-out, iteration."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch

from rbdata.buffers._components import _BufferBase
from rbdata.buffers._coordinates import items_of, to_coordinates
from rbdata.buffers._gather import finish_batch
from rbdata.buffers._gather_into import read_rows, reading_into
from rbdata.buffers._init_args import (
    resolve_batch_size,
)
from rbdata.buffers.protocol import Draw, aligned_info
from rbdata.transforms import PolicyAgeFilter


class _ReadPath(_BufferBase):
    """The sampling half of :class:`~rbdata.ReplayBuffer`: drawing rows and reading them.

    A draw asks the sampler for anchors, the sample unit for the records they
    expand into, and adds generations and coordinates; the gather reads those
    rows from the storage (a copy, under the lock) and runs the transforms.
    ``draw`` and ``gather`` are the :class:`~rbdata.buffers.protocol.ServableBuffer`
    halves the data loader uses; ``sample`` and iteration put them together,
    through the prefetcher when ``prefetch`` is set.

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=4)
        >>> _ = rb.extend(torch.arange(8))
        >>> draw = rb.draw(4)
        >>> bool((rb.gather(draw) == draw.index).all())
        True
    """

    def _draw(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw one batch's rows (under the lock, writes followed); raises when none is left.

        In a shared buffer, a batch holding rows another process is still
        copying may be drawn again instead (:meth:`_BufferSync.draw_clear`).
        """
        return self._sync.draw_clear(lambda: self._draw_once(batch_size), self._sampler)

    def _draw_once(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        index, info = self._sampler.sample(self._storage, batch_size)
        index, info = self._sample_unit.expand(index, info, self._storage)
        info = dict(info)
        if self._writer.tracks_generations:
            info["index_generation"] = self._writer.generations_of(
                items_of(index, self._cells_per_item())
            )
        # ndim > 1: the coordinates [..., ndim] (a TensorDict batch carries them as is)
        if self._storage.ndim == 1:
            info["index"] = index
            return index, info
        shape = self._storage_shape()
        info["index"] = to_coordinates(index, shape)
        anchor = info.get("anchor_index")
        if isinstance(anchor, torch.Tensor) and anchor.shape == index.shape:  # flat anchors
            info["anchor_index"] = to_coordinates(anchor, shape)
        return index, info

    def draw(self, batch_size: int) -> Draw:
        """Draw the rows of one batch (indices and info, no data); empty when nothing is left.

        Part of the :class:`~rbdata.buffers.protocol.ServableBuffer` protocol.
        """
        self._init()
        with self._sync.draw_lock:
            self._catch_up()
            if self._sampler.exhausted(self._storage):
                return Draw.empty()
            index, info = self._draw(batch_size)
            return Draw(index, info, bool(self._sampler.ran_out))

    def gather(self, draw: Draw) -> Any:
        """Read the rows of ``draw`` (a copy) with its info attached, transforms applied."""
        return self._fetch(draw.index, draw.info, keep_info=True)

    def reading_into(self, memory: torch.Tensor) -> AbstractContextManager[None]:
        """A block whose first batch read (``sample``, ``gather``) lands in ``memory`` (uint8).

        The batch's tensors then view ``memory`` where the read path keeps them
        (see :mod:`rbdata.buffers._gather_into`); a Ray owner fills its slots so.
        """
        return reading_into(self, memory)

    def _fetch(self, index: torch.Tensor, info: Mapping[str, Any], *, keep_info: bool) -> Any:
        flat = index if index.ndim == 1 else index.reshape(-1)
        # a copy made while no write ran (a write must not tear the rows being gathered)
        data = self._sync.read(lambda: read_rows(self, self._storage, flat), flat)
        return finish_batch(
            data,
            index,
            info,
            collate_fn=self._collate_fn,
            transform=self._transform,
            keep_info=keep_info,
            pin=self._pin_memory and torch.cuda.is_available(),
        )

    def refilter(self, batch: Any) -> Any:
        """Re-apply the sample-path row filters to a batch gathered ahead of its hand-out."""
        transform = self.transform
        return transform.refilter(batch) if transform.filters_rows else batch

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample a batch (``(batch, info)`` with ``return_info``).

        Raises:
            RuntimeError: if the buffer is empty or everything was consumed.
            ValueError: for a bad ``batch_size``, or one that differs from the
                constructor's with ``prefetch``.
        """
        self._init()
        if self._prefetch:
            if batch_size is not None and batch_size != self._batch_size:
                raise ValueError(
                    f"with prefetch={self._prefetch} the batch size is fixed at construction "
                    f"({self._batch_size}); got batch_size={batch_size}."
                )
            data, info = self._next_prefetched()
        else:
            data, info = self._sample_once(resolve_batch_size(batch_size, self._batch_size))
        if not return_info:
            return data
        info = aligned_info(data, info)
        if self._storage.ndim > 1:  # torchrl's info holds one coordinate tensor per dim
            info["index"] = tuple(info["index"].unbind(-1))
        return data, info

    def _sample_once(self, batch_size: int) -> tuple[Any, dict[str, Any]]:
        with self._sync.draw_lock:
            self._catch_up()
            index, info = self._draw(batch_size)
            self._pass_ended = bool(self._sampler.ran_out)
        return self._fetch(index, info, keep_info=self._keeps_info), info

    def _sample_ahead(self, batch_size: int) -> tuple[Any, dict[str, Any], bool] | None:
        """A batch sampled ahead, with whether it ended a pass; None when nothing is sampleable."""
        with self._sync.draw_lock:
            self._catch_up()
            if self._sampler.exhausted(self._storage) and len(self._storage):
                return None
            index, info = self._draw(batch_size)
            pass_ended = bool(self._sampler.ran_out)
        return self._fetch(index, info, keep_info=self._keeps_info), info, pass_ended

    def _next_prefetched(self) -> tuple[Any, dict[str, Any]]:
        batch_size = resolve_batch_size(None, self._batch_size)
        result = self._prefetcher.next(lambda: self._sample_ahead(batch_size))
        while result is None:  # sampled ahead after everything was consumed
            if not len(self._prefetcher):
                raise RuntimeError(
                    "Cannot sample from an empty storage: every item was consumed "
                    f"(consume_after_n_samples={self._consume_after_n}); write new items first."
                )
            result = self._prefetcher.pop()
        data, info, *ended = result  # a queue restored from torchrl's state has no flag
        self._pass_ended = bool(ended and ended[0])
        return self.refilter(data), info

    def __iter__(self) -> Iterator[Any]:
        if self._batch_size is None:
            raise RuntimeError(
                "Cannot iterate over the replay buffer. Batch_size was not specified at "
                "construction: pass batch_size=... to the constructor."
            )
        while not self.sampler.exhausted(self.storage) or len(self._prefetcher):
            try:
                yield self.sample()
            except RuntimeError:
                if self.sampler.exhausted(self.storage):  # the batches sampled ahead ran out
                    return
                raise
            if self._pass_ended:  # the batch handed out (not the last one drawn) ended it
                return

    def next(self) -> Any:
        """Return the next batch of the buffer's iterator (None when a pass ends)."""
        if self._iterator is None:
            self._iterator = iter(self)
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            return None

    def policy_age_filters(self) -> list[PolicyAgeFilter]:
        """The :class:`PolicyAgeFilter` instances of the transform chain."""
        return [t for t in self.transform.row_filters() if isinstance(t, PolicyAgeFilter)]

    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live policy version of every PolicyAgeFilter of the buffer."""
        for age_filter in self.policy_age_filters():
            age_filter.set_current_version(version)

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (re-checked on every write) or ``timeout`` passes."""
        return self._sync.wait_for(predicate, timeout)

    def notify_waiters(self) -> None:
        """Wake the threads inside :meth:`wait_for_data` so they re-check their predicate."""
        self._sync.notify()
