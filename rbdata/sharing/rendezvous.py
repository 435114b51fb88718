"""Where processes sharing a storage that nobody has written yet meet (``shared_init=True``).

A lazy storage learns its row layout from its first write, and any of the
processes it was handed to may make that write. The storage therefore names,
before it is sent, a directory they all see: the first process to write
creates the rows file there (sparse: its pages cost nothing until written)
and the layout beside it, under an exclusive file lock; the others, and any
process that reads first, map that file. Data written by one process is then
seen by all of them, whoever initialized the storage (torchrl's
``shared_init=True``).

The layout is JSON (``layout.json``): nothing read from the directory is
unpickled. The directory is made with mode 0700, or used only if nobody but
the user and root can plant files in it (:mod:`rbdata._trust`); the rows
file and the layout are made with mode 0600.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

import torch

from rbdata._trust import check_trusted_dir, private_dir
from rbdata.sharing.cleanup import creator_prefix, sweep
from rbdata.sharing.file_lock import shared_dir
from rbdata.sharing.segments import check_space

try:
    import fcntl
except ImportError:  # Windows: no shared_init rendezvous between processes
    fcntl = None  # type: ignore[assignment]

_LAYOUT = "layout.json"
_LOCK = ".lock"
Mapper = Callable[[str, int, int], torch.Tensor]


class _Rendezvous:
    """A directory holding one storage's rows file and layout, once a process wrote.

    Args:
        directory: the directory (created if missing).
        rows_file: name of the rows file in it.
        owner: remove the directory when ``owner`` is garbage collected (None: never).

    Raises:
        UntrustedPathError: if another user could plant files in ``directory``.

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
        private_dir(directory, "the shared storage's scratch_dir")
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
            layout: what this process would lay out (JSON values: the storage's own record).
            rows: number of rows to create.
            width: bytes a row.
            mapper: maps ``(path, rows, width)`` to a ``uint8 [rows, width]`` tensor.

        Returns:
            ``(layout, rows)``: the layout in force (compare it with yours) and the rows.
        """
        if fcntl is None:
            raise RuntimeError("shared_init=True needs POSIX file locks (fcntl).")
        check_trusted_dir(self.directory, "the shared storage's scratch_dir")
        lock_fd = os.open(os.path.join(self.directory, _LOCK), os.O_RDWR | os.O_CREAT, 0o600)
        with open(lock_fd, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                found = self.attach(mapper)
                if found is not None:
                    return found
                check_space(self.directory, rows * width)  # an error now, not a SIGBUS later
                with _private_file(self.rows_path) as f:
                    f.truncate(rows * width)  # sparse
                meta = {"layout": layout, "rows": rows, "width": width}
                staged = os.path.join(self.directory, _LAYOUT + ".tmp")
                with _private_file(staged) as f:
                    f.write(json.dumps(meta).encode())
                os.replace(staged, os.path.join(self.directory, _LAYOUT))
                return layout, mapper(self.rows_path, rows, width)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def attach(self, mapper: Mapper) -> tuple[dict[str, Any], torch.Tensor] | None:
        """The layout and rows another process made, or None if nobody wrote yet.

        Raises:
            ValueError: if the layout file is not what :meth:`claim` writes.
        """
        path = os.path.join(self.directory, _LAYOUT)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        check_trusted_dir(self.directory, "the shared storage's scratch_dir")
        try:
            meta = json.loads(raw)
        except ValueError as err:
            raise ValueError(f"{path}: not a shared storage's layout ({err}).") from err
        if (
            not isinstance(meta, dict)
            or not isinstance(meta.get("layout"), dict)
            or not all(type(meta.get(key)) is int and meta[key] > 0 for key in ("rows", "width"))
        ):
            raise ValueError(
                f"{path}: not a shared storage's layout (expected an object with 'layout', "
                f"'rows' and 'width')."
            )
        return meta["layout"], mapper(self.rows_path, meta["rows"], meta["width"])


def _private_file(path: str) -> Any:
    """``path`` opened for writing (truncated), made with mode 0600 if it is new."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb")


def map_shared_file(path: str, rows: int, width: int) -> torch.Tensor:
    """``uint8 [rows, width]`` over the file ``path``, mapped shared (every process sees writes)."""
    return torch.from_file(path, shared=True, size=rows * width, dtype=torch.uint8).view(
        rows, width
    )
