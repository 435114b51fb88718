"""Flat cells <-> coordinates (rbdata/buffers/_coordinates.py)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from rbdata.buffers._coordinates import cells_of_rows, to_coordinates, to_flat, to_tuple

SHAPES = st.lists(st.integers(1, 6), min_size=1, max_size=4)


@given(shape=SHAPES, data=st.data())
def test_ravel_of_unravel_is_the_identity(shape, data):
    cells = math.prod(shape)
    flat = torch.tensor(
        data.draw(st.lists(st.integers(0, cells - 1), max_size=20)), dtype=torch.long
    )
    coords = to_coordinates(flat, shape)
    assert tuple(coords.shape) == (flat.numel(), len(shape))
    assert ((coords >= 0) & (coords < torch.tensor(shape))).all()
    if len(shape) > 1:  # a 1-D tensor is read as flat cells, not as coordinates
        assert to_flat(coords, shape).tolist() == flat.tolist()
    assert to_flat(to_tuple(flat, shape), shape).tolist() == flat.tolist()


@given(rows=st.lists(st.integers(0, 50), max_size=10), cells=st.integers(1, 5))
def test_cells_of_rows_are_each_rows_cells_in_order(rows, cells):
    out = cells_of_rows(torch.tensor(rows, dtype=torch.long), cells)
    assert out.tolist() == [r * cells + c for r in rows for c in range(cells)]


def test_flat_cells_pass_through():
    assert to_flat(torch.tensor([7, 3]), (5, 2)).tolist() == [7, 3]
    assert to_flat(4, (5, 2)).tolist() == [4]


@pytest.mark.parametrize(
    ("index", "match"),
    [
        (
            torch.zeros(2, 3, dtype=torch.long),
            r"index has shape \[2, 3\]: expected coordinates \[N, 2\]",
        ),
        (torch.tensor([[5, 0]]), r"coordinates \[\[5, 0\]\] outside the storage's shape \[5, 2\]"),
        (torch.tensor([[0, -1]]), r"coordinates \[\[0, -1\]\] outside"),
        ((torch.tensor([0]),), r"tuple of 1 tensors, expected 2"),
        ((torch.tensor([0, 1]), torch.tensor([0, 1, 0])), r"different shapes \[\[2\], \[3\]\]"),
    ],
)
def test_bad_coordinates_are_value_errors(index, match):
    with pytest.raises(ValueError, match=match):
        to_flat(index, (5, 2))


def test_float_coordinates_are_type_errors():
    with pytest.raises(TypeError, match="priority_index must hold integers"):
        to_flat(torch.zeros(2, 2), (5, 2), "priority_index")
