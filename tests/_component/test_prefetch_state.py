"""The one saved format of what was sampled ahead (draws, and the buffer's queue of results)."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import LazyTensorStorage, ReplayDataset, TensorDictReplayBuffer
from rbdata._component.prefetch_state import check_queue_state, draw_record, read_draw_records
from rbdata.buffers.protocol import Draw
from rbdata.service.client.in_flight import draw_state, draws_from_state


def test_a_draw_record_round_trips() -> None:
    index, info = torch.tensor([4, 2]), {"index": torch.tensor([4, 2])}
    [(got_index, got_info, ends)] = read_draw_records([draw_record(index, info, True)])
    assert torch.equal(got_index, index) and got_info.keys() == {"index"} and ends is True


@pytest.mark.parametrize(
    "records",
    [
        {"index": torch.tensor([1])},  # not a list
        [{"index": [1], "info": {}, "ends_pass": False}],  # index not a tensor
        [{"index": torch.tensor([1]), "info": None, "ends_pass": False}],  # info not a dict
        [{"index": torch.tensor([1]), "info": {}}],  # no ends_pass
    ],
)
def test_bad_draw_records_are_refused_naming_where(records: object) -> None:
    with pytest.raises(ValueError, match=r"state\['pending'\]"):
        read_draw_records(records, "state['pending']")


def test_the_ray_clients_draws_ahead_are_saved_like_the_loaders_pending_draws() -> None:
    draw = Draw(torch.tensor([0, 3]), {"index": torch.tensor([0, 3])}, ends_pass=True)
    saved = draw_state(draw)
    assert saved.keys() == {"index", "info", "ends_pass"}
    [back] = draws_from_state([saved])
    assert torch.equal(back.index, draw.index) and back.ends_pass
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(16), batch_size=2)
    rb.extend(TensorDict({"x": torch.arange(8)}, batch_size=[8]))
    with ReplayDataset(rb, prefetch=2, num_batches=4) as ds:
        it = iter(ds)
        next(it)
        pending = ds.state_dict()["pending"]
        it.close()
    assert pending and all(record.keys() == saved.keys() for record in pending)
    assert len(read_draw_records(pending)) == len(pending)


def test_the_ray_client_refuses_an_ahead_entry_without_its_pass_flag() -> None:
    with pytest.raises(ValueError, match=r"sampling state\['ahead'\]\[0\]"):
        draws_from_state([{"index": torch.tensor([1]), "info": {}}])


def test_a_queue_of_results_is_checked_against_the_loading_depth() -> None:
    check_queue_state(None, 3)
    check_queue_state({"version": 1, "capacity": 2, "queue": []}, 0)
    with pytest.raises(RuntimeError, match="capacity 2"):
        check_queue_state({"version": 1, "capacity": 2, "queue": [None]}, 3)
    with pytest.raises(ValueError, match="version"):
        check_queue_state({"version": 9, "capacity": 2, "queue": []}, 2)
