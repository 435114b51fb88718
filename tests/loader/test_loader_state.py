"""ReplayDataset checkpoints: a resumed StatefulDataLoader yields what the original would have."""

from __future__ import annotations

import itertools

import pytest
import torch
from tensordict import TensorDict
from torchdata.stateful_dataloader import Stateful

from rbdata import (
    LazyTensorStorage,
    RandomSampler,
    ReplayDataset,
    SamplerWithoutReplacement,
    TensorDictReplayBuffer,
)

KINDS = {
    # kind: (buffer kwargs, dataset kwargs, batches taken before the checkpoint)
    "random": ({"sampler": RandomSampler}, {"num_batches": 9}, 3),
    "without_replacement": ({"sampler": SamplerWithoutReplacement}, {}, 4),
    "consume_after_n": ({"sampler": RandomSampler, "consume_after_n_samples": 2}, {}, 7),
}


def transitions(n: int) -> TensorDict:
    obs = torch.arange(n, dtype=torch.float32)
    return TensorDict({"obs": obs.unsqueeze(-1).clone(), "next": {"r": -obs}}, batch_size=[n])


def make_buffer(kind: str, seed: int, fill: bool = True):
    kwargs = dict(KINDS[kind][0])
    kwargs["sampler"] = kwargs["sampler"]()
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(64),
        batch_size=4,
        generator=torch.Generator().manual_seed(seed),
        **kwargs,
    )
    if fill:
        rb.extend(transitions(30))
    return rb


def summary(batches) -> list[list[int]]:
    for b in batches:
        assert torch.equal(b["obs"].squeeze(-1), b["index"].float())  # data matches its index
    return [b["index"].tolist() for b in batches]


def roundtrip(state, tmp_path):
    torch.save(state, tmp_path / "loader.pt")
    return torch.load(tmp_path / "loader.pt", weights_only=True)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("kind", list(KINDS))
def test_stateful_dataloader_resumes_mid_pass(kind, prefetch, tmp_path):
    ds_kwargs, taken = KINDS[kind][1], KINDS[kind][2]
    rb = make_buffer(kind, seed=0)
    ds = ReplayDataset(rb, prefetch=prefetch, **ds_kwargs)
    assert isinstance(ds, Stateful)
    loader = ds.dataloader()
    it = iter(loader)
    head = [next(it) for _ in range(taken)]
    state = roundtrip(loader.state_dict(), tmp_path)
    rb.dumps(tmp_path / "buffer")
    tail = list(it)
    next_pass = list(itertools.islice(loader, 5))
    ds.close()
    assert len(head) == taken and len(tail) > 0

    rb2 = make_buffer(kind, seed=123, fill=False)  # another seed: the RNG state must come back
    rb2.loads(tmp_path / "buffer")
    ds2 = ReplayDataset(rb2, prefetch=prefetch, **ds_kwargs)
    loader2 = ds2.dataloader()
    loader2.load_state_dict(state)
    assert summary(list(loader2)) == summary(tail)
    assert summary(list(itertools.islice(loader2, 5))) == summary(next_pass)
    ds2.close()
    if kind == "without_replacement":
        assert sorted(itertools.chain(*summary(head + tail))) == list(range(30))
    if kind == "consume_after_n":
        counts = torch.bincount(torch.cat([b["index"] for b in head + tail]), minlength=30)
        assert counts.tolist() == [2] * 30


def test_state_before_iterating_resumes_the_whole_pass(tmp_path):
    rb = make_buffer("without_replacement", seed=1)
    ds = ReplayDataset(rb, prefetch=2)
    loader = ds.dataloader()
    state = loader.state_dict()
    rb.dumps(tmp_path / "buffer")
    full = summary(list(loader))
    rb2 = make_buffer("without_replacement", seed=5, fill=False)
    rb2.loads(tmp_path / "buffer")
    loader2 = ReplayDataset(rb2, prefetch=2).dataloader()
    loader2.load_state_dict(state)
    assert summary(list(loader2)) == full
    ds.close()


def test_dataset_state_dict_alone_and_held_back_batches():
    rb = make_buffer("random", seed=2)
    ds = ReplayDataset(rb, num_batches=6, prefetch=2)
    ds.held_back = 1  # the consumer keeps one batch back from the training step
    it = iter(ds)
    head = [next(it) for _ in range(3)]
    state = ds.state_dict()
    assert state["position"] == 2
    assert torch.equal(state["pending"][0]["index"], head[2]["index"])  # the held-back batch
    tail = list(it)
    ds.load_state_dict(state)  # back to the checkpoint, in the same process
    again = summary(list(ds))
    assert again == summary(head[2:] + tail)
    ds.close()


def test_malformed_state_raises_and_changes_nothing():
    rb = make_buffer("without_replacement", seed=3)
    ds = ReplayDataset(rb)
    next(iter(ds))
    before = ds.state_dict()
    with pytest.raises(ValueError, match="pending"):
        ds.load_state_dict({"pending": "nope"})
    with pytest.raises(ValueError, match="position"):
        ds.load_state_dict({"position": -1})
    with pytest.raises(TypeError, match="dict"):
        ds.load_state_dict([])
    after = ds.state_dict()
    assert after["position"] == before["position"] == 1
    assert torch.equal(after["sampler"]["perm"], before["sampler"]["perm"])
    assert torch.equal(after["rng"], before["rng"])
