"""Replies in slots: the buffer's own read path fills the slot, for every buffer kind.

A reply written into a slot must equal what the buffer returns directly
(same generator state), with transforms, row filters, prioritized info,
list storages and ``ndim > 1`` storages; for a tensor storage the batch's
rows are read straight into the slot (no second copy).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from rbdata import (
    LazyTensorStorage,
    ListStorage,
    PolicyAgeFilter,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.service.server.slot_fill import SlotReplies
from rbdata.service.transport.codec import Payload, decode, unpack
from rbdata.service.transport.messages import InSlot
from rbdata.sharing.slot_ring import SlotRing

SLOT_BYTES = 1 << 20


def transitions(n: int) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.arange(n * 128, dtype=torch.float32).reshape(n, 128),
            "action": torch.arange(n),
            "policy_version": torch.arange(n) % 3,
            "next": {"done": torch.zeros(n, 1, dtype=torch.bool)},
        },
        [n],
    )


def _double_obs(td: TensorDictBase) -> TensorDictBase:
    return td.set("obs", td["obs"] * 2)  # a new tensor: copied after what is in place


BUFFERS: dict[str, Callable[[], Any]] = {
    "plain": lambda: ReplayBuffer(storage=LazyTensorStorage(1000)),
    "tensordict": lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(1000)),
    "prioritized": lambda: TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(1000)
    ),
    "transform": lambda: TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000), transform=_double_obs
    ),
    "row filter": lambda: TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000), transform=PolicyAgeFilter(2, max_policy_lag=1)
    ),
    "list storage": lambda: TensorDictReplayBuffer(storage=ListStorage(1000)),
    "ndim 2": lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(1000, ndim=2)),
}


@pytest.fixture
def slots() -> Iterator[tuple[SlotReplies, str, SlotRing]]:
    replies = SlotReplies()
    path = replies.open(2, SLOT_BYTES)
    client = SlotRing.attach(path, 2, SLOT_BYTES)
    replies.attached(path)
    yield replies, path, client
    replies.close_all()
    client.close()


def _filled(kind: str) -> Any:
    rb = BUFFERS[kind]()
    data = transitions(600)
    rb.extend(data.reshape(300, 2) if kind == "ndim 2" else data)
    if kind == "row filter":
        rb.publish_policy_version(3)  # version 1 rows are stale now: sample drops them
    return rb


def _open(reply: Any, client: SlotRing) -> Any:
    if isinstance(reply, InSlot):
        return unpack(reply.packed, client.view(reply.slot))
    assert isinstance(reply, Payload)
    return decode(reply)


def _assert_equal(ours: Any, theirs: Any) -> None:
    if isinstance(theirs, TensorDictBase):
        assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
        for key, value in theirs.items(True, True):
            assert torch.equal(ours[key], value), key
    elif isinstance(theirs, torch.Tensor):
        assert torch.equal(ours, theirs)
    elif isinstance(theirs, dict):
        assert ours.keys() == theirs.keys()
        for key in theirs:
            _assert_equal(ours[key], theirs[key])
    elif isinstance(theirs, tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs, strict=True):
            _assert_equal(a, b)
    else:
        assert ours == theirs


@pytest.mark.parametrize("kind", list(BUFFERS))
def test_a_sample_in_a_slot_equals_the_buffers_own(kind: str, slots: Any) -> None:
    replies, path, client = slots
    rb = _filled(kind)
    rb.set_rng(torch.Generator().manual_seed(1))
    reply, _ = replies.reply(rb, path, lambda: rb.sample(256, return_info=True))
    rb.set_rng(torch.Generator().manual_seed(1))
    _assert_equal(_open(reply, client), rb.sample(256, return_info=True))
    assert isinstance(reply, InSlot)


@pytest.mark.parametrize("kind", ["plain", "transform", "list storage"])
def test_a_gathered_draw_in_a_slot_equals_the_buffers_own(kind: str, slots: Any) -> None:
    replies, path, client = slots
    rb = _filled(kind)
    draw = rb.draw(200)
    reply, _ = replies.reply(rb, path, lambda: rb.gather(draw))
    _assert_equal(_open(reply, client), rb.gather(draw))


def test_a_tensor_storage_reads_the_rows_straight_into_the_slot(slots: Any) -> None:
    replies, path, _ = slots
    rb = _filled("plain")
    reply, batch = replies.reply(rb, path, lambda: rb.sample(256))
    memory = replies._rings[path].memory(reply.slot)
    start, stop = memory.data_ptr(), memory.data_ptr() + memory.numel()
    assert all(start <= t.data_ptr() < stop for t in batch.values(True, True))
    # the rows were gathered once, packed: the entries are views of one block of the slot
    assert len({t.untyped_storage().data_ptr() for t in batch.values(True, True)}) == 1


def test_a_reply_that_does_not_fit_travels_as_a_payload_and_frees_its_slot() -> None:
    replies = SlotReplies()
    path = replies.open(2, 4096)
    rb = _filled("tensordict")
    reply, _ = replies.reply(rb, path, lambda: rb.sample(256))
    assert isinstance(reply, Payload) and decode(reply)["obs"].shape == (256, 128)
    assert replies._rings[path].in_use() == 0
    replies.close_all()


def test_a_failed_read_frees_its_slot_and_leaves_no_target(slots: Any) -> None:
    replies, path, client = slots
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(RuntimeError):
        replies.reply(rb, path, lambda: rb.sample(4))
    assert replies._rings[path].in_use() == 0
    rb.extend(TensorDict({"obs": torch.ones(10, 4)}, [10]))
    assert rb.sample(4)["obs"].untyped_storage().data_ptr() != client.view(0).data_ptr()


def test_reading_into_blocks_of_one_buffer_do_not_nest() -> None:
    rb = _filled("plain")
    memory = torch.zeros(SLOT_BYTES, dtype=torch.uint8)
    with (
        rb.reading_into(memory),
        pytest.raises(RuntimeError, match="do not nest"),
        rb.reading_into(memory),
    ):
        pass
