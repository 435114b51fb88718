"""Clients on the actor's node write and sample through a map of the buffer (client/direct.py)."""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.service import ServiceUnavailableError

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

OPTIONS = {"remote_config": {"num_cpus": 0}}
MAPPED = "through shared memory"  # what the client logs when it maps the buffer


def rows(n: int, start: int = 0) -> TensorDict:
    ids = torch.arange(start, start + n)
    return TensorDict(
        {"id": ids, "obs": ids.float().unsqueeze(-1).expand(n, 16).clone()}, batch_size=[n]
    )


def uniform_rb(capacity: int = 1000) -> Any:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        batch_size=32,
        service_backend="ray",
        service_backend_options=OPTIONS,
    )


def mapped_extend(rb: Any, data: TensorDict) -> torch.Tensor:
    """Extend until the client's map is in use (the first write goes through the actor)."""
    deadline = time.monotonic() + 2.0
    index = rb.extend(data)
    while time.monotonic() < deadline:
        time.sleep(0.06)  # past the client's retry interval
        if rb.extend(rows(0)).numel() == 0:
            return index
    return index


@pytest.fixture(scope="module")
def rb(ray_cluster: Any) -> Any:
    buffer = uniform_rb()
    yield buffer
    buffer.shutdown()


def test_driver_writes_land_once_and_in_order(rb: Any, caplog: Any) -> None:
    rb.empty()
    with caplog.at_level(logging.DEBUG, logger="rbdata.service.client.direct"):
        rb.extend(rows(10))
        time.sleep(0.06)
        index = rb.extend(rows(90, 10))
    assert any(MAPPED in r.getMessage() for r in caplog.records)
    assert index.tolist() == list(range(10, 100))
    assert len(rb) == 100 and rb.write_count == 100
    stored = rb[:]
    assert torch.equal(stored["id"], torch.arange(100))
    assert torch.equal(stored["obs"][:, 7], torch.arange(100).float())
    batch = rb.sample()  # through the map too: uniform sampler, no transform
    assert batch.batch_size == (32,)
    assert torch.equal(batch["obs"][:, 0], batch["id"].float())


def test_task_clients_write_through_their_own_maps(rb: Any) -> None:
    rb.empty()
    rb.extend(rows(5, 10_000))

    @ray.remote(num_cpus=0)
    def collect(client: Any, start: int) -> list[int]:
        import time

        import torch
        from tensordict import TensorDict

        out = []
        for i in range(20):
            ids = torch.arange(start + 10 * i, start + 10 * i + 10)
            data = TensorDict({"id": ids, "obs": ids.float().unsqueeze(-1).expand(10, 16)}, [10])
            out += client.extend(data).tolist()
            time.sleep(0.005)
        return out

    clients = [rb.client(), rb.client()]
    written = ray.get([collect.remote(c, 1000 * (k + 1)) for k, c in enumerate(clients)])
    assert len(rb) == 405 and rb.write_count == 405
    indices = sorted(written[0] + written[1])
    assert indices == list(range(5, 405))  # every slot given out once
    ids = rb[:]["id"]
    expected = [*range(10_000, 10_005), *range(1000, 1200), *range(2000, 2200)]
    assert sorted(ids.tolist()) == sorted(expected)


def test_whole_buffer_calls_make_clients_map_again(rb: Any) -> None:
    rb.empty()
    mapped_extend(rb, rows(20))
    state = rb.state_dict()
    rb.empty()
    assert len(rb) == 0
    assert rb.extend(rows(3, 500)).tolist() == [0, 1, 2]
    assert torch.equal(rb[:]["id"], torch.tensor([500, 501, 502]))
    rb.load_state_dict(state)
    assert len(rb) == 20
    assert rb.extend(rows(2, 900)).tolist() == [20, 21]
    assert torch.equal(rb[:]["id"], torch.cat([torch.arange(20), torch.tensor([900, 901])]))


def test_a_prioritized_buffer_keeps_every_write_in_the_actor(ray_cluster: Any, caplog: Any) -> None:
    prb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=0.5,
        priority_key="td_error",
        storage=LazyTensorStorage(100),
        batch_size=64,
        service_backend="ray",
        service_backend_options=OPTIONS,
    )
    try:
        data = rows(50).set("td_error", torch.zeros(50))
        with caplog.at_level(logging.DEBUG, logger="rbdata.service.client.direct"):
            prb.extend(data)
            time.sleep(0.06)
            data = rows(1, 50).set("td_error", torch.full((1,), 1e6))
            prb.extend(data)
        assert not any(MAPPED in r.getMessage() for r in caplog.records)
        batch = prb.sample()
        assert (batch["id"] == 50).float().mean() > 0.95  # the priority given with the write
    finally:
        prb.shutdown()


def test_a_dead_actor_raises_instead_of_hanging(ray_cluster: Any) -> None:
    doomed = uniform_rb(100)
    try:
        client = doomed.client()
        mapped_extend(client, rows(10))
        pid = ray.get(
            ray.get_actor(client.address.actor_name, namespace="rbdata").__ray_call__.remote(
                lambda self: os.getpid()
            )
        )
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        start = time.monotonic()
        with pytest.raises(ServiceUnavailableError, match="no longer alive"):
            client.extend(rows(5))
        assert time.monotonic() - start < 10.0
    finally:
        doomed.shutdown()


def test_maps_can_be_turned_off(ray_cluster: Any, caplog: Any) -> None:
    off = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        batch_size=8,
        service_backend="ray",
        service_backend_options={**OPTIONS, "same_node_maps": False},
    )
    try:
        with caplog.at_level(logging.DEBUG, logger="rbdata.service.client.direct"):
            mapped_extend(off, rows(10))
            off.extend(rows(5, 10))
        assert not any(MAPPED in r.getMessage() for r in caplog.records)
        assert torch.equal(off[:]["id"], torch.arange(15))
    finally:
        off.shutdown()
    with pytest.raises(TypeError, match="same_node_maps"):
        TensorDictReplayBuffer(
            storage=LazyTensorStorage(10),
            service_backend="ray",
            service_backend_options={**OPTIONS, "same_node_maps": "yes"},
        )
