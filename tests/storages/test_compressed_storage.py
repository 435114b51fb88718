"""Tests of CompressedListStorage: round trips through the buffers, codecs, state, validation."""

from __future__ import annotations

import io
import sys
import zlib

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    CompressedListStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictReplayBuffer,
)

CUDA = torch.cuda.is_available()


def _frames(n: int, seed: int = 0) -> torch.Tensor:
    """``n`` compressible uint8[4, 84, 84] stacks: flat background, a moving square, some noise."""
    gen = torch.Generator().manual_seed(seed)
    frames = torch.full((n, 4, 84, 84), 40, dtype=torch.uint8)
    for i in range(n):
        x = (3 * i) % 70
        frames[i, :, 20:34, x : x + 14] = 200
    frames[:, :, :2] = torch.randint(0, 255, (n, 4, 2, 84), generator=gen, dtype=torch.uint8)
    return frames


def _transitions(n: int, seed: int = 0) -> TensorDict:
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "pixels": _frames(n, seed),
            "action": torch.randint(0, 6, (n,), generator=gen),
            "weight": torch.randn(n, 2, generator=gen).to(torch.bfloat16),
            "next": {
                "pixels": _frames(n, seed + 1),
                "reward": torch.randn(n, 1, generator=gen),
                "done": torch.rand(n, 1, generator=gen) < 0.1,
            },
        },
        [n],
    )


def _assert_td_equal(a: TensorDict, b: TensorDict) -> None:
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        x, y = a.get(key), b.get(key)
        assert x.dtype == y.dtype and x.shape == y.shape, key
        assert torch.equal(x, y), key


def test_tensordict_buffer_samples_what_was_written():
    data = _transitions(50)
    rb = TensorDictReplayBuffer(storage=CompressedListStorage(100), batch_size=16)
    rb.extend(data)
    batch, info = rb.sample(return_info=True)
    assert type(batch) is TensorDict and batch.batch_size == torch.Size([16])
    _assert_td_equal(batch.exclude("index"), data[info["index"]])
    assert batch["pixels"].is_contiguous()
    _assert_td_equal(rb[:], data)


def test_tensor_buffer_add_extend_and_indexing():
    rb = ReplayBuffer(storage=CompressedListStorage(10), batch_size=4)
    frames = _frames(12)
    rb.extend(frames[:8])
    index = rb.add(frames[8])
    assert index == 8 and len(rb) == 9
    rb.extend(frames[9:12])  # wraps around: slots 9, 0, 1
    storage = rb.storage
    assert torch.equal(storage[0], frames[10]) and torch.equal(storage[-1], frames[9])
    assert torch.equal(storage[2:4], frames[2:4])
    grid = torch.tensor([[0, 9], [2, 1]])
    assert storage[grid].shape == (2, 2, 4, 84, 84)
    assert torch.equal(storage[grid][1, 1], frames[11])
    sample = rb.sample()
    assert sample.shape == (4, 4, 84, 84) and sample.dtype == torch.uint8


def test_prioritized_buffer_over_compressed_storage():
    rb = PrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=CompressedListStorage(20), batch_size=8
    )
    frames = _frames(20)
    rb.extend(frames)
    rb.update_priority(torch.arange(20), torch.tensor([0.0] * 19 + [1.0]))
    batch, info = rb.sample(return_info=True)
    assert (info["index"] == 19).all() and torch.equal(batch, frames[[19] * 8])


def test_items_are_compressed_and_bytes_follow_overwrites():
    data = _transitions(40)
    storage = CompressedListStorage(30)
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(data[:30])
    raw = sum(v[0].numel() * v.dtype.itemsize for v in data.values(True, True)) * 30
    first = storage.bytes()
    assert 0 < first < raw / 5
    rb.extend(data[30:40])  # overwrites slots 0..9
    assert storage.bytes() == sum(len(f) for item in storage._frames[:30] for f in item)
    assert storage.bytes() != first
    assert "codec='zstd'" in repr(storage)


