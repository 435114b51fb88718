"""transport="distributed": tensor payloads over torch.distributed, Ray carrying only control.

Each client gets a process group of its own with the actor: two ranks (the
actor 0, the client 1) built directly on a ``TCPStore`` the actor hosts, so
neither side's default process group is created or touched. The group is
bound on a client's first call in each process (a pickled client binds
again where it is unpickled).

A call travels as (the client's side: :mod:`rbdata.service.client.distributed_client`,
the owner's: :mod:`rbdata.service.server.channels`):

1. the client encodes ``(args, kwargs)`` into one flat byte tensor and sends
   it over the group, while Ray carries the method name and the layout;
2. the actor receives the bytes, runs the method and sends the result's
   bytes back the same way, Ray carrying the result's layout.

Payload layouts (the trees of :mod:`rbdata.service.transport.codec`) are
numbered on first use (:class:`LayoutNumbers`): each side sends a layout once
per channel and refers to it by number afterwards, so a steady stream of
same-shaped batches costs Ray only a few bytes per call.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass
from typing import Any

import torch

from rbdata.service.transport.codec import Packed, Payload, encode, pack_into, unpack

__all__ = [
    "BACKENDS",
    "TIMEOUT",
    "ChannelEndpoint",
    "LayoutNumbers",
    "Wire",
    "device_of",
    "open_group",
]

BACKENDS = ("gloo", "nccl")
TIMEOUT = datetime.timedelta(seconds=300)


def open_group(store: Any, rank: int, backend: str, timeout: datetime.timedelta = TIMEOUT) -> Any:
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


class LayoutNumbers:
    """Both directions' payload layouts of one channel, each sent once and then numbered.

    Each side remembers the last ``capacity`` layouts it sent and received, in
    the same first-in first-out order, so a layout number the sender reuses is
    one the receiver still knows (layouts holding changing plain values, such
    as ``stats()``'s, come and go without piling up).

    Examples:
        >>> import torch
        >>> from rbdata.service.transport.codec import encode, pack_into
        >>> from rbdata.service.transport.channel import LayoutNumbers
        >>> payload = encode({"a": torch.zeros(3)})
        >>> packed = pack_into(payload, torch.empty(payload.nbytes, dtype=torch.uint8))
        >>> sender = LayoutNumbers()
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
    """One side of a channel: its process group, its layout numbers, and the calls over it.

    Args:
        channel: the channel's id.
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
        self.layouts = LayoutNumbers()
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
