"""ReplayDataModule and ReplayCallback with a real lightning.Trainer (CPU, tiny models)."""

import csv
import warnings

import h5py
import lightning as L
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn
from torchdata.stateful_dataloader import StatefulDataLoader

from rbdata import (
    LazyTensorStorage,
    PolicyAgeFilter,
    PolicyVersion,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)
from rbdata.lightning import ReplayCallback, ReplayDataModule

N_ITEMS = 64


def make_data(n=N_ITEMS, start=0):
    """``n`` items with ids ``start...``; their content depends on ``start`` only."""
    ids = torch.arange(start, start + n)
    gen = torch.Generator().manual_seed(start)
    return TensorDict(
        {
            "observation": torch.randn(n, 4, generator=gen),
            "reward": torch.randn(n, generator=gen),
            "id": ids,
            "policy_version": torch.zeros(n, dtype=torch.long),
        },
        batch_size=[n],
    )


def prioritized(capacity=256, **kwargs):
    return TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=0.5,
        storage=LazyTensorStorage(capacity),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        **kwargs,
    )


class TinyModule(L.LightningModule):
    """A linear regressor on ``observation`` -> ``reward`` reporting per-item TD errors.

    ``priority_fn(batch)`` (optional) replaces the TD errors; ``add_per_step`` items are
    written to the datamodule's buffer in every step (online collection).
    """

    def __init__(self, priority_fn=None, add_per_step=0, return_priorities=True):
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.priority_fn = priority_fn
        self.add_per_step = add_per_step
        self.return_priorities = return_priorities
        self.batches = []

    def training_step(self, batch, batch_idx):
        self.batches.append(batch["id"].clone())
        if self.add_per_step:
            step = self.trainer.global_step + 1
            data = make_data(self.add_per_step, start=1000 * step)
            self.trainer.datamodule.buffer.extend(data)
        err = self.net(batch["observation"]).squeeze(-1) - batch["reward"]
        td_error = err.detach().abs() if self.priority_fn is None else self.priority_fn(batch)
        loss = err.pow(2).mean()
        return {"loss": loss, "td_error": td_error} if self.return_priorities else loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(**kwargs):
    defaults = dict(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        max_steps=6,
    )
    return L.Trainer(**{**defaults, **kwargs})


def datamodule(buffer=prioritized, **kwargs):
    defaults = dict(batch_size=8, batches_per_epoch=3, offline_data=make_data(), seed=0)
    return ReplayDataModule(buffer, **{**defaults, **kwargs})


# ------------------------------------------------------------------ ReplayDataModule
def test_setup_builds_the_buffer_once_and_loads_offline_data():
    calls = []

    def factory():
        calls.append(1)
        return prioritized()

    dm = datamodule(factory)
    with pytest.raises(RuntimeError, match="built in setup"):
        _ = dm.buffer
    assert not calls  # the factory runs in setup, not before
    dm.setup("fit")
    dm.setup("validate")
    assert len(calls) == 1
    assert len(dm.buffer) == N_ITEMS
    loader = dm.train_dataloader()
    assert isinstance(loader, StatefulDataLoader)
    batches = list(loader)
    assert len(batches) == 3 == len(loader)
    assert all(b["observation"].shape == (8, 4) for b in batches)
    assert all("index" in b.keys() and "index_generation" in b.keys() for b in batches)
    dm.teardown("fit")


def test_loader_options_reach_the_replay_dataset():
    dm = datamodule(
        prefetch=2,
        min_size=10,
        samples_per_insert=4.0,
        timeout=0.5,
        batches_per_epoch=None,
        pin_memory=False,
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    ds = loader.dataset
    assert (ds.batch_size, ds.num_batches, ds.prefetch, ds.min_size, ds.timeout) == (
        8,
        None,
        2,
        10,
        0.5,
    )
    assert ds.rate_limiter is not None and ds.held_back == 0  # no Lightning look-ahead here
    assert next(iter(loader))["observation"].shape == (8, 4)
    dm.teardown("fit")


def test_a_buffer_instance_is_used_as_is():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100))
    dm = datamodule(rb, offline_data=None, batches_per_epoch=2)
    dm.setup("fit")
    assert dm.buffer is rb and len(rb) == 0
    assert list(dm.train_dataloader()) == []  # an empty buffer ends the pass at once


