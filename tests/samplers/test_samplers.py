"""Tests of the non-slice samplers and the consume-after-n live set."""

from __future__ import annotations

import io
from collections import Counter

import pytest
import torch

from rbdata.samplers import (
    PrioritizedSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
)


class Slots:
    """The only part of a storage samplers read (declared by ``Storage``: length, size, device)."""

    ndim = 1
    device = None

    def __init__(self, n: int, max_size: int | None = None) -> None:
        self.n = n
        self.max_size = max_size or max(n, 1)

    def __len__(self) -> int:
        return self.n


def _roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _written(sampler: Sampler, n: int) -> Sampler:
    sampler.extend(torch.arange(n))
    return sampler


ALL = [
    lambda: RandomSampler(),
    lambda: SamplerWithoutReplacement(),
    lambda: PrioritizedSampler(64, alpha=0.7, beta=0.5),
]
IDS = ["random", "without_replacement", "prioritized"]


# ---------------------------------------------------------------- base behaviour
@pytest.mark.parametrize("make", ALL, ids=IDS)
@pytest.mark.parametrize(
    "bad, error",
    [(0, ValueError), (-3, ValueError), (2.0, TypeError), (True, TypeError), (None, TypeError)],
)
def test_batch_size_must_be_positive_int(make, bad, error):
    with pytest.raises(error, match="batch_size"):
        _written(make(), 8).sample(Slots(8), bad)


@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_empty_storage_raises(make):
    with pytest.raises(RuntimeError, match="Cannot sample from an empty storage.*max_size=64"):
        make().sample(Slots(0, 64), 4)
    assert make().exhausted(Slots(0, 64))


@pytest.mark.parametrize("make", ALL[:2], ids=IDS[:2])
def test_not_prioritized(make):
    with pytest.warns(UserWarning, match="not prioritized"):  # torchrl's: ignored, with a warning
        make().update_priority(torch.tensor([0]), torch.tensor([1.0]))


def test_set_rng_type():
    with pytest.raises(TypeError, match="generator"):
        RandomSampler().set_rng(0)


@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_generator_reproducible_and_global_rng_untouched(make):
    outs = []
    for _ in range(2):
        sampler = _written(make(), 50)
        sampler.set_rng(torch.Generator().manual_seed(7))
        before = torch.random.get_rng_state()
        outs.append([sampler.sample(Slots(50), 16)[0] for _ in range(6)])
        assert torch.equal(before, torch.random.get_rng_state())
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_state_dict_tolerates_unknown_and_missing_keys(make):
    sampler = _written(make(), 10)
    state = _roundtrip(sampler.state_dict())
    state["from_the_future"] = 1
    other = _written(make(), 10)
    other.load_state_dict(state)
    other.load_state_dict({})
    assert other.sample(Slots(10), 3)[0].numel() == 3


# ---------------------------------------------------------------- RandomSampler
def test_random_sampler_matches_reference_doc_values():
    torch.manual_seed(0)
    sampler, slots = RandomSampler(), Slots(10, 1000)
    assert sampler.sample(slots, 5)[0].tolist() == [4, 9, 3, 0, 3]
    assert sampler.sample(slots, 3)[0].tolist() == [9, 7, 3]
    assert sampler.sample(slots, 5)[0].tolist() == [7, 3, 1, 6, 6]
    assert not sampler.ran_out


def test_random_sampler_uniform():
    sampler = RandomSampler()
    sampler.set_rng(torch.Generator().manual_seed(0))
    index = torch.cat([sampler.sample(Slots(10), 1000)[0] for _ in range(20)])
    freq = torch.bincount(index, minlength=10) / index.numel()
    torch.testing.assert_close(freq, torch.full((10,), 0.1), atol=0.01, rtol=0)


