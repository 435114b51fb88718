"""What slice samplers return beside the index, and how they find trajectories (torchrl's rules)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    PrioritizedSliceSampler,
    ReplayBuffer,
    SliceSampler,
    SliceSamplerWithoutReplacement,
    TensorDictReplayBuffer,
)

MASK = ("collector", "mask")
TRUNCATED, DONE, TERMINATED = ("next", "truncated"), ("next", "done"), ("next", "terminated")


def trajectories(*lengths: int, **extra: torch.Tensor) -> TensorDict:
    """Consecutive trajectories with ``traj`` ids, ``step`` numbers and ``is_init`` flags."""
    traj = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    data = {"traj": traj, "step": step, "is_init": (step == 0).unsqueeze(-1), **extra}
    return TensorDict(data, [traj.numel()])


def buffer(sampler, data: TensorDict, batch_size: int, cls=TensorDictReplayBuffer):
    rb = cls(storage=LazyTensorStorage(data.shape[0]), sampler=sampler, batch_size=batch_size)
    rb.extend(data)
    return rb


def rows_of(mask: torch.Tensor, width: int) -> torch.Tensor:
    return mask.view(-1, width)


# ------------------------------------------------------------------ info entries
def test_info_entries_have_torchrl_shapes_and_dtypes():
    done = torch.zeros(20, 1, dtype=torch.bool)
    done[[9, 19]] = True
    data = trajectories(10, 10, **{"next": TensorDict({"done": done}, [20])})
    rb = buffer(SliceSampler(slice_len=4), data, 8, cls=ReplayBuffer)
    torch.manual_seed(0)
    _, info = rb.sample(return_info=True)
    for key in (TRUNCATED, DONE, TERMINATED, "is_init"):
        assert info[key].shape == (8, 1) and info[key].dtype == torch.bool, key
    assert "slice_id" not in info and MASK not in info
    assert (
        rows_of(info[TRUNCATED], 4)[:, -1].all() and not rows_of(info[TRUNCATED], 4)[:, :-1].any()
    )
    assert not info[TERMINATED].any()  # not stored: False


def test_done_keeps_the_stored_flags_inside_a_slice():
    # trajectories come from the ids; a stored done flag inside a slice stays set, as in torchrl
    done = (torch.arange(30) % 3 == 0).view(30, 1)
    terminated = (torch.arange(30) % 5 == 0).view(30, 1)
    data = trajectories(30, **{"next": TensorDict({"done": done, "terminated": terminated}, [30])})
    sampler = SliceSampler(slice_len=6, traj_key="traj")
    torch.manual_seed(0)
    batch = buffer(sampler, data, 12).sample()
    assert torch.equal(batch[DONE], done[batch["step"]] | batch[TRUNCATED])
    assert torch.equal(batch[TERMINATED], terminated[batch["step"]])


def test_truncated_key_none_and_nested_truncated_key():
    data = trajectories(8, 8)
    sampler = SliceSampler(slice_len=4, traj_key="traj", truncated_key=None, init_key=None)
    _, info = buffer(sampler, data, 8, ReplayBuffer).sample(return_info=True)
    assert set(info) == {"index"}
    sampler = SliceSampler(slice_len=4, traj_key="traj", truncated_key=("a", "cut"))
    rb = buffer(sampler, data, 8, ReplayBuffer)
    _, info = rb.sample(return_info=True)
    assert {("a", "cut"), ("a", "done"), ("a", "terminated")} <= set(info)


# ------------------------------------------------------------------ is_init
@pytest.mark.parametrize(
    "make",
    [
        lambda: SliceSampler(num_slices=4, traj_key="traj", strict_length=False),
        lambda: SliceSampler(slice_len=5, traj_key="traj", strict_length=False, pad_output=True),
        lambda: SliceSamplerWithoutReplacement(num_slices=4, traj_key="traj"),
        lambda: PrioritizedSliceSampler(27, 1.0, 1.0, slice_len=5, traj_key="traj"),
    ],
)
def test_every_slice_starts_with_is_init(make):
    data = trajectories(3, 8, 2, 7, 7)
    data["is_init"][4] = True  # a stored reset inside a trajectory is kept
    rb = buffer(make(), data, 20)
    torch.manual_seed(0)
    for _ in range(10):
        batch = rb.sample()
        is_init = batch["is_init"].view(-1)
        ends = batch[TRUNCATED].view(-1).nonzero().view(-1)
        starts = torch.cat([torch.zeros(1, dtype=torch.long), ends[:-1] + 1])
        if MASK in batch.keys(True):  # padded slices all start at multiples of slice_len
            starts = torch.arange(0, batch.shape[0], 5)
        assert is_init[starts].all()
        expected = data["is_init"].view(-1)[batch["index"]]  # stored flags are kept...
        expected[starts] = True  # ... and every slice start is marked
        assert torch.equal(is_init, expected)


def test_is_init_is_not_made_up_nor_touched_with_init_key_none():
    data = trajectories(6, 6)
    del data["is_init"]
    rb = buffer(SliceSampler(slice_len=3, traj_key="traj"), data, 6)
    assert "is_init" not in rb.sample().keys()
    data = trajectories(6, 6)
    rb = buffer(SliceSampler(slice_len=3, traj_key="traj", init_key=None), data, 60)
    batch = rb.sample()
    assert torch.equal(batch["is_init"].view(-1), batch["step"] == 0)


# ------------------------------------------------------------------ pad_output
@given(st.lists(st.integers(1, 9), min_size=1, max_size=6), st.integers(1, 6), st.integers(1, 4))
@settings(max_examples=40, deadline=None)
def test_pad_output_gives_full_batches_with_a_mask(lengths, slice_len, num_slices):
    data = trajectories(*lengths)
    sampler = SliceSampler(
        slice_len=slice_len, traj_key="traj", strict_length=False, pad_output=True
    )
    rb = buffer(sampler, data, slice_len * num_slices)
    batch = rb.sample()
    if min(lengths) >= slice_len:  # nothing to pad: no mask, as in torchrl
        assert MASK not in batch.keys(True) and batch.shape == (slice_len * num_slices,)
        return
    assert batch.shape == (slice_len * num_slices,)
    mask = rows_of(batch[MASK], slice_len)
    assert batch[MASK].dtype == torch.bool and batch[MASK].shape == batch.shape
    real = mask.sum(1)
    assert (real >= 1).all()
    assert torch.equal(mask, torch.arange(slice_len) < real.unsqueeze(1))  # real steps first
    step, traj = rows_of(batch["step"], slice_len), rows_of(batch["traj"], slice_len)
    truncated = rows_of(batch[TRUNCATED].view(-1), slice_len)
    for row in range(num_slices):
        n = int(real[row])
        assert (traj[row] == traj[row, 0]).all()
        assert torch.equal(step[row, :n], step[row, 0] + torch.arange(n))
        assert (step[row, n:] == step[row, n - 1]).all()  # padding repeats the last real step
        assert truncated[row, n - 1] and int(truncated[row].sum()) == 1
        assert n == min(slice_len, lengths[int(traj[row, 0])] - int(step[row, 0]))
    assert rows_of(batch["is_init"].view(-1), slice_len)[:, 0].all()


def test_pad_output_needs_strict_length_false():
    with pytest.raises(ValueError, match="pad_output=True is incompatible with strict_length"):
        SliceSampler(slice_len=4, pad_output=True)


# ------------------------------------------------------------------ markers
def test_auto_detection_prefers_collector_ids_and_reports_the_key():
    data = trajectories(4, 4)
    data["collector", "traj_ids"] = data["traj"].clone()
    data["episode"] = torch.zeros(8, dtype=torch.long)  # ignored: collector ids win
    sampler = SliceSampler(num_slices=2)
    assert sampler.traj_key is None and sampler.end_key == DONE
    batch = buffer(sampler, data, 6).sample()
    assert sampler.traj_key == ("collector", "traj_ids")
    ids = batch["collector", "traj_ids"].view(2, 3)
    assert (ids == ids[:, :1]).all()


def test_auto_detection_falls_back_to_the_done_flags():
    done = torch.zeros(9, 1, dtype=torch.bool)
    done[[2, 5, 8]] = True
    data = TensorDict({"obs": torch.arange(9), ("next", "done"): done}, [9])
    sampler = SliceSampler(num_slices=3)
    batch = buffer(sampler, data, 9).sample()
    assert sampler.traj_key is None
    assert (batch["obs"].view(3, 3) // 3 == batch["obs"].view(3, 3)[:, :1] // 3).all()


def test_end_keys_are_or_ed_and_missing_ones_skipped():
    truncated = torch.zeros(10, 1, dtype=torch.bool)
    truncated[[4, 9]] = True
    data = TensorDict(
        {"obs": torch.arange(10), "next": {"done": torch.zeros(10, 1, dtype=torch.bool)}}, [10]
    )
    data["next", "truncated"] = truncated
    keys = [("next", "done"), ("next", "truncated"), ("next", "terminated")]
    rb = buffer(SliceSampler(slice_len=2, end_keys=keys), data, 40, ReplayBuffer)
    torch.manual_seed(0)
    pairs = rb.sample()["obs"].view(-1, 2)
    assert (pairs[:, 1] == pairs[:, 0] + 1).all() and not (pairs[:, 0] == 4).any()
    rb = buffer(SliceSampler(slice_len=2, end_key=("next", "done")), data, 40, ReplayBuffer)
    assert (rb.sample()["obs"].view(-1, 2)[:, 0] == 4).any()  # one key: the break is missed


def test_missing_end_keys_fall_back_to_trajectory_ids():
    data = TensorDict({"obs": torch.arange(10), "episode": torch.arange(10) // 5}, [10])
    sampler = SliceSampler(slice_len=2, end_keys=[("next", "done")])
    torch.manual_seed(0)
    pairs = buffer(sampler, data, 40, ReplayBuffer).sample()["obs"].view(-1, 2)
    assert not (pairs[:, 0] == 4).any()
    assert sampler.traj_key == "episode"


def test_a_missing_traj_key_falls_back_to_the_end_flags():
    done = (torch.arange(12) % 4 == 3).view(12, 1)
    data = TensorDict({"obs": torch.arange(12), ("next", "done"): done}, [12])
    sampler = SliceSampler(slice_len=2, traj_key="nowhere")
    pairs = buffer(sampler, data, 40, ReplayBuffer).sample()["obs"].view(-1, 2)
    assert not (pairs[:, 0] % 4 == 3).any()


def test_multi_dim_markers_raise_torchrl_s_error():
    done = torch.zeros(20, 5, 1, dtype=torch.bool)
    data = TensorDict({"obs": torch.arange(20), ("next", "done"): done}, [20])
    rb = buffer(SliceSampler(num_slices=2), data, 4, ReplayBuffer)
    with pytest.raises(RuntimeError, match="Expected the end-of-trajectory signal to be 1-dim"):
        rb.sample()
    with pytest.raises(ValueError, match=r"holds shape \(5, 1\) per stored transition"):
        rb.sample()


def test_repr_names_the_arguments():
    text = repr(SliceSampler(slice_len=3, end_keys=["done"], strict_length=False))
    for part in ("slice_len=3", "end_keys=('done',)", "strict_length=False", "pad_output=False"):
        assert part in text
