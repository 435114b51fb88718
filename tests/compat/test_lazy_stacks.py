"""Ragged lazy stacks in tensor storages: stored, sampled and read back as torchrl does."""

from __future__ import annotations

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict

from ._libs import load


def _ragged(n):
    first = TensorDict(a=torch.arange(n * 4.0).reshape(n, 4), batch_size=[n])
    second = TensorDict(a=-torch.arange(n * 3.0).reshape(n, 3), batch_size=[n])
    return LazyStackedTensorDict(first, second, stack_dim=1)


def _run(ns, storage, tmp_path):
    kwargs = {"scratch_dir": tmp_path / ns.name} if storage == "LazyMemmapStorage" else {}
    rb = ns.ReplayBuffer(storage=getattr(ns, storage)(6, **kwargs), batch_size=3)
    rb.extend(_ragged(5))
    torch.manual_seed(0)
    sample = rb.sample()
    rb.extend(_ragged(3))  # wraps around
    stored = rb[:]
    return (
        len(rb),
        type(sample).__name__,
        tuple(sample.batch_size),
        sample.stack_dim,
        [[m["a"].tolist() for m in stored[i].unbind(0)] for i in range(len(rb))],
    )


@pytest.mark.parametrize("storage", ["LazyTensorStorage", "LazyMemmapStorage"])
def test_a_ragged_lazy_stack_is_kept_like_torchrl(storage, tmp_path):
    assert _run(load("rbdata"), storage, tmp_path) == _run(load("torchrl"), storage, tmp_path)
