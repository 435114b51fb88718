"""The crash contract of a shared buffer (docs/reliability.md): processes SIGKILLed at any instant.

Writers are forked children that kill themselves at an instrumented point
(:mod:`rbdata.sharing.faults`: holding the lock, after reserving, mid-copy,
before committing) or are killed by the test at a random moment. Every row
carries self-checking markers (each field derived from one id, plus a
checksum), so a zero or torn row is seen wherever it shows up: ``rb[:]``,
samples, ``len()``, ``write_count`` and a dump. Every wait of the surviving
process is bounded here (:data:`BOUND_S`): a hang is a failure, not a stuck
suite. ``RBDATA_SOAK=1`` runs the random kills for many more trials.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

from rbdata import LazyTensorStorage, PrioritizedReplayBuffer, ReplayBuffer
from rbdata.sharing import faults

BOUND_S = 10.0  # what the survivors' calls may take here (the contract's bound is far lower)
WIDTH = 8
SOAK = os.environ.get("RBDATA_SOAK") == "1"


def rows(first: int, n: int) -> torch.Tensor:
    """Rows ``first .. first + n - 1``: seven fields derived from the id, then a checksum."""
    return rows_of(torch.arange(first, first + n, dtype=torch.int64))


def rows_of(ids: torch.Tensor) -> torch.Tensor:
    """The rows of ``ids`` (see :func:`rows`)."""
    fields = torch.stack(
        [
            ids,
            (ids * 2654435761) % (1 << 31),
            ids ^ 0x5A5A,
            ids * 7 + 3,
            (ids * ids) % 1000003,
            (~ids) & 0xFFFF,
            (ids * 31) % 65521,
        ],
        dim=-1,
    )
    return torch.cat([fields, fields.sum(-1, keepdim=True) % (1 << 31)], dim=-1)


def bad_rows(batch: torch.Tensor) -> int:
    """How many rows of ``batch`` are not whole rows of :func:`rows` (zeros, torn, mixed)."""
    if not batch.numel():
        return 0
    ids = batch[:, 0]
    bad = (batch != rows_of(ids)).any(-1) | (ids < 1)  # ids start at 1: a zero row is bad
    return int(bad.sum())


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result; fails the test if it takes more than ``seconds`` (a hang)."""
    out: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(call())
        except BaseException as err:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"a call waited more than {seconds} s on a dead process"
    if errors:
        raise errors[0]
    return out[0]


def _write(rb: Any, first: int, batches: int, batch: int, point: str | None, after: int) -> None:
    torch.set_num_threads(1)
    faults.arm(point, after)
    for b in range(batches):
        rb.extend(rows(first + b * batch, batch))
    os._exit(0)


def fork_writer(
    rb: Any, first: int, batches: int, batch: int, point: str | None = None, after: int = 1
) -> Any:
    process = mp.get_context("fork").Process(
        target=_write, args=(rb, first, batches, batch, point, after)
    )
    process.start()
    return process


def wait_dead(process: Any, reap: bool = True) -> None:
    """Wait until ``process`` died; ``reap=False`` leaves it a zombie (not waited for)."""
    deadline = time.monotonic() + BOUND_S * 3
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{process.pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            break
        if state in (b"Z", b"X"):
            break
        time.sleep(0.005)
    else:
        raise AssertionError("the writer did not die")
    if reap:
        process.join(BOUND_S)


def check_contents(rb: Any) -> int:
    """Every committed row whole, everywhere it is read; returns ``len(rb)``."""
    n = within(BOUND_S, lambda: len(rb))
    assert n == len(rb.storage)
    if n:
        assert bad_rows(within(BOUND_S, lambda: rb[:n])) == 0
        assert bad_rows(within(BOUND_S, lambda: rb.sample(64))) == 0
    return n


def shared_buffer(capacity: int) -> ReplayBuffer:
    return ReplayBuffer(storage=LazyTensorStorage(capacity), batch_size=16).share()


# ---------------------------------------------------------------- instrumented points
def test_a_writer_killed_holding_the_lock_stops_nobody() -> None:
    """Was: the lock never released; ``extend`` and ``rb[:n]`` hung in every process."""
    rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(256)).share()
    rb.extend(rows(1, 32))
    writer = fork_writer(rb, 1000, 4, 8, "holding-lock", after=1)
    wait_dead(writer)
    assert writer.exitcode == -signal.SIGKILL
    within(BOUND_S, lambda: rb.extend(rows(2000, 8)))
    assert bad_rows(within(BOUND_S, lambda: rb.sample(32))) == 0
    assert check_contents(rb) == 40


