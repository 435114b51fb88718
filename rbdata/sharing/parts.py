"""Checks and moves of a buffer's other parts when it is shared (prefetch, transforms)."""

from __future__ import annotations

from typing import Any

from rbdata.sharing.components import SharesMemory

__all__ = ["check_shared_prefetch", "share_transform"]


def check_shared_prefetch(shared: bool, prefetch: int | None) -> None:
    """ValueError for ``shared=True`` with ``prefetch`` (a thread's batches cannot be shared)."""
    if shared and prefetch:
        raise ValueError(
            f"Cannot share prefetched replay buffers: got shared=True with prefetch={prefetch}; "
            "pass prefetch=0 or shared=False."
        )


def share_transform(transform: Any) -> None:
    """Move a transform's write state to shared memory (each of a Compose's).

    A plain callable keeps no write state: only a transform with a
    ``share_memory_()`` (:class:`~.components.SharesMemory`, as every
    :class:`~rbdata.transforms.Transform`) has some to move.

    Raises:
        RuntimeError: for a transform that keeps write state
            (``requires_shared_write_state``) but has no ``share_memory_()``.
    """
    if isinstance(transform, SharesMemory):
        transform.share_memory_()
