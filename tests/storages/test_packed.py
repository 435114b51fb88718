"""Writes into packed rows: rows in shared memory are copied in serial blocks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rbdata.sharing.segments import reserve_shared
from rbdata.storages._assemble import _RowAssembler
from rbdata.storages._packed import _GRAIN_SIZE, _PackedRows
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
