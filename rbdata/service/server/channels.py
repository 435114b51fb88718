"""The owner's side of transport="distributed": one channel per bound client.

See :mod:`rbdata.service.transport.channel` for what a channel is and how a call travels.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import torch

from rbdata.service.transport.channel import TIMEOUT, ChannelEndpoint, Wire, device_of, open_group
from rbdata.service.transport.messages import Raised

__all__ = ["OwnerChannels"]


class OwnerChannels:
    """The actor's channels, one per bound client (held by the owner)."""

    def __init__(self) -> None:
        self._stores: dict[str, tuple[Any, str]] = {}
        self._channels: dict[str, ChannelEndpoint] = {}
        self._pending: dict[str, tuple[Any, torch.Tensor]] = {}
        self._locks: dict[str, threading.Lock] = {}  # a channel's exchanges stay in step

    def listen(self, backend: str) -> tuple[str, str, int]:
        """Open a store for a new channel; return its id, host and port."""
        import ray
        import torch.distributed as dist

        host = str(ray.util.get_node_ip_address())
        store = dist.TCPStore(host, 0, 2, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
        channel = uuid.uuid4().hex
        self._stores[channel] = (store, backend)
        return channel, host, int(store.port)

    def join(self, channel: str) -> None:
        """Build this side of the channel's group (the client builds its side at once)."""
        store, backend = self._stores[channel]
        group = open_group(store, 0, backend)
        self._channels[channel] = ChannelEndpoint(channel, group, 0, device_of(backend), store)
        self._locks[channel] = threading.Lock()

    def call(self, run: Callable[..., Any], channel: str, name: str, request: Wire) -> Wire:
        """Receive a request's bytes, ``run(name, args, kwargs)`` and start sending the result.

        An exception raised by ``run`` travels back as the result (wrapped in
        :class:`~rbdata.service.transport.messages.Raised`), so both sides stay
        in step on the channel.
        """
        endpoint = self._channels[channel]
        with self._locks[channel]:  # the owner serves calls at once; one channel's in order
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
        self._locks.pop(channel, None)

    def close_all(self) -> None:
        """Forget every channel (the actor stops)."""
        for channel in list(self._stores):
            self.close(channel)
