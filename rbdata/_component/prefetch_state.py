"""The saved state of batches sampled ahead of their consumer: one format for the package.

Three parts sample ahead of whoever consumes the batches, and a checkpoint
must keep what they drew (a sampler without replacement has moved past it,
the generator has advanced): the buffer's ``prefetch`` queue, the loader's
pass engine (``ReplayDataset(prefetch=...)``) and the Ray client's requests
in flight. Their saved state takes one of two shapes, both declared here
(``docs/internals.md``, "Sampling ahead", says why there are two):

- **Draws** (the loader's ``pending`` records, the Ray client's ``ahead``
  draws): a list of ``{"index", "info", "ends_pass"}`` records
  (:func:`draw_record`, :func:`read_draw_records`). A draw of the
  :class:`~rbdata.buffers.protocol.ServableBuffer` protocol is replayable: its
  rows are gathered again from the restored storage after a resume.
- **Results** (the buffer's ``state_dict()["_prefetch_state"]``):
  ``{"version", "capacity", "queue"}`` (:func:`check_queue_state`), the queue
  holding copies of whole ``sample()`` results, handed out again first.

Examples:
    >>> import torch
    >>> saved = [draw_record(torch.tensor([3, 1]), {"weight": torch.ones(2)}, False)]
    >>> [(index.tolist(), sorted(info), ends) for index, info, ends in read_draw_records(saved)]
    [([3, 1], ['weight'], False)]
    >>> check_queue_state({"version": 1, "capacity": 2, "queue": []}, depth=0)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

__all__ = [
    "QUEUE_STATE_VERSION",
    "check_queue_state",
    "draw_record",
    "read_draw_records",
]

#: the version of the buffer's saved queue of results (``{"version", "capacity", "queue"}``)
QUEUE_STATE_VERSION = 1


def draw_record(index: torch.Tensor, info: Mapping[str, Any], ends_pass: bool) -> dict[str, Any]:
    """One draw sampled ahead, as saved: ``{"index", "info", "ends_pass"}``."""
    return {"index": index, "info": dict(info), "ends_pass": bool(ends_pass)}


def read_draw_records(
    records: Any, where: str = "the saved draws"
) -> list[tuple[torch.Tensor, dict[str, Any], bool]]:
    """``(index, info, ends_pass)`` of each record :func:`draw_record` saved, checked first.

    Args:
        records: the saved list (or tuple) of records.
        where: how the error names ``records`` (e.g. ``"state_dict['pending']"``).

    Raises:
        ValueError: for anything but a list or tuple of records with a tensor
            ``index``, a dict ``info`` and an ``ends_pass``.
    """
    if not isinstance(records, list | tuple):
        raise ValueError(f"{where} must be a list of draws, got {type(records).__name__}.")
    out = []
    for i, record in enumerate(records):
        if not (
            isinstance(record, dict)
            and isinstance(record.get("index"), torch.Tensor)
            and isinstance(record.get("info"), dict)
            and "ends_pass" in record
        ):
            raise ValueError(
                f"{where}[{i}] must be a dict with a tensor 'index', a dict 'info' and "
                f"'ends_pass'; got {record!r}."
            )
        out.append((record["index"], dict(record["info"]), bool(record["ends_pass"])))
    return out


def check_queue_state(state: Any, depth: int) -> None:
    """Check a buffer's saved queue of results (``state_dict()["_prefetch_state"]``).

    Args:
        state: the saved state, or None (a state saved without one: nothing to restore).
        depth: the loading buffer's ``prefetch``.

    Raises:
        TypeError: if ``state`` or its queue has the wrong type.
        ValueError: for an unknown version, a bad capacity, or more queued
            batches than the capacity.
        RuntimeError: if batches are queued and the capacity differs from ``depth``.
    """
    if state is None:
        return
    if not isinstance(state, dict):
        raise TypeError(f"the prefetch state must be a dict, got {type(state).__name__}.")
    if state.get("version") != QUEUE_STATE_VERSION:
        raise ValueError(
            f"unsupported prefetch state version {state.get('version')!r}; "
            f"expected {QUEUE_STATE_VERSION}."
        )
    capacity, queue = state.get("capacity"), state.get("queue")
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"the prefetch state's capacity must be an int >= 0, got {capacity!r}.")
    if not isinstance(queue, list | tuple):
        raise TypeError(
            f"the prefetch state's queue must be a list or tuple, got {type(queue).__name__}."
        )
    if len(queue) > capacity:
        raise ValueError(
            f"the prefetch state holds {len(queue)} queued batches but its capacity is {capacity}."
        )
    if queue and capacity != depth:
        raise RuntimeError(
            f"Cannot restore a prefetch queue with capacity {capacity} into a replay buffer "
            f"with capacity {depth} (prefetch={depth}); build it with prefetch={capacity}."
        )
