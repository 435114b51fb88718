"""prefill_replay_buffer: seed a mutable buffer with samples of an offline dataset (torchrl's)."""

from __future__ import annotations

import os
from typing import Any, Protocol, TypeVar, runtime_checkable

from rbdata._component.checks import check_int, check_optional_int

__all__ = ["prefill_replay_buffer"]

_B = TypeVar("_B")


@runtime_checkable
class _Samplable(Protocol):
    """What ``prefill_replay_buffer`` draws from: a replay buffer (``sample`` and ``len``)."""

    def sample(self, batch_size: int) -> Any: ...

    def __len__(self) -> int: ...


#: the dataset-id prefixes torchrl's ``load_dataset`` reads (rbdata reads local copies only)
_PREFIXES = ("minari:", "d4rl:")


def prefill_replay_buffer(
    rb: _B, dataset: Any, n_samples: int | None = None, chunk_size: int = 1000
) -> _B:
    """Copy samples of an offline dataset into the mutable replay buffer ``rb``.

    A simpler alternative to :class:`~rbdata.OfflineToOnlineReplayBuffer`: one
    flat buffer, the offline data copied into it. As torchrl's, it draws
    ``min(n_samples, len(dataset))`` items (all of ``len(dataset)`` when
    ``n_samples`` is None) with ``dataset.sample`` in chunks of ``chunk_size``,
    so the copied items are drawn by the dataset's sampler.

    Args:
        rb: the buffer to seed (anything with ``extend``).
        dataset: a replay buffer to sample from, or a string naming local offline
            data: a path or a dataset id that :func:`rbdata.load_offline_data` reads
            (a ``"minari:"`` / ``"d4rl:"`` prefix is dropped; nothing is downloaded).
        n_samples: the most items to copy (None: ``len(dataset)``).
        chunk_size: items drawn and written per step (a positive int).

    Returns:
        ``rb``, extended in place.

    Raises:
        TypeError: for a ``dataset`` that is neither a buffer nor a str / path, or
            non-int ``n_samples`` / ``chunk_size``.
        ValueError: for ``n_samples < 0`` or ``chunk_size < 1``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer, prefill_replay_buffer
        >>> dataset = ReplayBuffer(storage=LazyTensorStorage(500))
        >>> _ = dataset.extend(TensorDict({"obs": torch.randn(500, 4)}, [500]))
        >>> online_rb = ReplayBuffer(storage=LazyTensorStorage(10_000))
        >>> _ = prefill_replay_buffer(online_rb, dataset, n_samples=200)
        >>> len(online_rb)
        200
    """
    n_samples = check_optional_int(n_samples, "n_samples", minimum=0)
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    if isinstance(dataset, str | os.PathLike):
        dataset = _local_dataset(dataset)
    if not isinstance(dataset, _Samplable):
        raise TypeError(
            f"dataset must be a replay buffer (with sample and len) or a str naming local "
            f"offline data, got {type(dataset).__name__}."
        )
    total = len(dataset) if n_samples is None else min(n_samples, len(dataset))
    copied = 0
    while copied < total:
        chunk = min(chunk_size, total - copied)
        rb.extend(dataset.sample(chunk))  # type: ignore[attr-defined]
        copied += chunk
    return rb


def _local_dataset(source: str | os.PathLike[str]) -> Any:
    """A buffer over the local offline data ``source`` names (see :func:`load_offline_data`)."""
    from rbdata.buffers.tensordict import TensorDictReplayBuffer
    from rbdata.datasets import load_offline_data
    from rbdata.storages import TensorStorage

    name = os.fspath(source)
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix) :]
    data = load_offline_data(name, progress=False)
    return TensorDictReplayBuffer(storage=TensorStorage(data))