@pytest.mark.parametrize("after", [1, 2, 3])
@pytest.mark.parametrize("prioritized", [False, True])
def test_a_writer_killed_the_instant_it_took_the_lock_stops_nobody(
    prioritized: bool, after: int
) -> None:
    """Killed right after the lock is taken, before the version moved or anything was written.

    The lock's owner is in its word from the instant it is taken: the next
    process is told of the death, not left waiting on an unnamed holder.
    ``after`` lands the kill in successive holds (a reservation's, a commit's).
    """
    if prioritized:
        rb: Any = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(64))
        rb.share()
    else:
        rb = shared_buffer(64)
    rb.extend(rows(1, 20))
    writer = fork_writer(rb, 1000, 4, 8, "took-lock", after=after)
    wait_dead(writer)
    assert writer.exitcode == -signal.SIGKILL
    start = time.monotonic()
    within(BOUND_S, lambda: rb.extend(rows(2000, 8)))
    assert time.monotonic() - start < 2.0
    n = check_contents(rb)
    assert n in range(28, 61, 8)  # the dead writer's committed batches and the new one
    assert rb.write_count == n


@pytest.mark.parametrize("fill", ["first", "wrapped"])
@pytest.mark.parametrize("point", ["after-reserve", "mid-copy", "before-commit"])
def test_a_writer_killed_before_it_commits_leaves_no_row_behind(point: str, fill: str) -> None:
    """Was: zero and torn rows counted in ``len()`` and ``write_count``, and sampled."""
    capacity = 64
    rb = shared_buffer(capacity)
    committed = 24 if fill == "first" else capacity + 8
    rb.extend(rows(1, committed))
    writer = fork_writer(rb, 10_000, 3, 10, point, after=2)  # one batch commits, then death
    wait_dead(writer)
    assert writer.exitcode == -signal.SIGKILL
    expected = min(capacity, committed + 10)
    assert check_contents(rb) == expected
    assert rb.write_count == committed + 10
    within(BOUND_S, lambda: rb.extend(rows(20_000, 5)))  # the next writer goes on
    assert check_contents(rb) == min(capacity, expected + 5)
    assert rb.write_count == committed + 15


def test_a_dead_unreaped_writer_stops_nobody() -> None:
    """Was: a zombie counted alive; the in-flight cleanup spun for ever, then everything hung."""
    rb = shared_buffer(128)
    rb.extend(rows(1, 16))
    writer = fork_writer(rb, 500, 2, 8, "mid-copy", after=1)
    wait_dead(writer, reap=False)  # a zombie: dead, not waited for
    try:
        assert within(BOUND_S, lambda: len(rb)) == 16
        within(BOUND_S, lambda: rb.extend(rows(900, 4)))
        assert bad_rows(within(BOUND_S, lambda: rb.sample(32))) == 0
        assert check_contents(rb) == 20
    finally:
        writer.join(BOUND_S)


def test_a_dump_after_a_crash_holds_only_committed_rows(tmp_path) -> None:
    rb = shared_buffer(64)
    rb.extend(rows(1, 20))
    writer = fork_writer(rb, 300, 2, 6, "mid-copy", after=1)
    wait_dead(writer)
    within(BOUND_S, lambda: rb.dumps(tmp_path / "dump"))
    back = ReplayBuffer(storage=LazyTensorStorage(64))
    back.loads(tmp_path / "dump")
    assert len(back) == 20 and bad_rows(back[:20]) == 0


# ---------------------------------------------------------------- random moments
def _kill_at_random(trials: int, seed: int) -> tuple[int, int]:
    """Writers killed at random moments while the parent samples; (kills, rows checked)."""
    rng = random.Random(seed)
    capacity = 8192
    rb = shared_buffer(capacity)
    rb.extend(rows(1, 8))
    next_id, kills, checked = 100, 0, 0
    for _ in range(trials):
        before = rb.writer.write_count
        writer = fork_writer(rb, next_id, 1000, rng.choice([1, 17, 1500, 4000]))
        next_id += 10_000_000
        started = time.monotonic() + BOUND_S
        while rb.writer.write_count == before and time.monotonic() < started:
            time.sleep(0.0005)  # until the writer runs: then a random moment of its writes
        deadline = time.monotonic() + rng.uniform(0.0, 0.005)
        while time.monotonic() < deadline:  # the parent samples meanwhile
            assert bad_rows(rb.sample(8)) == 0
        os.kill(writer.pid, signal.SIGKILL)
        wait_dead(writer)
        kills += 1
        n = check_contents(rb)
        assert n == min(capacity, rb.write_count) or n == capacity
        checked += n
        last = rows(next_id - 1, 1)
        within(BOUND_S, lambda last=last: rb.extend(last))
    return kills, checked


def test_writers_killed_at_random_moments_leave_only_whole_rows() -> None:
    trials = 200 if SOAK else 6
    kills, checked = _kill_at_random(trials, seed=0)
    assert kills == trials and checked > 0
