"""What crashed processes left is swept by the next one (rbdata.sharing.cleanup, .liveness)."""

from __future__ import annotations

import os
import tempfile
import time

from rbdata.sharing.cleanup import creator_prefix, sweep
from rbdata.sharing.liveness import alive, identity, this_process
from rbdata.sharing.slot_ring import SlotRing


def _dead_process() -> tuple[int, int]:
    """``(pid, start)`` of a child that ran and was reaped."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, str(identity(os.getpid())).encode())
        os._exit(0)
    os.close(write)
    start = int(os.read(read, 64))
    os.close(read)
    os.waitpid(pid, 0)
    return pid, start


def test_entries_of_dead_creators_go_and_live_ones_stay() -> None:
    pid, start = _dead_process()
    assert not alive(pid, start)
    place = tempfile.gettempdir()
    dead = os.path.join(place, f"rbdata-{pid}-{start}-lock-test")
    dead_dir = os.path.join(place, f"rbdata-{pid}-{start}-shared-test")
    live = os.path.join(place, creator_prefix("lock") + "test")
    try:
        for path in (dead, live):
            with open(path, "w"):
                pass
        os.makedirs(os.path.join(dead_dir, "inner"))
        assert sweep() >= 2
        assert not os.path.exists(dead) and not os.path.exists(dead_dir)
        assert os.path.exists(live)
    finally:
        for path in (dead, live):
            if os.path.exists(path):
                os.unlink(path)


def test_a_reused_pid_is_not_the_process_that_died() -> None:
    pid, start = this_process()
    assert alive(pid, start)
    assert not alive(pid, start - 1)  # this pid, another start time: the writer that died


def test_a_forked_child_names_itself_not_its_parent() -> None:
    """The identity is looked up once per process: a fork must not inherit the parent's."""
    parent = this_process()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        child = this_process()
        ok = child[0] == os.getpid() and child == (os.getpid(), identity(os.getpid()))
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert this_process() == parent


def test_a_zombie_is_dead() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until it exited (a zombie: not waited for)
            if identity(pid) is None:
                break
            time.sleep(0.001)
        assert identity(pid) is None
    finally:
        os.waitpid(pid, 0)


def test_a_slot_ring_its_creator_left_is_swept() -> None:
    """Was: ``rbdata-slots-<hex>``, which no sweep recognized, stayed when its actor was killed."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # creates a ring and dies without closing it (as a killed actor)
        ring = SlotRing.create(slots=2, slot_bytes=64)
        os.write(write, str(ring.path).encode())
        os._exit(0)
    os.close(write)
    path = os.read(read, 4096).decode()
    os.close(read)
    os.waitpid(pid, 0)
    try:
        assert os.path.basename(path).startswith(f"rbdata-{pid}-")
        assert os.path.exists(path)
        sweep()
        assert not os.path.exists(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)
