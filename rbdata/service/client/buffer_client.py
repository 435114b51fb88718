"""RayBufferClient: a picklable handle on a buffer hosted by a Ray actor.

The client implements the public ReplayBuffer methods (as declared in
:mod:`rbdata.service.surface`) and the loader's buffer protocol
(:class:`~rbdata.buffers.protocol.ServableBuffer`), so
:class:`~rbdata.ReplayDataset`, ``ReplayDataModule`` and ``ReplayCallback``
serve it as they serve an in-process buffer. It has no lifecycle methods:
only the buffer that started the actor shuts it down.

Where the time goes, and what the client does about it:

- payloads are numpy buffers (:mod:`rbdata.service.transport.codec`), read out of Ray's
  object store without a copy;
- ``prefetch`` requests stay in flight, so the actor gathers the next
  batches while the caller works on this one (``sample`` and ``draw``);
- on the actor's node, batches arrive in shared-memory slots
  (:mod:`rbdata.sharing.slot_ring`): the reply is a slot number, the batch's
  tensors view the slot, and the slot is free again when they are freed.

A client pickles as the actor's name and the cluster's address: unpickled in
a Ray task, another actor, or a process outside Ray (it then attaches to the
cluster), it finds the actor again.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import Any

import torch
from tensordict import TensorDictBase
from torch.utils.hooks import RemovableHandle

from rbdata.buffers.protocol import INFO_KEYS, Draw, StatsSource
from rbdata.errors import ServiceUnavailableError
from rbdata.service import runtime
from rbdata.service.client.address import OwnerAddress
from rbdata.service.client.coalesce import CoalescedWrites, CoalescingClient
from rbdata.service.client.direct import DIRECT_WRITES, DirectMap, fetcher
from rbdata.service.client.in_flight import (
    Group,
    as_draw,
    draw_state,
    draws_from_state,
    forget_ring,
    in_order,
    slot_size,
)
from rbdata.service.client.write_behind import PendingWrites
from rbdata.service.client.write_slots import WriteSlots
from rbdata.service.surface import WRITE_CALLS, ForwardedMethods
from rbdata.service.transport.codec import Payload, decode, encode, unpack
from rbdata.service.transport.messages import (
    SLOT_MIN_BYTES,
    WAIT_GROUP,
    WRITE_GROUP,
    InSlot,
    Raised,
    ReturnsSelf,
)
from rbdata.sharing.slot_ring import SlotRing

__all__ = ["OwnerAddress", "RayBufferClient", "as_draw"]

_WAIT_SLICE_S = 1.0  # longest single wait inside the actor
_WAKE_POLL_S = 0.02  # how often a local wait checks notify_waiters()
_SOURCE_KEY = "is_offline"  # OfflineToOnlineReplayBuffer's per-row part flag
_ROW_KEY = "_rbdata_row"  # row numbers sent along with a batch to refilter
_SMALL_ROW_BYTES = 256  # refilter sends only the entries at most this big per row
_HELD_DRAWS = 8  # batches held for draws not gathered yet, beyond twice the prefetch depth


class RayBufferClient(ForwardedMethods, CoalescingClient):
    """A picklable handle on a Ray-hosted replay buffer (see the module docstring).

    Get one from a Ray-backed buffer: ``rb.client()`` (see
    :func:`~rbdata.service.attach_ray_service` for a run). A client connects
    on its first call, so building or unpickling one costs nothing.

    Args:
        address: where the actor is.
        prefetch: batches requested ahead by ``sample()`` and ``draw()``, in
            groups of ``prefetch`` per actor call (0: one call per batch).
        write_behind: ``add``/``extend`` calls kept in flight: they return None at
            once and are acknowledged before this client's next other call, or by
            :meth:`flush` (0: each write waits and returns its indices; see
            :mod:`rbdata.service.client.write_behind`).
        coalesce: ``add``/``extend`` calls of fewer rows are queued and sent as one
            ``extend`` (0: off; see :mod:`rbdata.service.client.coalesce`).

    Examples:
        >>> import pickle
        >>> from rbdata.service.client.buffer_client import OwnerAddress, RayBufferClient
        >>> address = OwnerAddress("rbdata-buffer-0", "127.0.0.1:6379", "node", batch_size=32)
        >>> client = pickle.loads(pickle.dumps(RayBufferClient(address, prefetch=2)))
        >>> client, client.batch_size, client.service_backend
        (RayBufferClient(actor='rbdata-buffer-0', prefetch=2), 32, 'ray')
    """

    service_backend = "ray"

    #: defaults for a client whose subclass sets up before calling __init__
    _write_behind = 0
    _coalesce = 0

    def __init__(
        self, address: OwnerAddress, *, prefetch: int = 0, write_behind: int = 0, coalesce: int = 0
    ) -> None:
        self._address = address
        self._prefetch = prefetch
        self._write_behind = write_behind
        self._coalesce = coalesce
        PendingWrites(write_behind)  # checks the arguments before anything is set up
        CoalescedWrites(coalesce)
        self._setup_local()

    def _setup_local(self) -> None:
        """The per-process state: actor handle, slots, requests in flight, local hooks."""
        self._handle: Any = None
        self._lock = threading.RLock()
        self._ring: SlotRing | None = None
        self._ring_tried = False
        self._writes = WriteSlots()  # big writes through shared memory, on the actor's node
        self._pending = PendingWrites(self._write_behind)  # writes in flight
        self._coalesced = CoalescedWrites(self._coalesce)  # small writes queued
        self._samples = Group()  # sample() replies requested ahead
        self._draws = Group()  # draw() replies requested ahead
        self._draw_size: int | None = None
        self._ahead: deque[tuple[Draw, Any]] = deque()  # drawn in the actor, not handed out
        # id(draw.index) -> (draw.index, its batch): the loader may wrap the index in a new Draw
        self._gathered: dict[int, tuple[torch.Tensor, Any]] = {}
        self._stats_sources: OrderedDict[int, StatsSource] = OrderedDict()  # weakref-able
        self._wakes = 0
        self._cache: dict[str, Any] = {"batch_size": self._address.batch_size}
        self._direct: DirectMap | None = None  # the buffer mapped, on the actor's node

    def __getstate__(self) -> dict[str, Any]:
        self.flush()  # a pickled client's writes are all in the buffer
        return {
            "address": self._address,
            "prefetch": self._prefetch,
            "write_behind": self._write_behind,
            "coalesce": self._coalesce,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._address = state["address"]
        self._prefetch = state["prefetch"]
        self._write_behind = state.get("write_behind", 0)
        self._coalesce = state.get("coalesce", 0)
        self._setup_local()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(actor={self._address.actor_name!r}, prefetch={self._prefetch})"
        )

    # ------------------------------------------------------------ plumbing
    def flush(self) -> None:
        """Send the writes queued (``coalesce``) and wait for those in flight (``write_behind``).

        Raises:
            Exception: the error a write raised in the actor (the writes after it stand).
        """
        self._flush_coalesced()
        self._pending.flush()

    @property
    def address(self) -> OwnerAddress:
        """Where the owner actor is: its name, cluster and node."""
        return self._address

    def actor(self) -> Any:
        """The owner actor's handle, once this client's queued and in-flight writes are done.

        For calls of the owner beyond the forwarded surface (sharding, operators, tests).
        """
        self._flush_coalesced()
        self._pending.flush()
        return self._connect()

    def _connect(self) -> Any:
        if self._handle is None:
            runtime.join(self._address.cluster)
            ray = runtime.ray_module()
            try:
                self._handle = ray.get_actor(self._address.actor_name, namespace=runtime.NAMESPACE)
            except ValueError as err:
                raise ServiceUnavailableError(
                    f"no Ray actor named {self._address.actor_name!r}: the replay buffer it hosted "
                    "was shut down, or its process died; build a new Ray-backed buffer."
                ) from err
        return self._handle

    def _mapped(self) -> DirectMap:
        """This process's :class:`DirectMap` of the buffer (see :mod:`.direct`)."""
        if self._direct is None:
            actor = self.actor()
            here = runtime.ray_module().get_runtime_context().get_node_id()
            there = self._address.node_id if self._address.maps else None
            self._direct = DirectMap(fetcher(actor, here, there))
        return self._direct

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self._queue_write(name, args, kwargs):  # coalesced (see CoalescingClient)
            return None
        return self._call_now(name, *args, **kwargs)

    def _call_now(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in DIRECT_WRITES:
            direct = self._mapped()
            self._pending.flush()
            done, result = direct.run(name, args, kwargs)
            if done:
                return result
        write = name in WRITE_CALLS
        behind = self._write_behind and write
        actor, kw = (self._connect() if behind else self.actor()), encode(kwargs)
        ref = self._writes.submit(actor, name, args, kw)
        payload = None
        if ref is None:
            payload = encode(args)
            call = actor.call.options(concurrency_group=WRITE_GROUP) if write else actor.call
            ref = call.remote(name, payload, kw)
        if behind:
            self._pending.add(ref, name)
            result = None
        else:
            result = decode(runtime.get(ref, name))
        if payload is not None:
            self._writes.consider(actor, self._address.node_id, name, payload)
        return self if isinstance(result, ReturnsSelf) else result

    def _read(self, name: str) -> Any:
        return runtime.get(self.actor().read.remote(name), name)

    def _cached(self, name: str) -> Any:
        if name not in self._cache:
            self._cache[name] = self._read(name)
        return self._cache[name]

    def _ring_path(self) -> str | None:
        return None if self._ring is None else str(self._ring.path)

    def _receive(self, ref: Any, what: str) -> Any:
        return self._open(runtime.get(ref, what))

    def _open(self, reply: Any) -> Any:
        """The value of one reply (read from its slot, or decoded); re-raise a failure."""
        if isinstance(reply, Raised):
            raise reply.error
        if isinstance(reply, InSlot):
            assert self._ring is not None
            return unpack(reply.packed, self._ring.view(reply.slot))
        if not self._ring_tried and isinstance(reply, Payload) and reply.nbytes >= SLOT_MIN_BYTES:
            self._open_ring(reply.nbytes)
        return decode(reply)

    def _open_ring(self, nbytes: int) -> None:
        """Batches this big come often: get slots for them, if the actor is on this node."""
        self._ring_tried = True
        ray = runtime.ray_module()
        here = ray.get_runtime_context().get_node_id()
        if here != self._address.node_id or not SlotRing.available():
            return
        slots, slot_bytes = 3 * self._prefetch + 4, slot_size(nbytes)
        actor = self.actor()
        path = runtime.get(actor.open_ring.remote(slots, slot_bytes), "open_ring")
        try:
            ring = SlotRing.attach(path, slots, slot_bytes)
        finally:
            runtime.get(actor.ring_attached.remote(path), "ring_attached")
        self._ring = ring
        weakref.finalize(self, forget_ring, actor, path)

    def _next(self, group: Group, submit: Callable[[int], Any], what: str) -> Any:
        """The next reply of ``group``; groups of ``prefetch`` replies, one more group in flight.

        One actor call per ``prefetch`` batches: Ray's cost per call is shared
        by the group, and the actor gathers the next group while this one is used.
        """
        if not group.replies:
            if not group.inflight:
                group.inflight.append(submit(self._prefetch))
            ref = group.inflight.popleft()
            group.inflight.append(submit(self._prefetch))
            group.replies.extend(runtime.get(ref, what))
        return self._open(group.replies.popleft())

    # ------------------------------------------------------------ reading
    def __len__(self) -> int:
        mapped = None if self._direct is None else self._direct.buffer()
        return len(mapped) if mapped is not None else int(self._read("len"))

    def __iter__(self) -> Any:
        while True:
            batch = self.next()
            if batch is None:
                return
            yield batch

    def stats(self) -> dict[str, Any]:
        """The hosted buffer's ``stats()``, with this client's stats sources merged in."""
        out: dict[str, Any] = self._call("stats")
        for source in list(self._stats_sources.values()):
            out.update(source())
        return out

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into :meth:`stats` (this client's) until removed."""
        handle = RemovableHandle(self._stats_sources)
        self._stats_sources[handle.id] = source
        return handle

    # ------------------------------------------------------------ sampling
    def sample(self, batch_size: int | None = None, return_info: bool = False) -> Any:
        """Sample a batch (``(batch, info)`` with ``return_info``); see ``ReplayBuffer.sample``.

        Raises:
            ValueError: with ``prefetch``, for a ``batch_size`` other than the buffer's.
        """
        if self._prefetch and batch_size is not None and batch_size != self.batch_size:
            raise ValueError(
                f"with prefetch={self._prefetch} the batch size is fixed at construction "
                f"({self.batch_size}); got batch_size={batch_size}."
            )
        self._pending.flush()
        done, out = self._mapped().run("sample", (batch_size,), {"return_info": return_info}, True)
        if done:
            return out
        actor = self.actor()
        if self._prefetch:
            with self._lock:
                data, info = self._next(
                    self._samples,
                    lambda n: in_order(actor.sample_many).remote(None, n, self._ring_path()),
                    "sample",
                )
        else:
            data, info = self._receive(
                in_order(actor.sample).remote(batch_size, self._ring_path()),
                "sample",
            )
        return (data, info) if return_info else data

    @property
    def lock(self) -> threading.RLock:
        """This client's lock (in the actor, the hosted buffer's lock serializes draws)."""
        return self._lock

    def draw(self, batch_size: int) -> Draw:
        """Draw the rows of one batch (gathered with them, in one request; see ``gather``)."""
        with self._lock:
            if self._ahead:
                draw, batch = self._ahead.popleft()
            else:
                draw, batch = self._draw_now(batch_size)
                if not len(draw):  # nothing sampleable: what is in flight may be stale-empty
                    self._settle()
            if batch is not None:
                self._keep_gathered(draw, batch)
            return draw

    def _draw_now(self, batch_size: int) -> tuple[Draw, Any]:
        actor = self.actor()
        if self._prefetch and (self._draw_size in (None, batch_size) or not self._draws):
            self._draw_size = batch_size
            return as_draw(
                self._next(
                    self._draws,
                    lambda n: in_order(actor.draw_gather_many).remote(
                        batch_size, n, self._ring_path()
                    ),
                    "draw",
                )
            )
        return as_draw(
            self._receive(
                in_order(actor.draw_gather).remote(batch_size, self._ring_path()),
                "draw",
            )
        )

    def _keep_gathered(self, draw: Draw, batch: Any) -> None:
        """Hold ``draw``'s batch for :meth:`gather` (a bounded number: the oldest go first)."""
        self._gathered[id(draw.index)] = (draw.index, batch)
        while len(self._gathered) > 2 * self._prefetch + _HELD_DRAWS:
            del self._gathered[next(iter(self._gathered))]

    def _settle(self) -> None:
        """Receive every draw requested ahead; keep the non-empty ones to hand out next."""
        group = self._draws
        while group.inflight:
            group.replies.extend(runtime.get(group.inflight.popleft(), "draw"))
        while group.replies:
            reply = group.replies.popleft()
            if isinstance(reply, Raised):
                continue  # a failed draw drew nothing (a lasting cause fails the next draw too)
            draw, batch = as_draw(self._open(reply))
            if len(draw):
                self._ahead.append((draw, batch))

    def gather(self, draw: Draw) -> Any:
        """The batch of ``draw``: already received with it, else gathered by the actor now."""
        held = self._gathered.pop(id(draw.index), None)
        if held is not None and held[0] is draw.index:
            return held[1]
        ref = self.actor().gather.remote(draw.index, dict(draw.info), self._ring_path())
        return self._receive(ref, "gather")

    def refilter(self, batch: Any) -> Any:
        """Run the hosted buffer's row filters again on ``batch`` (a no-op without any)."""
        if not self._cached("filters_rows") or not isinstance(batch, TensorDictBase):
            return batch
        rows = batch.batch_size[0] if batch.batch_size else 0
        if not rows:
            return batch
        small = [
            key
            for key, value in batch.items(True, True)
            if isinstance(value, torch.Tensor)
            and value[0].numel() * value.element_size() <= _SMALL_ROW_BYTES
        ]
        probe = batch.select(*small).set(_ROW_KEY, torch.arange(rows))
        try:
            kept = decode(runtime.get(self.actor().refilter.remote(encode(probe)), "refilter"))
        except KeyError:  # a filter reads a large entry: send the whole batch
            kept = batch.clone(False).set(_ROW_KEY, torch.arange(rows))
            kept = decode(runtime.get(self.actor().refilter.remote(encode(kept)), "refilter"))
        return batch[kept.get(_ROW_KEY)]

    def sampling_state(self) -> dict[str, Any]:
        """The hosted buffer's sampling state, and the draws made ahead of the caller."""
        with self._lock:
            self._settle()
            owner = self._call("sampling_state")
            ahead = [draw_state(draw) for draw, _ in self._ahead]
        return {"owner": owner, "ahead": ahead}

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`sampling_state`'s output (missing entries kept; unchanged on error).

        Raises:
            ValueError: if ``state["ahead"]`` is not a list of draws.
        """
        ahead = state.get("ahead")
        restored = None if ahead is None else deque((d, None) for d in draws_from_state(ahead))
        with self._lock:
            self._settle()
            if state.get("owner") is not None:
                self._call("load_sampling_state", state["owner"])
            if restored is not None:
                self._ahead = restored

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (re-checked on every write) or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        actor = self.actor().wait_for_write.options(concurrency_group=WAIT_GROUP)
        ray = runtime.ray_module()
        while not predicate():
            left = _WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            wakes = self._wakes
            ref = actor.remote(self.write_count, min(left, _WAIT_SLICE_S))
            while self._wakes == wakes and not ray.wait([ref], timeout=_WAKE_POLL_S)[0]:
                pass
        return True

    def notify_waiters(self) -> None:
        """Wake the threads inside :meth:`wait_for_data` so they re-check their predicate."""
        self._wakes += 1

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply ``priority`` to the rows of ``batch`` (only its index entries travel)."""
        if isinstance(batch, (TensorDictBase, Mapping)):
            keys = [k for k in (*INFO_KEYS, _SOURCE_KEY) if k in batch.keys()]
            batch = (
                batch.select(*keys)
                if isinstance(batch, TensorDictBase)
                else {k: batch[k] for k in keys}
            )
        self._call("update_batch_priority", batch, priority)

    def append_transform(self, transform: Any, *, invert: bool = False) -> Any:
        """Append a transform to the hosted buffer's chain."""
        self._cache.pop("filters_rows", None)
        return super().append_transform(transform, invert=invert)

    def insert_transform(self, index: int, transform: Any, *, invert: bool = False) -> Any:
        """Insert a transform at ``index`` of the hosted buffer's chain."""
        self._cache.pop("filters_rows", None)
        return super().insert_transform(index, transform, invert=invert)
