"""Writes through shared memory: a big extend travels in a write slot, not as an argument."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, ListStorage, ReplayBuffer, TensorDictReplayBuffer
from rbdata.service.transport.messages import SLOT_MIN_BYTES
from rbdata.sharing.slot_ring import SlotRing

pytestmark = [
    pytest.mark.ray,
    pytest.mark.skipif(not SlotRing.available(), reason="no writable /dev/shm"),
]
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

OPTIONS = {"remote_config": {"num_cpus": 0}}
ROWS = 400  # 400 rows of 2 x float32[64] + int64: above SLOT_MIN_BYTES


def batch(start: int) -> TensorDict:
    obs = torch.arange(start, start + ROWS, dtype=torch.float32).unsqueeze(-1).expand(ROWS, 64)
    return TensorDict({"obs": obs, "next": {"obs": obs + 1}, "step": torch.arange(ROWS)}, [ROWS])


def _wrong_dtype() -> TensorDict:
    """A big batch the actor refuses: its ``obs`` is int64 where the storage holds float32."""
    data = batch(0)
    data["obs"] = torch.zeros(ROWS, 64, dtype=torch.int64)
    return data


def test_big_writes_go_through_the_write_ring_and_the_stored_rows_are_copies(
    ray_cluster: Any,
) -> None:
    assert batch(0).bytes() >= SLOT_MIN_BYTES
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4 * ROWS), service_backend="ray", service_backend_options=OPTIONS
    )
    try:
        writes = rb._remote.driver._writes
        assert rb.extend(batch(0)).tolist() == list(range(ROWS))  # an argument; opens the ring
        ring = writes._ring
        assert ring is not None
        assert rb.extend(batch(1000)).tolist() == list(range(ROWS, 2 * ROWS))  # in a slot
        assert ring.in_use() == 0  # the owner freed it
        for slot in range(ring.slots):  # the next writes reuse the slots: stored rows stay
            ring.memory(slot).fill_(0)
        stored = rb[torch.arange(2 * ROWS)]
        expected = torch.cat([torch.arange(ROWS), torch.arange(1000, 1000 + ROWS)]).float()
        assert torch.equal(stored["obs"][:, 0], expected)
        assert torch.equal(stored["next", "obs"][:, 63], expected + 1)
        assert rb.add(batch(5)[0]) == 2 * ROWS  # small: an argument
        assert len(rb) == 2 * ROWS + 1 and rb.write_count == 2 * ROWS + 1
        with pytest.raises(TypeError, match="got dtype torch.int64"):  # raised in the actor:
            rb.extend(_wrong_dtype())  # it frees the slot too
        assert ring.in_use() == 0 and len(rb) == 2 * ROWS + 1
    finally:
        rb.shutdown()


def test_a_list_storage_keeps_its_own_copy_of_a_slot_write(ray_cluster: Any) -> None:
    rb = ReplayBuffer(
        storage=ListStorage(10), service_backend="ray", service_backend_options=OPTIONS
    )
    try:
        big = torch.ones(ROWS, 64)
        rb.add(big)  # an argument; opens the ring
        ring = rb._remote.driver._writes._ring
        assert ring is not None
        rb.add(big * 2)  # in a slot: the list keeps a copy, not a view of the slot
        for slot in range(ring.slots):
            ring.memory(slot).fill_(0)
        assert float(rb[1].sum()) == 2 * ROWS * 64
    finally:
        rb.shutdown()


def test_writes_kept_in_flight_are_acknowledged_before_the_clients_next_call(
    ray_cluster: Any,
) -> None:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(20 * ROWS),
        service_backend="ray",
        service_backend_options=OPTIONS,
    )
    try:
        client = rb.client(write_behind=3)
        assert all(client.extend(batch(1000 * i)) is None for i in range(6))  # none waited for
        assert len(client) == 6 * ROWS  # the read flushed them first, in order
        assert client.add(batch(0)[0]) is None
        client.flush()
        assert len(client._pending) == 0 and rb.write_count == 6 * ROWS + 1
        client.extend(_wrong_dtype())  # fails in the actor
        with pytest.raises(TypeError, match="got dtype torch.int64"):
            client.flush()
        assert rb.write_count == 6 * ROWS + 1
        with pytest.raises(ValueError, match="write_behind must be an int >= 0, got -1"):
            rb.client(write_behind=-1)
    finally:
        rb.shutdown()
