"""The cross-process lock of a shared buffer: a robust POSIX mutex, no system call uncontended.

The kernel-released record lock of :mod:`.file_lock` costs two ``fcntl``
calls a hold (5.0 us a reservation's hold against 1.7 us with the
semaphore it replaced). This lock is a process-shared *robust*
``pthread_mutex_t`` (``PTHREAD_MUTEX_ROBUST``) placed in the lock file,
which every process maps: taking it free is one compare-and-swap in user
space (the owner's thread id goes into the lock word in the same atomic
step), a waiter sleeps on a futex.

Why no process waits on a dead holder: glibc keeps every robust mutex a
thread holds in a list it registered with the kernel (``set_robust_list``),
and marks the one it is taking before the compare-and-swap
(``list_op_pending``). When a thread dies, however it dies, the kernel walks
that list during its exit, before the process becomes a zombie: it sets
``FUTEX_OWNER_DIED`` in the word of each mutex the thread held and wakes one
waiter. That waiter's lock call returns ``EOWNERDEAD``: it owns the mutex,
marks it consistent, and goes on (the shared lock's version and in-flight
reservations are repaired by :class:`.lock.SharedLock` as after any dead
holder). Exactly one waiter is told; the others keep waiting for it. There
is no instant at which the holder is taken but unnamed: the word holds the
owner's thread id from the instant it is taken, and the kernel resolves a
death in the middle of the take (the pending entry). A reused pid or a
zombie fakes nothing: liveness is not asked of a pid, the kernel reports the
exit itself. The bound is therefore the kernel's: the next waiter owns the
lock when the holder's exit has released its memory map, as with the record
lock.

A waiter wakes at least every :data:`_SLICE_S` (``pthread_mutex_clocklock``
on the monotonic clock), so that a signal (Ctrl-C) is handled and the
guard of :class:`.lock.SharedLock` looks at the owner process of the buffer.

The file, its name (``rbdata-<pid>-<start>-lock-*``), its removal and its
travel to spawned processes are those of :class:`.file_lock.FileLock`, which
this lock extends; its record lock is not taken. Where robust mutexes are
missing (not Linux with glibc), :func:`cross_process_lock` gives the record
lock instead.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import mmap
import os
import sys
import time
from typing import Any

from rbdata.sharing.file_lock import FileLock

__all__ = ["RobustMutexLock", "cross_process_lock", "robust_mutexes"]

_SLICE_S = 0.25  # the longest a waiter sleeps in the C library before it looks again
_SIZE = 64  # bytes mapped for the mutex (40 on x86-64 glibc, 48 on aarch64)
_PSHARED = 1  # PTHREAD_PROCESS_SHARED
_ROBUST = 1  # PTHREAD_MUTEX_ROBUST
_CLOCK_MONOTONIC = time.CLOCK_MONOTONIC if sys.platform != "win32" else 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


def _libc() -> Any:
    """The C library's robust-mutex calls, or None where it lacks them."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=False)  # calls release the GIL
        needed = (
            "pthread_mutexattr_init",
            "pthread_mutexattr_setpshared",
            "pthread_mutexattr_setrobust",
            "pthread_mutex_init",
            "pthread_mutex_trylock",
            "pthread_mutex_clocklock",
            "pthread_mutex_unlock",
            "pthread_mutex_consistent",
        )
        for name in needed:
            fn = getattr(libc, name)  # a C symbol looked up by name: ctypes has no other way
            fn.restype = ctypes.c_int
            fn.argtypes = None
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()
_TRYLOCK: Any = None if _LIBC is None else _LIBC.pthread_mutex_trylock
_UNLOCK: Any = None if _LIBC is None else _LIBC.pthread_mutex_unlock
_log = logging.getLogger(__name__)


def robust_mutexes() -> bool:
    """Whether this platform has process-shared robust mutexes (else the record lock is used)."""
    return _LIBC is not None


