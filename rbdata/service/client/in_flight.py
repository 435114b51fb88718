"""A client's requests in flight: groups of replies asked ahead, draws, slot sizes, ordering.

The helpers :class:`~rbdata.service.client.buffer_client.RayBufferClient` uses
for the batches it keeps in flight and the state it saves of them.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from rbdata._component.prefetch_state import draw_record, read_draw_records
from rbdata.buffers.protocol import Draw
from rbdata.service import runtime
from rbdata.service.transport.messages import DRAW_GROUP

__all__ = [
    "Group",
    "as_draw",
    "draws_from_state",
    "draw_state",
    "forget_ring",
    "in_order",
    "slot_size",
]


@dataclass
class Group:
    """Replies requested ahead: groups in flight (refs) and replies received, not handed out."""

    inflight: deque[Any] = field(default_factory=deque)
    replies: deque[Any] = field(default_factory=deque)

    def __bool__(self) -> bool:
        return bool(self.inflight or self.replies)


def slot_size(nbytes: int) -> int:
    """Slot bytes for replies of ``nbytes``: room for their info entries, whole pages."""
    return -(-(nbytes + nbytes // 16 + 65536) // 4096) * 4096


def as_draw(reply: tuple[Any, ...]) -> tuple[Draw, Any]:
    """``(Draw, batch)`` from a draw_gather reply; the draw's tensors are copies (small)."""
    index, info, ends_pass, batch = reply
    info = {k: v.clone() for k, v in info.items()}
    return Draw(index.clone(), info, bool(ends_pass)), batch


def draw_state(draw: Draw) -> dict[str, Any]:
    """A draw asked ahead, saved as the loader saves its pending draws (one format)."""
    return draw_record(draw.index, draw.info, draw.ends_pass)


def draws_from_state(state: Any) -> list[Draw]:
    """The draws :func:`draw_state` saved (ValueError for anything else)."""
    return [Draw(*record) for record in read_draw_records(state, "sampling state['ahead']")]


def forget_ring(actor: Any, path: str) -> None:
    """Tell the actor a client's ring is no longer needed (best effort: it may be gone)."""
    ray = runtime.ray_module()
    if ray.is_initialized():  # at exit Ray may be down: never start it again for this
        with contextlib.suppress(Exception):
            actor.close_ring.remote(path)


def in_order(method: Any) -> Any:
    """An owner method run in its draws group: draws kept in flight are served in order."""
    return method.options(concurrency_group=DRAW_GROUP)
