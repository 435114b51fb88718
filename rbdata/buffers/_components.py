"""A replay buffer's components and their lifecycle: construction, replacement, sharing.

:class:`_Components` is the one object every part of a
:class:`~rbdata.ReplayBuffer` holds a reference to (the write path, the read
path, indexing, priority updates, state): the storage, sampler, writer,
sample unit and transforms, built lazily, with the buffer's settings, its
lock (``sync``) and its bookkeeping (``stats``, ``prefetcher``,
``feed``). :class:`_BufferBase` shows them under the names the sharing
mixins (``_DeferredWrites``, ``_SharedHandle``) are written against.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from rbdata.buffers._coordinates import cells_of_rows, to_flat
from rbdata.buffers._init_args import build_component
from rbdata.buffers._prefetch import _BatchPrefetcher
from rbdata.buffers._stats import _BufferStats
from rbdata.sample_units import SampleUnit
from rbdata.samplers import RandomSampler, Sampler
from rbdata.sharing.counters import spawning
from rbdata.sharing.feed import WriteFeed
from rbdata.sharing.parts import check_shared_prefetch, share_transform
from rbdata.sharing.sync import _BufferSync
from rbdata.storages import ListStorage, Storage, StorageCheckpointerBase, shape_of
from rbdata.transforms import Compose, Transform
from rbdata.writers import Writer

__all__ = ["_BufferBase", "_Components"]


class _Components:
    """A buffer's components, its settings and its lock, and their lifecycle.

    The constructor keeps the arguments; :meth:`init` builds the components
    (once, under the lock: threads of a concurrent owner may ask at once).
    Replacing a component (:meth:`set_storage`, ...) and sharing
    (:meth:`share`) happen here, so every part sees the same components.

    Examples:
        >>> from rbdata.samplers import RandomSampler
        >>> from rbdata.sample_units import Transition
        >>> from rbdata.writers import RoundRobinWriter
        >>> parts = _Components({"storage": None, "sampler": None, "writer": None,
        ...     "transform": None, "transform_factory": None}, Transition(),
        ...     default_writer=RoundRobinWriter)
        >>> parts.initialized, parts.init(), type(parts.storage).__name__
        (False, None, 'ListStorage')
    """

    def __init__(
        self,
        args: dict[str, Any],
        sample_unit: SampleUnit,
        *,
        default_writer: Callable[[bool], Writer],
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        prefetch: int = 0,
        batch_size: int | None = None,
        dim_extend: int | None = None,
        generator: torch.Generator | None = None,
        consume_after_n: int | None = None,
        shared: bool = False,
        compilable: bool = False,
    ) -> None:
        self.args = args
        self.sample_unit = sample_unit
        self.default_writer = default_writer
        self.collate_arg = collate_fn
        self.pin_memory = pin_memory
        self.prefetch = prefetch
        self.batch_size = batch_size
        self.dim_extend_arg = dim_extend
        self.generator = generator
        self.consume_after_n = consume_after_n
        self.shared = shared
        self.compilable = compilable
        #: False: a child started with the buffer gets a RandomSampler (``sync=False``)
        self.sync_priorities = True
        self.alive = True
        self.sync = _BufferSync()
        self.stats = _BufferStats()
        self.prefetcher = _BatchPrefetcher(prefetch)
        self.initialized = False
        # built by init()
        self.storage: Storage
        self.sampler: Sampler
        self.writer: Writer
        self.transform: Compose
        self.collate_fn: Callable[[Any], Any]
        self.feed: WriteFeed

    # ------------------------------------------------------------ building
    def init(self) -> None:
        """Build the components unless built already."""
        if self.initialized:
            return
        with self.sync.lock:  # threads of a concurrent owner may make the first call at once
            if not self.initialized:
                self._build()

    def _build(self) -> None:
        args = self.args
        storage: Storage = build_component(
            args["storage"], Storage, lambda: ListStorage(1000), "storage"
        )
        sampler: Sampler = build_component(args["sampler"], Sampler, RandomSampler, "sampler")
        if sampler.consumes:  # a ConsumingSampler: its count is the buffer's
            sampler.set_consume_after_n(self.consume_after_n)  # a conflict raises
            self.consume_after_n = sampler.consume_after_n
        writer: Writer = build_component(
            args["writer"], Writer, lambda: self.default_writer(self.compilable), "writer"
        )
        if self.batch_size is None and sampler.drop_last:
            raise ValueError(
                "Samplers with drop_last=True must work with a predictable batch-size: pass "
                "batch_size=... to the buffer (with drop_last the pass length depends on it)."
            )
        if self.consume_after_n is not None and not callable(writer.write_at):
            raise TypeError(
                f"consume_after_n_samples requires a writer with a callable write_at (new items "
                f"reuse the slots of consumed ones); {type(writer).__name__} has none."
            )
        checkpointer: StorageCheckpointerBase | None = args.get("checkpointer")
        if checkpointer is not None:
            storage.checkpointer = checkpointer
        self.storage, self.sampler, self.writer = storage, sampler, writer
        writer.register_storage(storage)
        self.feed = WriteFeed(writer.write_count)
        sampler.set_rng(self.generator)
        sampler.set_consume_after_n(self.consume_after_n)
        factory = args["transform_factory"]
        transform = args["transform"] if factory is None else factory()
        self.transform = (
            transform
            if isinstance(transform, Compose)
            else (Compose() if transform is None else Compose(transform))
        )
        self.collate_fn = self.collate_arg or storage.default_collate_fn()
        if storage.ndim == 1 and len(storage):
            # A storage built holding data (TensorStorage(data)): its items are sampleable,
            # and a prioritized sampler gives them the default priority.
            self.note_written(torch.arange(len(storage)))
        if self.shared:
            self._share_built()
        self.initialized = True

    def _share_built(self) -> None:
        """Storage rows, counters, generations and transforms' state into shared memory."""
        self.storage.share_memory_()  # a list storage is refused when sent to a child
        self.writer.share_memory_()
        self.sync.share()
        self.sync.bind(self.rows_and_cursor)
        share_transform(self.transform)

    def share(self, shared: bool) -> None:
        """Share (True) or stop excluding other processes (False); see ``ReplayBuffer.share``."""
        if not isinstance(shared, bool):
            raise TypeError(f"shared must be a bool, got {type(shared).__name__}.")
        check_shared_prefetch(shared, self.prefetch)
        if not shared:
            self.shared = False
            self.sync.unshare()
            return
        if self.initialized:
            self._share_built()
        self.shared = True

    def reader(self, sampler: Sampler) -> _Components:
        """Components sharing these ones' storage, writer and transforms, drawing with ``sampler``.

        They have their own lock (a shared buffer's keep the cross-process
        one), write follower and no prefetch.
        """
        self.init()
        copy = _Components(
            {**self.args, "sampler": sampler},  # the reader's own (pickled with it)
            self.sample_unit,
            default_writer=self.default_writer,
            collate_fn=self.collate_arg,
            pin_memory=self.pin_memory,
            batch_size=self.batch_size,
            dim_extend=self.dim_extend_arg,
            generator=self.generator,
            consume_after_n=self.consume_after_n,
            shared=self.shared,
            compilable=self.compilable,
        )
        copy.prefetch = self.prefetch
        copy.sync_priorities = self.sync_priorities
        copy.alive = self.alive
        copy.stats = self.stats
        if self.sync.shared:
            copy.sync = self.sync
        copy.storage, copy.writer, copy.transform = self.storage, self.writer, self.transform
        copy.collate_fn = self.collate_fn
        copy.feed = self.feed.copy()
        copy.sampler = sampler
        sampler.set_consume_after_n(None)
        copy.initialized = True
        return copy

    # ------------------------------------------------------------ replacing
    def set_storage(self, storage: Storage, collate_fn: Callable[[Any], Any] | None) -> Storage:
        """Use ``storage`` from now on; return the previous one.

        Writes go to the new storage from the slot after its items (a fresh storage: slot
        0), and the sampler forgets the previous storage's items and learns the new one's,
        so no empty row of the new storage is ever sampled.
        """
        with self.sync.lock:
            self.init()
            prev, self.storage = self.storage, storage
            self.writer.register_storage(storage)
            self.writer.load_state_dict({"_cursor": len(storage) % storage.max_size_along_dim0})
            self.feed.skip_to(self.writer.write_count)
            self.sampler._empty()
            if storage.ndim == 1 and len(storage):
                self.note_written(torch.arange(len(storage)))
            self.collate_arg = collate_fn
            self.collate_fn = collate_fn or storage.default_collate_fn()
            return prev

    def set_sampler(self, sampler: Sampler) -> Sampler:
        """Use ``sampler`` from now on; return the previous one."""
        with self.sync.lock:
            self.init()
            if sampler.consumes:  # a ConsumingSampler brings its count (torchrl's rule)
                self.consume_after_n = sampler.consume_after_n
            elif self.sampler.consumes:
                self.consume_after_n = None
            prev, self.sampler = self.sampler, sampler
            self.feed.skip_to(self.writer.write_count)
            sampler.set_rng(self.generator)
            sampler.set_consume_after_n(self.consume_after_n)
            return prev

    def set_writer(self, writer: Writer) -> Writer:
        """Use ``writer`` from now on; return the previous one."""
        with self.sync.lock:
            self.init()
            prev, self.writer = self.writer, writer
            writer.register_storage(self.storage)
            self.feed.skip_to(writer.write_count)
            return prev

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Sample with ``generator`` from now on (None: torch's global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}."
            )
        with self.sync.lock:
            self.generator = generator
            if self.initialized:
                self.sampler.set_rng(generator)

    def add_transform(self, transform: Transform, index: int | None) -> None:
        """Append ``transform`` (``index`` None) or insert it at ``index``."""
        if self.shared:
            share_transform(transform)
        self.init()
        if index is None:
            self.transform.append(transform)
        else:
            self.transform.insert(index, transform)

    # ------------------------------------------------------------ writes seen
    def catch_up(self) -> None:
        """Tell the sampler and sample unit of the writes other buffers or processes made."""
        writer, feed = self.writer, self.feed
        count = writer.write_count
        if count == feed.seen:  # nothing new: the common case, on every draw
            return
        ring = writer.writes_in_ring_order and self.consume_after_n is None
        feed.catch_up(count, self.storage.max_size_along_dim0, ring, self.note_written)

    def write_parts(self) -> tuple[Storage, Writer, Sampler, SampleUnit]:
        """The storage, writer, sampler and sample unit a reserved write goes through."""
        return self.storage, self.writer, self.sampler, self.sample_unit

    def rows_and_cursor(self) -> tuple[Storage, Writer]:
        """The storage and writer a dead writer's reservation is reclaimed from (``sync``)."""
        return self.storage, self.writer

    def note_written(self, index: torch.Tensor) -> None:
        """Tell the sampler and sample unit which items were written (their cells when asked)."""
        if self.sampler.per_cell_writes and self.storage.ndim > 1:
            self.sampler.extend(cells_of_rows(index, self.cells_per_item()))
        else:
            self.sampler.extend(index)
        self.sample_unit.extend(index)

    def sampleable(self) -> int:
        """What ``len(buffer)`` is: the items that can be sampled (0 before the first use)."""
        if not self.initialized:
            return 0
        return int(self.sync.peek(lambda: self.sampler.sampleable(self.storage)))

    # ------------------------------------------------------------ layout
    @property
    def dim_extend(self) -> int:
        """The dimension ``extend`` iterates over."""
        if self.dim_extend_arg is not None:
            return self.dim_extend_arg
        self.init()
        return self.storage.ndim - 1

    def storage_shape(self) -> tuple[int, ...]:
        """The storage's shape: ``[capacity, *lead]`` (only tensor storages have ``ndim > 1``)."""
        return shape_of(self.storage)

    def cells_per_item(self) -> int:
        """The cells of one item along dim 0 (1 for ``ndim == 1``)."""
        return math.prod(self.storage_shape()[1:])

    def flat_index(self, index: Any, name: str = "index") -> Any:
        """``index`` as flat cells (coordinates of an ``ndim > 1`` storage converted).

        Raises:
            ValueError: for coordinates of the wrong width or outside the storage.
        """
        storage = self.storage
        if storage.ndim == 1 or not storage.initialized:
            return index
        return to_flat(index, self.storage_shape(), name)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if not self.sync_priorities and spawning():
            # sync=False: a started child writes without the priority tree (see
            # PrioritizedReplayBuffer); the learner gives its items the default priority
            state["sampler"] = RandomSampler()
            state["args"] = {**state["args"], "sampler": state["sampler"]}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.sync.bind(self.rows_and_cursor)


