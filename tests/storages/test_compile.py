"""``compilable=True`` under ``torch.compile``: traced writes, and no recompile once warm."""

from __future__ import annotations

import logging
import pickle
import sys

import pytest
import torch

from rbdata import LazyTensorStorage, RandomSampler, ReplayBuffer, RoundRobinWriter
from rbdata.sharing.counters import LocalCounters

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or sys.version_info >= (3, 14), reason="torch.compile unsupported"
)


class _Recompiles(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _count_recompiles(fn, calls: int) -> list[str]:
    handler = _Recompiles()
    logger = logging.getLogger("torch._dynamo")
    torch._logging.set_logs(recompiles=True)
    logger.addHandler(handler)
    try:
        for _ in range(calls):
            fn()
    finally:
        logger.removeHandler(handler)
        torch._logging.set_logs()
    return [m for m in handler.messages if "Recompiling" in m]


def test_storage_set_traces_in_one_graph():
    torch._dynamo.reset()
    storage = LazyTensorStorage(60, compilable=True)
    data = {"a": torch.arange(20).unsqueeze(-1), "b": torch.ones(20, 3, dtype=torch.bool)}
    storage.set(torch.arange(20), data)

    # fullgraph: no break, no eager fallback; aot_eager: aot_autograd accepts the mutations
    @torch.compile(fullgraph=True, backend="aot_eager")
    def write(cursor, value):
        storage.set(cursor, value)

    write(torch.arange(20, 40), data)
    write(torch.tensor([42, 41, 40]), {"a": torch.tensor([[7], [8], [9]]), "b": data["b"][:3]})
    assert len(storage) == 43  # torchrl's count: + items written, at most the capacity
    assert storage._mutation_revision == 3 and storage._last_cursor_index == 40
    torch.testing.assert_close(storage[:40]["a"], data["a"].repeat(2, 1))
    torch.testing.assert_close(
        storage[torch.tensor([42, 41, 40])]["a"], torch.tensor([[7], [8], [9]])
    )
    assert storage[:43]["b"].all()


@pytest.mark.parametrize("avoid_max_size", [False, True])
def test_extend_and_sample_do_not_recompile_once_warm(avoid_max_size):
    torch._dynamo.reset()
    size = 5
    rb = ReplayBuffer(
        storage=LazyTensorStorage((11 if avoid_max_size else 2) * size, compilable=True),
        sampler=RandomSampler(),
        writer=RoundRobinWriter(compilable=True),
        batch_size=3,
        compilable=True,
    )
    data = torch.arange(size).unsqueeze(-1)

    @torch.compile(backend="eager")
    def extend_and_sample():
        rb.extend(data)
        return rb.sample()

    for _ in range(3):  # warm-up: allocation, the storage filling, the first wrap
        extend_and_sample()
    assert _count_recompiles(extend_and_sample, 5) == []
    assert len(rb) == (8 if avoid_max_size else 2) * size
    assert set(extend_and_sample().reshape(-1).tolist()) <= set(range(size))


def test_local_counters_hold_plain_values_and_share():
    counters = LocalCounters([0, 0, -1], tensors=(1,))
    counters.cells[1] += 1
    counters.cells[2] = torch.tensor(4)  # as a compiled write leaves it
    assert counters.values() == [0, 1, 4] and counters[2] == 4
    copy = pickle.loads(pickle.dumps(counters))
    assert copy.values() == [0, 1, 4] and isinstance(copy.cells[1], torch.Tensor)
    counters.share()
    assert counters.is_shared and counters.values() == [0, 1, 4]
