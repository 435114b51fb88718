"""What a new user meets in Lightning: no spurious warning, no empty epochs, clear errors."""

from __future__ import annotations

import warnings

import lightning as L
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from rbdata.lightning import ReplayCallback, ReplayDataModule


def data(n: int = 64) -> TensorDict:
    return TensorDict({"observation": torch.randn(n, 4), "reward": torch.randn(n)}, batch_size=[n])


class Regressor(L.LightningModule):
    def __init__(self, td_error=None) -> None:
        super().__init__()
        self.net = nn.Linear(4, 1)
        self.td_error = td_error
        self.steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        err = self.net(batch["observation"]).squeeze(-1) - batch["reward"]
        out = {"loss": err.pow(2).mean()}
        if self.td_error is not None:
            out["td_error"] = self.td_error(err.detach())
        return out

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def trainer(**kwargs) -> L.Trainer:
    defaults = dict(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    return L.Trainer(**{**defaults, **kwargs})


def buffer(capacity: int = 256):
    return TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.5, storage=LazyTensorStorage(capacity)
    )


def test_a_plain_fit_gives_no_iterable_dataset_len_warning():
    dm = ReplayDataModule(buffer, batch_size=8, batches_per_epoch=5, offline_data=data(), seed=0)
    t = trainer(max_epochs=2)
    model = Regressor()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.fit(model, datamodule=dm)
    messages = [str(w.message) for w in caught]
    assert not [m for m in messages if "__len__" in m], messages
    assert model.steps == 10  # two epochs of batches_per_epoch
    assert t.num_training_batches == 5  # Lightning still knows the epoch's length
    assert t.limit_train_batches == 1.0  # given back after fit


def test_a_fractional_batch_limit_applies_to_batches_per_epoch():
    dm = ReplayDataModule(buffer, batch_size=8, batches_per_epoch=10, offline_data=data(), seed=0)
    model = Regressor()
    t = trainer(max_epochs=1, limit_train_batches=0.5)
    t.fit(model, datamodule=dm)
    assert model.steps == 5 and t.limit_train_batches == 0.5


def test_fit_over_a_never_filling_buffer_raises_instead_of_running_empty_epochs():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
    dm = ReplayDataModule(rb, batches_per_epoch=5)
    model = Regressor()
    with pytest.raises(RuntimeError, match="handed out no batch.*holds 0 items"):
        trainer(max_epochs=-1).fit(model, datamodule=dm)
    assert model.steps == 0


def test_fit_waiting_for_min_size_with_timeout_raises():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
    rb.extend(data(10))
    dm = ReplayDataModule(rb, batches_per_epoch=5, min_size=50, timeout=0.3)
    with pytest.raises(TimeoutError, match="min_size=50.*holds 10"):
        trainer(max_epochs=-1).fit(Regressor(), datamodule=dm)


def test_min_size_above_capacity_is_refused_at_construction_and_in_setup():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8)
    with pytest.raises(ValueError, match=r"min_size=1000.*capacity 100"):
        ReplayDataModule(rb, min_size=1000)
    dm = ReplayDataModule(lambda: buffer(100), batch_size=8, min_size=1000)
    with pytest.raises(ValueError, match=r"min_size=1000.*capacity 100"):
        dm.setup("fit")


@pytest.mark.parametrize(
    ("td_error", "given"),
    [
        (lambda err: err.abs().mean(), r"\(\)"),
        (lambda err: err.abs().unsqueeze(-1), r"\(8, 1\)"),
        (lambda err: err.abs()[:4], r"\(4,\)"),
    ],
)
def test_a_wrongly_shaped_priority_names_key_and_shapes(td_error, given):
    dm = ReplayDataModule(buffer, batch_size=8, batches_per_epoch=3, offline_data=data(), seed=0)
    with pytest.raises(ValueError, match=rf"'td_error' has shape {given}, expected \(8,\)"):
        trainer(max_steps=2, callbacks=[ReplayCallback()]).fit(Regressor(td_error), datamodule=dm)


def test_a_per_item_priority_is_applied():
    dm = ReplayDataModule(buffer, batch_size=8, batches_per_epoch=3, offline_data=data(), seed=0)
    trainer(max_steps=3, callbacks=[ReplayCallback()]).fit(
        Regressor(lambda err: err.abs()), datamodule=dm
    )
