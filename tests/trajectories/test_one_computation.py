"""Every trajectory-boundary computation against one plain-Python reference, on random data.

The slice samplers' indexes (1-D ring, ``ndim > 1`` lanes, fragmented ids),
:class:`~rbdata.Sequence`'s episode edges, the query split and
:func:`~rbdata.find_start_stop_traj` all rest on
:func:`rbdata.trajectories.runs.split_runs`. Each is checked here against a
reference written as plain loops over the stored values (random trajectory
lengths, wrap-around in a ring, lanes, done/terminated/truncated markers of
several shapes, trajectory ids, fragmented ids, cursor positions).
"""

from __future__ import annotations

import itertools
import warnings
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from rbdata import LazyTensorStorage, find_start_stop_traj
from rbdata.errors import DuplicateStepError
from rbdata.query.split import markers_of, split_data, split_storage
from rbdata.trajectories.edges import scan_edges
from rbdata.trajectories.index import TrajectoryIndex
from rbdata.trajectories.layouts import FragmentedTrajectoryIndex, GridTrajectoryIndex
from rbdata.trajectories.ring import RingLayout

END_KEYS = [("next", "done"), ("next", "terminated"), ("next", "truncated")]


# ------------------------------------------------------------------ the reference
def reference_runs(marks: list[Any], kind: str, lane: int | None = None) -> list[list[int]]:
    """Positions of ``marks`` grouped into trajectories, with a loop."""
    out: list[list[int]] = []
    for i, mark in enumerate(marks):
        begins = (
            i == 0
            or (lane is not None and i % lane == 0)
            or (marks[i - 1] != mark if kind == "ids" else bool(marks[i - 1]))
        )
        if begins:
            out.append([i])
        else:
            out[-1].append(i)
    return out


def marker_of(data: dict[Any, list[Any]], kind: str, slot: int) -> Any:
    """The marker of one stored item: the first id entry, or any end flag of any end key."""
    if kind == "ids":
        value = data["episode"][slot]
        return value[0] if isinstance(value, list) else value
    return any(any(data[key][slot]) for key in END_KEYS if key in data)


# ------------------------------------------------------------------ data
@st.composite
def layouts(draw: Any, kind: str) -> dict[Any, int]:
    """The entries items hold, with their widths: ids (1 or 2 per item), or some end keys."""
    if kind == "ids":
        return {"episode": draw(st.sampled_from([1, 2]))}
    keys = draw(st.lists(st.sampled_from(END_KEYS), min_size=1, max_size=3, unique=True))
    return {key: draw(st.sampled_from([1, 2])) for key in keys}


@st.composite
def stored_items(draw: Any, layout: dict[Any, int], n: int) -> dict[Any, torch.Tensor]:
    """``n`` random items of ``layout``: few trajectory ids, or sparse end flags."""
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    top = draw(st.integers(0, 3))
    out: dict[Any, torch.Tensor] = {"obs": torch.arange(n)}
    for key, width in layout.items():
        shape = (n, width) if width > 1 or key != "episode" else (n,)
        if key == "episode":
            out[key] = torch.randint(0, top + 1, shape, generator=gen)
        else:
            out[key] = torch.rand(shape, generator=gen) < 0.1 * (top + 1)
    return out


def as_lists(storage: LazyTensorStorage) -> dict[Any, list[Any]]:
    """The stored entries as Python lists (``[slot][...]``)."""
    return {key: storage.get_leaf(key).tolist() for key in storage.leaf_keys()}


