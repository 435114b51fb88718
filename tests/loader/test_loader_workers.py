"""ReplayDataset with DataLoader worker processes (num_workers > 0)."""

from __future__ import annotations

import traceback

import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayDataset,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def transitions(n: int) -> TensorDict:
    obs = torch.arange(n, dtype=torch.float32)
    return TensorDict({"obs": obs.unsqueeze(-1).clone()}, batch_size=[n])


def memmap_buffer(tmp_path, sampler, n: int = 50, batch_size: int = 4, **kwargs):
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(64, scratch_dir=tmp_path),
        sampler=sampler,
        batch_size=batch_size,
        **kwargs,
    )
    rb.extend(transitions(n))
    return rb


def check_data(batches) -> None:
    for batch in batches:
        assert torch.equal(batch["obs"].squeeze(-1), batch["index"].float())


def test_two_workers_split_a_without_replacement_pass(tmp_path):
    rb = memmap_buffer(tmp_path, SamplerWithoutReplacement())
    ds = ReplayDataset(rb)
    loader = ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(0))
    batches = list(loader)
    check_data(batches)
    index = torch.cat([b["index"] for b in batches])
    assert sorted(index.tolist()) == list(range(50))  # every item once, no duplicates
    assert len(batches) == 13
    # deterministic: the same loader seed gives the same pass
    again = list(ds.dataloader(num_workers=2, generator=torch.Generator().manual_seed(0)))
    assert [b["index"].tolist() for b in again] == [b["index"].tolist() for b in batches]
    # num_batches counts across workers, spanning passes
    ds = ReplayDataset(rb, num_batches=25)
    batches = list(ds.dataloader(num_workers=2))
    assert len(batches) == 25 and len(ds) == 25
    first_pass = torch.cat([b["index"] for b in batches[:13]])
    assert sorted(first_pass.tolist()) == list(range(50))


def test_random_sampler_workers_use_distinct_seeds(tmp_path):
    rb = memmap_buffer(tmp_path, RandomSampler(), n=60, batch_size=8)
    ds = ReplayDataset(rb, num_batches=6)
    loader = DataLoader(
        ds, batch_size=None, num_workers=2, generator=torch.Generator().manual_seed(7)
    )
    batches = list(loader)
    check_data(batches)
    assert len(batches) == 6
    by_worker = [[b["index"].tolist() for b in batches[w::2]] for w in range(2)]
    assert by_worker[0] != by_worker[1]
    again = list(
        DataLoader(ds, batch_size=None, num_workers=2, generator=torch.Generator().manual_seed(7))
    )
    assert [b["index"].tolist() for b in again] == [b["index"].tolist() for b in batches]


def test_unsafe_buffers_raise_a_clear_error_pointing_to_prefetch(tmp_path):
    prioritized = memmap_buffer(tmp_path / "p", PrioritizedSampler(64, alpha=0.7, beta=0.5))
    with pytest.raises(RuntimeError, match="prefetch"):
        ReplayDataset(prioritized).dataloader(num_workers=2)
    consumed = memmap_buffer(tmp_path / "c", RandomSampler(), consume_after_n_samples=1)
    with pytest.raises(RuntimeError, match="consume_after_n_samples.*prefetch"):
        ReplayDataset(consumed).dataloader(num_workers=2)
    private = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=4)
    private.extend(transitions(10))
    with pytest.raises(RuntimeError, match="LazyMemmapStorage.*prefetch"):
        ReplayDataset(private).dataloader(num_workers=1)
    safe = memmap_buffer(tmp_path / "s", RandomSampler())
    with pytest.raises(ValueError, match="prefetch"):
        ReplayDataset(safe, prefetch=2).dataloader(num_workers=2)
    # a plain DataLoader raises the same error, pickling the dataset for a spawned worker
    assert "prefetch" in worker_error(ReplayDataset(prioritized, num_batches=2))
    assert "LazyMemmapStorage" in worker_error(ReplayDataset(private, num_batches=2))
    assert not private.storage.get_leaf("obs").is_shared()  # left private, not moved to shm


def worker_error(ds) -> str:
    """The error a worker raises (caught here so that the loader shuts down at once)."""
    try:
        list(DataLoader(ds, batch_size=None, num_workers=1))
    except RuntimeError as err:
        traceback.clear_frames(err.__traceback__)  # frees the loader now, not at a later gc
        return str(err)
    return ""


def test_stateful_dataloader_with_workers_resumes(tmp_path):
    rb = memmap_buffer(tmp_path, SamplerWithoutReplacement(), n=48)
    loader = ReplayDataset(rb, num_batches=11).dataloader(num_workers=2)
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    state = loader.state_dict()
    tail = list(it)
    assert len(head) + len(tail) == 11
    resumed = ReplayDataset(rb, num_batches=11).dataloader(num_workers=2)
    resumed.load_state_dict(state)
    assert [b["index"].tolist() for b in resumed] == [b["index"].tolist() for b in tail]
