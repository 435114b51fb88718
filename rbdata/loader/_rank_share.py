"""One replay buffer for every DDP rank of a node: one sampler, one global batch a step.

Local rank 0 (the *owner*) holds the buffer and its sampler; every other
rank maps the same memory (:mod:`rbdata.sharing.fd_handoff`: the rows,
counters and lock by file descriptor, no copy) and reads rows from it
itself. Which rows a step holds is drawn in one place, the owner's
:class:`GlobalDraws` (an authenticated socket server, as the DataLoader
workers' draw service): global draw ``k`` is one draw of ``batch_size *
world_size`` rows from the one sampler (prioritized: one draw over the
whole priority mass, importance weights normalised over the global batch),
made once every rank asked for it, and rank ``r`` takes share ``r`` of it
(:func:`share_of`). Draw ``k`` being made only once all ranks asked for it,
each rank's priority updates of the steps before (sent before it asks)
are in, so a seeded buffer gives the same global draws whatever the
timing.

Each rank's loader serves a :class:`RankShareBuffer`: the buffer of the
:class:`~rbdata.buffers.protocol.ServableBuffer` protocol whose ``draw`` is
the rank's share of the next global draw; its writes (a collector on any
rank) land in the shared rows, which the owner's sampler follows; its
priority updates and policy versions go to the owner's buffer.

Waits are bounded: a rank waits for the others' requests at most
:data:`RANK_WAIT_S` (torch.distributed's default timeout) and at once
raises when a rank's process is gone; a rank whose owner died gets end of
file and raises.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDict, TensorDictBase
from torch.utils.hooks import RemovableHandle

from rbdata._component.prefetch_state import draw_record, read_draw_records
from rbdata.buffers.protocol import Draw, ReadableByWorkers, ServableBuffer, StatsSource
from rbdata.buffers.tensordict import TensorDictReplayBuffer
from rbdata.loader._socket_server import ServerAccess, SocketServer, connect, hang_up, request
from rbdata.loader._workers import readable_by_workers, worker_copy
from rbdata.sharing.fd_handoff import dump_with_fds, load_with_fds, sender_key
from rbdata.sharing.liveness import alive, this_process

__all__ = [
    "RANK_WAIT_S",
    "GlobalDraws",
    "RankShareAccess",
    "RankShareBuffer",
    "SplitsDraws",
    "make_shareable",
    "share_of",
]

_log = logging.getLogger("rbdata.loader")

#: seconds a rank waits for the other ranks (torch.distributed's default timeout)
RANK_WAIT_S = 1800.0
#: global draws kept for the ranks behind and for checkpoints
_HISTORY = 4096
#: how often a waiting rank checks that the ranks it waits for still run
_ALIVE_CHECK_S = 1.0
#: the entries of a loader state that are the pass's, not the sampler's
_PASS_KEYS = frozenset({"format", "position", "pass_over", "pending", "rate_limiter", "rank_share"})
_STATE_FORMAT = 1


@dataclass(frozen=True)
class RankShareAccess:
    """What a rank needs to join the owner's buffer (sent to the ranks by a broadcast).

    Attributes:
        server: the owner's :class:`GlobalDraws` address and key.
        sender_key: the owner's ``multiprocessing`` authkey (descriptors are fetched with it).
        owner: the owner's ``(pid, start time)``.
        world_size: the ranks sharing the buffer.
    """

    server: ServerAccess
    sender_key: bytes
    owner: tuple[int, int]
    world_size: int


def share_of(draw: Draw, rank: int, world_size: int) -> Draw:
    """Rank ``rank``'s share of a global draw: its ``rank``-th of ``world_size`` near-equal parts.

    A draw of fewer rows than ranks (the end of a without-replacement pass)
    gives rank ``r`` row ``r % rows``: every rank trains on a batch, the
    ranks stay in step.

    Examples:
        >>> import torch
        >>> from rbdata.buffers.protocol import Draw
        >>> draw = Draw(torch.arange(6), {"index": torch.arange(6)})
        >>> [share_of(draw, r, 2).index.tolist() for r in range(2)]
        [[0, 1, 2], [3, 4, 5]]
        >>> [share_of(Draw(torch.tensor([7]), {}), r, 2).index.tolist() for r in range(2)]
        [[7], [7]]
    """
    rows = int(draw.index.shape[0]) if draw.index.ndim else 1
    bounds = [rows * r // world_size for r in range(world_size + 1)]
    lo, hi = bounds[rank], bounds[rank + 1]
    if 0 < rows < world_size:
        lo = rank % rows
        hi = lo + 1
    info = {key: value[lo:hi] for key, value in draw.info.items()}
    return Draw(draw.index[lo:hi], info, draw.ends_pass)


def make_shareable(buffer: ServableBuffer) -> ServableBuffer:
    """``buffer`` with its rows in memory other processes map (``share()``), or a ValueError.

    A :class:`~rbdata.ReplayBuffer` over a CPU tensor storage
    (``LazyTensorStorage``, ``LazyMemmapStorage``, ``TensorStorage``) whose
    writer writes in ring order is shared in place (as ``shared=True``
    would); anything else is refused, saying what to pass.
    """
    what = (
        "share_across_ranks=True needs a ReplayBuffer (or a TensorDict/prioritized variant) "
        "over a CPU tensor storage that processes can share: LazyTensorStorage (shared=True or "
        "shared_init=True, or neither: the data module shares it), LazyMemmapStorage or "
        "TensorStorage, with a ring writer (RoundRobinWriter), no prefetch and no "
        "consume_after_n_samples"
    )
    if not isinstance(buffer, ReadableByWorkers) or not isinstance(buffer, _Shareable):
        raise ValueError(f"{what}; got {type(buffer).__name__}.")
    if not buffer.writer.writes_in_ring_order:
        raise ValueError(f"{what}; its writer is {type(buffer.writer).__name__}.")
    consume = buffer.sampler.consume_after_n
    if consume is not None:  # the other ranks' writes would not know the consumed slots
        raise ValueError(f"{what}; got consume_after_n_samples={consume}.")
    try:
        buffer.share()
    except (RuntimeError, TypeError, ValueError) as error:
        raise ValueError(f"{what}; sharing it failed: {error}") from error
    if not readable_by_workers(buffer.storage):
        buffer.share(False)  # back to a lock of this process (the failed call changes nothing)
        kind = type(buffer.storage).__name__
        raise ValueError(f"{what}; got a {kind} other processes cannot map.")
    return buffer


@runtime_checkable
class _Shareable(Protocol):
    """A buffer that moves itself to shared memory and bounds its waits for the owner."""

    @property
    def writer(self) -> Any: ...

    def share(self, shared: bool = True) -> Any: ...

    def guard_lock(self, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None: ...


@runtime_checkable
class SplitsDraws(Protocol):
    """A buffer whose draws are one rank's shares of global draws (``RankShareBuffer``).

    Its loader state is the global one (:meth:`pass_state`): the owner's
    sampler state and the global draws not handed out yet, which every rank
    can resume from, whatever the world size.
    """

    def pass_state(self, engine_state: dict[str, Any]) -> dict[str, Any]:
        """The loader's state (``engine_state``: this rank's pass) in global terms."""
        ...

    def pending_of_rank(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """This rank's share of the global draws :meth:`pass_state` saved."""
        ...


