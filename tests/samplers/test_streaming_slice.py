"""StreamingSliceSampler: each completed window once, oldest first, then uniform slices."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, StreamingSliceSampler, TensorDictReplayBuffer


def _write(rb: TensorDictReplayBuffer, start: int, n: int, done_at: int | None = None) -> None:
    done = torch.zeros(n, 1, dtype=torch.bool)
    if done_at is not None:
        done[done_at] = True
    rb.extend(TensorDict({"value": torch.arange(start, start + n), ("next", "done"): done}, [n]))


def _buffer(max_size: int = 32) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(max_size),
        sampler=StreamingSliceSampler(slice_len=3),
        batch_size=6,
    )


def test_fresh_windows_come_first_and_once() -> None:
    rb = _buffer()
    _write(rb, 0, 6)
    assert rb.sample()["value"].reshape(2, 3).tolist() == [[0, 1, 2], [3, 4, 5]]
    _write(rb, 6, 3)
    values = rb.sample()["value"].reshape(2, 3).tolist()
    assert values[0] == [6, 7, 8]  # the one fresh window, then a uniform slice
    assert values[1] in [[i, i + 1, i + 2] for i in range(7)]


def test_a_tail_waits_for_the_rest_of_its_trajectory_and_ends_cut_windows() -> None:
    rb = _buffer()
    _write(rb, 0, 4)  # [0 1 2] queued, [3] waits
    _write(rb, 4, 5, done_at=2)  # 3 4 5 6(done) | 7 8: [3 4 5] queued; [6] ends; [7 8] waits
    first = rb.sample()["value"].reshape(2, 3).tolist()
    assert first == [[0, 1, 2], [3, 4, 5]]
    _write(rb, 9, 1)  # [7 8 9] completes
    assert rb.sample()["value"].reshape(2, 3).tolist()[0] == [7, 8, 9]


def test_overwritten_windows_are_dropped() -> None:
    rb = _buffer(max_size=6)
    _write(rb, 0, 6)
    _write(rb, 6, 3)  # slots 0-2 rewritten: the window [0 1 2] is gone
    windows = rb.sample()["value"].reshape(2, 3).tolist()
    assert windows[0] == [3, 4, 5] and windows[1] == [6, 7, 8]


def test_info_marks_slice_ends() -> None:
    rb = _buffer()
    _write(rb, 0, 6)
    _, info = rb.sample(return_info=True)
    assert info[("next", "truncated")].view(-1).tolist() == [False, False, True] * 2


def test_state_round_trip_keeps_the_queue() -> None:
    rb = _buffer()
    _write(rb, 0, 7)
    rb.sample(3)  # cuts: [0 1 2] drawn, [3 4 5] queued, [6] pending
    other = TensorDictReplayBuffer(
        storage=LazyTensorStorage(32), sampler=StreamingSliceSampler(slice_len=3), batch_size=6
    )
    other.load_state_dict(rb.state_dict())
    assert other.sample(3)["value"].tolist() == [3, 4, 5]
    with pytest.raises(ValueError, match="slice_len"):
        StreamingSliceSampler(slice_len=4).load_state_dict(rb.sampler.state_dict())


def test_errors() -> None:
    with pytest.raises(TypeError, match="slice_len"):
        StreamingSliceSampler(slice_len=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slice_len"):
        StreamingSliceSampler(slice_len=0)
    rb = _buffer()
    _write(rb, 0, 6)
    with pytest.raises(ValueError, match="slice length"):
        rb.sample(4)
