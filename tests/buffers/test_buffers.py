"""ReplayBuffer and its TensorDict / prioritized variants: the glue and its guarantees."""

from __future__ import annotations

import threading

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedReplayBuffer,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def td(n: int, start: int = 0) -> TensorDict:
    x = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {"obs": x.unsqueeze(-1).expand(n, 3).clone(), "next": {"reward": x.unsqueeze(-1)}},
        [n],
    )


def snapshot(rb: ReplayBuffer) -> tuple:
    return (len(rb), rb.write_count, rb[:].clone() if len(rb) else None)


def same(a: tuple, b: tuple) -> bool:
    if a[:2] != b[:2]:
        return False
    return (a[2] is None and b[2] is None) or bool((a[2] == b[2]).all())


class TestBadInputLeavesBufferUnchanged:
    def make(self) -> TensorDictReplayBuffer:
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), batch_size=4)
        rb.extend(td(5))
        return rb

    def test_missing_key_and_a_wrong_dtype(self):
        rb = self.make()
        before = snapshot(rb)
        with pytest.raises(TypeError, match="obs"):  # lacking ("next", "reward") alone is fine
            rb.extend(TensorDict({"obs": torch.zeros(2, 3, dtype=torch.float64)}, [2]))
        assert same(before, snapshot(rb))

    def test_extra_key_and_a_wrong_shape(self):
        rb = self.make()
        before = snapshot(rb)
        bad = td(2).set("extra", torch.zeros(2)).set("obs", torch.zeros(2, 4))
        with pytest.raises(ValueError, match="obs"):  # the new key alone would be added
            rb.extend(bad)
        assert same(before, snapshot(rb))
        assert "extra" not in rb.storage.leaf_keys()

    def test_extra_key_in_a_shared_buffer(self):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), batch_size=4, shared=True)
        rb.extend(td(5))
        before = snapshot(rb)
        with pytest.raises(KeyError, match=r"\['extra'\].*other processes map its rows"):
            rb.extend(td(2).set("extra", torch.zeros(2)))
        assert same(before, snapshot(rb))

    def test_wrong_shape(self):
        rb = self.make()
        before = snapshot(rb)
        bad = td(2).set("obs", torch.zeros(2, 4))
        with pytest.raises(ValueError, match="obs"):
            rb.extend(bad)
        assert same(before, snapshot(rb))

    def test_wrong_dtype(self):
        rb = self.make()
        before = snapshot(rb)
        bad = td(2).set("obs", torch.zeros(2, 3, dtype=torch.float64))
        with pytest.raises((TypeError, ValueError), match="obs"):
            rb.extend(bad)
        assert same(before, snapshot(rb))

    @pytest.mark.parametrize(
        "bs, error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), (True, TypeError)]
    )
    def test_bad_batch_size(self, bs, error):
        rb = self.make()
        with pytest.raises(error, match="batch_size"):
            rb.sample(bs)
        with pytest.raises(error, match="batch_size"):
            ReplayBuffer(batch_size=bs)

    def test_empty_buffer_sample(self):
        rb = ReplayBuffer(storage=LazyTensorStorage(10))
        with pytest.raises(RuntimeError, match="empty"):
            rb.sample(3)

    def test_out_of_range_index(self):
        rb = self.make()
        with pytest.raises(IndexError):
            rb.storage[torch.tensor([25])]

    def test_bad_priorities(self):
        rb = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
        rb.extend(td(10))
        state = rb.sampler.state_dict()
        for bad in (float("nan"), float("inf"), -1.0):
            with pytest.raises(ValueError, match="finite"):
                rb.update_priority(torch.tensor([1, 2]), torch.tensor([1.0, bad]))
        after = rb.sampler.state_dict()
        assert all(torch.equal(a, b) for a, b in zip(_tensors(state), _tensors(after), strict=True))

    def test_bad_components(self):
        with pytest.raises(TypeError, match="storage"):
            ReplayBuffer(storage=3)
        with pytest.raises(ValueError, match="service_backend"):
            ReplayBuffer(service_backend="grpc")
        with pytest.raises(TypeError, match="transform"):
            ReplayBuffer(transform=lambda x: x, transform_factory=lambda: lambda x: x)


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)


