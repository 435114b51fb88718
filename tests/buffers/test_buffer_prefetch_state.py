"""The batches a buffer sampled ahead (``prefetch``) survive state_dict, pickling and passes."""

from __future__ import annotations

import pickle
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import ListStorage, ReplayBuffer, SamplerWithoutReplacement, TensorDictReplayBuffer


def _buffer(prefetch: int = 2, size: int = 20, seed: int = 0, sampler=None) -> ReplayBuffer:
    rb = ReplayBuffer(
        storage=ListStorage(size),
        sampler=sampler,
        batch_size=3,
        prefetch=prefetch,
        generator=torch.Generator().manual_seed(seed),
    )
    rb.extend(torch.arange(size))
    return rb


def _same_draws(a: ReplayBuffer, b: ReplayBuffer, n: int = 5) -> None:
    for _ in range(n):
        (data_a, info_a), (data_b, info_b) = a.sample(return_info=True), b.sample(return_info=True)
        assert torch.equal(data_a, data_b)
        assert torch.equal(info_a["index"], info_b["index"])


def test_state_dict_carries_the_queued_batches_and_the_draws_after_them():
    source = _buffer()
    source.sample()
    state = source.state_dict()
    assert state["_prefetch_state"]["capacity"] == 2
    assert len(state["_prefetch_state"]["queue"]) == 2
    restored = _buffer(seed=1)
    restored.sample()
    restored.load_state_dict(state)
    _same_draws(source, restored)


def test_pickled_buffer_hands_out_the_same_batches():
    source = _buffer()
    source.sample()
    _same_draws(source, pickle.loads(pickle.dumps(source)))


def test_saved_queue_is_a_copy():
    source = _buffer()
    source.sample()
    state = source.state_dict()
    state["_prefetch_state"]["queue"][0][0].fill_(-1)
    assert (source.sample() >= 0).all()


def test_capacity_mismatch_raises_and_keeps_the_queue():
    source = _buffer(prefetch=2)
    source.sample()
    restored = _buffer(prefetch=1)
    restored.sample()
    before = [future.result()[0].clone() for future in restored._prefetch_queue]
    with pytest.raises(RuntimeError, match="prefetch queue with capacity 2 into a replay buffer"):
        restored.load_state_dict(source.state_dict())
    after = [future.result()[0] for future in restored._prefetch_queue]
    assert len(before) == len(after) and all(map(torch.equal, before, after))


@pytest.mark.parametrize(
    ("patch", "error"),
    [
        ({"version": 7}, ValueError),
        ({"capacity": -1}, ValueError),
        ({"capacity": True}, ValueError),
        ({"queue": "x"}, TypeError),
        ({"capacity": 0}, ValueError),  # 2 queued batches, capacity 0
    ],
)
def test_bad_prefetch_state_is_refused_before_anything_changes(patch, error):
    source = _buffer()
    source.sample()
    state = source.state_dict()
    state["_prefetch_state"].update(patch)
    restored = _buffer(seed=1)
    expected = _buffer(seed=1)
    with pytest.raises(error):
        restored.load_state_dict(state)
    _same_draws(restored, expected)


def test_state_without_prefetch_entry_loads_with_an_empty_queue():
    source = _buffer()
    source.sample()
    state = source.state_dict()
    del state["_prefetch_state"]
    restored = _buffer()
    restored.sample()
    restored.load_state_dict(state)
    assert not restored._prefetch_queue


@pytest.mark.parametrize("tensordict", [False, True])
@pytest.mark.parametrize("how", ["state_dict", "pickle"])
def test_queued_batches_keep_their_grad_flag_as_leaves(tensordict, how):
    def make(seed: int) -> ReplayBuffer:
        cls = TensorDictReplayBuffer if tensordict else ReplayBuffer
        rb = cls(storage=ListStorage(20), batch_size=3, prefetch=2)
        rb.set_rng(torch.Generator().manual_seed(seed))
        values = torch.arange(20.0, requires_grad=True) * 2
        rb.extend(TensorDict({"value": values}, [20]) if tensordict else values)
        return rb

    source = make(0)
    source.sample()
    if how == "state_dict":
        restored = make(1)
        restored.load_state_dict(source.state_dict())
    else:
        restored = pickle.loads(pickle.dumps(source))
    queued = restored._prefetch_queue[0].result()[0]
    queued = queued["value"] if tensordict else queued
    assert queued.is_leaf and queued.requires_grad


@settings(max_examples=15, deadline=None)
@given(size=st.integers(4, 23), prefetch=st.integers(1, 3), drawn=st.integers(0, 3))
def test_a_pass_restored_mid_way_hands_out_every_item_once(size, prefetch, drawn):
    sampler = SamplerWithoutReplacement(drop_last=False)
    source = _buffer(prefetch=prefetch, size=size, sampler=sampler)
    seen = [source.sample() for _ in range(min(drawn, -(-size // 3) - 1))]
    restored = _buffer(prefetch=prefetch, size=size, sampler=SamplerWithoutReplacement())
    restored.load_state_dict(source.state_dict())
    rest = list(restored)
    assert torch.equal(torch.cat([*seen, *rest]).sort().values, torch.arange(size))
    assert [b.tolist() for b in rest] == [b.tolist() for b in source]


def test_state_dict_holds_the_futures_lock_while_batches_in_flight_settle() -> None:
    import threading

    started, release = threading.Event(), threading.Event()
    calls = []

    def collate(items: list) -> torch.Tensor:  # type: ignore[type-arg]
        calls.append(1)
        if len(calls) > 1:  # the batches sampled ahead of the first wait for the release
            started.set()
            release.wait(5)
        return torch.stack(items)

    rb = ReplayBuffer(storage=ListStorage(20), collate_fn=collate, batch_size=3, prefetch=2)
    rb.extend(torch.arange(20))
    rb.sample()  # the thread now samples ahead, blocked in collate
    assert started.wait(5)
    seen_held: list[bool] = []

    def watcher() -> None:
        for _ in range(2000):
            if not rb._futures_lock.acquire(blocking=False):
                seen_held.append(True)
                break
            rb._futures_lock.release()
            time.sleep(0.001)
        release.set()

    thread = threading.Thread(target=watcher)
    thread.start()
    state = rb.state_dict()
    thread.join(5)
    assert seen_held == [True]  # state_dict waited for the batches in flight holding it
    assert len(state["_prefetch_state"]["queue"]) >= 1
    rb.shutdown()
