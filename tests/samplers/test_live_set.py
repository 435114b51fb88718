"""Tests of the consume-after-n live set: bookkeeping invariants and uniform draws."""

from __future__ import annotations

import io
from collections import Counter
from itertools import permutations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rbdata.samplers import RandomSampler
from rbdata.samplers._consumed_ring import _ConsumedRing
from rbdata.samplers._live import _distinct_positions, _LiveSet, first_unique


def _roundtrip(state: dict) -> dict:
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


def _check_uniform(counts: Counter, outcomes: list, trials: int) -> None:
    """Every outcome drawn about ``trials / len(outcomes)`` times (within 6 standard deviations)."""
    assert set(counts) <= set(outcomes)
    p = 1 / len(outcomes)
    mean, sd = trials * p, (trials * p * (1 - p)) ** 0.5
    for outcome in outcomes:
        assert abs(counts[outcome] - mean) < 6 * sd, (outcome, counts[outcome], mean)


def test_live_set_validation():
    with pytest.raises(ValueError, match="consume_after_n"):
        _LiveSet(0)
    with pytest.raises(ValueError, match="consume_after_n"):
        RandomSampler().set_consume_after_n(-1)
    with pytest.raises(ValueError, match="indices must be >= 0"):
        _LiveSet(1).add(torch.tensor([3, -1]))


live_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, 60), max_size=12)),
        st.tuples(st.just("consume"), st.integers(1, 12)),
        st.tuples(st.just("take"), st.integers(1, 12)),
        st.tuples(st.just("remove"), st.lists(st.integers(0, 70), max_size=8)),
    ),
    max_size=40,
)


@given(n=st.integers(1, 4), ops=live_ops, seed=st.integers(0, 1000))
def test_live_set_invariants(n, ops, seed):
    live = _LiveSet(n)
    gen = torch.Generator().manual_seed(seed)
    counts: dict[int, int] = {}
    alive: set[int] = set()
    for op, arg in ops:
        if op == "add":
            live.add(torch.tensor(arg, dtype=torch.long), gen)
            for i in arg:
                counts[i] = 0
                alive.add(i)
        elif op == "remove":
            live.remove(torch.tensor(arg, dtype=torch.long))
            alive -= set(arg)
        else:
            if op == "take":
                drawn = live.take(arg, gen)
            else:
                drawn = live.draw_distinct(arg, gen)
                live.consume(drawn)
            assert drawn.numel() == min(arg, len(alive))
            assert len(set(drawn.tolist())) == drawn.numel()
            assert set(drawn.tolist()) <= alive
            for i in drawn.tolist():
                counts[i] += 1
                assert int(live.counts[i]) == counts[i]
                if counts[i] >= n:
                    alive.discard(i)
        arr = live.live.tolist()
        assert len(arr) == len(set(arr)) == len(live)
        assert set(arr) == alive
        assert all(live._pos[i] == p for p, i in enumerate(arr))
        assert bool((live._pos >= 0).sum() == len(live))
    # drain: every live item comes out exactly n - count more times
    remaining = {i: n - counts[i] for i in alive}
    drained: Counter[int] = Counter()
    while len(live):
        drained.update(live.take(5, gen).tolist())
    assert drained == Counter(remaining)


def test_live_set_draw_is_uniform():
    live = _LiveSet(10**6)
    live.add(torch.arange(100))
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(100)
    for _ in range(400):
        counts += torch.bincount(live.draw_distinct(10, gen), minlength=100)
    assert counts.sum() == 4000
    assert counts.min() > 20 and counts.max() < 65  # mean 40


def test_take_is_uniform_after_writes_and_put_backs():
    """Writes land anywhere and drawn items that stay live are put back anywhere: the next
    batch is a uniform ordered pair of all live items, whatever happened before."""
    gen = torch.Generator().manual_seed(0)
    trials = 6000
    seen: Counter[tuple[int, ...]] = Counter()
    for _ in range(trials):
        live = _LiveSet(2)
        live.add(torch.tensor([0, 1, 2]), gen)
        live.take(1, gen)  # returned once: stays live, put back at a random place
        live.add(torch.tensor([3, 4]), gen)
        seen[tuple(live.take(2, gen).tolist())] += 1
    _check_uniform(seen, list(permutations(range(5), 2)), trials)


