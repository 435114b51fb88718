"""torchrl checkpoints load into rbdata: everything they hold, or an error naming what not.

torchrl 0.14.1 writes the files here, in this test: a buffer's ``state_dict``
saved with ``torch.save``, its ``dumps`` directory, and its storage's,
sampler's and writer's ``state_dict``. rbdata loads them into buffers built
alike and is compared with the torchrl buffer: the rows (``rb[:]``), ``len``,
``write_count``, the cursor, the generations, the generator's state and the
rest of a without-replacement pass. What rbdata cannot read (torchrl's
compiled priority trees, its compressed frames) raises, naming it.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

import rbdata
from rbdata import CheckpointError

torchrl_data = pytest.importorskip("torchrl.data")


def _rows(n: int) -> TensorDict:
    ids = torch.arange(n)
    return TensorDict(
        {"id": ids, "obs": ids[:, None].float().expand(n, 3), "n": {"done": ids % 3 == 0}}, [n]
    )


def _td_buffer(lib, seed: int = 3):
    return lib.TensorDictReplayBuffer(
        storage=lib.LazyTensorStorage(8),
        writer=lib.TensorDictRoundRobinWriter(track_generations=True),
        batch_size=3,
        generator=torch.Generator().manual_seed(seed),
    )


def _memmap_buffer(lib, seed: int = 3):
    return lib.TensorDictReplayBuffer(storage=lib.LazyMemmapStorage(8), batch_size=2)


def _pass_buffer(lib, seed: int = 3):
    return lib.ReplayBuffer(
        storage=lib.LazyTensorStorage(8), sampler=lib.SamplerWithoutReplacement(), batch_size=3
    )


def _fill_rows(rb) -> None:
    rb.extend(_rows(11))  # wrapped: cursor 3
    rb.sample()


def _fill_tensor(rb) -> None:
    rb.extend(torch.arange(22.0).reshape(11, 2))
    rb.sample()  # 3 of the pass handed out, 5 left


CASES = {
    "tensordict-generations": (_td_buffer, _fill_rows),
    "memmap": (_memmap_buffer, _fill_rows),
    "tensor-without-replacement": (_pass_buffer, _fill_tensor),
}


def _assert_same_contents(ours, theirs) -> None:
    assert len(ours) == len(theirs)
    assert ours.write_count == theirs.write_count
    assert ours.writer.state_dict()["_cursor"] == int(theirs.writer.state_dict()["_cursor"])
    mine, reference = ours[:], theirs[:]
    if isinstance(reference, TensorDict) or hasattr(reference, "exclude"):
        reference = reference.exclude("index")  # torchrl's TensorDict buffers store it
        assert set(mine.keys(True, True)) == set(reference.keys(True, True))
        for key in reference.keys(True, True):
            assert torch.equal(mine[key], torch.as_tensor(reference[key])), key
    else:
        assert torch.equal(mine, torch.as_tensor(reference))
    generation = theirs.writer.state_dict().get("_generation")
    if generation is not None:
        assert torch.equal(ours.writer.state_dict()["_generation"], generation)
    rng = getattr(theirs, "_rng", None)
    if rng is not None:
        assert torch.equal(ours.generator.get_state(), rng.get_state())


def _assert_same_pass(ours, theirs) -> None:
    """The rest of a without-replacement pass: the same items, in both."""
    if not isinstance(ours.sampler, rbdata.SamplerWithoutReplacement):
        return
    rest = sorted(torch.cat([ours.sample(), ours.sample()])[:5, 0].tolist())
    expected = sorted(torch.cat([theirs.sample(), theirs.sample()])[:5, 0].tolist())
    assert rest == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_torchrl_buffer_state_dict_file_loads_everything(case, tmp_path):
    build, fill = CASES[case]
    theirs = build(torchrl_data)
    fill(theirs)
    torch.save(theirs.state_dict(), tmp_path / "rb.pt")
    ours = build(rbdata, seed=99)
    ours.load_state_dict(torch.load(tmp_path / "rb.pt", weights_only=False))
    _assert_same_contents(ours, theirs)
    _assert_same_pass(ours, theirs)
    ours.extend(_rows(2) if case != "tensor-without-replacement" else torch.zeros(2, 2))
    assert ours.write_count == theirs.write_count + 2  # the loaded buffer goes on


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_torchrl_dumps_directory_loads_everything(case, tmp_path):
    build, fill = CASES[case]
    theirs = build(torchrl_data)
    fill(theirs)
    theirs.dumps(tmp_path / "dump")
    ours = build(rbdata, seed=99)
    ours.loads(tmp_path / "dump")
    _assert_same_contents(ours, theirs)
    _assert_same_pass(ours, theirs)


def test_component_state_dicts_load_everything(tmp_path):
    theirs = _pass_buffer(torchrl_data)
    _fill_tensor(theirs)
    for name in ("storage", "sampler", "writer"):
        torch.save(getattr(theirs, name).state_dict(), tmp_path / f"{name}.pt")
    ours = _pass_buffer(rbdata)
    ours.storage.load_state_dict(torch.load(tmp_path / "storage.pt", weights_only=False))
    ours.sampler.load_state_dict(torch.load(tmp_path / "sampler.pt", weights_only=False))
    ours.writer.load_state_dict(torch.load(tmp_path / "writer.pt", weights_only=False))
    _assert_same_contents(ours, theirs)
    _assert_same_pass(ours, theirs)


def test_a_torchrl_list_storage_state_loads_its_objects():
    theirs = torchrl_data.ReplayBuffer(storage=torchrl_data.ListStorage(8))
    items = [3, "a", {"x": 1}, torch.ones(2), TensorDict({"a": torch.arange(3)}, [3])]
    theirs.extend(items)
    ours = rbdata.ReplayBuffer(storage=rbdata.ListStorage(8))
    ours.load_state_dict(theirs.state_dict())
    assert len(ours) == 5 and ours.write_count == 5
    assert [ours[i] for i in range(3)] == items[:3]
    assert torch.equal(ours[3], items[3])
    assert torch.equal(ours[4]["a"], items[4]["a"])


def test_what_rbdata_cannot_read_is_named_and_nothing_changes():
    storage = torchrl_data.CompressedListStorage(max_size=4)
    storage.set(0, torch.ones(3))
    ours = rbdata.CompressedListStorage(max_size=4)
    ours.set(0, torch.zeros(3))
    with pytest.raises(ValueError, match="CompressedListStorage state"):
        ours.load_state_dict(storage.state_dict())
    assert torch.equal(ours.get(0), torch.zeros(3))
    # torchrl's PrioritizedSampler state (its trees need torchrl's compiled extension,
    # which torch 2.13 cannot load: the layout is written out as torchrl 0.14.1 saves it)
    sampler = rbdata.PrioritizedSampler(8, alpha=0.7, beta=0.5)
    state = {"_alpha": 0.7, "_beta": 0.5, "_eps": 1e-8, "_max_priority": (1.0, None)}
    with pytest.raises(ValueError, match="_min_tree.*_sum_tree"):
        sampler.load_state_dict({**state, "_sum_tree": object(), "_min_tree": object()})


def test_a_torchrl_dump_with_a_pickled_prefetch_queue_needs_allow_pickle(tmp_path):
    theirs = _td_buffer(torchrl_data)
    _fill_rows(theirs)
    theirs.dumps(tmp_path / "dump")
    (tmp_path / "dump" / "prefetch.pkl").write_bytes(
        __import__("pickle").dumps({"version": 1, "capacity": 1, "queue": (torch.ones(1),)})
    )
    ours = _td_buffer(rbdata)
    with pytest.raises(CheckpointError, match="prefetch.pkl: holds Python objects"):
        ours.loads(tmp_path / "dump")
    assert len(ours) == 0
