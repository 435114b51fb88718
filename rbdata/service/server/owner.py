"""BufferOwner: the Ray actor that hosts one real rbdata buffer and serves its clients.

The actor runs its calls one at a time, in the order each caller sent them
(Ray's default for an actor), except :meth:`BufferOwner.wait_for_write`,
which runs in a concurrency group of its own so that a waiting client never
blocks a collector's ``extend``. Arguments and results travel as
:class:`~rbdata.service.transport.codec.Payload` objects (numpy buffers, no tensor
pickled by value); a batch for a client on this node goes into one of that
client's shared-memory slots when one is free (:mod:`rbdata.service.transport.slots`),
and only the slot's number travels.
"""

from __future__ import annotations

import pickle
from typing import Any

from tensordict import TensorDictBase

from rbdata.buffers import TensorDictReplayBuffer
from rbdata.buffers.protocol import Draw
from rbdata.service.client.surface import OWNER_CALLS, OWNER_READS
from rbdata.service.server.channels import OwnerChannels
from rbdata.service.server.slot_fill import Layouts, direct_sources, fill_slot
from rbdata.service.transport.channel import Wire
from rbdata.service.transport.codec import Packed, Payload, decode, encode, pack_into
from rbdata.service.transport.messages import (
    SLOT_MIN_BYTES,
    InSlot,
    Raised,
    Reply,
    ReturnsSelf,
)
from rbdata.service.transport.slots import SlotRing

__all__ = ["BufferOwner"]


