"""ReplayDataset: batches through DataLoaders, pass lengths, argument checks."""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict
from torch.utils.data import DataLoader, default_convert
from torchdata.stateful_dataloader import StatefulDataLoader

from rbdata import (
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    ReplayDataset,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.loader import ReplayBatch


def td_buffer(n: int = 10, capacity: int = 100, sampler=None, batch_size: int = 4, **kwargs):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity),
        sampler=sampler if sampler is not None else RandomSampler(),
        batch_size=batch_size,
        **kwargs,
    )
    if n:
        rb.extend(transitions(n))
    return rb


def transitions(n: int, start: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {
            "obs": obs.unsqueeze(-1).expand(n, 3).clone(),
            "action": torch.zeros(n, 2),
            "next": {
                "reward": obs.unsqueeze(-1).clone(),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def all_indices(batches) -> list[int]:
    return sorted(torch.cat([b["index"] for b in batches]).tolist())


# ---------------------------------------------------------------- ReplayBatch


def test_replay_batch_iterates_leaf_keys_and_survives_default_convert():
    batch = ReplayBatch(
        {"index": torch.arange(3), "next": {"reward": torch.ones(3, 1)}}, batch_size=[3]
    )
    assert list(batch) == ["index", ("next", "reward")]
    out = default_convert(batch)
    assert type(out) is ReplayBatch
    assert out.batch_size == torch.Size([3])
    assert out["next", "reward"] is batch["next", "reward"]
    assert out["index"].tolist() == [0, 1, 2]
    # rows are still there through TensorDict's own API
    assert [row["index"].item() for row in batch.unbind(0)] == [0, 1, 2]
    assert batch[1:]["index"].tolist() == [1, 2]


def test_replay_batch_update_with_new_tensors_still_writes():
    batch = ReplayBatch({"a": torch.zeros(2), "n": {"b": torch.zeros(2)}}, batch_size=[2])
    new = torch.ones(2)
    batch.update({("n", "b"): new, "a": batch["a"]})
    assert batch["n", "b"] is new
    assert batch.update(TensorDict({"c": torch.ones(2)}, [2]))["c"].sum() == 2


# ---------------------------------------------------------------- DataLoaders


@pytest.mark.parametrize("prefetch", [0, 2])
def test_dataloader_default_conversion_keeps_tensordict_batches(prefetch):
    rb = td_buffer(writer=TensorDictRoundRobinWriter(track_generations=True))
    with ReplayDataset(rb, num_batches=3, prefetch=prefetch) as ds:
        batches = list(DataLoader(ds, batch_size=None))
    assert len(batches) == 3
    for batch in batches:
        assert isinstance(batch, TensorDict)
        assert batch.batch_size == torch.Size([4])
        assert batch["next", "reward"].shape == (4, 1)
        assert batch["index"].dtype == torch.long
        assert torch.equal(batch["index_generation"], torch.zeros(4, dtype=torch.long))
        # the data is the stored data of those indices
        assert torch.equal(batch["next", "reward"].squeeze(-1), batch["index"].float())


def test_dataloader_pin_memory_and_stateful_dataloader():
    rb = td_buffer()
    ds = ReplayDataset(rb, num_batches=2)
    with pytest.warns(UserWarning):  # torch: no accelerator to pin to
        batches = list(DataLoader(ds, batch_size=None, pin_memory=True))
    assert [b.batch_size for b in batches] == [torch.Size([4])] * 2
    loader = ds.dataloader()
    assert isinstance(loader, StatefulDataLoader)
    batches = list(loader)
    assert len(batches) == 2 and batches[0]["obs"].shape == (4, 3)
    with pytest.raises(ValueError, match="batch_size"):
        ds.dataloader(batch_size=4)


def test_non_tensordict_buffers_yield_what_sample_returns():
    rb = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=3)
    rb.extend(torch.arange(10) * 10)
    batch = next(iter(DataLoader(ReplayDataset(rb, num_batches=1), batch_size=None)))
    assert type(batch) is torch.Tensor and batch.shape == (3,)  # as rb.sample() gives
    assert type(rb.sample()) is torch.Tensor
    loader = DataLoader(ReplayDataset(rb, num_batches=1, return_info=True), batch_size=None)
    batch, info = next(iter(loader))
    assert torch.equal(batch, info["index"] * 10)
    rb = ReplayBuffer(storage=ListStorage(20), batch_size=3)
    rb.extend([{"x": torch.tensor(float(i))} for i in range(10)])
    batch, info = next(iter(ReplayDataset(rb, num_batches=1, return_info=True)))
    assert torch.equal(batch["x"], info["index"].float())


# ---------------------------------------------------------------- passes


@given(
    n=st.integers(1, 40),
    batch_size=st.integers(1, 9),
    prefetch=st.sampled_from([0, 1, 3]),
    drop_last=st.booleans(),
)
def test_without_replacement_pass_yields_every_item_once(n, batch_size, prefetch, drop_last):
    rb = td_buffer(n, sampler=SamplerWithoutReplacement(drop_last=drop_last), batch_size=batch_size)
    if drop_last and n < batch_size:
        return
    with ReplayDataset(rb, prefetch=prefetch) as ds:
        for _ in range(2):  # two passes, each complete
            batches = list(ds)
            got = all_indices(batches)
            if drop_last:
                assert len(batches) == n // batch_size
                assert len(set(got)) == len(got) == (n // batch_size) * batch_size
            else:
                assert got == list(range(n))
                assert [len(b) for b in batches[:-1]] == [batch_size] * (len(batches) - 1)


def test_num_batches_spans_without_replacement_epochs():
    rb = td_buffer(10, sampler=SamplerWithoutReplacement(), batch_size=5)
    ds = ReplayDataset(rb, num_batches=7)
    assert len(ds) == 7
    batches = list(ds)
    assert len(batches) == 7
    for epoch in range(3):
        assert all_indices(batches[2 * epoch : 2 * epoch + 2]) == list(range(10))
    assert len(list(ds)) == 7


@pytest.mark.parametrize("prefetch", [0, 2])
def test_consume_after_n_pass_yields_each_item_n_times(prefetch):
    rb = td_buffer(13, batch_size=4, consume_after_n_samples=2)
    with ReplayDataset(rb, prefetch=prefetch) as ds:
        batches = list(ds)
        counts = torch.bincount(torch.cat([b["index"] for b in batches]), minlength=13)
        assert counts.tolist() == [2] * 13
        assert list(ds) == []  # exhausted: the next pass ends at once


def test_random_and_prioritized_passes_never_end():
    rb = td_buffer(5)
    ds = ReplayDataset(rb, prefetch=1)
    assert len(list(itertools.islice(ds, 60))) == 60
    with pytest.raises(TypeError, match="num_batches"):
        len(ds)
    ds.close()
    rb = td_buffer(5, sampler=PrioritizedSampler(100, alpha=0.7, beta=0.5))
    batches = list(itertools.islice(ReplayDataset(rb), 30))
    assert len(batches) == 30 and "priority_weight" in batches[0].keys()


def test_empty_buffer_ends_the_pass_at_once():
    rb = td_buffer(0)
    assert list(ReplayDataset(rb, num_batches=5, prefetch=2)) == []
    assert list(ReplayDataset(rb)) == []


def test_batch_size_defaults_to_the_buffer_and_overrides():
    rb = td_buffer(20, batch_size=6)
    assert next(iter(ReplayDataset(rb)))["index"].shape == (6,)
    assert next(iter(ReplayDataset(rb, batch_size=2)))["index"].shape == (2,)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"num_batches": 0}, ValueError, "num_batches"),
        ({"prefetch": -1}, ValueError, "prefetch"),
        ({"prefetch": 1.5}, TypeError, "prefetch"),
        ({"min_size": -2}, ValueError, "min_size"),
        ({"timeout": -1.0}, ValueError, "timeout"),
        ({"pin_memory": "yes"}, TypeError, "pin_memory"),
        ({"samples_per_insert": 0.0}, ValueError, "samples_per_insert"),
        ({"rate_limiter": object()}, TypeError, "rate_limiter"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, error, match):
    with pytest.raises(error, match=match):
        ReplayDataset(td_buffer(), **kwargs)


def test_buffer_without_batch_size_needs_one():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    with pytest.raises(ValueError, match="batch_size"):
        ReplayDataset(rb)
    with pytest.raises(TypeError, match="ServableBuffer"):
        ReplayDataset([1, 2, 3], batch_size=2)


def test_dataset_pickles_for_spawned_workers():
    rb = td_buffer(sampler=SamplerWithoutReplacement(), batch_size=5)
    ds = ReplayDataset(rb, prefetch=1)
    next(iter(ds))
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.prefetch == 1 and clone.batch_size == 5
    assert len(list(clone)) >= 1
    ds.close()
