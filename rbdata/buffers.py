"""Replay buffers: thin orchestrators of storage, sampler, writer, sample unit and transforms."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils._pytree import tree_map
from torch.utils.data._utils.collate import default_collate

from rbdata import _buffer_io
from rbdata._updates import ConditionalUpdateResult, conditional_update, normalize_key
from rbdata.sample_units import SampleUnit, Transition
from rbdata.samplers import PrioritizedSampler, RandomSampler, Sampler
from rbdata.storages import LazyStackStorage, ListStorage, Storage
from rbdata.transforms import Compose, PolicyAgeFilter, Transform, as_transform
from rbdata.writers import RoundRobinWriter, TensorDictRoundRobinWriter, Writer

__all__ = [
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
]

INFO_KEYS = ("index", "index_generation", "_weight")


def _build(obj: Any, kind: type, default: Callable[[], Any], argname: str) -> Any:
    if obj is None:
        return default()
    if isinstance(obj, kind):
        return obj
    if callable(obj):
        built = obj()
        if isinstance(built, kind):
            return built
        raise TypeError(f"{argname} factory returned {type(built).__name__}, expected a {kind.__name__}.")
    raise TypeError(f"{argname} must be a {kind.__name__} or a callable building one, got {type(obj).__name__}.")


def _check_batch_size(batch_size: Any, argname: str = "batch_size") -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
        raise ValueError(f"{argname} must be a positive int, got {batch_size!r}.")
    return batch_size


def _identity(x: Any) -> Any:
    return x


def _unsqueeze(data: Any) -> Any:
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data.unsqueeze(0)
    return tree_map(lambda t: torch.as_tensor(t).unsqueeze(0), data)


class ReplayBuffer:
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
        backend = "ray" if use_ray_service else (service_backend or "direct")
        if backend == "ray":
            raise NotImplementedError(
                'service_backend="ray" is not available in this version of rbdata; use '
                'service_backend="direct" (the default).'
            )
        if backend != "direct":
            raise ValueError(f'service_backend must be "direct" or "ray", got {service_backend!r}.')
        if transform is not None and transform_factory is not None:
            raise TypeError("pass either transform or transform_factory, not both.")
        if batch_size is not None:
            _check_batch_size(batch_size)
        if prefetch is not None and (not isinstance(prefetch, int) or prefetch < 0):
            raise ValueError(f"prefetch must be an int >= 0 or None, got {prefetch!r}.")
        if consume_after_n_samples is not None and (
            not isinstance(consume_after_n_samples, int) or consume_after_n_samples <= 0
        ):
            raise ValueError(
                f"consume_after_n_samples must be a positive int or None, got {consume_after_n_samples!r}."
            )
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}.")
        self._args = {
            "storage": storage, "sampler": sampler, "writer": writer,
            "transform": transform, "transform_factory": transform_factory,
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
        self._service_backend_options = service_backend_options
        self._alive = True
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._executor: ThreadPoolExecutor | None = None
        self._futures: deque[Future] = deque()
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
        self._storage: Storage = _build(args["storage"], Storage, lambda: ListStorage(1000), "storage")
        self._sampler: Sampler = _build(args["sampler"], Sampler, RandomSampler, "sampler")
        self._writer: Writer = _build(args["writer"], Writer, self._make_writer, "writer")
        self._writer.register_storage(self._storage)
        self._sampler.set_rng(self._generator)
        self._sampler.set_consume_after_n(self._consume_after_n)
        transform = args["transform"] if args["transform_factory"] is None else args["transform_factory"]()
        self._transform = transform if isinstance(transform, Compose) else (
            Compose() if transform is None else Compose(transform)
        )
        self._collate_fn = self._collate_arg or self._default_collate()
        if self._shared:
            _buffer_io.share(self)
        self._initialized = True

    def _make_writer(self) -> Writer:
        return self._default_writer(compilable=self._compilable)

    def _default_collate(self) -> Callable[[Any], Any]:
        if isinstance(self._storage, LazyStackStorage):
            return _identity
        if isinstance(self._storage, ListStorage):
            return _collate_list
        return _identity

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
        return self.writer.write_count

    @property
    def service_backend(self) -> str:
        """The deployment backend of this replay buffer."""
        return self._service_backend

    @property
    def is_alive(self) -> bool:
        """Whether this direct replay buffer remains available."""
        return self._alive

    def set_storage(self, storage: Storage, collate_fn: Callable | None = None) -> Storage:
        """Set a new storage and return the previous one."""
        with self._lock:
            self._init()
            prev, self._storage = self._storage, storage
            self._writer.register_storage(storage)
            self._collate_arg = collate_fn
            self._collate_fn = collate_fn or self._default_collate()
            return prev

    def set_sampler(self, sampler: Sampler) -> Sampler:
        """Set a new sampler and return the previous one."""
        with self._lock:
            self._init()
            prev, self._sampler = self._sampler, sampler
            sampler.set_rng(self._generator)
            sampler.set_consume_after_n(self._consume_after_n)
            return prev

    def set_writer(self, writer: Writer) -> Writer:
        """Set a new writer and return the previous one."""
        with self._lock:
            self._init()
            prev, self._writer = self._writer, writer
            writer.register_storage(self._storage)
            return prev

    def append_transform(self, transform: Transform | Callable, *, invert: bool = False) -> ReplayBuffer:
        """Append a transform (``invert=True``: run it on writes, its inverse on reads)."""
        self.transform.append(as_transform(transform, invert=invert))
        return self

    def insert_transform(
        self, index: int, transform: Transform | Callable, *, invert: bool = False
    ) -> ReplayBuffer:
        """Insert a transform at ``index`` (``invert`` as in :meth:`append_transform`)."""
        self.transform.insert(index, as_transform(transform, invert=invert))
        return self

    def policy_age_filters(self) -> list[PolicyAgeFilter]:
        """The :class:`PolicyAgeFilter` instances of the transform chain."""
        return [t for t in self.transform.row_filters() if isinstance(t, PolicyAgeFilter)]

    def register_save_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a hook applied to the storage content before ``dumps``."""
        self.storage.register_save_hook(hook)

    def register_load_hook(self, hook: Callable[[Any], Any]) -> None:
        """Register a hook applied to the storage content after ``loads``."""
        self.storage.register_load_hook(hook)

    # -------------------------------------------------------------- writing
    def _prepare(self, data: Any, *, move_dim: bool = True) -> Any:
        if isinstance(self.storage, ListStorage):
            return data if isinstance(data, (list, TensorDictBase, torch.Tensor)) else list(data)
        if isinstance(data, list):
            data = torch.stack(data) if isinstance(data[0], (torch.Tensor, TensorDictBase)) else (
                torch.as_tensor(data)
            )
        if move_dim and self.dim_extend > 0:
            data = data.movedim(self.dim_extend, 0) if isinstance(data, torch.Tensor) else (
                data.transpose(self.dim_extend, 0) if isinstance(data, TensorDictBase) else
                tree_map(lambda t: t.movedim(self.dim_extend, 0), data)
            )
        return data

    def add(self, data: Any) -> int:
        """Add a single element and return the index where it lives."""
        self._init()
        if isinstance(self._storage, ListStorage) and not isinstance(self._storage, LazyStackStorage):
            with self._cond:
                data = self._transform.inv(data)
                index = self._writer.add(data)
                self._sampler.add(index)
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
            if _is_empty(data):
                return torch.empty(0, dtype=torch.long)
            index = self._writer.extend(data)
            written = index[index >= 0] if index.numel() else index
            self._sampler.extend(written)
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
                    f"cannot sample from an empty buffer (size 0, capacity {self._storage.max_size}); "
                    "extend it first."
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

    def _fetch(self, index: torch.Tensor, info: dict[str, Any], *, keep_info: bool | None = None) -> Any:
        """Gather the records of ``index`` (a copy), attach ``info`` and run the transforms."""
        with self._lock:  # a write must not tear the rows being gathered
            data = self._storage.get(index.reshape(-1))
        if isinstance(self._storage, ListStorage) and not isinstance(self._storage, LazyStackStorage):
            data = self._collate_fn(data)
        if index.ndim > 1 and isinstance(data, (torch.Tensor, TensorDictBase)):
            data = data.reshape(*index.shape, *data.shape[1:]) if isinstance(data, torch.Tensor) else (
                data.reshape(*index.shape)
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
            data = data.pin_memory() if hasattr(data, "pin_memory") else tree_map(
                lambda t: t.pin_memory(), data
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
        if batch_size is None:
            if self._batch_size is None:
                raise ValueError(
                    "batch_size was not given to sample() and the buffer has no default; pass "
                    "batch_size=... to sample() or to the constructor."
                )
            return self._batch_size
        return _check_batch_size(batch_size)

    def _sample_once(self, batch_size: int) -> tuple[Any, dict[str, Any]]:
        index, info = self._sample_index(batch_size)
        return self._fetch(index, info, keep_info=self._keeps_info or None), info

    def _next_prefetched(self) -> tuple[Any, dict[str, Any]]:
        batch_size = self._resolve_batch_size(None)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rbdata-prefetch")
        while len(self._futures) < self._prefetch + 1:
            self._futures.append(self._executor.submit(self._sample_once, batch_size))
        data, info = self._futures.popleft().result()
        if self._transform.filters_rows:
            data = self._refilter(data)
        return data, info

    def __iter__(self) -> Iterator[Any]:
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
        return len(self.storage) if self._initialized else 0

    def __getitem__(self, index: Any) -> Any:
        data = self.storage.get(index)
        if isinstance(self._storage, ListStorage) and not isinstance(index, int) and isinstance(data, list):
            data = self._collate_fn(data)
        return self._transform(data) if len(self._transform) else data

    def __setitem__(self, index: Any, data: Any) -> None:
        with self._cond:
            self.storage.set(index, data)
            self._cond.notify_all()

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
            self._cond.notify_all()

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Wait (without busy-looping) until ``predicate()`` holds or ``timeout`` seconds pass."""
        with self._cond:
            return self._cond.wait_for(predicate, timeout)

    # ------------------------------------------------------------ updating
    def update_priority(
        self, index: torch.Tensor | int, priority: torch.Tensor | float, *,
        generation: torch.Tensor | None = None,
    ) -> None:
        """Update the priorities of ``index`` (skipping slots rewritten since ``generation``)."""
        index = torch.as_tensor(index, dtype=torch.long).reshape(-1)
        priority = torch.as_tensor(priority, dtype=torch.float64).reshape(-1)
        if priority.numel() == 1 and index.numel() != 1:
            priority = priority.expand(index.numel())
        if priority.numel() != index.numel():
            raise ValueError(
                f"priority has {priority.numel()} entries, expected one per index ({index.numel()})."
            )
        if not bool(torch.isfinite(priority).all()) or bool((priority < 0).any()):
            bad = priority[~torch.isfinite(priority) | (priority < 0)][:5].tolist()
            raise ValueError(f"priorities must be finite and >= 0, got {bad}.")
        with self._lock:
            if generation is not None and getattr(self.writer, "_generations", None) is not None:
                live = self._writer.generation(index) == torch.as_tensor(generation).reshape(-1)
                self._skipped_priority_updates += int((~live).sum())
                index, priority = index[live], priority[live]
            if not isinstance(self.sampler, _prioritized_types()):
                return
            self._sampler.update_priority(index, priority)

    def update_if_present(
        self, *, index: torch.Tensor, generation: torch.Tensor,
        patch: Mapping[Any, torch.Tensor] | TensorDictBase,
        version_key: Any = None, version: int | torch.Tensor | None = None,
        require_newer: bool = False,
    ) -> ConditionalUpdateResult:
        """Patch the records whose (index, generation) is still live (see the reference doc)."""
        with self._lock:
            self._init()
            return conditional_update(
                self._storage, self._writer, index=index, generation=generation, patch=patch,
                version_key=version_key, version=version, require_newer=require_newer,
            )

    def set_(self, key: Any, value: torch.Tensor) -> ReplayBuffer:
        """Set the value of ``key`` across the whole buffer in place."""
        with self._lock:
            leaf = self._leaf(key)
            leaf[: len(self._storage)] = torch.as_tensor(value).to(leaf.dtype)
        return self

    def set_at_(self, key: Any, value: torch.Tensor, index: Any) -> ReplayBuffer:
        """Set the value of ``key`` at ``index`` in place."""
        with self._lock:
            leaf = self._leaf(key)
            leaf[index] = torch.as_tensor(value).to(leaf.dtype)
        return self

    def update_(
        self, input_dict_or_td: Mapping[Any, torch.Tensor] | TensorDictBase, clone: bool = False,
        *, keys_to_update: Any = None,
    ) -> ReplayBuffer:
        """Update stored entries in place from a dict or TensorDict covering the buffer."""
        src = input_dict_or_td
        items = src.items(True, True) if isinstance(src, TensorDictBase) else src.items()
        wanted = None if keys_to_update is None else {normalize_key(k, "keys_to_update") for k in keys_to_update}
        for key, value in items:
            if wanted is None or key in wanted:
                self.set_(key, value.clone() if clone else value)
        return self

    def _leaf(self, key: Any) -> torch.Tensor:
        self._init()
        if not hasattr(self._storage, "get_leaf"):
            raise RuntimeError(f"{type(self._storage).__name__} does not support per-key updates.")
        key = normalize_key(key, "key")
        if key not in set(self._storage.leaf_keys()):
            raise KeyError(f"key {key!r} is not stored; stored keys are {self._storage.leaf_keys()}.")
        return self._storage.get_leaf(key)

    def query(self, predicate: Callable | None = None, *, trajectory_key: Any = None) -> list:
        """Return the stored trajectories matching ``predicate``, oldest first."""
        from rbdata.query import run_query

        with self._lock:
            self._init()
            return run_query(
                self._storage, transform=self._transform, cursor=getattr(self._writer, "cursor", 0),
                predicate=predicate, trajectory_key=trajectory_key,
            )

    # ------------------------------------------------------- state and stats
    def stats(self) -> dict[str, int | float | bool]:
        """A cheap, serializable snapshot of the buffer's operational state."""
        if not self._initialized:
            out: dict[str, Any] = {"size": 0, "write_count": 0, "prefetch_queue_size": 0, "initialized": False}
            storage = self._args["storage"]
            if isinstance(storage, Storage):
                out.update(capacity=storage.max_size, utilization=0.0)
            return out
        size = len(self._storage)
        out = {
            "size": size, "write_count": self._writer.write_count,
            "prefetch_queue_size": len(self._futures), "initialized": True,
            "capacity": self._storage.max_size, "utilization": size / self._storage.max_size,
            "skipped_priority_updates": self._skipped_priority_updates,
        }
        for source in list(self._stats_sources):
            out.update(source())
        return out

    def state_dict(self) -> dict[str, Any]:
        """The buffer's full state (content included) under fixed keys."""
        return _buffer_io.state_dict(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (validated first; unchanged on error)."""
        _buffer_io.load_state_dict(self, state_dict)

    def dumps(self, path: str | os.PathLike) -> None:
        """Save the buffer atomically in the directory ``path``."""
        _buffer_io.dumps(self, path)

    def loads(self, path: str | os.PathLike) -> None:
        """Load a buffer saved with :meth:`dumps` (validated; unchanged on error)."""
        _buffer_io.loads(self, path)

    def dump(self, *args: Any, **kwargs: Any) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(*args, **kwargs)

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Alias for :meth:`dumps`."""
        self.dumps(*args, **kwargs)

    def load(self, *args: Any, **kwargs: Any) -> None:
        """Alias for :meth:`loads`."""
        self.loads(*args, **kwargs)

    # ------------------------------------------------------------ lifecycle
    def start(self) -> ReplayBuffer:
        """Return this already-started direct replay buffer."""
        return self

    def client(self) -> ReplayBuffer:
        """Return self for the zero-overhead direct backend."""
        return self

    def _drain_prefetch(self) -> None:
        for future in self._futures:
            future.cancel()
        self._futures.clear()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop the prefetch thread and mark this buffer as shut down."""
        self._drain_prefetch()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        self._alive = False

    close = shutdown

    def __enter__(self) -> ReplayBuffer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __getstate__(self) -> dict[str, Any]:
        return _buffer_io.getstate(self)

    def __setstate__(self, state: dict[str, Any]) -> None:
        _buffer_io.setstate(self, state)

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
            f"{type(self._writer).__name__}, size={len(self._storage)}, batch_size={self._batch_size})"
        )


def _prioritized_types() -> tuple[type, ...]:
    from rbdata.samplers import PrioritizedSliceSampler

    return (PrioritizedSampler, PrioritizedSliceSampler)


def _is_empty(data: Any) -> bool:
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data.shape[0] == 0 if data.ndim else False
    if isinstance(data, list):
        return len(data) == 0
    return False


def _collate_list(items: list[Any]) -> Any:
    if items and isinstance(items[0], TensorDictBase):
        return torch.stack(items)
    return default_collate(items)


class TensorDictReplayBuffer(ReplayBuffer):
    """A replay buffer of TensorDicts whose samples carry ``index`` (and generations).

    Keyword Args:
        priority_key: the entry holding new priorities (used by prioritized subclasses).
        **kwargs: the :class:`ReplayBuffer` arguments; the default writer is
            :class:`TensorDictRoundRobinWriter`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, batch_size=[10]))
        >>> sorted(rb.sample().keys())
        ['index', 'obs']
    """

    _default_writer = TensorDictRoundRobinWriter
    _keeps_info = True

    def __init__(self, *, priority_key: Any = "td_error", **kwargs: Any) -> None:
        self.priority_key = priority_key
        super().__init__(**kwargs)

    def _prepare(self, data: Any) -> Any:
        data = super()._prepare(data)
        if isinstance(data, TensorDictBase):
            stale = [k for k in INFO_KEYS if k in data.keys()]
            if stale:
                data = data.exclude(*stale)
        return data

    def update_tensordict_priority(self, data: TensorDictBase) -> None:
        """Update priorities from a sampled batch (``index``, ``priority_key``, generations)."""
        priority = data.get(self.priority_key, None)
        if priority is None:
            raise KeyError(
                f"priority_key {self.priority_key!r} not found in the batch; keys are "
                f"{sorted(map(str, data.keys(True, True)))}."
            )
        index = data.get("index")
        if priority.ndim > index.ndim:
            priority = priority.reshape(*index.shape, -1).amax(-1)
        self.update_priority(index, priority, generation=data.get("index_generation", None))


class PrioritizedReplayBuffer(ReplayBuffer):
    """A replay buffer with proportional prioritized sampling.

    Keyword Args:
        alpha: the priority exponent (probability ∝ priority**alpha).
        beta: the importance-weight exponent.
        eps: added to priorities.
        dtype: dtype of the priority tree.
        **kwargs: the :class:`ReplayBuffer` arguments (except ``sampler``).

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, PrioritizedReplayBuffer
        >>> rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
        >>> _ = rb.extend(torch.arange(10))
        >>> sample, info = rb.sample(4, return_info=True)
        >>> rb.update_priority(info["index"], torch.ones(4))
    """

    def __init__(
        self, *, alpha: float, beta: float, eps: float = 1e-8, dtype: torch.dtype = torch.float,
        storage: Storage | None = None, **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError(f"{type(self).__name__} builds its own PrioritizedSampler; do not pass sampler.")
        storage = storage if storage is not None else ListStorage(1000)
        kwargs["sampler"] = PrioritizedSampler(storage.max_size, alpha, beta, eps, dtype)
        super().__init__(storage=storage, **kwargs)


class TensorDictPrioritizedReplayBuffer(TensorDictReplayBuffer):
    """A prioritized buffer of TensorDicts; samples carry ``index`` and ``_weight``.

    Keyword Args:
        alpha: the priority exponent.
        beta: the importance-weight exponent.
        priority_key: entry read by ``extend`` and :meth:`update_tensordict_priority`.
        eps: added to priorities.
        dtype: dtype of the priority tree.
        reduction: how duplicate indices in one priority update combine.
        **kwargs: the :class:`ReplayBuffer` arguments (except ``sampler``).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
        >>> rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5,
        ...     storage=LazyTensorStorage(10), batch_size=4)
        >>> _ = rb.extend(TensorDict({"obs": torch.zeros(10, 3)}, [10]))
        >>> batch = rb.sample()
        >>> batch.set("td_error", torch.rand(4)).get("_weight").shape
        torch.Size([4])
        >>> rb.update_tensordict_priority(batch)
    """

    def __init__(
        self, *, alpha: float, beta: float, priority_key: Any = "td_error", eps: float = 1e-8,
        dtype: torch.dtype = torch.float, storage: Storage | None = None, reduction: str = "max",
        **kwargs: Any,
    ) -> None:
        if "sampler" in kwargs:
            raise TypeError(f"{type(self).__name__} builds its own PrioritizedSampler; do not pass sampler.")
        storage = storage if storage is not None else ListStorage(1000)
        kwargs["sampler"] = PrioritizedSampler(storage.max_size, alpha, beta, eps, dtype, reduction=reduction)
        super().__init__(priority_key=priority_key, storage=storage, **kwargs)

    def _after_extend(self, data: Any, index: torch.Tensor, update_priority: bool | None) -> None:
        if update_priority is False or not isinstance(data, TensorDictBase):
            return
        priority = data.get(self.priority_key, None)
        if priority is None:
            return
        if priority.ndim > 1:
            priority = priority.reshape(priority.shape[0], -1).amax(-1)
        keep = index >= 0
        self.update_priority(index[keep], priority[keep])


_ = TensorDict  # re-exported type used in docstrings
