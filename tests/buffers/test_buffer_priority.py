"""The checks of a buffer's priority update: the CPU checks and the device-keeping ones agree."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rbdata
from rbdata.buffers._priority_updates import _check_on_device, check_priority_update

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _outcome(check, index, priority, written):
    try:
        return check(index, priority, written)
    except (TypeError, ValueError) as err:
        return type(err), str(err)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.integers(-2, 12), max_size=6),
    st.lists(st.sampled_from([0.0, 0.5, 3.0, -1.0, float("nan"), float("inf")]), max_size=6),
    st.integers(1, 10),
)
def test_the_device_checks_agree_with_the_cpu_ones(slots, values, written):
    """``_check_on_device`` runs on any device: on CPU tensors it must give the CPU checks'
    results and errors (the same messages), whatever the inputs."""
    index, priority = torch.tensor(slots, dtype=torch.long), torch.tensor(values)
    if len(values) == 1:
        priority = priority[0]  # a scalar priority is broadcast
    expected = _outcome(check_priority_update, index, priority, written)
    got = _outcome(_check_on_device, index, priority, written)
    if isinstance(expected, tuple) and isinstance(expected[0], type):
        assert got == expected
    else:
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


@pytest.mark.parametrize("index", [torch.tensor([0.0]), torch.tensor([True])])
def test_the_device_checks_refuse_non_integer_slots(index):
    with pytest.raises(TypeError, match="index must hold integers"):
        _check_on_device(index, 1.0, 4)


@needs_cuda
def test_a_cuda_update_stays_on_the_device_with_generations():
    rb = rbdata.ReplayBuffer(
        storage=rbdata.LazyTensorStorage(100, device="cuda"),
        sampler=rbdata.PrioritizedSampler(100, 0.7, 0.5),
        writer=rbdata.RoundRobinWriter(track_generations=True),
    )
    rb.extend(torch.arange(100.0, device="cuda"))
    batch, info = rb.sample(16, return_info=True)
    assert info["index"].device.type == "cuda"
    assert info["index_generation"].device.type == "cuda"
    index, priority = check_priority_update(info["index"], torch.ones(16), len(rb))
    assert index.device.type == "cuda" and priority.device.type == "cuda"
    rb.update_priority(info["index"], torch.full((16,), 3.0), generation=info["index_generation"])
    leaves = rb.sampler._tree.leaves
    assert leaves.device.type == "cuda"
    torch.testing.assert_close(leaves[info["index"]], torch.full((16,), 3.0**0.7, device="cuda"))
