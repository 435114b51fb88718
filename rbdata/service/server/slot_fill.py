"""Replies in shared-memory slots: batches read straight into a slot by the buffer itself.

For a client on its node the owner keeps a :class:`~rbdata.sharing.slot_ring.SlotRing`.
A reply that carries a batch takes a free slot first, then runs the hosted
buffer's own ``sample``/``gather`` inside ``buffer.reading_into(slot)``: the
storage gathers the batch's rows into the slot (one pass over their bytes,
for storages that can: :meth:`~rbdata.storages.Storage.read_into`), and
collation, info entries, transforms and row filters run as in any other read.
:func:`~rbdata.service.transport.codec.encode_into` then lays the reply out in
the slot, leaving in place the tensors that already view it and copying the
rest (a transform's output, the info entries) after them. Only the slot's
number and the layout travel through Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rbdata.service.transport.codec import encode, encode_into
from rbdata.service.transport.messages import SLOT_MIN_BYTES, InSlot, Reply
from rbdata.sharing.slot_ring import SlotRing, SlotRings

__all__ = ["SlotReplies"]


class SlotReplies(SlotRings):
    """The owner's rings (one per client on its node) and the replies written into them.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.service.server.slot_fill import SlotReplies
        >>> from rbdata.sharing.slot_ring import SlotRing, SlotRings
        >>> from rbdata.service.transport.codec import unpack
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(1000))
        >>> _ = rb.extend(TensorDict({"obs": torch.ones(1000, 64)}, [1000]))
        >>> replies = SlotReplies()
        >>> path = replies.open(slots=2, slot_bytes=1 << 20)
        >>> client = SlotRing.attach(path, 2, 1 << 20)
        >>> reply, _ = replies.reply(rb, path, lambda: rb.sample(256))
        >>> batch = unpack(reply.packed, client.view(reply.slot))
        >>> batch["obs"].shape, bool((batch["obs"] == 1).all())
        (torch.Size([256, 64]), True)
        >>> del batch; replies.close_all(); client.close()
    """

    def open(self, slots: int, slot_bytes: int) -> str:
        """Create a ring of ``slots`` slots of ``slot_bytes`` bytes; return its path."""
        ring = SlotRing.create(slots, slot_bytes)
        self._rings[str(ring.path)] = ring
        return str(ring.path)

    def attached(self, path: str) -> None:
        """The client mapped the ring at ``path``: remove the ring's name (it stays mapped)."""
        self._rings[path].unlink()

    def reply(
        self, buffer: Any, ring_name: str | None, produce: Callable[[], Any]
    ) -> tuple[Reply, Any]:
        """The reply of ``produce()`` (a read of ``buffer``), in a slot of ``ring_name`` if free.

        Returns:
            The reply, and the value it carries (to look at, not to keep: it may
            view the slot).
        """
        ring = None if ring_name is None else self._rings.get(ring_name)
        slot = None if ring is None else ring.acquire()
        if ring is None or slot is None:  # another node, or every slot held by the client
            value = produce()
            return encode(value), value
        memory = ring.memory(slot)
        try:
            with buffer.reading_into(memory):
                value = produce()
            packed = encode_into(value, memory)
            if packed is not None and packed.sizes[0] >= SLOT_MIN_BYTES:
                return InSlot(slot, packed), value
            # too big for a slot, or small enough to travel inline with Ray's answer: the
            # payload copies what views the slot (never the whole ring), then it is free again
            payload = encode(value)
        except BaseException:
            ring.release(slot)
            raise
        ring.release(slot)
        return payload, value
