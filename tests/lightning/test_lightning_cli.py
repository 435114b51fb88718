"""ReplayDataModule and ReplayCallback configured from a YAML file through LightningCLI."""

import textwrap

import h5py
import lightning as L
import numpy as np
import torch
from lightning.pytorch.cli import LightningCLI
from torch import nn

from rbdata import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer
from rbdata.lightning import ReplayCallback, ReplayDataModule


class RewardModel(L.LightningModule):
    """Regresses ``("next", "reward")`` from ``observation`` (D4RL-style batches)."""

    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.lr = lr
        self.net = nn.Linear(3, 1)
        self.my_version = 0

    def training_step(self, batch, batch_idx):
        self.my_version += 2
        err = self.net(batch["observation"]) - batch["next", "reward"]
        return {"loss": err.pow(2).mean(), "td_error": err.detach().abs().squeeze(-1)}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def test_configured_from_yaml(tmp_path, monkeypatch):
    monkeypatch.setattr("sys.argv", ["train.py"])  # LightningCLI reads sys.argv too
    data = tmp_path / "offline.hdf5"
    with h5py.File(data, "w") as f:
        f["observations"] = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
        f["next_observations"] = np.zeros((50, 3), np.float32)
        f["actions"] = np.zeros((50, 1), np.float32)
        f["rewards"] = np.ones(50, np.float32)
        f["terminals"] = np.zeros(50, bool)
        f["timeouts"] = np.zeros(50, bool)
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent(f"""
        seed_everything: 0
        trainer:
          default_root_dir: {tmp_path}
          accelerator: cpu
          max_steps: 4
          logger: false
          enable_progress_bar: false
          enable_checkpointing: false
          enable_model_summary: false
          callbacks:
            - class_path: rbdata.lightning.ReplayCallback
              init_args:
                priority_key: td_error
                policy_version: my_version
                log_stats: false
        model:
          lr: 0.05
        data:
          buffer:
            class_path: rbdata.TensorDictReplayBuffer
            init_args:
              sampler:
                class_path: rbdata.PrioritizedSampler
                init_args:
                  max_capacity: 100
                  alpha: 0.7
                  beta: 0.5
              storage:
                class_path: rbdata.LazyTensorStorage
                init_args:
                  max_size: 100
          batch_size: 8
          batches_per_epoch: 2
          offline_data: {data}
          checkpoint_buffer: false
          seed: 3
    """)
    )
    cli = LightningCLI(
        RewardModel,
        ReplayDataModule,
        run=False,
        save_config_callback=None,
        args=["--config", str(config)],
    )
    dm = cli.datamodule
    assert isinstance(dm, ReplayDataModule)
    assert (dm.batch_size, dm.batches_per_epoch, dm.seed) == (8, 2, 3)
    assert dm.checkpoint_buffer is False and str(dm.offline_data) == str(data)
    assert dm._buffer is None  # built in setup
    (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, ReplayCallback)]
    assert (callback.priority_key, callback.policy_version, callback.log_stats) == (
        "td_error",
        "my_version",
        False,
    )
    assert cli.model.lr == 0.05

    cli.trainer.fit(cli.model, datamodule=dm)
    assert cli.trainer.global_step == 4
    buffer = dm.buffer
    assert isinstance(buffer, TensorDictReplayBuffer)
    assert isinstance(buffer.sampler, PrioritizedSampler) and buffer.sampler.alpha == 0.7
    assert isinstance(buffer.storage, LazyTensorStorage) and buffer.storage.max_size == 100
    assert len(buffer) == 50  # the HDF5 file was loaded in setup
    assert callback.version() == 8  # read from the module attribute named in the YAML
