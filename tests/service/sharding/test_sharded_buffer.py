"""ShardedReplayBuffer: N owner actors, one logical buffer, exact global sampling."""

from __future__ import annotations

import math
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, PrioritizedReplayBuffer, ReplayBuffer, TensorDictReplayBuffer
from rbdata.service.sharding import sampling
from rbdata.service.sharding.buffer import ShardedReplayBuffer

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray", reason="the Ray service tests need the 'ray' extra")

CONFIG = {"num_cpus": 0}
SHARDS, CAP = 4, 64
DRAWS = 100_000


def chi2_critical(df: int, z: float = 7.0) -> float:
    """Wilson-Hilferty: the chi-square quantile at ``z`` standard deviations (p ~ 1e-12)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(observed: torch.Tensor, expected: torch.Tensor) -> float:
    keep = expected > 0
    return float(((observed[keep] - expected[keep]) ** 2 / expected[keep]).sum())


def two_sample_chi2(a: torch.Tensor, b: torch.Tensor) -> float:
    keep = (a + b) > 0
    a, b = a[keep].double(), b[keep].double()
    ka, kb = math.sqrt(b.sum() / a.sum()), math.sqrt(a.sum() / b.sum())
    return float(((ka * a - kb * b) ** 2 / (a + b)).sum())


def priorities() -> torch.Tensor:
    index = torch.arange(SHARDS * CAP)
    return (1 + index % 17 + 4 * (index // CAP)).double()  # the shards' masses differ


def prototype(cap: int = CAP) -> PrioritizedReplayBuffer:
    return PrioritizedReplayBuffer(alpha=1.0, beta=0.5, eps=0.0, storage=LazyTensorStorage(cap))


@pytest.fixture(scope="module")
def sharded(ray_cluster: Any) -> Any:
    rb = ShardedReplayBuffer(
        prototype(), SHARDS, routing="round_robin", seed=0, remote_config=CONFIG
    )
    written = torch.cat([rb.extend(torch.arange(CAP) + s * CAP) for s in range(SHARDS)])
    rb.update_priority(written, priorities()[written])
    stored = torch.empty(SHARDS * CAP, dtype=torch.long)
    stored[written] = torch.arange(SHARDS * CAP)  # what each sharded index holds
    yield rb, written, stored
    rb.shutdown()


def test_prioritized_draws_follow_the_global_priority_mass(sharded: Any) -> None:
    rb, written, stored = sharded
    assert sorted(written.tolist()) == list(range(SHARDS * CAP))
    assert rb.capacity == SHARDS * CAP and len(rb) == SHARDS * CAP
    one = prototype(SHARDS * CAP)
    one.set_rng(torch.Generator().manual_seed(1))
    one.extend(stored)
    one.update_priority(torch.arange(SHARDS * CAP), priorities())
    counts = {name: torch.zeros(SHARDS * CAP, dtype=torch.float64) for name in ("sharded", "one")}
    weights: dict[str, torch.Tensor] = {}
    for _ in range(DRAWS // 5000):
        for name, buffer in (("sharded", rb), ("one", one)):
            data, info = buffer.sample(5000, return_info=True)
            assert torch.equal(data, stored[info["index"]])
            counts[name] += torch.bincount(info["index"], minlength=SHARDS * CAP).double()
            weights.setdefault(name, torch.zeros(SHARDS * CAP, dtype=torch.float64))
            weights[name][info["index"]] = info["priority_weight"].double()
    expected = priorities() / priorities().sum() * DRAWS
    limit = chi2_critical(SHARDS * CAP - 1)
    assert chi2(counts["sharded"], expected) < limit
    assert chi2(counts["one"], expected) < limit
    assert two_sample_chi2(counts["sharded"], counts["one"]) < limit
    # a draw that gave each shard a quarter of the batch would be far off
    per_shard = priorities().reshape(SHARDS, CAP)
    even = (per_shard / per_shard.sum(1, keepdim=True) / SHARDS).reshape(-1) * DRAWS
    assert chi2(even, expected) > 10 * limit
    # importance weights normalised by the global smallest priority, as in one buffer
    seen = (weights["sharded"] > 0) & (weights["one"] > 0)
    torch.testing.assert_close(weights["sharded"][seen], weights["one"][seen])
    torch.testing.assert_close(weights["one"][seen], (priorities() / 1.0)[seen] ** -0.5)


def test_priority_updates_reach_the_owning_shard(sharded: Any) -> None:
    rb, _, _ = sharded
    target = 3 * CAP + 5  # shard 3, local 5
    rb.update_priority(torch.arange(SHARDS * CAP), 0.0)
    rb.update_priority(torch.tensor([target]), 1.0)
    _, info = rb.sample(64, return_info=True)
    assert info["index"].unique().tolist() == [target]
    with pytest.raises(ValueError, match="index must lie in"):
        rb.update_priority(torch.tensor([SHARDS * CAP]), 1.0)
    rb.update_priority(torch.arange(SHARDS * CAP), priorities())


def test_state_round_trips_across_shards(sharded: Any, tmp_path: Path) -> None:
    rb, _, stored = sharded
    before = rb.state_dict()
    assert before["manifest"]["shards"] == SHARDS and len(before["shards"]) == SHARDS
    stats = rb.stats()
    assert stats["size"] == SHARDS * CAP and stats["shards_alive"] == SHARDS
    assert [s["size"] for s in stats["shards"]] == [CAP] * SHARDS
    rb.dumps(tmp_path / "dump")
    assert sorted(p.name for p in (tmp_path / "dump").iterdir()) == [
        "shard-000",
        "shard-001",
        "shard-002",
        "shard-003",
        "sharded.json",
    ]
    other = ShardedReplayBuffer(prototype(), SHARDS, remote_config=CONFIG)
    try:
        other.loads(tmp_path / "dump")
        assert len(other) == SHARDS * CAP
        assert torch.equal(other._shards[2][:CAP], stored[2 * CAP : 3 * CAP])
        other.load_state_dict(before)
        assert len(other) == SHARDS * CAP
    finally:
        other.shutdown()
    small = ShardedReplayBuffer(prototype(), 2, remote_config=CONFIG)
    try:
        with pytest.raises(ValueError, match="must describe 2 shards"):
            small.loads(tmp_path / "dump")
        with pytest.raises(ValueError, match="no sharded buffer manifest"):
            small.loads(tmp_path)
    finally:
        small.shutdown()


def test_uniform_shards_sample_in_proportion_to_their_sizes(ray_cluster: Any) -> None:
    rb = ShardedReplayBuffer(
        ReplayBuffer(storage=LazyTensorStorage(100)),
        2,
        routing="round_robin",
        seed=0,
        remote_config=CONFIG,
    )
    try:
        big = int(rb.extend(torch.arange(90))[0]) // 100
        assert rb.extend(torch.arange(10))[0] // 100 == 1 - big  # round robin: the other shard
        assert len(rb) == 100
        expected = torch.zeros(2, dtype=torch.float64)
        expected[big], expected[1 - big] = 18000.0, 2000.0
        counts = torch.zeros(2)
        for _ in range(20):
            _, info = rb.sample(1000, return_info=True)
            counts += torch.bincount(info["index"] // 100, minlength=2)
        assert chi2(counts.double(), expected) < chi2_critical(1)
    finally:
        rb.shutdown()


def test_sticky_clients_pickle_and_write_to_their_own_shard(ray_cluster: Any) -> None:
    rb = ShardedReplayBuffer(
        ReplayBuffer(storage=LazyTensorStorage(50), batch_size=8), 2, remote_config=CONFIG
    )
    try:
        client = pickle.loads(pickle.dumps(rb.client()))
        first = client.extend(torch.arange(5)) // 50
        assert (client.extend(torch.arange(5)) // 50).tolist() == first.tolist()
        assert len(rb) == 10 and rb.sample().shape == torch.Size([8])
    finally:
        rb.shutdown()


# ------------------------------------------------------- service_backend_options shards
def test_the_shards_option_builds_a_sharded_ray_backed_buffer(ray_cluster: Any) -> None:
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(50),
        batch_size=8,
        service_backend="ray",
        service_backend_options={"shards": 2, "remote_config": CONFIG},
    )
    try:
        assert isinstance(rb, TensorDictReplayBuffer) and rb.service_backend == "ray"
        assert type(rb._remote).__name__ == "ShardedService" and rb.is_alive
        data = TensorDict({"obs": torch.arange(10.0)}, [10])
        index = rb.extend(data)  # sticky: the buffer's own writes go to one shard
        assert len({int(i) // 50 for i in index}) == 1
        client = pickle.loads(pickle.dumps(rb.client()))
        client.extend(data)
        stats = rb.stats()
        assert len(rb) == 20 and rb.write_count == 20
        assert stats["capacity"] == 100 and stats["shards_alive"] == 2
        batch = rb.sample()
        assert batch.batch_size == torch.Size([8]) and bool((batch["index"] < 100).all())
        with pytest.raises(NotImplementedError, match=r"rb.query is not available on a sharded"):
            rb.query(lambda trajectory: True)
        with pytest.raises(ValueError, match="takes no prefetch, write_behind or coalesce"):
            rb.client(write_behind=2)
    finally:
        rb.shutdown()
    assert not rb.is_alive
    with pytest.raises(RuntimeError, match="was shut down"):
        rb.client()


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"shards": 0}, ValueError, r"\['shards'\] must be an int >= 1 \(1: unsharded\), got 0"),
        ({"shards": "2"}, TypeError, r"\['shards'\] must be an int, got str"),
        ({"shards": True}, TypeError, r"\['shards'\] must be an int, got bool"),
        ({"shards": 2, "coalesce": 4}, ValueError, r"shards'\]=2 does not combine with"),
    ],
)
def test_bad_shards_options_are_refused(
    ray_cluster: Any, options: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        ReplayBuffer(service_backend="ray", service_backend_options={**options})


def test_one_shard_is_the_unsharded_service(ray_cluster: Any) -> None:
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10),
        service_backend="ray",
        service_backend_options={"shards": 1, "remote_config": CONFIG},
    )
    try:
        assert type(rb._remote).__name__ == "RayService"
        assert rb.extend(torch.arange(3)).tolist() == [0, 1, 2]
    finally:
        rb.shutdown()


def _two_filled_shards() -> ShardedReplayBuffer:
    rb = ShardedReplayBuffer(
        ReplayBuffer(storage=LazyTensorStorage(20)),
        2,
        routing="round_robin",
        seed=0,
        remote_config=CONFIG,
    )
    rb.extend(torch.arange(10))
    rb.extend(torch.arange(10, 20))
    return rb


def test_a_draw_retries_the_part_of_a_shard_emptied_after_its_mass_was_read(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rb = _two_filled_shards()
    try:
        stale = sampling.read_masses(rb._shards)  # both shards hold 10 items
        monkeypatch.setattr(sampling, "read_masses", lambda shards: list(stale))
        rb._shards[0].empty()
        _, info = rb.sample(64, return_info=True)
        assert info["index"].shape == (64,) and bool((info["index"] // 20 == 1).all())
        rb._shards[1].empty()
        with pytest.raises(RuntimeError, match="every shard is empty"):
            rb.sample(8)
    finally:
        rb.shutdown()


def test_a_draw_retries_the_part_of_a_shard_that_died(
    ray_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    rb = _two_filled_shards()
    try:
        stale = sampling.read_masses(rb._shards)
        monkeypatch.setattr(sampling, "read_masses", lambda shards: list(stale))
        ray.kill(rb._shards[1].actor(), no_restart=True)
        data, info = rb.sample(64, return_info=True)
        assert bool((info["index"] // 20 == 0).all()) and bool((data < 20).all())
    finally:
        rb.shutdown()