def test_generator_determinism_and_global_rng_untouched():
    def run() -> list[list[int]]:
        g = torch.Generator().manual_seed(123)
        rb = ReplayBuffer(storage=LazyTensorStorage(100), generator=g, batch_size=8)
        rb.extend(torch.arange(100))
        return [rb.sample().tolist() for _ in range(5)]

    state = torch.random.get_rng_state()
    a, b = run(), run()
    assert a == b
    assert torch.equal(state, torch.random.get_rng_state())


def test_add_extend_len_write_count_and_wrap():
    rb = ReplayBuffer(storage=LazyTensorStorage(5))
    assert rb.add(torch.tensor(7)) == 0
    idx = rb.extend(torch.arange(6))
    assert idx.tolist() == [1, 2, 3, 4, 0, 1]
    assert len(rb) == 5 and rb.write_count == 7
    assert rb[:].tolist() == [4, 5, 1, 2, 3]


def test_empty_resets_cursor_and_write_count():
    rb = ReplayBuffer(storage=LazyTensorStorage(5))
    rb.extend(torch.arange(3))
    rb.empty(empty_write_count=False)
    assert len(rb) == 0 and rb.write_count == 3
    assert rb.extend(torch.arange(2)).tolist() == [0, 1]
    rb.empty()
    assert rb.write_count == 0


def test_consume_after_n_every_sampler_and_prefetch():
    for sampler in (RandomSampler(), SamplerWithoutReplacement(), PrioritizedSampler(50, 0.7, 0.5)):
        for prefetch in (None, 2):
            rb = ReplayBuffer(
                storage=LazyTensorStorage(50),
                sampler=sampler,
                batch_size=8,
                consume_after_n_samples=2,
                prefetch=prefetch,
            )
            rb.extend(torch.arange(50))
            counts = torch.zeros(50, dtype=torch.long)
            for _ in range(100):
                try:
                    batch = rb.sample()
                except RuntimeError:  # everything consumed (and every prefetched batch handed out)
                    break
                counts.index_add_(0, batch, torch.ones_like(batch))
            assert len(rb) == 0
            assert (counts == 2).all(), (type(sampler).__name__, prefetch, counts)
            rb.shutdown()
            sampler = (
                type(sampler)()
                if not isinstance(sampler, PrioritizedSampler)
                else (PrioritizedSampler(50, 0.7, 0.5))
            )


def test_iteration_ends_with_without_replacement_pass():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(), batch_size=3
    )
    rb.extend(torch.arange(10))
    batches = list(rb)
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert rb.next() is not None


def test_thread_safety_extend_while_sampling():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(500), batch_size=32)
    rb.extend(td(32))
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer():
        try:
            for i in range(1500):
                rb.extend(td(16, start=i * 16))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            stop.set()

    t = threading.Thread(target=writer)
    t.start()
    n = 0
    while not stop.is_set() or n < 1000:
        batch = rb.sample()
        # a batch is never torn: each row's obs columns and reward agree.
        assert (batch["obs"] == batch["next", "reward"]).all()
        n += 1
    t.join()
    assert not errors and n >= 1000


def _child_extend(rb):
    rb.extend(torch.full((3,), 9))


def test_shared_buffer_with_child_process():
    import torch.multiprocessing as mp

    rb = ReplayBuffer(storage=LazyTensorStorage(10), shared=True)
    rb.extend(torch.arange(2))
    ctx = mp.get_context("fork")
    p = ctx.Process(target=_child_extend, args=(rb,))
    p.start()
    p.join(30)
    assert p.exitcode == 0
    assert len(rb) == 5 and rb.write_count == 5
    assert rb[:].tolist() == [0, 1, 9, 9, 9]


def test_prioritized_weights_and_generation_guarded_updates():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(4),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    rb.extend(td(4))
    batch = rb.sample()
    assert "priority_weight" in batch.keys() and "index_generation" in batch.keys()
    rb.extend(td(2, start=10))  # rewrites slots 0 and 1
    batch.set("td_error", torch.full((4,), 5.0))
    rb.update_tensordict_priority(batch)
    skipped = int((batch["index"] < 2).sum())
    assert rb.stats()["skipped_priority_updates"] == skipped


def test_prioritized_replay_buffer_info():
    rb = PrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=LazyTensorStorage(10))
    rb.extend(torch.arange(10))
    data, info = rb.sample(5, return_info=True)
    assert data.shape == (5,) and set(info) >= {"index", "priority_weight"}
    assert torch.equal(data, info["index"])


def test_tensordict_extend_priorities_from_data():
    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(4))
    rb.extend(td(4).set("td_error", torch.tensor([0.0, 0.0, 0.0, 1.0])))
    assert (rb.sample(20)["index"] == 3).all()


