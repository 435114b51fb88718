"""DistributedBufferClient: a client whose payloads travel over a torch.distributed group.

See :mod:`rbdata.service.transport.channel` for the channel. Every call of this
client goes over its channel (its tensors as bytes over the process group,
its layout and method name over Ray); waiting for data uses Ray alone.
``stats()`` reports ``size`` and ``write_count`` only, as the reference's
distributed clients do. Requests are not sent ahead (``prefetch`` is not
used): each call is one exchange on the channel.
"""

from __future__ import annotations

import contextlib
from typing import Any

from rbdata.buffers.protocol import Draw
from rbdata.service import runtime
from rbdata.service.client.buffer_client import OwnerAddress, RayBufferClient, as_draw
from rbdata.service.transport.channel import (
    BACKENDS,
    TIMEOUT,
    ChannelEndpoint,
    device_of,
    open_group,
)
from rbdata.service.transport.messages import Raised, ReturnsSelf

__all__ = ["DistributedBufferClient"]


class DistributedBufferClient(RayBufferClient):
    """A :class:`RayBufferClient` whose tensor payloads travel over torch.distributed.

    Args:
        address: where the actor is.
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (CUDA tensors).

    Raises:
        ValueError: for another backend.

    Examples:
        >>> import pickle
        >>> from rbdata.service.client.buffer_client import OwnerAddress
        >>> from rbdata.service.client.distributed_client import DistributedBufferClient
        >>> address = OwnerAddress("rbdata-buffer-0", "127.0.0.1:6379", "node", batch_size=8)
        >>> client = pickle.loads(pickle.dumps(DistributedBufferClient(address)))
        >>> client.batch_size  # the process group is bound on the first call, not here
        8
        >>> DistributedBufferClient(address, backend="mpi")
        Traceback (most recent call last):
        ...
        ValueError: transport_options['backend'] must be one of ('gloo', 'nccl'), got 'mpi'.
    """

    def __init__(self, address: OwnerAddress, *, backend: str = "gloo") -> None:
        if backend not in BACKENDS:
            raise ValueError(
                f"transport_options['backend'] must be one of {BACKENDS}, got {backend!r}."
            )
        self._backend = backend
        super().__init__(address, prefetch=0)

    def _setup_local(self) -> None:
        super()._setup_local()
        self._endpoint: ChannelEndpoint | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "backend": self._backend}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._backend = state["backend"]
        super().__setstate__(state)

    def _channel(self) -> ChannelEndpoint:
        """This process's channel with the actor, bound on first use."""
        with self._lock:
            if self._endpoint is None:
                self._endpoint = _connect(self.actor(), self._backend)
            return self._endpoint

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        endpoint = self._channel()
        try:
            result = _exchange(endpoint, self.actor(), name, args, kwargs)
        finally:
            if endpoint.broken:  # bind a fresh channel on the next call
                self._endpoint = None
                with contextlib.suppress(Exception):
                    self.actor().dist_close.remote(endpoint.channel)
        return self if isinstance(result, ReturnsSelf) else result

    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample a batch; its bytes arrive over the process group."""
        return self._call("sample", batch_size, return_info)

    def draw(self, batch_size: int) -> Draw:
        """Draw (and gather, in the same exchange) the rows of one batch."""
        with self._lock:
            if self._ahead:
                draw, batch = self._ahead.popleft()
            else:
                draw, batch = as_draw(self._call("draw_gather", batch_size))
            if batch is not None:
                self._keep_gathered(draw, batch)
            return draw

    def gather(self, draw: Draw) -> Any:
        """The batch of ``draw`` (received with it, else gathered now)."""
        held = self._gathered.pop(id(draw.index), None)
        if held is not None and held[0] is draw.index:
            return held[1]
        return self._call("gather", draw.index, dict(draw.info))

    def stats(self) -> dict[str, Any]:
        """``size`` and ``write_count`` (what distributed clients report), plus local sources."""
        full = self._call("stats")
        out: dict[str, Any] = {"size": full["size"], "write_count": full["write_count"]}
        for source in list(self._stats_sources.values()):
            out.update(source())
        return out


def _connect(actor: Any, backend: str) -> ChannelEndpoint:
    """Bind a client's channel with ``actor``: the actor's store, then both sides' group."""
    import torch.distributed as dist

    channel, host, port = runtime.get(actor.dist_listen.remote(backend), "binding a channel")
    joined = actor.dist_join.remote(channel)
    store = dist.TCPStore(host, port, 2, is_master=False, timeout=TIMEOUT)
    group = open_group(store, 1, backend)
    runtime.get(joined, "binding a channel")
    return ChannelEndpoint(channel, group, 1, device_of(backend), store)


def _exchange(
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
            reply = runtime.get(actor.dist_call.remote(endpoint.channel, name, request), name)
            work.wait()
            result = endpoint.receive(reply)
        except BaseException:
            endpoint.broken = True
            raise
    if isinstance(result, Raised):
        raise result.error
    return result
