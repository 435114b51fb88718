"""Two raylets on one machine (ray.cluster_utils.Cluster): cross-node path, placement, node loss."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from rbdata import LazyTensorStorage, PrioritizedReplayBuffer, ReplayBuffer
from rbdata.service.server.recovery import RecoveryConfig
from rbdata.service.sharding.buffer import ShardedReplayBuffer

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")
cluster_utils = pytest.importorskip("ray.cluster_utils")


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Any]:
    cluster = cluster_utils.Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1}}
    )
    worker = cluster.add_node(num_cpus=1, resources={"worker": 1})
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster, worker
    ray.shutdown()
    cluster.shutdown()


@ray.remote(num_cpus=0, resources={"worker": 0.01})
def sample_on_worker(client: Any) -> tuple[bool, float]:
    batch = client.sample(2048)
    return client._ring is not None, float(batch.sum())


def test_a_client_on_another_node_gets_no_slots(two_nodes: Any) -> None:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(4096),
        service_backend="ray",
        service_backend_options={
            "remote_config": {"num_cpus": 0, "resources": {"worker": 0.01}},
            "same_node_maps": False,  # on the owner's node the client would map the buffer
        },
    )
    try:
        rb.extend(torch.ones(4096, 64))  # 2048 rows of 256 bytes: a batch big enough for slots
        client = rb.client()
        here = ray.get_runtime_context().get_node_id()
        assert client.address.node_id != here  # the owner lives on the worker node
        for _ in range(3):
            assert float(client.sample(2048).sum()) == 2048 * 64
        assert client._ring is None  # payloads through the object store, never a slot
        used_ring, total = ray.get(sample_on_worker.remote(rb.client()))
        assert used_ring and total == 2048 * 64  # on the owner's node: shared-memory slots
    finally:
        rb.shutdown()


@ray.remote(num_cpus=0, resources={"worker": 0.01})
def extend_on_worker(client: Any) -> tuple[bool, list[int]]:
    import time

    import torch

    out = client.extend(torch.full((8, 64), 2.0)).tolist()
    time.sleep(0.06)  # past the client's retry interval: the next write maps the buffer
    out += client.extend(torch.full((8, 64), 2.0)).tolist()
    return client._direct.buffer() is not None, out


def test_only_clients_on_the_owners_node_map_the_buffer(two_nodes: Any) -> None:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(64),
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0, "resources": {"worker": 0.01}}},
    )
    try:
        client = rb.client()
        client.extend(torch.ones(4, 64))
        client.extend(torch.ones(4, 64))
        assert client._direct.buffer() is None  # the driver is on the head node
        mapped, index = ray.get(extend_on_worker.remote(rb.client()))
        assert mapped and index == list(range(8, 24))
        assert len(rb) == 24 and float(rb[:].sum()) == 64 * (8 + 16 * 2)
    finally:
        rb.shutdown()


def test_shards_spread_over_the_nodes_and_one_recovers_when_its_node_goes(
    two_nodes: Any, tmp_path: Path
) -> None:
    cluster, worker = two_nodes
    proto = PrioritizedReplayBuffer(alpha=1.0, beta=0.4, storage=LazyTensorStorage(100))
    recovery = RecoveryConfig(str(tmp_path), every_writes=1, deadline_s=60.0)
    rb = ShardedReplayBuffer(
        proto,
        2,
        routing="round_robin",
        remote_config={"num_cpus": 0},
        recovery=recovery,
    )
    try:
        assert len(set(rb.nodes)) == 2  # SPREAD: one shard per node
        for call in range(4):
            rb.extend(torch.arange(10) + 10 * call)
        assert len(rb) == 40
        lost = rb.nodes.index(worker.node_id)
        cluster.remove_node(worker)  # the worker node and its shard's process are gone
        assert len(rb) == 40  # the shard restarted on the head node from its checkpoint
        handle = rb._shards[lost].actor()
        assert ray.get(handle.node_id.remote()) != worker.node_id
        _, info = rb.sample(64, return_info=True)
        assert set((info["index"] // 100).tolist()) == {0, 1}
    finally:
        rb.shutdown()