# ---------------------------------------------------------------- consume-after-n
@pytest.mark.parametrize("make", ALL, ids=IDS)
@pytest.mark.parametrize("n", [1, 3])
def test_consume_after_n_returns_each_item_n_times(make, n):
    sampler = make()
    sampler.set_consume_after_n(n)
    sampler.set_rng(torch.Generator().manual_seed(n))
    slots = Slots(20, 64)
    _written(sampler, 20)
    seen: Counter[int] = Counter()
    while not sampler.exhausted(slots):
        index, _ = sampler.sample(slots, 6)
        assert 0 < index.numel() <= 6
        assert index.unique().numel() == index.numel()
        seen.update(index.tolist())
    assert seen == Counter({i: n for i in range(20)})
    with pytest.raises(RuntimeError, match="every item was consumed"):
        sampler.sample(slots, 6)
    sampler.extend(torch.tensor([4, 9]))
    assert not sampler.exhausted(slots)
    assert sorted(sampler.sample(slots, 6)[0].tolist()) == [4, 9]


@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_consume_after_n_set_after_writes_seeds_from_storage(make):
    sampler = _written(make(), 5)
    sampler.set_consume_after_n(1)
    slots = Slots(5, 64)
    assert sorted(sampler.sample(slots, 10)[0].tolist()) == [0, 1, 2, 3, 4]
    assert sampler.exhausted(slots)
    sampler.set_consume_after_n(None)
    assert sampler.sample(slots, 3)[0].numel() == 3


@pytest.mark.parametrize("make", ALL, ids=IDS)
def test_consume_state_dict_resumes(make):
    sampler = _written(make(), 12)
    sampler.set_consume_after_n(2)
    slots = Slots(12, 64)
    sampler.set_rng(torch.Generator().manual_seed(3))
    sampler.sample(slots, 5)
    state = _roundtrip(sampler.state_dict())
    gen_state = sampler._rng.get_state()
    rest = [sampler.sample(slots, 5)[0] for _ in range(3)]
    other = make()
    other.load_state_dict(state)
    other.set_rng(torch.Generator().manual_seed(0))
    other._rng.set_state(gen_state)
    for expected in rest:
        assert torch.equal(other.sample(slots, 5)[0], expected)


# ---------------------------------------------------------------- without replacement
def test_without_replacement_pass_covers_each_item_once():
    sampler = SamplerWithoutReplacement()
    sampler.set_rng(torch.Generator().manual_seed(0))
    slots = Slots(10)
    batches = []
    while not sampler.ran_out:
        batches.append(sampler.sample(slots, 4)[0])
    assert [b.numel() for b in batches] == [4, 4, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(10))
    assert sampler.sample(slots, 4)[0].numel() == 4
    assert not sampler.ran_out


def test_a_resumed_sampler_draws_the_pass_ahead_again_when_the_storage_grew():
    """A pass drawn at the end of the last one, for 3 items, is drawn again for 4 after a load.

    torchrl's ``test_sampler_without_rep_state_dict``: the original sampler draws the new
    item in the next pass; a sampler loaded from its state must too.
    """
    sampler = SamplerWithoutReplacement()
    for _ in range(3):
        sampler.sample(Slots(3), 1)
    assert sampler.ran_out
    resumed = SamplerWithoutReplacement()
    resumed.load_state_dict(_roundtrip(sampler.state_dict()))
    for s in (sampler, resumed):
        assert sorted(s.sample(Slots(4), 4)[0].tolist()) == [0, 1, 2, 3]


def test_a_torchrl_state_at_the_end_of_a_pass_is_drawn_again_when_the_storage_grew():
    torchrl_state = {
        "len_storage": 3,
        "_sample_list": torch.tensor([1, 2, 0]),
        "drop_last": False,
        "_ran_out": True,
    }
    resumed = SamplerWithoutReplacement()
    resumed.load_state_dict(torchrl_state)
    assert sorted(resumed.sample(Slots(4), 4)[0].tolist()) == [0, 1, 2, 3]
    same_size = SamplerWithoutReplacement()
    same_size.load_state_dict(torchrl_state)
    assert same_size.sample(Slots(3), 3)[0].tolist() == [1, 2, 0]


