"""ReplayBuffer: torchrl's replay-buffer API around the buffer engine (``_core``)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

import torch
from tensordict import TensorDictBase

from rbdata._updates import ConditionalUpdateResult, conditional_update
from rbdata._validation import IncompatibleValueError, NestedKey, check_indices, normalize_key
from rbdata.buffers import _persistence
from rbdata.buffers._anchor_priority import reduce_to_anchors
from rbdata.buffers._core import _BufferCore
from rbdata.buffers._prefetch import _BatchPrefetcher
from rbdata.buffers._priority import check_priority_update
from rbdata.buffers._sharing import _WriteFollower, check_shared_prefetch, share_transform
from rbdata.buffers._sync import _BufferSync
from rbdata.samplers import Sampler
from rbdata.storages import Storage
from rbdata.transforms import Transform, as_transform
from rbdata.writers import Writer

__all__ = ["ReplayBuffer"]


class ReplayBuffer(_BufferCore):
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
        generator: a ``torch.Generator`` for sampling (None: torch's global RNG).
        consume_after_n_samples: items leave the sampleable set after being returned this
            many times (works with every sampler and with ``prefetch``); ``len`` then
            counts the items still sampleable.
        shared: share the buffer with ``torch.multiprocessing`` child processes.
        compilable: keep the writer's bookkeeping compatible with ``torch.compile``.
        delayed_init: build the components on first use (default: True with a transform_factory).
        service_backend: ``"direct"`` (default) or ``"ray"``.
        service_backend_options: Ray options (``ray_init_config``, ``remote_config``).
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

    def set_storage(
        self, storage: Storage, collate_fn: Callable[[Any], Any] | None = None
    ) -> Storage:
        """Set a new storage and return the previous one."""
        with self._sync.lock:
            self._init()
            prev, self._storage = self._storage, storage
            self._writer.register_storage(storage)
            self._follower.seen = self._writer.write_count
            self._collate_arg = collate_fn
            self._collate_fn = collate_fn or storage.default_collate_fn()
            return prev

    def set_sampler(self, sampler: Sampler) -> Sampler:
        """Set a new sampler and return the previous one."""
        with self._sync.lock:
            self._init()
            prev, self._sampler = self._sampler, sampler
            self._follower.seen = self._writer.write_count
            sampler.set_rng(self._generator)
            sampler.set_consume_after_n(self._consume_after_n)
            return prev

    def set_writer(self, writer: Writer) -> Writer:
        """Set a new writer and return the previous one."""
        with self._sync.lock:
            self._init()
            prev, self._writer = self._writer, writer
            writer.register_storage(self._storage)
            self._follower.seen = writer.write_count
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
        self, transform: Transform | Callable[[Any], Any], *, invert: bool = False
    ) -> ReplayBuffer:
        """Append a transform (``invert=True``: run it on writes, its inverse on reads)."""
        transform = as_transform(transform, invert=invert)
        if self._shared:
            share_transform(transform)
        self.transform.append(transform)
        return self

    def insert_transform(
        self, index: int, transform: Transform | Callable[[Any], Any], *, invert: bool = False
    ) -> ReplayBuffer:
        """Insert a transform at ``index`` (``invert`` as in :meth:`append_transform`)."""
        transform = as_transform(transform, invert=invert)
        if self._shared:
            share_transform(transform)
        self.transform.insert(index, transform)
        return self

    def share(self, shared: bool = True) -> ReplayBuffer:
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
            >>> rb.storage._rows.packed.is_shared(), rb.lock.__class__.__module__
            (True, 'multiprocessing.synchronize')
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

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a hook applied to the storage content before ``dumps``."""
        self.storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a hook applied to the storage content after ``loads``."""
        self.storage.register_load_hook(hook)

    def __setitem__(self, index: Any, data: Any) -> None:
        if self._remote is not None:
            self._remote.setitem(index, data)
            return
        with self._sync.cond:
            self.storage.set(index, data)
            self._mark_update(index)
            self._sync.cond.notify_all()

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Read storage contents in physical order (``rb[:end]``)."""
        return self.storage[: len(self.storage) if end is None else end]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` back to storage in physical order (``rb[:end] = data``)."""
        if end is None:
            end = data.shape[0] if isinstance(data, torch.Tensor | TensorDictBase) else len(data)
        self[:end] = data

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
        self._init()
        with self._sync.lock:
            flat = self._flat_index(index)
            if self._storage.ndim > 1:
                priority = torch.as_tensor(priority)
                if priority.ndim > 1 and self.dim_extend > 0:
                    priority = priority.movedim(self.dim_extend, 0)
            flat, priority = check_priority_update(flat, priority, len(self._storage))
            if generation is not None and self._writer.tracks_generations:
                generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
                if generation.numel() != flat.numel():
                    raise ValueError(
                        f"generation has {generation.numel()} entries, expected one per index "
                        f"({flat.numel()})."
                    )
                live = self._writer.generations_of(flat) == generation
                self._stats.count_skipped_priority_updates(int((~live).sum()))
                flat, priority = flat[live], priority[live]
            self._sampler.update_priority(flat, priority, storage=self._storage)

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to a batch this buffer handed out (skipping rewritten rows).

        With a :class:`~rbdata.Sequence` unit the records' priorities go to
        their anchors (the max over each window's valid records).
        """
        if not self.prioritized:
            return
        index = self._flat_index(batch["index"], 'batch["index"]')
        generation = (
            batch.get("index_generation", None)
            if isinstance(batch, Mapping | TensorDictBase)
            else None
        )
        priority = torch.as_tensor(priority).detach()
        if priority.numel() == index.numel():
            priority = priority.reshape(index.shape)
        self._update_record_priority(batch, index, priority, generation)

    def _update_record_priority(
        self, batch: Any, index: torch.Tensor, priority: torch.Tensor, generation: Any
    ) -> None:
        """Priorities of a sampled batch's records: to the records, or to their anchors."""
        anchors = self._sample_unit.anchors_of(batch, self.storage)
        if anchors is None:
            self.update_priority(index, priority, generation=generation)
            return
        with self._sync.lock:
            live = None
            if generation is not None and self._writer.tracks_generations:
                generation = torch.as_tensor(generation, dtype=torch.long).reshape(-1)
                live = self._writer.generations_of(index.reshape(-1)) == generation
            anchors, priority, skipped = reduce_to_anchors(
                anchors, priority, batch.get("validity_mask", None), live
            )
            self._stats.count_skipped_priority_updates(skipped)
            self.update_priority(anchors, priority)

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
        """Patch the records whose ``(index, generation)`` is still live (see the reference doc)."""
        self._init()
        with self._sync.lock:
            result = conditional_update(
                self._storage,
                self._writer,
                index=index,
                generation=generation,
                patch=patch,
                version_key=version_key,
                version=version,
                require_newer=require_newer,
            )
            self._mark_update(torch.as_tensor(index).reshape(-1)[result.updated])
            return result

    def set_(self, key: NestedKey, value: torch.Tensor) -> ReplayBuffer:
        """Set the value of ``key`` across the whole buffer in place.

        Raises:
            KeyError: if ``key`` is not stored.
            ValueError: if ``value`` does not broadcast to the stored entries
                (nothing is written then).
        """
        with self._sync.lock:
            leaf = self._leaf(key)[: len(self._storage)]
            leaf.copy_(_fitting(value, leaf, key))
            self._mark_update(slice(0, len(self._storage)))
        return self

    def set_at_(self, key: NestedKey, value: torch.Tensor, index: Any) -> ReplayBuffer:
        """Set the value of ``key`` at ``index`` (ints or an integer tensor of written slots).

        Raises:
            KeyError: if ``key`` is not stored.
            TypeError: for an index that does not hold integers.
            ValueError: for a slot outside the written ones, or a ``value`` that
                does not broadcast to the entries (nothing is written then).
        """
        with self._sync.lock:
            leaf = self._leaf(key)
            slots = check_indices(index, len(self._storage))
            leaf[slots] = _fitting(value, leaf[slots], key)
            self._mark_update(slots)
        return self

    def update_(
        self,
        input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase,
        clone: bool = False,
        *,
        keys_to_update: Any = None,
    ) -> ReplayBuffer:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""
        src = input_dict_or_td
        # leaves_only: the values are leaf tensors (tensordict types them Tensor | TensorCollection)
        items = cast(
            Iterable[tuple[Any, torch.Tensor]],
            src.items(True, True) if isinstance(src, TensorDictBase) else src.items(),
        )
        wanted = None
        if keys_to_update is not None:
            wanted = {normalize_key(k, "keys_to_update") for k in keys_to_update}
        for key, value in items:
            if wanted is None or normalize_key(key) in wanted:
                self.set_(key, value.clone() if clone else value)
        return self

    def query(
        self, predicate: Callable[..., bool] | None = None, *, trajectory_key: Any = None
    ) -> list[Any]:
        """Return the stored trajectories matching ``predicate``, oldest first."""
        from rbdata.query import run_query

        with self._sync.lock:
            self._init()
            return run_query(
                self._storage,
                transform=self._transform,
                cursor=int(getattr(self._writer, "cursor", 0)),
                predicate=predicate,
                trajectory_key=trajectory_key,
            )

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the buffer atomically in the directory ``path``."""
        self._init()
        _persistence._dumps(self, path)

    def loads(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Load a buffer saved with :meth:`dumps` (checked first; unchanged on error).

        ``allow_pickle=True`` lets a list storage's pickled objects be unpickled
        (which runs code from the file: only for dumps you trust).

        Raises:
            CheckpointError: naming the file and the problem, for a missing,
                damaged or mismatched dump.
        """
        self._init()
        _persistence._loads(self, path, allow_pickle)

    def dump(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(path)

    def load(self, path: str | os.PathLike[str], *, allow_pickle: bool = False) -> None:
        """Alias for :meth:`loads`."""
        self.loads(path, allow_pickle=allow_pickle)

    def reader(self, sampler: Sampler) -> ReplayBuffer:
        """A buffer sharing this one's storage, writer and transforms that draws with ``sampler``.

        It has its own lock (a shared buffer's keeps the cross-process one, so
        that writers in other processes do not tear the rows it reads); used by
        DataLoader worker processes, which read a private copy of the buffer.
        """
        self._init()
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__)
        copy._sync = self._sync if self._sync.shared else _BufferSync()
        copy._follower = _WriteFollower(self._follower.seen)
        copy._prefetcher = _BatchPrefetcher(0)
        copy._iterator = None
        copy._sampler = sampler
        sampler.set_consume_after_n(None)
        return copy

    def start(self) -> ReplayBuffer:
        """Return this already-started direct replay buffer."""
        return self

    def client(self) -> ReplayBuffer:
        """Return self for the zero-overhead direct backend."""
        return self

    def close(self, timeout: float | None = None) -> None:
        """Alias for :meth:`shutdown`."""
        self.shutdown(timeout)

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    @classmethod
    def as_remote(cls, remote_config: dict[str, Any] | None = None) -> Any:
        """Create a Ray remote class of this buffer (needs the ``ray`` extra)."""
        try:
            import ray
        except ImportError as err:
            raise ImportError("as_remote needs Ray: pip install 'rbdata[ray]'.") from err
        return ray.remote(**(remote_config or {"num_cpus": 1}))(cls)


def _fitting(value: Any, target: torch.Tensor, key: Any) -> torch.Tensor:
    """``value`` as a tensor of ``target``'s dtype that broadcasts to it (ValueError if not)."""
    tensor = torch.as_tensor(value).to(target.dtype)
    try:
        return tensor.expand_as(target)
    except RuntimeError:
        raise IncompatibleValueError(
            f"value for {key!r} has shape {list(tensor.shape)}, which does not fit the "
            f"{list(target.shape)} entries it should replace."
        ) from None
