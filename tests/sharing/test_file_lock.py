"""The cross-process lock the kernel releases at its holder's death (rbdata.sharing.file_lock)."""

from __future__ import annotations

import os
import time

from lock_holders import killed_holder, zombie_holder

from rbdata.sharing.file_lock import FileLock


def test_a_lock_held_by_a_killed_process_is_free_at_once() -> None:
    lock = FileLock()
    killed_holder(lock)
    start = time.monotonic()
    assert lock.acquire(timeout=5.0)
    assert time.monotonic() - start < 1.0
    lock.release()


def test_a_zombie_holds_nothing() -> None:
    lock = FileLock()
    with zombie_holder(lock):
        assert lock.acquire(timeout=5.0)
        lock.release()


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
