"""The payload codec: values survive encode/decode; small leaves share one buffer."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import torch
from hypothesis import given
from tensordict import TensorDict

from rbdata.service.transport.codec import (
    decode,
    encode,
    encode_into,
    pack_into,
    unpack,
)

DTYPES = [torch.float32, torch.int64, torch.uint8, torch.bool, torch.float16, torch.bfloat16]


@st.composite
def tensordicts(draw: st.DrawFn) -> TensorDict:
    rows = draw(st.integers(0, 6))
    entries: dict[str, object] = {}
    for i in range(draw(st.integers(1, 4))):
        dtype = draw(st.sampled_from(DTYPES))
        shape = (rows, *draw(st.lists(st.integers(1, 3), max_size=2)))
        value = torch.randint(0, 2, shape).to(dtype)
        entries[f"k{i}"] = (
            value if not draw(st.booleans()) else value.transpose(0, -1).transpose(0, -1)
        )
    if draw(st.booleans()):
        entries["nested"] = {"x": torch.randn(rows, 2)}
    return TensorDict(entries, batch_size=[rows])


@given(tensordicts())
def test_a_tensordict_survives_the_round_trip(td: TensorDict) -> None:
    back = decode(encode(td))
    assert back.batch_size == td.batch_size
    assert set(back.keys(True, True)) == set(td.keys(True, True))
    for key, value in td.items(True, True):
        assert back[key].dtype == value.dtype
        assert torch.equal(back[key], value)


@given(tensordicts())
def test_a_payload_packed_into_memory_unpacks_equal(td: TensorDict) -> None:
    payload = encode((td, {"info": td.get("k0")}, 3))
    memory = torch.zeros(payload.nbytes + 64, dtype=torch.uint8)
    batch, info, three = unpack(pack_into(payload, memory), memory)
    assert three == 3
    assert torch.equal(info["info"], td.get("k0"))
    for key, value in td.items(True, True):
        assert torch.equal(batch[key], value)
        # the rebuilt tensors view the memory: no copy
        assert (
            memory.data_ptr() <= batch[key].data_ptr() < memory.data_ptr() + memory.numel()
            or not value.numel()
        )


def test_small_leaves_travel_as_one_buffer() -> None:
    td = TensorDict({f"k{i}": torch.arange(4) for i in range(10)}, batch_size=[4])
    assert len(encode(td).buffers) == 1


def test_leaves_of_one_large_storage_travel_whole_without_a_copy() -> None:
    rows = torch.zeros(256, 1024, dtype=torch.uint8)
    td = TensorDict({"a": rows[:, :512], "b": rows[:, 512:].view(torch.int32)}, batch_size=[256])
    payload = encode(td)
    assert len(payload.buffers) == 1
    assert payload.buffers[0].ctypes.data == rows.data_ptr()  # the storage itself
    back = decode(payload)
    assert torch.equal(back["b"], td["b"]) and back["a"].shape == (256, 512)


def test_a_small_view_of_a_large_storage_is_copied_not_sent_whole() -> None:
    big = torch.arange(1_000_000)
    payload = encode(big[:10])
    assert payload.nbytes < 1024
    assert decode(payload).tolist() == list(range(10))


def test_values_without_tensors_pass_through() -> None:
    value = {"a": [1, "two", None], "b": (3.0,)}
    assert decode(encode(value)) == value


def test_read_only_buffers_decode_without_warning(recwarn: object) -> None:
    payload = encode(torch.arange(100_000))
    for buffer in payload.buffers:
        buffer.flags.writeable = False
    out = decode(payload)
    assert out[-1].item() == 99_999
    assert isinstance(payload.buffers[0], np.ndarray)


@given(tensordicts(), st.integers(0, 3))
def test_a_value_laid_out_in_a_slot_unpacks_equal_and_keeps_what_is_there(
    td: TensorDict, in_place_rows: int
) -> None:
    memory = torch.zeros(1 << 16, dtype=torch.uint8)
    # a leaf already read into the slot (at its start), as a storage reading into it leaves it
    there = memory[: 8 * max(in_place_rows, 1)].view(torch.int64)[:in_place_rows]
    there.copy_(torch.arange(in_place_rows))
    value = (td, {"there": there, "again": there, "k0": td.get("k0")}, "text")
    packed = encode_into(value, memory)
    assert packed is not None
    if in_place_rows:
        assert packed.tree[1]["there"].offset == 0  # left where it was, not copied
        assert packed.tree[1]["again"] == packed.tree[1]["there"]  # one tensor, laid out once
    batch, info, text = unpack(packed, memory)
    assert text == "text" and info["there"].tolist() == list(range(in_place_rows))
    assert torch.equal(info["k0"], td.get("k0"))
    for key, value in td.items(True, True):
        assert torch.equal(batch[key], value)


def test_a_value_too_big_for_the_slot_is_refused() -> None:
    memory = torch.zeros(64, dtype=torch.uint8)
    assert encode_into({"a": torch.zeros(100)}, memory) is None


def test_a_pickled_prioritized_buffer_still_samples_by_priority() -> None:
    # what a Ray actor hosting the buffer receives: its sum tree's views must survive pickling
    import pickle

    from rbdata import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

    rb = TensorDictPrioritizedReplayBuffer(alpha=1.0, beta=0.5, storage=LazyTensorStorage(8))
    rb = pickle.loads(pickle.dumps(rb))
    rb.extend(TensorDict({"obs": torch.zeros(8, 3)}, [8]))
    rb.update_priority(torch.arange(8), torch.tensor([0.0] * 7 + [1.0]))
    assert set(pickle.loads(pickle.dumps(rb)).sample(16)["index"].tolist()) == {7}
