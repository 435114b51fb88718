"""ReplayBufferEnsemble: torchrl 0.14.1's observable behaviour (its test_ensemble.py, its docs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from tensordict import TensorDict, TensorDictBase

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    ReplayBuffer,
    ReplayBufferEnsemble,
    RoundRobinWriter,
    SamplerEnsemble,
    SamplerWithoutReplacement,
    StorageEnsemble,
    TensorDictReplayBuffer,
    TensorStorage,
    WriterEnsemble,
)


def _data(kind: str, offset: int = 0):
    if kind == "tensor":
        return torch.arange(90) + offset
    return TensorDict(
        {
            "root": torch.arange(90) + offset,
            "nested": TensorDict({"data": torch.arange(180).view(90, 2)}, batch_size=[90, 2]),
        },
        batch_size=[90],
    )


def _storage(kind: str, data: str):
    if kind == "memmap":
        return LazyMemmapStorage(100)
    if kind == "list":
        return ListStorage(100)
    zeros = torch.zeros(100, dtype=torch.long)
    return TensorStorage(TensorDict(batch_size=[100]) if data == "td" else zeros)


def _three(storage: str, data: str, sampler=RandomSampler, batch=None):
    rbs = []
    for i in range(3):
        rb = ReplayBuffer(storage=_storage(storage, data), sampler=sampler(), batch_size=batch)
        rb.extend(_data(data, 1000 * (i + 1)))
        rbs.append(rb)
    return rbs


@pytest.mark.parametrize("storage", ["memmap", "tensor", "list"])
@pytest.mark.parametrize("data", ["tensor", "td"])
@pytest.mark.parametrize("num_buffer_sampled", [3, 16, None])
def test_sample_shape_and_weights(storage, data, num_buffer_sampled):
    rb = ReplayBufferEnsemble(
        *_three(storage, data), p=[0.0, 0.9, 0.1], num_buffer_sampled=num_buffer_sampled,
        batch_size=48,
    )  # fmt: skip
    sample, info = rb.sample(return_info=True)
    n = num_buffer_sampled or 3
    assert sample.shape[:2] == torch.Size([n, 48 // n])
    values = sample["root"] if data == "td" else sample
    assert not ((values >= 1000) & (values < 2000)).any()  # member 0 has weight 0
    if data == "td":
        ids = sample["index", "buffer_ids"]
        assert ids.shape == torch.Size([n, 48 // n]) and 0 not in ids.unique().tolist()
        assert ("nested", "data") in sample.keys(True)
        # each row comes from the member its id names, at the index it names
        if storage != "tensor":  # (a TensorStorage of zeros counts its 100 rows as written)
            assert torch.equal(sample["root"] // 1000 - 1, ids)
            assert torch.equal(sample["root"] % 1000, sample["index", "index"])
    assert "index" in info.keys()
    batch = next(iter(rb))
    assert batch.shape[:2] == torch.Size([n, 48 // n])


def test_sample_from_all_draws_each_member_once():
    rb = ReplayBufferEnsemble(*_three("memmap", "tensor"), sample_from_all=True)
    sample = rb.sample(30)
    assert torch.equal(sample // 1000, torch.arange(1, 4)[:, None].expand(3, 10))


def test_without_replacement_members_and_batch_size_rules():
    with pytest.raises(ValueError, match="predictable batch-size"):
        ReplayBuffer(
            storage=LazyTensorStorage(10), sampler=SamplerWithoutReplacement(drop_last=True)
        )
    rbs = _three("tensor", "tensor", lambda: SamplerWithoutReplacement(drop_last=True), 16)
    rb = ReplayBufferEnsemble(*rbs, num_buffer_sampled=16, batch_size=48)
    assert rb.sample().shape == torch.Size([16, 3])
    with pytest.raises(ValueError, match="divisible"):
        rb.sample(47)
    with pytest.raises(RuntimeError, match="batch_size not specified"):
        ReplayBufferEnsemble(*_three("tensor", "tensor")).sample()


def test_p_and_sample_from_all_are_exclusive():
    with pytest.raises(RuntimeError):
        ReplayBufferEnsemble(*_three("tensor", "tensor"), p=[1, 1, 1], sample_from_all=True)


def _dual(explicit: bool):
    rb0 = TensorDictReplayBuffer(storage=LazyMemmapStorage(10))
    rb1 = TensorDictReplayBuffer(storage=LazyMemmapStorage(10))
    rb0.extend(TensorDict({"x": torch.zeros(10, 3)}, batch_size=[10]))
    rb1.extend(TensorDict({"x": torch.ones(10, 3)}, batch_size=[10]))
    if explicit:
        rb = ReplayBufferEnsemble(
            storages=StorageEnsemble(rb0.storage, rb1.storage),
            samplers=SamplerEnsemble(rb0.sampler, rb1.sampler, p=[0.5, 0.5]),
            writers=WriterEnsemble(rb0.writer, rb1.writer),
        )
    else:
        rb = ReplayBufferEnsemble(rb0, rb1, p=[0.5, 0.5])
    return rb, rb0, rb1


@pytest.mark.parametrize("explicit", [False, True])
def test_indexing(explicit):
    rb, rb0, rb1 = _dual(explicit)
    if explicit:
        assert rb[0].storage is rb0.storage and rb[1].storage is rb1.storage
    else:
        assert rb[0] is rb0 and rb[1] is rb1
    assert rb[:] is rb and len(rb) == 2
    torch.manual_seed(0)
    expected = rb.sample(6)
    for index in (torch.tensor([0, 1]), slice(0, 2), np.array([0, 1]), [0, 1]):
        torch.manual_seed(0)
        assert (rb[index].sample(6) == expected).all()
        assert (rb[index, :3] == rb[:, :3]).all()
    assert rb[:, :3].shape == torch.Size([2, 3])
    assert isinstance(rb.storage[[0, 1]], StorageEnsemble)
    assert isinstance(rb.storage[1], LazyMemmapStorage)
    assert isinstance(rb.sampler[:2], SamplerEnsemble) and isinstance(rb.sampler[1], RandomSampler)
    assert isinstance(rb.writer[np.array([0, 1])], WriterEnsemble)
    assert isinstance(rb.writer[0], RoundRobinWriter)
    with pytest.raises(IndexError):
        rb[5]
    with pytest.raises(TypeError):
        rb.storage[torch.tensor([0.0])]
    with pytest.raises(RuntimeError):
        rb.storage[torch.zeros(1, 1, dtype=torch.long)]


def test_ensemble_components_do_not_write():
    rb, rb0, _ = _dual(False)
    with pytest.raises(RuntimeError, match="routing"):
        rb.extend(TensorDict({"x": torch.zeros(2, 3)}, batch_size=[2]))
    with pytest.raises(NotImplementedError):
        rb.writer.extend(torch.zeros(2))
    with pytest.raises(RuntimeError):
        rb.storage.set(0, torch.zeros(3))
    assert len(rb0) == 10 and rb.write_count == 20


def test_routed_writes():
    members = [TensorDictReplayBuffer(storage=LazyTensorStorage(10)) for _ in range(2)]
    rb = ReplayBufferEnsemble(*members, routing_key="member")
    data = TensorDict({"member": torch.tensor([1, 0, 1]), "x": torch.arange(3.0)}, [3])
    out = rb.extend(data)
    assert out["buffer_ids"].tolist() == [1, 0, 1] and out["index"].tolist() == [0, 0, 1]
    assert members[1][:]["x"].tolist() == [0.0, 2.0] and members[0][:]["x"].tolist() == [1.0]
    with pytest.raises(ValueError, match="lie in"):
        rb.extend(TensorDict({"member": torch.tensor([2]), "x": torch.zeros(1)}, [1]))
    with pytest.raises(TypeError, match="integers"):
        rb.extend(TensorDict({"member": torch.tensor([0.0]), "x": torch.zeros(1)}, [1]))
    assert len(members[0]) == 1  # the refused writes changed nothing
    by_dim = ReplayBufferEnsemble(*members, routing_dim=1)
    by_dim.extend(
        TensorDict({"member": torch.zeros(4, 2, dtype=torch.long), "x": torch.ones(4, 2)}, [4, 2])
    )
    assert len(members[0]) == 5 and len(members[1]) == 6
    with pytest.raises(ValueError, match="mutually exclusive"):
        ReplayBufferEnsemble(*members, routing_key="member", routing_dim=0)


def test_state_and_dumps_round_trip(tmp_path):
    rb, rb0, rb1 = _dual(False)
    copy, c0, c1 = _dual(False)
    c0.empty()
    c1.empty()
    rb.dumps(tmp_path)
    copy.loads(tmp_path)
    assert (c0[:]["x"] == 0).all() and (c1[:]["x"] == 1).all() and len(c1) == 10
    c0.empty()
    copy.load_state_dict(rb.state_dict())
    assert len(c0) == 10
    stats = rb.stats()
    assert stats["size"] == 20 and stats["capacity"] == 20 and stats["num_buffers"] == 2


def test_storage_ensemble_checkpointer(tmp_path):
    ensemble = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
    ensemble[0].set(torch.arange(2), torch.ones(2, 3))
    copy = StorageEnsemble(LazyTensorStorage(4), LazyTensorStorage(4))
    copy[1].set(torch.arange(1), torch.ones(1, 3))
    ensemble.dumps(tmp_path)
    assert (tmp_path / "metadata.json").read_text() == '{"empty_members": [1]}'
    copy.loads(tmp_path)
    assert len(copy[0]) == 2 and len(copy[1]) == 0


def test_storage_ensemble_checkpointer_saves_member_transforms(tmp_path):
    rb, _, _ = _dual(False)  # members built from buffers: their (empty) Compose transforms
    rb.storage.dumps(tmp_path)
    assert (tmp_path / "0_transform.pt").is_file() and (
        tmp_path / "1" / "storage_state.pt"
    ).exists()
    rb.storage.loads(tmp_path)
    assert len(rb[0]) == 10


def test_sampleable_weights_follow_what_members_can_return():
    rbs = []
    for size in (0, 10, 30):
        rb = ReplayBuffer(storage=LazyTensorStorage(50))
        if size:
            rb.extend(torch.arange(size) + 1000 * len(rbs))
        rbs.append(rb)
    rb = ReplayBufferEnsemble(*rbs, p="sampleable", num_buffer_sampled=400, batch_size=400)
    torch.manual_seed(0)
    ids = rb.sample() // 1000
    assert 0 not in ids.unique().tolist()  # the empty member is never picked
    share = (ids[:, 0] == 2).float().mean().item()
    assert 0.65 < share < 0.85  # 30 of the 40 sampleable items
    with pytest.raises(ValueError, match="sampleable"):
        SamplerEnsemble(RandomSampler(), p="uniform")
    empty = ReplayBufferEnsemble(rbs[0], p="sampleable", batch_size=2)
    with pytest.raises(RuntimeError, match="None of the replay-buffer ensemble members"):
        empty.sample()


# ------------------------------------------------- conditional updates (torchrl 0.14.1's)
def _tracked(n: int = 4, sampler: Any = None) -> TensorDictReplayBuffer:
    from rbdata import LazyTensorStorage, TensorDictRoundRobinWriter

    kwargs = {} if sampler is None else {"sampler": sampler}
    return TensorDictReplayBuffer(
        storage=LazyTensorStorage(n),
        writer=TensorDictRoundRobinWriter(track_generations=True),
        **kwargs,
    )


def _routed() -> tuple[ReplayBufferEnsemble, TensorDictBase]:
    ens = ReplayBufferEnsemble(_tracked(), _tracked(), routing_key="m")
    meta = ens.extend(
        TensorDict(
            m=torch.tensor([0, 1, 1, 0]),
            x=torch.zeros(4),
            v=torch.zeros(4, dtype=torch.long),
            batch_size=[4],
        )
    )
    return ens, meta


def test_update_if_present_routes_each_record_to_its_member_and_skips_rewritten_slots():
    """Figures from torchrl 0.14.1's ReplayBufferEnsemble on the same calls."""
    ens, meta = _routed()
    three = {"m": torch.ones(3, dtype=torch.long), "v": torch.zeros(3, dtype=torch.long)}
    ens.extend(TensorDict({**three, "x": torch.zeros(3)}, batch_size=[3]))
    result = ens.update_if_present(
        index=meta, generation=meta["index_generation"], patch={"x": torch.tensor([1.0, 2, 3, 4])}
    )
    assert result.updated.tolist() == [True, False, True, True]  # member 1 slot 0 rewritten
    assert result.stale.tolist() == [False, True, False, False]
    assert ens[0][:]["x"].tolist() == [1.0, 4.0] and ens[1][:]["x"].tolist() == [0.0, 3.0, 0.0, 0.0]
    result = ens.update_if_present(
        index=meta.reshape(2, 2),
        generation=meta["index_generation"].reshape(2, 2),
        patch=TensorDict(x=torch.tensor([[5.0, 6], [7, 8]]), batch_size=[2, 2]),
        version_key="v",
        version=torch.tensor([[1, 1], [1, 0]]),
    )
    assert result.updated.tolist() == [[True, False], [True, True]]
    assert result.version_rejected is not None and not result.version_rejected.any()
    assert ens[0][:]["x"].tolist() == [5.0, 8.0] and ens[0][:]["v"].tolist() == [1, 0]


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda a: {**a, "index": a["index"]["index"]}, TypeError, "routed metadata"),
        (lambda a: {**a, "index": a["index"].exclude("buffer_ids")}, KeyError, "buffer_ids"),
        (lambda a: {**a, "generation": a["generation"][:3]}, ValueError, "generation has 3"),
        (lambda a: {**a, "patch": {"x": torch.zeros(3)}}, ValueError, r"patch\['x'\]"),
        (lambda a: {**a, "patch": {"y": torch.zeros(4)}}, KeyError, "patch key 'y'"),
        (lambda a: {**a, "patch": {"x": torch.zeros(4, dtype=torch.long)}}, ValueError, "dtype"),
        (lambda a: {**a, "version_key": "v"}, ValueError, "together"),
        (
            lambda a: {
                **a,
                "index": a["index"].clone().set("buffer_ids", torch.tensor([0, 1, 1, 2])),
            },
            ValueError,
            r"lie in \[0, 1\]",
        ),
        (
            lambda a: {**a, "index": a["index"].clone().set("index", torch.tensor([0, 0, 1, 9]))},
            ValueError,
            "outside member 0",
        ),
    ],
)
def test_a_refused_routed_update_patches_no_member(change, error, match):
    ens, meta = _routed()
    args = {"index": meta, "generation": meta["index_generation"], "patch": {"x": torch.ones(4)}}
    with pytest.raises(error, match=match):
        ens.update_if_present(**change(args))
    assert ens[0][:]["x"].tolist() == [0.0, 0.0] and ens[1][:]["x"].tolist() == [0.0, 0.0]