def test_seeding_is_deterministic_and_differs_per_rank():
    def ids(seed, rank=0):
        dm = datamodule(seed=seed, checkpoint_buffer=False, pin_memory=False)
        if rank:
            dm.trainer = type("StubTrainer", (), {"global_rank": rank, "world_size": 1})()
        dm.setup("fit")
        return torch.cat([b["id"] for b in dm.train_dataloader()])

    assert torch.equal(ids(3), ids(3))
    assert not torch.equal(ids(3), ids(4))
    assert not torch.equal(ids(3), ids(3, rank=1))
    assert torch.equal(ids(3, rank=1), ids(4))  # rank r samples with seed + r


def test_offline_data_from_an_hdf5_file(tmp_path):
    path = tmp_path / "d.hdf5"
    with h5py.File(path, "w") as f:
        f["observations"] = np.arange(20, dtype=np.float32).reshape(10, 2)
        f["next_observations"] = np.zeros((10, 2), np.float32)
        f["actions"] = np.zeros((10, 1), np.float32)
        f["rewards"] = np.ones(10, np.float32)
        f["terminals"] = np.zeros(10, bool)
        f["timeouts"] = np.zeros(10, bool)
    dm = ReplayDataModule(
        lambda: TensorDictReplayBuffer(storage=LazyTensorStorage(100)),
        batch_size=4,
        offline_data=str(path),
    )
    dm.setup("fit")
    assert len(dm.buffer) == 10
    assert dm.buffer[:]["observation"][:, 0].tolist() == list(range(0, 20, 2))


def test_pin_memory_auto_follows_the_accelerator():
    dm = datamodule(checkpoint_buffer=False)
    dm.setup("fit")
    assert dm._pin_memory() is torch.cuda.is_available()
    dm.trainer = trainer()
    assert dm._pin_memory() is False  # a CPU trainer never pins


def test_bad_arguments_are_rejected():
    with pytest.raises(TypeError, match="buffer must be a replay buffer"):
        ReplayDataModule(3)
    with pytest.raises(ValueError, match="pin_memory"):
        ReplayDataModule(prioritized, pin_memory="yes")
    with pytest.raises(TypeError, match="seed"):
        ReplayDataModule(prioritized, seed=1.5)
    with pytest.raises(ValueError, match="batches_per_epoch must be an int >= 1, got 0"):
        ReplayDataModule(prioritized, batches_per_epoch=0)
    with pytest.raises(ValueError, match="prefetch must be an int >= 0"):
        ReplayDataModule(prioritized, prefetch=-1)
    dm = ReplayDataModule(lambda: "not a buffer")
    with pytest.raises(TypeError, match="factory must return a replay buffer, got str"):
        dm.setup("fit")


# ------------------------------------------------------------------ ReplayCallback
def test_priorities_from_the_step_output_steer_sampling():
    # Items with id < 8 get priority 1, all others 0: after the first update, later
    # batches only hold those items (or ones never updated, at the initial max priority).
    def priority_fn(batch):
        return (batch["id"] < 8).float()

    model = TinyModule(priority_fn)
    dm = datamodule(batches_per_epoch=None)
    trainer(max_steps=40, callbacks=[ReplayCallback()]).fit(model, datamodule=dm)
    zeroed = set()
    # Lightning fetches batch t + 1 before step t ends: updates show from batch t + 2 on.
    for t in range(2, len(model.batches)):
        zeroed |= {i for i in model.batches[t - 2].tolist() if i >= 8}
        assert not (set(model.batches[t].tolist()) & zeroed), "a priority-0 item came back"
    late = torch.cat(model.batches[-10:])
    assert bool((late < 8).float().mean() > 0.5)


def test_priorities_from_the_batch_when_the_output_has_none():
    class WritesIntoBatch(TinyModule):
        def training_step(self, batch, batch_idx):
            batch["td_error"] = torch.zeros(batch.batch_size[0])
            return super().training_step(batch, batch_idx)

    updates = []
    buffer = prioritized()
    original = buffer.update_priority

    def spy(index, priority, *, generation=None):
        updates.append((index.clone(), priority.clone(), generation))
        original(index, priority, generation=generation)

    buffer.update_priority = spy
    model = WritesIntoBatch(return_priorities=False)
    trainer(max_steps=4, callbacks=[ReplayCallback()]).fit(model, datamodule=datamodule(buffer))
    assert len(updates) == 4
    for (index, priority, generation), ids in zip(updates, model.batches, strict=True):
        assert torch.equal(priority, torch.zeros(8))
        assert generation is not None and generation.shape == index.shape
        assert sorted(index.tolist()) == sorted(ids.tolist())  # offline ids equal slots here


