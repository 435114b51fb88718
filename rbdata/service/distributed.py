"""transport="distributed": tensor payloads over torch.distributed, Ray carrying only control.

Each client gets a process group of its own with the actor: two ranks (the
actor 0, the client 1) built directly on a ``TCPStore`` the actor hosts, so
neither side's default process group is created or touched. The group is
bound on a client's first call in each process (a pickled client binds
again where it is unpickled).

A call travels as (see :meth:`ChannelEndpoint.call`):

1. the client encodes ``(args, kwargs)`` into one flat byte tensor and sends
   it over the group, while Ray carries the method name and the layout;
2. the actor receives the bytes, runs the method and sends the result's
   bytes back the same way, Ray carrying the result's layout.

Layouts (the payload trees of :mod:`rbdata.service.codec`) are bound on
first use: each side sends a layout once per channel and refers to it by
number afterwards, so a steady stream of same-shaped batches costs Ray only
a few bytes per call.
"""

from __future__ import annotations

import datetime
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rbdata.service import _runtime
from rbdata.service._runtime import Raised
from rbdata.service.codec import Packed, Payload, encode, pack_into, unpack

__all__ = [
    "BACKENDS",
    "ChannelEndpoint",
    "Layouts",
    "OwnerChannels",
    "Wire",
    "call",
    "connect",
    "open_group",
]

BACKENDS = ("gloo", "nccl")
_TIMEOUT = datetime.timedelta(seconds=300)


def open_group(store: Any, rank: int, backend: str, timeout: datetime.timedelta = _TIMEOUT) -> Any:
    """A two-rank process group over ``store`` (never the default group)."""
    import torch.distributed as dist

    if backend == "nccl":
        return dist.ProcessGroupNCCL(store, rank, 2, dist.ProcessGroupNCCL.Options())
    return dist.ProcessGroupGloo(store, rank, 2, timeout)


def device_of(backend: str) -> torch.device:
    """Where payload bytes must live for ``backend`` (NCCL moves CUDA memory only)."""
    return (
        torch.device("cuda", torch.cuda.current_device())
        if backend == "nccl"
        else torch.device("cpu")
    )


@dataclass(frozen=True)
class Wire:
    """What Ray carries for one payload: its layout's number (and the layout, the first time)."""

    layout_id: int
    layout: tuple[Any, list[int], list[int]] | None
    nbytes: int


class Layouts:
    """Both directions' layout bookkeeping of one channel (see the module docstring).

    Each side remembers the last ``capacity`` layouts it sent and received, in
    the same first-in first-out order, so a layout number the sender reuses is
    one the receiver still knows (layouts holding changing plain values, such
    as ``stats()``'s, come and go without piling up).


    Examples:
        >>> import torch
        >>> from rbdata.service.codec import encode, pack_into
        >>> from rbdata.service.distributed import Layouts
        >>> payload = encode({"a": torch.zeros(3)})
        >>> packed = pack_into(payload, torch.empty(payload.nbytes, dtype=torch.uint8))
        >>> sender = Layouts()
        >>> [sender.outgoing(packed, 12).layout is None for _ in range(2)]
        [False, True]
    """

    capacity = 64

    def __init__(self) -> None:
        self._sent: dict[str, int] = {}
        self._received: dict[int, tuple[Any, list[int], list[int]]] = {}
        self._next = 0

    def outgoing(self, packed: Packed, nbytes: int) -> Wire:
        """The wire form of ``packed``: its layout only if the receiver does not know it."""
        layout = (packed.tree, packed.offsets, packed.sizes)
        key = repr(layout)
        known = self._sent.get(key)
        if known is not None:
            return Wire(known, None, nbytes)
        self._sent[key] = self._next
        if len(self._sent) > self.capacity:
            del self._sent[next(iter(self._sent))]
        self._next += 1
        return Wire(self._sent[key], layout, nbytes)

    def incoming(self, wire: Wire) -> Packed:
        """The Packed a wire form stands for (learning its layout the first time)."""
        if wire.layout is not None:
            self._received[wire.layout_id] = wire.layout
            if len(self._received) > self.capacity:
                del self._received[next(iter(self._received))]
        tree, offsets, sizes = self._received[wire.layout_id]
        return Packed(tree, offsets, sizes)


def flatten(payload: Payload, device: torch.device) -> tuple[Packed, torch.Tensor]:
    """``payload``'s buffers side by side in one byte tensor (on ``device``)."""
    flat = torch.empty(max(payload.nbytes, 1), dtype=torch.uint8)
    packed = pack_into(payload, flat)
    return packed, flat if device.type == "cpu" else flat.to(device)


