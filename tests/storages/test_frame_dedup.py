"""FrameDedupStorage reads exactly what a LazyTensorStorage fed the same writes reads."""

from __future__ import annotations

import copy
import tempfile

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

import rbdata
from rbdata.storages import FrameDedupStorage, LazyTensorStorage

K = 3  # frame-stack depth of the generated pixels
FRAME = (2, 3)


def _episodes(seed: int, steps: int, max_len: int) -> TensorDict:
    """``steps`` TED transitions of episodes of random lengths (frame-stacked pixels).

    Frames take 3 values, so equal neighbours occur by chance too; an episode
    starts with its first frame repeated (CatFrames' padding) or zeros, and
    ends terminated or truncated.
    """
    g = torch.Generator().manual_seed(seed)
    rows: list[dict[str, torch.Tensor]] = []
    while len(rows) < steps:
        length = int(torch.randint(1, max_len + 1, (1,), generator=g))
        first = torch.randint(0, 3, FRAME, generator=g, dtype=torch.uint8)
        pad = first if bool(torch.randint(0, 2, (1,), generator=g)) else torch.zeros_like(first)
        stack = torch.stack([pad] * (K - 1) + [first])
        state = torch.randn(2, generator=g)
        truncated = bool(torch.randint(0, 2, (1,), generator=g))
        for t in range(length):
            frame = torch.randint(0, 3, FRAME, generator=g, dtype=torch.uint8)
            after = torch.cat([stack[1:], frame[None]])
            next_state = torch.randn(2, generator=g)
            end = t == length - 1
            rows.append(
                {
                    "pixels": stack,
                    "state": state,
                    "action": torch.randint(0, 4, (), generator=g),
                    "next_pixels": after,
                    "next_state": next_state,
                    "reward": torch.randn(1, generator=g),
                    "terminated": torch.tensor([end and not truncated]),
                    "truncated": torch.tensor([end and truncated]),
                }
            )
            stack, state = after, next_state
    rows = rows[:steps]
    col = {k: torch.stack([r[k] for r in rows]) for k in rows[0]}
    done = col["terminated"] | col["truncated"]
    nxt = {
        "pixels": col["next_pixels"],
        "state": col["next_state"],
        "reward": col["reward"],
        "terminated": col["terminated"],
        "truncated": col["truncated"],
        "done": done,
    }
    return TensorDict(
        {"pixels": col["pixels"], "state": col["state"], "action": col["action"], "next": nxt},
        [steps],
    )


def _same(a: TensorDict, b: TensorDict) -> None:
    keys = sorted(map(str, a.keys(True, True)))
    assert keys == sorted(map(str, b.keys(True, True)))
    for key in a.keys(True, True):
        assert torch.equal(a.get(key), b.get(key)), key


def _dedup(capacity: int, stacked: bool) -> FrameDedupStorage:
    if stacked:
        return FrameDedupStorage(capacity, keys=["pixels"], frame_stack=K)
    return FrameDedupStorage(capacity)


SAMPLERS = ["uniform", "prioritized", "consume"]


