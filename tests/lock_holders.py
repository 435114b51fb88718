"""Processes that die holding a cross-process lock, for the lock tests of ``tests/sharing``.

Both helpers fork: the child takes ``lock`` (anything with ``acquire()``) and
dies holding it, killed or as an unreaped zombie.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol


class _Lock(Protocol):
    def acquire(self) -> object: ...


def killed_holder(lock: _Lock) -> None:
    """A child takes ``lock`` and is SIGKILLed holding it; returns once it is reaped."""
    pid = os.fork()
    if pid == 0:
        lock.acquire()
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)


def wait_zombie(pid: int) -> None:
    """Wait (10 s at most) until ``pid`` has exited but is not yet reaped."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                return
        time.sleep(0.005)
    raise AssertionError(f"{pid} did not die")


@contextmanager
def zombie_holder(lock: _Lock) -> Iterator[int]:
    """A child that took ``lock`` and exited holding it, unreaped while the block runs."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        lock.acquire()
        os.write(write, b"x")
        os._exit(0)  # exits holding it; the parent does not reap it yet
    os.read(read, 1)
    wait_zombie(pid)
    try:
        yield pid
    finally:
        os.waitpid(pid, 0)
        os.close(read)
        os.close(write)