def index_slots(index: Any) -> list[list[int]]:
    """The trajectories of an index as lists of storage slots, in its order."""
    starts, lengths = index.trajectories()
    return [
        index.to_slots(torch.arange(s, s + n)).tolist()
        for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


# ------------------------------------------------------------------ 1-D ring index
writes = st.lists(st.tuples(st.integers(1, 12), st.booleans(), st.booleans()), max_size=8)


@given(
    capacity=st.integers(2, 12),
    kind=st.sampled_from(["ids", "ends"]),
    plan=writes,
    data=st.data(),
)
@settings(deadline=None, max_examples=150)
def test_ring_index(capacity: int, kind: str, plan: list[Any], data: Any) -> None:
    storage = LazyTensorStorage(capacity)
    layout = data.draw(layouts(kind))
    index = TrajectoryIndex()
    cursor = written = 0
    for n, sync, touch in plan:
        n = min(n, capacity)
        items = TensorDict(data.draw(stored_items(layout, n)), [n])
        slots = (torch.arange(n) + cursor) % capacity
        storage.set(slots, items)
        cursor, written = (cursor + n) % capacity, written + n
        index.extend(slots)
        if touch:  # edit an item in place
            slot = torch.tensor([data.draw(st.integers(0, len(storage) - 1))])
            storage.set(slot, TensorDict(data.draw(stored_items(layout, 1)), [1]))
            index.touch(slot)
        if sync:
            check_ring(storage, index, kind, cursor)
    if written:
        check_ring(storage, index, kind, cursor)
        fresh = TrajectoryIndex()  # a restored index rebuilds the same
        fresh.load_state_dict(index.state_dict())
        check_ring(storage, fresh, kind, cursor)


def check_ring(storage: Any, index: TrajectoryIndex, kind: str, cursor: int) -> None:
    n, capacity = len(storage), storage.max_size
    order = [(cursor + i) % capacity for i in range(n)] if n == capacity else list(range(n))
    stored = as_lists(storage)
    runs = reference_runs([marker_of(stored, kind, s) for s in order], kind)
    expected = [[order[i] for i in run] for run in runs]
    index.sync(storage)
    assert index_slots(index) == expected
    assert index.v_end % capacity == cursor % capacity


# ------------------------------------------------------------------ ndim > 1 lanes
@given(
    capacity=st.integers(2, 7),
    cells=st.integers(2, 3),
    kind=st.sampled_from(["ids", "ends"]),
    plan=writes,
    data=st.data(),
)
@settings(deadline=None, max_examples=100)
def test_grid_index(capacity: int, cells: int, kind: str, plan: list[Any], data: Any) -> None:
    storage = LazyTensorStorage(capacity * cells, ndim=2)
    markers = {"traj_key": "episode"} if kind == "ids" else {"end_key": None}
    index = GridTrajectoryIndex(**markers)
    layout = data.draw(layouts(kind))
    cursor = written = 0
    for n, sync, _ in plan:
        n = min(n, capacity)
        items = data.draw(stored_items(layout, n * cells))
        rows = (torch.arange(n) + cursor) % capacity
        storage.set(rows, TensorDict(items, [n * cells]).reshape(n, cells))
        cursor, written = (cursor + n) % capacity, written + n
        index.extend(rows)
        if sync:
            check_grid(storage, index, kind, cursor, cells)
    if written:
        check_grid(storage, index, kind, cursor, cells)


def check_grid(storage: Any, index: Any, kind: str, cursor: int, cells: int) -> None:
    items, capacity = len(storage) // cells, storage.shape[0]
    order = [(cursor + i) % capacity for i in range(items)] if items == capacity else range(items)
    stored = as_lists(storage)  # leaves are flat: one entry per cell
    slots = [row * cells + cell for cell in range(cells) for row in order]
    runs = reference_runs([marker_of(stored, kind, s) for s in slots], kind, lane=items)
    expected = [[slots[i] for i in run] for run in runs]
    index.sync(storage)
    assert index_slots(index) == expected


# ------------------------------------------------------------------ fragmented ids
@given(
    pairs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 6)), min_size=1, max_size=20),
    unique=st.booleans(),
)
@settings(deadline=None, max_examples=150)
def test_fragmented_index(pairs: list[tuple[int, int]], unique: bool) -> None:
    if unique:
        pairs = list(dict.fromkeys(pairs))
    n = len(pairs)
    storage = LazyTensorStorage(n)
    ids, steps = (torch.tensor(column) for column in zip(*pairs, strict=True))
    storage.set(torch.arange(n), TensorDict({"episode": ids, "step": steps}, [n]))
    by_pair = sorted(range(n), key=lambda s: pairs[s])
    duplicate = len(set(pairs)) < n
    expected: list[list[int]] = []
    for i, slot in enumerate(by_pair):
        (prev_id, prev_step), (id_, step) = pairs[by_pair[i - 1]], pairs[slot]
        if i and prev_id == id_ and prev_step + 1 == step:
            expected[-1].append(slot)
        else:
            expected.append([slot])
    index = FragmentedTrajectoryIndex(traj_key=None, step_key="step")
    index.extend(torch.arange(n))
    if duplicate:
        with pytest.raises(DuplicateStepError):
            index.sync(storage)
        return
    index.sync(storage)
    assert index_slots(index) == expected


