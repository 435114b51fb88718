"""The robust mutex that is a shared buffer's cross-process lock (rbdata.sharing.robust_mutex)."""

from __future__ import annotations

import mmap
import os
import signal
import struct
import sys
import time

import pytest
from lock_holders import killed_holder, zombie_holder

from rbdata.sharing.robust_mutex import RobustMutexLock, cross_process_lock, robust_mutexes

pytestmark = pytest.mark.skipif(not robust_mutexes(), reason="robust mutexes are Linux-only")


def test_a_buffer_is_shared_through_a_robust_mutex_on_linux() -> None:
    assert isinstance(cross_process_lock(), RobustMutexLock) == sys.platform.startswith("linux")


def test_a_lock_held_by_a_killed_process_is_taken_over_at_once() -> None:
    lock = RobustMutexLock()
    killed_holder(lock)
    start = time.monotonic()
    assert lock.acquire(timeout=5.0)
    assert time.monotonic() - start < 1.0
    assert lock.recoveries == 1  # told: the holder died
    lock.release()
    assert lock.acquire(block=False) and lock.recoveries == 1  # repaired: an ordinary lock again
    lock.release()


def test_a_zombie_holds_nothing() -> None:
    lock = RobustMutexLock()
    with zombie_holder(lock):
        assert lock.acquire(timeout=5.0) and lock.recoveries == 1
        lock.release()


def test_a_forked_child_does_not_share_its_parents_hold() -> None:
    lock = RobustMutexLock()
    lock.acquire()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not lock.acquire(timeout=0.05) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0  # the parent's thread owns it: refused
    lock.release()


def test_a_lock_in_a_spawned_process_maps_the_same_mutex() -> None:
    import multiprocessing

    lock = RobustMutexLock()
    lock.acquire()
    child = multiprocessing.get_context("spawn").Process(target=_try, args=(lock,))
    child.start()
    child.join(60)
    assert child.exitcode == 0  # the spawned copy is refused: the same mutex, held here
    lock.release()


def _try(lock: RobustMutexLock) -> None:
    if lock.acquire(block=False):
        sys.exit(1)
    sys.exit(0)


def test_exactly_one_of_two_waiters_takes_a_dead_holders_lock_over() -> None:
    """Two processes wait on a holder that is killed: one is told, both get it, never together."""
    lock = RobustMutexLock()
    shared = mmap.mmap(-1, 16)  # [inside, overlaps] as two int64, seen by every child
    ready_r, ready_w = os.pipe()
    out_r, out_w = os.pipe()
    holder = os.fork()
    if holder == 0:
        lock.acquire()
        os.write(ready_w, b"h")
        time.sleep(60)
        os._exit(1)
    os.read(ready_r, 1)
    waiters = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            os.write(ready_w, b"w")
            if not lock.acquire(timeout=10.0):
                os._exit(2)
            inside, overlaps = struct.unpack_from("qq", shared)
            struct.pack_into("qq", shared, 0, inside + 1, overlaps + (inside != 0))
            time.sleep(0.05)  # hold it: the other waiter must not get in meanwhile
            inside, overlaps = struct.unpack_from("qq", shared)
            struct.pack_into("qq", shared, 0, inside - 1, overlaps)
            recovered = lock.recoveries
            lock.release()
            os.write(out_w, b"R" if recovered else b"n")
            os._exit(0)
        waiters.append(pid)
    os.read(ready_r, 1), os.read(ready_r, 1)
    time.sleep(0.2)  # both are asleep on the lock
    os.kill(holder, signal.SIGKILL)
    os.waitpid(holder, 0)
    told = b""
    for pid in waiters:
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0
    while len(told) < 2:
        told += os.read(out_r, 2)
    assert sorted(told) == sorted(b"Rn")  # exactly one took it over from the dead holder
    assert struct.unpack_from("qq", shared) == (0, 0)  # and never two held it at once
    for fd in (ready_r, ready_w, out_r, out_w):
        os.close(fd)