class _BufferBase:
    """The components under the names the sharing mixins (``_DeferredWrites``, ...) use.

    An object with a ``_components`` reference (the buffer, its write path)
    reads them here as ``self._storage``, ``self._sync``, ... Not meant to be
    used on its own.

    Examples:
        >>> from rbdata import ReplayBuffer
        >>> issubclass(ReplayBuffer, _BufferBase)
        True
    """

    _components: _Components

    @property
    def _initialized(self) -> bool:
        return self._components.initialized

    @property
    def _sync(self) -> _BufferSync:
        return self._components.sync

    @property
    def _storage(self) -> Storage:
        return self._components.storage

    @property
    def _sampler(self) -> Sampler:
        return self._components.sampler

    @property
    def _writer(self) -> Writer:
        return self._components.writer

    @property
    def _sample_unit(self) -> SampleUnit:
        return self._components.sample_unit

    @property
    def _transform(self) -> Compose:
        return self._components.transform

    @property
    def _consume_after_n(self) -> int | None:
        return self._components.consume_after_n

    @property
    def _prefetch(self) -> int:
        return self._components.prefetch

    @property
    def _batch_size(self) -> int | None:  # torchrl's attribute, which its own tests read
        return self._components.batch_size

    # torchrl's names of the components still to build (read-only; its tests read them):
    # what was given while the buffer is not built (delayed init), None once it is
    @property
    def _init_storage(self) -> Any:
        """The storage (or factory) given, until the buffer is built; then None."""
        return self._pending("storage")

    @property
    def _init_sampler(self) -> Any:
        """The sampler (or factory) given, until the buffer is built; then None."""
        return self._pending("sampler")

    @property
    def _init_writer(self) -> Any:
        """The writer (or factory) given, until the buffer is built; then None."""
        return self._pending("writer")

    def _pending(self, name: str) -> Any:
        c = self._components
        return None if c.initialized else c.args.get(name)

    def share(self, shared: bool = True) -> Any:
        """Share the buffer with other processes (the buffer's :meth:`ReplayBuffer.share`)."""
        raise NotImplementedError(f"{type(self).__name__} is no buffer to share.")