def _buffers(capacity: int, stacked: bool, sampler: str, seed: int) -> list[rbdata.ReplayBuffer]:
    made = []
    for storage in (_dedup(capacity, stacked), LazyTensorStorage(capacity)):
        kwargs: dict[str, object] = {}
        if sampler == "prioritized":
            kwargs["sampler"] = rbdata.PrioritizedSampler(capacity, 0.7, 0.5)
        if sampler == "consume":
            kwargs["consume_after_n_samples"] = 2
        made.append(
            rbdata.ReplayBuffer(
                storage=storage,
                batch_size=5,
                generator=torch.Generator().manual_seed(seed),
                **kwargs,
            )
        )
    return made


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    capacity=st.integers(3, 23),
    chunks=st.lists(st.integers(1, 17), min_size=1, max_size=8),
    max_len=st.integers(1, 9),
    stacked=st.booleans(),
    sampler=st.sampled_from(SAMPLERS),
    rewrites=st.integers(0, 2),
)
def test_samples_match_a_plain_storage(
    seed: int,
    capacity: int,
    chunks: list[int],
    max_len: int,
    stacked: bool,
    sampler: str,
    rewrites: int,
) -> None:
    """Random episode lengths, resets, truncations, wrap-around, writes at any slot."""
    data = _episodes(seed, sum(chunks), max_len)
    dedup, plain = _buffers(capacity, stacked, sampler, seed)
    g = torch.Generator().manual_seed(seed + 1)
    start = 0
    for size in chunks:
        piece = data[start : start + size]
        start += size
        for rb in (dedup, plain):
            rb.extend(piece)
        if rewrites and len(plain.storage) > 1:  # a write at random filled slots
            n = int(torch.randint(1, len(plain.storage), (1,), generator=g))
            slots = torch.randperm(len(plain.storage), generator=g)[:n]
            rows = data[torch.randint(0, len(data), (n,), generator=g)]
            for rb in (dedup, plain):
                rb.storage.set(slots, rows)
        filled = len(plain.storage)
        _same(dedup.storage.get(torch.arange(filled)), plain.storage.get(torch.arange(filled)))
        for _ in range(2):
            got, want = _draw(dedup), _draw(plain)
            if want is None:
                assert got is None
                continue
            _same(got, want)
            if sampler == "prioritized":
                priority = torch.rand(filled, generator=g) + 0.1
                for rb in (dedup, plain):
                    rb.update_priority(torch.arange(filled), priority)


def _draw(rb: rbdata.ReplayBuffer) -> TensorDict | None:
    try:
        return rb.sample()
    except RuntimeError:  # a consumed buffer is empty
        return None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    capacity=st.integers(3, 19),
    steps=st.integers(1, 60),
    stacked=st.booleans(),
)
def test_dumps_loads_give_the_same_samples(
    seed: int, capacity: int, steps: int, stacked: bool
) -> None:
    data = _episodes(seed, steps, 6)
    source = _dedup(capacity, stacked)
    plain = LazyTensorStorage(capacity)
    chunk = min(4, capacity)
    for i in range(0, steps, chunk):
        for storage in (source, plain):
            storage.set(_ring(i, min(chunk, steps - i), capacity), data[i : i + chunk])
    with tempfile.TemporaryDirectory() as path:
        source.dumps(path)
        back = _dedup(capacity, stacked)
        back.loads(path)
        plain.dumps(path)  # a plain storage's dump loads too (deduplicated on load)
        from_plain = _dedup(capacity, stacked)
        from_plain.loads(path)
    assert len(back) == len(plain) == len(from_plain)
    everything = torch.arange(len(plain))
    _same(back.get(everything), plain.get(everything))
    _same(from_plain.get(everything), plain.get(everything))
    assert back.side_bytes() == source.side_bytes()
    rbs = [
        rbdata.ReplayBuffer(storage=s, batch_size=7, generator=torch.Generator().manual_seed(seed))
        for s in (back, plain)
    ]
    _same(rbs[0].sample(), rbs[1].sample())


def _ring(start: int, n: int, capacity: int) -> torch.Tensor:
    return torch.arange(start, start + n) % capacity


def test_a_continuing_trajectory_keeps_only_its_ends_apart() -> None:
    """One episode in 1-step writes: only two stacks are kept apart."""
    frames = torch.randint(0, 256, (42, *FRAME), dtype=torch.uint8)
    stacks = torch.stack([frames[t : t + K] for t in range(40)])
    data = TensorDict({"pixels": stacks[:39], "next": {"pixels": stacks[1:]}}, [39])
    storage = _dedup(100, stacked=True)
    for i in range(39):
        storage.set(i, data[i])
    stack_bytes = K * FRAME[0] * FRAME[1]
    # the first stack (nothing before it) and the newest next (its slot is not written)
    assert storage.side_bytes() == 2 * stack_bytes
    _same(storage.get(torch.arange(39)), data)


def test_single_items_and_slices_read_like_a_plain_storage() -> None:
    data = _episodes(5, 12, 4)
    dedup, plain = _dedup(8, stacked=True), LazyTensorStorage(8)
    for storage in (dedup, plain):
        storage.set(slice(0, 8), data[:8])
        storage.set(torch.arange(8, 12) % 8, data[8:])
    _same(dedup[3], plain[3])
    _same(dedup[-1], plain[-1])
    _same(dedup[2:7], plain[2:7])
    _same(dedup.get(torch.tensor([[1, 2], [7, 0]])), plain.get(torch.tensor([[1, 2], [7, 0]])))


