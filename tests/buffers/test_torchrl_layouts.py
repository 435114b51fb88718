"""torchrl 0.14's state layouts load into rbdata's components, or raise naming what not.

The layouts are written out here as torchrl 0.14.1 saves them (``tests/compat/
test_torchrl_checkpoints.py`` loads the files torchrl itself writes); a load
that fails changes nothing.
"""

from __future__ import annotations

from collections import OrderedDict

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)


def torchrl_tensor_storage(rows: torch.Tensor | TensorDict, length: int) -> dict:
    raw = rows.state_dict() if isinstance(rows, TensorDict) else rows
    return {"_storage": raw, "initialized": True, "_len": length}


@given(max_size=st.integers(1, 12), data=st.data())
def test_a_torchrl_tensor_state_loads_its_filled_rows(max_size, data):
    length = data.draw(st.integers(0, max_size))
    rows = torch.randn(max_size, 2)
    storage = LazyTensorStorage(max_size)
    storage.load_state_dict(torchrl_tensor_storage(rows, length))
    assert len(storage) == length
    if length:
        assert torch.equal(storage[:], rows[:length])


@pytest.mark.parametrize("kind", [LazyTensorStorage, LazyMemmapStorage])
def test_a_torchrl_tensordict_state_loads_nested_keys(kind):
    rows = TensorDict({"a": torch.arange(6), "n": {"b": torch.ones(6, 2)}}, [6])
    storage = kind(6)
    storage.load_state_dict(torchrl_tensor_storage(rows, 4))
    assert len(storage) == 4
    assert torch.equal(storage[:]["a"], torch.arange(4))
    assert storage[:]["n", "b"].shape == (4, 2)


def test_a_torchrl_tensordict_buffer_state_leaves_its_index_entry_out():
    rows = TensorDict({"a": torch.arange(4.0), "index": torch.arange(4)}, [4])
    state = {
        "_storage": torchrl_tensor_storage(rows, 4),
        "_sampler": {},
        "_writer": {"_cursor": 0, "_write_count": 4},
    }
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(4), batch_size=2)
    rb.load_state_dict(state)
    assert set(rb[:].keys()) == {"a"} and rb.write_count == 4
    rb.extend(TensorDict({"a": torch.zeros(1)}, [1]))  # the loaded buffer takes new rows
    assert rb[0]["a"] == 0


def test_an_uninitialized_torchrl_storage_state_loads_as_empty():
    storage = LazyTensorStorage(4)
    storage.set(slice(0, 2), torch.ones(2, 3))
    storage.load_state_dict({"_storage": {}, "initialized": False, "_len": 0})
    assert len(storage) == 0


@pytest.mark.parametrize(
    ("state", "match"),
    [
        (torchrl_tensor_storage(torch.ones(9, 3), 9), "holds 9 items; this storage has max_size 4"),
        (torchrl_tensor_storage(torch.ones(2, 3), 3), "_len=3 but holds fewer rows"),
        ({"_storage": [1, 2], "initialized": True, "_len": 2}, "is a list"),
        ({"_storage": torch.ones(2, 3), "_len": -1}, "'_len' must be an int >= 0"),
    ],
)
def test_a_torchrl_storage_state_that_does_not_fit_raises_and_changes_nothing(state, match):
    storage = LazyTensorStorage(4)
    storage.set(slice(0, 2), torch.zeros(2, 3))
    with pytest.raises(ValueError, match=match):
        storage.load_state_dict(state)
    assert len(storage) == 2 and torch.equal(storage[:], torch.zeros(2, 3))


def test_a_torchrl_state_of_a_multi_dim_storage_is_refused_by_name():
    storage = LazyTensorStorage(12, ndim=2)
    with pytest.raises(ValueError, match="ndim=2 is not read"):
        storage.load_state_dict(torchrl_tensor_storage(torch.ones(4, 3, 2), 4))


def test_a_torchrl_list_state_loads_objects_and_tensordicts():
    td = TensorDict({"a": torch.arange(3)}, [3])
    storage = ListStorage(6)
    storage.load_state_dict({"_storage": [1, "x", {"k": 2}, td.state_dict()]})
    assert len(storage) == 4
    assert storage.get(0) == 1 and storage.get(2) == {"k": 2}
    assert torch.equal(storage.get(3)["a"], torch.arange(3))


def torchrl_pass(remaining: list[int], drop_last: bool = False) -> OrderedDict:
    return OrderedDict(
        len_storage=8,
        _sample_list=torch.tensor(remaining),
        drop_last=drop_last,
        _ran_out=False,
    )


@given(remaining=st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True))
def test_a_torchrl_pass_continues_where_it_was(remaining):
    rb = ReplayBuffer(
        storage=LazyTensorStorage(8), sampler=SamplerWithoutReplacement(), batch_size=1
    )
    rb.extend(torch.arange(8))
    rb.sampler.load_state_dict(torchrl_pass(remaining))
    drawn = [int(rb.sample()) for _ in remaining]
    assert drawn == remaining  # torchrl hands the rest of its pass out in its order


@pytest.mark.parametrize(
    ("sampler", "state", "match"),
    [
        (SamplerWithoutReplacement(), torchrl_pass([1], drop_last=True), "drop_last=True"),
        (RandomSampler(), torchrl_pass([1]), "given to a RandomSampler"),
        (
            PrioritizedSampler(8, alpha=0.7, beta=0.5),
            {"_alpha": 0.7, "_beta": 0.5, "_eps": 1e-8, "_sum_tree": None, "_min_tree": None},
            "PrioritizedSampler state is not read.*_min_tree.*_sum_tree",
        ),
        (
            RandomSampler(),
            {"max_sample_count": 2, "_sample_count": torch.zeros(8), "_live_mask": None},
            "ConsumingSampler state",
        ),
    ],
)
def test_a_torchrl_sampler_state_rbdata_cannot_read_is_named(sampler, state, match):
    before = sampler.state_dict()
    with pytest.raises(ValueError, match=match):
        sampler.load_state_dict(state)
    after = sampler.state_dict()
    assert after.keys() == before.keys()
