"""The replay-buffer names torchrl 0.14.1 has beyond the 32 core ones: ensembles, checkpointers,
TED layout converters, hindsight relabeling. Each is compared with torchrl's class of that name.

- ensembles: the same draws for a seed (samples, infos, member ids), indexing, refusals;
- checkpointers: the files each writes are torchrl's (same entries, same values), and each
  library loads the other's directory or h5 file into equal rows;
- HERReplayBuffer: the same relabeled batches for a seed, except for items after the last
  episode end of a full ring, where torchrl relabels with another episode's goal (a
  deliberate difference, asserted below).
"""

from __future__ import annotations

import importlib

import pytest
import torch
from tensordict import PersistentTensorDict, TensorDict

import rbdata

torchrl_data = pytest.importorskip("torchrl.data")
LIBS = {"torchrl": torchrl_data, "rbdata": rbdata}

NEW_NAMES = [
    "ReplayBufferEnsemble", "StorageEnsemble", "SamplerEnsemble", "WriterEnsemble",
    "StorageEnsembleCheckpointer", "StorageCheckpointerBase", "ListStorageCheckpointer",
    "TensorStorageCheckpointer", "CompressedListStorageCheckpointer", "FlatStorageCheckpointer",
    "NestedStorageCheckpointer", "H5StorageCheckpointer", "Flat2TED", "Nested2TED", "TED2Flat",
    "TED2Nested", "H5Combine", "H5Split", "HERReplayBuffer", "HindsightStrategy",
]  # fmt: skip


@pytest.mark.parametrize("name", NEW_NAMES)
def test_the_name_is_there(name):
    replay_buffers = importlib.import_module("torchrl.data.replay_buffers")
    assert name in replay_buffers.__all__
    assert name in rbdata.__all__ and getattr(rbdata, name) is not None


# ------------------------------------------------------------------ ensembles
def _member_data(kind: str, offset: int):
    if kind == "tensor":
        return torch.arange(90) + offset
    nested = TensorDict({"data": torch.arange(180).view(90, 2)}, batch_size=[90, 2])
    return TensorDict({"root": torch.arange(90) + offset, "nested": nested}, batch_size=[90])


def _ensemble(lib, storage: str, kind: str, p, num_buffer_sampled, sampler: str):
    rbs = []
    for i in range(3):
        store = {
            "memmap": lambda: lib.LazyMemmapStorage(100),
            "list": lambda: lib.ListStorage(100),
            "lazy": lambda: lib.LazyTensorStorage(100),
        }[storage]()
        if sampler == "random":
            rb = lib.ReplayBuffer(storage=store, sampler=lib.RandomSampler())
        else:
            rb = lib.ReplayBuffer(
                storage=store, sampler=lib.SamplerWithoutReplacement(drop_last=True), batch_size=16
            )
        data = _member_data(kind, 1000 * (i + 1))
        rb.extend(data[: 60 + 15 * i])  # members of different sizes ("sampleable" weighs them)
        rbs.append(rb)
    return lib.ReplayBufferEnsemble(*rbs, p=p, num_buffer_sampled=num_buffer_sampled, batch_size=48)


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    keys = set(a.keys(True, True))
    return (
        a.batch_size == b.batch_size
        and keys == set(b.keys(True, True))
        and all(torch.equal(a.get(k), b.get(k)) for k in keys)
    )


@pytest.mark.parametrize("storage", ["memmap", "list", "lazy"])
@pytest.mark.parametrize("kind", ["tensor", "td"])
@pytest.mark.parametrize("p", [[0.0, 0.9, 0.1], None, "sampleable"])
@pytest.mark.parametrize("num_buffer_sampled", [3, 16, None])
@pytest.mark.parametrize("sampler", ["random", "without_replacement"])
def test_ensemble_draws_what_torchrl_draws(storage, kind, p, num_buffer_sampled, sampler):
    out = {}
    for name, lib in LIBS.items():
        rb = _ensemble(lib, storage, kind, p, num_buffer_sampled, sampler)
        torch.manual_seed(7)
        out[name] = [rb.sample(return_info=True) for _ in range(3)]
    for (a, info_a), (b, info_b) in zip(out["torchrl"], out["rbdata"], strict=True):
        assert _equal(a, b)
        assert _equal(info_a["index"], info_b["index"])


