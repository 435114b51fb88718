"""Items of the reference page (torchrl's ReplayBuffer page) that rbdata once got wrong."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    TensorStorage,
)


@pytest.mark.parametrize("make", [LazyTensorStorage, ListStorage, LazyMemmapStorage])
def test_set_storage_writes_from_the_new_storages_first_slot(make: Any) -> None:
    rb = ReplayBuffer(storage=make(10))
    rb.extend(torch.arange(3))
    prev = rb.set_storage(make(10))
    assert len(prev) == 3 and len(rb) == 0
    rb.extend(torch.arange(4, 7))
    assert len(rb) == 3
    assert torch.as_tensor(rb[:]).tolist() == [4, 5, 6]  # no empty row before them
    assert set(torch.as_tensor(rb.sample(30)).tolist()) <= {4, 5, 6}


def test_set_storage_holding_data_continues_after_its_items() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=PrioritizedSampler(10, 0.7, 0.5))
    rb.extend(torch.arange(3))
    rb.set_storage(TensorStorage(torch.arange(10, 15), max_size=5))
    assert len(rb) == 5
    assert set(rb.sample(64).tolist()) == {10, 11, 12, 13, 14}  # its items are sampleable
    rb.extend(torch.tensor([20]))  # full: wraps to slot 0
    assert rb[:].tolist() == [20, 11, 12, 13, 14]


def test_sample_with_another_batch_size_warns_once() -> None:
    rb = ReplayBuffer(storage=ListStorage(10), batch_size=3)
    rb.extend(list(range(10)))
    with pytest.warns(UserWarning, match=r"conflicting batch_sizes in constructor \(3\)"):
        assert len(rb.sample(2)) == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rb.sample(2)  # once, as torchrl
        rb.sample(3)
        rb.sample()


def test_drop_last_sampler_with_another_batch_size_says_it_is_not_supported() -> None:
    rb = ReplayBuffer(
        storage=ListStorage(10), sampler=SamplerWithoutReplacement(drop_last=True), batch_size=3
    )
    rb.extend(list(range(10)))
    with pytest.warns(UserWarning, match="drop_last=True.*not supported"):
        rb.sample(2)


def test_a_tuple_given_to_a_list_storage_is_refused_and_changes_nothing() -> None:
    rb = ReplayBuffer(storage=ListStorage(10))
    rb.extend([1, 2])
    with pytest.raises(TypeError, match="tuple"):
        rb.extend((torch.zeros(2), torch.ones(2)))
    assert len(rb) == 2 and rb.write_count == 2
    tree = ReplayBuffer(storage=LazyTensorStorage(10))  # a tensor storage takes the PyTree
    tree.extend((torch.zeros(2), torch.ones(2)))
    assert len(tree) == 2


def test_save_and_load_hooks_get_torchrls_keywords(tmp_path: Path) -> None:
    seen: list[tuple[str, Any]] = []

    def save_hook(data: Any, path: Any) -> Any:
        seen.append(("save", Path(path)))
        return data

    def load_hook(data: Any, out: Any) -> Any:
        seen.append(("load", out))
        return data

    rb = ReplayBuffer(storage=LazyTensorStorage(4))
    rb.register_save_hook(save_hook)
    rb.extend(torch.arange(4))
    rb.dumps(tmp_path / "dump")
    other = ReplayBuffer(storage=LazyTensorStorage(4))
    other.register_load_hook(load_hook)
    other.loads(tmp_path / "dump")
    assert other[:].tolist() == [0, 1, 2, 3]
    assert seen == [("save", tmp_path / "dump"), ("load", None)]
