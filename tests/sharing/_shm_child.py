"""Run inside a private /dev/shm (tests/sharing/test_leftovers.py): one scenario per argument."""

from __future__ import annotations

import os
import signal
import sys

import torch

from rbdata import LazyTensorStorage, ReplayBuffer, SharedMemoryFull


def entries() -> list[str]:
    return sorted(name for name in os.listdir("/dev/shm") if name.startswith("rbdata-"))


def owner_then_writer_killed() -> None:
    """An owner shares a buffer, its writer dies mid-run, then the owner dies: both SIGKILLed."""
    pid = os.fork()
    if pid == 0:  # the owner
        rb = ReplayBuffer(storage=LazyTensorStorage(4096)).share()
        writer = os.fork()
        if writer == 0:
            rb.extend(torch.arange(1000, dtype=torch.float64))
            os.kill(os.getpid(), signal.SIGKILL)
        os.waitpid(writer, 0)
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)
    left = entries()
    assert left, "the crashes should have left segments to sweep"
    rb = ReplayBuffer(storage=LazyTensorStorage(16)).share()  # a later buffer: it sweeps
    mine = f"rbdata-{os.getpid()}-"
    assert all(name.startswith(mine) for name in entries()), entries()
    rb.extend(torch.arange(4.0))
    print("swept", len(left))


def exception() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(64)).share()
    rb.extend(torch.arange(8.0))
    raise RuntimeError("the training script failed")


def too_small() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(4_000_000)).share()  # 32 MB of float64 rows
    try:
        rb.extend(torch.arange(10.0))
    except SharedMemoryFull as err:
        print("refused:", err)
        assert len(rb) == 0
        return
    raise AssertionError("a too small /dev/shm was not refused")


if __name__ == "__main__":
    {"crash": owner_then_writer_killed, "exception": exception, "small": too_small}[sys.argv[1]]()
