"""The owner's side of writes through shared memory: rows read from a client's write slot.

See :mod:`rbdata.service.client.write_slots`. The owner maps each client's
write ring; a ``call_in_slot`` names a slot and its layout, the owner reads
the call's arguments as views of that slot, runs the call, and marks the
slot free. A hosted tensor storage copies the rows into its own memory, so
the views serve as they are; any other storage (a list storage keeps the
objects it is given) gets a private copy of the slot's bytes first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rbdata.service.transport.codec import Packed, unpack
from rbdata.sharing.slot_ring import SlotRing, SlotRings
from rbdata.storages import TensorStorage

__all__ = ["WriteRings"]


class WriteRings(SlotRings):
    """The write rings of this owner's clients, by path.

    Examples:
        >>> import torch
        >>> from rbdata.service.transport.codec import encode_into
        >>> client = SlotRing.create(slots=1, slot_bytes=4096)
        >>> rings = WriteRings()
        >>> rings.attach(str(client.path), 1, 4096); client.unlink()
        >>> slot = client.acquire()
        >>> packed = encode_into((torch.arange(3),), client.memory(slot))
        >>> rings.run(str(client.path), slot, packed, copy=True, call=lambda x: x.tolist())
        [0, 1, 2]
        >>> client.in_use()  # the owner freed the slot
        0
        >>> rings.close_all(); client.close()
    """

    def attach(self, path: str, slots: int, slot_bytes: int) -> None:
        """Map the write ring a client created at ``path``."""
        self._rings[path] = SlotRing.attach(path, slots, slot_bytes)

    def run(
        self, path: str, slot: int, packed: Packed, *, copy: bool, call: Callable[..., Any]
    ) -> Any:
        """``call(*args)`` with the arguments laid out in ``slot``; the slot is free after."""
        ring = self._rings[path]
        try:
            memory = ring.memory(slot)
            if copy:
                used = max(
                    (o + s for o, s in zip(packed.offsets, packed.sizes, strict=True)), default=0
                )
                memory = memory[:used].clone()
            return call(*unpack(packed, memory))
        finally:
            ring.release(slot)


def copies_on_write(buffer: Any) -> bool:
    """Whether ``buffer``'s storage copies written rows (then slot views serve as they are)."""
    return isinstance(buffer.storage, TensorStorage)
