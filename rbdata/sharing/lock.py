"""The cross-process lock of a shared buffer, with a version that lets readers skip it.

Every process writing a shared buffer takes one lock, a :class:`~.file_lock.FileLock`
the kernel releases when its holder dies (a process killed holding it never
stops the others). Readers
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
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from rbdata.sharing.counters import SharedCounters
from rbdata.sharing.faults import fault_point
from rbdata.sharing.file_lock import FileLock
from rbdata.sharing.in_flight import InFlightRows, Reclaim, RowProbe, Snapshot

__all__ = ["LocalThenShared", "SharedCondition", "SharedLock"]

T = TypeVar("T")
S = TypeVar("S")

_GUARD_SLICE_S = 0.25  # a guarded wait for the lock checks the owner this often
# how long a waiter tries the lock before sleeping on it (one core: the holder cannot run)
_SPIN_S = 30e-6 if (os.cpu_count() or 1) > 1 else 0.0
_OPTIMISTIC = platform.machine().lower() in ("x86_64", "amd64")
_TRIES = 3  # lock-free copies tried before a reader takes the lock
_WAIT_SLICE_S = 0.05  # longest sleep of a shared wait between two checks
_NOTIFY_POLL_S = 1e-4  # a shared wait looks for a notification this often at first ...
_NOTIFY_POLL_MAX_S = 2e-3  # ... and at most this long apart


class SharedLock:
    """The cross-process lock, reentrant within the holding thread, and its version.

    Args:
        inner: the cross-process lock (not reentrant: this class counts the holds).
        version: shared int64 cells: the version (odd while the lock is held),
            then the notifications of :class:`SharedCondition`.
        in_flight: the rows reserved writers copy outside the lock (None: writes copy
            under it).

    Examples:
        >>> import multiprocessing
        >>> from rbdata.sharing.counters import SharedCounters
        >>> from rbdata.sharing.file_lock import FileLock
        >>> lock = SharedLock(multiprocessing.get_context("spawn").RLock(), SharedCounters([0]))
        >>> with lock:
        ...     with lock:  # reentrant: the version moves on the outermost hold only
        ...         lock.version[0]
        1
        >>> lock.version[0], lock.read(lambda: "rows")
        (2, 'rows')
    """

    def __init__(
        self, inner: FileLock, version: SharedCounters, in_flight: InFlightRows | None = None
    ) -> None:
        self.inner, self.version = inner, version
        #: rows reserved writers copy without the lock (see :mod:`.in_flight`)
        self.in_flight = in_flight
        # the threads of this process take turns on a thread lock first; the file lock is
        # taken by the outermost hold only (it counts one hold per description)
        self._threads = threading.RLock()
        self._depth = 0  # holds by this process (only the holding thread changes it)
        #: what a holder does with the rows a dead writer reserved (None: free them, warned)
        self.reclaim: Reclaim | None = None
        self._alive: Callable[[], bool] | None = None
        self._dead: Callable[[], Exception] | None = None

    def guard(self, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None:
        """Check the owner while waiting: every quarter second ``alive()``, else raise ``dead()``.

        A dead holder never keeps the lock (the kernel releases it); this ends
        the waits of a process mapping a buffer whose owner is gone.
        """
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
            cells = self.version.cells
            # odd while held; a holder that died left it odd: move it on to the next odd
            cells[0] = (cells[0] + 1) | 1
            fault_point("holding-lock")
            if self.in_flight is not None:  # the holder sees every reserved row written
                self.in_flight.drain(self.reclaim)
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
        if not self._depth:
            self.inner.release()
        self._threads.release()

    def _take(self, block: bool, timeout: float | None) -> bool:
        """The thread lock, then (outermost hold) the cross-process lock; False if not had."""
        if not self._threads.acquire(block, -1 if timeout is None else timeout):
            return False
        if self._depth:  # this thread holds it already
            return True
        try:
            if self._take_inner(block, timeout):
                fault_point("took-lock")
                return True
        except BaseException:
            self._threads.release()
            raise
        self._threads.release()
        return False

    def _take_inner(self, block: bool, timeout: float | None) -> bool:
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
        self._threads.release()

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
        not yet; a length is one counter. Rows a dead writer reserved are
        reclaimed first (under the lock), so a length never counts them.
        """
        in_flight = self.in_flight
        if self._depth:
            return self._optimistic(value, _no_token, _keep)  # held here: under the lock
        if in_flight is not None and in_flight.orphaned():
            with self:  # its drain reclaims them
                return value()
        if _OPTIMISTIC:  # _optimistic's first try, without its calls (a length per extend)
            cells = self.version.cells
            before = cells[0]
            if not before & 1:
                try:
                    out = value()
                except Exception:  # noqa: BLE001 - as in _optimistic: read again
                    if cells[0] == before:
                        raise
                else:
                    if cells[0] == before:
                        return out
            return self._optimistic(value, _no_token, _keep, _TRIES - 1)
        return self._optimistic(value, _no_token, _keep)

    def _optimistic(
        self,
        value: Callable[[], T],
        begin: Callable[[], S | None],
        kept: Callable[[S], bool],
        tries: int = _TRIES,
    ) -> T:
        """``value()`` kept from one of ``tries`` lock-free tries, else made under the lock.

        A try is kept if the version was even and did not move, and ``kept``
        accepts what ``begin()`` returned before it (None: skip that try).
        """
        cells = self.version.cells
        for _ in range(tries if _OPTIMISTIC and not self._depth else 0):
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


def _no_token() -> tuple[()]:
    """What a peek's lock-free try begins with: nothing to check after the copy."""
    return ()


def _keep(_: tuple[()]) -> bool:
    """A peek's lock-free try is kept whenever the version did not move."""
    return True


def _try_for(lock: Any, seconds: float) -> bool:
    """Whether ``lock`` was had by non-blocking tries within ``seconds`` (at least one try)."""
    if lock.acquire(False):  # the common case, a free lock: no clock read
        return True
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        if lock.acquire(False):
            return True
    return False


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

    def unlink(self) -> None:
        """Remove the shared lock's file name (see :meth:`~.file_lock.FileLock.unlink`)."""
        self.shared.inner.unlink()

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
    """A condition over the shared lock, entered through :class:`LocalThenShared`.

    A wait holds neither this process's thread lock (its other threads keep
    drawing) nor the shared lock: it checks ``predicate`` under both, then
    sleeps until a :meth:`notify_all` of any process moves the notification
    cell, or :data:`_WAIT_SLICE_S` passes (then it checks again). Nothing
    here can be orphaned: a notifier that dies wakes nobody, and the waiter
    checks again within the slice.

    Args:
        lock: the locks taken to enter it (its shared lock's version cells hold
            the notifications).
    """

    def __init__(self, lock: LocalThenShared) -> None:
        self.lock = lock
        self._cells = lock.shared.version.cells

    def __enter__(self) -> bool:
        return self.lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self.lock.release()

    def notify_all(self) -> None:
        """Wake every waiter, in every process (the lock held)."""
        self._cells[1] += 1

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Sleep until ``predicate()`` holds or ``timeout`` passes (call it without the lock)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        cells = self._cells
        while True:
            with self.lock:
                if predicate():
                    return True
                seen = cells[1]
            now = time.monotonic()
            left = _WAIT_SLICE_S if deadline is None else deadline - now
            if left <= 0:
                return False
            end, pause = now + min(left, _WAIT_SLICE_S), _NOTIFY_POLL_S
            while cells[1] == seen and time.monotonic() < end:
                time.sleep(pause)
                pause = min(pause * 2, _NOTIFY_POLL_MAX_S)
