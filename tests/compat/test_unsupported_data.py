"""Data a buffer does not accept: the same exception type as torchrl, and nothing written.

torchrl 0.14.1 may leave its counters advanced after such a failed ``extend``
(``write_count`` grows while ``len`` stays 0); rbdata validates before writing
(deliberate, see the migration page), so the buffer is left as it was.
"""

from __future__ import annotations

import pytest

from ._data import batch
from ._describe import outcome
from ._libs import load
from ._scenario import builder

TENSOR_STORAGES = ("lazytensor", "memmap")
ALL_STORAGES = ("list", "lazystack", "tensor", "lazytensor", "memmap")


def _case(buffer, storage, data_kind, gap=None):
    marks = [pytest.mark.xfail(strict=True, reason="parity gap: " + gap)] if gap else []
    return pytest.param(
        buffer, storage, data_kind, marks=marks, id=f"{buffer}-{storage}-{data_kind}"
    )


_LIST_PYTREE = (
    "extend(dict) on a ListStorage/LazyStackStorage iterates the dict and stores its keys; "
    "torchrl raises TypeError (only a list of items may be extended there)"
)
_TD_ONLY = (
    "TensorDict buffers accept non-TensorDict data; torchrl raises ValueError "
    "(TensorDictReplayBuffer.extend needs a TensorDict)"
)
_TD_OBJECTS_TYPE = "Python objects in a TensorDict buffer raise RuntimeError; torchrl ValueError"
_TD_TENSORCLASS_TYPE = "tensorclass in a TensorDict buffer raises TypeError; torchrl ValueError"

CASES = [
    *[
        _case(b, s, "pytree", _LIST_PYTREE)
        for b in ("ReplayBuffer",)
        for s in ("list", "lazystack")
    ],
    *[_case("ReplayBuffer", s, "objects") for s in TENSOR_STORAGES],
    *[
        _case(b, s, kind, _TD_ONLY)
        for b in ("TensorDictReplayBuffer", "TensorDictPrioritizedReplayBuffer")
        for s in ("list", "lazystack", "lazytensor", "memmap")
        for kind in ("tensor", "pytree")
    ],
    *[
        _case(b, s, "objects", _TD_ONLY if s in ("list", "lazystack") else _TD_OBJECTS_TYPE)
        for b in ("TensorDictReplayBuffer", "TensorDictPrioritizedReplayBuffer")
        for s in ("list", "lazystack", "lazytensor", "memmap")
    ],
    *[
        _case(b, s, "tensorclass", _TD_ONLY if s in ("list", "lazystack") else _TD_TENSORCLASS_TYPE)
        for b in ("TensorDictReplayBuffer", "TensorDictPrioritizedReplayBuffer")
        for s in ("list", "lazystack", "lazytensor", "memmap")
    ],
]


@pytest.mark.parametrize("buffer,storage,data_kind", CASES)
def test_extend_refused_like_torchrl_and_nothing_written(buffer, storage, data_kind, tmp_path):
    results = {}
    for lib in ("torchrl", "rbdata"):
        rb = builder(
            load(lib),
            buffer=buffer,
            storage=storage,
            sampler=None if "Prioritized" in buffer else "random",
            writer=None,
            data_kind=data_kind,
            scratch=tmp_path / lib,
        )()
        results[lib] = (outcome(lambda rb=rb: rb.extend(batch(data_kind, 6))), rb)
    expected, _ = results["torchrl"]
    got, rb = results["rbdata"]
    assert expected[0] == "raises"
    assert got == expected
    assert (len(rb), rb.write_count) == (0, 0)


@pytest.mark.parametrize("storage", ALL_STORAGES[2:3])
def test_tensor_storage_of_python_objects_is_a_type_error(storage, lib):
    """TensorStorage(list of objects): rbdata raises TypeError (torchrl: AttributeError)."""
    err = outcome(lambda: lib.TensorStorage(batch("objects", 4)))
    assert err == ("raises", "TypeError" if lib.name == "rbdata" else "AttributeError")