def test_set_update_read_write_all():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(td(4))
    rb.set_("obs", torch.ones(4, 3))
    assert (rb[:]["obs"] == 1).all()
    rb.set_at_(("next", "reward"), torch.tensor([[7.0]]), torch.tensor([2]))
    assert rb[:]["next", "reward"][2].item() == 7
    rb.update_(TensorDict({"obs": torch.full((4, 3), 2.0)}, [4]))
    assert (rb.read_all_in_order()["obs"] == 2).all()
    rb.write_all(td(4, start=100))
    assert rb.read_all_in_order(end=2)["obs"][:, 0].tolist() == [100, 101]
    with pytest.raises(KeyError):
        rb.set_("nope", torch.zeros(4))
    with pytest.raises(ValueError, match="dotted"):
        rb.set_("next.reward", torch.zeros(4, 1))


def test_set_components_return_previous():
    rb = ReplayBuffer(storage=LazyTensorStorage(5))
    old = rb.set_sampler(SamplerWithoutReplacement())
    assert isinstance(old, RandomSampler)
    old_w = rb.set_writer(RoundRobinWriter())
    assert isinstance(old_w, RoundRobinWriter)
    old_s = rb.set_storage(LazyTensorStorage(7))
    assert old_s.max_size == 5 and rb.storage.max_size == 7


def test_delayed_init_and_stats_before_init():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform_factory=lambda: lambda x: x + 1)
    assert not rb.initialized
    st = rb.stats()
    assert st["initialized"] is False and st["capacity"] == 10 and not rb.initialized
    rb.extend(torch.arange(3))
    assert rb.initialized and (rb.sample(5) >= 1).all()


def test_lifecycle_methods():
    rb = ReplayBuffer(storage=ListStorage(10))
    assert rb.start() is rb and rb.client() is rb and rb.is_alive
    assert rb.service_backend == "direct"
    rb.shutdown()
    assert not rb.is_alive


class TestDumpsLoads:
    def test_round_trip_and_resume_sampling(self, tmp_path):
        g = torch.Generator().manual_seed(0)
        rb = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(50),
            generator=g,
            batch_size=5,
            sampler=SamplerWithoutReplacement(),
        )
        rb.extend(td(30))
        rb.sample()
        rb.dumps(tmp_path / "d")
        expected = [rb.sample()["index"].tolist() for _ in range(3)]
        rb2 = TensorDictReplayBuffer(
            storage=LazyMemmapStorage(50),
            generator=torch.Generator(),
            batch_size=5,
            sampler=SamplerWithoutReplacement(),
        )
        rb2.load(tmp_path / "d")
        assert [rb2.sample()["index"].tolist() for _ in range(3)] == expected
        assert rb2.write_count == 30

    def test_list_storage_round_trip(self, tmp_path):
        rb = ReplayBuffer(storage=ListStorage(10), collate_fn=lambda x: x)
        rb.extend(["a", 1, None])
        rb.save(tmp_path / "l")
        rb2 = ReplayBuffer(storage=ListStorage(10), collate_fn=lambda x: x)
        rb2.load(tmp_path / "l")
        assert rb2[:] == ["a", 1, None]

    def test_missing_partial_mismatched(self, tmp_path):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(td(3))
        before = snapshot(rb)
        with pytest.raises((ValueError, FileNotFoundError), match="not found"):
            rb.loads(tmp_path / "nope")
        (tmp_path / "partial").mkdir()
        with pytest.raises(ValueError, match="manifest"):
            rb.loads(tmp_path / "partial")
        other = TensorDictReplayBuffer(storage=LazyTensorStorage(20))
        other.extend(td(2))
        other.dumps(tmp_path / "other")
        with pytest.raises(ValueError, match="max_size"):
            rb.loads(tmp_path / "other")
        other2 = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement()
        )
        other2.extend(td(2))
        other2.dumps(tmp_path / "other2")
        with pytest.raises(ValueError, match="sampler"):
            rb.loads(tmp_path / "other2")
        wrong_keys = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        wrong_keys.extend(TensorDict({"x": torch.zeros(2)}, [2]))
        wrong_keys.dumps(tmp_path / "wk")
        with pytest.raises((KeyError, ValueError)):
            rb.loads(tmp_path / "wk")
        assert same(before, snapshot(rb))

    def test_crash_mid_dump_leaves_previous_dump(self, tmp_path, monkeypatch):
        rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb.extend(td(3))
        rb.dumps(tmp_path / "d")
        rb.extend(td(3, start=3))
        import rbdata.checkpoint._write as ck

        def boom(*a, **k):
            raise OSError("disk full")

        monkeypatch.setattr(ck, "swap_into_place", boom)
        with pytest.raises(OSError):
            rb.dumps(tmp_path / "d")
        monkeypatch.undo()
        rb2 = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
        rb2.loads(tmp_path / "d")
        assert len(rb2) == 3
        assert [p.name for p in tmp_path.iterdir()] == ["d"]


