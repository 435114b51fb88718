"""The rows reserved writers copy outside a shared buffer's lock (sharing/in_flight.py)."""

from __future__ import annotations

import logging
import multiprocessing

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbdata.sharing.in_flight import LOG, SLOTS, InFlightRows, RowProbe, ring_ranges

CAPACITY = 64


def rows_of(ranges: tuple[int, int, int, int]) -> set[int]:
    a, b, c, d = ranges
    return set(range(a, b)) | set(range(c, d))


reservation = st.tuples(st.integers(0, CAPACITY - 1), st.integers(1, CAPACITY)).map(
    lambda sn: ring_ranges(sn[0], sn[1], CAPACITY)
)


@settings(max_examples=200, deadline=None)
@given(
    before=st.lists(reservation, max_size=4),
    released=st.lists(st.booleans(), min_size=4, max_size=4),
    after=st.lists(reservation, max_size=LOG + 4),
    rows=st.lists(st.integers(0, CAPACITY - 1), min_size=1, max_size=32),
)
def test_touched_is_exactly_the_rows_in_flight_then_or_reserved_since(
    before: list[tuple[int, int, int, int]],
    released: list[bool],
    after: list[tuple[int, int, int, int]],
    rows: list[int],
) -> None:
    table = InFlightRows()
    in_flight: set[int] = set()
    for ranges, done in zip(before, released, strict=False):
        slot = table.claim(ranges)
        if slot is None:  # refused: a copy in flight covers some of these rows
            assert rows_of(ranges) & in_flight
            continue
        if done:
            table.release(slot)
        else:
            in_flight |= rows_of(ranges)
    snapshot = table.snapshot()
    reserved_since: set[int] = set()
    logged = 0
    for ranges in after:
        slot = table.claim(ranges)
        if slot is None:
            assert rows_of(ranges) & in_flight
            continue
        table.release(slot)  # copied at once: only the log remembers them
        reserved_since |= rows_of(ranges)
        logged += 1
    touched = table.touched(snapshot, RowProbe(torch.tensor(rows)))
    if logged > LOG:  # the log cannot tell: the reader copies again
        assert touched
    else:
        assert touched == bool(set(rows) & (in_flight | reserved_since))


def test_no_row_is_touched_without_reservations_and_any_row_is_with_one() -> None:
    table = InFlightRows()
    snapshot = table.snapshot()
    assert not table.touched(snapshot, RowProbe(torch.arange(CAPACITY)))
    assert not table.touched(snapshot, RowProbe(None))
    table.release(table.claim((3, 5, 0, 0)) or 0)
    assert table.touched(snapshot, RowProbe(None))  # rows unknown: any reservation counts
    assert not table.touched(table.snapshot(), RowProbe(None))


def test_a_full_table_refuses_another_claim_until_a_slot_is_released() -> None:
    table = InFlightRows()
    slots = [table.claim((i, i + 1, 0, 0)) for i in range(SLOTS)]
    assert None not in slots and table.busy()
    assert table.claim((40, 41, 0, 0)) is None
    table.release(slots[3])
    assert table.claim((40, 41, 0, 0)) == slots[3]


def test_no_claim_covers_rows_still_in_flight() -> None:
    # a small ring's cursor can lap a slow writer: a second copy would tear its rows
    table = InFlightRows()
    slow = table.claim(ring_ranges(6, 4, 8))  # rows 6, 7, 0, 1
    assert slow is not None
    assert table.claim((1, 3, 0, 0)) is None
    beside = table.claim((2, 6, 0, 0))  # rows next to them are free
    assert beside is not None
    table.release(slow)
    assert table.claim((0, 2, 0, 0)) is not None


def test_ring_ranges_split_at_the_end() -> None:
    assert ring_ranges(0, 8, 8) == (0, 8, 0, 0)
    assert ring_ranges(5, 5, 8) == (5, 8, 0, 2)
    assert rows_of(ring_ranges(7, 8, 8)) == set(range(8))


def _claim_and_die(table: InFlightRows) -> None:
    table.claim((0, 4, 0, 0))  # a writer killed inside its copy


def test_a_drain_frees_the_slot_of_a_dead_writer_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    table = InFlightRows()
    child = multiprocessing.get_context("spawn").Process(target=_claim_and_die, args=(table,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and table.busy()  # the child's slot is still taken
    with caplog.at_level(logging.WARNING, logger="rbdata.sharing.in_flight"):
        table.drain()
    assert not table.busy()
    assert f"writer process {child.pid} died" in caplog.text


def test_pickled_tables_are_one_table() -> None:
    import pickle
    from multiprocessing.reduction import ForkingPickler

    table = InFlightRows()
    twin = pickle.loads(ForkingPickler.dumps(table))
    slot = twin.claim((1, 2, 0, 0))
    assert table.busy() and slot is not None
    twin.release(slot)
    assert not table.busy()


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.integers(0, 10_000), min_size=1, max_size=64),
    ranges=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 200)), max_size=6),
    listed=st.booleans(),
)
def test_a_probe_hits_exactly_the_ranges_holding_one_of_its_rows(
    rows: list[int], ranges: list[tuple[int, int]], listed: bool
) -> None:
    from unittest import mock

    from rbdata.sharing import in_flight as _in_flight

    spans = [ring_ranges(start, n, 10_001) if n else (start, start, 0, 0) for start, n in ranges]
    expected = any(set(rows) & rows_of(span) for span in spans)
    with mock.patch.object(_in_flight, "_LISTED", 4096 if listed else 0):  # both ways of checking
        assert RowProbe(torch.tensor(rows)).hits(spans) == expected
