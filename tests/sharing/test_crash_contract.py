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
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SliceSampler,
    TensorDictReplayBuffer,
)
from rbdata.sharing import faults
from rbdata.transforms import Transform

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
def _kill_at_random(trials: int, seed: int, prioritized: bool = False) -> tuple[int, int]:
    """Writers killed at random moments while the parent samples; (kills, rows checked).

    ``prioritized``: the writes go under the lock (journaled), the ring wraps
    within a few trials, so most kills land in overwrites of committed rows.
    """
    rng = random.Random(seed)
    capacity = 8192
    if prioritized:
        rb: Any = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(capacity))
        rb.share()
    else:
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


@pytest.mark.parametrize("prioritized", [False, True])
def test_writers_killed_at_random_moments_leave_only_whole_rows(prioritized: bool) -> None:
    """``RBDATA_SOAK=1``: ``RBDATA_SOAK_TRIALS`` trials (200 by default) instead of 6."""
    trials = int(os.environ.get("RBDATA_SOAK_TRIALS", "200")) if SOAK else 6
    start = time.monotonic()
    kills, checked = _kill_at_random(trials, seed=int(prioritized), prioritized=prioritized)
    print(  # the soak's figures (run with -s)
        f"random kills ({'prioritized, under the lock' if prioritized else 'reserved'}): "
        f"{trials} trials, {kills} kills, {checked} rows checked, "
        f"{time.monotonic() - start:.0f} s"
    )
    assert kills == trials and checked > 0


# ---------------------------------------------------------------- writes under the lock
class _Copy(Transform):
    """A transform run on the write path (``inv``): the write goes under the lock."""

    def inv(self, data: Any) -> Any:
        return data.clone()


def _under_lock(kind: str, capacity: int) -> Any:
    """A shared buffer whose writes are made under the lock (not reserved)."""
    if kind == "prioritized":
        rb: Any = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(capacity))
    elif kind == "slice":
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(capacity),
            sampler=SliceSampler(num_slices=4, traj_key="episode", strict_length=False),
            batch_size=32,
        )
    elif kind == "transform":
        rb = ReplayBuffer(storage=LazyTensorStorage(capacity), transform=_Copy())
    else:
        rb = ReplayBuffer(storage=LazyTensorStorage(capacity), consume_after_n_samples=1)
    return rb.share()


def _batch(kind: str, first: int, n: int) -> Any:
    """Rows ``first ..``; the slice buffer's carry their episode (id // 8) beside them."""
    data = rows(first, n)
    if kind != "slice":
        return data
    return TensorDict({"obs": data, "episode": data[:, 0] // 8}, [n])


def _whole(kind: str, batch: Any) -> torch.Tensor:
    """The rows of ``batch``, every one checked whole (its episode too); returns their ids."""
    if kind == "slice":
        assert bool((batch["episode"] == batch["obs"][:, 0] // 8).all()), "torn episode"
        batch = batch["obs"]
    assert bad_rows(batch) == 0
    return batch[:, 0]


def _write_locked(rb: Any, kind: str, first: int, batches: int, batch: int, point: str) -> None:
    torch.set_num_threads(1)
    faults.arm(point, 2)  # the first batch commits, the second is killed
    for b in range(batches):
        rb.extend(_batch(kind, first + b * batch, batch))
    os._exit(0)


@pytest.mark.parametrize("point", ["locked-mid-copy", "locked-before-commit"])
@pytest.mark.parametrize("kind", ["prioritized", "slice", "transform", "consume"])
def test_a_writer_killed_mid_write_under_the_lock_tears_no_row(kind: str, point: str) -> None:
    """Was: once the ring wrapped, a write under the lock killed mid-copy left torn rows.

    The first batch of the writer commits; the second is killed half copied
    (or copied but not returned). The buffer then holds no row of it, every
    row is whole (in ``rb[:]``, samples and a dump), ``len()`` and
    ``write_count`` count only the committed writes, and the next write goes
    on from the cursor after the last committed row.
    """
    capacity, batch = 64, 10
    rb = _under_lock(kind, capacity)
    committed = capacity + 8
    rb.extend(_batch(kind, 1, committed))  # wrapped: the writes overwrite committed rows
    if kind == "consume":  # every row consumed: the writes reuse their slots, in ring order
        while len(rb):
            rb.sample(16)
    dead = set(range(10_000 + batch, 10_000 + 2 * batch))
    process = mp.get_context("fork").Process(
        target=_write_locked, args=(rb, kind, 10_000, 3, batch, point)
    )
    process.start()
    wait_dead(process)
    assert process.exitcode == -signal.SIGKILL
    assert within(BOUND_S, lambda: rb.write_count) == committed + batch
    stored = within(BOUND_S, lambda: rb.storage[:])
    ids = set(_whole(kind, stored).tolist())
    assert not ids & dead, "rows of the killed write are visible"
    assert set(range(10_000, 10_000 + batch)) <= ids  # the acknowledged batch stays
    if kind == "consume":  # this process's sampler hears of no other process's write
        assert within(BOUND_S, lambda: len(rb.storage)) == capacity
    else:
        assert within(BOUND_S, lambda: len(rb)) == capacity
        # every committed row the ring order has not reached is where it was
        model = list(range(1, committed + 1)) + list(range(10_000, 10_000 + batch))
        ring = [0] * capacity
        for i, item in enumerate(model):
            ring[i % capacity] = item
        cursor = len(model) % capacity
        column = stored["obs"] if kind == "slice" else stored
        for slot in range(capacity):
            if not 0 <= (slot - cursor) % capacity < batch:  # not the rows it was overwriting
                assert int(column[slot, 0]) == ring[slot], slot
        for _ in range(4):
            got = set(_whole(kind, within(BOUND_S, lambda: rb.sample(32))).tolist())
            assert not got & dead
    within(BOUND_S, lambda: rb.extend(_batch(kind, 20_000, 5)))  # the next writer goes on
    assert rb.write_count == committed + batch + 5
    ids = set(_whole(kind, within(BOUND_S, lambda: rb.storage[:])).tolist())
    assert set(range(20_000, 20_005)) <= ids and not ids & dead
