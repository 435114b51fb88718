"""Where processes sharing a storage that nobody has written yet meet (``shared_init=True``).

A lazy storage learns its row layout from its first write, and any of the
processes it was handed to may make that write. The storage therefore names,
before it is sent, a directory they all see: the first process to write
creates the rows file there (sparse: its pages cost nothing until written)
and the layout beside it, under an exclusive file lock; the others, and any
process that reads first, map that file. Data written by one process is then
seen by all of them, whoever initialized the storage (torchrl's
``shared_init=True``).
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

import torch

from rbdata.sharing.cleanup import creator_prefix, sweep
from rbdata.sharing.file_lock import shared_dir
from rbdata.sharing.segments import check_space
from rbdata.storages._pytree import _Structure
from rbdata.storages._row_layout import _PackedLayout

try:
    import fcntl
except ImportError:  # Windows: no shared_init rendezvous between processes
    fcntl = None  # type: ignore[assignment]

_LAYOUT = "layout.pkl"
_LOCK = ".lock"
Mapper = Callable[[str, int, int], torch.Tensor]


class _Rendezvous:
    """A directory holding one storage's rows file and layout, once a process wrote.

    Args:
        directory: the directory (created if missing).
        rows_file: name of the rows file in it.
        owner: remove the directory when ``owner`` is garbage collected (None: never).

    Examples:
        >>> import shutil, torch
        >>> meeting = _Rendezvous.temporary()
        >>> mapper = lambda path, rows, width: torch.from_file(
        ...     path, shared=True, size=rows * width, dtype=torch.uint8).view(rows, width)
        >>> layout, rows = meeting.claim({"width": 4}, 10, 4, mapper)
        >>> rows[2] = 7
        >>> again = meeting.attach(mapper)
        >>> again[0], int(again[1][2, 0])
        ({'width': 4}, 7)
        >>> shutil.rmtree(meeting.directory)  # no owner given: the caller removes it
    """

    def __init__(self, directory: str, rows_file: str, owner: Any = None) -> None:
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.rows_file = rows_file
        if owner is not None:
            weakref.finalize(owner, shutil.rmtree, directory, ignore_errors=True)

    @classmethod
    def temporary(cls, owner: Any = None) -> _Rendezvous:
        """A fresh directory in shared memory (``/dev/shm`` where there is one).

        Named after this process (:func:`~.cleanup.creator_prefix`): once it is
        gone, a later rbdata process removes what a crash left (:func:`~.cleanup.sweep`).
        """
        sweep()
        return cls(
            tempfile.mkdtemp(prefix=creator_prefix("shared"), dir=shared_dir()), "rows.bin", owner
        )

    @property
    def rows_path(self) -> str:
        """Path of the rows file."""
        return os.path.join(self.directory, self.rows_file)

    def claim(
        self, layout: dict[str, Any], rows: int, width: int, mapper: Mapper
    ) -> tuple[dict[str, Any], torch.Tensor]:
        """The rows and layout: made from ``layout`` if nobody wrote yet, else the existing ones.

        Args:
            layout: what this process would lay out (picklable).
            rows: number of rows to create.
            width: bytes a row.
            mapper: maps ``(path, rows, width)`` to a ``uint8 [rows, width]`` tensor.

        Returns:
            ``(layout, rows)``: the layout in force (compare it with yours) and the rows.
        """
        if fcntl is None:
            raise RuntimeError("shared_init=True needs POSIX file locks (fcntl).")
        with open(os.path.join(self.directory, _LOCK), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                found = self.attach(mapper)
                if found is not None:
                    return found
                check_space(self.directory, rows * width)  # an error now, not a SIGBUS later
                with open(self.rows_path, "wb") as f:
                    f.truncate(rows * width)  # sparse
                meta = {"layout": layout, "rows": rows, "width": width}
                staged = os.path.join(self.directory, _LAYOUT + ".tmp")
                with open(staged, "wb") as f:
                    pickle.dump(meta, f)
                os.replace(staged, os.path.join(self.directory, _LAYOUT))
                return layout, mapper(self.rows_path, rows, width)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def attach(self, mapper: Mapper) -> tuple[dict[str, Any], torch.Tensor] | None:
        """The layout and rows another process made, or None if nobody wrote yet."""
        try:
            with open(os.path.join(self.directory, _LAYOUT), "rb") as f:
                meta = pickle.load(f)  # written by this library, in this directory
        except FileNotFoundError:
            return None
        return meta["layout"], mapper(self.rows_path, meta["rows"], meta["width"])


def layout_record(
    structure: _Structure, layout: _PackedLayout, lead: tuple[int, ...]
) -> dict[str, Any]:
    """A storage's layout as plain values, for the processes that map the same rows."""
    return {
        "structure": structure.state(),
        "dtypes": [str(dtype).removeprefix("torch.") for dtype in layout.dtypes],
        "shapes": [list(shape) for shape in layout.shapes],
        "lead": list(lead),
    }


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


def map_shared_file(path: str, rows: int, width: int) -> torch.Tensor:
    """``uint8 [rows, width]`` over the file ``path``, mapped shared (every process sees writes)."""
    return torch.from_file(path, shared=True, size=rows * width, dtype=torch.uint8).view(
        rows, width
    )