def test_cli_inspect_and_verify(tmp_path, capsys):
    from rbdata.cli import main

    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(td(4))
    rb.dumps(tmp_path / "d")
    assert main(["inspect", str(tmp_path / "d"), "--json"]) == 0
    assert '"length": 4' in capsys.readouterr().out
    assert main(["verify", str(tmp_path / "d")]) == 0
    assert main(["verify", str(tmp_path / "missing")]) == 2
    assert "not found" in capsys.readouterr().err


def test_policy_age_filter_with_prioritized_tensordict_buffer():
    from rbdata import PolicyAgeFilter

    version = {"v": 5}
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(20),
        batch_size=64,
        transform=PolicyAgeFilter(lambda: version["v"], max_policy_lag=1),
    )
    stamps = torch.tensor([5, 4, 3, 5] * 5)
    rb.extend(td(20).set("policy_version", stamps))
    assert len(rb) == 15  # version 3 dropped on write
    version["v"] = 6  # now version 4 is stale too
    batch, info = rb.sample(return_info=True)
    assert (batch["policy_version"] >= 5).all()
    assert batch["priority_weight"].shape == batch["index"].shape == (batch.shape[0],)
    # the index still points at the rows that were kept
    assert torch.equal(rb.storage[:]["policy_version"][batch["index"]], batch["policy_version"])
    assert torch.equal(info["index"], batch["index"])


def test_sequence_sample_unit_on_a_wrapped_buffer():
    from rbdata import Sequence

    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(50), sample_unit=Sequence(4), batch_size=8
    )
    for ep in range(6):
        done = torch.zeros(20, 1, dtype=torch.bool)
        done[-1] = True
        rb.extend(TensorDict({"episode": torch.full((20,), ep), "next": {"done": done}}, [20]))
    batch = rb.sample()
    assert batch.shape == (32,)  # 8 windows of 4 records, flat
    episode, valid = batch["episode"].view(8, 4), batch["validity_mask"].view(8, 4)
    assert (episode == episode[:, :1]).all() and valid[:, 0].all()


def test_policy_age_filter_on_an_empty_batch():
    from rbdata import PolicyAgeFilter

    f = PolicyAgeFilter(3, max_policy_lag=0)
    empty = TensorDict({"policy_version": torch.zeros(0, 1, dtype=torch.long)}, [0])
    assert f(empty).shape == (0,)
    rows = TensorDict({"policy_version": torch.tensor([[3], [1]])}, [2])
    assert f(rows)["policy_version"].flatten().tolist() == [3]


_view_writes = st.lists(st.tuples(st.integers(0, 8), st.integers(1, 9)), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(2, 9),
    start=st.integers(1, 9),
    writes=_view_writes,
    tensordict=st.booleans(),
    storage=st.sampled_from([LazyTensorStorage, LazyMemmapStorage]),
)
def test_extending_with_a_view_of_the_buffer_own_items_writes_their_values(
    capacity, start, writes, tensordict, storage
):
    """Extending with rows read as views of the storage (wrap point included) == with copies."""

    def make():
        cls = TensorDictReplayBuffer if tensordict else ReplayBuffer
        rb = cls(storage=storage(capacity))
        rb.extend(td(min(start, capacity)) if tensordict else torch.arange(min(start, capacity)))
        return rb

    def rows(rb, lo, hi):
        if tensordict:
            leaves = {k: rb.storage.get_leaf(k)[lo:hi] for k in ("obs", ("next", "reward"))}
            return TensorDict(
                {"obs": leaves["obs"], "next": {"reward": leaves["next", "reward"]}}, [hi - lo]
            )
        return rb.storage.get_leaf(())[lo:hi]

    views, copies = make(), make()
    for lo, length in writes:
        lo = lo % len(views)
        hi = min(len(views), lo + length)
        views.extend(rows(views, lo, hi))
        copies.extend(rows(copies, lo, hi).clone())
    assert len(views) == len(copies)
    assert (views[: len(views)] == copies[: len(copies)]).all()


