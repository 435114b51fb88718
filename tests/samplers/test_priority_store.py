"""The device path of PrioritizedSampler (its torch store) against the numpy path.

The torch store runs on the CPU through the sampler's test hook
(``_move_to("cpu", torch_tree=True)``): the same code a CUDA buffer runs, so the
parity tests run everywhere; the CUDA tests check that the tensors stay on the
device, where one is available.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rbdata
from rbdata.samplers import PrioritizedSampler, _device_sumtree
from rbdata.samplers._device_sumtree import _DeviceSumTree
from rbdata.samplers._priority_store import (
    _NumpyStore,
    _TorchStore,
    index_top,
    priority_bounds,
    update_bounds,
)
from rbdata.samplers._sumtree import _SumTree

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs a CUDA device")


class Slots:
    """The only part of a storage samplers read (and, optionally, its device)."""

    def __init__(self, n: int, device: str | None = None) -> None:
        self.n, self.max_size, self.device = n, n, device

    def __len__(self) -> int:
        return self.n


def _pair(capacity: int, **kwargs) -> tuple[PrioritizedSampler, PrioritizedSampler]:
    """A numpy-path sampler and a torch-path sampler (on the CPU), same settings, same seed."""
    numpy_path = PrioritizedSampler(capacity, device="cpu", **kwargs)
    torch_path = PrioritizedSampler(capacity, device="cpu", **kwargs)
    torch_path._move_to("cpu", torch_tree=True)
    for sampler in (numpy_path, torch_path):
        sampler.extend(torch.arange(capacity))
        sampler.set_rng(torch.Generator().manual_seed(0))
    return numpy_path, torch_path


@pytest.fixture(params=[_device_sumtree._MAX_TOP, 4], ids=["flat", "deep"])
def max_top(request, monkeypatch):
    """The default tree shape, or a tiny top level (several levels for small capacities)."""
    monkeypatch.setattr(_device_sumtree, "_MAX_TOP", request.param)
    return request.param


def _assert_same_state(a: PrioritizedSampler, b: PrioritizedSampler) -> None:
    torch.testing.assert_close(a._tree.leaves.cpu(), b._tree.leaves.cpu(), rtol=1e-6, atol=0)
    assert a._tree.min == pytest.approx(b._tree.min, rel=1e-6)
    assert a._tree.total == pytest.approx(b._tree.total, rel=1e-5)
    assert a.default_priority == pytest.approx(b.default_priority, rel=1e-6)
    assert a._max_priority[0] == pytest.approx(b._max_priority[0], rel=1e-6)


# ---------------------------------------------------------------- the hook
def test_the_hook_runs_the_torch_store_on_the_cpu():
    numpy_path, torch_path = _pair(100, alpha=0.7, beta=0.5)
    assert isinstance(numpy_path._store, _NumpyStore) and type(numpy_path._tree) is _SumTree
    assert isinstance(torch_path._store, _TorchStore) and type(torch_path._tree) is _DeviceSumTree
    assert torch_path.device == torch.device("cpu")
    assert torch.equal(torch_path._tree.leaves, numpy_path._tree.leaves)  # the move kept them


# ---------------------------------------------------------------- parity
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_same_draws_weights_and_updates_as_the_numpy_path(max_top, dtype):
    capacity = 3000
    numpy_path, torch_path = _pair(capacity, alpha=0.7, beta=0.5, dtype=dtype)
    priority = torch.rand(capacity, generator=torch.Generator().manual_seed(1)) * 10
    for sampler in (numpy_path, torch_path):
        sampler.update_priority(torch.arange(capacity), priority)
    storage = Slots(capacity)
    for step in range(5):
        index_n, info_n = numpy_path.sample(storage, 256)
        index_t, info_t = torch_path.sample(storage, 256)
        assert torch.equal(index_n, index_t), step
        weight_n, weight_t = info_n["priority_weight"], info_t["priority_weight"]
        assert weight_t.dtype == weight_n.dtype and weight_t.device == index_t.device
        torch.testing.assert_close(weight_t, weight_n, rtol=1e-6, atol=0)
        new = torch.rand(256, generator=torch.Generator().manual_seed(step)) * 5
        numpy_path.update_priority(index_n, new)
        torch_path._update_priority_validated(index_t, new)
        _assert_same_state(numpy_path, torch_path)


@pytest.mark.parametrize("reduction", ["max", "min", "sum", "mean", "median"])
@pytest.mark.parametrize("within_buffer", [False, True])
def test_duplicates_and_default_priority_match(reduction, within_buffer):
    numpy_path, torch_path = _pair(
        8, alpha=0.5, beta=1.0, reduction=reduction, max_priority_within_buffer=within_buffer
    )
    index = torch.tensor([2, 0, 2, 2, 5])
    priority = torch.tensor([1.0, 5.0, 4.0, 2.0, 9.0])
    for sampler in (numpy_path, torch_path):
        sampler.update_priority(index, priority)
        sampler.update_priority(torch.tensor([5]), torch.tensor([0.5]))  # the max leaves slot 5
        sampler.extend(torch.tensor([7]))  # a rewrite gets the default priority
    _assert_same_state(numpy_path, torch_path)
    in_buffer = 7.0 if reduction == "sum" else 5.0  # slot 2 sums to 7; else slot 0 holds 5
    expected_top = in_buffer if within_buffer else 9.0  # in the buffer now, or ever seen
    assert torch_path._max_priority[0] == pytest.approx(expected_top, rel=1e-6)


def test_alpha_change_and_empty_match():
    numpy_path, torch_path = _pair(16, alpha=0.7, beta=0.5)
    for sampler in (numpy_path, torch_path):
        sampler.update_priority(torch.arange(16), torch.arange(16.0) + 1)
        sampler.alpha = 0.3
    _assert_same_state(numpy_path, torch_path)
    for sampler in (numpy_path, torch_path):
        sampler._empty()
        assert sampler.exhausted(Slots(16))
    _assert_same_state(numpy_path, torch_path)


def test_frequencies_follow_priorities_on_the_torch_path():
    priorities = torch.tensor([0.5, 1.0, 2.0, 4.0, 8.0])
    _, sampler = _pair(5, alpha=0.7, beta=0.5)
    sampler.update_priority(torch.arange(5), priorities)
    p = (priorities.double() + 1e-8) ** 0.7
    counts = torch.zeros(5)
    for _ in range(40):
        index, info = sampler.sample(Slots(5), 250)
        counts += torch.bincount(index, minlength=5)
        torch.testing.assert_close(
            info["priority_weight"].double(), ((p / p.min()) ** -0.5)[index], rtol=1e-5, atol=0
        )
    torch.testing.assert_close(counts / counts.sum(), (p / p.sum()).float(), atol=0.01, rtol=0)


@pytest.mark.parametrize("n", [1, 2])
def test_consume_after_n_matches(n):
    numpy_path, torch_path = _pair(40, alpha=1.0, beta=0.5, eps=0.0)
    priority = torch.arange(40.0) + 1
    for sampler in (numpy_path, torch_path):
        sampler.update_priority(torch.arange(40), priority)
        sampler.set_consume_after_n(n)
    storage = Slots(40)
    while not numpy_path.exhausted(storage):
        index_n, info_n = numpy_path.sample(storage, 7)
        index_t, info_t = torch_path.sample(storage, 7)
        assert torch.equal(index_n, index_t)
        assert index_t.unique().numel() == index_t.numel()  # distinct within a batch
        torch.testing.assert_close(info_t["priority_weight"], info_n["priority_weight"])
        # updates of consumed items keep them at zero weight
        numpy_path.update_priority(index_n, torch.full((index_n.numel(),), 50.0))
        torch_path.update_priority(index_t, torch.full((index_t.numel(),), 50.0))
        _assert_same_state(numpy_path, torch_path)
    assert torch_path.exhausted(storage) and torch_path._tree.total == 0
    with pytest.raises(RuntimeError, match="every item was consumed"):
        torch_path.sample(storage, 1)
    for sampler in (numpy_path, torch_path):
        sampler.extend(torch.tensor([3]))  # a rewrite: live again with the max priority seen
    _assert_same_state(numpy_path, torch_path)
    # consumed items keep a zero leaf, so the max seen only grows while they stay live
    assert float(torch_path._tree.leaves[3]) == (50.0 if n > 1 else 40.0)


# ---------------------------------------------------------------- validation
BAD_VALUES = [
    (torch.tensor([0, 1]), torch.tensor([1.0, float("nan")]), r"finite and >= 0.*\[1\]=nan"),
    (torch.tensor([0, 1]), torch.tensor([1e300, 1.0], dtype=torch.float64), r"\[0\]=inf"),
    (torch.tensor([0, 1]), torch.tensor([1.0, -0.5]), r">= 0.*\[1\]=-0.5"),
    # max_capacity=8: torchrl's tree (rbdata's, grown) holds 16 slots
    (torch.tensor([0, 16]), torch.tensor([1.0, 1.0]), r"index must lie in \[0, 16\).*\[1\]=16"),
    (torch.tensor([-1]), torch.tensor([1.0]), r"index must lie in \[0, 16\).*\[0\]=-1"),
]
# the validated path takes arguments of one length by contract: only the public one checks it
BAD_SHAPE = (
    torch.tensor([0, 1, 2]),
    torch.tensor([1.0, 2.0]),
    r"priority has shape \(2,\).*\(3,\)",
)


@pytest.mark.parametrize(
    ("index", "priority", "match", "fast"),
    [(*case, fast) for case in BAD_VALUES for fast in (False, True)] + [(*BAD_SHAPE, False)],
)
def test_invalid_update_changes_nothing_on_the_torch_path(index, priority, match, fast):
    _, sampler = _pair(8, alpha=0.7, beta=0.5)
    sampler.update_priority(torch.arange(8), torch.arange(8.0) + 1)
    before = sampler.state_dict()
    update = sampler._update_priority_validated if fast else sampler.update_priority
    with pytest.raises(ValueError, match=match):
        update(index, priority)
    after = sampler.state_dict()
    assert torch.equal(before["leaves"], after["leaves"])
    assert before["max_priority"] == after["max_priority"]
    assert sampler._tree.total == pytest.approx(float(after["leaves"].sum()))


def test_bounds_helpers():
    index = torch.tensor([3, 0, 7])
    assert index_top(index) == 7 and index_top(torch.tensor([2, -1])) >= 2**63
    assert priority_bounds(torch.tensor([2.0, 0.5, 4.0])) == (0.5, 4.0)
    assert update_bounds(index, torch.tensor([1.0, 2.0, 3.0])) == (7, 1.0, 3.0)


# ---------------------------------------------------------------- mass without a read
@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from([0.0, 0.0, 1.0, 3.0]), st.booleans()),
        min_size=1,
        max_size=30,
    )
)
def test_has_mass_is_exactly_whether_some_leaf_is_positive(steps):
    """The torch store skips reading the total after a positive write; it must never be wrong."""
    _, sampler = _pair(10, alpha=1.0, beta=1.0, eps=0.0)
    for slot, value, rewrite in steps:
        if rewrite:
            sampler.extend(torch.tensor([slot]))
        else:
            sampler.update_priority(torch.tensor([slot]), torch.tensor([value]))
        assert sampler._store.has_mass() == (float(sampler._tree.leaves.sum()) > 0)
        assert sampler.exhausted(Slots(10)) == (not float(sampler._tree.leaves.sum()) > 0)


# ---------------------------------------------------------------- state
def test_state_round_trips_between_the_paths(tmp_path):
    numpy_path, torch_path = _pair(32, alpha=0.7, beta=0.5)
    torch_path.update_priority(torch.arange(32), torch.arange(32.0) * 0.5)
    state = torch_path.state_dict()
    assert state["leaves"].device.type == "cpu"
    numpy_path.load_state_dict(state)
    _assert_same_state(numpy_path, torch_path)
    numpy_path.update_priority(torch.tensor([4]), torch.tensor([100.0]))
    numpy_path.dumps(tmp_path / "numpy")
    torch_path.loads(tmp_path / "numpy")
    _assert_same_state(numpy_path, torch_path)
    assert isinstance(torch_path._store, _TorchStore)  # loading kept the sampler's own store


# ---------------------------------------------------------------- device choice
def test_device_none_stays_on_the_cpu_with_a_cpu_storage():
    rb = rbdata.ReplayBuffer(
        storage=rbdata.LazyTensorStorage(64), sampler=rbdata.PrioritizedSampler(64, 0.7, 0.5)
    )
    rb.extend(torch.arange(64.0))
    _, info = rb.sample(8, return_info=True)
    rb.update_priority(info["index"], torch.ones(8))
    assert rb.sampler.device == torch.device("cpu") and isinstance(rb.sampler._store, _NumpyStore)


def test_a_cuda_storage_does_not_move_an_explicit_device():
    sampler = PrioritizedSampler(8, 0.7, 0.5, device="cpu")
    sampler.extend(torch.arange(8))
    sampler.sample(Slots(8, device="cuda"), 4)  # the device asked for wins (torchrl's rule)
    assert sampler.device == torch.device("cpu") and isinstance(sampler._store, _NumpyStore)


# ---------------------------------------------------------------- CUDA
@needs_cuda
@pytest.mark.parametrize("consume", [None, 2])
@pytest.mark.parametrize("within_buffer", [False, True])
def test_a_cuda_buffer_keeps_priorities_indices_and_weights_on_the_device(consume, within_buffer):
    rb = rbdata.ReplayBuffer(
        storage=rbdata.LazyTensorStorage(1000, device="cuda"),
        sampler=rbdata.PrioritizedSampler(1000, 0.7, 0.5, max_priority_within_buffer=within_buffer),
        consume_after_n_samples=consume,
    )
    rb.extend(torch.arange(1000.0, device="cuda"))
    _, info = rb.sample(64, return_info=True)
    sampler = rb.sampler
    assert sampler.device.type == "cuda" and isinstance(sampler._store, _TorchStore)
    assert info["index"].device.type == "cuda"
    assert info["priority_weight"].device.type == "cuda"
    priority = torch.full((info["index"].numel(),), 0.5, device="cuda")  # repeats agree
    rb.update_priority(info["index"], priority)
    assert sampler._tree.leaves.device.type == "cuda"
    if consume is None:
        expected = (priority.double() + 1e-8) ** 0.7
        torch.testing.assert_close(
            sampler._tree.leaves[info["index"]].double(), expected, rtol=1e-5, atol=0
        )
    state = sampler.state_dict()
    assert state["leaves"].device.type == "cpu"
    on_cpu = PrioritizedSampler(1000, 0.7, 0.5, max_priority_within_buffer=within_buffer)
    on_cpu.load_state_dict(state)
    assert torch.equal(on_cpu._tree.leaves, sampler._tree.leaves.cpu())


@needs_cuda
def test_cuda_sampler_matches_the_cpu_one_and_follows_a_cpu_generator():
    numpy_path = PrioritizedSampler(5000, 0.7, 0.5)
    on_cuda = PrioritizedSampler(5000, 0.7, 0.5, device="cuda")
    priority = torch.rand(5000, generator=torch.Generator().manual_seed(0)) + 0.01
    for sampler in (numpy_path, on_cuda):
        sampler.extend(torch.arange(5000))
        sampler.update_priority(torch.arange(5000), priority)
    _assert_same_state(numpy_path, on_cuda)
    on_cuda.set_rng(torch.Generator().manual_seed(3))  # a CPU generator drives the device draws
    first, info = on_cuda.sample(Slots(5000), 512)
    assert first.device.type == "cuda" and info["priority_weight"].device.type == "cuda"
    on_cuda.set_rng(torch.Generator().manual_seed(3))
    assert torch.equal(on_cuda.sample(Slots(5000), 512)[0], first)
    on_cuda._update_priority_validated(first, torch.zeros(512, device="cuda"))
    assert on_cuda._tree.leaves.device.type == "cuda"
    leaves = on_cuda._tree.leaves[first].cpu()
    torch.testing.assert_close(leaves, torch.full_like(leaves, 1e-8**0.7))
    with pytest.raises(ValueError, match=r"index must lie in \[0, 8192\)"):  # the tree's slots
        on_cuda._update_priority_validated(
            torch.tensor([8192], device="cuda"), torch.ones(1, device="cuda")
        )
