"""The engine of a replay buffer: its components, the write and sample paths, its state."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, cast

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils.hooks import RemovableHandle

from rbdata._validation import normalize_key
from rbdata.buffers import _persistence
from rbdata.buffers._coordinates import cells_of_rows, to_coordinates, to_flat
from rbdata.buffers._gather import finish_batch
from rbdata.buffers._init_args import (
    build_component,
    check_backend,
    check_buffer_args,
    resolve_batch_size,
)
from rbdata.buffers._prefetch import _BatchPrefetcher, check_prefetch_state
from rbdata.buffers._sharing import _WriteFollower, check_shared_prefetch, share_transform
from rbdata.buffers._stats import _BufferStats
from rbdata.buffers._sync import _BufferSync
from rbdata.buffers.protocol import Draw, StatsSource, aligned_info
from rbdata.sample_units import SampleUnit, Transition
from rbdata.samplers import RandomSampler, Sampler
from rbdata.storages import ListStorage, Storage
from rbdata.transforms import Compose, PolicyAgeFilter, Transform
from rbdata.writers import RoundRobinWriter, Writer
from rbdata.writers._base import batch_len, slice_batch

__all__ = ["_BufferCore"]

_TRANSIENT = ("_iterator", "_prefetcher")


class _BufferCore:
    """The engine half of :class:`~rbdata.ReplayBuffer`: components, write and sample paths, state.

    It owns the components (built lazily by ``_init``), the lock they are used
    under and the collaborators (``_sync``, ``_stats``, ``_prefetcher``), and
    forwards to them. :class:`~rbdata.ReplayBuffer` adds torchrl's API around
    it (component replacement, in-place edits, priorities, dumps, queries).
    Not meant to be used on its own.

    Examples:
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> issubclass(ReplayBuffer, _BufferCore)
        True
    """

    _default_writer: ClassVar[type[Writer]] = RoundRobinWriter
    #: whether a TensorDict batch keeps its info entries ("index", ...) as entries
    _keeps_info: ClassVar[bool] = False

    def __init__(
        self,
        *,
        storage: Storage | Callable[[], Storage] | None = None,
        sampler: Sampler | Callable[[], Sampler] | None = None,
        sample_unit: SampleUnit | None = None,
        writer: Writer | Callable[[], Writer] | None = None,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int | None = None,
        transform: Transform | Callable[[Any], Any] | None = None,
        transform_factory: Callable[[], Transform | Callable[[Any], Any]] | None = None,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        generator: torch.Generator | None = None,
        consume_after_n_samples: int | None = None,
        shared: bool = False,
        compilable: bool = False,
        delayed_init: bool | None = None,
        service_backend: str | None = None,
        service_backend_options: dict[str, Any] | None = None,
        use_ray_service: bool = False,
        transport: str = "auto",
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        backend = check_backend(
            service_backend, use_ray_service, service_backend_options, transport, transport_options
        )
        check_buffer_args(
            transform=transform,
            transform_factory=transform_factory,
            batch_size=batch_size,
            prefetch=prefetch,
            consume_after_n_samples=consume_after_n_samples,
            generator=generator,
            dim_extend=dim_extend,
        )
        check_shared_prefetch(bool(shared), prefetch)
        self._service_backend = backend
        self._remote: Any = None
        self._args: dict[str, Any] = {
            "storage": storage,
            "sampler": sampler,
            "writer": writer,
            "transform": transform,
            "transform_factory": transform_factory,
        }
        if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
            raise TypeError(
                f"sample_unit must be a SampleUnit (Transition, Sequence), got "
                f"{type(sample_unit).__name__}."
            )
        self._sample_unit: SampleUnit = Transition() if sample_unit is None else sample_unit
        self._collate_arg = collate_fn
        self._pin_memory = bool(pin_memory)
        self._prefetch = prefetch or 0
        self._batch_size = batch_size
        self._dim_extend_arg = dim_extend
        self._generator = generator
        self._consume_after_n = consume_after_n_samples
        self._shared = bool(shared)
        self._compilable = bool(compilable)
        self._alive = True
        self._sync = _BufferSync()
        self._stats = _BufferStats()
        self._prefetcher = _BatchPrefetcher(self._prefetch)
        self._pass_ended = False  # whether the last batch handed out ended a pass
        self._iterator: Iterator[Any] | None = None
        self._initialized = False
        if delayed_init is None:
            delayed_init = transform_factory is not None
        if backend == "ray":  # the buffer lives in a Ray actor; this object forwards to it
            from rbdata.service import attach_ray_service

            self._remote = attach_ray_service(
                self,
                self._hosted(),
                service_backend_options,
                transport,
                transport_options,
                prefetch=self._prefetch,
                delayed_init=delayed_init,
            )
            return
        if not delayed_init:
            self._init()

    def _hosted(self) -> _BufferCore:
        """A direct copy of this buffer for a Ray actor to host (its clients do the prefetch)."""
        hosted = copy.copy(self)
        hosted._service_backend = "direct"
        hosted._prefetch, hosted._prefetcher = 0, _BatchPrefetcher(0)
        return hosted

    def _init(self) -> None:
        if self._initialized:
            return
        args = self._args
        self._storage: Storage = build_component(
            args["storage"], Storage, lambda: ListStorage(1000), "storage"
        )
        self._sampler: Sampler = build_component(args["sampler"], Sampler, RandomSampler, "sampler")
        self._writer: Writer = build_component(
            args["writer"], Writer, lambda: self._default_writer(self._compilable), "writer"
        )
        if self._batch_size is None and getattr(self._sampler, "drop_last", False):
            raise ValueError(
                "Samplers with drop_last=True must work with a predictable batch-size: pass "
                "batch_size=... to the buffer (with drop_last the pass length depends on it)."
            )
        if self._consume_after_n is not None and not callable(self._writer.write_at):
            raise TypeError(
                f"consume_after_n_samples requires a writer with a callable write_at (new items "
                f"reuse the slots of consumed ones); {type(self._writer).__name__} has none."
            )
        self._writer.register_storage(self._storage)
        self._follower = _WriteFollower(self._writer.write_count)
        self._sampler.set_rng(self._generator)
        self._sampler.set_consume_after_n(self._consume_after_n)
        factory = args["transform_factory"]
        transform = args["transform"] if factory is None else factory()
        self._transform: Compose = (
            transform
            if isinstance(transform, Compose)
            else (Compose() if transform is None else Compose(transform))
        )
        self._collate_fn = self._collate_arg or self._storage.default_collate_fn()
        if self._storage.ndim == 1 and len(self._storage):
            # A storage built holding data (TensorStorage(data)): its items are sampleable,
            # and a prioritized sampler gives them the default priority.
            self._note_written(torch.arange(len(self._storage)))
        if self._shared:
            self._share()
        self._initialized = True

    def _share(self) -> None:
        """Storage rows, counters, generations and transforms' state into shared memory."""
        share_storage = getattr(self._storage, "share_memory_", None)
        if share_storage is not None:  # a list storage is refused when sent to a child
            share_storage()
        self._writer.share_memory_()
        self._sync.share()
        share_transform(self._transform)

    def _follow_writes(self) -> None:
        """Tell the sampler and sample unit of the writes other buffers or processes made."""
        writer = self._writer
        count = writer.write_count
        if count == self._follower.seen:
            return
        ring = writer.writes_in_ring_order and self._consume_after_n is None
        missed = self._follower.missed(count, writer._capacity(), ring)
        if missed is not None:
            self._note_written(missed)

    @property
    def initialized(self) -> bool:
        """Whether the components (storage, sampler, writer, transform) are built."""
        return self._initialized

    @property
    def storage(self) -> Storage:
        """The storage of the replay buffer."""
        self._init()
        return self._storage

    @property
    def sampler(self) -> Sampler:
        """The sampler of the replay buffer."""
        self._init()
        return self._sampler

    @property
    def writer(self) -> Writer:
        """The writer of the replay buffer."""
        self._init()
        return self._writer

    @property
    def transform(self) -> Compose:
        """The transform chain of the replay buffer."""
        self._init()
        return self._transform

    @property
    def sample_unit(self) -> SampleUnit:
        """The sample unit expanding sampled anchors into records."""
        return self._sample_unit

    @property
    def batch_size(self) -> int | None:
        """The default batch size of ``sample()`` and iteration."""
        if self._remote is not None:
            size: int | None = self._remote.batch_size
            return size
        return self._batch_size

    @property
    def dim_extend(self) -> int:
        """The dimension ``extend`` iterates over."""
        if self._remote is not None:
            return int(self._remote.dim_extend)
        if self._dim_extend_arg is not None:
            return self._dim_extend_arg
        return self.storage.ndim - 1

    @property
    def write_count(self) -> int:
        """The total number of items written so far through add and extend."""
        if self._remote is not None:
            return int(self._remote.write_count)
        return self.writer.write_count

    @property
    def service_backend(self) -> str:
        """The deployment backend of this replay buffer (``"direct"`` or ``"ray"``)."""
        return self._service_backend

    @property
    def is_alive(self) -> bool:
        """Whether this buffer remains available (False after :meth:`shutdown`)."""
        if self._remote is not None:
            return bool(self._remote.is_alive)
        return self._alive

    @property
    def generator(self) -> torch.Generator | None:
        """The generator used for sampling (None: torch's global RNG)."""
        return self._generator

    @property
    def _rng(self) -> torch.Generator | None:
        """The :attr:`generator` under torchrl's name (code in the wild reads ``rb._rng``)."""
        return self._generator

    @property
    def _prefetch_queue(self) -> Any:
        """The batches sampled ahead and not handed out yet (torchrl's name)."""
        return self._prefetcher.pending

    @property
    def prioritized(self) -> bool:
        """Whether the sampler is prioritized (priority updates change what is drawn)."""
        if self._remote is not None:
            return bool(self._remote.prioritized)
        return getattr(self.sampler, "default_priority", None) is not None

    @property
    def lock(self) -> Any:
        """The buffer's reentrant lock (writes, draws and sampling-state reads happen under it)."""
        if self._remote is not None:
            return self._remote.lock
        return self._sync.lock

    def _prepare(self, data: Any) -> Any:
        """What the buffer does to data before its transforms (TensorDict buffers strip info)."""
        return data

    def add(self, data: Any) -> int | torch.Tensor:
        """Add a single element and return the index where it lives.

        With a storage of ``ndim > 1`` the element is one item along dim 0 and
        the coordinates of its cells come back (``[cells, ndim]``, as from :meth:`extend`).

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the storage;
                nothing is written then.
        """
        self._init()
        data = self._prepare(data)
        batch = self._storage.item_as_batch(data)
        if batch is not None:
            index = self._extend(batch, None)
            if self._storage.ndim > 1:
                return index
            return int(index[0]) if index.numel() else -1
        with self._sync.cond:
            if len(self._transform):
                data = self._transform.inv(data)
            free = self._sampler.reusable_slots(1) if self._consume_after_n is not None else None
            self._follow_writes()
            if free is not None and free.numel():
                slot = int(self._writer.write_at(free, [data])[0])
            else:
                slot = self._writer.add(data)
            self._note_written(torch.tensor([slot]))
            self._follower.seen = self._writer.write_count
            self._sync.cond.notify_all()
        return slot

    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Extend the buffer with a batch of elements; return their indices.

        With a storage of ``ndim > 1`` the indices are the coordinates of every
        written cell, ``[n_cells, ndim]`` (written items along dim 0, then the
        cells of each), as torchrl returns them. A list at the root is a stack
        of items; a tuple is a PyTree. Inverse transforms run first; bad data
        raises before anything is written.

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the storage;
                nothing is written then.
        """
        self._init()
        return self._extend(
            self._storage.as_batch(self._prepare(data), self.dim_extend), update_priority
        )

    def _extend(self, data: Any, update_priority: bool | None) -> torch.Tensor:
        with self._sync.cond:
            if len(self._transform):
                data = self._transform.inv(data)
            if _is_empty(data):
                ndim = self._storage.ndim
                return torch.empty((0, ndim) if ndim > 1 else 0, dtype=torch.long)
            self._validate_extend(data, update_priority)
            self._check_sampler_fits(data)
            self._follow_writes()
            index = self._write(data)
            self._note_written(index[index >= 0] if self._writer.drops_items else index)
            self._follower.seen = self._writer.write_count
            if self._storage.ndim == 1:
                self._after_extend(data, index, update_priority)
                self._sync.cond.notify_all()
                return index
            cells = cells_of_rows(index, self._cells_per_item())
            self._after_extend(data, cells, update_priority)
            self._sync.cond.notify_all()
        return to_coordinates(cells, self._storage_shape())

    def _check_sampler_fits(self, data: Any) -> None:
        """ValueError, before anything is written, if the write would pass the sampler's slots.

        A prioritized sampler keeps one priority per stored cell, for the
        cells ``[0, max_capacity)``; a storage may be larger (torchrl lets a
        small sampler sit on the default ``ListStorage(1000)``) as long as the
        writes stay below it. Writes go from the writer's cursor, wrapping at
        the storage's capacity.
        """
        slots = getattr(self._sampler, "max_capacity", None)
        if not isinstance(slots, int):
            return
        lead, rows = self._storage_rows(data)
        top_row = min(self._writer.cursor + batch_len(data), rows) - 1
        cells = (top_row + 1) * lead
        if cells > slots:
            raise ValueError(
                f"sampler={type(self._sampler).__name__}(max_capacity={slots}) has fewer slots "
                f"than this write needs: it would fill cells up to {cells} of "
                f"{type(self._storage).__name__}(max_size={self._storage.max_size}, "
                f"ndim={self._storage.ndim}), which holds {rows * lead}; pass "
                f"max_capacity={rows * lead}. Nothing was written."
            )

    def _storage_rows(self, data: Any) -> tuple[int, int]:
        """``(cells per item, items)`` of the storage when full (``ndim > 1``: from ``data``)."""
        storage = self._storage
        if storage.ndim == 1:
            return 1, int(storage.max_size)
        if storage.initialized:
            return self._cells_per_item(), self._storage_shape()[0]
        data_shape = getattr(data, "shape", None)
        if data_shape is None:  # a PyTree: the storage learns its cells at the write
            return 1, int(storage.max_size)
        lead = int(math.prod(tuple(data_shape)[1 : storage.ndim]))
        return lead, -(-int(storage.max_size) // lead)

    def _storage_shape(self) -> tuple[int, ...]:
        """The shape of a tensor storage (``[capacity, *lead]``; ndim > 1 storages have one)."""
        return tuple(cast(Any, self._storage).shape)

    def _cells_per_item(self) -> int:
        """The cells of one item along dim 0 (1 for ``ndim == 1``)."""
        return math.prod(self._storage_shape()[1:])

    def _flat_index(self, index: Any, name: str = "index") -> Any:
        """``index`` as flat cells (coordinates of an ``ndim > 1`` storage converted).

        Raises:
            ValueError: for coordinates of the wrong width or outside the storage.
        """
        if self._storage.ndim == 1 or not self._storage.initialized:
            return index
        return to_flat(index, self._storage_shape(), name)

    def _write(self, data: Any) -> torch.Tensor:
        """Write a batch: into consumed slots first (consume-after-n), then at the cursor."""
        writer = self._writer
        if self._consume_after_n is None or writer.write_at is None:
            return writer.extend(data)
        n = batch_len(data)
        free = self._sampler.reusable_slots(n)
        if not free.numel():
            return writer.extend(data)
        k = free.numel()
        if k < n:
            capacity = int(getattr(self._storage, "_max_size_along_dim0", self._storage.max_size))
            at_cursor = (torch.arange(n - k) + int(getattr(writer, "cursor", 0))) % capacity
            if bool(torch.isin(at_cursor, free).any()):  # the cursor would overwrite them
                return writer.extend(data)
            validate = getattr(self._storage, "validate", None)
            if validate is not None:  # both parts or neither
                validate(data, True)
        head = writer.write_at(free, slice_batch(data, slice(0, k)))
        if k == n:
            return head
        return torch.cat([head, writer.extend(slice_batch(data, slice(k, None)))])

    def _note_written(self, index: torch.Tensor) -> None:
        """Tell the sampler and sample unit which items were written (their cells when asked)."""
        if self._sampler.per_cell_writes and self._storage.ndim > 1:
            self._sampler.extend(cells_of_rows(index, self._cells_per_item()))
        else:
            self._sampler.extend(index)
        self._sample_unit.extend(index)

    def _validate_extend(self, data: Any, update_priority: bool | None) -> None:
        """Hook: check ``data`` before anything is written (prioritized buffers: priorities)."""

    def _after_extend(self, data: Any, index: torch.Tensor, update_priority: bool | None) -> None:
        """Hook: work after a write (prioritized buffers: priorities read from the data)."""

    def _draw(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw one batch's rows (call under the lock); raises when nothing is sampleable."""
        self._follow_writes()
        index, info = self._sampler.sample(self._storage, batch_size)
        index, info = self._sample_unit.expand(index, info, self._storage)
        info = dict(info)
        if self._writer.tracks_generations:
            info["index_generation"] = self._writer.generations_of(index)
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
        with self._sync.lock:
            self._follow_writes()
            if self._sampler.exhausted(self._storage):
                return Draw.empty()
            index, info = self._draw(batch_size)
            return Draw(index, info, bool(self._sampler.ran_out))

    def gather(self, draw: Draw) -> Any:
        """Read the rows of ``draw`` (a copy) with its info attached, transforms applied."""
        return self._fetch(draw.index, draw.info, keep_info=True)

    def _fetch(self, index: torch.Tensor, info: Mapping[str, Any], *, keep_info: bool) -> Any:
        with self._sync.lock:  # a write must not tear the rows being gathered
            data = self._storage.get(index if index.ndim == 1 else index.reshape(-1))
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
        with self._sync.lock:
            index, info = self._draw(batch_size)
            self._pass_ended = bool(self._sampler.ran_out)
        return self._fetch(index, info, keep_info=self._keeps_info), info

    def _sample_ahead(self, batch_size: int) -> tuple[Any, dict[str, Any], bool] | None:
        """A batch sampled ahead, with whether it ended a pass; None when nothing is sampleable."""
        with self._sync.lock:
            self._follow_writes()
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
                    "Cannot sample: every item was consumed "
                    f"(consume_after_n_samples={self._consume_after_n}); write new items first."
                )
            result = self._prefetcher.pop()
        data, info, *ended = result  # a queue restored from torchrl's state has no flag
        self._pass_ended = bool(ended and ended[0])
        return self.refilter(data), info

    def __iter__(self) -> Iterator[Any]:
        if self._remote is not None:
            yield from iter(self._remote.next, None)
            return
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

    def __len__(self) -> int:
        if self._remote is not None:
            return len(self._remote)
        if not self._initialized:
            return 0
        with self._sync.lock:
            return self._sampler.sampleable(self._storage)

    def __getitem__(self, index: Any) -> Any:
        if self._remote is not None:
            return self._remote.getitem(index)
        if isinstance(index, str) or (
            isinstance(index, tuple) and index and all(isinstance(k, str) for k in index)
        ):  # an entry of every stored item (torchrl's ``rb["obs"]``)
            return self._entry(index)
        data = self.storage.get(index)
        if not isinstance(index, int) and isinstance(data, list):
            data = self._collate_fn(data)
        return self._transform(data) if len(self._transform) else data

    def _leaf(self, key: Any) -> torch.Tensor:
        self._init()
        # tensor storages have leaves (leaf_keys, get_leaf); the Storage base class does not
        leaf_keys = getattr(self._storage, "leaf_keys", None)
        get_leaf = getattr(self._storage, "get_leaf", None)
        if leaf_keys is None or get_leaf is None:
            raise RuntimeError(f"{type(self._storage).__name__} does not support per-key updates.")
        key = normalize_key(key, "key", dotted=False)
        if key not in set(leaf_keys()):
            raise KeyError(f"key {key!r} is not stored; stored keys are {leaf_keys()}.")
        leaf: torch.Tensor = get_leaf(key)
        return leaf

    def _entry(self, key: Any) -> Any:
        """A copy of entry ``key`` of every stored item (``rb["obs"]``)."""
        if getattr(self.storage, "leaf_keys", None) is not None:
            return self._leaf(key)[: len(self._storage)].clone()
        return self[:][key]

    def _mark_update(self, index: Any) -> None:
        """Tell the sampler and sample unit that slots were edited in place."""
        if isinstance(index, slice):
            index = torch.arange(*index.indices(len(self._storage)))
        self._sampler.mark_edited(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer and reset the cursor to 0."""
        with self._sync.cond:
            self._init()
            self._prefetcher.drain()
            self._storage.empty()
            self._writer._empty(empty_write_count)
            self._sampler._empty()
            self._sample_unit._empty()
            self._follower.seen = self._writer.write_count
            self._sync.cond.notify_all()

    def policy_age_filters(self) -> list[PolicyAgeFilter]:
        """The :class:`PolicyAgeFilter` instances of the transform chain."""
        return [t for t in self.transform.row_filters() if isinstance(t, PolicyAgeFilter)]

    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live policy version of every PolicyAgeFilter of the buffer."""
        for age_filter in self.policy_age_filters():
            age_filter.set_current_version(version)

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content included) under fixed keys.

        With ``prefetch``, the batches sampled ahead are part of it
        (``"_prefetch_state"``): they were drawn already, and a restored buffer
        hands them out first.
        """
        self._init()
        self._prefetcher.settle()  # the batches in flight take the lock
        with self._sync.lock:
            state = _persistence.buffer_state(self._parts())
            state["_prefetch_state"] = self._prefetcher.state()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error).

        Raises:
            RuntimeError: if the state holds prefetched batches and was saved by
                a buffer with another ``prefetch``.
        """
        self._init()
        prefetched = state_dict.get("_prefetch_state")
        check_prefetch_state(prefetched, self._prefetch)
        self._prefetcher.settle()
        with self._sync.cond:
            _persistence.load_buffer_state(state_dict, self._parts())
            self._follower.seen = self._writer.write_count
            self._prefetcher.restore(() if prefetched is None else prefetched["queue"])
            self._sync.cond.notify_all()

    def _parts(self) -> _persistence.Parts:
        return _persistence.Parts(
            self._storage,
            self._sampler,
            self._writer,
            self._sample_unit,
            self._transform,
            self._generator,
            self._batch_size,
            self._stats,
        )

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next draws: the sampler's and the generator's state."""
        self._init()
        with self._sync.lock:
            return _persistence.sampling_state(self._sampler, self._generator)

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error)."""
        self._init()
        with self._sync.lock:
            _persistence.load_sampling_state(state, self._sampler, self._generator)

    def stats(self) -> dict[str, Any]:
        """A cheap, serializable snapshot of the buffer's operational state."""
        if not self._initialized:
            out: dict[str, Any] = {
                "size": 0,
                "write_count": 0,
                "prefetch_queue_size": 0,
                "initialized": False,
            }
            storage = self._args["storage"]
            if isinstance(storage, Storage):
                out.update(capacity=storage.max_size, utilization=0.0)
            return out
        size = len(self)
        capacity = self._storage.max_size
        return {
            "size": size,
            "write_count": self._writer.write_count,
            "prefetch_queue_size": len(self._prefetcher),
            "initialized": True,
            "capacity": capacity,
            "utilization": size / capacity,
            **self._storage.memory_stats(),
            **self._stats.snapshot(),
        }

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into :meth:`stats` until the handle is removed."""
        return self._stats.register(source)

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (re-checked on every write) or ``timeout`` passes."""
        return self._sync.wait_for(predicate, timeout)

    def notify_waiters(self) -> None:
        """Wake the threads inside :meth:`wait_for_data` so they re-check their predicate."""
        self._sync.notify()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the prefetch thread and mark this buffer as shut down."""
        self._prefetcher.shutdown()
        self._alive = False

    def __getstate__(self) -> dict[str, Any]:
        self._prefetcher.settle()  # before the generator and sampler are read
        state = {k: v for k, v in self.__dict__.items() if k not in _TRANSIENT}
        state["_prefetcher"] = self._prefetcher  # its settled queue travels (see _prefetch)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._iterator = None
        if "_prefetcher" not in state:
            self._prefetcher = _BatchPrefetcher(self._prefetch)

    def __repr__(self) -> str:
        if not self._initialized:
            return f"{type(self).__name__}(initialized=False)"
        return (
            f"{type(self).__name__}(storage={type(self._storage).__name__}(max_size="
            f"{self._storage.max_size}), sampler={type(self._sampler).__name__}, writer="
            f"{type(self._writer).__name__}, size={len(self._storage)}, "
            f"batch_size={self._batch_size})"
        )


_BATCHES = (torch.Tensor, TensorDictBase)


def _is_empty(data: Any) -> bool:
    kind = type(data)
    if (
        kind is TensorDict
        or kind is torch.Tensor
        or isinstance(data, torch.Tensor | TensorDictBase)
    ):
        shape = data.shape
        return bool(shape) and shape[0] == 0
    if isinstance(data, list):
        return len(data) == 0
    return False
