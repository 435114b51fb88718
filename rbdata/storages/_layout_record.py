"""A tensor storage's row layout as JSON values, for the processes that map the same rows.

A storage shared before its first write meets the other processes at a
rendezvous (:mod:`rbdata.sharing.rendezvous`), which stores and compares only
JSON and raw rows: the storage turns its structure, packed-row layout and
leading cell shape into such a record and back here.

Examples:
    >>> describe_record({"dtypes": ["float32", "int64"], "shapes": [[3], []]})
    'float32[3], int64[]'
"""

from __future__ import annotations

import json
from typing import Any

import torch

from ._pytree import _Structure
from ._row_layout import _PackedLayout

__all__ = ["describe_record", "layout_from_record", "layout_record"]


def layout_record(
    structure: _Structure, layout: _PackedLayout, lead: tuple[int, ...]
) -> dict[str, Any]:
    """A storage's layout as JSON values, for the processes that map the same rows.

    Raises:
        TypeError: if the data's structure holds a value JSON cannot describe.
    """
    record = {
        "structure": structure.state(),
        "dtypes": [str(dtype).removeprefix("torch.") for dtype in layout.dtypes],
        "shapes": [list(shape) for shape in layout.shapes],
        "lead": list(lead),
    }
    try:  # as the other processes will read it back
        normalized: dict[str, Any] = json.loads(json.dumps(record))
    except (TypeError, ValueError) as err:
        raise TypeError(
            f"a shared_init storage describes its data's layout as JSON for the other "
            f"processes, and this data's structure cannot be ({err})."
        ) from err
    return normalized


def layout_from_record(
    record: dict[str, Any],
) -> tuple[_Structure, _PackedLayout, tuple[int, ...]]:
    """The structure, row layout and leading cell shape of a :func:`layout_record`."""
    dtypes = [getattr(torch, name) for name in record["dtypes"]]
    layout = _PackedLayout(dtypes, [tuple(shape) for shape in record["shapes"]])
    return _Structure.from_state(record["structure"]), layout, tuple(record["lead"])


def describe_record(record: dict[str, Any]) -> str:
    """The leaves of a :func:`layout_record`, for messages: ``float32[3], int64[]``."""
    return ", ".join(
        f"{dtype}{shape}" for dtype, shape in zip(record["dtypes"], record["shapes"], strict=True)
    )
