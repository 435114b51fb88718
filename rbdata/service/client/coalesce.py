"""Coalesced writes: a collector's small ``add``/``extend`` calls sent as one ``extend``.

A collector that writes one transition per environment step pays a Ray round
trip per step. A client built with ``coalesce=n`` (``rb.client(coalesce=n)``
or ``service_backend_options={"coalesce": n}``) instead queues each
``add``/``extend`` of fewer than ``n`` rows (a copy of it: the caller may reuse
its tensors) and returns None at once; the queue is sent as one ``extend`` of
the queued rows, in order (``torch.cat`` of the queued batches, an ``add``
counting as a batch of one row):

- when it holds ``n`` rows or more, or more than ``max_bytes`` bytes;
- on ``client.flush()``, when the client is pickled, and before any other call
  of the same client (a client reads its own writes: ``len``, ``sample``,
  ``stats``, ... see them);
- on ``rb.close()``/``rb.shutdown()`` for a buffer built with the option;
- before a write that does not join the queue: one of ``n`` rows or more, one
  with keyword arguments (``update_priority=``), data that is not a tensor or a
  TensorDict of tensors, or data whose structure differs from the queued
  items' (other keys, dtypes, devices or row shapes): the queue is sent first,
  then that write (which then starts a new queue, or is sent at once and
  returns its indices).

Only tensors and TensorDicts are coalesced, on buffers that extend along
dimension 0 (``dim_extend == 0``). A coalesced write that fails in the actor
raises where the queue was sent (``flush()``, the client's next call, or the
write that filled the queue), with a note naming the queued writes; those
writes are not stored (the actor's ``extend`` stores all the rows or none).
Writes still queued when a process exits are lost: flush before a task returns.

Examples:
    >>> import torch
    >>> from rbdata.service.client.coalesce import CoalescedWrites
    >>> queue, sent = CoalescedWrites(4), []
    >>> [queue.offer("add", (torch.tensor([i, i]),), {}, sent.append) for i in range(3)]
    [True, True, True]
    >>> len(queue), sent
    (3, [])
    >>> queue.offer("add", (torch.tensor([3, 3]),), {}, sent.append)  # 4 rows: sent as one
    True
    >>> sent[0].tolist(), len(queue)
    ([[0, 0], [1, 1], [2, 2], [3, 3]], 0)
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any

import torch
from tensordict import TensorDictBase

__all__ = ["MAX_BYTES", "CoalescedWrites", "CoalescingClient"]

_WRITES = frozenset({"add", "extend"})  # the calls a queue takes

#: The default bound on the bytes a queue holds before it is sent.
MAX_BYTES = 4 << 20


def _leaf_shape(value: torch.Tensor, lead: int) -> tuple[Hashable, ...]:
    return (value.dtype, value.device, tuple(value.shape[lead:]))


def _as_rows(name: str, data: Any) -> tuple[Hashable, Any, int, int] | None:
    """``(structure, a copy of data, number of rows, bytes)``; None: not coalescable."""
    lead = 0 if name == "add" else 1
    if isinstance(data, torch.Tensor):
        if data.ndim < lead:
            return None
        structure: Hashable = ("tensor", *_leaf_shape(data, lead))
        nbytes = data.numel() * data.element_size()
    elif isinstance(data, TensorDictBase):
        if data.batch_dims < lead:
            return None
        leaves, nbytes = [], 0
        for key, value in data.items(True, True):
            if not isinstance(value, torch.Tensor):
                return None
            leaves.append((key, *_leaf_shape(value, lead)))
            nbytes += value.numel() * value.element_size()
        leaves.sort(key=lambda leaf: str(leaf[0]))
        structure = ("tensordict", tuple(data.batch_size[lead:]), tuple(leaves))
    else:
        return None
    return structure, data.clone(), 1 if name == "add" else int(data.shape[0]), int(nbytes)


def _joined(items: list[tuple[Any, bool]]) -> Any:
    """The queued items as one batch: stacked adds, concatenated extends (adds as one row)."""
    if all(added for _, added in items):
        return torch.stack([data for data, _ in items], 0)
    batches = [data.unsqueeze(0) if added else data for data, added in items]
    return batches[0] if len(batches) == 1 else torch.cat(batches, 0)


class CoalescedWrites:
    """One client's queue of small writes (see the module docstring); not thread-bound.

    Args:
        rows: writes of fewer rows join the queue, which is sent once it holds this many
            (0: no coalescing).
        max_bytes: the queue is also sent once it holds more bytes than this.

    Raises:
        TypeError: if ``rows`` or ``max_bytes`` is not an int.
        ValueError: if ``rows`` is negative or ``max_bytes`` is below 1.

    Examples:
        >>> CoalescedWrites(64).rows, CoalescedWrites(0).rows
        (64, 0)
        >>> CoalescedWrites(-1)
        Traceback (most recent call last):
        ...
        ValueError: coalesce must be an int >= 0 (rows per coalesced extend; 0: off), got -1.
    """

    def __init__(self, rows: int, max_bytes: int = MAX_BYTES) -> None:
        for name, value in (("coalesce", rows), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}.")
        if rows < 0:
            raise ValueError(
                f"coalesce must be an int >= 0 (rows per coalesced extend; 0: off), got {rows}."
            )
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be an int >= 1, got {max_bytes}.")
        self.rows = rows
        self.max_bytes = max_bytes
        self._items: list[tuple[Any, bool]] = []  # (a copy of the data, whether it was an add)
        self._structure: Hashable = None
        self._queued_rows = 0
        self._queued_bytes = 0
        self._writes = 0  # the add/extend calls queued
        self._lock = threading.RLock()

    def __len__(self) -> int:
        """The rows queued."""
        return self._queued_rows

    def offer(
        self,
        name: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        send: Callable[[Any], Any],
    ) -> bool:
        """Queue the write ``name(*args, **kwargs)`` if it is small; whether it was queued.

        A write that is not queued finds the queue sent (by ``send(batch)``) before it
        returns, so that the caller sends it next, in order.
        """
        rows = None
        if self.rows and not kwargs and len(args) == 1:
            rows = _as_rows(name, args[0])
        with self._lock:
            if rows is None or not 0 < rows[2] < self.rows:
                self.flush(send)
                return False
            structure, batch, count, nbytes = rows
            if self._items and structure != self._structure:
                self.flush(send)  # another structure: what is queued goes first
            self._items.append((batch, name == "add"))
            self._structure = structure
            self._queued_rows += count
            self._queued_bytes += nbytes
            self._writes += 1
            if self._queued_rows >= self.rows or self._queued_bytes > self.max_bytes:
                self.flush(send)
            return True

    def flush(self, send: Callable[[Any], Any]) -> None:
        """Send the queued rows as one batch (``send(batch)``); nothing to do when empty.

        Raises:
            Exception: what ``send`` raised (with a note naming the queued writes, which
                are dropped).
        """
        if not self._items:
            return
        with self._lock:
            items, writes, rows = self._items, self._writes, self._queued_rows
            self._items, self._structure = [], None
            self._queued_rows = self._queued_bytes = self._writes = 0
            if not items:
                return
            try:
                send(_joined(items))
            except Exception as err:
                if sys.version_info >= (3, 11):  # BaseException.add_note
                    err.add_note(
                        f"raised by a coalesced extend of {writes} queued add/extend calls "
                        f"({rows} rows) of this client (coalesce={self.rows}); those writes "
                        "were not stored."
                    )
                raise


class CoalescingClient:
    """The coalescing part of :class:`~rbdata.service.RayBufferClient` (mixed into it).

    The client queues a write with :meth:`_queue_write` before sending it, and sends
    the queue (:meth:`_flush_coalesced`) on ``flush()`` and before any other call.
    """

    _coalesced: CoalescedWrites

    def _cached(self, name: str) -> Any:
        raise NotImplementedError  # the client provides it

    def _call_now(self, name: str, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError  # the client provides it

    def _queue_write(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        """Queue a small write; whether it was queued (if not, the queue was sent first)."""
        if not self._coalesced.rows or name not in _WRITES:
            return False
        if self._cached("dim_extend") != 0:  # the queue concatenates along dimension 0
            self._flush_coalesced()
            return False
        return self._coalesced.offer(name, args, kwargs, self._send_coalesced)

    def _send_coalesced(self, batch: Any) -> None:
        self._call_now("extend", batch)

    def _flush_coalesced(self) -> None:
        self._coalesced.flush(self._send_coalesced)
