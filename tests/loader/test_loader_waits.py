"""ReplayDataset waits: min_size, timeout, collector threads, rate limiting."""

from __future__ import annotations

import collections
import threading
import time

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict
from torch.utils.data import DataLoader
from torch.utils.hooks import RemovableHandle

from rbdata import (
    LazyTensorStorage,
    RandomSampler,
    ReplayDataset,
    TensorDictReplayBuffer,
)
from rbdata.loader import SampleToInsertRatio


def transitions(n: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict({"obs": obs.unsqueeze(-1).clone()}, batch_size=[n])


def td_buffer(capacity: int = 1000, batch_size: int = 4, **kwargs):
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=RandomSampler(),
        batch_size=batch_size,
        **kwargs,
    )


class Collector(threading.Thread):
    """Extends the buffer with ``chunks`` chunks of ``size`` items, ``period`` s apart."""

    def __init__(self, rb, chunks: int, size: int, period: float, limiter=None) -> None:
        super().__init__(daemon=True)
        self.rb, self.chunks, self.size = rb, chunks, size
        self.period, self.limiter = period, limiter
        self.written = 0

    def run(self) -> None:
        for i in range(self.chunks):
            time.sleep(self.period)
            if self.limiter is not None:
                assert self.limiter.wait_for_learner(timeout=10.0)
            self.rb.extend(transitions(self.size, start=i * self.size))
            self.written += self.size


def timed_next(it):
    """next(it) with the wall and CPU time spent in this thread."""
    wall, cpu = time.monotonic(), time.thread_time()
    try:
        return next(it), time.monotonic() - wall, time.thread_time() - cpu
    except StopIteration:
        return None, time.monotonic() - wall, time.thread_time() - cpu


def test_min_size_waits_without_busy_looping():
    rb = td_buffer()
    collector = Collector(rb, chunks=4, size=5, period=0.1)
    it = iter(ReplayDataset(rb, min_size=20))
    collector.start()
    batch, wall, cpu = timed_next(it)
    assert len(rb) >= 20 and batch is not None
    assert wall >= 0.3
    assert cpu < 0.1 * wall  # slept, not spun
    collector.join()


def test_timeout_ends_the_pass_when_no_data_comes():
    rb = td_buffer()
    it = iter(ReplayDataset(rb, timeout=0.4))
    batch, wall, cpu = timed_next(it)
    assert batch is None
    assert 0.35 <= wall < 2.0
    assert cpu < 0.1


def test_without_timeout_an_empty_buffer_ends_the_pass_at_once():
    rb = td_buffer()
    batch, wall, _ = timed_next(iter(ReplayDataset(rb, prefetch=2)))
    assert batch is None and wall < 0.5


@pytest.mark.parametrize("prefetch", [0, 2])
def test_dataloader_with_a_collector_thread_yields_everything_once(prefetch):
    rb = td_buffer(consume_after_n_samples=1)
    collector = Collector(rb, chunks=6, size=10, period=0.05)
    ds = ReplayDataset(rb, prefetch=prefetch, timeout=0.5)
    collector.start()
    batches = list(DataLoader(ds, batch_size=None))
    collector.join()
    obs = torch.cat([b["obs"] for b in batches]).squeeze(-1)
    assert sorted(obs.tolist()) == [float(i) for i in range(60)]
    ds.close()


def test_min_size_never_reached_within_timeout_raises():
    rb = td_buffer()
    rb.extend(transitions(3))
    it = iter(ReplayDataset(rb, min_size=10, timeout=0.2))
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"min_size=10.*holds 3.*timeout=0.2"):
        next(it)
    assert 0.15 <= time.monotonic() - start < 2.0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_min_size_timeout_raises_through_a_dataloader(prefetch):
    rb = td_buffer()
    ds = ReplayDataset(rb, min_size=10, timeout=0.2, prefetch=prefetch)
    with ds, pytest.raises(TimeoutError, match="min_size=10"):
        next(iter(DataLoader(ds, batch_size=None)))


def test_timeout_after_learning_started_ends_the_pass_without_error():
    # each item is sampled once, then the buffer (no collector any more) is exhausted and,
    # under consumption, below min_size again: the pass ends, without an error
    rb2 = td_buffer(batch_size=4, consume_after_n_samples=1)
    rb2.extend(transitions(10))
    ds = ReplayDataset(rb2, min_size=4, timeout=0.2)
    batches = list(ds)
    assert [b.batch_size[0] for b in batches] == [4, 4]  # 2 left < min_size, no write: ends


def test_min_size_wait_logs_what_it_waits_for(monkeypatch, caplog):
    from rbdata.loader import _pass

    monkeypatch.setattr(_pass, "_LOG_EVERY_S", 0.1)
    rb = td_buffer()
    rb.extend(transitions(3))
    with caplog.at_level("WARNING", logger="rbdata.loader"), pytest.raises(TimeoutError):
        next(iter(ReplayDataset(rb, min_size=10, timeout=0.45)))
    lines = [r.getMessage() for r in caplog.records if r.name == "rbdata.loader"]
    assert len(lines) >= 2
    assert "min_size=10" in lines[0] and "holds 3" in lines[0] and "0.45 s" in lines[0]


@pytest.mark.parametrize("capacity", [100])
def test_min_size_above_capacity_is_refused(capacity):
    rb = td_buffer(capacity=capacity)
    with pytest.raises(ValueError, match=r"min_size=1000.*capacity 100"):
        ReplayDataset(rb, min_size=1000)
    ReplayDataset(rb, min_size=100)  # exactly the capacity is fine


