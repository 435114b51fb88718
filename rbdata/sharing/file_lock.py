"""A cross-process lock the kernel releases when its holder dies (an OFD record lock).

The lock of a shared buffer used to be a POSIX semaphore: a process killed
while holding it left it taken for good, and every other process waited for
ever. This lock is an exclusive record lock on the first byte of a small file
(``fcntl`` ``F_OFD_SETLK``, "open file description" locks): it belongs to the
open file description, and the kernel drops it when the last descriptor of
that description is closed, which a process's exit does whatever kills it
(a zombie holds nothing: its files are closed before it becomes one). A
waiter therefore never waits on a dead holder: the bound is the kernel's
release, at the holder's exit.

Each process opens its own description (``/proc/self/fd/N`` of the
descriptor it received, or the file's path): a forked child closes the one it
inherited (:func:`os.register_at_fork`), so that it neither shares its
parent's hold nor keeps it alive after the parent died.

The file is created in shared memory (``/dev/shm`` where there is one), named
after its creator's pid and start time (``rbdata-<pid>-<start>-lock-*``), so
that a later process can remove it once its creator is dead
(:func:`.cleanup.sweep`); its creator removes it when the lock is collected or the
process exits. Where ``F_OFD_SETLK`` is missing (not Linux), the process-owned
``F_SETLK`` lock is used, which the kernel releases at exit as well.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import tempfile
import time
import weakref
from typing import Any

from rbdata.sharing.cleanup import creator_prefix
from rbdata.sharing.counters import spawning

__all__ = ["FileLock", "shared_dir"]

if sys.platform == "win32":  # no POSIX record locks: shared buffers are refused there
    fcntl = None
    _SETLK = _SETLKW = _WRLCK = _UNLCK = 0
else:
    import fcntl

    if sys.platform == "linux":
        _SETLK, _SETLKW = fcntl.F_OFD_SETLK, fcntl.F_OFD_SETLKW
    else:  # process-owned record locks: released at exit too
        _SETLK, _SETLKW = fcntl.F_SETLK, fcntl.F_SETLKW
    _WRLCK, _UNLCK = fcntl.F_WRLCK, fcntl.F_UNLCK
_POLL_S = 1e-4  # a wait with a timeout tries again this often at first ...
_POLL_MAX_S = 5e-3  # ... and at most this long apart
_LOCKS: weakref.WeakSet[FileLock] = weakref.WeakSet()


def _flock(kind: int) -> bytes:
    """A ``struct flock`` for byte 0 (``l_pid`` 0, as OFD locks require)."""
    return struct.pack("hhqqi4x", kind, os.SEEK_SET, 0, 1, 0)


_WRITE, _UNLOCK = _flock(_WRLCK), _flock(_UNLCK)


def shared_dir() -> str | None:
    """Where rbdata names its shared files: ``/dev/shm`` where there is one, else None (temp)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") else None


class FileLock:
    """An exclusive lock, across processes and released by the kernel at its holder's exit.

    Not reentrant and not a thread lock: one thread of a process takes it at
    a time (the buffer takes its thread lock first).

    Args:
        path: the lock file (None: create one, removed when this object is collected).

    Examples:
        >>> lock = FileLock()
        >>> lock.acquire()
        True
        >>> other = FileLock(lock.path)  # another description of the same file
        >>> other.acquire(block=False), other.acquire(timeout=0.01)
        (False, False)
        >>> lock.release()
        >>> other.acquire(block=False)
        True
        >>> other.release()
    """

    def __init__(self, path: str | None = None) -> None:
        if fcntl is None:
            raise RuntimeError(
                "Sharing a buffer between processes needs POSIX record locks (fcntl), "
                f"which {sys.platform} lacks: use the buffer in one process."
            )
        if path is None:
            fd, path = tempfile.mkstemp(prefix=creator_prefix("lock"), dir=shared_dir())
            os.close(fd)
            self._remover: weakref.finalize[Any, FileLock] | None = weakref.finalize(
                self, _remove, path, os.getpid()
            )
        else:
            self._remover = None
        self.path = path
        self._fd = -1
        self._pid = -1
        self._open(None)
        _LOCKS.add(self)

    def _open(self, inherited: int | None) -> None:
        """Open this process's own description (from ``inherited``'s when the path is gone)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            if inherited is None:
                raise FileNotFoundError(
                    f"the lock file {self.path} of a shared buffer is gone: the process "
                    "that shared the buffer has exited"
                ) from None
            fd = os.open(f"/proc/self/fd/{inherited}", os.O_RDWR | os.O_CLOEXEC)
        self._fd, self._pid = fd, os.getpid()

    def unlink(self) -> None:
        """Remove the lock's file name now, if this process created it (its owner stops).

        Processes that opened it keep the lock; no other process can open it
        by its path any more. Otherwise the name goes when this object is
        collected or the process exits, or, after a crash, at the next sweep.
        """
        remover = self._remover
        if remover is not None:
            remover()

    def after_fork(self) -> None:
        """In a forked child: a description of its own, the inherited one closed."""
        inherited = self._fd
        if inherited < 0:
            return
        self._open(inherited)
        os.close(inherited)

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        """Take the lock; False if ``block`` is False or ``timeout`` passes first."""
        fd = self._fd
        try:
            fcntl.fcntl(fd, _SETLK, _WRITE)
            return True
        except (BlockingIOError, PermissionError):
            if not block:
                return False
        if timeout is None:
            fcntl.fcntl(fd, _SETLKW, _WRITE)  # the kernel wakes it; a dead holder holds nothing
            return True
        deadline, pause = time.monotonic() + timeout, _POLL_S
        while True:
            try:
                fcntl.fcntl(fd, _SETLK, _WRITE)
                return True
            except (BlockingIOError, PermissionError):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(pause, left))
                pause = min(pause * 2, _POLL_MAX_S)

    def release(self) -> None:
        """Release the lock."""
        fcntl.fcntl(self._fd, _SETLK, _UNLOCK)

    def __getstate__(self) -> dict[str, Any]:
        if not spawning():
            raise RuntimeError(
                "A shared buffer's lock travels only to a process being started with it "
                "(Process arguments, a spawned DataLoader worker) or by export_shared()."
            )
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self._remover = None
        self._fd = self._pid = -1
        self._open(None)
        _LOCKS.add(self)

    def __del__(self) -> None:
        if self._fd >= 0 and self._pid == os.getpid():
            with contextlib.suppress(OSError):
                os.close(self._fd)


def _remove(path: str, creator: int) -> None:
    if os.getpid() != creator:  # a forked child exiting: the file is its parent's
        return
    with contextlib.suppress(OSError):
        os.unlink(path)


def _reopen_in_child() -> None:
    for lock in list(_LOCKS):
        lock.after_fork()


if sys.platform != "win32":
    os.register_at_fork(after_in_child=_reopen_in_child)
