"""The Ray client serves ReplayDataset (the ServableBuffer protocol)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import torch
from service_data import transitions

from rbdata import (
    LazyTensorStorage,
    PolicyAgeFilter,
    ReplayDataset,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.buffers.protocol import ServableBuffer

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

OPTIONS = {"remote_config": {"num_cpus": 0}}  # actors reserve no CPU of the 2-CPU cluster


@pytest.fixture(scope="module")
def loader_rb(ray_cluster: Any) -> Any:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        sampler=SamplerWithoutReplacement(),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=16,
        prefetch=2,
        generator=torch.Generator().manual_seed(0),
        service_backend="ray",
        service_backend_options=OPTIONS,
    )
    yield rb
    rb.shutdown()


@pytest.fixture
def filled(loader_rb: Any) -> Any:
    loader_rb.empty()
    loader_rb.extend(transitions(64))
    return loader_rb


def test_the_client_is_a_servable_buffer(filled: Any) -> None:
    client = filled.client()
    assert isinstance(client, ServableBuffer) and isinstance(filled, ServableBuffer)
    assert client.batch_size == 16 and not client.prioritized


def test_a_dataset_over_the_client_yields_one_pass_with_requests_in_flight(filled: Any) -> None:
    client = filled.client()
    with ReplayDataset(client, prefetch=2) as ds:
        batches = list(ds)
    seen = torch.cat([b["obs"][:, 0] for b in batches]).sort().values
    assert seen.tolist() == [float(i) for i in range(64)]  # every item once
    assert all(b["index_generation"].shape == (16,) for b in batches)
    assert client._ring is not None  # batches arrived in shared-memory slots


def test_a_resumed_dataset_continues_with_the_same_batches(filled: Any) -> None:
    client = filled.client()
    ds = ReplayDataset(client, num_batches=4, prefetch=1)
    it = iter(ds)
    next(it)
    state = ds.state_dict()  # two draws may be in flight in the client: they are in the state
    rest = [b["index"].tolist() for b in it]
    ds.close()
    resumed = ReplayDataset(filled.client(), num_batches=4, prefetch=1)
    resumed.load_state_dict(state)
    assert [b["index"].tolist() for b in resumed] == rest
    resumed.close()


def test_the_dataset_waits_for_a_collector_without_spinning(filled: Any) -> None:
    filled.empty()
    client = filled.client()

    def collect() -> None:
        time.sleep(0.3)
        filled.extend(transitions(16))

    thread = threading.Thread(target=collect)
    thread.start()
    with ReplayDataset(client, num_batches=1, timeout=10.0) as ds:
        start = time.monotonic()
        batches = list(ds)
    thread.join()
    assert len(batches) == 1 and 0.25 < time.monotonic() - start < 5.0
    woke = threading.Event()
    waiter = threading.Thread(
        target=lambda: woke.set() if not client.wait_for_data(woke.is_set, 30.0) else None
    )
    waiter.start()
    time.sleep(0.1)
    woke.set()
    client.notify_waiters()  # the waiter re-checks its predicate at once, not in 30 s
    waiter.join(timeout=5.0)
    assert not waiter.is_alive()


def test_stats_sources_merge_into_the_clients_stats(filled: Any) -> None:
    client = filled.client()
    handle = client.register_stats_source(lambda: {"collector_steps": 7})
    stats = client.stats()
    assert stats["collector_steps"] == 7 and stats["size"] == 64
    handle.remove()
    assert "collector_steps" not in client.stats()


def test_priorities_and_policy_versions_reach_the_one_buffer(ray_cluster: Any) -> None:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=0.5,
        storage=LazyTensorStorage(100),
        batch_size=8,
        transform=PolicyAgeFilter(0, max_policy_lag=1),
        service_backend="ray",
        service_backend_options=OPTIONS,
    )
    try:
        rb.extend(transitions(10, version=0))
        rb.extend(transitions(10, start=10, version=2))
        clients = [rb.client(), rb.client()]
        assert clients[0].prioritized
        for client in clients:
            draw = client.draw(8)
            batch = client.gather(draw)
            client.update_batch_priority(batch, torch.zeros(batch.batch_size[0]))
        clients[1].publish_policy_version(3)  # version 0 data is now too old
        draws = [clients[0].draw(8) for _ in range(5)]
        batches = [clients[0].gather(d) for d in draws]
        assert all((b["policy_version"] == 2).all() for b in batches)
        ahead = clients[0].gather(clients[0].draw(8))
        clients[0].publish_policy_version(4)  # a batch gathered earlier is filtered again
        assert clients[0].refilter(ahead).batch_size[0] == 0
    finally:
        rb.shutdown()


def test_the_client_passes_the_conformance_checks(
    ray_cluster: Any, check_servable: Any, tmp_path: Any
) -> None:
    owners: list[Any] = []

    def make() -> Any:
        owner = TensorDictReplayBuffer(
            storage=LazyTensorStorage(64),
            writer=TensorDictRoundRobinWriter(track_generations=True),
            batch_size=4,
            service_backend="ray",
            service_backend_options=OPTIONS,
        )
        owners.append(owner)
        return owner.client()

    try:
        check_servable(make, tmp_path)
    finally:
        for owner in owners:
            owner.shutdown()
