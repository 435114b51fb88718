"""PrioritizedReplayBuffer: proportional prioritized sampling over any storage."""

from __future__ import annotations

from typing import Any

import torch

from rbdata.buffers.replay import ReplayBuffer
from rbdata.samplers import PrioritizedSampler
from rbdata.storages import ListStorage, Storage

__all__ = ["PrioritizedReplayBuffer"]


def with_prioritized_sampler(
    owner: str, kwargs: dict[str, Any], storage: Storage | None, **sampler_args: Any
) -> tuple[Storage, dict[str, Any]]:
    """Default the storage and add the PrioritizedSampler a prioritized buffer builds itself.

    Raises:
        TypeError: if ``kwargs`` already holds a sampler.
    """
    if kwargs.pop("sampler", None) is not None:
        raise TypeError(f"{owner} builds its own PrioritizedSampler; do not pass sampler.")
    storage = storage if storage is not None else ListStorage(1000)
    kwargs["sampler"] = PrioritizedSampler(storage.max_size, **sampler_args)
    return storage, kwargs


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
        self,
        *,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        dtype: torch.dtype = torch.float,
        storage: Storage | None = None,
        **kwargs: Any,
    ) -> None:
        storage, kwargs = with_prioritized_sampler(
            type(self).__name__, kwargs, storage, alpha=alpha, beta=beta, eps=eps, dtype=dtype
        )
        super().__init__(storage=storage, **kwargs)
