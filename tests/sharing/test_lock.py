"""The shared buffer's lock and its version (rbdata.sharing.lock)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from rbdata import LazyTensorStorage, ReplayBuffer
from rbdata.sharing.counters import SharedCounters
from rbdata.sharing.file_lock import FileLock
from rbdata.sharing.lock import LocalThenShared, SharedCondition, SharedLock


def make() -> tuple[SharedLock, LocalThenShared, SharedCondition]:
    shared = SharedLock(FileLock(), SharedCounters([0, 0]))
    both = LocalThenShared(threading.RLock(), shared)
    return shared, both, SharedCondition(both)


def test_the_version_is_odd_exactly_while_the_lock_is_held() -> None:
    shared, both, _ = make()
    assert shared.version[0] == 0
    with both:
        assert shared.version[0] % 2 == 1
        with both:
            assert shared.version[0] == 1  # reentrant holds do not move it
    assert shared.version[0] == 2


def test_a_read_racing_a_write_copies_again() -> None:
    shared, both, _ = make()
    calls = []

    def copy() -> int:
        calls.append(1)
        if len(calls) == 1:  # a write lands while the first copy runs
            with both:
                pass
        return len(calls)

    assert shared.read(copy) == 2


def test_a_read_while_a_writer_holds_the_lock_waits_for_it() -> None:
    shared, both, _ = make()
    taken, release = threading.Event(), threading.Event()
    seen: list[float] = []

    def writer() -> None:
        with both:
            taken.set()
            release.wait(10)
            seen.append(time.monotonic())

    thread = threading.Thread(target=writer)
    thread.start()
    taken.wait(10)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    copied_at = shared.read(time.monotonic)
    thread.join()
    assert copied_at >= seen[0]  # copied once the write was over, not during it


def test_a_failed_copy_without_a_write_raises() -> None:
    shared, _, _ = make()
    with pytest.raises(KeyError):
        shared.read(lambda: {}["missing"])


def test_a_wait_wakes_on_notify_and_times_out() -> None:
    _, both, cond = make()
    flag = []

    def notifier() -> None:
        time.sleep(0.1)
        with cond:
            flag.append(1)
            cond.notify_all()

    thread = threading.Thread(target=notifier)
    thread.start()
    start = time.monotonic()
    assert cond.wait_for(lambda: bool(flag), timeout=5.0)
    assert time.monotonic() - start < 2.0
    thread.join()
    assert not cond.wait_for(lambda: False, timeout=0.1)
    with both:  # nothing left held by the waits
        pass


def test_a_shared_buffer_draws_without_the_shared_lock() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(16), batch_size=4).share()
    rb.extend(torch.arange(16))
    before = rb.lock.shared.version[0]
    for _ in range(5):
        assert rb.sample().shape == (4,)
    assert rb.lock.shared.version[0] == before  # neither the draws nor the copies held it
    rb.extend(torch.arange(2))  # reserved under the lock, copied outside: version kept
    assert rb.lock.shared.version[0] == before
    rb.empty()  # under the lock
    assert rb.lock.shared.version[0] == before + 2


def test_len_of_a_shared_buffer_reads_without_the_lock_and_waits_for_a_writer() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(16), batch_size=4).share()
    rb.extend(torch.arange(5))
    before = rb.lock.shared.version[0]
    assert len(rb) == 5 and rb.lock.shared.version[0] == before  # not held
    shared = rb.lock.shared
    taken, release = threading.Event(), threading.Event()

    def writer() -> None:  # holds the lock as a write under it would
        with rb.lock:
            taken.set()
            release.wait(10)
            rb.extend(torch.arange(3))

    thread = threading.Thread(target=writer)
    thread.start()
    taken.wait(10)
    threading.Timer(0.2, release.set).start()
    assert shared.peek(lambda: len(rb.storage)) == 8  # read once the write was over
    thread.join()


class _Contended:
    """A lock that refuses ``refusals`` non-blocking tries, and records blocking acquires."""

    def __init__(self, refusals: int) -> None:
        self.refusals, self.tries, self.blocking = refusals, 0, []

    def acquire(self, block: bool = True, timeout: float | None = None) -> bool:
        if block:
            self.blocking.append(timeout)
            return True
        self.tries += 1
        return self.tries > self.refusals

    def release(self) -> None:
        pass


def test_a_taken_lock_is_tried_again_before_the_waiter_sleeps_on_it(monkeypatch) -> None:
    import rbdata.sharing.lock as module

    monkeypatch.setattr(module, "_SPIN_S", 10.0)  # the fake frees it long before
    inner = _Contended(refusals=5)
    lock = SharedLock(inner, SharedCounters([0]))
    assert lock.acquire()
    assert (inner.tries, inner.blocking) == (6, [])  # had on the sixth try, no sleep
    assert lock.version[0] == 1


def test_a_lock_still_taken_after_the_tries_is_waited_for(monkeypatch) -> None:
    import rbdata.sharing.lock as module

    monkeypatch.setattr(module, "_SPIN_S", 0.0)
    inner = _Contended(refusals=10**9)
    lock = SharedLock(inner, SharedCounters([0]))
    assert lock.acquire(timeout=2.0)
    assert inner.tries == 1 and inner.blocking == [2.0]  # one try, then the timed wait
    lock.release()
    assert not lock.acquire(block=False) and inner.tries == 2  # no wait without block
    assert inner.blocking == [2.0]