class GlobalDraws(SocketServer):
    """The owner's draws: global draw ``k`` made once every rank asked for it (module doc).

    Args:
        buffer: the owner's buffer (its sampler draws).
        world_size: the ranks sharing it.
        rank_wait_s: seconds a draw waits for the other ranks.
    """

    def __init__(
        self, buffer: ServableBuffer, world_size: int, rank_wait_s: float = RANK_WAIT_S
    ) -> None:
        self.buffer = buffer
        self.world_size = world_size
        self.rank_wait_s = rank_wait_s
        self._cond = threading.Condition(threading.RLock())
        self._drawn: dict[int, Draw] = {}
        self._asked: dict[int, set[int]] = {}
        self._next = 0  # the next global draw to make
        self._base = 0  # where the sequence (re)started: ranks resumed elsewhere wait
        self._attempt = 0  # moves when a draw found nothing sampleable
        self._ranks: dict[int, tuple[int, int]] = {0: this_process()}
        self._cancelled: dict[int, int] = {}  # rank -> the draw it no longer waits for
        super().__init__("rank-draws")
        #: what the other ranks need to join (broadcast to them)
        self.rank_access = RankShareAccess(self.access, sender_key(), this_process(), world_size)

    def close(self) -> None:
        """Stop serving; draws waiting for other ranks end with an error."""
        super().close()
        with self._cond:
            self._cond.notify_all()

    # ------------------------------------------------------------ requests
    def handle(self, request: tuple[Any, ...]) -> tuple[Any, ...]:
        """Serve a rank: hello, attach, draw, priority, version or snapshot."""
        kind = request[0]
        if kind == "hello":
            _, rank, identity = request
            with self._cond:
                self._ranks[int(rank)] = (int(identity[0]), int(identity[1]))
            return ("ok",)
        if kind == "attach":
            return ("attach", dump_with_fds(worker_copy(self.buffer)), self.buffer_prioritized)
        if kind == "draw":
            _, rank, number, base, batch_size = request
            got = self.draw(int(rank), int(number), int(base), int(batch_size))
            return ("empty",) if got is None else ("draw", got.index, got.info, got.ends_pass)
        if kind == "priority":
            self.buffer.update_batch_priority(request[1], request[2])
            return ("ok",)
        if kind == "version":
            self.buffer.publish_policy_version(int(request[1]))
            return ("ok",)
        if kind == "snapshot":
            return ("snapshot", self.snapshot(int(request[1])))
        if kind == "cancel":
            self.cancel(int(request[1]), int(request[2]))
            return ("ok",)
        raise ValueError(f"unknown request {kind!r}")

    @property
    def buffer_prioritized(self) -> bool:
        """Whether priority updates change the draws."""
        return bool(self.buffer.prioritized)

    # ------------------------------------------------------------ draws
    def draw(self, rank: int, number: int, base: int, batch_size: int) -> Draw | None:
        """Global draw ``number`` (of ``batch_size * world_size`` rows), or None: nothing to draw.

        Waits (bounded) until the sequence restarted at ``base`` like the
        asking rank's (a resume) and every rank asked for ``number``.

        Raises:
            TimeoutError: if the other ranks did not ask within ``rank_wait_s``.
            RuntimeError: if a rank's process is gone, or the server closed.
        """
        deadline = time.monotonic() + self.rank_wait_s
        with self._cond:

            def cancelled() -> bool:
                return self._cancelled.get(rank) == number

            self._wait(
                lambda: self._base == base or cancelled(),
                deadline,
                lambda: (
                    f"rank {rank} resumed the shared buffer's draws at global draw {base}, but "
                    f"local rank 0 is at {self._base}: every rank must resume from the same "
                    "checkpoint"
                ),
                (),
            )
            if number in self._drawn:
                return self._drawn[number]
            if cancelled():
                del self._cancelled[rank]
                return None
            if number != self._next:
                raise RuntimeError(
                    f"rank {rank} asked for global draw {number}, but the next one is {self._next} "
                    "(draws older than the history, or a rank that skipped one)"
                )
            asked = self._asked.setdefault(number, set())
            asked.add(rank)
            attempt = self._attempt
            if len(asked) >= self.world_size:
                return self._make(number, batch_size * self.world_size)
            self._cond.notify_all()
            self._wait(
                lambda: number in self._drawn or self._attempt != attempt or cancelled(),
                deadline,
                lambda: (
                    f"global draw {number}: ranks {sorted(set(range(self.world_size)) - asked)} "
                    f"did not ask for it within {self.rank_wait_s:g} s (a rank stopped training "
                    "or hangs)"
                ),
                tuple(r for r in range(self.world_size) if r not in asked),
            )
            if number not in self._drawn and cancelled():
                del self._cancelled[rank]
                asked.discard(rank)
            return self._drawn.get(number)

    def cancel(self, rank: int, number: int) -> None:
        """Rank ``rank`` stops waiting for draw ``number`` (its loader stopped): None for it."""
        with self._cond:
            self._cancelled[rank] = number
            self._cond.notify_all()

    def _make(self, number: int, rows: int) -> Draw | None:
        """Draw ``number`` now (every rank asked; the lock held); None if nothing is sampleable."""
        buffer = self.buffer
        self._asked.pop(number, None)
        with buffer.lock:
            draw = buffer.draw(rows) if len(buffer) else Draw.empty()
        if not draw.index.numel():
            self._attempt += 1
            self._cond.notify_all()
            return None
        self._drawn[number] = draw
        self._drawn.pop(number - _HISTORY, None)
        self._next = number + 1
        self._cond.notify_all()
        return draw

    def _wait(
        self,
        ready: Callable[[], bool],
        deadline: float,
        message: Callable[[], str],
        waited_for: tuple[int, ...],
    ) -> None:
        """Wait (the condition held) until ``ready()``; raise on the deadline or a dead rank."""
        while not ready():
            if self.closed:
                raise RuntimeError("the shared buffer's draw server closed (teardown)")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(message())
            dead = [r for r in waited_for if r in self._ranks and not alive(*self._ranks[r])]
            if dead:
                raise RuntimeError(f"{message()}: the process of rank {dead[0]} is gone")
            self._cond.wait(min(left, _ALIVE_CHECK_S))

    # ------------------------------------------------------------ checkpoints
    def snapshot(self, first: int) -> dict[str, Any]:
        """The sampler's state now and the global draws from ``first`` on (made since)."""
        with self._cond:
            missing = [k for k in range(first, self._next) if k not in self._drawn]
            if missing:
                raise RuntimeError(f"global draws {missing[:3]}... were made too long ago to save")
            buffer = self.buffer
            with buffer.lock:
                sampler = dict(buffer.sampling_state())
            records = [
                draw_record(d.index, d.info, d.ends_pass)
                for d in (self._drawn[k] for k in range(first, self._next))
            ]
            return {"sampler": sampler, "records": records}

    def restore(self, state: dict[str, Any], first: int, draws: list[Draw]) -> None:
        """Load the sampler ``state``; ``draws`` were global draws ``first, first + 1, ...``.

        The sequence restarts after them (the ranks hand them out again from
        their own states, and a checkpoint before they did saves them again).
        """
        with self._cond:
            buffer = self.buffer
            with buffer.lock:
                buffer.load_sampling_state(state)
            self._drawn = {first + i: draw for i, draw in enumerate(draws)}
            self._asked.clear()
            self._next = self._base = first + len(draws)
            self._cond.notify_all()


