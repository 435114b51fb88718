"""transport="distributed": a client whose payloads travel over a gloo process group."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from service_data import transitions

from rbdata import (
    LazyTensorStorage,
    ReplayDataset,
    TensorDictReplayBuffer,
)
from rbdata.sharing.slot_ring import SHM_DIR

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

OPTIONS = {"remote_config": {"num_cpus": 0}}  # actors reserve no CPU of the 2-CPU cluster


def test_the_gloo_transport_between_two_local_processes(ray_cluster: Any) -> None:
    before = {p.name for p in SHM_DIR.glob("rbdata-*")}
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        batch_size=4,
        service_backend="ray",
        service_backend_options=OPTIONS,
        transport="distributed",
        transport_options={"backend": "gloo"},
    )
    try:
        assert rb.extend(transitions(8)).tolist() == list(range(8))  # bound on first use
        batch = rb.sample()
        assert batch["obs"].shape == (4, 1) and batch["pixels"].dtype == torch.uint8
        assert rb.stats() == {"size": 8, "write_count": 8}  # what distributed clients report
        with pytest.raises(ValueError, match="batch_size must be"):
            rb.sample(0)
        assert rb.sample(2)["obs"].shape == (2, 1)  # the channel is still in step

        def extend_in_task(client: Any) -> dict[str, int]:
            import torch
            from tensordict import TensorDict

            data = TensorDict(
                {
                    "obs": torch.ones(3, 1),
                    "pixels": torch.zeros(3, 64, 64, dtype=torch.uint8),
                    "policy_version": torch.zeros(3, dtype=torch.long),
                },
                [3],
            )
            client.extend(data)
            return client.stats()

        task = ray.remote(num_cpus=0)(extend_in_task)
        assert ray.get(task.remote(rb.client())) == {"size": 11, "write_count": 11}
        with ReplayDataset(rb.client(), num_batches=3) as ds:
            assert [b["obs"].shape[0] for b in ds] == [4, 4, 4]
    finally:
        rb.shutdown()
    assert not {p.name for p in SHM_DIR.glob("rbdata-*")} - before  # nothing left behind


def test_bad_transport_options_are_refused(ray_cluster: Any) -> None:
    with pytest.raises(ValueError, match="backend"):
        TensorDictReplayBuffer(
            storage=LazyTensorStorage(10),
            service_backend="ray",
            service_backend_options=OPTIONS,
            transport="distributed",
            transport_options={"backend": "mpi"},
        )
