"""Tests of OfflineToOnlineReplayBuffer (rbdata/mixture.py)."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict
from torch.utils.data import DataLoader

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    PolicyAgeFilter,
    PolicyVersion,
    PrioritizedSampler,
    ReplayDataset,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)

N_OFFLINE = 50


def _data(n: int, value: float, start: int = 0) -> TensorDict:
    """Transitions whose entries tell where they come from (value) and which one they are (id)."""
    return TensorDict(
        {
            "observation": torch.full((n, 3), value),
            "action": torch.arange(start, start + n),
            "next": {
                "observation": torch.full((n, 3), value + 0.5),
                "reward": torch.full((n, 1), value),
                "done": torch.zeros(n, 1, dtype=torch.bool),
            },
        },
        batch_size=[n],
    )


def _mixture(fraction=0.5, n_online: int = 20, seed: int | None = 0, **kwargs):
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    rb = OfflineToOnlineReplayBuffer(
        _data(N_OFFLINE, 0.0),
        online_capacity=100,
        offline_fraction=fraction,
        generator=gen,
        **kwargs,
    )
    if n_online:
        rb.extend(_data(n_online, 1.0, start=1000))
    return rb


def _check_rows(batch: TensorDict) -> None:
    """Every row is intact and tagged with the part it comes from."""
    offline = batch["is_offline"]
    assert batch["is_offline"].dtype == torch.bool
    assert torch.equal(batch["observation"][:, 0], (~offline).float())
    assert torch.equal(batch["next", "observation"][:, 0], (~offline).float() + 0.5)
    assert torch.equal(batch["next", "reward"][:, 0], (~offline).float())
    # action holds the item id: offline ids 0..49, online ids 1000 + online index
    assert torch.equal(batch["action"][offline], batch["index"][offline])
    assert torch.equal(batch["action"][~offline], batch["index"][~offline] + 1000)
    # offline rows come first
    n_off = int(offline.sum())
    assert bool(offline[:n_off].all()) and not bool(offline[n_off:].any())


@pytest.mark.parametrize(
    ("fraction", "batch_size", "expected"),
    [
        (0.0, 16, 0),
        (1.0, 16, 16),
        (0.5, 16, 8),
        (0.25, 10, 2),
        (0.3, 10, 3),
        (0.5, 7, 4),
        (0.1, 3, 0),
        (0.9, 5, 4),
    ],
)
def test_exact_offline_count(fraction: float, batch_size: int, expected: int) -> None:
    rb = _mixture(fraction)
    for _ in range(3):
        batch = rb.sample(batch_size)
        assert batch.batch_size == torch.Size([batch_size])
        assert int(batch["is_offline"].sum()) == expected == round(fraction * batch_size)
        _check_rows(batch)


@given(fraction=st.floats(0.0, 1.0), batch_size=st.integers(1, 64))
def test_exact_offline_count_property(fraction: float, batch_size: int) -> None:
    rb = _mixture(fraction, seed=1)
    batch = rb.sample(batch_size)
    assert batch.shape[0] == batch_size
    assert int(batch["is_offline"].sum()) == round(fraction * batch_size)
    _check_rows(batch)


@pytest.mark.parametrize("fraction", [0.0, 0.4, 1.0])
def test_empty_online_part_gives_all_offline(fraction: float) -> None:
    rb = _mixture(fraction, n_online=0, batch_size=12)
    batch = rb.sample()
    assert bool(batch["is_offline"].all()) and batch.shape[0] == 12
    _check_rows(batch)
    rb.extend(_data(5, 1.0, start=1000))
    assert int(rb.sample()["is_offline"].sum()) == round(fraction * 12)


def test_schedule_anneals_and_gets_batch_count() -> None:
    seen: list[int] = []

    def schedule(n: int) -> float:
        seen.append(n)
        return max(0.1, 0.5 - 0.1 * n)

    rb = _mixture(schedule, batch_size=10)
    counts = [int(rb.sample()["is_offline"].sum()) for _ in range(6)]
    assert counts == [5, 4, 3, 2, 1, 1]
    assert seen == list(range(6))
    assert rb.batches_sampled == 6
    assert rb.offline_fraction == pytest.approx(0.1)
    assert rb.stats()["offline_fraction"] == pytest.approx(0.1)


@pytest.mark.parametrize("bad", [1.5, -0.1, math.nan, math.inf])
def test_schedule_value_out_of_range_raises_and_changes_nothing(bad: float) -> None:
    rb = _mixture(lambda n: 0.5 if n < 2 else bad, batch_size=8)
    rb.sample(), rb.sample()
    state = rb.state_dict()
    with pytest.raises(ValueError, match=rf"batch 2.*\[0, 1\].*{bad}"):
        rb.sample()
    assert rb.batches_sampled == 2
    assert torch.equal(rb.state_dict()["online"]["_rng"], state["online"]["_rng"])
    with pytest.raises(ValueError, match=str(bad)):
        rb.stats()


@pytest.mark.parametrize("bad", ["0.5", None, True, torch.tensor([0.5, 0.5])])
def test_schedule_value_of_wrong_type_raises(bad: object) -> None:
    rb = _mixture(lambda n: bad, batch_size=8)
    with pytest.raises(TypeError, match="offline_fraction schedule"):
        rb.sample()
    assert rb.batches_sampled == 0


def test_constant_fraction_validated_at_construction() -> None:
    with pytest.raises(ValueError, match="offline_fraction.*1.2"):
        _mixture(1.2)
    with pytest.raises(ValueError, match="nan"):
        _mixture(math.nan)
    with pytest.raises(TypeError, match="offline_fraction"):
        _mixture("half")


def test_constructor_errors() -> None:
    td = _data(10, 0.0)
    with pytest.raises(ValueError, match="exactly one of online_storage and online_capacity.*both"):
        OfflineToOnlineReplayBuffer(td, LazyTensorStorage(10), 10)
    with pytest.raises(ValueError, match="neither"):
        OfflineToOnlineReplayBuffer(td)
    with pytest.raises(ValueError, match="online_capacity.*-3"):
        OfflineToOnlineReplayBuffer(td, online_capacity=-3)
    with pytest.raises(TypeError, match="online_storage must be a Storage"):
        OfflineToOnlineReplayBuffer(td, online_storage=[1, 2])
    with pytest.raises(TypeError, match="offline must be a TensorDict or a ReplayBuffer"):
        OfflineToOnlineReplayBuffer({"a": torch.zeros(3)}, online_capacity=10)
    with pytest.raises(ValueError, match="non-empty"):
        OfflineToOnlineReplayBuffer(td[:0], online_capacity=10)
    with pytest.raises(ValueError, match="batch_size.*0"):
        OfflineToOnlineReplayBuffer(td, online_capacity=10, batch_size=0)
    with pytest.raises(TypeError, match="generator"):
        OfflineToOnlineReplayBuffer(td, online_capacity=10, generator=0)


def test_sample_batch_size_errors() -> None:
    rb = _mixture()
    with pytest.raises(ValueError, match="batch_size not specified"):
        rb.sample()
    with pytest.raises(ValueError, match="batch_size must be >= 1, got -1"):
        rb.sample(-1)
    assert rb.batches_sampled == 0


def test_keys_are_kept_and_generations_and_weights_filled() -> None:
    rb = _mixture(
        0.5,
        batch_size=10,
        online_writer=TensorDictRoundRobinWriter(track_generations=True),
        online_sampler=PrioritizedSampler(100, alpha=0.7, beta=0.5),
    )
    batch, info = rb.sample(return_info=True)
    keys = set(batch.keys(True, True))
    assert keys == {
        "observation",
        "action",
        ("next", "observation"),
        ("next", "reward"),
        ("next", "done"),
        "index",
        "index_generation",
        "priority_weight",
        "is_offline",
    }
    off = batch["is_offline"]
    assert torch.equal(batch["index_generation"][off], torch.zeros(5, dtype=torch.long))  # filled
    assert bool((batch["index_generation"][~off] == 0).all())  # each online slot written once
    assert torch.equal(
        batch["priority_weight"][off], torch.ones(5, dtype=batch["priority_weight"].dtype)
    )
    assert set(info) == {"index", "index_generation", "priority_weight", "is_offline"}
    assert torch.equal(info["index"], batch["index"])
    _check_rows(batch)


def test_extend_checks_layout_before_writing() -> None:
    rb = _mixture()
    before = (len(rb), rb.write_count)
    good = _data(4, 1.0)
    with pytest.raises(KeyError, match=r"missing \[\('next', 'reward'\)\]"):
        rb.extend(good.exclude(("next", "reward")))
    with pytest.raises(KeyError, match=r"unexpected \[\('extra',\)\]"):
        rb.extend(good.clone().set("extra", torch.zeros(4)))
    bad_shape = good.clone()
    bad_shape["observation"] = torch.zeros(4, 5)
    with pytest.raises(ValueError, match=r"observation.*\[5\].*\[3\]"):
        rb.extend(bad_shape)
    bad_dtype = good.clone()
    bad_dtype["observation"] = torch.zeros(4, 3, dtype=torch.float64)
    with pytest.raises(TypeError, match="float64.*float32"):
        rb.extend(bad_dtype)
    with pytest.raises(TypeError, match="must be a TensorDict"):
        rb.extend({"observation": torch.zeros(4, 3)})
    with pytest.raises(ValueError, match="per-item shape"):
        rb.add(good)  # a batch is not one transition
    assert (len(rb), rb.write_count) == before


def test_extend_and_add_write_online_and_accept_sampled_batches() -> None:
    rb = _mixture(0.5, n_online=0, batch_size=8)
    assert len(rb) == N_OFFLINE
    index = rb.add(_data(1, 1.0, start=1000)[0])
    assert index == 0 and len(rb) == N_OFFLINE + 1 and len(rb.online) == 1
    rb.extend(_data(9, 1.0, start=1001))
    batch = rb.sample()
    rb.extend(batch[~batch["is_offline"]])  # sample entries are dropped on the way in
    assert len(rb.online) == 10 + 4 and rb.write_count == 14
    assert rb.storage is rb.online.storage and rb.sampler is rb.online.sampler
    assert rb.writer is rb.online.writer
    with pytest.raises(RuntimeError, match="read-only"):
        rb.offline.extend(_data(2, 0.0))


def test_offline_given_as_buffer() -> None:
    offline = TensorDictReplayBuffer(storage=LazyTensorStorage(N_OFFLINE))
    offline.extend(_data(N_OFFLINE, 0.0))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, offline_fraction=0.25)
    assert rb.offline is offline
    rb.extend(_data(20, 1.0, start=1000))
    batch = rb.sample(20)
    assert int(batch["is_offline"].sum()) == 5
    _check_rows(batch)


def test_empty_offline_buffer_raises() -> None:
    offline = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb = OfflineToOnlineReplayBuffer(offline, online_capacity=100, offline_fraction=0.5)
    rb.extend(_data(20, 1.0, start=1000))
    with pytest.raises(RuntimeError, match="offline buffer is empty"):
        rb.sample(4)
    rb_online_only = OfflineToOnlineReplayBuffer(offline, online_capacity=10, offline_fraction=0.0)
    rb_online_only.extend(_data(5, 1.0, start=1000))
    assert not bool(rb_online_only.sample(4)["is_offline"].any())


def test_same_seed_same_samples() -> None:
    a, b = _mixture(0.3, seed=7), _mixture(0.3, seed=7)
    for _ in range(5):
        assert (a.sample(16) == b.sample(16)).all()
    c = _mixture(0.3, seed=8)
    assert not all(bool((a.sample(16) == c.sample(16)).all()) for _ in range(3))


def test_state_dict_round_trip(tmp_path) -> None:
    rb = _mixture(lambda n: max(0.0, 0.8 - 0.1 * n), batch_size=10)
    for _ in range(3):
        rb.sample()
    path = tmp_path / "state.pt"
    torch.save(rb.state_dict(), path)
    expected = [rb.sample() for _ in range(4)]
    fresh = OfflineToOnlineReplayBuffer(
        _data(N_OFFLINE, 0.0),
        online_capacity=100,
        offline_fraction=lambda n: max(0.0, 0.8 - 0.1 * n),
        batch_size=10,
        generator=torch.Generator().manual_seed(123),
    )
    fresh.load_state_dict(torch.load(path, weights_only=True))
    assert fresh.batches_sampled == 3 and len(fresh.online) == 20
    got = [fresh.sample() for _ in range(4)]
    for exp, res in zip(expected, got, strict=True):
        assert (exp == res).all()
    assert [int(b["is_offline"].sum()) for b in got] == [5, 4, 3, 2]


def test_state_dict_leaves_offline_content_out() -> None:
    sd = _mixture().state_dict()
    assert "_storage" not in sd["offline"] and "_storage" in sd["online"]


def test_load_state_dict_error_changes_nothing() -> None:
    rb = _mixture(batch_size=4)
    rb.sample()
    sd = rb.state_dict()
    sd["batches_sampled"] = -1
    with pytest.raises(ValueError, match="batches_sampled.*-1"):
        rb.load_state_dict(sd)
    assert rb.batches_sampled == 1 and len(rb.online) == 20


def test_dumps_loads_online_part(tmp_path) -> None:
    rb = _mixture()
    rb.dumps(tmp_path / "online")
    other = _mixture(n_online=0)
    other.loads(tmp_path / "online")
    assert len(other.online) == 20
    assert torch.equal(other.online[:]["action"], rb.online[:]["action"])


def test_stats_and_empty() -> None:
    rb = _mixture(0.25, batch_size=4)
    rb.sample()
    stats = rb.stats()
    assert stats["size"] == N_OFFLINE + 20 == len(rb)
    assert stats["offline_size"] == N_OFFLINE and stats["online_size"] == 20
    assert stats["online_capacity"] == 100 and stats["write_count"] == 20
    assert stats["offline_fraction"] == 0.25 and stats["batches_sampled"] == 1
    rb.empty()
    assert len(rb) == N_OFFLINE and rb.stats()["online_size"] == 0
    assert bool(rb.sample()["is_offline"].all())


def test_iteration_and_context_manager() -> None:
    with _mixture(0.5, batch_size=6) as rb:
        batches = [b for _, b in zip(range(3), rb, strict=False)]
    assert [int(b["is_offline"].sum()) for b in batches] == [3, 3, 3]
    with pytest.raises(ValueError, match="batch_size not specified"):
        next(iter(_mixture()))


def test_concurrent_collector_and_sampler() -> None:
    rb = _mixture(0.5, n_online=0, batch_size=32)
    errors: list[BaseException] = []

    def collect() -> None:
        try:
            for i in range(50):
                rb.extend(_data(2, 1.0, start=1000 + 2 * i))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    thread = threading.Thread(target=collect)
    thread.start()
    for _ in range(100):
        batch = rb.sample()
        assert batch.shape[0] == 32
        n_off = int(batch["is_offline"].sum())
        assert n_off in (16, 32)
        _check_rows(batch)
    thread.join()
    assert not errors and len(rb.online) == 100


# ------------------------------------------------------------ served by a ReplayDataset


def _draws(batches) -> list[tuple[list[int], list[bool]]]:
    for batch in batches:
        _check_rows(batch)
    return [(b["index"].tolist(), b["is_offline"].tolist()) for b in batches]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_replay_dataset_serves_mixed_batches_through_a_dataloader(prefetch):
    rb = _mixture(0.25, batch_size=8)
    with ReplayDataset(rb, num_batches=6, prefetch=prefetch) as ds:
        batches = list(DataLoader(ds, batch_size=None))
        assert rb.stats()["loader_sampled_batches"] == 6
    assert len(batches) == 6 and rb.batches_sampled == 6
    for batch in batches:
        assert batch.batch_size == torch.Size([8])
        assert int(batch["is_offline"].sum()) == 2
    _draws(batches)
    # the same seed gives the same batches as sampling the buffer directly
    direct = _mixture(0.25, batch_size=8)
    assert _draws(batches) == _draws([direct.sample() for _ in range(6)])


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_mixture_loader_resumes_mid_pass_schedule_included(prefetch, tmp_path):
    def schedule(n: int) -> float:
        return max(0.0, 0.75 - 0.125 * n)

    rb = _mixture(schedule, batch_size=8, seed=0)
    ds = ReplayDataset(rb, num_batches=7, prefetch=prefetch)
    loader = ds.dataloader()
    it = iter(loader)
    head = [next(it) for _ in range(3)]
    torch.save(loader.state_dict(), tmp_path / "loader.pt")
    buffer_state = rb.state_dict()
    tail = list(it)
    ds.close()
    counts = [int(b["is_offline"].sum()) for b in head + tail]
    assert counts == [round(schedule(i) * 8) for i in range(7)]

    rb2 = _mixture(schedule, batch_size=8, seed=123, n_online=0)
    rb2.load_state_dict(buffer_state)
    ds2 = ReplayDataset(rb2, num_batches=7, prefetch=prefetch)
    loader2 = ds2.dataloader()
    loader2.load_state_dict(torch.load(tmp_path / "loader.pt", weights_only=True))
    assert _draws(list(loader2)) == _draws(tail)
    ds2.close()


def test_prefetched_online_rows_are_rechecked_against_the_policy_age_filter():
    version = PolicyVersion()
    offline = _data(N_OFFLINE, 0.0)
    offline["policy_version"] = torch.zeros(N_OFFLINE, dtype=torch.long)
    rb = OfflineToOnlineReplayBuffer(
        offline,
        online_capacity=100,
        offline_fraction=0.5,
        batch_size=4,
        generator=torch.Generator().manual_seed(0),
        online_transform=PolicyAgeFilter(version, max_policy_lag=1),
    )
    online = _data(20, 1.0, start=1000)
    online["policy_version"] = torch.zeros(20, dtype=torch.long)
    rb.extend(online)
    with ReplayDataset(rb, num_batches=4, prefetch=2) as ds:
        it = iter(ds)
        first = next(it)
        assert int((~first["is_offline"]).sum()) == 2  # fresh enough at version 0
        version.set(5)  # the online rows of the batches sampled ahead are now too old
        rest = list(it)
    assert len(rest) == 3
    for batch in rest:
        assert batch["is_offline"].all() and batch.batch_size == torch.Size([2])
        _check_rows(batch)


def test_a_mixture_refuses_dataloader_workers_and_points_to_prefetch(tmp_path):
    rb = OfflineToOnlineReplayBuffer(
        _data(N_OFFLINE, 0.0),
        online_storage=LazyMemmapStorage(100, scratch_dir=tmp_path),
        batch_size=4,
    )
    rb.extend(_data(20, 1.0, start=1000))
    ds = ReplayDataset(rb, num_batches=2)
    with pytest.raises(RuntimeError, match="got OfflineToOnlineReplayBuffer.*prefetch"):
        ds.dataloader(num_workers=1)
    with pytest.raises(RuntimeError, match="got OfflineToOnlineReplayBuffer.*prefetch"):
        list(DataLoader(ds, batch_size=None, num_workers=1))


def test_update_priority_routes_each_row_to_its_part_and_checks_first():
    rb = _mixture(
        0.5,
        batch_size=8,
        online_sampler=PrioritizedSampler(100, alpha=1.0, beta=1.0),
        online_writer=TensorDictRoundRobinWriter(track_generations=True),
    )
    batch = rb.sample()
    before = rb.online.sample(20, return_info=True)[1]["priority_weight"]
    assert before.unique().numel() == 1  # untouched priorities: uniform weights
    with pytest.raises(ValueError, match="is_offline"):
        rb.update_priority(batch["index"], torch.ones(8))
    with pytest.raises(ValueError, match="is_offline has 3 entries"):
        rb.update_priority(
            batch["index"], torch.ones(8), is_offline=torch.ones(3, dtype=torch.bool)
        )
    with pytest.raises(ValueError, match="finite and >= 0"):
        rb.update_priority(batch["index"], -torch.ones(8), is_offline=batch["is_offline"])
    assert rb.online.sample(20, return_info=True)[1]["priority_weight"].unique().numel() == 1
    online = ~batch["is_offline"]
    priority = torch.where(online, batch["action"].double() - 990.0, 5.0)
    rb.update_priority(
        batch["index"],
        priority,
        generation=batch["index_generation"],
        is_offline=batch["is_offline"],
    )
    after = rb.online.sample(200, return_info=True)[1]
    # online rows updated to (id - 990); ids 1000..1019, so weights now differ
    assert after["priority_weight"].unique().numel() > 1
