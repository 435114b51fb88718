"""A TensorDict batch lacking some of a tensor storage's keys: zeros there, one warning."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.multiprocessing as mp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictReplayBuffer,
)

KEYS = ["obs", "action", ("next", "reward"), ("next", "done")]
STORAGES = {"lazy": LazyTensorStorage, "memmap": LazyMemmapStorage}


def transitions(n: int, offset: int = 0) -> TensorDict:
    """``n`` transitions whose every entry is non-zero and derived from the id."""
    ids = torch.arange(offset + 1, offset + n + 1)
    return TensorDict(
        {
            "obs": ids.float().unsqueeze(-1).expand(n, 3).clone(),
            "action": ids.to(torch.int32),
            "next": {"reward": ids.double(), "done": torch.ones(n, 1, dtype=torch.bool)},
        },
        [n],
    )


def without(data: TensorDict, keys: list) -> TensorDict:
    """``data`` lacking ``keys`` (a nested TensorDict left empty is dropped too)."""
    out = data.exclude(*keys)
    if "next" in out.keys() and not out["next"].keys():
        out = out.exclude("next")
    return out


def absent_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if "lacks stored key" in str(w.message)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(sorted(STORAGES)),
    first=st.integers(1, 12),
    n=st.integers(1, 12),
    lacking=st.lists(st.sampled_from(KEYS), min_size=1, max_size=len(KEYS) - 1, unique=True),
)
def test_a_batch_lacking_keys_writes_zeros_there_and_its_values_elsewhere(
    kind: str, first: int, n: int, lacking: list
) -> None:
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](16))
    rb.extend(transitions(first))
    full = transitions(n, offset=100)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        rb.extend(without(full, lacking))
        index = rb.extend(without(full, lacking))
    shown = absent_warnings(record)
    assert len(shown) == 1 and all(repr(key) in shown[0] for key in lacking)
    assert len(rb) == min(16, first + 2 * n) and rb.write_count == first + 2 * n
    written = rb.storage[index]
    for key in KEYS:
        if key in lacking:
            assert not written[key].any(), key
        else:
            assert torch.equal(written[key], full[key]), key
    if first + 2 * n <= 16:  # the first write's rows are untouched
        assert torch.equal(rb.storage[torch.arange(first)]["obs"], transitions(first)["obs"])


@pytest.mark.parametrize("kind", sorted(STORAGES))
def test_each_set_of_missing_keys_warns_once_per_storage(kind: str) -> None:
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](64))
    rb.extend(transitions(4))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            rb.extend(without(transitions(4), ["obs"]))
            rb.extend(without(transitions(4), ["next"]))
            rb.add(without(transitions(1), ["obs"])[0])
            rb.extend(transitions(4))
    shown = absent_warnings(record)
    assert len(shown) == 2
    assert "['obs']" in shown[0] and "('next', 'reward'), ('next', 'done')" in shown[1]
    assert len(rb) == 4 + 3 * 13
    other = TensorDictReplayBuffer(storage=STORAGES[kind](8))
    other.extend(transitions(4))
    with pytest.warns(UserWarning, match=r"lacks stored key\(s\) \['obs'\]: .*zeros"):
        other.extend(without(transitions(4), ["obs"]))


def test_setitem_and_a_single_item_fill_the_missing_entries_with_zeros() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(transitions(6))
    with pytest.warns(UserWarning, match="lacks stored key"):
        rb[torch.tensor([4, 1])] = without(transitions(2, offset=50), ["action"])
    assert rb["action"][torch.tensor([1, 4])].tolist() == [0, 0]
    assert rb["obs"][torch.tensor([4, 1]), 0].tolist() == [51.0, 52.0]
    with pytest.warns(UserWarning, match=r"\('next', 'done'\)"):
        rb[2] = without(transitions(1, offset=70)[0], [("next", "done")])
    assert not rb[2]["next", "done"].any() and rb[2]["action"].item() == 71
    assert rb["action"][torch.tensor([0, 3, 5])].tolist() == [1, 4, 6]


def test_a_multi_dim_storage_fills_whole_cells_with_zeros() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(12, ndim=2))  # extends along dim 1
    rb.extend(transitions(8).reshape(2, 4))
    with pytest.warns(UserWarning, match="lacks stored key"):
        rb.extend(without(transitions(4, offset=10), ["obs"]).reshape(2, 2))
    stored = rb.storage._storage  # [items, cells] views
    assert stored.batch_size == torch.Size([6, 2])
    assert not stored["obs"][4:].any() and stored["obs"][:4].all()
    assert stored["action"][4:].tolist() == [[11, 13], [12, 14]]


BAD = {
    "a new key and a wrong dtype": (
        TypeError,
        "'action'.*int64.*int32",
        lambda td: (
            without(td, ["obs"])
            .set("foo", torch.zeros(4))
            .set("action", torch.zeros(4, dtype=torch.int64))
        ),
    ),
    "a new key and a wrong shape": (
        ValueError,
        r"'action'.*\[4, 2\]",
        lambda td: (
            without(td, ["obs"])
            .set(("next", "foo"), torch.zeros(4))
            .set("action", torch.zeros(4, 2, dtype=torch.int32))
        ),
    ),
    "a wrong dtype": (
        TypeError,
        "'action'.*int64.*int32",
        lambda td: without(td, ["obs"]).set("action", torch.zeros(4, dtype=torch.int64)),
    ),
    "a wrong shape": (
        ValueError,
        r"'action'.*\[4, 2\]",
        lambda td: without(td, ["obs"]).set("action", torch.zeros(4, 2, dtype=torch.int32)),
    ),
    "no key at all": (KeyError, "missing", lambda td: TensorDict(batch_size=[4])),
}


@pytest.mark.parametrize("kind", sorted(STORAGES))
@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_batch_lacking_keys_still_raises_and_writes_nothing(kind: str, case: str) -> None:
    error, match, corrupt = BAD[case]
    rb = TensorDictReplayBuffer(storage=STORAGES[kind](10))
    rb.extend(transitions(6))
    before = rb.storage.state_dict()["content"]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        with pytest.raises(error, match=match):
            rb.extend(corrupt(transitions(4, offset=20)))
        with pytest.raises(error, match=match):
            rb[torch.tensor([0, 1, 2, 3])] = corrupt(transitions(4, offset=20))
    assert not absent_warnings(record)
    assert len(rb) == 6 and rb.write_count == 6
    after = rb.storage.state_dict()["content"]
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_dict_pytree_must_hold_every_stored_key() -> None:
    rb = ReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend({"a": torch.zeros(3), "b": torch.ones(3)})
    with pytest.raises(KeyError, match=r"missing \['b'\]"):
        rb.extend({"a": torch.zeros(3)})
    assert len(rb) == 3


def test_the_wrap_point_copies_a_lacking_batch_that_reads_the_rows_it_overwrites() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(6))
    rb.extend(transitions(6))
    rb.extend(transitions(4, offset=10))  # rows: ids 11, 12, 13, 14, 5, 6; cursor at 4
    view = rb.storage._storage[2:6].exclude("obs")  # written to rows 4, 5, then 0, 1
    with pytest.warns(UserWarning, match="lacks stored key"):
        rb.extend(view)
    assert rb["action"].tolist() == [5, 6, 13, 14, 13, 14]
    assert rb["obs"][:, 0].tolist() == [0.0, 0.0, 13.0, 14.0, 0.0, 0.0]


def test_a_shared_buffer_copies_a_lacking_batch_outside_its_lock() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(20), shared=True)
    rb.extend(transitions(5))
    copies = []
    write_leaves = rb.storage.write_leaves

    def counted(start: int, leaves: list[torch.Tensor]) -> None:
        copies.append(start)
        write_leaves(start, leaves)

    rb.storage.write_leaves = counted  # type: ignore[method-assign]
    with pytest.warns(UserWarning, match=r"\['obs'\]"):
        rb.extend(without(transitions(5, offset=10), ["obs"]))
    assert copies == [5] and len(rb) == 10 and rb.write_count == 10
    assert not rb["obs"][5:10].any() and rb["action"][5:10].tolist() == [11, 12, 13, 14, 15]


def extend_lacking_obs(rb: TensorDictReplayBuffer, done: mp.Queue) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rb.extend(without(transitions(3, offset=30), ["obs"]))
    done.put(len(rb))


def test_a_spawned_writer_fills_what_its_batch_lacks_with_zeros() -> None:
    rb = TensorDictReplayBuffer(storage=LazyMemmapStorage(10), shared=True)
    rb.extend(transitions(4))
    ctx = mp.get_context("spawn")
    done = ctx.Queue()
    child = ctx.Process(target=extend_lacking_obs, args=(rb, done))
    child.start()
    assert done.get(timeout=60) == 7
    child.join(timeout=60)
    assert child.exitcode == 0 and len(rb) == 7
    assert not rb["obs"][4:7].any() and rb["action"][4:7].tolist() == [31, 32, 33]
    assert rb["obs"][:4, 0].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_the_warning_points_at_the_users_write() -> None:
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(8))
    rb.extend(transitions(4))
    with pytest.warns(UserWarning, match="lacks stored key") as record:
        rb.extend(without(transitions(2), ["obs"]))
    assert record[0].filename == __file__
