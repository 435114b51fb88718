"""A stateful model of the replay buffer, checked after every step of random programs.

The model knows, per slot, the item written there, its generation, how often
it was sampled (consume-after-n) and its priority; the buffer (each storage
kind with each sampler) must agree with it after every rule: add, extend,
sample, update_priority, update_if_present, empty, dumps+loads and
state_dict round trips. Invalid inputs (bad data, NaN/inf/negative
priorities, out-of-range or stale indices, a damaged dump, a bad state_dict)
must raise and leave both the model and the buffer exactly as they were.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from tensordict import TensorDict

from rbdata import (
    CheckpointError,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    PrioritizedSampler,
    RandomSampler,
    ReplayBuffer,
    RoundRobinWriter,
    SamplerWithoutReplacement,
)

C = 5  # slots
# Dumps go to a RAM file system where there is one: fsync costs nothing there, and
# durability is the crash campaign's subject, not this model's.
RAM_DIR = "/dev/shm" if os.path.isdir("/dev/shm") else None
STORAGES = {"list": ListStorage, "tensor": LazyTensorStorage, "memmap": LazyMemmapStorage}
SAMPLERS = {
    "random": RandomSampler,
    "without": SamplerWithoutReplacement,
    "prioritized": lambda: PrioritizedSampler(C, alpha=1.0, beta=1.0),
}
CONFIGS = [(s, p, None) for s in STORAGES for p in SAMPLERS] + [
    ("tensor", "random", 2),
    ("list", "prioritized", 1),
    ("memmap", "prioritized", 2),
]


def same_state(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(same_state(a[k], b[k]) for k in a)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_state(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    return a == b


@dataclass
class Model:
    """What the buffer must hold: per-slot item, value, generation, sample count, priority."""

    consume: int | None
    prioritized: bool
    ids: list[int | None] = field(default_factory=lambda: [None] * C)
    values: list[float] = field(default_factory=lambda: [0.0] * C)
    gens: list[int] = field(default_factory=lambda: [-1] * C)  # -1: never written
    reuse_at: int = 0  # consumed slots are reused in ring order from here
    counts: list[int] = field(default_factory=lambda: [0] * C)
    prio: list[float] = field(default_factory=lambda: [0.0] * C)
    max_prio: float = 1.0
    cursor: int = 0
    write_count: int = 0
    skipped: int = 0

    @property
    def written(self) -> list[int]:
        return [i for i in range(C) if self.ids[i] is not None]

    @property
    def sampleable(self) -> list[int]:
        return [i for i in self.written if self.consume is None or self.counts[i] < self.consume]

    def _reusable(self) -> list[int]:
        """Consumed slots not rewritten since, in ring order from the reuse position."""
        consume = self.consume
        consumed = [i for i in self.written if consume is not None and self.counts[i] >= consume]
        return sorted(consumed, key=lambda slot: (slot < self.reuse_at, slot))

    def _put(self, slot: int, item: int) -> None:
        self.ids[slot], self.values[slot] = item, float(item)
        self.gens[slot] += 1
        self.counts[slot] = 0
        self.prio[slot] = self.max_prio
        self.write_count += 1

    def write(self, ids: list[int]) -> None:
        # the consumed slots, in ring order from the reuse position, take the items in that order
        free = self._reusable()[: len(ids)] if self.consume is not None else []
        rest = len(ids) - len(free)
        if rest and any((self.cursor + k) % C in free for k in range(rest)):
            free, rest = [], len(ids)  # the cursor would land on a reused slot: round robin
        slots = free[: len(ids)] + [(self.cursor + k) % C for k in range(len(ids) - len(free))]
        consumed = set(self._reusable())
        refilled = [slot for slot in slots if slot in consumed]
        if refilled:  # the ring goes on after the last consumed slot the batch wrote
            self.reuse_at = refilled[-1] + 1
        for slot, item in zip(free, ids, strict=False):
            self._put(slot, item)
        for item in ids[len(free) :]:
            self._put(self.cursor, item)
            self.cursor = (self.cursor + 1) % C

    def sampled(self, index: list[int]) -> None:
        if self.consume is None:
            return
        for slot in index:
            self.counts[slot] += 1
            if self.counts[slot] >= self.consume:
                self.prio[slot] = 0.0

    def empty(self) -> None:
        self.ids, self.values = [None] * C, [0.0] * C
        self.gens = [g + 1 if g >= 0 else g for g in self.gens]
        self.reuse_at = 0
        self.counts, self.prio = [0] * C, [0.0] * C
        self.max_prio, self.cursor, self.write_count = 1.0, 0, 0


class BufferMachine(RuleBasedStateMachine):
    """Random programs over one buffer configuration (set by the subclasses below)."""

    config: tuple[str, str, int | None] = CONFIGS[0]

    def __init__(self) -> None:
        super().__init__()
        self.kind, sampler, consume = self.config
        self.model = Model(consume, sampler == "prioritized")
        self.rb = self.build()
        self.next_id = 0
        self.tmp = Path(tempfile.mkdtemp(dir=RAM_DIR))

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def build(self) -> ReplayBuffer:
        kind, sampler, consume = self.config
        return ReplayBuffer(
            storage=STORAGES[kind](C),
            sampler=SAMPLERS[sampler](),
            writer=RoundRobinWriter(track_generations=True),
            collate_fn=(lambda x: x) if kind == "list" else None,
            generator=torch.Generator().manual_seed(0),
            consume_after_n_samples=consume,
        )

    # ------------------------------------------------------------ helpers
    def items(self, n: int) -> Any:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        if self.kind == "list":
            return ids
        t = torch.tensor(ids)
        return TensorDict({"id": t, "x": t[:, None].float().expand(n, 2).clone()}, [n])

    def stored(self) -> tuple[list[int], list[float]]:
        if len(self.rb) == 0:
            return [], []
        content = self.rb[:]
        if self.kind == "list":
            return list(content), [float(i) for i in content]
        return content["id"].tolist(), content["x"][:, 0].tolist()

    def rejected(self, call: Any, *errors: type[BaseException]) -> None:
        """``call()`` must raise one of ``errors`` and change nothing."""
        before = self.rb.state_dict()
        with pytest.raises(errors or (ValueError, TypeError, KeyError, IndexError, RuntimeError)):
            call()
        assert same_state(self.rb.state_dict(), before)

    def written_slots(self, data: st.DataObject, live: bool = False) -> list[int]:
        pool = self.model.sampleable if live else self.model.written
        return data.draw(
            st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True)
        )

    # ------------------------------------------------------------ writes
    @rule()
    def add(self) -> None:
        item = self.items(1)
        self.rb.add(item[0])
        self.model.write([self.next_id - 1])

    @rule(n=st.integers(1, C))
    def extend(self, n: int) -> None:
        self.rb.extend(self.items(n))
        self.model.write(list(range(self.next_id - n, self.next_id)))

    @precondition(lambda self: self.kind != "list" and self.model.written)
    @rule(bad=st.sampled_from(["new key and wrong dtype", "wrong dtype", "wrong shape"]))
    def extend_bad_data(self, bad: str) -> None:
        td = self.items(2)
        if bad == "new key and wrong dtype":  # a new key alone is added; refused, it is not
            td["y"] = torch.zeros(2)
            td["x"] = td["x"].double()
        elif bad == "wrong dtype":
            td["x"] = td["x"].double()
        else:
            td["x"] = torch.zeros(2, 3)
        self.rejected(lambda: self.rb.extend(td))

    # ------------------------------------------------------------ sampling
    @rule(batch=st.integers(1, C + 2))
    def sample(self, batch: int) -> None:
        sampleable = self.model.sampleable
        if not sampleable:  # empty, or everything consumed: refused, nothing changes
            self.rejected(lambda: self.rb.sample(batch), RuntimeError, ValueError)
            return
        data, info = self.rb.sample(batch, return_info=True)
        index = info["index"].tolist()
        ids = data if self.kind == "list" else data["id"].tolist()
        assert ids == [self.model.ids[i] for i in index]
        assert set(index) <= set(sampleable)
        assert info["index_generation"].tolist() == [self.model.gens[i] for i in index]
        if self.model.consume is not None:
            assert len(index) == len(set(index)) == min(batch, len(sampleable))
        if self.config[1] == "without":
            assert len(index) == len(set(index))
        self.model.sampled(index)

    # ------------------------------------------------------------ priorities
    @precondition(lambda self: self.model.sampleable)
    @rule(data=st.data(), stale=st.booleans())
    def update_priority(self, data: st.DataObject, stale: bool) -> None:
        slots = self.written_slots(data, live=True)
        prio = data.draw(st.lists(st.floats(0.1, 10.0), min_size=len(slots), max_size=len(slots)))
        gens = [self.model.gens[s] - (stale and k == 0) for k, s in enumerate(slots)]
        self.rb.update_priority(
            torch.tensor(slots),
            torch.tensor(prio, dtype=torch.float64),
            generation=torch.tensor(gens),
        )
        for k, (slot, p) in enumerate(zip(slots, prio, strict=True)):
            if stale and k == 0:
                self.model.skipped += 1
            elif self.model.prioritized:
                self.model.prio[slot] = p
                self.model.max_prio = max(self.model.max_prio, p)

    @precondition(lambda self: self.model.written)
    @rule(data=st.data(), bad=st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -1e-9]))
    def update_priority_bad_value(self, data: st.DataObject, bad: float) -> None:
        slots = self.written_slots(data)
        prio = torch.ones(len(slots), dtype=torch.float64)
        prio[-1] = bad
        self.rejected(lambda: self.rb.update_priority(torch.tensor(slots), prio), ValueError)

    @precondition(lambda self: self.model.prioritized)
    @rule(index=st.sampled_from([C, C + 7, -C - 1]))
    def update_priority_out_of_range(self, index: int) -> None:
        self.rejected(lambda: self.rb.update_priority(torch.tensor([index]), 1.0))

    # ------------------------------------------------------------ conditional updates
    @precondition(lambda self: self.kind != "list" and self.model.written)
    @rule(data=st.data(), value=st.floats(-100, 100, width=32), stale=st.booleans())
    def update_if_present(self, data: st.DataObject, value: float, stale: bool) -> None:
        slots = self.written_slots(data)
        gens = [self.model.gens[s] - (stale and k == 0) for k, s in enumerate(slots)]
        result = self.rb.update_if_present(
            index=torch.tensor(slots),
            generation=torch.tensor(gens),
            patch={"x": torch.full((len(slots), 2), value)},
        )
        fresh = [not (stale and k == 0) for k in range(len(slots))]
        assert result.updated.tolist() == fresh
        for slot, ok in zip(slots, fresh, strict=True):
            if ok:
                self.model.values[slot] = value

    @precondition(lambda self: self.kind != "list" and self.model.written)
    @rule(data=st.data())
    def update_if_present_bad(self, data: st.DataObject) -> None:
        slots = self.written_slots(data)
        gens = torch.tensor([self.model.gens[s] for s in slots] + [1])  # one generation too many
        patch = {"x": torch.zeros(len(slots), 2)}
        self.rejected(
            lambda: self.rb.update_if_present(
                index=torch.tensor(slots), generation=gens, patch=patch
            )
        )

    @precondition(lambda self: self.kind == "list")
    @rule()
    def update_if_present_unsupported(self) -> None:
        patch = {"x": torch.zeros(1, 2)}
        self.rejected(
            lambda: self.rb.update_if_present(
                index=torch.tensor([0]), generation=torch.tensor([1]), patch=patch
            ),
            RuntimeError,
        )

    # ------------------------------------------------------------ whole-buffer operations
    @rule()
    def empty(self) -> None:
        self.rb.empty()
        self.model.empty()

    @rule()
    def dumps_then_loads(self) -> None:
        self.rb.dumps(self.tmp / "dump")
        fresh = self.build()
        fresh.loads(self.tmp / "dump")
        assert same_state(fresh.state_dict(), self.rb.state_dict())
        self.rb = fresh

    @precondition(lambda self: self.model.written)
    @rule()
    def loads_a_damaged_dump(self) -> None:
        self.rb.dumps(self.tmp / "bad")
        data = next(p for p in (self.tmp / "bad").iterdir() if p.is_dir())
        victim = max(data.iterdir(), key=lambda p: p.stat().st_size)
        victim.write_bytes(victim.read_bytes()[:-1])
        self.rejected(lambda: self.rb.loads(self.tmp / "bad"), CheckpointError)

    @rule()
    def state_dict_round_trip(self) -> None:
        fresh = self.build()
        fresh.load_state_dict(self.rb.state_dict())
        assert same_state(fresh.state_dict(), self.rb.state_dict())
        self.rb = fresh

    @rule()
    def load_state_dict_bad(self) -> None:
        sd = self.rb.state_dict()
        sd["_writer"] = {**sd["_writer"], "_generation": torch.zeros(C + 1, dtype=torch.long)}
        self.rejected(lambda: self.rb.load_state_dict(sd), ValueError)

    # ------------------------------------------------------------ the check after every step
    @invariant()
    def agrees_with_the_model(self) -> None:
        m = self.model
        assert len(self.rb) == len(m.sampleable) and self.rb.write_count == m.write_count
        ids, values = self.stored()
        assert ids == [m.ids[i] for i in range(len(ids))]
        assert values == pytest.approx([m.values[i] for i in range(len(ids))])
        assert self.rb.writer.generations_of(torch.arange(C)).tolist() == m.gens
        sd = self.rb.state_dict()
        assert sd["skipped_priority_updates"] == m.skipped
        if m.prioritized:
            leaves = sd["_sampler"]["leaves"].tolist()
            for slot in m.sampleable:
                assert leaves[slot] == pytest.approx(m.prio[slot], rel=1e-5)
        if m.consume is not None:
            assert sorted(sd["_sampler"]["live"]["live"].tolist()) == m.sampleable


def _machine(config: tuple[str, str, int | None]) -> Any:
    name = "_".join(str(c) for c in config)
    machine = type(f"BufferMachine_{name}", (BufferMachine,), {"config": config})
    machine.TestCase.settings = settings(
        max_examples=15,
        stateful_step_count=12,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    return machine.TestCase


for _config in CONFIGS:
    globals()["TestBufferModel_" + "_".join(str(c) for c in _config)] = _machine(_config)
del _config
