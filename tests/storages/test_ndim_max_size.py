"""An ndim > 1 lazy storage rounds max_size up to whole items, as torchrl's (100 -> 102)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tensordict import TensorDict

from rbdata import CheckpointError, LazyMemmapStorage, LazyTensorStorage, ReplayBuffer


@pytest.mark.parametrize("make", [LazyTensorStorage, LazyMemmapStorage])
@pytest.mark.parametrize("shape,max_size", [((3, 22), 102), ((3, 8), 102), ((4, 5), 100)])
def test_max_size_rounds_up_to_whole_items(
    make: Any, shape: tuple[int, int], max_size: int
) -> None:
    rb = ReplayBuffer(storage=make(100, ndim=2))
    assert rb.storage.max_size == 100  # not laid out yet
    rb.extend(TensorDict({"a": torch.zeros(shape)}, list(shape)))
    assert rb.storage.max_size == max_size
    assert rb.storage.max_size_along_dim0 == max_size // shape[0]


def test_a_dump_loads_into_a_fresh_storage_of_the_requested_size(tmp_path: Path) -> None:
    rb = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2))
    rb.extend(TensorDict({"a": torch.arange(66.0).reshape(3, 22)}, [3, 22]))
    rb.dumps(tmp_path / "dump")
    fresh = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2))
    fresh.loads(tmp_path / "dump")
    assert fresh.storage.max_size == 102
    assert torch.equal(fresh[:]["a"], rb[:]["a"])
    other = ReplayBuffer(storage=LazyMemmapStorage(90, ndim=2))  # rounds to 90 or 93, not 102
    with pytest.raises(CheckpointError, match="max_size"):
        other.loads(tmp_path / "dump")


@pytest.mark.parametrize(
    "checkpointer", [None, "H5StorageCheckpointer", "NestedStorageCheckpointer"]
)
def test_checkpoint_py_loop_round_trips_every_iteration(tmp_path: Path, checkpointer: Any) -> None:
    """torchrl's examples/replay-buffers/checkpoint.py: extend, dumps, loads, compare, repeated."""
    import rbdata

    if checkpointer == "H5StorageCheckpointer":
        pytest.importorskip("h5py")
    rb = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2))
    rb_test = ReplayBuffer(storage=LazyMemmapStorage(100, ndim=2))
    if checkpointer is not None:
        rb.storage.checkpointer = getattr(rbdata, checkpointer)()
        rb_test.storage.checkpointer = getattr(rbdata, checkpointer)()
    for step in range(6):  # 66 cells a batch in 102: the writes wrap
        start = 66 * step
        data = TensorDict(
            {
                "obs": torch.arange(start, start + 66.0).reshape(3, 22),
                ("next", "done"): torch.zeros(3, 22, 1, dtype=torch.bool),
            },
            [3, 22],
        )
        rb.extend(data)
        assert rb.storage.max_size == 102
        rb.dumps(tmp_path / "dump")
        rb_test.loads(tmp_path / "dump")
        assert len(rb_test) == len(rb)
        assert torch.equal(rb_test[:]["obs"], rb[:]["obs"])
        assert torch.equal(rb_test[:]["next", "done"], rb[:]["next", "done"])
