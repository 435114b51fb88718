"""Checkpointing the buffer with Lightning: dumps beside .ckpt files, exact resume, SIGKILL."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from test_lightning_replay import N_ITEMS, TinyModule, datamodule, make_data, prioritized

from rbdata import PolicyVersion
from rbdata.lightning import ReplayCallback, ReplayDataModule

TESTS_DIR = Path(__file__).parent
ADD_PER_STEP = 4


def quiet_trainer(max_steps, callbacks):
    """A CPU Trainer without logger, progress bar or model summary."""
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_steps=max_steps,
        callbacks=callbacks,
    )


def fit(root, max_steps, *, ckpt_path=None, every=3, callbacks=(), dm_kwargs=None, **ckpt_kwargs):
    """Train a TinyModule that adds ADD_PER_STEP items per step; return (model, dm, trainer)."""
    L.seed_everything(0, verbose=False)
    model = TinyModule(add_per_step=ADD_PER_STEP)
    dm = datamodule(**(dm_kwargs or {}))
    checkpoint = ModelCheckpoint(
        dirpath=root, every_n_train_steps=every, **{"save_top_k": -1, **ckpt_kwargs}
    )
    trainer = quiet_trainer(max_steps, [checkpoint, ReplayCallback(), *callbacks])
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model, dm, trainer


def stored_ids(buffer):
    return sorted(buffer[:]["id"].tolist())


def expected_ids(step):
    """The ids a buffer holds after ``step`` training steps (offline data, then online)."""
    online = [1000 * s + i for s in range(1, step + 1) for i in range(ADD_PER_STEP)]
    return sorted(list(range(N_ITEMS)) + online)


def dumps_in(root):
    return sorted(p.name for p in Path(root).iterdir() if ".buffer-" in p.name)


@pytest.mark.parametrize("batches_per_epoch", [None, 4])
def test_batches_after_resume_equal_an_uninterrupted_run(tmp_path, batches_per_epoch):
    dm_kwargs = {"batches_per_epoch": batches_per_epoch}
    full, full_dm, _ = fit(tmp_path / "full", 12, dm_kwargs=dm_kwargs)
    fit(tmp_path / "run", 6, dm_kwargs=dm_kwargs, save_last=True)
    resumed, resumed_dm, trainer = fit(tmp_path / "run", 12, ckpt_path="last", dm_kwargs=dm_kwargs)
    assert trainer.global_step == 12 and len(resumed.batches) == 6
    for a, b in zip(full.batches[6:], resumed.batches, strict=True):
        assert torch.equal(a, b)
    assert stored_ids(resumed_dm.buffer) == stored_ids(full_dm.buffer) == expected_ids(12)


def test_every_checkpoint_has_its_dump_which_goes_with_it(tmp_path):
    _, dm, _ = fit(tmp_path, 9, save_top_k=1, save_last=True)
    ckpts = sorted(p.name for p in tmp_path.glob("*.ckpt"))
    assert ckpts == ["epoch=2-step=9.ckpt", "last.ckpt"]  # older top-k checkpoints were deleted
    dumps = dumps_in(tmp_path)
    assert [d.split(".buffer-")[0] for d in dumps] == ckpts  # ... and their dumps with them
    for name in ckpts:
        entry = torch.load(tmp_path / name, weights_only=True)["ReplayDataModule"]
        assert entry["buffer_dumps"] in dumps and entry["buffer_dumps"].startswith(name)
        assert (tmp_path / entry["buffer_dumps"] / "manifest.json").is_file()
    assert stored_ids(dm.buffer) == expected_ids(9)


def test_save_last_link_and_a_manual_checkpoint_resume(tmp_path):
    _, _, trainer = fit(tmp_path, 6, save_last="link")
    assert (tmp_path / "last.ckpt").is_symlink()
    resumed, dm, _ = fit(tmp_path, 7, ckpt_path=tmp_path / "last.ckpt")
    assert stored_ids(dm.buffer) == expected_ids(7)
    trainer = resumed.trainer
    trainer.save_checkpoint(tmp_path / "manual" / "m.ckpt")
    assert [d.split(".buffer-")[0] for d in dumps_in(tmp_path / "manual")] == ["m.ckpt"]
    _, dm2, _ = fit(tmp_path / "other", 8, ckpt_path=tmp_path / "manual" / "m.ckpt")
    assert stored_ids(dm2.buffer) == expected_ids(8)


def test_checkpoint_buffer_false_keeps_the_buffer_out(tmp_path):
    kwargs = {"dm_kwargs": {"checkpoint_buffer": False}}
    fit(tmp_path, 3, **kwargs)
    assert dumps_in(tmp_path) == []
    ckpt = torch.load(tmp_path / "epoch=0-step=3.ckpt", weights_only=True)
    assert "ReplayDataModule" not in ckpt
    _, dm, trainer = fit(tmp_path, 4, ckpt_path=tmp_path / "epoch=0-step=3.ckpt", **kwargs)
    assert trainer.global_step == 4
    # Not restored: the offline data plus the one step run after resuming.
    assert stored_ids(dm.buffer) == sorted(list(range(N_ITEMS)) + [4000 + i for i in range(4)])


def test_weights_only_checkpoints_skip_the_buffer(tmp_path):
    fit(tmp_path, 3, save_weights_only=True)
    assert dumps_in(tmp_path) == []
    assert "ReplayDataModule" not in torch.load(tmp_path / "epoch=0-step=3.ckpt", weights_only=True)


def test_the_policy_version_is_restored(tmp_path):
    class Bumps(L.Callback):
        def __init__(self, version):
            self.version = version

        def on_train_batch_start(self, *args):
            self.version.increment(2)

    version = PolicyVersion()
    model = TinyModule()
    dm = datamodule()
    cb = ReplayCallback(policy_version=version)
    trainer = quiet_trainer(
        3, [ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3), cb, Bumps(version)]
    )
    trainer.fit(model, datamodule=dm)
    assert version() == 6
    fresh = PolicyVersion()
    trainer = quiet_trainer(3, [ReplayCallback(policy_version=fresh)])
    trainer.fit(TinyModule(), datamodule=datamodule(), ckpt_path=tmp_path / "epoch=0-step=3.ckpt")
    assert fresh() == 6


def test_leftovers_of_a_killed_save_are_ignored_then_pruned(tmp_path):
    fit(tmp_path, 6, save_top_k=1, save_last=True)
    referenced = torch.load(tmp_path / "last.ckpt", weights_only=True)["ReplayDataModule"]
    # What SIGKILL can leave behind: a complete dump whose checkpoint was never written
    # (for last.ckpt and for a new top-k file), and a dump interrupted before its rename.
    leftovers = [
        "last.ckpt.buffer-000000000000",
        "epoch=9-step=99.ckpt.buffer-111111111111",
        ".last.ckpt.buffer-222222222222.rbdata-tmp-abcd1234",
    ]
    for name in leftovers:
        (tmp_path / name).mkdir()
        (tmp_path / name / "state.pt").write_bytes(b"partial")
    _, dm, _ = fit(tmp_path, 9, ckpt_path="last", save_top_k=1, save_last=True)
    assert stored_ids(dm.buffer) == expected_ids(9)
    names = dumps_in(tmp_path)
    assert not set(leftovers) & set(names)
    assert referenced["buffer_dumps"] not in names  # replaced by the newer last.ckpt's dump
    assert len(names) == 2


def test_a_reference_without_a_trainer_is_an_error():
    dm = ReplayDataModule(prioritized)
    dm.setup("fit")
    with pytest.raises(RuntimeError, match="not loaded by a Trainer"):
        dm.load_state_dict({"buffer_dumps": "x.ckpt.buffer-1"})
    assert ReplayDataModule(prioritized, checkpoint_buffer=False).state_dict() == {}


# --------------------------------------------------------------------- SIGKILL
KILL_SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import test_lightning_checkpoint as t
    t.fit({root!r}, 10**6, every=1, save_top_k=1, save_last=True,
          dm_kwargs={{"offline_data": t.make_data(50_000), "buffer": t.big_buffer}})
    """
)


