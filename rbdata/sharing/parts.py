"""Checks and moves of a buffer's other parts when it is shared (prefetch, transforms)."""

from __future__ import annotations

from typing import Any

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

    Raises:
        RuntimeError: for a transform that keeps write state
            (``requires_shared_write_state``) but has no ``share_memory_()``.
    """
    parts = getattr(transform, "transforms", None)
    if parts is not None and not callable(getattr(transform, "share_memory_", None)):
        for part in parts:
            share_transform(part)
        return
    share_memory = getattr(transform, "share_memory_", None)
    if callable(share_memory):
        share_memory()
        return
    if getattr(transform, "requires_shared_write_state", False):
        raise RuntimeError(
            f"{type(transform).__name__} keeps replay-buffer write state but does not "
            "implement share_memory_(): a shared buffer cannot use it. Use a writer in one "
            "process, or a transform whose write state can be shared."
        )
