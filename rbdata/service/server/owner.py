"""BufferOwner: the Ray actor that hosts one real rbdata buffer and serves its clients.

The actor is a threaded actor: it serves several calls at once (the service
starts it with ``max_concurrency``), and the hosted buffer's own lock guards
its state: a write, a draw, a gather and a priority update each hold it only
while they touch the components, so a learner's ``sample`` waits behind a
collector's ``extend`` at most as long as the write itself (decoding the
payload, Ray's per-call work and encoding a reply run outside it). The slot
rings and the distributed channels take their own locks.
:meth:`BufferOwner.wait_for_write` runs in a concurrency group of its own so
that waiting clients never take the threads that serve calls. Arguments and results travel as
:class:`~rbdata.service.transport.codec.Payload` objects (numpy buffers, no tensor
pickled by value); a batch for a client on this node is read straight into
one of that client's shared-memory slots by the buffer's own read path when
one is free (:mod:`rbdata.service.server.slot_fill`), and only the slot's
number travels.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any, TypeVar

from rbdata.buffers.protocol import Draw
from rbdata.service.server.channels import OwnerChannels
from rbdata.service.server.direct import DirectExport
from rbdata.service.server.rate_limit import ServiceRateLimiter
from rbdata.service.server.slot_fill import SlotReplies
from rbdata.service.server.write_slots import WriteRings, copies_on_write
from rbdata.service.surface import OWNER_CALLS, OWNER_READS, WRITE_CALLS
from rbdata.service.transport.channel import Wire
from rbdata.service.transport.codec import Packed, Payload, decode, encode
from rbdata.service.transport.messages import (
    Raised,
    Reply,
    ReturnsSelf,
)
from rbdata.sharing.lock import LocalThenShared

__all__ = ["BufferOwner"]

T = TypeVar("T")

#: Calls that read or replace the buffer as a whole: run under its lock, so that a call
#: served at the same time never sees half of a write (the others take the lock inside).
_WHOLE_BUFFER = frozenset(
    {
        "__getitem__",
        "__setitem__",
        "read_all_in_order",
        "write_all",
        "update_",
        "empty",
        "state_dict",
        "load_state_dict",
        "dumps",
        "loads",
        "set_storage",
        "set_sampler",
        "set_writer",
        "set_rng",
        "append_transform",
        "insert_transform",
        "register_save_hook",
        "register_load_hook",
    }
)


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
        self._slots = SlotReplies()
        self._writes = WriteRings()
        self._channels = OwnerChannels()
        self._rate: ServiceRateLimiter | None = None
        self._direct = DirectExport()

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

    def limit_rate(self, limiter: ServiceRateLimiter) -> None:
        """Enforce ``limiter`` on every client's samples and inserts from now on."""
        limiter.attach(self._buffer)
        self._rate = limiter

    def _limited(self, name: str, size: int | None, call: Callable[[], T]) -> T:
        """``call()``, once the rate limiter (if any) lets the call ``name`` through."""
        return call() if self._rate is None else self._rate.run(name, size, call)

    # ------------------------------------------------------------ control
    def pid(self) -> int:
        """The actor's process id (for operators and the failure tests)."""
        return os.getpid()

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

    def direct_handle(self) -> tuple[bytes | None, bool]:
        """The hosted buffer, for a client on this node to map: ``(handle, retry)``.

        ``handle`` is None when the buffer cannot be mapped; ``retry`` says
        whether asking again later may succeed (the storage is still empty).
        See :mod:`rbdata.service.server.direct`.
        """
        return self._direct.handle(self._buffer, self._offers_direct())

    def _offers_direct(self) -> bool:
        """Whether this owner lets clients write around it.

        Not when it logs writes, nor when it limits the rate (a map's writes and
        samples would not pass the limiter).
        """
        return self._rate is None

    def wait_for_write(self, write_count: int, timeout: float) -> int:
        """Wait up to ``timeout`` s for ``write_count`` to change; return the current count."""
        buffer = self._buffer
        buffer.wait_for_data(lambda: buffer.write_count != write_count, timeout)
        return int(buffer.write_count)

    # ------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None, ring: str | None) -> Reply:
        """``buffer.sample(batch_size, return_info=True)``, read into a slot of ``ring`` if free."""
        buffer = self._buffer
        return self._limited(
            "sample",
            batch_size,
            lambda: self._slots.reply(
                buffer, ring, lambda: buffer.sample(batch_size, return_info=True)
            )[0],
        )

    def draw_gather(self, batch_size: int, ring: str | None) -> Reply:
        """Draw a batch and gather it: ``(index, info, ends_pass, batch)``, one reply."""
        return self._draw_gather(batch_size, ring)[0]

    def _draw_gather(self, batch_size: int, ring: str | None) -> tuple[Reply, bool]:
        """:meth:`draw_gather`'s reply, and whether the draw holds rows."""
        reply, value = self._limited(
            "draw_gather",
            batch_size,
            lambda: self._slots.reply(
                self._buffer, ring, lambda: self._draw_and_gather(batch_size)
            ),
        )
        return reply, value[3] is not None

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

    def gather(self, index: Any, info: dict[str, Any], ring: str | None) -> Reply:
        """Gather the rows of a draw made earlier (a restored one) into a reply."""
        buffer = self._buffer
        return self._slots.reply(buffer, ring, lambda: buffer.gather(Draw(index, info)))[0]

    def refilter(self, batch: Payload) -> Payload:
        """``buffer.refilter(batch)``: the row filters run again on a batch sampled ahead."""
        return encode(self._buffer.refilter(decode(batch)))

    # ------------------------------------------------------------ writes
    def call_in_slot(
        self, name: str, ring: str, slot: int, packed: Packed, kwargs: Payload
    ) -> Payload:
        """Run a write whose arguments lie in ``slot`` of the client's write ring ``ring``.

        Raises:
            ValueError: for a call other than the writes (``WRITE_CALLS``).
        """
        if name not in WRITE_CALLS:
            raise ValueError(f"call_in_slot runs only {sorted(WRITE_CALLS)}, got {name!r}.")
        kw, copy = decode(kwargs), not copies_on_write(self._buffer)
        result = self._writes.run(
            ring, slot, packed, copy=copy, call=lambda *args: self._run(name, args, kw)
        )
        return encode(result)

    def attach_write_ring(self, path: str, slots: int, slot_bytes: int) -> None:
        """Map the write ring a client created at ``path``."""
        self._writes.attach(path, slots, slot_bytes)

    def close_write_ring(self, path: str) -> None:
        """Forget the write ring at ``path`` (its client is gone)."""
        self._writes.close(path)

    # ------------------------------------------------------------ slots
    def open_ring(self, slots: int, slot_bytes: int) -> str:
        """Create a ring of ``slots`` slots of ``slot_bytes`` bytes; return its path."""
        return self._slots.open(slots, slot_bytes)

    def ring_attached(self, path: str) -> None:
        """The client mapped the ring at ``path``: remove the ring's name (it stays mapped)."""
        self._slots.attached(path)

    def close_ring(self, path: str) -> None:
        """Forget the ring at ``path`` (its client is gone)."""
        self._slots.close(path)

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
            size = args[0] if args else kwargs.get("batch_size")
            return self._limited(name, size, lambda: self._draw_and_gather(*args, **kwargs))
        if name == "gather":
            return self._buffer.gather(Draw(*args, **kwargs))
        if name not in OWNER_CALLS:
            raise ValueError(
                f"the replay buffer's actor runs only the forwarded methods "
                f"{sorted(OWNER_CALLS)}, got {name!r}."
            )
        if name in _WHOLE_BUFFER:
            with self._buffer.lock:
                self._direct.invalidate(name)
                result = getattr(self._buffer, name)(*args, **kwargs)
        else:
            size = args[0] if name == "sample" and args else kwargs.get("batch_size")
            result = self._limited(name, size, lambda: getattr(self._buffer, name)(*args, **kwargs))
        return ReturnsSelf() if result is self._buffer else result

    # ------------------------------------------------------------ lifecycle
    def stop(self) -> None:
        """Release the rings, channels and buffer's threads (before the actor is killed)."""
        self._slots.close_all()
        self._writes.close_all()
        self._channels.close_all()
        self._direct.invalidate("shutdown")
        self._buffer.shutdown()
        lock = self._buffer.lock
        if isinstance(lock, LocalThenShared):  # mapped by clients: its name goes now, not at exit
            lock.unlink()  # (Ray kills this process next, which runs no exit handler)