@pytest.mark.parametrize("name", list(LIBS))
def test_ensemble_indexing_and_refusals(name):
    lib = LIBS[name]
    rb = _ensemble(lib, "lazy", "td", None, None, "random")
    assert rb[:] is rb and isinstance(rb[[0, 2]], lib.ReplayBufferEnsemble)
    assert isinstance(rb.storage[1], lib.LazyTensorStorage)
    assert isinstance(rb.sampler[:2], lib.SamplerEnsemble)
    assert isinstance(rb.writer[0], lib.RoundRobinWriter)
    assert rb[:, :3].shape == torch.Size([3, 3])
    with pytest.raises(TypeError):
        rb.storage[torch.tensor([0.0, 1.0])]
    with pytest.raises(RuntimeError):
        rb.extend(_member_data("td", 0))
    with pytest.raises((NotImplementedError, TypeError)):  # torchrl's takes no argument
        rb.writer.extend(torch.zeros(2))
    with pytest.raises(RuntimeError):
        lib.SamplerEnsemble(lib.RandomSampler(), p=[1.0], sample_from_all=True)
    with pytest.raises(ValueError):
        rb.sample(47)


# ---------------------------------------------------------------- checkpointers
def _steps(start: int, n: int, ends: set[int]) -> TensorDict:
    obs = torch.arange(start, start + n, dtype=torch.float32)
    done = torch.tensor([int(o) in ends for o in obs])[:, None]
    return TensorDict(
        {
            "obs": obs[:, None].expand(n, 2).clone(),
            "action": obs.long(),
            "done": torch.zeros(n, 1, dtype=torch.bool),
            "terminated": torch.zeros(n, 1, dtype=torch.bool),
            "next": {
                "obs": (obs + 1)[:, None].expand(n, 2).clone(),
                "done": done,
                "terminated": done,
                "reward": obs[:, None],
            },
        },
        batch_size=[n],
    )


FILLS = {
    "part": (10, [(0, 4, {2})]),
    "wrapped": (10, [(0, 12, {3, 7})]),
    "two writes": (10, [(0, 7, {6}), (7, 9, {9, 12})]),
    "exactly full": (8, [(0, 8, {7})]),
    "no end yet": (8, [(0, 5, set()), (5, 6, {8})]),
}
CHECKPOINTERS = [
    "TensorStorageCheckpointer",
    "FlatStorageCheckpointer",
    "NestedStorageCheckpointer",
    "H5StorageCheckpointer",
]


def _saved(path, checkpointer: str) -> TensorDict:
    if checkpointer == "H5StorageCheckpointer":
        file = PersistentTensorDict.from_h5(str(path / "checkpoint.h5"))
        data = file.to_tensordict()
        file.close()
        return data
    return TensorDict.load_memmap(path).to_tensordict()


def _leaves_equal(a, b) -> bool:
    if a.is_nested:
        parts_a, parts_b = a.unbind(0), b.unbind(0)
        return len(parts_a) == len(parts_b) and all(
            x.shape == y.shape and torch.equal(x, y) for x, y in zip(parts_a, parts_b, strict=True)
        )
    return a.shape == b.shape and torch.equal(a, b)


@pytest.mark.parametrize("checkpointer", CHECKPOINTERS)
@pytest.mark.parametrize("fill", list(FILLS))
def test_checkpointers_write_torchrl_s_files_and_read_each_other(tmp_path, checkpointer, fill):
    size, writes = FILLS[fill]
    buffers, saved = {}, {}
    for name, lib in LIBS.items():
        # a memmap storage: torchrl's lazy tensor storage leaves unwritten rows uninitialized
        rb = lib.ReplayBuffer(storage=lib.LazyMemmapStorage(size))
        rb.storage.checkpointer = getattr(lib, checkpointer)()
        for start, n, ends in writes:
            rb.extend(_steps(start, n, ends))
        path = tmp_path / name
        rb.storage.dumps(path)
        buffers[name], saved[name] = rb, _saved(path, checkpointer)
    ours, theirs = saved["rbdata"], saved["torchrl"]
    assert set(ours.keys(True, True)) == set(theirs.keys(True, True))
    for key in theirs.keys(True, True):
        value = theirs.get(key)
        if isinstance(value, torch.Tensor):
            assert _leaves_equal(value, ours.get(key)), key
    for source, reader in (("torchrl", "rbdata"), ("rbdata", "torchrl")):
        lib = LIBS[reader]
        storage = lib.LazyTensorStorage(size)
        storage.checkpointer = getattr(lib, checkpointer)()
        storage.loads(tmp_path / source)
        written = buffers[source].storage
        n = len(written)
        assert len(storage) == n
        rows, expected = storage[torch.arange(n)], written[torch.arange(n)]
        for key in expected.keys(True, True):
            assert torch.equal(rows.get(key), expected.get(key)), (source, key)


@pytest.mark.parametrize("name", list(LIBS))
def test_list_checkpointer_refuses(tmp_path, name):
    lib = LIBS[name]
    storage = lib.ListStorage(4)
    storage.checkpointer = lib.ListStorageCheckpointer()
    with pytest.raises(NotImplementedError):
        storage.dumps(tmp_path)


