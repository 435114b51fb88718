"""Tests of find_start_stop_traj (trajectory boundaries of storage-ordered data)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import LazyTensorStorage, find_start_stop_traj, iter_trajectories
from rbdata.query import run_query


def ends_at(length: int, *rows: int) -> torch.Tensor:
    end = torch.zeros(length, dtype=torch.bool)
    end[list(rows)] = True
    return end


def flat(result: tuple[torch.Tensor, ...]) -> tuple[list[int], list[int], list[int]]:
    start, stop, lengths = result
    return start[:, 0].tolist(), stop[:, 0].tolist(), lengths.tolist()


def test_full_ring_with_a_cursor():
    found = find_start_stop_traj(end=ends_at(10, 2, 7), at_capacity=True, cursor=4)
    assert flat(found) == ([8, 3, 5], [2, 4, 7], [5, 2, 3])  # 8..2 wraps around


@pytest.mark.parametrize("cursor", [4, torch.tensor([2, 3, 4]), torch.tensor(4), range(2, 5)])
def test_cursor_kinds(cursor):
    found = find_start_stop_traj(end=ends_at(10, 2, 7), at_capacity=True, cursor=cursor)
    assert flat(found)[1] == [2, 4, 7]


def test_ids_give_the_same_boundaries():
    ids = torch.tensor([5, 5, 5, 0, 0, 1, 1, 1, 5, 5])
    assert flat(find_start_stop_traj(trajectory=ids, at_capacity=True)) == (
        [8, 3, 5],
        [2, 4, 7],
        [5, 2, 3],
    )
    assert flat(find_start_stop_traj(trajectory=ids, at_capacity=False)) == (
        [0, 3, 5, 8],
        [2, 4, 7, 9],
        [3, 2, 3, 2],
    )


def test_partial_storage_ends_at_its_last_row_and_leaves_the_input_alone():
    end = ends_at(6, 2)
    assert flat(find_start_stop_traj(end=end, at_capacity=False)) == ([0, 3], [2, 5], [3, 3])
    assert not end[5]
    assert flat(find_start_stop_traj(end=torch.zeros(4, dtype=torch.bool), at_capacity=True)) == (
        [0],
        [3],
        [4],
    )
    for at_capacity in (True, False):
        single = find_start_stop_traj(trajectory=torch.tensor([3]), at_capacity=at_capacity)
        assert flat(single) == ([0], [0], [1])


def test_lanes_after_time():
    ids = torch.tensor([[0, 3], [0, 3], [1, 3], [1, 4], [1, 4]])
    start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=False)
    assert start.tolist() == [[0, 0], [2, 0], [0, 1], [3, 1]]
    assert stop.tolist() == [[1, 0], [4, 0], [2, 1], [4, 1]]
    assert lengths.tolist() == [2, 3, 3, 2]


def test_errors():
    end = ends_at(4, 1)
    with pytest.raises(TypeError, match="Exactly one"):
        find_start_stop_traj(at_capacity=True)
    with pytest.raises(TypeError, match="Exactly one"):
        find_start_stop_traj(trajectory=torch.zeros(4), end=end, at_capacity=True)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        find_start_stop_traj(end=[True, False], at_capacity=False)
    for bad in (torch.tensor([], dtype=torch.long), range(0)):
        with pytest.raises(ValueError, match="cursor must not be an empty"):
            find_start_stop_traj(end=end, at_capacity=True, cursor=bad)
    with pytest.raises(RuntimeError, match="outside the 4 rows"):  # also a RuntimeError
        find_start_stop_traj(end=end, at_capacity=True, cursor=4)
    with pytest.raises(TypeError, match="cursor must be an int"):
        find_start_stop_traj(end=end, at_capacity=True, cursor=1.5)
    with pytest.raises(RuntimeError, match="empty"):
        find_start_stop_traj(end=torch.zeros(0, dtype=torch.bool), at_capacity=True)
    with pytest.raises(ValueError, match="at least 1-dimensional"):
        find_start_stop_traj(end=torch.tensor(True), at_capacity=True)


@given(st.lists(st.integers(0, 2), min_size=1, max_size=12), st.integers(1, 3))
def test_lanes_are_partitioned(values, lanes):
    ids = torch.tensor(values).unsqueeze(1).expand(-1, lanes) + torch.arange(lanes) % 2
    length = ids.shape[0]
    for at_capacity in (True, False):
        start, stop, lengths = find_start_stop_traj(trajectory=ids, at_capacity=at_capacity)
        for lane in range(lanes):
            mine = start[:, 1] == lane
            assert int(lengths[mine].sum()) == length  # every row of the lane, once
            rows = [
                (int(s) + k) % length
                for s, n in zip(start[mine, 0], lengths[mine], strict=True)
                for k in range(int(n))
            ]
            assert sorted(rows) == list(range(length))
            for s, n in zip(start[mine, 0].tolist(), lengths[mine].tolist(), strict=True):
                span = ids[[(s + k) % length for k in range(n)], lane]
                assert bool((span == span[0]).all())  # one id per trajectory


@given(st.lists(st.integers(0, 3), min_size=1, max_size=15))
def test_flat_ids_match_iter_trajectories(values):
    ids = torch.tensor(values)
    _, _, lengths = find_start_stop_traj(trajectory=ids, at_capacity=False)
    split = iter_trajectories(TensorDict({"episode": ids}, [ids.numel()]))
    assert lengths.tolist() == [t.length for t in split]


@given(st.lists(st.integers(1, 4), min_size=2, max_size=8), st.data())
def test_full_ring_matches_a_query(episode_lengths, draw):
    ids = torch.cat([torch.full((n,), i) for i, n in enumerate(episode_lengths)])
    capacity = draw.draw(st.integers(1, ids.numel()), label="capacity")
    storage = LazyTensorStorage(capacity)
    written = 0
    for row in ids.split(3):
        slots = torch.arange(written, written + row.numel()) % capacity
        storage.set(slots, TensorDict({"episode": row}, [row.numel()]))
        written += row.numel()
    slot_ids = storage.get(torch.arange(capacity))["episode"]
    _, _, lengths = find_start_stop_traj(
        trajectory=slot_ids, at_capacity=True, cursor=(written - 1) % capacity
    )
    queried = [t.length for t in run_query(storage, cursor=written % capacity)]
    assert sorted(lengths.tolist()) == sorted(queried)


def test_a_bad_device_is_refused():
    end = torch.zeros(4, dtype=torch.bool)
    with pytest.raises(RuntimeError):
        find_start_stop_traj(end=end, at_capacity=False, device="not-a-device")
    start, _, _ = find_start_stop_traj(end=end, at_capacity=False, device="cpu")
    assert start.device.type == "cpu"