def big_buffer():
    return prioritized(capacity=100_000)


def test_sigkill_mid_fit_resumes_from_the_last_complete_checkpoint(tmp_path):
    root = tmp_path / "ckpts"
    script = tmp_path / "run.py"
    script.write_text(KILL_SCRIPT.format(tests=str(TESTS_DIR), root=str(root)))
    with open(tmp_path / "log.txt", "w") as log:
        proc = subprocess.Popen([sys.executable, str(script)], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 240
            while not (root / "last.ckpt").exists():
                assert proc.poll() is None, (tmp_path / "log.txt").read_text()
                assert time.monotonic() < deadline, "no checkpoint was written in time"
                time.sleep(0.05)
            # Checkpoints (two dumps of ~3 MB each) take most of every step: a random
            # moment often falls inside one.
            time.sleep(random.uniform(0.0, 1.5))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    restored = {}

    class Probe(L.Callback):
        def on_train_start(self, trainer, pl_module):
            restored["step"] = trainer.global_step
            restored["ids"] = stored_ids(trainer.datamodule.buffer)
            restored["write_count"] = trainer.datamodule.buffer.write_count

    ckpt = torch.load(root / "last.ckpt", weights_only=True)
    step = ckpt["global_step"]
    _, dm, trainer = fit(
        root,
        step + 2,
        ckpt_path="last",
        every=1,
        save_top_k=1,
        save_last=True,
        callbacks=[Probe()],
        dm_kwargs={"offline_data": make_data(50_000), "buffer": big_buffer},
    )
    assert restored["step"] == step >= 1
    offline = list(range(50_000))
    online = [1000 * s + i for s in range(1, step + 1) for i in range(ADD_PER_STEP)]
    assert restored["ids"] == sorted(offline + online)  # exactly what the checkpoint held
    assert restored["write_count"] == 50_000 + ADD_PER_STEP * step
    assert trainer.global_step == step + 2  # training completes
    assert len(dm.buffer) == 50_000 + ADD_PER_STEP * (step + 2)
    # Leftovers of the killed save are gone: one dump per checkpoint file, no other.
    owners = [d.split(".buffer-")[0] for d in dumps_in(root)]
    assert owners == sorted(p.name for p in root.glob("*.ckpt"))


class MixedModule(L.LightningModule):
    """Records each mixed batch (index, is_offline) and returns per-row priorities."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.batches: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        self.batches.append(torch.stack([batch["index"], batch["is_offline"].long()]))
        loss = self.layer(batch["obs"]).pow(2).mean()
        return {"loss": loss, "td_error": batch["obs"][:, 0] + 1.0 + self.global_step}

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def mixture_buffer():
    from tensordict import TensorDict

    from rbdata import OfflineToOnlineReplayBuffer, PrioritizedSampler, TensorDictRoundRobinWriter

    rb = OfflineToOnlineReplayBuffer(
        TensorDict({"obs": -torch.ones(40, 3)}, [40]),
        online_capacity=64,
        batch_size=8,
        offline_fraction=lambda n: max(0.25, 0.75 - 0.05 * n),
        generator=torch.Generator(),
        online_sampler=PrioritizedSampler(64, alpha=1.0, beta=0.5),
        online_writer=TensorDictRoundRobinWriter(track_generations=True),
    )
    rb.extend(TensorDict({"obs": torch.arange(30.0).unsqueeze(-1).expand(30, 3).clone()}, [30]))
    return rb


def fit_mixture(root, max_steps, ckpt_path=None):
    L.seed_everything(0, verbose=False)
    model = MixedModule()
    # prefetch=0: with priorities updated after every step, what a prefetch thread
    # draws ahead depends on timing, and an exact replay needs a fixed order
    dm = ReplayDataModule(mixture_buffer, batch_size=8, batches_per_epoch=5, prefetch=0, seed=3)
    trainer = quiet_trainer(
        max_steps,
        [
            ModelCheckpoint(dirpath=root, every_n_train_steps=4, save_last=True),
            ReplayCallback(priority_key="td_error"),
        ],
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt_path)
    return model, dm


def test_an_offline_to_online_buffer_trains_and_resumes_exactly_under_lightning(tmp_path):
    full, full_dm = fit_mixture(tmp_path / "full", 9)
    fit_mixture(tmp_path / "run", 4)
    resumed, resumed_dm = fit_mixture(tmp_path / "run", 9, ckpt_path="last")
    assert len(full.batches) == 9 and len(resumed.batches) == 5
    for a, b in zip(full.batches[4:], resumed.batches, strict=True):
        assert torch.equal(a, b)
    # the offline share follows the schedule, and the priorities reached the online part
    assert [int(b[1].sum()) for b in full.batches] == [6, 6, 5, 5, 4, 4, 4, 3, 3]
    for dm in (full_dm, resumed_dm):
        online = dm.buffer.online
        weights = online.sample(30, return_info=True)[1]["priority_weight"]
        assert weights.unique().numel() > 1  # not the uniform weights of untouched priorities