def test_flat_converters_give_torchrl_s_flat_form():
    data = torch.cat([_steps(0, 6, {2, 5}), _steps(6, 4, set())])
    for shift, is_full in ((10, True), (3, True), (6, False)):
        out = {}
        for name, lib in LIBS.items():
            hook = lib.TED2Flat()
            hook.shift, hook.is_full = shift, is_full
            path = None
            if name == "torchrl":  # torchrl's hook writes a memory-mapped copy at path
                import tempfile

                path = tempfile.mkdtemp(prefix="parity-a-ted2flat-")
            out[name] = hook(data.clone(), path=path).to_tensordict()
            if path is not None:
                import shutil

                shutil.rmtree(path)
        for key in out["torchrl"].keys(True, True):
            value = out["torchrl"].get(key)
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, out["rbdata"].get(key)), (shift, is_full, key)
        back = {name: lib.Flat2TED()(out["torchrl"].clone()) for name, lib in LIBS.items()}
        for key in back["torchrl"].keys(True, True):
            assert torch.equal(back["torchrl"].get(key), back["rbdata"].get(key)), key


# --------------------------------------------------------------------- hindsight
def _episodes(lengths: list[int]) -> TensorDict:
    n = sum(lengths)
    episode = torch.cat([torch.full((k,), i) for i, k in enumerate(lengths)])
    done = torch.zeros(n, 1, dtype=torch.bool)
    done[torch.tensor(lengths).cumsum(0) - 1] = True
    achieved = torch.stack([torch.arange(n), episode], -1).float()
    return TensorDict(
        {
            "desired_goal": torch.full((n, 2), -1.0),
            "achieved_goal": achieved,
            "next": {
                "desired_goal": torch.full((n, 2), -1.0),
                "reward": torch.zeros(n, 1),
                "done": done,
            },
        },
        batch_size=[n],
    )


def _reward(td: TensorDict) -> torch.Tensor:
    return (td["achieved_goal"] == td["desired_goal"]).all(-1, keepdim=True).float()


def _her_batches(lib, strategy, ratio, size, lengths):
    rb = lib.HERReplayBuffer(
        _reward, her_ratio=ratio, strategy=strategy, storage=lib.LazyTensorStorage(size),
        batch_size=32,
    )  # fmt: skip
    rb.extend(_episodes(lengths))
    torch.manual_seed(3)
    return [rb.sample() for _ in range(3)]


@pytest.mark.parametrize("strategy", ["future", "final", "episode", "random"])
@pytest.mark.parametrize("ratio", [0.8, 1.0, 0.3])
def test_her_relabels_as_torchrl(strategy, ratio):
    batches = {
        name: _her_batches(lib, strategy, ratio, 100, [3, 5, 2, 6]) for name, lib in LIBS.items()
    }
    for a, b in zip(batches["torchrl"], batches["rbdata"], strict=True):
        for key in a.keys(True, True):
            assert torch.equal(a.get(key), b.get(key)), key


def test_her_full_ring_keeps_goals_in_the_episode():
    """Deliberate: past the last end in slot order, torchrl relabels with an older episode's."""
    batches = {name: _her_batches(lib, "final", 1.0, 8, [4, 6]) for name, lib in LIBS.items()}
    # slots 0-1 hold steps 8-9, slots 2-3 the end of episode 0, slots 4-7 steps 4-7 of episode 1
    for theirs, ours in zip(batches["torchrl"], batches["rbdata"], strict=True):
        assert torch.equal(theirs["index"], ours["index"])
        index = ours["index"]
        before = index <= 3
        assert torch.equal(theirs["desired_goal"][before], ours["desired_goal"][before])
        tail = ~before
        assert (ours["desired_goal"][tail, 0] == 7).all()  # rbdata: slot 7, same episode part
        assert (theirs["desired_goal"][tail, 0] == 3).all()  # torchrl: slot 3, episode 0


@pytest.mark.parametrize("track", [False, True])
def test_routed_writes_as_torchrl(track):
    out = {}
    for name, lib in LIBS.items():
        members = [
            lib.TensorDictReplayBuffer(
                storage=lib.LazyTensorStorage(4),
                writer=lib.TensorDictRoundRobinWriter(track_generations=track),
            )
            for _ in range(2)
        ]
        rb = lib.ReplayBufferEnsemble(*members, routing_key="member")
        data = TensorDict(
            {"member": torch.tensor([1, 0, 1, 1, 1, 1, 0]), "x": torch.arange(7.0)}, [7]
        )
        first = rb.extend(data)
        second = rb.extend(data[:3])
        out[name] = (first, second, members[0][:]["x"], members[1][:]["x"])
    for theirs, ours in zip(out["torchrl"], out["rbdata"], strict=True):
        if isinstance(theirs, torch.Tensor):
            assert torch.equal(theirs, ours)
        else:
            assert set(theirs.keys()) == set(ours.keys())
            for key in theirs.keys():
                assert torch.equal(theirs[key], ours[key]), key
