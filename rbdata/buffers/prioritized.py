"""PrioritizedReplayBuffer: proportional prioritized sampling over any storage."""

from __future__ import annotations

from typing import Any, cast

import torch

from rbdata.buffers.replay import ReplayBuffer
from rbdata.samplers import PrioritizedSampler, RandomSampler
from rbdata.sharing.counters import spawning
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


class _PrioritySync:
    """torchrl's ``sync=``: with ``sync=False`` writer processes sample uniformly.

    The priority tree stays in the process that built the buffer (the
    learner). A child process started with the buffer (``Process(args=...)``)
    receives a :class:`RandomSampler` in its place, writes without priorities,
    and the learner gives the items it wrote the default priority when it
    next samples (it follows the shared write count). With ``sync=True`` the
    prioritized sampler cannot be sent to a child process.
    """

    _sync_priorities = True

    def _check_sync(self, sync: bool, storage: Storage) -> None:
        if not isinstance(sync, bool):
            raise TypeError(f"sync must be a bool, got {type(sync).__name__}.")
        if not sync and storage.ndim != 1:
            raise ValueError(
                f"{type(self).__name__} only supports 1-D storages when sync=False, got "
                f"storage.ndim={storage.ndim}."
            )
        self._sync_priorities = sync

    @property
    def prioritized_sampler(self) -> PrioritizedSampler:
        """The sampler that owns the priority tree (RuntimeError in a ``sync=False`` writer)."""
        sampler = cast(ReplayBuffer, self).sampler
        if not isinstance(sampler, PrioritizedSampler):
            raise RuntimeError(
                f"{type(self).__name__} cannot sample with prioritized replay in a writer "
                "process of a sync=False buffer: its priorities live in the learner."
            )
        return sampler

    @property
    def _prioritized_sampler_write_count(self) -> int:
        """The writes (by any process) the priority tree was told about."""
        return int(cast(Any, self)._feed.seen)

    def __getstate__(self) -> dict[str, Any]:
        state: dict[str, Any] = cast(Any, super()).__getstate__()
        if not self._sync_priorities and spawning():
            state["_sampler"] = RandomSampler()
            state["_args"] = {**state["_args"], "sampler": state["_sampler"]}
        return state


class PrioritizedReplayBuffer(_PrioritySync, ReplayBuffer):
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
        self._check_sync(sync, storage)
        super().__init__(storage=storage, **kwargs)
