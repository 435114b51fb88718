"""A buffer's components: their properties and replacement (mixed into ReplayBuffer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from rbdata.sample_units import SampleUnit
from rbdata.samplers import Sampler
from rbdata.storages import Storage
from rbdata.transforms import Compose, PolicyAgeFilter, Transform, as_transform
from rbdata.writers import Writer

if TYPE_CHECKING:
    from rbdata.buffers.replay import ReplayBuffer


class _BufferComponents:
    """Storage, sampler, writer, transforms and settings: read, replace, extend."""

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
            return self._remote.batch_size  # type: ignore[no-any-return]
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
        if self._remote is not None:
            return int(self._remote.write_count)
        return self.writer.write_count

    @property
    def service_backend(self) -> str:
        """The deployment backend of this replay buffer."""
        return self._service_backend

    @property
    def is_alive(self) -> bool:
        """Whether this replay buffer remains available."""
        if self._remote is not None:
            return bool(self._remote.is_alive)
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

    @property
    def generator(self) -> torch.Generator | None:
        """The generator used for sampling (None: torch's global RNG)."""
        return self._generator

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Use ``generator`` for sampling from now on (None: torch's global RNG)."""
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"generator must be a torch.Generator or None, got {type(generator).__name__}."
            )
        with self._lock:
            self._generator = generator
            if self._initialized:
                self._sampler.set_rng(generator)

    def set_writer(self, writer: Writer) -> Writer:
        """Set a new writer and return the previous one."""
        with self._lock:
            self._init()
            prev, self._writer = self._writer, writer
            writer.register_storage(self._storage)
            return prev

    def append_transform(
        self, transform: Transform | Callable, *, invert: bool = False
    ) -> ReplayBuffer:
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
