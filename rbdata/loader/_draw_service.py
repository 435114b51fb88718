"""The draws of a ReplayDataset's DataLoader workers, made in the training process.

DataLoader worker processes (``num_workers > 0``) gather and transform
batches, the heavy part; which rows a batch holds is drawn here, in the
process that owns the buffer, by one sampler: the buffer's own. So every
sampler works with workers as it does in one process: priorities the
training step updates, consume-after-n counts, trajectory indexes that
follow new writes, without-replacement passes split between the workers.

The workers talk to a :class:`DrawService` over a Unix socket in the
abstract namespace (nothing on disk; a random key authenticates them). Each
worker's connection gets a thread here; draws are made under one lock,
strictly in batch order: batch ``k`` of a pass (worker ``k % num_workers``
gathers it, as the DataLoader hands batches out round-robin) is drawn after
batches ``0 .. k-1`` whoever asks first, so a seeded buffer ``generator``
gives the same batches whatever the timing.

A snapshot after batch ``k`` is the sampler's state plus the batches drawn
after ``k`` (their rows, drawn again after a resume): the workers' part of a
``StatefulDataLoader`` checkpoint. A resumed pass waits (a bounded time) for
every worker's snapshot and continues from the latest.
"""

from __future__ import annotations

import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from rbdata._component.prefetch_state import draw_record, read_draw_records
from rbdata.buffers.replay import ReplayBuffer
from rbdata.loader._pass import _PassEngine, _Record
from rbdata.loader._socket_server import ServerAccess, SocketServer

__all__ = ["DrawAccess", "DrawService"]

_log = logging.getLogger("rbdata.loader")

#: seconds a resumed pass waits for the snapshots of all its workers
RESUME_WAIT_S = 60.0
#: drawn batches kept for snapshots (batches in flight are far fewer)
_HISTORY = 4096


#: what a worker needs to reach the service: its address and key (pickled to workers)
DrawAccess = ServerAccess


@dataclass
class _Pass:
    """One DataLoader pass as the workers see it."""

    seed: int
    num_workers: int
    begun: dict[int, Any] = field(default_factory=dict)  # worker -> its restored snapshot
    resumed: bool = False
    ready: bool = True  # a resumed pass is not until its snapshots are in (or the wait ends)
    drawn: dict[int, _Record] = field(default_factory=dict)  # batch number -> record
    next_number: int = 0
    ended_at: int | None = None  # the first batch number past the pass's end