def test_without_replacement_drop_last_and_order():
    sampler = SamplerWithoutReplacement(drop_last=True, shuffle=False)
    slots = Slots(10)
    assert sampler.sample(slots, 4)[0].tolist() == [0, 1, 2, 3]
    assert not sampler.ran_out
    assert sampler.sample(slots, 4)[0].tolist() == [4, 5, 6, 7]
    assert sampler.ran_out
    assert sampler.sample(slots, 4)[0].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="The batch size 20 is greater than the storage capacity"):
        SamplerWithoutReplacement(drop_last=True).sample(slots, 20)


def test_without_replacement_new_items_join_next_pass():
    sampler = SamplerWithoutReplacement(shuffle=False)
    assert sampler.sample(Slots(4), 3)[0].tolist() == [0, 1, 2]
    assert sampler.sample(Slots(6), 3)[0].tolist() == [3]
    assert sampler.ran_out
    assert sampler.sample(Slots(6), 3)[0].tolist() == [0, 1, 2]
    assert sampler.sample(Slots(6), 3)[0].tolist() == [3, 4, 5]


def test_without_replacement_resume_mid_pass():
    sampler = SamplerWithoutReplacement()
    sampler.set_rng(torch.Generator().manual_seed(0))
    slots = Slots(23)
    sampler.sample(slots, 5)
    state = _roundtrip(sampler.state_dict())
    rest = [sampler.sample(slots, 5)[0] for _ in range(4)]
    assert sampler.ran_out
    resumed = SamplerWithoutReplacement()
    resumed.load_state_dict(state)
    for expected in rest:
        assert torch.equal(resumed.sample(slots, 5)[0], expected)
    assert resumed.ran_out


def test_without_replacement_empty_resets_pass():
    sampler = SamplerWithoutReplacement(shuffle=False)
    sampler.sample(Slots(10), 3)
    sampler._empty()
    assert sampler.sample(Slots(10), 3)[0].tolist() == [0, 1, 2]


# ---------------------------------------------------------------- prioritized
def _prioritized(priorities, alpha=0.7, beta=0.5, **kwargs) -> PrioritizedSampler:
    n = len(priorities)
    sampler = PrioritizedSampler(n, alpha=alpha, beta=beta, **kwargs)
    sampler.extend(torch.arange(n))
    sampler.update_priority(torch.arange(n), torch.tensor(priorities))
    sampler.set_rng(torch.Generator().manual_seed(0))
    return sampler


def test_prioritized_frequencies_and_weights():
    priorities = [0.5, 1.0, 2.0, 4.0, 8.0]
    alpha, beta = 0.7, 0.5
    sampler = _prioritized(priorities, alpha, beta)
    p = (torch.tensor(priorities, dtype=torch.float64) + 1e-8) ** alpha
    expected_w = (p / p.min()) ** (-beta)
    counts = torch.zeros(5)
    for _ in range(40):
        index, info = sampler.sample(Slots(5), 250)
        counts += torch.bincount(index, minlength=5)
        torch.testing.assert_close(
            info["priority_weight"].double(), expected_w[index], rtol=1e-5, atol=0
        )
        assert info["priority_weight"].dtype == torch.float
    torch.testing.assert_close(counts / counts.sum(), (p / p.sum()).float(), atol=0.01, rtol=0)
    sampler.update_priority(torch.tensor([0]), torch.tensor([1000.0]))
    index = torch.cat([sampler.sample(Slots(5), 250)[0] for _ in range(8)])
    share = (index == 0).float().mean()
    expected = 1000.0**alpha / (1000.0**alpha + float(p[1:].sum()))
    assert abs(float(share) - expected) < 0.02


