"""One buffer for every DDP rank, without Lightning: the owner's global draws, the ranks' shares.

The ranks are threads of this process here (each with its own connection, as
a rank process has); tests/lightning/test_lightning_rank_share.py runs real
DDP ranks.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    ListStorage,
    PolicyAgeFilter,
    ReplayBuffer,
    ReplayDataset,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from rbdata.buffers.protocol import Draw
from rbdata.loader._rank_share import RankShareBuffer, share_of


def _buffer(sampler: Any = None) -> TensorDictReplayBuffer:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(64), sampler=sampler or SamplerWithoutReplacement(), batch_size=4
    )
    rb.extend(TensorDict({"id": torch.arange(32)}, [32]))
    return rb


def _ranks(buffer: Any, world: int, wait_s: float = 30.0) -> list[RankShareBuffer]:
    owner = RankShareBuffer.owned(buffer, world, rank_wait_s=wait_s)
    return [owner] + [RankShareBuffer.attached(owner.rank_access, r) for r in range(1, world)]


def _close(ranks: list[RankShareBuffer]) -> None:
    for rank in reversed(ranks):
        rank.close()


def _in_threads(ranks: list[RankShareBuffer], steps: int, batch_size: int) -> list[list[Any]]:
    """Each rank draws ``steps`` shares at once, in its own thread."""
    out: list[list[Any]] = [[] for _ in ranks]
    errors: list[BaseException] = []

    def run(r: int) -> None:
        try:
            for _ in range(steps):
                out[r].append(ranks[r].draw(batch_size))
        except BaseException as error:  # re-raised below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(ranks))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


def test_shares_are_disjoint_parts_of_one_seeded_global_draw():
    reference = _buffer()
    reference.set_rng(torch.Generator().manual_seed(3))
    expected = [reference.draw(8).index for _ in range(4)]  # one pass of 32 rows
    buffer = _buffer()
    buffer.set_rng(torch.Generator().manual_seed(3))
    ranks = _ranks(buffer, 2)
    try:
        shares = _in_threads(ranks, 4, 4)
    finally:
        _close(ranks)
    for step in range(4):
        both = torch.cat([shares[0][step].index, shares[1][step].index])
        assert torch.equal(both, expected[step])  # rank r holds part r of the global draw
    drawn = torch.cat([s.index for rank in shares for s in rank])
    assert sorted(drawn.tolist()) == list(range(32))  # without replacement: each row once


def test_a_rank_writes_where_every_rank_reads_and_its_priorities_reach_the_owner():
    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.5, storage=LazyTensorStorage(64), batch_size=4
    )
    buffer.extend(TensorDict({"id": torch.arange(8), "td_error": torch.ones(8)}, [8]))
    ranks = _ranks(buffer, 2)
    try:
        given = torch.tensor([50.0, 60.0, 70.0, 80.0])
        written = ranks[1].extend(TensorDict({"id": torch.arange(4) + 100, "td_error": given}, [4]))
        assert len(ranks[0]) == len(buffer) == 12  # rows written by rank 1, seen by the owner
        # the priorities written on rank 1 are the owner's (the draws happen there)
        assert written.tolist() == [8, 9, 10, 11]
        assert buffer.sampler.priority_mass().total == pytest.approx(8 + 260)
        shares = _in_threads(ranks, 1, 3)
        batch = ranks[1].gather(shares[1][0])  # rank 1 reads its share itself
        assert torch.equal(batch["index"], shares[1][0].index)
        ranks[1].update_batch_priority(batch, torch.full((3,), 1000.0))
        assert buffer.sampler.priority_mass().total > 1000  # the owner's tree changed
        ranks[1].publish_policy_version(7)
    finally:
        _close(ranks)


def test_loader_state_resumes_with_another_world_size():
    buffer = _buffer()
    buffer.set_rng(torch.Generator().manual_seed(0))
    ranks = _ranks(buffer, 1)
    try:
        ds = ReplayDataset(ranks[0], batch_size=4, num_batches=8, prefetch=2)
        it = iter(ds)
        first = [next(it)["id"] for _ in range(3)]
        deadline = time.monotonic() + 10
        state = ds.state_dict()
        while len(state["rank_share"]["records"]) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)  # the prefetch thread draws 2 ahead
            state = ds.state_dict()
        rest = [b["id"] for b in it]
    finally:
        _close(ranks)
    assert state["rank_share"]["world_size"] == 1 and state["pending"] == []
    assert state["rank_share"]["next"] == 3 and len(state["rank_share"]["records"]) == 2
    assert len(first) + len(rest) == 8
    # the same world size: the same batches after the resume
    again = _buffer()
    again.set_rng(torch.Generator().manual_seed(99))
    ranks = _ranks(again, 1)
    try:
        ds = ReplayDataset(ranks[0], batch_size=4, num_batches=8)
        ds.load_state_dict(state)
        it = iter(ds)
        resumed = [next(it)["id"]]
        again_state = ds.state_dict()  # saved again before the restored draws were handed out
        resumed += [b["id"] for b in it]
    finally:
        _close(ranks)
    assert all(torch.equal(a, b) for a, b in zip(resumed, rest, strict=True))
    assert again_state["rank_share"]["next"] == 4 and again_state["position"] == 4
    # two ranks: the sampler continues after the saved state's draws (the pass goes on)
    again = _buffer()
    ranks = _ranks(again, 2)
    try:
        for rank in ranks:
            rank.load_sampling_state(state)
        shares = _in_threads(ranks, 1, 4)
    finally:
        _close(ranks)
    drawn = torch.cat([shares[0][0].index, shares[1][0].index]).tolist()
    done = set(torch.cat(first).tolist())
    assert not done & set(drawn) and len(drawn) == 8


def test_a_rank_that_never_asks_ends_the_wait_with_an_error():
    ranks = _ranks(_buffer(), 2, wait_s=0.5)
    try:
        with pytest.raises(TimeoutError, match=r"ranks \[1\] did not ask"):
            ranks[0].draw(4)
    finally:
        _close(ranks)


def test_a_dead_rank_ends_the_wait_at_once():
    owner = RankShareBuffer.owned(_buffer(), 2, rank_wait_s=60.0)
    try:
        pid = os.fork()
        if pid == 0:  # rank 1: says hello, then dies
            try:
                RankShareBuffer.attached(owner.rank_access, 1)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        with pytest.raises(RuntimeError, match="the process of rank 1 is gone"):
            owner.draw(4)
    finally:
        owner.close()


def test_a_rank_whose_owner_closed_raises():
    ranks = _ranks(_buffer(), 2)
    ranks[0].close()
    try:
        with pytest.raises(RuntimeError, match="local rank 0's shared buffer"):
            ranks[1].draw(4)
    finally:
        ranks[1].close()


@pytest.mark.parametrize(
    "make",
    [
        lambda: ReplayBuffer(storage=ListStorage(8)),
        lambda: ReplayBuffer(storage=LazyTensorStorage(8), consume_after_n_samples=1),
    ],
    ids=["list-storage", "consume-after-n"],
)
def test_a_buffer_the_ranks_cannot_share_is_refused_with_what_to_pass(make: Any):
    with pytest.raises(ValueError, match="LazyMemmapStorage"):
        RankShareBuffer.owned(make(), 2)


def test_share_of_splits_every_info_entry():
    draw = share_of(Draw(torch.arange(5), {"w": torch.arange(5.0)}, True), 1, 2)
    assert draw.index.tolist() == [2, 3, 4] and draw.info["w"].tolist() == [2.0, 3.0, 4.0]
    assert draw.ends_pass


@pytest.mark.parametrize("waiting", [0, 1])
def test_a_stopping_loader_ends_its_wait_for_the_other_ranks(waiting: int):
    ranks = _ranks(_buffer(), 2)
    try:
        got: list[Draw] = []
        thread = threading.Thread(target=lambda: got.append(ranks[waiting].draw(4)))
        thread.start()
        thread.join(0.3)
        assert thread.is_alive()  # waits for the other rank
        ranks[waiting].notify_waiters()  # what closing its loader does
        thread.join(10)
        assert not thread.is_alive() and got[0].rows == 0
        shares = _in_threads(ranks, 1, 4)  # later draws are not disturbed
        assert shares[0][0].rows == shares[1][0].rows == 4
    finally:
        _close(ranks)


def test_ranks_loading_ahead_share_the_same_draws_and_close_without_waiting():
    reference = _buffer()
    reference.set_rng(torch.Generator().manual_seed(1))
    expected = [reference.draw(8).index for _ in range(3)]
    buffer = _buffer()
    buffer.set_rng(torch.Generator().manual_seed(1))
    ranks = _ranks(buffer, 2)
    got: list[list[torch.Tensor]] = [[], []]

    def run(r: int) -> None:
        with ReplayDataset(ranks[r], batch_size=4, prefetch=2) as ds:
            it = iter(ds)
            got[r] = [next(it)["index"] for _ in range(3)]
        # closing stopped the prefetch thread, which may have waited for the other rank

    try:
        threads = [threading.Thread(target=run, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
    finally:
        _close(ranks)
    for step in range(3):
        assert torch.equal(torch.cat([got[0][step], got[1][step]]), expected[step])


def test_a_rank_publishes_the_policy_version_to_the_owners_filters():
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(16), transform=PolicyAgeFilter(0, max_policy_lag=1)
    )
    buffer.extend(TensorDict({"policy_version": torch.arange(8)}, [8]))
    ranks = _ranks(buffer, 2)
    try:
        assert len(buffer.sample(64)) == 64  # live version 0: no row is too old
        ranks[1].publish_policy_version(7)
        kept = buffer.sample(64)["policy_version"]
        assert len(kept) > 0 and bool((kept >= 6).all())  # the owner filters with version 7
    finally:
        _close(ranks)


def test_prioritized_shares_carry_the_weights_of_the_one_global_draw():
    def prioritized() -> TensorDictPrioritizedReplayBuffer:
        rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(64))
        rb.extend(TensorDict({"id": torch.arange(32)}, [32]))
        rb.update_priority(torch.arange(32), torch.arange(32.0) + 1)  # unequal priorities
        rb.set_rng(torch.Generator().manual_seed(2))
        return rb

    expected = prioritized().draw(8)
    ranks = _ranks(prioritized(), 2)
    try:
        shares = _in_threads(ranks, 1, 4)
    finally:
        _close(ranks)
    index = torch.cat([shares[0][0].index, shares[1][0].index])
    weight = torch.cat([s[0].info["priority_weight"] for s in shares])
    assert torch.equal(index, expected.index)  # one draw over the whole priority mass
    assert torch.equal(weight, expected.info["priority_weight"])  # its weights, split