class _Draws(Protocol):
    """What a rank's buffer asks of the owner: in process (the owner) or over the socket."""

    def draw(self, rank: int, number: int, base: int, batch_size: int) -> Draw | None: ...

    def snapshot(self, first: int) -> dict[str, Any]: ...

    def cancel(self, rank: int, number: int) -> None: ...


class _RemoteDraws:
    """A rank's connections to the owner's :class:`GlobalDraws`.

    Draws go through one connection (a draw may wait for the other ranks),
    everything else through another, so that a priority update or a cancel
    never queues behind a waiting draw.
    """

    def __init__(self, access: RankShareAccess, rank: int) -> None:
        self.access = access
        self.rank = rank
        self._draw_lock = threading.Lock()
        self._control_lock = threading.Lock()
        self._draws: Connection | None = connect(access.server)
        self._control: Connection | None = connect(access.server)
        self.call(("hello", rank, this_process()))

    def call(self, message: tuple[Any, ...]) -> tuple[Any, ...]:
        """One request to the owner (not a draw)."""
        with self._control_lock:
            return self._request(self._control, message)

    def _request(self, conn: Connection | None, message: tuple[Any, ...]) -> tuple[Any, ...]:
        if conn is None:
            raise RuntimeError("this rank's connection to the shared buffer was closed")
        return request(conn, message, RANK_WAIT_S + 60.0, "local rank 0's shared buffer")

    def draw(self, rank: int, number: int, base: int, batch_size: int) -> Draw | None:
        with self._draw_lock:
            reply = self._request(self._draws, ("draw", rank, number, base, batch_size))
        return None if reply[0] == "empty" else Draw(reply[1], dict(reply[2]), bool(reply[3]))

    def snapshot(self, first: int) -> dict[str, Any]:
        state: dict[str, Any] = self.call(("snapshot", first))[1]
        return state

    def cancel(self, rank: int, number: int) -> None:
        """Tell the owner this rank no longer waits for draw ``number``."""
        with contextlib.suppress(RuntimeError, TimeoutError):  # the owner is gone: done
            self.call(("cancel", rank, number))

    def close(self) -> None:
        with self._control_lock:
            conns = (self._draws, self._control)
            self._draws = self._control = None
        for conn in conns:  # a draw waiting on its connection gets end of file
            if conn is not None:
                hang_up(conn)
                conn.close()


