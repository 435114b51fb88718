"""Writes through shared memory: a collector's batch laid out in a slot, only its layout sent.

A call argument of half a megabyte costs a Ray round trip through the object
store (a copy into it, a copy out). On the actor's node the client instead
keeps a :class:`~rbdata.sharing.slot_ring.SlotRing` of its own, which
the owner maps too: ``extend``/``add`` lay their data out in a free slot
(:func:`~rbdata.service.transport.codec.encode_into`, one copy), send the
slot's number and layout, and the owner writes the rows straight from the
slot into its storage, then marks the slot free. The client sets a slot's
flag, the owner clears it: one writer per transition, as for the read slots.

The ring opens after the first write big enough for it
(:data:`~rbdata.service.transport.messages.SLOT_MIN_BYTES`), with slots
sized for it; a write that does not fit, finds no free slot, or comes from
another node travels as a call argument, as before.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any

from rbdata.service import runtime
from rbdata.service.surface import WRITE_CALLS
from rbdata.service.transport.codec import Payload, encode_into
from rbdata.service.transport.messages import SLOT_MIN_BYTES, WRITE_GROUP
from rbdata.sharing.slot_ring import SlotRing

__all__ = ["WriteSlots"]

_SLOTS = 4  # writes of one client in flight at once (its threads)


class WriteSlots:
    """One client's write ring (see the module docstring); per process, not pickled.

    Examples:
        Off the actor's node (or before a big write) nothing goes through a slot:

        >>> import torch
        >>> from rbdata.service.transport.codec import encode
        >>> slots = WriteSlots()
        >>> slots.submit(None, "extend", (torch.zeros(4),), encode({})) is None
        True
    """

    def __init__(self) -> None:
        self._ring: SlotRing | None = None
        self._tried = False
        self._lock = threading.Lock()

    def submit(self, actor: Any, name: str, args: tuple[Any, ...], kwargs: Payload) -> Any:
        """Send ``actor.call_in_slot`` for ``name(*args)`` through a slot; None if it cannot."""
        ring = self._ring
        if ring is None or name not in WRITE_CALLS:
            return None
        slot = ring.acquire()
        if slot is None:
            return None
        try:
            packed = encode_into(args, ring.memory(slot))
        except BaseException:
            ring.release(slot)
            raise
        if packed is None:  # bigger than a slot
            ring.release(slot)
            return None
        call = actor.call_in_slot.options(concurrency_group=WRITE_GROUP)
        return call.remote(name, str(ring.path), slot, packed, kwargs)

    def consider(self, actor: Any, node_id: str, name: str, args: Payload) -> None:
        """After a write sent as an argument: open the ring if it was big and the actor is near."""
        if self._tried or name not in WRITE_CALLS or args.nbytes < SLOT_MIN_BYTES:
            return
        with self._lock:
            if self._tried:
                return
            self._tried = True
            ray = runtime.ray_module()
            if ray.get_runtime_context().get_node_id() != node_id or not SlotRing.available():
                return
            slot_bytes = -(-(2 * args.nbytes + 65536) // 4096) * 4096  # room to grow, pages
            ring = SlotRing.create(_SLOTS, slot_bytes)
            try:
                runtime.get(
                    actor.attach_write_ring.remote(str(ring.path), _SLOTS, slot_bytes),
                    "attach_write_ring",
                )
            finally:
                ring.unlink()  # both sides map it (or the owner failed): the name can go
            self._ring = ring
            weakref.finalize(self, _forget_write_ring, actor, str(ring.path))

    def close(self) -> None:
        """Drop this side's mapping (the owner keeps its own until it forgets the ring)."""
        if self._ring is not None:
            self._ring.close()
            self._ring = None


def _forget_write_ring(actor: Any, path: str) -> None:
    """Tell the actor a client's write ring is gone (best effort: it may be gone too)."""
    ray = runtime.ray_module()
    if ray.is_initialized():  # at exit Ray may be down: never start it again for this
        with contextlib.suppress(Exception):
            actor.close_write_ring.remote(path)