def test_min_size_above_offline_to_online_capacity_is_refused():
    from rbdata import OfflineToOnlineReplayBuffer

    rb = OfflineToOnlineReplayBuffer(transitions(30), online_capacity=20, batch_size=4)
    ReplayDataset(rb, min_size=50)
    with pytest.raises(ValueError, match=r"min_size=51.*capacity 50"):
        ReplayDataset(rb, min_size=51)


def test_a_pass_without_any_batch_raises_when_empty_passes_are_not_allowed():
    rb = td_buffer()
    ds = ReplayDataset(rb, num_batches=3)
    assert list(ds) == []  # the default: an empty buffer ends the pass at once
    ds.allow_empty_pass = False
    with pytest.raises(RuntimeError, match="handed out no batch.*holds 0 items"):
        list(ds)
    rb.extend(transitions(5))
    assert len(list(ds)) == 3


def test_closing_interrupts_a_waiting_prefetch_thread():
    rb = td_buffer()
    before = threading.active_count()
    ds = ReplayDataset(rb, min_size=5, prefetch=2)
    it = iter(ds)
    result = []
    consumer = threading.Thread(target=lambda: result.append(timed_next(it)), daemon=True)
    consumer.start()
    time.sleep(0.2)
    start = time.monotonic()
    ds.close()
    consumer.join(2.0)
    assert not consumer.is_alive() and result[0][0] is None
    assert time.monotonic() - start < 0.5
    assert threading.active_count() == before


# ---------------------------------------------------------------- rate limiting


def test_rate_limiter_keeps_the_ratio_and_reports_waits():
    rb = td_buffer(batch_size=8)
    limiter = SampleToInsertRatio(samples_per_insert=2.0, tolerance=0.25, min_size_to_sample=16)
    ds = ReplayDataset(rb, rate_limiter=limiter, prefetch=1, timeout=0.5)
    collector = Collector(rb, chunks=10, size=16, period=0.02, limiter=limiter)
    collector.start()
    sampled = 0
    for batch in ds:
        sampled += batch.batch_size[0]
        # never more than the upper bound, plus the batches sampled before the check
        assert sampled <= 2.0 * 1.25 * rb.write_count + 8
    collector.join()
    stats = rb.stats()
    assert stats["samples_per_insert"] == pytest.approx(sampled / 160)
    assert 2.0 * 0.75 <= stats["samples_per_insert"] <= 2.0 * 1.25 + 8 / 160
    assert stats["rate_limit_waits"] >= 1 and stats["rate_limit_wait_s"] > 0
    assert limiter.sampled == sampled
    ds.close()


def test_collector_side_waits_for_the_learner():
    rb = td_buffer()
    limiter = SampleToInsertRatio(samples_per_insert=1.0, tolerance=0.0, min_size_to_sample=4)
    ReplayDataset(rb, rate_limiter=limiter)
    assert limiter.can_insert()
    rb.extend(transitions(8))
    assert not limiter.can_insert()  # the learner has not sampled yet
    start = time.monotonic()
    assert limiter.wait_for_learner(timeout=0.1) is False
    assert time.monotonic() - start >= 0.09
    released = []
    waiter = threading.Thread(target=lambda: released.append(limiter.wait_for_learner(5.0)))
    waiter.start()
    limiter.record_sample(8)
    waiter.join(2.0)
    assert released == [True]
    assert rb.stats()["rate_limit_insert_waits"] == 2


def test_samples_per_insert_shortcut_and_limiter_checks():
    rb = td_buffer()
    rb.extend(transitions(10))
    ds = ReplayDataset(rb, samples_per_insert=1.0, timeout=0.05)
    assert len(list(ds)) == 3  # 10 inserted: up to 11 sampled, in batches of 4
    with pytest.raises(ValueError, match="another buffer"):
        ReplayDataset(td_buffer(), rate_limiter=ds.rate_limiter)
    with pytest.raises(ValueError, match="tolerance"):
        SampleToInsertRatio(1.0, tolerance=-1)
    with pytest.raises(ValueError, match="min_size_to_sample"):
        SampleToInsertRatio(1.0, min_size_to_sample=0)
    with pytest.raises(TypeError, match="samples_per_insert"):
        SampleToInsertRatio("1")


class FakeBuffer:
    def __init__(self) -> None:
        self.write_count = 0
        self.sources = []

    def register_stats_source(self, source):
        self.sources.append(source)
        return RemovableHandle(collections.OrderedDict())


@given(
    ratio=st.floats(0.05, 20.0),
    tolerance=st.floats(0.0, 2.0),
    min_size=st.integers(1, 100),
    inserted=st.integers(0, 10_000),
    sampled=st.integers(0, 200_000),
)
def test_rate_limiter_sides_never_both_block(ratio, tolerance, min_size, inserted, sampled):
    buffer = FakeBuffer()
    limiter = SampleToInsertRatio(ratio, tolerance=tolerance, min_size_to_sample=min_size)
    limiter.attach(buffer)
    buffer.write_count = inserted
    limiter.record_sample(sampled)
    assert limiter.can_sample() or limiter.can_insert()  # no deadlock
    if limiter.can_sample() and inserted:
        assert sampled < ratio * (1 + tolerance) * inserted
