"""A tensor storage's layout as the JSON record the processes sharing its rows compare."""

from __future__ import annotations

import json

import torch

from rbdata.storages._layout_record import describe_record, layout_from_record, layout_record
from rbdata.storages._pytree import _Structure
from rbdata.storages._row_layout import _PackedLayout


def test_a_record_is_json_and_gives_the_layout_back() -> None:
    data = {"obs": torch.zeros(4, 3), "action": torch.zeros(4, dtype=torch.int64)}
    structure, leaves = _Structure.infer(data, 1)
    layout = _PackedLayout([t.dtype for t in leaves], [tuple(t.shape[1:]) for t in leaves])
    record = layout_record(structure, layout, (1,))
    assert json.loads(json.dumps(record)) == record
    again, layout_again, lead = layout_from_record(record)
    assert again.state() == structure.state()
    assert (layout_again.dtypes, layout_again.shapes, lead) == (layout.dtypes, layout.shapes, (1,))
    assert sorted(describe_record(record).split(", ")) == ["float32[3]", "int64[]"]
