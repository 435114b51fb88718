"""PrioritizedReplayBuffer: proportional prioritized sampling over any storage."""

from __future__ import annotations

from typing import Any

import torch

from rbdata.buffers._components import _Components
from rbdata.buffers.replay import ReplayBuffer
from rbdata.samplers import PrioritizedSampler
from rbdata.storages import ListStorage, Storage

__all__ = ["PrioritizedReplayBuffer"]


def with_prioritized_sampler(
    owner: str,
    kwargs: dict[str, Any],
    storage: Storage | None,
    sampler_device: torch.device | str | None = None,
    **sampler_args: Any,
) -> tuple[Storage, dict[str, Any]]:
    """Default the storage and add the PrioritizedSampler a prioritized buffer builds itself.

    Raises:
        TypeError: if ``kwargs`` already holds a sampler.
    """
    if kwargs.pop("sampler", None) is not None:
        raise TypeError(f"{owner} builds its own PrioritizedSampler; do not pass sampler.")
    storage = storage if storage is not None else ListStorage(1000)
    kwargs["sampler"] = PrioritizedSampler(storage.max_size, device=sampler_device, **sampler_args)
    return storage, kwargs


def check_sync(owner: str, sync: Any, storage: Storage) -> bool:
    """Torchrl's ``sync=`` of a prioritized buffer, checked (see :class:`PrioritizedReplayBuffer`).

    With ``sync=False`` writer processes sample uniformly: the priority tree
    stays in the process that built the buffer (the learner); a child process
    started with the buffer (``Process(args=...)``) receives a
    :class:`RandomSampler` in its place, writes without priorities, and the
    learner gives the items it wrote the default priority when it next samples
    (it follows the shared write count). With ``sync=True`` the prioritized
    sampler cannot be sent to a child process.

    Raises:
        TypeError: if ``sync`` is not a bool.
        ValueError: for ``sync=False`` with a storage of ``ndim > 1``.
    """
    if not isinstance(sync, bool):
        raise TypeError(f"sync must be a bool, got {type(sync).__name__}.")
    if not sync and storage.ndim != 1:
        raise ValueError(
            f"{owner} only supports 1-D storages when sync=False, got storage.ndim={storage.ndim}."
        )
    return sync


def writes_told(components: _Components) -> int:
    """The writes (by any process) the buffer's priority tree was told about."""
    return components.feed.seen


def prioritized_sampler_of(buffer: ReplayBuffer) -> PrioritizedSampler:
    """The sampler owning ``buffer``'s priority tree (RuntimeError in a ``sync=False`` writer)."""
    sampler = buffer.sampler
    if not isinstance(sampler, PrioritizedSampler):
        raise RuntimeError(
            f"{type(buffer).__name__} cannot sample with prioritized replay in a writer "
            "process of a sync=False buffer: its priorities live in the learner."
        )
    return sampler


class PrioritizedReplayBuffer(ReplayBuffer):
    """A replay buffer with proportional prioritized sampling.

    Keyword Args:
        alpha: the priority exponent (probability ∝ priority**alpha).
        beta: the importance-weight exponent.
        eps: added to priorities.
        dtype: dtype of the priority tree.
        sampler_device: where the priority tree lives (None: the storage's device).
        sync: False lets writer processes started with the buffer write without
            the priority tree (they sample uniformly); the learner gives their
            items the default priority when it next samples. Defaults to True.
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
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        sampler_device: torch.device | str | None = None,
        sync: bool = True,
        **kwargs: Any,
    ) -> None:
        storage, kwargs = with_prioritized_sampler(
            type(self).__name__,
            kwargs,
            storage,
            sampler_device,
            alpha=alpha,
            beta=beta,
            eps=eps,
            dtype=dtype,
        )
        sync = check_sync(type(self).__name__, sync, storage)
        super().__init__(storage=storage, **kwargs)
        self._components.sync_priorities = sync

    @property
    def prioritized_sampler(self) -> PrioritizedSampler:
        """The sampler that owns the priority tree (RuntimeError in a ``sync=False`` writer)."""
        return prioritized_sampler_of(self)

    @property
    def _prioritized_sampler_write_count(self) -> int:
        """The writes (by any process) the priority tree was told about."""
        return writes_told(self._components)