# ------------------------------------------------------------------ Sequence's edges
@given(
    capacity=st.integers(1, 9),
    cells=st.sampled_from([1, 1, 2, 3]),
    fill=st.floats(0, 1),
    newest=st.integers(0, 8),
    reach=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    data=st.data(),
)
@settings(deadline=None, max_examples=200)
def test_episode_edges(
    capacity: int, cells: int, fill: float, newest: int, reach: tuple[int, int], data: Any
) -> None:
    items = max(1, round(fill * capacity))
    storage = LazyTensorStorage(capacity * cells, ndim=2 if cells > 1 else 1)
    width = data.draw(st.sampled_from([1, 2]))
    done = data.draw(
        st.lists(st.booleans(), min_size=items * cells * width, max_size=items * cells * width)
    )
    flags = torch.tensor(done).view(items, *((cells,) if cells > 1 else ()), width)
    storage.set(torch.arange(items), TensorDict({("next", "done"): flags}, flags.shape[:-1]))
    layout = RingLayout.of(storage, newest)
    anchors = data.draw(st.lists(st.integers(0, items - 1), min_size=1, max_size=5))
    lanes = data.draw(
        st.lists(st.integers(0, cells - 1), min_size=len(anchors), max_size=len(anchors))
    )
    time, lane = torch.tensor(anchors), torch.tensor(lanes)
    seam = layout.seam_span(time)
    stored = flags.reshape(items, cells, width).tolist()

    def flag(position: int, cell: int) -> bool:
        row = position % capacity
        return row < items and any(stored[row][cell])

    expected_lo, expected_hi = [], []
    for t, c, seam_lo, seam_hi in zip(anchors, lanes, *(s.tolist() for s in seam), strict=True):
        lo = t - reach[0]
        for back in range(1, reach[0] + 1):
            if flag(t - back, c):
                lo = t - back + 1
                break
        hi = t + reach[1]
        for ahead in range(reach[1]):
            if flag(t + ahead, c):
                hi = t + ahead
                break
        expected_lo.append(max(lo, seam_lo))
        expected_hi.append(min(hi, seam_hi))
    lo, hi = scan_edges(storage, ("next", "done"), layout, (time, lane), seam, reach)
    assert (lo.tolist(), hi.tolist()) == (expected_lo, expected_hi)
    assert lo.dtype == hi.dtype == torch.long


# ------------------------------------------------------------------ find_start_stop_traj
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    kind=st.sampled_from(["ids", "ends"]),
    at_capacity=st.booleans(),
    cursor=st.one_of(
        st.none(),
        st.integers(-12, 11),
        st.tuples(st.integers(-3, 11), st.sampled_from(["tensor", "range"])),
    ),
    data=st.data(),
)
@settings(deadline=None, max_examples=300)
def test_find_start_stop_traj(
    shape: tuple[int, ...], kind: str, at_capacity: bool, cursor: Any, data: Any
) -> None:
    gen = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    if kind == "ids":
        signal = torch.randint(0, data.draw(st.integers(1, 3)), shape, generator=gen)
    else:
        signal = torch.rand(shape, generator=gen) < data.draw(st.floats(0, 1))
    length = shape[0]
    if isinstance(cursor, tuple):
        last, form = cursor
        cursor = torch.tensor([0, last]) if form == "tensor" else range(last + 1)
        row = last % length if -length <= last < length else None
    else:
        row = None if cursor is None or not -length <= cursor < length else cursor % length
    usable = not at_capacity or cursor is None or row is not None
    if isinstance(cursor, range) and not len(cursor):
        usable = not at_capacity
    kwargs = {"trajectory" if kind == "ids" else "end": signal, "at_capacity": at_capacity}
    if not usable:
        with pytest.raises(ValueError):
            find_start_stop_traj(**kwargs, cursor=cursor)
        return
    start, stop, lengths = find_start_stop_traj(**kwargs, cursor=cursor)
    expected = reference_start_stop(signal, kind, at_capacity, row if cursor is not None else None)
    assert (start.tolist(), stop.tolist(), lengths.tolist()) == expected
    assert start.dtype == stop.dtype == lengths.dtype == torch.long