def test_slots_rewritten_since_sampling_keep_their_new_priority():
    # The buffer is full; every step overwrites 32 of its 64 slots, so some sampled slots
    # are rewritten before the callback applies their priorities: those are skipped.
    model = TinyModule(lambda batch: torch.zeros(8), add_per_step=32)
    dm = datamodule(lambda: prioritized(capacity=N_ITEMS))
    trainer(max_steps=6, callbacks=[ReplayCallback()]).fit(model, datamodule=dm)
    skipped = dm.buffer.stats()["skipped_priority_updates"]
    assert skipped > 0
    # Without the generation guard those updates would have gone through:
    assert skipped <= 6 * 8


def test_gradient_accumulation_updates_every_batch():
    count = []
    buffer = prioritized()
    original = buffer.update_priority

    def spy(*args, **kwargs):
        count.append(1)
        original(*args, **kwargs)

    buffer.update_priority = spy
    cb = ReplayCallback()
    t = trainer(max_steps=3, accumulate_grad_batches=2, callbacks=[cb])
    t.fit(TinyModule(), datamodule=datamodule(buffer, batches_per_epoch=None))
    assert t.global_step == 3 and len(count) == 6
    assert cb.version() == 3  # the default version is the trainer's global step


def test_manual_optimization_gets_priorities_and_versions():
    class Manual(TinyModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            out = super().training_step(batch, batch_idx)
            opt.zero_grad()
            self.manual_backward(out["loss"])
            opt.step()
            return {"td_error": torch.zeros(8)}

    buffer = prioritized()
    age_filter = PolicyAgeFilter(0, max_policy_lag=1000)
    buffer.append_transform(age_filter)
    t = trainer(max_steps=4, callbacks=[ReplayCallback()])
    model = Manual()
    t.fit(model, datamodule=datamodule(buffer, batches_per_epoch=None))
    assert age_filter.version() == t.global_step == 4
    # Every sampled item got priority 0: once updated (batch t + 1 was fetched before
    # step t ended), it is never drawn again.
    updated = set(model.batches[0].tolist())
    assert not updated & (set(model.batches[2].tolist()) | set(model.batches[3].tolist()))


class VersionedModule(TinyModule):
    def __init__(self, version):
        super().__init__()
        self.policy_version = version
        self.my_version = 100

    def on_train_batch_start(self, batch, batch_idx):
        if isinstance(self.policy_version, PolicyVersion):
            self.policy_version.increment(10)
        else:
            self.policy_version += 10
        self.my_version += 1


@pytest.mark.parametrize(
    ("attribute", "source", "expected"),
    [
        (5, None, 5 + 3 * 10),  # None: the module's policy_version attribute (an int)
        (PolicyVersion(), None, 30),  # ... holding a callable
        (0, "my_version", 103),  # a str: that attribute
        (0, "callable", 7),  # a callable
    ],
)
def test_policy_version_sources_reach_every_age_filter(attribute, source, expected):
    if source == "callable":
        source = lambda: 7  # noqa: E731
    buffer = prioritized()
    int_filter = PolicyAgeFilter(0, max_policy_lag=1000)  # built with an int
    callable_filter = PolicyAgeFilter(lambda: -1, max_policy_lag=1000)
    buffer.append_transform(int_filter)
    buffer.append_transform(callable_filter)
    cb = ReplayCallback(policy_version=source)
    trainer(max_steps=3, callbacks=[cb]).fit(
        VersionedModule(attribute), datamodule=datamodule(buffer)
    )
    assert int_filter.version() == callable_filter.version() == cb.version() == expected


def test_a_policy_version_source_is_the_published_counter():
    version = PolicyVersion()
    cb = ReplayCallback(policy_version=version)
    assert cb.version is version
    module = TinyModule()
    module.on_train_batch_start = lambda batch, batch_idx: version.increment()
    collected = []
    module.on_train_batch_end = lambda outputs, batch, batch_idx: collected.append(cb.version())
    trainer(max_steps=3, callbacks=[cb]).fit(module, datamodule=datamodule())
    assert collected == [1, 2, 3]


def test_stats_are_logged_and_the_size_is_in_the_progress_bar(tmp_path):
    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="run")
    t = trainer(
        max_steps=4,
        logger=logger,
        log_every_n_steps=1,
        enable_progress_bar=True,
        callbacks=[ReplayCallback()],
    )
    t.fit(TinyModule(add_per_step=2), datamodule=datamodule())
    assert t.progress_bar_metrics["replay/size"] == N_ITEMS + 8
    with open(logger.experiment.metrics_file_path) as f:
        rows = list(csv.DictReader(f))
    sizes = [float(r["replay/size"]) for r in rows if r.get("replay/size")]
    assert sizes == [N_ITEMS + 2, N_ITEMS + 4, N_ITEMS + 6, N_ITEMS + 8]
    writes = [float(r["replay/write_count"]) for r in rows if r.get("replay/write_count")]
    assert writes[-1] == N_ITEMS + 8
    assert all(r.get("replay/skipped_priority_updates") is not None for r in rows)


