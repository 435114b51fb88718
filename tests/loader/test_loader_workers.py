"""ReplayDataset with DataLoader worker processes (num_workers > 0): live, every sampler.

Most loaders here fork their workers (``multiprocessing_context="fork"``:
no import per worker, a test takes a second); the spawn tests cover rbdata's
default start method, a plain DataLoader and a seeded ``generator``.
"""

from __future__ import annotations

import os
import time
import traceback
from collections import Counter
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import pytest
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader, get_worker_info

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    PolicyAgeFilter,
    PolicyVersion,
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    ReplayDataset,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

FORK = {"multiprocessing_context": "fork"}


def transitions(n: int, start: int = 0, episode_len: int = 0) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    data = TensorDict({"obs": obs.unsqueeze(-1).clone()}, batch_size=[n])
    if episode_len:
        data["episode"] = (torch.arange(start, start + n) // episode_len).long()
    return data


def shared_buffer(sampler, n: int = 50, capacity: int = 64, batch_size: int = 4, **kwargs):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity, shared_init=True),
        sampler=sampler,
        batch_size=batch_size,
        generator=torch.Generator().manual_seed(0),
        **kwargs,
    )
    if n:
        rb.extend(transitions(n))
    return rb


def check_data(batches) -> None:
    for batch in batches:
        assert torch.equal(batch["obs"].squeeze(-1), batch["index"].float())


def indices(batches) -> list[list[int]]:
    return [b["index"].tolist() for b in batches]


def test_without_replacement_pass_is_split_and_matches_one_process():
    rb = shared_buffer(SamplerWithoutReplacement())
    state = rb.sampling_state()
    with ReplayDataset(rb) as ds:
        batches = list(ds.dataloader(num_workers=2, **FORK))
    check_data(batches)
    assert sorted(torch.cat([b["index"] for b in batches]).tolist()) == list(range(50))
    assert len(batches) == 13
    # one sampler draws in batch order: the same batches as in one process
    rb.load_sampling_state(state)
    with ReplayDataset(rb) as ds:
        assert indices(ds.dataloader()) == indices(batches)
    # num_batches counts across workers, spanning passes
    with ReplayDataset(rb, num_batches=25) as ds:
        batches = list(ds.dataloader(num_workers=2, **FORK))
    assert len(batches) == 25
    assert sorted(torch.cat([b["index"] for b in batches[:13]]).tolist()) == list(range(50))


def test_rows_written_after_the_workers_started_reach_them():
    rb = shared_buffer(RandomSampler(), n=40)
    with ReplayDataset(rb, num_batches=60) as ds:
        it = iter(ds.dataloader(num_workers=2, prefetch_factor=2, **FORK))
        first = [next(it) for _ in range(2)]
        rb.extend(transitions(24, start=40))  # slots 40..63, while the workers run
        rest = list(it)
    check_data(first + rest)
    # at most prefetch_factor * num_workers batches were drawn before the write
    late = torch.cat([b["index"] for b in rest[4:]])
    assert (late >= 40).any()


def test_prioritized_workers_follow_priority_updates_from_the_training_process():
    rb = shared_buffer(PrioritizedSampler(64, alpha=1.0, beta=1.0))
    with ReplayDataset(rb, num_batches=30) as ds:
        it = iter(ds.dataloader(num_workers=2, prefetch_factor=1, **FORK))
        first = next(it)
        assert "priority_weight" in first.keys()
        priority = torch.full((50,), 1e-6)
        priority[7] = 1e6
        rb.update_priority(torch.arange(50), priority)
        rest = list(it)
    check_data(rest)
    # batches drawn after the update (past the two in flight) hold slot 7 almost only
    late = torch.cat([b["index"] for b in rest[3:]])
    assert (late == 7).float().mean() > 0.95


def test_consume_after_n_counts_across_workers():
    rb = shared_buffer(RandomSampler(), n=30, consume_after_n_samples=2)
    with ReplayDataset(rb) as ds:
        batches = list(ds.dataloader(num_workers=2, **FORK))
    check_data(batches)
    counts = Counter(torch.cat([b["index"] for b in batches]).tolist())
    assert set(counts) == set(range(30)) and set(counts.values()) == {2}