def test_take_uniform_when_inserting_many_with_repeated_positions():
    """40 writes into 200 live items draw positions among 240: repeats are likely and topped
    up. Old and new items alike end up anywhere in the order the batches come out in."""
    gen = torch.Generator().manual_seed(1)
    trials = 3000
    seen: Counter[tuple[int, int]] = Counter()
    for _ in range(trials):
        live = _LiveSet(1)
        live.add(torch.arange(200), gen)
        live.add(torch.arange(200, 240), gen)
        order = live.take(240, gen).tolist()
        assert sorted(order) == list(range(240))
        for item in (0, 199, 200, 239):
            seen[(item, order.index(item) // 60)] += 1
    for item in (0, 199, 200, 239):
        per_item = Counter({b: n for (i, b), n in seen.items() if i == item})
        _check_uniform(per_item, [0, 1, 2, 3], trials)


@pytest.mark.parametrize(("n", "k"), [(10, 10), (10, 4), (1000, 30), (240, 40), (60, 20)])
def test_distinct_positions(n, k):
    gen = torch.Generator().manual_seed(n + k)
    first: Counter[int] = Counter()
    for _ in range(300):
        positions = _distinct_positions(n, k, gen)
        assert positions.size == k and len(set(positions.tolist())) == k
        assert positions.min() >= 0 and positions.max() < n
        first[int(positions[0])] += 1
    assert len(first) > min(n, 300) // 3  # the first position is spread out, not sorted


def test_take_counts_survivors_and_leavers():
    live = _LiveSet(2)
    gen = torch.Generator().manual_seed(0)
    live.add(torch.arange(4), gen)
    first = live.take(10, gen)
    assert sorted(first.tolist()) == [0, 1, 2, 3]
    assert live.counts[:4].tolist() == [1, 1, 1, 1] and len(live) == 4
    assert sorted(live.take(3, gen).tolist() + live.take(3, gen).tolist()) == [0, 1, 2, 3]
    assert len(live) == 0 and live.take(3, gen).numel() == 0
    live.add(torch.tensor([2]), gen)  # a rewrite: live again with a count of 0
    assert live.take(3, gen).tolist() == [2] and int(live.counts[2]) == 1


def test_live_set_state_roundtrip():
    live = _LiveSet(3)
    live.add(torch.arange(10))
    live.consume(torch.tensor([1, 2, 3]))
    live.consume(torch.tensor([2, 3]))
    live.consume(torch.tensor([3]))
    other = _LiveSet(1)
    other.load_state_dict(_roundtrip(live.state_dict()))
    assert other.n == 3
    assert sorted(other.live.tolist()) == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert other.counts[:4].tolist() == [0, 1, 2, 3]


def test_live_set_state_keeps_order_so_draws_resume():
    live = _LiveSet(2)
    gen = torch.Generator().manual_seed(5)
    live.add(torch.arange(40), gen)
    live.take(7, gen)
    other = _LiveSet(1)
    other.load_state_dict(_roundtrip(live.state_dict()))
    assert torch.equal(other.live, live.live)
    gen_other = torch.Generator()
    gen_other.set_state(gen.get_state())
    for _ in range(5):
        assert torch.equal(other.take(6, gen_other), live.take(6, gen))


def test_first_unique_keeps_first_occurrence_order():
    assert first_unique(torch.tensor([5, 3, 5, 1, 3, 9])).tolist() == [5, 3, 1, 9]


freed_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.lists(st.integers(0, 40), max_size=10)),
        st.tuples(st.just("take"), st.integers(1, 10)),
        st.tuples(st.just("look"), st.integers(1, 50)),
    ),
    max_size=60,
)


def _ring_order(slots: set[int], start: int) -> list[int]:
    """``slots`` from ``start`` upwards, then from 0 (the reuse order)."""
    return sorted(slots, key=lambda s: (s < start, s))


@given(n=st.integers(1, 3), ops=freed_ops, seed=st.integers(0, 1000))
def test_consumed_lists_the_slots_in_ring_order_from_the_reuse_position(n, ops, seed):
    """consumed(k): the consumed slots from the one after the last refilled, wrapping."""
    live = _LiveSet(n)
    gen = torch.Generator().manual_seed(seed)
    counts: dict[int, int] = {}
    reuse_at = 0
    for op, arg in ops:
        if op == "add":
            consumed_before = {i for i, c in counts.items() if c >= n}
            live.add(torch.tensor(arg, dtype=torch.long), gen)
            refilled = [i for i in arg if i in consumed_before]
            if refilled:
                reuse_at = refilled[-1] + 1
            counts.update({i: 0 for i in arg})
        elif op == "take":
            for i in live.take(arg, gen).tolist():
                counts[i] += 1
        expected = _ring_order({i for i, c in counts.items() if c >= n}, reuse_at)
        k = arg if op == "look" else 50
        assert live.consumed(k).tolist() == expected[:k]
        # is_consumed: the same set as a mask (slots never written: not consumed)
        assert live.is_consumed(torch.arange(45)).tolist() == [
            counts.get(i, 0) >= n for i in range(45)
        ]


