"""The packed rows of a tensor storage: their allocation, sharing between processes, pickling.

On the CPU the rows are reserved, not committed (``_pages``): memory is used
page by page as rows are written. Shared before its first write, a storage
meets the other processes at a rendezvous (:mod:`rbdata.sharing.rendezvous`); shared after,
its filled rows are copied into sparse shared memory. :class:`TensorStorage`
(``tensor.py``) reads and writes the rows; this base owns where they live.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple, TypeVar

import torch

from rbdata.sharing.counters import spawning
from rbdata.sharing.rendezvous import _Rendezvous, map_shared_file
from rbdata.sharing.segments import reserve, reserve_shared

from ._base import Storage
from ._layout_record import describe_record, layout_from_record, layout_record
from ._packed import _PackedRows
from ._pages import compact, expand, row_memory
from ._pytree import PathKey, _Structure
from ._row_layout import _PackedLayout
from ._validate import _check_ndim, _tails

#: the storage class ``share_memory_`` returns (``self``)
_R = TypeVar("_R", bound="_TensorRows")
#: ``(old leaf, new leaf)`` pairs of a re-layout
Moves = list[tuple[int, int]]


class _Before(NamedTuple):
    """What a re-layout replaced, to drop or put back."""

    structure: _Structure
    layout: _PackedLayout
    rows: _PackedRows
    warned: set[tuple[PathKey, ...]]


class _TensorRows(Storage):
    """The rows half of a tensor storage: allocation, sharing, memory figures, pickling.

    Not meant to be used on its own (see :class:`~rbdata.TensorStorage`).

    Examples:
        >>> from rbdata import LazyTensorStorage
        >>> issubclass(LazyTensorStorage, _TensorRows)
        True
    """

    def _setup(
        self, max_size: int, device: torch.device | str, ndim: int, compilable: bool
    ) -> None:
        Storage.__init__(self, max_size, compilable=compilable)
        _check_ndim(ndim)
        self.ndim = ndim
        self._device = torch.device(device)
        self._structure: _Structure | None = None
        self._layout: _PackedLayout | None = None
        self._rows_value: _PackedRows | None = None
        # set when the storage is shared before its first write (see rbdata.sharing.rendezvous)
        self._meeting: _Rendezvous | None = None
        self._lead: tuple[int, ...] = ()
        self._cells = 1
        self._capacity = max_size
        self._tails: list[torch.Size] = []
        self._batch_shapes: dict[int, list[torch.Size]] = {}
        self._warned: set[tuple[PathKey, ...]] = set()  # missing keys warned of (_absent_keys)
        self._out_device = self._device
        # the rows went to another process by handle or file name (see _rows_mapped_elsewhere)
        self._exported = False

    @property
    def _rows(self) -> _PackedRows | None:
        """The packed rows; a shared storage another process initialized is mapped here."""
        rows = self._rows_value
        if rows is None and self._meeting is not None:
            found = self._meeting.attach(self._map_rows)
            if found is not None:
                self._adopt(*found)
                rows = self._rows_value
        return rows

    @_rows.setter
    def _rows(self, rows: _PackedRows | None) -> None:
        self._rows_value = rows

    def _allocated(self) -> tuple[_Structure, _PackedLayout, _PackedRows]:
        """The structure, row layout and rows of an initialized storage."""
        if self._rows is None or self._structure is None or self._layout is None:
            raise RuntimeError("the storage is not initialized: nothing to read.")
        return self._structure, self._layout, self._rows

    def _allocate(
        self, structure: _Structure, layout: _PackedLayout, lead: tuple[int, ...]
    ) -> None:
        cells = math.prod(lead)
        capacity = -(-self.max_size // cells)  # ceil: the last item along dim 0 may overshoot
        if self._meeting is None:
            packed = self._new_packed(capacity * cells, layout.row_bytes)
            self._install(structure, layout, lead, packed)
            return
        # shared before any write: meet the other processes (see rbdata.sharing.rendezvous)
        self._on_cpu_for_sharing()
        wanted = layout_record(structure, layout, lead)
        found, packed = self._meeting.claim(
            wanted, capacity * cells, layout.row_bytes, self._map_rows
        )
        if found != wanted:
            raise ValueError(
                "another process initialized this shared storage with other data: its items "
                f"hold {describe_record(found)}, this write {describe_record(wanted)}."
            )
        self._adopt(found, packed)

    def _adopt(self, record: dict[str, Any], packed: torch.Tensor) -> None:
        """Take the rows and layout a rendezvous gave (made here or by another process)."""
        self._install(*layout_from_record(record), packed)

    def _install(
        self,
        structure: _Structure,
        layout: _PackedLayout,
        lead: tuple[int, ...],
        packed: torch.Tensor,
    ) -> None:
        self._structure, self._layout, self._lead = structure, layout, lead
        self._cells = math.prod(lead)
        self._capacity = packed.shape[0] // self._cells
        # torchrl's max_size once laid out: whole items along dim 0 (ndim=2, 100 cells of
        # [3, ...] items: 34 items, max_size 102)
        self.max_size = self._capacity * self._cells
        self._tails = _tails(layout, lead)
        self._batch_shapes = {}
        self._set_rows(layout, packed)

    def _on_cpu_for_sharing(self) -> None:
        if self._device.type != "cpu":
            warnings.warn(
                f"shared_init=True keeps the rows in CPU shared memory: device={self._device} "
                "cannot be honored; the storage is on the CPU.",
                UserWarning,
                stacklevel=4,
            )
            self._device = self._out_device = torch.device("cpu")

    def _new_meeting(self) -> _Rendezvous:
        """Where processes sharing this storage before its first write meet."""
        return _Rendezvous.temporary(owner=self)

    def _map_rows(self, path: str, rows: int, row_bytes: int) -> torch.Tensor:
        return map_shared_file(path, rows, row_bytes)

    def _new_packed(self, rows: int, row_bytes: int) -> torch.Tensor:
        """Zeroed rows; on CPU only reserved: a page is committed when first written."""
        if self._device.type != "cpu":
            return torch.zeros((rows, row_bytes), dtype=torch.uint8, device=self._device)
        flat = reserve(rows * row_bytes)
        return flat.view(rows, row_bytes)

    def _set_rows(self, layout: _PackedLayout, packed: torch.Tensor) -> None:
        out_device = None if packed.device == self._device else self._device
        self._rows = _PackedRows(layout, packed, out_device)
        self._out_device = self._device

    # ------------------------------------------------------------- re-layout
    def _rows_mapped_elsewhere(self) -> bool:
        """Whether other processes may map these rows (their layout must not change then).

        True for rows shared before the first write (``shared_init``, ``share()``
        before any write), rows in shared memory (``share()``, ``shared=True``, a
        same-node map) and rows sent to a process being spawned.
        """
        if self._meeting is not None or self._exported:
            return True
        rows = self._rows_value
        return rows is not None and rows.packed.device.type == "cpu" and rows.packed.is_shared()

    def _relayout(self, structure: _Structure, layout: _PackedLayout, moves: Moves) -> _Before:
        """Lay the rows out anew for ``structure``: every filled row copied, new leaves zero.

        ``moves`` pairs each stored leaf with its place in the new layout. The
        old rows stay until :meth:`_commit_relayout` (or come back with
        :meth:`_undo_relayout`).

        Returns:
            the replaced state, for :meth:`_undo_relayout`.
        """
        old_structure, old_layout, old_rows = self._allocated()
        before = _Before(old_structure, old_layout, old_rows, self._warned)
        filled = self._len * self._cells
        packed = self._regrown_packed(old_rows.packed.shape[0], layout.row_bytes)
        try:
            self._install(structure, layout, self._lead, packed)
            views = self._allocated()[2].views
            for i, j in moves:
                views[j][:filled].copy_(old_rows.views[i][:filled])
        except BaseException:
            self._undo_relayout(before)
            raise
        self._warned = set()  # the missing-keys warnings name the keys of a layout
        return before

    def _commit_relayout(self) -> None:
        """Keep the new rows, drop the old (a file storage moves its new rows file into place)."""
        self._finish_regrow(True)

    def _undo_relayout(self, before: _Before) -> None:
        """Put the rows :meth:`_relayout` replaced back (the new ones are dropped)."""
        self._structure, self._layout = before.structure, before.layout
        self._tails = _tails(before.layout, self._lead)
        self._batch_shapes = {}
        self._rows = before.rows
        self._warned = before.warned
        self._finish_regrow(False)

    def _regrown_packed(self, rows: int, row_bytes: int) -> torch.Tensor:
        """Zeroed rows for a new layout (the old ones are still in use)."""
        return self._new_packed(rows, row_bytes)

    def _finish_regrow(self, keep: bool) -> None:
        """After a re-layout: ``keep`` the new rows, or drop them (nothing to do in memory)."""

    def accepts_max_size(self, max_size: int, lead: Any = None) -> bool:
        """Equal sizes, or this ``max_size`` rounded up to whole items of the dump's ``lead``.

        Only for an ``ndim > 1`` storage not laid out yet: ``ceil(self.max_size / cells) *
        cells``, ``cells`` being the product of ``lead``.
        """
        if max_size == self.max_size:
            return True
        if self.ndim == 1 or self._rows is not None or not isinstance(lead, list | tuple):
            return False
        if not all(type(d) is int and d > 0 for d in lead):
            return False
        cells = math.prod(lead)
        return -(-self.max_size // cells) * cells == max_size

    @property
    def shared_before_write(self) -> bool:
        """Whether the rows go to memory other processes map at the first write.

        True once :meth:`share_memory_` (or ``shared_init=True``) named the
        directory where the first writer, in any process, lays them out.
        """
        return self._meeting is not None

    def share_memory_(self: _R) -> _R:
        """Move the rows and the length to shared memory, for ``torch.multiprocessing``.

        A storage that is not yet initialized names a directory in shared memory
        where the first process to write to it, this one or a child it was sent
        to, lays out the rows; the others map them from there.

        Returns:
            the storage itself.
        """
        self._counters.share()
        if self._rows is not None:
            self._share_rows()
        elif self._meeting is None:
            self._meeting = self._new_meeting()
        return self

    def _share_rows(self) -> None:
        """Rows into fresh shared memory: the filled rows copied, the rest left unwritten.

        Copying only the filled rows keeps the shared file as sparse as the rows
        were (``share_memory_()`` on the tensor would write every page of the
        capacity). Views taken from the storage before do not follow the move.
        """
        _, layout, rows = self._allocated()
        packed = rows.packed
        if packed.device.type == "cpu" and not packed.is_shared():
            shared = reserve_shared(packed.numel()).view(packed.shape)
            used = self._len * self._cells
            shared[:used].copy_(packed[:used])
            self._set_rows(layout, shared)

    def memory_stats(self) -> dict[str, int]:
        """``capacity_bytes`` (rows allocated) and ``resident_bytes`` (of those, in memory).

        On CPU the rows are reserved, not committed: ``resident_bytes`` counts the
        pages of the filled rows the kernel holds in memory (the unwritten rest
        costs nothing). Device memory is committed whole. Empty before the first
        write.
        """
        rows = self._rows
        return {} if rows is None else row_memory(rows.packed, self._len * self._cells)

    def __getstate__(self) -> dict[str, Any]:
        if spawning():  # a child being started gets the rows by handle
            if self._rows is None and self._meeting is None:
                raise RuntimeError(
                    f"Cowardly refusing to share a storage of type {type(self).__name__} between "
                    "processes if it has not been initialized yet: write some data in this "
                    "process first, or build it with shared_init=True."
                )
            if self._rows is not None:
                self._share_rows()  # sparse, rather than torch's copy of every page
            self._exported = True  # the child maps these rows: their layout stays
        state = self.__dict__.copy()
        rows = state.pop("_rows_value")
        if self._meeting is not None:  # the receiver maps the rows file itself
            rows = None
        state["_packed"] = None if rows is None else self._packed_to_pickle(rows.packed)
        if self._structure is not None:
            state["_structure"] = self._structure.state()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        packed = state.pop("_packed")
        self._warned = set()  # pickled before it was kept: nothing warned of yet
        self.__dict__.update(state)
        self._rows = None
        if self._structure is not None:
            self._structure = _Structure.from_state(self._structure)
        if packed is not None and self._layout is not None:
            self._set_rows(self._layout, self._packed_from_pickle(packed))

    def _packed_to_pickle(self, packed: torch.Tensor) -> Any:
        """The rows for a pickle: by handle when shared, else the filled ones (``compact``)."""
        return compact(packed, self._len * self._cells)

    def _packed_from_pickle(self, obj: Any) -> torch.Tensor:
        return expand(obj)