class RobustMutexLock(FileLock):
    """An exclusive lock across processes: no system call uncontended, recovered from a dead holder.

    The interface is :class:`.file_lock.FileLock`'s. :attr:`recoveries`
    counts the acquires that took the lock over from a holder that died
    (exactly one waiter is told of each death, with a warning logged).

    Args:
        path: the lock file (None: create one and its mutex, removed when this
            object is collected).

    Examples:
        >>> lock = RobustMutexLock()
        >>> lock.acquire()
        True
        >>> other = RobustMutexLock(lock.path)  # the same mutex, as another process maps it
        >>> other.acquire(block=False), other.acquire(timeout=0.01)
        (False, False)
        >>> lock.release()
        >>> other.acquire(block=False), other.recoveries
        (True, 0)
        >>> other.release()
    """

    def __init__(self, path: str | None = None) -> None:
        if _LIBC is None:
            raise RuntimeError(
                "robust process-shared mutexes need Linux with glibc: use FileLock here."
            )
        super().__init__(path)
        #: how many acquires of this object took the lock over from a holder that died
        self.recoveries = 0
        self._map(create=path is None)

    def _map(self, create: bool) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            if create:
                os.ftruncate(fd, _SIZE)
            self._memory = mmap.mmap(fd, _SIZE)
        finally:
            os.close(fd)
        self._cell = ctypes.c_char.from_buffer(self._memory)
        self._mutex = ctypes.c_void_p(ctypes.addressof(self._cell))
        if create:
            attr = ctypes.create_string_buffer(64)  # pthread_mutexattr_t (4 bytes on glibc)
            _check(_LIBC.pthread_mutexattr_init(attr), "pthread_mutexattr_init")
            _check(_LIBC.pthread_mutexattr_setpshared(attr, _PSHARED), "setpshared")
            _check(_LIBC.pthread_mutexattr_setrobust(attr, _ROBUST), "setrobust")
            _check(_LIBC.pthread_mutex_init(self._mutex, attr), "pthread_mutex_init")

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; False if ``block`` is False or ``timeout`` passes first.

        Raises:
            RuntimeError: the mutex is unusable (a holder died and its
                successor released it without repairing it: never done here).
        """
        got = _TRYLOCK(self._mutex)
        if not got:  # the common case: one compare-and-swap, nothing else written
            return True
        if got == errno.EBUSY and block:
            got = self._wait(timeout)
        return self._taken(got)

    def _wait(self, timeout: float | None) -> int:
        """The lock's answer after sleeping on it until taken or ``timeout`` passes."""
        deadline = None if timeout is None else time.monotonic() + timeout
        when = _Timespec()
        while True:
            now = time.monotonic()
            end = now + _SLICE_S if deadline is None else min(deadline, now + _SLICE_S)
            when.tv_sec, when.tv_nsec = int(end), int((end % 1) * 1e9)
            got = int(
                _LIBC.pthread_mutex_clocklock(self._mutex, _CLOCK_MONOTONIC, ctypes.byref(when))
            )
            if got != errno.ETIMEDOUT or (deadline is not None and end >= deadline):
                return got

    def _taken(self, got: int) -> bool:
        if got == 0:
            return True
        if got == errno.EOWNERDEAD:  # the holder died: this process owns it now
            _check(_LIBC.pthread_mutex_consistent(self._mutex), "pthread_mutex_consistent")
            self.recoveries += 1
            _log.warning(
                "a process died holding the lock %s of a shared buffer: taken over", self.path
            )
            return True
        if got in (errno.EBUSY, errno.ETIMEDOUT):
            return False
        raise RuntimeError(
            f"the lock {self.path} of a shared buffer failed: {os.strerror(got)} ({got})"
        )

    def release(self) -> None:
        """Release the lock."""
        code = _UNLOCK(self._mutex)
        if code:
            _check(code, "pthread_mutex_unlock")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.recoveries = 0
        self._map(create=False)


def _check(code: int, call: str) -> None:
    if code:
        raise RuntimeError(f"{call} failed: {os.strerror(code)} ({code})")


def cross_process_lock() -> FileLock:
    """A new lock for a shared buffer: a robust mutex where there are some, else the record lock."""
    return RobustMutexLock() if robust_mutexes() else FileLock()
