"""The cross-process lock of a shared buffer, with a version that lets readers skip it.

Every process writing a shared buffer takes one multiprocessing lock. Readers
in other processes (a learner sampling, clients on a Ray actor's node) would
queue behind each other on it although they change nothing shared, so the
lock keeps a *version* in shared memory (a sequence lock): it is odd while
some process holds the lock, and moves on every hold. A reader copies rows
without the lock and keeps the copy only if the version was even and did
not move meanwhile (:meth:`SharedLock.read`); otherwise it copies again under
the lock. The version is written only by the lock's holder.

The process-local parts of a shared buffer (its sampler, its write follower)
are guarded by a thread lock taken before the shared one
(:class:`LocalThenShared`), so draws synchronize the threads of one process
only. The lock-free read relies on x86-64's ordering of plain loads and
stores; elsewhere readers take the lock.

A process that finds the lock taken tries it again for up to
:data:`_SPIN_S` before it sleeps on it: holds are a few microseconds (a
reservation), and on a machine with more runnable processes than cores a
sleeper is woken only when the scheduler next runs it, long after the lock
was free again. Four writers of small rows on two cores waited 22-57 us an
extend for the lock sleeping at once, and 3-10 us trying first.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from rbdata.sharing.counters import SharedCounters
from rbdata.sharing.in_flight import InFlightRows, RowProbe, Snapshot

__all__ = ["LocalThenShared", "SharedCondition", "SharedLock"]

T = TypeVar("T")
S = TypeVar("S")

_GUARD_SLICE_S = 0.25  # a guarded wait for the lock checks the owner this often
# how long a waiter tries the lock before sleeping on it (one core: the holder cannot run)
_SPIN_S = 30e-6 if (os.cpu_count() or 1) > 1 else 0.0
_OPTIMISTIC = platform.machine().lower() in ("x86_64", "amd64")
_TRIES = 3  # lock-free copies tried before a reader takes the lock
_WAIT_SLICE_S = 0.05  # longest sleep of a shared wait between two checks


class SharedLock:
    """A multiprocessing ``RLock`` and its version (see the module docstring).

    Args:
        inner: the multiprocessing lock.
        version: one shared int64 cell, odd while the lock is held.
        in_flight: the rows reserved writers copy outside the lock (None: writes copy
            under it).

    Examples:
        >>> import multiprocessing
        >>> from rbdata.sharing.counters import SharedCounters
        >>> lock = SharedLock(multiprocessing.get_context("spawn").RLock(), SharedCounters([0]))
        >>> with lock:
        ...     with lock:  # reentrant: the version moves on the outermost hold only
        ...         lock.version[0]
        1
        >>> lock.version[0], lock.read(lambda: "rows")
        (2, 'rows')
    """

    def __init__(
        self, inner: Any, version: SharedCounters, in_flight: InFlightRows | None = None
    ) -> None:
        self.inner, self.version = inner, version
        #: rows reserved writers copy without the lock (see :mod:`.in_flight`)
        self.in_flight = in_flight
        self._depth = 0  # holds by this process (only the holder changes it)
        self._alive: Callable[[], bool] | None = None
        self._dead: Callable[[], Exception] | None = None

    def guard(self, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None:
        """Bound waits for the lock: every quarter second ``alive()``, else raise ``dead()``."""
        self._alive, self._dead = alive, dead

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        """Take the lock (``block``/``timeout`` as ``multiprocessing.RLock``).

        Raises:
            Exception: ``dead()`` of :meth:`guard`, once the owner process is gone.
        """
        if not self._take(block, timeout):
            return False
        self._depth += 1
        if self._depth == 1:
            self.version.cells[0] += 1
            if self.in_flight is not None:  # the holder sees every reserved row written
                self.in_flight.drain()
        return True

    def acquire_to_reserve(self) -> None:
        """Take the lock to reserve rows: the version stays, copies in flight go on.

        A reservation changes counters only (no row), so lock-free readers
        need not start again; the rows it reserves are in flight until copied.
        """
        self._take(True, None)
        self._depth += 1

    def release_reserved(self) -> None:
        """Release a hold of :meth:`acquire_to_reserve`."""
        self._depth -= 1
        self.inner.release()

    def _take(self, block: bool, timeout: float | None) -> bool:
        if not block:
            return bool(self.inner.acquire(False))
        if _try_for(self.inner, _SPIN_S):
            return True
        if self._alive is None or timeout is not None:
            return bool(self.inner.acquire(True, timeout))
        while not self.inner.acquire(True, _GUARD_SLICE_S):
            if not self._alive():
                assert self._dead is not None
                raise self._dead()
        return True

    def release(self) -> None:
        """Release one hold."""
        self._depth -= 1
        if self._depth == 0:
            self.version.cells[0] += 1
        self.inner.release()

    def pause(self) -> None:
        """The holder is about to wait on a condition (the lock is free meanwhile)."""
        self.version.cells[0] += 1

    def resume(self) -> None:
        """The holder is back from its wait."""
        self.version.cells[0] += 1

    def read(self, copy: Callable[[], T], rows: torch.Tensor | None = None) -> T:
        """``copy()`` made while no process wrote (lock-free when possible, else locked).

        Args:
            copy: reads rows.
            rows: the rows it reads (None: any), checked against the rows
                reserved writers copied meanwhile (:meth:`InFlightRows.touched`).
        """
        in_flight = self.in_flight
        if in_flight is None:
            return self.peek(copy)
        probe = RowProbe(rows)

        def begin() -> Snapshot | None:
            snapshot = in_flight.snapshot()
            if probe.hits(snapshot[1]):  # rows still being copied: a copy would be dropped
                in_flight.wait_until_copied(probe)
                return None
            return snapshot

        return self._optimistic(
            copy, begin, lambda snapshot: not in_flight.touched(snapshot, probe)
        )

    def peek(self, value: Callable[[], T]) -> T:
        """``value()`` made while no process held the lock (lock-free when possible, else locked).

        Reservations (:meth:`acquire_to_reserve`) do not move the version: a
        value read from several counters they move may mix one moved and one
        not yet; a length is one counter.
        """
        return self._optimistic(value, lambda: (), lambda _: True)

    def _optimistic(
        self, value: Callable[[], T], begin: Callable[[], S | None], kept: Callable[[S], bool]
    ) -> T:
        """``value()`` kept from a lock-free try, else made under the lock.

        A try is kept if the version was even and did not move, and ``kept``
        accepts what ``begin()`` returned before it (None: skip that try).
        """
        cells = self.version.cells
        for _ in range(_TRIES if _OPTIMISTIC and not self._depth else 0):
            before = cells[0]
            if before & 1:
                break
            token = begin()
            if token is None:
                continue
            try:
                out = value()
            except Exception:  # noqa: BLE001 - a read racing a write may fail: read again
                if cells[0] == before:
                    raise
                continue
            if cells[0] == before and kept(token):
                return out
        with self:
            return value()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _try_for(lock: Any, seconds: float) -> bool:
    """Whether ``lock`` was had by non-blocking tries within ``seconds`` (at least one try)."""
    end = time.perf_counter() + seconds
    while not lock.acquire(False):
        if time.perf_counter() >= end:
            return False
    return True


class LocalThenShared:
    """This process's thread lock, then the shared lock: what writers of a shared buffer take.

    Args:
        local: the process's reentrant thread lock (guards its sampler and follower).
        shared: the cross-process lock.
    """

    def __init__(self, local: Any, shared: SharedLock) -> None:
        self.local, self.shared = local, shared

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        """Take both (the thread lock first); False if either is not had in time."""
        if not self.local.acquire(block, -1 if timeout is None else timeout):
            return False
        try:
            if self.shared.acquire(block, timeout):
                return True
        except BaseException:
            self.local.release()
            raise
        self.local.release()
        return False

    def release(self) -> None:
        """Release both."""
        self.shared.release()
        self.local.release()

    def acquire_to_reserve(self) -> None:
        """Both locks, taken to reserve rows (:meth:`SharedLock.acquire_to_reserve`)."""
        self.local.acquire()
        try:
            self.shared.acquire_to_reserve()
        except BaseException:
            self.local.release()
            raise

    def release_reserved(self) -> None:
        """Release a hold of :meth:`acquire_to_reserve`."""
        self.shared.release_reserved()
        self.local.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class SharedCondition:
    """The shared condition, entered through :class:`LocalThenShared`; waits keep the version.

    A wait holds neither this process's thread lock (its other threads keep
    drawing) nor, while asleep, the shared lock: it checks ``predicate``
    under both, then sleeps on the shared condition for at most
    :data:`_WAIT_SLICE_S` (a notify sent between the check and the sleep is
    seen at the next check).

    Args:
        inner: the multiprocessing condition over ``lock.shared.inner``.
        lock: the locks taken to enter it.
    """

    def __init__(self, inner: Any, lock: LocalThenShared) -> None:
        self.inner, self.lock = inner, lock

    def __enter__(self) -> bool:
        return self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def notify_all(self) -> None:
        """Wake every waiter (the lock held)."""
        self.inner.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Sleep until ``predicate()`` holds or ``timeout`` passes (call it without the lock)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self.lock:
                if predicate():
                    return True
            left = _WAIT_SLICE_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            shared = self.lock.shared
            with shared:
                shared.pause()
                try:
                    self.inner.wait(min(left, _WAIT_SLICE_S))
                finally:
                    shared.resume()
