"""Writes into packed rows: rows in shared memory are copied in serial blocks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbdata.storages._assemble import _RowAssembler
from rbdata.storages._packed import _AHEAD_BYTES, _GRAIN_SIZE, _PackedRows
from rbdata.storages._pages import populate, reserve, reserve_shared, resident_bytes
from rbdata.storages._row_layout import _PackedLayout

# an Atari transition: a frame stack, a reward, an action (28,240 bytes a row)
LAYOUT = _PackedLayout([torch.uint8, torch.float32, torch.int64], [(4, 84, 84), (), (1,)])
CAPACITY = 64


def _rows(shared: bool) -> _PackedRows:
    nbytes = CAPACITY * LAYOUT.row_bytes
    flat = reserve_shared(nbytes) if shared else torch.zeros(nbytes, dtype=torch.uint8)
    return _PackedRows(LAYOUT, flat.view(CAPACITY, LAYOUT.row_bytes))


def _leaves(n: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [
        torch.randint(0, 256, (n, 4, 84, 84), dtype=torch.uint8, generator=gen),
        torch.rand(n, generator=gen),
        torch.randint(0, 1 << 40, (n, 1), generator=gen),
    ]


@pytest.fixture
def two_threads() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of 4-byte pieces of every block the row assembler writes."""
    seen: list[int] = []
    write = _RowAssembler.write

    def spy(self: _RowAssembler, leaves: list[torch.Tensor], out: torch.Tensor) -> bool:
        seen.append(out.numel())
        return write(self, leaves, out)

    monkeypatch.setattr(_RowAssembler, "write", spy)
    return seen


@pytest.mark.usefixtures("two_threads")
def test_shared_rows_are_written_in_blocks_below_the_grain(blocks: list[int]) -> None:
    rows, leaves = _rows(shared=True), _leaves(40, 0)
    rows.write_range(3, leaves)
    assert len(blocks) > 1
    assert max(blocks) < _GRAIN_SIZE  # each block is copied on the calling thread
    assert sum(blocks) == 40 * LAYOUT.row_bytes // 4
    for view, leaf in zip(rows.views, leaves, strict=True):
        assert torch.equal(view[3:43], leaf)


@pytest.mark.usefixtures("two_threads")
def test_private_rows_are_written_in_one_block(blocks: list[int]) -> None:
    _rows(shared=False).write_range(0, _leaves(40, 0))
    assert blocks == [40 * LAYOUT.row_bytes // 4]


def test_shared_rows_with_one_thread_are_written_in_one_block(blocks: list[int]) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _rows(shared=True).write_range(0, _leaves(40, 0))
    finally:
        torch.set_num_threads(before)
    assert blocks == [40 * LAYOUT.row_bytes // 4]


@pytest.mark.usefixtures("two_threads")
@settings(max_examples=30, deadline=None)
@given(start=st.integers(0, CAPACITY - 1), data=st.data())
def test_shared_rows_hold_exactly_the_batch_written(start: int, data: st.DataObject) -> None:
    n = data.draw(st.integers(1, CAPACITY - start), label="n")
    rows, leaves = _rows(shared=True), _leaves(n, start)
    rows.write_range(start, leaves)
    for view, leaf in zip(rows.views, leaves, strict=True):
        assert torch.equal(view[start : start + n], leaf)
        assert not view[:start].any() and not view[start + n :].any()  # the rest unwritten


def _committed_pages(rows: _PackedRows, first: int, stop: int) -> int:
    """Pages of rows ``first .. stop - 1`` the kernel holds (whole pages inside the span)."""
    row_bytes = rows.layout.row_bytes
    start = -(-first * row_bytes // 4096) * 4096  # the first whole page
    end = stop * row_bytes // 4096 * 4096
    inner = rows.packed.view(-1)[start:end]
    return resident_bytes(inner, inner.numel()) // 4096


@pytest.mark.skipif(
    not populate(reserve(4096), 0, 4096), reason="this kernel has no MADV_POPULATE_WRITE"
)
def test_a_write_into_a_new_span_of_shared_rows_commits_the_next_span() -> None:
    layout = _PackedLayout([torch.uint8], [(4096,)])  # a row a page
    span = _AHEAD_BYTES // 4096
    capacity = 5 * span
    rows = _PackedRows(layout, reserve_shared(capacity * 4096).view(capacity, 4096))
    rows.write_range(0, [torch.ones(span - 1, 4096, dtype=torch.uint8)])  # inside span 0
    assert _committed_pages(rows, span, capacity) == 0
    rows.write_range(span - 1, [torch.ones(2, 4096, dtype=torch.uint8)])  # into span 1
    assert _committed_pages(rows, span + 1, 2 * span) == 0  # span 1 is faulted in as written
    assert _committed_pages(rows, 2 * span, 3 * span) == span  # span 2 is committed ahead
    assert _committed_pages(rows, 3 * span, capacity) == 0
    assert int(rows.packed[2 * span : 3 * span].sum()) == 0  # committed ahead, still zeros
    assert rows.committed_rows(span + 1) == 3 * span + 1
    rows.write_range(5 * span - 2, [torch.ones(2, 4096, dtype=torch.uint8)])  # the last span
    assert _committed_pages(rows, 3 * span, 4 * span) == 0  # nothing past the capacity
    assert rows.committed_rows(capacity) == capacity


def test_private_rows_commit_nothing_ahead() -> None:
    layout = _PackedLayout([torch.uint8], [(4096,)])
    span = _AHEAD_BYTES // 4096
    rows = _PackedRows(layout, reserve(3 * span * 4096).view(3 * span, 4096))
    rows.write_range(span - 1, [torch.ones(2, 4096, dtype=torch.uint8)])
    assert _committed_pages(rows, span + 1, 3 * span) == 0
    assert rows.committed_rows(span + 1) == span + 1