def test_log_stats_false_keeps_stats_out_of_the_logger(tmp_path):
    logger = L.pytorch.loggers.CSVLogger(tmp_path, name="run")
    t = trainer(
        max_steps=2, logger=logger, log_every_n_steps=1, callbacks=[ReplayCallback(log_stats=False)]
    )
    t.fit(TinyModule(), datamodule=datamodule())
    assert "replay/size" not in t.logged_metrics


def test_no_buffer_is_an_error():
    loader = torch.utils.data.DataLoader([make_data(2)[0]], batch_size=None)
    with pytest.raises(RuntimeError, match="found no buffer"):
        trainer(callbacks=[ReplayCallback()]).fit(TinyModule(), train_dataloaders=loader)


def test_an_explicit_buffer_and_errors_on_bad_arguments():
    cb = ReplayCallback(buffer=prioritized())
    with pytest.raises(TypeError, match="priority_key"):
        ReplayCallback(priority_key=3)
    with pytest.raises(TypeError, match="policy_version"):
        ReplayCallback(policy_version=3)
    with pytest.raises(RuntimeError, match="no buffer yet"):
        _ = ReplayCallback().buffer
    assert len(cb.buffer) == 0
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        trainer(callbacks=[ReplayCallback(policy_version="nope")]).fit(
            TinyModule(), datamodule=datamodule()
        )


def test_missing_priorities_warn_once_for_a_prioritized_buffer():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(max_steps=3, callbacks=[ReplayCallback()]).fit(
            TinyModule(return_priorities=False), datamodule=datamodule()
        )
    messages = [str(w.message) for w in caught if "priorities are not updated" in str(w.message)]
    assert len(messages) == 1


class SavesBatches(TinyModule):
    def __init__(self, out_dir):
        super().__init__()
        self.out_dir = out_dir

    def on_train_end(self):
        torch.save(torch.stack(self.batches), f"{self.out_dir}/rank{self.global_rank}.pt")


def test_each_ddp_rank_samples_with_its_own_seed(tmp_path, monkeypatch):
    monkeypatch.delenv("MASTER_PORT", raising=False)  # Lightning sets it: undone afterwards
    # No priority updates: under DDP they follow the averaged gradients, not one rank's.
    t = trainer(
        max_steps=3, strategy="ddp_fork", devices=2, callbacks=[ReplayCallback(priority_key=None)]
    )
    t.fit(SavesBatches(tmp_path), datamodule=datamodule(seed=5, checkpoint_buffer=False))
    rank0, rank1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    assert not torch.equal(rank0, rank1)

    def alone(seed):  # what one process with that seed samples
        model = TinyModule()
        trainer(max_steps=3, callbacks=[ReplayCallback(priority_key=None)]).fit(
            model, datamodule=datamodule(seed=seed, checkpoint_buffer=False)
        )
        return torch.stack(model.batches)

    assert torch.equal(rank0, alone(5)) and torch.equal(rank1, alone(6))
