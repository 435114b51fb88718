"""Recycled gather outputs: a batch's memory is reused once nothing references it.

Sampling a batch of large items (pixels) allocates a fresh multi-megabyte
tensor per batch. When that tensor is made on one thread (a prefetch thread)
and freed on another (the training loop), the allocator hands the memory back
to the kernel and faults it in again, page by page, on the next batch: a
few hundred page faults and a zero-fill per batch, on top of the copy itself.

:class:`_GatherPool` keeps the last few gather outputs and hands one out again
only when no tensor anywhere still uses its memory (the storage's reference
count says so: the batch, its leaves, views and numpy arrays made from them
all hold a reference). A batch a user keeps is therefore never overwritten;
it is simply not reused, and a new buffer is allocated instead. Memory that
was sent to another process (moved to shared memory) is never reused.

The pool keeps its buffers in the order they were last handed out. When it
is full and every buffer is in use, it forgets the one handed out longest ago
(whoever holds it keeps it) and keeps the new one: a batch kept for good
(a reference batch, the last batch of a log) thus leaves the pool after one
miss instead of shrinking it for the rest of the run, which would make
every batch of a prefetching loop a fresh allocation.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import torch

_MAX_BUFFERS = 4
_MAX_BYTES = 512 * 2**20
# Present in every torch release rbdata supports; without it nothing is recycled.
_use_count: Callable[[int], int] | None = getattr(torch._C, "_storage_Use_Count", None)


def _unused(buffer: torch.Tensor) -> bool:
    """Whether only the pool holds ``buffer``'s memory (the temporary storage object is 1).

    Memory moved to shared memory (a batch sent to another process) is never
    reused: the receiving process may still read it.
    """
    storage = buffer.untyped_storage()
    return _use_count is not None and _use_count(storage._cdata) == 2 and not storage.is_shared()


class _GatherPool:
    """Up to ``_MAX_BUFFERS`` gather outputs (``_MAX_BYTES`` in all), reused when unreferenced.

    Args:
        dtype: dtype of the gathered rows.
        device: device of the gathered rows.
    """

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self._dtype = dtype
        self._device = device
        self._buffers: list[torch.Tensor] = []
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, int]) -> torch.Tensor:
        """A tensor of ``shape`` that nothing else uses (its content is arbitrary)."""
        if _use_count is None:
            return torch.empty(shape, dtype=self._dtype, device=self._device)
        with self._lock:  # the alias returned holds the memory before another thread looks
            buffers = self._buffers
            for i in range(len(buffers) - 1, -1, -1):  # the most recent first: cache-warm
                buffer = buffers[i]
                if buffer.shape == shape and _unused(buffer):
                    buffers.append(buffers.pop(i))  # the most recently handed out last
                    return buffer.detach()  # an alias: cheaper than a view, holds the memory
            fresh = torch.empty(shape, dtype=self._dtype, device=self._device)
            self._keep(fresh)
            return fresh.detach()

    def _keep(self, fresh: torch.Tensor) -> None:
        """Pool ``fresh``, dropping buffers to make room: unused ones first, else the oldest."""
        buffers, size = self._buffers, fresh.untyped_storage().nbytes()
        if size > _MAX_BYTES:
            return
        while (
            len(buffers) >= _MAX_BUFFERS
            or size + sum(b.untyped_storage().nbytes() for b in buffers) > _MAX_BYTES
        ):
            unused = next((i for i, b in enumerate(buffers) if _unused(b)), 0)
            del buffers[unused]  # an in-use one is only forgotten: its holder keeps it
        buffers.append(fresh)
