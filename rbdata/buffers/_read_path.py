"""The read path of a replay buffer: draw, gather, ``sample``, prefetch hand-out, iteration.

A draw picks rows (sampler, sample unit, generations, coordinates); a gather
reads them and turns them into a batch (:func:`finish_batch`: collation, info
entries, transforms, pinning).

Batch reads into caller memory: a Ray owner hands batches to a client on its
node through shared-memory slots. Instead of gathering a batch and copying it
into a slot, it asks the buffer to read the batch's rows straight into the
slot (:meth:`ReplayBuffer.reading_into <rbdata.ReplayBuffer.reading_into>`,
:class:`reading_into`) and then runs the buffer's own ``sample``/``gather``:
collation, info entries, transforms and row filters all happen as in any
other read, and the batch's tensors view the slot wherever the read path kept
them. Storages that cannot read into caller memory
(:meth:`~rbdata.storages.Storage.read_into` returns None) read as usual. The
memory serves one read: the block's first batch read of that buffer in that
thread. Other threads, and other buffers (the parts of a mixture), read as usual.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

import torch
from tensordict import TensorDictBase, is_tensor_collection
from torch.utils._pytree import tree_map

from rbdata.buffers._components import _Components
from rbdata.buffers._coordinates import items_of, to_coordinates
from rbdata.buffers._init_args import resolve_batch_size
from rbdata.buffers.protocol import Draw, aligned_info
from rbdata.storages import Storage
from rbdata.transforms import Compose

__all__ = ["finish_batch", "read_rows", "reading_into"]


class _ReadPath:
    """The sampling half of :class:`~rbdata.ReplayBuffer`: drawing rows and reading them.

    A draw asks the sampler for anchors, the sample unit for the records they
    expand into, and adds generations and coordinates; the gather reads those
    rows from the storage (a copy, under the lock) and runs the transforms.
    ``draw`` and ``gather`` are the :class:`~rbdata.buffers.protocol.ServableBuffer`
    halves the data loader uses; ``sample`` and iteration put them together,
    through the prefetcher when ``prefetch`` is set.

    Args:
        components: the buffer's components.
        keeps_info: whether a TensorDict batch keeps its info entries
            (``"index"``, ...) as entries (TensorDict buffers).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=4)
        >>> _ = rb.extend(torch.arange(8))
        >>> draw = rb.draw(4)
        >>> bool((rb.gather(draw) == draw.index).all())
        True
    """

    def __init__(
        self,
        components: _Components,
        keeps_info: bool,
        after_fetch: Callable[[Any, torch.Tensor], Any] | None = None,
    ) -> None:
        self._components = components
        self._keeps_info = keeps_info
        #: what the buffer class does to a gathered batch (``ReplayBuffer._after_fetch``)
        self._after_fetch = after_fetch
        self._pass_ended = False  # whether the last batch handed out ended a pass
        self._iterator: Iterator[Any] | None = None
        #: whether ``sample`` already warned about a batch size other than the constructor's
        self._warned_batch_size_conflict = False

    def _draw(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw one batch's rows (under the lock, writes followed); raises when none is left.

        In a shared buffer, a batch holding rows another process is still
        copying may be drawn again instead (:meth:`_BufferSync.draw_clear`).
        """
        c = self._components
        sync = c.sync
        if not sync.shared:  # no row is ever copied outside the lock: one draw
            return self._draw_once(batch_size)
        return sync.draw_clear(lambda: self._draw_once(batch_size), c.sampler)

    def _draw_once(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        c = self._components
        storage = c.storage
        index, info = c.sampler.sample(storage, batch_size)
        index, info = c.sample_unit.expand(index, info, storage)
        info = {**info}
        writer = c.writer
        if writer.tracks_generations:
            info["index_generation"] = writer.generations_of(items_of(index, c.cells_per_item()))
        # ndim > 1: the coordinates [..., ndim] (a TensorDict batch carries them as is)
        if storage.ndim == 1:
            info["index"] = index
            return index, info
        shape = c.storage_shape()
        info["index"] = to_coordinates(index, shape)
        anchor = info.get("anchor_index")
        if isinstance(anchor, torch.Tensor) and anchor.shape == index.shape:  # flat anchors
            info["anchor_index"] = to_coordinates(anchor, shape)
        return index, info

    def draw(self, batch_size: int) -> Draw:
        """Draw the rows of one batch (indices and info, no data); empty when nothing is left."""
        c = self._components
        c.init()
        with c.sync.draw_lock:
            c.catch_up()
            if c.sampler.exhausted(c.storage):
                return Draw.empty()
            index, info = self._draw(batch_size)
            return Draw(index, info, bool(c.sampler.ran_out))

    def gather(self, draw: Draw) -> Any:
        """Read the rows of ``draw`` (a copy) with its info attached, transforms applied."""
        return self._fetch(draw.index, draw.info, keep_info=True)

    def reading_into(self, memory: torch.Tensor) -> AbstractContextManager[None]:
        """A block whose first batch read lands in ``memory`` (see the module docstring)."""
        return reading_into(self, memory)

    def _fetch(self, index: torch.Tensor, info: Mapping[str, Any], *, keep_info: bool) -> Any:
        c = self._components
        storage = c.storage
        flat = index if index.ndim == 1 else index.reshape(-1)
        # a copy made while no write ran (a write must not tear the rows being gathered)
        sync = c.sync
        if sync.shared:
            data = sync.read(lambda: read_rows(self, storage, flat), flat)
        else:  # what sync.read does unshared, without a closure per batch
            with sync.lock:  # read_rows, whose target memory only a Ray owner sets
                data = read_rows(self, storage, flat) if _targets.by_buffer else storage.get(flat)
        return self._finish(data, index, info, keep_info)

    def _finish(
        self, data: Any, index: torch.Tensor, info: Mapping[str, Any], keep_info: bool
    ) -> Any:
        """The batch handed out: :func:`finish_batch`, then what the buffer class adds."""
        c = self._components
        if keep_info or c.pin_memory or index.ndim != 1 or c.transform.transforms:
            batch = finish_batch(
                data,
                index,
                info,
                collate_fn=c.collate_fn,
                transform=c.transform,
                keep_info=keep_info,
                pin=c.pin_memory and torch.cuda.is_available(),
            )
        else:  # what finish_batch does then: nothing to add, reshape or run
            batch = c.collate_fn(data)
        return batch if self._after_fetch is None else self._after_fetch(batch, index)

    def refilter(self, batch: Any) -> Any:
        """Re-apply the sample-path row filters to a batch gathered ahead of its hand-out."""
        c = self._components
        c.init()
        transform = c.transform
        return transform.refilter(batch) if transform.filters_rows else batch

    def sample(self, batch_size: int | None, return_info: bool) -> Any:
        """Sample a batch (``(batch, info)`` with ``return_info``)."""
        c = self._components
        if not c.initialized:
            c.init()
        if c.prefetch:
            if batch_size is not None and batch_size != c.batch_size:
                raise ValueError(
                    f"with prefetch={c.prefetch} the batch size is fixed at construction "
                    f"({c.batch_size}); got batch_size={batch_size}."
                )
            data, info = self._next_prefetched()
        else:
            default = c.batch_size
            if type(batch_size) is int and batch_size > 0 and default in (None, batch_size):
                data, info = self._sample_once(batch_size)  # checked, no conflict to warn of
            else:
                resolved = resolve_batch_size(batch_size, default)
                self._warn_batch_size_conflict(batch_size)
                data, info = self._sample_once(resolved)
        if not return_info:
            return data
        info = aligned_info(data, info)
        if c.storage.ndim > 1:  # torchrl's info holds one coordinate tensor per dim
            info["index"] = tuple(info["index"].unbind(-1))
        return data, info

    def can_sample(self, batch_size: int | None) -> bool:
        """Whether a ``sample(batch_size)`` would find something to draw (see the sampler's)."""
        c = self._components
        c.init()
        resolved = resolve_batch_size(batch_size, c.batch_size)
        with c.sync.draw_lock:
            c.catch_up()
            return c.sampler.can_sample(c.storage, resolved)

    def _warn_batch_size_conflict(self, batch_size: int | None) -> None:
        """Warn once when ``sample`` gets a batch size other than the constructor's (torchrl's).

        The page calls the combination incompatible with a ``drop_last`` sampler (its
        passes are cut by the constructor's batch size): the warning then says so.
        """
        c = self._components
        if batch_size is None or c.batch_size is None or batch_size == c.batch_size:
            return
        if self._warned_batch_size_conflict:
            return
        self._warned_batch_size_conflict = True
        drop_last = (
            f" With {type(c.sampler).__name__}(drop_last=True) a pass is cut by the "
            "constructor's batch size: sampling another size is not supported."
            if c.sampler.drop_last
            else ""
        )
        warnings.warn(
            f"Got conflicting batch_sizes in constructor ({c.batch_size}) and `sample` "
            f"({batch_size}). Refer to the ReplayBuffer documentation for a proper usage of "
            f"the batch-size arguments. The batch-size provided to the sample method will "
            f"prevail.{drop_last}",
            UserWarning,
            stacklevel=4,  # the user's rb.sample(...)
        )

    def _sample_once(self, batch_size: int) -> tuple[Any, dict[str, Any]]:
        c = self._components
        sync = c.sync
        if not sync.shared:
            # one hold of the thread lock (draw_lock is the lock) for the draw and the copy,
            # and one draw (see _draw): what _draw and _fetch do, with fewer calls
            with sync.lock:
                if c.writer.write_count != c.feed.seen:  # catch_up's own first check
                    c.catch_up()
                index, info = self._draw_once(batch_size)
                self._pass_ended = bool(c.sampler.ran_out)
                flat = index if index.ndim == 1 else index.reshape(-1)
                storage = c.storage  # read as in _fetch
                data = read_rows(self, storage, flat) if _targets.by_buffer else storage.get(flat)
            return self._finish(data, index, info, self._keeps_info), info
        with sync.draw_lock:
            c.catch_up()
            index, info = self._draw(batch_size)
            self._pass_ended = bool(c.sampler.ran_out)
        return self._fetch(index, info, keep_info=self._keeps_info), info

    def _sample_ahead(self, batch_size: int) -> tuple[Any, dict[str, Any], bool] | None:
        """A batch sampled ahead, with whether it ended a pass; None when nothing is sampleable."""
        c = self._components
        with c.sync.draw_lock:
            c.catch_up()
            if c.sampler.exhausted(c.storage) and len(c.storage):
                return None
            index, info = self._draw(batch_size)
            pass_ended = bool(c.sampler.ran_out)
        return self._fetch(index, info, keep_info=self._keeps_info), info, pass_ended

    def _next_prefetched(self) -> tuple[Any, dict[str, Any]]:
        c = self._components
        batch_size = resolve_batch_size(None, c.batch_size)
        prefetcher = c.prefetcher
        result = prefetcher.next(lambda: self._sample_ahead(batch_size))
        while result is None:  # sampled ahead after everything was consumed
            if not len(prefetcher):
                raise RuntimeError(
                    "Cannot sample from an empty storage: every item was consumed "
                    f"(consume_after_n_samples={c.consume_after_n}); write new items first."
                )
            result = prefetcher.pop()
        data, info, *ended = result  # a queue restored from torchrl's state has no flag
        self._pass_ended = bool(ended and ended[0])
        return self.refilter(data), info

    def batches(self, sample: Callable[[], Any]) -> Iterator[Any]:
        """One pass of batches from ``sample()`` (the buffer's, which subclasses may extend)."""
        c = self._components
        if c.batch_size is None:
            raise RuntimeError(
                "Cannot iterate over the replay buffer. Batch_size was not specified at "
                "construction: pass batch_size=... to the constructor."
            )
        c.init()
        while not c.sampler.exhausted(c.storage) or len(c.prefetcher):
            try:
                yield sample()
            except RuntimeError:
                if c.sampler.exhausted(c.storage):  # the batches sampled ahead ran out
                    return
                raise
            if self._pass_ended:  # the batch handed out (not the last one drawn) ended it
                return

    def next(self, iterate: Callable[[], Iterator[Any]]) -> Any:
        """The next batch of the iterator ``iterate()`` made (None when a pass ends)."""
        if self._iterator is None:
            self._iterator = iterate()
        try:
            return next(self._iterator)
        except StopIteration:
            self._iterator = None
            return None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_iterator": None}


# ------------------------------------------------------------ rows read -> a sampled batch


def finish_batch(
    data: Any,
    index: torch.Tensor,
    info: Mapping[str, Any],
    *,
    collate_fn: Callable[[Any], Any],
    transform: Compose,
    keep_info: bool,
    pin: bool,
) -> Any:
    """Collate ``data`` (the rows of ``index``, flat), shape it like ``index``, run transforms.

    Args:
        data: what ``storage.get(index.reshape(-1))`` returned.
        index: the drawn rows (any shape: a ``[B, T]`` index gives a ``[B, T]`` batch).
        info: per-row tensors of the draw.
        collate_fn: merges what the storage returned (identity for tensor storages).
        transform: the sample-path transforms.
        keep_info: leave the info entries in a TensorDict batch (TensorDict buffers).
        pin: pin the batch's memory.

    Returns:
        The batch handed to the user.
    """
    data = collate_fn(data)
    if not keep_info and not pin and index.ndim == 1 and not len(transform):
        return data  # nothing to add, reshape or run: the common uniform batch
    if index.ndim > 1 and isinstance(data, torch.Tensor | TensorDictBase):
        data = (
            data.reshape(*index.shape, *data.shape[1:])
            if isinstance(data, torch.Tensor)
            else (data.reshape(*index.shape))
        )
    if isinstance(data, TensorDictBase) and transform.filters_rows:
        # Row filters drop rows: the info entries travel inside the batch so they stay aligned.
        data = transform(_with_info(data, index, info))
        if not keep_info:
            stored = data.keys(include_nested=True)
            data = data.exclude(*[key for key in info if key in stored])
        return _pinned(data) if pin else data
    if len(transform):
        data = transform(data)
    if isinstance(data, TensorDictBase) and keep_info:
        # after the transforms, as torchrl: they never see (nor change) the info entries
        data = _with_info(data, index, info)
    return _pinned(data) if pin else data


def _with_info(data: TensorDictBase, index: torch.Tensor, info: Mapping[str, Any]) -> Any:
    """``data`` with the per-row entries of ``info`` set (shaped like its batch)."""
    batch = data.batch_size
    for key, value in info.items():
        if isinstance(value, torch.Tensor) and value.shape[: index.ndim] == index.shape:
            if value.ndim < len(batch) and batch[: value.ndim] == value.shape:
                # items that are themselves batches (a list storage of [T] TensorDicts)
                value = value.reshape(*value.shape, *[1] * (len(batch) - value.ndim))
                value = value.expand(batch)
            data.set(key, value)
    return data


def _pinned(data: Any) -> Any:
    if isinstance(data, torch.Tensor) or is_tensor_collection(data):  # TensorDict, tensorclass
        return data.pin_memory()
    return tree_map(_pin, data)


def _pin(value: Any) -> Any:
    return value.pin_memory() if isinstance(value, torch.Tensor) else value


# ------------------------------------------------------------ reads into caller memory


class _Targets(threading.local):
    """Per thread: ``by_buffer``, id(buffer) -> the memory of its next read."""

    def __init__(self) -> None:
        self.by_buffer: dict[int, torch.Tensor] = {}


_targets = _Targets()


class reading_into:  # noqa: N801 - used as a function: ``with reading_into(buffer, memory):``
    """While the block runs, ``buffer``'s next batch read in this thread lands in ``memory``.

    Raises:
        RuntimeError: entering it inside another ``reading_into`` block of the same buffer.
    """

    def __init__(self, buffer: object, memory: torch.Tensor) -> None:
        self._key = id(buffer)
        self._memory = memory

    def __enter__(self) -> None:
        targets = _targets.by_buffer
        if self._key in targets:
            raise RuntimeError("reading_into blocks of one buffer do not nest.")
        targets[self._key] = self._memory

    def __exit__(self, *exc: object) -> None:
        _targets.by_buffer.pop(self._key, None)


def read_rows(buffer: object, storage: Storage, index: torch.Tensor) -> Any:
    """``storage.get(index)``, into the memory of an open :func:`reading_into` of ``buffer``.

    Examples:
        >>> import torch
        >>> from rbdata.storages import LazyTensorStorage
        >>> storage = LazyTensorStorage(8)
        >>> storage.set(slice(0, 4), torch.arange(4.0))
        >>> memory, owner = torch.zeros(64, dtype=torch.uint8), object()
        >>> with reading_into(owner, memory):
        ...     batch = read_rows(owner, storage, torch.tensor([3, 1]))
        >>> batch.tolist(), batch.untyped_storage().data_ptr() == memory.data_ptr()
        ([3.0, 1.0], True)
    """
    targets = _targets.by_buffer
    memory = targets.pop(id(buffer), None) if targets else None
    if memory is not None and type(index) is torch.Tensor:
        data = storage.read_into(index, memory)
        if data is not None:
            return data
    return storage.get(index)
