"""The lock and condition of a buffer: writes, draws and waits for data synchronize here."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from rbdata.sharing.cleanup import sweep
from rbdata.sharing.components import Cursor, Draws, Rows
from rbdata.sharing.counters import SharedCounters
from rbdata.sharing.eligibility import redraws_freely
from rbdata.sharing.file_lock import FileLock
from rbdata.sharing.in_flight import InFlightRows, Journal, Ranges
from rbdata.sharing.lock import LocalThenShared, SharedCondition, SharedLock
from rbdata.sharing.reclaim import reclaim
from rbdata.sharing.robust_mutex import cross_process_lock

_REDRAWS = 3  # a reader draws again at most this often to avoid rows being copied
Drawn = TypeVar("Drawn", bound=tuple[torch.Tensor, Any])
#: the storage and writer whose rows a dead writer's reservation is reclaimed from
Parts = Callable[[], tuple[Rows, Cursor]]


class _BufferSync:
    """A reentrant lock and a condition on it, process-safe once :meth:`share` is called.

    Writers hold the lock and call :meth:`notify` after a write; readers that
    wait for data sleep in :meth:`wait_for` (never busy-loop). Pickling a
    thread-local instance gives a fresh lock (a lock cannot cross processes);
    a shared one pickles its cross-process lock (a file the kernel unlocks
    when its holder dies, :mod:`.file_lock`), so parent and children keep
    excluding each other and none waits on a dead one.

    Examples:
        >>> sync = _BufferSync()
        >>> with sync.lock:
        ...     sync.notify()
        >>> sync.wait_for(lambda: True, timeout=0.0)
        True
    """

    def __init__(self) -> None:
        #: whether the lock is a multiprocessing lock (see :meth:`share`); a plain attribute,
        #: not a property: every draw and read asks
        self.shared = False
        self.lock: Any = threading.RLock()
        self.cond: Any = threading.Condition(self.lock)
        #: what draws take: the thread lock (a draw changes only this process's sampler)
        self.draw_lock: Any = self.lock
        self._cross: SharedLock | None = None
        self._parts: Parts | None = None

    def share(self) -> None:
        """Switch to a lock and condition that other processes share.

        Forked and spawned children, queues and named exports all carry them
        (the lock by its file). A lock that is shared already is kept. What
        crashed rbdata processes of this user left in shared memory is swept
        first (:func:`~.cleanup.sweep`).
        """
        if self.shared:
            return
        sweep()
        version = SharedCounters([0, 0])  # the version, the notifications
        version.share()
        self._adopt(cross_process_lock(), version, InFlightRows())

    def _adopt(
        self, lock: FileLock, version: SharedCounters, in_flight: InFlightRows | None
    ) -> None:
        local = threading.RLock()
        self._cross = SharedLock(lock, version, in_flight)
        self.lock = LocalThenShared(local, self._cross)
        self.cond = SharedCondition(self.lock)
        self.draw_lock, self.shared = local, True
        self._bind()

    def bind(self, parts: Parts) -> None:
        """Reclaim a dead writer's reservations from ``parts()`` (the buffer's storage, writer).

        The holder of the lock that finds them does it (:mod:`.reclaim`);
        without a binding they are freed with a warning.
        """
        self._parts = parts
        self._bind()

    def _bind(self) -> None:
        parts = self._parts
        if self._cross is None or parts is None:
            return

        def reclaim_from_parts(ranges: Ranges, journal: Journal | None, locked: bool) -> None:
            storage, writer = parts()
            reclaim(storage, writer, ranges, journal, locked)

        self._cross.reclaim = reclaim_from_parts

    @property
    def in_flight(self) -> InFlightRows | None:
        """The rows reserved writers copy outside the lock (None: unshared, or pickled before)."""
        return None if self._cross is None else self._cross.in_flight

    def acquire_to_reserve(self) -> None:
        """Take the locks to reserve rows (shared buffers only; see :mod:`.in_flight`)."""
        self.lock.acquire_to_reserve()

    def release_reserved(self) -> None:
        """Release a hold of :meth:`acquire_to_reserve`."""
        self.lock.release_reserved()

    def overwriting(self, ranges: Ranges) -> int | None:
        """Journal a write under the lock of the rows ``ranges`` (:func:`~.ring.ring_ranges`).

        Call it holding :attr:`lock`, just before the write copies rows, and
        :meth:`overwritten` with what it returned once the write is told to
        the sampler (``finally``). A writer killed in between has its write
        dropped by the next holder (:mod:`.reclaim`): the counters go back and
        the rows it overwrote show whole rows. None (nothing to do): an
        unshared buffer, or rows that live in this process only.
        """
        journal = self._journal()
        if journal is None:
            return None
        in_flight, cells, length, _ = journal
        return in_flight.overwriting(ranges, cells[0], cells[1], length)

    def overwriting_next(self, n: int) -> int | None:
        """:meth:`overwriting` for the ``n`` rows at the writer's cursor (a ring write)."""
        journal = self._journal()
        if journal is None:
            return None
        in_flight, cells, length, capacity = journal
        start = cells[0]
        stop = start + min(n, capacity)
        ranges = (start, stop, 0, 0) if stop <= capacity else (start, capacity, 0, stop - capacity)
        return in_flight.overwriting(ranges, start, cells[1], length)

    def _journal(self) -> tuple[InFlightRows, Any, int, int] | None:
        """``(in-flight table, writer's counter cells, length, capacity)`` for a journaled write.

        None: an unshared buffer, or a list storage's rows and counters, which
        nobody else sees.
        """
        cross, parts = self._cross, self._parts
        if cross is None or parts is None or cross.in_flight is None:
            return None
        storage, writer = parts()
        counters, length = writer.counters, storage.counters
        if counters.process_local or length.process_local:
            return None
        return cross.in_flight, counters.cells, length.cells[0], storage.max_size_along_dim0

    def overwritten(self, slot: int | None) -> None:
        """The write journaled by :meth:`overwriting` (its ``slot``) is done."""
        if slot is not None:
            cross = self._cross
            assert cross is not None and cross.in_flight is not None
            cross.in_flight.release(slot)

    def read(self, copy: Callable[[], Any], rows: torch.Tensor | None = None) -> Any:
        """``copy()`` (of ``rows``) made while nothing is written: lock-free across processes.

        Unshared, it runs under the lock; shared, see :meth:`SharedLock.read`.
        """
        if self._cross is None:
            with self.lock:
                return copy()
        return self._cross.read(copy, rows)

    def draw_clear(self, draw: Callable[[], Drawn], sampler: Draws) -> Drawn:
        """``draw()``'s batch ``(index, info)``, drawn again while it holds rows being copied.

        A batch holding rows another process is still copying would wait for
        that copy when read: where a draw again is as likely as the first
        (:func:`~rbdata.sharing.eligibility.redraws_freely`), the batch is drawn
        again instead, at most :data:`_REDRAWS` times.
        """
        drawn = draw()
        in_flight = self.in_flight
        if in_flight is None or not redraws_freely(sampler):
            return drawn
        for _ in range(_REDRAWS):
            if not in_flight.holds(drawn[0].reshape(-1)):
                break
            drawn = draw()
        return drawn

    def peek(self, value: Callable[[], Any]) -> Any:
        """``value()`` of counters (a length), lock-free across processes (:meth:`SharedLock.peek`).

        Unshared, it runs under the lock; shared, under this process's thread lock only.
        """
        if self._cross is None:
            with self.lock:
                return value()
        with self.draw_lock:
            return self._cross.peek(value)

    def settled(self, value: Callable[[], Any]) -> Any:
        """``value()`` of counters, a dead writer's reservations dropped first (shared buffers).

        Unshared, it is ``value()``; shared, :meth:`peek` (which reclaims them).
        """
        if self._cross is None:
            return value()
        return self.peek(value)

    def unshare(self) -> None:
        """Back to a thread lock (``share(False)``): other processes no longer exclude this one."""
        _BufferSync.__init__(self)

    def renew(self) -> None:
        """Give this copy a fresh thread lock (a forked child's private copy of a buffer).

        A child forked while another thread of the parent held the lock would
        inherit it locked forever; its copy of an unshared buffer is private,
        so a fresh lock is correct. Shared locks are kept.
        """
        if not self.shared:
            _BufferSync.__init__(self)

    def guard(self, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None:
        """Bound every wait for the shared lock by ``alive()`` (a process on the same machine).

        A process that maps a buffer another process owns (see
        :mod:`rbdata.sharing.handle`) would otherwise go on writing into the
        memory of a buffer nobody samples: guarded, it checks ``alive()`` every
        quarter second of waiting and raises ``dead()`` once it fails.
        """
        if self._cross is not None:
            self._cross.guard(alive, dead)

    def notify(self) -> None:
        """Wake every thread inside :meth:`wait_for` (takes the lock)."""
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (checked at every notify) or ``timeout`` passes."""
        if self.shared:
            return bool(self.cond.wait_for(predicate, timeout))
        with self.cond:
            return bool(self.cond.wait_for(predicate, timeout))

    def __getstate__(self) -> dict[str, Any]:
        if not self.shared:
            return {"shared": False}
        assert self._cross is not None
        return {
            "shared": True,
            "lock": self._cross.inner,
            "version": self._cross.version,
            "in_flight": self._cross.in_flight,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        _BufferSync.__init__(self)
        if state["shared"]:
            self._adopt(state["lock"], state["version"], state.get("in_flight"))
