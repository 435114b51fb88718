"""Tests of the consume-after-n live set: bookkeeping invariants and uniform draws."""

from __future__ import annotations

import io
from collections import Counter
from itertools import permutations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rbdata.samplers import RandomSampler
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


@given(n=st.integers(1, 3), ops=freed_ops, seed=st.integers(0, 1000))
def test_consumed_lists_the_slots_consumed_first_first(n, ops, seed):
    """consumed(k) is the first k slots of the consumption order still consumed (each once)."""
    live = _LiveSet(n)
    gen = torch.Generator().manual_seed(seed)
    counts: dict[int, int] = {}
    order: list[int] = []  # every consumption, in order (repeats included)
    for op, arg in ops:
        if op == "add":
            live.add(torch.tensor(arg, dtype=torch.long), gen)
            counts.update({i: 0 for i in arg})
        elif op == "take":
            for i in live.take(arg, gen).tolist():
                counts[i] += 1
                if counts[i] == n:
                    order.append(i)
        expected: list[int] = []
        for slot in reversed(order):  # a slot consumed twice counts where it was consumed last
            if counts[slot] >= n and slot not in expected:
                expected.append(slot)
        expected.reverse()
        k = arg if op == "look" else 50
        assert live.consumed(k).tolist() == expected[:k]
        # is_consumed: the same set as a mask (slots never written: not consumed)
        assert live.is_consumed(torch.arange(45)).tolist() == [
            counts.get(i, 0) >= n for i in range(45)
        ]


def test_freed_queue_stays_bounded_when_nobody_looks():
    """Consumed slots overwritten by the cursor (no reuse) never pile up in the queue."""
    live = _LiveSet(1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(200):
        live.add(torch.arange(64), gen)
        live.take(64, gen)
    assert len(live._freed) <= 2 * 64 + 1024 + 64
    assert sorted(live.consumed(100).tolist()) == list(range(64))


def test_consumed_skips_a_long_stale_front_at_once():
    """Slots rewritten after consumption leave the front of the queue for good."""
    live = _LiveSet(1)
    gen = torch.Generator().manual_seed(0)
    live.add(torch.arange(1000), gen)
    first = live.take(1000, gen)
    live.add(first[:990], gen)  # rewritten: no longer consumed
    assert sorted(live.consumed(5).tolist()) == sorted(first[990:995].tolist())
    assert live._freed._head == 990