def test_update_if_present_needs_members_that_track_generations():
    ens = ReplayBufferEnsemble(
        _tracked(), TensorDictReplayBuffer(storage=LazyTensorStorage(4)), routing_key="m"
    )
    meta = TensorDict(buffer_ids=torch.tensor([0]), index=torch.tensor([0]), batch_size=[1])
    with pytest.raises(RuntimeError, match="track slot generations; member 1"):
        ens.update_if_present(index=meta, generation=torch.zeros(1), patch={})


def _stream(n: int, done_last: bool = False, term_last: bool = False) -> TensorDict:
    done, term = torch.zeros(n, 1, dtype=torch.bool), torch.zeros(n, 1, dtype=torch.bool)
    done[-1], term[-1] = done_last, term_last
    return TensorDict(
        {("next", "done"): done, ("next", "terminated"): term,
         ("next", "truncated"): torch.zeros(n, 1, dtype=torch.bool), "x": torch.arange(n)},
        [n],
    )  # fmt: skip


def test_end_streams_closes_each_members_last_record_as_torchrl_does():
    """Figures from torchrl 0.14.1's ``end_streams`` on the same members."""
    from rbdata import SliceSampler

    def member(n: int = 8) -> TensorDictReplayBuffer:
        return _tracked(n, SliceSampler(slice_len=2, end_key=("next", "done")))

    open_, ended, wrapped, empty = member(), member(), member(4), member()
    open_.extend(_stream(3))
    ended.extend(_stream(3, done_last=True, term_last=True))
    wrapped.extend(_stream(6))  # the last record is in slot 1
    ReplayBufferEnsemble(open_, ended, wrapped, empty).end_streams()
    for rb, done, truncated in [
        (open_, [False, False, True], [False, False, True]),
        (ended, [False, False, True], [False, False, False]),  # it terminated: not truncated
        (wrapped, [False, True, False, False], [False, True, False, False]),
    ]:
        assert rb[:]["next", "done"].flatten().tolist() == done
        assert rb[:]["next", "truncated"].flatten().tolist() == truncated
    assert (open_.write_count, wrapped.write_count, len(empty)) == (3, 6, 0)


def test_end_streams_refuses_unfit_members_and_patches_none():
    from rbdata import RandomSampler, SliceSampler

    fit = _tracked(8, SliceSampler(slice_len=2, end_key=("next", "done")))
    fit.extend(_stream(3))
    for unfit in (
        _tracked(8, RandomSampler()),
        TensorDictReplayBuffer(
            storage=LazyTensorStorage(8),
            sampler=SliceSampler(slice_len=2, end_key=("next", "done")),
        ),
    ):
        unfit.extend(_stream(3))
        with pytest.raises(RuntimeError, match="member 1"):
            ReplayBufferEnsemble(fit, unfit).end_streams()
        assert not fit[:]["next", "done"].any()
    ids = _tracked(8, SliceSampler(slice_len=2, end_key=("next", "done"), traj_key="x"))
    ids.extend(_stream(3))  # x holds 0, 1, 2: three trajectory ids
    with pytest.raises(RuntimeError, match="same trajectory id"):
        ReplayBufferEnsemble(fit, ids).end_streams()
    with pytest.raises(ValueError, match="distinct"):
        ReplayBufferEnsemble(fit).end_streams(truncated_key=("next", "done"))
    assert not fit[:]["next", "done"].any()
