"""The cross-process lock the kernel releases at its holder's death (rbdata.sharing.file_lock)."""

from __future__ import annotations

import os
import signal
import time

from rbdata.sharing.file_lock import FileLock


def test_a_lock_held_by_a_killed_process_is_free_at_once() -> None:
    lock = FileLock()
    pid = os.fork()
    if pid == 0:  # the child takes the lock and dies holding it
        lock.acquire()
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status)
    start = time.monotonic()
    assert lock.acquire(timeout=5.0)
    assert time.monotonic() - start < 1.0
    lock.release()


def test_a_zombie_holds_nothing() -> None:
    lock = FileLock()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        lock.acquire()
        os.write(write, b"x")
        os._exit(0)  # exits holding it; the parent does not reap it yet
    os.read(read, 1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat", "rb") as f:
            if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                break
        time.sleep(0.005)
    try:
        assert lock.acquire(timeout=5.0)
        lock.release()
    finally:
        os.waitpid(pid, 0)
        os.close(read)
        os.close(write)


def test_a_forked_child_does_not_share_its_parents_hold() -> None:
    lock = FileLock()
    lock.acquire()
    pid = os.fork()
    if pid == 0:
        os._exit(0 if not lock.acquire(block=False) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0  # the child's own description: refused
    lock.release()


def test_the_lock_file_goes_with_its_creator() -> None:
    lock = FileLock()
    path = lock.path
    copy = FileLock(path)
    assert os.path.basename(path).startswith(f"rbdata-{os.getpid()}-")
    del lock, copy
    assert not os.path.exists(path)


def test_the_lock_is_not_copied_outside_a_process_start() -> None:
    import pickle

    import pytest

    with pytest.raises(RuntimeError, match="travels only"):
        pickle.dumps(FileLock())
