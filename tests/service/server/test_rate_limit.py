"""The rate limiter the owner enforces across all clients: blocking waits, woken, with a timeout."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch

from rbdata import (
    LazyTensorStorage,
    RateLimitTimeoutError,
    ReplayBuffer,
    SampleToInsertRatio,
)
from rbdata.service.server.rate_limit import ServiceRateLimiter

OPTIONS = {"remote_config": {"num_cpus": 0}}


# ------------------------------------------------------------------- no Ray
def test_a_held_insert_is_woken_by_a_sample_not_by_its_timeout() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(100), batch_size=10)
    gate = ServiceRateLimiter(SampleToInsertRatio(1.0, tolerance=0.0, min_size_to_sample=10), 30.0)
    gate.attach(rb)
    gate.run("extend", None, lambda: rb.extend(torch.arange(10)))  # below min_size: free
    done = threading.Event()
    writer = threading.Thread(
        target=lambda: (gate.run("extend", None, lambda: rb.extend(torch.arange(10))), done.set())
    )
    writer.start()
    assert not done.wait(0.3)  # 10 inserted, 0 sampled: the insert waits for the learner
    start = time.monotonic()
    gate.run("sample", None, rb.sample)  # 10 sampled: the insert may go
    assert done.wait(10.0) and time.monotonic() - start < 5.0  # woken, not timed out (30 s)
    writer.join()
    stats = rb.stats()
    assert len(rb) == 20 and stats["rate_limit_insert_waits"] == 1
    assert stats["samples_per_insert"] == 0.5


def test_calls_other_than_samples_and_inserts_are_not_held() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    gate = ServiceRateLimiter(SampleToInsertRatio(1.0, min_size_to_sample=5), 0.01)
    gate.attach(rb)
    assert gate.run("stats", None, lambda: 7) == 7
    with pytest.raises(RateLimitTimeoutError, match=r"draw_gather: .* 0 items inserted, 0 sampled"):
        gate.run("draw_gather", 2, lambda: None)


# ------------------------------------------------------------------- through Ray
@pytest.fixture
def limited(ray_cluster: Any) -> Any:
    limiter = SampleToInsertRatio(samples_per_insert=1.0, tolerance=0.0, min_size_to_sample=20)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(1000),
        batch_size=10,
        service_backend="ray",
        service_backend_options={**OPTIONS, "rate_limiter": limiter, "rate_limiter_timeout": 20},
    )
    yield rb
    rb.shutdown()


def _ready(ray: Any, ref: Any, timeout: float) -> bool:
    return bool(ray.wait([ref], timeout=timeout)[0])


@pytest.mark.ray
def test_a_learner_waits_until_the_collectors_inserted_enough(
    limited: Any, ray_cluster: Any
) -> None:
    ray = ray_cluster

    @ray.remote(num_cpus=0)
    def learn(client: Any, batches: int) -> list[int]:
        return [int(client.sample().numel()) for _ in range(batches)]

    @ray.remote(num_cpus=0)
    def collect(client: Any, start: int, n: int) -> None:
        client.extend(torch.arange(start, start + n))

    learner = learn.remote(limited.client(), 3)
    assert not _ready(ray, learner, 0.5)  # nothing inserted
    ray.get(collect.remote(limited.client(), 0, 15))
    assert not _ready(ray, learner, 0.5)  # below min_size_to_sample=20
    assert len(limited) == 15 and limited.stats()["size"] == 15  # reads are not held
    ray.get(collect.remote(limited.client(), 15, 5))  # 20 inserted: 2 batches (10 < 20)
    assert not _ready(ray, learner, 1.0)  # the third needs sampled (20) < inserted: more
    ray.get(collect.remote(limited.client(), 20, 5))  # 25 inserted: 20 sampled < 25
    assert ray.get(learner, timeout=20) == [10, 10, 10]
    stats = limited.stats()
    assert stats["rate_limit_waits"] >= 2 and stats["samples_per_insert"] == 30 / 25


@pytest.mark.ray
def test_a_collector_waits_until_the_learner_sampled_enough(limited: Any, ray_cluster: Any) -> None:
    ray = ray_cluster

    @ray.remote(num_cpus=0)
    def collect(client: Any, start: int, n: int) -> int:
        client.extend(torch.arange(start, start + n))
        return len(client)

    assert ray.get(collect.remote(limited.client(), 0, 20)) == 20  # up to min_size: free
    collector = collect.remote(limited.client(), 20, 10)
    assert not _ready(ray, collector, 0.5)  # 20 inserted, 0 sampled
    learner = limited.client()
    assert learner.stats()["size"] == 20  # other calls are not held
    learner.sample()
    assert not _ready(ray, collector, 0.5)  # 10 sampled < 20
    learner.sample()
    assert ray.get(collector, timeout=20) == 30


@pytest.mark.ray
def test_a_wait_past_the_timeout_raises(ray_cluster: Any) -> None:
    limiter = SampleToInsertRatio(samples_per_insert=1.0, tolerance=0.0, min_size_to_sample=4)
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        batch_size=4,
        prefetch=2,
        service_backend="ray",
        service_backend_options={**OPTIONS, "rate_limiter": limiter, "rate_limiter_timeout": 0.3},
    )
    try:
        start = time.monotonic()
        with pytest.raises(RateLimitTimeoutError, match="sample: the buffer's rate limiter"):
            rb.client(prefetch=0).sample()
        assert 0.25 < time.monotonic() - start < 10
        rb.extend(torch.arange(4))  # min_size_to_sample: free
        assert rb.client(prefetch=0).sample().shape == torch.Size([4])  # 0 sampled < 4
        rb.extend(torch.arange(4))  # 4 sampled >= 4 inserted
        with pytest.raises(RateLimitTimeoutError, match="the learners have not sampled enough"):
            rb.extend(torch.arange(4))  # 4 sampled < 8 inserted
        assert rb.write_count == 8  # the held write was not run
        assert rb.sample().shape == torch.Size([4])  # requests in flight: held the same way
    finally:
        rb.shutdown()


@pytest.mark.ray
@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"rate_limiter": 2.0}, TypeError, "must be a SampleToInsertRatio, got float"),
        (
            {"rate_limiter": SampleToInsertRatio(1.0), "rate_limiter_timeout": 0},
            ValueError,
            r"rate_limiter_timeout'\] must be > 0 s, got 0",
        ),
        (
            {
                "rate_limiter": SampleToInsertRatio(1.0),
                "recovery": {"directory": "/tmp/x", "every_writes": 1},
            },
            ValueError,
            "does not combine with 'coalesce' or 'rate_limiter'",
        ),
    ],
)
def test_bad_rate_limiter_options_are_refused(
    ray_cluster: Any, options: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        ReplayBuffer(service_backend="ray", service_backend_options={**OPTIONS, **options})