@pytest.mark.parametrize("density", [0.001, 0.05, 0.5, 0.97, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_consumed_ring_matches_ring_order_at_any_density(density, seed):
    """Dense runs, scattered slots, a position inside a block: always the ring order."""
    rng = np.random.default_rng(seed)
    ring = _ConsumedRing()
    capacity = 20_000
    ring.grow(capacity)
    marked = np.flatnonzero(rng.random(capacity) < density)
    ring.mark(rng.permutation(marked))
    expected_all = set(marked.tolist())
    for _ in range(6):
        start = int(rng.integers(0, capacity + 100))
        ring.reuse_at = start
        expected = _ring_order(expected_all, start)
        for k in (1, 7, 64, 1000, len(expected), len(expected) + 5):
            assert ring.first(k).tolist() == expected[:k]
        taken = ring.first(int(rng.integers(1, 3000)))
        ring.refill(taken)  # written again: the position moves past the last one
        expected_all -= set(taken.tolist())
        assert len(ring) == len(expected_all)
        if taken.size:
            assert ring.reuse_at == int(taken[-1]) + 1
        more = rng.choice(capacity, 500, replace=False)
        more = more[~ring.is_marked(more)]
        ring.mark(more)
        expected_all |= set(more.tolist())
    assert ring.first(capacity).tolist() == _ring_order(expected_all, ring.reuse_at)


def test_consumed_after_a_drain_is_one_run_from_the_reuse_position():
    live = _LiveSet(1)
    gen = torch.Generator().manual_seed(0)
    live.add(torch.arange(1000), gen)
    live.take(1000, gen)
    assert torch.equal(live.consumed(1000), torch.arange(1000))
    live.add(torch.arange(600), gen)  # reused: the next write continues at 600
    live.take(600, gen)
    assert live.consumed(1000).tolist() == list(range(600, 1000)) + list(range(600))


def test_consumed_order_survives_the_state_dict():
    live = _LiveSet(1)
    gen = torch.Generator().manual_seed(0)
    live.add(torch.arange(100), gen)
    live.take(60, gen)
    live.add(live.consumed(10), gen)
    other = _LiveSet(1)
    other.load_state_dict(_roundtrip(live.state_dict()))
    assert torch.equal(other.consumed(100), live.consumed(100))
    assert other.consumed(100).numel() == 50


@pytest.mark.parametrize("bad", [-1, 2.5, "3", None])
def test_a_bad_reuse_position_is_refused_and_changes_nothing(bad):
    live = _LiveSet(1)
    live.add(torch.arange(10))
    live.take(4, None)
    before = live.state_dict()
    state = live.state_dict()
    state["reuse_at"] = bad
    other = _LiveSet(1)
    other.add(torch.arange(3))
    with pytest.raises(ValueError, match="reuse_at"):
        other.load_state_dict(state)
    assert sorted(other.live.tolist()) == [0, 1, 2] and other.consumed(10).numel() == 0
    assert live.state_dict()["reuse_at"] == before["reuse_at"]


def test_consumed_ring_lists_few_slots_without_the_summary():
    """Few consumed slots (marked, refilled, marked again): listed, each once, in ring order."""
    rng = np.random.default_rng(3)
    ring = _ConsumedRing()
    ring.grow(100_000)
    consumed: set[int] = set()
    for step in range(200):
        slots = rng.choice(100_000, 64, replace=False)
        slots = slots[~ring.is_marked(slots)]
        ring.mark(slots)
        consumed |= set(slots.tolist())
        if step % 3 == 0:  # refill a part: some come back marked later (listed twice)
            back = np.array(sorted(consumed)[:40], dtype=np.int64)
            ring.refill(back)
            consumed -= set(back.tolist())
            ring.mark(back[:10])
            consumed |= set(back[:10].tolist())
        expected = _ring_order(consumed, ring.reuse_at)
        assert ring.first(len(expected) + 1).tolist() == expected
        assert len(ring) == len(consumed)
        if step % 7 == 6:  # a write takes them all: nothing consumed, the list starts afresh
            ring.refill(ring.first(len(consumed)))
            consumed.clear()
    assert ring.first(10).tolist() == _ring_order(consumed, ring.reuse_at)[:10]
