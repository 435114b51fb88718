"""ReplayBuffer: the thin orchestrator of storage, sampler, writer, sample unit and transforms."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils._pytree import tree_map

from rbdata.buffers import _persistence
from rbdata.buffers._components import _BufferComponents
from rbdata.buffers._helpers import (
    _build,
    _check_init_args,
    _collate_list,
    _identity,
    _is_empty,
    _resolve_batch_size,
    _unsqueeze,
)
from rbdata.buffers._mutations import _BufferUpdates
from rbdata.buffers._persistence import _BufferPersistence
from rbdata.buffers._prefetch import _BatchPrefetcher
from rbdata.sample_units import SampleUnit, Transition
from rbdata.samplers import RandomSampler, Sampler
from rbdata.storages import LazyStackStorage, ListStorage, Storage
from rbdata.transforms import Compose, Transform
from rbdata.writers import RoundRobinWriter, Writer

__all__ = ["ReplayBuffer"]


class ReplayBuffer(_BufferComponents, _BufferUpdates, _BufferPersistence):
    """A generic, composable replay buffer (torchrl's ``ReplayBuffer`` API).

    Keyword Args:
        storage: a Storage or a callable building one; defaults to ``ListStorage(1000)``.
        sampler: a Sampler or a callable building one; defaults to :class:`RandomSampler`.
        sample_unit: expands sampled anchors into records; None means :class:`Transition`.
        writer: a Writer or a callable building one; defaults to :class:`RoundRobinWriter`.
        collate_fn: merges items read from a list storage; the default depends on the storage.
        pin_memory: pin sampled batches.
        prefetch: number of batches sampled ahead on a background thread.
        transform: a Transform or callable run on ``sample`` (see :class:`Compose`).
        transform_factory: a callable building the transform (exclusive with ``transform``).
        batch_size: the default batch size of ``sample()`` and iteration.
        dim_extend: the dimension ``extend`` iterates over (defaults to ``storage.ndim - 1``).
        generator: a ``torch.Generator`` for sampling (None: torch's global RNG).
        consume_after_n_samples: items leave the sampleable set after being returned this
            many times (works with every sampler and with ``prefetch``).
        shared: share the buffer with ``torch.multiprocessing`` child processes.
        compilable: keep the writer's bookkeeping compatible with ``torch.compile``.
        delayed_init: build the components on first use (default: True with a transform_factory).
        service_backend: ``"direct"`` (default) or ``"ray"``.
        service_backend_options: Ray options (``ray_init_config``, ``remote_config``).

    Examples:
        >>> import torch
        >>> from rbdata import ListStorage, ReplayBuffer
        >>> _ = torch.manual_seed(0)
        >>> rb = ReplayBuffer(storage=ListStorage(max_size=1000), batch_size=5)
        >>> indices = rb.extend(range(10))
        >>> rb.sample()
        tensor([4, 9, 3, 0, 3])
    """

    _default_writer: type[Writer] = RoundRobinWriter

    def __new__(cls, *args: Any, **kwargs: Any) -> ReplayBuffer:
        self = super().__new__(cls)
        self._init_kwargs = kwargs  # what a Ray actor hosting this buffer is built with
        return self

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
        backend = _check_init_args(
            service_backend="ray" if use_ray_service else service_backend,
            transform=transform,
            transform_factory=transform_factory,
            batch_size=batch_size,
            prefetch=prefetch,
            consume_after_n_samples=consume_after_n_samples,
            generator=generator,
        )
        self._args = {
            "storage": storage,
            "sampler": sampler,
            "writer": writer,
            "transform": transform,
            "transform_factory": transform_factory,
        }
        self._sample_unit: SampleUnit = sample_unit if sample_unit is not None else Transition()
        self._collate_arg = collate_fn
        self._pin_memory = pin_memory
        self._prefetch = prefetch or 0
        self._batch_size = batch_size
        self._dim_extend_arg = dim_extend
        self._generator = generator
        self._consume_after_n = consume_after_n_samples
        self._shared = shared
        self._compilable = compilable
        self._service_backend = backend
        self._remote: Any = None
        if backend == "ray":
            from rbdata.service import attach_ray_service

            hosted = {
                k: v
                for k, v in self._init_kwargs.items()
                if k
                not in (
                    "service_backend",
                    "service_backend_options",
                    "use_ray_service",
                    "transport",
                    "transport_options",
                )
            }
            self._remote = attach_ray_service(
                self, type(self), hosted, service_backend_options, transport, transport_options
            )
            return
        self._service_backend_options = service_backend_options
        self._alive = True
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._prefetcher = _BatchPrefetcher(self._prefetch)
        self._iterator: Iterator[Any] | None = None
        self._stats_sources: list[Callable[[], dict[str, Any]]] = []
        self._skipped_priority_updates = 0
        self._initialized = False
        if delayed_init is None:
            delayed_init = transform_factory is not None
        if not delayed_init:
            self._init()

    # ----------------------------------------------------------- components
    def _init(self) -> None:
        if self._initialized:
            return
        args = self._args
        self._storage: Storage = _build(
            args["storage"], Storage, lambda: ListStorage(1000), "storage"
        )
        self._sampler: Sampler = _build(args["sampler"], Sampler, RandomSampler, "sampler")
        self._writer: Writer = _build(args["writer"], Writer, self._make_writer, "writer")
        self._writer.register_storage(self._storage)
        self._sampler.set_rng(self._generator)
        self._sampler.set_consume_after_n(self._consume_after_n)
        transform = (
            args["transform"] if args["transform_factory"] is None else args["transform_factory"]()
        )
        self._transform = (
            transform
            if isinstance(transform, Compose)
            else (Compose() if transform is None else Compose(transform))
        )
        self._collate_fn = self._collate_arg or self._default_collate()
        if self._shared:
            _persistence.share(self)
        self._initialized = True

    def _make_writer(self) -> Writer:
        return self._default_writer(compilable=self._compilable)

    def _default_collate(self) -> Callable[[Any], Any]:
        if isinstance(self._storage, LazyStackStorage):
            return _identity
        if isinstance(self._storage, ListStorage):
            return _collate_list
        return _identity

    # -------------------------------------------------------------- writing
    def _prepare(self, data: Any, *, move_dim: bool = True) -> Any:
        storage = self._storage
        if isinstance(storage, ListStorage):
            return data if isinstance(data, (list, TensorDictBase, torch.Tensor)) else list(data)
        if isinstance(data, list):
            data = (
                torch.stack(data)
                if isinstance(data[0], (torch.Tensor, TensorDictBase))
                else (torch.as_tensor(data))
            )
        if not move_dim:
            return data
        dim = self._dim_extend_arg
        if dim is None:
            dim = storage.ndim - 1
        if dim > 0:
            data = (
                data.movedim(dim, 0)
                if isinstance(data, torch.Tensor)
                else (
                    data.transpose(dim, 0)
                    if isinstance(data, TensorDictBase)
                    else tree_map(lambda t: t.movedim(dim, 0), data)
                )
            )
        return data

    def add(self, data: Any) -> int:
        """Add a single element and return the index where it lives."""
        self._init()
        if isinstance(self._storage, ListStorage) and not isinstance(
            self._storage, LazyStackStorage
        ):
            with self._cond:
                data = self._transform.inv(data)
                index = self._writer.add(data)
                self._sampler.add(index)
                self._sample_unit.add(index)
                self._cond.notify_all()
            return index
        index = self._extend(self._prepare(_unsqueeze(data), move_dim=False), None)
        return int(index[0]) if index.numel() else -1

    def extend(self, data: Any, *, update_priority: bool | None = None) -> torch.Tensor:
        """Extend the buffer with a batch of elements; return their indices.

        A list at the root is a stack of items; a tuple is a PyTree. Inverse
        transforms run first; bad data raises before anything is written.
        """
        self._init()
        return self._extend(self._prepare(data), update_priority)

    def _extend(self, data: Any, update_priority: bool | None) -> torch.Tensor:
        with self._cond:
            if len(self._transform):
                data = self._transform.inv(data)
            kind = type(data)
            if kind is TensorDict or kind is torch.Tensor:
                shape = data.shape
                empty = bool(shape) and shape[0] == 0
            else:
                empty = _is_empty(data)
            if empty:
                return torch.empty(0, dtype=torch.long)
            writer = self._writer
            index = writer.extend(data)
            written = index[index >= 0] if writer._drops_items else index
            self._sampler.extend(written)
            self._sample_unit.extend(written)
            self._after_extend(data, index, update_priority)
            self._cond.notify_all()
        return index

    def _after_extend(self, data: Any, index: torch.Tensor, update_priority: bool | None) -> None:
        """Hook for subclasses (priorities read from the data)."""

    # ------------------------------------------------------------- sampling
    def _sample_index(self, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        """Draw the indices of one batch (under the lock); empty when nothing is sampleable."""
        self._init()
        with self._lock:
            if len(self._storage) == 0:
                raise RuntimeError(
                    "cannot sample from an empty buffer (size 0, capacity "
                    f"{self._storage.max_size}); extend it first."
                )
            if self._sampler.exhausted(self._storage):
                return torch.empty(0, dtype=torch.long), {"index": torch.empty(0, dtype=torch.long)}
            index, info = self._sampler.sample(self._storage, batch_size)
            index, info = self._sample_unit.expand(index, self._storage, info)
            info = dict(info)
            if getattr(self._writer, "_generations", None) is not None:
                info["index_generation"] = self._writer.generation(index)
            info["index"] = index
            return index, info

    def _fetch(
        self, index: torch.Tensor, info: dict[str, Any], *, keep_info: bool | None = None
    ) -> Any:
        """Gather the records of ``index`` (a copy), attach ``info`` and run the transforms."""
        with self._lock:  # a write must not tear the rows being gathered
            data = self._storage.get(index if index.ndim == 1 else index.reshape(-1))
        if isinstance(self._storage, ListStorage) and not isinstance(
            self._storage, LazyStackStorage
        ):
            data = self._collate_fn(data)
        if index.ndim > 1 and isinstance(data, (torch.Tensor, TensorDictBase)):
            data = (
                data.reshape(*index.shape, *data.shape[1:])
                if isinstance(data, torch.Tensor)
                else (data.reshape(*index.shape))
            )
        keep = self._keeps_info if keep_info is None else keep_info
        if isinstance(data, TensorDictBase) and (keep or self._transform.filters_rows):
            for key, value in info.items():
                if isinstance(value, torch.Tensor) and value.shape[: index.ndim] == index.shape:
                    data.set(key, value)
            if len(self._transform):
                data = self._transform(data)
            if not keep:
                data = data.exclude(*[k for k in info if k in data.keys()])
        elif len(self._transform):
            data = self._transform(data)
        if self._pin_memory and torch.cuda.is_available():
            data = (
                data.pin_memory()
                if hasattr(data, "pin_memory")
                else tree_map(lambda t: t.pin_memory(), data)
            )
        return data

    _keeps_info = False

    def _refilter(self, batch: Any) -> Any:
        """Re-apply the sample-path row filters (for batches sampled ahead)."""
        return self.transform.refilter(batch)

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample a batch (``(batch, info)`` with ``return_info``)."""
        self._init()
        if self._prefetch:
            if batch_size is not None and batch_size != self._batch_size:
                raise ValueError(
                    f"with prefetch={self._prefetch} the batch size is fixed at construction "
                    f"({self._batch_size}); got batch_size={batch_size}."
                )
            data, info = self._next_prefetched()
        else:
            data, info = self._sample_once(self._resolve_batch_size(batch_size))
        if return_info:
            if isinstance(data, TensorDictBase) and "index" in data.keys():
                info = {k: data.get(k) for k in info if k in data.keys()}
            return data, info
        return data

    def _resolve_batch_size(self, batch_size: int | None) -> int:
        return _resolve_batch_size(batch_size, self._batch_size)

    def _sample_once(self, batch_size: int) -> tuple[Any, dict[str, Any]]:
        index, info = self._sample_index(batch_size)
        return self._fetch(index, info, keep_info=self._keeps_info or None), info

    def _next_prefetched(self) -> tuple[Any, dict[str, Any]]:
        batch_size = self._resolve_batch_size(None)
        data, info = self._prefetcher.next(lambda: self._sample_once(batch_size))
        if self._transform.filters_rows:
            data = self._refilter(data)
        return data, info

    def __iter__(self) -> Iterator[Any]:
        if self._remote is not None:
            yield from iter(self._remote.next, None)
            return
        while True:
            if self.sampler.exhausted(self.storage):
                return
            yield self.sample()
            if self._sampler.ran_out:
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

    # ---------------------------------------------------------- reading etc.
    def __len__(self) -> int:
        if self._remote is not None:
            return len(self._remote)
        return len(self.storage) if self._initialized else 0

    def __getitem__(self, index: Any) -> Any:
        if self._remote is not None:
            return self._remote.getitem(index)
        data = self.storage.get(index)
        if (
            isinstance(self._storage, ListStorage)
            and not isinstance(index, int)
            and isinstance(data, list)
        ):
            data = self._collate_fn(data)
        return self._transform(data) if len(self._transform) else data

    def __setitem__(self, index: Any, data: Any) -> None:
        with self._cond:
            self.storage.set(index, data)
            self._mark_update(index)
            self._cond.notify_all()

    def _mark_update(self, index: Any) -> None:
        """Tell trajectory-aware components that slots were edited in place."""
        hook = getattr(self._sampler, "mark_update", None)
        if hook is None:
            return
        if isinstance(index, slice):
            index = torch.arange(*index.indices(len(self._storage)))
        elif isinstance(index, int):
            index = torch.tensor([index])
        hook(torch.as_tensor(index, dtype=torch.long).reshape(-1))

    def read_all_in_order(self, end: int | None = None) -> Any:
        """Read storage contents in physical order (``rb[:end]``)."""
        return self.storage[: len(self.storage) if end is None else end]

    def write_all(self, data: Any, end: int | None = None) -> None:
        """Write ``data`` back to storage in physical order (``rb[:end] = data``)."""
        if end is None:
            end = data.shape[0] if isinstance(data, (torch.Tensor, TensorDictBase)) else len(data)
        self[:end] = data

    def empty(self, empty_write_count: bool = True) -> None:
        """Empty the buffer and reset the cursor to 0."""
        with self._cond:
            self._init()
            self._drain_prefetch()
            self._storage.empty()
            write_count = self._writer.write_count
            self._writer._empty()
            self._writer._write_count = 0 if empty_write_count else write_count
            self._sampler._empty()
            self._sample_unit._empty()
            self._cond.notify_all()

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait (without busy-looping) until ``predicate()`` holds or ``timeout`` seconds pass."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    # ------------------------------------------------------------ updating
    def stats(self) -> dict[str, int | float | bool]:
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
        size = len(self._storage)
        out = {
            "size": size,
            "write_count": self._writer.write_count,
            "prefetch_queue_size": len(self._prefetcher),
            "initialized": True,
            "capacity": self._storage.max_size,
            "utilization": size / self._storage.max_size,
            "skipped_priority_updates": self._skipped_priority_updates,
        }
        for source in list(self._stats_sources):
            out.update(source())
        return out

    # ------------------------------------------------------------ lifecycle
    def start(self) -> ReplayBuffer:
        """Return this already-started direct replay buffer."""
        return self

    def client(self) -> ReplayBuffer:
        """Return self for the zero-overhead direct backend."""
        return self

    def _drain_prefetch(self) -> None:
        self._prefetcher.drain()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the prefetch thread and mark this buffer as shut down."""
        self._prefetcher.shutdown()
        self._alive = False

    close = shutdown

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    @classmethod
    def as_remote(cls, remote_config: dict[str, Any] | None = None) -> Any:
        """Create a Ray remote class of this buffer (needs the ``ray`` extra)."""
        try:
            import ray
        except ImportError as err:
            raise ImportError("as_remote needs Ray: pip install 'rbdata[ray]'.") from err
        return ray.remote(**(remote_config or {"num_cpus": 1}))(cls)

    def __repr__(self) -> str:
        if not self._initialized:
            return f"{type(self).__name__}(initialized=False)"
        return (
            f"{type(self).__name__}(storage={type(self._storage).__name__}(max_size="
            f"{self._storage.max_size}), sampler={type(self._sampler).__name__}, writer="
            f"{type(self._writer).__name__}, size={len(self._storage)}, "
            f"batch_size={self._batch_size})"
        )