def test_zlib_is_the_fallback_without_zstandard(monkeypatch):
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard raises ImportError
    storage = CompressedListStorage(10, compression_level=6)
    assert storage.codec == "zlib"
    frames = _frames(5)
    storage.set(slice(0, 5), frames)
    assert torch.equal(storage[:], frames)
    assert zlib.decompress(storage._frames[2][0]) == frames[2].numpy().tobytes()


def test_custom_codec_is_called_per_leaf_and_item():
    calls, metas = [], []

    def compress(tensor: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(tensor.shape))
        return torch.frombuffer(
            bytearray(zlib.compress(tensor.numpy().tobytes())), dtype=torch.uint8
        )

    def decompress(frame: torch.Tensor, meta: dict) -> torch.Tensor:
        metas.append(meta)
        raw = bytearray(zlib.decompress(frame.numpy().tobytes()))
        return torch.frombuffer(raw, dtype=meta["dtype"]).reshape(meta["shape"])

    storage = CompressedListStorage(10, compression_fn=compress, decompression_fn=decompress)
    assert storage.codec == "custom"
    data = TensorDict({"obs": _frames(3), "r": torch.arange(3.0)}, [3])
    storage.set(slice(0, 3), data)
    assert sorted(calls) == sorted([(4, 84, 84)] * 3 + [()] * 3)
    out = storage.get(torch.tensor([2, 0]))
    _assert_td_equal(out, data[torch.tensor([2, 0])])
    assert {m["type"] for m in metas} == {"tensor"}
    assert {(tuple(m["shape"]), m["dtype"]) for m in metas} == {
        ((4, 84, 84), torch.uint8),
        ((), torch.float32),
    }


def test_custom_compression_with_default_decompression():
    """Only one side given: the other is the default codec (as torchrl does)."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=1)

    def compress(tensor: torch.Tensor) -> bytes:
        return compressor.compress(tensor.numpy().tobytes())

    storage = CompressedListStorage(4, compression_fn=compress)
    storage.set(slice(0, 2), torch.arange(6.0).reshape(2, 3))
    assert torch.equal(storage[:], torch.arange(6.0).reshape(2, 3))


def _snapshot(storage: CompressedListStorage) -> tuple:
    return len(storage), storage.bytes(), list(storage._frames), storage._schema


def test_bad_writes_raise_and_change_nothing():
    storage = CompressedListStorage(10)
    data = _transitions(4)
    storage.set(slice(0, 4), data)
    before = _snapshot(storage)
    with pytest.raises(ValueError, match="selects 2 item"):
        storage.set(slice(4, 6), data)
    with pytest.raises(IndexError):
        storage.set(torch.tensor([3, 10, 11, 12]), data)
    assert _snapshot(storage) == before


def test_items_of_other_structures_are_kept_and_read_one_at_a_time():
    """As torchrl's (its compressed_replay_buffer_checkpoint.py example): any structure."""
    storage = CompressedListStorage(10)
    data = _transitions(2)
    storage.set(slice(0, 2), data)
    wrong_dtype = data.clone()
    wrong_dtype["action"] = wrong_dtype["action"].float()
    storage.set(slice(2, 4), wrong_dtype)
    storage.set(4, torch.arange(6.0).reshape(2, 3))  # a tensor, then a TensorDict with a string
    storage.set(5, TensorDict({"obs": torch.ones(3), "meta": "five"}, [3]))
    storage.set(6, TensorDict({"obs": torch.ones(3), "meta": "six"}, [3]))
    assert (
        storage[2]["action"].dtype == torch.float32 and storage[0]["action"].dtype != torch.float32
    )
    assert torch.equal(storage[4], torch.arange(6.0).reshape(2, 3))
    assert storage[5]["meta"] == "five" and storage[6]["meta"] == "six"
    assert storage[0:2]["action"].shape[0] == 2  # items of one structure: one batch
    with pytest.raises(TypeError, match=r"slots \[0, 2\] differ"):
        storage.get(torch.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="different structures"):
        storage[5:7]  # non-tensor values differ
    copy = CompressedListStorage(10)
    copy.load_state_dict(storage.state_dict())
    assert copy[5]["meta"] == "five" and torch.equal(copy[4], storage[4])
    assert torch.equal(copy[2]["action"], storage[2]["action"])
    storage.set(slice(2, 7), _transitions(5))  # every other structure overwritten: forgotten
    assert storage[0:7]["action"].shape[0] == 7
    assert len([s for s in storage._schemas if s is not None]) == 1
    assert "schemas" not in storage.state_dict()


