"""In-place updates of a storage with ndim > 1: generations, update_if_present, anchors, reads.

A ``[steps, lanes]`` storage shows coordinates; a generation stamp covers an
item (a dim-0 slot, all of its cells); ``update_if_present`` addresses cells by
coordinates or flat cells; a Sequence batch's priorities go to the anchors'
coordinates; ``storage.get`` takes a tuple of coordinates (torchrl's).
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rbdata import (
    LazyTensorStorage,
    Sequence,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
    TensorDictRoundRobinWriter,
)


def _buffer(steps: int = 3, lanes: int = 2) -> TensorDictReplayBuffer:
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(steps * lanes, ndim=2),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )


def _lanes(lanes: int, steps: int, first: int = 0) -> TensorDict:
    """``[lanes, steps]`` data (time last): ``obs`` = 10 * step + lane, ``v`` = 5."""
    obs = (10 * torch.arange(first, first + steps) + torch.arange(lanes).unsqueeze(1)).float()
    return TensorDict({"obs": obs, "v": torch.full((lanes, steps), 5)}, [lanes, steps])


def test_generations_of_coordinates_are_their_items():
    rb = _buffer()
    index = rb.extend(_lanes(2, 3))
    rb.extend(_lanes(2, 1, 3))  # item 0 rewritten
    writer = rb._writer
    assert writer.generations_of(index).tolist() == [1, 1, 0, 0, 0, 0]
    assert writer.generations_of(tuple(index.unbind(-1))).tolist() == [1, 1, 0, 0, 0, 0]
    assert writer.generations_of(torch.tensor([0, 1])).tolist() == [1, 0]  # 1-D: items


def test_a_samples_generations_are_its_items_so_its_handles_stay_live():
    torch.manual_seed(0)
    rb = _buffer()
    rb.extend(_lanes(2, 3))
    rb.extend(_lanes(2, 1, 3))
    batch = rb.sample(12)
    rows = batch["index"][:, 0]
    assert batch["index_generation"].tolist() == (rows == 0).long().tolist()
    result = rb.update_if_present(
        index=batch["index"],
        generation=batch["index_generation"],
        patch={"obs": torch.full((12,), -1.0)},
    )
    assert result.updated.all()
    assert (rb.storage.get_leaf("obs") == -1).sum() == batch["index"].unique(dim=0).shape[0]


def test_update_if_present_patches_cells_in_index_order():
    rb = _buffer()
    index = rb.extend(_lanes(2, 3))
    generation = rb._writer.generations_of(index)
    patch = torch.arange(100.0, 106.0).reshape(2, 3)  # B * T rows, reshaped in index order
    result = rb.update_if_present(index=index, generation=generation, patch={"obs": patch})
    assert result.updated.all()
    stored = rb.storage.get_leaf("obs")
    assert stored.tolist() == list(range(100, 106))  # cell k = index row k
    assert rb[:]["obs"].tolist() == [[100.0, 102.0, 104.0], [101.0, 103.0, 105.0]]


def test_update_if_present_takes_tuples_and_flat_cells_and_skips_rewritten_items():
    rb = _buffer()
    index = rb.extend(_lanes(2, 3))
    generation = rb._writer.generations_of(index)
    rb.extend(_lanes(2, 1, 3))  # item 0 (cells 0 and 1) rewritten
    result = rb.update_if_present(
        index=tuple(index[:3].unbind(-1)),
        generation=generation[:3],
        patch={"obs": torch.tensor([7.0, 8.0, 9.0])},
    )
    assert result.updated.tolist() == [False, False, True]
    assert result.stale.tolist() == [True, True, False]
    flat = rb.update_if_present(
        index=torch.tensor([5]), generation=torch.tensor([0]), patch={"obs": torch.tensor([4.0])}
    )
    assert flat.updated.tolist() == [True]
    assert rb.storage.get_leaf("obs").tolist() == [30.0, 31.0, 9.0, 11.0, 20.0, 4.0]


def test_versioned_update_reads_and_writes_each_cells_version():
    rb = _buffer()
    index = rb.extend(_lanes(2, 3))
    generation = rb._writer.generations_of(index)
    result = rb.update_if_present(
        index=index[:2],
        generation=generation[:2],
        patch={"obs": torch.tensor([7.0, 8.0])},
        version_key="v",
        version=torch.tensor([6, 4]),
        require_newer=True,
    )
    assert result.updated.tolist() == [True, False]
    assert result.version_rejected.tolist() == [False, True]
    assert rb.storage.get_leaf("v").tolist() == [6, 5, 5, 5, 5, 5]
    assert rb.storage.get_leaf("obs")[:2].tolist() == [7.0, 1.0]


@pytest.mark.parametrize(
    "index, error, match",
    [
        (torch.tensor([[3, 0]]), ValueError, "outside the storage's shape"),
        (torch.tensor([[0, 0, 0]]), ValueError, r"expected coordinates \[N, 2\]"),
        (torch.tensor([6]), ValueError, "outside the 6 written"),
        (torch.tensor([[0.0, 1.0]]), TypeError, "integers"),
    ],
)
def test_bad_indices_raise_and_change_nothing(index, error, match):
    rb = _buffer()
    rb.extend(_lanes(2, 3))
    before = rb.storage.get_leaf("obs").clone()
    with pytest.raises(error, match=match):
        rb.update_if_present(
            index=index, generation=torch.zeros(1, dtype=torch.long), patch={"obs": torch.ones(1)}
        )
    assert torch.equal(rb.storage.get_leaf("obs"), before)


def test_a_patch_of_the_wrong_size_is_refused():
    rb = _buffer()
    index = rb.extend(_lanes(2, 3))
    with pytest.raises(ValueError, match=r"patch\['obs'\] has shape \(5,\), expected \(6,\)"):
        rb.update_if_present(
            index=index, generation=torch.zeros(6, dtype=torch.long), patch={"obs": torch.ones(5)}
        )


def test_storage_get_takes_a_tuple_of_coordinates():
    rb = _buffer()
    rb.extend(_lanes(2, 3))
    storage = rb.storage
    got = storage.get((torch.tensor([2, 0, 1]), torch.tensor([1, 0, 1])))
    assert got["obs"].tolist() == [21.0, 0.0, 11.0]
    assert storage[(torch.tensor([[1], [2]]), torch.tensor([0, 1]))]["obs"].tolist() == [
        [10.0, 11.0],
        [20.0, 21.0],
    ]
    assert storage.get((1, 1))["obs"].item() == 11.0
    with pytest.raises(ValueError, match="tuple of 3 coordinates, expected 2"):
        storage.get((0, 0, 0))
    with pytest.raises(ValueError, match="outside the storage's shape"):
        storage.get((torch.tensor([3]), torch.tensor([0])))
    with pytest.raises(TypeError, match="integers"):
        storage.get((torch.tensor([0.5]), torch.tensor([0])))


def test_a_sequence_batchs_priorities_go_to_its_anchor_cells():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=1.0,
        storage=LazyTensorStorage(10, ndim=2),
        dim_extend=0,
        sample_unit=Sequence(length=2),
    )
    data = TensorDict(
        {"obs": torch.arange(10).reshape(5, 2), ("next", "done"): torch.zeros(5, 2, 1).bool()},
        [5, 2],
    )
    index = rb.extend(data)
    rb.update_priority(index, torch.ones(10))
    batch = TensorDict(
        {
            "index": torch.tensor([[2, 0], [3, 0], [2, 1], [3, 1], [2, 0], [3, 0]]),
            "anchor_index": torch.tensor([[2, 0], [2, 0], [2, 1], [2, 1], [2, 0], [2, 0]]),
            "validity_mask": torch.tensor([True, False, True, True, True, True]),
            "td_error": torch.tensor([1.0, 99.0, 3.0, 4.0, 5.0, 6.0]),
        },
        [6],
    )
    anchors, reduced = rb._anchor_reduced_priority(batch, batch["td_error"])
    assert anchors.tolist() == [[2, 0], [2, 1]] and reduced.tolist() == [6.0, 4.0]
    rb.update_tensordict_priority(batch)
    leaves = rb.sampler._tree.leaves
    changed = (leaves != 1.0).nonzero().squeeze(-1).tolist()
    assert changed == [4, 5] and leaves[4] == pytest.approx(6.0) and leaves[5] == pytest.approx(4.0)
    plain = TensorDictReplayBuffer(storage=LazyTensorStorage(4))
    assert plain._anchor_reduced_priority(batch, batch["td_error"]) is None
