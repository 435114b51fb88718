"""Sample units: Transition (the default) and Sequence windows around sampled anchors."""

from __future__ import annotations

import pytest
import torch

from ._describe import describe, keys_of
from ._instances import episodes
from ._libs import parity_gap

BASE_KEYS = [
    "action", "episode", "index", "next.done", "next.observation", "next.reward",
    "next.terminated", "next.truncated", "observation",
]  # fmt: skip
SEQUENCE_INFO = [
    "anchor_index", "index", "learning_mask", "sequence_id", "step_in_sequence", "validity_mask",
]  # fmt: skip
_SEQUENCE = (
    "Sequence windows come back as [B, L] with burn_in_mask/bootstrap_mask/mask; torchrl returns "
    "a flat [B * L] batch with anchor_index, learning_mask, sequence_id, step_in_sequence, "
    "validity_mask"
)


def _buffer(ns, unit):
    rb = ns.TensorDictReplayBuffer(storage=ns.LazyTensorStorage(24), sample_unit=unit, batch_size=3)
    rb.extend(episodes(24, 4))
    return rb


def test_transition_is_the_default(lib):
    for unit in (None, lib.Transition()):
        data, info = _buffer(lib, unit).sample(return_info=True)
        assert keys_of(data) == BASE_KEYS
        assert sorted(info) == ["index"]
        assert tuple(data.batch_size) == (3,)


@pytest.mark.parametrize(
    "kwargs,window",
    [
        ({"length": 4}, 4),
        ({"length": 3, "burn_in": 1, "bootstrap": 1}, 5),
        ({"length": 2, "dilation": 2}, 2),
    ],
    ids=["length", "burn_in-bootstrap", "dilation"],
)
def test_sequence_layout(lib, request, kwargs, window):
    parity_gap(request, lib, _SEQUENCE)
    data, info = _buffer(lib, lib.Sequence(**kwargs)).sample(return_info=True)
    assert tuple(data.batch_size) == (3 * window,)
    assert sorted(info) == SEQUENCE_INFO
    assert describe(info["learning_mask"]) == ("Tensor", (3 * window,), "torch.bool")
    assert keys_of(data) == sorted([*BASE_KEYS, *SEQUENCE_INFO[:1], *SEQUENCE_INFO[2:]])


def test_sequence_learning_mask_marks_burn_in_and_bootstrap(lib, request):
    parity_gap(request, lib, _SEQUENCE)
    _, info = _buffer(lib, lib.Sequence(3, burn_in=1, bootstrap=1)).sample(return_info=True)
    mask = info["learning_mask"].reshape(3, 5)
    assert mask.tolist() == [[False, True, True, True, False]] * 3


@pytest.mark.parametrize("boundary", ["pad", "stop", "include_reset"])
def test_sequence_episode_boundary(lib, request, boundary):
    parity_gap(request, lib, "Sequence(episode_boundary=...) missing")
    data = _buffer(lib, lib.Sequence(4, episode_boundary=boundary)).sample()
    assert tuple(data.batch_size) == (12,)


def test_sequence_done_key(lib, request):
    parity_gap(request, lib, "Sequence(done_key=...) missing")
    data = _buffer(lib, lib.Sequence(4, done_key=("next", "terminated"))).sample()
    assert tuple(data.batch_size) == (12,)


def test_custom_sample_unit_protocol(lib):
    """A user SampleUnit written for torchrl: expand(index, info, storage) -> (index, info)."""

    class Doubled(lib.SampleUnit):
        def expand(self, index, info, storage):
            return torch.cat([index, index]), {**info, "index": torch.cat([index, index])}

    assert tuple(_buffer(lib, Doubled()).sample().batch_size) == (6,)