def test_failing_compression_fn_changes_nothing():
    count = 0

    def flaky(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        if count > 3:
            return tensor.float()  # not bytes
        return torch.frombuffer(bytearray(tensor.numpy().tobytes()), dtype=torch.uint8)

    storage = CompressedListStorage(
        10,
        compression_fn=flaky,
        decompression_fn=lambda f, m: f.view(m["dtype"]).reshape(m["shape"]),
    )
    storage.set(slice(0, 2), torch.ones(2, 3))
    before = _snapshot(storage)
    with pytest.raises(TypeError, match="compression_fn must return a uint8 tensor"):
        storage.set(slice(2, 5), torch.ones(3, 3))
    assert _snapshot(storage) == before


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"compression_level": 23}, ValueError, "compression_level"),
        ({"compression_level": 2.5}, TypeError, "compression_level"),
        ({"compression_fn": 3}, TypeError, "compression_fn"),
        ({"decompression_fn": "zlib"}, TypeError, "decompression_fn"),
        ({"compilable": "yes"}, TypeError, "compilable"),
    ],
)
def test_constructor_validation(kwargs, error, match):
    with pytest.raises(error, match=match):
        CompressedListStorage(10, **kwargs)
    with pytest.raises(ValueError, match="max_size"):
        CompressedListStorage(0)


def test_reads_out_of_range_and_holes():
    storage = CompressedListStorage(10)
    with pytest.raises(IndexError):
        storage.get(0)
    storage.set(torch.tensor([0, 3]), torch.ones(2, 2))
    assert len(storage) == 4
    with pytest.raises(IndexError, match="slot 1 was never written"):
        storage.get(torch.tensor([0, 1]))
    with pytest.raises(IndexError):
        storage.get(4)
    assert torch.equal(storage.get(-1), torch.ones(2))


