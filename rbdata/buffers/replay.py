"""ReplayBuffer: torchrl's replay-buffer API, put together from the buffer's parts.

Each part is one concept in its own module: components and their lifecycle
(``_components``), the write path (``_write_path``), the read path
(``_read_path``), indexing and in-place edits (``_indexing``), priority
updates (``_priority_updates``) and state (``_state``). The buffer holds no
data logic: the storage, sampler, writer, sample unit and transforms do.
"""

from __future__ import annotations

from rbdata.buffers._indexing import _Indexing
from rbdata.buffers._prefetch import _BatchPrefetcher
from rbdata.buffers._priority_updates import _PriorityUpdates
from rbdata.buffers._read_path import _ReadPath
from rbdata.buffers._state import _BufferState
from rbdata.buffers._write_path import _WritePath
from rbdata.buffers.shared_handle import _SharedHandle
from rbdata.samplers import Sampler
from rbdata.sharing.sync import _BufferSync

__all__ = ["ReplayBuffer"]


class ReplayBuffer(_WritePath, _ReadPath, _Indexing, _PriorityUpdates, _BufferState, _SharedHandle):
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
        copy._feed = self._feed.copy()
        copy._prefetcher = _BatchPrefetcher(0)
        copy._iterator = None
        copy._sampler = sampler
        sampler.set_consume_after_n(None)
        return copy