def reference_start_stop(
    signal: torch.Tensor, kind: str, at_capacity: bool, cursor_row: int | None
) -> tuple[list[list[int]], list[list[int]], list[int]]:
    """torchrl's boundaries, lane by lane in torchrl's lane order, with loops."""
    length, batch = signal.shape[0], signal.shape[1:]
    # torchrl orders lanes by its last batch dim first, then the others in order
    dims = [len(batch) - 1, *range(len(batch) - 1)] if batch else []
    start, stop, lengths = [], [], []
    for picked in itertools.product(*(range(batch[d]) for d in dims)):
        coord = [0] * len(batch)
        for d, c in zip(dims, picked, strict=True):
            coord[d] = c
        values = [signal[(t, *coord)].item() for t in range(length)]
        if kind == "ids":
            ends = [values[t] != values[t + 1] for t in range(length - 1)]
            ends.append(values[-1] != values[0] if at_capacity else True)
        else:
            ends = [bool(v) for v in values]
            if not at_capacity:
                ends[-1] = True
        if at_capacity:
            if cursor_row is not None:
                ends[cursor_row] = True
            if not any(ends):
                ends[-1] = True
        rows = [t for t in range(length) if ends[t]]
        for i, row in enumerate(rows):
            begin = (rows[i - 1] + 1) % length
            start.append([begin, *coord])
            stop.append([row, *coord])
            lengths.append((row - begin) % length + 1)
    return start, stop, lengths


# ------------------------------------------------------------------ the query split
@given(
    capacity=st.integers(1, 9),
    cells=st.sampled_from([1, 1, 2]),
    fill=st.floats(0, 1),
    cursor=st.integers(0, 20),
    kind=st.sampled_from(["ids", "ends"]),
    data=st.data(),
)
@settings(deadline=None, max_examples=150)
def test_query_split(
    capacity: int, cells: int, fill: float, cursor: int, kind: str, data: Any
) -> None:
    items = max(1, round(fill * capacity))
    storage = LazyTensorStorage(capacity * cells, ndim=2 if cells > 1 else 1)
    values = data.draw(stored_items(data.draw(layouts(kind)), items * cells))
    storage.set(
        torch.arange(items),
        TensorDict(values, [items * cells]).reshape(items, *((cells,) if cells > 1 else ())),
    )
    stored = as_lists(storage)  # leaves are flat: one entry per cell
    oldest = cursor % capacity if items == capacity else 0
    rows = [(oldest + i) % capacity for i in range(items)]
    slots = [row * cells + cell for cell in range(cells) for row in rows]
    runs = reference_runs([marker_of(stored, kind, s) for s in slots], kind, lane=items)
    expected = ([run[0] for run in runs], [len(run) for run in runs])
    with warnings.catch_warnings():  # splitting on end flags warns
        warnings.simplefilter("ignore")
        markers = markers_of(set(storage.leaf_keys()), None)
    order, starts, lengths = split_storage(storage, markers, cursor)
    assert order.tolist() == slots
    assert (starts.tolist(), lengths.tolist()) == expected
    # iter_trajectories splits a flat TensorDict (one lane) the same way
    key = "episode" if kind == "ids" else ("next", "done")
    marks = [marker_of(stored, kind, s) for s in slots]
    flat = TensorDict({key: torch.tensor(marks)}, [len(slots)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        starts, lengths = split_data(flat, None, "iter_trajectories")
    runs = reference_runs(marks, kind)
    assert (starts.tolist(), lengths.tolist()) == ([r[0] for r in runs], [len(r) for r in runs])
