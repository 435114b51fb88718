"""The lock and condition of a buffer: writes, draws and waits for data synchronize here."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch.multiprocessing as mp

_GUARD_SLICE_S = 0.25  # a guarded wait for the lock checks the owner this often


class _BufferSync:
    """A reentrant lock and a condition on it, process-safe once :meth:`share` is called.

    Writers hold the lock and call :meth:`notify` after a write; readers that
    wait for data sleep in :meth:`wait_for` (never busy-loop). Pickling a
    thread-local instance gives a fresh lock (a lock cannot cross processes);
    a shared one pickles its multiprocessing lock, so parent and children
    keep excluding each other.

    Examples:
        >>> sync = _BufferSync()
        >>> with sync.lock:
        ...     sync.notify()
        >>> sync.wait_for(lambda: True, timeout=0.0)
        True
    """

    def __init__(self) -> None:
        self._shared = False
        self.lock: Any = threading.RLock()
        self.cond: Any = threading.Condition(self.lock)

    @property
    def shared(self) -> bool:
        """Whether the lock is a multiprocessing lock (see :meth:`share`)."""
        return self._shared

    def share(self) -> None:
        """Switch to a lock and condition that ``torch.multiprocessing`` children share.

        They come from the spawn context, whose semaphores both forked and
        spawned children can use (a fork-context lock cannot be sent to a
        spawned child). A lock that is shared already is kept.
        """
        if self._shared:
            return
        context = mp.get_context("spawn")
        lock = context.RLock()
        self.lock, self.cond, self._shared = lock, context.Condition(lock), True

    def unshare(self) -> None:
        """Back to a thread lock (``share(False)``): other processes no longer exclude this one."""
        _BufferSync.__init__(self)

    def renew(self) -> None:
        """Give this copy a fresh thread lock (a forked child's private copy of a buffer).

        A child forked while another thread of the parent held the lock would
        inherit it locked forever; its copy of an unshared buffer is private,
        so a fresh lock is correct. Shared locks are kept.
        """
        if not self._shared:
            _BufferSync.__init__(self)

    def guard(self, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None:
        """Bound every wait for the shared lock by ``alive()`` (a process on the same machine).

        A process that maps a buffer another process owns (see
        :mod:`rbdata.buffers._shared_handle`) would wait forever for a lock its
        owner died holding: guarded, it checks ``alive()`` every
        :data:`_GUARD_SLICE_S` of waiting and raises ``dead()`` once it fails.
        """
        if self._shared and not isinstance(self.lock, _GuardedLock):
            self.lock = _GuardedLock(self.lock, alive, dead)
            self.cond = _GuardedCondition(self.cond, self.lock)

    def notify(self) -> None:
        """Wake every thread inside :meth:`wait_for` (takes the lock)."""
        with self.cond:
            self.cond.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None) -> bool:
        """Sleep until ``predicate()`` holds (checked at every notify) or ``timeout`` passes."""
        with self.cond:
            return bool(self.cond.wait_for(predicate, timeout))

    def __getstate__(self) -> dict[str, Any]:
        if not self._shared:
            return {"shared": False}
        lock, cond = self.lock, self.cond
        if isinstance(lock, _GuardedLock):  # the guard belongs to this process
            lock, cond = lock.inner, cond.inner
        return {"shared": True, "lock": lock, "cond": cond}

    def __setstate__(self, state: dict[str, Any]) -> None:
        _BufferSync.__init__(self)
        if state["shared"]:
            self.lock, self.cond, self._shared = state["lock"], state["cond"], True


class _GuardedLock:
    """A multiprocessing lock whose waits give up once its owner process is gone."""

    def __init__(self, lock: Any, alive: Callable[[], bool], dead: Callable[[], Exception]) -> None:
        self.inner, self._alive, self._dead = lock, alive, dead

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        """Take the lock (``block``/``timeout`` as ``multiprocessing.RLock``); raise if orphaned."""
        if not block or timeout is not None:
            return bool(self.inner.acquire(block, timeout))
        while not self.inner.acquire(True, _GUARD_SLICE_S):
            if not self._alive():
                raise self._dead()
        return True

    def release(self) -> None:
        """Release the lock."""
        self.inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.inner.release()


class _GuardedCondition:
    """A multiprocessing condition entered through a :class:`_GuardedLock`."""

    def __init__(self, cond: Any, lock: _GuardedLock) -> None:
        self.inner, self._lock = cond, lock

    def __enter__(self) -> bool:
        return self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def notify_all(self) -> None:
        """Wake every waiter (the lock held)."""
        self.inner.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """As ``Condition.wait_for`` (the lock held)."""
        return bool(self.inner.wait_for(predicate, timeout))