def test_state_dict_round_trip_without_pickle():
    storage = CompressedListStorage(10)
    data = _transitions(7)
    storage.set(slice(0, 7), data)
    storage.set(torch.tensor([8]), data[:1])  # slot 7 stays a hole
    buffer = io.BytesIO()
    torch.save(storage.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state["frames"].dtype == torch.uint8 and state["frame_sizes"].shape == (9, 6)
    other = CompressedListStorage(10)
    other.load_state_dict(state)
    assert len(other) == 9 and other.bytes() == storage.bytes()
    _assert_td_equal(other[:7], data)
    _assert_td_equal(other[8], data[0])
    with pytest.raises(IndexError, match="slot 7"):
        other.get(7)
    empty = CompressedListStorage(10)
    empty.load_state_dict(CompressedListStorage(10).state_dict())
    assert len(empty) == 0


def test_load_state_dict_rejects_what_does_not_fit():
    storage = CompressedListStorage(10)
    storage.set(slice(0, 3), torch.ones(3, 2))
    state = storage.state_dict()
    target = CompressedListStorage(10)
    target.set(slice(0, 1), torch.zeros(1, 5))
    before = _snapshot(target)
    bad_states = [
        ({**state, "len": 11}, "len"),
        ({**state, "codec": "zlib"}, "compressed with 'zlib'"),
        ({**state, "frame_sizes": state["frame_sizes"] + 1}, "add up"),
        ({**state, "frame_sizes": state["frame_sizes"].int()}, "int64"),
        ({**state, "frames": state["frames"].float()}, "uint8"),
        ({**state, "spec": {}}, "spec lacks"),
    ]
    for bad, match in bad_states:
        with pytest.raises(ValueError, match=match):
            target.load_state_dict(bad)
        assert _snapshot(target) == before
    small = CompressedListStorage(2)
    with pytest.raises(ValueError, match="len"):
        small.load_state_dict(state)


def test_buffer_dumps_and_loads(tmp_path):
    data = _transitions(12)
    rb = TensorDictReplayBuffer(storage=CompressedListStorage(20), batch_size=4)
    rb.extend(data)
    rb.dumps(tmp_path / "dump")
    assert not (tmp_path / "dump" / "objects.pkl").exists()
    other = TensorDictReplayBuffer(storage=CompressedListStorage(20), batch_size=4)
    other.loads(tmp_path / "dump")
    _assert_td_equal(other[:], data)
    assert other.storage.bytes() == rb.storage.bytes()


def test_empty_forgets_items_and_structure():
    storage = CompressedListStorage(5)
    storage.set(slice(0, 2), torch.ones(2, 3))
    storage.empty()
    assert len(storage) == 0 and storage.bytes() == 0
    storage.set(slice(0, 1), TensorDict({"x": torch.zeros(1, 7)}, [1]))
    assert storage[0]["x"].shape == (7,)


@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_batches_land_on_the_storage_device():
    storage = CompressedListStorage(8, device="cuda")
    storage.set(slice(0, 4), _frames(4).cuda())
    batch = storage.get(torch.tensor([1, 3]))
    assert batch.device.type == "cuda" and torch.equal(batch.cpu(), _frames(4)[[1, 3]])


writes = st.lists(
    st.tuples(
        st.sampled_from(["slice", "tensor", "int"]),
        st.integers(0, 11),
        st.integers(1, 5),
        st.integers(0, 2**16),
    ),
    min_size=1,
    max_size=10,
)


@given(ops=writes)
def test_reads_match_a_plain_model_of_the_slots(ops):
    """Whatever the write pattern, every filled slot reads back what was last written there."""
    capacity = 12
    storage = CompressedListStorage(capacity)
    model: dict[int, torch.Tensor] = {}
    for kind, start, n, seed in ops:
        gen = torch.Generator().manual_seed(seed)
        values = torch.randint(0, 3, (n, 3, 5), generator=gen, dtype=torch.int16)
        if kind == "int":
            storage.set(start, values[0])
            model[start] = values[0]
            continue
        if kind == "slice":
            stop = min(start + n, capacity)
            values = values[: stop - start]
            storage.set(slice(start, stop), values)
            slots = list(range(start, stop))
        else:
            slots = torch.randint(0, capacity, (n,), generator=gen).unique().tolist()
            values = values[: len(slots)]
            storage.set(torch.tensor(slots), values)
        model.update(zip(slots, values, strict=True))
    assert len(storage) == max(model) + 1
    written = sorted(model)
    assert torch.equal(storage.get(torch.tensor(written)), torch.stack([model[s] for s in written]))
    assert storage.bytes() == sum(len(storage._frames[s][0]) for s in written)


def test_pickled_storage_reads_the_same_items():
    import pickle

    storage = CompressedListStorage(8)
    data = _transitions(5)
    storage.set(slice(0, 5), data)
    copy = pickle.loads(pickle.dumps(storage))
    _assert_td_equal(copy[:], data)
    assert copy.bytes() == storage.bytes() and copy.codec == storage.codec


def test_batches_kept_by_the_user_are_never_overwritten():
    """Decoded batches come from recycled memory: one still referenced must not be reused."""
    storage = CompressedListStorage(8)
    frames = _frames(8)
    storage.set(slice(0, 8), frames)
    kept = storage.get(torch.tensor([0, 1]))
    for _ in range(3):
        other = storage.get(torch.tensor([6, 7]))
        assert torch.equal(other, frames[[6, 7]])
    assert torch.equal(kept, frames[[0, 1]])


def test_frames_of_the_wrong_size_are_reported():
    storage = CompressedListStorage(4)
    storage.set(slice(0, 2), torch.ones(2, 3))
    storage._frames[1] = (storage._codec.compress(b"\x00" * 5),)
    with pytest.raises(RuntimeError, match="does not decompress to 12 bytes"):
        storage.get(torch.tensor([0, 1]))
