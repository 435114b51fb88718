"""Self-healing owners: a SIGKILLed owner restarts from its checkpoint; clients re-send."""

from __future__ import annotations

import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from rbdata import LazyTensorStorage, PrioritizedReplayBuffer, ReplayBuffer
from rbdata.errors import ServiceUnavailableError
from rbdata.service.server.recovery import RecoveryConfig
from rbdata.service.sharding.buffer import ShardedReplayBuffer

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

CALLS, ROWS = 24, 10  # per collector and phase: calls of ROWS items


@ray.remote(num_cpus=0)
class Collector:
    def __init__(self, client: Any, cid: int) -> None:
        self.client, self.cid = client, cid

    def phase(self, first: int, last: int) -> list[int]:
        acked = []
        for call in range(first, last):
            values = self.cid * 1_000_000 + call * ROWS + torch.arange(ROWS)
            self.client.extend(values)  # returns once the owner applied it: acknowledged
            acked += values.tolist()
        return acked


@ray.remote(num_cpus=0)
class Learner:
    def __init__(self, client: Any) -> None:
        self.client = client

    def run(self, batches: int) -> int:
        done = 0
        for _ in range(batches):
            assert self.client.sample(16).shape == torch.Size([16])
            done += 1
        return done


def owner_pid(rb: Any) -> int:
    return int(ray.get(rb.client().actor().pid.remote()))


def test_sigkilled_owner_restarts_and_every_acknowledged_write_is_there_once(
    ray_cluster: Any, tmp_path: Path
) -> None:
    recovery = {"directory": str(tmp_path), "every_writes": 7, "deadline_s": 60.0}
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10_000),
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0}, "recovery": recovery},
    )
    try:
        collectors = [Collector.remote(rb.client(), cid) for cid in (1, 2)]
        learner = Learner.remote(rb.client())
        acked = sum(ray.get([c.phase.remote(0, CALLS) for c in collectors]), [])
        pid = owner_pid(rb)
        started = time.monotonic()
        running = [c.phase.remote(CALLS, 2 * CALLS) for c in collectors]
        learning = learner.run.remote(40)
        os.kill(pid, signal.SIGKILL)  # mid-run: the collectors' calls are in flight
        acked += sum(ray.get(running, timeout=120), [])
        logging.getLogger(__name__).warning("recovered in %.1f s", time.monotonic() - started)
        assert ray.get(learning, timeout=120) == 40
        assert owner_pid(rb) != pid  # a new process, restored from the checkpoint
        stored = rb[: len(rb)]
        assert sorted(stored.tolist()) == sorted(acked)  # each acknowledged write, once
        assert len(acked) == 2 * 2 * CALLS * ROWS
        assert (tmp_path / "checkpoint.json").exists()
    finally:
        rb.shutdown()
    with pytest.raises(ServiceUnavailableError):
        len(rb)


def test_recovery_is_off_by_default_and_checked(ray_cluster: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="every_writes or every_seconds"):
        RecoveryConfig(str(tmp_path))
    with pytest.raises(TypeError, match="accepts"):
        ReplayBuffer(
            storage=LazyTensorStorage(10),
            service_backend="ray",
            service_backend_options={"recovery": {"folder": "x"}},
        )
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        service_backend="ray",
        service_backend_options={"remote_config": {"num_cpus": 0}},
    )
    try:
        rb.extend(torch.arange(3))
        ray.kill(rb.client().actor(), no_restart=False)  # its process dies (asynchronously)
        with pytest.raises(ServiceUnavailableError):
            for _ in range(200):  # up to 10 s for the kill to land; no restart follows
                len(rb)
                time.sleep(0.05)
        assert not rb.is_alive
    finally:
        rb.shutdown()


def test_losing_one_shard_leaves_the_others_serving(ray_cluster: Any) -> None:
    proto = PrioritizedReplayBuffer(alpha=1.0, beta=0.4, storage=LazyTensorStorage(100))
    rb = ShardedReplayBuffer(proto, 2, routing="round_robin", remote_config={"num_cpus": 0})
    try:
        rb.extend(torch.arange(10))
        rb.extend(torch.arange(10))
        victim = rb._shards[0]
        os.kill(int(ray.get(victim.actor().pid.remote())), signal.SIGKILL)
        assert len(rb) == 10  # the other shard's items
        _, info = rb.sample(32, return_info=True)
        assert (info["index"] // 100).unique().tolist() == [1]
        assert (rb.extend(torch.arange(5)) // 100).tolist() == [1] * 5  # writes go on
        assert rb.stats()["shards_alive"] == 1
    finally:
        rb.shutdown()
