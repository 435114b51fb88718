"""distinct_sorted: np.unique's result, by sorting (the live set and consumed ring use it)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from rbdata.samplers._distinct import distinct_sorted


@given(st.lists(st.integers(min_value=-(2**62), max_value=2**62), max_size=300))
def test_distinct_sorted_is_np_unique(values: list[int]) -> None:
    array = np.array(values, dtype=np.int64)
    out = distinct_sorted(array)
    assert out.dtype == np.int64
    assert out.tolist() == np.unique(array).tolist()


def test_distinct_sorted_leaves_its_input_alone() -> None:
    array = np.array([3, 1, 3, 2])
    assert distinct_sorted(array).tolist() == [1, 2, 3]
    assert array.tolist() == [3, 1, 3, 2]