@pytest.mark.parametrize("prioritized", [False, True])
def test_slice_samplers_follow_new_trajectories(prioritized):
    if prioritized:
        sampler = PrioritizedSliceSampler(64, alpha=1.0, beta=1.0, slice_len=4, traj_key="episode")
    else:
        sampler = SliceSampler(slice_len=4, traj_key="episode")
    rb = shared_buffer(sampler, n=0, batch_size=8)
    rb.extend(transitions(32, episode_len=8))
    with ReplayDataset(rb, num_batches=40) as ds:
        it = iter(ds.dataloader(num_workers=2, prefetch_factor=1, **FORK))
        first = next(it)
        rb.extend(transitions(32, start=32, episode_len=8))
        rest = list(it)
    for batch in [first, *rest]:
        check_data([batch])
        slices = batch["episode"].reshape(2, 4)
        assert (slices == slices[:, :1]).all()  # each slice inside one trajectory
    late = torch.cat([b["index"] for b in rest[3:]])
    assert (late >= 32).any()


def test_policy_age_filter_uses_the_live_version_in_every_worker():
    version = PolicyVersion()
    rb = shared_buffer(
        SamplerWithoutReplacement(), n=0, transform=PolicyAgeFilter(version, max_policy_lag=0)
    )
    data = transitions(40)
    data["policy_version"] = torch.zeros(40, dtype=torch.long)
    rb.extend(data)
    with ReplayDataset(rb, num_batches=10) as ds:
        it = iter(ds.dataloader(num_workers=2, prefetch_factor=1, **FORK))
        assert next(it).batch_size[0] == 4
        version.set(1)  # every stored row is now too old
        rest = list(it)
    assert all(b.batch_size[0] == 0 for b in rest[3:])


def test_stateful_dataloader_with_workers_resumes_exactly(tmp_path):
    rb = shared_buffer(PrioritizedSampler(64, alpha=0.7, beta=0.5))
    loader = ReplayDataset(rb, num_batches=14).dataloader(num_workers=2, **FORK)
    it = iter(loader)
    head = [next(it) for _ in range(5)]
    torch.save(loader.state_dict(), tmp_path / "loader.pt")
    rb.dumps(tmp_path / "rb")
    tail = list(it)
    assert len(head) + len(tail) == 14
    rb.loads(tmp_path / "rb")
    resumed = ReplayDataset(rb, num_batches=14).dataloader(num_workers=2, **FORK)
    resumed.load_state_dict(torch.load(tmp_path / "loader.pt", weights_only=True))
    assert indices(resumed) == indices(tail)


def test_spawned_workers_with_a_seeded_generator_and_a_plain_dataloader(tmp_path):
    # a spawned worker gets neither the priority tree (which refuses to be pickled) nor
    # the generator (which crashed spawned workers: "unable to resize file")
    rb = TensorDictReplayBuffer(
        storage=LazyMemmapStorage(64, scratch_dir=tmp_path),
        sampler=PrioritizedSliceSampler(64, alpha=1.0, beta=1.0, slice_len=4, traj_key="episode"),
        batch_size=8,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(transitions(48, episode_len=8))
    with ReplayDataset(rb, num_batches=6) as ds:
        batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    check_data(batches)
    assert all("priority_weight" in b.keys() for b in batches)
    assert len(batches) == 6


def test_unsafe_buffers_raise_a_clear_error(tmp_path):
    private = TensorDictReplayBuffer(storage=LazyTensorStorage(64), batch_size=4)
    private.extend(transitions(10))
    with pytest.raises(RuntimeError, match="LazyMemmapStorage.*prefetch"):
        ReplayDataset(private).dataloader(num_workers=1)
    safe = shared_buffer(RandomSampler())
    with pytest.raises(ValueError, match="prefetch"):
        ReplayDataset(safe, prefetch=2).dataloader(num_workers=2)
    # a plain DataLoader raises the same error, pickling the dataset for a spawned worker
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


class _DieInSecondWorker:
    """A sample-path transform that kills DataLoader worker 1 (a crash mid-batch)."""

    def __call__(self, data):
        info = get_worker_info()
        if info is not None and info.id == 1:
            os._exit(3)
        return data


def test_a_dead_worker_leaves_the_training_process_drawing():
    rb = shared_buffer(RandomSampler(), transform=_DieInSecondWorker())
    with ReplayDataset(rb, num_batches=8) as ds:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="worker"):
            list(ds.dataloader(num_workers=2, **FORK))
        assert time.monotonic() - start < 30
        rb.extend(transitions(4, start=50))  # the lock is free
        batches = list(ds.dataloader(num_workers=1, **FORK))  # the draws go on
    assert len(batches) == 8
    check_data(batches)


