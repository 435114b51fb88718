"""Slice samplers over TensorDict episodes: shapes, sample/info keys, passes, arguments."""

from __future__ import annotations

import pytest
import torch

from ._describe import describe, keys_of, outcome
from ._instances import episodes
from ._libs import load, parity_gap

SLICE_INFO = ["('next', 'done')", "('next', 'terminated')", "('next', 'truncated')", "index"]
SAMPLE_KEYS = [
    "action", "episode", "index", "next.done", "next.observation", "next.reward",
    "next.terminated", "next.truncated", "observation",
]  # fmt: skip


def _buffer(ns, sampler, cls="TensorDictReplayBuffer", n=24):
    rb = getattr(ns, cls)(storage=ns.LazyTensorStorage(n), sampler=sampler, batch_size=8)
    rb.extend(episodes(n, 4))
    return rb


SAMPLERS = {
    "slice_len": lambda ns: ns.SliceSampler(slice_len=4, traj_key="episode"),
    "num_slices": lambda ns: ns.SliceSampler(num_slices=2, traj_key="episode"),
    "end_key": lambda ns: ns.SliceSampler(slice_len=4, end_key=("next", "done")),
    "default_keys": lambda ns: ns.SliceSampler(slice_len=4),
    "cache_values": lambda ns: ns.SliceSampler(slice_len=4, traj_key="episode", cache_values=True),
    "without_replacement": lambda ns: ns.SliceSamplerWithoutReplacement(
        slice_len=4, traj_key="episode"
    ),
    "without_replacement_drop_last": lambda ns: ns.SliceSamplerWithoutReplacement(
        num_slices=2, traj_key="episode", drop_last=True
    ),
}


@pytest.mark.parametrize("kind", SAMPLERS)
def test_slice_sample_shape_and_keys(lib, kind):
    data = _buffer(lib, SAMPLERS[kind](lib)).sample()
    assert keys_of(data) == SAMPLE_KEYS
    assert tuple(data.batch_size) == (8,)


def test_span_truncates_slices_at_the_edges(lib, request):
    """span=True: slices may start before/end after a trajectory, truncated there (<= 8 rows)."""
    torch.manual_seed(0)
    rb = _buffer(lib, lib.SliceSampler(slice_len=4, traj_key="episode", span=True))
    sizes = []
    for _ in range(10):  # seeded: torchrl 0.14.1 raises IndexError on some span draws
        data = rb.sample()
        assert keys_of(data) == SAMPLE_KEYS
        sizes.append(data.batch_size[0])
    assert max(sizes) <= 8 and min(sizes) < 8


@pytest.mark.parametrize("kind", SAMPLERS)
def test_slice_sample_info_keys(lib, request, kind):
    _, info = _buffer(lib, SAMPLERS[kind](lib)).sample(return_info=True)
    assert sorted(map(str, info)) == SLICE_INFO


def test_slice_info_index_is_a_tuple_of_coordinates(lib, request):
    parity_gap(
        request,
        lib,
        "slice samplers' info['index'] is a Tensor; torchrl: a tuple of coordinate tensors",
    )
    _, info = _buffer(lib, SAMPLERS["slice_len"](lib), cls="ReplayBuffer").sample(return_info=True)
    assert describe(info["index"]) == ("tuple", [("Tensor", (8,), "torch.int64")])


def test_slice_in_a_plain_replay_buffer(lib):
    data, info = _buffer(lib, SAMPLERS["slice_len"](lib), cls="ReplayBuffer").sample(
        return_info=True
    )
    assert keys_of(data) == [k for k in SAMPLE_KEYS if k != "index"]
    assert sorted(map(str, info)) == SLICE_INFO


def test_prioritized_slice_sample(prio_lib, request):
    sampler = prio_lib.PrioritizedSliceSampler(24, 0.7, 0.5, slice_len=4, traj_key="episode")
    data, info = _buffer(prio_lib, sampler).sample(return_info=True)
    assert keys_of(data) == sorted([*SAMPLE_KEYS, "priority_weight"])
    assert sorted(map(str, info)) == sorted([*SLICE_INFO, "priority_weight"])


def test_slice_without_replacement_pass():
    shapes = {}
    for name in ("torchrl", "rbdata"):
        ns = load(name)
        rb = _buffer(ns, SAMPLERS["without_replacement"](ns))
        shapes[name] = [tuple(b.batch_size) for b in rb]
    assert shapes["rbdata"] == shapes["torchrl"] == [(8,), (8,), (8,)]


@pytest.mark.parametrize(
    "kwargs,batch",
    [({"slice_len": 3, "strict_length": False}, 8), ({"slice_len": 4}, 6)],
    ids=["batch-not-multiple-of-slice_len", "batch-6-slice_len-4"],
)
def test_batch_not_divisible_by_slice_len(lib, request, kwargs, batch):
    rb = _buffer(lib, lib.SliceSampler(traj_key="episode", **kwargs))
    assert outcome(lambda: rb.sample(batch)) == ("raises", "RuntimeError")


@pytest.mark.parametrize(
    "kwargs",
    [{"slice_len": 4, "num_slices": 2}, {}],
    ids=["both", "neither"],
)
def test_slice_len_xor_num_slices(lib, request, kwargs):
    assert outcome(lambda: lib.SliceSampler(traj_key="episode", **kwargs)) == (
        "raises",
        "TypeError",
    )


def test_pad_output(lib, request):
    sampler = lib.SliceSampler(
        slice_len=6, traj_key="episode", pad_output=True, strict_length=False
    )
    rb = _buffer(lib, sampler)
    assert outcome(lambda: rb.sample(12), lambda d: tuple(d.batch_size)) == (12,)
