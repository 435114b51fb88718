"""Tests of the sample units: Transition, and Sequence windows, masks and priority routing."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    RoundRobinWriter,
    SampleUnit,
    Sequence,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    Transition,
)

KEYS = ["anchor_index", "learning_mask", "sequence_id", "step_in_sequence", "validity_mask"]


def episodes(n: int, ends=(), start: int = 0, key=("next", "done")) -> TensorDict:
    """``n`` records with ``obs = start + i`` and done flags at ``ends``."""
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[list(ends)] = True
    return TensorDict({"obs": torch.arange(start, start + n), key: done}, [n])


def filled(capacity: int, *chunks: TensorDict, unit: SampleUnit | None = None) -> ReplayBuffer:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sample_unit=unit)
    for chunk in chunks:
        rb.extend(chunk)
    return rb


def test_transition_returns_its_input():
    anchors = torch.tensor([4, 0, 4])
    info = {"priority_weight": torch.ones(3)}
    index, out = Transition().expand(anchors, info, None)
    assert index is anchors and out is info


def test_a_window_inside_an_episode_is_consecutive_and_flat():
    unit = Sequence(3, burn_in=2, bootstrap=1)
    rb = filled(30, episodes(30), unit=unit)
    index, info = unit.expand(torch.tensor([5, 10]), {}, rb.storage)
    assert index.tolist() == [3, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13]
    assert sorted(info) == KEYS
    assert info["sequence_id"].tolist() == [0] * 6 + [1] * 6
    assert info["step_in_sequence"].tolist() == list(range(6)) * 2
    assert info["learning_mask"].tolist() == [False, False, True, True, True, False] * 2
    assert info["anchor_index"].tolist() == [5] * 6 + [10] * 6
    assert info["validity_mask"].all()


@pytest.mark.parametrize(
    ("boundary", "index", "valid"),
    [
        ("pad", [4, 5, 5, 5], [True, True, False, False]),
        ("stop", [2, 3, 4, 5], [True] * 4),
        ("include_reset", [4, 5, 6, 7], [True] * 4),
    ],
)
def test_boundary_policies_at_an_episode_end(boundary, index, valid):
    rb = filled(10, episodes(10, ends=(5, 9)))
    got, info = Sequence(4, episode_boundary=boundary).expand(torch.tensor([4]), {}, rb.storage)
    assert got.tolist() == index and info["validity_mask"].tolist() == valid
    assert info["anchor_index"].tolist() == [4] * 4  # the drawn anchor, even when moved


def test_stop_pads_an_episode_shorter_than_the_window():
    rb = filled(10, episodes(10, ends=(1, 9)))
    index, info = Sequence(4, episode_boundary="stop").expand(torch.tensor([0]), {}, rb.storage)
    assert index.tolist() == [0, 1, 1, 1]
    assert info["validity_mask"].tolist() == [True, True, False, False]


def test_burn_in_clamps_at_the_episode_start_and_bootstrap_at_its_end():
    rb = filled(10, episodes(10, ends=(5, 9)))
    index, info = Sequence(2, burn_in=2, bootstrap=1).expand(torch.tensor([6, 8]), {}, rb.storage)
    assert index.tolist() == [6, 6, 6, 7, 8, 6, 7, 8, 9, 9]
    assert info["validity_mask"].tolist() == [False, False, True, True, True] + [True] * 4 + [False]


def test_dilation_spaces_the_window_and_stop_keeps_its_grid():
    rb = filled(20, episodes(20, ends=(9, 19)))
    index, info = Sequence(3, dilation=2).expand(torch.tensor([0, 6]), {}, rb.storage)
    assert index.tolist() == [0, 2, 4, 6, 8, 9]
    assert info["validity_mask"].tolist() == [True] * 5 + [False]
    unit = Sequence(3, episode_boundary="stop", dilation=2)
    index, info = unit.expand(torch.tensor([6]), {}, rb.storage)
    assert index.tolist() == [5, 7, 9] and info["validity_mask"].all()


def test_windows_never_cross_the_write_seam_of_a_full_ring():
    # capacity 10, 14 written: slots 0..3 hold obs 10..13 (newest at 3), 4..9 hold obs 4..9
    for unit in (Sequence(4, episode_boundary="include_reset"), Sequence(4), Sequence(4, "stop")):
        rb = filled(10, episodes(14), unit=unit)
        obs = rb.storage.get_leaf("obs")
        index, info = unit.expand(torch.tensor([8, 2]), {}, rb.storage)
        if unit.episode_boundary == "stop":  # moved back to end at the newest record
            assert obs[index].tolist() == [8, 9, 10, 11, 10, 11, 12, 13]
            assert info["validity_mask"].all()
            continue
        assert obs[index].tolist() == [8, 9, 10, 11, 12, 13, 13, 13]
        assert info["validity_mask"].tolist() == [True] * 6 + [False, False]
    unit = Sequence(2, burn_in=2, episode_boundary="include_reset")
    rb = filled(10, episodes(14), unit=unit)
    index, info = unit.expand(torch.tensor([5]), {}, rb.storage)  # slot 4 is the oldest
    assert index.tolist() == [4, 4, 5, 6]
    assert info["validity_mask"].tolist() == [False, True, True, True]


def test_the_seam_is_followed_through_later_writes():
    unit = Sequence(3, episode_boundary="include_reset")
    rb = filled(8, episodes(8), unit=unit)
    for start in (8, 11, 17):
        rb.extend(episodes(3, start=start))
        newest = int(rb.storage.get_leaf("obs").argmax())
        index, info = unit.expand(torch.tensor([newest]), {}, rb.storage)
        assert index.tolist() == [newest] * 3
        assert info["validity_mask"].tolist() == [True, False, False]


def test_unwritten_slots_are_never_read():
    rb = filled(20, episodes(10))
    unit = Sequence(3, burn_in=2, episode_boundary="include_reset")
    index, info = unit.expand(torch.tensor([0, 9]), {}, rb.storage)
    assert index.min() >= 0 and index.max() < 10
    assert (
        info["validity_mask"].tolist()
        == [False, False, True, True, True] + [True] * 3 + [False] * 2
    )


@pytest.mark.parametrize(
    ("boundary", "index", "valid"),
    [("pad", [3, 4, 4], [True, True, False]), ("stop", [2, 3, 4], [True] * 3)],
)
def test_without_done_key_the_written_data_is_one_episode(boundary, index, valid):
    rb = filled(10, TensorDict({"obs": torch.arange(5)}, [5]))
    unit = Sequence(3, episode_boundary=boundary, done_key=None)
    got, info = unit.expand(torch.tensor([3]), {}, rb.storage)
    assert got.tolist() == index and info["validity_mask"].tolist() == valid


def test_a_nested_done_key_given_as_a_list():
    rb = filled(10, episodes(10, ends=(5, 9), key=("stats", "episode_end")))
    unit = Sequence(4, done_key=["stats", "episode_end"])
    index, info = unit.expand(torch.tensor([4]), {}, rb.storage)
    assert unit.done_key == ("stats", "episode_end")
    assert index.tolist() == [4, 5, 5, 5]


def test_per_anchor_info_is_repeated_and_the_rest_kept():
    rb = filled(20, episodes(20))
    info = {"priority_weight": torch.tensor([0.5, 2.0]), "note": "kept", "scalar": 3.0}
    _, out = Sequence(2, bootstrap=1).expand(torch.tensor([1, 4]), info, rb.storage)
    assert out["priority_weight"].tolist() == [0.5] * 3 + [2.0] * 3
    assert out["note"] == "kept" and out["scalar"] == 3.0


def test_sampling_gives_a_flat_batch_of_windows_with_the_info_as_entries():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(40), sample_unit=Sequence(3, burn_in=1), batch_size=5
    )
    rb.extend(episodes(40, ends=range(9, 40, 10)))
    batch, info = rb.sample(return_info=True)
    assert batch.shape == (20,) and info["index"].shape == (20,)
    for key in KEYS:
        assert torch.equal(batch[key], info[key])
    obs = batch["obs"].view(5, 4)
    valid = batch["validity_mask"].view(5, 4)
    assert (obs[:, 1:] - obs[:, :-1] == 1)[valid[:, :-1] & valid[:, 1:]].all()
    assert (obs // 10 == obs[:, 1:2] // 10).all()  # one episode per window
    assert batch["learning_mask"].sum() == 15


def test_errors():
    for kwargs, error in (
        ({"length": 0}, ValueError),
        ({"length": 2, "burn_in": -1}, ValueError),
        ({"length": 2, "bootstrap": -1}, ValueError),
        ({"length": 2, "dilation": 0}, ValueError),
        ({"length": 2, "episode_boundary": "teleport"}, ValueError),
        ({"length": 2.0}, TypeError),
        ({"length": 2, "done_key": 3}, TypeError),
    ):
        with pytest.raises(error):
            Sequence(**kwargs)
    unit = Sequence(2)
    with pytest.raises(TypeError, match="TensorStorage"):
        unit.expand(torch.tensor([0]), {}, ListStorage(10))
    tensors = ReplayBuffer(storage=LazyTensorStorage(10))
    tensors.extend(torch.arange(5))
    with pytest.raises(TypeError, match="TensorDict"):
        unit.expand(torch.tensor([0]), {}, tensors.storage)
    rb = filled(10, episodes(10))
    with pytest.raises(ValueError, match="1-D tensor"):
        unit.expand(torch.zeros(2, 2, dtype=torch.long), {}, rb.storage)
    with pytest.raises(ValueError, match="coordinates"):
        unit.expand((torch.tensor([0]),), {}, rb.storage)
    with pytest.raises(KeyError, match="done_key"):
        Sequence(2, done_key="finished").expand(torch.tensor([0]), {}, rb.storage)
    with pytest.raises(RuntimeError, match="empty"):
        unit.expand(torch.tensor([0]), {}, LazyTensorStorage(4))
    with pytest.raises(TypeError, match="sample_unit"):
        ReplayBuffer(storage=LazyTensorStorage(4), sample_unit=object())


def test_state_dict_round_trip_keeps_the_seam():
    unit = Sequence(3, burn_in=1)
    rb = filled(8, episodes(6, ends=(2,)), episodes(6, ends=(1,), start=6), unit=unit)
    anchors = torch.arange(8)
    expected = unit.expand(anchors, {}, rb.storage)
    other = Sequence(3, burn_in=1)
    other.load_state_dict(unit.state_dict())
    index, info = other.expand(anchors, {}, rb.storage)
    assert torch.equal(index, expected[0])
    assert torch.equal(info["validity_mask"], expected[1]["validity_mask"])
    unit._empty()
    assert unit.state_dict()["newest"] == -1


# ---------------------------------------------------------------- multi-dim
def lanes_buffer(time: int, capacity: int, done: torch.Tensor, unit=None):
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity, ndim=2), dim_extend=0, sample_unit=unit, batch_size=3
    )
    obs = torch.arange(time * 2).reshape(time, 2)
    rb.extend(TensorDict({"obs": obs, ("next", "done"): done}, [time, 2]))
    return rb


def test_multidim_windows_run_along_time_in_their_lane():
    done = torch.zeros(8, 2, 1, dtype=torch.bool)
    done[4, 0] = done[6, 1] = done[7] = True
    rb = lanes_buffer(8, 16, done)
    unit = Sequence(2, burn_in=1, bootstrap=1, dilation=2)
    index, info = unit.expand((torch.tensor([2, 2]), torch.tensor([0, 1])), {}, rb.storage)
    assert index[0].tolist() == [0, 2, 4, 4, 0, 2, 4, 6]
    assert index[1].tolist() == [0] * 4 + [1] * 4
    assert info["validity_mask"].tolist() == [True] * 3 + [False] + [True] * 4
    assert info["anchor_index"].tolist() == [[2, 0]] * 4 + [[2, 1]] * 4
    flat, flat_info = unit.expand(torch.tensor([4, 5]), {}, rb.storage)  # cells 2*2, 2*2+1
    assert flat.tolist() == (index[0] * 2 + index[1]).tolist()
    assert flat_info["anchor_index"].tolist() == [4] * 4 + [5] * 4
    stop = Sequence(3, episode_boundary="stop")
    index, info = stop.expand((torch.tensor([4]), torch.tensor([0])), {}, rb.storage)
    assert index[0].tolist() == [2, 3, 4] and info["validity_mask"].all()


def test_multidim_sampling_and_the_ring_seam():
    done = torch.zeros(8, 2, 1, dtype=torch.bool)
    unit = Sequence(3, episode_boundary="include_reset")
    rb = lanes_buffer(8, 12, done, unit=unit)  # 6 time slots: 0, 1 newest; 2 oldest
    index, info = unit.expand((torch.tensor([5, 1]), torch.tensor([1, 1])), {}, rb.storage)
    assert index[0].tolist() == [5, 0, 1, 1, 1, 1]
    assert info["validity_mask"].tolist() == [True] * 4 + [False] * 2
    batch = rb.sample()
    obs = batch["obs"].view(3, 3)
    valid = batch["validity_mask"].view(3, 3)
    assert batch.shape == (9,)
    assert ((obs[:, 1:] - obs[:, :-1] == 2) | ~valid[:, 1:]).all()  # same lane, next step


# ---------------------------------------------------------------- priorities
def prioritized(unit, capacity=20, ends=(9, 19), **kwargs):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(capacity),
        sample_unit=unit,
        batch_size=4,
        **kwargs,
    )
    rb.extend(episodes(capacity, ends=ends))
    rb.update_priority(torch.arange(capacity), torch.ones(capacity))
    return rb


def leaves(rb) -> torch.Tensor:
    return rb.sampler.state_dict()["leaves"]  # priority ** alpha, alpha = 1


def expanded_batch(rb, unit, anchors, td_error):
    index, info = unit.expand(torch.tensor(anchors), {}, rb.storage)
    batch = rb.storage.get(index)
    batch.update({key: info[key] for key in KEYS})
    batch["index"] = index
    batch["index_generation"] = rb.writer.generations_of(index)
    batch["td_error"] = torch.tensor(td_error)
    return batch


def test_priority_updates_go_to_the_anchors_as_the_max_over_valid_records():
    unit = Sequence(4)
    rb = prioritized(unit)
    td_error = [1, 2, 3, 50, 4, 5, 6, 60, 0.5, 0.5, 0.5, 7.0]
    rb.update_tensordict_priority(expanded_batch(rb, unit, [7, 7, 2], td_error))
    expected = torch.ones(20)
    expected[7], expected[2] = 6.0, 7.0  # the padded 50 and 60 (past slot 9) never count
    assert torch.allclose(leaves(rb)[:20], expected)
    batch = rb.sample()
    batch["td_error"] = torch.full((16,), 3.0)
    before = leaves(rb)[:20].clone()
    rb.update_tensordict_priority(batch)
    changed = set((leaves(rb)[:20] != before).nonzero().view(-1).tolist())
    assert changed <= set(batch["anchor_index"].tolist())


def test_update_batch_priority_routes_and_skips_rewritten_anchors():
    unit = Sequence(2)
    rb = prioritized(unit, capacity=10, ends=(), writer=RoundRobinWriter(track_generations=True))
    batch = expanded_batch(rb, unit, [0, 4, 8, 9], [5.0] * 8)
    rb.extend(episodes(2, start=10))  # rewrites slots 0 and 1: anchor 0's window
    rb.update_batch_priority(batch, batch["td_error"])
    assert rb.stats()["skipped_priority_updates"] == 1
    assert leaves(rb)[[0, 4, 8, 9]].tolist() == [1.0, 5.0, 5.0, 5.0]
    assert leaves(rb)[[5, 6]].tolist() == [1.0, 1.0]  # records that are not anchors


def test_plain_update_priority_takes_the_slots_given():
    unit = Sequence(2)
    rb = prioritized(unit)
    rb.update_priority(torch.tensor([3]), torch.tensor([9.0]))
    assert leaves(rb)[3] == 9.0 and leaves(rb)[4] == 1.0


def test_user_anchor_index_is_ignored_without_a_sequence_unit():
    data = TensorDict({"anchor_index": torch.tensor([3, 3]), "td_error": torch.ones(2)}, [2])
    assert Transition().anchors_of(data, LazyTensorStorage(4)) is None
    assert Sequence(2).anchors_of({"index": torch.tensor([0])}, LazyTensorStorage(4)) is None


def test_coordinate_anchors_are_flattened_for_priorities():
    done = torch.zeros(5, 2, 1, dtype=torch.bool)
    rb = lanes_buffer(5, 10, done)
    coords = torch.tensor([[2, 0], [2, 1], [4, 1]])
    assert Sequence(2).anchors_of({"anchor_index": coords}, rb.storage).tolist() == [4, 5, 9]


# ---------------------------------------------------------------- properties
def reference_window(records, p, unit):
    """The records (positions in ``records``, time order) of the window of position ``p``."""
    n = len(records)
    start, end = 0, n - 1
    if unit.done_key is not None and unit.episode_boundary != "include_reset":
        start = max([q + 1 for q in range(p) if records[q]], default=0)
        end = min([q for q in range(p, n) if records[q]], default=n - 1)
    back, ahead = p - start, end - p
    if unit.episode_boundary == "stop":
        shift = min(max(unit.dilation * (unit.length + unit.bootstrap - 1) - ahead, 0), back)
        p, back, ahead = p - shift, back - shift, ahead + shift
    out = []
    for j in range(unit.window):
        off = (j - unit.burn_in) * unit.dilation
        out.append((p + min(max(off, -back), ahead), -back <= off <= ahead))
    return out


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(3, 12),
    lanes=st.sampled_from([1, 2]),
    chunks=st.lists(st.lists(st.booleans(), min_size=1, max_size=9), min_size=1, max_size=4),
    length=st.integers(1, 4),
    burn_in=st.integers(0, 2),
    bootstrap=st.integers(0, 2),
    dilation=st.integers(1, 3),
    boundary=st.sampled_from(["pad", "stop", "include_reset"]),
    with_done=st.booleans(),
)
def test_windows_match_a_reference_walk_over_the_written_records(
    capacity, lanes, chunks, length, burn_in, bootstrap, dilation, boundary, with_done
):
    unit = Sequence(
        length,
        episode_boundary=boundary,
        done_key=("next", "done") if with_done else None,
        burn_in=burn_in,
        bootstrap=bootstrap,
        dilation=dilation,
    )
    ndim = 1 if lanes == 1 else 2
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(capacity * lanes, ndim=ndim), sample_unit=unit, dim_extend=0
    )
    steps, flags = [], []
    for chunk in chunks:
        n = len(chunk)
        done = torch.tensor(chunk).view(n, 1, 1).expand(n, lanes, 1)
        step = torch.arange(len(steps), len(steps) + n).view(n, 1).expand(n, lanes)
        if lanes == 1:
            done, step = done[:, 0], step[:, 0]
        rb.extend(TensorDict({"step": step, ("next", "done"): done}, done.shape[:ndim]))
        steps += list(range(len(steps), len(steps) + n))
        flags += chunk
    live = list(range(max(0, len(steps) - capacity), len(steps)))  # steps in time order
    stored = rb.storage.get_leaf("step").view(-1)
    anchors = torch.arange(len(rb.storage))
    index, info = unit.expand(anchors, {}, rb.storage)
    got = stored[index].view(len(anchors), unit.window)
    valid = info["validity_mask"].view(len(anchors), unit.window)
    for a in anchors.tolist():
        p = live.index(int(stored[a]))
        window = reference_window([flags[s] for s in live], p, unit)
        assert got[a].tolist() == [live[q] for q, _ in window]
        assert valid[a].tolist() == [ok for _, ok in window]
        assert (index.view(len(anchors), -1)[a] % lanes == a % lanes).all()  # its own lane
    if len(steps) <= capacity:  # a unit told about no write sees the same (no wrap)
        fresh = Sequence(
            length, boundary, unit.done_key, burn_in=burn_in, bootstrap=bootstrap, dilation=dilation
        )
        other, other_info = fresh.expand(anchors, {}, rb.storage)
        assert torch.equal(other, index)
        assert torch.equal(other_info["validity_mask"], info["validity_mask"])


@settings(max_examples=40, deadline=None)
@given(
    anchors=st.lists(st.integers(0, 5), min_size=1, max_size=6),
    window=st.integers(1, 4),
    data=st.data(),
)
def test_anchor_priority_is_the_max_over_valid_records(anchors, window, data):
    from rbdata.buffers._priority_updates import reduce_to_anchors

    n = len(anchors) * window
    priority = torch.tensor(data.draw(st.lists(st.floats(0, 10), min_size=n, max_size=n)))
    valid = torch.tensor(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    valid.view(-1, window)[:, 0] = True  # the anchor's own record is always valid
    records = torch.tensor(anchors).repeat_interleave(window)
    unique, reduced, skipped = reduce_to_anchors(records, priority, valid, None)
    assert unique.tolist() == sorted(set(anchors)) and skipped == 0
    for a, p in zip(unique.tolist(), reduced.tolist(), strict=True):
        assert p == pytest.approx(float(priority[(records == a) & valid].max()))


def _ring_of_14_in_10() -> TensorDictReplayBuffer:
    """A full ring: slots 0..3 hold obs 10..13 (newest at slot 3), slots 4..9 hold obs 4..9."""
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    size = 14
    rb.extend(
        TensorDict(
            {
                "obs": torch.arange(size, dtype=torch.float32),
                ("next", "done"): torch.zeros(size, 1, dtype=torch.bool),
            },
            batch_size=[size],
        )
    )
    return rb


def test_a_detached_unit_reads_the_write_seam_from_the_storage():
    rb = _ring_of_14_in_10()
    assert rb.storage.newest_slot == 3
    unit = Sequence(length=4, episode_boundary="include_reset")  # not the buffer's unit
    index, info = unit.expand(torch.tensor([8]), {}, rb.storage)
    assert index.tolist() == [8, 9, 0, 1]  # wraps past the last slot, in write order
    assert rb[:]["obs"][index].tolist() == [8.0, 9.0, 10.0, 11.0]
    assert info["validity_mask"].all()
    index, info = unit.expand(torch.tensor([2]), {}, rb.storage)
    assert index.tolist() == [2, 3, 3, 3]  # never past the newest record into the oldest
    assert info["validity_mask"].tolist() == [True, True, False, False]


def test_newest_slot_follows_the_writer_and_is_none_without_a_ring_writer():
    rb = _ring_of_14_in_10()
    rb.extend(rb[:2])
    assert rb.storage.newest_slot == 5
    rb.empty()
    assert rb.storage.newest_slot is None
    assert LazyTensorStorage(4).newest_slot is None
