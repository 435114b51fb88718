"""ReplayBuffer: torchrl's replay-buffer API over the buffer's parts, held as objects.

The buffer holds one :class:`~rbdata.buffers._components._Components` (the
storage, sampler, writer, sample unit and transforms, their settings, the
lock) and one object per concern, each with a reference to those components:
the write path (``_write_path``), the read path (``_read_path``), indexing and
in-place edits (``_indexing``), priority updates (``_priority_updates``) and
state and persistence (``_persistence``). Its methods forward to them; the buffer
holds no data logic: the storage, sampler, writer, sample unit and transforms
do. ``service_backend="ray"`` builds, in :meth:`ReplayBuffer.__new__`, the
object the registered backend returns (see :mod:`rbdata.buffers.backends`).
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, ClassVar, TypeVar

import torch
from tensordict import TensorDictBase
from torch.utils.hooks import RemovableHandle

from rbdata._component.checks import NestedKey
from rbdata.buffers import _persistence
from rbdata.buffers._components import _Components
from rbdata.buffers._conditional_update import ConditionalUpdateResult
from rbdata.buffers._indexing import _Indexing
from rbdata.buffers._init_args import check_backend, check_buffer_args
from rbdata.buffers._persistence import _BufferState
from rbdata.buffers._priority_updates import _PriorityUpdates
from rbdata.buffers._read_path import _ReadPath
from rbdata.buffers._write_path import WriteHooks, _WritePath
from rbdata.buffers.backends import get_service_backend, ray_actor_class
from rbdata.buffers.protocol import Draw, StatsSource
from rbdata.buffers.shared_handle import _SharedHandle
from rbdata.sample_units import SampleUnit, Transition
from rbdata.samplers import Sampler
from rbdata.sharing.parts import check_shared_prefetch
from rbdata.storages import Storage, StorageCheckpointerBase
from rbdata.transforms import Compose, PolicyAgeFilter, Transform, as_transform
from rbdata.writers import RoundRobinWriter, Writer

__all__ = ["ReplayBuffer"]

#: the buffer class a method returns (``self``)
_B = TypeVar("_B", bound="ReplayBuffer")

#: the parts a buffer builds over its components (not part of its pickled state)
_PARTS = frozenset({"_writes", "_reads", "_edits", "_priorities", "_state"})


class ReplayBuffer(_SharedHandle):
    """A generic, composable replay buffer (torchrl's ``ReplayBuffer`` API).

    The buffer owns its components and the lock they are used under, and
    forwards to them: the storage holds the items, the writer picks where
    new items go, the sampler picks what a batch reads, the sample unit
    expands drawn anchors into records and the transforms run on both paths.
    It implements :class:`~rbdata.buffers.protocol.ServableBuffer`, so
    :class:`~rbdata.ReplayDataset` serves it.

    Keyword Args:
        storage: a Storage or a callable building one; defaults to ``ListStorage(1000)``.
        sampler: a Sampler or a callable building one; defaults to :class:`RandomSampler`.
        sample_unit: expands sampled anchors into records; None means :class:`Transition`.
        writer: a Writer or a callable building one; defaults to :class:`RoundRobinWriter`.
        collate_fn: merges what the storage returns for a batch; defaults to the
            storage's own (stacking for list storages, identity for tensor storages).
        pin_memory: pin sampled batches.
        prefetch: number of batches sampled ahead on a background thread.
        transform: a Transform or callable run on ``sample`` (see :class:`Compose`).
        transform_factory: a callable building the transform (exclusive with ``transform``).
        batch_size: the default batch size of ``sample()`` and iteration.
        dim_extend: the dimension ``extend`` iterates over (defaults to ``storage.ndim - 1``).
        checkpointer: set as the storage's ``checkpointer`` (torchrl's argument): it lays
            out ``storage.dumps``; the buffer's ``dumps`` keeps rbdata's format.
        generator: a ``torch.Generator`` for sampling (None: torch's global RNG).
        consume_after_n_samples: items leave the sampleable set after being returned this
            many times (works with every sampler and with ``prefetch``); ``len`` then
            counts the items still sampleable.
        shared: share the buffer with ``torch.multiprocessing`` child processes.
        compilable: keep the writer's bookkeeping compatible with ``torch.compile``.
        delayed_init: build the components on first use (default: True with a transform_factory).
        service_backend: ``"direct"`` (default) or ``"ray"``.
        service_backend_options: Ray options (``ray_init_config``, ``remote_config``,
            ``recovery``, ``coalesce``, ``rate_limiter``, ``rate_limiter_timeout``,
            ``shards``; see :mod:`rbdata.service.attach`).
        use_ray_service: the deprecated spelling of ``service_backend="ray"``.
        transport: how a remote buffer moves payloads (``"auto"``, ``"ray"``, ``"distributed"``).
        transport_options: options of the transport (``{"backend": "gloo" | "nccl"}``).

    Raises:
        TypeError: for an argument of the wrong type.
        ValueError: for an argument out of range.

    Examples:
        >>> import torch
        >>> from rbdata import ListStorage, ReplayBuffer
        >>> _ = torch.manual_seed(0)
        >>> rb = ReplayBuffer(storage=ListStorage(max_size=1000), batch_size=5)
        >>> indices = rb.extend(range(10))
        >>> rb.sample()
        tensor([4, 9, 3, 0, 3])
    """

    #: the writer a buffer builds when none is given
    _default_writer: ClassVar[type[Writer]] = RoundRobinWriter
    #: whether a TensorDict batch keeps its info entries ("index", ...) as entries
    _keeps_info: ClassVar[bool] = False

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        """A direct buffer, or the object a registered service backend builds (``"ray"``)."""
        if kwargs.get("service_backend") in (None, "direct") and not kwargs.get("use_ray_service"):
            return super().__new__(cls)
        return _remote_buffer(cls, kwargs)

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
        checkpointer: StorageCheckpointerBase | None = None,
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
        check_backend(  # "direct": __new__ built the object of any other backend
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
        if checkpointer is not None and not isinstance(checkpointer, StorageCheckpointerBase):
            raise TypeError(
                "checkpointer must be a StorageCheckpointerBase or None, got "
                f"{type(checkpointer).__name__}."
            )
        if sample_unit is not None and not isinstance(sample_unit, SampleUnit):
            raise TypeError(
                f"sample_unit must be a SampleUnit (Transition, Sequence), got "
                f"{type(sample_unit).__name__}."
            )
        components = _Components(
            {
                "storage": storage,
                "sampler": sampler,
                "writer": writer,
                "transform": transform,
                "transform_factory": transform_factory,
                "checkpointer": checkpointer,
            },
            Transition() if sample_unit is None else sample_unit,
            default_writer=self._default_writer,
            collate_fn=collate_fn,
            pin_memory=bool(pin_memory),
            prefetch=prefetch or 0,
            batch_size=batch_size,
            dim_extend=dim_extend,
            generator=generator,
            consume_after_n=consume_after_n_samples,
            shared=bool(shared),
            compilable=bool(compilable),
        )
        self._service_backend = "direct"
        self._assemble(components)
        if delayed_init is None:
            delayed_init = transform_factory is not None
        if not delayed_init:
            components.init()

    def _assemble(self, components: _Components) -> None:
        """Hold ``components`` and the parts working on them."""
        self._components = components
        self._writes = _WritePath(components, self._write_hooks())
        self._reads = _ReadPath(components, self._keeps_info, self._after_fetch)
        self._edits = _Indexing(components)
        self._priorities = _PriorityUpdates(components)
        self._state = _BufferState(components)

    def _write_hooks(self) -> WriteHooks:
        """What this buffer class does around its writes (see :class:`WriteHooks`)."""
        return WriteHooks()

    #: what this buffer class does to each gathered batch (``batch, index -> batch``; None:
    #: nothing): :class:`~rbdata.HERReplayBuffer` relabels goals there
    _after_fetch: Callable[[Any, torch.Tensor], Any] | None = None

    def reader(self, sampler: Sampler) -> ReplayBuffer:
        """A buffer sharing this one's storage, writer and transforms that draws with ``sampler``.

        It has its own lock (a shared buffer's keeps the cross-process one, so
        that writers in other processes do not tear the rows it reads); used by
        DataLoader worker processes, which read a private copy of the buffer.
        """
        reader = object.__new__(type(self))
        reader.__setstate__({**self._settings(), "_components": self._components.reader(sampler)})
        return reader

    def _settings(self) -> dict[str, Any]:
        """The buffer's own state: its components and its class's settings, not its parts."""
        return {k: v for k, v in self.__dict__.items() if k not in _PARTS}

    # ------------------------------------------------------------ components
    @property
    def initialized(self) -> bool:
        """Whether the components (storage, sampler, writer, transform) are built."""
        return self._components.initialized

    @property
    def storage(self) -> Storage:
        """The storage of the replay buffer."""
        components = self._components
        components.init()
        return components.storage

    @property
    def sampler(self) -> Sampler:
        """The sampler of the replay buffer."""
        components = self._components
        components.init()
        return components.sampler

    @property
    def writer(self) -> Writer:
        """The writer of the replay buffer."""
        components = self._components
        components.init()
        return components.writer

    @property
    def transform(self) -> Compose:
        """The transform chain of the replay buffer."""
        components = self._components
        components.init()
        return components.transform

    @property
    def sample_unit(self) -> SampleUnit:
        """The sample unit expanding sampled anchors into records."""
        return self._components.sample_unit

    @property
    def batch_size(self) -> int | None:
        """The default batch size of ``sample()`` and iteration."""
        return self._components.batch_size

    @property
    def dim_extend(self) -> int:
        """The dimension ``extend`` iterates over."""
        return self._components.dim_extend

    @property
    def write_count(self) -> int:
        """The total number of items written so far through add and extend."""
        components = self._components
        if not components.initialized:
            components.init()
        sync, writer = components.sync, components.writer
        if not sync.shared:  # what settled does unshared, without a closure
            return int(writer.write_count)
        return int(sync.settled(lambda: writer.write_count))

    @property
    def service_backend(self) -> str:
        """The deployment backend of this replay buffer (``"direct"`` or ``"ray"``)."""
        return self._service_backend

    @property
    def is_alive(self) -> bool:
        """Whether this buffer remains available (False after :meth:`shutdown`)."""
        return self._components.alive

    @property
    def generator(self) -> torch.Generator | None:
        """The generator used for sampling (None: torch's global RNG)."""
        return self._components.generator

    @property
    def _rng(self) -> torch.Generator | None:
        """The :attr:`generator` under torchrl's name (code in the wild reads ``rb._rng``)."""
        return self._components.generator

    @property
    def _prefetch_queue(self) -> Any:
        """The batches sampled ahead and not handed out yet (torchrl's name)."""
        return self._components.prefetcher.pending

    @property
    def _futures_lock(self) -> Any:
        """The lock of the batches in flight (torchrl's name): checkpoints hold it to settle."""
        return self._components.prefetcher.lock

    @property
    def prioritized(self) -> bool:
        """Whether the sampler is prioritized (priority updates change what is drawn)."""
        return self.sampler.prioritized

    @property
    def lock(self) -> Any:
        """The buffer's reentrant lock (writes, draws and sampling-state reads happen under it)."""
        return self._components.sync.lock

    def __len__(self) -> int:
        """The items that can be sampled (under consume-after-n: those not consumed yet)."""
        return self._components.sampleable()

    def set_storage(
        self, storage: Storage, collate_fn: Callable[[Any], Any] | None = None
    ) -> Storage:
        """Set a new storage and return the previous one."""
        return self._components.set_storage(storage, collate_fn)

    def set_sampler(self, sampler: Sampler) -> Sampler:
        """Set a new sampler and return the previous one."""
        return self._components.set_sampler(sampler)

    def set_writer(self, writer: Writer) -> Writer:
        """Set a new writer and return the previous one."""
        return self._components.set_writer(writer)

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for sampling from now on (None: torch's global RNG)."""
        self._components.set_rng(generator)

    def append_transform(
        self: _B, transform: Transform | Callable[[Any], Any], *, invert: bool = False
    ) -> _B:
        """Append a transform (``invert=True``: run it on writes, its inverse on reads)."""
        self._components.add_transform(as_transform(transform, invert=invert), None)
        return self

    def insert_transform(
        self: _B, index: int, transform: Transform | Callable[[Any], Any], *, invert: bool = False
    ) -> _B:
        """Insert a transform at ``index`` (``invert`` as in :meth:`append_transform`)."""
        self._components.add_transform(as_transform(transform, invert=invert), index)
        return self

    def register_save_hook(self, hook: Callable[..., Any]) -> None:
        """Register a hook applied to the storage content before ``dumps``."""
        self.storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[..., Any]) -> None:
        """Register a hook applied to the storage content after ``loads``."""
        self.storage.register_load_hook(hook)

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
        self._components.share(shared)
        return self

    # ------------------------------------------------------------ writes
    def add(self, data: Any) -> int | torch.Tensor:
        """Add a single element and return the index where it lives.

        With a storage of ``ndim > 1`` the element is one item along dim 0 and
        the coordinates of its cells come back (``[cells, ndim]``, as from :meth:`extend`).

        Raises:
            KeyError, TypeError, ValueError: if ``data`` does not fit the storage;
                nothing is written then.
        """
        return self._writes.add(data)

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
        return self._writes.extend(data, update_priority)

    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer and reset the cursor to 0."""
        self._writes.empty(empty_write_count)

    # ------------------------------------------------------------ reads
    def draw(self, batch_size: int) -> Draw:
        """Draw the rows of one batch (indices and info, no data); empty when nothing is left.

        Part of the :class:`~rbdata.buffers.protocol.ServableBuffer` protocol.
        """
        return self._reads.draw(batch_size)

    def gather(self, draw: Draw) -> Any:
        """Read the rows of ``draw`` (a copy) with its info attached, transforms applied."""
        return self._reads.gather(draw)

    def reading_into(self, memory: torch.Tensor) -> AbstractContextManager[None]:
        """A block whose first batch read (``sample``, ``gather``) lands in ``memory`` (uint8).

        The batch's tensors then view ``memory`` where the read path keeps them
        (see :mod:`rbdata.buffers._read_path`); a Ray owner fills its slots so.
        """
        return self._reads.reading_into(memory)

    def refilter(self, batch: Any) -> Any:
        """Re-apply the sample-path row filters to a batch gathered ahead of its hand-out."""
        return self._reads.refilter(batch)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample a batch (``(batch, info)`` with ``return_info``).

        Raises:
            RuntimeError: if the buffer is empty or everything was consumed.
            ValueError: for a bad ``batch_size``, or one that differs from the
                constructor's with ``prefetch``.
        """
        return self._reads.sample(batch_size, return_info)

    def can_sample(self, batch_size: int | None = None) -> bool:
        """Whether the buffer can serve a batch of ``batch_size`` (the constructor's by default).

        False when the storage is empty or everything was consumed; with a
        ``drop_last`` sampler, also when fewer than ``batch_size`` items are stored.

        Raises:
            RuntimeError: without a batch size, given or set at construction.
            TypeError, ValueError: for a bad ``batch_size``.

        Examples:
            >>> import torch
            >>> from rbdata import ReplayBuffer, LazyTensorStorage
            >>> rb = ReplayBuffer(storage=LazyTensorStorage(8), batch_size=4)
            >>> rb.can_sample()
            False
            >>> _ = rb.extend(torch.arange(2))
            >>> rb.can_sample(), rb.can_sample(16)
            (True, True)
        """
        return self._reads.can_sample(batch_size)

    def __iter__(self) -> Iterator[Any]:
        return self._reads.batches(self.sample)

    def next(self) -> Any:
        """Return the next batch of the buffer's iterator (None when a pass ends)."""
        return self._reads.next(self.__iter__)

    def policy_age_filters(self) -> list[PolicyAgeFilter]:
        """The :class:`PolicyAgeFilter` instances of the transform chain."""
        return [t for t in self.transform.row_filters() if isinstance(t, PolicyAgeFilter)]

    def publish_policy_version(self, version: int) -> None:
        """Make ``version`` the live policy version of every PolicyAgeFilter of the buffer."""
        for age_filter in self.policy_age_filters():
            age_filter.set_current_version(version)

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (re-checked on every write) or ``timeout`` passes."""
        return self._components.sync.wait_for(predicate, timeout)

    def notify_waiters(self) -> None:
        """Wake the threads inside :meth:`wait_for_data` so they re-check their predicate."""
        self._components.sync.notify()

    # ------------------------------------------------------------ indexing
    def __getitem__(self, index: Any) -> Any:
        return self._edits.get(index)

    def __setitem__(self, index: Any, data: Any) -> None:
        self._edits.set(index, data)

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Read storage contents in physical order (``rb[:end]``)."""
        return self.storage[: len(self.storage) if end is None else end]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` back to storage in physical order (``rb[:end] = data``).

        ``end`` defaults to ``data.shape[0]`` (``len(data)``). Data that spans the
        whole storage is written as ``rb[:] = data``: on a storage of ``ndim > 1``,
        shaped as :meth:`read_all_in_order` reads it (lead dims first), as torchrl's.
        """
        if end is None:
            tensors = isinstance(data, torch.Tensor | TensorDictBase)
            ndim = self.storage.ndim
            if tensors and ndim > 1 and math.prod(data.shape[:ndim]) == len(self.storage):
                self[:] = data
                return
            end = data.shape[0] if tensors else len(data)
        self[:end] = data

    def set_(self: _B, key: NestedKey, value: torch.Tensor) -> _B:
        """Set the value of ``key`` across the whole buffer in place.

        Raises:
            KeyError: if ``key`` is not stored.
            ValueError: if ``value`` does not broadcast to the stored entries
                (nothing is written then).
        """
        self._edits.set_(key, value)
        return self

    def set_at_(self: _B, key: NestedKey, value: torch.Tensor, index: Any) -> _B:
        """Set the value of ``key`` at ``index`` (ints or an integer tensor of written slots).

        Raises:
            KeyError: if ``key`` is not stored.
            TypeError: for an index that does not hold integers.
            ValueError: for a slot outside the written ones, or a ``value`` that
                does not broadcast to the entries (nothing is written then).
        """
        self._edits.set_at_(key, value, index)
        return self

    def update_(
        self: _B,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
    ) -> _B:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""
        self._edits.update_(input_dict_or_td, clone, keys_to_update)
        return self

    def update_if_present(
        self,
        *,
        index: torch.Tensor,
        generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None,
        version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patch the records whose ``(index, generation)`` is still live (see the reference doc).

        On a storage with ``ndim > 1``, ``index`` holds coordinates (``[N, ndim]``
        or a tuple, as ``extend`` returns them) or flat cells, one record per cell;
        each patch entry holds one row per record (reshaped in index order, as torchrl's).
        """
        return self._edits.update_if_present(
            index, generation, patch, version_key, version, require_newer
        )

    def query(
        self, predicate: Callable[..., bool] | None = None, *, trajectory_key: Any = None
    ) -> list[Any]:
        """Return the stored trajectories matching ``predicate``, oldest first."""
        return self._edits.query(predicate, trajectory_key)

    # ------------------------------------------------------------ priorities
    def update_priority(
        self,
        index: torch.Tensor | tuple[torch.Tensor, ...] | int,
        priority: torch.Tensor | float,
        *,
        generation: torch.Tensor | None = None,
    ) -> None:
        """Update the priorities of ``index`` (skipping slots rewritten since ``generation``).

        With a storage of ``ndim > 1``, ``index`` may hold coordinates, as
        :meth:`extend` and ``info["index"]`` give them (``[N, ndim]`` or a tuple
        of ``ndim`` tensors), or flat cells (1-D). A priority of several dims is
        laid out like the data given to ``extend``: its dim ``dim_extend`` is
        moved first, as ``extend`` does with the data, before it is flattened.

        Raises:
            TypeError: for an index that does not hold integers.
            ValueError: if a priority is negative, NaN or infinite, the lengths
                differ, coordinates have the wrong width or lie outside the
                storage, or an index is outside the written slots; nothing
                changes then.
        """
        self._priorities.update_priority(index, priority, generation)

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to a batch this buffer handed out (skipping rewritten rows).

        With a :class:`~rbdata.Sequence` unit the records' priorities go to
        their anchors (the max over each window's valid records).
        """
        self._priorities.update_batch_priority(batch, priority, self.update_priority)

    def _anchor_reduced_priority(
        self, batch: Any, priority: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The distinct anchors of a batch's records and their max priority (None: no anchors)."""
        return self._priorities.anchor_reduced_priority(batch, priority)

    # ------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content included) under fixed keys.

        With ``prefetch``, the batches sampled ahead are part of it
        (``"_prefetch_state"``): they were drawn already, and a restored buffer
        hands them out first.
        """
        return self._state.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error).

        Raises:
            RuntimeError: if the state holds prefetched batches and was saved by
                a buffer with another ``prefetch``.
        """
        self._state.load_state_dict(state_dict)

    def sampling_state(self) -> dict[str, Any]:
        """What decides the next draws: the sampler's and the generator's state."""
        return self._state.sampling_state()

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error)."""
        self._state.load_sampling_state(state)

    def stats(self) -> dict[str, Any]:
        """A cheap, serializable snapshot of the buffer's operational state."""
        return self._state.stats()

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into :meth:`stats` until the handle is removed."""
        return self._components.stats.register(source)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the buffer atomically in the directory ``path``."""
        self._components.init()
        _persistence.dumps(self, path)

    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load a buffer saved with :meth:`dumps` (checked first; unchanged on error).

        ``allow_pickle=True`` lets a list storage's pickled objects be unpickled
        (which runs code from the file: only for dumps you trust).

        Raises:
            CheckpointError: naming the file and the problem, for a missing,
                damaged or mismatched dump.
        """
        self._components.init()
        _persistence.loads(self, path, allow_pickle)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path, allow_pickle=allow_pickle)

    # ------------------------------------------------------------ lifecycle
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
        self._components.prefetcher.shutdown()
        self._components.alive = False

    @classmethod
    def as_remote(cls, remote_config: dict[str, Any] | None = None) -> Any:
        """Create a Ray remote class of this buffer (needs the ``ray`` extra)."""
        return ray_actor_class(cls, remote_config)

    def __getstate__(self) -> dict[str, Any]:
        self._components.prefetcher.settle()  # before the generator and sampler are read
        return self._settings()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._assemble(self._components)

    def __repr__(self) -> str:
        components = self._components
        if not components.initialized:
            return f"{type(self).__name__}(initialized=False)"
        storage = components.storage
        return (
            f"{type(self).__name__}(storage={type(storage).__name__}(max_size="
            f"{storage.max_size}), sampler={type(components.sampler).__name__}, writer="
            f"{type(components.writer).__name__}, size={len(storage)}, "
            f"batch_size={components.batch_size})"
        )


# ``inspect.signature(ReplayBuffer)`` reads ``__new__``, which takes any arguments (for
# subclasses): it shows the constructor's
ReplayBuffer.__new__.__signature__ = inspect.signature(ReplayBuffer.__init__)  # type: ignore[attr-defined]

#: the arguments a buffer hosted by a service is built with, in place of the caller's
_HOSTED = {
    "service_backend": None,
    "service_backend_options": None,
    "use_ray_service": False,
    "transport": "auto",
    "transport_options": None,
    "prefetch": 0,  # its clients prefetch
    "delayed_init": True,  # the service builds the components
}


def _remote_buffer(cls: type[ReplayBuffer], kwargs: dict[str, Any]) -> Any:
    """What ``cls(**kwargs)`` is for a buffer a service hosts: the backend's own object.

    The arguments are checked as a direct buffer checks them; the buffer the
    service hosts is built with them (see :data:`_HOSTED`), and the registered
    backend starts the service and returns the object that forwards to it (an
    instance of a subclass of ``cls`` whose ``__init__`` takes the arguments
    and changes nothing); it carries the hosted buffer's public settings.
    """
    backend = check_backend(
        kwargs.get("service_backend"),
        bool(kwargs.get("use_ray_service", False)),
        kwargs.get("service_backend_options"),
        kwargs.get("transport", "auto"),
        kwargs.get("transport_options"),
    )
    check_buffer_args(
        transform=kwargs.get("transform"),
        transform_factory=kwargs.get("transform_factory"),
        batch_size=kwargs.get("batch_size"),
        prefetch=kwargs.get("prefetch"),
        consume_after_n_samples=kwargs.get("consume_after_n_samples"),
        generator=kwargs.get("generator"),
        dim_extend=kwargs.get("dim_extend"),
    )
    prefetch = kwargs.get("prefetch") or 0
    check_shared_prefetch(bool(kwargs.get("shared", False)), prefetch)
    delayed_init = kwargs.get("delayed_init")
    if delayed_init is None:
        delayed_init = kwargs.get("transform_factory") is not None
    hosted = cls(**{**kwargs, **_HOSTED})
    buffer = get_service_backend(backend)(
        cls,
        hosted,
        kwargs.get("service_backend_options"),
        kwargs.get("transport", "auto"),
        kwargs.get("transport_options"),
        prefetch=prefetch,
        delayed_init=bool(delayed_init),
    )
    for name, value in vars(hosted).items():  # public settings (a TensorDict buffer's priority_key)
        if not name.startswith("_"):
            vars(buffer).setdefault(name, value)
    return buffer