class RankShareBuffer:
    """One DDP rank's side of the buffer every rank of its node shares (see the module doc).

    It serves the :class:`~rbdata.buffers.protocol.ServableBuffer` protocol
    to the rank's loader and callback: :meth:`draw` is the rank's share of
    the next global draw, :meth:`gather` reads the shared rows,
    :meth:`extend` writes into them (every rank sees the rows), and priority
    updates and policy versions reach the owner's buffer. Build one with
    :meth:`owned` on local rank 0 and :meth:`attached` on the others.

    Examples:
        >>> import torch
        >>> from rbdata import LazyTensorStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(16))
        >>> _ = rb.extend(torch.arange(8))
        >>> owner = RankShareBuffer.owned(rb, world_size=1)  # a world of one rank
        >>> owner.draw(4).rows, owner.owner
        (4, True)
        >>> owner.close()

    Attributes:
        rank: this rank (its share of each global draw).
        world_size: the ranks sharing the buffer.
        owner: whether this is local rank 0, which holds the sampler.
    """

    def __init__(
        self,
        local: ServableBuffer,
        rank: int,
        world_size: int,
        draws: _Draws,
        prioritized: bool,
        server: GlobalDraws | None,
    ) -> None:
        self._local = local
        self.rank = rank
        self.world_size = world_size
        self.owner = server is not None
        self._draws = draws
        self._server = server
        self._prioritized = prioritized
        self._lock = threading.RLock()
        self._next = 0  # the next global draw this rank takes its share of
        self._base = 0  # where the sequence (re)started
        self._info_keys: tuple[str, ...] = ("index", "index_generation")
        self._closed = False
        self._waiting: int | None = None  # the global draw this rank waits for

    @classmethod
    def owned(
        cls, buffer: ServableBuffer, world_size: int, rank_wait_s: float = RANK_WAIT_S
    ) -> RankShareBuffer:
        """Local rank 0's side: ``buffer`` is shared and its draws served to the other ranks.

        Raises:
            ValueError: if ``buffer`` cannot be shared (:func:`make_shareable`).
        """
        shared = make_shareable(buffer)
        server = GlobalDraws(shared, world_size, rank_wait_s)
        return cls(buffer, 0, world_size, server, bool(buffer.prioritized), server)

    @classmethod
    def attached(cls, access: RankShareAccess, rank: int) -> RankShareBuffer:
        """Rank ``rank``'s side: the owner's buffer mapped here (its memory, no copy)."""
        remote = _RemoteDraws(access, rank)
        local, prioritized = _attach(remote, access)
        return cls(local, rank, access.world_size, remote, prioritized, None)

    @property
    def rank_access(self) -> RankShareAccess:
        """What the other ranks need to attach (local rank 0 only)."""
        if self._server is None:
            raise RuntimeError("only local rank 0 serves the shared buffer")
        return self._server.rank_access

    @property
    def local(self) -> ServableBuffer:
        """This process's buffer: the owner's own on local rank 0, a map of it elsewhere."""
        return self._local

    def reattach(self) -> None:
        """Map the owner's buffer again (after it loaded a checkpoint); nothing on the owner."""
        if isinstance(self._draws, _RemoteDraws):
            self._local, self._prioritized = _attach(self._draws, self._draws.access)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Stop serving the other ranks (owner) or close the connection to the owner."""
        self._closed = True
        if self._server is not None:
            self._server.close()
        if isinstance(self._draws, _RemoteDraws):
            self._draws.close()

    # ------------------------------------------------------------ the protocol
    @property
    def batch_size(self) -> int | None:
        """The buffer's default batch size (a rank's share)."""
        return self._local.batch_size

    @property
    def write_count(self) -> int:
        """Items written so far by any rank."""
        return self._local.write_count

    @property
    def prioritized(self) -> bool:
        """Whether the owner's sampler is prioritized."""
        return self._prioritized

    @property
    def lock(self) -> Any:
        """This rank's lock around its draws and loader state."""
        return self._lock

    def __len__(self) -> int:
        return len(self._local)

    def draw(self, batch_size: int) -> Draw:
        """This rank's share (``batch_size`` rows) of the next global draw; empty: none yet."""
        with self._lock:
            self._waiting = self._next
            try:
                got = self._draws.draw(self.rank, self._next, self._base, batch_size)
            finally:
                self._waiting = None
            if got is None:
                return Draw.empty()
            self._next += 1
            self._info_keys = tuple(got.info)
            return share_of(got, self.rank, self.world_size)

    def gather(self, draw: Draw) -> Any:
        """Read the rows of ``draw`` from the shared memory (a copy)."""
        return self._local.gather(draw)

    def refilter(self, batch: Any) -> Any:
        """Re-apply the row filters of the buffer (their live policy version)."""
        return self._local.refilter(batch)

    def sampling_state(self) -> dict[str, Any]:
        """The owner's sampler state, with no global draw pending."""
        return self.pass_state({"position": 0, "pass_over": False, "pending": []})

    def load_sampling_state(self, state: dict[str, Any]) -> None:
        """Continue after the global draws of ``state`` (the owner loads the sampler state).

        A state saved by a single-process loader (no ``rank_share`` entry)
        counts as one of world size 1.
        """
        first, records, _ = _global_part(state)
        base = first + len(records)
        with self._lock:
            if self._server is not None:
                draws = [
                    Draw(index, info, ends)
                    for index, info, ends in read_draw_records(records, "the global draws")
                ]
                self._server.restore(state, first, draws)
            self._next = self._base = base

    def pass_state(self, engine_state: dict[str, Any]) -> dict[str, Any]:
        """The loader's state in global terms (see :class:`SplitsDraws`)."""
        with self._lock:
            first = self._next - len(engine_state["pending"])
            snap = self._draws.snapshot(first)
        return {
            **snap["sampler"],
            "position": engine_state["position"],
            "pass_over": engine_state["pass_over"],
            "pending": [],
            "rank_share": {
                "format": _STATE_FORMAT,
                "world_size": self.world_size,
                "next": first,
                "records": snap["records"],
            },
        }

    def pending_of_rank(self, state: dict[str, Any]) -> list[dict[str, Any]]:
        """This rank's shares of the saved global draws (none after a world-size change)."""
        _, records, world_size = _global_part(state)
        if world_size != self.world_size:
            if records:
                _log.info(
                    "rbdata: resuming the shared buffer with %d ranks from a checkpoint of %d: the "
                    "%d global draws it had made ahead are dropped (the sampler continues after "
                    "them)",
                    self.world_size,
                    world_size,
                    len(records),
                )
            return []
        shares = (
            share_of(Draw(index, info, ends), self.rank, self.world_size)
            for index, info, ends in read_draw_records(records, "state['rank_share']['records']")
        )
        return [draw_record(s.index, s.info, s.ends_pass) for s in shares]

    def wait_for_data(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds or ``timeout`` passes (see ServableBuffer)."""
        return self._local.wait_for_data(predicate, timeout)

    def notify_waiters(self) -> None:
        """Wake this process's waiters; a draw waiting for the other ranks ends empty."""
        self._local.notify_waiters()
        number = self._waiting
        if number is not None:
            self._draws.cancel(self.rank, number)

    def register_stats_source(self, source: StatsSource) -> RemovableHandle:
        """Merge ``source()``'s counters into this rank's :meth:`stats`."""
        return self._local.register_stats_source(source)

    def stats(self) -> dict[str, Any]:
        """The buffer's counters, as this rank sees them."""
        return self._local.stats()

    def update_batch_priority(self, batch: Any, priority: torch.Tensor) -> None:
        """Apply new priorities to the rows of ``batch`` in the owner's sampler."""
        if self._server is not None or not self._prioritized:
            self._local.update_batch_priority(batch, priority)
            return
        if isinstance(batch, TensorDictBase):
            keys = batch.keys()
            batch = batch.select(*(k for k in self._info_keys if k in keys))
        self._call(("priority", batch, priority))

    def publish_policy_version(self, version: int) -> None:
        """Publish ``version`` here and to the owner's buffer."""
        self._local.publish_policy_version(version)
        if self._server is None:
            self._call(("version", int(version)))

    def extend(self, data: Any) -> torch.Tensor:
        """Write ``data`` into the shared rows (every rank sees them).

        On a rank other than the owner, the priorities the data carries (a
        prioritized TensorDict buffer's ``priority_key``) go to the owner's
        sampler: this rank's copy of the buffer draws nothing itself.
        """
        index = self._local.extend(data)
        if self._server is None and self._prioritized:
            self._send_written_priority(data, index)
        return index

    def _send_written_priority(self, data: Any, index: torch.Tensor) -> None:
        local = self._local
        if not isinstance(local, TensorDictReplayBuffer) or not isinstance(data, TensorDictBase):
            return
        priority = data.get(local.priority_key, None)
        if priority is None:
            return  # none given: the owner's sampler gave the rows its default
        index = index.reshape(-1)
        keep = index >= 0
        priority = priority.reshape(index.numel(), -1).amax(-1)[keep]
        self._call(("priority", TensorDict({"index": index[keep]}, [priority.numel()]), priority))

    def set_rng(self, generator: torch.Generator | None) -> None:
        """Seed the one sampler (local rank 0; the other ranks draw nothing themselves)."""
        if self._server is not None:
            self._local.set_rng(generator)

    def dumps(self, path: str | os.PathLike[str]) -> None:
        """Save the buffer (local rank 0 holds it; a checkpoint saves it once)."""
        self._owner_only("dumps")
        self._local.dumps(path)

    def loads(self, path: str | os.PathLike[str]) -> None:
        """Load a dump into the buffer (local rank 0; the others :meth:`reattach` after)."""
        self._owner_only("loads")
        self._local.loads(path)

    def _owner_only(self, name: str) -> None:
        if self._server is None:
            raise RuntimeError(
                f"{name}() of the buffer the DDP ranks share runs on local rank 0, which holds "
                f"it; this is rank {self.rank}."
            )

    def _call(self, message: tuple[Any, ...]) -> None:
        draws = self._draws
        if isinstance(draws, _RemoteDraws):
            draws.call(message)


def _attach(remote: _RemoteDraws, access: RankShareAccess) -> tuple[ServableBuffer, bool]:
    """The owner's buffer mapped in this process, and whether it is prioritized."""
    reply = remote.call(("attach",))
    local = load_with_fds(reply[1], access.sender_key)
    if not isinstance(local, ServableBuffer) or not isinstance(local, _Shareable):
        raise TypeError(f"the owner sent a {type(local).__name__}, not a shared buffer")
    pid, start = access.owner

    def dead() -> Exception:
        return RuntimeError(f"local rank 0 (pid {pid}), which holds the shared buffer, is gone")

    local.guard_lock(lambda: alive(pid, start), dead)
    return local, bool(reply[2])


def _global_part(state: dict[str, Any]) -> tuple[int, list[Any], int]:
    """``(first global draw, its records, world size)`` of a loader state."""
    part = state.get("rank_share")
    if part is None:  # a single-process loader's: its pending batches, whole
        return 0, list(state.get("pending", [])), 1
    if not isinstance(part, dict) or part.get("format") != _STATE_FORMAT:
        raise ValueError(
            f"state['rank_share'] must be a dict of format {_STATE_FORMAT}, got {part!r:.80}."
        )
    first, world_size = part.get("next"), part.get("world_size")
    if type(first) is not int or first < 0 or type(world_size) is not int or world_size < 1:
        raise ValueError(
            "state['rank_share'] needs 'next' (an int >= 0) and 'world_size' (an int >= 1), "
            f"got {first!r} and {world_size!r}."
        )
    records = part.get("records", [])
    read_draw_records(records, "state['rank_share']['records']")
    return first, list(records), world_size