def test_prioritized_new_items_get_max_priority_and_updates_apply():
    sampler = PrioritizedSampler(8, alpha=1.0, beta=1.0, eps=0.0)
    sampler.extend(torch.arange(4))
    assert sampler._tree.leaves[:4].tolist() == [1.0] * 4
    sampler.update_priority(torch.tensor([0, 1]), torch.tensor([5.0, 0.0]))
    sampler.extend(torch.tensor([4]))
    assert sampler._tree.leaves[:5].tolist() == [5.0, 0.0, 1.0, 1.0, 5.0]
    index, _ = sampler.sample(Slots(5, 8), 200)
    assert 1 not in index.tolist()
    sampler.update_priority(torch.tensor([0, 2, 3, 4]), 0.0)
    assert sampler.exhausted(Slots(5, 8))
    with pytest.raises(RuntimeError, match="every priority is 0"):
        sampler.sample(Slots(5, 8), 4)


def test_prioritized_max_priority_within_buffer():
    sampler = PrioritizedSampler(8, alpha=1.0, beta=1.0, eps=0.0, max_priority_within_buffer=True)
    sampler.extend(torch.arange(3))
    sampler.update_priority(torch.tensor([0, 1, 2]), torch.tensor([9.0, 2.0, 3.0]))
    sampler.update_priority(torch.tensor([0]), torch.tensor([1.0]))
    sampler.extend(torch.tensor([3]))
    assert float(sampler._tree.leaves[3]) == 3.0
    ever = PrioritizedSampler(8, alpha=1.0, beta=1.0, eps=0.0)
    ever.extend(torch.arange(3))
    ever.update_priority(torch.tensor([0, 1, 2]), torch.tensor([9.0, 2.0, 3.0]))
    ever.update_priority(torch.tensor([0]), torch.tensor([1.0]))
    ever.extend(torch.tensor([3]))
    assert float(ever._tree.leaves[3]) == 9.0


@pytest.mark.parametrize(
    ("reduction", "expected"), [("max", 4.0), ("min", 1.0), ("sum", 7.0), ("mean", 7.0 / 3)]
)
def test_prioritized_duplicate_reduction(reduction, expected):
    sampler = PrioritizedSampler(4, alpha=1.0, beta=1.0, eps=0.0, reduction=reduction)
    sampler.extend(torch.arange(4))
    sampler.update_priority(torch.tensor([2, 0, 2, 2]), torch.tensor([1.0, 5.0, 4.0, 2.0]))
    assert float(sampler._tree.leaves[2]) == pytest.approx(expected)
    assert float(sampler._tree.leaves[0]) == 5.0
    assert sampler._tree.total == pytest.approx(2.0 + 5.0 + expected)