@pytest.mark.parametrize("data", [torch.tensor(1.0), TensorDict({"obs": torch.ones(3)})])
def test_extend_with_no_batch_dim_names_the_problem(data):
    rb = (TensorDictReplayBuffer if isinstance(data, TensorDict) else ReplayBuffer)(
        storage=LazyTensorStorage(4)
    )
    with pytest.raises(ValueError, match=r"leading batch dim.*shape \[\].*add\(\)"):
        rb.extend(data)
    assert len(rb) == 0 and rb.write_count == 0


@pytest.mark.parametrize("ndim", [1, 2])
def test_a_write_past_the_samplers_slots_is_refused_before_anything_is_written(ndim):
    from rbdata import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    # max_capacity=100: torchrl's tree (and rbdata's, once grown) holds 128 slots
    shape = [130] if ndim == 1 else [65, 2]
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(130, ndim=ndim),
        sampler=PrioritizedSampler(100, 1.0, 1.0),
    )
    data = TensorDict({"a": torch.zeros(shape)}, shape)
    with pytest.raises(ValueError, match=r"max_capacity=100\) has 128 slots, .* up to 130"):
        rb.extend(data)
    assert len(rb) == 0 and rb.writer.cursor == 0


@pytest.mark.parametrize("ndim", [1, 2])
def test_writes_up_to_torchrls_tree_size_are_taken_and_sampled(ndim):
    """torchrl's PrioritizedSampler(149) has a 256-slot tree: 150 cells fit and are drawn."""
    from rbdata import LazyTensorStorage, PrioritizedSampler, TensorDictReplayBuffer

    shape = [150] if ndim == 1 else [75, 2]  # ndim=2: ceil(149 / 2) = 75 items of 2 cells
    sampler = PrioritizedSampler(149, 1.0, 1.0)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(150 if ndim == 1 else 149, ndim=ndim), sampler=sampler
    )
    index = rb.extend(TensorDict({"a": torch.arange(150.0).reshape(shape)}, shape))
    assert sampler.max_capacity == 149 and sampler.cell_capacity == 256
    rb.update_priority(index[-1:], torch.tensor([1e6]))  # the item written last: cell 149
    assert (rb.sample(20)["a"] == 149.0).all()
    state = sampler.state_dict()
    assert state["leaves"].shape == (256,)  # the grown tree: cell 149's priority is kept
    fresh = PrioritizedSampler(149, 1.0, 1.0)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.state_dict()["leaves"], state["leaves"])


def test_a_small_sampler_on_a_large_storage_works_while_the_writes_fit():
    from rbdata import ListStorage, PrioritizedSampler, TensorDictReplayBuffer

    # max_capacity=5: torchrl's tree has 8 slots (torchrl's test_ptdrb writes 8 items)
    rb = TensorDictReplayBuffer(storage=ListStorage(1000), sampler=PrioritizedSampler(5, 0.7, 0.9))
    rb.extend(TensorDict({"a": torch.arange(3.0)}, [3]))
    rb.extend(TensorDict({"a": torch.arange(5.0)}, [5]))
    assert len(rb) == 8 and rb.sample(4).shape == torch.Size([4])
    with pytest.raises(ValueError, match=r"max_capacity=5\) has 8 slots, .* up to 9"):
        rb.extend(TensorDict({"a": torch.zeros(1)}, [1]))
    assert len(rb) == 8


def test_torchrls_init_names_hold_the_factories_until_the_buffer_is_built():
    """``_init_storage``/``_init_sampler``/``_init_writer``: read-only, for torchrl's tests."""
    from functools import partial

    from rbdata import ListStorage, RandomSampler, RoundRobinWriter

    factories = {
        "storage": partial(ListStorage),
        "writer": partial(RoundRobinWriter),
        "sampler": partial(RandomSampler),
    }
    rb = ReplayBuffer(**factories, transform_factory=lambda: lambda td: td)
    assert not rb.initialized and not hasattr(rb, "_storage")
    assert (rb._init_storage, rb._init_sampler, rb._init_writer) == (
        factories["storage"], factories["sampler"], factories["writer"],
    )  # fmt: skip
    rb.extend(TensorDict(batch_size=[2]))
    assert rb._storage is rb.storage and rb._init_storage is None
    assert rb._init_sampler is None and rb._init_writer is None
