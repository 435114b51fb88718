"""In-place edits: set_, set_at_, update_, update_if_present with generations and versions."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from ._describe import outcome
from ._instances import episodes


def _buffer(ns, track=True, storage=None, cls="TensorDictReplayBuffer"):
    writer_cls = (
        ns.TensorDictRoundRobinWriter if cls.startswith("TensorDict") else ns.RoundRobinWriter
    )
    rb = getattr(ns, cls)(
        storage=storage if storage is not None else ns.LazyTensorStorage(12),
        writer=writer_cls(track_generations=track),
        batch_size=4,
    )
    rb.extend(episodes())
    return rb


def test_set_and_set_at(lib):
    rb = _buffer(lib)
    assert rb.set_("action", torch.full((12,), 7)) is rb
    assert rb.set_at_("action", torch.tensor([1, 2]), torch.tensor([0, 5])) is rb
    rb.set_(("next", "reward"), torch.zeros(12, 1))
    assert rb[:]["action"].tolist() == [1, 7, 7, 7, 7, 2, 7, 7, 7, 7, 7, 7]
    assert rb[:]["next", "reward"].sum() == 0


@pytest.mark.parametrize(
    "key,value,error",
    [("nope", torch.zeros(12), "KeyError"), ("action", torch.zeros(5), "RuntimeError")],
    ids=["missing-key", "bad-shape"],
)
def test_set_errors(lib, key, value, error):
    assert outcome(lambda: _buffer(lib).set_(key, value)) == ("raises", error)


def test_update_with_keys_to_update(lib):
    rb = _buffer(lib)
    assert rb.update_({"action": torch.full((12,), 3)}) is rb
    patch = TensorDict({"action": torch.full((12,), 4), "episode": torch.zeros(12).long()}, [12])
    rb.update_(patch, keys_to_update=["action"])
    assert rb[:]["action"].tolist() == [4] * 12
    assert rb[:]["episode"].tolist() == episodes()["episode"].tolist()


@pytest.mark.parametrize("cls", ["TensorDictReplayBuffer", "ReplayBuffer"])
def test_samples_and_infos_carry_generations(lib, cls):
    rb = _buffer(lib, cls=cls)
    data, info = rb.sample(return_info=True)
    assert sorted(info) == ["index", "index_generation"]
    assert info["index_generation"].dtype == torch.int64
    in_sample = "index_generation" in data.keys()
    assert in_sample == (cls == "TensorDictReplayBuffer")


def test_update_if_present_skips_rewritten_slots(lib):
    rb = _buffer(lib)
    data = rb.sample()
    handle = {"index": data["index"], "generation": data["index_generation"]}
    result = rb.update_if_present(**handle, patch={"action": torch.full((4,), 9)})
    assert type(result).__name__ == "ConditionalUpdateResult"
    assert (result.updated.tolist(), result.updated_count, result.stale_count) == ([True] * 4, 4, 0)
    assert result.version_rejected is None
    assert rb[data["index"]]["action"].tolist() == [9] * 4
    rb.extend(episodes())  # every slot rewritten
    result = rb.update_if_present(**handle, patch={"action": torch.full((4,), 9)})
    assert (result.updated_count, result.stale_count) == (0, 4)
    rb.empty()
    rb.extend(episodes())
    result = rb.update_if_present(**handle, patch={"action": torch.full((4,), 9)})
    assert result.stale_count == 4


def test_update_if_present_versions(lib):
    rb = _buffer(lib)
    index = torch.tensor([0, 4, 8, 9])  # episodes 0, 1, 2, 2
    handle = {"index": index, "generation": torch.tensor(_generations_in_order(lib, rb))[index]}
    result = rb.update_if_present(
        **handle,
        patch={"action": torch.zeros(4, dtype=torch.long)},
        version_key="episode",
        version=1,
        require_newer=True,
    )
    assert result.version_rejected.tolist() == [False, True, True, True]
    assert (result.updated_count, result.version_rejected_count) == (1, 3)
    assert rb[:]["episode"][0].item() == 1  # accepted version written with the patch


@pytest.mark.parametrize(
    "patch,extra,error",
    [
        ({"nope": torch.zeros(4)}, {}, "KeyError"),
        ({"action": torch.zeros(3, dtype=torch.long)}, {}, "ValueError"),
        ({"observation": torch.zeros(4, 3, dtype=torch.long)}, {}, "ValueError"),
        ({"action": torch.zeros(4, dtype=torch.long)}, {"version": 3}, "ValueError"),
        (
            {"action": torch.zeros(4, dtype=torch.long)},
            {"version_key": "next.reward", "version": 3},
            "ValueError",
        ),
        (
            {"episode": torch.zeros(4, dtype=torch.long)},
            {"version_key": "episode", "version": 3},
            "ValueError",
        ),
    ],
    ids=["missing-key", "bad-shape", "bad-dtype", "version-alone", "dotted-key", "key-in-patch"],
)
def test_update_if_present_errors_change_nothing(lib, patch, extra, error):
    rb = _buffer(lib)
    before = rb[:].clone()
    handle = {
        "index": torch.arange(4),
        "generation": torch.tensor(_generations_in_order(lib, rb)[:4]),
    }
    assert outcome(lambda: rb.update_if_present(**handle, patch=patch, **extra)) == (
        "raises",
        error,
    )
    assert (rb[:] == before).all()


def test_update_if_present_without_generations(lib):
    rb = _buffer(lib, track=False)
    handle = {"index": torch.arange(1), "generation": torch.ones(1, dtype=torch.long)}
    err = outcome(lambda: rb.update_if_present(**handle, patch={"action": torch.zeros(1).long()}))
    assert err == ("raises", "RuntimeError")


def test_update_if_present_on_list_storage(lib):
    """The reference: a storage without conditional updates (ListStorage) raises RuntimeError."""
    rb = _buffer(lib, storage=lib.ListStorage(12))
    handle = {"index": torch.arange(1), "generation": torch.ones(1, dtype=torch.long)}
    err = outcome(lambda: rb.update_if_present(**handle, patch={"action": torch.zeros(1).long()}))
    assert err == ("raises", "RuntimeError")


def _generations_in_order(ns, rb):
    rb.set_sampler(ns.SamplerWithoutReplacement(shuffle=False))
    return rb.sample(len(rb), return_info=True)[1]["index_generation"].tolist()


def test_generation_numbers(lib):
    rb = _buffer(lib)
    rb.extend(episodes()[:2])
    assert _generations_in_order(lib, rb) == [1, 1] + [0] * 10


def test_writer_generations_of(lib):
    rb = _buffer(lib)
    rb.extend(episodes()[:2])
    assert rb.writer.generations_of(torch.arange(3)).tolist() == _generations_in_order(lib, rb)[:3]


def test_priority_update_skips_rewritten_slots():
    """Deliberate: rbdata's update_priority(generation=...) skips slots rewritten meanwhile."""
    from ._libs import load

    ns = load("rbdata")
    rb = ns.TensorDictPrioritizedReplayBuffer(
        alpha=1.0,
        beta=0.5,
        storage=ns.LazyTensorStorage(4),
        writer=ns.TensorDictRoundRobinWriter(track_generations=True),
        batch_size=4,
    )
    rb.extend(episodes(4))
    data = rb.sample()
    rb.extend(episodes(4))
    rb.update_priority(data["index"], torch.full((4,), 100.0), generation=data["index_generation"])
    assert rb.stats()["skipped_priority_updates"] == 4