@pytest.mark.parametrize(
    ("index", "priority", "match"),
    [
        (torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]), r"finite and >= 0.*\[1\]=nan"),
        (torch.tensor([0, 1]), torch.tensor([float("inf"), 1.0]), r"finite.*\[0\]=inf"),
        (torch.tensor([0, 1]), torch.tensor([1.0, -0.5]), r">= 0.*\[1\]=-0.5"),
        # max_capacity=8: torchrl's tree (rbdata's, grown) holds 16 slots
        (torch.tensor([0, 16]), torch.tensor([1.0, 1.0]), r"index must lie in \[0, 16\).*\[1\]=16"),
        (torch.tensor([-1]), torch.tensor([1.0]), r"index must lie in \[0, 16\)"),
        (torch.tensor([0, 1, 2]), torch.tensor([1.0, 2.0]), r"priority has shape \(2,\).*\(3,\)"),
        (torch.tensor([0.0]), torch.tensor([1.0]), r"index must hold integers"),
    ],
)
def test_prioritized_invalid_update_changes_nothing(index, priority, match):
    sampler = _prioritized([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=match):
        sampler.update_priority(index, priority)
    after = sampler.state_dict()
    assert torch.equal(before["leaves"], after["leaves"])
    assert before["max_priority"] == after["max_priority"]
    assert sampler._tree.total == pytest.approx(float(after["leaves"].sum()))


def test_prioritized_update_bounded_by_storage():
    sampler = _prioritized([1.0] * 8)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        sampler.update_priority(torch.tensor([5]), torch.tensor([1.0]), storage=Slots(3, 8))
    sampler.update_priority(2, 3.0, storage=Slots(3, 8))
    assert float(sampler._tree.leaves[2]) == pytest.approx((3.0 + 1e-8) ** 0.7)


def test_prioritized_constructor_validation():
    with pytest.raises(ValueError, match="max_capacity"):
        PrioritizedSampler(0, 1.0, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedSampler(4, -0.5, 1.0)
    with pytest.raises(ValueError, match="beta"):
        PrioritizedSampler(4, 1.0, -1.0)
    with pytest.raises(ValueError, match="reduction"):
        PrioritizedSampler(4, 1.0, 1.0, reduction="mode")
    with pytest.raises(ValueError, match=r"index must lie in \[0, 8\)"):  # torchrl's tree size
        PrioritizedSampler(4, 1.0, 1.0).extend(torch.tensor([8]))


def test_prioritized_consume_zeroes_and_rewrite_restores():
    sampler = _prioritized([1.0, 2.0, 3.0, 4.0], alpha=1.0, eps=0.0)
    sampler.set_consume_after_n(1)
    index, info = sampler.sample(Slots(4), 2)
    assert index.unique().numel() == 2 and info["priority_weight"].shape == (2,)
    assert sampler._tree.leaves[index].tolist() == [0.0, 0.0]
    sampler.update_priority(index, torch.tensor([10.0, 10.0]))
    assert sampler._tree.leaves[index].tolist() == [0.0, 0.0]
    sampler.extend(index[:1])  # a rewrite: live again, with the max priority seen (4.0)
    assert float(sampler._tree.leaves[index[0]]) == 4.0


def test_prioritized_state_dict_roundtrip_and_empty():
    sampler = _prioritized([1.0, 2.0, 3.0, 0.5])
    state = _roundtrip(sampler.state_dict())
    other = PrioritizedSampler(4, alpha=0.7, beta=0.5)
    other.load_state_dict(state)
    assert torch.equal(other._tree.leaves, sampler._tree.leaves)
    assert other._tree.min == sampler._tree.min and other.default_priority == pytest.approx(
        sampler.default_priority
    )
    with pytest.raises(ValueError, match=r"leaves.*\(4,\)"):
        PrioritizedSampler(5, 0.7, 0.5).load_state_dict(state)
    other._empty()
    assert other._tree.total == 0 and other.exhausted(Slots(4))
    assert other.default_priority == pytest.approx(1.0)  # raw: 1.0 until a priority is set


# ---------------------------------------------------------------- prioritized fast path
def test_prioritized_fast_update_matches_update_priority():
    index = torch.tensor([3, 1, 3, 7, 0, 3])
    priority = torch.tensor([0.5, 2.0, 4.0, 0.0, 1.5, 1.0], dtype=torch.float64)
    for reduction in ("max", "min", "sum", "mean"):
        public = _prioritized([1.0] * 8, reduction=reduction)
        fast = _prioritized([1.0] * 8, reduction=reduction)
        public.update_priority(index, priority)
        fast._update_priority_validated(index, priority)
        assert torch.equal(public._tree.leaves, fast._tree.leaves), reduction
        assert public.default_priority == fast.default_priority
        assert public._tree.min == fast._tree.min


@pytest.mark.parametrize(
    ("index", "priority", "match"),
    [
        (torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]), r"finite and >= 0.*\[1\]=nan"),
        (torch.tensor([0, 1]), torch.tensor([1.0, -2.0]), r">= 0.*\[1\]=-2"),
        (torch.tensor([0, 1]), torch.tensor([1e300, 1.0], dtype=torch.float64), r"\[0\]=inf"),
        (torch.tensor([0, 16]), torch.tensor([1.0, 1.0]), r"index must lie in \[0, 16\).*\[1\]=16"),
        (torch.tensor([-1, 2]), torch.tensor([1.0, 1.0]), r"index must lie in \[0, 16\).*\[0\]=-1"),
    ],
)
def test_prioritized_fast_update_checks_values_and_changes_nothing(index, priority, match):
    sampler = _prioritized([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=match):
        sampler._update_priority_validated(index, priority)
    assert torch.equal(before["leaves"], sampler.state_dict()["leaves"])
    assert before["max_priority"] == sampler.state_dict()["max_priority"]


def test_prioritized_fast_update_calls_a_subclass_override():
    calls = []

    class Logged(PrioritizedSampler):
        def update_priority(self, index, priority, *, storage=None):
            calls.append(index.tolist())
            super().update_priority(index, priority, storage=storage)

    sampler = Logged(4, alpha=1.0, beta=1.0, eps=0.0)
    sampler.extend(torch.arange(4))
    sampler._update_priority_validated(torch.tensor([2]), torch.tensor([3.0]))
    assert calls == [[2]] and float(sampler._tree.leaves[2]) == 3.0


def test_prioritized_sample_weights_and_update_on_a_two_level_tree():
    """1M slots: the tree has a 31,250-node top over the leaves (the benchmark's shape)."""
    n = 1_000_000
    sampler = PrioritizedSampler(n, alpha=1.0, beta=1.0, eps=0.0)
    sampler.extend(torch.arange(n))
    hot = torch.arange(0, n, 100_000)
    sampler.update_priority(hot, torch.full((hot.numel(),), 1e5))
    sampler.set_rng(torch.Generator().manual_seed(0))
    index, info = sampler.sample(Slots(n), 4096)
    share = torch.isin(index, hot).float().mean()
    expected = hot.numel() * 1e5 / (hot.numel() * 1e5 + n - hot.numel())  # 0.5
    assert abs(float(share) - expected) < 0.05
    torch.testing.assert_close(info["priority_weight"], 1 / sampler._tree.leaves[index])
    sampler._update_priority_validated(index, torch.zeros(index.numel()))
    assert not bool(torch.isin(sampler.sample(Slots(n), 4096)[0], index).any())


# ---------------------------------------------------------------- priority mass
@pytest.mark.parametrize("make", ALL[:2], ids=IDS[:2])
def test_a_uniform_sampler_has_no_priority_mass(make):
    assert _written(make(), 8).priority_mass() is None


def test_the_priority_mass_sums_the_weights_drawn_by():
    sampler = _written(PrioritizedSampler(8, alpha=1.0, beta=0.25, eps=0.0), 4)
    sampler.update_priority(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 2.0, 0.5, 4.0]))
    mass = sampler.priority_mass()
    assert (mass.total, mass.smallest, mass.beta) == pytest.approx((7.5, 0.5, 0.25))
    sampler.beta = 0.75  # the declared exponent, as set
    assert sampler.priority_mass().beta == 0.75


