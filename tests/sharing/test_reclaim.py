"""Dropping a dead writer's rows (sharing/reclaim.py): reservations and writes under the lock."""

from __future__ import annotations

import torch

from rbdata import LazyTensorStorage, RoundRobinWriter
from rbdata.sharing.reclaim import reclaim


def _ring(capacity: int, items: int) -> tuple[LazyTensorStorage, RoundRobinWriter]:
    storage = LazyTensorStorage(capacity)
    writer = RoundRobinWriter(track_generations=True)
    writer.register_storage(storage)
    writer.extend(torch.arange(1, items + 1))
    return storage, writer


def _journal(storage: LazyTensorStorage, writer: RoundRobinWriter) -> tuple[int, int, int]:
    return writer.cursor, writer.write_count, len(storage)


def test_an_overwrite_killed_in_a_wrapped_ring_shows_whole_rows_and_goes_back() -> None:
    storage, writer = _ring(8, 10)  # slots hold 9 10 3 4 5 6 7 8, cursor 2
    journal = _journal(storage, writer)
    generations = writer.generations_of(torch.arange(8)).clone()
    writer.extend(torch.tensor([-1, -1, -1]))  # the dead write (torn or not: never seen)
    reclaim(storage, writer, (2, 5, 0, 0), journal, locked=True)
    assert _journal(storage, writer) == journal
    # the overwritten slots hold copies of the rows just before them, in ring order
    assert storage.get(torch.arange(8)).tolist() == [9, 10, 8, 9, 10, 6, 7, 8]
    moved = writer.generations_of(torch.arange(8)) - generations
    assert (moved > 0).tolist() == [False, False, True, True, True, False, False, False]
    writer.extend(torch.tensor([11]))  # the next writer goes on at the cursor
    assert storage.get(torch.tensor([2])).tolist() == [11]


def test_an_overwrite_killed_across_the_ring_end_mends_both_ranges() -> None:
    storage, writer = _ring(8, 14)  # cursor 6
    journal = _journal(storage, writer)
    writer.extend(torch.tensor([-1, -1, -1, -1]))
    reclaim(storage, writer, (6, 8, 0, 2), journal, locked=True)
    assert _journal(storage, writer) == journal
    rows = storage.get(torch.arange(8)).tolist()
    assert -1 not in rows and rows[2:6] == [11, 12, 13, 14]


def test_a_first_fill_killed_under_the_lock_stays_past_the_length() -> None:
    storage, writer = _ring(8, 3)
    journal = _journal(storage, writer)
    writer.extend(torch.tensor([-1, -1]))
    reclaim(storage, writer, (3, 5, 0, 0), journal, locked=True)
    assert _journal(storage, writer) == (3, 3, 3)
    assert storage.get(torch.arange(3)).tolist() == [1, 2, 3]


def test_an_overwrite_of_every_row_leaves_nothing_to_show() -> None:
    storage, writer = _ring(4, 6)
    journal = _journal(storage, writer)
    writer.extend(torch.tensor([-1, -1, -1, -1]))
    reclaim(storage, writer, (2, 4, 0, 2), journal, locked=True)
    assert len(storage) == 0 and writer.cursor == 0 and writer.write_count == 6