class DrawService(SocketServer):
    """Draws batches for DataLoader workers from ``engine``'s buffer, in batch order.

    The service holds the engine weakly (the engine holds its dataset): a
    dataset that is collected closes its service (``weakref.finalize``).

    Args:
        engine: the dataset's pass engine (its waits: ``min_size``, rate
            limiter, ``timeout``) over the buffer whose sampler draws.
    """

    def __init__(self, engine: _PassEngine) -> None:
        self._engine_ref = weakref.ref(engine)
        self._buffer = engine.buffer
        self._lock = threading.Condition(threading.RLock())
        self._pass: _Pass | None = None
        super().__init__("draws")

    def close(self) -> None:
        """Stop serving: workers still connected get end of file and raise."""
        if self.closed:
            return
        super().close()
        engine = self._engine_ref()
        if engine is not None:  # a draw waiting for data sees the stop
            engine.wake_waiters()
        with self._lock:
            self._lock.notify_all()

    @property
    def _engine(self) -> _PassEngine:
        engine = self._engine_ref()
        if engine is None:
            raise RuntimeError("the ReplayDataset these workers draw from was garbage-collected")
        return engine

    def handle(self, request: tuple[Any, ...]) -> tuple[Any, ...]:
        """Serve a worker's request: ``begin``, ``next``, ``snapshot`` or ``generations``."""
        kind = request[0]
        if kind == "begin":
            _, worker, num_workers, seed, restored = request
            self._begin(worker, num_workers, seed, restored)
            return ("ok",)
        if kind == "next":
            return self._next(int(request[1]))
        if kind == "snapshot":
            return ("snapshot", self._snapshot(int(request[1])))
        if kind == "generations":  # the stamps of rows now (a worker drops rewritten ones)
            return ("generations", self._generations(request[1]))
        raise ValueError(f"unknown request {kind!r}")

    # ------------------------------------------------------------ passes
    def _begin(self, worker: int, num_workers: int, seed: int, restored: Any) -> None:
        """Worker ``worker`` starts iterating: join the current pass, or start a new one."""
        with self._lock:
            current = self._pass
            if current is None or worker in current.begun or current.seed != seed:
                current = self._pass = _Pass(seed, num_workers)
            current.begun[worker] = restored
            if restored is not None and not current.resumed:
                current.resumed, current.ready = True, False
            if current.resumed and not current.ready and len(current.begun) >= num_workers:
                self._restore(current)
            self._lock.notify_all()

    def _wait_ready(self, current: _Pass) -> None:
        """A resumed pass: wait (bounded) for every worker's snapshot, then restore."""
        if current.ready:
            return
        self._lock.wait_for(lambda: current.ready or self._stop.is_set(), RESUME_WAIT_S)
        if not current.ready:
            _log.warning(
                "rbdata: %d of %d DataLoader workers resumed within %.0f s; continuing from the "
                "latest snapshot they sent",
                len(current.begun),
                current.num_workers,
                RESUME_WAIT_S,
            )
            self._restore(current)

    def _restore(self, current: _Pass) -> None:
        """Continue from the latest snapshot the workers of ``current`` sent."""
        snapshots = [
            s for s in current.begun.values() if isinstance(s, dict) and s.get("batch") is not None
        ]
        current.ready = True
        if not snapshots:
            return
        latest = max(snapshots, key=lambda s: int(s["batch"]))
        self._buffer.load_sampling_state(latest)
        first = int(latest["batch"]) + 1
        records = read_draw_records(latest["pending"], "snapshot['pending']")
        for i, (index, info, ends_pass) in enumerate(records):
            current.drawn[first + i] = _Record(index, info, ends_pass)
            if ends_pass:
                current.ended_at = first + i + 1
        current.next_number = first + len(records)
        if bool(latest["pass_over"]):
            current.ended_at = first
        engine = self._engine
        with engine.lock:
            engine.pending.clear()
            engine.position = current.next_number
            engine.pass_over = current.ended_at is not None

    # ------------------------------------------------------------ draws
    def _next(self, number: int) -> tuple[Any, ...]:
        """Batch ``number`` of the current pass (drawing those before it first), or its end."""
        with self._lock:
            current = self._pass
            if current is None:
                raise RuntimeError("a worker asked for a batch before it began a pass")
            self._wait_ready(current)
            while current.next_number <= number:
                if current.ended_at is not None or self._stop.is_set():
                    return ("end",)
                if not self._draw_one(current):
                    return ("end",)
            record = current.drawn.get(number)
            if record is None:
                if current.ended_at is not None and number >= current.ended_at:
                    return ("end",)
                raise RuntimeError(f"batch {number} was drawn too long ago to be served again")
            return ("draw", record.index, record.info)

    def _draw_one(self, current: _Pass) -> bool:
        """Draw the pass's next batch (with the dataset's waits); False at the pass's end."""
        engine = self._engine
        with engine.lock:
            engine.pending.clear()
            engine.position = current.next_number
            engine.pass_over = current.ended_at is not None
            engine.producer_done = False
        record = engine.produce(self._stop)
        with engine.lock:
            engine.pending.clear()
        if record is None:
            current.ended_at = current.next_number
            return False
        number = current.next_number
        current.drawn[number] = record
        current.next_number = number + 1
        current.drawn.pop(number - _HISTORY, None)
        if record.ends_pass:
            current.ended_at = number + 1
        return True

    def _generations(self, index: Any) -> Any:
        buffer = self._buffer
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"{type(buffer).__name__} has no slot generations")
        return buffer.writer.generations_of(index)

    # ------------------------------------------------------------ checkpoints
    def _snapshot(self, number: int) -> dict[str, Any]:
        """What resumes right after batch ``number``: the sampler now, the batches drawn since."""
        with self._lock:
            current = self._pass
            if current is None:
                raise RuntimeError("a worker asked for a snapshot before it began a pass")
            later = range(number + 1, current.next_number)
            missing = [k for k in later if k not in current.drawn]
            if missing:
                raise RuntimeError(f"batches {missing[:3]}... were drawn too long ago to save")
            records = [current.drawn[k] for k in later]
            state = dict(self._buffer.sampling_state())
            ended = current.ended_at is not None and current.ended_at <= number + 1
            state.update(
                batch=number,
                pass_over=ended,
                pending=[draw_record(r.index, r.info, r.ends_pass) for r in records],
            )
            return state
