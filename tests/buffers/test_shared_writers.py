"""A buffer shared with spawned writer processes (torchrl's ``share()`` / ``shared=True``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import torch
import torch.multiprocessing as mp
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)

WRITERS, PER_WRITER, CHUNK = 4, 50_000, 500
OBS = 6


def transitions(first: int, n: int, obs: int = OBS) -> TensorDict:
    """Transitions ``first .. first + n - 1``: every leaf derived from the id (torn rows show)."""
    ids = torch.arange(first, first + n)
    return TensorDict(
        {
            "id": ids,
            "obs": ids.double().unsqueeze(-1).expand(n, obs).clone(),
            "next": {"check": ids * 7 + 3},
        },
        [n],
    )


def torn(batch: TensorDict) -> int:
    """How many rows of ``batch`` mix two transitions."""
    ids = batch["id"]
    bad = (batch["obs"] != ids.double().unsqueeze(-1)).any(-1) | (
        batch["next", "check"] != ids * 7 + 3
    )
    return int(bad.sum())


def write_transitions(rb: TensorDictReplayBuffer, worker: int, done: mp.Queue) -> None:
    first = worker * PER_WRITER
    for start in range(first, first + PER_WRITER, CHUNK):
        rb.extend(transitions(start, CHUNK))
    done.put(worker)


def sample_while_writing(
    rb: TensorDictReplayBuffer,
    target: Callable[[TensorDictReplayBuffer, int, mp.Queue], None],
    check: Callable[[], bool],
) -> int:
    """Run ``WRITERS`` spawned ``target(rb, worker, done)``; ``check()`` until they are done.

    ``check`` returns whether it sampled (if not, the parent waits a millisecond).
    Returns how many times it sampled; every writer must exit cleanly.
    """
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    workers = [ctx.Process(target=target, args=(rb, w, done)) for w in range(WRITERS)]
    for worker in workers:
        worker.start()
    finished, sampled, deadline = set(), 0, time.monotonic() + 120
    while len(finished) < WRITERS and time.monotonic() < deadline:
        while not done.empty():
            finished.add(done.get())
        if check():
            sampled += 1
        else:
            time.sleep(0.001)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return sampled


def test_four_spawned_writers_while_the_parent_samples():
    total = WRITERS * PER_WRITER
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        storage=LazyTensorStorage(total),
        batch_size=256,
        shared=True,
        sync=False,
    )
    rb.extend(transitions(total, 1))  # one more item, then emptied: the layout is set here
    rb.empty()
    torn_rows = []

    def check() -> bool:
        if len(rb) < 256:
            return False
        batch = rb.sample()
        torn_rows.append(torn(batch))
        assert bool((batch["id"] < total).all())
        return True

    sampled = sample_while_writing(rb, write_transitions, check)
    assert sum(torn_rows) == 0 and sampled > 0

    assert len(rb) == total and rb.write_count == total
    everything = rb[:]
    assert torn(everything) == 0
    assert torch.equal(everything["id"].sort().values, torch.arange(total))  # each one once
    # the learner's priorities cover every item, whichever process wrote it
    batch = rb.sample()
    assert rb._prioritized_sampler_write_count == total
    leaves = rb.prioritized_sampler._sum_tree
    assert leaves.query(0, total) == pytest.approx(total * float(leaves[torch.tensor([0])]))
    assert torn(batch) == 0 and "priority_weight" in batch.keys()


@pytest.mark.parametrize("sampler", [RandomSampler, SamplerWithoutReplacement])
def test_four_writers_copy_outside_the_lock_into_a_uniform_buffer(sampler):
    total = WRITERS * PER_WRITER
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(total), sampler=sampler(), batch_size=256, shared=True
    )
    rb.extend(transitions(total, 1))  # the layout is set here
    rb.empty()
    reserved = rb.lock.shared.in_flight.reservations

    def check() -> bool:
        if len(rb) < 256:
            return False
        batch = rb.sample()
        assert torn(batch) == 0 and bool((batch["id"] < total).all())
        return True

    assert sample_while_writing(rb, write_transitions, check) > 0
    # every write was reserved, then copied without the lock
    assert rb.lock.shared.in_flight.reservations - reserved == total // CHUNK
    assert not rb.lock.shared.in_flight.busy()
    assert len(rb) == total and rb.write_count == total
    everything = rb[:]
    assert torn(everything) == 0
    assert torch.equal(everything["id"].sort().values, torch.arange(total))  # each one once


WIDE, RING, OVERWRITES = 2048, 500, 4_000  # 16 kB rows: each copy takes a while


def overwrite_ring(rb: TensorDictReplayBuffer, worker: int, done: mp.Queue) -> None:
    first = RING + worker * OVERWRITES
    for start in range(first, first + OVERWRITES, 50):
        rb.extend(transitions(start, 50, WIDE))
    done.put(worker)


def test_readers_never_see_rows_a_writer_is_overwriting():
    # a small ring of wide rows: writers overwrite the rows the parent samples all the time
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(RING), batch_size=256, shared=True)
    rb.extend(transitions(0, RING, WIDE))

    def check() -> bool:
        assert torn(rb.sample()) == 0
        assert torn(rb[torch.randint(RING, (64,))]) == 0
        return True

    sampled = sample_while_writing(rb, overwrite_ring, check)
    assert sampled > 0 and rb.write_count == RING + WRITERS * OVERWRITES
    assert torn(rb[:]) == 0


def test_a_batch_that_does_not_fit_moves_nothing_in_a_shared_buffer():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=4, shared=True)
    rb.extend(transitions(0, 10))
    state = (len(rb), rb.write_count, rb.writer.cursor, rb.lock.shared.in_flight.reservations)
    bad = transitions(10, 5)
    bad["obs"] = bad["obs"].float()  # a dtype the storage does not hold
    with pytest.raises((TypeError, ValueError)):
        rb.extend(bad)
    assert (len(rb), rb.write_count, rb.writer.cursor) == state[:3]
    assert rb.lock.shared.in_flight.reservations == state[3]
    assert rb[:]["id"].tolist() == list(range(10))


def extend_each(buffers: list[ReplayBuffer], value: float, done: mp.Queue) -> None:
    for rb in buffers:
        rb.extend(TensorDict({"x": torch.full((2,), value)}, [2]))
    done.put(value)


def test_spawned_children_initialize_a_shared_init_storage(tmp_path):
    storages = [
        LazyTensorStorage(100, shared_init=True),
        LazyMemmapStorage(100, shared_init=True, scratch_dir=tmp_path),
    ]
    buffers = [ReplayBuffer(storage=storage, batch_size=2).share() for storage in storages]
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    children = [ctx.Process(target=extend_each, args=(buffers, float(i), done)) for i in range(3)]
    for child in children:
        child.start()
    for child in children:
        child.join(timeout=60)
        assert child.exitcode == 0
    for rb, storage in zip(buffers, storages, strict=True):
        # nobody wrote here: the first child laid the rows out, the others and we map them
        assert len(rb) == 6 and rb.write_count == 6
        assert sorted(storage[:]["x"].tolist()) == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
        assert rb.sample().shape == (2,)


def noop(rb: ReplayBuffer) -> None:
    """A child that only receives the buffer."""


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ReplayBuffer(storage=ListStorage(10), shared=True), "Cannot share a storage"),
        (
            lambda: TensorDictReplayBuffer(
                storage=LazyTensorStorage(10), writer=TensorDictMaxValueWriter(rank_key="x")
            ),
            "cannot be shared between processes",
        ),
        (lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(10)), "not been initialized"),
        (
            lambda: TensorDictPrioritizedReplayBuffer(
                alpha=0.7, beta=0.5, storage=LazyTensorStorage(10)
            ),
            "sync=False",
        ),
    ],
)
def test_what_cannot_go_to_a_spawned_child_is_refused_at_start(make, message):
    rb = make()
    if "initialized" not in message:
        rb.extend(TensorDict({"x": torch.ones(2)}, [2]))
    child = mp.get_context("spawn").Process(target=noop, args=(rb,))
    with pytest.raises(RuntimeError, match=message):
        child.start()


def test_share_rules():
    with pytest.raises(ValueError, match="prefetch=0 or shared=False"):
        TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=2, prefetch=1, shared=True)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    assert rb.share() is rb and rb._sync.shared
    assert rb.share(False) is rb and not rb._sync.shared
    with pytest.raises(TypeError, match="shared must be a bool"):
        rb.share(1)
    with pytest.raises(ValueError, match="1-D storages when sync=False"):
        TensorDictPrioritizedReplayBuffer(
            alpha=0.7, beta=0.5, storage=LazyTensorStorage(12, ndim=2), sync=False
        )


def slow_writer(rb: TensorDictReplayBuffer, n: int) -> None:
    for start in range(0, n, 50):
        rb.extend(transitions(start, 50))
        time.sleep(0.01)


def test_a_replay_dataset_reads_what_a_spawned_collector_writes():
    from rbdata import ReplayDataset

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(2000), batch_size=32).share()
    rb.extend(transitions(0, 1))
    rb.empty()
    collector = mp.get_context("spawn").Process(target=slow_writer, args=(rb, 2000))
    collector.start()
    # min_size waits on the buffer's cross-process condition: the collector's writes wake it
    with ReplayDataset(rb, num_batches=20, min_size=1000, timeout=60) as ds:
        batches = list(ds)
    collector.join(timeout=60)
    assert collector.exitcode == 0 and len(batches) == 20
    assert all(torn(batch) == 0 for batch in batches)
    assert len(rb) == 2000


def extend_in_child(rb: ReplayBuffer, first: int, n: int) -> None:
    rb.extend(torch.arange(first, first + n))
    assert len(rb) == first + n and rb.write_count == first + n


@pytest.mark.parametrize("shared", [False, True])
def test_a_forked_childs_writes_into_a_list_storage_stay_in_the_child(shared):
    # torchrl's ListStorage counts its own list: the parent keeps its 3 items, its length,
    # cursor and write count, and writes on after them
    rb = ReplayBuffer(storage=ListStorage(10), shared=shared)
    rb.extend(torch.arange(3))
    child = mp.get_context("fork").Process(target=extend_in_child, args=(rb, 3, 5))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert (len(rb), rb.write_count, rb._writer.cursor) == (3, 3, 3)
    rb.extend(torch.arange(10, 12))
    assert rb.storage[:] == [0, 1, 2, 10, 11]


def test_a_forked_childs_writes_into_a_memmap_storage_reach_the_parent():
    rb = ReplayBuffer(storage=LazyMemmapStorage(10))
    rb.extend(torch.arange(3))
    child = mp.get_context("fork").Process(target=extend_in_child, args=(rb, 3, 5))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == 0
    assert (len(rb), rb.write_count) == (8, 8)
    assert rb.storage[:].tolist() == list(range(8))


def _count_draws(monkeypatch: pytest.MonkeyPatch, sampler_type: type) -> list[int]:
    calls = [0]
    sample = sampler_type.sample

    def counted(self: object, storage: object, batch_size: int) -> object:
        calls[0] += 1
        return sample(self, storage, batch_size)

    monkeypatch.setattr(sampler_type, "sample", counted)
    return calls


def test_a_reader_draws_again_rather_than_wait_for_rows_in_flight(monkeypatch):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32, shared=True)
    rb.extend(transitions(0, 1000))
    draws = _count_draws(monkeypatch, RandomSampler)
    in_flight = rb.lock.shared.in_flight
    torch.manual_seed(0)
    slot = in_flight.claim((0, 2, 0, 0))  # another process is still copying rows 0 and 1
    timer = threading.Timer(2.0, in_flight.release, (slot,))  # a read that waits ends later
    timer.start()
    try:
        start = time.monotonic()
        for _ in range(200):
            _, info = rb.sample(return_info=True)
            assert bool((info["index"] >= 2).all())
        # no read waited for the copy (each wait lasts until it is done, or 10 ms)
        assert time.monotonic() - start < 1.0
    finally:
        timer.cancel()
        in_flight.release(slot)
    assert draws[0] > 200  # some batches held row 0 or 1, and were drawn again
    before = draws[0]
    rb.sample()
    assert draws[0] == before + 1  # nothing in flight: one draw


def test_a_sampler_without_replacement_waits_for_rows_in_flight(monkeypatch):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SamplerWithoutReplacement(),
        batch_size=100,
        shared=True,
    )
    rb.extend(transitions(0, 100))
    draws = _count_draws(monkeypatch, SamplerWithoutReplacement)
    in_flight = rb.lock.shared.in_flight
    slot = in_flight.claim((40, 42, 0, 0))
    start = time.monotonic()
    threading.Timer(0.05, in_flight.release, (slot,)).start()  # the copy ends in 50 ms
    batch, info = rb.sample(return_info=True)
    # drawing again would skip items of its pass: it waited for the copy instead
    assert time.monotonic() - start >= 0.05 and draws[0] == 1
    assert torch.equal(info["index"].sort().values, torch.arange(100)) and torn(batch) == 0