class ChannelEndpoint:
    """One side of a channel: its process group, its layouts, and the calls over it.

    Args:
        group: the two-rank process group.
        rank: this side's rank (0: the actor, 1: the client).
        device: where payload bytes live (see :func:`device_of`).
        store: the rendezvous store of ``group``.
    """

    def __init__(
        self, channel: str, group: Any, rank: int, device: torch.device, store: Any
    ) -> None:
        self.channel = channel
        self.store = store  # the group's rendezvous store lives as long as the group
        self.group = group
        self.peer = 1 - rank
        self.device = device
        self.layouts = Layouts()
        self.lock = threading.Lock()
        self.broken = False  # an exchange failed half-way: the two sides are out of step

    def send(self, value: Any) -> tuple[Wire, Any, torch.Tensor]:
        """Start sending ``value``'s bytes; return its wire form, the work and the bytes."""
        packed, flat = flatten(encode(value), self.device)
        work = self.group.send([flat], self.peer, 0)
        return self.layouts.outgoing(packed, flat.numel()), work, flat

    def receive(self, wire: Wire) -> Any:
        """Receive the bytes of ``wire`` and rebuild the value (its tensors view them)."""
        packed = self.layouts.incoming(wire)
        flat = torch.empty(wire.nbytes, dtype=torch.uint8, device=self.device)
        self.group.recv([flat], self.peer, 0).wait()
        return unpack(packed, flat if self.device.type == "cpu" else flat.cpu())


class OwnerChannels:
    """The actor's channels, one per bound client (held by :class:`BufferOwner`)."""

    def __init__(self) -> None:
        self._stores: dict[str, tuple[Any, str]] = {}
        self._channels: dict[str, ChannelEndpoint] = {}
        self._pending: dict[str, tuple[Any, torch.Tensor]] = {}

    def listen(self, backend: str) -> tuple[str, str, int]:
        """Open a store for a new channel; return its id, host and port."""
        import ray
        import torch.distributed as dist

        host = str(ray.util.get_node_ip_address())
        store = dist.TCPStore(host, 0, 2, is_master=True, wait_for_workers=False, timeout=_TIMEOUT)
        channel = uuid.uuid4().hex
        self._stores[channel] = (store, backend)
        return channel, host, int(store.port)

    def join(self, channel: str) -> None:
        """Build this side of the channel's group (the client builds its side at once)."""
        store, backend = self._stores[channel]
        group = open_group(store, 0, backend)
        self._channels[channel] = ChannelEndpoint(channel, group, 0, device_of(backend), store)

    def call(self, run: Callable[..., Any], channel: str, name: str, request: Wire) -> Wire:
        """Receive a request's bytes, ``run(name, args, kwargs)`` and start sending the result.

        An exception raised by ``run`` travels back as the result (wrapped in
        :class:`Raised`), so both sides stay in step on the channel.
        """
        endpoint = self._channels[channel]
        self._finish(channel)
        args, kwargs = endpoint.receive(request)
        try:
            result = run(name, args, kwargs)
        except Exception as err:  # noqa: BLE001 - re-raised by the client
            result = Raised(err)
        wire, work, flat = endpoint.send(result)
        self._pending[channel] = (work, flat)  # the bytes must live until the client has them
        return wire

    def _finish(self, channel: str) -> None:
        pending = self._pending.pop(channel, None)
        if pending is not None:
            pending[0].wait()

    def close(self, channel: str) -> None:
        """Forget a channel (its client is gone)."""
        self._pending.pop(channel, None)
        self._channels.pop(channel, None)
        self._stores.pop(channel, None)

    def close_all(self) -> None:
        """Forget every channel (the actor stops)."""
        for channel in list(self._stores):
            self.close(channel)


def connect(actor: Any, backend: str) -> ChannelEndpoint:
    """Bind a client's channel with ``actor``: the actor's store, then both sides' group."""
    import torch.distributed as dist

    channel, host, port = _runtime.get(actor.dist_listen.remote(backend), "binding a channel")
    joined = actor.dist_join.remote(channel)
    store = dist.TCPStore(host, port, 2, is_master=False, timeout=_TIMEOUT)
    group = open_group(store, 1, backend)
    _runtime.get(joined, "binding a channel")
    return ChannelEndpoint(channel, group, 1, device_of(backend), store)


def call(
    endpoint: ChannelEndpoint, actor: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run ``name(*args, **kwargs)`` in the actor over ``endpoint`` (the client's side).

    Raises:
        Exception: what the method raised in the actor, with its type and message
            (the channel stays usable); any other failure marks it ``broken``.
    """
    with endpoint.lock:
        request, work, _flat = endpoint.send((args, kwargs))
        try:
            reply = _runtime.get(actor.dist_call.remote(endpoint.channel, name, request), name)
            work.wait()
            result = endpoint.receive(reply)
        except BaseException:
            endpoint.broken = True
            raise
    if isinstance(result, Raised):
        raise result.error
    return result
