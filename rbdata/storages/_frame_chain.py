"""Which slots of a frame-deduplicated storage borrow their frames from their neighbours.

:class:`~rbdata.storages.FrameDedupStorage` keeps, for each deduplicated key
``X``, one stored array (``X`` itself, or only its newest frame when ``X`` is a
frame stack). This module holds what rebuilds the full values from it:

- ``next_follows[s]``: ``("next", X)`` of slot ``s`` equals ``X`` of slot
  ``s + 1`` (modulo the capacity); otherwise the value is kept in ``side_next``.
- ``stack_follows[s]`` (frame stacks of depth ``K``): ``X[s][:-1]`` equals
  ``X[s - 1][1:]``; otherwise the whole stack is kept in ``side_stack``.

Both flags are set by comparing the values written (never assumed from
``done`` flags), and a neighbour a write is about to change is first copied
to the side store: a read therefore always returns what was written. A slot
with neither flag nor side entry was never written (a write past the filled
slots, as a plain storage allows): it reads as zeros, as a plain one does.
"""

from __future__ import annotations

from typing import Any

import torch

Leaves = list[torch.Tensor]


class _FrameChain:
    """Follow flags and side stores of ``capacity`` slots.

    Args:
        capacity: number of slots.
        stack: frame-stack depth ``K`` (dim 0 of each deduplicated leaf), or None
            when whole values are stored.
    """

    def __init__(self, capacity: int, stack: int | None) -> None:
        self.capacity = capacity
        self.stack = stack
        self.next_follows = torch.zeros(capacity, dtype=torch.bool)
        self.stack_follows = torch.zeros(capacity, dtype=torch.bool)
        self.side_next: dict[int, Leaves] = {}
        self.side_stack: dict[int, Leaves] = {}

    # ----------------------------------------------------------------- read
    def values(self, views: Leaves, slots: torch.Tensor) -> Leaves:
        """``X`` at ``slots`` (1-D int64, filled slots) for each stored view ``[capacity, ...]``."""
        if self.stack is None:
            return [_gather(view, slots) for view in views]
        k, n = self.stack, slots.shape[0]
        lags = [slots]  # lags[j]: the slot whose frame is the stack's frame k - 1 - j
        cur = slots
        alive = torch.ones(n, dtype=torch.bool)
        ends = []  # rows whose chain stops: their older frames come from the side store
        for step in range(1, k):
            follows = self.stack_follows[cur]
            ended = alive & ~follows
            if bool(ended.any()):
                ends.append((ended.nonzero().flatten(), cur, step - 1))
                alive = alive & follows
            cur = torch.where(alive, (cur - 1) % self.capacity, cur)
            lags.append(cur)
        # one gather of every frame, item by item, oldest first: [n, k, *frame]
        order = torch.stack(lags[::-1], 1).view(-1)
        outs = [_gather(view, order).view(n, k, *view.shape[1:]) for view in views]
        for rows, at, back in ends:
            self._from_side(outs, rows, at, back)
        return outs

    def _from_side(self, outs: Leaves, rows: torch.Tensor, cur: torch.Tensor, back: int) -> None:
        """Rows whose chain stops ``back`` slots before them: their older frames from the side."""
        k = self.stack
        assert k is not None
        for row in rows.tolist():
            stored = self.side_stack.get(int(cur[row]))
            for i, out in enumerate(outs):
                if stored is None:  # a slot never written (a write past the filled ones)
                    out[row, : k - 1 - back] = 0
                else:
                    out[row, : k - 1 - back] = stored[i][back : k - 1]

    def nexts(self, views: Leaves, slots: torch.Tensor) -> Leaves:
        """``("next", X)`` at ``slots`` (1-D int64, filled slots)."""
        return self.read(views, slots, with_values=False)[1]

    def read(
        self, views: Leaves, slots: torch.Tensor, with_values: bool = True
    ) -> tuple[Leaves, Leaves]:
        """``X`` (empty unless ``with_values``) and ``("next", X)`` at ``slots``, in one gather."""
        follows = self.next_follows[slots]
        succ = torch.where(follows, (slots + 1) % self.capacity, slots)
        n = slots.shape[0]
        both = self.values(views, torch.cat([slots, succ]) if with_values else succ)
        values = [leaf[:n] for leaf in both] if with_values else []
        outs = [leaf[n:] for leaf in both] if with_values else both
        for row in (~follows).nonzero().flatten().tolist():
            stored = self.side_next.get(int(slots[row]))
            for i, out in enumerate(outs):
                out[row] = 0 if stored is None else stored[i]
        return values, outs

    # ---------------------------------------------------------------- write
    def before_write(self, views: Leaves, slots: torch.Tensor, filled: int) -> None:
        """Copy aside what filled neighbours outside ``slots`` read from ``slots``."""
        if not filled:
            return
        written = set(slots.tolist())
        cap = self.capacity
        preds = sorted({(s - 1) % cap for s in written} - written)
        preds = [p for p in preds if p < filled and bool(self.next_follows[p])]
        succs: list[int] = []
        if self.stack is not None:
            near = {(s + j) % cap for s in written for j in range(1, self.stack)} - written
            succs = [q for q in sorted(near) if q < filled and bool(self.stack_follows[q])]
        # read every value first: the flags below change what a read rebuilds
        kept_next = self._rows(self.nexts(views, torch.tensor(preds, dtype=torch.long)))
        kept_stack = self._rows(self.values(views, torch.tensor(succs, dtype=torch.long)))
        for p, value in zip(preds, kept_next, strict=True):
            self.side_next[p] = value
            self.next_follows[p] = False
        for q, value in zip(succs, kept_stack, strict=True):
            self.side_stack[q] = value
            self.stack_follows[q] = False

    @staticmethod
    def _rows(leaves: Leaves) -> list[Leaves]:
        n = leaves[0].shape[0] if leaves else 0
        return [[leaf[i].clone() for leaf in leaves] for i in range(n)]

    def after_write(
        self, views: Leaves, slots: torch.Tensor, values: Leaves, nexts: Leaves, filled: int
    ) -> None:
        """Set the flags of the written ``slots`` (``values``/``nexts``: what was written there).

        ``filled`` is the filled length after the write; ``views`` already hold the write.
        """
        cap, n = self.capacity, slots.shape[0]
        for s in slots.tolist():
            self.side_next.pop(s, None)
            self.side_stack.pop(s, None)
        position = _Lookup(slots)
        succ = (slots + 1) % cap
        succ_pos = position(succ)
        outside = (succ_pos < 0) & (succ < filled)
        their = self.values(views, succ[outside])  # successors this write left as they were
        follows = torch.zeros(n, dtype=torch.bool)
        inside = succ_pos >= 0
        follows[inside] = _equal_rows(nexts, values, inside, succ_pos[inside])
        follows[outside] = _equal_rows(nexts, their, outside, None)
        self.next_follows[slots] = follows
        for row in (~follows).nonzero().flatten().tolist():
            self.side_next[int(slots[row])] = [leaf[row].clone() for leaf in nexts]
        self._fold_predecessors(slots, values, position, filled)
        if self.stack is not None:
            self._stack_flags(views, slots, values, position, filled)

    def _fold_predecessors(
        self, slots: torch.Tensor, values: Leaves, position: _Lookup, filled: int
    ) -> None:
        """A kept ``("next", X)`` of a slot before the write equal to the new ``X``: borrow it."""
        pred = (slots - 1) % self.capacity
        for row in ((position(pred) < 0) & (pred < filled)).nonzero().flatten().tolist():
            p = int(pred[row])
            kept = self.side_next.get(p)
            if kept is not None and all(
                torch.equal(k, v[row]) for k, v in zip(kept, values, strict=True)
            ):
                del self.side_next[p]
                self.next_follows[p] = True

    def _stack_flags(
        self, views: Leaves, slots: torch.Tensor, values: Leaves, position: _Lookup, filled: int
    ) -> None:
        pred = (slots - 1) % self.capacity
        pred_pos = position(pred)
        outside = (pred_pos < 0) & (pred < filled)
        theirs = self.values(views, pred[outside])
        n = slots.shape[0]
        follows = torch.zeros(n, dtype=torch.bool)
        inside = pred_pos >= 0
        heads = [v[:, 1:] for v in values]
        tails = [v[:, :-1] for v in values]
        follows[inside] = _equal_rows(tails, heads, inside, pred_pos[inside])
        follows[outside] = _equal_rows(tails, [t[:, 1:] for t in theirs], outside, None)
        self.stack_follows[slots] = follows
        for row in (~follows).nonzero().flatten().tolist():
            self.side_stack[int(slots[row])] = [leaf[row].clone() for leaf in values]

    # ------------------------------------------------------------ lifecycle
    def clear(self) -> None:
        """Forget every slot."""
        self.next_follows.zero_()
        self.stack_follows.zero_()
        self.side_next.clear()
        self.side_stack.clear()

    def state(self, filled: int, specs: list[tuple[torch.Size, torch.dtype]]) -> dict[str, Any]:
        """Flags of the filled slots and the side stores as tensors (``weights_only``-safe).

        Args:
            filled: the filled slots.
            specs: each deduplicated leaf's per-item shape (of ``X`` whole) and dtype.
        """
        out: dict[str, Any] = {
            "stack": self.stack,
            "next_follows": self.next_follows[:filled].clone(),
            "stack_follows": self.stack_follows[:filled].clone(),
        }
        for name, store in (("side_next", self.side_next), ("side_stack", self.side_stack)):
            slots = sorted(store)
            out[name + "_slots"] = torch.tensor(slots, dtype=torch.long)
            out[name] = [
                torch.stack([store[s][i] for s in slots])
                if slots
                else torch.empty((0, *shape), dtype=dtype)
                for i, (shape, dtype) in enumerate(specs)
            ]
        return out

    def load(self, state: dict[str, Any], filled: int) -> None:
        """Restore :meth:`state` (checked by the caller: see ``frames``)."""
        self.clear()
        self.next_follows[:filled] = state["next_follows"]
        self.stack_follows[:filled] = state["stack_follows"]
        for name, store in (("side_next", self.side_next), ("side_stack", self.side_stack)):
            leaves = state[name]
            for row, slot in enumerate(state[name + "_slots"].tolist()):
                store[slot] = [leaf[row].clone() for leaf in leaves]

    def side_bytes(self) -> int:
        """Bytes held by the side stores."""
        stores = (*self.side_next.values(), *self.side_stack.values())
        return sum(t.numel() * t.element_size() for leaves in stores for t in leaves)


