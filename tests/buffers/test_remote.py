"""torchrl's remote names: RayReplayBuffer (one Ray start) and RemoteTensorDictReplayBuffer."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    RayReplayBuffer,
    RemoteTensorDictReplayBuffer,
    ReplayBuffer,
    ServiceUnavailableError,
    TensorDictReplayBuffer,
)


def test_remote_tensordict_replay_buffer_is_a_local_tensordict_buffer() -> None:
    rb = RemoteTensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=3)
    assert isinstance(rb, TensorDictReplayBuffer) and rb.service_backend == "direct"
    rb.extend(TensorDict({"obs": torch.arange(5)}, [5]))
    assert sorted(rb.sample().keys()) == ["index", "obs"]


def test_ray_replay_buffer_refuses_a_class_that_is_no_buffer() -> None:
    with pytest.raises(TypeError, match="replay_buffer_cls"):
        RayReplayBuffer(replay_buffer_cls=dict, storage=LazyTensorStorage(4))


def test_ray_replay_buffer_hosts_the_class_and_stops_cleanly() -> None:
    ray = pytest.importorskip("ray", reason="RayReplayBuffer needs the 'ray' extra")
    assert not ray.is_initialized()
    init = {"num_cpus": 1, "include_dashboard": False, "log_to_driver": False}
    rb = RayReplayBuffer(
        storage=LazyTensorStorage(100),
        batch_size=4,
        ray_init_config=init,
        remote_config={"num_cpus": 0},
    )
    td = RayReplayBuffer(
        replay_buffer_cls=TensorDictReplayBuffer, storage=LazyTensorStorage(100), batch_size=4
    )
    try:
        assert isinstance(rb, RayReplayBuffer) and isinstance(rb, ReplayBuffer)
        assert isinstance(td, RayReplayBuffer) and isinstance(td, TensorDictReplayBuffer)
        assert rb.service_backend == "ray" and rb.transport_kind == "ray"
        assert td.transport_kind == "ray"
        with pytest.raises(ValueError, match="transport_kind must be"):
            rb.transport_kind = "pipe"
        assert rb.transport_kind == "ray"
        assert len(rb.clients(2)) == 2
        rb.extend(torch.arange(8))
        assert rb.sample().shape == (4,) and len(rb) == 8
        td.extend(TensorDict({"obs": torch.arange(8)}, [8]))
        assert td.sample()["index"].shape == (4,)
    finally:
        td.shutdown()
        rb.shutdown()
    assert not ray.is_initialized()  # the buffer started Ray: it stopped it
    with pytest.raises(ServiceUnavailableError, match="was shut down"):
        rb.extend(torch.arange(3))  # not a new local Ray and its raw "Failed to submit task"
    assert not ray.is_initialized()
