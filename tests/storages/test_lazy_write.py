"""A lazy stack of items (a collector's output) is written through views of the rows.

torchrl's ``test_extend_lazystack_direct_write``: the batch is written with
``TensorDictBase.update_at_``, the first write included; members that do not match the
stored layout take the ordinary write, which reports what differs.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from tensordict import LazyStackedTensorDict, TensorDict, TensorDictBase

from rbdata import LazyMemmapStorage, LazyTensorStorage, ReplayBuffer

STORAGES = [LazyTensorStorage, LazyMemmapStorage]


def _items(n: int, shift: float = 0.0) -> LazyStackedTensorDict:
    tds = [
        TensorDict(obs=torch.full((4, 8), i + shift), action=torch.full((2,), -i - shift))
        for i in range(n)
    ]
    return LazyStackedTensorDict.lazy_stack(tds, dim=0)


class _Calls:
    """Counts the calls of ``TensorDictBase.update_at_`` (patched with :meth:`method`)."""

    def __init__(self) -> None:
        self.count = 0
        original = TensorDictBase.update_at_

        def update_at_(td, *args, **kwargs):
            self.count += 1
            return original(td, *args, **kwargs)

        self.method = update_at_


@pytest.mark.parametrize("storage_type", STORAGES)
def test_a_lazy_stack_of_items_is_written_with_update_at(storage_type):
    rb = ReplayBuffer(storage=storage_type(15))
    data = _items(10)
    calls = _Calls()
    with mock.patch.object(TensorDictBase, "update_at_", calls.method):
        rb.extend(data)  # the first write, which lays the rows out
        assert calls.count == 1
        rb.extend(_items(10, shift=100.0))  # wraps around: slots 10..14 then 0..4
        assert calls.count > 1  # (the writer may split a wrapping write in two runs)
    assert len(rb) == 15
    dense = _items(10, shift=100.0).to_tensordict()
    order = torch.tensor([10, 11, 12, 13, 14, 0, 1, 2, 3, 4])
    assert torch.equal(rb[order]["obs"], dense["obs"])
    assert torch.equal(rb[order]["action"], dense["action"])
    assert torch.equal(rb[5:10]["obs"], data.to_tensordict()["obs"][5:10])


def test_a_member_of_another_shape_is_refused_and_nothing_is_written():
    rb = ReplayBuffer(storage=LazyTensorStorage(15))
    rb.extend(_items(3))
    tds = list(_items(2, shift=50.0).tensordicts)
    tds[1] = TensorDict(obs=torch.zeros(5, 8), action=torch.zeros(2))
    with pytest.raises((ValueError, RuntimeError)):
        rb.extend(LazyStackedTensorDict(*tds, stack_dim=0))
    assert len(rb) == 3
    assert torch.equal(rb[:]["obs"], _items(3).to_tensordict()["obs"])


def test_a_lazy_stack_lacking_a_key_takes_the_ordinary_write():
    rb = ReplayBuffer(storage=LazyTensorStorage(15))
    rb.extend(_items(3))
    partial = LazyStackedTensorDict.lazy_stack(
        [TensorDict(obs=torch.ones(4, 8)) for _ in range(2)], dim=0
    )
    calls = _Calls()
    with (
        mock.patch.object(TensorDictBase, "update_at_", calls.method),
        pytest.warns(UserWarning, match="written as zeros"),
    ):
        rb.extend(partial)
    assert calls.count == 0
    assert len(rb) == 5
    assert torch.equal(rb[3:5]["action"], torch.zeros(2, 2))