def _gather(view: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``view[slots]`` as one ``index_select`` of whole items (rows of a packed storage)."""
    shape = view.shape[1:]
    numel = shape.numel()
    flat = view.as_strided((view.shape[0], numel), (view.stride(0), 1))
    return torch.index_select(flat, 0, slots).view(slots.shape[0], *shape)


class _Lookup:
    """Position in a write (slots without repeats) of each queried slot, -1 if absent."""

    def __init__(self, slots: torch.Tensor) -> None:
        order = torch.argsort(slots, stable=True)
        self._sorted = slots[order]
        self._order = order

    def __call__(self, query: torch.Tensor) -> torch.Tensor:
        if not self._sorted.numel():
            return torch.full_like(query, -1)
        j = torch.searchsorted(self._sorted, query, right=True) - 1
        j = j.clamp(min=0)
        hit = self._sorted[j] == query
        return torch.where(hit, self._order[j], torch.full_like(query, -1))


def _equal_rows(
    left: Leaves, right: Leaves, rows: torch.Tensor, right_rows: torch.Tensor | None
) -> torch.Tensor:
    """Per selected row of ``left``: bit for bit equal, in every leaf, to its row of ``right``.

    ``rows`` (a mask) selects rows of ``left``; ``right_rows`` picks rows of ``right``
    (None: ``right`` holds exactly the selected rows). Bits, not ``==``: ``-0.0`` and
    ``0.0`` differ, as a plain storage would return them.
    """
    picked = rows.nonzero().flatten()
    count = picked.shape[0]
    result = torch.ones(count, dtype=torch.bool)
    if not count:
        return result
    n = left[0].shape[0]
    # a write of consecutive slots: each row's neighbour is the next (or previous) row
    ahead = _shifted(picked, right_rows, n, 1)
    behind = not ahead and _shifted(picked, right_rows, n, -1)
    for a, b in zip(left, right, strict=True):
        if ahead:
            mine, other = a[:-1], b[1:]
        elif behind:
            mine, other = a[1:], b[:-1]
        else:
            mine = a if count == n else a.index_select(0, picked)
            other = b if right_rows is None else b.index_select(0, right_rows)
        result &= (_words(mine) == _words(other)).all(1)
    return result


def _shifted(picked: torch.Tensor, right_rows: torch.Tensor | None, n: int, by: int) -> bool:
    """Whether ``picked`` is all rows but one end and ``right_rows`` is ``picked + by``."""
    if right_rows is None or picked.shape[0] != n - 1:
        return False
    first = 0 if by > 0 else 1
    return int(picked[0]) == first and torch.equal(right_rows, picked + by)


def _words(t: torch.Tensor) -> torch.Tensor:
    """``t`` (``[m, ...]``) as ``[m, -1]`` raw bytes, as 8-byte words where they align."""
    flat = t.reshape(t.shape[0], -1)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    raw = flat if flat.dtype is torch.uint8 else flat.view(torch.uint8)
    if raw.shape[1] % 8 == 0 and raw.storage_offset() % 8 == 0 and raw.stride(0) % 8 == 0:
        return raw.view(torch.int64)
    return raw