class BufferOwner:
    """Hosts one buffer inside a Ray actor (see the module docstring); :meth:`build` makes it.

    The buffer arrives through a method rather than the constructor so that
    an error there reaches the caller as it was raised (Ray reports a failed
    actor constructor as a dead actor).

    Examples:
        >>> import pickle, torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> from rbdata.service.transport.codec import encode
        >>> from rbdata.service.server.owner import BufferOwner
        >>> owner = BufferOwner()
        >>> owner.build(pickle.dumps(ReplayBuffer(storage=LazyTensorStorage(10))), True, node=False)
        (None, None)
        >>> _ = owner.call("extend", encode((torch.arange(4),)), encode({}))
        >>> owner.read("write_count")
        4
    """

    def __init__(self) -> None:
        self._buffer: Any = None
        self._rings: dict[str, SlotRing] = {}
        self._layouts: Layouts = {}
        self._channels = OwnerChannels()

    def build(
        self, buffer: bytes, initialize: bool, node: bool = True
    ) -> tuple[str | None, int | None]:
        """Host the pickled ``buffer``; return this actor's node id and its batch size.

        Args:
            buffer: a direct buffer (what the Ray-backed buffer's construction copied),
                pickled (cloudpickle: components may be lambdas).
            initialize: build its components now (a bad one raises here).
            node: look the node id up (False outside Ray: None is returned for it).
        """
        self._buffer = pickle.loads(buffer)
        if initialize:
            _ = self._buffer.storage  # the property builds the components
        return (self.node_id() if node else None), self._buffer.batch_size

    # ------------------------------------------------------------ control
    def node_id(self) -> str:
        """The Ray node this actor runs on (clients on it use shared-memory slots)."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def call(self, name: str, args: Payload, kwargs: Payload) -> Payload:
        """Run ``buffer.<name>(*args, **kwargs)`` and return its result, encoded.

        Raises:
            ValueError: for a name the forwarded surface does not declare (``OWNER_CALLS``).
        """
        return encode(self._run(name, decode(args), decode(kwargs)))

    def read(self, name: str) -> Any:
        """The buffer's attribute ``name`` (``write_count``, ``batch_size``, ``len``...).

        Raises:
            ValueError: for a name the forwarded surface does not declare (``OWNER_READS``).
        """
        if name not in OWNER_READS:
            raise ValueError(
                f"the replay buffer's actor reads only {sorted(OWNER_READS)}, got {name!r}."
            )
        if name == "len":
            return len(self._buffer)
        if name == "filters_rows":
            return bool(self._buffer.transform.filters_rows)
        return getattr(self._buffer, name)

    def wait_for_write(self, write_count: int, timeout: float) -> int:
        """Wait up to ``timeout`` s for ``write_count`` to change; return the current count."""
        buffer = self._buffer
        buffer.wait_for_data(lambda: buffer.write_count != write_count, timeout)
        return int(buffer.write_count)

    # ------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None, ring: str | None) -> Reply:
        """``buffer.sample(batch_size, return_info=True)``, into a slot of ``ring`` if free."""
        buffer = self._buffer
        rows = buffer.batch_size if batch_size is None else batch_size
        keep_info = isinstance(buffer, TensorDictReplayBuffer)
        direct = self._direct(ring, rows)
        if direct is not None:
            sources, slot_ring, slot = direct
            try:
                draw = buffer.draw(rows)
                filled = None
                if len(draw):
                    memory = slot_ring.memory(slot)
                    filled = fill_slot(
                        buffer, sources, draw, memory, self._layouts, with_info=keep_info
                    )
            except BaseException:
                slot_ring.release(slot)
                raise
            if filled is not None:
                return InSlot(slot, Packed((filled.batch, filled.info), [0], [filled.nbytes]))
            slot_ring.release(slot)
            if len(draw):
                batch = buffer.gather(draw)
                if not keep_info and isinstance(batch, TensorDictBase):
                    batch = batch.exclude(*draw.info)
                return self._reply((batch, dict(draw.info)), ring)
        return self._reply(buffer.sample(batch_size, return_info=True), ring)

    def draw_gather(self, batch_size: int, ring: str | None) -> Reply:
        """Draw a batch and gather it: ``(index, info, ends_pass, batch)``, one reply."""
        return self._draw_gather(batch_size, ring)[0]

    def _draw_gather(self, batch_size: int, ring: str | None) -> tuple[Reply, bool]:
        """:meth:`draw_gather`'s reply, and whether the draw holds rows."""
        buffer = self._buffer
        direct = self._direct(ring, batch_size)
        if direct is None:
            values = self._draw_and_gather(batch_size)
            return self._reply(values, ring), values[3] is not None
        sources, slot_ring, slot = direct
        try:
            draw = buffer.draw(batch_size)  # direct_sources() saw a non-empty storage
            filled = None
            if len(draw):
                memory = slot_ring.memory(slot)
                filled = fill_slot(buffer, sources, draw, memory, self._layouts, with_info=True)
        except BaseException:
            slot_ring.release(slot)
            raise
        if filled is None:
            slot_ring.release(slot)
            batch = buffer.gather(draw) if len(draw) else None
            reply = self._reply((draw.index, draw.info, draw.ends_pass, batch), ring)
            return reply, batch is not None
        tree = (filled.index, filled.info, draw.ends_pass, filled.batch)
        return InSlot(slot, Packed(tree, [0], [filled.nbytes])), True

    def sample_many(self, batch_size: int | None, count: int, ring: str | None) -> list[Any]:
        """``count`` replies of :meth:`sample`, one request (a failure ends the group)."""
        out: list[Any] = []
        for _ in range(count):
            try:
                out.append(self.sample(batch_size, ring))
            except Exception as err:  # noqa: BLE001 - re-raised by the client when it gets there
                out.append(Raised(err))
                break
        return out

    def draw_gather_many(self, batch_size: int, count: int, ring: str | None) -> list[Any]:
        """``count`` replies of :meth:`draw_gather` (an empty draw or a failure ends the group)."""
        out: list[Any] = []
        for _ in range(count):
            try:
                reply, drew = self._draw_gather(batch_size, ring)
            except Exception as err:  # noqa: BLE001 - re-raised by the client when it gets there
                out.append(Raised(err))
                break
            out.append(reply)
            if not drew:  # nothing sampleable: the rest would be empty too
                break
        return out

    def _draw_and_gather(self, batch_size: int) -> tuple[Any, ...]:
        draw = self._buffer.draw(batch_size) if len(self._buffer) else Draw.empty()
        batch = self._buffer.gather(draw) if len(draw) else None
        return draw.index, draw.info, draw.ends_pass, batch

    def _direct(self, ring_name: str | None, rows: int | None) -> tuple[Any, SlotRing, int] | None:
        """Sources, ring and a slot taken for a direct gather of ``rows`` rows, where possible."""
        ring = None if ring_name is None else self._rings.get(ring_name)
        if ring is None or rows is None:
            return None
        sources = direct_sources(self._buffer)
        if sources is None or not sources.fits(rows, ring.slot_bytes):
            return None
        slot = ring.acquire()
        return None if slot is None else (sources, ring, slot)

    def gather(self, index: Any, info: dict[str, Any], ring: str | None) -> Reply:
        """Gather the rows of a draw made earlier (a restored one) into a reply."""
        return self._reply(self._buffer.gather(Draw(index, info)), ring)

    def refilter(self, batch: Payload) -> Payload:
        """``buffer.refilter(batch)``: the row filters run again on a batch sampled ahead."""
        return encode(self._buffer.refilter(decode(batch)))

    def _reply(self, value: Any, ring_name: str | None) -> Reply:
        payload = encode(value)
        ring = None if ring_name is None else self._rings.get(ring_name)
        if ring is None or not SLOT_MIN_BYTES <= payload.nbytes <= ring.slot_bytes:
            return payload
        slot = ring.acquire()
        if slot is None:  # every slot is held by the client: the object store takes it
            return payload
        return InSlot(slot, pack_into(payload, ring.memory(slot)))

    # ------------------------------------------------------------ slots
    def open_ring(self, slots: int, slot_bytes: int) -> str:
        """Create a ring of ``slots`` slots of ``slot_bytes`` bytes; return its path."""
        ring = SlotRing.create(slots, slot_bytes)
        self._rings[str(ring.path)] = ring
        return str(ring.path)

    def ring_attached(self, path: str) -> None:
        """The client mapped the ring at ``path``: remove its name from ``/dev/shm``."""
        self._rings[path].unlink()

    def close_ring(self, path: str) -> None:
        """Forget the ring at ``path`` (its client is gone)."""
        ring = self._rings.pop(path, None)
        if ring is not None:
            self._layouts.clear()  # views of its slots must not outlive it
            ring.close()

    # ------------------------------------------------ transport="distributed"
    def dist_listen(self, backend: str) -> tuple[str, str, int]:
        """Open a channel's store; return the channel id, host and port."""
        return self._channels.listen(backend)

    def dist_join(self, channel: str) -> None:
        """Build the actor's side of the channel's process group."""
        self._channels.join(channel)

    def dist_call(self, channel: str, name: str, request: Wire) -> Wire:
        """Run a call whose payloads travel over ``channel`` (see ``transport.channel``)."""
        return self._channels.call(self._run, channel, name, request)

    def dist_close(self, channel: str) -> None:
        """Forget ``channel`` (its client is gone)."""
        self._channels.close(channel)

    def _run(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name == "draw_gather":
            return self._draw_and_gather(*args, **kwargs)
        if name == "gather":
            return self._buffer.gather(Draw(*args, **kwargs))
        if name not in OWNER_CALLS:
            raise ValueError(
                f"the replay buffer's actor runs only the forwarded methods "
                f"{sorted(OWNER_CALLS)}, got {name!r}."
            )
        result = getattr(self._buffer, name)(*args, **kwargs)
        return ReturnsSelf() if result is self._buffer else result

    # ------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        """Release the rings, channels and buffer's threads (before the actor is killed)."""
        for path in list(self._rings):
            self.close_ring(path)
        self._channels.close_all()
        self._buffer.shutdown()