def test_an_empty_storage_round_trips() -> None:
    storage = _dedup(8, stacked=True)
    back = _dedup(8, stacked=True)
    back.load_state_dict(storage.state_dict())
    assert len(back) == 0 and back.side_bytes() == 0


def test_a_copy_reads_alike_and_a_spawned_child_is_refused() -> None:
    storage = _dedup(8, stacked=True)
    storage.set(slice(0, 6), _episodes(4, 6, 3))
    copied = copy.deepcopy(storage)
    _same(copied.get(torch.arange(6)), storage.get(torch.arange(6)))
    rb = rbdata.ReplayBuffer(storage=storage)
    with pytest.raises(RuntimeError, match="cannot be shared"):
        mp.get_context("spawn").Process(target=len, args=(rb,)).start()


def test_memory_stats_count_the_side_store() -> None:
    storage = _dedup(16, stacked=True)
    storage.set(slice(0, 6), _episodes(1, 6, 6))
    stats = storage.memory_stats()
    assert stats["side_bytes"] == storage.side_bytes() > 0
    assert stats["resident_bytes"] >= stats["side_bytes"]


def test_refusals_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="frame_stack"):
        FrameDedupStorage(4, frame_stack=1)
    with pytest.raises(ValueError, match="keys"):
        FrameDedupStorage(4, keys="pixels")
    storage = FrameDedupStorage(4)
    with pytest.raises(TypeError, match="TensorDict"):
        storage.set(slice(0, 2), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="no key X"):
        storage.set(slice(0, 2), TensorDict({"a": torch.zeros(2)}, [2]))
    stacked = FrameDedupStorage(4, keys=["pixels"], frame_stack=4)
    with pytest.raises(ValueError, match=r"frame_stack=4 expects items of shape \[4"):
        stacked.set(slice(0, 2), _episodes(0, 2, 2))
    assert len(stacked) == 0 and not stacked.initialized
    storage.set(slice(0, 2), _episodes(0, 2, 2))
    with pytest.raises(ValueError, match="at most once"):
        storage.set(torch.tensor([0, 0]), _episodes(0, 2, 2))
    with pytest.raises(KeyError, match="rebuilt"):
        storage.get_leaf(("next", "pixels"))
    with pytest.raises(RuntimeError, match="cannot be shared"):
        storage.share_memory_()
    with pytest.raises(ValueError, match="frame_stack=None"):
        storage.load_state_dict(stacked_state())
    assert len(storage) == 2


def stacked_state() -> dict[str, object]:
    stacked = _dedup(8, stacked=True)
    stacked.set(slice(0, 3), _episodes(2, 3, 2))
    return stacked.state_dict()


BUFFERS = {
    "tensordict": lambda s, g: rbdata.TensorDictReplayBuffer(storage=s, batch_size=8, generator=g),
    "tensordict_prioritized": lambda s, g: rbdata.TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=s, batch_size=8, generator=g
    ),
    "slices": lambda s, g: rbdata.TensorDictReplayBuffer(
        storage=s,
        sampler=rbdata.SliceSampler(slice_len=4, end_key=("next", "done")),
        batch_size=8,
        generator=g,
    ),
}


@pytest.mark.parametrize("kind", sorted(BUFFERS))
def test_tensordict_buffers_sample_alike(kind: str) -> None:
    """TensorDict buffers (``index`` keys, priorities from ``td_error``, trajectory slices)."""
    data = _episodes(1, 200, 9)
    make = BUFFERS[kind]
    dedup = make(_dedup(50, stacked=True), torch.Generator().manual_seed(0))
    plain = make(LazyTensorStorage(50), torch.Generator().manual_seed(0))
    for i in range(0, 200, 7):
        dedup.extend(data[i : i + 7])
        plain.extend(data[i : i + 7])
        got, want = dedup.sample(), plain.sample()
        _same(got, want)
        if kind == "tensordict_prioritized":
            errors = torch.rand(8)
            got["td_error"], want["td_error"] = errors, errors.clone()
            dedup.update_tensordict_priority(got)
            plain.update_tensordict_priority(want)