def test_can_sample_says_whether_a_batch_is_there():
    """torchrl's ``can_sample`` on samplers and buffers."""
    from rbdata import LazyTensorStorage, RandomSampler, ReplayBuffer, SamplerWithoutReplacement

    rb = ReplayBuffer(storage=LazyTensorStorage(8), sampler=RandomSampler(), batch_size=4)
    assert not rb.can_sample()
    rb.extend(torch.arange(2))
    assert rb.can_sample() and rb.can_sample(8)
    strict = ReplayBuffer(
        storage=LazyTensorStorage(8),
        sampler=SamplerWithoutReplacement(drop_last=True),
        batch_size=4,
    )
    strict.extend(torch.arange(3))
    assert strict.can_sample(3) and not strict.can_sample()
    with pytest.raises(ValueError, match="batch_size"):
        strict.can_sample(0)
    with pytest.raises(RuntimeError, match="batch_size not specified"):
        ReplayBuffer(storage=LazyTensorStorage(8)).can_sample()
    consumed = ReplayBuffer(storage=LazyTensorStorage(8), consume_after_n_samples=1, batch_size=2)
    consumed.extend(torch.arange(2))
    consumed.sample()
    assert not consumed.can_sample()


def test_samplers_that_do_not_draw_by_priority_report_a_default_priority_of_one():
    from rbdata import RandomSampler, SliceSampler

    assert RandomSampler().default_priority == 1.0
    assert SliceSampler(num_slices=2).default_priority == 1.0
