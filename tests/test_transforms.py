"""PolicyAgeFilter (rbdata/transforms.py): rows, errors, and the element rule."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import Compose, LazyTensorStorage, PolicyAgeFilter, ReplayBuffer, Transform


def test_a_row_of_2d_data_is_kept_only_if_its_oldest_element_is_fresh():
    versions = torch.tensor([[3, 5, 5, 5], [4, 5, 5, 2]])
    data = TensorDict({"obs": torch.randn(2, 4), "policy_version": versions}, [2, 4])
    out = PolicyAgeFilter(5, max_policy_lag=2)(data)
    assert out.batch_size == torch.Size([1, 4])
    assert torch.equal(out["policy_version"], versions[:1])


@settings(max_examples=40, deadline=None)
@given(
    versions=st.lists(st.lists(st.integers(0, 9), min_size=3, max_size=3), min_size=1, max_size=6),
    lag=st.integers(0, 9),
)
def test_rows_kept_are_exactly_those_whose_min_version_is_within_the_lag(versions, lag):
    stamped = torch.tensor(versions)
    data = TensorDict({"policy_version": stamped}, list(stamped.shape))
    out = PolicyAgeFilter(9, max_policy_lag=lag)(data)
    expected = [row for row in versions if 9 - min(row) <= lag]
    assert out["policy_version"].tolist() == expected


def test_flat_data_is_filtered_element_by_element_on_extend():
    rb = ReplayBuffer(storage=LazyTensorStorage(10), transform=PolicyAgeFilter(3, max_policy_lag=1))
    rb.extend(TensorDict({"policy_version": torch.tensor([0, 2, 2, 3])}, [4]))
    assert len(rb) == 3


def test_bad_lag_names_the_argument():
    with pytest.raises(ValueError, match="max_policy_lag must be a non-negative int, got -1"):
        PolicyAgeFilter(3, max_policy_lag=-1)
    with pytest.raises(TypeError, match=r"max_policy_lag must be a non-negative int, got float"):
        PolicyAgeFilter(3, max_policy_lag=1.5)  # type: ignore[arg-type]


def test_strict_missing_key_error_names_the_filter():
    data = TensorDict({"obs": torch.randn(4, 3)}, [4])
    assert PolicyAgeFilter(3, max_policy_lag=1)(data).batch_size[0] == 4
    with pytest.raises(KeyError, match="PolicyAgeFilter: policy_version_key 'policy_version'"):
        PolicyAgeFilter(3, max_policy_lag=1, strict=True)(data)


class _Counting(Transform):
    """Keeps write state (a count of rows written) that a shared buffer must share."""

    requires_shared_write_state = True

    def __init__(self) -> None:
        super().__init__()
        self.count = torch.zeros(1)

    def share_memory_(self) -> _Counting:
        self.count.share_memory_()
        return self


class _Unshareable(Transform):
    requires_shared_write_state = True


def test_a_shared_buffer_shares_each_transforms_write_state() -> None:
    counting = _Counting()
    rb = ReplayBuffer(storage=LazyTensorStorage(4), shared=True, transform=Compose(counting))
    rb.extend(torch.arange(2))
    assert counting.count.is_shared()
    rb.append_transform(lambda x: x)  # a plain callable keeps no write state: nothing to share


def test_a_transform_with_write_state_it_cannot_share_is_refused() -> None:
    assert Transform().share_memory_() is not None  # no write state: nothing to move
    with pytest.raises(RuntimeError, match="_Unshareable keeps replay-buffer write state"):
        Compose(lambda x: x, _Unshareable()).share_memory_()
    with pytest.raises(RuntimeError, match="does not implement share_memory_"):
        ReplayBuffer(storage=LazyTensorStorage(4), shared=True, transform=_Unshareable()).extend(
            torch.arange(2)
        )
