"""A replay buffer's components and their lifecycle: construction, properties, replacement."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, TypeVar

import torch

from rbdata.buffers._coordinates import cells_of_rows, to_flat
from rbdata.buffers._init_args import (
    build_component,
    check_backend,
    check_buffer_args,
)
from rbdata.buffers._prefetch import _BatchPrefetcher
from rbdata.buffers._stats import _BufferStats
from rbdata.buffers.backends import get_service_backend, ray_actor_class
from rbdata.sample_units import SampleUnit, Transition
from rbdata.samplers import RandomSampler, Sampler
from rbdata.sharing.feed import WriteFeed
from rbdata.sharing.parts import check_shared_prefetch, share_transform
from rbdata.sharing.sync import _BufferSync
from rbdata.storages import ListStorage, Storage, shape_of
from rbdata.transforms import Compose, Transform, as_transform
from rbdata.writers import RoundRobinWriter, Writer

__all__ = ["_BufferBase"]

#: the buffer class a method returns (``self``)
_B = TypeVar("_B", bound="_BufferBase")

_TRANSIENT = ("_iterator", "_prefetcher")


class _BufferBase:
    """What every part of a replay buffer shares: its components, the lock, their lifecycle.

    It builds the components (lazily, in ``_init``), holds them with the lock
    they are used under and the collaborators (``_sync``, ``_stats``,
    ``_prefetcher``), and answers for them (``storage``, ``sampler``, ...,
    ``set_storage``, ``set_sampler``, ...). The write path, the read path,
    indexing, priorities and state are the other parts of
    :class:`~rbdata.ReplayBuffer`, each a subclass of this one in its own
    module. Not meant to be used on its own.

    Examples:
        >>> from rbdata import ReplayBuffer
        >>> issubclass(ReplayBuffer, _BufferBase)
        True
    """

    #: the writer a buffer builds when none is given
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
        if backend != "direct":  # the buffer lives in a service; this object forwards to it
            self._remote = get_service_backend(backend)(
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

    def _hosted(self: _B) -> _B:
        """A direct copy of this buffer for a Ray actor to host (its clients do the prefetch)."""
        hosted = copy.copy(self)
        hosted._service_backend = "direct"
        hosted._prefetch, hosted._prefetcher = 0, _BatchPrefetcher(0)
        return hosted

    def _init(self) -> None:
        if self._initialized:
            return
        with self._sync.lock:  # threads of a concurrent owner may make the first call at once
            if not self._initialized:
                self._build_components()

    def _build_components(self) -> None:
        args = self._args
        self._storage: Storage = build_component(
            args["storage"], Storage, lambda: ListStorage(1000), "storage"
        )
        self._sampler: Sampler = build_component(args["sampler"], Sampler, RandomSampler, "sampler")
        self._writer: Writer = build_component(
            args["writer"], Writer, lambda: self._default_writer(self._compilable), "writer"
        )
        if self._batch_size is None and self._sampler.drop_last:
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
        self._feed = WriteFeed(self._writer.write_count)
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
        self._storage.share_memory_()  # a list storage is refused when sent to a child
        self._writer.share_memory_()
        self._sync.share()
        self._sync.bind(self._rows_and_cursor)
        share_transform(self._transform)

    def share(self: _B, shared: bool = True) -> _B:
        """Share this buffer with ``torch.multiprocessing`` children (torchrl's ``share()``).

        The storage rows, its length, the writer's cursor, write count and
        generations move to shared memory, the transforms' write state too, and
        writes and draws take one lock from the spawn context. Hand the buffer
        to ``Process(args=...)`` (forked or spawned): children that ``extend``
        it write where this process samples, and this process's sampler
        catches up with their writes before each draw. ``share(False)`` goes
        back to a thread lock (the memory stays shared).

        Args:
            shared: share (True) or stop excluding other processes (False).

        Returns:
            the buffer itself.

        Raises:
            RuntimeError: if a transform keeps write state it cannot share.

        Examples:
            >>> import torch
            >>> from rbdata import LazyTensorStorage, ReplayBuffer
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(8)).share()
            >>> _ = rb.extend(torch.arange(4))
            >>> rb.storage._rows.packed.is_shared(), type(rb.lock).__name__
            (True, 'LocalThenShared')
        """
        if not isinstance(shared, bool):
            raise TypeError(f"shared must be a bool, got {type(shared).__name__}.")
        check_shared_prefetch(shared, self._prefetch)
        if not shared:
            self._shared = False
            self._sync.unshare()
            return self
        if self._initialized:
            self._share()
        self._shared = True
        return self

    def _rows_and_cursor(self) -> tuple[Storage, Writer]:
        """The storage and writer a dead writer's reservation is reclaimed from (``_sync``)."""
        return self._storage, self._writer

    def _catch_up(self) -> None:
        """Tell the sampler and sample unit of the writes other buffers or processes made."""
        writer = self._writer
        ring = writer.writes_in_ring_order and self._consume_after_n is None
        self._feed.catch_up(
            writer.write_count, self._storage.max_size_along_dim0, ring, self._note_written
        )

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
        return self._batch_size

    @property
    def dim_extend(self) -> int:
        """The dimension ``extend`` iterates over."""
        if self._dim_extend_arg is not None:
            return self._dim_extend_arg
        return self.storage.ndim - 1

    @property
    def write_count(self) -> int:
        """The total number of items written so far through add and extend."""
        writer = self.writer
        return int(self._sync.settled(lambda: writer.write_count))

    @property
    def service_backend(self) -> str:
        """The deployment backend of this replay buffer (``"direct"`` or ``"ray"``)."""
        return self._service_backend

    @property
    def is_alive(self) -> bool:
        """Whether this buffer remains available (False after :meth:`shutdown`)."""
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
        return self.sampler.prioritized

    @property
    def lock(self) -> Any:
        """The buffer's reentrant lock (writes, draws and sampling-state reads happen under it)."""
        return self._sync.lock

    def __len__(self) -> int:
        """The items that can be sampled (under consume-after-n: those not consumed yet)."""
        if not self._initialized:
            return 0
        return int(self._sync.peek(lambda: self._sampler.sampleable(self._storage)))

    def set_storage(
        self, storage: Storage, collate_fn: Callable[[Any], Any] | None = None
    ) -> Storage:
        """Set a new storage and return the previous one."""
        with self._sync.lock:
            self._init()
            prev, self._storage = self._storage, storage
            self._writer.register_storage(storage)
            self._feed.skip_to(self._writer.write_count)
            self._collate_arg = collate_fn
            self._collate_fn = collate_fn or storage.default_collate_fn()
            return prev

    def set_sampler(self, sampler: Sampler) -> Sampler:
        """Set a new sampler and return the previous one."""
        with self._sync.lock:
            self._init()
            prev, self._sampler = self._sampler, sampler
            self._feed.skip_to(self._writer.write_count)
            sampler.set_rng(self._generator)
            sampler.set_consume_after_n(self._consume_after_n)
            return prev

    def set_writer(self, writer: Writer) -> Writer:
        """Set a new writer and return the previous one."""
        with self._sync.lock:
            self._init()
            prev, self._writer = self._writer, writer
            writer.register_storage(self._storage)
            self._feed.skip_to(writer.write_count)
            return prev

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for sampling from now on (None: torch's global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}."
            )
        with self._sync.lock:
            self._generator = generator
            if self._initialized:
                self._sampler.set_rng(generator)

    def append_transform(
        self: _B, transform: Transform | Callable[[Any], Any], *, invert: bool = False
    ) -> _B:
        """Append a transform (``invert=True``: run it on writes, its inverse on reads)."""
        transform = as_transform(transform, invert=invert)
        if self._shared:
            share_transform(transform)
        self.transform.append(transform)
        return self

    def insert_transform(
        self: _B, index: int, transform: Transform | Callable[[Any], Any], *, invert: bool = False
    ) -> _B:
        """Insert a transform at ``index`` (``invert`` as in :meth:`append_transform`)."""
        transform = as_transform(transform, invert=invert)
        if self._shared:
            share_transform(transform)
        self.transform.insert(index, transform)
        return self

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a hook applied to the storage content before ``dumps``."""
        self.storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a hook applied to the storage content after ``loads``."""
        self.storage.register_load_hook(hook)

    def _prepare(self, data: Any) -> Any:
        """What the buffer does to data before its transforms (TensorDict buffers strip info)."""
        return data

    def _storage_shape(self) -> tuple[int, ...]:
        """The storage's shape: ``[capacity, *lead]`` (only tensor storages have ``ndim > 1``)."""
        return shape_of(self._storage)

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

    def _note_written(self, index: torch.Tensor) -> None:
        """Tell the sampler and sample unit which items were written (their cells when asked)."""
        if self._sampler.per_cell_writes and self._storage.ndim > 1:
            self._sampler.extend(cells_of_rows(index, self._cells_per_item()))
        else:
            self._sampler.extend(index)
        self._sample_unit.extend(index)

    def start(self: _B) -> _B:
        """Return this already-started direct replay buffer."""
        return self

    def client(self: _B) -> _B:
        """Return self for the zero-overhead direct backend."""
        return self

    def close(self, timeout: float | None = None) -> None:
        """Alias for :meth:`shutdown`."""
        self.shutdown(timeout)

    def __enter__(self: _B) -> _B:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the prefetch thread and mark this buffer as shut down."""
        self._prefetcher.shutdown()
        self._alive = False

    @classmethod
    def as_remote(cls, remote_config: dict[str, Any] | None = None) -> Any:
        """Create a Ray remote class of this buffer (needs the ``ray`` extra)."""
        return ray_actor_class(cls, remote_config)

    def __getstate__(self) -> dict[str, Any]:
        self._prefetcher.settle()  # before the generator and sampler are read
        state = {k: v for k, v in self.__dict__.items() if k not in _TRANSIENT}
        state["_prefetcher"] = self._prefetcher  # its settled queue travels (see _prefetch)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._iterator = None
        self._sync.bind(self._rows_and_cursor)
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