def test_a_forked_plain_dataloader_needs_the_draws_started_first():
    rb = shared_buffer(RandomSampler())
    with ReplayDataset(rb, num_batches=2) as ds:
        loader = DataLoader(ds, batch_size=None, num_workers=1, **FORK)
        with pytest.raises(RuntimeError, match="ds.dataloader"):
            list(loader)
        ds.dataloader(num_workers=1)  # starts them: now the plain loader works too
        assert len(list(loader)) == 2


def test_closing_the_dataset_stops_its_draws():
    rb = shared_buffer(RandomSampler())
    ds = ReplayDataset(rb, num_batches=2)
    ds.dataloader(num_workers=1)
    access = ds.draw_access
    assert access is not None
    Client(access.address, family="AF_UNIX", authkey=access.key).close()  # serving
    with pytest.raises(AuthenticationError):  # only to holders of the key
        Client(access.address, family="AF_UNIX", authkey=b"guess")
    ds.close()
    assert ds.draw_access is None
    deadline = time.monotonic() + 5
    refused = False
    while not refused and time.monotonic() < deadline:
        try:
            Client(access.address, family="AF_UNIX", authkey=access.key).close()
            time.sleep(0.01)
        except (ConnectionRefusedError, FileNotFoundError):
            refused = True
    assert refused


def test_persistent_workers_run_a_new_pass_each_epoch():
    rb = shared_buffer(SamplerWithoutReplacement(), n=20)
    with ReplayDataset(rb) as ds:
        loader = ds.dataloader(num_workers=2, persistent_workers=True, **FORK)
        for _ in range(2):
            index = torch.cat([b["index"] for b in loader])
            assert sorted(index.tolist()) == list(range(20))


def test_waits_happen_in_the_training_process_and_time_out_there():
    rb = shared_buffer(RandomSampler(), n=0)
    with (
        ReplayDataset(rb, min_size=10, timeout=0.5) as ds,
        pytest.raises(RuntimeError, match="TimeoutError.*min_size=10"),
    ):
        list(ds.dataloader(num_workers=1, **FORK))


def test_rows_written_again_before_their_gather_are_dropped():
    # each write stamps obs with its write number; the ring wraps while batches wait
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(32, shared_init=True),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=16,
        generator=torch.Generator().manual_seed(0),
    )
    rb.extend(transitions(32))
    written = 32
    with ReplayDataset(rb, num_batches=30) as ds:
        batches = []
        for batch in ds.dataloader(num_workers=2, prefetch_factor=2, **FORK):
            batches.append(batch)
            rb.extend(transitions(4, start=written))
            written += 4
    rows = sum(b.batch_size[0] for b in batches)
    assert 0 < rows < 30 * 16  # some rows were written again while their batch waited
    late = torch.cat([b["obs"] for b in batches[15:]])
    assert (late >= 32).any()  # rows written after the workers started reach them
    for batch in batches:  # what a row holds is the write its generation names
        assert torch.equal(batch["obs"].squeeze(-1).long() % 32, batch["index"])
        assert torch.equal(batch["obs"].squeeze(-1).long() // 32, batch["index_generation"])
