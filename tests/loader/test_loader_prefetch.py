"""ReplayDataset prefetching: exactly k ahead, copies, staleness at hand-out, threads."""

from __future__ import annotations

import threading
import time
import warnings

import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from rbdata import (
    LazyTensorStorage,
    PolicyAgeFilter,
    PolicyVersion,
    RandomSampler,
    ReplayDataset,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)


def transitions(n: int, start: int = 0, version: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "obs": obs.unsqueeze(-1).expand(n, 3).clone(),
            "policy_version": torch.full((n,), version),
            "next": {"reward": obs.unsqueeze(-1).clone()},
        },
        batch_size=[n],
    )


def td_buffer(n: int = 10, capacity: int = 100, sampler=None, batch_size: int = 4, **kwargs):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=sampler if sampler is not None else RandomSampler(),
        batch_size=batch_size,
        **kwargs,
    )
    if n:
        rb.extend(transitions(n))
    return rb


def count_samples(rb) -> list[int]:
    """Count the batches drawn from ``rb`` (wraps its public ``draw``)."""
    calls = []
    inner = rb.draw

    def counting(batch_size):
        calls.append(batch_size)
        return inner(batch_size)

    rb.draw = counting
    return calls


def wait_until(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_prefetch_samples_exactly_k_batches_ahead(k):
    rb = td_buffer()
    calls = count_samples(rb)
    with ReplayDataset(rb, prefetch=k) as ds:
        it = iter(DataLoader(ds, batch_size=None))
        time.sleep(0.05)
        assert calls == []  # lazy: nothing sampled before the first batch is asked for
        next(it)
        assert wait_until(lambda: len(calls) == 1 + k)
        time.sleep(0.1)  # and no more than that
        assert len(calls) == 1 + k
        assert rb.stats()["loader_pending_batches"] == k
        for handed_out in range(2, 5):
            next(it)
            assert wait_until(lambda n=handed_out: len(calls) == n + k)
        time.sleep(0.05)
        assert len(calls) == 4 + k


def test_prefetch_zero_samples_on_demand():
    rb = td_buffer()
    calls = count_samples(rb)
    it = iter(ReplayDataset(rb))
    next(it)
    next(it)
    time.sleep(0.05)
    assert len(calls) == 2


def test_prefetched_batches_are_copies():
    rb = td_buffer(8, capacity=8, sampler=SamplerWithoutReplacement(shuffle=False), batch_size=2)
    with ReplayDataset(rb, prefetch=3) as ds:
        it = iter(ds)
        first = next(it)
        assert wait_until(lambda: rb.stats()["loader_pending_batches"] == 3)
        # overwrite every slot with new values
        rb.extend(transitions(8, start=100))
        assert first["obs"][:, 0].tolist() == [0.0, 1.0]
        later = [next(it) for _ in range(3)]
    assert [b["obs"][:, 0].tolist() for b in later] == [[2.0, 3.0], [4.0, 5.0], [6.0, 7.0]]
    assert first["next", "reward"].squeeze(-1).tolist() == [0.0, 1.0]


def test_policy_age_filter_is_rechecked_at_hand_out():
    version = PolicyVersion()
    rb = td_buffer(0, sampler=SamplerWithoutReplacement(shuffle=False), batch_size=4)
    rb.append_transform(PolicyAgeFilter(version, max_policy_lag=1))
    data = transitions(12)
    data["policy_version"] = torch.arange(12) % 2  # versions 0, 1, 0, 1, ...
    rb.extend(data)
    with ReplayDataset(rb, prefetch=2) as ds:
        it = iter(ds)
        first = next(it)
        assert first["policy_version"].tolist() == [0, 1, 0, 1]  # fresh enough at version 0
        assert wait_until(lambda: rb.stats()["loader_pending_batches"] == 2)
        version.set(2)  # the version-0 rows of the prefetched batches are now too old
        rest = list(it)
    assert [b["index"].tolist() for b in rest] == [[5, 7], [9, 11]]
    assert all((b["policy_version"] == 1).all() for b in rest)


def test_pin_memory_warns_once_without_accelerator_and_works_with_transforms():
    if torch.accelerator.is_available():
        pytest.skip("this machine has an accelerator: pinning happens")
    rb = td_buffer(sampler=SamplerWithoutReplacement(shuffle=False), batch_size=5)
    rb.append_transform(lambda td: td.set("obs2", td["obs"] * 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ReplayDataset(rb, prefetch=2, pin_memory=True, device="cpu")
        batches = list(ds)
        batches += list(ds)
    assert len([w for w in caught if "pin_memory" in str(w.message)]) == 1
    assert len(batches) == 4
    for batch in batches:
        assert torch.equal(batch["obs2"], batch["obs"] * 2)
        assert batch["obs2"].device.type == "cpu"


def test_close_and_context_manager_stop_the_thread():
    before = threading.active_count()
    rb = td_buffer()
    ds = ReplayDataset(rb, prefetch=2)
    it = iter(ds)
    next(it)
    assert threading.active_count() == before + 1
    ds.close()
    assert threading.active_count() == before
    with pytest.raises(StopIteration):
        next(it)
    with ReplayDataset(rb, prefetch=2) as ds2:
        it2 = iter(ds2)
        next(it2)
        assert threading.active_count() == before + 1
    assert threading.active_count() == before


def test_many_short_loops_broken_early_leak_no_threads():
    before = threading.active_count()
    rb = td_buffer(50)
    ds = ReplayDataset(rb, prefetch=2)
    start = time.monotonic()
    for i in range(200):
        loader = DataLoader(ds, batch_size=None) if i % 2 else ds
        for j, _ in enumerate(loader):
            if j == i % 3:
                break
    elapsed = time.monotonic() - start
    assert threading.active_count() == before
    assert elapsed < 10.0


def test_batches_sampled_ahead_carry_over_to_the_next_pass():
    rb = td_buffer(20, sampler=SamplerWithoutReplacement(), batch_size=2)
    calls = count_samples(rb)
    with ReplayDataset(rb, prefetch=3) as ds:
        it = iter(ds)
        seen = [next(it)]
        assert wait_until(lambda: len(calls) == 4)
        del it  # a loop that stops early: its iterator is dropped
        assert rb.stats()["loader_pending_batches"] == 3
        seen += list(ds)  # the next pass hands out the 3 prefetched batches first
    idx = torch.cat([b["index"] for b in seen])
    assert sorted(idx.tolist()) == list(range(20))  # nothing lost, nothing twice
    assert len(calls) == 10


def test_errors_on_the_prefetch_thread_reach_the_consumer():
    rb = td_buffer()

    def broken(td):
        raise RuntimeError("transform exploded")

    rb.append_transform(broken)
    before = threading.active_count()
    with pytest.raises(RuntimeError, match="transform exploded"):
        next(iter(ReplayDataset(rb, prefetch=2)))
    assert wait_until(lambda: threading.active_count() == before)


def test_batches_held_by_the_loop_never_change_while_others_are_sampled_and_written():
    """Recycled gather memory: kept batches stay intact under a collector and direct samples."""
    rb = td_buffer(64, capacity=64, batch_size=8)
    stop = threading.Event()

    def collector() -> None:
        start = 64
        while not stop.is_set():
            rb.extend(transitions(8, start=start))
            start += 8

    thread = threading.Thread(target=collector)
    thread.start()
    kept = []
    try:
        with ReplayDataset(rb, num_batches=60, prefetch=2) as ds:
            for i, batch in enumerate(DataLoader(ds, batch_size=None)):
                if i % 2:
                    kept.append((batch, batch.clone()))
                direct = rb.sample()
                if i % 3 == 0:
                    kept.append((direct, direct.clone()))
    finally:
        stop.set()
        thread.join()
    assert len(kept) == 50
    for batch, copy in kept:
        assert (batch == copy).all()
        # rows are whole items: obs, reward and policy_version come from one write
        assert torch.equal(batch["obs"][:, 0], batch["next", "reward"][:, 0])
