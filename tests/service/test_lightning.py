"""Two DDP ranks (gloo, CPU) train on one Ray-backed buffer that a collector actor extends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")
L = pytest.importorskip(
    "lightning.pytorch", reason="the Lightning tests need the 'lightning' extra"
)

from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer  # noqa: E402
from rbdata.lightning import ReplayCallback, ReplayDataModule  # noqa: E402

OFFLINE, COLLECTED = 64, 40
_COLLECTORS: list[Any] = []  # the collector's task, in the process that built the buffer


def offline_data() -> TensorDict:
    return TensorDict(
        {"observation": torch.randn(OFFLINE, 4), "id": torch.arange(OFFLINE, dtype=torch.float32)},
        batch_size=[OFFLINE],
    )


class SharedBuffer:
    """The buffer factory: run by rank 0 only; starts a collector that extends the buffer."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __call__(self) -> Any:
        rb = TensorDictPrioritizedReplayBuffer(
            alpha=1.0,
            beta=0.5,
            storage=LazyTensorStorage(1000),
            batch_size=8,
            service_backend="ray",
            service_backend_options={
                "ray_init_config": {"address": self.address, "log_to_driver": False},
                "remote_config": {"num_cpus": 0},
            },
        )

        def collect(client: Any, batches: int) -> int:
            import torch
            from tensordict import TensorDict

            for i in range(batches):
                client.extend(
                    TensorDict(
                        {"observation": torch.randn(8, 4), "id": torch.full((8,), 1000.0 + i)}, [8]
                    )
                )
            return len(client)

        _COLLECTORS.append(ray.remote(num_cpus=0)(collect).remote(rb.client(), COLLECTED // 8))
        return rb


class Learner(L.LightningModule):
    def __init__(self, out_dir: str) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
        self.out_dir = out_dir
        self.ids: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> dict[str, torch.Tensor]:
        self.ids += batch["id"].tolist()
        loss = self.net(batch["observation"]).pow(2).mean()
        return {
            "loss": loss,
            "td_error": torch.full((batch.batch_size[0],), 10.0 * (1 + self.global_rank)),
        }

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def on_train_end(self) -> None:
        buffer = self.trainer.datamodule.buffer
        self.trainer.strategy.barrier()  # every rank's priority updates are in
        out: dict[str, Any] = {"ids": self.ids, "kind": type(buffer).__name__}
        if self.global_rank == 0:
            out["collected"] = ray.get(_COLLECTORS.pop())
            out["size"] = len(buffer)
            out["leaves"] = buffer.state_dict()["_sampler"]["leaves"][: len(buffer)].tolist()
        Path(self.out_dir, f"rank{self.global_rank}.json").write_text(json.dumps(out))
        self.trainer.strategy.barrier()  # rank 0 keeps the buffer alive until rank 1 is done


@pytest.mark.parametrize("share_across_ranks", [False, True])
def test_two_ddp_ranks_share_one_buffer_fed_by_a_collector(
    ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, share_across_ranks: bool
) -> None:
    """With or without ``share_across_ranks``: a Ray-backed buffer is shared through Ray."""
    monkeypatch.delenv("MASTER_PORT", raising=False)
    address = ray_cluster.get_runtime_context().gcs_address
    datamodule = ReplayDataModule(
        SharedBuffer(address),
        batches_per_epoch=6,
        prefetch=2,
        offline_data=offline_data(),
        share_across_ranks=share_across_ranks,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp_spawn",
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[ReplayCallback(priority_key="td_error", log_stats=False)],
    )
    trainer.fit(Learner(str(tmp_path)), datamodule=datamodule)
    rank0 = json.loads((tmp_path / "rank0.json").read_text())
    rank1 = json.loads((tmp_path / "rank1.json").read_text())
    # rank 0 built the owner; rank 1 got a client; the offline data was loaded once
    assert (
        rank0["kind"] == "TensorDictPrioritizedReplayBuffer" and rank1["kind"] == "RayBufferClient"
    )
    assert rank0["collected"] == rank0["size"] == OFFLINE + COLLECTED
    assert len(rank0["ids"]) == len(rank1["ids"]) == 2 * 6 * 8
    # priority updates from both ranks reached the one buffer
    leaves = torch.tensor(rank0["leaves"])
    assert (
        torch.isclose(leaves, torch.tensor(10.0)).any()
        and torch.isclose(leaves, torch.tensor(20.0)).any()
    )
    # the checkpoint saved the owner's buffer once
    checkpoints = list(tmp_path.rglob("*.ckpt"))
    dumps = [p for p in tmp_path.rglob("*.buffer-*") if p.is_dir()]
    assert len(checkpoints) == 1 and len(dumps) == 1


def test_the_ray_collectors_example_runs(
    ray_cluster: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("gymnasium", reason="the example needs the 'examples' extra")
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "examples" / "ray_collectors.py"
    spec = importlib.util.spec_from_file_location("_example_ray_collectors", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    threads = torch.get_num_threads()
    try:
        stats = example.main(["--collectors", "1", "--steps", "20", "--learning-starts", "64"])
    finally:
        torch.set_num_threads(threads)
    assert stats["collector_frames_per_s"] > 0 and stats["learner_steps_per_s"] > 0
    assert stats["policy_version"] == 20 and stats["buffer_size"] >= 64
    assert "frames/s written" in capsys.readouterr().out
    assert ray_cluster.is_initialized()  # the example leaves the caller's Ray running
