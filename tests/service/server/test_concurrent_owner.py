"""The owner serves calls at once: a sample never queues behind the slow part of an extend.

The hosted buffer's own lock guards its state; everything else a call does
(decoding its payload, the buffer's preparation of the data, Ray's per-call
work, encoding the reply) runs outside it, on one of the actor's threads.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.buffers._write_path import WriteHooks

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

OPTIONS = {"remote_config": {"num_cpus": 0}}
JOIN_S = 60.0  # generous bound on a call that should return at once (2 loaded cores)


class Gate:
    """A Ray actor: the hosted buffer waits in ``passing`` until the test calls ``open``."""

    def __init__(self) -> None:
        self._entered = asyncio.Event()
        self._open = asyncio.Event()

    async def passing(self) -> None:
        self._entered.set()
        await self._open.wait()

    async def entered(self) -> None:
        await self._entered.wait()

    def open(self) -> None:
        self._open.set()


class _GatedHooks(WriteHooks):
    """Prepares a batch holding ``gated`` slowly: it waits at the gate, outside the lock."""

    def __init__(self, inner: WriteHooks) -> None:
        self._inner = inner

    def prepare(self, data: Any) -> Any:
        if isinstance(data, TensorDict) and "gated" in data.keys():
            ray.get(GatedBuffer.gate.passing.remote())
            data = data.exclude("gated")
        return self._inner.prepare(data)


class GatedBuffer(TensorDictReplayBuffer):
    """A TensorDict buffer whose writes of a ``gated`` batch wait at the gate (``_GatedHooks``)."""

    gate: Any = None

    def _write_hooks(self) -> WriteHooks:
        return _GatedHooks(super()._write_hooks())


def transitions(n: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32).unsqueeze(-1).expand(n, 4)
    return TensorDict({"obs": obs, "td_error": torch.ones(n)}, [n])


def test_a_sample_is_served_while_an_extend_is_in_flight(ray_cluster: Any) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actor has no tests/
    gate = ray.remote(num_cpus=0)(Gate).remote()
    GatedBuffer.gate = gate
    rb = GatedBuffer(
        storage=LazyTensorStorage(100),
        batch_size=8,
        service_backend="ray",
        service_backend_options=OPTIONS,
    )
    try:
        rb.extend(transitions(10))
        writer = rb.client()
        slow = transitions(5, start=100).set("gated", torch.zeros(5))
        extending = threading.Thread(target=writer.extend, args=(slow,))
        extending.start()
        ray.get(gate.entered.remote(), timeout=JOIN_S)  # the extend is inside the actor now
        sampled: list[Any] = []
        sampling = threading.Thread(target=lambda: sampled.append(rb.sample()))
        sampling.start()
        sampling.join(JOIN_S)
        assert sampled and sampled[0]["obs"].shape == (8, 4)  # served while the extend waits
        assert len(rb) == 10 and extending.is_alive()
        ray.get(gate.open.remote())
        extending.join(JOIN_S)
        assert not extending.is_alive() and len(rb) == 15
    finally:
        ray.get(gate.open.remote())  # a failed check leaves no call waiting at the gate
        GatedBuffer.gate = None
        rb.shutdown()


def test_writes_draws_and_priority_updates_at_once_keep_the_buffer_whole(
    ray_cluster: Any,
) -> None:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7,
        beta=0.5,
        storage=LazyTensorStorage(10_000),
        batch_size=32,
        service_backend="ray",
        service_backend_options=OPTIONS,
    )

    def collect(client: Any, start: int) -> int:
        for i in range(20):
            client.extend(transitions(25, start=start + 25 * i))
        return start

    def learn(client: Any) -> int:
        drawn = 0
        for _ in range(20):
            batch = client.sample()
            assert bool((batch["obs"][:, 0] == batch["obs"][:, 3]).all())  # no torn row
            client.update_tensordict_priority(batch.set("td_error", batch["obs"][:, 0].abs() + 1))
            drawn += batch.shape[0]
        return drawn

    try:
        rb.extend(transitions(100, start=-100))
        client = rb.client()
        collector, learner = ray.remote(num_cpus=0)(collect), ray.remote(num_cpus=0)(learn)
        refs = [collector.remote(client, 10_000 * k) for k in range(1, 4)]
        refs += [learner.remote(client) for _ in range(2)]
        assert ray.get(refs, timeout=300)[3:] == [640, 640]
        assert len(rb) == 100 + 3 * 500 and rb.write_count == 1600
        values = set(rb[:]["obs"][:, 0].tolist())
        expected = {float(v) for v in range(-100, 0)}
        expected |= {float(10_000 * k + i) for k in range(1, 4) for i in range(500)}
        assert values == expected  # every write arrived exactly once
    finally:
        rb.shutdown()
